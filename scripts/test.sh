#!/usr/bin/env bash
# The one test command: installs what the tests need when it is missing,
# then runs every test (unit, golden cases, property tests, benchmarks in
# test mode).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh

cargo test --all-targets --locked "$@"
