#!/usr/bin/env bash
# Guest Ethernet through vrnic (tests/guest/net.sh is the guest half): one `vrnic serve`
# with two RoCE-mode devices, each with its guest interface as a vhost-user-net port
# (net=PATH, the device's MAC) on the process's switch. Two guests, each booted with its
# device and `-netdev vhost-user` on that port:
#   - ping between them, a 4 MiB TCP stream byte-exact (SHA-256 at both ends), a 32 MiB
#     TCP transfer whose rate is printed (reported, never asserted);
#   - ibv_rc_pingpong -c over the RoCE devices paired with those interfaces (GID-addressed;
#     the MACs resolve through ARP over the switch; the RDMA data itself takes the
#     in-process path);
#   - the uplink: vrnic's tap (uplink up, tap=) moved into a namespace made for the test,
#     the host end of the segment at $UPLINK_IP; guest a pings it and moves a 4 MiB TCP
#     stream byte-exact and a 32 MiB transfer (rate printed) to a server there;
#   - the port counters vrnic logs at its stop.
# Prints one PASS/FAIL line per check and "e2e-net: N passed, M failed".
set -euo pipefail
. "$(dirname "$0")/lib.sh"

session_begin net
((EUID == 0)) || { say "e2e-net needs root (a network namespace for the uplink's host end)"; exit 1; }
UPLINK_IP=169.254.100.254 UPLINK_PORT=5202
NS=vrnic-net-$$ TAP=vrnup$$
UPLINK_SERVER=''
cleanup() {
	[[ -z $UPLINK_SERVER ]] || kill "$UPLINK_SERVER" 2>/dev/null || true
	ip netns del "$NS" 2>/dev/null || true
}
trap 'cleanup; session_end' EXIT
build_all
ip netns add "$NS"
VRNIC_SERVE_ARGS="${VRNIC_SERVE_ARGS:-} --uplink name=up,tap=$TAP" \
	start_vrnic "ra,link=eth,mac=$LINK_A_MAC,net=$WORK/ra.net" "rb,link=eth,mac=$LINK_B_MAC,net=$WORK/rb.net"
wait_sockets "$WORK/vrnic.log" "$WORK/ra.net" "$WORK/rb.net"
# vrnic starts its uplinks after the guest ports: then the tap exists, and moves into the
# namespace (the host end of the segment).
n=0
until ip link show "$TAP" >/dev/null 2>&1; do
	((n++ < 100)) || { cat "$WORK/vrnic.log" >&2; exit 1; }
	sleep 0.1
done
ip link set "$TAP" netns "$NS"
ip -n "$NS" addr add "$UPLINK_IP/24" dev "$TAP"
ip -n "$NS" link set "$TAP" up
ip -n "$NS" link set lo up
ip netns exec "$NS" timeout 1500 python3 "$REPO/tests/guest/netperf.py" serve "$UPLINK_PORT" >"$WORK/uplink-server.log" 2>&1 &
UPLINK_SERVER=$!
for role in a b; do
	mkdir -p "$WORK/$role"
	cp "$REPO/tests/guest/net.sh" "$WORK/$role/run.sh"
	cp "$REPO/tests/guest/netperf.py" "$REPO/tests/guest/devices.sh" "$WORK/$role/"
	echo "$role" >"$WORK/$role/role"
done
echo "$LINK_A_IP" >"$WORK/a/ip"
echo "$LINK_B_IP" >"$WORK/a/peer"
echo "$LINK_B_IP" >"$WORK/b/ip"
echo "$LINK_A_IP" >"$WORK/b/peer"
# VRNIC_NET_PERF=1: ib_write_bw and ib_write_lat between the guests too (figures only).
[[ -z ${VRNIC_NET_PERF:-} ]] || touch "$WORK/a/perf" "$WORK/b/perf"
echo "$UPLINK_IP $UPLINK_PORT" >"$WORK/a/uplink"
say "booting the guests"
guest_start b --dev rb --ip "$LINK_B_IP/24" --mac "$LINK_B_MAC" --vhost-net "$WORK/rb.net" --timeout 1500
guest_start a --dev ra --ip "$LINK_A_IP/24" --mac "$LINK_A_MAC" --vhost-net "$WORK/ra.net" --timeout 1500
guests_wait || show_tails
load=$(cut -d' ' -f1-3 /proc/loadavg)
vrnic_ctl --json uplinks >"$WORK/uplinks.json" 2>&1 || true
stop_vrnic
out=$WORK/out.log
for role in a b; do
	echo "--- guest $role"
	cat "$WORK/$role/output.log" 2>/dev/null || { echo "no job output; console tail:"; tail -n 40 "$WORK/$role/console.log"; }
done >"$out"
{
	echo "--- uplink server (host end, namespace $NS)"
	sed 's/^/uplink /' "$WORK/uplink-server.log"
	echo "--- vrnic ctl --json uplinks"
	sed 's/^/uplinks: /' "$WORK/uplinks.json"
	echo "--- vrnic log"
	grep -E 'net port|vhost|acked' "$WORK/vrnic.log"
} >>"$out"
cat "$out"

pass=0 fail=0
check virtio-net-on-vhost-user '^eth0 52:54:00:fe:64:01 driver virtio_net$'
check features-negotiated 'ra: guest acked features 0x[0-9a-f]+ \(MRG_RXBUF true, VERSION_1 true\)'
check ping '^5 packets transmitted, 5 packets received, 0% packet loss$'
check_tcp_exact tcp-byte-exact
check tcp-bulk-intact '^bulk: 33554432 bytes in [0-9.]+ s: [0-9.]+ Mbit/s \(intact\)$'
check uplink-ping '^uplink ping: 5 packets transmitted, 5 packets received, 0% packet loss$'
check_tcp_exact uplink-tcp-byte-exact 'uplink '
check uplink-tcp-bulk-intact '^uplink bulk: 33554432 bytes in [0-9.]+ s: [0-9.]+ Mbit/s \(intact\)$'
check uplink-counters '^uplinks: .*"name":"up".*"rx_frames":[1-9][0-9]*,.*"tx_dropped":0[,}]'
check rdma-client '^client: 819200 bytes in [0-9.]+ seconds'
check rdma-server '^server: 819200 bytes in [0-9.]+ seconds'
check rdma-client-exit '^rc_pingpong client exit 0 '
check rdma-server-exit '^rc_pingpong server exit 0$'
check port-counters 'net port ra: .*tx_errors: 0, rx_frames: [1-9][0-9]*, .*rx_errors: 0, connections: 1 '
check_guests_clean a b
rate=$(grep -oE '^bulk: .*Mbit/s' "$out" || echo "bulk: not measured")
uprate=$(grep -oE '^uplink bulk: .*Mbit/s' "$out" || echo "uplink bulk: not measured")
echo "guest TCP throughput through the vhost-user-net backend (TCG guests, 2 vCPUs each; load average $load at the end): guest to guest $rate; guest to the uplink's host end $uprate"
echo "e2e-net: $pass passed, $fail failed"
((fail == 0))
