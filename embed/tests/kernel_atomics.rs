//! Atomics in Wasm kernels (docs/kernels.md, "Atomics"), through the whole
//! runtime, on the CPU driver (CI) and CUDA (ignored without a GPU):
//!
//! - every threads-proposal operator on memory and every atomic intrinsic,
//!   one thread per 16-byte slot, against wasmtime running the same function
//!   for each thread in turn over an identical copy of the slots (the
//!   intrinsics' reference is the host's own implementation, which a guest
//!   reaches outside kernels): old values and memory bit for bit;
//! - each of them at a misaligned address traps `HeapMisaligned` (code 12)
//!   and the next launch runs;
//! - contention: 4096 threads on one counter (`rmw.add`, the returned old
//!   values a permutation), on the bytes of shared words (`rmw8.add_u`: the
//!   compare-and-swap loop keeps the neighbours), `atomic_add_f32` and
//!   `atomic_add_i64` sums, and an increment written as a `cmpxchg` retry
//!   loop;
//! - an atomic on the thread's stack window is the thread's own.
//!
//! Inputs are random (`TENSORWASM_SEED` replays; the seed is printed).

#[allow(dead_code)] // the shared test generator; the rest is for other suites
mod common;
#[path = "support/ptx_out.rs"]
mod ptx_out;

use common::Rng;
use tensorwasm_core::ManagedAllocator;
use tensorwasm_cpu::CpuDriver;
use tensorwasm_cuda::CudaDriver;
use tensorwasm_embed::kernel::KernelTarget;
use tensorwasm_embed::runtime::{GuestRuntime, GuestState};
use wasmtime::{Instance, Store};

/// Threads of the per-operator launches (two blocks).
const THREADS: u32 = 256;
/// The kernel's slots, the reference's copy, their results, the operands.
const SLOTS_K: u32 = 0x1_0000;
const SLOTS_R: u32 = 0x2_0000;
const OUT_K: u32 = 0x3_0000;
const OUT_R: u32 = 0x3_8000;
const OPS: u32 = 0x4_0000;
const OPS2: u32 = 0x4_8000;
/// The contention tests' words.
const SHARED: u32 = 0x5_0000;
/// Threads of the contention tests.
const CONTENDERS: u32 = 4096;

/// One operator under test.
struct Case {
    name: String,
    /// The value type of its operands and result.
    ty: &'static str,
    bytes: u32,
    kind: Kind,
}

enum Kind {
    Load,
    Store,
    Rmw,
    Cmpxchg,
    /// An intrinsic of this import name, with 1 or 2 value operands.
    Intrinsic(&'static str, u32),
}

fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    let widths: [(&str, &[(u32, &str)]); 2] = [
        ("i32", &[(4, ""), (1, "8"), (2, "16")]),
        ("i64", &[(8, ""), (1, "8"), (2, "16"), (4, "32")]),
    ];
    for (ty, sizes) in widths {
        for &(bytes, n) in sizes {
            let u = if n.is_empty() { "" } else { "_u" };
            cases.push(Case {
                name: format!("{ty}.atomic.load{n}{u}"),
                ty,
                bytes,
                kind: Kind::Load,
            });
            cases.push(Case {
                name: format!("{ty}.atomic.store{n}"),
                ty,
                bytes,
                kind: Kind::Store,
            });
            for op in ["add", "sub", "and", "or", "xor", "xchg"] {
                cases.push(Case {
                    name: format!("{ty}.atomic.rmw{n}.{op}{u}"),
                    ty,
                    bytes,
                    kind: Kind::Rmw,
                });
            }
            cases.push(Case {
                name: format!("{ty}.atomic.rmw{n}.cmpxchg{u}"),
                ty,
                bytes,
                kind: Kind::Cmpxchg,
            });
        }
    }
    for (name, ty, bytes, values) in [
        ("atomic_add_i32", "i32", 4, 1),
        ("atomic_sub_i32", "i32", 4, 1),
        ("atomic_and_i32", "i32", 4, 1),
        ("atomic_or_i32", "i32", 4, 1),
        ("atomic_xor_i32", "i32", 4, 1),
        ("atomic_xchg_i32", "i32", 4, 1),
        ("atomic_min_i32", "i32", 4, 1),
        ("atomic_max_i32", "i32", 4, 1),
        ("atomic_min_u32", "i32", 4, 1),
        ("atomic_max_u32", "i32", 4, 1),
        ("atomic_cas_i32", "i32", 4, 2),
        ("atomic_add_i64", "i64", 8, 1),
        ("atomic_cas_i64", "i64", 8, 2),
        ("atomic_add_f32", "f32", 4, 1),
    ] {
        cases.push(Case {
            name: name.to_string(),
            ty,
            bytes,
            kind: Kind::Intrinsic(name, values),
        });
    }
    cases
}

const INTRINSICS: [(&str, &str); 14] = [
    ("atomic_add_i32", "(param i32 i32) (result i32)"),
    ("atomic_sub_i32", "(param i32 i32) (result i32)"),
    ("atomic_and_i32", "(param i32 i32) (result i32)"),
    ("atomic_or_i32", "(param i32 i32) (result i32)"),
    ("atomic_xor_i32", "(param i32 i32) (result i32)"),
    ("atomic_xchg_i32", "(param i32 i32) (result i32)"),
    ("atomic_min_i32", "(param i32 i32) (result i32)"),
    ("atomic_max_i32", "(param i32 i32) (result i32)"),
    ("atomic_min_u32", "(param i32 i32) (result i32)"),
    ("atomic_max_u32", "(param i32 i32) (result i32)"),
    ("atomic_cas_i32", "(param i32 i32 i32) (result i32)"),
    ("atomic_add_i64", "(param i32 i64) (result i64)"),
    ("atomic_cas_i64", "(param i32 i64 i64) (result i64)"),
    ("atomic_add_f32", "(param i32 f32) (result f32)"),
];

/// Imports before the module's own functions.
const IMPORTS: u32 = 6 + INTRINSICS.len() as u32;

/// The plain load of `bytes` bytes to `ty` (zero-extended), to read the
/// current value.
fn plain_load(ty: &str, bytes: u32) -> String {
    match (ty, bytes) {
        (_, 1) => format!("{ty}.load8_u"),
        (_, 2) => format!("{ty}.load16_u"),
        ("i64", 4) => "i64.load32_u".into(),
        _ => format!("{ty}.load"),
    }
}

/// `(func $f_N (param $t i32) (param $base i32) (param $out i32))`: thread
/// `t`'s access at `base + 16 t + (t * bytes) % 8` (`+ 1` when
/// `misaligned`), its old value stored as an `i64` at `out + 8 t`.
fn access_function(n: usize, case: &Case, misaligned: bool) -> String {
    let ty = case.ty;
    let addr = format!(
        "(i32.add (i32.add (local.get $base) (i32.shl (local.get $t) (i32.const 4))) \
         (i32.add (i32.and (i32.mul (local.get $t) (i32.const {})) (i32.const 7)) (i32.const {})))",
        case.bytes,
        u32::from(misaligned)
    );
    let operand = |area: u32| {
        format!("({ty}.load (i32.add (i32.const {area}) (i32.shl (local.get $t) (i32.const 3))))")
    };
    let expected = format!(
        "(select ({} {addr}) {} (i32.and (local.get $t) (i32.const 1)))",
        plain_load(ty, case.bytes),
        operand(OPS)
    );
    let access = match &case.kind {
        Kind::Load => format!("({} {addr})", case.name),
        Kind::Store => format!("({} {addr} {})", case.name, operand(OPS)),
        Kind::Rmw => format!("({} {addr} {})", case.name, operand(OPS)),
        Kind::Cmpxchg => format!("({} {addr} {expected} {})", case.name, operand(OPS2)),
        Kind::Intrinsic(name, 1) => format!("(call ${name} {addr} {})", operand(OPS)),
        Kind::Intrinsic(name, _) => format!("(call ${name} {addr} {expected} {})", operand(OPS2)),
    };
    let wide = match (&case.kind, ty) {
        (Kind::Store, _) => format!("{access} (i64.const 0)"),
        (_, "i64") => access,
        (_, "f32") => format!("(i64.extend_i32_u (i32.reinterpret_f32 {access}))"),
        _ => format!("(i64.extend_i32_u {access})"),
    };
    format!(
        "(func $f_{n}{m} (param $t i32) (param $base i32) (param $out i32)
           (i64.store (i32.add (local.get $out) (i32.shl (local.get $t) (i32.const 3))) {wide}))",
        m = if misaligned { "_m" } else { "" }
    )
}

/// The guest: `go(f, blocks, threads, base, out)` launches function `f` as
/// a kernel with arguments `(base, out)` and returns the errno; per case,
/// `$f_N` (the access), kernel `k_N(base, out)` (thread `t` = its global
/// index), reference `r_N(t, base, out)`, and the misaligned pair `m_N`,
/// `rm_N`; then the contention and window kernels.
fn guest(cases: &[Case]) -> String {
    let mut wat = String::from(
        r#"(module
  (import "wasi_cuda" "kernel_get" (func $kernel_get (param i32 i32) (result i32)))
  (import "wasi_cuda" "launch" (func $launch (param i64 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "wasi_cuda" "wait" (func $wait (param i64) (result i32)))
  (import "tensorwasm_kernel" "thread_idx_x" (func $tid (result i32)))
  (import "tensorwasm_kernel" "block_idx_x" (func $bid (result i32)))
  (import "tensorwasm_kernel" "block_dim_x" (func $bdim (result i32)))
"#,
    );
    for (name, sig) in INTRINSICS {
        wat += &format!("  (import \"tensorwasm_kernel\" \"{name}\" (func ${name} {sig}))\n");
    }
    wat += r#"  (memory (export "memory") 8)
  (global $__stack_pointer (export "__stack_pointer") (mut i32) (i32.const 0x8000))
  (func $gid (result i32) (i32.add (i32.mul (call $bid) (call $bdim)) (call $tid)))
  (func (export "go") (param $f i32) (param $blocks i32) (param $threads i32)
                      (param $base i32) (param $out i32) (result i32)
    (local $err i32)
    (local.set $err (call $kernel_get (local.get $f) (i32.const 64)))
    (if (local.get $err) (then (return (local.get $err))))
    (i32.store (i32.const 128) (i32.const 0))
    (i64.store (i32.const 136) (i64.extend_i32_u (local.get $base)))
    (i32.store (i32.const 152) (i32.const 0))
    (i64.store (i32.const 160) (i64.extend_i32_u (local.get $out)))
    (local.set $err (call $launch (i64.load (i32.const 64))
      (local.get $blocks) (i32.const 1) (i32.const 1) (local.get $threads) (i32.const 1) (i32.const 1)
      (i32.const 0) (i32.const 128) (i32.const 2) (i32.const 72)))
    (if (local.get $err) (then (return (local.get $err))))
    (call $wait (i64.load (i32.const 72))))
"#;
    for (n, case) in cases.iter().enumerate() {
        wat += &access_function(n, case, false);
        wat += &access_function(n, case, true);
        wat += &format!(
            "\n  (func (export \"k_{n}\") (param $base i32) (param $out i32)
             (call $f_{n} (call $gid) (local.get $base) (local.get $out)))
           (func (export \"r_{n}\") (param $t i32) (param $base i32) (param $out i32)
             (call $f_{n} (local.get $t) (local.get $base) (local.get $out)))
           (func (export \"m_{n}\") (param $base i32) (param $out i32)
             (call $f_{n}_m (call $gid) (local.get $base) (local.get $out)))
           (func (export \"rm_{n}\") (param $t i32) (param $base i32) (param $out i32)
             (call $f_{n}_m (local.get $t) (local.get $base) (local.get $out)))\n"
        );
    }
    wat += CONTENTION;
    wat += ")";
    wat
}

/// Kernels of the contention and window tests, each `(base, out)`.
const CONTENTION: &str = r#"
  ;; one counter at base: out[t] = the old value
  (func (export "counter") (param $base i32) (param $out i32)
    (i32.store (i32.add (local.get $out) (i32.shl (call $gid) (i32.const 2)))
      (i32.atomic.rmw.add (local.get $base) (i32.const 1))))
  ;; byte t % 64 of the 16 words at base, +1 each
  (func (export "bytes") (param $base i32) (param $out i32)
    (drop (i32.atomic.rmw8.add_u (i32.add (local.get $base) (i32.and (call $gid) (i32.const 63)))
      (i32.const 1))))
  ;; f32 and i64 sums at base and base + 8
  (func (export "sums") (param $base i32) (param $out i32)
    (drop (call $atomic_add_f32 (local.get $base) (f32.const 1)))
    (drop (call $atomic_add_i64 (i32.add (local.get $base) (i32.const 8))
      (i64.extend_i32_u (call $gid)))))
  ;; an increment by compare-and-swap, retried
  (func (export "cas_loop") (param $base i32) (param $out i32) (local $old i32)
    (loop $retry
      (local.set $old (i32.atomic.load (local.get $base)))
      (br_if $retry (i32.ne (local.get $old)
        (i32.atomic.rmw.cmpxchg (local.get $base) (local.get $old)
          (i32.add (local.get $old) (i32.const 1)))))))
  ;; a frame word and a word at base (a pointer into the window when base
  ;; is sp - 16): atomics on the thread's own copy; out[t] = both results
  (func (export "window") (param $base i32) (param $out i32) (local $sp i32) (local $o i32)
    (global.set $__stack_pointer
      (local.tee $sp (i32.sub (global.get $__stack_pointer) (i32.const 16))))
    (i32.store offset=8 (local.get $sp) (call $gid))
    (drop (i32.atomic.rmw.add offset=8 (local.get $sp) (i32.const 1000)))
    (i32.store (local.get $base) (i32.const 7))
    (drop (i32.atomic.rmw.add (local.get $base) (call $gid)))
    (local.set $o (i32.add (local.get $out) (i32.shl (call $gid) (i32.const 3))))
    (i32.store (local.get $o) (i32.atomic.load offset=8 (local.get $sp)))
    (i32.store offset=4 (local.get $o) (i32.atomic.load (local.get $base)))
    (global.set $__stack_pointer (i32.add (local.get $sp) (i32.const 16))))
"#;

struct Guest<D: tensorwasm_core::GpuDriver + 'static> {
    store: Store<GuestState<D>>,
    instance: Instance,
}

impl<D> Guest<D>
where
    D: KernelTarget + ManagedAllocator + Clone + 'static,
    <D as ManagedAllocator>::Region: Sync,
{
    fn memory(&mut self) -> &mut [u8] {
        let memory = self.instance.get_memory(&mut self.store, "memory").unwrap();
        memory.data_mut(&mut self.store)
    }

    fn func_index(&self, export: &str, cases: usize) -> i32 {
        // go, then four functions and four exports per case in that order:
        // $f_N, $f_N_m, k_N, r_N, m_N, rm_N: six each; the contention
        // kernels follow.
        let _ = cases;
        let n = export;
        let at = |i: u32| (IMPORTS + 2 + i) as i32;
        if let Some(rest) = n.strip_prefix("k_") {
            return at(6 * rest.parse::<u32>().unwrap() + 2);
        }
        if let Some(rest) = n.strip_prefix("m_") {
            return at(6 * rest.parse::<u32>().unwrap() + 4);
        }
        let base = 6 * cases as u32;
        let order = ["counter", "bytes", "sums", "cas_loop", "window"];
        at(base + order.iter().position(|o| *o == n).unwrap() as u32)
    }

    fn go(&mut self, f: i32, blocks: i32, threads: i32, base: u32, out: u32) -> i32 {
        let go = self
            .instance
            .get_typed_func::<(i32, i32, i32, i32, i32), i32>(&mut self.store, "go")
            .unwrap();
        futures::executor::block_on(go.call_async(
            &mut self.store,
            (f, blocks, threads, base as i32, out as i32),
        ))
        .unwrap()
    }

    fn reference(&mut self, export: &str, t: u32, base: u32, out: u32) -> Result<(), String> {
        let f = self
            .instance
            .get_typed_func::<(i32, i32, i32), ()>(&mut self.store, export)
            .unwrap();
        futures::executor::block_on(
            f.call_async(&mut self.store, (t as i32, base as i32, out as i32)),
        )
        .map_err(|e| format!("{e:?}"))
    }

    fn last_error(&self) -> String {
        self.store.data().cuda.last_error().to_string()
    }
}

fn atomics_match_wasmtime<D>(rt: &GuestRuntime<D>)
where
    D: KernelTarget + ManagedAllocator + Clone + 'static,
    <D as ManagedAllocator>::Region: Sync,
{
    let cases = cases();
    let wat = guest(&cases);
    let module = rt.compile(&wat).unwrap_or_else(|e| panic!("{e:?}"));
    let mut store = rt.store().expect("store");
    let instance = futures::executor::block_on(rt.instantiate(&mut store, &module)).unwrap();
    let mut g = Guest { store, instance };
    let mut rng = Rng::new("kernel_atomics");
    let slots = (THREADS * 16) as usize;
    for (n, case) in cases.iter().enumerate() {
        // Same slots on both sides; random operands, small ones half the
        // time so that narrow compare-and-swaps sometimes match.
        let init: Vec<u8> = (0..slots).map(|_| rng.next_u64() as u8).collect();
        let ops: Vec<u8> = (0..THREADS * 8)
            .flat_map(|_| {
                let v = rng.next_u64();
                let v = if v & 1 == 0 { v >> 60 } else { v };
                let v = if case.ty == "f32" {
                    u64::from(((v % 2001) as f32 - 1000.0).to_bits())
                } else {
                    v
                };
                v.to_le_bytes()
            })
            .take((THREADS * 8) as usize)
            .collect();
        let ops2: Vec<u8> = (0..THREADS * 8).map(|_| rng.next_u64() as u8).collect();
        {
            let m = g.memory();
            for (base, out) in [(SLOTS_K, OUT_K), (SLOTS_R, OUT_R)] {
                m[base as usize..base as usize + slots].copy_from_slice(&init);
                m[out as usize..(out + THREADS * 8) as usize].fill(0xee);
            }
            m[OPS as usize..(OPS + THREADS * 8) as usize].copy_from_slice(&ops);
            m[OPS2 as usize..(OPS2 + THREADS * 8) as usize].copy_from_slice(&ops2);
        }
        let f = g.func_index(&format!("k_{n}"), cases.len());
        let errno = g.go(f, (THREADS / 128) as i32, 128, SLOTS_K, OUT_K);
        assert_eq!(errno, 0, "{}: {}", case.name, g.last_error());
        for t in 0..THREADS {
            g.reference(&format!("r_{n}"), t, SLOTS_R, OUT_R)
                .unwrap_or_else(|e| panic!("{} reference, thread {t}: {e}", case.name));
        }
        let m = g.memory();
        if case.ty == "f32" {
            // NaN sums: Wasm leaves the payload open (the GPU's add gives
            // the canonical NaN, the host's keeps the operand's); any NaN
            // matches any NaN, so the reference takes the kernel's bits.
            for t in 0..THREADS {
                let at = (16 * t + ((4 * t) & 7)) as usize;
                let word = |base: u32| {
                    let i = base as usize + at;
                    f32::from_le_bytes(m[i..i + 4].try_into().unwrap())
                };
                if word(SLOTS_K).is_nan() && word(SLOTS_R).is_nan() {
                    let (k, r) = (SLOTS_K as usize + at, SLOTS_R as usize + at);
                    m.copy_within(k..k + 4, r);
                }
            }
        }
        let (k, r) = (
            &m[SLOTS_K as usize..SLOTS_K as usize + slots],
            &m[SLOTS_R as usize..SLOTS_R as usize + slots],
        );
        if let Some(i) = (0..slots).find(|&i| k[i] != r[i]) {
            panic!(
                "{}: memory differs at slot byte {i} (thread {}): kernel {:02x?}, wasmtime {:02x?}",
                case.name,
                i / 16,
                &k[i & !15..(i & !15) + 16],
                &r[i & !15..(i & !15) + 16]
            );
        }
        let (k, r) = (
            &m[OUT_K as usize..(OUT_K + THREADS * 8) as usize],
            &m[OUT_R as usize..(OUT_R + THREADS * 8) as usize],
        );
        if let Some(t) = (0..THREADS as usize).find(|&t| k[8 * t..8 * t + 8] != r[8 * t..8 * t + 8])
        {
            panic!(
                "{}: thread {t}'s old value: kernel {:02x?}, wasmtime {:02x?}",
                case.name,
                &k[8 * t..8 * t + 8],
                &r[8 * t..8 * t + 8]
            );
        }
        // Misaligned: both sides trap (one thread; the next launch runs).
        if case.bytes > 1 {
            let f = g.func_index(&format!("m_{n}"), cases.len());
            let errno = g.go(f, 1, 1, SLOTS_K, OUT_K);
            let text = g.last_error();
            assert_eq!(
                errno,
                tensorwasm_core::abi::Errno::ETRAP.code(),
                "{} misaligned: {text}",
                case.name
            );
            assert!(
                text.contains("unaligned atomic (code 12)"),
                "{}: {text}",
                case.name
            );
            let err = g
                .reference(&format!("rm_{n}"), 0, SLOTS_R, OUT_R)
                .expect_err("wasmtime traps too");
            assert!(
                err.contains("misaligned") || err.contains("unaligned"),
                "{}: wasmtime: {err}",
                case.name
            );
        }
    }
    contention(&mut g, cases.len());
}

fn contention<D>(g: &mut Guest<D>, cases: usize)
where
    D: KernelTarget + ManagedAllocator + Clone + 'static,
    <D as ManagedAllocator>::Region: Sync,
{
    let blocks = (CONTENDERS / 256) as i32;
    let word =
        |m: &[u8], at: u32| u32::from_le_bytes(m[at as usize..at as usize + 4].try_into().unwrap());
    // One counter.
    g.memory()[SHARED as usize..SHARED as usize + 4].copy_from_slice(&5u32.to_le_bytes());
    let errno = g.go(g.func_index("counter", cases), blocks, 256, SHARED, OUT_K);
    assert_eq!(errno, 0, "counter: {}", g.last_error());
    let m = g.memory();
    assert_eq!(word(m, SHARED), 5 + CONTENDERS, "the counter");
    let mut olds: Vec<u32> = (0..CONTENDERS).map(|t| word(m, OUT_K + 4 * t)).collect();
    olds.sort_unstable();
    assert_eq!(olds, (5..5 + CONTENDERS).collect::<Vec<_>>(), "old values");
    // Bytes of shared words: each of 64 bytes gets 64 increments; the
    // bytes around them stay.
    let init: Vec<u8> = (0..72u8).map(|i| i.wrapping_mul(37)).collect();
    g.memory()[SHARED as usize..SHARED as usize + 72].copy_from_slice(&init);
    let errno = g.go(g.func_index("bytes", cases), blocks, 256, SHARED, OUT_K);
    assert_eq!(errno, 0, "bytes: {}", g.last_error());
    let m = g.memory();
    for i in 0..72 {
        let want = if i < 64 {
            init[i].wrapping_add(64)
        } else {
            init[i]
        };
        assert_eq!(m[SHARED as usize + i], want, "byte {i}");
    }
    // f32 and i64 sums.
    g.memory()[SHARED as usize..SHARED as usize + 16].fill(0);
    let errno = g.go(g.func_index("sums", cases), blocks, 256, SHARED, OUT_K);
    assert_eq!(errno, 0, "sums: {}", g.last_error());
    let m = g.memory();
    assert_eq!(
        f32::from_bits(word(m, SHARED)),
        CONTENDERS as f32,
        "f32 sum"
    );
    let sum = u64::from_le_bytes(
        m[SHARED as usize + 8..SHARED as usize + 16]
            .try_into()
            .unwrap(),
    );
    assert_eq!(
        sum,
        u64::from(CONTENDERS) * u64::from(CONTENDERS - 1) / 2,
        "i64 sum"
    );
    // Compare-and-swap retries.
    g.memory()[SHARED as usize..SHARED as usize + 4].fill(0);
    let errno = g.go(g.func_index("cas_loop", cases), blocks, 256, SHARED, OUT_K);
    assert_eq!(errno, 0, "cas_loop: {}", g.last_error());
    assert_eq!(word(g.memory(), SHARED), CONTENDERS, "cas increments");
    // The stack window: base = sp0 - 16 + 4 is in every thread's window.
    g.memory()[0x8000 - 16..0x8000].fill(0xab);
    let errno = g.go(g.func_index("window", cases), 2, 128, 0x8000 - 12, OUT_K);
    assert_eq!(errno, 0, "window: {}", g.last_error());
    let m = g.memory();
    for t in 0..256 {
        assert_eq!(word(m, OUT_K + 8 * t), t + 1000, "thread {t}'s frame word");
        assert_eq!(
            word(m, OUT_K + 8 * t + 4),
            7 + t,
            "thread {t}'s word through base"
        );
    }
    assert!(
        m[0x8000 - 16..0x8000].iter().all(|&b| b == 0xab),
        "the guest's bytes under the windows"
    );
}

#[test]
fn atomics_match_wasmtime_on_the_cpu_driver() {
    let driver = CpuDriver::with_capacity(1 << 30).unwrap();
    atomics_match_wasmtime(&GuestRuntime::new(driver, 64 << 20).unwrap());
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn atomics_match_wasmtime_on_the_gpu() {
    let driver = CudaDriver::new(0).expect("a CUDA device");
    atomics_match_wasmtime(&GuestRuntime::new(driver, 64 << 20).unwrap());
}

/// Every kernel of the guest lowered to PTX for sm_75, sm_80 and sm_90 into
/// `target/ptx-out/kernel_atomics.<export>.sm_XX.ptx`, which
/// `scripts/check-ptx.sh` assembles (the intrinsics' `atom.min`/`atom.max`
/// rows have no Wasm operator, so `kernel_ops` cannot reach them).
#[test]
fn ptx_for_every_atomic_kernel() {
    use tensorwasm_core::lower::Lowerer;
    use tensorwasm_core::lower::translate::{function_by_export, translate_kernel};
    let cases = cases();
    let wasm = wat::parse_str(guest(&cases)).expect("the guest parses");
    let out = ptx_out::ptx_out_dir();
    let mut exports: Vec<String> = (0..cases.len())
        .flat_map(|n| [format!("k_{n}"), format!("m_{n}")])
        .collect();
    exports.extend(["counter", "bytes", "sums", "cas_loop", "window"].map(String::from));
    for export in &exports {
        let index = function_by_export(&wasm, export).expect("an export");
        let kernel = translate_kernel(&wasm, index).unwrap_or_else(|e| panic!("{export}: {e}"));
        for target in ptx_out::ptx_targets() {
            let sm = target.sm;
            let ptx = target
                .lower(&kernel.name, &kernel.function, kernel.abi)
                .unwrap_or_else(|e| panic!("{export} for sm_{}{}: {e}", sm.0, sm.1));
            if let Some(dir) = &out {
                let file = format!("kernel_atomics.{export}.sm_{}{}.ptx", sm.0, sm.1);
                std::fs::write(dir.join(file), &ptx).expect("write PTX");
            }
        }
    }
}
