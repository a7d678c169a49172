//! The `wasi_cuda` guest API (`docs/ABI.md`) end to end on the CPU driver:
//! real guests (WAT compiled by wasmtime), real stores, `call_async`. Each
//! test drives calls with exact arguments through the test guest's thin
//! wrappers and checks the errno, guest memory, the `last_error` text and
//! the live handle counts: a failed call issues no handle and writes no
//! out-pointer.

#[allow(dead_code)] // the shared test guest and generator; some of it is for other suites
mod common;

use std::path::PathBuf;

use common::{
    ARGS, DATA, DEVICE_BYTES, Fixture, Guest, INITIAL_PAGES, MEMORY_LIMIT, NAME, OUT, OUT2, PAGE,
    Rng, SENTINEL, TEXT,
};
use tensorwasm_core::{
    GpuDriver,
    abi::{ArgDescriptor, Errno, Handle},
};
use tensorwasm_cpu::{BlockContext, HostKernelFn};
use tensorwasm_embed::{
    memory::GuestMemoryError,
    run::{DriverChoice, RunOptions},
    runtime::GuestRuntime,
    twins,
    wasi_cuda::WasiCudaLimits,
};
use wasmtime::Val;

// The codes as the guest sees them, from core's table (`docs/ABI.md`).
const EINVAL: i32 = Errno::EINVAL.code();
const EFAULT: i32 = Errno::EFAULT.code();
const EALIGN: i32 = Errno::EALIGN.code();
const EOVERFLOW: i32 = Errno::EOVERFLOW.code();
const EBADH: i32 = Errno::EBADH.code();
const ENOMEM: i32 = Errno::ENOMEM.code();
const ENODEV: i32 = Errno::ENODEV.code();
const ENOTSUP: i32 = Errno::ENOTSUP.code();
const EIMAGE: i32 = Errno::EIMAGE.code();
const ENOENT: i32 = Errno::ENOENT.code();
const ELAUNCH: i32 = Errno::ELAUNCH.code();
const ENOTADDR: i32 = Errno::ENOTADDR.code();
const ELIMIT: i32 = Errno::ELIMIT.code();

/// XOR-ing a handle with this flips its generation's lowest bit: a forged
/// handle for a slot that exists.
const FLIP_GENERATION: u64 = 1 << 16;

fn example(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("examples")
        .join(name)
}

/// Asserts that a call failed with `errno`, issued and released no handle,
/// recorded a last error that names `call` and the errno, and (for calls
/// with an out-pointer) left the out-pointer at `out` holding [`SENTINEL`].
#[track_caller]
fn assert_refused(
    g: &Guest,
    result: i32,
    errno: i32,
    call: &str,
    out: Option<u32>,
    live: [usize; 4],
) {
    assert_eq!(result, errno, "{call}: {}", g.last_error());
    g.assert_last_error(call, errno_name(errno));
    assert_eq!(g.live(), live, "{call} changed the live handles");
    if let Some(out) = out.filter(|&out| out as usize + 8 <= g.mem_size()) {
        assert_eq!(g.read_u64(out), SENTINEL, "{call} wrote its out-pointer");
    }
}

/// The ABI's name of an errno code.
fn errno_name(code: i32) -> &'static str {
    Errno::from_code(code).map_or("SUCCESS", Errno::name)
}

/// Runs `f` (one call) and asserts it failed with `errno` and that the last
/// error names `call` and the errno.
#[track_caller]
fn refused(g: &mut Guest, errno: i32, call: &str, f: impl FnOnce(&mut Guest) -> i32) {
    let r = f(g);
    assert_eq!(r, errno, "{call}: {}", g.last_error());
    g.assert_last_error(call, errno_name(errno));
}

// ---------------------------------------------------------------- devices

#[test]
fn device_count_writes_one_and_checks_its_out_pointer() {
    let f = Fixture::new();
    let mut g = f.guest();
    g.write_u64(OUT, SENTINEL);
    assert_eq!(g.device_count(OUT), 0);
    assert_eq!(g.read_u32(OUT), 1);
    assert_eq!(g.last_error(), "", "a success sets no error");

    g.write_u64(OUT, SENTINEL);
    for misaligned in [OUT + 1, OUT + 2, OUT + 3] {
        assert_eq!(g.device_count(misaligned), EALIGN);
        g.assert_last_error("device_count", "EALIGN");
    }
    assert_eq!(g.read_u64(OUT), SENTINEL);
    let end = g.mem_size() as u32;
    for outside in [end, end + 4, u32::MAX - 3] {
        assert_eq!(g.device_count(outside), EFAULT, "{outside:#x}");
        g.assert_last_error("device_count", "EFAULT");
    }
    // The last word of memory is fine.
    assert_eq!(g.device_count(end - 4), 0);
    assert_eq!(g.read_u32(end - 4), 1);
}

#[test]
fn device_info_record_matches_the_driver() {
    let f = Fixture::new();
    let mut g = f.guest();
    let info = f.driver.device().clone();
    g.write(DATA, &[0xee; 160]);
    assert_eq!(g.device_info(0, DATA, 128), 0, "{}", g.last_error());
    let r = g.read(DATA, 160);
    let u32_at = |at: usize| u32::from_le_bytes(r[at..at + 4].try_into().unwrap());
    assert_eq!(u32_at(0), 1, "driver kind: 1 = CPU");
    assert_eq!((u32_at(4), u32_at(8)), (0, 0), "no compute capability");
    assert_eq!(u32_at(12), info.multiprocessor_count);
    assert_eq!(r[16..24], info.total_memory.to_le_bytes());
    assert_eq!(info.total_memory, DEVICE_BYTES);
    assert_eq!(u32_at(24), info.max_threads_per_block);
    let (bx, by, bz) = info.max_block_dim;
    assert_eq!([u32_at(28), u32_at(32), u32_at(36)], [bx, by, bz]);
    let (gx, gy, gz) = info.max_grid_dim;
    assert_eq!([u32_at(40), u32_at(44), u32_at(48)], [gx, gy, gz]);
    assert_eq!(u32_at(52), info.max_shared_memory_per_block);
    assert_eq!(u32_at(56), info.warp_size);
    let flags = u32_at(60);
    assert_eq!(flags & 2, 2, "bit 1: managed guest memory is addressable");
    assert_eq!(flags & 1, u32::from(info.concurrent_managed_access));
    assert_eq!(flags & !3, 0, "no other flag bits");
    let name_len = info.name.len();
    assert!(name_len > 0 && name_len <= 64);
    assert_eq!(&r[64..64 + name_len], info.name.as_bytes());
    assert!(r[64 + name_len..128].iter().all(|&b| b == 0), "NUL-padded");
    assert_eq!(r[128..], [0xee; 32], "nothing past the record");

    // A larger out_len still writes 128 bytes.
    g.write(DATA, &[0xee; 300]);
    assert_eq!(g.device_info(0, DATA, 300), 0);
    assert_eq!(g.read(DATA, 128), r[..128]);
    assert_eq!(g.read(DATA + 128, 172), vec![0xee; 172]);
}

#[test]
fn device_info_truncates_and_refuses() {
    let f = Fixture::new();
    let mut g = f.guest();
    assert_eq!(g.device_info(0, DATA, 128), 0);
    let full = g.read(DATA, 128);
    for n in [0usize, 1, 4, 17, 63, 64, 100, 127] {
        g.write(DATA + 0x100, &[0xee; 130]);
        assert_eq!(g.device_info(0, DATA + 0x100, n as i32), 0, "out_len {n}");
        let got = g.read(DATA + 0x100, 130);
        assert_eq!(got[..n], full[..n], "out_len {n}");
        assert!(
            got[n..].iter().all(|&b| b == 0xee),
            "out_len {n} wrote past"
        );
    }

    g.write(DATA, &[0xee; 128]);
    for device in [1, 2, -1, i32::MAX] {
        assert_eq!(g.device_info(device, DATA, 128), ENODEV, "device {device}");
        g.assert_last_error("device_info", "ENODEV");
    }
    for len in [-1, i32::MIN] {
        assert_eq!(g.device_info(0, DATA, len), EINVAL);
        assert!(
            g.assert_last_error("device_info", "EINVAL")
                .contains("negative")
        );
    }
    let end = g.mem_size() as u32;
    assert_eq!(g.device_info(0, end - 127, 128), EFAULT);
    g.assert_last_error("device_info", "EFAULT");
    // ... but a truncated record that fits is fine, at the very end.
    assert_eq!(g.device_info(0, end - 16, 16), 0);
    assert_eq!(g.read(end - 16, 16), full[..16]);
    assert_eq!(g.read(DATA, 128), vec![0xee; 128], "failures wrote nothing");
}

// ---------------------------------------------------------------- buffers

#[test]
fn buffers_alloc_report_their_size_and_free() {
    let f = Fixture::new();
    let mut g = f.guest();
    let free = f.free();
    let mut handles = Vec::new();
    for size in [1u64, 7, 4096, 1 << 20] {
        let h = g.alloc(size);
        assert_ne!(h, 0);
        assert!(!handles.contains(&h));
        g.write_u64(OUT2, SENTINEL);
        assert_eq!(g.buffer_size(h, OUT2), 0);
        assert_eq!(g.read_u64(OUT2), size);
        handles.push(h);
    }
    assert_eq!(g.live(), [4, 0, 0, 0]);
    assert!(f.free() < free);
    // buffer_size's out-pointer is checked like any other.
    let live = g.live();
    let end = g.mem_size() as u32;
    g.write_u64(OUT2, SENTINEL);
    for out in [OUT2 + 4, OUT2 + 1] {
        let r = g.buffer_size(handles[0], out);
        assert_refused(&g, r, EALIGN, "buffer_size", Some(OUT2), live);
    }
    for out in [end, u32::MAX - 7] {
        let r = g.buffer_size(handles[0], out);
        assert_refused(&g, r, EFAULT, "buffer_size", Some(OUT2), live);
    }
    for h in handles {
        assert_eq!(g.buffer_free(h), 0);
    }
    assert_eq!(g.live(), [0, 0, 0, 0]);
    assert_eq!(f.free(), free, "freed buffers return their bytes");
}

#[test]
fn buffer_alloc_refusals_issue_nothing() {
    let f = Fixture::new();
    let mut g = f.guest();
    let free = f.free();
    let live = g.live();
    g.write_u64(OUT, SENTINEL);

    let r = g.buffer_alloc(0, OUT);
    assert_refused(&g, r, EINVAL, "buffer_alloc", Some(OUT), live);
    for size in [DEVICE_BYTES + 1, u64::MAX, 1 << 63] {
        let r = g.buffer_alloc(size, OUT);
        assert_refused(&g, r, ENOMEM, "buffer_alloc", Some(OUT), live);
    }
    // Below the total but above what is free (the guest's memory holds
    // some): the driver refuses.
    let r = g.buffer_alloc(DEVICE_BYTES - 1, OUT);
    let text = g.last_error();
    assert_refused(&g, r, ENOMEM, "buffer_alloc", Some(OUT), live);
    assert!(text.contains("alloc_device"), "{text}");

    for out in [OUT + 4, OUT + 1, 3] {
        let r = g.buffer_alloc(64, out);
        assert_refused(&g, r, EALIGN, "buffer_alloc", Some(OUT), live);
    }
    let end = g.mem_size() as u32;
    for out in [end, end + 8, u32::MAX - 7] {
        let r = g.buffer_alloc(64, out);
        assert_refused(&g, r, EFAULT, "buffer_alloc", Some(OUT), live);
    }
    assert_eq!(f.free(), free, "no refused allocation kept memory");
}

#[test]
fn forged_stale_and_foreign_buffer_handles_are_ebadh() {
    let f = Fixture::new();
    let mut rng = Rng::new("forged handles");
    let mut g = f.guest();
    let h = g.alloc(256);
    let (module, function) = g.load_vadd();
    let live = g.live();
    assert_eq!(live, [1, 1, 1, 0]);

    let mut forged = vec![
        0,
        u64::MAX,
        h ^ FLIP_GENERATION,
        h ^ (1 << 17),
        h + 1,
        h ^ (1 << 40),
        module,
        function,
    ];
    forged.extend((0..16).map(|_| rng.next_u64()));
    for bad in forged {
        assert_ne!(bad, h);
        g.write_u64(OUT2, SENTINEL);
        let r = g.buffer_size(bad, OUT2);
        assert_refused(&g, r, EBADH, "buffer_size", Some(OUT2), live);
        let r = g.buffer_free(bad);
        assert_refused(&g, r, EBADH, "buffer_free", None, live);
        let r = g.copy_to_buffer(bad, 0, DATA, 16);
        assert_refused(&g, r, EBADH, "copy_to_buffer", None, live);
    }
    let r = g.buffer_free(module);
    assert_refused(&g, r, EBADH, "buffer_free", None, live);
    assert!(
        g.last_error().contains("module handle"),
        "{}",
        g.last_error()
    );

    // The real one still works; freeing it twice is EBADH.
    assert_eq!(g.buffer_size(h, OUT2), 0);
    assert_eq!(g.read_u64(OUT2), 256);
    assert_eq!(g.buffer_free(h), 0);
    let live = g.live();
    let r = g.buffer_free(h);
    assert_refused(&g, r, EBADH, "buffer_free", None, live);
    assert!(g.last_error().contains("freed"), "{}", g.last_error());
    // The slot is reused at the next generation; the old handle stays dead.
    let again = g.alloc(256);
    assert_ne!(again, h);
    assert_eq!(g.buffer_free(h), EBADH);
    assert_eq!(g.buffer_free(again), 0);
}

#[test]
fn another_guests_handles_are_ebadh() {
    let f = Fixture::new();
    let mut a = f.guest();
    let mut b = f.guest();
    let ha = a.alloc(64);
    let (ma, fa) = a.load_vadd();
    let hb = b.alloc(64);
    let live = b.live();
    b.write_u64(OUT2, SENTINEL);
    let r = b.buffer_size(ha, OUT2);
    assert_refused(&b, r, EBADH, "buffer_size", Some(OUT2), live);
    assert!(
        b.last_error().contains("another guest"),
        "{}",
        b.last_error()
    );
    let r = b.buffer_free(ha);
    assert_refused(&b, r, EBADH, "buffer_free", None, live);
    let r = b.copy_buffer(hb, 0, ha, 0, 8);
    assert_refused(&b, r, EBADH, "copy_buffer", None, live);
    let r = b.module_unload(ma);
    assert_refused(&b, r, EBADH, "module_unload", None, live);
    b.write(NAME, b"vadd");
    let r = b.function_get(ma, NAME, 4, OUT2);
    assert_refused(&b, r, EBADH, "function_get", Some(OUT2), live);
    let r = b.launch(fa, [1, 1, 1], [1, 1, 1], 0, ARGS, 0, OUT2);
    assert_refused(&b, r, EBADH, "launch", Some(OUT2), live);
    // A's objects are untouched.
    assert_eq!(a.buffer_size(ha, OUT2), 0);
    assert_eq!(a.read_u64(OUT2), 64);
    assert_eq!(a.live(), [1, 1, 1, 0]);
}

#[test]
fn the_buffer_limit_is_elimit() {
    let mut f = Fixture::new();
    f.runtime.set_limits(WasiCudaLimits {
        buffers: 3,
        ..WasiCudaLimits::default()
    });
    let mut g = f.guest();
    let free = f.free();
    let handles: Vec<u64> = (0..3).map(|_| g.alloc(4096)).collect();
    let used = free - f.free();
    let live = g.live();
    g.write_u64(OUT, SENTINEL);
    let r = g.buffer_alloc(4096, OUT);
    assert_refused(&g, r, ELIMIT, "buffer_alloc", Some(OUT), live);
    assert_eq!(free - f.free(), used, "the refused buffer was freed again");
    assert_eq!(g.buffer_free(handles[1]), 0);
    let h = g.alloc(4096);
    assert_ne!(h, handles[1]);
    assert_eq!(g.live(), [3, 0, 0, 0]);
}

#[test]
fn module_function_and_launch_limits_are_elimit() {
    let mut f = Fixture::new();
    f.runtime.set_limits(WasiCudaLimits {
        buffers: 4096,
        modules: 2,
        functions: 3,
        launches: 2,
        ..WasiCudaLimits::default()
    });
    let mut g = f.guest();
    let (module, function) = g.load_vadd();
    g.load_ptx(twins::VECTOR_ADD_PTX);
    let live = g.live();
    assert_eq!(live, [0, 2, 1, 0]);
    g.write_u64(OUT, SENTINEL);
    let len = twins::VECTOR_ADD_PTX.len() as u32;
    let r = g.module_load_ptx(TEXT, len, OUT);
    assert_refused(&g, r, ELIMIT, "module_load_ptx", Some(OUT), live);

    g.function(module, "vadd");
    g.function(module, "vadd");
    let live = g.live();
    assert_eq!(live, [0, 2, 3, 0]);
    g.write_u64(OUT, SENTINEL);
    let r = g.function_get(module, NAME, 4, OUT);
    assert_refused(&g, r, ELIMIT, "function_get", Some(OUT), live);

    let n = 32u32;
    let args = vadd_guest_args(DATA, DATA + 4 * n, DATA + 8 * n, n);
    assert_eq!(g.launch_n(function, n, &args), 0);
    let first = g.read_u64(OUT2);
    assert_eq!(g.launch_n(function, n, &args), 0);
    assert_eq!(g.live(), [0, 2, 3, 2]);
    // Past the limit on launches in flight a launch waits for the guest's
    // oldest to finish and takes its place (tests/launch_queue.rs); the
    // first's handle stays, with its result.
    assert_eq!(g.launch_n(function, n, &args), 0);
    assert_eq!(g.live(), [0, 2, 3, 3]);
    assert_eq!(g.wait(first), 0);
    assert_eq!(g.sync(), 0);
    assert_eq!(g.live(), [0, 2, 3, 0]);
    // A guest that may have no launch in flight: nothing to wait for.
    f.runtime.set_limits(WasiCudaLimits {
        launches: 0,
        ..WasiCudaLimits::default()
    });
    let mut h = f.guest();
    let (_, function) = h.load_vadd();
    let live = h.live();
    h.write_u64(OUT2, SENTINEL);
    let r = h.launch_n(function, n, &args);
    assert_refused(&h, r, ELIMIT, "launch", Some(OUT2), live);
}

#[test]
fn a_guest_without_exported_memory_gets_efault() {
    let f = Fixture::new();
    let module = f
        .runtime
        .compile(
            r#"(module
                 (import "wasi_cuda" "device_count" (func $device_count (param i32) (result i32)))
                 (import "wasi_cuda" "buffer_free" (func $buffer_free (param i64) (result i32)))
                 (import "wasi_cuda" "sync" (func $sync (result i32)))
                 (memory 1)
                 (func (export "count") (result i32) i32.const 0 call $device_count)
                 (func (export "free") (result i32) i64.const 0 call $buffer_free)
                 (func (export "sync") (result i32) call $sync))"#,
        )
        .expect("compile");
    let mut store = f.runtime.store().expect("store");
    let instance = futures::executor::block_on(f.runtime.instantiate(&mut store, &module))
        .expect("instantiate");
    let mut call = |name: &str| {
        let func = instance.get_func(&mut store, name).expect("export");
        let mut results = [Val::I32(-999)];
        futures::executor::block_on(func.call_async(&mut store, &[], &mut results)).expect("call");
        results[0].unwrap_i32()
    };
    assert_eq!(call("count"), EFAULT);
    assert_eq!(
        call("free"),
        EBADH,
        "calls without memory still check handles"
    );
    assert_eq!(call("sync"), 0);
    assert!(
        store
            .data()
            .cuda
            .last_error()
            .starts_with("buffer_free: EBADH: "),
        "{}",
        store.data().cuda.last_error()
    );
}

// ------------------------------------------------------------------ copies

#[test]
fn copies_round_trip_random_bytes() {
    let f = Fixture::new();
    let mut rng = Rng::new("copies round trip");
    let mut g = f.guest();
    for len in [1usize, 3, 64, 4097, 40_000] {
        let data = rng.bytes(len);
        let n = len as u64;
        let a = g.alloc(n + 16);
        let b = g.alloc(n + 16);
        g.write(DATA, &data);
        // Guest -> A at offset 5 -> B at offset 11 -> guest.
        assert_eq!(
            g.copy_to_buffer(a, 5, DATA, len as u32),
            0,
            "{}",
            g.last_error()
        );
        assert_eq!(g.copy_buffer(b, 11, a, 5, n), 0, "{}", g.last_error());
        let back = DATA + len as u32 + 64;
        g.write(back, &vec![0; len]);
        assert_eq!(
            g.copy_from_buffer(back, b, 11, len as u32),
            0,
            "{}",
            g.last_error()
        );
        assert_eq!(g.read(back, len), data, "len {len}");
        // memset a middle part of B; the rest is as copied.
        let value = (rng.next_u64() as u8) | 1;
        let (at, set) = (11 + n / 3, n / 2);
        if set > 0 {
            assert_eq!(g.memset_buffer(b, at, u32::from(value), set), 0);
        }
        assert_eq!(g.copy_from_buffer(back, b, 11, len as u32), 0);
        let got = g.read(back, len);
        for (i, byte) in got.iter().enumerate() {
            let inside = (i as u64) >= n / 3 && (i as u64) < n / 3 + set;
            let want = if inside { value } else { data[i] };
            assert_eq!(*byte, want, "len {len} byte {i}");
        }
        assert_eq!(g.buffer_free(a), 0);
        assert_eq!(g.buffer_free(b), 0);
    }
    assert_eq!(g.last_error(), "");
}

#[test]
fn copy_ranges_at_the_edges() {
    let f = Fixture::new();
    let mut rng = Rng::new("copy edges");
    let mut g = f.guest();
    let size = 1000u64;
    let a = g.alloc(size);
    let b = g.alloc(size);
    let live = g.live();
    let data = rng.bytes(100);
    g.write(DATA, &data);

    // Exactly fits at the end of the buffer; one more byte is EFAULT.
    assert_eq!(g.copy_to_buffer(a, size - 100, DATA, 100), 0);
    assert_eq!(g.copy_from_buffer(DATA + 200, a, size - 100, 100), 0);
    assert_eq!(g.read(DATA + 200, 100), data);
    assert_eq!(g.copy_buffer(b, size - 100, a, size - 100, 100), 0);
    assert_eq!(g.memset_buffer(b, size - 1, 7, 1), 0);
    refused(&mut g, EFAULT, "copy_to_buffer", |g| {
        g.copy_to_buffer(a, size - 99, DATA, 100)
    });
    refused(&mut g, EFAULT, "copy_from_buffer", |g| {
        g.copy_from_buffer(DATA, a, size - 99, 100)
    });
    refused(&mut g, EFAULT, "copy_buffer", |g| {
        g.copy_buffer(b, size - 99, a, 0, 100)
    });
    refused(&mut g, EFAULT, "copy_buffer", |g| {
        g.copy_buffer(b, 0, a, size - 99, 100)
    });
    refused(&mut g, EFAULT, "memset_buffer", |g| {
        g.memset_buffer(b, size, 7, 1)
    });
    refused(&mut g, EFAULT, "copy_to_buffer", |g| {
        g.copy_to_buffer(a, 0, DATA, size as u32 + 1)
    });
    refused(&mut g, EFAULT, "copy_to_buffer", |g| {
        g.copy_to_buffer(a, 0, DATA, u32::MAX)
    });
    // offset + len overflows u64.
    refused(&mut g, EOVERFLOW, "copy_to_buffer", |g| {
        g.copy_to_buffer(a, u64::MAX, DATA, 1)
    });
    refused(&mut g, EOVERFLOW, "copy_from_buffer", |g| {
        g.copy_from_buffer(DATA, a, u64::MAX, 1)
    });
    refused(&mut g, EOVERFLOW, "copy_buffer", |g| {
        g.copy_buffer(a, u64::MAX, b, 0, 1)
    });
    refused(&mut g, EOVERFLOW, "copy_buffer", |g| {
        g.copy_buffer(a, 0, b, u64::MAX - 1, 2)
    });
    refused(&mut g, EOVERFLOW, "copy_buffer", |g| {
        g.copy_buffer(a, 1, b, 0, u64::MAX)
    });
    refused(&mut g, EOVERFLOW, "memset_buffer", |g| {
        g.memset_buffer(a, u64::MAX, 0, 1)
    });
    refused(&mut g, EOVERFLOW, "memset_buffer", |g| {
        g.memset_buffer(a, 1, 0, u64::MAX)
    });
    // len 0.
    refused(&mut g, EINVAL, "copy_to_buffer", |g| {
        g.copy_to_buffer(a, 0, DATA, 0)
    });
    refused(&mut g, EINVAL, "copy_from_buffer", |g| {
        g.copy_from_buffer(DATA, a, 0, 0)
    });
    refused(&mut g, EINVAL, "copy_buffer", |g| {
        g.copy_buffer(a, 0, b, 0, 0)
    });
    refused(&mut g, EINVAL, "memset_buffer", |g| {
        g.memset_buffer(a, 0, 1, 0)
    });
    // The guest range past memory (and past 4 GiB).
    let end = g.mem_size() as u32;
    refused(&mut g, EFAULT, "copy_to_buffer", |g| {
        g.copy_to_buffer(a, 0, end - 99, 100)
    });
    refused(&mut g, EFAULT, "copy_from_buffer", |g| {
        g.copy_from_buffer(end - 99, a, 0, 100)
    });
    refused(&mut g, EOVERFLOW, "copy_to_buffer", |g| {
        g.copy_to_buffer(a, 0, u32::MAX, 2)
    });
    refused(&mut g, EOVERFLOW, "copy_from_buffer", |g| {
        g.copy_from_buffer(u32::MAX, a, 0, 2)
    });
    // ... exactly fits at the end of memory.
    g.write(end - 100, &data);
    assert_eq!(g.copy_to_buffer(a, 0, end - 100, 100), 0);
    assert_eq!(g.copy_from_buffer(end - 200, a, 0, 100), 0);
    assert_eq!(g.read(end - 200, 100), data);

    assert_eq!(g.live(), live);
    // Nothing that failed touched buffer a's tail.
    assert_eq!(g.copy_from_buffer(DATA + 400, a, size - 100, 100), 0);
    assert_eq!(g.read(DATA + 400, 100), data);
}

#[test]
fn overlapping_copies_and_bad_memset_values_are_einval() {
    let f = Fixture::new();
    let mut rng = Rng::new("overlap");
    let mut g = f.guest();
    let a = g.alloc(256);
    let data = rng.bytes(256);
    g.write(DATA, &data);
    assert_eq!(g.copy_to_buffer(a, 0, DATA, 256), 0);
    for (dst, src, len) in [
        (0, 0, 1),
        (0, 10, 20),
        (10, 0, 20),
        (100, 100, 156),
        (0, 127, 128),
    ] {
        assert_eq!(
            g.copy_buffer(a, dst, a, src, len),
            EINVAL,
            "{dst} {src} {len}"
        );
        assert!(
            g.assert_last_error("copy_buffer", "EINVAL")
                .contains("overlap")
        );
    }
    // Adjacent ranges do not overlap.
    assert_eq!(g.copy_buffer(a, 128, a, 0, 128), 0);
    assert_eq!(g.copy_from_buffer(DATA + 512, a, 0, 256), 0);
    let got = g.read(DATA + 512, 256);
    assert_eq!(got[..128], data[..128]);
    assert_eq!(got[128..], data[..128]);

    for value in [256u32, 257, 0x100 | 0x5a, u32::MAX, 0x8000_0000] {
        assert_eq!(g.memset_buffer(a, 0, value, 16), EINVAL, "{value:#x}");
        assert!(
            g.assert_last_error("memset_buffer", "EINVAL")
                .contains("byte")
        );
    }
    assert_eq!(g.copy_from_buffer(DATA + 512, a, 0, 16), 0);
    assert_eq!(
        g.read(DATA + 512, 16),
        data[..16],
        "refused memsets set nothing"
    );
    assert_eq!(g.memset_buffer(a, 0, 255, 16), 0);
    assert_eq!(g.copy_from_buffer(DATA + 512, a, 0, 16), 0);
    assert_eq!(g.read(DATA + 512, 16), vec![255; 16]);
}

// ----------------------------------------------------------------- modules

#[test]
fn module_load_ptx_loads_twins_and_refuses_the_rest() {
    let f = Fixture::new();
    let mut g = f.guest();
    let (module, _) = g.load_vadd();
    assert_ne!(module, 0);
    assert_eq!(g.live(), [0, 1, 1, 0]);
    let live = g.live();

    // Other PTX on the CPU driver: ENOTSUP, and the text says why.
    let other = twins::VECTOR_ADD_PTX.replace("vadd", "vsub");
    g.write(TEXT, other.as_bytes());
    g.write_u64(OUT, SENTINEL);
    let r = g.module_load_ptx(TEXT, other.len() as u32, OUT);
    assert_refused(&g, r, ENOTSUP, "module_load_ptx", Some(OUT), live);
    let text = g.last_error();
    assert!(
        text.contains("CUDA driver") && text.contains("twin"),
        "{text}"
    );
    // One byte short of the twin's text is other text too.
    let len = twins::VECTOR_ADD_PTX.len() as u32;
    g.write(TEXT, twins::VECTOR_ADD_PTX.as_bytes());
    let r = g.module_load_ptx(TEXT, len - 1, OUT);
    assert_refused(&g, r, ENOTSUP, "module_load_ptx", Some(OUT), live);

    // Empty, invalid UTF-8, NUL.
    let r = g.module_load_ptx(TEXT, 0, OUT);
    assert_refused(&g, r, EINVAL, "module_load_ptx", Some(OUT), live);
    assert!(g.last_error().contains("empty"));
    g.write(DATA, b".version 7.0\n\xff\xfe");
    let r = g.module_load_ptx(DATA, 15, OUT);
    assert_refused(&g, r, EINVAL, "module_load_ptx", Some(OUT), live);
    assert!(g.last_error().contains("UTF-8"));
    g.write(DATA, b".version\x007.0");
    let r = g.module_load_ptx(DATA, 12, OUT);
    assert_refused(&g, r, EINVAL, "module_load_ptx", Some(OUT), live);
    assert!(g.last_error().contains("NUL"));

    // Ranges and out-pointers.
    let end = g.mem_size() as u32;
    let r = g.module_load_ptx(end - 10, 11, OUT);
    assert_refused(&g, r, EFAULT, "module_load_ptx", Some(OUT), live);
    let r = g.module_load_ptx(u32::MAX, 2, OUT);
    assert_refused(&g, r, EOVERFLOW, "module_load_ptx", Some(OUT), live);
    let r = g.module_load_ptx(TEXT, len, OUT + 4);
    assert_refused(&g, r, EALIGN, "module_load_ptx", Some(OUT), live);
    let r = g.module_load_ptx(TEXT, len, end);
    assert_refused(&g, r, EFAULT, "module_load_ptx", Some(OUT), live);
}

#[test]
fn module_load_cubin_checks_the_image_then_is_enotsup_on_the_cpu_driver() {
    let f = Fixture::new();
    let mut rng = Rng::new("cubin");
    let mut g = f.guest();
    let live = g.live();
    g.write_u64(OUT, SENTINEL);
    // Malformed images are refused by `tensorwasm_core::image` before any
    // driver sees them: EIMAGE on every driver.
    let mut elf = vec![0x7f, b'E', b'L', b'F', 2, 1, 1, 0];
    elf.extend(rng.bytes(120));
    let garbage = rng.bytes(64);
    for image in [&elf[..], &garbage[..], b"\x7fELF"] {
        g.write(DATA, image);
        let r = g.module_load_cubin(DATA, image.len() as u32, OUT);
        assert_refused(&g, r, EIMAGE, "module_load_cubin", Some(OUT), live);
        assert!(g.last_error().contains("malformed"), "{}", g.last_error());
    }
    // A well-formed sm_90 cubin: the CPU driver cannot run it.
    let cubin: &[u8] = include_bytes!("../../kernels/test/vector_add.sm_90.cubin");
    g.write(DATA, cubin);
    let r = g.module_load_cubin(DATA, cubin.len() as u32, OUT);
    assert_refused(&g, r, ENOTSUP, "module_load_cubin", Some(OUT), live);
    assert!(g.last_error().contains("CUDA driver"), "{}", g.last_error());
    let end = g.mem_size() as u32;
    let r = g.module_load_cubin(end - 8, 9, OUT);
    assert_refused(&g, r, EFAULT, "module_load_cubin", Some(OUT), live);
    let r = g.module_load_cubin(DATA, 64, OUT + 1);
    assert_refused(&g, r, EALIGN, "module_load_cubin", Some(OUT), live);
}

#[test]
fn modules_unload_once_and_their_functions_outlive_them() {
    let f = Fixture::new();
    let mut rng = Rng::new("unload");
    let mut g = f.guest();
    let (module, function) = g.load_vadd();
    assert_eq!(g.module_unload(module), 0);
    assert_eq!(g.live(), [0, 0, 1, 0]);
    let live = g.live();
    let r = g.module_unload(module);
    assert_refused(&g, r, EBADH, "module_unload", None, live);
    for bad in [0, u64::MAX, function, module ^ FLIP_GENERATION] {
        assert_eq!(g.module_unload(bad), EBADH);
    }
    // docs/ABI.md: the function stays valid and keeps the module loaded.
    let n = 300u32;
    let (a, b, c) = (DATA, DATA + 4 * n, DATA + 8 * n);
    let (x, y) = (rng.floats(n as usize), rng.floats(n as usize));
    g.write_floats(a, &x);
    g.write_floats(b, &y);
    g.run_n(function, n, &vadd_guest_args(a, b, c, n));
    let got = g.read_floats(c, n as usize);
    for i in 0..n as usize {
        assert_eq!(got[i].to_bits(), (x[i] + y[i]).to_bits(), "element {i}");
    }
    // Releasing the last function handle releases the module with it.
    assert_eq!(g.function_release(function), 0);
    assert_eq!(g.live(), [0, 0, 0, 0]);
    let live = g.live();
    let r = g.function_release(function);
    assert_refused(&g, r, EBADH, "function_release", None, live);
    for bad in [0, u64::MAX, module, function ^ FLIP_GENERATION] {
        assert_eq!(g.function_release(bad), EBADH);
    }
}

#[test]
fn function_get_finds_kernels_by_name() {
    let f = Fixture::new();
    let mut g = f.guest();
    let (module, function) = g.load_vadd();
    let second = g.function(module, "vadd");
    assert_ne!(second, function, "each lookup is its own handle");
    assert_eq!(g.live(), [0, 1, 2, 0]);
    let live = g.live();
    g.write_u64(OUT, SENTINEL);

    g.write(NAME, b"nope");
    let r = g.function_get(module, NAME, 4, OUT);
    assert_refused(&g, r, ENOENT, "function_get", Some(OUT), live);
    assert!(g.last_error().contains("nope"), "{}", g.last_error());
    g.write(NAME, b"vadd");
    let r = g.function_get(module, NAME, 3, OUT);
    assert_refused(&g, r, ENOENT, "function_get", Some(OUT), live);
    for bad in [0, u64::MAX, function, module ^ FLIP_GENERATION, module + 1] {
        let r = g.function_get(bad, NAME, 4, OUT);
        assert_refused(&g, r, EBADH, "function_get", Some(OUT), live);
    }
    let r = g.function_get(module, NAME, 0, OUT);
    assert_refused(&g, r, EINVAL, "function_get", Some(OUT), live);
    g.write(NAME, b"va\0d");
    let r = g.function_get(module, NAME, 4, OUT);
    assert_refused(&g, r, EINVAL, "function_get", Some(OUT), live);
    g.write(NAME, b"\xc3(dd");
    let r = g.function_get(module, NAME, 4, OUT);
    assert_refused(&g, r, EINVAL, "function_get", Some(OUT), live);
    g.write(NAME, b"vadd");
    let end = g.mem_size() as u32;
    let r = g.function_get(module, end - 2, 4, OUT);
    assert_refused(&g, r, EFAULT, "function_get", Some(OUT), live);
    let r = g.function_get(module, NAME, 4, OUT + 2);
    assert_refused(&g, r, EALIGN, "function_get", Some(OUT), live);
    // Unloading the module later leaves the function handles alone.
    assert_eq!(g.module_unload(module), 0);
    let r = g.function_get(module, NAME, 4, OUT);
    assert_refused(&g, r, EBADH, "function_get", Some(OUT), [0, 0, 2, 0]);
}

// ------------------------------------------------------------------ launch

/// `vadd(a, b, c, n)` over guest memory: three 4-aligned guest pointers of
/// `4n` bytes each and `n`.
fn vadd_guest_args(a: u32, b: u32, c: u32, n: u32) -> [ArgDescriptor; 4] {
    let bytes = 4 * u64::from(n);
    [
        ArgDescriptor::guest_aligned(a.into(), bytes, 4),
        ArgDescriptor::guest_aligned(b.into(), bytes, 4),
        ArgDescriptor::guest_aligned(c.into(), bytes, 4),
        ArgDescriptor::i32(n as i32),
    ]
}

/// Checks every element of `c` against `x + y`, from the host side.
#[track_caller]
fn check_sum(got: &[f32], x: &[f32], y: &[f32]) {
    assert_eq!(got.len(), x.len());
    for i in 0..x.len() {
        let want = x[i] + y[i];
        assert_eq!(
            got[i].to_bits(),
            want.to_bits(),
            "element {i}: {} != {want}",
            got[i]
        );
    }
}

#[test]
fn vadd_over_guest_memory() {
    let f = Fixture::new();
    let mut rng = Rng::new("vadd guest memory");
    let mut g = f.guest();
    let (_, function) = g.load_vadd();
    // Room for the largest n: 3 vectors of 12_000 floats past DATA.
    assert!(g.grow(2) >= 0);
    for n in [1u32, 255, 256, 257, 1000, 12_000] {
        let (a, b, c) = (DATA, DATA + 4 * n, DATA + 8 * n);
        let (x, y) = (rng.floats(n as usize), rng.floats(n as usize));
        g.write_floats(a, &x);
        g.write_floats(b, &y);
        g.write(c, &vec![0; 4 * n as usize]);
        g.run_n(function, n, &vadd_guest_args(a, b, c, n));
        check_sum(&g.read_floats(c, n as usize), &x, &y);
    }
    // Unaligned guest offsets (align 0) are fine too.
    let n = 77u32;
    let (a, b, c) = (DATA + 1, DATA + 2 + 4 * n, DATA + 3 + 8 * n);
    let (x, y) = (rng.floats(n as usize), rng.floats(n as usize));
    g.write_floats(a, &x);
    g.write_floats(b, &y);
    let bytes = 4 * u64::from(n);
    g.run_n(
        function,
        n,
        &[
            ArgDescriptor::guest(a.into(), bytes),
            ArgDescriptor::guest(b.into(), bytes),
            ArgDescriptor::guest(c.into(), bytes),
            ArgDescriptor::i32(n as i32),
        ],
    );
    check_sum(&g.read_floats(c, n as usize), &x, &y);
    assert_eq!(g.live()[3], 0, "wait released every launch");
}

#[test]
fn vadd_over_buffers_and_mixed_pointers() {
    let f = Fixture::new();
    let mut rng = Rng::new("vadd buffers");
    let mut g = f.guest();
    let (_, function) = g.load_vadd();
    let n = 5000u32;
    let bytes = 4 * n;
    let (x, y) = (rng.floats(n as usize), rng.floats(n as usize));
    let (a, b, c) = (DATA, DATA + bytes, DATA + 2 * bytes);
    g.write_floats(a, &x);
    g.write_floats(b, &y);
    let (ba, bb) = (g.alloc(bytes.into()), g.alloc(bytes.into()));
    // C sits 64 bytes into its buffer.
    let bc = g.alloc(u64::from(bytes) + 64);
    assert_eq!(g.copy_to_buffer(ba, 0, a, bytes), 0);
    assert_eq!(g.copy_to_buffer(bb, 0, b, bytes), 0);

    // All buffers (tag 5).
    g.run_n(
        function,
        n,
        &[
            ArgDescriptor::buffer(Handle(ba), 0),
            ArgDescriptor::buffer(Handle(bb), 0),
            ArgDescriptor::buffer(Handle(bc), 64),
            ArgDescriptor::i32(n as i32),
        ],
    );
    g.write(c, &vec![0; bytes as usize]);
    assert_eq!(g.copy_from_buffer(c, bc, 64, bytes), 0);
    check_sum(&g.read_floats(c, n as usize), &x, &y);

    // Mixed: a from guest memory, b from a buffer, c into guest memory.
    g.write(c, &vec![0; bytes as usize]);
    g.run_n(
        function,
        n,
        &[
            ArgDescriptor::guest_aligned(a.into(), bytes.into(), 4),
            ArgDescriptor::buffer(Handle(bb), 0),
            ArgDescriptor::guest_aligned(c.into(), bytes.into(), 4),
            ArgDescriptor::i32(n as i32),
        ],
    );
    check_sum(&g.read_floats(c, n as usize), &x, &y);

    // Mixed the other way: c into a buffer, read back by a copy that
    // waits for the launch (no explicit wait before the copy).
    assert_eq!(
        g.launch_n(
            function,
            n,
            &[
                ArgDescriptor::buffer(Handle(ba), 0),
                ArgDescriptor::guest_aligned(b.into(), bytes.into(), 4),
                ArgDescriptor::buffer(Handle(bc), 0),
                ArgDescriptor::i32(n as i32),
            ],
        ),
        0
    );
    let launch = g.read_u64(OUT2);
    g.write(c, &vec![0; bytes as usize]);
    assert_eq!(g.copy_from_buffer(c, bc, 0, bytes), 0);
    check_sum(&g.read_floats(c, n as usize), &x, &y);
    assert_eq!(g.wait(launch), 0);
    assert_eq!(g.live(), [3, 1, 1, 0]);

    // Buffers freed while a launch that reads them is in flight: the handles
    // die at once, the memory lives until the kernel is done.
    let free = f.free();
    g.write(c, &vec![0; bytes as usize]);
    assert_eq!(
        g.launch_n(
            function,
            n,
            &[
                ArgDescriptor::buffer(Handle(ba), 0),
                ArgDescriptor::buffer(Handle(bb), 0),
                ArgDescriptor::guest_aligned(c.into(), bytes.into(), 4),
                ArgDescriptor::i32(n as i32),
            ],
        ),
        0
    );
    let launch = g.read_u64(OUT2);
    for h in [ba, bb, bc] {
        assert_eq!(g.buffer_free(h), 0);
        assert_eq!(g.buffer_size(h, OUT), EBADH);
    }
    assert_eq!(g.live(), [0, 1, 1, 1]);
    assert_eq!(g.wait(launch), 0, "{}", g.last_error());
    check_sum(&g.read_floats(c, n as usize), &x, &y);
    assert!(
        f.free() > free,
        "the buffers' memory came back after the wait"
    );
    assert_eq!(g.live(), [0, 1, 1, 0]);
}

/// One refused launch: what the test changes, and the errno.
struct LaunchCase {
    what: &'static str,
    args: Vec<ArgDescriptor>,
    args_ptr: u32,
    args_count: Option<u32>,
    grid: [u32; 3],
    block: [u32; 3],
    shared: u32,
    out: u32,
    function: Option<u64>,
    errno: i32,
    name: &'static str,
}

#[test]
fn every_launch_refusal_reaches_the_guest_and_leaves_nothing_behind() {
    let f = Fixture::new();
    let mut rng = Rng::new("launch refusals");
    let mut g = f.guest();
    let (module, function) = g.load_vadd();
    let n = 64u32;
    let (a, b, c) = (DATA, DATA + 4 * n, DATA + 8 * n);
    let buf = g.alloc(4 * u64::from(n));
    let freed = g.alloc(16);
    assert_eq!(g.buffer_free(freed), 0);
    let good = vadd_guest_args(a, b, c, n).to_vec();
    let end = g.mem_size() as u64;
    let with = |i: usize, d: ArgDescriptor| {
        let mut args = good.clone();
        args[i] = d;
        args
    };
    let case = |what, args: Vec<ArgDescriptor>, errno, name| LaunchCase {
        what,
        args,
        args_ptr: ARGS,
        args_count: None,
        grid: [1, 1, 1],
        block: [64, 1, 1],
        shared: 0,
        out: OUT2,
        function: None,
        errno,
        name,
    };
    let unknown_tag = ArgDescriptor {
        tag: 6,
        align: 0,
        a: 0,
        b: 0,
    };
    let cases = vec![
        LaunchCase {
            args_ptr: ARGS + 4,
            ..case("args_ptr misaligned", good.clone(), EALIGN, "EALIGN")
        },
        LaunchCase {
            args_count: Some(65),
            ..case("65 arguments", good.clone(), ELIMIT, "ELIMIT")
        },
        LaunchCase {
            args_count: Some(u32::MAX),
            ..case("-1 arguments", good.clone(), ELIMIT, "ELIMIT")
        },
        LaunchCase {
            args_ptr: end as u32 - 88,
            ..case("descriptors past memory", good.clone(), EFAULT, "EFAULT")
        },
        LaunchCase {
            args_ptr: 0xffff_fff8,
            ..case("descriptors overflow", good.clone(), EOVERFLOW, "EOVERFLOW")
        },
        case("unknown tag", with(1, unknown_tag), EINVAL, "EINVAL"),
        case(
            "align on a scalar",
            with(
                3,
                ArgDescriptor {
                    align: 4,
                    ..ArgDescriptor::i32(1)
                },
            ),
            EINVAL,
            "EINVAL",
        ),
        case(
            "i32 with high bits",
            with(
                3,
                ArgDescriptor {
                    a: 1 << 32,
                    ..ArgDescriptor::i32(1)
                },
            ),
            EINVAL,
            "EINVAL",
        ),
        case(
            "guest pointer past memory",
            with(2, ArgDescriptor::guest(end - 4, 8)),
            EFAULT,
            "EFAULT",
        ),
        case(
            "guest pointer beyond 4 GiB",
            with(0, ArgDescriptor::guest(1 << 40, 4)),
            EFAULT,
            "EFAULT",
        ),
        case(
            "a + b overflows",
            with(0, ArgDescriptor::guest(u64::MAX, 1)),
            EOVERFLOW,
            "EOVERFLOW",
        ),
        case(
            "zero-length guest pointer",
            with(1, ArgDescriptor::guest(b.into(), 0)),
            EINVAL,
            "EINVAL",
        ),
        case(
            "align 3",
            with(1, ArgDescriptor::guest_aligned(b.into(), 16, 3)),
            EINVAL,
            "EINVAL",
        ),
        case(
            "align 8192",
            with(1, ArgDescriptor::guest_aligned(b.into(), 16, 8192)),
            EINVAL,
            "EINVAL",
        ),
        case(
            "pointer not aligned to its align",
            with(1, ArgDescriptor::guest_aligned(u64::from(b) + 2, 16, 4)),
            EALIGN,
            "EALIGN",
        ),
        case(
            "buffer offset past the buffer",
            with(2, ArgDescriptor::buffer(Handle(buf), 4 * u64::from(n))),
            EFAULT,
            "EFAULT",
        ),
        case(
            "buffer offset u64::MAX",
            with(2, ArgDescriptor::buffer(Handle(buf), u64::MAX)),
            EFAULT,
            "EFAULT",
        ),
        case(
            "freed buffer",
            with(2, ArgDescriptor::buffer(Handle(freed), 0)),
            EBADH,
            "EBADH",
        ),
        case(
            "module handle as a buffer",
            with(2, ArgDescriptor::buffer(Handle(module), 0)),
            EBADH,
            "EBADH",
        ),
        LaunchCase {
            grid: [0, 1, 1],
            ..case("grid 0", good.clone(), EINVAL, "EINVAL")
        },
        LaunchCase {
            grid: [1, 0, 1],
            ..case("grid y 0", good.clone(), EINVAL, "EINVAL")
        },
        LaunchCase {
            block: [1, 1, 0],
            ..case("block z 0", good.clone(), EINVAL, "EINVAL")
        },
        LaunchCase {
            block: [1025, 1, 1],
            ..case("block above max", good.clone(), EINVAL, "EINVAL")
        },
        LaunchCase {
            block: [32, 32, 2],
            ..case(
                "threads per block above max",
                good.clone(),
                EINVAL,
                "EINVAL",
            )
        },
        LaunchCase {
            grid: [1, 65536, 1],
            ..case("grid y above max", good.clone(), EINVAL, "EINVAL")
        },
        LaunchCase {
            grid: [u32::MAX, 1, 1],
            ..case("grid -1", good.clone(), EINVAL, "EINVAL")
        },
        LaunchCase {
            shared: 48 * 1024 + 1,
            ..case("shared memory above max", good.clone(), EINVAL, "EINVAL")
        },
        LaunchCase {
            function: Some(module),
            ..case(
                "module handle as the function",
                good.clone(),
                EBADH,
                "EBADH",
            )
        },
        LaunchCase {
            function: Some(function ^ FLIP_GENERATION),
            ..case("stale function", good.clone(), EBADH, "EBADH")
        },
        LaunchCase {
            out: OUT2 + 4,
            ..case("out-pointer misaligned", good.clone(), EALIGN, "EALIGN")
        },
        LaunchCase {
            out: end as u32,
            ..case("out-pointer past memory", good.clone(), EFAULT, "EFAULT")
        },
    ];
    let (x, y) = (rng.floats(n as usize), rng.floats(n as usize));
    g.write_floats(a, &x);
    g.write_floats(b, &y);
    for case in cases {
        let live = g.live();
        let launches = live[3];
        g.write_u64(OUT2, SENTINEL);
        g.write(c, &vec![0; 4 * n as usize]);
        if case.args_ptr as u64 + 24 * case.args.len() as u64 <= end {
            g.write_args(case.args_ptr, &case.args);
        }
        let count = case.args_count.unwrap_or(case.args.len() as u32);
        let r = g.launch(
            case.function.unwrap_or(function),
            case.grid,
            case.block,
            case.shared,
            case.args_ptr,
            count,
            case.out,
        );
        assert_eq!(r, case.errno, "{}: {}", case.what, g.last_error());
        g.assert_last_error("launch", case.name);
        assert_eq!(g.live(), live, "{}: a handle changed", case.what);
        assert_eq!(g.live()[3], launches);
        assert_eq!(
            g.read_u64(OUT2),
            SENTINEL,
            "{}: wrote its out-pointer",
            case.what
        );
        assert!(
            g.read(c, 4 * n as usize).iter().all(|&b| b == 0),
            "{}: the kernel ran",
            case.what
        );
        // The guest's objects still work: a good launch succeeds.
        g.run_n(function, n, &good);
        check_sum(&g.read_floats(c, n as usize), &x, &y);
        assert_eq!(g.buffer_size(buf, OUT), 0, "{}", case.what);
    }
}

#[test]
fn a_wrong_argument_count_for_vadd_fails_the_kernel() {
    // The CPU driver cannot tell a host twin's parameter count, so `launch`
    // accepts three arguments for the four-parameter `vadd`; the twin then
    // refuses them, and `wait` reports ELAUNCH. (On CUDA the driver checks
    // the count against the kernel's signature and `launch` is EINVAL.)
    let f = Fixture::new();
    let mut g = f.guest();
    let (_, function) = g.load_vadd();
    let n = 16u32;
    let args = vadd_guest_args(DATA, DATA + 64, DATA + 128, n);
    assert_eq!(g.launch_n(function, n, &args[..3]), 0, "{}", g.last_error());
    let launch = g.read_u64(OUT2);
    assert_eq!(g.live()[3], 1);
    assert_eq!(g.wait(launch), ELAUNCH);
    let text = g.assert_last_error("wait", "ELAUNCH");
    assert!(text.contains("vadd takes 4 parameters, got 3"), "{text}");
    assert_eq!(g.live()[3], 0, "wait released the failed launch");
    // The failure is sticky on the guest's stream (as a CUDA context's
    // kernel fault is): a later good launch is queued but its wait reports
    // the earlier failure.
    assert_eq!(g.launch_n(function, n, &args), 0);
    let launch = g.read_u64(OUT2);
    assert_eq!(g.wait(launch), ELAUNCH);
    assert_eq!(g.live()[3], 0);
    // Another guest on the same driver is unaffected.
    let mut other = f.guest();
    let (_, function) = other.load_vadd();
    other.run_n(function, n, &args);
}

// -------------------------------------------------------------- host memory

#[test]
fn host_memory_guests_cannot_pass_guest_pointers() {
    let f = Fixture::with_host_memory();
    assert!(f.runtime.memory_creator().is_none());
    let mut rng = Rng::new("host memory");
    let mut g = f.guest();
    // device_info says the memory is not device-addressable.
    assert_eq!(g.device_info(0, DATA, 128), 0);
    let flags = g.read_u32(DATA + 60);
    assert_eq!(flags & 2, 0, "flags {flags:#x}");

    let (_, function) = g.load_vadd();
    let n = 100u32;
    let (a, b, c) = (DATA, DATA + 4 * n, DATA + 8 * n);
    let live = g.live();
    g.write_u64(OUT2, SENTINEL);
    let r = g.launch_n(function, n, &vadd_guest_args(a, b, c, n));
    assert_refused(&g, r, ENOTADDR, "launch", Some(OUT2), live);
    assert!(
        g.last_error().contains("argument 0") && g.last_error().contains("device-addressable"),
        "{}",
        g.last_error()
    );
    // Bounds come first, as the decoder documents.
    let end = g.mem_size() as u64;
    let r = g.launch_n(function, n, &[ArgDescriptor::guest(end, 4)]);
    assert_refused(&g, r, EFAULT, "launch", Some(OUT2), live);

    for target in [0, 1] {
        assert_eq!(g.prefetch(DATA, 4096, target), ENOTADDR);
        g.assert_last_error("prefetch", "ENOTADDR");
    }
    for advice in 0..=6 {
        assert_eq!(g.advise(DATA, 4096, advice), ENOTADDR);
        g.assert_last_error("advise", "ENOTADDR");
    }

    // Buffer-only launches still work.
    let bytes = 4 * n;
    let (x, y) = (rng.floats(n as usize), rng.floats(n as usize));
    g.write_floats(a, &x);
    g.write_floats(b, &y);
    let (ba, bb, bc) = (
        g.alloc(bytes.into()),
        g.alloc(bytes.into()),
        g.alloc(bytes.into()),
    );
    assert_eq!(g.copy_to_buffer(ba, 0, a, bytes), 0);
    assert_eq!(g.copy_to_buffer(bb, 0, b, bytes), 0);
    g.run_n(
        function,
        n,
        &[
            ArgDescriptor::buffer(Handle(ba), 0),
            ArgDescriptor::buffer(Handle(bb), 0),
            ArgDescriptor::buffer(Handle(bc), 0),
            ArgDescriptor::i32(n as i32),
        ],
    );
    assert_eq!(g.copy_from_buffer(c, bc, 0, bytes), 0);
    check_sum(&g.read_floats(c, n as usize), &x, &y);
}

// --------------------------------------------------------------- wait/sync

#[test]
fn wait_releases_its_launch_once() {
    let f = Fixture::new();
    let mut rng = Rng::new("wait");
    let mut g = f.guest();
    let (module, function) = g.load_vadd();
    let n = 1000u32;
    let args = vadd_guest_args(DATA, DATA + 4 * n, DATA + 8 * n, n);
    assert_eq!(g.launch_n(function, n, &args), 0);
    let launch = g.read_u64(OUT2);
    assert_ne!(launch, 0);
    assert_eq!(g.live()[3], 1);
    assert_eq!(g.wait(launch), 0);
    assert_eq!(g.live()[3], 0);
    let live = g.live();
    let r = g.wait(launch);
    assert_refused(&g, r, EBADH, "wait", None, live);
    assert!(g.last_error().contains("freed"), "{}", g.last_error());
    let mut forged = vec![0, u64::MAX, launch ^ FLIP_GENERATION, module, function];
    forged.extend((0..8).map(|_| rng.next_u64()));
    for bad in forged {
        assert_eq!(g.wait(bad), EBADH, "{bad:#x}");
        g.assert_last_error("wait", "EBADH");
    }
    // Another guest's launch.
    let mut other = f.guest();
    let (_, other_function) = other.load_vadd();
    assert_eq!(other.launch_n(other_function, n, &args), 0);
    let foreign = other.read_u64(OUT2);
    assert_eq!(g.wait(foreign), EBADH);
    assert_eq!(other.wait(foreign), 0);
}

/// A PTX text no real driver would accept, with a host twin `boom` that
/// panics: a kernel that fails.
const BOOM_PTX: &str = "// tensorwasm test: a kernel whose host twin panics\n.entry boom()\n{\n}\n";

#[test]
fn a_failing_kernel_makes_wait_and_sync_return_elaunch() {
    let f = Fixture::new();
    let boom: std::sync::Arc<HostKernelFn> = std::sync::Arc::new(
        |block: &BlockContext, _params: &[tensorwasm_core::KernelParam]| {
            panic!("boom in block {}", block.block_idx.x)
        },
    );
    f.driver.register_ptx_twin(BOOM_PTX, [("boom", boom)]);
    let mut g = f.guest();
    let module = g.load_ptx(BOOM_PTX);
    let function = g.function(module, "boom");
    assert_eq!(
        g.launch(function, [1, 1, 1], [1, 1, 1], 0, ARGS, 0, OUT2),
        0
    );
    let launch = g.read_u64(OUT2);
    assert_eq!(g.wait(launch), ELAUNCH);
    let text = g.assert_last_error("wait", "ELAUNCH");
    assert!(text.contains("boom in block 0"), "{text}");
    assert_eq!(g.live()[3], 0);
    // sync sees the same failure, and releases everything.
    assert_eq!(
        g.launch(function, [2, 1, 1], [1, 1, 1], 0, ARGS, 0, OUT2),
        0
    );
    assert_eq!(g.live()[3], 1);
    assert_eq!(g.sync(), ELAUNCH);
    g.assert_last_error("sync", "ELAUNCH");
    assert_eq!(g.live()[3], 0);
    // The failure is sticky on the guest's stream (the CPU driver's streams,
    // like a CUDA context after a kernel fault, report it from then on):
    // copies, which first wait for earlier launches, report it too, while
    // calls that queue nothing still work.
    let buf = g.alloc(64);
    refused(&mut g, ELAUNCH, "copy_to_buffer", |g| {
        g.copy_to_buffer(buf, 0, DATA, 64)
    });
    refused(&mut g, ELAUNCH, "sync", |g| g.sync());
    assert_eq!(g.buffer_free(buf), 0);
    assert_eq!(g.live(), [0, 1, 1, 0]);
}

#[test]
fn sync_waits_for_and_releases_every_launch() {
    let f = Fixture::new();
    let mut rng = Rng::new("sync");
    let mut g = f.guest();
    let (_, function) = g.load_vadd();
    assert_eq!(g.sync(), 0, "sync with nothing queued");
    let n = 2000u32;
    let bytes = 4 * n;
    // Eight launches over eight disjoint output vectors.
    let x = rng.floats(n as usize);
    let y = rng.floats(n as usize);
    let (a, b) = (DATA, DATA + bytes);
    g.write_floats(a, &x);
    g.write_floats(b, &y);
    assert!(g.grow(2) >= 0);
    let mut launches = Vec::new();
    for i in 0..8 {
        let c = DATA + (2 + i) * bytes;
        g.write(c, &vec![0; bytes as usize]);
        assert_eq!(g.launch_n(function, n, &vadd_guest_args(a, b, c, n)), 0);
        launches.push(g.read_u64(OUT2));
    }
    assert_eq!(g.live()[3], 8);
    assert_eq!(g.sync(), 0, "{}", g.last_error());
    assert_eq!(g.live()[3], 0);
    for i in 0..8 {
        check_sum(&g.read_floats(DATA + (2 + i) * bytes, n as usize), &x, &y);
    }
    for launch in launches {
        assert_eq!(g.wait(launch), EBADH);
        g.assert_last_error("wait", "EBADH");
    }
    assert_eq!(g.sync(), 0);
}

// --------------------------------------------------------- prefetch/advise

#[test]
fn prefetch_and_advise_on_managed_memory() {
    let f = Fixture::new();
    let mut g = f.guest();
    let end = g.mem_size() as u32;
    for target in [0, 1] {
        assert_eq!(g.prefetch(DATA, 4096, target), 0, "{}", g.last_error());
        assert_eq!(g.prefetch(0, end, target), 0, "{}", g.last_error());
        assert_eq!(g.prefetch(end - 1, 1, target), 0, "{}", g.last_error());
    }
    for advice in 0..=6 {
        assert_eq!(g.advise(DATA, 4096, advice), 0, "{}", g.last_error());
        assert_eq!(g.advise(0, end, advice), 0, "{}", g.last_error());
    }
    assert_eq!(g.last_error(), "");
    refused(&mut g, EINVAL, "prefetch", |g| g.prefetch(DATA, 0, 0));
    refused(&mut g, EINVAL, "prefetch", |g| g.prefetch(DATA, 16, 2));
    refused(&mut g, EINVAL, "prefetch", |g| {
        g.prefetch(DATA, 16, u32::MAX)
    });
    refused(&mut g, EINVAL, "advise", |g| g.advise(DATA, 0, 0));
    refused(&mut g, EINVAL, "advise", |g| g.advise(DATA, 16, 7));
    refused(&mut g, EINVAL, "advise", |g| g.advise(DATA, 16, u32::MAX));
    refused(&mut g, EFAULT, "prefetch", |g| g.prefetch(end - 15, 16, 0));
    refused(&mut g, EFAULT, "prefetch", |g| g.prefetch(end, 1, 1));
    refused(&mut g, EFAULT, "advise", |g| g.advise(end - 15, 16, 0));
    refused(&mut g, EFAULT, "advise", |g| g.advise(0, end + 1, 0));
    refused(&mut g, EOVERFLOW, "prefetch", |g| {
        g.prefetch(u32::MAX, 2, 0)
    });
    refused(&mut g, EOVERFLOW, "advise", |g| {
        g.advise(u32::MAX, u32::MAX, 0)
    });
    // After a grow the new pages are in range.
    assert_eq!(g.grow(1), INITIAL_PAGES as i32);
    assert_eq!(g.prefetch(end, PAGE as u32, 0), 0, "{}", g.last_error());
    assert_eq!(g.advise(end, PAGE as u32, 2), 0, "{}", g.last_error());
}

// --------------------------------------------------------------- last_error

#[test]
fn last_error_copies_truncates_and_keeps_its_text() {
    let f = Fixture::new();
    let mut g = f.guest();
    let (buf, out_len) = (DATA, OUT);
    // Nothing has failed yet: empty.
    g.write_u64(out_len, SENTINEL);
    assert_eq!(g.last_error_call(buf, 64, out_len), 0);
    assert_eq!(g.read_u32(out_len), 0);

    assert_eq!(g.buffer_free(0x1234), EBADH);
    let text = g.assert_last_error("buffer_free", "EBADH");
    let len = text.len();
    assert!(len > 30, "{text}");
    for _ in 0..2 {
        g.write(buf, &vec![0xee; len + 8]);
        g.write_u64(out_len, SENTINEL);
        assert_eq!(g.last_error_call(buf, 4096, out_len), 0);
        assert_eq!(g.read_u32(out_len) as usize, len);
        assert_eq!(g.read(buf, len), text.as_bytes());
        assert_eq!(g.read(buf + len as u32, 8), vec![0xee; 8]);
    }
    // Truncated: only buf_len bytes, but the full length.
    for small in [0usize, 1, 10, len - 1, len] {
        g.write(buf, &vec![0xee; len + 8]);
        assert_eq!(g.last_error_call(buf, small as i32, out_len), 0);
        assert_eq!(g.read_u32(out_len) as usize, len);
        assert_eq!(g.read(buf, small), text.as_bytes()[..small]);
        assert!(g.read(buf + small as u32, 8).iter().all(|&b| b == 0xee));
    }
    // Its own refusals do not replace the text.
    g.write_u64(out_len, SENTINEL);
    let end = g.mem_size() as u32;
    assert_eq!(g.last_error_call(buf, -1, out_len), EINVAL);
    assert_eq!(g.last_error_call(buf, i32::MIN, out_len), EINVAL);
    assert_eq!(g.last_error_call(end - 10, 4096, out_len), EFAULT);
    assert_eq!(g.last_error_call(u32::MAX, 4096, out_len), EOVERFLOW);
    assert_eq!(g.last_error_call(buf, 4096, end), EFAULT);
    g.write(buf, &vec![0xee; len]);
    assert_eq!(g.last_error_call(buf, 4096, out_len + 1), EALIGN);
    assert_eq!(g.read(buf, len), vec![0xee; len], "nothing half written");
    assert_eq!(g.read_u64(out_len), SENTINEL);
    // ... a short text fits before the end even where the whole would not.
    assert_eq!(g.last_error_call(end - 10, 10, out_len), 0);
    assert_eq!(g.read(end - 10, 10), text.as_bytes()[..10]);
    assert_eq!(g.last_error(), text);
    // A success elsewhere keeps it too; a new failure replaces it.
    assert_eq!(g.device_count(OUT2), 0);
    assert_eq!(g.last_error(), text);
    assert_eq!(g.device_count(OUT2 + 1), EALIGN);
    assert_ne!(g.last_error(), text);
    g.assert_last_error("device_count", "EALIGN");
}

// ------------------------------------------------------------------ memory

#[test]
fn memory_grows_in_place_zeroed_up_to_the_limit() {
    let f = Fixture::new();
    let mut g = f.guest();
    let base = g.memory.data_ptr(&g.store) as usize;
    assert_eq!(g.size(), INITIAL_PAGES as i32);
    g.write(DATA, b"kept");
    let mut pages = INITIAL_PAGES;
    for grow in [1u32, 3, 7, 16] {
        assert_eq!(g.grow(grow), pages as i32);
        let old_end = (pages * PAGE) as u32;
        pages += grow as usize;
        assert_eq!(g.memory.data_ptr(&g.store) as usize, base, "the base moved");
        assert_eq!(g.mem_size(), pages * PAGE);
        let fresh = g.read(old_end, grow as usize * PAGE);
        assert!(fresh.iter().all(|&b| b == 0), "new pages are zero");
        // Compiled code sees the new length.
        assert_eq!(g.load8(pages as u32 * PAGE as u32 - 1), 0);
        g.write(old_end, b"x");
        assert_eq!(g.load8(old_end), i32::from(b'x'));
    }
    assert_eq!(g.read(DATA, 4), b"kept");
    // The limit is 64 pages: exactly reaching it works, one more is -1.
    let limit_pages = MEMORY_LIMIT / PAGE;
    assert_eq!(g.grow((limit_pages - pages) as u32), pages as i32);
    assert_eq!(g.size(), limit_pages as i32);
    assert_eq!(g.grow(1), -1);
    assert_eq!(g.grow(u32::MAX), -1);
    assert_eq!(g.size(), limit_pages as i32);
    assert_eq!(g.memory.data_ptr(&g.store) as usize, base);
    assert_eq!(g.grow(0), limit_pages as i32);
}

#[test]
fn a_module_whose_minimum_exceeds_the_limit_fails_to_instantiate() {
    let f = Fixture::new();
    let pages = MEMORY_LIMIT / PAGE + 1;
    let module = f
        .runtime
        .compile(format!("(module (memory (export \"memory\") {pages}))"))
        .expect("compile");
    let mut store = f.runtime.store().expect("store");
    let free = f.free();
    let err = futures::executor::block_on(f.runtime.instantiate(&mut store, &module))
        .expect_err("above the limit");
    let text = format!("{err:#}");
    assert!(
        text.contains(&format!("needs {} bytes", pages * PAGE))
            && text.contains(&format!("at most {MEMORY_LIMIT}")),
        "{text}"
    );
    assert_eq!(f.free(), free, "nothing was reserved");
    // Exactly the limit is fine.
    let module = f
        .runtime
        .compile(format!(
            "(module (memory (export \"memory\") {}))",
            pages - 1
        ))
        .expect("compile");
    futures::executor::block_on(f.runtime.instantiate(&mut store, &module)).expect("at the limit");
}

#[test]
fn snapshots_restore_bytes_and_size() {
    let f = Fixture::new();
    let mut rng = Rng::new("snapshot");
    let creator = f.runtime.memory_creator().expect("managed memory").clone();
    let mut a = f.guest();
    assert_eq!(a.grow(3), INITIAL_PAGES as i32);
    let size = a.mem_size();
    assert_eq!(size, (INITIAL_PAGES + 3) * PAGE);
    let data = rng.bytes(size);
    a.write(0, &data);
    let snapshot = creator.snapshot(&mut a.store, &a.memory).expect("snapshot");
    assert_eq!(snapshot.len(), size);
    assert_eq!(snapshot.bytes, data);

    // Into A itself after scribbling over it.
    a.write(0, &vec![0x11; size]);
    creator
        .restore(&mut a.store, &a.memory, &snapshot)
        .expect("restore in place");
    assert_eq!(a.read(0, size), data);

    // Into a fresh, smaller instance: it grows to the snapshot's size, and
    // compiled code sees the bytes and the size.
    let mut b = f.guest();
    assert_eq!(b.mem_size(), INITIAL_PAGES * PAGE);
    let base = b.memory.data_ptr(&b.store) as usize;
    creator
        .restore(&mut b.store, &b.memory, &snapshot)
        .expect("restore into a smaller memory");
    assert_eq!(b.mem_size(), size);
    assert_eq!(b.size(), (INITIAL_PAGES + 3) as i32);
    assert_eq!(b.memory.data_ptr(&b.store) as usize, base);
    assert_eq!(b.read(0, size), data);
    for at in [0, 1, PAGE * INITIAL_PAGES, size - 1] {
        assert_eq!(b.load8(at as u32), i32::from(data[at]), "byte {at}");
    }

    // A smaller snapshot into a bigger memory: refused, nothing changed.
    let mut c = f.guest();
    let small = creator.snapshot(&mut c.store, &c.memory).expect("snapshot");
    assert_eq!(small.len(), INITIAL_PAGES * PAGE);
    match creator.restore(&mut b.store, &b.memory, &small) {
        Err(GuestMemoryError::Shrink { current, snapshot }) => {
            assert_eq!((current, snapshot), (size, INITIAL_PAGES * PAGE));
        }
        other => panic!("expected Shrink, got {other:?}"),
    }
    assert_eq!(b.read(0, size), data);

    // A memory another runtime made is not this creator's.
    let other = Fixture::new();
    let mut d = other.guest();
    assert!(matches!(
        creator.snapshot(&mut d.store, &d.memory),
        Err(GuestMemoryError::NotManaged)
    ));
}

// --------------------------------------------------------------- resources

#[test]
fn dropping_a_store_returns_every_byte() {
    let f = Fixture::new();
    let mut rng = Rng::new("resources");
    let before = f.free();
    {
        let mut g = f.guest();
        assert!(f.free() < before, "the guest's memory is charged");
        let (module, function) = g.load_vadd();
        let _second_module = g.load_ptx(twins::VECTOR_ADD_PTX);
        let n = 50_000u32;
        let bytes = 4 * n;
        assert!(g.grow(8) >= 0);
        let (x, y) = (rng.floats(n as usize), rng.floats(n as usize));
        g.write_floats(DATA, &x);
        g.write_floats(DATA + bytes, &y);
        let bufs: Vec<u64> = (0..3).map(|_| g.alloc(bytes.into())).collect();
        assert_eq!(g.copy_to_buffer(bufs[0], 0, DATA, bytes), 0);
        // Launches left in flight: guest pointers and buffers.
        for _ in 0..4 {
            assert_eq!(
                g.launch_n(
                    function,
                    n,
                    &vadd_guest_args(DATA, DATA + bytes, DATA + 2 * bytes, n)
                ),
                0
            );
            assert_eq!(
                g.launch_n(
                    function,
                    n,
                    &[
                        ArgDescriptor::buffer(Handle(bufs[0]), 0),
                        ArgDescriptor::guest_aligned(DATA.into(), bytes.into(), 4),
                        ArgDescriptor::buffer(Handle(bufs[2]), 0),
                        ArgDescriptor::i32(n as i32),
                    ]
                ),
                0
            );
        }
        // A module unloaded while its function lives, a freed buffer.
        assert_eq!(g.module_unload(module), 0);
        assert_eq!(g.buffer_free(bufs[1]), 0);
        assert_eq!(g.live(), [2, 1, 1, 8]);
        assert!(f.free() < before);
    }
    assert_eq!(f.free(), before, "every byte came back");
    // And again with a guest that only allocated.
    {
        let mut g = f.guest();
        for _ in 0..10 {
            g.alloc(1 << 20);
        }
    }
    assert_eq!(f.free(), before);
}

// ---------------------------------------------------------------- examples

fn run_example(name: &str, args: &[&str]) -> tensorwasm_embed::run::RunReport {
    let options = RunOptions {
        guest: example(name),
        driver: DriverChoice::Cpu,
        invoke: Some("run".into()),
        args: args.iter().map(|s| s.to_string()).collect(),
        memory_limit: 64 << 20,
        tenant: None,
        dirs: Vec::new(),
        env: Vec::new(),
        compile_cache: None,
    };
    tensorwasm_embed::run::run(&options).unwrap_or_else(|e| panic!("{name} {args:?}: {e}"))
}

#[test]
fn the_vector_add_example_runs() {
    for n in ["1", "255", "256", "257", "4096", "100003"] {
        let report = run_example("vector_add.wat", &[n]);
        assert_eq!(report.results, ["0"], "n = {n}: {:?}", report.last_error);
        assert_eq!(report.driver, tensorwasm_core::DriverKind::Cpu);
        assert_eq!(report.last_error, None);
        assert!(report.cuda_unavailable.is_none());
    }
    // A bad n is the guest's -1, not a failure.
    assert_eq!(run_example("vector_add.wat", &["0"]).results, ["-1"]);
}

#[test]
fn the_device_buffers_example_runs() {
    for (n, rounds) in [("1", "1"), ("100", "0"), ("257", "3"), ("10000", "8")] {
        let report = run_example("device_buffers.wat", &[n, rounds]);
        assert_eq!(
            report.results,
            ["0"],
            "n = {n}, rounds = {rounds}: {:?}",
            report.last_error
        );
        assert_eq!(report.last_error, None);
    }
}

#[test]
fn sixteen_guests_share_one_executor() {
    let driver = common::cpu_driver();
    let runtime = GuestRuntime::new(driver.clone(), 8 << 20).expect("runtime");
    let wat = std::fs::read_to_string(example("vector_add.wat")).expect("read the example");
    let module = runtime.compile(&wat).expect("compile");
    let free = driver.mem_info().expect("mem_info").free;
    let runs = (0..16).map(|i| {
        let (runtime, module) = (&runtime, &module);
        async move {
            let mut store = runtime.store().expect("store");
            let instance = runtime
                .instantiate(&mut store, module)
                .await
                .expect("instantiate");
            let run = instance.get_func(&mut store, "run").expect("run");
            let n = 20_000 + 1000 * i;
            let mut results = [Val::I32(-999)];
            run.call_async(&mut store, &[Val::I32(n)], &mut results)
                .await
                .expect("call");
            (
                results[0].unwrap_i32(),
                store.data().cuda.last_error().to_string(),
            )
        }
    });
    let results = futures::executor::block_on(futures::future::join_all(runs));
    assert_eq!(results.len(), 16);
    for (i, (r, last)) in results.iter().enumerate() {
        assert_eq!(*r, 0, "guest {i}: {last}");
    }
    assert_eq!(driver.mem_info().expect("mem_info").free, free);
}

/// A runtime on the CPU driver (with the PTX twins) and the vector-add
/// example guest compiled for it.
fn vector_add_on_the_cpu_driver() -> (
    tensorwasm_embed::runtime::GuestRuntime<tensorwasm_cpu::CpuDriver>,
    tensorwasm_embed::kernel::GuestModule,
) {
    let driver = tensorwasm_cpu::CpuDriver::with_capacity(1 << 30).unwrap();
    tensorwasm_embed::twins::register(&driver);
    let rt = tensorwasm_embed::runtime::GuestRuntime::new(driver, 64 << 20).unwrap();
    let module = rt
        .compile(include_str!("../../examples/vector_add.wat"))
        .unwrap();
    (rt, module)
}

/// The adaptive wait policy through a guest's waits: the default, the first
/// wait spins, results are right whatever the waits take, and `Suspend`
/// never spins. (Which waits spin is a function of how long earlier waits
/// took, which depends on the machine's load: `wait.rs`'s unit tests check
/// those decisions on given durations.)
#[test]
fn the_adaptive_wait_gives_the_same_results_and_suspend_never_spins() {
    use std::time::Duration;
    use tensorwasm_embed::wasi_cuda::{DEFAULT_WAIT_SPIN, WaitPolicy};
    let (rt, module) = vector_add_on_the_cpu_driver();
    let mut store = rt.store().unwrap();
    assert_eq!(
        store.data().cuda.wait_policy(),
        WaitPolicy::Adaptive(DEFAULT_WAIT_SPIN),
        "the default"
    );
    let budget = Duration::from_millis(2);
    store
        .data_mut()
        .cuda
        .set_wait_policy(WaitPolicy::Adaptive(budget));
    assert!(
        store.data().cuda.spins_before_next_wait(),
        "a new stream spins first"
    );
    let instance = futures::executor::block_on(rt.instantiate(&mut store, &module)).unwrap();
    let run = instance
        .get_typed_func::<i32, i32>(&mut store, "run")
        .unwrap();
    for n in [4 << 20, 1, 4 << 20, 4097, 1] {
        let status = futures::executor::block_on(run.call_async(&mut store, n)).unwrap();
        assert_eq!(status, 0, "n {n}: {}", store.data().cuda.last_error());
    }
    store.data_mut().cuda.set_wait_policy(WaitPolicy::Suspend);
    assert!(!store.data().cuda.spins_before_next_wait());
    let status = futures::executor::block_on(run.call_async(&mut store, 4097)).unwrap();
    assert_eq!(status, 0);
    assert!(!store.data().cuda.spins_before_next_wait());
}

/// With a spin budget, `wait` keeps asking the driver for a while before it
/// suspends; results are the same, and a failure is still reported.
#[test]
fn wait_with_a_spin_budget_gives_the_same_results() {
    use std::time::Duration;
    let (rt, module) = vector_add_on_the_cpu_driver();
    for spin in [
        Duration::ZERO,
        Duration::from_micros(5),
        Duration::from_millis(50),
    ] {
        let mut store = rt.store().unwrap();
        store.data_mut().cuda.set_wait_spin(spin);
        let instance = futures::executor::block_on(rt.instantiate(&mut store, &module)).unwrap();
        let run = instance
            .get_typed_func::<i32, i32>(&mut store, "run")
            .unwrap();
        for n in [1, 4097, 100_003] {
            let status = futures::executor::block_on(run.call_async(&mut store, n)).unwrap();
            assert_eq!(
                status,
                0,
                "spin {spin:?}, n {n}: {}",
                store.data().cuda.last_error()
            );
        }
    }
}
