#!/usr/bin/env bash
# While an e2e bench runs (`cargo bench --bench e2e -- ...`, or its built
# binary), prints for each streamfold process when it ends: its CPU seconds
# (user and system), the broker's (nisshi) CPU seconds over the same span,
# how idle the machine was meanwhile, and the span. Start it just after the
# bench; it returns when the bench's processes are gone.
#
#   e2e-<hash> --bench --events 4000000 --threads 1,2 --repeat 2 & scripts/bench-cpu.sh
set -uo pipefail
tick=$(getconf CLK_TCK)
ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
# idle and total jiffies of the machine
machine() { awk '/^cpu /{print $5 + $6, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9}' /proc/stat; }
declare -A first last
# Prints the processes that ended (all of them with `all`).
report() {
  for pid in "${!last[@]}"; do
    [ "${1:-}" != all ] && [ -d "/proc/$pid" ] && continue
    echo "${last[$pid]} ${first[$pid]}" | awk -v pid="$pid" -v tick="$tick" '{
      printf "streamfold %s: cpu %.2f s (user %.2f, sys %.2f); nisshi %.2f s; machine idle %.1f %%; span %.1f s\n",
        pid, ($1 + $2) / tick, $1 / tick, $2 / tick, ($3 - $7) / tick, 100 * ($4 - $8) / ($5 - $9), $6 - $10 }'
    unset "last[$pid]" "first[$pid]"
  done
}
while pgrep -f 'e2e-[0-9a-f]{16}' > /dev/null || pgrep -x streamfold > /dev/null; do
  broker=$(pgrep -x nisshi | head -1)
  for pid in $(pgrep -x streamfold); do
    # CPU of the broker and of the machine, and the time, when first seen
    [ -n "${first[$pid]:-}" ] || first[$pid]="$(ticks "${broker:-0}") $(machine) $(date +%s.%N)"
    read -r user sys < <(awk '{print $14, $15}' "/proc/$pid/stat" 2>/dev/null) &&
      last[$pid]="$user $sys $(ticks "${broker:-0}") $(machine) $(date +%s.%N)"
  done
  report
  sleep 0.1
done
report all
