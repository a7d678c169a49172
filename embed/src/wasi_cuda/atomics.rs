//! The atomic intrinsics (`tensorwasm_kernel.atomic_*`, docs/kernels.md,
//! "Atomics") in the guest's own code: outside a kernel a guest runs on one
//! thread, so each is a plain read-modify-write of its memory with the
//! checks a kernel makes (out of bounds, misaligned: Wasm's traps). The
//! Rust SDK's kernels therefore run unchanged as ordinary guest code, which
//! is how the examples check a kernel's results on the CPU. Inside a kernel
//! the translator lowers the same imports (`core::lower::atomic`).

use tensorwasm_core::lower::INTRINSIC_MODULE;
use tensorwasm_core::lower::atomic::{AtomicIntrinsic, add_f32_bits};
use tensorwasm_core::lower::translate::WasmType;
use wasmtime::{Caller, Extern, FuncType, Linker, Trap, Val, ValType};

/// Registers every atomic intrinsic on `linker`.
pub(super) fn add_to_linker<T: 'static>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    for which in AtomicIntrinsic::ALL {
        let ty = FuncType::new(
            linker.engine(),
            which.params().map(val_type),
            [val_type(which.value_type())],
        );
        linker.func_new(
            INTRINSIC_MODULE,
            which.import_name(),
            ty,
            move |mut caller: Caller<'_, T>, params: &[Val], results: &mut [Val]| {
                let memory = match caller.get_export("memory") {
                    Some(Extern::Memory(m)) => m,
                    _ => wasmtime::bail!(
                        "{INTRINSIC_MODULE}.{} needs the guest's exported memory",
                        which.import_name()
                    ),
                };
                let bytes = memory.data_mut(&mut caller);
                results[0] = apply(which, bytes, params)?;
                Ok(())
            },
        )?;
    }
    Ok(())
}

/// The wasmtime type of a kernel's value type.
pub(super) fn val_type(ty: WasmType) -> ValType {
    match ty {
        WasmType::I32 => ValType::I32,
        WasmType::I64 => ValType::I64,
        WasmType::F32 => ValType::F32,
        WasmType::F64 => ValType::F64,
    }
}

/// One intrinsic on `memory`: the old value.
fn apply(which: AtomicIntrinsic, memory: &mut [u8], params: &[Val]) -> wasmtime::Result<Val> {
    let addr = u64::from(params[0].unwrap_i32().cast_unsigned());
    let size = match which.value_type() {
        WasmType::I64 | WasmType::F64 => 8u64,
        _ => 4,
    };
    if addr + size > memory.len() as u64 {
        return Err(Trap::MemoryOutOfBounds.into());
    }
    if addr % size != 0 {
        return Err(Trap::HeapMisaligned.into());
    }
    let at = addr as usize..(addr + size) as usize;
    let old = memory[at.clone()]
        .iter()
        .rev()
        .fold(0u64, |v, b| v << 8 | u64::from(*b));
    let operands: Vec<u64> = params[1..]
        .iter()
        .map(|p| match *p {
            Val::I32(v) => u64::from(v.cast_unsigned()),
            Val::I64(v) => v.cast_unsigned(),
            Val::F32(bits) => u64::from(bits),
            _ => 0,
        })
        .collect();
    let new = which.new_value(old, &operands, add_f32_bits);
    memory[at].copy_from_slice(&new.to_le_bytes()[..size as usize]);
    Ok(match which.value_type() {
        WasmType::I64 => Val::I64(old.cast_signed()),
        WasmType::F32 => Val::F32(old as u32),
        _ => Val::I32((old as u32).cast_signed()),
    })
}
