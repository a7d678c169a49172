//! Host kernels: Rust closures called once per block, the modules that name
//! them, and the grid runner that spreads a launch's blocks over scoped
//! worker threads. Queueing a launch and reporting its failure belong to the
//! stream.

use std::{
    collections::BTreeMap,
    fmt,
    panic::{self, AssertUnwindSafe},
    thread,
};

use tensorwasm_core::{Dim3, KernelParam, LaunchConfig};

use crate::{
    stream,
    sync::{Arc, AtomicBool, AtomicU64, Mutex, Ordering, lock},
};

/// Where one call of a host kernel sits in its launch: CUDA's `blockIdx`,
/// `blockDim` and `gridDim`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BlockContext {
    /// This block's index in the grid.
    pub block_idx: Dim3,
    /// Threads in a block.
    pub block_dim: Dim3,
    /// Blocks in the grid.
    pub grid_dim: Dim3,
    /// The launch's dynamic shared memory per block, in bytes (CUDA's
    /// `sharedMemBytes`); the host kernel provides it if it uses any.
    pub shared_mem_bytes: u32,
}

/// A host kernel. It is called once per block, possibly on several threads
/// at once for different blocks, and loops over the block's threads itself.
/// `Ptr` parameters are host addresses; turn one into a pointer with
/// [`std::ptr::with_exposed_provenance_mut`]. A panic fails the launch
/// (`ErrorKind::LaunchFailed` at the next synchronize) without harming the
/// driver.
pub type HostKernelFn = dyn Fn(&BlockContext, &[KernelParam]) + Send + Sync;

/// A set of named host kernels, made by
/// [`CpuDriver::host_module`](crate::CpuDriver::host_module). Clones share
/// the kernels.
#[derive(Clone)]
pub struct CpuModule {
    kernels: BTreeMap<String, Arc<HostKernelFn>>,
}

impl CpuModule {
    /// A later kernel of the same name replaces an earlier one.
    pub(crate) fn new<'a>(
        kernels: impl IntoIterator<Item = (&'a str, Arc<HostKernelFn>)>,
    ) -> CpuModule {
        CpuModule {
            kernels: kernels
                .into_iter()
                .map(|(name, kernel)| (name.to_owned(), kernel))
                .collect(),
        }
    }

    /// The kernels' names, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.kernels.keys().map(String::as_str)
    }

    pub(crate) fn function(&self, name: &str) -> Option<CpuFunction> {
        self.kernels.get(name).map(|kernel| CpuFunction {
            name: Arc::from(name),
            kernel: Arc::clone(kernel),
        })
    }
}

impl fmt::Debug for CpuModule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("CpuModule")
            .field(&self.names().collect::<Vec<_>>())
            .finish()
    }
}

/// A host kernel found in a module; it keeps the kernel alive on its own.
#[derive(Clone)]
pub struct CpuFunction {
    name: Arc<str>,
    kernel: Arc<HostKernelFn>,
}

impl CpuFunction {
    /// The kernel's name in its module.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl fmt::Debug for CpuFunction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CpuFunction({})", self.name)
    }
}

/// A checked launch, ready to run on a stream's worker.
pub(crate) struct GridLaunch {
    function: CpuFunction,
    grid: Dim3,
    block: Dim3,
    shared_mem_bytes: u32,
    params: Vec<KernelParam>,
}

/// Shared by the threads running one grid.
struct GridCursor {
    next_block: AtomicU64,
    stop: AtomicBool,
    failure: Mutex<Option<String>>,
}

impl GridLaunch {
    /// `config` must have passed `LaunchConfig::validate`.
    pub(crate) fn new(
        function: &CpuFunction,
        config: &LaunchConfig,
        params: &[KernelParam],
    ) -> GridLaunch {
        GridLaunch {
            function: function.clone(),
            grid: config.grid,
            block: config.block,
            shared_mem_bytes: config.shared_mem_bytes,
            params: params.to_vec(),
        }
    }

    /// Runs every block on up to `workers` threads (the calling thread among
    /// them). The first panic stops the grid and is returned as a message.
    pub(crate) fn run(&self, workers: usize) -> Result<(), String> {
        let blocks = self.grid.volume().unwrap_or(0);
        let workers = workers
            .max(1)
            .min(usize::try_from(blocks).unwrap_or(usize::MAX));
        // Blocks are handed out in chunks: fewer atomic operations for small
        // blocks, still enough chunks per thread to balance uneven ones.
        let chunk = (blocks / (workers as u64 * 8)).clamp(1, 64);
        let cursor = GridCursor {
            next_block: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            failure: Mutex::new(None),
        };
        if workers == 1 {
            self.run_blocks(&cursor, blocks, chunk);
        } else {
            let stream = stream::serving();
            let cursor = &cursor;
            thread::scope(|scope| {
                for _ in 1..workers {
                    // A thread that cannot be spawned leaves its share to the others.
                    let _ = thread::Builder::new().spawn_scoped(scope, move || {
                        stream::set_serving(stream);
                        self.run_blocks(cursor, blocks, chunk);
                    });
                }
                self.run_blocks(cursor, blocks, chunk);
            });
        }
        match cursor.failure.into_inner() {
            Ok(None) => Ok(()),
            Ok(Some(failure)) => Err(failure),
            Err(poisoned) => Err(poisoned.into_inner().unwrap_or_default()),
        }
    }

    fn run_blocks(&self, cursor: &GridCursor, blocks: u64, chunk: u64) {
        let gx = u64::from(self.grid.x);
        let gy = u64::from(self.grid.y);
        while !cursor.stop.load(Ordering::Relaxed) {
            let start = cursor.next_block.fetch_add(chunk, Ordering::Relaxed);
            if start >= blocks {
                return;
            }
            for linear in start..(start + chunk).min(blocks) {
                // Every index is below its grid extent, a u32.
                let block = BlockContext {
                    block_idx: Dim3 {
                        x: (linear % gx) as u32,
                        y: (linear / gx % gy) as u32,
                        z: (linear / (gx * gy)) as u32,
                    },
                    block_dim: self.block,
                    grid_dim: self.grid,
                    shared_mem_bytes: self.shared_mem_bytes,
                };
                let kernel = &self.function.kernel;
                let call = AssertUnwindSafe(|| kernel(&block, &self.params));
                if let Err(payload) = panic::catch_unwind(call) {
                    let mut failure = lock(&cursor.failure);
                    if failure.is_none() {
                        let Dim3 { x, y, z } = block.block_idx;
                        *failure = Some(format!(
                            "kernel `{}` panicked in block ({x}, {y}, {z}): {}",
                            self.function.name,
                            stream::panic_message(&*payload)
                        ));
                    }
                    cursor.stop.store(true, Ordering::Relaxed);
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use tensorwasm_core::{
        DeviceMemory, DevicePtr, DriverError, ErrorKind, GpuDriver, MAX_KERNEL_PARAMS,
    };

    use super::*;
    use crate::{
        CpuDriver,
        testing::{driver, host},
    };

    /// `out[i] = 3 * i + 1` for each of the first `n` threads of a 1-D grid.
    fn affine() -> Arc<HostKernelFn> {
        Arc::new(|block: &BlockContext, params: &[KernelParam]| {
            let out = host::<u32>(params[0].as_ptr().unwrap());
            let n = params[1].as_i32().unwrap() as usize;
            let first = block.block_idx.x as usize * block.block_dim.x as usize;
            for i in first..(first + block.block_dim.x as usize).min(n) {
                // SAFETY: the test passes a buffer of n u32s, and each i is
                // written by one block only.
                unsafe { out.add(i).write(3 * i as u32 + 1) };
            }
        })
    }

    fn run_affine(d: &CpuDriver, n: usize) -> Vec<u32> {
        let module = d.host_module([("affine", affine())]);
        run_affine_with(d, &d.function(&module, "affine").unwrap(), n)
    }

    fn run_affine_with(d: &CpuDriver, function: &CpuFunction, n: usize) -> Vec<u32> {
        let out = d.alloc_device(n * 4).unwrap();
        let stream = d.create_stream().unwrap();
        let config = LaunchConfig::for_elements(n as u32, 128);
        let params = [
            KernelParam::Ptr(out.device_ptr()),
            KernelParam::I32(n as i32),
        ];
        // SAFETY: the kernel writes n u32s into `out`, which outlives the launch.
        unsafe { d.launch(&stream, function, &config, &params) }.unwrap();
        d.stream_synchronize(&stream).unwrap();
        let mut bytes = vec![0; n * 4];
        d.copy_from_device(&mut bytes, out.full()).unwrap();
        bytes
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }

    #[test]
    fn many_blocks_cover_every_element_once() {
        let d = driver(16 << 20);
        let n = 100_003;
        let out = run_affine(&d, n);
        for (i, &value) in out.iter().enumerate() {
            assert_eq!(value, 3 * i as u32 + 1, "element {i}");
        }
    }

    #[test]
    fn three_dimensional_grids_visit_each_block_once() {
        let d = driver(1 << 20);
        let grid = Dim3 { x: 7, y: 5, z: 3 };
        let visits: Arc<Vec<AtomicUsize>> =
            Arc::new((0..105).map(|_| AtomicUsize::new(0)).collect());
        let seen = Arc::clone(&visits);
        let kernel: Arc<HostKernelFn> = Arc::new(move |block, _| {
            assert_eq!(block.grid_dim, Dim3 { x: 7, y: 5, z: 3 });
            assert_eq!(block.block_dim, Dim3 { x: 2, y: 3, z: 1 });
            let Dim3 { x, y, z } = block.block_idx;
            seen[(z * 35 + y * 7 + x) as usize].fetch_add(1, Ordering::Relaxed);
        });
        let module = d.host_module([("visit", kernel)]);
        let function = d.function(&module, "visit").unwrap();
        let stream = d.create_stream().unwrap();
        let config = LaunchConfig {
            grid,
            block: Dim3 { x: 2, y: 3, z: 1 },
            shared_mem_bytes: 0,
        };
        // SAFETY: the kernel touches no device memory.
        unsafe { d.launch(&stream, &function, &config, &[]) }.unwrap();
        d.synchronize().unwrap();
        assert!(visits.iter().all(|v| v.load(Ordering::Relaxed) == 1));
    }

    #[test]
    fn a_panicking_kernel_fails_its_stream_only() {
        let d = driver(16 << 20);
        let boom: Arc<HostKernelFn> = Arc::new(|block, _| {
            if block.block_idx.x == 3 {
                panic!("boom at three");
            }
        });
        let module = d.host_module([("boom", boom)]);
        let function = d.function(&module, "boom").unwrap();
        let stream = d.create_stream().unwrap();
        let config = LaunchConfig::for_elements(64 * 32, 32);
        // SAFETY: the kernel touches no device memory.
        unsafe { d.launch(&stream, &function, &config, &[]) }.unwrap();
        let after = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&after);
        d.on_complete(
            &stream,
            Box::new(move || {
                counter.fetch_add(1, Ordering::SeqCst);
            }),
        )
        .unwrap();

        let err = d.stream_synchronize(&stream).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::LaunchFailed);
        let text = err.to_string();
        assert!(
            text.starts_with("stream_synchronize: launch failed: "),
            "{text}"
        );
        assert!(
            text.contains("kernel `boom` panicked in block (3, 0, 0): boom at three"),
            "{text}"
        );
        // Sticky, yet later work still ran exactly once.
        assert_eq!(
            d.stream_synchronize(&stream).unwrap_err().kind(),
            ErrorKind::LaunchFailed
        );
        assert_eq!(d.synchronize().unwrap_err().kind(), ErrorKind::LaunchFailed);
        assert_eq!(after.load(Ordering::SeqCst), 1);

        // Copies ignore the failed stream; a new stream is clean.
        let buffer = d.alloc_device(16).unwrap();
        d.copy_to_device(buffer.full(), &[9; 16]).unwrap();
        let fresh = d.create_stream().unwrap();
        d.stream_synchronize(&fresh).unwrap();
        drop(stream);
        d.synchronize().unwrap();
        let out = run_affine(&d, 1000);
        assert_eq!(out[999], 2998);
    }

    #[test]
    fn with_faults_losing_the_device_a_panic_fails_every_later_call() {
        let d = driver(16 << 20);
        d.set_faults_lose_device(true);
        let boom: Arc<HostKernelFn> = Arc::new(|_, _| panic!("wild store"));
        let module = d.host_module([("boom", boom)]);
        let function = d.function(&module, "boom").unwrap();
        let (stream, other) = (d.create_stream().unwrap(), d.create_stream().unwrap());
        let buffer = d.alloc_device(16).unwrap();
        // SAFETY: the kernel touches no device memory.
        unsafe { d.launch(&stream, &function, &LaunchConfig::for_elements(32, 32), &[]) }.unwrap();
        let err = d.stream_synchronize(&stream).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::DeviceLost, "{err}");
        assert!(err.to_string().contains("wild store"), "{err}");
        for err in [
            d.stream_query(&other).map(drop).unwrap_err(),
            d.alloc_device(16).map(drop).unwrap_err(),
            d.copy_to_device(buffer.full(), &[1; 16]).unwrap_err(),
            d.create_stream().map(drop).unwrap_err(),
            d.mem_info().map(drop).unwrap_err(),
            d.synchronize().unwrap_err(),
        ] {
            assert_eq!(err.kind(), ErrorKind::DeviceLost, "{err}");
        }
        // Teardown still works.
        drop((buffer, stream, other));
    }

    #[test]
    fn images_need_the_cuda_driver() {
        let d = driver(1 << 20);
        let err = d.load_ptx(".version 8.0\n.target sm_90\n").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotSupported);
        assert_eq!(
            err.to_string(),
            "load_ptx: not supported: running PTX needs the CUDA driver (this is the CPU \
             driver, and no host twin is registered for this PTX text)"
        );
        let err = d.load_cubin(&[0x7f, b'E', b'L', b'F']).unwrap_err();
        assert_eq!(
            (err.kind(), err.op()),
            (ErrorKind::NotSupported, "load_cubin")
        );
    }

    #[test]
    fn a_registered_twin_stands_in_for_its_exact_ptx_text() {
        let d = driver(1 << 20);
        let ptx = ".version 8.0\n.target sm_90\n.visible .entry affine()\n";
        d.register_ptx_twin(ptx, [("affine", affine())]);
        let module = d.load_ptx(ptx).unwrap();
        assert_eq!(module.names().collect::<Vec<_>>(), ["affine"]);
        let out = run_affine_with(&d, &d.function(&module, "affine").unwrap(), 1000);
        assert_eq!(out[999], 2998);
        // Any other text, even one byte off, is still refused.
        let other = ptx.replace("sm_90", "sm_80");
        assert_eq!(
            d.load_ptx(&other).unwrap_err().kind(),
            ErrorKind::NotSupported
        );
    }

    #[test]
    fn covers_knows_live_memory_only() {
        let d = driver(1 << 20);
        let buf = d.alloc_device(4096).unwrap();
        let p = buf.device_ptr();
        assert!(d.covers(p, 4096));
        assert!(!d.covers(p, 4097));
        assert!(!d.covers(DevicePtr(p.0 + 4096), 1));
        assert!(!d.covers(DevicePtr(u64::MAX), 2));
        drop(buf);
        assert!(!d.covers(p, 1));
        let weak = d.downgrade();
        assert!(weak.upgrade().is_some());
        drop(d);
        assert!(
            weak.upgrade().is_none(),
            "a weak handle does not keep the driver"
        );
    }

    #[test]
    fn unknown_kernels_are_not_found() {
        let d = driver(1 << 20);
        let module = d.host_module([("affine", affine()), ("other", affine())]);
        let err = d.function(&module, "missing").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotFound);
        assert!(err.message().contains("`missing`"), "{err}");
        assert!(err.message().contains("affine, other"), "{err}");
        assert_eq!(d.function(&module, "other").unwrap().name(), "other");
    }

    #[test]
    fn bad_launches_are_refused_before_running() {
        let d = driver(1 << 20);
        let ran = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&ran);
        let kernel: Arc<HostKernelFn> = Arc::new(move |_, _| {
            counter.fetch_add(1, Ordering::SeqCst);
        });
        let module = d.host_module([("count", kernel)]);
        let function = d.function(&module, "count").unwrap();
        let stream = d.create_stream().unwrap();
        let good = LaunchConfig::for_elements(1, 1);
        let zero = LaunchConfig {
            grid: Dim3 { x: 1, y: 0, z: 1 },
            ..good
        };
        let wide = LaunchConfig {
            block: Dim3::linear(2048),
            ..good
        };
        let shared = LaunchConfig {
            shared_mem_bytes: 48 * 1024 + 1,
            ..good
        };
        let too_many = [KernelParam::I32(1); MAX_KERNEL_PARAMS + 1];
        let other = driver(1 << 20);
        let foreign = other.create_stream().unwrap();
        let refuse = |stream: &crate::CpuStream, config: &LaunchConfig, params: &[KernelParam]| {
            // SAFETY: the kernel touches no device memory (and these
            // launches are refused before it runs).
            unsafe { d.launch(stream, &function, config, params) }.unwrap_err()
        };
        let errors = [
            refuse(&stream, &zero, &[]),
            refuse(&stream, &wide, &[]),
            refuse(&stream, &shared, &[]),
            refuse(&stream, &good, &too_many),
            refuse(&foreign, &good, &[]),
        ];
        for err in &errors {
            assert_eq!(
                (err.kind(), err.op()),
                (ErrorKind::InvalidArgument, "launch"),
                "{err}"
            );
        }
        assert!(
            errors[3]
                .message()
                .contains("more than 64 kernel parameters")
        );
        let map = tensorwasm_core::TensorMapSpec::new(
            tensorwasm_core::TensorMapDtype::F32,
            tensorwasm_core::DevicePtr(0x1000),
            &[64, 64],
            &[256],
            &[32, 32],
            tensorwasm_core::TensorMapSwizzle::None,
        )
        .unwrap();
        let err = refuse(
            &stream,
            &good,
            &[KernelParam::I32(1), KernelParam::TensorMap(map)],
        );
        assert_eq!(err.kind(), ErrorKind::NotSupported, "{err}");
        assert!(
            err.message().contains("parameter 1 is a tensor map"),
            "{err}"
        );
        // SAFETY: the kernel touches no device memory.
        unsafe {
            d.launch(
                &stream,
                &function,
                &good,
                &[KernelParam::I32(1); MAX_KERNEL_PARAMS],
            )
        }
        .unwrap();
        d.synchronize().unwrap();
        assert_eq!(ran.load(Ordering::SeqCst), 1);
    }
}
