# The datagram and RoCE-mode checks of tests/e2e.sh (sourced by it, after bw_row/lat_row and
# $PF are defined). Each guest has one RoCE-mode vrnic paired with its virtio-net interface
# (same MAC); $ROCE names it in the guest, $GIDX is its GID index of the guest's IPv4
# address (RoCE v2), $MYIP that address (tests/guest/suite.sh finds them). rdma_cm tools
# work only there: IB mode has no subnet administrator. The datagram checks at the end run
# in IB mode ($IB0, LID-routed).
# shellcheck shell=bash disable=SC2016,SC2034 # ROCE_TESTS is for e2e.sh; $ROCE, $GIDX, $MYIP, $PORT, $PEER expand in the guest

# The GIDs guest A's RoCE device must list: its IPv4 address mapped (::ffff:169.254.100.1)
# and the link-local default GID from its MAC (fe80::5054:ff:fefe:6401, EUI-64).
gid_row() { echo "GID\\[ *[0-9]+\\]:[[:space:]]+$1, RoCE v2\$"; }
a_gid4="::ffff:${LINK_A_IP//./\\.}"
a_gid6=$(IFS=: read -r m1 m2 m3 m4 m5 m6 <<<"$LINK_A_MAC" &&
	printf 'fe80::%x:%x:%x:%x' $((((0x$m1 ^ 2) << 8) | 0x$m2)) $(((0x$m3 << 8) | 0xff)) \
		$((0xfe00 | 0x$m4)) $(((0x$m5 << 8) | 0x$m6)))
# UD: perftest picks the size (the MTU). A datagram that finds no receive posted is dropped
# (as on a wire) and the server would wait for it, so the UD runs send fewer messages (500)
# than the receives perftest posts up front (512): none can be dropped, none is missing.
UD_N='-n 500'
udp_row="^ *[0-9]+ +500 +[0-9.]+ +[0-9.]+"
UNPAIRED_MAC=52:54:00:fe:64:ff # guest A's device that no interface pairs with

ROCE_TESTS=(
	"roce-ibv_devinfo|one|link_layer:[[:space:]]+Ethernet;;state:[[:space:]]+PORT_ACTIVE;;$(gid_row "$a_gid4");;$(gid_row "$a_gid6")||ibv_devinfo -v -d \$ROCE"
	# no interface with the device's MAC: the port stays DOWN, with no GIDs
	"roce-unpaired-port-down|one|link_layer:[[:space:]]+Ethernet;;state:[[:space:]]+PORT_DOWN;;!:GID\\[||ibv_devinfo -v -d \$ROCE_UNPAIRED"
	# rdma_cm: RC connections
	"roce-rping|pair|^ping data: rdma-ping-99: ;;s:^server ping data: rdma-ping-99: |rping -s -a \$MYIP -p \$PORT -v -V -C 100|rping -c -a \$PEER -p \$PORT -v -V -C 100"
	"roce-ucmatose|pair|^data transfers complete;;^test complete;;^return status 0\$;;s:^data transfers complete;;s:^return status 0\$|ucmatose -c 4 -C 20 -p \$PORT|ucmatose -s \$PEER -c 4 -C 20 -p \$PORT"
	"roce-rdma_client|pair|^rdma_client: end 0\$;;s:^rdma_server: end 0\$|rdma_server -p \$PORT|rdma_client -s \$PEER -p \$PORT"
	# rsockets over rdma_cm, with data verification (-T v)
	"roce-rstream|pair|^custom +64k +100 +1 +;;s:^custom +64k +100 +1 +|rstream -p \$PORT -S 65536 -C 100 -T v|rstream -s \$PEER -p \$PORT -S 65536 -C 100 -T v"
	"roce-riostream|pair|^custom +64k +100 +1 +;;s:^custom +64k +100 +1 +|riostream -p \$PORT -S 65536 -C 100 -T v|riostream -s \$PEER -p \$PORT -S 65536 -C 100 -T v"
	# rdma_cm: UD (SIDR); udaddy always listens on port 7174
	"roce-udaddy|pair@7174|^data transfers complete;;^return status 0\$;;s:^data transfers complete;;s:^return status 0\$|udaddy -c 2|udaddy -s \$PEER -c 2"
	# perftest through rdma_cm (-R)
	"roce-ib_write_bw-R|pair|$(bw_row 65536)|ib_write_bw -d \$ROCE -R $BW_N $PF|ib_write_bw -d \$ROCE -R $BW_N $PF \$PEER"
	"roce-ib_send_bw-R|pair|$(bw_row 65536)|ib_send_bw -d \$ROCE -R $BW_N $PF|ib_send_bw -d \$ROCE -R $BW_N $PF \$PEER"
	"roce-ib_read_lat-R|pair|$(lat_row 8)|ib_read_lat -d \$ROCE -R -s 8 $LAT_N $PF|ib_read_lat -d \$ROCE -R -s 8 $LAT_N $PF \$PEER"
	"roce-ib_send_bw-UD-R|pair|$udp_row;;s:$udp_row;;s!:Did not get Message|ib_send_bw -d \$ROCE -c UD -R $UD_N $PF|ib_send_bw -d \$ROCE -c UD -R $UD_N $PF \$PEER"
	# RoCE without rdma_cm: the GID index (-x, -g) names the source GID
	"roce-ib_write_bw-x|pair|$(bw_row 65536)|ib_write_bw -d \$ROCE -x \$GIDX $BW_N $PF|ib_write_bw -d \$ROCE -x \$GIDX $BW_N $PF \$PEER"
	"roce-ib_send_bw-UD|pair|$udp_row;;s:$udp_row;;s!:Did not get Message|ib_send_bw -d \$ROCE -c UD -x \$GIDX $UD_N $PF|ib_send_bw -d \$ROCE -c UD -x \$GIDX $UD_N $PF \$PEER"
	"roce-ibv_ud_pingpong|pair|bytes in [0-9.]+ seconds|ibv_ud_pingpong -d \$ROCE -g \$GIDX -s 1024 -n 200 -p \$PORT|ibv_ud_pingpong -d \$ROCE -g \$GIDX -s 1024 -n 200 -p \$PORT \$PEER"
	# SRQ, UC and XRC over RoCE v2, GID-addressed (no rdma_cm); the atomics follow the list
	"roce-ibv_srq_pingpong|pair|bytes in [0-9.]+ seconds;;s:bytes in [0-9.]+ seconds|ibv_srq_pingpong -d \$ROCE -g \$GIDX -c -n 50 -p \$PORT|ibv_srq_pingpong -d \$ROCE -g \$GIDX -c -n 50 -p \$PORT \$PEER"
	"roce-ibv_uc_pingpong|pair|bytes in [0-9.]+ seconds;;s:bytes in [0-9.]+ seconds|ibv_uc_pingpong -d \$ROCE -g \$GIDX -c -n 200 -p \$PORT|ibv_uc_pingpong -d \$ROCE -g \$GIDX -c -n 200 -p \$PORT \$PEER"
	# XRC over RoCE v2 (see ibv_xsrq_pingpong in tests/e2e.sh)
	"roce-ibv_xsrq_pingpong|pair|$XSRQ_CHECKS|ibv_xsrq_pingpong -d \$ROCE -g \$GIDX -n 50 -p \$PORT|ibv_xsrq_pingpong -d \$ROCE -g \$GIDX -n 50 -p \$PORT \$PEER"
	# UD in IB mode (LID-routed)
	"ib_send_bw-UD|pair|$udp_row;;s:$udp_row;;s!:Did not get Message|ib_send_bw -d \$IB0 -c UD $UD_N $PF|ib_send_bw -d \$IB0 -c UD $UD_N $PF \$PEER"
	"ibv_ud_pingpong|pair|bytes in [0-9.]+ seconds|ibv_ud_pingpong -d \$IB0 -s 1024 -n 200 -p \$PORT|ibv_ud_pingpong -d \$IB0 -s 1024 -n 200 -p \$PORT \$PEER"
)
for op in CMP_AND_SWAP FETCH_AND_ADD; do
	ROCE_TESTS+=("roce-ib_atomic_bw-$op|pair|$(bw_row 8)|ib_atomic_bw -d \$ROCE -x \$GIDX -A $op $BW_N $PF|ib_atomic_bw -d \$ROCE -x \$GIDX -A $op $BW_N $PF \$PEER")
	ROCE_TESTS+=("roce-ib_atomic_lat-$op|pair|$(lat_row 8)|ib_atomic_lat -d \$ROCE -x \$GIDX -A $op $LAT_N $PF|ib_atomic_lat -d \$ROCE -x \$GIDX -A $op $LAT_N $PF \$PEER")
done
