# The packet capture checks of tests/e2e.sh (sourced by it, after bw_row and $PF): short
# ib_write_bw, ib_read_bw and ib_send_bw runs (3000-byte messages at MTU 1024: three
# packets each) between the guests' IB-mode devices, captured on rnic0 (guest A's $IB0)
# with `vrnic ctl pcap` around the client (tests/guest/pcap.sh asks, pcap_watch switches).
# Stock tshark then dissects each pcap: no malformed frame, nothing but RoCEv2; the BTH
# opcodes in order (First/Middle/Last and the ACK for WRITE and SEND, the READ request and
# its three responses), PSNs consecutive from the PSN perftest printed for the client's QP,
# every request to the server's QPN; RETH with the rkey and address perftest printed for
# the remote buffer and the 3000-byte length; AETH ACKs (syndrome 0x1f: credits invalid)
# on ACKs and on the READ response First and Last. tshark 4.0 shows the ICRC but does not
# check it; the codec's unit tests check it against an independent computation.
# shellcheck shell=bash disable=SC2016,SC2034 # PCAP_TESTS is for e2e.sh; $IB0, $PORT, $PEER expand in the guest

PCAP_N=5
PCAP_TOOLS=(write read send)
PCAP_TESTS=()
for tool in "${PCAP_TOOLS[@]}"; do
	cmd="ib_${tool}_bw -d \$IB0 -s 3000 -m 1024 -n $PCAP_N $PF"
	PCAP_TESTS+=("pcap-ib_${tool}_bw|pair|$(bw_row 3000)|$cmd|sh /job/pcap.sh ib_${tool}_bw $cmd \$PEER")
done

# pcap_watch: until guest A ends, answers its pcap.sh requests (in $WORK/a/pcap).
pcap_watch() {
	local want name state
	mkdir -p "$WORK/a/pcap"
	while guest_running a; do
		for want in "$WORK"/a/pcap/*.want; do
			[[ -f $want ]] || continue
			name=$(basename "$want" .want) state=$(<"$want")
			[[ $(cat "$WORK/a/pcap/$name.done" 2>/dev/null) != "$state" ]] || continue
			if [[ $state == on ]]; then
				vrnic_ctl pcap rnic0 "$WORK/a/pcap/$name.pcap"
			else
				vrnic_ctl pcap rnic0 off
			fi >>"$WORK/pcap-watch.out" 2>&1 && echo "$state" >"$WORK/a/pcap/$name.done"
		done
		sleep 0.2
	done
}

# pcap_expect TOOL PSN: the opcode,PSN rows tshark must show for PCAP_N messages of TOOL
# whose first PSN is PSN (requests and the server's answers, in order).
pcap_expect() {
	local i p=$2 op
	for ((i = 0; i < PCAP_N; i++)); do
		case $1 in
		write) for op in 6 7 8; do echo "$op,$p" && p=$((p + 1)); done && echo "17,$((p - 1))" ;;
		send) for op in 0 1 2; do echo "$op,$p" && p=$((p + 1)); done && echo "17,$((p - 1))" ;;
		read) echo "12,$p" && for op in 13 14 15; do echo "$op,$p" && p=$((p + 1)); done ;;
		esac
	done
}

# pcap_check TOOL: checks $WORK/a/pcap/ib_TOOL_bw.pcap against the client's perftest output;
# prints what is wrong and fails, or prints a summary.
pcap_check() {
	local tool=$1 f=$WORK/a/pcap/ib_$1_bw.pcap out=$WORK/a/results/pcap-ib_$1_bw.client.out
	local local_psn remote_qpn rkey va rows bad
	[[ -s $f ]] || { echo "no capture $f"; return 1; }
	bad=$(tshark -r "$f" -Y '_ws.malformed || !infiniband' 2>/dev/null | wc -l)
	((bad == 0)) || { echo "$bad malformed or non-RoCEv2 frames"; return 1; }
	# perftest: "local address: LID 0x01 QPN 0x010000 PSN 0x3b2a1c" and "remote address:
	# LID 0x02 QPN 0x010000 PSN 0x... RKey 0x000101 VAddr 0x007f..." (no RKey for SEND)
	local_psn=$(grep -Eo 'local address: .* PSN 0x[0-9a-f]+' "$out" | grep -Eo '0x[0-9a-f]+$' | head -n1)
	remote_qpn=$(grep -Eo 'remote address: .* QPN 0x[0-9a-f]+' "$out" | grep -Eo '0x[0-9a-f]+$' | head -n1)
	[[ -n $local_psn && -n $remote_qpn ]] || { echo "no local PSN or remote QPN in perftest's output"; return 1; }
	rows=$(tshark -r "$f" -T fields -E separator=, -e infiniband.bth.opcode -e infiniband.bth.psn 2>/dev/null)
	if [[ $rows != "$(pcap_expect "$tool" $((local_psn)))" ]]; then
		echo "opcode,PSN rows differ from the expected ones (first PSN $((local_psn))):"
		diff <(pcap_expect "$tool" $((local_psn))) <(echo "$rows") | head -n 20
		return 1
	fi
	# Requests go to the server's QP, answers to the client's.
	bad=$(tshark -r "$f" -Y "infiniband.bth.opcode <= 12 && infiniband.bth.destqp != $((remote_qpn))" 2>/dev/null | wc -l)
	((bad == 0)) || { echo "$bad requests not to QPN $remote_qpn"; return 1; }
	# Every answer carries AETH "ACK, credits invalid"; READ Response Middle carries none.
	bad=$(tshark -r "$f" -Y '(infiniband.bth.opcode == 17 || infiniband.bth.opcode == 13 || infiniband.bth.opcode == 15) && !(infiniband.aeth.syndrome == 0x1f)' 2>/dev/null | wc -l)
	((bad == 0)) || { echo "$bad answers without an AETH ACK"; return 1; }
	if [[ $tool != send ]]; then
		rkey=$(grep -Eo 'remote address: .* RKey 0x[0-9a-f]+' "$out" | grep -Eo '0x[0-9a-f]+$' | head -n1)
		va=$(grep -Eo 'remote address: .* VAddr 0x[0-9a-f]+' "$out" | grep -Eo '0x[0-9a-f]+$' | head -n1)
		[[ -n $rkey && -n $va ]] || { echo "no remote RKey or VAddr in perftest's output"; return 1; }
		rows=$(tshark -r "$f" -Y infiniband.reth -T fields -E separator=, -e infiniband.reth.r_key -e infiniband.reth.va -e infiniband.reth.dmalen 2>/dev/null)
		((${#rows} > 0 && $(wc -l <<<"$rows") == PCAP_N)) || { echo "not $PCAP_N RETHs: $rows"; return 1; }
		# perftest moves every message to the start of the remote buffer (3000 bytes are
		# more than half its 4 KiB cycle buffer). tshark prints the key and address in hex.
		local k a l
		while IFS=, read -r k a l; do
			((k == rkey && a == va && l == 3000)) ||
				{ echo "RETH rkey $k, address $a, length $l; perftest: rkey $rkey, address $va, 3000"; return 1; }
		done <<<"$rows"
	fi
	echo "$(tshark -r "$f" 2>/dev/null | wc -l) frames, opcodes and PSNs from $((local_psn)) as expected"
}

# pcap_results: one PASS or FAIL per tool (after the guests are done); adds to pass/fail.
pcap_results() {
	local tool why
	for tool in "${PCAP_TOOLS[@]}"; do
		[[ -z $only || pcap-ib_${tool}_bw =~ $only ]] || continue
		if why=$(pcap_check "$tool" 2>&1); then
			pass=$((pass + 1))
			echo "PASS pcap-tshark-ib_${tool}_bw ($why)"
		else
			fail=$((fail + 1))
			echo "FAIL pcap-tshark-ib_${tool}_bw: $why"
		fi
	done
}
