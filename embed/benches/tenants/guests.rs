//! The tenants' guests: the bench guest every quiet, noisy and small tenant
//! runs ([`GUEST_WAT`]: buffers, a tensor op, its wait) and the ops it is
//! set up with (a ReLU, the heavy GEMM, checked against float64), and the
//! hostile tenant's guest ([`HOSTILE_WAT`]: a kernel that never ends) with
//! its quota.

use std::time::Duration;

use tensorwasm_core::{
    abi::{
        Handle,
        tensor::{DType, OperandDescriptor, TensorHeader, TensorOpKind, encode_tensor_op},
    },
    quota::TenantQuota,
};
use tensorwasm_cuda::CudaDriver;
use tensorwasm_embed::{
    kernel::GuestModule,
    runtime::{GuestRuntime, GuestState},
    tenant::{Tenant, TenantConfig},
    wasmtime::{self, Instance, Memory, Store, TypedFunc, WasmParams, WasmResults},
};
use tensorwasm_kernels::oracle;

use crate::common::{
    BenchResult,
    guest::wasm_error,
    inputs::{f32_bytes, f32s},
};

use super::{DATA, DESC, HEAVY, OUT};

/// The bench guest: thin exports over the imports it needs, and
/// `launch_wait`, a launch and its wait in one guest call.
pub const GUEST_WAT: &str = r#"(module
  (import "wasi_cuda" "buffer_alloc" (func $buffer_alloc (param i64 i32) (result i32)))
  (import "wasi_cuda" "copy_to_buffer" (func $copy_to_buffer (param i64 i64 i32 i32) (result i32)))
  (import "wasi_cuda" "copy_from_buffer" (func $copy_from_buffer (param i32 i64 i64 i32) (result i32)))
  (import "wasi_cuda" "tensor_op" (func $tensor_op (param i32 i32 i32) (result i32)))
  (import "wasi_cuda" "wait" (func $wait (param i64) (result i32)))
  (import "wasi_cuda" "sync" (func $sync (result i32)))
  (memory (export "memory") 1)
  (func (export "buffer_alloc") (param i64 i32) (result i32)
    (call $buffer_alloc (local.get 0) (local.get 1)))
  (func (export "copy_to_buffer") (param i64 i32 i32) (result i32)
    (call $copy_to_buffer (local.get 0) (i64.const 0) (local.get 1) (local.get 2)))
  (func (export "copy_from_buffer") (param i32 i64 i32) (result i32)
    (call $copy_from_buffer (local.get 0) (local.get 1) (i64.const 0) (local.get 2)))
  (func (export "launch") (param i32 i32 i32) (result i32)
    (call $tensor_op (local.get 0) (local.get 1) (local.get 2)))
  (func (export "wait") (param i64) (result i32) (call $wait (local.get 0)))
  (func (export "sync") (result i32) (call $sync))
  (func (export "launch_wait") (param $desc i32) (param $len i32) (result i32)
    (local $e i32)
    (local.set $e (call $tensor_op (local.get $desc) (local.get $len) (i32.const 64)))
    (if (local.get $e) (then (return (local.get $e))))
    (call $wait (i64.load (i32.const 64))))
)
"#;

/// The hostile tenant's guest: `$spin`, function 4 (after the four
/// imports), a kernel that never ends; `get` makes it a kernel (handle at
/// 64), `launch(grid, block)` queues it over `grid` x `block` threads (x
/// only; handle at 72) and `wait_last` waits for that launch. The
/// intrinsic gives the loop work of its own; the loop could not be dropped
/// anyway, since its header checks fuel and the clock.
pub const HOSTILE_WAT: &str = r#"(module
  (import "wasi_cuda" "kernel_get" (func $kernel_get (param i32 i32) (result i32)))
  (import "wasi_cuda" "launch" (func $launch (param i64 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "wasi_cuda" "wait" (func $wait (param i64) (result i32)))
  (import "tensorwasm_kernel" "thread_idx_x" (func $tid (result i32)))
  (memory (export "memory") 1)
  (func $spin (local $acc i32)
    (loop $forever
      (local.set $acc (i32.add (local.get $acc) (call $tid)))
      (br $forever)))
  (func (export "get") (result i32) (call $kernel_get (i32.const 4) (i32.const 64)))
  (func (export "launch") (param $grid i32) (param $block i32) (result i32)
    (call $launch (i64.load (i32.const 64))
      (local.get $grid) (i32.const 1) (i32.const 1)
      (local.get $block) (i32.const 1) (i32.const 1)
      (i32.const 0) (i32.const 128) (i32.const 0) (i32.const 72)))
  (func (export "wait_last") (result i32) (call $wait (i64.load (i32.const 72))))
)
"#;

/// An untrusted tenant and its guest's instance.
struct TenantGuest {
    tenant: Tenant<CudaDriver>,
    instance: Instance,
}

impl TenantGuest {
    fn new(
        runtime: &GuestRuntime<CudaDriver>,
        module: &GuestModule,
        config: &TenantConfig,
    ) -> BenchResult<Self> {
        let name = &config.name;
        let mut tenant =
            Tenant::new(runtime, config).map_err(|e| format!("tenant {name}: {e:#}"))?;
        let instance = futures::executor::block_on(tenant.instantiate(runtime, module))
            .map_err(|e| format!("instantiating tenant {name}'s guest: {e:#}"))?;
        Ok(TenantGuest { tenant, instance })
    }

    fn export<P: WasmParams, R: WasmResults>(
        &mut self,
        name: &str,
    ) -> BenchResult<TypedFunc<P, R>> {
        self.instance
            .get_typed_func(self.tenant.store_mut(), name)
            .map_err(|e| format!("{}'s export {name}: {e:#}", self.tenant.name()))
    }

    fn store(&self) -> &Store<GuestState<CudaDriver>> {
        self.tenant.store()
    }

    fn store_mut(&mut self) -> &mut Store<GuestState<CudaDriver>> {
        self.tenant.store_mut()
    }

    fn last_error(&self) -> String {
        self.store().data().cuda.last_error().to_string()
    }

    fn ok(&self, what: &str, errno: i32) -> BenchResult<()> {
        if errno == 0 {
            Ok(())
        } else {
            Err(format!(
                "{} {what}: errno {errno}: {}",
                self.tenant.name(),
                self.last_error()
            ))
        }
    }
}

/// A tenant's guest of [`GUEST_WAT`].
pub struct BenchGuest {
    tenant: TenantGuest,
    memory: Memory,
    buffer_alloc: TypedFunc<(i64, i32), i32>,
    copy_to_buffer: TypedFunc<(i64, i32, i32), i32>,
    copy_from_buffer: TypedFunc<(i32, i64, i32), i32>,
    launch: TypedFunc<(i32, i32, i32), i32>,
    wait: TypedFunc<i64, i32>,
    sync: TypedFunc<(), i32>,
    launch_wait: TypedFunc<(i32, i32), i32>,
    /// The descriptor's length at [`DESC`].
    desc_len: i32,
}

impl BenchGuest {
    /// The guest of the untrusted tenant `name`.
    pub fn new(
        runtime: &GuestRuntime<CudaDriver>,
        module: &GuestModule,
        name: &str,
    ) -> BenchResult<Self> {
        let mut tenant = TenantGuest::new(runtime, module, &TenantConfig::untrusted(name))?;
        let instance = tenant.instance;
        let memory = instance
            .get_memory(tenant.store_mut(), "memory")
            .ok_or("the bench guest exports no memory")?;
        Ok(BenchGuest {
            buffer_alloc: tenant.export("buffer_alloc")?,
            copy_to_buffer: tenant.export("copy_to_buffer")?,
            copy_from_buffer: tenant.export("copy_from_buffer")?,
            launch: tenant.export("launch")?,
            wait: tenant.export("wait")?,
            sync: tenant.export("sync")?,
            launch_wait: tenant.export("launch_wait")?,
            tenant,
            memory,
            desc_len: 0,
        })
    }

    /// `Ok` for errno 0, else `what` failed, with the tenant's last error.
    pub fn ok(&self, what: &str, errno: i32) -> BenchResult<()> {
        self.tenant.ok(what, errno)
    }

    fn write(&mut self, at: u32, bytes: &[u8]) -> BenchResult<()> {
        let end = at as usize + bytes.len();
        let size = self.memory.data_size(self.tenant.store());
        if end > size {
            let pages = (end - size).div_ceil(65536) as u64;
            self.memory
                .grow(self.tenant.store_mut(), pages)
                .map_err(wasm_error("growing the guest's memory"))?;
        }
        self.memory.data_mut(self.tenant.store_mut())[at as usize..end].copy_from_slice(bytes);
        Ok(())
    }

    fn read(&self, at: u32, len: usize) -> &[u8] {
        &self.memory.data(self.tenant.store())[at as usize..at as usize + len]
    }

    /// A device buffer of `len` bytes, holding `bytes` at its start.
    pub fn buffer(&mut self, len: u64, bytes: &[u8]) -> BenchResult<Handle> {
        let e = block(
            self.buffer_alloc
                .call_async(self.tenant.store_mut(), (len as i64, OUT as i32)),
        )?;
        self.ok("buffer_alloc", e)?;
        let handle = u64::from_le_bytes(self.read(OUT, 8).try_into().expect("8 bytes"));
        if !bytes.is_empty() {
            self.write(DATA, bytes)?;
            let args = (handle as i64, DATA as i32, bytes.len() as i32);
            let e = block(
                self.copy_to_buffer
                    .call_async(self.tenant.store_mut(), args),
            )?;
            self.ok("copy_to_buffer", e)?;
        }
        Ok(Handle(handle))
    }

    /// `n` floats of `buffer`.
    pub fn read_buffer(&mut self, buffer: Handle, n: usize) -> BenchResult<Vec<f32>> {
        self.write(DATA, &vec![0; n * 4])?;
        let args = (DATA as i32, buffer.0 as i64, (n * 4) as i32);
        let e = block(
            self.copy_from_buffer
                .call_async(self.tenant.store_mut(), args),
        )?;
        self.ok("copy_from_buffer", e)?;
        Ok(f32s(self.read(DATA, n * 4)))
    }

    /// Puts the op's descriptor at [`DESC`]: every launch runs it.
    pub fn set_op(
        &mut self,
        header: &TensorHeader,
        operands: &[OperandDescriptor],
    ) -> BenchResult<()> {
        let desc = encode_tensor_op(header, operands);
        self.desc_len = desc.len() as i32;
        self.write(DESC, &desc)
    }

    /// Queues the op: the errno; the handle at [`OUT`].
    pub fn launch(&mut self) -> BenchResult<i32> {
        let args = (DESC as i32, self.desc_len, OUT as i32);
        block(self.launch.call_async(self.tenant.store_mut(), args))
    }

    pub fn handle(&self) -> u64 {
        u64::from_le_bytes(self.read(OUT, 8).try_into().expect("8 bytes"))
    }

    pub fn wait(&mut self, launch: u64) -> BenchResult<()> {
        let e = block(self.wait.call_async(self.tenant.store_mut(), launch as i64))?;
        self.ok("wait", e)
    }

    pub fn sync(&mut self) -> BenchResult<()> {
        let e = block(self.sync.call_async(self.tenant.store_mut(), ()))?;
        self.ok("sync", e)
    }

    /// Queues the op and waits for it, in one guest call.
    pub fn launch_wait(&mut self) -> BenchResult<()> {
        let args = (DESC as i32, self.desc_len);
        let e = block(self.launch_wait.call_async(self.tenant.store_mut(), args))?;
        self.ok("launch_wait", e)
    }
}

pub fn block<T>(f: impl Future<Output = wasmtime::Result<T>>) -> BenchResult<T> {
    futures::executor::block_on(f).map_err(|e| format!("the guest trapped: {e:#}"))
}

/// xorshift64* floats of magnitude in [1, 2), either sign.
pub struct Floats(pub u64);

impl Floats {
    pub fn take(&mut self, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| {
                let mut x = self.0;
                x ^= x >> 12;
                x ^= x << 25;
                x ^= x >> 27;
                self.0 = x;
                let x = x.wrapping_mul(0x2545_f491_4f6c_dd1d);
                f32::from_bits(((x >> 63) as u32) << 31 | 0x3f80_0000 | (x as u32 & 0x7f_ffff))
            })
            .collect()
    }
}

/// A ReLU over `n` floats in buffers, set as the guest's op; its input.
pub fn relu_tenant(guest: &mut BenchGuest, n: u64, seed: u64) -> BenchResult<(Vec<f32>, Handle)> {
    let x = Floats(seed | 1).take(n as usize);
    let xb = guest.buffer(n * 4, &f32_bytes(&x))?;
    let yb = guest.buffer(n * 4, &[])?;
    guest.set_op(
        &TensorHeader::new(TensorOpKind::Relu),
        &[
            OperandDescriptor::buffer(xb, 0, DType::F32, &[n]),
            OperandDescriptor::buffer(yb, 0, DType::F32, &[n]),
        ],
    )?;
    Ok((x, yb))
}

/// The heavy GEMM (bf16 inputs, f32 output, alpha 1, beta 0) in buffers,
/// set as the guest's op; the first one is run and 64 of its elements
/// checked.
pub fn gemm_tenant(guest: &mut BenchGuest, seed: u64) -> BenchResult<()> {
    let n = HEAVY as usize;
    let mut floats = Floats(seed | 1);
    let to_bf16 = |v: Vec<f32>| -> Vec<u16> { v.iter().map(|&x| oracle::f32_to_bf16(x)).collect() };
    let a = to_bf16(floats.take(n * n));
    let b = to_bf16(floats.take(n * n));
    let bytes = |v: &[u16]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
    let ab = guest.buffer((n * n * 2) as u64, &bytes(&a))?;
    let bb = guest.buffer((n * n * 2) as u64, &bytes(&b))?;
    let cb = guest.buffer((n * n * 4) as u64, &[])?;
    let mut header = TensorHeader::new(TensorOpKind::Gemm);
    header.alpha = 1.0;
    guest.set_op(
        &header,
        &[
            OperandDescriptor::buffer(ab, 0, DType::Bf16, &[HEAVY, HEAVY]),
            OperandDescriptor::buffer(bb, 0, DType::Bf16, &[HEAVY, HEAVY]),
            OperandDescriptor::buffer(cb, 0, DType::F32, &[HEAVY, HEAVY]),
        ],
    )?;
    guest.launch_wait()?;
    let c = guest.read_buffer(cb, n * n)?;
    let value = |bits: u16| f64::from(oracle::bf16_to_f32(bits));
    let mut picks = Floats(seed ^ 0x5eed);
    let (mut got, mut want, mut scale) = (Vec::new(), Vec::new(), Vec::new());
    for p in picks.take(64) {
        let at = (p.to_bits() as usize) % (n * n);
        let (i, j) = (at / n, at % n);
        let terms = (0..n).map(|k| value(a[i * n + k]) * value(b[k * n + j]));
        want.push(terms.clone().sum::<f64>());
        scale.push(terms.map(f64::abs).sum::<f64>());
        got.push(c[at]);
    }
    let rtol = oracle::gemm_rtol(oracle::GemmPrecision::Bf16, n);
    oracle::check_close_scaled(&got, &want, &scale, rtol)
        .map_err(|e| format!("the heavy GEMM's sampled elements: {e}"))
}

/// The hostile tenant's quota: the untrusted defaults (launches in flight,
/// the device share of one launch, ...), except fuel that never runs out,
/// so that only `launch_time` ends its kernel.
pub fn hostile_quota(launch_time: Duration) -> TenantQuota {
    TenantQuota::default()
        .with_kernel_fuel(u64::MAX)
        .with_launch_time_ns(u64::try_from(launch_time.as_nanos()).unwrap_or(u64::MAX))
}

/// The hostile tenant's guest ([`HOSTILE_WAT`]).
pub struct HostileGuest {
    tenant: TenantGuest,
    get: TypedFunc<(), i32>,
    launch: TypedFunc<(i32, i32), i32>,
    wait_last: TypedFunc<(), i32>,
}

impl HostileGuest {
    pub fn new(
        runtime: &GuestRuntime<CudaDriver>,
        module: &GuestModule,
        launch_time: Duration,
    ) -> BenchResult<Self> {
        let config = TenantConfig {
            quota: hostile_quota(launch_time),
            ..TenantConfig::untrusted("hostile")
        };
        let mut tenant = TenantGuest::new(runtime, module, &config)?;
        Ok(HostileGuest {
            get: tenant.export("get")?,
            launch: tenant.export("launch")?,
            wait_last: tenant.export("wait_last")?,
            tenant,
        })
    }

    /// Makes the endless kernel (`kernel_get`).
    pub fn kernel_get(&mut self) -> BenchResult<()> {
        let e = block(self.get.call_async(self.tenant.store_mut(), ()))?;
        self.tenant.ok("kernel_get", e)
    }

    /// Queues the endless kernel over `grid` x `block` threads.
    pub fn launch(&mut self, grid: u32, block_x: u32) -> BenchResult<()> {
        // The grid's bits: the ABI reads geometry as u32.
        let args = (grid as i32, block_x as i32);
        let e = block(self.launch.call_async(self.tenant.store_mut(), args))?;
        self.tenant.ok("launch", e)
    }

    /// Waits for the last launch: its errno.
    pub fn wait_last(&mut self) -> BenchResult<i32> {
        block(self.wait_last.call_async(self.tenant.store_mut(), ()))
    }

    /// The tenant's last error.
    pub fn last_error(&self) -> String {
        self.tenant.last_error()
    }
}
