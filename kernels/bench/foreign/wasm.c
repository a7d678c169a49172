/*
 * The C kernels of kernels.h as a TensorWasm guest module: each an
 * exported function (kernel_get_export's name), threadIdx and friends
 * from guest/c/tensorwasm.h. Built by scripts/build-foreign-kernels.sh
 * with zig cc -O3 for wasm32-wasi; embed/benches/foreign_kernels.rs
 * translates each export as kernel_get does and launches it beside its
 * nvcc twin (twins.cu).
 */
#include "tensorwasm.h"

#define KERNEL(name) TW_EXPORT(#name) void name
/* Wasm's f32.sqrt (IEEE, as CUDA's sqrtf), not a libm call. */
#define sqrtf __builtin_sqrtf

#include "kernels.h"
