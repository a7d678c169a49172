//! [`Scalar`]: the element types whose bytes may be copied to and from the
//! device, or written by a kernel, without breaking a Rust invariant.

mod sealed {
    pub trait Sealed {}
}

/// A plain number type: no padding, and every bit pattern is a valid value,
/// so a kernel or a copy may read or write its bytes freely. Implemented for
/// the integer types and `f32`/`f64`; sealed, so the guarantee cannot be
/// claimed for a type that lacks it.
pub trait Scalar: sealed::Sealed + Copy + 'static {}

macro_rules! scalar {
    ($($t:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl Scalar for $t {}
    )*};
}

scalar!(u8, i8, u16, i16, u32, i32, u64, i64, f32, f64);

/// The bytes of `data`.
pub(crate) fn as_bytes<T: Scalar>(data: &[T]) -> &[u8] {
    // SAFETY: `Scalar` types have no padding, so every byte of the slice is
    // initialised; `u8` has alignment 1; the length is the slice's size.
    unsafe { core::slice::from_raw_parts(data.as_ptr().cast(), size_of_val(data)) }
}

/// The bytes of `data`, writable.
pub(crate) fn as_bytes_mut<T: Scalar>(data: &mut [T]) -> &mut [u8] {
    // SAFETY: as for `as_bytes`; and any bytes written leave a valid `T`,
    // because every bit pattern of a `Scalar` type is one.
    unsafe { core::slice::from_raw_parts_mut(data.as_mut_ptr().cast(), size_of_val(data)) }
}
