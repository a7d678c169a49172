//! A WASI 0.2 command component for the CLI's tests: its first argument
//! picks what it does, so one build covers every case.
//!
//! - `hello`: prints `hello from a component` to stdout, `to stderr` to
//!   stderr.
//! - `args A B ...`: prints its whole argv, one argument a line.
//! - `env NAME ...`: prints `NAME=value` or `NAME unset` for each name.
//! - `stdin`: prints the bytes of its stdin, upper-cased, and their count
//!   to stderr.
//! - `files DIR`: reads `DIR/in.txt`, writes it reversed to `DIR/out.txt`,
//!   and prints what it read; an error (no such directory for it) is printed
//!   to stderr with exit code 3.
//! - `exit N`: exits with code N (through `wasi:cli/exit`).

use std::io::{Read as _, Write as _};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode = args.get(1).map(String::as_str).unwrap_or("hello");
    match mode {
        "hello" => {
            println!("hello from a component");
            eprintln!("to stderr");
        }
        "args" => {
            for a in &args {
                println!("{a}");
            }
        }
        "env" => {
            for name in &args[2..] {
                match std::env::var(name) {
                    Ok(v) => println!("{name}={v}"),
                    Err(_) => println!("{name} unset"),
                }
            }
        }
        "stdin" => {
            let mut input = Vec::new();
            std::io::stdin().read_to_end(&mut input).expect("stdin");
            std::io::stdout()
                .write_all(&input.to_ascii_uppercase())
                .expect("stdout");
            eprintln!("{} bytes", input.len());
        }
        "files" => {
            let dir = std::path::Path::new(args.get(2).map(String::as_str).unwrap_or("."));
            let text = match std::fs::read_to_string(dir.join("in.txt")) {
                Ok(text) => text,
                Err(e) => {
                    eprintln!("cannot read {}: {e}", dir.join("in.txt").display());
                    std::process::exit(3);
                }
            };
            let reversed: String = text.chars().rev().collect();
            if let Err(e) = std::fs::write(dir.join("out.txt"), reversed) {
                eprintln!("cannot write {}: {e}", dir.join("out.txt").display());
                std::process::exit(3);
            }
            println!("read {text}");
        }
        "exit" => {
            let code = args.get(2).and_then(|c| c.parse().ok()).unwrap_or(1);
            std::process::exit(code);
        }
        other => {
            eprintln!("unknown mode {other}");
            std::process::exit(2);
        }
    }
}
