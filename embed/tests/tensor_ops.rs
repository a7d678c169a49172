//! The built-in tensor ops (`wasi_cuda.tensor_op`, docs/tensor-ops.md) end
//! to end: a real guest queues each op on random inputs in its memory or in
//! device buffers, waits, and the host compares the output with the float64
//! oracles of `tensorwasm_kernels::oracle`, with a tolerance per dtype, on
//! odd shapes (1, 17, 1000, 4097, sizes that are no multiple of a tile,
//! leading dimensions past the row, operands one element off alignment).
//! The same suite runs on the CPU driver (CI) and on CUDA (ignored here;
//! `--include-ignored` on the device machine).

#[allow(dead_code)] // the shared test guest and inputs; the rest is for other suites
mod common;

use std::fmt::Write as _;

use common::{Rng, test_guest_wat};
use tensorwasm_core::{
    ManagedAllocator,
    abi::{
        Errno, Handle,
        tensor::{DType, OperandDescriptor, TensorHeader, TensorOpKind, encode_tensor_op},
    },
};
use tensorwasm_cpu::CpuDriver;
use tensorwasm_cuda::CudaDriver;
use tensorwasm_embed::{
    kernel::KernelTarget,
    runtime::{GuestRuntime, GuestState},
};
use tensorwasm_kernels::oracle;
use wasmtime::{Instance, Memory, Store, Val};

/// Where the descriptor goes in guest memory.
const DESC: u32 = 0x100;
/// Where `tensor_op` writes the launch handle.
const OUT: u32 = 0x40;
/// The first operand byte.
const HEAP: u32 = 0x1_0000;

/// f32 GEMMs and every f32 op: relative to the operands' magnitudes.
const TOL_F32: f64 = 1e-5;
/// TF32 GEMMs.
const TOL_TF32: f64 = 1e-3;
/// BF16 and F16 GEMMs.
const TOL_HALF: f64 = 1e-2;

/// A guest (the common test guest, which wraps every import) on one driver.
struct Harness<D>
where
    D: KernelTarget + ManagedAllocator + Clone + 'static,
{
    rt: GuestRuntime<D>,
    store: Store<GuestState<D>>,
    instance: Instance,
    memory: Memory,
    /// The next free guest byte.
    next: u32,
    rng: Rng,
}

impl<D> Harness<D>
where
    D: KernelTarget + ManagedAllocator + Clone + 'static,
    <D as ManagedAllocator>::Region: Sync,
{
    fn new(driver: D, memory_limit: usize, seed_name: &str) -> Self {
        let rt = GuestRuntime::new(driver, memory_limit).expect("runtime");
        let module = rt.compile(test_guest_wat()).expect("compile");
        let mut store = rt.store().expect("store");
        let instance =
            futures::executor::block_on(rt.instantiate(&mut store, &module)).expect("instantiate");
        let memory = instance.get_memory(&mut store, "memory").expect("memory");
        Harness {
            rt,
            store,
            instance,
            memory,
            next: HEAP,
            rng: Rng::new(seed_name),
        }
    }

    fn call(&mut self, name: &str, args: &[Val]) -> i32 {
        let func = self
            .instance
            .get_func(&mut self.store, name)
            .unwrap_or_else(|| panic!("no export {name}"));
        let mut results = [Val::I32(0)];
        futures::executor::block_on(func.call_async(&mut self.store, args, &mut results))
            .unwrap_or_else(|e| panic!("{name} trapped: {e:#}"));
        results[0].unwrap_i32()
    }

    fn last_error(&self) -> String {
        self.store.data().cuda.last_error().to_string()
    }

    /// Starts a fresh arena (operands of earlier cases are dead).
    fn reset(&mut self) {
        self.next = HEAP;
    }

    /// `bytes` bytes of guest memory, 256-aligned, growing the memory as
    /// needed.
    fn alloc(&mut self, bytes: u64) -> u32 {
        let at = self.next;
        let end = u64::from(at) + bytes;
        let size = self.memory.data_size(&self.store) as u64;
        if end > size {
            let pages = (end - size).div_ceil(65536);
            self.memory
                .grow(&mut self.store, pages)
                .expect("grow guest memory");
        }
        self.next = (end.div_ceil(256) * 256) as u32;
        at
    }

    fn write(&mut self, at: u32, bytes: &[u8]) {
        self.memory.data_mut(&mut self.store)[at as usize..at as usize + bytes.len()]
            .copy_from_slice(bytes);
    }

    fn read(&self, at: u32, len: usize) -> Vec<u8> {
        self.memory.data(&self.store)[at as usize..at as usize + len].to_vec()
    }

    /// `values` as f32 in fresh guest memory, `skew` elements past a
    /// 256-byte boundary.
    fn f32s(&mut self, values: &[f32], skew: u32) -> u32 {
        let at = self.alloc(values.len() as u64 * 4 + u64::from(skew) * 4) + skew * 4;
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.write(at, &bytes);
        at
    }

    fn read_f32s(&self, at: u32, n: usize) -> Vec<f32> {
        self.read(at, n * 4)
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }

    /// Runs the op and waits: the errno of `tensor_op`, else of `wait`.
    fn run(&mut self, header: &TensorHeader, operands: &[OperandDescriptor]) -> i32 {
        let desc = encode_tensor_op(header, operands);
        self.write(DESC, &desc);
        let e = self.call(
            "tensor_op",
            &[
                Val::I32(DESC as i32),
                Val::I32(desc.len() as i32),
                Val::I32(OUT as i32),
            ],
        );
        if e != 0 {
            return e;
        }
        let handle = u64::from_le_bytes(self.read(OUT, 8).try_into().unwrap());
        self.call("wait", &[Val::I64(handle as i64)])
    }

    fn run_ok(&mut self, what: &str, header: &TensorHeader, operands: &[OperandDescriptor]) {
        let e = self.run(header, operands);
        assert_eq!(e, 0, "{what}: errno {e}: {}", self.last_error());
    }

    /// A device buffer holding `bytes`.
    fn buffer(&mut self, bytes: &[u8]) -> Handle {
        let e = self.call(
            "buffer_alloc",
            &[Val::I64(bytes.len() as i64), Val::I32(OUT as i32)],
        );
        assert_eq!(e, 0, "buffer_alloc: {}", self.last_error());
        let handle = u64::from_le_bytes(self.read(OUT, 8).try_into().unwrap());
        let src = self.alloc(bytes.len() as u64);
        self.write(src, bytes);
        let e = self.call(
            "copy_to_buffer",
            &[
                Val::I64(handle as i64),
                Val::I64(0),
                Val::I32(src as i32),
                Val::I32(bytes.len() as i32),
            ],
        );
        assert_eq!(e, 0, "copy_to_buffer: {}", self.last_error());
        Handle(handle)
    }

    fn read_buffer(&mut self, buffer: Handle, n: usize) -> Vec<f32> {
        let dst = self.alloc(n as u64 * 4);
        let e = self.call(
            "copy_from_buffer",
            &[
                Val::I32(dst as i32),
                Val::I64(buffer.0 as i64),
                Val::I64(0),
                Val::I32((n * 4) as i32),
            ],
        );
        assert_eq!(e, 0, "copy_from_buffer: {}", self.last_error());
        self.read_f32s(dst, n)
    }
}

/// Random values in [-1, 1), never all zero.
fn randoms(rng: &mut Rng, n: usize) -> Vec<f32> {
    rng.floats(n)
}

fn to_f64(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| f64::from(x)).collect()
}

/// A GEMM input in `dtype`: its bits (for the guest) and its exact values
/// (for the oracle).
fn gemm_input(rng: &mut Rng, n: usize, dtype: DType) -> (Vec<u8>, Vec<f64>) {
    let v = randoms(rng, n);
    match dtype {
        DType::F32 => (v.iter().flat_map(|x| x.to_le_bytes()).collect(), to_f64(&v)),
        DType::Bf16 => {
            let bits: Vec<u16> = v.iter().map(|&x| oracle::f32_to_bf16(x)).collect();
            let exact = bits
                .iter()
                .map(|&b| f64::from(oracle::bf16_to_f32(b)))
                .collect();
            (bits.iter().flat_map(|b| b.to_le_bytes()).collect(), exact)
        }
        DType::F16 => {
            let bits: Vec<u16> = v.iter().map(|&x| oracle::f32_to_f16(x)).collect();
            let exact = bits
                .iter()
                .map(|&b| f64::from(oracle::f16_to_f32(b)))
                .collect();
            (bits.iter().flat_map(|b| b.to_le_bytes()).collect(), exact)
        }
    }
}

/// One GEMM case: sizes, batch, extra row padding of A, skew of A in
/// elements, A broadcast over the batch, operands in buffers, beta.
#[derive(Clone, Copy, Debug)]
struct GemmCase {
    m: u64,
    n: u64,
    k: u64,
    batch: u64,
    pad_a: u64,
    skew: u32,
    broadcast_a: bool,
    in_buffers: bool,
    beta: f32,
}

impl GemmCase {
    const fn new(m: u64, n: u64, k: u64) -> GemmCase {
        GemmCase {
            m,
            n,
            k,
            batch: 1,
            pad_a: 0,
            skew: 0,
            broadcast_a: false,
            in_buffers: false,
            beta: 0.0,
        }
    }
}

fn gemm_cases() -> Vec<GemmCase> {
    vec![
        GemmCase::new(1, 1, 1),
        GemmCase::new(17, 1000, 33),
        GemmCase::new(4097, 17, 1),
        GemmCase::new(130, 257, 1000),
        GemmCase::new(64, 128, 4097),
        GemmCase {
            pad_a: 1,
            skew: 1,
            beta: 0.5,
            ..GemmCase::new(129, 131, 67)
        },
        GemmCase {
            batch: 3,
            broadcast_a: true,
            ..GemmCase::new(33, 65, 17)
        },
        GemmCase {
            in_buffers: true,
            batch: 2,
            ..GemmCase::new(100, 40, 50)
        },
        // Operands a tensor map suits (16-byte rows): Hopper's TMA GEMMs,
        // one case per tile (table::gemm picks it by the number of tiles):
        // 128 x 64 (TF32 64 x 128) with edges in M, N and K ...
        GemmCase::new(300, 520, 136),
        GemmCase {
            pad_a: 8,
            beta: 0.5,
            ..GemmCase::new(129, 264, 1032)
        },
        GemmCase {
            batch: 3,
            broadcast_a: true,
            beta: 0.5,
            ..GemmCase::new(200, 136, 72)
        },
        GemmCase {
            in_buffers: true,
            batch: 2,
            ..GemmCase::new(256, 512, 64)
        },
        // ... 128 x 128 (TF32 128 x 128) and 128 x 256 (TF32 256 x 128).
        GemmCase::new(8192, 256, 24),
        GemmCase::new(2048, 2048, 40),
    ]
}

fn gemm_case<D>(h: &mut Harness<D>, dtype: DType, tf32: bool, case: GemmCase) -> Result<(), String>
where
    D: KernelTarget + ManagedAllocator + Clone + 'static,
    <D as ManagedAllocator>::Region: Sync,
{
    h.reset();
    let GemmCase {
        m,
        n,
        k,
        batch,
        pad_a,
        skew,
        broadcast_a,
        in_buffers,
        beta,
    } = case;
    let lda = k + pad_a;
    let a_mats = if broadcast_a { 1 } else { batch };
    let a_len = (a_mats * m * lda) as usize;
    let (a_bits, a_val) = gemm_input(&mut h.rng, a_len, dtype);
    let (b_bits, b_val) = gemm_input(&mut h.rng, (batch * k * n) as usize, dtype);
    let c0 = randoms(&mut h.rng, (batch * m * n) as usize);
    let esize = dtype.size() as u32;
    let rank3 = batch > 1 || broadcast_a;
    let shape = |r: u64, c: u64| -> Vec<u64> { if rank3 { vec![batch, r, c] } else { vec![r, c] } };
    let a_strides: Vec<i64> = if rank3 {
        vec![
            if broadcast_a { 0 } else { (m * lda) as i64 },
            lda as i64,
            1,
        ]
    } else {
        vec![lda as i64, 1]
    };
    let (a_desc, b_desc, c_desc, c_at);
    if in_buffers {
        let a = h.buffer(&a_bits);
        let b = h.buffer(&b_bits);
        let c_bytes: Vec<u8> = c0.iter().flat_map(|v| v.to_le_bytes()).collect();
        let c = h.buffer(&c_bytes);
        a_desc = OperandDescriptor::buffer(a, 0, dtype, &shape(m, k)).with_strides(&a_strides);
        b_desc = OperandDescriptor::buffer(b, 0, dtype, &shape(k, n));
        c_desc = OperandDescriptor::buffer(c, 0, DType::F32, &shape(m, n));
        c_at = Err(c);
    } else {
        let a_at = h.alloc(a_bits.len() as u64 + u64::from(skew * esize)) + skew * esize;
        h.write(a_at, &a_bits);
        let b_at = h.alloc(b_bits.len() as u64);
        h.write(b_at, &b_bits);
        let c = h.f32s(&c0, 0);
        a_desc = OperandDescriptor::guest(a_at, dtype, &shape(m, k)).with_strides(&a_strides);
        b_desc = OperandDescriptor::guest(b_at, dtype, &shape(k, n));
        c_desc = OperandDescriptor::guest(c, DType::F32, &shape(m, n));
        c_at = Ok(c);
    }
    let mut header = TensorHeader::new(TensorOpKind::Gemm);
    header.alpha = 1.25;
    header.beta = beta;
    header.precision = u32::from(tf32);
    let what = format!("gemm {dtype}{} {case:?}", if tf32 { " (tf32)" } else { "" });
    let e = h.run(&header, &[a_desc, b_desc, c_desc]);
    if e != 0 {
        return Err(format!("{what}: errno {e}: {}", h.last_error()));
    }
    let got = match c_at {
        Ok(at) => h.read_f32s(at, c0.len()),
        Err(buffer) => h.read_buffer(buffer, c0.len()),
    };
    let tol = match (dtype, tf32) {
        (DType::F32, false) => TOL_F32,
        (DType::F32, true) => TOL_TF32,
        _ => TOL_HALF,
    };
    let c0_64 = to_f64(&c0);
    let (mm, nn, kk) = (m as usize, n as usize, k as usize);
    for bi in 0..batch as usize {
        let a_off = if broadcast_a {
            0
        } else {
            bi * mm * lda as usize
        };
        let a = &a_val[a_off..a_off + mm * lda as usize];
        let b = &b_val[bi * kk * nn..(bi + 1) * kk * nn];
        let c_in = &c0_64[bi * mm * nn..(bi + 1) * mm * nn];
        let want = oracle::gemm(
            a,
            b,
            c_in,
            mm,
            nn,
            kk,
            lda as usize,
            nn,
            nn,
            1.25,
            f64::from(beta),
        );
        let scale = oracle::gemm_abs(
            a,
            b,
            c_in,
            mm,
            nn,
            kk,
            lda as usize,
            nn,
            nn,
            1.25,
            f64::from(beta),
        );
        oracle::check_close_scaled(&got[bi * mm * nn..(bi + 1) * mm * nn], &want, &scale, tol)
            .map_err(|e| format!("{what}, batch {bi}: {e}"))?;
    }
    Ok(())
}

fn run_gemms<D>(h: &mut Harness<D>, failures: &mut String)
where
    D: KernelTarget + ManagedAllocator + Clone + 'static,
    <D as ManagedAllocator>::Region: Sync,
{
    for (dtype, tf32) in [
        (DType::F32, false),
        (DType::F32, true),
        (DType::Bf16, false),
        (DType::F16, false),
    ] {
        for case in gemm_cases() {
            if let Err(e) = gemm_case(h, dtype, tf32, case) {
                let _ = writeln!(failures, "{e}");
            }
        }
    }
}

fn run_reductions<D>(h: &mut Harness<D>, failures: &mut String)
where
    D: KernelTarget + ManagedAllocator + Clone + 'static,
    <D as ManagedAllocator>::Region: Sync,
{
    // (shape, x's skew in elements). Over axis 0 of [1100, 40] the GPU's
    // column strips make two full trips of 16 x 32 rows and a tail; [2, 333,
    // 65] has a strip of one column.
    let shapes: [(&[u64], u32); 7] = [
        (&[5, 17, 33], 0),
        (&[4097], 0),
        (&[3, 1000], 0),
        (&[1, 1, 1], 0),
        (&[1100, 40], 1),
        (&[2, 333, 65], 0),
        (&[600, 64], 0),
    ];
    for (shape, skew) in shapes {
        for (kind, op) in [
            (TensorOpKind::ReduceSum, oracle::ReduceOp::Sum),
            (TensorOpKind::ReduceMax, oracle::ReduceOp::Max),
            (TensorOpKind::ReduceMean, oracle::ReduceOp::Mean),
        ] {
            for axis in 0..shape.len() {
                h.reset();
                let numel: u64 = shape.iter().product();
                let x = randoms(&mut h.rng, numel as usize);
                let x_at = h.f32s(&x, skew);
                let mut y_shape: Vec<u64> = shape.to_vec();
                y_shape.remove(axis);
                if y_shape.is_empty() {
                    y_shape.push(1);
                }
                let outer: u64 = shape[..axis].iter().product();
                let inner: u64 = shape[axis + 1..].iter().product();
                let y_n = (outer * inner) as usize;
                let y_at = h.f32s(&vec![f32::NAN; y_n], 0);
                let mut header = TensorHeader::new(kind);
                header.axis = axis as i32;
                let what = format!("{kind} {shape:?} axis {axis}");
                let e = h.run(
                    &header,
                    &[
                        OperandDescriptor::guest(x_at, DType::F32, shape),
                        OperandDescriptor::guest(y_at, DType::F32, &y_shape),
                    ],
                );
                if e != 0 {
                    let _ = writeln!(failures, "{what}: errno {e}: {}", h.last_error());
                    continue;
                }
                let got = h.read_f32s(y_at, y_n);
                let want = oracle::reduce(
                    &to_f64(&x),
                    outer as usize,
                    shape[axis] as usize,
                    inner as usize,
                    op,
                );
                // A sum of n values carries about sqrt(n) roundings of the
                // largest partial sum: scale by the sum of magnitudes.
                let abs = oracle::reduce(
                    &x.iter().map(|v| f64::from(v.abs())).collect::<Vec<_>>(),
                    outer as usize,
                    shape[axis] as usize,
                    inner as usize,
                    op,
                );
                if let Err(e) = oracle::check_close_scaled(&got, &want, &abs, TOL_F32) {
                    let _ = writeln!(failures, "{what}: {e}");
                }
            }
        }
    }
}

fn run_rowwise<D>(h: &mut Harness<D>, failures: &mut String)
where
    D: KernelTarget + ManagedAllocator + Clone + 'static,
    <D as ManagedAllocator>::Region: Sync,
{
    // (rows, cols, x's skew in elements): the table's three row lengths
    // (a warp per row up to 1024 columns, 256 threads up to 8192, 512
    // beyond), each with 16-byte and 4-byte accesses, rows held in registers
    // or (past 16384 columns) not.
    for (rows, cols, skew) in [
        (3u64, 1u64, 0),
        (5, 17, 0),
        (7, 1000, 0),
        (13, 1024, 0),
        (9, 1024, 1),
        (11, 1023, 0),
        (3, 4097, 0),
        (1, 4097, 0),
        (2, 4096, 0),
        (3, 8193, 0),
        (2, 16384, 0),
        (2, 12000, 1),
        (1, 16388, 0),
    ] {
        h.reset();
        let n = (rows * cols) as usize;
        let x: Vec<f32> = randoms(&mut h.rng, n).iter().map(|v| v * 8.0).collect();
        let x_at = h.f32s(&x, skew);
        let y_at = h.f32s(&vec![f32::NAN; n], 0);
        let shape = [rows, cols];
        let mut header = TensorHeader::new(TensorOpKind::Softmax);
        header.axis = -1;
        let e = h.run(
            &header,
            &[
                OperandDescriptor::guest(x_at, DType::F32, &shape),
                OperandDescriptor::guest(y_at, DType::F32, &shape),
            ],
        );
        let what = format!("softmax [{rows}, {cols}] skew {skew}");
        if e != 0 {
            let _ = writeln!(failures, "{what}: errno {e}: {}", h.last_error());
        } else {
            let want = oracle::softmax(&to_f64(&x), rows as usize, cols as usize);
            if let Err(e) = oracle::check_close(&h.read_f32s(y_at, n), &want, TOL_F32, 1e-7) {
                let _ = writeln!(failures, "{what}: {e}");
            }
        }

        let gamma = randoms(&mut h.rng, cols as usize);
        let beta = randoms(&mut h.rng, cols as usize);
        let g_at = h.f32s(&gamma, 0);
        let b_at = h.f32s(&beta, 0);
        let y2_at = h.f32s(&vec![f32::NAN; n], 0);
        let mut header = TensorHeader::new(TensorOpKind::LayerNorm);
        header.eps = 1e-5;
        let e = h.run(
            &header,
            &[
                OperandDescriptor::guest(x_at, DType::F32, &shape),
                OperandDescriptor::guest(g_at, DType::F32, &[cols]),
                OperandDescriptor::guest(b_at, DType::F32, &[cols]),
                OperandDescriptor::guest(y2_at, DType::F32, &shape),
            ],
        );
        let what = format!("layernorm [{rows}, {cols}] skew {skew}");
        if e != 0 {
            let _ = writeln!(failures, "{what}: errno {e}: {}", h.last_error());
        } else {
            let want = oracle::layernorm(
                &to_f64(&x),
                &to_f64(&gamma),
                &to_f64(&beta),
                rows as usize,
                cols as usize,
                1e-5,
            );
            if let Err(e) = oracle::check_close(&h.read_f32s(y2_at, n), &want, TOL_F32, 1e-5) {
                let _ = writeln!(failures, "{what}: {e}");
            }
        }
    }
}

fn run_elementwise<D>(h: &mut Harness<D>, failures: &mut String)
where
    D: KernelTarget + ManagedAllocator + Clone + 'static,
    <D as ManagedAllocator>::Region: Sync,
{
    let shapes: [(&[u64], &[u64]); 4] = [
        (&[1], &[1]),
        (&[17], &[17]),
        (&[1000, 13], &[13]),
        (&[3, 4097], &[3, 4097]),
    ];
    for (a_shape, b_shape) in shapes {
        h.reset();
        let n: u64 = a_shape.iter().product();
        let period: u64 = b_shape.iter().product();
        let a = randoms(&mut h.rng, n as usize);
        let b = randoms(&mut h.rng, period as usize);
        let a_at = h.f32s(&a, 1);
        let b_at = h.f32s(&b, 3);
        for kind in [
            TensorOpKind::Add,
            TensorOpKind::Mul,
            TensorOpKind::Relu,
            TensorOpKind::Gelu,
        ] {
            let y_at = h.f32s(&vec![f32::NAN; n as usize], 0);
            let a_desc = OperandDescriptor::guest(a_at, DType::F32, a_shape);
            let y_desc = OperandDescriptor::guest(y_at, DType::F32, a_shape);
            let unary = matches!(kind, TensorOpKind::Relu | TensorOpKind::Gelu);
            let e = if unary {
                h.run(&TensorHeader::new(kind), &[a_desc, y_desc])
            } else {
                let b_desc = OperandDescriptor::guest(b_at, DType::F32, b_shape);
                h.run(&TensorHeader::new(kind), &[a_desc, b_desc, y_desc])
            };
            let what = format!("{kind} {a_shape:?} with {b_shape:?}");
            if e != 0 {
                let _ = writeln!(failures, "{what}: errno {e}: {}", h.last_error());
                continue;
            }
            let (a64, b64) = (to_f64(&a), to_f64(&b));
            let want = match kind {
                TensorOpKind::Add => oracle::add(&a64, &b64, period as usize),
                TensorOpKind::Mul => oracle::mul(&a64, &b64, period as usize),
                TensorOpKind::Relu => oracle::relu(&a64),
                _ => oracle::gelu(&a64),
            };
            if let Err(e) =
                oracle::check_close(&h.read_f32s(y_at, n as usize), &want, TOL_F32, 1e-7)
            {
                let _ = writeln!(failures, "{what}: {e}");
            }
        }
    }
    for shape in [[1u64, 1, 1], [3, 17, 1000], [1, 4097, 17], [2, 33, 31]] {
        h.reset();
        let n: u64 = shape.iter().product();
        let x = randoms(&mut h.rng, n as usize);
        let x_at = h.f32s(&x, 0);
        let y_at = h.f32s(&vec![f32::NAN; n as usize], 0);
        let e = h.run(
            &TensorHeader::new(TensorOpKind::Transpose),
            &[
                OperandDescriptor::guest(x_at, DType::F32, &shape),
                OperandDescriptor::guest(y_at, DType::F32, &[shape[0], shape[2], shape[1]]),
            ],
        );
        let what = format!("transpose {shape:?}");
        if e != 0 {
            let _ = writeln!(failures, "{what}: errno {e}: {}", h.last_error());
            continue;
        }
        let got = h.read_f32s(y_at, n as usize);
        let (r, c) = (shape[1] as usize, shape[2] as usize);
        let x64 = to_f64(&x);
        let mut want = Vec::with_capacity(n as usize);
        for bi in 0..shape[0] as usize {
            want.extend(oracle::transpose(&x64[bi * r * c..(bi + 1) * r * c], r, c));
        }
        if let Err(e) = oracle::check_close(&got, &want, 0.0, 0.0) {
            let _ = writeln!(failures, "{what}: {e}");
        }
    }
}

/// Bad descriptors fail with their errno and write nothing.
fn run_refusals<D>(h: &mut Harness<D>)
where
    D: KernelTarget + ManagedAllocator + Clone + 'static,
    <D as ManagedAllocator>::Region: Sync,
{
    h.reset();
    let x = randoms(&mut h.rng, 64);
    let x_at = h.f32s(&x, 0);
    let sentinel = vec![7.5f32; 64];
    let y_at = h.f32s(&sentinel, 0);
    let relu = TensorHeader::new(TensorOpKind::Relu);
    let x_desc = OperandDescriptor::guest(x_at, DType::F32, &[64]);
    let y_desc = OperandDescriptor::guest(y_at, DType::F32, &[64]);
    let size = h.memory.data_size(&h.store) as u32;
    let cases: Vec<(&str, TensorHeader, Vec<OperandDescriptor>, Errno)> = vec![
        (
            "past the end of memory",
            relu,
            vec![
                OperandDescriptor::guest(size - 128, DType::F32, &[64]),
                y_desc,
            ],
            Errno::EFAULT,
        ),
        (
            "forged buffer",
            relu,
            vec![
                OperandDescriptor::buffer(Handle(0xdead_beef), 0, DType::F32, &[64]),
                y_desc,
            ],
            Errno::EBADH,
        ),
        (
            "misaligned",
            relu,
            vec![
                OperandDescriptor::guest(x_at + 2, DType::F32, &[64]),
                y_desc,
            ],
            Errno::EALIGN,
        ),
        (
            "dtype mismatch",
            relu,
            vec![OperandDescriptor::guest(x_at, DType::Bf16, &[64]), y_desc],
            Errno::EINVAL,
        ),
        (
            "shape overflow",
            relu,
            vec![
                OperandDescriptor::guest(x_at, DType::F32, &[1 << 32, 1 << 32]),
                y_desc,
            ],
            Errno::EOVERFLOW,
        ),
        (
            "overlapping output",
            relu,
            vec![
                x_desc,
                OperandDescriptor::guest(x_at + 4, DType::F32, &[64]),
            ],
            Errno::EINVAL,
        ),
    ];
    for (what, header, ops, errno) in cases {
        let e = h.run(&header, &ops);
        assert_eq!(e, errno.code(), "{what}: {}", h.last_error());
        assert_eq!(
            h.read_f32s(y_at, 64),
            sentinel,
            "{what}: the output was written"
        );
    }
    // And the guest carries on.
    h.run_ok("relu after refusals", &relu, &[x_desc, y_desc]);
    let want = oracle::relu(&to_f64(&x));
    oracle::check_close(&h.read_f32s(y_at, 64), &want, 0.0, 0.0).unwrap();
}

fn suite<D>(driver: D, memory_limit: usize, name: &str)
where
    D: KernelTarget + ManagedAllocator + Clone + 'static,
    <D as ManagedAllocator>::Region: Sync,
{
    let mut h = Harness::new(driver, memory_limit, name);
    let mut failures = String::new();
    run_gemms(&mut h, &mut failures);
    run_reductions(&mut h, &mut failures);
    run_rowwise(&mut h, &mut failures);
    run_elementwise(&mut h, &mut failures);
    assert!(failures.is_empty(), "{name}:\n{failures}");
    run_refusals(&mut h);
    // Each kernel file was loaded once for the whole suite.
    assert_eq!(h.rt.builtin_cache().loaded_files(), 3);
}

#[test]
fn every_op_matches_the_float64_oracle_on_the_cpu_driver() {
    let driver = CpuDriver::with_capacity(1 << 30).expect("CPU driver");
    suite(driver, 256 << 20, "tensor ops (CPU driver)");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn every_op_matches_the_float64_oracle_on_the_gpu() {
    let driver = CudaDriver::new(0).expect("a CUDA device");
    suite(driver, 1 << 30, "tensor ops (CUDA)");
}

#[test]
fn a_guest_with_host_memory_is_refused_before_any_launch() {
    let driver = CpuDriver::with_capacity(64 << 20).expect("CPU driver");
    let rt = GuestRuntime::with_host_memory(driver).expect("runtime");
    let module = rt.compile(test_guest_wat()).expect("compile");
    let mut store = rt.store().expect("store");
    let instance =
        futures::executor::block_on(rt.instantiate(&mut store, &module)).expect("instantiate");
    let memory = instance.get_memory(&mut store, "memory").unwrap();
    let desc = encode_tensor_op(
        &TensorHeader::new(TensorOpKind::Relu),
        &[
            OperandDescriptor::guest(0x1000, DType::F32, &[16]),
            OperandDescriptor::guest(0x2000, DType::F32, &[16]),
        ],
    );
    memory.data_mut(&mut store)[DESC as usize..DESC as usize + desc.len()].copy_from_slice(&desc);
    let f = instance.get_func(&mut store, "tensor_op").unwrap();
    let mut r = [Val::I32(0)];
    futures::executor::block_on(f.call_async(
        &mut store,
        &[
            Val::I32(DESC as i32),
            Val::I32(desc.len() as i32),
            Val::I32(OUT as i32),
        ],
        &mut r,
    ))
    .unwrap();
    assert_eq!(r[0].unwrap_i32(), Errno::ENOTADDR.code());
    assert_eq!(store.data().cuda.live_handles()[3], 0, "no launch handle");
}
