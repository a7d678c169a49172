// Built-in reductions, softmax and layer norm of TensorWasm
// (docs/tensor-ops.md). All f32. Every entry is correct for every size; the
// table (kernels/src/table.rs) launches the one whose shape suits the op.
//
// Reductions of x [outer, n, inner] over n into y [outer, inner]:
//   tw_reduce_{sum,max,mean}_f32: 256 threads, a block per output (grid
//     outer * inner); the table's choice for inner == 1 (contiguous rows).
//   tw_reduce_{sum,max,mean}_cols_f32: block (32, 32), a block per strip of
//     32 neighbouring outputs of one outer index (grid outer * ceil(inner /
//     32)); the table's choice for inner > 1. A warp reads 32 neighbouring
//     columns of a row (128 contiguous bytes), the 32 warps take every 32nd
//     row with 16 loads in flight per thread, and the 32 partial results of
//     a column meet in shared memory in a fixed order (deterministic).
// Softmax and layer norm over the last axis, by row length:
//   tw_{softmax,layernorm}_rows_f32: 256 threads, a warp per row, 8 rows per
//     block (grid ceil(rows / 8)); the table's choice for cols <= 1024.
//   tw_{softmax,layernorm}_f32: 256 threads, a block per row (grid rows);
//     for 1024 < cols <= 8192.
//   tw_{softmax,layernorm}_wide_f32: 512 threads, a block per row (grid
//     rows); for longer rows.
// A row of up to HELD = 32 floats per thread (1024, 8192 and 16384 columns)
// is held in registers, so each element is read from memory once and written
// once: max, then sum of exp(x - max) (softmax); mean, then the corrected
// two-pass variance over the held values (layer norm). Longer rows make
// three passes over memory (the re-reads mostly hit L2). 16-byte loads and
// stores when every pointer is 16-byte aligned and cols % 4 == 0, otherwise
// coalesced 4-byte accesses.

#include <stdint.h>

#define TW_DI __device__ __forceinline__

namespace tw_detail {

constexpr int NT = 256;          // threads of the 256-thread entries
constexpr int NT_WIDE = 512;     // threads of the _wide entries
constexpr int HELD = 32;         // floats per thread a row kernel holds
constexpr int STRIP = 32;        // columns per block of the _cols reductions
constexpr int STRIP_ROWS = 32;   // warps per block there, each every 32nd row
constexpr int STRIP_LOADS = 16;  // loads in flight per thread there (the fold below)

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

// Reduction over a block of T threads (a power of two, 64..1024); every
// thread gets the result. `sh` holds T / 32 floats and is used by one call
// only (each call site has its own slot), so one barrier suffices.
template <class Op, int T>
TW_DI float block_reduce(float v, float* sh) {
  constexpr int W = T / 32;
  v = warp_reduce<Op>(v);
  if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
  __syncthreads();
  float r = sh[threadIdx.x & (W - 1)];
#pragma unroll
  for (int o = W / 2; o > 0; o >>= 1) r = Op::op(r, __shfl_xor_sync(0xffffffffu, r, o));
  return r;
}

// Two sums at once (one barrier); `sh` holds T / 32 float2.
template <int T>
TW_DI float2 block_sum2(float a, float b, float2* sh) {
  constexpr int W = T / 32;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    a += __shfl_xor_sync(0xffffffffu, a, o);
    b += __shfl_xor_sync(0xffffffffu, b, o);
  }
  if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = make_float2(a, b);
  __syncthreads();
  float2 r = sh[threadIdx.x & (W - 1)];
#pragma unroll
  for (int o = W / 2; o > 0; o >>= 1) {
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
  return block_reduce<Op, NT>(acc, sh);
}

// One output whose n elements are `inner` apart. Correct, not fast: the
// table sends inner > 1 to the _cols entries.
template <class Op>
TW_DI float reduce_strided(const float* __restrict__ p, int n, int inner, float* sh) {
  float acc = Op::id();
  for (int i = threadIdx.x; i < n; i += NT) acc = Op::op(acc, p[(long long)i * inner]);
  return block_reduce<Op, NT>(acc, sh);
}

template <class Op, bool MEAN>
TW_DI void reduce_output(const float* __restrict__ x, float* __restrict__ y, int outer, int n,
                         int inner) {
  __shared__ float sh[NT / 32];
  const long long b = blockIdx.x;
  if (b >= (long long)outer * inner) return;
  const long long o = b / inner, j = b - o * inner;
  const float* p = x + o * n * inner + j;
  float r = inner == 1 ? reduce_contig<Op>(p, n, sh) : reduce_strided<Op>(p, n, inner, sh);
  if (MEAN) r /= static_cast<float>(n);
  if (threadIdx.x == 0) y[b] = r;
}

// Block (32, 32): the strip of columns [32 s, 32 s + 32) of outer index o.
// Thread (c, g) reduces column 32 s + c over rows g, g + 32, ... into 16
// partial results (one per load in flight), folds them, and warp 0 combines
// the 32 row groups' results of its column in order.
template <class Op, bool MEAN>
TW_DI void reduce_strip(const float* __restrict__ x, float* __restrict__ y, int outer, int n,
                        int inner) {
  __shared__ float part[STRIP_ROWS][STRIP];
  const long long strips = (static_cast<long long>(inner) + STRIP - 1) / STRIP;
  const long long b = blockIdx.x;
  if (b >= (long long)outer * strips) return;
  const long long o = b / strips;
  const long long j = (b - o * strips) * STRIP + threadIdx.x;
  float a[STRIP_LOADS];
#pragma unroll
  for (int u = 0; u < STRIP_LOADS; ++u) a[u] = Op::id();
  if (j < inner) {
    const long long step = (long long)STRIP_ROWS * inner;
    const float* p = x + (o * n + threadIdx.y) * inner + j;
    // (unsigned: i + 512 stays below 2^32 for any int n)
    const unsigned un = static_cast<unsigned>(n);
    unsigned i = threadIdx.y;
    for (; i + (STRIP_LOADS - 1) * STRIP_ROWS < un;
         i += STRIP_LOADS * STRIP_ROWS, p += STRIP_LOADS * step) {
      float v[STRIP_LOADS];
#pragma unroll
      for (int u = 0; u < STRIP_LOADS; ++u) v[u] = p[u * step];
#pragma unroll
      for (int u = 0; u < STRIP_LOADS; ++u) a[u] = Op::op(a[u], v[u]);
    }
    for (; i < un; i += STRIP_ROWS, p += step) a[0] = Op::op(a[0], *p);
  }
#pragma unroll
  for (int u = 0; u < 8; ++u) a[u] = Op::op(a[u], a[u + 8]);
#pragma unroll
  for (int u = 0; u < 4; ++u) a[u] = Op::op(a[u], a[u + 4]);
  part[threadIdx.y][threadIdx.x] = Op::op(Op::op(a[0], a[2]), Op::op(a[1], a[3]));
  __syncthreads();
  if (threadIdx.y == 0 && j < inner) {
    float r = part[0][threadIdx.x];
#pragma unroll 8
    for (int k = 1; k < STRIP_ROWS; ++k) r = Op::op(r, part[k][threadIdx.x]);
    if (MEAN) r /= static_cast<float>(n);
    y[o * inner + j] = r;
  }
}

}  // namespace tw_detail
using namespace tw_detail;  // (a named namespace: nvcc names anonymous ones after the file path)

extern "C" __global__ void __launch_bounds__(256)
tw_reduce_sum_f32(const float* __restrict__ x, float* __restrict__ y, int outer, int n, int inner) {
  reduce_output<SumOp, false>(x, y, outer, n, inner);
}

extern "C" __global__ void __launch_bounds__(256)
tw_reduce_max_f32(const float* __restrict__ x, float* __restrict__ y, int outer, int n, int inner) {
  reduce_output<MaxOp, false>(x, y, outer, n, inner);
}

extern "C" __global__ void __launch_bounds__(256)
tw_reduce_mean_f32(const float* __restrict__ x, float* __restrict__ y, int outer, int n, int inner) {
  reduce_output<SumOp, true>(x, y, outer, n, inner);
}

extern "C" __global__ void __launch_bounds__(1024, 1)
tw_reduce_sum_cols_f32(const float* __restrict__ x, float* __restrict__ y, int outer, int n,
                       int inner) {
  reduce_strip<SumOp, false>(x, y, outer, n, inner);
}

extern "C" __global__ void __launch_bounds__(1024, 1)
tw_reduce_max_cols_f32(const float* __restrict__ x, float* __restrict__ y, int outer, int n,
                       int inner) {
  reduce_strip<MaxOp, false>(x, y, outer, n, inner);
}

extern "C" __global__ void __launch_bounds__(1024, 1)
tw_reduce_mean_cols_f32(const float* __restrict__ x, float* __restrict__ y, int outer, int n,
                        int inner) {
  reduce_strip<SumOp, true>(x, y, outer, n, inner);
}

// ---------------------------------------------------------------------------
// The threads that own one row: a whole block of T threads, or one warp.
// `reduce<Op>(v, slot)` and `sum2` give every thread of the row the result;
// a block's slots 0 and 1 are separate shared words, so each is one barrier.

namespace tw_detail {

template <int T>
struct BlockRow {
  static constexpr int size = T;
  float* sh;     // 2 * T / 32 floats
  float2* sh2;   // T / 32 float2 (layer norm)
  TW_DI int rank() const { return threadIdx.x; }
  template <class Op>
  TW_DI float reduce(float v, int slot) const {
    return block_reduce<Op, T>(v, sh + slot * (T / 32));
  }
  TW_DI float2 sum2(float a, float b) const { return block_sum2<T>(a, b, sh2); }
};

struct WarpRow {
  static constexpr int size = 32;
  TW_DI int rank() const { return threadIdx.x & 31; }
  template <class Op>
  TW_DI float reduce(float v, int) const {
    return warp_reduce<Op>(v);
  }
  TW_DI float2 sum2(float a, float b) const {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      a += __shfl_xor_sync(0xffffffffu, a, o);
      b += __shfl_xor_sync(0xffffffffu, b, o);
    }
    return make_float2(a, b);
  }
};

TW_DI float4 ldcs4(const float* p) { return __ldcs(reinterpret_cast<const float4*>(p)); }
TW_DI float4 ld4(const float* p) { return *reinterpret_cast<const float4*>(p); }
TW_DI void stcs4(float* p, float4 v) { __stcs(reinterpret_cast<float4*>(p), v); }
TW_DI float max4(float4 a) { return fmaxf(fmaxf(a.x, a.y), fmaxf(a.z, a.w)); }
TW_DI float sum4(float4 a) { return (a.x + a.y) + (a.z + a.w); }

// Floats per thread of a row of `cols` (>= 1) over `size` threads.
TW_DI int per_thread(int cols, int size) { return (cols - 1) / size + 1; }

// ---------------------------------------------------------------------------
// Softmax over the last axis.

// The row held in NS float4 per thread: slot u of thread t is float4
// t + u * size of the row (slots past the row's end hold nothing).
template <int NS, class G>
TW_DI void softmax_vec(const G& g, const float* __restrict__ x, float* __restrict__ y, int cols) {
  const int t = g.rank(), nv = cols >> 2;
  const float NEG = MaxOp::id();
  float4 v[NS];
#pragma unroll
  for (int u = 0; u < NS; ++u) {
    const int i = t + u * G::size;
    v[u] = i < nv ? ldcs4(x + 4 * i) : make_float4(NEG, NEG, NEG, NEG);
  }
  float m = NEG;
#pragma unroll
  for (int u = 0; u < NS; ++u) m = fmaxf(m, max4(v[u]));
  m = g.template reduce<MaxOp>(m, 0);
  float s = 0.0f;
#pragma unroll
  for (int u = 0; u < NS; ++u) {
    if (t + u * G::size < nv) {
      v[u].x = expf(v[u].x - m);
      v[u].y = expf(v[u].y - m);
      v[u].z = expf(v[u].z - m);
      v[u].w = expf(v[u].w - m);
      s += sum4(v[u]);
    }
  }
  s = g.template reduce<SumOp>(s, 1);
  const float inv = 1.0f / s;
#pragma unroll
  for (int u = 0; u < NS; ++u) {
    const int i = t + u * G::size;
    if (i < nv)
      stcs4(y + 4 * i, make_float4(v[u].x * inv, v[u].y * inv, v[u].z * inv, v[u].w * inv));
  }
}

// The row held in NS floats per thread: slot u of thread t is element
// t + u * size.
template <int NS, class G>
TW_DI void softmax_scalar(const G& g, const float* __restrict__ x, float* __restrict__ y,
                          int cols) {
  const int t = g.rank(), lim = cols - t;
  const float NEG = MaxOp::id();
  float v[NS];
#pragma unroll
  for (int u = 0; u < NS; ++u) {
    const int i = t + u * G::size;
    v[u] = u * G::size < lim ? __ldcs(x + i) : NEG;
  }
  float m = NEG;
#pragma unroll
  for (int u = 0; u < NS; ++u) m = fmaxf(m, v[u]);
  m = g.template reduce<MaxOp>(m, 0);
  float s = 0.0f;
#pragma unroll
  for (int u = 0; u < NS; ++u) {
    v[u] = expf(v[u] - m);  // (0 for the slots past the row: -inf - m)
    s += v[u];
  }
  s = g.template reduce<SumOp>(s, 1);
  const float inv = 1.0f / s;
#pragma unroll
  for (int u = 0; u < NS; ++u) {
    const int i = t + u * G::size;
    if (u * G::size < lim) __stcs(y + i, v[u] * inv);
  }
}

// Rows longer than HELD floats per thread: max pass, sum pass, write pass
// (the re-reads mostly hit L2).
template <class G>
TW_DI void softmax_long(const G& g, const float* __restrict__ x, float* __restrict__ y, int cols,
                        bool vec) {
  const int t = g.rank(), nv = cols >> 2;
  constexpr int S = G::size;
  float m = MaxOp::id();
  if (vec) {
    for (int i = t; i < nv; i += S) m = fmaxf(m, max4(ld4(x + 4 * i)));
  } else {
    for (int i = t; i < cols; i += S) m = fmaxf(m, x[i]);
  }
  m = g.template reduce<MaxOp>(m, 0);
  float s = 0.0f;
  if (vec) {
    for (int i = t; i < nv; i += S) {
      const float4 a = ld4(x + 4 * i);
      s += (expf(a.x - m) + expf(a.y - m)) + (expf(a.z - m) + expf(a.w - m));
    }
  } else {
    for (int i = t; i < cols; i += S) s += expf(x[i] - m);
  }
  s = g.template reduce<SumOp>(s, 1);
  const float inv = 1.0f / s;
  if (vec) {
    for (int i = t; i < nv; i += S) {
      const float4 a = ldcs4(x + 4 * i);
      stcs4(y + 4 * i, make_float4(expf(a.x - m) * inv, expf(a.y - m) * inv,
                                   expf(a.z - m) * inv, expf(a.w - m) * inv));
    }
  } else {
    for (int i = t; i < cols; i += S) __stcs(y + i, expf(__ldcs(x + i) - m) * inv);
  }
}

// One row (x, y at its start) by the threads of g: held in registers with
// the fewest slots (1, 2, 4 or 8 float4; 8 or 32 floats) that hold it.
template <class G>
TW_DI void softmax_row(const G& g, const float* __restrict__ x, float* __restrict__ y, int cols,
                       bool vec) {
  const int per = per_thread(cols, G::size);
  if (per > HELD) {
    softmax_long(g, x, y, cols, vec);
  } else if (vec) {
    if (per <= 4) softmax_vec<1>(g, x, y, cols);
    else if (per <= 8) softmax_vec<2>(g, x, y, cols);
    else if (per <= 16) softmax_vec<4>(g, x, y, cols);
    else softmax_vec<8>(g, x, y, cols);
  } else {
    if (per <= 8) softmax_scalar<8>(g, x, y, cols);
    else softmax_scalar<32>(g, x, y, cols);
  }
}

// A block of T threads per row.
template <int T>
TW_DI void softmax_block(const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
  __shared__ float sh[2 * (T / 32)];
  const int row = blockIdx.x;
  if (row >= rows || cols <= 0) return;
  const bool vec = (cols & 3) == 0 && aligned16(x) && aligned16(y);
  const long long off = (long long)row * cols;
  softmax_row(BlockRow<T>{sh, nullptr}, x + off, y + off, cols, vec);
}

}  // namespace tw_detail
using namespace tw_detail;  // (a named namespace: nvcc names anonymous ones after the file path)

extern "C" __global__ void __launch_bounds__(256, 4)
tw_softmax_rows_f32(const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
  const long long row = (long long)blockIdx.x * (NT / 32) + (threadIdx.x >> 5);
  if (row >= rows || cols <= 0) return;
  const bool vec = (cols & 3) == 0 && aligned16(x) && aligned16(y);
  const long long off = row * cols;
  softmax_row(WarpRow{}, x + off, y + off, cols, vec);
}

extern "C" __global__ void __launch_bounds__(256, 4)
tw_softmax_f32(const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
  softmax_block<NT>(x, y, rows, cols);
}

extern "C" __global__ void __launch_bounds__(512, 2)
tw_softmax_wide_f32(const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
  softmax_block<NT_WIDE>(x, y, rows, cols);
}

// ---------------------------------------------------------------------------
// Layer norm over the last axis: y = (x - mean) / sqrt(var + eps) * gamma + beta,
// biased variance, by the corrected two-pass algorithm: mean0 = sum(x) / n,
// then d = x - mean0, mean = mean0 + sum(d) / n, var = sum(d^2) / n - (sum(d) / n)^2
// (the correction term cancels the rounding error of mean0).

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

template <int NS, class G>
TW_DI void layernorm_vec(const G& g, const float* __restrict__ x, const float* __restrict__ gamma,
                         const float* __restrict__ beta, float* __restrict__ y, int cols,
                         float eps) {
  const int t = g.rank(), nv = cols >> 2;
  float4 v[NS];
#pragma unroll
  for (int u = 0; u < NS; ++u) {
    const int i = t + u * G::size;
    v[u] = i < nv ? ldcs4(x + 4 * i) : make_float4(0.f, 0.f, 0.f, 0.f);
  }
  float s = 0.0f;
#pragma unroll
  for (int u = 0; u < NS; ++u) s += sum4(v[u]);
  const float mean0 = g.template reduce<SumOp>(s, 0) / static_cast<float>(cols);
  float s1 = 0.0f, s2 = 0.0f;
#pragma unroll
  for (int u = 0; u < NS; ++u) {
    if (t + u * G::size < nv) {
      const float dx = v[u].x - mean0, dy = v[u].y - mean0, dz = v[u].z - mean0,
                  dw = v[u].w - mean0;
      s1 += (dx + dy) + (dz + dw);
      s2 += (dx * dx + dy * dy) + (dz * dz + dw * dw);
    }
  }
  const LnStats st = ln_finish(mean0, g.sum2(s1, s2), cols, eps);
  // (The run-time test on every slot also keeps the compiler from hoisting
  // all gamma / beta loads at once, which would spill at NS = 8.)
#pragma unroll
  for (int u = 0; u < NS; ++u) {
    const int i = t + u * G::size;
    if (i < nv) {
      const float4 gm = ld4(gamma + 4 * i);
      const float4 b = ld4(beta + 4 * i);
      stcs4(y + 4 * i, make_float4(fmaf((v[u].x - st.mean) * st.rstd, gm.x, b.x),
                                   fmaf((v[u].y - st.mean) * st.rstd, gm.y, b.y),
                                   fmaf((v[u].z - st.mean) * st.rstd, gm.z, b.z),
                                   fmaf((v[u].w - st.mean) * st.rstd, gm.w, b.w)));
    }
  }
}

template <int NS, class G>
TW_DI void layernorm_scalar(const G& g, const float* __restrict__ x,
                            const float* __restrict__ gamma, const float* __restrict__ beta,
                            float* __restrict__ y, int cols, float eps) {
  const int t = g.rank();
  float v[NS];
#pragma unroll
  for (int u = 0; u < NS; ++u) {
    const int i = t + u * G::size;
    v[u] = i < cols ? __ldcs(x + i) : 0.0f;
  }
  float s = 0.0f;
#pragma unroll
  for (int u = 0; u < NS; ++u) s += v[u];
  const float mean0 = g.template reduce<SumOp>(s, 0) / static_cast<float>(cols);
  float s1 = 0.0f, s2 = 0.0f;
#pragma unroll
  for (int u = 0; u < NS; ++u) {
    if (t + u * G::size < cols) {
      const float d = v[u] - mean0;
      s1 += d;
      s2 += d * d;
    }
  }
  const LnStats st = ln_finish(mean0, g.sum2(s1, s2), cols, eps);
#pragma unroll
  for (int u = 0; u < NS; ++u) {
    const int i = t + u * G::size;
    if (i < cols) __stcs(y + i, fmaf((v[u] - st.mean) * st.rstd, gamma[i], beta[i]));
  }
}

// Rows longer than HELD floats per thread: sum pass, (sum d, sum d^2) pass,
// write pass.
template <class G>
TW_DI void layernorm_long(const G& g, const float* __restrict__ x,
                          const float* __restrict__ gamma, const float* __restrict__ beta,
                          float* __restrict__ y, int cols, float eps, bool vec) {
  const int t = g.rank(), nv = cols >> 2;
  constexpr int S = G::size;
  float s = 0.0f;
  if (vec) {
    for (int i = t; i < nv; i += S) s += sum4(ld4(x + 4 * i));
  } else {
    for (int i = t; i < cols; i += S) s += x[i];
  }
  const float mean0 = g.template reduce<SumOp>(s, 0) / static_cast<float>(cols);
  float s1 = 0.0f, s2 = 0.0f;
  if (vec) {
    for (int i = t; i < nv; i += S) {
      const float4 a = ld4(x + 4 * i);
      const float dx = a.x - mean0, dy = a.y - mean0, dz = a.z - mean0, dw = a.w - mean0;
      s1 += (dx + dy) + (dz + dw);
      s2 += (dx * dx + dy * dy) + (dz * dz + dw * dw);
    }
  } else {
    for (int i = t; i < cols; i += S) {
      const float d = x[i] - mean0;
      s1 += d;
      s2 += d * d;
    }
  }
  const LnStats st = ln_finish(mean0, g.sum2(s1, s2), cols, eps);
  if (vec) {
    for (int i = t; i < nv; i += S) {
      const float4 a = ldcs4(x + 4 * i), gm = ld4(gamma + 4 * i), b = ld4(beta + 4 * i);
      stcs4(y + 4 * i, make_float4(fmaf((a.x - st.mean) * st.rstd, gm.x, b.x),
                                   fmaf((a.y - st.mean) * st.rstd, gm.y, b.y),
                                   fmaf((a.z - st.mean) * st.rstd, gm.z, b.z),
                                   fmaf((a.w - st.mean) * st.rstd, gm.w, b.w)));
    }
  } else {
    for (int i = t; i < cols; i += S)
      __stcs(y + i, fmaf((__ldcs(x + i) - st.mean) * st.rstd, gamma[i], beta[i]));
  }
}

template <class G>
TW_DI void layernorm_row(const G& g, const float* __restrict__ x, const float* __restrict__ gamma,
                         const float* __restrict__ beta, float* __restrict__ y, int cols,
                         float eps, bool vec) {
  const int per = per_thread(cols, G::size);
  if (per > HELD) {
    layernorm_long(g, x, gamma, beta, y, cols, eps, vec);
  } else if (vec) {
    if (per <= 4) layernorm_vec<1>(g, x, gamma, beta, y, cols, eps);
    else if (per <= 8) layernorm_vec<2>(g, x, gamma, beta, y, cols, eps);
    else if (per <= 16) layernorm_vec<4>(g, x, gamma, beta, y, cols, eps);
    else layernorm_vec<8>(g, x, gamma, beta, y, cols, eps);
  } else {
    if (per <= 8) layernorm_scalar<8>(g, x, gamma, beta, y, cols, eps);
    else layernorm_scalar<32>(g, x, gamma, beta, y, cols, eps);
  }
}

TW_DI bool layernorm_vec_ok(const float* x, const float* gamma, const float* beta, const float* y,
                            int cols) {
  return (cols & 3) == 0 && aligned16(x) && aligned16(y) && aligned16(gamma) && aligned16(beta);
}

template <int T>
TW_DI void layernorm_block(const float* __restrict__ x, const float* __restrict__ gamma,
                           const float* __restrict__ beta, float* __restrict__ y, int rows,
                           int cols, float eps) {
  __shared__ float sh[2 * (T / 32)];
  __shared__ float2 sh2[T / 32];
  const int row = blockIdx.x;
  if (row >= rows || cols <= 0) return;
  const bool vec = layernorm_vec_ok(x, gamma, beta, y, cols);
  const long long off = (long long)row * cols;
  layernorm_row(BlockRow<T>{sh, sh2}, x + off, gamma, beta, y + off, cols, eps, vec);
}

}  // namespace tw_detail
using namespace tw_detail;  // (a named namespace: nvcc names anonymous ones after the file path)

extern "C" __global__ void __launch_bounds__(256, 4)
tw_layernorm_rows_f32(const float* __restrict__ x, const float* __restrict__ gamma,
                      const float* __restrict__ beta, float* __restrict__ y, int rows, int cols,
                      float eps) {
  const long long row = (long long)blockIdx.x * (NT / 32) + (threadIdx.x >> 5);
  if (row >= rows || cols <= 0) return;
  const bool vec = layernorm_vec_ok(x, gamma, beta, y, cols);
  const long long off = row * cols;
  layernorm_row(WarpRow{}, x + off, gamma, beta, y + off, cols, eps, vec);
}

extern "C" __global__ void __launch_bounds__(256, 4)
tw_layernorm_f32(const float* __restrict__ x, const float* __restrict__ gamma,
                 const float* __restrict__ beta, float* __restrict__ y, int rows, int cols,
                 float eps) {
  layernorm_block<NT>(x, gamma, beta, y, rows, cols, eps);
}

extern "C" __global__ void __launch_bounds__(512, 2)
tw_layernorm_wide_f32(const float* __restrict__ x, const float* __restrict__ gamma,
                      const float* __restrict__ beta, float* __restrict__ y, int rows, int cols,
                      float eps) {
  layernorm_block<NT_WIDE>(x, gamma, beta, y, rows, cols, eps);
}
