//! The record a bench writes: the device it was measured on, the goals
//! its rows are held to, numbers rounded as records keep them, the command
//! line and the time, and the record itself as JSON (`serde_json`) in
//! `$OUT`. What a record holds beyond that is the bench's own.

use std::{
    path::PathBuf,
    time::{SystemTime, UNIX_EPOCH},
};

use serde::{Serialize, Serializer};
use serde_json::{Map, Value, json};
use tensorwasm_core::DeviceInfo;

use super::timing::Repeats;

/// The device a record was measured on, as every record names it.
#[derive(Serialize)]
pub struct DeviceRecord {
    pub name: String,
    pub compute_capability: String,
    pub multiprocessors: u32,
    pub total_memory_bytes: u64,
    pub driver_version: String,
}

impl DeviceRecord {
    pub fn new(info: &DeviceInfo) -> DeviceRecord {
        DeviceRecord {
            name: info.name.clone(),
            compute_capability: info
                .compute_capability
                .map_or_else(|| "unknown".into(), |(a, b)| format!("{a}.{b}")),
            multiprocessors: info.multiprocessor_count,
            total_memory_bytes: info.total_memory,
            driver_version: driver_version(info),
        }
    }
}

/// The device as the benches' first line names it: `NAME (sm_XY)`.
pub fn device_sm(info: &DeviceInfo) -> String {
    let (major, minor) = info.compute_capability.unwrap_or((0, 0));
    format!("{} (sm_{major}{minor})", info.name)
}

/// The driver's CUDA version as `major.minor`, or `unknown`.
pub fn driver_version(info: &DeviceInfo) -> String {
    info.driver_version
        .map_or_else(|| "unknown".to_string(), |(a, b)| format!("{a}.{b}"))
}

/// A goal a row is held to; in a record, `{"target": text, "met": bool}`.
#[derive(Serialize)]
pub struct Target {
    #[serde(rename = "target")]
    pub text: &'static str,
    pub met: bool,
}

/// `x` rounded to `places` decimals, as the records keep their numbers. A
/// NaN or an infinity stays one, and `serde_json` writes it as `null`.
pub fn round(x: f64, places: i32) -> f64 {
    let scale = 10f64.powi(places);
    (x * scale).round() / scale
}

/// Each of `xs` rounded to `places` decimals ([`round`]).
pub fn rounded(xs: &[f64], places: i32) -> Vec<f64> {
    xs.iter().map(|&x| round(x, places)).collect()
}

/// Serializes `(key, value)` pairs as a JSON object in their order (a
/// `serde_json::Map` would sort the keys); for `#[serde(serialize_with)]`.
pub fn ordered_object<K: Serialize, V: Serialize, S: Serializer>(
    pairs: &[(K, V)],
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_map(pairs.iter().map(|(k, v)| (k, v)))
}

/// What the records of the benches that time kernels with events
/// (compute_kernels, rust_kernels) open with: the bench, when, the command
/// line, the device, the seed, and the launches of a sample; the bench adds
/// its ratios and rows.
pub fn kernel_record(
    bench: &str,
    info: &DeviceInfo,
    seed: u64,
    repeats: Repeats,
) -> Map<String, Value> {
    let head = json!({
        "bench": bench,
        "when": utc_timestamp(),
        "command": command_line(),
        "device": info.name,
        "compute_capability": info.compute_capability,
        "driver_version": info.driver_version,
        "seed": seed,
        "launches_per_sample": repeats.launches,
        "samples": repeats.samples,
    });
    match head {
        Value::Object(fields) => fields,
        _ => unreachable!("json! of an object is an object"),
    }
}

/// `record` as the text of its JSON file: indented, one closing newline.
pub fn record_json(record: &impl Serialize) -> Result<String, String> {
    let mut text =
        serde_json::to_string_pretty(record).map_err(|e| format!("the record as JSON: {e}"))?;
    text.push('\n');
    Ok(text)
}

/// Writes `record` to `$OUT/<file>`, or `./<file>` when `OUT` is unset, and
/// says where.
pub fn write_record(file: &str, record: &impl Serialize) -> Result<PathBuf, String> {
    let path = std::env::var_os("OUT")
        .map_or_else(|| PathBuf::from(file), |out| PathBuf::from(out).join(file));
    std::fs::write(&path, record_json(record)?)
        .map_err(|e| format!("writing {}: {e}", path.display()))?;
    Ok(path)
}

/// The command line, quoted where a shell would need it.
pub fn command_line() -> String {
    let plain = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "_-./=:,+@".contains(c))
    };
    std::env::args()
        .map(|a| {
            if plain(&a) {
                a
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Now, as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn utc_timestamp() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}
