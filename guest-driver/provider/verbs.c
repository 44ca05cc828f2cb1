// SPDX-License-Identifier: GPL-2.0 OR Linux-OpenIB
/* vrnic rdma-core provider: control path (PD, MR, CQ, QP) through uverbs. */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ccan/minmax.h>

#include "vrnic.h"

int vrnic_query_device(struct ibv_context *ibctx,
		       const struct ibv_query_device_ex_input *input,
		       struct ibv_device_attr_ex *attr, size_t attr_size)
{
	struct ib_uverbs_ex_query_device_resp resp;
	size_t resp_size = sizeof(resp);
	uint64_t fw;
	int ret;

	ret = ibv_cmd_query_device_any(ibctx, input, attr, attr_size, &resp,
				       &resp_size);
	if (ret)
		return ret;

	/* device_attr.fw_ver is major << 32 | minor << 16 | patch. */
	fw = resp.base.fw_ver;
	snprintf(attr->orig_attr.fw_ver, sizeof(attr->orig_attr.fw_ver),
		 "%u.%u.%u", (unsigned int)(fw >> 32),
		 (unsigned int)(fw >> 16) & 0xffff, (unsigned int)fw & 0xffff);
	return 0;
}

int vrnic_query_port(struct ibv_context *ibctx, uint8_t port,
		     struct ibv_port_attr *attr)
{
	struct ibv_query_port cmd = {};

	return ibv_cmd_query_port(ibctx, port, attr, &cmd, sizeof(cmd));
}

struct ibv_pd *vrnic_alloc_pd(struct ibv_context *ibctx)
{
	struct ib_uverbs_alloc_pd_resp resp;
	struct ibv_alloc_pd cmd = {};
	struct ibv_pd *pd;
	int ret;

	pd = calloc(1, sizeof(*pd));
	if (!pd)
		return NULL;
	ret = ibv_cmd_alloc_pd(ibctx, pd, &cmd, sizeof(cmd), &resp,
			       sizeof(resp));
	if (ret) {
		free(pd);
		errno = ret;
		return NULL;
	}
	return pd;
}

int vrnic_dealloc_pd(struct ibv_pd *pd)
{
	int ret = ibv_cmd_dealloc_pd(pd);

	if (ret)
		return ret;
	free(pd);
	return 0;
}

struct ibv_mr *vrnic_reg_mr(struct ibv_pd *pd, void *addr, size_t len,
			    uint64_t hca_va, int access)
{
	struct ib_uverbs_reg_mr_resp resp;
	struct ibv_reg_mr cmd;
	struct verbs_mr *vmr;
	int ret;

	vmr = calloc(1, sizeof(*vmr));
	if (!vmr)
		return NULL;
	ret = ibv_cmd_reg_mr(pd, addr, len, hca_va, access, vmr, &cmd,
			     sizeof(cmd), &resp, sizeof(resp));
	if (ret) {
		free(vmr);
		errno = ret;
		return NULL;
	}
	return &vmr->ibv_mr;
}

/*
 * ibv_rereg_mr (SPEC "Memory keys", REREG_MR): in place, same key; the
 * kernel maps the flags (CHANGE_TRANSLATION, CHANGE_PD, CHANGE_ACCESS,
 * checked by libibverbs) onto the command. A new translation is at
 * iova = addr, as ibv_reg_mr's. On failure the MR is unchanged.
 */
int vrnic_rereg_mr(struct verbs_mr *vmr, int flags, struct ibv_pd *pd,
		   void *addr, size_t length, int access)
{
	struct ib_uverbs_rereg_mr_resp resp;
	struct ibv_rereg_mr cmd = {};
	int ret;

	if ((flags & IBV_REREG_MR_CHANGE_PD) &&
	    (!pd || pd->context != vmr->ibv_mr.context)) {
		errno = EINVAL;
		return EINVAL;
	}
	ret = ibv_cmd_rereg_mr(vmr, flags, addr, length, (uintptr_t)addr,
			       access, pd, &cmd, sizeof(cmd), &resp,
			       sizeof(resp));
	if (ret)
		errno = ret;
	return ret;
}

int vrnic_dereg_mr(struct verbs_mr *vmr)
{
	int ret = ibv_cmd_dereg_mr(vmr);

	if (ret)
		return ret;
	free(vmr);
	return 0;
}

/*
 * Rings are page-aligned and zeroed; the kernel pins them for the device, so
 * they are excluded from fork and freed only after the destroy command has
 * returned (the kernel has unpinned them by then).
 */
void *vrnic_alloc_ring(size_t bytes, size_t *size)
{
	size_t page = sysconf(_SC_PAGESIZE);
	void *buf;
	int ret;

	*size = align(bytes, page);
	ret = posix_memalign(&buf, page, *size);
	if (ret) {
		errno = ret;
		return NULL;
	}
	memset(buf, 0, *size);
	ret = ibv_dontfork_range(buf, *size);
	if (ret) {
		free(buf);
		errno = ret;
		return NULL;
	}
	return buf;
}

void vrnic_free_ring(void *buf, size_t size)
{
	if (!buf)
		return;
	ibv_dofork_range(buf, size);
	free(buf);
}

/*
 * CQ ring depth for @cqe entries: 2^n >= cqe + 1 (one spare entry), at
 * least 2 and at most max_cqe (then exactly cqe entries when cqe ==
 * max_cqe). Indices are free-running, so the device can use every entry.
 * 0 when @cqe is out of range.
 */
static uint32_t vrnic_cq_depth(struct vrnic_context *ctx, int cqe)
{
	uint32_t depth;

	if (cqe < 1 || (uint32_t)cqe > ctx->max_cqe)
		return 0;
	depth = 1u << vrnic_log2_ceil(max_t(uint32_t, cqe + 1, 2));
	return min_t(uint32_t, depth, ctx->max_cqe);
}

/* Serves create_cq and create_cq_ex (which has checked the extended
 * attributes). */
struct vrnic_cq *vrnic_cq_create(struct ibv_context *ibctx,
				 struct ibv_cq_init_attr_ex *attr)
{
	struct vrnic_context *ctx = to_vctx(ibctx);
	struct vrnic_ucmd_create_cq_ex_resp resp = {};
	struct vrnic_ucmd_create_cq_ex cmd = {};
	struct vrnic_db_map map;
	struct vrnic_cq *cq;
	uint32_t depth, slot;
	int cqe = attr->cqe;
	int ret;

	depth = vrnic_cq_depth(ctx, cqe);
	if (!depth) {
		errno = EINVAL;
		return NULL;
	}

	cq = calloc(1, sizeof(*cq));
	if (!cq)
		return NULL;
	cq->depth_log2 = vrnic_log2_ceil(depth);
	cq->ring = vrnic_alloc_ring((size_t)depth * VRNIC_CQE_SIZE,
				    &cq->ring_size);
	if (!cq->ring)
		goto err_free;

	cmd.drv_payload.buf_addr = htole64((uintptr_t)cq->ring);
	cmd.drv_payload.depth_log2 = cq->depth_log2;
	ret = ibv_cmd_create_cq_ex(ibctx, attr, &cq->vcq, &cmd.ibv_cmd,
				   sizeof(cmd), &resp.ibv_resp, sizeof(resp), 0);
	if (ret) {
		errno = ret;
		goto err_ring;
	}

	slot = le32toh(resp.drv_payload.db_slot);
	if (resp.drv_payload.depth_log2 != cq->depth_log2) {
		verbs_err(verbs_get_ctx(ibctx),
			  "vrnic: bad create_cq response (depth_log2 %u)\n",
			  resp.drv_payload.depth_log2);
		ret = EPROTO;
	} else {
		ret = vrnic_map_object_slot(ctx, "create_cq", slot,
					    le32toh(resp.drv_payload.db_page),
					    le64toh(resp.drv_payload.db_mmap_key),
					    le64toh(resp.drv_payload.kick_mmap_key),
					    &map);
	}
	if (ret) {
		ibv_cmd_destroy_cq(&cq->ibv_cq);
		errno = ret;
		goto err_ring;
	}
	cq->cqn = le32toh(resp.drv_payload.cqn);
	cq->db_ci = vrnic_db_word(map.db, slot, VRNIC_DB_CQ_SLOT_CI_OFF);
	cq->db_arm = vrnic_db_word(map.db, slot, VRNIC_DB_CQ_SLOT_ARM_OFF);
	/* No QP uses the CQ yet: start the slot from a known state. */
	__atomic_store_n(cq->db_ci, 0, __ATOMIC_RELAXED);
	__atomic_store_n(cq->db_arm, 0, __ATOMIC_RELAXED);
	pthread_spin_init(&cq->lock, PTHREAD_PROCESS_PRIVATE);
	cq->ibv_cq.cqe = max_t(int, cqe, depth - 1);
	return cq;

err_ring:
	vrnic_free_ring(cq->ring, cq->ring_size);
err_free:
	free(cq);
	return NULL;
}

struct ibv_cq *vrnic_create_cq(struct ibv_context *ibctx, int cqe,
			       struct ibv_comp_channel *channel,
			       int comp_vector)
{
	struct ibv_cq_init_attr_ex attr = {
		.cqe = cqe,
		.channel = channel,
		.comp_vector = comp_vector,
		.wc_flags = IBV_WC_STANDARD_FLAGS,
	};
	struct vrnic_cq *cq = vrnic_cq_create(ibctx, &attr);

	return cq ? &cq->ibv_cq : NULL;
}

/*
 * ibv_resize_cq (SPEC "Resizing a CQ"): a new zeroed ring; under the CQ
 * lock (no poller between our consumer index and the move) the kernel
 * sends RESIZE_CQ with that index, the device moves the unpolled CQEs to
 * entries 0.. of the new ring and zeroes the slot's ci word, and we go on
 * at index 0 there. The old ring is the device's no more and is freed; on
 * failure (e.g. more unpolled CQEs than the new ring holds) the CQ keeps
 * it. Serves extended CQs too.
 */
int vrnic_resize_cq(struct ibv_cq *ibcq, int cqe)
{
	struct vrnic_context *ctx = to_vctx(ibcq->context);
	struct vrnic_cq *cq = to_vcq(ibcq);
	struct ib_uverbs_resize_cq_resp resp;
	struct vrnic_ucmd_resize_cq cmd = {};
	struct vrnic_cqe *ring, *old_ring;
	size_t ring_size, old_size;
	uint32_t depth;
	int ret;

	depth = vrnic_cq_depth(ctx, cqe);
	if (!depth)
		return EINVAL;
	ring = vrnic_alloc_ring((size_t)depth * VRNIC_CQE_SIZE, &ring_size);
	if (!ring)
		return ENOMEM;

	pthread_spin_lock(&cq->lock);
	cmd.drv_payload.buf_addr = htole64((uintptr_t)ring);
	cmd.drv_payload.depth_log2 = vrnic_log2_ceil(depth);
	cmd.drv_payload.ci = htole32(cq->ci);
	ret = ibv_cmd_resize_cq(ibcq, cqe, &cmd.ibv_cmd, sizeof(cmd), &resp,
				sizeof(resp));
	if (ret) {
		pthread_spin_unlock(&cq->lock);
		vrnic_free_ring(ring, ring_size);
		return ret;
	}
	old_ring = cq->ring;
	old_size = cq->ring_size;
	cq->ring = ring;
	cq->ring_size = ring_size;
	cq->depth_log2 = vrnic_log2_ceil(depth);
	cq->ci = 0;
	ibcq->cqe = max_t(int, cqe, depth - 1);
	pthread_spin_unlock(&cq->lock);
	vrnic_free_ring(old_ring, old_size);
	return 0;
}

int vrnic_destroy_cq(struct ibv_cq *ibcq)
{
	struct vrnic_cq *cq = to_vcq(ibcq);
	int ret;

	ret = ibv_cmd_destroy_cq(ibcq);
	if (ret)
		return ret;
	vrnic_free_ring(cq->ring, cq->ring_size);
	pthread_spin_destroy(&cq->lock);
	free(cq);
	return 0;
}

/*
 * The CQs a QP's CQEs go to: both for RC, UC and UD; the send CQ alone for
 * XRC_SEND (ib_core ignores its recv_cq); none for XRC_RECV (its receives
 * complete on the XRC SRQ's CQ, under the SRQ's number). NULL when none.
 */
static struct vrnic_cq *vrnic_qp_scq(struct vrnic_qp *qp)
{
	return vrnic_qp_is_xrc_tgt(qp) ? NULL : to_vcq(qp->ibv_qp.send_cq);
}

static struct vrnic_cq *vrnic_qp_rcq(struct vrnic_qp *qp)
{
	if (vrnic_qp_is_xrc_tgt(qp) || qp->xrc ||
	    qp->ibv_qp.recv_cq == qp->ibv_qp.send_cq)
		return NULL;
	return to_vcq(qp->ibv_qp.recv_cq);
}

/* Lock the QP's CQs, ordered by address against lock inversion. */
static void vrnic_lock_cqs(struct vrnic_qp *qp)
{
	struct vrnic_cq *scq = vrnic_qp_scq(qp), *rcq = vrnic_qp_rcq(qp);

	if (!scq)
		return;
	if (!rcq) {
		pthread_spin_lock(&scq->lock);
	} else if ((uintptr_t)scq < (uintptr_t)rcq) {
		pthread_spin_lock(&scq->lock);
		pthread_spin_lock(&rcq->lock);
	} else {
		pthread_spin_lock(&rcq->lock);
		pthread_spin_lock(&scq->lock);
	}
}

static void vrnic_unlock_cqs(struct vrnic_qp *qp)
{
	struct vrnic_cq *scq = vrnic_qp_scq(qp), *rcq = vrnic_qp_rcq(qp);

	if (rcq)
		pthread_spin_unlock(&rcq->lock);
	if (scq)
		pthread_spin_unlock(&scq->lock);
}

/* Drop the QP's unpolled CQEs (caller holds its CQ locks). */
static void vrnic_clean_cqs(struct vrnic_qp *qp)
{
	struct vrnic_cq *scq = vrnic_qp_scq(qp), *rcq = vrnic_qp_rcq(qp);

	if (scq)
		vrnic_cq_clean(scq, qp);
	if (rcq)
		vrnic_cq_clean(rcq, qp);
}

static void vrnic_fill_caps(struct vrnic_qp *qp, struct ibv_qp_cap *cap)
{
	cap->max_send_wr = qp->sq.depth;
	cap->max_recv_wr = qp->rq.depth;	/* 0 with an SRQ */
	cap->max_send_sge = qp->sq.max_sge;
	cap->max_recv_sge = qp->rq.max_sge;
	cap->max_inline_data = qp->max_inline;
}

/*
 * Queue geometry:
 * - depth = 2^n >= max(requested, 2): indices are free-running, so all depth
 *   entries are usable and the reported max_*_wr is the depth itself.
 * - send WQE = 2^shift >= P + max(16 * max_send_sge, max_inline), P = 32 (the
 *   header) or, for UD, UD_PAYLOAD_OFFSET (header and ud_av); at least 64
 *   bytes (UD: 2^UD_SEND_WQE_SHIFT_MIN). Receive WQE = 2^shift >= 16 + 16 *
 *   max_recv_sge, at least 32.
 *   XRC_SEND: P = XRC_PAYLOAD_OFFSET (header and xrc_seg), at least
 *   2^XRC_SEND_WQE_SHIFT_MIN bytes.
 *   The SGE count and inline size are then raised to what the WQE holds
 *   (bounded by the device limits) and reported back as the actual caps.
 * - A QP with an SRQ (qp->srq set) and an XRC_SEND QP have no receive
 *   queue: depth, WQE size and SGEs 0, whatever was requested (as IBTA has
 *   the receive caps ignored then).
 */
int vrnic_size_queues(struct vrnic_context *ctx, struct vrnic_qp *qp,
		      const struct ibv_qp_cap *req)
{
	uint32_t size, min_shift, offset;
	bool rq = !qp->srq && !qp->xrc;

	if (req->max_send_wr > ctx->max_qp_wr ||
	    (rq && req->max_recv_wr > ctx->max_qp_wr) ||
	    req->max_send_sge > ctx->max_sge ||
	    (rq && req->max_recv_sge > ctx->max_sge) ||
	    req->max_inline_data > ctx->max_inline)
		return EINVAL;

	qp->sq.depth = 1u << vrnic_log2_ceil(max_t(uint32_t, req->max_send_wr, 2));

	if (qp->xrc) {
		offset = VRNIC_XRC_PAYLOAD_OFFSET;
		min_shift = VRNIC_XRC_SEND_WQE_SHIFT_MIN;
	} else if (qp->datagram) {
		offset = VRNIC_UD_PAYLOAD_OFFSET;
		min_shift = VRNIC_UD_SEND_WQE_SHIFT_MIN;
	} else {
		offset = VRNIC_SEND_WQE_HEADER_SIZE;
		min_shift = VRNIC_SEND_WQE_SHIFT_MIN;
	}
	size = offset + max_t(uint32_t, req->max_send_sge * VRNIC_SGE_SIZE,
			      req->max_inline_data);
	qp->sq.wqe_shift = max_t(uint32_t, vrnic_log2_ceil(size), min_shift);
	if (qp->sq.wqe_shift > VRNIC_SEND_WQE_SHIFT_MAX)
		return EINVAL;
	size = (1u << qp->sq.wqe_shift) - offset;
	qp->sq.max_sge = min_t(uint32_t, size / VRNIC_SGE_SIZE, ctx->max_sge);
	qp->max_inline = min_t(uint32_t, size, ctx->max_inline);

	if (!rq) {
		qp->rq.depth = 0;
		qp->rq.wqe_shift = 0;
		qp->rq.max_sge = 0;
		return 0;
	}
	qp->rq.depth = 1u << vrnic_log2_ceil(max_t(uint32_t, req->max_recv_wr, 2));
	size = VRNIC_RECV_WQE_HEADER_SIZE + req->max_recv_sge * VRNIC_SGE_SIZE;
	qp->rq.wqe_shift = max_t(uint32_t, vrnic_log2_ceil(size),
				 VRNIC_RECV_WQE_SHIFT_MIN);
	if (qp->rq.wqe_shift > VRNIC_RECV_WQE_SHIFT_MAX)
		return EINVAL;
	size = (1u << qp->rq.wqe_shift) - VRNIC_RECV_WQE_HEADER_SIZE;
	qp->rq.max_sge = min_t(uint32_t, size / VRNIC_SGE_SIZE, ctx->max_sge);
	return 0;
}

static void vrnic_free_qp(struct vrnic_qp *qp)
{
	vrnic_free_ring(qp->sq.ring, qp->sq.ring_size);
	vrnic_free_ring(qp->rq.ring, qp->rq.ring_size);
	free(qp->wr_batch);
	free(qp);
}

/* Serves create_qp and create_qp_ex (which has checked comp_mask: PD and
 * at most SEND_OPS_FLAGS, whose API it adds itself): RC, UC, UD and
 * XRC_SEND QPs (XRC_RECV ones are xrc.c's). */
struct vrnic_qp *vrnic_qp_create(struct ibv_qp_init_attr_ex *attr)
{
	struct ibv_pd *pd = attr->pd;
	struct vrnic_context *ctx = to_vctx(pd->context);
	struct vrnic_ucmd_create_qp_resp resp = {};
	struct vrnic_ucmd_create_qp cmd = {};
	struct ibv_qp_init_attr_ex kattr;
	struct vrnic_db_map map;
	struct vrnic_qp *qp;
	uint32_t slot;
	int ret;

	if (attr->qp_type != IBV_QPT_RC && attr->qp_type != IBV_QPT_UC &&
	    attr->qp_type != IBV_QPT_UD && attr->qp_type != IBV_QPT_XRC_SEND) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	/* An XRC_SEND QP receives nothing (SPEC "XRC"). */
	if (attr->qp_type == IBV_QPT_XRC_SEND && attr->srq) {
		errno = EINVAL;
		return NULL;
	}
	qp = calloc(1, sizeof(*qp));
	if (!qp)
		return NULL;
	qp->datagram = attr->qp_type == IBV_QPT_UD;
	qp->xrc = attr->qp_type == IBV_QPT_XRC_SEND;
	qp->srq = attr->srq ? to_vsrq(attr->srq) : NULL;
	ret = vrnic_size_queues(ctx, qp, &attr->cap);
	if (ret)
		goto err_free;

	qp->sq.ring = vrnic_alloc_ring((size_t)qp->sq.depth << qp->sq.wqe_shift,
				       &qp->sq.ring_size);
	if (qp->rq.depth)
		qp->rq.ring = vrnic_alloc_ring((size_t)qp->rq.depth <<
					       qp->rq.wqe_shift,
					       &qp->rq.ring_size);
	if (!qp->sq.ring || (qp->rq.depth && !qp->rq.ring)) {
		ret = ENOMEM;
		goto err_free;
	}

	/* Without a receive queue (SRQ, XRC_SEND) its fields stay 0
	 * (create_qp_cmd). */
	cmd.drv_payload.sq_buf_addr = htole64((uintptr_t)qp->sq.ring);
	cmd.drv_payload.rq_buf_addr = htole64((uintptr_t)qp->rq.ring);
	cmd.drv_payload.sq_depth_log2 = vrnic_log2_ceil(qp->sq.depth);
	cmd.drv_payload.rq_depth_log2 = qp->rq.depth ?
					vrnic_log2_ceil(qp->rq.depth) : 0;
	cmd.drv_payload.sq_wqe_shift = qp->sq.wqe_shift;
	cmd.drv_payload.rq_wqe_shift = qp->rq.wqe_shift;
	cmd.drv_payload.max_inline = htole32(qp->max_inline);

	/* The kernel sees the caps the rings were sized for. */
	kattr = *attr;
	vrnic_fill_caps(qp, &kattr.cap);
	ret = ibv_cmd_create_qp_ex(pd->context, &qp->vqp, &kattr, &cmd.ibv_cmd,
				   sizeof(cmd), &resp.ibv_resp, sizeof(resp));
	if (ret)
		goto err_free;

	slot = le32toh(resp.drv_payload.db_slot);
	ret = vrnic_map_object_slot(ctx, "create_qp", slot,
				    le32toh(resp.drv_payload.db_page),
				    le64toh(resp.drv_payload.db_mmap_key),
				    le64toh(resp.drv_payload.kick_mmap_key),
				    &map);
	if (ret)
		goto err_destroy;
	qp->sq.db = vrnic_db_word(map.db, slot, VRNIC_DB_QP_SLOT_SQ_PI_OFF);
	qp->rq.db = vrnic_db_word(map.db, slot, VRNIC_DB_QP_SLOT_RQ_PI_OFF);
	qp->sq.db_flag = map.db + VRNIC_DB_FLAGS_BASE + slot;
	qp->rq.db_flag = qp->sq.db_flag;
	qp->sq.db_page = map.db;
	qp->rq.db_page = map.db;
	qp->sq.kick_page = map.kick;
	qp->rq.kick_page = map.kick;
	/* The QP is in RESET: start its slot from a known state. */
	__atomic_store_n(qp->sq.db, 0, __ATOMIC_RELAXED);
	__atomic_store_n(qp->rq.db, 0, __ATOMIC_RELAXED);
	pthread_spin_init(&qp->sq.lock, PTHREAD_PROCESS_PRIVATE);
	pthread_spin_init(&qp->rq.lock, PTHREAD_PROCESS_PRIVATE);
	qp->sq_sig_all = attr->sq_sig_all;
	qp->state = IBV_QPS_RESET;

	ret = vrnic_insert_qp(ctx, qp);
	if (ret) {
		pthread_spin_destroy(&qp->sq.lock);
		pthread_spin_destroy(&qp->rq.lock);
		goto err_destroy;
	}
	vrnic_fill_caps(qp, &attr->cap);
	return qp;

err_destroy:
	ibv_cmd_destroy_qp(&qp->ibv_qp);
err_free:
	vrnic_free_qp(qp);
	errno = ret;
	return NULL;
}

struct ibv_qp *vrnic_create_qp(struct ibv_pd *pd,
			       struct ibv_qp_init_attr *attr)
{
	struct ibv_qp_init_attr_ex attr_ex = {};
	struct vrnic_qp *qp;

	/* ibv_qp_init_attr is the start of ibv_qp_init_attr_ex. */
	memcpy(&attr_ex, attr, sizeof(*attr));
	attr_ex.comp_mask = IBV_QP_INIT_ATTR_PD;
	attr_ex.pd = pd;
	qp = vrnic_qp_create(&attr_ex);
	if (!qp)
		return NULL;
	attr->cap = attr_ex.cap;
	return &qp->ibv_qp;
}

int vrnic_modify_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr,
		    int attr_mask)
{
	struct vrnic_qp *qp = to_vqp(ibqp);
	struct ibv_modify_qp cmd = {};
	bool reset;
	int ret;

	ret = ibv_cmd_modify_qp(ibqp, attr, attr_mask, &cmd, sizeof(cmd));
	if (ret || !(attr_mask & IBV_QP_STATE))
		return ret;

	/*
	 * Moving to RESET restarts both rings at index 0, on the device as
	 * here (SPEC.md leaves this implicit, see README.md): drop the QP's
	 * stale CQEs so they cannot retire WQEs of the new incarnation, and
	 * zero the producer indices in the doorbell slot.
	 */
	reset = attr->qp_state == IBV_QPS_RESET;
	/* An XRC_RECV QP has no rings, no slot and no CQEs of its own. */
	if (vrnic_qp_is_xrc_tgt(qp))
		return 0;
	if (reset) {
		vrnic_lock_cqs(qp);
		vrnic_clean_cqs(qp);
	}
	pthread_spin_lock(&qp->sq.lock);
	pthread_spin_lock(&qp->rq.lock);
	if (reset) {
		__atomic_store_n(&qp->sq.pi, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&qp->sq.ci, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&qp->rq.pi, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&qp->rq.ci, 0, __ATOMIC_RELAXED);
		__atomic_store_n(qp->sq.db, 0, __ATOMIC_RELAXED);
		__atomic_store_n(qp->rq.db, 0, __ATOMIC_RELAXED);
	}
	qp->state = attr->qp_state;
	pthread_spin_unlock(&qp->rq.lock);
	pthread_spin_unlock(&qp->sq.lock);
	if (reset)
		vrnic_unlock_cqs(qp);
	return 0;
}

int vrnic_query_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr,
		   int attr_mask, struct ibv_qp_init_attr *init_attr)
{
	struct ibv_query_qp cmd = {};
	int ret;

	ret = ibv_cmd_query_qp(ibqp, attr, attr_mask, init_attr, &cmd,
			       sizeof(cmd));
	if (ret)
		return ret;
	vrnic_fill_caps(to_vqp(ibqp), &attr->cap);
	init_attr->cap = attr->cap;
	return 0;
}

int vrnic_destroy_qp(struct ibv_qp *ibqp)
{
	struct vrnic_qp *qp = to_vqp(ibqp);
	int ret;

	ret = ibv_cmd_destroy_qp(ibqp);
	if (ret)
		return ret;

	/* The device writes no more CQEs for this QP. Unpublish it and drop
	 * its unpolled CQEs under the CQ locks, so no poller still uses it. */
	vrnic_lock_cqs(qp);
	vrnic_remove_qp(to_vctx(ibqp->context), qp);
	vrnic_clean_cqs(qp);
	vrnic_unlock_cqs(qp);

	pthread_spin_destroy(&qp->sq.lock);
	pthread_spin_destroy(&qp->rq.lock);
	vrnic_free_qp(qp);
	return 0;
}

/*
 * Address handles live in user space: the kernel checks the attributes and
 * (RoCE mode) resolves the destination MAC, which comes back in the driver
 * response; every send through the AH copies the AV into its WQE. Only the
 * fields the device reads are kept (static_rate and src_path_bits have no
 * meaning on vrnic).
 */
struct ibv_ah *vrnic_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	struct vrnic_ucmd_create_ah_resp resp = {};
	struct vrnic_ah *ah;
	int ret;

	ah = calloc(1, sizeof(*ah));
	if (!ah)
		return NULL;
	ret = ibv_cmd_create_ah(pd, &ah->ibv_ah, attr, &resp.ibv_resp,
				sizeof(resp));
	if (ret) {
		free(ah);
		errno = ret;
		return NULL;
	}
	/* The same AV the kernel builds for its own AHs (vrnic_ah.c). */
	ah->av.dlid = attr->dlid;
	ah->av.sl = attr->sl & 0xf;
	ah->av.is_global = !!attr->is_global;
	if (attr->is_global) {
		ah->av.sgid_index = attr->grh.sgid_index;
		ah->av.hop_limit = attr->grh.hop_limit;
		ah->av.traffic_class = attr->grh.traffic_class;
		ah->av.flow_label = attr->grh.flow_label & 0xfffff;
		memcpy(ah->av.dgid, attr->grh.dgid.raw, sizeof(ah->av.dgid));
	}
	memcpy(ah->av.dmac, resp.drv_payload.dmac, sizeof(ah->av.dmac));
	return &ah->ibv_ah;
}

int vrnic_destroy_ah(struct ibv_ah *ibah)
{
	int ret = ibv_cmd_destroy_ah(ibah);

	if (ret)
		return ret;
	free(to_vah(ibah));
	return 0;
}
