//! PTX to machine code, and the on-disk cache of the result. Loading PTX
//! makes the driver compile it (10-15 ms for a Wasm kernel on an H100), in
//! every process. [`CudaDriver::load_ptx`](crate::CudaDriver) instead
//! compiles PTX with the driver's linker (`cuLinkCreate`, `cuLinkAddData`,
//! `cuLinkComplete`: the same compiler, its output a cubin we can keep),
//! stores the cubin in a [`JitCache`] directory, and loads a later
//! request for the same PTX on the same device and driver from there.
//!
//! An entry is `<key>.cubin`: the key is the SHA-256 of the entry format,
//! the device's compute capability, the driver's version and the PTX text;
//! the file holds a magic, the SHA-256 of the cubin, then the cubin. An
//! entry that does not match its checksum or is not a well-formed image
//! is removed and the PTX compiled again. Entries are written to a
//! temporary file and renamed, so a reader never sees half of one.
//!
//! The cubin is machine code the driver runs as it is: the cache directory
//! must be writable only by the user who runs TensorWasm (the sandbox's
//! guarantees hold only for code TensorWasm compiled itself). The cache
//! creates its directory with mode 0700 and is not used when the directory
//! is open to its group or others (Unix).

use std::ffi::{CStr, c_void};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest, Sha256};
use tensorwasm_core::image::check_module_image;

use crate::{context::Context, error::CudaError, result, sys};

/// The environment variable that sets the cache directory; `off` (or an
/// empty value) turns the cache off.
pub const JIT_CACHE_ENV: &str = "TENSORWASM_JIT_CACHE";

/// The most bytes of entries a cache directory keeps by default
/// ([`JitCache::with_max_bytes`]).
pub const MAX_CACHE_BYTES: u64 = 256 << 20;

/// The first bytes of an entry (the format's version is its last byte).
const MAGIC: &[u8; 8] = b"TWJITC\x00\x01";

/// An on-disk cache of compiled PTX (module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JitCache {
    dir: PathBuf,
    max_bytes: u64,
}

impl JitCache {
    /// A cache in `dir` (created on first use) of at most 256 MiB
    /// (`MAX_CACHE_BYTES`).
    pub fn at(dir: impl Into<PathBuf>) -> JitCache {
        JitCache {
            dir: dir.into(),
            max_bytes: MAX_CACHE_BYTES,
        }
    }

    /// This cache, keeping at most `bytes` of entries.
    pub fn with_max_bytes(mut self, bytes: u64) -> JitCache {
        self.max_bytes = bytes;
        self
    }

    /// The cache the environment asks for: [`JIT_CACHE_ENV`]'s directory,
    /// none when it is `off` or empty, else `$XDG_CACHE_HOME/tensorwasm/jit`
    /// or `$HOME/.cache/tensorwasm/jit` (none without either).
    pub fn from_env() -> Option<JitCache> {
        match std::env::var_os(JIT_CACHE_ENV) {
            Some(v) if v.is_empty() || v == "off" => None,
            Some(v) => Some(JitCache::at(v)),
            None => std::env::var_os("XDG_CACHE_HOME")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))
                .map(|base| JitCache::at(base.join("tensorwasm").join("jit"))),
        }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The entry's file for `ptx` compiled on a device of compute
    /// capability `cc` under driver version `driver`.
    fn path(&self, ptx: &[u8], cc: (u32, u32), driver: (u32, u32)) -> PathBuf {
        let mut h = Sha256::new();
        h.update(MAGIC);
        for n in [cc.0, cc.1, driver.0, driver.1] {
            h.update(n.to_le_bytes());
        }
        h.update(ptx);
        self.dir.join(format!("{:x}.cubin", h.finalize()))
    }

    /// The cubin stored at `path`, if the entry is whole; a damaged entry
    /// is removed.
    fn get(&self, path: &Path) -> Option<Vec<u8>> {
        if !self.private() {
            return None;
        }
        let bytes = fs::read(path).ok()?;
        let whole = bytes.len() > MAGIC.len() + 32
            && bytes.starts_with(MAGIC)
            && bytes[MAGIC.len()..MAGIC.len() + 32]
                == Sha256::digest(&bytes[MAGIC.len() + 32..])[..]
            && check_module_image(&bytes[MAGIC.len() + 32..]).is_ok();
        if !whole {
            let _ = fs::remove_file(path);
            return None;
        }
        Some(bytes[MAGIC.len() + 32..].to_vec())
    }

    /// Stores `cubin` at `path` (best effort: a cache that cannot be
    /// written is a cache that misses).
    fn put(&self, path: &Path, cubin: &[u8]) {
        if create_private_dir(&self.dir).is_err() || !self.private() {
            return;
        }
        static SERIAL: AtomicU64 = AtomicU64::new(0);
        let temp = path.with_extension(format!(
            "tmp.{}.{}",
            std::process::id(),
            SERIAL.fetch_add(1, Ordering::Relaxed)
        ));
        let written = fs::File::create(&temp).and_then(|mut f| {
            f.write_all(MAGIC)?;
            f.write_all(&Sha256::digest(cubin))?;
            f.write_all(cubin)?;
            f.sync_all()
        });
        if written.and_then(|()| fs::rename(&temp, path)).is_err() {
            let _ = fs::remove_file(&temp);
        }
        self.trim();
    }

    /// Keeps the directory's entries within its size (`max_bytes`): past it,
    /// removes the least recently written until they take at most three
    /// quarters of it (every new kernel a guest makes is an entry, so the
    /// cache would otherwise grow without bound).
    fn trim(&self) {
        let Ok(dir) = fs::read_dir(&self.dir) else {
            return;
        };
        let mut entries: Vec<(std::time::SystemTime, u64, PathBuf)> = dir
            .filter_map(|e| {
                let e = e.ok()?;
                let path = e.path();
                let m = e.metadata().ok()?;
                if path.extension()? != "cubin" || !m.is_file() {
                    return None;
                }
                Some((m.modified().ok()?, m.len(), path))
            })
            .collect();
        let mut total: u64 = entries.iter().map(|e| e.1).sum();
        if total <= self.max_bytes {
            return;
        }
        entries.sort_unstable_by_key(|e| e.0);
        for (_, len, path) in entries {
            if total <= self.max_bytes / 4 * 3 {
                break;
            }
            if fs::remove_file(&path).is_ok() {
                total = total.saturating_sub(len);
            }
        }
    }

    /// Whether the directory is open to its owner only (always, off Unix).
    fn private(&self) -> bool {
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            fs::metadata(&self.dir).is_ok_and(|m| m.is_dir() && m.permissions().mode() & 0o077 == 0)
        }
        #[cfg(not(unix))]
        {
            self.dir.is_dir()
        }
    }
}

/// Creates `dir` and its parents, `dir` itself with mode 0700 on Unix.
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        fs::create_dir_all(parent)?;
    }
    let mut builder = fs::DirBuilder::new();
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    match builder.create(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        other => other,
    }
}

/// The cubin of `ptx` for `ctx`'s device: from `cache` when it holds it,
/// else compiled by the driver's linker (and stored in `cache`).
pub(crate) fn cubin(
    ctx: &Context,
    cache: Option<&JitCache>,
    ptx: &CStr,
) -> Result<Vec<u8>, CudaError> {
    let key = match (cache, ctx.info.compute_capability, ctx.info.driver_version) {
        (Some(cache), Some(cc), Some(driver)) => {
            Some((cache, cache.path(ptx.to_bytes(), cc, driver)))
        }
        _ => None,
    };
    if let Some((cache, path)) = &key
        && let Some(cubin) = cache.get(path)
    {
        return Ok(cubin);
    }
    let cubin = link(ctx, ptx)?;
    if let Some((cache, path)) = &key {
        cache.put(path, &cubin);
    }
    Ok(cubin)
}

/// Compiles `ptx` with the driver's linker for the current device; the
/// error of rejected PTX carries the JIT's log.
fn link(ctx: &Context, ptx: &CStr) -> Result<Vec<u8>, CudaError> {
    const LOG: usize = 16 * 1024;
    let mut error_log = vec![0u8; LOG];
    let mut options = [
        sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER,
        sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
    ];
    // Size options are passed by value in the pointer slot, as cuda.h says.
    let mut values: [*mut c_void; 2] = [error_log.as_mut_ptr().cast(), LOG as *mut c_void];
    ctx.bind()?;
    // SAFETY: two options with their values; the log buffer outlives the
    // state (destroyed below, before `error_log` is dropped).
    let state = unsafe { result::cuLinkCreate_v2(&ctx.lib, &mut options, &mut values) }?;
    // SAFETY: `state` is live until the destroy below; `ptx` and the name
    // are C strings that live across the calls; the cubin `cuLinkComplete`
    // gives is owned by `state` and copied out before it is destroyed.
    let linked = unsafe {
        result::cuLinkAddData_v2(&ctx.lib, state, ptx, c"kernel.ptx")
            .and_then(|()| result::cuLinkComplete(&ctx.lib, state))
            .map(|(image, size)| std::slice::from_raw_parts(image.cast::<u8>(), size).to_vec())
    };
    // SAFETY: created above, destroyed once.
    let _ = unsafe { result::cuLinkDestroy(&ctx.lib, state) };
    linked.map_err(|e| with_log(e, &error_log))
}

/// `e` with the JIT's log (NUL-terminated in `log`), when it has one.
fn with_log(e: CudaError, log: &[u8]) -> CudaError {
    let text = result::log_text(log);
    match e {
        CudaError::Driver {
            call,
            code,
            name,
            description,
            log: None,
        } if !text.is_empty() => CudaError::Driver {
            call,
            code,
            name,
            description,
            log: Some(text),
        },
        e => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("tensorwasm-jit-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    /// A minimal well-formed ELF64 image (header only) for the cache's
    /// checks; the driver never sees it.
    fn fake_cubin() -> Vec<u8> {
        let mut elf = vec![0u8; 64];
        elf[..4].copy_from_slice(b"\x7fELF");
        elf[4] = 2; // 64-bit
        elf[5] = 1; // little endian
        elf[6] = 1; // version
        elf[52..54].copy_from_slice(&64u16.to_le_bytes()); // e_ehsize
        elf
    }

    #[test]
    fn an_entry_round_trips_and_keys_differ_by_ptx_device_and_driver() {
        let cache = JitCache::at(temp_dir("round"));
        let cubin = fake_cubin();
        assert!(
            check_module_image(&cubin).is_ok(),
            "the test's image is well formed"
        );
        let path = cache.path(b"ptx a", (9, 0), (13, 0));
        assert_eq!(cache.get(&path), None, "an empty cache misses");
        cache.put(&path, &cubin);
        assert_eq!(cache.get(&path), Some(cubin));
        for other in [
            cache.path(b"ptx b", (9, 0), (13, 0)),
            cache.path(b"ptx a", (8, 0), (13, 0)),
            cache.path(b"ptx a", (9, 0), (12, 8)),
        ] {
            assert_ne!(other, path);
            assert_eq!(cache.get(&other), None);
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(cache.dir()).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o700, "the directory is the user's alone");
        }
        let _ = fs::remove_dir_all(cache.dir());
    }

    #[test]
    fn a_damaged_entry_is_removed_and_misses() {
        let cache = JitCache::at(temp_dir("damaged"));
        let path = cache.path(b"ptx", (9, 0), (13, 0));
        let cubin = fake_cubin();
        cache.put(&path, &cubin);
        let mut bytes = fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        fs::write(&path, &bytes).unwrap();
        assert_eq!(cache.get(&path), None, "a flipped bit fails the checksum");
        assert!(!path.exists(), "and the entry is gone");
        // A truncated entry, and one whose checksum matches a bad image.
        cache.put(&path, &cubin);
        let bytes = fs::read(&path).unwrap();
        fs::write(&path, &bytes[..bytes.len() - 10]).unwrap();
        assert_eq!(cache.get(&path), None);
        let junk = b"not an ELF image at all".to_vec();
        let mut forged = MAGIC.to_vec();
        forged.extend_from_slice(&Sha256::digest(&junk));
        forged.extend_from_slice(&junk);
        fs::write(&path, forged).unwrap();
        assert_eq!(cache.get(&path), None, "a malformed image is refused");
        let _ = fs::remove_dir_all(cache.dir());
    }

    #[test]
    fn the_cache_keeps_within_its_size_by_removing_the_oldest() {
        let cache = JitCache::at(temp_dir("trim")).with_max_bytes(256 << 10);
        let big = {
            let mut elf = fake_cubin();
            elf.resize(48 << 10, 0);
            elf
        };
        let paths: Vec<PathBuf> = (0..7u32)
            .map(|i| cache.path(&i.to_le_bytes(), (9, 0), (13, 0)))
            .collect();
        for (i, path) in paths.iter().enumerate() {
            cache.put(path, &big);
            // Distinct write times, oldest first.
            let when =
                std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(i as u64 + 1);
            fs::File::options()
                .write(true)
                .open(path)
                .and_then(|f| f.set_modified(when))
                .unwrap();
        }
        // 6 entries (288 KiB and headers) were past the 256 KiB limit after
        // the 6th: the oldest went until at most 192 KiB were left; then
        // the 7th came.
        let left: Vec<bool> = paths.iter().map(|p| p.exists()).collect();
        let total: u64 = paths
            .iter()
            .filter_map(|p| fs::metadata(p).ok())
            .map(|m| m.len())
            .sum();
        assert!(total <= 256 << 10, "{total} bytes kept");
        assert!(
            !left[0] && left[6],
            "the oldest went, the newest stayed: {left:?}"
        );
        let _ = fs::remove_dir_all(cache.dir());
    }

    #[cfg(unix)]
    #[test]
    fn a_directory_open_to_others_is_not_used() {
        use std::os::unix::fs::PermissionsExt;
        let cache = JitCache::at(temp_dir("open"));
        let path = cache.path(b"ptx", (9, 0), (13, 0));
        cache.put(&path, &fake_cubin());
        assert!(cache.get(&path).is_some());
        fs::set_permissions(cache.dir(), fs::Permissions::from_mode(0o777)).unwrap();
        assert_eq!(cache.get(&path), None, "read from a shared directory");
        let _ = fs::remove_file(&path);
        cache.put(&path, &fake_cubin());
        assert!(!path.exists(), "written to a shared directory");
        let _ = fs::remove_dir_all(cache.dir());
    }
}
