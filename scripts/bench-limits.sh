#!/usr/bin/env bash
# A benchmark, not a test: time and peak memory of the CLI's graph analyses at the documented
# node limit (100,000) and below, as docs/cli.md's Limits paragraph quotes them. Builds the
# release nimble-bench first; needs GNU time (/usr/bin/time). Each run within LIMIT_SECONDS
# (default 900); a run killed for memory or time says so (status 137 or 124).
#   usage: scripts/bench-limits.sh [SPEC...]   e.g. "assign --synthetic layered:50000"
set -uo pipefail
cd "$(dirname "$0")/.."
[ -x /usr/bin/time ] || { echo "error: /usr/bin/time (GNU time) is needed for peak memory" >&2; exit 2; }
scripts/setup-libtorch.sh >/dev/null && cargo build --release --locked -p nimble-bench >/dev/null 2>&1 || { echo "error: building nimble-bench failed" >&2; exit 2; }
if [ $# -eq 0 ]; then
    set -- "assign --synthetic layered:100000" "assign --synthetic dnn:100000" "compare --synthetic dnn:100000" \
        "compare --synthetic nasnet:2499" "compare --synthetic layered:100000" "assign --algo greedy --synthetic layered:100000" "assign --algo greedy --synthetic dnn:100000"
fi
printf '%-48s %8s %10s %8s\n' "command" "status" "peak MiB" "seconds"
for spec in "$@"; do
    # shellcheck disable=SC2086 # the spec is a command line
    /usr/bin/time -f "%M %e" -o /tmp/nimble-bench-limits.$$ timeout "${LIMIT_SECONDS:-900}" target/release/nimble-bench $spec >/dev/null 2>&1
    status=$?
    # (GNU time writes "Command terminated by signal N" first where the run was killed)
    read -r kib seconds < <(tail -1 /tmp/nimble-bench-limits.$$ 2>/dev/null) || { kib=0; seconds=0; }
    printf '%-48s %8s %10d %8.1f\n' "$spec" "$status" $((kib / 1024)) "$seconds"
done
rm -f /tmp/nimble-bench-limits.$$
echo "($(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo), $(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD))"
