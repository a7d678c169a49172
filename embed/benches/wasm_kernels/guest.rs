//! wasm_kernels' guest: an instance of `wasm_kernels.wat`, with the exports
//! every bench guest has (`common::guest`) and its own: `kernel_get` by
//! function index, an empty export, and the CPU loops.

use std::time::{Duration, Instant};

use tensorwasm_core::abi::{ArgDescriptor, encode_args};
use tensorwasm_cuda::CudaDriver;
use tensorwasm_embed::{
    runtime::GuestState,
    wasmtime::{Instance, Store, TypedFunc},
};

use crate::common::{
    BenchResult,
    guest::{GuestInstance, GuestKernel, OwnExports, export, timed_call, wasm_error},
};

use super::{ALPHA, BLOCK, N};

/// One instance of `wasm_kernels.wat`.
pub type Guest = GuestInstance<KernelsExports>;

/// `wasm_kernels.wat`'s own exports.
pub struct KernelsExports {
    nop: TypedFunc<(), ()>,
    get_kernel: TypedFunc<i32, i64>,
    vadd_loop: TypedFunc<(i32, i32, i32, i32), ()>,
    saxpy_loop: TypedFunc<(f32, i32, i32, i32), ()>,
}

impl OwnExports for KernelsExports {
    fn look_up(
        instance: &Instance,
        store: &mut Store<GuestState<CudaDriver>>,
    ) -> BenchResult<KernelsExports> {
        Ok(KernelsExports {
            nop: export(instance, store, "nop")?,
            get_kernel: export(instance, store, "get_kernel")?,
            vadd_loop: export(instance, store, "vadd_loop")?,
            saxpy_loop: export(instance, store, "saxpy_loop")?,
        })
    }
}

impl Guest {
    /// The Wasm kernel of the guest's function `index` (`kernel_get`), with
    /// `args` for it written at `args_ptr`.
    pub async fn kernel(
        &mut self,
        index: u32,
        args_ptr: u32,
        args: &[ArgDescriptor],
    ) -> BenchResult<GuestKernel> {
        self.write(args_ptr, &encode_args(args))?;
        Ok(GuestKernel {
            function: self.get_kernel(index).await?.0,
            args_ptr,
            args_count: args.len() as u32,
        })
    }

    /// Writes zeros over the out-slots (the first 64 bytes), the first
    /// touch of a new store's memory; the write's time.
    pub fn touch_out_slots(&mut self) -> BenchResult<Duration> {
        let start = Instant::now();
        self.write(0, &[0; 64])?;
        Ok(start.elapsed())
    }

    /// One call of the `nop` export; the call's time.
    pub async fn nop(&mut self) -> BenchResult<Duration> {
        let (result, elapsed) = timed_call(&self.own.nop, &mut self.store, ()).await;
        result.map_err(wasm_error("guest `nop`"))?;
        Ok(elapsed)
    }

    /// One `get_kernel` export call of function `index` (the import and
    /// nothing else): the handle, and the call's time.
    pub async fn get_kernel(&mut self, index: u32) -> BenchResult<(i64, Duration)> {
        let (result, elapsed) =
            timed_call(&self.own.get_kernel, &mut self.store, index as i32).await;
        Ok((self.handle("get_kernel", result)?, elapsed))
    }

    /// `k` launches of `kernel` on `grid` blocks of [`BLOCK`] threads, then
    /// the guest's `sync`.
    pub async fn run(&mut self, kernel: GuestKernel, k: usize, grid: u32) -> BenchResult<()> {
        self.launch_many(kernel, k, grid, BLOCK).await?;
        self.sync().await
    }

    /// One pass of the CPU vector add, `c = a + b`; the call's time.
    pub async fn vadd_loop(&mut self, a: u32, b: u32, c: u32) -> BenchResult<Duration> {
        let params = (a as i32, b as i32, c as i32, N as i32);
        let (result, elapsed) = timed_call(&self.own.vadd_loop, &mut self.store, params).await;
        result.map_err(wasm_error("guest `vadd_loop`"))?;
        Ok(elapsed)
    }

    /// One pass of the CPU SAXPY, `y = alpha * x + y`; the call's time.
    pub async fn saxpy_loop(&mut self, x: u32, y: u32) -> BenchResult<Duration> {
        let params = (ALPHA, x as i32, y as i32, N as i32);
        let (result, elapsed) = timed_call(&self.own.saxpy_loop, &mut self.store, params).await;
        result.map_err(wasm_error("guest `saxpy_loop`"))?;
        Ok(elapsed)
    }
}
