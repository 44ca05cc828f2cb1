#!/usr/bin/env bash
# Kernel driver smoke test in one QEMU guest (TCG) attached to a `vrnic serve` device:
# probe and port attributes, perftest (also atomics), ibv_rc_pingpong, ibv_srq_pingpong and
# ibv_uc_pingpong over loopback (same device), the CAPS features in ibv_devinfo, send queue
# drain (SQ_DRAINED), resize_cq, rereg_mr in place, XRC as the spec's CAPS.XRC says (refused,
# or an XRC SRQ with the device's number and an XRC_RECV QP), an MR on
# huge pages registered with 2 MiB pages,
# destroying a CQ or QP synchronises only the IRQs of the EQs that can name it (a kprobe on
# synchronize_irq), query_qp through `rdma res`, rmmod while a process holds PD/MR/CQ/QP
# and mmaps (disassociate), reload, a function level reset (sysfs `reset`) with a process
# holding resources and one watching async events, then perftest again, rmmod, and a clean
# dmesg; finally the host kills `vrnic serve` (SIGKILL) under open resources: later verbs
# fail in bounded time, holders exit, rmmod completes, the driver declares the device dead
# and its reset sees the device gone.
# Usage: guest-driver/kernel/tests/guest-smoke.sh      (as root; provisions what it needs)
# Builds vrnic.ko (build.sh), the provider into a private overlay, the device binary
# (debug), and packs a private guest image, so it does not disturb the shared cache's
# images. The guest runs guest-job.sh. VRNIC_KEEP=1 keeps the work directory.
# Prints one PASS/FAIL line per check and "N passed, M failed"; exits non-zero on failure.
set -euo pipefail
. "$(dirname "$0")/../../../tests/lib.sh"

session_begin kmod-smoke
build_all debug "$WORK/guest.cpio" "$WORK/overlay"
job=$WORK/a
mkdir -p "$job"
cp "$REPO/guest-driver/kernel/tests/guest-job.sh" "$job/run.sh"
cp "$REPO/tests/guest/loopback.sh" "$job/"
start_vrnic "guest0,lid=7"

# The host watches the job directory for the guest's "kill-device" marker, kills the
# device with SIGKILL and answers.
guest_start a --dev guest0 --mem 1G --timeout 900
while guest_running a && [[ ! -e $job/kill-device ]]; do sleep 0.5; done
if [[ -e $job/kill-device ]]; then
  stop_vrnic KILL
  echo "vrnic pid killed with SIGKILL" >"$job/device-killed"
fi
guests_wait || true
out=$WORK/out.log
cat "$job/output.log" >"$out" 2>/dev/null ||
  { echo "no job output; console tail:"; tail -n 40 "$job/console.log"; } >"$out"
echo "exit_code $(cat "$job/exit_code" 2>/dev/null)" >>"$out"
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
  srq_pingpong uc_pingpong atomic_bw_fadd atomic_bw_cas write_bw_hugepages rc_pingpong_irq_sync send_bw_after_reload; do
  check "$t" "^result $t 0$"
done
check caps-atomics '^caps: atomic_cap: ATOMIC_HCA \(1\)$'
check caps-srq '^caps: max_srq: 4096$'
check caps-mem-mgt '^caps: MEM_MGT_EXTENSIONS$'
check caps-mw '^caps: max_mw: 8192$'
check caps-mw-type-2b '^caps: MEM_WINDOW_TYPE_2B$'
check huge-page-mr '^huge-page-mrs [1-9]'
check memory-windows '^pyverbs: mw type 1 and 2 allocated and freed$'
check srq-limit '^pyverbs: srq max_wr 64 max_sge 1 limit 10$'
check sqd-drained-event '^verbs: sqd: event ([0-9]+) \(SQ_DRAINED \1\) state 4 draining 0, then state 3$'
check resize-cq '^verbs: resize_cq: [0-9]+ >= 100 True, [0-9]+ >= 2 True$'
check rereg-mr '^verbs: rereg_mr: access, pd, translation done, same key True$'
# XRC follows the device's CAPS.XRC (its reset value in the spec the device is built from).
caps=$(sed -n 's/^#define VRNIC_BAR0_CAPS_RESET \(0x[0-9A-Fa-f]*\)u$/\1/p' \
  "$REPO/hw-spec/include/vrnic/vrnic_regs.h")
if (((caps >> 10) & 1)); then
  check xrc-cap-flag '^xrc-cap-flags 1$'
  check xrc-objects '^verbs: xrc: srq_num [0-9]+, XRC_RECV QP state 1$'
  check xrc-srq-num-is-the-device-srqn '^xrc-srq-num ([0-9]+) device \1$'
else
  check xrc-cap-flag-absent '^xrc-cap-flags 0$'
  check xrc-refused '^verbs: xrc: domain refused errno 95$'
fi
# Counters follow CAPS.COUNTERS the same way: all COUNTER_COUNT of them, or none at all.
if (((caps >> 11) & 1)); then
  ncnt=$(sed -n 's/^#define VRNIC_COUNTER_COUNT \(0x[0-9A-Fa-f]*\)$/\1/p' \
    "$REPO/hw-spec/include/vrnic/vrnic_admin.h")
  cnt='tx_write_requests 100 rx_write_requests 100 tx_bytes 819200 rx_bytes 819200'
  check hw-counters "^hw-counters $((ncnt))\$"
  check qp-counter "^counters: qp counter $cnt\$"
  check link-counters-moved "^counters: link moved $cnt\$"
else
  check hw-counters-absent '^hw-counters 0$'
fi
check irq-sync-per-eq '^irq-sync ctrl=[1-9][0-9]* comp0=[1-9][0-9]* comp1=0 irqs [0-9]+ [0-9]+ [0-9]+$'
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
check dead-reset-sees-gone-device '^dead-reset-gone [1-9]'
check dead-clean-dmesg '^dead-dmesg-problems 0$'
check guest-job-finished '^exit_code 0$'
echo "device flr count $(grep -c 'function level reset' "$WORK/vrnic.log")" >>"$out"
check device-saw-one-flr '^device flr count 1$'
echo "$pass passed, $fail failed"
((fail == 0))
