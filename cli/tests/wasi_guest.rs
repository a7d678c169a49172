//! The WASI example guest end to end (`guest/examples/mlp-wasi`, a
//! `wasm32-wasip1` command built by `scripts/test.sh` before the tests run):
//! `tensorwasm run` as a user types it, with `--dir` for the model and the
//! data and `--env` for the GEMM precision. The test writes random weights
//! and inputs as `.npy` files, the guest reads them with `std::fs`, runs the
//! forward pass on the built-in tensor ops, writes the probabilities and
//! prints a summary; the test reads the probabilities back and checks them
//! against a float64 reference of the same forward pass (the kernels'
//! oracles). On the CPU driver here, on CUDA with `--include-ignored`
//! (scripts/pack-gpu-tests.sh packs this file, the guest and the command).

#[path = "support/bin.rs"]
mod bin;

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use npyz::WriterBuilder;
use tensorwasm_conformance::Rng;
use tensorwasm_kernels::oracle;

const D_IN: usize = 64;
const HIDDEN: usize = 128;
const CLASSES: usize = 10;
const BATCH: usize = 32;
const EPS: f64 = 1e-5;

/// The built guest: `$MLP_WASI_GUEST_WASM` when set (the device machine's
/// pack carries it there), else the guest build's output.
fn guest() -> PathBuf {
    let path = std::env::var_os("MLP_WASI_GUEST_WASM")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../guest/target/wasm32-wasip1/release/mlp-wasi.wasm")
        });
    assert!(
        path.exists(),
        "{}: build the WASI guest first (scripts/test.sh does: \
         `cd guest/examples/mlp-wasi && cargo build --release`)",
        path.display()
    );
    path
}

/// The command: `$TENSORWASM_BIN` when set (the packed binary on the device
/// machine), else this build's.
fn tensorwasm() -> Command {
    let mut cmd = Command::new(bin::tensorwasm_bin());
    cmd.env_remove("RUST_LOG");
    cmd
}

fn save(path: &Path, shape: &[usize], data: &[f32]) {
    let shape: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
    let mut w = npyz::WriteOptions::new()
        .default_dtype()
        .shape(&shape)
        .writer(std::io::BufWriter::new(
            std::fs::File::create(path).unwrap(),
        ))
        .begin_nd()
        .unwrap();
    w.extend(data.iter().copied()).unwrap();
    w.finish().unwrap();
}

/// `n` values `offset + scale * u`, `u` uniform in (-1, 1) and never 0.
fn fill(rng: &mut Rng, n: usize, offset: f32, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|_| offset + scale * rng.f32_signed() / 1000.0)
        .collect()
}

struct Model {
    gamma: Vec<f32>,
    beta: Vec<f32>,
    w1: Vec<f32>,
    b1: Vec<f32>,
    w2: Vec<f32>,
    b2: Vec<f32>,
}

/// A scratch directory holding `model/*.npy` and `data/x.npy`.
fn write_inputs(test: &str, rng: &mut Rng) -> (PathBuf, Model, Vec<f32>) {
    let root = std::env::temp_dir().join(format!("tensorwasm-wasi-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let (model_dir, data_dir) = (root.join("model"), root.join("data"));
    std::fs::create_dir_all(&model_dir).unwrap();
    std::fs::create_dir_all(&data_dir).unwrap();
    let m = Model {
        gamma: fill(rng, D_IN, 1.0, 0.25),
        beta: fill(rng, D_IN, 0.0, 0.1),
        w1: fill(rng, D_IN * HIDDEN, 0.0, (3.0 / D_IN as f32).sqrt()),
        b1: fill(rng, HIDDEN, 0.0, 0.1),
        w2: fill(rng, HIDDEN * CLASSES, 0.0, (3.0 / HIDDEN as f32).sqrt()),
        b2: fill(rng, CLASSES, 0.0, 0.1),
    };
    save(&model_dir.join("gamma.npy"), &[D_IN], &m.gamma);
    save(&model_dir.join("beta.npy"), &[D_IN], &m.beta);
    save(&model_dir.join("w1.npy"), &[D_IN, HIDDEN], &m.w1);
    save(&model_dir.join("b1.npy"), &[HIDDEN], &m.b1);
    save(&model_dir.join("w2.npy"), &[HIDDEN, CLASSES], &m.w2);
    save(&model_dir.join("b2.npy"), &[CLASSES], &m.b2);
    let x = fill(rng, BATCH * D_IN, 0.5, 2.0);
    save(&data_dir.join("x.npy"), &[BATCH, D_IN], &x);
    (root, m, x)
}

/// The forward pass in float64, the GEMM inputs first passed through
/// `round` (identity for f32 GEMMs, bf16 rounding for bf16 ones).
fn reference(m: &Model, x: &[f32], round: impl Fn(f32) -> f32) -> Vec<f64> {
    let wide = |v: &[f32]| oracle::widen(v);
    let rounded =
        |v: &[f64]| -> Vec<f64> { v.iter().map(|&f| f64::from(round(f as f32))).collect() };
    let h0 = oracle::layernorm(&wide(x), &wide(&m.gamma), &wide(&m.beta), BATCH, D_IN, EPS);
    let w1 = rounded(&wide(&m.w1));
    let z1 = oracle::gemm(
        &rounded(&h0),
        &w1,
        &[],
        BATCH,
        HIDDEN,
        D_IN,
        D_IN,
        HIDDEN,
        HIDDEN,
        1.0,
        0.0,
    );
    let g = oracle::gelu(&oracle::add(&z1, &wide(&m.b1), HIDDEN));
    let w2 = rounded(&wide(&m.w2));
    let z2 = oracle::gemm(
        &rounded(&g),
        &w2,
        &[],
        BATCH,
        CLASSES,
        HIDDEN,
        HIDDEN,
        CLASSES,
        CLASSES,
        1.0,
        0.0,
    );
    oracle::softmax(&oracle::add(&z2, &wide(&m.b2), CLASSES), BATCH, CLASSES)
}

fn read_probabilities(path: &Path) -> Vec<f32> {
    let bytes = std::fs::read(path).unwrap();
    let npy = npyz::NpyFile::new(&bytes[..]).unwrap();
    assert_eq!(npy.shape(), &[BATCH as u64, CLASSES as u64]);
    npy.into_vec::<f32>().unwrap()
}

/// Runs the guest with `driver` in f32 and bf16 and checks both.
fn guest_matches_the_reference(driver: &str) {
    let mut rng = Rng::from_env("wasi_guest");
    let (root, model, x) = write_inputs(driver, &mut rng);
    let wasm = guest();
    for (precision, tol) in [("f32", 1e-4), ("bf16", 2e-2)] {
        let out = format!("p_{precision}.npy");
        let a = tensorwasm()
            .args(["run", "--driver", driver])
            .arg("--dir")
            .arg(format!("{}::/model", root.join("model").display()))
            .arg("--dir")
            .arg(format!("{}::/data", root.join("data").display()))
            .args(["--env", &format!("MLP_GEMM={precision}")])
            .arg(&wasm)
            .args(["/model", "/data/x.npy", &format!("/data/{out}")])
            .assert()
            .success()
            .stderr("");
        let stdout = String::from_utf8_lossy(&a.get_output().stdout).into_owned();
        println!("{driver} {precision}:\n{stdout}");
        assert!(
            stdout.starts_with(&format!(
                "mlp: {BATCH} x {D_IN} -> {HIDDEN} -> {CLASSES} on "
            )) && stdout.contains(&format!("({driver}), {precision} GEMMs")),
            "{stdout}"
        );
        assert!(
            stdout.contains(&format!("wrote /data/{out} [{BATCH}, {CLASSES}]")),
            "{stdout}"
        );
        let got = read_probabilities(&root.join("data").join(&out));
        let round = |v: f32| {
            if precision == "bf16" {
                oracle::bf16_to_f32(oracle::f32_to_bf16(v))
            } else {
                v
            }
        };
        let want = reference(&model, &x, round);
        let worst = got
            .iter()
            .zip(&want)
            .map(|(&g, &w)| (f64::from(g) - w).abs())
            .fold(0.0, f64::max);
        println!("{driver} {precision}: max |p - reference| = {worst:e}");
        assert!(
            worst <= tol,
            "{driver} {precision}: max error {worst:e} > {tol:e}"
        );
        // The summary's counts are the reference's argmax per row.
        let mut counts = [0usize; CLASSES];
        for row in got.chunks_exact(CLASSES) {
            let best = (0..CLASSES).fold(0, |b, i| if row[i] > row[b] { i } else { b });
            counts[best] += 1;
        }
        let line: Vec<String> = counts
            .iter()
            .enumerate()
            .map(|(c, n)| format!("{c}:{n}"))
            .collect();
        assert!(
            stdout.contains(&format!(
                "predicted classes (class:rows): {}",
                line.join(" ")
            )),
            "{stdout}"
        );
    }
}

#[test]
fn mlp_wasi_guest_on_the_cpu_driver() {
    guest_matches_the_reference("cpu");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn mlp_wasi_guest_on_cuda() {
    guest_matches_the_reference("cuda");
}

#[test]
fn mlp_wasi_guest_reports_bad_files_and_arguments() {
    let mut rng = Rng::from_env("wasi_guest bad input");
    let (root, _, _) = write_inputs("bad", &mut rng);
    let wasm = guest();
    let model = format!("{}::/model", root.join("model").display());
    // A b2 of the wrong shape: one line from the guest, its exit code 1.
    save(
        &root.join("model").join("b2.npy"),
        &[CLASSES + 1],
        &[0.5; CLASSES + 1],
    );
    tensorwasm()
        .args(["run", "--driver", "cpu", "--dir", &model])
        .arg(&wasm)
        .args(["/model", "/model/gamma.npy", "/model/out.npy"])
        .assert()
        .code(1)
        .stdout("")
        .stderr("mlp-wasi: b2.npy has shape [11]; [10] is needed (from w1.npy [64, 128])\n");
    // Without --dir the guest cannot see the model: WASI's error, exit 1.
    let a = tensorwasm()
        .args(["run", "--driver", "cpu"])
        .arg(&wasm)
        .args(["/model", "/data/x.npy", "/data/p.npy"])
        .assert()
        .code(1)
        .stdout("");
    let err = String::from_utf8_lossy(&a.get_output().stderr).into_owned();
    assert!(
        err.starts_with("mlp-wasi: reading /model/gamma.npy: "),
        "{err}"
    );
    // The guest's own usage error: its exit code 2 is the command's.
    tensorwasm()
        .args(["run", "--driver", "cpu"])
        .arg(&wasm)
        .assert()
        .code(2)
        .stderr("mlp-wasi: usage: mlp-wasi MODEL_DIR INPUT.npy OUTPUT.npy\n");
}
