#!/bin/sh
# Runs in guest A as /job/pcap.sh (tests/e2e-pcap.sh): pcap.sh NAME CMD... asks the host to
# capture the packets of vrnic device rnic0 (this guest's $IB0) into /job/pcap/NAME.pcap,
# runs CMD, and asks it to stop. A request is the file /job/pcap/NAME.want ("on" or
# "off"); the host answers with the same word in /job/pcap/NAME.done once it has switched
# the capture. Prints CMD's output; exits with CMD's status (1 if the host never answers).
name=$1
shift
mkdir -p /job/pcap

ask() {
	echo "$1" >"/job/pcap/$name.want.tmp" && mv "/job/pcap/$name.want.tmp" "/job/pcap/$name.want"
	n=0
	until [ "$(cat "/job/pcap/$name.done" 2>/dev/null)" = "$1" ]; do
		n=$((n + 1))
		[ $n -lt 300 ] || { echo "pcap: the host did not switch the capture $1 within 60 s"; return 1; }
		sleep 0.2
	done
}

ask on || exit 1
"$@"
rc=$?
ask off || exit 1
exit $rc
