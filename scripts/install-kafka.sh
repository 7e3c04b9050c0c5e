#!/usr/bin/env bash
# Installs Apache Kafka's broker when it is missing and prints the directory
# that holds it (its jars in `libs/`).
#
# The jars come from Maven Central through scripts/kafka/pom.xml
# (`mvn dependency:copy-dependencies`): the same artifacts as Apache Kafka's
# release, without its shell scripts, which streamfold does not need (the
# tests and scripts/kafka-broker.sh start `kafka.Kafka` in KRaft mode
# themselves). Installs a JDK and Maven from Debian's packages when `java`
# or `mvn` is missing. Once installed this does nothing but print the path.
#
#   KAFKA_VERSION          the Kafka release (default: the pom's, 4.4.0)
#   STREAMFOLD_KAFKA_DIR   where to install (default:
#                          ~/.cache/streamfold/kafka-<version>)
set -euo pipefail
cd "$(dirname "$0")/.."

pom=scripts/kafka/pom.xml
version=${KAFKA_VERSION:-$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$pom")}
dir=${STREAMFOLD_KAFKA_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/streamfold/kafka-$version}

if [ -f "$dir/installed" ]; then
  echo "$dir"
  exit 0
fi

missing=()
command -v java >/dev/null 2>&1 || missing+=(openjdk-17-jre-headless)
command -v mvn >/dev/null 2>&1 || missing+=(maven)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing ${missing[*]} (for the Kafka broker)" >&2
  sudo=; [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

echo "installing Apache Kafka $version from Maven Central into $dir (about a minute, once)" >&2
mkdir -p "$dir"
rm -rf "$dir/libs.partial"
mvn -q -B -f "$pom" -Dkafka.version="$version" \
  dependency:copy-dependencies -DincludeScope=runtime \
  -DoutputDirectory="$dir/libs.partial" >&2
rm -rf "$dir/libs"
mv "$dir/libs.partial" "$dir/libs"
echo "$version" >"$dir/installed"
echo "$dir"
