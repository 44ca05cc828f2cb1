// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
/*
 * Kernel QPs: post_send and post_recv (SPEC "Posting work", "Datagrams").
 * WQEs are encoded by vrnic_wqe.h, shared with the provider, into the
 * kernel rings; the doorbell goes to the QP's slot in a kernel doorbell page
 * (vrnic_kdb.c). A queue's lock serializes its posters; the consumer index
 * is advanced by poll_cq as CQEs retire WQEs.
 *
 * Kernel users name their buffers by DMA address with the PD's
 * local_dma_lkey (LOCAL_DMA_LKEY) or by an MR's lkey; the device checks
 * either. Inline data is not offered (max_inline_data is 0).
 */
#include "vrnic.h"

/* The hw-spec send enums are defined as the verbs values. */
VRNIC_ASSERT_SAME(VRNIC_WR_OPCODE_RDMA_WRITE, IB_WR_RDMA_WRITE);
VRNIC_ASSERT_SAME(VRNIC_WR_OPCODE_RDMA_WRITE_WITH_IMM, IB_WR_RDMA_WRITE_WITH_IMM);
VRNIC_ASSERT_SAME(VRNIC_WR_OPCODE_SEND, IB_WR_SEND);
VRNIC_ASSERT_SAME(VRNIC_WR_OPCODE_SEND_WITH_IMM, IB_WR_SEND_WITH_IMM);
VRNIC_ASSERT_SAME(VRNIC_WR_OPCODE_RDMA_READ, IB_WR_RDMA_READ);
VRNIC_ASSERT_SAME(VRNIC_SEND_FLAGS_FENCE, IB_SEND_FENCE);
VRNIC_ASSERT_SAME(VRNIC_SEND_FLAGS_SIGNALED, IB_SEND_SIGNALED);
VRNIC_ASSERT_SAME(VRNIC_SEND_FLAGS_SOLICITED, IB_SEND_SOLICITED);

/* Room for one more WQE: the poller's retirements are read with acquire. */
static bool vrnic_wq_full(struct vrnic_wq *wq)
{
	/* Pairs with poll_cq's release: the retired slots are free. */
	return wq->pi - smp_load_acquire(&wq->ci) >= (1U << wq->depth_log2);
}

/* The next free WQE of @wq, zeroed (reserved fields must be zero). */
static void *vrnic_wq_next(struct vrnic_wq *wq)
{
	void *wqe = vrnic_kring_entry(&wq->ring,
				      wq->pi & ((1U << wq->depth_log2) - 1));

	memset(wqe, 0, 1U << wq->ring.entry_shift);
	return wqe;
}

static int vrnic_send_opcode(const struct vrnic_qp *qp,
			     const struct ib_send_wr *wr,
			     struct vrnic_send_fields *f)
{
	switch (wr->opcode) {
	case IB_WR_SEND_WITH_IMM:
		f->imm_data = wr->ex.imm_data;
		fallthrough;
	case IB_WR_SEND:
		f->opcode = wr->opcode;
		return 0;
	case IB_WR_RDMA_WRITE_WITH_IMM:
		f->imm_data = wr->ex.imm_data;
		fallthrough;
	case IB_WR_RDMA_WRITE:
	case IB_WR_RDMA_READ:
		/* Datagrams are SENDs only. */
		if (qp->datagram)
			return -EINVAL;
		f->opcode = wr->opcode;
		f->remote_addr = rdma_wr(wr)->remote_addr;
		f->rkey = rdma_wr(wr)->rkey;
		return 0;
	default:
		return -EINVAL;
	}
}

static int vrnic_build_send(struct vrnic_qp *qp, void *wqe,
			    const struct ib_send_wr *wr)
{
	struct vrnic_send_fields f = { .wr_id = wr->wr_id };
	struct vrnic_sge *sge;
	int err, i;

	if (wr->send_flags & IB_SEND_INLINE)
		return -EINVAL;
	if (wr->num_sge < 0 || wr->num_sge > qp->sq.max_sge)
		return -EINVAL;
	err = vrnic_send_opcode(qp, wr, &f);
	if (err)
		return err;

	f.flags = wr->send_flags & (IB_SEND_FENCE | IB_SEND_SIGNALED |
				    IB_SEND_SOLICITED);
	if (qp->sq_sig_type == IB_SIGNAL_ALL_WR)
		f.flags |= VRNIC_SEND_FLAGS_SIGNALED;
	f.num_sge = wr->num_sge;

	if (qp->datagram) {
		const struct ib_ud_wr *ud = ud_wr(wr);
		struct vrnic_av av;

		if (!ud->ah)
			return -EINVAL;
		av = to_vah(ud->ah)->av;
		av.remote_qpn = ud->remote_qpn & VRNIC_QPN_MAX;
		av.remote_qkey = ud->remote_qkey;
		vrnic_set_ud_av(vrnic_send_wqe_ud_av(wqe), &av);
	}
	sge = vrnic_send_wqe_payload(wqe, qp->datagram);
	for (i = 0; i < wr->num_sge; i++)
		vrnic_set_sge(&sge[i], wr->sg_list[i].addr,
			      wr->sg_list[i].length, wr->sg_list[i].lkey);
	vrnic_set_send_wqe_header(wqe, &f);
	return 0;
}

int vrnic_post_send(struct ib_qp *ibqp, const struct ib_send_wr *wr,
		    const struct ib_send_wr **bad_wr)
{
	struct vrnic_qp *qp = to_vqp(ibqp);
	struct vrnic_wq *sq = &qp->sq;
	unsigned long flags;
	u32 start;
	int err = 0;

	spin_lock_irqsave(&sq->lock, flags);
	start = sq->pi;
	for (; wr; wr = wr->next) {
		if (vrnic_wq_full(sq)) {
			err = -ENOMEM;
			break;
		}
		err = vrnic_build_send(qp, vrnic_wq_next(sq), wr);
		if (err)
			break;
		sq->pi++;
	}
	if (sq->pi != start)
		vrnic_kdb_ring_qp(qp->kdb, qp->db.slot,
				  VRNIC_DB_QP_SLOT_SQ_PI_OFF, sq->pi);
	spin_unlock_irqrestore(&sq->lock, flags);
	if (err)
		*bad_wr = wr;
	return err;
}

int vrnic_post_recv(struct ib_qp *ibqp, const struct ib_recv_wr *wr,
		    const struct ib_recv_wr **bad_wr)
{
	struct vrnic_qp *qp = to_vqp(ibqp);
	struct vrnic_wq *rq = &qp->rq;
	struct vrnic_sge *sge;
	unsigned long flags;
	void *wqe;
	u32 start;
	int err = 0, i;

	spin_lock_irqsave(&rq->lock, flags);
	start = rq->pi;
	for (; wr; wr = wr->next) {
		if (vrnic_wq_full(rq)) {
			err = -ENOMEM;
			break;
		}
		if (wr->num_sge < 0 || wr->num_sge > rq->max_sge) {
			err = -EINVAL;
			break;
		}
		wqe = vrnic_wq_next(rq);
		sge = vrnic_recv_wqe_sges(wqe);
		for (i = 0; i < wr->num_sge; i++)
			vrnic_set_sge(&sge[i], wr->sg_list[i].addr,
				      wr->sg_list[i].length,
				      wr->sg_list[i].lkey);
		vrnic_set_recv_wqe_header(wqe, wr->wr_id, wr->num_sge);
		rq->pi++;
	}
	if (rq->pi != start)
		vrnic_kdb_ring_qp(qp->kdb, qp->db.slot,
				  VRNIC_DB_QP_SLOT_RQ_PI_OFF, rq->pi);
	spin_unlock_irqrestore(&rq->lock, flags);
	if (err)
		*bad_wr = wr;
	return err;
}
