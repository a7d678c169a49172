//! Kernel launches: the [`Launch`] builder, [`scope`] and the
//! [`PendingLaunch`] it hands out, and [`sync`].
//!
//! A launch may take slices of guest memory ([`Launch::arg_slice`],
//! [`Launch::arg_slice_mut`]): the kernel reads and writes them in place
//! until the launch is waited for. The borrows in `Launch<'a>` say so to the
//! compiler, and every way to finish a launch waits before those borrows
//! end: [`Launch::run`] waits before it returns; [`Launch::submit`] needs a
//! [`Scope`], and [`scope`] waits for every launch submitted in it before it
//! returns, even one whose [`PendingLaunch`] was leaked with
//! `core::mem::forget`. (A `PendingLaunch` that waited in its own `Drop`
//! would not be enough: safe code may forget it, and the borrows would end
//! while the kernel still writes.)
//!
//! So a slice the kernel writes cannot be touched before the launch is done,
//! even when its `PendingLaunch` is forgotten:
//!
//! ```compile_fail,E0499
//! # use tensorwasm_guest::{scope, Error, Function};
//! # fn demo(vadd: Function) -> Result<(), Error> {
//! let mut c = vec![0.0f32; 256];
//! scope(|s| {
//!     let pending = vadd.launch(1, 256).arg_slice_mut(&mut c).submit(s)?;
//!     core::mem::forget(pending);
//!     c[0] = 1.0; // error: `c` is still borrowed by the launch
//!     Ok(())
//! })
//! # }
//! ```
//!
//! and a submitted launch may only borrow what outlives its scope:
//!
//! ```compile_fail,E0597
//! # use tensorwasm_guest::{scope, Error, Function};
//! # fn demo(vadd: Function) -> Result<(), Error> {
//! scope(|s| {
//!     let mut c = vec![0.0f32; 256]; // error: dropped while still borrowed
//!     vadd.launch(1, 256).arg_slice_mut(&mut c).submit(s)?.wait()
//! })
//! # }
//! ```

use alloc::vec::Vec;
use core::cell::RefCell;
use core::marker::PhantomData;
use core::sync::atomic::{AtomicU32, Ordering};

use crate::buffer::Buffer;
use crate::error::Error;
use crate::result;
use crate::scalar::Scalar;
use crate::sys::{self, ArgDescriptor};

/// How many times [`sync`] has been called. `sync` releases every launch
/// handle; a [`PendingLaunch`] submitted before it must not wait on its
/// (released) handle afterwards, so it compares this with its own count.
static SYNC_EPOCH: AtomicU32 = AtomicU32::new(0);

/// Launch geometry: a grid of blocks, or a block of threads, in up to three
/// dimensions. Made from a `u32` (`x`), a pair `(x, y)` or a triple.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Dim3 {
    /// Extent in x.
    pub x: u32,
    /// Extent in y.
    pub y: u32,
    /// Extent in z.
    pub z: u32,
}

impl From<u32> for Dim3 {
    fn from(x: u32) -> Dim3 {
        Dim3 { x, y: 1, z: 1 }
    }
}

impl From<(u32, u32)> for Dim3 {
    fn from((x, y): (u32, u32)) -> Dim3 {
        Dim3 { x, y, z: 1 }
    }
}

impl From<(u32, u32, u32)> for Dim3 {
    fn from((x, y, z): (u32, u32, u32)) -> Dim3 {
        Dim3 { x, y, z }
    }
}

impl From<[u32; 3]> for Dim3 {
    fn from([x, y, z]: [u32; 3]) -> Dim3 {
        Dim3 { x, y, z }
    }
}

/// A kernel launch being described: geometry, shared memory and the
/// arguments in the kernel's parameter order. Made by
/// [`crate::Function::launch`]; nothing reaches the host until
/// [`Launch::run`] or [`Launch::submit`].
///
/// `'a` is how long the guest slices passed as arguments stay borrowed: a
/// slice passed with [`Launch::arg_slice`] cannot be written, and one passed
/// with [`Launch::arg_slice_mut`] cannot be touched at all, until the launch
/// has been waited for.
#[derive(Debug)]
#[must_use = "a launch does nothing until it is run or submitted"]
pub struct Launch<'a> {
    function: u64,
    grid: Dim3,
    block: Dim3,
    shared_mem_bytes: u32,
    args: Vec<ArgDescriptor>,
    borrows: PhantomData<&'a ()>,
}

impl<'a> Launch<'a> {
    pub(crate) fn new(function: u64, grid: Dim3, block: Dim3) -> Launch<'a> {
        Launch {
            function,
            grid,
            block,
            shared_mem_bytes: 0,
            args: Vec::new(),
            borrows: PhantomData,
        }
    }

    /// Dynamic shared memory per block, in bytes (0 unless set).
    pub fn shared_mem(mut self, bytes: u32) -> Self {
        self.shared_mem_bytes = bytes;
        self
    }

    fn arg(mut self, tag: u32, align: u32, a: u64, b: u64) -> Self {
        self.args.push(ArgDescriptor { tag, align, a, b });
        self
    }

    /// A 4-byte integer parameter (`.s32`/`.u32`/`.b32`).
    pub fn arg_i32(self, value: i32) -> Self {
        self.arg_u32(value as u32)
    }

    /// A 4-byte integer parameter, unsigned.
    pub fn arg_u32(self, value: u32) -> Self {
        self.arg(sys::ARG_I32, 0, value.into(), 0)
    }

    /// An 8-byte integer parameter (`.s64`/`.u64`/`.b64`).
    pub fn arg_i64(self, value: i64) -> Self {
        self.arg_u64(value as u64)
    }

    /// An 8-byte integer parameter, unsigned.
    pub fn arg_u64(self, value: u64) -> Self {
        self.arg(sys::ARG_I64, 0, value, 0)
    }

    /// A 4-byte float parameter (`.f32`).
    pub fn arg_f32(self, value: f32) -> Self {
        self.arg(sys::ARG_F32, 0, value.to_bits().into(), 0)
    }

    /// An 8-byte float parameter (`.f64`).
    pub fn arg_f64(self, value: f64) -> Self {
        self.arg(sys::ARG_F64, 0, value.to_bits(), 0)
    }

    /// A pointer parameter naming `data` in guest memory, which the kernel
    /// only reads. The host passes the device address of the slice's first
    /// element and checks the range and its alignment (`align_of::<T>()`).
    /// An empty slice is refused (`EINVAL`); `ENOTADDR` when the guest's
    /// memory is not device-addressable
    /// ([`crate::DeviceInfo::memory_device_addressable`]).
    pub fn arg_slice<T: Scalar>(self, data: &'a [T]) -> Self {
        let addr = data.as_ptr().expose_provenance();
        self.arg(
            sys::ARG_GUEST_PTR,
            align_of::<T>() as u32,
            addr as u64,
            size_of_val(data) as u64,
        )
    }

    /// A pointer parameter naming `data` in guest memory, which the kernel
    /// may write. As [`Launch::arg_slice`]; `data` stays exclusively borrowed
    /// until the launch has been waited for.
    pub fn arg_slice_mut<T: Scalar>(self, data: &'a mut [T]) -> Self {
        let addr = data.as_mut_ptr().expose_provenance();
        self.arg(
            sys::ARG_GUEST_PTR,
            align_of::<T>() as u32,
            addr as u64,
            size_of_val(data) as u64,
        )
    }

    /// A pointer parameter naming byte `offset` of a device buffer
    /// (`EFAULT` unless it is below the buffer's size). The buffer is not
    /// borrowed for the launch: dropping it frees the handle, and the host
    /// keeps the memory alive until the launches using it finish.
    pub fn arg_buffer(self, buffer: &Buffer, offset: u64) -> Self {
        self.arg(sys::ARG_BUFFER_PTR, 0, buffer.handle(), offset)
    }

    /// The argument descriptors so far, in order.
    #[cfg(test)]
    pub(crate) fn args(&self) -> &[ArgDescriptor] {
        &self.args
    }

    /// Queues the launch; its handle.
    ///
    /// # Safety
    ///
    /// The launch must be waited for (`wait` on the handle, or `sync`)
    /// before `'a` ends.
    unsafe fn queue(&self) -> Result<u64, Error> {
        let Dim3 {
            x: gx,
            y: gy,
            z: gz,
        } = self.grid;
        let Dim3 {
            x: bx,
            y: by,
            z: bz,
        } = self.block;
        // SAFETY: the guest slices among the arguments are borrowed for `'a`
        // (shared for `arg_slice`, exclusive for `arg_slice_mut`), and the
        // caller waits for the launch before `'a` ends.
        unsafe {
            result::launch(
                self.function,
                [gx, gy, gz],
                [bx, by, bz],
                self.shared_mem_bytes,
                &self.args,
            )
        }
    }

    /// Launches and waits: `Ok` once the kernel has finished, `ELAUNCH` if
    /// it (or earlier work of the guest: failures are sticky) failed. The
    /// simple way when nothing else can overlap the kernel.
    pub fn run(self) -> Result<(), Error> {
        // SAFETY: waited for below, while `self` (and so `'a`) is alive.
        let handle = unsafe { self.queue()? };
        result::wait(handle)
    }

    /// Queues the launch and returns at once. The guest may do other work
    /// and then [`PendingLaunch::wait`]; the borrowed slices stay borrowed
    /// until `scope` ends, which waits for every launch submitted in it.
    pub fn submit<'scope, 'env>(
        self,
        scope: &'scope Scope<'scope, 'env>,
    ) -> Result<PendingLaunch<'scope>, Error>
    where
        'a: 'scope,
    {
        // SAFETY: the borrows outlive `'scope`, and `scope()` waits for every
        // launch listed in `scope.pending` before `'scope` ends; the handle
        // is listed before anything can fail.
        let handle = unsafe { self.queue()? };
        Ok(scope.adopt(handle))
    }
}

/// Where launches may be submitted: made by [`scope`], which waits for all
/// of them before it returns. The two lifetimes are those of
/// `std::thread::Scope`: `'scope` the scope itself, `'env` what it may
/// borrow from.
#[derive(Debug)]
pub struct Scope<'scope, 'env: 'scope> {
    /// Launches submitted and not yet waited for, with the [`SYNC_EPOCH`]
    /// they were submitted in.
    pending: RefCell<Vec<(u64, u32)>>,
    scope: PhantomData<&'scope mut &'scope ()>,
    env: PhantomData<&'env mut &'env ()>,
}

impl<'scope> Scope<'scope, '_> {
    /// Lists a queued launch, so that [`scope`] waits for it before it
    /// returns, and hands out its [`PendingLaunch`]. Every submit path
    /// (kernels, built-in tensor ops) ends here right after queueing, before
    /// anything can fail.
    pub(crate) fn adopt(&'scope self, handle: u64) -> PendingLaunch<'scope> {
        let epoch = SYNC_EPOCH.load(Ordering::Relaxed);
        self.pending.borrow_mut().push((handle, epoch));
        PendingLaunch {
            handle: Some(handle),
            epoch,
            pending: &self.pending,
        }
    }

    /// Waits for every listed launch; the first failure.
    fn wait_all(&self) -> Result<(), Error> {
        let pending = core::mem::take(&mut *self.pending.borrow_mut());
        let mut first = Ok(());
        for (handle, epoch) in pending {
            let waited = wait_unless_synced(handle, epoch);
            if first.is_ok() {
                first = waited;
            }
        }
        first
    }
}

/// Waits for every launch of `scope` even when `f` unwinds (a guest built
/// with `panic = "unwind"`), so no borrow ends while a kernel runs.
struct WaitOnExit<'s, 'scope, 'env>(&'s Scope<'scope, 'env>);

impl Drop for WaitOnExit<'_, '_, '_> {
    fn drop(&mut self) {
        let _ = self.0.wait_all();
    }
}

/// Runs `f` with a [`Scope`] in which launches may be
/// [submitted](Launch::submit) and overlap other work, then waits for every
/// launch submitted in it that was not waited for yet.
///
/// Returns `f`'s error if it failed, else the first failure among those
/// late waits, else `f`'s value. Slices a submitted launch borrows must be
/// declared outside the call, and stay borrowed until it returns:
///
/// ```no_run
/// # use tensorwasm_guest::{scope, Function, Error};
/// # fn demo(vadd: Function, a: &[f32], b: &[f32]) -> Result<Vec<f32>, Error> {
/// let mut c = vec![0.0f32; a.len()];
/// let n = a.len() as u32;
/// scope(|s| {
///     let pending = vadd
///         .launch(n.div_ceil(256), 256)
///         .arg_slice(a)
///         .arg_slice(b)
///         .arg_slice_mut(&mut c)
///         .arg_u32(n)
///         .submit(s)?;
///     // ... other work while the kernel runs ...
///     pending.wait()
/// })?;
/// Ok(c) // `c` is ours again
/// # }
/// ```
pub fn scope<'env, T>(
    f: impl for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> Result<T, Error>,
) -> Result<T, Error> {
    let scope = Scope {
        pending: RefCell::new(Vec::new()),
        scope: PhantomData,
        env: PhantomData,
    };
    let on_exit = WaitOnExit(&scope);
    let value = f(&scope);
    let waited = scope.wait_all();
    drop(on_exit);
    let value = value?;
    waited.map(|()| value)
}

/// A submitted launch. [`PendingLaunch::wait`] blocks until the kernel has
/// finished and says whether it failed; dropping it waits too but drops the
/// result; the enclosing [`scope`] waits for it if neither happens.
#[derive(Debug)]
#[must_use = "wait for the launch to learn whether the kernel failed"]
pub struct PendingLaunch<'scope> {
    /// `None` once waited for.
    handle: Option<u64>,
    epoch: u32,
    pending: &'scope RefCell<Vec<(u64, u32)>>,
}

impl PendingLaunch<'_> {
    /// Blocks until the kernel has finished. `ELAUNCH` when it failed, or
    /// when any kernel of the guest has failed by then (failures are sticky,
    /// so a launch queued before a failing one may report it too). After
    /// a [`sync`] this returns `Ok` at once: `sync` waited for the launch and
    /// reported its failure, if any.
    pub fn wait(mut self) -> Result<(), Error> {
        self.finish()
    }

    /// The launch's handle, for the raw layers; `wait` releases it.
    pub fn handle(&self) -> Option<u64> {
        self.handle
    }

    fn finish(&mut self) -> Result<(), Error> {
        let Some(handle) = self.handle.take() else {
            return Ok(());
        };
        self.pending.borrow_mut().retain(|&(h, _)| h != handle);
        wait_unless_synced(handle, self.epoch)
    }
}

impl Drop for PendingLaunch<'_> {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

/// `wait` on a launch submitted in sync epoch `epoch`, or `Ok` when a
/// [`sync`] since then has already waited for it and released the handle.
fn wait_unless_synced(handle: u64, epoch: u32) -> Result<(), Error> {
    if SYNC_EPOCH.load(Ordering::Relaxed) != epoch {
        return Ok(());
    }
    result::wait(handle)
}

/// Blocks until every launch of the guest has finished; the first failure
/// (`ELAUNCH`). Releases every launch handle: a [`PendingLaunch`] from
/// before returns `Ok` from `wait` afterwards, its result reported here.
pub fn sync() -> Result<(), Error> {
    let synced = result::sync();
    SYNC_EPOCH.fetch_add(1, Ordering::Relaxed);
    synced
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalar_arguments_encode_as_the_abi_table_says() {
        let launch = Launch::new(7, 1.into(), 1.into())
            .arg_i32(-2)
            .arg_u32(0xdead_beef)
            .arg_i64(-3)
            .arg_f32(1.5)
            .arg_f64(-0.25);
        let d = |tag, a| ArgDescriptor {
            tag,
            align: 0,
            a,
            b: 0,
        };
        assert_eq!(
            launch.args,
            [
                d(sys::ARG_I32, 0xffff_fffe),
                d(sys::ARG_I32, 0xdead_beef),
                d(sys::ARG_I64, (-3i64) as u64),
                d(sys::ARG_F32, 0x3fc0_0000),
                d(sys::ARG_F64, 0xbfd0_0000_0000_0000),
            ]
        );
    }

    #[test]
    fn slices_carry_address_length_and_alignment() {
        let a = [1.0f32, 2.0, 3.0];
        let mut c = [0u64; 5];
        let c_addr = c.as_ptr().addr() as u64;
        let launch = Launch::new(7, 1.into(), 1.into())
            .arg_slice(&a)
            .arg_slice_mut(&mut c);
        assert_eq!(
            launch.args,
            [
                ArgDescriptor {
                    tag: sys::ARG_GUEST_PTR,
                    align: 4,
                    a: a.as_ptr().addr() as u64,
                    b: 12,
                },
                ArgDescriptor {
                    tag: sys::ARG_GUEST_PTR,
                    align: 8,
                    a: c_addr,
                    b: 40,
                },
            ]
        );
    }

    #[test]
    fn geometry_from_scalars_pairs_and_triples() {
        assert_eq!(Dim3::from(5), Dim3 { x: 5, y: 1, z: 1 });
        assert_eq!(Dim3::from((5, 6)), Dim3 { x: 5, y: 6, z: 1 });
        assert_eq!(Dim3::from((5, 6, 7)), Dim3 { x: 5, y: 6, z: 7 });
        assert_eq!(Dim3::from([5, 6, 7]), Dim3 { x: 5, y: 6, z: 7 });
        let launch = Launch::new(7, (2, 3).into(), 128.into()).shared_mem(4096);
        assert_eq!(
            (launch.grid.y, launch.block.x, launch.shared_mem_bytes),
            (3, 128, 4096)
        );
    }
}
