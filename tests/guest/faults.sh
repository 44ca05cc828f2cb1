#!/bin/sh
# The guest half of tests/e2e-faults.sh, run as /job/run.sh: exercises vrnic's kernel driver
# and provider under faults the host injects through `vrnic ctl fault`. Three devices, found
# by their LIDs: 0xb (WQE errors, QP fatal, port events), 0xc (DEVICE_FATAL), 0xd (admin
# timeout). For each fault the guest writes /job/arm-NAME (a QPN, or nothing) and waits
# for the host's /job/armed-NAME. Prints one line per fact; the host judges them.
dev_with_lid() { # the IB device whose port 1 has LID $1 (hex, as sysfs shows it)
  for d in /sys/class/infiniband/*; do
    [ "$(cat "$d/ports/1/lid" 2>/dev/null)" = "$1" ] && { basename "$d"; return 0; }
  done
  return 1
}
bdf_of() { basename "$(readlink -f "/sys/class/infiniband/$1/device")"; }
dev_of_bdf() { # the IB device of PCI function $1, once it has one
  for d in "/sys/bus/pci/devices/$1/infiniband"/*; do [ -e "$d" ] && { basename "$d"; return 0; }; done
  return 1
}
# flr_and_check NAME BDF: the driver's recovery from a dead device (a function reset), then
# the device must work again: port ACTIVE and a PD, CQ and QP created.
flr_and_check() {
  echo 1 >"/sys/bus/pci/devices/$2/reset"
  n=0
  while [ $n -lt 30 ] && [ -z "$(dev_of_bdf "$2")" ]; do sleep 1; n=$((n + 1)); done
  d=$(dev_of_bdf "$2")
  echo "$1-after-reset: device ${d:-none} port $(cat "/sys/class/infiniband/$d/ports/1/state" 2>/dev/null)"
  DEV=$d timeout 60 python3 -c '
import os
import pyverbs.enums as e
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.pd import PD
from pyverbs.qp import QP, QPCap, QPInitAttr
with Context(name=os.environ["DEV"]) as ctx, PD(ctx) as pd, CQ(ctx, 8) as cq:
    QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=QPCap())).close()
    print("verbs ok")
' 2>&1 | sed "s/^/$1-after-reset: /"
}

D0=$(dev_with_lid 0xb) D1=$(dev_with_lid 0xc) D2=$(dev_with_lid 0xd)
echo "devices: wqe $D0 fatal $D1 admin $D2"
dmesg -C

cat >/tmp/faults_lib.py <<'PYEOF'
import os
import time
import pyverbs.enums as e
from pyverbs.addr import AHAttr
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, SendWR


def ask(name, text=''):
    """Asks the host for fault NAME and waits until it is in place."""
    with open('/job/arm-%s.tmp' % name, 'w') as f:
        f.write(text)
    os.rename('/job/arm-%s.tmp' % name, '/job/arm-%s' % name)
    for _ in range(1200):
        if os.path.exists('/job/armed-%s' % name):
            return
        time.sleep(0.1)
    raise SystemExit('the host did not arm %s' % name)


def wait_event(ctx, wanted, limit=20):
    """The first async event of type WANTED (others are acked and skipped)."""
    for _ in range(limit):
        ev = ctx.get_async_event()
        kind = ev.event_type
        ev.ack()
        if kind == wanted:
            return kind
    return None


def rc_qp(pd, cq):
    return QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq,
                             cap=QPCap(max_send_wr=16, max_recv_wr=16)))


def connect(ctx, qp, peer):
    """RESET (from any state), then RTS towards PEER on the same port."""
    qp.modify(QPAttr(qp_state=e.IBV_QPS_RESET), e.IBV_QP_STATE)
    attr = QPAttr(port_num=1)
    attr.qp_access_flags = e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_LOCAL_WRITE
    attr.dest_qp_num = peer.qp_num
    attr.ah_attr = AHAttr(dlid=ctx.query_port(1).lid, port_num=1)
    attr.max_dest_rd_atomic = 1
    attr.max_rd_atomic = 1
    attr.min_rnr_timer = 12
    attr.timeout = 14
    attr.retry_cnt = 7
    attr.rnr_retry = 7
    qp.to_rts(attr)


def writes(qp, src, dst, ids):
    for i in ids:
        wr = SendWR(wr_id=i, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1,
                    sg=[SGE(src.buf, 8, src.lkey)], send_flags=e.IBV_SEND_SIGNALED)
        wr.set_wr_rdma(dst.rkey, dst.buf)
        qp.post_send(wr)


def poll(cq, n):
    """N completions as (wr_id, status), within 30 s."""
    got = []
    deadline = time.time() + 30
    while len(got) < n and time.time() < deadline:
        npolled, wcs = cq.poll(n - len(got))
        got += [(wc.wr_id, int(wc.status)) for wc in wcs[:npolled]]
    return got


def state(qp):
    attr, _ = qp.query(e.IBV_QP_STATE)
    return attr.qp_state
PYEOF

# 1. The 3rd WRITE of QP a fails with REM_ACCESS_ERR (injected), the 4th and 5th are
# flushed; the application resets both QPs, connects them again, and traffic resumes. Then
# QP_FATAL on a: the event reaches the process, a is in ERR, recovery again. Then the port
# goes down and up: the events arrive and ibv_query_port follows. Last, a CREATE_QP the
# device fails with NO_RESOURCES: ENOMEM, and the next QP works.
DEV=$D0 timeout 300 python3 - <<'PYEOF' 2>&1 | sed 's/^/wqe: /'
import os
import sys
sys.path.insert(0, '/tmp')
from faults_lib import ask, connect, poll, rc_qp, state, wait_event, writes
import pyverbs.enums as e
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsError

acc = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
with Context(name=os.environ['DEV']) as ctx, PD(ctx) as pd, CQ(ctx, 64) as cq:
    a, b = rc_qp(pd, cq), rc_qp(pd, cq)
    connect(ctx, a, b)
    connect(ctx, b, a)
    src, dst = MR(pd, 4096, acc), MR(pd, 4096, acc)
    src.write(b'injected', 8)
    ask('wqe', '%#x' % a.qp_num)
    writes(a, src, dst, range(1, 6))
    print('completions %s' % poll(cq, 5))
    print('qp state after the error %d' % state(a))
    connect(ctx, a, b)
    connect(ctx, b, a)
    dst.write(bytes(8), 8)
    writes(a, src, dst, [6])
    print('after reset %s data %s' % (poll(cq, 1), dst.read(8, 0)))

    ask('qpfatal', '%#x' % a.qp_num)
    print('async event %s (QP_FATAL %d)' % (wait_event(ctx, e.IBV_EVENT_QP_FATAL), e.IBV_EVENT_QP_FATAL))
    print('qp state after QP_FATAL %d' % state(a))
    connect(ctx, a, b)
    connect(ctx, b, a)
    writes(a, src, dst, [7])
    print('after QP_FATAL and reset %s' % poll(cq, 1))

    ask('portdown')
    print('async event %s (PORT_ERR %d) port state %d' % (
        wait_event(ctx, e.IBV_EVENT_PORT_ERR), e.IBV_EVENT_PORT_ERR, ctx.query_port(1).state))
    ask('portup')
    print('async event %s (PORT_ACTIVE %d) port state %d' % (
        wait_event(ctx, e.IBV_EVENT_PORT_ACTIVE), e.IBV_EVENT_PORT_ACTIVE, ctx.query_port(1).state))

    # A command the device fails: the verb returns the errno of its status, the device
    # and the driver go on.
    ask('adminfail')
    try:
        rc_qp(pd, cq)
        print('create_qp with NO_RESOURCES succeeded')
    except PyverbsError as ex:
        print('create_qp with NO_RESOURCES failed: errno %d' % ex.error_code)
    c = rc_qp(pd, cq)
    connect(ctx, c, c)
    writes(c, src, dst, [8])
    print('the next QP works: %s' % poll(cq, 1))
PYEOF

# 2. DEVICE_FATAL raised by the live device: the process gets IBV_EVENT_DEVICE_FATAL, later
# verbs fail at once, the kernel logs it; a function reset brings the device back.
bdf1=$(bdf_of "$D1")
DEV=$D1 timeout 120 python3 - <<'PYEOF' 2>&1 | sed 's/^/fatal: /'
import os
import sys
import time
sys.path.insert(0, '/tmp')
from faults_lib import ask, wait_event
import pyverbs.enums as e
from pyverbs.device import Context
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsError

with Context(name=os.environ['DEV']) as ctx:
    pd = PD(ctx)
    ask('fatal')
    print('async event %s (DEVICE_FATAL %d)' % (
        wait_event(ctx, e.IBV_EVENT_DEVICE_FATAL), e.IBV_EVENT_DEVICE_FATAL))
    t0 = time.time()
    try:
        PD(ctx)
        print('a verb after the fatal error succeeded')
    except PyverbsError as ex:
        print('a verb after the fatal error failed: errno %d in %.0f s' % (ex.error_code, time.time() - t0))
PYEOF
flr_and_check fatal "$bdf1"

# 3. An admin command the device holds for 8 s, beyond the driver's 5 s timeout: the verb
# fails with ETIMEDOUT in bounded time, the driver declares the device dead (reset,
# IB_EVENT_DEVICE_FATAL), later verbs fail at once with EIO; a function reset recovers.
bdf2=$(bdf_of "$D2")
DEV=$D2 timeout 120 python3 - <<'PYEOF' 2>&1 | sed 's/^/admin: /'
import os
import sys
import time
sys.path.insert(0, '/tmp')
from faults_lib import ask, wait_event
import pyverbs.enums as e
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsError

with Context(name=os.environ['DEV']) as ctx:
    pd = PD(ctx)
    ask('admin')
    t0 = time.time()
    try:
        CQ(ctx, 16)
        print('create_cq succeeded')
    except PyverbsError as ex:
        print('create_cq failed: errno %d after %d s' % (ex.error_code, round(time.time() - t0)))
    print('async event %s (DEVICE_FATAL %d)' % (
        wait_event(ctx, e.IBV_EVENT_DEVICE_FATAL), e.IBV_EVENT_DEVICE_FATAL))
    t0 = time.time()
    try:
        PD(ctx)
        print('a verb after the timeout succeeded')
    except PyverbsError as ex:
        print('a verb after the timeout failed: errno %d in %.0f s' % (ex.error_code, time.time() - t0))
PYEOF
# The device completes nothing late into the reset queue: wait out the 8 s first.
sleep 5
flr_and_check admin "$bdf2"

dmesg | grep -E 'vrnic|BUG|Oops|WARNING|hung|Call Trace' | sed 's/^/dmesg: /'
echo "oopses $(dmesg | grep -cE 'BUG|Oops|WARNING|Call Trace|hung task')"
