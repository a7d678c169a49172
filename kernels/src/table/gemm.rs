//! Which GEMM entry runs a checked [`Gemm`], and its launch: on Hopper the
//! TMA kernels (`gemm_tma.cuh`, `gemm_tma_tf32.cuh`) whenever the operands
//! suit a tensor map, with the tile that fills the GPU; otherwise the
//! `wgmma` or `mma.sync` entries that take any operands; for f32 the SIMT
//! kernel, on Hopper with K split in two from [`F32_SPLIT_K_MIN_K`] on.

use tensorwasm_core::{
    KernelParam,
    abi::{
        AbiError,
        tensor::{Gemm, GemmPrecision},
    },
    launch::{TensorMapDtype, TensorMapSpec, TensorMapSwizzle},
};

use super::{Dim3, Geometry, LaunchPlan, entry, grid_x, grid_yz, int, long, ptr};

/// Dynamic shared memory of a TMA GEMM with `bm` x `bn` tiles of
/// `esize`-byte inputs: as many stages as fit 192 KiB (at most 8), their
/// mbarriers (full and empty), for 16-bit inputs the epilogue's staging
/// ([`TMA_EPILOGUE_BYTES`]), and 1 KiB to align the window to the 128-byte
/// swizzle's 1024 bytes. The same sums as `Shape` in gemm_tma.cuh (K tiles
/// of 64) and `Shape32` in gemm_tma_tf32.cuh (K tiles of 32).
pub(super) const fn tma_shared_bytes(bm: u32, bn: u32, esize: u32) -> u32 {
    let bk = if esize == 2 { 64 } else { 32 };
    let stage = (bm + bn) * bk * esize;
    let mut stages = 192 * 1024 / stage;
    if stages > 8 {
        stages = 8;
    }
    let epilogue = if esize == 2 { TMA_EPILOGUE_BYTES } else { 0 };
    stages * stage + 2 * stages * 8 + epilogue + 1024
}

/// Shared memory through which the 16-bit TMA GEMMs store C: per consumer
/// warp (8) 16 rows x 32 columns of f32, rows padded to 40 words
/// (`T_EPI_BYTES` in gemm_tma.cuh).
pub(super) const TMA_EPILOGUE_BYTES: u32 = 8 * 16 * 40 * 4;

/// Tiles below which a TMA GEMM takes the next narrower tile: about one
/// per SM of an H100 (132).
const MIN_TILES: u64 = 128;

/// Dynamic shared memory of `tw_gemm_f32_split_k`: 3 stages of a 32 x 132
/// (padded) A tile and a 32 x 128 B tile, f32 (`F32_SPLIT_K_SHARED` in
/// gemm_f32.cuh).
pub(super) const F32_SPLIT_K_SHARED: u32 = 3 * (32 * (128 + 4) + 32 * 128) * 4;

/// The K from which Hopper runs f32 GEMMs with K split in two: each block
/// of a pair then has at least 8 of its K tiles of 32. Measured on an H100
/// at K of 1024 and more, where it beat the unsplit kernel at every shape.
pub(super) const F32_SPLIT_K_MIN_K: u64 = 512;

/// The launch of `g`; `hopper` picks the sm_90a entries, persistent over
/// `sms` blocks at most (one per SM: [`Geometry::GemmPersistent`]).
pub(super) fn plan(g: &Gemm, hopper: bool, sms: u32) -> Result<LaunchPlan, AbiError> {
    if hopper && let Some(p) = plan_tma(g, sms)? {
        return Ok(p);
    }
    let k = entry(match (g.precision, hopper) {
        (GemmPrecision::F32, true) if g.k >= F32_SPLIT_K_MIN_K => "tw_gemm_f32_split_k",
        (GemmPrecision::F32, _) => "tw_gemm_f32",
        (GemmPrecision::Tf32, false) => "tw_gemm_tf32",
        (GemmPrecision::Bf16, false) => "tw_gemm_bf16",
        (GemmPrecision::F16, false) => "tw_gemm_f16",
        (GemmPrecision::Tf32, true) => "tw_gemm_tf32_sm90a",
        (GemmPrecision::Bf16, true) => "tw_gemm_bf16_sm90a",
        (GemmPrecision::F16, true) => "tw_gemm_f16_sm90a",
    });
    Ok(LaunchPlan {
        kernel: k,
        grid: tile_grid(g, k.geometry, sms)?,
        block: k.block,
        shared_bytes: k.dynamic_shared,
        params: vec![
            ptr(g.a),
            ptr(g.b),
            ptr(g.c),
            int("M", g.m)?,
            int("N", g.n)?,
            int("K", g.k)?,
            long("lda", g.lda)?,
            long("ldb", g.ldb)?,
            long("ldc", g.ldc)?,
            long("A's batch stride", g.stride_a)?,
            long("B's batch stride", g.stride_b)?,
            long("C's batch stride", g.stride_c)?,
            KernelParam::F32(g.alpha),
            KernelParam::F32(g.beta),
        ],
    })
}

/// `(split * ceil(N / bn), ceil(M / bm), batch)`, `split` 1 but for
/// [`Geometry::GemmSplitK`]; `(min(tiles, blocks), 1, 1)` for
/// [`Geometry::GemmPersistent`].
fn tile_grid(g: &Gemm, geometry: Geometry, sms: u32) -> Result<Dim3, AbiError> {
    let (bm, bn, split) = match geometry {
        Geometry::GemmTiles { bm, bn } => (bm, bn, 1),
        Geometry::GemmSplitK { bm, bn, split } => (bm, bn, split),
        Geometry::GemmPersistent { bm, bn } => {
            let tiles =
                g.n.div_ceil(u64::from(bn))
                    .saturating_mul(g.m.div_ceil(u64::from(bm)))
                    .saturating_mul(g.batch);
            return Ok(Dim3::linear(grid_x("blocks", tiles.min(u64::from(sms)))?));
        }
        _ => unreachable!("GEMMs use output tiles"),
    };
    let columns = g.n.div_ceil(u64::from(bn)).saturating_mul(u64::from(split));
    Ok(Dim3 {
        x: grid_x("column tiles", columns)?,
        y: grid_yz("row tiles", g.m.div_ceil(u64::from(bm)))?,
        z: grid_yz("batch", g.batch)?,
    })
}

/// The widest of 256 and 128 along an extent that it fills more than half
/// of and that makes at least [`MIN_TILES`] tiles, else 64.
fn tile_width(extent: u64, tiles_with: impl Fn(u64) -> u64) -> u32 {
    for width in [256, 128] {
        if extent > width / 2 && tiles_with(width) >= MIN_TILES {
            return width as u32;
        }
    }
    64
}

/// A TMA entry's launch, or `None` when the operands do not suit tensor
/// maps: A and B 16-byte aligned with row strides of whole 16 bytes, and
/// batch strides of whole 16 bytes that either broadcast (0) or step over
/// a whole matrix. TF32 operands are f32 maps of type `Tf32`: the TMA unit
/// rounds them to tf32 (ties to even) on the way into shared memory.
fn plan_tma(g: &Gemm, sms: u32) -> Result<Option<LaunchPlan>, AbiError> {
    let tf32 = g.precision == GemmPrecision::Tf32;
    let (dtype, esize) = match g.precision {
        GemmPrecision::Tf32 => (TensorMapDtype::Tf32, 4),
        GemmPrecision::Bf16 => (TensorMapDtype::Bf16, 2),
        GemmPrecision::F16 => (TensorMapDtype::F16, 2),
        GemmPrecision::F32 => return Ok(None),
    };
    let name = if tf32 {
        // The widest tile along M of 128 columns (256 x 128 loads less B
        // per multiply-add than 128 x 256, and measured faster).
        match tile_width(g.m, |bm| g.m.div_ceil(bm) * g.n.div_ceil(128) * g.batch) {
            256 => "tw_gemm_tf32_sm90a_tma",
            128 => "tw_gemm_tf32_sm90a_tma_m128",
            _ => "tw_gemm_tf32_sm90a_tma_m64",
        }
    } else {
        let bn = tile_width(g.n, |bn| g.m.div_ceil(128) * g.n.div_ceil(bn) * g.batch);
        match (g.precision, bn) {
            (GemmPrecision::Bf16, 256) => "tw_gemm_bf16_sm90a_tma",
            (GemmPrecision::Bf16, 128) => "tw_gemm_bf16_sm90a_tma_n128",
            (GemmPrecision::Bf16, _) => "tw_gemm_bf16_sm90a_tma_n64",
            (_, 256) => "tw_gemm_f16_sm90a_tma",
            (_, 128) => "tw_gemm_f16_sm90a_tma_n128",
            _ => "tw_gemm_f16_sm90a_tma_n64",
        }
    };
    let k = entry(name);
    let (Geometry::GemmTiles { bm, .. } | Geometry::GemmPersistent { bm, .. }) = k.geometry else {
        unreachable!("GEMMs use output tiles")
    };
    // Boxes (innermost first): A {K, M, 1}, B {N, K, 1}; 128-byte rows.
    let (box_a, box_b) = if tf32 {
        ([32, bm, 1], [32, 32, 1])
    } else {
        ([64, 128, 1], [64, 64, 1])
    };
    // {inner, rows, batch} at `base`: a broadcast operand is one batch.
    let map = |base, inner: u64, rows: u64, ld: u64, stride: u64, boxed: [u32; 3]| {
        let whole = rows.checked_mul(ld)?;
        if stride != 0 && stride < whole {
            return None;
        }
        let (batch, step) = if stride == 0 {
            (1, whole)
        } else {
            (g.batch, stride)
        };
        let strides = [ld.checked_mul(esize)?, step.checked_mul(esize)?];
        TensorMapSpec::new(
            dtype,
            base,
            &[inner, rows, batch],
            &strides,
            &boxed,
            TensorMapSwizzle::B128,
        )
        .ok()
    };
    let (Some(a), Some(b)) = (
        map(g.a, g.k, g.m, g.lda, g.stride_a, box_a),
        map(g.b, g.n, g.k, g.ldb, g.stride_b, box_b),
    ) else {
        return Ok(None);
    };
    let mut params = vec![
        KernelParam::TensorMap(a),
        KernelParam::TensorMap(b),
        ptr(g.c),
        int("M", g.m)?,
        int("N", g.n)?,
        int("K", g.k)?,
    ];
    // The persistent (16-bit) entries walk the batch themselves.
    if !tf32 {
        params.push(int("batch", g.batch)?);
    }
    params.extend([
        long("ldc", g.ldc)?,
        long("C's batch stride", g.stride_c)?,
        KernelParam::I32(i32::from(g.stride_a != 0)),
        KernelParam::I32(i32::from(g.stride_b != 0)),
        KernelParam::F32(g.alpha),
        KernelParam::F32(g.beta),
    ]);
    Ok(Some(LaunchPlan {
        kernel: k,
        grid: tile_grid(g, k.geometry, sms)?,
        block: k.block,
        shared_bytes: k.dynamic_shared,
        params,
    }))
}

#[cfg(test)]
mod tests {
    use tensorwasm_core::DevicePtr;

    use super::*;

    fn gemm(precision: GemmPrecision, m: u64, n: u64, k: u64) -> Gemm {
        Gemm {
            precision,
            batch: 1,
            m,
            n,
            k,
            a: DevicePtr(0x10_0000),
            b: DevicePtr(0x8000_0000),
            c: DevicePtr(0x1_0000_0000),
            lda: k,
            ldb: n,
            ldc: n,
            stride_a: 0,
            stride_b: 0,
            stride_c: 0,
            alpha: 1.0,
            beta: 0.0,
        }
    }

    fn map(p: &LaunchPlan, i: usize) -> TensorMapSpec {
        p.params[i].as_tensor_map().expect("a tensor map")
    }

    #[test]
    fn persistent_grids_follow_the_device_s_multiprocessors() {
        let g = gemm(GemmPrecision::F16, 4096, 4096, 4096);
        // An H100 PCIe (114 SMs), an H100 SXM (132), a small part (16).
        for sms in [114, 132, 16] {
            assert_eq!(plan(&g, true, sms).unwrap().grid.x, sms);
        }
        // Fewer tiles than SMs: a block per tile.
        let small = gemm(GemmPrecision::F16, 256, 256, 64);
        let p = plan(&small, true, 132).unwrap();
        assert!(p.grid.x < 132 && p.grid.x >= 1, "{:?}", p.grid);
    }

    #[test]
    fn hopper_16_bit_gemms_take_the_tma_tile_that_fills_the_gpu() {
        for (m, n, k, entry, grid) in [
            // 512 tiles on 132 persistent blocks; fewer tiles, a block each.
            (4096, 4096, 4096, "tw_gemm_bf16_sm90a_tma", (132, 1, 1)),
            (16384, 128, 4096, "tw_gemm_bf16_sm90a_tma_n128", (128, 1, 1)),
            (1024, 1024, 1024, "tw_gemm_bf16_sm90a_tma_n64", (128, 1, 1)),
            (8, 8, 8, "tw_gemm_bf16_sm90a_tma_n64", (1, 1, 1)),
        ] {
            let p = plan(&gemm(GemmPrecision::Bf16, m, n, k), true, 132).unwrap();
            assert_eq!(p.kernel.entry, entry, "{m}x{n}x{k}");
            assert_eq!((p.grid.x, p.grid.y, p.grid.z), grid, "{m}x{n}x{k}");
            assert_eq!((p.block.x, p.shared_bytes), (384, p.kernel.dynamic_shared));
            assert_eq!(p.params.len(), 13);
            assert_eq!(p.params[6].as_i32(), Some(1), "batch");
            let (a, b) = (map(&p, 0), map(&p, 1));
            assert_eq!(
                (a.dims(), a.strides(), a.box_dims()),
                (&[k, m, 1][..], &[2 * k, 2 * k * m][..], &[64, 128, 1][..])
            );
            assert_eq!(
                (b.dims(), b.strides(), b.box_dims()),
                (&[n, k, 1][..], &[2 * n, 2 * n * k][..], &[64, 64, 1][..])
            );
            assert_eq!(a.dtype, TensorMapDtype::Bf16);
        }
        let f16 = plan(&gemm(GemmPrecision::F16, 4096, 4096, 4096), true, 132).unwrap();
        assert_eq!(f16.kernel.entry, "tw_gemm_f16_sm90a_tma");
        assert_eq!(map(&f16, 0).dtype, TensorMapDtype::F16);
    }

    #[test]
    fn hopper_tf32_gemms_take_the_tma_tile_that_fills_the_gpu() {
        for (m, n, entry, grid, bm) in [
            (4096, 4096, "tw_gemm_tf32_sm90a_tma", (32, 16, 1), 256),
            (8192, 8192, "tw_gemm_tf32_sm90a_tma", (64, 32, 1), 256),
            (32768, 128, "tw_gemm_tf32_sm90a_tma", (1, 128, 1), 256),
            // 256 rows would make 64 tiles: 128.
            (16384, 128, "tw_gemm_tf32_sm90a_tma_m128", (1, 128, 1), 128),
            // 100 rows fill more than half of 128 (not of 256): 128 x 128
            // from 128 tiles on, 64 x 128 below.
            (100, 16384, "tw_gemm_tf32_sm90a_tma_m128", (128, 1, 1), 128),
            (100, 16256, "tw_gemm_tf32_sm90a_tma_m64", (127, 2, 1), 64),
            (1024, 1024, "tw_gemm_tf32_sm90a_tma_m64", (8, 16, 1), 64),
            (64, 65536, "tw_gemm_tf32_sm90a_tma_m64", (512, 1, 1), 64),
        ] {
            let p = plan(&gemm(GemmPrecision::Tf32, m, n, 64), true, 132).unwrap();
            assert_eq!(p.kernel.entry, entry, "{m}x{n}");
            assert_eq!((p.grid.x, p.grid.y, p.grid.z), grid, "{m}x{n}");
            let Geometry::GemmTiles { bm: tile_m, bn } = p.kernel.geometry else {
                unreachable!()
            };
            assert_eq!((tile_m, bn), (bm, 128), "{m}x{n}");
            assert_eq!(p.shared_bytes, tma_shared_bytes(bm, 128, 4));
            // Both operands through TF32 maps: the TMA unit rounds them.
            let (a, b) = (map(&p, 0), map(&p, 1));
            assert_eq!(
                (a.dtype, a.dims(), a.box_dims()),
                (TensorMapDtype::Tf32, &[64, m, 1][..], &[32, bm, 1][..])
            );
            assert_eq!(
                (b.dtype, b.strides(), b.box_dims()),
                (
                    TensorMapDtype::Tf32,
                    &[4 * n, 4 * n * 64][..],
                    &[32, 32, 1][..]
                )
            );
        }
    }

    #[test]
    fn batches_broadcast_and_step_in_the_maps() {
        let g = Gemm {
            batch: 3,
            stride_a: 0,
            stride_b: 64 * 520,
            stride_c: 300 * 520,
            ..gemm(GemmPrecision::Bf16, 300, 520, 64)
        };
        let p = plan(&g, true, 132).unwrap();
        // 3 x 9 tiles of 128 x 64 per batch, walked by the kernel.
        assert_eq!((p.grid.x, p.grid.y, p.grid.z), (81, 1, 1));
        assert_eq!(p.params[6].as_i32(), Some(3));
        assert_eq!(map(&p, 0).dims(), &[64, 300, 1]);
        assert_eq!(map(&p, 1).dims(), &[520, 64, 3]);
        assert_eq!(map(&p, 1).strides(), &[1040, 2 * 64 * 520]);
        assert_eq!(p.params[9].as_i32(), Some(0));
        assert_eq!(p.params[10].as_i32(), Some(1));
    }

    #[test]
    fn operands_that_do_not_suit_tensor_maps_take_the_wgmma_entries() {
        let ok = gemm(GemmPrecision::Bf16, 256, 256, 256);
        for (what, g) in [
            ("odd lda", Gemm { lda: 257, ..ok }),
            (
                "ldb of 12 bytes",
                Gemm {
                    ldb: 6,
                    n: 6,
                    ldc: 6,
                    ..ok
                },
            ),
            (
                "A 2 bytes off",
                Gemm {
                    a: DevicePtr(0x10_0002),
                    ..ok
                },
            ),
            (
                "B 8 bytes off",
                Gemm {
                    b: DevicePtr(0x8000_0008),
                    ..ok
                },
            ),
            (
                "batches of A overlap",
                Gemm {
                    batch: 2,
                    stride_a: 256,
                    ..ok
                },
            ),
            (
                "batch stride of 4 elements",
                Gemm {
                    batch: 2,
                    stride_b: 256 * 256 + 4,
                    ..ok
                },
            ),
            // A row stride past TMA's 2^40 bytes, and one whose matrix
            // size overflows: no map, so no TMA.
            ("lda of 2^40 bytes", Gemm { lda: 1 << 39, ..ok }),
            ("M * lda overflows", Gemm { lda: 1 << 62, ..ok }),
        ] {
            let p = plan(&g, true, 132).unwrap();
            assert_eq!(p.kernel.entry, "tw_gemm_bf16_sm90a", "{what}");
            assert_eq!((p.block.x, p.shared_bytes, p.params.len()), (256, 0, 14));
        }
        let tf32 = Gemm {
            lda: 260,
            precision: GemmPrecision::Tf32,
            ..ok
        };
        assert_eq!(
            plan(&tf32, true, 132).unwrap().kernel.entry,
            "tw_gemm_tf32_sm90a_tma_m64"
        );
        let tf32_odd = Gemm { lda: 258, ..tf32 };
        assert_eq!(
            plan(&tf32_odd, true, 132).unwrap().kernel.entry,
            "tw_gemm_tf32_sm90a"
        );
        let f32 = Gemm {
            precision: GemmPrecision::F32,
            ..ok
        };
        assert_eq!(plan(&f32, true, 132).unwrap().kernel.entry, "tw_gemm_f32");
        assert_eq!(plan(&ok, false, 132).unwrap().kernel.entry, "tw_gemm_bf16");
    }

    #[test]
    fn hopper_f32_gemms_split_k_from_512_on() {
        for (m, n, k, batch, entry, grid) in [
            (1024, 1024, 1024, 1, "tw_gemm_f32_split_k", (16, 8, 1)),
            (8192, 8192, 8192, 1, "tw_gemm_f32_split_k", (128, 64, 1)),
            (2048, 2048, 2048, 8, "tw_gemm_f32_split_k", (32, 16, 8)),
            // A column tile cut by N: both blocks of its pair still launch.
            (300, 129, 512, 1, "tw_gemm_f32_split_k", (4, 3, 1)),
            (300, 129, 511, 1, "tw_gemm_f32", (2, 3, 1)),
        ] {
            let g = Gemm {
                batch,
                ..gemm(GemmPrecision::F32, m, n, k)
            };
            let p = plan(&g, true, 132).unwrap();
            assert_eq!(p.kernel.entry, entry, "{m}x{n}x{k}");
            assert_eq!((p.grid.x, p.grid.y, p.grid.z), grid, "{m}x{n}x{k}");
            assert_eq!((p.block.x, p.params.len()), (256, 14));
            assert_eq!(p.shared_bytes, p.kernel.dynamic_shared);
        }
        assert_eq!(F32_SPLIT_K_SHARED, 99_840);
        // Only Hopper builds have clusters: sm_75 and sm_80 never split.
        let big = gemm(GemmPrecision::F32, 1024, 1024, 1024);
        assert_eq!(plan(&big, false, 132).unwrap().kernel.entry, "tw_gemm_f32");
        assert_eq!(plan(&big, false, 132).unwrap().shared_bytes, 0);
    }

    #[test]
    fn tma_shared_memory_fits_the_opt_in_limit() {
        // The sums of gemm_tma.cuh and gemm_tma_tf32.cuh, as measured there.
        let epilogue = 20 * 1024;
        assert_eq!(
            tma_shared_bytes(128, 256, 2),
            4 * 48 * 1024 + 8 * 8 + epilogue + 1024
        );
        assert_eq!(
            tma_shared_bytes(128, 128, 2),
            6 * 32 * 1024 + 12 * 8 + epilogue + 1024
        );
        assert_eq!(
            tma_shared_bytes(128, 64, 2),
            8 * 24 * 1024 + 16 * 8 + epilogue + 1024
        );
        assert_eq!(tma_shared_bytes(256, 128, 4), 4 * 48 * 1024 + 8 * 8 + 1024);
        assert_eq!(tma_shared_bytes(128, 128, 4), 6 * 32 * 1024 + 12 * 8 + 1024);
        assert_eq!(tma_shared_bytes(64, 128, 4), 8 * 24 * 1024 + 16 * 8 + 1024);
        for k in super::super::KERNELS {
            assert!(k.dynamic_shared <= 227 * 1024, "{}", k.entry);
        }
    }
}
