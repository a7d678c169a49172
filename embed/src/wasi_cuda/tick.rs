//! A timer for suspended waits. A `wait` that suspends on the stream's
//! completion callback must not rely on the callback alone: CUDA does not
//! call a `cuLaunchHostFunc` callback once the context has an error (a
//! trusted tenant's faulting kernel), and the guest would wait forever. So
//! the waiter also wakes every [`CALLBACK_POLL`] and asks the stream
//! (`quiesce` in `mod.rs`). [`poll_tick`] resolves one period later, from
//! one background thread (started on first use) that sleeps until the
//! earliest deadline. Every timer has the same period, so they queue in
//! deadline order and each costs O(1); a timer whose waiter has gone (its
//! callback came first) completes into nothing.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use tensorwasm_core::{Completer, DispatchFuture, dispatch};

/// How often a suspended wait asks the stream while its callback has not
/// come: one non-blocking query per period per waiting guest.
pub(crate) const CALLBACK_POLL: Duration = Duration::from_millis(100);

/// The pending timers, in deadline order, and the thread's wake-up.
struct Timers {
    pending: Mutex<VecDeque<(Instant, Completer<()>)>>,
    changed: Condvar,
}

/// The timers, their thread started on first use.
fn timers() -> &'static Timers {
    static TIMERS: OnceLock<&'static Timers> = OnceLock::new();
    TIMERS.get_or_init(|| {
        let timers: &'static Timers = Box::leak(Box::new(Timers {
            pending: Mutex::new(VecDeque::new()),
            changed: Condvar::new(),
        }));
        // A failed spawn leaves the timers unserved: waits then rely on
        // their callbacks alone, as before this module.
        let _ = std::thread::Builder::new()
            .name("tensorwasm-wait-timer".into())
            .spawn(move || run(timers));
        timers
    })
}

/// A future that resolves [`CALLBACK_POLL`] from now.
pub(crate) fn poll_tick() -> DispatchFuture<()> {
    let (completer, future) = dispatch();
    let timers = timers();
    let mut pending = timers
        .pending
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    // Taken under the lock, so the queue stays in deadline order.
    pending.push_back((Instant::now() + CALLBACK_POLL, completer));
    if pending.len() == 1 {
        // The thread sleeps with nothing to wait for: wake it.
        timers.changed.notify_one();
    }
    future
}

/// The timer thread: completes each timer at its deadline.
fn run(timers: &'static Timers) {
    let mut pending = timers
        .pending
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    loop {
        let now = Instant::now();
        while pending.front().is_some_and(|p| p.0 <= now) {
            if let Some((_, completer)) = pending.pop_front() {
                // Its waiter may have gone (the callback came first).
                let _ = completer.complete(());
            }
        }
        pending = match pending.front().map(|p| p.0) {
            Some(at) => {
                timers
                    .changed
                    .wait_timeout(pending, at.saturating_duration_since(now))
                    .unwrap_or_else(PoisonError::into_inner)
                    .0
            }
            None => timers
                .changed
                .wait(pending)
                .unwrap_or_else(PoisonError::into_inner),
        };
    }
}
