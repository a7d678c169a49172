// CUDA C twins of the compute-bound Wasm kernels of
// embed/benches/compute_kernels.wat (issue 15 goal 4): the same loops with
// the same arithmetic, each operation rounded once as Wasm's (`__fmul_rn`
// and `__fadd_rn` are never contracted into an fma; `__fdiv_rn` and
// `__fsqrt_rn` are IEEE's), so both write bit-identical outputs. Built by
// scripts/build-kernels.sh into kernels/bench/compute_twins.ptx
// (nvcc -O3, sm_90); embed/benches/compute_kernels.rs launches it raw.
// Pointers are addresses in the guest's memory, sizes as the Wasm kernels
// take them.

// c[i][j] = sum over k of a[i][k] * b[k][j] (n x n, row-major), one thread
// per output, k in order.
extern "C" __global__ void matmul(const float* a, const float* b, float* c, int n) {
  const unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= static_cast<unsigned>(n) * static_cast<unsigned>(n)) return;
  const unsigned i = t / static_cast<unsigned>(n), j = t % static_cast<unsigned>(n);
  const float* pa = a + i * n;
  const float* pb = b + j;
  float acc = 0.0f;
  for (int k = n; k != 0; --k) {
    acc = __fadd_rn(acc, __fmul_rn(*pa, *pb));
    pa += 1;
    pb += n;
  }
  c[t] = acc;
}

// One step of a 9-point stencil on an n x n grid: the border is copied,
// an inner point is w0 * centre + w1 * (N + S + W + E) + w2 * (NW + NE +
// SW + SE), summed in that order.
extern "C" __global__ void stencil(const float* in, float* out, int n, float w0, float w1,
                                   float w2) {
  const unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= static_cast<unsigned>(n) * static_cast<unsigned>(n)) return;
  const unsigned i = t / static_cast<unsigned>(n), j = t % static_cast<unsigned>(n);
  const float* p = in + t;
  if (i == 0 || j == 0 || i == static_cast<unsigned>(n) - 1 || j == static_cast<unsigned>(n) - 1) {
    out[t] = *p;
    return;
  }
  const float edge = __fadd_rn(__fadd_rn(__fadd_rn(p[-n], p[n]), p[-1]), p[1]);
  const float corner = __fadd_rn(__fadd_rn(__fadd_rn(p[-n - 1], p[-n + 1]), p[n - 1]), p[n + 1]);
  out[t] = __fadd_rn(__fadd_rn(__fmul_rn(w0, *p), __fmul_rn(w1, edge)), __fmul_rn(w2, corner));
}

// One N-body step's accelerations: body i at pos[4 i .. 4 i + 3] = (x, y,
// z, mass) gets acc[4 i .. 4 i + 2] = sum over every j of m_j d / |d|^3,
// d = p_j - p_i softened by eps2, j in order.
extern "C" __global__ void nbody(const float* pos, float* acc, int n, float eps2) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= static_cast<unsigned>(n)) return;
  const float xi = pos[4 * i], yi = pos[4 * i + 1], zi = pos[4 * i + 2];
  float ax = 0.0f, ay = 0.0f, az = 0.0f;
  const float* p = pos;
  for (int k = n; k != 0; --k) {
    const float dx = __fsub_rn(p[0], xi), dy = __fsub_rn(p[1], yi), dz = __fsub_rn(p[2], zi);
    const float r2 = __fadd_rn(
        __fadd_rn(__fadd_rn(__fmul_rn(dx, dx), __fmul_rn(dy, dy)), __fmul_rn(dz, dz)), eps2);
    const float inv = __fdiv_rn(1.0f, __fsqrt_rn(r2));
    const float s = __fmul_rn(__fmul_rn(__fmul_rn(inv, inv), inv), p[3]);
    ax = __fadd_rn(ax, __fmul_rn(dx, s));
    ay = __fadd_rn(ay, __fmul_rn(dy, s));
    az = __fadd_rn(az, __fmul_rn(dz, s));
    p += 4;
  }
  acc[4 * i] = ax;
  acc[4 * i + 1] = ay;
  acc[4 * i + 2] = az;
}
