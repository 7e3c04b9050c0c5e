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
#
# With arguments, they go to one `cargo test` (e.g.
# `scripts/test.sh --test chaos social_metrics_under_chaos -- --nocapture`).
# Without, the test binaries run in two lanes side by side, the chaos and
# exactly-once tests in one, everything else in the other: most of their
# time is spent waiting on brokers and session timeouts, not on the CPU.
# Each binary's output goes to target/test-logs/, and a failing one's is
# printed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
scripts/install-kafka.sh >/dev/null

cargo_test=(cargo test --locked --features fault-injection)
if [ $# -gt 0 ]; then
  # The targets the arguments name (say `--test chaos`), not every one.
  exec "${cargo_test[@]}" "$@"
fi
cargo_test+=(--all-targets)

logs="${CARGO_TARGET_DIR:-target}/test-logs"
rm -rf "$logs" && mkdir -p "$logs"

# Build every test binary once; cargo prints where each one is.
"${cargo_test[@]}" --no-run --message-format=json-render-diagnostics \
  | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("profile", {}).get("test") and m.get("executable"):
        kind = m["target"]["kind"][0]
        name = m["target"]["name"]
        name = {"test": name, "bench": "bench-" + name}.get(kind, name + "-" + kind)
        print(name, m["executable"])
' >"$logs/binaries"

# Runs the named binaries one after the other, as cargo test would (from
# the package root); records each one's result.
lane() {
  local name exe status
  while read -r name exe; do
    local started=$SECONDS
    if "$exe" >"$logs/$name.log" 2>&1; then status=ok; else status=FAILED; fi
    printf '%-22s %-7s %5ss\n' "$name" "$status" "$((SECONDS - started))" | tee -a "$logs/summary"
  done
}

heavy='^(chaos|exactly_once) '
grep -E "$heavy" "$logs/binaries" | lane &
chaos_lane=$!
grep -vE "$heavy" "$logs/binaries" | lane
wait "$chaos_lane" || true

echo
echo "test binaries (seconds each):"
sort "$logs/summary"
failed=$(awk '$2 == "FAILED" {print $1}' "$logs/summary")
built=$(wc -l <"$logs/binaries")
ran=$(wc -l <"$logs/summary")
if [ "$built" -eq 0 ] || [ "$ran" -ne "$built" ]; then
  echo "$built test binaries built, $ran ran" >&2
  exit 1
fi
if [ -n "$failed" ]; then
  for name in $failed; do
    echo
    echo "=== $name failed; its output ($logs/$name.log):"
    grep -vE '^test .* \.\.\. ok$' "$logs/$name.log" | tail -n 200
  done
  exit 1
fi
echo "all test binaries passed"
