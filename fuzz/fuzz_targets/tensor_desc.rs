//! Untrusted tensor-op descriptors: `decode_tensor_op` never panics, and for
//! every op it accepts, each range a kernel of docs/tensor-ops.md touches —
//! recomputed here from the decoded sizes, with u128 arithmetic — lies inside
//! the guest's memory or the one buffer, at an address aligned to its
//! element; the output overlaps no input; and `plan` either refuses the op
//! or gives a grid that covers the output within the device's limits.
//!
//! Input: a 2-byte memory size (up to 64 KiB), 1 flag byte (bit 0: the
//! memory is device-addressable; bit 1: raw bytes instead of a built
//! descriptor), then either the raw descriptor bytes or the fields a
//! descriptor is built from, biased towards valid ones (op, precision,
//! alpha/beta/eps/axis, then per operand: location, dtype, address, rank,
//! extents and strides, each mostly small and mostly contiguous).

#![no_main]

use libfuzzer_sys::fuzz_target;
use tensorwasm_core::DevicePtr;
use tensorwasm_core::abi::tensor::{
    GemmPrecision, OperandDescriptor, TensorHeader, TensorOp, TensorOpKind,
    decode_tensor_op, encode_tensor_op,
};
use tensorwasm_core::abi::{AbiError, GuestMemoryRef, Handle};

const GUEST_BASE: u64 = 0x7000_0000_0000;
const BUFFER: u64 = 7;
const BUFFER_BASE: u64 = 0x9000_0000_0000;
const BUFFER_LEN: u64 = 1 << 16;
/// Where the descriptor sits in guest memory (the memory is at least this
/// plus the descriptor).
const DESC_AT: u32 = 0;

struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }

    fn u16(&mut self) -> u16 {
        u16::from(self.byte()) | u16::from(self.byte()) << 8
    }

    fn u64(&mut self) -> u64 {
        (0..8).fold(0, |v, i| v | u64::from(self.byte()) << (8 * i))
    }
}

fn operand(input: &mut Input<'_>, mem_len: u64) -> OperandDescriptor {
    let sel = input.byte();
    let location = if sel & 0x80 != 0 { 1 } else { 0 };
    let dtype = match sel & 3 {
        0 => 1,
        1 => 2,
        2 => 3,
        _ => u32::from(input.byte()),
    };
    let rank = if sel & 0x40 != 0 {
        u32::from(input.byte())
    } else {
        1 + u32::from((sel >> 2) & 3)
    };
    let mut shape = [0u64; 4];
    let mut strides = [0i64; 4];
    let wild = sel & 0x20 != 0;
    for i in 0..(rank.min(4) as usize) {
        shape[i] = if wild { input.u64() } else { 1 + u64::from(input.byte() % 40) };
    }
    // Contiguous strides unless the input says otherwise.
    let mut stride = 1i64;
    for i in (0..(rank.min(4) as usize)).rev() {
        strides[i] = stride;
        stride = stride.wrapping_mul(shape[i] as i64);
    }
    if sel & 0x10 != 0 {
        let i = usize::from(input.byte() % 4);
        strides[i] = if wild {
            input.u64() as i64
        } else {
            i64::from(input.byte()) - 8
        };
    }
    let address = if location == 1 {
        if input.byte() < 230 { BUFFER } else { u64::from(input.byte()) }
    } else if wild {
        input.u64()
    } else {
        u64::from(input.u16()) % mem_len.max(1)
    };
    let offset = if location == 1 { u64::from(input.u16()) } else { 0 };
    OperandDescriptor {
        location,
        dtype,
        address,
        offset,
        rank,
        reserved: 0,
        shape,
        strides,
    }
}

/// `[start, end)` of the elements `0..=last_index` of `esize` bytes from `ptr`.
fn range(ptr: DevicePtr, last_index: u128, esize: u128) -> (u128, u128) {
    let start = u128::from(ptr.0);
    (start, start + (last_index + 1) * esize)
}

fn inside(r: (u128, u128), guest: &GuestMemoryRef) -> bool {
    let g = (u128::from(guest.base.0), u128::from(guest.base.0) + guest.len as u128);
    let b = (u128::from(BUFFER_BASE), u128::from(BUFFER_BASE + BUFFER_LEN));
    (r.0 >= g.0 && r.1 <= g.1) || (r.0 >= b.0 && r.1 <= b.1)
}

fn overlap(a: (u128, u128), b: (u128, u128)) -> bool {
    a.0 < b.1 && b.0 < a.1
}

/// Every range the op's kernel touches, the output last, with its element size.
fn touched(op: &TensorOp) -> Vec<((u128, u128), u128, DevicePtr)> {
    let u = u128::from;
    let f32s = |p: DevicePtr, n: u64| (range(p, u(n) - 1, 4), 4, p);
    match *op {
        TensorOp::Gemm(g) => {
            let e = match g.precision {
                GemmPrecision::F32 | GemmPrecision::Tf32 => 4,
                GemmPrecision::Bf16 | GemmPrecision::F16 => 2,
            };
            let b1 = u(g.batch) - 1;
            let a = b1 * u(g.stride_a) + (u(g.m) - 1) * u(g.lda) + u(g.k) - 1;
            let b = b1 * u(g.stride_b) + (u(g.k) - 1) * u(g.ldb) + u(g.n) - 1;
            let c = b1 * u(g.stride_c) + (u(g.m) - 1) * u(g.ldc) + u(g.n) - 1;
            vec![
                (range(g.a, a, e), e, g.a),
                (range(g.b, b, e), e, g.b),
                (range(g.c, c, 4), 4, g.c),
            ]
        }
        TensorOp::Reduce {
            x,
            y,
            outer,
            n,
            inner,
            ..
        } => vec![f32s(x, outer * n * inner), f32s(y, outer * inner)],
        TensorOp::Softmax { x, y, rows, cols } => {
            vec![f32s(x, rows * cols), f32s(y, rows * cols)]
        }
        TensorOp::LayerNorm {
            x,
            gamma,
            beta,
            y,
            rows,
            cols,
            ..
        } => vec![
            f32s(x, rows * cols),
            f32s(gamma, cols),
            f32s(beta, cols),
            f32s(y, rows * cols),
        ],
        TensorOp::Binary {
            a, b, y, n, b_period, ..
        } => {
            assert_eq!(n % b_period, 0, "b_period does not divide n");
            vec![f32s(a, n), f32s(b, b_period), f32s(y, n)]
        }
        TensorOp::Unary { x, y, n, .. } => vec![f32s(x, n), f32s(y, n)],
        TensorOp::Transpose {
            x,
            y,
            batch,
            rows,
            cols,
        } => vec![f32s(x, batch * rows * cols), f32s(y, batch * rows * cols)],
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input(data);
    let mem_len = 4096 + u64::from(input.u16());
    let flags = input.byte();
    let desc = if flags & 2 != 0 {
        input.0.to_vec()
    } else {
        let op = 1 + u32::from(input.byte() % 11);
        let kind = TensorOpKind::from_u32(op).expect("1..=11 are ops");
        let mut header = TensorHeader::new(kind);
        let tweak = input.byte();
        if tweak & 1 != 0 {
            header.precision = u32::from(input.byte() % 3);
        }
        if tweak & 2 != 0 {
            header.alpha = f32::from_bits(u32::from(input.u16()) << 16);
            header.beta = f32::from_bits(u32::from(input.u16()) << 16);
        }
        if tweak & 4 != 0 {
            header.eps = f32::from_bits(u32::from(input.u16()) << 16);
        }
        if tweak & 8 != 0 {
            header.axis = i32::from(input.byte() as i8 % 6);
        }
        if tweak & 16 != 0 {
            header.operand_count = u32::from(input.byte() % 6);
        }
        let operands: Vec<OperandDescriptor> = (0..header.operand_count.min(5))
            .map(|_| operand(&mut input, mem_len))
            .collect();
        encode_tensor_op(&header, &operands)
    };
    let mut memory = vec![0u8; (mem_len as usize).max(desc.len())];
    memory[..desc.len()].copy_from_slice(&desc);
    let guest = GuestMemoryRef {
        base: DevicePtr(GUEST_BASE),
        len: memory.len(),
        device_addressable: flags & 1 != 0,
    };
    let mut buffers = |h: Handle| -> Result<(DevicePtr, u64), AbiError> {
        if h.0 == BUFFER {
            Ok((DevicePtr(BUFFER_BASE), BUFFER_LEN))
        } else {
            Err(AbiError::bad_handle("no such buffer"))
        }
    };
    let Ok(op) = decode_tensor_op(&memory, &guest, DESC_AT, desc.len() as u32, &mut buffers)
    else {
        return;
    };
    // TW_FUZZ_SHOW=1: name each accepted op (to see which ops the corpus
    // reaches: `cargo fuzz run tensor_desc corpus/tensor_desc -- -runs=0`).
    if std::env::var_os("TW_FUZZ_SHOW").is_some() {
        eprintln!("accepted {}", op.kind());
    }
    let ranges = touched(&op);
    for (r, esize, ptr) in &ranges {
        assert!(inside(*r, &guest), "{op:?}: {r:x?} outside the memory and the buffer");
        assert_eq!(u128::from(ptr.0) % esize, 0, "{op:?}: misaligned");
    }
    let (out, inputs) = ranges.split_last().expect("an output");
    for (r, _, _) in inputs {
        assert!(!overlap(out.0, *r), "{op:?}: the output overlaps an input");
    }
    if let TensorOp::Gemm(g) = op
        && g.batch > 1
    {
        assert!(
            u128::from(g.stride_c) >= (u128::from(g.m) - 1) * u128::from(g.ldc) + u128::from(g.n),
            "{op:?}: C's batches overlap"
        );
    }
    for sm in [None, Some(80), Some(90)] {
        let Ok(plan) = tensorwasm_kernels::table::plan(&op, sm) else {
            continue;
        };
        let blocks = u128::from(plan.grid.x) * u128::from(plan.grid.y) * u128::from(plan.grid.z);
        assert!(blocks >= 1 && plan.grid.y <= 65535 && plan.grid.z <= 65535);
        if let TensorOp::Gemm(g) = op {
            assert!(u64::from(plan.grid.x) * 128 >= g.n && u64::from(plan.grid.y) * 128 >= g.m);
            assert_eq!(u64::from(plan.grid.z), g.batch);
        }
    }
});
