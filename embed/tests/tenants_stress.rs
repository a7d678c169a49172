//! Many untrusted tenants on one device at once: N tenants, each on its own
//! OS thread, share one [`GuestRuntime`] (one driver, one device, one kernel
//! cache) and drive a real guest through random work: Wasm-kernel launches,
//! built-in tensor ops over guest memory and over device buffers, every
//! result checked by the host. Some tenants misbehave on purpose (a kernel
//! that stores out of bounds, quotas overrun, kernels and guest code that
//! never end) and must be stopped without harming anyone, themselves
//! included: their later results must still be right. Afterwards every
//! ledger is empty and the driver has every byte back. The same run is
//! generic over the driver: CPU in CI, CUDA on the device machine
//! (`--include-ignored`; scripts/pack-gpu-tests.sh packs this file).
//!
//! Also here: one tenant's handles are nothing to another, and raw PTX needs
//! a trusted tenant.

#[allow(dead_code)] // the import list, the seeded generator; the rest is for other suites
mod common;

use std::{
    fmt::Write as _,
    sync::Arc,
    time::{Duration, Instant},
};

use common::IMPORTS;
use tensorwasm_core::{
    DriverKind, ManagedAllocator,
    abi::{
        ArgDescriptor, Errno, Handle, encode_args,
        tensor::{DType, OperandDescriptor, TensorHeader, TensorOpKind, encode_tensor_op},
    },
    quota::{QuotaLedger, Resource, TenantQuota},
};
use tensorwasm_cpu::CpuDriver;
use tensorwasm_cuda::CudaDriver;
use tensorwasm_embed::{
    kernel::{GuestModule, KernelTarget},
    runtime::GuestRuntime,
    tenant::{Tenant, TenantConfig},
    twins,
};
use tensorwasm_kernels::oracle;
use wasmtime::{Instance, Memory, Trap, Val};

/// A driver the stress run works on: one value, cloned into every tenant's
/// context, used from every tenant's thread.
trait Device: KernelTarget + ManagedAllocator<Region: Sync> + Clone + Send + Sync + 'static {}

impl<T> Device for T where
    T: KernelTarget + ManagedAllocator<Region: Sync> + Clone + Send + Sync + 'static
{
}

// ---------------------------------------------------------------------------
// The guest.

/// `wasi_cuda` imports the shared test guest's list lacks.
const MORE_IMPORTS: &[(&str, &[&str])] = &[("kernel_get", &["i32", "i32"])];
/// The `wasi_cuda` imports, which come first in the function index space.
const WASI_IMPORTS: u32 = (IMPORTS.len() + MORE_IMPORTS.len()) as u32;
/// `$vadd_kernel(a, b, c, n)`: after the three intrinsics and `$global_id`.
const VADD_KERNEL: u32 = WASI_IMPORTS + 4;
/// `$oob_kernel(n)`: every thread stores one word past the memory's end.
const OOB_KERNEL: u32 = WASI_IMPORTS + 5;
/// `$spin_kernel(n)`: loops until its fuel runs out.
const SPIN_KERNEL: u32 = WASI_IMPORTS + 6;

/// The stress guest: every `wasi_cuda` import wrapped in an export of the
/// same name (as `common::test_guest_wat`), three Wasm kernels, `grow` and
/// `size` for `memory.grow` from inside the guest, and `spin`, guest code
/// that never returns.
fn stress_guest_wat() -> String {
    let mut wat = String::from("(module\n");
    let params = |p: &[&str]| {
        if p.is_empty() {
            String::new()
        } else {
            format!(" (param {})", p.join(" "))
        }
    };
    for (name, p) in IMPORTS.iter().chain(MORE_IMPORTS) {
        let _ = writeln!(
            wat,
            "  (import \"wasi_cuda\" \"{name}\" (func ${name}{} (result i32)))",
            params(p)
        );
    }
    wat.push_str(
        r#"  (import "tensorwasm_kernel" "thread_idx_x" (func $thread_idx_x (result i32)))
  (import "tensorwasm_kernel" "block_idx_x" (func $block_idx_x (result i32)))
  (import "tensorwasm_kernel" "block_dim_x" (func $block_dim_x (result i32)))
  (memory (export "memory") 1)
  (func $global_id (result i32)
    (i32.add (i32.mul (call $block_idx_x) (call $block_dim_x)) (call $thread_idx_x)))
  (func $vadd_kernel (param $a i32) (param $b i32) (param $c i32) (param $n i32)
    (local $i i32) (local $at i32)
    (local.set $i (call $global_id))
    (if (i32.lt_u (local.get $i) (local.get $n))
      (then
        (local.set $at (i32.shl (local.get $i) (i32.const 2)))
        (f32.store (i32.add (local.get $c) (local.get $at))
          (f32.add (f32.load (i32.add (local.get $a) (local.get $at)))
                   (f32.load (i32.add (local.get $b) (local.get $at))))))))
  (func $oob_kernel (param $n i32)
    (i32.store (i32.add (i32.shl (memory.size) (i32.const 16))
                        (i32.shl (call $global_id) (i32.const 2)))
               (local.get $n)))
  (func $spin_kernel (param $n i32)
    (loop $forever (br $forever)))
"#,
    );
    for (name, p) in IMPORTS.iter().chain(MORE_IMPORTS) {
        let gets: String = (0..p.len()).map(|i| format!("local.get {i} ")).collect();
        let _ = writeln!(
            wat,
            "  (func (export \"{name}\"){} (result i32) {gets}call ${name})",
            params(p)
        );
    }
    wat.push_str(
        r#"  (func (export "grow") (param i32) (result i32) (memory.grow (local.get 0)))
  (func (export "size") (result i32) (memory.size))
  (func (export "spin") (result i32) (loop $forever (br $forever)) (i32.const 0))
)
"#,
    );
    wat
}

/// Out-pointer of handle-writing calls (8-aligned).
const OUT: u32 = 0x40;
/// Where argument descriptors go (8-aligned).
const ARGS: u32 = 0x400;
/// Where tensor-op descriptors go.
const DESC: u32 = 0x800;
/// Where PTX text goes.
const TEXT: u32 = 0x2000;
/// The first byte of the per-operation arena.
const HEAP: u32 = 0x1_0000;
/// Wasm pages are 64 KiB.
const PAGE: u64 = 64 << 10;
/// Threads per block of a Wasm-kernel launch.
const BLOCK: u32 = 256;

/// A value for out-pointers of calls that must fail: they must not write.
const SENTINEL: u64 = 0x5a5a_0bad_f00d_5a5a;

// ---------------------------------------------------------------------------
// Random inputs.

/// One tenant's stream, seeded from the run's printed seed, so
/// `TENSORWASM_SEED` replays every tenant's choices (not the interleaving).
type TenantRng = common::Rng;

// ---------------------------------------------------------------------------
// One tenant's guest, driven call by call.

/// A tenant with the stress guest instantiated in it.
struct TenantGuest<D: Device> {
    tenant: Tenant<D>,
    instance: Instance,
    memory: Memory,
}

impl<D: Device> TenantGuest<D> {
    fn new(runtime: &GuestRuntime<D>, module: &GuestModule, config: &TenantConfig) -> Self {
        let mut tenant = Tenant::new(runtime, config).expect("tenant");
        let instance = futures::executor::block_on(tenant.instantiate(runtime, module))
            .expect("instantiate the stress guest");
        let memory = instance
            .get_memory(tenant.store_mut(), "memory")
            .expect("the guest exports memory");
        TenantGuest {
            tenant,
            instance,
            memory,
        }
    }

    fn ledger(&self) -> &Arc<QuotaLedger> {
        self.tenant.ledger()
    }

    /// Calls export `name`; a trap is an error (text), else its `i32`.
    fn try_call(&mut self, name: &str, args: &[Val]) -> Result<i32, wasmtime::Error> {
        let store = self.tenant.store_mut();
        let func = self
            .instance
            .get_func(&mut *store, name)
            .unwrap_or_else(|| panic!("the stress guest exports no `{name}`"));
        let mut results = [Val::I32(0)];
        futures::executor::block_on(func.call_async(&mut *store, args, &mut results))?;
        Ok(results[0].unwrap_i32())
    }

    fn call(&mut self, name: &str, args: &[Val]) -> Result<i32, String> {
        self.try_call(name, args)
            .map_err(|e| format!("calling `{name}` trapped: {e:#}"))
    }

    fn last_error(&self) -> String {
        self.tenant.store().data().cuda.last_error().to_string()
    }

    /// `Ok` for errno 0, else what failed and the guest's last error.
    fn ok(&self, what: &str, errno: i32) -> Result<(), String> {
        if errno == 0 {
            Ok(())
        } else {
            Err(format!("{what}: errno {errno}: {}", self.last_error()))
        }
    }

    /// `Ok` when `errno` is `want` and the last error says `text`.
    fn refused(&self, what: &str, errno: i32, want: Errno, text: &str) -> Result<(), String> {
        let last = self.last_error();
        if errno != want.code() {
            Err(format!(
                "{what}: errno {errno}, want {want} ({}); last error {last:?}",
                want.code()
            ))
        } else if !last.contains(text) {
            Err(format!("{what}: last error {last:?} does not say {text:?}"))
        } else {
            Ok(())
        }
    }

    fn mem_size(&self) -> u64 {
        self.memory.data_size(self.tenant.store()) as u64
    }

    fn write(&mut self, at: u32, bytes: &[u8]) {
        let at = at as usize;
        self.memory.data_mut(self.tenant.store_mut())[at..at + bytes.len()].copy_from_slice(bytes);
    }

    fn read(&self, at: u32, len: usize) -> &[u8] {
        let at = at as usize;
        &self.memory.data(self.tenant.store())[at..at + len]
    }

    fn read_u64(&self, at: u32) -> u64 {
        u64::from_le_bytes(self.read(at, 8).try_into().expect("8 bytes"))
    }

    fn write_u64(&mut self, at: u32, v: u64) {
        self.write(at, &v.to_le_bytes());
    }

    fn write_f32s(&mut self, at: u32, values: &[f32]) {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.write(at, &bytes);
    }

    fn read_f32s(&self, at: u32, n: usize) -> Vec<f32> {
        self.read(at, n * 4)
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect()
    }

    /// `kernel_get(index)`: the errno; the handle at [`OUT`].
    fn kernel_get(&mut self, index: u32) -> Result<i32, String> {
        self.call("kernel_get", &[i32v(index), i32v(OUT)])
    }

    /// `launch` over `grid` x `block` threads with `args` at [`ARGS`]: the
    /// errno; the handle at [`OUT`].
    fn launch(
        &mut self,
        function: u64,
        grid: u32,
        block: u32,
        args: &[ArgDescriptor],
    ) -> Result<i32, String> {
        self.write(ARGS, &encode_args(args));
        let mut v = vec![i64v(function)];
        v.extend([grid, 1, 1, block, 1, 1, 0, ARGS, args.len() as u32, OUT].map(i32v));
        self.call("launch", &v)
    }

    /// `tensor_op` with the descriptor at [`DESC`]: the errno; the handle at
    /// [`OUT`].
    fn tensor_op(
        &mut self,
        header: &TensorHeader,
        operands: &[OperandDescriptor],
    ) -> Result<i32, String> {
        let desc = encode_tensor_op(header, operands);
        self.write(DESC, &desc);
        self.call(
            "tensor_op",
            &[i32v(DESC), i32v(desc.len() as u32), i32v(OUT)],
        )
    }

    fn wait(&mut self, launch: u64) -> Result<i32, String> {
        self.call("wait", &[i64v(launch)])
    }

    /// `buffer_alloc(size)`: the errno; the handle at [`OUT`].
    fn buffer_alloc(&mut self, size: u64) -> Result<i32, String> {
        self.call("buffer_alloc", &[i64v(size), i32v(OUT)])
    }

    fn buffer_free(&mut self, buffer: u64) -> Result<i32, String> {
        self.call("buffer_free", &[i64v(buffer)])
    }

    fn buffer_size(&mut self, buffer: u64, out: u32) -> Result<i32, String> {
        self.call("buffer_size", &[i64v(buffer), i32v(out)])
    }

    fn copy_to_buffer(&mut self, dst: u64, src: u32, len: u32) -> Result<i32, String> {
        self.call(
            "copy_to_buffer",
            &[i64v(dst), i64v(0), i32v(src), i32v(len)],
        )
    }

    fn copy_from_buffer(&mut self, dst: u32, src: u64, len: u32) -> Result<i32, String> {
        self.call(
            "copy_from_buffer",
            &[i32v(dst), i64v(src), i64v(0), i32v(len)],
        )
    }

    /// `memory.grow(pages)` from inside the guest: the old size, or -1.
    fn grow(&mut self, pages: u32) -> Result<i32, String> {
        self.call("grow", &[i32v(pages)])
    }

    /// A fresh function handle of the guest's function `index`.
    fn kernel(&mut self, index: u32) -> u64 {
        let e = self.kernel_get(index).expect("kernel_get");
        assert_eq!(e, 0, "kernel_get({index}): {}", self.last_error());
        self.read_u64(OUT)
    }
}

fn i32v(v: u32) -> Val {
    Val::I32(v as i32)
}

fn i64v(v: u64) -> Val {
    Val::I64(v as i64)
}

/// `vadd_kernel(a, b, c, n)`'s arguments: guest offsets are `i32` values.
fn vadd_args(a: u32, b: u32, c: u32, n: usize) -> [ArgDescriptor; 4] {
    [a, b, c, n as u32].map(|v| ArgDescriptor::i32(v as i32))
}

/// Blocks of [`BLOCK`] threads for `n` elements.
fn blocks(n: usize) -> u32 {
    (n as u32).div_ceil(BLOCK).max(1)
}

/// Checks `c == a + b` bit for bit.
fn check_vadd(a: &[f32], b: &[f32], c: &[f32]) -> Result<(), String> {
    for (i, ((x, y), z)) in a.iter().zip(b).zip(c).enumerate() {
        if (x + y).to_bits() != z.to_bits() {
            return Err(format!(
                "vadd of {} elements: element {i} is {z:e}, want {x:e} + {y:e} = {:e}",
                a.len(),
                x + y
            ));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Roles and sizes.

/// What a tenant does besides honest work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    /// Only honest work.
    Honest,
    /// Launches a kernel that stores out of bounds (`wait`: `ETRAP`).
    Trapper,
    /// Asks for more device bytes, launches in flight and guest memory
    /// than its quota allows.
    QuotaHog,
    /// Launches a kernel that never ends on its own (`ETRAP`, out of fuel).
    Looper,
    /// Half way through, queues launches and then runs guest code that
    /// never returns: wasmtime ends it (out of fuel) and the tenant is
    /// dropped with its launches in flight.
    Runaway,
}

const ROLES: [Role; 5] = [
    Role::Honest,
    Role::Trapper,
    Role::QuotaHog,
    Role::Looper,
    Role::Runaway,
];

impl Role {
    /// Tenant `i` of `n`: the last one runs away; of every eight, one
    /// traps, one overruns quotas and one loops; the others are honest.
    fn of(i: usize, n: usize) -> Role {
        if i + 1 == n {
            return Role::Runaway;
        }
        match i % 8 {
            2 => Role::Trapper,
            4 => Role::QuotaHog,
            6 => Role::Looper,
            _ => Role::Honest,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Role::Honest => "honest",
            Role::Trapper => "trapper",
            Role::QuotaHog => "quota hog",
            Role::Looper => "looper",
            Role::Runaway => "runaway",
        }
    }
}

/// How big a run is, and the quota of its tenants.
#[derive(Clone, Copy)]
struct Scale {
    tenants: usize,
    /// Operations per tenant (the runaway stops half way).
    ops: usize,
    /// The most elements of a vector add or an element-wise op.
    max_elems: u64,
    /// The most of each of a GEMM's M, N and K.
    max_gemm: u64,
    /// The most rows and columns of a softmax.
    max_rows: u64,
    max_cols: u64,
    /// The most elements of a device-buffer op (two buffers of them).
    max_buffer_elems: u64,
    /// Bytes of guest memory the host grows each guest to at the start.
    arena: u64,
    /// Device-buffer bytes each tenant may hold.
    device_bytes: u64,
    /// Launches each tenant may have in flight.
    launches_in_flight: u64,
    /// Fuel of each thread of a Wasm kernel.
    kernel_fuel: u64,
    /// Threads of a spinning kernel launch (one block).
    spin_threads: u32,
    /// Guest fuel of the runaway tenant: plenty for its honest half, gone
    /// in a moment once it spins.
    runaway_fuel: u64,
}

impl Scale {
    /// Guest-memory quota: the arena and two spare pages.
    fn guest_memory(&self) -> u64 {
        self.arena + 2 * PAGE
    }

    /// Each guest memory's reservation: twice its quota, so a refused
    /// `memory.grow` is the quota's doing, not the reservation's.
    fn memory_limit(&self) -> usize {
        2 * self.guest_memory() as usize
    }

    fn quota(&self) -> TenantQuota {
        TenantQuota::default()
            .with_device_bytes(self.device_bytes)
            .with_guest_memory_bytes(self.guest_memory())
            .with_launches_in_flight(self.launches_in_flight)
            .with_kernel_fuel(self.kernel_fuel)
    }
}

/// CI: 8 tenants x 100 operations, small sizes, on 2 cores.
const CPU_SCALE: Scale = Scale {
    tenants: 8,
    ops: 100,
    max_elems: 64 << 10,
    max_gemm: 64,
    max_rows: 64,
    max_cols: 1024,
    max_buffer_elems: 64 << 10,
    arena: 1 << 20,
    device_bytes: 1 << 20,
    launches_in_flight: 8,
    kernel_fuel: 1 << 12,
    spin_threads: 32,
    runaway_fuel: 2_000_000,
};

/// The device machine: 32 tenants x 1000 operations, up to 4 MiB a vector.
const GPU_SCALE: Scale = Scale {
    tenants: 32,
    ops: 1000,
    max_elems: 1 << 20,
    max_gemm: 256,
    max_rows: 256,
    max_cols: 4096,
    max_buffer_elems: 1 << 20,
    arena: 16 << 20,
    device_bytes: 16 << 20,
    launches_in_flight: 16,
    kernel_fuel: 1 << 20,
    spin_threads: 256,
    runaway_fuel: 20_000_000,
};

/// What one tenant did.
#[derive(Clone, Copy, Debug, Default)]
struct Stats {
    ops: u64,
    /// Launches and tensor ops the driver queued.
    launches: u64,
    /// Results the host checked against its reference.
    checked: u64,
    /// Refusals the tenant provoked: `EQUOTA`, `memory.grow` of -1.
    refusals: u64,
    /// `ETRAP` from `wait`.
    kernel_traps: u64,
    /// Guest code ended by wasmtime for want of fuel.
    fuel_traps: u64,
    busy: Duration,
}

impl Stats {
    fn add(&mut self, o: &Stats) {
        self.ops += o.ops;
        self.launches += o.launches;
        self.checked += o.checked;
        self.refusals += o.refusals;
        self.kernel_traps += o.kernel_traps;
        self.fuel_traps += o.fuel_traps;
        self.busy += o.busy;
    }
}

/// What a tenant's thread hands back.
struct TenantReport {
    name: String,
    role: Role,
    stats: Stats,
    failures: Vec<String>,
    /// The tenant's ledger, which outlives it.
    ledger: Arc<QuotaLedger>,
}

// ---------------------------------------------------------------------------
// One tenant's run.

/// A launch queued and not yet waited for, with what its result must be.
enum Pending {
    Vadd { a: Vec<f32>, b: Vec<f32>, c: u32 },
    Relu { x: Vec<f32>, y: u32 },
}

struct TenantRun<'s, D: Device> {
    guest: TenantGuest<D>,
    scale: &'s Scale,
    role: Role,
    rng: TenantRng,
    stats: Stats,
    vadd: u64,
    oob: u64,
    spin: u64,
    /// The next free arena byte.
    next: u32,
}

impl<D: Device> TenantRun<'_, D> {
    /// Starts a fresh arena: what earlier operations left there is dead.
    fn reset(&mut self) {
        self.next = HEAP;
    }

    /// `bytes` of the arena, 256-aligned.
    fn alloc(&mut self, bytes: u64) -> Result<u32, String> {
        let at = self.next;
        let end = u64::from(at) + bytes;
        if end > self.guest.mem_size() {
            return Err(format!(
                "the arena ({} bytes) has no room for {bytes} more at {at:#x}: the scale is wrong",
                self.scale.arena
            ));
        }
        self.next = (end.div_ceil(256) * 256) as u32;
        Ok(at)
    }

    fn put(&mut self, values: &[f32]) -> Result<u32, String> {
        let at = self.alloc(values.len() as u64 * 4)?;
        self.guest.write_f32s(at, values);
        Ok(at)
    }

    /// `n` NaNs, which no operation here produces: a result that was never
    /// written fails its check.
    fn put_nans(&mut self, n: usize) -> Result<u32, String> {
        self.put(&vec![f32::NAN; n])
    }

    fn launched(&mut self, what: &str, errno: i32) -> Result<u64, String> {
        self.guest.ok(what, errno)?;
        self.stats.launches += 1;
        Ok(self.guest.read_u64(OUT))
    }

    fn wait_ok(&mut self, what: &str, launch: u64) -> Result<(), String> {
        let e = self.guest.wait(launch)?;
        self.guest.ok(&format!("wait ({what})"), e)
    }

    fn checked(&mut self, what: &str, result: Result<(), String>) -> Result<(), String> {
        result.map_err(|e| format!("{what}: wrong result: {e}"))?;
        self.stats.checked += 1;
        Ok(())
    }

    /// Nothing is held between operations: no launch in flight, no buffer.
    fn holds_nothing(&self, after: &str) -> Result<(), String> {
        for r in [Resource::LaunchesInFlight, Resource::DeviceBytes] {
            let held = self.guest.ledger().in_use(r);
            if held != 0 {
                return Err(format!("after {after}: {held} {r} still charged"));
            }
        }
        Ok(())
    }

    // -- honest work --------------------------------------------------------

    /// A Wasm kernel's vector add of a random size, in guest memory.
    fn vadd(&mut self) -> Result<(), String> {
        let n = self.rng.size(self.scale.max_elems) as usize;
        self.vadd_n(n)
    }

    fn vadd_n(&mut self, n: usize) -> Result<(), String> {
        self.reset();
        let a = self.rng.floats(n);
        let b = self.rng.floats(n);
        let (a_at, b_at, c_at) = (self.put(&a)?, self.put(&b)?, self.put_nans(n)?);
        let e = self
            .guest
            .launch(self.vadd, blocks(n), BLOCK, &vadd_args(a_at, b_at, c_at, n))?;
        let h = self.launched("launch vadd", e)?;
        self.wait_ok("vadd", h)?;
        let c = self.guest.read_f32s(c_at, n);
        self.checked("vadd", check_vadd(&a, &b, &c))
    }

    /// A built-in op over guest memory: add, relu, softmax or a small GEMM.
    fn tensor_op(&mut self) -> Result<(), String> {
        self.reset();
        match self.rng.below(4) {
            0 => self.add(),
            1 => self.relu(),
            2 => self.softmax(),
            _ => self.gemm(),
        }
    }

    fn add(&mut self) -> Result<(), String> {
        let n = self.rng.size(self.scale.max_elems);
        let cols = self.rng.size(n.min(4096));
        let rows = (n / cols).max(1);
        let n = (rows * cols) as usize;
        let bias = self.rng.below(2) == 0;
        let period = if bias { cols as usize } else { n };
        let a = self.rng.floats(n);
        let b = self.rng.floats(period);
        let (a_at, b_at, y_at) = (self.put(&a)?, self.put(&b)?, self.put_nans(n)?);
        let b_shape: &[u64] = if bias { &[cols] } else { &[rows, cols] };
        let e = self.guest.tensor_op(
            &TensorHeader::new(TensorOpKind::Add),
            &[
                OperandDescriptor::guest(a_at, DType::F32, &[rows, cols]),
                OperandDescriptor::guest(b_at, DType::F32, b_shape),
                OperandDescriptor::guest(y_at, DType::F32, &[rows, cols]),
            ],
        )?;
        let what = format!("add [{rows}, {cols}] + {b_shape:?}");
        let h = self.launched(&what, e)?;
        self.wait_ok(&what, h)?;
        let want = oracle::add(&oracle::widen(&a), &oracle::widen(&b), period);
        let got = self.guest.read_f32s(y_at, n);
        let r = oracle::check_close(&got, &want, oracle::F32_ROUNDED_RTOL, 0.0);
        self.checked(&what, r)
    }

    fn relu(&mut self) -> Result<(), String> {
        let n = self.rng.size(self.scale.max_elems);
        let cols = self.rng.size(n.min(1024));
        let shape = [(n / cols).max(1), cols];
        let n = (shape[0] * shape[1]) as usize;
        let x = self.rng.floats(n);
        let (x_at, y_at) = (self.put(&x)?, self.put_nans(n)?);
        let e = self.guest.tensor_op(
            &TensorHeader::new(TensorOpKind::Relu),
            &[
                OperandDescriptor::guest(x_at, DType::F32, &shape),
                OperandDescriptor::guest(y_at, DType::F32, &shape),
            ],
        )?;
        let what = format!("relu {shape:?}");
        let h = self.launched(&what, e)?;
        self.wait_ok(&what, h)?;
        let want = oracle::relu(&oracle::widen(&x));
        let r = oracle::check_close(&self.guest.read_f32s(y_at, n), &want, 0.0, 0.0);
        self.checked(&what, r)
    }

    fn softmax(&mut self) -> Result<(), String> {
        let rows = self.rng.size(self.scale.max_rows);
        let cols = self.rng.size(self.scale.max_cols);
        let n = (rows * cols) as usize;
        let x: Vec<f32> = self.rng.floats(n).iter().map(|v| v * 4.0).collect();
        let (x_at, y_at) = (self.put(&x)?, self.put_nans(n)?);
        let mut header = TensorHeader::new(TensorOpKind::Softmax);
        header.axis = -1;
        let e = self.guest.tensor_op(
            &header,
            &[
                OperandDescriptor::guest(x_at, DType::F32, &[rows, cols]),
                OperandDescriptor::guest(y_at, DType::F32, &[rows, cols]),
            ],
        )?;
        let what = format!("softmax [{rows}, {cols}]");
        let h = self.launched(&what, e)?;
        self.wait_ok(&what, h)?;
        let want = oracle::softmax(&oracle::widen(&x), rows as usize, cols as usize);
        let (rtol, atol) = oracle::softmax_tolerance(cols as usize);
        let r = oracle::check_close(&self.guest.read_f32s(y_at, n), &want, rtol, atol);
        self.checked(&what, r)
    }

    fn gemm(&mut self) -> Result<(), String> {
        let max = self.scale.max_gemm;
        let (m, n, k) = (self.rng.size(max), self.rng.size(max), self.rng.size(max));
        let (mu, nu, ku) = (m as usize, n as usize, k as usize);
        let a = self.rng.floats(mu * ku);
        let b = self.rng.floats(ku * nu);
        let c = self.rng.floats(mu * nu);
        let beta = if self.rng.below(2) == 0 { 0.0 } else { 0.5 };
        let (a_at, b_at, c_at) = (self.put(&a)?, self.put(&b)?, self.put(&c)?);
        let mut header = TensorHeader::new(TensorOpKind::Gemm);
        header.alpha = 1.25;
        header.beta = beta;
        let e = self.guest.tensor_op(
            &header,
            &[
                OperandDescriptor::guest(a_at, DType::F32, &[m, k]),
                OperandDescriptor::guest(b_at, DType::F32, &[k, n]),
                OperandDescriptor::guest(c_at, DType::F32, &[m, n]),
            ],
        )?;
        let what = format!("gemm f32 {m}x{n}x{k} beta {beta}");
        let h = self.launched(&what, e)?;
        self.wait_ok(&what, h)?;
        let (a, b, c0) = (oracle::widen(&a), oracle::widen(&b), oracle::widen(&c));
        let beta = f64::from(beta);
        let want = oracle::gemm(&a, &b, &c0, mu, nu, ku, ku, nu, nu, 1.25, beta);
        let scale = oracle::gemm_abs(&a, &b, &c0, mu, nu, ku, ku, nu, nu, 1.25, beta);
        let got = self.guest.read_f32s(c_at, mu * nu);
        let rtol = oracle::gemm_rtol(oracle::GemmPrecision::F32, ku);
        let r = oracle::check_close_scaled(&got, &want, &scale, rtol);
        self.checked(&what, r)
    }

    /// Device buffers: alloc, copy in, a built-in op over the buffer (relu,
    /// or add of a bias row in guest memory), copy out, free.
    fn buffer_op(&mut self) -> Result<(), String> {
        self.reset();
        let n = self.rng.size(self.scale.max_buffer_elems) as usize;
        let bytes = n as u64 * 4;
        let x = self.rng.floats(n);
        let e = self.guest.buffer_alloc(bytes)?;
        self.guest.ok("buffer_alloc x", e)?;
        let xb = self.guest.read_u64(OUT);
        let e = self.guest.buffer_alloc(bytes)?;
        self.guest.ok("buffer_alloc y", e)?;
        let yb = self.guest.read_u64(OUT);
        let held = self.guest.ledger().in_use(Resource::DeviceBytes);
        if held != 2 * bytes {
            return Err(format!(
                "two buffers of {bytes} bytes: {held} bytes charged"
            ));
        }
        let src = self.put(&x)?;
        let e = self.guest.copy_to_buffer(xb, src, bytes as u32)?;
        self.guest.ok("copy_to_buffer", e)?;
        let x_desc = OperandDescriptor::buffer(Handle(xb), 0, DType::F32, &[n as u64]);
        let y_desc = OperandDescriptor::buffer(Handle(yb), 0, DType::F32, &[n as u64]);
        let (what, e, want) = if self.rng.below(2) == 0 {
            let e = self
                .guest
                .tensor_op(&TensorHeader::new(TensorOpKind::Relu), &[x_desc, y_desc])?;
            ("relu over buffers", e, oracle::relu(&oracle::widen(&x)))
        } else {
            let bias = self.rng.floats(n);
            let b_at = self.put(&bias)?;
            let b_desc = OperandDescriptor::guest(b_at, DType::F32, &[n as u64]);
            let e = self.guest.tensor_op(
                &TensorHeader::new(TensorOpKind::Add),
                &[x_desc, b_desc, y_desc],
            )?;
            let want = oracle::add(&oracle::widen(&x), &oracle::widen(&bias), n);
            ("add over buffers", e, want)
        };
        let what = format!("{what} of {n}");
        let h = self.launched(&what, e)?;
        self.wait_ok(&what, h)?;
        let dst = self.put_nans(n)?;
        let e = self.guest.copy_from_buffer(dst, yb, bytes as u32)?;
        self.guest.ok("copy_from_buffer", e)?;
        for b in [xb, yb] {
            let e = self.guest.buffer_free(b)?;
            self.guest.ok("buffer_free", e)?;
        }
        let got = self.guest.read_f32s(dst, n);
        let r = oracle::check_close(&got, &want, oracle::F32_ROUNDED_RTOL, 0.0);
        self.checked(&what, r)
    }

    fn honest_op(&mut self) -> Result<(), String> {
        match self.rng.below(20) {
            0..7 => self.vadd(),
            7..14 => self.tensor_op(),
            _ => self.buffer_op(),
        }
    }

    // -- misbehaviour -------------------------------------------------------

    /// A kernel storing past the end of memory: `ETRAP`, then a vector add
    /// that is right.
    fn trap_out_of_bounds(&mut self) -> Result<(), String> {
        let n = 1 + self.rng.below(4 * u64::from(BLOCK)) as usize;
        let e = self
            .guest
            .launch(self.oob, blocks(n), BLOCK, &[ArgDescriptor::i32(7)])?;
        let h = self.launched("launch oob_kernel", e)?;
        let e = self.guest.wait(h)?;
        self.guest.refused(
            "wait (out-of-bounds kernel)",
            e,
            Errno::ETRAP,
            "out-of-bounds memory access",
        )?;
        self.stats.kernel_traps += 1;
        self.vadd()
    }

    /// A kernel that loops until its fuel is gone: `ETRAP`, then a vector
    /// add that is right.
    fn trap_out_of_fuel(&mut self) -> Result<(), String> {
        let threads = self.scale.spin_threads;
        let e = self
            .guest
            .launch(self.spin, 1, threads, &[ArgDescriptor::i32(1)])?;
        let h = self.launched("launch spin_kernel", e)?;
        let e = self.guest.wait(h)?;
        self.guest
            .refused("wait (spinning kernel)", e, Errno::ETRAP, "out of fuel")?;
        self.stats.kernel_traps += 1;
        self.vadd()
    }

    /// Device bytes past the quota: `EQUOTA` alone, and with half of it
    /// held; the half goes back.
    fn overrun_device_bytes(&mut self) -> Result<(), String> {
        let limit = self.scale.device_bytes;
        const WHY: &str = "device-buffer bytes quota exceeded";
        self.guest.write_u64(OUT, SENTINEL);
        let e = self.guest.buffer_alloc(limit + 1)?;
        self.guest
            .refused("buffer_alloc(quota + 1)", e, Errno::EQUOTA, WHY)?;
        let half = limit / 2 + 64;
        let e = self.guest.buffer_alloc(half)?;
        self.guest.ok("buffer_alloc(half the quota)", e)?;
        let held = self.guest.read_u64(OUT);
        self.guest.write_u64(OUT, SENTINEL);
        let e = self.guest.buffer_alloc(half)?;
        self.guest
            .refused("buffer_alloc(half again)", e, Errno::EQUOTA, WHY)?;
        if self.guest.read_u64(OUT) != SENTINEL {
            return Err("a refused buffer_alloc wrote its out-pointer".into());
        }
        let e = self.guest.buffer_free(held)?;
        self.guest.ok("buffer_free", e)?;
        self.stats.refusals += 2;
        Ok(())
    }

    /// Launches twice its quota without waiting: past the quota each
    /// launch waits for the tenant's own oldest (docs/ABI.md, `launch`), so
    /// all are queued and the ledger never holds more than the quota; then
    /// every one is waited for and checked.
    fn overrun_launches(&mut self) -> Result<(), String> {
        self.reset();
        let limit = self.scale.launches_in_flight as usize;
        let mut queued = Vec::new();
        for i in 0..2 * limit {
            let n = 256 + self.rng.below(768) as usize;
            let (e, pending) = if i % 2 == 0 {
                let x = self.rng.floats(n);
                let (x_at, y) = (self.put(&x)?, self.put_nans(n)?);
                let e = self.guest.tensor_op(
                    &TensorHeader::new(TensorOpKind::Relu),
                    &[
                        OperandDescriptor::guest(x_at, DType::F32, &[n as u64]),
                        OperandDescriptor::guest(y, DType::F32, &[n as u64]),
                    ],
                )?;
                (e, Pending::Relu { x, y })
            } else {
                let a = self.rng.floats(n);
                let b = self.rng.floats(n);
                let (a_at, b_at, c) = (self.put(&a)?, self.put(&b)?, self.put_nans(n)?);
                let args = vadd_args(a_at, b_at, c, n);
                let e = self.guest.launch(self.vadd, blocks(n), BLOCK, &args)?;
                (e, Pending::Vadd { a, b, c })
            };
            let h = self.launched(&format!("launch {i} of a burst"), e)?;
            queued.push((h, pending));
        }
        let in_flight = self.guest.ledger().in_use(Resource::LaunchesInFlight);
        if in_flight > limit as u64 {
            return Err(format!(
                "{in_flight} launches charged, the quota is {limit}"
            ));
        }
        for (i, (h, pending)) in queued.into_iter().enumerate() {
            self.wait_ok(&format!("launch {i} of a burst"), h)?;
            match pending {
                Pending::Relu { x, y } => {
                    let want = oracle::relu(&oracle::widen(&x));
                    let got = self.guest.read_f32s(y, x.len());
                    let r = oracle::check_close(&got, &want, 0.0, 0.0);
                    self.checked("relu of a burst", r)?;
                }
                Pending::Vadd { a, b, c } => {
                    let got = self.guest.read_f32s(c, a.len());
                    self.checked("vadd of a burst", check_vadd(&a, &b, &got))?;
                }
            }
        }
        Ok(())
    }

    /// `memory.grow` past the guest-memory quota (but inside the
    /// reservation): -1, the size unchanged, the charge exactly the size.
    fn overrun_guest_memory(&mut self) -> Result<(), String> {
        let size = self.guest.mem_size();
        let room = self.scale.guest_memory() - size;
        let pages = (room / PAGE + 1) as u32;
        let r = self.guest.grow(pages)?;
        if r != -1 {
            return Err(format!(
                "memory.grow({pages}) past the quota returned {r}, not -1"
            ));
        }
        let charged = self.guest.ledger().in_use(Resource::GuestMemoryBytes);
        if self.guest.mem_size() != size || charged != size {
            return Err(format!(
                "after a refused memory.grow: size {} (was {size}), {charged} bytes charged",
                self.guest.mem_size()
            ));
        }
        self.stats.refusals += 1;
        Ok(())
    }

    fn misbehave(&mut self, turn: usize) -> Result<(), String> {
        match self.role {
            Role::Trapper => self.trap_out_of_bounds(),
            Role::QuotaHog => match turn % 3 {
                0 => self.overrun_device_bytes(),
                1 => self.overrun_launches(),
                _ => self.overrun_guest_memory(),
            },
            Role::Looper => self.trap_out_of_fuel(),
            Role::Honest | Role::Runaway => self.honest_op(),
        }
    }

    /// Queues work (a spinning kernel first, so it is surely still running)
    /// without waiting, then calls guest code that never returns: it must
    /// end with wasmtime's out-of-fuel trap. The caller drops the tenant.
    fn run_away(&mut self) -> Result<(), String> {
        self.reset();
        let threads = self.scale.spin_threads;
        let e = self
            .guest
            .launch(self.spin, 1, threads, &[ArgDescriptor::i32(1)])?;
        self.launched("launch spin_kernel (runaway)", e)?;
        let n = self.scale.max_elems as usize;
        let a = self.rng.floats(n);
        let (a_at, c_at) = (self.put(&a)?, self.put_nans(n)?);
        let e = self
            .guest
            .launch(self.vadd, blocks(n), BLOCK, &vadd_args(a_at, a_at, c_at, n))?;
        self.launched("launch vadd (runaway)", e)?;
        let in_flight = self.guest.ledger().in_use(Resource::LaunchesInFlight);
        match self.guest.try_call("spin", &[]) {
            Ok(r) => return Err(format!("the endless guest loop returned {r}")),
            Err(e) => match e.downcast_ref::<Trap>() {
                Some(Trap::OutOfFuel) => self.stats.fuel_traps += 1,
                _ => return Err(format!("the endless guest loop ended otherwise: {e:#}")),
            },
        }
        if in_flight != 2 {
            return Err(format!(
                "{in_flight} launches charged before the drop, 2 queued"
            ));
        }
        Ok(())
    }
}

/// Runs tenant `index`: makes it, does the operations of its role, drops it.
fn run_tenant<D: Device>(
    runtime: &GuestRuntime<D>,
    module: &GuestModule,
    scale: &Scale,
    index: usize,
    seed: u64,
) -> TenantReport {
    let role = Role::of(index, scale.tenants);
    let name = format!("tenant {index} ({})", role.name());
    let mut config = TenantConfig::untrusted(&name);
    config.quota = scale.quota();
    if role == Role::Runaway {
        config.guest_fuel = Some(scale.runaway_fuel);
    }
    let mut guest = TenantGuest::new(runtime, module, &config);
    let ledger = Arc::clone(guest.ledger());
    let pages = (scale.arena - guest.mem_size()).div_ceil(PAGE);
    guest
        .memory
        .grow(guest.tenant.store_mut(), pages)
        .expect("grow the guest's memory to its arena");
    let (vadd, oob, spin) = (
        guest.kernel(VADD_KERNEL),
        guest.kernel(OOB_KERNEL),
        guest.kernel(SPIN_KERNEL),
    );
    let mut run = TenantRun {
        guest,
        scale,
        role,
        rng: TenantRng::from_seed(seed),
        stats: Stats::default(),
        vadd,
        oob,
        spin,
        next: HEAP,
    };
    let mut failures = Vec::new();
    let start = Instant::now();
    let ops = if role == Role::Runaway {
        scale.ops / 2
    } else {
        scale.ops
    };
    for i in 0..ops {
        // One operation in ten is the role's misbehaviour.
        let result = if i % 10 == 5 {
            run.misbehave(i / 10)
        } else {
            run.honest_op()
        };
        run.stats.ops += 1;
        let result = result.and_then(|()| run.holds_nothing("the operation"));
        if let Err(e) = result {
            failures.push(format!("{name}, operation {i}: {e}"));
            if failures.len() >= 8 {
                failures.push(format!("{name}: stopped after 8 failures"));
                break;
            }
        }
    }
    if role == Role::Runaway
        && let Err(e) = run.run_away()
    {
        failures.push(format!("{name}, running away: {e}"));
    }
    let mut stats = run.stats;
    // Dropped here, launches in flight and all: the context waits for its
    // stream, then every charge goes back.
    drop(run);
    stats.busy = start.elapsed();
    eprintln!(
        "{name}: {} operations, {} launches, {} failure(s) in {:.2} s",
        stats.ops,
        stats.launches,
        failures.len(),
        stats.busy.as_secs_f64()
    );
    TenantReport {
        name,
        role,
        stats,
        failures,
        ledger,
    }
}

/// Free device memory once the device is idle (`synchronize` first, so
/// frees the driver defers until its work drains have happened).
fn settled_free<D: Device>(driver: &D) -> u64 {
    driver.synchronize().expect("synchronize");
    driver.mem_info().expect("mem_info").free
}

/// One stress round: every tenant on its own thread over one runtime, then
/// the runtime dropped. The reports, the wall time, and the settled free
/// memory with the runtime still alive and after it is gone.
fn stress_round<D: Device>(
    driver: &D,
    scale: &Scale,
    seeds: &[u64],
) -> (Vec<TenantReport>, Duration, u64, u64) {
    let runtime = GuestRuntime::new(driver.clone(), scale.memory_limit()).expect("runtime");
    let module = runtime
        .compile(stress_guest_wat())
        .expect("compile the stress guest");
    let start = Instant::now();
    let reports: Vec<TenantReport> = std::thread::scope(|s| {
        let threads: Vec<_> = seeds
            .iter()
            .enumerate()
            .map(|(i, &seed)| {
                let (runtime, module) = (&runtime, &module);
                std::thread::Builder::new()
                    .name(format!("tenant-{i}"))
                    .spawn_scoped(s, move || run_tenant(runtime, module, scale, i, seed))
                    .expect("spawn a tenant thread")
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    let wall = start.elapsed();
    // Every tenant is gone; the runtime still holds its kernels.
    let free_with_runtime = settled_free(driver);
    drop(module);
    drop(runtime);
    let free_after = settled_free(driver);
    (reports, wall, free_with_runtime, free_after)
}

/// The whole run on `driver`; `what` names it in the printed seed and table.
fn stress<D: Device>(driver: D, scale: &Scale, what: &str) {
    // TW_STRESS_TENANTS overrides the tenant count (to see whether a
    // difference in free memory scales with the tenants).
    let tenants = std::env::var("TW_STRESS_TENANTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(scale.tenants);
    let scale = &Scale { tenants, ..*scale };
    let mut seeds = common::Rng::new(what);
    // The context's one-time growth first: the driver keeps the memory it
    // takes for loaded code and for kernels' local memory (stack) when they
    // first need it, for the context's lifetime, whoever asked. A warm-up
    // of every role in its own runtime, dropped whole, pays it; the
    // baseline is taken after it, so what the stress run must give back is
    // exactly what its tenants took.
    let free_cold = settled_free(&driver);
    {
        // Every tenant at once, as in the run, so the driver's pools grow
        // to what that concurrency needs.
        let warm_scale = Scale {
            ops: scale.ops.min(40),
            ..*scale
        };
        let runtime = GuestRuntime::new(driver.clone(), scale.memory_limit()).expect("runtime");
        let module = runtime
            .compile(stress_guest_wat())
            .expect("compile the stress guest");
        let warm_seeds: Vec<u64> = (0..scale.tenants).map(|_| seeds.next_u64()).collect();
        std::thread::scope(|s| {
            for (index, &seed) in warm_seeds.iter().enumerate() {
                let (runtime, module, warm_scale) = (&runtime, &module, &warm_scale);
                s.spawn(move || {
                    let report = run_tenant(runtime, module, warm_scale, index, seed);
                    assert!(
                        report.failures.is_empty(),
                        "warm-up {}: {:?}",
                        report.name,
                        report.failures
                    );
                });
            }
        });
    }
    let free_before = settled_free(&driver);
    println!(
        "free device memory: {free_cold} bytes cold, {free_before} after a warm-up runtime was \
         dropped ({} bytes kept by the context)",
        free_cold.saturating_sub(free_before)
    );
    // Two rounds: the first must give back at least everything it took
    // (the driver may even hand back some of the warm-up's pools), and the
    // second must end exactly where the first ended: a tenant that kept a
    // byte would show there, whatever the driver keeps for itself.
    let seeds1: Vec<u64> = (0..scale.tenants).map(|_| seeds.next_u64()).collect();
    let (mut reports, wall, free_with_runtime, free_after) = stress_round(&driver, scale, &seeds1);
    let seeds2: Vec<u64> = (0..scale.tenants).map(|_| seeds.next_u64()).collect();
    let (reports2, wall2, free_with_runtime2, free_after2) = stress_round(&driver, scale, &seeds2);

    println!("{}", summary(what, &reports, wall));
    println!("{}", summary(&format!("{what}, round 2"), &reports2, wall2));
    println!(
        "free device memory: {free_before} bytes before round 1, {free_with_runtime} after its \
         tenants (runtime alive), {free_after} after its runtime; round 2: \
         {free_with_runtime2} after its tenants, {free_after2} after its runtime"
    );
    reports.extend(reports2);

    let failures: Vec<&String> = reports.iter().flat_map(|r| &r.failures).collect();
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}",
        failures.len(),
        failures
            .iter()
            .map(|f| f.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
    for r in &reports {
        let s = &r.stats;
        match r.role {
            Role::Honest => {}
            Role::Trapper | Role::Looper => assert!(s.kernel_traps > 0, "{}: no trap", r.name),
            Role::QuotaHog => assert!(s.refusals > 0, "{}: no refusal", r.name),
            Role::Runaway => assert_eq!(s.fuel_traps, 1, "{}: no fuel trap", r.name),
        }
        assert!(s.checked > 0, "{}: nothing checked", r.name);
        let snapshot = r.ledger.snapshot();
        assert!(
            Resource::ALL.iter().all(|&res| r.ledger.in_use(res) == 0),
            "{}: the ledger still holds something after the drop: {snapshot}",
            r.name
        );
    }
    // Nothing a tenant took stays taken. The CPU driver's accounting is
    // exact, so there every byte must be back. The CUDA driver keeps memory
    // of its own for the context and trims it at its own pace (on the H100,
    // CUDA 13.0: 112 MiB kept after the warm-up, then 32 MiB more handed
    // back after each round; docs/verification/2026-11-23-tenants-gpu.md),
    // so there free memory must never drop below where it stood after the
    // warm-up: a round that kept anything would end below it. (The driver
    // may hand memory back in one round and take it again in the next: on
    // the H100 with Wasm kernels run as virtual blocks, round 1 gave back
    // 64 MiB and round 2 took them again, ending exactly at the warm
    // level; docs/verification/2026-11-24-sandbox-gpu.md.)
    if driver.kind() == DriverKind::Cpu {
        assert_eq!(
            free_after, free_before,
            "round 1 did not give back every byte"
        );
        assert_eq!(
            free_after2, free_before,
            "round 2 did not give back every byte"
        );
    }
    assert!(
        free_after >= free_before,
        "round 1 lost {} bytes of device memory: {free_before} free before it, {free_after} \
         after its tenants and runtime were dropped",
        free_before - free_after
    );
    assert!(
        free_after2 >= free_before,
        "round 2 lost {} bytes of device memory: {free_before} free after the warm-up, \
         {free_after2} after round 2",
        free_before.saturating_sub(free_after2)
    );
}

/// The launches per second overall and per role, and what each role did.
fn summary(what: &str, reports: &[TenantReport], wall: Duration) -> String {
    let secs = wall.as_secs_f64();
    let mut total = Stats::default();
    let mut out = format!("{what}: {} tenants in {secs:.2} s\n", reports.len());
    out.push_str(
        "| role | tenants | operations | launches | launches/s | checked | refusals | kernel traps \
         | fuel traps |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for role in ROLES {
        let mut s = Stats::default();
        let mut tenants = 0;
        for r in reports.iter().filter(|r| r.role == role) {
            s.add(&r.stats);
            tenants += 1;
        }
        if tenants == 0 {
            continue;
        }
        total.add(&s);
        let _ = writeln!(
            out,
            "| {} | {tenants} | {} | {} | {:.0} | {} | {} | {} | {} |",
            role.name(),
            s.ops,
            s.launches,
            s.launches as f64 / secs,
            s.checked,
            s.refusals,
            s.kernel_traps,
            s.fuel_traps
        );
    }
    let _ = write!(
        out,
        "| all | {} | {} | {} | {:.0} | {} | {} | {} | {} |",
        reports.len(),
        total.ops,
        total.launches,
        total.launches as f64 / secs,
        total.checked,
        total.refusals,
        total.kernel_traps,
        total.fuel_traps
    );
    out
}

/// A CPU driver with room for every tenant's reservations, twins
/// registered (for the trusted tenant's PTX).
fn cpu_driver() -> CpuDriver {
    let driver = CpuDriver::with_capacity(512 << 20).expect("CPU driver");
    twins::register(&driver);
    driver
}

#[test]
fn stress_on_the_cpu_driver() {
    stress(cpu_driver(), &CPU_SCALE, "tenants stress (CPU driver)");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn stress_on_the_gpu() {
    let driver = CudaDriver::new(0).expect("a CUDA device");
    stress(driver, &GPU_SCALE, "tenants stress (CUDA)");
}

// ---------------------------------------------------------------------------
// Isolation and policy.

/// Two untrusted tenants of one runtime.
fn two_tenants() -> (
    GuestRuntime<CpuDriver>,
    TenantGuest<CpuDriver>,
    TenantGuest<CpuDriver>,
) {
    let runtime = GuestRuntime::new(cpu_driver(), 4 << 20).expect("runtime");
    let module = runtime.compile(stress_guest_wat()).expect("compile");
    let a = TenantGuest::new(&runtime, &module, &TenantConfig::untrusted("a"));
    let b = TenantGuest::new(&runtime, &module, &TenantConfig::untrusted("b"));
    (runtime, a, b)
}

#[test]
fn a_tenants_handles_mean_nothing_to_another_tenant() {
    let (_runtime, mut a, mut b) = two_tenants();
    let ebadh = Errno::EBADH.code();
    for g in [&mut a, &mut b] {
        let pages = (HEAP as u64 + 4 * PAGE).div_ceil(PAGE) - g.mem_size() / PAGE;
        g.memory.grow(g.tenant.store_mut(), pages).unwrap();
    }
    assert_eq!(a.buffer_alloc(4096).unwrap(), 0, "{}", a.last_error());
    let ha = a.read_u64(OUT);
    let fa = a.kernel(VADD_KERNEL);
    let fb = b.kernel(VADD_KERNEL);
    // A launch of A's, not yet waited for.
    let e = a.launch(fa, 1, BLOCK, &vadd_args(HEAP, HEAP, HEAP + 1024, 256));
    assert_eq!(e.unwrap(), 0, "{}", a.last_error());
    let la = a.read_u64(OUT);
    let b_live = b.tenant.store().data().cuda.live_handles();

    let relu_over = |h: u64| {
        [
            OperandDescriptor::buffer(Handle(h), 0, DType::F32, &[256]),
            OperandDescriptor::guest(HEAP, DType::F32, &[256]),
        ]
    };
    let relu = TensorHeader::new(TensorOpKind::Relu);
    let forged = [
        ha ^ (1 << 16),
        ha ^ 1,
        ha ^ (1 << 40),
        0xdead_beef,
        0,
        u64::MAX,
    ];
    for (owner, h) in [("a's", ha)]
        .into_iter()
        .chain(forged.iter().map(|&h| ("forged", h)))
    {
        b.write_u64(OUT, SENTINEL);
        let e = b.buffer_size(h, OUT).unwrap();
        assert_eq!(
            e,
            ebadh,
            "buffer_size of {owner} {h:#x}: {}",
            b.last_error()
        );
        assert!(b.last_error().contains("EBADH"), "{}", b.last_error());
        let buffer_arg = [
            ArgDescriptor::buffer(Handle(h), 0),
            ArgDescriptor::i32(0),
            ArgDescriptor::i32(0),
            ArgDescriptor::i32(1),
        ];
        let e = b.launch(fb, 1, BLOCK, &buffer_arg).unwrap();
        assert_eq!(e, ebadh, "launch over {owner} {h:#x}: {}", b.last_error());
        let e = b.tensor_op(&relu, &relu_over(h)).unwrap();
        assert_eq!(
            e,
            ebadh,
            "tensor_op over {owner} {h:#x}: {}",
            b.last_error()
        );
        assert_eq!(b.read_u64(OUT), SENTINEL, "a refused call wrote its handle");
        assert_eq!(b.tenant.store().data().cuda.live_handles(), b_live);
    }
    // A's function and launch handles are nothing to B either.
    let e = b.launch(fa, 1, BLOCK, &vadd_args(HEAP, HEAP, HEAP + 1024, 256));
    assert_eq!(e.unwrap(), ebadh, "{}", b.last_error());
    assert_eq!(b.wait(la).unwrap(), ebadh, "{}", b.last_error());
    assert_eq!(b.buffer_free(ha).unwrap(), ebadh, "{}", b.last_error());
    // A forged handle is nothing to A, and A's own are intact.
    for &h in &forged {
        assert_eq!(a.buffer_size(h, OUT).unwrap(), ebadh, "{h:#x}");
    }
    assert_eq!(a.wait(la).unwrap(), 0, "{}", a.last_error());
    assert_eq!(a.buffer_size(ha, OUT).unwrap(), 0, "{}", a.last_error());
    assert_eq!(a.read_u64(OUT), 4096);
    assert_eq!(b.ledger().in_use(Resource::DeviceBytes), 0);
    assert_eq!(a.ledger().in_use(Resource::DeviceBytes), 4096);
}

#[test]
fn raw_ptx_needs_a_trusted_tenant() {
    let runtime = GuestRuntime::new(cpu_driver(), 4 << 20).expect("runtime");
    let module = runtime.compile(stress_guest_wat()).expect("compile");
    let ptx = twins::VECTOR_ADD_PTX;
    let load = |g: &mut TenantGuest<CpuDriver>| {
        g.write(TEXT, ptx.as_bytes());
        g.write_u64(OUT, SENTINEL);
        g.call(
            "module_load_ptx",
            &[i32v(TEXT), i32v(ptx.len() as u32), i32v(OUT)],
        )
        .unwrap()
    };

    let mut untrusted = TenantGuest::new(&runtime, &module, &TenantConfig::untrusted("u"));
    let e = load(&mut untrusted);
    untrusted
        .refused("module_load_ptx", e, Errno::EPERM, "policy does not allow")
        .unwrap();
    assert_eq!(untrusted.read_u64(OUT), SENTINEL);
    assert_eq!(untrusted.ledger().in_use(Resource::Modules), 0);
    // Its Wasm kernels are allowed.
    untrusted.kernel(VADD_KERNEL);

    let mut trusted = TenantGuest::new(&runtime, &module, &TenantConfig::trusted("t"));
    let e = load(&mut trusted);
    assert_eq!(e, 0, "{}", trusted.last_error());
    let m = trusted.read_u64(OUT);
    assert_eq!(trusted.ledger().in_use(Resource::Modules), 1);
    // And it runs: vadd(a, b, c, n) over guest pointers.
    let name = b"vadd";
    trusted.write(TEXT, name);
    let e = trusted
        .call(
            "function_get",
            &[i64v(m), i32v(TEXT), i32v(name.len() as u32), i32v(OUT)],
        )
        .unwrap();
    assert_eq!(e, 0, "{}", trusted.last_error());
    let f = trusted.read_u64(OUT);
    let n = 1000;
    let pages = (u64::from(HEAP) + 3 * PAGE).div_ceil(PAGE) - trusted.mem_size() / PAGE;
    trusted
        .memory
        .grow(trusted.tenant.store_mut(), pages)
        .unwrap();
    let mut rng = TenantRng::from_seed(7);
    let (a, b) = (rng.floats(n), rng.floats(n));
    let (a_at, b_at, c_at) = (HEAP, HEAP + 4096, HEAP + 8192);
    trusted.write_f32s(a_at, &a);
    trusted.write_f32s(b_at, &b);
    let len = 4 * n as u64;
    let args = [
        ArgDescriptor::guest_aligned(a_at.into(), len, 4),
        ArgDescriptor::guest_aligned(b_at.into(), len, 4),
        ArgDescriptor::guest_aligned(c_at.into(), len, 4),
        ArgDescriptor::i32(n as i32),
    ];
    let e = trusted.launch(f, blocks(n), BLOCK, &args).unwrap();
    assert_eq!(e, 0, "{}", trusted.last_error());
    let h = trusted.read_u64(OUT);
    assert_eq!(trusted.wait(h).unwrap(), 0, "{}", trusted.last_error());
    check_vadd(&a, &b, &trusted.read_f32s(c_at, n)).unwrap();
}
