#!/usr/bin/env bash
# What a fresh machine of the project's kind (Debian, Rust by rustup, Go,
# Node, kubectl) lacks for the README's two commands, installed once; both
# commands start with it, and CI runs it too. What is there already is left
# alone, so a second run takes a second.
#  * the Rust toolchain rust-toolchain.toml pins, with its wasm targets
#    (rustup no longer installs a pinned toolchain by itself);
#  * protoc, for the node agent's CRI client (generated at build time);
#  * Debian's containerd, runc, registry and image tools, for the tests that
#    join a real node (controllers/devcluster/REAL-NODE.md).
# Installing Debian packages needs root.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "==> Rust toolchain (rust-toolchain.toml) and its wasm targets"
rustup toolchain install
rustup target add wasm32-wasip1 wasm32-unknown-unknown

# command → the Debian package that provides it
packages=(
  protoc:protobuf-compiler
  containerd:containerd
  runc:runc
  docker-registry:docker-registry
  skopeo:skopeo
  umoci:umoci
  htpasswd:apache2-utils
  /bin/busybox:busybox-static
)
missing=()
for entry in "${packages[@]}"; do
  command -v "${entry%%:*}" >/dev/null || missing+=("${entry#*:}")
done
if ((${#missing[@]})); then
  echo "==> Debian packages: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}"
fi

command -v kubectl >/dev/null || {
  echo "kubectl is not on PATH: the dev cluster's tests drive it with kubectl" >&2
  exit 1
}
