// The SIMT f32 GEMMs: tw_gemm_f32 (every architecture) and
// tw_gemm_f32_split_k (sm_90+, K split over a cluster of two blocks).
// Included by gemm.cu inside its namespace tw_detail, after the tile
// order (tile_origin) and cp.async helpers; it closes the namespace before
// its entries. docs/tensor-ops.md is the contract, kernels/src/table/gemm.rs
// picks the entry.

// Thread block clusters (sm_90+; the split-K f32 GEMM).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
TW_DI void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" :::
                   "memory");
}
// The address of shared address `a` in the shared memory of cluster block `rank`.
TW_DI unsigned mapa_shared(unsigned a, unsigned rank) {
  unsigned d;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(rank));
  return d;
}
TW_DI void st_cluster_v4(unsigned a, float x, float y, float z, float w) {
  asm volatile("st.shared::cluster.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(a), "f"(x), "f"(y), "f"(z),
               "f"(w)
               : "memory");
}
#else
TW_DI void cluster_sync() {}
TW_DI unsigned mapa_shared(unsigned a, unsigned) { return a; }
TW_DI void st_cluster_v4(unsigned, float, float, float, float) {}
#endif

// ---------------------------------------------------------------------------
// SIMT f32 GEMM: 128x128 tiles, each thread an 8x8 sub-tile (two 4x4
// quadrants 64 rows / 64 columns apart) read from shared memory with 16-byte
// loads, one barrier per K tile.
//
// sm_80+ (gemm_f32_async<BK, STAGES, SPLIT>): K tile BK, STAGES shared
// stages, cp.async STAGES - 1 tiles ahead of the multiply. A lands
// transposed (As[k][m], so a thread's 4 rows at one k are one 16-byte shared
// load) through 4-byte copies, BK consecutive k of a row per BK lanes;
// elements outside the matrix are zero-filled by the copy. B rows are
// 16-byte copies when the block's columns are inside the matrix and B, ldb
// are 16-byte aligned, else 4-byte copies with zero fill. Warps are 4 (M) x
// 2 (N) of 4 x 8 lanes: a warp's shared loads of A and B read 64 and 128
// contiguous bytes.
//   tw_gemm_f32: BK 16, 2 stages, static shared memory (on an H100 this beat
//   K tile 8 with 3-4 stages, 3 stages of an unpadded swizzled A, the sm_75
//   lane layout and one block of more registers per SM).
//   tw_gemm_f32_split_k (sm_90+): BK 32, 3 stages, dynamic shared memory; a
//   cluster of two blocks per tile, each multiplying half of the K tiles,
//   their sums meeting in shared memory (SPLIT 2). On an H100 this beat
//   tw_gemm_f32 at every shape with K of 1024 or more (1024^3: 64 tiles for
//   132 SMs, 0.53 -> 1.0 of cuBLAS; 8192^3: 0.91 -> 0.96), and 64 x 128 or
//   128 x 64 tiles (4 x 8 per thread; 0.89 at 1024^3, 0.75 at 4096^3), a
//   split inside a block of 512 threads, and BK 32 without the split.
// sm_75 (gemm_f32_sm75): K tile 8, register-staged double buffer, lanes 16
// (N) x 2 (M).

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define TW_F32_CP_ASYNC 1
#else
#define TW_F32_CP_ASYNC 0
#endif

#if TW_F32_CP_ASYNC
// Shared memory of gemm_f32_async<BK, STAGES, ..>, in floats: STAGES stages
// of A (BK rows of 128 + 4, padded: fewer bank conflicts on the transposed
// stores), then STAGES stages of B (BK rows of 128).
template <int BK, int STAGES>
struct F32Smem {
  static constexpr int AS = BM + 4;
  static constexpr int A_STAGE = BK * AS, B_STAGE = BK * BN;
  static constexpr int FLOATS = STAGES * (A_STAGE + B_STAGE);
};

template <int BK, int STAGES, int SPLIT>
TW_DI void gemm_f32_async(float* smem, const float* __restrict__ A, const float* __restrict__ B,
                          float* __restrict__ C, int M, int N, int K, long long lda, long long ldb,
                          long long ldc, long long sA, long long sB, long long sC, float alpha,
                          float beta) {
  using S = F32Smem<BK, STAGES>;
  constexpr int TBM = BM, TBN = BN;
  constexpr int RM = 8, RN = 8;  // this thread's rows and columns
  static_assert(SPLIT == 1 || (SPLIT == 2 && RM * RN * 128 <= S::FLOATS), "K split in two");
  float* const As = smem;
  float* const Bs = smem + STAGES * S::A_STAGE;

  const int tid = threadIdx.x;
  int m0, n0;
  tile_origin<TBM, TBN, GROUP_M, SPLIT>(m0, n0);
  const long long z = blockIdx.z;
  A += z * sA;
  B += z * sB;
  C += z * sC;

  // B: 16-byte chunk (tid % B_CPR) of K rows tid / B_CPR + B_RPP * it.
  constexpr int B_CPR = TBN / 4, B_RPP = 256 / B_CPR, NB = BK / B_RPP;
  static_assert(NB >= 1 && BK % B_RPP == 0, "B tile rows");
  const bool b_vec = aligned16(B) && (ldb & 3) == 0 && n0 + TBN <= N;
  const int b_k = tid / B_CPR, b_n = (tid % B_CPR) * 4;
  const float* pB = B + (long long)b_k * ldb + n0 + b_n;
  // A: element k = tid % BK of rows tid / BK + A_RSTEP * it.
  constexpr int A_RSTEP = 256 / BK, NA = TBM / A_RSTEP;
  const int a_k = tid % BK, a_r = tid / BK;
  const bool a_rows = m0 + TBM <= M;
  const float* pA = A + (long long)(m0 + a_r) * lda + a_k;
  const unsigned sA0 = smem_addr(As + a_k * S::AS);
  const unsigned sB0 = smem_addr(Bs + b_k * TBN + b_n);

  // Loads of the K tile at k0 into stage s. The slow paths recompute the
  // tile origin (tile_origin) instead of keeping it live across the main loop.
  auto load_stage = [&](int s, int k0) {
    const bool full_k = k0 + BK <= K;
    const float* a0p = pA + k0;
    const float* b0p = pB + (long long)k0 * ldb;
    const unsigned sa = sA0 + s * (S::A_STAGE * 4), sb = sB0 + s * (S::B_STAGE * 4);
    if (a_rows && full_k) {
#pragma unroll
      for (int it = 0; it < NA; ++it)
        cp_async4(sa + (a_r + it * A_RSTEP) * 4, a0p + (long long)it * A_RSTEP * lda, 4);
    } else {
      int tm, tn;
      tile_origin<TBM, TBN, GROUP_M, SPLIT>(tm, tn);
#pragma unroll
      for (int it = 0; it < NA; ++it) {
        const bool in = tm + a_r + it * A_RSTEP < M && k0 + a_k < K;
        const float* p = in ? a0p + (long long)it * A_RSTEP * lda : A;
        cp_async4(sa + (a_r + it * A_RSTEP) * 4, p, in ? 4 : 0);
      }
    }
#pragma unroll
    for (int it = 0; it < NB; ++it) {
      const float* q = b0p + (long long)(it * B_RPP) * ldb;
      const unsigned d = sb + it * B_RPP * TBN * 4;
      if (b_vec && full_k) {
        cp_async16(d, q);
      } else {
        int tm, tn;
        tile_origin<TBM, TBN, GROUP_M, SPLIT>(tm, tn);
        const int k = k0 + b_k + it * B_RPP;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const bool in = k < K && tn + b_n + e < N;
          cp_async4(d + e * 4, in ? q + e : B, in ? 4 : 0);
        }
      }
    }
  };

  // This thread's rows ty*4 + {0..3} (+ 64), columns tx*4 + {0..3} (+ 64).
  const int warp = tid >> 5, lane = tid & 31;
  const int ty = (warp >> 1) * 4 + (lane >> 3), tx = (warp & 1) * 8 + (lane & 7);
  float acc[RM][RN];
#pragma unroll
  for (int i = 0; i < RM; ++i)
#pragma unroll
    for (int j = 0; j < RN; ++j) acc[i][j] = 0.0f;

  auto multiply = [&](int s) {
    const float* as = As + s * S::A_STAGE + ty * 4;
    const float* bs = Bs + s * S::B_STAGE + tx * 4;
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
      float a[RM], b[RN];
#pragma unroll
      for (int q = 0; q < RM / 4; ++q) {
        const float4 v = *reinterpret_cast<const float4*>(as + kk * S::AS + q * 64);
        a[q * 4 + 0] = v.x, a[q * 4 + 1] = v.y, a[q * 4 + 2] = v.z, a[q * 4 + 3] = v.w;
      }
#pragma unroll
      for (int q = 0; q < RN / 4; ++q) {
        const float4 v = *reinterpret_cast<const float4*>(bs + kk * TBN + q * 64);
        b[q * 4 + 0] = v.x, b[q * 4 + 1] = v.y, b[q * 4 + 2] = v.z, b[q * 4 + 3] = v.w;
      }
#pragma unroll
      for (int j = 0; j < RN; ++j)
#pragma unroll
        for (int i = 0; i < RM; ++i) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
  };

  // Stage kt % STAGES holds tile kt; the barrier at kt also frees the stage
  // of tile kt - 1 (multiplied by every warp) for tile kt + STAGES - 1.
  // Split in two, the first block of a pair takes the first ceil(n / 2) of
  // the n K tiles, the second the rest.
  int k_first = 0, numK = (K + BK - 1) / BK;
  if (SPLIT == 2) {
    const int half = (numK + 1) >> 1;
    if (sreg_ctaid_x() & 1) {
      k_first = half;
      numK -= half;
    } else {
      numK = half;
    }
  }
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < numK) load_stage(s, (k_first + s) * BK);
    cp_async_commit();
  }
  for (int kt = 0; kt < numK; ++kt) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();
    const int next = kt + STAGES - 1;
    if (next < numK) load_stage(static_cast<unsigned>(next) % STAGES, (k_first + next) * BK);
    cp_async_commit();
    multiply(static_cast<unsigned>(kt) % STAGES);
  }
  cp_async_wait<0>();

  // Split in two: the pair is a cluster; block r keeps rows 64 r .. 64 r + 63
  // of the tile (quadrant rows i / 4 == r) and sends the other half of its
  // sums to its peer's shared memory, which adds them (a + b, the same in
  // either order: deterministic).
  int row0 = 0;
  if (SPLIT == 2) {
    const unsigned r = sreg_ctaid_x() & 1;
    cluster_sync();  // both blocks are past their main loops: stages are free
    const unsigned dst = mapa_shared(smem_addr(smem) + tid * 16, r ^ 1);
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int h = 0; h < RN / 4; ++h) {
        const int e = i * (RN / 4) + h;
        float v[4];  // the peer's rows (selects: acc stays in registers)
#pragma unroll
        for (int c = 0; c < 4; ++c) v[c] = r ? acc[i][h * 4 + c] : acc[i + 4][h * 4 + c];
        st_cluster_v4(dst + e * 256 * 16, v[0], v[1], v[2], v[3]);
      }
    cluster_sync();
    const float4* got = reinterpret_cast<const float4*>(smem) + tid;
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int h = 0; h < RN / 4; ++h) {
        const float4 v = got[(i * (RN / 4) + h) * 256];
        const float g[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int c = 0; c < 4; ++c)  // this block's rows
          acc[i][h * 4 + c] = (r ? acc[i + 4][h * 4 + c] : acc[i][h * 4 + c]) + g[c];
      }
    row0 = r * 64;
  }

  // Epilogue.
  tile_origin<TBM, TBN, GROUP_M, SPLIT>(m0, n0);
  m0 += row0;
  const bool c_vec = aligned16(C) && (ldc & 3) == 0 && m0 + TBM / SPLIT <= M && n0 + TBN <= N;
#pragma unroll
  for (int i = 0; i < RM / SPLIT; ++i) {
    const int r = m0 + ty * 4 + (i & 3) + (i >> 2) * 64;
#pragma unroll
    for (int h = 0; h < RN / 4; ++h) {
      const int c = n0 + tx * 4 + h * 64;
      float* p = C + (long long)r * ldc + c;
      if (c_vec) {
        float4 o;
        if (beta == 0.0f) {
          o = make_float4(alpha * acc[i][h * 4 + 0], alpha * acc[i][h * 4 + 1],
                          alpha * acc[i][h * 4 + 2], alpha * acc[i][h * 4 + 3]);
        } else {
          const float4 old = *reinterpret_cast<const float4*>(p);
          o = make_float4(fmaf(alpha, acc[i][h * 4 + 0], beta * old.x),
                          fmaf(alpha, acc[i][h * 4 + 1], beta * old.y),
                          fmaf(alpha, acc[i][h * 4 + 2], beta * old.z),
                          fmaf(alpha, acc[i][h * 4 + 3], beta * old.w));
        }
        *reinterpret_cast<float4*>(p) = o;
      } else if (r < M) {
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (c + e < N) p[e] = epi(acc[i][h * 4 + e], alpha, beta, p + e);
      }
    }
  }
}
#endif  // TW_F32_CP_ASYNC

#if !TW_F32_CP_ASYNC
constexpr int F75_BK = 8;
constexpr int F75_AS = BM + 4;

TW_DI void gemm_f32_sm75(const float* __restrict__ A, const float* __restrict__ B,
                         float* __restrict__ C, int M, int N, int K, long long lda, long long ldb,
                         long long ldc, long long sA, long long sB, long long sC, float alpha,
                         float beta) {
  __shared__ __align__(16) float As[2][F75_BK][F75_AS];
  __shared__ __align__(16) float Bs[2][F75_BK][BN];
  constexpr int BK = F75_BK;

  const int tid = threadIdx.x;
  int m0, n0;
  tile_origin(m0, n0);
  const long long z = blockIdx.z;
  A += z * sA;
  B += z * sB;
  C += z * sC;

  const bool b_vec = aligned16(B) && (ldb & 3) == 0 && n0 + BN <= N;
  // B: 16-byte chunk (tid % 32) of K row tid / 32.
  const int b_k = tid >> 5, b_n = (tid & 31) * 4;
  const float* pB = B + (long long)b_k * ldb + n0 + b_n;
  // A: 16-byte chunk (tid % 2) of row tid / 2, staged in registers. The
  // slow paths recompute the tile origin (tile_origin) instead of keeping
  // it live across the main loop.
  const bool a_vec = aligned16(A) && (lda & 3) == 0 && m0 + BM <= M;
  const int a_r = tid >> 1, a_k = (tid & 1) * 4;
  const float* pA = A + (long long)(m0 + a_r) * lda + a_k;
  float4 ra, rb;
  auto load_tile = [&](int k0) {
    const bool full_k = k0 + BK <= K;
    if (a_vec && full_k) {
      ra = *reinterpret_cast<const float4*>(pA + k0);
    } else {
      int tm, tn;
      tile_origin(tm, tn);
      const int r = tm + a_r;
      float v[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) v[e] = (r < M && k0 + a_k + e < K) ? pA[k0 + e] : 0.0f;
      ra = make_float4(v[0], v[1], v[2], v[3]);
    }
    const float* q = pB + (long long)k0 * ldb;
    if (b_vec && full_k) {
      rb = *reinterpret_cast<const float4*>(q);
    } else {
      int tm, tn;
      tile_origin(tm, tn);
      const int k = k0 + b_k;
      float v[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) v[e] = (k < K && tn + b_n + e < N) ? q[e] : 0.0f;
      rb = make_float4(v[0], v[1], v[2], v[3]);
    }
  };
  auto store_tile = [&](int buf) {
    As[buf][a_k + 0][a_r] = ra.x;
    As[buf][a_k + 1][a_r] = ra.y;
    As[buf][a_k + 2][a_r] = ra.z;
    As[buf][a_k + 3][a_r] = ra.w;
    *reinterpret_cast<float4*>(&Bs[buf][b_k][b_n]) = rb;
  };

  // This thread's rows ty*4 + {0..3} and + 64, columns tx*4 + {0..3} and + 64.
  const int tx = tid & 15, ty = tid >> 4;
  float acc[8][8];
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;

  auto multiply = [&](int buf) {
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
      const float4 a0 = *reinterpret_cast<const float4*>(&As[buf][kk][ty * 4]);
      const float4 a1 = *reinterpret_cast<const float4*>(&As[buf][kk][ty * 4 + 64]);
      const float4 b0 = *reinterpret_cast<const float4*>(&Bs[buf][kk][tx * 4]);
      const float4 b1 = *reinterpret_cast<const float4*>(&Bs[buf][kk][tx * 4 + 64]);
      const float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
      const float b[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
  };

  const int numK = (K + BK - 1) / BK;
  load_tile(0);
  store_tile(0);
  __syncthreads();
  for (int kt = 0; kt < numK; ++kt) {
    const int buf = kt & 1;
    const bool more = kt + 1 < numK;
    if (more) load_tile((kt + 1) * BK);
    multiply(buf);
    if (more) {
      store_tile(buf ^ 1);
      __syncthreads();
    }
  }

  // Epilogue.
  tile_origin(m0, n0);
  const bool c_vec = aligned16(C) && (ldc & 3) == 0 && m0 + BM <= M && n0 + BN <= N;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int r = m0 + ty * 4 + (i & 3) + (i >> 2) * 64;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int c = n0 + tx * 4 + h * 64;
      float* p = C + (long long)r * ldc + c;
      if (c_vec) {
        float4 o;
        if (beta == 0.0f) {
          o = make_float4(alpha * acc[i][h * 4 + 0], alpha * acc[i][h * 4 + 1],
                          alpha * acc[i][h * 4 + 2], alpha * acc[i][h * 4 + 3]);
        } else {
          const float4 old = *reinterpret_cast<const float4*>(p);
          o = make_float4(fmaf(alpha, acc[i][h * 4 + 0], beta * old.x),
                          fmaf(alpha, acc[i][h * 4 + 1], beta * old.y),
                          fmaf(alpha, acc[i][h * 4 + 2], beta * old.z),
                          fmaf(alpha, acc[i][h * 4 + 3], beta * old.w));
        }
        *reinterpret_cast<float4*>(p) = o;
      } else if (r < M) {
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (c + e < N) p[e] = epi(acc[i][h * 4 + e], alpha, beta, p + e);
      }
    }
  }
}
#endif  // !TW_F32_CP_ASYNC

}  // namespace tw_detail
using namespace tw_detail;  // (a named namespace: nvcc names anonymous ones after the file path)

extern "C" __global__ void __launch_bounds__(256, 2)
tw_gemm_f32(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
            int M, int N, int K, long long lda, long long ldb, long long ldc,
            long long sA, long long sB, long long sC, float alpha, float beta) {
#if TW_F32_CP_ASYNC
  __shared__ __align__(16) float smem[F32Smem<16, 2>::FLOATS];
  gemm_f32_async<16, 2, 1>(smem, A, B, C, M, N, K, lda, ldb, ldc, sA, sB, sC, alpha, beta);
#else
  gemm_f32_sm75(A, B, C, M, N, K, lda, ldb, ldc, sA, sB, sC, alpha, beta);
#endif
}

// tw_gemm_f32_split_k (sm_90+): 128 x 128 tiles, K tile 32, 3 stages in
// dynamic shared memory (F32_SPLIT_K_SHARED bytes), K split in two between
// the two blocks of a cluster; grid (2 ceil(N/128), ceil(M/128), batch).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
constexpr int F32_SPLIT_K_SHARED = F32Smem<32, 3>::FLOATS * 4;
static_assert(F32_SPLIT_K_SHARED == 99840, "kernels/src/table/gemm.rs: F32_SPLIT_K_SHARED");

extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(256, 2)
tw_gemm_f32_split_k(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                    int M, int N, int K, long long lda, long long ldb, long long ldc,
                    long long sA, long long sB, long long sC, float alpha, float beta) {
  extern __shared__ __align__(16) float f32_split_smem[];
  gemm_f32_async<32, 3, 2>(f32_split_smem, A, B, C, M, N, K, lda, ldb, ldc, sA, sB, sC,
                                     alpha, beta);
}
#endif
