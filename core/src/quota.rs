//! Per-tenant quota accounting: what a tenant may hold ([`TenantQuota`]),
//! what it holds now ([`QuotaLedger`], one atomic counter per [`Resource`]),
//! and the RAII guards that hold a share of it ([`Reservation`], [`Charge`]
//! and their owned twins). It only counts: it allocates nothing, calls no
//! driver, and takes its atomics from [`crate::sync`].
//!
//! # Reserve, commit, drop
//!
//! A host reserves before it creates a resource and commits once the
//! resource exists:
//!
//! 1. [`QuotaLedger::try_reserve`] (or [`QuotaLedger::try_reserve_owned`])
//!    takes `amount` out of the tenant's quota, or refuses with a
//!    [`QuotaError`] ([`Errno::EQUOTA`] to the guest).
//! 2. If creating the resource fails, dropping the [`Reservation`] gives the
//!    amount back.
//! 3. If it succeeds, [`Reservation::commit`] turns the reservation into a
//!    [`Charge`], which the host keeps next to the resource it pays for (in
//!    the same handle-table entry). Dropping the charge, which happens when
//!    the resource is freed, gives the amount back.
//!
//! There is no public `release`: every unit taken is given back by exactly
//! one drop, so a charge can neither leak nor be released twice. A charge
//! that must grow with its resource (guest memory grows) does so with
//! [`Charge::try_grow`].

use core::fmt;
use core::ops::Deref;

use crate::abi::{AbiError, Errno};
use crate::sync::{Arc, AtomicU64, Ordering};

/// Something a tenant holds that its quota limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Resource {
    /// Bytes of device buffers (`buffer_alloc`), counted as requested.
    DeviceBytes,
    /// Bytes of guest linear memory backed by managed memory, counted as the
    /// memory is sized and grown.
    GuestMemoryBytes,
    /// Loaded modules (PTX, cubin, or Wasm kernels' modules).
    Modules,
    /// Live functions: kernel handles, PTX or Wasm.
    Functions,
    /// Launches issued and not yet waited for.
    LaunchesInFlight,
    /// Streams the tenant's work runs on.
    Streams,
    /// Wasm kernels being translated, lowered and loaded for the tenant
    /// (`kernel_get` on a compile worker), counted until the compile ends,
    /// even when the guest stopped waiting for it.
    Compiles,
}

impl Resource {
    /// How many resources there are.
    pub const COUNT: usize = 7;

    /// Every resource, in declaration order (the order of
    /// [`index`](Self::index)).
    pub const ALL: [Resource; Resource::COUNT] = [
        Resource::DeviceBytes,
        Resource::GuestMemoryBytes,
        Resource::Modules,
        Resource::Functions,
        Resource::LaunchesInFlight,
        Resource::Streams,
        Resource::Compiles,
    ];

    /// The resource's position in [`ALL`](Self::ALL), `0..COUNT`.
    pub const fn index(self) -> usize {
        self as usize
    }

    /// What the resource is, in the words error messages use, e.g.
    /// `"device-buffer bytes"`.
    pub const fn name(self) -> &'static str {
        match self {
            Resource::DeviceBytes => "device-buffer bytes",
            Resource::GuestMemoryBytes => "guest-memory bytes",
            Resource::Modules => "modules",
            Resource::Functions => "functions",
            Resource::LaunchesInFlight => "launches in flight",
            Resource::Streams => "streams",
            Resource::Compiles => "kernel compiles in flight",
        }
    }
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The most a tenant may hold of each [`Resource`] at once, plus the bounds
/// on the work its kernels may ask for: the fuel each thread of its Wasm
/// kernels gets, how large a kernel it may compile and for how long, how
/// long one launch may run, and how much arithmetic one built-in tensor op
/// may do.
///
/// A limit of `u64::MAX` means unlimited. Build one from
/// [`TenantQuota::default`] (limits for an untrusted tenant) or
/// [`TenantQuota::unlimited`] and the `with_*` setters:
///
/// ```
/// use tensorwasm_core::quota::{Resource, TenantQuota};
///
/// let quota = TenantQuota::default()
///     .with_device_bytes(256 << 20)
///     .with_limit(Resource::Streams, 1);
/// assert_eq!(quota.limit(Resource::DeviceBytes), 256 << 20);
/// assert_eq!(quota.limit(Resource::Modules), TenantQuota::DEFAULT_MODULES);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct TenantQuota {
    /// Indexed by [`Resource::index`].
    limits: [u64; Resource::COUNT],
    kernel_fuel: u64,
    kernel_operators: u64,
    kernel_branches: u64,
    compile_time_ns: u64,
    compile_budget_ns: u64,
    launch_time_ns: u64,
    launch_share_percent: u64,
    tensor_work: u64,
}

impl TenantQuota {
    /// Default device-buffer bytes: 1 GiB. Enough for real work, and on an
    /// 80 GiB GPU it lets dozens of tenants share the device without one
    /// being able to exhaust it.
    pub const DEFAULT_DEVICE_BYTES: u64 = 1 << 30;
    /// Default guest-memory bytes: 1 GiB. Managed memory is populated
    /// lazily, but it still comes out of device memory when a kernel touches
    /// it, so it gets the same share as device buffers (and a memory32
    /// guest can address at most 4 GiB anyway).
    pub const DEFAULT_GUEST_MEMORY_BYTES: u64 = 1 << 30;
    /// Default loaded modules: 64. Each module costs driver memory and JIT
    /// time; a program needs a handful, so 64 leaves room without letting a
    /// tenant fill the driver's module tables.
    pub const DEFAULT_MODULES: u64 = 64;
    /// Default live functions: 1024, sixteen per module on average: a
    /// function handle is cheap, but each one pins its module.
    pub const DEFAULT_FUNCTIONS: u64 = 1024;
    /// Default launches in flight: 256. Each one holds its arguments and a
    /// completion slot until it is waited for; a deeper queue than this buys
    /// no throughput and lets one tenant crowd the device's queue.
    pub const DEFAULT_LAUNCHES_IN_FLIGHT: u64 = 256;
    /// Default streams: 4. Enough to overlap copies with kernels; streams
    /// are a per-context resource every tenant shares.
    pub const DEFAULT_STREAMS: u64 = 4;
    /// Default kernel compiles in flight: 1. A compile the guest stopped
    /// waiting for (past its compile time) still runs on a worker until the
    /// driver's JIT returns; the tenant gets no second worker meanwhile.
    pub const DEFAULT_COMPILES: u64 = 1;
    /// Default fuel per Wasm-kernel thread: 2^24 (about 16.8 million) loop
    /// iterations, far more than a well-behaved kernel spends, yet an endless
    /// loop traps within a fraction of a second instead of holding the GPU.
    pub const DEFAULT_KERNEL_FUEL: u64 = 1 << 24;
    /// Default Wasm operators in one kernel, every callee inlined: 2^14
    /// (16,384). Real kernels are a few hundred; the bound keeps the
    /// host's translation, lowering and the driver's PTX JIT short.
    pub const DEFAULT_KERNEL_OPERATORS: u64 = 1 << 14;
    /// Default branch points in one kernel (memory accesses, loops, `if`s,
    /// conditional branches and trapping operators, every callee inlined):
    /// 256. The driver's PTX JIT grows faster than linearly in them
    /// (measured with ptxas 12.9: 1,000 memory accesses take 4.5 s and
    /// 300 MB, 4,000 take 63 s and 3.3 GB); at 256 it takes well under 1 s.
    pub const DEFAULT_KERNEL_BRANCHES: u64 = 256;
    /// Default time a guest waits for one kernel to compile: 2 s.
    pub const DEFAULT_COMPILE_TIME_NS: u64 = 2_000_000_000;
    /// Default compile time a tenant may spend in all (charged as each
    /// compile ends, whether or not the guest still waited): 60 s.
    pub const DEFAULT_COMPILE_BUDGET_NS: u64 = 60_000_000_000;
    /// Default GPU time one Wasm-kernel launch may run: 1 s, from the
    /// moment its first thread checks the clock; its threads then trap with
    /// "time limit". Launches in flight times this bounds a tenant's queue.
    pub const DEFAULT_LAUNCH_TIME_NS: u64 = 1_000_000_000;
    /// Default share of the device one Wasm-kernel launch may occupy at
    /// once: 50% of its thread slots. The rest stays free for other
    /// tenants' launches, which a long launch would otherwise keep waiting
    /// (a GPU does not preempt one kernel's blocks for another's).
    pub const DEFAULT_LAUNCH_SHARE_PERCENT: u64 = 50;
    /// Default multiply-adds (or element operations) one built-in tensor op
    /// may ask for: 2^40, about 50 ms of an H100's f32 GEMM. A batched GEMM
    /// whose operands broadcast can ask for far more than its buffers hold.
    pub const DEFAULT_TENSOR_WORK: u64 = 1 << 40;

    /// No limit on any resource, and the most fuel there is (a Wasm kernel's
    /// endless loop then runs for a very long time: for trusted tenants).
    pub const fn unlimited() -> Self {
        TenantQuota {
            limits: [u64::MAX; Resource::COUNT],
            kernel_fuel: u64::MAX,
            kernel_operators: u64::MAX,
            kernel_branches: u64::MAX,
            compile_time_ns: u64::MAX,
            compile_budget_ns: u64::MAX,
            launch_time_ns: u64::MAX,
            launch_share_percent: 100,
            tensor_work: u64::MAX,
        }
    }

    /// The most of `resource` the tenant may hold at once (`u64::MAX`:
    /// unlimited).
    pub const fn limit(&self, resource: Resource) -> u64 {
        self.limits[resource.index()]
    }

    /// Fuel of each thread of a Wasm kernel launch: every loop iteration
    /// spends one, and a thread that runs out traps ("out of fuel"). Carried
    /// for the host to pass to its launches; the ledger does not count it.
    pub const fn kernel_fuel(&self) -> u64 {
        self.kernel_fuel
    }

    /// The most Wasm operators one kernel may have, every callee inlined
    /// (the host's own cap applies too; `kernel_get` refuses past either).
    pub const fn kernel_operators(&self) -> u64 {
        self.kernel_operators
    }

    /// The most branch points (memory accesses, loops, `if`s, conditional
    /// branches, trapping operators) one kernel may have, callees inlined.
    pub const fn kernel_branches(&self) -> u64 {
        self.kernel_branches
    }

    /// How long, in nanoseconds, a guest waits for one kernel to compile
    /// before `kernel_get` gives up with `EQUOTA`.
    pub const fn compile_time_ns(&self) -> u64 {
        self.compile_time_ns
    }

    /// The compile time, in nanoseconds, the tenant may spend in all.
    pub const fn compile_budget_ns(&self) -> u64 {
        self.compile_budget_ns
    }

    /// The GPU time, in nanoseconds, one Wasm-kernel launch may run before
    /// its threads trap with "time limit".
    pub const fn launch_time_ns(&self) -> u64 {
        self.launch_time_ns
    }

    /// The share of the device's thread slots (multiprocessors x threads
    /// per multiprocessor), in percent (1 ..= 100), that one Wasm-kernel
    /// launch may occupy at once: a larger grid runs as virtual blocks over
    /// that many physical ones (docs/kernels.md, "Virtual blocks").
    pub const fn launch_share_percent(&self) -> u64 {
        self.launch_share_percent
    }

    /// The same quota with one launch occupying at most `percent` of the
    /// device's thread slots (clamped to 1 ..= 100).
    #[must_use]
    pub const fn with_launch_share_percent(mut self, percent: u64) -> Self {
        self.launch_share_percent = if percent < 1 {
            1
        } else if percent > 100 {
            100
        } else {
            percent
        };
        self
    }

    /// The most multiply-adds (GEMM) or element operations one built-in
    /// tensor op may do.
    pub const fn tensor_work(&self) -> u64 {
        self.tensor_work
    }

    /// The first limit or bound of this quota above `ceiling`'s, by its
    /// name; `None` when every one is at most the ceiling's. A host that
    /// lets a less trusted party pick its own quota (a pod's annotations)
    /// checks it against the most it grants.
    pub fn first_above(&self, ceiling: &TenantQuota) -> Option<&'static str> {
        if let Some(r) = Resource::ALL
            .into_iter()
            .find(|&r| self.limit(r) > ceiling.limit(r))
        {
            return Some(r.name());
        }
        type Bound = (&'static str, fn(&TenantQuota) -> u64);
        let bounds: [Bound; 8] = [
            ("kernel fuel", TenantQuota::kernel_fuel),
            ("kernel operators", TenantQuota::kernel_operators),
            ("kernel branches", TenantQuota::kernel_branches),
            ("compile time", TenantQuota::compile_time_ns),
            ("compile budget", TenantQuota::compile_budget_ns),
            ("launch time", TenantQuota::launch_time_ns),
            ("launch share", TenantQuota::launch_share_percent),
            ("tensor work", TenantQuota::tensor_work),
        ];
        bounds
            .into_iter()
            .find(|(_, get)| get(self) > get(ceiling))
            .map(|(name, _)| name)
    }

    /// The same quota with at most `operators` Wasm operators per kernel.
    #[must_use]
    pub const fn with_kernel_operators(mut self, operators: u64) -> Self {
        self.kernel_operators = operators;
        self
    }

    /// The same quota with at most `branches` branch points per kernel.
    #[must_use]
    pub const fn with_kernel_branches(mut self, branches: u64) -> Self {
        self.kernel_branches = branches;
        self
    }

    /// The same quota with a guest waiting at most `ns` for one compile.
    #[must_use]
    pub const fn with_compile_time_ns(mut self, ns: u64) -> Self {
        self.compile_time_ns = ns;
        self
    }

    /// The same quota with `ns` of compile time in all.
    #[must_use]
    pub const fn with_compile_budget_ns(mut self, ns: u64) -> Self {
        self.compile_budget_ns = ns;
        self
    }

    /// The same quota with one launch running at most `ns` of GPU time.
    #[must_use]
    pub const fn with_launch_time_ns(mut self, ns: u64) -> Self {
        self.launch_time_ns = ns;
        self
    }

    /// The same quota with at most `work` multiply-adds per tensor op.
    #[must_use]
    pub const fn with_tensor_work(mut self, work: u64) -> Self {
        self.tensor_work = work;
        self
    }

    /// The same quota with `resource` limited to `limit` (`u64::MAX`:
    /// unlimited).
    #[must_use]
    pub const fn with_limit(mut self, resource: Resource, limit: u64) -> Self {
        self.limits[resource.index()] = limit;
        self
    }

    /// The same quota with [`Resource::DeviceBytes`] limited to `bytes`.
    #[must_use]
    pub const fn with_device_bytes(self, bytes: u64) -> Self {
        self.with_limit(Resource::DeviceBytes, bytes)
    }

    /// The same quota with [`Resource::GuestMemoryBytes`] limited to `bytes`.
    #[must_use]
    pub const fn with_guest_memory_bytes(self, bytes: u64) -> Self {
        self.with_limit(Resource::GuestMemoryBytes, bytes)
    }

    /// The same quota with [`Resource::Modules`] limited to `count`.
    #[must_use]
    pub const fn with_modules(self, count: u64) -> Self {
        self.with_limit(Resource::Modules, count)
    }

    /// The same quota with [`Resource::Functions`] limited to `count`.
    #[must_use]
    pub const fn with_functions(self, count: u64) -> Self {
        self.with_limit(Resource::Functions, count)
    }

    /// The same quota with [`Resource::LaunchesInFlight`] limited to `count`.
    #[must_use]
    pub const fn with_launches_in_flight(self, count: u64) -> Self {
        self.with_limit(Resource::LaunchesInFlight, count)
    }

    /// The same quota with [`Resource::Streams`] limited to `count`.
    #[must_use]
    pub const fn with_streams(self, count: u64) -> Self {
        self.with_limit(Resource::Streams, count)
    }

    /// The same quota with `fuel` per Wasm-kernel thread.
    #[must_use]
    pub const fn with_kernel_fuel(mut self, fuel: u64) -> Self {
        self.kernel_fuel = fuel;
        self
    }
}

impl Default for TenantQuota {
    /// Limits for an untrusted tenant: the `DEFAULT_*` constants (1 GiB of
    /// device buffers, 1 GiB of guest memory, 64 modules, 1024 functions,
    /// 256 launches in flight, 4 streams, one compile in flight, 2^24 fuel
    /// per kernel thread, kernels of 2^14 operators and 256 branch points,
    /// 2 s per compile and 60 s in all, 1 s per launch on at most half the
    /// device, 2^40 multiply-adds per tensor op).
    fn default() -> Self {
        TenantQuota::unlimited()
            .with_device_bytes(Self::DEFAULT_DEVICE_BYTES)
            .with_guest_memory_bytes(Self::DEFAULT_GUEST_MEMORY_BYTES)
            .with_modules(Self::DEFAULT_MODULES)
            .with_functions(Self::DEFAULT_FUNCTIONS)
            .with_launches_in_flight(Self::DEFAULT_LAUNCHES_IN_FLIGHT)
            .with_streams(Self::DEFAULT_STREAMS)
            .with_limit(Resource::Compiles, Self::DEFAULT_COMPILES)
            .with_kernel_fuel(Self::DEFAULT_KERNEL_FUEL)
            .with_kernel_operators(Self::DEFAULT_KERNEL_OPERATORS)
            .with_kernel_branches(Self::DEFAULT_KERNEL_BRANCHES)
            .with_compile_time_ns(Self::DEFAULT_COMPILE_TIME_NS)
            .with_compile_budget_ns(Self::DEFAULT_COMPILE_BUDGET_NS)
            .with_launch_time_ns(Self::DEFAULT_LAUNCH_TIME_NS)
            .with_launch_share_percent(Self::DEFAULT_LAUNCH_SHARE_PERCENT)
            .with_tensor_work(Self::DEFAULT_TENSOR_WORK)
    }
}

/// A refused reservation: taking `requested` more of `resource` would pass
/// the tenant's `limit` (or overflow the counter).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct QuotaError {
    /// What was asked for.
    pub resource: Resource,
    /// How much more was asked for.
    pub requested: u64,
    /// How much the tenant held when it was refused.
    pub in_use: u64,
    /// The tenant's limit (`u64::MAX`: unlimited, refused only because the
    /// sum would overflow).
    pub limit: u64,
}

impl fmt::Display for QuotaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let QuotaError {
            resource,
            requested,
            in_use,
            limit,
        } = *self;
        if limit == u64::MAX {
            write!(
                f,
                "{resource} quota exceeded: {requested} requested, {in_use} in use \
                 (no limit set, but the sum overflows 64 bits)"
            )
        } else {
            write!(
                f,
                "{resource} quota exceeded: {requested} requested, {in_use} of {limit} in use"
            )
        }
    }
}

impl core::error::Error for QuotaError {}

impl From<QuotaError> for AbiError {
    /// [`Errno::EQUOTA`], with the error's text as the reason.
    fn from(error: QuotaError) -> AbiError {
        AbiError::new(Errno::EQUOTA, alloc::format!("{error}"))
    }
}

/// What one tenant holds now, against its [`TenantQuota`]: one atomic counter
/// per [`Resource`].
///
/// Shared by every thread serving the tenant (put it in an [`Arc`]).
/// Reservations are lock-free: each is one compare-exchange loop on the
/// resource's counter, so two racing requests never both pass when only one
/// fits.
#[derive(Debug)]
pub struct QuotaLedger {
    quota: TenantQuota,
    /// Indexed by [`Resource::index`]; never above the resource's limit.
    in_use: [AtomicU64; Resource::COUNT],
    /// Compile time spent so far, in nanoseconds (never given back).
    compile_spent_ns: AtomicU64,
}

impl QuotaLedger {
    /// A ledger with nothing in use, limited by `quota`.
    pub fn new(quota: TenantQuota) -> Self {
        QuotaLedger {
            quota,
            in_use: core::array::from_fn(|_| AtomicU64::new(0)),
            compile_spent_ns: AtomicU64::new(0),
        }
    }

    /// Compile time the tenant has spent, in nanoseconds.
    pub fn compile_spent_ns(&self) -> u64 {
        self.compile_spent_ns.load(Ordering::Acquire)
    }

    /// Compile time the tenant may still spend, in nanoseconds; `EQUOTA`
    /// (as a [`QuotaError`] on [`Resource::Compiles`]) once its budget is
    /// spent.
    pub fn compile_time_left(&self) -> Result<u64, CompileBudgetSpent> {
        let spent = self.compile_spent_ns();
        let budget = self.quota.compile_budget_ns();
        match budget.checked_sub(spent) {
            Some(left) if left > 0 => Ok(left),
            _ => Err(CompileBudgetSpent { spent, budget }),
        }
    }

    /// Charges `ns` of compile time to the tenant (it was spent: nothing
    /// gives it back). Saturates at `u64::MAX`.
    pub fn spend_compile_time(&self, ns: u64) {
        let counter = &self.compile_spent_ns;
        let mut current = counter.load(Ordering::Acquire);
        loop {
            let next = current.saturating_add(ns);
            match counter.compare_exchange_weak(current, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return,
                Err(actual) => current = actual,
            }
        }
    }

    /// The quota this ledger enforces.
    pub fn quota(&self) -> &TenantQuota {
        &self.quota
    }

    /// The tenant's limit on `resource` (`u64::MAX`: unlimited).
    pub fn limit(&self, resource: Resource) -> u64 {
        self.quota.limit(resource)
    }

    /// How much of `resource` is reserved or charged now.
    pub fn in_use(&self, resource: Resource) -> u64 {
        self.counter(resource).load(Ordering::Acquire)
    }

    /// Every counter and limit. The counters are read one after another, so
    /// under concurrent use the snapshot is not one instant: each value is
    /// one that counter held during the call.
    pub fn snapshot(&self) -> QuotaSnapshot {
        QuotaSnapshot {
            in_use: Resource::ALL.map(|r| self.in_use(r)),
            limits: Resource::ALL.map(|r| self.limit(r)),
        }
    }

    /// Takes `amount` of `resource` out of the quota, or refuses if the
    /// tenant would then hold more than its limit. The amount comes back when
    /// the returned [`Reservation`] (or the [`Charge`] it is committed to) is
    /// dropped. A zero amount always succeeds.
    pub fn try_reserve(
        &self,
        resource: Resource,
        amount: u64,
    ) -> Result<Reservation<'_>, QuotaError> {
        self.reserve(resource, amount)?;
        Ok(Reservation(Held {
            ledger: self,
            resource,
            amount,
        }))
    }

    /// As [`try_reserve`](Self::try_reserve), for a reservation that must
    /// outlive a borrow of the ledger (kept in a handle table, moved to a
    /// completion callback): it holds a clone of `ledger`.
    ///
    /// An associated function rather than a `self: &Arc<Self>` method, since
    /// under `cfg(loom)` [`Arc`] is loom's, which stable Rust does not accept
    /// as a receiver. Call it as `QuotaLedger::try_reserve_owned(&ledger, ..)`.
    pub fn try_reserve_owned(
        ledger: &Arc<QuotaLedger>,
        resource: Resource,
        amount: u64,
    ) -> Result<OwnedReservation, QuotaError> {
        ledger.reserve(resource, amount)?;
        Ok(OwnedReservation(Held {
            ledger: Arc::clone(ledger),
            resource,
            amount,
        }))
    }

    fn counter(&self, resource: Resource) -> &AtomicU64 {
        &self.in_use[resource.index()]
    }

    /// Adds `amount` to the counter if the sum stays within the limit. The
    /// check and the add are one compare-exchange on the sum: reading the
    /// counter, checking, then adding would let two racing requests both
    /// pass the check when only one fits.
    fn reserve(&self, resource: Resource, amount: u64) -> Result<(), QuotaError> {
        let counter = self.counter(resource);
        let limit = self.limit(resource);
        let mut current = counter.load(Ordering::Acquire);
        loop {
            let next = current
                .checked_add(amount)
                .filter(|&next| next <= limit)
                .ok_or(QuotaError {
                    resource,
                    requested: amount,
                    in_use: current,
                    limit,
                })?;
            match counter.compare_exchange_weak(current, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Ok(()),
                Err(actual) => current = actual,
            }
        }
    }

    /// Gives back `amount` taken by [`reserve`](Self::reserve). Only the
    /// guards call it, once each, so the counter never goes below zero.
    fn release(&self, resource: Resource, amount: u64) {
        let before = self.counter(resource).fetch_sub(amount, Ordering::AcqRel);
        debug_assert!(
            before >= amount,
            "{resource}: released {amount} with only {before} in use"
        );
    }
}

/// The tenant has spent its whole compile budget
/// ([`TenantQuota::compile_budget_ns`]): `EQUOTA` to the guest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct CompileBudgetSpent {
    /// Nanoseconds spent.
    pub spent: u64,
    /// The budget, in nanoseconds.
    pub budget: u64,
}

impl fmt::Display for CompileBudgetSpent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "compile-time quota exceeded: {} ms of kernel compiles spent of {} ms",
            self.spent / 1_000_000,
            self.budget / 1_000_000
        )
    }
}

impl From<CompileBudgetSpent> for AbiError {
    /// [`Errno::EQUOTA`], with the error's text as the reason.
    fn from(error: CompileBudgetSpent) -> AbiError {
        AbiError::new(Errno::EQUOTA, alloc::format!("{error}"))
    }
}

/// Every counter of a [`QuotaLedger`] and its limit, read by
/// [`QuotaLedger::snapshot`]. Its `Display` is one line,
/// `device-buffer bytes 4096/1073741824, ..., streams 1/4` (`unlimited` for
/// a limit of `u64::MAX`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct QuotaSnapshot {
    in_use: [u64; Resource::COUNT],
    limits: [u64; Resource::COUNT],
}

impl QuotaSnapshot {
    /// How much of `resource` was in use.
    pub fn in_use(&self, resource: Resource) -> u64 {
        self.in_use[resource.index()]
    }

    /// The limit on `resource`.
    pub fn limit(&self, resource: Resource) -> u64 {
        self.limits[resource.index()]
    }

    /// `(resource, in use, limit)` for every resource, in [`Resource::ALL`]
    /// order.
    pub fn iter(&self) -> impl Iterator<Item = (Resource, u64, u64)> + '_ {
        Resource::ALL
            .into_iter()
            .map(|r| (r, self.in_use(r), self.limit(r)))
    }
}

impl fmt::Display for QuotaSnapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (resource, in_use, limit)) in self.iter().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            if limit == u64::MAX {
                write!(f, "{sep}{resource} {in_use}/unlimited")?;
            } else {
                write!(f, "{sep}{resource} {in_use}/{limit}")?;
            }
        }
        Ok(())
    }
}

/// `amount` of `resource` taken from a ledger, given back on drop. `L` is how
/// the guard reaches the ledger: a borrow or an [`Arc`].
struct Held<L: Deref<Target = QuotaLedger>> {
    ledger: L,
    resource: Resource,
    amount: u64,
}

impl<L: Deref<Target = QuotaLedger>> Held<L> {
    fn try_grow(&mut self, extra: u64) -> Result<(), QuotaError> {
        self.ledger.reserve(self.resource, extra)?;
        // Cannot overflow: the counter holds at least `amount` and took
        // `extra` more without overflowing.
        self.amount += extra;
        Ok(())
    }
}

impl<L: Deref<Target = QuotaLedger>> Drop for Held<L> {
    fn drop(&mut self) {
        self.ledger.release(self.resource, self.amount);
    }
}

impl<L: Deref<Target = QuotaLedger>> fmt::Debug for Held<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.amount, self.resource)
    }
}

/// Quota taken for a resource that is not created yet. Dropping it gives the
/// amount back (creating the resource failed); [`commit`](Self::commit) keeps
/// it as a [`Charge`] (the resource exists).
#[must_use = "dropping a reservation gives the quota back at once; commit it to keep it"]
#[derive(Debug)]
pub struct Reservation<'a>(Held<&'a QuotaLedger>);

impl<'a> Reservation<'a> {
    /// What was reserved.
    pub fn resource(&self) -> Resource {
        self.0.resource
    }

    /// How much was reserved.
    pub fn amount(&self) -> u64 {
        self.0.amount
    }

    /// The resource exists: keep the amount as a charge, given back when the
    /// charge is dropped.
    pub fn commit(self) -> Charge<'a> {
        Charge(self.0)
    }
}

/// Quota held by a resource that exists. Keep it next to the resource (in
/// the same table entry): dropping it, when the resource is freed, gives the
/// amount back.
#[must_use = "dropping a charge gives the quota back at once; keep it with the resource"]
#[derive(Debug)]
pub struct Charge<'a>(Held<&'a QuotaLedger>);

impl Charge<'_> {
    /// What is charged.
    pub fn resource(&self) -> Resource {
        self.0.resource
    }

    /// How much is charged.
    pub fn amount(&self) -> u64 {
        self.0.amount
    }

    /// Charges `extra` more (the resource grows), or refuses and leaves the
    /// charge as it was.
    pub fn try_grow(&mut self, extra: u64) -> Result<(), QuotaError> {
        self.0.try_grow(extra)
    }
}

/// A [`Reservation`] that holds its ledger by [`Arc`], so it can outlive
/// any borrow: from [`QuotaLedger::try_reserve_owned`].
#[must_use = "dropping a reservation gives the quota back at once; commit it to keep it"]
#[derive(Debug)]
pub struct OwnedReservation(Held<Arc<QuotaLedger>>);

impl OwnedReservation {
    /// What was reserved.
    pub fn resource(&self) -> Resource {
        self.0.resource
    }

    /// How much was reserved.
    pub fn amount(&self) -> u64 {
        self.0.amount
    }

    /// The resource exists: keep the amount as a charge, given back when the
    /// charge is dropped.
    pub fn commit(self) -> OwnedCharge {
        OwnedCharge(self.0)
    }
}

/// A [`Charge`] that holds its ledger by [`Arc`]: from
/// [`OwnedReservation::commit`].
#[must_use = "dropping a charge gives the quota back at once; keep it with the resource"]
#[derive(Debug)]
pub struct OwnedCharge(Held<Arc<QuotaLedger>>);

impl OwnedCharge {
    /// What is charged.
    pub fn resource(&self) -> Resource {
        self.0.resource
    }

    /// How much is charged.
    pub fn amount(&self) -> u64 {
        self.0.amount
    }

    /// The ledger the charge is held in.
    pub fn ledger(&self) -> &Arc<QuotaLedger> {
        &self.0.ledger
    }

    /// Charges `extra` more (the resource grows), or refuses and leaves the
    /// charge as it was.
    pub fn try_grow(&mut self, extra: u64) -> Result<(), QuotaError> {
        self.0.try_grow(extra)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use alloc::string::ToString;
    use alloc::vec::Vec;

    /// A limit and a first request per resource, each different, none zero.
    const LIMITS: [(Resource, u64, &str); Resource::COUNT] = [
        (Resource::DeviceBytes, 1 << 30, "device-buffer bytes"),
        (Resource::GuestMemoryBytes, 3 << 20, "guest-memory bytes"),
        (Resource::Modules, 5, "modules"),
        (Resource::Functions, 7, "functions"),
        (Resource::LaunchesInFlight, 11, "launches in flight"),
        (Resource::Streams, 2, "streams"),
        (Resource::Compiles, 3, "kernel compiles in flight"),
    ];

    fn quota_of_limits() -> TenantQuota {
        LIMITS
            .iter()
            .fold(TenantQuota::unlimited(), |q, &(r, limit, _)| {
                q.with_limit(r, limit)
            })
    }

    #[test]
    fn resources_are_in_index_order_with_names() {
        for (i, (r, &(expected, _, name))) in Resource::ALL.iter().zip(&LIMITS).enumerate() {
            assert_eq!(r.index(), i);
            assert_eq!(*r, expected);
            assert_eq!(r.name(), name);
            assert_eq!(r.to_string(), name);
        }
    }

    #[test]
    fn every_limit_is_enforced_with_its_error_text() {
        let ledger = QuotaLedger::new(quota_of_limits());
        for &(resource, limit, name) in &LIMITS {
            // Fill to one below the limit, then exactly to it.
            let most = ledger.try_reserve(resource, limit - 1).unwrap();
            let last = ledger.try_reserve(resource, 1).unwrap();
            assert_eq!(ledger.in_use(resource), limit);
            let e = ledger.try_reserve(resource, 1).unwrap_err();
            assert_eq!(
                e,
                QuotaError {
                    resource,
                    requested: 1,
                    in_use: limit,
                    limit
                }
            );
            assert_eq!(
                e.to_string(),
                alloc::format!("{name} quota exceeded: 1 requested, {limit} of {limit} in use")
            );
            drop(last);
            // One unit back: a request of two still does not fit.
            let e = ledger.try_reserve(resource, 2).unwrap_err();
            assert_eq!((e.requested, e.in_use), (2, limit - 1));
            assert_eq!(
                ledger.in_use(resource),
                limit - 1,
                "a refusal takes nothing"
            );
            drop(most);
            assert_eq!(ledger.in_use(resource), 0);
        }
    }

    #[test]
    fn error_text_matches_the_documented_example_and_maps_to_equota() {
        let ledger = QuotaLedger::new(TenantQuota::default());
        let _held = ledger
            .try_reserve(Resource::DeviceBytes, 1_073_741_000)
            .unwrap();
        let e = ledger.try_reserve(Resource::DeviceBytes, 4096).unwrap_err();
        assert_eq!(
            e.to_string(),
            "device-buffer bytes quota exceeded: 4096 requested, 1073741000 of 1073741824 in use"
        );
        let abi = AbiError::from(e);
        assert_eq!(abi.errno, Errno::EQUOTA);
        assert_eq!(abi.code(), 16);
        assert_eq!(
            abi.to_string(),
            "EQUOTA: device-buffer bytes quota exceeded: 4096 requested, \
             1073741000 of 1073741824 in use"
        );
    }

    #[test]
    fn compile_time_is_spent_not_given_back() {
        let ledger = QuotaLedger::new(TenantQuota::default().with_compile_budget_ns(10_000_000));
        assert_eq!(ledger.compile_time_left(), Ok(10_000_000));
        ledger.spend_compile_time(4_000_000);
        assert_eq!(ledger.compile_time_left(), Ok(6_000_000));
        ledger.spend_compile_time(7_000_000);
        let e = ledger.compile_time_left().unwrap_err();
        assert_eq!((e.spent, e.budget), (11_000_000, 10_000_000));
        assert_eq!(
            AbiError::from(e).to_string(),
            "EQUOTA: compile-time quota exceeded: 11 ms of kernel compiles spent of 10 ms"
        );
        ledger.spend_compile_time(u64::MAX);
        assert_eq!(ledger.compile_spent_ns(), u64::MAX);
    }

    #[test]
    fn untrusted_defaults_bound_kernels_and_launches() {
        let q = TenantQuota::default();
        assert_eq!(q.limit(Resource::Compiles), 1);
        assert_eq!(q.kernel_operators(), 1 << 14);
        assert_eq!(q.kernel_branches(), 256);
        assert_eq!(q.compile_time_ns(), 2_000_000_000);
        assert_eq!(q.launch_time_ns(), 1_000_000_000);
        assert_eq!(q.launch_share_percent(), 50);
        assert_eq!(q.with_launch_share_percent(0).launch_share_percent(), 1);
        assert_eq!(q.with_launch_share_percent(500).launch_share_percent(), 100);
        assert_eq!(TenantQuota::unlimited().launch_share_percent(), 100);
        assert_eq!(q.tensor_work(), 1 << 40);
        let u = TenantQuota::unlimited();
        assert_eq!(u.launch_time_ns(), u64::MAX);
        assert_eq!(u.with_launch_time_ns(5).launch_time_ns(), 5);
    }

    #[test]
    fn resources_are_counted_apart() {
        let ledger = QuotaLedger::new(quota_of_limits());
        let held: Vec<_> = LIMITS
            .iter()
            .map(|&(r, limit, _)| ledger.try_reserve(r, limit).unwrap().commit())
            .collect();
        for &(r, limit, _) in &LIMITS {
            assert_eq!(ledger.in_use(r), limit);
        }
        drop(held);
        assert!(Resource::ALL.iter().all(|&r| ledger.in_use(r) == 0));
    }

    #[test]
    fn an_uncommitted_reservation_is_released_on_drop() {
        let ledger = QuotaLedger::new(quota_of_limits());
        let r = ledger.try_reserve(Resource::Modules, 3).unwrap();
        assert_eq!((r.resource(), r.amount()), (Resource::Modules, 3));
        assert_eq!(ledger.in_use(Resource::Modules), 3);
        drop(r);
        assert_eq!(ledger.in_use(Resource::Modules), 0);
        // The whole quota is there again.
        let all = ledger.try_reserve(Resource::Modules, 5).unwrap();
        drop(all);
    }

    #[test]
    fn a_charge_is_held_until_dropped() {
        let ledger = QuotaLedger::new(quota_of_limits());
        let charge = ledger.try_reserve(Resource::Functions, 4).unwrap().commit();
        assert_eq!(
            (charge.resource(), charge.amount()),
            (Resource::Functions, 4)
        );
        assert_eq!(ledger.in_use(Resource::Functions), 4);
        assert!(ledger.try_reserve(Resource::Functions, 4).is_err());
        drop(charge);
        assert_eq!(ledger.in_use(Resource::Functions), 0);
    }

    #[test]
    fn owned_guards_release_like_borrowed_ones() {
        let ledger = Arc::new(QuotaLedger::new(quota_of_limits()));
        let r = QuotaLedger::try_reserve_owned(&ledger, Resource::Streams, 1).unwrap();
        assert_eq!((r.resource(), r.amount()), (Resource::Streams, 1));
        assert_eq!(Arc::strong_count(&ledger), 2);
        drop(r);
        assert_eq!(ledger.in_use(Resource::Streams), 0);
        assert_eq!(Arc::strong_count(&ledger), 1);

        let mut c = QuotaLedger::try_reserve_owned(&ledger, Resource::Streams, 1)
            .unwrap()
            .commit();
        assert!(Arc::ptr_eq(c.ledger(), &ledger));
        c.try_grow(1).unwrap();
        let e = c.try_grow(1).unwrap_err();
        assert_eq!(
            e.to_string(),
            "streams quota exceeded: 1 requested, 2 of 2 in use"
        );
        assert_eq!((c.resource(), c.amount()), (Resource::Streams, 2));
        // The charge outlives every borrow: it may move to another owner.
        let moved = c;
        drop(moved);
        assert_eq!(ledger.in_use(Resource::Streams), 0);
        assert_eq!(Arc::strong_count(&ledger), 1);
    }

    #[test]
    fn try_grow_grows_or_leaves_the_charge_as_it_was() {
        let limit = 3 << 20;
        let ledger = QuotaLedger::new(quota_of_limits());
        let page = 64 << 10;
        let mut memory = ledger
            .try_reserve(Resource::GuestMemoryBytes, page)
            .unwrap()
            .commit();
        memory.try_grow(page).unwrap();
        assert_eq!(memory.amount(), 2 * page);
        // Another holder takes part of the quota; growth sees it.
        let other = ledger
            .try_reserve(Resource::GuestMemoryBytes, limit - 3 * page)
            .unwrap();
        memory.try_grow(page).unwrap();
        let e = memory.try_grow(1).unwrap_err();
        assert_eq!((e.requested, e.in_use, e.limit), (1, limit, limit));
        assert_eq!(
            memory.amount(),
            3 * page,
            "a refused growth changes nothing"
        );
        assert_eq!(ledger.in_use(Resource::GuestMemoryBytes), limit);
        memory.try_grow(0).unwrap();
        drop(other);
        drop(memory);
        assert_eq!(
            ledger.in_use(Resource::GuestMemoryBytes),
            0,
            "the grown amount is all given back"
        );
    }

    #[test]
    fn overflow_near_u64_max_is_over_quota() {
        let ledger = QuotaLedger::new(TenantQuota::unlimited());
        let r = Resource::DeviceBytes;
        let mut big = ledger.try_reserve(r, u64::MAX - 1).unwrap().commit();
        let e = ledger.try_reserve(r, 2).unwrap_err();
        assert_eq!(
            (e.requested, e.in_use, e.limit),
            (2, u64::MAX - 1, u64::MAX)
        );
        assert_eq!(
            e.to_string(),
            "device-buffer bytes quota exceeded: 2 requested, 18446744073709551614 in use \
             (no limit set, but the sum overflows 64 bits)"
        );
        assert!(big.try_grow(u64::MAX).is_err());
        // Exactly u64::MAX fits.
        big.try_grow(1).unwrap();
        assert_eq!(ledger.in_use(r), u64::MAX);
        assert!(ledger.try_reserve(r, 1).is_err());
        let nothing = ledger.try_reserve(r, 0).unwrap().commit();
        assert_eq!(nothing.amount(), 0);
        drop(big);
        assert_eq!(ledger.in_use(r), 0);

        // A finite limit near the top: the sum overflows before it passes.
        let ledger = QuotaLedger::new(TenantQuota::unlimited().with_streams(u64::MAX - 1));
        let _held = ledger.try_reserve(Resource::Streams, u64::MAX - 2).unwrap();
        let e = ledger.try_reserve(Resource::Streams, u64::MAX).unwrap_err();
        assert_eq!(
            e.to_string(),
            "streams quota exceeded: 18446744073709551615 requested, \
             18446744073709551613 of 18446744073709551614 in use"
        );
    }

    #[test]
    fn unlimited_takes_anything_and_zero_limits_take_nothing() {
        let ledger = QuotaLedger::new(TenantQuota::unlimited());
        assert_eq!(ledger.quota().kernel_fuel(), u64::MAX);
        let held: Vec<_> = Resource::ALL
            .iter()
            .map(|&r| ledger.try_reserve(r, 1 << 62).unwrap())
            .collect();
        assert!(
            ledger
                .snapshot()
                .iter()
                .all(|(_, used, limit)| used == 1 << 62 && limit == u64::MAX)
        );
        drop(held);

        let none = QuotaLedger::new(TenantQuota::unlimited().with_limit(Resource::Modules, 0));
        assert!(none.try_reserve(Resource::Modules, 1).is_err());
        let zero = none.try_reserve(Resource::Modules, 0).unwrap();
        assert_eq!(zero.amount(), 0);
    }

    #[test]
    fn defaults_are_the_documented_values() {
        let q = TenantQuota::default();
        let expected = [
            (Resource::DeviceBytes, 1 << 30),
            (Resource::GuestMemoryBytes, 1 << 30),
            (Resource::Modules, 64),
            (Resource::Functions, 1024),
            (Resource::LaunchesInFlight, 256),
            (Resource::Streams, 4),
        ];
        for (r, limit) in expected {
            assert_eq!(q.limit(r), limit, "{r}");
        }
        assert_eq!(q.kernel_fuel(), 1 << 24);
        let q = q
            .with_modules(1)
            .with_functions(2)
            .with_launches_in_flight(3);
        let q = q.with_guest_memory_bytes(4).with_kernel_fuel(5);
        assert_eq!(
            (
                q.limit(Resource::Modules),
                q.limit(Resource::Functions),
                q.limit(Resource::LaunchesInFlight),
                q.limit(Resource::GuestMemoryBytes),
                q.kernel_fuel()
            ),
            (1, 2, 3, 4, 5)
        );
    }

    #[test]
    fn snapshot_reads_every_counter() {
        let ledger = QuotaLedger::new(TenantQuota::default().with_streams(u64::MAX));
        let _buffer = ledger.try_reserve(Resource::DeviceBytes, 4096).unwrap();
        let _stream = ledger.try_reserve(Resource::Streams, 1).unwrap();
        let s = ledger.snapshot();
        assert_eq!(s.in_use(Resource::DeviceBytes), 4096);
        assert_eq!(s.limit(Resource::Modules), 64);
        assert_eq!(
            s.to_string(),
            "device-buffer bytes 4096/1073741824, guest-memory bytes 0/1073741824, \
             modules 0/64, functions 0/1024, launches in flight 0/256, streams 1/unlimited, \
             kernel compiles in flight 0/1"
        );
    }

    #[test]
    fn racing_threads_never_pass_the_limit() {
        extern crate std;
        use std::thread;

        let limit = 1000;
        let ledger = Arc::new(QuotaLedger::new(
            TenantQuota::unlimited().with_functions(limit),
        ));
        let workers: Vec<_> = (0..8)
            .map(|_| {
                let ledger = Arc::clone(&ledger);
                thread::spawn(move || {
                    let mut held = Vec::new();
                    for round in 0..2000_u64 {
                        match QuotaLedger::try_reserve_owned(&ledger, Resource::Functions, 3) {
                            Ok(r) => held.push(r.commit()),
                            Err(e) => assert!(e.in_use + 3 > limit, "{e}"),
                        }
                        assert!(ledger.in_use(Resource::Functions) <= limit);
                        if round % 3 == 0 {
                            held.pop();
                        }
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        assert_eq!(ledger.in_use(Resource::Functions), 0);
    }
}
