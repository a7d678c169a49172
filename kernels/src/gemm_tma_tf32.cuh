// tw_gemm_tf32_sm90a_tma (and _m128, _m64): the TF32 GEMM with TMA
// loads and warp specialisation. Included by gemm.cu after gemm_tma.cuh
// (whose TensorMap, mbarrier, TMA and setmaxnreg helpers it uses), inside
// the sm_90a guard; docs/tensor-ops.md is the contract.
//
// A and B come through tensor maps of type TFLOAT32
// (CU_TENSOR_MAP_DATA_TYPE_TFLOAT32, not the _FTZ one: subnormals are
// kept): the TMA unit rounds each f32 to tf32 as it copies it into shared
// memory, to nearest with ties to even (NaN becomes 0x7fffe000, a NaN), as
// the other TF32 GEMMs and the CPU oracle round. So every operand lands in
// shared memory ready for the tensor cores, and the kernel has no rounding
// pass.
//
// wgmma takes 32-bit operands from shared memory only K-major, and B ([K,
// N], N contiguous) is not, so the kernel computes the tile of
// C^T = B^T A^T: B^T is wgmma's register operand (each consumer thread loads
// its fragments from the B stage), A^T its shared-memory operand (A rows
// are K-major).
//
// Tile: TBM rows x 128 columns of C: 256 x 128 (the main entry), 128 x 128
// (_m128), 64 x 128 (_m64); with the rounding pass gone, 256 x 128 beats
// 128 x 256 (it loads less B per multiply-add). Stage: TBM x 32 of A (one
// {32, TBM, 1} box), 32 x 128 of B (four {32, 32, 1} boxes), 128-byte
// swizzle. Warpgroup 0 issues the TMA loads; consumer cw (0, 1) owns 64
// columns of the tile and all TBM rows: one wgmma.m64n(TBM)k8 per k8, whose
// 64 rows are C columns and whose TBM columns are C rows. The
// wgmmas of tile kt run while the consumers load tile kt + 1's B fragments
// into a second set of registers; wgmma_wait<1> then retires tile kt - 1
// and releases its stage. The column order inside a consumer's 64 columns
// (colw below) makes a thread's two fragment rows neighbouring columns, one
// 8-byte load per k, and keeps a half-warp's loads on 32 different banks
// through the swizzle (the plain order had two-way bank conflicts).
// Grid: (ceil(N / TBN), ceil(M / TBM), batch).

namespace tw_detail {
namespace tma {

constexpr int T32_BK = 32;
constexpr int T32_B_BOX_BYTES = T32_BK * 32 * 4;  // 4 KiB: 32 K rows x 32 columns

// A tile of TBM x 128: its stage, its ring depth (as many stages as fit
// 192 KiB, at most 8) and the dynamic shared memory it needs (the same sum
// as tma_shared_bytes in kernels/src/table/gemm.rs).
template <int TBM>
struct Shape32 {
  static constexpr int TBN = 128;
  static constexpr int A_BYTES = TBM * T32_BK * 4;
  static constexpr int B_BYTES = TBN / 32 * T32_B_BOX_BYTES;
  static constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
  static constexpr int STAGES = 192 * 1024 / STAGE_BYTES < 8 ? 192 * 1024 / STAGE_BYTES : 8;
  // Stages, 2 * STAGES mbarriers (full, empty), 1024 bytes of slack.
  static constexpr int SMEM_BYTES = STAGES * STAGE_BYTES + 2 * STAGES * 8 + 1024;
  static_assert(SMEM_BYTES <= 227 * 1024, "over the sm_90 opt-in shared memory");
};

}  // namespace tma

template <int N>
TW_DI void wgmma_rs_tf32_n(float (&d)[N / 2], const unsigned (&a)[4], unsigned long long db);
template <>
TW_DI void wgmma_rs_tf32_n<256>(float (&d)[128], const unsigned (&a)[4], unsigned long long db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
      "{%128, %129, %130, %131}, %132, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
template <>
TW_DI void wgmma_rs_tf32_n<128>(float (&d)[64], const unsigned (&a)[4], unsigned long long db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "{%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
template <>
TW_DI void wgmma_rs_tf32_n<64>(float (&d)[32], const unsigned (&a)[4], unsigned long long db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "{%32, %33, %34, %35}, %36, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
TW_DI uint2 lds64(unsigned addr) {
  uint2 v;
  asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "r"(addr));
  return v;
}

template <int TBM>
TW_DI void gemm_tma_tf32(const TensorMap& tmA, const TensorMap& tmB, float* __restrict__ C,
                         int M, int N, int K, long long ldc, long long sC, int zA, int zB,
                         float alpha, float beta) {
  using namespace tma;
  using S = Shape32<TBM>;
  constexpr int TBN = S::TBN;
  using Frags = unsigned[T32_BK / 8][4];  // B^T fragments of one K tile
  extern __shared__ unsigned char dsmem[];
  const unsigned base = (smem_addr(dsmem) + 1023u) & ~1023u;
  const unsigned bars = base + S::STAGES * S::STAGE_BYTES;
  // full(s) = bars + 8 s, empty(s) = bars + 8 (STAGES + s).
  const int tid = threadIdx.x;
  const int wg = tid >> 7;
  init_ring<S::STAGES>(bars);

  int m0, n0;
  tile_origin<TBM, TBN, T_GROUP_M>(m0, n0);
  const int z = blockIdx.z;
  const int numK = (K + T32_BK - 1) / T32_BK;

  if (wg == 0) {
    setmaxnreg_dec<40>();
    if (tid == 0) {
      prefetch_maps(tmA, tmB);
      for (int kt = 0; kt < numK; ++kt) {
        const int s = kt % S::STAGES;
        mbar_wait(bars + 8 * (S::STAGES + s), ((kt / S::STAGES) & 1) ^ 1);
        const unsigned full = bars + 8 * s;
        mbar_expect_tx(full, S::STAGE_BYTES);
        const unsigned a = base + s * S::STAGE_BYTES;
        tma_load_3d(a, &tmA, full, kt * T32_BK, m0, z * zA);
#pragma unroll
        for (int j = 0; j < TBN / 32; ++j)
          tma_load_3d(a + S::A_BYTES + j * T32_B_BOX_BYTES, &tmB, full, n0 + 32 * j,
                      kt * T32_BK, z * zB);
      }
    }
    return;
  }

  setmaxnreg_inc<232>();
  const int cw = wg - 1;
  const int lane = tid & 31, wq = (tid >> 5) & 3;
  const int g = lane >> 2, t = lane & 3;
  float d[TBM / 2];
#pragma unroll
  for (int i = 0; i < TBM / 2; ++i) d[i] = 0.0f;

  // Row wq*16 + g + 8h of the m64 is tile column cw*64 + colw + h. B box
  // col / 32 holds row k at 128 k bytes, 16-byte chunk (col % 32) / 4
  // swizzled with k % 8; in a k8 step the thread's rows are k = t (a[0],
  // a[1]) and t + 4 (a[2], a[3]).
  const int colw = 32 * (wq >> 1) + 16 * ((g >> 1) & 1) + 8 * (wq & 1) + 4 * (g >> 2) + 2 * (g & 1);
  unsigned boff[2];
#pragma unroll
  for (int hk = 0; hk < 2; ++hk) {
    const int col = cw * 64 + colw;
    const int k = t + 4 * hk;
    boff[hk] = S::A_BYTES + (col >> 5) * T32_B_BOX_BYTES + k * 128 +
               ((((col & 31) >> 2) ^ k) << 4) + (col & 3) * 4;
  }
  // Tile kt's B fragments, once its stage has landed (already tf32: the
  // TMA unit rounded them).
  auto load_b = [&](int kt, Frags& f) {
    const int s = kt % S::STAGES;
    mbar_wait(bars + 8 * s, (kt / S::STAGES) & 1);
    const unsigned stage = base + s * S::STAGE_BYTES;
#pragma unroll
    for (int ks = 0; ks < T32_BK / 8; ++ks)
#pragma unroll
      for (int hk = 0; hk < 2; ++hk) {
        const uint2 v = lds64(stage + boff[hk] + ks * 8 * 128);
        f[ks][2 * hk] = v.x;
        f[ks][2 * hk + 1] = v.y;
      }
  };
  // Tile kt's wgmmas; load_b(kt) has waited for its stage.
  auto issue = [&](int kt, const Frags& f) {
    const unsigned a = base + (kt % S::STAGES) * S::STAGE_BYTES;
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < T32_BK / 8; ++ks)
      wgmma_rs_tf32_n<TBM>(d, f[ks], gmma_desc(a + ks * 32, 16, 1024, 1));
    wgmma_commit();
  };
  // Tile kt in flight on `cur`; wait<1> retires tile kt - 1, whose stage
  // goes back to the producer and whose registers (`nxt`) take tile
  // kt + 1's fragments. The register operands of a wgmma in flight are
  // never written (ptxas would serialise the wgmmas), hence two sets and a
  // loop unrolled by two.
  auto step = [&](int kt, const Frags& cur, Frags& nxt) {
    issue(kt, cur);
    wgmma_wait<1>();
    if (kt > 0 && lane == 0) mbar_arrive(bars + 8 * (S::STAGES + (kt - 1) % S::STAGES));
    if (kt + 1 < numK) load_b(kt + 1, nxt);
  };
  Frags f0, f1;
  load_b(0, f0);
  for (int kt = 0; kt < numK; kt += 2) {
    step(kt, f0, f1);
    if (kt + 1 < numK) step(kt + 1, f1, f0);
  }
  wgmma_wait<0>();
#pragma unroll
  for (int i = 0; i < TBM / 2; ++i) asm volatile("" : "+f"(d[i])::"memory");
  tile_origin<TBM, TBN, T_GROUP_M>(m0, n0);

  // d[4 j + e]: row (C column n0 + cw*64 + colw + (e >> 1)), column (C row
  // m0 + 8 j + 2 t + (e & 1)): a thread's e and e + 2 are neighbours in a
  // row of C, stored as one float2 where C allows it.
  C += (long long)z * sC;
  const bool pairs = (reinterpret_cast<unsigned long long>(C) & 7) == 0 && (ldc & 1) == 0;
  const int c = n0 + cw * 64 + colw;
#pragma unroll
  for (int j = 0; j < TBM / 8; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int r = m0 + 8 * j + 2 * t + e;
      if (r >= M) continue;
      float* p = C + (long long)r * ldc + c;
      const float v0 = d[4 * j + e], v1 = d[4 * j + e + 2];
      if (pairs && c + 1 < N) {
        float2 o = make_float2(alpha * v0, alpha * v1);
        if (beta != 0.0f) {
          const float2 old = *reinterpret_cast<const float2*>(p);
          o = make_float2(fmaf(alpha, v0, beta * old.x), fmaf(alpha, v1, beta * old.y));
        }
        *reinterpret_cast<float2*>(p) = o;
      } else {
        if (c < N) *p = epi(v0, alpha, beta, p);
        if (c + 1 < N) p[1] = epi(v1, alpha, beta, p + 1);
      }
    }
}

}  // namespace tw_detail

#define TW_GEMM_TMA_TF32_ENTRY(name, TBM)                                                     \
  extern "C" __global__ void __launch_bounds__(tw_detail::tma::T_THREADS, 1)                  \
  name(const __grid_constant__ tw_detail::TensorMap tmA,                                     \
       const __grid_constant__ tw_detail::TensorMap tmB, float* __restrict__ C, int M, int N, \
       int K, long long ldc, long long sC, int zA, int zB, float alpha, float beta) {          \
    tw_detail::gemm_tma_tf32<TBM>(tmA, tmB, C, M, N, K, ldc, sC, zA, zB, alpha, beta);        \
  }

TW_GEMM_TMA_TF32_ENTRY(tw_gemm_tf32_sm90a_tma, 256)
TW_GEMM_TMA_TF32_ENTRY(tw_gemm_tf32_sm90a_tma_m128, 128)
TW_GEMM_TMA_TF32_ENTRY(tw_gemm_tf32_sm90a_tma_m64, 64)
#undef TW_GEMM_TMA_TF32_ENTRY
