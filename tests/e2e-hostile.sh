#!/usr/bin/env bash
# The hostile-device mode (issue 10) against the guest's kernel driver and provider: one
# guest with two IB-mode devices, hostile0 (LID 1) and clean0 (LID 2). The guest
# (tests/guest/hostile.sh) runs traffic (ibv_*_pingpong, perftest) while the host has
# switched hostile0 into hostile mode through the control socket for completions, events
# and interrupts (HOSTILE_DATA), then the admin paths (pyverbs creating and destroying PDs,
# MRs, CQs, QPs; ibv_devinfo) and a module reload while it is hostile for admin answers
# and queries (HOSTILE_ADMIN), then asks for it to be switched off and runs a clean
# workload on both devices. Judged: no Oops/BUG/WARNING/hung task in the guest's log,
# every tool ended (errors are fine) and nothing stayed stuck, the device wrote
# corruptions and the driver and provider reported them (log lines, error completions),
# the module unloads, and the clean workload passes on both devices afterwards.
# Usage: tests/e2e-hostile.sh      (as root; VRNIC_KEEP=1 keeps the work directory)
set -euo pipefail
. "$(dirname "$0")/lib.sh"

HOSTILE_DATA=${HOSTILE_DATA:-cqe+eqe+irq:10:5}
HOSTILE_ADMIN=${HOSTILE_ADMIN:-admin+attr:10:15}
session_begin hostile
build_all release "$WORK/guest.cpio" "$WORK/overlay"
job=$WORK/a
mkdir -p "$job"
cp "$REPO/tests/guest/hostile.sh" "$job/run.sh"
cp "$REPO/tests/guest/loopback.sh" "$job/"
start_vrnic "hostile0,lid=1" "clean0,lid=2"

# The guest asks (want-data, want-admin, want-off) and the host answers (done-NAME) with
# what the control socket said; what the device wrote in each phase goes to
# $WORK/written-NAME.txt when the next one starts.
guest_start a --dev hostile0 --dev clean0 --mem 1G --timeout 1500
prev=''
while guest_running a; do
	for phase in data admin off; do
		[[ -e $job/want-$phase && ! -e $job/done-$phase ]] || continue
		[[ -z $prev ]] || vrnic_ctl hostile hostile0 >"$WORK/written-$prev.txt" 2>&1 || true
		case $phase in
		data) vrnic_ctl hostile hostile0 on "$HOSTILE_DATA" ;;
		admin) vrnic_ctl hostile hostile0 on "$HOSTILE_ADMIN" ;;
		off) vrnic_ctl hostile hostile0 off ;;
		esac >"$job/done-$phase" 2>&1 || true
		prev=$phase
	done
	sleep 0.5
done
guests_wait || true
out=$WORK/out.log
cat "$job/output.log" >"$out" 2>/dev/null ||
	{ echo "no job output; console tail:"; tail -n 40 "$job/console.log"; } >"$out"
echo "exit_code $(cat "$job/exit_code" 2>/dev/null)" >>"$out"
cat "$out"
for phase in data admin; do
	echo "what the device wrote in the $phase phase:"
	cat "$WORK/written-$phase.txt" 2>/dev/null || true
done

pass=0 fail=0
for phase in data admin; do
	written=$(awk '/total written/ {print $3}' "$WORK/written-$phase.txt" 2>/dev/null || echo 0)
	if ((${written:-0} > 0)); then
		echo "PASS device-wrote-corruptions-$phase ($written)"
		pass=$((pass + 1))
	else
		echo "FAIL device-wrote-corruptions-$phase (none written)"
		fail=$((fail + 1))
	fi
done
check switched-on-data '^host data: hostile0 hostile on \(cqe'
check switched-on-admin '^host admin: hostile0 hostile on \(admin'
check switched-off '^host off: hostile0 hostile off'
# Each tool ended by itself (0 or an error) or was killed by its timeout (137): either
# way it is gone, which stuck-after-* checks (no process left, none in D state).
for t in rc_pingpong rc_pingpong_events srq_pingpong uc_pingpong write_bw send_bw send_lat_events admin_churn; do
	check "$t-ended" "^result $t [0-9]+$"
done
check nothing-stuck-after-data '^stuck-after-data \[\]$'
check nothing-stuck-after-admin '^stuck-after-admin \[\]$'
check provider-reported-error-completions '^error-completions [1-9]'
check rmmod-while-hostile '^result rmmod_hostile 0$'
check insmod-while-hostile '^result insmod_hostile 0$'
check rmmod-after '^result rmmod_after 0$'
check unregistered 'after rmmod: \[\]'
check insmod-after '^result insmod_after 0$'
check clean-on-formerly-hostile '^result clean_rc_pingpong_was_hostile 0$'
check clean-on-other-device '^result clean_rc_pingpong_other 0$'
check clean-bw-on-formerly-hostile '^result clean_write_bw_was_hostile 0$'
check rmmod-final '^result rmmod_final 0$'
check no-oops-warn-hang '^dmesg-problems 0$'
check driver-reported-malformed-input '^driver-reports [1-9]'
check guest-job-finished '^exit_code 0$'
((fail == 0)) || show_tails
echo "e2e-hostile: $pass passed, $fail failed"
((fail == 0))
