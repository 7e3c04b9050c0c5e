#!/usr/bin/env bash
# Runs scripts/quix_peer.py (Quix Streams on the social-metrics workload) for
# the e2e benchmark, installing Quix Streams into a venv first when it is not
# there yet: `pip install quixstreams==$QUIX_VERSION` into
# ${QUIX_VENV:-~/.cache/streamfold/quixstreams-$QUIX_VERSION}, once.
#
#   scripts/quix-peer.sh --install-only
#   scripts/quix-peer.sh --bootstrap-servers 127.0.0.1:9092 --topic t --output o \
#     --group g --state-dir /tmp/quix [--limit 300000] [--commit-interval 0.1]
set -euo pipefail

version=${QUIX_VERSION:-3.28.1}
venv=${QUIX_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/streamfold/quixstreams-$version}

if ! "$venv/bin/python" -c "import sys, quixstreams; sys.exit(quixstreams.__version__ != '$version')" 2>/dev/null; then
  echo "installing quixstreams==$version into $venv" >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "quixstreams==$version" >&2
fi

if [ "${1:-}" = "--install-only" ]; then
  exit 0
fi
exec "$venv/bin/python" "$(dirname "$0")/quix_peer.py" "$@"
