#!/usr/bin/env bash
# The main job: provision and build everything, start one vrnic process with two devices,
# boot two guests (one device each, linked by a point-to-point IP network) and run stock
# ib_write_bw between them at 64 KiB and 1 MiB, printing perftest's own tables.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

work=$(mktemp -d /tmp/vrnic-demo.XXXXXX)
trap 'stop_vrnic; rm -rf "$work"' EXIT
bash "$REPO/tests/host-deps.sh"
build_all
start_vrnic "$work" "rnic0,lid=1" "rnic1,lid=2"

TESTS=(
	'ib_write_bw-65536|pair|ib_write_bw -d vrnic0 -s 65536 -n 5000 -F -p $PORT|ib_write_bw -d vrnic0 -s 65536 -n 5000 -F -p $PORT $PEER'
	'ib_write_bw-1048576|pair|ib_write_bw -d vrnic0 -s 1048576 -n 2000 -F -p $PORT|ib_write_bw -d vrnic0 -s 1048576 -n 2000 -F -p $PORT $PEER'
	'ib_write_lat-8|pair|ib_write_lat -d vrnic0 -s 8 -n 2000 -F -p $PORT|ib_write_lat -d vrnic0 -s 8 -n 2000 -F -p $PORT $PEER'
	'ib_read_lat-8|pair|ib_read_lat -d vrnic0 -s 8 -n 2000 -F -p $PORT|ib_read_lat -d vrnic0 -s 8 -n 2000 -F -p $PORT $PEER'
)
for g in a b; do
	mkdir -p "$work/$g"
	cp "$REPO/tests/guest/suite.sh" "$work/$g/run.sh"
	echo "$g" >"$work/$g/role"
	echo 169.254.100.2 >"$work/$g/peer"
	printf '%s\n' "${TESTS[@]}" >"$work/$g/tests"
done
say "booting two guests (TCG; about 20 s)"
# shellcheck disable=SC2086 # VRNIC_GUEST_ARGS: extra run-guest.sh options, e.g. --smp 1
guest() { "$REPO/qemu-config/run-guest.sh" --initrd "$E2E_IMAGE" --timeout 1200 --mem 2G ${VRNIC_GUEST_ARGS:-} "$@"; }
guest --name guest-a --ip 169.254.100.1/24 --net-listen "$work/link.sock" --job "$work/a" \
	--vrnic-socket "$work/rnic0.sock" --log "$work/a/console.log" &
pa=$!
guest --name guest-b --ip 169.254.100.2/24 --net-connect "$work/link.sock" --job "$work/b" \
	--vrnic-socket "$work/rnic1.sock" --log "$work/b/console.log" &
pb=$!
rc=0
wait $pa || rc=1
wait $pb || rc=1
for t in "${TESTS[@]}"; do
	name=${t%%|*}
	echo
	echo "===== $name (client, guest A -> guest B)"
	cat "$work/a/results/$name.client.out" 2>/dev/null || { echo "(did not run)"; rc=1; }
	[[ $(cat "$work/a/results/$name.client.rc" 2>/dev/null) == 0 ]] || rc=1
done
((rc == 0)) || { say "demo failed; guest consoles:"; tail -n 20 "$work"/{a,b}/console.log >&2; }
exit $rc
