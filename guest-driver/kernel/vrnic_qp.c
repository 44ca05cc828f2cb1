// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
/*
 * Queue pairs: RC, UC and UD from user space, whose rings live in the process
 * (the kernel validates the provider's geometry against the device limits
 * and pins them), and, in RoCE mode, RC, UC, UD and the GSI QP from the kernel,
 * with rings in kernel memory (posted to by vrnic_post.c). MODIFY_QP drives
 * the state machine of both.
 *
 * XRC (SPEC "XRC", with CAPS.XRC): an XRC_INI QP is a user QP with a send
 * ring only. An XRC_TGT QP has no rings, no doorbell, no PD and no CQs: ib_core
 * creates it without udata even for a process, since the processes of its
 * XRC domain share it and it may outlive its creator, so it belongs to the
 * kernel context. Only modify, query and destroy reach it; its events go to
 * ib_core's shared-QP handler, which passes them to every process that
 * opened it.
 *
 * The GSI QP is QP1 to ib_core and to peers (ibqp->qp_num = 1) while the
 * device knows it by the QPN it returned, which admin commands and CQEs
 * carry (qp->qpn; dev->qps is keyed by it).
 */
#include <linux/log2.h>
#include <linux/slab.h>

#include "vrnic.h"

/* Attribute masks the device does not implement (it answers BAD_FIELD). */
#define VRNIC_QP_UNSUPPORTED_MASK \
	(IB_QP_ALT_PATH | IB_QP_PATH_MIG_STATE | IB_QP_CAP)

/* The hw-spec QP enums are defined as the verbs values. */
VRNIC_ASSERT_SAME(VRNIC_QP_STATE_RESET, IB_QPS_RESET);
VRNIC_ASSERT_SAME(VRNIC_QP_STATE_INIT, IB_QPS_INIT);
VRNIC_ASSERT_SAME(VRNIC_QP_STATE_RTR, IB_QPS_RTR);
VRNIC_ASSERT_SAME(VRNIC_QP_STATE_RTS, IB_QPS_RTS);
VRNIC_ASSERT_SAME(VRNIC_QP_STATE_SQD, IB_QPS_SQD);
VRNIC_ASSERT_SAME(VRNIC_QP_STATE_SQE, IB_QPS_SQE);
VRNIC_ASSERT_SAME(VRNIC_QP_STATE_ERR, IB_QPS_ERR);
VRNIC_ASSERT_SAME(VRNIC_QP_ATTR_MASK_STATE, IB_QP_STATE);
VRNIC_ASSERT_SAME(VRNIC_QP_ATTR_MASK_CUR_STATE, IB_QP_CUR_STATE);
VRNIC_ASSERT_SAME(VRNIC_QP_ATTR_MASK_EN_SQD_ASYNC_NOTIFY, IB_QP_EN_SQD_ASYNC_NOTIFY);
VRNIC_ASSERT_SAME(VRNIC_QP_ATTR_MASK_ACCESS_FLAGS, IB_QP_ACCESS_FLAGS);
VRNIC_ASSERT_SAME(VRNIC_QP_ATTR_MASK_PKEY_INDEX, IB_QP_PKEY_INDEX);
VRNIC_ASSERT_SAME(VRNIC_QP_ATTR_MASK_PORT, IB_QP_PORT);
VRNIC_ASSERT_SAME(VRNIC_QP_ATTR_MASK_QKEY, IB_QP_QKEY);
VRNIC_ASSERT_SAME(VRNIC_QP_ATTR_MASK_AV, IB_QP_AV);
VRNIC_ASSERT_SAME(VRNIC_QP_ATTR_MASK_PATH_MTU, IB_QP_PATH_MTU);
VRNIC_ASSERT_SAME(VRNIC_QP_ATTR_MASK_TIMEOUT, IB_QP_TIMEOUT);
VRNIC_ASSERT_SAME(VRNIC_QP_ATTR_MASK_RETRY_CNT, IB_QP_RETRY_CNT);
VRNIC_ASSERT_SAME(VRNIC_QP_ATTR_MASK_RNR_RETRY, IB_QP_RNR_RETRY);
VRNIC_ASSERT_SAME(VRNIC_QP_ATTR_MASK_RQ_PSN, IB_QP_RQ_PSN);
VRNIC_ASSERT_SAME(VRNIC_QP_ATTR_MASK_MAX_QP_RD_ATOMIC, IB_QP_MAX_QP_RD_ATOMIC);
VRNIC_ASSERT_SAME(VRNIC_QP_ATTR_MASK_ALT_PATH, IB_QP_ALT_PATH);
VRNIC_ASSERT_SAME(VRNIC_QP_ATTR_MASK_MIN_RNR_TIMER, IB_QP_MIN_RNR_TIMER);
VRNIC_ASSERT_SAME(VRNIC_QP_ATTR_MASK_SQ_PSN, IB_QP_SQ_PSN);
VRNIC_ASSERT_SAME(VRNIC_QP_ATTR_MASK_MAX_DEST_RD_ATOMIC, IB_QP_MAX_DEST_RD_ATOMIC);
VRNIC_ASSERT_SAME(VRNIC_QP_ATTR_MASK_PATH_MIG_STATE, IB_QP_PATH_MIG_STATE);
VRNIC_ASSERT_SAME(VRNIC_QP_ATTR_MASK_CAP, IB_QP_CAP);
VRNIC_ASSERT_SAME(VRNIC_QP_ATTR_MASK_DEST_QPN, IB_QP_DEST_QPN);
/* ... and cover exactly the standard verbs attribute bits. */
VRNIC_ASSERT_SAME((VRNIC_QP_ATTR_MASK_DEST_QPN << 1) - 1, IB_QP_ATTR_STANDARD_BITS);

/* Called from the async EQ interrupt handler (hard IRQ), also for kernel QPs. */
void vrnic_qp_event(struct vrnic_dev *dev, u32 qpn, enum ib_event_type type)
{
	struct vrnic_qp *qp = NULL;
	struct ib_qp *ibqp;

	if (qpn >= VRNIC_QPN_MIN && qpn <= VRNIC_QPN_MAX)
		qp = xa_load(&dev->qps, qpn);
	if (!qp) {
		dev_dbg(&dev->pdev->dev, "event %d for unknown QP %u\n", type, qpn);
		return;
	}
	ibqp = &qp->ibqp;

	/*
	 * An error event means the device moved the QP to ERR, but qp->state
	 * is left alone: the event may be handled after a later modify (to
	 * RESET, say) has returned, and would then undo it. A stale RTS only
	 * lets through transitions the device itself refuses, since every
	 * move out of ERR (to RESET or ERR) is also valid from RTS.
	 */
	if (ibqp->event_handler) {
		struct ib_event event = {
			.device = ibqp->device,
			.event = type,
			.element.qp = ibqp,
		};

		ibqp->event_handler(&event, ibqp->qp_context);
	}
}

/*
 * With an SRQ, and for XRC_INI, the QP has no receive queue: the provider
 * sends a zero receive geometry and the receive caps are ignored (ib_core
 * reports 0).
 */
static int vrnic_qp_check_recv_geometry(const struct vrnic_limits *lim,
					struct ib_qp_cap *cap,
					const struct vrnic_create_qp_cmd *cmd,
					struct vrnic_create_qp_params *p,
					bool no_rq)
{
	if (no_rq) {
		if (cmd->rq_depth_log2 || cmd->rq_wqe_shift || cmd->rq_buf_addr)
			return -EINVAL;
		cap->max_recv_wr = 0;
		cap->max_recv_sge = 0;
		p->max_recv_sge = 0;
		return 0;
	}
	if (cap->max_recv_wr > lim->max_qp_wr || cap->max_recv_sge > lim->max_sge ||
	    cmd->rq_depth_log2 < 1 || cmd->rq_depth_log2 > ilog2(lim->max_qp_wr) ||
	    (1U << cmd->rq_depth_log2) < cap->max_recv_wr ||
	    cmd->rq_wqe_shift < VRNIC_RECV_WQE_SHIFT_MIN ||
	    cmd->rq_wqe_shift > VRNIC_RECV_WQE_SHIFT_MAX)
		return -EINVAL;
	/* The device wants at least one SGE per WQE; lim->max_sge <= U8_MAX. */
	p->max_recv_sge = max_t(u32, cap->max_recv_sge, 1);
	/* All operands are small (checked above): no overflow. */
	if (VRNIC_RECV_WQE_HEADER_SIZE + p->max_recv_sge * VRNIC_SGE_SIZE >
	    (1U << cmd->rq_wqe_shift))
		return -EINVAL;
	p->rq_depth_log2 = cmd->rq_depth_log2;
	p->rq_wqe_shift = cmd->rq_wqe_shift;
	return 0;
}

/* Where the SGEs or inline data of a send WQE of @qp_type start. */
static u32 vrnic_send_payload_offset(u8 qp_type)
{
	switch (qp_type) {
	case VRNIC_QP_TYPE_UD:
	case VRNIC_QP_TYPE_GSI:
		return VRNIC_UD_PAYLOAD_OFFSET;
	case VRNIC_QP_TYPE_XRC_INI:
		return VRNIC_XRC_PAYLOAD_OFFSET;
	default:
		return VRNIC_SEND_WQE_HEADER_SIZE;
	}
}

/* The smallest send WQE of @qp_type (log2). */
static u32 vrnic_send_wqe_shift_min(u8 qp_type)
{
	switch (qp_type) {
	case VRNIC_QP_TYPE_UD:
	case VRNIC_QP_TYPE_GSI:
		return VRNIC_UD_SEND_WQE_SHIFT_MIN;
	case VRNIC_QP_TYPE_XRC_INI:
		return VRNIC_XRC_SEND_WQE_SHIFT_MIN;
	default:
		return VRNIC_SEND_WQE_SHIFT_MIN;
	}
}

/*
 * Check the provider's ring geometry against the verbs caps and the device.
 * @no_rq: a QP with an SRQ, or XRC_INI: no receive queue of its own.
 */
static int vrnic_qp_check_geometry(struct vrnic_dev *dev,
				   struct ib_qp_cap *cap,
				   const struct vrnic_create_qp_cmd *cmd,
				   struct vrnic_create_qp_params *p,
				   bool no_rq)
{
	const struct vrnic_limits *lim = &dev->lim;
	u32 max_depth_log2 = ilog2(lim->max_qp_wr);
	u32 send_bytes;
	int err;

	if (cap->max_send_wr > lim->max_qp_wr || cap->max_send_sge > lim->max_sge ||
	    cap->max_inline_data > lim->max_inline)
		return -EINVAL;

	if (cmd->sq_depth_log2 < 1 || cmd->sq_depth_log2 > max_depth_log2 ||
	    (1U << cmd->sq_depth_log2) < cap->max_send_wr)
		return -EINVAL;

	if (cmd->sq_wqe_shift < VRNIC_SEND_WQE_SHIFT_MIN ||
	    cmd->sq_wqe_shift > VRNIC_SEND_WQE_SHIFT_MAX)
		return -EINVAL;
	err = vrnic_qp_check_recv_geometry(lim, cap, cmd, p, no_rq);
	if (err)
		return err;

	/* cmd->max_inline is what the send WQE size was chosen for. */
	p->max_inline = le32_to_cpu(cmd->max_inline);
	if (p->max_inline < cap->max_inline_data || p->max_inline > lim->max_inline)
		return -EINVAL;

	/* The device wants at least one SGE per WQE; lim->max_sge <= U8_MAX. */
	p->max_send_sge = max_t(u32, cap->max_send_sge, 1);

	/* All operands are small (checked above): no overflow. */
	send_bytes = vrnic_send_payload_offset(p->qp_type) +
		     max_t(u32, p->max_send_sge * VRNIC_SGE_SIZE, p->max_inline);
	if (send_bytes > (1U << cmd->sq_wqe_shift) ||
	    cmd->sq_wqe_shift < vrnic_send_wqe_shift_min(p->qp_type))
		return -EINVAL;

	p->sq_depth_log2 = cmd->sq_depth_log2;
	p->sq_wqe_shift = cmd->sq_wqe_shift;
	return 0;
}

/* A QP taking its receives from @srq (already checked to be a vrnic SRQ). */
static void vrnic_qp_use_srq(struct vrnic_create_qp_params *p,
			     struct ib_srq *srq)
{
	if (srq) {
		p->flags = VRNIC_QP_FLAG_SRQ;
		p->srqn = to_vsrq(srq)->srqn;
	}
}

static struct ib_umem *vrnic_qp_pin_ring(struct ib_device *ibdev, u64 addr,
					 unsigned int size_log2)
{
	if (!PAGE_ALIGNED(addr))
		return ERR_PTR(-EINVAL);
	/* Pinned writable so the pages are never shared copy-on-write. */
	return ib_umem_get(ibdev, addr, (size_t)1 << size_log2,
			   IB_ACCESS_LOCAL_WRITE);
}

/* Register a created QP for events and CQEs (erased again by destroy). */
static int vrnic_qp_insert(struct vrnic_dev *dev, struct vrnic_qp *qp)
{
	int err;

	if (qp->qpn < VRNIC_QPN_MIN || qp->qpn > VRNIC_QPN_MAX ||
	    qp->db.slot >= VRNIC_DB_SLOTS_PER_PAGE) {
		dev_err(&dev->pdev->dev, "CREATE_QP returned QPN %u slot %u\n",
			qp->qpn, qp->db.slot);
		goto bad;
	}
	err = xa_insert_irq(&dev->qps, qp->qpn, qp, GFP_KERNEL);
	if (err) {
		dev_err(&dev->pdev->dev, "CREATE_QP returned QPN %u in use\n",
			qp->qpn);
		goto bad;
	}
	return 0;

bad:
	/*
	 * The QPN the device gave is not its new QP's (or of another QP):
	 * destroying it could destroy someone else's QP, and the new one is
	 * unknown. Reset the device (destroys then fail at once, harmlessly).
	 */
	vrnic_aq_mark_dead(dev, "invalid CREATE_QP result");
	return -EIO;
	return 0;
}

/* A kernel queue: depth and SGEs from @wr and @sge, WQEs of @hdr + SGEs. */
static int vrnic_wq_setup(struct vrnic_dev *dev, struct vrnic_wq *wq,
			  u32 *wr, u32 *sge, u32 hdr, u32 min_shift,
			  u8 *depth_log2, u8 *wqe_shift)
{
	const struct vrnic_limits *lim = &dev->lim;

	if (*wr > lim->max_qp_wr || *sge > lim->max_sge)
		return -EINVAL;
	spin_lock_init(&wq->lock);
	wq->depth_log2 = order_base_2(max_t(u32, *wr, 2));
	/* The device wants at least one SGE per WQE. */
	wq->max_sge = max_t(u32, *sge, 1);
	*depth_log2 = wq->depth_log2;
	*wqe_shift = max_t(u32, order_base_2(hdr + wq->max_sge * VRNIC_SGE_SIZE),
			   min_shift);
	*wr = 1U << wq->depth_log2;
	*sge = wq->max_sge;
	return vrnic_kring_alloc(dev, &wq->ring, wq->depth_log2, *wqe_shift);
}

static int vrnic_qp_type(struct vrnic_dev *dev, enum ib_qp_type type, u8 *out)
{
	switch (type) {
	case IB_QPT_RC:
		*out = VRNIC_QP_TYPE_RC;
		return 0;
	case IB_QPT_UC:
		*out = VRNIC_QP_TYPE_UC;
		return vrnic_has_cap(dev, VRNIC_BAR0_CAPS_UC_MASK) ? 0 : -EOPNOTSUPP;
	case IB_QPT_UD:
		*out = VRNIC_QP_TYPE_UD;
		return 0;
	case IB_QPT_GSI:
		/* The device has one, in RoCE mode (IB mode has no SA). */
		*out = VRNIC_QP_TYPE_GSI;
		return dev->roce ? 0 : -EOPNOTSUPP;
	case IB_QPT_XRC_INI:
		*out = VRNIC_QP_TYPE_XRC_INI;
		return dev->lim.max_xrcd ? 0 : -EOPNOTSUPP;
	default:
		return -EOPNOTSUPP;
	}
}

/* RoCE mode: a QP of ib_mad (GSI), ib_cm/rdma_cm users or other ULPs. */
static int vrnic_create_kernel_qp(struct vrnic_dev *dev, struct vrnic_qp *qp,
				  struct ib_qp_init_attr *init_attr)
{
	struct ib_qp_cap *cap = &init_attr->cap;
	struct vrnic_create_qp_params p = {};
	struct vrnic_pbl sq_pbl, rq_pbl;
	int err;

	/* No inline data: kernel ULPs send from DMA-mapped buffers. */
	if (cap->max_inline_data)
		return -EINVAL;
	/* No kernel ULP uses XRC: kernel XRC_INI QPs are not offered. */
	if (init_attr->qp_type == IB_QPT_XRC_INI)
		return -EOPNOTSUPP;
	err = vrnic_qp_type(dev, init_attr->qp_type, &p.qp_type);
	if (err)
		return err;
	qp->kernel = true;
	qp->datagram = p.qp_type == VRNIC_QP_TYPE_UD ||
		       p.qp_type == VRNIC_QP_TYPE_GSI;
	err = vrnic_wq_setup(dev, &qp->sq, &cap->max_send_wr, &cap->max_send_sge,
			     vrnic_send_payload_offset(p.qp_type),
			     vrnic_send_wqe_shift_min(p.qp_type),
			     &p.sq_depth_log2, &p.sq_wqe_shift);
	if (err)
		goto err_free;
	if (init_attr->srq) {
		/* No receive queue: qp->rq and its ring stay zeroed. */
		cap->max_recv_wr = 0;
		cap->max_recv_sge = 0;
		vrnic_qp_use_srq(&p, init_attr->srq);
	} else {
		err = vrnic_wq_setup(dev, &qp->rq, &cap->max_recv_wr,
				     &cap->max_recv_sge,
				     VRNIC_RECV_WQE_HEADER_SIZE,
				     VRNIC_RECV_WQE_SHIFT_MIN,
				     &p.rq_depth_log2, &p.rq_wqe_shift);
		if (err)
			goto err_free;
	}

	p.uctx = VRNIC_KERNEL_UCTX;
	p.pdn = to_vpd(qp->ibqp.pd)->pdn;
	p.send_cqn = to_vcq(init_attr->send_cq)->cqn;
	p.recv_cqn = to_vcq(init_attr->recv_cq)->cqn;
	p.max_send_sge = qp->sq.max_sge;
	p.max_recv_sge = qp->rq.max_sge;
	err = vrnic_kring_pbl(dev, &qp->sq.ring, &sq_pbl);
	if (err)
		goto err_free;
	memset(&rq_pbl, 0, sizeof(rq_pbl));
	err = init_attr->srq ? 0 : vrnic_kring_pbl(dev, &qp->rq.ring, &rq_pbl);
	if (err) {
		vrnic_pbl_free(dev, &sq_pbl);
		goto err_free;
	}
	p.sq_ring = sq_pbl.desc;
	p.rq_ring = rq_pbl.desc;
	err = vrnic_cmd_create_qp(dev, &p, &qp->qpn, &qp->db);
	vrnic_pbl_free(dev, &rq_pbl);
	vrnic_pbl_free(dev, &sq_pbl);
	if (err)
		goto err_free;

	qp->kdb = vrnic_kdb_get(dev, qp->db.page);
	if (IS_ERR(qp->kdb)) {
		err = PTR_ERR(qp->kdb);
		goto err_destroy;
	}
	err = vrnic_qp_insert(dev, qp);
	if (err)
		goto err_destroy;
	qp->ibqp.qp_num = init_attr->qp_type == IB_QPT_GSI ? VRNIC_GSI_QPN :
							      qp->qpn;
	cap->max_inline_data = 0;
	qp->cap = *cap;
	ibdev_dbg(&dev->ibdev,
		  "kernel QP %u (type %u) page %u slot %u sq %u x %u B, rq %u x %u B\n",
		  qp->qpn, p.qp_type, qp->db.page, qp->db.slot,
		  1U << p.sq_depth_log2, 1U << p.sq_wqe_shift,
		  1U << p.rq_depth_log2, 1U << p.rq_wqe_shift);
	return 0;

err_destroy:
	if (vrnic_cmd_destroy_qp(dev, qp->uctx, qp->qpn) && !vrnic_is_dead(dev)) {
		dev_err(&dev->pdev->dev,
			"DESTROY_QP %u failed: leaking its rings\n", qp->qpn);
		return err;
	}
err_free:
	vrnic_kring_free(dev, &qp->rq.ring);
	vrnic_kring_free(dev, &qp->sq.ring);
	return err;
}

/* An XRC_TGT QP: the kernel context's, with no rings (see the top). */
static int vrnic_create_xrc_tgt_qp(struct vrnic_dev *dev, struct vrnic_qp *qp,
				   struct ib_qp_init_attr *init_attr)
{
	struct vrnic_create_qp_params p = {
		.qp_type = VRNIC_QP_TYPE_XRC_TGT,
		.uctx = VRNIC_KERNEL_UCTX,
	};
	int err;

	if (!dev->lim.max_xrcd)
		return -EOPNOTSUPP;
	if (!init_attr->xrcd || init_attr->srq)
		return -EINVAL;
	p.xrcdn = to_vxrcd(init_attr->xrcd)->xrcdn;
	qp->uctx = VRNIC_KERNEL_UCTX;
	err = vrnic_cmd_create_qp(dev, &p, &qp->qpn, &qp->db);
	if (err)
		return err;
	err = vrnic_qp_insert(dev, qp);
	if (err) {
		/* No memory of ours behind it: nothing to keep on failure. */
		vrnic_cmd_destroy_qp(dev, qp->uctx, qp->qpn);
		return err;
	}
	qp->ibqp.qp_num = qp->qpn;
	memset(&init_attr->cap, 0, sizeof(init_attr->cap));
	ibdev_dbg(&dev->ibdev, "XRC_TGT QP %u in XRCD %u\n", qp->qpn, p.xrcdn);
	return 0;
}

int vrnic_create_qp(struct ib_qp *ibqp, struct ib_qp_init_attr *init_attr,
		    struct ib_udata *udata)
{
	struct vrnic_dev *dev = to_vdev(ibqp->device);
	struct vrnic_qp *qp = to_vqp(ibqp);
	struct vrnic_create_qp_params p = {};
	struct vrnic_create_qp_resp resp = {};
	struct vrnic_create_qp_cmd cmd;
	struct vrnic_pbl sq_pbl, rq_pbl;
	u64 db_key, kick_key;
	bool no_rq;
	int err;

	if (init_attr->create_flags || init_attr->rwq_ind_tbl)
		return -EOPNOTSUPP;
	if (init_attr->qp_type != IB_QPT_XRC_TGT &&
	    (!init_attr->send_cq ||
	     (!init_attr->recv_cq && init_attr->qp_type != IB_QPT_XRC_INI)))
		return -EINVAL;
	/* GSI and XRC_INI QPs cannot use an SRQ (SPEC cmd_create_qp). */
	if (init_attr->srq && (init_attr->qp_type == IB_QPT_GSI ||
			       init_attr->qp_type == IB_QPT_XRC_INI))
		return -EINVAL;

	mutex_init(&qp->lock);
	qp->state = IB_QPS_RESET;
	qp->sq_sig_type = init_attr->sq_sig_type;
	if (init_attr->qp_type == IB_QPT_XRC_TGT) {
		err = vrnic_create_xrc_tgt_qp(dev, qp, init_attr);
		if (err)
			mutex_destroy(&qp->lock);
		return err;
	}
	if (!udata) {
		/* Kernel QPs need the kernel data path: RoCE mode only. */
		err = dev->roce ? vrnic_create_kernel_qp(dev, qp, init_attr) :
				  -EOPNOTSUPP;
		if (err)
			mutex_destroy(&qp->lock);
		return err;
	}
	if (init_attr->qp_type == IB_QPT_GSI) {
		err = -EOPNOTSUPP;
		goto err_mutex;
	}
	err = vrnic_qp_type(dev, init_attr->qp_type, &p.qp_type);
	if (err)
		goto err_mutex;

	err = vrnic_copy_cmd_from_udata(&cmd, sizeof(cmd),
					offsetofend(struct vrnic_create_qp_cmd,
						    max_inline),
					udata);
	if (err)
		goto err_mutex;
	if (memchr_inv(cmd.reserved0, 0, sizeof(cmd.reserved0))) {
		err = -EINVAL;
		goto err_mutex;
	}
	no_rq = init_attr->srq || p.qp_type == VRNIC_QP_TYPE_XRC_INI;
	err = vrnic_qp_check_geometry(dev, &init_attr->cap, &cmd, &p, no_rq);
	if (err)
		goto err_mutex;
	vrnic_qp_use_srq(&p, init_attr->srq);

	qp->uctx = vrnic_udata_uctx(udata);
	p.uctx = qp->uctx;
	p.pdn = to_vpd(ibqp->pd)->pdn;
	p.send_cqn = to_vcq(init_attr->send_cq)->cqn;
	/* XRC_INI: no receive CQ (ib_core passes none). */
	if (p.qp_type != VRNIC_QP_TYPE_XRC_INI)
		p.recv_cqn = to_vcq(init_attr->recv_cq)->cqn;

	qp->sq_umem = vrnic_qp_pin_ring(ibqp->device, le64_to_cpu(cmd.sq_buf_addr),
					p.sq_depth_log2 + p.sq_wqe_shift);
	if (IS_ERR(qp->sq_umem)) {
		err = PTR_ERR(qp->sq_umem);
		goto err_mutex;
	}
	if (!no_rq) {
		qp->rq_umem = vrnic_qp_pin_ring(ibqp->device,
						le64_to_cpu(cmd.rq_buf_addr),
						p.rq_depth_log2 + p.rq_wqe_shift);
		if (IS_ERR(qp->rq_umem)) {
			err = PTR_ERR(qp->rq_umem);
			qp->rq_umem = NULL;
			goto err_release_sq;
		}
	}

	err = vrnic_pbl_from_umem(dev, &sq_pbl, qp->sq_umem, PAGE_SIZE);
	if (err)
		goto err_release_rq;
	memset(&rq_pbl, 0, sizeof(rq_pbl));
	err = qp->rq_umem ? vrnic_pbl_from_umem(dev, &rq_pbl, qp->rq_umem,
						PAGE_SIZE) : 0;
	if (err) {
		vrnic_pbl_free(dev, &sq_pbl);
		goto err_release_rq;
	}
	p.sq_ring = sq_pbl.desc;
	p.rq_ring = rq_pbl.desc;
	err = vrnic_cmd_create_qp(dev, &p, &qp->qpn, &qp->db);
	vrnic_pbl_free(dev, &rq_pbl);
	vrnic_pbl_free(dev, &sq_pbl);
	if (err)
		goto err_release_rq;

	err = vrnic_uctx_db_page(udata, &qp->db, &db_key, &kick_key);
	if (err)
		goto err_destroy;
	err = vrnic_qp_insert(dev, qp);
	if (err)
		goto err_destroy;
	ibqp->qp_num = qp->qpn;

	/* Report what was actually created. */
	init_attr->cap.max_send_wr = 1U << p.sq_depth_log2;
	init_attr->cap.max_recv_wr = no_rq ? 0 : 1U << p.rq_depth_log2;
	init_attr->cap.max_send_sge = p.max_send_sge;
	init_attr->cap.max_recv_sge = p.max_recv_sge;
	init_attr->cap.max_inline_data = p.max_inline;
	qp->cap = init_attr->cap;

	resp.qpn = cpu_to_le32(qp->qpn);
	resp.db_slot = cpu_to_le32(qp->db.slot);
	resp.db_page = cpu_to_le32(qp->db.page);
	resp.db_mmap_key = cpu_to_le64(db_key);
	resp.kick_mmap_key = cpu_to_le64(kick_key);
	err = vrnic_copy_resp_to_udata(udata, &resp, sizeof(resp));
	if (err)
		goto err_erase;

	ibdev_dbg(&dev->ibdev,
		  "uctx %u: QP %u page %u slot %u sq %u x %u B, rq %u x %u B\n",
		  qp->uctx, qp->qpn, qp->db.page, qp->db.slot,
		  1U << p.sq_depth_log2,
		  1U << p.sq_wqe_shift, 1U << p.rq_depth_log2,
		  1U << p.rq_wqe_shift);
	return 0;

err_erase:
	xa_erase_irq(&dev->qps, qp->qpn);
	vrnic_eq_sync_irq(&dev->async_eq);	/* QP events: async EQ only */
err_destroy:
	if (vrnic_cmd_destroy_qp(dev, qp->uctx, qp->qpn) && !vrnic_is_dead(dev)) {
		dev_err(&dev->pdev->dev,
			"DESTROY_QP %u failed: leaking its pinned rings\n", qp->qpn);
		goto err_mutex;
	}
err_release_rq:
	ib_umem_release(qp->rq_umem);
err_release_sq:
	ib_umem_release(qp->sq_umem);
err_mutex:
	mutex_destroy(&qp->lock);
	return err;
}

/*
 * The AV of a connected QP. RoCE: the GRH names the peer (the device routes
 * by dgid and checks sgid_index) and ah->roce.dmac is the MAC ib_core
 * resolved through the neighbour table; IB: the LID. The dlid field shares
 * its storage with the RoCE dmac, so it is read for IB AVs only.
 */
static void vrnic_qp_attr_av(const struct rdma_ah_attr *ah,
			     struct vrnic_qp_attr *va)
{
	if (ah->type == RDMA_AH_ATTR_TYPE_IB) {
		va->dlid = cpu_to_le16(rdma_ah_get_dlid(ah));
		va->src_path_bits = rdma_ah_get_path_bits(ah);
	}
	va->sl = rdma_ah_get_sl(ah);
	va->static_rate = rdma_ah_get_static_rate(ah);
	if (rdma_ah_get_ah_flags(ah) & IB_AH_GRH) {
		const struct ib_global_route *grh = rdma_ah_read_grh(ah);

		va->is_global = 1;
		va->sgid_index = grh->sgid_index;
		memcpy(va->dgid, grh->dgid.raw, sizeof(va->dgid));
		va->flow_label = cpu_to_le32(grh->flow_label);
		va->hop_limit = grh->hop_limit;
		va->traffic_class = grh->traffic_class;
	}
}

/* Fill only the fields named by @mask; everything else stays zero. */
static int vrnic_qp_attr_from_ib(const struct ib_qp_attr *attr, int mask,
				 struct vrnic_qp_attr *va)
{
	memset(va, 0, sizeof(*va));
	if (mask & IB_QP_STATE)
		va->qp_state = attr->qp_state;
	if (mask & IB_QP_CUR_STATE)
		va->cur_qp_state = attr->cur_qp_state;
	if (mask & IB_QP_EN_SQD_ASYNC_NOTIFY)
		va->en_sqd_async_notify = attr->en_sqd_async_notify;
	if (mask & IB_QP_ACCESS_FLAGS) {
		/*
		 * FLUSH rights are accepted and dropped: the device executes
		 * no FLUSH, so none can arrive (rdma-core's test_qpex asks for
		 * them on every RC QP, with no capability bit to check).
		 */
		if (attr->qp_access_flags & ~(VRNIC_ACCESS_SUPPORTED_MASK |
					      IB_ACCESS_FLUSH_GLOBAL |
					      IB_ACCESS_FLUSH_PERSISTENT))
			return -EINVAL;
		va->qp_access_flags = cpu_to_le32(attr->qp_access_flags &
						  VRNIC_ACCESS_SUPPORTED_MASK);
	}
	if (mask & IB_QP_PKEY_INDEX)
		va->pkey_index = cpu_to_le16(attr->pkey_index);
	if (mask & IB_QP_PORT) {
		if (attr->port_num != VRNIC_PORT_NUM)
			return -EINVAL;
		va->port_num = attr->port_num;
	}
	if (mask & IB_QP_QKEY)
		va->qkey = cpu_to_le32(attr->qkey);
	if (mask & IB_QP_AV)
		vrnic_qp_attr_av(&attr->ah_attr, va);
	if (mask & IB_QP_PATH_MTU)
		va->path_mtu = attr->path_mtu;
	if (mask & IB_QP_TIMEOUT)
		va->timeout = attr->timeout;
	if (mask & IB_QP_RETRY_CNT)
		va->retry_cnt = attr->retry_cnt;
	if (mask & IB_QP_RNR_RETRY)
		va->rnr_retry = attr->rnr_retry;
	if (mask & IB_QP_RQ_PSN)
		va->rq_psn = cpu_to_le32(attr->rq_psn);
	if (mask & IB_QP_MAX_QP_RD_ATOMIC)
		va->max_rd_atomic = attr->max_rd_atomic;
	if (mask & IB_QP_MIN_RNR_TIMER)
		va->min_rnr_timer = attr->min_rnr_timer;
	if (mask & IB_QP_SQ_PSN)
		va->sq_psn = cpu_to_le32(attr->sq_psn);
	if (mask & IB_QP_MAX_DEST_RD_ATOMIC)
		va->max_dest_rd_atomic = attr->max_dest_rd_atomic;
	if (mask & IB_QP_DEST_QPN)
		va->dest_qp_num = cpu_to_le32(attr->dest_qp_num);
	return 0;
}

static void vrnic_wq_reset(struct vrnic_wq *wq)
{
	unsigned long flags;

	spin_lock_irqsave(&wq->lock, flags);
	wq->pi = 0;
	WRITE_ONCE(wq->ci, 0);
	spin_unlock_irqrestore(&wq->lock, flags);
}

int vrnic_modify_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr, int attr_mask,
		    struct ib_udata *udata)
{
	struct vrnic_dev *dev = to_vdev(ibqp->device);
	struct vrnic_qp *qp = to_vqp(ibqp);
	enum ib_qp_state cur, next;
	struct vrnic_qp_attr va;
	const u8 *dmac = NULL;
	int err;

	if (attr_mask & ~IB_QP_ATTR_STANDARD_BITS)
		return -EOPNOTSUPP;
	if (attr_mask & VRNIC_QP_UNSUPPORTED_MASK)
		return -EOPNOTSUPP;
	if (udata && udata->inlen &&
	    !ib_is_udata_cleared(udata, 0, udata->inlen))
		return -EOPNOTSUPP;

	mutex_lock(&qp->lock);
	cur = (attr_mask & IB_QP_CUR_STATE) ? attr->cur_qp_state :
					      READ_ONCE(qp->state);
	next = (attr_mask & IB_QP_STATE) ? attr->qp_state : cur;
	if (!vrnic_modify_qp_is_ok(cur, next, ibqp->qp_type, attr_mask)) {
		ibdev_dbg(&dev->ibdev, "QP %u: invalid transition %d -> %d mask %#x\n",
			  qp->qpn, cur, next, attr_mask);
		err = -EINVAL;
		goto out_unlock;
	}

	err = vrnic_qp_attr_from_ib(attr, attr_mask, &va);
	if (err)
		goto out_unlock;
	if ((attr_mask & IB_QP_AV) && attr->ah_attr.type == RDMA_AH_ATTR_TYPE_ROCE)
		dmac = attr->ah_attr.roce.dmac;
	err = vrnic_cmd_modify_qp(dev, qp->uctx, qp->qpn, attr_mask, &va, dmac);
	if (err)
		goto out_unlock;
	if (dmac)
		ether_addr_copy(qp->dmac, dmac);
	if (attr_mask & IB_QP_STATE)
		WRITE_ONCE(qp->state, next);
	/*
	 * RESET forgot every WQE and zeroed the doorbell slot: the QP's CQEs
	 * not yet polled belong to WQEs that are gone.
	 */
	if (qp->kernel && (attr_mask & IB_QP_STATE) && next == IB_QPS_RESET) {
		vrnic_cq_clean(ibqp->send_cq, qp);
		if (ibqp->recv_cq != ibqp->send_cq)
			vrnic_cq_clean(ibqp->recv_cq, qp);
		vrnic_wq_reset(&qp->sq);
		vrnic_wq_reset(&qp->rq);
	}
	ibdev_dbg(&dev->ibdev, "QP %u: %d -> %d mask %#x\n", qp->qpn, cur, next,
		  attr_mask);

out_unlock:
	mutex_unlock(&qp->lock);
	return err;
}

static void vrnic_qp_attr_to_ib(const struct vrnic_qp *qp,
				const struct vrnic_qp_attr *va,
				struct ib_qp_attr *attr)
{
	struct rdma_ah_attr *ah = &attr->ah_attr;

	attr->qp_state = va->qp_state;
	attr->cur_qp_state = va->qp_state;
	attr->path_mtu = va->path_mtu;
	attr->timeout = va->timeout;
	attr->retry_cnt = va->retry_cnt;
	attr->rnr_retry = va->rnr_retry;
	attr->min_rnr_timer = va->min_rnr_timer;
	attr->max_rd_atomic = va->max_rd_atomic;
	attr->max_dest_rd_atomic = va->max_dest_rd_atomic;
	attr->port_num = va->port_num;
	attr->sq_draining = !!va->sq_draining;
	attr->en_sqd_async_notify = va->en_sqd_async_notify;
	attr->qp_access_flags = le32_to_cpu(va->qp_access_flags) &
				VRNIC_ACCESS_SUPPORTED_MASK;
	attr->dest_qp_num = le32_to_cpu(va->dest_qp_num) & VRNIC_QPN_MAX;
	attr->rq_psn = le32_to_cpu(va->rq_psn) & 0xffffff;
	attr->sq_psn = le32_to_cpu(va->sq_psn) & 0xffffff;
	attr->qkey = le32_to_cpu(va->qkey);
	attr->pkey_index = le16_to_cpu(va->pkey_index);

	if (to_vdev(qp->ibqp.device)->roce) {
		ah->type = RDMA_AH_ATTR_TYPE_ROCE;
		ether_addr_copy(ah->roce.dmac, qp->dmac);
	} else {
		ah->type = RDMA_AH_ATTR_TYPE_IB;
		rdma_ah_set_dlid(ah, le16_to_cpu(va->dlid));
		rdma_ah_set_path_bits(ah, va->src_path_bits);
	}
	rdma_ah_set_port_num(ah, VRNIC_PORT_NUM);
	rdma_ah_set_sl(ah, va->sl & 0xf);
	rdma_ah_set_static_rate(ah, va->static_rate);
	if (va->is_global) {
		union ib_gid dgid;

		memcpy(dgid.raw, va->dgid, sizeof(dgid.raw));
		rdma_ah_set_grh(ah, &dgid, le32_to_cpu(va->flow_label) & 0xfffff,
				va->sgid_index, va->hop_limit, va->traffic_class);
	}
}

int vrnic_query_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr, int attr_mask,
		   struct ib_qp_init_attr *init_attr)
{
	struct vrnic_dev *dev = to_vdev(ibqp->device);
	struct vrnic_qp *qp = to_vqp(ibqp);
	struct vrnic_qp_attr va;
	int err;

	mutex_lock(&qp->lock);
	err = vrnic_cmd_query_qp(dev, qp->uctx, qp->qpn, &va);
	if (err)
		goto out_unlock;
	/* Never pass on values the device should not produce. */
	if (va.qp_state > VRNIC_QP_STATE_ERR ||
	    (va.path_mtu && (va.path_mtu < VRNIC_MTU_SIZE_256 ||
			     va.path_mtu > VRNIC_MTU_SIZE_4096))) {
		dev_warn_ratelimited(&dev->pdev->dev,
				     "QUERY_QP %u: bad state %u or mtu %u\n",
				     qp->qpn, va.qp_state, va.path_mtu);
		err = -EIO;
		goto out_unlock;
	}
	WRITE_ONCE(qp->state, va.qp_state);

	memset(attr, 0, sizeof(*attr));
	vrnic_qp_attr_to_ib(qp, &va, attr);
	attr->cap = qp->cap;

	memset(init_attr, 0, sizeof(*init_attr));
	init_attr->qp_type = ibqp->qp_type;
	init_attr->send_cq = ibqp->send_cq;
	init_attr->recv_cq = ibqp->recv_cq;
	init_attr->srq = ibqp->srq;
	init_attr->xrcd = ibqp->xrcd;
	init_attr->cap = qp->cap;
	init_attr->sq_sig_type = qp->sq_sig_type;
	init_attr->port_num = VRNIC_PORT_NUM;

out_unlock:
	mutex_unlock(&qp->lock);
	return err;
}

/* Wait for a poller of a kernel CQ that may hold a QP it looked up. */
static void vrnic_cq_fence(struct ib_cq *ibcq)
{
	struct vrnic_cq *cq = to_vcq(ibcq);
	unsigned long flags;

	spin_lock_irqsave(&cq->lock, flags);
	spin_unlock_irqrestore(&cq->lock, flags);
}

int vrnic_destroy_qp(struct ib_qp *ibqp, struct ib_udata *udata)
{
	struct vrnic_dev *dev = to_vdev(ibqp->device);
	struct vrnic_qp *qp = to_vqp(ibqp);
	int err;

	/* After this no EQ handler can find the QP or still be using it. */
	xa_erase_irq(&dev->qps, qp->qpn);
	vrnic_eq_sync_irq(&dev->async_eq);	/* QP events: async EQ only */
	if (qp->kernel) {
		/* Nor a poller that looked the QP up before the erase. */
		vrnic_cq_fence(ibqp->send_cq);
		vrnic_cq_fence(ibqp->recv_cq);
	}

	err = vrnic_cmd_destroy_qp(dev, qp->uctx, qp->qpn);
	if (err && !vrnic_is_dead(dev)) {
		/* The device may still read the rings: keep them. */
		dev_err(&dev->pdev->dev,
			"DESTROY_QP %u failed (%d): leaking its rings\n",
			qp->qpn, err);
	} else if (qp->kernel) {
		/* The device writes no more CQEs for it. */
		vrnic_cq_clean(ibqp->send_cq, qp);
		if (ibqp->recv_cq != ibqp->send_cq)
			vrnic_cq_clean(ibqp->recv_cq, qp);
		vrnic_kring_free(dev, &qp->rq.ring);
		vrnic_kring_free(dev, &qp->sq.ring);
	} else {
		ib_umem_release(qp->rq_umem);
		ib_umem_release(qp->sq_umem);
	}
	mutex_destroy(&qp->lock);
	return 0;
}
