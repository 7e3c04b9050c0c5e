#!/usr/bin/env bash
# Installs the test broker, nisshi 0.7.0 (an Apache Kafka-compatible broker
# written in Rust; see DESIGN §9), when it is missing. It needs Rust 1.96
# and takes about 15 minutes to build on two cores; when `nisshi --version`
# already answers 0.7.0 this does nothing.
set -euo pipefail

version=0.7.0
if command -v nisshi >/dev/null 2>&1 && nisshi --version 2>/dev/null | grep -q "nisshi ${version}\$"; then
  exit 0
fi
# Also look where cargo installs binaries, in case it is not on PATH yet.
if [ -x "${CARGO_HOME:-$HOME/.cargo}/bin/nisshi" ] \
   && "${CARGO_HOME:-$HOME/.cargo}/bin/nisshi" --version 2>/dev/null | grep -q "nisshi ${version}\$"; then
  exit 0
fi

echo "installing the test broker nisshi ${version} (about 15 minutes, once)" >&2
rustup toolchain install 1.96.0 --profile minimal >&2
# A separate target directory keeps this build out of the project's.
CARGO_TARGET_DIR="${NISSHI_BUILD_DIR:-${TMPDIR:-/tmp}/nisshi-build}" \
  cargo +1.96.0 install nisshi --version "${version}" --locked --features dynostore,libsql >&2
