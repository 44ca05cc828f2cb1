#!/usr/bin/env bash
# Fault injection against vrnic's kernel driver and provider in a guest (tests/guest/faults.sh
# is the guest half): one guest with three IB-mode devices; when the guest asks (a marker in
# its job directory) the host injects the fault through `vrnic ctl fault` and answers.
#   f0 (LID 11): the 3rd WRITE of a QP fails with REM_ACCESS_ERR, the rest is flushed, the
#       application resets the QPs and traffic resumes; QP_FATAL, then the same recovery;
#       port down and up (the events, and ibv_query_port); a CREATE_QP failed with
#       NO_RESOURCES (ENOMEM, and the next QP works).
#   f1 (LID 12): DEVICE_FATAL raised by the live device: IBV_EVENT_DEVICE_FATAL, later
#       verbs fail, no oops; a function reset brings it back.
#   f2 (LID 13): CREATE_CQ held 8 s, beyond the driver's 5 s admin timeout: ETIMEDOUT, the
#       device declared dead (the expected log lines, IBV_EVENT_DEVICE_FATAL, EIO after), the
#       held command dropped by the driver's reset, never completed late; a function reset
#       brings it back.
# Prints one PASS/FAIL line per check and "e2e-faults: N passed, M failed".
set -euo pipefail
. "$(dirname "$0")/lib.sh"

session_begin faults
build_all
start_vrnic "f0,lid=11" "f1,lid=12" "f2,lid=13"
job=$WORK/a
mkdir -p "$job"
cp "$REPO/tests/guest/faults.sh" "$job/run.sh"

# marker -> "DEVICE|RULE" (%s: the marker's text, e.g. a QPN)
declare -A RULES=(
	[wqe]='f0|wqe qp=%s nth=3 status=REM_ACCESS_ERR'
	[qpfatal]='f0|event qp_fatal qp=%s'
	[portdown]='f0|event port_down'
	[portup]='f0|event port_up'
	[adminfail]='f0|admin fail op=CREATE_QP status=NO_RESOURCES'
	[fatal]='f1|event device_fatal code=INTERNAL'
	[admin]='f2|admin delay op=CREATE_CQ ms=8000'
)
say "booting the guest"
guest_start a --dev f0 --dev f1 --dev f2 --mem 1G --timeout 1500
while guest_running a; do
	for m in "$job"/arm-*; do
		[[ -e $m && $m != *.tmp ]] || continue
		name=${m##*/arm-} arg=$(<"$m")
		rm -f "$m"
		spec=${RULES[$name]:-'|'}
		dev=${spec%%|*} fmt=${spec#*|}
		# shellcheck disable=SC2059 # the format is ours (RULES)
		rule=$(printf "$fmt" "$arg")
		{ echo "\$ vrnic ctl fault $dev $rule"; vrnic_ctl fault "$dev" "$rule" 2>&1 || true; } >>"$WORK/ctl.log"
		echo "$rule" >"$job/armed-$name"
	done
	sleep 0.2
done
guests_wait || true
out=$WORK/out.log
cat "$job/output.log" >"$out" 2>/dev/null || { echo "no job output; console tail:"; tail -n 40 "$job/console.log"; } >"$out"
{
	echo "--- vrnic ctl"
	cat "$WORK/ctl.log" 2>/dev/null
	for d in f0 f1 f2; do vrnic_ctl fault "$d" list 2>&1; done
	echo "--- vrnic log"
	grep -E 'fault|dropped|fatal' "$WORK/vrnic.log"
} >>"$out"
cat "$out"

pass=0 fail=0
# IBV_WC_SUCCESS 0, IBV_WC_REM_ACCESS_ERR 10, IBV_WC_WR_FLUSH_ERR 5; IBV_QPS_ERR 6.
check wqe-exact-status '^wqe: completions \[\(1, 0\), \(2, 0\), \(3, 10\), \(4, 5\), \(5, 5\)\]$'
check wqe-qp-in-err '^wqe: qp state after the error 6$'
check wqe-recovery "^wqe: after reset \[\(6, 0\)\] data b'injected'$"
check wqe-fired-on-the-device 'fault [0-9]+ .wqe qp=0x[0-9a-f]+ nth=3 status=REM_ACCESS_ERR. fired: QP 0x[0-9a-f]+ send WQE 3'
check qp-fatal-event '^wqe: async event ([0-9]+) \(QP_FATAL \1\)$'
check qp-fatal-qp-in-err '^wqe: qp state after QP_FATAL 6$'
check qp-fatal-recovery '^wqe: after QP_FATAL and reset \[\(7, 0\)\]$'
check port-down '^wqe: async event ([0-9]+) \(PORT_ERR \1\) port state 1$'
check port-up '^wqe: async event ([0-9]+) \(PORT_ACTIVE \1\) port state 4$'
check admin-fail-errno '^wqe: create_qp with NO_RESOURCES failed: errno 12$'
check admin-fail-then-works '^wqe: the next QP works: \[\(8, 0\)\]$'
check device-fatal-event '^fatal: async event ([0-9]+) \(DEVICE_FATAL \1\)$'
check device-fatal-later-verbs-fail '^fatal: a verb after the fatal error failed: errno 5 in 0 s$'
check device-fatal-kernel-log 'device reported DEVICE_FATAL: dev_status 0x[0-9a-f]+ fatal_code 3 \(INTERNAL\); resetting the device'
check device-fatal-recovery '^fatal-after-reset: verbs ok$'
check admin-timeout-etimedout '^admin: create_cq failed: errno 110 after [5-7] s$'
check admin-timeout-kernel-log 'admin command timed out: dev_status 0x[0-9a-f]+ fatal_code 0 \(NONE\); resetting the device'
check admin-timeout-failed-command-log 'admin CREATE_CQ \(cmd_id [0-9]+\) failed: -110'
check admin-timeout-device-fatal-event '^admin: async event ([0-9]+) \(DEVICE_FATAL \1\)$'
check admin-timeout-later-verbs-fail '^admin: a verb after the timeout failed: errno 5 in 0 s$'
check admin-timeout-held-command-dropped 'f2: the admin command held at queue index [0-9]+ is dropped: the device was reset'
check admin-timeout-recovery '^admin-after-reset: verbs ok$'
check no-oops '^oopses 0$'
if [[ ${GUEST_RC[a]:-1} == 0 ]]; then
	echo "PASS guest-powered-off"
	pass=$((pass + 1))
else
	echo "FAIL guest-powered-off (run-guest.sh status ${GUEST_RC[a]:-none})"
	fail=$((fail + 1))
fi
echo "e2e-faults: $pass passed, $fail failed"
((fail == 0))
