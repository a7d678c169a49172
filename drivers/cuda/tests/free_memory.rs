//! Free device memory returns to its starting value after everything is
//! dropped. Alone in its binary (other tests would allocate concurrently),
//! and its two tests run one after the other.

use std::sync::Mutex;

mod common;

static ALONE: Mutex<()> = Mutex::new(());

#[test]
#[ignore = "needs a CUDA GPU"]
fn free_memory_returns_after_drop() {
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    tensorwasm_conformance::free_memory_returns(&common::driver(), common::vadd);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn managed_memory_does_not_drift() {
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    tensorwasm_conformance::managed_memory_does_not_drift(&common::driver());
}
