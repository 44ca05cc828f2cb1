#!/usr/bin/env bash
# Start one vrnic process and one or two guests attached to it, for interactive use.
# Usage: qemu-config/launch.sh [--guests 1|2] [--serve-args "ARGS"]
#   Builds vrnic, vrnic.ko and the provider into the guest image (cached), starts
#   `vrnic serve` with one device per guest (LIDs 1 and 2), and boots the guests linked by a
#   point-to-point network (169.254.100.1 and .2); with two guests each also gets a RoCE-mode
#   device (vrnic1) paired with its interface. Guest A gets this terminal (a root shell;
#   `busybox poweroff -f` or Ctrl-A X ends it, and with it everything). Guest B runs perftest
#   servers with default options, forever: ib_write_bw on port 18515, ib_read_bw 18516,
#   ib_send_bw 18517, ib_write_lat 18518, ib_read_lat 18519, ib_send_lat 18520. In guest A:
#     ibv_devinfo
#     ib_write_bw -d vrnic0 -p 18515 169.254.100.2
#     rping -c -a 169.254.100.2 -v -C 3     (guest B runs `rping -s -P` on vrnic1, RoCE)
#   With --guests 1, run both ends in guest A over loopback:
#     ib_write_bw -d vrnic0 & sleep 1; ib_write_bw -d vrnic0 127.0.0.1
set -euo pipefail
. "$(dirname "$0")/../tests/lib.sh"

guests=2
while (($#)); do
	case $1 in
	--guests) guests=${2:?}; shift 2 ;;
	--serve-args) export VRNIC_SERVE_ARGS=${2:?}; shift 2 ;;
	-h | --help) sed -n '2,16s/^# \{0,1\}//p' "$0"; exit 0 ;;
	*) echo "unknown option: $1 (try --help)" >&2; exit 2 ;;
	esac
done
[[ $guests == 1 || $guests == 2 ]] || { echo "--guests must be 1 or 2" >&2; exit 2; }

VRNIC_KEEP=1 # the logs outlive the session
session_begin launch
build_all
if ((guests == 2)); then
	start_vrnic "rnic0,lid=1" "rnic1,lid=2" "$(roce_spec a roce0)" "$(roce_spec b roce1)"
	say "logs in $WORK; guest B console: $WORK/b/console.log"
	mkdir -p "$WORK/b"
	cat >"$WORK/b/run.sh" <<'JOB'
#!/bin/sh
port=18515
for tool in ib_write_bw ib_read_bw ib_send_bw ib_write_lat ib_read_lat ib_send_lat; do
	(while :; do $tool -d vrnic0 -F -p $port >/dev/null 2>&1; done) &
	port=$((port + 1))
done
(while :; do rping -s -P -a 169.254.100.2 >/dev/null 2>&1; sleep 1; done) &
wait
JOB
	guest_start b --link --dev rnic1 --dev roce1
	guest_run a --link --dev rnic0 --dev roce0
else
	start_vrnic "rnic0,lid=1"
	say "logs in $WORK"
	guest_run a --dev rnic0
fi
