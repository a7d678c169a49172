//! A reference for Wasm kernels that needs no twin: the same module run by
//! wasmtime, one call of the kernel's function per thread of the launch,
//! in order (blocks, then threads, x fastest), the `tensorwasm_kernel`
//! position intrinsics answered from the thread's place. For kernels
//! whose threads do not race (no shared memory, barriers, warps or
//! atomics), that gives the outputs any order of the threads gives, so a
//! translated kernel's outputs must match it bit for bit. Every other
//! import traps. For a bench's quick check on the CPU driver.
//!
//! Not declared in `common/mod.rs` (its owner is moving the harness into
//! it): a bench includes it with `#[path = "common/wasm_reference.rs"]`.

use tensorwasm_core::Dim3;
use wasmtime::{Engine, Instance, Linker, Memory, Module, Store, Val};

/// The thread the next call is: index and size of its block and grid.
#[derive(Clone, Copy, Default)]
struct Place {
    thread: [u32; 3],
    block: [u32; 3],
    block_dim: [u32; 3],
    grid_dim: [u32; 3],
}

/// How a position intrinsic reads the thread's place.
type Coordinate = fn(&Place) -> u32;

/// One instance of a guest module with its memory grown to the bench's
/// size.
pub struct WasmReference {
    store: Store<Place>,
    instance: Instance,
    memory: Memory,
}

/// An argument of a kernel call: Wasm's `i32` or `f32`.
#[derive(Clone, Copy, Debug)]
pub enum RefArg {
    I32(i32),
    F32(f32),
}

impl WasmReference {
    /// `wasm` instantiated (its data segments in place), its exported
    /// `memory` grown to at least `bytes`.
    pub fn new(wasm: &[u8], bytes: usize) -> Result<WasmReference, String> {
        let engine = Engine::default();
        let module = Module::new(&engine, wasm).map_err(|e| format!("the reference: {e}"))?;
        let mut linker = Linker::new(&engine);
        let position: [(&str, Coordinate); 12] = [
            ("thread_idx_x", |p| p.thread[0]),
            ("thread_idx_y", |p| p.thread[1]),
            ("thread_idx_z", |p| p.thread[2]),
            ("block_idx_x", |p| p.block[0]),
            ("block_idx_y", |p| p.block[1]),
            ("block_idx_z", |p| p.block[2]),
            ("block_dim_x", |p| p.block_dim[0]),
            ("block_dim_y", |p| p.block_dim[1]),
            ("block_dim_z", |p| p.block_dim[2]),
            ("grid_dim_x", |p| p.grid_dim[0]),
            ("grid_dim_y", |p| p.grid_dim[1]),
            ("grid_dim_z", |p| p.grid_dim[2]),
        ];
        for (name, read) in position {
            linker
                .func_wrap(
                    "tensorwasm_kernel",
                    name,
                    move |caller: wasmtime::Caller<'_, Place>| read(caller.data()) as i32,
                )
                .map_err(|e| e.to_string())?;
        }
        linker
            .define_unknown_imports_as_traps(&module)
            .map_err(|e| e.to_string())?;
        let mut store = Store::new(&engine, Place::default());
        let instance = linker
            .instantiate(&mut store, &module)
            .map_err(|e| format!("instantiating the reference: {e}"))?;
        let memory = instance
            .get_memory(&mut store, "memory")
            .ok_or("the module exports no memory")?;
        let have = memory.data_size(&store);
        if have < bytes {
            let pages = (bytes - have).div_ceil(1 << 16) as u64;
            memory
                .grow(&mut store, pages)
                .map_err(|e| format!("growing the reference's memory by {pages} pages: {e}"))?;
        }
        Ok(WasmReference {
            store,
            instance,
            memory,
        })
    }

    /// Writes `values` at guest address `at`.
    pub fn write_f32s(&mut self, at: usize, values: &[f32]) -> Result<(), String> {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.memory
            .write(&mut self.store, at, &bytes)
            .map_err(|e| format!("{} floats at {at}: {e}", values.len()))
    }

    /// Zeroes `len` bytes at guest address `at`.
    pub fn zero(&mut self, at: usize, len: usize) -> Result<(), String> {
        self.memory
            .write(&mut self.store, at, &vec![0; len])
            .map_err(|e| format!("{len} bytes at {at}: {e}"))
    }

    /// The `len` floats at guest address `at`.
    pub fn read_f32s(&self, at: usize, len: usize) -> Result<Vec<f32>, String> {
        let mut bytes = vec![0; len * 4];
        self.memory
            .read(&self.store, at, &mut bytes)
            .map_err(|e| format!("{len} floats at {at}: {e}"))?;
        Ok(bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    /// Runs export `kernel` once per thread of a `grid` x `block` launch.
    pub fn launch(
        &mut self,
        kernel: &str,
        args: &[RefArg],
        grid: Dim3,
        block: Dim3,
    ) -> Result<(), String> {
        let f = self
            .instance
            .get_func(&mut self.store, kernel)
            .ok_or_else(|| format!("the module exports no function `{kernel}`"))?;
        let args: Vec<Val> = args
            .iter()
            .map(|a| match *a {
                RefArg::I32(v) => Val::I32(v),
                RefArg::F32(v) => Val::F32(v.to_bits()),
            })
            .collect();
        let mut place = Place {
            block_dim: [block.x, block.y, block.z],
            grid_dim: [grid.x, grid.y, grid.z],
            ..Place::default()
        };
        for bz in 0..grid.z {
            for by in 0..grid.y {
                for bx in 0..grid.x {
                    place.block = [bx, by, bz];
                    for tz in 0..block.z {
                        for ty in 0..block.y {
                            for tx in 0..block.x {
                                place.thread = [tx, ty, tz];
                                *self.store.data_mut() = place;
                                f.call(&mut self.store, &args, &mut []).map_err(|e| {
                                    format!(
                                        "{kernel}, block {:?}, thread {:?}: {e}",
                                        place.block, place.thread
                                    )
                                })?;
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }
}
