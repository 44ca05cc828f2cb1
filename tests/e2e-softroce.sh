#!/usr/bin/env bash
# vrnic against Linux Soft-RoCE on one wire. One `vrnic serve`: a RoCE-mode device ra paired
# with guest A's interface (net=PATH, vhost-user-net), and a plain Ethernet port s (--net) on
# the same switch for guest S, which runs the stock Debian image with Linux Soft-RoCE
# (rdma_rxe on its virtio-net: tests/guest/softroce.sh). S's GIDs are held by no vrnic
# device, so A's RDMA to S leaves ra as RoCEv2 frames (Route::Wire) and crosses the switch
# to S's virtio-net; S's frames come back the same way. Both guests run the same test list
# (tests/guest/suite.sh), once with vrnic as the client and Soft-RoCE serving
# (vrnic-client-*, "pair"), once the other way round (vrnic-server-*, "rev"): ibv_rc_pingpong
# -c, ib_write/read/send_bw GID-addressed (-x), the same through rdma_cm (-R), ib_atomic_bw
# -R, ib_send_bw -c UD -R, rping -V and ucmatose. Each test passes when both ends exited 0
# and the client printed its result line; the bandwidth and latency figures (ib_write_bw,
# ib_write_lat, both ways) are printed, never asserted. One boot of the two guests serves
# every test. Both eth0 MTUs are 1500 (RoCE active MTU 1024 on both sides).
# The test set is tests/interop.sh's.
# Usage: tests/e2e-softroce.sh [--ready | --except REGEX | --rxe-pair]
#   --ready         leave out the tests that need what vrnic's wire lacks yet (INTEROP_PENDING)
#   --except REGEX  leave out the tests whose name matches
#   --rxe-pair      the figures only, for comparison, with guest A running Soft-RoCE too
#                   (on a --net port of the same switch): Soft-RoCE to Soft-RoCE
# Prints one PASS/FAIL line per check and "e2e-softroce: N passed, M failed".
set -euo pipefail
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/interop.sh"

except='' rxe_pair=''
case ${1:-} in
--ready) except=$INTEROP_PENDING ;;
--except) except=${2:?--except REGEX} ;;
--rxe-pair) rxe_pair=1 ;;
'') ;;
*) echo "usage: tests/e2e-softroce.sh [--ready | --except REGEX | --rxe-pair]" >&2; exit 2 ;;
esac

# TESTS: NAME|WHERE|CHECK|SERVER|CLIENT; guest a is A (vrnic), guest b is S (Soft-RoCE).
TESTS=()
if [[ -n $rxe_pair ]]; then
	for t in "${INTEROP_FIGURES[@]}"; do TESTS+=("rxe-rxe-${t%%|*}|pair|${t#*|}"); done
else
	for t in "${INTEROP_MATRIX[@]}" "${INTEROP_FIGURES[@]}"; do
		TESTS+=("vrnic-client-${t%%|*}|pair|${t#*|}" "vrnic-server-${t%%|*}|rev|${t#*|}")
	done
fi
if [[ -n $except ]]; then
	sel=()
	for t in "${TESTS[@]}"; do [[ ${t%%|*} =~ $except ]] || sel+=("$t"); done
	TESTS=("${sel[@]}")
fi
((${#TESTS[@]})) || { echo "--except /$except/ leaves no test" >&2; exit 2; }

session_begin softroce-interop
build_all
if [[ -n $rxe_pair ]]; then
	VRNIC_SERVE_ARGS="${VRNIC_SERVE_ARGS:-} --net name=ra,socket=$WORK/ra.net,mac=$LINK_A_MAC --net name=s,socket=$WORK/s.net,mac=$LINK_B_MAC" \
		start_vrnic
else
	VRNIC_SERVE_ARGS="${VRNIC_SERVE_ARGS:-} --net name=s,socket=$WORK/s.net,mac=$LINK_B_MAC" \
		start_vrnic "ra,link=eth,mac=$LINK_A_MAC,net=$WORK/ra.net"
fi
wait_sockets "$WORK/vrnic.log" "$WORK/ra.net" "$WORK/s.net"
printf '%s\n' "${TESTS[@]}" | cut -d'|' -f1,2,4,5 | SOFTROCE_MTU=1500 softroce_job b
a_opts=(--dev ra)
if [[ -n $rxe_pair ]]; then
	printf '%s\n' "${TESTS[@]}" | cut -d'|' -f1,2,4,5 | SOFTROCE_MTU=1500 softroce_job a
	a_opts=(--initrd "$CACHE/guest.cpio")
else
	printf '%s\n' "${TESTS[@]}" | cut -d'|' -f1,2,4,5 | suite_job a
fi

pair_name='vrnic <-> Soft-RoCE'
[[ -z $rxe_pair ]] || pair_name='Soft-RoCE <-> Soft-RoCE'
say "booting guest A and guest S ($pair_name); ${#TESTS[@]} tests"
t0=$SECONDS
guest_start b --ip "$LINK_B_IP/24" --mac "$LINK_B_MAC" --vhost-net "$WORK/s.net" --initrd "$CACHE/guest.cpio" --timeout 1500
guest_start a "${a_opts[@]}" --ip "$LINK_A_IP/24" --mac "$LINK_A_MAC" --vhost-net "$WORK/ra.net" --timeout 1500
guests_wait || show_tails
say "guests done after $((SECONDS - t0)) s"
load=$(cut -d' ' -f1-3 /proc/loadavg)
vrnic_ctl counters ra >"$WORK/counters.txt" 2>&1 || true
stop_vrnic

# $out: each test's exit statuses and both ends' output, every line prefixed with the test's
# name and side; then the guests' reports and vrnic's port log lines.
out=$WORK/out.log
for t in "${TESTS[@]}"; do
	IFS='|' read -r name where _ <<<"$t"
	interop_out "$name" "$where" "$WORK/a" "$WORK/b"
done >"$out"
{
	for role in a b; do
		echo "--- guest $role"
		grep -vE '^== ' "$WORK/$role/output.log" 2>/dev/null || { echo "no job output; console tail:"; tail -n 40 "$WORK/$role/console.log"; }
		echo "oopses $(grep -cE 'Oops|BUG:|WARNING:' "$WORK/$role/console.log" || true)"
	done
	echo "--- vrnic ctl counters ra"
	sed 's/^/counters: /' "$WORK/counters.txt"
	echo "--- vrnic log"
	grep -E 'net port|wire' "$WORK/vrnic.log" || true
} >>"$out"
cat "$out"

pass=0 fail=0
check soft-roce-up '^softroce: rxe0 on eth0 \(mtu 1500\), GID4=[0-9]+ '
for t in "${TESTS[@]}"; do
	IFS='|' read -r name _ pattern _ <<<"$t"
	interop_check "$name" "$pattern"
done
check_guests_clean a b
echo "figures, $pair_name across vrnic's switch (TCG guests; load average $load at the end):"
grep -E '^(vrnic-(client|server)|rxe-rxe)-figure-ib_write_(bw|lat) client: +(#bytes|[0-9]+ +[0-9]+ )' "$out" || echo "  none"
echo "e2e-softroce: $pass passed, $fail failed"
((fail == 0))
