//! Builds an OCI image (a tar in OCI layout, for `ctr image import`) whose
//! one layer is a Wasm guest, for `runtimeClassName: tensorwasm` pods:
//!
//!   cargo run -p tensorwasm-shim --example image -- [--rootfs] GUEST.{wasm,wat} NAME:TAG OUT.tar
//!
//! e.g. `examples/hello_gpu.wat ghcr.io/tensorwasm/hello-gpu:latest
//! hello-gpu.tar`. WAT is compiled to Wasm first. By default the guest is
//! a layer of runwasi's Wasm media type, the config os `wasip1` (`wasip2`
//! for a WASI 0.2 component) and architecture `wasm`, as runwasi's
//! `oci-tar-builder` writes them (this uses its library); containerd 1.7
//! and later import such images; `ctr run --platform wasip2/wasm` picks a
//! component's. With
//! `--rootfs` the guest is a file, `/NAME.wasm`, in an ordinary tar layer
//! instead, which every containerd unpacks (1.6 refuses layers that are not
//! file systems) and the shim runs just the same (its entrypoint names the
//! file).

use std::{collections::HashMap, fs::File, path::PathBuf};

use anyhow::{Context, Result, bail};
use oci_spec::image::{self as spec, Arch};
use oci_tar_builder::{Builder, WASM_LAYER_MEDIA_TYPE};
use tensorwasm_embed::component;

fn main() -> Result<()> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let rootfs = args.first().is_some_and(|a| a == "--rootfs");
    if rootfs {
        args.remove(0);
    }
    let [guest, name, out] = args.as_slice() else {
        bail!("usage: image [--rootfs] GUEST.{{wasm,wat}} NAME:TAG OUT.tar");
    };
    let wasm = wat::parse_file(guest).with_context(|| format!("reading {guest}"))?;
    let dir = tempfile::tempdir()?;
    let stem = PathBuf::from(guest)
        .file_stem()
        .map_or_else(|| "guest".into(), |s| s.to_string_lossy().into_owned());
    let layer = dir.path().join(format!("{stem}.wasm"));
    std::fs::write(&layer, &wasm)?;

    let mut builder = Builder::default();
    let mut diff_ids = Vec::new();
    let entrypoint = if rootfs {
        // A file-system layer holding the guest: its diff id is the digest
        // of the uncompressed tar.
        let tar = dir.path().join("rootfs.tar");
        let mut t = tar::Builder::new(File::create(&tar)?);
        let mut header = tar::Header::new_gnu();
        header.set_size(wasm.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        t.append_data(&mut header, format!("{stem}.wasm"), wasm.as_slice())?;
        t.finish()?;
        drop(t);
        builder.add_layer(&tar);
        diff_ids.push(format!("sha256:{}", sha256::try_digest(tar.as_path())?));
        format!("/{stem}.wasm")
    } else {
        builder.add_layer_with_media_type(&layer, WASM_LAYER_MEDIA_TYPE.to_string());
        format!("{stem}.wasm")
    };
    // A label unique to the layer: configs must differ where layers do
    // (runwasi keys its cache of precompiled layers by it).
    let labels = HashMap::from([(
        "containerd.runwasi.layers".to_string(),
        sha256::digest(wasm.as_slice()),
    )]);
    let config = spec::ConfigBuilder::default()
        .entrypoint(vec![entrypoint])
        .labels(labels)
        .build()?;
    let image = spec::ImageConfigurationBuilder::default()
        .config(config)
        .os(if component::is_component_binary(&wasm) {
            "wasip2"
        } else {
            "wasip1"
        })
        .architecture(Arch::Wasm)
        .rootfs(spec::RootFsBuilder::default().diff_ids(diff_ids).build()?)
        .build()?;
    builder.add_config(image, name.clone(), spec::MediaType::ImageConfig);
    builder.build(File::create(out).with_context(|| format!("creating {out}"))?)?;
    let how = if rootfs {
        "the guest a file in a tar layer"
    } else {
        "one Wasm layer"
    };
    println!("{out}: {name}, {how} ({} bytes of Wasm)", wasm.len());
    Ok(())
}
