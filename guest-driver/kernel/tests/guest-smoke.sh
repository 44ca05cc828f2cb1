#!/usr/bin/env bash
# Kernel driver smoke test in one QEMU guest (TCG) attached to a `vrnic serve` device:
# probe and port attributes, perftest and ibv_rc_pingpong over loopback (same device),
# query_qp through `rdma res`, rmmod while a process holds PD/MR/CQ/QP and mmaps
# (disassociate), reload, a function level reset (sysfs `reset`) with a process holding
# resources and one watching async events, then perftest again, rmmod, and a clean dmesg.
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
EOF

socket=$work/dev.sock
"$repo/target/debug/vrnic" serve --device "guest0,socket=$socket,lid=7" >"$work/device.log" 2>&1 &
dev_pid=$!
for _ in $(seq 100); do [[ -S $socket ]] && break; sleep 0.1; done

out=$work/out.log
"$repo/qemu-config/run-job.sh" "$work/job" --vrnic-socket "$socket" \
  --initrd "$work/guest.cpio" --mem 1G --timeout 900 >"$out" 2>&1 || true
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
echo "device flr count $(grep -c 'function level reset' "$work/device.log")" >>"$out"
check device-saw-one-flr '^device flr count 1$'
echo "$pass passed, $fail failed"
((fail == 0))
