//! Handles: the opaque `u64` names a guest holds for its buffers, modules,
//! functions and launches, and [`HandleTable`], which issues them and checks
//! every one a guest hands back. A forged, stale, foreign or wrongly-kinded
//! handle is an [`Errno::EBADH`] error, never a wrong object.
//!
//! Layout (`docs/ABI.md`): bits 40..63 the owner, 36..39 the kind, 16..35 the
//! slot's generation, 0..15 the slot. The owner is never 0, so neither is a
//! handle.

use alloc::{format, vec::Vec};
use core::{fmt, mem};
// The one use of atomics in core outside `crate::sync`, on purpose: the
// owner counter is a `static`, which loom's atomics cannot be (their `new`
// is not `const`), and its single `fetch_update` leaves a loom model nothing
// to explore. 32 bits, so thumbv7em has it too.
use core::sync::atomic::{AtomicU32, Ordering};

use super::errno::{AbiError, Errno};

const SLOT_BITS: u32 = 16;
const GENERATION_SHIFT: u32 = 16;
const GENERATION_BITS: u32 = 20;
const KIND_SHIFT: u32 = 36;
const KIND_BITS: u32 = 4;
const OWNER_SHIFT: u32 = 40;
const OWNER_BITS: u32 = 24;

/// The largest owner id; ids run 1..=`OWNER_MAX` and then wrap to 1.
pub const OWNER_MAX: u32 = (1 << OWNER_BITS) - 1;
/// The largest generation a slot reaches; freeing it then retires the slot.
pub const GENERATION_MAX: u32 = (1 << GENERATION_BITS) - 1;
/// The most slots one table may have (slot numbers are 16 bits).
pub const MAX_TABLE_CAPACITY: usize = 1 << SLOT_BITS;

/// The next owner id [`OwnerId::allocate`] hands out.
static NEXT_OWNER: AtomicU32 = AtomicU32::new(1);

/// The guest a handle belongs to: 24 bits, never 0, unique among the last
/// 2^24 guests of a process.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct OwnerId(u32);

impl OwnerId {
    /// A fresh id from the process-wide counter (wrapping within 1..2^24,
    /// skipping 0).
    pub fn allocate() -> OwnerId {
        let step = |cur: u32| {
            Some(if cur >= OWNER_MAX || cur == 0 {
                1
            } else {
                cur + 1
            })
        };
        let previous = match NEXT_OWNER.fetch_update(Ordering::Relaxed, Ordering::Relaxed, step) {
            Ok(previous) | Err(previous) => previous,
        };
        // `previous` is in 1..=OWNER_MAX unless the counter was 0, which
        // `step` never stores.
        OwnerId::from_raw(previous).unwrap_or(OwnerId(1))
    }

    /// The id with this value (as [`OwnerId::from_raw`]), taken by a
    /// guest rebuilt from a snapshot so that its old handles stay its own:
    /// the process-wide counter moves past it, so ids allocated later do not
    /// repeat it (unless the counter wraps).
    pub fn adopt(raw: u32) -> Option<OwnerId> {
        let id = OwnerId::from_raw(raw)?;
        if raw < OWNER_MAX {
            NEXT_OWNER.fetch_max(raw + 1, Ordering::Relaxed);
        }
        Some(id)
    }

    /// The id with this value, or `None` unless it is in 1..2^24.
    pub const fn from_raw(raw: u32) -> Option<OwnerId> {
        if raw == 0 || raw > OWNER_MAX {
            None
        } else {
            Some(OwnerId(raw))
        }
    }

    /// The id's value.
    pub const fn get(self) -> u32 {
        self.0
    }
}

impl fmt::Debug for OwnerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OwnerId({:#x})", self.0)
    }
}

/// What a handle names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[repr(u8)]
pub enum HandleKind {
    /// A device buffer.
    Buffer = 1,
    /// A loaded module.
    Module = 2,
    /// A kernel function of a module.
    Function = 3,
    /// A launch not yet waited for.
    Launch = 4,
}

impl HandleKind {
    /// The kind with these 4 bits, or `None` for an unassigned value.
    pub const fn from_bits(bits: u32) -> Option<HandleKind> {
        match bits {
            1 => Some(HandleKind::Buffer),
            2 => Some(HandleKind::Module),
            3 => Some(HandleKind::Function),
            4 => Some(HandleKind::Launch),
            _ => None,
        }
    }

    /// The kind's bits in a handle.
    pub const fn bits(self) -> u32 {
        self as u32
    }

    /// The kind's name in error text: `"buffer"`, `"module"`, ...
    pub const fn name(self) -> &'static str {
        match self {
            HandleKind::Buffer => "buffer",
            HandleKind::Module => "module",
            HandleKind::Function => "function",
            HandleKind::Launch => "launch",
        }
    }
}

impl fmt::Display for HandleKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A guest-held name of one object, as the guest passes it (`i64`, read as
/// `u64`). Any `u64` is a `Handle`; only a [`HandleTable`] says whether it
/// names anything.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Handle(pub u64);

impl Handle {
    /// The handle of `slot` at `generation` (truncated to 20 bits).
    pub(crate) const fn compose(
        owner: OwnerId,
        kind: HandleKind,
        generation: u32,
        slot: u16,
    ) -> Handle {
        Handle(
            ((owner.0 as u64) << OWNER_SHIFT)
                | ((kind.bits() as u64) << KIND_SHIFT)
                | (((generation & GENERATION_MAX) as u64) << GENERATION_SHIFT)
                | slot as u64,
        )
    }

    /// The raw value the guest holds.
    pub const fn raw(self) -> u64 {
        self.0
    }

    /// The owner bits (40..63); 0 in no issued handle.
    pub const fn owner_bits(self) -> u32 {
        (self.0 >> OWNER_SHIFT) as u32
    }

    /// The kind bits (36..39).
    pub const fn kind_bits(self) -> u32 {
        ((self.0 >> KIND_SHIFT) & ((1 << KIND_BITS) - 1)) as u32
    }

    /// The kind the bits name, if any.
    pub const fn kind(self) -> Option<HandleKind> {
        HandleKind::from_bits(self.kind_bits())
    }

    /// The generation bits (16..35).
    pub const fn generation(self) -> u32 {
        ((self.0 >> GENERATION_SHIFT) & GENERATION_MAX as u64) as u32
    }

    /// The slot bits (0..15).
    pub const fn slot(self) -> u16 {
        (self.0 & 0xffff) as u16
    }
}

impl fmt::Debug for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Handle({:#018x})", self.0)
    }
}

impl fmt::Display for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#018x}", self.0)
    }
}

/// What a slot holds.
enum Entry<T> {
    /// An object, named by the slot's current generation.
    Live(T),
    /// Nothing; the slot's generation is the next one to issue.
    Free,
    /// Nothing, for ever: its last generation was used up.
    Retired,
}

struct Slot<T> {
    generation: u32,
    entry: Entry<T>,
}

/// One slot of a [`HandleTable::image`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotImage<U> {
    /// The slot's generation: a live object's, or the next to issue.
    pub generation: u32,
    /// What the slot holds.
    pub state: SlotState<U>,
}

/// What a slot of a [`SlotImage`] holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SlotState<U> {
    /// An object (as the image maps it).
    Live(U),
    /// Nothing, reusable.
    Free,
    /// Nothing, for ever.
    Retired,
}

/// The objects of one kind that one guest holds, named by [`Handle`]s.
///
/// A slot's generation goes up each time its object is freed, so an old
/// handle to a reused slot is refused; a slot whose generation is used up is
/// retired, never reused. Slots are allocated as needed, up to the capacity.
pub struct HandleTable<T> {
    owner: OwnerId,
    kind: HandleKind,
    capacity: usize,
    max_generation: u32,
    slots: Vec<Slot<T>>,
    /// Free (not retired) slots, most recently freed last.
    free: Vec<u16>,
    live: usize,
    retired: usize,
}

impl<T> HandleTable<T> {
    /// An empty table of `kind` objects of `owner`, holding at most
    /// `capacity` at once (clamped to [`MAX_TABLE_CAPACITY`]).
    pub fn new(owner: OwnerId, kind: HandleKind, capacity: usize) -> Self {
        HandleTable::with_max_generation(owner, kind, capacity, GENERATION_MAX)
    }

    /// [`HandleTable::new`], with slots retired after generation
    /// `max_generation` (clamped to [`GENERATION_MAX`]) instead of after the
    /// last one the layout holds: lets tests reach retirement quickly.
    pub fn with_max_generation(
        owner: OwnerId,
        kind: HandleKind,
        capacity: usize,
        max_generation: u32,
    ) -> Self {
        HandleTable {
            owner,
            kind,
            capacity: capacity.min(MAX_TABLE_CAPACITY),
            max_generation: max_generation.min(GENERATION_MAX),
            slots: Vec::new(),
            free: Vec::new(),
            live: 0,
            retired: 0,
        }
    }

    /// The guest whose handles this table issues.
    pub fn owner(&self) -> OwnerId {
        self.owner
    }

    /// The kind of object it holds.
    pub fn kind(&self) -> HandleKind {
        self.kind
    }

    /// The most objects it holds at once.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Live objects.
    pub fn len(&self) -> usize {
        self.live
    }

    /// No live objects.
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Stores `value` and returns its new handle; [`Errno::ELIMIT`] when no
    /// slot is free (the value is dropped).
    pub fn insert(&mut self, value: T) -> Result<Handle, AbiError> {
        while let Some(index) = self.free.pop() {
            if let Some(slot) = self.slots.get_mut(usize::from(index))
                && matches!(slot.entry, Entry::Free)
            {
                slot.entry = Entry::Live(value);
                self.live += 1;
                return Ok(Handle::compose(
                    self.owner,
                    self.kind,
                    slot.generation,
                    index,
                ));
            }
        }
        if self.slots.len() < self.capacity
            && let Ok(index) = u16::try_from(self.slots.len())
        {
            self.slots.push(Slot {
                generation: 0,
                entry: Entry::Live(value),
            });
            self.live += 1;
            return Ok(Handle::compose(self.owner, self.kind, 0, index));
        }
        Err(AbiError::limit(format!(
            "no free {} handle: {} live and {} retired of {}",
            self.kind, self.live, self.retired, self.capacity
        )))
    }

    /// Finds the slot `handle` names, or says why it names nothing here.
    fn locate(&self, handle: Handle) -> Result<usize, AbiError> {
        let kind = self.kind;
        if handle.0 == 0 {
            return Err(AbiError::bad_handle("handle 0 is never a valid handle"));
        }
        if handle.owner_bits() != self.owner.0 {
            return Err(AbiError::bad_handle(if handle.owner_bits() == 0 {
                format!("handle {handle} was never issued (no owner)")
            } else {
                format!("handle {handle} belongs to another guest")
            }));
        }
        if handle.kind_bits() != kind.bits() {
            return Err(AbiError::bad_handle(match handle.kind() {
                Some(other) => format!("handle {handle} is a {other} handle, not a {kind} handle"),
                None => format!(
                    "handle {handle} was never issued (kind bits {})",
                    handle.kind_bits()
                ),
            }));
        }
        let index = usize::from(handle.slot());
        let Some(slot) = self.slots.get(index) else {
            return Err(AbiError::bad_handle(format!(
                "{kind} handle {handle} was never issued (slot {index} out of range)"
            )));
        };
        let generation = handle.generation();
        match (&slot.entry, generation.cmp(&slot.generation)) {
            (Entry::Live(_), core::cmp::Ordering::Equal) => Ok(index),
            (_, core::cmp::Ordering::Less) | (Entry::Retired, core::cmp::Ordering::Equal) => Err(
                AbiError::bad_handle(format!("{kind} handle {handle} was freed")),
            ),
            _ => Err(AbiError::bad_handle(format!(
                "{kind} handle {handle} was never issued (generation {generation} not reached)"
            ))),
        }
    }

    /// The object `handle` names; [`Errno::EBADH`] (with the reason) if it
    /// names none of this table's live objects.
    pub fn get(&self, handle: Handle) -> Result<&T, AbiError> {
        let index = self.locate(handle)?;
        match self.slots.get(index).map(|s| &s.entry) {
            Some(Entry::Live(value)) => Ok(value),
            _ => Err(stale(self.kind, handle)),
        }
    }

    /// The object `handle` names, mutably; errors as [`HandleTable::get`].
    pub fn get_mut(&mut self, handle: Handle) -> Result<&mut T, AbiError> {
        let index = self.locate(handle)?;
        match self.slots.get_mut(index).map(|s| &mut s.entry) {
            Some(Entry::Live(value)) => Ok(value),
            _ => Err(stale(self.kind, handle)),
        }
    }

    /// Takes the object out; `handle` is invalid from now on. Errors as
    /// [`HandleTable::get`], and then nothing changes.
    pub fn remove(&mut self, handle: Handle) -> Result<T, AbiError> {
        let index = self.locate(handle)?;
        self.release(index).ok_or_else(|| stale(self.kind, handle))
    }

    /// Takes every live object out (in slot order); every handle issued so
    /// far is invalid from now on.
    pub fn take_all(&mut self) -> Vec<T> {
        let mut taken = Vec::with_capacity(self.live);
        for index in 0..self.slots.len() {
            if let Some(value) = self.release(index) {
                taken.push(value);
            }
        }
        taken
    }

    /// Live objects with their handles, in slot order.
    pub fn iter(&self) -> impl Iterator<Item = (Handle, &T)> + '_ {
        let (owner, kind) = (self.owner, self.kind);
        self.slots
            .iter()
            .zip(0..=u16::MAX)
            .filter_map(move |(slot, index)| match &slot.entry {
                Entry::Live(value) => {
                    Some((Handle::compose(owner, kind, slot.generation, index), value))
                }
                _ => None,
            })
    }

    /// Every slot in order, as a snapshot keeps it: its generation and what
    /// it holds, each live object mapped by `f`. With
    /// [`HandleTable::from_image`] it rebuilds a table in which every handle
    /// means what it meant here (live handles name the rebuilt objects,
    /// freed ones stay freed).
    pub fn image<U>(&self, mut f: impl FnMut(Handle, &T) -> U) -> Vec<SlotImage<U>> {
        let (owner, kind) = (self.owner, self.kind);
        self.slots
            .iter()
            .zip(0..=u16::MAX)
            .map(|(slot, index)| SlotImage {
                generation: slot.generation,
                state: match &slot.entry {
                    Entry::Live(value) => SlotState::Live(f(
                        Handle::compose(owner, kind, slot.generation, index),
                        value,
                    )),
                    Entry::Free => SlotState::Free,
                    Entry::Retired => SlotState::Retired,
                },
            })
            .collect()
    }

    /// A table of `owner`'s `kind` objects rebuilt from an
    /// [`image`](HandleTable::image) whose live objects were made again.
    /// [`Errno::EINVAL`] if the image does not fit a table of `capacity`
    /// (too many slots, a generation past the last).
    pub fn from_image(
        owner: OwnerId,
        kind: HandleKind,
        capacity: usize,
        image: Vec<SlotImage<T>>,
    ) -> Result<Self, AbiError> {
        let mut table = HandleTable::new(owner, kind, capacity);
        if image.len() > table.capacity {
            return Err(AbiError::new(
                Errno::EINVAL,
                format!(
                    "a {kind} table image of {} slots exceeds the capacity {}",
                    image.len(),
                    table.capacity
                ),
            ));
        }
        for (slot, index) in image.into_iter().zip(0..=u16::MAX) {
            if slot.generation > table.max_generation {
                return Err(AbiError::new(
                    Errno::EINVAL,
                    format!(
                        "{kind} slot {index}: generation {} is past the last",
                        slot.generation
                    ),
                ));
            }
            let entry = match slot.state {
                SlotState::Live(value) => {
                    table.live += 1;
                    Entry::Live(value)
                }
                SlotState::Free => {
                    table.free.push(index);
                    Entry::Free
                }
                SlotState::Retired => {
                    table.retired += 1;
                    Entry::Retired
                }
            };
            table.slots.push(Slot {
                generation: slot.generation,
                entry,
            });
        }
        // `insert` pops from the end: reuse low slots first.
        table.free.reverse();
        Ok(table)
    }

    /// Empties a live slot: its generation moves on, or, used up, the slot
    /// is retired. `None` (and no change) if the slot holds nothing.
    fn release(&mut self, index: usize) -> Option<T> {
        let max_generation = self.max_generation;
        let slot = self.slots.get_mut(index)?;
        if !matches!(slot.entry, Entry::Live(_)) {
            return None;
        }
        let next = if slot.generation >= max_generation {
            Entry::Retired
        } else {
            slot.generation += 1;
            Entry::Free
        };
        let Entry::Live(value) = mem::replace(&mut slot.entry, next) else {
            return None;
        };
        self.live -= 1;
        if matches!(slot.entry, Entry::Retired) {
            self.retired += 1;
        } else if let Ok(index) = u16::try_from(index) {
            self.free.push(index);
        }
        Some(value)
    }
}

impl<T> fmt::Debug for HandleTable<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandleTable")
            .field("owner", &self.owner)
            .field("kind", &self.kind)
            .field("live", &self.live)
            .field("retired", &self.retired)
            .field("capacity", &self.capacity)
            .finish()
    }
}

/// The error for a handle whose slot holds nothing although `locate`
/// accepted it (cannot happen; kept so no path panics).
fn stale(kind: HandleKind, handle: Handle) -> AbiError {
    AbiError::new(Errno::EBADH, format!("{kind} handle {handle} was freed"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    fn owner(raw: u32) -> OwnerId {
        OwnerId::from_raw(raw).expect("test owner ids are in range")
    }

    fn ebadh<T: fmt::Debug>(r: Result<T, AbiError>, contains: &str) {
        match r {
            Err(e) => {
                assert_eq!(e.errno, Errno::EBADH, "{e}");
                assert!(e.reason.contains(contains), "{e:?} lacks {contains:?}");
            }
            Ok(v) => panic!("expected EBADH ({contains}), got {v:?}"),
        }
    }

    #[test]
    // The literals are grouped by field: owner, kind, generation, slot.
    #[allow(clippy::unusual_byte_groupings)]
    fn layout_matches_the_abi() {
        let h = Handle::compose(owner(0xab_cdef), HandleKind::Function, 0xf_edcb, 0x1234);
        assert_eq!(h.raw(), 0xabcdef_3_fedcb_1234);
        assert_eq!(h.owner_bits(), 0xab_cdef);
        assert_eq!(h.kind(), Some(HandleKind::Function));
        assert_eq!(h.generation(), 0xf_edcb);
        assert_eq!(h.slot(), 0x1234);
        assert_eq!(h.to_string(), "0xabcdef3fedcb1234");
        let top = Handle::compose(
            owner(OWNER_MAX),
            HandleKind::Launch,
            GENERATION_MAX,
            u16::MAX,
        );
        assert_eq!(top.raw(), 0xffffff_4_fffff_ffff);
    }

    #[test]
    fn owner_ids_are_24_bits_and_never_zero() {
        assert_eq!(OwnerId::from_raw(0), None);
        assert_eq!(OwnerId::from_raw(1).map(OwnerId::get), Some(1));
        assert_eq!(
            OwnerId::from_raw(OWNER_MAX).map(OwnerId::get),
            Some(OWNER_MAX)
        );
        assert_eq!(OwnerId::from_raw(OWNER_MAX + 1), None);
        assert_eq!(OwnerId::from_raw(u32::MAX), None);
        let a = OwnerId::allocate();
        let b = OwnerId::allocate();
        assert_ne!(a, b);
        for id in [a, b] {
            assert!((1..=OWNER_MAX).contains(&id.get()));
        }
    }

    #[test]
    fn owner_counter_wraps_past_zero() {
        // Other tests allocate concurrently, so only the wrap's shape is
        // checked: from the top, the next ids are small and never 0.
        NEXT_OWNER.store(OWNER_MAX, Ordering::Relaxed);
        let ids = [
            OwnerId::allocate(),
            OwnerId::allocate(),
            OwnerId::allocate(),
        ];
        for id in ids {
            assert!((1..=OWNER_MAX).contains(&id.get()), "{id:?}");
        }
        assert!(ids.iter().any(|id| id.get() < 1000), "{ids:?}");
    }

    #[test]
    fn insert_get_remove() {
        let mut t = HandleTable::new(owner(7), HandleKind::Buffer, 4);
        assert!(t.is_empty());
        let a = t.insert("a").expect("room");
        let b = t.insert("b").expect("room");
        assert_ne!(a, b);
        assert_ne!(a.raw(), 0);
        assert_eq!(t.len(), 2);
        assert_eq!(t.get(a), Ok(&"a"));
        *t.get_mut(b).expect("live") = "B";
        assert_eq!(t.get(b), Ok(&"B"));
        assert_eq!(t.iter().collect::<Vec<_>>(), [(a, &"a"), (b, &"B")]);
        assert_eq!(t.remove(a), Ok("a"));
        assert_eq!(t.len(), 1);
        ebadh(t.get(a), "was freed");
        ebadh(t.remove(a), "was freed");
        ebadh(t.get_mut(a), "was freed");
        // The slot is reused with the next generation; the old handle stays dead.
        let c = t.insert("c").expect("room");
        assert_eq!(c.slot(), a.slot());
        assert_eq!(c.generation(), a.generation() + 1);
        ebadh(t.get(a), "was freed");
        assert_eq!(t.get(c), Ok(&"c"));
    }

    #[test]
    fn full_table_is_elimit() {
        for capacity in [0, 1, 3] {
            let mut t = HandleTable::new(owner(1), HandleKind::Module, capacity);
            for i in 0..capacity {
                t.insert(i).expect("room");
            }
            let e = t.insert(99).expect_err("full");
            assert_eq!(e.errno, Errno::ELIMIT, "{e}");
            assert!(e.reason.contains("module"), "{e}");
        }
        let t: HandleTable<()> = HandleTable::new(owner(1), HandleKind::Module, usize::MAX);
        assert_eq!(t.capacity(), MAX_TABLE_CAPACITY);
    }

    #[test]
    fn largest_table_uses_every_slot_number() {
        let mut t = HandleTable::new(owner(2), HandleKind::Launch, MAX_TABLE_CAPACITY);
        let mut last = Handle(0);
        for i in 0..MAX_TABLE_CAPACITY {
            last = t.insert(i).expect("room");
        }
        assert_eq!(last.slot(), u16::MAX);
        assert_eq!(t.get(last), Ok(&(MAX_TABLE_CAPACITY - 1)));
        assert_eq!(t.iter().count(), MAX_TABLE_CAPACITY);
        assert_eq!(t.iter().last(), Some((last, &(MAX_TABLE_CAPACITY - 1))));
        assert_eq!(t.insert(0).map_err(|e| e.errno), Err(Errno::ELIMIT));
    }

    #[test]
    fn forged_and_foreign_handles_are_ebadh() {
        let mut t = HandleTable::new(owner(5), HandleKind::Buffer, 8);
        let h = t.insert(1u32).expect("room");
        let mut other = HandleTable::new(owner(6), HandleKind::Buffer, 8);
        let foreign = other.insert(2u32).expect("room");
        ebadh(t.get(Handle(0)), "never a valid handle");
        ebadh(t.get(Handle(u64::MAX)), "another guest");
        ebadh(t.get(Handle(h.raw() & 0xff_ffff_ffff)), "no owner");
        ebadh(t.get(foreign), "another guest");
        ebadh(other.get(h), "another guest");
        let module = Handle::compose(owner(5), HandleKind::Module, 0, 0);
        ebadh(t.get(module), "is a module handle, not a buffer handle");
        let bad_kind = Handle(h.raw() & !(0xf << KIND_SHIFT));
        ebadh(t.get(bad_kind), "kind bits 0");
        let bad_kind = Handle(h.raw() | (0xf << KIND_SHIFT));
        ebadh(t.get(bad_kind), "kind bits 15");
        let slot = Handle::compose(owner(5), HandleKind::Buffer, 0, 1);
        ebadh(t.get(slot), "slot 1 out of range");
        let slot = Handle::compose(owner(5), HandleKind::Buffer, 0, u16::MAX);
        ebadh(t.get(slot), "slot 65535 out of range");
        let future = Handle::compose(owner(5), HandleKind::Buffer, 1, 0);
        ebadh(t.get(future), "generation 1 not reached");
        let future = Handle::compose(owner(5), HandleKind::Buffer, GENERATION_MAX, 0);
        ebadh(t.get(future), "not reached");
        // A failed remove changes nothing.
        ebadh(t.remove(foreign), "another guest");
        assert_eq!(t.get(h), Ok(&1));
        assert_eq!(t.len(), 1);
        // A freed slot's next generation has not been issued yet.
        t.remove(h).expect("live");
        let next = Handle::compose(owner(5), HandleKind::Buffer, 1, 0);
        ebadh(t.get(next), "never issued");
    }

    #[test]
    fn used_up_generations_retire_the_slot() {
        let mut t = HandleTable::with_max_generation(owner(9), HandleKind::Function, 2, 3);
        let mut seen = Vec::new();
        for generation in 0..=3 {
            let h = t.insert(generation).expect("room");
            assert_eq!((h.slot(), h.generation()), (0, generation));
            seen.push(h);
            assert_eq!(t.remove(h), Ok(generation));
        }
        // Slot 0 is retired: the next insert takes slot 1.
        let h = t.insert(10).expect("slot 1 is free");
        assert_eq!((h.slot(), h.generation()), (1, 0));
        for old in &seen {
            ebadh(t.get(*old), "was freed");
        }
        t.remove(h).expect("live");
        for generation in 1..=3 {
            let h = t.insert(generation).expect("room");
            assert_eq!((h.slot(), h.generation()), (1, generation));
            t.remove(h).expect("live");
        }
        // Every slot retired: ELIMIT, although nothing is live.
        assert!(t.is_empty());
        let e = t.insert(0).expect_err("all retired");
        assert_eq!(e.errno, Errno::ELIMIT);
        assert!(e.reason.contains("2 retired"), "{e}");
    }

    #[test]
    fn default_generation_bound_is_20_bits() {
        let t: HandleTable<()> = HandleTable::new(owner(1), HandleKind::Buffer, 1);
        assert_eq!(t.max_generation, GENERATION_MAX);
        let t: HandleTable<()> =
            HandleTable::with_max_generation(owner(1), HandleKind::Buffer, 1, u32::MAX);
        assert_eq!(t.max_generation, GENERATION_MAX);
    }

    #[test]
    fn take_all_invalidates_every_handle() {
        let mut t = HandleTable::new(owner(3), HandleKind::Launch, 8);
        let hs: Vec<Handle> = (0..5).map(|i| t.insert(i).expect("room")).collect();
        t.remove(hs[1]).expect("live");
        assert_eq!(t.take_all(), [0, 2, 3, 4]);
        assert!(t.is_empty());
        for h in hs {
            ebadh(t.get(h), "was freed");
        }
        assert!(t.take_all().is_empty());
        // All five slots are free again, at a later generation.
        for _ in 0..8 {
            let h = t.insert(0).expect("room");
            assert!(h.slot() >= 5 || h.generation() == 1, "{h:?}");
        }
    }

    #[test]
    fn random_operations_match_a_model() {
        let mut rng = crate::abi::tests::Rng::from_env("handle table model");
        let mut t = HandleTable::with_max_generation(owner(11), HandleKind::Buffer, 8, 200);
        let mut live: Vec<(Handle, u64)> = Vec::new();
        let mut dead: Vec<Handle> = Vec::new();
        for step in 0..20_000u64 {
            match rng.next_u64() % 4 {
                0 | 1 => match t.insert(step) {
                    Ok(h) => {
                        assert!(live.iter().all(|(l, _)| *l != h), "reissued {h:?}");
                        assert!(!dead.contains(&h), "reissued dead {h:?}");
                        live.push((h, step));
                    }
                    Err(e) => assert_eq!(e.errno, Errno::ELIMIT),
                },
                2 if !live.is_empty() => {
                    let i = (rng.next_u64() % live.len() as u64) as usize;
                    let (h, v) = live.swap_remove(i);
                    assert_eq!(t.remove(h), Ok(v));
                    dead.push(h);
                }
                _ => {
                    if let Some(&h) = dead.get((rng.next_u64() % (dead.len() as u64 + 1)) as usize)
                    {
                        ebadh(t.get(h), "was freed");
                    }
                    let forged = Handle(rng.next_u64());
                    if !live.iter().any(|(l, _)| *l == forged) {
                        assert_eq!(t.get(forged).map_err(|e| e.errno), Err(Errno::EBADH));
                    }
                }
            }
            assert_eq!(t.len(), live.len());
        }
        for (h, v) in &live {
            assert_eq!(t.get(*h), Ok(v));
        }
    }

    #[test]
    fn a_table_rebuilt_from_its_image_means_the_same_handles() {
        let o = owner(21);
        let mut t = HandleTable::with_max_generation(o, HandleKind::Module, 8, 1);
        let a = t.insert(10).unwrap();
        let b = t.insert(20).unwrap();
        let c = t.insert(30).unwrap();
        t.remove(b).unwrap();
        let b2 = t.insert(21).unwrap();
        t.remove(b2).unwrap(); // slot 1 retired (max generation 1)
        t.remove(c).unwrap(); // slot 2 free at generation 1
        let image = t.image(|h, v| (h, *v));
        let rebuilt: Vec<SlotImage<u32>> = image
            .into_iter()
            .map(|s| SlotImage {
                generation: s.generation,
                state: match s.state {
                    SlotState::Live((_, v)) => SlotState::Live(v + 1),
                    SlotState::Free => SlotState::Free,
                    SlotState::Retired => SlotState::Retired,
                },
            })
            .collect();
        let mut r = HandleTable::from_image(o, HandleKind::Module, 8, rebuilt).unwrap();
        assert_eq!(r.get(a), Ok(&11));
        ebadh(r.get(b), "freed");
        ebadh(r.get(b2), "freed");
        ebadh(r.get(c), "freed");
        assert_eq!(r.len(), 1);
        // The free slot is reused at its next generation, the retired one never.
        let d = r.insert(40).unwrap();
        assert_eq!((d.slot(), d.generation()), (2, 1));
        let e = r.insert(50).unwrap();
        assert_eq!(e.slot(), 3);
        // An image that cannot fit is refused.
        let big = (0..3)
            .map(|_| SlotImage {
                generation: 0,
                state: SlotState::Free,
            })
            .collect();
        let err = HandleTable::<u32>::from_image(o, HandleKind::Module, 2, big).unwrap_err();
        assert_eq!(err.errno, Errno::EINVAL);
    }
}
