//! Loom models of `tensorwasm_core::dispatch`: every interleaving of a
//! completion against a poll, a drop, or a second completion. Run with
//! `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p
//! tensorwasm-core --test loom_dispatch --release` (docs/testing.md).
//! loom reports any `loom::sync::Arc` still alive when a model ends, so each
//! model also checks that the shared state is freed.

#![cfg(loom)]

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Wake, Waker};

use loom::sync::Arc;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::thread;
use tensorwasm_core::{AlreadyCompleted, DispatchFuture, dispatch};

/// A waker that counts its wakes in a loom atomic. (`Wake` wants a std
/// `Arc`; the counter inside it is what loom tracks.)
struct CountingWaker {
    wakes: AtomicUsize,
}

impl Wake for CountingWaker {
    fn wake(self: std::sync::Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &std::sync::Arc<Self>) {
        self.wakes.fetch_add(1, Ordering::SeqCst);
    }
}

fn counting_waker() -> (std::sync::Arc<CountingWaker>, Waker) {
    let counter = std::sync::Arc::new(CountingWaker {
        wakes: AtomicUsize::new(0),
    });
    let waker = Waker::from(std::sync::Arc::clone(&counter));
    (counter, waker)
}

/// A value that counts its drops, so a model can see it dropped exactly once.
struct DropCounted {
    id: usize,
    drops: Arc<AtomicUsize>,
}

impl Drop for DropCounted {
    fn drop(&mut self) {
        self.drops.fetch_add(1, Ordering::SeqCst);
    }
}

fn poll_once<T>(future: &mut DispatchFuture<T>, waker: &Waker) -> Poll<T> {
    Pin::new(future).poll(&mut Context::from_waker(waker))
}

/// (a) A completion on another thread races the waiter's first poll. The
/// waiter blocks on loom's executor, which parks until woken: a lost wakeup
/// is a deadlock, which loom reports.
#[test]
fn completion_racing_block_on_never_loses_the_wakeup() {
    loom::model(|| {
        let (completer, future) = dispatch::<usize>();
        let completing = thread::spawn(move || completer.complete(7));
        assert_eq!(loom::future::block_on(future), 7);
        assert!(completing.join().unwrap().is_ok());
    });
}

/// (a) The same race, polled once by hand: if the poll saw `Pending`, the
/// completion woke the waker exactly once and the value is there to take; if
/// the poll saw the value, nobody was woken.
#[test]
fn completion_racing_one_poll_wakes_exactly_when_needed() {
    loom::model(|| {
        let (completer, mut future) = dispatch::<usize>();
        let (counter, waker) = counting_waker();
        let completing = thread::spawn(move || completer.complete(7));

        let polled = poll_once(&mut future, &waker);
        assert!(completing.join().unwrap().is_ok());
        let wakes = counter.wakes.load(Ordering::SeqCst);
        match polled {
            Poll::Ready(value) => {
                assert_eq!(value, 7);
                assert_eq!(wakes, 0);
            }
            Poll::Pending => {
                assert_eq!(wakes, 1);
                assert_eq!(future.try_take(), Some(7));
            }
        }
        assert!(future.is_complete());
        drop(future);
        drop(waker);
        assert_eq!(std::sync::Arc::strong_count(&counter), 1, "waker freed");
    });
}

/// (b) The future is dropped (after a `Pending` poll that stored a waker)
/// while the completion runs on another thread. The completion succeeds, the
/// value is dropped exactly once, and no waker or shared state is left.
#[test]
fn completion_racing_drop_succeeds_and_frees_everything() {
    loom::model(|| {
        let drops = Arc::new(AtomicUsize::new(0));
        let (completer, mut future) = dispatch::<DropCounted>();
        let (counter, waker) = counting_waker();
        assert!(poll_once(&mut future, &waker).is_pending());

        let value = DropCounted {
            id: 1,
            drops: Arc::clone(&drops),
        };
        let completing = thread::spawn(move || completer.complete(value).is_ok());
        drop(future);
        assert!(completing.join().unwrap(), "completion after drop is Ok");

        assert_eq!(drops.load(Ordering::SeqCst), 1, "value dropped once");
        assert!(counter.wakes.load(Ordering::SeqCst) <= 1);
        drop(waker);
        assert_eq!(std::sync::Arc::strong_count(&counter), 1, "waker freed");
        // Only ours is left: the dispatch state and the value are gone.
        assert_eq!(Arc::strong_count(&drops), 1);
    });
}

/// (c) Two threads complete the same dispatch. Exactly one succeeds; the
/// other gets its own value back; the waiter reads the winner's value.
#[test]
fn double_completion_from_two_threads_has_one_winner() {
    loom::model(|| {
        let drops = Arc::new(AtomicUsize::new(0));
        let (completer, mut future) = dispatch::<DropCounted>();
        let racers: Vec<_> = (1..=2)
            .map(|id| {
                let completer = completer.clone();
                let value = DropCounted {
                    id,
                    drops: Arc::clone(&drops),
                };
                thread::spawn(move || match completer.complete(value) {
                    Ok(()) => None,
                    Err(AlreadyCompleted(back)) => {
                        assert_eq!(back.id, id, "its own value comes back");
                        Some(back.id)
                    }
                })
            })
            .collect();
        drop(completer);
        let refused: Vec<_> = racers.into_iter().map(|r| r.join().unwrap()).collect();

        let losers: Vec<usize> = refused.iter().flatten().copied().collect();
        assert_eq!(losers.len(), 1, "exactly one completion refused");
        let taken = future.try_take().expect("the winner's value is there");
        assert_ne!(taken.id, losers[0]);
        assert_eq!(drops.load(Ordering::SeqCst), 1, "the loser's value dropped");
        drop(taken);
        drop(future);
        assert_eq!(drops.load(Ordering::SeqCst), 2);
        assert_eq!(Arc::strong_count(&drops), 1);
    });
}
