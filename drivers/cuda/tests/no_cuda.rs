//! Without a usable libcuda, every entry point returns a typed error naming
//! the library or symbol; nothing panics. Runs everywhere (CI has no GPU).
//! One test per binary concern: it sets `TENSORWASM_LIBCUDA` for the process.

use tensorwasm_core::{DriverError, ErrorKind};
use tensorwasm_cuda::{CudaDriver, CudaError, LIBCUDA_ENV};

#[test]
fn missing_library_and_missing_symbol_are_typed_errors() {
    // SAFETY: this binary has a single test, so no other thread reads the
    // environment while it changes.
    unsafe { std::env::set_var(LIBCUDA_ENV, "/nonexistent/libcuda.so.1") };
    match CudaDriver::new(0) {
        Err(CudaError::LibraryNotFound { library, reason }) => {
            assert_eq!(library, "/nonexistent/libcuda.so.1");
            assert!(!reason.is_empty());
        }
        other => panic!("expected LibraryNotFound, got {other:?}"),
    }
    let e = CudaDriver::probe().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable);
    assert!(e.to_string().contains("/nonexistent/libcuda.so.1"), "{e}");

    // A real library that is not libcuda: loads, but has no cuInit.
    let libc = if cfg!(target_os = "linux") {
        "libc.so.6"
    } else {
        return;
    };
    // SAFETY: as above.
    unsafe { std::env::set_var(LIBCUDA_ENV, libc) };
    match CudaDriver::new(0) {
        Err(CudaError::MissingSymbol { symbol }) => assert_eq!(symbol, "cuInit"),
        other => panic!("expected MissingSymbol, got {other:?}"),
    }
    let e = CudaDriver::probe().unwrap_err();
    assert!(e.to_string().contains("cuInit"), "{e}");
}
