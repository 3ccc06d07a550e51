#!/usr/bin/env bash
# FleetDP's whole test suite, on a fresh machine with the Rust toolchain,
# Python/pip and Debian's packages. Installs and starts what the tests need.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== building and running every test (release mode: the statistical tests are heavy)"
cargo test --release --workspace --locked
