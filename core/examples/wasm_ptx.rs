//! Prints the PTX a Wasm kernel lowers to, as `kernel_get` would make it:
//! a developer's view of what the translator and the PTX lowerer emit.
//!
//! ```sh
//! cargo run -p tensorwasm-core --features lower --example wasm_ptx -- \
//!     GUEST.wat|GUEST.wasm EXPORT [--sm 90] [--annotate] [--clif] \
//!     [--own-grid] [--aligned|--general]
//! ```
//!
//! `--annotate` writes each CLIF instruction above its PTX; `--clif`
//! prints the translated CLIF instead. `--own-grid`, `--aligned` and
//! `--general` pick the kernel variant (`KernelVariant`; the default
//! serves every launch).

use std::process::ExitCode;

use tensorwasm_core::lower::{
    Lowerer,
    ptx::PtxLowerer,
    translate::{
        BodyVariant, GridVariant, KernelLimits, KernelVariant, function_by_export,
        translate_kernel_variant,
    },
};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str| args.iter().any(|a| a == name);
    let sm = args
        .iter()
        .position(|a| a == "--sm")
        .and_then(|i| args.get(i + 1))
        .and_then(|s| s.parse::<u32>().ok())
        .unwrap_or(90);
    let positional: Vec<&String> = args
        .iter()
        .enumerate()
        .filter(|(i, a)| !a.starts_with("--") && (*i == 0 || args[i - 1] != "--sm"))
        .map(|(_, a)| a)
        .collect();
    let [file, export] = positional[..] else {
        eprintln!(
            "usage: wasm_ptx GUEST EXPORT [--sm NN] [--annotate] [--clif] [--own-grid] \
             [--aligned|--general]"
        );
        return ExitCode::from(2);
    };
    let wasm = match std::fs::read(file)
        .map_err(|e| e.to_string())
        .and_then(|bytes| {
            wat::parse_bytes(&bytes)
                .map(|w| w.into_owned())
                .map_err(|e| e.to_string())
        }) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("wasm_ptx: {file}: {e}");
            return ExitCode::from(2);
        }
    };
    let sm = (sm / 10, sm % 10);
    let Some(isa) = PtxLowerer::min_isa(sm) else {
        eprintln!("wasm_ptx: unknown target sm_{}{}", sm.0, sm.1);
        return ExitCode::from(2);
    };
    let lowerer = PtxLowerer { sm, isa };
    let variant = KernelVariant {
        grid: if flag("--own-grid") {
            GridVariant::Own
        } else {
            GridVariant::Any
        },
        bodies: if flag("--aligned") {
            BodyVariant::Aligned
        } else if flag("--general") {
            BodyVariant::General
        } else {
            BodyVariant::Both
        },
    };
    let result = function_by_export(&wasm, export)
        .and_then(|index| translate_kernel_variant(&wasm, index, KernelLimits::HOST, variant))
        .and_then(|kernel| {
            if flag("--clif") {
                Ok(kernel.function.display().to_string())
            } else if flag("--annotate") {
                lowerer.lower_annotated(&kernel.name, &kernel.function, kernel.abi)
            } else {
                lowerer.lower(&kernel.name, &kernel.function, kernel.abi)
            }
        });
    match result {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("wasm_ptx: {e}");
            ExitCode::FAILURE
        }
    }
}
