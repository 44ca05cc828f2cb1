// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
/*
 * Shared receive queues (SPEC "Shared receive queues"). A user SRQ's ring
 * lives in the process (the provider posts to it; the kernel checks its
 * geometry and pins it); it is basic or XRC (SPEC "XRC": it names its XRC
 * domain and the CQ of its completions). A kernel SRQ (RoCE mode, basic
 * only) has a ring of kernel pages, posted to by vrnic_post_srq_recv().
 *
 * The device takes WQEs in index order but messages complete out of that
 * order, so a kernel SRQ keeps a bit per slot: set when a WQE is posted into
 * it, cleared when poll_cq retires the CQE naming it. A post into a busy slot
 * fails with -ENOMEM. srq->lock serializes posters; the bits are atomic, so
 * pollers (under their CQ's lock) clear them without it.
 */
#include <linux/bitmap.h>
#include <linux/log2.h>
#include <linux/slab.h>

#include "vrnic.h"

VRNIC_ASSERT_SAME(VRNIC_SRQ_ATTR_MASK_MAX_WR, IB_SRQ_MAX_WR);
VRNIC_ASSERT_SAME(VRNIC_SRQ_ATTR_MASK_LIMIT, IB_SRQ_LIMIT);

/* Called from the async EQ interrupt handler (hard IRQ). */
void vrnic_srq_event(struct vrnic_dev *dev, u32 srqn, enum ib_event_type type)
{
	struct vrnic_srq *srq = xa_load(&dev->srqs, srqn);
	struct ib_srq *ibsrq;

	if (!srq) {
		dev_dbg(&dev->pdev->dev, "event %d for unknown SRQ %u\n", type,
			srqn);
		return;
	}
	ibsrq = &srq->ibsrq;
	if (ibsrq->event_handler) {
		struct ib_event event = {
			.device = ibsrq->device,
			.event = type,
			.element.srq = ibsrq,
		};

		ibsrq->event_handler(&event, ibsrq->srq_context);
	}
}

/* The slot @wqe_index (a CQE's, reduced here) of a kernel SRQ is free again. */
void vrnic_srq_retire(struct vrnic_srq *srq, u16 wqe_index)
{
	/* Release: the device is done with the WQE; pairs with post's acquire. */
	clear_bit_unlock(wqe_index & ((1U << srq->depth_log2) - 1), srq->busy);
}

static int vrnic_srq_insert(struct vrnic_dev *dev, struct vrnic_srq *srq)
{
	int err;

	if (srq->db.slot >= VRNIC_DB_SLOTS_PER_PAGE) {
		dev_err(&dev->pdev->dev, "CREATE_SRQ returned doorbell slot %u\n",
			srq->db.slot);
		return -EIO;
	}
	err = xa_insert(&dev->srqs, srq->srqn, srq, GFP_KERNEL);
	if (err) {
		dev_err(&dev->pdev->dev, "CREATE_SRQ returned SRQN %u in use\n",
			srq->srqn);
		/* Destroying it would destroy another SRQ: see vrnic_qp_insert. */
		vrnic_aq_mark_dead(dev, "invalid CREATE_SRQ result");
		return -EIO;
	}
	return 0;
}

/* Undo CREATE_SRQ; false when the device may still read the ring. */
static bool vrnic_srq_destroy_hw(struct vrnic_dev *dev, struct vrnic_srq *srq)
{
	int err = vrnic_cmd_destroy_srq(dev, srq->uctx, srq->srqn);

	if (err && !vrnic_is_dead(dev)) {
		dev_err(&dev->pdev->dev,
			"DESTROY_SRQ %u failed (%d): leaking its ring\n",
			srq->srqn, err);
		return false;
	}
	return true;
}

static void vrnic_srq_free_kernel(struct vrnic_dev *dev, struct vrnic_srq *srq)
{
	vrnic_kring_free(dev, &srq->ring);
	bitmap_free(srq->busy);
	srq->busy = NULL;
}

static int vrnic_create_kernel_srq(struct vrnic_dev *dev, struct vrnic_srq *srq,
				   struct ib_srq_attr *attr)
{
	struct vrnic_create_srq_params p = {};
	const struct vrnic_kdb_page *kdb;
	struct vrnic_pbl pbl;
	u32 wqe_shift;
	int err;

	spin_lock_init(&srq->lock);
	srq->uctx = VRNIC_KERNEL_UCTX;
	srq->depth_log2 = order_base_2(max_t(u32, attr->max_wr, 2));
	srq->max_sge = max_t(u32, attr->max_sge, 1);
	wqe_shift = max_t(u32, order_base_2(VRNIC_RECV_WQE_HEADER_SIZE +
					    srq->max_sge * VRNIC_SGE_SIZE),
			  VRNIC_RECV_WQE_SHIFT_MIN);
	srq->busy = bitmap_zalloc(1U << srq->depth_log2, GFP_KERNEL);
	if (!srq->busy)
		return -ENOMEM;
	err = vrnic_kring_alloc(dev, &srq->ring, srq->depth_log2, wqe_shift);
	if (err)
		goto err_free;
	err = vrnic_kring_pbl(dev, &srq->ring, &pbl);
	if (err)
		goto err_free;
	p.uctx = srq->uctx;
	p.pdn = to_vpd(srq->ibsrq.pd)->pdn;
	p.depth_log2 = srq->depth_log2;
	p.wqe_shift = wqe_shift;
	p.max_sge = srq->max_sge;
	p.srq_type = VRNIC_SRQ_TYPE_BASIC;
	p.ring = pbl.desc;
	err = vrnic_cmd_create_srq(dev, &p, &srq->srqn, &srq->db);
	vrnic_pbl_free(dev, &pbl);
	if (err)
		goto err_free;

	kdb = vrnic_kdb_get(dev, srq->db.page);
	err = PTR_ERR_OR_ZERO(kdb);
	if (!err)
		err = vrnic_srq_insert(dev, srq);
	if (err)
		goto err_destroy;
	srq->slot = vrnic_kdb_slot(kdb, srq->db.slot);
	attr->max_wr = 1U << srq->depth_log2;
	attr->max_sge = srq->max_sge;
	ibdev_dbg(&dev->ibdev, "kernel SRQ %u: %u x %u B, page %u slot %u\n",
		  srq->srqn, attr->max_wr, 1U << wqe_shift, srq->db.page,
		  srq->db.slot);
	return 0;

err_destroy:
	if (!vrnic_srq_destroy_hw(dev, srq))
		return err;
err_free:
	vrnic_srq_free_kernel(dev, srq);
	return err;
}

/* An XRC SRQ names its domain and the CQ of its completions (SPEC "XRC"). */
static int vrnic_srq_xrc_params(struct vrnic_dev *dev,
				const struct ib_srq_init_attr *init_attr,
				struct vrnic_create_srq_params *p)
{
	if (init_attr->srq_type == IB_SRQT_BASIC) {
		p->srq_type = VRNIC_SRQ_TYPE_BASIC;
		return 0;
	}
	if (init_attr->srq_type != IB_SRQT_XRC || !dev->lim.max_xrcd)
		return -EOPNOTSUPP;
	if (!init_attr->ext.xrc.xrcd || !init_attr->ext.cq)
		return -EINVAL;
	p->srq_type = VRNIC_SRQ_TYPE_XRC;
	p->xrcdn = to_vxrcd(init_attr->ext.xrc.xrcd)->xrcdn;
	p->cqn = to_vcq(init_attr->ext.cq)->cqn;
	return 0;
}

static int vrnic_create_user_srq(struct vrnic_dev *dev, struct vrnic_srq *srq,
				 struct ib_srq_init_attr *init_attr,
				 struct ib_udata *udata)
{
	struct ib_srq_attr *attr = &init_attr->attr;
	struct vrnic_create_srq_params p = {};
	struct vrnic_create_srq_resp resp = {};
	struct vrnic_create_srq_cmd cmd;
	struct vrnic_pbl pbl;
	u64 buf_addr, db_key, kick_key;
	u32 max_sge = max_t(u32, attr->max_sge, 1);
	int err;

	err = vrnic_srq_xrc_params(dev, init_attr, &p);
	if (err)
		return err;
	err = vrnic_copy_cmd_from_udata(&cmd, sizeof(cmd), sizeof(cmd), udata);
	if (err)
		return err;
	if (memchr_inv(cmd.reserved0, 0, sizeof(cmd.reserved0)))
		return -EINVAL;
	buf_addr = le64_to_cpu(cmd.buf_addr);
	if (cmd.depth_log2 < 1 || cmd.depth_log2 > ilog2(dev->lim.max_qp_wr) ||
	    (1U << cmd.depth_log2) < attr->max_wr ||
	    cmd.wqe_shift < VRNIC_RECV_WQE_SHIFT_MIN ||
	    cmd.wqe_shift > VRNIC_RECV_WQE_SHIFT_MAX ||
	    VRNIC_RECV_WQE_HEADER_SIZE + max_sge * VRNIC_SGE_SIZE >
	    (1U << cmd.wqe_shift) || !PAGE_ALIGNED(buf_addr))
		return -EINVAL;

	srq->uctx = vrnic_udata_uctx(udata);
	srq->depth_log2 = cmd.depth_log2;
	srq->max_sge = max_sge;
	/* Pinned writable so the pages are never shared copy-on-write. */
	srq->umem = ib_umem_get(srq->ibsrq.device, buf_addr,
				(size_t)1 << (cmd.depth_log2 + cmd.wqe_shift),
				IB_ACCESS_LOCAL_WRITE);
	if (IS_ERR(srq->umem))
		return PTR_ERR(srq->umem);
	err = vrnic_pbl_from_umem(dev, &pbl, srq->umem, PAGE_SIZE);
	if (err)
		goto err_release;
	p.uctx = srq->uctx;
	p.pdn = to_vpd(srq->ibsrq.pd)->pdn;
	p.depth_log2 = cmd.depth_log2;
	p.wqe_shift = cmd.wqe_shift;
	p.max_sge = max_sge;
	p.ring = pbl.desc;
	err = vrnic_cmd_create_srq(dev, &p, &srq->srqn, &srq->db);
	vrnic_pbl_free(dev, &pbl);
	if (err)
		goto err_release;

	err = vrnic_srq_insert(dev, srq);
	if (err)
		goto err_destroy;
	err = vrnic_uctx_db_page(udata, &srq->db, &db_key, &kick_key);
	if (err)
		goto err_erase;
	resp.srqn = cpu_to_le32(srq->srqn);
	resp.db_slot = cpu_to_le32(srq->db.slot);
	resp.db_page = cpu_to_le32(srq->db.page);
	resp.db_mmap_key = cpu_to_le64(db_key);
	resp.kick_mmap_key = cpu_to_le64(kick_key);
	err = vrnic_copy_resp_to_udata(udata, &resp, sizeof(resp));
	if (err)
		goto err_erase;

	attr->max_wr = 1U << cmd.depth_log2;
	attr->max_sge = max_sge;
	/* What uverbs returns to the process: remote XRC senders name it. */
	if (p.srq_type == VRNIC_SRQ_TYPE_XRC)
		srq->ibsrq.ext.xrc.srq_num = srq->srqn;
	ibdev_dbg(&dev->ibdev, "uctx %u: SRQ %u type %u %u x %u B, page %u slot %u\n",
		  srq->uctx, srq->srqn, p.srq_type, attr->max_wr,
		  1U << cmd.wqe_shift, srq->db.page, srq->db.slot);
	return 0;

err_erase:
	xa_erase(&dev->srqs, srq->srqn);
	vrnic_eq_sync_irq(&dev->async_eq);	/* SRQ events: async EQ only */
err_destroy:
	if (!vrnic_srq_destroy_hw(dev, srq))
		return err;
err_release:
	ib_umem_release(srq->umem);
	return err;
}

int vrnic_create_srq(struct ib_srq *ibsrq, struct ib_srq_init_attr *init_attr,
		     struct ib_udata *udata)
{
	struct vrnic_dev *dev = to_vdev(ibsrq->device);
	struct vrnic_srq *srq = to_vsrq(ibsrq);
	struct ib_srq_attr *attr = &init_attr->attr;

	if (!dev->lim.max_srq)
		return -EOPNOTSUPP;
	if (!attr->max_wr || attr->max_wr > dev->lim.max_qp_wr ||
	    attr->max_sge > dev->lim.max_sge)
		return -EINVAL;
	if (udata)
		return vrnic_create_user_srq(dev, srq, init_attr, udata);
	/*
	 * Kernel SRQs need the kernel data path: RoCE mode only. No kernel
	 * ULP uses XRC, and kernel XRC SRQs are not offered.
	 */
	if (init_attr->srq_type != IB_SRQT_BASIC)
		return -EOPNOTSUPP;
	return dev->roce ? vrnic_create_kernel_srq(dev, srq, attr) : -EOPNOTSUPP;
}

int vrnic_modify_srq(struct ib_srq *ibsrq, struct ib_srq_attr *attr,
		     enum ib_srq_attr_mask mask, struct ib_udata *udata)
{
	struct vrnic_dev *dev = to_vdev(ibsrq->device);
	struct vrnic_srq *srq = to_vsrq(ibsrq);

	/* Resizing is not offered; LIMIT is the only attribute. */
	if (mask & ~IB_SRQ_LIMIT)
		return -EOPNOTSUPP;
	if (udata && udata->inlen &&
	    !ib_is_udata_cleared(udata, 0, udata->inlen))
		return -EOPNOTSUPP;
	if (!mask)
		return 0;
	if (attr->srq_limit > (1U << srq->depth_log2))
		return -EINVAL;
	return vrnic_cmd_modify_srq(dev, srq->uctx, srq->srqn,
				    VRNIC_SRQ_ATTR_MASK_LIMIT, attr->srq_limit);
}

int vrnic_query_srq(struct ib_srq *ibsrq, struct ib_srq_attr *attr)
{
	struct vrnic_dev *dev = to_vdev(ibsrq->device);
	struct vrnic_srq *srq = to_vsrq(ibsrq);
	struct vrnic_srq_attr va;
	int err;

	err = vrnic_cmd_query_srq(dev, srq->uctx, srq->srqn, &va);
	if (err)
		return err;
	/* The geometry is the driver's own; the limit is the device's. */
	attr->max_wr = 1U << srq->depth_log2;
	attr->max_sge = srq->max_sge;
	attr->srq_limit = min_t(u32, le32_to_cpu(va.srq_limit), attr->max_wr);
	return 0;
}

int vrnic_destroy_srq(struct ib_srq *ibsrq, struct ib_udata *udata)
{
	struct vrnic_dev *dev = to_vdev(ibsrq->device);
	struct vrnic_srq *srq = to_vsrq(ibsrq);

	/* After this no EQ handler can find the SRQ or still be using it. */
	xa_erase(&dev->srqs, srq->srqn);
	vrnic_eq_sync_irq(&dev->async_eq);
	if (!vrnic_srq_destroy_hw(dev, srq))
		return 0;
	if (srq->umem)
		ib_umem_release(srq->umem);
	else
		vrnic_srq_free_kernel(dev, srq);
	return 0;
}

/*
 * Kernel SRQs: the WQE at pi mod depth, if its slot is not still busy, then
 * pi to the doorbell slot (release). No flag and no kick: the device reads
 * the slot whenever a QP needs a receive WQE.
 */
int vrnic_post_srq_recv(struct ib_srq *ibsrq, const struct ib_recv_wr *wr,
			const struct ib_recv_wr **bad_wr)
{
	struct vrnic_srq *srq = to_vsrq(ibsrq);
	u32 mask = (1U << srq->depth_log2) - 1;
	struct vrnic_sge *sge;
	unsigned long flags;
	void *wqe;
	u32 start, idx;
	int err = 0, i;

	/* A user SRQ's ring is the provider's (uverbs may still call here). */
	if (srq->umem) {
		*bad_wr = wr;
		return -EINVAL;
	}

	spin_lock_irqsave(&srq->lock, flags);
	start = srq->pi;
	for (; wr; wr = wr->next) {
		idx = srq->pi & mask;
		/* Acquire: pairs with vrnic_srq_retire()'s release. */
		if (test_bit_acquire(idx, srq->busy)) {
			err = -ENOMEM;
			break;
		}
		if (wr->num_sge < 0 || wr->num_sge > srq->max_sge) {
			err = -EINVAL;
			break;
		}
		wqe = vrnic_kring_entry(&srq->ring, idx);
		memset(wqe, 0, 1U << srq->ring.entry_shift);
		sge = vrnic_recv_wqe_sges(wqe);
		for (i = 0; i < wr->num_sge; i++)
			vrnic_set_sge(&sge[i], wr->sg_list[i].addr,
				      wr->sg_list[i].length,
				      wr->sg_list[i].lkey);
		vrnic_set_recv_wqe_header(wqe, wr->wr_id, wr->num_sge);
		set_bit(idx, srq->busy);
		srq->pi++;
	}
	if (srq->pi != start) {
		/* The WQEs before the index that publishes them. */
		dma_wmb();
		writel(srq->pi, srq->slot + VRNIC_DB_SRQ_SLOT_PI_OFF);
	}
	spin_unlock_irqrestore(&srq->lock, flags);
	if (err)
		*bad_wr = wr;
	return err;
}
