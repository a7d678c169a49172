// tma_box_copy(map, out, x, y, offset, bytes): thread 0 loads the box of
// the tensor map at (x, y) with one TMA copy (cp.async.bulk.tensor, an
// mbarrier counting `bytes`) into dynamic shared memory at `offset`; then
// every thread copies the box out to `out` (the launch gives `offset` +
// `bytes` + 136 bytes of dynamic shared memory at least). sm_90a only (the target of the TMA GEMMs); the driver test
// drivers/cuda/tests/tma.rs launches it with `offset` past 48 KiB. Built by
// scripts/build-kernels.sh into tma_box_copy.ptx.

struct alignas(64) TensorMap {
  unsigned long long bits[16];
};

extern "C" __global__ void tma_box_copy(const __grid_constant__ TensorMap map, float* out, int x,
                                        int y, unsigned offset, unsigned bytes) {
  extern __shared__ __align__(1024) unsigned char smem[];
  // The box at `offset` rounded up to 128 bytes (TMA's alignment for an
  // unswizzled box), its mbarrier just past it (as the GEMMs lay them out).
  const unsigned base = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const unsigned dst = (base + offset + 127u) & ~127u;
  const unsigned bar = (dst + bytes + 7u) & ~7u;
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(bar) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
                 : "memory");
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes "
        "[%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
        "l"(reinterpret_cast<unsigned long long>(&map)), "r"(x), "r"(y), "r"(bar)
        : "memory");
  }
  unsigned done;
  do {
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar)
        : "memory");
  } while (!done);
  const float* box = reinterpret_cast<const float*>(smem + (dst - base));
  for (unsigned i = threadIdx.x; i < bytes / 4; i += blockDim.x) out[i] = box[i];
}
