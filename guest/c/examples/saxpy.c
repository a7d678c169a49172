/*
 * A C guest with its own GPU kernel: `saxpy`, written as CUDA C would
 * write it, made a kernel by the host (kernel_get_export and, by function
 * pointer, kernel_get_table) and launched over arrays in the guest's own
 * memory. `run()` fills the inputs, launches, waits, and checks every
 * element against the same arithmetic on the guest's CPU, bit for bit.
 *
 * Returns 0 when every element matched, i + 1 for the first element i
 * that did not, -errno when a wasi_cuda call failed (tw_last_error has the
 * text).
 *
 * Build: guest/c/build.sh (zig cc -target wasm32-wasi); run:
 *   tensorwasm run --invoke run guest/target/c/saxpy.wasm
 */
#include "../tensorwasm.h"

/* Elements: not a multiple of the block, so the last block's tail
 * threads take the `i < n` branch. */
#define N 100003
#define BLOCK 256

static float x[N], y[N], expected[N];

/* y[i] = a * x[i] + y[i] for i < n: one thread per element. */
TW_EXPORT("saxpy")
void saxpy(float a, const float *x, float *y, uint32_t n) {
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}

/* xorshift32: never 0 from a nonzero seed. */
static uint32_t next(uint32_t *s) {
    uint32_t v = *s;
    v ^= v << 13;
    v ^= v >> 17;
    v ^= v << 5;
    return *s = v;
}

/* Uniform in [-2, 2), never 0: the middle of one of 2^24 steps. */
static float uniform(uint32_t *s) {
    return -2.0f + 4.0f * ((float)(next(s) >> 8) + 0.5f) / 16777216.0f;
}

TW_EXPORT("run")
int32_t run(void) {
    uint32_t seed = 0x2545f491u;
    const float a = 1.5f;
    for (int i = 0; i < N; i++) {
        x[i] = uniform(&seed);
        y[i] = uniform(&seed);
        expected[i] = a * x[i] + y[i];
    }

    /* The same function named two ways is one kernel. */
    uint64_t by_name = 0, by_pointer = 0;
    int32_t e = tw_kernel_export("saxpy", &by_name);
    if (e) return -e;
    e = tw_kernel_from_fn(saxpy, &by_pointer);
    if (e) return -e;

    e = tw_launch_1d(by_name, N, BLOCK,
                     TW_ARGS(tw_arg_f32(a), tw_arg_ptr(x), tw_arg_ptr(y), tw_arg_u32(N)), 4);
    if (e) return -e;
    for (int i = 0; i < N; i++) {
        if (__builtin_memcmp(&y[i], &expected[i], sizeof(float)) != 0) return i + 1;
    }

    /* Again through the pointer's handle: y = a * x + y once more. */
    for (int i = 0; i < N; i++) expected[i] = a * x[i] + y[i];
    e = tw_launch_1d(by_pointer, N, BLOCK,
                     TW_ARGS(tw_arg_f32(a), tw_arg_ptr(x), tw_arg_ptr(y), tw_arg_u32(N)), 4);
    if (e) return -e;
    for (int i = 0; i < N; i++) {
        if (__builtin_memcmp(&y[i], &expected[i], sizeof(float)) != 0) return i + 1;
    }

    e = tw_function_release(by_name);
    if (e) return -e;
    e = tw_function_release(by_pointer);
    return e ? -e : 0;
}
