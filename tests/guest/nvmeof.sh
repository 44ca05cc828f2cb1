#!/bin/sh
# NVMe over Fabrics over RDMA between the two guests (tests/e2e-nvmeof.sh), on their
# RoCE-mode vrnic devices through rdma_cm: the kernel's nvmet-rdma and nvme-rdma, so the
# driver's kernel data path carries fast registration (REG_MR), remote invalidation
# (SEND_WITH_INV), LOCAL_INV, multi-SGE RDMA READ/WRITE with the DMA lkey, and
# ib_drain_qp at disconnect.
#
#   nvmeof.sh target ADDR PORT   (guest b, the suite's server) exports a memory-backed
#       null_blk namespace on ADDR:PORT, waits until a host has connected and gone again,
#       then removes the export and unloads the target modules.
#   nvmeof.sh target-srq ADDR PORT   the same, nvmet-rdma receiving through kernel SRQs
#       (use_srq=1: ib_create_srq, ib_post_srq_recv, QPs on an SRQ).
#   nvmeof.sh target-srq-stress ADDR PORT   target-srq for host-stress: the host's resets
#       leave moments without any connection, so the host says when it is done (it
#       connects to TCP port PORT + 20000); each connection to PORT + 20001 makes the
#       target drop the host's controller (the port's link to the subsystem removed and
#       made again: every queue torn down by the target, as when a keep-alive timer
#       expires); prints how many controllers the host created.
#   nvmeof.sh host ADDR PORT     (guest a, the client) connects to ADDR:PORT, runs fio with
#       verification (4 KiB random read/write, then 128 KiB sequential write and a read
#       that verifies it), disconnects and unloads nvme-rdma.
#   nvmeof.sh host-stress ADDR PORT   the same with more queues (2 default, 2 write and
#       1 polled I/O queue: with the admin queue 6 QPs at the target), deeper queues
#       (iodepth 64) and shorter jobs, then a 4 KiB random write job that verifies what it
#       wrote, during which the host resets the controller, has the target drop it (the
#       host reconnects) and resets it again: every queue torn down with I/O in flight
#       and connected again; tells target-srq-stress when it is done.
#       tests/e2e-nvmeof.sh runs it many times in one boot against a target that reloads
#       its modules each time.
# Both end with "dmesg-problems N": kernel warnings or worse from vrnic, nvme, rdma or the
# block layer, and any WARNING/BUG/Oops, logged while they ran (listed before the count).
set -u
NQN=nqn.2026-12.org.vrnic:nvmeof-e2e
CFS=/sys/kernel/config/nvmet
mode=${1:?mode} addr=${2:?address} port=${3:?port}
failed=0 iodepth=16 resets='' done_port=''

fail() { echo "FAIL: $*"; failed=1; }

# The number of kernel log lines so far; dmesg_problems counts from there.
dmesg_mark() { dmesg -r | wc -l; }

# A controller reset or drop of reset_under_io logs warnings that say only what was asked
# for: the reset itself or the recovery from the drop, and the I/O it requeues
# (rate-limited); those are no problem there.
#
# A keep-alive the host issues while it removes the controller is failed by the host itself
# before it was ever started (never posted to the device): nvme_keep_alive_end_io then logs
# a "long keepalive RTT" computed from an unset start time (a wrapped value, over 2^31 ms)
# and "error=4" (BLK_STS_TRANSPORT). That pair, after "Removing ctrl" and only in that
# form, is upstream's teardown race, not a problem; it is shown as a note.
dmesg_problems() {
	dmesg -r | tail -n +"$(($1 + 1))" | awk '
		/nvme nvme[0-9]+: Removing ctrl/ { removing = 1 }
		removing && /^<4>.*nvme nvme[0-9]+: long keepalive RTT \([0-9]+ ms\)$/ {
			rtt = $0; sub(/.*RTT \(/, "", rtt); sub(/ ms\)$/, "", rtt)
			if (rtt + 0 >= 2147483648) { print "note: teardown keep-alive: " $0 > "/dev/stderr"; next }
		}
		removing && /^<3>.*nvme nvme[0-9]+: failed nvme_keep_alive_end_io error=4$/ {
			print "note: teardown keep-alive: " $0 > "/dev/stderr"; next
		}
		{ print }' >/tmp/nvmeof-dmesg 2>/tmp/nvmeof-notes
	cat /tmp/nvmeof-notes
	expected='^$'
	[ -z "$resets" ] ||
		expected='^<4>\[ *[0-9.]+\] (nvme nvme[0-9]+: (resetting controller|starting error recovery)|block nvme[0-9]+n[0-9]+: no usable path - requeuing I/O|nvme_ns_head_submit_bio: [0-9]+ callbacks suppressed)$'
	{
		grep -E '^<[0-4]>' /tmp/nvmeof-dmesg | grep -Ei 'vrnic|nvme|rdma|infiniband|ib_|null_blk|blk' |
			grep -Ev "$expected"
		grep -E 'WARNING:|BUG:|Oops|Call Trace|hung task' /tmp/nvmeof-dmesg
	} | sort -u >/tmp/nvmeof-problems
	sed 's/^/dmesg: /' /tmp/nvmeof-problems
	echo "dmesg-problems $(wc -l </tmp/nvmeof-problems)"
}

# Kprobes count what the kernel did: trace_start empties the trace (and makes room),
# probe_on NAME DEFINITION adds and enables kprobe nvmeof_NAME, probe_off NAME disables it
# and prints its records, trace_end removes the probes (removing one empties the trace,
# so none goes before every count is taken).
tracing=/sys/kernel/tracing
probes=''
trace_start() {
	[ -d $tracing/events ] || mount -t tracefs nodev $tracing
	echo 8192 >$tracing/buffer_size_kb
	echo >$tracing/trace
}
probe_on() {
	if echo "p:nvmeof_$1 $2" >>$tracing/kprobe_events &&
		echo 1 >"$tracing/events/kprobes/nvmeof_$1/enable"; then
		probes="$probes $1"
	else
		fail "kprobe $2"
	fi
}
probe_off() {
	echo 0 >"$tracing/events/kprobes/nvmeof_$1/enable"
	grep "nvmeof_$1:" $tracing/trace
}
trace_end() {
	for p in $probes; do echo "-:nvmeof_$p" >>$tracing/kprobe_events; done
	probes=''
}
# count_calls on|off FUNCTION: "off" prints "FUNCTION calls N" (e.g. ib_drain_qp: ULPs
# drain each queue's QP before destroying it).
count_calls() {
	if [ "$1" = on ]; then probe_on "$2" "$2"; else echo "$2 calls $(probe_off "$2" | grep -c .)"; fi
}
# count_wrs on|off: the opcode of the first work request of every vrnic_post_send() call
# (ib_send_wr.opcode, at byte 28 of the second argument); "off" prints how many were
# REG_MR (0x20), LOCAL_INV (7) and SEND_WITH_INV (9).
count_wrs() {
	if [ "$1" = on ]; then
		probe_on wr 'vrnic_post_send op=+28(%si):u32'
	else
		probe_off wr >/tmp/nvmeof-wrs
		echo "first WRs posted: REG_MR $(grep -c ' op=32$' /tmp/nvmeof-wrs)" \
			"LOCAL_INV $(grep -c ' op=7$' /tmp/nvmeof-wrs)" \
			"SEND_WITH_INV $(grep -c ' op=9$' /tmp/nvmeof-wrs)"
	fi
}

# cm_ids PORT STATE-REGEX: how many rdma_cm IDs on local port PORT are in a matching state.
cm_ids() { rdma res show cm_id src-port "$1" 2>/dev/null | grep -cE "state ($2)"; }

# The export in configfs: subsystem $s with namespace 1 on /dev/nullb0, port $p.
add_subsystem() {
	mkdir "$s" && echo 1 >"$s/attr_allow_any_host" && mkdir "$s/namespaces/1" &&
		echo /dev/nullb0 >"$s/namespaces/1/device_path" && echo 1 >"$s/namespaces/1/enable"
}
add_port() {
	mkdir "$p" && echo rdma >"$p/addr_trtype" && echo ipv4 >"$p/addr_adrfam" &&
		echo "$addr" >"$p/addr_traddr" && echo "$port" >"$p/addr_trsvcid" &&
		ln -s "$s" "$p/subsystems/$NQN"
}
remove_port() { rm "$p/subsystems/$NQN" && rmdir "$p"; }
remove_subsystem() {
	echo 0 >"$s/namespaces/1/enable" && rmdir "$s/namespaces/1" && rmdir "$s"
}

# drop_on_request: until /tmp/nvmeof-drops-done exists, each connection to TCP port
# $done_port + 1 drops the host's controller: the port's link to the subsystem goes (the
# target deletes the controller, disconnecting every queue, and stops listening) and comes
# back (the port listens again and the host reconnects).
drop_on_request() {
	rm -f /tmp/nvmeof-drops-done
	while timeout 280 busybox nc -l -p $((done_port + 1)) </dev/null >/dev/null 2>&1 &&
		[ ! -e /tmp/nvmeof-drops-done ]; do
		if rm "$p/subsystems/$NQN" && ln -s "$s" "$p/subsystems/$NQN"; then
			echo "controller dropped"
		else
			echo "FAIL: dropping the controller"
		fi
	done
}

# target USE_SRQ [DONE-PORT]: with DONE-PORT, the host is gone once it has connected to
# that TCP port and none of its IDs is left.
target() {
	done_port=${2:-}
	mark=$(dmesg_mark)
	modprobe null_blk nr_devices=1 gb=1 memory_backed=1 irqmode=0 || fail "modprobe null_blk"
	modprobe nvmet-rdma use_srq="$1" || fail "modprobe nvmet-rdma"
	echo "nvmet-rdma use_srq=$(cat /sys/module/nvmet_rdma/parameters/use_srq)"
	mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config
	s=$CFS/subsystems/$NQN p=$CFS/ports/1
	add_subsystem || fail "subsystem"
	add_port || fail "port"
	echo "exported $NQN on $addr:$port"

	# The suite starts the host once the port listens. Serve until a host has come (one
	# connected ID per queue) and all of its IDs are gone again.
	n=0
	while [ "$(cm_ids "$port" 'CONNECT|ESTABLISHED')" = 0 ] && [ $n -lt 1500 ]; do
		n=$((n + 1))
		sleep 0.2
	done
	[ $n -lt 1500 ] || fail "no host connected within 300 s"
	echo "host connected"
	trace_start
	count_wrs on
	count_calls on ib_drain_qp
	most=0 waiter='' dropper=''
	if [ -n "$done_port" ]; then
		timeout 280 busybox nc -l -p "$done_port" </dev/null >/dev/null 2>&1 &
		waiter=$!
		drop_on_request &
		dropper=$!
	fi
	while :; do
		n=$(cm_ids "$port" 'CONNECT|ESTABLISHED|DISCONNECT')
		[ "$n" -le "$most" ] || most=$n
		if [ -z "$waiter" ] || ! kill -0 "$waiter" 2>/dev/null; then
			[ "$n" != 0 ] || break
		fi
		sleep 0.2
	done
	[ -z "$waiter" ] || wait "$waiter" || fail "no word from the host on port $done_port"
	if [ -n "$dropper" ]; then
		: >/tmp/nvmeof-drops-done
		busybox nc -w 5 127.0.0.1 $((done_port + 1)) </dev/null >/dev/null 2>&1
		wait "$dropper"
	fi
	echo "host gone; most connected queues at once: $most"
	count_wrs off

	remove_port || fail "port removal"
	remove_subsystem || fail "subsystem removal"
	modprobe -r nvmet-rdma nvmet || fail "unloading nvmet-rdma"
	count_calls off ib_drain_qp
	trace_end
	modprobe -r null_blk || fail "unloading null_blk"
	echo "controllers created: $(dmesg -r | tail -n +"$((mark + 1))" | grep -c 'nvmet: creating nvm controller')"
	dmesg_problems "$mark"
}

# fio_job NAME OPTION...: one fio job on $dev, direct I/O at $iodepth; its summary lines
# are printed.
fio_job() {
	name=$1
	shift
	echo "== fio $name"
	fio --name="$name" --filename="$dev" --direct=1 --ioengine=libaio --iodepth="$iodepth" \
		--verify=crc32c --verify_fatal=1 "$@" >/tmp/fio.out 2>&1 || fail "fio $name"
	grep -E 'IOPS=|err=|verify|error' /tmp/fio.out
}

# reset_under_io: a 4 KiB random write job with verification on $dev, and meanwhile
# $resets controller resets (nvme reset: the host tears down every queue, the I/O in flight
# is retried once it has connected again) with one drop by the target after the first.
reset_under_io() {
	ctrl=''
	for c in /sys/class/nvme/nvme*; do
		[ "$(cat "$c/transport" 2>/dev/null)" != rdma ] || ctrl=${c##*/}
	done
	fio_job randwrite-4k-resets --rw=randwrite --bs=4k --size=64M --do_verify=1 &
	fio_pid=$!
	r=0 d=0
	while [ $r -lt "$resets" ]; do
		sleep 3
		nvme reset "/dev/$ctrl" || fail "nvme reset /dev/$ctrl"
		r=$((r + 1))
		[ $d = 0 ] || continue
		sleep 3
		drop_by_target && d=1
	done
	wait $fio_pid
	echo "controller resets during I/O: $r, drops by the target: $d"
}

# drop_by_target: has target-srq-stress drop our controller, and waits until it has
# reconnected (state "connecting", then "live" again).
drop_by_target() {
	busybox nc -w 5 "$addr" $((done_port + 1)) </dev/null >/dev/null 2>&1 ||
		{ fail "the target took no drop request"; return 1; }
	n=0
	until [ "$(cat "/sys/class/nvme/$ctrl/state")" = connecting ] || [ $n -ge 300 ]; do
		n=$((n + 1))
		sleep 0.2
	done
	[ $n -lt 300 ] || { fail "$ctrl never went to connecting"; return 1; }
	n=0
	until [ "$(cat "/sys/class/nvme/$ctrl/state")" = live ] || [ $n -ge 600 ]; do
		n=$((n + 1))
		sleep 0.2
	done
	[ $n -lt 600 ] || { fail "$ctrl did not come back live"; return 1; }
}

# host [SIZE_4K SIZE_128K [NVME-CONNECT-OPTION]...]: the fio jobs' sizes (16M 64M).
host() {
	size4k=${1:-16M} size128k=${2:-64M}
	[ $# -lt 2 ] || shift 2
	mark=$(dmesg_mark)
	modprobe nvme-rdma || fail "modprobe nvme-rdma"
	hostnqn=nqn.2014-08.org.nvmexpress:uuid:$(cat /proc/sys/kernel/random/uuid)
	nvme connect -t rdma -a "$addr" -s "$port" -n "$NQN" --hostnqn="$hostnqn" "$@" ||
		fail "nvme connect"
	dev=''
	n=0
	while [ -z "$dev" ] && [ $n -lt 150 ]; do
		# The namespace's disk, not a hidden per-path one (nvmeXcYnZ) of native multipath.
		for b in /sys/block/nvme*n*; do
			case ${b##*/} in *c*) ;; *) [ -b "/dev/${b##*/}" ] && dev=/dev/${b##*/} ;; esac
		done
		[ -n "$dev" ] || { n=$((n + 1)); sleep 0.2; }
	done
	if [ -n "$dev" ]; then
		echo "namespace $dev: $(cat "/sys/block/${dev#/dev/}/size") sectors"
		nvme list-subsys 2>&1 | grep -E 'rdma|nqn'
		# Every I/O's data goes through a fast-registration MR (register_always).
		trace_start
		count_calls on vrnic_map_mr_sg
		count_wrs on
		fio_job randrw-4k --rw=randrw --bs=4k --size="$size4k"
		count_calls off vrnic_map_mr_sg
		fio_job seqwrite-128k --rw=write --bs=128k --size="$size128k" --do_verify=0
		fio_job seqread-128k --rw=write --bs=128k --size="$size128k" --verify_only
		count_wrs off
	else
		fail "no NVMe namespace appeared"
	fi
	[ -z "$resets" ] || [ -z "$dev" ] || reset_under_io
	# Disconnecting drains every queue's QP (ib_drain_qp) before destroying it.
	count_calls on ib_drain_qp
	nvme disconnect -n "$NQN" || fail "nvme disconnect"
	count_calls off ib_drain_qp
	modprobe -r nvme-rdma || fail "unloading nvme-rdma"
	trace_end
	dmesg_problems "$mark"
	[ -z "$done_port" ] || say_done
}

# say_done: tells the target (target-srq-stress) that this host is done.
say_done() {
	n=0
	until busybox nc -w 5 "$addr" "$done_port" </dev/null >/dev/null 2>&1; do
		n=$((n + 1))
		[ $n -lt 120 ] || { fail "the target never took the done signal"; return; }
		sleep 0.5
	done
}

case $mode in
target) target N ;;
target-srq) target Y ;;
target-srq-stress) target Y $((port + 20000)) ;;
host) host ;;
host-stress)
	iodepth=64 resets=2 done_port=$((port + 20000))
	host 8M 16M --nr-io-queues=2 --nr-write-queues=2 --nr-poll-queues=1 --reconnect-delay=1
	;;
*) echo "usage: nvmeof.sh target|target-srq|target-srq-stress|host|host-stress ADDR PORT" >&2; exit 2 ;;
esac
exit "$failed"
