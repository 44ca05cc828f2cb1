#!/bin/sh
# The guest half of guest-smoke.sh, run in the guest as /job/run.sh: prints one line per
# step ("result NAME STATUS" and the facts the host checks); guest-smoke.sh judges them.
# Near the end it writes /job/kill-device and waits for the host's /job/device-killed.
# shellcheck source=../../../tests/guest/loopback.sh # copied to /job by guest-smoke.sh
. /job/loopback.sh
loop() { # loop NAME TOOL ARGS...: server and client on 127.0.0.1 (loopback_pair)
  name=$1
  shift
  loopback_pair 300 "$@"
  rc=$?
  echo "result $name $rc"
  tail -n 4 /tmp/client.log
}
wait_qp_init() { # up to 15 s for a QP in INIT (a held ibv_rc_pingpong server)
  n=0
  while [ $n -lt 15 ]; do
    sleep 1
    rdma res show qp 2>/dev/null | grep -q "type RC state INIT" && return 0
    n=$((n + 1))
  done
  return 1
}
flr() { echo 1 >"/sys/bus/pci/devices/$1/reset"; }
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
# A user SRQ shared by 4 RC QPs (create_srq's ABI, QPs on an SRQ, its doorbell page).
loop srq_pingpong ibv_srq_pingpong -d vrnic0 -q 4 -n 50
# Memory windows of both types on an MR with MW_BIND (alloc_mw/dealloc_mw), and an SRQ's
# limit set and read back (modify_srq LIMIT, query_srq), through pyverbs.
python3 - <<'EOF' 2>&1 | sed 's/^/pyverbs: /'
import pyverbs.enums as e
from pyverbs.device import Context
from pyverbs.mr import MR, MW
from pyverbs.pd import PD
from pyverbs.srq import SRQ, SrqAttr, SrqInitAttr

with Context(name='vrnic0') as ctx, PD(ctx) as pd:
    mr = MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_MW_BIND)
    for mw in [MW(pd, e.IBV_MW_TYPE_1), MW(pd, e.IBV_MW_TYPE_2)]:
        mw.close()
    print('mw type 1 and 2 allocated and freed')
    mr.close()
    srq = SRQ(pd, SrqInitAttr(SrqAttr(max_wr=64, max_sge=1)))
    srq.modify(SrqAttr(srq_limit=10), e.IBV_SRQ_LIMIT)
    a = srq.query()
    print('srq max_wr %d max_sge %d limit %d' % (a.max_wr, a.max_sge, a.srq_limit))
    srq.close()
EOF
# Send queue drain, XRC and the in-place changes of this round, through pyverbs:
# - an RC QP connected to itself moves RTS -> SQD with en_sqd_async_notify: IBV_EVENT_SQ_DRAINED
#   reaches the process, query_qp shows SQD and sq_draining 0, and it goes back to RTS;
# - resize_cq (larger, then smaller) and rereg_mr (access, PD, translation) in place, same key;
# - XRC: an XRC domain is refused (EOPNOTSUPP) without CAPS.XRC; with it, an XRC SRQ (its
#   srq_num, which must be the device's SRQ number, as create_srq's debug line shows), an
#   XRC_RECV QP (created in the kernel) to INIT and queried, then closed.
echo 'file vrnic_srq.c +p' >/proc/dynamic_debug/control
timeout 120 python3 - <<'PYEOF' 2>&1 | sed 's/^/verbs: /' | tee /tmp/verbs.log
import os
import pyverbs.enums as e
from pyverbs.addr import AHAttr
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsError
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr, QPInitAttrEx
from pyverbs.srq import SRQ, SrqInitAttrEx
from pyverbs.xrcd import XRCD, XRCDInitAttr


def step(name, fn):
    try:
        print('%s: %s' % (name, fn()))
    except PyverbsError as ex:
        print('%s: error %s' % (name, ex))


def sqd(ctx, pd, cq):
    qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq,
                           cap=QPCap(max_send_wr=4, max_recv_wr=4)))
    attr = QPAttr(port_num=1)
    attr.dest_qp_num = qp.qp_num
    attr.ah_attr = AHAttr(dlid=ctx.query_port(1).lid, port_num=1)
    attr.max_dest_rd_atomic = 1
    attr.max_rd_atomic = 1
    attr.min_rnr_timer = 12
    attr.timeout = 14
    attr.retry_cnt = 7
    attr.rnr_retry = 7
    qp.to_rts(attr)
    drain = QPAttr(qp_state=e.IBV_QPS_SQD)
    drain.en_sqd_async_notify = 1
    qp.modify(drain, e.IBV_QP_STATE | e.IBV_QP_EN_SQD_ASYNC_NOTIFY)
    ev = ctx.get_async_event()
    ev.ack()
    a, _ = qp.query(e.IBV_QP_STATE)
    qp.modify(QPAttr(qp_state=e.IBV_QPS_RTS), e.IBV_QP_STATE)
    b, _ = qp.query(e.IBV_QP_STATE)
    qp.close()
    return 'event %d (SQ_DRAINED %d) state %d draining %d, then state %d' % (
        ev.event_type, e.IBV_EVENT_SQ_DRAINED, a.qp_state, a.sq_draining, b.qp_state)


def resize(ctx):
    cq = CQ(ctx, 4)
    held = []
    for n in (100, 2):
        cq.resize(n)
        held.append('%d >= %d %s' % (cq.cqe, n, cq.cqe >= n))
    cq.close()
    return ', '.join(held)


def rereg(ctx, pd):
    # Read-only first: becoming writable pins the pages again (writable).
    mr = MR(pd, 8192, 0)
    key = mr.lkey
    mr.rereg(e.IBV_REREG_MR_CHANGE_ACCESS, pd, 0, 0,
             e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ)
    with PD(ctx) as pd2:
        mr.rereg(e.IBV_REREG_MR_CHANGE_PD, pd2)
        mr.rereg(e.IBV_REREG_MR_CHANGE_PD, pd)
    buf = MR(pd, 16384, e.IBV_ACCESS_LOCAL_WRITE)
    mr.rereg(e.IBV_REREG_MR_CHANGE_TRANSLATION, pd, buf.buf, 16384)
    same = mr.lkey == key and mr.rkey == key
    mr.close()
    buf.close()
    return 'access, pd, translation done, same key %s' % same


def xrc(ctx, pd, cq):
    fd = os.open('/tmp/xrcd', os.O_RDONLY | os.O_CREAT, 0o400)
    try:
        xrcd = XRCD(ctx, XRCDInitAttr(e.IBV_XRCD_INIT_ATTR_FD | e.IBV_XRCD_INIT_ATTR_OFLAGS,
                                      os.O_CREAT, fd))
    except PyverbsError as ex:
        return 'domain refused errno %d' % ex.error_code
    srq_attr = SrqInitAttrEx(max_wr=16)
    srq_attr.srq_type = e.IBV_SRQT_XRC
    srq_attr.pd = pd
    srq_attr.xrcd = xrcd
    srq_attr.cq = cq
    srq_attr.comp_mask = e.IBV_SRQ_INIT_ATTR_TYPE | e.IBV_SRQ_INIT_ATTR_PD | \
        e.IBV_SRQ_INIT_ATTR_CQ | e.IBV_SRQ_INIT_ATTR_XRCD
    srq = SRQ(ctx, srq_attr)
    tgt = QP(ctx, QPInitAttrEx(qp_type=e.IBV_QPT_XRC_RECV, comp_mask=e.IBV_QP_INIT_ATTR_XRCD,
                               xrcd=xrcd))
    init = QPAttr(port_num=1)
    init.qp_access_flags = e.IBV_ACCESS_REMOTE_WRITE
    tgt.to_init(init)
    a, _ = tgt.query(e.IBV_QP_STATE)
    srqn = srq.get_srq_num()
    tgt.close()
    srq.close()
    xrcd.close()
    os.close(fd)
    return 'srq_num %d, XRC_RECV QP state %d' % (srqn, a.qp_state)


with Context(name='vrnic0') as ctx, PD(ctx) as pd, CQ(ctx, 8) as cq:
    step('sqd', lambda: sqd(ctx, pd, cq))
    step('resize_cq', lambda: resize(ctx))
    step('rereg_mr', lambda: rereg(ctx, pd))
    step('xrc', lambda: xrc(ctx, pd, cq))
PYEOF
echo 'file vrnic_srq.c -p' >/proc/dynamic_debug/control
srqn=$(dmesg | sed -n 's/.* SRQ \([0-9]*\) type 1 .*/\1/p' | tail -n 1)
pynum=$(sed -n 's/^verbs: xrc: srq_num \([0-9]*\),.*/\1/p' /tmp/verbs.log)
echo "xrc-srq-num $pynum device $srqn"
echo "xrc-cap-flags $(ibv_devinfo -v -d vrnic0 | grep -cx '[[:space:]]*XRC')"

# Counters (with CAPS.COUNTERS): the port's hw counters (sysfs, `rdma statistic`) and, with
# per-QP counters on (auto mode), the rdma counter of an RC QP connected to itself that does
# 100 RDMA WRITEs of 8 KiB (loopback: the QP counts both sides), read while the QP lives;
# once it is gone, the link has moved by the same.
hw=/sys/class/infiniband/vrnic0/ports/1/hw_counters
n=0
for f in "$hw"/*; do [ ! -f "$f" ] || [ "${f##*/}" = lifespan ] || n=$((n + 1)); done
echo "hw-counters $n"
[ ! -d "$hw" ] ||
  timeout 120 python3 - <<'PYEOF' 2>&1 | sed 's/^/counters: /'
import subprocess
import pyverbs.enums as e
from pyverbs.addr import AHAttr
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, SendWR

N, SIZE = 100, 8192
NAMES = ('tx_write_requests', 'rx_write_requests', 'tx_bytes', 'rx_bytes')


def stat(*args):
    return subprocess.run(('rdma', 'statistic') + args, capture_output=True, text=True,
                          check=True).stdout


def values(text):
    t = text.split()
    return {n: int(t[t.index(n) + 1]) for n in NAMES if n in t}


def show(what, v):
    print(what + ' ' + ' '.join('%s %d' % (n, v.get(n, -1)) for n in NAMES))


before = values(stat('show', 'link', 'vrnic0/1'))
stat('qp', 'set', 'link', 'vrnic0/1', 'auto', 'type', 'on')
with Context(name='vrnic0') as ctx, PD(ctx) as pd, CQ(ctx, 8) as cq:
    mr = MR(pd, SIZE, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE)
    qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq,
                           cap=QPCap(max_send_wr=4, max_recv_wr=4)))
    attr = QPAttr(port_num=1)
    attr.qp_access_flags = e.IBV_ACCESS_REMOTE_WRITE
    attr.dest_qp_num = qp.qp_num
    attr.ah_attr = AHAttr(dlid=ctx.query_port(1).lid, port_num=1)
    attr.max_dest_rd_atomic = 1
    attr.max_rd_atomic = 1
    attr.min_rnr_timer = 12
    attr.timeout = 14
    attr.retry_cnt = 7
    attr.rnr_retry = 7
    qp.to_rts(attr)
    for _ in range(N):
        wr = SendWR(opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(mr.buf, SIZE, mr.lkey)])
        wr.set_wr_rdma(mr.rkey, mr.buf)
        qp.post_send(wr)
        n, wcs = 0, []
        while n == 0:
            n, wcs = cq.poll()
        if wcs[0].status != e.IBV_WC_SUCCESS:
            raise RuntimeError('WRITE completed with status %d' % wcs[0].status)
    show('qp counter', values(stat('qp', 'show', 'link', 'vrnic0/1')))
    qp.close()
    mr.close()
stat('qp', 'set', 'link', 'vrnic0/1', 'auto', 'off')
after = values(stat('show', 'link', 'vrnic0/1'))
show('link moved', {n: after[n] - before[n] for n in NAMES if n in after and n in before})
PYEOF

# A UC QP pair, and RC atomics (FETCH_AND_ADD, then CMP_AND_SWAP).
loop uc_pingpong ibv_uc_pingpong -d vrnic0 -n 50
loop atomic_bw_fadd ib_atomic_bw -d vrnic0 -n 200 -A FETCH_AND_ADD
loop atomic_bw_cas ib_atomic_bw -d vrnic0 -n 200 -A CMP_AND_SWAP

# The optional features CAPS announces, as ibv_devinfo shows the driver's attributes.
ibv_devinfo -v -d vrnic0 | grep -E "atomic_cap|max_srq|max_mw|MEM_WINDOW|MEM_MGT" |
  tr -s '\t ' ' ' | sed 's/^/caps:/'
# An MR on 2 MiB huge pages goes to the device as 2 MiB pages (reg_user_mr's debug line).
echo 16 >/proc/sys/vm/nr_hugepages
echo 'file vrnic_mr.c +p' >/proc/dynamic_debug/control
loop write_bw_hugepages ib_write_bw -d vrnic0 -n 100 -s 1048576 --use_hugepages
echo 'file vrnic_mr.c -p' >/proc/dynamic_debug/control
echo "huge-page-mrs $(dmesg | grep -c 'MR .* pages of 2097152$')"

# IRQ synchronisation per EQ: destroying a CQ waits for its completion EQ's vector and the
# async EQ's (vrnic-ctrl), destroying a QP for the async EQ's only, never for another
# vector. A kprobe on synchronize_irq() records the IRQ numbers while two ibv_rc_pingpong
# (QPs and CQs on completion vector 0, vrnic-comp0) run and exit.
irq_of() { grep -E "vrnic-$1@" /proc/interrupts | cut -d: -f1 | tr -d ' '; }
syncs_of() { [ -n "$1" ] && grep -c "vrnic_sync: .* irq=$1\$" /tmp/syncs.log; }
tracing=/sys/kernel/tracing
[ -d $tracing/events ] || mount -t tracefs nodev $tracing
echo 'p:vrnic_sync synchronize_irq irq=%di:u32' >$tracing/kprobe_events
echo >$tracing/trace
echo 1 >$tracing/events/kprobes/vrnic_sync/enable
loop rc_pingpong_irq_sync ibv_rc_pingpong -d vrnic0 -n 5
echo 0 >$tracing/events/kprobes/vrnic_sync/enable
cat $tracing/trace >/tmp/syncs.log
echo >$tracing/kprobe_events
ctrl=$(irq_of ctrl) comp0=$(irq_of comp0) comp1=$(irq_of comp1)
echo "irq-sync ctrl=$(syncs_of "$ctrl") comp0=$(syncs_of "$comp0") comp1=$(syncs_of "$comp1") irqs $ctrl $comp0 $comp1"

ibv_rc_pingpong -d vrnic0 >/tmp/held.log 2>&1 &
pid=$!
wait_qp_init
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
echo "reset_method $(cat "/sys/bus/pci/devices/$bdf/reset_method")"
timeout 120 ibv_rc_pingpong -d vrnic0 >/tmp/held.log 2>&1 &
pid=$!
timeout 120 ibv_asyncwatch -d vrnic0 >/tmp/async.log 2>&1 &
apid=$!
wait_qp_init
rdma res show
flr "$bdf"
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
  while [ -d "/proc/$1" ] && ! grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null; do
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
wait_qp_init
sleep 1
rdma res show
dmesg >/tmp/dmesg.before
touch /job/kill-device
n=0
while [ ! -f /job/device-killed ] && [ $n -lt 120 ]; do sleep 0.5; n=$((n + 1)); done
echo "host killed the device: $(cat /job/device-killed 2>/dev/null)"
s=$(date +%s)
bounded 60 timeout -s KILL 50 ibv_devinfo -d vrnic0 >/tmp/devinfo.log 2>&1
echo "result devinfo-after-kill $? ($(($(date +%s) - s))s)"
head -n 5 /tmp/devinfo.log
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
tail -n 30 /tmp/dmesg.new
echo "dead-declared $(grep -c 'vrnic .*resetting the device' /tmp/dmesg.new)"
echo "dead-reset-gone $(grep -c 'vrnic .*reset (.*): the device is gone' /tmp/dmesg.new)"
echo "dead-dmesg-problems $(grep -ciE 'WARNING|BUG:|Call Trace|Oops|blocked for more than|hung_task' /tmp/dmesg.new)"
