//! Tensor maps and opt-in dynamic shared memory on a real GPU: a TMA copy
//! through a map the driver encodes at launch, into shared memory beyond
//! 48 KiB, and the refusals that come before the driver.

mod common;

use tensorwasm_core::{
    DeviceMemory, DevicePtr, Dim3, DriverError, ErrorKind, GpuDriver, KernelParam, LaunchConfig,
    TensorMapDtype, TensorMapSpec, TensorMapSwizzle,
};
use tensorwasm_cuda::{CudaDriver, CudaFunction};

/// The hand-written TMA kernel (kernels/test/README.md).
const TMA_BOX_COPY_PTX: &str = include_str!("../../../kernels/test/tma_box_copy.ptx");

/// The tensor: ROWS x COLS f32, rows PITCH elements apart (the padding
/// between holds -1, which must never be read: it lies outside the map).
const ROWS: usize = 40;
const COLS: usize = 72;
const PITCH: usize = 80;
/// The box, innermost first.
const BOX: [u32; 2] = [32, 16];
/// Where the box goes in dynamic shared memory, and how much the launch asks
/// for: both past the 48 KiB a kernel has without opting in.
const BOX_OFFSET: u32 = 96 * 1024;
const SHARED_BYTES: u32 = 100 * 1024;

fn value(row: usize, col: usize) -> f32 {
    (row * 1000 + col) as f32 + 0.5
}

/// A Hopper (or later) device, or `None` with a note: TMA needs sm_90.
fn hopper() -> Option<CudaDriver> {
    let d = common::driver();
    match d.device().compute_capability {
        Some((major, _)) if major >= 9 => Some(d),
        cc => {
            eprintln!("skipping: tensor maps need sm_90, the device is {cc:?}");
            None
        }
    }
}

fn tma_box_copy(d: &CudaDriver) -> CudaFunction {
    let m = d
        .load_ptx(TMA_BOX_COPY_PTX)
        .unwrap_or_else(|e| panic!("load_ptx: {e}"));
    d.function(&m, "tma_box_copy")
        .unwrap_or_else(|e| panic!("function: {e}"))
}

fn map_of(base: DevicePtr) -> TensorMapSpec {
    TensorMapSpec::new(
        TensorMapDtype::F32,
        base,
        &[COLS as u64, ROWS as u64],
        &[(PITCH * 4) as u64],
        &BOX,
        TensorMapSwizzle::None,
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

fn params(map: TensorMapSpec, out: DevicePtr, x: i32, y: i32) -> [KernelParam; 6] {
    [
        KernelParam::TensorMap(map),
        KernelParam::Ptr(out),
        KernelParam::I32(x),
        KernelParam::I32(y),
        KernelParam::I32(BOX_OFFSET as i32),
        KernelParam::I32(map.box_bytes() as i32),
    ]
}

fn config(shared_mem_bytes: u32) -> LaunchConfig {
    LaunchConfig {
        grid: Dim3::linear(1),
        block: Dim3::linear(128),
        shared_mem_bytes,
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_tma_box_lands_in_opt_in_shared_memory_with_zeros_past_the_edges() {
    let Some(d) = hopper() else { return };
    let info = d.device();
    println!(
        "shared memory per block: {} bytes, {} opting in",
        info.max_shared_memory_per_block, info.max_shared_memory_per_block_optin
    );
    assert!(info.max_shared_memory_per_block_optin >= SHARED_BYTES);
    assert!(info.max_shared_memory_per_block < SHARED_BYTES);
    let f = tma_box_copy(&d);
    assert_eq!(f.param_sizes(), Some(&[128, 8, 4, 4, 4, 4][..]));
    assert_eq!(f.dynamic_shared_allowed(), 0);

    let tensor = d.alloc_device(ROWS * PITCH * 4).unwrap();
    let host: Vec<u8> = (0..ROWS * PITCH)
        .map(|i| {
            let (row, col) = (i / PITCH, i % PITCH);
            if col < COLS { value(row, col) } else { -1.0 }
        })
        .flat_map(f32::to_le_bytes)
        .collect();
    d.copy_to_device(tensor.full(), &host).unwrap();
    let map = map_of(tensor.device_ptr());
    assert!(map.extent_bytes().unwrap() <= tensor.len() as u64);
    let box_len = (BOX[0] * BOX[1]) as usize;
    let out = d.alloc_device(box_len * 4).unwrap();
    let s = d.create_stream().unwrap();

    // Inside; hanging over the right edge (into the padding) and the bottom;
    // before the first row and column; from the last 16 bytes of the last
    // row. The innermost coordinate is always a whole 16 bytes from the
    // base: the H100 faults (CUDA_ERROR_ILLEGAL_INSTRUCTION) on a copy that
    // starts elsewhere, which no encoding check can catch.
    for (x, y) in [
        (8, 4),
        (56, 32),
        (-8, -4),
        (COLS as i32 - 4, ROWS as i32 - 1),
    ] {
        d.memset(out.full(), 0x55).unwrap();
        // SAFETY: the map covers `tensor` (its extent checked above) and the
        // kernel writes `box_len` floats to `out`; both live past the sync.
        unsafe {
            d.launch(
                &s,
                &f,
                &config(SHARED_BYTES),
                &params(map, out.device_ptr(), x, y),
            )
        }
        .unwrap_or_else(|e| panic!("box at ({x}, {y}): {e}"));
        d.stream_synchronize(&s).unwrap();
        let mut bytes = vec![0u8; box_len * 4];
        d.copy_from_device(&mut bytes, out.full()).unwrap();
        for (i, ch) in bytes.chunks_exact(4).enumerate() {
            let got = f32::from_le_bytes(ch.try_into().unwrap());
            let row = i64::from(y) + (i / BOX[0] as usize) as i64;
            let col = i64::from(x) + (i % BOX[0] as usize) as i64;
            let inside = (0..ROWS as i64).contains(&row) && (0..COLS as i64).contains(&col);
            let want = if inside {
                value(row as usize, col as usize)
            } else {
                0.0
            };
            assert_eq!(
                got.to_bits(),
                want.to_bits(),
                "box at ({x}, {y}), element {i} (row {row}, column {col})"
            );
        }
    }
    // One opt-in for all four launches.
    assert_eq!(f.dynamic_shared_allowed(), SHARED_BYTES);
}

/// f32 bits rounded to tf32 to nearest, ties to even; a NaN to 0x7fffe000
/// (what `TensorMapDtype::Tf32` promises; the built-in TF32 GEMM's
/// `tensorwasm_kernels::oracle::tf32_round`).
fn tf32_bits(x: u32) -> u32 {
    if x & 0x7fff_ffff > 0x7f80_0000 {
        0x7fff_e000
    } else {
        (x + 0xfff + ((x >> 13) & 1)) & 0xffff_e000
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_tf32_map_rounds_ties_to_even_and_keeps_subnormals() {
    let Some(d) = hopper() else { return };
    let f = tma_box_copy(&d);
    // Halfway cases with an even and an odd last kept bit, either side of
    // them, exact values, in normal and subnormal ranges and next to the
    // largest finite value (which rounds up to infinity), both signs; then
    // infinities, NaNs and random bits.
    let mut words = Vec::new();
    for sign in [0, 0x8000_0000u32] {
        for exponent in [0, 0x0080_0000, 0x3f80_0000, 0x7f00_0000] {
            for kept in [0, 0x2000, 0x7f_e000] {
                for dropped in [0, 1, 0xfff, 0x1000, 0x1001, 0x1fff] {
                    words.push(sign | exponent | kept | dropped);
                }
            }
        }
        words.extend([0x7f80_0000, 0x7fc0_0000, 0x7f80_0001, 0x7f80_1000].map(|w| sign | w));
    }
    let seed = 0x7f32_2026_u64;
    println!("random words from xorshift64 seed {seed:#x}");
    let mut state = seed;
    let box_len = (BOX[0] * BOX[1]) as usize;
    while words.len() < box_len {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        words.push((state >> 32) as u32);
    }
    let tensor = d.alloc_device(box_len * 4).unwrap();
    let host: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    d.copy_to_device(tensor.full(), &host).unwrap();
    let map = TensorMapSpec::new(
        TensorMapDtype::Tf32,
        tensor.device_ptr(),
        &[u64::from(BOX[0]), u64::from(BOX[1])],
        &[u64::from(BOX[0]) * 4],
        &BOX,
        TensorMapSwizzle::None,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let out = d.alloc_device(box_len * 4).unwrap();
    let s = d.create_stream().unwrap();
    // SAFETY: the map covers exactly `tensor`, and the kernel writes
    // `box_len` words to `out`; both live past the sync.
    unsafe {
        d.launch(
            &s,
            &f,
            &config(SHARED_BYTES),
            &params(map, out.device_ptr(), 0, 0),
        )
    }
    .unwrap_or_else(|e| panic!("{e}"));
    d.stream_synchronize(&s).unwrap();
    let mut bytes = vec![0u8; box_len * 4];
    d.copy_from_device(&mut bytes, out.full()).unwrap();
    for (x, ch) in words.iter().zip(bytes.chunks_exact(4)) {
        let got = u32::from_le_bytes(ch.try_into().unwrap());
        assert_eq!(got, tf32_bits(*x), "{x:#010x} became {got:#010x}");
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn too_much_shared_memory_and_bad_maps_are_refused_before_the_driver() {
    let Some(d) = hopper() else { return };
    let f = tma_box_copy(&d);
    let tensor = d.alloc_device(ROWS * PITCH * 4).unwrap();
    let out = d.alloc_device(4096).unwrap();
    let s = d.create_stream().unwrap();
    let map = map_of(tensor.device_ptr());
    let launch = |config: &LaunchConfig, params: &[KernelParam]| {
        // SAFETY: every launch here is refused before the driver runs it.
        unsafe { d.launch(&s, &f, config, params) }.unwrap_err()
    };

    let optin = d.device().max_shared_memory_per_block_optin;
    let err = launch(&config(optin + 1), &params(map, out.device_ptr(), 0, 0));
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    assert!(
        err.to_string().contains("more dynamic shared memory"),
        "{err}"
    );
    assert_eq!(
        f.dynamic_shared_allowed(),
        0,
        "no opt-in for a refused launch"
    );

    // A map whose base is not 16-byte aligned: core's check, named.
    let mut bad = map;
    bad.base = DevicePtr(tensor.device_ptr().0 + 4);
    let err = launch(&config(SHARED_BYTES), &params(bad, out.device_ptr(), 0, 0));
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    let text = err.to_string();
    assert!(
        text.contains("tma_box_copy") && text.contains("parameter 0") && text.contains("16-byte"),
        "{text}"
    );
    // A box row wider than its swizzle.
    let mut bad = map;
    bad.swizzle = TensorMapSwizzle::B64;
    let err = launch(&config(SHARED_BYTES), &params(bad, out.device_ptr(), 0, 0));
    assert!(err.to_string().contains("swizzle"), "{err}");

    // A pointer where the kernel takes a tensor map, and the other way round.
    let mut wrong = params(map, out.device_ptr(), 0, 0);
    wrong[0] = KernelParam::Ptr(tensor.device_ptr());
    let err = launch(&config(SHARED_BYTES), &wrong);
    assert!(
        err.to_string().contains("parameter 0 is 128 bytes"),
        "{err}"
    );
    let mut wrong = params(map, out.device_ptr(), 0, 0);
    wrong[1] = KernelParam::TensorMap(map);
    let err = launch(&config(SHARED_BYTES), &wrong);
    assert!(err.to_string().contains("parameter 1 is 8 bytes"), "{err}");
    assert_eq!(f.dynamic_shared_allowed(), 0);

    // The context is still healthy.
    let ok = common::vadd(&d);
    assert_eq!(ok.param_sizes(), Some(&[8, 8, 8, 4][..]));
}
