#!/bin/sh
# The node installer (the Helm chart's DaemonSet runs it in an init
# container, the host's root file system mounted at $HOST_ROOT): puts
# containerd-shim-tensorwasm-v1 on the node, registers the runtime
# `tensorwasm` with containerd's CRI plugin, and restarts containerd when
# its configuration changed. Idempotent: a node that has both is left alone
# (the binary is still refreshed when it differs).
set -eu
HOST_ROOT=${HOST_ROOT:-/host}
BIN_DIR=${BIN_DIR:-/usr/local/bin}
CONFIG=${CONTAINERD_CONFIG:-/etc/containerd/config.toml}
SHIM=containerd-shim-tensorwasm-v1
SHIM_SRC=${SHIM_SRC:-/usr/local/bin/$SHIM}

dst="$HOST_ROOT$BIN_DIR/$SHIM"
if ! cmp -s "$SHIM_SRC" "$dst"; then
    mkdir -p "$HOST_ROOT$BIN_DIR"
    cp "$SHIM_SRC" "$dst.new"
    chmod 0755 "$dst.new"
    mv "$dst.new" "$dst"
    echo "installed $BIN_DIR/$SHIM"
fi

config="$HOST_ROOT$CONFIG"
mkdir -p "$(dirname "$config")"
touch "$config"
if grep -q 'runtimes.tensorwasm\]' "$config"; then
    echo "containerd already knows the tensorwasm runtime"
    exit 0
fi
# containerd 2 (config version 3) names the CRI runtime plugin differently.
if grep -Eq '^[[:space:]]*version[[:space:]]*=[[:space:]]*3' "$config"; then
    section="plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.tensorwasm"
else
    section='plugins."io.containerd.grpc.v1.cri".containerd.runtimes.tensorwasm'
fi
cp "$config" "$config.before-tensorwasm"
printf '\n[%s]\n  runtime_type = "io.containerd.tensorwasm.v1"\n' "$section" >>"$config"
echo "registered the tensorwasm runtime in $CONFIG"
# Restart containerd in the host's namespaces (the pod has hostPID).
if [ "${RESTART_CONTAINERD:-1}" = 1 ]; then
    nsenter --target 1 --mount --uts --ipc --net --pid -- systemctl restart containerd
    echo "restarted containerd"
fi
