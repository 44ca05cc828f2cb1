#!/bin/sh
# Runs in a guest as /job/run.sh: executes the tests listed in /job/tests for this guest's
# role (/job/role: "a" or "b") and leaves each test's output and status in /job/results/.
#
# /job/tests has one test per line, fields separated by '|':
#   NAME|WHERE|SERVER-COMMAND|CLIENT-COMMAND
# WHERE is "pair" (server on b, client on a, PEER = b's address), "local" (both on a, the
# server in the background, PEER = 127.0.0.1) or "one" (CLIENT-COMMAND alone on a).
# Every test gets its own TCP port (PORT) so a failed test cannot confuse the next one.
role=$(cat /job/role)
peer=$(cat /job/peer 2>/dev/null)
mkdir -p /job/results
port=18515

run() { # NAME SIDE COMMAND: runs COMMAND with PORT and PEER set, saves output and status
	timeout 300 sh -c "$3" >"/job/results/$1.$2.out" 2>&1
	echo $? >"/job/results/$1.$2.rc"
}

client() { # like run, retrying while the server is not listening yet
	n=0
	while :; do
		run "$@"
		grep -qi "couldn't connect\|Unable to open file descriptor for socket connection\|Connection refused" "/job/results/$1.$2.out" || break
		n=$((n + 1)); [ $n -lt 90 ] || break
		sleep 1
	done
}

# A device started with other PCI IDs binds through new_id (README: "own PCI IDs").
if [ -f /job/new_id ]; then
	cat /job/new_id >/sys/bus/pci/drivers/vrnic/new_id || echo "new_id failed"
fi
echo "devices: $(ibv_devices 2>&1 | tr '\n' ' ')"
while IFS='|' read -r name where server cmd; do
	[ -n "$name" ] || continue
	port=$((port + 1))
	export PORT="$port" PEER="$peer"
	echo "== $name ($where)"
	case "$where/$role" in
	pair/b) run "$name" server "$server" ;;
	pair/a) client "$name" client "$cmd" ;;
	local/a)
		run "$name" server "$server" &
		PEER=127.0.0.1 client "$name" client "$cmd"
		wait
		;;
	one/a) run "$name" client "$cmd" ;;
	esac
done </job/tests
echo "suite done"
