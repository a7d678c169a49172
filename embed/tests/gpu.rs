//! Guests on a real GPU: the example guests over managed guest memory and
//! device buffers, the refusal of a host-heap pointer, many guests
//! waiting on one executor thread, and Wasm kernels' sandbox (traps, fuel,
//! the launch time limit). Run on the device machine with
//! `--include-ignored` (scripts/pack-gpu-tests.sh packs this file).

use std::time::{Duration, Instant};

use tensorwasm_core::{GpuDriver, abi::Errno};
use tensorwasm_cuda::CudaDriver;
use tensorwasm_embed::{
    runtime::{GuestRuntime, GuestState},
    wasi_cuda::WasiCudaLimits,
};
use wasmtime::{Instance, Store};

const VECTOR_ADD: &str = include_str!("../../examples/vector_add.wat");
const DEVICE_BUFFERS: &str = include_str!("../../examples/device_buffers.wat");

/// 16M floats, as the issue asks.
const N: u32 = 16 << 20;

/// The tests of this binary run one at a time: free device memory is a
/// process-wide reading, and another test's allocations would blur it.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn runtime(limit: usize) -> GuestRuntime<CudaDriver> {
    let driver = CudaDriver::new(0).expect("a CUDA device");
    GuestRuntime::new(driver, limit).expect("runtime")
}

fn instantiate(
    rt: &GuestRuntime<CudaDriver>,
    wat: &str,
) -> (Store<GuestState<CudaDriver>>, Instance) {
    let module = rt.compile(wat).expect("compile");
    let mut store = rt.store().expect("store");
    let instance =
        futures::executor::block_on(rt.instantiate(&mut store, &module)).expect("instantiate");
    (store, instance)
}

fn f32_at(bytes: &[u8], offset: usize) -> f32 {
    f32::from_le_bytes(bytes[offset..offset + 4].try_into().unwrap())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn vector_add_guest_on_16m_random_floats() {
    let _serial = serial();
    let rt = runtime(1 << 30);
    let (mut store, instance) = instantiate(&rt, VECTOR_ADD);
    let run = instance
        .get_typed_func::<i32, i32>(&mut store, "run")
        .unwrap();
    let status = futures::executor::block_on(run.call_async(&mut store, N as i32)).unwrap();
    assert_eq!(status, 0, "guest: {}", store.data().cuda.last_error());

    // Check again from the host, element by element, in the guest's memory.
    let memory = instance.get_memory(&mut store, "memory").unwrap();
    let base = memory.data_ptr(&store) as u64;
    let info = rt
        .driver()
        .pointer_info(tensorwasm_core::DevicePtr(base))
        .unwrap();
    assert!(
        info.is_managed(),
        "guest memory is managed memory: {info:?}"
    );
    let bytes = memory.data(&store);
    let (a, b, c) = (65536usize, 65536 + 4 * N as usize, 65536 + 8 * N as usize);
    let mut distinct = std::collections::HashSet::new();
    for i in 0..N as usize {
        let (x, y, z) = (
            f32_at(bytes, a + 4 * i),
            f32_at(bytes, b + 4 * i),
            f32_at(bytes, c + 4 * i),
        );
        assert!(x != 0.0 && y != 0.0, "inputs are never zero");
        assert_eq!(z.to_bits(), (x + y).to_bits(), "element {i}");
        if i < 4096 {
            distinct.insert(x.to_bits());
        }
    }
    assert!(distinct.len() > 4000, "inputs are random");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn device_buffer_guest_keeps_data_on_the_device() {
    let _serial = serial();
    let rt = runtime(1 << 30);
    let free_before = rt.driver().mem_info().unwrap().free;
    let (mut store, instance) = instantiate(&rt, DEVICE_BUFFERS);
    let run = instance
        .get_typed_func::<(i32, i32), i32>(&mut store, "run")
        .unwrap();
    let status = futures::executor::block_on(run.call_async(&mut store, (N as i32, 8))).unwrap();
    assert_eq!(status, 0, "guest: {}", store.data().cuda.last_error());
    // Buffers and the module were released by the guest, its launches by
    // `sync`; its function handle lives until the guest ends.
    assert_eq!(store.data().cuda.live_handles(), [0, 0, 1, 0]);
    drop(store);
    // The device buffers (2 x 64 MiB) come back. The guest's managed memory
    // (the 192 MiB it touched) may stay counted as used: the UVM driver
    // keeps freed managed pages in a per-process pool (measured in the
    // foundation issue, docs/verification/2026-11-22-foundation-gpu.md).
    let free_after = rt.driver().mem_info().unwrap().free;
    let touched = 65536 + 12 * u64::from(N);
    let lost = free_before.saturating_sub(free_after);
    eprintln!("free device memory: {free_before} before, {free_after} after ({lost} bytes lost)");
    assert!(
        lost <= touched + (32 << 20),
        "free memory {free_before} -> {free_after}: {lost} bytes lost, more than the \
         {touched} bytes of managed memory the guest touched"
    );
}

/// A guest whose memory is wasmtime's own host memory: the launch with a
/// guest pointer is refused before the driver sees it.
#[test]
#[ignore = "needs a CUDA GPU"]
fn host_heap_pointer_is_refused_before_launch() {
    let _serial = serial();
    let driver = CudaDriver::new(0).unwrap();
    let rt = GuestRuntime::with_host_memory(driver).unwrap();
    let (mut store, instance) = instantiate(&rt, VECTOR_ADD);
    let run = instance
        .get_typed_func::<i32, i32>(&mut store, "run")
        .unwrap();
    let status = futures::executor::block_on(run.call_async(&mut store, 1024)).unwrap();
    assert_eq!(
        status,
        -Errno::ENOTADDR.code(),
        "{}",
        store.data().cuda.last_error()
    );
    let text = store.data().cuda.last_error();
    assert!(text.starts_with("launch: ENOTADDR"), "{text}");
    // The pointer really is host memory the device cannot use.
    let memory = instance.get_memory(&mut store, "memory").unwrap();
    let base = memory.data_ptr(&store) as u64;
    let info = rt.driver().pointer_info(tensorwasm_core::DevicePtr(base));
    assert!(
        info.as_ref().map_or(true, |i| !i.is_device_addressable()),
        "{info:?}"
    );
    assert_eq!(
        store.data().cuda.live_handles()[3],
        0,
        "no launch handle issued"
    );
}

/// 32 guests on one thread: each launches, then suspends in `wait`; the
/// completion callbacks wake them and every one finishes correctly.
#[test]
#[ignore = "needs a CUDA GPU"]
fn many_guests_wait_on_one_executor() {
    let _serial = serial();
    const GUESTS: usize = 32;
    let rt = runtime(64 << 20);
    let module = rt.compile(VECTOR_ADD).unwrap();
    let mut stores: Vec<_> = (0..GUESTS).map(|_| rt.store().unwrap()).collect();
    let results = futures::executor::block_on(async {
        let runs = stores.iter_mut().enumerate().map(|(i, store)| {
            let (rt, module) = (&rt, &module);
            async move {
                let instance = rt.instantiate(store, module).await?;
                let run = instance.get_typed_func::<i32, i32>(&mut *store, "run")?;
                run.call_async(&mut *store, (1 << 20) + i as i32).await
            }
        });
        futures::future::join_all(runs).await
    });
    for (i, r) in results.into_iter().enumerate() {
        assert_eq!(
            r.unwrap(),
            0,
            "guest {i}: {}",
            stores[i].data().cuda.last_error()
        );
    }
}

const WASM_KERNELS: &str = include_str!("../../examples/wasm_kernels.wat");

/// Vector add and SAXPY written as Wasm functions, lowered to PTX, on 16M
/// random floats, every element checked by the guest against wasmtime's own
/// arithmetic; the second run pays no lowering.
#[test]
#[ignore = "needs a CUDA GPU"]
fn wasm_kernels_on_16m_random_floats() {
    let _serial = serial();
    let rt = runtime(1 << 30);
    let (mut store, instance) = instantiate(&rt, WASM_KERNELS);
    let run = instance
        .get_typed_func::<i32, i32>(&mut store, "run")
        .unwrap();
    let status = futures::executor::block_on(run.call_async(&mut store, N as i32)).unwrap();
    assert_eq!(status, 0, "guest: {}", store.data().cuda.last_error());
    assert_eq!(rt.kernel_cache().lowerings(), 2, "two kernels lowered");
    let status = futures::executor::block_on(run.call_async(&mut store, 1 << 20)).unwrap();
    assert_eq!(status, 0, "guest: {}", store.data().cuda.last_error());
    assert_eq!(
        rt.kernel_cache().lowerings(),
        2,
        "the second run lowers nothing"
    );
}

/// An out-of-bounds store traps and writes nothing outside the guest's
/// memory; an endless loop ends out of fuel; after either, the next launch
/// on the same context runs and is right.
#[test]
#[ignore = "needs a CUDA GPU"]
fn wasm_kernel_traps_leave_the_context_healthy() {
    let _serial = serial();
    let rt = runtime(1 << 30);
    let (mut store, instance) = instantiate(&rt, WASM_KERNELS);
    let traps = instance
        .get_typed_func::<(), i32>(&mut store, "traps")
        .unwrap();
    let status = futures::executor::block_on(traps.call_async(&mut store, ())).unwrap();
    assert_eq!(status, 0, "guest: {}", store.data().cuda.last_error());
    let text = store.data().cuda.last_error().to_string();
    assert!(text.contains("out of fuel"), "{text}");
    // The out-of-bounds kernel tried to store 7 at memory.size * 64 KiB + 4i.
    // The guest memory is a managed region reserved at 1 GiB, so the bytes
    // past its exposed size are mapped memory a stray store would have hit.
    let memory = instance.get_memory(&mut store, "memory").unwrap();
    let (base, size) = (memory.data_ptr(&store), memory.data_size(&store));
    // SAFETY: the region's capacity (1 GiB) is far above `size`, and managed
    // memory is host-readable at its device address.
    let past = unsafe { std::slice::from_raw_parts(base.add(size), 1 << 16) };
    assert!(
        past.iter().all(|b| *b == 0),
        "nothing written past the memory"
    );
    // And a PTX guest on the same device runs after them.
    let (mut other, instance) = instantiate(&rt, VECTOR_ADD);
    let run = instance
        .get_typed_func::<i32, i32>(&mut other, "run")
        .unwrap();
    assert_eq!(
        futures::executor::block_on(run.call_async(&mut other, 1 << 20)).unwrap(),
        0
    );
}

/// An endless loop and a cheap marking kernel; `get(index)` makes a kernel
/// of function `index` (imports first: `$spin` is 3, `$mark` 4), `run(grid,
/// block)` launches it over `grid` x `block` threads and waits (0 or the
/// errno). `$mark` sets byte `65536 + blockIdx.x`.
const TIMED: &str = r#"(module
  (import "wasi_cuda" "kernel_get" (func $kernel_get (param i32 i32) (result i32)))
  (import "wasi_cuda" "launch" (func $launch (param i64 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "wasi_cuda" "wait" (func $wait (param i64) (result i32)))
  (import "tensorwasm_kernel" "block_idx_x" (func $bid (result i32)))
  (memory (export "memory") 17)
  (func $spin (loop $forever (br $forever)))
  (func $mark (i32.store8 (i32.add (i32.const 65536) (call $bid)) (i32.const 1)))
  (func (export "get") (param $index i32) (result i32)
    (call $kernel_get (local.get $index) (i32.const 64)))
  (func (export "run") (param $grid i32) (param $block i32) (result i32)
    (local $err i32)
    (local.set $err (call $launch (i64.load (i32.const 64))
      (local.get $grid) (i32.const 1) (i32.const 1)
      (local.get $block) (i32.const 1) (i32.const 1)
      (i32.const 0) (i32.const 128) (i32.const 0) (i32.const 72)))
    (if (local.get $err) (then (return (local.get $err))))
    (call $wait (i64.load (i32.const 72)))))"#;

/// Makes a kernel of function `index` (untimed: the first time includes
/// lowering and loading), then launches it and waits: the result and how
/// long the launch took.
fn timed_run(
    store: &mut Store<GuestState<CudaDriver>>,
    instance: &Instance,
    (index, grid, block): (i32, i32, i32),
) -> (i32, Duration) {
    let get = instance
        .get_typed_func::<i32, i32>(&mut *store, "get")
        .unwrap();
    let made = futures::executor::block_on(get.call_async(&mut *store, index)).unwrap();
    assert_eq!(made, 0, "{}", store.data().cuda.last_error());
    let run = instance
        .get_typed_func::<(i32, i32), i32>(&mut *store, "run")
        .unwrap();
    let started = Instant::now();
    let status = futures::executor::block_on(run.call_async(&mut *store, (grid, block))).unwrap();
    (status, started.elapsed())
}

/// An endless loop with fuel for ages ends at the launch's time limit
/// (50 ms): every thread stops on its own, on a grid that fits the GPU at
/// once and on one of 2^20 blocks that does not (the later blocks end at
/// their entry). The context stays healthy: the next launch in the same
/// slot runs whole.
#[test]
#[ignore = "needs a CUDA GPU"]
fn wasm_kernel_endless_loop_ends_at_the_launch_time_limit() {
    let _serial = serial();
    let mut rt = runtime(1 << 30);
    let limit = Duration::from_millis(50);
    rt.set_limits(WasiCudaLimits {
        kernel_fuel: u64::MAX,
        launch_time_ns: limit.as_nanos() as u64,
        ..WasiCudaLimits::default()
    });
    let (mut store, instance) = instantiate(&rt, TIMED);
    for grid in [1024, 1 << 20] {
        let (status, took) = timed_run(&mut store, &instance, (3, grid, 256));
        let text = store.data().cuda.last_error().to_string();
        eprintln!("{grid} blocks of an endless loop stopped after {took:?}");
        assert_eq!(status, Errno::ETRAP.code(), "{text}");
        assert!(
            text.starts_with("wait: ETRAP: kernel `kernel_3` trapped: launch time limit exceeded"),
            "{text}"
        );
        assert!(took >= limit, "stopped after {took:?}");
        assert!(took < Duration::from_secs(5), "took {took:?}");

        let (status, _) = timed_run(&mut store, &instance, (4, 1000, 32));
        assert_eq!(status, 0, "{}", store.data().cuda.last_error());
        let memory = instance.get_memory(&mut store, "memory").unwrap();
        let marks = &mut memory.data_mut(&mut store)[65536..65536 + 1000];
        assert!(
            marks.iter().all(|&b| b == 1),
            "every block of the next launch ran"
        );
        marks.fill(0);
    }
}
