#!/usr/bin/env python3
"""Verbs no stock tool posts, for the Soft-RoCE capture (tests/softroce-capture.sh), through
rdma-core's pyverbs: an RC SEND with Immediate of 2501 bytes (First, Middle, Last with
Immediate at MTU 1024) and one of 5 bytes (Only with Immediate), a UD SEND with Immediate,
then an RDMA WRITE to an R_Key the server never registered, which its responder answers
with a remote access error NAK. The two ends swap QPNs, PSNs and GIDs over TCP.

Usage: softroce_verbs.py server DEV GID-INDEX PORT
       softroce_verbs.py client DEV GID-INDEX PORT SERVER-ADDRESS
Exits 0 when every completion is what it should be (the server checks the immediates,
lengths and bytes; the client that the WRITE failed with IBV_WC_REM_ACCESS_ERR)."""
import json
import socket
import sys
import time

import pyverbs.enums as e
from pyverbs.addr import AH, AHAttr, GID, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR

SIZES = (2501, 5)
UD_SIZE = 100
GRH = 40
QKEY = 0x11111111
PSN = {"server": 0x1000, "client": 0x2000}
IMM = (0x01020304, 0x05060708, 0x090A0B0C)
BAD_RKEY = 0x00DEAD00


def pattern(n, seed):
    return bytes((i * 7 + seed) % 251 for i in range(n))


def gid_of(ctx, gidx, text):
    """The GID written as `text` (as GID.gid prints it)."""
    try:
        return GID(text)
    except TypeError:
        g = ctx.query_gid(1, gidx)
        g.gid = text
        return g


def poll(cq, n, what):
    wcs, end = [], time.time() + 60
    while len(wcs) < n:
        got, batch = cq.poll(num_entries=n - len(wcs))
        wcs += batch[:got]
        if time.time() > end:
            sys.exit(f"{what}: {len(wcs)} of {n} completions in 60 s")
    return wcs


def main():
    role, dev, gidx, port = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    ctx = Context(name=dev)
    pd = PD(ctx)
    cq = CQ(ctx, 64)
    access = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
    mr = MR(pd, 65536, access)
    cap = QPCap(max_send_wr=16, max_recv_wr=16, max_send_sge=1, max_recv_sge=1)
    init = QPAttr(port_num=1)
    init.qp_access_flags = access
    rc = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap), init)  # INIT
    ud_attr = QPAttr()
    ud_attr.qkey = QKEY
    ud_attr.port_num = 1
    ud_attr.pkey_index = 0
    ud = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_UD, scq=cq, rcq=cq, cap=cap), ud_attr)
    gid = ctx.query_gid(1, gidx).gid
    me = {"rc": rc.qp_num, "ud": ud.qp_num, "psn": PSN[role], "gid": gid}

    if role == "server":
        # Receives first: the client sends as soon as it has our QPNs.
        for i, n in enumerate(SIZES):
            rc.post_recv(RecvWR(wr_id=i, num_sge=1, sg=[SGE(mr.buf + i * 8192, n, mr.lkey)]))
        ud.post_recv(RecvWR(wr_id=9, num_sge=1, sg=[SGE(mr.buf + 32768, UD_SIZE + GRH, mr.lkey)]))
        lsock = socket.create_server(("", port), family=socket.AF_INET6, dualstack_ipv6=True)
        conn, _ = lsock.accept()
    else:
        conn = socket.create_connection((sys.argv[5], port), timeout=60)
    f = conn.makefile("rw")
    f.write(json.dumps(me) + "\n")
    f.flush()
    peer = json.loads(f.readline())

    gr = GlobalRoute(dgid=gid_of(ctx, gidx, peer["gid"]), sgid_index=gidx)
    ah_attr = AHAttr(port_num=1, is_global=1, gr=gr)
    attr = QPAttr()
    attr.port_num = 1
    attr.pkey_index = 0
    attr.qp_access_flags = access
    attr.path_mtu = e.IBV_MTU_1024
    attr.dest_qp_num = peer["rc"]
    attr.rq_psn = peer["psn"]
    attr.sq_psn = me["psn"]
    attr.max_dest_rd_atomic = 1
    attr.max_rd_atomic = 1
    attr.min_rnr_timer = 12
    attr.timeout = 14
    attr.retry_cnt = 7
    attr.rnr_retry = 7
    attr.ah_attr = ah_attr
    rc.to_rts(attr)
    f.write("ready\n")
    f.flush()
    if f.readline().strip() != "ready":
        sys.exit("the peer did not get ready")

    if role == "server":
        wcs = poll(cq, len(SIZES) + 1, "receives")
        bad = []
        for wc in wcs:
            i = wc.wr_id
            n, at, imm = (SIZES[i], i * 8192, IMM[i]) if i < len(SIZES) else (UD_SIZE, 32768 + GRH, IMM[2])
            data = mr.read(n, at)
            ok = (wc.status == e.IBV_WC_SUCCESS and wc.wc_flags & e.IBV_WC_WITH_IMM
                  and socket.ntohl(wc.imm_data) == imm and wc.byte_len == n + (GRH if i == 9 else 0)
                  and data == pattern(n, i))
            print(f"recv {i}: status {wc.status} len {wc.byte_len} imm {socket.ntohl(wc.imm_data):#x} {'ok' if ok else 'WRONG'}")
            bad += [] if ok else [i]
        f.write("done\n")
        f.flush()
        f.readline()  # the client's WRITE result, once its NAK came
        if bad:
            sys.exit(f"wrong receives: {bad}")
        print("server: all received")
        return

    ah = AH(pd, attr=ah_attr)
    for i, n in enumerate(SIZES):
        mr.write(pattern(n, i), n, 16384 + i * 8192)
        wr = SendWR(wr_id=i, opcode=e.IBV_WR_SEND_WITH_IMM, num_sge=1,
                    sg=[SGE(mr.buf + 16384 + i * 8192, n, mr.lkey)], imm_data=socket.htonl(IMM[i]))
        rc.post_send(wr)
    mr.write(pattern(UD_SIZE, 9), UD_SIZE, 40000)
    wr = SendWR(wr_id=9, opcode=e.IBV_WR_SEND_WITH_IMM, num_sge=1,
                sg=[SGE(mr.buf + 40000, UD_SIZE, mr.lkey)], imm_data=socket.htonl(IMM[2]))
    wr.set_wr_ud(ah, peer["ud"], QKEY)
    ud.post_send(wr)
    for wc in poll(cq, len(SIZES) + 1, "sends"):
        if wc.status != e.IBV_WC_SUCCESS:
            sys.exit(f"send {wc.wr_id}: status {wc.status}")
    if f.readline().strip() != "done":
        sys.exit("the server did not confirm")
    wr = SendWR(wr_id=20, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(mr.buf, 64, mr.lkey)])
    wr.set_wr_rdma(BAD_RKEY, 0x1000)
    rc.post_send(wr)
    (wc,) = poll(cq, 1, "the WRITE to a bad R_Key")
    f.write("written\n")
    f.flush()
    if wc.status != e.IBV_WC_REM_ACCESS_ERR:
        sys.exit(f"WRITE to a bad R_Key: status {wc.status}, not REM_ACCESS_ERR")
    print("client: sends with immediate done; WRITE to a bad R_Key: remote access error")


if __name__ == "__main__":
    main()
