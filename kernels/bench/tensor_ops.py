#!/usr/bin/env python3
"""Device-side check and benchmark of the built-in tensor kernels.

    python3 kernels/bench/tensor_ops.py --out DIR [--skip-bench] [--only PATTERN]

Loads the committed PTX (kernels/ptx/<file>.sm_<NN>.ptx, the newest build not
newer than the device) through the CUDA driver API (ctypes on libcuda.so.1,
in the context PyTorch made current), launches every entry with the grid and
block of docs/tensor-ops.md on PyTorch's current stream, and

1. checks every entry on random inputs (torch.randn, fresh per case; outputs
   poisoned with NaN first) against a float64 reference computed by torch on
   the GPU, printing PASS/FAIL per case (exit status 1 on any failure);
   f32 GEMMs follow the plan (kernels/src/table/gemm.rs): tw_gemm_f32_split_k
   where the build has it (sm_90) and K >= 512, else tw_gemm_f32, so the
   cases cover both; the split-K entry must also give the same bits run
   after run;
2. times our kernels and PyTorch's side by side (CUDA events, warm-up, median
   of repeats) and writes DIR/results.md and DIR/results.json, including the
   kernels' resource report (cuFuncGetAttribute).

Correctness criteria
--------------------
GEMM, with ref = alpha * A @ B + beta * C0 in float64:
  * fro = ||C - ref||_F / ||ref||_F <= tol: f32 1e-5, tf32 1e-3, bf16/f16 1e-2
    (ref from the exact inputs; for tf32 this includes the rounding of the
    inputs to tf32);
  * elem = max_ij |C - ref_seen|_ij / D_ij, D = |alpha| |A| @ |B| + |beta| |C0|,
    where ref_seen is the float64 product of the operands as the kernel
    multiplies them (tf32: inputs rounded to tf32 to nearest, ties to even, as
    every TF32 entry rounds them; otherwise the inputs themselves): what is left is
    f32 accumulation error, so this catches a dropped or doubled term in any
    single element: elem <= 1e-5 (f32) / 1e-4 (tensor cores; one missing term
    at K = 4097 gives ~4e-4);
  * every element of C inside the matrix was written (no NaN left from the
    poison when beta == 0), and every element outside it (row padding of ldc,
    the element before an offset pointer) is unchanged.
TF32 rounding, exactly (every TF32 entry): A of edge values (halfway cases with
  an even and an odd last kept bit, either side of them, normal and subnormal,
  both signs, random bits) times an identity gives C == tf32(A) bit for bit
  (zeros up to sign), and an identity times such a B gives tf32(B); a NaN in A
  (B) makes its row (column) of C NaN and nothing else. On sm_90 a TFLOAT32
  tensor map (kernels/test/tma_box_copy.ptx) turns every word of a box into
  tf32(word), NaNs into 0x7fffe000.
reduce_sum / reduce_mean: |y - ref| <= 1e-5 * sum|x| (/ n for mean); reduce_max:
  |y - ref| <= 1e-5 |ref|.
softmax: max |y - ref| / |ref| <= 1e-5 (ref > 0 everywhere).
layernorm: |y - ref| <= tol * (|gamma| (1 + |xhat|) + |beta|) (the size of the
  terms of y: an error in the mean moves y by ~|gamma| even where xhat ~ 0)
  with tol 1e-5, and 1e-4 for the shifted case x = 1000 + randn (f32 holds
  1000 + x to ~3e-5; a one-pass E[x^2] - E[x]^2 variance is off by ~1e-1 there,
  a plain two-pass one by ~1e-3).
add/mul/gelu: |y - ref| <= 1e-5 |ref| (+ 1e-12); add: <= 1e-5 (|a| + |b|); the
  gelu reference is 0.5 x erfc(-x / sqrt 2) in float64;
relu, transpose: exact.
"""

import argparse
import ctypes
import json
import math
import os
import statistics
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PTX_DIR = os.path.join(ROOT, "kernels", "ptx")

# ---------------------------------------------------------------------------
# CUDA driver API through ctypes.

CU_FUNC_ATTRIBUTE = {
    "MAX_THREADS_PER_BLOCK": 0,
    "SHARED_SIZE_BYTES": 1,
    "LOCAL_SIZE_BYTES": 3,
    "NUM_REGS": 4,
}


class Driver:
    def __init__(self):
        self.lib = ctypes.CDLL("libcuda.so.1")
        L = self.lib
        vp = ctypes.c_void_p
        L.cuGetErrorString.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        L.cuCtxGetCurrent.argtypes = [ctypes.POINTER(vp)]
        L.cuCtxSynchronize.argtypes = []
        L.cuModuleLoadDataEx.argtypes = [ctypes.POINTER(vp), ctypes.c_char_p, ctypes.c_uint,
                                         ctypes.POINTER(ctypes.c_int), ctypes.POINTER(vp)]
        L.cuModuleGetFunction.argtypes = [ctypes.POINTER(vp), vp, ctypes.c_char_p]
        L.cuLaunchKernel.argtypes = [vp] + [ctypes.c_uint] * 7 + [vp, ctypes.POINTER(vp), ctypes.POINTER(vp)]
        L.cuFuncGetAttribute.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_int, vp]
        L.cuFuncSetAttribute.argtypes = [vp, ctypes.c_int, ctypes.c_int]
        u64p, u32p = ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint32)
        L.cuTensorMapEncodeTiled.argtypes = [vp, ctypes.c_int, ctypes.c_uint, vp, u64p, u64p, u32p, u32p,
                                             ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]

    def check(self, r, what):
        if r != 0:
            s = ctypes.c_char_p()
            self.lib.cuGetErrorString(r, ctypes.byref(s))
            raise RuntimeError(f"{what}: CUDA error {r} ({s.value.decode() if s.value else '?'})")

    def ctx(self):
        c = ctypes.c_void_p()
        self.check(self.lib.cuCtxGetCurrent(ctypes.byref(c)), "cuCtxGetCurrent")
        return c.value

    def sync(self, what="cuCtxSynchronize"):
        self.check(self.lib.cuCtxSynchronize(), what)

    def load(self, path):
        with open(path, "rb") as f:
            data = f.read() + b"\0"
        mod = ctypes.c_void_p()
        log = ctypes.create_string_buffer(1 << 16)
        opts = (ctypes.c_int * 2)(5, 6)  # CU_JIT_ERROR_LOG_BUFFER, ..._SIZE_BYTES
        vals = (ctypes.c_void_p * 2)(ctypes.cast(log, ctypes.c_void_p).value, 1 << 16)
        r = self.lib.cuModuleLoadDataEx(ctypes.byref(mod), data, 2, opts, vals)
        if r != 0:
            print(log.value.decode(errors="replace"), file=sys.stderr)
        self.check(r, f"cuModuleLoadDataEx({os.path.basename(path)})")
        return mod.value

    def function(self, mod, name):
        f = ctypes.c_void_p()
        self.check(self.lib.cuModuleGetFunction(ctypes.byref(f), mod, name.encode()), f"cuModuleGetFunction({name})")
        return f.value

    def attr(self, f, name):
        v = ctypes.c_int()
        self.check(self.lib.cuFuncGetAttribute(ctypes.byref(v), CU_FUNC_ATTRIBUTE[name], f), "cuFuncGetAttribute")
        return v.value

    def set_max_dynamic_smem(self, f, nbytes):
        self.check(self.lib.cuFuncSetAttribute(f, 8, nbytes),  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
                   "cuFuncSetAttribute")

    def tensor_map(self, dtype, base, dims, strides, box, swizzle):
        """cuTensorMapEncodeTiled: dims/box innermost first (elements), strides in bytes of dims 1..;
        element strides 1, no interleave, L2 promotion 256B, OOB fill zeros. Returns a 64-byte
        aligned 128-byte descriptor (its backing buffer, its address)."""
        buf = ctypes.create_string_buffer(128 + 64)
        addr = (ctypes.addressof(buf) + 63) & ~63
        r = len(dims)
        self.check(self.lib.cuTensorMapEncodeTiled(
            ctypes.c_void_p(addr), dtype, r, ctypes.c_void_p(base), (ctypes.c_uint64 * r)(*dims),
            (ctypes.c_uint64 * (r - 1))(*strides), (ctypes.c_uint32 * r)(*box), (ctypes.c_uint32 * r)(*([1] * r)),
            0, swizzle, 3, 0), "cuTensorMapEncodeTiled")
        return (buf, addr)

    def launch(self, f, grid, block, sig, args, stream, shared=0):
        assert len(sig) == len(args)
        objs = []
        ptrs = []
        for t, a in zip(sig, args):
            if t == "m":  # a tensor map from tensor_map(): pass its aligned 128 bytes
                objs.append(a[0])
                ptrs.append(a[1])
                continue
            if t == "p":
                objs.append(ctypes.c_void_p(a))
            elif t == "i":
                assert -2**31 <= a < 2**31
                objs.append(ctypes.c_int(a))
            elif t == "q":
                objs.append(ctypes.c_longlong(a))
            elif t == "f":
                objs.append(ctypes.c_float(a))
            else:
                raise ValueError(t)
            ptrs.append(ctypes.addressof(objs[-1]))
        params = (ctypes.c_void_p * len(ptrs))(*ptrs)
        self.check(self.lib.cuLaunchKernel(f, grid[0], grid[1], grid[2], block[0], block[1], block[2], shared,
                                           ctypes.c_void_p(stream), params, None), "cuLaunchKernel")


ENTRIES = {
    "gemm": ["tw_gemm_f32", "tw_gemm_tf32", "tw_gemm_bf16", "tw_gemm_f16"],
    "reduce": ["tw_reduce_sum_f32", "tw_reduce_max_f32", "tw_reduce_mean_f32", "tw_reduce_sum_cols_f32",
               "tw_reduce_max_cols_f32", "tw_reduce_mean_cols_f32", "tw_softmax_rows_f32", "tw_softmax_f32",
               "tw_softmax_wide_f32", "tw_layernorm_rows_f32", "tw_layernorm_f32", "tw_layernorm_wide_f32"],
    "elementwise": ["tw_add_f32", "tw_mul_f32", "tw_relu_f32", "tw_gelu_f32", "tw_transpose_f32"],
}
# Entries that only newer builds of a file have: loaded where the build has them. tw_gemm_f32_split_k (sm_90+,
# a cluster of two blocks per tile) runs f32 GEMMs with K >= F32_SPLIT_K_MIN_K (kernels/src/table/gemm.rs: the
# same rule), with grid (2 ceil(N/128), ceil(M/128), batch) and F32_SPLIT_K_SHARED bytes of dynamic shared memory.
OPTIONAL_ENTRIES = {"gemm": ["tw_gemm_f32_split_k"]}
F32_SPLIT_K_MIN_K = 512
F32_SPLIT_K_SHARED = 3 * (32 * (128 + 4) + 32 * 128) * 4
SIGS = {
    "gemm": "pppiiiqqqqqqff",
    "gemm_tma": "mmpiiiqqiiff",
    "gemm_tma16": "mmpiiiiqqiiff",
    "reduce": "ppiii",
    "softmax": "ppii",
    "layernorm": "ppppiif",
    "binary": "pppqq",
    "unary": "ppq",
    "transpose": "ppii",
}


# The TMA GEMMs (gemm_tma.cuh, gemm_tma_tf32.cuh): tiles, dynamic shared memory and when the plan may use
# them (kernels/src/table/gemm.rs: the same rules).
TMA_BM = 128
TMA_TF32_BN = 128
# Blocks of a 16-bit TMA GEMM: it walks its tiles blockIdx.x, + gridDim.x, ... on min(tiles, this) blocks, one per
# SM of the device (table.rs, plan_on: the device's multiprocessor count).
def tma_persistent_blocks():
    return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count


# cuTensorMapEncodeTiled's data types (cuda.h, CUtensorMapDataType): the TF32 GEMM's maps are TFLOAT32 (the TMA
# unit rounds to tf32, ties to even, subnormals kept), not TFLOAT32_FTZ (12).
CU_TENSOR_MAP_DATA_TYPE = {"f16": 6, "f32": 7, "bf16": 9, "tf32": 11}


# Shared memory through which the 16-bit TMA GEMMs store C (table/gemm.rs, TMA_EPILOGUE_BYTES).
TMA_EPILOGUE_BYTES = 8 * 16 * 40 * 4


def tma_shared_bytes(bm, bn, esize):
    """Dynamic shared memory of a TMA GEMM: as many stages as fit 192 KiB (at most 8), their mbarriers (full and
    empty), for 16-bit inputs the epilogue's staging, and 1 KiB of alignment slack (table/gemm.rs,
    tma_shared_bytes)."""
    bk = 64 if esize == 2 else 32
    stage = (bm + bn) * bk * esize
    stages = min(192 * 1024 // stage, 8)
    return stages * stage + 2 * stages * 8 + (TMA_EPILOGUE_BYTES if esize == 2 else 0) + 1024


def tma_tf32_bm(M, N, batch):
    """Tile rows of the TF32 TMA GEMM: the widest of 256 and 128 that M fills more than half of and that makes
    at least 128 tiles; else 64."""
    for bm in (256, 128):
        if M > bm // 2 and -(-M // bm) * -(-N // TMA_TF32_BN) * batch >= 128:
            return bm
    return 64


def tma_bn(M, N, batch):
    """Tile columns of the 16-bit TMA GEMMs: the widest of 256 and 128 that N fills more than half of and that
    makes at least 128 tiles; else 64."""
    for bn in (256, 128):
        if N > bn // 2 and -(-M // TMA_BM) * -(-N // bn) * batch >= 128:
            return bn
    return 64


def tma_eligible(A, B, M, K, lda, ldb, sA, sB, batch, esz):
    """A and B whose bases, row strides and batch strides are 16-byte multiples, batch strides 0 (broadcast)
    or at least one whole matrix (batches that do not overlap)."""
    q = 16 // esz
    if A % 16 or B % 16 or lda % q or ldb % q:
        return False
    for s, rows, ld in ((sA, M, lda), (sB, K, ldb)):
        if batch > 1 and s != 0 and (s % q or s < rows * ld):
            return False
    return True


def tma_batch_stride(s, rows, ld, esz):
    """A batch stride in bytes for the descriptor: the real one, or (one batch, never stepped) one matrix."""
    return (s if s else rows * ld) * esz


class Kernels:
    def __init__(self, drv):
        self.drv = drv
        major, minor = torch.cuda.get_device_capability()
        cc = major * 10 + minor
        self.sm = {}
        self.fn = {}
        self.files = {}
        for stem, names in ENTRIES.items():
            builds = sorted(int(f.split(".sm_")[1].split(".")[0]) for f in os.listdir(PTX_DIR)
                            if f.startswith(stem + ".sm_") and f.endswith(".ptx")
                            and f.split(".sm_")[1].split(".")[0].isdigit())
            fit = [b for b in builds if b <= cc]
            if not fit:
                raise RuntimeError(f"no PTX build of {stem} for sm_{cc}")
            sm = fit[-1]
            path = os.path.join(PTX_DIR, f"{stem}.sm_{sm}.ptx")
            t0 = time.time()
            mod = drv.load(path)
            print(f"loaded {os.path.relpath(path, ROOT)} ({time.time() - t0:.2f} s JIT)")
            with open(path) as fh:
                text = fh.read()
            for n in names + [n for n in OPTIONAL_ENTRIES.get(stem, []) if f".entry {n}(" in text]:
                self.fn[n] = drv.function(mod, n)
                self.files[n] = os.path.relpath(path, ROOT)
        self.f32_split = self.fn.get("tw_gemm_f32_split_k")
        if self.f32_split is not None:
            drv.set_max_dynamic_smem(self.f32_split, F32_SPLIT_K_SHARED)

    def stream(self):
        return torch.cuda.current_stream().cuda_stream

    def gemm(self, name, A, B, C, M, N, K, lda, ldb, ldc, sA, sB, sC, batch, alpha, beta):
        tma = getattr(self, "tma", {}).get(name)
        if tma is not None and tma_eligible(A, B, M, K, lda, ldb, sA, sB, batch, 4 if "tf32" in name else 2):
            return self.gemm_tma(tma, name, A, B, C, M, N, K, lda, ldb, ldc, sA, sB, sC, batch, alpha, beta)
        f, split, shared = self.fn[name], 1, 0
        if name == "tw_gemm_f32" and getattr(self, "f32_split", None) is not None and K >= F32_SPLIT_K_MIN_K:
            f, split, shared = self.f32_split, 2, F32_SPLIT_K_SHARED
        grid = (split * -(-N // 128), -(-M // 128), batch)
        self.drv.launch(f, grid, (256, 1, 1), SIGS["gemm"],
                        [A, B, C, M, N, K, lda, ldb, ldc, sA, sB, sC, alpha, beta], self.stream(), shared=shared)

    def gemm_tma(self, f, name, A, B, C, M, N, K, lda, ldb, ldc, sA, sB, sC, batch, alpha, beta):
        """The TMA GEMMs (docs/tensor-ops.md): A as {K, M, batch}, B as {N, K, batch}, 128-byte swizzle; a
        broadcast operand (stride 0) is one batch and its batch coordinate is multiplied by 0."""
        zA, zB = int(sA != 0), int(sB != 0)
        if "tf32" in name:
            bm = tma_tf32_bm(M, N, batch)
            dt, esz, bn, box_a, box_b = CU_TENSOR_MAP_DATA_TYPE["tf32"], 4, TMA_TF32_BN, (32, bm, 1), (32, 32, 1)
            fn, smem = f[bm], tma_shared_bytes(bm, TMA_TF32_BN, 4)
        else:
            dt = CU_TENSOR_MAP_DATA_TYPE["bf16" if "bf16" in name else "f16"]
            esz, bm, bn = 2, TMA_BM, tma_bn(M, N, batch)
            box_a, box_b = (64, 128, 1), (64, 64, 1)
            fn, smem = f[bn], tma_shared_bytes(TMA_BM, bn, 2)
        ta = self.drv.tensor_map(dt, A, (K, M, batch if zA else 1), (lda * esz, tma_batch_stride(sA, M, lda, esz)),
                                 box_a, 3)
        tb = self.drv.tensor_map(dt, B, (N, K, batch if zB else 1), (ldb * esz, tma_batch_stride(sB, K, ldb, esz)),
                                 box_b, 3)
        if "tf32" in name:
            grid = (-(-N // bn), -(-M // bm), batch)
            self.drv.launch(fn, grid, (384, 1, 1), SIGS["gemm_tma"],
                            [ta, tb, C, M, N, K, ldc, sC, zA, zB, alpha, beta], self.stream(), shared=smem)
        else:  # persistent: min(tiles, SMs) blocks walk the tiles; batch is a parameter
            grid = (min(-(-N // bn) * -(-M // bm) * batch, tma_persistent_blocks()), 1, 1)
            self.drv.launch(fn, grid, (384, 1, 1), SIGS["gemm_tma16"],
                            [ta, tb, C, M, N, K, batch, ldc, sC, zA, zB, alpha, beta], self.stream(), shared=smem)

    # Reductions, softmax and layer norm: the entry kernels/src/table.rs (plan) picks, unless `entry` names
    # another (every entry is correct for every size), with that entry's geometry from docs/tensor-ops.md.
    def reduce(self, name, x, y, outer, n, inner, entry=None):
        entry = entry or (name if inner == 1 else name.replace("_f32", "_cols_f32"))
        if entry.endswith("_cols_f32"):  # a block (32, 32) per strip of 32 outputs
            grid, block = outer * -(-inner // 32), (32, 32, 1)
        else:  # a block per output
            grid, block = outer * inner, (256, 1, 1)
        self.drv.launch(self.fn[entry], (grid, 1, 1), block, SIGS["reduce"], [x, y, outer, n, inner], self.stream())

    @staticmethod
    def row_entry(op, cols):
        """The softmax / layernorm entry for rows of `cols`: a warp per row up to 1024, 256 threads per row
        up to 8192, 512 beyond."""
        return f"tw_{op}_rows_f32" if cols <= 1024 else f"tw_{op}_f32" if cols <= 8192 else f"tw_{op}_wide_f32"

    @staticmethod
    def row_launch(entry, rows):
        if entry.endswith("_rows_f32"):  # 8 warps, a row each
            return (-(-rows // 8), 1, 1), (256, 1, 1)
        return (rows, 1, 1), (512 if entry.endswith("_wide_f32") else 256, 1, 1)

    def softmax(self, x, y, rows, cols, entry=None):
        entry = entry or self.row_entry("softmax", cols)
        grid, block = self.row_launch(entry, rows)
        self.drv.launch(self.fn[entry], grid, block, SIGS["softmax"], [x, y, rows, cols], self.stream())

    def layernorm(self, x, g, b, y, rows, cols, eps, entry=None):
        entry = entry or self.row_entry("layernorm", cols)
        grid, block = self.row_launch(entry, rows)
        self.drv.launch(self.fn[entry], grid, block, SIGS["layernorm"], [x, g, b, y, rows, cols, eps],
                        self.stream())

    @staticmethod
    def ew_grid(n):
        return (min(max(-(-n // 1024), 1), 65536), 1, 1)

    def binary(self, name, a, b, y, n, period):
        self.drv.launch(self.fn[name], self.ew_grid(n), (256, 1, 1), SIGS["binary"], [a, b, y, n, period],
                        self.stream())

    def unary(self, name, x, y, n):
        self.drv.launch(self.fn[name], self.ew_grid(n), (256, 1, 1), SIGS["unary"], [x, y, n], self.stream())

    def transpose(self, x, y, rows, cols, batch):
        grid = (-(-cols // 32), -(-rows // 32), batch)
        self.drv.launch(self.fn["tw_transpose_f32"], grid, (32, 8, 1), SIGS["transpose"], [x, y, rows, cols],
                        self.stream())


# ---------------------------------------------------------------------------
# Correctness.

DEV = "cuda"
RESULTS = []  # (name, ok, detail)


def record(name, ok, detail):
    RESULTS.append((name, bool(ok), detail))
    print(f"{'PASS' if ok else 'FAIL'}  {name}  {detail}", flush=True)


def flat(n, dtype, off=0, fill="randn"):
    """A flat buffer of off + n elements and its view starting at element off."""
    if fill == "randn":
        buf = torch.randn(off + n, device=DEV, dtype=torch.float32).to(dtype)
    else:
        buf = torch.full((off + n,), float("nan"), device=DEV, dtype=dtype)
    return buf, buf[off:]


def bits_equal(a, b):
    if a.dtype in (torch.float32,):
        return torch.equal(a.view(torch.int32), b.view(torch.int32))
    return torch.equal(a.view(torch.int16), b.view(torch.int16))


TF32_NAN = 0x7fffe000


def tf32_rne_bits(bits):
    """f32 bits (an int64 tensor, 0 .. 2^32) rounded to tf32: to nearest, ties to even; a NaN to 0x7fffe000
    (kernels/src/oracle.rs, tf32_round)."""
    r = (bits + 0xfff + ((bits >> 13) & 1)) & 0xffffe000
    return torch.where((bits & 0x7fffffff) > 0x7f800000, torch.full_like(bits, TF32_NAN), r)


def i32_of(bits):
    """Bits 0 .. 2^32 (int64) as int32 words."""
    return (((bits + 2**31) % 2**32) - 2**31).to(torch.int32)


def tf32_rne(x):
    bits = x.contiguous().view(torch.int32).to(torch.int64) & 0xffffffff
    return i32_of(tf32_rne_bits(bits)).view(torch.float32).view(x.shape)


TDTYPE = {"f32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
GEMM_TOL = {"f32": 1e-5, "tf32": 1e-3, "bf16": 1e-2, "f16": 1e-2}
ELEM_TOL = {"f32": 1e-5, "tf32": 1e-4, "bf16": 1e-4, "f16": 1e-4}


def gemm_case(k, dt, M, N, K, batch=1, lda=None, ldb=None, ldc=None, bcast=None, off=0, alpha=1.0, beta=0.0,
              label=""):
    tdt = TDTYPE[dt]
    lda = lda or K
    ldb = ldb or N
    ldc = ldc or N
    bA = 1 if bcast == "A" else batch
    bB = 1 if bcast == "B" else batch
    sA = 0 if bcast == "A" else M * lda
    sB = 0 if bcast == "B" else K * ldb
    sC = M * ldc
    bufA, _ = flat(bA * M * lda + off, tdt)
    bufB, _ = flat(bB * K * ldb + off, tdt)
    if beta != 0.0:
        bufC, _ = flat(batch * M * ldc + off, torch.float32)
    else:
        bufC, _ = flat(batch * M * ldc + off, torch.float32, fill="nan")
    C0 = bufC.clone()
    A = torch.as_strided(bufA, (bA, M, K), (M * lda, lda, 1), off)
    B = torch.as_strided(bufB, (bB, K, N), (K * ldb, ldb, 1), off)
    esz = bufA.element_size()
    k.gemm(f"tw_gemm_{dt}", bufA.data_ptr() + off * esz, bufB.data_ptr() + off * esz,
           bufC.data_ptr() + off * 4, M, N, K, lda, ldb, ldc, sA, sB, sC, batch, alpha, beta)
    k.drv.sync(f"gemm {dt}")
    C = torch.as_strided(bufC, (batch, M, N), (sC, ldc, 1), off)
    C0v = torch.as_strided(C0, (batch, M, N), (sC, ldc, 1), off).double()
    Ad, Bd = A.double(), B.double()
    ref = alpha * torch.matmul(Ad, Bd)
    D = abs(alpha) * torch.matmul(Ad.abs(), Bd.abs())
    if beta != 0.0:
        ref = ref + beta * C0v
        D = D + abs(beta) * C0v.abs()
    if dt == "tf32":
        As, Bs = tf32_rne(A.float()).double(), tf32_rne(B.float()).double()
        ref_seen = alpha * torch.matmul(As, Bs) + (beta * C0v if beta != 0.0 else 0.0)
    else:
        ref_seen = ref
    Cd = C.double()
    finite = bool(torch.isfinite(C).all())
    fro = float(torch.linalg.norm((Cd - ref).flatten()) / torch.linalg.norm(ref.flatten()).clamp_min(1e-300))
    elem = float(((Cd - ref_seen).abs() / D.clamp_min(1e-300)).max())
    touched = torch.zeros(bufC.numel(), dtype=torch.bool, device=DEV)
    torch.as_strided(touched, (batch, M, N), (sC, ldc, 1), off).fill_(True)
    outside_ok = bits_equal(bufC[~touched], C0[~touched])
    ok = finite and fro <= GEMM_TOL[dt] and elem <= ELEM_TOL[dt] and outside_ok
    desc = f"{label}gemm {dt} M={M} N={N} K={K} batch={batch} lda={lda} ldb={ldb} ldc={ldc}"
    if bcast:
        desc += f" bcast{bcast}"
    if off:
        desc += f" off+{off}"
    if beta != 0.0 or alpha != 1.0:
        desc += f" alpha={alpha} beta={beta}"
    record(desc, ok, f"fro={fro:.2e} elem={elem:.2e} finite={finite} outside_untouched={outside_ok}")


def tf32_edge_bits(n, subnormal):
    """n f32 bit patterns (int64) for the exact rounding checks: halfway cases with an even and an odd last kept
    bit and either side of them, both signs, normal (exponents of 2^-126, 1 and 2^127) or subnormal; then random
    bits of the same kind. None rounds to an infinity (which times an identity's zeros would give NaN)."""
    words = []
    for sign in (0, 0x80000000):
        for expo in ((0,) if subnormal else (0x00800000, 0x3f800000, 0x7f000000)):
            for kept in (0, 0x2000, 0x7fe000):
                for dropped in (0, 1, 0xfff, 0x1000, 0x1001, 0x1fff):
                    words.append(sign | expo | kept | dropped)
    rnd = torch.randint(0, 2**32, (n - len(words),), dtype=torch.int64) & 0x807fffff
    if not subnormal:
        rnd |= torch.randint(1, 255, rnd.shape, dtype=torch.int64) << 23
    bits = torch.cat([torch.tensor(words, dtype=torch.int64), rnd])
    return torch.where((tf32_rne_bits(bits) & 0x7fffffff) >= 0x7f800000, torch.full_like(bits, 0x3f801000), bits)


def check_tf32_rounding(k, label=""):
    """The TF32 entry rounds A and B to nearest, ties to even, bit for bit: edge values times an identity, both
    ways round; and a NaN in A or B gives NaN in its row or column of C and nowhere else."""
    eye = torch.eye(64, device=DEV)
    for kind, subnormal in (("normal", False), ("subnormal", True)):
        for side, (M, N, K) in (("A", (256, 64, 64)), ("B", (64, 256, 64))):
            shape = (M, K) if side == "A" else (K, N)
            bits = tf32_edge_bits(shape[0] * shape[1], subnormal)
            X = i32_of(bits).view(torch.float32).view(shape).to(DEV)
            A, B = (X, eye) if side == "A" else (eye, X)
            C = torch.full((M, N), float("nan"), device=DEV)
            k.gemm("tw_gemm_tf32", A.data_ptr(), B.data_ptr(), C.data_ptr(), M, N, K, K, N, N, 0, 0, 0, 1, 1.0, 0.0)
            k.drv.sync("gemm tf32 rounding")
            want = i32_of(tf32_rne_bits(bits)).view(torch.float32).view(shape).to(DEV)
            same = C == want  # zeros up to sign: -0 + 0 sums to +0
            bad = int((~same).sum())
            detail = f"{bad} of {same.numel()} differ"
            if bad:
                i = int((~same).flatten().nonzero()[0])
                got = int(C.flatten()[i:i + 1].view(torch.int32)[0]) & 0xffffffff
                detail += (f", e.g. {int(bits[i]):#010x} -> {got:#010x}, want "
                           f"{int(tf32_rne_bits(bits[i:i + 1])[0]):#010x}")
            record(f"{label}gemm tf32 rounds {side} to nearest even, bit for bit ({kind} values)", bad == 0, detail)
    M, N, K = 96, 80, 40
    A = torch.randn(M, K, device=DEV)
    B = torch.randn(K, N, device=DEV)
    A[5, 7] = float("nan")
    B[9, 11] = float("nan")
    C = torch.full((M, N), float("nan"), device=DEV)
    k.gemm("tw_gemm_tf32", A.data_ptr(), B.data_ptr(), C.data_ptr(), M, N, K, K, N, N, 0, 0, 0, 1, 1.0, 0.0)
    k.drv.sync("gemm tf32 NaN")
    want = torch.zeros(M, N, dtype=torch.bool, device=DEV)
    want[5, :] = True
    want[:, 11] = True
    ok = torch.equal(C.isnan(), want)
    record(f"{label}gemm tf32 NaN in A (row 5) and B (column 11): NaN in that row and column of C only", ok,
           f"{int(C.isnan().sum())} NaN, want {int(want.sum())}")


def check_tf32_tensor_map(k):
    """On sm_90: a TFLOAT32 tensor map rounds every word of a 32 x 16 box (kernels/test/tma_box_copy.ptx) as
    tf32_rne_bits does: edge values, subnormals, the largest finite values, infinities, NaNs, random bits."""
    path = os.path.join(ROOT, "kernels", "test", "tma_box_copy.ptx")
    if torch.cuda.get_device_capability() != (9, 0) or not os.path.exists(path):
        return
    fn = k.drv.function(k.drv.load(path), "tma_box_copy")
    n = 32 * 16
    words = [int(b) for b in tf32_edge_bits(150, False)[:144]] + [int(b) for b in tf32_edge_bits(80, True)[:72]]
    for sign in (0, 0x80000000):
        words += [sign | w for w in (0x7f7fffff, 0x7f7ff000, 0x7f7fefff, 0x7f800000, 0x7fc00000, 0x7f800001,
                                     0x7f801000, 0x7fffffff, 0x00000000)]
    bits = torch.cat([torch.tensor(words, dtype=torch.int64),
                      torch.randint(0, 2**32, (n - len(words),), dtype=torch.int64)])
    x = i32_of(bits).to(DEV)
    out = torch.full((n,), 0x55555555, dtype=torch.int32, device=DEV)
    tm = k.drv.tensor_map(CU_TENSOR_MAP_DATA_TYPE["tf32"], x.data_ptr(), (32, 16), (32 * 4,), (32, 16), 0)
    k.drv.launch(fn, (1, 1, 1), (128, 1, 1), "mpiiii", [tm, out.data_ptr(), 0, 0, 0, n * 4], k.stream(),
                 shared=n * 4 + 1024)
    k.drv.sync("tma_box_copy (TFLOAT32)")
    got = out.cpu().to(torch.int64) & 0xffffffff
    want = tf32_rne_bits(bits)
    bad = (got != want).nonzero().flatten().tolist()
    nans = sorted({f"{int(g):#010x}" for g, b in zip(got, bits) if (int(b) & 0x7fffffff) > 0x7f800000})
    detail = f"{n - len(bad)} of {n} words as tf32_rne; NaNs became {', '.join(nans)}"
    if bad:
        detail += "; e.g. " + ", ".join(f"{int(bits[i]):#010x} -> {int(got[i]):#010x} (want {int(want[i]):#010x})"
                                        for i in bad[:4])
    record("tensor map TFLOAT32 (11) rounds to nearest even on the way into shared memory", not bad, detail)


def check_gemm(k, label="", dtypes=("f32", "tf32", "bf16", "f16")):
    cases = [
        dict(M=1, N=1, K=1),
        dict(M=17, N=1000, K=33),
        dict(M=4097, N=17, K=1),
        dict(M=1000, N=4097, K=17),
        dict(M=17, N=17, K=4097),
        dict(M=128, N=128, K=128),
        dict(M=256, N=384, K=512),
        dict(M=129, N=257, K=100),
        dict(M=300, N=260, K=4097),
        dict(M=512, N=512, K=1000, alpha=1.5, beta=-0.75),
        dict(M=200, N=300, K=64, alpha=0.5, beta=2.0),
        dict(M=256, N=256, K=256, batch=3, bcast="A"),
        dict(M=100, N=200, K=50, batch=3, bcast="A"),
        dict(M=256, N=128, K=96, batch=2, bcast="B"),
        dict(M=256, N=256, K=256, batch=2),
        dict(M=256, N=256, K=256, lda=257, ldb=259, ldc=261),
        dict(M=300, N=200, K=150, lda=151, ldb=205, ldc=201),
        dict(M=256, N=256, K=256, off=1),
        dict(M=256, N=256, K=256, off=1, lda=257, batch=2, bcast="A", beta=1.0),
        dict(M=1000, N=1000, K=1000, off=3),
        dict(M=1024, N=1024, K=1024),
        # Shapes the TMA GEMMs take (16-byte aligned bases and strides): edges in every dimension.
        dict(M=300, N=520, K=136),
        dict(M=129, N=264, K=4104, alpha=1.5, beta=-0.75),
        dict(M=256, N=512, K=8, batch=3, bcast="B"),
        dict(M=200, N=136, K=72, batch=3),
        dict(M=256, N=256, K=256, off=8, lda=264, ldb=272, ldc=257, batch=2, bcast="A", beta=1.0),
    ]
    for dt in dtypes:
        for c in cases:
            try:
                gemm_case(k, dt, label=label, **c)
            except Exception as e:  # noqa: BLE001
                record(f"{label}gemm {dt} {c}", False, f"exception {e!r}")
                raise
    if "tf32" in dtypes:
        check_tf32_rounding(k, label)
    if "f32" in dtypes and getattr(k, "f32_split", None) is not None:
        check_f32_split_deterministic(k, label)


def check_f32_split_deterministic(k, label=""):
    """The split-K f32 GEMM gives the same bits run after run (its two halves meet in a fixed order)."""
    for M, N, K in ((1024, 1024, 1024), (333, 555, 4097)):
        A, B = torch.randn(M, K, device=DEV), torch.randn(K, N, device=DEV)
        outs = []
        for _ in range(3):
            C = torch.full((M, N), float("nan"), device=DEV)
            k.gemm("tw_gemm_f32", A.data_ptr(), B.data_ptr(), C.data_ptr(), M, N, K, K, N, N, 0, 0, 0, 1, 1.0, 0.0)
            k.drv.sync("gemm f32 split-K determinism")
            outs.append(C.view(torch.int32))
        same = all(torch.equal(outs[0], o) for o in outs[1:])
        record(f"{label}gemm f32 M={M} N={N} K={K} (split K): 3 runs bit-identical", same, "")


def check_reduce(k):
    """Both entries of each reduction on every shape (the table picks by inner; each is correct for any)."""
    shapes = [(4097,), (1,), (17, 1000, 33), (3, 4097, 5), (2, 3, 1), (1, 1, 1), (64, 8193), (5, 1, 7),
              (1100, 40), (2, 333, 65), (1024, 4096)]
    for shape in shapes:
        for axis in range(len(shape)):
            for off in (0, 1):
                numel = math.prod(shape)
                buf, xv = flat(numel, torch.float32, off)
                x = xv.view(shape)
                outer = math.prod(shape[:axis])
                n = shape[axis]
                inner = math.prod(shape[axis + 1:])
                xd = x.double()
                for op, entry in [(op, e) for op in ("sum", "max", "mean")
                                  for e in (f"tw_reduce_{op}_f32", f"tw_reduce_{op}_cols_f32")]:
                    ybuf, y = flat(outer * inner, torch.float32, 0, fill="nan")
                    k.reduce(f"tw_reduce_{op}_f32", xv.data_ptr(), y.data_ptr(), outer, n, inner, entry=entry)
                    k.drv.sync(f"reduce {entry}")
                    yd = y.double().view(outer, inner)
                    x3 = xd.reshape(outer, n, inner)
                    if op == "sum":
                        ref = x3.sum(1)
                        scale = x3.abs().sum(1)
                    elif op == "mean":
                        ref = x3.mean(1)
                        scale = x3.abs().sum(1) / n
                    else:
                        ref = x3.amax(1)
                        scale = ref.abs()
                    err = float(((yd - ref).abs() / scale.clamp_min(1e-30)).max())
                    ok = bool(torch.isfinite(yd).all()) and err <= 1e-5
                    record(f"{entry} shape={shape} axis={axis} off+{off}", ok, f"err={err:.2e}")


ROW_CASES = [(37, 1), (37, 17), (37, 1000), (37, 1023), (37, 1024), (37, 1025), (37, 4097), (37, 4096), (9, 8192),
             (5, 8193), (3, 12289), (4, 16384), (2, 16388), (2, 20000), (1, 3)]


def check_softmax(k):
    """Every softmax entry on every case (the table picks by cols; each is correct for any)."""
    for rows, cols in ROW_CASES:
        for off in (0, 1):
            _, x = flat(rows * cols, torch.float32, off)
            ref = torch.softmax(x.double().view(rows, cols), dim=-1)
            for entry in ("tw_softmax_rows_f32", "tw_softmax_f32", "tw_softmax_wide_f32"):
                _, y = flat(rows * cols, torch.float32, off, fill="nan")
                k.softmax(x.data_ptr(), y.data_ptr(), rows, cols, entry=entry)
                k.drv.sync(entry)
                yd = y.double().view(rows, cols)
                err = float(((yd - ref).abs() / ref.abs().clamp_min(1e-300)).max())
                ok = bool(torch.isfinite(yd).all()) and err <= 1e-5
                record(f"{entry} rows={rows} cols={cols} off+{off}", ok, f"err={err:.2e}")


def check_layernorm(k):
    """Every layer norm entry on every case (the table picks by cols; each is correct for any)."""
    for (rows, cols), entry in [(c, e) for c in ROW_CASES
                                for e in ("tw_layernorm_rows_f32", "tw_layernorm_f32", "tw_layernorm_wide_f32")]:
        for off in (0, 1):
            for shift in (0.0, 1000.0):
                if shift and off:
                    continue
                _, x = flat(rows * cols, torch.float32, off)
                if shift:
                    x.add_(shift)
                _, g = flat(cols, torch.float32, off)
                _, b = flat(cols, torch.float32, off)
                _, y = flat(rows * cols, torch.float32, off, fill="nan")
                eps = 1e-5
                k.layernorm(x.data_ptr(), g.data_ptr(), b.data_ptr(), y.data_ptr(), rows, cols, eps, entry=entry)
                k.drv.sync(entry)
                xd = x.double().view(rows, cols)
                mean = xd.mean(-1, keepdim=True)
                var = ((xd - mean) ** 2).mean(-1, keepdim=True)
                xhat = (xd - mean) / torch.sqrt(var + eps)
                ref = xhat * g.double() + b.double()
                scale = g.double().abs() * (1.0 + xhat.abs()) + b.double().abs()
                yd = y.double().view(rows, cols)
                err = float(((yd - ref).abs() / scale.clamp_min(1e-30)).max())
                tol = 1e-4 if shift else 1e-5
                ok = bool(torch.isfinite(yd).all()) and err <= tol
                record(f"{entry} rows={rows} cols={cols} off+{off} shift={shift:g}", ok, f"err={err:.2e} tol={tol:g}")


def check_elementwise(k):
    for n, period in [(1, 1), (17, 17), (1000, 1000), (4097, 4097), (1 << 20, 1 << 20), ((1 << 20) + 3, (1 << 20) + 3),
                      (1000 * 4097, 4097), (100 * 4096, 4096), (4097, 1), (64 * 1000, 1000), (3 * 17, 17)]:
        for off in (0, 1):
            _, a = flat(n, torch.float32, off)
            _, b = flat(period, torch.float32, off)
            bd = b.double().repeat(n // period)
            for name in ("add", "mul"):
                _, y = flat(n, torch.float32, off, fill="nan")
                k.binary(f"tw_{name}_f32", a.data_ptr(), b.data_ptr(), y.data_ptr(), n, period)
                k.drv.sync(name)
                ad = a.double()
                if name == "add":
                    ref = ad + bd
                    scale = ad.abs() + bd.abs()
                else:
                    ref = ad * bd
                    scale = ref.abs()
                yd = y.double()
                err = float(((yd - ref).abs() / (scale + 1e-12)).max())
                ok = bool(torch.isfinite(yd).all()) and err <= 1e-5
                record(f"{name} n={n} b_period={period} off+{off}", ok, f"err={err:.2e}")
    for n in (1, 17, 1000, 4097, (1 << 20) + 3):
        for off in (0, 1):
            _, x = flat(n, torch.float32, off)
            x.mul_(3.0)
            for name in ("relu", "gelu"):
                _, y = flat(n, torch.float32, off, fill="nan")
                k.unary(f"tw_{name}_f32", x.data_ptr(), y.data_ptr(), n)
                k.drv.sync(name)
                xd = x.double()
                if name == "relu":
                    ok = bits_equal(y, torch.relu(x))
                    record(f"relu n={n} off+{off}", ok, "exact" if ok else "mismatch")
                else:
                    # erfc form: in float64 1 + erf(x / sqrt 2) cancels to 0 below x ~ -8.
                    ref = 0.5 * xd * torch.special.erfc(-xd / math.sqrt(2.0))
                    err = float(((y.double() - ref).abs() / (ref.abs() + 1e-12)).max())
                    ok = bool(torch.isfinite(y).all()) and err <= 1e-5
                    record(f"gelu n={n} off+{off} (x = 3 randn)", ok, f"err={err:.2e}")
    for batch, rows, cols in [(1, 1, 1), (1, 17, 1000), (1, 4097, 33), (3, 5, 17), (2, 100, 64), (1, 1000, 4097)]:
        for off in (0, 1):
            _, x = flat(batch * rows * cols, torch.float32, off)
            _, y = flat(batch * rows * cols, torch.float32, off, fill="nan")
            k.transpose(x.data_ptr(), y.data_ptr(), rows, cols, batch)
            k.drv.sync("transpose")
            ref = x.view(batch, rows, cols).transpose(1, 2).contiguous()
            ok = bits_equal(y.view(batch, cols, rows), ref)
            record(f"transpose batch={batch} rows={rows} cols={cols} off+{off}", ok, "exact" if ok else "mismatch")


# ---------------------------------------------------------------------------
# Benchmarks.

def timeit(fn, target_s=0.3, min_reps=5, max_reps=100):
    """Median (ms), min, max and count of event-timed runs of fn. A sleep
    kernel queued ahead keeps the GPU behind the host, so the host's launch
    overhead (ctypes) stays out of each event pair."""
    fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(2_000_000)
    s.record()
    fn()
    e.record()
    torch.cuda.synchronize()
    est = max(s.elapsed_time(e), 1e-3) / 1e3
    reps = int(min(max(target_s / est, min_reps), max_reps))
    for _ in range(3):
        fn()
    evs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    torch.cuda.synchronize()
    torch.cuda._sleep(2_000_000 + reps * 200_000)
    for a, b in evs:
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize()
    ts = sorted(a.elapsed_time(b) for a, b in evs)
    return statistics.median(ts), ts[0], ts[-1], reps


def set_tf32(on):
    try:
        torch.backends.cuda.matmul.fp32_precision = "tf32" if on else "ieee"
    except Exception:  # noqa: BLE001  (older torch)
        pass
    torch.backends.cuda.matmul.allow_tf32 = on


TORCH_GEMM = {}
# Square, tall-skinny and batched shapes (issue 15 goal 1).
GEMM_SHAPES = [(1024, 1024, 1024), (4096, 4096, 4096), (8192, 8192, 8192), (16384, 128, 4096), (2048, 2048, 2048, 8)]


def bench_gemm(k, rows_out, label="", dtypes=("f32", "tf32", "bf16", "f16"), shapes=None):
    """(M, N, K) or (M, N, K, batch): a batched case runs A [b, M, K] @ B [b, K, N] against torch.bmm."""
    shapes = shapes or GEMM_SHAPES
    for dt in dtypes:
        for shape in shapes:
            M, N, K = shape[:3]
            batch = shape[3] if len(shape) > 3 else 1
            tdt = TDTYPE[dt]
            lead = (batch,) if batch > 1 else ()
            A = torch.randn(*lead, M, K, device=DEV).to(tdt)
            B = torch.randn(*lead, K, N, device=DEV).to(tdt)
            C = torch.empty(*lead, M, N, device=DEV, dtype=torch.float32)
            mm = torch.bmm if batch > 1 else torch.mm

            def ours():
                k.gemm(f"tw_gemm_{dt}", A.data_ptr(), B.data_ptr(), C.data_ptr(), M, N, K, K, N, N,
                       M * K if batch > 1 else 0, K * N if batch > 1 else 0, M * N if batch > 1 else 0, batch,
                       1.0, 0.0)

            torch_note = ""
            if dt in ("f32", "tf32"):
                set_tf32(dt == "tf32")
                Ct = torch.empty(*lead, M, N, device=DEV, dtype=torch.float32)

                def theirs():
                    torch.matmul(A, B, out=Ct)
                torch_note = "torch.matmul f32, allow_tf32=" + str(dt == "tf32")
            else:
                try:
                    Ct = mm(A, B, out_dtype=torch.float32)

                    def theirs():
                        mm(A, B, out_dtype=torch.float32)
                    torch_note = f"torch.{mm.__name__}({dt}, out_dtype=float32)"
                except Exception:  # noqa: BLE001
                    def theirs():
                        torch.matmul(A, B)
                    torch_note = f"torch.matmul {dt} (native {dt} output)"
            ours()
            k.drv.sync("bench gemm")
            ref = torch.matmul(A.double(), B.double())
            fro = float(torch.linalg.norm((C.double() - ref).flatten()) / torch.linalg.norm(ref.flatten()))
            ok = fro <= GEMM_TOL[dt] and bool(torch.isfinite(C).all())
            record(f"{label}bench-check gemm {dt} {batch}x{M}x{N}x{K}", ok, f"fro={fro:.2e}")
            del ref
            t_o = timeit(ours)
            key = (dt, M, N, K, batch)
            if key not in TORCH_GEMM:
                TORCH_GEMM[key] = timeit(theirs)
            t_t = TORCH_GEMM[key]
            set_tf32(False)
            flop = 2.0 * M * N * K * batch
            shape_s = f"{batch}x{M}x{N}x{K}" if batch > 1 else f"{M}x{N}x{K}"
            row = dict(kind="gemm", dtype=label + dt, shape=shape_s, ours_ms=t_o[0], torch_ms=t_t[0],
                       ours_tflops=flop / t_o[0] / 1e9, torch_tflops=flop / t_t[0] / 1e9,
                       ratio=t_t[0] / t_o[0], torch=torch_note, reps=t_o[3])
            rows_out.append(row)
            print(f"{label}gemm {dt:5s} {shape_s}: ours {row['ours_tflops']:.1f} TFLOP/s, torch {row['torch_tflops']:.1f} "
                  f"({torch_note}), ratio {row['ratio']:.2f}", flush=True)
            del A, B, C, Ct
            torch.cuda.empty_cache()


def bench_memory(k, rows_out):
    # Device-to-device copy bandwidth (bytes read + written).
    n = 1 << 28  # 1 GiB of f32
    src = torch.randn(n, device=DEV)
    dst = torch.empty_like(src)
    t = timeit(lambda: dst.copy_(src))
    copy_bw = 2 * n * 4 / (t[0] / 1e3) / 1e9
    print(f"copy: {copy_bw:.0f} GB/s (1 GiB dst.copy_(src), median {t[0]:.3f} ms)", flush=True)
    rows_out.append(dict(kind="copy", op="copy_ 1 GiB", ours_ms=t[0], gbps=copy_bw))
    del src, dst
    torch.cuda.empty_cache()

    def add_row(op, shape, nbytes, t_o, t_t, torch_note):
        bw = nbytes / (t_o[0] / 1e3) / 1e9
        bw_t = nbytes / (t_t[0] / 1e3) / 1e9
        row = dict(kind="mem", op=op, shape=shape, ours_ms=t_o[0], torch_ms=t_t[0], ours_gbps=bw, torch_gbps=bw_t,
                   frac_copy=bw / copy_bw, torch_frac_copy=bw_t / copy_bw, ratio=t_t[0] / t_o[0], torch=torch_note)
        rows_out.append(row)
        print(f"{op:10s} {shape}: ours {bw:.0f} GB/s ({bw / copy_bw:.0%} of copy), torch {bw_t:.0f} GB/s, "
              f"ratio {row['ratio']:.2f}", flush=True)

    for R, Cc in [(16384, 4096), (65536, 1024), (4096, 16384)]:
        x = torch.randn(R, Cc, device=DEV)
        y = torch.empty_like(x)
        nb = 2 * x.numel() * 4
        t_o = timeit(lambda: k.softmax(x.data_ptr(), y.data_ptr(), R, Cc))
        t_t = timeit(lambda: torch.softmax(x, dim=-1))
        add_row("softmax", f"{R}x{Cc}", nb, t_o, t_t, "torch.softmax(x, -1)")
        g = torch.randn(Cc, device=DEV)
        b = torch.randn(Cc, device=DEV)
        t_o = timeit(lambda: k.layernorm(x.data_ptr(), g.data_ptr(), b.data_ptr(), y.data_ptr(), R, Cc, 1e-5))
        t_t = timeit(lambda: torch.nn.functional.layer_norm(x, (Cc,), g, b, 1e-5))
        add_row("layernorm", f"{R}x{Cc}", nb, t_o, t_t, "F.layer_norm")
        del x, y
        torch.cuda.empty_cache()

    R, Cc = 16384, 4096
    n = R * Cc
    a = torch.randn(n, device=DEV)
    b = torch.randn(n, device=DEV)
    y = torch.empty_like(a)
    t_o = timeit(lambda: k.binary("tw_add_f32", a.data_ptr(), b.data_ptr(), y.data_ptr(), n, n))
    t_t = timeit(lambda: torch.add(a, b, out=y))
    add_row("add", f"{n}", 3 * n * 4, t_o, t_t, "torch.add(out=)")
    bias = torch.randn(Cc, device=DEV)
    t_o = timeit(lambda: k.binary("tw_add_f32", a.data_ptr(), bias.data_ptr(), y.data_ptr(), n, Cc))
    t_t = timeit(lambda: torch.add(a.view(R, Cc), bias, out=y.view(R, Cc)))
    add_row("add bias", f"{R}x{Cc}+{Cc}", 2 * n * 4, t_o, t_t, "torch.add(out=), broadcast row")
    t_o = timeit(lambda: k.unary("tw_relu_f32", a.data_ptr(), y.data_ptr(), n))
    t_t = timeit(lambda: torch.clamp_min(a, 0.0, out=y))
    add_row("relu", f"{n}", 2 * n * 4, t_o, t_t, "torch.clamp_min(out=)")
    t_o = timeit(lambda: k.unary("tw_gelu_f32", a.data_ptr(), y.data_ptr(), n))
    t_t = timeit(lambda: torch.nn.functional.gelu(a))
    add_row("gelu", f"{n}", 2 * n * 4, t_o, t_t, "F.gelu (erf)")
    t_o = timeit(lambda: k.transpose(a.data_ptr(), y.data_ptr(), R, Cc, 1))
    t_t = timeit(lambda: y.view(Cc, R).copy_(a.view(R, Cc).t()))
    add_row("transpose", f"{R}x{Cc}", 2 * n * 4, t_o, t_t, "y.copy_(x.t())")
    xr = a.view(R, Cc)
    yr = torch.empty(R, device=DEV)
    t_o = timeit(lambda: k.reduce("tw_reduce_sum_f32", a.data_ptr(), yr.data_ptr(), R, Cc, 1))
    t_t = timeit(lambda: torch.sum(xr, dim=1, out=yr))
    add_row("reduce_sum", f"{R}x{Cc} axis 1", n * 4, t_o, t_t, "torch.sum(dim=1)")
    yc = torch.empty(Cc, device=DEV)
    t_o = timeit(lambda: k.reduce("tw_reduce_sum_f32", a.data_ptr(), yc.data_ptr(), 1, R, Cc))
    t_t = timeit(lambda: torch.sum(xr, dim=0, out=yc))
    add_row("reduce_sum", f"{R}x{Cc} axis 0", n * 4, t_o, t_t, "torch.sum(dim=0)")
    del a, b, y
    torch.cuda.empty_cache()


def profile(k, drv):
    M = N = K = 4096
    C = torch.empty(M, N, device=DEV)
    p90a = os.path.join(PTX_DIR, "gemm.sm_90a.ptx")
    mod90a = drv.load(p90a) if torch.cuda.get_device_capability() == (9, 0) and os.path.exists(p90a) else None
    for dt in ("bf16", "tf32"):
        A = torch.randn(M, K, device=DEV).to(TDTYPE[dt])
        B = torch.randn(K, N, device=DEV).to(TDTYPE[dt])
        k.gemm(f"tw_gemm_{dt}", A.data_ptr(), B.data_ptr(), C.data_ptr(), M, N, K, K, N, N, 0, 0, 0, 1, 1.0, 0.0)
        if mod90a:
            f = drv.function(mod90a, f"tw_gemm_{dt}_sm90a")
            drv.launch(f, (N // 128, M // 128, 1), (256, 1, 1), SIGS["gemm"],
                       [A.data_ptr(), B.data_ptr(), C.data_ptr(), M, N, K, K, N, N, 0, 0, 0, 1.0, 0.0], k.stream())
        drv.sync("profile gemm")
    x = torch.randn(65536, 1024, device=DEV)
    y = torch.empty_like(x)
    g = torch.randn(1024, device=DEV)
    b = torch.randn(1024, device=DEV)
    k.softmax(x.data_ptr(), y.data_ptr(), 65536, 1024)
    k.layernorm(x.data_ptr(), g.data_ptr(), b.data_ptr(), y.data_ptr(), 65536, 1024, 1e-5)
    drv.sync("profile")
    print("profile launches done")


def resources(k):
    out = []
    for name in [n for names in ENTRIES.values() for n in names] + [n for n in k.fn if n not in
                                                                       sum(ENTRIES.values(), [])]:
        f = k.fn[name]
        out.append(dict(entry=name, ptx=k.files[name],
                        **{a: k.drv.attr(f, a) for a in ("NUM_REGS", "SHARED_SIZE_BYTES", "LOCAL_SIZE_BYTES",
                                                        "MAX_THREADS_PER_BLOCK")}))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--skip-bench", action="store_true")
    ap.add_argument("--skip-check", action="store_true")
    ap.add_argument("--variants", default="", help="directory of alternative gemm*.sm_NN.ptx builds to check and time")
    ap.add_argument("--tma-only", action="store_true", help="with --variants: check and time only the TMA GEMMs")
    ap.add_argument("--dtypes", default="tf32,bf16,f16",
                    help="with --variants: the GEMM dtypes checked and timed (f32: the SIMT entry tw_gemm_f32)")
    ap.add_argument("--builtin-dtypes", default="f32,tf32,bf16,f16",
                    help="the dtypes of the built-in GEMM entries (kernels/ptx) checked and timed")
    ap.add_argument("--profile", action="store_true",
                    help="launch a few kernels once each (for ncu) and exit: gemm bf16/tf32 (mma.sync and sm_90a) "
                         "at 4096^3, softmax and layernorm at 65536x1024")
    ap.add_argument("--only", default="", help="comma list of: gemm,reduce,softmax,layernorm,elementwise")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.cuda.init()
    torch.zeros(1, device=DEV)
    torch.manual_seed(int(time.time()))
    drv = Driver()
    assert drv.ctx(), "no current CUDA context after torch.cuda.init()"
    props = torch.cuda.get_device_properties(0)
    print(f"device: {props.name}, sm_{props.major}{props.minor}, {props.multi_processor_count} SMs, "
          f"torch {torch.__version__}, CUDA {torch.version.cuda}", flush=True)
    k = Kernels(drv)
    if args.profile:
        profile(k, drv)
        return
    res = resources(k)
    for r in res:
        print(f"  {r['entry']:20s} regs {r['NUM_REGS']:3d}  smem {r['SHARED_SIZE_BYTES']:6d}  "
              f"local {r['LOCAL_SIZE_BYTES']:3d}  maxthreads {r['MAX_THREADS_PER_BLOCK']}")
    only = set(filter(None, args.only.split(",")))

    def want(x):
        return not only or x in only or (x == "sm90a" and "gemm" in only)

    builtin_dtypes = tuple(d for d in ("f32", "tf32", "bf16", "f16") if d in args.builtin_dtypes.split(","))
    t0 = time.time()
    broken = False
    if not args.skip_check:
        for part, fn in (("elementwise", check_elementwise), ("reduce", check_reduce), ("softmax", check_softmax),
                         ("layernorm", check_layernorm),
                         ("gemm", lambda k: check_gemm(k, dtypes=builtin_dtypes)),
                         ("gemm", lambda k: check_tf32_tensor_map(k) if "tf32" in builtin_dtypes else None)):
            if not want(part):
                continue
            try:
                fn(k)
            except Exception as e:  # noqa: BLE001  (a CUDA error poisons the context: stop here)
                import traceback
                traceback.print_exc()
                record(f"{part} checks aborted", False, repr(e))
                broken = True
                break
    print(f"checks took {time.time() - t0:.1f} s", flush=True)

    bench = []
    if not args.skip_bench and not broken:
        try:
            if want("memory") or not only:
                bench_memory(k, bench)
            if want("gemm") or not only:
                bench_gemm(k, bench, dtypes=builtin_dtypes)
            variant_dtypes = set(args.dtypes.split(",")) if args.variants else {"tf32", "bf16", "f16"}

            def gemm_module(path, label, mma=True, wgmma=True, shapes=None, tma_only=False, simt=False):
                mod = drv.load(path)
                kv = Kernels.__new__(Kernels)
                kv.__dict__.update(k.__dict__)
                kv.fn = dict(k.fn)
                try:  # the variant's own split-K f32 entry, if it has one
                    kv.f32_split = drv.function(mod, "tw_gemm_f32_split_k")
                    drv.set_max_dynamic_smem(kv.f32_split, F32_SPLIT_K_SHARED)
                except RuntimeError:
                    kv.f32_split = None
                # simt: the SIMT entry tw_gemm_f32 (same launch as the mma.sync entries; tw_gemm_f32_split_k
                # for K >= F32_SPLIT_K_MIN_K where the module has it).
                for tag, dts, on in (("", ("f32",), simt and not tma_only),
                                     ("", ("tf32", "bf16", "f16"), mma and not tma_only),
                                     ("_sm90a", ("tf32", "bf16", "f16"), wgmma and not tma_only),
                                     ("_sm90a_tma", ("tf32", "bf16", "f16"), wgmma)):
                    dts = tuple(d for d in dts if d in variant_dtypes)
                    if not on:
                        continue
                    got = []
                    kv.tma = {}
                    for dt in dts:
                        try:
                            f = drv.function(mod, f"tw_gemm_{dt}{tag}")
                        except RuntimeError:
                            continue
                        if tag.endswith("_tma"):
                            # Ineligible operands fall back to the sm90a entry, as the plan does.
                            if dt == "tf32":
                                fs = {256: f, 128: drv.function(mod, f"tw_gemm_{dt}{tag}_m128"),
                                      64: drv.function(mod, f"tw_gemm_{dt}{tag}_m64")}
                                for bm, fb in fs.items():
                                    drv.set_max_dynamic_smem(fb, tma_shared_bytes(bm, TMA_TF32_BN, 4))
                                kv.tma[f"tw_gemm_{dt}"] = fs
                            else:
                                fs = {256: f, 128: drv.function(mod, f"tw_gemm_{dt}{tag}_n128"),
                                      64: drv.function(mod, f"tw_gemm_{dt}{tag}_n64")}
                                for bn, fb in fs.items():
                                    drv.set_max_dynamic_smem(fb, tma_shared_bytes(TMA_BM, bn, 2))
                                kv.tma[f"tw_gemm_{dt}"] = fs
                            kv.fn[f"tw_gemm_{dt}"] = drv.function(mod, f"tw_gemm_{dt}_sm90a")
                            got.append(dt)
                            continue
                        kv.fn[f"tw_gemm_{dt}"] = f
                        got.append(dt)
                    if not got:
                        continue
                    lab = f"{label}{tag.strip('_') + ' ' if tag else ''}"
                    for dt in got:
                        f = kv.tma.get(f"tw_gemm_{dt}", kv.fn[f"tw_gemm_{dt}"])
                        f = f[256] if isinstance(f, dict) else f
                        res.append(dict(entry=f"{label}tw_gemm_{dt}{tag}", ptx=os.path.relpath(path, ROOT),
                                        **{a: drv.attr(f, a) for a in (
                                            "NUM_REGS", "SHARED_SIZE_BYTES", "LOCAL_SIZE_BYTES",
                                            "MAX_THREADS_PER_BLOCK")}))
                    check_gemm(kv, lab, dtypes=tuple(got))
                    bench_gemm(kv, bench, lab, dtypes=tuple(got), shapes=shapes)

            # The wgmma entries (sm_90a build), checked and timed last but for variants.
            p90a = os.path.join(PTX_DIR, "gemm.sm_90a.ptx")
            if torch.cuda.get_device_capability() == (9, 0) and os.path.exists(p90a) and want("sm90a"):
                gemm_module(p90a, "", mma=False, wgmma=True)
            if args.variants:
                for f in sorted(os.listdir(args.variants)):
                    if f.startswith("gemm") and f.endswith(".ptx"):
                        gemm_module(os.path.join(args.variants, f), f"[{f.split('.')[0]}] ",
                                    mma=False, tma_only=args.tma_only, simt=True)
        except Exception as e:  # noqa: BLE001
            import traceback
            traceback.print_exc()
            record("benchmark aborted", False, repr(e))

    npass = sum(1 for r in RESULTS if r[1])
    nfail = len(RESULTS) - npass
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(dict(device=props.name, sm=f"{props.major}{props.minor}", torch=torch.__version__,
                       checks=[dict(name=n, ok=o, detail=d) for n, o, d in RESULTS], bench=bench, resources=res),
                  f, indent=1)
    md = [f"# Tensor kernels on {props.name} (sm_{props.major}{props.minor}), torch {torch.__version__}", "",
          f"Checks: {npass} PASS, {nfail} FAIL", ""]
    for n, o, d in RESULTS:
        if not o:
            md.append(f"- FAIL {n}: {d}")
    md += ["", "| GEMM dtype | M x N x K | ours TFLOP/s | torch TFLOP/s | ours / torch | torch call |",
           "| --- | --- | ---: | ---: | ---: | --- |"]
    for r in bench:
        if r["kind"] == "gemm":
            md.append(f"| {r['dtype']} | {r['shape']} | {r['ours_tflops']:.1f} | {r['torch_tflops']:.1f} | "
                      f"{r['ratio']:.2f} | {r['torch']} |")
    copy = [r for r in bench if r["kind"] == "copy"]
    if copy:
        md += ["", f"Copy bandwidth (1 GiB dst.copy_(src), read + write): {copy[0]['gbps']:.0f} GB/s", ""]
    md += ["| op | shape | ours GB/s | of copy | torch GB/s | torch of copy | ours / torch (speed) |",
           "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in bench:
        if r["kind"] == "mem":
            md.append(f"| {r['op']} | {r['shape']} | {r['ours_gbps']:.0f} | {r['frac_copy']:.0%} | "
                      f"{r['torch_gbps']:.0f} | {r['torch_frac_copy']:.0%} | {r['ratio']:.2f} |")
    md += ["", "| entry | PTX | NUM_REGS | SHARED_SIZE_BYTES | LOCAL_SIZE_BYTES | MAX_THREADS_PER_BLOCK |",
           "| --- | --- | ---: | ---: | ---: | ---: |"]
    for r in res:
        md.append(f"| {r['entry']} | {r['ptx']} | {r['NUM_REGS']} | {r['SHARED_SIZE_BYTES']} | "
                  f"{r['LOCAL_SIZE_BYTES']} | {r['MAX_THREADS_PER_BLOCK']} |")
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(md))
    print(f"\nSUMMARY: {npass} PASS, {nfail} FAIL")
    sys.exit(1 if nfail else 0)


if __name__ == "__main__":
    main()
