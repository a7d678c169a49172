//! The raw `wasi_cuda` imports, one declaration per function of
//! `docs/ABI.md`, with the ABI's names and Wasm signatures, and the records
//! they read and write in guest memory. Nothing here checks anything: the
//! thin layer ([`crate::result`]) turns each call into a `Result`.
//!
//! Written by hand from `docs/ABI.md` (there is no generator for a page);
//! a change to that page is a change to this file, row by row.

/// `device_info` writes at most this many bytes: the whole record.
pub const DEVICE_INFO_LEN: usize = 128;

/// The most argument descriptors one `launch` takes.
pub const MAX_LAUNCH_ARGS: usize = 64;

/// Argument descriptor tag: `i32` (value in the low 32 bits of `a`).
pub const ARG_I32: u32 = 0;
/// Argument descriptor tag: `i64` (value in `a`).
pub const ARG_I64: u32 = 1;
/// Argument descriptor tag: `f32` (IEEE bits in the low 32 bits of `a`).
pub const ARG_F32: u32 = 2;
/// Argument descriptor tag: `f64` (IEEE bits in `a`).
pub const ARG_F64: u32 = 3;
/// Argument descriptor tag: guest pointer (`a` offset, `b` length in bytes).
pub const ARG_GUEST_PTR: u32 = 4;
/// Argument descriptor tag: buffer pointer (`a` handle, `b` byte offset).
pub const ARG_BUFFER_PTR: u32 = 5;

/// One launch argument as `launch` reads it: 24 bytes, 8-aligned, little-endian
/// (Wasm is little-endian, so the `repr(C)` layout is the ABI's).
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArgDescriptor {
    /// One of the `ARG_*` tags.
    pub tag: u32,
    /// For [`ARG_GUEST_PTR`] the required alignment of `a` (0 or a power of
    /// two up to 4096); 0 for every other tag.
    pub align: u32,
    /// First operand: value, bits, guest offset or buffer handle, by tag.
    pub a: u64,
    /// Second operand: length of a guest pointer, offset into a buffer, else 0.
    pub b: u64,
}

const _: () = assert!(core::mem::size_of::<ArgDescriptor>() == 24);
const _: () = assert!(core::mem::align_of::<ArgDescriptor>() == 8);

/// `tensor_op` descriptor: the header's length in bytes.
pub const TENSOR_HEADER_LEN: usize = 32;
/// `tensor_op` descriptor: one operand's length in bytes.
pub const TENSOR_OPERAND_LEN: usize = 96;
/// `tensor_op` descriptor: the most operands an op takes (layernorm).
pub const TENSOR_MAX_OPERANDS: usize = 4;
/// `tensor_op` descriptor: the highest operand rank.
pub const TENSOR_MAX_RANK: usize = 4;

/// `tensor_op` header `op`: `C = alpha * A @ B + beta * C`.
pub const TENSOR_OP_GEMM: u32 = 1;
/// `tensor_op` header `op`: sum over `axis`.
pub const TENSOR_OP_REDUCE_SUM: u32 = 2;
/// `tensor_op` header `op`: maximum over `axis`.
pub const TENSOR_OP_REDUCE_MAX: u32 = 3;
/// `tensor_op` header `op`: mean over `axis`.
pub const TENSOR_OP_REDUCE_MEAN: u32 = 4;
/// `tensor_op` header `op`: softmax over the last axis.
pub const TENSOR_OP_SOFTMAX: u32 = 5;
/// `tensor_op` header `op`: layer norm over the last axis.
pub const TENSOR_OP_LAYERNORM: u32 = 6;
/// `tensor_op` header `op`: elementwise `A + B`.
pub const TENSOR_OP_ADD: u32 = 7;
/// `tensor_op` header `op`: elementwise `A * B`.
pub const TENSOR_OP_MUL: u32 = 8;
/// `tensor_op` header `op`: `max(x, 0)`.
pub const TENSOR_OP_RELU: u32 = 9;
/// `tensor_op` header `op`: GELU, the exact erf form.
pub const TENSOR_OP_GELU: u32 = 10;
/// `tensor_op` header `op`: swap the last two axes.
pub const TENSOR_OP_TRANSPOSE: u32 = 11;

/// `tensor_op` header `precision`: the inputs' own arithmetic.
pub const TENSOR_PRECISION_DEFAULT: u32 = 0;
/// `tensor_op` header `precision`: f32 GEMM inputs may be rounded to TF32.
pub const TENSOR_PRECISION_TF32: u32 = 1;

/// `tensor_op` operand `location`: guest memory (`address` is an offset).
pub const TENSOR_LOCATION_GUEST: u32 = 0;
/// `tensor_op` operand `location`: a device buffer (`address` is its
/// handle, `offset` a byte offset into it).
pub const TENSOR_LOCATION_BUFFER: u32 = 1;

/// `tensor_op` operand `dtype`: IEEE binary32.
pub const TENSOR_DTYPE_F32: u32 = 1;
/// `tensor_op` operand `dtype`: bfloat16.
pub const TENSOR_DTYPE_BF16: u32 = 2;
/// `tensor_op` operand `dtype`: IEEE binary16.
pub const TENSOR_DTYPE_F16: u32 = 3;

#[link(wasm_import_module = "wasi_cuda")]
unsafe extern "C" {
    /// Writes the number of devices this guest may use (`u32`).
    pub fn device_count(out_count_ptr: i32) -> i32;
    /// Writes the first `min(out_len, 128)` bytes of device `device`'s record.
    pub fn device_info(device: i32, out_ptr: i32, out_len: i32) -> i32;

    /// Allocates `size` bytes of device memory and writes its handle (`u64`).
    pub fn buffer_alloc(size: i64, out_handle_ptr: i32) -> i32;
    /// Releases a buffer; launches in flight keep it alive.
    pub fn buffer_free(buffer: i64) -> i32;
    /// Writes a buffer's size in bytes (`u64`).
    pub fn buffer_size(buffer: i64, out_size_ptr: i32) -> i32;
    /// Copies `len` bytes of guest memory into a buffer.
    pub fn copy_to_buffer(dst: i64, dst_offset: i64, src_ptr: i32, len: i32) -> i32;
    /// Copies `len` bytes of a buffer into guest memory.
    pub fn copy_from_buffer(dst_ptr: i32, src: i64, src_offset: i64, len: i32) -> i32;
    /// Copies `len` bytes between two buffers (ranges must not overlap).
    pub fn copy_buffer(dst: i64, dst_offset: i64, src: i64, src_offset: i64, len: i64) -> i32;
    /// Sets `len` bytes of a buffer to the byte `value` (0..=255).
    pub fn memset_buffer(dst: i64, dst_offset: i64, value: i32, len: i64) -> i32;

    /// JIT-compiles PTX text and writes the module handle.
    pub fn module_load_ptx(ptx_ptr: i32, ptx_len: i32, out_module_ptr: i32) -> i32;
    /// Loads a cubin or fatbin image and writes the module handle.
    pub fn module_load_cubin(image_ptr: i32, image_len: i32, out_module_ptr: i32) -> i32;
    /// Releases a module; its functions keep it loaded.
    pub fn module_unload(module: i64) -> i32;
    /// Looks up a kernel by name and writes the function handle.
    pub fn function_get(module: i64, name_ptr: i32, name_len: i32, out_function_ptr: i32) -> i32;
    /// Makes a kernel of the guest's own function `function_index` and
    /// writes its function handle.
    pub fn kernel_get(function_index: i32, out_function_ptr: i32) -> i32;
    /// Makes a kernel of the guest's function exported as the UTF-8 name at
    /// `name_ptr .. name_ptr + name_len` and writes its function handle.
    pub fn kernel_get_export(name_ptr: i32, name_len: i32, out_function_ptr: i32) -> i32;
    /// Makes a kernel of the guest's function in slot `slot` of table 0 (a
    /// function pointer's value) and writes its function handle.
    pub fn kernel_get_table(slot: i32, out_function_ptr: i32) -> i32;
    /// Releases a function handle.
    pub fn function_release(function: i64) -> i32;

    /// Queues a kernel on the guest's stream and writes a launch handle.
    pub fn launch(
        function: i64,
        grid_x: i32,
        grid_y: i32,
        grid_z: i32,
        block_x: i32,
        block_y: i32,
        block_z: i32,
        shared_mem_bytes: i32,
        args_ptr: i32,
        args_count: i32,
        out_launch_ptr: i32,
    ) -> i32;
    /// Queues the built-in tensor kernel that the descriptor at
    /// `desc_ptr .. desc_ptr + desc_len` (a 32-byte header, then 96-byte
    /// operands) describes, and writes a launch handle.
    pub fn tensor_op(desc_ptr: i32, desc_len: i32, out_launch_ptr: i32) -> i32;
    /// Blocks until a launch has finished, releases its handle, returns its result.
    pub fn wait(launch: i64) -> i32;
    /// Blocks until every launch has finished and releases every launch handle.
    pub fn sync() -> i32;

    /// Migrates guest memory to the device (`target` 0) or the host (1); advisory.
    pub fn prefetch(ptr: i32, len: i32, target: i32) -> i32;
    /// Gives the driver a hint (`advice` 0..=6) about a range of guest memory.
    pub fn advise(ptr: i32, len: i32, advice: i32) -> i32;

    /// Copies the text of the most recent failed call and writes its full length.
    pub fn last_error(buf_ptr: i32, buf_len: i32, out_len_ptr: i32) -> i32;
}

/// The import module of a kernel's intrinsics (`docs/kernels.md`): position,
/// atomics, shared memory, the barrier and warp operations.
pub const KERNEL_INTRINSICS_MODULE: &str = "tensorwasm_kernel";

// A kernel's position: CUDA's `threadIdx`, `blockIdx`, `blockDim`,
// `gridDim`. The translator replaces each call with the thread's value;
// called outside a launched kernel, the host traps.
#[link(wasm_import_module = "tensorwasm_kernel")]
unsafe extern "C" {
    /// `threadIdx.x`.
    pub fn thread_idx_x() -> i32;
    /// `threadIdx.y`.
    pub fn thread_idx_y() -> i32;
    /// `threadIdx.z`.
    pub fn thread_idx_z() -> i32;
    /// `blockIdx.x`.
    pub fn block_idx_x() -> i32;
    /// `blockIdx.y`.
    pub fn block_idx_y() -> i32;
    /// `blockIdx.z`.
    pub fn block_idx_z() -> i32;
    /// `blockDim.x`.
    pub fn block_dim_x() -> i32;
    /// `blockDim.y`.
    pub fn block_dim_y() -> i32;
    /// `blockDim.z`.
    pub fn block_dim_z() -> i32;
    /// `gridDim.x`.
    pub fn grid_dim_x() -> i32;
    /// `gridDim.y`.
    pub fn grid_dim_y() -> i32;
    /// `gridDim.z`.
    pub fn grid_dim_z() -> i32;
}

// Atomic read-modify-writes on the guest's memory (`docs/kernels.md`,
// "Atomics"): each returns the old value; an address out of bounds or not
// a multiple of the value's size traps. Atomic inside a kernel; plain (the
// guest is one thread) in the guest's own code.
#[link(wasm_import_module = "tensorwasm_kernel")]
unsafe extern "C" {
    /// `*addr += v`.
    pub fn atomic_add_i32(addr: *mut i32, v: i32) -> i32;
    /// `*addr -= v`.
    pub fn atomic_sub_i32(addr: *mut i32, v: i32) -> i32;
    /// `*addr &= v`.
    pub fn atomic_and_i32(addr: *mut i32, v: i32) -> i32;
    /// `*addr |= v`.
    pub fn atomic_or_i32(addr: *mut i32, v: i32) -> i32;
    /// `*addr ^= v`.
    pub fn atomic_xor_i32(addr: *mut i32, v: i32) -> i32;
    /// `*addr = v`.
    pub fn atomic_xchg_i32(addr: *mut i32, v: i32) -> i32;
    /// `*addr = min(*addr, v)`, signed.
    pub fn atomic_min_i32(addr: *mut i32, v: i32) -> i32;
    /// `*addr = max(*addr, v)`, signed.
    pub fn atomic_max_i32(addr: *mut i32, v: i32) -> i32;
    /// `*addr = min(*addr, v)`, unsigned.
    pub fn atomic_min_u32(addr: *mut i32, v: i32) -> i32;
    /// `*addr = max(*addr, v)`, unsigned.
    pub fn atomic_max_u32(addr: *mut i32, v: i32) -> i32;
    /// `*addr = new` if `*addr == expected`.
    pub fn atomic_cas_i32(addr: *mut i32, expected: i32, new: i32) -> i32;
    /// `*addr += v`.
    pub fn atomic_add_i64(addr: *mut i64, v: i64) -> i64;
    /// `*addr = new` if `*addr == expected`.
    pub fn atomic_cas_i64(addr: *mut i64, expected: i64, new: i64) -> i64;
    /// `*addr += v` in `f32` (round to nearest even).
    pub fn atomic_add_f32(addr: *mut f32, v: f32) -> f32;
}

// A block's shared memory (`docs/kernels.md`, "Shared memory"): a byte
// array of the launch's `shared_mem_bytes` (rounded up to a multiple of
// 16), zeroed at the start of each block, reached only through these
// imports at byte offsets. An access with `offset + size > shared_size`
// traps (out of bounds), one at an offset that is not a multiple of its
// size traps (misaligned). Called outside a launched kernel, the host traps.
#[link(wasm_import_module = "tensorwasm_kernel")]
unsafe extern "C" {
    /// The block's shared memory, in bytes.
    pub fn shared_size() -> i32;
    /// Reads the `i32` at byte `offset`.
    pub fn shared_load_i32(offset: i32) -> i32;
    /// Reads the `i64` at byte `offset`.
    pub fn shared_load_i64(offset: i32) -> i64;
    /// Reads the `f32` at byte `offset`.
    pub fn shared_load_f32(offset: i32) -> f32;
    /// Reads the `f64` at byte `offset`.
    pub fn shared_load_f64(offset: i32) -> f64;
    /// Writes the `i32` at byte `offset`.
    pub fn shared_store_i32(offset: i32, v: i32);
    /// Writes the `i64` at byte `offset`.
    pub fn shared_store_i64(offset: i32, v: i64);
    /// Writes the `f32` at byte `offset`.
    pub fn shared_store_f32(offset: i32, v: f32);
    /// Writes the `f64` at byte `offset`.
    pub fn shared_store_f64(offset: i32, v: f64);
}

// Atomic read-modify-writes on the block's shared memory: those of the
// guest's memory above, at a byte offset of shared memory instead of an
// address, checked like shared loads and stores; each returns the old
// value and is relaxed.
#[link(wasm_import_module = "tensorwasm_kernel")]
unsafe extern "C" {
    /// `shared[offset] += v`.
    pub fn shared_atomic_add_i32(offset: i32, v: i32) -> i32;
    /// `shared[offset] -= v`.
    pub fn shared_atomic_sub_i32(offset: i32, v: i32) -> i32;
    /// `shared[offset] &= v`.
    pub fn shared_atomic_and_i32(offset: i32, v: i32) -> i32;
    /// `shared[offset] |= v`.
    pub fn shared_atomic_or_i32(offset: i32, v: i32) -> i32;
    /// `shared[offset] ^= v`.
    pub fn shared_atomic_xor_i32(offset: i32, v: i32) -> i32;
    /// `shared[offset] = v`.
    pub fn shared_atomic_xchg_i32(offset: i32, v: i32) -> i32;
    /// `shared[offset] = min(shared[offset], v)`, signed.
    pub fn shared_atomic_min_i32(offset: i32, v: i32) -> i32;
    /// `shared[offset] = max(shared[offset], v)`, signed.
    pub fn shared_atomic_max_i32(offset: i32, v: i32) -> i32;
    /// `shared[offset] = min(shared[offset], v)`, unsigned.
    pub fn shared_atomic_min_u32(offset: i32, v: i32) -> i32;
    /// `shared[offset] = max(shared[offset], v)`, unsigned.
    pub fn shared_atomic_max_u32(offset: i32, v: i32) -> i32;
    /// `shared[offset] = new` if `shared[offset] == expected`.
    pub fn shared_atomic_cas_i32(offset: i32, expected: i32, new: i32) -> i32;
    /// `shared[offset] += v`.
    pub fn shared_atomic_add_i64(offset: i32, v: i64) -> i64;
    /// `shared[offset] = new` if `shared[offset] == expected`.
    pub fn shared_atomic_cas_i64(offset: i32, expected: i64, new: i64) -> i64;
    /// `shared[offset] += v` in `f32` (round to nearest even).
    pub fn shared_atomic_add_f32(offset: i32, v: f32) -> f32;
}

// The block's barrier and the warp's collective operations (`docs/kernels.md`,
// "Barriers", "Warp operations"). Called outside a launched kernel, the
// host traps.
#[link(wasm_import_module = "tensorwasm_kernel")]
unsafe extern "C" {
    /// `__syncthreads()`: waits until every thread of the block that has not
    /// ended arrives at a barrier; orders shared and global memory within
    /// the block.
    pub fn barrier();
    /// This thread's lane in its warp, `0 .. 32`.
    pub fn lane_id() -> i32;
    /// Lanes per warp: 32 on every target.
    pub fn warp_size() -> i32;
    /// `v` of lane `lane & 31`.
    pub fn shfl_idx_i32(v: i32, lane: i32) -> i32;
    /// `v` of lane `lane_id - delta`.
    pub fn shfl_up_i32(v: i32, delta: i32) -> i32;
    /// `v` of lane `lane_id + delta`.
    pub fn shfl_down_i32(v: i32, delta: i32) -> i32;
    /// `v` of lane `lane_id ^ mask`.
    pub fn shfl_xor_i32(v: i32, mask: i32) -> i32;
    /// `v` of lane `lane & 31`.
    pub fn shfl_idx_f32(v: f32, lane: i32) -> f32;
    /// `v` of lane `lane_id - delta`.
    pub fn shfl_up_f32(v: f32, delta: i32) -> f32;
    /// `v` of lane `lane_id + delta`.
    pub fn shfl_down_f32(v: f32, delta: i32) -> f32;
    /// `v` of lane `lane_id ^ mask`.
    pub fn shfl_xor_f32(v: f32, mask: i32) -> f32;
    /// Bit `i` set when lane `i` takes part and its `pred` is not 0.
    pub fn ballot(pred: i32) -> i32;
    /// 1 when `pred` is not 0 on some lane taking part, else 0.
    pub fn any(pred: i32) -> i32;
    /// 1 when `pred` is not 0 on every lane taking part, else 0.
    pub fn all(pred: i32) -> i32;
}

// Arithmetic Wasm's scalar instructions lack (`docs/kernels.md`, "Fused
// multiply-add"): one instruction on a GPU; in the guest's own code the
// host computes the same value.
#[link(wasm_import_module = "tensorwasm_kernel")]
unsafe extern "C" {
    /// `a * b + c`, rounded once (IEEE 754 fusedMultiplyAdd).
    pub fn fma_f32(a: f32, b: f32, c: f32) -> f32;
    /// `a * b + c` in `f64`, rounded once.
    pub fn fma_f64(a: f64, b: f64, c: f64) -> f64;
}
