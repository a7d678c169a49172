//! CUDA-specific behaviour on a real GPU: JIT logs, cubins, parameter checks.

mod common;

use tensorwasm_core::{DeviceMemory, DriverError, ErrorKind, GpuDriver, KernelParam, LaunchConfig};
use tensorwasm_cuda::{CudaDriver, JitCache};

#[test]
#[ignore = "needs a CUDA GPU"]
fn bad_ptx_reports_invalid_ptx_with_the_jit_log() {
    let d = common::driver();
    let bad = ".version 7.0\n.target sm_70\n.address_size 64\n\
               .visible .entry broken() {\n  this_is_not_ptx %r1;\n  ret;\n}\n";
    let err = d.load_ptx(bad).err().expect("bad PTX must be refused");
    assert_eq!(err.code_name(), Some("CUDA_ERROR_INVALID_PTX"), "{err}");
    assert_eq!(err.code(), Some(218));
    assert_eq!(err.kind(), ErrorKind::InvalidImage);
    let log = err.jit_log().expect("JIT log");
    assert!(!log.is_empty(), "empty JIT log");
    println!("JIT log: {log}");
    // PTX is compiled by the driver's linker (`jit.rs`).
    assert!(err.to_string().contains("cuLinkAddData_v2"), "{err}");
    // The context is still healthy.
    let f = common::vadd(&d);
    assert_eq!(f.param_sizes(), Some(&[8, 8, 8, 4][..]));
}

/// PTX is compiled once: a second driver (as a new process would) loads
/// the cubin the first stored, and not the PTX. Shown by swapping the
/// vector add's entry for another kernel's: the vector add's PTX then
/// loads a module without `vadd`. A damaged entry is compiled again.
#[test]
#[ignore = "needs a CUDA GPU"]
fn ptx_is_compiled_once_then_loaded_from_the_jit_cache() {
    let dir = std::env::temp_dir().join(format!("tensorwasm-jit-gpu-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cached = || common::driver().with_jit_cache(Some(JitCache::at(&dir)));
    let entries = || {
        let mut v: Vec<_> = std::fs::read_dir(&dir)
            .map(|r| r.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default();
        v.retain(|p| p.extension().is_some_and(|x| x == "cubin"));
        v.sort();
        v
    };
    let other = ".version 7.0\n.target sm_70\n.address_size 64\n\
                 .visible .entry other() {\n  ret;\n}\n";

    let d = cached();
    let f = common::vadd(&d);
    assert_eq!(f.param_sizes(), Some(&[8, 8, 8, 4][..]));
    let vadd_entry = entries();
    assert_eq!(vadd_entry.len(), 1, "one entry after one compile");
    let m = d.load_ptx(other).unwrap_or_else(|e| panic!("{e}"));
    d.function(&m, "other").unwrap_or_else(|e| panic!("{e}"));
    let both = entries();
    assert_eq!(both.len(), 2);
    let other_entry = both.iter().find(|p| **p != vadd_entry[0]).unwrap();

    std::fs::copy(other_entry, &vadd_entry[0]).unwrap();
    let d = cached();
    let m = d
        .load_ptx(common::VECTOR_ADD_PTX)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        d.function(&m, "vadd").is_err(),
        "the cached cubin, not the PTX"
    );
    d.function(&m, "other").unwrap_or_else(|e| panic!("{e}"));

    // Damaged: refused, removed, compiled again.
    let mut bytes = std::fs::read(&vadd_entry[0]).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x55;
    std::fs::write(&vadd_entry[0], &bytes).unwrap();
    let f = common::vadd(&cached());
    assert_eq!(f.param_sizes(), Some(&[8, 8, 8, 4][..]));
    // Without a cache, nothing is read or written.
    std::fs::remove_dir_all(&dir).unwrap();
    let f = common::vadd(&common::driver().with_jit_cache(None));
    assert_eq!(f.param_sizes(), Some(&[8, 8, 8, 4][..]));
    assert!(!dir.exists());
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn ptx_with_a_nul_byte_is_refused_before_the_driver() {
    let d = common::driver();
    let err = d.load_ptx("abc\0def").err().expect("refused");
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn cubin_loads_and_runs_and_truncated_cubin_is_refused() {
    let d = common::driver();
    if d.device().compute_capability != Some((9, 0)) {
        eprintln!("skipping: the test cubin is for sm_90");
        return;
    }
    let m = d.load_cubin(common::VECTOR_ADD_SM90).expect("load_cubin");
    let f = d.function(&m, "vadd").expect("vadd");
    let n = 1000usize;
    let a = d.alloc_managed(n * 4).unwrap();
    let c = d.alloc_managed(n * 4).unwrap();
    let data: Vec<u8> = (0..n)
        .flat_map(|i| (i as f32 + 0.25).to_le_bytes())
        .collect();
    d.copy_to_device(a.full(), &data).unwrap();
    let s = d.create_stream().unwrap();
    let params = [
        KernelParam::Ptr(a.device_ptr()),
        KernelParam::Ptr(a.device_ptr()),
        KernelParam::Ptr(c.device_ptr()),
        KernelParam::I32(n as i32),
    ];
    // SAFETY: n floats in both buffers, alive until the sync below.
    unsafe { d.launch(&s, &f, &LaunchConfig::for_elements(n as u32, 128), &params) }.unwrap();
    d.stream_synchronize(&s).unwrap();
    let mut out = vec![0u8; n * 4];
    d.copy_from_device(&mut out, c.full()).unwrap();
    for (i, ch) in out.chunks_exact(4).enumerate() {
        let v = f32::from_le_bytes(ch.try_into().unwrap());
        assert_eq!(v, 2.0 * (i as f32 + 0.25));
    }
    let cut = &common::VECTOR_ADD_SM90[..common::VECTOR_ADD_SM90.len() / 2];
    let err = d.load_cubin(cut).err().expect("truncated cubin refused");
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    let err = d.load_cubin(b"not a cubin at all").err().expect("refused");
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn wrong_parameters_are_refused_before_launch() {
    let d = common::driver();
    let f = common::vadd(&d);
    let s = d.create_stream().unwrap();
    let buf = d.alloc_device(16).unwrap();
    let cfg = LaunchConfig::for_elements(4, 4);
    let p = KernelParam::Ptr(buf.device_ptr());
    // SAFETY: refused before launch (3 parameters for a 4-parameter kernel).
    let err = unsafe { d.launch(&s, &f, &cfg, &[p, p, p]) }.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(err.to_string().contains("takes 4 parameters"), "{err}");
    // SAFETY: refused before launch (n passed as 8 bytes, the kernel takes 4).
    let err = unsafe { d.launch(&s, &f, &cfg, &[p, p, p, KernelParam::I64(4)]) }.unwrap_err();
    assert!(err.to_string().contains("parameter 3"), "{err}");
    let missing = d.load_ptx(common::VECTOR_ADD_PTX).unwrap();
    let err = d.function(&missing, "no_such_kernel").err().unwrap();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
    d.stream_synchronize(&s).unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn probe_lists_the_device() {
    let devices = CudaDriver::probe().expect("probe");
    assert!(!devices.is_empty());
    let d = common::driver();
    assert_eq!(&devices[0], d.device());
    let info = d.device();
    println!("{info:?}");
    assert!(info.compute_capability.is_some());
    assert!(info.driver_version >= Some(tensorwasm_cuda::MIN_DRIVER_VERSION));
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_missing_device_ordinal_is_a_typed_error() {
    let count = CudaDriver::probe().expect("probe").len() as u32;
    match CudaDriver::new(count) {
        Err(tensorwasm_cuda::CudaError::NoDevice { ordinal, count: c }) => {
            assert_eq!((ordinal, c), (count, count));
        }
        other => panic!("expected NoDevice, got {other:?}"),
    }
    let e = CudaDriver::new(count + 7).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable);
    assert!(e.to_string().contains("device(s) present"), "{e}");
}
