//! A guest module's mutable globals, as a Wasm kernel's launch needs them:
//! each kernel thread starts with its own copy of every mutable global the
//! kernel uses, at the value the global holds when the kernel is launched
//! (`docs/kernels.md`, "Globals and the shadow stack"). wasmtime lets a host
//! read only exported globals, so the runtime compiles each guest with one
//! more export per defined mutable global, named [`export_name`]; the
//! module's code and every other section are unchanged (the kernels are
//! translated from the original bytes, whose offsets traps report).

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

/// `wasm` with an export of every defined mutable global ([`export_name`]),
/// or `wasm` itself when it defines none. A module that is not valid Wasm
/// is returned as it is (wasmtime reports what is wrong with it); a module
/// that already exports a name with [`RESERVED_PREFIX`] is refused.
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
    /// Defined mutable globals, by index.
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
            let name = export_name(g.index);
            let value = read(&name).ok_or_else(|| {
                AbiError::new(
                    Errno::ENOTSUP,
                    format!(
                        "the kernel uses global {}, which the host cannot read: the guest was \
                         not compiled by the runtime (`Runtime::compile`), which exports it as \
                         `{name}`",
                        g.index
                    ),
                )
            })?;
            match (g.ty, value) {
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
