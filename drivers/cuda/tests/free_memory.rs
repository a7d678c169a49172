//! Free device memory returns to its starting value after everything is
//! dropped. Alone in its binary: other tests would allocate concurrently.

mod common;

#[test]
#[ignore = "needs a CUDA GPU"]
fn free_memory_returns_after_drop() {
    let d = common::driver();
    tensorwasm_conformance::free_memory_returns(&d, common::vadd);
}
