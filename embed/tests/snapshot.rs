//! Tenant snapshots (`tensorwasm_embed::snapshot`): a tenant's memory,
//! globals and GPU handles are taken between calls, written to a file, and
//! restored into a fresh tenant on a new driver (a new process after a
//! device fault): every handle means what it meant (a Wasm kernel, a raw
//! module's function, a buffer with its contents, a freed handle stays
//! freed), the tenant is charged again for what it holds, and a snapshot is
//! refused where it cannot be right (another module, a quota that no longer
//! admits it, launches not waited for).

#[allow(dead_code)] // the shared guest's constants this suite does not use
#[path = "support/tenant_guest.rs"]
mod tenant_guest;

use tenant_guest::{
    DOUBLE, Device, N, OUT, X, Y, call, double_args, last_error, launch_args, read, read_u64, write,
};
use tensorwasm_core::{
    abi::{ArgDescriptor, Errno},
    quota::Resource,
};
use tensorwasm_cpu::CpuDriver;
use tensorwasm_embed::{
    kernel::GuestModule,
    runtime::GuestRuntime,
    snapshot::TenantSnapshot,
    tenant::{Tenant, TenantConfig},
    twins::{self, VECTOR_ADD_PTX},
};
use wasmtime::Val;

/// Where the PTX text and the function's name go.
const TEXT: u32 = 0x3_0000;
const NAME: u32 = 0x300;
/// Bytes of the guest's device buffer.
const BUFFER: u32 = 4096;

fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn tenant<D: Device>(
    rt: &GuestRuntime<D>,
    module: &GuestModule,
    config: &TenantConfig,
) -> Tenant<D> {
    let mut t = Tenant::new(rt, config).expect("tenant");
    futures::executor::block_on(t.instantiate(rt, module)).expect("instantiate");
    t
}

fn ok<D: Device>(t: &mut Tenant<D>, name: &str, args: &[Val]) -> u64 {
    let r = call(t, name, args);
    assert_eq!(r, 0, "{name}: {}", last_error(t));
    read_u64(t, OUT)
}

fn launch_and_wait<D: Device>(t: &mut Tenant<D>, args: &[Val; 11]) {
    let launch = ok(t, "launch", args);
    ok(t, "wait", &[Val::I64(launch as i64)]);
}

/// The handles the scenario made before its snapshot.
struct Made {
    kernel: u64,
    vadd: u64,
    buffer: u64,
    freed: u64,
}

/// Makes a Wasm kernel, a raw module's function, a buffer with contents and
/// a freed buffer handle; doubles the floats at `X` once; sets `counter`.
fn make<D: Device>(t: &mut Tenant<D>, x: &[f32]) -> Made {
    write(t, X, &bytes(x));
    let kernel = ok(t, "kernel_get", &[Val::I32(DOUBLE), Val::I32(OUT as i32)]);
    let args = double_args(t, kernel);
    launch_and_wait(t, &args);
    let buffer = ok(
        t,
        "buffer_alloc",
        &[Val::I64(BUFFER.into()), Val::I32(OUT as i32)],
    );
    let copy = [
        Val::I64(buffer as i64),
        Val::I64(0),
        Val::I32(X as i32),
        Val::I32(BUFFER as i32),
    ];
    ok(t, "copy_to_buffer", &copy);
    let freed = ok(t, "buffer_alloc", &[Val::I64(64), Val::I32(OUT as i32)]);
    ok(t, "buffer_free", &[Val::I64(freed as i64)]);
    write(t, TEXT, VECTOR_ADD_PTX.as_bytes());
    let load = [
        Val::I32(TEXT as i32),
        Val::I32(VECTOR_ADD_PTX.len() as i32),
        Val::I32(OUT as i32),
    ];
    let module = ok(t, "module_load_ptx", &load);
    write(t, NAME, b"vadd");
    let get = [
        Val::I64(module as i64),
        Val::I32(NAME as i32),
        Val::I32(4),
        Val::I32(OUT as i32),
    ];
    let vadd = ok(t, "function_get", &get);
    let instance = t.instance().unwrap();
    let counter = instance.get_global(t.store_mut(), "counter").unwrap();
    counter.set(t.store_mut(), Val::I32(7)).unwrap();
    Made {
        kernel,
        vadd,
        buffer,
        freed,
    }
}

/// Checks a restored tenant: its state, and that each handle still works.
fn check<D: Device>(t: &mut Tenant<D>, made: &Made, x: &[f32]) {
    let doubled: Vec<f32> = x.iter().map(|v| v * 2.0).collect();
    assert_eq!(floats(&read(t, X, N as usize * 4)), doubled, "memory");
    let instance = t.instance().unwrap();
    let counter = instance.get_global(t.store_mut(), "counter").unwrap();
    assert_eq!(counter.get(t.store_mut()).unwrap_i32(), 7, "global");
    // The buffer kept its contents: the first BUFFER bytes of `X` before.
    let copy = [
        Val::I32(Y as i32),
        Val::I64(made.buffer as i64),
        Val::I64(0),
        Val::I32(BUFFER as i32),
    ];
    assert_eq!(call(t, "copy_from_buffer", &copy), 0, "{}", last_error(t));
    assert_eq!(
        floats(&read(t, Y, BUFFER as usize)),
        doubled[..BUFFER as usize / 4],
        "buffer contents"
    );
    // The Wasm kernel runs again: X is quadrupled.
    let args = double_args(t, made.kernel);
    launch_and_wait(t, &args);
    let quadrupled: Vec<f32> = x.iter().map(|v| v * 4.0).collect();
    assert_eq!(floats(&read(t, X, N as usize * 4)), quadrupled, "kernel");
    // The raw function runs again: Y = X + X.
    let n = N as u64 * 4;
    let vadd = [
        ArgDescriptor::guest(X.into(), n),
        ArgDescriptor::guest(X.into(), n),
        ArgDescriptor::guest(Y.into(), n),
        ArgDescriptor::i32(N as i32),
    ];
    let args = launch_args(t, made.vadd, (N / 128, 128), &vadd);
    launch_and_wait(t, &args);
    let eight: Vec<f32> = x.iter().map(|v| v * 8.0).collect();
    assert_eq!(floats(&read(t, Y, N as usize * 4)), eight, "raw function");
    // A handle freed before the snapshot stays freed.
    assert_eq!(
        call(t, "buffer_free", &[Val::I64(made.freed as i64)]),
        Errno::EBADH.code(),
        "freed handle"
    );
    assert!(last_error(t).contains("freed"), "{}", last_error(t));
}

fn cpu() -> CpuDriver {
    let driver = CpuDriver::with_capacity(256 << 20).expect("CPU driver");
    twins::register(&driver);
    driver
}

fn random_floats(seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..N)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// The scenario on two drivers: made on `first`, restored on `second`.
fn snapshot_and_restore<D: Device>(first: D, second: D) {
    let path = std::env::temp_dir().join(format!("tw-snapshot-{}.twsnap", std::process::id()));
    let config = TenantConfig::trusted("a");
    let x = random_floats(0x5eed);
    let (made, usage) = {
        let rt = GuestRuntime::new(first, 16 << 20).expect("runtime");
        let module = rt.compile(tenant_guest::GUEST).expect("compile");
        let mut t = tenant(&rt, &module, &config);
        let made = make(&mut t, &x);
        // Launches not waited for: refused.
        let args = double_args(&mut t, made.kernel);
        let pending = ok(&mut t, "launch", &args);
        let refused = t.snapshot().unwrap_err().to_string();
        assert!(refused.contains("not waited for"), "{refused}");
        ok(&mut t, "wait", &[Val::I64(pending as i64)]);
        // Undo that launch's doubling by halving on the host.
        let halved: Vec<f32> = floats(&read(&mut t, X, N as usize * 4))
            .iter()
            .map(|v| v / 2.0)
            .collect();
        write(&mut t, X, &bytes(&halved));
        let snapshot = t.snapshot().expect("snapshot");
        snapshot.save(&path).expect("save");
        (made, t.usage())
    };
    let snapshot = TenantSnapshot::load(&path).expect("load");
    std::fs::remove_file(&path).unwrap();

    let rt = GuestRuntime::new(second, 16 << 20).expect("runtime");
    let module = rt.compile(tenant_guest::GUEST).expect("compile");
    let mut t = tenant(&rt, &module, &config);
    t.restore(&snapshot).expect("restore");
    let restored = t.usage();
    for r in [
        Resource::DeviceBytes,
        Resource::Modules,
        Resource::Functions,
    ] {
        assert_eq!(restored.in_use(r), usage.in_use(r), "{r:?} charged again");
    }
    check(&mut t, &made, &x);

    // Another module: refused.
    let other = rt
        .compile("(module (memory (export \"memory\") 4))")
        .expect("compile");
    let mut o = tenant(&rt, &other, &config);
    let e = o.restore(&snapshot).unwrap_err().to_string();
    assert!(e.contains("another module"), "{e}");

    // A quota that no longer admits the buffer: EQUOTA, and nothing held.
    let mut small = TenantConfig::trusted("small");
    small.quota = small.quota.with_limit(Resource::DeviceBytes, 1024);
    let mut s = tenant(&rt, &module, &small);
    let e = s.restore(&snapshot).unwrap_err().to_string();
    assert!(e.contains("EQUOTA") || e.contains("quota"), "{e}");
    let usage = s.usage();
    for r in [
        Resource::DeviceBytes,
        Resource::Modules,
        Resource::Functions,
    ] {
        assert_eq!(usage.in_use(r), 0, "{r:?} held after a failed restore");
    }
}

#[test]
fn a_tenant_restored_on_a_new_cpu_driver_keeps_its_memory_and_handles() {
    snapshot_and_restore(cpu(), cpu());
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_tenant_restored_on_the_gpu_keeps_its_memory_and_handles() {
    let driver = tensorwasm_cuda::CudaDriver::new(0).expect("a CUDA device");
    snapshot_and_restore(driver.clone(), driver);
}

#[test]
fn a_damaged_snapshot_file_is_refused() {
    let path = std::env::temp_dir().join(format!("tw-bad-{}.twsnap", std::process::id()));
    for bad in [
        &b"NOTASNAP"[..],
        b"TWSNAP01\xff\xff\xff\xff\xff\xff\xff\x7f",
        b"TWSNAP01\x02\x00\x00\x00\x00\x00\x00\x00{}",
    ] {
        std::fs::write(&path, bad).unwrap();
        assert!(TenantSnapshot::load(&path).is_err(), "{bad:?} was accepted");
    }
    std::fs::remove_file(&path).unwrap();
}
