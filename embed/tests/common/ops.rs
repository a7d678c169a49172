//! The operator catalog of `kernel_ops.rs`: every scalar Wasm operator
//! family a kernel can use, one [`Op`] per operator (and per immediate
//! offset, for loads and stores), the guest module each [`Family`] becomes,
//! and the inputs each operator is run on (edge values listed explicitly,
//! then random ones from a printed seed).
//!
//! Each operator is written once, as the body of an exported function
//! `ref_<op>` that wasmtime calls per input (the reference), and the
//! operator's kernel `k_<op>` calls that same function (the translator
//! inlines it): kernel and reference run the very same bytes of the module,
//! so a trap reports the same byte offset on both sides.

use std::fmt::Write as _;
use std::sync::OnceLock;

use wasmtime::Val;

/// A Wasm value type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ty {
    /// `i32`
    I32,
    /// `i64`
    I64,
    /// `f32`
    F32,
    /// `f64`
    F64,
}

use Ty::{F32, F64, I32, I64};

impl Ty {
    /// Its name in the text format.
    pub fn name(self) -> &'static str {
        match self {
            I32 => "i32",
            I64 => "i64",
            F32 => "f32",
            F64 => "f64",
        }
    }

    /// The mask of its bits in a `u64`.
    pub fn mask(self) -> u64 {
        match self {
            I32 | F32 => 0xffff_ffff,
            I64 | F64 => !0,
        }
    }

    /// A wasmtime value of this type from its bits.
    pub fn val(self, bits: u64) -> Val {
        match self {
            I32 => Val::I32(bits as u32 as i32),
            I64 => Val::I64(bits as i64),
            F32 => Val::F32(bits as u32),
            F64 => Val::F64(bits),
        }
    }

    /// Whether `bits` are a NaN of this type (never, for integers).
    pub fn is_nan(self, bits: u64) -> bool {
        match self {
            F32 => f32::from_bits(bits as u32).is_nan(),
            F64 => f64::from_bits(bits).is_nan(),
            I32 | I64 => false,
        }
    }

    /// Whether `bits` are a canonical NaN (either sign, only the quiet bit
    /// of the payload set).
    pub fn is_canonical_nan(self, bits: u64) -> bool {
        match self {
            F32 => bits & 0x7fff_ffff == 0x7fc0_0000,
            F64 => bits & 0x7fff_ffff_ffff_ffff == 0x7ff8_0000_0000_0000,
            I32 | I64 => false,
        }
    }

    /// Whether `bits` are an arithmetic NaN (a NaN with the quiet bit set).
    pub fn is_arithmetic_nan(self, bits: u64) -> bool {
        match self {
            F32 => self.is_nan(bits) && bits & 0x0040_0000 != 0,
            F64 => self.is_nan(bits) && bits & 0x0008_0000_0000_0000 != 0,
            I32 | I64 => false,
        }
    }
}

/// Whether a NaN result `bits` of type `ty` is one Wasm allows for an
/// arithmetic operator over `operands` (typed bits): a canonical NaN when
/// every NaN operand is canonical (or none is a NaN), else any arithmetic
/// NaN (Wasm's `nans` rule; its sign is free either way).
pub fn nan_allowed(ty: Ty, bits: u64, operands: &[(Ty, u64)]) -> bool {
    let all_canonical = operands
        .iter()
        .all(|&(t, b)| !t.is_nan(b) || t.is_canonical_nan(b));
    if all_canonical {
        ty.is_canonical_nan(bits)
    } else {
        ty.is_arithmetic_nan(bits)
    }
}

impl Ty {}

/// The bits of a wasmtime value (zero-extended to 64).
pub fn val_bits(v: &Val) -> u64 {
    match v {
        Val::I32(x) => u64::from(*x as u32),
        Val::I64(x) => *x as u64,
        Val::F32(x) => u64::from(*x),
        Val::F64(x) => *x,
        other => panic!("not a scalar: {other:?}"),
    }
}

/// How a result is compared with wasmtime's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compare {
    /// Bit for bit.
    Exact,
    /// Bit for bit, except that any NaN matches any NaN: Wasm leaves the
    /// payload of an arithmetic operator's NaN result nondeterministic.
    AnyNan,
}

/// Where an operator's inputs come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Inputs {
    /// Edge values of each operand type (every pair, for two operands),
    /// then random values.
    Values,
    /// Mostly small `i32`s below the bound (control flow indices and
    /// counts), with edge and random values mixed in.
    Small(u32),
    /// A load of `size` bytes with immediate `offset`: addresses in the
    /// load window at every alignment, at the memory's end, and past it.
    Load {
        /// Bytes read.
        size: u32,
        /// The immediate offset.
        offset: u32,
    },
    /// A store of `size` bytes with immediate `offset`: each thread its own
    /// 16-byte window of the store area at a random misalignment, one
    /// thread at the memory's last bytes, and addresses past the end.
    Store {
        /// Bytes written.
        size: u32,
        /// The immediate offset.
        offset: u32,
    },
}

/// One operator under test.
#[derive(Clone, Debug)]
pub struct Op {
    /// Its name, as in the text format (`i32.add`, `i64.load8_s.off5`,
    /// `br_table.values`): the PTX file and the failures name it.
    pub name: String,
    /// The reference function's parameters (the operands).
    pub params: Vec<Ty>,
    /// Its result (`None` for stores).
    pub result: Option<Ty>,
    /// Locals of the reference function, if its body needs any.
    pub locals: &'static str,
    /// The reference function's body (operands are `local.get 0`, ...).
    pub body: String,
    /// How results are compared.
    pub compare: Compare,
    /// Whether some input traps: the kernel then marks its state word
    /// before (1) and after (2) the operator.
    pub traps: bool,
    /// Where the inputs come from.
    pub inputs: Inputs,
}

impl Op {
    /// The name with every character a symbol cannot hold replaced by `_`.
    pub fn symbol(&self) -> String {
        self.name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect()
    }

    /// The export name of the kernel (its PTX entry's name).
    pub fn kernel_export(&self) -> String {
        format!("k_{}", self.symbol())
    }

    /// The export name of the reference function.
    pub fn ref_export(&self) -> String {
        format!("ref_{}", self.symbol())
    }
}

/// A group of operators that share one guest module and one test.
#[derive(Clone, Debug)]
pub struct Family {
    /// The family's name (the test's name).
    pub name: &'static str,
    /// Its operators, in module order.
    pub ops: Vec<Op>,
    /// Extra module fields (helper functions, globals) placed after the
    /// operators' functions.
    pub helpers: &'static str,
}

// ---------------------------------------------------------------------------
// The guest's memory layout (bytes)
// ---------------------------------------------------------------------------

/// Pages of the guest's memory (fixed: no `memory.grow`).
pub const PAGES: u32 = 16;
/// The guest memory's size in bytes.
pub const MEM_LEN: u32 = PAGES * 65536;
/// The most inputs one operator is run on (one thread each).
pub const MAX_INPUTS: usize = 4096;
/// Out-pointer of `kernel_get` (8-aligned).
pub const OUT_FUNCTION: u32 = 0x40;
/// Out-pointer of `launch` (8-aligned).
pub const OUT_LAUNCH: u32 = 0x48;
/// The launch's argument descriptors (8-aligned).
pub const ARGS: u32 = 0x100;
/// Operand arrays, one 8-byte slot per thread: operand 0, 1, 2.
pub const OPERANDS: [u32; 3] = [0x1_0000, 0x1_8000, 0x2_0000];
/// The result array, one 8-byte slot per thread.
pub const OUT: u32 = 0x2_8000;
/// The state array of trapping operators, one `u32` per thread: 1 when
/// the thread reached the operator, 2 when it got past it.
pub const STATE: u32 = 0x3_0000;
/// Random bytes that loads read.
pub const LOAD_WINDOW: u32 = 0x4_0000;
/// Bytes of [`LOAD_WINDOW`].
pub const LOAD_WINDOW_LEN: u32 = 0x2000;
/// Store targets: 16 bytes per thread.
pub const STORE_AREA: u32 = 0x5_0000;
/// Bytes of [`STORE_AREA`].
pub const STORE_AREA_LEN: u32 = 16 * MAX_INPUTS as u32;
/// Where wasmtime's reference stores go: [`STORE_AREA`] plus this.
pub const MIRROR_DELTA: u32 = 0x1_0000;
/// The last bytes of memory, random; loads and stores reach them.
pub const TAIL: u32 = MEM_LEN - 64;

// ---------------------------------------------------------------------------
// Random inputs and edge values
// ---------------------------------------------------------------------------

/// xorshift64* seeded per operator from the run's seed.
pub struct Rng(u64);

/// The run's seed: `TENSORWASM_SEED`, else the clock; printed once.
pub fn seed() -> u64 {
    static SEED: OnceLock<u64> = OnceLock::new();
    *SEED.get_or_init(|| {
        let seed = std::env::var("TENSORWASM_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(0x9e37_79b9_7f4a_7c15)
            });
        println!("kernel_ops: TENSORWASM_SEED={seed}");
        eprintln!("kernel_ops: TENSORWASM_SEED={seed}");
        seed
    })
}

impl Rng {
    /// The generator of `salt` (an operator's name) in this run.
    pub fn new(salt: &str) -> Rng {
        let mut h = seed() ^ 0xcbf2_9ce4_8422_2325;
        for b in salt.bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        Rng(h | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// Edge values of `ty`, as bits: zeros, signs, extremes, NaNs (canonical,
/// negative, quiet and signalling with payloads), infinities, subnormals,
/// shift counts around the widths, rounding ties, and both sides of every
/// float-to-int bound.
pub fn edges(ty: Ty) -> Vec<u64> {
    match ty {
        I32 => [
            0,
            1,
            -1,
            2,
            -2,
            i32::MIN,
            i32::MAX,
            i32::MIN + 1,
            31,
            32,
            33,
            63,
            64,
            0x80,
            0xff,
            0x8000,
            0xffff,
            -0x81,
        ]
        .iter()
        .map(|&v| u64::from(v as u32))
        .collect(),
        I64 => [
            0,
            1,
            -1,
            2,
            -2,
            i64::MIN,
            i64::MAX,
            i64::MIN + 1,
            31,
            32,
            33,
            63,
            64,
            0x80,
            0x8000,
            0x7fff_ffff,
            0x8000_0000,
            0xffff_ffff,
            0x1_0000_0000,
            -0x8000_0000,
            (1 << 53) + 1,
            0x8000_0000_0000_0401_u64 as i64,
        ]
        .iter()
        .map(|&v| v as u64)
        .collect(),
        F32 => {
            let mut v: Vec<u64> = [
                0.0f32,
                -0.0,
                1.0,
                -1.0,
                0.5,
                -0.5,
                1.5,
                2.5,
                -2.5,
                0.499_999_97,
                -0.999_999_94,
                8_388_609.0,
                f32::INFINITY,
                f32::NEG_INFINITY,
                f32::MAX,
                f32::MIN,
                f32::MIN_POSITIVE,
                1e-45,
                -1e-45,
                2_147_483_648.0,
                2_147_483_520.0,
                -2_147_483_648.0,
                -2_147_483_904.0,
                4_294_967_296.0,
                4_294_967_040.0,
                9_223_372_036_854_775_808.0,
                9_223_371_487_098_961_920.0,
                -9_223_372_036_854_775_808.0,
                -9_223_373_136_366_403_584.0,
                18_446_744_073_709_551_616.0,
                18_446_742_974_197_923_840.0,
            ]
            .iter()
            .map(|f| u64::from(f.to_bits()))
            .collect();
            v.extend([
                0x7fc0_0000, // canonical NaN
                0xffc0_0000, // negative canonical NaN
                0x7fc1_2345, // quiet NaN with a payload
                0x7fa0_0001, // signalling NaN with a payload
                0xff81_2345, // negative signalling NaN
                0x007f_ffff, // largest subnormal
            ]);
            v
        }
        F64 => {
            let mut v: Vec<u64> = [
                0.0f64,
                -0.0,
                1.0,
                -1.0,
                0.5,
                -0.5,
                1.5,
                2.5,
                -2.5,
                -0.9,
                0.499_999_999_999_999_94,
                4_503_599_627_370_497.0,
                f64::INFINITY,
                f64::NEG_INFINITY,
                f64::MAX,
                f64::MIN_POSITIVE,
                5e-324,
                2_147_483_647.0,
                2_147_483_647.9,
                2_147_483_648.0,
                -2_147_483_648.0,
                -2_147_483_648.9,
                -2_147_483_649.0,
                4_294_967_295.0,
                4_294_967_295.9,
                4_294_967_296.0,
                9_223_372_036_854_775_808.0,
                9_223_372_036_854_774_784.0,
                -9_223_372_036_854_775_808.0,
                -9_223_372_036_854_777_856.0,
                18_446_744_073_709_549_568.0,
                18_446_744_073_709_551_616.0,
                // f32::MAX, and half an f32 ulp above it (demotes to inf).
                3.402_823_466_385_288_6e38,
                3.402_823_567_797_336_6e38,
                // The smallest f32 subnormal, and half of it (demotes to 0).
                1.401_298_464_324_817e-45,
                7.006_492_321_624_085e-46,
            ]
            .iter()
            .map(|f| f.to_bits())
            .collect();
            v.extend([
                0x7ff8_0000_0000_0000,
                0xfff8_0000_0000_0000,
                0x7ff8_0000_0001_2345,
                0x7ff4_0000_0000_0001,
                0xfff0_0000_0000_0001,
                0x000f_ffff_ffff_ffff,
            ]);
            v
        }
    }
}

/// A random value: an edge value, a number of random magnitude, or random
/// bits.
pub fn random_value(rng: &mut Rng, ty: Ty) -> u64 {
    match rng.below(4) {
        0 => {
            let e = edges(ty);
            e[rng.below(e.len() as u64) as usize]
        }
        1 => {
            let x = (rng.next_u64() as i64) >> rng.below(64);
            match ty {
                I32 => u64::from(x as i32 as u32),
                I64 => x as u64,
                F32 => u64::from((((x as f64) / 4.0) as f32).to_bits()),
                F64 => ((x as f64) / 4.0).to_bits(),
            }
        }
        _ => rng.next_u64() & ty.mask(),
    }
}

/// Inputs per operator (at least: every pair of edge values is always
/// included).
pub const INPUTS: usize = 2000;

/// The inputs of `op`: one row of operand bits per thread.
pub fn inputs(op: &Op, rng: &mut Rng) -> Vec<Vec<u64>> {
    let mut rows: Vec<Vec<u64>> = Vec::new();
    match op.inputs {
        Inputs::Values => {
            match op.params[..] {
                [] => rows.extend((0..64).map(|_| Vec::new())),
                [a] => rows.extend(edges(a).into_iter().map(|x| vec![x])),
                [a, b] => {
                    for x in edges(a) {
                        rows.extend(edges(b).into_iter().map(|y| vec![x, y]));
                    }
                }
                _ => {
                    // Each edge value of each operand, the others random.
                    for (p, &ty) in op.params.iter().enumerate() {
                        for e in edges(ty) {
                            let mut row: Vec<u64> =
                                op.params.iter().map(|&t| random_value(rng, t)).collect();
                            row[p] = e;
                            rows.push(row);
                        }
                    }
                }
            }
            if !op.params.is_empty() {
                while rows.len() < INPUTS {
                    rows.push(op.params.iter().map(|&t| random_value(rng, t)).collect());
                }
            }
        }
        Inputs::Small(bound) => {
            rows.extend(edges(I32).into_iter().map(|x| vec![x; op.params.len()]));
            while rows.len() < INPUTS {
                let row = op
                    .params
                    .iter()
                    .map(|&t| match rng.below(4) {
                        0 => random_value(rng, t),
                        _ => rng.below(u64::from(bound)),
                    })
                    .collect();
                rows.push(row);
            }
        }
        Inputs::Load { size, offset } => {
            let mut ea: Vec<u64> = Vec::new();
            // Every alignment, then random places in the window.
            ea.extend((0..64).map(|k| u64::from(LOAD_WINDOW + k)));
            // The memory's last bytes: the last in-bounds address, and each
            // one that straddles the end.
            ea.extend((0..=16).map(|k| u64::from(MEM_LEN - 16 + k)));
            ea.push(u64::from(MEM_LEN - size));
            while ea.len() < INPUTS - 8 {
                ea.push(u64::from(LOAD_WINDOW) + rng.below(u64::from(LOAD_WINDOW_LEN - 8)));
            }
            // `addr + offset` is the effective address (no wrap: it is a
            // 33-bit sum), so these addresses trap whatever the offset.
            let mut addrs: Vec<u64> = ea
                .into_iter()
                .map(|e| u64::from((e as u32).wrapping_sub(offset)))
                .collect();
            addrs.extend(
                [
                    0xffff_ffff,
                    0xffff_fff8,
                    0x8000_0000,
                    0x7fff_ffff,
                    MEM_LEN,
                    MEM_LEN.wrapping_sub(offset),
                    0x1_0000_0000_u64.wrapping_sub(u64::from(offset)) as u32,
                    u32::MAX - size,
                ]
                .map(u64::from),
            );
            rows.extend(addrs.into_iter().map(|a| vec![a]));
        }
        Inputs::Store { size, offset } => {
            let value_ty = op.params[1];
            let n = INPUTS;
            // Elements that trap: each effective address puts some byte
            // past the end, whatever the size (an in-bounds one would race
            // with the one store at the memory's last bytes).
            let oob: [u64; 12] = [
                u64::from(MEM_LEN - size + 1),
                u64::from(MEM_LEN + 0x100),
                u64::from(MEM_LEN),
                u64::from(MEM_LEN + 1),
                0xffff_ffff,
                0x8000_0000,
                0x7fff_fffc,
                u64::from(MEM_LEN) + 8,
                u64::from(MEM_LEN - size + 2),
                u64::from(MEM_LEN - size + 3),
                u64::from(MEM_LEN - size + 7),
                u64::from(MEM_LEN - size + 4),
            ];
            for i in 0..n {
                let ea = if i == n / 2 {
                    // The one store at the memory's last bytes.
                    u64::from(MEM_LEN - size)
                } else if i % 160 == 7 {
                    let ea = oob[(i / 160) % oob.len()];
                    assert!(ea + u64::from(size) > u64::from(MEM_LEN));
                    ea
                } else {
                    let misalign = if i < 64 {
                        i as u64 % 8
                    } else {
                        rng.below(u64::from(17 - size))
                    };
                    u64::from(STORE_AREA) + 16 * i as u64 + misalign
                };
                // Effective addresses past 2^32 (MEM_LEN + 8 with a large
                // offset) keep their address below 2^32 by wrapping; they
                // trap either way.
                let addr = u64::from((ea as u32).wrapping_sub(offset));
                rows.push(vec![addr, random_value(rng, value_ty)]);
            }
        }
    }
    assert!(rows.len() <= MAX_INPUTS, "{}: too many inputs", op.name);
    rows
}

// ---------------------------------------------------------------------------
// The operators, family by family
// ---------------------------------------------------------------------------

/// An operator applied to its operands in order: `local.get 0 ... op`.
fn apply(name: &str, params: &[Ty], result: Ty, compare: Compare) -> Op {
    let mut body = String::new();
    for p in 0..params.len() {
        let _ = write!(body, "local.get {p} ");
    }
    body.push_str(name);
    Op {
        name: name.to_string(),
        params: params.to_vec(),
        result: Some(result),
        locals: "",
        body,
        compare,
        traps: false,
        inputs: Inputs::Values,
    }
}

fn int_family(name: &'static str, t: Ty) -> Family {
    let p = t.name();
    let mut ops = Vec::new();
    for op in [
        "add", "sub", "mul", "and", "or", "xor", "shl", "shr_s", "shr_u", "rotl", "rotr",
    ] {
        ops.push(apply(&format!("{p}.{op}"), &[t, t], t, Compare::Exact));
    }
    for op in [
        "eq", "ne", "lt_s", "lt_u", "gt_s", "gt_u", "le_s", "le_u", "ge_s", "ge_u",
    ] {
        ops.push(apply(&format!("{p}.{op}"), &[t, t], I32, Compare::Exact));
    }
    for op in ["clz", "ctz", "popcnt", "extend8_s", "extend16_s"] {
        ops.push(apply(&format!("{p}.{op}"), &[t], t, Compare::Exact));
    }
    if t == I64 {
        ops.push(apply("i64.extend32_s", &[t], t, Compare::Exact));
    }
    ops.push(apply(&format!("{p}.eqz"), &[t], I32, Compare::Exact));
    Family {
        name,
        ops,
        helpers: "",
    }
}

fn float_family(name: &'static str, t: Ty) -> Family {
    let p = t.name();
    let mut ops = Vec::new();
    for (op, compare) in [
        ("add", Compare::AnyNan),
        ("sub", Compare::AnyNan),
        ("mul", Compare::AnyNan),
        ("div", Compare::AnyNan),
        ("min", Compare::AnyNan),
        ("max", Compare::AnyNan),
        ("copysign", Compare::Exact),
    ] {
        ops.push(apply(&format!("{p}.{op}"), &[t, t], t, compare));
    }
    for op in ["eq", "ne", "lt", "gt", "le", "ge"] {
        ops.push(apply(&format!("{p}.{op}"), &[t, t], I32, Compare::Exact));
    }
    for (op, compare) in [
        ("abs", Compare::Exact),
        ("neg", Compare::Exact),
        ("ceil", Compare::AnyNan),
        ("floor", Compare::AnyNan),
        ("trunc", Compare::AnyNan),
        ("nearest", Compare::AnyNan),
        ("sqrt", Compare::AnyNan),
    ] {
        ops.push(apply(&format!("{p}.{op}"), &[t], t, compare));
    }
    Family {
        name,
        ops,
        helpers: "",
    }
}

fn conversions() -> Family {
    let rows: &[(&str, Ty, Ty, Compare)] = &[
        ("i32.wrap_i64", I64, I32, Compare::Exact),
        ("i64.extend_i32_s", I32, I64, Compare::Exact),
        ("i64.extend_i32_u", I32, I64, Compare::Exact),
        ("i32.trunc_sat_f32_s", F32, I32, Compare::Exact),
        ("i32.trunc_sat_f32_u", F32, I32, Compare::Exact),
        ("i32.trunc_sat_f64_s", F64, I32, Compare::Exact),
        ("i32.trunc_sat_f64_u", F64, I32, Compare::Exact),
        ("i64.trunc_sat_f32_s", F32, I64, Compare::Exact),
        ("i64.trunc_sat_f32_u", F32, I64, Compare::Exact),
        ("i64.trunc_sat_f64_s", F64, I64, Compare::Exact),
        ("i64.trunc_sat_f64_u", F64, I64, Compare::Exact),
        ("f32.convert_i32_s", I32, F32, Compare::Exact),
        ("f32.convert_i32_u", I32, F32, Compare::Exact),
        ("f32.convert_i64_s", I64, F32, Compare::Exact),
        ("f32.convert_i64_u", I64, F32, Compare::Exact),
        ("f64.convert_i32_s", I32, F64, Compare::Exact),
        ("f64.convert_i32_u", I32, F64, Compare::Exact),
        ("f64.convert_i64_s", I64, F64, Compare::Exact),
        ("f64.convert_i64_u", I64, F64, Compare::Exact),
        ("f32.demote_f64", F64, F32, Compare::AnyNan),
        ("f64.promote_f32", F32, F64, Compare::AnyNan),
        ("i32.reinterpret_f32", F32, I32, Compare::Exact),
        ("i64.reinterpret_f64", F64, I64, Compare::Exact),
        ("f32.reinterpret_i32", I32, F32, Compare::Exact),
        ("f64.reinterpret_i64", I64, F64, Compare::Exact),
    ];
    Family {
        name: "conversions",
        ops: rows
            .iter()
            .map(|&(op, from, to, compare)| apply(op, &[from], to, compare))
            .collect(),
        helpers: "",
    }
}

/// Operators that trap on some inputs: division and remainder (zero
/// divisor, `INT_MIN / -1`) and the trapping float-to-int truncations (NaN,
/// out of range).
fn traps() -> Family {
    let rows: &[(&str, Ty, Ty)] = &[
        ("i32.div_s", I32, I32),
        ("i32.div_u", I32, I32),
        ("i32.rem_s", I32, I32),
        ("i32.rem_u", I32, I32),
        ("i64.div_s", I64, I64),
        ("i64.div_u", I64, I64),
        ("i64.rem_s", I64, I64),
        ("i64.rem_u", I64, I64),
        ("i32.trunc_f32_s", F32, I32),
        ("i32.trunc_f32_u", F32, I32),
        ("i32.trunc_f64_s", F64, I32),
        ("i32.trunc_f64_u", F64, I32),
        ("i64.trunc_f32_s", F32, I64),
        ("i64.trunc_f32_u", F32, I64),
        ("i64.trunc_f64_s", F64, I64),
        ("i64.trunc_f64_u", F64, I64),
    ];
    let ops = rows
        .iter()
        .map(|&(op, input, result)| {
            let params: &[Ty] = if op.contains("trunc") {
                &[input]
            } else {
                &[input, input]
            };
            Op {
                traps: true,
                ..apply(op, params, result, Compare::Exact)
            }
        })
        .collect();
    Family {
        name: "traps",
        ops,
        helpers: "",
    }
}

/// A hand-written operator: `body` over `params`.
fn custom(name: &str, params: &[Ty], result: Ty, locals: &'static str, body: &str) -> Op {
    Op {
        name: name.to_string(),
        params: params.to_vec(),
        result: Some(result),
        locals,
        body: body.to_string(),
        compare: Compare::Exact,
        traps: false,
        inputs: Inputs::Values,
    }
}

/// `select` of every type (bit-exact: NaN payloads pass through), with a
/// condition from memory and with a comparison's result; constants of every
/// type, NaN payloads included; `global.get` of immutable globals.
fn select_and_constants() -> Family {
    let mut ops = Vec::new();
    for t in [I32, I64, F32, F64] {
        let p = t.name();
        ops.push(custom(
            &format!("select.{p}"),
            &[t, t, I32],
            t,
            "",
            "local.get 0 local.get 1 local.get 2 select",
        ));
        ops.push(custom(
            &format!("select_typed.{p}"),
            &[t, t, I32],
            t,
            "",
            &format!("local.get 0 local.get 1 local.get 2 select (result {p})"),
        ));
    }
    for (t, cmp) in [
        (I32, "i32.lt_s"),
        (I64, "i64.gt_u"),
        (F32, "f32.lt"),
        (F64, "f64.ge"),
    ] {
        ops.push(custom(
            &format!("select_cmp.{}", t.name()),
            &[t, t],
            t,
            "",
            &format!("local.get 0 local.get 1 local.get 0 local.get 1 {cmp} select"),
        ));
    }
    ops.push(custom(
        "select_eqz.i64",
        &[I64, I64],
        I64,
        "",
        "local.get 0 local.get 1 local.get 1 i64.eqz select",
    ));
    for (name, t, body) in [
        ("i32.const", I32, "i32.const -0x80000000"),
        ("i32.const.small", I32, "i32.const 0x7f"),
        ("i64.const", I64, "i64.const 0x8000000000000001"),
        ("f32.const.nan_payload", F32, "f32.const nan:0x200001"),
        ("f32.const.neg_nan", F32, "f32.const -nan:0x7fffff"),
        ("f32.const.neg_zero", F32, "f32.const -0"),
        ("f32.const.subnormal", F32, "f32.const 0x1p-149"),
        (
            "f64.const.nan_payload",
            F64,
            "f64.const nan:0x4000000000001",
        ),
        ("f64.const.neg_nan", F64, "f64.const -nan:0x8000000000000"),
        ("f64.const.max", F64, "f64.const 0x1.fffffffffffffp+1023"),
        ("global.get.i64", I64, "global.get $g64"),
        ("global.get.f32", F32, "global.get $gf32"),
    ] {
        ops.push(custom(name, &[], t, "", body));
    }
    Family {
        name: "select_and_constants",
        ops,
        helpers: "  (global $g64 i64 (i64.const -7))\n  (global $gf32 f32 (f32.const nan:0x12345))\n",
    }
}

/// Every load and store width, at immediate offsets 0, 5 and 65530 (and a
/// few at 0xfffffff0, where every access traps).
fn memory_ops(store: bool) -> Family {
    let loads: &[(&str, Ty, u32)] = &[
        ("i32.load", I32, 4),
        ("i64.load", I64, 8),
        ("f32.load", F32, 4),
        ("f64.load", F64, 8),
        ("i32.load8_s", I32, 1),
        ("i32.load8_u", I32, 1),
        ("i32.load16_s", I32, 2),
        ("i32.load16_u", I32, 2),
        ("i64.load8_s", I64, 1),
        ("i64.load8_u", I64, 1),
        ("i64.load16_s", I64, 2),
        ("i64.load16_u", I64, 2),
        ("i64.load32_s", I64, 4),
        ("i64.load32_u", I64, 4),
    ];
    let stores: &[(&str, Ty, u32)] = &[
        ("i32.store", I32, 4),
        ("i64.store", I64, 8),
        ("f32.store", F32, 4),
        ("f64.store", F64, 8),
        ("i32.store8", I32, 1),
        ("i32.store16", I32, 2),
        ("i64.store8", I64, 1),
        ("i64.store16", I64, 2),
        ("i64.store32", I64, 4),
    ];
    let (rows, huge): (_, &[&str]) = if store {
        (stores, &["f64.store", "i32.store16"])
    } else {
        (loads, &["i32.load", "i64.load8_u"])
    };
    let mut ops = Vec::new();
    for &(op, t, size) in rows {
        for offset in [0u32, 5, 65530, 0xffff_fff0] {
            if offset == 0xffff_fff0 && !huge.contains(&op) {
                continue;
            }
            let name = if offset == 0 {
                op.to_string()
            } else {
                format!("{op}.off{offset}")
            };
            ops.push(if store {
                Op {
                    name,
                    params: vec![I32, t],
                    result: None,
                    locals: "",
                    body: format!("local.get 0 local.get 1 {op} offset={offset}"),
                    compare: Compare::Exact,
                    traps: true,
                    inputs: Inputs::Store { size, offset },
                }
            } else {
                Op {
                    name,
                    params: vec![I32],
                    result: Some(t),
                    locals: "",
                    body: format!("local.get 0 {op} offset={offset}"),
                    compare: Compare::Exact,
                    traps: true,
                    inputs: Inputs::Load { size, offset },
                }
            });
        }
    }
    Family {
        name: if store { "stores" } else { "loads" },
        ops,
        helpers: "",
    }
}

/// Control flow: `br_table` (in range, out of range, with values, in a
/// loop, with no targets but the default), loops (with and without block
/// parameters, nested), `if`/`else` with parameters, `br_if` carrying a
/// value, dead code, direct calls, and `unreachable`.
fn control() -> Family {
    let small = |op: Op, bound: u32| Op {
        inputs: Inputs::Small(bound),
        ..op
    };
    let ops = vec![
        small(
            custom(
                "br_table",
                &[I32],
                I32,
                "",
                "(block $d (block $c (block $b (block $a
                   (br_table $a $b $c $d (local.get 0)))
                   (return (i32.const 100)))
                   (return (i32.const 200)))
                   (return (i32.const 300)))
                 (i32.const 400)",
            ),
            8,
        ),
        small(
            custom(
                "br_table.values",
                &[I32],
                I32,
                "",
                "(block $outer (result i32)
                   (block $inner (result i32)
                     (i32.const 11)
                     (br_table $outer $inner $outer $inner (local.get 0)))
                   (i32.const 1000)
                   (i32.add))",
            ),
            8,
        ),
        small(
            custom(
                "br_table.default_only",
                &[I32],
                I32,
                "",
                "(block $d (br_table $d (local.get 0))) (i32.add (local.get 0) (i32.const 7))",
            ),
            8,
        ),
        custom(
            "br_table.loop",
            &[I32],
            I32,
            "(local $i i32)",
            "(block $exit
               (loop $again
                 (local.set $i (i32.add (local.get $i) (i32.const 1)))
                 (br_if $exit (i32.gt_u (local.get $i) (i32.const 40)))
                 (br_table $again $again $exit
                   (i32.and (i32.shr_u (local.get 0) (local.get $i)) (i32.const 3)))))
             (local.get $i)",
        ),
        custom(
            "loop.collatz",
            &[I32],
            I32,
            "(local $n i32) (local $steps i32)",
            "(local.set $n (i32.add (i32.and (local.get 0) (i32.const 0x3ff)) (i32.const 1)))
             (block $done
               (loop $next
                 (br_if $done (i32.eq (local.get $n) (i32.const 1)))
                 (local.set $steps (i32.add (local.get $steps) (i32.const 1)))
                 (if (i32.and (local.get $n) (i32.const 1))
                   (then (local.set $n (i32.add (i32.mul (local.get $n) (i32.const 3)) (i32.const 1))))
                   (else (local.set $n (i32.shr_u (local.get $n) (i32.const 1)))))
                 (br $next)))
             (local.get $steps)",
        ),
        custom(
            "loop.params",
            &[I32],
            I32,
            "(local $c i32) (local $acc i32)",
            "(local.get 0) (i32.const 15) (i32.and)
             (i32.const 0)
             (loop $l (param i32 i32) (result i32)
               (local.set $acc) (local.set $c)
               (local.set $acc (i32.add (local.get $acc) (local.get $c)))
               (local.set $c (i32.sub (local.get $c) (i32.const 1)))
               (local.get $c) (local.get $acc)
               (br_if $l (i32.gt_s (local.get $c) (i32.const 0)))
               (local.set $acc) (drop) (local.get $acc))",
        ),
        custom(
            "loop.nested",
            &[I32],
            I64,
            "(local $i i32) (local $j i32) (local $acc i64)",
            "(local.set $acc (i64.const 1))
             (block $outer_done
               (loop $outer
                 (br_if $outer_done (i32.ge_u (local.get $i) (i32.and (local.get 0) (i32.const 15))))
                 (local.set $j (i32.const 0))
                 (block $inner_done
                   (loop $inner
                     (br_if $inner_done
                       (i32.ge_u (local.get $j) (i32.and (i32.shr_u (local.get 0) (i32.const 4)) (i32.const 15))))
                     (local.set $acc
                       (i64.add (i64.mul (local.get $acc) (i64.const 31))
                                (i64.extend_i32_u (i32.xor (local.get $i) (local.get $j)))))
                     (local.set $j (i32.add (local.get $j) (i32.const 1)))
                     (br $inner)))
                 (local.set $i (i32.add (local.get $i) (i32.const 1)))
                 (br $outer)))
             (local.get $acc)",
        ),
        custom(
            "if.params",
            &[I32, I32],
            I32,
            "",
            "local.get 0
             local.get 1
             i32.const 1
             i32.and
             if (param i32) (result i32)
               i32.const 1
               i32.add
             else
               i32.const 2
               i32.mul
             end
             local.get 1
             i32.const 2
             i32.and
             if (param i32) (result i32)
               i32.const 5
               i32.sub
             end",
        ),
        custom(
            "br_if.value",
            &[I32],
            I64,
            "",
            "(if (i32.lt_s (local.get 0) (i32.const 0)) (then (return (i64.const -1))))
             (block (result i64)
               (i64.extend_i32_u (local.get 0))
               (br_if 0 (i32.gt_u (local.get 0) (i32.const 100)))
               (drop)
               (i64.const 5))",
        ),
        custom(
            "block.dead_code",
            &[I32],
            I32,
            "",
            "(block $b (result i32)
               (i32.const 9)
               (br $b)
               (i32.const 1)
               (drop)
               (loop (br 0))
               (if (i32.const 1) (then (unreachable)) (else (nop)))
               (block (result i32) (unreachable))
               (i32.add))
             (if (result i32) (i32.and (local.get 0) (i32.const 1))
               (then (return (i32.const 77)) (i32.const 1))
               (else (i32.const 2)))
             (i32.add)",
        ),
        custom(
            "call.multi_value",
            &[I32],
            I64,
            "",
            "(call $multi (local.get 0)) (i64.extend_i32_u) (i64.add)",
        ),
        Op {
            traps: true,
            ..custom("unreachable", &[I32], I32, "", "(call $boom (local.get 0))")
        },
        Op {
            traps: true,
            ..custom(
                "call.chain",
                &[I32],
                I32,
                "",
                "(call $boom (call $boom (local.get 0)))",
            )
        },
    ];
    Family {
        name: "control",
        ops,
        helpers: r#"  (func $multi (param $x i32) (result i64 i32)
    (i64.mul (i64.extend_i32_s (local.get $x)) (i64.const 3))
    (i32.add (local.get $x) (i32.const 1)))
  (func $boom (param $x i32) (result i32)
    (if (i32.eq (i32.and (local.get $x) (i32.const 3)) (i32.const 3))
      (then (unreachable)))
    (i32.add (local.get $x) (i32.const 1)))
"#,
    }
}

/// What compilers emit (`docs/kernels.md`, "Globals and the shadow
/// stack", "Bulk memory", "Indirect calls"): a shadow-stack frame that the
/// operator fills, copies within and reads back; an overlapping, unaligned
/// `memory.copy` in the frame; and `call_indirect` through a fixed table
/// with a null slot, a slot of another type and an index past the end.
fn compiler_output() -> Family {
    let ops = vec![
        custom(
            "stack.frame",
            &[I32, I32],
            I32,
            "(local $sp i32) (local $r i32)",
            "(global.set $__stack_pointer
               (local.tee $sp (i32.sub (global.get $__stack_pointer) (i32.const 32))))
             (i32.store (local.get $sp) (local.get 0))
             (i32.store offset=4 (local.get $sp) (local.get 1))
             (memory.fill (i32.add (local.get $sp) (i32.const 8)) (local.get 1) (i32.const 24))
             (i32.store offset=8 (local.get $sp) (i32.mul (local.get 0) (local.get 1)))
             (memory.copy (i32.add (local.get $sp) (i32.const 16)) (local.get $sp) (i32.const 12))
             (local.set $r (i32.add (i32.load offset=24 (local.get $sp))
               (i32.xor (i32.load offset=20 (local.get $sp)) (i32.load offset=28 (local.get $sp)))))
             (global.set $__stack_pointer (i32.add (local.get $sp) (i32.const 32)))
             (local.get $r)",
        ),
        custom(
            "memory.copy.overlap",
            &[I64, I32],
            I64,
            "(local $sp i32) (local $r i64)",
            "(global.set $__stack_pointer
               (local.tee $sp (i32.sub (global.get $__stack_pointer) (i32.const 32))))
             (i64.store (local.get $sp) (local.get 0))
             (i64.store offset=8 (local.get $sp) (i64.xor (local.get 0) (i64.const -1)))
             (i64.store offset=16 (local.get $sp) (i64.rotl (local.get 0) (i64.const 17)))
             (memory.copy (i32.add (local.get $sp) (i32.and (local.get 1) (i32.const 7)))
                          (local.get $sp) (i32.const 13))
             (memory.copy (local.get $sp)
                          (i32.add (local.get $sp) (i32.and (i32.shr_u (local.get 1) (i32.const 3)) (i32.const 7)))
                          (i32.const 11))
             (local.set $r (i64.xor (i64.load offset=3 (local.get $sp)) (i64.load offset=16 (local.get $sp))))
             (global.set $__stack_pointer (i32.add (local.get $sp) (i32.const 32)))
             (local.get $r)",
        ),
        Op {
            traps: true,
            ..custom(
                "call_indirect",
                &[I32, I32],
                I32,
                "",
                "(call_indirect $table (type $bin) (local.get 0) (local.get 1)
                   (i32.and (local.get 1) (i32.const 7)))",
            )
        },
    ];
    Family {
        name: "compiler_output",
        ops,
        // The stack sits below the operand arrays, in bytes no test uses;
        // exported as wasm-ld's `--export=__stack_pointer` does, so the
        // runtime adds no export and wasmtime's offsets are the module's.
        helpers: r#"  (global $__stack_pointer (export "__stack_pointer") (mut i32) (i32.const 0x10000))
  (type $bin (func (param i32 i32) (result i32)))
  (type $unf (func (param f32) (result f32)))
  (table $table 6 funcref)
  (elem (table $table) (i32.const 0) func $add $sub)
  (elem (table $table) (i32.const 3) func $mul $neg $add)
  (func $add (type $bin) (i32.add (local.get 0) (local.get 1)))
  (func $sub (type $bin) (i32.sub (local.get 0) (local.get 1)))
  (func $mul (type $bin) (i32.mul (local.get 0) (local.get 1)))
  (func $neg (type $unf) (f32.neg (local.get 0)))
"#,
    }
}

/// The threads proposal's operators on memory (docs/kernels.md, "Atomics"),
/// with the store area's inputs: each thread its own 16-byte window at
/// every misalignment (a misaligned access traps `HeapMisaligned`, as in
/// wasmtime), one at the memory's last bytes, some past its end. A
/// `cmpxchg` runs twice: expecting the value in memory (`.hit`, read first
/// by a plain load) and expecting the operand (mostly a miss). Then
/// `atomic.fence`.
fn atomics() -> Family {
    let mut ops = Vec::new();
    let widths: [(Ty, &[(u32, &str)]); 2] = [
        (I32, &[(4, ""), (1, "8"), (2, "16")]),
        (I64, &[(8, ""), (1, "8"), (2, "16"), (4, "32")]),
    ];
    for (t, sizes) in widths {
        let p = t.name();
        for &(size, n) in sizes {
            let u = if n.is_empty() { "" } else { "_u" };
            let plain = match (size, t) {
                (1, _) => format!("{p}.load8_u"),
                (2, _) => format!("{p}.load16_u"),
                (4, I64) => "i64.load32_u".to_string(),
                _ => format!("{p}.load"),
            };
            let op = |name: String, params: Vec<Ty>, result: Option<Ty>, body: String, inputs| Op {
                name,
                params,
                result,
                locals: "",
                body,
                compare: Compare::Exact,
                traps: true,
                inputs,
            };
            let load = format!("{p}.atomic.load{n}{u}");
            ops.push(op(
                load.clone(),
                vec![I32],
                Some(t),
                format!("local.get 0 {load}"),
                Inputs::Load { size, offset: 0 },
            ));
            let store = format!("{p}.atomic.store{n}");
            ops.push(op(
                store.clone(),
                vec![I32, t],
                None,
                format!("local.get 0 local.get 1 {store}"),
                Inputs::Store { size, offset: 0 },
            ));
            for rmw in ["add", "sub", "and", "or", "xor", "xchg"] {
                let name = format!("{p}.atomic.rmw{n}.{rmw}{u}");
                ops.push(op(
                    name.clone(),
                    vec![I32, t],
                    Some(t),
                    format!("local.get 0 local.get 1 {name}"),
                    Inputs::Store { size, offset: 0 },
                ));
            }
            let cmpxchg = format!("{p}.atomic.rmw{n}.cmpxchg{u}");
            ops.push(op(
                format!("{cmpxchg}.hit"),
                vec![I32, t],
                Some(t),
                format!("local.get 0 local.get 0 {plain} local.get 1 {cmpxchg}"),
                Inputs::Store { size, offset: 0 },
            ));
            ops.push(op(
                cmpxchg.clone(),
                vec![I32, t],
                Some(t),
                format!("local.get 0 local.get 1 local.get 1 {cmpxchg}"),
                Inputs::Store { size, offset: 0 },
            ));
        }
    }
    ops.push(Op {
        body: "atomic.fence local.get 0".into(),
        ..apply("atomic.fence", &[I32], I32, Compare::Exact)
    });
    Family {
        name: "atomics",
        ops,
        helpers: "",
    }
}

/// Every family, in test order.
pub fn families() -> Vec<Family> {
    vec![
        int_family("int32", I32),
        int_family("int64", I64),
        float_family("float32", F32),
        float_family("float64", F64),
        conversions(),
        traps(),
        select_and_constants(),
        memory_ops(false),
        memory_ops(true),
        control(),
        compiler_output(),
        atomics(),
    ]
}

/// The family called `name`.
pub fn family(name: &str) -> Family {
    families()
        .into_iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("no family {name}"))
}

// ---------------------------------------------------------------------------
// The guest module
// ---------------------------------------------------------------------------

/// Imports of the module: `wasi_cuda`'s, then the intrinsics.
const IMPORTS: &str = r#"  (import "wasi_cuda" "kernel_get" (func $kernel_get (param i32 i32) (result i32)))
  (import "wasi_cuda" "launch" (func $launch (param i64 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "wasi_cuda" "wait" (func $wait (param i64) (result i32)))
  (import "tensorwasm_kernel" "thread_idx_x" (func $thread_idx_x (result i32)))
  (import "tensorwasm_kernel" "block_idx_x" (func $block_idx_x (result i32)))
  (import "tensorwasm_kernel" "block_dim_x" (func $block_dim_x (result i32)))
"#;

/// Functions before the operators': 6 imports, `$global_id`, and the three
/// wrappers the host calls.
const FIRST_OP_FUNCTION: u32 = 10;

/// The function index of operator `j`'s reference function.
pub fn ref_index(j: usize) -> u32 {
    FIRST_OP_FUNCTION + 2 * j as u32
}

/// The function index of operator `j`'s kernel.
pub fn kernel_index(j: usize) -> u32 {
    ref_index(j) + 1
}

/// The family's guest module: for operator `j`, `ref_<op>` (the operator
/// over its parameters) and the kernel `k_<op>(a, b, c, out, state, n)`:
/// thread `i < n` loads its operands from the 8-byte slots `a[i]`, `b[i]`,
/// `c[i]`, calls `ref_<op>` (inlined by the translator) and stores the
/// result, and nothing else, at `out[i]`; a trapping operator's kernel also
/// sets `state[i]` (a `u32`) to 1 before the call and 2 after the store.
/// The host drives `kernel_get`, `launch` and `wait` through exported
/// wrappers of the same names.
pub fn module_wat(family: &Family) -> String {
    let mut w = String::from("(module\n");
    w.push_str(IMPORTS);
    let _ = writeln!(w, "  (memory (export \"memory\") {PAGES} {PAGES})");
    w.push_str(
        "  (func $global_id (result i32)
    (i32.add (i32.mul (call $block_idx_x) (call $block_dim_x)) (call $thread_idx_x)))
  (func (export \"kernel_get\") (param i32 i32) (result i32)
    (call $kernel_get (local.get 0) (local.get 1)))
  (func (export \"launch\") (param i64 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)
    (call $launch (local.get 0) (local.get 1) (local.get 2) (local.get 3) (local.get 4)
      (local.get 5) (local.get 6) (local.get 7) (local.get 8) (local.get 9) (local.get 10)))
  (func (export \"wait\") (param i64) (result i32)
    (call $wait (local.get 0)))
",
    );
    for (j, op) in family.ops.iter().enumerate() {
        let params: String = op.params.iter().map(|t| format!(" {}", t.name())).collect();
        let params = if params.is_empty() {
            String::new()
        } else {
            format!(" (param{params})")
        };
        let result = op
            .result
            .map(|t| format!(" (result {})", t.name()))
            .unwrap_or_default();
        let _ = writeln!(
            w,
            "  ;; {j}: {} (function {})\n  (func $r{j} (export \"{}\"){params}{result} {}\n    {})",
            op.name,
            ref_index(j),
            op.ref_export(),
            op.locals,
            op.body
        );
        let operands: String = op
            .params
            .iter()
            .zip(["$a", "$b", "$c"])
            .map(|(t, array)| {
                format!(
                    " ({}.load (i32.add (local.get {array}) (local.get $at)))",
                    t.name()
                )
            })
            .collect();
        let call = format!("(call $r{j}{operands})");
        let apply = match op.result {
            Some(t) => format!(
                "({}.store (i32.add (local.get $out) (local.get $at)) {call})",
                t.name()
            ),
            None => call,
        };
        let mark = |v: u32| {
            if op.traps {
                format!(
                    "(i32.store (i32.add (local.get $state) (i32.shl (local.get $i) (i32.const 2))) (i32.const {v}))"
                )
            } else {
                String::new()
            }
        };
        let _ = writeln!(
            w,
            "  (func $k{j} (export \"{}\") (param $a i32) (param $b i32) (param $c i32) (param $out i32) (param $state i32) (param $n i32)
    (local $i i32) (local $at i32)
    (local.set $i (call $global_id))
    (if (i32.lt_u (local.get $i) (local.get $n))
      (then
        (local.set $at (i32.shl (local.get $i) (i32.const 3)))
        {}
        {apply}
        {})))",
            op.kernel_export(),
            mark(1),
            mark(2)
        );
    }
    w.push_str(family.helpers);
    w.push_str(")\n");
    w
}
