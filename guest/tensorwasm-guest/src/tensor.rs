//! Built-in tensor ops (`wasi_cuda.tensor_op`, `docs/tensor-ops.md`): typed
//! operand views over guest slices or device buffers ([`Tensor`],
//! [`TensorMut`]), one constructor per op, and the descriptor encoding
//! (`docs/ABI.md`, a 32-byte header and 96-byte operands, little-endian).
//! Queueing goes through [`crate::result::tensor_op`]; a queued op is waited
//! for by the same [`scope`](crate::scope) / [`PendingLaunch`] machinery as a
//! kernel launch. Which shapes, strides and dtypes each op takes is the
//! host's to check (it refuses with `EINVAL` and says why); this module only
//! checks what keeps the guest's memory safe: every operand's whole extent
//! lies inside the slice it borrows.
//!
//! A dense layer, `y = gelu(x @ w + bias)`, over the guest's own memory:
//!
//! ```no_run
//! use tensorwasm_guest::Error;
//! use tensorwasm_guest::tensor::{self, Tensor, TensorMut};
//!
//! fn dense(x: &[f32], w: &[f32], bias: &[f32], batch: usize) -> Result<Vec<f32>, Error> {
//!     let (k, n) = (x.len() / batch, bias.len());
//!     let mut z = vec![0.0f32; batch * n];
//!     let mut y = vec![0.0f32; batch * n];
//!     // C = A @ B (alpha 1, beta 0), f32 throughout.
//!     tensor::gemm(
//!         Tensor::new(x, &[batch, k])?,
//!         Tensor::new(w, &[k, n])?,
//!         TensorMut::new(&mut z, &[batch, n])?,
//!     )
//!     .run()?;
//!     // The bias is a suffix of z's shape: added to every row, in place of y.
//!     tensor::add(
//!         Tensor::new(&z, &[batch, n])?,
//!         Tensor::new(bias, &[n])?,
//!         TensorMut::new(&mut y, &[batch, n])?,
//!     )
//!     .run()?;
//!     tensor::gelu(Tensor::new(&y, &[batch, n])?, TensorMut::new(&mut z, &[batch, n])?).run()?;
//!     Ok(z)
//! }
//! ```
//!
//! Ops that [`submit`](TensorOp::submit) instead of [`run`](TensorOp::run)
//! keep their slices borrowed until the [`scope`](crate::scope) ends, just
//! like kernel launches; an output cannot be touched before then:
//!
//! ```compile_fail,E0499
//! # use tensorwasm_guest::{scope, Error};
//! # use tensorwasm_guest::tensor::{self, Tensor, TensorMut};
//! # fn demo(x: &[f32]) -> Result<(), Error> {
//! let mut y = vec![0.0f32; 4];
//! scope(|s| {
//!     let pending = tensor::relu(Tensor::new(x, &[4])?, TensorMut::new(&mut y, &[4])?)
//!         .submit(s)?;
//!     y[0] = 1.0; // error: `y` is still borrowed by the op
//!     pending.wait()
//! })
//! # }
//! ```

use alloc::format;
use alloc::vec::Vec;
use core::fmt;
use core::marker::PhantomData;

use crate::buffer::Buffer;
use crate::error::{Errno, Error};
use crate::launch::{PendingLaunch, Scope};
use crate::result;
use crate::sys::{
    TENSOR_DTYPE_BF16, TENSOR_DTYPE_F16, TENSOR_DTYPE_F32, TENSOR_HEADER_LEN,
    TENSOR_LOCATION_BUFFER, TENSOR_LOCATION_GUEST, TENSOR_MAX_OPERANDS, TENSOR_MAX_RANK,
    TENSOR_OP_ADD, TENSOR_OP_GELU, TENSOR_OP_GEMM, TENSOR_OP_LAYERNORM, TENSOR_OP_MUL,
    TENSOR_OP_REDUCE_MAX, TENSOR_OP_REDUCE_MEAN, TENSOR_OP_REDUCE_SUM, TENSOR_OP_RELU,
    TENSOR_OP_SOFTMAX, TENSOR_OP_TRANSPOSE, TENSOR_OPERAND_LEN, TENSOR_PRECISION_DEFAULT,
    TENSOR_PRECISION_TF32,
};

/// The longest descriptor: a header and [`TENSOR_MAX_OPERANDS`] operands.
const MAX_DESCRIPTOR_LEN: usize = TENSOR_HEADER_LEN + TENSOR_MAX_OPERANDS * TENSOR_OPERAND_LEN;

/// An operand's element type, as the descriptor's `dtype` field names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// IEEE binary32 ([`f32`]).
    F32,
    /// bfloat16 ([`Bf16`]): GEMM inputs only.
    Bf16,
    /// IEEE binary16 ([`F16`]): GEMM inputs only.
    F16,
}

impl DType {
    /// The descriptor's code for this dtype (1 f32, 2 bf16, 3 f16).
    pub const fn code(self) -> u32 {
        match self {
            DType::F32 => TENSOR_DTYPE_F32,
            DType::Bf16 => TENSOR_DTYPE_BF16,
            DType::F16 => TENSOR_DTYPE_F16,
        }
    }

    /// The size of one element in bytes.
    pub const fn size(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::Bf16 | DType::F16 => 2,
        }
    }
}

/// A bfloat16 number, as its bit pattern: the top 16 bits of an `f32`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct Bf16(pub u16);

impl Bf16 {
    /// The bfloat16 nearest to `x` (ties to even); NaN stays a (quiet) NaN.
    pub fn from_f32(x: f32) -> Bf16 {
        let bits = x.to_bits();
        if x.is_nan() {
            return Bf16((bits >> 16) as u16 | 0x0040);
        }
        // Round to nearest even on the 16 bits that are dropped; a carry out
        // of the mantissa bumps the exponent, up to infinity, as it should.
        let round = 0x7fff + ((bits >> 16) & 1);
        Bf16((bits.wrapping_add(round) >> 16) as u16)
    }

    /// The exact `f32` value.
    pub const fn to_f32(self) -> f32 {
        f32::from_bits((self.0 as u32) << 16)
    }
}

/// An IEEE binary16 number, as its bit pattern.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct F16(pub u16);

impl F16 {
    /// The binary16 nearest to `x` (ties to even), subnormals included;
    /// beyond the largest finite value (65504) it is infinity; NaN stays a
    /// (quiet) NaN.
    pub fn from_f32(x: f32) -> F16 {
        let bits = x.to_bits();
        let sign = ((bits >> 16) & 0x8000) as u16;
        let exp = ((bits >> 23) & 0xff) as i32;
        let man = bits & 0x007f_ffff;
        if exp == 0xff {
            let nan = if man != 0 {
                0x0200 | (man >> 13) as u16
            } else {
                0
            };
            return F16(sign | 0x7c00 | nan);
        }
        // The binary16 biased exponent.
        let e = exp - 127 + 15;
        if e >= 0x1f {
            return F16(sign | 0x7c00);
        }
        if e <= 0 {
            // A subnormal (or zero): the value in units of 2^-24 is the
            // 24-bit significand shifted right by `14 - e`.
            if e < -10 {
                return F16(sign);
            }
            let significand = man | 0x0080_0000;
            let shift = (14 - e) as u32;
            let half = 1u32 << (shift - 1);
            let rest = significand & ((1 << shift) - 1);
            let mut units = significand >> shift;
            if rest > half || (rest == half && units & 1 == 1) {
                // May carry into the smallest normal (0x0400): still right.
                units += 1;
            }
            return F16(sign | units as u16);
        }
        let mut h = ((e as u32) << 10) | (man >> 13);
        let rest = man & 0x1fff;
        if rest > 0x1000 || (rest == 0x1000 && h & 1 == 1) {
            // May carry into the exponent, up to infinity (0x7c00).
            h += 1;
        }
        F16(sign | h as u16)
    }

    /// The exact `f32` value.
    pub fn to_f32(self) -> f32 {
        let h = u32::from(self.0);
        let sign = (h & 0x8000) << 16;
        let exp = (h >> 10) & 0x1f;
        let man = h & 0x03ff;
        match exp {
            0 => {
                // Zero or subnormal: man * 2^-24, exact in f32.
                let magnitude = man as f32 * (1.0 / 16_777_216.0);
                f32::from_bits(magnitude.to_bits() | sign)
            }
            0x1f => f32::from_bits(sign | 0x7f80_0000 | (man << 13)),
            _ => f32::from_bits(sign | ((exp + 127 - 15) << 23) | (man << 13)),
        }
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for super::Bf16 {}
    impl Sealed for super::F16 {}
}

/// An element type of a tensor operand: [`f32`], [`Bf16`] or [`F16`].
/// Sealed: the host knows no others.
pub trait Element: sealed::Sealed + Copy + 'static {
    /// The descriptor's dtype for this type.
    const DTYPE: DType;
}

impl Element for f32 {
    const DTYPE: DType = DType::F32;
}

impl Element for Bf16 {
    const DTYPE: DType = DType::Bf16;
}

impl Element for F16 {
    const DTYPE: DType = DType::F16;
}

/// A refusal made in the guest, worded as the host words its own.
fn refused(errno: Errno, why: fmt::Arguments<'_>) -> Error {
    Error {
        errno,
        message: format!("tensor_op: {errno}: {why}"),
    }
}

/// One operand as the descriptor carries it (96 bytes, `docs/ABI.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Operand {
    location: u32,
    dtype: u32,
    /// Guest offset (location 0) or buffer handle (location 1).
    address: u64,
    /// Byte offset into the buffer; 0 for guest memory.
    offset: u64,
    rank: u32,
    /// Unused entries 0.
    shape: [u64; TENSOR_MAX_RANK],
    /// In elements, at most `i64::MAX` (the descriptor's `i64`); unused
    /// entries 0.
    strides: [u64; TENSOR_MAX_RANK],
}

impl Operand {
    /// Checks `shape` and `strides` (contiguous when `None`) and that the
    /// operand's whole extent fits in `room` elements; the operand at
    /// `address`/`offset` of `location`.
    fn new(
        location: u32,
        address: u64,
        offset: u64,
        dtype: DType,
        shape: &[usize],
        strides: Option<&[usize]>,
        room: u64,
    ) -> Result<Operand, Error> {
        let rank = shape.len();
        if !(1..=TENSOR_MAX_RANK).contains(&rank) {
            return Err(refused(
                Errno::EINVAL,
                format_args!("rank {rank} is outside 1..={TENSOR_MAX_RANK}"),
            ));
        }
        if shape.contains(&0) {
            return Err(refused(
                Errno::EINVAL,
                format_args!("shape {shape:?} has a zero extent"),
            ));
        }
        let overflow = || refused(Errno::EOVERFLOW, format_args!("shape {shape:?} overflows"));
        let mut op = Operand {
            location,
            dtype: dtype.code(),
            address,
            offset,
            rank: rank as u32,
            shape: [0; TENSOR_MAX_RANK],
            strides: [0; TENSOR_MAX_RANK],
        };
        for (dim, &extent) in shape.iter().enumerate() {
            op.shape[dim] = extent as u64;
        }
        match strides {
            Some(strides) => {
                if strides.len() != rank {
                    return Err(refused(
                        Errno::EINVAL,
                        format_args!("{} strides for rank {rank}", strides.len()),
                    ));
                }
                for (dim, &stride) in strides.iter().enumerate() {
                    op.strides[dim] = stride as u64;
                }
            }
            None => {
                // Row-major: the last stride 1, each other the product of
                // the later extents.
                let mut stride = 1u64;
                for dim in (0..rank).rev() {
                    op.strides[dim] = stride;
                    stride = stride.checked_mul(op.shape[dim]).ok_or_else(overflow)?;
                }
            }
        }
        // `1 + sum((shape[i] - 1) * strides[i])`: the elements from the
        // first to the last one the op may touch.
        let mut extent = 1u64;
        for dim in 0..rank {
            if op.strides[dim] > i64::MAX as u64 {
                return Err(overflow());
            }
            extent = (op.shape[dim] - 1)
                .checked_mul(op.strides[dim])
                .and_then(|span| extent.checked_add(span))
                .ok_or_else(overflow)?;
        }
        if extent > room {
            let strides = &op.strides[..rank];
            return Err(refused(
                Errno::EFAULT,
                format_args!(
                    "shape {shape:?} with strides {strides:?} spans {extent} elements; \
                     only {room} are there"
                ),
            ));
        }
        Ok(op)
    }

    /// An operand over a guest slice of `len` elements at guest address `addr`.
    fn guest(
        addr: usize,
        len: usize,
        dtype: DType,
        shape: &[usize],
        strides: Option<&[usize]>,
    ) -> Result<Operand, Error> {
        let location = TENSOR_LOCATION_GUEST;
        Operand::new(location, addr as u64, 0, dtype, shape, strides, len as u64)
    }

    /// An operand at byte `offset` of `buffer`.
    fn buffer(
        buffer: &Buffer,
        offset: u64,
        dtype: DType,
        shape: &[usize],
        strides: Option<&[usize]>,
    ) -> Result<Operand, Error> {
        let Some(bytes) = buffer.size().checked_sub(offset) else {
            return Err(refused(
                Errno::EFAULT,
                format_args!(
                    "offset {offset} is past the buffer's {} bytes",
                    buffer.size()
                ),
            ));
        };
        let room = bytes / dtype.size() as u64;
        let location = TENSOR_LOCATION_BUFFER;
        Operand::new(
            location,
            buffer.handle(),
            offset,
            dtype,
            shape,
            strides,
            room,
        )
    }

    fn dims(&self) -> &[u64] {
        &self.shape[..self.rank as usize]
    }

    fn stride(&self) -> &[u64] {
        &self.strides[..self.rank as usize]
    }

    /// The 96 bytes of `docs/ABI.md`, little-endian.
    fn encode(&self) -> [u8; TENSOR_OPERAND_LEN] {
        let mut out = [0u8; TENSOR_OPERAND_LEN];
        out[0..4].copy_from_slice(&self.location.to_le_bytes());
        out[4..8].copy_from_slice(&self.dtype.to_le_bytes());
        out[8..16].copy_from_slice(&self.address.to_le_bytes());
        out[16..24].copy_from_slice(&self.offset.to_le_bytes());
        out[24..28].copy_from_slice(&self.rank.to_le_bytes());
        // 28..32: reserved, 0.
        for dim in 0..TENSOR_MAX_RANK {
            let at = 32 + 8 * dim;
            out[at..at + 8].copy_from_slice(&self.shape[dim].to_le_bytes());
            // At most `i64::MAX`: the `i64` has the same bytes.
            let at = 64 + 8 * dim;
            out[at..at + 8].copy_from_slice(&self.strides[dim].to_le_bytes());
        }
        out
    }
}

/// The descriptor header (32 bytes, `docs/ABI.md`). Fields an op does not
/// use stay 0, as the host requires.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Header {
    op: u32,
    precision: u32,
    alpha: f32,
    beta: f32,
    eps: f32,
    axis: i32,
}

impl Header {
    const fn new(op: u32) -> Header {
        Header {
            op,
            precision: TENSOR_PRECISION_DEFAULT,
            alpha: 0.0,
            beta: 0.0,
            eps: 0.0,
            axis: 0,
        }
    }

    /// The 32 bytes of `docs/ABI.md`, little-endian; `flags` is 0.
    fn encode(&self, operand_count: u32) -> [u8; TENSOR_HEADER_LEN] {
        let mut out = [0u8; TENSOR_HEADER_LEN];
        out[0..4].copy_from_slice(&self.op.to_le_bytes());
        out[4..8].copy_from_slice(&self.precision.to_le_bytes());
        out[8..12].copy_from_slice(&operand_count.to_le_bytes());
        // 12..16: flags, 0.
        out[16..20].copy_from_slice(&self.alpha.to_bits().to_le_bytes());
        out[20..24].copy_from_slice(&self.beta.to_bits().to_le_bytes());
        out[24..28].copy_from_slice(&self.eps.to_bits().to_le_bytes());
        out[28..32].copy_from_slice(&self.axis.to_le_bytes());
        out
    }
}

/// A tensor operand the op only reads: a view of `T`s in a guest slice or
/// a device buffer, with a shape (rank 1 to 4) and strides in elements.
/// Made only when the whole extent the view spans lies inside its memory.
///
/// `'a` is how long the slice stays borrowed: an op that reads it keeps it
/// from being written until the op has been waited for.
#[derive(Clone, Copy, Debug)]
pub struct Tensor<'a, T: Element> {
    operand: Operand,
    borrow: PhantomData<&'a [T]>,
}

impl<'a, T: Element> Tensor<'a, T> {
    fn from_operand(operand: Operand) -> Self {
        Tensor {
            operand,
            borrow: PhantomData,
        }
    }

    /// `data` as a row-major (contiguous) tensor of `shape`. `EFAULT` when
    /// `data` is shorter than the shape's product (it may be longer);
    /// `EINVAL` for a rank outside 1..=4 or a zero extent.
    pub fn new(data: &'a [T], shape: &[usize]) -> Result<Self, Error> {
        Tensor::strided_opt(data, shape, None)
    }

    /// `data` as a tensor of `shape` whose element `[i, j, ..]` is
    /// `data[i * strides[0] + j * strides[1] + ..]`. A stride of 0 repeats
    /// the same elements along that axis (e.g. one matrix for every batch
    /// of a GEMM). `EFAULT` when the last element is past `data`'s end;
    /// `EINVAL` for a rank outside 1..=4, a zero extent, or as many
    /// strides as axes not given.
    pub fn strided(data: &'a [T], shape: &[usize], strides: &[usize]) -> Result<Self, Error> {
        Tensor::strided_opt(data, shape, Some(strides))
    }

    fn strided_opt(
        data: &'a [T],
        shape: &[usize],
        strides: Option<&[usize]>,
    ) -> Result<Self, Error> {
        // Exposed, not just `addr()`: the host reads through this integer.
        let addr = data.as_ptr().expose_provenance();
        Operand::guest(addr, data.len(), T::DTYPE, shape, strides).map(Tensor::from_operand)
    }

    /// The row-major tensor of `shape` at byte `offset` of `buffer` (which
    /// must be aligned to the element size, or the host refuses it with
    /// `EALIGN`). `EFAULT` when it would run past the buffer's end.
    pub fn buffer(buffer: &'a Buffer, offset: u64, shape: &[usize]) -> Result<Self, Error> {
        Operand::buffer(buffer, offset, T::DTYPE, shape, None).map(Tensor::from_operand)
    }

    /// As [`Tensor::buffer`], with strides in elements as for
    /// [`Tensor::strided`].
    pub fn buffer_strided(
        buffer: &'a Buffer,
        offset: u64,
        shape: &[usize],
        strides: &[usize],
    ) -> Result<Self, Error> {
        Operand::buffer(buffer, offset, T::DTYPE, shape, Some(strides)).map(Tensor::from_operand)
    }

    /// The extents, outermost first.
    pub fn shape(&self) -> &[u64] {
        self.operand.dims()
    }

    /// The strides in elements, outermost first.
    pub fn strides(&self) -> &[u64] {
        self.operand.stride()
    }

    /// The element type.
    pub const fn dtype(&self) -> DType {
        T::DTYPE
    }
}

/// The tensor operand an op writes: `f32`s (every op's output is `f32`) in
/// a guest slice or a device buffer, with a shape and strides as for
/// [`Tensor`]. A GEMM with a non-zero `beta` also reads it.
///
/// `'a` is how long the slice stays exclusively borrowed: it cannot be
/// read or written until the op has been waited for. Not `Clone`, so one
/// view names one output.
#[derive(Debug)]
pub struct TensorMut<'a> {
    operand: Operand,
    borrow: PhantomData<&'a mut [f32]>,
}

impl<'a> TensorMut<'a> {
    fn from_operand(operand: Operand) -> Self {
        TensorMut {
            operand,
            borrow: PhantomData,
        }
    }

    /// `data` as a row-major output of `shape`. Errors as [`Tensor::new`].
    pub fn new(data: &'a mut [f32], shape: &[usize]) -> Result<Self, Error> {
        TensorMut::strided_opt(data, shape, None)
    }

    /// `data` as an output of `shape` with strides in elements. Errors as
    /// [`Tensor::strided`]; the host refuses strides under which two
    /// elements (or two batches of a GEMM's C) would share memory.
    pub fn strided(data: &'a mut [f32], shape: &[usize], strides: &[usize]) -> Result<Self, Error> {
        TensorMut::strided_opt(data, shape, Some(strides))
    }

    fn strided_opt(
        data: &'a mut [f32],
        shape: &[usize],
        strides: Option<&[usize]>,
    ) -> Result<Self, Error> {
        // Exposed: the host writes through this integer.
        let addr = data.as_mut_ptr().expose_provenance();
        Operand::guest(addr, data.len(), DType::F32, shape, strides).map(TensorMut::from_operand)
    }

    /// The row-major output of `shape` at byte `offset` of `buffer`. Errors
    /// as [`Tensor::buffer`].
    pub fn buffer(buffer: &'a Buffer, offset: u64, shape: &[usize]) -> Result<Self, Error> {
        Operand::buffer(buffer, offset, DType::F32, shape, None).map(TensorMut::from_operand)
    }

    /// As [`TensorMut::buffer`], with strides in elements.
    pub fn buffer_strided(
        buffer: &'a Buffer,
        offset: u64,
        shape: &[usize],
        strides: &[usize],
    ) -> Result<Self, Error> {
        Operand::buffer(buffer, offset, DType::F32, shape, Some(strides))
            .map(TensorMut::from_operand)
    }

    /// The extents, outermost first.
    pub fn shape(&self) -> &[u64] {
        self.operand.dims()
    }

    /// The strides in elements, outermost first.
    pub fn strides(&self) -> &[u64] {
        self.operand.stride()
    }
}

/// A built-in tensor op being described: the header and its operands in
/// the op's order, the output last. Made by the op functions of this
/// module ([`gemm`], [`softmax`], ...); nothing reaches the host until
/// [`TensorOp::run`] or [`TensorOp::submit`].
///
/// `'a` is how long the guest slices among the operands stay borrowed, as
/// for a kernel [`Launch`](crate::Launch).
#[derive(Debug)]
#[must_use = "a tensor op does nothing until it is run or submitted"]
pub struct TensorOp<'a> {
    header: Header,
    operands: [Operand; TENSOR_MAX_OPERANDS],
    count: usize,
    borrows: PhantomData<&'a ()>,
}

impl<'a> TensorOp<'a> {
    fn new(header: Header, inputs: &[Operand], output: TensorMut<'a>) -> TensorOp<'a> {
        let mut operands = [output.operand; TENSOR_MAX_OPERANDS];
        operands[..inputs.len()].copy_from_slice(inputs);
        TensorOp {
            header,
            operands,
            count: inputs.len() + 1,
            borrows: PhantomData,
        }
    }

    /// Writes the descriptor into `out`; its length (`32 + 96 * count`).
    fn encode_into(&self, out: &mut [u8; MAX_DESCRIPTOR_LEN]) -> usize {
        out[..TENSOR_HEADER_LEN].copy_from_slice(&self.header.encode(self.count as u32));
        for (i, operand) in self.operands[..self.count].iter().enumerate() {
            let at = TENSOR_HEADER_LEN + i * TENSOR_OPERAND_LEN;
            out[at..at + TENSOR_OPERAND_LEN].copy_from_slice(&operand.encode());
        }
        TENSOR_HEADER_LEN + self.count * TENSOR_OPERAND_LEN
    }

    /// The descriptor `tensor_op` will read: the 32-byte header, then the
    /// 96-byte operands (`docs/ABI.md`), little-endian.
    pub fn descriptor(&self) -> Vec<u8> {
        let mut out = [0u8; MAX_DESCRIPTOR_LEN];
        let len = self.encode_into(&mut out);
        out[..len].to_vec()
    }

    /// Queues the op; its launch handle.
    ///
    /// # Safety
    ///
    /// The launch must be waited for (`wait` on the handle, or `sync`)
    /// before `'a` ends.
    unsafe fn queue(&self) -> Result<u64, Error> {
        let mut desc = [0u8; MAX_DESCRIPTOR_LEN];
        let len = self.encode_into(&mut desc);
        // SAFETY: every guest-memory operand's whole extent lies inside a
        // slice borrowed for `'a` (checked when its `Tensor`/`TensorMut`
        // was made): shared for inputs, exclusive for the output; and the
        // caller waits for the launch before `'a` ends.
        unsafe { result::tensor_op(&desc[..len]) }
    }

    /// Queues the op and waits: `Ok` once it has finished. The host's
    /// checks (`EINVAL` with the reason for shapes, strides or dtypes the
    /// op does not take, `ENOTADDR` when the guest's memory is not
    /// device-addressable, ...) or `ELAUNCH` when it, or earlier work of
    /// the guest, failed.
    pub fn run(self) -> Result<(), Error> {
        // SAFETY: waited for below, while `self` (and so `'a`) is alive.
        let handle = unsafe { self.queue()? };
        result::wait(handle)
    }

    /// Queues the op and returns at once; [`PendingLaunch::wait`] on it
    /// later. The borrowed slices stay borrowed until `scope` ends, which
    /// waits for every launch submitted in it. Ops queued on the guest's
    /// stream run in order, so an op over device buffers may read what an
    /// earlier one writes without waiting in between.
    pub fn submit<'scope, 'env>(
        self,
        scope: &'scope Scope<'scope, 'env>,
    ) -> Result<PendingLaunch<'scope>, Error>
    where
        'a: 'scope,
    {
        // SAFETY: the borrows outlive `'scope`, and `scope()` waits for
        // every launch adopted into it before `'scope` ends; the handle is
        // adopted right after queueing, before anything can fail.
        let handle = unsafe { self.queue()? };
        Ok(scope.adopt(handle))
    }
}

/// What a GEMM computes in: the inputs' dtype, or TF32 for f32 inputs that
/// may be rounded to it. The product is always accumulated and written in
/// f32.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Precision {
    /// f32 inputs, f32 arithmetic.
    F32,
    /// f32 inputs rounded to TF32 (10-bit mantissa) on Tensor Cores.
    Tf32,
    /// bf16 inputs.
    Bf16,
    /// f16 inputs.
    F16,
}

/// A GEMM being described, `C = alpha * A @ B + beta * C` (alpha 1 and
/// beta 0 unless set): a [`TensorOp`] with the settings only a GEMM has.
/// Made by [`gemm`].
#[derive(Debug)]
#[must_use = "a tensor op does nothing until it is run or submitted"]
pub struct Gemm<'a, T: Element> {
    op: TensorOp<'a>,
    inputs: PhantomData<T>,
}

impl<'a, T: Element> Gemm<'a, T> {
    /// Scales the product (1 unless set; must be finite).
    pub fn alpha(mut self, alpha: f32) -> Self {
        self.op.header.alpha = alpha;
        self
    }

    /// Scales C before the product is added (0 unless set: then C is not
    /// read, and may hold anything, NaN included; must be finite).
    pub fn beta(mut self, beta: f32) -> Self {
        self.op.header.beta = beta;
        self
    }

    /// What the GEMM computes in.
    pub fn precision(&self) -> Precision {
        match (T::DTYPE, self.op.header.precision) {
            (DType::F32, TENSOR_PRECISION_TF32) => Precision::Tf32,
            (DType::F32, _) => Precision::F32,
            (DType::Bf16, _) => Precision::Bf16,
            (DType::F16, _) => Precision::F16,
        }
    }

    /// The op, for [`TensorOp::descriptor`] or to pass around untyped.
    pub fn into_op(self) -> TensorOp<'a> {
        self.op
    }

    /// As [`TensorOp::run`].
    pub fn run(self) -> Result<(), Error> {
        self.op.run()
    }

    /// As [`TensorOp::submit`].
    pub fn submit<'scope, 'env>(
        self,
        scope: &'scope Scope<'scope, 'env>,
    ) -> Result<PendingLaunch<'scope>, Error>
    where
        'a: 'scope,
    {
        self.op.submit(scope)
    }
}

impl Gemm<'_, f32> {
    /// Lets the device round the f32 inputs to TF32 (a Tensor Core GEMM,
    /// about 1e-3 relative error) where it has one.
    pub fn tf32(mut self) -> Self {
        self.op.header.precision = TENSOR_PRECISION_TF32;
        self
    }
}

impl<'a, T: Element> From<Gemm<'a, T>> for TensorOp<'a> {
    fn from(gemm: Gemm<'a, T>) -> TensorOp<'a> {
        gemm.op
    }
}

/// `C = A @ B`: A `[M, K]`, B `[K, N]`, C `[M, N]`, or all three rank 3
/// with a leading batch extent (a batch stride of 0 in A or B uses one
/// matrix for every batch). A and B are f32, bf16 or f16 (the same); C is
/// f32 and accumulated in f32. Last strides 1, row strides at least the
/// row length. Set `alpha`, `beta` or TF32 on the [`Gemm`].
pub fn gemm<'a, T: Element>(a: Tensor<'a, T>, b: Tensor<'a, T>, c: TensorMut<'a>) -> Gemm<'a, T> {
    let header = Header {
        alpha: 1.0,
        ..Header::new(TENSOR_OP_GEMM)
    };
    Gemm {
        op: TensorOp::new(header, &[a.operand, b.operand], c),
        inputs: PhantomData,
    }
}

fn reduce<'a>(op: u32, x: Tensor<'a, f32>, y: TensorMut<'a>, axis: i32) -> TensorOp<'a> {
    let header = Header {
        axis,
        ..Header::new(op)
    };
    TensorOp::new(header, &[x.operand], y)
}

/// `y = sum of x over axis` (negative counts from the end). Contiguous;
/// Y has X's shape without the axis, or with it as 1.
pub fn reduce_sum<'a>(x: Tensor<'a, f32>, y: TensorMut<'a>, axis: i32) -> TensorOp<'a> {
    reduce(TENSOR_OP_REDUCE_SUM, x, y, axis)
}

/// `y = max of x over axis`, shapes as for [`reduce_sum`].
pub fn reduce_max<'a>(x: Tensor<'a, f32>, y: TensorMut<'a>, axis: i32) -> TensorOp<'a> {
    reduce(TENSOR_OP_REDUCE_MAX, x, y, axis)
}

/// `y = mean of x over axis`, shapes as for [`reduce_sum`].
pub fn reduce_mean<'a>(x: Tensor<'a, f32>, y: TensorMut<'a>, axis: i32) -> TensorOp<'a> {
    reduce(TENSOR_OP_REDUCE_MEAN, x, y, axis)
}

/// Softmax over the last axis; X and Y contiguous, of one shape.
pub fn softmax<'a>(x: Tensor<'a, f32>, y: TensorMut<'a>) -> TensorOp<'a> {
    let header = Header {
        axis: -1,
        ..Header::new(TENSOR_OP_SOFTMAX)
    };
    TensorOp::new(header, &[x.operand], y)
}

/// Layer norm over the last axis, `y = (x - mean) / sqrt(var + eps) *
/// gamma + beta` (biased variance): X `[.., C]` and Y contiguous, of one
/// shape; gamma and beta contiguous `[C]`; `eps` finite and not negative.
pub fn layernorm<'a>(
    x: Tensor<'a, f32>,
    gamma: Tensor<'a, f32>,
    beta: Tensor<'a, f32>,
    y: TensorMut<'a>,
    eps: f32,
) -> TensorOp<'a> {
    let header = Header {
        eps,
        axis: -1,
        ..Header::new(TENSOR_OP_LAYERNORM)
    };
    TensorOp::new(header, &[x.operand, gamma.operand, beta.operand], y)
}

/// `y = a + b`, contiguous; B has A's shape or a suffix of it (a bias row
/// `[N]` added to every row of `[M, N]`); Y has A's shape.
pub fn add<'a>(a: Tensor<'a, f32>, b: Tensor<'a, f32>, y: TensorMut<'a>) -> TensorOp<'a> {
    TensorOp::new(Header::new(TENSOR_OP_ADD), &[a.operand, b.operand], y)
}

/// `y = a * b`, shapes as for [`add`].
pub fn mul<'a>(a: Tensor<'a, f32>, b: Tensor<'a, f32>, y: TensorMut<'a>) -> TensorOp<'a> {
    TensorOp::new(Header::new(TENSOR_OP_MUL), &[a.operand, b.operand], y)
}

/// `y = max(x, 0)`; X and Y contiguous, of one shape.
pub fn relu<'a>(x: Tensor<'a, f32>, y: TensorMut<'a>) -> TensorOp<'a> {
    TensorOp::new(Header::new(TENSOR_OP_RELU), &[x.operand], y)
}

/// `y = 0.5 x (1 + erf(x / sqrt 2))` (the exact GELU); X and Y contiguous,
/// of one shape.
pub fn gelu<'a>(x: Tensor<'a, f32>, y: TensorMut<'a>) -> TensorOp<'a> {
    TensorOp::new(Header::new(TENSOR_OP_GELU), &[x.operand], y)
}

/// X `[b?, R, C]` to Y `[b?, C, R]`, both contiguous.
pub fn transpose<'a>(x: Tensor<'a, f32>, y: TensorMut<'a>) -> TensorOp<'a> {
    TensorOp::new(Header::new(TENSOR_OP_TRANSPOSE), &[x.operand], y)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds one op over an input slice and an output slice; its descriptor.
    type MakeDescriptor = fn(&[f32], &mut [f32]) -> Vec<u8>;

    /// `x` as a guest would see its address (only the low 32 bits are
    /// meaningful on wasm32; on the host the test compares whole `u64`s).
    fn addr_of<T>(x: &[T]) -> u64 {
        x.as_ptr().addr() as u64
    }

    #[test]
    fn gemm_header_encodes_as_the_abi_table_says() {
        let a = [1.0f32; 6];
        let b = [1.0f32; 12];
        let mut c = [0.0f32; 8];
        let op = gemm(
            Tensor::new(&a, &[2, 3]).unwrap(),
            Tensor::new(&b, &[3, 4]).unwrap(),
            TensorMut::new(&mut c, &[2, 4]).unwrap(),
        )
        .alpha(2.0)
        .beta(0.5)
        .tf32();
        assert_eq!(op.precision(), Precision::Tf32);
        let desc = op.into_op().descriptor();
        assert_eq!(desc.len(), 32 + 3 * 96);
        #[rustfmt::skip]
        let header: [u8; 32] = [
            1, 0, 0, 0, // op: gemm
            1, 0, 0, 0, // precision: TF32 allowed
            3, 0, 0, 0, // operand_count
            0, 0, 0, 0, // flags
            0x00, 0x00, 0x00, 0x40, // alpha 2.0 = 0x4000_0000
            0x00, 0x00, 0x00, 0x3f, // beta 0.5 = 0x3f00_0000
            0, 0, 0, 0, // eps
            0, 0, 0, 0, // axis
        ];
        assert_eq!(desc[..32], header);
    }

    #[test]
    fn guest_operand_encodes_as_the_abi_table_says() {
        let x = [0.5f32; 12];
        let mut y = [0.0f32; 12];
        let y_addr = y.as_ptr().addr() as u64;
        let op = softmax(
            Tensor::new(&x, &[3, 4]).unwrap(),
            TensorMut::new(&mut y, &[3, 4]).unwrap(),
        );
        let desc = op.descriptor();
        assert_eq!(desc.len(), 32 + 2 * 96);
        #[rustfmt::skip]
        let header: [u8; 32] = [
            5, 0, 0, 0, // op: softmax
            0, 0, 0, 0, // precision
            2, 0, 0, 0, // operand_count
            0, 0, 0, 0, // flags
            0, 0, 0, 0, // alpha
            0, 0, 0, 0, // beta
            0, 0, 0, 0, // eps
            0xff, 0xff, 0xff, 0xff, // axis -1: the last
        ];
        assert_eq!(desc[..32], header);
        let mut x_op = [0u8; 96];
        #[rustfmt::skip]
        x_op[..8].copy_from_slice(&[
            0, 0, 0, 0, // location: guest memory
            1, 0, 0, 0, // dtype: f32
        ]);
        x_op[8..16].copy_from_slice(&addr_of(&x).to_le_bytes());
        // 16..24: buffer offset 0; 28..32: reserved 0.
        x_op[24] = 2; // rank
        x_op[32] = 3; // shape [3, 4, 0, 0]
        x_op[40] = 4;
        x_op[64] = 4; // strides [4, 1, 0, 0]
        x_op[72] = 1;
        assert_eq!(desc[32..128], x_op);
        let mut y_op = x_op;
        y_op[8..16].copy_from_slice(&y_addr.to_le_bytes());
        assert_eq!(desc[128..224], y_op);
    }

    #[test]
    fn buffer_operand_with_strides_encodes_as_the_abi_table_says() {
        let operand = Operand::new(
            TENSOR_LOCATION_BUFFER,
            0x0000_0001_0000_0002,
            0x40,
            DType::Bf16,
            &[2, 3, 5],
            Some(&[0, 7, 1]),
            100,
        )
        .unwrap();
        #[rustfmt::skip]
        let want: [u8; 96] = [
            1, 0, 0, 0, // location: buffer
            2, 0, 0, 0, // dtype: bf16
            2, 0, 0, 0, 1, 0, 0, 0, // handle 0x1_0000_0002
            0x40, 0, 0, 0, 0, 0, 0, 0, // byte offset
            3, 0, 0, 0, // rank
            0, 0, 0, 0, // reserved
            2, 0, 0, 0, 0, 0, 0, 0, // shape
            3, 0, 0, 0, 0, 0, 0, 0,
            5, 0, 0, 0, 0, 0, 0, 0,
            0, 0, 0, 0, 0, 0, 0, 0, // unused
            0, 0, 0, 0, 0, 0, 0, 0, // strides: batch 0 (broadcast)
            7, 0, 0, 0, 0, 0, 0, 0, // row stride past the row
            1, 0, 0, 0, 0, 0, 0, 0,
            0, 0, 0, 0, 0, 0, 0, 0, // unused
        ];
        assert_eq!(operand.encode(), want);
    }

    #[test]
    fn layernorm_reduce_and_binary_headers() {
        let x = [1.0f32; 8];
        let g = [1.0f32; 4];
        let mut y = [0.0f32; 8];
        let op = layernorm(
            Tensor::new(&x, &[2, 4]).unwrap(),
            Tensor::new(&g, &[4]).unwrap(),
            Tensor::new(&g, &[4]).unwrap(),
            TensorMut::new(&mut y, &[2, 4]).unwrap(),
            1e-5,
        );
        let desc = op.descriptor();
        assert_eq!(desc.len(), 32 + 4 * 96);
        #[rustfmt::skip]
        assert_eq!(desc[..32], [
            6, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0,
            0, 0, 0, 0, 0, 0, 0, 0,
            0xac, 0xc5, 0x27, 0x37, // eps 1e-5 = 0x3727_c5ac
            0xff, 0xff, 0xff, 0xff,
        ]);
        // gamma and beta name the same slice: [4], stride 1.
        assert_eq!(desc[32 + 96..32 + 192], desc[32 + 192..32 + 288]);

        let mut s = [0.0f32; 4];
        let desc = reduce_max(
            Tensor::new(&x, &[2, 4]).unwrap(),
            TensorMut::new(&mut s, &[2]).unwrap(),
            -1,
        )
        .descriptor();
        #[rustfmt::skip]
        assert_eq!(desc[..32], [
            3, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0,
            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff,
        ]);

        let ops: [(MakeDescriptor, u8); 2] = [
            (
                |a, y| {
                    add(
                        Tensor::new(a, &[2, 4]).unwrap(),
                        Tensor::new(&a[..4], &[4]).unwrap(),
                        TensorMut::new(y, &[2, 4]).unwrap(),
                    )
                    .descriptor()
                },
                7,
            ),
            (
                |a, y| {
                    mul(
                        Tensor::new(a, &[2, 4]).unwrap(),
                        Tensor::new(a, &[2, 4]).unwrap(),
                        TensorMut::new(y, &[2, 4]).unwrap(),
                    )
                    .descriptor()
                },
                8,
            ),
        ];
        for (make, code) in ops {
            let desc = make(&x, &mut y);
            let mut want = [0u8; 32];
            want[0] = code;
            want[8] = 3;
            assert_eq!(desc[..32], want, "op {code}");
        }
    }

    #[test]
    fn unary_ops_and_transpose_use_their_codes_and_nothing_else() {
        let x = [1.0f32; 6];
        let mut y = [0.0f32; 6];
        let ops: [(MakeDescriptor, u8); 5] = [
            (
                |x, y| relu(tensor(x, &[6]), TensorMut::new(y, &[6]).unwrap()).descriptor(),
                9,
            ),
            (
                |x, y| gelu(tensor(x, &[6]), TensorMut::new(y, &[6]).unwrap()).descriptor(),
                10,
            ),
            (
                |x, y| {
                    transpose(tensor(x, &[2, 3]), TensorMut::new(y, &[3, 2]).unwrap()).descriptor()
                },
                11,
            ),
            (
                |x, y| {
                    reduce_sum(tensor(x, &[2, 3]), TensorMut::new(y, &[3]).unwrap(), 0).descriptor()
                },
                2,
            ),
            (
                |x, y| {
                    reduce_mean(tensor(x, &[2, 3]), TensorMut::new(y, &[2]).unwrap(), 1)
                        .descriptor()
                },
                4,
            ),
        ];
        for (make, code) in ops {
            let desc = make(&x, &mut y);
            assert_eq!(desc.len(), 32 + 2 * 96);
            let mut want = [0u8; 32];
            want[0] = code;
            want[8] = 2;
            if code == 4 {
                want[28] = 1; // axis 1
            }
            assert_eq!(desc[..32], want, "op {code}");
        }
    }

    fn tensor<'a>(x: &'a [f32], shape: &[usize]) -> Tensor<'a, f32> {
        Tensor::new(x, shape).unwrap()
    }

    #[test]
    fn bf16_and_f16_gemms_name_their_dtype_and_default_precision() {
        let a = [Bf16::from_f32(1.0); 6];
        let mut c = [0.0f32; 4];
        let op = gemm(
            Tensor::new(&a, &[2, 3]).unwrap(),
            Tensor::strided(&a, &[3, 2], &[2, 1]).unwrap(),
            TensorMut::new(&mut c, &[2, 2]).unwrap(),
        );
        assert_eq!(op.precision(), Precision::Bf16);
        let desc = op.into_op().descriptor();
        assert_eq!(desc[4..8], [0, 0, 0, 0]); // precision 0
        assert_eq!(desc[16..20], 1.0f32.to_bits().to_le_bytes()); // alpha 1
        assert_eq!(desc[32 + 4], 2); // A: bf16
        assert_eq!(desc[128 + 4], 2); // B: bf16
        assert_eq!(desc[224 + 4], 1); // C: f32

        let h = [F16::from_f32(1.0); 6];
        let op = gemm(
            Tensor::new(&h, &[2, 3]).unwrap(),
            Tensor::new(&h, &[3, 2]).unwrap(),
            TensorMut::new(&mut c, &[2, 2]).unwrap(),
        );
        assert_eq!(op.precision(), Precision::F16);
        assert_eq!(op.into_op().descriptor()[32 + 4], 3);
    }

    #[test]
    fn batched_gemm_may_broadcast_a_matrix_with_batch_stride_zero() {
        // One [4, 3] matrix for all 5 batches: the extent is 12 elements.
        let w = [1.0f32; 12];
        let t = Tensor::strided(&w, &[5, 4, 3], &[0, 3, 1]).unwrap();
        assert_eq!(t.shape(), [5, 4, 3]);
        assert_eq!(t.strides(), [0, 3, 1]);
        // Contiguous strides are the products of the later extents.
        let x = [1.0f32; 60];
        assert_eq!(Tensor::new(&x, &[5, 4, 3]).unwrap().strides(), [12, 3, 1]);
        assert_eq!(Tensor::new(&x, &[60]).unwrap().strides(), [1]);
        // A row stride past the row (a sub-matrix): extent (3 - 1) * 10 + 4.
        assert!(Tensor::strided(&x[..24], &[3, 4], &[10, 1]).is_ok());
        assert!(Tensor::strided(&x[..23], &[3, 4], &[10, 1]).is_err());
    }

    #[test]
    fn operands_past_their_slice_or_malformed_are_refused_in_the_guest() {
        let x = [1.0f32; 12];
        let errno = |r: Result<Tensor<'_, f32>, Error>| r.unwrap_err().errno;
        assert_eq!(errno(Tensor::new(&x, &[3, 5])), Errno::EFAULT);
        assert_eq!(errno(Tensor::new(&x, &[])), Errno::EINVAL);
        assert_eq!(errno(Tensor::new(&x, &[1, 1, 1, 1, 1])), Errno::EINVAL);
        assert_eq!(errno(Tensor::new(&x, &[3, 0])), Errno::EINVAL);
        assert_eq!(errno(Tensor::strided(&x, &[3, 4], &[4])), Errno::EINVAL);
        assert_eq!(errno(Tensor::strided(&x, &[3, 4], &[5, 1])), Errno::EFAULT);
        assert_eq!(errno(Tensor::new(&x[..0], &[1])), Errno::EFAULT);
        assert_eq!(
            errno(Tensor::new(&x, &[usize::MAX, usize::MAX])),
            Errno::EOVERFLOW
        );
        assert_eq!(
            errno(Tensor::strided(&x, &[3, 4], &[usize::MAX, 1])),
            Errno::EOVERFLOW
        );
        let mut y = [0.0f32; 4];
        let err = TensorMut::new(&mut y, &[5]).unwrap_err();
        assert_eq!(err.errno, Errno::EFAULT);
        assert!(
            err.message.starts_with("tensor_op: EFAULT: "),
            "{}",
            err.message
        );
        // A shorter shape than the slice is fine: the op uses a prefix.
        assert_eq!(TensorMut::new(&mut y, &[3]).unwrap().shape(), [3]);
    }

    #[test]
    fn bf16_rounds_to_nearest_even() {
        let cases: [(f32, u16); 9] = [
            (1.0, 0x3f80),
            (-2.0, 0xc000),
            (1.0 + 1.0 / 256.0, 0x3f80),        // tie, to even (down)
            (1.0 + 3.0 / 256.0, 0x3f82),        // tie, to even (up)
            (1.0 + 1.0 / 256.0 + 1e-7, 0x3f81), // just above the tie
            (f32::INFINITY, 0x7f80),
            (f32::MAX, 0x7f80), // rounds past the largest finite bf16
            (f32::from_bits(1), 0x0000),
            (-0.0, 0x8000),
        ];
        for (x, bits) in cases {
            assert_eq!(Bf16::from_f32(x), Bf16(bits), "{x:e}");
        }
        assert!(Bf16::from_f32(f32::NAN).to_f32().is_nan());
        assert_eq!(Bf16(0x3f81).to_f32(), 1.0 + 1.0 / 128.0);
    }

    #[test]
    fn f16_rounds_to_nearest_even_with_subnormals() {
        let tiny = 1.0 / 16_777_216.0; // 2^-24, the smallest subnormal
        let cases: [(f32, u16); 14] = [
            (1.0, 0x3c00),
            (-2.0, 0xc000),
            (65504.0, 0x7bff),
            (65519.0, 0x7bff),
            (65520.0, 0x7c00), // tie past the largest finite: infinity
            (1e9, 0x7c00),
            (f32::NEG_INFINITY, 0xfc00),
            (1.0 + 1.0 / 2048.0, 0x3c00), // tie, to even (down)
            (1.0 + 3.0 / 2048.0, 0x3c02), // tie, to even (up)
            (tiny, 0x0001),
            (tiny / 2.0, 0x0000),    // tie, to even (zero)
            (tiny * 1.5, 0x0002),    // tie, to even (up)
            (1023.0 * tiny, 0x03ff), // the largest subnormal
            (1024.0 * tiny, 0x0400), // 2^-14, the smallest normal
        ];
        for (x, bits) in cases {
            assert_eq!(F16::from_f32(x), F16(bits), "{x:e}");
        }
        assert!(F16::from_f32(f32::NAN).to_f32().is_nan());
        for bits in [0x0001u16, 0x03ff, 0x0400, 0x3c00, 0x7bff, 0xc000, 0x8000] {
            assert_eq!(F16::from_f32(F16(bits).to_f32()), F16(bits), "{bits:#06x}");
        }
        assert_eq!(F16(0x0001).to_f32(), tiny);
        assert_eq!(F16(0x7c00).to_f32(), f32::INFINITY);
    }
}
