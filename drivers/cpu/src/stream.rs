//! Streams: one worker thread per stream runs its queued work in order, and
//! the set of live streams that a driver drains before synchronous copies and
//! frees. What the work does (copies, kernels, event marks, callbacks) is
//! decided by the driver; this module only queues, runs and counts it.
//!
//! A failure (a kernel or callback that panicked) is sticky: every later
//! `stream_synchronize` or `stream_query` on the stream, and `synchronize`
//! while the stream lives, reports it. Work queued after a failure still
//! runs, so events complete and callbacks run exactly once.

use std::{
    any::Any,
    cell::Cell,
    fmt, io,
    panic::{self, AssertUnwindSafe},
    sync::mpsc,
    thread,
};

use crate::{
    device::CpuDevice,
    sync::{Arc, AtomicU64, Condvar, Mutex, Ordering, Weak, lock, wait_while},
};

/// One item of a stream's queue; `Err` carries a failure message.
pub(crate) type StreamWork = Box<dyn FnOnce() -> Result<(), String> + Send>;

thread_local! {
    /// The stream whose work this thread runs (its core's address), or 0.
    static SERVING: Cell<usize> = const { Cell::new(0) };
}

/// The stream this thread runs work for (0 for none), so that threads a
/// kernel launch spawns can inherit it.
pub(crate) fn serving() -> usize {
    SERVING.get()
}

/// Marks this thread as running work of the stream `tag`.
pub(crate) fn set_serving(tag: usize) {
    SERVING.set(tag);
}

/// A panic payload as text.
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> &str {
    if let Some(text) = payload.downcast_ref::<&str>() {
        text
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text
    } else {
        "(a panic payload that is not text)"
    }
}

/// What a stream's owner and its worker share: how much work was queued and
/// finished, and the first failure.
pub(crate) struct StreamCore {
    id: u64,
    progress: Mutex<Progress>,
    advanced: Condvar,
}

#[derive(Default)]
struct Progress {
    queued: u64,
    done: u64,
    failure: Option<String>,
}

impl StreamCore {
    fn tag(&self) -> usize {
        std::ptr::from_ref(self).addr()
    }

    fn finish(&self, failure: Option<String>) {
        let mut progress = lock(&self.progress);
        progress.done += 1;
        if progress.failure.is_none() {
            progress.failure = failure;
        }
        drop(progress);
        self.advanced.notify_all();
    }

    /// Work queued so far: the target to wait for.
    fn queued(&self) -> u64 {
        lock(&self.progress).queued
    }

    /// Waits until the first `target` items have run, and returns the
    /// stream's failure, if any. On the stream's own threads (a callback that
    /// calls into the driver against the rules) it does not wait, since the
    /// wait could never end.
    fn wait_for(&self, target: u64) -> Option<String> {
        let progress = lock(&self.progress);
        let progress = if serving() == self.tag() {
            progress
        } else {
            wait_while(&self.advanced, progress, |p| p.done < target)
        };
        progress
            .failure
            .as_deref()
            .map(|failure| self.sticky(failure))
    }

    /// Waits for all work queued so far; returns the stream's failure.
    pub(crate) fn wait_idle(&self) -> Option<String> {
        self.wait_for(self.queued())
    }

    /// Without waiting: whether all work queued so far has run (`Ok`), or
    /// the stream's failure (`Err`), which wins even while work still runs.
    pub(crate) fn query(&self) -> Result<bool, String> {
        let progress = lock(&self.progress);
        match progress.failure.as_deref() {
            Some(failure) => Err(self.sticky(failure)),
            None => Ok(progress.done == progress.queued),
        }
    }

    /// A failure as every later wait and query reports it.
    fn sticky(&self, failure: &str) -> String {
        format!(
            "stream {}: {failure} (sticky: create a new stream)",
            self.id
        )
    }
}

/// An in-order queue of work with its own worker thread. Dropping it waits
/// for the queued work to finish, then stops the thread.
///
/// A kernel or completion callback that panics fails the stream, stickily:
/// every later `stream_synchronize` and `stream_query` on it returns
/// `ErrorKind::LaunchFailed`, and so does `synchronize` while the stream
/// lives. Work queued after the failure still runs (events complete,
/// callbacks run exactly once), and synchronous copies are unaffected;
/// create a new stream to go on cleanly.
pub struct CpuStream {
    core: Arc<StreamCore>,
    // Dropped before joining the worker, which then drains and exits.
    queue: Option<mpsc::Sender<StreamWork>>,
    worker: Option<thread::JoinHandle<()>>,
    owner: Arc<CpuDevice>,
}

impl CpuStream {
    pub(crate) fn spawn(owner: &Arc<CpuDevice>) -> io::Result<CpuStream> {
        let id = owner.streams.next_id.fetch_add(1, Ordering::Relaxed);
        let core = Arc::new(StreamCore {
            id,
            progress: Mutex::default(),
            advanced: Condvar::new(),
        });
        let (queue, work) = mpsc::channel();
        let served = Arc::clone(&core);
        let worker = thread::Builder::new()
            .name(format!("tensorwasm-cpu-stream-{id}"))
            .spawn(move || serve(&served, work))?;
        owner.streams.insert(&core);
        Ok(CpuStream {
            core,
            queue: Some(queue),
            worker: Some(worker),
            owner: Arc::clone(owner),
        })
    }

    /// The stream's number, unique within its driver (it names the stream's
    /// thread, `tensorwasm-cpu-stream-N`, and its errors).
    pub fn id(&self) -> u64 {
        self.core.id
    }

    pub(crate) fn owner(&self) -> &Arc<CpuDevice> {
        &self.owner
    }

    pub(crate) fn core(&self) -> &StreamCore {
        &self.core
    }

    /// Queues `work` after everything queued before it.
    pub(crate) fn enqueue(&self, work: StreamWork) -> Result<(), String> {
        let stopped = || format!("the worker thread of stream {} has stopped", self.core.id);
        let queue = self.queue.as_ref().ok_or_else(stopped)?;
        // Counting under the lock keeps `queued` in step with the channel's
        // order, so a waiter's target always covers the work it queued.
        let mut progress = lock(&self.core.progress);
        queue.send(work).map_err(|_| stopped())?;
        progress.queued += 1;
        Ok(())
    }
}

impl Drop for CpuStream {
    fn drop(&mut self) {
        drop(self.queue.take());
        if let Some(worker) = self.worker.take()
            // Dropped by its own callback: the worker drains on its own.
            && worker.thread().id() != thread::current().id()
        {
            // The worker catches every panic, so join cannot report one.
            let _ = worker.join();
        }
    }
}

impl fmt::Debug for CpuStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CpuStream({})", self.core.id)
    }
}

/// The worker's loop: runs each item, catching panics so that one bad
/// kernel or callback cannot take the stream down.
fn serve(core: &StreamCore, work: mpsc::Receiver<StreamWork>) {
    set_serving(core.tag());
    for item in work {
        let failure = match panic::catch_unwind(AssertUnwindSafe(item)) {
            Ok(Ok(())) => None,
            Ok(Err(failure)) => Some(failure),
            Err(payload) => Some(format!(
                "queued work (a completion callback) panicked: {}",
                panic_message(&*payload)
            )),
        };
        core.finish(failure);
    }
}

/// The driver's live streams, held weakly so that a dropped stream leaves.
#[derive(Default)]
pub(crate) struct StreamSet {
    next_id: AtomicU64,
    live: Mutex<Vec<Weak<StreamCore>>>,
}

impl StreamSet {
    fn insert(&self, core: &Arc<StreamCore>) {
        let mut live = lock(&self.live);
        live.retain(|stream| stream.strong_count() > 0);
        live.push(Arc::downgrade(core));
    }

    /// Every live stream with the work queued on it now.
    fn targets(&self) -> Vec<(Arc<StreamCore>, u64)> {
        lock(&self.live)
            .iter()
            .filter_map(Weak::upgrade)
            .map(|core| {
                let target = core.queued();
                (core, target)
            })
            .collect()
    }

    /// Waits for the work queued now on every stream; returns the first
    /// sticky failure among them.
    pub(crate) fn synchronize(&self) -> Option<String> {
        let mut first = None;
        for (core, target) in self.targets() {
            let failure = core.wait_for(target);
            if first.is_none() {
                first = failure;
            }
        }
        first
    }

    /// Waits for the work queued now on every stream, ignoring failures:
    /// memory operations are ordered after it whatever it did.
    pub(crate) fn drain(&self) {
        let _ = self.synchronize();
    }
}

#[cfg(test)]
mod tests {
    use std::{
        sync::atomic::AtomicUsize,
        time::{Duration, Instant},
    };

    use tensorwasm_core::{DeviceMemory, DriverError, ErrorKind, GpuDriver, LaunchConfig};

    use super::*;
    use crate::{kernel::HostKernelFn, testing::driver};

    #[test]
    fn work_runs_in_order_once_on_the_stream_thread() {
        let d = driver(1 << 20);
        let stream = d.create_stream().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        for i in 0..100 {
            let log = Arc::clone(&log);
            d.on_complete(
                &stream,
                Box::new(move || {
                    let name = thread::current().name().map(str::to_owned);
                    lock(&log).push((i, name));
                }),
            )
            .unwrap();
        }
        d.stream_synchronize(&stream).unwrap();
        let log = lock(&log);
        assert_eq!(log.len(), 100);
        let thread_name = format!("tensorwasm-cpu-stream-{}", stream.id());
        for (i, (seen, name)) in log.iter().enumerate() {
            assert_eq!(*seen, i);
            assert_eq!(name.as_deref(), Some(thread_name.as_str()));
        }
    }

    #[test]
    fn synchronous_copies_wait_for_queued_work() {
        let d = driver(1 << 20);
        let stream = d.create_stream().unwrap();
        let buffer = d.alloc_device(4).unwrap();
        let address = buffer.device_ptr();
        d.on_complete(
            &stream,
            Box::new(move || {
                thread::sleep(Duration::from_millis(30));
                // SAFETY: the buffer outlives the stream's work (frees drain it).
                unsafe { crate::testing::host::<u32>(address).write(0xfeed) };
            }),
        )
        .unwrap();
        let mut bytes = [0; 4];
        d.copy_from_device(&mut bytes, buffer.full()).unwrap();
        assert_eq!(u32::from_le_bytes(bytes), 0xfeed);
    }

    #[test]
    fn frees_and_stream_drops_wait_for_queued_work() {
        let d = driver(1 << 20);
        let stream = d.create_stream().unwrap();
        let buffer = d.alloc_device(4096).unwrap();
        let finished = Arc::new(AtomicUsize::new(0));
        let flag = Arc::clone(&finished);
        d.on_complete(
            &stream,
            Box::new(move || {
                thread::sleep(Duration::from_millis(20));
                flag.store(1, Ordering::SeqCst);
            }),
        )
        .unwrap();
        d.memset_async(&stream, buffer.full(), 0x11).unwrap();
        drop(buffer);
        assert_eq!(finished.load(Ordering::SeqCst), 1);
        assert_eq!(d.mem_info().unwrap().free, 1 << 20);

        let flag = Arc::clone(&finished);
        d.on_complete(
            &stream,
            Box::new(move || {
                thread::sleep(Duration::from_millis(20));
                flag.store(2, Ordering::SeqCst);
            }),
        )
        .unwrap();
        drop(stream);
        assert_eq!(finished.load(Ordering::SeqCst), 2);
        d.synchronize().unwrap();
    }

    #[test]
    fn async_copies_run_in_stream_order() {
        let d = driver(1 << 20);
        let stream = d.create_stream().unwrap();
        let a = d.alloc_device(256).unwrap();
        let b = d.alloc_managed(256).unwrap();
        d.memset_async(&stream, a.full(), 0x3c).unwrap();
        d.copy_device_async(&stream, b.full(), a.full()).unwrap();
        d.memset_async(&stream, a.range(0, 128).unwrap(), 0x7e)
            .unwrap();
        d.stream_synchronize(&stream).unwrap();
        let mut back = [0; 256];
        d.copy_from_device(&mut back, b.full()).unwrap();
        assert!(back.iter().all(|&x| x == 0x3c));
        d.copy_from_device(&mut back, a.full()).unwrap();
        assert!(back[..128].iter().all(|&x| x == 0x7e) && back[128..].iter().all(|&x| x == 0x3c));
        let err = d
            .copy_device_async(&stream, b.range(0, 2).unwrap(), a.range(0, 3).unwrap())
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    }

    #[test]
    fn a_panicking_callback_fails_the_stream() {
        let d = driver(1 << 20);
        let stream = d.create_stream().unwrap();
        d.on_complete(&stream, Box::new(|| panic!("callback went wrong")))
            .unwrap();
        let ran = Arc::new(AtomicUsize::new(0));
        let flag = Arc::clone(&ran);
        d.on_complete(
            &stream,
            Box::new(move || {
                flag.fetch_add(1, Ordering::SeqCst);
            }),
        )
        .unwrap();
        let err = d.stream_synchronize(&stream).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::LaunchFailed);
        assert!(err.message().contains("callback went wrong"), "{err}");
        assert_eq!(ran.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_panicking_kernel_makes_stream_query_fail_without_waiting() {
        let d = driver(1 << 20);
        let boom: Arc<HostKernelFn> = Arc::new(|_, _| panic!("kernel went wrong"));
        let function = d
            .function(&d.host_module([("boom", boom)]), "boom")
            .unwrap();
        let stream = d.create_stream().unwrap();
        // SAFETY: the kernel touches no memory.
        unsafe { d.launch(&stream, &function, &LaunchConfig::for_elements(4, 4), &[]) }.unwrap();
        // A callback after the kernel says it has run, then holds the stream.
        let (reached, kernel_done) = mpsc::channel();
        let (release, gate) = mpsc::channel::<()>();
        d.on_complete(
            &stream,
            Box::new(move || {
                let _ = reached.send(());
                let _ = gate.recv();
            }),
        )
        .unwrap();
        kernel_done.recv().unwrap();

        // Work is still running, yet the failure is reported at once.
        let err = d.stream_query(&stream).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::LaunchFailed);
        assert_eq!(err.op(), "stream_query");
        assert!(err.message().contains("kernel went wrong"), "{err}");
        drop(release);
        assert_eq!(
            d.stream_synchronize(&stream).unwrap_err().kind(),
            ErrorKind::LaunchFailed
        );
        // Sticky, once the stream is idle too.
        assert_eq!(
            d.stream_query(&stream).unwrap_err().kind(),
            ErrorKind::LaunchFailed
        );
        let fresh = d.create_stream().unwrap();
        assert!(d.stream_query(&fresh).unwrap());
    }

    #[test]
    fn synchronize_with_idle_or_no_streams_returns_at_once() {
        let d = driver(1 << 20);
        let started = Instant::now();
        d.synchronize().unwrap();
        let stream = d.create_stream().unwrap();
        d.stream_synchronize(&stream).unwrap();
        d.synchronize().unwrap();
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
