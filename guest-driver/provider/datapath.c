// SPDX-License-Identifier: GPL-2.0 OR Linux-OpenIB
/*
 * vrnic rdma-core provider: data path (post send/recv, poll, arm).
 * No system calls here: WQEs go to our rings, doorbells to the mapped
 * doorbell page, and the trapped KICK register is written only when the
 * device says it is not polling (SPEC.md, "Posting work").
 */

#include <assert.h>
#include <errno.h>
#include <string.h>

#include <util/mmio.h>
#include <util/udma_barrier.h>

#include "vrnic.h"

/* The hw-spec values are those of verbs (SPEC "wr_opcode", "access", ...). */
#define VRNIC_SAME(a, b) static_assert((int)(a) == (int)(b), #a " == " #b)
VRNIC_SAME(VRNIC_WR_OPCODE_RDMA_WRITE, IBV_WR_RDMA_WRITE);
VRNIC_SAME(VRNIC_WR_OPCODE_RDMA_WRITE_WITH_IMM, IBV_WR_RDMA_WRITE_WITH_IMM);
VRNIC_SAME(VRNIC_WR_OPCODE_SEND, IBV_WR_SEND);
VRNIC_SAME(VRNIC_WR_OPCODE_SEND_WITH_IMM, IBV_WR_SEND_WITH_IMM);
VRNIC_SAME(VRNIC_WR_OPCODE_RDMA_READ, IBV_WR_RDMA_READ);
VRNIC_SAME(VRNIC_WR_OPCODE_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_CMP_AND_SWP);
VRNIC_SAME(VRNIC_WR_OPCODE_ATOMIC_FETCH_AND_ADD, IBV_WR_ATOMIC_FETCH_AND_ADD);
VRNIC_SAME(VRNIC_WR_OPCODE_LOCAL_INV, IBV_WR_LOCAL_INV);
VRNIC_SAME(VRNIC_WR_OPCODE_BIND_MW, IBV_WR_BIND_MW);
VRNIC_SAME(VRNIC_WR_OPCODE_SEND_WITH_INV, IBV_WR_SEND_WITH_INV);
VRNIC_SAME(VRNIC_WC_OPCODE_COMP_SWAP, IBV_WC_COMP_SWAP);
VRNIC_SAME(VRNIC_WC_OPCODE_FETCH_ADD, IBV_WC_FETCH_ADD);
VRNIC_SAME(VRNIC_WC_OPCODE_BIND_MW, IBV_WC_BIND_MW);
VRNIC_SAME(VRNIC_WC_OPCODE_LOCAL_INV, IBV_WC_LOCAL_INV);
VRNIC_SAME(VRNIC_WC_OPCODE_RECV, IBV_WC_RECV);
VRNIC_SAME(VRNIC_WC_OPCODE_RECV_RDMA_WITH_IMM, IBV_WC_RECV_RDMA_WITH_IMM);
VRNIC_SAME(VRNIC_WC_FLAGS_WITH_INV, IBV_WC_WITH_INV);
VRNIC_SAME(VRNIC_ACCESS_REMOTE_WRITE, IBV_ACCESS_REMOTE_WRITE);
VRNIC_SAME(VRNIC_ACCESS_REMOTE_READ, IBV_ACCESS_REMOTE_READ);
VRNIC_SAME(VRNIC_ACCESS_REMOTE_ATOMIC, IBV_ACCESS_REMOTE_ATOMIC);

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

#define OP(name) (1u << VRNIC_WR_OPCODE_##name)

/* Datagrams send only (SPEC "Datagrams"); UC has no READ and no atomics
 * (SPEC "Unreliable connected"); XRC_SEND has RC's data and atomic
 * requests, no memory operations (SPEC "XRC"); REG_MR is for kernel QPs
 * alone. */
static const uint32_t vrnic_ud_ops = OP(SEND) | OP(SEND_WITH_IMM);
static const uint32_t vrnic_uc_ops = OP(SEND) | OP(SEND_WITH_IMM) |
				     OP(SEND_WITH_INV) | OP(RDMA_WRITE) |
				     OP(RDMA_WRITE_WITH_IMM) | OP(LOCAL_INV) |
				     OP(BIND_MW);
static const uint32_t vrnic_rc_ops = OP(SEND) | OP(SEND_WITH_IMM) |
				     OP(SEND_WITH_INV) | OP(RDMA_WRITE) |
				     OP(RDMA_WRITE_WITH_IMM) | OP(RDMA_READ) |
				     OP(ATOMIC_CMP_AND_SWP) |
				     OP(ATOMIC_FETCH_AND_ADD) | OP(LOCAL_INV) |
				     OP(BIND_MW);
static const uint32_t vrnic_xrc_ops = OP(SEND) | OP(SEND_WITH_IMM) |
				      OP(RDMA_WRITE) | OP(RDMA_WRITE_WITH_IMM) |
				      OP(RDMA_READ) | OP(ATOMIC_CMP_AND_SWP) |
				      OP(ATOMIC_FETCH_AND_ADD);

/* Whether @qp may post a WQE of @opcode (an ibv_wr_opcode = wr_opcode). */
bool vrnic_qp_allows(const struct vrnic_qp *qp, unsigned int opcode)
{
	uint32_t ops;

	switch (qp->ibv_qp.qp_type) {
	case IBV_QPT_RC:
		ops = vrnic_rc_ops;
		break;
	case IBV_QPT_UC:
		ops = vrnic_uc_ops;
		break;
	case IBV_QPT_UD:
		ops = vrnic_ud_ops;
		break;
	case IBV_QPT_XRC_SEND:
		ops = vrnic_xrc_ops;
		break;
	default:
		return false;
	}
	return opcode < 32 && (ops & (1u << opcode));
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

/* Where the SGEs, inline bytes or atomic_seg of @qp's send WQE start. */
static void *vrnic_qp_send_payload(const struct vrnic_qp *qp, void *wqe)
{
	return qp->xrc ? vrnic_xrc_send_wqe_payload(wqe) :
			 vrnic_send_wqe_payload(wqe, qp->datagram);
}

/*
 * A SEND, RDMA or SEND_WITH_INV WQE: header, for datagrams the ud_av, for
 * XRC the xrc_seg, then SGEs or inline bytes. Only WRITEs and SENDs may be
 * inline.
 */
static int vrnic_build_data_wqe(struct vrnic_qp *qp, void *wqe,
				const struct ibv_send_wr *wr,
				struct vrnic_send_fields *f)
{
	void *payload = vrnic_qp_send_payload(qp, wqe);
	int ret;

	switch (wr->opcode) {
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		f->imm_data = wr->imm_data;
		/* fallthrough */
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_READ:
		f->remote_addr = wr->wr.rdma.remote_addr;
		f->rkey = wr->wr.rdma.rkey;
		break;
	case IBV_WR_SEND_WITH_IMM:
		f->imm_data = wr->imm_data;
		break;
	case IBV_WR_SEND_WITH_INV:
		f->rkey = wr->invalidate_rkey;
		break;
	default:
		break;
	}

	if (qp->datagram) {
		struct vrnic_av av;

		if (!wr->wr.ud.ah)
			return EINVAL;
		av = to_vah(wr->wr.ud.ah)->av;
		av.remote_qpn = wr->wr.ud.remote_qpn;
		av.remote_qkey = wr->wr.ud.remote_qkey;
		vrnic_set_ud_av(vrnic_send_wqe_ud_av(wqe), &av);
	}
	if (qp->xrc)
		vrnic_set_xrc_seg(vrnic_send_wqe_xrc_seg(wqe),
				  wr->qp_type.xrc.remote_srqn);

	if (wr->send_flags & IBV_SEND_INLINE) {
		if (wr->opcode == IBV_WR_RDMA_READ)
			return EINVAL;
		ret = vrnic_copy_inline(qp, payload, wr, &f->inline_len);
		if (ret)
			return ret;
		f->flags |= VRNIC_SEND_FLAGS_INLINE;
	} else {
		if ((uint32_t)wr->num_sge > qp->sq.max_sge)
			return EINVAL;
		vrnic_set_sges(payload, wr->sg_list, wr->num_sge);
		f->num_sge = wr->num_sge;
	}
	vrnic_set_send_wqe_header(wqe, f);
	return 0;
}

/*
 * An atomic WQE (SPEC "Atomics"): exactly one SGE of 8 bytes receives the
 * original value; the device would fail anything else as BAD_WQE, so it is
 * refused here with EINVAL.
 */
static int vrnic_build_atomic_wqe(struct vrnic_qp *qp, void *wqe,
				  const struct ibv_send_wr *wr, uint8_t flags)
{
	struct vrnic_atomic_fields a;

	if (wr->num_sge != 1 || wr->sg_list[0].length != 8 ||
	    (wr->send_flags & IBV_SEND_INLINE))
		return EINVAL;
	a = (struct vrnic_atomic_fields){
		.remote_addr = wr->wr.atomic.remote_addr,
		.rkey = wr->wr.atomic.rkey,
		.compare_add = wr->wr.atomic.compare_add,
		.swap = wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ?
			wr->wr.atomic.swap : 0,
		.addr = wr->sg_list[0].addr,
		.length = wr->sg_list[0].length,
		.lkey = wr->sg_list[0].lkey,
	};
	if (qp->xrc)
		vrnic_set_xrc_atomic_wqe(wqe, wr->opcode, flags, wr->wr_id,
					 wr->qp_type.xrc.remote_srqn, &a);
	else
		vrnic_set_atomic_wqe(wqe, wr->opcode, flags, wr->wr_id, &a);
	return 0;
}

/*
 * BIND_MW: the header's rkey is the window's new key, chosen by the caller
 * (ibv_bind_mw: the next variant; IBV_WR_BIND_MW: wr->bind_mw.rkey), and it
 * must keep the window's index.
 */
static int vrnic_build_bind_mw_wqe(void *wqe, const struct ibv_send_wr *wr,
				   uint8_t flags)
{
	struct vrnic_bind_mw_fields b;
	int ret;

	if (!wr->bind_mw.mw || (wr->send_flags & IBV_SEND_INLINE) ||
	    (wr->bind_mw.rkey >> 8) != (wr->bind_mw.mw->rkey >> 8))
		return EINVAL;
	ret = vrnic_bind_mw_fields(&wr->bind_mw.bind_info, &b);
	if (ret)
		return ret;
	vrnic_set_bind_mw_wqe(wqe, flags, wr->wr_id, wr->bind_mw.rkey, &b);
	return 0;
}

/*
 * Validate @wr for @qp and encode it as one WQE at @wqe; EINVAL (nothing
 * to post) for what the QP type or the WQE size cannot carry.
 */
int vrnic_build_send_wqe(struct vrnic_qp *qp, void *wqe,
			 const struct ibv_send_wr *wr)
{
	struct vrnic_send_fields f = { .opcode = wr->opcode,
				       .wr_id = wr->wr_id };

	if (!vrnic_qp_allows(qp, wr->opcode) || wr->num_sge < 0)
		return EINVAL;
	if (wr->send_flags & IBV_SEND_FENCE)
		f.flags |= VRNIC_SEND_FLAGS_FENCE;
	if ((wr->send_flags & IBV_SEND_SIGNALED) || qp->sq_sig_all)
		f.flags |= VRNIC_SEND_FLAGS_SIGNALED;
	if (wr->send_flags & IBV_SEND_SOLICITED)
		f.flags |= VRNIC_SEND_FLAGS_SOLICITED;

	switch (wr->opcode) {
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		return vrnic_build_atomic_wqe(qp, wqe, wr, f.flags);
	case IBV_WR_LOCAL_INV:
		if (wr->send_flags & IBV_SEND_INLINE)
			return EINVAL;
		vrnic_set_local_inv_wqe(wqe, f.flags, wr->wr_id,
					wr->invalidate_rkey);
		return 0;
	case IBV_WR_BIND_MW:
		return vrnic_build_bind_mw_wqe(wqe, wr, f.flags);
	default:
		return vrnic_build_data_wqe(qp, wqe, wr, &f);
	}
}

int vrnic_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr,
		    struct ibv_send_wr **bad_wr)
{
	struct vrnic_qp *qp = to_vqp(ibqp);
	struct vrnic_wq *sq = &qp->sq;
	uint32_t pi;
	int ret = 0;

	pthread_spin_lock(&sq->lock);
	/* An XRC_RECV QP has no send queue. */
	if (!sq->depth || !vrnic_sq_ready(qp)) {
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
	/* A QP with an SRQ takes its receives from there; XRC QPs have no
	 * receive queue either (their receives come from XRC SRQs). */
	if (qp->state == IBV_QPS_RESET || !rq->depth) {
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
static bool vrnic_wq_retire(struct vrnic_wq *wq, uint16_t wqe_index)
{
	uint32_t ci = __atomic_load_n(&wq->ci, __ATOMIC_RELAXED);
	uint32_t pi = __atomic_load_n(&wq->pi, __ATOMIC_RELAXED);
	uint32_t delta = ((uint32_t)wqe_index - ci) & (wq->depth - 1);

	if (wqe_index >= wq->depth || delta >= pi - ci)
		return false;
	__atomic_store_n(&wq->ci, ci + delta + 1, __ATOMIC_RELEASE);
	return true;
}

/*
 * Retire what a polled CQE completes: the SRQ slot it names (CQE_FLAG_SRQ:
 * srqn and wqe_index, whatever its QP, which for XRC is not ours), or its
 * send or receive WQE (and every earlier one of that queue). Caller holds
 * the CQ lock; a CQE of a QP that is gone retires nothing. False for a CQE
 * no SRQ slot of ours can have caused (hostile or corrupt): the caller
 * reports it as an error completion.
 */
bool vrnic_cqe_retire(struct vrnic_context *ctx,
		      const struct vrnic_cqe_fields *cqe)
{
	struct vrnic_qp *qp;

	if (cqe->flags & VRNIC_CQE_FLAG_SRQ)
		return (cqe->flags & VRNIC_CQE_FLAG_RECV) &&
		       vrnic_srq_complete(ctx, cqe->srqn, cqe->wqe_index);
	qp = vrnic_find_qp(ctx, cqe->qpn);
	if (!qp)
		return true;
	if (!(cqe->flags & VRNIC_CQE_FLAG_RECV))
		return vrnic_wq_retire(&qp->sq, cqe->wqe_index);
	return vrnic_wq_retire(&qp->rq, cqe->wqe_index);
}

/* cqe.flags bits the spec defines. */
#define VRNIC_CQE_FLAGS_ALL (VRNIC_CQE_FLAG_RECV | VRNIC_CQE_FLAG_SOLICITED | \
			     VRNIC_CQE_FLAG_SRQ)

static bool vrnic_cqe_opcode_known(uint8_t opcode, bool recv)
{
	if (recv)
		return opcode == VRNIC_WC_OPCODE_RECV ||
		       opcode == VRNIC_WC_OPCODE_RECV_RDMA_WITH_IMM;
	switch (opcode) {
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
 * Whether a CQE of @cq holds only values the spec has, and names a QPN a QP
 * can have and, if the QP is ours, one whose queue completes to @cq (XRC
 * receives, with CQE_FLAG_SRQ, name a QP of the target's: not looked at).
 * Caller holds cq->lock; the QP table's mutex, which destroy_qp takes to
 * remove a QP, keeps a QP of another CQ alive while we look at it. What
 * wrong there is the device's: it is logged and the CQE reported as an
 * error completion (vrnic_cq_next_wc).
 */
static const char *vrnic_cqe_invalid(struct vrnic_cq *cq,
				     const struct vrnic_cqe_fields *cqe)
{
	struct vrnic_context *ctx = to_vctx(cq->ibv_cq.context);
	bool recv = cqe->flags & VRNIC_CQE_FLAG_RECV;
	const char *why = NULL;
	struct vrnic_qp *qp;

	if (cqe->status > VRNIC_WC_STATUS_GENERAL_ERR)
		return "unknown status";
	if (!vrnic_cqe_opcode_known(cqe->opcode, recv))
		return "unknown opcode";
	if ((cqe->flags & ~VRNIC_CQE_FLAGS_ALL) ||
	    (cqe->wc_flags & ~VRNIC_WC_FLAGS_ALL))
		return "undefined flag bits";
	if (cqe->byte_len > VRNIC_BAR0_MAX_MSG_SIZE_RESET)
		return "byte_len beyond the largest message";
	if (cqe->qpn < VRNIC_QPN_MIN || cqe->qpn > VRNIC_QPN_MAX)
		return "no QPN";
	if (cqe->flags & VRNIC_CQE_FLAG_SRQ)
		return NULL;
	pthread_mutex_lock(&ctx->qp_table_mutex);
	qp = vrnic_find_qp(ctx, cqe->qpn);
	if (qp && (recv ? qp->ibv_qp.recv_cq : qp->ibv_qp.send_cq) !=
		  &cq->ibv_cq)
		why = "a QP of another CQ";
	pthread_mutex_unlock(&ctx->qp_table_mutex);
	return why;
}

static void vrnic_cqe_to_wc(const struct vrnic_cqe_fields *cqe,
			    struct ibv_wc *wc)
{
	/* status, opcode and wc_flags values are those of ibv_wc (1:1); the
	 * datagram fields (src_qp, slid, sl, pkey_index) are 0 otherwise. */
	wc->wr_id = cqe->wr_id;
	wc->status = cqe->status;
	wc->opcode = cqe->opcode;
	wc->vendor_err = cqe->vendor_err;
	wc->byte_len = cqe->byte_len;
	wc->qp_num = cqe->qpn;
	wc->src_qp = cqe->src_qp;
	wc->wc_flags = cqe->wc_flags & VRNIC_WC_FLAGS_ALL;
	/* One union: immediate data (network order) or the invalidated key. */
	if (wc->wc_flags & IBV_WC_WITH_INV)
		wc->invalidated_rkey = cqe->invalidated_rkey;
	else
		wc->imm_data = cqe->imm_data;
	wc->pkey_index = cqe->pkey_index;
	wc->slid = cqe->slid;
	wc->sl = cqe->sl;
	wc->dlid_path_bits = 0;
}

/*
 * The one CQE decoder, behind poll_cq and the poll_cq_ex iterator (cq_ex.c):
 * the next completion at or after *ci into @wc (entries dropped by
 * vrnic_cq_clean are skipped), what it completes retired, *ci moved past it.
 * False when the device has written nothing more. Caller holds cq->lock.
 */
bool vrnic_cq_next_wc(struct vrnic_cq *cq, uint32_t *ci, struct ibv_wc *wc)
{
	struct vrnic_context *ctx = to_vctx(cq->ibv_cq.context);
	struct vrnic_cqe_fields cqe;
	const char *why;

	while (vrnic_cqe_valid(cq, *ci)) {
		vrnic_cqe_decode(vrnic_cqe_at(cq, *ci), &cqe);
		(*ci)++;
		if (!cqe.qpn)
			continue; /* dropped by vrnic_cq_clean */
		vrnic_cqe_to_wc(&cqe, wc);
		why = vrnic_cqe_invalid(cq, &cqe);
		if (!why && !vrnic_cqe_retire(ctx, &cqe))
			why = "a WQE not outstanding";
		if (why) {
			verbs_warn(&ctx->ibv_ctx,
				   "vrnic: CQ %u: invalid CQE (%s): qpn %#x opcode %#x status %#x flags %#x wc_flags %#x wqe_index %u byte_len %#x\n",
				   cq->cqn, why, cqe.qpn, cqe.opcode,
				   cqe.status, cqe.flags, cqe.wc_flags,
				   cqe.wqe_index, cqe.byte_len);
			wc->status = IBV_WC_GENERAL_ERR;
			wc->opcode = (cqe.flags & VRNIC_CQE_FLAG_RECV) ?
				     IBV_WC_RECV : IBV_WC_SEND;
			wc->wc_flags = 0;
		}
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

/* Drop the CQE at @ci: QPN 0 is never used by the device, poll_cq skips
 * such entries. A dropped SRQ completion frees its slot, as polling it
 * would. Caller holds cq->lock. */
static void vrnic_cq_drop(struct vrnic_cq *cq, uint32_t ci)
{
	struct vrnic_context *ctx = to_vctx(cq->ibv_cq.context);
	struct vrnic_cqe *cqe = vrnic_cqe_at(cq, ci);

	if ((cqe->flags & (VRNIC_CQE_FLAG_SRQ | VRNIC_CQE_FLAG_RECV)) ==
	    (VRNIC_CQE_FLAG_SRQ | VRNIC_CQE_FLAG_RECV))
		vrnic_srq_complete(ctx, le32toh(cqe->srqn),
				   le16toh(cqe->wqe_index));
	cqe->qpn = 0;
}

/*
 * Drop the unpolled CQEs of @qp (destroyed or reset). The device never
 * writes an entry we have not consumed, so editing them is safe. Caller
 * holds cq->lock.
 */
void vrnic_cq_clean(struct vrnic_cq *cq, struct vrnic_qp *qp)
{
	uint32_t qpn = qp->ibv_qp.qp_num;
	uint32_t ci;

	for (ci = cq->ci; vrnic_cqe_valid(cq, ci); ci++)
		if (le32toh(vrnic_cqe_at(cq, ci)->qpn) == qpn)
			vrnic_cq_drop(cq, ci);
}

/*
 * Drop the unpolled completions of XRC SRQ @srqn (destroyed): its CQEs name
 * TGT QPs, not ours, so vrnic_cq_clean cannot find them. Caller holds
 * cq->lock, and the SRQ is still in the table (its slots are freed).
 */
void vrnic_cq_clean_srq(struct vrnic_cq *cq, uint32_t srqn)
{
	uint32_t ci;

	for (ci = cq->ci; vrnic_cqe_valid(cq, ci); ci++) {
		struct vrnic_cqe *cqe = vrnic_cqe_at(cq, ci);

		if (cqe->qpn && (cqe->flags & VRNIC_CQE_FLAG_SRQ) &&
		    le32toh(cqe->srqn) == srqn)
			vrnic_cq_drop(cq, ci);
	}
}
