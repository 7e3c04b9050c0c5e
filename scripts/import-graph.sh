#!/bin/sh
# The import graph between the top-level modules of src/: prints an edge
# `a -> b` when a non-comment line under src/a (or src/a.rs) names
# `crate::b`, then the pairs that import each other, then the modules from
# the bottom up (tsort). Test code counts too. Exits 1 when the graph has a
# cycle of any length (tsort names it).
# Usage: scripts/import-graph.sh [repo root]
set -eu
cd "${1:-.}"
edges=$(for m in $(ls src | sed 's/\.rs$//' | grep -v -x -e lib -e main -e bin); do
  files=src/$m
  [ -d "$files" ] || files=src/$m.rs
  grep -rhE 'crate::[a-z_]+' "$files" | grep -vE '^\s*//' | grep -oE 'crate::[a-z_]+' |
    sed 's/crate:://' | sort -u | grep -v -x "$m" | sed "s/^/$m -> /" || true
done)
echo "$edges"
echo "--- two-way:"
echo "$edges" | awk '{ e[$1" "$3] = 1 } END { for (k in e) { split(k, p, " "); if ((p[2]" "p[1]) in e && p[1] < p[2]) print p[1] " <-> " p[2] } }'
echo "--- bottom up:"
order=$(echo "$edges" | awk '{ print $3, $1 }' | tsort 2>/tmp/import-graph.$$) || true
echo "$order" | tr '\n' ' '; echo
if [ -s /tmp/import-graph.$$ ]; then
  cat /tmp/import-graph.$$ >&2
  rm -f /tmp/import-graph.$$
  echo "the import graph has a cycle" >&2
  exit 1
fi
rm -f /tmp/import-graph.$$
