//! The built-in tensor ops for components (`tensor-ops` in `wit/gpu.wit`):
//! each call's `tensor` records become `wasi_cuda` operand descriptors over
//! buffer handles, checked by core's `check_tensor_op` and queued by the
//! context, as `tensor_op` is for a core module.

use tensorwasm_core::abi::{
    AbiError, Handle,
    tensor::{DType, OperandDescriptor, TensorHeader, TensorOpKind},
};
use wasmtime::component::Resource;

use crate::kernel::KernelTarget;

use super::{
    GpuError, GpuLaunch, GpuView,
    bindings::tensorwasm::gpu::tensor_ops::{self, Dtype, ReduceOp, Tensor},
};

/// An operand descriptor for `tensor` in buffer `handle`: contiguous when
/// it gives no strides, else with its strides (checked by core, as any
/// descriptor).
fn operand(handle: Handle, tensor: &Tensor) -> OperandDescriptor {
    let dtype = match tensor.dtype {
        Dtype::F32 => DType::F32,
        Dtype::Bf16 => DType::Bf16,
        Dtype::F16 => DType::F16,
    };
    let d = OperandDescriptor::buffer(handle, tensor.offset, dtype, &tensor.shape);
    // A rank core refuses must reach it as such, not cut to MAX_RANK.
    let d = OperandDescriptor {
        rank: u32::try_from(tensor.shape.len()).unwrap_or(u32::MAX),
        ..d
    };
    if tensor.strides.is_empty() {
        d
    } else {
        d.with_strides(&tensor.strides)
    }
}

impl<D: KernelTarget + Clone + 'static> GpuView<'_, D> {
    /// Checks and queues built-in op `header` on `tensors` (waiting for a
    /// free launch slot if need be) and returns its launch.
    async fn tensor_op(
        &mut self,
        call: &str,
        header: TensorHeader,
        tensors: &[&Tensor],
    ) -> Result<Resource<GpuLaunch>, GpuError> {
        let mut operands = Vec::with_capacity(tensors.len());
        for (i, tensor) in tensors.iter().enumerate() {
            let (rank, strides) = (tensor.shape.len(), tensor.strides.len());
            if strides != 0 && strides != rank {
                let e =
                    AbiError::invalid(format!("operand {i}: {strides} strides for {rank} extents"));
                return self.checked(call, Err(e));
            }
            operands.push(operand(self.buffer(&tensor.buffer)?, tensor));
        }
        let queued = self
            .gpu
            .cuda
            .queue_with_room(|cuda| cuda.tensor_op_on_buffers(&header, &operands))
            .await;
        let handle = self.checked(call, queued)?;
        self.launch(handle)
    }
}

impl<D: KernelTarget + Clone + 'static> tensor_ops::Host for GpuView<'_, D> {
    async fn gemm(
        &mut self,
        a: Tensor,
        b: Tensor,
        c: Tensor,
        alpha: f32,
        beta: f32,
        allow_tf32: bool,
    ) -> Result<Resource<GpuLaunch>, GpuError> {
        let header = TensorHeader {
            precision: u32::from(allow_tf32),
            alpha,
            beta,
            ..TensorHeader::new(TensorOpKind::Gemm)
        };
        self.tensor_op("gemm", header, &[&a, &b, &c]).await
    }

    async fn add(
        &mut self,
        a: Tensor,
        b: Tensor,
        y: Tensor,
    ) -> Result<Resource<GpuLaunch>, GpuError> {
        let header = TensorHeader::new(TensorOpKind::Add);
        self.tensor_op("add", header, &[&a, &b, &y]).await
    }

    async fn mul(
        &mut self,
        a: Tensor,
        b: Tensor,
        y: Tensor,
    ) -> Result<Resource<GpuLaunch>, GpuError> {
        let header = TensorHeader::new(TensorOpKind::Mul);
        self.tensor_op("mul", header, &[&a, &b, &y]).await
    }

    async fn relu(&mut self, x: Tensor, y: Tensor) -> Result<Resource<GpuLaunch>, GpuError> {
        let header = TensorHeader::new(TensorOpKind::Relu);
        self.tensor_op("relu", header, &[&x, &y]).await
    }

    async fn gelu(&mut self, x: Tensor, y: Tensor) -> Result<Resource<GpuLaunch>, GpuError> {
        let header = TensorHeader::new(TensorOpKind::Gelu);
        self.tensor_op("gelu", header, &[&x, &y]).await
    }

    async fn softmax(&mut self, x: Tensor, y: Tensor) -> Result<Resource<GpuLaunch>, GpuError> {
        let header = TensorHeader::new(TensorOpKind::Softmax);
        self.tensor_op("softmax", header, &[&x, &y]).await
    }

    async fn layernorm(
        &mut self,
        x: Tensor,
        gamma: Tensor,
        beta: Tensor,
        y: Tensor,
        eps: f32,
    ) -> Result<Resource<GpuLaunch>, GpuError> {
        let header = TensorHeader {
            eps,
            ..TensorHeader::new(TensorOpKind::LayerNorm)
        };
        self.tensor_op("layernorm", header, &[&x, &gamma, &beta, &y])
            .await
    }

    async fn reduce(
        &mut self,
        op: ReduceOp,
        x: Tensor,
        y: Tensor,
        axis: i32,
    ) -> Result<Resource<GpuLaunch>, GpuError> {
        let kind = match op {
            ReduceOp::Sum => TensorOpKind::ReduceSum,
            ReduceOp::Max => TensorOpKind::ReduceMax,
            ReduceOp::Mean => TensorOpKind::ReduceMean,
        };
        let header = TensorHeader {
            axis,
            ..TensorHeader::new(kind)
        };
        self.tensor_op("reduce", header, &[&x, &y]).await
    }

    async fn transpose(&mut self, x: Tensor, y: Tensor) -> Result<Resource<GpuLaunch>, GpuError> {
        let header = TensorHeader::new(TensorOpKind::Transpose);
        self.tensor_op("transpose", header, &[&x, &y]).await
    }
}
