//! TensorWasm's built-in tensor kernels (docs/tensor-ops.md): the PTX
//! compiled from `kernels/src/*.cu` ([`ptx`]), the table that turns a
//! checked [`TensorOp`](tensorwasm_core::abi::tensor::TensorOp) into a launch
//! ([`table`]), and the float64 reference oracles the tests compare every
//! kernel against ([`oracle`]). Running anything belongs to the drivers and
//! `tensorwasm-embed`.

pub mod oracle;
pub mod ptx;
pub mod table;
