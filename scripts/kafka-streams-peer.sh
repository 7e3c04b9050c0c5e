#!/usr/bin/env bash
# Runs the Kafka Streams peer (benches/peers/kafka-streams) in the
# foreground: `fold` (topologies/social-metrics.yaml), `question-feed`
# (topologies/question-feed.yaml), `page-views` (topologies/page-views.yaml)
# or `orders-enriched` (topologies/orders-enriched.yaml), exactly_once_v2,
# against the given brokers. Builds it first with Maven when the jar is missing or older than
# its sources (Maven Central is reached the first time; nothing is
# installed outside the repo but Maven's ~/.m2 cache). SIGTERM or SIGINT
# closes Kafka Streams cleanly (exit status 0).
#
#   scripts/kafka-streams-peer.sh --build-only
#   scripts/kafka-streams-peer.sh fold --bootstrap-servers 127.0.0.1:9092 \
#     --application-id peer-1 --input post-metric-updated --output folded \
#     --commit-interval 100ms --threads 2 --state-dir /tmp/peer-state
#   scripts/kafka-streams-peer.sh question-feed --help
#
# stdout carries the peer's status lines (`started ...`, `running ...`,
# `stopped ... clean=true`); logs go to stderr. benches/peers/kafka-streams/
# README.md lists the options.
#
#   KAFKA_STREAMS_PEER_HEAP       JVM heap, -Xms and -Xmx (default 1g)
#   KAFKA_STREAMS_PEER_GC         the collector's options (default
#                                 -XX:+UseParallelGC)
#   KAFKA_STREAMS_PEER_JAVA_OPTS  more JVM options, after the defaults
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
project="$here/../benches/peers/kafka-streams"
jar="$project/target/kafka-streams-peer.jar"

java=java
[ -n "${JAVA_HOME:-}" ] && java="$JAVA_HOME/bin/java"
for tool in "$java" mvn; do
  command -v "$tool" >/dev/null 2>&1 || {
    echo "kafka-streams-peer.sh: \`$tool\` is missing; the peer needs Java 17 or newer and Maven" >&2
    exit 1
  }
done

# One build at a time when several peers start together.
mkdir -p "$project/target"
exec 9>"$project/target/.build.lock"
if command -v flock >/dev/null 2>&1; then flock 9; fi
if [ ! -f "$jar" ] || [ ! -d "$project/target/lib" ] \
  || [ -n "$(find "$project/pom.xml" "$project/src/main" -newer "$jar" -print -quit)" ]; then
  echo "kafka-streams-peer.sh: building the Kafka Streams peer (mvn package in benches/peers/kafka-streams)" >&2
  log="$project/target/build.log"
  if ! mvn -q -B -f "$project/pom.xml" -Dmaven.test.skip=true package >"$log" 2>&1; then
    cat "$log" >&2
    echo "kafka-streams-peer.sh: the build failed (log above, and in $log)" >&2
    exit 1
  fi
  # The jar is rewritten only when its classes changed: mark it current.
  touch "$jar"
fi
exec 9>&-

if [ "${1:-}" = "--build-only" ]; then
  exit 0
fi

heap=${KAFKA_STREAMS_PEER_HEAP:-1g}
# The throughput collector: on two cores G1's concurrent threads took CPU
# from the stream threads (benches/peers/kafka-streams/README.md, "Tuning").
gc=${KAFKA_STREAMS_PEER_GC:--XX:+UseParallelGC}
# shellcheck disable=SC2206 # options are words by design
jvm=("-Xms$heap" "-Xmx$heap" $gc -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true)
# shellcheck disable=SC2206 # options are words by design
[ -n "${KAFKA_STREAMS_PEER_JAVA_OPTS:-}" ] && jvm+=(${KAFKA_STREAMS_PEER_JAVA_OPTS})

exec "$java" "${jvm[@]}" -cp "$jar:$project/target/lib/*" dev.streamfold.peer.Main "$@"
