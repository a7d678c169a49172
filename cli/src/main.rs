//! The `tensorwasm` command: `run` a guest as `wasmtime run` would (a core
//! module with WASI preview 1 and `wasi_cuda`, or a WASI 0.2 component),
//! list `devices`, `serve` tenants over HTTP (the `tensorwasm-serve`
//! crate), be a supervisor's `worker`. This crate is only the command line
//! over the libraries. The command line is clap's;
//! logging is `tracing`, filtered by `RUST_LOG` and quiet (warnings only)
//! by default.

use std::{io::Write as _, path::PathBuf, process::ExitCode};

use clap::{Args, Parser, Subcommand, ValueEnum};
use tensorwasm_embed::{
    run::{Chosen, DEFAULT_MEMORY_LIMIT, DriverChoice, RunOptions, choose_driver},
    tenant::TenantConfig,
    wasi::{DirAccess, PreopenDir},
};
use tensorwasm_serve::{ServeConfig, start::ServeOptions};
use tracing_subscriber::EnvFilter;

/// Run WebAssembly guests on NVIDIA GPUs (or the CPU driver where there is
/// none): WASI preview 1 and `wasi_cuda` for core modules, WASI 0.2 for
/// components.
#[derive(Parser)]
#[command(name = "tensorwasm", version, propagate_version = true)]
#[command(
    after_help = "Logging: RUST_LOG=info (or debug, trace; per module, e.g. \
                        RUST_LOG=tensorwasm_embed::kernel=debug) writes the runtime's log to stderr."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a guest (.wasm or .wat): a WASI command's `_start` with ARGS as
    /// its argv, a WASI 0.2 component's `wasi:cli/run`, or one exported
    /// function with --invoke.
    Run(RunArgs),
    /// List what each driver (cuda, cpu) finds, and why a driver is
    /// unavailable.
    Devices,
    /// Serve many tenants over HTTP on every device (docs/serve.md): the
    /// tenants, their tokens and limits come from a config file.
    Serve(ServeArgs),
    /// Serve tenants for a supervisor (`tensorwasm_embed::supervise`):
    /// requests on stdin, responses on stdout, one JSON object per line.
    /// Ends at the end of its input, or when the device is lost.
    Worker(WorkerArgs),
}

#[derive(Args)]
struct ServeArgs {
    /// The server's configuration (TOML, or JSON when it ends in `.json`;
    /// docs/serve.md).
    #[arg(long, value_name = "FILE")]
    config: PathBuf,

    /// Listen here instead of the config's `listen` (port 0: any free
    /// port; the address is printed once bound).
    #[arg(long, value_name = "ADDR")]
    listen: Option<std::net::SocketAddr>,

    /// The driver, as for `run`; CUDA serves every device it can see
    /// (CUDA_VISIBLE_DEVICES picks them).
    #[arg(long, value_enum, default_value_t = DriverArg::Auto)]
    driver: DriverArg,

    /// On the CPU driver, let a failing kernel lose the whole device, as a
    /// faulting kernel loses a CUDA context (to exercise the server's
    /// handling of a lost device without a GPU).
    #[arg(long)]
    cpu_faults_lose_device: bool,
}

#[derive(Args)]
struct WorkerArgs {
    /// The driver, as for `run`.
    #[arg(long, value_enum, default_value_t = DriverArg::Auto)]
    driver: DriverArg,

    /// The most bytes one guest memory may reserve (capped at half the
    /// device's free memory).
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_MEMORY_LIMIT)]
    memory_limit: usize,

    /// On the CPU driver, let a failing kernel lose the whole device, as a
    /// faulting kernel loses a CUDA context (to exercise recovery without
    /// a GPU).
    #[arg(long)]
    cpu_faults_lose_device: bool,
}

#[derive(Args)]
#[command(override_usage = "tensorwasm run [OPTIONS] <GUEST> [ARGS]...")]
struct RunArgs {
    /// The driver: `auto` picks CUDA when a GPU is there, else the CPU
    /// driver (RUST_LOG=info says which and why).
    #[arg(long, value_enum, default_value_t = DriverArg::Auto)]
    driver: DriverArg,

    /// Call this exported function instead of `_start` (a reactor's
    /// export); ARGS are then its parameters, parsed by their types (i32,
    /// i64 in decimal or 0x hex, f32, f64), and its results are printed.
    #[arg(long, value_name = "NAME")]
    invoke: Option<String>,

    /// Grant the guest the host directory HOST, read-write, as GUEST in the
    /// guest (default: HOST). Repeatable; none by default.
    #[arg(long = "dir", value_name = "HOST[::GUEST]")]
    dirs: Vec<String>,

    /// Set NAME=VALUE in the guest's environment (NAME alone: the host's
    /// value). Repeatable; the guest sees no other variable.
    #[arg(long = "env", value_name = "NAME[=VALUE]", value_parser = parse_env)]
    env: Vec<(String, String)>,

    /// The most bytes one guest memory may reserve (capped at half the
    /// device's free memory).
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_MEMORY_LIMIT)]
    memory_limit: usize,

    /// Run the guest as the tenant FILE describes (TOML: quota, policy,
    /// guest fuel, WASI capabilities; docs/tenants.md). Without it the
    /// guest is trusted and gets the host's stdio.
    #[arg(long, value_name = "FILE")]
    tenant: Option<PathBuf>,

    /// Keep the compiled guest in DIR (wasmtime's compilation cache) and
    /// load it from there on later runs of the same guest instead of
    /// compiling it again: for big guests (a Python or JavaScript
    /// component embeds its interpreter). What is in DIR runs unchecked:
    /// give a directory nobody else can write to.
    #[arg(long, value_name = "DIR")]
    compile_cache: Option<PathBuf>,

    /// The guest (a core Wasm module or a WASI 0.2 component, binary or
    /// text; a component reaches the GPU through `tensorwasm:gpu`,
    /// docs/components.md), then its arguments
    /// (argv[1..]; with --invoke, the function's). Everything after GUEST
    /// belongs to the guest, `--help` included, as under `wasmtime run`.
    #[arg(
        value_name = "GUEST",
        required = true,
        num_args = 1..,
        trailing_var_arg = true
    )]
    guest_and_args: Vec<String>,
}

#[derive(Clone, Copy, ValueEnum)]
enum DriverArg {
    Auto,
    Cuda,
    Cpu,
}

fn parse_env(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some(("", _)) => Err("the variable's name is empty".into()),
        Some((name, value)) => Ok((name.to_string(), value.to_string())),
        None => std::env::var(text)
            .map(|value| (text.to_string(), value))
            .map_err(|_| format!("`{text}` has no `=VALUE` and is not set on the host")),
    }
}

fn main() -> ExitCode {
    // Each guest launches on its own stream; CUDA maps streams onto
    // CUDA_DEVICE_MAX_CONNECTIONS hardware queues (8 by default), and two
    // streams sharing a queue serialize. 32 queues keep up to 32 tenants
    // from waiting behind one another (docs/tenants.md). CUDA reads the
    // variable when it starts, so it is set before anything touches it.
    if std::env::var_os("CUDA_DEVICE_MAX_CONNECTIONS").is_none() {
        // SAFETY: this is the first statement of `main`: no other thread
        // exists yet that could read or write the environment concurrently.
        unsafe { std::env::set_var("CUDA_DEVICE_MAX_CONNECTIONS", "32") };
    }
    let cli = Cli::parse();
    init_logging();
    match cli.command {
        Command::Run(args) => run(args),
        Command::Worker(args) => worker(args),
        Command::Serve(args) => serve(args),
        Command::Devices => {
            print!(
                "{}",
                tensorwasm_embed::format_reports(&tensorwasm_embed::discover())
            );
            ExitCode::SUCCESS
        }
    }
}

fn driver_choice(arg: DriverArg) -> DriverChoice {
    match arg {
        DriverArg::Auto => DriverChoice::Auto,
        DriverArg::Cuda => DriverChoice::Cuda,
        DriverArg::Cpu => DriverChoice::Cpu,
    }
}

fn worker(args: WorkerArgs) -> ExitCode {
    let chosen = match choose_driver(driver_choice(args.driver)) {
        Ok(chosen) => chosen,
        Err(e) => {
            eprintln!("tensorwasm worker: {e}");
            return ExitCode::from(e.exit_code());
        }
    };
    let (input, output) = (std::io::stdin().lock(), std::io::stdout().lock());
    let limit = args.memory_limit;
    let served = match chosen {
        Chosen::Cuda(driver) => {
            let limit = half_free(&driver, limit);
            tensorwasm_embed::supervise::worker::serve(driver, limit, input, output)
        }
        Chosen::Cpu(driver, _) => {
            driver.set_faults_lose_device(args.cpu_faults_lose_device);
            let limit = half_free(&driver, limit);
            tensorwasm_embed::supervise::worker::serve(driver, limit, input, output)
        }
    };
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tensorwasm worker: {e}");
            ExitCode::FAILURE
        }
    }
}

fn serve(args: ServeArgs) -> ExitCode {
    let fail = |e: String| {
        eprintln!("tensorwasm serve: {e}");
        ExitCode::from(2)
    };
    let text = match std::fs::read_to_string(&args.config) {
        Ok(text) => text,
        Err(e) => return fail(format!("cannot read {}: {e}", args.config.display())),
    };
    let config = match ServeConfig::from_file_text(&args.config, &text) {
        Ok(c) => c,
        Err(e) => return fail(format!("{}: {e}", args.config.display())),
    };
    match tensorwasm_serve::start::serve(ServeOptions {
        config,
        listen: args.listen,
        driver: driver_choice(args.driver),
        cpu_faults_lose_device: args.cpu_faults_lose_device,
    }) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}

/// `limit`, capped at half the device's free memory (as `run` caps it).
fn half_free<D: tensorwasm_core::GpuDriver>(driver: &D, limit: usize) -> usize {
    driver
        .mem_info()
        .map_or(limit, |m| tensorwasm_embed::run::memory_cap(limit, m.free))
}

/// `RUST_LOG` filters the log (tracing-subscriber's syntax); warnings only
/// when it is unset or unreadable.
fn init_logging() {
    let filter = match std::env::var("RUST_LOG") {
        Ok(spec) => EnvFilter::try_new(&spec).unwrap_or_else(|e| {
            eprintln!("tensorwasm: ignoring RUST_LOG `{spec}`: {e}");
            EnvFilter::new("warn")
        }),
        Err(_) => EnvFilter::new("warn"),
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

fn run(args: RunArgs) -> ExitCode {
    let tenant = match &args.tenant {
        None => None,
        Some(path) => match std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read --tenant {}: {e}", path.display()))
            .and_then(|text| {
                TenantConfig::from_toml(&text).map_err(|e| format!("{}: {e}", path.display()))
            }) {
            Ok(config) => Some(config),
            Err(e) => {
                eprintln!("tensorwasm run: {e}");
                return ExitCode::from(2);
            }
        },
    };
    let mut guest_and_args = args.guest_and_args.into_iter();
    let Some(guest) = guest_and_args.next() else {
        // clap requires at least one value.
        eprintln!("tensorwasm run: no guest given");
        return ExitCode::from(2);
    };
    let options = RunOptions {
        guest: PathBuf::from(guest),
        driver: driver_choice(args.driver),
        invoke: args.invoke,
        args: guest_and_args.collect(),
        memory_limit: args.memory_limit,
        tenant,
        dirs: args
            .dirs
            .iter()
            .map(|d| PreopenDir::parse(d, DirAccess::ReadWrite))
            .collect(),
        env: args.env,
        compile_cache: args.compile_cache,
    };
    match tensorwasm_embed::run::run(&options) {
        Ok(report) => {
            if options.invoke.is_some() {
                println!("{}", report.results.join(" "));
            }
            let _ = std::io::stdout().flush();
            // WASI exit codes are those of the process, as under `wasmtime
            // run`; one the OS cannot carry is a failure.
            ExitCode::from(u8::try_from(report.exit_code).unwrap_or(1))
        }
        Err(e) => {
            eprintln!("tensorwasm run: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
