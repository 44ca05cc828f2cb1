#!/usr/bin/env bash
# Regenerates the Soft-RoCE capture the RoCEv2 codec is tested against
# (device/src/wire/fixtures/softroce.pcap; not run by `make test`). Two guests run Linux
# Soft-RoCE (rdma_rxe on their virtio-net, tests/guest/softroce.sh) over a point-to-point
# QEMU `-netdev stream` link (MTU 9000: rxe's active MTU 4096; IPv4 169.254.100.1/.2 and
# IPv6 fd00:64::1/::2); guest a's frames are recorded (QEMU filter-dump) while the tools
# run between them (b serves, a is the client): ibv_{rc,uc,ud}_pingpong, ib_{write,read,
# send,atomic}_bw with and without rdma_cm (-R), UC, UD, WRITE with immediate, rping -V,
# ucmatose, SEND with Immediate and a remote access NAK (pyverbs), at MTU 1024 and 4096,
# sizes of several packets and of each pad count, over the IPv4 and the IPv6 GID. Then
# the capture stops, ib_write_bw and ib_write_lat measure Soft-RoCE to Soft-RoCE and ping
# the link (the figures it prints). The raw capture is trimmed to a bounded number of
# frames per class (`cargo run -p vrnic --example pcap_trim`). About 8 minutes.
# Usage: tests/softroce-capture.sh [--out FILE] [--raw FILE] [--only REGEX]
#   --out FILE   the trimmed capture       [device/src/wire/fixtures/softroce.pcap]
#   --raw FILE   keep the whole capture there too
#   --only REGEX run only the tests whose name matches (the capture-off step and the
#                figures only if they match too); needs --out
set -euo pipefail
. "$(dirname "$0")/lib.sh"

out=$REPO/device/src/wire/fixtures/softroce.pcap raw='' only=''
while (($#)); do
	case $1 in
	--out) out=$(realpath -m "${2:?}"); shift 2 ;;
	--raw) raw=$(realpath -m "${2:?}"); shift 2 ;;
	--only) only=${2:?}; shift 2 ;;
	*) sed -n '2,18s/^# \{0,1\}//p' "$0" >&2; exit 2 ;;
	esac
done
[[ -z $only || $out != "$REPO/device/src/wire/fixtures/softroce.pcap" ]] ||
	{ echo "--only needs --out: the fixture is the whole run's capture" >&2; exit 2; }

# shellcheck disable=SC2016 # $RXE, $GID4, $PEER... expand in the guest (tests/guest/softroce.sh)
{
	D='-d $RXE' PF='-F -p $PORT' N='-n 5'
	bw_row() { echo "^ *$1 +[0-9]+ +[0-9.]+ +[0-9.]+"; }
	TESTS=()
	# NAME|WHERE|CHECKS|SERVER|CLIENT, as in tests/e2e.sh (tests/guest/suite.sh).
	for v in 4 6; do
		g="\$GID$v"
		# ibv_*_pingpong -c checks the data; 2501 B at MTU 1024: first, middle, last (pad 3);
		# 9003 B at 4096 (pad 1); UD: one datagram per message.
		TESTS+=("rc_pingpong-1024-v$v|pair|bytes in|ibv_rc_pingpong $D -g $g -m 1024 -s 2501 -n 3 -c -p \$PORT|ibv_rc_pingpong $D -g $g -m 1024 -s 2501 -n 3 -c -p \$PORT \$PEER")
		TESTS+=("rc_pingpong-4096-v$v|pair|bytes in|ibv_rc_pingpong $D -g $g -m 4096 -s 9003 -n 2 -c -p \$PORT|ibv_rc_pingpong $D -g $g -m 4096 -s 9003 -n 2 -c -p \$PORT \$PEER")
		TESTS+=("uc_pingpong-1024-v$v|pair|bytes in|ibv_uc_pingpong $D -g $g -m 1024 -s 2502 -n 3 -c -p \$PORT|ibv_uc_pingpong $D -g $g -m 1024 -s 2502 -n 3 -c -p \$PORT \$PEER")
		TESTS+=("ud_pingpong-v$v|pair|bytes in|ibv_ud_pingpong $D -g $g -s 1001 -n 3 -c -p \$PORT|ibv_ud_pingpong $D -g $g -s 1001 -n 3 -c -p \$PORT \$PEER")
		for tool in write read send; do
			TESTS+=("${tool}_bw-1024-3001-v$v|pair|$(bw_row 3001)|ib_${tool}_bw $D -x $g -m 1024 -s 3001 $N $PF|ib_${tool}_bw $D -x $g -m 1024 -s 3001 $N $PF \$PEER")
			TESTS+=("${tool}_bw-4096-9002-v$v|pair|$(bw_row 9002)|ib_${tool}_bw $D -x $g -s 9002 $N $PF|ib_${tool}_bw $D -x $g -s 9002 $N $PF \$PEER")
			TESTS+=("${tool}_bw-5-v$v|pair|$(bw_row 5)|ib_${tool}_bw $D -x $g -s 5 $N $PF|ib_${tool}_bw $D -x $g -s 5 $N $PF \$PEER")
		done
		TESTS+=("write_imm_bw-1024-3003-v$v|pair|$(bw_row 3003)|ib_write_bw $D -x $g --write_with_imm -m 1024 -s 3003 $N $PF|ib_write_bw $D -x $g --write_with_imm -m 1024 -s 3003 $N $PF \$PEER")
		TESTS+=("write_imm_bw-6-v$v|pair|$(bw_row 6)|ib_write_bw $D -x $g --write_with_imm -s 6 $N $PF|ib_write_bw $D -x $g --write_with_imm -s 6 $N $PF \$PEER")
		for op in CMP_AND_SWAP FETCH_AND_ADD; do
			TESTS+=("atomic_bw-$op-v$v|pair|$(bw_row 8)|ib_atomic_bw $D -x $g -A $op $N $PF|ib_atomic_bw $D -x $g -A $op $N $PF \$PEER")
		done
		# UC WRITE and SEND (perftest -c UC).
		for tool in write send; do
			TESTS+=("${tool}_bw-UC-1024-3001-v$v|pair|$(bw_row 3001)|ib_${tool}_bw $D -x $g -c UC -m 1024 -s 3001 $N $PF|ib_${tool}_bw $D -x $g -c UC -m 1024 -s 3001 $N $PF \$PEER")
		done
		TESTS+=("send_bw-UD-v$v|pair|$(bw_row 1001)|ib_send_bw $D -x $g -c UD -s 1001 $N $PF|ib_send_bw $D -x $g -c UD -s 1001 $N $PF \$PEER")
	done
	# rdma_cm: CM MADs on QP1 (REQ/REP/RTU, DREQ/DREP; SIDR for UD).
	for tool in write read send; do
		TESTS+=("${tool}_bw-R-v4|pair|$(bw_row 3001)|ib_${tool}_bw $D -R -s 3001 $N $PF|ib_${tool}_bw $D -R -s 3001 $N $PF \$PEER")
	done
	TESTS+=("atomic_bw-R-v4|pair|$(bw_row 8)|ib_atomic_bw $D -R $N $PF|ib_atomic_bw $D -R $N $PF \$PEER")
	TESTS+=("send_bw-UD-R-v4|pair|$(bw_row 1001)|ib_send_bw $D -R -c UD -s 1001 $N $PF|ib_send_bw $D -R -c UD -s 1001 $N $PF \$PEER")
	for tool in write send; do
		TESTS+=("${tool}_bw-R-v6|pair|$(bw_row 3001)|ib_${tool}_bw $D -R --ipv6-addr -s 3001 $N $PF|ib_${tool}_bw $D -R --ipv6-addr -s 3001 $N $PF \$PEER6")
	done
	for v in 4 6; do
		peer="\$PEER" me="\$MYIP"
		[[ $v == 4 ]] || peer="\$PEER6" me="\$MYIP6"
		TESTS+=("rping-v$v|pair|rdma-ping-3: |rping -s -a $me -p \$PORT -V -C 4 -S 3000|rping -c -a $peer -p \$PORT -V -C 4 -S 3000 -v")
		TESTS+=("ucmatose-v$v|pair|^test complete|ucmatose -b $me -p \$PORT -C 2 -S 2000|ucmatose -s $peer -p \$PORT -C 2 -S 2000")
	done
	# RNR NAKs: one receive posted at a time on the server, 20 SENDs in flight.
	TESTS+=("send_bw-rnr-v4|pair|$(bw_row 5)|ib_send_bw $D -x \$GID4 -r 1 -s 5 -n 20 $PF|ib_send_bw $D -x \$GID4 -r 1 -s 5 -n 20 $PF \$PEER")
	# A CM REJ: a connection request to a port nobody listens on (b's CM rejects it).
	TESTS+=("rping-reject-v4|pair|REJECTED|true|! rping -c -a \$PEER -p 9 -C 1 -v")
	# SEND with Immediate (RC First/Middle/Last, Only; UD) and a remote access NAK (a WRITE
	# to an R_Key b never registered): pyverbs, tests/guest/softroce_verbs.py.
	for v in 4 6; do
		peer="\$PEER"
		[[ $v == 4 ]] || peer="\$PEER6"
		TESTS+=("verbs-imm-nak-v$v|pair|remote access error|python3 /job/softroce_verbs.py server \$RXE \$GID$v \$PORT|python3 /job/softroce_verbs.py client \$RXE \$GID$v \$PORT $peer")
	done
	# Figures, without the capture: Soft-RoCE to Soft-RoCE, IPv4 GID, MTU 4096.
	TESTS+=("capture-off|pair|^capture off|true|capture-off")
	# The link's own round trip (ICMP through both guests' kernels and QEMU), for scale.
	TESTS+=("figure-ping|pair|packet loss|true|busybox ping -c 10 \$PEER")
	TESTS+=("figure-ib_write_bw|pair|$(bw_row 65536)|ib_write_bw $D -x \$GID4 -s 65536 -n 2000 $PF|ib_write_bw $D -x \$GID4 -s 65536 -n 2000 $PF \$PEER")
	TESTS+=("figure-ib_write_lat|pair|^ *8 +1000 |ib_write_lat $D -x \$GID4 -s 8 -n 1000 $PF|ib_write_lat $D -x \$GID4 -s 8 -n 1000 $PF \$PEER")
}
if [[ -n $only ]]; then
	sel=()
	for t in "${TESTS[@]}"; do [[ ! ${t%%|*} =~ $only ]] || sel+=("$t"); done
	((${#sel[@]})) || { echo "no test name matches /$only/" >&2; exit 2; }
	TESTS=("${sel[@]}")
fi

session_begin softroce
bash "$REPO/qemu-config/provision.sh" qemu guest
GUEST_IMAGE=$CACHE/guest.cpio # stock: rdma_rxe, librxe, perftest; no vrnic
for g in a b; do printf '%s\n' "${TESTS[@]}" | cut -d'|' -f1,2,4,5 | softroce_job "$g"; done

# qmp CMD ARGS-JSON: one QMP command to guest a's QEMU.
qmp() {
	python3 - "$WORK/a-qmp.sock" "$1" "$2" <<-'EOF'
		import json, socket, sys
		s = socket.socket(socket.AF_UNIX)
		s.connect(sys.argv[1])
		f = s.makefile("rw")
		f.readline()
		for cmd in ({"execute": "qmp_capabilities"}, {"execute": sys.argv[2], "arguments": json.loads(sys.argv[3])}):
		    f.write(json.dumps(cmd) + "\n")
		    f.flush()
		    while True:
		        r = json.loads(f.readline())
		        if "return" in r or "error" in r:
		            break
		    if "error" in r:
		        sys.exit(f"QMP {cmd['execute']}: {r['error']}")
	EOF
}

say "booting two Soft-RoCE guests (${#TESTS[@]} tests)"
t0=$SECONDS
guest_start a --link --mem 1G --timeout 3600 --pcap "$WORK/raw.pcap" --qmp "$WORK/a-qmp.sock"
guest_start b --link --mem 1G --timeout 3600
while guest_running a; do
	if [[ -e $WORK/a/capture-off && ! -e $WORK/a/capture-is-off ]]; then
		if qmp qom-set '{"path": "f0", "property": "status", "value": "off"}'; then
			say "capture off"
		else
			say "could not switch the capture off: the figures ran with it"
		fi
		touch "$WORK/a/capture-is-off"
	fi
	sleep 1
done
guests_wait || true
say "guests done after $((SECONDS - t0)) s"

# Each test: passed when both ends exited 0 and the client's output matches CHECKS.
passed=0 failed=0
for t in "${TESTS[@]}"; do
	IFS='|' read -r name _ checks _ <<<"$t"
	r=$WORK/a/results/$name
	ok=1
	[[ $(cat "$r.client.rc" 2>/dev/null) == 0 ]] || ok=0
	[[ $(cat "$WORK/b/results/$name.server.rc" 2>/dev/null) == 0 ]] || ok=0
	grep -Eq -- "$checks" "$r.client.out" 2>/dev/null || ok=0
	if ((ok)); then
		passed=$((passed + 1))
		echo "ok     $name"
	else
		failed=$((failed + 1))
		echo "FAILED $name (client $(cat "$r.client.rc" 2>/dev/null || echo -), server $(cat "$WORK/b/results/$name.server.rc" 2>/dev/null || echo -))"
		tail -n 5 "$r.client.out" "$WORK/b/results/$name.server.out" 2>/dev/null | sed 's/^/    | /'
	fi
done
for f in figure-ib_write_bw figure-ib_write_lat figure-ping; do
	[[ -f $WORK/a/results/$f.client.out ]] || continue
	echo "== $f (client, guest a)"
	grep -E '^ *(#bytes|[0-9]+ +[0-9]+ )|^rtt|round-trip|packet loss' "$WORK/a/results/$f.client.out" || true
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
sed -n 's/^softroce: /guest a: /p' "$WORK/a/output.log" 2>/dev/null || true
cat "$WORK/a/versions" 2>/dev/null || true
[[ -s $WORK/raw.pcap ]] || { say "no capture"; show_tails; exit 1; }
[[ -z $raw ]] || cp "$WORK/raw.pcap" "$raw"
mkdir -p "$(dirname "$out")"
(cd "$REPO" && cargo run -q -p vrnic --example pcap_trim -- "$WORK/raw.pcap" "$out")
echo "$passed passed, $failed failed"
((failed == 0)) || { show_tails; exit 1; }
