//! A guest module's mutable globals, as a Wasm kernel's launch needs them:
//! each kernel thread starts with its own copy of every mutable global the
//! kernel uses, at the value the global holds when the kernel is launched
//! (`docs/kernels.md`, "Globals and the shadow stack"). wasmtime lets a host
//! read only exported globals. A module that exports its mutable globals
//! (wasm-ld's `--export=__stack_pointer`, which the guest workspace sets)
//! is compiled as it is, and a launch reads them under their names. For
//! each one it does not export, the runtime adds an export named
//! [`export_name`]; nothing else changes, but the export section grows, so
//! wasmtime's offsets into the guest's own code (in its backtraces) are
//! that many bytes past the original module's. Kernels are translated from
//! the original bytes, so their trap offsets are always the module's.

use std::borrow::Cow;

use tensorwasm_core::KernelParam;
use tensorwasm_core::abi::{AbiError, Errno};
use tensorwasm_core::lower::translate::{KernelGlobal, WasmType};
use wasmparser::{Parser, Payload, TypeRef};

/// The prefix of the exports the runtime adds; a guest may not export a
/// name that starts with it.
pub const RESERVED_PREFIX: &str = "__tensorwasm_";

/// The export under which the runtime exposes defined global `index`.
pub fn export_name(index: u32) -> String {
    format!("{RESERVED_PREFIX}global_{index}")
}

/// `wasm` with an export ([`export_name`]) of every defined mutable global
/// it does not export already, or `wasm` itself when there is none. A
/// module that is not valid Wasm is returned as it is (wasmtime reports
/// what is wrong with it); a module that exports a name with
/// [`RESERVED_PREFIX`] is refused.
pub fn export_mutable_globals(wasm: &[u8]) -> Result<Cow<'_, [u8]>, String> {
    let Some(plan) = plan(wasm) else {
        return Ok(Cow::Borrowed(wasm));
    };
    if let Some(name) = plan.reserved {
        return Err(format!(
            "the module exports `{name}`: export names starting with `{RESERVED_PREFIX}` are \
             reserved for the runtime"
        ));
    }
    if plan.mutable.is_empty() {
        return Ok(Cow::Borrowed(wasm));
    }
    let mut added = Vec::new();
    for &index in &plan.mutable {
        let name = export_name(index);
        leb(&mut added, name.len() as u64);
        added.extend_from_slice(name.as_bytes());
        added.push(0x03); // global
        leb(&mut added, u64::from(index));
    }
    let count = plan.exports + plan.mutable.len() as u64;
    let mut section = Vec::new();
    leb(&mut section, count);
    if let Some((_, entries)) = &plan.export_section {
        section.extend_from_slice(&wasm[entries.clone()]);
    }
    section.extend_from_slice(&added);
    let mut out = Vec::with_capacity(wasm.len() + added.len() + 16);
    let (cut, resume) = match &plan.export_section {
        Some((whole, _)) => (whole.start, whole.end),
        None => (plan.insert_at, plan.insert_at),
    };
    out.extend_from_slice(&wasm[..cut]);
    out.push(7); // the export section's id
    leb(&mut out, section.len() as u64);
    out.extend_from_slice(&section);
    out.extend_from_slice(&wasm[resume..]);
    Ok(Cow::Owned(out))
}

/// Where the module's exports are and what to add.
struct Plan {
    /// Defined mutable globals the module does not export, by index.
    mutable: Vec<u32>,
    /// Exports the module has.
    exports: u64,
    /// The export section: the whole section (id and size included) and
    /// its entries (after the count).
    export_section: Option<(std::ops::Range<usize>, std::ops::Range<usize>)>,
    /// Where a new export section goes when there is none: before the
    /// first section that must follow it.
    insert_at: usize,
    /// An export name with the reserved prefix.
    reserved: Option<String>,
}

fn plan(wasm: &[u8]) -> Option<Plan> {
    let mut plan = Plan {
        mutable: Vec::new(),
        exports: 0,
        export_section: None,
        insert_at: wasm.len(),
        reserved: None,
    };
    let mut imported_globals = 0u32;
    let mut exported = Vec::new();
    let sections = raw_sections(wasm)?;
    // The export section's place: after import, function, table, memory,
    // tag and global sections; before start, element, data count, code and
    // data sections.
    if let Some((start, _, _)) = sections.iter().find(|(_, id, _)| matches!(id, 8..=12)) {
        plan.insert_at = *start;
    }
    for payload in Parser::new(0).parse_all(wasm) {
        match payload.ok()? {
            Payload::ImportSection(reader) => {
                for import in reader.into_imports() {
                    if matches!(import.ok()?.ty, TypeRef::Global(_)) {
                        imported_globals += 1;
                    }
                }
            }
            Payload::GlobalSection(reader) => {
                for (i, global) in reader.into_iter().enumerate() {
                    if global.ok()?.ty.mutable {
                        plan.mutable.push(imported_globals + i as u32);
                    }
                }
            }
            Payload::ExportSection(reader) => {
                plan.exports = u64::from(reader.count());
                for export in reader.clone() {
                    let export = export.ok()?;
                    if export.name.starts_with(RESERVED_PREFIX) {
                        plan.reserved = Some(export.name.to_string());
                    }
                    if export.kind == wasmparser::ExternalKind::Global {
                        exported.push(export.index);
                    }
                }
                let content = reader.range();
                let content = content.start as usize..content.end as usize;
                let whole = sections
                    .iter()
                    .find(|(_, id, body)| *id == 7 && body.start == content.start)?
                    .0;
                // The entries follow the count, whose LEB length the reader
                // knows from where its first entry starts.
                let entries_start = reader.original_position() as usize;
                plan.export_section = Some((whole..content.end, entries_start..content.end));
            }
            Payload::Version {
                encoding: wasmparser::Encoding::Component,
                ..
            } => return None,
            _ => {}
        }
    }
    plan.mutable.retain(|g| !exported.contains(g));
    Some(plan)
}

/// The module's sections: (start of the section, id, its contents), read
/// off the binary framing; `None` when the bytes are not a core module.
fn raw_sections(wasm: &[u8]) -> Option<Vec<(usize, u8, std::ops::Range<usize>)>> {
    if wasm.len() < 8 || wasm[..4] != *b"\0asm" || wasm[4..8] != [1, 0, 0, 0] {
        return None;
    }
    let mut at = 8;
    let mut sections = Vec::new();
    while at < wasm.len() {
        let start = at;
        let id = wasm[at];
        at += 1;
        let mut size = 0u64;
        let mut shift = 0;
        loop {
            let byte = *wasm.get(at)?;
            at += 1;
            size |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                break;
            }
            shift += 7;
            if shift > 28 {
                return None;
            }
        }
        let end = at.checked_add(usize::try_from(size).ok()?)?;
        if end > wasm.len() {
            return None;
        }
        sections.push((start, id, at..end));
        at = end;
    }
    Some(sections)
}

/// Appends `value` as an unsigned LEB128.
fn leb(out: &mut Vec<u8>, mut value: u64) {
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// The launch value of each of a kernel's globals, read from the guest's
/// instance by `read` (the value of an export, by name).
pub fn launch_values(
    globals: &[KernelGlobal],
    mut read: impl FnMut(&str) -> Option<wasmtime::Val>,
) -> Result<Vec<KernelParam>, AbiError> {
    globals
        .iter()
        .map(|g| {
            let name = g.export.clone().unwrap_or_else(|| export_name(g.index));
            let value = read(&name).ok_or_else(|| {
                AbiError::new(
                    Errno::ENOTSUP,
                    format!(
                        "the kernel uses global {}, which the host cannot read: the module \
                         does not export it, and the guest was not compiled by the runtime \
                         (`GuestRuntime::compile`), which exports it as `{name}`",
                        g.index
                    ),
                )
            })?;
            match (g.ty, value) {
                // A word of a `v128` global.
                (WasmType::I32, wasmtime::Val::V128(v)) if g.lane.is_some() => {
                    let lane = u32::from(g.lane.unwrap_or(0) & 3);
                    Ok(KernelParam::I32((v.as_u128() >> (32 * lane)) as u32 as i32))
                }
                (WasmType::I32, wasmtime::Val::I32(v)) => Ok(KernelParam::I32(v)),
                (WasmType::I64, wasmtime::Val::I64(v)) => Ok(KernelParam::I64(v)),
                (WasmType::F32, wasmtime::Val::F32(bits)) => {
                    Ok(KernelParam::F32(f32::from_bits(bits)))
                }
                (WasmType::F64, wasmtime::Val::F64(bits)) => {
                    Ok(KernelParam::F64(f64::from_bits(bits)))
                }
                (ty, other) => Err(AbiError::new(
                    Errno::ENOTSUP,
                    format!(
                        "global {} should be {ty:?}, the instance has {other:?}",
                        g.index
                    ),
                )),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exports(wasm: &[u8]) -> Vec<(String, wasmparser::ExternalKind, u32)> {
        let mut out = Vec::new();
        for payload in Parser::new(0).parse_all(wasm) {
            if let Payload::ExportSection(reader) = payload.unwrap() {
                for e in reader {
                    let e = e.unwrap();
                    out.push((e.name.to_string(), e.kind, e.index));
                }
            }
        }
        out
    }

    fn validate(wasm: &[u8]) {
        wasmparser::Validator::new().validate_all(wasm).unwrap();
    }

    #[test]
    fn unexported_mutable_globals_get_an_export_each() {
        use wasmparser::ExternalKind::{Func, Global};
        // With an export section, and without one (before the code section).
        for wat in [
            r#"(module (import "e" "g" (global i32)) (global (mut i32) (i32.const 1))
                 (global i64 (i64.const 2)) (global (mut f64) (f64.const 3))
                 (func (export "f")) (start 0))"#,
            r#"(module (global (mut i32) (i32.const 1)) (global i64 (i64.const 2))
                 (global (mut f64) (f64.const 3)) (func) (start 0))"#,
        ] {
            let wasm = wat::parse_str(wat).unwrap();
            let out = export_mutable_globals(&wasm).unwrap();
            validate(&out);
            let imported = u32::from(wat.contains("import"));
            let mut want: Vec<_> = exports(&wasm);
            want.push((export_name(imported), Global, imported));
            want.push((export_name(imported + 2), Global, imported + 2));
            assert_eq!(exports(&out), want);
            assert!(exports(&wasm).iter().all(|e| e.1 == Func));
        }
    }

    #[test]
    fn exported_globals_leave_the_module_as_it_is() {
        let wasm = wat::parse_str(
            r#"(module (global $__stack_pointer (export "__stack_pointer") (mut i32) (i32.const 8))
                 (global i32 (i32.const 1)) (func (export "f")))"#,
        )
        .unwrap();
        assert!(matches!(
            export_mutable_globals(&wasm),
            Ok(Cow::Borrowed(_))
        ));
        let none = wat::parse_str("(module (func))").unwrap();
        assert!(matches!(
            export_mutable_globals(&none),
            Ok(Cow::Borrowed(_))
        ));
        // Not a module: wasmtime says why.
        assert!(matches!(
            export_mutable_globals(b"nope"),
            Ok(Cow::Borrowed(_))
        ));
    }

    #[test]
    fn the_reserved_prefix_is_refused() {
        let wasm = wat::parse_str(
            r#"(module (global (export "__tensorwasm_global_0") (mut i32) (i32.const 8)))"#,
        )
        .unwrap();
        let err = export_mutable_globals(&wasm).unwrap_err();
        assert!(err.contains("reserved"), "{err}");
    }

    #[test]
    fn launch_values_read_each_global_by_its_export() {
        let globals = [
            KernelGlobal {
                index: 0,
                ty: WasmType::I32,
                export: Some("__stack_pointer".into()),
                lane: None,
            },
            KernelGlobal {
                index: 3,
                ty: WasmType::F64,
                export: None,
                lane: None,
            },
        ];
        let values = launch_values(&globals, |name| match name {
            "__stack_pointer" => Some(wasmtime::Val::I32(4096)),
            "__tensorwasm_global_3" => Some(wasmtime::Val::F64(2.5f64.to_bits())),
            _ => None,
        })
        .unwrap();
        assert_eq!(values, vec![KernelParam::I32(4096), KernelParam::F64(2.5)]);
        let err = launch_values(&globals[1..], |_| None).unwrap_err();
        assert_eq!(err.errno, Errno::ENOTSUP);
        let err = launch_values(&globals[..1], |_| Some(wasmtime::Val::I64(1))).unwrap_err();
        assert_eq!(err.errno, Errno::ENOTSUP);
    }

    #[test]
    fn a_v128_global_is_four_words_low_first() {
        let globals: Vec<KernelGlobal> = (0..4)
            .map(|lane| KernelGlobal {
                index: 2,
                ty: WasmType::I32,
                export: Some("v".into()),
                lane: Some(lane),
            })
            .collect();
        let bits = 0x8765_4321_0fed_cba9_7654_3210_fedc_ba98u128;
        let values = launch_values(&globals, |name| {
            (name == "v").then(|| wasmtime::Val::V128(bits.into()))
        })
        .unwrap();
        assert_eq!(
            values,
            [0xfedc_ba98u32, 0x7654_3210, 0x0fed_cba9, 0x8765_4321]
                .map(|w| KernelParam::I32(w as i32))
                .to_vec()
        );
        // A scalar global's entry does not take a v128.
        let scalar = KernelGlobal {
            lane: None,
            ..globals[0].clone()
        };
        let err = launch_values(&[scalar], |_| Some(wasmtime::Val::V128(bits.into()))).unwrap_err();
        assert_eq!(err.errno, Errno::ENOTSUP);
    }
}
