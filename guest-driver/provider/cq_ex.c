// SPDX-License-Identifier: GPL-2.0 OR Linux-OpenIB
/*
 * vrnic rdma-core provider: extended CQs (ibv_create_cq_ex and the
 * start_poll/next_poll/end_poll iterator). The iterator is a second front end
 * to poll_cq's decoder (vrnic_cq_next_wc): the current completion is decoded
 * into cq->poll_wc and every read_* returns a field of it, so both APIs
 * report exactly the same values.
 *
 * Locking: start_poll takes cq->lock and end_poll releases it (a failed
 * start_poll releases it itself); the consumer index reaches the device at
 * end_poll.
 */

#include <errno.h>

#include "vrnic.h"

/* Every field a CQE carries; the rest (timestamps, cvlan, flow tag, tag
 * matching) the device does not provide. */
#define VRNIC_CQ_EX_WC_FLAGS IBV_WC_STANDARD_FLAGS

static struct vrnic_cq *to_vcq_ex(struct ibv_cq_ex *ibcq)
{
	return container_of(ibcq, struct vrnic_cq, vcq.cq_ex);
}

static void vrnic_cq_ex_set_current(struct vrnic_cq *cq)
{
	cq->vcq.cq_ex.status = cq->poll_wc.status;
	cq->vcq.cq_ex.wr_id = cq->poll_wc.wr_id;
}

static int vrnic_start_poll(struct ibv_cq_ex *ibcq,
			    struct ibv_poll_cq_attr *attr)
{
	struct vrnic_cq *cq = to_vcq_ex(ibcq);

	if (attr->comp_mask)
		return EINVAL;
	pthread_spin_lock(&cq->lock);
	cq->poll_ci = cq->ci;
	if (!vrnic_cq_next_wc(cq, &cq->poll_ci, &cq->poll_wc)) {
		/* Entries dropped by vrnic_cq_clean may have been passed. */
		vrnic_cq_consumed(cq, cq->poll_ci);
		pthread_spin_unlock(&cq->lock);
		return ENOENT;
	}
	vrnic_cq_ex_set_current(cq);
	return 0;
}

static int vrnic_next_poll(struct ibv_cq_ex *ibcq)
{
	struct vrnic_cq *cq = to_vcq_ex(ibcq);

	if (!vrnic_cq_next_wc(cq, &cq->poll_ci, &cq->poll_wc))
		return ENOENT;
	vrnic_cq_ex_set_current(cq);
	return 0;
}

static void vrnic_end_poll(struct ibv_cq_ex *ibcq)
{
	struct vrnic_cq *cq = to_vcq_ex(ibcq);

	vrnic_cq_consumed(cq, cq->poll_ci);
	pthread_spin_unlock(&cq->lock);
}

static enum ibv_wc_opcode vrnic_read_opcode(struct ibv_cq_ex *ibcq)
{
	return to_vcq_ex(ibcq)->poll_wc.opcode;
}

static uint32_t vrnic_read_vendor_err(struct ibv_cq_ex *ibcq)
{
	return to_vcq_ex(ibcq)->poll_wc.vendor_err;
}

static uint32_t vrnic_read_byte_len(struct ibv_cq_ex *ibcq)
{
	return to_vcq_ex(ibcq)->poll_wc.byte_len;
}

/* Also ibv_wc_read_invalidated_rkey: imm_data and invalidated_rkey share
 * ibv_wc's union, as they share the CQE's imm_data bytes. */
static __be32 vrnic_read_imm_data(struct ibv_cq_ex *ibcq)
{
	return to_vcq_ex(ibcq)->poll_wc.imm_data;
}

static uint32_t vrnic_read_qp_num(struct ibv_cq_ex *ibcq)
{
	return to_vcq_ex(ibcq)->poll_wc.qp_num;
}

static uint32_t vrnic_read_src_qp(struct ibv_cq_ex *ibcq)
{
	return to_vcq_ex(ibcq)->poll_wc.src_qp;
}

static unsigned int vrnic_read_wc_flags(struct ibv_cq_ex *ibcq)
{
	return to_vcq_ex(ibcq)->poll_wc.wc_flags;
}

static uint32_t vrnic_read_slid(struct ibv_cq_ex *ibcq)
{
	return to_vcq_ex(ibcq)->poll_wc.slid;
}

static uint8_t vrnic_read_sl(struct ibv_cq_ex *ibcq)
{
	return to_vcq_ex(ibcq)->poll_wc.sl;
}

static uint8_t vrnic_read_dlid_path_bits(struct ibv_cq_ex *ibcq)
{
	return to_vcq_ex(ibcq)->poll_wc.dlid_path_bits;
}

/* Give a created CQ the poll iterator and the readers of @wc_flags. */
void vrnic_cq_ex_init(struct vrnic_cq *cq, uint64_t wc_flags)
{
	struct ibv_cq_ex *cqx = &cq->vcq.cq_ex;

	cqx->start_poll = vrnic_start_poll;
	cqx->next_poll = vrnic_next_poll;
	cqx->end_poll = vrnic_end_poll;
	cqx->read_opcode = vrnic_read_opcode;
	cqx->read_vendor_err = vrnic_read_vendor_err;
	cqx->read_wc_flags = vrnic_read_wc_flags;
	if (wc_flags & IBV_WC_EX_WITH_BYTE_LEN)
		cqx->read_byte_len = vrnic_read_byte_len;
	if (wc_flags & IBV_WC_EX_WITH_IMM)
		cqx->read_imm_data = vrnic_read_imm_data;
	if (wc_flags & IBV_WC_EX_WITH_QP_NUM)
		cqx->read_qp_num = vrnic_read_qp_num;
	if (wc_flags & IBV_WC_EX_WITH_SRC_QP)
		cqx->read_src_qp = vrnic_read_src_qp;
	if (wc_flags & IBV_WC_EX_WITH_SLID)
		cqx->read_slid = vrnic_read_slid;
	if (wc_flags & IBV_WC_EX_WITH_SL)
		cqx->read_sl = vrnic_read_sl;
	if (wc_flags & IBV_WC_EX_WITH_DLID_PATH_BITS)
		cqx->read_dlid_path_bits = vrnic_read_dlid_path_bits;
}

/*
 * Refused with EOPNOTSUPP: wc_flags the CQE cannot provide, parent domains,
 * and IGNORE_OVERRUN (an overflowing CQ enters the error state, SPEC
 * "Completion queue"). SINGLE_THREADED is a hint; the CQ keeps its lock.
 */
struct ibv_cq_ex *vrnic_create_cq_ex(struct ibv_context *ibctx,
				     struct ibv_cq_init_attr_ex *attr)
{
	struct vrnic_cq *cq;

	if ((attr->wc_flags & ~(uint64_t)VRNIC_CQ_EX_WC_FLAGS) ||
	    (attr->comp_mask & ~IBV_CQ_INIT_ATTR_MASK_FLAGS) ||
	    ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
	     (attr->flags & ~IBV_CREATE_CQ_ATTR_SINGLE_THREADED))) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	cq = vrnic_cq_create(ibctx, attr);
	if (!cq)
		return NULL;
	vrnic_cq_ex_init(cq, attr->wc_flags);
	return &cq->vcq.cq_ex;
}
