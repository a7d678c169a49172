/*
 * tensorwasm.h: the TensorWasm guest API for C, in one header.
 *
 * Two halves, as in the Rust SDK (guest/tensorwasm-guest):
 *
 *   - the kernel side: what a guest function that runs as a GPU kernel
 *     imports from module `tensorwasm_kernel` (docs/kernels.md): the
 *     thread's position (CUDA's threadIdx, blockIdx, blockDim, gridDim),
 *     atomics on guest memory, the block's shared memory and its atomics,
 *     the barrier, warp shuffles and votes, fused multiply-add;
 *   - the guest side: the `wasi_cuda` imports (docs/ABI.md), one
 *     declaration per function with the ABI's name and Wasm signature, the
 *     argument descriptor `launch` reads, and small inline helpers.
 *
 * Build with a compiler for wasm32 (zig cc -target wasm32-wasi, or clang
 * --target=wasm32-wasi): a pointer is an i32 offset into the guest's
 * memory, a handle a uint64_t (Wasm i64). guest/c/README.md has the build
 * line and an example; every import returns an errno (0: success,
 * TW_E*: docs/ABI.md, "Error codes") unless it says otherwise.
 *
 * Written by hand from docs/kernels.md, docs/ABI.md and the Rust SDK's
 * `sys` module: a change to those is a change here, row by row.
 */
#ifndef TENSORWASM_H
#define TENSORWASM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if !defined(__wasm32__)
#error "tensorwasm.h is for wasm32 guests (zig cc -target wasm32-wasi)"
#endif

#define TW_KERNEL_IMPORT(name) \
    __attribute__((import_module("tensorwasm_kernel"), import_name(#name)))
/* The position intrinsics read only the thread's place, which is fixed
 * for its whole call: `const` lets the compiler drop unused ones and hoist
 * them out of loops. */
#define TW_POSITION(name) TW_KERNEL_IMPORT(name) __attribute__((const))
#define TW_CUDA_IMPORT(name) __attribute__((import_module("wasi_cuda"), import_name(#name)))

/* ---------------------------------------------------------------------
 * Kernel side: imports of `tensorwasm_kernel`.
 *
 * A kernel is an ordinary function of the guest with parameters of type
 * int32_t/uint32_t/pointer (Wasm i32), int64_t (i64), float, double, and
 * no result. Every thread runs the whole function. The intrinsics exist
 * only inside a launched kernel: in the guest's own code the position,
 * shared-memory, barrier and warp intrinsics trap the guest (the atomics
 * and the fused multiply-adds work there too).
 * ------------------------------------------------------------------- */

/* Where the thread is: CUDA's threadIdx.x, ... gridDim.z, as int32_t. */
TW_POSITION(thread_idx_x) int32_t tw_thread_idx_x(void);
TW_POSITION(thread_idx_y) int32_t tw_thread_idx_y(void);
TW_POSITION(thread_idx_z) int32_t tw_thread_idx_z(void);
TW_POSITION(block_idx_x) int32_t tw_block_idx_x(void);
TW_POSITION(block_idx_y) int32_t tw_block_idx_y(void);
TW_POSITION(block_idx_z) int32_t tw_block_idx_z(void);
TW_POSITION(block_dim_x) int32_t tw_block_dim_x(void);
TW_POSITION(block_dim_y) int32_t tw_block_dim_y(void);
TW_POSITION(block_dim_z) int32_t tw_block_dim_z(void);
TW_POSITION(grid_dim_x) int32_t tw_grid_dim_x(void);
TW_POSITION(grid_dim_y) int32_t tw_grid_dim_y(void);
TW_POSITION(grid_dim_z) int32_t tw_grid_dim_z(void);

/* CUDA's uint3, and its names: `blockIdx.x * blockDim.x + threadIdx.x`
 * reads as in CUDA C and has CUDA's unsigned arithmetic. Each use calls
 * the three imports; the compiler drops the ones not read (they are
 * `const`). Define TW_NO_CUDA_NAMES before the include to leave these four
 * names free. */
typedef struct tw_uint3 {
    unsigned int x, y, z;
} tw_uint3;

#ifndef TW_NO_CUDA_NAMES
#define threadIdx \
    ((tw_uint3){(unsigned)tw_thread_idx_x(), (unsigned)tw_thread_idx_y(), (unsigned)tw_thread_idx_z()})
#define blockIdx \
    ((tw_uint3){(unsigned)tw_block_idx_x(), (unsigned)tw_block_idx_y(), (unsigned)tw_block_idx_z()})
#define blockDim \
    ((tw_uint3){(unsigned)tw_block_dim_x(), (unsigned)tw_block_dim_y(), (unsigned)tw_block_dim_z()})
#define gridDim \
    ((tw_uint3){(unsigned)tw_grid_dim_x(), (unsigned)tw_grid_dim_y(), (unsigned)tw_grid_dim_z()})
#endif

/* blockIdx.x * blockDim.x + threadIdx.x, and its y and z. */
static inline uint32_t tw_global_id_x(void) {
    return (uint32_t)tw_block_idx_x() * (uint32_t)tw_block_dim_x() + (uint32_t)tw_thread_idx_x();
}
static inline uint32_t tw_global_id_y(void) {
    return (uint32_t)tw_block_idx_y() * (uint32_t)tw_block_dim_y() + (uint32_t)tw_thread_idx_y();
}
static inline uint32_t tw_global_id_z(void) {
    return (uint32_t)tw_block_idx_z() * (uint32_t)tw_block_dim_z() + (uint32_t)tw_thread_idx_z();
}

/* Atomics on guest memory, each returning the value before, relaxed (as
 * CUDA's atomicAdd). The address must be a multiple of the size (else the
 * thread traps, "unaligned atomic"). C11's <stdatomic.h> compiles to plain
 * loads and stores on wasm32 without the atomics feature: use these. The
 * f32 add flushes subnormal inputs and results to zero, as the GPU's. */
TW_KERNEL_IMPORT(atomic_add_i32) int32_t tw_atomic_add_i32(int32_t *addr, int32_t v);
TW_KERNEL_IMPORT(atomic_sub_i32) int32_t tw_atomic_sub_i32(int32_t *addr, int32_t v);
TW_KERNEL_IMPORT(atomic_and_i32) int32_t tw_atomic_and_i32(int32_t *addr, int32_t v);
TW_KERNEL_IMPORT(atomic_or_i32) int32_t tw_atomic_or_i32(int32_t *addr, int32_t v);
TW_KERNEL_IMPORT(atomic_xor_i32) int32_t tw_atomic_xor_i32(int32_t *addr, int32_t v);
TW_KERNEL_IMPORT(atomic_xchg_i32) int32_t tw_atomic_xchg_i32(int32_t *addr, int32_t v);
TW_KERNEL_IMPORT(atomic_min_i32) int32_t tw_atomic_min_i32(int32_t *addr, int32_t v);
TW_KERNEL_IMPORT(atomic_max_i32) int32_t tw_atomic_max_i32(int32_t *addr, int32_t v);
/* Unsigned min/max on the same 32-bit words. */
TW_KERNEL_IMPORT(atomic_min_u32) uint32_t tw_atomic_min_u32(uint32_t *addr, uint32_t v);
TW_KERNEL_IMPORT(atomic_max_u32) uint32_t tw_atomic_max_u32(uint32_t *addr, uint32_t v);
/* Stores `desired` when the word holds `expected`; returns the old value. */
TW_KERNEL_IMPORT(atomic_cas_i32)
int32_t tw_atomic_cas_i32(int32_t *addr, int32_t expected, int32_t desired);
TW_KERNEL_IMPORT(atomic_add_i64) int64_t tw_atomic_add_i64(int64_t *addr, int64_t v);
TW_KERNEL_IMPORT(atomic_cas_i64)
int64_t tw_atomic_cas_i64(int64_t *addr, int64_t expected, int64_t desired);
TW_KERNEL_IMPORT(atomic_add_f32) float tw_atomic_add_f32(float *addr, float v);

/* The block's shared memory: the launch's `shared_mem_bytes` rounded up
 * to 16, zeroed when each block starts, apart from the guest's memory and
 * reached only by byte offsets (no C pointer can point into it). An offset
 * past the end, or not a multiple of the access's size, traps. */
TW_KERNEL_IMPORT(shared_size) int32_t tw_shared_size(void);
TW_KERNEL_IMPORT(shared_load_i32) int32_t tw_shared_load_i32(int32_t offset);
TW_KERNEL_IMPORT(shared_load_i64) int64_t tw_shared_load_i64(int32_t offset);
TW_KERNEL_IMPORT(shared_load_f32) float tw_shared_load_f32(int32_t offset);
TW_KERNEL_IMPORT(shared_load_f64) double tw_shared_load_f64(int32_t offset);
TW_KERNEL_IMPORT(shared_store_i32) void tw_shared_store_i32(int32_t offset, int32_t v);
TW_KERNEL_IMPORT(shared_store_i64) void tw_shared_store_i64(int32_t offset, int64_t v);
TW_KERNEL_IMPORT(shared_store_f32) void tw_shared_store_f32(int32_t offset, float v);
TW_KERNEL_IMPORT(shared_store_f64) void tw_shared_store_f64(int32_t offset, double v);

/* Atomics on shared memory, (offset, operands) -> the value before. The
 * f32 add keeps subnormals (plain IEEE), as the GPU's shared atomic. */
TW_KERNEL_IMPORT(shared_atomic_add_i32) int32_t tw_shared_atomic_add_i32(int32_t offset, int32_t v);
TW_KERNEL_IMPORT(shared_atomic_sub_i32) int32_t tw_shared_atomic_sub_i32(int32_t offset, int32_t v);
TW_KERNEL_IMPORT(shared_atomic_and_i32) int32_t tw_shared_atomic_and_i32(int32_t offset, int32_t v);
TW_KERNEL_IMPORT(shared_atomic_or_i32) int32_t tw_shared_atomic_or_i32(int32_t offset, int32_t v);
TW_KERNEL_IMPORT(shared_atomic_xor_i32) int32_t tw_shared_atomic_xor_i32(int32_t offset, int32_t v);
TW_KERNEL_IMPORT(shared_atomic_xchg_i32)
int32_t tw_shared_atomic_xchg_i32(int32_t offset, int32_t v);
TW_KERNEL_IMPORT(shared_atomic_min_i32) int32_t tw_shared_atomic_min_i32(int32_t offset, int32_t v);
TW_KERNEL_IMPORT(shared_atomic_max_i32) int32_t tw_shared_atomic_max_i32(int32_t offset, int32_t v);
TW_KERNEL_IMPORT(shared_atomic_min_u32)
uint32_t tw_shared_atomic_min_u32(int32_t offset, uint32_t v);
TW_KERNEL_IMPORT(shared_atomic_max_u32)
uint32_t tw_shared_atomic_max_u32(int32_t offset, uint32_t v);
TW_KERNEL_IMPORT(shared_atomic_cas_i32)
int32_t tw_shared_atomic_cas_i32(int32_t offset, int32_t expected, int32_t desired);
TW_KERNEL_IMPORT(shared_atomic_add_i64) int64_t tw_shared_atomic_add_i64(int32_t offset, int64_t v);
TW_KERNEL_IMPORT(shared_atomic_cas_i64)
int64_t tw_shared_atomic_cas_i64(int32_t offset, int64_t expected, int64_t desired);
TW_KERNEL_IMPORT(shared_atomic_add_f32) float tw_shared_atomic_add_f32(int32_t offset, float v);

/* __syncthreads(): waits for every thread of the block that has not ended
 * (a thread that returned or trapped does not count, so a barrier some
 * threads skip never hangs); orders shared and guest memory in the block. */
TW_KERNEL_IMPORT(barrier) void tw_barrier(void);
#ifndef TW_NO_CUDA_NAMES
#define __syncthreads() tw_barrier()
#endif

/* Warps: 32 lanes on every target. A shuffle's lane whose source is out
 * of range (up below 0, down past 31, xor with mask >= 32) or not taking
 * part reads its own `v`. The lanes taking part are those executing the
 * call together. */
TW_KERNEL_IMPORT(lane_id) int32_t tw_lane_id(void);
TW_KERNEL_IMPORT(warp_size) int32_t tw_warp_size(void);
TW_KERNEL_IMPORT(shfl_idx_i32) int32_t tw_shfl_idx_i32(int32_t v, int32_t lane);
TW_KERNEL_IMPORT(shfl_up_i32) int32_t tw_shfl_up_i32(int32_t v, int32_t delta);
TW_KERNEL_IMPORT(shfl_down_i32) int32_t tw_shfl_down_i32(int32_t v, int32_t delta);
TW_KERNEL_IMPORT(shfl_xor_i32) int32_t tw_shfl_xor_i32(int32_t v, int32_t mask);
TW_KERNEL_IMPORT(shfl_idx_f32) float tw_shfl_idx_f32(float v, int32_t lane);
TW_KERNEL_IMPORT(shfl_up_f32) float tw_shfl_up_f32(float v, int32_t delta);
TW_KERNEL_IMPORT(shfl_down_f32) float tw_shfl_down_f32(float v, int32_t delta);
TW_KERNEL_IMPORT(shfl_xor_f32) float tw_shfl_xor_f32(float v, int32_t mask);
/* Bit l set for each lane l taking part whose `pred` is nonzero. */
TW_KERNEL_IMPORT(ballot) uint32_t tw_ballot(int32_t pred);
/* 1 when `pred` is nonzero on any (all) lanes taking part, else 0. */
TW_KERNEL_IMPORT(any) int32_t tw_any(int32_t pred);
TW_KERNEL_IMPORT(all) int32_t tw_all(int32_t pred);

/* a * b + c rounded once (CUDA's fmaf and fma); `a * b + c` in C is two
 * roundings and two instructions (the host never fuses them). */
TW_KERNEL_IMPORT(fma_f32) float tw_fma_f32(float a, float b, float c);
TW_KERNEL_IMPORT(fma_f64) double tw_fma_f64(double a, double b, double c);

/* Exports a function under `name`: a kernel for tw_kernel_export(name),
 * or an entry point the host calls (`TW_EXPORT("run") int32_t run(void)`). */
#define TW_EXPORT(name) __attribute__((export_name(name)))

/* ---------------------------------------------------------------------
 * Guest side: imports of `wasi_cuda` (docs/ABI.md, one table per function).
 * ------------------------------------------------------------------- */

/* Error codes (docs/ABI.md, "Error codes"). */
enum {
    TW_SUCCESS = 0,
    TW_EINVAL = 1,
    TW_EFAULT = 2,
    TW_EALIGN = 3,
    TW_EOVERFLOW = 4,
    TW_EBADH = 5,
    TW_ENOMEM = 6,
    TW_ENODEV = 7,
    TW_ENOTSUP = 8,
    TW_EIMAGE = 9,
    TW_ENOENT = 10,
    TW_ELAUNCH = 11,
    TW_ENOTADDR = 12,
    TW_ELIMIT = 13,
    TW_EDRIVER = 14,
    TW_ETRAP = 15,
    TW_EQUOTA = 16,
    TW_EPERM = 17,
    TW_EDEVLOST = 18,
};

/* device_info writes at most this many bytes: the whole record. */
#define TW_DEVICE_INFO_LEN 128
/* The most argument descriptors one launch takes. */
#define TW_MAX_LAUNCH_ARGS 64

/* Argument descriptor tags. */
enum {
    TW_ARG_I32 = 0,        /* a: the value in the low 32 bits */
    TW_ARG_I64 = 1,        /* a: the value */
    TW_ARG_F32 = 2,        /* a: the IEEE bits in the low 32 bits */
    TW_ARG_F64 = 3,        /* a: the IEEE bits */
    TW_ARG_GUEST_PTR = 4,  /* a: guest offset, b: length in bytes (>= 1) */
    TW_ARG_BUFFER_PTR = 5, /* a: buffer handle, b: byte offset */
};

/* One launch argument as `launch` reads it: 24 bytes, 8-aligned. A Wasm
 * kernel takes one of tags 0-3 per parameter, of the parameter's type (a
 * pointer parameter is an i32 guest offset, TW_ARG_I32); a PTX kernel
 * also takes tags 4 and 5 (device addresses). */
typedef struct __attribute__((aligned(8))) tw_arg {
    uint32_t tag;
    /* For TW_ARG_GUEST_PTR the offset's required alignment (0 or a power
     * of two up to 4096); 0 for every other tag. */
    uint32_t align;
    uint64_t a;
    uint64_t b;
} tw_arg;

_Static_assert(sizeof(tw_arg) == 24, "tw_arg is 24 bytes");
_Static_assert(_Alignof(tw_arg) == 8, "tw_arg is 8-aligned");

TW_CUDA_IMPORT(device_count) int32_t tw_device_count(uint32_t *out_count);
/* Writes min(out_len, 128) bytes of the device's record (docs/ABI.md). */
TW_CUDA_IMPORT(device_info) int32_t tw_device_info(int32_t device, void *out, int32_t out_len);

TW_CUDA_IMPORT(buffer_alloc) int32_t tw_buffer_alloc(int64_t size, uint64_t *out_buffer);
TW_CUDA_IMPORT(buffer_free) int32_t tw_buffer_free(uint64_t buffer);
TW_CUDA_IMPORT(buffer_size) int32_t tw_buffer_size(uint64_t buffer, uint64_t *out_size);
TW_CUDA_IMPORT(copy_to_buffer)
int32_t tw_copy_to_buffer(uint64_t dst, int64_t dst_offset, const void *src, int32_t len);
TW_CUDA_IMPORT(copy_from_buffer)
int32_t tw_copy_from_buffer(void *dst, uint64_t src, int64_t src_offset, int32_t len);
TW_CUDA_IMPORT(copy_buffer)
int32_t tw_copy_buffer(uint64_t dst, int64_t dst_offset, uint64_t src, int64_t src_offset,
                       int64_t len);
TW_CUDA_IMPORT(memset_buffer)
int32_t tw_memset_buffer(uint64_t dst, int64_t dst_offset, int32_t value, int64_t len);

/* Raw modules (trusted tenants only: EPERM otherwise). */
TW_CUDA_IMPORT(module_load_ptx)
int32_t tw_module_load_ptx(const char *ptx, int32_t ptx_len, uint64_t *out_module);
TW_CUDA_IMPORT(module_load_cubin)
int32_t tw_module_load_cubin(const void *image, int32_t image_len, uint64_t *out_module);
TW_CUDA_IMPORT(module_unload) int32_t tw_module_unload(uint64_t module);
TW_CUDA_IMPORT(function_get)
int32_t tw_function_get(uint64_t module, const char *name, int32_t name_len,
                        uint64_t *out_function);

/* Wasm kernels: the guest's own function, by index in the function space,
 * by export name, or by function pointer (a slot of table 0). All three
 * name one kernel, made once per host. */
TW_CUDA_IMPORT(kernel_get) int32_t tw_kernel_get(int32_t function_index, uint64_t *out_function);
TW_CUDA_IMPORT(kernel_get_export)
int32_t tw_kernel_get_export(const char *name, int32_t name_len, uint64_t *out_function);
TW_CUDA_IMPORT(kernel_get_table) int32_t tw_kernel_get_table(int32_t slot, uint64_t *out_function);
TW_CUDA_IMPORT(function_release) int32_t tw_function_release(uint64_t function);

/* Queues `function` on the guest's stream and writes a launch handle at
 * once; `wait` (or `sync`) is where the guest blocks. */
TW_CUDA_IMPORT(launch)
int32_t tw_launch(uint64_t function, uint32_t grid_x, uint32_t grid_y, uint32_t grid_z,
                  uint32_t block_x, uint32_t block_y, uint32_t block_z,
                  uint32_t shared_mem_bytes, const tw_arg *args, int32_t args_count,
                  uint64_t *out_launch);
/* A built-in tensor op (docs/tensor-ops.md): a 32-byte header, then
 * 96-byte operands (docs/ABI.md, `tensor_op`). */
TW_CUDA_IMPORT(tensor_op) int32_t tw_tensor_op(const void *desc, int32_t desc_len, uint64_t *out_launch);
/* Waits for one launch and releases its handle: 0, or ELAUNCH, ETRAP (a
 * Wasm kernel trapped: tw_last_error says where), EDEVLOST. */
TW_CUDA_IMPORT(wait) int32_t tw_wait(uint64_t launch);
/* Waits for every launch of the guest and releases their handles. */
TW_CUDA_IMPORT(sync) int32_t tw_sync(void);
/* Managed-memory hints on guest memory: target 0 device, 1 host; advice
 * 0..6 as docs/ABI.md lists. */
TW_CUDA_IMPORT(prefetch) int32_t tw_prefetch(const void *ptr, int32_t len, int32_t target);
TW_CUDA_IMPORT(advise) int32_t tw_advise(const void *ptr, int32_t len, int32_t advice);
/* The text of the guest's last failed call (UTF-8, not NUL-terminated),
 * truncated to buf_len; *out_len gets its full length. */
TW_CUDA_IMPORT(last_error) int32_t tw_last_error(char *buf, int32_t buf_len, uint32_t *out_len);

/* ---------------------------------------------------------------------
 * Helpers.
 * ------------------------------------------------------------------- */

static inline tw_arg tw_arg_i32(int32_t v) {
    return (tw_arg){TW_ARG_I32, 0, (uint32_t)v, 0};
}
static inline tw_arg tw_arg_u32(uint32_t v) {
    return (tw_arg){TW_ARG_I32, 0, v, 0};
}
static inline tw_arg tw_arg_i64(int64_t v) {
    return (tw_arg){TW_ARG_I64, 0, (uint64_t)v, 0};
}
static inline tw_arg tw_arg_f32(float v) {
    union {
        float f;
        uint32_t u;
    } bits = {v};
    return (tw_arg){TW_ARG_F32, 0, bits.u, 0};
}
static inline tw_arg tw_arg_f64(double v) {
    union {
        double f;
        uint64_t u;
    } bits = {v};
    return (tw_arg){TW_ARG_F64, 0, bits.u, 0};
}
/* A Wasm kernel's pointer parameter: the guest offset as an i32. */
static inline tw_arg tw_arg_ptr(const void *p) {
    return (tw_arg){TW_ARG_I32, 0, (uint32_t)(uintptr_t)p, 0};
}
/* A PTX kernel's pointer to `bytes` of guest memory (a device address). */
static inline tw_arg tw_arg_guest(const void *p, uint64_t bytes) {
    return (tw_arg){TW_ARG_GUEST_PTR, 0, (uint32_t)(uintptr_t)p, bytes};
}
/* A PTX kernel's pointer into a device buffer. */
static inline tw_arg tw_arg_buffer(uint64_t buffer, uint64_t offset) {
    return (tw_arg){TW_ARG_BUFFER_PTR, 0, buffer, offset};
}

/* The kernel made of function pointer `f` (a slot of table 0). */
#define tw_kernel_from_fn(f, out_function) \
    tw_kernel_get_table((int32_t)(uintptr_t)(f), (out_function))

/* strlen for the helpers below, without libc. */
static inline int32_t tw_strlen(const char *s) {
    int32_t n = 0;
    while (s[n]) n++;
    return n;
}

/* The kernel made of the guest's export `name` (NUL-terminated). */
static inline int32_t tw_kernel_export(const char *name, uint64_t *out_function) {
    return tw_kernel_get_export(name, tw_strlen(name), out_function);
}

/* `function` in PTX module `module` by NUL-terminated name. */
static inline int32_t tw_function(uint64_t module, const char *name, uint64_t *out_function) {
    return tw_function_get(module, name, tw_strlen(name), out_function);
}

/* Launches and waits: the errno of the launch or of the wait. */
static inline int32_t tw_launch_sync(uint64_t function, uint32_t grid_x, uint32_t grid_y,
                                     uint32_t grid_z, uint32_t block_x, uint32_t block_y,
                                     uint32_t block_z, uint32_t shared_mem_bytes,
                                     const tw_arg *args, int32_t args_count) {
    uint64_t launch = 0;
    int32_t e = tw_launch(function, grid_x, grid_y, grid_z, block_x, block_y, block_z,
                          shared_mem_bytes, args, args_count, &launch);
    return e ? e : tw_wait(launch);
}

/* A 1-D launch of `threads` threads in blocks of `block`, waited for. */
static inline int32_t tw_launch_1d(uint64_t function, uint32_t threads, uint32_t block,
                                   const tw_arg *args, int32_t args_count) {
    return tw_launch_sync(function, (threads + block - 1) / block, 1, 1, block, 1, 1, 0, args,
                          args_count);
}

#define TW_ARGS(...) ((const tw_arg[]){__VA_ARGS__})
#define TW_NARGS(...) ((int32_t)(sizeof((tw_arg[]){__VA_ARGS__}) / sizeof(tw_arg)))

#ifdef __cplusplus
}
#endif

#endif /* TENSORWASM_H */
