//! Helpers shared by the CUDA test binaries.

#![allow(dead_code)]

use tensorwasm_core::GpuDriver;
use tensorwasm_cuda::{CudaDriver, CudaFunction};

/// The hand-written vector-add test kernel.
pub const VECTOR_ADD_PTX: &str = include_str!("../../../../kernels/test/vector_add.ptx");
/// The same kernel assembled for sm_90 (see kernels/test/README.md).
pub const VECTOR_ADD_SM90: &[u8] =
    include_bytes!("../../../../kernels/test/vector_add.sm_90.cubin");

/// Device 0, or a panic that says why CUDA is unavailable.
pub fn driver() -> CudaDriver {
    CudaDriver::new(0).unwrap_or_else(|e| panic!("CUDA unavailable: {e}"))
}

/// Loads `vadd` from the PTX test kernel.
pub fn vadd(d: &CudaDriver) -> CudaFunction {
    let m = d
        .load_ptx(VECTOR_ADD_PTX)
        .unwrap_or_else(|e| panic!("load_ptx: {e}"));
    d.function(&m, "vadd")
        .unwrap_or_else(|e| panic!("function: {e}"))
}
