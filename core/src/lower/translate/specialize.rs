//! The kernel's copy for aligned arguments. A kernel's pointers arrive as
//! `i32` arguments, and nothing says they are aligned, so an access at
//! `a + (i << 2)` keeps the PTX lowerer's alignment test (a branch to
//! byte accesses), which also keeps loads from overlapping. Guests pass
//! aligned pointers almost always; this pass makes a second copy of the
//! kernel's body in which chosen arguments are known to have their low
//! bits zero, and the kernel's entry picks it when they do.
//!
//! The arguments and bits are chosen by the alignment analysis
//! (`align::unproven_accesses`): every `i32` argument (the first
//! [`MAX_ARGUMENTS`]) assumed a multiple
//! of the widest unproven access's size, then, one at a time, each
//! assumption dropped or narrowed while no more accesses go unproven. If
//! the assumptions prove no access more, nothing changes. Otherwise the
//! entry block computes, for each chosen argument `a` with `k` bits,
//! `a & !(2^k - 1)` (equal to `a` when the test below passes, and known to
//! the analysis to have `k` low zero bits), and replaces its `jump` into
//! the body by `brif (or of each a & (2^k - 1)) == 0, copy, body`; the copy
//! reads the masked values where the body reads the arguments. The
//! accesses the analysis then proves are flagged `aligned` by
//! `align::flag_aligned_accesses`, in the copy and wherever else they are
//! proven. The test is the same for every thread of a launch (the
//! arguments are), so the threads of a block take the same copy. Loop
//! versioning (`version`) then works on the copy only: the original body
//! runs for misaligned pointers, rarely, and keeps every check (which
//! halves the code the kernel adds).
//!
//! Made for launches that meet the assumption only
//! ([`BodyVariant::Aligned`](super::BodyVariant::Aligned)), the entry
//! jumps to the copy and the original body, unreachable, is dropped: the
//! host checks the arguments and the memory's length before the launch
//! and launches the general variant when they fail, so the driver
//! compiles one body, not two. The kernel does not test them again: a
//! test at its entry, on launch-wide values, stands between every thread
//! and its first access and cost 5% of a vector add's bandwidth and 7% of
//! a 3-D stencil's time on an H200 (the same test before each `return`,
//! off that path, cost as much: ptxas then keeps convergence barriers
//! around the body). The memory's length is the host's word in every
//! variant (each bounds test trusts it); this one also trusts its range.
//! The arguments it does not need to trust: the copy reads them masked,
//! so its accesses are aligned whatever a launch passes.
//!
//! The copy also runs only on memories of [`BOUNDED_MIN_LEN`] (one page)
//! to [`BOUNDED_LEN`] bytes (4 GiB less 16 MiB: every memory but the empty
//! one and the largest few hundred page counts). There `merge` may test
//! several addresses `x + d` (`d < 2^24`) at once with one test of `x`
//! (none of them can wrap around 2^32), and a bounds test's limit is one
//! 32-bit subtraction (`limits`). Other memories run the original body,
//! every check in place.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use cranelift_codegen::cursor::{Cursor, FuncCursor};
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::types::I32;
use cranelift_codegen::ir::{Block, BlockArg, Function, InstBuilder, InstructionData, Value};

use super::AlignedArg;
use super::align::{guest_accesses, unproven_accesses};
use super::copy::copy_blocks;

/// The most arguments the analysis considers (the first `i32` ones): each
/// costs up to four runs of the alignment analysis over the kernel, and a
/// guest may declare a kernel of hundreds of parameters.
const MAX_ARGUMENTS: usize = 16;

/// The largest memory (bytes) the copy runs on (module docs).
pub(crate) const BOUNDED_LEN: i64 = (1 << 32) - (1 << 24);

/// The smallest memory (bytes) the copy runs on (module docs).
pub(crate) const BOUNDED_MIN_LEN: i64 = 1 << 16;

/// The most instructions a kernel may have to be copied (a copy doubles
/// the code ptxas and the driver compile).
const MAX_KERNEL_INSTS: usize = 4096;

/// Makes the aligned-argument copy of `func` when it proves some access
/// aligned (module docs); the blocks of the original body (which runs only
/// when an argument is not aligned or the memory's length is outside
/// [`BOUNDED_MIN_LEN`]..=[`BOUNDED_LEN`]) if it did, with the arguments
/// assumed aligned. `wasm_params` are the kernel's Wasm parameters (the
/// first entry parameters), `mem_base` and `mem_len` its memory's base and
/// length. With `only`, the entry jumps to the copy, no test made, and the
/// original body is unreachable (module docs).
pub(super) fn specialize_for_aligned_arguments(
    func: &mut Function,
    wasm_params: usize,
    mem_base: Value,
    mem_len: Value,
    only: bool,
) -> Option<(Vec<Block>, Vec<AlignedArg>)> {
    let entry = func.layout.entry_block()?;
    let size: usize = func
        .layout
        .blocks()
        .map(|b| func.layout.block_insts(b).count())
        .sum();
    if size > MAX_KERNEL_INSTS {
        return None;
    }
    let jump = func.layout.last_inst(entry)?;
    if !matches!(func.dfg.insts[jump], InstructionData::Jump { .. }) {
        return None;
    }
    let assumed = choose(func, entry, wasm_params, mem_base)?;
    let params = func.dfg.block_params(entry);
    let described: Vec<AlignedArg> = assumed
        .iter()
        .filter_map(|&(argument, bits)| {
            let param = params.iter().position(|&p| p == argument)?;
            Some(AlignedArg { param, bits })
        })
        .collect();

    // The masked arguments and the test, before the entry's jump.
    let srcloc = func.srcloc(jump);
    let mut pos = FuncCursor::new(func).at_inst(jump).with_srcloc(srcloc);
    let mut masked: BTreeMap<Value, Value> = BTreeMap::new();
    let mut low_bits = None;
    for &(argument, bits) in &assumed {
        let mask = (1i64 << bits) - 1;
        let kept = pos.ins().band_imm_s(argument, !mask);
        masked.insert(argument, kept);
        if !only {
            let low = pos.ins().band_imm_s(argument, mask);
            low_bits = Some(match low_bits {
                None => low,
                Some(others) => pos.ins().bor(others, low),
            });
        }
    }
    let aligned = match low_bits {
        Some(low_bits) => {
            let zero_low = pos.ins().icmp_imm_s(IntCC::Equal, low_bits, 0);
            // `BOUNDED_MIN_LEN <= len <= BOUNDED_LEN` in one unsigned compare.
            let above_min = pos.ins().iadd_imm_s(mem_len, -BOUNDED_MIN_LEN);
            let small = pos.ins().icmp_imm_s(
                IntCC::UnsignedLessThanOrEqual,
                above_min,
                BOUNDED_LEN - BOUNDED_MIN_LEN,
            );
            Some(pos.ins().band(zero_low, small))
        }
        None if only && !assumed.is_empty() => None,
        None => return None,
    };

    // The copy of everything after the entry block.
    let body: Vec<Block> = func.layout.blocks().filter(|&b| b != entry).collect();
    let copy = copy_blocks(func, &body, masked);
    let InstructionData::Jump { destination, .. } = func.dfg.insts[jump] else {
        return None;
    };
    let target = destination.block(&func.dfg.value_lists);
    let args: Vec<Value> = destination
        .args(&func.dfg.value_lists)
        .filter_map(|a| a.as_value())
        .collect();
    let index = body.iter().position(|&b| b == target)?;
    let copy_target = copy.blocks[index];
    let mapped: Vec<BlockArg> = args.iter().map(|&v| copy.value(v).into()).collect();
    let mut pos = FuncCursor::new(func).at_inst(jump).with_srcloc(srcloc);
    match aligned {
        Some(aligned) => {
            let plain: Vec<BlockArg> = args.iter().map(|&v| v.into()).collect();
            pos.ins()
                .brif(aligned, copy_target, &mapped, target, &plain);
        }
        None => {
            pos.ins().jump(copy_target, &mapped);
        }
    }
    func.layout.remove_inst(jump);
    Some((body, described))
}

/// The arguments to assume aligned, each with its low zero bits: `None`
/// when no assumption proves an access more.
fn choose(
    func: &Function,
    entry: Block,
    wasm_params: usize,
    mem_base: Value,
) -> Option<Vec<(Value, u32)>> {
    let unproven = |assumed: &[(Value, u32)]| unproven_accesses(func, mem_base, assumed);
    let widest = guest_accesses(func, mem_base)
        .into_iter()
        .map(|(_, _, bits)| bits)
        .max()?;
    let params = func.dfg.block_params(entry);
    let mut assumed: Vec<(Value, u32)> = params[..wasm_params.min(params.len())]
        .iter()
        .filter(|&&p| func.dfg.value_type(p) == I32)
        .take(MAX_ARGUMENTS)
        .map(|&p| (p, widest))
        .collect();
    let none = unproven(&[]);
    let best = unproven(&assumed);
    if best >= none {
        return None;
    }
    // Drop or narrow each assumption that proves nothing more.
    let mut k = 0;
    while k < assumed.len() {
        let (argument, bits) = assumed[k];
        let mut keep = bits;
        for fewer in (0..bits).rev() {
            assumed[k] = (argument, fewer);
            if unproven(&assumed) > best {
                break;
            }
            keep = fewer;
        }
        if keep == 0 {
            assumed.remove(k);
        } else {
            assumed[k] = (argument, keep);
            k += 1;
        }
    }
    Some(assumed)
}
