#!/usr/bin/env bash
# Uplinks and their impairment on the host, no guest: two network namespaces joined only
# through vrnic. Namespace A holds a tap that vrnic creates (uplink ua, tap=, moved into
# A); namespace B holds one end of a veth pair whose other end stays in the root namespace,
# where vrnic reads it through a packet socket (uplink ub, dev=). vrnic's switch bridges
# the two uplinks. IPv6 is off and neighbours are static,
# so the only frames are the test's own and every frame number is known.
#
# Checks: ping A -> B through vrnic (first with the start-up rule of the configuration
# file, `loss frames=1`, losing one reply); exact results of pattern rules (loss every=5 from=3
# loses requests 3, 8, 13, 18 of 20; dup every=3 doubles 2 of 8; egress loss frames=2/5
# loses 2 of 6; a reply with a flipped bit in its IP header is dropped by A's stack; delay
# holds and lets out all), with each rule's counts from `vrnic ctl impair`; a 16 MiB TCP
# transfer A -> B byte-exact (sha256) under 1% loss + 1% reordering + 1% duplication on
# both uplinks, both directions, the rules' counts showing they acted; frames too long
# for an uplink dropped and counted exactly; the host's own frames on the dev= interface
# kept from the guests' side. Then figures (not
# asserted): TCP throughput A -> B through vrnic and between two namespaces on a veth pair.
#
# Needs root (namespaces, a tap, a packet socket) and ip, ping, ethtool, python3
# (tests/host-deps.sh installs them); it fails when run otherwise. Every namespace and
# interface it made is removed at exit, also on failure. About 30 s.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=tests/lib.sh
source tests/lib.sh

if ((EUID != 0)); then
	echo "e2e-uplink: needs root (network namespaces, a tap device, a packet socket); run it as root" >&2
	exit 1
fi
for tool in ip ping ethtool python3; do
	command -v "$tool" >/dev/null || { echo "e2e-uplink: needs $tool (bash tests/host-deps.sh)" >&2; exit 1; }
done

ID=$(($$ % 100000))
NSA=vrnu$ID-a NSB=vrnu$ID-b NSC=vrnu$ID-c NSD=vrnu$ID-d
TAPA=vut${ID}a VETHB=vuv${ID}b PEERB=vup${ID}b VETHC=vuv${ID}c VETHD=vuv${ID}d
MACA=02:00:5e:77:00:01 MACB=02:00:5e:77:00:02
IPA=10.77.0.1 IPB=10.77.0.2

cleanup() {
	local ns
	stop_vrnic
	for ns in "$NSA" "$NSB" "$NSC" "$NSD"; do
		ip netns del "$ns" 2>/dev/null || true
	done
	ip link del "$PEERB" 2>/dev/null || true
	ip link del "$TAPA" 2>/dev/null || true
}
session_begin uplink
trap 'cleanup; session_end' EXIT

PASS=0 FAIL=0
ok() { PASS=$((PASS + 1)); say "ok: $*"; }
bad() { FAIL=$((FAIL + 1)); say "FAIL: $*"; }
# ns_run NS CMD...: runs CMD in namespace NS.
ns_run() { local ns=$1; shift; ip netns exec "$ns" "$@"; }

say "building vrnic (release)"
cargo build -q --release -p vrnic --bin vrnic

# Namespaces with IPv6 off (no router or neighbour solicitations to count).
for ns in "$NSA" "$NSB" "$NSC" "$NSD"; do
	ip netns add "$ns"
	ns_run "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
	ns_run "$ns" ip link set lo up
done
# B: a veth whose peer stays here, for the dev= uplink. B's end sends complete frames
# (no checksum offload, no TSO/GSO), as a packet socket needs (see net/uplink/packet.rs).
ip link add "$VETHB" type veth peer name "$PEERB"
sysctl -qw "net.ipv6.conf.$PEERB.disable_ipv6=1"
ip link set "$VETHB" netns "$NSB"
ip link set "$PEERB" up
ns_run "$NSB" ethtool -K "$VETHB" tx off tso off gso off >/dev/null
ns_run "$NSB" ip link set "$VETHB" address "$MACB" up
ns_run "$NSB" ip addr add "$IPB/24" dev "$VETHB"

# One device, which `vrnic serve` needs; the uplinks come from a configuration file, ub
# with an impairment from the start. (On ub: until the tap is moved into A, the root
# namespace's IPv6 may send on it, which ua's frame numbers would count.)
cat >"$WORK/uplinks.toml" <<EOF
[[uplink]]
name = "ua"
tap = "$TAPA"
[[uplink]]
name = "ub"
dev = "$PEERB"
impair = "loss frames=1 dir=ingress"
EOF
VRNIC_SERVE_ARGS="--config $WORK/uplinks.toml"
start_vrnic d0,lid=1
n=0
until ip link show "$TAPA" >/dev/null 2>&1; do
	((n++ < 50)) || { cat "$WORK/vrnic.log" >&2; exit 1; }
	sleep 0.1
done
# A: the tap vrnic made, moved in (vrnic keeps its file descriptor; the tap goes down).
ip link set "$TAPA" netns "$NSA"
ns_run "$NSA" sysctl -qw "net.ipv6.conf.$TAPA.disable_ipv6=1"
ns_run "$NSA" ip link set "$TAPA" address "$MACA" up
ns_run "$NSA" ip addr add "$IPA/24" dev "$TAPA"
ns_run "$NSA" ip neigh replace "$IPB" lladdr "$MACB" dev "$TAPA" nud permanent
ns_run "$NSB" ip neigh replace "$IPA" lladdr "$MACA" dev "$VETHB" nud permanent

# impair UPLINK SPEC: sets the uplink's impairment (fresh counts).
impair() { vrnic_ctl impair "$@" >/dev/null; }
# count UPLINK RULE DIR FIELD: a rule's count (RULE from 0) from `ctl --json impair`.
count() {
	vrnic_ctl --json impair "$1" |
		python3 -c "import json,sys; print(json.load(sys.stdin)['rules'][$2]['$3']['$4'])"
}
# pings N [ping option]...: "SENT RECEIVED DUPLICATES" of N pings A -> B, 50 ms apart.
pings() {
	local n=$1 out
	shift
	out=$(ns_run "$NSA" ping -n -q -c "$n" -i 0.05 -W 2 "$@" "$IPB" 2>&1 || true)
	python3 -c '
import re, sys
t = sys.argv[1]
m = re.search(r"(\d+) packets transmitted, (\d+) received(?:, \+(\d+) duplicates)?", t)
print(*(m.groups(default="0") if m else ("?", "?", "?")))' "$out"
}
# check WHAT GOT WANT: passes when GOT is WANT
check() { if [[ $2 == "$3" ]]; then ok "$1: $2"; else bad "$1: got '$2', want '$3'"; fi; }

check "ping A -> B through vrnic, ub's start-up rule losing the first reply" "$(pings 20)" "20 19 0"
impair ub off
check "ping A -> B through vrnic (tap ua, packet socket ub), no impairment" "$(pings 20)" "20 20 0"

impair ua loss every=5 from=3 dir=ingress
check "loss every=5 from=3 on ua's ingress: requests 3, 8, 13, 18 of 20 lost" "$(pings 20)" "20 16 0"
check "  its counts (applied/seen, ingress)" "$(count ua 0 ingress applied)/$(count ua 0 ingress seen)" "4/20"
check "  and none on egress" "$(count ua 0 egress seen)" "0"

impair ua dup every=3 dir=ingress
check "dup every=3 on ua's ingress: requests 3 and 6 of 8 doubled" "$(pings 8)" "8 8 2"

impair ua off
impair ub loss frames=2/5 dir=egress
check "loss frames=2/5 on ub's egress: 2 of 6 requests lost" "$(pings 6)" "6 4 0"

# Byte 22 is the IP TTL: the header checksum no longer matches and A's IP layer drops it.
impair ub corrupt frames=3 offset=22 bit=0 dir=ingress
check "corrupt frames=3 offset=22 on ub's ingress: reply 3 of 5 fails A's IP checksum" "$(pings 5)" "5 4 0"
check "  its counts (applied/seen, ingress)" "$(count ub 0 ingress applied)/$(count ub 0 ingress seen)" "1/5"

impair ub off
impair ua delay every=1 ms=100 dir=egress
check "delay ms=100 on ua's egress: every reply held and let out" "$(pings 5)" "5 5 0"
check "  its counts (applied/seen, egress)" "$(count ua 0 egress applied)/$(count ua 0 egress seen)" "5/5"
impair ua off

cat >"$WORK/tcp.py" <<'EOF'
import hashlib, os, socket, sys, time
if sys.argv[1] == "server":  # server PORT READY: one connection, its sha256 and rate
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", int(sys.argv[2])))
    s.listen(1)
    open(sys.argv[3], "w").close()
    c, _ = s.accept()
    h, n, buf, t0 = hashlib.sha256(), 0, bytearray(1 << 20), time.monotonic()
    while True:
        k = c.recv_into(buf)
        if k == 0:
            break
        h.update(memoryview(buf)[:k])
        n += k
    dt = time.monotonic() - t0
    print(h.hexdigest(), n, f"{n / dt / 1e6:.1f}")
else:  # client HOST PORT MIB SEED: MIB MiB of seeded bytes, and their sha256
    import random
    r = random.Random(int(sys.argv[5]))
    chunk = r.randbytes(1 << 20)
    c = socket.create_connection((sys.argv[2], int(sys.argv[3])))
    h = hashlib.sha256()
    for i in range(int(sys.argv[4])):
        block = bytes([i % 256]) + chunk[1:]
        c.sendall(block)
        h.update(block)
    c.shutdown(socket.SHUT_WR)
    c.recv(1)
    print(h.hexdigest(), int(sys.argv[4]) << 20)
EOF

# transfer SERVER_NS CLIENT_NS SERVER_IP MIB: "SENT_SHA SENT_BYTES|GOT_SHA GOT_BYTES MB/s"
transfer() {
	local ready=$WORK/ready.$RANDOM sent got pid
	ns_run "$1" timeout 300 python3 "$WORK/tcp.py" server 5201 "$ready" >"$WORK/server.out" &
	pid=$!
	until [[ -f $ready ]]; do sleep 0.05; done
	sent=$(ns_run "$2" timeout 300 python3 "$WORK/tcp.py" client "$3" 5201 "$4" 7 || echo failed)
	wait "$pid" || true
	got=$(cat "$WORK/server.out")
	echo "$sent|$got"
}

SPEC="loss rate=1%; reorder rate=1% by=3; dup rate=1%"
impair ua "$SPEC"
impair ub "$SPEC"
result=$(transfer "$NSB" "$NSA" "$IPB" 16)
sent=${result%%|*} got=${result#*|}
check "16 MiB TCP A -> B under '$SPEC' on both uplinks, byte-exact" "${got% *}" "$sent"
for rule in 0 1 2; do
	applied=$(count ua "$rule" ingress applied)
	if ((applied > 0)); then ok "  rule $rule acted on ua's ingress: $applied frames"; else bad "  rule $rule of ua never acted"; fi
done
vrnic_ctl impair ua
vrnic_ctl impair ub off >/dev/null
impair ua off

# A frame longer than an uplink takes (9234 bytes) is dropped and counted: 3 pings of
# 9300 bytes from B (a 9342-byte frame each, B's veth at MTU 9500, not fragmented).
before=$(vrnic_ctl --json uplinks | python3 -c "import json,sys; print(json.load(sys.stdin)['uplinks'][1]['counters']['rx_too_long'])")
ip link set "$PEERB" mtu 9500
ns_run "$NSB" ip link set "$VETHB" mtu 9500
ns_run "$NSB" ping -n -q -c 3 -i 0.05 -W 1 -s 9300 -M "do" "$IPA" >/dev/null 2>&1 || true
after=$(vrnic_ctl --json uplinks | python3 -c "import json,sys; print(json.load(sys.stdin)['uplinks'][1]['counters']['rx_too_long'])")
check "3 frames of 9342 bytes on ub: dropped, counted as rx_too_long" "$((after - before))" 3
ns_run "$NSB" ip link set "$VETHB" mtu 1500
ip link set "$PEERB" mtu 1500

# Frames to the dev= interface's own MAC are the host's: B pings the root namespace's end
# of its veth (static neighbours both ways) and A's tap gets none of it.
tx_a() { vrnic_ctl --json uplinks | python3 -c "import json,sys; print(json.load(sys.stdin)['uplinks'][0]['counters']['tx_frames'])"; }
ip addr add 10.77.0.3/32 dev "$PEERB"
ip route add "$IPB/32" dev "$PEERB"
ip neigh replace "$IPB" lladdr "$MACB" dev "$PEERB" nud permanent
ns_run "$NSB" ip neigh replace 10.77.0.3 lladdr "$(cat "/sys/class/net/$PEERB/address")" dev "$VETHB" nud permanent
before=$(tx_a)
out=$(ns_run "$NSB" ping -n -q -c 3 -i 0.05 -W 2 10.77.0.3 2>&1 || true)
check "B pings the host on ub's interface" "$(grep -o '[0-9]* received' <<<"$out")" "3 received"
check "  and none of it reaches A" "$(($(tx_a) - before))" 0
ip addr del 10.77.0.3/32 dev "$PEERB"

# The figure: TCP A -> B through vrnic, and over a plain veth pair between C and D (the
# same offloads off on the sender, so the frames are alike).
ip link add "$VETHC" netns "$NSC" type veth peer name "$VETHD" netns "$NSD"
ns_run "$NSC" ethtool -K "$VETHC" tx off tso off gso off >/dev/null
ns_run "$NSC" ip addr add 10.78.0.1/24 dev "$VETHC"
ns_run "$NSD" ip addr add 10.78.0.2/24 dev "$VETHD"
ns_run "$NSC" ip link set "$VETHC" up
ns_run "$NSD" ip link set "$VETHD" up
through=$(transfer "$NSB" "$NSA" "$IPB" 256)
plain=$(transfer "$NSD" "$NSC" 10.78.0.2 256)
ns_run "$NSC" ethtool -K "$VETHC" tx on tso on gso on >/dev/null
offload=$(transfer "$NSD" "$NSC" 10.78.0.2 256)
say "figure: 256 MiB TCP A -> B in MB/s (python sender and sha256 receiver): through vrnic (tap + packet socket + switch) ${through##* }; plain veth, same offloads off ${plain##* }; plain veth, default offloads (TSO) ${offload##* }"
vrnic_ctl uplinks

say "e2e-uplink: $PASS passed, $FAIL failed"
((FAIL == 0))
