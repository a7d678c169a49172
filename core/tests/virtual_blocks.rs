//! The virtual-block loop's block indices (`docs/kernels.md`, "Virtual
//! blocks"): a thread runs virtual blocks `first`, `first + stride`, ...
//! below `gx * gy * gz`, each with index `(v % gx, v / gx % gy, v / (gx *
//! gy))`, computed without 64-bit division: the first by 32-bit divisions
//! (`ctaid.x` is 32-bit), each later one as the last plus the stride's
//! index with carries. These launches, which the reference (wasmtime)
//! cannot express, check grids on both sides of 2^32 blocks and threads
//! that run many virtual blocks, through the interpreter.

#[allow(dead_code)] // the shared harness; this suite uses a part of it
mod harness;

use harness::*;
use tensorwasm_core::lower::Intrinsic;

/// Each virtual block appends its `(block_idx_x, y, z)` at `12 * n + 4`,
/// `n` the count at address 0.
const RECORD_BLOCKS: &str = r#"(module
  (import "tensorwasm_kernel" "block_idx_x" (func $bx (result i32)))
  (import "tensorwasm_kernel" "block_idx_y" (func $by (result i32)))
  (import "tensorwasm_kernel" "block_idx_z" (func $bz (result i32)))
  (memory (export "memory") 1)
  (func (export "kernel")
    (local $at i32)
    (local.set $at (i32.add (i32.mul (i32.load (i32.const 0)) (i32.const 12)) (i32.const 4)))
    (i32.store (local.get $at) (call $bx))
    (i32.store offset=4 (local.get $at) (call $by))
    (i32.store offset=8 (local.get $at) (call $bz))
    (i32.store (i32.const 0) (i32.add (i32.load (i32.const 0)) (i32.const 1)))))"#;

/// The indices the thread saw, in order.
fn blocks_seen(grid: [i64; 3], first: u32, stride: u32) -> Vec<[u32; 3]> {
    let mut launch = Launch::unlimited();
    launch.virtual_grid = Some(VirtualGrid {
        grid,
        first,
        stride,
    });
    let wasm = wat::parse_str(RECORD_BLOCKS).expect("wat");
    let mut memory = vec![0u8; PAGE];
    let outcome = interpret_launch(&translate(&wasm), &[], &mut memory, PLENTY, &mut launch);
    assert_eq!(outcome, Outcome::Returned);
    let word = |at: usize| u32::from_le_bytes(memory[at..at + 4].try_into().unwrap());
    (0..word(0) as usize)
        .map(|n| [0, 4, 8].map(|d| word(12 * n + 4 + d)))
        .collect()
}

/// What the thread should see: every `first + k * stride` below the
/// total, decomposed in 128 bits.
fn expected(grid: [i64; 3], first: u32, stride: u32) -> Vec<[u32; 3]> {
    let [gx, gy, gz] = grid.map(|g| g as u128);
    let total = gx * gy * gz;
    let mut v = u128::from(first);
    let mut seen = Vec::new();
    while v < total {
        seen.push([v % gx, v / gx % gy, v / (gx * gy)].map(|i| i as u32));
        v += u128::from(stride);
    }
    seen
}

#[test]
fn block_indices_on_both_sides_of_two_to_the_32_blocks() {
    for (grid, first, stride) in [
        // A 2-D grid of 2^32 blocks exactly, up to the last block; carries
        // into y and z.
        ([65_536, 65_536, 1], u32::MAX, 1),
        ([65_536, 65_536, 1], 65_535 * 65_536 + 17, 3_000),
        // 3-D, below 2^32: several virtual blocks a thread.
        ([1_000, 3_000, 7], 1_234_567, 5_000_000),
        ([7, 5, 300], 3, 34),
        // A 1-D physical grid as wide as the virtual grid's x, but not its
        // y or z: the indices still come from divisions, not `ctaid`.
        ([4, 3, 1], 1, 4),
        ([4, 1, 3], 2, 4),
        ([3, 1, 5_000], 2, 7),
        // More than 2^32 blocks: a thread's later virtual blocks lie past
        // 2^32, where a 32-bit division of `vb` would wrap.
        ([70_000, 65_535, 1], 4_000_000_000, 200_000_000),
        ([2_147_483_647, 3, 2], 4_294_967_295, 4_294_967_295),
        // 1-D: no division at all (the host's extents are u32, so a 1-D
        // grid has fewer than 2^32 blocks).
        ([4_294_967_295, 1, 1], 4_294_967_000, 100),
        ([4_294_967_295, 1, 1], 7, 2_147_483_647),
    ] {
        let want = expected(grid, first, stride);
        assert!(!want.is_empty());
        assert_eq!(
            blocks_seen(grid, first, stride),
            want,
            "grid {grid:?}, first {first}, stride {stride}"
        );
    }
}

#[test]
fn a_physical_grid_that_is_the_virtual_grid_runs_each_block_once_by_its_ctaid() {
    // The host launches the guest's grid itself when every block fits at
    // once: the thread's block index is its `ctaid` (no division) and it
    // runs that one virtual block, whether the host says so
    // (`KernelAbi::own_grid_params`) or the kernel finds `nctaid` equal to
    // the grid.
    for ((block, grid), own_grid) in [
        ([3, 4, 5], [7, 8, 9]),
        ([0, 0, 0], [1, 1, 1]),
        ([6, 7, 8], [7, 8, 9]),
        ([2, 1, 0], [65_535, 65_535, 1]),
    ]
    .into_iter()
    .flat_map(|case| [(case, true), (case, false)])
    {
        let mut launch = Launch::unlimited();
        launch.own_grid = own_grid;
        for (which, v) in [
            (Intrinsic::BlockIdxX, block[0]),
            (Intrinsic::BlockIdxY, block[1]),
            (Intrinsic::BlockIdxZ, block[2]),
            (Intrinsic::GridDimX, grid[0]),
            (Intrinsic::GridDimY, grid[1]),
            (Intrinsic::GridDimZ, grid[2]),
        ] {
            launch.intrinsics[which.index()] = v as i32;
        }
        let wasm = wat::parse_str(RECORD_BLOCKS).expect("wat");
        let mut memory = vec![0u8; PAGE];
        let outcome = interpret_launch(&translate(&wasm), &[], &mut memory, PLENTY, &mut launch);
        assert_eq!(outcome, Outcome::Returned);
        let word = |at: usize| u32::from_le_bytes(memory[at..at + 4].try_into().unwrap());
        assert_eq!(
            word(0),
            1,
            "block {block:?} of {grid:?} ran once (own grid said: {own_grid})"
        );
        assert_eq!([word(4), word(8), word(12)], block.map(|b: u32| b));
    }
}
