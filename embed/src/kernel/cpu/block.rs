//! The block runner of cooperative kernels on the CPU target, and the host
//! functions of the block's cooperative operations (shared memory,
//! barriers, warp operations: `docs/kernels.md`, "The GPU programming
//! model") that the JIT links the kernel's runtime checks to. Each thread
//! of a block runs as a stackful coroutine on the runner's OS thread; the
//! runner owns the block's shared memory, the coroutines' stacks (pooled
//! per OS thread) and the scheduler. Compiling kernels, their launch
//! parameters and the clock belong to `super`.
//!
//! # Scheduling
//!
//! A round resumes every runnable thread in linear-id order
//! (`x + nx * (y + ny * z)`) until it waits or ends. Then, for each warp
//! (32 consecutive linear ids), the lanes waiting at a warp operation are
//! grouped by operation and call site (the `site` argument); each group is
//! one warp operation in which exactly those lanes take part, and all of
//! them go on with their answers. Only when no warp operation waited do barriers
//! count: once every thread that has not ended waits at a barrier or is
//! done with its virtual block (`BlockDone`), the threads at a barrier go
//! on (the done ones keep waiting); when all of them are done, the runner
//! zeroes the shared memory and they all start the next virtual block. The
//! block ends when every thread has ended (returned from the kernel, which
//! a trap does too).
//!
//! # Ending
//!
//! A coroutine is never dropped while suspended: corosensei would unwind
//! its stack, and the kernel's JIT frames have no unwind information. The
//! runner resumes every thread until it ends instead, answering its waits
//! as usual, even after the launch was stopped: every thread ends by its
//! own fuel and clock checks, so this terminates. Should the runner itself
//! panic, its threads are marked finished without unwinding
//! ([`ThreadCoroutine`]'s `Drop`).

use std::{
    alloc::{self, Layout},
    cell::{Cell, RefCell},
    ptr::{self, NonNull},
};

use corosensei::{Coroutine, CoroutineResult, Yielder, stack::DefaultStack};
use tensorwasm_core::lower::{Intrinsic, RuntimeCheck};
use tensorwasm_cpu::BlockContext;

use super::Trampoline;

/// Lanes in a warp.
const WARP: usize = 32;

/// The most threads in a block (the CPU device's limit).
const MAX_BLOCK_THREADS: u64 = 1024;

/// Stack bytes of a thread's coroutine beyond its kernel's frame.
///
/// A kernel is one Cranelift function (the translator inlines what it
/// calls) whose frame (spills, stack slots, outgoing arguments) is fixed
/// when it is compiled, and [`stack_bytes`] adds it. On top of it run the
/// trampoline (under 1 KiB of outgoing arguments), a host function and
/// corosensei's switch: a few KiB. A stack overflow would hit the guard
/// page and end the process, so the slack is generous: it is reserved
/// address space, and a thread touches only the pages its frames reach.
const STACK_SLACK: usize = 256 << 10;

/// Coroutine stack sizes are multiples of this, so that kernels of
/// similar frames share pooled stacks.
const STACK_GRANULE: usize = 64 << 10;

/// Stacks an OS thread keeps for later blocks: one block's worth. A reused
/// stack holds what its last kernel left there, as an OS thread's own
/// stack does for kernels that run without coroutines.
const MAX_POOLED_STACKS: usize = MAX_BLOCK_THREADS as usize;

/// The stack of each thread's coroutine for a kernel whose frame takes
/// `frame_bytes`.
pub(super) fn stack_bytes(frame_bytes: usize) -> usize {
    STACK_SLACK
        .saturating_add(frame_bytes)
        .next_multiple_of(STACK_GRANULE)
}

/// What a cooperative block's runner needs of its kernel and launch.
pub(super) struct CooperativeBlock<'a> {
    /// The kernel's compiled trampoline.
    pub trampoline: Trampoline,
    /// The launch parameters as 8-byte slots, checked by the caller.
    pub args: &'a [u64],
    /// The block's intrinsics; the thread indices are set per thread.
    pub intrinsics: [u32; Intrinsic::ALL.len()],
    /// The block.
    pub block: &'a BlockContext,
    /// Each coroutine's stack ([`stack_bytes`]).
    pub stack_bytes: usize,
}

/// Why a thread's coroutine handed control back to the runner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Wait {
    /// At a barrier.
    Barrier,
    /// Done with its virtual block (`BlockDone`).
    Done,
    /// At a warp operation.
    Warp(WarpArrival),
}

/// A lane's arrival at a warp operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct WarpArrival {
    /// The operation.
    op: RuntimeCheck,
    /// Its call site: lanes at different sites take part in different
    /// operations.
    site: i32,
    /// The value or predicate.
    v: i32,
    /// The shuffle's lane, delta or mask (0 for votes).
    x: i32,
}

/// Where a thread stands between two rounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ThreadState {
    /// Goes on in the next round; the answer to its last wait.
    Runnable(i32),
    /// Waits for the block or its warp.
    Waiting(Wait),
    /// Its call of the kernel returned: it finished or trapped.
    Ended,
}

type ThreadYielder = Yielder<i32, Wait>;

/// What the host functions reach of the running block (through
/// [`ACTIVE`]).
struct BlockShared {
    shared: SharedMemory,
    /// Each thread's yielder, set by its coroutine when it first runs.
    yielders: Box<[Cell<*const ThreadYielder>]>,
}

/// The thread the runner is resuming, and its block.
#[derive(Clone, Copy)]
struct Active {
    block: *const BlockShared,
    tid: usize,
}

thread_local! {
    /// Set only while a runner resumes a thread's coroutine: the host
    /// functions run on that coroutine, on the runner's OS thread.
    static ACTIVE: Cell<Option<Active>> = const { Cell::new(None) };
    /// Coroutine stacks kept for this OS thread's next blocks.
    static STACKS: RefCell<Vec<PooledStack>> = const { RefCell::new(Vec::new()) };
}

/// Clears [`ACTIVE`] when a resume ends, even by a panic.
struct ActiveGuard;

impl ActiveGuard {
    fn enter(active: Active) -> ActiveGuard {
        ACTIVE.set(Some(active));
        ActiveGuard
    }
}

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        let _ = ACTIVE.try_with(|a| a.set(None));
    }
}

/// The running thread, if a runner is resuming one on this OS thread.
fn active() -> Option<Active> {
    ACTIVE.try_with(Cell::get).ok().flatten()
}

/// The block's shared memory, 16-byte aligned, or none (size 0).
struct SharedMemory {
    base: NonNull<SharedChunk>,
    /// The bytes the launch asked for.
    bytes: usize,
    /// Its allocation, `None` for 0 bytes.
    layout: Option<Layout>,
}

/// The unit of shared memory: 16 aligned bytes.
#[repr(C, align(16))]
struct SharedChunk([u8; 16]);

impl SharedMemory {
    /// `bytes` zeroed bytes (rounded up to 16 in the allocation).
    fn zeroed(bytes: usize) -> SharedMemory {
        let chunks = bytes.div_ceil(16);
        let Ok(layout) = Layout::array::<SharedChunk>(chunks) else {
            panic!("the block's shared memory of {bytes} bytes is too large");
        };
        if chunks == 0 {
            return SharedMemory {
                base: NonNull::dangling(),
                bytes,
                layout: None,
            };
        }
        // SAFETY: the layout's size is at least 16 (non-zero).
        let base = unsafe { alloc::alloc_zeroed(layout) }.cast::<SharedChunk>();
        let Some(base) = NonNull::new(base) else {
            alloc::handle_alloc_error(layout)
        };
        SharedMemory {
            base,
            bytes,
            layout: Some(layout),
        }
    }

    /// The host address the kernel reaches it at.
    fn address(&self) -> u64 {
        self.base.as_ptr().expose_provenance() as u64
    }

    /// Zeroes it for the next virtual block; no thread runs meanwhile.
    fn zero(&self) {
        if let Some(layout) = self.layout {
            // SAFETY: `base` is our live allocation of `layout.size()`
            // bytes; no coroutine runs while the runner calls this, so
            // nothing else reads or writes it.
            unsafe { ptr::write_bytes(self.base.as_ptr().cast::<u8>(), 0, layout.size()) };
        }
    }
}

impl Drop for SharedMemory {
    fn drop(&mut self) {
        if let Some(layout) = self.layout {
            // SAFETY: allocated in `zeroed` with this layout; the block's
            // threads have ended (or were abandoned), so none touches it.
            unsafe { alloc::dealloc(self.base.as_ptr().cast(), layout) };
        }
    }
}

/// A coroutine stack and its usable bytes.
struct PooledStack {
    bytes: usize,
    stack: DefaultStack,
}

/// `n` stacks of at least `bytes` each, from this OS thread's pool where
/// it has them. Pooled stacks too small for this kernel are unmapped (the
/// next blocks are likely this kernel's too).
fn take_stacks(n: usize, bytes: usize) -> Vec<PooledStack> {
    let mut stacks = Vec::with_capacity(n);
    STACKS.with_borrow_mut(|pool| {
        while stacks.len() < n {
            match pool.pop() {
                Some(stack) if stack.bytes >= bytes => stacks.push(stack),
                Some(_) => {}
                None => break,
            }
        }
    });
    while stacks.len() < n {
        let stack = DefaultStack::new(bytes).unwrap_or_else(|e| {
            panic!("cannot map a coroutine stack of {bytes} bytes for a block's thread: {e}")
        });
        stacks.push(PooledStack { bytes, stack });
    }
    stacks
}

/// Keeps `stacks` for this OS thread's next blocks, up to one block's
/// worth.
fn pool_stacks(stacks: impl IntoIterator<Item = PooledStack>) {
    STACKS.with_borrow_mut(|pool| {
        pool.extend(stacks);
        pool.truncate(MAX_POOLED_STACKS);
    });
}

/// One thread's coroutine.
struct ThreadCoroutine {
    coroutine: Option<Coroutine<i32, Wait, (), DefaultStack>>,
    bytes: usize,
}

impl ThreadCoroutine {
    /// Resumes it with `answer` until it waits or ends.
    fn resume(&mut self, active: Active, answer: i32) -> ThreadState {
        let Some(coroutine) = self.coroutine.as_mut().filter(|c| !c.done()) else {
            return ThreadState::Ended;
        };
        let _active = ActiveGuard::enter(active);
        match coroutine.resume(answer) {
            CoroutineResult::Yield(wait) => ThreadState::Waiting(wait),
            CoroutineResult::Return(()) => ThreadState::Ended,
        }
    }

    /// Its stack, once it has ended.
    fn into_stack(mut self) -> Option<PooledStack> {
        let coroutine = self.coroutine.take_if(|c| c.done())?;
        Some(PooledStack {
            bytes: self.bytes,
            stack: coroutine.into_stack(),
        })
    }
}

impl Drop for ThreadCoroutine {
    /// Only a panicking runner drops a thread that has not ended; unwinding
    /// its stack would cross JIT frames, which have no unwind information,
    /// so it is marked finished instead and its frames abandoned.
    fn drop(&mut self) {
        if let Some(coroutine) = &mut self.coroutine
            && coroutine.started()
            && !coroutine.done()
        {
            // SAFETY: `force_reset` is sound when no frame on the stack
            // owns something to drop. A suspended thread's stack holds
            // corosensei's entry frame, the closure of `run` (a function
            // pointer, raw pointers and the intrinsics, all `Copy`, its
            // closure consumed by the call), the trampoline and the kernel
            // (JIT code: no Rust values) and a host function suspended in
            // `wait` (only `Copy` values).
            unsafe { coroutine.force_reset() };
        }
    }
}

/// Runs every thread of a cooperative kernel's block (see the module
/// docs); `stopped` is the launch's stop and clock check (`super::stopped`,
/// its argument whether to look at the clock). Panics (failing the launch)
/// on a block of more than 1024 threads or when stacks cannot be mapped,
/// before any thread starts.
pub(super) fn run(launch: CooperativeBlock<'_>, mut stopped: impl FnMut(bool) -> bool) {
    let dim = launch.block.block_dim;
    let threads = u64::from(dim.x) * u64::from(dim.y) * u64::from(dim.z);
    if threads > MAX_BLOCK_THREADS {
        panic!("a block of {threads} threads: the CPU device runs at most {MAX_BLOCK_THREADS}");
    }
    if stopped(true) {
        return;
    }
    let n = threads as usize;
    let block = BlockShared {
        shared: SharedMemory::zeroed(launch.block.shared_mem_bytes as usize),
        yielders: (0..n).map(|_| Cell::new(ptr::null())).collect(),
    };
    let thread_idx = [
        Intrinsic::ThreadIdxX.index(),
        Intrinsic::ThreadIdxY.index(),
        Intrinsic::ThreadIdxZ.index(),
    ];
    let args = launch.args.as_ptr();
    let trampoline = launch.trampoline;
    let mut coroutines: Vec<ThreadCoroutine> = Vec::with_capacity(n);
    for (tid, PooledStack { bytes, stack }) in
        take_stacks(n, launch.stack_bytes).into_iter().enumerate()
    {
        let mut intrinsics = launch.intrinsics;
        // Below 1024 threads: the indices fit a u32.
        let (nx, ny) = (dim.x as usize, dim.y as usize);
        intrinsics[thread_idx[0]] = (tid % nx) as u32;
        intrinsics[thread_idx[1]] = (tid / nx % ny) as u32;
        intrinsics[thread_idx[2]] = (tid / (nx * ny)) as u32;
        let yielder_slot: *const Cell<*const ThreadYielder> = &block.yielders[tid];
        let coroutine = Coroutine::with_stack(stack, move |yielder: &ThreadYielder, _: i32| {
            // SAFETY: `block` outlives every run of this coroutine: `run`
            // resumes it until it ends before it returns, and a panic drops
            // `coroutines` (declared after `block`) first, which runs none.
            unsafe { (*yielder_slot).set(yielder) };
            // SAFETY: as in `NativeKernel::run_block`: the trampoline was
            // compiled for these slots and intrinsics, the launcher vouches
            // for guest memory and the status word, and the kernel neither
            // faults nor traps natively. `args` outlives the coroutine (see
            // above), and the intrinsics are this closure's own.
            unsafe { trampoline(args, intrinsics.as_ptr()) };
        });
        coroutines.push(ThreadCoroutine {
            coroutine: Some(coroutine),
            bytes,
        });
    }
    schedule(&block, &mut coroutines, &mut stopped);
    pool_stacks(
        coroutines
            .into_iter()
            .filter_map(ThreadCoroutine::into_stack),
    );
}

/// Resumes `coroutines` until every one has ended (the module docs'
/// rules).
fn schedule(
    block: &BlockShared,
    coroutines: &mut [ThreadCoroutine],
    stopped: &mut impl FnMut(bool) -> bool,
) {
    let mut states = vec![ThreadState::Runnable(0); coroutines.len()];
    loop {
        for (tid, (coroutine, state)) in coroutines.iter_mut().zip(&mut states).enumerate() {
            if let ThreadState::Runnable(answer) = *state {
                *state = coroutine.resume(Active { block, tid }, answer);
            }
        }
        // Keeps the launch's clock for later blocks; this block's threads
        // end by their own checks, so they run on whatever it says.
        let _ = stopped(true);
        if answer_warps(&mut states) {
            continue;
        }
        let waiting = |wait| states.contains(&ThreadState::Waiting(wait));
        let go_on = if waiting(Wait::Barrier) {
            Wait::Barrier
        } else if waiting(Wait::Done) {
            block.shared.zero();
            Wait::Done
        } else {
            return;
        };
        for state in &mut states {
            if *state == ThreadState::Waiting(go_on) {
                *state = ThreadState::Runnable(0);
            }
        }
    }
}

/// Answers every warp operation that lanes wait at (the module docs'
/// rules); whether there was one.
fn answer_warps(states: &mut [ThreadState]) -> bool {
    let mut any = false;
    for warp in states.chunks_mut(WARP) {
        while let Some(lead) = warp.iter().find_map(|s| match *s {
            ThreadState::Waiting(Wait::Warp(arrival)) => Some(arrival),
            _ => None,
        }) {
            any = true;
            let (mut members, mut v, mut x) = (0u32, [0; WARP], [0; WARP]);
            for (lane, state) in warp.iter().enumerate() {
                if let ThreadState::Waiting(Wait::Warp(a)) = *state
                    && (a.op, a.site) == (lead.op, lead.site)
                {
                    members |= 1 << lane;
                    (v[lane], x[lane]) = (a.v, a.x);
                }
            }
            for (lane, state) in warp.iter_mut().enumerate() {
                if members & (1 << lane) != 0 {
                    *state = ThreadState::Runnable(warp_answer(lead.op, members, &v, &x, lane));
                }
            }
        }
    }
    any
}

/// The answer of `lane` to the warp operation `op` in which the lanes of
/// the mask `members` take part, each with its `v` and `x`
/// (`docs/kernels.md`, "Warp operations"): a shuffle whose source lane is
/// out of range or takes no part reads the lane's own value.
fn warp_answer(
    op: RuntimeCheck,
    members: u32,
    v: &[i32; WARP],
    x: &[i32; WARP],
    lane: usize,
) -> i32 {
    let part = |i: usize| members & (1 << i) != 0;
    let truthy = || (0..WARP).filter(|&i| part(i)).map(|i| v[i] != 0);
    let delta = x[lane] as u32 as usize;
    let source = match op {
        RuntimeCheck::ShflIdx => Some(delta & 31),
        RuntimeCheck::ShflUp => lane.checked_sub(delta),
        RuntimeCheck::ShflDown => (delta <= WARP - 1 - lane).then(|| lane + delta),
        RuntimeCheck::ShflXor => (delta < WARP).then_some(lane ^ delta),
        RuntimeCheck::Ballot => {
            let set = (0..WARP).filter(|&i| part(i) && v[i] != 0);
            return set.fold(0u32, |mask, i| mask | 1 << i) as i32;
        }
        RuntimeCheck::VoteAny => return i32::from(truthy().any(|t| t)),
        RuntimeCheck::VoteAll => return i32::from(truthy().all(|t| t)),
        _ => None,
    };
    match source {
        Some(source) if part(source) => v[source],
        _ => v[lane],
    }
}

/// Suspends the running thread with `wait`; the runner's answer, or `None`
/// when no runner resumes a thread on this OS thread.
fn wait(wait: Wait) -> Option<i32> {
    let Active { block, tid } = active()?;
    // SAFETY: `ACTIVE` holds `block` only while `run` resumes thread
    // `tid`, and `run` keeps the block alive until every thread ended.
    let slot = unsafe { &*block }.yielders.get(tid)?.get();
    // SAFETY: thread `tid`'s coroutine set the slot to its yielder when it
    // started, and it is the code running now (host functions are called
    // by the kernel, on its thread's coroutine); the yielder lives on that
    // coroutine's stack while it runs.
    let yielder = unsafe { slot.as_ref() }?;
    Some(yielder.suspend(wait))
}

/// A lane's warp operation: its answer from the runner, or, with no
/// runner, as lane 0 of a warp of one.
fn warp_op(op: RuntimeCheck, v: i32, x: i32, site: i32) -> i32 {
    let arrival = WarpArrival { op, site, v, x };
    wait(Wait::Warp(arrival)).unwrap_or_else(|| {
        let (mut vs, mut xs) = ([0; WARP], [0; WARP]);
        (vs[0], xs[0]) = (v, x);
        warp_answer(op, 1, &vs, &xs, 0)
    })
}

/// [`RuntimeCheck::SharedBase`]: the host address of the block's shared
/// memory (an aligned address with no bytes when there is no runner).
pub(super) extern "C" fn shared_base() -> u64 {
    match active() {
        // SAFETY: as in `wait`: the block is alive while `ACTIVE` names it.
        Some(Active { block, .. }) => unsafe { &*block }.shared.address(),
        None => NonNull::<SharedChunk>::dangling()
            .as_ptr()
            .expose_provenance() as u64,
    }
}

/// [`RuntimeCheck::SharedSize`]: the launch's shared bytes per block (0
/// with no runner).
pub(super) extern "C" fn shared_size() -> u64 {
    // SAFETY: as in `wait`: the block is alive while `ACTIVE` names it.
    active().map_or(0, |a| unsafe { &*a.block }.shared.bytes as u64)
}

/// [`RuntimeCheck::Barrier`]: waits for the block (returns at once with no
/// runner).
pub(super) extern "C" fn barrier() {
    let _ = wait(Wait::Barrier);
}

/// [`RuntimeCheck::BlockBegin`]: nothing on the CPU: every live thread
/// left its last `BlockDone` together, and the runner zeroed the shared
/// memory then.
pub(super) extern "C" fn block_begin() {}

/// [`RuntimeCheck::BlockDone`]: waits, done, until every live thread of the
/// block is (returns at once with no runner).
pub(super) extern "C" fn block_done() {
    let _ = wait(Wait::Done);
}

/// [`RuntimeCheck::LaneId`]: the thread's linear id modulo 32 (0 with no
/// runner).
pub(super) extern "C" fn lane_id() -> i32 {
    active().map_or(0, |a| (a.tid % WARP) as i32)
}

/// [`RuntimeCheck::ShflIdx`]: `v` of lane `x & 31`.
pub(super) extern "C" fn shfl_idx(v: i32, x: i32, site: i32) -> i32 {
    warp_op(RuntimeCheck::ShflIdx, v, x, site)
}

/// [`RuntimeCheck::ShflUp`]: `v` of lane `lane_id - x`.
pub(super) extern "C" fn shfl_up(v: i32, x: i32, site: i32) -> i32 {
    warp_op(RuntimeCheck::ShflUp, v, x, site)
}

/// [`RuntimeCheck::ShflDown`]: `v` of lane `lane_id + x`.
pub(super) extern "C" fn shfl_down(v: i32, x: i32, site: i32) -> i32 {
    warp_op(RuntimeCheck::ShflDown, v, x, site)
}

/// [`RuntimeCheck::ShflXor`]: `v` of lane `lane_id ^ x`.
pub(super) extern "C" fn shfl_xor(v: i32, x: i32, site: i32) -> i32 {
    warp_op(RuntimeCheck::ShflXor, v, x, site)
}

/// [`RuntimeCheck::Ballot`]: the mask of lanes taking part with a nonzero
/// `pred`.
pub(super) extern "C" fn ballot(pred: i32, site: i32) -> i32 {
    warp_op(RuntimeCheck::Ballot, pred, 0, site)
}

/// [`RuntimeCheck::VoteAny`]: 1 when a lane taking part has a nonzero
/// `pred`.
pub(super) extern "C" fn vote_any(pred: i32, site: i32) -> i32 {
    warp_op(RuntimeCheck::VoteAny, pred, 0, site)
}

/// [`RuntimeCheck::VoteAll`]: 1 when every lane taking part has a nonzero
/// `pred`.
pub(super) extern "C" fn vote_all(pred: i32, site: i32) -> i32 {
    warp_op(RuntimeCheck::VoteAll, pred, 0, site)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_functions_without_a_runner_act_as_one_lone_lane() {
        assert_eq!(active().map(|a| a.tid), None);
        barrier();
        block_begin();
        block_done();
        assert_eq!(shared_size(), 0);
        assert_eq!(shared_base() % 16, 0);
        assert_eq!(lane_id(), 0);
        for shuffle in [shfl_idx, shfl_up, shfl_down, shfl_xor] {
            assert_eq!(shuffle(-7, 0, 1), -7);
            assert_eq!(shuffle(-7, 1, 1), -7);
        }
        assert_eq!(shfl_idx(-7, 32, 1), -7, "lane 32 & 31 is lane 0");
        assert_eq!((ballot(5, 1), ballot(0, 1)), (1, 0));
        assert_eq!((vote_any(-1, 1), vote_any(0, 1)), (1, 0));
        assert_eq!((vote_all(i32::MIN, 1), vote_all(0, 1)), (1, 0));
    }

    #[test]
    fn shuffles_outside_the_warp_or_its_members_read_their_own_value() {
        let v: [i32; WARP] = std::array::from_fn(|lane| 100 + lane as i32);
        let at = |x: i32| [x; WARP];
        let all = u32::MAX;
        let answer = |op, members, x: i32, lane| warp_answer(op, members, &v, &at(x), lane);
        assert_eq!(answer(RuntimeCheck::ShflUp, all, 3, 2), 102, "below lane 0");
        assert_eq!(answer(RuntimeCheck::ShflUp, all, 3, 3), 100);
        assert_eq!(answer(RuntimeCheck::ShflUp, all, -1, 31), 131, "huge delta");
        assert_eq!(answer(RuntimeCheck::ShflDown, all, 1, 31), 131, "past 31");
        assert_eq!(answer(RuntimeCheck::ShflDown, all, 31, 0), 131);
        assert_eq!(answer(RuntimeCheck::ShflXor, all, 32, 5), 105, "mask >= 32");
        assert_eq!(answer(RuntimeCheck::ShflXor, all, 31, 5), 126);
        assert_eq!(answer(RuntimeCheck::ShflIdx, all, -1, 0), 131, "-1 & 31");
        let even = 0x5555_5555;
        assert_eq!(answer(RuntimeCheck::ShflIdx, even, 1, 4), 104, "odd source");
        assert_eq!(answer(RuntimeCheck::ShflIdx, even, 2, 4), 102);
        let preds: [i32; WARP] = std::array::from_fn(|lane| (lane % 3 == 0) as i32);
        let vote = |op, members| warp_answer(op, members, &preds, &at(0), 0);
        assert_eq!(vote(RuntimeCheck::Ballot, all) as u32, 0x4924_9249);
        assert_eq!(vote(RuntimeCheck::Ballot, 0b1110), 0b1000);
        assert_eq!(vote(RuntimeCheck::VoteAny, 0b0110), 0);
        assert_eq!(vote(RuntimeCheck::VoteAll, 0b1001), 1);
        assert_eq!(vote(RuntimeCheck::VoteAll, all), 0);
    }
}
