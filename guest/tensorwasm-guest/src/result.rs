//! The thin layer: one safe function per `wasi_cuda` import, with the
//! import's name, that passes Rust values as the ABI's integers, reads the
//! out-pointer and turns the errno into a `Result` carrying the host's
//! `last_error` text. No logic and no resource ownership: that is the safe
//! layer's job (the crate root's types).
//!
//! Handles are plain `u64` here; nothing stops a caller from passing a stale
//! one, and nothing has to: the host refuses it with `EBADH`.

use alloc::string::String;
use alloc::vec;

use crate::error::{Errno, Error};
use crate::sys::{self, ArgDescriptor};

/// The guest address of `value`, as the ABI's `i32` pointer.
fn guest_ptr<T: ?Sized>(value: *const T) -> i32 {
    // Exposed, not just `addr()`: the host reads and writes through this
    // integer, so the compiler must treat the pointee as escaped. Wasm32
    // addresses are 32 bits; the host reads the `i32` back as `u32`.
    value.cast::<u8>().expose_provenance() as i32
}

/// A slice length as the ABI's `i32`. A wasm32 slice is at most
/// `isize::MAX` (2^31 - 1) bytes, so this never wraps there.
fn guest_len(len: usize) -> i32 {
    len as i32
}

/// `Ok` for `0`; for any other code the [`Error`] with the host's text.
fn check(code: i32) -> Result<(), Error> {
    if code == 0 {
        return Ok(());
    }
    Err(Error {
        errno: Errno::from_code(code).unwrap_or(Errno::EDRIVER),
        message: last_error_text(),
    })
}

/// The text of the most recent failure, read in full (a second call with a
/// buffer of the reported length when the first was too short).
pub(crate) fn last_error_text() -> String {
    let mut buf = vec![0u8; 256];
    let Ok(full) = last_error(&mut buf) else {
        return String::new();
    };
    let mut full = full as usize;
    if full > buf.len() {
        buf.resize(full, 0);
        full = last_error(&mut buf).map_or(0, |n| n as usize);
    }
    buf.truncate(full.min(buf.len()));
    match String::from_utf8(buf) {
        Ok(text) => text,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    }
}

/// `device_count`: the number of devices this guest may use.
pub fn device_count() -> Result<u32, Error> {
    let mut count = 0u32;
    // SAFETY: the out-pointer names a live, aligned `u32` that the host may
    // write; nothing else reads it during the call.
    check(unsafe { sys::device_count(guest_ptr(&raw mut count)) })?;
    Ok(count)
}

/// `device_info`: the first `out.len()` bytes (at most 128) of the record.
pub fn device_info(device: u32, out: &mut [u8]) -> Result<(), Error> {
    // SAFETY: `out` is a live, writable range of exactly the length passed.
    check(unsafe {
        sys::device_info(
            device as i32,
            guest_ptr(out.as_mut_ptr()),
            guest_len(out.len()),
        )
    })
}

/// `buffer_alloc`: a new buffer of `size` bytes; its handle.
pub fn buffer_alloc(size: u64) -> Result<u64, Error> {
    let mut handle = 0u64;
    // SAFETY: the out-pointer names a live, 8-aligned `u64`.
    check(unsafe { sys::buffer_alloc(size as i64, guest_ptr(&raw mut handle)) })?;
    Ok(handle)
}

/// `buffer_free`: releases a buffer.
pub fn buffer_free(buffer: u64) -> Result<(), Error> {
    // SAFETY: the call touches no guest memory.
    check(unsafe { sys::buffer_free(buffer as i64) })
}

/// `buffer_size`: a buffer's size in bytes.
pub fn buffer_size(buffer: u64) -> Result<u64, Error> {
    let mut size = 0u64;
    // SAFETY: the out-pointer names a live, 8-aligned `u64`.
    check(unsafe { sys::buffer_size(buffer as i64, guest_ptr(&raw mut size)) })?;
    Ok(size)
}

/// `copy_to_buffer`: `src` into the buffer at `dst_offset`.
pub fn copy_to_buffer(dst: u64, dst_offset: u64, src: &[u8]) -> Result<(), Error> {
    // SAFETY: the host only reads `src`, which is live for the call.
    check(unsafe {
        sys::copy_to_buffer(
            dst as i64,
            dst_offset as i64,
            guest_ptr(src.as_ptr()),
            guest_len(src.len()),
        )
    })
}

/// `copy_from_buffer`: the buffer at `src_offset` into `dst`.
pub fn copy_from_buffer(dst: &mut [u8], src: u64, src_offset: u64) -> Result<(), Error> {
    // SAFETY: the host writes at most `dst.len()` bytes into `dst`, which is
    // live and exclusively ours for the call; any byte value is a valid `u8`.
    check(unsafe {
        sys::copy_from_buffer(
            guest_ptr(dst.as_mut_ptr()),
            src as i64,
            src_offset as i64,
            guest_len(dst.len()),
        )
    })
}

/// `copy_buffer`: `len` bytes from one buffer range to another.
pub fn copy_buffer(
    dst: u64,
    dst_offset: u64,
    src: u64,
    src_offset: u64,
    len: u64,
) -> Result<(), Error> {
    // SAFETY: the call touches no guest memory.
    check(unsafe {
        sys::copy_buffer(
            dst as i64,
            dst_offset as i64,
            src as i64,
            src_offset as i64,
            len as i64,
        )
    })
}

/// `memset_buffer`: `len` bytes of the buffer at `dst_offset` set to `value`.
pub fn memset_buffer(dst: u64, dst_offset: u64, value: u8, len: u64) -> Result<(), Error> {
    // SAFETY: the call touches no guest memory.
    check(unsafe { sys::memset_buffer(dst as i64, dst_offset as i64, value.into(), len as i64) })
}

/// `module_load_ptx`: a module JIT-compiled from PTX text; its handle.
pub fn module_load_ptx(ptx: &str) -> Result<u64, Error> {
    let mut module = 0u64;
    // SAFETY: the host reads `ptx` (live for the call) and writes the
    // out-pointer, a live, 8-aligned `u64`.
    check(unsafe {
        sys::module_load_ptx(
            guest_ptr(ptx.as_ptr()),
            guest_len(ptx.len()),
            guest_ptr(&raw mut module),
        )
    })?;
    Ok(module)
}

/// `module_load_cubin`: a module from a cubin or fatbin image; its handle.
pub fn module_load_cubin(image: &[u8]) -> Result<u64, Error> {
    let mut module = 0u64;
    // SAFETY: as for `module_load_ptx`.
    check(unsafe {
        sys::module_load_cubin(
            guest_ptr(image.as_ptr()),
            guest_len(image.len()),
            guest_ptr(&raw mut module),
        )
    })?;
    Ok(module)
}

/// `module_unload`: releases a module.
pub fn module_unload(module: u64) -> Result<(), Error> {
    // SAFETY: the call touches no guest memory.
    check(unsafe { sys::module_unload(module as i64) })
}

/// `kernel_get`: a kernel made of this module's function `index` (Wasm
/// function index space, imports first); its function handle.
pub fn kernel_get(index: u32) -> Result<u64, Error> {
    let mut function = 0u64;
    // SAFETY: the host writes the out-pointer, a live, 8-aligned `u64`.
    check(unsafe { sys::kernel_get(index as i32, guest_ptr(&raw mut function)) })?;
    Ok(function)
}

/// `kernel_get_export`: a kernel made of this module's function exported
/// as `name`; its function handle.
pub fn kernel_get_export(name: &str) -> Result<u64, Error> {
    let mut function = 0u64;
    // SAFETY: the host reads `name` (live for the call) and writes the
    // out-pointer, a live, 8-aligned `u64`.
    check(unsafe {
        sys::kernel_get_export(
            guest_ptr(name.as_ptr()),
            guest_len(name.len()),
            guest_ptr(&raw mut function),
        )
    })?;
    Ok(function)
}

/// `kernel_get_table`: a kernel made of the function in slot `slot` of
/// table 0 (a function pointer's value on wasm32); its function handle.
pub fn kernel_get_table(slot: u32) -> Result<u64, Error> {
    let mut function = 0u64;
    // SAFETY: the host writes the out-pointer, a live, 8-aligned `u64`.
    check(unsafe { sys::kernel_get_table(slot as i32, guest_ptr(&raw mut function)) })?;
    Ok(function)
}

/// `function_release`: releases a function handle.
pub fn function_release(function: u64) -> Result<(), Error> {
    // SAFETY: the import takes a value and touches no guest memory.
    check(unsafe { sys::function_release(function as i64) })
}

/// `function_get`: the kernel `name` of a module; its handle.
pub fn function_get(module: u64, name: &str) -> Result<u64, Error> {
    let mut function = 0u64;
    // SAFETY: the host reads `name` (live for the call) and writes the
    // out-pointer, a live, 8-aligned `u64`.
    check(unsafe {
        sys::function_get(
            module as i64,
            guest_ptr(name.as_ptr()),
            guest_len(name.len()),
            guest_ptr(&raw mut function),
        )
    })?;
    Ok(function)
}

/// `launch`: queues a kernel; the launch handle.
///
/// # Safety
///
/// Every guest-pointer argument (tag 4) names guest memory that the kernel
/// may read and write until the launch is waited for (`wait` or `sync`).
/// The caller must keep that memory alive, and must not read or write the
/// ranges the kernel writes (nor write the ranges it reads), until then.
pub unsafe fn launch(
    function: u64,
    grid: [u32; 3],
    block: [u32; 3],
    shared_mem_bytes: u32,
    args: &[ArgDescriptor],
) -> Result<u64, Error> {
    let mut launch = 0u64;
    // SAFETY: the host reads the descriptors (live, 8-aligned, 24 bytes each)
    // during the call and writes the out-pointer, a live, 8-aligned `u64`;
    // the memory the descriptors name is the caller's to keep (see above).
    check(unsafe {
        sys::launch(
            function as i64,
            grid[0] as i32,
            grid[1] as i32,
            grid[2] as i32,
            block[0] as i32,
            block[1] as i32,
            block[2] as i32,
            shared_mem_bytes as i32,
            guest_ptr(args.as_ptr()),
            guest_len(args.len()),
            guest_ptr(&raw mut launch),
        )
    })?;
    Ok(launch)
}

/// `tensor_op`: queues the built-in tensor kernel that `desc` describes (a
/// 32-byte header and 96-byte operands, `docs/ABI.md`); the launch handle.
///
/// # Safety
///
/// Every guest-memory operand (location 0) names guest memory that the
/// kernel reads (inputs) or writes (the last operand, the output) until the
/// launch is waited for (`wait` or `sync`): each operand's whole extent. The
/// caller must keep that memory alive, must not write an input's extent, and
/// must not touch the output's, until then.
pub unsafe fn tensor_op(desc: &[u8]) -> Result<u64, Error> {
    let mut launch = 0u64;
    // SAFETY: the host reads the descriptor (live for the call) and writes
    // the out-pointer, a live, 8-aligned `u64`; the memory the operands name
    // is the caller's to keep (see above).
    check(unsafe {
        sys::tensor_op(
            guest_ptr(desc.as_ptr()),
            guest_len(desc.len()),
            guest_ptr(&raw mut launch),
        )
    })?;
    Ok(launch)
}

/// `wait`: blocks until the launch has finished; its result.
pub fn wait(launch: u64) -> Result<(), Error> {
    // SAFETY: the call touches no guest memory.
    check(unsafe { sys::wait(launch as i64) })
}

/// `sync`: blocks until every launch has finished; the first failure.
pub fn sync() -> Result<(), Error> {
    // SAFETY: the call touches no guest memory.
    check(unsafe { sys::sync() })
}

/// `prefetch`: migrates guest range `ptr .. ptr + len` to the device
/// (`target` 0) or the host (1).
pub fn prefetch(ptr: u32, len: u32, target: u32) -> Result<(), Error> {
    // SAFETY: migration moves pages, never changes their contents.
    check(unsafe { sys::prefetch(ptr as i32, len as i32, target as i32) })
}

/// `advise`: a hint (`advice` 0..=6) about guest range `ptr .. ptr + len`.
pub fn advise(ptr: u32, len: u32, advice: u32) -> Result<(), Error> {
    // SAFETY: a hint never changes memory contents.
    check(unsafe { sys::advise(ptr as i32, len as i32, advice as i32) })
}

/// `last_error`: the most recent failure's text, truncated to `buf`; the
/// text's full length. Its own failures carry no text (reading it would
/// recurse).
pub fn last_error(buf: &mut [u8]) -> Result<u32, Error> {
    let mut full = 0u32;
    // SAFETY: the host writes at most `buf.len()` bytes into `buf` and a
    // `u32` into `full`; both are live and exclusively ours for the call.
    let code = unsafe {
        sys::last_error(
            guest_ptr(buf.as_mut_ptr()),
            guest_len(buf.len()),
            guest_ptr(&raw mut full),
        )
    };
    if code == 0 {
        Ok(full)
    } else {
        Err(Error {
            errno: Errno::from_code(code).unwrap_or(Errno::EDRIVER),
            message: String::new(),
        })
    }
}
