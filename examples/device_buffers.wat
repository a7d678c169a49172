;; Data kept in device buffers across several launches: a and b (n random
;; non-zero floats each) are copied into device buffers A and B once; then
;; `rounds` launches of kernels/test/vector_add.ptx's `vadd(A, B, B)` run
;; back to back on the device (B += A each time, never copied out in
;; between), one sync() waits for all of them, and B is copied back and
;; checked against the same additions done here in the guest.
;;
;;   tensorwasm run examples/device_buffers.wat 1048576 8
;;
;; run(n, rounds) returns 0 when every element matches; i + 1 for the first
;; mismatch; -errno when a wasi_cuda call fails; -100 when memory cannot grow.
(module
  (import "wasi_cuda" "module_load_ptx" (func $module_load_ptx (param i32 i32 i32) (result i32)))
  (import "wasi_cuda" "module_unload" (func $module_unload (param i64) (result i32)))
  (import "wasi_cuda" "function_get" (func $function_get (param i64 i32 i32 i32) (result i32)))
  (import "wasi_cuda" "launch" (func $launch (param i64 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "wasi_cuda" "sync" (func $sync (result i32)))
  (import "wasi_cuda" "buffer_alloc" (func $buffer_alloc (param i64 i32) (result i32)))
  (import "wasi_cuda" "buffer_free" (func $buffer_free (param i64) (result i32)))
  (import "wasi_cuda" "copy_to_buffer" (func $copy_to_buffer (param i64 i64 i32 i32) (result i32)))
  (import "wasi_cuda" "copy_from_buffer" (func $copy_from_buffer (param i32 i64 i64 i32) (result i32)))
  (memory (export "memory") 1)

  (global $seed (mut i32) (i32.const 0x1b873593))

  ;; Offsets in page 0.
  (global $OUT_MODULE i32 (i32.const 64))
  (global $OUT_FUNCTION i32 (i32.const 72))
  (global $OUT_LAUNCH i32 (i32.const 80))
  (global $OUT_A i32 (i32.const 88))
  (global $OUT_B i32 (i32.const 96))
  (global $NAME i32 (i32.const 112))
  (global $ARGS i32 (i32.const 128))
  (global $PTX i32 (i32.const 1024))
  (global $PTX_LEN i32 (i32.const 1297))
  (global $DATA i32 (i32.const 65536))

  (data (i32.const 112) "vadd")
  (data (i32.const 1024)
    "// Hand-written test kernel: c[i] = a[i] + b[i] for i < n (one thread per\0a"
    "// element, 1-D grid). Used by the driver conformance suite on CUDA.\0a"
    "// Parameters: a, b, c (.u64 addresses of f32 arrays), n (.u32).\0a"
    "\0a"
    ".version 7.0\0a"
    ".target sm_70\0a"
    ".address_size 64\0a"
    "\0a"
    ".visible .entry vadd(\0a"
    "    .param .u64 vadd_a,\0a"
    "    .param .u64 vadd_b,\0a"
    "    .param .u64 vadd_c,\0a"
    "    .param .u32 vadd_n\0a"
    ")\0a"
    "{\0a"
    "    .reg .pred  %p<2>;\0a"
    "    .reg .b32   %r<6>;\0a"
    "    .reg .f32   %f<4>;\0a"
    "    .reg .b64   %rd<11>;\0a"
    "\0a"
    "    ld.param.u64        %rd1, [vadd_a];\0a"
    "    ld.param.u64        %rd2, [vadd_b];\0a"
    "    ld.param.u64        %rd3, [vadd_c];\0a"
    "    ld.param.u32        %r1, [vadd_n];\0a"
    "    mov.u32             %r2, %ctaid.x;\0a"
    "    mov.u32             %r3, %ntid.x;\0a"
    "    mov.u32             %r4, %tid.x;\0a"
    "    mad.lo.s32          %r5, %r2, %r3, %r4;\0a"
    "    setp.ge.u32         %p1, %r5, %r1;\0a"
    "    @%p1 bra            DONE;\0a"
    "    cvta.to.global.u64  %rd4, %rd1;\0a"
    "    cvta.to.global.u64  %rd5, %rd2;\0a"
    "    cvta.to.global.u64  %rd6, %rd3;\0a"
    "    mul.wide.u32        %rd7, %r5, 4;\0a"
    "    add.s64             %rd8, %rd4, %rd7;\0a"
    "    add.s64             %rd9, %rd5, %rd7;\0a"
    "    add.s64             %rd10, %rd6, %rd7;\0a"
    "    ld.global.f32       %f1, [%rd8];\0a"
    "    ld.global.f32       %f2, [%rd9];\0a"
    "    add.rn.f32          %f3, %f1, %f2;\0a"
    "    st.global.f32       [%rd10], %f3;\0a"
    "DONE:\0a"
    "    ret;\0a"
    "}\0a")

  ;; xorshift32; the result is a float in [1, 2) (never zero).
  (func $random_float (result f32)
    (local $x i32)
    (local.set $x (global.get $seed))
    (local.set $x (i32.xor (local.get $x) (i32.shl (local.get $x) (i32.const 13))))
    (local.set $x (i32.xor (local.get $x) (i32.shr_u (local.get $x) (i32.const 17))))
    (local.set $x (i32.xor (local.get $x) (i32.shl (local.get $x) (i32.const 5))))
    (global.set $seed (local.get $x))
    (f32.reinterpret_i32
      (i32.or (i32.const 0x3f800000) (i32.and (local.get $x) (i32.const 0x7fffff)))))

  ;; Fills n floats at ptr.
  (func $fill (param $ptr i32) (param $n i32)
    (local $i i32)
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
        (f32.store (i32.add (local.get $ptr) (i32.shl (local.get $i) (i32.const 2)))
                   (call $random_float))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next))))

  ;; Grows memory to at least `bytes`; 0 on success, -100 when it cannot.
  (func $ensure (param $bytes i64) (result i32)
    (local $pages i64)
    (local.set $pages (i64.shr_u (i64.add (local.get $bytes) (i64.const 65535)) (i64.const 16)))
    (if (i64.gt_u (local.get $pages) (i64.extend_i32_u (memory.size)))
      (then
        (if (i64.gt_u (local.get $pages) (i64.const 65536)) (then (return (i32.const -100))))
        (if (i32.eq (memory.grow (i32.sub (i32.wrap_i64 (local.get $pages)) (memory.size)))
                    (i32.const -1))
          (then (return (i32.const -100))))))
    (i32.const 0))

  ;; Writes descriptor `index` of the argument list.
  (func $arg (param $index i32) (param $tag i32) (param $align i32) (param $a i64) (param $b i64)
    (local $at i32)
    (local.set $at (i32.add (global.get $ARGS) (i32.mul (local.get $index) (i32.const 24))))
    (i32.store (local.get $at) (local.get $tag))
    (i32.store offset=4 (local.get $at) (local.get $align))
    (i64.store offset=8 (local.get $at) (local.get $a))
    (i64.store offset=16 (local.get $at) (local.get $b)))


  (func $check (param $err i32) (result i32)
    (i32.sub (i32.const 0) (local.get $err)))

  (func (export "run") (param $n i32) (param $rounds i32) (result i32)
    (local $a i32) (local $b i32) (local $c i32) (local $bytes i32)
    (local $err i32) (local $i i32) (local $r i32) (local $want f32)
    (local $buf_a i64) (local $buf_b i64) (local $module i64)
    (if (i32.le_s (local.get $n) (i32.const 0)) (then (return (i32.const -1))))
    (if (i32.lt_s (local.get $rounds) (i32.const 0)) (then (return (i32.const -1))))
    (local.set $bytes (i32.shl (local.get $n) (i32.const 2)))
    (local.set $a (global.get $DATA))
    (local.set $b (i32.add (local.get $a) (local.get $bytes)))
    (local.set $c (i32.add (local.get $b) (local.get $bytes)))
    (local.set $err (call $ensure
      (i64.add (i64.extend_i32_u (local.get $c)) (i64.extend_i32_u (local.get $bytes)))))
    (if (local.get $err) (then (return (local.get $err))))
    (call $fill (local.get $a) (local.get $n))
    (call $fill (local.get $b) (local.get $n))

    (local.set $err (call $module_load_ptx (global.get $PTX) (global.get $PTX_LEN) (global.get $OUT_MODULE)))
    (if (local.get $err) (then (return (call $check (local.get $err)))))
    (local.set $module (i64.load (global.get $OUT_MODULE)))
    (local.set $err (call $function_get (local.get $module)
                                        (global.get $NAME) (i32.const 4) (global.get $OUT_FUNCTION)))
    (if (local.get $err) (then (return (call $check (local.get $err)))))

    ;; Two device buffers, filled from guest memory once.
    (local.set $err (call $buffer_alloc (i64.extend_i32_u (local.get $bytes)) (global.get $OUT_A)))
    (if (local.get $err) (then (return (call $check (local.get $err)))))
    (local.set $buf_a (i64.load (global.get $OUT_A)))
    (local.set $err (call $buffer_alloc (i64.extend_i32_u (local.get $bytes)) (global.get $OUT_B)))
    (if (local.get $err) (then (return (call $check (local.get $err)))))
    (local.set $buf_b (i64.load (global.get $OUT_B)))
    (local.set $err (call $copy_to_buffer (local.get $buf_a) (i64.const 0) (local.get $a) (local.get $bytes)))
    (if (local.get $err) (then (return (call $check (local.get $err)))))
    (local.set $err (call $copy_to_buffer (local.get $buf_b) (i64.const 0) (local.get $b) (local.get $bytes)))
    (if (local.get $err) (then (return (call $check (local.get $err)))))

    ;; vadd(A, B, B, n): buffer pointers (tag 5) and an i32 (tag 0).
    (call $arg (i32.const 0) (i32.const 5) (i32.const 0) (local.get $buf_a) (i64.const 0))
    (call $arg (i32.const 1) (i32.const 5) (i32.const 0) (local.get $buf_b) (i64.const 0))
    (call $arg (i32.const 2) (i32.const 5) (i32.const 0) (local.get $buf_b) (i64.const 0))
    (call $arg (i32.const 3) (i32.const 0) (i32.const 0) (i64.extend_i32_u (local.get $n)) (i64.const 0))
    (block $launched
      (loop $next
        (br_if $launched (i32.ge_u (local.get $r) (local.get $rounds)))
        (local.set $err (call $launch (i64.load (global.get $OUT_FUNCTION))
          (i32.div_u (i32.add (local.get $n) (i32.const 255)) (i32.const 256)) (i32.const 1) (i32.const 1)
          (i32.const 256) (i32.const 1) (i32.const 1)
          (i32.const 0) (global.get $ARGS) (i32.const 4) (global.get $OUT_LAUNCH)))
        (if (local.get $err) (then (return (call $check (local.get $err)))))
        (local.set $r (i32.add (local.get $r) (i32.const 1)))
        (br $next)))
    ;; One wait for every launch; sync also releases their handles.
    (local.set $err (call $sync))
    (if (local.get $err) (then (return (call $check (local.get $err)))))
    (local.set $err (call $copy_from_buffer (local.get $c) (local.get $buf_b) (i64.const 0) (local.get $bytes)))
    (if (local.get $err) (then (return (call $check (local.get $err)))))
    (local.set $err (call $buffer_free (local.get $buf_a)))
    (if (local.get $err) (then (return (call $check (local.get $err)))))
    (local.set $err (call $buffer_free (local.get $buf_b)))
    (if (local.get $err) (then (return (call $check (local.get $err)))))
    (local.set $err (call $module_unload (local.get $module)))
    (if (local.get $err) (then (return (call $check (local.get $err)))))

    ;; c[i] must be b[i] + a[i] + a[i] ... (rounds times), added in that order.
    (block $done
      (loop $each
        (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
        (local.set $want (f32.load (i32.add (local.get $b) (i32.shl (local.get $i) (i32.const 2)))))
        (local.set $r (i32.const 0))
        (block $summed
          (loop $add
            (br_if $summed (i32.ge_u (local.get $r) (local.get $rounds)))
            (local.set $want (f32.add (f32.load (i32.add (local.get $a) (i32.shl (local.get $i) (i32.const 2))))
                                      (local.get $want)))
            (local.set $r (i32.add (local.get $r) (i32.const 1)))
            (br $add)))
        (if (f32.ne (f32.load (i32.add (local.get $c) (i32.shl (local.get $i) (i32.const 2))))
                    (local.get $want))
          (then (return (i32.add (local.get $i) (i32.const 1)))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $each)))
    (i32.const 0))
)
