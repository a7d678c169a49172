//! Example TensorWasm guest: `c = a + b` with the test kernel
//! `kernels/test/vector_add.ptx` (entry `vadd(a, b, c, n)`), checked
//! element by element against the same `f32` additions done in the guest.
//! Both are IEEE round-to-nearest, so every element must match exactly.
//!
//! Exports (each returns 0 on success, `i + 1` for the first element `i`
//! that does not match, or a negative errno when a `wasi_cuda` call fails;
//! `-1` (`-EINVAL`) when `n` is not positive):
//! - `run(n)`: the vectors live in the guest's own memory (`Vec<f32>`) and
//!   the kernel reads and writes them in place, through guest pointers.
//! - `device_buffers(n)`: the vectors are copied into device buffers, three
//!   launches chain on them, and the results are copied back.
//!
//! Uses Rust's std only for its allocator; prints nothing.

use tensorwasm_guest::{Buffer, Errno, Error, Function, Module, scope};

/// The kernel's PTX, built into the guest.
const VECTOR_ADD_PTX: &str = include_str!("../../../../kernels/test/vector_add.ptx");

/// Threads per block.
const BLOCK: u32 = 256;

/// The seed of the inputs; fixed, so every run checks the same numbers.
const SEED: u32 = 0x9e37_79b9;

/// Xorshift32 (Marsaglia): small, and the same numbers on every host.
struct Xorshift32(u32);

impl Xorshift32 {
    fn next_u32(&mut self) -> u32 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.0 = x;
        x
    }

    /// A random non-zero, finite, normal `f32` with magnitude in
    /// `[2^-8, 2^8)` and either sign: far from overflow and from
    /// subnormals, so a driver that flushes subnormals still matches.
    fn next_f32(&mut self) -> f32 {
        let bits = self.next_u32();
        let sign = bits & 0x8000_0000;
        let mantissa = bits & 0x007f_ffff;
        let exponent = 127 - 8 + (self.next_u32() % 16);
        f32::from_bits(sign | (exponent << 23) | mantissa)
    }
}

/// `n` random inputs for `a` and `b`.
fn inputs(n: usize) -> (Vec<f32>, Vec<f32>) {
    let mut rng = Xorshift32(SEED);
    let a = (0..n).map(|_| rng.next_f32()).collect();
    let b = (0..n).map(|_| rng.next_f32()).collect();
    (a, b)
}

/// `vadd` from the built-in PTX.
fn load_vadd() -> Result<(Module, Function), Error> {
    let module = Module::load_ptx(VECTOR_ADD_PTX)?;
    let vadd = module.function("vadd")?;
    Ok((module, vadd))
}

/// `n` as a vector length, or `None` unless it is positive.
fn length(n: i32) -> Option<usize> {
    usize::try_from(n).ok().filter(|&n| n > 0)
}

/// The export's return value: 0, the first mismatch `i + 1`, or `-errno`.
fn status(checked: Result<Option<usize>, Error>) -> i32 {
    match checked {
        Ok(None) => 0,
        // `i < n <= i32::MAX`, so `i + 1` fits.
        Ok(Some(i)) => i as i32 + 1,
        Err(e) => e.negative_errno(),
    }
}

/// The first `i` where `got[i]` is not bit-for-bit `want(i)`.
fn first_mismatch(got: &[f32], want: impl Fn(usize) -> f32) -> Option<usize> {
    (0..got.len()).find(|&i| got[i].to_bits() != want(i).to_bits())
}

/// `c = a + b` over the guest's own memory. See the crate docs.
#[unsafe(no_mangle)]
pub extern "C" fn run(n: i32) -> i32 {
    let Some(len) = length(n) else {
        return -Errno::EINVAL.code();
    };
    status(add_in_guest_memory(len))
}

fn add_in_guest_memory(len: usize) -> Result<Option<usize>, Error> {
    let (a, b) = inputs(len);
    // NaN never equals a sum: an element the kernel skipped shows up.
    let mut c = vec![f32::NAN; len];
    let (_module, vadd) = load_vadd()?;
    let n = len as u32;
    scope(|s| {
        vadd.launch(n.div_ceil(BLOCK), BLOCK)
            .arg_slice(&a)
            .arg_slice(&b)
            .arg_slice_mut(&mut c)
            .arg_u32(n)
            .submit(s)?
            .wait()
    })?;
    Ok(first_mismatch(&c, |i| a[i] + b[i]))
}

/// Three chained launches over device buffers. See the crate docs.
#[unsafe(no_mangle)]
pub extern "C" fn device_buffers(n: i32) -> i32 {
    let Some(len) = length(n) else {
        return -Errno::EINVAL.code();
    };
    status(add_in_device_buffers(len))
}

fn add_in_device_buffers(len: usize) -> Result<Option<usize>, Error> {
    let (a, b) = inputs(len);
    let (_module, vadd) = load_vadd()?;
    let n = len as u32;
    let grid = n.div_ceil(BLOCK);

    let a_buf = Buffer::from_slice(&a)?;
    let b_buf = Buffer::from_slice(&b)?;
    let c_buf = Buffer::alloc(a_buf.size())?;
    // Every output byte is written by the kernel; NaN shows one that is not.
    c_buf.copy_from_slice(0, &vec![f32::NAN; len])?;

    // c = a + b, then b = c + a, then a = b + c: each launch reads what the
    // one before wrote (the stream runs them in order), and all three are in
    // flight together.
    let add = |x: &Buffer, y: &Buffer, out: &Buffer| {
        vadd.launch(grid, BLOCK)
            .arg_buffer(x, 0)
            .arg_buffer(y, 0)
            .arg_buffer(out, 0)
            .arg_u32(n)
    };
    scope(|s| {
        let first = add(&a_buf, &b_buf, &c_buf).submit(s)?;
        let second = add(&c_buf, &a_buf, &b_buf).submit(s)?;
        let third = add(&b_buf, &c_buf, &a_buf).submit(s)?;
        first.wait()?;
        second.wait()?;
        third.wait()
    })?;

    let mut a_out = vec![0.0f32; len];
    let mut b_out = vec![0.0f32; len];
    let mut c_out = vec![0.0f32; len];
    a_buf.copy_to_slice(0, &mut a_out)?;
    b_buf.copy_to_slice(0, &mut b_out)?;
    c_buf.copy_to_slice(0, &mut c_out)?;

    // The same three additions in the guest.
    let c = |i: usize| a[i] + b[i];
    let b2 = |i: usize| c(i) + a[i];
    let a2 = |i: usize| b2(i) + c(i);
    let mismatch = [
        first_mismatch(&c_out, c),
        first_mismatch(&b_out, b2),
        first_mismatch(&a_out, a2),
    ];
    Ok(mismatch.into_iter().flatten().min())
}
