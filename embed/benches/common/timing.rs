//! Timing: launches timed between two of the driver's events, host
//! durations in the units the records use, and the process's CPU time.

use std::time::Duration;

use tensorwasm_core::GpuDriver;

use super::kernels::Launch;

/// How many launches [`time`] makes.
#[derive(Clone, Copy, Debug)]
pub struct Repeats {
    /// Untimed launches first.
    pub warmup: usize,
    /// Samples.
    pub samples: usize,
    /// Back-to-back launches per sample.
    pub launches: usize,
}

/// The milliseconds per launch of each sample: `launches` back-to-back
/// launches between two events, after the warm-up.
pub fn time<D: GpuDriver>(
    d: &D,
    stream: &D::Stream,
    launch: &Launch<'_, D>,
    repeats: Repeats,
) -> Result<Vec<f64>, String> {
    let queue = || {
        // SAFETY: every pointer parameter is in a device buffer the caller
        // keeps alive and the parameters follow the kernel's signature (as
        // for `kernels::run_once`); the event synchronize below waits for
        // every launch before the caller may free anything.
        unsafe { d.launch(stream, launch.function, &launch.config, &launch.params) }
            .map_err(|e| e.to_string())
    };
    for _ in 0..repeats.warmup {
        queue()?;
    }
    d.stream_synchronize(stream).map_err(|e| e.to_string())?;
    let (start, end) = (
        d.create_event().map_err(|e| e.to_string())?,
        d.create_event().map_err(|e| e.to_string())?,
    );
    let mut samples = Vec::with_capacity(repeats.samples);
    for _ in 0..repeats.samples {
        d.record_event(&start, stream).map_err(|e| e.to_string())?;
        for _ in 0..repeats.launches {
            queue()?;
        }
        d.record_event(&end, stream).map_err(|e| e.to_string())?;
        d.event_synchronize(&end).map_err(|e| e.to_string())?;
        let ms = d
            .event_elapsed_ms(&start, &end)
            .map_err(|e| e.to_string())?;
        samples.push(f64::from(ms) / repeats.launches as f64);
    }
    Ok(samples)
}

/// `d` in microseconds.
pub fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// `d` in milliseconds.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The process's CPU time used since `before` (a [`process_cpu_time`]),
/// or `None` where it is not measured.
pub fn cpu_time_since(before: Option<Duration>) -> Option<Duration> {
    before
        .zip(process_cpu_time())
        .map(|(a, b)| b.saturating_sub(a))
}

/// The process's CPU time, user + system, all threads (the driver's
/// callback thread included): `getrusage(RUSAGE_SELF)`.
#[cfg(unix)]
pub fn process_cpu_time() -> Option<Duration> {
    // SAFETY: `rusage` is plain data, for which all zeros is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a writable `struct rusage`; getrusage only writes it.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return None;
    }
    let time = |tv: libc::timeval| {
        Duration::from_secs(tv.tv_sec.max(0) as u64)
            + Duration::from_micros(tv.tv_usec.max(0) as u64)
    };
    Some(time(usage.ru_utime) + time(usage.ru_stime))
}

/// Not measured off Unix: the CPU columns stay empty.
#[cfg(not(unix))]
pub fn process_cpu_time() -> Option<Duration> {
    None
}
