#!/usr/bin/env bash
# The main job: provision and build everything, start one vrnic process with two devices,
# boot two guests (one device each, linked by a point-to-point IP network) and run stock
# ib_write_bw between them at 64 KiB and 1 MiB, printing perftest's own tables.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

# NAME|WHERE|SERVER|CLIENT for tests/guest/suite.sh; $PORT and $PEER expand in the guest.
# shellcheck disable=SC2016
TESTS=(
	'ib_write_bw-65536|pair|ib_write_bw -d vrnic0 -s 65536 -n 5000 -F -p $PORT|ib_write_bw -d vrnic0 -s 65536 -n 5000 -F -p $PORT $PEER'
	'ib_write_bw-1048576|pair|ib_write_bw -d vrnic0 -s 1048576 -n 2000 -F -p $PORT|ib_write_bw -d vrnic0 -s 1048576 -n 2000 -F -p $PORT $PEER'
	'ib_write_lat-8|pair|ib_write_lat -d vrnic0 -s 8 -n 2000 -F -p $PORT|ib_write_lat -d vrnic0 -s 8 -n 2000 -F -p $PORT $PEER'
	'ib_read_lat-8|pair|ib_read_lat -d vrnic0 -s 8 -n 2000 -F -p $PORT|ib_read_lat -d vrnic0 -s 8 -n 2000 -F -p $PORT $PEER'
)
session_begin demo
bash "$REPO/tests/host-deps.sh"
build_all
start_vrnic "rnic0,lid=1" "rnic1,lid=2"
for g in a b; do printf '%s\n' "${TESTS[@]}" | suite_job "$g"; done

say "booting two guests (TCG; about 20 s)"
guest_start a --link --dev rnic0 --timeout 1200
guest_start b --link --dev rnic1 --timeout 1200
rc=0
guests_wait || rc=1
for t in "${TESTS[@]}"; do
	name=${t%%|*}
	echo
	echo "===== $name (client, guest A -> guest B)"
	cat "$WORK/a/results/$name.client.out" 2>/dev/null || { echo "(did not run)"; rc=1; }
	[[ $(cat "$WORK/a/results/$name.client.rc" 2>/dev/null) == 0 ]] || rc=1
done
((rc == 0)) || { say "demo failed"; show_tails; }
exit $rc
