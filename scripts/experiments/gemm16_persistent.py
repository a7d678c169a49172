#!/usr/bin/env python3
"""The 16-bit TMA GEMMs before and after the persistent tile loop, side by side.

    python3 scripts/experiments/gemm16_persistent.py OLD.ptx NEW.ptx[:EXTRA] ... [--samples N] [--profile]

OLD.ptx: a gemm.sm_90a.ptx whose tw_gemm_{bf16,f16}_sm90a_tma* entries take one
block per tile (grid (ceil(N/bn), ceil(M/128), batch), no batch parameter);
NEW.ptx: one whose entries walk tiles blockIdx.x, + gridDim.x, ... (a batch
parameter after K), launched on min(tiles, blocks) blocks with EXTRA bytes of
dynamic shared memory more than the ring needs (default 0); several may be
given. For every shape of
issue 15 goal 1 and both dtypes: the new C must equal the old C bit for bit
(the same wgmmas in the same order) and pass the checker's Frobenius
tolerance against a float64 product (up to 4096^3); then N samples, each timing old, new
and torch back to back (CUDA-event medians, kernels/bench/tensor_ops.py's
timeit). --profile launches old, new and torch once each at 8 x 2048^3 bf16
(for ncu) and exits.
"""

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "kernels", "bench"))
import tensor_ops as T  # noqa: E402

SHAPES = [(1024, 1024, 1024, 1), (4096, 4096, 4096, 1), (8192, 8192, 8192, 1), (16384, 128, 4096, 1),
          (2048, 2048, 2048, 8)]
SUFFIX = {256: "", 128: "_n128", 64: "_n64"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("old")
    ap.add_argument("new", nargs="+")
    ap.add_argument("--samples", type=int, default=3)
    ap.add_argument("--blocks", default="132", help="comma list of persistent grid sizes to time")
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    torch.cuda.init()
    torch.zeros(1, device="cuda")
    torch.manual_seed(int.from_bytes(os.urandom(4), "little"))
    drv = T.Driver()
    assert drv.ctx()
    props = torch.cuda.get_device_properties(0)
    print(f"device: {props.name}, {props.multi_processor_count} SMs, torch {torch.__version__}", flush=True)
    mods = {"old": (drv.load(args.old), 0)}
    for i, spec in enumerate(args.new):
        path, _, extra = spec.partition(":")
        mods[f"new{i}"] = (drv.load(path), int(extra or 0))
        print(f"new{i}: {path}, {int(extra or 0)} extra bytes")
    fns = {}
    for tag, (mod, extra) in mods.items():
        for dt in ("bf16", "f16"):
            for bn, suf in SUFFIX.items():
                f = drv.function(mod, f"tw_gemm_{dt}_sm90a_tma{suf}")
                smem = T.tma_shared_bytes(128, bn, 2) + extra
                drv.set_max_dynamic_smem(f, smem)
                fns[tag, dt, bn] = (f, smem)
    stream = torch.cuda.current_stream().cuda_stream
    blocks = [int(b) for b in args.blocks.split(",")]

    def launcher(tag, dt, A, B, C, M, N, K, batch, nblocks=None):
        bn = T.tma_bn(M, N, batch)
        dtype = T.CU_TENSOR_MAP_DATA_TYPE[dt]
        ta = drv.tensor_map(dtype, A.data_ptr(), (K, M, batch), (K * 2, M * K * 2), (64, 128, 1), 3)
        tb = drv.tensor_map(dtype, B.data_ptr(), (N, K, batch), (N * 2, K * N * 2), (64, 64, 1), 3)
        zz = int(batch > 1)
        f, smem = fns[tag, dt, bn]
        tiles = -(-M // 128) * -(-N // bn) * batch
        if tag == "old":
            grid, sig = (-(-N // bn), -(-M // 128), batch), "mmpiiiqqiiff"
            a = [ta, tb, C.data_ptr(), M, N, K, N, M * N * zz, zz, zz, 1.0, 0.0]
        else:
            grid, sig = (min(tiles, nblocks), 1, 1), "mmpiiiiqqiiff"
            a = [ta, tb, C.data_ptr(), M, N, K, batch, N, M * N * zz, zz, zz, 1.0, 0.0]
        return lambda: drv.launch(f, grid, (384, 1, 1), sig, a, stream, shared=smem)

    if args.profile:
        M = N = K = 2048
        batch = 8
        A = torch.randn(batch, M, K, device="cuda").to(torch.bfloat16)
        B = torch.randn(batch, K, N, device="cuda").to(torch.bfloat16)
        C = torch.empty(batch, M, N, device="cuda")
        launcher("old", "bf16", A, B, C, M, N, K, batch)()
        for tag in mods:
            if tag != "old":
                launcher(tag, "bf16", A, B, C, M, N, K, batch, blocks[0])()
        torch.bmm(A, B, out_dtype=torch.float32)
        drv.sync("profile")
        print("profile launches done")
        return

    rows = []
    fails = 0
    labels = [(tag, b) for tag in mods if tag != "old" for b in blocks]
    names = [f"{tag}@{b}" for tag, b in labels]
    for dt in ("bf16", "f16"):
        for M, N, K, batch in SHAPES:
            tdt = T.TDTYPE[dt]
            lead = (batch,) if batch > 1 else ()
            A = torch.randn(*lead, M, K, device="cuda").to(tdt)
            B = torch.randn(*lead, K, N, device="cuda").to(tdt)
            Co = torch.full((*lead, M, N), float("nan"), device="cuda")
            Cn = torch.full((*lead, M, N), float("nan"), device="cuda")
            mm = torch.bmm if batch > 1 else torch.mm
            shape = f"{batch}x{M}x{N}x{K}"
            old = launcher("old", dt, A, B, Co, M, N, K, batch)
            old()
            news = {}
            ref = None
            if M * N * K * batch <= 1 << 36:  # 8192^3 in float64 takes ~20 s: bits equal to the old C there
                ref = torch.matmul(A.double(), B.double())
            for (tag, b), name in zip(labels, names):
                news[name] = launcher(tag, dt, A, B, Cn, M, N, K, batch, b)
                Cn.fill_(float("nan"))
                news[name]()
                drv.sync("check")
                fro = 0.0
                if ref is not None:
                    fro = float(torch.linalg.norm((Cn.double() - ref).flatten()) / torch.linalg.norm(ref.flatten()))
                same = T.bits_equal(Co, Cn)
                ok = same and fro <= T.GEMM_TOL[dt] and bool(torch.isfinite(Cn).all())
                fails += not ok
                print(f"{'PASS' if ok else 'FAIL'} {dt} {shape} {name}: C == old C bits {same}, fro {fro:.2e}",
                      flush=True)
            del ref

            def theirs():
                mm(A, B, out_dtype=torch.float32)
            flop = 2.0 * M * N * K * batch
            for s in range(args.samples):
                t_t = T.timeit(theirs)[0]
                t_old = T.timeit(old)[0]
                t_new = {name: T.timeit(fn)[0] for name, fn in news.items()}
                t_t = (t_t + T.timeit(theirs)[0]) / 2  # torch before and after ours
                r = dict(dtype=dt, shape=shape, sample=s, torch_ms=t_t, old_ms=t_old, old_ratio=t_t / t_old,
                         **{f"{n}_ms": t for n, t in t_new.items()}, **{f"{n}_ratio": t_t / t for n, t in t_new.items()})
                rows.append(r)
                news_s = " ".join(f"{n} {flop / t / 1e9:.1f} ({t_t / t:.3f})" for n, t in t_new.items())
                print(f"  {dt} {shape} s{s}: torch {flop / t_t / 1e9:.1f} TFLOP/s; old {flop / t_old / 1e9:.1f} "
                      f"({t_t / t_old:.3f}); {news_s}", flush=True)
            del A, B, Co, Cn
            torch.cuda.empty_cache()
    print("\n| dtype | shape | old / torch | " + " | ".join(f"{n} / torch" for n in names) + " |")
    for dt in ("bf16", "f16"):
        for M, N, K, batch in SHAPES:
            shape = f"{batch}x{M}x{N}x{K}"
            rs = [r for r in rows if r["dtype"] == dt and r["shape"] == shape]
            cells = [", ".join(f"{r['old_ratio']:.3f}" for r in rs)]
            cells += [", ".join(f"{r[f'{n}_ratio']:.3f}" for r in rs) for n in names]
            print(f"| {dt} | {shape} | " + " | ".join(cells) + " |")
    out = os.environ.get("OUT")
    if out:
        import json
        with open(os.path.join(out, "persistent.json"), "w") as f:
            json.dump(dict(device=props.name, rows=rows), f, indent=1)
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
