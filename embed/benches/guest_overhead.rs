//! What a Wasm guest pays over raw CUDA driver calls, measured side by side
//! in one process on device 0's primary context:
//!
//! 1. launch overhead: host time per launch call, guest `launch` against a
//!    raw `cuLaunchKernel` (and `cuLaunchKernel` + `cuLaunchHostFunc`, which
//!    is what the guest's launch queues), empty kernel;
//! 2. latency from launch to the wait returning, guest `launch` + `wait`
//!    (the default, adaptive wait; always spinning up to 50 µs first; never
//!    spinning) against three raw ways to wait, on an empty and on a 10 ms
//!    kernel, with the process's CPU use while it waits; and the CPU of 64
//!    guests waiting at once, each on a 10 ms kernel;
//! 3. vector-add bandwidth over the guest's linear memory (managed memory)
//!    against three `cuMemAlloc` buffers.
//!
//! The raw side calls `tensorwasm_cuda::sys` directly, as a C program would
//! (`common::baseline`); the guest side runs `guest_overhead.wat` through
//! [`GuestRuntime`] (`common::guest`). Prints a table and writes every
//! sample to `$OUT/guest_overhead.json` (or `./guest_overhead.json`). Run
//! with `cargo bench -p tensorwasm-embed --bench guest_overhead`; see
//! `docs/benchmarks/README.md`.
//!
//! Environment: `OUT` (where the JSON goes), `GUEST_OVERHEAD_SEED` (the seed
//! of the random inputs, decimal or `0x` hex; printed either way),
//! `TENSORWASM_LIBCUDA` (the driver library, for both sides).

mod common;

use common::{
    BenchResult, DeviceRecord, NoDevice,
    baseline::{RawCuda, RawKernel},
    command_line, driver_version,
    guest::{
        GUEST_DATA, GuestInstance, GuestKernel, OwnExports, PrefetchTo, export, guest_i32,
        timed_call, wasm_error,
    },
    inputs::{f32_at, one_to_two, seed, splitmix64},
    main_on_device,
    rows::{Column, Row, RowFields, RowRecord},
    stats::median,
    timing::{cpu_time_since, process_cpu_time, us},
    utc_timestamp,
};
use serde::Serialize;
use std::{
    process::ExitCode,
    time::{Duration, Instant},
};

use tensorwasm_core::{GpuDriver, abi::ArgDescriptor};
use tensorwasm_cuda::CudaDriver;
use tensorwasm_embed::{
    runtime::{GuestRuntime, GuestState},
    wasi_cuda::WaitPolicy,
    wasmtime::{Instance, Store, TypedFunc},
};

/// The bench guest (thin exports over the `wasi_cuda` imports).
const GUEST_WAT: &str = include_str!("guest_overhead.wat");
/// `empty()`: does nothing.
const EMPTY_PTX: &str = include_str!("../../kernels/bench/empty.ptx");
/// `spin(ns)`: returns after `ns` nanoseconds of `%globaltimer`.
const SPIN_PTX: &str = include_str!("../../kernels/bench/spin.ptx");
/// `vadd(a, b, c, n)`: `c[i] = a[i] + b[i]`.
const VADD_PTX: &str = include_str!("../../kernels/test/vector_add.ptx");

/// Launches per timed batch in the launch-overhead measurement.
const LAUNCH_BATCH: usize = 256;
/// Timed batches per method.
const LAUNCH_BATCHES: usize = 200;
/// Untimed batches per method before them.
const LAUNCH_WARMUP_BATCHES: usize = 20;
/// Timed launch-to-wait round trips per method, empty kernel.
const LATENCY_ITERS: usize = 2000;
/// Untimed round trips per method before them.
const LATENCY_WARMUP: usize = 200;
/// How long the spin kernel runs.
const SPIN_NS: u64 = 10_000_000;
/// Timed round trips per method, spin kernel.
const SPIN_ITERS: usize = 30;
/// Untimed round trips per method before them.
const SPIN_WARMUP: usize = 3;
/// The sleep between two `cuEventQuery` calls of the sleep-poll waiter.
const SLEEP_POLL: Duration = Duration::from_micros(50);
/// Elements per vector of the vector add (64 Mi floats: 256 MiB a vector).
const VADD_N: usize = 64 << 20;
/// Threads per block of the vector add.
const VADD_BLOCK: u32 = 256;
/// Timed vector-add launches per repetition (then one sync, also timed).
const VADD_LAUNCHES: usize = 20;
/// Repetitions of the vector-add measurement; the median is reported.
const VADD_REPS: usize = 5;
/// The guest's memory limit: 1 GiB of managed memory, reserved lazily.
const GUEST_MEMORY_LIMIT: usize = 1 << 30;

/// Where each kernel's argument descriptors go in guest memory (below
/// `common::guest`'s name, PTX and data).
const GUEST_ARGS_EMPTY: u32 = 256;
const GUEST_ARGS_SPIN: u32 = 320;
const GUEST_ARGS_VADD: u32 = 384;

fn main() -> ExitCode {
    main_on_device("guest_overhead", NoDevice::Fail, run)
}

fn run(driver: &CudaDriver) -> BenchResult<()> {
    let seed = seed("GUEST_OVERHEAD_SEED")?;
    let info = driver.device().clone();
    let command = command_line();
    let date = utc_timestamp();
    let driver_version = driver_version(&info);
    println!(
        "guest_overhead on {} (driver {driver_version}), {date}",
        info.name
    );
    println!("command: {command}");
    println!("seed of the random inputs: {seed:#x} (set GUEST_OVERHEAD_SEED to repeat)");

    let mut raw = RawCuda::open()?;
    let runtime = GuestRuntime::new(driver.clone(), GUEST_MEMORY_LIMIT)
        .map_err(|e| format!("building the guest runtime: {e:#}"))?;
    let rows = futures::executor::block_on(async {
        let mut guest = Guest::compile_new(&runtime).await?;
        let mut rows = Vec::new();
        println!("measuring launch overhead...");
        rows.extend(launch_overhead(&mut raw, &mut guest).await?);
        println!("measuring wait latency...");
        rows.extend(wait_latency(&mut raw, &mut guest, &runtime).await?);
        println!("measuring {MANY_GUESTS} guests waiting at once...");
        rows.push(many_waiting(&runtime).await?);
        println!("measuring vector-add bandwidth...");
        rows.extend(bandwidth(&mut raw, &mut guest, seed).await?);
        BenchResult::Ok(rows)
        // The guest (its memory, modules, stream) is dropped here.
    })?;
    drop(raw);

    println!();
    print!("{}", table(&rows));
    let path = common::write_record(
        "guest_overhead.json",
        &Record::new(&rows, &info, date, command, seed),
    )?;
    println!("raw numbers: {}", path.display());
    Ok(())
}

// ---------------------------------------------------------------------------
// The guest side.

/// One instance of `guest_overhead.wat`.
type Guest = GuestInstance<OverheadExports>;

/// `guest_overhead.wat`'s own exports.
struct OverheadExports {
    launch_wait: TypedFunc<(i64, i32, i32, i32, i32), i32>,
    host_calls: TypedFunc<i32, i32>,
}

impl OwnExports for OverheadExports {
    fn look_up(
        instance: &Instance,
        store: &mut Store<GuestState<CudaDriver>>,
    ) -> BenchResult<OverheadExports> {
        Ok(OverheadExports {
            launch_wait: export(instance, store, "launch_wait")?,
            host_calls: export(instance, store, "host_calls")?,
        })
    }
}

impl Guest {
    /// A fresh instance, in a store of its own.
    async fn compile_new(runtime: &GuestRuntime<CudaDriver>) -> BenchResult<Guest> {
        let module = runtime
            .compile(GUEST_WAT)
            .map_err(wasm_error("compiling guest_overhead.wat"))?;
        Guest::new(runtime, &module).await
    }

    /// One launch of `kernel` and its wait in one export call; the call's time.
    async fn launch_wait(&mut self, kernel: GuestKernel) -> BenchResult<Duration> {
        let params = (
            kernel.function,
            1,
            1,
            kernel.args_ptr as i32,
            kernel.args_count as i32,
        );
        let (result, elapsed) = timed_call(&self.own.launch_wait, &mut self.store, params).await;
        self.check("launch_wait", result)?;
        Ok(elapsed)
    }

    /// `k` no-op import calls in one export call; the call's time.
    async fn host_calls(&mut self, k: usize) -> BenchResult<Duration> {
        let k = guest_i32(k, "call count")?;
        let (result, elapsed) = timed_call(&self.own.host_calls, &mut self.store, k).await;
        self.check("host_calls", result)?;
        Ok(elapsed)
    }
}

// ---------------------------------------------------------------------------
// Measurements.

/// (1) Host time per launch call, in batches of [`LAUNCH_BATCH`] launches
/// not waited for; the stream is synchronized after each batch, untimed.
/// The methods take turns batch by batch, so drift hits them alike.
async fn launch_overhead(raw: &mut RawCuda, guest: &mut Guest) -> BenchResult<Vec<Row>> {
    let mut raw_empty = RawKernel::new(raw.load(EMPTY_PTX, "empty")?, &[]);
    let guest_empty = guest
        .load(EMPTY_PTX, "empty", GUEST_ARGS_EMPTY, &[])
        .await?;
    // The safe layer the guest path goes through: `CudaDriver::launch`
    // (geometry and parameter checks, context binding, cuLaunchKernel).
    let driver = guest.store.data().cuda.driver().clone();
    fn driver_err(what: &'static str) -> impl Fn(tensorwasm_cuda::CudaError) -> String {
        move |e| format!("{what}: {e}")
    }
    let safe_module = driver
        .load_ptx(EMPTY_PTX)
        .map_err(driver_err("loading the empty kernel"))?;
    let safe_function = driver
        .function(&safe_module, "empty")
        .map_err(driver_err("finding `empty`"))?;
    let safe_stream = driver
        .create_stream()
        .map_err(driver_err("creating a stream"))?;
    let one = tensorwasm_core::LaunchConfig {
        grid: tensorwasm_core::Dim3::linear(1),
        block: tensorwasm_core::Dim3::linear(1),
        shared_mem_bytes: 0,
    };
    let per_call = |d: Duration| us(d) / LAUNCH_BATCH as f64;
    let (mut launch, mut launch_host_func, mut guest_launch, mut host_call) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut safe_launch = Vec::new();
    for batch in 0..LAUNCH_WARMUP_BATCHES + LAUNCH_BATCHES {
        let keep = batch >= LAUNCH_WARMUP_BATCHES;

        let start = Instant::now();
        for _ in 0..LAUNCH_BATCH {
            // SAFETY: `empty` takes no parameters and touches nothing.
            unsafe { raw.launch(&mut raw_empty, 1, 1) }?;
        }
        let elapsed = start.elapsed();
        raw.synchronize()?;
        if keep {
            launch.push(per_call(elapsed));
        }

        let start = Instant::now();
        for _ in 0..LAUNCH_BATCH {
            // SAFETY: as above.
            unsafe { raw.launch(&mut raw_empty, 1, 1) }?;
            raw.host_func()?;
        }
        let elapsed = start.elapsed();
        raw.synchronize()?;
        if keep {
            launch_host_func.push(per_call(elapsed));
        }

        let start = Instant::now();
        for _ in 0..LAUNCH_BATCH {
            // SAFETY: `empty` takes no parameters and touches nothing.
            unsafe { driver.launch(&safe_stream, &safe_function, &one, &[]) }
                .map_err(driver_err("CudaDriver::launch"))?;
        }
        let elapsed = start.elapsed();
        driver
            .stream_synchronize(&safe_stream)
            .map_err(driver_err("stream_synchronize"))?;
        if keep {
            safe_launch.push(per_call(elapsed));
        }

        let elapsed = guest.launch_many(guest_empty, LAUNCH_BATCH, 1, 1).await?;
        guest.sync().await?;
        if keep {
            guest_launch.push(per_call(elapsed));
        }

        let elapsed = guest.host_calls(LAUNCH_BATCH).await?;
        if keep {
            host_call.push(per_call(elapsed));
        }
    }
    let raw_median = median(&launch);
    let guest_median = median(&guest_launch);
    let ratio = guest_median / raw_median;
    Ok(vec![
        Row::new("launch.raw", "launch: raw cuLaunchKernel", "us", launch),
        Row::new(
            "launch.raw_host_func",
            "launch: raw cuLaunchKernel + cuLaunchHostFunc",
            "us",
            launch_host_func,
        )
        .ratio_to("launch.raw", raw_median),
        Row::new(
            "launch.safe_layer",
            "launch: CudaDriver::launch (safe layer)",
            "us",
            safe_launch,
        )
        .ratio_to("launch.raw", raw_median),
        Row::new(
            "launch.guest",
            "launch: guest launch (Wasm call / launches)",
            "us",
            guest_launch,
        )
        .ratio_to("launch.raw", raw_median)
        .target("<= 1.2x raw", ratio <= 1.2),
        Row::new(
            "launch.guest_noop_import",
            "import call: guest device_count (no-op)",
            "us",
            host_call,
        ),
    ])
}

/// How a round trip waits for its launch.
#[derive(Clone, Copy)]
enum Wait {
    /// The guest's `launch` + `wait`, one export call, with the default
    /// wait policy (`WaitPolicy::Adaptive`).
    Guest,
    /// `cuEventRecord`, then `cuEventQuery` in a busy loop.
    Spin,
    /// `cuStreamSynchronize`.
    StreamSync,
    /// `cuEventRecord`, then `cuEventQuery` with a sleep between queries.
    SleepPoll,
    /// The guest's `launch` + `wait` with a spin budget every time
    /// (`WaitPolicy::Spin`) before the completion callback.
    GuestSpin,
    /// The guest's `launch` + `wait` that never spins
    /// (`WaitPolicy::Suspend`: the callback only).
    GuestSuspend,
}

/// The spin budget of [`Wait::GuestSpin`].
const GUEST_WAIT_SPIN: Duration = Duration::from_micros(50);

const WAITS: [Wait; 6] = [
    Wait::Guest,
    Wait::Spin,
    Wait::StreamSync,
    Wait::SleepPoll,
    Wait::GuestSpin,
    Wait::GuestSuspend,
];

impl Wait {
    fn id(self) -> &'static str {
        match self {
            Wait::Guest => "guest",
            Wait::Spin => "raw_spin",
            Wait::StreamSync => "raw_stream_sync",
            Wait::SleepPoll => "raw_sleep_poll",
            Wait::GuestSpin => "guest_spin50",
            Wait::GuestSuspend => "guest_suspend",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Wait::Guest => "guest launch+wait",
            Wait::Spin => "raw launch + cuEventQuery spin",
            Wait::StreamSync => "raw launch + cuStreamSynchronize",
            Wait::SleepPoll => "raw launch + cuEventQuery/sleep(50us)",
            Wait::GuestSpin => "guest launch+wait, spin <= 50us first",
            Wait::GuestSuspend => "guest launch+wait, callback only",
        }
    }
}

/// The guests of the guest rows, each with its own store, stream and wait
/// policy, and its copy of the kernel a case launches: `[default, spin,
/// suspend]`.
type PolicyGuests<'g> = [(&'g mut Guest, GuestKernel); 3];

/// One round trip: wall time from before the launch to the wait's return,
/// and the process's CPU time over the same span.
async fn round_trip(
    wait: Wait,
    raw: &RawCuda,
    raw_kernel: &mut RawKernel,
    guests: &mut PolicyGuests<'_>,
) -> BenchResult<(Duration, Option<Duration>)> {
    let cpu_before = process_cpu_time();
    let elapsed = match wait {
        Wait::Guest | Wait::GuestSpin | Wait::GuestSuspend => {
            let (guest, kernel) = &mut guests[match wait {
                Wait::Guest => 0,
                Wait::GuestSpin => 1,
                _ => 2,
            }];
            guest.launch_wait(*kernel).await?
        }
        Wait::Spin | Wait::StreamSync | Wait::SleepPoll => {
            let start = Instant::now();
            // SAFETY: `empty` touches nothing; `spin` reads only its
            // parameter.
            unsafe { raw.launch(raw_kernel, 1, 1) }?;
            match wait {
                Wait::Spin => {
                    raw.record()?;
                    while !raw.query()? {}
                }
                Wait::SleepPoll => {
                    raw.record()?;
                    while !raw.query()? {
                        std::thread::sleep(SLEEP_POLL);
                    }
                }
                _ => raw.synchronize()?,
            }
            start.elapsed()
        }
    };
    Ok((elapsed, cpu_time_since(cpu_before)))
}

/// The samples of one wait method.
#[derive(Default)]
struct WaitSamples {
    latency_us: Vec<f64>,
    cpu_us: Vec<f64>,
}

/// (2) Launch-to-wait latency, empty kernel then the 10 ms spin kernel; the
/// methods take turns round trip by round trip. The default-policy rows
/// are `guest`'s; the fixed policies get guests of their own (so the
/// adaptive wait's state is its own stream's).
async fn wait_latency(
    raw: &mut RawCuda,
    guest: &mut Guest,
    runtime: &GuestRuntime<CudaDriver>,
) -> BenchResult<Vec<Row>> {
    let mut raw_empty = RawKernel::new(raw.load(EMPTY_PTX, "empty")?, &[]);
    let mut raw_spin = RawKernel::new(raw.load(SPIN_PTX, "spin")?, &[SPIN_NS]);
    let spin_arg = [ArgDescriptor::i64(SPIN_NS as i64)];
    let mut spinning = Guest::compile_new(runtime).await?;
    spinning
        .store
        .data_mut()
        .cuda
        .set_wait_policy(WaitPolicy::Spin(GUEST_WAIT_SPIN));
    let mut suspending = Guest::compile_new(runtime).await?;
    suspending
        .store
        .data_mut()
        .cuda
        .set_wait_policy(WaitPolicy::Suspend);
    let mut kernels = Vec::new();
    for g in [&mut *guest, &mut spinning, &mut suspending] {
        let empty = g.load(EMPTY_PTX, "empty", GUEST_ARGS_EMPTY, &[]).await?;
        let spin = g.load(SPIN_PTX, "spin", GUEST_ARGS_SPIN, &spin_arg).await?;
        kernels.push((empty, spin));
    }

    // What entering and leaving the guest costs by itself: `call_async` of
    // an export that returns at once (part of every guest row below).
    let mut call_us = Vec::new();
    for i in 0..LATENCY_WARMUP + LATENCY_ITERS {
        let elapsed = guest.host_calls(0).await?;
        if i >= LATENCY_WARMUP {
            call_us.push(us(elapsed));
        }
    }
    let mut rows = vec![
        Row::new(
            "latency.call_async_empty".to_string(),
            "call_async of an export that returns at once".to_string(),
            "us",
            call_us,
        )
        .with_p99(),
    ];
    let cases: [(&str, &str, usize, usize, &mut RawKernel, bool); 2] = [
        (
            "empty",
            "empty kernel",
            LATENCY_WARMUP,
            LATENCY_ITERS,
            &mut raw_empty,
            false,
        ),
        (
            "spin_10ms",
            "10 ms kernel",
            SPIN_WARMUP,
            SPIN_ITERS,
            &mut raw_spin,
            true,
        ),
    ];
    for (case, label, warmup, iters, raw_kernel, long) in cases {
        let pick = |k: &(GuestKernel, GuestKernel)| if long { k.1 } else { k.0 };
        let mut guests: PolicyGuests<'_> = [
            (&mut *guest, pick(&kernels[0])),
            (&mut spinning, pick(&kernels[1])),
            (&mut suspending, pick(&kernels[2])),
        ];
        let mut samples: [WaitSamples; 6] = Default::default();
        for i in 0..warmup + iters {
            for (wait, s) in WAITS.iter().zip(samples.iter_mut()) {
                let (elapsed, cpu) = round_trip(*wait, raw, raw_kernel, &mut guests).await?;
                if i >= warmup {
                    s.latency_us.push(us(elapsed));
                    if let Some(cpu) = cpu {
                        s.cpu_us.push(us(cpu));
                    }
                }
            }
        }
        let spin_id = format!("latency.{case}.{}", Wait::Spin.id());
        // `samples` is in `WAITS` order: index 1 is the spin-poll floor.
        let spin_median = median(&samples[1].latency_us);
        for (wait, s) in WAITS.iter().zip(samples) {
            let latency = median(&s.latency_us);
            let cpu_percent = (s.cpu_us.len() == s.latency_us.len())
                .then(|| 100.0 * s.cpu_us.iter().sum::<f64>() / s.latency_us.iter().sum::<f64>());
            let mut row = Row::new(
                format!("latency.{case}.{}", wait.id()),
                format!("wait, {label}: {}", wait.label()),
                "us",
                s.latency_us,
            )
            .with_p99()
            .with_cpu(cpu_percent, s.cpu_us);
            if !matches!(wait, Wait::Spin) {
                row = row.ratio_to(&spin_id, spin_median);
            }
            if matches!(wait, Wait::Guest) && case == "empty" {
                row = row.target("<= 1.5x spin", latency / spin_median <= 1.5);
            }
            if matches!(wait, Wait::GuestSpin) {
                row = row.target("<= 1.2x spin", latency / spin_median <= 1.2);
            }
            if matches!(wait, Wait::Guest | Wait::GuestSpin) && case == "spin_10ms" {
                let met = cpu_percent.is_some_and(|c| c < 10.0);
                row = row.target("CPU < 10% of a core", met);
            }
            rows.push(row);
        }
    }
    Ok(rows)
}

/// Guests waiting at once in [`many_waiting`].
const MANY_GUESTS: usize = 64;
/// Timed rounds of [`many_waiting`] (after one untimed).
const MANY_ROUNDS: usize = 5;

/// (2b) `MANY_GUESTS` guests, each with its own stream and the default wait
/// policy, each launch the 10 ms kernel and wait, all at once on this one
/// thread; per round, the process's CPU time over the round's wall time
/// (in cores).
async fn many_waiting(runtime: &GuestRuntime<CudaDriver>) -> BenchResult<Row> {
    let spin_arg = [ArgDescriptor::i64(SPIN_NS as i64)];
    let mut guests = Vec::with_capacity(MANY_GUESTS);
    for _ in 0..MANY_GUESTS {
        let mut g = Guest::compile_new(runtime).await?;
        let kernel = g.load(SPIN_PTX, "spin", GUEST_ARGS_SPIN, &spin_arg).await?;
        guests.push((g, kernel));
    }
    let mut cores = Vec::new();
    for round in 0..=MANY_ROUNDS {
        let cpu_before = process_cpu_time();
        let start = Instant::now();
        let waits = guests.iter_mut().map(|(g, k)| g.launch_wait(*k));
        for result in futures::future::join_all(waits).await {
            result?;
        }
        let wall = start.elapsed();
        let cpu = cpu_time_since(cpu_before);
        if round > 0
            && let Some(cpu) = cpu
        {
            cores.push(cpu.as_secs_f64() / wall.as_secs_f64());
        }
    }
    let met = !cores.is_empty() && median(&cores) < 1.0;
    Ok(Row::new(
        "many_waiting.cores".to_string(),
        format!("{MANY_GUESTS} guests waiting at once, 10 ms kernel each: CPU"),
        "cores",
        cores,
    )
    .target("< 1 core", met))
}

/// `n` random floats in [1, 2) (never zero), little-endian bytes: outputs
/// `first..first + n` of SplitMix64 from `seed`.
fn random_floats(seed: u64, first: usize, n: usize) -> Vec<u8> {
    (first..first + n)
        .flat_map(|i| one_to_two(splitmix64(seed, i as u64)).to_le_bytes())
        .collect()
}

/// Checks `c[i] == a[i] + b[i]` for every element.
fn verify(side: &str, a: &[u8], b: &[u8], c: &[u8]) -> BenchResult<()> {
    for i in 0..c.len() / 4 {
        let (x, y, z) = (f32_at(a, i), f32_at(b, i), f32_at(c, i));
        if z != x + y {
            return Err(format!(
                "{side} vector add is wrong at element {i}: {x} + {y} gave {z}"
            ));
        }
    }
    Ok(())
}

/// (3) Vector-add bandwidth: guest memory (managed, prefetched) against
/// `cuMemAlloc` buffers; repetitions alternate between the two.
async fn bandwidth(raw: &mut RawCuda, guest: &mut Guest, seed: u64) -> BenchResult<Vec<Row>> {
    let bytes = VADD_N * 4;
    let grid = VADD_N.div_ceil(VADD_BLOCK as usize) as u32;
    let gbps = |d: Duration| 12.0 * VADD_N as f64 * VADD_LAUNCHES as f64 / d.as_secs_f64() / 1e9;
    let a = random_floats(seed, 0, VADD_N);
    let b = random_floats(seed, VADD_N, VADD_N);

    let vadd = raw.load(VADD_PTX, "vadd")?;
    let (da, db, dc) = (raw.alloc(bytes)?, raw.alloc(bytes)?, raw.alloc(bytes)?);
    raw.copy_to(&da, &a)?;
    raw.copy_to(&db, &b)?;
    let mut raw_vadd = RawKernel::new(vadd, &[da.ptr, db.ptr, dc.ptr, VADD_N as u64]);

    let (ga, gb, gc) = (
        GUEST_DATA,
        GUEST_DATA + bytes as u32,
        GUEST_DATA + 2 * bytes as u32,
    );
    guest.ensure(GUEST_DATA as usize + 3 * bytes)?;
    guest.write(ga, &a)?;
    guest.write(gb, &b)?;
    let len = bytes as u64;
    let args = [
        ArgDescriptor::guest_aligned(ga.into(), len, 4),
        ArgDescriptor::guest_aligned(gb.into(), len, 4),
        ArgDescriptor::guest_aligned(gc.into(), len, 4),
        ArgDescriptor::i32(VADD_N as i32),
    ];
    let guest_vadd = guest.load(VADD_PTX, "vadd", GUEST_ARGS_VADD, &args).await?;
    guest.prefetch(ga, 3 * bytes, PrefetchTo::Device).await?;

    // Warm-up: one launch each (the guest's also waits for the prefetch).
    guest.launch_many(guest_vadd, 1, grid, VADD_BLOCK).await?;
    guest.sync().await?;
    // SAFETY: the three buffers hold `VADD_N` floats each and outlive the
    // kernel (every launch below is followed by a synchronize).
    unsafe { raw.launch(&mut raw_vadd, grid, VADD_BLOCK) }?;
    raw.synchronize()?;

    let (mut guest_gbps, mut raw_gbps) = (Vec::new(), Vec::new());
    for _ in 0..VADD_REPS {
        let start = Instant::now();
        guest
            .launch_many(guest_vadd, VADD_LAUNCHES, grid, VADD_BLOCK)
            .await?;
        guest.sync().await?;
        guest_gbps.push(gbps(start.elapsed()));

        let start = Instant::now();
        for _ in 0..VADD_LAUNCHES {
            // SAFETY: as for the warm-up launch.
            unsafe { raw.launch(&mut raw_vadd, grid, VADD_BLOCK) }?;
        }
        raw.synchronize()?;
        raw_gbps.push(gbps(start.elapsed()));
    }

    // Check both results (untimed; reading guest memory migrates it back).
    let mut c = vec![0u8; bytes];
    raw.copy_from(&mut c, &dc)?;
    verify("raw", &a, &b, &c)?;
    drop((da, db, dc));
    let guest_c = &guest.memory.data(&guest.store)[gc as usize..gc as usize + bytes];
    verify("guest", &a, &b, guest_c)?;

    let raw_median = median(&raw_gbps);
    let ratio = median(&guest_gbps) / raw_median;
    Ok(vec![
        Row::new(
            "bandwidth.raw",
            "vector add: raw, 3 cuMemAlloc buffers",
            "GB/s",
            raw_gbps,
        ),
        Row::new(
            "bandwidth.guest",
            "vector add: guest memory (managed, prefetched)",
            "GB/s",
            guest_gbps,
        )
        .ratio_to("bandwidth.raw", raw_median)
        .target(">= 0.9x raw", ratio >= 0.9),
    ])
}

// ---------------------------------------------------------------------------
// The table and the JSON record.

fn table(rows: &[Row]) -> String {
    let columns = [
        Column::median(14),
        Column::p99(12),
        Column::cpu_percent(6),
        Column::ratio(6),
    ];
    common::rows::table(
        rows,
        &columns,
        "ratio: this row's median over the raw row it is compared with (see the JSON)\n",
    )
}

/// The JSON record: every sample, and what produced it.
#[derive(Serialize)]
struct Record<'a> {
    benchmark: &'static str,
    date_utc: String,
    command: String,
    seed: u64,
    device: DeviceRecord,
    config: Config,
    notes: [&'static str; 4],
    rows: Vec<RowRecord<'a>>,
}

/// The settings the record was measured with.
#[derive(Serialize)]
struct Config {
    launch_batch: usize,
    launch_batches: usize,
    launch_warmup_batches: usize,
    latency_iters: usize,
    latency_warmup: usize,
    spin_ns: u64,
    spin_iters: usize,
    spin_warmup: usize,
    sleep_poll_us: u128,
    vadd_n: usize,
    vadd_block: u32,
    vadd_launches: usize,
    vadd_reps: usize,
    guest_memory_limit_bytes: usize,
}

impl<'a> Record<'a> {
    fn new(
        rows: &'a [Row],
        info: &tensorwasm_core::DeviceInfo,
        date_utc: String,
        command: String,
        seed: u64,
    ) -> Record<'a> {
        Record {
            benchmark: "guest_overhead",
            date_utc,
            command,
            seed,
            device: DeviceRecord::new(info),
            config: Config {
                launch_batch: LAUNCH_BATCH,
                launch_batches: LAUNCH_BATCHES,
                launch_warmup_batches: LAUNCH_WARMUP_BATCHES,
                latency_iters: LATENCY_ITERS,
                latency_warmup: LATENCY_WARMUP,
                spin_ns: SPIN_NS,
                spin_iters: SPIN_ITERS,
                spin_warmup: SPIN_WARMUP,
                sleep_poll_us: SLEEP_POLL.as_micros(),
                vadd_n: VADD_N,
                vadd_block: VADD_BLOCK,
                vadd_launches: VADD_LAUNCHES,
                vadd_reps: VADD_REPS,
                guest_memory_limit_bytes: GUEST_MEMORY_LIMIT,
            },
            notes: [
                "launch rows: host time of one batch of launch calls divided by the batch size; \
                 the raw side calls cuLaunchKernel directly, the guest row times one Wasm export \
                 call that makes every launch of the batch",
                "latency rows: wall time from before the launch to the wait's return; cpu_us is \
                 the process's getrusage(RUSAGE_SELF) user+sys time over the same span, every \
                 thread included",
                "bandwidth rows: GB/s = 12 * vadd_n * vadd_launches / seconds, one sample per \
                 repetition, the closing synchronize included",
                "raw modules are loaded with cuModuleLoadDataEx and no options: sys.rs has no \
                 cuModuleLoadData",
            ],
            rows: rows
                .iter()
                .map(|r| RowRecord::new(r, RowFields::Latency))
                .collect(),
        }
    }
}
