// SPDX-License-Identifier: GPL-2.0 OR Linux-OpenIB
/*
 * vrnic rdma-core provider: extended QPs (ibv_create_qp_ex with
 * send_ops_flags) and the ibv_wr_* work request API.
 *
 * The API is a front end to post_send's encoder: a builder (ibv_wr_send,
 * ibv_wr_rdma_write, ...) starts a struct ibv_send_wr, the setters fill in
 * its data and address, and the work request is encoded by
 * vrnic_build_send_wqe() when the next builder or ibv_wr_complete() shows it
 * is whole. So a work request becomes the same WQE, byte for byte, through
 * either API, and is checked by the same code.
 *
 * Buffers the caller may reuse as soon as a setter returns are copied:
 * SGE lists into the batch's sges[], inline data into its inline_buf.
 *
 * Locking: ibv_wr_start takes sq.lock, ibv_wr_complete and ibv_wr_abort
 * release it (the critical region of ibv_wr_post(3)). WQEs are written from
 * sq.pi on but the producer index reaches the doorbell only at
 * ibv_wr_complete, once for the batch; until then the device never reads
 * them, so ibv_wr_abort (or a failure) just forgets them.
 */

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "vrnic.h"

/* One ibv_wr_start .. ibv_wr_complete/ibv_wr_abort batch (under sq.lock). */
struct vrnic_wr_batch {
	uint32_t pi;		/* where the next WQE goes */
	int err;		/* first failure: the batch is discarded */
	bool pending;		/* wr is built and not yet encoded */
	struct ibv_send_wr wr;
	uint32_t max_sge;	/* entries of sges[] (the QP's max_send_sge) */
	uint8_t *inline_buf;	/* the QP's max_inline bytes */
	struct ibv_sge sges[];
};

/* send_ops_flags bit n asks for ibv_wr_opcode n, for every work request we
 * have (TSO, FLUSH and ATOMIC_WRITE, bits 10 to 12, are not among them). */
#define VRNIC_SEND_OP(name)                                                \
	static_assert(IBV_QP_EX_WITH_##name == 1ull << IBV_WR_##name,      \
		      "send_ops_flags bit of " #name)
VRNIC_SEND_OP(RDMA_WRITE);
VRNIC_SEND_OP(RDMA_WRITE_WITH_IMM);
VRNIC_SEND_OP(SEND);
VRNIC_SEND_OP(SEND_WITH_IMM);
VRNIC_SEND_OP(RDMA_READ);
VRNIC_SEND_OP(ATOMIC_CMP_AND_SWP);
VRNIC_SEND_OP(ATOMIC_FETCH_AND_ADD);
VRNIC_SEND_OP(LOCAL_INV);
VRNIC_SEND_OP(BIND_MW);
VRNIC_SEND_OP(SEND_WITH_INV);

static struct vrnic_qp *to_vqp_ex(struct ibv_qp_ex *qpx)
{
	return container_of(qpx, struct vrnic_qp, vqp.qp_ex);
}

static void vrnic_wr_fail(struct vrnic_wr_batch *b, int err)
{
	if (!b->err)
		b->err = err;
}

/* Encode the pending work request at b->pi. */
static void vrnic_wr_flush(struct vrnic_qp *qp, struct vrnic_wr_batch *b)
{
	int ret;

	if (!b->pending)
		return;
	b->pending = false;
	if (b->err)
		return;
	if (vrnic_wq_full(&qp->sq, b->pi)) {
		vrnic_wr_fail(b, ENOMEM);
		return;
	}
	ret = vrnic_build_send_wqe(qp, vrnic_wqe(&qp->sq, b->pi), &b->wr);
	if (ret)
		vrnic_wr_fail(b, ret);
	else
		b->pi++;
}

/* A builder: the previous work request is whole; start the next. */
static struct ibv_send_wr *vrnic_wr_begin(struct ibv_qp_ex *qpx,
					  enum ibv_wr_opcode opcode)
{
	struct vrnic_qp *qp = to_vqp_ex(qpx);
	struct vrnic_wr_batch *b = qp->wr_batch;

	vrnic_wr_flush(qp, b);
	memset(&b->wr, 0, sizeof(b->wr));
	b->wr.wr_id = qpx->wr_id;
	b->wr.opcode = opcode;
	/* Inline is chosen by the data setter, not by wr_flags. */
	b->wr.send_flags = qpx->wr_flags & ~IBV_SEND_INLINE;
	b->pending = true;
	return &b->wr;
}

/* A setter: the work request it completes, or NULL without one. */
static struct ibv_send_wr *vrnic_wr_current(struct ibv_qp_ex *qpx)
{
	struct vrnic_wr_batch *b = to_vqp_ex(qpx)->wr_batch;

	if (!b->pending) {
		vrnic_wr_fail(b, EINVAL);
		return NULL;
	}
	return &b->wr;
}

static void vrnic_wr_send(struct ibv_qp_ex *qpx)
{
	vrnic_wr_begin(qpx, IBV_WR_SEND);
}

static void vrnic_wr_send_imm(struct ibv_qp_ex *qpx, __be32 imm_data)
{
	vrnic_wr_begin(qpx, IBV_WR_SEND_WITH_IMM)->imm_data = imm_data;
}

static void vrnic_wr_send_inv(struct ibv_qp_ex *qpx, uint32_t invalidate_rkey)
{
	vrnic_wr_begin(qpx, IBV_WR_SEND_WITH_INV)->invalidate_rkey =
		invalidate_rkey;
}

static void vrnic_wr_rdma(struct ibv_qp_ex *qpx, enum ibv_wr_opcode opcode,
			  uint32_t rkey, uint64_t remote_addr)
{
	struct ibv_send_wr *wr = vrnic_wr_begin(qpx, opcode);

	wr->wr.rdma.remote_addr = remote_addr;
	wr->wr.rdma.rkey = rkey;
}

static void vrnic_wr_rdma_write(struct ibv_qp_ex *qpx, uint32_t rkey,
				uint64_t remote_addr)
{
	vrnic_wr_rdma(qpx, IBV_WR_RDMA_WRITE, rkey, remote_addr);
}

static void vrnic_wr_rdma_write_imm(struct ibv_qp_ex *qpx, uint32_t rkey,
				    uint64_t remote_addr, __be32 imm_data)
{
	vrnic_wr_rdma(qpx, IBV_WR_RDMA_WRITE_WITH_IMM, rkey, remote_addr);
	to_vqp_ex(qpx)->wr_batch->wr.imm_data = imm_data;
}

static void vrnic_wr_rdma_read(struct ibv_qp_ex *qpx, uint32_t rkey,
			       uint64_t remote_addr)
{
	vrnic_wr_rdma(qpx, IBV_WR_RDMA_READ, rkey, remote_addr);
}

static void vrnic_wr_atomic(struct ibv_qp_ex *qpx, enum ibv_wr_opcode opcode,
			    uint32_t rkey, uint64_t remote_addr,
			    uint64_t compare_add, uint64_t swap)
{
	struct ibv_send_wr *wr = vrnic_wr_begin(qpx, opcode);

	wr->wr.atomic.remote_addr = remote_addr;
	wr->wr.atomic.compare_add = compare_add;
	wr->wr.atomic.swap = swap;
	wr->wr.atomic.rkey = rkey;
}

static void vrnic_wr_atomic_cmp_swp(struct ibv_qp_ex *qpx, uint32_t rkey,
				    uint64_t remote_addr, uint64_t compare,
				    uint64_t swap)
{
	vrnic_wr_atomic(qpx, IBV_WR_ATOMIC_CMP_AND_SWP, rkey, remote_addr,
			compare, swap);
}

static void vrnic_wr_atomic_fetch_add(struct ibv_qp_ex *qpx, uint32_t rkey,
				      uint64_t remote_addr, uint64_t add)
{
	vrnic_wr_atomic(qpx, IBV_WR_ATOMIC_FETCH_AND_ADD, rkey, remote_addr,
			add, 0);
}

static void vrnic_wr_local_inv(struct ibv_qp_ex *qpx, uint32_t invalidate_rkey)
{
	vrnic_wr_begin(qpx, IBV_WR_LOCAL_INV)->invalidate_rkey =
		invalidate_rkey;
}

static void vrnic_wr_bind_mw(struct ibv_qp_ex *qpx, struct ibv_mw *mw,
			     uint32_t rkey,
			     const struct ibv_mw_bind_info *bind_info)
{
	struct ibv_send_wr *wr = vrnic_wr_begin(qpx, IBV_WR_BIND_MW);

	wr->bind_mw.mw = mw;
	wr->bind_mw.rkey = rkey;
	wr->bind_mw.bind_info = *bind_info;
}

static void vrnic_wr_set_ud_addr(struct ibv_qp_ex *qpx, struct ibv_ah *ah,
				 uint32_t remote_qpn, uint32_t remote_qkey)
{
	struct ibv_send_wr *wr = vrnic_wr_current(qpx);

	if (!wr)
		return;
	wr->wr.ud.ah = ah;
	wr->wr.ud.remote_qpn = remote_qpn;
	wr->wr.ud.remote_qkey = remote_qkey;
}

/* XRC_SEND: the target's XRC SRQ; after the builder, as every setter. */
static void vrnic_wr_set_xrc_srqn(struct ibv_qp_ex *qpx, uint32_t remote_srqn)
{
	struct ibv_send_wr *wr = vrnic_wr_current(qpx);

	if (wr)
		wr->qp_type.xrc.remote_srqn = remote_srqn;
}

static void vrnic_wr_set_sge_list(struct ibv_qp_ex *qpx, size_t num_sge,
				  const struct ibv_sge *sg_list)
{
	struct vrnic_wr_batch *b = to_vqp_ex(qpx)->wr_batch;
	struct ibv_send_wr *wr = vrnic_wr_current(qpx);

	if (!wr)
		return;
	if (num_sge > b->max_sge) {
		vrnic_wr_fail(b, EINVAL);
		return;
	}
	if (num_sge)
		memcpy(b->sges, sg_list, num_sge * sizeof(*sg_list));
	wr->sg_list = b->sges;
	wr->num_sge = num_sge;
	wr->send_flags &= ~IBV_SEND_INLINE;
}

static void vrnic_wr_set_sge(struct ibv_qp_ex *qpx, uint32_t lkey,
			     uint64_t addr, uint32_t length)
{
	struct ibv_sge sge = { .addr = addr, .length = length, .lkey = lkey };

	vrnic_wr_set_sge_list(qpx, 1, &sge);
}

/*
 * The buffers, concatenated, into inline_buf now; the work request carries
 * them as one inline SGE, which the encoder copies into the WQE.
 */
static void vrnic_wr_set_inline_data_list(struct ibv_qp_ex *qpx,
					  size_t num_buf,
					  const struct ibv_data_buf *buf_list)
{
	struct vrnic_qp *qp = to_vqp_ex(qpx);
	struct vrnic_wr_batch *b = qp->wr_batch;
	struct ibv_send_wr *wr = vrnic_wr_current(qpx);
	size_t i, len = 0;

	if (!wr)
		return;
	for (i = 0; i < num_buf; i++) {
		if (buf_list[i].length > qp->max_inline - len) {
			vrnic_wr_fail(b, EINVAL);
			return;
		}
		if (buf_list[i].length)
			memcpy(b->inline_buf + len, buf_list[i].addr,
			       buf_list[i].length);
		len += buf_list[i].length;
	}
	b->sges[0] = (struct ibv_sge){ .addr = (uintptr_t)b->inline_buf,
				       .length = len };
	wr->sg_list = b->sges;
	wr->num_sge = 1;
	wr->send_flags |= IBV_SEND_INLINE;
}

static void vrnic_wr_set_inline_data(struct ibv_qp_ex *qpx, void *addr,
				     size_t length)
{
	struct ibv_data_buf buf = { .addr = addr, .length = length };

	vrnic_wr_set_inline_data_list(qpx, 1, &buf);
}

static void vrnic_wr_start(struct ibv_qp_ex *qpx)
{
	struct vrnic_qp *qp = to_vqp_ex(qpx);
	struct vrnic_wr_batch *b = qp->wr_batch;

	pthread_spin_lock(&qp->sq.lock);
	b->pi = qp->sq.pi;
	b->pending = false;
	b->err = vrnic_sq_ready(qp) ? 0 : EINVAL;
}

static int vrnic_wr_complete(struct ibv_qp_ex *qpx)
{
	struct vrnic_qp *qp = to_vqp_ex(qpx);
	struct vrnic_wr_batch *b = qp->wr_batch;
	int err;

	vrnic_wr_flush(qp, b);
	err = b->err;
	if (!err && b->pi != qp->sq.pi)
		vrnic_ring_doorbell(&qp->sq, b->pi);
	pthread_spin_unlock(&qp->sq.lock);
	return err;
}

static void vrnic_wr_abort(struct ibv_qp_ex *qpx)
{
	struct vrnic_qp *qp = to_vqp_ex(qpx);

	qp->wr_batch->pending = false;
	pthread_spin_unlock(&qp->sq.lock);
}

/*
 * Give a created QP the ibv_wr_* API: its batch (sized for the QP's caps)
 * and every builder and setter we have. A work request the QP type cannot
 * do fails in the encoder, as through post_send, and makes wr_complete fail.
 * wr_set_xrc_srqn is there for XRC_SEND QPs only (as wr_set_ud_addr makes
 * sense only for UD). TSO, FLUSH and ATOMIC_WRITE have none (create_qp_ex
 * refuses them).
 */
int vrnic_qp_ex_init(struct vrnic_qp *qp)
{
	struct ibv_qp_ex *qpx = &qp->vqp.qp_ex;
	uint32_t max_sge = qp->sq.max_sge ? qp->sq.max_sge : 1;
	struct vrnic_wr_batch *b;

	b = calloc(1, sizeof(*b) + max_sge * sizeof(b->sges[0]) +
			      qp->max_inline);
	if (!b)
		return ENOMEM;
	b->max_sge = qp->sq.max_sge;
	b->inline_buf = (uint8_t *)&b->sges[max_sge];
	qp->wr_batch = b;

	qpx->wr_start = vrnic_wr_start;
	qpx->wr_complete = vrnic_wr_complete;
	qpx->wr_abort = vrnic_wr_abort;
	qpx->wr_send = vrnic_wr_send;
	qpx->wr_send_imm = vrnic_wr_send_imm;
	qpx->wr_send_inv = vrnic_wr_send_inv;
	qpx->wr_rdma_write = vrnic_wr_rdma_write;
	qpx->wr_rdma_write_imm = vrnic_wr_rdma_write_imm;
	qpx->wr_rdma_read = vrnic_wr_rdma_read;
	qpx->wr_atomic_cmp_swp = vrnic_wr_atomic_cmp_swp;
	qpx->wr_atomic_fetch_add = vrnic_wr_atomic_fetch_add;
	qpx->wr_bind_mw = vrnic_wr_bind_mw;
	qpx->wr_local_inv = vrnic_wr_local_inv;
	qpx->wr_set_ud_addr = vrnic_wr_set_ud_addr;
	qpx->wr_set_sge = vrnic_wr_set_sge;
	qpx->wr_set_sge_list = vrnic_wr_set_sge_list;
	qpx->wr_set_inline_data = vrnic_wr_set_inline_data;
	qpx->wr_set_inline_data_list = vrnic_wr_set_inline_data_list;
	if (qp->xrc)
		qpx->wr_set_xrc_srqn = vrnic_wr_set_xrc_srqn;
	qp->vqp.comp_mask |= VERBS_QP_EX;
	return 0;
}

/* Whether a QP of @type can post every work request @ops asks for: the
 * opcode sets of post_send (vrnic_qp_allows), asked of a QP-to-be. */
static bool vrnic_send_ops_supported(enum ibv_qp_type type, uint64_t ops)
{
	struct vrnic_qp probe = { .ibv_qp.qp_type = type };
	unsigned int op;

	for (op = 0; op < 64; op++) {
		if (!(ops & (1ull << op)))
			continue;
		if (op > IBV_WR_SEND_WITH_INV || !vrnic_qp_allows(&probe, op))
			return false;
	}
	return true;
}

/* An XRC_RECV QP: its XRC domain and nothing else (no send_ops_flags: it
 * cannot send). */
static struct ibv_qp *vrnic_create_xrc_recv_qp(struct ibv_context *ibctx,
					       struct ibv_qp_init_attr_ex *attr)
{
	struct ibv_qp_init_attr_ex kattr;
	struct vrnic_qp *qp;

	if (!(attr->comp_mask & IBV_QP_INIT_ATTR_XRCD) || !attr->xrcd ||
	    attr->xrcd->context != ibctx) {
		errno = EINVAL;
		return NULL;
	}
	if (attr->comp_mask & ~(IBV_QP_INIT_ATTR_XRCD | IBV_QP_INIT_ATTR_PD)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	kattr = *attr;
	kattr.comp_mask = IBV_QP_INIT_ATTR_XRCD;
	qp = vrnic_xrc_recv_qp_create(ibctx, &kattr);
	if (!qp)
		return NULL;
	attr->cap = kattr.cap;
	return &qp->ibv_qp;
}

/*
 * ibv_create_qp_ex: the QP of vrnic_qp_create(), plus the ibv_wr_* API when
 * send_ops_flags are given, or an XRC_RECV QP. Refused with EOPNOTSUPP:
 * attributes beyond PD, SEND_OPS_FLAGS and CREATE_FLAGS (RSS, TSO), any
 * create flag, and send_ops_flags the QP type cannot do.
 */
struct ibv_qp *vrnic_create_qp_ex(struct ibv_context *ibctx,
				  struct ibv_qp_init_attr_ex *attr)
{
	const uint32_t known = IBV_QP_INIT_ATTR_PD |
			       IBV_QP_INIT_ATTR_SEND_OPS_FLAGS |
			       IBV_QP_INIT_ATTR_CREATE_FLAGS;
	bool ex = attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	struct ibv_qp_init_attr_ex kattr;
	struct vrnic_qp *qp;
	int ret;

	if (attr->qp_type == IBV_QPT_XRC_RECV)
		return vrnic_create_xrc_recv_qp(ibctx, attr);
	if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd ||
	    attr->pd->context != ibctx) {
		errno = EINVAL;
		return NULL;
	}
	if ((attr->comp_mask & ~known) ||
	    ((attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) &&
	     attr->create_flags) ||
	    (ex && !vrnic_send_ops_supported(attr->qp_type,
					     attr->send_ops_flags))) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	/* No create flags: the command need not name them. */
	kattr = *attr;
	kattr.comp_mask &= ~IBV_QP_INIT_ATTR_CREATE_FLAGS;
	qp = vrnic_qp_create(&kattr);
	if (!qp)
		return NULL;
	attr->cap = kattr.cap;
	if (ex) {
		ret = vrnic_qp_ex_init(qp);
		if (ret) {
			vrnic_destroy_qp(&qp->ibv_qp);
			errno = ret;
			return NULL;
		}
	}
	return &qp->ibv_qp;
}
