// Built-in element-wise kernels and transpose of TensorWasm
// (docs/tensor-ops.md). All f32.
//
//   tw_add_f32 / tw_mul_f32(a, b, y, n, b_period): y[i] = a[i] op b[i % b_period]
//   tw_relu_f32 / tw_gelu_f32(x, y, n)
//     256 threads, grid clamp(ceil(n / 1024), 1, 65536), grid-stride loop;
//     a block covers 1024 elements per trip: one float4 per thread when every
//     pointer is 16-byte aligned (and b_period % 4 == 0), else four coalesced
//     scalars per thread.
//   tw_transpose_f32(x, y, rows, cols): block (32, 8), grid
//     (ceil(cols / 32), ceil(rows / 32), batch); a 32 x 33 shared tile.
//
// GELU is the exact erf form 0.5 x (1 + erf(x / sqrt 2)), evaluated as
// 0.5 x erfc(-x / sqrt 2) (the same function; erfc keeps full relative
// precision where 1 + erf cancels, at large negative x).

#include <stdint.h>

#define TW_DI __device__ __forceinline__

namespace tw_detail {

constexpr int NT = 256;
constexpr long long PER_BLOCK = 4 * NT;

TW_DI bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

struct AddOp {
  static TW_DI float f(float a, float b) { return a + b; }
};
struct MulOp {
  static TW_DI float f(float a, float b) { return a * b; }
};

template <class Op>
TW_DI void binary(const float* __restrict__ a, const float* __restrict__ b,
                  float* __restrict__ y, long long n, long long period) {
  const long long stride = (long long)gridDim.x * PER_BLOCK;
  const long long base = (long long)blockIdx.x * PER_BLOCK;
  if (aligned16(a) && aligned16(b) && aligned16(y) && (period & 3) == 0) {
    const long long nv = n >> 2;
    long long i = base / 4 + threadIdx.x;  // float4 index
    const float4* a4 = reinterpret_cast<const float4*>(a);
    float4* y4 = reinterpret_cast<float4*>(y);
    if (period >= n) {
      const float4* b4 = reinterpret_cast<const float4*>(b);
      for (; i < nv; i += stride / 4) {
        const float4 va = __ldcs(a4 + i), vb = __ldg(b4 + i);
        __stcs(y4 + i, make_float4(Op::f(va.x, vb.x), Op::f(va.y, vb.y), Op::f(va.z, vb.z),
                                   Op::f(va.w, vb.w)));
      }
    } else {
      // b index (in elements) kept incrementally: one division per thread.
      long long bi = (4 * i) % period;
      const long long step = stride % period;
      for (; i < nv; i += stride / 4) {
        const float4 va = __ldcs(a4 + i);
        const float4 vb = __ldg(reinterpret_cast<const float4*>(b + bi));
        __stcs(y4 + i, make_float4(Op::f(va.x, vb.x), Op::f(va.y, vb.y), Op::f(va.z, vb.z),
                                   Op::f(va.w, vb.w)));
        bi += step;
        if (bi >= period) bi -= period;
      }
    }
    // Tail (n % 4 elements), by the first block.
    if (blockIdx.x == 0 && threadIdx.x < (n & 3)) {
      const long long k = nv * 4 + threadIdx.x;
      y[k] = Op::f(a[k], b[k % period]);
    }
  } else {
    for (long long i0 = base + threadIdx.x; i0 < n; i0 += stride) {
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const long long k = i0 + u * NT;
        if (k < n) y[k] = Op::f(a[k], b[period >= n ? k : k % period]);
      }
    }
  }
}

template <class F>
TW_DI void unary(const float* __restrict__ x, float* __restrict__ y, long long n, F f) {
  const long long stride = (long long)gridDim.x * PER_BLOCK;
  const long long base = (long long)blockIdx.x * PER_BLOCK;
  if (aligned16(x) && aligned16(y)) {
    const long long nv = n >> 2;
    const float4* x4 = reinterpret_cast<const float4*>(x);
    float4* y4 = reinterpret_cast<float4*>(y);
    for (long long i = base / 4 + threadIdx.x; i < nv; i += stride / 4) {
      const float4 v = __ldcs(x4 + i);
      __stcs(y4 + i, make_float4(f(v.x), f(v.y), f(v.z), f(v.w)));
    }
    if (blockIdx.x == 0 && threadIdx.x < (n & 3)) {
      const long long k = nv * 4 + threadIdx.x;
      y[k] = f(x[k]);
    }
  } else {
    for (long long i0 = base + threadIdx.x; i0 < n; i0 += stride) {
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const long long k = i0 + u * NT;
        if (k < n) y[k] = f(x[k]);
      }
    }
  }
}

struct Relu {
  TW_DI float operator()(float v) const { return v < 0.0f ? 0.0f : v; }
};
struct Gelu {
  TW_DI float operator()(float v) const { return 0.5f * v * erfcf(-0.70710678118654752f * v); }
};

}  // namespace tw_detail
using namespace tw_detail;  // (a named namespace: nvcc names anonymous ones after the file path)

extern "C" __global__ void __launch_bounds__(256)
tw_add_f32(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ y,
           long long n, long long b_period) {
  binary<AddOp>(a, b, y, n, b_period);
}

extern "C" __global__ void __launch_bounds__(256)
tw_mul_f32(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ y,
           long long n, long long b_period) {
  binary<MulOp>(a, b, y, n, b_period);
}

extern "C" __global__ void __launch_bounds__(256)
tw_relu_f32(const float* __restrict__ x, float* __restrict__ y, long long n) {
  unary(x, y, n, Relu());
}

extern "C" __global__ void __launch_bounds__(256)
tw_gelu_f32(const float* __restrict__ x, float* __restrict__ y, long long n) {
  unary(x, y, n, Gelu());
}

extern "C" __global__ void __launch_bounds__(256)
tw_transpose_f32(const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
  __shared__ float tile[32][33];
  const long long zoff = (long long)blockIdx.z * rows * cols;
  x += zoff;
  y += zoff;
  const int c0 = blockIdx.x * 32, r0 = blockIdx.y * 32;
  const int tx = threadIdx.x, ty = threadIdx.y;
#pragma unroll
  for (int j = 0; j < 32; j += 8) {
    const int r = r0 + ty + j, c = c0 + tx;
    if (r < rows && c < cols) tile[ty + j][tx] = x[(long long)r * cols + c];
  }
  __syncthreads();
#pragma unroll
  for (int j = 0; j < 32; j += 8) {
    const int oc = c0 + ty + j;  // output row = input column
    const int orow = r0 + tx;    // output column = input row
    if (oc < cols && orow < rows) y[(long long)oc * rows + orow] = tile[tx][ty + j];
  }
}
