// Hopper GEMMs with TMA loads, warp specialisation and dynamic shared
// memory above 48 KiB: tw_gemm_{bf16,f16}_sm90a_tma (128 x 256 tiles),
// _tma_n128 (128 x 128) and _tma_n64 (128 x 64). Included by gemm.cu inside
// its sm_90a guard (kernels/ptx/gemm.sm_90a.ptx only); docs/tensor-ops.md is
// the contract, kernels/src/table/gemm.rs picks the tile.
//
//   C[z] = alpha * A[z] @ B[z] + beta * C[z]      (beta == 0: C is not read)
//
// A and B reach the kernel as TMA descriptors (CUtensorMap, 128 bytes,
// built by the host with cuTensorMapEncodeTiled): A as {K, M, batch} with a
// {64, 128, 1} box, B as {N, K, batch} with a {64, 64, 1} box, both 16-bit,
// 128-byte swizzle. The tensor unit fills what lies outside the tensor with
// zeros, so edges in M, N and K need no code here and nothing outside A or
// B is ever read. zA / zB (0 or 1) multiply the batch coordinate: 0 reads
// batch 0 for every z (a broadcast operand).
//
// Block: 384 threads, three warpgroups. Warpgroup 0 is the producer: one
// thread issues the TMA loads of 128 x 64 of A and 64 x TBN of B per stage
// into a ring of stages (as many as fit 192 KiB; mbarriers "full" and
// "empty" per stage). Warpgroups 1 and 2 are the consumers: each multiplies
// 64 rows x TBN columns with wgmma.m64nTBNk16 straight from shared memory
// (A K-major, B N-major), keeps one tile's wgmmas in flight while it
// releases the stage before, and writes its part of the tile of C.
// Registers move from the producer to the consumers with setmaxnreg.
//
// Persistent: grid (min(tiles, TMA_PERSISTENT_BLOCKS of table/gemm.rs), 1,
// 1); block b takes tiles b, b + gridDim.x, ... of the
// ceil(M / 128) * ceil(N / TBN) * batch (batch by batch, each walked in
// groups of T_GROUP_M tile rows like the other GEMMs). The ring runs on
// across tiles, so the producer loads the next tile while the consumers
// store this one. Stores: interior tiles with C 16-byte aligned and ldc a
// multiple of 4 go through 20 KiB of shared memory, 32 columns at a time,
// so that each warp store writes whole 128-byte lines (the H100 measured
// the plain 8-byte stores, 8 rows per warp store, as most of the gap to
// cuBLAS); other tiles store pairs with bounds checks. Every path adds the
// same products in the same order: C is the same bit for bit.

namespace tw_detail {
namespace tma {

constexpr int TBM = 128;
constexpr int TBK = 64;
constexpr int T_A_BYTES = TBM * TBK * 2;           // 16 KiB
constexpr int T_B_BOX_BYTES = TBK * 64 * 2;        // 8 KiB: 64 K rows x 64 columns
constexpr int T_THREADS = 384;
constexpr int T_CONSUMER_WARPS = 8;
// Tile rows per group of the launch order (tile_origin): 16 measured best
// for these tiles on the H100 (8 and 4 within a few percent, less even).
#ifndef TW_TMA_GROUP_M
#define TW_TMA_GROUP_M 16
#endif
constexpr int T_GROUP_M = TW_TMA_GROUP_M;

// The epilogue's staging: per consumer warp 16 rows x 32 columns of f32,
// rows padded to 40 words (conflict-free float2 writes, float4 reads);
// 20 KiB in all, after the ring's mbarriers.
constexpr int T_EPI_LD = 40;
constexpr int T_EPI_WARP = 16 * T_EPI_LD;
constexpr int T_EPI_BYTES = T_CONSUMER_WARPS * T_EPI_WARP * 4;

// A tile of TBN (256, 128 or 64) columns: its stage (A, then TBN / 64 boxes of
// B), its ring depth (as many stages as fit 192 KiB) and the dynamic shared
// memory it needs: the stages (1024-byte aligned for the 128-byte swizzle),
// 2 * stages mbarriers, the epilogue's staging and 1024 bytes of slack to
// align the window.
template <int TBN>
struct Shape {
  static constexpr int B_BYTES = TBK * TBN * 2;
  static constexpr int STAGE_BYTES = T_A_BYTES + B_BYTES;
  static constexpr int STAGES = 192 * 1024 / STAGE_BYTES;
  static constexpr int EPI_OFFSET = STAGES * STAGE_BYTES + 2 * STAGES * 8;
  static constexpr int SMEM_BYTES = EPI_OFFSET + T_EPI_BYTES + 1024;
  static_assert(SMEM_BYTES <= 227 * 1024, "over the sm_90 opt-in shared memory");
};

}  // namespace tma

// A CUtensorMap as a kernel parameter: 128 opaque bytes, 64-byte aligned.
struct alignas(64) TensorMap {
  unsigned long long bits[16];
};

TW_DI void mbar_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
TW_DI void mbar_expect_tx(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
TW_DI void mbar_arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Waits until the phase of parity `parity` has completed.
TW_DI void mbar_wait(unsigned bar, unsigned parity) {
  unsigned done;
  do {
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

TW_DI void tma_load_3d(unsigned dst, const TensorMap* map, unsigned bar, int c0, int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes "
      "[%0], [%1, {%3, %4, %5}], [%2];\n" ::"r"(dst),
      "l"(reinterpret_cast<unsigned long long>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}

template <int N>
TW_DI void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
TW_DI void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}

// Thread 0 sets up a ring's mbarriers at `bars`: STAGES "full" (one arrival:
// the producer's, plus the TMA bytes) and STAGES "empty" (one per consumer
// warp); then the block waits for them.
template <int STAGES>
TW_DI void init_ring(unsigned bars) {
  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(bars + 8 * s, 1);
      mbar_init(bars + 8 * (STAGES + s), tma::T_CONSUMER_WARPS);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
}

// The producer thread fetches both descriptors before its first copy.
TW_DI void prefetch_maps(const TensorMap& a, const TensorMap& b) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<unsigned long long>(&a))
               : "memory");
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<unsigned long long>(&b))
               : "memory");
}

template <bool BF16>
TW_DI void wgmma256(float (&d)[128], unsigned long long da, unsigned long long db,
                    unsigned scale_d) {
  if (BF16) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
        "%128, %129, p, 1, 1, 0, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "l"(da), "l"(db), "r"(scale_d));
  } else {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
        "%128, %129, p, 1, 1, 0, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "l"(da), "l"(db), "r"(scale_d));
  }
}

template <bool BF16>
TW_DI void wgmma64(float (&d)[32], unsigned long long da, unsigned long long db,
                   unsigned scale_d) {
  if (BF16) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "%32, %33, p, 1, 1, 0, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(da), "l"(db), "r"(scale_d));
  } else {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "%32, %33, p, 1, 1, 0, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(da), "l"(db), "r"(scale_d));
  }
}

// Tile t of a persistent walk (t < tiles_m * tiles_n * batch): batch z =
// t / (tiles_m * tiles_n), then within a batch groups of T_GROUP_M tile
// rows, down the rows of a group first (tile_origin's order), so the blocks
// in flight share panels of A and B in L2. U: unsigned (every walk of fewer
// than 2^32 tiles: 64-bit division is a long subroutine on the producer's
// path to its first load) or unsigned long long.
template <typename U>
TW_DI void tma_tile(U t, U tiles_m, U tiles_n, int& m0, int& n0, int& z, int tbn) {
  const U per_batch = tiles_m * tiles_n;
  const U zb = t / per_batch;
  const U pid = t - zb * per_batch;
  const U per_group = static_cast<U>(tma::T_GROUP_M) * tiles_n;
  const U group = pid / per_group;
  const U first_m = group * tma::T_GROUP_M;
  const U size_m = min(tiles_m - first_m, static_cast<U>(tma::T_GROUP_M));
  const U local = pid - group * per_group;
  const U col = local / size_m;
  z = static_cast<int>(zb);
  m0 = static_cast<int>((first_m + (local - col * size_m)) * tma::TBM);
  n0 = static_cast<int>(col * tbn);
}
TW_DI void tma_tile(long long t, long long tiles, int tiles_m, int tiles_n, int& m0, int& n0,
                    int& z, int tbn) {
  if (tiles <= 0xffffffffll)
    tma_tile<unsigned>(static_cast<unsigned>(t), tiles_m, tiles_n, m0, n0, z, tbn);
  else
    tma_tile<unsigned long long>(t, tiles_m, tiles_n, m0, n0, z, tbn);
}

template <bool BF16, int TBN>
TW_DI void gemm_tma(const TensorMap& tmA, const TensorMap& tmB, float* __restrict__ C, int M,
                    int N, int K, int batch, long long ldc, long long sC, int zA, int zB,
                    float alpha, float beta) {
  using namespace tma;  // T_* / TB*: this kernel's constants
  constexpr int T_STAGES = Shape<TBN>::STAGES;
  constexpr int T_STAGE_BYTES = Shape<TBN>::STAGE_BYTES;
  extern __shared__ unsigned char dsmem[];
  const unsigned base = (smem_addr(dsmem) + 1023u) & ~1023u;
  const unsigned bars = base + T_STAGES * T_STAGE_BYTES;
  // full(s) = bars + 8 s; empty(s) = bars + 8 (T_STAGES + s).
  const int tid = threadIdx.x;
  const int wg = tid >> 7;
  init_ring<T_STAGES>(bars);

  const int tiles_m = (M + TBM - 1) / TBM, tiles_n = (N + TBN - 1) / TBN;
  const long long tiles = (long long)tiles_m * tiles_n * batch;
  const int numK = (K + TBK - 1) / TBK;

  // Both roles walk the same tiles (blockIdx.x, + gridDim.x, ...) and the
  // same ring: stage s and its phase run on across tiles, so the producer
  // fills the next tile's stages while the consumers store this one.
  if (wg == 0) {
    setmaxnreg_dec<40>();
    if (tid == 0) {
      prefetch_maps(tmA, tmB);
      int s = 0;
      unsigned ph = 0;
      for (long long t = blockIdx.x; t < tiles; t += gridDim.x) {
        int m0, n0, z;
        tma_tile(t, tiles, tiles_m, tiles_n, m0, n0, z, TBN);
        for (int kt = 0; kt < numK; ++kt) {
          // The stage's previous use released by every consumer warp; the
          // first round passes at once.
          mbar_wait(bars + 8 * (T_STAGES + s), ph ^ 1);
          const unsigned full = bars + 8 * s;
          mbar_expect_tx(full, T_STAGE_BYTES);
          const unsigned a = base + s * T_STAGE_BYTES;
          const unsigned b = a + T_A_BYTES;
          tma_load_3d(a, &tmA, full, kt * TBK, m0, z * zA);
#pragma unroll
          for (int j = 0; j < TBN / 64; ++j)
            tma_load_3d(b + j * T_B_BOX_BYTES, &tmB, full, n0 + 64 * j, kt * TBK, z * zB);
          if (++s == T_STAGES) {
            s = 0;
            ph ^= 1;
          }
        }
      }
    }
    return;
  }

  setmaxnreg_inc<232>();
  const int cw = wg - 1;  // this consumer's 64 rows: cw * 64
  const int lane = tid & 31, wq = (tid >> 5) & 3;
  constexpr int ND = TBN / 2;  // accumulators per thread
  int s = 0;
  unsigned ph = 0;
  for (long long t = blockIdx.x; t < tiles; t += gridDim.x) {
    float d[ND];
#pragma unroll
    for (int i = 0; i < ND; ++i) d[i] = 0.0f;
    int prev = 0;  // the stage of the K tile before
    for (int kt = 0; kt < numK; ++kt) {
      mbar_wait(bars + 8 * s, ph);
      const unsigned a = base + s * T_STAGE_BYTES + cw * 64 * 128;
      const unsigned b = base + s * T_STAGE_BYTES + T_A_BYTES;
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < TBK / 16; ++ks) {
        // A: 128-byte rows, 8-row groups 1024 bytes apart, + 32 bytes per
        // k16. B: 64-column boxes 8 KiB apart (LBO), 8-row groups 1024
        // bytes apart (SBO), k16 = 16 rows = 2048 bytes.
        const unsigned long long da = gmma_desc(a + ks * 32, 16, 1024, 1);
        const unsigned long long db = gmma_desc(b + ks * 2048, T_B_BOX_BYTES, 1024, 1);
        if constexpr (TBN == 256)
          wgmma256<BF16>(d, da, db, 1);
        else if constexpr (TBN == 128)
          wgmma_ss<BF16>(d, da, db);
        else
          wgmma64<BF16>(d, da, db, 1);
      }
      wgmma_commit();
      // The wgmmas of K tile kt - 1 are done: release its stage.
      wgmma_wait<1>();
      if (kt > 0 && lane == 0) mbar_arrive(bars + 8 * (T_STAGES + prev));
      prev = s;
      if (++s == T_STAGES) {
        s = 0;
        ph ^= 1;
      }
    }
    wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < ND; ++i) asm volatile("" : "+f"(d[i])::"memory");
    // The last K tile's stage goes back before the stores: the producer is
    // already loading the next tile.
    if (lane == 0) mbar_arrive(bars + 8 * (T_STAGES + prev));
    int m0, n0, z;
    tma_tile(t, tiles, tiles_m, tiles_n, m0, n0, z, TBN);

    // Accumulators of m64nTBNk16: warp wq owns rows 16 wq + g (+8); d[4 j + e]
    // is column 8 j + 2 t + (e & 1) of row g + 8 (e >> 1).
    const int g = lane >> 2, q = lane & 3;
    float* Cz = C + (long long)z * sC;
    const bool inside = m0 + TBM <= M && n0 + TBN <= N;
    if (inside && (reinterpret_cast<uintptr_t>(Cz) & 15) == 0 && (ldc & 3) == 0) {
      // Through shared memory, 32 columns at a time: each warp store then
      // writes whole 128-byte lines (4 rows x 32 columns) instead of 8
      // rows x 8 bytes.
      float* eb = reinterpret_cast<float*>(dsmem + (base - smem_addr(dsmem)) +
                                           Shape<TBN>::EPI_OFFSET) +
                  (cw * 4 + wq) * T_EPI_WARP;
      const int rr = lane >> 3, cc = (lane & 7) * 4;
      float* crow = Cz + (long long)(m0 + cw * 64 + wq * 16 + rr) * ldc + n0 + cc;
#pragma unroll
      for (int jc = 0; jc < TBN / 32; ++jc) {
#pragma unroll
        for (int hr = 0; hr < 2; ++hr)
#pragma unroll
          for (int jj = 0; jj < 4; ++jj)
            *reinterpret_cast<float2*>(eb + (g + 8 * hr) * T_EPI_LD + jj * 8 + 2 * q) =
                make_float2(d[4 * (jc * 4 + jj) + 2 * hr], d[4 * (jc * 4 + jj) + 2 * hr + 1]);
        __syncwarp();
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float4 v = *reinterpret_cast<const float4*>(eb + (4 * i + rr) * T_EPI_LD + cc);
          float4* p = reinterpret_cast<float4*>(crow + (long long)(4 * i) * ldc + jc * 32);
          float4 o;
          if (beta == 0.0f) {
            o = make_float4(alpha * v.x, alpha * v.y, alpha * v.z, alpha * v.w);
          } else {
            const float4 c = *p;
            o = make_float4(fmaf(alpha, v.x, beta * c.x), fmaf(alpha, v.y, beta * c.y),
                            fmaf(alpha, v.z, beta * c.z), fmaf(alpha, v.w, beta * c.w));
          }
          *p = o;
        }
        __syncwarp();
      }
      continue;
    }
    const bool c_vec = ((reinterpret_cast<uintptr_t>(Cz) & 7) == 0) && (ldc & 1) == 0 && inside;
#pragma unroll
    for (int hr = 0; hr < 2; ++hr)
#pragma unroll
      for (int j = 0; j < TBN / 8; ++j)
        store_pair(Cz, M, N, ldc, m0 + cw * 64 + wq * 16 + g + hr * 8, n0 + j * 8 + 2 * q, c_vec,
                   d[4 * j + 2 * hr], d[4 * j + 2 * hr + 1], alpha, beta);
  }
}


}  // namespace tw_detail

#define TW_GEMM_TMA_ENTRY(name, BF16, TBN)                                                   \
  extern "C" __global__ void __launch_bounds__(tw_detail::tma::T_THREADS, 1)                  \
  name(const __grid_constant__ tw_detail::TensorMap tmA,                                     \
       const __grid_constant__ tw_detail::TensorMap tmB, float* __restrict__ C, int M, int N, \
       int K, int batch, long long ldc, long long sC, int zA, int zB, float alpha, float beta) { \
    tw_detail::gemm_tma<BF16, TBN>(tmA, tmB, C, M, N, K, batch, ldc, sC, zA, zB, alpha, beta); \
  }

TW_GEMM_TMA_ENTRY(tw_gemm_bf16_sm90a_tma, true, 256)
TW_GEMM_TMA_ENTRY(tw_gemm_f16_sm90a_tma, false, 256)
TW_GEMM_TMA_ENTRY(tw_gemm_bf16_sm90a_tma_n128, true, 128)
TW_GEMM_TMA_ENTRY(tw_gemm_f16_sm90a_tma_n128, false, 128)
TW_GEMM_TMA_ENTRY(tw_gemm_bf16_sm90a_tma_n64, true, 64)
TW_GEMM_TMA_ENTRY(tw_gemm_f16_sm90a_tma_n64, false, 64)
#undef TW_GEMM_TMA_ENTRY
