#!/usr/bin/env bash
# The one test command. Installs what the tests need when it is missing
# (system packages; Apache Kafka from Maven Central), then runs every test:
# unit tests, golden cases, property tests, offline topology cases, the
# integration, exactly-once and chaos tests against Apache Kafka (each test
# binary starts its own brokers, see tests/support/broker.rs), and the
# benchmarks in test mode.
#
# The integration tests drive the binary's fault hooks, so it is built with
# the `fault-injection` feature here; a release build has none of them.
# Arguments go to `cargo test` (e.g. `scripts/test.sh --test chaos`).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
scripts/install-kafka.sh >/dev/null

cargo test --all-targets --locked --features fault-injection "$@"
