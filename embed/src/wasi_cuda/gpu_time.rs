//! GPU time of a guest's launches, for a host that reports it
//! ([`GuestStats::gpu_seconds`]): events recorded on the guest's stream
//! around its launches, and the time between each pair added up once both
//! have completed.
//!
//! A launch queued while the stream is still busy with the guest's earlier
//! work starts as soon as that work ends, so it extends the open span (its
//! end event is recorded again) instead of opening a new one: a busy stream
//! costs one event record per launch, an idle one two, and the spans never
//! count the time the stream stood idle between them. What is measured is
//! the time the guest's kernels occupied its stream, not their share of the
//! SMs: two tenants' kernels running side by side each count in full.

use std::collections::VecDeque;

use tensorwasm_core::GpuDriver;

use super::stats::GuestStats;

/// Spans kept open at most; past it the newest one is extended whatever
/// its state, so a guest that never waits holds a bounded number of events.
const MAX_SPANS: usize = 64;

/// A start and an end event on the guest's stream.
struct Span<D: GpuDriver> {
    start: D::Event,
    end: D::Event,
}

/// The spans of one guest context.
pub(crate) struct GpuClock<D: GpuDriver> {
    open: VecDeque<Span<D>>,
    spare: Vec<Span<D>>,
    stats: GuestStats,
}

impl<D: GpuDriver> GpuClock<D> {
    /// A clock that adds to `stats.gpu_seconds`.
    pub(crate) fn new(stats: GuestStats) -> Self {
        GpuClock {
            open: VecDeque::new(),
            spare: Vec::new(),
            stats,
        }
    }

    /// Before a launch on `stream`: opens a span unless the newest one is
    /// still running (then the launch extends it). Errors of the driver only
    /// cost the measurement, never the launch.
    pub(crate) fn before_launch(&mut self, driver: &D, stream: &D::Stream) {
        self.collect(driver);
        if let Some(newest) = self.open.back()
            && (self.open.len() >= MAX_SPANS || !driver.event_query(&newest.end).unwrap_or(true))
        {
            return;
        }
        let span = match self.spare.pop() {
            Some(span) => span,
            None => match (driver.create_event(), driver.create_event()) {
                (Ok(start), Ok(end)) => Span { start, end },
                _ => return,
            },
        };
        if driver.record_event(&span.start, stream).is_ok() {
            self.open.push_back(span);
        } else {
            self.spare.push(span);
        }
    }

    /// After a launch on `stream` (queued or not): the newest span ends
    /// after it.
    pub(crate) fn after_launch(&mut self, driver: &D, stream: &D::Stream) {
        if let Some(newest) = self.open.back()
            && driver.record_event(&newest.end, stream).is_err()
        {
            // A span without its end would never complete: drop it.
            if let Some(span) = self.open.pop_back() {
                self.spare.push(span);
            }
        }
    }

    /// Adds the spans that have completed, oldest first, to the counter.
    pub(crate) fn collect(&mut self, driver: &D) {
        while let Some(oldest) = self.open.front() {
            match driver.event_query(&oldest.end) {
                Ok(true) => {}
                Ok(false) => break,
                Err(_) => {
                    // The stream failed: nothing on it will be timed.
                    self.spare.extend(self.open.drain(..));
                    break;
                }
            }
            if let Ok(ms) = driver.event_elapsed_ms(&oldest.start, &oldest.end)
                && ms > 0.0
            {
                self.stats.gpu_seconds.inc_by(f64::from(ms) / 1e3);
            }
            if let Some(span) = self.open.pop_front() {
                self.spare.push(span);
            }
        }
    }
}
