#!/bin/sh
# The guest half of tests/e2e-hostile.sh, run as /job/run.sh: traffic on a device the host
# has switched into hostile-device mode for completions, events and interrupts, then the
# admin paths and a module reload while it is hostile for admin answers, then a clean
# workload on it once the host switched it off again, and on a second device that never
# was hostile. Prints one
# "result NAME STATUS" line per step and the facts the host checks. Every step is bounded
# (timeout): a tool that waits for a completion the device mangled is killed (124 or 137),
# and the host judges whether anything stayed stuck in the kernel.
dev_of_lid() { # the ib device whose port has LID $1
  for d in /sys/class/infiniband/*; do
    [ "$(cat "$d/ports/1/lid" 2>/dev/null)" = "$1" ] && basename "$d"
  done
}
ask() { # ask NAME: ask the host to do NAME, wait up to 60 s for its answer
  touch "/job/want-$1"
  n=0
  while [ ! -e "/job/done-$1" ] && [ $n -lt 600 ]; do sleep 0.1; n=$((n + 1)); done
  echo "host $1: $(cat "/job/done-$1" 2>/dev/null || echo 'no answer')"
}
# shellcheck source=loopback.sh # copied to /job by tests/e2e-hostile.sh
. /job/loopback.sh
loop() { # loop NAME SECS TOOL ARGS...: server and client on 127.0.0.1 (loopback_pair)
  name=$1 secs=$2
  shift 2
  loopback_pair "$secs" "$@"
  rc=$?
  echo "result $name $rc"
  tail -n 3 /tmp/client.log | sed "s/^/  $name: /"
  cat /tmp/server.log /tmp/client.log >>/tmp/tools.log
}
stuck() { # processes in uninterruptible sleep (D), or still alive, of the tools run
  ps -eo stat=,comm= | awk '$1 ~ /^D/ || $2 ~ /pingpong|ib_(write|send|read)_bw|python3/ {print}' | grep -v awk
}
admin_churn() { # create/destroy PD, MR, CQ, QP (and move the QP to INIT) on $1, 30 times
  timeout -s KILL "$2" python3 - "$1" <<'PYEOF' 2>&1 | tail -n 5
import sys
import pyverbs.enums as e
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPCap, QPInitAttr, QPAttr
ok = failed = 0
for i in range(30):
    try:
        with Context(name=sys.argv[1]) as ctx:
            ctx.query_device()
            ctx.query_port(1)
            with PD(ctx) as pd, CQ(ctx, 64) as cq:
                mr = MR(pd, 8192, e.IBV_ACCESS_LOCAL_WRITE)
                qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq,
                                       cap=QPCap(max_send_wr=16, max_recv_wr=16)))
                qp.to_init(QPAttr(port_num=1))
                qp.close()
                mr.close()
        ok += 1
    except Exception as ex:
        failed += 1
        last = str(ex)[:120]
print('admin churn: %d ok, %d failed' % (ok, failed))
if failed:
    print('admin churn: last error: %s' % last)
PYEOF
}
H=$(dev_of_lid 0x1)
C=$(dev_of_lid 0x2)
echo "devices hostile=$H clean=$C"
dmesg >/tmp/dmesg.before

# 1. Traffic while completions, events and interrupts are hostile.
ask data
loop rc_pingpong 45 ibv_rc_pingpong -d "$H" -n 200
loop rc_pingpong_events 45 ibv_rc_pingpong -d "$H" -e -n 200
loop srq_pingpong 45 ibv_srq_pingpong -d "$H" -q 4 -n 50
loop uc_pingpong 45 ibv_uc_pingpong -d "$H" -n 200
loop write_bw 60 ib_write_bw -d "$H" -n 500 -F
loop send_bw 60 ib_send_bw -d "$H" -n 500 -F
loop send_lat_events 60 ib_send_lat -d "$H" -n 500 -e -F
sleep 2
echo "stuck-after-data [$(stuck | tr '\n' ';')]"
# What the tools were told: error completions (the provider's verdict on what it read).
echo "error-completions $(grep -ciE 'general error|status 21|error \(21\)' /tmp/tools.log)"
grep -iE 'status|error' /tmp/tools.log | sort | uniq -c | sort -rn | head -n 10

# 2. The admin paths while admin completions and query answers are hostile.
ask admin
admin_churn "$H" 120
echo "result admin_churn $?"
ibv_devinfo -d "$H" >/dev/null 2>&1
echo "result devinfo_hostile $?"
sleep 2
echo "stuck-after-admin [$(stuck | tr '\n' ';')]"

# 3. The module is unloaded and loaded again while the device is still hostile (probe's
# admin commands and queries get malformed answers: probe succeeds or fails cleanly).
timeout -s KILL 120 rmmod vrnic
echo "result rmmod_hostile $?"
timeout -s KILL 120 insmod /opt/vrnic/modules/vrnic.ko
echo "result insmod_hostile $?"
sleep 3
echo "ports-hostile-probe [$(cd /sys/class/infiniband && echo *)]"
H=$(dev_of_lid 0x1)
[ -n "$H" ] && { admin_churn "$H" 120; echo "result admin_churn_probe $?"; }

# 4. Off again: unload, load, and a clean workload on both devices.
ask off
timeout -s KILL 120 rmmod vrnic
echo "result rmmod_after $?"
echo "after rmmod: [$(ls /sys/class/infiniband 2>/dev/null)]"
timeout -s KILL 120 insmod /opt/vrnic/modules/vrnic.ko
echo "result insmod_after $?"
sleep 3
H=$(dev_of_lid 0x1)
C=$(dev_of_lid 0x2)
echo "devices-after hostile=$H clean=$C"
loop clean_rc_pingpong_was_hostile 120 ibv_rc_pingpong -d "$H" -n 200
loop clean_rc_pingpong_other 120 ibv_rc_pingpong -d "$C" -n 200
loop clean_write_bw_was_hostile 120 ib_write_bw -d "$H" -n 200 -F
timeout -s KILL 120 rmmod vrnic
echo "result rmmod_final $?"

# Only what the kernel logged since the job started.
dmesg | tail -n +$(($(wc -l </tmp/dmesg.before) + 1)) >/tmp/dmesg.new
problems='Oops|BUG:|WARNING:|Call Trace|blocked for more than|hung_task|general protection|KASAN|UBSAN'
echo "dmesg-problems $(grep -cE "$problems" /tmp/dmesg.new)"
grep -E "$problems" /tmp/dmesg.new | head -n 20
# The driver's reports of malformed input (CQEs, events, admin answers).
reports='invalid CQE|CQE names|no outstanding WQE|completion EQ [0-9]+: event|unexpected event type|admin completion mismatch|status UNKNOWN|in use|invalid CREATE_|returned .* (slot|context|QPN)'
echo "driver-reports $(grep -cE "$reports" /tmp/dmesg.new)"
grep -E 'vrnic [0-9a-f:.]+:' /tmp/dmesg.new | sed 's/^\[[ 0-9.]*\] //' | sort | uniq -c | sort -rn | head -n 40
