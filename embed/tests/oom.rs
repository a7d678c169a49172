//! Out of memory for real: tenants each within their quota, whose quotas
//! together exceed the device, allocate until the device is full. A
//! tenant past its quota gets `EQUOTA`, one the device has no room for
//! `ENOMEM` (never a hang, a crash or a partial allocation); while the
//! device is full, the tenants' kernels still launch or are refused with
//! an errno, and a new tenant's guest memory is refused (its reservation
//! is checked against the free memory; the CUDA run does not ask: more
//! managed memory than the card has free can hang the GPU); once the
//! tenants free their buffers, everything works again, and when they go,
//! every charge and byte is back. On the CPU driver (CI) and on CUDA.

#[allow(dead_code)] // the shared guest's tensor-op slots are not used here
#[path = "support/tenant_guest.rs"]
mod tenant_guest;

use std::sync::Arc;

use tenant_guest::*;
use tensorwasm_core::{
    DriverKind, GpuDriver,
    abi::Errno,
    quota::{QuotaLedger, Resource, TenantQuota},
};
use tensorwasm_cpu::CpuDriver;
use tensorwasm_cuda::CudaDriver;
use tensorwasm_embed::{
    kernel::GuestModule,
    runtime::GuestRuntime,
    tenant::{Tenant, TenantConfig},
    twins,
    wasi_cuda::TenantPolicy,
};
use wasmtime::Val;

/// Tenants that share the device.
const TENANTS: usize = 3;

/// A guest memory's largest size.
const MEMORY_LIMIT: usize = 16 << 20;

/// A tenant with `device_bytes` of device memory in its quota, its guest
/// instantiated.
fn tenant<D: Device>(
    rt: &GuestRuntime<D>,
    module: &GuestModule,
    name: &str,
    device_bytes: u64,
) -> wasmtime::Result<Tenant<D>> {
    let config = TenantConfig {
        quota: TenantQuota::default().with_device_bytes(device_bytes),
        policy: TenantPolicy::UNTRUSTED,
        ..TenantConfig::untrusted(name)
    };
    let mut t = Tenant::new(rt, &config)?;
    futures::executor::block_on(t.instantiate(rt, module))?;
    Ok(t)
}

/// `buffer_alloc(bytes)`: the handle, or the errno and `last_error`.
fn alloc<D: Device>(t: &mut Tenant<D>, bytes: u64) -> Result<u64, (i32, String)> {
    match call(
        t,
        "buffer_alloc",
        &[Val::I64(bytes as i64), Val::I32(OUT as i32)],
    ) {
        0 => Ok(read_u64(t, OUT)),
        e => Err((e, last_error(t))),
    }
}

/// Launches `function` (the guest's `$double` over `N` floats at `X`) and
/// waits: 0 or the errno.
fn launch_and_wait<D: Device>(t: &mut Tenant<D>, function: u64) -> i32 {
    let args = double_args(t, function);
    match call(t, "launch", &args) {
        0 => {
            let handle = read_u64(t, OUT);
            call(t, "wait", &[Val::I64(handle as i64)])
        }
        e => e,
    }
}

/// The device's free memory once it is idle.
fn free<D: GpuDriver>(d: &D) -> u64 {
    d.synchronize().expect("synchronize");
    d.mem_info().expect("mem_info").free
}

/// The scenario (module docs) on `driver`: `chunk`-byte buffers, each
/// tenant's quota `quota` bytes.
fn fill_the_device<D: Device>(driver: D, chunk: u64, quota: u64) {
    // A kernel runs once first: CUDA keeps memory of its own for the
    // context from then on (112 MiB on an H100), which is no tenant's.
    {
        let rt = GuestRuntime::new(driver.clone(), MEMORY_LIMIT).expect("runtime");
        let module = rt.compile(GUEST).expect("compile");
        let mut t = tenant(&rt, &module, "warm-up", quota).expect("tenant");
        assert_eq!(
            call(
                &mut t,
                "kernel_get",
                &[Val::I32(DOUBLE), Val::I32(OUT as i32)]
            ),
            0
        );
        let f = read_u64(&mut t, OUT);
        assert_eq!(launch_and_wait(&mut t, f), 0, "{}", last_error(&t));
    }
    let free_before = free(&driver);
    assert!(
        quota * TENANTS as u64 > free_before && quota < free_before,
        "each quota fits the device, their sum does not"
    );
    let rt = GuestRuntime::new(driver.clone(), MEMORY_LIMIT).expect("runtime");
    let module = rt.compile(GUEST).expect("compile");
    let mut tenants: Vec<Tenant<D>> = (0..TENANTS)
        .map(|i| tenant(&rt, &module, &format!("t{i}"), quota).expect("tenant"))
        .collect();
    let ledgers: Vec<Arc<QuotaLedger>> = tenants.iter().map(|t| Arc::clone(t.ledger())).collect();
    // Each tenant's kernel, made before the device fills.
    let functions: Vec<u64> = tenants
        .iter_mut()
        .map(|t| {
            assert_eq!(
                call(t, "kernel_get", &[Val::I32(DOUBLE), Val::I32(OUT as i32)]),
                0,
                "{}",
                last_error(t)
            );
            read_u64(t, OUT)
        })
        .collect();

    // Round robin until every tenant is refused.
    let mut held: Vec<Vec<u64>> = vec![Vec::new(); TENANTS];
    let mut refused: Vec<Option<(i32, String)>> = vec![None; TENANTS];
    while refused.iter().any(Option::is_none) {
        for (i, t) in tenants.iter_mut().enumerate() {
            if refused[i].is_some() {
                continue;
            }
            let charged = t.usage().in_use(Resource::DeviceBytes);
            match alloc(t, chunk) {
                Ok(h) => held[i].push(h),
                Err((e, text)) => {
                    // Past its quota: EQUOTA; within it, no room: ENOMEM.
                    let (want, call) = if charged + chunk > quota {
                        (Errno::EQUOTA, "buffer_alloc: EQUOTA")
                    } else {
                        (Errno::ENOMEM, "buffer_alloc: ENOMEM")
                    };
                    assert_eq!(e, want.code(), "tenant {i} ({charged} bytes held): {text}");
                    assert!(text.starts_with(call), "{text}");
                    // A refusal charges nothing and holds nothing.
                    assert_eq!(t.usage().in_use(Resource::DeviceBytes), charged);
                    refused[i] = Some((e, text));
                }
            }
        }
    }
    let nomem = refused
        .iter()
        .flatten()
        .filter(|(e, _)| *e == Errno::ENOMEM.code())
        .count();
    assert!(
        nomem >= 1,
        "some tenant within its quota found the device full: {refused:?}"
    );
    // Never more than the device has (CUDA's free memory moves with the
    // driver's own pool: the total is the bound).
    let allocated: u64 = held.iter().map(|h| h.len() as u64 * chunk).sum();
    let total = driver.mem_info().expect("mem_info").total;
    assert!(allocated <= total, "{allocated} bytes allocated of {total}");

    // Full: each tenant's kernel runs or is refused with an errno.
    for (t, &f) in tenants.iter_mut().zip(&functions) {
        let r = launch_and_wait(t, f);
        assert!(
            r == 0 || Errno::from_code(r).is_some(),
            "launch while full: {r}"
        );
    }
    // A new tenant's guest memory is refused (its reservation is checked
    // against the free memory): instantiation fails.
    if driver.kind() == DriverKind::Cpu {
        let late = tenant(&rt, &module, "late", quota);
        assert!(late.is_err(), "a guest memory on a full device");
    }

    // Every tenant frees its buffers: the kernels run again.
    for (i, t) in tenants.iter_mut().enumerate() {
        for &h in &held[i] {
            assert_eq!(call(t, "buffer_free", &[Val::I64(h as i64)]), 0);
        }
        assert_eq!(launch_and_wait(t, functions[i]), 0, "{}", last_error(t));
    }
    drop(tenants);
    drop(rt);
    for ledger in &ledgers {
        for r in Resource::ALL {
            assert_eq!(ledger.in_use(r), 0, "{r}: {}", ledger.snapshot());
        }
    }
    let free_after = free(&driver);
    match driver.kind() {
        DriverKind::Cpu => assert_eq!(free_after, free_before),
        // CUDA: within one of the driver's own 2 MiB pages (it keeps and
        // trims a pool of its own; every buffer here is far larger).
        _ => assert!(
            free_after + (2 << 20) >= free_before,
            "{} bytes of device memory not back",
            free_before - free_after
        ),
    }
}

#[test]
fn tenants_within_quota_fill_the_cpu_device_and_get_enomem() {
    let cpu = CpuDriver::with_capacity(256 << 20).expect("CPU driver");
    twins::register(&cpu);
    // Each quota 128 MiB, three of them past the 256 MiB device.
    fill_the_device(cpu, 16 << 20, 128 << 20);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn tenants_within_quota_fill_the_gpu_and_get_enomem() {
    let cuda = CudaDriver::new(0).expect("a CUDA device");
    let free = free(&cuda);
    // Device buffers only (`cuMemAlloc` fails cleanly on a full card);
    // chunks of a sixteenth of the free memory, in 2 MiB pages; each quota
    // half of it.
    let chunk = (free / 16) & !((2 << 20) - 1);
    fill_the_device(cuda, chunk, free / 2);
}
