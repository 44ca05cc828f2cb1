#!/usr/bin/env bash
# Kernel driver smoke test in one QEMU guest (TCG) attached to a `vrnic serve` device:
# probe and port attributes, perftest and ibv_rc_pingpong over loopback (same device),
# query_qp through `rdma res`, rmmod while a process holds PD/MR/CQ/QP and mmaps
# (disassociate), reload, a function level reset (sysfs `reset`) with a process holding
# resources and one watching async events, then perftest again, rmmod, and a clean dmesg;
# finally the host kills `vrnic serve` (SIGKILL) under open resources: later verbs fail in
# bounded time, holders exit, rmmod completes, the driver declares the device dead.
# Usage: guest-driver/kernel/tests/guest-smoke.sh      (as root; provisions what it needs)
# Builds vrnic.ko (build.sh), the provider into a private overlay, the device binary, and
# packs a private guest image, so it does not disturb the shared cache's guest.cpio.
# Prints one PASS/FAIL line per check and "N passed, M failed"; exits non-zero on failure.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
work=$(mktemp -d /tmp/vrnic-kmod-smoke.XXXXXX)
dev_pid=''
cleanup() {
  [[ -n $dev_pid ]] && kill "$dev_pid" 2>/dev/null && wait "$dev_pid" 2>/dev/null
  [[ -n ${VRNIC_KEEP_JOB:-} ]] && echo "kept $work" >&2 || rm -rf "$work"
}
trap cleanup EXIT

ko=$("$repo/guest-driver/kernel/build.sh" | tail -n 1)
"$repo/guest-driver/provider/build.sh" "$work/overlay" >/dev/null
(cd "$repo" && cargo build -q --bin vrnic)
"$repo/qemu-config/provision.sh" qemu kernel guest
"$repo/qemu-config/pack-guest.sh" --overlay "$work/overlay" \
  --add "$ko:/opt/vrnic/modules/" --output "$work/guest.cpio"

mkdir -p "$work/job"
cat >"$work/job/run.sh" <<'EOF'
#!/bin/sh
loop() { # loop NAME TOOL ARGS...: server and client on 127.0.0.1
  name=$1
  shift
  timeout 300 "$@" >/tmp/server.log 2>&1 &
  sleep 2
  timeout 300 "$@" 127.0.0.1 >/tmp/client.log 2>&1
  rc=$?
  wait
  echo "result $name $rc"
  tail -n 4 /tmp/client.log
}
echo "ports $(ls /sys/class/infiniband)"
p=/sys/class/infiniband/vrnic0/ports/1
echo "port state=$(cat $p/state) lid=$(cat $p/lid) link_layer=$(cat $p/link_layer) pkey=$(cat $p/pkeys/0)"
ibv_devinfo -v | grep -E "vendor_part_id|max_qp_wr|max_cqe|active_mtu"
loop write_bw ib_write_bw -d vrnic0 -n 200 -s 65536
loop send_bw ib_send_bw -d vrnic0 -n 200
loop read_bw ib_read_bw -d vrnic0 -n 200
loop write_bw_sweep_2qp ib_write_bw -d vrnic0 -a -n 10 -q 2
# 2 x 3000 completion events on 2048-entry completion EQs: the EQ phase wraps.
loop send_lat_events ib_send_lat -d vrnic0 -n 3000 -e
grep vrnic /proc/interrupts
loop rc_pingpong_events ibv_rc_pingpong -d vrnic0 -e -n 50

ibv_rc_pingpong -d vrnic0 >/tmp/held.log 2>&1 &
pid=$!
for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15; do
  sleep 1
  rdma res show qp 2>/dev/null | grep -q "type RC state INIT" && break
done
rdma res show qp
rdma res show
rmmod vrnic
echo "result rmmod-held $?"
echo "after rmmod: [$(ls /sys/class/infiniband)]"
kill $pid 2>/dev/null
wait
insmod /opt/vrnic/modules/vrnic.ko
echo "result reload $?"
loop send_bw_after_reload ib_send_bw -d vrnic0 -n 50

# Function level reset through sysfs while a process holds PD/MR/CQ/QP and mmaps and
# another watches async events: the driver unregisters (disassociating both), the PCI
# core sets DevCtl "Initiate FLR", and the driver brings the device back as vrnic0.
bdf=$(basename "$(readlink -f /sys/class/infiniband/vrnic0/device)")
echo "reset_method $(cat /sys/bus/pci/devices/$bdf/reset_method)"
timeout 120 ibv_rc_pingpong -d vrnic0 >/tmp/held.log 2>&1 &
pid=$!
timeout 120 ibv_asyncwatch -d vrnic0 >/tmp/async.log 2>&1 &
apid=$!
for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15; do
  sleep 1
  rdma res show qp 2>/dev/null | grep -q "type RC state INIT" && break
done
rdma res show
echo 1 >/sys/bus/pci/devices/$bdf/reset
echo "result flr $?"
echo "after flr: $(rdma res show)"
sleep 1
echo "async after flr: $(grep -o 'IBV_EVENT_[A-Z_]*' /tmp/async.log | tr '\n' ' ')"
kill $apid 2>/dev/null
# The held server is blocked in accept(); a client makes it modify its QP, which must
# fail at once (its context is gone) so that it exits instead of hanging.
timeout 30 ibv_rc_pingpong -d vrnic0 127.0.0.1 >/tmp/client.log 2>&1
wait $pid
echo "result held-after-flr $?"
cat /tmp/held.log
wait
ibv_devinfo -d vrnic0 | grep -E "hca_id|state" | tr -s '\t' ' ' | sed 's/^/devinfo after flr:/'
loop write_bw_after_flr ib_write_bw -d vrnic0 -n 200 -s 65536
rmmod vrnic
echo "result rmmod $?"
echo "dmesg-problems $(dmesg | grep -ciE 'WARNING|BUG:|Call Trace|vrnic [0-9a-f]{4}:.*(failed|leak|timed out)')"
dmesg | grep -iE 'vrnic|WARNING|BUG:|Call Trace' | tail -n 20

# The device dies under us: the host kills `vrnic serve` (SIGKILL) while a process holds
# PD/MR/CQ/QP and mmaps (ibv_rc_pingpong server in accept()), an ib_write_bw server waits
# for its client and ibv_asyncwatch listens. QEMU does not reconnect: register reads return
# all ones, writes are dropped. Every step below is bounded (a hang shows as rc 124).
gone() { # gone PID SECS: 0 once PID has exited (reaped or not), 124 if still there
  n=0
  while [ -d /proc/$1 ] && ! grep -q '^State:.*Z' /proc/$1/status 2>/dev/null; do
    n=$((n + 1))
    [ $n -gt $(($2 * 5)) ] && return 124
    sleep 0.2
  done
  return 0
}
bounded() { # bounded SECS CMD...: run CMD in the background; its status, or 124 if it hangs
  secs=$1
  shift
  "$@" &
  bpid=$!
  gone $bpid "$secs" || { echo "still running after ${secs}s: $*"; return 124; }
  wait $bpid
}
insmod /opt/vrnic/modules/vrnic.ko
echo "result reload-before-kill $?"
ibv_rc_pingpong -d vrnic0 >/tmp/held.log 2>&1 &
hpid=$!
ib_write_bw -d vrnic0 -n 100 >/tmp/bw_server.log 2>&1 &
spid=$!
ibv_asyncwatch -d vrnic0 >/tmp/async.log 2>&1 &
apid=$!
for i in $(seq 15); do
  sleep 1
  rdma res show qp 2>/dev/null | grep -q "type RC state INIT" && break
done
sleep 1
rdma res show
dmesg >/tmp/dmesg.before
touch /job/kill-device
for i in $(seq 120); do [ -f /job/device-killed ] && break; sleep 0.5; done
echo "host killed the device: $(cat /job/device-killed 2>/dev/null)"
s=$(date +%s)
bounded 60 timeout -s KILL 50 ibv_devinfo -d vrnic0 >/tmp/devinfo.log 2>&1
echo "result devinfo-after-kill $? ($(($(date +%s) - s))s)"
cat /tmp/devinfo.log | head -n 5
bounded 60 timeout -s KILL 50 ibv_rc_pingpong -d vrnic0 127.0.0.1 >/tmp/client.log 2>&1
echo "result client-after-kill $?"
# A new client cannot open the device, so the held server (in accept()) gets a hand-made
# peer address (lid:qpn:psn:gid, 52 bytes with the NUL): its QP modify on the dead device
# must fail at once, and it exits.
printf '0007:000001:000001:00000000000000000000000000000000\000' |
  timeout 10 busybox nc 127.0.0.1 18515 >/dev/null 2>&1
gone $hpid 30
echo "result held-exits-after-kill $?"
cat /tmp/held.log
kill $spid 2>/dev/null
gone $spid 30
echo "result bw-server-exits-after-kill $?"
kill -9 $spid 2>/dev/null
kill $apid 2>/dev/null
gone $apid 30
echo "async after kill: $(grep -o 'IBV_EVENT_[A-Z_]*' /tmp/async.log | tr '\n' ' ')"
kill -9 $hpid $apid 2>/dev/null
bounded 60 rmmod vrnic
echo "result rmmod-after-kill $?"
echo "after rmmod-after-kill: [$(ls /sys/class/infiniband)]"
dmesg >/tmp/dmesg.after
diff /tmp/dmesg.before /tmp/dmesg.after | sed -n 's/^> //p' >/tmp/dmesg.new
cat /tmp/dmesg.new | tail -n 30
echo "dead-declared $(grep -c 'vrnic .*resetting the device' /tmp/dmesg.new)"
echo "dead-dmesg-problems $(grep -ciE 'WARNING|BUG:|Call Trace|Oops|blocked for more than|hung_task' /tmp/dmesg.new)"
EOF
chmod +x "$work/job/run.sh"

socket=$work/dev.sock
"$repo/target/debug/vrnic" serve --device "guest0,socket=$socket,lid=7" >"$work/device.log" 2>&1 &
dev_pid=$!
for _ in $(seq 100); do [[ -S $socket ]] && break; sleep 0.1; done

# The guest job is shared directly (not copied by run-job.sh): the host watches it for
# the guest's "kill-device" marker, kills the device with SIGKILL and answers.
out=$work/out.log
"$repo/qemu-config/run-guest.sh" --job "$work/job" --vrnic-socket "$socket" \
  --initrd "$work/guest.cpio" --mem 1G --timeout 900 --log "$work/console.log" \
  >"$work/guest.log" 2>&1 &
guest_pid=$!
while kill -0 "$guest_pid" 2>/dev/null && [[ ! -e $work/job/kill-device ]]; do sleep 0.5; done
if [[ -e $work/job/kill-device ]]; then
  kill -KILL "$dev_pid"
  wait "$dev_pid" 2>/dev/null || true
  dev_pid=''
  echo "vrnic pid killed with SIGKILL" >"$work/job/device-killed"
fi
wait "$guest_pid" || true
cat "$work/job/output.log" >"$out" 2>/dev/null ||
  { echo "no job output; console tail:"; tail -n 40 "$work/console.log"; } >"$out"
echo "exit_code $(cat "$work/job/exit_code" 2>/dev/null)" >>"$out"
cat "$out"

pass=0 fail=0
check() { # check NAME PATTERN: the job output must contain PATTERN (extended regex)
  if grep -qE -- "$2" "$out"; then echo "PASS $1"; pass=$((pass + 1))
  else echo "FAIL $1 (no /$2/)"; fail=$((fail + 1)); fi
}
check probe '^ports vrnic0$'
check port-active 'port state=4: ACTIVE lid=0x7 link_layer=InfiniBand pkey=0xffff'
check vendor-part-id 'vendor_part_id:[[:space:]]+30290'
check active-mtu 'active_mtu:[[:space:]]+4096'
for t in write_bw send_bw read_bw write_bw_sweep_2qp send_lat_events rc_pingpong_events \
  send_bw_after_reload; do
  check "$t" "^result $t 0$"
done
check query-qp 'type RC state INIT'
check rmmod-with-resources-held '^result rmmod-held 0$'
check unregistered 'after rmmod: \[\]'
check reload '^result reload 0$'
check rmmod '^result rmmod 0$'
check reset-method-flr '^reset_method flr$'
check flr '^result flr 0$'
check flr-freed-everything 'after flr: [0-9]+: vrnic0: pd 0 cq 0 qp 0 cm_id 0 mr 0 ctx 0 srq 0'
check flr-async-fatal '^async after flr: IBV_EVENT_DEVICE_FATAL $'
check flr-held-process-fails '^result held-after-flr 1$'
check flr-held-process-error 'Failed to modify QP to RTR'
check flr-port-active 'devinfo after flr: state: PORT_ACTIVE \(4\)'
check write_bw_after_flr '^result write_bw_after_flr 0$'
check clean-dmesg '^dmesg-problems 0$'
check reload-before-kill '^result reload-before-kill 0$'
check device-killed '^host killed the device: vrnic pid killed'
check verb-after-kill-bounded '^result devinfo-after-kill ([0-9]|[1-9][0-9]|1[01][0-9]|12[0-35-9]) '
check held-client-after-kill-bounded '^result client-after-kill ([0-9]|[1-9][0-9]|1[01][0-9]|12[0-35-9])$'
check held-process-exits-after-kill '^result held-exits-after-kill 0$'
check held-process-error-after-kill 'Failed to modify QP to RTR'
check bw-server-exits-after-kill '^result bw-server-exits-after-kill 0$'
check async-fatal-after-kill '^async after kill: IBV_EVENT_DEVICE_FATAL $'
check rmmod-after-kill '^result rmmod-after-kill 0$'
check unregistered-after-kill 'after rmmod-after-kill: \[\]'
check dead-declared '^dead-declared [1-9]'
check dead-clean-dmesg '^dead-dmesg-problems 0$'
check guest-job-finished '^exit_code 0$'
echo "device flr count $(grep -c 'function level reset' "$work/device.log")" >>"$out"
check device-saw-one-flr '^device flr count 1$'
echo "$pass passed, $fail failed"
((fail == 0))
