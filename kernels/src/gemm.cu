// Built-in GEMM kernels of TensorWasm (docs/tensor-ops.md).
//
//   C[z] = alpha * A[z] @ B[z] + beta * C[z]      (beta == 0: C is not read)
//
// A is [M, K] with row stride lda, B is [K, N] with row stride ldb, C is
// [M, N] with row stride ldc, all row-major; batch z = blockIdx.z starts at
// z * sA / z * sB / z * sC elements (sA, sB may be 0: broadcast).
// Every entry: 256 threads, one 128 x 128 tile of C per block,
// grid (ceil(N/128), ceil(M/128), batch), static shared memory only
// (<= 48 KiB), f32 accumulate; but for tw_gemm_f32_split_k and the TMA
// entries (gemm_tma*.cuh).
//
//   tw_gemm_f32    SIMT FFMA, every architecture (sm_75+) (gemm_f32.cuh).
//   tw_gemm_f32_split_k  the same with K split over a cluster of two
//                  blocks per tile, grid (2 ceil(N/128), ceil(M/128),
//                  batch), dynamic shared memory, sm_90+ (gemm_f32.cuh).
//   tw_gemm_tf32   mma.sync m16n8k8 tf32 (inputs rounded to nearest, ties to
//                  even: to_tf32), sm_80+.
//   tw_gemm_bf16   mma.sync m16n8k16 bf16, ldmatrix, sm_80+.
//   tw_gemm_f16    mma.sync m16n8k16 f16, ldmatrix, sm_80+.
//
//   tw_gemm_bf16_sm90a, tw_gemm_f16_sm90a, tw_gemm_tf32_sm90a: wgmma (Hopper),
//                  only in kernels/ptx/gemm.sm_90a.ptx; same parameters,
//                  block, grid and edge rules.
//
// Tiles: the grid is walked in groups of GROUP_M tile rows (block ids in
// launch order go down GROUP_M tiles of one tile column, then right), so
// blocks in flight share panels of A and B in L2.
//
// Loads: per block and per K tile, uniformly, a tile of A (B) is fetched
// with 16-byte vector loads (cp.async on sm_80+) only when the block's rows
// (columns) are all inside the matrix, the K tile is whole, and the batch's
// base pointer and the leading dimension are 16-byte aligned; otherwise
// every element is loaded on its own with a bounds check and zero fill.
// (tw_gemm_f32 on sm_80+ copies A element by element always, transposing
// it; its fast path needs only the block's rows inside and a whole K tile.)
// Stores: 8/16-byte vectors only for interior tiles with aligned C and ldc,
// otherwise element by element with bounds checks.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#define TW_DI __device__ __forceinline__

namespace tw_detail {

constexpr int BM = 128;
constexpr int BN = 128;

#ifndef TW_GEMM_GROUP_M
#define TW_GEMM_GROUP_M 8
#endif
constexpr int GROUP_M = TW_GEMM_GROUP_M;

TW_DI bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// This block's tile origin (m0, n0): a bijection of the grid onto the tiles
// (32-bit arithmetic; grids of 2^32 blocks or more keep the launch order).
// The block indices are read with volatile moves so that a second call (in
// an epilogue) recomputes the origin instead of keeping it live in
// registers across the main loop.
TW_DI unsigned sreg_ctaid_x() { unsigned v; asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(v)); return v; }
TW_DI unsigned sreg_ctaid_y() { unsigned v; asm volatile("mov.u32 %0, %%ctaid.y;" : "=r"(v)); return v; }
// XDIV consecutive blocks along x share a tile (a split K: gemm_f32_async).
template <int TBM = BM, int TBN = BN, int TGROUP = GROUP_M, int XDIV = 1>
TW_DI void tile_origin(int& m0, int& n0) {
  const unsigned gx = gridDim.x / XDIV, gy = gridDim.y;
  const unsigned bx = sreg_ctaid_x() / XDIV, by = sreg_ctaid_y();
  if (TGROUP == 1 || (unsigned long long)gx * gy * TGROUP >= (1ull << 32)) {
    m0 = by * TBM;
    n0 = bx * TBN;
    return;
  }
  const unsigned pid = by * gx + bx;
  const unsigned per_group = TGROUP * gx;
  const unsigned group = pid / per_group;
  const unsigned first_m = group * TGROUP;
  const unsigned size_m = min(gy - first_m, static_cast<unsigned>(TGROUP));
  const unsigned local = pid - group * per_group;
  const unsigned col = local / size_m;
  m0 = static_cast<int>((first_m + (local - col * size_m)) * TBM);
  n0 = static_cast<int>(col * TBN);
}

// ---------------------------------------------------------------------------
// Epilogue helpers shared by all GEMMs.

TW_DI float epi(float acc, float alpha, float beta, const float* c) {
  return beta == 0.0f ? alpha * acc : fmaf(alpha, acc, beta * *c);
}

// ---------------------------------------------------------------------------
// cp.async (sm_80+; the SIMT f32 GEMM and the Tensor Core GEMMs).

TW_DI unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

TW_DI void cp_async16(unsigned dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}
// 4 bytes; src_bytes 0 stores a zero and reads nothing.
TW_DI void cp_async4(unsigned dst, const void* src, unsigned src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes)
               : "memory");
}
TW_DI void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
TW_DI void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

#include "gemm_f32.cuh"

// ===========================================================================
// Tensor Core GEMMs (sm_80 and newer).
//
// Shared memory: STAGES stages of (A tile 128 x BK, B tile BK x 128); A rows
// are ROWB bytes (64: BK = 32 halves or 16 floats; 32: BK = 16 halves or 8
// floats), a stage is 2 * 128 * ROWB bytes, STAGES * that <= 48 KiB.
// cp.async runs PD = STAGES - 1 tiles ahead of the multiply (STAGES - 2 for
// the wgmma kernels that keep one batch in flight).
//
// A tile: chunk c (16 bytes) of row r is stored at chunk c ^ ((r >> SH) &
// (CPA - 1)) of its row (CPA = ROWB / 16 chunks per row, SH = log2(128 /
// ROWB)): the 64-byte (ROWB 64) or 32-byte (ROWB 32) swizzle of wgmma's
// K-major layouts, which also makes ldmatrix's 8 rows of one chunk hit 8
// distinct bank groups. B tile (16-bit, mma.sync): rows of 16 chunks, chunk c
// of row k at c ^ (k & 7) (conflict-free ldmatrix.trans). B tile (tf32):
// rows of 32 chunks, chunk c of row k at c ^ ((k & 3) << 1) (conflict-free
// fragment loads (k = t, n = g)). B tile (16-bit, wgmma): two 64-column
// halves of BK rows x 128 bytes, chunk c of row k at (c & 8) half, chunk
// (c & 7) ^ (k & 7): wgmma's N-major 128-byte-swizzle layout.
//
// mma.sync warp layout: 8 warps as 2 (M) x 4 (N), each a 64 x 32 tile of C
// (4 x 4 mma tiles). tf32: the inputs are rounded to tf32 (to_tf32): A once,
// in shared memory, by the thread that loaded it; B as fragments are loaded.

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800

#ifndef TW_GEMM_STAGES
#define TW_GEMM_STAGES 3
#endif
#ifndef TW_GEMM_ROWB
#define TW_GEMM_ROWB 64
#endif
#ifndef TW_WGMMA_INFLIGHT
#define TW_WGMMA_INFLIGHT 0
#endif

namespace tw_detail {

constexpr int NTHREADS = 256;
constexpr int STAGES = TW_GEMM_STAGES;
constexpr int ROWB = TW_GEMM_ROWB;
constexpr int CPA = ROWB / 16;                 // A chunks per row
constexpr int SWZ_SH = ROWB == 64 ? 1 : 2;     // A swizzle: row bits used
constexpr int STAGE_BYTES = 2 * BM * ROWB;
constexpr int STAGE_U4 = STAGE_BYTES / 16;
constexpr int A_U4 = BM * ROWB / 16;           // A tile: first half of a stage
constexpr int CHUNKS = STAGE_U4 / 2 / NTHREADS;  // A (and B) chunks per thread per stage
static_assert(ROWB == 64 || ROWB == 32, "ROWB");
static_assert(STAGES * STAGE_BYTES <= 49152, "static shared memory over 48 KiB");

TW_DI void ldmatrix_x4(unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3, unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}
TW_DI void ldmatrix_x4_trans(unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3,
                             unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}
TW_DI uint4 lds128(unsigned addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr));
  return v;
}

// f32 bits rounded to tf32 (10 fraction bits), to nearest with ties to even,
// as the TMA unit rounds for a TFLOAT32 tensor map and as
// tensorwasm_kernels::oracle::tf32_round does; sm_80 has only cvt.rna (ties
// away from zero), hence integer arithmetic on the bits. Adding 0xfff plus
// the lowest kept bit carries into the kept bits exactly when the dropped
// 13 bits are above half, or half with the kept bits odd; a carry out of the
// fraction steps the exponent, up to infinity past the largest tf32.
// Infinities stay; a NaN becomes 0x7fffe000 (the TMA unit's NaN), since
// clearing the low bits of a NaN could leave an infinity. Subnormals round
// like the rest.
TW_DI unsigned to_tf32(unsigned x) {
  const unsigned r = (x + 0xfffu + ((x >> 13) & 1u)) & 0xffffe000u;
  return (x & 0x7fffffffu) > 0x7f800000u ? 0x7fffe000u : r;
}

TW_DI void mma_tf32(float* d, const unsigned* a, const unsigned* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <bool BF16>
TW_DI void mma_16(float* d, const unsigned* a, const unsigned* b) {
  if (BF16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
}

// A tile: 16-byte unit of chunk c of row r.
TW_DI int swzA(int r, int c) { return r * CPA + (c ^ ((r >> SWZ_SH) & (CPA - 1))); }
// B tile, within a row.
TW_DI int swzB16(int k, int c) { return c ^ (k & 7); }
TW_DI int swzB32(int k, int c) { return c ^ ((k & 3) << 1); }

// One stage's loads. T is float (tf32) or unsigned short (bf16/f16).
template <typename T, bool CANON_B = false>
struct Loader {
  static constexpr int EPC = 16 / sizeof(T);  // elements per 16-byte chunk
  static constexpr int BK = ROWB / sizeof(T);
  static constexpr int CPR = 128 / EPC;       // B chunks per row

  // pa / pb: this thread's first A / B chunk at k0 = 0 (its second chunk is
  // ROWS_A rows of A / ROWS_B rows of B further). The slow path recomputes
  // the tile origin (tile_origin) instead of keeping it live across the
  // main loop.
  static constexpr int ROWS_A = NTHREADS / CPA;
  static constexpr int ROWS_B = NTHREADS / CPR;
  const T* pa;
  const T* pb;
  int M, N, K;
  long long lda, ldb;
  bool a_vec, b_vec;
  unsigned sbase;
  uint4* smem;

  TW_DI static uint4 pack(const T (&v)[EPC]) {
    if constexpr (sizeof(T) == 4) {
      return make_uint4(__float_as_uint(v[0]), __float_as_uint(v[1]), __float_as_uint(v[2]),
                        __float_as_uint(v[3]));
    } else {
      unsigned u[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) u[e] = static_cast<unsigned>(v[e]);
      return make_uint4(u[0] | (u[1] << 16), u[2] | (u[3] << 16), u[4] | (u[5] << 16),
                        u[6] | (u[7] << 16));
    }
  }

  // 16-byte units (within a stage) of this thread's it-th A and B chunks.
  TW_DI static void a_chunk(int tid, int it, int& r, int& c, int& unit) {
    const int q = tid + it * NTHREADS;
    r = q / CPA;
    c = q % CPA;
    unit = swzA(r, c);
  }
  TW_DI static void b_chunk(int tid, int it, int& k, int& c, int& unit) {
    const int q = tid + it * NTHREADS;
    k = q / CPR;
    c = q % CPR;
    if constexpr (CANON_B) {
      unit = A_U4 + (c >> 3) * (BK * 8) + k * 8 + ((c & 7) ^ (k & 7));
    } else {
      unit = A_U4 + k * CPR + (sizeof(T) == 4 ? swzB32(k, c) : swzB16(k, c));
    }
  }

  TW_DI void load(int s, int k0, int tid) const {
    const bool full_k = k0 + BK <= K;
#pragma unroll
    for (int it = 0; it < CHUNKS; ++it) {
      int r, c, unit;
      a_chunk(tid, it, r, c, unit);
      const int dst = s * STAGE_U4 + unit;
      const T* p = pa + it * ROWS_A * lda + k0;
      if (a_vec && full_k) {
        cp_async16(sbase + dst * 16, p);
      } else {
        int m0, n0;
        tile_origin(m0, n0);
        const int gr = m0 + r;
        T v[EPC];
#pragma unroll
        for (int e = 0; e < EPC; ++e) {
          const int k = k0 + c * EPC + e;
          v[e] = (gr < M && k < K) ? p[e] : T(0);
        }
        smem[dst] = pack(v);
      }
    }
#pragma unroll
    for (int it = 0; it < CHUNKS; ++it) {
      int k, c, unit;
      b_chunk(tid, it, k, c, unit);
      const int dst = s * STAGE_U4 + unit;
      const T* p = pb + (it * ROWS_B + (long long)k0) * ldb;
      if (b_vec && full_k) {
        cp_async16(sbase + dst * 16, p);
      } else {
        int m0, n0;
        tile_origin(m0, n0);
        const int gk = k0 + k;
        T v[EPC];
#pragma unroll
        for (int e = 0; e < EPC; ++e) {
          const int n = n0 + c * EPC + e;
          v[e] = (gk < K && n < N) ? p[e] : T(0);
        }
        smem[dst] = pack(v);
      }
    }
  }

  // tf32: round this thread's own chunks of the A tile of stage s to tf32 in
  // place (after its cp.async group for the stage has completed). B values
  // are rounded as they are loaded into fragment registers.
  TW_DI void round_tf32(int s, int tid) const {
#pragma unroll
    for (int it = 0; it < CHUNKS; ++it) {
      int x, c, unit;
      a_chunk(tid, it, x, c, unit);
      uint4* p = smem + s * STAGE_U4 + unit;
      uint4 v = *p;
      v.x = to_tf32(v.x);
      v.y = to_tf32(v.y);
      v.z = to_tf32(v.z);
      v.w = to_tf32(v.w);
      *p = v;
    }
  }
};

TW_DI void store_pair(float* C, int M, int N, long long ldc, int r, int c, bool vec, float v0,
                      float v1, float alpha, float beta) {
  float* p = C + (long long)r * ldc + c;
  if (vec) {
    float2 o;
    if (beta == 0.0f) {
      o = make_float2(alpha * v0, alpha * v1);
    } else {
      const float2 old = *reinterpret_cast<const float2*>(p);
      o = make_float2(fmaf(alpha, v0, beta * old.x), fmaf(alpha, v1, beta * old.y));
    }
    *reinterpret_cast<float2*>(p) = o;
  } else if (r < M) {
    if (c < N) p[0] = epi(v0, alpha, beta, p);
    if (c + 1 < N) p[1] = epi(v1, alpha, beta, p + 1);
  }
}

TW_DI void store_quad(float* C, int M, int N, long long ldc, int r, int c, bool vec,
                      const float (&v)[4], float alpha, float beta) {
  float* p = C + (long long)r * ldc + c;
  if (vec) {
    float4 o;
    if (beta == 0.0f) {
      o = make_float4(alpha * v[0], alpha * v[1], alpha * v[2], alpha * v[3]);
    } else {
      const float4 old = *reinterpret_cast<const float4*>(p);
      o = make_float4(fmaf(alpha, v[0], beta * old.x), fmaf(alpha, v[1], beta * old.y),
                      fmaf(alpha, v[2], beta * old.z), fmaf(alpha, v[3], beta * old.w));
    }
    *reinterpret_cast<float4*>(p) = o;
  } else if (r < M) {
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if (c + e < N) p[e] = epi(v[e], alpha, beta, p + e);
  }
}

template <typename L, typename T>
TW_DI void setup_loader(L& ld, const T* A, const T* B, int M, int N, int K, long long lda,
                        long long ldb, int m0, int n0, uint4* smem, int tid) {
  constexpr long long EPC = 16 / sizeof(T);
  int r, c, k, unit;
  L::a_chunk(tid, 0, r, c, unit);
  ld.pa = A + (long long)(m0 + r) * lda + c * EPC;
  L::b_chunk(tid, 0, k, c, unit);
  ld.pb = B + (long long)k * ldb + n0 + c * EPC;
  ld.M = M;
  ld.N = N;
  ld.K = K;
  ld.lda = lda;
  ld.ldb = ldb;
  ld.a_vec = aligned16(A) && lda % EPC == 0 && m0 + BM <= M;
  ld.b_vec = aligned16(B) && ldb % EPC == 0 && n0 + BN <= N;
  ld.smem = smem;
  ld.sbase = smem_addr(smem);
}

// The mma.sync GEMMs. T: float (tf32) or unsigned short (bf16 / f16).
template <typename T, bool BF16>
TW_DI void gemm_mma(const T* __restrict__ A, const T* __restrict__ B, float* __restrict__ C,
                    int M, int N, int K, long long lda, long long ldb, long long ldc,
                    long long sA, long long sB, long long sC, float alpha, float beta) {
  constexpr bool TF32 = sizeof(T) == 4;
  __shared__ __align__(128) uint4 smem[STAGES * STAGE_U4];
  using L = Loader<T>;
  constexpr int BK = L::BK;
  constexpr int KSTEP = TF32 ? 8 : 16;  // k per mma
  constexpr int PD = STAGES - 1;        // tiles in flight ahead of the multiply

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int wm = warp >> 2, wn = warp & 3;
  int m0, n0;
  tile_origin(m0, n0);
  const long long z = blockIdx.z;
  A += z * sA;
  B += z * sB;
  C += z * sC;

  L ld;
  setup_loader(ld, A, B, M, N, K, lda, ldb, m0, n0, smem, tid);
  const unsigned sbase = ld.sbase;

  float acc[4][4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

  const int numK = (K + BK - 1) / BK;
#pragma unroll
  for (int s = 0; s < PD; ++s) {
    if (s < numK) ld.load(s, s * BK, tid);
    cp_async_commit();
  }

  for (int kt = 0; kt < numK; ++kt) {
    const int s = kt % STAGES;
    cp_async_wait<PD - 1>();
    if (TF32) ld.round_tf32(s, tid);
    __syncthreads();
    {
      // Stage (kt + PD) % STAGES held tile kt - 1, multiplied by every warp
      // before this barrier.
      const int nk = kt + PD;
      if (nk < numK) ld.load(nk % STAGES, nk * BK, tid);
      cp_async_commit();
    }
    const unsigned aBase = sbase + s * STAGE_BYTES;
    const unsigned bBase = aBase + A_U4 * 16;
#pragma unroll
    for (int ks = 0; ks < BK / KSTEP; ++ks) {
      unsigned af[4][4], bfr[4][2];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = wm * 64 + i * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
        const int c = ks * 2 + (lane >> 4);
        ldmatrix_x4(af[i][0], af[i][1], af[i][2], af[i][3], aBase + swzA(r, c) * 16);
      }
      if constexpr (TF32) {
        // n8 tile j, column g of the mma is C column wn*32 + g*4 + j: a
        // thread's B values for the 4 tiles are one 16-byte chunk.
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int k = ks * 8 + t + h * 4;
          const int c = wn * 8 + g;
          const uint4 v = lds128(bBase + (k * 32 + swzB32(k, c)) * 16);
          bfr[0][h] = to_tf32(v.x);
          bfr[1][h] = to_tf32(v.y);
          bfr[2][h] = to_tf32(v.z);
          bfr[3][h] = to_tf32(v.w);
        }
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) mma_tf32(acc[i][j], af[i], bfr[j]);
      } else {
#pragma unroll
        for (int jj = 0; jj < 2; ++jj) {
          const int k = ks * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
          const int c = wn * 4 + jj * 2 + (lane >> 4);
          ldmatrix_x4_trans(bfr[2 * jj][0], bfr[2 * jj][1], bfr[2 * jj + 1][0],
                            bfr[2 * jj + 1][1], bBase + (k * 16 + swzB16(k, c)) * 16);
        }
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) mma_16<BF16>(acc[i][j], af[i], bfr[j]);
      }
    }
  }
  cp_async_wait<0>();
  tile_origin(m0, n0);

  if constexpr (TF32) {
    // Accumulator e (0/1) of n8 tile j is column wn*32 + (2t + e)*4 + j: per
    // row a thread holds columns wn*32 + 8t .. + 7.
    const bool c_vec = aligned16(C) && (ldc & 3) == 0 && m0 + BM <= M && n0 + BN <= N;
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int hr = 0; hr < 2; ++hr)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float v[4] = {acc[i][0][2 * hr + e], acc[i][1][2 * hr + e],
                              acc[i][2][2 * hr + e], acc[i][3][2 * hr + e]};
          store_quad(C, M, N, ldc, m0 + wm * 64 + i * 16 + g + hr * 8,
                     n0 + wn * 32 + (2 * t + e) * 4, c_vec, v, alpha, beta);
        }
  } else {
    // Row g (+8) of m16 tile i, columns 2t, 2t+1 of n8 tile j.
    const bool c_vec = ((reinterpret_cast<uintptr_t>(C) & 7) == 0) && (ldc & 1) == 0 &&
                       m0 + BM <= M && n0 + BN <= N;
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int hr = 0; hr < 2; ++hr)
#pragma unroll
        for (int j = 0; j < 4; ++j)
          store_pair(C, M, N, ldc, m0 + wm * 64 + i * 16 + g + hr * 8, n0 + wn * 32 + j * 8 + 2 * t,
                     c_vec, acc[i][j][2 * hr], acc[i][j][2 * hr + 1], alpha, beta);
  }
}

}  // namespace tw_detail
using namespace tw_detail;  // (a named namespace: nvcc names anonymous ones after the file path)

extern "C" __global__ void __launch_bounds__(256, 2)
tw_gemm_tf32(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
             int M, int N, int K, long long lda, long long ldb, long long ldc,
             long long sA, long long sB, long long sC, float alpha, float beta) {
  gemm_mma<float, false>(A, B, C, M, N, K, lda, ldb, ldc, sA, sB, sC, alpha, beta);
}

extern "C" __global__ void __launch_bounds__(256, 2)
tw_gemm_bf16(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B,
             float* __restrict__ C, int M, int N, int K, long long lda, long long ldb,
             long long ldc, long long sA, long long sB, long long sC, float alpha, float beta) {
  gemm_mma<unsigned short, true>(reinterpret_cast<const unsigned short*>(A),
                                 reinterpret_cast<const unsigned short*>(B), C, M, N, K, lda, ldb,
                                 ldc, sA, sB, sC, alpha, beta);
}

extern "C" __global__ void __launch_bounds__(256, 2)
tw_gemm_f16(const __half* __restrict__ A, const __half* __restrict__ B, float* __restrict__ C,
            int M, int N, int K, long long lda, long long ldb, long long ldc, long long sA,
            long long sB, long long sC, float alpha, float beta) {
  gemm_mma<unsigned short, false>(reinterpret_cast<const unsigned short*>(A),
                                  reinterpret_cast<const unsigned short*>(B), C, M, N, K, lda, ldb,
                                  ldc, sA, sB, sC, alpha, beta);
}

// ===========================================================================
// wgmma GEMMs for sm_90a (Hopper), in kernels/ptx/gemm.sm_90a.ptx only.
//
// bf16 / f16: each of the two warpgroups multiplies 64 rows x 128 columns
// with wgmma.m64n128k16 straight from the shared-memory stages (A K-major,
// B N-major, Loader<.., true>).
// tf32: wgmma takes 32-bit B operands only K-major, and A (K-major) is what
// we have in shared memory, so each warpgroup computes 64 columns x 128 rows
// of C^T = B^T A^T with wgmma.m64n128k8: B^T from registers (loaded from the
// B tile like the mma.sync fragments, rounded with to_tf32), A^T as the
// shared-memory operand (rounded to tf32 in place first).

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

namespace tw_detail {

TW_DI unsigned lds32(unsigned addr) {
  unsigned v;
  asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(addr));
  return v;
}

TW_DI unsigned long long gmma_desc(unsigned addr, unsigned lbo, unsigned sbo, unsigned layout) {
  return static_cast<unsigned long long>((addr >> 4) & 0x3FFF) |
         (static_cast<unsigned long long>((lbo >> 4) & 0x3FFF) << 16) |
         (static_cast<unsigned long long>((sbo >> 4) & 0x3FFF) << 32) |
         (static_cast<unsigned long long>(layout) << 62);
}

// A tile as a K-major operand: 64- (layout 2) or 32-byte (layout 3) swizzle,
// 8-row groups 8 * ROWB bytes apart; + 32 bytes per k16 (bf16) / k8 (tf32).
TW_DI unsigned long long a_desc(unsigned addr) {
  return gmma_desc(addr, 16, 8 * ROWB, ROWB == 64 ? 2 : 3);
}

template <bool BF16>
TW_DI void wgmma_ss(float (&d)[64], unsigned long long da, unsigned long long db) {
  if (BF16) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(da), "l"(db));
  } else {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(da), "l"(db));
  }
}

TW_DI void wgmma_rs_tf32(float (&d)[64], const unsigned (&a)[4], unsigned long long db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}

TW_DI void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
TW_DI void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
TW_DI void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
TW_DI void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
TW_DI void fence_acc(float (&d)[64]) {
#pragma unroll
  for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

template <typename T, bool BF16>
TW_DI void gemm_wgmma(const T* __restrict__ A, const T* __restrict__ B, float* __restrict__ C,
                      int M, int N, int K, long long lda, long long ldb, long long ldc,
                      long long sA, long long sB, long long sC, float alpha, float beta) {
  constexpr bool TF32 = sizeof(T) == 4;
  __shared__ __align__(1024) uint4 smem[STAGES * STAGE_U4];
  using L = Loader<T, !TF32>;
  constexpr int BK = L::BK;
  // bf16/f16 may keep one batch of wgmmas in flight across the barrier (its
  // operands are all in shared memory); then cp.async runs one tile less ahead.
  constexpr int INFLIGHT = (!TF32 && TW_WGMMA_INFLIGHT) ? 1 : 0;
  constexpr int PD = STAGES - 1 - INFLIGHT;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int wg = warp >> 2, wq = warp & 3;
  int m0, n0;
  tile_origin(m0, n0);
  const long long z = blockIdx.z;
  A += z * sA;
  B += z * sB;
  C += z * sC;

  L ld;
  setup_loader(ld, A, B, M, N, K, lda, ldb, m0, n0, smem, tid);
  const unsigned sbase = ld.sbase;

  float d[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) d[i] = 0.0f;

  const int numK = (K + BK - 1) / BK;
#pragma unroll
  for (int s = 0; s < PD; ++s) {
    if (s < numK) ld.load(s, s * BK, tid);
    cp_async_commit();
  }

  for (int kt = 0; kt < numK; ++kt) {
    const int s = kt % STAGES;
    cp_async_wait<PD - 1>();
    if (TF32) ld.round_tf32(s, tid);
    fence_proxy_async();  // cp.async / st.shared writes -> the tensor cores' reads
    __syncthreads();
    {
      // Stage (kt + PD) % STAGES held tile kt - 1 - INFLIGHT, whose wgmmas
      // every warpgroup waited for before this barrier.
      const int nk = kt + PD;
      if (nk < numK) ld.load(nk % STAGES, nk * BK, tid);
      cp_async_commit();
    }
    const unsigned aBase = sbase + s * STAGE_BYTES;
    const unsigned bBase = aBase + A_U4 * 16;
    if constexpr (TF32) {
      // B^T fragment of m64n128k8 (rows n = wg*64 + wq*16 + g (+8), k = t (+4)).
      unsigned af[BK / 8][4];
#pragma unroll
      for (int ks = 0; ks < BK / 8; ++ks)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int k = ks * 8 + t + (e >> 1) * 4;
          const int n = wg * 64 + wq * 16 + g + (e & 1) * 8;
          af[ks][e] = to_tf32(lds32(bBase + (k * 32 + swzB32(k, n >> 2)) * 16 + (n & 3) * 4));
        }
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < BK / 8; ++ks) wgmma_rs_tf32(d, af[ks], a_desc(aBase + ks * 32));
      wgmma_commit();
      wgmma_wait<0>();
    } else {
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < BK / 16; ++ks) {
        // B: 64-column halves BK * 128 bytes apart (LBO), 8-row groups 1024
        // bytes apart (SBO), k16 = 16 rows = 2048 bytes.
        const unsigned long long da = a_desc(aBase + wg * 64 * ROWB + ks * 32);
        const unsigned long long db = gmma_desc(bBase + ks * 2048, BK * 128, 1024, 1);
        wgmma_ss<BF16>(d, da, db);
      }
      wgmma_commit();
      wgmma_wait<INFLIGHT>();
    }
  }
  wgmma_wait<0>();
  cp_async_wait<0>();
  fence_acc(d);
  tile_origin(m0, n0);

  // Accumulators of m64nNk16 / m64nNk8: warp wq of the warpgroup owns rows
  // 16 wq + g (+8); d[4 j + e] is column 8 j + 2 t + (e & 1) of row
  // g + 8 (e >> 1).
  if constexpr (TF32) {
    // Rows are C columns, columns are C rows.
#pragma unroll
    for (int j = 0; j < 16; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = m0 + 8 * j + 2 * t + (e & 1);
        const int c = n0 + wg * 64 + wq * 16 + g + 8 * (e >> 1);
        if (r < M && c < N) {
          float* p = C + (long long)r * ldc + c;
          *p = epi(d[4 * j + e], alpha, beta, p);
        }
      }
  } else {
    const bool c_vec = ((reinterpret_cast<uintptr_t>(C) & 7) == 0) && (ldc & 1) == 0 &&
                       m0 + BM <= M && n0 + BN <= N;
#pragma unroll
    for (int hr = 0; hr < 2; ++hr)
#pragma unroll
      for (int j = 0; j < 16; ++j)
        store_pair(C, M, N, ldc, m0 + wg * 64 + wq * 16 + g + hr * 8, n0 + j * 8 + 2 * t, c_vec,
                   d[4 * j + 2 * hr], d[4 * j + 2 * hr + 1], alpha, beta);
  }
}

}  // namespace tw_detail

#include "gemm_tma.cuh"
#include "gemm_tma_tf32.cuh"

using namespace tw_detail;  // (a named namespace: nvcc names anonymous ones after the file path)

extern "C" __global__ void __launch_bounds__(256, 2)
tw_gemm_bf16_sm90a(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B,
                   float* __restrict__ C, int M, int N, int K, long long lda, long long ldb,
                   long long ldc, long long sA, long long sB, long long sC, float alpha,
                   float beta) {
  gemm_wgmma<unsigned short, true>(reinterpret_cast<const unsigned short*>(A),
                                   reinterpret_cast<const unsigned short*>(B), C, M, N, K, lda,
                                   ldb, ldc, sA, sB, sC, alpha, beta);
}

extern "C" __global__ void __launch_bounds__(256, 2)
tw_gemm_f16_sm90a(const __half* __restrict__ A, const __half* __restrict__ B,
                  float* __restrict__ C, int M, int N, int K, long long lda, long long ldb,
                  long long ldc, long long sA, long long sB, long long sC, float alpha,
                  float beta) {
  gemm_wgmma<unsigned short, false>(reinterpret_cast<const unsigned short*>(A),
                                    reinterpret_cast<const unsigned short*>(B), C, M, N, K, lda,
                                    ldb, ldc, sA, sB, sC, alpha, beta);
}

extern "C" __global__ void __launch_bounds__(256, 2)
tw_gemm_tf32_sm90a(const float* __restrict__ A, const float* __restrict__ B,
                   float* __restrict__ C, int M, int N, int K, long long lda, long long ldb,
                   long long ldc, long long sA, long long sB, long long sC, float alpha,
                   float beta) {
  gemm_wgmma<float, false>(A, B, C, M, N, K, lda, ldb, ldc, sA, sB, sC, alpha, beta);
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

#endif  // __CUDA_ARCH__ >= 800
