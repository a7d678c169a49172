//! A tenant's test guest and the calls into it, shared by the suites that
//! run one (`faults.rs`, `oom.rs`, `snapshot.rs`): included with `#[path]`.

use tensorwasm_core::{
    ManagedAllocator,
    abi::{ArgDescriptor, encode_args},
};
use tensorwasm_embed::{kernel::KernelTarget, tenant::Tenant};
use wasmtime::Val;

/// Where the guest's calls write their outputs (handles).
pub const OUT: u32 = 0x40;
/// The launch's argument descriptors.
pub const ARGS: u32 = 0x100;
/// The tensor op's descriptor.
pub const DESC: u32 = 0x200;
/// Floats the kernel doubles and the tensor op reads.
pub const X: u32 = 0x1_0000;
/// The tensor op's output.
pub const Y: u32 = 0x2_0000;
/// Floats the workload moves and computes on.
pub const N: u32 = 1024;

/// The guest: a wrapper export for each `wasi_cuda` function the workload
/// calls, a mutable global `counter`, and `$double` (function 14), a Wasm
/// kernel that doubles `n` floats at `p`, one per thread.
pub const GUEST: &str = r#"(module
  (import "wasi_cuda" "buffer_alloc" (func $buffer_alloc (param i64 i32) (result i32)))
  (import "wasi_cuda" "buffer_free" (func $buffer_free (param i64) (result i32)))
  (import "wasi_cuda" "copy_to_buffer" (func $copy_to_buffer (param i64 i64 i32 i32) (result i32)))
  (import "wasi_cuda" "copy_from_buffer" (func $copy_from_buffer (param i32 i64 i64 i32) (result i32)))
  (import "wasi_cuda" "kernel_get" (func $kernel_get (param i32 i32) (result i32)))
  (import "wasi_cuda" "launch" (func $launch (param i64 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "wasi_cuda" "tensor_op" (func $tensor_op (param i32 i32 i32) (result i32)))
  (import "wasi_cuda" "wait" (func $wait (param i64) (result i32)))
  (import "wasi_cuda" "last_error" (func $last_error (param i32 i32 i32) (result i32)))
  (import "wasi_cuda" "module_load_ptx" (func $load (param i32 i32 i32) (result i32)))
  (import "wasi_cuda" "function_get" (func $get (param i64 i32 i32 i32) (result i32)))
  (import "tensorwasm_kernel" "thread_idx_x" (func $tid (result i32)))
  (import "tensorwasm_kernel" "block_idx_x" (func $bid (result i32)))
  (import "tensorwasm_kernel" "block_dim_x" (func $bdim (result i32)))
  (memory (export "memory") 4)
  (global (export "counter") (mut i32) (i32.const 0))
  (func $double (param $p i32) (param $n i32) (local $i i32) (local $a i32)
    (local.set $i (i32.add (i32.mul (call $bid) (call $bdim)) (call $tid)))
    (if (i32.lt_u (local.get $i) (local.get $n)) (then
      (local.set $a (i32.add (local.get $p) (i32.shl (local.get $i) (i32.const 2))))
      (f32.store (local.get $a) (f32.mul (f32.load (local.get $a)) (f32.const 2))))))
  (func (export "buffer_alloc") (param i64 i32) (result i32)
    (call $buffer_alloc (local.get 0) (local.get 1)))
  (func (export "buffer_free") (param i64) (result i32) (call $buffer_free (local.get 0)))
  (func (export "copy_to_buffer") (param i64 i64 i32 i32) (result i32)
    (call $copy_to_buffer (local.get 0) (local.get 1) (local.get 2) (local.get 3)))
  (func (export "copy_from_buffer") (param i32 i64 i64 i32) (result i32)
    (call $copy_from_buffer (local.get 0) (local.get 1) (local.get 2) (local.get 3)))
  (func (export "kernel_get") (param i32 i32) (result i32)
    (call $kernel_get (local.get 0) (local.get 1)))
  (func (export "launch") (param i64 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)
    (call $launch (local.get 0) (local.get 1) (local.get 2) (local.get 3) (local.get 4)
      (local.get 5) (local.get 6) (local.get 7) (local.get 8) (local.get 9) (local.get 10)))
  (func (export "tensor_op") (param i32 i32 i32) (result i32)
    (call $tensor_op (local.get 0) (local.get 1) (local.get 2)))
  (func (export "wait") (param i64) (result i32) (call $wait (local.get 0)))
  (func (export "last_error") (param i32 i32 i32) (result i32)
    (call $last_error (local.get 0) (local.get 1) (local.get 2)))
  (func (export "module_load_ptx") (param i32 i32 i32) (result i32)
    (call $load (local.get 0) (local.get 1) (local.get 2)))
  (func (export "function_get") (param i64 i32 i32 i32) (result i32)
    (call $get (local.get 0) (local.get 1) (local.get 2) (local.get 3))))"#;

/// The kernel's function index (after the fourteen imports).
pub const DOUBLE: i32 = 14;

/// What a driver under test must be.
pub trait Device: KernelTarget + ManagedAllocator<Region: Sync> + Clone + 'static {}
impl<D: KernelTarget + ManagedAllocator<Region: Sync> + Clone + 'static> Device for D {}

pub fn call<D: Device>(t: &mut Tenant<D>, name: &str, args: &[Val]) -> i32 {
    let instance = t.instance().expect("instantiated");
    let func = instance
        .get_func(t.store_mut(), name)
        .unwrap_or_else(|| panic!("no export {name}"));
    let mut results = [Val::I32(0)];
    futures::executor::block_on(func.call_async(t.store_mut(), args, &mut results))
        .unwrap_or_else(|e| panic!("{name} trapped: {e:#}"));
    results[0].unwrap_i32()
}

pub fn memory<D: Device>(t: &mut Tenant<D>) -> wasmtime::Memory {
    t.instance()
        .expect("instantiated")
        .get_memory(t.store_mut(), "memory")
        .expect("memory")
}

pub fn write<D: Device>(t: &mut Tenant<D>, at: u32, bytes: &[u8]) {
    let m = memory(t);
    m.data_mut(t.store_mut())[at as usize..at as usize + bytes.len()].copy_from_slice(bytes);
}

pub fn read<D: Device>(t: &mut Tenant<D>, at: u32, len: usize) -> Vec<u8> {
    let m = memory(t);
    m.data(t.store())[at as usize..at as usize + len].to_vec()
}

pub fn read_u64<D: Device>(t: &mut Tenant<D>, at: u32) -> u64 {
    u64::from_le_bytes(read(t, at, 8).try_into().expect("8 bytes"))
}

pub fn last_error<D: Device>(t: &Tenant<D>) -> String {
    t.store().data().cuda.last_error().to_string()
}

/// `launch`'s arguments: `function` over `grid` x `block` threads (x
/// only), the `args` descriptors written at [`ARGS`] first, the launch
/// handle to [`OUT`].
pub fn launch_args<D: Device>(
    t: &mut Tenant<D>,
    function: u64,
    (grid, block): (u32, u32),
    args: &[ArgDescriptor],
) -> [Val; 11] {
    write(t, ARGS, &encode_args(args));
    [
        Val::I64(function as i64),
        Val::I32(grid as i32),
        Val::I32(1),
        Val::I32(1),
        Val::I32(block as i32),
        Val::I32(1),
        Val::I32(1),
        Val::I32(0),
        Val::I32(ARGS as i32),
        Val::I32(args.len() as i32),
        Val::I32(OUT as i32),
    ]
}

/// `$double`'s launch over the `N` floats at `X`.
pub fn double_args<D: Device>(t: &mut Tenant<D>, function: u64) -> [Val; 11] {
    let args = [ArgDescriptor::i32(X as i32), ArgDescriptor::i32(N as i32)];
    launch_args(t, function, (N / 64, 64), &args)
}
