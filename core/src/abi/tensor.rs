//! Tensor-op descriptors: what a guest passes to `tensor_op`, decoded into
//! a checked [`TensorOp`] whose every operand lies inside the guest's memory
//! or a live buffer, is aligned to its element, has a shape whose products
//! do not overflow, and has the layout its op needs (docs/tensor-ops.md).
//! Which kernel runs a `TensorOp`, and with what geometry, is the business
//! of `tensorwasm-kernels`; nothing here calls a driver.
//!
//! Layout (`docs/ABI.md`, little-endian): a 32-byte header — `u32 op`,
//! `u32 precision`, `u32 operand_count`, `u32 flags`, `f32 alpha`,
//! `f32 beta`, `f32 eps`, `i32 axis` — followed by `operand_count` 96-byte
//! operands — `u32 location`, `u32 dtype`, `u64 address`, `u64 offset`,
//! `u32 rank`, `u32 reserved`, `u64 shape[4]`, `i64 strides[4]`.

use alloc::{format, vec::Vec};
use core::fmt;

use super::args::GuestMemoryRef;
use super::errno::{AbiError, Errno};
use super::guest::guest_slice;
use super::handle::Handle;
use crate::memory::DevicePtr;

/// Bytes in the descriptor header.
pub const TENSOR_HEADER_SIZE: usize = 32;
/// Bytes in one operand.
pub const TENSOR_OPERAND_SIZE: usize = 96;
/// The most dimensions an operand may have.
pub const MAX_RANK: usize = 4;
/// The most operands an op takes.
pub const MAX_OPERANDS: usize = 4;

/// A built-in op: the header's `op` field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[repr(u32)]
pub enum TensorOpKind {
    /// `C = alpha * A @ B + beta * C`, optionally batched.
    Gemm = 1,
    /// Sum over one axis.
    ReduceSum = 2,
    /// Maximum over one axis.
    ReduceMax = 3,
    /// Mean over one axis.
    ReduceMean = 4,
    /// Softmax over the last axis.
    Softmax = 5,
    /// Layer normalization over the last axis.
    LayerNorm = 6,
    /// `Y = A + B`, B broadcast over A's leading dimensions.
    Add = 7,
    /// `Y = A * B`, B broadcast over A's leading dimensions.
    Mul = 8,
    /// `Y = max(X, 0)`.
    Relu = 9,
    /// `Y = GELU(X)`, the exact erf form.
    Gelu = 10,
    /// `Y = X^T` per batch.
    Transpose = 11,
}

impl TensorOpKind {
    /// Every op, in `op` order.
    pub const ALL: [TensorOpKind; 11] = [
        TensorOpKind::Gemm,
        TensorOpKind::ReduceSum,
        TensorOpKind::ReduceMax,
        TensorOpKind::ReduceMean,
        TensorOpKind::Softmax,
        TensorOpKind::LayerNorm,
        TensorOpKind::Add,
        TensorOpKind::Mul,
        TensorOpKind::Relu,
        TensorOpKind::Gelu,
        TensorOpKind::Transpose,
    ];

    /// The op with this value, or `None`.
    pub fn from_u32(op: u32) -> Option<TensorOpKind> {
        TensorOpKind::ALL.into_iter().find(|k| *k as u32 == op)
    }

    /// The op's name in docs and error text.
    pub const fn name(self) -> &'static str {
        match self {
            TensorOpKind::Gemm => "gemm",
            TensorOpKind::ReduceSum => "reduce_sum",
            TensorOpKind::ReduceMax => "reduce_max",
            TensorOpKind::ReduceMean => "reduce_mean",
            TensorOpKind::Softmax => "softmax",
            TensorOpKind::LayerNorm => "layernorm",
            TensorOpKind::Add => "add",
            TensorOpKind::Mul => "mul",
            TensorOpKind::Relu => "relu",
            TensorOpKind::Gelu => "gelu",
            TensorOpKind::Transpose => "transpose",
        }
    }

    /// How many operands the op takes.
    pub const fn operand_count(self) -> usize {
        match self {
            TensorOpKind::Gemm | TensorOpKind::Add | TensorOpKind::Mul => 3,
            TensorOpKind::LayerNorm => 4,
            _ => 2,
        }
    }
}

impl fmt::Display for TensorOpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An operand's element type: its `dtype` field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[repr(u32)]
pub enum DType {
    /// IEEE binary32.
    F32 = 1,
    /// bfloat16 (the top half of a binary32).
    Bf16 = 2,
    /// IEEE binary16.
    F16 = 3,
}

impl DType {
    /// The dtype with this value, or `None`.
    pub const fn from_u32(dtype: u32) -> Option<DType> {
        match dtype {
            1 => Some(DType::F32),
            2 => Some(DType::Bf16),
            3 => Some(DType::F16),
            _ => None,
        }
    }

    /// Bytes per element.
    pub const fn size(self) -> u64 {
        match self {
            DType::F32 => 4,
            DType::Bf16 | DType::F16 => 2,
        }
    }

    /// The dtype's name in error text.
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::Bf16 => "bf16",
            DType::F16 => "f16",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The arithmetic a GEMM runs: its input dtype and, for f32 inputs,
/// whether Tensor Cores may round them to TF32 (header `precision` 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum GemmPrecision {
    /// f32 inputs, f32 arithmetic.
    F32,
    /// f32 inputs rounded to TF32 (10-bit mantissa), f32 accumulate.
    Tf32,
    /// bf16 inputs, f32 accumulate.
    Bf16,
    /// f16 inputs, f32 accumulate.
    F16,
}

/// Where an operand lives: its `location` field and address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum OperandLocation {
    /// In the guest's linear memory, at this offset.
    Guest(u32),
    /// In a device buffer, at this byte offset.
    Buffer(Handle, u64),
}

/// A checked operand: its device address (first element), dtype, shape
/// and element strides, and the bytes it spans.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Operand {
    /// The device address of element `[0, .., 0]`.
    pub ptr: DevicePtr,
    /// Where the guest put it.
    pub location: OperandLocation,
    /// Element type.
    pub dtype: DType,
    /// Dimensions in use.
    pub rank: usize,
    /// Extents (every one at least 1); unused entries are 1.
    pub shape: [u64; MAX_RANK],
    /// Strides in elements; unused entries are 0.
    pub strides: [u64; MAX_RANK],
    /// Bytes from `ptr` to one past the last element.
    pub span: u64,
}

impl Operand {
    /// The operand's extents.
    pub fn dims(&self) -> &[u64] {
        &self.shape[..self.rank]
    }

    /// The operand's strides.
    pub fn stride(&self) -> &[u64] {
        &self.strides[..self.rank]
    }

    /// Elements (the product of the extents; checked not to overflow).
    pub fn numel(&self) -> u64 {
        self.dims().iter().product()
    }

    /// Row-major with no gaps.
    pub fn is_contiguous(&self) -> bool {
        let mut want = 1u64;
        for (&d, &s) in self.dims().iter().zip(self.stride()).rev() {
            if d != 1 && s != want {
                return false;
            }
            want *= d;
        }
        true
    }

    /// The byte range `[start, end)` the operand may touch.
    fn bytes(&self) -> (u64, u64) {
        (self.ptr.0, self.ptr.0 + self.span)
    }
}

/// A GEMM, checked: `C[b] = alpha * A[b] @ B[b] + beta * C[b]`, row-major,
/// strides in elements.
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Gemm {
    /// Input dtype and arithmetic.
    pub precision: GemmPrecision,
    /// Batches (grid z).
    pub batch: u64,
    /// Rows of A and C.
    pub m: u64,
    /// Columns of B and C.
    pub n: u64,
    /// Columns of A, rows of B.
    pub k: u64,
    /// A, B (inputs) and C (f32 output).
    pub a: DevicePtr,
    /// See `a`.
    pub b: DevicePtr,
    /// See `a`.
    pub c: DevicePtr,
    /// Row strides of A, B and C.
    pub lda: u64,
    /// See `lda`.
    pub ldb: u64,
    /// See `lda`.
    pub ldc: u64,
    /// Batch strides of A, B and C (0 for an unbatched operand).
    pub stride_a: u64,
    /// See `stride_a`.
    pub stride_b: u64,
    /// See `stride_a`.
    pub stride_c: u64,
    /// Scale of the product.
    pub alpha: f32,
    /// Scale of C's old value (0: C is not read).
    pub beta: f32,
}

/// A reduction's operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ReduceOp {
    /// Sum.
    Sum,
    /// Maximum (NaN propagates).
    Max,
    /// Arithmetic mean.
    Mean,
}

/// An elementwise op of two inputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum BinaryOp {
    /// `a + b`.
    Add,
    /// `a * b`.
    Mul,
}

/// An elementwise op of one input.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum UnaryOp {
    /// `max(x, 0)`.
    Relu,
    /// `0.5 x (1 + erf(x / sqrt 2))`.
    Gelu,
}

/// A checked tensor op, in the terms its kernel takes. Every pointer is a
/// device address the op may touch, with the extents that follow from the
/// sizes here; all f32 unless a field says otherwise.
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum TensorOp {
    /// A (batched) matrix product.
    Gemm(Gemm),
    /// `x` viewed as `[outer, n, inner]` reduced over `n` into `y`
    /// `[outer, inner]`.
    Reduce {
        /// The operator.
        op: ReduceOp,
        /// Input.
        x: DevicePtr,
        /// Output.
        y: DevicePtr,
        /// Product of the extents before the axis.
        outer: u64,
        /// The axis' extent.
        n: u64,
        /// Product of the extents after the axis.
        inner: u64,
    },
    /// Softmax of each row of `x` (`rows` x `cols`, contiguous) into `y`.
    Softmax {
        /// Input.
        x: DevicePtr,
        /// Output.
        y: DevicePtr,
        /// Rows.
        rows: u64,
        /// Row length.
        cols: u64,
    },
    /// Layer norm of each row of `x` into `y`, scaled by `gamma` and
    /// shifted by `beta` (both `cols` long).
    LayerNorm {
        /// Input.
        x: DevicePtr,
        /// Scale.
        gamma: DevicePtr,
        /// Shift.
        beta: DevicePtr,
        /// Output.
        y: DevicePtr,
        /// Rows.
        rows: u64,
        /// Row length.
        cols: u64,
        /// Added to the variance.
        eps: f32,
    },
    /// `y[i] = a[i] op b[i % b_period]` for `i < n`.
    Binary {
        /// The operator.
        op: BinaryOp,
        /// First input.
        a: DevicePtr,
        /// Second input, `b_period` elements.
        b: DevicePtr,
        /// Output.
        y: DevicePtr,
        /// Elements of `a` and `y`.
        n: u64,
        /// Elements of `b` (divides `n`).
        b_period: u64,
    },
    /// `y[i] = op(x[i])` for `i < n`.
    Unary {
        /// The operator.
        op: UnaryOp,
        /// Input.
        x: DevicePtr,
        /// Output.
        y: DevicePtr,
        /// Elements.
        n: u64,
    },
    /// Per batch, `x` (`rows` x `cols`) transposed into `y`.
    Transpose {
        /// Input.
        x: DevicePtr,
        /// Output.
        y: DevicePtr,
        /// Matrices.
        batch: u64,
        /// Rows of `x`.
        rows: u64,
        /// Columns of `x`.
        cols: u64,
    },
}

impl TensorOp {
    /// The arithmetic the op asks for: multiply-adds for a GEMM
    /// (`batch * m * n * k`), element operations otherwise (each input
    /// element read once; softmax and layer norm count three passes).
    /// Saturates at `u64::MAX`. A tenant's quota bounds it
    /// ([`TenantQuota::tensor_work`](crate::quota::TenantQuota::tensor_work)):
    /// a GEMM whose operands broadcast (batch stride 0) can ask for far
    /// more than its buffers' sizes suggest.
    pub fn work(&self) -> u64 {
        let product = |xs: &[u64]| xs.iter().fold(1u64, |acc, &x| acc.saturating_mul(x));
        match *self {
            TensorOp::Gemm(g) => product(&[g.batch, g.m, g.n, g.k]),
            TensorOp::Reduce {
                outer, n, inner, ..
            } => product(&[outer, n, inner]),
            TensorOp::Softmax { rows, cols, .. } | TensorOp::LayerNorm { rows, cols, .. } => {
                product(&[3, rows, cols])
            }
            TensorOp::Binary { n, .. } | TensorOp::Unary { n, .. } => n,
            TensorOp::Transpose {
                batch, rows, cols, ..
            } => product(&[batch, rows, cols]),
        }
    }

    /// The op's kind.
    pub fn kind(&self) -> TensorOpKind {
        match self {
            TensorOp::Gemm(_) => TensorOpKind::Gemm,
            TensorOp::Reduce { op, .. } => match op {
                ReduceOp::Sum => TensorOpKind::ReduceSum,
                ReduceOp::Max => TensorOpKind::ReduceMax,
                ReduceOp::Mean => TensorOpKind::ReduceMean,
            },
            TensorOp::Softmax { .. } => TensorOpKind::Softmax,
            TensorOp::LayerNorm { .. } => TensorOpKind::LayerNorm,
            TensorOp::Binary { op, .. } => match op {
                BinaryOp::Add => TensorOpKind::Add,
                BinaryOp::Mul => TensorOpKind::Mul,
            },
            TensorOp::Unary { op, .. } => match op {
                UnaryOp::Relu => TensorOpKind::Relu,
                UnaryOp::Gelu => TensorOpKind::Gelu,
            },
            TensorOp::Transpose { .. } => TensorOpKind::Transpose,
        }
    }
}

/// A descriptor's header, field by field (any bit pattern; the decoder
/// judges it).
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct TensorHeader {
    /// A [`TensorOpKind`] value.
    pub op: u32,
    /// GEMM: 0 for the inputs' own arithmetic, 1 to allow TF32 on f32
    /// inputs. 0 for every other op.
    pub precision: u32,
    /// Operands that follow.
    pub operand_count: u32,
    /// Reserved: 0.
    pub flags: u32,
    /// GEMM's alpha; 0 for every other op.
    pub alpha: f32,
    /// GEMM's beta; 0 for every other op.
    pub beta: f32,
    /// Layer norm's epsilon; 0 for every other op.
    pub eps: f32,
    /// Reductions' axis (negative counts from the end); 0 or -1 (the last
    /// axis) for softmax and layer norm; 0 for every other op.
    pub axis: i32,
}

/// An operand as it lies in guest memory (any bit pattern).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct OperandDescriptor {
    /// 0: guest memory (`address` is an offset); 1: a buffer (`address`
    /// is its handle, `offset` a byte offset into it).
    pub location: u32,
    /// A [`DType`] value.
    pub dtype: u32,
    /// Guest offset or buffer handle.
    pub address: u64,
    /// Byte offset into a buffer; 0 for guest memory.
    pub offset: u64,
    /// Dimensions in use, 1..=4.
    pub rank: u32,
    /// Reserved: 0.
    pub reserved: u32,
    /// Extents; entries past `rank` are 0.
    pub shape: [u64; MAX_RANK],
    /// Strides in elements; entries past `rank` are 0.
    pub strides: [i64; MAX_RANK],
}

impl OperandDescriptor {
    /// A contiguous operand of `shape` at guest offset `offset`.
    pub fn guest(offset: u32, dtype: DType, shape: &[u64]) -> Self {
        OperandDescriptor::contiguous(0, u64::from(offset), 0, dtype, shape)
    }

    /// A contiguous operand of `shape` at `offset` bytes into `buffer`.
    pub fn buffer(buffer: Handle, offset: u64, dtype: DType, shape: &[u64]) -> Self {
        OperandDescriptor::contiguous(1, buffer.0, offset, dtype, shape)
    }

    fn contiguous(location: u32, address: u64, offset: u64, dtype: DType, shape: &[u64]) -> Self {
        let rank = shape.len().min(MAX_RANK);
        let mut d = OperandDescriptor {
            location,
            dtype: dtype as u32,
            address,
            offset,
            rank: rank as u32,
            reserved: 0,
            shape: [0; MAX_RANK],
            strides: [0; MAX_RANK],
        };
        let mut stride = 1i64;
        for i in (0..rank).rev() {
            d.shape[i] = shape[i];
            d.strides[i] = stride;
            stride = stride.wrapping_mul(shape[i] as i64);
        }
        d
    }

    /// The same operand with these strides (in elements).
    pub fn with_strides(mut self, strides: &[i64]) -> Self {
        for (i, s) in strides.iter().take(MAX_RANK).enumerate() {
            self.strides[i] = *s;
        }
        self
    }

    /// The operand's 96 bytes.
    pub fn encode(&self) -> [u8; TENSOR_OPERAND_SIZE] {
        let mut out = [0u8; TENSOR_OPERAND_SIZE];
        out[0..4].copy_from_slice(&self.location.to_le_bytes());
        out[4..8].copy_from_slice(&self.dtype.to_le_bytes());
        out[8..16].copy_from_slice(&self.address.to_le_bytes());
        out[16..24].copy_from_slice(&self.offset.to_le_bytes());
        out[24..28].copy_from_slice(&self.rank.to_le_bytes());
        out[28..32].copy_from_slice(&self.reserved.to_le_bytes());
        for i in 0..MAX_RANK {
            out[32 + 8 * i..40 + 8 * i].copy_from_slice(&self.shape[i].to_le_bytes());
            out[64 + 8 * i..72 + 8 * i].copy_from_slice(&self.strides[i].to_le_bytes());
        }
        out
    }

    fn decode(bytes: &[u8]) -> OperandDescriptor {
        let mut shape = [0u64; MAX_RANK];
        let mut strides = [0i64; MAX_RANK];
        for i in 0..MAX_RANK {
            shape[i] = le_u64(bytes, 32 + 8 * i);
            strides[i] = le_u64(bytes, 64 + 8 * i) as i64;
        }
        OperandDescriptor {
            location: le_u32(bytes, 0),
            dtype: le_u32(bytes, 4),
            address: le_u64(bytes, 8),
            offset: le_u64(bytes, 16),
            rank: le_u32(bytes, 24),
            reserved: le_u32(bytes, 28),
            shape,
            strides,
        }
    }
}

impl TensorHeader {
    /// A header for `op` with `operand_count` operands and every other
    /// field 0.
    pub fn new(op: TensorOpKind) -> Self {
        TensorHeader {
            op: op as u32,
            precision: 0,
            operand_count: op.operand_count() as u32,
            flags: 0,
            alpha: 0.0,
            beta: 0.0,
            eps: 0.0,
            axis: 0,
        }
    }

    /// The header's 32 bytes.
    pub fn encode(&self) -> [u8; TENSOR_HEADER_SIZE] {
        let mut out = [0u8; TENSOR_HEADER_SIZE];
        out[0..4].copy_from_slice(&self.op.to_le_bytes());
        out[4..8].copy_from_slice(&self.precision.to_le_bytes());
        out[8..12].copy_from_slice(&self.operand_count.to_le_bytes());
        out[12..16].copy_from_slice(&self.flags.to_le_bytes());
        out[16..20].copy_from_slice(&self.alpha.to_bits().to_le_bytes());
        out[20..24].copy_from_slice(&self.beta.to_bits().to_le_bytes());
        out[24..28].copy_from_slice(&self.eps.to_bits().to_le_bytes());
        out[28..32].copy_from_slice(&self.axis.to_le_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> TensorHeader {
        TensorHeader {
            op: le_u32(bytes, 0),
            precision: le_u32(bytes, 4),
            operand_count: le_u32(bytes, 8),
            flags: le_u32(bytes, 12),
            alpha: f32::from_bits(le_u32(bytes, 16)),
            beta: f32::from_bits(le_u32(bytes, 20)),
            eps: f32::from_bits(le_u32(bytes, 24)),
            axis: le_u32(bytes, 28) as i32,
        }
    }
}

/// A whole descriptor's bytes: the header, then the operands.
pub fn encode_tensor_op(header: &TensorHeader, operands: &[OperandDescriptor]) -> Vec<u8> {
    let mut out = Vec::with_capacity(TENSOR_HEADER_SIZE + operands.len() * TENSOR_OPERAND_SIZE);
    out.extend_from_slice(&header.encode());
    for o in operands {
        out.extend_from_slice(&o.encode());
    }
    out
}

fn le_u32(bytes: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(b)
}

fn le_u64(bytes: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(b)
}

/// Decodes and checks the descriptor at `ptr .. ptr + len` of the guest's
/// memory `mem` (whose device view is `guest`). `buffer` resolves a buffer
/// handle to its device address and length (and may keep the buffer alive
/// for the launch); a bad handle is its error. Every failure is an
/// [`AbiError`] naming the operand and the rule it broke; nothing is
/// launched for it.
pub fn decode_tensor_op(
    mem: &[u8],
    guest: &GuestMemoryRef,
    ptr: u32,
    len: u32,
    buffer: &mut dyn FnMut(Handle) -> Result<(DevicePtr, u64), AbiError>,
) -> Result<TensorOp, AbiError> {
    let bytes = guest_slice(mem, ptr, u64::from(len))?;
    if bytes.len() < TENSOR_HEADER_SIZE {
        return Err(AbiError::invalid(format!(
            "descriptor is {} bytes; the header alone is {TENSOR_HEADER_SIZE}",
            bytes.len()
        )));
    }
    let header = TensorHeader::decode(bytes);
    let kind = TensorOpKind::from_u32(header.op)
        .ok_or_else(|| AbiError::invalid(format!("op {} is not a built-in op", header.op)))?;
    let count = header.operand_count as usize;
    if count != kind.operand_count() {
        return Err(AbiError::invalid(format!(
            "{kind} takes {} operands; operand_count is {}",
            kind.operand_count(),
            header.operand_count
        )));
    }
    let want = TENSOR_HEADER_SIZE + count * TENSOR_OPERAND_SIZE;
    if bytes.len() != want {
        return Err(AbiError::invalid(format!(
            "descriptor is {} bytes; {kind} with {count} operands needs {want}",
            bytes.len()
        )));
    }
    let descriptors: Vec<OperandDescriptor> = (0..count)
        .map(|i| {
            let at = TENSOR_HEADER_SIZE + i * TENSOR_OPERAND_SIZE;
            OperandDescriptor::decode(&bytes[at..at + TENSOR_OPERAND_SIZE])
        })
        .collect();
    check_tensor_op(&header, &descriptors, guest, buffer)
}

/// Checks an op given as its fields rather than as bytes in guest memory
/// (what [`decode_tensor_op`] does after reading them; the component API
/// builds them from its records): the same rules, the same errors.
/// `guest` is the memory of operands located in the guest's memory;
/// `buffer` resolves buffer handles as for [`decode_tensor_op`].
pub fn check_tensor_op(
    header: &TensorHeader,
    descriptors: &[OperandDescriptor],
    guest: &GuestMemoryRef,
    buffer: &mut dyn FnMut(Handle) -> Result<(DevicePtr, u64), AbiError>,
) -> Result<TensorOp, AbiError> {
    let kind = TensorOpKind::from_u32(header.op)
        .ok_or_else(|| AbiError::invalid(format!("op {} is not a built-in op", header.op)))?;
    if header.operand_count as usize != kind.operand_count()
        || descriptors.len() != kind.operand_count()
    {
        return Err(AbiError::invalid(format!(
            "{kind} takes {} operands; {} given",
            kind.operand_count(),
            descriptors.len()
        )));
    }
    if header.flags != 0 {
        return Err(AbiError::invalid(format!(
            "flags {:#x} set; no flags are defined",
            header.flags
        )));
    }
    check_unused_fields(kind, header)?;
    let mut operands = Vec::with_capacity(descriptors.len());
    for (i, d) in descriptors.iter().enumerate() {
        let operand = decode_operand(d, guest, buffer)
            .map_err(|e| e.context(format_args!("{kind} operand {i}")))?;
        operands.push(operand);
    }
    let op = check_op(kind, header, &operands).map_err(|e| e.context(kind))?;
    check_no_overlap(kind, &operands)?;
    Ok(op)
}

/// Header fields an op does not use must be 0, so that a later meaning for
/// them cannot change what an old guest asked for.
fn check_unused_fields(kind: TensorOpKind, h: &TensorHeader) -> Result<(), AbiError> {
    let gemm = kind == TensorOpKind::Gemm;
    let reduce = matches!(
        kind,
        TensorOpKind::ReduceSum | TensorOpKind::ReduceMax | TensorOpKind::ReduceMean
    );
    let last_axis = matches!(kind, TensorOpKind::Softmax | TensorOpKind::LayerNorm);
    let unused =
        |field: &str| AbiError::invalid(format!("{kind} does not use `{field}`; it must be 0"));
    if !gemm && h.precision != 0 {
        return Err(unused("precision"));
    }
    if gemm && h.precision > 1 {
        return Err(AbiError::invalid(format!(
            "precision {} is neither 0 (the inputs' own) nor 1 (TF32 allowed)",
            h.precision
        )));
    }
    if !gemm && (h.alpha.to_bits() != 0 || h.beta.to_bits() != 0) {
        return Err(unused("alpha/beta"));
    }
    if gemm && !(h.alpha.is_finite() && h.beta.is_finite()) {
        return Err(AbiError::invalid(format!(
            "alpha {} and beta {} must be finite",
            h.alpha, h.beta
        )));
    }
    if kind == TensorOpKind::LayerNorm {
        if !(h.eps.is_finite() && h.eps >= 0.0) {
            return Err(AbiError::invalid(format!(
                "eps {} must be finite and not negative",
                h.eps
            )));
        }
    } else if h.eps.to_bits() != 0 {
        return Err(unused("eps"));
    }
    let axis_used = reduce || (last_axis && h.axis == -1);
    if !axis_used && h.axis != 0 {
        return Err(unused("axis"));
    }
    Ok(())
}

fn decode_operand(
    d: &OperandDescriptor,
    guest: &GuestMemoryRef,
    buffer: &mut dyn FnMut(Handle) -> Result<(DevicePtr, u64), AbiError>,
) -> Result<Operand, AbiError> {
    let dtype = DType::from_u32(d.dtype)
        .ok_or_else(|| AbiError::invalid(format!("dtype {} is not 1, 2 or 3", d.dtype)))?;
    let rank = d.rank as usize;
    if !(1..=MAX_RANK).contains(&rank) {
        return Err(AbiError::invalid(format!(
            "rank {} is not 1..={MAX_RANK}",
            d.rank
        )));
    }
    if d.reserved != 0 {
        return Err(AbiError::invalid("reserved field is not 0"));
    }
    let mut shape = [1u64; MAX_RANK];
    let mut strides = [0u64; MAX_RANK];
    for i in 0..MAX_RANK {
        if i >= rank {
            if d.shape[i] != 0 || d.strides[i] != 0 {
                return Err(AbiError::invalid(format!(
                    "dimension {i} is past rank {rank} but its shape or stride is not 0"
                )));
            }
            continue;
        }
        if d.shape[i] == 0 {
            return Err(AbiError::invalid(format!(
                "extent {i} is 0 (empty tensors are not launched)"
            )));
        }
        shape[i] = d.shape[i];
        strides[i] = u64::try_from(d.strides[i])
            .map_err(|_| AbiError::invalid(format!("stride {i} is negative ({})", d.strides[i])))?;
    }
    // Elements from the first to one past the last, then bytes.
    let overflow = || AbiError::overflow("shape and strides overflow 64 bits");
    let mut last = 0u64;
    let mut numel = 1u64;
    for i in 0..rank {
        let step = (shape[i] - 1)
            .checked_mul(strides[i])
            .ok_or_else(overflow)?;
        last = last.checked_add(step).ok_or_else(overflow)?;
        numel = numel.checked_mul(shape[i]).ok_or_else(overflow)?;
    }
    let span = last
        .checked_add(1)
        .and_then(|e| e.checked_mul(dtype.size()))
        .ok_or_else(overflow)?;
    let ptr = match d.location {
        0 => {
            if d.offset != 0 {
                return Err(AbiError::invalid(
                    "a guest-memory operand's buffer offset must be 0",
                ));
            }
            let offset = u32::try_from(d.address).map_err(|_| {
                AbiError::fault(format!(
                    "guest offset {:#x} is past 32-bit guest memory",
                    d.address
                ))
            })?;
            let end = u64::from(offset).checked_add(span).ok_or_else(overflow)?;
            if end > guest.len as u64 {
                return Err(AbiError::fault(format!(
                    "{span} bytes at guest offset {offset:#x} end past the guest's \
                     {:#x}-byte memory",
                    guest.len
                )));
            }
            if !guest.device_addressable {
                return Err(AbiError::new(
                    Errno::ENOTADDR,
                    "the guest's memory is not device-addressable (not managed memory)",
                ));
            }
            guest
                .base
                .0
                .checked_add(u64::from(offset))
                .map(DevicePtr)
                .ok_or_else(overflow)?
        }
        1 => {
            let (base, len) = buffer(Handle(d.address))?;
            let end = d.offset.checked_add(span).ok_or_else(overflow)?;
            if end > len {
                return Err(AbiError::fault(format!(
                    "{span} bytes at offset {:#x} end past the buffer's {len:#x} bytes",
                    d.offset
                )));
            }
            base.0
                .checked_add(d.offset)
                .map(DevicePtr)
                .ok_or_else(overflow)?
        }
        other => {
            return Err(AbiError::invalid(format!(
                "location {other} is neither 0 (guest memory) nor 1 (buffer)"
            )));
        }
    };
    if ptr.0 % dtype.size() != 0 {
        return Err(AbiError::misaligned(format!(
            "address {:#x} is not aligned to its {}-byte {dtype} elements",
            ptr.0,
            dtype.size()
        )));
    }
    let location = match d.location {
        0 => OperandLocation::Guest(d.address as u32),
        _ => OperandLocation::Buffer(Handle(d.address), d.offset),
    };
    Ok(Operand {
        ptr,
        location,
        dtype,
        rank,
        shape,
        strides,
        span,
    })
}

fn dtype_is(what: &str, o: &Operand, want: DType) -> Result<(), AbiError> {
    if o.dtype != want {
        return Err(AbiError::invalid(format!(
            "{what} is {}, not {want} (dtype mismatch)",
            o.dtype
        )));
    }
    Ok(())
}

fn contiguous(what: &str, o: &Operand) -> Result<(), AbiError> {
    if !o.is_contiguous() {
        return Err(AbiError::invalid(format!(
            "{what} (shape {:?}, strides {:?}) is not contiguous row-major",
            o.dims(),
            o.stride()
        )));
    }
    Ok(())
}

fn same_shape(what: &str, a: &Operand, b: &Operand) -> Result<(), AbiError> {
    if a.dims() != b.dims() {
        return Err(AbiError::invalid(format!(
            "{what}: shapes {:?} and {:?} differ",
            a.dims(),
            b.dims()
        )));
    }
    Ok(())
}

fn check_op(kind: TensorOpKind, h: &TensorHeader, ops: &[Operand]) -> Result<TensorOp, AbiError> {
    match kind {
        TensorOpKind::Gemm => check_gemm(h, &ops[0], &ops[1], &ops[2]).map(TensorOp::Gemm),
        TensorOpKind::ReduceSum | TensorOpKind::ReduceMax | TensorOpKind::ReduceMean => {
            let (x, y) = (&ops[0], &ops[1]);
            dtype_is("X", x, DType::F32)?;
            dtype_is("Y", y, DType::F32)?;
            contiguous("X", x)?;
            contiguous("Y", y)?;
            let rank = x.rank as i64;
            let axis = i64::from(h.axis);
            if axis < -rank || axis >= rank {
                return Err(AbiError::invalid(format!(
                    "axis {axis} is outside rank {rank}"
                )));
            }
            let axis = if axis < 0 { axis + rank } else { axis } as usize;
            let dims = x.dims();
            let outer: u64 = dims[..axis].iter().product();
            let inner: u64 = dims[axis + 1..].iter().product();
            let kept: Vec<u64> = dims
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != axis)
                .map(|(_, d)| *d)
                .collect();
            let mut kept_dim = dims.to_vec();
            kept_dim[axis] = 1;
            let y_dims = y.dims();
            let matches = y_dims == kept.as_slice()
                || y_dims == kept_dim.as_slice()
                || (kept.is_empty() && y_dims == [1]);
            if !matches {
                return Err(AbiError::invalid(format!(
                    "Y's shape {y_dims:?} is not X's {dims:?} without axis {axis}"
                )));
            }
            let op = match kind {
                TensorOpKind::ReduceSum => ReduceOp::Sum,
                TensorOpKind::ReduceMax => ReduceOp::Max,
                _ => ReduceOp::Mean,
            };
            Ok(TensorOp::Reduce {
                op,
                x: x.ptr,
                y: y.ptr,
                outer,
                n: dims[axis],
                inner,
            })
        }
        TensorOpKind::Softmax => {
            let (x, y) = (&ops[0], &ops[1]);
            let (rows, cols) = rows_cols(x, y)?;
            Ok(TensorOp::Softmax {
                x: x.ptr,
                y: y.ptr,
                rows,
                cols,
            })
        }
        TensorOpKind::LayerNorm => {
            let (x, gamma, beta, y) = (&ops[0], &ops[1], &ops[2], &ops[3]);
            let (rows, cols) = rows_cols(x, y)?;
            for (what, v) in [("gamma", gamma), ("beta", beta)] {
                dtype_is(what, v, DType::F32)?;
                if v.dims() != [cols] || v.stride() != [1] {
                    return Err(AbiError::invalid(format!(
                        "{what} must be a contiguous [{cols}] vector; it is {:?} with \
                         strides {:?}",
                        v.dims(),
                        v.stride()
                    )));
                }
            }
            Ok(TensorOp::LayerNorm {
                x: x.ptr,
                gamma: gamma.ptr,
                beta: beta.ptr,
                y: y.ptr,
                rows,
                cols,
                eps: h.eps,
            })
        }
        TensorOpKind::Add | TensorOpKind::Mul => {
            let (a, b, y) = (&ops[0], &ops[1], &ops[2]);
            for (what, v) in [("A", a), ("B", b), ("Y", y)] {
                dtype_is(what, v, DType::F32)?;
                contiguous(what, v)?;
            }
            same_shape("A and Y", a, y)?;
            let (ad, bd) = (a.dims(), b.dims());
            if bd.len() > ad.len() || ad[ad.len() - bd.len()..] != *bd {
                return Err(AbiError::invalid(format!(
                    "B's shape {bd:?} is neither A's {ad:?} nor a suffix of it"
                )));
            }
            Ok(TensorOp::Binary {
                op: if kind == TensorOpKind::Add {
                    BinaryOp::Add
                } else {
                    BinaryOp::Mul
                },
                a: a.ptr,
                b: b.ptr,
                y: y.ptr,
                n: a.numel(),
                b_period: b.numel(),
            })
        }
        TensorOpKind::Relu | TensorOpKind::Gelu => {
            let (x, y) = (&ops[0], &ops[1]);
            for (what, v) in [("X", x), ("Y", y)] {
                dtype_is(what, v, DType::F32)?;
                contiguous(what, v)?;
            }
            same_shape("X and Y", x, y)?;
            Ok(TensorOp::Unary {
                op: if kind == TensorOpKind::Relu {
                    UnaryOp::Relu
                } else {
                    UnaryOp::Gelu
                },
                x: x.ptr,
                y: y.ptr,
                n: x.numel(),
            })
        }
        TensorOpKind::Transpose => {
            let (x, y) = (&ops[0], &ops[1]);
            for (what, v) in [("X", x), ("Y", y)] {
                dtype_is(what, v, DType::F32)?;
                contiguous(what, v)?;
            }
            let (xd, yd) = (x.dims(), y.dims());
            let r = xd.len();
            let ok = (r == 2 || r == 3)
                && yd.len() == r
                && xd[..r - 2] == yd[..r - 2]
                && xd[r - 2] == yd[r - 1]
                && xd[r - 1] == yd[r - 2];
            if !ok {
                return Err(AbiError::invalid(format!(
                    "X {xd:?} and Y {yd:?} are not [b?, R, C] and [b?, C, R]"
                )));
            }
            Ok(TensorOp::Transpose {
                x: x.ptr,
                y: y.ptr,
                batch: if r == 3 { xd[0] } else { 1 },
                rows: xd[r - 2],
                cols: xd[r - 1],
            })
        }
    }
}

/// Softmax and layer norm: X and Y of one shape, contiguous f32, over the
/// last axis.
fn rows_cols(x: &Operand, y: &Operand) -> Result<(u64, u64), AbiError> {
    for (what, v) in [("X", x), ("Y", y)] {
        dtype_is(what, v, DType::F32)?;
        contiguous(what, v)?;
    }
    same_shape("X and Y", x, y)?;
    let cols = x.dims()[x.rank - 1];
    Ok((x.numel() / cols, cols))
}

fn check_gemm(h: &TensorHeader, a: &Operand, b: &Operand, c: &Operand) -> Result<Gemm, AbiError> {
    let precision = match (h.precision, a.dtype, b.dtype) {
        (0, DType::F32, DType::F32) => GemmPrecision::F32,
        (1, DType::F32, DType::F32) => GemmPrecision::Tf32,
        (0, DType::Bf16, DType::Bf16) => GemmPrecision::Bf16,
        (0, DType::F16, DType::F16) => GemmPrecision::F16,
        (1, _, _) => {
            return Err(AbiError::invalid(format!(
                "precision 1 (TF32) needs f32 A and B; they are {} and {}",
                a.dtype, b.dtype
            )));
        }
        _ => {
            return Err(AbiError::invalid(format!(
                "A and B must have one dtype (f32, bf16 or f16); they are {} and {} (dtype \
                 mismatch)",
                a.dtype, b.dtype
            )));
        }
    };
    dtype_is("C", c, DType::F32)?;
    let rank = a.rank;
    if !(rank == 2 || rank == 3) || b.rank != rank || c.rank != rank {
        return Err(AbiError::invalid(format!(
            "A, B and C must all be rank 2 ([M, K], [K, N], [M, N]) or all rank 3 (batched); \
             they are rank {}, {} and {}",
            a.rank, b.rank, c.rank
        )));
    }
    let o = rank - 2;
    let (m, k) = (a.shape[o], a.shape[o + 1]);
    let (kb, n) = (b.shape[o], b.shape[o + 1]);
    let (mc, nc) = (c.shape[o], c.shape[o + 1]);
    if kb != k || mc != m || nc != n {
        return Err(AbiError::invalid(format!(
            "shapes do not chain: A {:?} @ B {:?} -> C {:?}",
            a.dims(),
            b.dims(),
            c.dims()
        )));
    }
    let batch = if rank == 3 { c.shape[0] } else { 1 };
    if rank == 3 && (a.shape[0] != batch || b.shape[0] != batch) {
        return Err(AbiError::invalid(format!(
            "batch extents differ: A {}, B {}, C {batch}",
            a.shape[0], b.shape[0]
        )));
    }
    for (what, v, cols) in [("A", a, k), ("B", b, n), ("C", c, n)] {
        if v.strides[o + 1] != 1 && cols > 1 {
            return Err(AbiError::invalid(format!(
                "{what}'s last stride is {}; it must be 1",
                v.strides[o + 1]
            )));
        }
        if v.strides[o] < cols && v.shape[o] > 1 {
            return Err(AbiError::invalid(format!(
                "{what}'s row stride {} is less than its row length {cols}",
                v.strides[o]
            )));
        }
    }
    let row_stride = |v: &Operand, cols: u64| if v.shape[o] > 1 { v.strides[o] } else { cols };
    let (lda, ldb, ldc) = (row_stride(a, k), row_stride(b, n), row_stride(c, n));
    let batch_stride = |v: &Operand| {
        if rank == 3 && batch > 1 {
            v.strides[0]
        } else {
            0
        }
    };
    let (stride_a, stride_b, stride_c) = (batch_stride(a), batch_stride(b), batch_stride(c));
    if batch > 1 {
        // C's matrices must not overlap one another (each batch is written
        // by its own blocks); the extent of one is checked, not overflowing,
        // by the operand's span.
        let one = (m - 1) * ldc + n;
        if stride_c < one {
            return Err(AbiError::invalid(format!(
                "C's batch stride {stride_c} is less than one matrix's {one} elements, so \
                 batches would overlap"
            )));
        }
    }
    Ok(Gemm {
        precision,
        batch,
        m,
        n,
        k,
        a: a.ptr,
        b: b.ptr,
        c: c.ptr,
        lda,
        ldb,
        ldc,
        stride_a,
        stride_b,
        stride_c,
        alpha: h.alpha,
        beta: h.beta,
    })
}

/// The output (the last operand) must not share a byte with any input.
fn check_no_overlap(kind: TensorOpKind, ops: &[Operand]) -> Result<(), AbiError> {
    let (out, inputs) = ops
        .split_last()
        .ok_or_else(|| AbiError::invalid("no operands"))?;
    let (os, oe) = out.bytes();
    for (i, input) in inputs.iter().enumerate() {
        let (is, ie) = input.bytes();
        if os < ie && is < oe {
            return Err(AbiError::invalid(format!(
                "{kind}: the output overlaps input operand {i} (in-place ops are not supported)"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    const BASE: u64 = 0x7000_0000;
    const MEM: usize = 1 << 20;

    fn guest() -> GuestMemoryRef {
        GuestMemoryRef {
            base: DevicePtr(BASE),
            len: MEM,
            device_addressable: true,
        }
    }

    /// Buffer handle 7 is 4096 bytes at 0x9000_0000; every other handle is bad.
    fn buffers(h: Handle) -> Result<(DevicePtr, u64), AbiError> {
        if h.0 == 7 {
            Ok((DevicePtr(0x9000_0000), 4096))
        } else {
            Err(AbiError::bad_handle("no such buffer"))
        }
    }

    fn decode_with(
        g: &GuestMemoryRef,
        header: &TensorHeader,
        ops: &[OperandDescriptor],
    ) -> Result<TensorOp, AbiError> {
        let bytes = encode_tensor_op(header, ops);
        let mut mem = vec![0u8; MEM];
        let at = 64usize;
        mem[at..at + bytes.len()].copy_from_slice(&bytes);
        decode_tensor_op(&mem, g, at as u32, bytes.len() as u32, &mut buffers)
    }

    fn decode(header: &TensorHeader, ops: &[OperandDescriptor]) -> Result<TensorOp, AbiError> {
        decode_with(&guest(), header, ops)
    }

    #[test]
    fn fields_are_checked_as_the_bytes_are() {
        let relu = TensorHeader::new(TensorOpKind::Relu);
        let x = OperandDescriptor::buffer(Handle(7), 0, DType::F32, &[3, 5]);
        let y = OperandDescriptor::buffer(Handle(7), 60, DType::F32, &[3, 5]);
        let check = |header: &TensorHeader, ops: &[OperandDescriptor]| {
            check_tensor_op(header, ops, &guest(), &mut buffers)
        };
        // The same op either way, accepted or refused alike.
        let op = check(&relu, &[x, y]).unwrap();
        assert_eq!(decode(&relu, &[x, y]), Ok(op));
        let overlapping = OperandDescriptor::buffer(Handle(7), 56, DType::F32, &[3, 5]);
        let refused = check(&relu, &[x, overlapping]).unwrap_err();
        assert_eq!(decode(&relu, &[x, overlapping]).unwrap_err(), refused);
        assert_eq!(refused.errno, Errno::EINVAL);
        let bad_handle = OperandDescriptor::buffer(Handle(8), 0, DType::F32, &[3, 5]);
        assert_eq!(
            check(&relu, &[bad_handle, y]).unwrap_err().errno,
            Errno::EBADH
        );
        // Too few or too many operands for the op.
        assert_eq!(check(&relu, &[x]).unwrap_err().errno, Errno::EINVAL);
        assert_eq!(check(&relu, &[x, y, y]).unwrap_err().errno, Errno::EINVAL);
    }

    fn errno(r: Result<TensorOp, AbiError>) -> Errno {
        match r {
            Ok(op) => panic!("accepted: {op:?}"),
            Err(e) => e.errno,
        }
    }

    fn gemm_header() -> TensorHeader {
        let mut h = TensorHeader::new(TensorOpKind::Gemm);
        h.alpha = 1.0;
        h
    }

    fn f32s(offset: u32, shape: &[u64]) -> OperandDescriptor {
        OperandDescriptor::guest(offset, DType::F32, shape)
    }

    #[test]
    fn a_plain_gemm_decodes_to_its_sizes_and_addresses() {
        let op = decode(
            &gemm_header(),
            &[
                f32s(0x1000, &[17, 33]),
                f32s(0x4000, &[33, 5]),
                f32s(0x8000, &[17, 5]),
            ],
        )
        .unwrap();
        let TensorOp::Gemm(g) = op else {
            panic!("{op:?}")
        };
        assert_eq!((g.batch, g.m, g.n, g.k), (1, 17, 5, 33));
        assert_eq!((g.lda, g.ldb, g.ldc), (33, 5, 5));
        assert_eq!(g.a, DevicePtr(BASE + 0x1000));
        assert_eq!(g.c, DevicePtr(BASE + 0x8000));
        assert_eq!(g.precision, GemmPrecision::F32);
    }

    #[test]
    fn batched_gemm_takes_a_broadcast_operand_and_leading_dimensions() {
        let a = f32s(0x1000, &[3, 4, 8]).with_strides(&[0, 9, 1]);
        let b = f32s(0x4000, &[3, 8, 2]);
        let c = f32s(0x8000, &[3, 4, 2]);
        let TensorOp::Gemm(g) = decode(&gemm_header(), &[a, b, c]).unwrap() else {
            panic!()
        };
        assert_eq!(
            (g.batch, g.lda, g.stride_a, g.stride_b, g.stride_c),
            (3, 9, 0, 16, 8)
        );
        // C's batches may not overlap.
        let c0 = f32s(0x8000, &[3, 4, 2]).with_strides(&[4, 2, 1]);
        assert_eq!(errno(decode(&gemm_header(), &[a, b, c0])), Errno::EINVAL);
        // The work counts every batch, broadcast ones too.
        assert_eq!(TensorOp::Gemm(g).work(), 3 * 4 * 2 * 8);
    }

    #[test]
    fn work_counts_each_op_and_saturates() {
        let p = DevicePtr(0x1000);
        let unary = TensorOp::Unary {
            op: UnaryOp::Relu,
            x: p,
            y: p,
            n: 77,
        };
        assert_eq!(unary.work(), 77);
        let softmax = TensorOp::Softmax {
            x: p,
            y: p,
            rows: 5,
            cols: 7,
        };
        assert_eq!(softmax.work(), 3 * 5 * 7);
        let reduce = TensorOp::Reduce {
            op: ReduceOp::Sum,
            x: p,
            y: p,
            outer: 2,
            n: 3,
            inner: 4,
        };
        assert_eq!(reduce.work(), 24);
        let transpose = TensorOp::Transpose {
            x: p,
            y: p,
            batch: u64::MAX,
            rows: 2,
            cols: 2,
        };
        assert_eq!(transpose.work(), u64::MAX);
    }

    #[test]
    fn gemm_dtypes_must_agree_and_precision_is_checked() {
        let a16 = OperandDescriptor::guest(0x1000, DType::Bf16, &[4, 4]);
        let b16 = OperandDescriptor::guest(0x2000, DType::Bf16, &[4, 4]);
        let h16 = OperandDescriptor::guest(0x2000, DType::F16, &[4, 4]);
        let c = f32s(0x8000, &[4, 4]);
        let TensorOp::Gemm(g) = decode(&gemm_header(), &[a16, b16, c]).unwrap() else {
            panic!()
        };
        assert_eq!(g.precision, GemmPrecision::Bf16);
        assert_eq!(errno(decode(&gemm_header(), &[a16, h16, c])), Errno::EINVAL);
        let mut tf32 = gemm_header();
        tf32.precision = 1;
        assert_eq!(errno(decode(&tf32, &[a16, b16, c])), Errno::EINVAL);
        let TensorOp::Gemm(g) =
            decode(&tf32, &[f32s(0x1000, &[4, 4]), f32s(0x2000, &[4, 4]), c]).unwrap()
        else {
            panic!()
        };
        assert_eq!(g.precision, GemmPrecision::Tf32);
        tf32.precision = 2;
        assert_eq!(
            errno(decode(
                &tf32,
                &[f32s(0x1000, &[4, 4]), f32s(0x2000, &[4, 4]), c]
            )),
            Errno::EINVAL
        );
        // C must be f32.
        let c16 = OperandDescriptor::guest(0x8000, DType::Bf16, &[4, 4]);
        assert_eq!(
            errno(decode(&gemm_header(), &[a16, b16, c16])),
            Errno::EINVAL
        );
    }

    #[test]
    fn gemm_shapes_must_chain_and_rows_be_unit_stride() {
        let h = gemm_header();
        let c = f32s(0x8000, &[4, 4]);
        assert_eq!(
            errno(decode(
                &h,
                &[f32s(0x1000, &[4, 3]), f32s(0x2000, &[4, 4]), c]
            )),
            Errno::EINVAL
        );
        let strided = f32s(0x1000, &[4, 4]).with_strides(&[8, 2]);
        assert_eq!(
            errno(decode(&h, &[strided, f32s(0x2000, &[4, 4]), c])),
            Errno::EINVAL
        );
        let short_rows = f32s(0x1000, &[4, 4]).with_strides(&[3, 1]);
        assert_eq!(
            errno(decode(&h, &[short_rows, f32s(0x2000, &[4, 4]), c])),
            Errno::EINVAL
        );
    }

    #[test]
    fn shape_products_that_overflow_are_eoverflow() {
        let huge = f32s(0x1000, &[1 << 40, 1 << 40]);
        assert_eq!(
            errno(decode(
                &gemm_header(),
                &[huge, f32s(0x2000, &[1 << 40, 1]), f32s(0, &[1, 1])]
            )),
            Errno::EOVERFLOW
        );
        let s = f32s(0x1000, &[2, 2]).with_strides(&[i64::MAX, 1]);
        let h = TensorHeader::new(TensorOpKind::Relu);
        assert_eq!(
            errno(decode(&h, &[s, f32s(0x2000, &[2, 2])])),
            Errno::EOVERFLOW
        );
    }

    #[test]
    fn operands_must_lie_inside_guest_memory_or_their_buffer() {
        let h = TensorHeader::new(TensorOpKind::Relu);
        // Ends one element past the memory.
        let end = (MEM - 4 * 16 + 4) as u32;
        assert_eq!(
            errno(decode(&h, &[f32s(end, &[16]), f32s(0x2000, &[16])])),
            Errno::EFAULT
        );
        let ok = f32s((MEM - 64) as u32, &[16]);
        decode(&h, &[ok, f32s(0x2000, &[16])]).unwrap();
        // Strides reach past the end even though the element count fits.
        let strided = f32s(0x1000, &[2, 2]).with_strides(&[(MEM as i64) / 4, 1]);
        assert_eq!(
            errno(decode(&h, &[strided, f32s(0x2000, &[2, 2])])),
            Errno::EFAULT
        );
        let buf = OperandDescriptor::buffer(Handle(7), 4096 - 64, DType::F32, &[16]);
        let op = decode(&h, &[buf, f32s(0x2000, &[16])]).unwrap();
        let TensorOp::Unary { x, .. } = op else {
            panic!()
        };
        assert_eq!(x, DevicePtr(0x9000_0000 + 4096 - 64));
        let past = OperandDescriptor::buffer(Handle(7), 4096 - 60, DType::F32, &[16]);
        assert_eq!(
            errno(decode(&h, &[past, f32s(0x2000, &[16])])),
            Errno::EFAULT
        );
        let forged = OperandDescriptor::buffer(Handle(8), 0, DType::F32, &[16]);
        assert_eq!(
            errno(decode(&h, &[forged, f32s(0x2000, &[16])])),
            Errno::EBADH
        );
        let high = OperandDescriptor {
            address: 1 << 33,
            ..f32s(0, &[16])
        };
        assert_eq!(
            errno(decode(&h, &[high, f32s(0x2000, &[16])])),
            Errno::EFAULT
        );
    }

    #[test]
    fn misaligned_operands_are_ealign_and_host_memory_enotaddr() {
        let h = TensorHeader::new(TensorOpKind::Relu);
        assert_eq!(
            errno(decode(&h, &[f32s(0x1002, &[4]), f32s(0x2000, &[4])])),
            Errno::EALIGN
        );
        let host = GuestMemoryRef {
            device_addressable: false,
            ..guest()
        };
        assert_eq!(
            errno(decode_with(
                &host,
                &h,
                &[f32s(0x1000, &[4]), f32s(0x2000, &[4])]
            )),
            Errno::ENOTADDR
        );
    }

    #[test]
    fn malformed_headers_and_operands_are_einval() {
        let x = f32s(0x1000, &[4]);
        let y = f32s(0x2000, &[4]);
        let relu = TensorHeader::new(TensorOpKind::Relu);
        for h in [
            TensorHeader { op: 0, ..relu },
            TensorHeader { op: 99, ..relu },
            TensorHeader { flags: 1, ..relu },
            TensorHeader {
                precision: 1,
                ..relu
            },
            TensorHeader { alpha: 1.0, ..relu },
            TensorHeader { eps: 1.0, ..relu },
            TensorHeader { axis: 1, ..relu },
            TensorHeader {
                operand_count: 3,
                ..relu
            },
        ] {
            let bytes_ok = h.operand_count == 2;
            let ops: &[OperandDescriptor] = if bytes_ok { &[x, y] } else { &[x, y, y] };
            assert_eq!(errno(decode(&h, ops)), Errno::EINVAL, "{h:?}");
        }
        for bad in [
            OperandDescriptor { dtype: 0, ..x },
            OperandDescriptor { dtype: 4, ..x },
            OperandDescriptor { rank: 0, ..x },
            OperandDescriptor { rank: 5, ..x },
            OperandDescriptor { reserved: 1, ..x },
            OperandDescriptor { location: 2, ..x },
            OperandDescriptor { offset: 4, ..x },
            x.with_strides(&[-1]),
            OperandDescriptor {
                shape: [0, 0, 0, 0],
                ..x
            },
            OperandDescriptor {
                shape: [4, 1, 0, 0],
                ..x
            },
        ] {
            assert_eq!(errno(decode(&relu, &[bad, y])), Errno::EINVAL, "{bad:?}");
        }
        // Truncated and over-long descriptors.
        let bytes = encode_tensor_op(&relu, &[x, y]);
        let mut mem = vec![0u8; 4096];
        mem[..bytes.len()].copy_from_slice(&bytes);
        for len in [0, 31, bytes.len() as u32 - 1, bytes.len() as u32 + 1] {
            let r = decode_tensor_op(&mem, &guest(), 0, len, &mut buffers);
            assert_eq!(errno(r), Errno::EINVAL, "len {len}");
        }
        // The descriptor itself out of guest memory.
        let r = decode_tensor_op(&mem, &guest(), 4000, 224, &mut buffers);
        assert_eq!(errno(r), Errno::EFAULT);
    }

    #[test]
    fn reductions_take_any_axis_and_check_the_output_shape() {
        let mut h = TensorHeader::new(TensorOpKind::ReduceSum);
        let x = f32s(0x1000, &[2, 3, 5]);
        for (axis, y_shape, want) in [
            (0, vec![3, 5], (1, 2, 15)),
            (1, vec![2, 5], (2, 3, 5)),
            (-1, vec![2, 3], (6, 5, 1)),
            (2, vec![2, 3, 1], (6, 5, 1)),
        ] {
            h.axis = axis;
            let op = decode(&h, &[x, f32s(0x4000, &y_shape)]).unwrap();
            let TensorOp::Reduce {
                outer, n, inner, ..
            } = op
            else {
                panic!()
            };
            assert_eq!((outer, n, inner), want, "axis {axis}");
        }
        h.axis = 3;
        assert_eq!(
            errno(decode(&h, &[x, f32s(0x4000, &[2, 3])])),
            Errno::EINVAL
        );
        h.axis = 1;
        assert_eq!(
            errno(decode(&h, &[x, f32s(0x4000, &[2, 3])])),
            Errno::EINVAL
        );
        let v = f32s(0x1000, &[7]);
        h.axis = 0;
        decode(&h, &[v, f32s(0x4000, &[1])]).unwrap();
    }

    #[test]
    fn layernorm_needs_vectors_of_the_row_length_and_a_sane_eps() {
        let mut h = TensorHeader::new(TensorOpKind::LayerNorm);
        h.eps = 1e-5;
        h.axis = -1;
        let x = f32s(0x1000, &[3, 17]);
        let y = f32s(0x4000, &[3, 17]);
        let op = decode(&h, &[x, f32s(0x2000, &[17]), f32s(0x3000, &[17]), y]).unwrap();
        let TensorOp::LayerNorm { rows, cols, .. } = op else {
            panic!()
        };
        assert_eq!((rows, cols), (3, 17));
        assert_eq!(
            errno(decode(
                &h,
                &[x, f32s(0x2000, &[16]), f32s(0x3000, &[17]), y]
            )),
            Errno::EINVAL
        );
        h.eps = f32::NAN;
        assert_eq!(
            errno(decode(
                &h,
                &[x, f32s(0x2000, &[17]), f32s(0x3000, &[17]), y]
            )),
            Errno::EINVAL
        );
    }

    #[test]
    fn add_broadcasts_a_suffix_and_outputs_may_not_overlap_inputs() {
        let h = TensorHeader::new(TensorOpKind::Add);
        let a = f32s(0x1000, &[4, 8]);
        let op = decode(&h, &[a, f32s(0x2000, &[8]), f32s(0x3000, &[4, 8])]).unwrap();
        let TensorOp::Binary { n, b_period, .. } = op else {
            panic!()
        };
        assert_eq!((n, b_period), (32, 8));
        assert_eq!(
            errno(decode(&h, &[a, f32s(0x2000, &[4]), f32s(0x3000, &[4, 8])])),
            Errno::EINVAL
        );
        // In place, and a partial overlap.
        assert_eq!(
            errno(decode(&h, &[a, f32s(0x2000, &[8]), a])),
            Errno::EINVAL
        );
        assert_eq!(
            errno(decode(
                &h,
                &[a, f32s(0x2000, &[8]), f32s(0x1000 + 124, &[4, 8])]
            )),
            Errno::EINVAL
        );
        decode(&h, &[a, f32s(0x2000, &[8]), f32s(0x1000 + 128, &[4, 8])]).unwrap();
    }

    #[test]
    fn transpose_needs_swapped_shapes() {
        let h = TensorHeader::new(TensorOpKind::Transpose);
        let op = decode(&h, &[f32s(0x1000, &[2, 3, 5]), f32s(0x4000, &[2, 5, 3])]).unwrap();
        assert_eq!(
            op,
            TensorOp::Transpose {
                x: DevicePtr(BASE + 0x1000),
                y: DevicePtr(BASE + 0x4000),
                batch: 2,
                rows: 3,
                cols: 5
            }
        );
        assert_eq!(
            errno(decode(&h, &[f32s(0x1000, &[3, 5]), f32s(0x4000, &[3, 5])])),
            Errno::EINVAL
        );
    }

    #[test]
    fn random_descriptors_never_panic() {
        let mut rng = super::super::tests::Rng::from_env("tensor descriptors");
        let mut mem = vec![0u8; 4096];
        for _ in 0..20_000 {
            let len = (rng.below(TENSOR_HEADER_SIZE as u64 + 4 * 96 + 8)) as u32;
            for b in mem[..len as usize].iter_mut() {
                *b = rng.next_u64() as u8;
            }
            // Keep the op and counts plausible half of the time.
            if rng.below(2) == 0 && len >= 12 {
                let op = 1 + rng.below(11) as u32;
                mem[0..4].copy_from_slice(&op.to_le_bytes());
                let count = TensorOpKind::from_u32(op).unwrap().operand_count() as u32;
                mem[8..12].copy_from_slice(&count.to_le_bytes());
            }
            let _ = decode_tensor_op(&mem, &guest(), 0, len, &mut buffers);
        }
    }
}
