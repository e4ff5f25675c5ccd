#!/usr/bin/env bash
# Run one phase of `make test` and print its wall time: scripts/phase.sh NAME COMMAND [ARGS...]
# (the exit status is the command's, so a failing phase still stops make).
set -uo pipefail
name="$1"; shift
start=$(date +%s%N)
"$@"
rc=$?
ms=$(( ($(date +%s%N) - start) / 1000000 ))
printf 'phase %-8s %5d.%01d s  (exit %d)\n' "$name" $((ms / 1000)) $((ms % 1000 / 100)) "$rc"
exit "$rc"
