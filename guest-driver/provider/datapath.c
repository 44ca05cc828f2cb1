// SPDX-License-Identifier: GPL-2.0 OR Linux-OpenIB
/*
 * vrnic rdma-core provider: data path (post send/recv, poll, arm).
 * No system calls here: WQEs go to our rings, doorbells to the mapped
 * doorbell page, and the trapped KICK register is written only when the
 * device says it is not polling (SPEC.md, "Posting work").
 */

#include <errno.h>
#include <string.h>

#include <util/mmio.h>
#include <util/udma_barrier.h>

#include "vrnic.h"

/* Entries posted and not yet retired by a CQE; never above depth. */
bool vrnic_wq_full(struct vrnic_wq *wq, uint32_t pi)
{
	return pi - __atomic_load_n(&wq->ci, __ATOMIC_ACQUIRE) >= wq->depth;
}

/*
 * Doorbell protocol (SPEC "Posting work"): WQE stores, release barrier, one
 * aligned 32-bit store of the new producer index, 1 into the slot's flag
 * byte, 1 into PAGE_FLAG, full barrier (orders those stores before the
 * POLL_STATE load), then kick that page if the device may be asleep. Called
 * with the queue lock held so producer indices reach the slot in order.
 */
void vrnic_ring_doorbell(struct vrnic_wq *wq, uint32_t pi)
{
	uint32_t poll_state;

	__atomic_store_n(&wq->pi, pi, __ATOMIC_RELAXED);
	udma_to_device_barrier();
	mmio_write32_le(wq->db, htole32(pi));
	mmio_write8(wq->db_flag, 1);
	mmio_write32_le(wq->db_page + VRNIC_DB_PAGE_PAGE_FLAG_OFF, htole32(1));
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	poll_state = le32toh(mmio_read32_le(wq->db_page +
					    VRNIC_DB_PAGE_POLL_STATE_OFF));
	if (!(poll_state & VRNIC_DB_PAGE_POLL_STATE_POLLING_MASK))
		mmio_write32_le(wq->kick_page + VRNIC_KICK_PAGE_KICK_OFF,
				htole32(1));
}

static void vrnic_set_sges(struct vrnic_sge *dst, const struct ibv_sge *src,
			   int num_sge)
{
	int i;

	for (i = 0; i < num_sge; i++)
		vrnic_set_sge(&dst[i], src[i].addr, src[i].length, src[i].lkey);
}

/* Copy the SGEs' bytes to @dst; fails when they exceed max_inline. */
static int vrnic_copy_inline(struct vrnic_qp *qp, uint8_t *dst,
			     const struct ibv_send_wr *wr, uint32_t *len)
{
	uint64_t total = 0;
	int i;

	for (i = 0; i < wr->num_sge; i++)
		total += wr->sg_list[i].length;
	if (total > qp->max_inline)
		return EINVAL;
	for (i = 0; i < wr->num_sge; i++) {
		memcpy(dst, (void *)(uintptr_t)wr->sg_list[i].addr,
		       wr->sg_list[i].length);
		dst += wr->sg_list[i].length;
	}
	*len = total;
	return 0;
}

/*
 * Opcode of @wr (the values equal ibv_wr_opcode), and whether it names a
 * remote buffer or carries immediate data. UD QPs send SEND and
 * SEND_WITH_IMM only (SPEC "Datagrams").
 */
static int vrnic_wr_opcode(const struct vrnic_qp *qp,
			   const struct ibv_send_wr *wr,
			   struct vrnic_send_fields *f, bool *rdma)
{
	bool imm = false;

	*rdma = false;
	switch (wr->opcode) {
	case IBV_WR_RDMA_WRITE:
		f->opcode = VRNIC_WR_OPCODE_RDMA_WRITE;
		*rdma = true;
		break;
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		f->opcode = VRNIC_WR_OPCODE_RDMA_WRITE_WITH_IMM;
		*rdma = imm = true;
		break;
	case IBV_WR_SEND:
		f->opcode = VRNIC_WR_OPCODE_SEND;
		break;
	case IBV_WR_SEND_WITH_IMM:
		f->opcode = VRNIC_WR_OPCODE_SEND_WITH_IMM;
		imm = true;
		break;
	case IBV_WR_RDMA_READ:
		f->opcode = VRNIC_WR_OPCODE_RDMA_READ;
		*rdma = true;
		break;
	default:
		return EINVAL;
	}
	if (*rdma && qp->datagram)
		return EINVAL;
	f->imm_data = imm ? wr->imm_data : 0;
	return 0;
}

/* Encode @wr into @wqe, or fail (EINVAL) without posting anything: the one
 * encoder of post_send and the ibv_wr_* API (qp_ex.c). */
int vrnic_build_send_wqe(struct vrnic_qp *qp, void *wqe,
			 const struct ibv_send_wr *wr)
{
	struct vrnic_send_fields f = { .wr_id = wr->wr_id };
	void *payload = vrnic_send_wqe_payload(wqe, qp->datagram);
	bool rdma;
	int ret;

	ret = vrnic_wr_opcode(qp, wr, &f, &rdma);
	if (ret)
		return ret;
	if (wr->num_sge < 0)
		return EINVAL;
	if (rdma) {
		f.remote_addr = wr->wr.rdma.remote_addr;
		f.rkey = wr->wr.rdma.rkey;
	}

	if (wr->send_flags & IBV_SEND_FENCE)
		f.flags |= VRNIC_SEND_FLAGS_FENCE;
	if ((wr->send_flags & IBV_SEND_SIGNALED) || qp->sq_sig_all)
		f.flags |= VRNIC_SEND_FLAGS_SIGNALED;
	if (wr->send_flags & IBV_SEND_SOLICITED)
		f.flags |= VRNIC_SEND_FLAGS_SOLICITED;

	if (qp->datagram) {
		struct vrnic_av av;

		if (!wr->wr.ud.ah)
			return EINVAL;
		av = to_vah(wr->wr.ud.ah)->av;
		av.remote_qpn = wr->wr.ud.remote_qpn;
		av.remote_qkey = wr->wr.ud.remote_qkey;
		vrnic_set_ud_av(vrnic_send_wqe_ud_av(wqe), &av);
	}

	if (wr->send_flags & IBV_SEND_INLINE) {
		if (f.opcode == VRNIC_WR_OPCODE_RDMA_READ)
			return EINVAL;
		ret = vrnic_copy_inline(qp, payload, wr, &f.inline_len);
		if (ret)
			return ret;
		f.flags |= VRNIC_SEND_FLAGS_INLINE;
	} else {
		if ((uint32_t)wr->num_sge > qp->sq.max_sge)
			return EINVAL;
		vrnic_set_sges(payload, wr->sg_list, wr->num_sge);
		f.num_sge = wr->num_sge;
	}

	vrnic_set_send_wqe_header(wqe, &f);
	return 0;
}

int vrnic_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr,
		    struct ibv_send_wr **bad_wr)
{
	struct vrnic_qp *qp = to_vqp(ibqp);
	struct vrnic_wq *sq = &qp->sq;
	uint32_t pi;
	int ret = 0;

	pthread_spin_lock(&sq->lock);
	if (!vrnic_sq_ready(qp)) {
		*bad_wr = wr;
		pthread_spin_unlock(&sq->lock);
		return EINVAL;
	}
	pi = sq->pi;
	for (; wr; wr = wr->next) {
		if (vrnic_wq_full(sq, pi)) {
			ret = ENOMEM;
			break;
		}
		ret = vrnic_build_send_wqe(qp, vrnic_wqe(sq, pi), wr);
		if (ret)
			break;
		pi++;
	}
	if (ret)
		*bad_wr = wr;
	if (pi != sq->pi)
		vrnic_ring_doorbell(sq, pi);
	pthread_spin_unlock(&sq->lock);
	return ret;
}

int vrnic_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr,
		    struct ibv_recv_wr **bad_wr)
{
	struct vrnic_qp *qp = to_vqp(ibqp);
	struct vrnic_wq *rq = &qp->rq;
	uint32_t pi;
	int ret = 0;
	void *wqe;

	pthread_spin_lock(&rq->lock);
	if (qp->state == IBV_QPS_RESET) {
		*bad_wr = wr;
		pthread_spin_unlock(&rq->lock);
		return EINVAL;
	}
	pi = rq->pi;
	for (; wr; wr = wr->next) {
		if (vrnic_wq_full(rq, pi)) {
			ret = ENOMEM;
			break;
		}
		if (wr->num_sge < 0 || (uint32_t)wr->num_sge > rq->max_sge) {
			ret = EINVAL;
			break;
		}
		wqe = vrnic_wqe(rq, pi);
		vrnic_set_recv_wqe_header(wqe, wr->wr_id, wr->num_sge);
		vrnic_set_sges(vrnic_recv_wqe_sges(wqe), wr->sg_list,
			       wr->num_sge);
		pi++;
	}
	if (ret)
		*bad_wr = wr;
	if (pi != rq->pi)
		vrnic_ring_doorbell(rq, pi);
	pthread_spin_unlock(&rq->lock);
	return ret;
}

/*
 * A CQE retires its WQE and every earlier one of the queue (unsignalled sends
 * complete silently). wqe_index is the index mod depth; the matching
 * free-running index is the first one at or after ci. An index outside the
 * outstanding range [ci, pi) is ignored rather than corrupting the queue.
 */
static void vrnic_wq_retire(struct vrnic_wq *wq, uint16_t wqe_index)
{
	uint32_t ci = __atomic_load_n(&wq->ci, __ATOMIC_RELAXED);
	uint32_t pi = __atomic_load_n(&wq->pi, __ATOMIC_RELAXED);
	uint32_t delta = ((uint32_t)wqe_index - ci) & (wq->depth - 1);

	if (delta < pi - ci)
		__atomic_store_n(&wq->ci, ci + delta + 1, __ATOMIC_RELEASE);
}

static void vrnic_cqe_to_wc(struct vrnic_context *ctx,
			    const struct vrnic_cqe_fields *cqe,
			    struct ibv_wc *wc)
{
	struct vrnic_qp *qp = vrnic_find_qp(ctx, cqe->qpn);

	if (qp) {
		if (cqe->flags & VRNIC_CQE_FLAG_RECV)
			vrnic_wq_retire(&qp->rq, cqe->wqe_index);
		else
			vrnic_wq_retire(&qp->sq, cqe->wqe_index);
	}

	/* status, opcode and wc_flags values are those of ibv_wc (1:1); the
	 * datagram fields (src_qp, slid, sl, pkey_index) are 0 otherwise. */
	wc->wr_id = cqe->wr_id;
	wc->status = cqe->status;
	wc->opcode = cqe->opcode;
	wc->vendor_err = cqe->vendor_err;
	wc->byte_len = cqe->byte_len;
	wc->imm_data = cqe->imm_data;
	wc->qp_num = cqe->qpn;
	wc->src_qp = cqe->src_qp;
	wc->wc_flags = cqe->wc_flags & VRNIC_WC_FLAGS_ALL;
	wc->pkey_index = cqe->pkey_index;
	wc->slid = cqe->slid;
	wc->sl = cqe->sl;
	wc->dlid_path_bits = 0;
}

/*
 * The one CQE decoder, behind poll_cq and the poll_cq_ex iterator: the next
 * completion at or after *ci into @wc (entries dropped by vrnic_cq_clean are
 * skipped), its WQEs retired, *ci moved past it. False when the device has
 * written nothing more. Caller holds cq->lock.
 */
bool vrnic_cq_next_wc(struct vrnic_cq *cq, uint32_t *ci, struct ibv_wc *wc)
{
	struct vrnic_context *ctx = to_vctx(cq->ibv_cq.context);
	struct vrnic_cqe_fields cqe;

	while (vrnic_cqe_valid(cq, *ci)) {
		vrnic_cqe_decode(vrnic_cqe_at(cq, *ci), &cqe);
		(*ci)++;
		if (!cqe.qpn)
			continue; /* dropped by vrnic_cq_clean */
		vrnic_cqe_to_wc(ctx, &cqe, wc);
		return true;
	}
	return false;
}

/* Hand the entries before @ci back to the device. Caller holds cq->lock. */
void vrnic_cq_consumed(struct vrnic_cq *cq, uint32_t ci)
{
	if (ci == cq->ci)
		return;
	cq->ci = ci;
	/* Release: our reads of the entries happen before the device may
	 * reuse them. */
	__atomic_store_n(cq->db_ci, htole32(ci), __ATOMIC_RELEASE);
}

int vrnic_poll_cq(struct ibv_cq *ibcq, int num_entries, struct ibv_wc *wc)
{
	struct vrnic_cq *cq = to_vcq(ibcq);
	uint32_t ci;
	int n = 0;

	pthread_spin_lock(&cq->lock);
	ci = cq->ci;
	while (n < num_entries && vrnic_cq_next_wc(cq, &ci, &wc[n]))
		n++;
	vrnic_cq_consumed(cq, ci);
	pthread_spin_unlock(&cq->lock);
	return n;
}

int vrnic_req_notify_cq(struct ibv_cq *ibcq, int solicited_only)
{
	struct vrnic_cq *cq = to_vcq(ibcq);
	uint32_t arm;

	pthread_spin_lock(&cq->lock);
	arm = (++cq->arm_seq << VRNIC_CQ_ARM_SEQ_SHIFT) |
	      (solicited_only ? VRNIC_CQ_ARM_SOLICITED : VRNIC_CQ_ARM_NEXT);
	__atomic_store_n(cq->db_arm, htole32(arm), __ATOMIC_RELEASE);
	/* The device re-reads arm after a full barrier of its own once it has
	 * written a CQE; ours makes the arm visible before any later poll. */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	pthread_spin_unlock(&cq->lock);
	return 0;
}

/*
 * Drop the unpolled CQEs of QP @qpn (destroyed or reset) by zeroing their
 * qpn: QPN 0 is never used by the device, poll_cq skips such entries. The
 * device never writes an entry we have not consumed, so editing them is
 * safe. Caller holds cq->lock.
 */
void vrnic_cq_clean(struct vrnic_cq *cq, uint32_t qpn)
{
	uint32_t ci;

	for (ci = cq->ci; vrnic_cqe_valid(cq, ci); ci++) {
		struct vrnic_cqe *cqe = vrnic_cqe_at(cq, ci);

		if (le32toh(cqe->qpn) == qpn)
			cqe->qpn = 0;
	}
}
