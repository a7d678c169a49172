//! The benchmarks' harness, which each bench includes with `mod common;`,
//! so that a bench file reads as the list of what it measures:
//!
//! - [`record`]: the JSON record (`serde_json`) and what every record
//!   names: the device, the command line, the time, rounded numbers;
//! - [`stats`]: medians, percentiles, extremes;
//! - [`timing`]: launches timed with events, durations, the process's CPU
//!   time;
//! - [`inputs`]: seeds and the seeded random inputs;
//! - [`check`]: outputs checked, on all cores;
//! - [`rows`]: measurement rows with ratios and goals, their table and
//!   their form in a record;
//! - [`baseline`]: the raw CUDA driver, the side a guest is compared with;
//! - [`guest`]: an instance of a bench guest and its thin `wasi_cuda`
//!   exports;
//! - [`kernels`]: Wasm and built-in kernels launched with the raw driver;
//!
//! and [`main_on_device`], a bench's `main`. `launch_sequence.rs` and
//! `wasm_reference.rs` are not declared here: the one bench that needs them
//! (foreign_kernels) includes them by path.

// Every bench includes this module and uses only part of it.
#![allow(dead_code)]

pub mod baseline;
pub mod check;
pub mod guest;
pub mod inputs;
pub mod kernels;
pub mod record;
pub mod rows;
pub mod stats;
pub mod timing;

use std::process::ExitCode;

use tensorwasm_cuda::CudaDriver;

// What most benches (and cli's serve_load) take by these names.
#[allow(unused_imports)]
pub use record::{
    DeviceRecord, Target, command_line, driver_version, ordered_object, record_json, round,
    rounded, utc_timestamp, write_record,
};
#[allow(unused_imports)]
pub use stats::{max_of, percentile};

/// What a bench does when device 0 does not open.
#[derive(Clone, Copy, Debug)]
pub enum NoDevice {
    /// Says so on stdout and exits 0: nothing to measure is no failure.
    Skip,
    /// Says so on stderr and exits 2, for a caller that needs the numbers.
    Fail,
}

/// A bench's `main`: `run` on CUDA device 0. Exits 0 when it succeeds, 1
/// with its error on stderr when it fails, and as `no_device` says when
/// there is no device; every message starts with `bench`.
pub fn main_on_device(
    bench: &str,
    no_device: NoDevice,
    run: impl FnOnce(&CudaDriver) -> Result<(), String>,
) -> ExitCode {
    let driver = match CudaDriver::new(0) {
        Ok(d) => d,
        Err(e) => {
            let message = format!("{bench}: no CUDA device ({e}); nothing measured");
            return match no_device {
                NoDevice::Skip => {
                    println!("{message}");
                    ExitCode::SUCCESS
                }
                NoDevice::Fail => {
                    eprintln!("{message}");
                    ExitCode::from(2)
                }
            };
        }
    };
    match run(&driver) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{bench}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// What a bench's steps return: the value, or what went wrong, said for a
/// person.
pub type BenchResult<T> = Result<T, String>;
