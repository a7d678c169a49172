# syntax=docker/dockerfile:1
# The tensorwasm image: `tensorwasm serve` (or any subcommand) on a
# distroless base. It needs nothing from CUDA but libcuda.so.1, which the
# NVIDIA container toolkit mounts when the container is given a GPU; without
# one the server runs on the CPU driver. docs/deploy.md says how to build,
# run and check it.

# Build: the toolchain rust-toolchain.toml pins (rustup installs it here).
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p tensorwasm-embed --bin tensorwasm \
    && strip -o /tensorwasm target/release/tensorwasm

# Run: glibc and libgcc only (the binary links nothing else), as the
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
