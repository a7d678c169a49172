//! The completion state machine behind launch waits: a [`Completer`] that a
//! driver callback fills in once, and the [`DispatchFuture`] a waiter awaits.
//! It owns the shared slot and the waiter's waker; it knows nothing of
//! streams, drivers or executors, and takes its locks from [`crate::sync`].

use core::fmt;
use core::future::Future;
use core::mem;
use core::pin::Pin;
use core::task::{Context, Poll, Waker};

use crate::sync::{Arc, Mutex};

/// Creates a connected pair: the [`Completer`] side delivers one value, the
/// [`DispatchFuture`] side waits for it.
pub fn dispatch<T: Send>() -> (Completer<T>, DispatchFuture<T>) {
    let shared = Arc::new(Mutex::new(Shared {
        slot: Slot::Waiting,
        waker: None,
    }));
    (
        Completer {
            shared: Arc::clone(&shared),
        },
        DispatchFuture { shared },
    )
}

/// The delivering side of a [`dispatch`]: the first [`complete`] stores the
/// value and wakes the waiter; every later one is refused.
///
/// Cloning is cheap (a reference count) and every clone completes the same
/// dispatch, so a driver can hand one to each callback that might fire.
///
/// [`complete`]: Completer::complete
pub struct Completer<T> {
    shared: Arc<Mutex<Shared<T>>>,
}

/// The waiting side of a [`dispatch`]: resolves to the value given to
/// [`Completer::complete`].
///
/// `.await` consumes it, which is the intended use. A future that is polled
/// again by hand after it returned `Ready` returns `Pending` and never wakes
/// (its value is gone and the output type has no room for "already taken");
/// it does not panic.
pub struct DispatchFuture<T> {
    shared: Arc<Mutex<Shared<T>>>,
}

/// A refused completion: the dispatch was already completed, and the value
/// offered the second time comes back unchanged.
#[derive(Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct AlreadyCompleted<T>(pub T);

/// What the completer and the future share, behind one lock.
struct Shared<T> {
    slot: Slot<T>,
    /// The waker from the latest `Pending` poll; taken by `complete`.
    waker: Option<Waker>,
}

/// The life of a dispatch. Every transition goes forward:
/// `Waiting -> Ready -> Taken`, or `Waiting -> Abandoned -> Taken`.
enum Slot<T> {
    /// Not completed; the future is alive.
    Waiting,
    /// Completed; the value waits for the future.
    Ready(T),
    /// Not completed; the future was dropped, so a completion has no reader.
    Abandoned,
    /// Completed, and the value is gone: read by the future, or dropped
    /// because the future was gone.
    Taken,
}

impl<T> Shared<T> {
    /// Moves a ready value out, leaving `Taken`; any other state is kept.
    fn take_ready(&mut self) -> Option<T> {
        match mem::replace(&mut self.slot, Slot::Taken) {
            Slot::Ready(value) => Some(value),
            other => {
                self.slot = other;
                None
            }
        }
    }
}

impl<T> Completer<T> {
    /// Delivers `value` and wakes the waiter, if this is the first completion.
    ///
    /// A second completion (from this or any clone) changes nothing and
    /// hands `value` back in [`AlreadyCompleted`]. If the future was already
    /// dropped the completion still succeeds and `value` is dropped here,
    /// on the calling thread.
    ///
    /// Safe to call from a driver callback thread: it holds the lock only to
    /// swap the state, wakes after releasing it, and does not panic (a
    /// waker or a `T` whose drop panics aside).
    pub fn complete(&self, value: T) -> Result<(), AlreadyCompleted<T>> {
        let mut shared = self.shared.lock();
        match shared.slot {
            Slot::Waiting => {
                shared.slot = Slot::Ready(value);
                let waker = shared.waker.take();
                drop(shared);
                if let Some(waker) = waker {
                    waker.wake();
                }
                Ok(())
            }
            Slot::Abandoned => {
                shared.slot = Slot::Taken;
                drop(shared);
                drop(value);
                Ok(())
            }
            Slot::Ready(_) | Slot::Taken => Err(AlreadyCompleted(value)),
        }
    }
}

impl<T> DispatchFuture<T> {
    /// Whether the dispatch has been completed. Once true it stays true,
    /// also after the value has been taken.
    pub fn is_complete(&self) -> bool {
        matches!(self.shared.lock().slot, Slot::Ready(_) | Slot::Taken)
    }

    /// Takes the value if the dispatch is complete and the value has not
    /// been taken yet; never waits.
    pub fn try_take(&mut self) -> Option<T> {
        self.shared.lock().take_ready()
    }
}

impl<T> Future for DispatchFuture<T> {
    type Output = T;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let mut shared = self.shared.lock();
        if let Some(value) = shared.take_ready() {
            return Poll::Ready(value);
        }
        if !matches!(shared.slot, Slot::Waiting) {
            // Taken: polled again after `Ready`. Nothing will complete this
            // dispatch again, so there is no waker worth keeping.
            return Poll::Pending;
        }
        let replaced = match &shared.waker {
            Some(stored) if stored.will_wake(cx.waker()) => None,
            _ => shared.waker.replace(cx.waker().clone()),
        };
        drop(shared);
        // An old waker's drop can run executor code: not under the lock.
        drop(replaced);
        Poll::Pending
    }
}

impl<T> Drop for DispatchFuture<T> {
    fn drop(&mut self) {
        let mut shared = self.shared.lock();
        let value = shared.take_ready();
        if matches!(shared.slot, Slot::Waiting) {
            shared.slot = Slot::Abandoned;
        }
        let waker = shared.waker.take();
        drop(shared);
        drop(value);
        drop(waker);
    }
}

impl<T> Clone for Completer<T> {
    fn clone(&self) -> Self {
        Completer {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<T> fmt::Debug for Completer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Completer").finish_non_exhaustive()
    }
}

impl<T> fmt::Debug for DispatchFuture<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DispatchFuture")
            .field("complete", &self.is_complete())
            .finish_non_exhaustive()
    }
}

impl<T> AlreadyCompleted<T> {
    /// The value that was offered to the second completion.
    pub fn into_inner(self) -> T {
        self.0
    }
}

impl<T> fmt::Debug for AlreadyCompleted<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `T` need not be `Debug`, so `.unwrap()` works for any value type.
        f.debug_tuple("AlreadyCompleted").finish_non_exhaustive()
    }
}

impl<T> fmt::Display for AlreadyCompleted<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("dispatch already completed; the second value was handed back")
    }
}

impl<T> core::error::Error for AlreadyCompleted<T> {}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::sync::{AtomicUsize, Ordering};
    use alloc::task::Wake;

    /// A waker that counts its wakes.
    #[derive(Default)]
    struct CountingWaker {
        wakes: AtomicUsize,
    }

    impl Wake for CountingWaker {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }

        fn wake_by_ref(self: &Arc<Self>) {
            self.wakes.fetch_add(1, Ordering::SeqCst);
        }
    }

    impl CountingWaker {
        fn new() -> (Arc<Self>, Waker) {
            let counter = Arc::new(CountingWaker::default());
            let waker = Waker::from(Arc::clone(&counter));
            (counter, waker)
        }

        fn wakes(&self) -> usize {
            self.wakes.load(Ordering::SeqCst)
        }
    }

    /// A value that counts how often it is dropped.
    struct DropCounted(Arc<AtomicUsize>);

    impl Drop for DropCounted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn poll_once<T>(future: &mut DispatchFuture<T>, waker: &Waker) -> Poll<T> {
        Pin::new(future).poll(&mut Context::from_waker(waker))
    }

    #[test]
    fn complete_then_poll_is_ready_without_a_wake() {
        let (completer, mut future) = dispatch::<u32>();
        assert!(!future.is_complete());
        completer.complete(41).unwrap();
        assert!(future.is_complete());

        let (counter, waker) = CountingWaker::new();
        assert_eq!(poll_once(&mut future, &waker), Poll::Ready(41));
        assert_eq!(counter.wakes(), 0);
        assert!(future.is_complete(), "stays complete after the take");
        assert_eq!(future.try_take(), None);
    }

    #[test]
    fn poll_then_complete_wakes_exactly_once() {
        let (completer, mut future) = dispatch::<u32>();
        let (counter, waker) = CountingWaker::new();
        assert_eq!(poll_once(&mut future, &waker), Poll::Pending);
        // The same waker again: kept, not cloned a second time.
        assert_eq!(poll_once(&mut future, &waker), Poll::Pending);
        assert_eq!(Arc::strong_count(&counter), 3, "counter, waker, stored");
        assert_eq!(counter.wakes(), 0);

        completer.complete(17).unwrap();
        assert_eq!(counter.wakes(), 1);
        assert_eq!(Arc::strong_count(&counter), 2, "stored waker consumed");
        assert_eq!(poll_once(&mut future, &waker), Poll::Ready(17));
        assert_eq!(counter.wakes(), 1);
    }

    #[test]
    fn only_the_latest_waker_is_woken() {
        let (completer, mut future) = dispatch::<u32>();
        let (first, first_waker) = CountingWaker::new();
        let (second, second_waker) = CountingWaker::new();
        assert_eq!(poll_once(&mut future, &first_waker), Poll::Pending);
        assert_eq!(poll_once(&mut future, &second_waker), Poll::Pending);
        assert_eq!(Arc::strong_count(&first), 2, "replaced waker dropped");

        completer.complete(3).unwrap();
        assert_eq!((first.wakes(), second.wakes()), (0, 1));
    }

    #[test]
    fn double_completion_hands_the_value_back() {
        let (completer, mut future) = dispatch::<u32>();
        let other = completer.clone();
        completer.complete(5).unwrap();
        assert_eq!(other.complete(9), Err(AlreadyCompleted(9)));
        assert_eq!(completer.complete(11).unwrap_err().into_inner(), 11);
        assert_eq!(future.try_take(), Some(5));
        // Refused after the take as well.
        assert_eq!(other.complete(13), Err(AlreadyCompleted(13)));
        assert_eq!(future.try_take(), None);
    }

    #[test]
    fn completion_after_drop_succeeds_and_drops_the_value() {
        let drops = Arc::new(AtomicUsize::new(0));
        let (completer, future) = dispatch::<DropCounted>();
        let (counter, waker) = CountingWaker::new();
        let mut future = future;
        assert!(poll_once(&mut future, &waker).is_pending());
        drop(future);
        assert_eq!(Arc::strong_count(&counter), 2, "stored waker dropped");

        assert!(completer.complete(DropCounted(Arc::clone(&drops))).is_ok());
        assert_eq!(drops.load(Ordering::SeqCst), 1, "dropped by complete");
        assert_eq!(counter.wakes(), 0);

        let refused = completer.complete(DropCounted(Arc::clone(&drops)));
        assert!(refused.is_err());
        drop(refused);
        assert_eq!(drops.load(Ordering::SeqCst), 2);
        assert_eq!(Arc::strong_count(&completer.shared), 1);
    }

    #[test]
    fn an_untaken_value_is_dropped_with_the_future() {
        let drops = Arc::new(AtomicUsize::new(0));
        let (completer, future) = dispatch::<DropCounted>();
        completer
            .complete(DropCounted(Arc::clone(&drops)))
            .map_err(drop)
            .unwrap();
        drop(future);
        assert_eq!(drops.load(Ordering::SeqCst), 1);
        assert!(completer.complete(DropCounted(Arc::clone(&drops))).is_err());
        assert_eq!(drops.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn polling_after_ready_is_pending_not_a_panic() {
        let (completer, mut future) = dispatch::<u32>();
        let (counter, waker) = CountingWaker::new();
        completer.complete(1).unwrap();
        assert_eq!(poll_once(&mut future, &waker), Poll::Ready(1));
        assert_eq!(poll_once(&mut future, &waker), Poll::Pending);
        assert_eq!(Arc::strong_count(&counter), 2, "no waker stored");
    }

    #[test]
    fn completer_is_clone_send_sync_and_future_is_send_unpin() {
        fn completer<C: Clone + Send + Sync>() {}
        fn future<F: Future<Output = u32> + Send + Unpin>() {}
        completer::<Completer<u32>>();
        future::<DispatchFuture<u32>>();
    }
}
