//! Surviving a lost device (`tensorwasm_embed::supervise`): tenants run in a
//! `tensorwasm worker` process; a trusted tenant's raw kernel stores to a
//! wild address, which loses the device (on CUDA the context's sticky
//! error; on the CPU driver, `--cpu-faults-lose-device` models it). The
//! supervisor starts a new worker and restores every tenant from the
//! snapshot taken after its last call: memories, globals, buffers' contents
//! and handles (a Wasm kernel's, a buffer's) are as they were, and the
//! tenants go on. The faulting call fails with `DeviceLost`; a tenant whose
//! state was not kept is ended, and only it.
//!
//! The worker is the `tensorwasm` binary (`TENSORWASM_BIN` overrides the
//! one cargo built, for runs on another machine).

#[path = "support/bin.rs"]
mod bin;
#[allow(dead_code)] // what the soak uses and this suite does not
#[path = "support/supervised_guest.rs"]
mod supervised_guest;

use supervised_guest::{TRUSTED, UNTRUSTED, float, guest, int, ok, scratch, supervisor};
use tensorwasm_core::abi::Errno;
use tensorwasm_embed::supervise::{SupervisorError, protocol::WasmValue};

/// Quiet tenants at work, then a fault from the trusted one: every tenant
/// is restored and goes on.
fn tenants_survive_a_lost_device(driver_args: &[&str]) {
    let dir = scratch("survive");
    let module = dir.join("guest.wat");
    std::fs::write(&module, guest()).unwrap();
    let mut s = supervisor(&dir, driver_args, true);
    let quiet = ["q0", "q1", "q2"];
    let mut before = Vec::new();
    for (i, name) in quiet.iter().enumerate() {
        s.add_tenant(name, UNTRUSTED, &module).expect("add");
        assert_eq!(int(ok(&mut s, name, "setup", &[])), 0);
        ok(&mut s, name, "fill", &[WasmValue::I32(i as i32 + 1)]);
        let start = float(ok(&mut s, name, "sum", &[]));
        assert!(start > 0.0);
        assert_eq!(int(ok(&mut s, name, "step", &[])), 0);
        assert_eq!(int(ok(&mut s, name, "save", &[])), 0);
        assert_eq!(int(ok(&mut s, name, "bump", &[])), 1);
        let sum = float(ok(&mut s, name, "sum", &[]));
        assert_eq!(sum, start * 2.0, "{name}: step doubles");
        before.push(sum);
    }
    // A tenant added but never called is restored fresh.
    s.add_tenant("idle", UNTRUSTED, &module).expect("add");
    s.add_tenant("raw", TRUSTED, &module).expect("add");
    assert_eq!(int(ok(&mut s, "raw", "load_vadd", &[])), 0);
    let pid = s.worker_pid();

    let called = std::time::Instant::now();
    let recovery = match s.call("raw", "fault", &[]) {
        Err(SupervisorError::DeviceLost(r)) => r,
        other => panic!("the fault: expected DeviceLost, got {other:?}"),
    };
    eprintln!(
        "the faulting call returned after {:?}; recovery (new worker, tenants restored): {:?}, \
         of which the worker's start {:?} (cause: {}; restored {:?}; ended {:?})",
        called.elapsed(),
        recovery.took,
        recovery.worker_ready,
        recovery.cause,
        recovery.restored,
        recovery.ended
    );
    assert_eq!(recovery.during, Some(("raw".into(), "fault".into())));
    assert!(recovery.ended.is_empty(), "{:?}", recovery.ended);
    assert_eq!(recovery.restored.len(), 5, "{:?}", recovery.restored);
    assert_ne!(s.worker_pid(), pid, "a new worker");
    assert_eq!(s.recoveries().len(), 1);

    for (name, sum) in quiet.iter().zip(&before) {
        // Memory and globals as after the last call.
        assert_eq!(
            float(ok(&mut s, name, "sum", &[])),
            *sum,
            "{name}: memory kept"
        );
        assert_eq!(int(ok(&mut s, name, "bump", &[])), 2, "{name}: global kept");
        // The buffer's contents and handle.
        assert_eq!(int(ok(&mut s, name, "restore_y", &[])), 0);
        assert_eq!(
            float(ok(&mut s, name, "sum_y", &[])),
            *sum,
            "{name}: buffer kept"
        );
        // The Wasm kernel's handle.
        assert_eq!(int(ok(&mut s, name, "step", &[])), 0);
        assert_eq!(
            float(ok(&mut s, name, "sum", &[])),
            sum * 2.0,
            "{name}: kernel kept"
        );
    }
    // The idle tenant starts from scratch; the raw one from before the
    // faulting call, its function handle still there (so it can fault again,
    // which it does not).
    assert_eq!(int(ok(&mut s, "idle", "bump", &[])), 1);
    assert_eq!(int(ok(&mut s, "idle", "setup", &[])), 0);
    // Every restored tenant's ledger goes back to zero when it is removed.
    for name in quiet.iter().chain(&["idle", "raw"]) {
        let held = s.remove_tenant(name).expect("remove");
        assert!(held.is_empty(), "{name} still held {held:?}");
    }
    assert_eq!(s.status().expect("status").tenants, 0);
    drop(s);
    let left: Vec<_> = std::fs::read_dir(dir.join("snapshots")).unwrap().collect();
    assert!(left.is_empty(), "snapshots left behind: {left:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn tenants_survive_a_lost_cpu_device() {
    tenants_survive_a_lost_device(&["--driver", "cpu", "--cpu-faults-lose-device"]);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn tenants_survive_a_lost_gpu_context() {
    tenants_survive_a_lost_device(&["--driver", "cuda"]);
}

#[test]
fn without_snapshots_a_called_tenant_is_ended_and_only_it() {
    let dir = scratch("ended");
    let module = dir.join("guest.wat");
    std::fs::write(&module, guest()).unwrap();
    let mut s = supervisor(
        &dir,
        &["--driver", "cpu", "--cpu-faults-lose-device"],
        false,
    );
    s.add_tenant("called", UNTRUSTED, &module).unwrap();
    s.add_tenant("fresh", UNTRUSTED, &module).unwrap();
    s.add_tenant("raw", TRUSTED, &module).unwrap();
    assert_eq!(int(ok(&mut s, "called", "bump", &[])), 1);
    // The raw tenant's first call (load_vadd) is not kept either.
    assert_eq!(int(ok(&mut s, "raw", "load_vadd", &[])), 0);
    let r = match s.call("raw", "fault", &[]) {
        Err(SupervisorError::DeviceLost(r)) => r,
        other => panic!("expected DeviceLost, got {other:?}"),
    };
    let ended: Vec<&str> = r.ended.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(ended, ["called", "raw"]);
    assert_eq!(r.restored, ["fresh"]);
    match s.call("called", "bump", &[]) {
        Err(SupervisorError::Ended(why)) => assert!(why.contains("not kept"), "{why}"),
        other => panic!("expected Ended, got {other:?}"),
    }
    assert_eq!(int(ok(&mut s, "fresh", "bump", &[])), 1);
    drop(s);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_requests_are_refused_and_change_nothing() {
    let dir = scratch("refused");
    let module = dir.join("guest.wat");
    std::fs::write(&module, guest()).unwrap();
    let mut s = supervisor(&dir, &["--driver", "cpu"], true);
    s.add_tenant("a", UNTRUSTED, &module).unwrap();
    for e in [
        s.add_tenant("a", UNTRUSTED, &module).unwrap_err(),
        s.add_tenant("b", "[quota]\nmodules = -1\n", &module)
            .unwrap_err(),
        s.add_tenant("c", UNTRUSTED, &dir.join("missing.wasm"))
            .unwrap_err(),
        s.call("nobody", "bump", &[]).unwrap_err(),
        s.call("a", "nothing", &[]).unwrap_err(),
    ] {
        assert!(matches!(e, SupervisorError::Refused(_)), "{e}");
    }
    // The untrusted tenant may not load raw PTX: the guest's errno.
    assert_eq!(int(ok(&mut s, "a", "load_vadd", &[])), Errno::EPERM.code());
    // Wrong arguments are refused; a trap is the guest's failure, and the
    // tenant stays.
    let e = s.call("a", "fill", &[]).unwrap_err();
    assert!(matches!(e, SupervisorError::Refused(_)), "{e}");
    match s.call("a", "trap", &[]) {
        Err(SupervisorError::Guest(_)) => {}
        other => panic!("expected a guest failure, got {other:?}"),
    }
    assert_eq!(int(ok(&mut s, "a", "bump", &[])), 1);
    assert!(s.recoveries().is_empty());
    drop(s);
    std::fs::remove_dir_all(&dir).unwrap();
}
