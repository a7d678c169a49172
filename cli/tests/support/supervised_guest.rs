//! The guest of the supervised suites (`supervise.rs`, `soak.rs`), driven
//! only through its exports (a supervisor passes numbers, not memory), and
//! the supervisor they start: included with `#[path]`.

use std::path::{Path, PathBuf};

use tensorwasm_core::abi::{ArgDescriptor, encode_args};
use tensorwasm_embed::{
    supervise::{Supervisor, SupervisorConfig, WorkerCommand, protocol::WasmValue},
    twins::VECTOR_ADD_PTX,
};

/// Floats each tenant works on.
pub const N: u32 = 1024;
/// Where they are, and where a buffer's copy comes back to.
pub const X: u32 = 0x1_0000;
pub const Y: u32 = 0x2_0000;

/// A trusted tenant's configuration.
pub const TRUSTED: &str = "trusted = true\n";
/// An untrusted tenant's: 1 MiB of device buffers.
pub const UNTRUSTED: &str = "name = \"quiet\"\n[quota]\ndevice_bytes = 1048576\n";

/// The guest. `setup` makes its Wasm kernels (`$double`, `$inc`, `$boom`,
/// which traps) and a buffer and keeps their handles in memory; `fill(seed)`
/// writes integers to `X`; `step` doubles `X` on the device, `inc` adds 1
/// to each and returns the launch+wait time in ns (a negative errno on
/// failure), `boom` launches the trapping kernel; `hog` asks for 2 MiB of
/// buffer; `sum`, `save` (X to the buffer), `restore_y` (the buffer to Y),
/// `sum_y`, `bump` (a global counter), `trap`; for the trusted tenant
/// `load_vadd` and `fault` (vadd on wild pointers).
pub fn guest() -> String {
    let hex = |bytes: &[u8]| {
        bytes
            .iter()
            .map(|b| format!("\\{b:02x}"))
            .collect::<String>()
    };
    let over_x = encode_args(&[ArgDescriptor::i32(X as i32), ArgDescriptor::i32(N as i32)]);
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
  (import "wasi_snapshot_preview1" "clock_time_get" (func $clock (param i32 i64 i32) (result i32)))
  (import "tensorwasm_kernel" "thread_idx_x" (func $tid (result i32)))
  (import "tensorwasm_kernel" "block_idx_x" (func $bid (result i32)))
  (import "tensorwasm_kernel" "block_dim_x" (func $bdim (result i32)))
  (memory (export "memory") 4)
  (global $counter (export "counter") (mut i32) (i32.const 0))
  (data (i32.const 0x100) "{over_x}")
  (data (i32.const 0x180) "{wild}")
  (data (i32.const 0x300) "vadd")
  (data (i32.const 0x4000) "{ptx}")
  ;; kernels: functions 12 ($double), 13 ($inc), 14 ($boom)
  (func $double (param $p i32) (param $n i32) (local $i i32) (local $a i32)
    (local.set $i (i32.add (i32.mul (call $bid) (call $bdim)) (call $tid)))
    (if (i32.lt_u (local.get $i) (local.get $n)) (then
      (local.set $a (i32.add (local.get $p) (i32.shl (local.get $i) (i32.const 2))))
      (f32.store (local.get $a) (f32.mul (f32.load (local.get $a)) (f32.const 2))))))
  (func $inc (param $p i32) (param $n i32) (local $i i32) (local $a i32)
    (local.set $i (i32.add (i32.mul (call $bid) (call $bdim)) (call $tid)))
    (if (i32.lt_u (local.get $i) (local.get $n)) (then
      (local.set $a (i32.add (local.get $p) (i32.shl (local.get $i) (i32.const 2))))
      (f32.store (local.get $a) (f32.add (f32.load (local.get $a)) (f32.const 1))))))
  (func $boom (param $p i32) (param $n i32)
    (if (i32.eq (call $tid) (i32.const 3)) (then unreachable)))
  (func (export "setup") (result i32) (local $r i32)
    (local.set $r (call $kernel_get (i32.const 12) (i32.const 0x40)))
    (if (local.get $r) (then (return (local.get $r))))
    (local.set $r (call $kernel_get (i32.const 13) (i32.const 0x50)))
    (if (local.get $r) (then (return (local.get $r))))
    (local.set $r (call $kernel_get (i32.const 14) (i32.const 0x58)))
    (if (local.get $r) (then (return (local.get $r))))
    (call $buffer_alloc (i64.const {bytes}) (i32.const 0x48)))
  (func (export "fill") (param $seed i32) (local $i i32)
    (loop $l
      (f32.store (i32.add (i32.const {X}) (i32.shl (local.get $i) (i32.const 2)))
        (f32.convert_i32_u (i32.rem_u
          (i32.add (i32.mul (local.get $seed) (i32.const 7919)) (i32.mul (local.get $i) (i32.const 104729)))
          (i32.const 1000))))
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
  ;; launches kernel handle at $h over X, waits; 0 or the errno
  (func $run (param $h i32) (result i32) (local $r i32)
    (local.set $r (call $launch (i64.load (local.get $h)) (i32.const {blocks}) (i32.const 1) (i32.const 1)
      (i32.const 64) (i32.const 1) (i32.const 1) (i32.const 0) (i32.const 0x100) (i32.const 2) (i32.const 0x60)))
    (if (local.get $r) (then (return (local.get $r))))
    (call $wait (i64.load (i32.const 0x60))))
  (func $now (result i64)
    (drop (call $clock (i32.const 1) (i64.const 1) (i32.const 0x68)))
    (i64.load (i32.const 0x68)))
  (func (export "step") (result i32) (call $run (i32.const 0x40)))
  (func (export "inc") (result i64) (local $t i64) (local $r i32)
    (local.set $t (call $now))
    (local.set $r (call $run (i32.const 0x50)))
    (if (local.get $r) (then (return (i64.sub (i64.const 0) (i64.extend_i32_u (local.get $r))))))
    (i64.sub (call $now) (local.get $t)))
  (func (export "boom") (result i32) (call $run (i32.const 0x58)))
  (func (export "hog") (result i32) (call $buffer_alloc (i64.const 2097152) (i32.const 0x80)))
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
        over_x = hex(&over_x),
        wild = hex(&wild),
        ptx = hex(VECTOR_ADD_PTX.as_bytes()),
        ptx_len = VECTOR_ADD_PTX.len(),
        bytes = N * 4,
        blocks = N / 64,
    )
}

/// What `fill(seed)` writes, summed as the guest sums it.
pub fn filled_sum(seed: i32) -> f64 {
    (0..N as i32)
        .map(|i| {
            let v = seed
                .wrapping_mul(7919)
                .wrapping_add(i.wrapping_mul(104_729)) as u32
                % 1000;
            f64::from(v as f32)
        })
        .sum()
}

/// A directory of its own for one test.
pub fn scratch(what: &str) -> PathBuf {
    // Each call its own directory: tests of one binary run in parallel, and
    // the CPU and GPU variants of a test ask for the same `what` (one
    // finishing first removed the other's files).
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("tw-supervise-{what}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A supervisor whose workers run `tensorwasm worker DRIVER_ARGS`
/// (`TENSORWASM_BIN` names the binary on machines where cargo's is not),
/// with a standby worker unless `TW_STANDBY=0`.
pub fn supervisor(dir: &Path, driver_args: &[&str], snapshots: bool) -> Supervisor {
    let standby = std::env::var("TW_STANDBY").map_or(true, |v| v != "0");
    let program = crate::bin::tensorwasm_bin();
    let mut args = vec!["worker".into()];
    args.extend(driver_args.iter().map(Into::into));
    Supervisor::start(SupervisorConfig {
        worker: WorkerCommand { program, args },
        snapshot_dir: dir.join("snapshots"),
        snapshots,
        standby,
    })
    .expect("supervisor")
}

pub fn int(values: Vec<WasmValue>) -> i32 {
    match values.as_slice() {
        [WasmValue::I32(v)] => *v,
        other => panic!("expected one i32, got {other:?}"),
    }
}

pub fn long(values: Vec<WasmValue>) -> i64 {
    match values.as_slice() {
        [WasmValue::I64(v)] => *v,
        other => panic!("expected one i64, got {other:?}"),
    }
}

pub fn float(values: Vec<WasmValue>) -> f64 {
    match values.as_slice() {
        [WasmValue::F64(v)] => *v,
        other => panic!("expected one f64, got {other:?}"),
    }
}

pub fn ok(s: &mut Supervisor, tenant: &str, export: &str, args: &[WasmValue]) -> Vec<WasmValue> {
    s.call(tenant, export, args)
        .unwrap_or_else(|e| panic!("{tenant}.{export}: {e}"))
}
