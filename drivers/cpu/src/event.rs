//! Events: a generation counter per event, bumped by each record and
//! completed by the recording stream's worker, with a condvar to wait on.
//! Only the latest record matters, as in CUDA.

use std::{fmt, time::Instant};

use crate::sync::{Arc, Condvar, Mutex, lock, wait_while};

/// A marker recorded on a stream, with the time its latest record completed.
pub struct CpuEvent {
    marks: Arc<EventMarks>,
}

/// The part of an event a stream's queued work holds on to.
pub(crate) struct EventMarks {
    state: Mutex<MarkState>,
    reached: Condvar,
}

#[derive(Default)]
struct MarkState {
    /// Generation of the latest record (0: never recorded).
    recorded: u64,
    /// Highest generation completed.
    completed: u64,
    /// When `completed` was reached.
    completed_at: Option<Instant>,
}

impl CpuEvent {
    pub(crate) fn new() -> CpuEvent {
        CpuEvent {
            marks: Arc::new(EventMarks {
                state: Mutex::default(),
                reached: Condvar::new(),
            }),
        }
    }

    pub(crate) fn marks(&self) -> &Arc<EventMarks> {
        &self.marks
    }

    /// Starts a new record; the recording stream completes the returned
    /// generation.
    pub(crate) fn begin_record(&self) -> u64 {
        let mut state = lock(&self.marks.state);
        state.recorded += 1;
        state.recorded
    }

    /// The latest record's generation (0: never recorded).
    pub(crate) fn latest(&self) -> u64 {
        lock(&self.marks.state).recorded
    }

    /// The latest record has completed (or there is none).
    pub(crate) fn is_complete(&self) -> bool {
        let state = lock(&self.marks.state);
        state.completed >= state.recorded
    }

    /// Waits for the latest record.
    pub(crate) fn wait(&self) {
        let target = self.latest();
        self.marks.wait_for(target);
    }

    /// When the latest record completed; `None` if never recorded or not
    /// complete yet.
    pub(crate) fn completed_at(&self) -> Option<Instant> {
        let state = lock(&self.marks.state);
        if state.recorded > 0 && state.completed >= state.recorded {
            state.completed_at
        } else {
            None
        }
    }
}

impl EventMarks {
    /// Marks `generation` complete, now (an older record finishing late on
    /// another stream changes nothing).
    pub(crate) fn complete(&self, generation: u64) {
        let mut state = lock(&self.state);
        if generation > state.completed {
            state.completed = generation;
            state.completed_at = Some(Instant::now());
        }
        drop(state);
        self.reached.notify_all();
    }

    /// Waits until `generation` (or a later one) has completed.
    pub(crate) fn wait_for(&self, generation: u64) {
        let state = lock(&self.state);
        drop(wait_while(&self.reached, state, |s| {
            s.completed < generation
        }));
    }
}

impl fmt::Debug for CpuEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = lock(&self.marks.state);
        write!(
            f,
            "CpuEvent(recorded {}, completed {})",
            state.recorded, state.completed
        )
    }
}

#[cfg(test)]
mod tests {
    use std::{
        sync::{atomic::AtomicU32, mpsc},
        thread,
        time::Duration,
    };

    use tensorwasm_core::{DriverError, ErrorKind, GpuDriver};

    use super::*;
    use crate::{CpuDriver, CpuStream, sync::Ordering, testing::driver};

    /// Queues a callback that holds the stream until the returned sender is used.
    fn gate(d: &CpuDriver, stream: &CpuStream) -> mpsc::Sender<()> {
        let (open, wait) = mpsc::channel::<()>();
        d.on_complete(
            stream,
            Box::new(move || {
                let _ = wait.recv();
            }),
        )
        .unwrap();
        open
    }

    #[test]
    fn unrecorded_events_are_complete_but_have_no_time() {
        let d = driver(1 << 20);
        let a = d.create_event().unwrap();
        let b = d.create_event().unwrap();
        assert!(d.event_query(&a).unwrap());
        d.event_synchronize(&a).unwrap();
        let err = d.event_elapsed_ms(&a, &b).unwrap_err();
        assert_eq!(
            (err.kind(), err.op()),
            (ErrorKind::InvalidArgument, "event_elapsed_ms")
        );
    }

    #[test]
    fn query_follows_the_latest_record() {
        let d = driver(1 << 20);
        let stream = d.create_stream().unwrap();
        let event = d.create_event().unwrap();
        let done = d.create_event().unwrap();
        d.record_event(&done, &stream).unwrap();
        d.event_synchronize(&done).unwrap();
        let open = gate(&d, &stream);
        d.record_event(&event, &stream).unwrap();
        assert!(!d.event_query(&event).unwrap());
        let err = d.event_elapsed_ms(&done, &event).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);
        open.send(()).unwrap();
        d.event_synchronize(&event).unwrap();
        assert!(d.event_query(&event).unwrap());
        // Re-recording makes the event pending again.
        let open = gate(&d, &stream);
        d.record_event(&event, &stream).unwrap();
        assert!(!d.event_query(&event).unwrap());
        open.send(()).unwrap();
        d.event_synchronize(&event).unwrap();
        assert!(d.event_query(&event).unwrap());
    }

    #[test]
    fn elapsed_time_spans_the_work_between_records() {
        let d = driver(1 << 20);
        let stream = d.create_stream().unwrap();
        let (start, end) = (d.create_event().unwrap(), d.create_event().unwrap());
        d.record_event(&start, &stream).unwrap();
        d.on_complete(
            &stream,
            Box::new(|| thread::sleep(Duration::from_millis(25))),
        )
        .unwrap();
        d.record_event(&end, &stream).unwrap();
        d.event_synchronize(&end).unwrap();
        let ms = d.event_elapsed_ms(&start, &end).unwrap();
        assert!((20.0..5000.0).contains(&ms), "{ms} ms");
        assert!(d.event_elapsed_ms(&end, &start).unwrap() < 0.0);
    }

    #[test]
    fn streams_wait_for_events_of_other_streams() {
        let d = driver(1 << 20);
        let producer = d.create_stream().unwrap();
        let consumer = d.create_stream().unwrap();
        let event = d.create_event().unwrap();
        let value = Arc::new(AtomicU32::new(0));
        let seen = Arc::new(AtomicU32::new(0));
        let open = gate(&d, &producer);
        let write = Arc::clone(&value);
        d.on_complete(
            &producer,
            Box::new(move || write.store(7, Ordering::SeqCst)),
        )
        .unwrap();
        d.record_event(&event, &producer).unwrap();
        d.stream_wait_event(&consumer, &event).unwrap();
        // A record after the wait must not be waited for.
        let (read, out) = (Arc::clone(&value), Arc::clone(&seen));
        d.on_complete(
            &consumer,
            Box::new(move || out.store(read.load(Ordering::SeqCst), Ordering::SeqCst)),
        )
        .unwrap();
        thread::sleep(Duration::from_millis(10));
        assert_eq!(seen.load(Ordering::SeqCst), 0);
        open.send(()).unwrap();
        d.stream_synchronize(&consumer).unwrap();
        assert_eq!(seen.load(Ordering::SeqCst), 7);
        // Waiting on a never-recorded event queues nothing that blocks.
        let idle = d.create_event().unwrap();
        d.stream_wait_event(&consumer, &idle).unwrap();
        d.synchronize().unwrap();
    }
}
