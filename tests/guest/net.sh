#!/bin/sh
# Runs in a guest as /job/run.sh (tests/e2e-net.sh is the host half): guest networking
# through vrnic's vhost-user-net backend and switch, and RDMA over the RoCE device paired
# with that interface. /job/role is "a" (the client side) or "b" (the servers); /job/ip
# this guest's address, /job/peer the other's. Results on stdout (/job/output.log). Then,
# given a test list (/job/tests), tests/guest/suite.sh (/job/suite.sh) runs it.
role=$(cat /job/role)
MYIP=$(cat /job/ip)
PEER=$(cat /job/peer)
TCP_PORT=5201 RC_PORT=18600 PERF_PORT=18700
# shellcheck source=devices.sh # tests/guest/devices.sh, copied to /job by tests/e2e-net.sh
. /job/devices.sh
find_devices
echo "role $role ip $MYIP peer $PEER roce ${ROCE:-none} gidx ${GIDX:-none}"
echo "eth0 $(cat /sys/class/net/eth0/address) driver $(basename "$(readlink /sys/class/net/eth0/device/driver)")"

if [ "$role" = b ]; then
	timeout 900 python3 /job/netperf.py serve "$TCP_PORT" >/tmp/tcp.out 2>&1 &
	tcp=$!
	rc=''
	if [ -n "$ROCE" ] && [ -n "$GIDX" ]; then
		timeout 900 ibv_rc_pingpong -d "$ROCE" -g "$GIDX" -p "$RC_PORT" -c -n 100 -s 4096 >/tmp/rc.out 2>&1 &
		rc=$!
	fi
	wait "$tcp"
	echo "tcp server exit $?"
	cat /tmp/tcp.out
	if [ -n "$rc" ]; then
		wait "$rc"
		echo "rc_pingpong server exit $?"
		sed 's/^/server: /' /tmp/rc.out
		if [ -f /job/perf ]; then
			# Benchmarks, not checks (VRNIC_NET_PERF=1): perftest's tables, prefixed.
			for t in "ib_write_bw -s 65536 -n 2000" "ib_write_lat -s 8 -n 1000"; do
				# shellcheck disable=SC2086 # $t: the tool and its options
				timeout 600 $t -d "$ROCE" -x "$GIDX" -F -p $PERF_PORT 2>&1 | sed "s/^/perf ${t%% *}: /"
			done
		fi
	fi
else
	n=0
	until busybox ping -c 1 -W 1 "$PEER" >/dev/null 2>&1; do
		n=$((n + 1))
		[ $n -lt 600 ] || break
	done
	echo "peer answered after $n tries"
	busybox ping -c 5 "$PEER"
	timeout 600 python3 /job/netperf.py send "$PEER" "$TCP_PORT" exact 4194304
	timeout 600 python3 /job/netperf.py send "$PEER" "$TCP_PORT" bulk 33554432
	if [ -f /job/uplink ]; then
		# The host end of the uplink (tests/e2e-net.sh): out through vrnic's switch and tap.
		read -r UPIP UPPORT </job/uplink
		busybox ping -c 5 "$UPIP" 2>&1 | sed 's/^/uplink ping: /'
		timeout 600 python3 /job/netperf.py send "$UPIP" "$UPPORT" exact 4194304 | sed 's/^/uplink /'
		timeout 600 python3 /job/netperf.py send "$UPIP" "$UPPORT" bulk 33554432 | sed 's/^/uplink /'
	fi
	if [ -n "$ROCE" ] && [ -n "$GIDX" ]; then
		# The server may not listen yet: retry while the connect is refused.
		n=0
		while :; do
			timeout 300 ibv_rc_pingpong -d "$ROCE" -g "$GIDX" -p "$RC_PORT" -c -n 100 -s 4096 "$PEER" >/tmp/rc.out 2>&1
			st=$?
			if [ $st -eq 0 ] || [ $n -ge 60 ] || ! grep -q "Couldn't connect" /tmp/rc.out; then break; fi
			n=$((n + 1))
			sleep 1
		done
		echo "rc_pingpong client exit $st after $n retries"
		sed 's/^/client: /' /tmp/rc.out
		if [ -f /job/perf ]; then
			for t in "ib_write_bw -s 65536 -n 2000" "ib_write_lat -s 8 -n 1000"; do
				n=0
				while :; do
					# shellcheck disable=SC2086 # $t: the tool and its options
					timeout 600 $t -d "$ROCE" -x "$GIDX" -F -p $PERF_PORT "$PEER" >/tmp/perf.out 2>&1
					st=$?
					if [ $st -eq 0 ] || [ $n -ge 60 ] || ! grep -q "Couldn't connect" /tmp/perf.out; then break; fi
					n=$((n + 1))
					sleep 1
				done
				sed "s/^/perf ${t%% *}: /" /tmp/perf.out
			done
		fi
	fi
fi
if [ -f /job/tests ]; then
	# A test list (tests/e2e-twohost.sh): tests/guest/suite.sh runs it, a's clients against
	# b's servers.
	sh /job/suite.sh
fi
echo "eth0 counters: $(cat /sys/class/net/eth0/statistics/rx_packets) rx $(cat /sys/class/net/eth0/statistics/tx_packets) tx $(cat /sys/class/net/eth0/statistics/rx_errors) rx_errors"
echo "oopses $(dmesg | grep -c -E 'Oops|BUG:|WARNING:')"
