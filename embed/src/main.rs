//! The `tensorwasm` command.

use std::{path::PathBuf, process::ExitCode};

use tensorwasm_embed::{
    run::{DEFAULT_MEMORY_LIMIT, DriverChoice, RunOptions},
    tenant::TenantConfig,
};

const USAGE: &str = "\
usage: tensorwasm <command>

commands:
  run GUEST [--driver auto|cuda|cpu] [--invoke NAME] [--memory-limit BYTES]
      [--tenant FILE] [ARGS...]
             run GUEST (.wat or .wasm): call its export NAME (default `run`)
             with ARGS parsed by the function's parameter types, print the
             results. `auto` (the default) picks CUDA when a GPU is there,
             else the CPU driver, and says which. --tenant runs the guest as
             the tenant FILE describes (TOML: quota, policy, guest fuel;
             docs/tenants.md); without it the guest is trusted.
  devices    list what each driver (cuda, cpu) finds, and why a driver is unavailable
  help       print this text
";

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
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("run") => match parse_run(&args[1..]) {
            Ok(options) => run(&options),
            Err(e) => {
                eprintln!("tensorwasm run: {e}\n\n{USAGE}");
                ExitCode::from(2)
            }
        },
        Some("devices") => {
            print!(
                "{}",
                tensorwasm_embed::format_reports(&tensorwasm_embed::discover())
            );
            ExitCode::SUCCESS
        }
        Some("help" | "--help" | "-h") => {
            print!("{USAGE}");
            ExitCode::SUCCESS
        }
        Some(other) => {
            eprintln!("tensorwasm: unknown command `{other}`\n\n{USAGE}");
            ExitCode::from(2)
        }
        None => {
            eprint!("{USAGE}");
            ExitCode::from(2)
        }
    }
}

fn parse_run(args: &[String]) -> Result<RunOptions, String> {
    let mut guest = None;
    let mut driver = DriverChoice::Auto;
    let mut invoke = "run".to_string();
    let mut memory_limit = DEFAULT_MEMORY_LIMIT;
    let mut tenant = None;
    let mut rest = Vec::new();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = |flag: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        match arg.as_str() {
            "--driver" => {
                driver = match value("--driver")?.as_str() {
                    "auto" => DriverChoice::Auto,
                    "cuda" => DriverChoice::Cuda,
                    "cpu" => DriverChoice::Cpu,
                    other => return Err(format!("unknown driver `{other}` (auto, cuda, cpu)")),
                }
            }
            "--invoke" => invoke = value("--invoke")?,
            "--memory-limit" => {
                let v = value("--memory-limit")?;
                memory_limit = v
                    .parse()
                    .map_err(|_| format!("--memory-limit `{v}` is not a byte count"))?;
            }
            "--tenant" => {
                let path = value("--tenant")?;
                let text = std::fs::read_to_string(&path)
                    .map_err(|e| format!("reading --tenant {path}: {e}"))?;
                tenant = Some(TenantConfig::from_toml(&text).map_err(|e| format!("{path}: {e}"))?);
            }
            "--" => rest.extend(it.by_ref().cloned()),
            _ if guest.is_none() => guest = Some(PathBuf::from(arg)),
            _ => rest.push(arg.clone()),
        }
    }
    Ok(RunOptions {
        guest: guest.ok_or("no guest file given")?,
        driver,
        invoke,
        args: rest,
        memory_limit,
        tenant,
    })
}

fn run(options: &RunOptions) -> ExitCode {
    match tensorwasm_embed::run::run(options) {
        Ok(report) => {
            match &report.cuda_unavailable {
                Some(why) => eprintln!(
                    "tensorwasm: driver cpu ({}); CUDA unavailable: {why}",
                    report.device
                ),
                None => eprintln!(
                    "tensorwasm: driver {} ({})",
                    report.driver.as_str(),
                    report.device
                ),
            }
            if let Some(last) = &report.last_error {
                eprintln!("tensorwasm: last wasi_cuda error: {last}");
            }
            println!("{}", report.results.join(" "));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("tensorwasm run: {e}");
            ExitCode::FAILURE
        }
    }
}
