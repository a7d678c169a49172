//! A kernel that faults makes `stream_query` fail with `DeviceLost`, on
//! its own stream and on every other stream of the context (CUDA's errors
//! of this kind are sticky for the whole context). Alone in its binary: the
//! fault leaves the process's primary context unusable.

use std::{
    thread,
    time::{Duration, Instant},
};

use tensorwasm_core::{DevicePtr, DriverError, ErrorKind, GpuDriver, KernelParam, LaunchConfig};

mod common;

/// `fault(p)`: one store to `p`, which the test points at unmapped memory.
const FAULT_PTX: &str = include_str!("fault.ptx");

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_faulting_kernel_makes_stream_query_fail() {
    let d = common::driver();
    let module = d.load_ptx(FAULT_PTX).unwrap_or_else(|e| panic!("{e}"));
    let fault = d.function(&module, "fault").unwrap();
    let stream = d.create_stream().unwrap();
    let other = d.create_stream().unwrap();
    assert!(d.stream_query(&stream).unwrap());
    assert!(d.stream_query(&other).unwrap());

    // The lowest page is never mapped.
    let params = [KernelParam::Ptr(DevicePtr(256))];
    // SAFETY: the store faults on the device, which is what this test is
    // for; no host memory is touched.
    unsafe { d.launch(&stream, &fault, &LaunchConfig::for_elements(1, 1), &params) }.unwrap();

    // The launch is asynchronous: poll (in a test only) until the fault is
    // reported, which must not read as a clean completion.
    let deadline = Instant::now() + Duration::from_secs(20);
    let err = loop {
        match d.stream_query(&stream) {
            Ok(false) if Instant::now() < deadline => thread::sleep(Duration::from_millis(1)),
            Ok(done) => panic!("stream_query gave Ok({done}) instead of the fault"),
            Err(e) => break e,
        }
    };
    println!("stream_query after the fault: {err}");
    assert_eq!(err.kind(), ErrorKind::DeviceLost, "{err}");

    let again = d.stream_query(&stream).unwrap_err();
    assert_eq!(again.kind(), ErrorKind::DeviceLost, "sticky: {again}");
    let elsewhere = d.stream_query(&other).unwrap_err();
    assert_eq!(
        elsewhere.kind(),
        ErrorKind::DeviceLost,
        "another stream: {elsewhere}"
    );
    // Every other call too: an allocation, a new stream.
    let alloc = d.alloc_device(4096).map(drop).unwrap_err();
    assert_eq!(alloc.kind(), ErrorKind::DeviceLost, "alloc: {alloc}");
    let stream3 = d.create_stream().map(drop).unwrap_err();
    assert_eq!(stream3.kind(), ErrorKind::DeviceLost, "stream: {stream3}");
}
