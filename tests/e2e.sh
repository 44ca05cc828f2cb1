#!/usr/bin/env bash
# End-to-end tests: one vrnic process with six devices. Guest A gets two IB-mode devices
# ($IB0 = LID 1, $IB1 = LID 3), a RoCE-mode one ($ROCE, its MAC = A's virtio-net MAC) and
# one whose MAC no interface has ($ROCE_UNPAIRED); guest B one IB-mode device ($IB0 = LID 2)
# and a RoCE-mode one (B's MAC); the guests share
# a virtio-net link (169.254.100.1 and .2, IPv6 link-local) that carries perftest's TCP
# exchange, ARP and the RoCE GIDs. Every test runs stock tools in the guests and is judged
# on their own output (tests/e2e-roce.sh lists the RoCE and UD ones). Ends with
# "N passed, M failed".
# Usage: tests/e2e.sh [--only REGEX]   (only the tests whose name matches, e.g. 'roce|UD')
set -euo pipefail
. "$(dirname "$0")/lib.sh"

only=''
case ${1:-} in
--only) only=${2:?--only REGEX} ;;
'') ;;
*) echo "usage: tests/e2e.sh [--only REGEX]" >&2; exit 2 ;;
esac

# shellcheck disable=SC2016 # $PORT, $PEER, $IB0, $IB1 expand in the guest (tests/guest/suite.sh)
PF='-F -p $PORT'  # perftest: ignore cpufreq warnings, per-test port
BW_N='-n 2000'
LAT_N='-n 1000'
bw_row() { echo "^ *$1 +[0-9]+ +[0-9.]+ +[0-9.]+"; }
lat_row() { echo "^ *$1 +[0-9]+ +[0-9.]+ +[0-9.]+"; }
# ibv_xsrq_pingpong prints the peer's QPNs and SRQN, then "success" once it has polled every
# completion (it exits 1 on an error completion).
XSRQ_CHECKS='remote: LID [0-9a-f]{4}, QPN RECV [0-9a-f]{6} SEND [0-9a-f]{6}, PSN [0-9a-f]{6}, SRQN [0-9a-f]{6};;^success$;;s:^success$'

# NAME|WHERE|CHECKS|SERVER|CLIENT (WHERE and the commands: tests/guest/suite.sh). CHECKS are
# ';;'-separated extended regexes the client's output must match; "s:" marks one for the
# server's output, "!:" and "s!:" one that must not match.
TESTS=(
	"ibv_devices|one|vrnic0;;vrnic1;;vrnic2;;vrnic3||ibv_devices"
	"ibv_devinfo|one|state:[[:space:]]+PORT_ACTIVE;;port_lid:[[:space:]]+1\$;;max_qp:[[:space:]]+65536;;max_cq:[[:space:]]+65536;;max_qp_wr:[[:space:]]+4096;;max_cqe:[[:space:]]+65536;;link_layer:[[:space:]]+InfiniBand;;active_mtu:[[:space:]]+4096||ibv_devinfo -v -d \$IB0"
	"ibv_devinfo-own-pci-id|one|vendor_part_id:[[:space:]]+30291;;port_lid:[[:space:]]+3\$||ibv_devinfo -d \$IB1"
	"ibv_rc_pingpong|pair|bytes in [0-9.]+ seconds|ibv_rc_pingpong -d \$IB0 -i 1 -c -n 200 -p \$PORT|ibv_rc_pingpong -d \$IB0 -i 1 -c -n 200 -p \$PORT \$PEER"
	# 16 RC QPs whose receives come from one shared receive queue; -c checks the payloads
	"ibv_srq_pingpong|pair|bytes in [0-9.]+ seconds;;s:bytes in [0-9.]+ seconds|ibv_srq_pingpong -d \$IB0 -c -n 50 -p \$PORT|ibv_srq_pingpong -d \$IB0 -c -n 50 -p \$PORT \$PEER"
	"ibv_uc_pingpong|pair|bytes in [0-9.]+ seconds;;s:bytes in [0-9.]+ seconds|ibv_uc_pingpong -d \$IB0 -c -n 200 -p \$PORT|ibv_uc_pingpong -d \$IB0 -c -n 200 -p \$PORT \$PEER"
	# XRC: each side sends through an XRC_SEND QP to the other's XRC SRQ (named in every
	# WQE) via an XRC_RECV QP of an XRC domain; 50 round trips of 4 KiB at MTU 1024
	"ibv_xsrq_pingpong|pair|$XSRQ_CHECKS|ibv_xsrq_pingpong -d \$IB0 -n 50 -p \$PORT|ibv_xsrq_pingpong -d \$IB0 -n 50 -p \$PORT \$PEER"
)
# Atomics (8-byte compare-and-swap and fetch-and-add on the server's memory).
for op in CMP_AND_SWAP FETCH_AND_ADD; do
	TESTS+=("ib_atomic_bw-$op|pair|$(bw_row 8)|ib_atomic_bw -d \$IB0 -A $op $BW_N $PF|ib_atomic_bw -d \$IB0 -A $op $BW_N $PF \$PEER")
	TESTS+=("ib_atomic_lat-$op|pair|$(lat_row 8)|ib_atomic_lat -d \$IB0 -A $op $LAT_N $PF|ib_atomic_lat -d \$IB0 -A $op $LAT_N $PF \$PEER")
done
for size in 65536 1048576; do
	for tool in write read send; do
		TESTS+=("ib_${tool}_bw-$size|pair|$(bw_row $size)|ib_${tool}_bw -d \$IB0 -s $size $BW_N $PF|ib_${tool}_bw -d \$IB0 -s $size $BW_N $PF \$PEER")
		TESTS+=("local-ib_${tool}_bw-$size|local|$(bw_row $size)|ib_${tool}_bw -d \$IB1 -s $size $BW_N $PF|ib_${tool}_bw -d \$IB0 -s $size $BW_N $PF \$PEER")
	done
done
# Completion events (--use_event): perftest refuses them for WRITE ("Events feature not
# available on WRITE verb"), so READ and SEND carry them.
for tool in read send; do
	TESTS+=("ib_${tool}_bw-event|pair|$(bw_row 65536)|ib_${tool}_bw -d \$IB0 -e $BW_N $PF|ib_${tool}_bw -d \$IB0 -e $BW_N $PF \$PEER")
done
TESTS+=("ib_send_lat-event|pair|$(lat_row 8)|ib_send_lat -d \$IB0 -s 8 -e $LAT_N $PF|ib_send_lat -d \$IB0 -s 8 -e $LAT_N $PF \$PEER")
TESTS+=("ib_write_bw-sweep|pair|$(bw_row 8388608)|ib_write_bw -d \$IB0 -a -n 100 $PF|ib_write_bw -d \$IB0 -a -n 100 $PF \$PEER")
TESTS+=("ib_write_bw-imm|pair|$(bw_row 65536)|ib_write_bw -d \$IB0 --write_with_imm $BW_N $PF|ib_write_bw -d \$IB0 --write_with_imm $BW_N $PF \$PEER")
for tool in write read send; do
	TESTS+=("ib_${tool}_bw-q4|pair|$(bw_row 65536)|ib_${tool}_bw -d \$IB0 -q 4 $BW_N $PF|ib_${tool}_bw -d \$IB0 -q 4 $BW_N $PF \$PEER")
	TESTS+=("ib_${tool}_lat|pair|$(lat_row 8)|ib_${tool}_lat -d \$IB0 -s 8 $LAT_N $PF|ib_${tool}_lat -d \$IB0 -s 8 $LAT_N $PF \$PEER")
	TESTS+=("local-ib_${tool}_lat|local|$(lat_row 8)|ib_${tool}_lat -d \$IB1 -s 8 $LAT_N $PF|ib_${tool}_lat -d \$IB0 -s 8 $LAT_N $PF \$PEER")
done

# Counters (SPEC "Counters"), as `rdma statistic show link` shows them in each guest
# (tests/guest/counters.sh reads them before and after): 2000 WRITEs of 64 KiB at MTU 4096
# are 16 request packets each, each acknowledged by one ACK. The requests move by 2000 and
# the bytes by 2000 * 64 KiB, less than twice that (nothing counted twice); "-auto" runs
# with per-QP counters on (auto mode): the link must still sum to the same.
CNT_TX='tx_write_requests=2000:3999 tx_bytes=131072000:262143999 tx_packets=32000 rx_acks=2000:3999 rx_packets=2000'
CNT_RX='rx_write_requests=2000:3999 rx_bytes=131072000:262143999 rx_packets=32000 tx_acks=2000:3999 tx_packets=2000'
for auto in '' -a; do
	cnt="sh /job/counters.sh $auto \$IB0"
	TESTS+=("counters${auto:+-auto}-ib_write_bw|pair|$(bw_row 65536);;^counters: ok\$;;s:^counters: ok\$|$cnt '$CNT_RX' ib_write_bw -d \$IB0 -s 65536 $BW_N $PF|$cnt '$CNT_TX' ib_write_bw -d \$IB0 -s 65536 $BW_N $PF \$PEER")
done

# Many QPs in one process (doorbell pages on demand): 4 KiB WRITEs on 1, 16, 1000 and 4000
# QPs (a benchmark; the check is only that perftest completes and reports bandwidth).
# -n is per QP; perftest caps tx_depth at -n and its one send CQ holds tx_depth * QPs CQEs,
# which must fit MAX_CQE (65536): 64 * 1000 and 16 * 4000 do.
for qn in 1:20000 16:2000 1000:64 4000:16; do
	q=${qn%%:*} n=${qn#*:}
	TESTS+=("ib_write_bw-4k-q$q|pair|$(bw_row 4096)|ib_write_bw -d \$IB0 -s 4096 -q $q -n $n $PF|ib_write_bw -d \$IB0 -s 4096 -q $q -n $n $PF \$PEER")
done

. "$(dirname "$0")/e2e-roce.sh"
TESTS+=("${ROCE_TESTS[@]}")
. "$(dirname "$0")/e2e-nvmeof.sh"
TESTS+=("${NVMEOF_TESTS[@]}")
. "$(dirname "$0")/e2e-pcap.sh"
TESTS+=("${PCAP_TESTS[@]}")
if [[ -n $only ]]; then
	sel=()
	for t in "${TESTS[@]}"; do [[ ! ${t%%|*} =~ $only ]] || sel+=("$t"); done
	((${#sel[@]})) || { echo "no test name matches /$only/" >&2; exit 2; }
	TESTS=("${sel[@]}")
fi

session_begin e2e
build_all
# rnic0 is traced from start-up into rnic0.trace (checked after the guests: trace_check).
# rnic2 runs with its own PCI device ID: the guest binds it through new_id, the provider
# matches it by name. rnic3 and rnic4 are RoCE-mode devices paired with A's and B's
# virtio-net interfaces; rnic5's MAC matches no interface.
start_vrnic "rnic0,lid=1,trace=$WORK/rnic0.trace" "rnic1,lid=2" "rnic2,lid=3,device=0x7653" "$(roce_spec a rnic3)" "$(roce_spec b rnic4)" \
	"rnic5,link=eth,mac=$UNPAIRED_MAC"
for g in a b; do printf '%s\n' "${TESTS[@]}" | cut -d'|' -f1,2,4,5 | suite_job "$g"; done
nvmeof_job_files "$WORK/a" "$WORK/b"
echo "1234 7653" >"$WORK/a/new_id"

# While the guests run, the host sees their drivers through the control socket: rnic0 (A)
# and rnic1 (B) with a VMM, enabled, with the driver's EQs. Checked every second until it
# holds or the guests are done.
ctl_check() {
	local out
	while :; do
		out=$(vrnic_ctl --json devices 2>&1) || { echo "vrnic ctl devices failed: $out"; return 1; }
		local ready=1 dev
		for dev in rnic0 rnic1; do
			grep -Eq "\"name\":\"$dev\"[^}]*\"vmm_connected\":true,\"state\":\"enabled\"" <<<"$out" || ready=0
		done
		if ((ready)); then
			out=$(vrnic_ctl --json objects rnic0 eqs 2>&1) || { echo "vrnic ctl objects failed: $out"; return 1; }
			grep -q '"async":true' <<<"$out" || { echo "no async EQ on rnic0: $out"; return 1; }
			vrnic_ctl devices
			return 0
		fi
		local g running=0
		for g in "${GUEST_PID[@]}"; do kill -0 "$g" 2>/dev/null && running=1; done
		((running)) || { echo "the guests ended before their devices were enabled: $out"; return 1; }
		sleep 1
	done
}

# After the guests: rnic0's trace file (trace=PATH) holds A's driver probe and a perftest
# WRITE run, decoded: the device enabled, CREATE_QP commands that succeeded, RDMA_WRITE
# WQEs of 64 KiB and their successful CQEs (the writer may drop events under load; these
# recur, so some of each stay).
trace_check() {
	local f=$WORK/rnic0.trace p
	[[ -s $f ]] || { echo "no trace file $f"; return 1; }
	for p in '"kind":"device","state":"ENABLED"' \
		'"kind":"admin","opcode":"CREATE_QP",.*"status":"SUCCESS"' \
		'"kind":"wqe",.*"opcode":"RDMA_WRITE",.*"length":65536,' \
		'"kind":"cqe",.*"opcode":"RDMA_WRITE","status":"SUCCESS"'; do
		grep -Eq -m1 -- "$p" "$f" || { echo "$f has no line matching /$p/"; return 1; }
	done
	echo "$(wc -l <"$f") lines; e.g.:"
	grep -E -m1 '"kind":"wqe",.*"opcode":"RDMA_WRITE",.*"length":65536,' "$f"
}

# After the guests ran: the stock guest stack (vrnic.ko, libvrnic) broke no hw-spec contract
# rule on any device (SPEC "Contract checking"; the devices run in the default warn mode).
contract_check() {
	local dev out rc=0
	for dev in rnic0 rnic1 rnic2 rnic3 rnic4 rnic5; do
		out=$(vrnic_ctl --json contract "$dev" 2>&1) || { echo "vrnic ctl contract $dev failed: $out"; return 1; }
		if ! grep -q '"mode":"warn","violations":0,' <<<"$out"; then
			rc=1
			vrnic_ctl contract "$dev" || true
		fi
	done
	((rc == 0)) && echo "no contract rule broken on rnic0..rnic5"
	return "$rc"
}

say "booting guests A and B; ${#TESTS[@]} tests"
t0=$SECONDS
guest_start a --link --dev rnic0 --dev rnic2 --dev rnic3 --dev rnic5 --timeout 3000
guest_start b --link --dev rnic1 --dev rnic4 --timeout 3000
pcap_watch &
ctl_rc=0
ctl_check >"$WORK/ctl-check.out" 2>&1 || ctl_rc=$?
guests_wait || true
say "guests done after $((SECONDS - t0)) s"
contract_rc=0
contract_check >"$WORK/contract-check.out" 2>&1 || contract_rc=$?

pass=0 fail=0
# host_result NAME WHERE RC OUTPUT: a host-side check's verdict and its output.
host_result() {
	if (($3 == 0)); then
		pass=$((pass + 1))
		echo "PASS $1 ($2)"
	else
		fail=$((fail + 1))
		echo "FAIL $1 ($2)"
	fi
	sed 's/^/    | /' "$4"
}
host_result contract-rules "host, after the guests ran" "$contract_rc" "$WORK/contract-check.out"
host_result vrnic-ctl-devices "host, while the guests run" "$ctl_rc" "$WORK/ctl-check.out"
if [[ -z $only || ib_write_bw-65536 =~ $only ]]; then
	trace_rc=0
	trace_check >"$WORK/trace-check.out" 2>&1 || trace_rc=$?
	host_result vrnic-trace-file "host: rnic0's trace=PATH after the guests" "$trace_rc" "$WORK/trace-check.out"
fi
for t in "${TESTS[@]}"; do
	IFS='|' read -r name where checks server client <<<"$t"
	res_c=$WORK/a/results/$name.client
	res_s=$WORK/$([[ $where == pair* ]] && echo b || echo a)/results/$name.server
	why=''
	if [[ ! -f $res_c.rc ]]; then
		why="did not run (see the guests' consoles)"
	elif [[ $(<"$res_c.rc") != 0 ]]; then
		why="client exited with $(<"$res_c.rc")"
	elif [[ $where != one && $(cat "$res_s.rc" 2>/dev/null) != 0 ]]; then
		why="server exited with $(cat "$res_s.rc" 2>/dev/null || echo '(none)')"
	else
		IFS=$'\n' read -r -d '' -a pats < <(printf '%s\0' "${checks//;;/$'\n'}") || true
		for p in "${pats[@]}"; do
			f=$res_c.out side=client
			[[ $p != s:* && $p != s!:* ]] || { f=$res_s.out side=server p=${p#s}; }
			if [[ $p == '!:'* ]]; then
				! grep -Eq -- "${p#!:}" "$f" || { why="$side output has /${p#!:}/"; break; }
			else
				grep -Eq -- "${p#:}" "$f" || { why="$side output lacks /${p#:}/"; break; }
			fi
		done
	fi
	if [[ -z $why ]]; then
		pass=$((pass + 1))
		ms=$(cat "$res_c.ms" 2>/dev/null || echo 0)
		echo "PASS $name (client $((ms / 1000)).$((ms % 1000 / 100)) s)"
	else
		fail=$((fail + 1))
		echo "FAIL $name: $why"
		for r in a b; do
			[[ ! -f $WORK/$r/results/$name.note ]] || sed "s/^/  guest $r: /" "$WORK/$r/results/$name.note"
		done
		echo "  client: $client"
		sed 's/^/    | /' "$res_c.out" 2>/dev/null | tail -n 30
		if [[ $where != one ]]; then
			echo "  server: $server"
			sed 's/^/    | /' "$res_s.out" 2>/dev/null | tail -n 30
		fi
	fi
done
pcap_results
((fail == 0)) || show_tails
echo "e2e: $pass passed, $fail failed"
((fail == 0))
