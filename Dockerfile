# syntax=docker/dockerfile:1
# The tensorwasm image (the default target): `tensorwasm serve` (or any
# subcommand) on a distroless base. It needs nothing from CUDA but
# libcuda.so.1, which the NVIDIA container toolkit mounts when the container
# is given a GPU; without one the server runs on the CPU driver. The
# `shim-installer` target is the node installer of the containerd shim
# (`docker build --target shim-installer`). docs/deploy.md says how to
# build, run and check both.

# Build: the toolchain rust-toolchain.toml pins (rustup installs it here).
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
# protoc and libseccomp for the shim (linked statically: nodes need only
# glibc). Not pinned: bookworm's security updates replace the versions.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends protobuf-compiler libseccomp-dev \
    && rm -rf /var/lib/apt/lists/*
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    LIBSECCOMP_LINK_TYPE=static LIBSECCOMP_LIB_PATH=/usr/lib/x86_64-linux-gnu \
    cargo build --release --locked -p tensorwasm-cli --bin tensorwasm \
        -p tensorwasm-shim --bin containerd-shim-tensorwasm-v1 \
    && strip -o /tensorwasm target/release/tensorwasm \
    && strip -o /containerd-shim-tensorwasm-v1 target/release/containerd-shim-tensorwasm-v1

# The shim's node installer: the shim and deploy/shim/install.sh, with the
# shell, cmp and nsenter the script uses.
FROM debian:bookworm-slim AS shim-installer
COPY --from=build /containerd-shim-tensorwasm-v1 /usr/local/bin/containerd-shim-tensorwasm-v1
COPY deploy/shim/install.sh /usr/local/bin/install-tensorwasm-shim
ENTRYPOINT ["/usr/local/bin/install-tensorwasm-shim"]

# The server (the default target). Run: glibc and libgcc only (the binary links nothing else), as the
# base's non-root user (65532). The driver's JIT cache goes to
# ~/.cache/tensorwasm/jit, or TENSORWASM_JIT_CACHE (the Helm chart points it
# at an emptyDir, as its root file system is read-only).
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /tensorwasm /usr/local/bin/tensorwasm
COPY examples/ /usr/share/tensorwasm/examples/
ENV NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    RUST_LOG=info
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/tensorwasm"]
CMD ["serve", "--config", "/etc/tensorwasm/serve.json", "--listen", "0.0.0.0:8080"]
