//! Waiting for the guest's stream: how `wait`, `sync` and the copies wait
//! ([`WaitPolicy`]: spin, suspend, or adapt between them), the completion
//! callback they suspend on, and whether the work failed; and what a
//! launch that finds no slot free waits for: the guest's launches in
//! flight, in order, with checkpoints behind some ([`LaunchQueue`]), and
//! the oldest checkpoint to wait for ([`Room`]). The suspensions
//! themselves are the parent module's (`quiesce`, `make_room`).

use std::{
    collections::VecDeque,
    sync::Arc,
    time::{Duration, Instant},
};

use tensorwasm_core::{
    GpuDriver,
    abi::{AbiError, Handle},
    dispatch::{DispatchFuture, dispatch},
};

use super::{ctx::WasiCudaCtx, errors::launch_failed};

/// How a guest's `wait` (and every call that waits for its stream) waits
/// for the work it queued: asking the driver (`stream_query`) in a loop
/// holds the executor thread and a core but answers within a microsecond
/// of the work's end; suspending the guest on the driver's completion
/// callback costs no CPU but ~20 µs of latency (`docs/benchmarks/`,
/// `guest_overhead`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitPolicy {
    /// One non-blocking query, then the completion callback.
    Suspend,
    /// Ask for up to this long, every wait, then the callback.
    Spin(Duration),
    /// Ask for up to this long while the stream's waits end within it;
    /// after a wait that outlasted it, suspend at once until a wait ends
    /// within it again (one that suspends still notes when it ended), but
    /// spin every [`PROBE_EVERY`]-th wait. A stream of short kernels gets
    /// the spin's latency; a stream of long ones costs one budget of CPU
    /// when it turns long, then one per [`PROBE_EVERY`] waits.
    Adaptive(Duration),
}

/// [`WaitPolicy::Adaptive`]: after this many waits in a row that did not
/// spin, one spins again (a probe: at most one budget of CPU per this many
/// waits on a stream of long kernels).
pub const PROBE_EVERY: u32 = 16;

/// [`WaitPolicy::Adaptive`]'s default budget: a little more than an empty
/// kernel's launch-to-completion time on an H100 (~10 µs), so short
/// kernels end within it.
pub const DEFAULT_WAIT_SPIN: Duration = Duration::from_micros(50);

impl Default for WaitPolicy {
    /// [`WaitPolicy::Adaptive`] with [`DEFAULT_WAIT_SPIN`].
    fn default() -> Self {
        WaitPolicy::Adaptive(DEFAULT_WAIT_SPIN)
    }
}

/// A stream's [`WaitPolicy`] and what its adaptive form has learnt from the
/// waits so far: a state machine of wait durations alone (no clock of its
/// own), so its decisions are tested without timing anything.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SpinState {
    policy: WaitPolicy,
    /// [`WaitPolicy::Adaptive`]: whether the last wait ended within the
    /// spin budget (so the next one spins first).
    spin_pays: bool,
    /// [`WaitPolicy::Adaptive`]: waits that suspended at once since the
    /// last that spun.
    unspun: u32,
}

impl SpinState {
    /// A stream that has not waited yet: its first wait spins (if the
    /// policy spins at all).
    pub(crate) fn new(policy: WaitPolicy) -> Self {
        SpinState {
            policy,
            spin_pays: true,
            unspun: 0,
        }
    }

    /// The policy.
    pub(crate) fn policy(&self) -> WaitPolicy {
        self.policy
    }

    /// How long the wait that begins now asks the driver before it
    /// suspends (zero: one query), counting it as a probe or an unspun wait.
    pub(crate) fn begin(&mut self) -> Duration {
        match self.policy {
            WaitPolicy::Suspend => Duration::ZERO,
            WaitPolicy::Spin(spin) => spin,
            WaitPolicy::Adaptive(spin) if self.spin_pays || self.unspun >= PROBE_EVERY => {
                self.unspun = 0;
                spin
            }
            WaitPolicy::Adaptive(_) => {
                self.unspun += 1;
                Duration::ZERO
            }
        }
    }

    /// A wait ended after `waited`: under [`WaitPolicy::Adaptive`] the next
    /// spins only if this one ended within the budget (and every
    /// [`PROBE_EVERY`]-th after that anyway, to find the stream's kernels
    /// short again when the callback's own latency keeps its waits past
    /// the budget).
    pub(crate) fn ended(&mut self, waited: Duration) {
        if let WaitPolicy::Adaptive(spin) = self.policy {
            self.spin_pays = waited <= spin;
        }
    }

    /// Whether the next wait asks the driver in a loop before it suspends.
    pub(crate) fn spins_next(&self) -> bool {
        match self.policy {
            WaitPolicy::Suspend => false,
            WaitPolicy::Spin(spin) => !spin.is_zero(),
            WaitPolicy::Adaptive(spin) => {
                (self.spin_pays || self.unspun >= PROBE_EVERY) && !spin.is_zero()
            }
        }
    }
}

/// The guest's launches in flight, oldest first, and the checkpoints on its
/// stream that say when a prefix of them has finished: a launch that finds
/// no slot free waits for the oldest checkpoint ([`Room`]), so for the
/// guest's oldest launches, not for its newest.
pub(crate) struct LaunchQueue {
    /// Sequence numbers and handles of the launches in flight, in the
    /// order they were queued.
    in_flight: VecDeque<(u64, Handle)>,
    /// Completion callbacks queued behind some of them, oldest first.
    checkpoints: VecDeque<Checkpoint>,
    /// The most launches in flight at once (`WasiCudaLimits::launches`).
    limit: usize,
    next_seq: u64,
}

/// A completion callback on the guest's stream behind its launch `after`:
/// once it has fired, that launch and every launch before it have finished.
pub(crate) struct Checkpoint {
    pub(crate) after: u64,
    pub(crate) passed: DispatchFuture<Instant>,
}

impl LaunchQueue {
    /// An empty queue for at most `limit` launches in flight.
    pub(crate) fn new(limit: usize) -> Self {
        LaunchQueue {
            in_flight: VecDeque::new(),
            checkpoints: VecDeque::new(),
            limit,
            next_seq: 0,
        }
    }

    /// Launches in flight.
    pub(crate) fn len(&self) -> usize {
        self.in_flight.len()
    }

    /// The most launches in flight at once.
    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// The newest launch in flight.
    pub(crate) fn newest(&self) -> Option<u64> {
        self.in_flight.back().map(|&(seq, _)| seq)
    }

    /// The sequence number the next launch gets.
    pub(crate) fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Launch `seq` (the next one's) is on the stream.
    pub(crate) fn push(&mut self, seq: u64, handle: Handle) {
        self.in_flight.push_back((seq, handle));
        self.next_seq = seq + 1;
    }

    /// A checkpoint behind the newest launch.
    pub(crate) fn add_checkpoint(&mut self, checkpoint: Checkpoint) {
        self.checkpoints.push_back(checkpoint);
    }

    /// Forgets launch `seq` (waited for).
    pub(crate) fn remove(&mut self, seq: u64) {
        if let Ok(at) = self.in_flight.binary_search_by_key(&seq, |&(s, _)| s) {
            self.in_flight.remove(at);
        }
    }

    /// Takes the launches up to `seq` (all of them for `u64::MAX`).
    pub(crate) fn take_through(&mut self, seq: u64) -> Vec<Handle> {
        let n = self.in_flight.partition_point(|&(s, _)| s <= seq);
        let taken = self.in_flight.drain(..n).map(|(_, h)| h).collect();
        if self.in_flight.is_empty() {
            self.checkpoints.clear();
        }
        taken
    }

    /// The newest checkpoint that has passed (dropping it and those before
    /// it), if any.
    pub(crate) fn passed(&mut self) -> Option<u64> {
        let mut passed = None;
        while let Some(c) = self.checkpoints.front()
            && c.passed.is_complete()
        {
            passed = self.checkpoints.pop_front().map(|c| c.after);
        }
        passed
    }

    /// The oldest checkpoint behind a launch still in flight, taken out.
    pub(crate) fn oldest_checkpoint(&mut self) -> Option<Checkpoint> {
        let oldest = self.in_flight.front()?.0;
        while let Some(c) = self.checkpoints.pop_front() {
            if c.after >= oldest {
                return Some(c);
            }
        }
        None
    }

    /// Launches in flight queued after the newest checkpoint.
    pub(crate) fn unmarked(&self) -> usize {
        let marked = self.checkpoints.back().map_or(0, |c| {
            self.in_flight.partition_point(|&(s, _)| s <= c.after)
        });
        self.in_flight.len() - marked
    }
}

/// What a launch that found every slot it may take held does next
/// ([`WasiCudaCtx::room`]).
pub(crate) enum Room {
    /// Some of the guest's launches were seen finished: their slots are
    /// free, try again.
    Made,
    /// The guest has nothing in flight, so no wait of its own can free a
    /// slot (the others are other guests', which it must not wait for: they
    /// may never be freed): the launch fails.
    None,
    /// Suspend until this checkpoint has passed (asking the stream as
    /// `wait` does, so a lost device ends the wait), then
    /// [`WasiCudaCtx::passed`].
    Wait(Checkpoint),
}

impl<D: GpuDriver> WasiCudaCtx<D> {
    /// Room for a launch whose slots are all held. Launches already
    /// finished (the stream idle, or a checkpoint behind them passed) are
    /// retired at once; otherwise the checkpoint to wait for: the oldest
    /// behind a launch in flight, or one queued now behind the newest.
    /// `Err` once work on the stream has failed.
    pub(crate) fn room(&mut self) -> Result<Room, AbiError> {
        let Some(newest) = self.queue.newest() else {
            return Ok(Room::None);
        };
        if self.poll_stream()? {
            self.retire_through(u64::MAX);
            return Ok(Room::Made);
        }
        if let Some(after) = self.queue.passed()
            && self.retire_through(after) > 0
        {
            return Ok(Room::Made);
        }
        let checkpoint = match self.queue.oldest_checkpoint() {
            Some(checkpoint) => checkpoint,
            None => Checkpoint {
                after: newest,
                passed: self.completion(),
            },
        };
        Ok(Room::Wait(checkpoint))
    }

    /// The checkpoint behind launch `after` has passed (or the stream is
    /// idle): retires the launches up to it, every one if the stream is
    /// idle by now. `Err` once work on the stream has failed (the launches
    /// stay in flight, and their waits report it).
    pub(crate) fn passed(&mut self, after: u64) -> Result<(), AbiError> {
        let idle = self.poll_stream()?;
        self.retire_through(if idle { u64::MAX } else { after });
        Ok(())
    }

    /// Where the guest's stream stands at the start of a wait: `Ok(true)`
    /// when every piece of work queued so far has finished, `Ok(false)`
    /// while some still runs (the caller then suspends on
    /// [`Self::completion`] and calls [`Self::launch_status`]), `Err`
    /// (`ELAUNCH`) once work on it has failed. Keeps asking for as long as
    /// the [`WaitPolicy`] lets it spin before answering "still running".
    pub(crate) fn settle(&mut self) -> Result<bool, AbiError> {
        let start = Instant::now();
        self.wait_began = Some(start);
        let budget = self.waits.begin();
        loop {
            match self.driver.stream_query(&self.stream) {
                Ok(true) => {
                    self.wait_ended(Instant::now());
                    return Ok(true);
                }
                Ok(false) => {}
                Err(e) => return Err(launch_failed(e)),
            }
            if budget.is_zero() || start.elapsed() >= budget {
                return Ok(false);
            }
            std::hint::spin_loop();
        }
    }

    /// Notes when the wait that began in [`Self::settle`] saw its work
    /// done (`done`: the query that said so, or the completion callback's
    /// call): under [`WaitPolicy::Adaptive`], the next wait spins only if
    /// this one ended within the budget (and every [`PROBE_EVERY`]-th
    /// after that anyway, to find the stream's kernels short again when
    /// the callback's own latency keeps its waits past the budget).
    fn wait_ended(&mut self, done: Instant) {
        if let Some(clock) = &mut self.gpu_clock {
            clock.collect(&self.driver);
        }
        let began = self.wait_began.take();
        if let (Some(stats), Some(began)) = (&self.stats, began) {
            stats.waits.inc();
            stats
                .wait_seconds
                .inc_by(done.saturating_duration_since(began).as_secs_f64());
        }
        if let Some(began) = began {
            self.waits.ended(done.saturating_duration_since(began));
        }
    }

    /// A future that completes from the driver's completion callback once
    /// the work queued so far has finished, with the time of the call.
    /// Should queueing the callback fail, waits here instead, so a waiter
    /// is never left hanging.
    pub(crate) fn completion(&self) -> DispatchFuture<Instant> {
        let (completer, done) = dispatch();
        let on_done = completer.clone();
        let queued = self.driver.on_complete(
            &self.stream,
            Box::new(move || {
                let _ = on_done.complete(Instant::now());
            }),
        );
        if queued.is_err() {
            let _ = self.driver.stream_synchronize(&self.stream);
            let _ = completer.complete(Instant::now());
        }
        done
    }

    /// A future that resolves once the work queued so far has finished or
    /// the stream has failed, holding nothing of the context (a
    /// component's `pollable`, which outlives the call that made it): the
    /// completion callback, and every [`super::tick::CALLBACK_POLL`] one
    /// query of the stream, since a lost device calls no callback.
    pub(crate) fn finished_signal(&self) -> impl Future<Output = ()> + Send + 'static
    where
        D: Clone + 'static,
    {
        let mut done = self.completion();
        let (driver, stream) = (self.driver.clone(), Arc::clone(&self.stream));
        async move {
            loop {
                match futures::future::select(done, super::tick::poll_tick()).await {
                    futures::future::Either::Left(_) => return,
                    futures::future::Either::Right(((), waiting)) => {
                        done = waiting;
                        // Finished, or failed: either way `wait` answers now.
                        if !matches!(driver.stream_query(&stream), Ok(false)) {
                            return;
                        }
                    }
                }
            }
        }
    }

    /// While a wait is suspended on its callback: has the stream's work
    /// finished (`Ok(true)`), or failed (`Err`, `EDEVLOST` for a lost
    /// device)?
    pub(crate) fn poll_stream(&self) -> Result<bool, AbiError> {
        self.driver
            .stream_query(&self.stream)
            .map_err(launch_failed)
    }

    /// After a completion callback fired (at `done`): did the work fail?
    /// (`Ok(false)` is success here: the callback itself counts as stream
    /// work until it has returned.)
    pub(crate) fn launch_status(&mut self, done: Instant) -> Result<(), AbiError> {
        self.wait_ended(done);
        self.driver
            .stream_query(&self.stream)
            .map(drop)
            .map_err(launch_failed)
    }

    /// Lets `wait` keep asking the driver for up to `spin` before it
    /// suspends the guest on a completion callback, every time
    /// ([`WaitPolicy::Spin`]; zero: [`WaitPolicy::Suspend`]).
    pub fn set_wait_spin(&mut self, spin: Duration) {
        self.set_wait_policy(if spin.is_zero() {
            WaitPolicy::Suspend
        } else {
            WaitPolicy::Spin(spin)
        });
    }

    /// How `wait` waits from now on ([`WaitPolicy`]).
    pub fn set_wait_policy(&mut self, policy: WaitPolicy) {
        self.waits = SpinState::new(policy);
    }

    /// How `wait` waits.
    pub fn wait_policy(&self) -> WaitPolicy {
        self.waits.policy()
    }

    /// Whether the next wait asks the driver in a loop before it suspends
    /// (under [`WaitPolicy::Adaptive`]: whether the last wait ended within
    /// the budget, or the next is a probe).
    pub fn spins_before_next_wait(&self) -> bool {
        self.waits.spins_next()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A queue of launches `0 .. n` (handles by their sequence numbers),
    /// with a checkpoint behind each of `marks`, and the completers that
    /// pass them.
    fn queue(
        n: u64,
        marks: &[u64],
    ) -> (
        LaunchQueue,
        Vec<tensorwasm_core::dispatch::Completer<Instant>>,
    ) {
        let mut q = LaunchQueue::new(usize::MAX);
        let mut completers = Vec::new();
        for seq in 0..n {
            q.push(seq, Handle(seq + 1));
            if marks.contains(&seq) {
                let (completer, passed) = dispatch();
                q.add_checkpoint(Checkpoint { after: seq, passed });
                completers.push(completer);
            }
        }
        (q, completers)
    }

    #[test]
    fn a_full_queue_waits_for_the_checkpoint_behind_its_oldest_launches() {
        let (mut q, completers) = queue(8, &[3, 7]);
        assert_eq!((q.len(), q.next_seq(), q.newest()), (8, 8, Some(7)));
        assert_eq!(q.unmarked(), 0);
        assert_eq!(q.passed(), None, "no checkpoint has passed");
        // Only the newest passed: both are, in stream order.
        completers[1].complete(Instant::now()).unwrap();
        assert_eq!(q.passed(), None, "the older one comes first");
        completers[0].complete(Instant::now()).unwrap();
        assert_eq!(q.passed(), Some(7));
        assert_eq!(q.take_through(3).len(), 4);
        assert_eq!(q.len(), 4);
        assert_eq!(
            q.take_through(u64::MAX),
            (5..=8).map(Handle).collect::<Vec<_>>()
        );
        assert!(q.oldest_checkpoint().is_none(), "nothing in flight");
    }

    #[test]
    fn checkpoints_behind_launches_waited_for_are_skipped() {
        let (mut q, _completers) = queue(6, &[1, 4]);
        q.push(6, Handle(7));
        assert_eq!(
            q.unmarked(),
            2,
            "launches 5 and 6 follow the newest checkpoint"
        );
        // The guest waited for launches 0 and 1 (and 3, out of order).
        for seq in [0, 1, 3] {
            q.remove(seq);
        }
        assert_eq!(q.len(), 4);
        let oldest = q.oldest_checkpoint().expect("the checkpoint behind 4");
        assert_eq!(oldest.after, 4);
        assert_eq!(q.take_through(oldest.after), vec![Handle(3), Handle(5)]);
        assert_eq!(q.unmarked(), 2);
        assert!(q.oldest_checkpoint().is_none(), "none behind 5 or 6");
    }

    /// A wait as `settle` and `wait_ended` make it: the budget it got,
    /// then how long it took.
    fn wait(state: &mut SpinState, took: Duration) -> Duration {
        let budget = state.begin();
        state.ended(took);
        budget
    }

    #[test]
    fn the_adaptive_policy_spins_only_while_waits_are_short() {
        let budget = Duration::from_millis(2);
        let (short, long) = (budget / 2, budget * 3);
        let mut s = SpinState::new(WaitPolicy::Adaptive(budget));
        assert!(s.spins_next(), "a new stream spins first");
        assert_eq!(wait(&mut s, short), budget);
        assert!(s.spins_next(), "a short wait keeps the spinning");
        assert_eq!(wait(&mut s, budget), budget, "the budget itself is short");
        assert!(s.spins_next());
        assert_eq!(wait(&mut s, long), budget);
        assert!(!s.spins_next(), "a wait past the budget stops the spinning");
        for i in 1..PROBE_EVERY {
            assert_eq!(wait(&mut s, long), Duration::ZERO, "long wait {i}");
            assert!(!s.spins_next(), "long wait {i}");
        }
        assert_eq!(wait(&mut s, long), Duration::ZERO);
        assert!(s.spins_next(), "after {PROBE_EVERY} waits without, a probe");
        assert_eq!(wait(&mut s, long), budget, "the probe spins");
        assert!(!s.spins_next(), "the probe found the kernels still long");
        assert_eq!(wait(&mut s, short), Duration::ZERO);
        assert!(s.spins_next(), "a short wait brings the spinning back");
        assert_eq!(wait(&mut s, short), budget);
    }

    #[test]
    fn spin_and_suspend_ignore_how_long_waits_take() {
        let spin = Duration::from_micros(5);
        let mut s = SpinState::new(WaitPolicy::Spin(spin));
        for took in [Duration::ZERO, spin * 1000] {
            assert_eq!(wait(&mut s, took), spin);
            assert!(s.spins_next());
        }
        let mut s = SpinState::new(WaitPolicy::Suspend);
        for took in [Duration::ZERO, spin * 1000] {
            assert_eq!(wait(&mut s, took), Duration::ZERO);
            assert!(!s.spins_next());
        }
        let s = SpinState::new(WaitPolicy::Adaptive(Duration::ZERO));
        assert!(!s.spins_next(), "a zero budget never spins");
    }
}
