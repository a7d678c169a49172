//! The component side of issue 31's benchmark (`embed/benches/components.rs`)
//! and of `serve`'s test of a component's Wasm kernel: a WASI 0.2 component
//! (a reactor) whose exports the host calls, each timed from the host as
//! one call:
//!
//! - `vadd-setup(n, seed, align, prefetch)`: three arrays of `n` floats in
//!   this component's own memory (`a`, `b` random, `c` NaN), each starting
//!   at a multiple of `align` bytes (0: wherever the allocator puts it),
//!   moved to the device with `kernels.prefetch` when `prefetch` is set,
//!   and the kernel `tw_vadd`;
//! - `vadd(launches)`: `launches` launches of `tw_vadd` over them, one
//!   after another on the component's stream, `c = a + b`, then their
//!   waits (no buffer, no copy);
//! - `vadd-host-side()`: advises the memory below `a` (this component's
//!   stack, data and small heap objects, which its own code touches between
//!   launches) `prefer-host`, so that the kernel's accesses to `a` do not
//!   move those pages to the device;
//! - `vadd-check()`: `c == a + b`, element for element;
//! - `gemm-setup(m, n, k, seed)`: `a [m, k]` and `b [k, n]` random and
//!   `c [m, n]` in device buffers;
//! - `gemm()`: one built-in `gemm` (`c = a @ b`, f32, no TF32) and its wait;
//! - `gemm-check(samples)`: the largest relative error of `samples` of
//!   `c`'s entries against float64 dot products computed here.
//!
//! Inputs are random, never zero. Errors are strings (the call and the
//! `tensorwasm:gpu` error code and message).

use std::cell::RefCell;

/// The bindings wit-bindgen makes from the repo's `wit/gpu.wit` and the
/// world below.
mod bindings {
    #![allow(missing_docs)]
    wit_bindgen::generate!({
        path: "../../../wit",
        inline: r#"
            package tensorwasm:bench;

            world bench {
                include tensorwasm:gpu/gpu-guest@0.1.2;
                export vadd-setup: func(n: u32, seed: u64, align: u32, prefetch: bool) -> result<_, string>;
                export vadd: func(launches: u32) -> result<_, string>;
                export vadd-host-side: func() -> result<_, string>;
                export vadd-check: func() -> result<_, string>;
                export gemm-setup: func(m: u32, n: u32, k: u32, seed: u64) -> result<_, string>;
                export gemm: func() -> result<_, string>;
                export gemm-check: func(samples: u32) -> result<f64, string>;
            }
        "#,
        world: "tensorwasm:bench/bench",
        generate_all,
    });
}

use bindings::tensorwasm::gpu::{
    buffers::Buffer,
    kernel_intrinsics as kernel,
    kernels::{self, Advice, Kernel, KernelValue, PrefetchTarget},
    modules::Dim3,
    tensor_ops::{self, Dtype, Tensor},
    types::Error,
};

/// `n` floats of a vector starting at a multiple of some alignment: the
/// vector holds up to an alignment's worth more, and the array starts at
/// `start`.
struct Array {
    storage: Vec<f32>,
    start: usize,
    n: usize,
}

impl Array {
    /// `n` of `values`, starting at a multiple of `align` bytes (4 or
    /// less: where the allocator puts them, `f32`s being 4-aligned).
    fn new(n: usize, align: usize, values: impl Iterator<Item = f32>) -> Array {
        let pad = if align <= 4 { 0 } else { align / 4 };
        let mut storage: Vec<f32> = Vec::with_capacity(n + pad);
        let start = if pad == 0 {
            0
        } else {
            storage.as_ptr().align_offset(align).min(pad)
        };
        storage.resize(start, 0.0);
        storage.extend(values.take(n));
        Array { storage, start, n }
    }

    fn as_slice(&self) -> &[f32] {
        &self.storage[self.start..self.start + self.n]
    }

    fn as_mut_ptr(&mut self) -> *mut f32 {
        self.storage[self.start..].as_mut_ptr()
    }
}

/// The vector add's arrays and kernel.
struct Vadd {
    a: Array,
    b: Array,
    c: Array,
    kernel: Kernel,
}

/// The GEMM's shape, inputs (kept for the check) and buffers.
struct Gemm {
    m: u32,
    n: u32,
    k: u32,
    a: Vec<f32>,
    b: Vec<f32>,
    buffers: [Buffer; 3],
}

thread_local! {
    static VADD: RefCell<Option<Vadd>> = const { RefCell::new(None) };
    static GEMM: RefCell<Option<Gemm>> = const { RefCell::new(None) };
}

/// The Wasm kernel: `c[i] = a[i] + b[i]` for the thread's `i` below `n`.
///
/// # Safety
///
/// Launched as a kernel only: `a`, `b` and `c` hold `n` floats (and the
/// sandbox checks every access against the memory's size regardless).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tw_vadd(a: *const f32, b: *const f32, c: *mut f32, n: u32) {
    let i =
        kernel::block_idx_x() as u32 * kernel::block_dim_x() as u32 + kernel::thread_idx_x() as u32;
    if i < n {
        let i = i as usize;
        // SAFETY: the caller's promise.
        unsafe { *c.add(i) = *a.add(i) + *b.add(i) };
    }
}

/// Random floats of magnitude in [0.05, 1), either sign, from xorshift64
/// `state`.
fn random_floats(state: &mut u64) -> impl Iterator<Item = f32> + '_ {
    *state |= 1;
    std::iter::repeat(()).map(|()| {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        let magnitude = 0.05 + 0.95 * ((*state >> 40) as f32 / (1u64 << 24) as f32);
        if *state & 1 == 0 {
            magnitude
        } else {
            -magnitude
        }
    })
}

/// An error as one line.
fn describe(call: &str, e: Error) -> String {
    format!("{call}: {:?}: {}", e.code, e.message)
}

/// `x`'s little-endian bytes.
fn bytes(x: &[f32]) -> Vec<u8> {
    x.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// A row-major f32 tensor over all of `buffer`.
fn tensor(buffer: &Buffer, rows: u32, cols: u32) -> Tensor<'_> {
    Tensor {
        buffer,
        offset: 0,
        dtype: Dtype::F32,
        shape: vec![u64::from(rows), u64::from(cols)],
        strides: vec![],
    }
}

struct Component;

impl bindings::Guest for Component {
    fn vadd_setup(n: u32, seed: u64, align: u32, prefetch: bool) -> Result<(), String> {
        if align != 0 && !align.is_power_of_two() {
            return Err(format!("align {align} is not a power of two"));
        }
        let mut state = seed;
        let align = align as usize;
        let n = n as usize;
        let a = Array::new(n, align, random_floats(&mut state));
        let b = Array::new(n, align, random_floats(&mut state));
        let c = Array::new(n, align, std::iter::repeat(f32::NAN));
        if prefetch {
            for array in [&a, &b, &c] {
                let bytes = array.as_slice();
                kernels::prefetch(
                    bytes.as_ptr() as usize as u32,
                    (4 * bytes.len()) as u32,
                    PrefetchTarget::Device,
                )
                .map_err(|e| describe("kernels.prefetch", e))?;
            }
        }
        let kernel = Kernel::get("tw_vadd").map_err(|e| describe("kernel.get", e))?;
        VADD.with(|v| *v.borrow_mut() = Some(Vadd { a, b, c, kernel }));
        Ok(())
    }

    fn vadd(launches: u32) -> Result<(), String> {
        VADD.with(|v| {
            let mut v = v.borrow_mut();
            let v = v.as_mut().ok_or("vadd before vadd-setup")?;
            let n = v.a.n as u32;
            let offset = |p: *const f32| KernelValue::Int32(p as usize as i32);
            let args = [
                offset(v.a.as_slice().as_ptr()),
                offset(v.b.as_slice().as_ptr()),
                offset(v.c.as_mut_ptr()),
                KernelValue::Int32(n as i32),
            ];
            let block = 256;
            let grid = Dim3 {
                x: n.div_ceil(block).max(1),
                y: 1,
                z: 1,
            };
            let block = Dim3 {
                x: block,
                y: 1,
                z: 1,
            };
            let queued = (0..launches)
                .map(|_| v.kernel.launch(grid, block, 0, &args))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| describe("kernel.launch", e))?;
            for launch in queued {
                launch.wait().map_err(|e| describe("launch.wait", e))?;
            }
            Ok(())
        })
    }

    fn vadd_host_side() -> Result<(), String> {
        VADD.with(|v| {
            let v = v.borrow();
            let v = v.as_ref().ok_or("vadd-host-side before vadd-setup")?;
            let below = v.a.as_slice().as_ptr() as usize as u32;
            kernels::advise(0, below, Advice::PreferHost).map_err(|e| describe("kernels.advise", e))
        })
    }

    fn vadd_check() -> Result<(), String> {
        VADD.with(|v| {
            let v = v.borrow();
            let v = v.as_ref().ok_or("vadd-check before vadd-setup")?;
            let (a, b, c) = (v.a.as_slice(), v.b.as_slice(), v.c.as_slice());
            for (i, ((x, y), z)) in a.iter().zip(b).zip(c).enumerate() {
                if x + y != *z {
                    return Err(format!("c[{i}] is {z}, not {x} + {y}"));
                }
            }
            Ok(())
        })
    }

    fn gemm_setup(m: u32, n: u32, k: u32, seed: u64) -> Result<(), String> {
        let mut state = seed;
        let a: Vec<f32> = random_floats(&mut state).take((m * k) as usize).collect();
        let b: Vec<f32> = random_floats(&mut state).take((k * n) as usize).collect();
        let alloc = |len: u32| Buffer::alloc(4 * u64::from(len)).map_err(|e| describe("alloc", e));
        let buffers = [alloc(m * k)?, alloc(k * n)?, alloc(m * n)?];
        buffers[0]
            .write(0, &bytes(&a))
            .map_err(|e| describe("write", e))?;
        buffers[1]
            .write(0, &bytes(&b))
            .map_err(|e| describe("write", e))?;
        GEMM.with(|g| {
            *g.borrow_mut() = Some(Gemm {
                m,
                n,
                k,
                a,
                b,
                buffers,
            })
        });
        Ok(())
    }

    fn gemm() -> Result<(), String> {
        GEMM.with(|g| {
            let g = g.borrow();
            let g = g.as_ref().ok_or("gemm before gemm-setup")?;
            let [a, b, c] = &g.buffers;
            tensor_ops::gemm(
                &tensor(a, g.m, g.k),
                &tensor(b, g.k, g.n),
                &tensor(c, g.m, g.n),
                1.0,
                0.0,
                false,
            )
            .map_err(|e| describe("gemm", e))?
            .wait()
            .map_err(|e| describe("launch.wait", e))
        })
    }

    fn gemm_check(samples: u32) -> Result<f64, String> {
        GEMM.with(|g| {
            let g = g.borrow();
            let g = g.as_ref().ok_or("gemm-check before gemm-setup")?;
            let (m, n, k) = (g.m as usize, g.n as usize, g.k as usize);
            let c = g.buffers[2]
                .read(0, (4 * m * n) as u32)
                .map_err(|e| describe("read", e))?;
            let mut state = 0x5eed_u64;
            let mut worst = 0.0f64;
            for _ in 0..samples {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let at = (state % (m * n) as u64) as usize;
                let (i, j) = (at / n, at % n);
                let terms = (0..k).map(|p| f64::from(g.a[i * k + p]) * f64::from(g.b[p * n + j]));
                let want: f64 = terms.clone().sum();
                let scale: f64 = terms.map(f64::abs).sum();
                let got = f64::from(f32::from_le_bytes(
                    c[4 * at..4 * at + 4].try_into().expect("4 bytes"),
                ));
                worst = worst.max((got - want).abs() / scale);
            }
            Ok(worst)
        })
    }
}

bindings::export!(Component with_types_in bindings);
