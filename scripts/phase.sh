#!/usr/bin/env bash
# One phase of a CI run, timed, so a CI log says where the time goes:
#   scripts/phase.sh NAME [--ok CODE] CMD...   runs CMD, then prints "== phase NAME: 12.3 s (exit 0)"
#                                              and exits with CMD's status (--ok CODE: that status
#                                              is also a pass, e.g. 75 "no package index": tests skip)
#   scripts/phase.sh --summary                 every phase of this run, their sum, and the wall time
#                                              from the first start to the last end (phases may
#                                              run side by side, so the two can differ)
# The phases of one run are appended to $PHASE_LOG (make test names one per invocation).
set -uo pipefail
log=${PHASE_LOG:-/tmp/livelab-phases.log}
if [ "${1:-}" = --summary ]; then
  [ -f "$log" ] || { echo "== phases: none recorded in $log"; exit 0; }
  echo "== phases:"
  awk -F'\t' '{ printf "   %-16s %8.1f s  (exit %s)\n", $1, $2, $3; t += $2
                 if (NF >= 5) { if (first == "" || $4 < first) first = $4; if ($5 > last) last = $5 } }
               END { printf "   %-16s %8.1f s\n", "sum", t
                     if (first != "") printf "   %-16s %8.1f s  (first start to last end)\n", "wall", last - first }' "$log"
  exit 0
fi
name=${1:?usage: scripts/phase.sh NAME [--ok CODE] CMD... | --summary}; shift
ok=0
if [ "${1:-}" = --ok ]; then ok=$2; shift 2; fi
echo "== phase $name: starting"
t0=$(date +%s.%N)
"$@"
rc=$?
t1=$(date +%s.%N)
took=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$took" "$rc" "$t0" "$t1" >>"$log"
echo "== phase $name: $took s (exit $rc)"
if [ "$rc" = 0 ] || [ "$rc" = "$ok" ]; then exit 0; fi
scripts/phase.sh --summary
exit "$rc"
