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
 * either. Inline data is not offered (max_inline_data is 0). Besides SENDs
 * and RDMA, kernel QPs post atomics (RC), REG_MR for fast-registration MRs,
 * LOCAL_INV and SEND_WITH_INV (RC and UC).
 */
#include <linux/log2.h>

#include "vrnic.h"

/* The hw-spec send enums are defined as the verbs values. */
VRNIC_ASSERT_SAME(VRNIC_WR_OPCODE_RDMA_WRITE, IB_WR_RDMA_WRITE);
VRNIC_ASSERT_SAME(VRNIC_WR_OPCODE_RDMA_WRITE_WITH_IMM, IB_WR_RDMA_WRITE_WITH_IMM);
VRNIC_ASSERT_SAME(VRNIC_WR_OPCODE_SEND, IB_WR_SEND);
VRNIC_ASSERT_SAME(VRNIC_WR_OPCODE_SEND_WITH_IMM, IB_WR_SEND_WITH_IMM);
VRNIC_ASSERT_SAME(VRNIC_WR_OPCODE_RDMA_READ, IB_WR_RDMA_READ);
VRNIC_ASSERT_SAME(VRNIC_WR_OPCODE_ATOMIC_CMP_AND_SWP, IB_WR_ATOMIC_CMP_AND_SWP);
VRNIC_ASSERT_SAME(VRNIC_WR_OPCODE_ATOMIC_FETCH_AND_ADD, IB_WR_ATOMIC_FETCH_AND_ADD);
VRNIC_ASSERT_SAME(VRNIC_WR_OPCODE_LOCAL_INV, IB_WR_LOCAL_INV);
VRNIC_ASSERT_SAME(VRNIC_WR_OPCODE_SEND_WITH_INV, IB_WR_SEND_WITH_INV);
VRNIC_ASSERT_SAME(VRNIC_WR_OPCODE_REG_MR, IB_WR_REG_MR);
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

/* SEND, RDMA and their variants: a header and SGEs (UD: also the AV). */
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
	case IB_WR_SEND_WITH_INV:
		if (qp->datagram)
			return -EINVAL;
		f->opcode = wr->opcode;
		f->rkey = wr->ex.invalidate_rkey;
		return 0;
	case IB_WR_RDMA_READ:
		/* UC has no responder resources. */
		if (qp->ibqp.qp_type == IB_QPT_UC)
			return -EINVAL;
		fallthrough;
	case IB_WR_RDMA_WRITE_WITH_IMM:
		if (wr->opcode == IB_WR_RDMA_WRITE_WITH_IMM)
			f->imm_data = wr->ex.imm_data;
		fallthrough;
	case IB_WR_RDMA_WRITE:
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

static int vrnic_build_sges(struct vrnic_qp *qp, void *wqe,
			    const struct ib_send_wr *wr, u8 flags)
{
	struct vrnic_send_fields f = { .wr_id = wr->wr_id, .flags = flags };
	struct vrnic_sge *sge;
	int err, i;

	if (wr->num_sge < 0 || wr->num_sge > qp->sq.max_sge)
		return -EINVAL;
	err = vrnic_send_opcode(qp, wr, &f);
	if (err)
		return err;
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

/* RC only (SPEC "Atomics"): exactly one 8-byte SGE receives the old value. */
static int vrnic_build_atomic(struct vrnic_qp *qp, void *wqe,
			      const struct ib_send_wr *wr, u8 flags)
{
	const struct ib_atomic_wr *aw = atomic_wr(wr);
	struct vrnic_atomic_fields a;

	if (qp->ibqp.qp_type != IB_QPT_RC || wr->num_sge != 1)
		return -EINVAL;
	a = (struct vrnic_atomic_fields) {
		.remote_addr = aw->remote_addr,
		.rkey = aw->rkey,
		.compare_add = aw->compare_add,
		.swap = wr->opcode == IB_WR_ATOMIC_CMP_AND_SWP ? aw->swap : 0,
		.addr = wr->sg_list[0].addr,
		.length = wr->sg_list[0].length,
		.lkey = wr->sg_list[0].lkey,
	};
	vrnic_set_atomic_wqe(wqe, wr->opcode, flags, wr->wr_id, &a);
	return 0;
}

/*
 * Give a fast-registration MR the pages map_mr_sg() listed, under the key
 * of the work request (SPEC "Memory operations"; RC and UC).
 */
static int vrnic_build_reg_mr(struct vrnic_qp *qp, void *wqe,
			      const struct ib_send_wr *wr, u8 flags)
{
	const struct ib_reg_wr *rw = reg_wr(wr);
	struct vrnic_mr *mr = to_vmr(rw->mr);
	struct vrnic_reg_mr_fields r;
	u32 access;
	int err;

	if (qp->datagram || !mr->pages || !mr->npages ||
	    (rw->key & ~0xffU) != (rw->mr->lkey & ~0xffU))
		return -EINVAL;
	err = vrnic_mr_wr_access(rw->access, &access);
	if (err)
		return err;
	r = (struct vrnic_reg_mr_fields) {
		.iova = rw->mr->iova,
		.length = rw->mr->length,
		.page_list = mr->pages_dma,
		.npages = mr->npages,
		.page_shift = ilog2(rw->mr->page_size),
		.access = access,
	};
	vrnic_set_reg_mr_wqe(wqe, flags, wr->wr_id, rw->key, &r);
	return 0;
}

static int vrnic_build_send(struct vrnic_qp *qp, void *wqe,
			    const struct ib_send_wr *wr)
{
	u8 flags;

	if (wr->send_flags & IB_SEND_INLINE)
		return -EINVAL;
	flags = wr->send_flags & (IB_SEND_FENCE | IB_SEND_SIGNALED |
				  IB_SEND_SOLICITED);
	if (qp->sq_sig_type == IB_SIGNAL_ALL_WR)
		flags |= VRNIC_SEND_FLAGS_SIGNALED;

	switch (wr->opcode) {
	case IB_WR_ATOMIC_CMP_AND_SWP:
	case IB_WR_ATOMIC_FETCH_AND_ADD:
		return vrnic_build_atomic(qp, wqe, wr, flags);
	case IB_WR_REG_MR:
		return vrnic_build_reg_mr(qp, wqe, wr, flags);
	case IB_WR_LOCAL_INV:
		if (qp->datagram)
			return -EINVAL;
		vrnic_set_local_inv_wqe(wqe, flags, wr->wr_id,
					wr->ex.invalidate_rkey);
		return 0;
	default:
		return vrnic_build_sges(qp, wqe, wr, flags);
	}
}

int vrnic_post_send(struct ib_qp *ibqp, const struct ib_send_wr *wr,
		    const struct ib_send_wr **bad_wr)
{
	struct vrnic_qp *qp = to_vqp(ibqp);
	struct vrnic_wq *sq = &qp->sq;
	unsigned long flags;
	u32 start;
	int err = 0;

	/* A user QP's rings are the provider's; an XRC_TGT QP has none. */
	if (!qp->kernel) {
		*bad_wr = wr;
		return -EINVAL;
	}

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

	/*
	 * Not a kernel QP (see post_send), or its receives come from the SRQ
	 * (ib_post_srq_recv()).
	 */
	if (!qp->kernel || ibqp->srq) {
		*bad_wr = wr;
		return -EINVAL;
	}

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
