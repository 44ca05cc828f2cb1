# shellcheck shell=sh disable=SC2034 # the variables are for the scripts that source this
# Sourced in a guest (as /job/devices.sh) by tests/guest/suite.sh and tests/guest/pyverbs.sh.
# find_devices sets IB0 and IB1 (the InfiniBand-mode devices, in name order), ROCE (the
# Ethernet-mode device of eth0's MAC: its node GUID is the MAC's EUI-64), ROCE_UNPAIRED (an
# Ethernet-mode device of another MAC, if any) and GIDX (ROCE's GID index of the address
# $MYIP, RoCE v2).

# The RoCE devices: those whose port has the Ethernet link layer. ROCE's GIDs come from
# eth0's addresses through ib_core's GID cache (asynchronously): wait for the IPv4 one.
find_devices() {
	IB0='' IB1='' ROCE='' ROCE_UNPAIRED='' GIDX=''
	eui=''
	if IFS=: read -r m1 m2 m3 m4 m5 m6 </sys/class/net/eth0/address 2>/dev/null; then
		eui=$(printf '%02x%s:%sff:fe%s:%s%s' $((0x$m1 ^ 2)) "$m2" "$m3" "$m4" "$m5" "$m6")
	fi
	for d in /sys/class/infiniband/*; do
		[ -e "$d/ports/1/link_layer" ] || continue
		case $(cat "$d/ports/1/link_layer") in
		Ethernet)
			if [ "$(cat "$d/node_guid")" = "$eui" ]; then ROCE=${d##*/}; else ROCE_UNPAIRED=${d##*/}; fi
			;;
		*) if [ -z "$IB0" ]; then IB0=${d##*/}; elif [ -z "$IB1" ]; then IB1=${d##*/}; fi ;;
		esac
	done
	[ -n "$ROCE" ] && [ -n "$MYIP" ] || return 0
	want=$(echo "$MYIP" | awk -F. '{ printf "0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x", $1, $2, $3, $4 }')
	n=0
	while [ -z "$GIDX" ] && [ $n -lt 150 ]; do
		for g in /sys/class/infiniband/"$ROCE"/ports/1/gids/*; do
			i=${g##*/}
			[ "$(cat "$g" 2>/dev/null)" = "$want" ] || continue
			[ "$(cat "/sys/class/infiniband/$ROCE/ports/1/gid_attrs/types/$i" 2>/dev/null)" = "RoCE v2" ] && GIDX=$i
		done
		[ -n "$GIDX" ] || { n=$((n + 1)); sleep 0.2; }
	done
	[ -n "$GIDX" ] || echo "no RoCE v2 GID of $MYIP on $ROCE after 30 s"
}
