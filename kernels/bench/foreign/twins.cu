// The CUDA C twins of embed/benches/foreign_kernels.rs's Wasm kernels.
// Built by scripts/build-foreign-kernels.sh with the pinned CUDA 13.0 nvcc
// into twins.ptx (default flags: what the bench times) and
// twins.nofma.ptx (-fmad=false: every operation rounded once, as Wasm
// rounds it, so the outputs match the Wasm kernels' bit for bit).
//
// - kernels.h: the C kernels, one body for both compilers (wasm.c is the
//   Wasm side);
// - below: the twins of the hand-written WAT kernels
//   (embed/benches/foreign_kernels.wat) and of two Rust kernels
//   (guest/examples/kernel-bench: saxpy, gather_regs), the same loops and
//   arithmetic in the same order.

#define KERNEL(name) extern "C" __global__ void name
#include "kernels.h"

// wat_matmul: c = a b (n x n), a thread per output (1-D grid), k counting
// up (the WAT's exit test at the top of its loop).
extern "C" __global__ void wat_matmul(const float *a, const float *b, float *c, int n) {
    unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (unsigned)(n * n)) return;
    int i = t / n, j = t % n;
    float acc = 0.0f;
    for (int k = 0; k < n; k++) {
        acc += a[i * n + k] * b[k * n + j];
    }
    c[t] = acc;
}

// wat_matmul_down: the same product summed with k counting down (the
// WAT's test at the bottom; n >= 1).
extern "C" __global__ void wat_matmul_down(const float *a, const float *b, float *c, int n) {
    unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (unsigned)(n * n)) return;
    int i = t / n, j = t % n;
    float acc = 0.0f;
    for (int k = n - 1; k >= 0; k--) {
        acc += a[i * n + k] * b[k * n + j];
    }
    c[t] = acc;
}

// wat_matmul_up_bottom: wat_matmul's loop with the test at the bottom.
extern "C" __global__ void wat_matmul_up_bottom(const float *a, const float *b, float *c, int n) {
    unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (unsigned)(n * n)) return;
    int i = t / n, j = t % n;
    float acc = 0.0f;
    int k = 0;
    do {
        acc += a[i * n + k] * b[k * n + j];
        k++;
    } while (k < n);
    c[t] = acc;
}

// wat_matmul_down_top: wat_matmul_down's order with the test at the top.
extern "C" __global__ void wat_matmul_down_top(const float *a, const float *b, float *c, int n) {
    unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (unsigned)(n * n)) return;
    int i = t / n, j = t % n;
    float acc = 0.0f;
    for (int k = n; k != 0;) {
        k--;
        acc += a[i * n + k] * b[k * n + j];
    }
    c[t] = acc;
}

// wat_column_sums: out[j] = the sum of column j of x (rows x cols), a
// thread per column; the WAT walks a pointer down the column and counts
// the rows down to 0, its test at the bottom (rows >= 1).
extern "C" __global__ void wat_column_sums(const float *x, float *out, int rows, int cols) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= cols) return;
    float s = 0.0f;
    for (int i = 0; i < rows; i++) {
        s += x[i * cols + j];
    }
    out[j] = s;
}

// guest/examples/kernel-bench's saxpy: y[i] += alpha * x[i] for i < n.
extern "C" __global__ void saxpy(float alpha, const float *x, float *y, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = y[i] + alpha * x[i];
}

// guest/examples/kernel-bench's gather_regs: 64 gathered loads into eight
// accumulators, weighted by (k + rot) % 8 + 1 (n a power of two).
extern "C" __global__ void gather_regs(const float *x, float *out, unsigned n, unsigned rot) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f, a4 = 0.0f, a5 = 0.0f, a6 = 0.0f, a7 = 0.0f;
    for (unsigned j = 0; j < 64; j += 8) {
        a0 += x[(i + j * 4099) & (n - 1)];
        a1 += x[(i + (j + 1) * 4099) & (n - 1)];
        a2 += x[(i + (j + 2) * 4099) & (n - 1)];
        a3 += x[(i + (j + 3) * 4099) & (n - 1)];
        a4 += x[(i + (j + 4) * 4099) & (n - 1)];
        a5 += x[(i + (j + 5) * 4099) & (n - 1)];
        a6 += x[(i + (j + 6) * 4099) & (n - 1)];
        a7 += x[(i + (j + 7) * 4099) & (n - 1)];
    }
    out[i] = a0 * (float)((0 + rot) % 8 + 1) + a1 * (float)((1 + rot) % 8 + 1)
           + a2 * (float)((2 + rot) % 8 + 1) + a3 * (float)((3 + rot) % 8 + 1)
           + a4 * (float)((4 + rot) % 8 + 1) + a5 * (float)((5 + rot) % 8 + 1)
           + a6 * (float)((6 + rot) % 8 + 1) + a7 * (float)((7 + rot) % 8 + 1);
}
