//! Launch geometry and typed kernel parameters, with the checks that keep a
//! caller's numbers from reaching the driver unvalidated. Tensor maps (TMA
//! descriptors a kernel takes by value) are described in [`tensor_map`].

use core::fmt;

use crate::{device::DeviceInfo, memory::DevicePtr};

pub mod tensor_map;

pub use tensor_map::{
    TENSOR_MAP_ALIGN, TENSOR_MAP_MAX_RANK, TENSOR_MAP_PARAM_BYTES, TensorMapDtype, TensorMapError,
    TensorMapSpec, TensorMapSwizzle,
};

/// The most parameters one launch may pass. CUDA allows 32 KiB of parameters
/// on recent devices; 64 scalars keeps the launch path allocation-free.
pub const MAX_KERNEL_PARAMS: usize = 64;

/// Three dimensions of a grid or a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Dim3 {
    /// Extent along x.
    pub x: u32,
    /// Extent along y.
    pub y: u32,
    /// Extent along z.
    pub z: u32,
}

impl Dim3 {
    /// A one-dimensional extent.
    pub const fn linear(x: u32) -> Self {
        Dim3 { x, y: 1, z: 1 }
    }

    /// The product x*y*z, or `None` if it overflows `u64`.
    pub fn volume(&self) -> Option<u64> {
        u64::from(self.x)
            .checked_mul(u64::from(self.y))?
            .checked_mul(u64::from(self.z))
    }
}

impl From<(u32, u32, u32)> for Dim3 {
    fn from((x, y, z): (u32, u32, u32)) -> Self {
        Dim3 { x, y, z }
    }
}

/// Grid, block and dynamic shared memory of one launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct LaunchConfig {
    /// Blocks in the grid.
    pub grid: Dim3,
    /// Threads in a block.
    pub block: Dim3,
    /// Dynamic shared memory per block, in bytes: up to the device's
    /// opt-in maximum ([`DeviceInfo::max_shared_memory_per_block_optin`]);
    /// the CUDA driver opts the kernel in when it asks for more than it
    /// has been allowed.
    pub shared_mem_bytes: u32,
}

impl LaunchConfig {
    /// Enough blocks of `block` threads to cover `n` elements, one per thread.
    pub fn for_elements(n: u32, block: u32) -> Self {
        let block = block.max(1);
        LaunchConfig {
            grid: Dim3::linear(n.div_ceil(block).max(1)),
            block: Dim3::linear(block),
            shared_mem_bytes: 0,
        }
    }

    /// Checks a whole launch, geometry and parameter count, before any
    /// driver call: what both drivers run first in `GpuDriver::launch`.
    pub fn validate_launch(
        &self,
        device: &DeviceInfo,
        params: &[KernelParam],
    ) -> Result<(), LaunchConfigError> {
        self.validate(device)?;
        if params.len() > MAX_KERNEL_PARAMS {
            return Err(LaunchConfigError::TooManyParams);
        }
        Ok(())
    }

    /// Checks the configuration against a device's limits, so that a bad
    /// (possibly guest-supplied) geometry is refused before any driver call.
    pub fn validate(&self, device: &DeviceInfo) -> Result<(), LaunchConfigError> {
        let dims = [
            (self.grid.x, self.grid.y, self.grid.z),
            (self.block.x, self.block.y, self.block.z),
        ];
        if dims.iter().any(|&(x, y, z)| x == 0 || y == 0 || z == 0) {
            return Err(LaunchConfigError::ZeroDimension);
        }
        let (gx, gy, gz) = device.max_grid_dim;
        if self.grid.x > gx || self.grid.y > gy || self.grid.z > gz {
            return Err(LaunchConfigError::GridTooLarge);
        }
        let (bx, by, bz) = device.max_block_dim;
        if self.block.x > bx || self.block.y > by || self.block.z > bz {
            return Err(LaunchConfigError::BlockTooLarge);
        }
        let threads = self
            .block
            .volume()
            .ok_or(LaunchConfigError::BlockTooLarge)?;
        if threads > u64::from(device.max_threads_per_block) {
            return Err(LaunchConfigError::BlockTooLarge);
        }
        let shared_limit = device
            .max_shared_memory_per_block_optin
            .max(device.max_shared_memory_per_block);
        if self.shared_mem_bytes > shared_limit {
            return Err(LaunchConfigError::SharedMemoryTooLarge);
        }
        Ok(())
    }
}

/// Why a [`LaunchConfig`] was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum LaunchConfigError {
    /// A grid or block extent is zero.
    ZeroDimension,
    /// A grid extent exceeds the device's maximum.
    GridTooLarge,
    /// A block extent, or the threads per block, exceeds the device's maximum.
    BlockTooLarge,
    /// More dynamic shared memory than a block may have, opting in.
    SharedMemoryTooLarge,
    /// More than [`MAX_KERNEL_PARAMS`] parameters.
    TooManyParams,
}

impl fmt::Display for LaunchConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LaunchConfigError::ZeroDimension => "a grid or block dimension is zero",
            LaunchConfigError::GridTooLarge => "grid larger than the device allows",
            LaunchConfigError::BlockTooLarge => "block larger than the device allows",
            LaunchConfigError::SharedMemoryTooLarge => {
                "more dynamic shared memory than a block may have"
            }
            LaunchConfigError::TooManyParams => "more than 64 kernel parameters",
        })
    }
}

/// One kernel parameter, typed, as the kernel's signature declares it.
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum KernelParam {
    /// `.u32` / `.s32` (passed as its bits).
    I32(i32),
    /// `.u64` / `.s64`.
    I64(i64),
    /// `.f32`.
    F32(f32),
    /// `.f64`.
    F64(f64),
    /// A `.u64` address of device-visible memory.
    Ptr(DevicePtr),
    /// A TMA descriptor, `.param .align 64 .b8 name[128]` (CUDA's
    /// `const __grid_constant__ CUtensorMap`): the CUDA driver checks the
    /// description and encodes it at launch; the CPU driver refuses it.
    /// Like a pointer, the memory it covers
    /// ([`TensorMapSpec::extent_bytes`] from its base) is the launch's
    /// contract.
    TensorMap(TensorMapSpec),
}

impl KernelParam {
    /// The parameter's bytes in a little-endian 8-byte slot (narrow values in
    /// the low bytes), which is how both drivers hand scalars and pointers to
    /// a kernel; `None` for a tensor map, which fills 128 bytes.
    pub fn to_slot(self) -> Option<u64> {
        match self {
            KernelParam::I32(v) => Some(u64::from(v as u32)),
            KernelParam::I64(v) => Some(v as u64),
            KernelParam::F32(v) => Some(u64::from(v.to_bits())),
            KernelParam::F64(v) => Some(v.to_bits()),
            KernelParam::Ptr(p) => Some(p.0),
            KernelParam::TensorMap(_) => None,
        }
    }

    /// Bytes the parameter takes in the kernel's parameter space: 4, 8, or
    /// [`TENSOR_MAP_PARAM_BYTES`] for a tensor map.
    pub fn size_bytes(self) -> usize {
        match self {
            KernelParam::I32(_) | KernelParam::F32(_) => 4,
            KernelParam::I64(_) | KernelParam::F64(_) | KernelParam::Ptr(_) => 8,
            KernelParam::TensorMap(_) => TENSOR_MAP_PARAM_BYTES,
        }
    }

    /// Reads an `i32` parameter, or `None` for another type.
    pub fn as_i32(self) -> Option<i32> {
        if let KernelParam::I32(v) = self {
            Some(v)
        } else {
            None
        }
    }

    /// Reads an `i64` parameter, or `None` for another type.
    pub fn as_i64(self) -> Option<i64> {
        if let KernelParam::I64(v) = self {
            Some(v)
        } else {
            None
        }
    }

    /// Reads an `f32` parameter, or `None` for another type.
    pub fn as_f32(self) -> Option<f32> {
        if let KernelParam::F32(v) = self {
            Some(v)
        } else {
            None
        }
    }

    /// Reads an `f64` parameter, or `None` for another type.
    pub fn as_f64(self) -> Option<f64> {
        if let KernelParam::F64(v) = self {
            Some(v)
        } else {
            None
        }
    }

    /// Reads a pointer parameter, or `None` for another type.
    pub fn as_ptr(self) -> Option<DevicePtr> {
        if let KernelParam::Ptr(v) = self {
            Some(v)
        } else {
            None
        }
    }

    /// Reads a tensor-map parameter, or `None` for another type.
    pub fn as_tensor_map(self) -> Option<TensorMapSpec> {
        if let KernelParam::TensorMap(v) = self {
            Some(v)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::String;

    fn h100_like() -> DeviceInfo {
        DeviceInfo {
            ordinal: 0,
            name: String::from("test"),
            compute_capability: Some((9, 0)),
            multiprocessor_count: 132,
            max_threads_per_multiprocessor: 2048,
            clock_rate_khz: 1_980_000,
            total_memory: 80 << 30,
            max_threads_per_block: 1024,
            max_block_dim: (1024, 1024, 64),
            max_grid_dim: (i32::MAX as u32, 65535, 65535),
            max_shared_memory_per_block: 48 * 1024,
            max_shared_memory_per_block_optin: 227 * 1024,
            warp_size: 32,
            concurrent_managed_access: true,
            vmm_supported: true,
            driver_version: Some((13, 0)),
        }
    }

    #[test]
    fn geometry_limits_are_enforced() {
        let d = h100_like();
        let ok = LaunchConfig::for_elements(1 << 24, 256);
        assert_eq!(ok.grid.x, 1 << 16);
        assert_eq!(ok.validate(&d), Ok(()));
        let mut c = ok;
        c.block = Dim3 {
            x: 1024,
            y: 2,
            z: 1,
        };
        assert_eq!(c.validate(&d), Err(LaunchConfigError::BlockTooLarge));
        c.block = Dim3 { x: 1, y: 1, z: 65 };
        assert_eq!(c.validate(&d), Err(LaunchConfigError::BlockTooLarge));
        c = ok;
        c.grid.y = 0;
        assert_eq!(c.validate(&d), Err(LaunchConfigError::ZeroDimension));
        c = ok;
        c.grid.y = 65536;
        assert_eq!(c.validate(&d), Err(LaunchConfigError::GridTooLarge));
        c = ok;
        c.shared_mem_bytes = 227 * 1024 + 1;
        assert_eq!(c.validate(&d), Err(LaunchConfigError::SharedMemoryTooLarge));
        c.block = Dim3 {
            x: u32::MAX,
            y: u32::MAX,
            z: u32::MAX,
        };
        assert!(c.validate(&d).is_err());
    }

    #[test]
    fn shared_memory_up_to_the_opt_in_maximum() {
        let mut d = h100_like();
        let mut c = LaunchConfig::for_elements(1024, 256);
        for bytes in [0, 48 * 1024, 48 * 1024 + 1, 100 * 1024, 227 * 1024] {
            c.shared_mem_bytes = bytes;
            assert_eq!(c.validate(&d), Ok(()), "{bytes} bytes");
        }
        for bytes in [227 * 1024 + 1, u32::MAX] {
            c.shared_mem_bytes = bytes;
            assert_eq!(
                c.validate(&d),
                Err(LaunchConfigError::SharedMemoryTooLarge),
                "{bytes} bytes"
            );
        }
        // No opt-in (the CPU driver): the plain maximum.
        d.max_shared_memory_per_block_optin = d.max_shared_memory_per_block;
        c.shared_mem_bytes = 48 * 1024;
        assert_eq!(c.validate(&d), Ok(()));
        c.shared_mem_bytes = 48 * 1024 + 1;
        assert_eq!(c.validate(&d), Err(LaunchConfigError::SharedMemoryTooLarge));
        // An opt-in below the plain maximum (a driver that reports 0) never
        // lowers the limit.
        d.max_shared_memory_per_block_optin = 0;
        c.shared_mem_bytes = 48 * 1024;
        assert_eq!(c.validate(&d), Ok(()));
    }

    #[test]
    fn slots_keep_bits() {
        assert_eq!(KernelParam::I32(-1).to_slot(), Some(0xffff_ffff));
        assert_eq!(KernelParam::I64(-1).to_slot(), Some(u64::MAX));
        assert_eq!(KernelParam::F32(-0.0).to_slot(), Some(0x8000_0000));
        assert_eq!(KernelParam::F64(1.5).to_slot(), Some(1.5f64.to_bits()));
        assert_eq!(KernelParam::Ptr(DevicePtr(7)).to_slot(), Some(7));
        assert_eq!(KernelParam::F32(2.0).as_f32(), Some(2.0));
        assert_eq!(KernelParam::F32(2.0).as_i32(), None);
    }

    #[test]
    fn a_tensor_map_is_128_bytes_and_no_slot() {
        let spec = TensorMapSpec::new(
            TensorMapDtype::Bf16,
            DevicePtr(0x1000),
            &[64, 64],
            &[128],
            &[64, 64],
            TensorMapSwizzle::B128,
        )
        .expect("valid");
        let p = KernelParam::TensorMap(spec);
        assert_eq!(p.to_slot(), None);
        assert_eq!(p.size_bytes(), 128);
        assert_eq!(p.as_tensor_map(), Some(spec));
        assert_eq!(p.as_ptr(), None);
        assert_eq!(KernelParam::I32(1).size_bytes(), 4);
        assert_eq!(KernelParam::F64(1.0).size_bytes(), 8);
        assert_eq!(KernelParam::Ptr(DevicePtr(8)).size_bytes(), 8);
    }
}
