//! The shared driver conformance suite on the CPU driver (runs in CI).

use std::sync::Arc;

use tensorwasm_core::{GpuDriver, KernelParam};
use tensorwasm_cpu::{BlockContext, CpuDriver, CpuFunction, HostKernelFn};

/// A driver with a 4 GiB budget: enough for every check, small enough that
/// the out-of-memory checks stay cheap.
fn driver() -> CpuDriver {
    CpuDriver::with_capacity(4 << 30).expect("CPU driver")
}

/// `vadd(a, b, c, n)`: the host-kernel twin of `kernels/test/vector_add.ptx`.
fn vadd(d: &CpuDriver) -> CpuFunction {
    let kernel: Arc<HostKernelFn> = Arc::new(|b: &BlockContext, p: &[KernelParam]| {
        let ptr = |i: usize| p[i].as_ptr().expect("pointer parameter").0 as usize;
        let a = std::ptr::with_exposed_provenance::<f32>(ptr(0));
        let bb = std::ptr::with_exposed_provenance::<f32>(ptr(1));
        let c = std::ptr::with_exposed_provenance_mut::<f32>(ptr(2));
        let n = p[3].as_i32().expect("n") as usize;
        let first = b.block_idx.x as usize * b.block_dim.x as usize;
        for i in first..(first + b.block_dim.x as usize).min(n) {
            // SAFETY: the suite passes three allocations of at least n floats
            // that outlive the launch; i < n.
            unsafe { c.add(i).write(a.add(i).read() + bb.add(i).read()) };
        }
    });
    d.function(&d.host_module([("vadd", kernel)]), "vadd")
        .expect("vadd")
}

tensorwasm_conformance::conformance_tests!(make: driver(), vadd: vadd, elements: 1_000_003);

// Each check makes its own driver, whose accounting is its own, so these
// run alongside the others.
#[test]
fn free_memory_returns_after_drop() {
    tensorwasm_conformance::free_memory_returns(&driver(), vadd);
}

#[test]
fn managed_memory_does_not_drift() {
    tensorwasm_conformance::managed_memory_does_not_drift(&driver());
}
