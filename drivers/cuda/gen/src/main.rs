//! Generates `drivers/cuda/src/sys.rs`: bindgen over `cuda.h` with dynamic
//! loading, restricted to the functions in `allowlist.txt`.
//!
//! Usage: `tensorwasm-cuda-gen <cuda.h> <allowlist.txt> <out.rs> <header-line>...`
//! The header lines (how the file was made) are written first, as comments.

use std::{env, fs, process::ExitCode};

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    if args.len() < 3 {
        eprintln!("usage: tensorwasm-cuda-gen <cuda.h> <allowlist.txt> <out.rs> [header-line...]");
        return ExitCode::from(2);
    }
    let (header, allowlist, out) = (&args[0], &args[1], &args[2]);
    let names: Vec<String> = fs::read_to_string(allowlist)
        .expect("read allowlist")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect();

    let mut builder = bindgen::Builder::default()
        .header(header)
        .dynamic_library_name("CudaLib")
        .dynamic_link_require_all(false)
        .allowlist_recursively(true)
        .default_enum_style(bindgen::EnumVariation::NewType {
            is_bitfield: false,
            is_global: false,
        })
        .derive_default(true)
        .layout_tests(false)
        .generate_comments(false)
        .formatter(bindgen::Formatter::Prettyplease)
        .rust_target(bindgen::RustTarget::stable(85, 0).expect("rust target"))
        .rust_edition(bindgen::RustEdition::Edition2024)
        .wrap_unsafe_ops(true)
        // Types and constants we use beyond those the functions pull in.
        .allowlist_type("CUdevice_attribute_enum")
        .allowlist_type("CUpointer_attribute_enum")
        .allowlist_type("CUjit_option_enum")
        .allowlist_type("CUmemorytype_enum")
        .allowlist_type("CUmemAttach_flags_enum")
        .allowlist_type("CUevent_flags_enum")
        .allowlist_type("CUstream_flags_enum")
        .allowlist_var("CUDA_VERSION");
    for name in &names {
        builder = builder.allowlist_function(format!("^{name}$"));
    }
    let bindings = builder.generate().expect("bindgen failed");

    let mut text = String::new();
    for line in &args[3..] {
        text.push_str("// ");
        text.push_str(line);
        text.push('\n');
    }
    text.push('\n');
    text.push_str(&bindings.to_string());
    fs::write(out, text).expect("write output");
    ExitCode::SUCCESS
}
