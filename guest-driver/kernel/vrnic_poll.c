// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
/*
 * Kernel CQs: poll_cq and req_notify_cq (SPEC "Completion queue",
 * "Completion events"). CQEs are decoded by vrnic_wqe.h, shared with the
 * provider. cq->lock serializes polling and arming of one CQ; a CQE's QP is
 * found by its device QPN in dev->qps, and destroy_qp takes the locks of the
 * QP's CQs after erasing it, so a poller never uses a QP being freed. A
 * receive of a QP with an SRQ frees the slot the CQE names in the SRQ the
 * CQE names (CQE_FLAG_SRQ, srqn; vrnic_srq.c), which must be the QP's: the
 * SRQ outlives its QPs (ib_core counts them); vrnic_cq_clean() drops the
 * CQEs of a destroyed or reset QP. While a kernel CQ is being
 * resized (vrnic_cq.c) its pollers find nothing and arming reports a missed
 * event, so that ib_cq's pollers come back.
 *
 * CQE fields are the device's and checked (see tests/e2e-hostile.sh): the
 * QPN must be a kernel QP whose queue completes to this CQ (else the CQE is
 * dropped, reported), the WQE index a slot with a posted WQE, the SRQ the
 * QP's (else the CQE is dropped, reported: its wr_id cannot be trusted); an
 * unknown opcode, status or flag bit or a byte_len beyond any message makes
 * the completion of its WQE a failed one.
 */
#include "vrnic.h"

/* The hw-spec completion enums are defined as the verbs values. */
/* (Opcodes are translated by vrnic_cqe_ib_opcode(): REG_MR differs.) */
VRNIC_ASSERT_SAME(VRNIC_WC_STATUS_SUCCESS, IB_WC_SUCCESS);
VRNIC_ASSERT_SAME(VRNIC_WC_STATUS_WR_FLUSH_ERR, IB_WC_WR_FLUSH_ERR);
VRNIC_ASSERT_SAME(VRNIC_WC_STATUS_RNR_RETRY_EXC_ERR, IB_WC_RNR_RETRY_EXC_ERR);
VRNIC_ASSERT_SAME(VRNIC_WC_STATUS_GENERAL_ERR, IB_WC_GENERAL_ERR);
VRNIC_ASSERT_SAME(VRNIC_NETWORK_TYPE_IB, RDMA_NETWORK_IB);
VRNIC_ASSERT_SAME(VRNIC_NETWORK_TYPE_ROCE_V1, RDMA_NETWORK_ROCE_V1);
VRNIC_ASSERT_SAME(VRNIC_NETWORK_TYPE_IPV4, RDMA_NETWORK_IPV4);
VRNIC_ASSERT_SAME(VRNIC_NETWORK_TYPE_IPV6, RDMA_NETWORK_IPV6);

/* The CQE at free-running index @ci, if the device has written it. */
static struct vrnic_cqe *vrnic_cq_at(struct vrnic_cq *cq, u32 ci)
{
	struct vrnic_cqe *cqe =
		vrnic_kring_entry(&cq->ring, ci & ((1U << cq->depth_log2) - 1));

	if (!vrnic_cqe_owned(READ_ONCE(cqe->owner), ci, cq->depth_log2))
		return NULL;
	/* Acquire: the rest of the entry after owner. */
	dma_rmb();
	return cqe;
}

/* The CQE at cq->ci, if the device has written it (owner read first). */
static const struct vrnic_cqe *vrnic_cq_next(struct vrnic_cq *cq)
{
	return vrnic_cq_at(cq, cq->ci);
}

/*
 * Retire every WQE of @wq up to and including the one at @wqe_index; false,
 * retiring nothing, when @wqe_index is outside the queue or names a slot
 * with no posted WQE (outside [ci, pi)): a device that says so is wrong, and
 * believing it would hand slots still in use back to the poster.
 */
static bool vrnic_wq_retire(struct vrnic_wq *wq, u16 wqe_index)
{
	u32 mask = (1U << wq->depth_log2) - 1;
	u32 ci = wq->ci;
	u32 delta = (wqe_index - ci) & mask;

	if (wqe_index > mask || delta >= READ_ONCE(wq->pi) - ci)
		return false;
	/* Pairs with post's acquire: the slot may be reused from now on. */
	smp_store_release(&wq->ci, ci + delta + 1);
	return true;
}

/* cqe.flags and cqe.wc_flags bits the spec defines. */
#define VRNIC_CQE_FLAGS_ALL (VRNIC_CQE_FLAG_RECV | VRNIC_CQE_FLAG_SOLICITED | \
			     VRNIC_CQE_FLAG_SRQ)

/*
 * Whether a CQE's opcode is one the device can write for that queue, and its
 * status, flags and length are values the spec has. Only a receive may carry
 * WITH_INV. Anything else is reported as a failed completion rather than
 * passed on.
 */
static bool vrnic_cqe_opcode_valid(const struct vrnic_cqe_fields *f)
{
	if (f->status > VRNIC_WC_STATUS_GENERAL_ERR ||
	    (f->flags & ~VRNIC_CQE_FLAGS_ALL) ||
	    (f->wc_flags & ~VRNIC_WC_FLAGS_ALL) ||
	    f->byte_len > VRNIC_BAR0_MAX_MSG_SIZE_RESET)
		return false;
	if (f->flags & VRNIC_CQE_FLAG_RECV)
		return f->opcode == VRNIC_WC_OPCODE_RECV ||
		       f->opcode == VRNIC_WC_OPCODE_RECV_RDMA_WITH_IMM;
	if (f->wc_flags & VRNIC_WC_FLAGS_WITH_INV)
		return false;
	switch (f->opcode) {
	case VRNIC_WC_OPCODE_SEND:
	case VRNIC_WC_OPCODE_RDMA_WRITE:
	case VRNIC_WC_OPCODE_RDMA_READ:
	case VRNIC_WC_OPCODE_COMP_SWAP:
	case VRNIC_WC_OPCODE_FETCH_ADD:
	case VRNIC_WC_OPCODE_BIND_MW:
	case VRNIC_WC_OPCODE_LOCAL_INV:
	case VRNIC_WC_OPCODE_REG_MR:
		return true;
	default:
		return false;
	}
}

/*
 * Retire the WQE a CQE completes; false when the CQE cannot be the QP's:
 * a receive of a QP with an SRQ must name that SRQ and a slot of it, other
 * CQEs must not name an SRQ.
 */
static bool vrnic_cqe_retire(struct vrnic_qp *qp,
			     const struct vrnic_cqe_fields *f)
{
	bool from_srq = f->flags & VRNIC_CQE_FLAG_SRQ;
	struct vrnic_srq *srq;

	if (!(f->flags & VRNIC_CQE_FLAG_RECV))
		return !from_srq && vrnic_wq_retire(&qp->sq, f->wqe_index);
	if (!qp->ibqp.srq)
		return !from_srq && vrnic_wq_retire(&qp->rq, f->wqe_index);
	srq = to_vsrq(qp->ibqp.srq);
	if (!from_srq || f->srqn != srq->srqn ||
	    f->wqe_index >= (1U << srq->depth_log2))
		return false;
	vrnic_srq_retire(srq, f->wqe_index);
	return true;
}

/* A CQE that vrnic_cqe_retire() accepted, as a work completion. */
static void vrnic_fill_wc(struct vrnic_qp *qp, const struct vrnic_cqe_fields *f,
			  struct ib_wc *wc)
{
	bool recv = f->flags & VRNIC_CQE_FLAG_RECV;

	memset(wc, 0, sizeof(*wc));
	wc->wr_id = f->wr_id;
	wc->status = f->status;
	wc->vendor_err = f->vendor_err;
	wc->byte_len = f->byte_len;
	wc->qp = &qp->ibqp;
	if (!vrnic_cqe_opcode_valid(f)) {
		dev_warn_ratelimited(&to_vdev(qp->ibqp.device)->pdev->dev,
				     "QP %u: invalid CQE: opcode %#x status %#x wc_flags %#x flags %#x byte_len %#x srqn %u wqe_index %u\n",
				     qp->qpn, f->opcode, f->status, f->wc_flags,
				     f->flags, f->byte_len, f->srqn,
				     f->wqe_index);
		wc->status = IB_WC_GENERAL_ERR;
		wc->opcode = recv ? IB_WC_RECV : IB_WC_SEND;
		return;
	}
	wc->opcode = vrnic_cqe_ib_opcode(f->opcode);
	wc->wc_flags = vrnic_cqe_ib_wc_flags(f->wc_flags);
	if (wc->wc_flags & IB_WC_WITH_IMM)
		wc->ex.imm_data = f->imm_data;
	else if (wc->wc_flags & IB_WC_WITH_INVALIDATE)
		wc->ex.invalidate_rkey = f->invalidated_rkey;
	wc->port_num = VRNIC_PORT_NUM;
	if (recv) {
		wc->src_qp = f->src_qp & VRNIC_QPN_MAX;
		wc->slid = f->slid;
		wc->sl = f->sl & 0xf;
		wc->pkey_index = f->pkey_index;
		if (qp->datagram && to_vdev(qp->ibqp.device)->roce &&
		    f->network_type <= VRNIC_NETWORK_TYPE_IPV6) {
			/* Lets ib_init_ah_attr_from_wc() skip parsing the GRH. */
			wc->network_hdr_type = f->network_type;
			wc->wc_flags |= IB_WC_WITH_NETWORK_HDR_TYPE;
		}
	}
}

/*
 * The kernel QP a CQE of @cq names, or NULL (the CQE is dropped). The QP must
 * use @cq for that queue: destroy_qp takes the locks of the QP's own CQs
 * after erasing it, so only such a QP stays alive while we hold cq->lock.
 * The check is made under the xarray's lock, which the erase takes, so the
 * QP cannot be freed between the look-up and the check. A QP of another CQ,
 * a user QP or a number no QP can have is the device's error and reported.
 */
static struct vrnic_qp *vrnic_cqe_qp(struct vrnic_dev *dev,
				     struct vrnic_cq *cq,
				     const struct vrnic_cqe_fields *f)
{
	bool recv = f->flags & VRNIC_CQE_FLAG_RECV;
	struct vrnic_qp *qp;
	const char *why;

	if (f->qpn < VRNIC_QPN_MIN || f->qpn > VRNIC_QPN_MAX) {
		why = "no QPN";
		goto bad;
	}
	xa_lock(&dev->qps);
	qp = xa_load(&dev->qps, f->qpn);
	if (!qp) {
		xa_unlock(&dev->qps);
		/* Its QP was destroyed after the device wrote it. */
		ibdev_dbg(&dev->ibdev, "CQ %u: CQE of unknown QP %u\n",
			  cq->cqn, f->qpn);
		return NULL;
	}
	if (!qp->kernel)
		why = "a user QP";
	else if ((recv ? qp->ibqp.recv_cq : qp->ibqp.send_cq) != &cq->ibcq)
		why = "a QP of another CQ";
	else
		why = NULL;
	xa_unlock(&dev->qps);
	if (!why)
		return qp;
bad:
	dev_warn_ratelimited(&dev->pdev->dev,
			     "CQ %u: CQE names %s (QPN %#x); dropped\n",
			     cq->cqn, why, f->qpn);
	return NULL;
}

int vrnic_poll_cq(struct ib_cq *ibcq, int num_entries, struct ib_wc *wc)
{
	struct vrnic_dev *dev = to_vdev(ibcq->device);
	struct vrnic_cq *cq = to_vcq(ibcq);
	const struct vrnic_cqe *cqe;
	struct vrnic_cqe_fields f;
	struct vrnic_qp *qp;
	unsigned long flags;
	u32 start;
	int n = 0;

	/* A user CQ's ring is the provider's (uverbs may still call here). */
	if (cq->umem)
		return -EINVAL;
	spin_lock_irqsave(&cq->lock, flags);
	if (cq->resizing) {
		spin_unlock_irqrestore(&cq->lock, flags);
		return 0;
	}
	start = cq->ci;
	while (n < num_entries && (cqe = vrnic_cq_next(cq))) {
		vrnic_cqe_decode(cqe, &f);
		cq->ci++;
		if (!f.qpn)
			continue;	/* dropped by vrnic_cq_clean() */
		qp = vrnic_cqe_qp(dev, cq, &f);
		if (!qp)
			continue;
		/*
		 * A CQE that completes no outstanding WQE is not passed on:
		 * its wr_id would be a completed request's (a kernel ULP's
		 * ib_cqe, maybe freed) or garbage. The WQE it may stand for
		 * completes when the QP is flushed.
		 */
		if (!vrnic_cqe_retire(qp, &f)) {
			dev_warn_ratelimited(&dev->pdev->dev,
					     "QP %u: CQE for no outstanding WQE (flags %#x srqn %u wqe_index %u); dropped\n",
					     qp->qpn, f.flags, f.srqn,
					     f.wqe_index);
			continue;
		}
		vrnic_fill_wc(qp, &f, &wc[n++]);
	}
	if (cq->ci != start) {
		/* Every CQE read before the device may reuse its entry. */
		mb();
		writel(cq->ci, cq->slot + VRNIC_DB_CQ_SLOT_CI_OFF);
	}
	spin_unlock_irqrestore(&cq->lock, flags);
	return n;
}

/*
 * Drop the CQEs of kernel QP @qp that @cq holds and no poller has taken yet
 * (destroy_qp, once DESTROY_QP has completed, and a move to RESET, once the
 * device has forgotten the QP's WQEs): a receive among them that names the
 * QP's SRQ frees that SRQ slot, as polling it would have, so that the slot
 * of a CQE nobody will poll does not stay busy and stop post_srq_recv at it
 * for good; other CQEs would retire WQEs of the QP's next incarnation. The
 * device never writes an entry the driver has not consumed, so the written
 * ones after ci may be edited: QPN 0, which the device never uses, marks a
 * dropped one for poll_cq. While the CQ is being resized its CQEs are moving
 * to the new ring and are left alone (poll_cq skips those of a destroyed QP).
 */
void vrnic_cq_clean(struct ib_cq *ibcq, struct vrnic_qp *qp)
{
	struct vrnic_cq *cq = to_vcq(ibcq);
	struct vrnic_cqe_fields f;
	struct vrnic_cqe *cqe;
	unsigned long flags;
	u32 ci;

	if (!ibcq || cq->umem)
		return;
	spin_lock_irqsave(&cq->lock, flags);
	for (ci = cq->ci; !cq->resizing && (cqe = vrnic_cq_at(cq, ci)); ci++) {
		vrnic_cqe_decode(cqe, &f);
		if (f.qpn != qp->qpn)
			continue;
		if ((f.flags & VRNIC_CQE_FLAG_RECV) && qp->ibqp.srq)
			vrnic_cqe_retire(qp, &f);
		WRITE_ONCE(cqe->qpn, 0);
	}
	spin_unlock_irqrestore(&cq->lock, flags);
}

/*
 * Arm (SPEC "Completion events"): a new sequence number with the command,
 * a full barrier, then one more look at the ring, so that a CQE the device
 * wrote before it saw the arm is reported as a missed event.
 */
int vrnic_req_notify_cq(struct ib_cq *ibcq, enum ib_cq_notify_flags flags)
{
	struct vrnic_cq *cq = to_vcq(ibcq);
	u32 cmd = (flags & IB_CQ_SOLICITED_MASK) == IB_CQ_SOLICITED ?
		  VRNIC_CQ_ARM_SOLICITED : VRNIC_CQ_ARM_NEXT;
	unsigned long irqflags;
	int ret = 0;

	if (cq->umem)
		return -EINVAL;
	spin_lock_irqsave(&cq->lock, irqflags);
	cq->arm_seq++;
	writel(cq->arm_seq << VRNIC_CQ_ARM_SEQ_SHIFT | cmd,
	       cq->slot + VRNIC_DB_CQ_SLOT_ARM_OFF);
	if (flags & IB_CQ_REPORT_MISSED_EVENTS) {
		/* The arm store before the look at the next CQE. */
		mb();
		ret = cq->resizing || vrnic_cq_next(cq) ? 1 : 0;
	}
	spin_unlock_irqrestore(&cq->lock, irqflags);
	return ret;
}
