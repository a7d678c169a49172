;; A WASI command that uses the GPU: adds two vectors of N random floats
;; with a kernel written in Wasm (`$vadd_kernel`, lowered to PTX on CUDA,
;; native code on the CPU driver; sandboxed), checks every element against
;; the same addition done here in Wasm, prints one line and exits 0 (1 when
;; an element or a wasi_cuda call is wrong, 2 for a bad argument).
;;
;;   tensorwasm run examples/hello_gpu.wat            # N = 1048576
;;   tensorwasm run examples/hello_gpu.wat 4096
;;
;; It reads its argv (WASI args_get), writes to stdout and stderr (fd_write)
;; and exits with proc_exit, as any WASI program does.
(module
  ;; Function indices (imports come first): 0-3 wasi_cuda, 4-6 the kernel
  ;; intrinsics, 7-10 WASI, then 11 $global_id, 12 $vadd_kernel.
  (import "wasi_cuda" "kernel_get" (func $kernel_get (param i32 i32) (result i32)))
  (import "wasi_cuda" "launch" (func $launch (param i64 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "wasi_cuda" "wait" (func $wait (param i64) (result i32)))
  (import "wasi_cuda" "device_info" (func $device_info (param i32 i32 i32) (result i32)))
  (import "tensorwasm_kernel" "thread_idx_x" (func $thread_idx_x (result i32)))
  (import "tensorwasm_kernel" "block_idx_x" (func $block_idx_x (result i32)))
  (import "tensorwasm_kernel" "block_dim_x" (func $block_dim_x (result i32)))
  (import "wasi_snapshot_preview1" "args_sizes_get" (func $args_sizes_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "args_get" (func $args_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $proc_exit (param i32)))
  (memory (export "memory") 2)

  ;; Memory map: 0 an iovec, 16 nwritten, 32 argc and argv's size, 64 and
  ;; 72 out-pointers, 128 launch descriptors, 256 the device record (its
  ;; name at 320), 512 argv's pointers, 1024 argv's strings (3 KiB at most),
  ;; 4096 the line being written, below 8192 a number's digits, 65536 the
  ;; vectors.
  (global $OUT_FUNCTION i32 (i32.const 64))
  (global $OUT_LAUNCH i32 (i32.const 72))
  (global $ARGS i32 (i32.const 128))
  (global $DEVICE i32 (i32.const 256))
  (global $LINE i32 (i32.const 4096))
  (global $DATA i32 (i32.const 65536))
  (global $cursor (mut i32) (i32.const 4096))
  (global $seed (mut i32) (i32.const 0x6a09e667))

  (data (i32.const 2048) "vector add of ")
  (data (i32.const 2064) " floats by a Wasm kernel on ")
  (data (i32.const 2096) ": all ")
  (data (i32.const 2104) " match\n")
  (data (i32.const 2112) ": element ")
  (data (i32.const 2128) " is wrong\n")
  (data (i32.const 2144) "hello_gpu: a wasi_cuda call failed with errno ")
  (data (i32.const 2192) "usage: hello_gpu [N], 1 <= N <= 67108864\n")

  ;; ---- the kernel (runs on the device) ----

  (func $global_id (result i32)
    (i32.add (i32.mul (call $block_idx_x) (call $block_dim_x)) (call $thread_idx_x)))

  ;; c[i] = a[i] + b[i] for i < n (a, b, c: offsets of f32 arrays).
  (func $vadd_kernel (param $a i32) (param $b i32) (param $c i32) (param $n i32)
    (local $i i32) (local $at i32)
    (local.set $i (call $global_id))
    (if (i32.lt_u (local.get $i) (local.get $n))
      (then
        (local.set $at (i32.shl (local.get $i) (i32.const 2)))
        (f32.store (i32.add (local.get $c) (local.get $at))
          (f32.add (f32.load (i32.add (local.get $a) (local.get $at)))
                   (f32.load (i32.add (local.get $b) (local.get $at))))))))

  ;; ---- the guest's own code (runs in wasmtime) ----

  ;; Appends `len` bytes at `ptr` to the line.
  (func $emit (param $ptr i32) (param $len i32)
    (memory.copy (global.get $cursor) (local.get $ptr) (local.get $len))
    (global.set $cursor (i32.add (global.get $cursor) (local.get $len))))

  ;; Appends `n` in decimal.
  (func $emit_u32 (param $n i32)
    (local $digits i32) (local $end i32)
    ;; Digits right to left in a scratch area, then copied.
    (local.set $end (i32.const 8192))
    (local.set $digits (local.get $end))
    (loop $next
      (local.set $digits (i32.sub (local.get $digits) (i32.const 1)))
      (i32.store8 (local.get $digits) (i32.add (i32.const 48) (i32.rem_u (local.get $n) (i32.const 10))))
      (local.set $n (i32.div_u (local.get $n) (i32.const 10)))
      (br_if $next (local.get $n)))
    (call $emit (local.get $digits) (i32.sub (local.get $end) (local.get $digits))))

  ;; Writes the line to `fd`, exits with `code`.
  (func $finish (param $fd i32) (param $code i32)
    (i32.store (i32.const 0) (global.get $LINE))
    (i32.store (i32.const 4) (i32.sub (global.get $cursor) (global.get $LINE)))
    (drop (call $fd_write (local.get $fd) (i32.const 0) (i32.const 1) (i32.const 16)))
    (call $proc_exit (local.get $code)))

  (func $usage
    (call $emit (i32.const 2192) (i32.const 41))
    (call $finish (i32.const 2) (i32.const 2)))

  (func $failed (param $errno i32)
    (call $emit (i32.const 2144) (i32.const 46))
    (call $emit_u32 (local.get $errno))
    (call $emit (i32.const 2110) (i32.const 1)) ;; the "\n" of " match\n"
    (call $finish (i32.const 2) (i32.const 1)))

  ;; The decimal at `ptr` (NUL-terminated), or -1 when it is not one.
  (func $parse_u32 (param $ptr i32) (result i32)
    (local $n i64) (local $digit i32)
    (if (i32.eqz (i32.load8_u (local.get $ptr))) (then (return (i32.const -1))))
    (block $done
      (loop $next
        (local.set $digit (i32.load8_u (local.get $ptr)))
        (br_if $done (i32.eqz (local.get $digit)))
        (local.set $digit (i32.sub (local.get $digit) (i32.const 48)))
        (if (i32.gt_u (local.get $digit) (i32.const 9)) (then (return (i32.const -1))))
        (local.set $n (i64.add (i64.mul (local.get $n) (i64.const 10)) (i64.extend_i32_u (local.get $digit))))
        (if (i64.gt_u (local.get $n) (i64.const 0x7fffffff)) (then (return (i32.const -1))))
        (local.set $ptr (i32.add (local.get $ptr) (i32.const 1)))
        (br $next)))
    (i32.wrap_i64 (local.get $n)))

  (func $random_float (result f32)
    (local $x i32)
    (local.set $x (global.get $seed))
    (local.set $x (i32.xor (local.get $x) (i32.shl (local.get $x) (i32.const 13))))
    (local.set $x (i32.xor (local.get $x) (i32.shr_u (local.get $x) (i32.const 17))))
    (local.set $x (i32.xor (local.get $x) (i32.shl (local.get $x) (i32.const 5))))
    (global.set $seed (local.get $x))
    ;; In [1, 2): never zero.
    (f32.reinterpret_i32
      (i32.or (i32.const 0x3f800000) (i32.and (local.get $x) (i32.const 0x7fffff)))))

  ;; Descriptor `index`: tag 0 (i32), value `v`.
  (func $arg (param $index i32) (param $v i32)
    (local $at i32)
    (local.set $at (i32.add (global.get $ARGS) (i32.mul (local.get $index) (i32.const 24))))
    (i32.store (local.get $at) (i32.const 0))
    (i32.store offset=4 (local.get $at) (i32.const 0))
    (i64.store offset=8 (local.get $at) (i64.extend_i32_u (local.get $v)))
    (i64.store offset=16 (local.get $at) (i64.const 0)))

  (func (export "_start")
    (local $n i32) (local $a i32) (local $b i32) (local $c i32) (local $bytes i32)
    (local $err i32) (local $i i32) (local $at i32) (local $name_len i32)
    ;; N from argv[1], 1048576 without it.
    (drop (call $args_sizes_get (i32.const 32) (i32.const 36)))
    (if (i32.or (i32.gt_u (i32.load (i32.const 32)) (i32.const 2))
                (i32.gt_u (i32.load (i32.const 36)) (i32.const 3072)))
      (then (call $usage)))
    (drop (call $args_get (i32.const 512) (i32.const 1024)))
    (local.set $n (i32.const 1048576))
    (if (i32.eq (i32.load (i32.const 32)) (i32.const 2))
      (then (local.set $n (call $parse_u32 (i32.load (i32.const 516))))))
    (if (i32.or (i32.lt_s (local.get $n) (i32.const 1)) (i32.gt_s (local.get $n) (i32.const 67108864)))
      (then (call $usage)))

    (local.set $err (call $device_info (i32.const 0) (global.get $DEVICE) (i32.const 128)))
    (if (local.get $err) (then (call $failed (local.get $err))))
    (block $end
      (loop $next
        (br_if $end (i32.eq (local.get $name_len) (i32.const 64)))
        (br_if $end (i32.eqz (i32.load8_u (i32.add (i32.const 320) (local.get $name_len)))))
        (local.set $name_len (i32.add (local.get $name_len) (i32.const 1)))
        (br $next)))

    ;; a, b, c back to back from DATA, memory grown to hold them.
    (local.set $bytes (i32.shl (local.get $n) (i32.const 2)))
    (local.set $a (global.get $DATA))
    (local.set $b (i32.add (local.get $a) (local.get $bytes)))
    (local.set $c (i32.add (local.get $b) (local.get $bytes)))
    (drop (memory.grow (i32.sub
      (i32.shr_u (i32.add (i32.add (local.get $c) (local.get $bytes)) (i32.const 65535)) (i32.const 16))
      (memory.size))))
    (loop $fill
      (local.set $at (i32.shl (local.get $i) (i32.const 2)))
      (f32.store (i32.add (local.get $a) (local.get $at)) (call $random_float))
      (f32.store (i32.add (local.get $b) (local.get $at)) (call $random_float))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $fill (i32.lt_u (local.get $i) (local.get $n))))

    ;; The kernel of function 12, over n threads in blocks of 256.
    (local.set $err (call $kernel_get (i32.const 12) (global.get $OUT_FUNCTION)))
    (if (local.get $err) (then (call $failed (local.get $err))))
    (call $arg (i32.const 0) (local.get $a))
    (call $arg (i32.const 1) (local.get $b))
    (call $arg (i32.const 2) (local.get $c))
    (call $arg (i32.const 3) (local.get $n))
    (local.set $err (call $launch (i64.load (global.get $OUT_FUNCTION))
      (i32.div_u (i32.add (local.get $n) (i32.const 255)) (i32.const 256)) (i32.const 1) (i32.const 1)
      (i32.const 256) (i32.const 1) (i32.const 1)
      (i32.const 0) (global.get $ARGS) (i32.const 4) (global.get $OUT_LAUNCH)))
    (if (local.get $err) (then (call $failed (local.get $err))))
    (local.set $err (call $wait (i64.load (global.get $OUT_LAUNCH))))
    (if (local.get $err) (then (call $failed (local.get $err))))

    (call $emit (i32.const 2048) (i32.const 14))
    (call $emit_u32 (local.get $n))
    (call $emit (i32.const 2064) (i32.const 28))
    (call $emit (i32.const 320) (local.get $name_len))
    ;; Every element, bit for bit: both sides round to nearest.
    (local.set $i (i32.const 0))
    (loop $check
      (local.set $at (i32.shl (local.get $i) (i32.const 2)))
      (if (i32.ne
            (i32.load (i32.add (local.get $c) (local.get $at)))
            (i32.reinterpret_f32 (f32.add (f32.load (i32.add (local.get $a) (local.get $at)))
                                          (f32.load (i32.add (local.get $b) (local.get $at))))))
        (then
          (call $emit (i32.const 2112) (i32.const 10))
          (call $emit_u32 (local.get $i))
          (call $emit (i32.const 2128) (i32.const 10))
          (call $finish (i32.const 1) (i32.const 1))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $check (i32.lt_u (local.get $i) (local.get $n))))
    (call $emit (i32.const 2096) (i32.const 6))
    (call $emit_u32 (local.get $n))
    (call $emit (i32.const 2104) (i32.const 7))
    (call $finish (i32.const 1) (i32.const 0))))
