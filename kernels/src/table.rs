//! The table of built-in kernels: for each PTX entry point, the op it runs,
//! its operands, its launch geometry, the architectures it is built for,
//! and its CPU oracle; and [`plan`], which turns a checked
//! [`TensorOp`] into the launch of one entry (docs/tensor-ops.md is the
//! contract the CUDA C and this table share).

use tensorwasm_core::{
    DevicePtr, Dim3, KernelParam,
    abi::{
        AbiError,
        tensor::{BinaryOp, ReduceOp, TensorOp, UnaryOp},
    },
};

use crate::ptx::PtxFile;

mod entries;
mod gemm;

/// How an entry's grid follows from the op's sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Geometry {
    /// `(ceil(N / bn), ceil(M / bm), batch)`: one block per output tile.
    GemmTiles {
        /// Tile rows.
        bm: u32,
        /// Tile columns.
        bn: u32,
    },
    /// `(min(tiles, blocks), 1, 1)`, tiles = `ceil(N / bn) * ceil(M / bm) *
    /// batch`: block `b` takes tiles `b`, `b + blocks`, ... (a persistent
    /// kernel; the batch count is one of its parameters). `blocks` is the
    /// device's multiprocessor count ([`plan_on`]).
    GemmPersistent {
        /// Tile rows.
        bm: u32,
        /// Tile columns.
        bn: u32,
    },
    /// `(split * ceil(N / bn), ceil(M / bm), batch)`: a cluster of `split`
    /// blocks per output tile (consecutive along x), each multiplying its
    /// share of K.
    GemmSplitK {
        /// Tile rows.
        bm: u32,
        /// Tile columns.
        bn: u32,
        /// Blocks per tile.
        split: u32,
    },
    /// `(outer * inner)`: one block per output element.
    PerOutput,
    /// `(outer * ceil(inner / width))`: one block per strip of `width`
    /// neighbouring outputs of one outer index.
    ColumnStrips {
        /// Outputs per strip.
        width: u32,
    },
    /// `(ceil(rows / per_block))`: `per_block` consecutive rows per block.
    Rows {
        /// Rows per block.
        per_block: u32,
    },
    /// `(clamp(ceil(n / per_block), 1, max_blocks))`, a grid-stride loop.
    GridStride {
        /// Elements one block covers per pass.
        per_block: u64,
        /// The most blocks launched.
        max_blocks: u64,
    },
    /// `(ceil(cols / tile), ceil(rows / tile), batch)`.
    TransposeTiles {
        /// Tile edge.
        tile: u32,
    },
}

/// One built-in kernel: a PTX entry point and what it computes.
#[derive(Clone, Copy, Debug)]
pub struct BuiltinKernel {
    /// The PTX entry point (and the CPU driver's host kernel of the same
    /// name).
    pub entry: &'static str,
    /// The op, for docs and errors.
    pub op: &'static str,
    /// Operand dtypes and shapes.
    pub operands: &'static str,
    /// The source (and PTX module) it is in.
    pub file: PtxFile,
    /// The oldest architecture it is built for (`major * 10 + minor`);
    /// every newer build of its file has it too.
    pub min_sm: u32,
    /// Only in the architecture-specific build for `min_sm` (`sm_90a`).
    pub arch_specific: bool,
    /// Threads per block.
    pub block: Dim3,
    /// The grid rule.
    pub geometry: Geometry,
    /// Dynamic shared memory per block, in bytes (0: static only).
    pub dynamic_shared: u32,
    /// The float64 reference it is tested against (`crate::oracle`).
    pub oracle: &'static str,
}

/// The longest rows the `_rows` and the 256-thread softmax and layer norm
/// hold in registers (32 floats per thread, `HELD` in reduce.cu); longer
/// rows go to the next entry up.
const WARP_ROW_COLS: u64 = 1024;
const BLOCK_ROW_COLS: u64 = 8192;

pub use entries::KERNELS;

/// The table's row for `entry`.
pub fn kernel(entry: &str) -> Option<&'static BuiltinKernel> {
    KERNELS.iter().find(|k| k.entry == entry)
}

/// One launch of a built-in kernel.
#[derive(Clone, Debug)]
pub struct LaunchPlan {
    /// The kernel.
    pub kernel: &'static BuiltinKernel,
    /// Blocks.
    pub grid: Dim3,
    /// Threads per block.
    pub block: Dim3,
    /// Dynamic shared memory per block, in bytes (the launch's
    /// `LaunchConfig::shared_mem_bytes`): 0 for a kernel with static shared
    /// memory only; past 48 KiB the CUDA driver opts the kernel in, up to
    /// the device's `max_shared_memory_per_block_optin`.
    pub shared_bytes: u32,
    /// The entry's parameters, in order (a TMA kernel's tensor maps as
    /// `KernelParam::TensorMap`, checked and encoded by the driver).
    pub params: Vec<KernelParam>,
}

/// Grid limits every CUDA device since sm_30 has.
const MAX_GRID_X: u64 = (1 << 31) - 1;
const MAX_GRID_YZ: u64 = 65535;

fn too_big(what: &str, value: u64, max: u64) -> AbiError {
    AbiError::limit(format!(
        "{what} {value} is more than a built-in kernel's launch allows ({max})"
    ))
}

fn grid_x(what: &str, blocks: u64) -> Result<u32, AbiError> {
    if blocks > MAX_GRID_X {
        return Err(too_big(what, blocks, MAX_GRID_X));
    }
    Ok(blocks as u32)
}

fn grid_yz(what: &str, blocks: u64) -> Result<u32, AbiError> {
    if blocks > MAX_GRID_YZ {
        return Err(too_big(what, blocks, MAX_GRID_YZ));
    }
    Ok(blocks as u32)
}

/// A size passed as the kernel's `int`.
fn int(what: &str, value: u64) -> Result<KernelParam, AbiError> {
    i32::try_from(value)
        .map(KernelParam::I32)
        .map_err(|_| too_big(what, value, i32::MAX as u64))
}

/// A size passed as the kernel's `long long` (every checked size fits).
fn long(what: &str, value: u64) -> Result<KernelParam, AbiError> {
    i64::try_from(value)
        .map(KernelParam::I64)
        .map_err(|_| too_big(what, value, i64::MAX as u64))
}

fn ptr(p: DevicePtr) -> KernelParam {
    KernelParam::Ptr(p)
}

fn entry(name: &str) -> &'static BuiltinKernel {
    match kernel(name) {
        Some(k) => k,
        // The names below are the table's own; a test checks every one.
        None => unreachable!("built-in kernel {name} is not in the table"),
    }
}

/// The multiprocessor count [`plan`] assumes: an H100 SXM's (and an
/// H200's).
pub const DEFAULT_MULTIPROCESSORS: u32 = 132;

/// [`plan_on`] a device of [`DEFAULT_MULTIPROCESSORS`].
pub fn plan(op: &TensorOp, sm: Option<u32>) -> Result<LaunchPlan, AbiError> {
    plan_on(op, sm, DEFAULT_MULTIPROCESSORS)
}

/// The launch that runs `op` on a device of compute capability `sm`
/// (`major * 10 + minor`; `None` for the CPU driver) with `multiprocessors`
/// SMs: its kernel, geometry and parameters. On sm_90 the Tensor Core GEMMs
/// use the `wgmma` entries of the sm_90a build, persistent over one block
/// per SM. Sizes past what the kernels' `int` parameters or the grid allow
/// are `ELIMIT`; nothing else about `op` is checked again (the descriptor
/// decoder did that).
pub fn plan_on(
    op: &TensorOp,
    sm: Option<u32>,
    multiprocessors: u32,
) -> Result<LaunchPlan, AbiError> {
    match *op {
        TensorOp::Gemm(ref g) => gemm::plan(g, sm == Some(90), multiprocessors.max(1)),
        TensorOp::Reduce {
            op,
            x,
            y,
            outer,
            n,
            inner,
        } => {
            // Contiguous rows (inner == 1): a block per output; otherwise a
            // block per strip of neighbouring outputs, read row by row.
            let k = entry(match (op, inner == 1) {
                (ReduceOp::Sum, true) => "tw_reduce_sum_f32",
                (ReduceOp::Max, true) => "tw_reduce_max_f32",
                (ReduceOp::Mean, true) => "tw_reduce_mean_f32",
                (ReduceOp::Sum, false) => "tw_reduce_sum_cols_f32",
                (ReduceOp::Max, false) => "tw_reduce_max_cols_f32",
                (ReduceOp::Mean, false) => "tw_reduce_mean_cols_f32",
            });
            let blocks = match k.geometry {
                Geometry::PerOutput => outer * inner,
                Geometry::ColumnStrips { width } => outer * inner.div_ceil(u64::from(width)),
                _ => unreachable!("reductions use output blocks or column strips"),
            };
            Ok(LaunchPlan {
                kernel: k,
                grid: Dim3::linear(grid_x("output blocks", blocks)?),
                block: k.block,
                shared_bytes: 0,
                params: vec![
                    ptr(x),
                    ptr(y),
                    int("outer", outer)?,
                    int("n", n)?,
                    int("inner", inner)?,
                ],
            })
        }
        TensorOp::Softmax { x, y, rows, cols } => {
            let k = row_entry(
                cols,
                [
                    "tw_softmax_rows_f32",
                    "tw_softmax_f32",
                    "tw_softmax_wide_f32",
                ],
            );
            Ok(LaunchPlan {
                kernel: k,
                grid: rows_grid(k, rows)?,
                block: k.block,
                shared_bytes: 0,
                params: vec![ptr(x), ptr(y), int("rows", rows)?, int("cols", cols)?],
            })
        }
        TensorOp::LayerNorm {
            x,
            gamma,
            beta,
            y,
            rows,
            cols,
            eps,
        } => {
            let k = row_entry(
                cols,
                [
                    "tw_layernorm_rows_f32",
                    "tw_layernorm_f32",
                    "tw_layernorm_wide_f32",
                ],
            );
            Ok(LaunchPlan {
                kernel: k,
                grid: rows_grid(k, rows)?,
                block: k.block,
                shared_bytes: 0,
                params: vec![
                    ptr(x),
                    ptr(gamma),
                    ptr(beta),
                    ptr(y),
                    int("rows", rows)?,
                    int("cols", cols)?,
                    KernelParam::F32(eps),
                ],
            })
        }
        TensorOp::Binary {
            op,
            a,
            b,
            y,
            n,
            b_period,
        } => {
            let k = entry(match op {
                BinaryOp::Add => "tw_add_f32",
                BinaryOp::Mul => "tw_mul_f32",
            });
            Ok(LaunchPlan {
                kernel: k,
                grid: grid_stride(k, n),
                block: k.block,
                shared_bytes: 0,
                params: vec![
                    ptr(a),
                    ptr(b),
                    ptr(y),
                    long("n", n)?,
                    long("b_period", b_period)?,
                ],
            })
        }
        TensorOp::Unary { op, x, y, n } => {
            let k = entry(match op {
                UnaryOp::Relu => "tw_relu_f32",
                UnaryOp::Gelu => "tw_gelu_f32",
            });
            Ok(LaunchPlan {
                kernel: k,
                grid: grid_stride(k, n),
                block: k.block,
                shared_bytes: 0,
                params: vec![ptr(x), ptr(y), long("n", n)?],
            })
        }
        TensorOp::Transpose {
            x,
            y,
            batch,
            rows,
            cols,
        } => {
            let k = entry("tw_transpose_f32");
            let Geometry::TransposeTiles { tile } = k.geometry else {
                unreachable!("transpose's geometry is its tiles")
            };
            let tile = u64::from(tile);
            Ok(LaunchPlan {
                kernel: k,
                grid: Dim3 {
                    x: grid_x("column tiles", cols.div_ceil(tile))?,
                    y: grid_yz("row tiles", rows.div_ceil(tile))?,
                    z: grid_yz("batch", batch)?,
                },
                block: k.block,
                shared_bytes: 0,
                params: vec![ptr(x), ptr(y), int("rows", rows)?, int("cols", cols)?],
            })
        }
    }
}

/// The softmax or layer norm entry for rows of `cols` columns, out of its
/// `[warp per row, 256 threads, 512 threads]` entries: the first that holds
/// the row in registers.
fn row_entry(cols: u64, entries: [&str; 3]) -> &'static BuiltinKernel {
    entry(if cols <= WARP_ROW_COLS {
        entries[0]
    } else if cols <= BLOCK_ROW_COLS {
        entries[1]
    } else {
        entries[2]
    })
}

fn rows_grid(k: &BuiltinKernel, rows: u64) -> Result<Dim3, AbiError> {
    let Geometry::Rows { per_block } = k.geometry else {
        unreachable!("softmax and layer norm use row blocks")
    };
    let blocks = rows.div_ceil(u64::from(per_block));
    Ok(Dim3::linear(grid_x("row blocks", blocks)?))
}

fn grid_stride(k: &BuiltinKernel, n: u64) -> Dim3 {
    let Geometry::GridStride {
        per_block,
        max_blocks,
    } = k.geometry
    else {
        unreachable!("elementwise kernels use grid-stride loops")
    };
    Dim3::linear(n.div_ceil(per_block).clamp(1, max_blocks) as u32)
}

#[cfg(test)]
mod tests {
    use tensorwasm_core::abi::tensor::{Gemm, GemmPrecision};

    use super::entries::block;
    use super::*;
    use crate::ptx::{BUILDS, build_for};

    #[test]
    fn every_entry_is_in_every_build_of_its_file_from_its_oldest_architecture() {
        for k in KERNELS {
            for b in BUILDS.iter().filter(|b| b.file == k.file) {
                let declared = b.text.contains(&format!(".entry {}(", k.entry));
                let expected = if k.arch_specific {
                    b.arch_specific && b.sm == k.min_sm
                } else {
                    b.sm >= k.min_sm
                };
                assert_eq!(
                    declared,
                    expected,
                    "{} in {}.{}",
                    k.entry,
                    k.file.stem(),
                    b.target()
                );
            }
            assert!(build_for(k.file, k.min_sm).is_some(), "{}", k.entry);
        }
    }

    #[test]
    fn entries_are_unique_and_gemm_grids_cover_the_output() {
        for (i, k) in KERNELS.iter().enumerate() {
            assert!(
                KERNELS[..i].iter().all(|o| o.entry != k.entry),
                "{}",
                k.entry
            );
        }
        let g = Gemm {
            precision: GemmPrecision::Bf16,
            batch: 3,
            m: 129,
            n: 4097,
            k: 17,
            a: DevicePtr(0x1000),
            b: DevicePtr(0x2000),
            c: DevicePtr(0x3000),
            lda: 17,
            ldb: 4097,
            ldc: 4097,
            stride_a: 0,
            stride_b: 17 * 4097,
            stride_c: 129 * 4097,
            alpha: 1.0,
            beta: 0.0,
        };
        let p = plan(&TensorOp::Gemm(g), Some(80)).unwrap();
        assert_eq!(p.kernel.entry, "tw_gemm_bf16");
        let hopper = plan(&TensorOp::Gemm(g), Some(90)).unwrap();
        assert_eq!(hopper.kernel.entry, "tw_gemm_bf16_sm90a");
        let f32 = Gemm {
            precision: GemmPrecision::F32,
            ..g
        };
        assert_eq!(
            plan(&TensorOp::Gemm(f32), Some(90)).unwrap().kernel.entry,
            "tw_gemm_f32"
        );
        assert_eq!((p.grid.x, p.grid.y, p.grid.z), (33, 2, 3));
        assert_eq!(p.params.len(), 14);
        let big = Gemm { m: 1 << 40, ..g };
        assert_eq!(
            plan(&TensorOp::Gemm(big), None).unwrap_err().errno,
            tensorwasm_core::abi::Errno::ELIMIT
        );
    }

    #[test]
    fn row_ops_pick_their_entry_by_row_length() {
        let softmax = |rows, cols| TensorOp::Softmax {
            x: DevicePtr(0),
            y: DevicePtr(0),
            rows,
            cols,
        };
        let layernorm = |rows, cols| TensorOp::LayerNorm {
            x: DevicePtr(0),
            gamma: DevicePtr(0),
            beta: DevicePtr(0),
            y: DevicePtr(0),
            rows,
            cols,
            eps: 1e-5,
        };
        for (rows, cols, suffix, grid, threads) in [
            (1, 1, "_rows", 1, 256),
            (17, 1024, "_rows", 3, 256),
            (65536, 1024, "_rows", 8192, 256),
            (3, 1025, "", 3, 256),
            (16384, 4096, "", 16384, 256),
            (5, 8192, "", 5, 256),
            (5, 8193, "_wide", 5, 512),
            (4096, 16384, "_wide", 4096, 512),
            (2, 1 << 20, "_wide", 2, 512),
        ] {
            for (op, name) in [
                (softmax(rows, cols), "softmax"),
                (layernorm(rows, cols), "layernorm"),
            ] {
                let p = plan(&op, Some(90)).unwrap();
                assert_eq!(p.kernel.entry, format!("tw_{name}{suffix}_f32"));
                assert_eq!(
                    (p.grid.x, p.grid.y, p.grid.z),
                    (grid, 1, 1),
                    "{name} {cols}"
                );
                assert_eq!(p.block, block(threads, 1));
                let Geometry::Rows { per_block } = p.kernel.geometry else {
                    panic!("{name}: not a row geometry")
                };
                // A warp per row, or a block per row.
                assert!(per_block == 1 || per_block * 32 == p.block.x);
                assert!(u64::from(p.grid.x) * u64::from(per_block) >= rows);
            }
        }
    }

    #[test]
    fn reductions_read_contiguous_rows_or_column_strips() {
        let reduce = |op, outer, n, inner| TensorOp::Reduce {
            op,
            x: DevicePtr(0),
            y: DevicePtr(0),
            outer,
            n,
            inner,
        };
        for (outer, n, inner, entry, grid, threads) in [
            (16384, 4096, 1, "tw_reduce_sum_f32", 16384, (256, 1)),
            (1, 1, 1, "tw_reduce_sum_f32", 1, (256, 1)),
            (1, 16384, 4096, "tw_reduce_sum_cols_f32", 128, (32, 32)),
            (5, 17, 33, "tw_reduce_sum_cols_f32", 10, (32, 32)),
            (3, 1, 2, "tw_reduce_sum_cols_f32", 3, (32, 32)),
        ] {
            for (op, name) in [
                (ReduceOp::Sum, "sum"),
                (ReduceOp::Max, "max"),
                (ReduceOp::Mean, "mean"),
            ] {
                let p = plan(&reduce(op, outer, n, inner), None).unwrap();
                assert_eq!(p.kernel.entry, entry.replace("sum", name));
                assert_eq!((p.grid.x, p.grid.y, p.grid.z), (grid, 1, 1));
                assert_eq!(p.block, block(threads.0, threads.1));
                assert_eq!(p.params.len(), 5);
                if let Geometry::ColumnStrips { width } = p.kernel.geometry {
                    assert_eq!(width, p.block.x, "a warp across each strip");
                }
            }
        }
    }

    #[test]
    fn elementwise_grids_are_clamped_and_transpose_tiles_round_up() {
        let relu = |n| TensorOp::Unary {
            op: UnaryOp::Relu,
            x: DevicePtr(0),
            y: DevicePtr(0),
            n,
        };
        assert_eq!(plan(&relu(1), None).unwrap().grid.x, 1);
        assert_eq!(plan(&relu(1025), None).unwrap().grid.x, 2);
        assert_eq!(plan(&relu(1 << 40), None).unwrap().grid.x, 65536);
        let t = TensorOp::Transpose {
            x: DevicePtr(0),
            y: DevicePtr(0),
            batch: 2,
            rows: 33,
            cols: 1,
        };
        let p = plan(&t, None).unwrap();
        assert_eq!((p.grid.x, p.grid.y, p.grid.z), (1, 2, 2));
    }
}
