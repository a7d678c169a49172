//! The device as a guest sees it (`device_count`, `device_info`) and the
//! managed-memory hints on the guest's own memory (`prefetch`, `advise`).

use tensorwasm_core::{
    Advice, GpuDriver, PrefetchTarget,
    abi::{self, AbiError, Errno},
};

use super::{
    ctx::{GuestMem, WasiCudaCtx},
    errors::driver_error,
};

impl<D: GpuDriver> WasiCudaCtx<D> {
    pub(crate) fn device_count(&mut self, mem: GuestMem<'_>, out: u32) -> Result<(), AbiError> {
        abi::write_u32(mem.bytes, out, 1)
    }

    pub(crate) fn device_info(
        &mut self,
        mem: GuestMem<'_>,
        device: u32,
        out: u32,
        out_len: i32,
    ) -> Result<(), AbiError> {
        if device != 0 {
            return Err(AbiError::new(
                Errno::ENODEV,
                format!("device {device} does not exist (this guest has 1 device)"),
            ));
        }
        let out_len = usize::try_from(out_len)
            .map_err(|_| AbiError::new(Errno::EINVAL, format!("out_len {out_len} is negative")))?;
        let addressable = self
            .region(mem.host_base())
            .is_some_and(|r| r.device_addressable);
        let record = abi::encode_device_info(self.driver.device(), self.driver.kind(), addressable);
        let n = out_len.min(record.len());
        abi::write_bytes(mem.bytes, out, &record[..n])
    }

    pub(crate) fn prefetch(
        &mut self,
        mem: GuestMem<'_>,
        ptr: u32,
        len: u32,
        target: u32,
    ) -> Result<(), AbiError> {
        let target = match target {
            0 => PrefetchTarget::Device,
            1 => PrefetchTarget::Host,
            t => {
                return Err(AbiError::new(
                    Errno::EINVAL,
                    format!("target {t} is neither 0 (device) nor 1 (host)"),
                ));
            }
        };
        let (guest, _) = self.guest_ref(&mem);
        self.prefetch_in(guest, ptr, len, target)
    }

    /// `prefetch` of `ptr .. ptr + len` of the memory `guest`, queued on
    /// the guest's stream (core modules' `prefetch`, components'
    /// `kernels.prefetch`).
    pub(crate) fn prefetch_in(
        &mut self,
        guest: abi::GuestMemoryRef,
        ptr: u32,
        len: u32,
        target: PrefetchTarget,
    ) -> Result<(), AbiError> {
        let range = managed_range(guest, ptr, len)?;
        self.driver
            .prefetch(range, target, &self.stream)
            .map_err(|e| driver_error("prefetch", e))?;
        Ok(())
    }

    pub(crate) fn advise(
        &mut self,
        mem: GuestMem<'_>,
        ptr: u32,
        len: u32,
        advice: u32,
    ) -> Result<(), AbiError> {
        let advice = match advice {
            0 => Advice::SetReadMostly,
            1 => Advice::UnsetReadMostly,
            2 => Advice::PreferDevice,
            3 => Advice::PreferHost,
            4 => Advice::UnsetPreferredLocation,
            5 => Advice::AccessedByDevice,
            6 => Advice::UnsetAccessedByDevice,
            a => {
                return Err(AbiError::new(
                    Errno::EINVAL,
                    format!("advice {a} is not one of 0..=6"),
                ));
            }
        };
        let (guest, _) = self.guest_ref(&mem);
        self.advise_in(guest, ptr, len, advice)
    }

    /// `advise` of `ptr .. ptr + len` of the memory `guest` (core modules'
    /// `advise`, components' `kernels.advise`).
    pub(crate) fn advise_in(
        &mut self,
        guest: abi::GuestMemoryRef,
        ptr: u32,
        len: u32,
        advice: Advice,
    ) -> Result<(), AbiError> {
        let range = managed_range(guest, ptr, len)?;
        self.driver
            .advise(range, advice)
            .map_err(|e| driver_error("advise", e))
    }
}

/// `ptr .. ptr + len` of the memory `guest` as a driver range, if the
/// memory is managed memory.
fn managed_range(
    guest: abi::GuestMemoryRef,
    ptr: u32,
    len: u32,
) -> Result<tensorwasm_core::DeviceRange<'static>, AbiError> {
    if len == 0 {
        return Err(AbiError::new(Errno::EINVAL, "len is 0"));
    }
    let range = abi::guest_range(guest.len, ptr, u64::from(len))?;
    if !guest.device_addressable {
        return Err(AbiError::new(
            Errno::ENOTADDR,
            "the guest's memory is not managed memory",
        ));
    }
    let start = guest
        .base
        .checked_add(range.start)
        .ok_or_else(|| AbiError::new(Errno::EOVERFLOW, "the range's device address overflows"))?;
    // SAFETY: the range lies inside the guest's exposed memory (checked
    // above), which is a live managed region for this call; the driver
    // only reads its address for advice or a stream-ordered migration,
    // and migration leaves the contents in place.
    Ok(unsafe { tensorwasm_core::DeviceRange::from_raw(start, range.len()) })
}
