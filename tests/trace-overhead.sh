#!/usr/bin/env bash
# The cost of tracing on ib_write_bw (a measurement, not a test; not in `make test`): one
# vrnic process, two IB device pairs between guests A and B, the first pair traced from
# start-up into files (trace=PATH: every event, JSON-encoded by the file writer), the second
# not. ib_write_bw 64 KiB runs on the traced and the untraced pair in turn, ROUNDS times
# (default 3); the bandwidth of each run is printed, then the trace files' sizes and losses.
# Usage: tests/trace-overhead.sh [ROUNDS]   (boots guests: wrap it in the guest lock)
set -euo pipefail
. "$(dirname "$0")/lib.sh"

rounds=${1:-3}
# shellcheck disable=SC2016 # $PORT, $PEER, $IB0, $IB1 expand in the guest
PF='-F -p $PORT'
TESTS=()
for ((r = 1; r <= rounds; r++)); do
	for pair in traced:IB0 untraced:IB1; do
		TESTS+=("${pair%%:*}-$r|pair|ib_write_bw -d \$${pair#*:} -s 65536 -n 20000 $PF|ib_write_bw -d \$${pair#*:} -s 65536 -n 20000 $PF \$PEER")
	done
done

session_begin trace-overhead
build_all
start_vrnic "rnic0,lid=1,trace=$WORK/rnic0.trace" "rnic1,lid=2,trace=$WORK/rnic1.trace" \
	"rnic2,lid=3" "rnic3,lid=4"
for g in a b; do printf '%s\n' "${TESTS[@]}" | suite_job "$g"; done
say "booting guests A and B; ${#TESTS[@]} runs"
guest_start a --link --dev rnic0 --dev rnic2 --timeout 3000
guest_start b --link --dev rnic1 --dev rnic3 --timeout 3000
guests_wait || true
for t in "${TESTS[@]}"; do
	name=${t%%|*}
	row=$(grep -E '^ *65536 +[0-9]+ +[0-9.]+ +[0-9.]+' "$WORK/a/results/$name.client.out" || echo "(no result)")
	echo "$name: $row"
done
for f in "$WORK"/rnic[01].trace; do
	echo "$(basename "$f"): $(wc -l <"$f") lines, $(grep -c '"kind":"wqe"' "$f") WQEs," \
		"$(grep -o '"lost":[0-9]*' "$f" | awk -F: '{ s += $2 } END { print s + 0 }') lost"
done
