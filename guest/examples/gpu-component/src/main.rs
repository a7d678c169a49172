//! A WASI 0.2 command component on `tensorwasm:gpu` for the CLI's tests:
//! its first argument picks what it does.
//!
//! - `mlp [SEED]` (the default): a two-layer MLP forward pass,
//!   `softmax(relu(x W1 + b1) W2 + b2)`, on device buffers with the
//!   built-in ops (GEMM, bias add, ReLU, softmax), checked against the same
//!   computation on the CPU here; prints `mlp ok` and the largest error,
//!   or what differs with exit code 1. Inputs are random (never zero) from
//!   SEED (printed); odd sizes.
//! - `mlp-poll [SEED]`: the same, but the guest waits for its last launch
//!   with `wasi:io/poll` (the launch's pollable beside a second launch's)
//!   before `wait`.
//! - `mlp-file PATH`: the same pass on the inputs and weights in PATH (a
//!   file in a preopened directory, the format `write_model` writes).
//! - `write-model PATH SEED`: writes a model file to PATH.
//! - `info`: the device count and the device's driver and name.
//! - `errors`: calls the API wrongly, one case a line: the case and the
//!   error code it got (`none` when it succeeded).
//! - `alloc BYTES`: allocates a buffer of BYTES and prints its length, or
//!   the error (code and message) with exit code 1.
//! - `gemm`: one 2 x 2 GEMM; prints its result or the error with exit
//!   code 1.
//! - `vadd N`: loads the repo's `kernels/test/vector_add.ptx` as a raw
//!   module (a trusted tenant's), launches `vadd` over three buffers of N
//!   floats and checks `c = a + b`; prints `vadd ok N`, or the error with
//!   exit code 1.
//! - `module-errors`: calls the raw-module API wrongly, as `errors` does.
//! - `wasm-vadd N`: launches this component's own function `tw_vadd` as a
//!   Wasm kernel over three arrays of N random floats in its own memory
//!   (no buffer, no copy; the arrays prefetched to the device before and
//!   `c` back to the host after, with `kernels.prefetch`), then checks
//!   `c = a + b` where `c` lies; prints `wasm-vadd ok N`, or the error with
//!   exit code 1.
//! - `kernel-errors`: calls the kernel API wrongly, one case a line, as
//!   `errors` does (a kernel that reads past the memory traps; hints on
//!   empty ranges and ranges past the memory).
//! - `intrinsic-outside`: calls a kernel intrinsic outside a kernel (which
//!   traps).

use std::process::ExitCode;

/// The bindings wit-bindgen makes from the repo's `wit/gpu.wit`.
mod bindings {
    #![allow(missing_docs)]
    wit_bindgen::generate!({
        path: "../../../wit",
        world: "tensorwasm:gpu/gpu-guest",
        // wasi:io's `poll` too (its `pollable` is in `launches`).
        generate_all,
    });
}

use bindings::tensorwasm::gpu::{
    buffers::Buffer,
    devices, kernel_intrinsics as kernel,
    kernels::{self, Advice, Kernel, KernelValue, PrefetchTarget},
    launches::{self, Launch},
    modules::{BufferPointer, Dim3, KernelArg, Module},
    tensor_ops::{self, Dtype, Tensor},
    types::{Error, ErrorCode},
};
use bindings::wasi::io::poll::{Pollable, poll};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize| args.get(i).map(String::as_str);
    let result = match arg(1).unwrap_or("mlp") {
        "mlp" => {
            let seed = arg(2).map_or(0x5eed, |s| s.parse().expect("SEED is a number"));
            mlp_seeded(seed)
        }
        "mlp-poll" => {
            let seed = arg(2).map_or(0x5eed, |s| s.parse().expect("SEED is a number"));
            println!("seed {seed}");
            mlp(&Model::random(seed), Wait::Poll)
        }
        "mlp-file" => mlp_file(arg(2).expect("mlp-file PATH")),
        "write-model" => write_model(
            arg(2).expect("write-model PATH SEED"),
            arg(3).expect("SEED").parse().expect("SEED is a number"),
        ),
        "info" => info(),
        "errors" => {
            errors();
            Ok(())
        }
        "alloc" => alloc(arg(2).expect("alloc BYTES").parse().expect("BYTES")),
        "read" => read(arg(2).expect("read BYTES").parse().expect("BYTES")),
        "gemm" => gemm(),
        "module-errors" => {
            module_errors();
            Ok(())
        }
        "vadd" => vadd(arg(2).map_or(1000, |n| n.parse().expect("N is a number"))),
        "wasm-vadd" => wasm_vadd(arg(2).map_or(1000, |n| n.parse().expect("N is a number"))),
        "kernel-errors" => {
            kernel_errors();
            Ok(())
        }
        "intrinsic-outside" => {
            println!("thread {}", kernel::thread_idx_x());
            Ok(())
        }
        other => Err(format!("unknown mode {other}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("{message}");
            ExitCode::FAILURE
        }
    }
}

/// An error as one line: its code and message.
fn describe(e: &Error) -> String {
    format!("{:?}: {}", e.code, e.message)
}

/// `x`'s little-endian bytes.
fn bytes(x: &[f32]) -> Vec<u8> {
    x.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// f32s from little-endian bytes.
fn floats(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// A contiguous f32 tensor of `shape` over all of `buffer`.
fn tensor<'a>(buffer: &'a Buffer, shape: &[u64]) -> Tensor<'a> {
    Tensor {
        buffer,
        offset: 0,
        dtype: Dtype::F32,
        shape: shape.to_vec(),
        strides: Vec::new(),
    }
}

/// A buffer holding `x`.
fn upload(x: &[f32]) -> Result<Buffer, Error> {
    let buffer = Buffer::alloc(4 * x.len() as u64)?;
    buffer.write(0, &bytes(x))?;
    Ok(buffer)
}

/// A buffer for `n` f32s.
fn output(n: usize) -> Result<Buffer, Error> {
    Buffer::alloc(4 * n as u64)
}

/// The MLP's sizes and values: x [batch, inputs], w1 [inputs, hidden],
/// b1 [hidden], w2 [hidden, outputs], b2 [outputs].
struct Model {
    batch: usize,
    inputs: usize,
    hidden: usize,
    outputs: usize,
    x: Vec<f32>,
    w1: Vec<f32>,
    b1: Vec<f32>,
    w2: Vec<f32>,
    b2: Vec<f32>,
}

/// `n` random values in ±[0.05, 1), never zero, from xorshift64 `state`
/// (odd).
fn random_floats(state: &mut u64, n: usize) -> Vec<f32> {
    (0..n)
        .map(|_| {
            *state ^= *state << 13;
            *state ^= *state >> 7;
            *state ^= *state << 17;
            let unit = (*state >> 40) as f32 / (1u64 << 24) as f32;
            let magnitude = 0.05 + 0.95 * unit;
            if *state & 1 == 0 {
                magnitude
            } else {
                -magnitude
            }
        })
        .collect()
}

impl Model {
    /// Random values from `seed` in ±[0.05, 1), never zero, at odd sizes.
    fn random(seed: u64) -> Model {
        let mut state = seed | 1;
        let mut next = |n: usize| random_floats(&mut state, n);
        let (batch, inputs, hidden, outputs) = (5, 37, 67, 10);
        Model {
            batch,
            inputs,
            hidden,
            outputs,
            x: next(batch * inputs),
            w1: next(inputs * hidden),
            b1: next(hidden),
            w2: next(hidden * outputs),
            b2: next(outputs),
        }
    }

    /// The file form: the four sizes as u32, then x, w1, b1, w2, b2 as f32,
    /// all little-endian.
    fn encode(&self) -> Vec<u8> {
        let sizes = [self.batch, self.inputs, self.hidden, self.outputs];
        let mut out: Vec<u8> = sizes
            .iter()
            .flat_map(|&s| (s as u32).to_le_bytes())
            .collect();
        for part in [&self.x, &self.w1, &self.b1, &self.w2, &self.b2] {
            out.extend(bytes(part));
        }
        out
    }

    /// A model from its file form.
    fn decode(file: &[u8]) -> Result<Model, String> {
        let size = |i: usize| -> Result<usize, String> {
            let b = file.get(4 * i..4 * i + 4).ok_or("the file is too short")?;
            Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
        };
        let (batch, inputs, hidden, outputs) = (size(0)?, size(1)?, size(2)?, size(3)?);
        let values = floats(&file[16..]);
        let lens = [
            batch * inputs,
            inputs * hidden,
            hidden,
            hidden * outputs,
            outputs,
        ];
        if values.len() != lens.iter().sum::<usize>() {
            return Err(format!(
                "the file holds {} values; sizes {batch} x {inputs} -> {hidden} -> {outputs} need {}",
                values.len(),
                lens.iter().sum::<usize>()
            ));
        }
        let mut rest = values.as_slice();
        let mut take = |n: usize| {
            let (part, tail) = rest.split_at(n);
            rest = tail;
            part.to_vec()
        };
        Ok(Model {
            batch,
            inputs,
            hidden,
            outputs,
            x: take(lens[0]),
            w1: take(lens[1]),
            b1: take(lens[2]),
            w2: take(lens[3]),
            b2: take(lens[4]),
        })
    }

    /// The forward pass on the CPU, in f64.
    fn forward_cpu(&self) -> Vec<f32> {
        let (b, i, h, o) = (self.batch, self.inputs, self.hidden, self.outputs);
        let mut hidden = vec![0f64; b * h];
        for r in 0..b {
            for c in 0..h {
                let dot: f64 = (0..i)
                    .map(|k| f64::from(self.x[r * i + k]) * f64::from(self.w1[k * h + c]))
                    .sum();
                hidden[r * h + c] = (dot + f64::from(self.b1[c])).max(0.0);
            }
        }
        let mut y = vec![0f32; b * o];
        for r in 0..b {
            let logits: Vec<f64> = (0..o)
                .map(|c| {
                    let dot: f64 = (0..h)
                        .map(|k| hidden[r * h + k] * f64::from(self.w2[k * o + c]))
                        .sum();
                    dot + f64::from(self.b2[c])
                })
                .collect();
            let max = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let sum: f64 = logits.iter().map(|l| (l - max).exp()).sum();
            for c in 0..o {
                y[r * o + c] = ((logits[c] - max).exp() / sum) as f32;
            }
        }
        y
    }

    /// The forward pass on the device: every op queued, only the last
    /// one waited for (the stream runs them in order), by `how`.
    fn forward_gpu(&self, how: Wait) -> Result<Vec<f32>, Error> {
        let (b, i, h, o) = (
            self.batch as u64,
            self.inputs as u64,
            self.hidden as u64,
            self.outputs as u64,
        );
        let x = upload(&self.x)?;
        let w1 = upload(&self.w1)?;
        let b1 = upload(&self.b1)?;
        let w2 = upload(&self.w2)?;
        let b2 = upload(&self.b2)?;
        let pre = output(self.batch * self.hidden)?;
        let act = output(self.batch * self.hidden)?;
        let logits = output(self.batch * self.outputs)?;
        let y = output(self.batch * self.outputs)?;
        // Launches dropped unwaited keep running: the host holds what they
        // use until they have finished.
        tensor_ops::gemm(
            &tensor(&x, &[b, i]),
            &tensor(&w1, &[i, h]),
            &tensor(&pre, &[b, h]),
            1.0,
            0.0,
            false,
        )?;
        tensor_ops::add(
            &tensor(&pre, &[b, h]),
            &tensor(&b1, &[h]),
            &tensor(&act, &[b, h]),
        )?;
        tensor_ops::relu(&tensor(&act, &[b, h]), &tensor(&pre, &[b, h]))?;
        tensor_ops::gemm(
            &tensor(&pre, &[b, h]),
            &tensor(&w2, &[h, o]),
            &tensor(&logits, &[b, o]),
            1.0,
            0.0,
            false,
        )?;
        let biased = output(self.batch * self.outputs)?;
        tensor_ops::add(
            &tensor(&logits, &[b, o]),
            &tensor(&b2, &[o]),
            &tensor(&biased, &[b, o]),
        )?;
        let last: Launch = tensor_ops::softmax(&tensor(&biased, &[b, o]), &tensor(&y, &[b, o]))?;
        if how == Wait::Poll {
            // A second launch queued after it: both pollables become
            // ready, in any order, and `poll` says which.
            let other = tensor_ops::relu(&tensor(&x, &[b, i]), &tensor(&act, &[b, i]))?;
            let pollables = [last.subscribe(), other.subscribe()];
            let mut pending: Vec<usize> = vec![0, 1];
            while !pending.is_empty() {
                let list: Vec<&Pollable> = pending.iter().map(|&p| &pollables[p]).collect();
                let ready = poll(&list);
                if ready.is_empty() {
                    return Err(Error {
                        code: ErrorCode::Einval,
                        message: "poll returned no pollable".into(),
                    });
                }
                let done: Vec<usize> = ready.iter().map(|&r| pending[r as usize]).collect();
                pending.retain(|p| !done.contains(p));
            }
            drop(pollables);
            other.wait()?;
        }
        last.wait()?;
        // Waiting again gives the same result, and a pollable made now is
        // ready at once.
        last.wait()?;
        if how == Wait::Poll && poll(&[&last.subscribe()]) != [0] {
            return Err(Error {
                code: ErrorCode::Einval,
                message: "a waited launch's pollable is not ready".into(),
            });
        }
        Ok(floats(&y.read(0, 4 * b as u32 * o as u32)?))
    }
}

/// How the MLP waits for its last launch.
#[derive(Clone, Copy, PartialEq)]
enum Wait {
    /// `launch.wait`.
    Block,
    /// `wasi:io/poll`'s `poll` on its pollable, then `wait`.
    Poll,
}

/// Runs `model` on the device and on the CPU and compares.
fn mlp(model: &Model, how: Wait) -> Result<(), String> {
    let gpu = model
        .forward_gpu(how)
        .map_err(|e| format!("mlp: {}", describe(&e)))?;
    let cpu = model.forward_cpu();
    let mut worst = 0f32;
    for (n, (g, c)) in gpu.iter().zip(&cpu).enumerate() {
        let error = (g - c).abs();
        if error.is_nan() || error > 1e-5 + 1e-4 * c.abs() {
            return Err(format!(
                "mlp: output {n} is {g}, the CPU says {c} (error {error})"
            ));
        }
        worst = worst.max(error);
    }
    if gpu.len() != cpu.len() {
        return Err(format!(
            "mlp: {} outputs, {} expected",
            gpu.len(),
            cpu.len()
        ));
    }
    println!(
        "mlp ok: batch {}, {} -> {} -> {}, largest error {worst:e}",
        model.batch, model.inputs, model.hidden, model.outputs
    );
    Ok(())
}

fn mlp_seeded(seed: u64) -> Result<(), String> {
    println!("seed {seed}");
    mlp(&Model::random(seed), Wait::Block)
}

fn mlp_file(path: &str) -> Result<(), String> {
    let file = std::fs::read(path).map_err(|e| format!("cannot read {path}: {e}"))?;
    mlp(
        &Model::decode(&file).map_err(|e| format!("{path}: {e}"))?,
        Wait::Block,
    )
}

fn write_model(path: &str, seed: u64) -> Result<(), String> {
    std::fs::write(path, Model::random(seed).encode())
        .map_err(|e| format!("cannot write {path}: {e}"))
}

fn info() -> Result<(), String> {
    println!("devices {}", devices::count());
    let info = devices::info(0).map_err(|e| describe(&e))?;
    println!("driver {:?}", info.driver);
    println!("name {}", info.name);
    match devices::info(1) {
        Ok(_) => Err("device 1 exists".into()),
        Err(e) => {
            println!("device 1: {:?}", e.code);
            Ok(())
        }
    }
}

/// One case of `errors`: its name and the code it got.
fn case<T>(name: &str, result: Result<T, Error>) {
    match result {
        Ok(_) => println!("{name}: none"),
        Err(e) => println!("{name}: {:?}", e.code),
    }
}

fn errors() {
    case("alloc 0", Buffer::alloc(0));
    let Ok(a) = Buffer::alloc(64) else {
        println!("alloc 64 failed");
        return;
    };
    let Ok(b) = Buffer::alloc(64) else {
        println!("alloc 64 failed");
        return;
    };
    println!("len {}", a.len());
    case("write past the end", a.write(60, &[1; 8]));
    case("write nothing", a.write(0, &[]));
    case("read past the end", a.read(32, 64));
    case("read at an offset that overflows", a.read(u64::MAX, 2));
    case("fill", a.fill(0, 64, 0x3f));
    case("read back", a.read(0, 4).map(|v| assert_eq!(v, [0x3f; 4])));
    case("copy-from", b.copy_from(0, &a, 0, 64));
    case("copy-from onto itself", a.copy_from(0, &a, 8, 16));
    case(
        "gemm with mismatched inner sizes",
        tensor_ops::gemm(
            &tensor(&a, &[2, 2]),
            &tensor(&b, &[3, 2]),
            &tensor(&b, &[2, 2]),
            1.0,
            0.0,
            false,
        ),
    );
    case(
        "relu past the buffer",
        tensor_ops::relu(&tensor(&a, &[32]), &tensor(&b, &[32])),
    );
    case(
        "relu onto its input",
        tensor_ops::relu(&tensor(&a, &[16]), &tensor(&a, &[16])),
    );
    case(
        "relu of rank 5",
        tensor_ops::relu(&tensor(&a, &[1, 1, 1, 1, 16]), &tensor(&b, &[16])),
    );
    case(
        "relu with strides for another rank",
        tensor_ops::relu(
            &Tensor {
                strides: vec![1],
                ..tensor(&a, &[4, 4])
            },
            &tensor(&b, &[4, 4]),
        ),
    );
    case(
        "layernorm with a negative eps",
        tensor_ops::layernorm(
            &tensor(&a, &[2, 4]),
            &tensor(&b, &[4]),
            &tensor(&b, &[4]),
            &tensor(&b, &[2, 4]),
            -1.0,
        ),
    );
    case(
        "reduce over axis 3 of a matrix",
        tensor_ops::reduce(
            tensor_ops::ReduceOp::Sum,
            &tensor(&a, &[4, 4]),
            &tensor(&b, &[4]),
            3,
        ),
    );
    case(
        "relu",
        tensor_ops::relu(&tensor(&a, &[16]), &tensor(&b, &[16])).and_then(|l| l.wait()),
    );
    case("sync", launches::sync());
}

fn alloc(size: u64) -> Result<(), String> {
    let buffer = Buffer::alloc(size).map_err(|e| describe(&e))?;
    println!("len {}", buffer.len());
    Ok(())
}

/// A buffer of `size` bytes read back whole.
fn read(size: u32) -> Result<(), String> {
    let buffer = Buffer::alloc(u64::from(size)).map_err(|e| describe(&e))?;
    buffer
        .fill(0, u64::from(size), 7)
        .map_err(|e| describe(&e))?;
    let bytes = buffer.read(0, size).map_err(|e| describe(&e))?;
    assert!(bytes.iter().all(|&b| b == 7));
    println!("read {}", bytes.len());
    Ok(())
}

fn gemm() -> Result<(), String> {
    let run = || -> Result<Vec<f32>, Error> {
        let a = upload(&[1.0, 2.0, 3.0, 4.0])?;
        let b = upload(&[5.0, 6.0, 7.0, 8.0])?;
        let c = output(4)?;
        tensor_ops::gemm(
            &tensor(&a, &[2, 2]),
            &tensor(&b, &[2, 2]),
            &tensor(&c, &[2, 2]),
            1.0,
            0.0,
            false,
        )?
        .wait()?;
        Ok(floats(&c.read(0, 16)?))
    };
    let c = run().map_err(|e| describe(&e))?;
    println!("{c:?}");
    Ok(())
}

/// The repo's vector-add PTX (`vadd(a, b, c, n)`, one thread an element):
/// its exact text, which the CPU driver runs through a host twin.
const VECTOR_ADD_PTX: &str = include_str!("../../../../kernels/test/vector_add.ptx");

fn vadd(n: u32) -> Result<(), String> {
    let a: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 + 1.0).collect();
    let b: Vec<f32> = (0..n).map(|i| 3.0 - i as f32 * 0.25).collect();
    let run = || -> Result<Vec<f32>, Error> {
        let module = Module::load_ptx(VECTOR_ADD_PTX)?;
        let function = module.function("vadd")?;
        let (da, db) = (upload(&a)?, upload(&b)?);
        let dc = output(n as usize)?;
        let pointer = |buffer| KernelArg::Pointer(BufferPointer { buffer, offset: 0 });
        let block = 256;
        function
            .launch(
                Dim3 {
                    x: n.div_ceil(block),
                    y: 1,
                    z: 1,
                },
                Dim3 {
                    x: block,
                    y: 1,
                    z: 1,
                },
                0,
                &[
                    pointer(&da),
                    pointer(&db),
                    pointer(&dc),
                    KernelArg::Int32(n as i32),
                ],
            )?
            .wait()?;
        Ok(floats(&dc.read(0, 4 * n)?))
    };
    let c = run().map_err(|e| describe(&e))?;
    check_sum("vadd", &a, &b, &c)?;
    println!("vadd ok {n}");
    Ok(())
}

/// `c = a + b` element for element, or the first element that differs.
fn check_sum(what: &str, a: &[f32], b: &[f32], c: &[f32]) -> Result<(), String> {
    for (i, ((x, y), z)) in a.iter().zip(b).zip(c).enumerate() {
        if x + y != *z {
            return Err(format!("{what}: c[{i}] is {z}, not {x} + {y}"));
        }
    }
    Ok(())
}

fn module_errors() {
    case(
        "load-ptx of text that is not PTX",
        Module::load_ptx("not ptx"),
    );
    case("load-cubin of no image", Module::load_cubin(&[0; 16]));
    let (Ok(module), Ok(buffer)) = (Module::load_ptx(VECTOR_ADD_PTX), Buffer::alloc(64)) else {
        println!("setup failed");
        return;
    };
    case("function that is not there", module.function("vsub"));
    let Ok(function) = module.function("vadd") else {
        println!("function failed");
        return;
    };
    let one = Dim3 { x: 1, y: 1, z: 1 };
    let pointer = |offset| {
        KernelArg::Pointer(BufferPointer {
            buffer: &buffer,
            offset,
        })
    };
    case(
        "launch with a pointer past the buffer",
        function.launch(
            one,
            one,
            0,
            &[pointer(0), pointer(0), pointer(65), KernelArg::Int32(1)],
        ),
    );
    case(
        "launch with an empty grid",
        function.launch(
            Dim3 { x: 0, y: 1, z: 1 },
            one,
            0,
            &[pointer(0), pointer(0), pointer(0), KernelArg::Int32(1)],
        ),
    );
    case(
        "launch",
        function
            .launch(
                one,
                one,
                0,
                &[pointer(0), pointer(16), pointer(32), KernelArg::Int32(4)],
            )
            .and_then(|l| l.wait()),
    );
}

/// The Wasm kernel `wasm-vadd` launches: `c[i] = a[i] + b[i]` for the
/// thread's `i` below `n`; `a`, `b` and `c` are offsets into this
/// component's memory. Exported by its core name (not through WIT), which
/// `kernel.get` looks up.
///
/// # Safety
///
/// Launched as a kernel only: the sandbox checks every access against the
/// memory's size; `a`, `b` and `c` hold `n` floats.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tw_vadd(a: *const f32, b: *const f32, c: *mut f32, n: u32) {
    let i =
        kernel::block_idx_x() as u32 * kernel::block_dim_x() as u32 + kernel::thread_idx_x() as u32;
    if i < n {
        let i = i as usize;
        // SAFETY: the caller's promise (arrays of `n` floats; in a kernel
        // every access is checked against the memory's size regardless).
        unsafe { *c.add(i) = *a.add(i) + *b.add(i) };
    }
}

/// A kernel whose locals live in a shadow-stack frame (an array whose
/// address escapes), so it reads the module's stack pointer: a global that
/// a component's kernels cannot read (`kernel-errors` expects `enotsup`).
///
/// # Safety
///
/// Launched as a kernel only, with `out` holding one float per thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tw_framed(out: *mut f32) {
    let i = kernel::thread_idx_x();
    let mut xs = [0.0f32; 8];
    for (k, x) in xs.iter_mut().enumerate() {
        *x = (i + k as i32) as f32;
    }
    let xs = std::hint::black_box(&mut xs);
    // SAFETY: the caller's promise.
    unsafe { *out.add(i as usize) = xs.iter().sum() };
}

/// A 1-D launch of `n` threads in blocks of 256.
fn line(n: u32) -> (Dim3, Dim3) {
    let block = 256;
    (
        Dim3 {
            x: n.div_ceil(block).max(1),
            y: 1,
            z: 1,
        },
        Dim3 {
            x: block,
            y: 1,
            z: 1,
        },
    )
}

/// A pointer into this component's memory as a kernel argument.
fn offset<T>(p: *const T) -> KernelValue {
    KernelValue::Int32(p as usize as i32)
}

fn wasm_vadd(n: u32) -> Result<(), String> {
    let mut state = 0x9e37_79b9_7f4a_7c15 ^ u64::from(n) | 1;
    let a = random_floats(&mut state, n as usize);
    let b = random_floats(&mut state, n as usize);
    let mut c = vec![f32::NAN; n as usize];
    let c_ptr = c.as_mut_ptr();
    let (grid, block) = line(n);
    // The range of `x`'s floats, for the hints.
    let range = |x: *const f32| (x as usize as u32, 4 * n);
    let run = || -> Result<(), Error> {
        let k = Kernel::get("tw_vadd")?;
        if n > 0 {
            for x in [a.as_ptr(), b.as_ptr(), c_ptr.cast_const()] {
                let (offset, len) = range(x);
                kernels::advise(offset, len, Advice::PreferDevice)?;
                kernels::prefetch(offset, len, PrefetchTarget::Device)?;
            }
        }
        let launch = k.launch(
            grid,
            block,
            0,
            &[
                offset(a.as_ptr()),
                offset(b.as_ptr()),
                offset(c_ptr),
                KernelValue::Int32(n as i32),
            ],
        )?;
        if n > 0 {
            let (offset, len) = range(c_ptr);
            kernels::prefetch(offset, len, PrefetchTarget::Host)?;
        }
        launch.wait()
    };
    run().map_err(|e| describe(&e))?;
    check_sum("wasm-vadd", &a, &b, &c)?;
    println!("wasm-vadd ok {n}");
    Ok(())
}

fn kernel_errors() {
    case("get of a function not exported", Kernel::get("tw_vsub"));
    case("get of an empty name", Kernel::get(""));
    case(
        "get of a name of 2000 bytes",
        Kernel::get(&"k".repeat(2000)),
    );
    case(
        "get of a kernel with a stack frame",
        Kernel::get("tw_framed"),
    );
    let Ok(k) = Kernel::get("tw_vadd") else {
        println!("get failed");
        return;
    };
    let (grid, block) = line(1);
    let data = [1.0f32; 4];
    let p = offset(data.as_ptr());
    case(
        "launch with three arguments",
        k.launch(grid, block, 0, &[p, p, p]),
    );
    case(
        "launch with a float for a pointer",
        k.launch(
            grid,
            block,
            0,
            &[KernelValue::Float32(1.0), p, p, KernelValue::Int32(1)],
        ),
    );
    let zero = Dim3 { x: 0, y: 1, z: 1 };
    case(
        "launch of an empty grid",
        k.launch(zero, block, 0, &[p, p, p, KernelValue::Int32(1)]),
    );
    // Past the end of the memory: the kernel's first load traps.
    let far = KernelValue::Int32(i32::MAX - 16);
    let launched = k.launch(grid, block, 0, &[far, p, p, KernelValue::Int32(1)]);
    case(
        "wait of a kernel that reads past the memory",
        launched.and_then(|l| l.wait()),
    );
    let here = data.as_ptr() as usize as u32;
    case(
        "prefetch of 0 bytes",
        kernels::prefetch(here, 0, PrefetchTarget::Device),
    );
    case(
        "prefetch past the memory",
        kernels::prefetch(0xF000_0000, 64, PrefetchTarget::Device),
    );
    case(
        "advise of 0 bytes",
        kernels::advise(here, 0, Advice::SetReadMostly),
    );
    case(
        "advise past the memory",
        kernels::advise(0xF000_0000, 64, Advice::PreferHost),
    );
}
