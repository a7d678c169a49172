//! Tenant quotas and policy on the CPU driver (docs/tenants.md): every
//! quota refuses with `EQUOTA` and a message naming it, before anything is
//! allocated; a tenant over quota does not stop another; the policy keeps
//! raw PTX from untrusted tenants; guest fuel ends a guest that will not
//! stop; and when a tenant goes, work in flight included, every charge and
//! every byte comes back.

#[allow(dead_code)] // the shared test guest and inputs; the rest is for other suites
mod common;
#[allow(dead_code)] // the calls into a tenant's guest; its own guest is for other suites
#[path = "support/tenant_guest.rs"]
mod tenant_guest;

use std::sync::Arc;

use common::{Rng, test_guest_wat};
use tenant_guest::{call, last_error, read_u64, write};
use tensorwasm_core::{
    GpuDriver,
    abi::{
        Errno,
        tensor::{DType, OperandDescriptor, TensorHeader, TensorOpKind, encode_tensor_op},
    },
    quota::{QuotaLedger, Resource, TenantQuota},
};
use tensorwasm_cpu::CpuDriver;
use tensorwasm_embed::{
    kernel::GuestModule,
    runtime::GuestRuntime,
    tenant::{Tenant, TenantConfig},
    twins,
    wasi_cuda::TenantPolicy,
};
use wasmtime::Val;

const OUT: u32 = 0x40;
const DESC: u32 = 0x100;
const TEXT: u32 = 0x2000;
const X: u32 = 0x1_0000;
const Y: u32 = 0x2_0000;

struct World {
    driver: CpuDriver,
    runtime: GuestRuntime<CpuDriver>,
    module: GuestModule,
}

fn world() -> World {
    let driver = CpuDriver::with_capacity(256 << 20).expect("CPU driver");
    twins::register(&driver);
    let runtime = GuestRuntime::new(driver.clone(), 64 << 20).expect("runtime");
    let module = runtime.compile(test_guest_wat()).expect("compile");
    World {
        driver,
        runtime,
        module,
    }
}

/// A tenant with `quota` and `policy`, instantiated.
fn tenant(w: &World, quota: TenantQuota, policy: TenantPolicy) -> Tenant<CpuDriver> {
    let config = TenantConfig {
        quota,
        policy,
        ..TenantConfig::untrusted("test")
    };
    let mut t = Tenant::new(&w.runtime, &config).expect("tenant");
    futures::executor::block_on(t.instantiate(&w.runtime, &w.module)).expect("instantiate");
    t
}

fn alloc(t: &mut Tenant<CpuDriver>, bytes: u64) -> Result<u64, i32> {
    match call(
        t,
        "buffer_alloc",
        &[Val::I64(bytes as i64), Val::I32(OUT as i32)],
    ) {
        0 => Ok(read_u64(t, OUT)),
        e => Err(e),
    }
}

/// Queues a ReLU over 4096 floats of guest memory; the launch handle or
/// the errno.
fn queue_relu(t: &mut Tenant<CpuDriver>) -> Result<u64, i32> {
    let desc = encode_tensor_op(
        &TensorHeader::new(TensorOpKind::Relu),
        &[
            OperandDescriptor::guest(X, DType::F32, &[4096]),
            OperandDescriptor::guest(Y, DType::F32, &[4096]),
        ],
    );
    write(t, DESC, &desc);
    match call(
        t,
        "tensor_op",
        &[
            Val::I32(DESC as i32),
            Val::I32(desc.len() as i32),
            Val::I32(OUT as i32),
        ],
    ) {
        0 => Ok(read_u64(t, OUT)),
        e => Err(e),
    }
}

fn assert_quota_error(t: &Tenant<CpuDriver>, e: i32, call: &str, what: &str) {
    assert_eq!(e, Errno::EQUOTA.code(), "{call}: {}", last_error(t));
    let text = last_error(t);
    assert!(
        text.starts_with(&format!("{call}: EQUOTA: {what} quota exceeded")),
        "{text}"
    );
}

fn all_zero(ledger: &QuotaLedger) {
    for r in Resource::ALL {
        assert_eq!(
            ledger.in_use(r),
            0,
            "{r} still charged: {}",
            ledger.snapshot()
        );
    }
}

#[test]
fn device_bytes_are_refused_past_the_quota_and_come_back_on_free() {
    let w = world();
    let free_before = w.driver.mem_info().unwrap().free;
    let mut t = tenant(
        &w,
        TenantQuota::default().with_device_bytes(1 << 20),
        TenantPolicy::UNTRUSTED,
    );
    let a = alloc(&mut t, 600 << 10).expect("first buffer");
    let free_after_a = w.driver.mem_info().unwrap().free;
    let e = alloc(&mut t, 600 << 10).unwrap_err();
    assert_quota_error(&t, e, "buffer_alloc", "device-buffer bytes");
    // Refused before the driver: nothing more was allocated.
    assert_eq!(w.driver.mem_info().unwrap().free, free_after_a);
    assert_eq!(t.usage().in_use(Resource::DeviceBytes), 600 << 10);
    assert_eq!(call(&mut t, "buffer_free", &[Val::I64(a as i64)]), 0);
    assert_eq!(t.usage().in_use(Resource::DeviceBytes), 0);
    alloc(&mut t, 600 << 10).expect("room again after the free");
    let ledger = Arc::clone(t.ledger());
    drop(t);
    all_zero(&ledger);
    assert_eq!(w.driver.mem_info().unwrap().free, free_before);
}

#[test]
fn modules_functions_and_launches_in_flight_have_quotas() {
    let w = world();
    let quota = TenantQuota::default()
        .with_modules(1)
        .with_functions(1)
        .with_launches_in_flight(2);
    let mut t = tenant(&w, quota, TenantPolicy::TRUSTED);
    let ptx = twins::VECTOR_ADD_PTX.as_bytes();
    write(&mut t, TEXT, ptx);
    let load = |t: &mut Tenant<CpuDriver>| {
        call(
            t,
            "module_load_ptx",
            &[
                Val::I32(TEXT as i32),
                Val::I32(ptx.len() as i32),
                Val::I32(OUT as i32),
            ],
        )
    };
    assert_eq!(load(&mut t), 0, "{}", last_error(&t));
    let module = read_u64(&mut t, OUT);
    let e = load(&mut t);
    assert_quota_error(&t, e, "module_load_ptx", "modules");

    write(&mut t, TEXT, b"vadd");
    let get = |t: &mut Tenant<CpuDriver>| {
        call(
            t,
            "function_get",
            &[
                Val::I64(module as i64),
                Val::I32(TEXT as i32),
                Val::I32(4),
                Val::I32(OUT as i32),
            ],
        )
    };
    assert_eq!(get(&mut t), 0, "{}", last_error(&t));
    let function = read_u64(&mut t, OUT);
    let e = get(&mut t);
    assert_quota_error(&t, e, "function_get", "functions");
    assert_eq!(
        call(&mut t, "function_release", &[Val::I64(function as i64)]),
        0
    );
    assert_eq!(get(&mut t), 0, "room again after the release");

    let mut rng = Rng::new("launch quota inputs");
    let bytes: Vec<u8> = rng
        .floats(4096)
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    write(&mut t, X, &bytes);
    let first = queue_relu(&mut t).expect("first launch");
    queue_relu(&mut t).expect("second launch");
    // Past the quota a launch waits for the guest's own oldest to finish
    // and takes its slot (tests/launch_queue.rs); the first's handle keeps
    // its result.
    queue_relu(&mut t).expect("a third launch, once the first has finished");
    assert!(t.usage().in_use(Resource::LaunchesInFlight) <= 2);
    assert_eq!(call(&mut t, "wait", &[Val::I64(first as i64)]), 0);
    assert_eq!(call(&mut t, "sync", &[]), 0);
    assert_eq!(t.usage().in_use(Resource::LaunchesInFlight), 0);
    // With nothing of its own in flight to wait for, a guest past the
    // quota is refused.
    let mut none = tenant(
        &w,
        TenantQuota::default().with_launches_in_flight(0),
        TenantPolicy::UNTRUSTED,
    );
    write(&mut none, X, &bytes);
    let e = queue_relu(&mut none).unwrap_err();
    assert_quota_error(&none, e, "tensor_op", "launches in flight");
}

#[test]
fn streams_and_guest_memory_have_quotas() {
    let w = world();
    let none = TenantConfig {
        quota: TenantQuota::default().with_streams(0),
        ..TenantConfig::untrusted("no streams")
    };
    let e = Tenant::new(&w.runtime, &none)
        .err()
        .expect("no stream, no tenant");
    assert!(
        format!("{e:#}").contains("EQUOTA: streams quota exceeded"),
        "{e:#}"
    );

    // The test guest starts with 4 pages; a quota of 6 lets it grow by 2.
    let mut t = tenant(
        &w,
        TenantQuota::default().with_guest_memory_bytes(6 << 16),
        TenantPolicy::UNTRUSTED,
    );
    assert_eq!(t.usage().in_use(Resource::GuestMemoryBytes), 4 << 16);
    assert_eq!(call(&mut t, "grow", &[Val::I32(2)]), 4);
    assert_eq!(call(&mut t, "grow", &[Val::I32(1)]), -1, "past the quota");
    assert_eq!(t.usage().in_use(Resource::GuestMemoryBytes), 6 << 16);

    // A module whose initial memory is past the quota does not instantiate.
    let mut small = Tenant::new(
        &w.runtime,
        &TenantConfig {
            quota: TenantQuota::default().with_guest_memory_bytes(1 << 16),
            ..TenantConfig::untrusted("small")
        },
    )
    .unwrap();
    let e = futures::executor::block_on(small.instantiate(&w.runtime, &w.module)).unwrap_err();
    assert!(format!("{e:#}").contains("memory"), "{e:#}");
    assert_eq!(small.usage().in_use(Resource::GuestMemoryBytes), 0);
    let ledger = Arc::clone(small.ledger());
    drop(small);
    all_zero(&ledger);
}

#[test]
fn raw_ptx_is_refused_by_the_untrusted_policy() {
    let w = world();
    let mut t = tenant(&w, TenantQuota::default(), TenantPolicy::UNTRUSTED);
    let ptx = twins::VECTOR_ADD_PTX.as_bytes();
    write(&mut t, TEXT, ptx);
    let e = call(
        &mut t,
        "module_load_ptx",
        &[
            Val::I32(TEXT as i32),
            Val::I32(ptx.len() as i32),
            Val::I32(OUT as i32),
        ],
    );
    assert_eq!(e, Errno::EPERM.code());
    assert!(
        last_error(&t).starts_with("module_load_ptx: EPERM: this tenant's policy does not allow"),
        "{}",
        last_error(&t)
    );
    assert_eq!(t.usage().in_use(Resource::Modules), 0);
    let e = call(
        &mut t,
        "module_load_cubin",
        &[Val::I32(TEXT as i32), Val::I32(16), Val::I32(OUT as i32)],
    );
    assert_eq!(e, Errno::EPERM.code());
    // Built-ins stay open to it.
    queue_relu(&mut t).expect("a built-in");
    assert_eq!(call(&mut t, "sync", &[]), 0);
}

#[test]
fn a_tenant_over_quota_does_not_stop_another() {
    let w = world();
    let quota = TenantQuota::default().with_device_bytes(1 << 20);
    let mut greedy = tenant(&w, quota, TenantPolicy::UNTRUSTED);
    let mut modest = tenant(&w, quota, TenantPolicy::UNTRUSTED);
    alloc(&mut greedy, 1 << 20).expect("its whole quota");
    let e = alloc(&mut greedy, 1).unwrap_err();
    assert_quota_error(&greedy, e, "buffer_alloc", "device-buffer bytes");
    // The other tenant's ledger is its own.
    alloc(&mut modest, 1 << 20).expect("the other tenant's whole quota");
    assert_eq!(modest.usage().in_use(Resource::DeviceBytes), 1 << 20);
}

#[test]
fn guest_fuel_ends_a_guest_that_will_not_stop() {
    let w = world();
    let looping = w
        .runtime
        .compile(r#"(module (func (export "spin") (loop (br 0))))"#)
        .unwrap();
    let config = TenantConfig {
        guest_fuel: Some(1_000_000),
        ..TenantConfig::untrusted("spinner")
    };
    let mut t = Tenant::new(&w.runtime, &config).unwrap();
    let instance = futures::executor::block_on(t.instantiate(&w.runtime, &looping)).unwrap();
    let spin = instance
        .get_typed_func::<(), ()>(t.store_mut(), "spin")
        .unwrap();
    let e = futures::executor::block_on(spin.call_async(t.store_mut(), ())).unwrap_err();
    assert_eq!(
        e.downcast_ref::<wasmtime::Trap>(),
        Some(&wasmtime::Trap::OutOfFuel),
        "{e:#}"
    );
}

#[test]
fn a_tenant_dropped_mid_flight_gives_everything_back() {
    let w = world();
    let free_before = w.driver.mem_info().unwrap().free;
    let mut ledgers = Vec::new();
    for round in 0..4 {
        let quota = TenantQuota::default().with_launches_in_flight(64);
        let mut t = tenant(&w, quota, TenantPolicy::UNTRUSTED);
        let mut rng = Rng::new("mid-flight inputs");
        let bytes: Vec<u8> = rng
            .floats(4096)
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        write(&mut t, X, &bytes);
        for _ in 0..3 {
            alloc(&mut t, 1 << 16).expect("buffer");
        }
        for _ in 0..16 {
            queue_relu(&mut t).expect("launch");
        }
        let usage = t.usage();
        assert_eq!(usage.in_use(Resource::LaunchesInFlight), 16);
        assert_eq!(usage.in_use(Resource::DeviceBytes), 3 << 16);
        assert_eq!(usage.in_use(Resource::Streams), 1);
        ledgers.push(Arc::clone(t.ledger()));
        // Dropped with 16 launches queued, no wait: the drop waits for them
        // and frees what they use after they finish.
        if round % 2 == 0 {
            drop(t);
        } else {
            std::thread::spawn(move || drop(t)).join().unwrap();
        }
    }
    for ledger in &ledgers {
        all_zero(ledger);
    }
    assert_eq!(w.driver.mem_info().unwrap().free, free_before);
}
