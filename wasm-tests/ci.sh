#!/usr/bin/env bash
# The JS package's CI: installs what a fresh Debian machine (as root) lacks,
# builds pkg/node and pkg/web, and runs the whole JS suite: the golden cases
# and API checks in Node, the same in headless Chromium, and the playground
# click-through (which saves playground-screenshot.png). Safe to run again:
# every install is skipped when already done.
#
# Uses CARGO_TARGET_DIR when set. Needs Node >= 20 with npm, and rustup.
set -euo pipefail
cd "$(dirname "$0")"

step() { printf '\n==> %s\n' "$*"; }

step "Chromium (Debian's package)"
if [[ ! -x /usr/bin/chromium ]]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq chromium >/dev/null
fi
/usr/bin/chromium --version

step "Node packages (package-lock.json: yaml, playwright-core, binaryen)"
node --version
if ! node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)'; then
  echo "Node >= 20 is needed" >&2
  exit 1
fi
npm ci --omit=optional --no-audit --no-fund

step "Rust toolchain (scripts/toolchain.sh) and wasm-bindgen-cli (the wasm-bindgen version in Cargo.lock)"
source scripts/toolchain.sh
rustup toolchain install "$js_toolchain" --profile minimal --component rust-src
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
wanted=$(node scripts/wasm-bindgen-version.js)
if [[ "$(wasm-bindgen --version 2>/dev/null | awk '{print $2}')" != "$wanted" ]]; then
  # No TLS features: the CLI never downloads anything for us. --locked can
  # fail when the registry lacks a version the CLI's lockfile names; then
  # take the newest compatible ones.
  cargo install wasm-bindgen-cli --version "$wanted" --no-default-features --locked || {
    echo "(cargo install --locked failed: retrying with the newest compatible dependencies)"
    cargo install wasm-bindgen-cli --version "$wanted" --no-default-features
  }
fi
wasm-bindgen --version

step "build (scripts/build.sh)"
bash scripts/build.sh

step "tests: Node, then Chromium (node --test)"
node --test --test-reporter=spec test/layout.test.js test/golden.test.js test/chromium.test.js
