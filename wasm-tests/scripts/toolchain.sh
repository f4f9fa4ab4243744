# The Rust toolchain the JS package is built with, sourced by build.sh and
# ci.sh. A pinned nightly rather than the workspace's stable Rust: it can
# rebuild std for this package alone, smaller and with panics that abort
# at once (README.md, "Size"). The crate itself stays stable Rust; clippy
# and the unit tests run on the workspace's toolchain.
js_toolchain=nightly-2026-05-20
