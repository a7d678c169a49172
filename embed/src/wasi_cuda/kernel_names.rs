//! How a guest names the function that `kernel_get` makes a kernel of: by
//! its index in the function space (`kernel_get`), by export name
//! (`kernel_get_export`) or by function pointer, a slot of table 0
//! (`kernel_get_table`). Resolving a name reads the guest's module through
//! `tensorwasm_core::lower::translate`; what happens to the index after that
//! is `kernel_get`'s, shared by all three calls.

use std::collections::HashMap;

use tensorwasm_core::{
    abi::{self, AbiError, Errno},
    lower::{
        LowerError,
        translate::{function_by_export, function_by_table_slot},
    },
};

/// The longest export name `kernel_get_export` reads, in bytes. Longer
/// names are refused before they are read: no module has one (the names a
/// compiler exports are symbols), and the name goes into the error text.
pub(crate) const MAX_EXPORT_NAME: u32 = 1024;

/// The most names one guest's [`ResolvedNames`] remembers; past it, names
/// are resolved again on every call (correct, only slower).
const MAX_REMEMBERED: usize = 1024;

/// A kernel as the guest names it, with the raw values it passed.
#[derive(Clone, Copy, Debug)]
pub(crate) enum KernelName {
    /// A function index (imports first).
    Index(u32),
    /// The UTF-8 export name at `ptr .. ptr + len` of guest memory.
    Export { ptr: u32, len: u32 },
    /// A slot of table 0: the value of a function pointer.
    TableSlot(u32),
}

/// The function indices of the names a guest has resolved, so that asking
/// again for a kernel by name costs no parse of its module. Only successes
/// are kept: they are fixed for a module, and there are at most as many as
/// the module has exports and table slots.
#[derive(Debug, Default)]
pub(crate) struct ResolvedNames {
    exports: HashMap<String, u32>,
    slots: HashMap<u32, u32>,
}

impl ResolvedNames {
    /// Forgets every name (the guest's module changed).
    pub(crate) fn clear(&mut self) {
        self.exports.clear();
        self.slots.clear();
    }

    /// The function index `name` names in module `wasm`. An export name is
    /// read from `mem` and checked (range: `EFAULT`/`EOVERFLOW`; empty,
    /// longer than [`MAX_EXPORT_NAME`], holding a NUL or not UTF-8:
    /// `EINVAL`); a name the module does not have is `EINVAL` with the
    /// reason (no such export, a null slot, a slot past the table, a table
    /// whose contents are not fixed).
    pub(crate) fn resolve(
        &mut self,
        mem: &[u8],
        wasm: &[u8],
        name: KernelName,
    ) -> Result<u32, AbiError> {
        match name {
            KernelName::Index(index) => Ok(index),
            KernelName::Export { ptr, len } => {
                abi::guest_range(mem.len(), ptr, u64::from(len))?;
                if len > MAX_EXPORT_NAME {
                    return Err(AbiError::invalid(format!(
                        "the export name is {len} bytes long; at most {MAX_EXPORT_NAME}"
                    )));
                }
                let export = abi::read_str(mem, ptr, len)?;
                if let Some(&index) = self.exports.get(export) {
                    return Ok(index);
                }
                let index = function_by_export(wasm, export).map_err(not_found)?;
                if self.len() < MAX_REMEMBERED {
                    self.exports.insert(export.to_owned(), index);
                }
                Ok(index)
            }
            KernelName::TableSlot(slot) => {
                if let Some(&index) = self.slots.get(&slot) {
                    return Ok(index);
                }
                let index = function_by_table_slot(wasm, slot).map_err(not_found)?;
                if self.len() < MAX_REMEMBERED {
                    self.slots.insert(slot, index);
                }
                Ok(index)
            }
        }
    }

    fn len(&self) -> usize {
        self.exports.len() + self.slots.len()
    }
}

/// A name the module does not have (or a module that cannot be read), as
/// the guest sees it: `EINVAL` with the reason.
fn not_found(e: LowerError) -> AbiError {
    match e {
        LowerError::Invalid(why) => AbiError::invalid(why),
        other => AbiError::new(Errno::EINVAL, other.to_string()),
    }
}
