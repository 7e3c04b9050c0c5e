#!/usr/bin/env bash
# Quickstart: a local broker, the social-metrics topology, and its folded
# output.
#
# Installs what is missing (system packages, Apache Kafka from Maven
# Central), builds streamfold, starts a one-node Kafka on 127.0.0.1:19092
# (unless KAFKA_BOOTSTRAP_SERVERS points elsewhere), produces the article's six
# post-metric events and a burst of 200,000 more over 1,000 accounts,
# runs `streamfold run topologies/social-metrics.yaml`, and shows the
# folded events and the folding ratio. Everything it starts is stopped when
# it ends.
set -euo pipefail
cd "$(dirname "$0")/.."

events=${QUICKSTART_EVENTS:-200000}
accounts=${QUICKSTART_ACCOUNTS:-1000}
workdir=$(mktemp -d -t streamfold-quickstart-XXXXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$workdir"
}
trap cleanup EXIT

step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }

step "Installing what is missing"
scripts/install-deps.sh
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"

step "Building streamfold (the first build compiles RocksDB and librdkafka: 10-20 minutes on 2 cores)"
cargo build --locked --bin streamfold --bin streamfold-loadgen
target="${CARGO_TARGET_DIR:-target}"
streamfold="$target/debug/streamfold"
loadgen="$target/debug/streamfold-loadgen"

if [ -z "${KAFKA_BOOTSTRAP_SERVERS:-}" ]; then
  step "Installing Apache Kafka (once; its jars from Maven Central)"
  scripts/install-kafka.sh >/dev/null
  export KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:19092
  step "Starting Apache Kafka (one node, KRaft) on $KAFKA_BOOTSTRAP_SERVERS"
  scripts/kafka-broker.sh --dir "$workdir/kafka" --port 19092 >"$workdir/kafka.out" 2>&1 &
  pids+=($!)
  broker_up=""
  for _ in $(seq 1 1200); do
    if (exec 3<>"/dev/tcp/127.0.0.1/19092") 2>/dev/null; then
      broker_up=1
      break
    fi
    kill -0 "${pids[-1]}" 2>/dev/null || break
    sleep 0.1
  done
  if [ -z "$broker_up" ]; then
    echo "Kafka did not start on $KAFKA_BOOTSTRAP_SERVERS:" >&2
    cat "$workdir/kafka.out" >&2
    tail -n 40 "$workdir/kafka/server.log" >&2 2>/dev/null || true
    exit 1
  fi
fi

# Fresh names, so the quickstart can run again against the same broker.
suffix=$(date +%s)
export STREAMFOLD_APP="social-metrics-$suffix"
export POST_METRICS_TOPIC="post-metric-updated-$suffix"
export FOLDED_TOPIC="account-metrics-folded-$suffix"
export DEAD_LETTER_TOPIC="social-metrics-dlq-$suffix"

# The input topic first: streamfold would wait for it (and say so), but a
# quickstart should not start by waiting.
step "Creating the topic $POST_METRICS_TOPIC (4 partitions)"
"$loadgen" create-topic --topic "$POST_METRICS_TOPIC" --partitions 4

step "Running: streamfold run topologies/social-metrics.yaml"
"$streamfold" run topologies/social-metrics.yaml --instance-id quickstart \
  --state-dir "$workdir/state" --metrics-addr 127.0.0.1:19464 >"$workdir/streamfold.log" 2>&1 &
pids+=($!)

metric() {
  curl -s 127.0.0.1:19464/metrics 2>/dev/null | awk -v m="$1" '$1 ~ "^"m"({|$)" {s+=$2} END {print s+0}'
}
# The sum of metric $1's samples whose label $2 is $3.
metric_with() {
  curl -s 127.0.0.1:19464/metrics 2>/dev/null \
    | awk -v m="$1" -v l="$2=\"$3\"" '$1 ~ "^"m"{" && index($1, l) {s+=$2} END {print s+0}'
}
wait_for() { # metric, minimum
  for _ in $(seq 1 1200); do
    [ "$(metric "$1")" -ge "$2" ] 2>/dev/null && return 0
    if ! kill -0 "${pids[-1]}" 2>/dev/null; then
      echo "streamfold stopped:" >&2; cat "$workdir/streamfold.log" >&2; exit 1
    fi
    sleep 0.25
  done
  echo "timed out waiting for $1 >= $2" >&2; exit 1
}

step "The article: 6 post-metric events for 2 accounts, into $POST_METRICS_TOPIC"
"$loadgen" produce --topic "$POST_METRICS_TOPIC" --partitions 4 --article
echo "Waiting for both accounts to go quiet for 5s (quiet_for)..."
wait_for streamfold_node_records_out_total 2
"$loadgen" read --topic "$FOLDED_TOPIC" --count 2

step "A burst: $events more events over $accounts accounts"
"$loadgen" produce --topic "$POST_METRICS_TOPIC" --events "$events" --accounts "$accounts"
total=$((events + 6))
wait_for streamfold_fold_eligible_events_total "$total"
echo "All $total events folded; waiting 6s for the last folds to go quiet..."
sleep 6

step "Summary"
# Node counters count committed work: read until that many are readable.
"$loadgen" read --topic "$FOLDED_TOPIC" --count "$(metric streamfold_node_records_out_total)" --summary >/dev/null
eligible=$(metric streamfold_fold_eligible_events_total)
folded=$(metric streamfold_fold_folded_events_total)
awk -v e="$eligible" -v f="$folded" 'BEGIN {
  printf "fold-eligible events: %d\nfolded into an open fold: %d\nfolding ratio: %.1f%%\n", e, f, (e > 0 ? 100 * f / e : 0)
}'
printf 'closed by quiet: %s, by max_wait: %s, by max_events: %s\n' \
  "$(metric_with streamfold_fold_closed_total cause quiet)" \
  "$(metric_with streamfold_fold_closed_total cause max_wait)" \
  "$(metric_with streamfold_fold_closed_total cause max_events)"
