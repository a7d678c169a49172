//! Tensor maps: what a kernel's TMA (Hopper's tensor memory accelerator)
//! descriptor describes, as plain numbers, and the checks CUDA documents for
//! `cuTensorMapEncodeTiled`. Encoding is the CUDA driver's business; this
//! module only says whether a description may reach it.

use core::fmt;

use crate::memory::DevicePtr;

/// Most dimensions a tensor map may have (CUDA's limit).
pub const TENSOR_MAP_MAX_RANK: usize = 5;
/// Bytes an encoded tensor map takes as a kernel parameter (a `CUtensorMap`).
pub const TENSOR_MAP_PARAM_BYTES: usize = 128;
/// Alignment of an encoded tensor map, in memory and in the parameter space.
pub const TENSOR_MAP_ALIGN: usize = 64;
/// Required alignment of the base address and of every byte stride.
pub const TENSOR_MAP_ADDRESS_ALIGN: u64 = 16;
/// Largest global dimension, in elements (2^32).
pub const TENSOR_MAP_MAX_DIM: u64 = 1 << 32;
/// Every byte stride must be below this (2^40).
pub const TENSOR_MAP_STRIDE_LIMIT: u64 = 1 << 40;
/// Largest box dimension, in elements.
pub const TENSOR_MAP_MAX_BOX_DIM: u32 = 256;

/// The element type of a tensor map.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum TensorMapDtype {
    /// 8-bit unsigned integers (also any byte-sized type, e.g. FP8).
    U8,
    /// IEEE half precision.
    F16,
    /// bfloat16.
    Bf16,
    /// IEEE single precision.
    F32,
    /// IEEE single precision in memory, rounded to TF32 (10 fraction bits,
    /// to nearest with ties to even, subnormals kept, a NaN stays a NaN) as
    /// a copy moves it into shared memory: what a TF32 tensor-core operand
    /// needs. CUDA's `TFLOAT32`, not its flush-to-zero variant.
    Tf32,
}

impl TensorMapDtype {
    /// Bytes of one element.
    pub const fn size_bytes(self) -> u32 {
        match self {
            TensorMapDtype::U8 => 1,
            TensorMapDtype::F16 | TensorMapDtype::Bf16 => 2,
            TensorMapDtype::F32 | TensorMapDtype::Tf32 => 4,
        }
    }
}

/// How a box is laid out in shared memory: 16-byte chunks swizzled within a
/// span, so that reading a box's columns does not hit one bank.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum TensorMapSwizzle {
    /// Rows as they are.
    None,
    /// 16-byte chunks swizzled within 32 bytes.
    B32,
    /// 16-byte chunks swizzled within 64 bytes.
    B64,
    /// 16-byte chunks swizzled within 128 bytes.
    B128,
}

impl TensorMapSwizzle {
    /// The span the chunks are swizzled within: a box row may be no wider.
    pub const fn span_bytes(self) -> Option<u32> {
        match self {
            TensorMapSwizzle::None => None,
            TensorMapSwizzle::B32 => Some(32),
            TensorMapSwizzle::B64 => Some(64),
            TensorMapSwizzle::B128 => Some(128),
        }
    }
}

/// A tiled tensor map: a tensor of `rank` dimensions in device memory, and
/// the box one TMA copy moves between it and shared memory. Element
/// strides are 1, interleave none, and elements outside the tensor read as
/// zero. Dimensions are innermost first (a row-major `rows x cols` matrix
/// is `dims = [cols, rows]`); entries past `rank` are not read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct TensorMapSpec {
    /// The element type.
    pub dtype: TensorMapDtype,
    /// Dimensions, 1 ..= [`TENSOR_MAP_MAX_RANK`].
    pub rank: u8,
    /// Address of element (0, 0, ...): 16-byte aligned.
    pub base: DevicePtr,
    /// Elements along each dimension, innermost first: 1 ..= 2^32 each.
    pub dims: [u64; TENSOR_MAP_MAX_RANK],
    /// Bytes from one index to the next along dimensions 1 .. rank
    /// (`strides[0]` is the row pitch): multiples of 16, below 2^40.
    pub strides: [u64; TENSOR_MAP_MAX_RANK - 1],
    /// Elements of the box along each dimension: 1 ..= 256 each; the
    /// innermost's bytes a multiple of 16 (and within the swizzle span).
    pub box_dims: [u32; TENSOR_MAP_MAX_RANK],
    /// The box's layout in shared memory.
    pub swizzle: TensorMapSwizzle,
}

/// Which of CUDA's constraints a [`TensorMapSpec`] breaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum TensorMapError {
    /// The rank is 0 or more than [`TENSOR_MAP_MAX_RANK`] (or the slices
    /// given to [`TensorMapSpec::new`] disagree on it).
    Rank {
        /// The rank given.
        rank: usize,
    },
    /// The base address is null or not 16-byte aligned.
    Base {
        /// The address given.
        base: u64,
    },
    /// A global dimension is 0 or more than 2^32 elements.
    Dim {
        /// Which dimension (0 is the innermost).
        index: usize,
        /// Its extent.
        value: u64,
    },
    /// A byte stride is not a multiple of 16, or not below 2^40.
    Stride {
        /// Which dimension it steps along (1 ..= rank - 1).
        index: usize,
        /// Its bytes.
        value: u64,
    },
    /// A box dimension is 0 or more than 256 elements.
    BoxDim {
        /// Which dimension.
        index: usize,
        /// Its extent.
        value: u32,
    },
    /// The box's innermost row is not a multiple of 16 bytes.
    BoxRow {
        /// The row's bytes.
        bytes: u32,
    },
    /// The box's innermost row is wider than the swizzle's span.
    BoxRowWiderThanSwizzle {
        /// The row's bytes.
        bytes: u32,
        /// The span.
        span: u32,
    },
    /// The tensor's last byte lies past the end of the address space.
    Extent,
}

impl fmt::Display for TensorMapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            TensorMapError::Rank { rank } => {
                write!(f, "tensor map of rank {rank}: must be 1 ..= 5")
            }
            TensorMapError::Base { base } => {
                write!(
                    f,
                    "tensor map base {base:#x} is null or not 16-byte aligned"
                )
            }
            TensorMapError::Dim { index, value } => write!(
                f,
                "tensor map dimension {index} is {value} elements: must be 1 ..= 2^32"
            ),
            TensorMapError::Stride { index, value } => write!(
                f,
                "tensor map stride of dimension {index} is {value} bytes: must be a multiple \
                 of 16 below 2^40"
            ),
            TensorMapError::BoxDim { index, value } => write!(
                f,
                "tensor map box dimension {index} is {value} elements: must be 1 ..= 256"
            ),
            TensorMapError::BoxRow { bytes } => write!(
                f,
                "tensor map box row is {bytes} bytes: must be a multiple of 16"
            ),
            TensorMapError::BoxRowWiderThanSwizzle { bytes, span } => write!(
                f,
                "tensor map box row is {bytes} bytes, wider than its {span}-byte swizzle"
            ),
            TensorMapError::Extent => {
                f.write_str("tensor map reaches past the end of the address space")
            }
        }
    }
}

impl TensorMapSpec {
    /// A checked map of `dims.len()` dimensions: `strides` holds one entry
    /// fewer (dimensions 1..), `box_dims` one per dimension.
    pub fn new(
        dtype: TensorMapDtype,
        base: DevicePtr,
        dims: &[u64],
        strides: &[u64],
        box_dims: &[u32],
        swizzle: TensorMapSwizzle,
    ) -> Result<TensorMapSpec, TensorMapError> {
        let rank = dims.len();
        let bad_rank = TensorMapError::Rank { rank };
        if rank == 0
            || rank > TENSOR_MAP_MAX_RANK
            || strides.len() + 1 != rank
            || box_dims.len() != rank
        {
            return Err(bad_rank);
        }
        let mut spec = TensorMapSpec {
            dtype,
            rank: rank as u8,
            base,
            dims: [0; TENSOR_MAP_MAX_RANK],
            strides: [0; TENSOR_MAP_MAX_RANK - 1],
            box_dims: [0; TENSOR_MAP_MAX_RANK],
            swizzle,
        };
        for (dst, src) in spec.dims.iter_mut().zip(dims) {
            *dst = *src;
        }
        for (dst, src) in spec.strides.iter_mut().zip(strides) {
            *dst = *src;
        }
        for (dst, src) in spec.box_dims.iter_mut().zip(box_dims) {
            *dst = *src;
        }
        spec.validate()?;
        Ok(spec)
    }

    /// The rank as a count, if it is in 1 ..= [`TENSOR_MAP_MAX_RANK`].
    fn checked_rank(&self) -> Result<usize, TensorMapError> {
        let rank = usize::from(self.rank);
        if (1..=TENSOR_MAP_MAX_RANK).contains(&rank) {
            Ok(rank)
        } else {
            Err(TensorMapError::Rank { rank })
        }
    }

    /// The `rank` global dimensions (empty if the rank is out of range).
    pub fn dims(&self) -> &[u64] {
        let rank = self.checked_rank().unwrap_or(0);
        self.dims.get(..rank).unwrap_or_default()
    }

    /// The `rank - 1` byte strides (empty if the rank is out of range).
    pub fn strides(&self) -> &[u64] {
        let rank = self.checked_rank().unwrap_or(1);
        self.strides.get(..rank - 1).unwrap_or_default()
    }

    /// The `rank` box dimensions (empty if the rank is out of range).
    pub fn box_dims(&self) -> &[u32] {
        let rank = self.checked_rank().unwrap_or(0);
        self.box_dims.get(..rank).unwrap_or_default()
    }

    /// Bytes one box takes in shared memory: what a copy of it moves (a
    /// kernel's `mbarrier` transaction count), out-of-bounds zeros included.
    pub fn box_bytes(&self) -> u64 {
        self.box_dims()
            .iter()
            .fold(u64::from(self.dtype.size_bytes()), |n, &d| n * u64::from(d))
    }

    /// Bytes from `base` to just past the tensor's last element: the span
    /// a copy through this map may touch, which a caller checks lies inside
    /// memory the kernel may reach. `None` if it overflows `u64`.
    pub fn extent_bytes(&self) -> Option<u64> {
        let (&inner, outer) = self.dims().split_first()?;
        let mut end = inner.checked_mul(u64::from(self.dtype.size_bytes()))?;
        for (&dim, &stride) in outer.iter().zip(self.strides()) {
            end = end.checked_add(dim.checked_sub(1)?.checked_mul(stride)?)?;
        }
        Some(end)
    }

    /// Checks every constraint CUDA documents for `cuTensorMapEncodeTiled`
    /// with interleave none, so that a bad (possibly guest-supplied)
    /// description is refused before any driver call.
    pub fn validate(&self) -> Result<(), TensorMapError> {
        self.checked_rank()?;
        let base = self.base.0;
        if base == 0 || !base.is_multiple_of(TENSOR_MAP_ADDRESS_ALIGN) {
            return Err(TensorMapError::Base { base });
        }
        for (index, &value) in self.dims().iter().enumerate() {
            if value == 0 || value > TENSOR_MAP_MAX_DIM {
                return Err(TensorMapError::Dim { index, value });
            }
        }
        for (i, &value) in self.strides().iter().enumerate() {
            if !value.is_multiple_of(TENSOR_MAP_ADDRESS_ALIGN) || value >= TENSOR_MAP_STRIDE_LIMIT {
                return Err(TensorMapError::Stride {
                    index: i + 1,
                    value,
                });
            }
        }
        for (index, &value) in self.box_dims().iter().enumerate() {
            if value == 0 || value > TENSOR_MAP_MAX_BOX_DIM {
                return Err(TensorMapError::BoxDim { index, value });
            }
        }
        // At most 256 elements of at most 4 bytes: no overflow.
        let row = self.box_dims.first().copied().unwrap_or(0) * self.dtype.size_bytes();
        if !row.is_multiple_of(16) {
            return Err(TensorMapError::BoxRow { bytes: row });
        }
        if let Some(span) = self.swizzle.span_bytes()
            && row > span
        {
            return Err(TensorMapError::BoxRowWiderThanSwizzle { bytes: row, span });
        }
        let extent = self.extent_bytes().ok_or(TensorMapError::Extent)?;
        if base.checked_add(extent).is_none() {
            return Err(TensorMapError::Extent);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: DevicePtr = DevicePtr(0x7f00_0000_1000);

    /// A 100 x 72 row-major f32 matrix with a 320-byte row pitch, 32 x 16 boxes.
    fn matrix() -> TensorMapSpec {
        TensorMapSpec::new(
            TensorMapDtype::F32,
            BASE,
            &[72, 100],
            &[320],
            &[32, 16],
            TensorMapSwizzle::None,
        )
        .expect("valid")
    }

    #[test]
    fn a_valid_map_reads_back() {
        let m = matrix();
        assert_eq!(m.rank, 2);
        assert_eq!(m.dims(), &[72, 100]);
        assert_eq!(m.strides(), &[320]);
        assert_eq!(m.box_dims(), &[32, 16]);
        assert_eq!(m.box_bytes(), 32 * 16 * 4);
        assert_eq!(m.extent_bytes(), Some(99 * 320 + 72 * 4));
        assert_eq!(m.validate(), Ok(()));
        // Entries past the rank are not read.
        let mut padded = m;
        padded.dims[4] = 0;
        padded.box_dims[3] = 9999;
        padded.strides[3] = 3;
        assert_eq!(padded.validate(), Ok(()));
    }

    #[test]
    fn rank_is_one_to_five() {
        let m = TensorMapSpec::new(
            TensorMapDtype::U8,
            BASE,
            &[16],
            &[],
            &[16],
            TensorMapSwizzle::None,
        );
        assert_eq!(m.map(|m| m.extent_bytes()), Ok(Some(16)));
        let five = TensorMapSpec::new(
            TensorMapDtype::Bf16,
            BASE,
            &[8, 2, 3, 4, 5],
            &[16, 32, 96, 384],
            &[8, 1, 1, 1, 1],
            TensorMapSwizzle::None,
        )
        .expect("rank 5");
        assert_eq!(
            five.extent_bytes(),
            Some(16 + 16 + 2 * 32 + 3 * 96 + 4 * 384)
        );
        let none = TensorMapSpec::new(
            TensorMapDtype::F32,
            BASE,
            &[],
            &[],
            &[],
            TensorMapSwizzle::None,
        );
        assert_eq!(none, Err(TensorMapError::Rank { rank: 0 }));
        let six = TensorMapSpec::new(
            TensorMapDtype::F32,
            BASE,
            &[4; 6],
            &[16; 5],
            &[4; 6],
            TensorMapSwizzle::None,
        );
        assert_eq!(six, Err(TensorMapError::Rank { rank: 6 }));
        // The slices must agree.
        let short = TensorMapSpec::new(
            TensorMapDtype::F32,
            BASE,
            &[4, 4],
            &[],
            &[4, 4],
            TensorMapSwizzle::None,
        );
        assert_eq!(short, Err(TensorMapError::Rank { rank: 2 }));
        let mut m = matrix();
        for rank in [0, 6, 255] {
            m.rank = rank;
            let rank = usize::from(rank);
            assert_eq!(m.validate(), Err(TensorMapError::Rank { rank }));
            assert!(m.dims().is_empty() && m.strides().is_empty() && m.box_dims().is_empty());
            assert_eq!(m.extent_bytes(), None);
        }
    }

    #[test]
    fn base_is_non_null_and_16_byte_aligned() {
        let mut m = matrix();
        for base in [0, 8, 0x1004, BASE.0 + 1] {
            m.base = DevicePtr(base);
            assert_eq!(m.validate(), Err(TensorMapError::Base { base }));
        }
        m.base = DevicePtr(16);
        assert_eq!(m.validate(), Ok(()));
    }

    #[test]
    fn dims_are_one_to_2_pow_32() {
        let mut m = matrix();
        m.dims[1] = 0;
        assert_eq!(
            m.validate(),
            Err(TensorMapError::Dim { index: 1, value: 0 })
        );
        m.dims[1] = (1 << 32) + 1;
        assert_eq!(
            m.validate(),
            Err(TensorMapError::Dim {
                index: 1,
                value: (1 << 32) + 1
            })
        );
        m.dims[1] = 1 << 32;
        assert_eq!(m.validate(), Ok(()));
        m.dims[0] = u64::MAX;
        assert_eq!(
            m.validate(),
            Err(TensorMapError::Dim {
                index: 0,
                value: u64::MAX
            })
        );
    }

    #[test]
    fn strides_are_multiples_of_16_below_2_pow_40() {
        let mut m = matrix();
        for value in [0, 16, (1 << 40) - 16] {
            m.strides[0] = value;
            assert_eq!(m.validate(), Ok(()), "stride {value}");
        }
        for value in [8, 312, 1 << 40, u64::MAX] {
            m.strides[0] = value;
            assert_eq!(
                m.validate(),
                Err(TensorMapError::Stride { index: 1, value }),
                "stride {value}"
            );
        }
    }

    #[test]
    fn box_dims_are_one_to_256() {
        let mut m = matrix();
        m.box_dims[1] = 256;
        assert_eq!(m.validate(), Ok(()));
        for value in [0, 257, u32::MAX] {
            m.box_dims[1] = value;
            assert_eq!(
                m.validate(),
                Err(TensorMapError::BoxDim { index: 1, value })
            );
        }
        m = matrix();
        m.box_dims[0] = 0;
        assert_eq!(
            m.validate(),
            Err(TensorMapError::BoxDim { index: 0, value: 0 })
        );
    }

    #[test]
    fn box_rows_are_multiples_of_16_bytes_within_the_swizzle() {
        let mut m = matrix();
        m.box_dims[0] = 6; // 24 bytes
        assert_eq!(m.validate(), Err(TensorMapError::BoxRow { bytes: 24 }));
        m.dtype = TensorMapDtype::Bf16; // 12 bytes
        assert_eq!(m.validate(), Err(TensorMapError::BoxRow { bytes: 12 }));
        m.box_dims[0] = 8; // 16 bytes
        assert_eq!(m.validate(), Ok(()));
        m.dtype = TensorMapDtype::U8;
        assert_eq!(m.validate(), Err(TensorMapError::BoxRow { bytes: 8 }));
        m.box_dims[0] = 256;
        assert_eq!(m.validate(), Ok(()));

        let cases = [
            (TensorMapSwizzle::B32, 32),
            (TensorMapSwizzle::B64, 64),
            (TensorMapSwizzle::B128, 128),
        ];
        for (swizzle, span) in cases {
            let mut m = matrix();
            m.swizzle = swizzle;
            m.box_dims[0] = span / 4;
            assert_eq!(m.validate(), Ok(()), "{swizzle:?}");
            m.box_dims[0] = span / 4 + 4;
            assert_eq!(
                m.validate(),
                Err(TensorMapError::BoxRowWiderThanSwizzle {
                    bytes: span + 16,
                    span
                }),
                "{swizzle:?}"
            );
        }
        // Without a swizzle, a row may take the whole 256 elements.
        let mut m = matrix();
        m.box_dims[0] = 256;
        assert_eq!(m.validate(), Ok(()));
    }

    #[test]
    fn the_tensor_stays_inside_the_address_space() {
        let mut m = matrix();
        m.base = DevicePtr(u64::MAX - 15);
        assert_eq!(m.validate(), Err(TensorMapError::Extent));
        m.base = DevicePtr(u64::MAX - 99 * 320 - 72 * 4 - 15);
        m.base.0 &= !15;
        assert_eq!(m.validate(), Ok(()));
        // Five dimensions of 2^32 with strides near 2^40 overflow u64.
        let mut big = TensorMapSpec::new(
            TensorMapDtype::F32,
            BASE,
            &[4, 4, 4, 4, 4],
            &[16, 64, 256, 1024],
            &[4, 4, 4, 4, 4],
            TensorMapSwizzle::None,
        )
        .expect("small");
        big.dims = [1 << 32; 5];
        big.strides = [(1 << 40) - 16; 4];
        assert_eq!(big.extent_bytes(), None);
        assert_eq!(big.validate(), Err(TensorMapError::Extent));
    }

    #[test]
    fn tf32_maps_hold_f32_elements_and_check_like_f32() {
        assert_eq!(TensorMapDtype::Tf32.size_bytes(), 4);
        assert_eq!(
            TensorMapDtype::Tf32.size_bytes(),
            TensorMapDtype::F32.size_bytes()
        );
        // The TF32 GEMM's A map: {K, M, batch}, a {32, 256, 1} box, the
        // 128-byte swizzle (32 elements are exactly its span).
        let a = TensorMapSpec::new(
            TensorMapDtype::Tf32,
            BASE,
            &[4096, 4096, 1],
            &[4 * 4096, 4 * 4096 * 4096],
            &[32, 256, 1],
            TensorMapSwizzle::B128,
        )
        .expect("valid");
        assert_eq!(a.box_bytes(), 32 * 256 * 4);
        assert_eq!(a.extent_bytes(), Some(4 * 4096 * 4096));
        // Every check reads the same as for F32.
        for f32_map in [
            matrix(),
            TensorMapSpec {
                box_dims: [6, 16, 0, 0, 0],
                ..matrix()
            },
            TensorMapSpec {
                box_dims: [36, 16, 0, 0, 0],
                swizzle: TensorMapSwizzle::B128,
                ..matrix()
            },
            TensorMapSpec {
                strides: [324, 0, 0, 0],
                ..matrix()
            },
            TensorMapSpec {
                base: DevicePtr(BASE.0 + 4),
                ..matrix()
            },
        ] {
            let tf32 = TensorMapSpec {
                dtype: TensorMapDtype::Tf32,
                ..f32_map
            };
            assert_eq!(tf32.validate(), f32_map.validate(), "{f32_map:?}");
            assert_eq!(tf32.box_bytes(), f32_map.box_bytes());
            assert_eq!(tf32.extent_bytes(), f32_map.extent_bytes());
        }
        assert_eq!(
            TensorMapSpec {
                dtype: TensorMapDtype::Tf32,
                box_dims: [6, 16, 0, 0, 0],
                ..matrix()
            }
            .validate(),
            Err(TensorMapError::BoxRow { bytes: 24 })
        );
    }

    #[test]
    fn errors_say_what_to_fix() {
        let e = TensorMapError::Stride {
            index: 1,
            value: 312,
        };
        let text = alloc::format!("{e}");
        assert!(
            text.contains("312") && text.contains("multiple of 16"),
            "{text}"
        );
    }
}
