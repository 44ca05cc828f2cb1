#!/bin/sh
# Runs in a guest as /job/run.sh: executes the tests listed in /job/tests for this guest's
# role (/job/role: "a" or "b") and leaves each test's output and status in /job/results/.
#
# /job/tests has one test per line, fields separated by '|':
#   NAME|WHERE|SERVER-COMMAND|CLIENT-COMMAND
# WHERE is "pair" (server on b, client on a, PEER = b's address), "rev" (the reverse of
# pair: server on a, client on b, PEER = a's address), "local" (both on a, the server in
# the background, PEER = 127.0.0.1) or "one" (CLIENT-COMMAND alone on a).
# "pair@P" and "local@P": the server listens on port P instead of PORT (udaddy's fixed port).
# Every test gets its own port (PORT) so a failed test cannot confuse the next one.
#
# A client starts once its server listens (a TCP socket or an rdma_cm ID in state LISTEN on
# the port), so it runs once and fails at once if it fails. Pair tests run in lockstep over
# the IP link: b starts the server and, once it listens (or after LISTEN_WAIT seconds),
# connects to a's control port (PORT + 10000); a runs the client, then connects to b's
# control port; b then gives the server GRACE seconds to end before it kills it. Rev tests
# run the same steps with a and b swapped.
#
# Two perftest failures are perftest's own, not the device's, and such a test runs once
# more, its note saying why (the first output stays in NAME.client.try1.out):
# - its clock calibration failed ("Correlation coefficient r^2: ... < 0.9": it fits the
#   TSC against gettimeofday, which a busy TCG host can bend): it reports inf, measured
#   nothing;
# - with -R, its client was rejected for want of a listener ("RDMA_CM_EVENT_REJECTED;
#   error: 8", IB_CM_REJ_INVALID_SERVICE_ID). perftest's server accepts the exchange's
#   connection, closes that listener, and only after both sides' handshake listens again
#   for the test's QPs, while the client connects them right after that handshake: a
#   client that wins the race is rejected, and perftest 25.01 (Debian trixie) then
#   crashes in its retry (fixed upstream in 3d9d8d0, "Fix crashes and logical flaws in
#   RDMA CM connection retry", 2025-12). Its server waits for QPs that never come.
# In a pair test, a tells b by listening on PORT + 30000 before its done signal; b tries
# to connect there once (a refusal says done) and ends the first server at once; in a rev
# test, b tells a.
#
# Commands also see IB0, IB1, ROCE, ROCE_UNPAIRED and GIDX (tests/guest/devices.sh) and
# MYIP (this guest's address).
role=$(cat /job/role)
peer=$(cat /job/peer 2>/dev/null)    # b's address: where clients connect
MYIP=$(cat /job/ip 2>/dev/null)
other=$(cat /job/other 2>/dev/null)  # the other guest's address (control messages)
mkdir -p /job/results
port=18515
TEST_TIMEOUT=300 LISTEN_WAIT=60 GRACE=30 CTRL_WAIT=1200
peer_gone=''

# start NAME SIDE COMMAND: runs COMMAND in the background with PORT and PEER set (output
# and status to /job/results/NAME.SIDE.*); $started is the pid of its timeout(1).
start() {
	timeout "$TEST_TIMEOUT" sh -c "$3" </dev/null >"/job/results/$1.$2.out" 2>&1 &
	started=$!
}

# finish NAME SIDE PID: waits for the command started as PID and records its status.
finish() {
	wait "$3"
	echo $? >"/job/results/$1.$2.rc"
}

# run NAME SIDE COMMAND: start and finish; its run time (ms) to /job/results/NAME.SIDE.ms.
run() {
	t0=$(date +%s%N)
	start "$@"
	finish "$1" "$2" "$started"
	echo $((($(date +%s%N) - t0) / 1000000)) >"/job/results/$1.$2.ms"
}

# listening PORT: a TCP socket (IPv4 or IPv6) or an rdma_cm ID listens on PORT.
listening() {
	hex=$(printf '%04X' "$1")
	grep -q ":$hex [0-9A-F]*:0000 0A " /proc/net/tcp /proc/net/tcp6 2>/dev/null ||
		rdma res show cm_id src-port "$1" 2>/dev/null | grep -q 'state LISTEN'
}

# wait_listen NAME PORT PID: waits until PORT listens, the server PID ended, or LISTEN_WAIT
# seconds passed (noted in /job/results/NAME.note, where the suite's remarks on a test go).
wait_listen() {
	n=0
	until listening "$2"; do
		kill -0 "$3" 2>/dev/null || return 0 # ended: its own output says why
		n=$((n + 1))
		if [ $n -gt $((LISTEN_WAIT * 5)) ]; then
			echo "the server did not listen on port $2 within ${LISTEN_WAIT}s" >>"/job/results/$1.note"
			return 0
		fi
		sleep 0.2
	done
}

# signal HOST PORT: connects to the control port HOST:PORT (retrying while nobody listens).
signal() {
	n=0
	until busybox nc -w 5 "$1" "$2" </dev/null >/dev/null 2>&1; do
		n=$((n + 1))
		[ $n -lt $((CTRL_WAIT * 2)) ] || return 1
		sleep 0.5
	done
}

# await PORT: waits for the other guest to connect to our control port PORT.
await() { timeout "$CTRL_WAIT" busybox nc -l -p "$1" </dev/null >/dev/null 2>&1; }

# end_server NAME PID: gives the server GRACE seconds to end after its client did.
end_server() {
	n=0
	while kill -0 "$2" 2>/dev/null && [ $n -lt $((GRACE * 5)) ]; do
		n=$((n + 1))
		sleep 0.2
	done
	if kill -0 "$2" 2>/dev/null; then
		echo "the server was still running ${GRACE}s after its client ended: killed" >>"/job/results/$1.note"
		kill "$2"
	fi
	finish "$1" server "$2"
}

# drop_server NAME PID: ends at once the server of a test that runs again (its client
# measured nothing, and the server may wait for it forever).
drop_server() {
	kill "$2" 2>/dev/null
	finish "$1" server "$2"
}

# again NAME: the client of test NAME must run once more (see the top), noted; run once.
again() {
	[ "$attempt" = 1 ] || return 1
	out=/job/results/$1.client.out
	if grep -q '^Correlation coefficient r^2' "$out" 2>/dev/null; then
		why="perftest's clock calibration failed (r^2 < 0.9)"
	elif grep -q '^Event: RDMA_CM_EVENT_REJECTED; error: 8\.$' "$out" 2>/dev/null; then
		why="perftest's client connected its rdma_cm QPs before its server listened for them (REJ 8: no listener)"
	else
		return 1
	fi
	mv "$out" "/job/results/$1.client.try1.out"
	echo "$why: ran again" >>"/job/results/$1.note"
}

# A device started with other PCI IDs binds through new_id (README: "own PCI IDs").
if [ -f /job/new_id ]; then
	cat /job/new_id >/sys/bus/pci/drivers/vrnic/new_id || echo "new_id failed"
fi
# shellcheck source=devices.sh # tests/guest/devices.sh, copied to /job by suite_job
. /job/devices.sh
find_devices
echo "devices: $(ibv_devices 2>&1 | tr '\n' ' ')"
echo "IB0=$IB0 IB1=$IB1 ROCE=$ROCE ROCE_UNPAIRED=$ROCE_UNPAIRED GIDX=$GIDX MYIP=$MYIP"
export IB0 IB1 ROCE ROCE_UNPAIRED GIDX MYIP
while IFS='|' read -r name where server cmd; do
	[ -n "$name" ] || continue
	port=$((port + 1))
	ctrl=$((port + 10000))
	lport=$port
	case $where in *@*) lport=${where#*@} where=${where%@*} ;; esac
	export PORT="$port" PEER="$peer"
	echo "== $name ($where)"
	attempt=0
	while [ $attempt -lt 2 ]; do
		attempt=$((attempt + 1))
		case "$where/$role" in
		pair/b | rev/a)
			start "$name" server "$server"
			spid=$started
			wait_listen "$name" "$lport" "$spid"
			signal "$other" "$ctrl" || echo "the client's guest never took the ready signal" >>"/job/results/$name.note"
			await "$ctrl" || echo "the client's guest never said its client ended" >>"/job/results/$name.note"
			if [ $attempt = 1 ] && busybox nc -w 5 "$other" $((port + 30000)) </dev/null >/dev/null 2>&1; then
				drop_server "$name" "$spid"
				continue
			fi
			end_server "$name" "$spid"
			break
			;;
		pair/a | rev/b)
			if [ -n "$peer_gone" ] || ! await "$ctrl"; then
				peer_gone=1
				echo "no ready signal from the server's guest: not run" >>"/job/results/$name.note"
				break
			fi
			[ "$where" = pair ] || PEER=$other
			run "$name" client "$cmd"
			asked=''
			if again "$name"; then
				timeout 60 busybox nc -l -p $((port + 30000)) </dev/null >/dev/null 2>&1 &
				asked=$!
				sleep 0.5 # listening before the server's guest looks
			fi
			signal "$other" "$ctrl" || echo "the server's guest never took the done signal" >>"/job/results/$name.note"
			if [ -z "$asked" ] || ! wait "$asked"; then
				break
			fi
			;;
		local/a)
			start "$name" server "$server"
			spid=$started
			wait_listen "$name" "$lport" "$spid"
			PEER=127.0.0.1 run "$name" client "$cmd"
			if again "$name"; then
				drop_server "$name" "$spid"
				continue
			fi
			end_server "$name" "$spid"
			break
			;;
		one/a)
			run "$name" client "$cmd"
			break
			;;
		*) break ;;
		esac
	done
done </job/tests
echo "suite done"
