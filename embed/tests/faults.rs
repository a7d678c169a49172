//! The runtime under driver faults, on the CPU driver (and a reduced run
//! on CUDA): a tenant's workload of the guest API (buffers, copies, a Wasm
//! kernel made with `kernel_get` and launched, a built-in tensor op, waits)
//! runs over [`Faulty`], which makes the `n`-th driver call fail, for every
//! `n` up to the workload's call count and every error kind, each in a new
//! runtime (so the first use's calls, the kernel's compile and the
//! built-ins' load, fail too). Every time: no panic and no hang (each run
//! has a deadline); a failure during a guest call reaches the guest as an
//! errno with a `last_error` naming the call (but the calls the runtime
//! absorbs by design, [`ABSORBED`]); failures outside guest calls (the
//! tenant's store and memory, instantiation) are host errors; once the
//! tenant is gone every quota charge and every byte of device memory is
//! back; and the same runtime then runs the workload again with every call
//! succeeding (nothing stays broken).

#[allow(dead_code)] // the shared test guest and inputs; the rest is for other suites
mod common;
#[path = "support/faulty.rs"]
mod faulty;
#[path = "support/tenant_guest.rs"]
mod tenant_guest;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use faulty::Faulty;
use tenant_guest::*;
use tensorwasm_core::{
    DriverKind, ErrorKind,
    abi::{
        Errno,
        tensor::{DType, OperandDescriptor, TensorHeader, TensorOpKind, encode_tensor_op},
    },
    quota::{QuotaLedger, Resource, TenantQuota},
};
use tensorwasm_cpu::CpuDriver;
use tensorwasm_cuda::CudaDriver;
use tensorwasm_embed::{
    kernel::GuestModule,
    runtime::GuestRuntime,
    tenant::{Tenant, TenantConfig},
    twins,
    wasi_cuda::{TenantPolicy, WaitPolicy},
};
use wasmtime::Val;

/// The error kinds a driver returns, injected in turn.
const KINDS: [ErrorKind; 9] = [
    ErrorKind::OutOfMemory,
    ErrorKind::LaunchFailed,
    ErrorKind::DeviceLost,
    ErrorKind::InvalidArgument,
    ErrorKind::Unavailable,
    ErrorKind::InvalidImage,
    ErrorKind::NotFound,
    ErrorKind::NotSupported,
    ErrorKind::Other,
];

/// How long one run of the workload may take before it counts as a hang.
const DEADLINE: Duration = Duration::from_secs(60);

struct World<D: Device> {
    driver: Faulty<D>,
    runtime: GuestRuntime<Faulty<D>>,
    module: GuestModule,
    /// How the tenants' waits wait.
    policy: WaitPolicy,
    /// Device memory found not back after a run (CUDA), by run.
    short: std::sync::Mutex<Vec<String>>,
}

impl<D: Device> World<D> {
    /// A world whose tenants' waits suspend on the completion callback at
    /// once: no polling, so the driver calls a run makes hardly depend on
    /// timing (a completion callback is queued only if the launch has not
    /// finished by the wait's one query).
    fn new(inner: D) -> Arc<Self> {
        Self::with_policy(inner, WaitPolicy::Suspend)
    }

    fn with_policy(inner: D, policy: WaitPolicy) -> Arc<Self> {
        let driver = Faulty::new(inner);
        let runtime = GuestRuntime::new(driver.clone(), 16 << 20).expect("runtime");
        let module = runtime.compile(GUEST).expect("compile");
        Arc::new(World {
            driver,
            runtime,
            module,
            policy,
            short: std::sync::Mutex::new(Vec::new()),
        })
    }

    /// The wrapped driver's free memory, once it is idle.
    fn free(&self) -> u64 {
        let inner = self.driver.inner();
        inner.synchronize().expect("synchronize");
        inner.mem_info().expect("mem_info").free
    }
}

/// A new CPU driver with TensorWasm's twins.
fn cpu() -> CpuDriver {
    let cpu = CpuDriver::with_capacity(256 << 20).expect("CPU driver");
    twins::register(&cpu);
    cpu
}

/// A world on a new CPU driver.
fn world() -> Arc<World<CpuDriver>> {
    World::new(cpu())
}

/// What one run of the workload did.
#[derive(Debug)]
struct Run {
    /// The guest calls made, in order, each with its result and, when it
    /// failed, its `last_error` text.
    calls: Vec<(&'static str, i32, String)>,
    /// The host error that ended the run before or between guest calls.
    host_error: Option<String>,
    /// The guest call during which the injected failure happened, if it
    /// happened during one.
    failed_in: Option<&'static str>,
    /// The tenant's ledger, after the tenant is gone.
    ledger: Arc<QuotaLedger>,
}

type T<D> = Tenant<Faulty<D>>;

/// The inputs: `N` floats at `X`, each `i + 0.5`.
fn inputs() -> Vec<u8> {
    (0..N)
        .flat_map(|i| (i as f32 + 0.5).to_le_bytes())
        .collect()
}

/// The workload: a tenant, its guest, and the guest API in order, each
/// step only if the one before it succeeded (as a guest would). Then the
/// tenant goes.
fn workload<D: Device>(w: &World<D>) -> Run {
    let config = TenantConfig {
        quota: TenantQuota::default(),
        policy: TenantPolicy::UNTRUSTED,
        ..TenantConfig::untrusted("faults")
    };
    let mut t = match Tenant::new(&w.runtime, &config) {
        Ok(t) => t,
        Err(e) => {
            return Run {
                calls: Vec::new(),
                host_error: Some(format!("tenant: {e:#}")),
                failed_in: None,
                ledger: Arc::new(QuotaLedger::new(config.quota)),
            };
        }
    };
    t.store_mut().data_mut().cuda.set_wait_policy(w.policy);
    let ledger = Arc::clone(t.ledger());
    let mut run = Run {
        calls: Vec::new(),
        host_error: None,
        failed_in: None,
        ledger,
    };
    if let Err(e) = futures::executor::block_on(t.instantiate(&w.runtime, &w.module)) {
        run.host_error = Some(format!("instantiate: {e:#}"));
        drop(t);
        return run;
    }
    let bytes = inputs();
    write(&mut t, X, &bytes);
    let step = |t: &mut T<D>, run: &mut Run, name: &'static str, args: &[Val]| -> bool {
        let before = w.driver.failed();
        let r = call(t, name, args);
        if before.is_none() && w.driver.failed().is_some() {
            run.failed_in = Some(name);
        }
        let text = if r == 0 { String::new() } else { last_error(t) };
        run.calls.push((name, r, text));
        r == 0
    };
    let len = (N * 4) as i32;
    let done = 'work: {
        if !step(
            &mut t,
            &mut run,
            "buffer_alloc",
            &[Val::I64(len.into()), Val::I32(OUT as i32)],
        ) {
            break 'work false;
        }
        let buffer = read_u64(&mut t, OUT) as i64;
        if !step(
            &mut t,
            &mut run,
            "copy_to_buffer",
            &[
                Val::I64(buffer),
                Val::I64(0),
                Val::I32(X as i32),
                Val::I32(len),
            ],
        ) {
            break 'work false;
        }
        if !step(
            &mut t,
            &mut run,
            "kernel_get",
            &[Val::I32(DOUBLE), Val::I32(OUT as i32)],
        ) {
            break 'work false;
        }
        let function = read_u64(&mut t, OUT);
        let launch = double_args(&mut t, function);
        if !step(&mut t, &mut run, "launch", &launch) {
            break 'work false;
        }
        let handle = read_u64(&mut t, OUT) as i64;
        if !step(&mut t, &mut run, "wait", &[Val::I64(handle)]) {
            break 'work false;
        }
        let desc = encode_tensor_op(
            &TensorHeader::new(TensorOpKind::Relu),
            &[
                OperandDescriptor::guest(X, DType::F32, &[N.into()]),
                OperandDescriptor::guest(Y, DType::F32, &[N.into()]),
            ],
        );
        write(&mut t, DESC, &desc);
        let op = [
            Val::I32(DESC as i32),
            Val::I32(desc.len() as i32),
            Val::I32(OUT as i32),
        ];
        if !step(&mut t, &mut run, "tensor_op", &op) {
            break 'work false;
        }
        let handle = read_u64(&mut t, OUT) as i64;
        if !step(&mut t, &mut run, "wait", &[Val::I64(handle)]) {
            break 'work false;
        }
        if !step(
            &mut t,
            &mut run,
            "copy_from_buffer",
            &[
                Val::I32(Y as i32),
                Val::I64(buffer),
                Val::I64(0),
                Val::I32(len),
            ],
        ) {
            break 'work false;
        }
        step(&mut t, &mut run, "buffer_free", &[Val::I64(buffer)])
    };
    if done {
        // No fault: the buffer's bytes came back over the tensor op's
        // output; the kernel doubled the inputs.
        let got = read(&mut t, X, bytes.len());
        let want: Vec<u8> = (0..N)
            .flat_map(|i| (2.0 * (i as f32 + 0.5)).to_le_bytes())
            .collect();
        assert_eq!(got, want, "the kernel's doubled inputs");
    }
    drop(t);
    run
}

/// Runs the workload on its own thread, `DEADLINE` at most.
fn run_with_deadline<D: Device>(w: &Arc<World<D>>) -> Run {
    let (send, receive) = mpsc::channel();
    let world = Arc::clone(w);
    let worker = std::thread::spawn(move || {
        let _ = send.send(workload(&world));
    });
    match receive.recv_timeout(DEADLINE) {
        Ok(run) => {
            worker.join().expect("the workload's thread");
            run
        }
        Err(_) => match worker.join() {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(()) => panic!("the workload hung past {DEADLINE:?}"),
        },
    }
}

/// Every charge of `run`'s tenant is back, and the device's free memory is
/// `free_before` again (exactly: the CPU driver; at least: CUDA, whose
/// driver may give back memory of its own).
fn assert_all_back<D: Device>(w: &World<D>, run: &Run, free_before: u64, what: &str) {
    for r in Resource::ALL {
        assert_eq!(
            run.ledger.in_use(r),
            0,
            "{what}: {r} still charged: {}",
            run.ledger.snapshot()
        );
    }
    let free = w.free();
    match w.driver.inner().kind() {
        DriverKind::Cpu => assert_eq!(free, free_before, "{what}: device memory not all back"),
        _ => {
            if free < free_before {
                // Kept to the end of the run (`short`), to see every call
                // that leaves memory behind, and whether it stays behind.
                w.short
                    .lock()
                    .expect("short")
                    .push(format!("{what}: {} bytes not back", free_before - free));
            }
        }
    }
}

/// Driver calls whose failure the runtime absorbs by design, with why: the
/// guest call around them succeeds, and its results are right (the
/// workload checks them).
const ABSORBED: &[(&str, &str)] = &[(
    "on_complete",
    "wait: no completion callback, so it synchronizes the stream instead",
)];

/// How many times a run is tried again when its failing call did not come
/// (a completion callback or a query the timing of a run decides).
const ATTEMPTS: usize = 20;

/// Fails call `n` (of those named `only`, or of any) with `kind` during
/// the workload, in `w`, and checks the outcome (module docs); then runs
/// the workload again with no fault, which must succeed. `free_before`:
/// the device's free memory with no tenant. `None` if no run reached call
/// `n` in [`ATTEMPTS`] tries (each of those must have succeeded); else
/// whether the failure reached a guest call (rather than the host or an
/// absorbed call).
fn fail_once<D: Device>(
    w: &Arc<World<D>>,
    only: Option<&'static str>,
    n: u64,
    kind: ErrorKind,
    free_before: u64,
) -> Option<bool> {
    let what = format!("call {n} ({}) failing with {kind}", only.unwrap_or("any"));
    let (run, failed) = (0..ATTEMPTS).find_map(|_| {
        w.driver.arm(only, n, kind);
        let run = run_with_deadline(w);
        match w.driver.failed() {
            Some(failed) => Some((run, failed)),
            None => {
                assert!(
                    run.host_error.is_none() && run.calls.iter().all(|c| c.1 == 0),
                    "{what}: not reached, yet {run:?}"
                );
                assert_all_back(w, &run, free_before, &what);
                None
            }
        }
    })?;
    let what = format!("{what}: {failed}");
    let absorbed = ABSORBED.iter().any(|a| a.0 == failed);
    let mut in_guest = false;
    if let Some(call) = run.failed_in.filter(|_| !absorbed) {
        // The guest call during which the driver failed returned an errno,
        // and its last_error names it.
        in_guest = true;
        let (_, r, text) = run
            .calls
            .iter()
            .rev()
            .find(|c| c.0 == call)
            .unwrap_or_else(|| panic!("{what}: {run:?}"));
        assert!(
            *r != 0 && Errno::from_code(*r).is_some(),
            "{what}: {call} returned {r}; {run:?}"
        );
        assert!(
            text.starts_with(&format!("{call}: ")),
            "{what}: last_error {text:?}"
        );
    } else if run.host_error.is_none() && !absorbed {
        // Outside guest calls and not refused to the host: the failure hit
        // work no guest call waited on (a tenant's teardown), and no guest
        // call may have failed for it.
        assert!(
            run.calls.iter().all(|c| c.1 == 0),
            "{what}: a guest call failed but none saw the fault: {run:?}"
        );
    }
    assert_all_back(w, &run, free_before, &what);
    // Nothing stays broken: the same world runs the workload again, every
    // call succeeding.
    w.driver.arm(None, 0, ErrorKind::Other);
    let again = run_with_deadline(w);
    assert!(
        again.host_error.is_none() && again.calls.iter().all(|c| c.1 == 0),
        "{what}, then no fault: {again:?}"
    );
    assert_all_back(w, &again, free_before, &format!("{what}, then no fault"));
    Some(in_guest)
}

/// A run of the workload with no fault must succeed; the driver's calls
/// it made, by name.
fn clean_run<D: Device>(w: &Arc<World<D>>) -> BTreeMap<&'static str, u64> {
    w.driver.arm(None, 0, ErrorKind::Other);
    let clean = run_with_deadline(w);
    assert!(clean.host_error.is_none(), "{clean:?}");
    assert!(clean.calls.iter().all(|c| c.1 == 0), "{clean:?}");
    assert_eq!(clean.calls.len(), 9);
    w.driver.made()
}

/// The fewest calls of any of `tries` clean runs of `w`, and every call's
/// name they made.
fn call_count<D: Device>(w: &Arc<World<D>>, tries: usize) -> (u64, BTreeMap<&'static str, u64>) {
    let mut fewest = u64::MAX;
    let mut names = BTreeMap::new();
    for _ in 0..tries {
        let made = clean_run(w);
        fewest = fewest.min(made.values().sum());
        for (name, count) in made {
            let c: &mut u64 = names.entry(name).or_default();
            *c = (*c).max(count);
        }
    }
    (fewest, names)
}

#[test]
fn every_driver_failure_reaches_the_guest_and_nothing_leaks() {
    // The workload with no fault, in new worlds (cold caches: the kernel's
    // compile and the built-ins' load happen in the run): every call
    // succeeds. Then every call `n` of it fails with every error kind, each
    // in a new world (so the cold calls fail too).
    let mut fewest = u64::MAX;
    let mut names = BTreeMap::new();
    for _ in 0..3 {
        let (f, m) = call_count(&world(), 1);
        fewest = fewest.min(f);
        names.extend(m);
    }
    for name in [
        "reserve",
        "alloc_device",
        "load_kernel",
        "launch",
        "create_stream",
    ] {
        assert!(
            names.contains_key(name),
            "the workload calls {name}: {names:?}"
        );
    }
    let (mut runs, mut in_guest) = (0, 0);
    for n in 1.. {
        let mut reached = false;
        for kind in KINDS {
            let w = world();
            let free_before = w.free();
            if let Some(guest) = fail_once(&w, None, n, kind, free_before) {
                reached = true;
                runs += 1;
                in_guest += usize::from(guest);
            }
        }
        if !reached {
            // Past the workload's calls (some runs make a completion
            // callback and one more query than others).
            assert!(n > fewest, "call {n} of at least {fewest} never failed");
            break;
        }
    }
    // The polled path: waits that spin first (the runtime's default), each
    // of the first queries failing.
    for k in 1..=3 {
        let w = World::with_policy(cpu(), WaitPolicy::Adaptive(Duration::from_millis(1)));
        let free_before = w.free();
        let guest = fail_once(
            &w,
            Some("stream_query"),
            k,
            ErrorKind::LaunchFailed,
            free_before,
        );
        assert!(guest.is_some(), "stream_query #{k} was never made");
        runs += 1;
    }
    eprintln!("{runs} runs, {in_guest} failures inside guest calls; calls by name: {names:?}");
    assert!(in_guest * 2 > runs, "{in_guest} of {runs} in guest calls");
}

/// A wait whose completion callback never comes (CUDA calls no
/// `cuLaunchHostFunc` callback once the context has an error) still ends:
/// the waiter asks the stream while it is suspended. A tenant launches its
/// kernel; then, with callbacks swallowed and the wait's first query
/// answering "not done" (so it suspends), the wait returns 0 once the
/// stream says the work is done, or `EDEVLOST` when the stream fails as a
/// lost device; within the deadline either way, not never.
#[test]
fn a_wait_whose_callback_never_comes_still_ends() {
    for lost in [false, true] {
        let w = world();
        let free_before = w.free();
        let world = Arc::clone(&w);
        let (send, receive) = mpsc::channel();
        std::thread::spawn(move || {
            let w = world;
            let config = TenantConfig::untrusted("waiter");
            let mut t = Tenant::new(&w.runtime, &config).expect("tenant");
            futures::executor::block_on(t.instantiate(&w.runtime, &w.module)).expect("instance");
            t.store_mut()
                .data_mut()
                .cuda
                .set_wait_policy(WaitPolicy::Suspend);
            assert_eq!(
                call(
                    &mut t,
                    "kernel_get",
                    &[Val::I32(DOUBLE), Val::I32(OUT as i32)]
                ),
                0
            );
            let function = read_u64(&mut t, OUT);
            let launch = double_args(&mut t, function);
            assert_eq!(call(&mut t, "launch", &launch), 0, "{}", last_error(&t));
            let handle = read_u64(&mut t, OUT);
            w.driver.swallow_callbacks(true);
            w.driver.not_done(1);
            if lost {
                // The wait's own query, then the one it makes suspended.
                w.driver.arm(Some("stream_query"), 2, ErrorKind::DeviceLost);
            }
            let r = call(&mut t, "wait", &[Val::I64(handle as i64)]);
            let text = last_error(&t);
            let ledger = Arc::clone(t.ledger());
            drop(t);
            let _ = send.send((r, text, ledger));
        });
        let (r, text, ledger) = receive
            .recv_timeout(DEADLINE)
            .expect("the wait ended (its callback never came)");
        if lost {
            assert_eq!(r, Errno::EDEVLOST.code(), "{text}");
            assert!(text.starts_with("wait: EDEVLOST: "), "{text}");
        } else {
            assert_eq!(r, 0, "{text}");
        }
        let run = Run {
            calls: Vec::new(),
            host_error: None,
            failed_in: None,
            ledger,
        };
        assert_all_back(&w, &run, free_before, "a swallowed callback");
    }
}

/// The reduced run on CUDA: one world (its caches warm after the first,
/// clean runs), every call of a warm run failing, one error kind each.
/// Device memory: none lost by the end (a single run may end a driver page
/// short, which the driver gives back later).
#[test]
#[ignore = "needs a CUDA GPU"]
fn cuda_driver_failures_reach_the_guest_and_nothing_leaks() {
    let w = World::new(CudaDriver::new(0).expect("a CUDA device"));
    clean_run(&w);
    let free_before = w.free();
    let (fewest, names) = call_count(&w, 3);
    let (mut runs, mut in_guest) = (0, 0);
    for n in 1.. {
        let kind = KINDS[n as usize % KINDS.len()];
        match fail_once(&w, None, n, kind, free_before) {
            Some(guest) => {
                runs += 1;
                in_guest += usize::from(guest);
            }
            None => {
                assert!(n > fewest, "call {n} of at least {fewest} never failed");
                break;
            }
        }
    }
    eprintln!("{runs} runs, {in_guest} failures inside guest calls; calls by name: {names:?}");
    assert!(in_guest * 2 > runs, "{in_guest} of {runs} in guest calls");
    // CUDA's free memory moves with the driver's own 2 MiB pages (a run
    // that ends 2 MiB short is back by the next): what must hold is that
    // nothing is lost for good.
    let short = w.short.lock().expect("short");
    let end = w.free();
    eprintln!("free after all: {end} (before: {free_before}); runs that ended short: {short:?}");
    assert!(
        end >= free_before,
        "{} bytes of device memory lost; runs that ended short:\n{}",
        free_before - end,
        short.join("\n")
    );
}
