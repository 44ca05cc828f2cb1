// SPDX-License-Identifier: GPL-2.0 OR Linux-OpenIB
/*
 * vrnic rdma-core provider: shared receive queues (SPEC "Shared receive
 * queues"). The ring is ours, like a QP's receive ring; its doorbell is one
 * aligned store of the producer index into the SRQ's slot (no flag, no kick:
 * the device reads the slot whenever a QP needs a receive WQE). Slots are
 * tracked because QPs complete SRQ WQEs out of order: post_srq_recv never
 * writes into a slot whose CQE has not been polled yet.
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

struct ibv_srq *vrnic_create_srq(struct ibv_pd *pd,
				 struct ibv_srq_init_attr *attr)
{
	struct vrnic_context *ctx = to_vctx(pd->context);
	struct vrnic_ucmd_create_srq_resp resp = {};
	struct vrnic_ucmd_create_srq cmd = {};
	struct ibv_srq_init_attr kattr;
	struct vrnic_db_map map;
	struct vrnic_srq *srq;
	uint32_t slot;
	int ret;

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

	cmd.drv_payload.buf_addr = htole64((uintptr_t)srq->ring);
	cmd.drv_payload.depth_log2 = vrnic_log2_ceil(srq->depth);
	cmd.drv_payload.wqe_shift = srq->wqe_shift;
	/* The kernel sees the caps the ring was sized for. */
	kattr = *attr;
	kattr.attr.max_wr = srq->depth;
	kattr.attr.max_sge = srq->max_sge;
	ret = ibv_cmd_create_srq(pd, &srq->ibv_srq, &kattr, &cmd.ibv_cmd,
				 sizeof(cmd), &resp.ibv_resp, sizeof(resp));
	if (ret)
		goto err_free;

	slot = le32toh(resp.drv_payload.db_slot);
	ret = vrnic_map_object_slot(ctx, "create_srq", slot,
				    le32toh(resp.drv_payload.db_page),
				    le64toh(resp.drv_payload.db_mmap_key),
				    le64toh(resp.drv_payload.kick_mmap_key),
				    &map);
	if (ret)
		goto err_destroy;
	srq->srqn = le32toh(resp.drv_payload.srqn);
	srq->db = vrnic_db_word(map.db, slot, VRNIC_DB_SRQ_SLOT_PI_OFF);
	/* Nothing posted yet: start the slot from a known state. */
	__atomic_store_n(srq->db, 0, __ATOMIC_RELAXED);
	pthread_spin_init(&srq->lock, PTHREAD_PROCESS_PRIVATE);
	attr->attr.max_wr = srq->depth;
	attr->attr.max_sge = srq->max_sge;
	return &srq->ibv_srq;

err_destroy:
	ibv_cmd_destroy_srq(&srq->ibv_srq);
err_free:
	vrnic_free_srq(srq);
	errno = ret;
	return NULL;
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
 * The QPs using the SRQ are gone (the kernel refuses to destroy it
 * otherwise), so no CQE can free a slot any more.
 */
int vrnic_destroy_srq(struct ibv_srq *ibsrq)
{
	struct vrnic_srq *srq = to_vsrq(ibsrq);
	int ret;

	ret = ibv_cmd_destroy_srq(ibsrq);
	if (ret)
		return ret;
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
 * The CQE naming SRQ slot @wqe_index has been consumed (polled, or dropped
 * by a CQ clean): the slot may be posted to again. Called under the CQ lock.
 * The index is masked, so a bogus one touches only the busy array.
 */
void vrnic_srq_free_slot(struct vrnic_srq *srq, uint16_t wqe_index)
{
	/* Release: ordered after the acquire load of the CQE's owner. */
	__atomic_store_n(&srq->busy[wqe_index & (srq->depth - 1)], 0,
			 __ATOMIC_RELEASE);
}
