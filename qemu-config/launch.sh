#!/usr/bin/env bash
# Start one vrnic process and one or two guests attached to it, for interactive use.
# Usage: qemu-config/launch.sh [--guests 1|2] [--serve-args "ARGS"]
#   Builds vrnic, vrnic.ko and the provider into the guest image (cached), starts
#   `vrnic serve` with one device per guest (LIDs 1 and 2), and boots the guests linked by a
#   point-to-point network (169.254.100.1 and .2). Guest A gets this terminal (a root shell;
#   `busybox poweroff -f` or Ctrl-A X ends it, and with it everything). Guest B runs perftest
#   servers with default options, forever: ib_write_bw on port 18515, ib_read_bw 18516,
#   ib_send_bw 18517, ib_write_lat 18518, ib_read_lat 18519, ib_send_lat 18520. In guest A:
#     ibv_devinfo
#     ib_write_bw -d vrnic0 -p 18515 169.254.100.2
#   With --guests 1, run both ends in guest A over loopback:
#     ib_write_bw -d vrnic0 & sleep 1; ib_write_bw -d vrnic0 127.0.0.1
set -euo pipefail
. "$(dirname "$0")/../tests/lib.sh"

guests=2
while (($#)); do
	case $1 in
	--guests) guests=${2:?}; shift 2 ;;
	--serve-args) export VRNIC_SERVE_ARGS=${2:?}; shift 2 ;;
	-h | --help) sed -n '2,14s/^# \{0,1\}//p' "$0"; exit 0 ;;
	*) echo "unknown option: $1 (try --help)" >&2; exit 2 ;;
	esac
done
[[ $guests == 1 || $guests == 2 ]] || { echo "--guests must be 1 or 2" >&2; exit 2; }

work=$(mktemp -d /tmp/vrnic-launch.XXXXXX)
pb=''
cleanup() {
	[[ -n $pb ]] && kill "$pb" 2>/dev/null && wait "$pb" 2>/dev/null
	stop_vrnic
}
trap cleanup EXIT
trap "exit 130" INT TERM HUP
build_all
if ((guests == 2)); then
	start_vrnic "$work" "rnic0,lid=1" "rnic1,lid=2"
	say "logs in $work; guest B console: $work/guest-b.log"
	mkdir -p "$work/b"
	cat >"$work/b/run.sh" <<'JOB'
#!/bin/sh
port=18515
for tool in ib_write_bw ib_read_bw ib_send_bw ib_write_lat ib_read_lat ib_send_lat; do
	(while :; do $tool -d vrnic0 -F -p $port >/dev/null 2>&1; done) &
	port=$((port + 1))
done
wait
JOB
	"$REPO/qemu-config/run-guest.sh" --initrd "$E2E_IMAGE" --name guest-b --ip 169.254.100.2/24 \
		--net-connect "$work/link.sock" --vrnic-socket "$work/rnic1.sock" --log "$work/guest-b.log" \
		--job "$work/b" &
	pb=$!
	"$REPO/qemu-config/run-guest.sh" --initrd "$E2E_IMAGE" --name guest-a --ip 169.254.100.1/24 \
		--net-listen "$work/link.sock" --vrnic-socket "$work/rnic0.sock"
else
	start_vrnic "$work" "rnic0,lid=1"
	say "logs in $work"
	"$REPO/qemu-config/run-guest.sh" --initrd "$E2E_IMAGE" --name guest-a --vrnic-socket "$work/rnic0.sock"
fi
