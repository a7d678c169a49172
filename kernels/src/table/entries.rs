//! The table's entries: every built-in kernel, its operands, geometry,
//! architectures and oracle (docs/tensor-ops.md lists the same).

use tensorwasm_core::Dim3;

use super::{BuiltinKernel, Geometry, gemm};
use crate::ptx::PtxFile;

pub(super) const fn block(x: u32, y: u32) -> Dim3 {
    Dim3 { x, y, z: 1 }
}

const GEMM_TILES: Geometry = Geometry::GemmTiles { bm: 128, bn: 128 };
/// Outputs per block of the `_cols` reductions (`STRIP` in reduce.cu).
const STRIP: u32 = 32;
/// Rows per block of the `_rows` softmax and layer norm: a warp per row.
const ROWS_PER_BLOCK: u32 = 8;
const ELEMENTWISE: Geometry = Geometry::GridStride {
    per_block: 1024,
    max_blocks: 65536,
};

const BF16_TMA: &str = "A bf16 [b?,M,K], B bf16 [b?,K,N], C f32 [b?,M,N]; A, B by TMA descriptor";
const F16_TMA: &str = "A f16 [b?,M,K], B f16 [b?,K,N], C f32 [b?,M,N]; A, B by TMA descriptor";

/// A 16-bit TMA GEMM (gemm_tma.cuh) of 128 x `bn` tiles, persistent.
const fn tma16(entry: &'static str, operands: &'static str, bn: u32) -> BuiltinKernel {
    BuiltinKernel {
        entry,
        op: "gemm, Hopper TMA + wgmma",
        operands,
        file: PtxFile::Gemm,
        min_sm: 90,
        arch_specific: true,
        block: block(384, 1),
        geometry: Geometry::GemmPersistent { bm: 128, bn },
        dynamic_shared: gemm::tma_shared_bytes(128, bn, 2),
        oracle: "oracle::gemm",
    }
}

/// A kernel of `reduce.ptx` (reductions, softmax, layer norm: every
/// architecture, static shared memory only).
const fn reduce_ptx(
    entry: &'static str,
    op: &'static str,
    operands: &'static str,
    block: Dim3,
    geometry: Geometry,
    oracle: &'static str,
) -> BuiltinKernel {
    BuiltinKernel {
        entry,
        op,
        operands,
        file: PtxFile::Reduce,
        min_sm: 75,
        arch_specific: false,
        block,
        geometry,
        dynamic_shared: 0,
        oracle,
    }
}

/// The TF32 TMA GEMM (gemm_tma_tf32.cuh) of `bm` x `bn` tiles.
const fn tma_tf32(entry: &'static str, bm: u32, bn: u32) -> BuiltinKernel {
    BuiltinKernel {
        entry,
        op: "gemm (precision 1), Hopper TMA + wgmma",
        operands: "A f32 [b?,M,K], B f32 [b?,K,N], C f32 [b?,M,N]; A, B by TF32 TMA descriptor (inputs rounded to TF32 as they load)",
        file: PtxFile::Gemm,
        min_sm: 90,
        arch_specific: true,
        block: block(384, 1),
        geometry: Geometry::GemmTiles { bm, bn },
        dynamic_shared: gemm::tma_shared_bytes(bm, bn, 4),
        oracle: "oracle::gemm",
    }
}

/// Every built-in kernel.
pub static KERNELS: &[BuiltinKernel] = &[
    BuiltinKernel {
        entry: "tw_gemm_f32",
        op: "gemm",
        operands: "A f32 [b?,M,K], B f32 [b?,K,N], C f32 [b?,M,N]",
        file: PtxFile::Gemm,
        min_sm: 75,
        arch_specific: false,
        block: block(256, 1),
        geometry: GEMM_TILES,
        dynamic_shared: 0,
        oracle: "oracle::gemm",
    },
    BuiltinKernel {
        entry: "tw_gemm_f32_split_k",
        op: "gemm, K split in two (a cluster of two blocks per tile)",
        operands: "A f32 [b?,M,K], B f32 [b?,K,N], C f32 [b?,M,N]",
        file: PtxFile::Gemm,
        min_sm: 90,
        arch_specific: false,
        block: block(256, 1),
        geometry: Geometry::GemmSplitK {
            bm: 128,
            bn: 128,
            split: 2,
        },
        dynamic_shared: gemm::F32_SPLIT_K_SHARED,
        oracle: "oracle::gemm",
    },
    BuiltinKernel {
        entry: "tw_gemm_tf32",
        op: "gemm (precision 1)",
        operands: "A f32 [b?,M,K], B f32 [b?,K,N], C f32 [b?,M,N]; inputs rounded to TF32",
        file: PtxFile::Gemm,
        min_sm: 80,
        arch_specific: false,
        block: block(256, 1),
        geometry: GEMM_TILES,
        dynamic_shared: 0,
        oracle: "oracle::gemm",
    },
    BuiltinKernel {
        entry: "tw_gemm_bf16",
        op: "gemm",
        operands: "A bf16 [b?,M,K], B bf16 [b?,K,N], C f32 [b?,M,N]",
        file: PtxFile::Gemm,
        min_sm: 80,
        arch_specific: false,
        block: block(256, 1),
        geometry: GEMM_TILES,
        dynamic_shared: 0,
        oracle: "oracle::gemm",
    },
    BuiltinKernel {
        entry: "tw_gemm_f16",
        op: "gemm",
        operands: "A f16 [b?,M,K], B f16 [b?,K,N], C f32 [b?,M,N]",
        file: PtxFile::Gemm,
        min_sm: 80,
        arch_specific: false,
        block: block(256, 1),
        geometry: GEMM_TILES,
        dynamic_shared: 0,
        oracle: "oracle::gemm",
    },
    BuiltinKernel {
        entry: "tw_gemm_tf32_sm90a",
        op: "gemm (precision 1), Hopper wgmma",
        operands: "A f32 [b?,M,K], B f32 [b?,K,N], C f32 [b?,M,N]; inputs rounded to TF32",
        file: PtxFile::Gemm,
        min_sm: 90,
        arch_specific: true,
        block: block(256, 1),
        geometry: GEMM_TILES,
        dynamic_shared: 0,
        oracle: "oracle::gemm",
    },
    BuiltinKernel {
        entry: "tw_gemm_bf16_sm90a",
        op: "gemm, Hopper wgmma",
        operands: "A bf16 [b?,M,K], B bf16 [b?,K,N], C f32 [b?,M,N]",
        file: PtxFile::Gemm,
        min_sm: 90,
        arch_specific: true,
        block: block(256, 1),
        geometry: GEMM_TILES,
        dynamic_shared: 0,
        oracle: "oracle::gemm",
    },
    BuiltinKernel {
        entry: "tw_gemm_f16_sm90a",
        op: "gemm, Hopper wgmma",
        operands: "A f16 [b?,M,K], B f16 [b?,K,N], C f32 [b?,M,N]",
        file: PtxFile::Gemm,
        min_sm: 90,
        arch_specific: true,
        block: block(256, 1),
        geometry: GEMM_TILES,
        dynamic_shared: 0,
        oracle: "oracle::gemm",
    },
    tma16("tw_gemm_bf16_sm90a_tma", BF16_TMA, 256),
    tma16("tw_gemm_bf16_sm90a_tma_n128", BF16_TMA, 128),
    tma16("tw_gemm_bf16_sm90a_tma_n64", BF16_TMA, 64),
    tma16("tw_gemm_f16_sm90a_tma", F16_TMA, 256),
    tma16("tw_gemm_f16_sm90a_tma_n128", F16_TMA, 128),
    tma16("tw_gemm_f16_sm90a_tma_n64", F16_TMA, 64),
    tma_tf32("tw_gemm_tf32_sm90a_tma", 256, 128),
    tma_tf32("tw_gemm_tf32_sm90a_tma_m128", 128, 128),
    tma_tf32("tw_gemm_tf32_sm90a_tma_m64", 64, 128),
    reduce_ptx(
        "tw_reduce_sum_f32",
        "reduce_sum (inner == 1)",
        "X f32 (rank 1..4, contiguous), Y f32 (X without the axis)",
        block(256, 1),
        Geometry::PerOutput,
        "oracle::reduce",
    ),
    reduce_ptx(
        "tw_reduce_max_f32",
        "reduce_max (inner == 1)",
        "X f32 (rank 1..4, contiguous), Y f32 (X without the axis)",
        block(256, 1),
        Geometry::PerOutput,
        "oracle::reduce",
    ),
    reduce_ptx(
        "tw_reduce_mean_f32",
        "reduce_mean (inner == 1)",
        "X f32 (rank 1..4, contiguous), Y f32 (X without the axis)",
        block(256, 1),
        Geometry::PerOutput,
        "oracle::reduce",
    ),
    reduce_ptx(
        "tw_reduce_sum_cols_f32",
        "reduce_sum (inner > 1)",
        "X f32 (rank 1..4, contiguous), Y f32 (X without the axis)",
        block(STRIP, 32),
        Geometry::ColumnStrips { width: STRIP },
        "oracle::reduce",
    ),
    reduce_ptx(
        "tw_reduce_max_cols_f32",
        "reduce_max (inner > 1)",
        "X f32 (rank 1..4, contiguous), Y f32 (X without the axis)",
        block(STRIP, 32),
        Geometry::ColumnStrips { width: STRIP },
        "oracle::reduce",
    ),
    reduce_ptx(
        "tw_reduce_mean_cols_f32",
        "reduce_mean (inner > 1)",
        "X f32 (rank 1..4, contiguous), Y f32 (X without the axis)",
        block(STRIP, 32),
        Geometry::ColumnStrips { width: STRIP },
        "oracle::reduce",
    ),
    reduce_ptx(
        "tw_softmax_rows_f32",
        "softmax (C <= 1024, a warp per row)",
        "X f32 [.., C], Y f32 like X",
        block(256, 1),
        Geometry::Rows {
            per_block: ROWS_PER_BLOCK,
        },
        "oracle::softmax",
    ),
    reduce_ptx(
        "tw_softmax_f32",
        "softmax (C <= 8192)",
        "X f32 [.., C], Y f32 like X",
        block(256, 1),
        Geometry::Rows { per_block: 1 },
        "oracle::softmax",
    ),
    reduce_ptx(
        "tw_softmax_wide_f32",
        "softmax (C > 8192)",
        "X f32 [.., C], Y f32 like X",
        block(512, 1),
        Geometry::Rows { per_block: 1 },
        "oracle::softmax",
    ),
    reduce_ptx(
        "tw_layernorm_rows_f32",
        "layernorm (C <= 1024, a warp per row)",
        "X f32 [.., C], gamma f32 [C], beta f32 [C], Y f32 like X",
        block(256, 1),
        Geometry::Rows {
            per_block: ROWS_PER_BLOCK,
        },
        "oracle::layernorm",
    ),
    reduce_ptx(
        "tw_layernorm_f32",
        "layernorm (C <= 8192)",
        "X f32 [.., C], gamma f32 [C], beta f32 [C], Y f32 like X",
        block(256, 1),
        Geometry::Rows { per_block: 1 },
        "oracle::layernorm",
    ),
    reduce_ptx(
        "tw_layernorm_wide_f32",
        "layernorm (C > 8192)",
        "X f32 [.., C], gamma f32 [C], beta f32 [C], Y f32 like X",
        block(512, 1),
        Geometry::Rows { per_block: 1 },
        "oracle::layernorm",
    ),
    BuiltinKernel {
        entry: "tw_add_f32",
        op: "add",
        operands: "A f32, B f32 (A's shape or a suffix of it), Y f32 like A",
        file: PtxFile::Elementwise,
        min_sm: 75,
        arch_specific: false,
        block: block(256, 1),
        geometry: ELEMENTWISE,
        dynamic_shared: 0,
        oracle: "oracle::add",
    },
    BuiltinKernel {
        entry: "tw_mul_f32",
        op: "mul",
        operands: "A f32, B f32 (A's shape or a suffix of it), Y f32 like A",
        file: PtxFile::Elementwise,
        min_sm: 75,
        arch_specific: false,
        block: block(256, 1),
        geometry: ELEMENTWISE,
        dynamic_shared: 0,
        oracle: "oracle::mul",
    },
    BuiltinKernel {
        entry: "tw_relu_f32",
        op: "relu",
        operands: "X f32, Y f32 like X",
        file: PtxFile::Elementwise,
        min_sm: 75,
        arch_specific: false,
        block: block(256, 1),
        geometry: ELEMENTWISE,
        dynamic_shared: 0,
        oracle: "oracle::relu",
    },
    BuiltinKernel {
        entry: "tw_gelu_f32",
        op: "gelu",
        operands: "X f32, Y f32 like X",
        file: PtxFile::Elementwise,
        min_sm: 75,
        arch_specific: false,
        block: block(256, 1),
        geometry: ELEMENTWISE,
        dynamic_shared: 0,
        oracle: "oracle::gelu",
    },
    BuiltinKernel {
        entry: "tw_transpose_f32",
        op: "transpose",
        operands: "X f32 [b?,R,C], Y f32 [b?,C,R]",
        file: PtxFile::Elementwise,
        min_sm: 75,
        arch_specific: false,
        block: block(32, 8),
        geometry: Geometry::TransposeTiles { tile: 32 },
        dynamic_shared: 0,
        oracle: "oracle::transpose",
    },
];
