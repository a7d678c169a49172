// Built-in reductions, softmax and layer norm of TensorWasm
// (docs/tensor-ops.md). All f32, 256 threads per block.
//
//   tw_reduce_{sum,max,mean}_f32(x, y, outer, n, inner): x is [outer, n, inner],
//     y is [outer, inner]; one block per output (grid outer * inner).
//   tw_softmax_f32(x, y, rows, cols): one block per row (grid rows).
//   tw_layernorm_f32(x, gamma, beta, y, rows, cols, eps): one block per row.
//
// Softmax and layer norm keep a row of up to 8192 columns (4096 when not
// 16-byte aligned) in registers, so
// each element is read from memory once and written once: max, then sum of
// exp(x - max) (softmax); mean, then the corrected two-pass variance over the
// held values (layer norm). Longer rows make three passes over memory (the
// row is then re-read, mostly from L2). 16-byte loads and stores when every
// pointer is 16-byte aligned and cols % 4 == 0, otherwise coalesced 4-byte
// accesses. Reductions (inner > 1) read 32-byte row segments of 8
// neighbouring outputs (see reduce_cols).

#include <stdint.h>

#define TW_DI __device__ __forceinline__

namespace tw_detail {

constexpr int NT = 256;
constexpr int NWARPS = NT / 32;
constexpr int RV = 8;                 // float4 per thread held in registers
constexpr int RS = 2 * RV;            // floats per thread held (scalar path)
constexpr int REG_COLS = NT * 4 * RV; // 8192 (16-byte path)
constexpr int REG_COLS_S = NT * RS;   // 4096 (4-byte path)

TW_DI bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

struct SumOp {
  static TW_DI float id() { return 0.0f; }
  static TW_DI float op(float a, float b) { return a + b; }
};
struct MaxOp {
  static TW_DI float id() { return -__int_as_float(0x7f800000); }
  static TW_DI float op(float a, float b) { return fmaxf(a, b); }
};

template <class Op>
TW_DI float warp_reduce(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = Op::op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Block-wide reduction; every thread gets the result. `sh` holds NWARPS
// floats and is used by one call only (each call site has its own slot), so
// one barrier suffices.
template <class Op>
TW_DI float block_reduce(float v, float* sh) {
  v = warp_reduce<Op>(v);
  if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
  __syncthreads();
  float r = sh[threadIdx.x & (NWARPS - 1)];
#pragma unroll
  for (int o = NWARPS / 2; o > 0; o >>= 1) r = Op::op(r, __shfl_xor_sync(0xffffffffu, r, o));
  return r;
}

// Two sums at once (one barrier); `sh` holds NWARPS float2.
TW_DI float2 block_sum2(float a, float b, float2* sh) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    a += __shfl_xor_sync(0xffffffffu, a, o);
    b += __shfl_xor_sync(0xffffffffu, b, o);
  }
  if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = make_float2(a, b);
  __syncthreads();
  float2 r = sh[threadIdx.x & (NWARPS - 1)];
#pragma unroll
  for (int o = NWARPS / 2; o > 0; o >>= 1) {
    r.x += __shfl_xor_sync(0xffffffffu, r.x, o);
    r.y += __shfl_xor_sync(0xffffffffu, r.y, o);
  }
  return r;
}

template <class Op>
TW_DI float4 op4(float4 a, float4 b) {
  return make_float4(Op::op(a.x, b.x), Op::op(a.y, b.y), Op::op(a.z, b.z), Op::op(a.w, b.w));
}

// Reduce n contiguous floats at p (any 4-byte alignment) over the block.
template <class Op>
TW_DI float reduce_contig(const float* __restrict__ p, int n, float* sh) {
  const int tid = threadIdx.x;
  // Elements before the first 16-byte boundary.
  int head = static_cast<int>(((16 - (reinterpret_cast<uintptr_t>(p) & 15)) & 15) >> 2);
  if (head > n) head = n;
  float acc = Op::id();
  if (tid < head) acc = p[tid];
  const float4* p4 = reinterpret_cast<const float4*>(p + head);
  const int nv = (n - head) >> 2;
  float4 a0 = make_float4(Op::id(), Op::id(), Op::id(), Op::id());
  float4 a1 = a0, a2 = a0, a3 = a0;
  int i = tid;
  for (; i + 3 * NT < nv; i += 4 * NT) {
    const float4 v0 = p4[i], v1 = p4[i + NT], v2 = p4[i + 2 * NT], v3 = p4[i + 3 * NT];
    a0 = op4<Op>(a0, v0);
    a1 = op4<Op>(a1, v1);
    a2 = op4<Op>(a2, v2);
    a3 = op4<Op>(a3, v3);
  }
  for (; i < nv; i += NT) a0 = op4<Op>(a0, p4[i]);
  const int tail0 = head + nv * 4;
  if (tail0 + tid < n) acc = Op::op(acc, p[tail0 + tid]);
  a0 = op4<Op>(op4<Op>(a0, a1), op4<Op>(a2, a3));
  acc = Op::op(acc, Op::op(Op::op(a0.x, a0.y), Op::op(a0.z, a0.w)));
  return block_reduce<Op>(acc, sh);
}

// inner > 1: the reduced elements of one output are `inner` apart, so the
// block of the first column of each group of 8 neighbouring outputs (same
// outer index) reduces the whole group: 8 threads per row cover 32
// contiguous bytes, 32 rows at a time, 8 loads in flight per thread; the
// other 7 blocks of the group exit at once.
template <class Op, bool MEAN>
TW_DI void reduce_cols(const float* __restrict__ x, float* __restrict__ y, int n, int inner) {
  __shared__ float part[NT];
  const unsigned b = blockIdx.x, o = b / static_cast<unsigned>(inner), j = b - o * inner;
  if (j & 7) return;
  const int cols = min(8, inner - static_cast<int>(j));
  const int lc = threadIdx.x & 7, lr = threadIdx.x >> 3;
  float a[8];
#pragma unroll
  for (int u = 0; u < 8; ++u) a[u] = Op::id();
  if (lc < cols) {
    const float* p = x + (long long)o * n * inner + j + lc;
    int i = lr;
    for (; i + 7 * 32 < n; i += 8 * 32) {
      float v[8];
#pragma unroll
      for (int u = 0; u < 8; ++u) v[u] = p[(long long)(i + u * 32) * inner];
#pragma unroll
      for (int u = 0; u < 8; ++u) a[u] = Op::op(a[u], v[u]);
    }
    for (; i < n; i += 32) a[0] = Op::op(a[0], p[(long long)i * inner]);
  }
  part[threadIdx.x] = Op::op(Op::op(Op::op(a[0], a[1]), Op::op(a[2], a[3])),
                             Op::op(Op::op(a[4], a[5]), Op::op(a[6], a[7])));
  __syncthreads();
  if (threadIdx.x < cols) {
    float r = part[threadIdx.x];
    for (int k = 1; k < 32; ++k) r = Op::op(r, part[k * 8 + threadIdx.x]);
    if (MEAN) r /= static_cast<float>(n);
    y[(long long)o * inner + j + threadIdx.x] = r;
  }
}

template <class Op, bool MEAN>
TW_DI void reduce_entry(const float* __restrict__ x, float* __restrict__ y, int outer, int n,
                        int inner) {
  __shared__ float sh[NWARPS];
  if (blockIdx.x >= (long long)outer * inner) return;
  if (inner != 1) {
    reduce_cols<Op, MEAN>(x, y, n, inner);
    return;
  }
  float r = reduce_contig<Op>(x + (long long)blockIdx.x * n, n, sh);
  if (MEAN) r /= static_cast<float>(n);
  if (threadIdx.x == 0) y[blockIdx.x] = r;
}

}  // namespace tw_detail
using namespace tw_detail;  // (a named namespace: nvcc names anonymous ones after the file path)

extern "C" __global__ void __launch_bounds__(256)
tw_reduce_sum_f32(const float* __restrict__ x, float* __restrict__ y, int outer, int n, int inner) {
  reduce_entry<SumOp, false>(x, y, outer, n, inner);
}

extern "C" __global__ void __launch_bounds__(256)
tw_reduce_max_f32(const float* __restrict__ x, float* __restrict__ y, int outer, int n, int inner) {
  reduce_entry<MaxOp, false>(x, y, outer, n, inner);
}

extern "C" __global__ void __launch_bounds__(256)
tw_reduce_mean_f32(const float* __restrict__ x, float* __restrict__ y, int outer, int n, int inner) {
  reduce_entry<SumOp, true>(x, y, outer, n, inner);
}

// ---------------------------------------------------------------------------
// Softmax over the last axis. `sh` has 2 * NWARPS floats: [0, 8) for the
// max, [8, 16) for the sum.

namespace tw_detail {

TW_DI float4 ldcs4(const float* p) { return __ldcs(reinterpret_cast<const float4*>(p)); }
TW_DI float4 ld4(const float* p) { return *reinterpret_cast<const float4*>(p); }
TW_DI void stcs4(float* p, float4 v) { __stcs(reinterpret_cast<float4*>(p), v); }
TW_DI float max4(float4 a) { return fmaxf(fmaxf(a.x, a.y), fmaxf(a.z, a.w)); }
TW_DI float sum4(float4 a) { return (a.x + a.y) + (a.z + a.w); }

// NS float4 per thread (NS = ceil(cols / 1024)): only the last slot can be
// partly outside the row, so small rows carry no work for empty slots.
template <int NS>
TW_DI void softmax_regs_vec(const float* __restrict__ x, float* __restrict__ y, int cols,
                            float* sh) {
  const int tid = threadIdx.x, nv = cols >> 2;
  const float NEG = MaxOp::id();
  const bool last = tid + (NS - 1) * NT < nv;
  float4 v[NS];
#pragma unroll
  for (int u = 0; u < NS; ++u) {
    const int i = tid + u * NT;
    v[u] = (u < NS - 1 || last) ? ldcs4(x + 4 * i) : make_float4(NEG, NEG, NEG, NEG);
  }
  float m = NEG;
#pragma unroll
  for (int u = 0; u < NS; ++u) m = fmaxf(m, max4(v[u]));
  m = block_reduce<MaxOp>(m, sh);
  float s = 0.0f;
#pragma unroll
  for (int u = 0; u < NS; ++u) {
    if (u < NS - 1 || last) {
      v[u].x = expf(v[u].x - m);
      v[u].y = expf(v[u].y - m);
      v[u].z = expf(v[u].z - m);
      v[u].w = expf(v[u].w - m);
      s += sum4(v[u]);
    }
  }
  s = block_reduce<SumOp>(s, sh + NWARPS);
  const float inv = 1.0f / s;
#pragma unroll
  for (int u = 0; u < NS; ++u) {
    const int i = tid + u * NT;
    if (u < NS - 1 || last)
      stcs4(y + 4 * i, make_float4(v[u].x * inv, v[u].y * inv, v[u].z * inv, v[u].w * inv));
  }
}

TW_DI void softmax_regs_scalar(const float* __restrict__ x, float* __restrict__ y, int cols,
                               float* sh) {
  const int tid = threadIdx.x;
  const float NEG = MaxOp::id();
  float v[RS];
#pragma unroll
  for (int u = 0; u < RS; ++u) {
    const int i = tid + u * NT;
    v[u] = i < cols ? __ldcs(x + i) : NEG;
  }
  float m = NEG;
#pragma unroll
  for (int u = 0; u < RS; ++u) m = fmaxf(m, v[u]);
  m = block_reduce<MaxOp>(m, sh);
  float s = 0.0f;
#pragma unroll
  for (int u = 0; u < RS; ++u) {
    if (tid + u * NT < cols) {
      v[u] = expf(v[u] - m);
      s += v[u];
    }
  }
  s = block_reduce<SumOp>(s, sh + NWARPS);
  const float inv = 1.0f / s;
#pragma unroll
  for (int u = 0; u < RS; ++u) {
    const int i = tid + u * NT;
    if (i < cols) __stcs(y + i, v[u] * inv);
  }
}

// Rows longer than REG_COLS: max pass, sum pass, write pass (the re-reads
// mostly hit L2).
TW_DI void softmax_long(const float* __restrict__ x, float* __restrict__ y, int cols, bool vec,
                        float* sh) {
  const int tid = threadIdx.x, nv = cols >> 2;
  float m = MaxOp::id();
  if (vec) {
    for (int i = tid; i < nv; i += NT) m = fmaxf(m, max4(ld4(x + 4 * i)));
  } else {
    for (int i = tid; i < cols; i += NT) m = fmaxf(m, x[i]);
  }
  m = block_reduce<MaxOp>(m, sh);
  float s = 0.0f;
  if (vec) {
    for (int i = tid; i < nv; i += NT) {
      const float4 a = ld4(x + 4 * i);
      s += (expf(a.x - m) + expf(a.y - m)) + (expf(a.z - m) + expf(a.w - m));
    }
  } else {
    for (int i = tid; i < cols; i += NT) s += expf(x[i] - m);
  }
  s = block_reduce<SumOp>(s, sh + NWARPS);
  const float inv = 1.0f / s;
  if (vec) {
    for (int i = tid; i < nv; i += NT) {
      const float4 a = ldcs4(x + 4 * i);
      stcs4(y + 4 * i, make_float4(expf(a.x - m) * inv, expf(a.y - m) * inv,
                                   expf(a.z - m) * inv, expf(a.w - m) * inv));
    }
  } else {
    for (int i = tid; i < cols; i += NT) __stcs(y + i, expf(__ldcs(x + i) - m) * inv);
  }
}

}  // namespace tw_detail
using namespace tw_detail;  // (a named namespace: nvcc names anonymous ones after the file path)

extern "C" __global__ void __launch_bounds__(256, 4)
tw_softmax_f32(const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
  __shared__ float sh[2 * NWARPS];
  const int row = blockIdx.x;
  if (row >= rows || cols <= 0) return;
  const bool vec = (cols & 3) == 0 && aligned16(x) && aligned16(y);
  const long long off = (long long)row * cols;
  x += off;
  y += off;
  if (cols <= (vec ? REG_COLS : REG_COLS_S)) {
    if (vec) {
      switch ((cols + 4 * NT - 1) / (4 * NT)) {
        case 1: softmax_regs_vec<1>(x, y, cols, sh); break;
        case 2: softmax_regs_vec<2>(x, y, cols, sh); break;
        case 3: softmax_regs_vec<3>(x, y, cols, sh); break;
        case 4: softmax_regs_vec<4>(x, y, cols, sh); break;
        case 5: softmax_regs_vec<5>(x, y, cols, sh); break;
        case 6: softmax_regs_vec<6>(x, y, cols, sh); break;
        case 7: softmax_regs_vec<7>(x, y, cols, sh); break;
        default: softmax_regs_vec<8>(x, y, cols, sh); break;
      }
    } else {
      softmax_regs_scalar(x, y, cols, sh);
    }
  } else {
    softmax_long(x, y, cols, vec, sh);
  }
}

// ---------------------------------------------------------------------------
// Layer norm over the last axis: y = (x - mean) / sqrt(var + eps) * gamma + beta,
// biased variance, by the corrected two-pass algorithm: mean0 = sum(x) / n,
// then d = x - mean0, mean = mean0 + sum(d) / n, var = sum(d^2) / n - (sum(d) / n)^2
// (the correction term cancels the rounding error of mean0). `sh` holds
// NWARPS floats and NWARPS float2.

namespace tw_detail {

struct LnStats {
  float mean, rstd;
};

TW_DI LnStats ln_finish(float mean0, float2 s12, int cols, float eps) {
  const float inv_n = 1.0f / static_cast<float>(cols);
  const float c = s12.x * inv_n;
  const float var = fmaxf(fmaf(s12.y, inv_n, -c * c), 0.0f);
  return {mean0 + c, 1.0f / sqrtf(var + eps)};
}

template <int NS>
TW_DI void layernorm_regs_vec(const float* __restrict__ x, const float* __restrict__ gamma,
                              const float* __restrict__ beta, float* __restrict__ y, int cols,
                              float eps, float* sh, float2* sh2) {
  const int tid = threadIdx.x, nv = cols >> 2;
  const bool last = tid + (NS - 1) * NT < nv;
  float4 v[NS];
#pragma unroll
  for (int u = 0; u < NS; ++u) {
    const int i = tid + u * NT;
    v[u] = (u < NS - 1 || last) ? ldcs4(x + 4 * i) : make_float4(0.f, 0.f, 0.f, 0.f);
  }
  float s = 0.0f;
#pragma unroll
  for (int u = 0; u < NS; ++u) s += sum4(v[u]);
  const float mean0 = block_reduce<SumOp>(s, sh) / static_cast<float>(cols);
  float s1 = 0.0f, s2 = 0.0f;
#pragma unroll
  for (int u = 0; u < NS; ++u) {
    if (u < NS - 1 || last) {
      const float dx = v[u].x - mean0, dy = v[u].y - mean0, dz = v[u].z - mean0,
                  dw = v[u].w - mean0;
      s1 += (dx + dy) + (dz + dw);
      s2 += (dx * dx + dy * dy) + (dz * dz + dw * dw);
    }
  }
  const LnStats st = ln_finish(mean0, block_sum2(s1, s2, sh2), cols, eps);
  // (A run-time test on every slot here keeps the compiler from hoisting all
  // gamma / beta loads at once, which would spill at NS = 8.)
#pragma unroll
  for (int u = 0; u < NS; ++u) {
    const int i = tid + u * NT;
    if (i < nv) {
      const float4 g = ld4(gamma + 4 * i);
      const float4 b = ld4(beta + 4 * i);
      stcs4(y + 4 * i, make_float4(fmaf((v[u].x - st.mean) * st.rstd, g.x, b.x),
                                   fmaf((v[u].y - st.mean) * st.rstd, g.y, b.y),
                                   fmaf((v[u].z - st.mean) * st.rstd, g.z, b.z),
                                   fmaf((v[u].w - st.mean) * st.rstd, g.w, b.w)));
    }
  }
}

TW_DI void layernorm_regs_scalar(const float* __restrict__ x, const float* __restrict__ gamma,
                                 const float* __restrict__ beta, float* __restrict__ y, int cols,
                                 float eps, float* sh, float2* sh2) {
  const int tid = threadIdx.x;
  float v[RS];
#pragma unroll
  for (int u = 0; u < RS; ++u) {
    const int i = tid + u * NT;
    v[u] = i < cols ? __ldcs(x + i) : 0.0f;
  }
  float s = 0.0f;
#pragma unroll
  for (int u = 0; u < RS; ++u) s += v[u];
  const float mean0 = block_reduce<SumOp>(s, sh) / static_cast<float>(cols);
  float s1 = 0.0f, s2 = 0.0f;
#pragma unroll
  for (int u = 0; u < RS; ++u) {
    if (tid + u * NT < cols) {
      const float d = v[u] - mean0;
      s1 += d;
      s2 += d * d;
    }
  }
  const LnStats st = ln_finish(mean0, block_sum2(s1, s2, sh2), cols, eps);
#pragma unroll
  for (int u = 0; u < RS; ++u) {
    const int i = tid + u * NT;
    if (i < cols) __stcs(y + i, fmaf((v[u] - st.mean) * st.rstd, gamma[i], beta[i]));
  }
}

// Rows longer than REG_COLS: sum pass, (sum d, sum d^2) pass, write pass.
TW_DI void layernorm_long(const float* __restrict__ x, const float* __restrict__ gamma,
                          const float* __restrict__ beta, float* __restrict__ y, int cols,
                          float eps, bool vec, float* sh, float2* sh2) {
  const int tid = threadIdx.x, nv = cols >> 2;
  float s = 0.0f;
  if (vec) {
    for (int i = tid; i < nv; i += NT) s += sum4(ld4(x + 4 * i));
  } else {
    for (int i = tid; i < cols; i += NT) s += x[i];
  }
  const float mean0 = block_reduce<SumOp>(s, sh) / static_cast<float>(cols);
  float s1 = 0.0f, s2 = 0.0f;
  if (vec) {
    for (int i = tid; i < nv; i += NT) {
      const float4 a = ld4(x + 4 * i);
      const float dx = a.x - mean0, dy = a.y - mean0, dz = a.z - mean0, dw = a.w - mean0;
      s1 += (dx + dy) + (dz + dw);
      s2 += (dx * dx + dy * dy) + (dz * dz + dw * dw);
    }
  } else {
    for (int i = tid; i < cols; i += NT) {
      const float d = x[i] - mean0;
      s1 += d;
      s2 += d * d;
    }
  }
  const LnStats st = ln_finish(mean0, block_sum2(s1, s2, sh2), cols, eps);
  if (vec) {
    for (int i = tid; i < nv; i += NT) {
      const float4 a = ldcs4(x + 4 * i), g = ld4(gamma + 4 * i), b = ld4(beta + 4 * i);
      stcs4(y + 4 * i, make_float4(fmaf((a.x - st.mean) * st.rstd, g.x, b.x),
                                   fmaf((a.y - st.mean) * st.rstd, g.y, b.y),
                                   fmaf((a.z - st.mean) * st.rstd, g.z, b.z),
                                   fmaf((a.w - st.mean) * st.rstd, g.w, b.w)));
    }
  } else {
    for (int i = tid; i < cols; i += NT)
      __stcs(y + i, fmaf((__ldcs(x + i) - st.mean) * st.rstd, gamma[i], beta[i]));
  }
}

}  // namespace tw_detail
using namespace tw_detail;  // (a named namespace: nvcc names anonymous ones after the file path)

extern "C" __global__ void __launch_bounds__(256, 4)
tw_layernorm_f32(const float* __restrict__ x, const float* __restrict__ gamma,
                 const float* __restrict__ beta, float* __restrict__ y, int rows, int cols,
                 float eps) {
  __shared__ float sh[NWARPS];
  __shared__ float2 sh2[NWARPS];
  const int row = blockIdx.x;
  if (row >= rows || cols <= 0) return;
  const bool vec = (cols & 3) == 0 && aligned16(x) && aligned16(y) && aligned16(gamma) &&
                   aligned16(beta);
  const long long off = (long long)row * cols;
  x += off;
  y += off;
  if (cols <= (vec ? REG_COLS : REG_COLS_S)) {
    if (vec) {
      switch ((cols + 4 * NT - 1) / (4 * NT)) {
        case 1: layernorm_regs_vec<1>(x, gamma, beta, y, cols, eps, sh, sh2); break;
        case 2: layernorm_regs_vec<2>(x, gamma, beta, y, cols, eps, sh, sh2); break;
        case 3: layernorm_regs_vec<3>(x, gamma, beta, y, cols, eps, sh, sh2); break;
        case 4: layernorm_regs_vec<4>(x, gamma, beta, y, cols, eps, sh, sh2); break;
        case 5: layernorm_regs_vec<5>(x, gamma, beta, y, cols, eps, sh, sh2); break;
        case 6: layernorm_regs_vec<6>(x, gamma, beta, y, cols, eps, sh, sh2); break;
        case 7: layernorm_regs_vec<7>(x, gamma, beta, y, cols, eps, sh, sh2); break;
        default: layernorm_regs_vec<8>(x, gamma, beta, y, cols, eps, sh, sh2); break;
      }
    } else {
      layernorm_regs_scalar(x, gamma, beta, y, cols, eps, sh, sh2);
    }
  } else {
    layernorm_long(x, gamma, beta, y, cols, eps, vec, sh, sh2);
  }
}
