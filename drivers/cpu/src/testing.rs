//! Helpers for the unit tests: the suite's seeded PRNG and a small driver.

use tensorwasm_core::DevicePtr;

use crate::CpuDriver;

pub(crate) use tensorwasm_conformance::Rng;

pub(crate) fn driver(capacity: u64) -> CpuDriver {
    CpuDriver::with_capacity(capacity).expect("a CPU driver")
}

/// A kernel parameter's address as a typed host pointer.
pub(crate) fn host<T>(address: DevicePtr) -> *mut T {
    std::ptr::with_exposed_provenance_mut(address.0 as usize)
}
