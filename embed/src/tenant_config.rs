//! What a tenant is given: [`TenantConfig`] (who it is, its quota, policy,
//! guest fuel and WASI capabilities; what `tensorwasm run --tenant FILE`
//! reads from TOML) and [`TenantLimiter`], which holds its store's linear
//! memory to that quota. It sits below both `runtime` (which makes a store
//! from a config) and `tenant` (which owns that store), and uses neither.

use std::{collections::BTreeMap, fmt, sync::Arc};

use serde::Deserialize;
use tensorwasm_core::quota::{OwnedCharge, QuotaLedger, Resource, TenantQuota};
use wasmtime::ResourceLimiter;

use crate::{
    wasi::{DirAccess, OutputMode, PreopenDir, WasiConfig},
    wasi_cuda::TenantPolicy,
};

/// Who a tenant is and what it may use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenantConfig {
    /// A name for logs and errors.
    pub name: String,
    /// Limits on what it may hold at once.
    pub quota: TenantQuota,
    /// What it may load and run.
    pub policy: TenantPolicy,
    /// Wasm fuel for the guest's own code (one unit per Wasm operator,
    /// roughly): the guest traps once it is spent. `None`: no bound.
    pub guest_fuel: Option<u64>,
    /// What its WASI may reach: arguments, environment, directories, stdio
    /// and how many bytes it may write.
    pub wasi: WasiConfig,
}

impl TenantConfig {
    /// An untrusted tenant: default quota ([`TenantQuota::default`]),
    /// sandboxed kernels only, 10^10 units of guest fuel (some seconds of
    /// Wasm; waiting for the GPU spends none), and WASI with no
    /// directories, no environment and captured, capped output
    /// ([`WasiConfig::untrusted`]).
    pub fn untrusted(name: impl Into<String>) -> Self {
        TenantConfig {
            name: name.into(),
            quota: TenantQuota::default(),
            policy: TenantPolicy::UNTRUSTED,
            guest_fuel: Some(DEFAULT_GUEST_FUEL),
            wasi: WasiConfig::untrusted(),
        }
    }

    /// A tenant the host trusts as itself: no quota, raw PTX allowed, no
    /// fuel bound, the host's stdio ([`WasiConfig::inherit`]). What
    /// `tensorwasm run` uses without `--tenant`.
    pub fn trusted(name: impl Into<String>) -> Self {
        TenantConfig {
            name: name.into(),
            quota: TenantQuota::unlimited(),
            policy: TenantPolicy::TRUSTED,
            guest_fuel: None,
            wasi: WasiConfig::inherit(),
        }
    }

    /// Reads a tenant from TOML (docs/tenants.md has the format): every
    /// key is optional and starts from [`TenantConfig::untrusted`] (or
    /// [`TenantConfig::trusted`] with `trusted = true`); unknown keys are
    /// errors, so a misspelt limit is never silently ignored.
    pub fn from_toml(text: &str) -> Result<TenantConfig, ConfigError> {
        let file: ConfigFile = toml::from_str(text).map_err(|e| {
            // One line: where, and what (toml's own text adds a snippet).
            let at = e.span().map(|span| {
                let before = &text[..span.start.min(text.len())];
                let line = before.matches('\n').count() + 1;
                let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
                format!("line {line}, column {column}: ")
            });
            ConfigError(format!("{}{}", at.unwrap_or_default(), e.message()))
        })?;
        let mut config = if file.trusted.unwrap_or(false) {
            TenantConfig::trusted(file.name.unwrap_or_else(|| "tenant".into()))
        } else {
            TenantConfig::untrusted(file.name.unwrap_or_else(|| "tenant".into()))
        };
        if let Some(q) = file.quota {
            let set = |quota: TenantQuota, r: Resource, v: Option<u64>| match v {
                Some(v) => quota.with_limit(r, v),
                None => quota,
            };
            let mut quota = config.quota;
            quota = set(quota, Resource::DeviceBytes, q.device_bytes);
            quota = set(quota, Resource::GuestMemoryBytes, q.guest_memory_bytes);
            quota = set(quota, Resource::Modules, q.modules);
            quota = set(quota, Resource::Functions, q.functions);
            quota = set(quota, Resource::LaunchesInFlight, q.launches_in_flight);
            quota = set(quota, Resource::Streams, q.streams);
            quota = set(quota, Resource::Compiles, q.compiles);
            let ms = |key: &str, v: u64| {
                v.checked_mul(1_000_000)
                    .filter(|&ns| ns > 0)
                    .ok_or_else(|| ConfigError(format!("quota.{key} must be 1 ..= 2^64/10^6 ms")))
            };
            if let Some(v) = q.kernel_operators {
                quota = quota.with_kernel_operators(v);
            }
            if let Some(v) = q.kernel_branches {
                quota = quota.with_kernel_branches(v);
            }
            if let Some(v) = q.compile_time_ms {
                quota = quota.with_compile_time_ns(ms("compile_time_ms", v)?);
            }
            if let Some(v) = q.compile_budget_ms {
                quota = quota.with_compile_budget_ns(ms("compile_budget_ms", v)?);
            }
            if let Some(v) = q.launch_time_ms {
                quota = quota.with_launch_time_ns(ms("launch_time_ms", v)?);
            }
            if let Some(v) = q.launch_share_percent {
                if !(1..=100).contains(&v) {
                    return Err(ConfigError(
                        "quota.launch_share_percent must be 1 ..= 100".into(),
                    ));
                }
                quota = quota.with_launch_share_percent(v);
            }
            if let Some(v) = q.tensor_work {
                quota = quota.with_tensor_work(v);
            }
            if let Some(fuel) = q.kernel_fuel {
                if fuel == 0 {
                    return Err(ConfigError("quota.kernel_fuel must be at least 1".into()));
                }
                quota = quota.with_kernel_fuel(fuel);
            }
            config.quota = quota;
        }
        if let Some(p) = file.policy {
            config.policy.raw_modules = p.raw_modules.unwrap_or(config.policy.raw_modules);
            config.policy.wasm_kernels = p.wasm_kernels.unwrap_or(config.policy.wasm_kernels);
            config.policy.builtins = p.builtins.unwrap_or(config.policy.builtins);
        }
        if let Some(w) = file.wasi {
            let wasi = &mut config.wasi;
            wasi.stdout = w.stdout.unwrap_or(wasi.stdout);
            wasi.stderr = w.stderr.unwrap_or(wasi.stderr);
            wasi.stdin = w.stdin.unwrap_or(wasi.stdin);
            match w.output_bytes {
                Some(Limit::Bytes(n)) => wasi.output_bytes = Some(n),
                Some(Limit::Unlimited(s)) if s == "unlimited" => wasi.output_bytes = None,
                Some(Limit::Unlimited(s)) => {
                    return Err(ConfigError(format!(
                        "wasi.output_bytes `{s}` is neither a number nor \"unlimited\""
                    )));
                }
                None => {}
            }
            if let Some(env) = w.env {
                wasi.env = env.into_iter().collect();
            }
            for d in w.dirs.unwrap_or_default() {
                if d.guest.is_empty() {
                    return Err(ConfigError(format!(
                        "wasi.dirs: `{}` needs a non-empty guest path",
                        d.host
                    )));
                }
                wasi.dirs.push(PreopenDir {
                    host: d.host.into(),
                    guest: d.guest,
                    access: d.access.unwrap_or(DirAccess::ReadOnly),
                });
            }
        }
        match file.guest_fuel {
            Some(GuestFuel::Unlimited(s)) if s == "unlimited" => config.guest_fuel = None,
            Some(GuestFuel::Unlimited(s)) => {
                return Err(ConfigError(format!(
                    "guest_fuel `{s}` is neither a number nor \"unlimited\""
                )));
            }
            Some(GuestFuel::Units(0)) => {
                return Err(ConfigError("guest_fuel must be at least 1".into()));
            }
            Some(GuestFuel::Units(n)) => config.guest_fuel = Some(n),
            None => {}
        }
        Ok(config)
    }
}

/// Guest fuel of an untrusted tenant by default.
pub const DEFAULT_GUEST_FUEL: u64 = 10_000_000_000;

/// A tenant config file that could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "tenant config: {}", self.0)
    }
}

impl std::error::Error for ConfigError {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    name: Option<String>,
    trusted: Option<bool>,
    guest_fuel: Option<GuestFuel>,
    quota: Option<QuotaSection>,
    policy: Option<PolicySection>,
    wasi: Option<WasiSection>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WasiSection {
    stdout: Option<OutputMode>,
    stderr: Option<OutputMode>,
    stdin: Option<bool>,
    output_bytes: Option<Limit>,
    env: Option<BTreeMap<String, String>>,
    dirs: Option<Vec<DirSection>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DirSection {
    host: String,
    guest: String,
    access: Option<DirAccess>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Limit {
    Bytes(u64),
    Unlimited(String),
}

#[derive(Deserialize)]
#[serde(untagged)]
enum GuestFuel {
    Units(u64),
    Unlimited(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct QuotaSection {
    device_bytes: Option<u64>,
    guest_memory_bytes: Option<u64>,
    modules: Option<u64>,
    functions: Option<u64>,
    launches_in_flight: Option<u64>,
    streams: Option<u64>,
    compiles: Option<u64>,
    kernel_fuel: Option<u64>,
    kernel_operators: Option<u64>,
    kernel_branches: Option<u64>,
    compile_time_ms: Option<u64>,
    compile_budget_ms: Option<u64>,
    launch_time_ms: Option<u64>,
    launch_share_percent: Option<u64>,
    tensor_work: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicySection {
    raw_modules: Option<bool>,
    wasm_kernels: Option<bool>,
    builtins: Option<bool>,
}

/// wasmtime's view of a tenant's quota: linear memory grows only while the
/// tenant's guest-memory quota has room (the growth fails, as `memory.grow`
/// returning -1, otherwise), and tables stay bounded.
pub struct TenantLimiter {
    ledger: Arc<QuotaLedger>,
    memory: Option<OwnedCharge>,
}

/// Table elements one instance may have.
const MAX_TABLE_ELEMENTS: usize = 1 << 20;

impl TenantLimiter {
    /// A limiter charging `ledger`.
    pub fn new(ledger: Arc<QuotaLedger>) -> Self {
        TenantLimiter {
            ledger,
            memory: None,
        }
    }
}

impl ResourceLimiter for TenantLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let extra = desired.saturating_sub(current) as u64;
        let granted = match &mut self.memory {
            Some(charge) => charge.try_grow(extra).is_ok(),
            None => match QuotaLedger::try_reserve_owned(
                &self.ledger,
                Resource::GuestMemoryBytes,
                extra,
            ) {
                Ok(r) => {
                    self.memory = Some(r.commit());
                    true
                }
                Err(_) => false,
            },
        };
        Ok(granted)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_file_starts_from_the_untrusted_defaults() {
        let c = TenantConfig::from_toml("name = \"a\"\n[quota]\ndevice_bytes = 4096\n").unwrap();
        assert_eq!(c.name, "a");
        assert_eq!(c.quota.limit(Resource::DeviceBytes), 4096);
        assert_eq!(
            c.quota.limit(Resource::Modules),
            TenantQuota::default().limit(Resource::Modules)
        );
        assert_eq!(c.policy, TenantPolicy::UNTRUSTED);
        assert_eq!(c.guest_fuel, Some(DEFAULT_GUEST_FUEL));
    }

    #[test]
    fn trusted_tenants_and_every_key() {
        let c = TenantConfig::from_toml(
            "trusted = true\nguest_fuel = \"unlimited\"\n[policy]\nwasm_kernels = false\n\
             [quota]\nguest_memory_bytes = 65536\nmodules = 1\nfunctions = 2\n\
             launches_in_flight = 3\nstreams = 1\nkernel_fuel = 99\ncompiles = 2\n\
             kernel_operators = 1000\nkernel_branches = 10\ncompile_time_ms = 5\n\
             compile_budget_ms = 50\nlaunch_time_ms = 7\ntensor_work = 12345\n\
             launch_share_percent = 25\n",
        )
        .unwrap();
        assert_eq!(c.quota.limit(Resource::Compiles), 2);
        assert_eq!(c.quota.kernel_operators(), 1000);
        assert_eq!(c.quota.kernel_branches(), 10);
        assert_eq!(c.quota.compile_time_ns(), 5_000_000);
        assert_eq!(c.quota.compile_budget_ns(), 50_000_000);
        assert_eq!(c.quota.launch_time_ns(), 7_000_000);
        assert_eq!(c.quota.tensor_work(), 12345);
        assert_eq!(c.quota.launch_share_percent(), 25);
        assert!(
            TenantConfig::from_toml("[quota]\nlaunch_time_ms = 0\n")
                .unwrap_err()
                .0
                .contains("launch_time_ms")
        );
        assert!(c.policy.raw_modules && !c.policy.wasm_kernels && c.policy.builtins);
        assert_eq!(c.guest_fuel, None);
        assert_eq!(c.quota.limit(Resource::GuestMemoryBytes), 65536);
        assert_eq!(c.quota.limit(Resource::DeviceBytes), u64::MAX);
        assert_eq!(c.quota.limit(Resource::LaunchesInFlight), 3);
        assert_eq!(c.quota.kernel_fuel(), 99);
    }

    #[test]
    fn wasi_capabilities_come_from_the_wasi_section() {
        let c = TenantConfig::from_toml("name = \"a\"\n").unwrap();
        assert_eq!(c.wasi, WasiConfig::untrusted());
        assert!(c.wasi.dirs.is_empty() && c.wasi.env.is_empty() && !c.wasi.stdin);
        assert_eq!(c.wasi.stdout, OutputMode::Capture);
        assert_eq!(c.wasi.output_bytes, Some(crate::wasi::DEFAULT_OUTPUT_BYTES));
        let c = TenantConfig::from_toml(
            "[wasi]\nstdout = \"inherit\"\noutput_bytes = 4096\nstdin = true\n\
             env = { MODEL = \"small\", LANG = \"C\" }\n\
             [[wasi.dirs]]\nhost = \"/srv/in\"\nguest = \"/in\"\n\
             [[wasi.dirs]]\nhost = \"/srv/out\"\nguest = \"/out\"\naccess = \"read-write\"\n",
        )
        .unwrap();
        assert_eq!(c.wasi.stdout, OutputMode::Inherit);
        assert_eq!(c.wasi.stderr, OutputMode::Capture);
        assert_eq!(c.wasi.output_bytes, Some(4096));
        assert!(c.wasi.stdin);
        assert_eq!(
            c.wasi.env,
            [
                ("LANG".into(), "C".into()),
                ("MODEL".into(), "small".into())
            ]
        );
        assert_eq!(c.wasi.dirs[0].access, DirAccess::ReadOnly);
        assert_eq!(c.wasi.dirs[1].access, DirAccess::ReadWrite);
        assert_eq!(c.wasi.dirs[1].guest, "/out");
        let c = TenantConfig::from_toml("trusted = true\n").unwrap();
        assert_eq!(c.wasi, WasiConfig::inherit());
        let c = TenantConfig::from_toml("[wasi]\noutput_bytes = \"unlimited\"\n").unwrap();
        assert_eq!(c.wasi.output_bytes, None);
    }

    #[test]
    fn misspelt_keys_and_bad_values_are_errors() {
        for bad in [
            "[quota]\ndevice_byte = 1\n",
            "[policy]\nraw_ptx = true\n",
            "nmae = \"x\"\n",
            "guest_fuel = 0\n",
            "guest_fuel = \"lots\"\n",
            "[quota]\nkernel_fuel = 0\n",
            "[quota]\nmodules = -1\n",
            "[wasi]\nstdout = \"file\"\n",
            "[wasi]\noutput_bytes = \"lots\"\n",
            "[wasi]\ndirectories = []\n",
            "[[wasi.dirs]]\nhost = \"/a\"\nguest = \"/a\"\naccess = \"rw\"\n",
            "[[wasi.dirs]]\nhost = \"/a\"\n",
            "[[wasi.dirs]]\nhost = \"/a\"\nguest = \"\"\n",
        ] {
            assert!(
                TenantConfig::from_toml(bad).is_err(),
                "{bad:?} was accepted"
            );
        }
    }
}
