// What survives a poisoned CUDA context (issue 16's first question), on a
// real GPU: a kernel stores to an illegal address; then every later call,
// host reads of managed memory (pages last on the host, pages last on the
// device), cuDevicePrimaryCtxReset, a retained or a fresh context, and a
// kernel after them. Results and the H100 run: docs/verification/
// 2026-11-27-bounds-faults-gpu.md.
//
//   nvcc -O2 -o poisoned_context scripts/experiments/poisoned_context.cu -lcuda
//   ./poisoned_context host     # after the fault, read managed pages last on the host
//   ./poisoned_context device   # ... pages last on the device
//   ./poisoned_context old      # reset the primary context, read an old pointer
//   ./poisoned_context serve    # reset, retain, load, allocate, launch: timed
//   ./poisoned_context fresh    # reset, then a new (non-primary) context
//
// A host read that faults ends the process with a line saying so (a
// SIGSEGV handler), so each mode is its own process.
#include <cuda.h>
#include <chrono>
#include <unistd.h>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <cstdint>

static const char* reading = "";
static void on_fault(int sig) {
  char buf[256];
  int n = snprintf(buf, sizeof buf, "  host read of %s: signal %d (the process ends here)\n", reading, sig);
  write(1, buf, n);
  _exit(3);
}

#define CK(x) do { CUresult r = (x); const char* m = ""; cuGetErrorName(r, &m); printf("%-60s -> %d %s\n", #x, (int)r, m); } while (0)

static const char* PTX = R"(
.version 7.8
.target sm_90
.address_size 64
.visible .entry inc(.param .u64 p, .param .u32 n) {
  .reg .pred %p; .reg .b32 %r<6>; .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [p]; ld.param.u32 %r1, [n];
  mov.u32 %r2, %ctaid.x; mov.u32 %r3, %ntid.x; mov.u32 %r4, %tid.x;
  mad.lo.s32 %r5, %r2, %r3, %r4;
  setp.ge.u32 %p, %r5, %r1; @%p ret;
  mul.wide.u32 %rd2, %r5, 4; add.s64 %rd3, %rd1, %rd2;
  ld.global.u32 %r2, [%rd3]; add.s32 %r2, %r2, 1; st.global.u32 [%rd3], %r2;
  ret;
}
.visible .entry wild() {
  .reg .b64 %rd<2>; .reg .b32 %r<2>;
  mov.u64 %rd1, 0x10; mov.u32 %r1, 7; st.global.u32 [%rd1], %r1;
  ret;
}
)";

// Reads n words from p on the host; -1 if it faulted, else the number of
// words that differ from `expect(i)`.
template <class F>
static long check(const char* what, volatile uint32_t* p, size_t n, F expect) {
  struct sigaction sa{}; sa.sa_handler = on_fault; sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, nullptr); sigaction(SIGBUS, &sa, nullptr);
  reading = what; fflush(stdout);
  long bad = 0;
  for (size_t i = 0; i < n; i++) if (p[i] != expect(i)) bad++;
  printf("  host read of %s: readable, %ld of %zu words differ\n", what, bad, n);
  return bad;
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "host";
  using clk = std::chrono::steady_clock;
  CK(cuInit(0));
  CUdevice dev; CK(cuDeviceGet(&dev, 0));
  CUcontext ctx; CK(cuDevicePrimaryCtxRetain(&ctx, dev)); CK(cuCtxSetCurrent(ctx));
  CUmodule mod; CK(cuModuleLoadData(&mod, PTX));
  CUfunction inc, wild; CK(cuModuleGetFunction(&inc, mod, "inc")); CK(cuModuleGetFunction(&wild, mod, "wild"));
  const size_t n = 1 << 20; // words: 4 MiB each
  CUdeviceptr host_side, dev_side, plain;
  CK(cuMemAllocManaged(&host_side, n * 4, CU_MEM_ATTACH_GLOBAL));
  CK(cuMemAllocManaged(&dev_side, n * 4, CU_MEM_ATTACH_GLOBAL));
  CK(cuMemAlloc(&plain, n * 4));
  auto* a = (uint32_t*)host_side; auto* b = (uint32_t*)dev_side;
  for (size_t i = 0; i < n; i++) { a[i] = (uint32_t)i * 3u; b[i] = (uint32_t)i * 5u; }
  unsigned nn = n; void* args[] = {&dev_side, &nn};
  CK(cuLaunchKernel(inc, n / 256, 1, 1, 256, 1, 1, 0, 0, args, nullptr));
  CK(cuCtxSynchronize());
  printf("before the fault:\n");
  if (strcmp(mode, "serve") && strcmp(mode, "fresh")) check("host-resident managed", a, n, [](size_t i) { return (uint32_t)i * 3u; });
  // b's pages are on the device now (the kernel touched them last); reading
  // them migrates them back, so increment again on the device first.
  CK(cuLaunchKernel(inc, n / 256, 1, 1, 256, 1, 1, 0, 0, args, nullptr));
  CK(cuCtxSynchronize());

  auto t0 = clk::now();
  CK(cuLaunchKernel(wild, 1, 1, 1, 1, 1, 1, 0, 0, nullptr, nullptr));
  CUresult sticky = cuCtxSynchronize();
  const char* name = ""; cuGetErrorName(sticky, &name);
  auto t1 = clk::now();
  printf("the wild kernel: cuCtxSynchronize -> %d %s after %.3f ms\n", (int)sticky, name,
         std::chrono::duration<double, std::milli>(t1 - t0).count());
  printf("after the fault:\n");
  CK(cuCtxSynchronize());
  CUdeviceptr x; CK(cuMemAlloc(&x, 4096));
  uint32_t word = 0; CK(cuMemcpyDtoH(&word, plain, 4));
  CUstream s; CK(cuStreamCreate(&s, 0));
  if (!strcmp(mode, "host")) check("host-resident managed", a, n, [](size_t i) { return (uint32_t)i * 3u; });
  if (!strcmp(mode, "device")) check("device-resident managed", b, n, [](size_t i) { return (uint32_t)i * 5u + 2u; });

  auto t2 = clk::now();
  CK(cuDevicePrimaryCtxReset(dev));
  auto t3 = clk::now();
  printf("cuDevicePrimaryCtxReset: %.3f ms\n", std::chrono::duration<double, std::milli>(t3 - t2).count());
  printf("after the reset:\n");
  if (!strcmp(mode, "old")) check("host-resident managed (old pointer)", a, 16, [](size_t i) { return (uint32_t)i * 3u; });
  CK(cuDevicePrimaryCtxRetain(&ctx, dev)); CK(cuCtxSetCurrent(ctx));
  if (!strcmp(mode, "fresh")) {
    // A new (not primary) context instead.
    CUcontext fresh; CK(cuCtxCreate(&fresh, nullptr, 0, dev)); CK(cuCtxSetCurrent(fresh));
  }
  CK(cuModuleLoadData(&mod, PTX)); CK(cuModuleGetFunction(&inc, mod, "inc"));
  CUdeviceptr c; CK(cuMemAllocManaged(&c, n * 4, CU_MEM_ATTACH_GLOBAL));
  { static uint32_t h[1 << 20]; for (size_t i = 0; i < n; i++) h[i] = (uint32_t)i; CK(cuMemcpyHtoD(c, h, n * 4)); }
  void* args2[] = {&c, &nn};
  CK(cuLaunchKernel(inc, n / 256, 1, 1, 256, 1, 1, 0, 0, args2, nullptr));
  CK(cuCtxSynchronize());
  auto t4 = clk::now();
  uint32_t first[4] = {0, 0, 0, 0};
  CK(cuMemcpyDtoH(first, c, sizeof first));
  printf("  new managed after a kernel, read by cuMemcpyDtoH: %u %u %u %u (want 1 2 3 4)\n", first[0], first[1], first[2], first[3]);
  printf("fault to serving again (reset, retain, reload, alloc, launch, sync): %.3f ms\n",
         std::chrono::duration<double, std::milli>(t4 - t2).count());
  return 0;
}
