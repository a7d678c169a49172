//! The shared driver conformance suite, on a real GPU.

mod common;

tensorwasm_conformance::conformance_tests!(
    make: common::driver(),
    vadd: common::vadd,
    elements: 16 << 20,
    #[ignore = "needs a CUDA GPU"],
);
