// SPDX-License-Identifier: GPL-2.0 OR Linux-OpenIB
/*
 * vrnic rdma-core provider: shared receive queues (SPEC "Shared receive
 * queues"). The ring is ours, like a QP's receive ring; its doorbell is one
 * aligned store of the producer index into the SRQ's slot (no flag, no kick:
 * the device reads the slot whenever a QP needs a receive WQE). Slots are
 * tracked because QPs complete SRQ WQEs out of order: post_srq_recv never
 * writes into a slot whose CQE has not been polled yet. Basic and XRC SRQs
 * (SPEC "XRC": served by the TGT QPs of an XRC domain, completing on the
 * SRQ's own CQ) share all of this; every completion names its SRQ
 * (CQE_FLAG_SRQ, srqn), which the context's SRQ table resolves.
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <ccan/minmax.h>
#include <util/mmio.h>
#include <util/udma_barrier.h>

#include "vrnic.h"

/*
 * Geometry, as for a QP's receive queue (README "Decisions"): depth 2^n >=
 * max(max_wr, 2), WQE 2^shift >= 16 + 16 * max(max_sge, 1) and at least 32
 * bytes; max_sge is then raised to what the WQE holds (within the device's
 * limit). The device needs 1 <= max_sge and depth <= MAX_QP_WR.
 */
int vrnic_size_srq(struct vrnic_context *ctx, struct vrnic_srq *srq,
		   const struct ibv_srq_attr *req)
{
	uint32_t sge = max_t(uint32_t, req->max_sge, 1);
	uint32_t size;

	if (req->max_wr > ctx->max_qp_wr || sge > ctx->max_sge)
		return EINVAL;
	srq->depth = 1u << vrnic_log2_ceil(max_t(uint32_t, req->max_wr, 2));
	if (srq->depth > ctx->max_qp_wr)
		return EINVAL;
	size = VRNIC_RECV_WQE_HEADER_SIZE + sge * VRNIC_SGE_SIZE;
	srq->wqe_shift = max_t(uint32_t, vrnic_log2_ceil(size),
			       VRNIC_RECV_WQE_SHIFT_MIN);
	if (srq->wqe_shift > VRNIC_RECV_WQE_SHIFT_MAX)
		return EINVAL;
	size = (1u << srq->wqe_shift) - VRNIC_RECV_WQE_HEADER_SIZE;
	srq->max_sge = min_t(uint32_t, size / VRNIC_SGE_SIZE, ctx->max_sge);
	return 0;
}

static void vrnic_free_srq(struct vrnic_srq *srq)
{
	vrnic_free_ring(srq->ring, srq->ring_size);
	free(srq->busy);
	free(srq);
}

/*
 * Create command: basic SRQs go through CREATE_SRQ, XRC SRQs through
 * CREATE_XSRQ (xrcd and cq); both carry the same driver request and
 * response. @attr's caps are those the ring was sized for.
 */
static int vrnic_srq_cmd(struct vrnic_srq *srq,
			 struct ibv_srq_init_attr_ex *attr,
			 struct vrnic_create_srq_resp *out)
{
	struct vrnic_create_srq_cmd drv = {
		.buf_addr = htole64((uintptr_t)srq->ring),
		.depth_log2 = vrnic_log2_ceil(srq->depth),
		.wqe_shift = srq->wqe_shift,
	};
	int ret;

	if (attr->srq_type == IBV_SRQT_XRC) {
		struct vrnic_ucmd_create_xsrq_resp resp = {};
		struct vrnic_ucmd_create_xsrq cmd = { .drv_payload = drv };

		ret = ibv_cmd_create_srq_ex(attr->pd->context, &srq->vsrq, attr,
					    &cmd.ibv_cmd, sizeof(cmd),
					    &resp.ibv_resp, sizeof(resp));
		*out = resp.drv_payload;
	} else {
		struct vrnic_ucmd_create_srq_resp resp = {};
		struct vrnic_ucmd_create_srq cmd = { .drv_payload = drv };
		struct ibv_srq_init_attr basic = {
			.srq_context = attr->srq_context,
			.attr = attr->attr,
		};

		ret = ibv_cmd_create_srq(attr->pd, &srq->ibv_srq, &basic,
					 &cmd.ibv_cmd, sizeof(cmd),
					 &resp.ibv_resp, sizeof(resp));
		*out = resp.drv_payload;
	}
	return ret;
}

/*
 * Serves create_srq and create_srq_ex. Basic and XRC SRQs; tag matching
 * SRQs and attributes beyond TYPE, PD, XRCD and CQ are refused with
 * EOPNOTSUPP.
 */
static struct vrnic_srq *vrnic_srq_create(struct ibv_context *ibctx,
					  struct ibv_srq_init_attr_ex *attr)
{
	const uint32_t known = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
			       IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
	struct vrnic_context *ctx = to_vctx(ibctx);
	struct vrnic_create_srq_resp resp;
	struct ibv_srq_init_attr_ex kattr;
	struct vrnic_db_map map;
	struct vrnic_srq *srq;
	uint32_t slot;
	int ret;

	if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE))
		attr->srq_type = IBV_SRQT_BASIC;
	if ((attr->comp_mask & ~known) ||
	    (attr->srq_type != IBV_SRQT_BASIC &&
	     attr->srq_type != IBV_SRQT_XRC)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !attr->pd ||
	    attr->pd->context != ibctx ||
	    (attr->srq_type == IBV_SRQT_XRC &&
	     (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_XRCD) || !attr->xrcd ||
	      !(attr->comp_mask & IBV_SRQ_INIT_ATTR_CQ) || !attr->cq))) {
		errno = EINVAL;
		return NULL;
	}

	srq = calloc(1, sizeof(*srq));
	if (!srq)
		return NULL;
	ret = vrnic_size_srq(ctx, srq, &attr->attr);
	if (ret)
		goto err_free;
	srq->ring = vrnic_alloc_ring((size_t)srq->depth << srq->wqe_shift,
				     &srq->ring_size);
	srq->busy = calloc(srq->depth, 1);
	if (!srq->ring || !srq->busy) {
		ret = ENOMEM;
		goto err_free;
	}

	/* The kernel sees the caps the ring was sized for. */
	kattr = *attr;
	kattr.attr.max_wr = srq->depth;
	kattr.attr.max_sge = srq->max_sge;
	ret = vrnic_srq_cmd(srq, &kattr, &resp);
	if (ret)
		goto err_free;

	srq->srqn = le32toh(resp.srqn);
	slot = le32toh(resp.db_slot);
	/* Peers name an XRC SRQ by the number ibv_get_srq_num reports, the
	 * kernel's; the device names it in CQEs by ours. */
	if (attr->srq_type == IBV_SRQT_XRC && srq->vsrq.srq_num != srq->srqn) {
		verbs_err(&ctx->ibv_ctx,
			  "vrnic: bad create_srq response (srqn %u, srq_num %u)\n",
			  srq->srqn, srq->vsrq.srq_num);
		ret = EPROTO;
		goto err_destroy;
	}
	ret = vrnic_map_object_slot(ctx, "create_srq", slot,
				    le32toh(resp.db_page),
				    le64toh(resp.db_mmap_key),
				    le64toh(resp.kick_mmap_key), &map);
	if (ret)
		goto err_destroy;
	srq->db = vrnic_db_word(map.db, slot, VRNIC_DB_SRQ_SLOT_PI_OFF);
	/* Nothing posted yet: start the slot from a known state. */
	__atomic_store_n(srq->db, 0, __ATOMIC_RELAXED);
	pthread_spin_init(&srq->lock, PTHREAD_PROCESS_PRIVATE);

	pthread_mutex_lock(&ctx->srq_table_mutex);
	ret = vrnic_table_insert(&ctx->srq_table, srq->srqn, srq);
	pthread_mutex_unlock(&ctx->srq_table_mutex);
	if (ret) {
		pthread_spin_destroy(&srq->lock);
		goto err_destroy;
	}
	/* ibv_create_srq sets these itself, ibv_create_srq_ex does not. */
	srq->ibv_srq.srq_context = attr->srq_context;
	srq->ibv_srq.pd = attr->pd;
	attr->attr.max_wr = srq->depth;
	attr->attr.max_sge = srq->max_sge;
	return srq;

err_destroy:
	ibv_cmd_destroy_srq(&srq->ibv_srq);
err_free:
	vrnic_free_srq(srq);
	errno = ret;
	return NULL;
}

struct ibv_srq *vrnic_create_srq(struct ibv_pd *pd,
				 struct ibv_srq_init_attr *attr)
{
	struct ibv_srq_init_attr_ex attr_ex = {
		.srq_context = attr->srq_context,
		.attr = attr->attr,
		.comp_mask = IBV_SRQ_INIT_ATTR_PD,
		.pd = pd,
	};
	struct vrnic_srq *srq = vrnic_srq_create(pd->context, &attr_ex);

	if (!srq)
		return NULL;
	attr->attr = attr_ex.attr;
	return &srq->ibv_srq;
}

struct ibv_srq *vrnic_create_srq_ex(struct ibv_context *ibctx,
				    struct ibv_srq_init_attr_ex *attr)
{
	struct vrnic_srq *srq = vrnic_srq_create(ibctx, attr);

	return srq ? &srq->ibv_srq : NULL;
}

/* The number peers put in their xrc_seg (XRC SRQs only). */
int vrnic_get_srq_num(struct ibv_srq *ibsrq, uint32_t *srq_num)
{
	struct vrnic_srq *srq = to_vsrq(ibsrq);

	if (srq->vsrq.srq_type != IBV_SRQT_XRC)
		return EINVAL;
	*srq_num = srq->srqn;
	return 0;
}

/* Only the limit can change: the device cannot resize an SRQ. */
int vrnic_modify_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr,
		     int attr_mask)
{
	struct ibv_modify_srq cmd = {};

	if (attr_mask & ~IBV_SRQ_LIMIT)
		return EINVAL;
	return ibv_cmd_modify_srq(ibsrq, attr, attr_mask, &cmd, sizeof(cmd));
}

int vrnic_query_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr)
{
	struct ibv_query_srq cmd = {};

	return ibv_cmd_query_srq(ibsrq, attr, &cmd, sizeof(cmd));
}

/*
 * A basic SRQ's QPs are gone (the kernel refuses to destroy it otherwise)
 * and their CQEs were dropped with them. An XRC SRQ does not wait for the
 * TGT QPs (SPEC "XRC"): its unpolled completions on its CQ are dropped
 * here. Then it leaves the table, under the table lock no poller holds.
 */
int vrnic_destroy_srq(struct ibv_srq *ibsrq)
{
	struct vrnic_context *ctx = to_vctx(ibsrq->context);
	struct vrnic_srq *srq = to_vsrq(ibsrq);
	struct vrnic_cq *cq = NULL;
	int ret;

	ret = ibv_cmd_destroy_srq(ibsrq);
	if (ret)
		return ret;
	if (srq->vsrq.srq_type == IBV_SRQT_XRC && srq->vsrq.cq) {
		cq = to_vcq(srq->vsrq.cq);
		pthread_spin_lock(&cq->lock);
		vrnic_cq_clean_srq(cq, srq->srqn);
	}
	pthread_mutex_lock(&ctx->srq_table_mutex);
	vrnic_table_remove(&ctx->srq_table, srq->srqn, srq);
	pthread_mutex_unlock(&ctx->srq_table_mutex);
	if (cq)
		pthread_spin_unlock(&cq->lock);
	pthread_spin_destroy(&srq->lock);
	vrnic_free_srq(srq);
	return 0;
}

int vrnic_post_srq_recv(struct ibv_srq *ibsrq, struct ibv_recv_wr *wr,
			struct ibv_recv_wr **bad_wr)
{
	struct vrnic_srq *srq = to_vsrq(ibsrq);
	struct vrnic_sge *sge;
	uint32_t pi;
	int ret = 0;
	void *wqe;
	int i;

	pthread_spin_lock(&srq->lock);
	pi = srq->pi;
	for (; wr; wr = wr->next) {
		uint8_t *busy = &srq->busy[pi & (srq->depth - 1)];

		/* Acquire, pairing with vrnic_srq_free_slot(): the device
		 * read this slot's old WQE before it wrote the CQE freeing it. */
		if (__atomic_load_n(busy, __ATOMIC_ACQUIRE)) {
			ret = ENOMEM;
			break;
		}
		if (wr->num_sge < 0 || (uint32_t)wr->num_sge > srq->max_sge) {
			ret = EINVAL;
			break;
		}
		wqe = vrnic_srq_wqe(srq, pi);
		vrnic_set_recv_wqe_header(wqe, wr->wr_id, wr->num_sge);
		sge = vrnic_recv_wqe_sges(wqe);
		for (i = 0; i < wr->num_sge; i++)
			vrnic_set_sge(&sge[i], wr->sg_list[i].addr,
				      wr->sg_list[i].length,
				      wr->sg_list[i].lkey);
		__atomic_store_n(busy, 1, __ATOMIC_RELAXED);
		pi++;
	}
	if (ret)
		*bad_wr = wr;
	if (pi != srq->pi) {
		srq->pi = pi;
		/* The WQEs before the producer index that publishes them. */
		udma_to_device_barrier();
		mmio_write32_le(srq->db, htole32(pi));
	}
	pthread_spin_unlock(&srq->lock);
	return ret;
}

/*
 * A CQE naming slot @wqe_index of SRQ @srqn has been consumed (polled, or
 * dropped by a CQ clean): the slot may be posted to again. Called under the
 * CQ lock; takes the SRQ table lock, so the SRQ cannot be freed meanwhile.
 * False, changing nothing, when the CQE cannot be ours: no SRQ @srqn, a
 * slot beyond its depth, or a slot with no WQE out.
 */
bool vrnic_srq_complete(struct vrnic_context *ctx, uint32_t srqn,
			uint16_t wqe_index)
{
	struct vrnic_srq *srq;
	bool ok = false;

	pthread_mutex_lock(&ctx->srq_table_mutex);
	srq = vrnic_table_find(&ctx->srq_table, srqn);
	if (srq && srq->srqn == srqn && wqe_index < srq->depth &&
	    __atomic_load_n(&srq->busy[wqe_index], __ATOMIC_RELAXED)) {
		/* Release: ordered after the acquire load of the CQE's
		 * owner, pairing with post_srq_recv's acquire. */
		__atomic_store_n(&srq->busy[wqe_index], 0, __ATOMIC_RELEASE);
		ok = true;
	}
	pthread_mutex_unlock(&ctx->srq_table_mutex);
	return ok;
}
