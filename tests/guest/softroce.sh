#!/bin/sh
# Runs in a guest as /job/run.sh: makes eth0 a Linux Soft-RoCE port (rdma_rxe, device
# rxe0, RoCE v2 GIDs of eth0's IPv4 and IPv6 addresses), then runs the test list through
# tests/guest/suite.sh (copied to /job/suite.sh; it also runs with a vrnic guest as the
# other end, since rxe only needs eth0).
#
# /job/mtu     eth0's MTU (9000: rxe's active MTU is then 4096; 1500 gives 1024)
# /job/ip6     eth0's IPv6 address/prefix (e.g. fd00:64::1/64), added without DAD
# /job/gid6    that address as a GID (fd00:0064:0000:...:0001), to find its index
# /job/peer6   the IPv6 address clients connect to
# Commands then also see RXE (rxe0), GID4 and GID6 (rxe0's RoCE v2 GID indices of the
# IPv4 and IPv6 address), MYIP6 and PEER6. A test whose client command is
# "capture-off" asks the host to stop recording this guest's frames (tests/softroce-capture.sh):
# it writes /job/capture-off and waits (60 s at most) for /job/capture-is-off.
RXE=rxe0
MTU=$(cat /job/mtu 2>/dev/null || echo 1500)
MYIP6=$(cat /job/ip6 2>/dev/null)
PEER6=$(cat /job/peer6 2>/dev/null)
GID4='' GID6=''

# gid_index ADDR-AS-GID: rxe0's index of the RoCE v2 GID ADDR-AS-GID (empty if none).
gid_index() {
	for g in "/sys/class/infiniband/$RXE/ports/1/gids/"*; do
		i=${g##*/}
		[ "$(cat "$g" 2>/dev/null)" = "$1" ] || continue
		[ "$(cat "/sys/class/infiniband/$RXE/ports/1/gid_attrs/types/$i" 2>/dev/null)" = "RoCE v2" ] && echo "$i" && return 0
	done
}

softroce_up() {
	modprobe rdma_rxe || { echo "softroce: no rdma_rxe"; return 1; }
	ip link set eth0 mtu "$MTU" || return 1
	[ -z "$MYIP6" ] || ip -6 addr add "$MYIP6" dev eth0 nodad || return 1
	rdma link add "$RXE" type rxe netdev eth0 || return 1
	ip4=$(ip -4 -o addr show dev eth0 | awk '{ split($4, a, "/"); print a[1]; exit }')
	want4=$(echo "$ip4" | awk -F. '{ printf "0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x", $1, $2, $3, $4 }')
	want6=$(cat /job/gid6 2>/dev/null)
	n=0
	# ib_core fills the GID table from eth0's addresses asynchronously.
	while [ $n -lt 150 ]; do
		[ -n "$ip4" ] && GID4=$(gid_index "$want4")
		[ -n "$want6" ] && GID6=$(gid_index "$want6")
		[ -z "$ip4" ] || [ -n "$GID4" ] || { n=$((n + 1)); sleep 0.2; continue; }
		[ -z "$want6" ] || [ -n "$GID6" ] || { n=$((n + 1)); sleep 0.2; continue; }
		break
	done
	echo "softroce: $RXE on eth0 (mtu $MTU), GID4=$GID4 ($ip4) GID6=$GID6 (${MYIP6:-none})"
	ibv_devinfo -d "$RXE" | grep -E 'state|active_mtu|link_layer'
	[ -z "$ip4" ] || [ -n "$GID4" ] || { echo "softroce: no RoCE v2 GID of $ip4"; return 1; }
	[ -z "$want6" ] || [ -n "$GID6" ] || { echo "softroce: no RoCE v2 GID of $want6"; return 1; }
}

# capture-off: see the top.
mkdir -p /job/bin
cat >/job/bin/capture-off <<'EOF'
#!/bin/sh
touch /job/capture-off
n=0
until [ -e /job/capture-is-off ]; do
	n=$((n + 1))
	[ $n -lt 300 ] || { echo "the host did not stop the capture"; exit 1; }
	sleep 0.2
done
echo "capture off"
EOF
chmod +x /job/bin/capture-off
export PATH="/job/bin:$PATH"

softroce_up || { echo "softroce: setup failed"; rdma link show; ip addr show dev eth0; exit 1; }
{
	echo "kernel $(uname -r)"
	dpkg-query -W -f '${Package} ${Version}\n' rdma-core ibverbs-providers perftest rdmacm-utils 2>/dev/null
} >/job/versions
MYIP6=${MYIP6%/*}
export RXE GID4 GID6 MYIP6 PEER6
exec sh /job/suite.sh
