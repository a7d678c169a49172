//! `tensorwasm serve`'s configuration file: where it listens, its limits,
//! and its tenants: each a name, the SHA-256 digest of its bearer token (the
//! token itself is never stored), an optional device, and the settings a
//! `run --tenant` file holds (quota, policy, guest fuel, WASI), as a
//! `[tenant.settings]` table. Unknown keys are errors. The same structure
//! may come as JSON (a file named `*.json`), which is what the Helm chart
//! renders: its templates print integers as TOML floats, but as JSON
//! integers.

use std::{net::SocketAddr, time::Duration};

use serde::Deserialize;
use sha2::{Digest, Sha256};

use tensorwasm_embed::tenant::TenantConfig;

/// The default address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";

/// A served tenant.
#[derive(Clone, Debug)]
pub struct ServedTenant {
    /// Its name (what metrics and logs call it; unique).
    pub name: String,
    /// SHA-256 of its bearer token.
    pub token_sha256: [u8; 32],
    /// The device it runs on; `None`: placed by the server.
    pub device: Option<u32>,
    /// Its quota, policy, guest fuel and WASI.
    pub settings: TenantConfig,
}

/// The whole configuration.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// Where to listen (`--listen` overrides it).
    pub listen: SocketAddr,
    /// The largest module a tenant may upload, in bytes.
    pub module_bytes: usize,
    /// The longest a request may take before it is answered 504 (a call
    /// still running then is stopped and its instance ended).
    pub request_timeout: Duration,
    /// Calls one tenant may have in flight; more are answered 429.
    pub calls_in_flight: usize,
    /// Modules one tenant may keep uploaded.
    pub modules: usize,
    /// Instances one tenant may keep.
    pub instances: usize,
    /// The most bytes one guest memory may reserve.
    pub memory_limit: usize,
    /// The tenants.
    pub tenants: Vec<ServedTenant>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    listen: Option<String>,
    module_bytes: Option<usize>,
    request_timeout_ms: Option<u64>,
    calls_in_flight: Option<usize>,
    modules: Option<usize>,
    instances: Option<usize>,
    memory_limit: Option<usize>,
    #[serde(default)]
    tenant: Vec<TenantEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TenantEntry {
    name: String,
    token_sha256: String,
    device: Option<u32>,
    settings: Option<toml::Table>,
}

/// The SHA-256 digest of `token`, as the configuration file holds it (hex).
pub fn token_digest(token: &str) -> String {
    Sha256::digest(token.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn parse_digest(name: &str, hex: &str) -> Result<[u8; 32], String> {
    let bad = || format!("tenant `{name}`: token_sha256 must be 64 hex digits");
    if hex.len() != 64 || !hex.is_ascii() {
        return Err(bad());
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
    }
    Ok(out)
}

impl ServeConfig {
    /// Parses a configuration file's text: JSON when `path` ends in
    /// `.json`, TOML otherwise.
    pub fn from_file_text(path: &std::path::Path, text: &str) -> Result<ServeConfig, String> {
        if path.extension().is_some_and(|e| e == "json") {
            Self::from_json(text)
        } else {
            Self::from_toml(text)
        }
    }

    /// Parses a TOML configuration.
    pub fn from_toml(text: &str) -> Result<ServeConfig, String> {
        Self::from_parsed(toml::from_str(text).map_err(|e| e.to_string())?)
    }

    /// Parses the same configuration written as JSON.
    pub fn from_json(text: &str) -> Result<ServeConfig, String> {
        Self::from_parsed(serde_json::from_str(text).map_err(|e| e.to_string())?)
    }

    fn from_parsed(file: File) -> Result<ServeConfig, String> {
        let listen = file.listen.as_deref().unwrap_or(DEFAULT_LISTEN);
        let listen = listen
            .parse()
            .map_err(|e| format!("listen = {listen:?}: {e}"))?;
        let mut tenants: Vec<ServedTenant> = Vec::new();
        for t in file.tenant {
            if t.name.is_empty() || tenants.iter().any(|o| o.name == t.name) {
                return Err(format!("tenant name {:?} is empty or repeated", t.name));
            }
            let token_sha256 = parse_digest(&t.name, &t.token_sha256)?;
            if tenants.iter().any(|o| o.token_sha256 == token_sha256) {
                return Err(format!("tenant `{}` shares a token with another", t.name));
            }
            let settings = t.settings.unwrap_or_default();
            let text = toml::to_string(&settings).map_err(|e| e.to_string())?;
            let mut settings =
                TenantConfig::from_toml(&text).map_err(|e| format!("tenant `{}`: {e}", t.name))?;
            settings.name.clone_from(&t.name);
            tenants.push(ServedTenant {
                name: t.name,
                token_sha256,
                device: t.device,
                settings,
            });
        }
        let positive = |what: &str, v: Option<usize>, default: usize| match v {
            Some(0) => Err(format!("{what} must be positive")),
            Some(v) => Ok(v),
            None => Ok(default),
        };
        Ok(ServeConfig {
            listen,
            module_bytes: positive("module_bytes", file.module_bytes, 16 << 20)?,
            request_timeout: Duration::from_millis(positive(
                "request_timeout_ms",
                file.request_timeout_ms.map(|v| v as usize),
                30_000,
            )? as u64),
            calls_in_flight: positive("calls_in_flight", file.calls_in_flight, 8)?,
            modules: positive("modules", file.modules, 16)?,
            instances: positive("instances", file.instances, 16)?,
            memory_limit: positive("memory_limit", file.memory_limit, 256 << 20)?,
            tenants,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first tenant's device-buffer quota.
    fn first_device_bytes(c: &ServeConfig) -> u64 {
        c.tenants[0]
            .settings
            .quota
            .limit(tensorwasm_core::quota::Resource::DeviceBytes)
    }

    #[test]
    fn a_config_with_two_tenants() {
        let a = token_digest("secret-a");
        let b = token_digest("secret-b");
        let c = ServeConfig::from_toml(&format!(
            "listen = \"127.0.0.1:0\"\nrequest_timeout_ms = 500\n\
             [[tenant]]\nname = \"a\"\ntoken_sha256 = \"{a}\"\ndevice = 1\n\
             [tenant.settings.quota]\ndevice_bytes = 4096\n\
             [[tenant]]\nname = \"b\"\ntoken_sha256 = \"{b}\"\n\
             [tenant.settings]\ntrusted = true\n"
        ))
        .unwrap();
        assert_eq!(c.listen.port(), 0);
        assert_eq!(c.request_timeout, Duration::from_millis(500));
        assert_eq!(c.tenants.len(), 2);
        assert_eq!(c.tenants[0].device, Some(1));
        assert_eq!(first_device_bytes(&c), 4096);
        assert_eq!(c.tenants[0].settings.name, "a");
        assert!(c.tenants[1].settings.policy.raw_modules);
        assert_eq!(a.len(), 64);
    }

    #[test]
    fn json_reads_as_toml_does() {
        let a = token_digest("secret-a");
        let json = format!(
            r#"{{"listen": "127.0.0.1:0", "memory_limit": 268435456,
                "tenant": [{{"name": "a", "token_sha256": "{a}", "device": 1,
                  "settings": {{"guest_fuel": 10000000000,
                                "quota": {{"device_bytes": 4096}}}}}}]}}"#
        );
        let c = ServeConfig::from_file_text(std::path::Path::new("serve.json"), &json).unwrap();
        assert_eq!(c.memory_limit, 268435456);
        assert_eq!(c.tenants[0].device, Some(1));
        assert_eq!(first_device_bytes(&c), 4096);
        // Unknown keys are errors here too, and a TOML file is not JSON.
        assert!(ServeConfig::from_json(r#"{"lisen": "x"}"#).is_err());
        assert!(
            ServeConfig::from_file_text(std::path::Path::new("serve.json"), "listen = \"x\"")
                .is_err()
        );
    }

    #[test]
    fn bad_configs_are_refused() {
        let a = token_digest("x");
        for bad in [
            "lisen = \"x\"\n".to_string(),
            "listen = \"nowhere\"\n".to_string(),
            "calls_in_flight = 0\n".to_string(),
            "[[tenant]]\nname = \"a\"\ntoken_sha256 = \"abc\"\n".to_string(),
            format!(
                "[[tenant]]\nname = \"a\"\ntoken_sha256 = \"{a}\"\n[[tenant]]\nname = \"b\"\ntoken_sha256 = \"{a}\"\n"
            ),
            format!(
                "[[tenant]]\nname = \"a\"\ntoken_sha256 = \"{a}\"\n[[tenant]]\nname = \"a\"\ntoken_sha256 = \"{}\"\n",
                token_digest("y")
            ),
            format!(
                "[[tenant]]\nname = \"a\"\ntoken_sha256 = \"{a}\"\n[tenant.settings.quota]\ndevice_byte = 1\n"
            ),
        ] {
            assert!(
                ServeConfig::from_toml(&bad).is_err(),
                "{bad:?} was accepted"
            );
        }
    }
}
