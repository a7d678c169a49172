//! The programs `foreign_kernels` runs: each a sequence of launches of
//! kernels nobody wrote for the translator (`kernels/bench/foreign/`,
//! `foreign_kernels.wat`, `guest/examples/kernel-bench`) with the grids
//! and launch order of the CUDA original, over arrays laid out in the
//! guest's memory, with seeded random inputs. Data only: the bench file
//! launches them.

use tensorwasm_core::Dim3;

use crate::common::inputs::uniform;

/// Where the arrays start in the guest's memory: above the C module's
/// stack (its first 16 MiB) and data segments.
pub const DATA: usize = 32 << 20;

/// Which module a program's kernels come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// `kernels/bench/foreign/wasm.c`, by zig cc -O3.
    C,
    /// `embed/benches/foreign_kernels.wat`, by hand.
    Wat,
    /// `guest/examples/kernel-bench`, by rustc.
    Rust,
}

impl Source {
    pub fn label(self) -> &'static str {
        match self {
            Source::C => "C",
            Source::Wat => "WAT",
            Source::Rust => "Rust",
        }
    }
}

/// A kernel argument: a guest address (an `i32` to the Wasm kernel, the
/// device address to its twin), or a value.
#[derive(Clone, Copy, Debug)]
pub enum Arg {
    Ptr(usize),
    I32(i32),
    F32(f32),
}

/// One launch: the kernel (the Wasm export and its twin's entry have the
/// same name), its grid, block and arguments.
pub struct Step {
    pub kernel: &'static str,
    pub grid: Dim3,
    pub block: Dim3,
    pub args: Vec<Arg>,
}

/// One program: inputs written and arrays zeroed before each run, the
/// launches in order, the arrays whose final bits are compared.
pub struct Program {
    pub name: &'static str,
    pub source: Source,
    /// The sizes, for the table.
    pub shape: String,
    pub inputs: Vec<(usize, Vec<f32>)>,
    /// (guest address, floats) set to 0 before each run.
    pub zeroed: Vec<(usize, usize)>,
    /// (guest address, floats) compared after a run.
    pub outputs: Vec<(usize, usize)>,
    pub steps: Vec<Step>,
    /// Runs per timed sample (1 unless a run from the last run's output
    /// does the same work as one from the inputs).
    pub runs_per_sample: usize,
    /// The guest memory the program needs, in bytes.
    pub end: usize,
}

/// Full sizes for the GPU, or small ones for a check on the CPU driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Size {
    Full,
    Small,
}

impl Size {
    /// `full` on the GPU, `small` on the CPU.
    fn pick(self, full: usize, small: usize) -> usize {
        match self {
            Size::Full => full,
            Size::Small => small,
        }
    }
}

/// Arrays laid out one after another from [`DATA`], 256-byte aligned.
struct Arrays {
    next: usize,
}

impl Arrays {
    fn new() -> Arrays {
        Arrays { next: DATA }
    }

    /// The address of a new array of `floats`.
    fn take(&mut self, floats: usize) -> usize {
        let at = self.next;
        self.next = (at + floats * 4).next_multiple_of(256);
        at
    }
}

/// A builder of one program.
struct Builder {
    seed: u64,
    stream: u64,
    arrays: Arrays,
    program: Program,
}

impl Builder {
    fn new(name: &'static str, source: Source, shape: String, seed: u64, stream: u64) -> Builder {
        Builder {
            seed,
            stream: stream << 8,
            arrays: Arrays::new(),
            program: Program {
                name,
                source,
                shape,
                inputs: Vec::new(),
                zeroed: Vec::new(),
                outputs: Vec::new(),
                steps: Vec::new(),
                runs_per_sample: 1,
                end: 0,
            },
        }
    }

    /// An input array of `n` floats uniform in `[lo, hi)`, `f` applied to
    /// element `i`'s value.
    fn input_with(&mut self, n: usize, lo: f64, hi: f64, f: impl Fn(usize, f32) -> f32) -> usize {
        let at = self.arrays.take(n);
        self.stream += 1;
        let values = (0..n)
            .map(|i| f(i, uniform(self.seed, self.stream, i, lo, hi)))
            .collect();
        self.program.inputs.push((at, values));
        at
    }

    /// An input array of `n` floats uniform in `[-1, 1)`.
    fn input(&mut self, n: usize) -> usize {
        self.input_with(n, -1.0, 1.0, |_, v| v)
    }

    /// An array of `n` floats zeroed before each run.
    fn zeroed(&mut self, n: usize) -> usize {
        let at = self.arrays.take(n);
        self.program.zeroed.push((at, n));
        at
    }

    fn output(&mut self, at: usize, n: usize) {
        self.program.outputs.push((at, n));
    }

    fn launch(&mut self, kernel: &'static str, (grid, block): (Dim3, Dim3), args: Vec<Arg>) {
        self.program.steps.push(Step {
            kernel,
            grid,
            block,
            args,
        });
    }

    fn done(mut self) -> Program {
        self.program.end = self.arrays.next;
        self.program
    }
}

/// A 2-D launch of blocks `bx` x `by` covering `x` x `y` threads.
fn grid2(x: usize, y: usize, bx: u32, by: u32) -> (Dim3, Dim3) {
    (
        Dim3::from(((x as u32).div_ceil(bx), (y as u32).div_ceil(by), 1)),
        Dim3::from((bx, by, 1)),
    )
}

/// A 1-D launch of blocks of `b` covering `x` threads.
fn grid1(x: usize, b: u32) -> (Dim3, Dim3) {
    (Dim3::linear((x as u32).div_ceil(b)), Dim3::linear(b))
}

fn i32a(v: usize) -> Arg {
    Arg::I32(v as i32)
}

/// Every program, `size`d, with inputs from `seed`.
pub fn programs(size: Size, seed: u64) -> Vec<Program> {
    vec![
        fdtd_2d(size, seed),
        jacobi_2d(size, seed),
        heat_3d(size, seed),
        conv_2d(size, seed),
        conv_3d(size, seed),
        lu(size, seed),
        trisolve(size, seed),
        atax(size, seed),
        gemm(size, seed),
        covariance(size, seed),
        correlation(size, seed),
        bicg(size, seed),
        mvt(size, seed),
        gesummv(size, seed),
        mm2(size, seed),
        mm3(size, seed),
        syrk(size, seed),
        syr2k(size, seed),
        gramschmidt(size, seed),
        doitgen(size, seed),
        jacobi_1d(size, seed),
        wat_matmul("wat_matmul", size, seed),
        wat_matmul("wat_matmul_down", size, seed),
        wat_matmul("wat_matmul_up_bottom", size, seed),
        wat_matmul("wat_matmul_down_top", size, seed),
        wat_column_sums(size, seed),
        rust_saxpy(size, seed),
        rust_gather(size, seed),
    ]
}

/// FDTD-2D: `tmax` time steps of three kernels (PolyBench/GPU's grids:
/// blocks of 32 x 8 over (ny, nx)).
pub fn fdtd_2d(size: Size, seed: u64) -> Program {
    let (nx, ny, tmax) = (size.pick(2048, 40), size.pick(2048, 48), size.pick(500, 5));
    let shape = format!("{nx} x {ny}, {tmax} steps ({} launches)", 3 * tmax);
    let mut b = Builder::new("fdtd-2d", Source::C, shape, seed, 1);
    let fict = b.input(tmax);
    let ex = b.input(nx * (ny + 1));
    let ey = b.input((nx + 1) * ny);
    let hz = b.input(nx * ny);
    let g = grid2(ny, nx, 32, 8);
    let (p, n) = (Arg::Ptr, i32a);
    for t in 0..tmax {
        b.launch(
            "fdtd_step1",
            g,
            vec![p(fict), p(ex), p(ey), p(hz), n(t), n(nx), n(ny)],
        );
        b.launch("fdtd_step2", g, vec![p(ex), p(ey), p(hz), n(nx), n(ny)]);
        b.launch("fdtd_step3", g, vec![p(ex), p(ey), p(hz), n(nx), n(ny)]);
    }
    b.output(ex, nx * (ny + 1));
    b.output(ey, (nx + 1) * ny);
    b.output(hz, nx * ny);
    b.done()
}

/// The kernel, its arguments and geometry that `launch_rate` launches many
/// times: FDTD-2D's third step on a 64 x 64 grid (16 blocks). Its arrays
/// are `fdtd_2d`'s, so a guest memory for that program holds them.
pub fn small_kernel(fdtd: &Program) -> Step {
    let at = |k: usize| Arg::Ptr(fdtd.inputs[k].0);
    Step {
        kernel: "fdtd_step3",
        grid: grid2(64, 64, 32, 8).0,
        block: grid2(64, 64, 32, 8).1,
        args: vec![at(1), at(2), at(3), Arg::I32(64), Arg::I32(64)],
    }
}

/// Jacobi-2D: `t` steps of the 5-point average and the copy back.
pub fn jacobi_2d(size: Size, seed: u64) -> Program {
    let (n, t) = (size.pick(4096, 40), size.pick(20, 3));
    let shape = format!("{n} x {n}, {t} steps ({} launches)", 2 * t);
    let mut b = Builder::new("jacobi-2d", Source::C, shape, seed, 2);
    let a = b.input(n * n);
    let bb = b.input(n * n);
    let g = grid2(n, n, 32, 8);
    for _ in 0..t {
        b.launch("jacobi2d_step", g, vec![Arg::Ptr(a), Arg::Ptr(bb), i32a(n)]);
        b.launch("jacobi2d_copy", g, vec![Arg::Ptr(a), Arg::Ptr(bb), i32a(n)]);
    }
    b.output(a, n * n);
    b.output(bb, n * n);
    b.done()
}

/// Heat-3D: `t` pairs of 7-point steps a -> b -> a on a 3-D grid of
/// blocks of 32 x 4 x 2.
pub fn heat_3d(size: Size, seed: u64) -> Program {
    let (n, t) = (size.pick(256, 12), size.pick(10, 2));
    let shape = format!("{n}^3, {} steps (3-D grid)", 2 * t);
    let mut b = Builder::new("heat-3d", Source::C, shape, seed, 3);
    let a = b.input(n * n * n);
    let bb = b.input(n * n * n);
    let grid = Dim3::from((
        (n as u32).div_ceil(32),
        (n as u32).div_ceil(4),
        (n as u32).div_ceil(2),
    ));
    let g = (grid, Dim3::from((32, 4, 2)));
    for _ in 0..t {
        b.launch("heat3d", g, vec![Arg::Ptr(a), Arg::Ptr(bb), i32a(n)]);
        b.launch("heat3d", g, vec![Arg::Ptr(bb), Arg::Ptr(a), i32a(n)]);
    }
    b.output(a, n * n * n);
    b.output(bb, n * n * n);
    b.done()
}

/// 2DCONV: one launch over blocks of 32 x 8; five runs a sample (the
/// output depends on the input alone).
pub fn conv_2d(size: Size, seed: u64) -> Program {
    let n = size.pick(8192, 50);
    let mut b = Builder::new("conv-2d", Source::C, format!("{n} x {n}"), seed, 4);
    let a = b.input(n * n);
    let out = b.zeroed(n * n);
    b.launch(
        "conv2d",
        grid2(n, n, 32, 8),
        vec![Arg::Ptr(a), Arg::Ptr(out), i32a(n), i32a(n)],
    );
    b.output(out, n * n);
    b.program.runs_per_sample = 5;
    b.done()
}

/// 3DCONV: one launch per inner plane over a 2-D grid of blocks of 32 x 8.
pub fn conv_3d(size: Size, seed: u64) -> Program {
    let n = size.pick(256, 12);
    let shape = format!("{n}^3 ({} launches)", n - 2);
    let mut b = Builder::new("conv-3d", Source::C, shape, seed, 5);
    let a = b.input(n * n * n);
    let out = b.zeroed(n * n * n);
    for i in 1..n - 1 {
        b.launch(
            "conv3d",
            grid2(n, n, 32, 8),
            vec![
                Arg::Ptr(a),
                Arg::Ptr(out),
                i32a(n),
                i32a(n),
                i32a(n),
                i32a(i),
            ],
        );
    }
    b.output(out, n * n * n);
    b.done()
}

/// LU: two launches per pivot, 2n small launches; the matrix made
/// diagonally dominant so no pivot is small.
pub fn lu(size: Size, seed: u64) -> Program {
    let n = size.pick(2048, 40);
    let shape = format!("{n} x {n} ({} launches)", 2 * n);
    let mut b = Builder::new("lu", Source::C, shape, seed, 6);
    let a = b.input_with(n * n, -1.0, 1.0, |i, v| {
        if i / n == i % n { v + n as f32 } else { v }
    });
    for k in 0..n {
        b.launch(
            "lu_scale",
            grid1(n, 256),
            vec![Arg::Ptr(a), i32a(k), i32a(n)],
        );
        b.launch(
            "lu_update",
            grid2(n, n, 32, 8),
            vec![Arg::Ptr(a), i32a(k), i32a(n)],
        );
    }
    b.output(a, n * n);
    b.done()
}

/// A triangular solve with many right-hand sides: a thread per column.
pub fn trisolve(size: Size, seed: u64) -> Program {
    let (n, m) = (size.pick(512, 24), size.pick(16384, 40));
    let shape = format!("L {n} x {n}, B {n} x {m}");
    let mut b = Builder::new("trisolve", Source::C, shape, seed, 7);
    let l = b.input_with(n * n, -1.0, 1.0, |i, v| {
        let (r, c) = (i / n, i % n);
        if r == c {
            v.abs() + n as f32
        } else if c < r {
            v
        } else {
            0.0
        }
    });
    let bm = b.input(n * m);
    let x = b.zeroed(n * m);
    b.launch(
        "trisolve",
        grid1(m, 256),
        vec![Arg::Ptr(l), Arg::Ptr(bm), Arg::Ptr(x), i32a(n), i32a(m)],
    );
    b.output(x, n * m);
    b.done()
}

/// ATAX: y = A^T (A x), two matrix-vector products.
pub fn atax(size: Size, seed: u64) -> Program {
    let n = size.pick(8192, 40);
    let mut b = Builder::new("atax", Source::C, format!("{n} x {n}"), seed, 8);
    let a = b.input(n * n);
    let x = b.input(n);
    let y = b.zeroed(n);
    let tmp = b.zeroed(n);
    let (p, i) = (Arg::Ptr, i32a);
    b.launch(
        "atax_ax",
        grid1(n, 256),
        vec![p(a), p(x), p(tmp), i(n), i(n)],
    );
    b.launch(
        "atax_aty",
        grid1(n, 256),
        vec![p(a), p(y), p(tmp), i(n), i(n)],
    );
    b.output(tmp, n);
    b.output(y, n);
    b.done()
}

/// GEMM, C = alpha A B + beta C, the naive kernel over blocks of 32 x 8.
pub fn gemm(size: Size, seed: u64) -> Program {
    let n = size.pick(2048, 24);
    let mut b = Builder::new("gemm", Source::C, format!("{n} x {n} x {n}"), seed, 9);
    let a = b.input(n * n);
    let bm = b.input(n * n);
    let c = b.input(n * n);
    let args = vec![
        i32a(n),
        i32a(n),
        i32a(n),
        Arg::F32(1.5),
        Arg::F32(1.25),
        Arg::Ptr(a),
        Arg::Ptr(bm),
        Arg::Ptr(c),
    ];
    b.launch("gemm", grid2(n, n, 32, 8), args);
    b.output(c, n * n);
    b.done()
}

/// Covariance: column means, centring, the symmetric matrix.
pub fn covariance(size: Size, seed: u64) -> Program {
    let (m, n) = (size.pick(1024, 20), size.pick(1024, 24));
    let shape = format!("{n} samples x {m} columns");
    let mut b = Builder::new("covariance", Source::C, shape, seed, 10);
    let data = b.input(n * m);
    let mean = b.zeroed(m);
    let symmat = b.zeroed(m * m);
    let (p, i) = (Arg::Ptr, i32a);
    let float_n = Arg::F32(n as f32);
    b.launch(
        "column_mean",
        grid1(m, 256),
        vec![p(mean), p(data), float_n, i(m), i(n)],
    );
    b.launch(
        "covar_center",
        grid2(m, n, 32, 8),
        vec![p(mean), p(data), i(m), i(n)],
    );
    b.launch(
        "covar_matrix",
        grid1(m, 256),
        vec![p(symmat), p(data), i(m), i(n)],
    );
    b.output(mean, m);
    b.output(data, n * m);
    b.output(symmat, m * m);
    b.done()
}

/// Correlation: means, standard deviations, centring and scaling, the
/// symmetric matrix.
pub fn correlation(size: Size, seed: u64) -> Program {
    let (m, n) = (size.pick(1024, 20), size.pick(1024, 24));
    let shape = format!("{n} samples x {m} columns");
    let mut b = Builder::new("correlation", Source::C, shape, seed, 11);
    let data = b.input(n * m);
    let mean = b.zeroed(m);
    let std = b.zeroed(m);
    let symmat = b.zeroed(m * m);
    let (p, i) = (Arg::Ptr, i32a);
    let float_n = Arg::F32(n as f32);
    let eps = Arg::F32(0.1);
    b.launch(
        "column_mean",
        grid1(m, 256),
        vec![p(mean), p(data), float_n, i(m), i(n)],
    );
    b.launch(
        "corr_std",
        grid1(m, 256),
        vec![p(mean), p(std), p(data), float_n, eps, i(m), i(n)],
    );
    b.launch(
        "corr_center",
        grid2(m, n, 32, 8),
        vec![p(mean), p(std), p(data), float_n, i(m), i(n)],
    );
    b.launch(
        "corr_matrix",
        grid1(m, 256),
        vec![p(symmat), p(data), i(m), i(n)],
    );
    b.output(mean, m);
    b.output(std, m);
    b.output(data, n * m);
    b.output(symmat, m * m);
    b.done()
}

/// BICG: q = A p (a thread per row) and s = A^T r (a thread per column).
pub fn bicg(size: Size, seed: u64) -> Program {
    let (nx, ny) = (size.pick(8192, 40), size.pick(8192, 36));
    let mut b = Builder::new("bicg", Source::C, format!("{nx} x {ny}"), seed, 20);
    let a = b.input(nx * ny);
    let pv = b.input(ny);
    let r = b.input(nx);
    let q = b.zeroed(nx);
    let sv = b.zeroed(ny);
    let (p, i) = (Arg::Ptr, i32a);
    b.launch(
        "bicg_q",
        grid1(nx, 256),
        vec![p(a), p(pv), p(q), i(nx), i(ny)],
    );
    b.launch(
        "bicg_s",
        grid1(ny, 256),
        vec![p(a), p(r), p(sv), i(nx), i(ny)],
    );
    b.output(q, nx);
    b.output(sv, ny);
    b.done()
}

/// MVT: x1 += A y1 (rows) and x2 += A^T y2 (columns).
pub fn mvt(size: Size, seed: u64) -> Program {
    let n = size.pick(8192, 40);
    let mut b = Builder::new("mvt", Source::C, format!("{n} x {n}"), seed, 21);
    let a = b.input(n * n);
    let x1 = b.input(n);
    let x2 = b.input(n);
    let y1 = b.input(n);
    let y2 = b.input(n);
    let (p, i) = (Arg::Ptr, i32a);
    b.launch("mvt_x1", grid1(n, 256), vec![p(a), p(x1), p(y1), i(n)]);
    b.launch("mvt_x2", grid1(n, 256), vec![p(a), p(x2), p(y2), i(n)]);
    b.output(x1, n);
    b.output(x2, n);
    b.done()
}

/// GESUMMV: y = alpha A x + beta B x in one loop.
pub fn gesummv(size: Size, seed: u64) -> Program {
    let n = size.pick(8192, 40);
    let mut b = Builder::new("gesummv", Source::C, format!("{n} x {n}"), seed, 22);
    let a = b.input(n * n);
    let bm = b.input(n * n);
    let x = b.input(n);
    let y = b.zeroed(n);
    let tmp = b.zeroed(n);
    let (p, i) = (Arg::Ptr, i32a);
    b.launch(
        "gesummv",
        grid1(n, 256),
        vec![
            p(a),
            p(bm),
            p(x),
            p(y),
            p(tmp),
            Arg::F32(1.5),
            Arg::F32(1.25),
            i(n),
        ],
    );
    b.output(tmp, n);
    b.output(y, n);
    b.done()
}

/// 2MM: tmp = alpha A B, then D = tmp C + beta D.
pub fn mm2(size: Size, seed: u64) -> Program {
    let n = size.pick(1024, 20);
    let mut b = Builder::new(
        "2mm",
        Source::C,
        format!("{n} x {n} x {n}, twice"),
        seed,
        23,
    );
    let a = b.input(n * n);
    let bm = b.input(n * n);
    let c = b.input(n * n);
    let d = b.input(n * n);
    let tmp = b.zeroed(n * n);
    let (p, i) = (Arg::Ptr, i32a);
    b.launch(
        "mm2_first",
        grid2(n, n, 32, 8),
        vec![p(tmp), p(a), p(bm), Arg::F32(1.5), i(n), i(n), i(n)],
    );
    b.launch(
        "mm2_second",
        grid2(n, n, 32, 8),
        vec![p(tmp), p(c), p(d), Arg::F32(1.25), i(n), i(n), i(n)],
    );
    b.output(tmp, n * n);
    b.output(d, n * n);
    b.done()
}

/// 3MM: E = A B, F = C D, G = E F, one kernel three times.
pub fn mm3(size: Size, seed: u64) -> Program {
    let n = size.pick(1024, 20);
    let mut b = Builder::new(
        "3mm",
        Source::C,
        format!("{n} x {n} x {n}, three times"),
        seed,
        24,
    );
    let a = b.input(n * n);
    let bm = b.input(n * n);
    let c = b.input(n * n);
    let d = b.input(n * n);
    let e = b.zeroed(n * n);
    let f = b.zeroed(n * n);
    let g = b.zeroed(n * n);
    let (p, i) = (Arg::Ptr, i32a);
    let grid = grid2(n, n, 32, 8);
    for (x, y, z) in [(a, bm, e), (c, d, f), (e, f, g)] {
        b.launch("mm3", grid, vec![p(x), p(y), p(z), i(n), i(n), i(n)]);
    }
    b.output(e, n * n);
    b.output(f, n * n);
    b.output(g, n * n);
    b.done()
}

/// SYRK: C = alpha A A^T + beta C.
pub fn syrk(size: Size, seed: u64) -> Program {
    let (n, m) = (size.pick(1024, 20), size.pick(1024, 24));
    let mut b = Builder::new("syrk", Source::C, format!("{n} x {m}"), seed, 25);
    let a = b.input(n * m);
    let c = b.input(n * n);
    let (p, i) = (Arg::Ptr, i32a);
    b.launch(
        "syrk",
        grid2(n, n, 32, 8),
        vec![p(a), p(c), Arg::F32(1.5), Arg::F32(1.25), i(n), i(m)],
    );
    b.output(c, n * n);
    b.done()
}

/// SYR2K: C = alpha A B^T + alpha B A^T + beta C.
pub fn syr2k(size: Size, seed: u64) -> Program {
    let (n, m) = (size.pick(1024, 20), size.pick(1024, 24));
    let mut b = Builder::new("syr2k", Source::C, format!("{n} x {m}"), seed, 26);
    let a = b.input(n * m);
    let bm = b.input(n * m);
    let c = b.input(n * n);
    let (p, i) = (Arg::Ptr, i32a);
    b.launch(
        "syr2k",
        grid2(n, n, 32, 8),
        vec![p(a), p(bm), p(c), Arg::F32(1.5), Arg::F32(1.25), i(n), i(m)],
    );
    b.output(c, n * n);
    b.done()
}

/// Gram-Schmidt QR: per column, its norm (one thread), q, and the update
/// of every later column: 3n launches.
pub fn gramschmidt(size: Size, seed: u64) -> Program {
    let (m, n) = (size.pick(1024, 24), size.pick(512, 12));
    let shape = format!("{m} x {n} ({} launches)", 3 * n);
    let mut b = Builder::new("gramschmidt", Source::C, shape, seed, 27);
    // Columns kept well apart from dependence: 1 on the diagonal.
    let a = b.input_with(
        m * n,
        -1.0,
        1.0,
        move |at, v| {
            if at / n == at % n { v + 4.0 } else { v }
        },
    );
    let r = b.zeroed(n * n);
    let q = b.zeroed(m * n);
    let (p, i) = (Arg::Ptr, i32a);
    for k in 0..n {
        b.launch("gs_norm", grid1(1, 256), vec![p(a), p(r), i(k), i(m), i(n)]);
        b.launch(
            "gs_normalize",
            grid1(m, 256),
            vec![p(a), p(r), p(q), i(k), i(m), i(n)],
        );
        b.launch(
            "gs_update",
            grid1(n, 256),
            vec![p(a), p(r), p(q), i(k), i(m), i(n)],
        );
    }
    b.output(a, m * n);
    b.output(r, n * n);
    b.output(q, m * n);
    b.done()
}

/// DOITGEN: per slice r, sum = A[r] C4, then copied back: 2 nr launches.
pub fn doitgen(size: Size, seed: u64) -> Program {
    let (nr, nq, np) = (size.pick(128, 6), size.pick(128, 10), size.pick(128, 12));
    let shape = format!("{nr} x {nq} x {np} ({} launches)", 2 * nr);
    let mut b = Builder::new("doitgen", Source::C, shape, seed, 28);
    let a = b.input(nr * nq * np);
    let c4 = b.input(np * np);
    let sum = b.zeroed(nr * nq * np);
    let (p, i) = (Arg::Ptr, i32a);
    let grid = grid2(np, nq, 32, 8);
    for r in 0..nr {
        b.launch(
            "doitgen_sum",
            grid,
            vec![p(sum), p(a), p(c4), i(r), i(nq), i(np)],
        );
        b.launch("doitgen_copy", grid, vec![p(sum), p(a), i(r), i(nq), i(np)]);
    }
    b.output(a, nr * nq * np);
    b.output(sum, nr * nq * np);
    b.done()
}

/// Jacobi-1D: `tsteps` of the 3-point average and the copy back.
pub fn jacobi_1d(size: Size, seed: u64) -> Program {
    let (n, tsteps) = (size.pick(1 << 22, 100), size.pick(100, 4));
    let shape = format!("{n} points, {tsteps} steps ({} launches)", 2 * tsteps);
    let mut b = Builder::new("jacobi-1d", Source::C, shape, seed, 29);
    let a = b.input(n);
    let bm = b.input(n);
    let (p, i) = (Arg::Ptr, i32a);
    for _ in 0..tsteps {
        b.launch("jacobi1d_step", grid1(n, 256), vec![p(a), p(bm), i(n)]);
        b.launch("jacobi1d_copy", grid1(n, 256), vec![p(a), p(bm), i(n)]);
    }
    b.output(a, n);
    b.output(bm, n);
    b.done()
}

/// A hand-written WAT matmul (`wat_matmul`: k up, test at the top;
/// `wat_matmul_down`: k down, test at the bottom; `wat_matmul_up_bottom`,
/// `wat_matmul_down_top`), a thread per output.
pub fn wat_matmul(kernel: &'static str, size: Size, seed: u64) -> Program {
    let n = size.pick(1024, 20);
    let mut b = Builder::new(kernel, Source::Wat, format!("{n} x {n} x {n}"), seed, 12);
    let a = b.input(n * n);
    let bm = b.input(n * n);
    let c = b.zeroed(n * n);
    b.launch(
        kernel,
        grid1(n * n, 256),
        vec![Arg::Ptr(a), Arg::Ptr(bm), Arg::Ptr(c), i32a(n)],
    );
    b.output(c, n * n);
    b.program.runs_per_sample = 3;
    b.done()
}

/// WAT column sums: a pointer down each column, a counter down to 0.
pub fn wat_column_sums(size: Size, seed: u64) -> Program {
    let (rows, cols) = (size.pick(8192, 30), size.pick(8192, 50));
    let shape = format!("{rows} x {cols}");
    let mut b = Builder::new("wat_column_sums", Source::Wat, shape, seed, 13);
    let x = b.input(rows * cols);
    let out = b.zeroed(cols);
    b.launch(
        "wat_column_sums",
        grid1(cols, 256),
        vec![Arg::Ptr(x), Arg::Ptr(out), i32a(rows), i32a(cols)],
    );
    b.output(out, cols);
    b.program.runs_per_sample = 5;
    b.done()
}

/// kernel-bench's `saxpy` (Rust, slices with bounds checks).
pub fn rust_saxpy(size: Size, seed: u64) -> Program {
    let n = size.pick(1 << 24, 1000);
    let mut b = Builder::new("saxpy", Source::Rust, format!("{n}"), seed, 14);
    let x = b.input(n);
    let y = b.input(n);
    b.launch(
        "saxpy",
        grid1(n, 256),
        vec![Arg::F32(1.5), Arg::Ptr(x), Arg::Ptr(y), i32a(n)],
    );
    b.output(y, n);
    b.done()
}

/// kernel-bench's `gather_regs` (Rust: eight accumulators, 64 gathered
/// loads a thread).
pub fn rust_gather(size: Size, seed: u64) -> Program {
    let n = size.pick(1 << 22, 1 << 10);
    let mut b = Builder::new("gather_regs", Source::Rust, format!("{n}"), seed, 15);
    let x = b.input(n);
    let out = b.zeroed(n);
    b.launch(
        "gather_regs",
        grid1(n, 256),
        vec![Arg::Ptr(x), Arg::Ptr(out), i32a(n), Arg::I32(3)],
    );
    b.output(out, n);
    b.program.runs_per_sample = 5;
    b.done()
}
