//! `mlp-wasi`: an ordinary WASI command that uses the GPU. It reads a small
//! MLP's weights and a batch of inputs from `.npy` files, runs the forward
//! pass on TensorWasm's built-in tensor ops, writes the class probabilities
//! to a `.npy` file and prints a summary.
//!
//! ```text
//! mlp-wasi MODEL_DIR INPUT.npy OUTPUT.npy
//!
//! MODEL_DIR/gamma.npy, beta.npy   [d_in]          layer norm (eps 1e-5)
//! MODEL_DIR/w1.npy [d_in, hidden], b1.npy [hidden]  then the exact GELU
//! MODEL_DIR/w2.npy [hidden, classes], b2.npy [classes]  then softmax
//! INPUT.npy  x [batch, d_in]      OUTPUT.npy  p [batch, classes]
//! ```
//!
//! Every array is `float32` in C order, as `numpy.save` writes it. With
//! `MLP_GEMM=bf16` in the environment the GEMM inputs are rounded to bf16
//! (the GEMMs accumulate and write f32); `f32` is the default. Exit codes:
//! 0 done, 1 a file or a `wasi_cuda` call failed, 2 bad arguments.
//!
//! Run it with the directories it needs, e.g.
//! `tensorwasm run --dir model::/model --dir data::/data mlp-wasi.wasm
//! /model /data/x.npy /data/p.npy`. It uses only `std` (`env::args`,
//! `env::var`, `fs`, `println!`) and the guest library: the same program
//! under `wasmtime run` fails only at its first `wasi_cuda` import.

use std::{
    fs::File,
    io::{BufReader, BufWriter},
    path::Path,
    process::ExitCode,
};

use npyz::WriterBuilder;
use tensorwasm_guest::{
    Device, DriverKind,
    tensor::{self, Bf16, Element, Tensor, TensorMut},
};

/// Layer norm's epsilon.
const EPS: f32 = 1e-5;

/// A failure, with the exit code it ends the program with.
struct Failure {
    code: u8,
    message: String,
}

fn fail(message: impl Into<String>) -> Failure {
    Failure {
        code: 1,
        message: message.into(),
    }
}

impl From<tensorwasm_guest::Error> for Failure {
    fn from(e: tensorwasm_guest::Error) -> Failure {
        fail(format!("the host refused a tensor op: {e}"))
    }
}

/// One `float32` array read from a `.npy` file.
struct Array {
    shape: Vec<usize>,
    data: Vec<f32>,
}

fn read_npy(path: &Path) -> Result<Array, Failure> {
    let what = |e: &dyn std::fmt::Display| fail(format!("reading {}: {e}", path.display()));
    let file = File::open(path).map_err(|e| what(&e))?;
    let npy = npyz::NpyFile::new(BufReader::new(file)).map_err(|e| what(&e))?;
    if npy.order() != npyz::Order::C {
        return Err(what(&"the array is in Fortran order; save it in C order"));
    }
    let shape = npy.shape().iter().map(|&d| d as usize).collect();
    let dtype = npy.dtype().descr();
    let data = npy
        .into_vec::<f32>()
        .map_err(|e| what(&format!("{e} (dtype {dtype}; float32 is needed)")))?;
    Ok(Array { shape, data })
}

/// The model's arrays, their shapes checked against one another.
struct Model {
    gamma: Vec<f32>,
    beta: Vec<f32>,
    w1: Vec<f32>,
    b1: Vec<f32>,
    w2: Vec<f32>,
    b2: Vec<f32>,
    d_in: usize,
    hidden: usize,
    classes: usize,
}

fn load_model(dir: &Path) -> Result<Model, Failure> {
    let load = |name: &str| read_npy(&dir.join(name));
    let (gamma, beta) = (load("gamma.npy")?, load("beta.npy")?);
    let (w1, b1) = (load("w1.npy")?, load("b1.npy")?);
    let (w2, b2) = (load("w2.npy")?, load("b2.npy")?);
    let [d_in, hidden] = w1.shape[..] else {
        return Err(fail(format!(
            "w1.npy has shape {:?}; [d_in, hidden] is needed",
            w1.shape
        )));
    };
    let [h2, classes] = w2.shape[..] else {
        return Err(fail(format!(
            "w2.npy has shape {:?}; [hidden, classes] is needed",
            w2.shape
        )));
    };
    let expect = [
        ("gamma.npy", &gamma.shape, vec![d_in]),
        ("beta.npy", &beta.shape, vec![d_in]),
        ("b1.npy", &b1.shape, vec![hidden]),
        ("w2.npy", &w2.shape, vec![hidden, classes]),
        ("b2.npy", &b2.shape, vec![classes]),
    ];
    for (name, got, want) in expect {
        if *got != want {
            return Err(fail(format!(
                "{name} has shape {got:?}; {want:?} is needed (from w1.npy {:?})",
                [d_in, hidden]
            )));
        }
    }
    debug_assert_eq!(h2, hidden);
    Ok(Model {
        gamma: gamma.data,
        beta: beta.data,
        w1: w1.data,
        b1: b1.data,
        w2: w2.data,
        b2: b2.data,
        d_in,
        hidden,
        classes,
    })
}

/// The GEMMs' input precision.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Precision {
    F32,
    Bf16,
}

/// The forward pass on the built-in ops, GEMM inputs as `convert` makes
/// them; the probabilities `[batch, classes]`.
fn forward<T: Element>(
    m: &Model,
    x: &[f32],
    batch: usize,
    convert: impl Fn(&[f32]) -> Vec<T>,
) -> Result<Vec<f32>, Failure> {
    let (d_in, hidden, classes) = (m.d_in, m.hidden, m.classes);
    // NaN in every output: an element an op did not write shows in the check.
    let out = |n: usize| vec![f32::NAN; batch * n];

    let mut h0 = out(d_in);
    tensor::layernorm(
        Tensor::new(x, &[batch, d_in])?,
        Tensor::new(&m.gamma, &[d_in])?,
        Tensor::new(&m.beta, &[d_in])?,
        TensorMut::new(&mut h0, &[batch, d_in])?,
        EPS,
    )
    .run()?;
    let (h0, w1) = (convert(&h0), convert(&m.w1));
    let mut z1 = out(hidden);
    tensor::gemm(
        Tensor::new(&h0, &[batch, d_in])?,
        Tensor::new(&w1, &[d_in, hidden])?,
        TensorMut::new(&mut z1, &[batch, hidden])?,
    )
    .run()?;
    let mut a1 = out(hidden);
    tensor::add(
        Tensor::new(&z1, &[batch, hidden])?,
        Tensor::new(&m.b1, &[hidden])?,
        TensorMut::new(&mut a1, &[batch, hidden])?,
    )
    .run()?;
    let mut g = out(hidden);
    tensor::gelu(
        Tensor::new(&a1, &[batch, hidden])?,
        TensorMut::new(&mut g, &[batch, hidden])?,
    )
    .run()?;
    let (g, w2) = (convert(&g), convert(&m.w2));
    let mut z2 = out(classes);
    tensor::gemm(
        Tensor::new(&g, &[batch, hidden])?,
        Tensor::new(&w2, &[hidden, classes])?,
        TensorMut::new(&mut z2, &[batch, classes])?,
    )
    .run()?;
    let mut logits = out(classes);
    tensor::add(
        Tensor::new(&z2, &[batch, classes])?,
        Tensor::new(&m.b2, &[classes])?,
        TensorMut::new(&mut logits, &[batch, classes])?,
    )
    .run()?;
    let mut p = out(classes);
    tensor::softmax(
        Tensor::new(&logits, &[batch, classes])?,
        TensorMut::new(&mut p, &[batch, classes])?,
    )
    .run()?;
    Ok(p)
}

fn write_npy(path: &Path, shape: &[u64], data: &[f32]) -> Result<(), Failure> {
    let what = |e: std::io::Error| fail(format!("writing {}: {e}", path.display()));
    let file = File::create(path).map_err(what)?;
    let mut writer = npyz::WriteOptions::new()
        .default_dtype()
        .shape(shape)
        .writer(BufWriter::new(file))
        .begin_nd()
        .map_err(what)?;
    writer.extend(data.iter().copied()).map_err(what)?;
    writer.finish().map_err(what)
}

fn run(args: &[String]) -> Result<(), Failure> {
    let [_, model_dir, input, output] = args else {
        return Err(Failure {
            code: 2,
            message: "usage: mlp-wasi MODEL_DIR INPUT.npy OUTPUT.npy".into(),
        });
    };
    let precision = match std::env::var("MLP_GEMM").as_deref() {
        Ok("f32") | Err(_) => Precision::F32,
        Ok("bf16") => Precision::Bf16,
        Ok(other) => {
            return Err(Failure {
                code: 2,
                message: format!("MLP_GEMM={other}: f32 or bf16"),
            });
        }
    };
    let model = load_model(Path::new(model_dir))?;
    let x = read_npy(Path::new(input))?;
    let batch = match x.shape[..] {
        [batch, d] if d == model.d_in && batch > 0 => batch,
        _ => {
            return Err(fail(format!(
                "{input} has shape {:?}; [batch, {}] is needed",
                x.shape, model.d_in
            )));
        }
    };
    let info = Device::new(0).info()?;
    let driver = match info.driver {
        DriverKind::Cuda => "cuda",
        DriverKind::Cpu => "cpu",
        DriverKind::Other(_) => "another driver",
    };
    let p = match precision {
        Precision::F32 => forward(&model, &x.data, batch, |v| v.to_vec())?,
        Precision::Bf16 => forward(&model, &x.data, batch, |v| {
            v.iter().map(|&f| Bf16::from_f32(f)).collect()
        })?,
    };
    if let Some(i) = p.iter().position(|v| !v.is_finite()) {
        return Err(fail(format!("probability {i} is not finite: {}", p[i])));
    }
    write_npy(Path::new(output), &[batch as u64, model.classes as u64], &p)?;

    let mut counts = vec![0usize; model.classes];
    let mut confidence = 0.0f64;
    for row in p.chunks_exact(model.classes) {
        let (best, top) =
            row.iter().enumerate().fold(
                (0, f32::NEG_INFINITY),
                |b, (i, &v)| if v > b.1 { (i, v) } else { b },
            );
        counts[best] += 1;
        confidence += f64::from(top);
    }
    let precision = if precision == Precision::Bf16 {
        "bf16"
    } else {
        "f32"
    };
    println!(
        "mlp: {batch} x {} -> {} -> {} on {} ({driver}), {precision} GEMMs",
        model.d_in, model.hidden, model.classes, info.name
    );
    let counts: Vec<String> = counts
        .iter()
        .enumerate()
        .map(|(c, n)| format!("{c}:{n}"))
        .collect();
    println!("predicted classes (class:rows): {}", counts.join(" "));
    println!("mean top probability: {:.4}", confidence / batch as f64);
    println!("wrote {output} [{batch}, {}]", model.classes);
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("mlp-wasi: {}", f.message);
            ExitCode::from(f.code)
        }
    }
}
