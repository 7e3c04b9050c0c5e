#!/usr/bin/env bash
# Runs one Apache Kafka node (broker and controller) in KRaft mode, in the
# foreground, with its configuration, data and log in one directory.
#
#   scripts/kafka-broker.sh --dir DIR --port PORT [options]
#
#   --dir DIR              the node's directory: server.properties, data/,
#                          server.log (created; reused on a restart)
#   --port PORT            the client listener, HOST:PORT
#   --host HOST            the address it listens on and advertises
#                          (default 127.0.0.1; a local address other
#                          processes reach, e.g. a veth's for a network
#                          namespace); the controller stays on 127.0.0.1
#   --controller-port P    the controller listener (default: PORT + 1)
#   --node-id N            (default 1)
#   --voters LIST          the controller quorum, `1@127.0.0.1:P1,2@...`
#                          (default: this node alone)
#   --replication R        replication factor of internal and new topics
#                          (default 1); min.insync.replicas is 2 when R > 1
#   --cluster-id ID        the same for every node of a cluster (default:
#                          random, for a single node)
#   --config KEY=VALUE     any broker setting, after the defaults (repeat)
#   --listener NAME://HOST:PORT  an extra listener (repeat; give its
#                          protocol with --config listener.security.protocol.map=...)
#   --listener-bind ADDR   the address the extra listeners listen on, e.g.
#                          0.0.0.0 (default: the HOST they advertise)
#   --format-arg ARG       passed to the storage format (e.g. --add-scram ...)
#
# The first start formats the storage (kafka.tools.StorageTool); a restart
# on the same directory keeps topics, offsets and groups. The heap is
# KAFKA_HEAP (default 512m); KAFKA_JAVA_OPTS adds JVM options. Apache Kafka
# comes from scripts/install-kafka.sh, which this runs (it does nothing
# once Kafka is installed).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

dir= port= host=127.0.0.1 controller_port= node_id=1 voters= replication=1 cluster_id= listener_bind=
configs=() listeners=() format_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) dir=$2; shift 2 ;;
    --port) port=$2; shift 2 ;;
    --host) host=$2; shift 2 ;;
    --controller-port) controller_port=$2; shift 2 ;;
    --node-id) node_id=$2; shift 2 ;;
    --voters) voters=$2; shift 2 ;;
    --replication) replication=$2; shift 2 ;;
    --cluster-id) cluster_id=$2; shift 2 ;;
    --config) configs+=("$2"); shift 2 ;;
    --listener) listeners+=("$2"); shift 2 ;;
    --listener-bind) listener_bind=$2; shift 2 ;;
    --format-arg) format_args+=("$2"); shift 2 ;;
    *) echo "kafka-broker.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -n "$dir" ] && [ -n "$port" ] || { echo "kafka-broker.sh: --dir and --port are required" >&2; exit 2; }
controller_port=${controller_port:-$((port + 1))}
voters=${voters:-$node_id@127.0.0.1:$controller_port}
min_isr=1; [ "$replication" -gt 1 ] && min_isr=2

kafka=$("$here/install-kafka.sh")
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

extra_listeners= extra_advertised=
for l in "${listeners[@]+"${listeners[@]}"}"; do
  extra_advertised+=",$l"
  if [ -n "$listener_bind" ]; then
    extra_listeners+=",${l%%://*}://$listener_bind:${l##*:}"
  else
    extra_listeners+=",$l"
  fi
done

cat >"$dir/server.properties" <<PROPERTIES
process.roles=broker,controller
node.id=$node_id
controller.quorum.voters=$voters
listeners=PLAINTEXT://$host:$port,CONTROLLER://127.0.0.1:$controller_port$extra_listeners
advertised.listeners=PLAINTEXT://$host:$port$extra_advertised
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$dir/data
# Internal topics sized for tests and small clusters.
offsets.topic.replication.factor=$replication
offsets.topic.num.partitions=10
transaction.state.log.replication.factor=$replication
transaction.state.log.min.isr=$min_isr
transaction.state.log.num.partitions=10
default.replication.factor=$replication
min.insync.replicas=$min_isr
group.initial.rebalance.delay.ms=0
num.partitions=1
PROPERTIES
# Settings given later win: Kafka reads the last value of a repeated key.
for c in "${configs[@]+"${configs[@]}"}"; do echo "$c" >>"$dir/server.properties"; done

cat >"$dir/log4j2.yaml" <<LOG4J
Configuration:
  Appenders:
    File:
      name: file
      fileName: "$dir/server.log"
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Root:
      level: INFO
      AppenderRef:
        - ref: file
    Logger:
      - name: org.apache.kafka.clients
        level: WARN
      - name: state.change.logger
        level: WARN
LOG4J

java=java
[ -n "${JAVA_HOME:-}" ] && java="$JAVA_HOME/bin/java"
classpath="$kafka/libs/*"
jvm=(-Xms128m "-Xmx${KAFKA_HEAP:-512m}" -XX:+UseG1GC -XX:MaxGCPauseMillis=20
  -Djava.awt.headless=true "-Dlog4j2.configurationFile=$dir/log4j2.yaml")
# shellcheck disable=SC2206 # options are words by design
[ -n "${KAFKA_JAVA_OPTS:-}" ] && jvm+=(${KAFKA_JAVA_OPTS})

if [ ! -f "$dir/data/meta.properties" ]; then
  if [ -z "$cluster_id" ]; then
    cluster_id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | cut -c1-22)
  fi
  "$java" "${jvm[@]}" -cp "$classpath" kafka.tools.StorageTool format \
    -t "$cluster_id" -c "$dir/server.properties" \
    "${format_args[@]+"${format_args[@]}"}" >"$dir/format.log" 2>&1 \
    || { echo "kafka-broker.sh: formatting $dir failed:" >&2; cat "$dir/format.log" >&2; exit 1; }
fi

exec "$java" "${jvm[@]}" -cp "$classpath" kafka.Kafka "$dir/server.properties"
