#!/usr/bin/env bash
# Profiles streamfold where the end-to-end harness measures it: one
# social-metrics run under exactly-once on the harness's Apache Kafka node,
# with `perf record` sampling the streamfold process for a while in the
# middle of the run. Prints where its CPU time goes, by thread and by
# library and function, and the harness's own figures for that run
# (records/s, streamfold's and the broker's CPU a record).
#
#   scripts/profile.sh            # 4,000,000 events, 10 s sampled
#   EVENTS=8000000 SAMPLE=20 scripts/profile.sh
#
# Needs `perf` (Debian's linux-perf; installed when missing). The report
# and the raw samples are left in target/profile/.
set -euo pipefail
cd "$(dirname "$0")/.."

events=${EVENTS:-4000000}
sample=${SAMPLE:-10}
out="${CARGO_TARGET_DIR:-target}/profile"
mkdir -p "$out"

if ! command -v perf >/dev/null 2>&1; then
  echo "installing linux-perf" >&2
  sudo=; [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq linux-perf >/dev/null
fi

cargo bench --bench e2e --no-run
cargo bench --bench e2e -- --workloads social-metrics --events "$events" --repeat 1 \
  --no-latency --no-recovery --guarantees exactly_once >"$out/harness.txt" 2>"$out/harness.log" &
harness=$!

# The harness's streamfold instance (`--instance-id bench-0`, an id the
# tests do not use) of the throughput run, once it is processing: its
# first commit is a second or two after it starts.
pid=
until [ -n "$pid" ]; do
  kill -0 "$harness" 2>/dev/null || { echo "the harness ended first; see $out/harness.log" >&2; exit 1; }
  pid=$(pgrep -f 'streamfold run .*social-metrics.*--instance-id bench-0' | head -n 1 || true)
  sleep 0.2
done
sleep 3
echo "sampling streamfold (pid $pid) for ${sample} s" >&2
perf record -F 999 -g -p "$pid" -o "$out/streamfold.data" -- sleep "$sample" 2>"$out/perf.log"
wait "$harness"

{
  echo "== the harness's run"
  grep -E '^streamfold|^bare consumer' "$out/harness.log" || true
  echo
  echo "== by thread"
  perf report -i "$out/streamfold.data" --no-children --sort comm --stdio 2>/dev/null | grep -E '^ +[0-9]'
  echo
  echo "== by library"
  perf report -i "$out/streamfold.data" --no-children --sort dso --stdio 2>/dev/null | grep -E '^ +[0-9]'
  echo
  echo "== by function (above 0.5 %)"
  perf report -i "$out/streamfold.data" --no-children --sort dso,sym --percent-limit 0.5 --stdio 2>/dev/null \
    | grep -E '^ +[0-9]'
} | tee "$out/report.txt"
