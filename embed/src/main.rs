//! The `tensorwasm` command.

use std::process::ExitCode;

const USAGE: &str = "\
usage: tensorwasm <command>

commands:
  devices    list what each driver (cuda, cpu) finds, and why a driver is unavailable
  help       print this text
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
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
