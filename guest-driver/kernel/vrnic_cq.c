// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
/*
 * Completion queues. A user CQ's ring lives in the user process (allocated
 * and polled by the provider): the kernel pins it. A kernel CQ's ring is
 * kernel memory (vrnic_kring.c), polled by vrnic_poll.c; RoCE mode only,
 * where the kernel data path exists. Either is created on the EQ of the
 * requested completion vector, which routes COMPLETION/CQ_ERR events.
 *
 * resize_cq (SPEC "Resizing a CQ") gives the CQ a new ring: the device moves
 * the CQEs not yet polled to its first entries and polling continues at ci
 * 0 there. A user CQ's new ring and ci come from the provider (which does
 * not poll meanwhile); a kernel CQ's pollers are turned away while the
 * command runs. Either way the old ring goes once the device has let it go,
 * and a failed resize keeps it.
 */
#include <linux/interrupt.h>
#include <linux/log2.h>

#include "vrnic.h"

/*
 * Called from the EQ interrupt handlers (hard IRQ). Kernel comp_handlers
 * (ib_cq's softirq and workqueue pollers, ib_uverbs) only schedule work.
 */
void vrnic_cq_event(struct vrnic_dev *dev, u32 cqn, bool completion)
{
	struct vrnic_cq *cq = xa_load(&dev->cqs, cqn);
	struct ib_cq *ibcq;

	if (!cq) {
		/* Normal for an event racing with destroy_cq. */
		dev_dbg(&dev->pdev->dev, "%s event for unknown CQ %u\n",
			completion ? "completion" : "error", cqn);
		return;
	}
	ibcq = &cq->ibcq;

	if (completion) {
		if (ibcq->comp_handler)
			ibcq->comp_handler(ibcq, ibcq->cq_context);
	} else if (ibcq->event_handler) {
		struct ib_event event = {
			.device = ibcq->device,
			.event = IB_EVENT_CQ_ERR,
			.element.cq = ibcq,
		};

		ibcq->event_handler(&event, ibcq->cq_context);
	}
}

/*
 * A completion event on completion EQ @eq. Only a CQ bound to @eq is called:
 * destroy_cq waits only for its own EQ's handler (vrnic_cq_sync_irqs), so a
 * CQ found through another EQ's event could be freed under us. An event for
 * a CQ of another EQ, or for a CQN no CQ can have, is the device's error.
 */
void vrnic_cq_comp_event(struct vrnic_eq *eq, u32 cqn)
{
	struct vrnic_dev *dev = eq->dev;
	struct vrnic_cq *cq;
	u32 other;

	if (cqn >= dev->lim.max_cq) {
		dev_warn_ratelimited(&dev->pdev->dev,
				     "completion EQ %u: event for CQN %u, beyond max_cq %u\n",
				     eq->eqn, cqn, dev->lim.max_cq);
		return;
	}
	/* Under the lock destroy_cq's erase takes: the CQ stays while we look. */
	xa_lock(&dev->cqs);
	cq = xa_load(&dev->cqs, cqn);
	other = cq && cq->eq != eq ? cq->eq->eqn : U32_MAX;
	xa_unlock(&dev->cqs);
	if (other != U32_MAX) {
		dev_warn_ratelimited(&dev->pdev->dev,
				     "completion EQ %u: event for CQ %u of EQ %u; ignored\n",
				     eq->eqn, cqn, other);
		return;
	}
	vrnic_cq_event(dev, cqn, true);
}

/*
 * Wait for the handlers that can have found @cq before it left dev->cqs:
 * its completion EQ's and the async EQ's (CQ_ERR); no other vector.
 */
static void vrnic_cq_sync_irqs(struct vrnic_dev *dev, struct vrnic_cq *cq)
{
	vrnic_eq_sync_irq(cq->eq);
	vrnic_eq_sync_irq(&dev->async_eq);
}

/* A kernel CQ: at least attr->cqe entries in a ring of the kernel's own. */
static int vrnic_create_kernel_cq(struct vrnic_dev *dev, struct vrnic_cq *cq,
				  const struct ib_cq_init_attr *attr)
{
	const struct vrnic_kdb_page *kdb;
	struct vrnic_pbl pbl;
	int err;

	if (!attr->cqe || attr->cqe > dev->lim.max_cqe)
		return -EINVAL;
	cq->depth_log2 = order_base_2(max_t(u32, attr->cqe, 2));
	cq->uctx = VRNIC_KERNEL_UCTX;
	cq->eq = &dev->comp_eqs[attr->comp_vector];
	BUILD_BUG_ON(sizeof(struct vrnic_cqe) != VRNIC_CQE_SIZE);
	err = vrnic_kring_alloc(dev, &cq->ring, cq->depth_log2,
				ilog2(VRNIC_CQE_SIZE));
	if (err)
		return err;
	err = vrnic_kring_pbl(dev, &cq->ring, &pbl);
	if (err)
		goto err_free;
	err = vrnic_cmd_create_cq(dev, cq->uctx, cq->eq->eqn, cq->depth_log2,
				  &pbl.desc, &cq->cqn, &cq->db);
	vrnic_pbl_free(dev, &pbl);
	if (err)
		goto err_free;

	if (cq->db.slot >= VRNIC_DB_SLOTS_PER_PAGE) {
		dev_err(&dev->pdev->dev, "CREATE_CQ returned doorbell slot %u\n",
			cq->db.slot);
		err = -EIO;
		goto err_destroy;
	}
	kdb = vrnic_kdb_get(dev, cq->db.page);
	if (IS_ERR(kdb)) {
		err = PTR_ERR(kdb);
		goto err_destroy;
	}
	cq->slot = vrnic_kdb_slot(kdb, cq->db.slot);
	err = xa_insert_irq(&dev->cqs, cq->cqn, cq, GFP_KERNEL);
	if (err) {
		dev_err(&dev->pdev->dev, "CREATE_CQ returned CQN %u in use\n",
			cq->cqn);
		/* Destroying it would destroy another CQ: see vrnic_qp_insert. */
		vrnic_aq_mark_dead(dev, "invalid CREATE_CQ result");
		err = -EIO;
		goto err_destroy;
	}
	cq->ibcq.cqe = 1U << cq->depth_log2;
	ibdev_dbg(&dev->ibdev, "kernel CQ %u depth %u EQ %u page %u slot %u\n",
		  cq->cqn, cq->ibcq.cqe, cq->eq->eqn, cq->db.page, cq->db.slot);
	return 0;

err_destroy:
	if (vrnic_cmd_destroy_cq(dev, cq->uctx, cq->cqn) && !vrnic_is_dead(dev)) {
		dev_err(&dev->pdev->dev,
			"DESTROY_CQ %u failed: leaking its ring\n", cq->cqn);
		return err;
	}
err_free:
	vrnic_kring_free(dev, &cq->ring);
	return err;
}

int vrnic_create_cq(struct ib_cq *ibcq, const struct ib_cq_init_attr *attr,
		    struct uverbs_attr_bundle *attrs)
{
	struct ib_udata *udata = vrnic_cq_udata(attrs);
	struct vrnic_dev *dev = to_vdev(ibcq->device);
	struct vrnic_cq *cq = to_vcq(ibcq);
	struct vrnic_create_cq_resp resp = {};
	struct vrnic_create_cq_cmd cmd;
	struct vrnic_pbl pbl;
	u64 buf_addr;
	size_t ring_size;
	u64 db_key, kick_key;
	int err;

	if (attr->flags)
		return -EOPNOTSUPP;
	if (attr->comp_vector >= dev->num_comp_eqs)
		return -EINVAL;
	spin_lock_init(&cq->lock);
	/* Kernel CQs need the kernel data path: RoCE mode only. */
	if (!udata)
		return dev->roce ? vrnic_create_kernel_cq(dev, cq, attr) :
				   -EOPNOTSUPP;

	err = vrnic_copy_cmd_from_udata(&cmd, sizeof(cmd),
					offsetofend(struct vrnic_create_cq_cmd,
						    depth_log2),
					udata);
	if (err)
		return err;
	if (memchr_inv(cmd.reserved0, 0, sizeof(cmd.reserved0)))
		return -EINVAL;

	buf_addr = le64_to_cpu(cmd.buf_addr);
	if (cmd.depth_log2 < 1 || cmd.depth_log2 > ilog2(dev->lim.max_cqe) ||
	    attr->cqe > (1U << cmd.depth_log2) || !PAGE_ALIGNED(buf_addr))
		return -EINVAL;
	/* depth_log2 <= 31 and CQE_SIZE is 64: no overflow in size_t. */
	ring_size = (size_t)VRNIC_CQE_SIZE << cmd.depth_log2;

	cq->uctx = vrnic_udata_uctx(udata);
	cq->eq = &dev->comp_eqs[attr->comp_vector];
	/* The device writes CQEs: pin writable. */
	cq->umem = ib_umem_get(ibcq->device, buf_addr, ring_size,
			       IB_ACCESS_LOCAL_WRITE);
	if (IS_ERR(cq->umem))
		return PTR_ERR(cq->umem);

	err = vrnic_pbl_from_umem(dev, &pbl, cq->umem, PAGE_SIZE);
	if (err)
		goto err_release;
	err = vrnic_cmd_create_cq(dev, cq->uctx, cq->eq->eqn, cmd.depth_log2,
				  &pbl.desc, &cq->cqn, &cq->db);
	vrnic_pbl_free(dev, &pbl);
	if (err)
		goto err_release;

	if (cq->db.slot >= VRNIC_DB_SLOTS_PER_PAGE) {
		dev_err(&dev->pdev->dev, "CREATE_CQ returned doorbell slot %u\n",
			cq->db.slot);
		err = -EIO;
		goto err_destroy;
	}
	err = vrnic_uctx_db_page(udata, &cq->db, &db_key, &kick_key);
	if (err)
		goto err_destroy;
	err = xa_insert_irq(&dev->cqs, cq->cqn, cq, GFP_KERNEL);
	if (err) {
		dev_err(&dev->pdev->dev, "CREATE_CQ returned CQN %u in use\n",
			cq->cqn);
		/* Destroying it would destroy another CQ: see vrnic_qp_insert. */
		vrnic_aq_mark_dead(dev, "invalid CREATE_CQ result");
		err = -EIO;
		goto err_destroy;
	}

	ibcq->cqe = 1U << cmd.depth_log2;
	resp.cqn = cpu_to_le32(cq->cqn);
	resp.db_slot = cpu_to_le32(cq->db.slot);
	resp.depth_log2 = cmd.depth_log2;
	resp.db_page = cpu_to_le32(cq->db.page);
	resp.db_mmap_key = cpu_to_le64(db_key);
	resp.kick_mmap_key = cpu_to_le64(kick_key);
	err = vrnic_copy_resp_to_udata(udata, &resp, sizeof(resp));
	if (err)
		goto err_erase;

	ibdev_dbg(&dev->ibdev, "uctx %u: CQ %u depth %u EQ %u page %u slot %u\n",
		  cq->uctx, cq->cqn, ibcq->cqe, cq->eq->eqn, cq->db.page,
		  cq->db.slot);
	return 0;

err_erase:
	xa_erase_irq(&dev->cqs, cq->cqn);
	vrnic_cq_sync_irqs(dev, cq);
err_destroy:
	if (vrnic_cmd_destroy_cq(dev, cq->uctx, cq->cqn) && !vrnic_is_dead(dev)) {
		dev_err(&dev->pdev->dev,
			"DESTROY_CQ %u failed: leaking its pinned ring\n", cq->cqn);
		return err;
	}
err_release:
	ib_umem_release(cq->umem);
	return err;
}

/* One resize at a time; a kernel CQ's pollers stay away until the end. */
static bool vrnic_cq_begin_resize(struct vrnic_cq *cq, u32 *ci)
{
	unsigned long flags;
	bool busy;

	spin_lock_irqsave(&cq->lock, flags);
	busy = cq->resizing;
	cq->resizing = true;
	*ci = cq->ci;
	spin_unlock_irqrestore(&cq->lock, flags);
	return !busy;
}

static void vrnic_cq_end_resize(struct vrnic_cq *cq)
{
	unsigned long flags;

	spin_lock_irqsave(&cq->lock, flags);
	cq->resizing = false;
	spin_unlock_irqrestore(&cq->lock, flags);
}

static int vrnic_resize_user_cq(struct vrnic_dev *dev, struct vrnic_cq *cq,
				int cqe, struct ib_udata *udata)
{
	struct vrnic_resize_cq_cmd cmd;
	struct ib_umem *umem;
	struct vrnic_pbl pbl;
	u64 buf_addr;
	u32 moved;
	int err;

	err = vrnic_copy_cmd_from_udata(&cmd, sizeof(cmd), sizeof(cmd), udata);
	if (err)
		return err;
	buf_addr = le64_to_cpu(cmd.buf_addr);
	if (memchr_inv(cmd.reserved0, 0, sizeof(cmd.reserved0)) ||
	    cmd.depth_log2 < 1 || cmd.depth_log2 > ilog2(dev->lim.max_cqe) ||
	    (u32)cqe > (1U << cmd.depth_log2) || !PAGE_ALIGNED(buf_addr))
		return -EINVAL;

	/* The device writes CQEs: pin writable. depth_log2 <= 31: no overflow. */
	umem = ib_umem_get(cq->ibcq.device, buf_addr,
			   (size_t)VRNIC_CQE_SIZE << cmd.depth_log2,
			   IB_ACCESS_LOCAL_WRITE);
	if (IS_ERR(umem))
		return PTR_ERR(umem);
	err = vrnic_pbl_from_umem(dev, &pbl, umem, PAGE_SIZE);
	if (err)
		goto err_release;
	err = vrnic_cmd_resize_cq(dev, cq->uctx, cq->cqn, cmd.depth_log2,
				  le32_to_cpu(cmd.ci), &pbl.desc, &moved);
	vrnic_pbl_free(dev, &pbl);
	if (err)
		goto err_release;

	ib_umem_release(cq->umem);
	cq->umem = umem;
	cq->ibcq.cqe = 1U << cmd.depth_log2;
	ibdev_dbg(&dev->ibdev, "uctx %u: CQ %u resized to %u, %u CQEs moved\n",
		  cq->uctx, cq->cqn, cq->ibcq.cqe, moved);
	return 0;

err_release:
	ib_umem_release(umem);
	return err;
}

/* @ci: the CQ's consumer index, which no poller can move meanwhile. */
static int vrnic_resize_kernel_cq(struct vrnic_dev *dev, struct vrnic_cq *cq,
				  int cqe, u32 ci)
{
	u32 depth_log2 = order_base_2(max(cqe, 2));
	struct vrnic_kring ring;
	struct vrnic_pbl pbl;
	unsigned long flags;
	u32 moved;
	int err;

	err = vrnic_kring_alloc(dev, &ring, depth_log2, ilog2(VRNIC_CQE_SIZE));
	if (err)
		return err;
	err = vrnic_kring_pbl(dev, &ring, &pbl);
	if (err)
		goto err_free;
	err = vrnic_cmd_resize_cq(dev, cq->uctx, cq->cqn, depth_log2, ci,
				  &pbl.desc, &moved);
	vrnic_pbl_free(dev, &pbl);
	if (err)
		goto err_free;

	/* The device zeroed the slot's ci: continue at 0 in the new ring. */
	spin_lock_irqsave(&cq->lock, flags);
	swap(cq->ring, ring);
	cq->depth_log2 = depth_log2;
	cq->ci = 0;
	cq->ibcq.cqe = 1U << depth_log2;
	spin_unlock_irqrestore(&cq->lock, flags);
	ibdev_dbg(&dev->ibdev, "kernel CQ %u resized to %u, %u CQEs moved\n",
		  cq->cqn, cq->ibcq.cqe, moved);
	/* The old ring: the device never touches it again. */
err_free:
	vrnic_kring_free(dev, &ring);
	return err;
}

/* @cqe: at least this many entries; ibcq->cqe becomes the new depth. */
int vrnic_resize_cq(struct ib_cq *ibcq, int cqe, struct ib_udata *udata)
{
	struct vrnic_dev *dev = to_vdev(ibcq->device);
	struct vrnic_cq *cq = to_vcq(ibcq);
	u32 ci;
	int err;

	if (cqe < 1 || (u32)cqe > dev->lim.max_cqe || !udata != !cq->umem)
		return -EINVAL;
	if (!vrnic_cq_begin_resize(cq, &ci))
		return -EBUSY;
	if (cq->umem)
		err = vrnic_resize_user_cq(dev, cq, cqe, udata);
	else
		err = vrnic_resize_kernel_cq(dev, cq, cqe, ci);
	vrnic_cq_end_resize(cq);
	return err;
}

int vrnic_destroy_cq(struct ib_cq *ibcq, struct ib_udata *udata)
{
	struct vrnic_dev *dev = to_vdev(ibcq->device);
	struct vrnic_cq *cq = to_vcq(ibcq);
	int err;

	/* After this no EQ handler can find the CQ or still be using it. */
	xa_erase_irq(&dev->cqs, cq->cqn);
	vrnic_cq_sync_irqs(dev, cq);

	err = vrnic_cmd_destroy_cq(dev, cq->uctx, cq->cqn);
	if (err && !vrnic_is_dead(dev)) {
		/* The device may still write the ring: keep it. */
		dev_err(&dev->pdev->dev,
			"DESTROY_CQ %u failed (%d): leaking its ring\n",
			cq->cqn, err);
		return 0;
	}
	if (cq->umem)
		ib_umem_release(cq->umem);
	else
		vrnic_kring_free(dev, &cq->ring);
	return 0;
}
