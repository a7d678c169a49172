/*
 * Kernels nobody shaped for TensorWasm's translator: ports of PolyBench/GPU
 * (stencils, convolutions, LU, linear algebra, data mining) written as
 * CUDA C is usually written: one thread per output, 2-D and 3-D grids,
 * `for (int k = 0; k < n; k++)` loops counting up, accumulators kept in
 * memory where the original keeps them there, no fmaf, no restrict.
 *
 * One body, two compilers: twins.cu includes this file as CUDA C
 * (`KERNEL(name)` is `extern "C" __global__ void name`; nvcc to PTX, by
 * scripts/build-foreign-kernels.sh), wasm.c as C for a TensorWasm guest
 * (`KERNEL(name)` an exported function, threadIdx and friends from
 * guest/c/tensorwasm.h; zig cc -O3 to Wasm). With nvcc's -fmad=false both
 * round every operation once, the same way, so the outputs agree bit for
 * bit (embed/benches/foreign_kernels.rs checks it). Sizes and pointers
 * are parameters; the bench launches each with the twin's grid.
 */

/* ---- 2-D stencils --------------------------------------------------- */

/* FDTD-2D (PolyBench fdtd-2d), step 1 of 3: ey from hz; row 0 from the
 * source fict[t]. ex is nx x (ny + 1), ey (nx + 1) x ny, hz nx x ny. */
KERNEL(fdtd_step1)(float *fict, float *ex, float *ey, float *hz, int t, int nx, int ny) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if ((i < nx) && (j < ny)) {
        if (i == 0) {
            ey[i * ny + j] = fict[t];
        } else {
            ey[i * ny + j] = ey[i * ny + j] - 0.5f * (hz[i * ny + j] - hz[(i - 1) * ny + j]);
        }
    }
}

/* FDTD-2D step 2: ex from hz. */
KERNEL(fdtd_step2)(float *ex, float *ey, float *hz, int nx, int ny) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if ((i < nx) && (j < ny) && (j > 0)) {
        ex[i * (ny + 1) + j] = ex[i * (ny + 1) + j] - 0.5f * (hz[i * ny + j] - hz[i * ny + (j - 1)]);
    }
}

/* FDTD-2D step 3: hz from ex and ey. */
KERNEL(fdtd_step3)(float *ex, float *ey, float *hz, int nx, int ny) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if ((i < nx) && (j < ny)) {
        hz[i * ny + j] = hz[i * ny + j] - 0.7f * (ex[i * (ny + 1) + (j + 1)] - ex[i * (ny + 1) + j]
                                                  + ey[(i + 1) * ny + j] - ey[i * ny + j]);
    }
}

/* Jacobi-2D (PolyBench jacobi-2d), the 5-point average into b ... */
KERNEL(jacobi2d_step)(float *a, float *b, int n) {
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if ((i >= 1) && (i < (n - 1)) && (j >= 1) && (j < (n - 1))) {
        b[i * n + j] = 0.2f * (a[i * n + j] + a[i * n + (j - 1)] + a[i * n + (1 + j)]
                               + a[(1 + i) * n + j] + a[(i - 1) * n + j]);
    }
}

/* ... and b copied back into a. */
KERNEL(jacobi2d_copy)(float *a, float *b, int n) {
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if ((i >= 1) && (i < (n - 1)) && (j >= 1) && (j < (n - 1))) {
        a[i * n + j] = b[i * n + j];
    }
}

/* ---- a 3-D stencil on a 3-D grid ------------------------------------ */

/* Heat-3D (PolyBench heat-3d): one explicit step of the 7-point heat
 * equation on an n^3 grid, a -> b; x runs along k, y along j, z along i. */
KERNEL(heat3d)(float *a, float *b, int n) {
    int k = blockIdx.x * blockDim.x + threadIdx.x;
    int j = blockIdx.y * blockDim.y + threadIdx.y;
    int i = blockIdx.z * blockDim.z + threadIdx.z;
    if (i >= 1 && i < n - 1 && j >= 1 && j < n - 1 && k >= 1 && k < n - 1) {
        int c = (i * n + j) * n + k;
        b[c] = 0.125f * (a[c + n * n] - 2.0f * a[c] + a[c - n * n])
             + 0.125f * (a[c + n] - 2.0f * a[c] + a[c - n])
             + 0.125f * (a[c + 1] - 2.0f * a[c] + a[c - 1])
             + a[c];
    }
}

/* ---- convolutions --------------------------------------------------- */

/* 2DCONV (PolyBench/GPU): a 3 x 3 filter over ni x nj, borders left. */
KERNEL(conv2d)(float *A, float *B, int ni, int nj) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    float c11 = +0.2f, c21 = +0.5f, c31 = -0.8f;
    float c12 = -0.3f, c22 = +0.6f, c32 = -0.9f;
    float c13 = +0.4f, c23 = +0.7f, c33 = +0.10f;
    if ((i < ni - 1) && (j < nj - 1) && (i > 0) && (j > 0)) {
        B[i * nj + j] = c11 * A[(i - 1) * nj + (j - 1)] + c21 * A[(i - 1) * nj + (j + 0)]
                      + c31 * A[(i - 1) * nj + (j + 1)] + c12 * A[(i + 0) * nj + (j - 1)]
                      + c22 * A[(i + 0) * nj + (j + 0)] + c32 * A[(i + 0) * nj + (j + 1)]
                      + c13 * A[(i + 1) * nj + (j - 1)] + c23 * A[(i + 1) * nj + (j + 0)]
                      + c33 * A[(i + 1) * nj + (j + 1)];
    }
}

/* 3DCONV (PolyBench/GPU): a 3 x 3 x 3 filter's taps as the original
 * writes them, one launch per plane i over a 2-D grid of (k, j). */
KERNEL(conv3d)(float *A, float *B, int ni, int nj, int nk, int i) {
    int k = blockIdx.x * blockDim.x + threadIdx.x;
    int j = blockIdx.y * blockDim.y + threadIdx.y;
    float c11 = +2, c21 = +5, c31 = -8;
    float c12 = -3, c22 = +6, c32 = -9;
    float c13 = +4, c23 = +7, c33 = +10;
    if ((i < (ni - 1)) && (j < (nj - 1)) && (k < (nk - 1)) && (i > 0) && (j > 0) && (k > 0)) {
        B[i * (nk * nj) + j * nk + k] =
              c11 * A[(i - 1) * (nk * nj) + (j - 1) * nk + (k - 1)]
            + c13 * A[(i + 1) * (nk * nj) + (j - 1) * nk + (k - 1)]
            + c21 * A[(i - 1) * (nk * nj) + (j - 1) * nk + (k - 1)]
            + c23 * A[(i + 1) * (nk * nj) + (j - 1) * nk + (k - 1)]
            + c31 * A[(i - 1) * (nk * nj) + (j - 1) * nk + (k - 1)]
            + c33 * A[(i + 1) * (nk * nj) + (j - 1) * nk + (k - 1)]
            + c12 * A[(i + 0) * (nk * nj) + (j - 1) * nk + (k + 0)]
            + c22 * A[(i + 0) * (nk * nj) + (j + 0) * nk + (k + 0)]
            + c32 * A[(i + 0) * (nk * nj) + (j + 1) * nk + (k + 0)]
            + c11 * A[(i - 1) * (nk * nj) + (j - 1) * nk + (k + 1)]
            + c13 * A[(i + 1) * (nk * nj) + (j - 1) * nk + (k + 1)]
            + c21 * A[(i - 1) * (nk * nj) + (j + 0) * nk + (k + 1)]
            + c23 * A[(i + 1) * (nk * nj) + (j + 0) * nk + (k + 1)]
            + c31 * A[(i - 1) * (nk * nj) + (j + 1) * nk + (k + 1)]
            + c33 * A[(i + 1) * (nk * nj) + (j + 1) * nk + (k + 1)];
    }
}

/* ---- linear algebra ------------------------------------------------- */

/* LU (PolyBench/GPU lu), step k of n, in place: row k scaled by the
 * pivot ... */
KERNEL(lu_scale)(float *A, int k, int n) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if ((j > k) && (j < n)) {
        A[k * n + j] = A[k * n + j] / A[k * n + k];
    }
}

/* ... then the trailing submatrix updated, one thread per element. */
KERNEL(lu_update)(float *A, int k, int n) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if ((i > k) && (j > k) && (i < n) && (j < n)) {
        A[i * n + j] = A[i * n + j] - A[i * n + k] * A[k * n + j];
    }
}

/* X = L^-1 B for a lower-triangular n x n L and m right-hand sides (the
 * columns of B, n x m): one thread per column, forward substitution. */
KERNEL(trisolve)(float *L, float *B, float *X, int n, int m) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j < m) {
        for (int i = 0; i < n; i++) {
            float s = B[i * m + j];
            for (int k = 0; k < i; k++) {
                s -= L[i * n + k] * X[k * m + j];
            }
            X[i * m + j] = s / L[i * n + i];
        }
    }
}

/* ATAX (PolyBench/GPU atax), y = A^T (A x): tmp = A x, a thread per row
 * (strided reads of A) ... */
KERNEL(atax_ax)(float *A, float *x, float *tmp, int nx, int ny) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < nx) {
        tmp[i] = 0;
        for (int j = 0; j < ny; j++) {
            tmp[i] += A[i * ny + j] * x[j];
        }
    }
}

/* ... then y = A^T tmp, a thread per column (coalesced reads). */
KERNEL(atax_aty)(float *A, float *y, float *tmp, int nx, int ny) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j < ny) {
        y[j] = 0;
        for (int i = 0; i < nx; i++) {
            y[j] += A[i * ny + j] * tmp[i];
        }
    }
}

/* GEMM (PolyBench/GPU gemm), C = alpha A B + beta C, the naive kernel:
 * one thread per element of C, accumulating in C itself. */
KERNEL(gemm)(int ni, int nj, int nk, float alpha, float beta, float *a, float *b, float *c) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if ((i < ni) && (j < nj)) {
        c[i * nj + j] *= beta;
        for (int k = 0; k < nk; k++) {
            c[i * nj + j] += alpha * a[i * nk + k] * b[k * nj + j];
        }
    }
}

/* ---- data mining ---------------------------------------------------- */

/* Column means of data (n rows of m), for covariance and correlation. */
KERNEL(column_mean)(float *mean, float *data, float float_n, int m, int n) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j < m) {
        mean[j] = 0.0f;
        for (int i = 0; i < n; i++) {
            mean[j] += data[i * m + j];
        }
        mean[j] /= float_n;
    }
}

/* Covariance (PolyBench/GPU covariance): data centred ... */
KERNEL(covar_center)(float *mean, float *data, int m, int n) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if ((i < n) && (j < m)) {
        data[i * m + j] -= mean[j];
    }
}

/* ... then the symmetric m x m covariance, a thread per column j1. */
KERNEL(covar_matrix)(float *symmat, float *data, int m, int n) {
    int j1 = blockIdx.x * blockDim.x + threadIdx.x;
    if (j1 < m) {
        for (int j2 = j1; j2 < m; j2++) {
            symmat[j1 * m + j2] = 0.0f;
            for (int i = 0; i < n; i++) {
                symmat[j1 * m + j2] += data[i * m + j1] * data[i * m + j2];
            }
            symmat[j2 * m + j1] = symmat[j1 * m + j2];
        }
    }
}

/* Correlation (PolyBench/GPU correlation): column standard deviations ... */
KERNEL(corr_std)(float *mean, float *std, float *data, float float_n, float eps, int m, int n) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j < m) {
        std[j] = 0.0f;
        for (int i = 0; i < n; i++) {
            std[j] += (data[i * m + j] - mean[j]) * (data[i * m + j] - mean[j]);
        }
        std[j] /= float_n;
        std[j] = sqrtf(std[j]);
        if (std[j] <= eps) {
            std[j] = 1.0f;
        }
    }
}

/* ... data centred and scaled ... */
KERNEL(corr_center)(float *mean, float *std, float *data, float float_n, int m, int n) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if ((i < n) && (j < m)) {
        data[i * m + j] -= mean[j];
        data[i * m + j] /= (sqrtf(float_n) * std[j]);
    }
}

/* ... then the symmetric correlation matrix, a thread per column j1. */
KERNEL(corr_matrix)(float *symmat, float *data, int m, int n) {
    int j1 = blockIdx.x * blockDim.x + threadIdx.x;
    if (j1 < m) {
        symmat[j1 * m + j1] = 1.0f;
        for (int j2 = j1 + 1; j2 < m; j2++) {
            symmat[j1 * m + j2] = 0.0f;
            for (int i = 0; i < n; i++) {
                symmat[j1 * m + j2] += data[i * m + j1] * data[i * m + j2];
            }
            symmat[j2 * m + j1] = symmat[j1 * m + j2];
        }
    }
}

/* ---- more of PolyBench/GPU: matrix-vector, matrix-matrix, solvers ---- */

/* BICG (PolyBench/GPU bicg): q = A p, a thread per row ... */
KERNEL(bicg_q)(float *A, float *p, float *q, int nx, int ny) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < nx) {
        q[i] = 0.0f;
        for (int j = 0; j < ny; j++) {
            q[i] += A[i * ny + j] * p[j];
        }
    }
}

/* ... and s = A^T r, a thread per column. */
KERNEL(bicg_s)(float *A, float *r, float *s, int nx, int ny) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j < ny) {
        s[j] = 0.0f;
        for (int i = 0; i < nx; i++) {
            s[j] += r[i] * A[i * ny + j];
        }
    }
}

/* MVT (PolyBench/GPU mvt): x1 += A y1 (rows) ... */
KERNEL(mvt_x1)(float *a, float *x1, float *y1, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        for (int j = 0; j < n; j++) {
            x1[i] += a[i * n + j] * y1[j];
        }
    }
}

/* ... and x2 += A^T y2 (columns). */
KERNEL(mvt_x2)(float *a, float *x2, float *y2, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        for (int j = 0; j < n; j++) {
            x2[i] += a[j * n + i] * y2[j];
        }
    }
}

/* GESUMMV (PolyBench/GPU gesummv): y = alpha A x + beta B x, both
 * products in one loop, accumulators in memory. */
KERNEL(gesummv)(float *a, float *b, float *x, float *y, float *tmp, float alpha, float beta, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        for (int j = 0; j < n; j++) {
            tmp[i] += a[i * n + j] * x[j];
            y[i] += b[i * n + j] * x[j];
        }
        y[i] = alpha * tmp[i] + beta * y[i];
    }
}

/* 2MM (PolyBench/GPU 2mm): tmp = alpha A B ... */
KERNEL(mm2_first)(float *tmp, float *A, float *B, float alpha, int ni, int nj, int nk) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if ((i < ni) && (j < nj)) {
        tmp[i * nj + j] = 0.0f;
        for (int k = 0; k < nk; k++) {
            tmp[i * nj + j] += alpha * A[i * nk + k] * B[k * nj + j];
        }
    }
}

/* ... then D = tmp C + beta D. */
KERNEL(mm2_second)(float *tmp, float *C, float *D, float beta, int ni, int nl, int nj) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if ((i < ni) && (j < nl)) {
        D[i * nl + j] *= beta;
        for (int k = 0; k < nj; k++) {
            D[i * nl + j] += tmp[i * nj + k] * C[k * nl + j];
        }
    }
}

/* 3MM (PolyBench/GPU 3mm): E = A B, F = C D, G = E F, one kernel
 * launched three times; the sum in a register. */
KERNEL(mm3)(float *A, float *B, float *C, int ni, int nj, int nk) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if ((i < ni) && (j < nj)) {
        float sum = 0.0f;
        for (int k = 0; k < nk; k++) {
            sum += A[i * nk + k] * B[k * nj + j];
        }
        C[i * nj + j] = sum;
    }
}

/* SYRK (PolyBench/GPU syrk): C = alpha A A^T + beta C, A n x m. */
KERNEL(syrk)(float *a, float *c, float alpha, float beta, int n, int m) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if ((i < n) && (j < n)) {
        c[i * n + j] *= beta;
        for (int k = 0; k < m; k++) {
            c[i * n + j] += alpha * a[i * m + k] * a[j * m + k];
        }
    }
}

/* SYR2K (PolyBench/GPU syr2k): C = alpha A B^T + alpha B A^T + beta C. */
KERNEL(syr2k)(float *a, float *b, float *c, float alpha, float beta, int n, int m) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if ((i < n) && (j < n)) {
        c[i * n + j] *= beta;
        for (int k = 0; k < m; k++) {
            c[i * n + j] += alpha * a[i * m + k] * b[j * m + k]
                          + alpha * b[i * m + k] * a[j * m + k];
        }
    }
}

/* Gram-Schmidt (PolyBench/GPU gramschmidt), column k of n (A is m x n):
 * its norm, by one thread ... */
KERNEL(gs_norm)(float *a, float *r, int k, int m, int n) {
    int tid = blockIdx.x * blockDim.x + threadIdx.x;
    if (tid == 0) {
        float nrm = 0.0f;
        for (int i = 0; i < m; i++) {
            nrm += a[i * n + k] * a[i * n + k];
        }
        r[k * n + k] = sqrtf(nrm);
    }
}

/* ... q_k = a_k / r_kk ... */
KERNEL(gs_normalize)(float *a, float *r, float *q, int k, int m, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < m) {
        q[i * n + k] = a[i * n + k] / r[k * n + k];
    }
}

/* ... and every later column j made orthogonal to q_k. */
KERNEL(gs_update)(float *a, float *r, float *q, int k, int m, int n) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if ((j > k) && (j < n)) {
        r[k * n + j] = 0.0f;
        for (int i = 0; i < m; i++) {
            r[k * n + j] += q[i * n + k] * a[i * n + j];
        }
        for (int i = 0; i < m; i++) {
            a[i * n + j] -= q[i * n + k] * r[k * n + j];
        }
    }
}

/* DOITGEN (PolyBench/GPU doitgen), slice r of A (nr x nq x np):
 * sum[r][q][p] = sum over s of A[r][q][s] * C4[s][p] ... */
KERNEL(doitgen_sum)(float *sum, float *A, float *C4, int r, int nq, int np) {
    int p = blockIdx.x * blockDim.x + threadIdx.x;
    int q = blockIdx.y * blockDim.y + threadIdx.y;
    if ((p < np) && (q < nq)) {
        sum[r * (nq * np) + q * np + p] = 0.0f;
        for (int s = 0; s < np; s++) {
            sum[r * (nq * np) + q * np + p] += A[r * (nq * np) + q * np + s] * C4[s * np + p];
        }
    }
}

/* ... then copied back into A. */
KERNEL(doitgen_copy)(float *sum, float *A, int r, int nq, int np) {
    int p = blockIdx.x * blockDim.x + threadIdx.x;
    int q = blockIdx.y * blockDim.y + threadIdx.y;
    if ((p < np) && (q < nq)) {
        A[r * (nq * np) + q * np + p] = sum[r * (nq * np) + q * np + p];
    }
}

/* Jacobi-1D (PolyBench/GPU jacobi1d): the 3-point average into b ... */
KERNEL(jacobi1d_step)(float *a, float *b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if ((i > 1) && (i < (n - 1))) {
        b[i] = 0.33333f * (a[i - 1] + a[i] + a[i + 1]);
    }
}

/* ... and b copied back into a. */
KERNEL(jacobi1d_copy)(float *a, float *b, int n) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if ((j > 1) && (j < (n - 1))) {
        a[j] = b[j];
    }
}
