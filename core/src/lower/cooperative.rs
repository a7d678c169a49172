//! The block's cooperative intrinsics a kernel calls as imports of
//! [`super::INTRINSIC_MODULE`] (`docs/kernels.md`, "The
//! GPU programming model"): block-shared memory (sized at launch, reached
//! by checked offsets), the block barrier, and warp operations. The
//! translator lowers them to runtime calls ([`RuntimeCheck`](super::RuntimeCheck))
//! and checked accesses; a kernel that calls one runs its blocks' threads
//! together. This file is the table of names and signatures; it emits
//! nothing.

use super::atomic::AtomicIntrinsic;
use super::intrinsic_field;
use super::translate::WasmType;

/// A shuffle's source lane.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ShuffleMode {
    /// Lane `x & 31`.
    Idx,
    /// Lane `lane_id - x` (none below lane 0).
    Up,
    /// Lane `lane_id + x` (none past lane 31).
    Down,
    /// Lane `lane_id ^ x` (none past lane 31).
    Xor,
}

/// A warp vote.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Vote {
    /// The lanes' predicates as a bit mask.
    Ballot,
    /// 1 when some lane's predicate is nonzero.
    Any,
    /// 1 when every lane's predicate is nonzero.
    All,
}

/// A cooperative intrinsic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CoopIntrinsic {
    /// `shared_size() -> i32`: the block's shared bytes.
    SharedSize,
    /// `shared_load_T(offset: i32) -> T`.
    SharedLoad(WasmType),
    /// `shared_store_T(offset: i32, value: T)`.
    SharedStore(WasmType),
    /// `shared_atomic_*`: the atomic intrinsic of the same name
    /// (`atomic_*`) on shared memory, `(offset, operands...) -> old`.
    SharedAtomic(AtomicIntrinsic),
    /// `barrier()`: `__syncthreads()`.
    Barrier,
    /// `lane_id() -> i32`.
    LaneId,
    /// `warp_size() -> i32`: 32.
    WarpSize,
    /// `shfl_MODE_T(v: T, x: i32) -> T`, `T` `i32` or `f32`.
    Shuffle(ShuffleMode, WasmType),
    /// `ballot(pred: i32) -> i32`, `any(pred) -> i32`, `all(pred) -> i32`.
    Vote(Vote),
}

use CoopIntrinsic as C;
use WasmType::{F32, F64, I32, I64};

/// Every cooperative intrinsic but the shared atomics, with its import
/// name (the shared atomics are `shared_` and an atomic intrinsic's name).
const NAMES: [(CoopIntrinsic, &str); 23] = [
    (C::SharedSize, "shared_size"),
    (C::SharedLoad(I32), "shared_load_i32"),
    (C::SharedLoad(I64), "shared_load_i64"),
    (C::SharedLoad(F32), "shared_load_f32"),
    (C::SharedLoad(F64), "shared_load_f64"),
    (C::SharedStore(I32), "shared_store_i32"),
    (C::SharedStore(I64), "shared_store_i64"),
    (C::SharedStore(F32), "shared_store_f32"),
    (C::SharedStore(F64), "shared_store_f64"),
    (C::Barrier, "barrier"),
    (C::LaneId, "lane_id"),
    (C::WarpSize, "warp_size"),
    (C::Shuffle(ShuffleMode::Idx, I32), "shfl_idx_i32"),
    (C::Shuffle(ShuffleMode::Up, I32), "shfl_up_i32"),
    (C::Shuffle(ShuffleMode::Down, I32), "shfl_down_i32"),
    (C::Shuffle(ShuffleMode::Xor, I32), "shfl_xor_i32"),
    (C::Shuffle(ShuffleMode::Idx, F32), "shfl_idx_f32"),
    (C::Shuffle(ShuffleMode::Up, F32), "shfl_up_f32"),
    (C::Shuffle(ShuffleMode::Down, F32), "shfl_down_f32"),
    (C::Shuffle(ShuffleMode::Xor, F32), "shfl_xor_f32"),
    (C::Vote(Vote::Ballot), "ballot"),
    (C::Vote(Vote::Any), "any"),
    (C::Vote(Vote::All), "all"),
];

/// The prefix of the shared atomics' names.
const SHARED_ATOMIC_PREFIX: &str = "shared_";

impl CoopIntrinsic {
    /// Every cooperative intrinsic, the shared atomics last.
    pub fn all() -> impl Iterator<Item = CoopIntrinsic> {
        NAMES
            .iter()
            .map(|&(c, _)| c)
            .chain(AtomicIntrinsic::ALL.map(C::SharedAtomic))
    }

    /// The intrinsic an import names.
    pub fn from_import(module: &str, name: &str) -> Option<CoopIntrinsic> {
        let mut buf = [0; 64];
        let name = intrinsic_field(module, name, &mut buf)?;
        if let Some(&(c, _)) = NAMES.iter().find(|(_, n)| *n == name) {
            return Some(c);
        }
        let atomic = name.strip_prefix(SHARED_ATOMIC_PREFIX)?;
        AtomicIntrinsic::ALL
            .into_iter()
            .find(|a| a.import_name() == atomic)
            .map(C::SharedAtomic)
    }

    /// The import's name, written into `out` (the shared atomics' names
    /// are not static strings).
    pub fn import_name(self, out: &mut alloc::string::String) {
        match self {
            C::SharedAtomic(a) => {
                out.push_str(SHARED_ATOMIC_PREFIX);
                out.push_str(a.import_name());
            }
            _ => {
                if let Some((_, n)) = NAMES.iter().find(|(c, _)| *c == self) {
                    out.push_str(n);
                }
            }
        }
    }

    /// Its parameters.
    pub fn params(self) -> alloc::vec::Vec<WasmType> {
        match self {
            C::SharedSize | C::Barrier | C::LaneId | C::WarpSize => alloc::vec![],
            C::SharedLoad(_) => alloc::vec![I32],
            C::SharedStore(t) => alloc::vec![I32, t],
            C::SharedAtomic(a) => a.params().collect(),
            C::Shuffle(_, t) => alloc::vec![t, I32],
            C::Vote(_) => alloc::vec![I32],
        }
    }

    /// Its result, if it has one.
    pub fn result(self) -> Option<WasmType> {
        match self {
            C::SharedStore(_) | C::Barrier => None,
            C::SharedLoad(t) | C::Shuffle(_, t) => Some(t),
            C::SharedAtomic(a) => Some(a.value_type()),
            C::SharedSize | C::LaneId | C::WarpSize | C::Vote(_) => Some(I32),
        }
    }

    /// Whether it touches shared memory (the kernel then reads the
    /// block's shared base and size once at entry).
    pub fn uses_shared_memory(self) -> bool {
        matches!(
            self,
            C::SharedSize | C::SharedLoad(_) | C::SharedStore(_) | C::SharedAtomic(_)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lower::INTRINSIC_MODULE;
    use alloc::string::String;

    #[test]
    fn names_round_trip_and_are_distinct() {
        let mut seen = alloc::vec::Vec::new();
        for c in CoopIntrinsic::all() {
            let mut name = String::new();
            c.import_name(&mut name);
            assert_eq!(CoopIntrinsic::from_import(INTRINSIC_MODULE, &name), Some(c));
            assert!(!seen.contains(&name), "{name} twice");
            assert!(
                AtomicIntrinsic::from_import(INTRINSIC_MODULE, &name).is_none(),
                "{name} is an atomic intrinsic's name"
            );
            seen.push(name);
        }
        assert_eq!(seen.len(), 23 + AtomicIntrinsic::ALL.len());
        assert_eq!(CoopIntrinsic::from_import("env", "barrier"), None);
        assert_eq!(
            CoopIntrinsic::from_import(INTRINSIC_MODULE, "shared_atomic_add_f32"),
            Some(C::SharedAtomic(AtomicIntrinsic::AddF32))
        );
    }
}
