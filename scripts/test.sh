#!/usr/bin/env bash
# The one test command. Installs what the tests need when it is missing
# (system packages, the test broker nisshi 0.7.0), then runs every test:
# unit tests, golden cases, property tests, offline topology cases, the
# integration tests against a broker started per test binary, and the
# benchmarks in test mode.
#
# STREAMFOLD_TEST_BOOTSTRAP=host:port runs the integration tests against that
# broker instead (e.g. Apache Kafka from docker/compose.yaml), with strict
# exactly-once checks.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
if [ -z "${STREAMFOLD_TEST_BOOTSTRAP:-}" ]; then
  scripts/install-nisshi.sh
  export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
fi

cargo test --all-targets --locked "$@"
