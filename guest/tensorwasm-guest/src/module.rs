//! [`Module`] (loaded PTX or cubin, unloaded when the value drops) and
//! [`Function`], a kernel of it that [`Function::launch`] starts.

use crate::error::Error;
use crate::launch::{Dim3, Launch};
use crate::result;

/// A loaded module, owned: `Drop` unloads it. Functions taken from it stay
/// valid after that (the host keeps the module loaded for them).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Module {
    handle: u64,
}

impl Module {
    /// JIT-compiles PTX text. `EIMAGE` when the JIT refuses it (the error's
    /// message holds the JIT log); `ENOTSUP` on the CPU driver unless the
    /// host registered a host twin for this exact text.
    pub fn load_ptx(ptx: &str) -> Result<Module, Error> {
        Ok(Module {
            handle: result::module_load_ptx(ptx)?,
        })
    }

    /// Loads a cubin or fatbin image. `EIMAGE` for a malformed image or one
    /// the driver refuses; `ENOTSUP` on the CPU driver.
    pub fn load_cubin(image: &[u8]) -> Result<Module, Error> {
        Ok(Module {
            handle: result::module_load_cubin(image)?,
        })
    }

    /// The kernel (`.entry`) called `name`. `ENOENT` when there is none.
    ///
    /// Each call issues a new function handle, and the ABI has no call that
    /// releases one: it lives until the guest ends. Look a kernel up once
    /// and keep the [`Function`] (it is `Copy`), or a loop of look-ups runs
    /// into the guest's handle limit (`ELIMIT`).
    pub fn function(&self, name: &str) -> Result<Function, Error> {
        Ok(Function {
            handle: result::function_get(self.handle, name)?,
        })
    }

    /// The module's handle, for the raw layers. Valid until the module drops.
    pub const fn handle(&self) -> u64 {
        self.handle
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        // Cannot fail for a handle we own.
        let _ = result::module_unload(self.handle);
    }
}

/// A kernel of a module. Valid until the guest ends, whether or not its
/// [`Module`] is still alive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Function {
    handle: u64,
}

impl Function {
    /// Starts describing a launch of this kernel over `grid` blocks of
    /// `block` threads (a `u32`, a pair or a triple). Add the arguments in
    /// the kernel's parameter order, then [`Launch::run`] or
    /// [`Launch::submit`] it.
    pub fn launch<'a>(&self, grid: impl Into<Dim3>, block: impl Into<Dim3>) -> Launch<'a> {
        Launch::new(self.handle, grid.into(), block.into())
    }

    /// The function's handle, for the raw layers.
    pub const fn handle(&self) -> u64 {
        self.handle
    }
}
