//! The CPU built-ins' tests: each host kernel against the oracles,
//! launched on the CPU driver as the runtime launches it.

use std::time::{SystemTime, UNIX_EPOCH};

use tensorwasm_core::{DeviceMemory, Dim3, DriverError, ErrorKind, GpuDriver, LaunchConfig};
use tensorwasm_cpu::{CpuError, CpuModule};
use tensorwasm_kernels::{
    oracle::{self, F32_ROUNDED_RTOL, F32_UNIT_ROUNDOFF, GELU_TOLERANCE, GemmPrecision, ReduceOp},
    table::{self, Geometry},
};

use super::*;

/// xorshift64* with a printed seed; `TENSORWASM_SEED` replays a run.
struct Rng(u64);

impl Rng {
    fn new(test: &str) -> Rng {
        let seed = std::env::var("TENSORWASM_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0x9e37_79b9, |d| d.as_nanos() as u64)
            });
        println!("{test}: TENSORWASM_SEED={seed}");
        Rng(seed ^ 0x2545_f491_4f6c_dd1d | 1)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in [-scale, scale), never zero.
    fn value(&mut self, scale: f32) -> f32 {
        let unit = (self.next_u64() >> 40) as f32 / (1u32 << 24) as f32;
        let v = (unit * 2.0 - 1.0) * scale;
        if v == 0.0 { scale / 3.0 } else { v }
    }

    fn values(&mut self, len: usize, scale: f32) -> Vec<f32> {
        (0..len).map(|_| self.value(scale)).collect()
    }
}

/// A device buffer whose operand starts `offset` bytes in: an offset
/// that is not a multiple of the element size makes an unaligned
/// operand. The bytes before it are filler.
struct Buffer<M> {
    memory: M,
    offset: usize,
}

impl<M: DeviceMemory> Buffer<M> {
    fn param(&self) -> KernelParam {
        KernelParam::Ptr(DevicePtr(self.memory.device_ptr().0 + self.offset as u64))
    }
}

/// A driver and its built-in kernels.
struct Rig {
    driver: CpuDriver,
    module: CpuModule,
}

impl Rig {
    fn new() -> Rig {
        let driver = CpuDriver::with_capacity(1 << 30).expect("a CPU driver");
        let module = driver.host_module(host_kernels(&driver));
        Rig { driver, module }
    }

    fn bytes(&self, payload: &[u8], offset: usize) -> Buffer<tensorwasm_cpu::CpuDeviceBuffer> {
        let memory = self.driver.alloc_device(offset + payload.len()).unwrap();
        let mut bytes = vec![0xa5; offset];
        bytes.extend_from_slice(payload);
        self.driver.copy_to_device(memory.full(), &bytes).unwrap();
        Buffer { memory, offset }
    }

    fn f32s(&self, data: &[f32], offset: usize) -> Buffer<tensorwasm_cpu::CpuDeviceBuffer> {
        let payload: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.bytes(&payload, offset)
    }

    fn u16s(&self, data: &[u16], offset: usize) -> Buffer<tensorwasm_cpu::CpuDeviceBuffer> {
        let payload: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.bytes(&payload, offset)
    }

    fn read<M: DeviceMemory>(&self, buffer: &Buffer<M>, count: usize) -> Vec<f32> {
        let len = buffer.offset + count * 4;
        let mut bytes = vec![0; len];
        self.driver
            .copy_from_device(&mut bytes, buffer.memory.range(0, len).unwrap())
            .unwrap();
        bytes[buffer.offset..]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }

    fn launch(
        &self,
        name: &str,
        grid: Dim3,
        block: Dim3,
        params: &[KernelParam],
    ) -> Result<(), CpuError> {
        // A stream per launch: a failed launch leaves its stream failed.
        let stream = self.driver.create_stream().unwrap();
        let function = self.driver.function(&self.module, name).unwrap();
        let config = LaunchConfig {
            grid,
            block,
            shared_mem_bytes: 0,
        };
        // SAFETY: the built-ins check every operand against the
        // driver's live memory, and the tests' buffers outlive the
        // synchronize below.
        unsafe { self.driver.launch(&stream, &function, &config, params) }?;
        self.driver.stream_synchronize(&stream)
    }
}

fn i32p(v: usize) -> KernelParam {
    KernelParam::I32(i32::try_from(v).unwrap())
}

fn i64p(v: i64) -> KernelParam {
    KernelParam::I64(v)
}

/// The contract's grid for the elementwise kernels.
fn elementwise_grid(n: usize) -> Dim3 {
    Dim3::linear(n.div_ceil(1024).clamp(1, 65536) as u32)
}

const BLOCK_256: Dim3 = Dim3 { x: 256, y: 1, z: 1 };

#[test]
fn every_entry_point_of_the_contract_is_there() {
    let rig = Rig::new();
    let names: Vec<&str> = rig.module.names().collect();
    let mut want = vec![
        "tw_gemm_f32",
        "tw_gemm_tf32",
        "tw_gemm_bf16",
        "tw_gemm_f16",
        "tw_reduce_sum_f32",
        "tw_reduce_max_f32",
        "tw_reduce_mean_f32",
        "tw_reduce_sum_cols_f32",
        "tw_reduce_max_cols_f32",
        "tw_reduce_mean_cols_f32",
        "tw_softmax_rows_f32",
        "tw_softmax_f32",
        "tw_softmax_wide_f32",
        "tw_layernorm_rows_f32",
        "tw_layernorm_f32",
        "tw_layernorm_wide_f32",
        "tw_add_f32",
        "tw_mul_f32",
        "tw_relu_f32",
        "tw_gelu_f32",
        "tw_transpose_f32",
    ];
    want.sort_unstable();
    assert_eq!(names, want);
}

#[test]
fn the_elementwise_partition_covers_each_element_once() {
    for n in [1usize, 5, 1000, 1023, 1025, 100_003] {
        for grid in [1u32, 3, 7, n.div_ceil(1024) as u32, 65536] {
            let mut seen = vec![0u8; n];
            for x in 0..grid {
                let block = BlockContext {
                    block_idx: Dim3::linear(x),
                    block_dim: BLOCK_256,
                    grid_dim: Dim3::linear(grid),
                    shared_mem_bytes: 0,
                };
                for i in elementwise_run(&block, n) {
                    seen[i] += 1;
                }
            }
            assert!(seen.iter().all(|&s| s == 1), "n {n}, grid {grid}");
        }
    }
}

// -----------------------------------------------------------------------
// GEMM
// -----------------------------------------------------------------------

/// One GEMM launch: sizes, leading dimensions, batch strides (elements)
/// and each operand's byte offset in its buffer.
#[derive(Clone, Copy, Debug)]
struct GemmCase {
    m: usize,
    n: usize,
    k: usize,
    ld: [usize; 3],
    batch: usize,
    strides: [i64; 3],
    alpha: f32,
    beta: f32,
    offsets: [usize; 3],
}

impl GemmCase {
    fn dense(m: usize, n: usize, k: usize) -> GemmCase {
        GemmCase {
            m,
            n,
            k,
            ld: [k, n, n],
            batch: 1,
            strides: [0; 3],
            alpha: 1.0,
            beta: 0.0,
            offsets: [0; 3],
        }
    }

    /// For each operand: elements in its buffer and where batch 0
    /// starts (past earlier batches of a negative stride).
    fn layout(&self, which: usize) -> (usize, usize) {
        let (rows, cols) = [(self.m, self.k), (self.k, self.n), (self.m, self.n)][which];
        let span = (rows - 1) * self.ld[which] + cols;
        let last = (self.batch as i64 - 1) * self.strides[which];
        let low = last.min(0).unsigned_abs() as usize;
        let high = last.max(0) as usize;
        (low + high + span, low)
    }
}

fn run_gemm(rig: &Rig, rng: &mut Rng, entry: &str, precision: GemmPrecision, case: GemmCase) {
    let GemmCase {
        m,
        n,
        k,
        ld: [lda, ldb, ldc],
        batch,
        strides: [sa, sb, sc],
        alpha,
        beta,
        offsets,
    } = case;
    let (a_len, a0) = case.layout(0);
    let (b_len, b0) = case.layout(1);
    let (c_len, c0) = case.layout(2);
    let narrow = |v: &[f32]| -> (Vec<u16>, Vec<f64>) {
        let to_bits = if precision == GemmPrecision::Bf16 {
            oracle::f32_to_bf16
        } else {
            oracle::f32_to_f16
        };
        let from_bits = if precision == GemmPrecision::Bf16 {
            oracle::bf16_to_f32
        } else {
            oracle::f16_to_f32
        };
        let bits: Vec<u16> = v.iter().map(|&x| to_bits(x)).collect();
        let values = bits.iter().map(|&b| f64::from(from_bits(b))).collect();
        (bits, values)
    };
    let (a_raw, b_raw) = (rng.values(a_len, 1.0), rng.values(b_len, 1.0));
    let (a_buf, b_buf, a, b) = match precision {
        GemmPrecision::F32 | GemmPrecision::Tf32 => (
            rig.f32s(&a_raw, offsets[0]),
            rig.f32s(&b_raw, offsets[1]),
            oracle::widen(&a_raw),
            oracle::widen(&b_raw),
        ),
        GemmPrecision::Bf16 | GemmPrecision::F16 => {
            let ((a_bits, a), (b_bits, b)) = (narrow(&a_raw), narrow(&b_raw));
            (
                rig.u16s(&a_bits, offsets[0]),
                rig.u16s(&b_bits, offsets[1]),
                a,
                b,
            )
        }
    };
    // beta == 0 must not read C: fill it with NaN then.
    let c_init = if beta == 0.0 {
        vec![f32::NAN; c_len]
    } else {
        rng.values(c_len, 1.0)
    };
    let c_buf = rig.f32s(&c_init, offsets[2]);
    let c_wide = oracle::widen(&c_init);
    let ptr_at = |buf: &Buffer<_>, first: usize, size: usize| match buf.param() {
        KernelParam::Ptr(p) => KernelParam::Ptr(DevicePtr(p.0 + (first * size) as u64)),
        _ => unreachable!(),
    };
    let size = if matches!(precision, GemmPrecision::F32 | GemmPrecision::Tf32) {
        4
    } else {
        2
    };
    let params = [
        ptr_at(&a_buf, a0, size),
        ptr_at(&b_buf, b0, size),
        ptr_at(&c_buf, c0, 4),
        i32p(m),
        i32p(n),
        i32p(k),
        i64p(lda as i64),
        i64p(ldb as i64),
        i64p(ldc as i64),
        i64p(sa),
        i64p(sb),
        i64p(sc),
        KernelParam::F32(alpha),
        KernelParam::F32(beta),
    ];
    let grid = Dim3 {
        x: n.div_ceil(128) as u32,
        y: m.div_ceil(128) as u32,
        z: batch as u32,
    };
    rig.launch(entry, grid, BLOCK_256, &params).unwrap();
    let c_out = rig.read(&c_buf, c_len);
    let mut written = vec![false; c_len];
    let (alpha, beta) = (f64::from(alpha), f64::from(beta));
    for z in 0..batch {
        let at = |base: usize, stride: i64| (base as i64 + z as i64 * stride) as usize;
        let (az, bz, cz) = (at(a0, sa), at(b0, sb), at(c0, sc));
        let (a, b, c) = (&a[az..], &b[bz..], &c_wide[cz..]);
        let want = oracle::gemm(a, b, c, m, n, k, lda, ldb, ldc, alpha, beta);
        let magnitude = oracle::gemm_abs(a, b, c, m, n, k, lda, ldb, ldc, alpha, beta);
        let mut got = Vec::with_capacity(m * n);
        for i in 0..m {
            for j in 0..n {
                got.push(c_out[cz + i * ldc + j]);
                written[cz + i * ldc + j] = true;
            }
        }
        oracle::check_close_scaled(&got, &want, &magnitude, oracle::gemm_rtol(precision, k))
            .unwrap_or_else(|e| panic!("{entry} {case:?}, batch {z}: {e}"));
        if precision == GemmPrecision::Tf32 {
            // Against the rounded inputs it is an f32 GEMM: the kernel
            // did round.
            let round = |v: &[f64]| -> Vec<f64> {
                v.iter()
                    .map(|&x| f64::from(oracle::tf32_round(x as f32)))
                    .collect()
            };
            let (ar, br) = (round(a), round(b));
            let want = oracle::gemm(&ar, &br, c, m, n, k, lda, ldb, ldc, alpha, beta);
            oracle::check_close_scaled(
                &got,
                &want,
                &magnitude,
                oracle::gemm_rtol(GemmPrecision::F32, k),
            )
            .unwrap_or_else(|e| panic!("{entry} {case:?} against rounded inputs, batch {z}: {e}"));
        }
    }
    // Nothing outside the batches' M x N elements changed.
    for (i, (&before, &after)) in c_init.iter().zip(&c_out).enumerate() {
        if !written[i] {
            assert_eq!(
                before.to_bits(),
                after.to_bits(),
                "{entry} {case:?}: C[{i}] outside the result changed"
            );
        }
    }
}

/// Shapes every GEMM entry runs: single elements, odd sizes, partial
/// tiles with padded leading dimensions, a broadcast A, a negative B
/// stride, operands at odd element offsets.
fn gemm_cases(element: usize) -> Vec<GemmCase> {
    let mut padded = GemmCase::dense(130, 257, 129);
    padded.ld = [132, 260, 259];
    padded.alpha = 1.5;
    padded.beta = -0.5;
    let mut batched = GemmCase::dense(70, 200, 31);
    batched.ld = [33, 203, 201];
    batched.batch = 3;
    batched.strides = [0, -(31 * 203 + 5), 70 * 201 + 7];
    batched.offsets = [element, 3 * element, 4];
    batched.beta = 2.0;
    let mut long_k = GemmCase::dense(33, 65, 1000);
    long_k.ld = [1001, 65, 67];
    long_k.alpha = -0.75;
    vec![
        GemmCase::dense(1, 1, 1),
        GemmCase::dense(17, 3, 5),
        padded,
        batched,
        long_k,
    ]
}

#[test]
fn gemm_f32_matches_the_oracle() {
    let (rig, mut rng) = (Rig::new(), Rng::new("gemm_f32"));
    for case in gemm_cases(4) {
        run_gemm(&rig, &mut rng, "tw_gemm_f32", GemmPrecision::F32, case);
    }
    // Beyond the contract: operands not even aligned to their element.
    let mut odd = GemmCase::dense(9, 140, 7);
    odd.offsets = [1, 2, 3];
    odd.beta = 1.0;
    run_gemm(&rig, &mut rng, "tw_gemm_f32", GemmPrecision::F32, odd);
}

#[test]
fn gemm_tf32_rounds_its_inputs() {
    let (rig, mut rng) = (Rig::new(), Rng::new("gemm_tf32"));
    for case in gemm_cases(4) {
        run_gemm(&rig, &mut rng, "tw_gemm_tf32", GemmPrecision::Tf32, case);
    }
}

/// A GEMM's parameters over dense row-major `[a, b, c]` of one batch:
/// `C = A @ B` (unit alpha, zero beta).
fn dense_gemm_params<M: DeviceMemory>(
    abc: [&Buffer<M>; 3],
    m: usize,
    n: usize,
    k: usize,
) -> [KernelParam; 14] {
    let [a, b, c] = abc;
    [
        a.param(),
        b.param(),
        c.param(),
        i32p(m),
        i32p(n),
        i32p(k),
        i64p(k as i64),
        i64p(n as i64),
        i64p(n as i64),
        i64p(0),
        i64p(0),
        i64p(0),
        KernelParam::F32(1.0),
        KernelParam::F32(0.0),
    ]
}

/// `tw_gemm_tf32` of one block, unit alpha, zero beta, dense operands.
fn gemm_tf32_once(rig: &Rig, a: &[f32], b: &[f32], m: usize, n: usize, k: usize) -> Vec<f32> {
    let (a_buf, b_buf) = (rig.f32s(a, 0), rig.f32s(b, 0));
    let c_buf = rig.f32s(&vec![f32::NAN; m * n], 0);
    let params = dense_gemm_params([&a_buf, &b_buf, &c_buf], m, n, k);
    let grid = Dim3 {
        x: n.div_ceil(128) as u32,
        y: m.div_ceil(128) as u32,
        z: 1,
    };
    rig.launch("tw_gemm_tf32", grid, BLOCK_256, &params)
        .unwrap();
    rig.read(&c_buf, m * n)
}

/// Halfway cases with an even and an odd last kept bit and either side
/// of them, normal and subnormal, both signs, times an identity (and an
/// identity times them): C is the rounded input, bit for bit (zeros up
/// to sign). A NaN in A or B makes its row or column of C NaN.
#[test]
fn gemm_tf32_rounds_ties_to_even_bit_for_bit() {
    let rig = Rig::new();
    let mut words = Vec::new();
    for sign in [0, 0x8000_0000u32] {
        for exponent in [0, 0x0080_0000, 0x3f80_0000, 0x7e80_0000] {
            for kept in [0, 0x2000, 0x7f_e000] {
                for dropped in [0x1000, 0xfff, 0x1001, 0x1fff] {
                    words.push(sign | exponent | kept | dropped);
                }
            }
        }
    }
    let x: Vec<f32> = words.iter().map(|&w| f32::from_bits(w)).collect();
    let (rows, k) = (6, 16);
    assert_eq!(x.len(), rows * k);
    let eye: Vec<f32> = (0..k * k)
        .map(|i| if i / k == i % k { 1.0 } else { 0.0 })
        .collect();
    for (c, what) in [
        (gemm_tf32_once(&rig, &x, &eye, rows, k, k), "A"),
        (gemm_tf32_once(&rig, &eye, &x, k, rows, k), "B"),
    ] {
        for (i, (&got, &input)) in c.iter().zip(&x).enumerate() {
            let want = tf32_round(input);
            assert!(
                got == want,
                "{what}[{i}] = {:#010x}: got {:#010x}, want {:#010x}",
                input.to_bits(),
                got.to_bits(),
                want.to_bits()
            );
        }
    }
    // Ties go both ways: some round down, some up.
    let ties = words.iter().filter(|&&w| w & 0x1fff == 0x1000);
    let up = ties
        .clone()
        .filter(|&&w| tf32_round(f32::from_bits(w)).to_bits() > w)
        .count();
    assert!(up > 0 && up < ties.count());

    let (m, n, k) = (5, 7, 3);
    let mut a = vec![0.5f32; m * k];
    let mut b = vec![0.25f32; k * n];
    a[2 * k + 1] = f32::NAN;
    b[n + 4] = f32::NAN;
    let c = gemm_tf32_once(&rig, &a, &b, m, n, k);
    for (i, v) in c.iter().enumerate() {
        let (row, col) = (i / n, i % n);
        assert_eq!(v.is_nan(), row == 2 || col == 4, "C[{row}][{col}] = {v}");
    }
}

#[test]
fn gemm_bf16_and_f16_match_the_oracle() {
    let (rig, mut rng) = (Rig::new(), Rng::new("gemm_bf16_f16"));
    for case in gemm_cases(2) {
        run_gemm(&rig, &mut rng, "tw_gemm_bf16", GemmPrecision::Bf16, case);
        run_gemm(&rig, &mut rng, "tw_gemm_f16", GemmPrecision::F16, case);
    }
}

// -----------------------------------------------------------------------
// Reductions, softmax, layer norm
// -----------------------------------------------------------------------

/// The grid and block of `entry` for `outer` x `inner` outputs of a
/// reduction, or `outer` rows of a row op, from the table's geometry.
fn table_launch(entry: &str, outer: usize, inner: usize) -> (Dim3, Dim3) {
    let k = table::kernel(entry).unwrap_or_else(|| panic!("{entry} is not in the table"));
    let blocks = match k.geometry {
        Geometry::PerOutput => outer * inner,
        Geometry::ColumnStrips { width } => outer * inner.div_ceil(width as usize),
        Geometry::Rows { per_block } => outer.div_ceil(per_block as usize),
        other => panic!("{entry}: {other:?}"),
    };
    (Dim3::linear(u32::try_from(blocks).unwrap()), k.block)
}

const REDUCTIONS: [(&str, ReduceOp); 6] = [
    ("tw_reduce_sum_f32", ReduceOp::Sum),
    ("tw_reduce_max_f32", ReduceOp::Max),
    ("tw_reduce_mean_f32", ReduceOp::Mean),
    ("tw_reduce_sum_cols_f32", ReduceOp::Sum),
    ("tw_reduce_max_cols_f32", ReduceOp::Max),
    ("tw_reduce_mean_cols_f32", ReduceOp::Mean),
];
const SOFTMAX: [&str; 3] = [
    "tw_softmax_rows_f32",
    "tw_softmax_f32",
    "tw_softmax_wide_f32",
];
const LAYERNORM: [&str; 3] = [
    "tw_layernorm_rows_f32",
    "tw_layernorm_f32",
    "tw_layernorm_wide_f32",
];

/// Every reduction entry on every shape (each entry is correct for any
/// size; the table picks by `inner`), x one element off alignment.
#[test]
fn reductions_match_the_oracle() {
    let (rig, mut rng) = (Rig::new(), Rng::new("reduce"));
    let shapes = [
        (1, 1, 1),
        (1, 17, 1),
        (3, 1000, 1),
        (4, 17, 5),
        (2, 1000, 3),
        (5, 1, 7),
        (1, 100_003, 1),
        // Strips: inner a multiple of 32, not one, and past one strip;
        // n past the GPU's 16 x 32 rows per trip.
        (1, 600, 64),
        (2, 333, 65),
        (1, 1100, 40),
        (3, 2, 31),
    ];
    for (outer, n, inner) in shapes {
        let x = rng.values(outer * n * inner, 1.0);
        let x_buf = rig.f32s(&x, 4);
        let xw = oracle::widen(&x);
        let abs: Vec<f64> = xw.iter().map(|v| v.abs()).collect();
        for (entry, op) in REDUCTIONS {
            let y_buf = rig.f32s(&vec![f32::NAN; outer * inner], 0);
            let params = [
                x_buf.param(),
                y_buf.param(),
                i32p(outer),
                i32p(n),
                i32p(inner),
            ];
            let (grid, block) = table_launch(entry, outer, inner);
            rig.launch(entry, grid, block, &params).unwrap();
            let got = rig.read(&y_buf, outer * inner);
            let want = oracle::reduce(&xw, outer, n, inner, op);
            let checked = match op {
                ReduceOp::Max => oracle::check_close(&got, &want, 0.0, 0.0),
                ReduceOp::Sum | ReduceOp::Mean => {
                    let magnitude = oracle::reduce(&abs, outer, n, inner, op);
                    oracle::check_close_scaled(&got, &want, &magnitude, oracle::f32_sum_rtol(n))
                }
            };
            checked.unwrap_or_else(|e| panic!("{entry} [{outer}, {n}, {inner}]: {e}"));
        }
    }
}

/// Every softmax entry on rows short and long for it (held in
/// registers or not on the GPU), odd row counts and lengths, x one
/// element off alignment for some.
#[test]
fn softmax_matches_the_oracle() {
    let (rig, mut rng) = (Rig::new(), Rng::new("softmax"));
    for (rows, cols, scale, skew) in [
        (1, 1, 1.0, 4),
        (3, 17, 1.0, 4),
        (4, 1000, 10.0, 4),
        (13, 1024, 10.0, 0),
        (9, 1023, 10.0, 0),
        (2, 5000, 30.0, 4),
        (3, 8193, 10.0, 0),
        (2, 16384, 10.0, 4),
        (1, 16388, 10.0, 0),
    ] {
        let x = rng.values(rows * cols, scale);
        let x_buf = rig.f32s(&x, skew);
        let want = oracle::softmax(&oracle::widen(&x), rows, cols);
        let (rtol, atol) = oracle::softmax_tolerance(cols);
        for entry in SOFTMAX {
            let y_buf = rig.f32s(&vec![f32::NAN; rows * cols], 0);
            let params = [x_buf.param(), y_buf.param(), i32p(rows), i32p(cols)];
            let (grid, block) = table_launch(entry, rows, 1);
            rig.launch(entry, grid, block, &params).unwrap();
            let got = rig.read(&y_buf, rows * cols);
            oracle::check_close(&got, &want, rtol, atol)
                .unwrap_or_else(|e| panic!("{entry} [{rows}, {cols}]: {e}"));
        }
    }
}

#[test]
fn layernorm_matches_the_oracle() {
    let (rig, mut rng) = (Rig::new(), Rng::new("layernorm"));
    for (rows, cols, shift) in [
        (1, 1, 0.0),
        (3, 17, 0.0),
        (4, 1000, 0.0),
        (2, 3000, 5.0),
        (13, 1024, 100.0),
        (9, 1023, 0.0),
        (3, 8193, 5.0),
        (2, 16384, 0.0),
    ] {
        let x: Vec<f32> = rng
            .values(rows * cols, 1.0)
            .iter()
            .map(|v| v + shift)
            .collect();
        let (gamma, beta) = (rng.values(cols, 2.0), rng.values(cols, 1.0));
        let eps = 1e-5f32;
        let bufs = [rig.f32s(&x, 0), rig.f32s(&gamma, 4), rig.f32s(&beta, 8)];
        let (xw, gw, bw) = (
            oracle::widen(&x),
            oracle::widen(&gamma),
            oracle::widen(&beta),
        );
        let eps64 = f64::from(eps);
        let want = oracle::layernorm(&xw, &gw, &bw, rows, cols, eps64);
        let magnitude = oracle::layernorm_magnitude(&xw, &gw, &bw, rows, cols, eps64);
        for entry in LAYERNORM {
            let y_buf = rig.f32s(&vec![f32::NAN; rows * cols], 4);
            let params = [
                bufs[0].param(),
                bufs[1].param(),
                bufs[2].param(),
                y_buf.param(),
                i32p(rows),
                i32p(cols),
                KernelParam::F32(eps),
            ];
            let (grid, block) = table_launch(entry, rows, 1);
            rig.launch(entry, grid, block, &params).unwrap();
            let got = rig.read(&y_buf, rows * cols);
            oracle::check_close_scaled(&got, &want, &magnitude, oracle::layernorm_rtol(cols))
                .unwrap_or_else(|e| panic!("{entry} [{rows}, {cols}]: {e}"));
        }
    }
}

/// A block computes its own share and nothing else: a grid one block
/// short of the contract's leaves exactly the last block's rows (8 per
/// block of a `_rows` op) or strip (32 outputs of a `_cols` reduction)
/// unwritten.
#[test]
fn row_and_strip_blocks_write_only_their_share() {
    let rig = Rig::new();
    let (rows, cols) = (20, 5);
    let x = rig.f32s(&vec![1.0; rows * cols], 0);
    let ones = rig.f32s(&vec![1.0; cols], 0);
    for entry in [SOFTMAX[0], LAYERNORM[0]] {
        let y = rig.f32s(&vec![f32::NAN; rows * cols], 0);
        let mut params = vec![x.param(), y.param(), i32p(rows), i32p(cols)];
        if entry == LAYERNORM[0] {
            params.splice(1..1, [ones.param(), ones.param()]);
            params.push(KernelParam::F32(1e-5));
        }
        rig.launch(entry, Dim3::linear(2), BLOCK_256, &params)
            .unwrap();
        let got = rig.read(&y, rows * cols);
        for (r, row) in got.chunks(cols).enumerate() {
            assert_eq!(row.iter().all(|v| !v.is_nan()), r < 16, "{entry} row {r}");
        }
    }
    let (outer, n, inner) = (2, 3, 70);
    let x = rig.f32s(&vec![1.0; outer * n * inner], 0);
    let y = rig.f32s(&vec![f32::NAN; outer * inner], 0);
    let params = [x.param(), y.param(), i32p(outer), i32p(n), i32p(inner)];
    // Strips of 32: blocks 0..3 are outer index 0, 3..6 outer index 1;
    // block 5 (y[1, 64..70]) does not run.
    rig.launch(
        "tw_reduce_sum_cols_f32",
        Dim3::linear(5),
        BLOCK_256,
        &params,
    )
    .unwrap();
    let got = rig.read(&y, outer * inner);
    for (i, v) in got.iter().enumerate() {
        let written = i < inner + 64;
        assert_eq!(!v.is_nan(), written, "y[{i}]");
        if written {
            assert_eq!(*v, 3.0, "y[{i}]");
        }
    }
}

// -----------------------------------------------------------------------
// Elementwise, transpose
// -----------------------------------------------------------------------

#[test]
fn add_and_mul_broadcast_b() {
    let (rig, mut rng) = (Rig::new(), Rng::new("add_mul"));
    // (n, b_period, grid): the contract's grid unless given; 20000 with
    // period 5000 has runs that wrap around B and runs that do not.
    let cases = [
        (1, 1, None),
        (17, 17, None),
        (17, 1, None),
        (1000, 17, None),
        (1000, 1000, None),
        (20_000, 5000, None),
        (100_003, 100_003, Some(3)),
        (100_003, 7, None),
        (5, 5, Some(7)),
    ];
    for (n, period, grid) in cases {
        let (a, b) = (rng.values(n, 4.0), rng.values(period, 4.0));
        let (a_buf, b_buf) = (rig.f32s(&a, 4), rig.f32s(&b, 1));
        let grid = grid.map_or_else(|| elementwise_grid(n), Dim3::linear);
        for (entry, want) in [
            (
                "tw_add_f32",
                oracle::add(&oracle::widen(&a), &oracle::widen(&b), period),
            ),
            (
                "tw_mul_f32",
                oracle::mul(&oracle::widen(&a), &oracle::widen(&b), period),
            ),
        ] {
            let y_buf = rig.f32s(&vec![f32::NAN; n], 12);
            let params = [
                a_buf.param(),
                b_buf.param(),
                y_buf.param(),
                i64p(n as i64),
                i64p(period as i64),
            ];
            rig.launch(entry, grid, BLOCK_256, &params).unwrap();
            let got = rig.read(&y_buf, n);
            oracle::check_close(&got, &want, F32_ROUNDED_RTOL, 0.0)
                .unwrap_or_else(|e| panic!("{entry} n {n}, period {period}, grid {grid:?}: {e}"));
        }
    }
}

#[test]
fn relu_and_gelu_match_the_oracle() {
    let (rig, mut rng) = (Rig::new(), Rng::new("relu_gelu"));
    for n in [1usize, 17, 1000, 100_003] {
        let mut x = rng.values(n, 8.0);
        // Edge values (GELU of -inf is NaN on the GPU, 0 * inf).
        let edges = [-0.0, 1e-30, -1e-30, 20.0, -20.0, f32::NAN];
        for (slot, edge) in x.iter_mut().zip(edges) {
            *slot = edge;
        }
        // Managed memory for the input: the kernels take any live memory.
        let x_buf = {
            let memory = rig.driver.alloc_managed(4 * n + 4).unwrap();
            let mut bytes = vec![0xa5; 4];
            bytes.extend(x.iter().flat_map(|v| v.to_le_bytes()));
            rig.driver.copy_to_device(memory.full(), &bytes).unwrap();
            Buffer { memory, offset: 4 }
        };
        let xw = oracle::widen(&x);
        for (entry, want, (rtol, atol)) in [
            ("tw_relu_f32", oracle::relu(&xw), (0.0, 0.0)),
            ("tw_gelu_f32", oracle::gelu(&xw), GELU_TOLERANCE),
        ] {
            let y_buf = rig.f32s(&vec![f32::NAN; n], 2);
            let params = [x_buf.param(), y_buf.param(), i64p(n as i64)];
            rig.launch(entry, elementwise_grid(n), BLOCK_256, &params)
                .unwrap();
            let got = rig.read(&y_buf, n);
            oracle::check_close(&got, &want, rtol, atol)
                .unwrap_or_else(|e| panic!("{entry} n {n}: {e}"));
            if entry == "tw_gelu_f32" {
                // Rounded once from f64: within an ulp, far inside the
                // tolerance the GPU needs.
                oracle::check_close(&got, &want, F32_UNIT_ROUNDOFF, 1e-45)
                    .unwrap_or_else(|e| panic!("{entry} n {n}: {e}"));
            }
        }
    }
}

#[test]
fn transpose_moves_every_tile() {
    let (rig, mut rng) = (Rig::new(), Rng::new("transpose"));
    for (batch, rows, cols) in [
        (1, 1, 1),
        (2, 17, 33),
        (3, 100, 37),
        (1, 1000, 3),
        (1, 3, 1000),
    ] {
        let x = rng.values(batch * rows * cols, 1.0);
        let x_buf = rig.f32s(&x, 4);
        let y_buf = rig.f32s(&vec![f32::NAN; x.len()], 0);
        let grid = Dim3 {
            x: cols.div_ceil(32) as u32,
            y: rows.div_ceil(32) as u32,
            z: batch as u32,
        };
        let params = [x_buf.param(), y_buf.param(), i32p(rows), i32p(cols)];
        rig.launch(
            "tw_transpose_f32",
            grid,
            Dim3 { x: 32, y: 8, z: 1 },
            &params,
        )
        .unwrap();
        let got = rig.read(&y_buf, x.len());
        let want = oracle::transpose(&oracle::widen(&x), rows, cols);
        oracle::check_close(&got, &want, 0.0, 0.0)
            .unwrap_or_else(|e| panic!("transpose [{batch}, {rows}, {cols}]: {e}"));
    }
}

// -----------------------------------------------------------------------
// Refusals
// -----------------------------------------------------------------------

/// The launch fails at synchronize, with `what` in its message.
fn assert_fails(result: Result<(), CpuError>, what: &str) {
    let err = result.expect_err("the launch should fail");
    assert_eq!(err.kind(), ErrorKind::LaunchFailed, "{err}");
    assert!(err.to_string().contains(what), "{err}");
}

#[test]
fn an_operand_past_its_allocation_fails_the_launch_untouched() {
    let mut rng = Rng::new("past_allocation");
    let (m, n, k) = (100, 50, 20);
    // A is one element short of M rows.
    let rig = Rig::new();
    let a = rig.f32s(&rng.values(m * k - 1, 1.0), 0);
    let b = rig.f32s(&rng.values(k * n, 1.0), 0);
    let c_init = rng.values(m * n, 1.0);
    let c = rig.f32s(&c_init, 0);
    let params = dense_gemm_params([&a, &b, &c], m, n, k);
    let result = rig.launch("tw_gemm_f32", Dim3::linear(1), BLOCK_256, &params);
    assert_fails(result, "tw_gemm_f32: A: 8000 bytes at");
    assert_eq!(rig.read(&c, m * n), c_init, "C was written");

    // y one element short: the last block's run leaves it.
    let n = 5000;
    let (x, y) = (
        rig.f32s(&rng.values(n, 1.0), 0),
        rig.f32s(&vec![0.5; n - 1], 0),
    );
    let params = [x.param(), y.param(), i64p(n as i64)];
    let result = rig.launch("tw_relu_f32", elementwise_grid(n), BLOCK_256, &params);
    assert_fails(result, "outside the driver's live memory");

    // B's batch stride walks off B.
    let (a, b, c) = (
        rig.f32s(&[1.0; 4], 0),
        rig.f32s(&[1.0; 4], 0),
        rig.f32s(&[1.0; 8], 0),
    );
    let mut params = dense_gemm_params([&a, &b, &c], 2, 2, 2);
    params[10] = i64p(4);
    params[11] = i64p(4);
    let result = rig.launch("tw_gemm_f32", Dim3 { x: 1, y: 1, z: 2 }, BLOCK_256, &params);
    assert_fails(result, "B: 16 bytes at");
    // A batch stride whose offsets overflow (in elements for batch 2,
    // in bytes for batch 1).
    params[9] = i64p(i64::MAX);
    let result = rig.launch("tw_gemm_f32", Dim3 { x: 1, y: 1, z: 3 }, BLOCK_256, &params);
    assert_fails(result, "offset overflows");
}

#[test]
fn bad_parameters_fail_the_launch() {
    let rig = Rig::new();
    let (x, y) = (rig.f32s(&[1.0; 16], 0), rig.f32s(&[1.0; 16], 0));
    let cases: [(&str, Vec<KernelParam>, &str); 5] = [
        (
            "tw_relu_f32",
            vec![x.param(), y.param(), i64p(0)],
            "tw_relu_f32: n must be positive, got 0",
        ),
        (
            "tw_relu_f32",
            vec![x.param(), y.param()],
            "tw_relu_f32: takes 3 parameters, got 2",
        ),
        (
            "tw_relu_f32",
            vec![x.param(), i64p(1), i64p(1)],
            "tw_relu_f32: y must be a pointer",
        ),
        (
            "tw_softmax_f32",
            vec![x.param(), y.param(), i32p(4), KernelParam::I32(-4)],
            "cols must be positive, got -4",
        ),
        (
            "tw_add_f32",
            vec![
                x.param(),
                x.param(),
                y.param(),
                KernelParam::I32(16),
                i64p(1),
            ],
            "n must be a long long",
        ),
    ];
    for (entry, params, what) in cases {
        assert_fails(rig.launch(entry, Dim3::linear(1), BLOCK_256, &params), what);
    }
    // C's batches may not overlap (two blocks would write one element).
    let (a, b, c) = (
        rig.f32s(&[1.0; 4], 0),
        rig.f32s(&[1.0; 4], 0),
        rig.f32s(&[1.0; 8], 0),
    );
    let mut params = dense_gemm_params([&a, &b, &c], 2, 2, 2);
    params[11] = i64p(3);
    let result = rig.launch("tw_gemm_f32", Dim3 { x: 1, y: 1, z: 2 }, BLOCK_256, &params);
    assert_fails(result, "sC = 3 makes C's batches (4 elements each) overlap");
}
