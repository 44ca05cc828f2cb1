# The interoperability test set of issue 11 (sourced by tests/e2e-softroce.sh and
# tests/e2e-twohost.sh): RDMA between two RoCE devices over the RoCEv2 wire, with the
# stock tools. INTEROP_MATRIX rows are NAME|CHECK|SERVER|CLIENT: CHECK is the extended
# regex (anchored) the client's output must match; the commands expand in the guests
# (tests/guest/suite.sh: $PORT, $PEER, $MYIP), where the device and its RoCE v2 GID index
# of the guest's IPv4 address are rxe0 and $GID4 in a Soft-RoCE guest
# (tests/guest/softroce.sh), $ROCE and $GIDX in a vrnic guest (tests/guest/devices.sh).
# shellcheck shell=bash disable=SC2016,SC2034 # expanded in the guests; the arrays are for the scripts that source this

# INTEROP_PENDING: the tests that need what vrnic's wire does not carry yet, as a regex on
# their names; they run, and fail, when a script runs its whole set, and `--ready` (as
# tests/run-all.sh runs them) leaves them out. Empty: the wire carries the whole set
# (atomics were the last).
INTEROP_PENDING=''

{
	D='-d ${RXE:-$ROCE}' G='${GID4:-$GIDX}' PF='-F -p $PORT'
	bw_row() { echo "^ *$1 +[0-9]+ +[0-9.]+ +[0-9.]+"; }
	INTEROP_MATRIX=(
		# -c: each side checks every byte it received
		"ibv_rc_pingpong|^[0-9]+ bytes in [0-9.]+ seconds|ibv_rc_pingpong $D -g $G -c -n 100 -s 4096 -p \$PORT|ibv_rc_pingpong $D -g $G -c -n 100 -s 4096 -p \$PORT \$PEER"
	)
	# READs and atomics: perftest gives each QP's max_rd_atomic the peer's count of
	# outstanding reads (-o; by default the device's maximum: rxe 128, vrnic 16), and a
	# device refuses more than its own maximum (vrnic: MODIFY_QP BAD_FIELD, as mlx4 and
	# mlx5 answer EINVAL): -o 16 on both ends.
	for tool in write read send; do
		o=''
		[[ $tool != read ]] || o='-o 16 '
		# GID-addressed (-x), the QPs connected over perftest's TCP exchange
		INTEROP_MATRIX+=("ib_${tool}_bw-x|$(bw_row 65536)|ib_${tool}_bw $D -x $G -s 65536 -n 200 $o$PF|ib_${tool}_bw $D -x $G -s 65536 -n 200 $o$PF \$PEER")
		# through rdma_cm (CM MADs on QP1)
		INTEROP_MATRIX+=("ib_${tool}_bw-R|$(bw_row 65536)|ib_${tool}_bw $D -R -s 65536 -n 200 $o$PF|ib_${tool}_bw $D -R -s 65536 -n 200 $o$PF \$PEER")
	done
	INTEROP_MATRIX+=(
		"ib_atomic_bw-R|$(bw_row 8)|ib_atomic_bw $D -R -n 200 -o 16 $PF|ib_atomic_bw $D -R -n 200 -o 16 $PF \$PEER"
		# UD: a datagram that finds no room is gone, and perftest's server waits for every
		# one. 200 is fewer than the receives it posts (512) and than the frames vrnic's
		# port holds for a guest that drains slowly (net::vhost::BACKLOG, 256: a burst of
		# 500 from vrnic lost 240 on the way into the Soft-RoCE guest under TCG).
		"ib_send_bw-UD-R|^ *[0-9]+ +200 +[0-9.]+ +[0-9.]+|ib_send_bw $D -c UD -R -n 200 $PF|ib_send_bw $D -c UD -R -n 200 $PF \$PEER"
		# -V: the server verifies every ping's data
		"rping|^ping data: rdma-ping-9: |rping -s -a \$MYIP -p \$PORT -V -C 10 -S 3000|rping -c -a \$PEER -p \$PORT -V -C 10 -S 3000 -v"
		"ucmatose|^test complete|ucmatose -b \$MYIP -p \$PORT -C 10 -S 2000|ucmatose -s \$PEER -p \$PORT -C 10 -S 2000"
	)
	# Figures: printed, never asserted beyond their result line.
	INTEROP_FIGURES=(
		"figure-ib_write_bw|$(bw_row 65536)|ib_write_bw $D -x $G -s 65536 -n 1000 $PF|ib_write_bw $D -x $G -s 65536 -n 1000 $PF \$PEER"
		"figure-ib_write_lat|^ *8 +1000 |ib_write_lat $D -x $G -s 8 -n 1000 $PF|ib_write_lat $D -x $G -s 8 -n 1000 $PF \$PEER"
	)
}

# interop_out NAME WHERE DIR-A DIR-B: test NAME's exit statuses and both ends' output from the
# guests' result directories (a pair test's client ran in guest a, a rev test's in guest b),
# each line prefixed with the test's name and side, for interop_check.
interop_out() {
	local name=$1 c=$3 s=$4
	[[ $2 == pair ]] || { c=$4 s=$3; }
	echo "$name exit: client $(cat "$c/results/$name.client.rc" 2>/dev/null || echo none), server $(cat "$s/results/$name.server.rc" 2>/dev/null || echo none)"
	sed "s/^/$name note: /" "$c/results/$name.note" "$s/results/$name.note" 2>/dev/null || true
	sed "s/^/$name client: /" "$c/results/$name.client.out" 2>/dev/null || true
	sed "s/^/$name server: /" "$s/results/$name.server.out" 2>/dev/null || true
}

# interop_check NAME CHECK: two checks over $out (tests/lib.sh's check): both ends of test
# NAME exited 0, and its client printed a line matching CHECK.
interop_check() {
	check "$1" "^$1 exit: client 0, server 0\$"
	check "$1-result" "^$1 client: ${2#^}"
}
