#!/usr/bin/env bash
# End-to-end tests: one vrnic process with three devices; guest A gets two of them
# (vrnic0 = LID 1, vrnic1 = LID 3), guest B one (vrnic0 = LID 2); the guests share a
# point-to-point IP link for perftest's TCP exchange. Every test runs stock tools in the
# guests and is judged on their own output. Ends with "N passed, M failed".
set -euo pipefail
. "$(dirname "$0")/lib.sh"

# shellcheck disable=SC2016 # $PORT and $PEER expand in the guest (tests/guest/suite.sh)
PF='-F -p $PORT'  # perftest: ignore cpufreq warnings, per-test port
BW_N='-n 2000'
LAT_N='-n 1000'
bw_row() { echo "^ *$1 +[0-9]+ +[0-9.]+ +[0-9.]+"; }
lat_row() { echo "^ *$1 +[0-9]+ +[0-9.]+ +[0-9.]+"; }

# NAME|WHERE|CHECKS (';;'-separated extended regexes the client output must match)|SERVER|CLIENT
TESTS=(
	"ibv_devices|one|vrnic0;;vrnic1||ibv_devices"
	"ibv_devinfo|one|state:[[:space:]]+PORT_ACTIVE;;port_lid:[[:space:]]+1\$;;max_qp:[[:space:]]+65536;;max_cq:[[:space:]]+65536;;max_qp_wr:[[:space:]]+4096;;max_cqe:[[:space:]]+65536;;link_layer:[[:space:]]+InfiniBand;;active_mtu:[[:space:]]+4096||ibv_devinfo -v -d vrnic0"
	"ibv_devinfo-own-pci-id|one|vendor_part_id:[[:space:]]+30291;;port_lid:[[:space:]]+3\$||ibv_devinfo -d vrnic1"
	"ibv_rc_pingpong|pair|bytes in [0-9.]+ seconds|ibv_rc_pingpong -d vrnic0 -i 1 -c -n 200 -p \$PORT|ibv_rc_pingpong -d vrnic0 -i 1 -c -n 200 -p \$PORT \$PEER"
)
for size in 65536 1048576; do
	for tool in write read send; do
		TESTS+=("ib_${tool}_bw-$size|pair|$(bw_row $size)|ib_${tool}_bw -d vrnic0 -s $size $BW_N $PF|ib_${tool}_bw -d vrnic0 -s $size $BW_N $PF \$PEER")
		TESTS+=("local-ib_${tool}_bw-$size|local|$(bw_row $size)|ib_${tool}_bw -d vrnic1 -s $size $BW_N $PF|ib_${tool}_bw -d vrnic0 -s $size $BW_N $PF \$PEER")
	done
done
# Completion events (--use_event): perftest refuses them for WRITE ("Events feature not
# available on WRITE verb"), so READ and SEND carry them.
for tool in read send; do
	TESTS+=("ib_${tool}_bw-event|pair|$(bw_row 65536)|ib_${tool}_bw -d vrnic0 -e $BW_N $PF|ib_${tool}_bw -d vrnic0 -e $BW_N $PF \$PEER")
done
TESTS+=("ib_send_lat-event|pair|$(lat_row 8)|ib_send_lat -d vrnic0 -s 8 -e $LAT_N $PF|ib_send_lat -d vrnic0 -s 8 -e $LAT_N $PF \$PEER")
TESTS+=("ib_write_bw-sweep|pair|$(bw_row 8388608)|ib_write_bw -d vrnic0 -a -n 100 $PF|ib_write_bw -d vrnic0 -a -n 100 $PF \$PEER")
TESTS+=("ib_write_bw-imm|pair|$(bw_row 65536)|ib_write_bw -d vrnic0 --write_with_imm $BW_N $PF|ib_write_bw -d vrnic0 --write_with_imm $BW_N $PF \$PEER")
for tool in write read send; do
	TESTS+=("ib_${tool}_bw-q4|pair|$(bw_row 65536)|ib_${tool}_bw -d vrnic0 -q 4 $BW_N $PF|ib_${tool}_bw -d vrnic0 -q 4 $BW_N $PF \$PEER")
	TESTS+=("ib_${tool}_lat|pair|$(lat_row 8)|ib_${tool}_lat -d vrnic0 -s 8 $LAT_N $PF|ib_${tool}_lat -d vrnic0 -s 8 $LAT_N $PF \$PEER")
	TESTS+=("local-ib_${tool}_lat|local|$(lat_row 8)|ib_${tool}_lat -d vrnic1 -s 8 $LAT_N $PF|ib_${tool}_lat -d vrnic0 -s 8 $LAT_N $PF \$PEER")
done

# Many QPs in one process (doorbell pages on demand): 4 KiB WRITEs on 1, 16, 1000 and 4000
# QPs (a benchmark; the check is only that perftest completes and reports bandwidth).
# -n is per QP; perftest caps tx_depth at -n and its one send CQ holds tx_depth * QPs CQEs,
# which must fit MAX_CQE (65536): 64 * 1000 and 16 * 4000 do.
for qn in 1:20000 16:2000 1000:64 4000:16; do
	q=${qn%%:*} n=${qn#*:}
	TESTS+=("ib_write_bw-4k-q$q|pair|$(bw_row 4096)|ib_write_bw -d vrnic0 -s 4096 -q $q -n $n $PF|ib_write_bw -d vrnic0 -s 4096 -q $q -n $n $PF \$PEER")
done

session_begin e2e
build_all
# rnic2 runs with its own PCI device ID: the guest binds it through new_id, the provider
# matches it by name.
start_vrnic "rnic0,lid=1" "rnic1,lid=2" "rnic2,lid=3,device=0x7653"
for g in a b; do printf '%s\n' "${TESTS[@]}" | cut -d'|' -f1,2,4,5 | suite_job "$g"; done
echo "1234 7653" >"$WORK/a/new_id"

say "booting guests A and B; ${#TESTS[@]} tests"
guest_start a --link --dev rnic0 --dev rnic2 --timeout 3000
guest_start b --link --dev rnic1 --timeout 3000
guests_wait || true

pass=0 fail=0
for t in "${TESTS[@]}"; do
	IFS='|' read -r name where checks server client <<<"$t"
	res_c=$WORK/a/results/$name.client
	res_s=$WORK/$([[ $where == pair ]] && echo b || echo a)/results/$name.server
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
			grep -Eq -- "$p" "$res_c.out" || { why="output lacks /$p/"; break; }
		done
	fi
	if [[ -z $why ]]; then
		pass=$((pass + 1))
		echo "PASS $name"
	else
		fail=$((fail + 1))
		echo "FAIL $name: $why"
		echo "  client: $client"
		sed 's/^/    | /' "$res_c.out" 2>/dev/null | tail -n 30
		if [[ $where != one ]]; then
			echo "  server: $server"
			sed 's/^/    | /' "$res_s.out" 2>/dev/null | tail -n 30
		fi
	fi
done
((fail == 0)) || show_tails
echo "e2e: $pass passed, $fail failed"
((fail == 0))
