//! Host twins of the PTX kernels TensorWasm ships (`kernels/test/`), so the
//! example guests run on the CPU driver too. A twin is registered for one
//! exact PTX text (see `CpuDriver::register_ptx_twin`); guests that bring
//! other PTX still need the CUDA driver. Twins check every range they touch
//! against the driver's live memory, so a guest's bad sizes fail the launch
//! instead of touching host memory it does not own.

use std::sync::Arc;

use tensorwasm_core::{DevicePtr, KernelParam};
use tensorwasm_cpu::{BlockContext, CpuDriver, HostKernelFn, WeakCpuDriver};

/// `kernels/test/vector_add.ptx`: `vadd(a, b, c, n)`, `c[i] = a[i] + b[i]`.
pub const VECTOR_ADD_PTX: &str = include_str!("../../kernels/test/vector_add.ptx");

/// Registers every twin on `driver`.
pub fn register(driver: &CpuDriver) {
    let weak = driver.downgrade();
    let vadd: Arc<HostKernelFn> = Arc::new(move |block, params| vadd(&weak, block, params));
    driver.register_ptx_twin(VECTOR_ADD_PTX, [("vadd", vadd)]);
}

/// The `n`-th parameter as a pointer, or a failed launch.
fn ptr(params: &[KernelParam], n: usize) -> u64 {
    match params.get(n).copied().and_then(KernelParam::as_ptr) {
        Some(p) => p.0,
        None => panic!("parameter {n} is not a pointer"),
    }
}

/// The twin of `vadd`: one block's elements, like the PTX's one thread each.
fn vadd(driver: &WeakCpuDriver, block: &BlockContext, params: &[KernelParam]) {
    let Some(driver) = driver.upgrade() else {
        panic!("the driver is gone");
    };
    if params.len() != 4 {
        panic!("vadd takes 4 parameters, got {}", params.len());
    }
    let (a, b, c) = (ptr(params, 0), ptr(params, 1), ptr(params, 2));
    let n = match params[3] {
        KernelParam::I32(n) => n as u32 as usize,
        other => panic!("parameter 3 (n) must be a 32-bit integer, got {other:?}"),
    };
    let width = block.block_dim.x as usize;
    let first = (block.block_idx.x as usize).saturating_mul(width);
    let end = first.saturating_add(width).min(n);
    if first >= end {
        return;
    }
    let count = end - first;
    let span = |base: u64| -> usize {
        let start = base
            .checked_add(first as u64 * 4)
            .expect("address overflow");
        let bytes = count * 4;
        if !driver.covers(DevicePtr(start), bytes) {
            panic!("vadd: {bytes} bytes at {start:#x} are outside the driver's live memory");
        }
        start as usize
    };
    let (a, b, c) = (span(a), span(b), span(c));
    for i in 0..count {
        let at = |base: usize| base + i * 4;
        // SAFETY: all three spans lie in live allocations of this driver
        // (checked above), which the guest cannot free while the launch
        // runs (frees wait for the driver's streams). Unaligned reads and
        // writes, since guest offsets need not be 4-aligned.
        unsafe {
            let x = std::ptr::with_exposed_provenance::<f32>(at(a)).read_unaligned();
            let y = std::ptr::with_exposed_provenance::<f32>(at(b)).read_unaligned();
            std::ptr::with_exposed_provenance_mut::<f32>(at(c)).write_unaligned(x + y);
        }
    }
}
