#!/usr/bin/env bash
# Builds the JS package: the crate for wasm32-unknown-unknown with the
# workspace's size-tuned `wasm-release` profile, then wasm-bindgen for Node
# (pkg/node, CommonJS) and for browsers (pkg/web, ES module), then lays the
# code out for gzip and optimises it with wasm-opt (binaryen, from npm: run
# `npm ci` first). README.md ("Size") says what each step saves.
set -euo pipefail
cd "$(dirname "$0")/.."

wasm_opt=node_modules/.bin/wasm-opt
if [[ ! -x $wasm_opt ]]; then
  echo "$wasm_opt is missing: run npm ci in wasm-tests first" >&2
  exit 1
fi

target_dir=$(cargo metadata --format-version 1 --no-deps --locked |
  node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).target_directory))')
# std rebuilt for this package (rust-src): sized by std's own
# `optimize_for_size`, and `panic=immediate-abort`, with which a panic
# traps at once instead of formatting a message that wasm32-unknown-unknown
# has nowhere to print. Both are unstable, hence the pinned nightly.
source scripts/toolchain.sh
if ! rustup component list --toolchain "$js_toolchain" --installed 2>/dev/null | grep -q '^rust-src'; then
  echo "the Rust toolchain $js_toolchain with rust-src is needed:" >&2
  echo "  rustup toolchain install $js_toolchain --profile minimal --component rust-src" >&2
  exit 1
fi
CARGO_ENCODED_RUSTFLAGS=$(printf '%s\x1f%s' -Zunstable-options -Cpanic=immediate-abort) \
  cargo "+$js_toolchain" build --locked -p kruise-wasm-js --lib --target wasm32-unknown-unknown \
  --profile wasm-release -Zbuild-std=std,panic_abort -Zbuild-std-features=optimize_for_size
wasm="$target_dir/wasm32-unknown-unknown/wasm-release/kruise_wasm_js.wasm"

wanted=$(node scripts/wasm-bindgen-version.js)
have=$(wasm-bindgen --version 2>/dev/null | awk '{print $2}' || true)
if [[ "$have" != "$wanted" ]]; then
  echo "wasm-bindgen $wanted is needed (Cargo.lock), found '${have:-none}':" >&2
  echo "  cargo install wasm-bindgen-cli --version $wanted --no-default-features" >&2
  exit 1
fi

rm -rf pkg
wasm-bindgen --target nodejs --out-dir pkg/node "$wasm"
wasm-bindgen --target web --out-dir pkg/web "$wasm"

# Each output folder is an npm package of its own. The Node one is CommonJS,
# which must be said since this folder's package.json says "module".
version=$(cargo metadata --format-version 1 --no-deps --locked |
  node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).packages.find(p=>p.name=="kruise-wasm-js").version))')
for flavour in node web; do
  type=$([[ $flavour == node ]] && echo commonjs || echo module)
  cat >"pkg/$flavour/package.json" <<JSON
{
  "name": "kruise-wasm-js",
  "version": "$version",
  "description": "OpenKruise's SidecarSet injection and container launch priority, compiled from kruise-core ($flavour build)",
  "license": "Apache-2.0",
  "type": "$type",
  "main": "kruise_wasm_js.js",
  "types": "kruise_wasm_js.d.ts",
  "files": ["kruise_wasm_js.js", "kruise_wasm_js.d.ts", "kruise_wasm_js_bg.wasm", "kruise_wasm_js_bg.wasm.d.ts"]
}
JSON
done

# The same module serves both flavours. scripts/layout.js names each
# function by its job and code; wasm-opt then optimises, moves the
# functions into that order and drops the names. `-ocimfs=0`: no inlining
# of every function that has one caller, which blends unique code into its
# callers and made the download a quarter bigger (README.md, "Size"). The
# features are those rustc enables for wasm32-unknown-unknown by default,
# which wasm-opt must be told.
named=$(mktemp --suffix .wasm)
trap 'rm -f "$named"' EXIT
node scripts/layout.js pkg/web/kruise_wasm_js_bg.wasm "$named"
features=(--enable-bulk-memory --enable-nontrapping-float-to-int --enable-sign-ext
  --enable-mutable-globals --enable-reference-types --enable-multivalue)
"$wasm_opt" -O2 -ocimfs=0 --reorder-functions-by-name "${features[@]}" "$named" -o pkg/web/kruise_wasm_js_bg.wasm
cp pkg/web/kruise_wasm_js_bg.wasm pkg/node/kruise_wasm_js_bg.wasm

bytes=$(stat -c %s pkg/web/kruise_wasm_js_bg.wasm)
gzipped=$(gzip -9c pkg/web/kruise_wasm_js_bg.wasm | wc -c)
echo "kruise_wasm_js_bg.wasm: $bytes bytes, $gzipped gzipped"
