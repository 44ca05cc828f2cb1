# shellcheck shell=sh
# Sourced by guest jobs (/job/loopback.sh: the kernel smoke test's guest-job.sh, hostile.sh).
#
# loopback_pair SECS TOOL ARGS...: TOOL's server, then its client to 127.0.0.1, each killed
# after SECS; their outputs in /tmp/server.log and /tmp/client.log; returns the client's
# status. A perftest whose own clock calibration failed ("Correlation coefficient r^2: ...
# < 0.9": it fits the TSC against gettimeofday, which a busy TCG host can bend) measured
# nothing, for no fault of the device: the pair runs once more, and a note line says so (as
# tests/guest/suite.sh does).
loopback_pair() {
	secs=$1
	shift
	for attempt in 1 2; do
		timeout -s KILL "$secs" "$@" >/tmp/server.log 2>&1 &
		sleep 2
		timeout -s KILL "$secs" "$@" 127.0.0.1 >/tmp/client.log 2>&1
		rc=$?
		wait
		if [ $attempt = 2 ] || ! grep -q '^Correlation coefficient r^2' /tmp/client.log /tmp/server.log; then
			return $rc
		fi
		echo "note $1: perftest's clock calibration failed (r^2 < 0.9): ran again"
	done
}
