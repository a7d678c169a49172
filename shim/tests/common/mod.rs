//! Guests of the shim's tests.

/// examples/hello_gpu.wat: a vector add by a Wasm kernel, checked.
pub const HELLO_GPU: &str = include_str!("../../../examples/hello_gpu.wat");

/// A WASI command: writes its argv and its environment to stdout, one per
/// line, and exits with 7.
pub const ECHO: &str = r#"(module
  (import "wasi_snapshot_preview1" "args_sizes_get" (func $args_sizes (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "args_get" (func $args (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "environ_sizes_get" (func $env_sizes (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "environ_get" (func $env (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 2)
  ;; writes n bytes at p, each NUL as a newline
  (func $put (param $p i32) (param $n i32) (local $i i32)
    (block $done (loop $l
      (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
      (if (i32.eqz (i32.load8_u (i32.add (local.get $p) (local.get $i))))
        (then (i32.store8 (i32.add (local.get $p) (local.get $i)) (i32.const 10))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $l)))
    (i32.store (i32.const 0) (local.get $p))
    (i32.store (i32.const 4) (local.get $n))
    (drop (call $write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8))))
  (func (export "_start")
    (drop (call $args_sizes (i32.const 16) (i32.const 20)))
    (drop (call $args (i32.const 1024) (i32.const 8192)))
    (call $put (i32.const 8192) (i32.load (i32.const 20)))
    (drop (call $env_sizes (i32.const 16) (i32.const 20)))
    (drop (call $env (i32.const 1024) (i32.const 32768)))
    (call $put (i32.const 32768) (i32.load (i32.const 20)))
    (call $exit (i32.const 7))))"#;
