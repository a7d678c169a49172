//! The kernel's runtime checks on the CPU target: each call of a
//! [`RuntimeCheck`] is linked to a host function, the clock here and the
//! block's cooperative operations in [`super::block`]. The JIT's symbols
//! and the check's C signatures are this file's table.

use std::{sync::OnceLock, time::Instant};

use cranelift_codegen::ir::{ExternalName, Function, UserExternalName};
use cranelift_jit::JITModule;
use cranelift_module::{Linkage, Module};
use tensorwasm_core::lower::{LowerError, RuntimeCheck, atomic::add_f32_bits};

use super::module_error;

/// The JIT symbol of a runtime check's host function.
pub(super) fn check_symbol(check: RuntimeCheck) -> &'static str {
    match check {
        RuntimeCheck::Clock => "tensorwasm_clock",
        RuntimeCheck::SharedBase => "tensorwasm_shared_base",
        RuntimeCheck::SharedSize => "tensorwasm_shared_size",
        RuntimeCheck::Barrier => "tensorwasm_barrier",
        RuntimeCheck::BlockBegin => "tensorwasm_block_begin",
        RuntimeCheck::BlockDone => "tensorwasm_block_done",
        RuntimeCheck::LaneId => "tensorwasm_lane_id",
        RuntimeCheck::ShflIdx => "tensorwasm_shfl_idx",
        RuntimeCheck::ShflUp => "tensorwasm_shfl_up",
        RuntimeCheck::ShflDown => "tensorwasm_shfl_down",
        RuntimeCheck::ShflXor => "tensorwasm_shfl_xor",
        RuntimeCheck::Ballot => "tensorwasm_ballot",
        RuntimeCheck::VoteAny => "tensorwasm_vote_any",
        RuntimeCheck::VoteAll => "tensorwasm_vote_all",
        RuntimeCheck::AtomicAddF32 => "tensorwasm_atomic_add_f32",
    }
}

/// The address of a runtime check's host function, each of the C type of
/// [`RuntimeCheck::types`] (`i64` results as `u64`).
pub(super) fn host_check(check: RuntimeCheck) -> *const u8 {
    type Read = extern "C" fn() -> u64;
    type Wait = extern "C" fn();
    type Shuffle = extern "C" fn(i32, i32, i32) -> i32;
    type Vote = extern "C" fn(i32, i32) -> i32;
    match check {
        RuntimeCheck::Clock => clock as Read as *const u8,
        RuntimeCheck::SharedBase => super::block::shared_base as Read as *const u8,
        RuntimeCheck::SharedSize => super::block::shared_size as Read as *const u8,
        RuntimeCheck::Barrier => super::block::barrier as Wait as *const u8,
        RuntimeCheck::BlockBegin => super::block::block_begin as Wait as *const u8,
        RuntimeCheck::BlockDone => super::block::block_done as Wait as *const u8,
        RuntimeCheck::LaneId => super::block::lane_id as extern "C" fn() -> i32 as *const u8,
        RuntimeCheck::ShflIdx => super::block::shfl_idx as Shuffle as *const u8,
        RuntimeCheck::ShflUp => super::block::shfl_up as Shuffle as *const u8,
        RuntimeCheck::ShflDown => super::block::shfl_down as Shuffle as *const u8,
        RuntimeCheck::ShflXor => super::block::shfl_xor as Shuffle as *const u8,
        RuntimeCheck::Ballot => super::block::ballot as Vote as *const u8,
        RuntimeCheck::VoteAny => super::block::vote_any as Vote as *const u8,
        RuntimeCheck::VoteAll => super::block::vote_all as Vote as *const u8,
        RuntimeCheck::AtomicAddF32 => {
            atomic_add_f32 as extern "C" fn(u64, f32, i32) -> f32 as *const u8
        }
    }
}

/// [`RuntimeCheck::AtomicAddF32`]: a compare-and-swap loop on the `u32`
/// at host address `addr`, with the device's arithmetic: [`add_f32_bits`]
/// in the guest's memory (`global` nonzero), IEEE's in shared memory; the
/// old value.
extern "C" fn atomic_add_f32(addr: u64, v: f32, global: i32) -> f32 {
    use std::sync::atomic::{AtomicU32, Ordering};
    // SAFETY: the translator calls this only with `mem_base` (or the
    // block's shared base) plus an offset it checked to be 4-aligned and
    // in bounds of memory the launch keeps alive (see
    // `CpuKernel::host_kernel`); other threads touch the word only
    // atomically or through their own plain accesses, as on a GPU.
    let word = unsafe { &*std::ptr::with_exposed_provenance::<AtomicU32>(addr as usize) };
    let mut old = word.load(Ordering::Relaxed);
    loop {
        let new = if global != 0 {
            add_f32_bits(old, v.to_bits())
        } else {
            (f32::from_bits(old) + v).to_bits()
        };
        match word.compare_exchange_weak(old, new, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return f32::from_bits(old),
            Err(seen) => old = seen,
        }
    }
}

/// Links the kernel's calls of runtime checks to their host functions:
/// each is declared as an import of `module`, and the CLIF's name for it
/// (namespace [`RuntimeCheck::NAMESPACE`]) becomes the declaration's, as
/// cranelift-module resolves calls (namespace 0, index the [`FuncId`]).
pub(super) fn link_runtime_checks(
    module: &mut JITModule,
    function: &mut Function,
) -> Result<(), LowerError> {
    let call_conv = module.isa().default_call_conv();
    let mut declared = Vec::new();
    for check in RuntimeCheck::ALL {
        let mut sig = check.signature();
        sig.call_conv = call_conv;
        let id = module
            .declare_function(check_symbol(check), Linkage::Import, &sig)
            .map_err(module_error)?;
        declared.push((check, id));
    }
    let names: Vec<_> = function
        .params
        .user_named_funcs()
        .iter()
        .map(|(name_ref, name)| (name_ref, RuntimeCheck::from_external_name(name)))
        .collect();
    let mut linked = Vec::new();
    for (name_ref, check) in names {
        let Some(&(_, id)) = check.and_then(|c| declared.iter().find(|(d, _)| *d == c)) else {
            continue;
        };
        function
            .params
            .reset_user_func_name(name_ref, UserExternalName::new(0, id.as_u32()));
        linked.push(name_ref);
    }
    // The checks are host functions of the C calling convention, far from
    // the JIT's code.
    let dfg = &mut function.stencil.dfg;
    for ext in dfg.ext_funcs.values_mut() {
        if let ExternalName::User(name_ref) = ext.name
            && linked.contains(&name_ref)
        {
            dfg.signatures[ext.signature].call_conv = call_conv;
            ext.colocated = false;
        }
    }
    Ok(())
}

/// [`RuntimeCheck::Clock`] for kernels on the CPU target: nanoseconds
/// since the first reading in this process (the CPU driver's ticks: its
/// device reports a 1 GHz clock rate, so a launch's time limit in ticks is
/// its limit in nanoseconds). Monotonic, shared by every thread.
pub(super) extern "C" fn clock() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let epoch = *EPOCH.get_or_init(Instant::now);
    u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_is_monotonic_nanoseconds() {
        let a = clock();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = clock();
        assert!(b >= a + 2_000_000, "{a} then {b}");
    }
}
