//! Sequences of launches as one measured unit, for a bench whose one run
//! of a program is many launches (a time-stepped stencil, an LU
//! factorisation): queued in order and timed between two events, each
//! sample after its inputs are reset; and the host-side rate of launching
//! one small kernel many times. Generic over the driver, like
//! [`crate::common::kernels`], whose [`Launch`] it queues.
//!
//! Not declared in `common/mod.rs` (its owner is moving the harness into
//! it): a bench includes it with `#[path = "common/launch_sequence.rs"]`.

use std::time::Instant;

use tensorwasm_core::GpuDriver;

use crate::common::kernels::Launch;

/// Queues `launch` on `stream`.
pub fn queue<D: GpuDriver>(
    d: &D,
    stream: &D::Stream,
    launch: &Launch<'_, D>,
) -> Result<(), String> {
    // SAFETY: every pointer parameter is in a device buffer the caller
    // keeps alive until it synchronizes the stream (every function here
    // does before it returns), and the parameters follow the kernel's
    // signature (the translated kernel's ABI, or the twin's).
    unsafe { d.launch(stream, launch.function, &launch.config, &launch.params) }
        .map_err(|e| e.to_string())
}

/// Queues every launch of `sequence` in order and waits for the last.
pub fn run<D: GpuDriver>(
    d: &D,
    stream: &D::Stream,
    sequence: &[Launch<'_, D>],
) -> Result<(), String> {
    for launch in sequence {
        queue(d, stream, launch)?;
    }
    d.stream_synchronize(stream).map_err(|e| e.to_string())
}

/// How [`time`] samples a sequence.
#[derive(Clone, Copy, Debug)]
pub struct SequenceRepeats {
    /// Untimed runs first (each after a reset).
    pub warmup: usize,
    /// Timed samples.
    pub samples: usize,
    /// Runs of the whole sequence per sample, back to back after one
    /// reset (1 unless a run from the previous run's output is as good as
    /// one from fresh inputs).
    pub runs: usize,
}

/// The milliseconds per run of `sequence` in each sample: `reset()` (not
/// timed; it writes the inputs, synchronously), then `runs` runs between
/// two events.
pub fn time<D: GpuDriver>(
    d: &D,
    stream: &D::Stream,
    sequence: &[Launch<'_, D>],
    repeats: SequenceRepeats,
    mut reset: impl FnMut() -> Result<(), String>,
) -> Result<Vec<f64>, String> {
    for _ in 0..repeats.warmup {
        reset()?;
        run(d, stream, sequence)?;
    }
    let (start, end) = (
        d.create_event().map_err(|e| e.to_string())?,
        d.create_event().map_err(|e| e.to_string())?,
    );
    let mut samples = Vec::with_capacity(repeats.samples);
    for _ in 0..repeats.samples {
        reset()?;
        d.stream_synchronize(stream).map_err(|e| e.to_string())?;
        d.record_event(&start, stream).map_err(|e| e.to_string())?;
        for _ in 0..repeats.runs {
            for launch in sequence {
                queue(d, stream, launch)?;
            }
        }
        d.record_event(&end, stream).map_err(|e| e.to_string())?;
        d.event_synchronize(&end).map_err(|e| e.to_string())?;
        let ms = d
            .event_elapsed_ms(&start, &end)
            .map_err(|e| e.to_string())?;
        samples.push(f64::from(ms) / repeats.runs as f64);
    }
    Ok(samples)
}

/// Microseconds per launch of one kernel launched many times, on the host's
/// clock, launch to completion: one sample per entry.
#[derive(Debug, Default)]
pub struct LaunchRate {
    /// `count` launches queued back to back, then one synchronize: the
    /// wall time over `count` (the launch path's throughput).
    pub back_to_back_us: Vec<f64>,
    /// `count` launches, each waited for (synchronize) before the next:
    /// the wall time over `count` (launch latency to completion).
    pub each_waited_us: Vec<f64>,
}

/// [`LaunchRate`] of `launch`: `samples` samples of `count` launches each
/// way, after `count` untimed ones.
pub fn launch_rate<D: GpuDriver>(
    d: &D,
    stream: &D::Stream,
    launch: &Launch<'_, D>,
    count: usize,
    samples: usize,
) -> Result<LaunchRate, String> {
    let sync = || d.stream_synchronize(stream).map_err(|e| e.to_string());
    for _ in 0..count {
        queue(d, stream, launch)?;
    }
    sync()?;
    let mut rate = LaunchRate::default();
    for _ in 0..samples {
        let start = Instant::now();
        for _ in 0..count {
            queue(d, stream, launch)?;
        }
        sync()?;
        rate.back_to_back_us
            .push(start.elapsed().as_secs_f64() * 1e6 / count as f64);
        let start = Instant::now();
        for _ in 0..count {
            queue(d, stream, launch)?;
            sync()?;
        }
        rate.each_waited_us
            .push(start.elapsed().as_secs_f64() * 1e6 / count as f64);
    }
    Ok(rate)
}

/// The geometric mean of `xs` (NaN when empty or when one is not positive).
pub fn geometric_mean(xs: &[f64]) -> f64 {
    if xs.is_empty() || xs.iter().any(|&x| x <= 0.0 || x.is_nan()) {
        return f64::NAN;
    }
    (xs.iter().map(|x| x.ln()).sum::<f64>() / xs.len() as f64).exp()
}
