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

use std::path::{Path, PathBuf};

use tensorwasm_core::abi::{ArgDescriptor, Errno, encode_args};
use tensorwasm_embed::{
    supervise::{
        Supervisor, SupervisorConfig, SupervisorError, WorkerCommand, protocol::WasmValue,
    },
    twins::VECTOR_ADD_PTX,
};

/// Floats each tenant works on.
const N: u32 = 1024;
/// Where they are, and where a buffer's copy comes back to.
const X: u32 = 0x1_0000;
const Y: u32 = 0x2_0000;

/// The guest: `setup` makes a Wasm kernel (`$double`) and a buffer and
/// keeps their handles in memory; `fill`, `step` (doubles `X` on the
/// device), `sum`, `save` (X to the buffer), `restore_y` (the buffer to
/// Y), `sum_y`, `bump` (a global counter); for the trusted tenant
/// `load_vadd` and `fault` (vadd on wild pointers).
fn guest() -> String {
    let hex = |bytes: &[u8]| {
        bytes
            .iter()
            .map(|b| format!("\\{b:02x}"))
            .collect::<String>()
    };
    let double = encode_args(&[ArgDescriptor::i32(X as i32), ArgDescriptor::i32(N as i32)]);
    let wild = encode_args(&[
        ArgDescriptor::i64(16),
        ArgDescriptor::i64(16),
        ArgDescriptor::i64(16),
        ArgDescriptor::i32(1),
    ]);
    format!(
        r#"(module
  (import "wasi_cuda" "buffer_alloc" (func $buffer_alloc (param i64 i32) (result i32)))
  (import "wasi_cuda" "copy_to_buffer" (func $copy_to_buffer (param i64 i64 i32 i32) (result i32)))
  (import "wasi_cuda" "copy_from_buffer" (func $copy_from_buffer (param i32 i64 i64 i32) (result i32)))
  (import "wasi_cuda" "kernel_get" (func $kernel_get (param i32 i32) (result i32)))
  (import "wasi_cuda" "launch" (func $launch (param i64 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "wasi_cuda" "wait" (func $wait (param i64) (result i32)))
  (import "wasi_cuda" "module_load_ptx" (func $load (param i32 i32 i32) (result i32)))
  (import "wasi_cuda" "function_get" (func $get (param i64 i32 i32 i32) (result i32)))
  (import "tensorwasm_kernel" "thread_idx_x" (func $tid (result i32)))
  (import "tensorwasm_kernel" "block_idx_x" (func $bid (result i32)))
  (import "tensorwasm_kernel" "block_dim_x" (func $bdim (result i32)))
  (memory (export "memory") 4)
  (global $counter (export "counter") (mut i32) (i32.const 0))
  (data (i32.const 0x100) "{double}")
  (data (i32.const 0x180) "{wild}")
  (data (i32.const 0x300) "vadd")
  (data (i32.const 0x4000) "{ptx}")
  ;; function 11: doubles n floats at p, one per thread
  (func $double (param $p i32) (param $n i32) (local $i i32) (local $a i32)
    (local.set $i (i32.add (i32.mul (call $bid) (call $bdim)) (call $tid)))
    (if (i32.lt_u (local.get $i) (local.get $n)) (then
      (local.set $a (i32.add (local.get $p) (i32.shl (local.get $i) (i32.const 2))))
      (f32.store (local.get $a) (f32.mul (f32.load (local.get $a)) (f32.const 2))))))
  (func (export "setup") (result i32) (local $r i32)
    (local.set $r (call $kernel_get (i32.const 11) (i32.const 0x40)))
    (if (local.get $r) (then (return (local.get $r))))
    (call $buffer_alloc (i64.const {bytes}) (i32.const 0x48)))
  (func (export "fill") (param $seed i32) (local $i i32)
    (loop $l
      (f32.store (i32.add (i32.const {X}) (i32.shl (local.get $i) (i32.const 2)))
        (f32.div (f32.convert_i32_u (i32.rem_u
          (i32.add (i32.mul (local.get $seed) (i32.const 7919)) (i32.mul (local.get $i) (i32.const 104729)))
          (i32.const 1000))) (f32.const 100)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $l (i32.lt_u (local.get $i) (i32.const {N})))))
  (func $sum (param $p i32) (result f64) (local $i i32) (local $s f64)
    (loop $l
      (local.set $s (f64.add (local.get $s) (f64.promote_f32
        (f32.load (i32.add (local.get $p) (i32.shl (local.get $i) (i32.const 2)))))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $l (i32.lt_u (local.get $i) (i32.const {N}))))
    (local.get $s))
  (func (export "sum") (result f64) (call $sum (i32.const {X})))
  (func (export "sum_y") (result f64) (call $sum (i32.const {Y})))
  (func (export "step") (result i32) (local $r i32)
    (local.set $r (call $launch (i64.load (i32.const 0x40)) (i32.const {blocks}) (i32.const 1) (i32.const 1)
      (i32.const 64) (i32.const 1) (i32.const 1) (i32.const 0) (i32.const 0x100) (i32.const 2) (i32.const 0x60)))
    (if (local.get $r) (then (return (local.get $r))))
    (call $wait (i64.load (i32.const 0x60))))
  (func (export "save") (result i32)
    (call $copy_to_buffer (i64.load (i32.const 0x48)) (i64.const 0) (i32.const {X}) (i32.const {bytes})))
  (func (export "restore_y") (result i32)
    (call $copy_from_buffer (i32.const {Y}) (i64.load (i32.const 0x48)) (i64.const 0) (i32.const {bytes})))
  (func (export "trap") unreachable)
  (func (export "bump") (result i32)
    (global.set $counter (i32.add (global.get $counter) (i32.const 1)))
    (global.get $counter))
  (func (export "load_vadd") (result i32) (local $r i32)
    (local.set $r (call $load (i32.const 0x4000) (i32.const {ptx_len}) (i32.const 0x70)))
    (if (local.get $r) (then (return (local.get $r))))
    (call $get (i64.load (i32.const 0x70)) (i32.const 0x300) (i32.const 4) (i32.const 0x78)))
  (func (export "fault") (result i32) (local $r i32)
    (local.set $r (call $launch (i64.load (i32.const 0x78)) (i32.const 1) (i32.const 1) (i32.const 1)
      (i32.const 1) (i32.const 1) (i32.const 1) (i32.const 0) (i32.const 0x180) (i32.const 4) (i32.const 0x60)))
    (if (local.get $r) (then (return (local.get $r))))
    (call $wait (i64.load (i32.const 0x60)))))"#,
        double = hex(&double),
        wild = hex(&wild),
        ptx = hex(VECTOR_ADD_PTX.as_bytes()),
        ptx_len = VECTOR_ADD_PTX.len(),
        bytes = N * 4,
        blocks = N / 64,
    )
}

const TRUSTED: &str = "trusted = true\n";
const UNTRUSTED: &str = "name = \"quiet\"\n[quota]\ndevice_bytes = 1048576\n";

fn scratch(what: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tw-supervise-{what}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn supervisor(dir: &Path, driver_args: &[&str], snapshots: bool) -> Supervisor {
    let program = std::env::var_os("TENSORWASM_BIN").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_tensorwasm")),
        PathBuf::from,
    );
    let mut args = vec!["worker".into()];
    args.extend(driver_args.iter().map(Into::into));
    Supervisor::start(SupervisorConfig {
        worker: WorkerCommand { program, args },
        snapshot_dir: dir.join("snapshots"),
        snapshots,
    })
    .expect("supervisor")
}

fn int(values: Vec<WasmValue>) -> i32 {
    match values.as_slice() {
        [WasmValue::I32(v)] => *v,
        other => panic!("expected one i32, got {other:?}"),
    }
}

fn float(values: Vec<WasmValue>) -> f64 {
    match values.as_slice() {
        [WasmValue::F64(v)] => *v,
        other => panic!("expected one f64, got {other:?}"),
    }
}

fn ok(s: &mut Supervisor, tenant: &str, export: &str, args: &[WasmValue]) -> Vec<WasmValue> {
    s.call(tenant, export, args)
        .unwrap_or_else(|e| panic!("{tenant}.{export}: {e}"))
}

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
        "the faulting call returned after {:?}; recovery (new worker, tenants restored): {:?} \
         (cause: {}; restored {:?}; ended {:?})",
        called.elapsed(),
        recovery.took,
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
