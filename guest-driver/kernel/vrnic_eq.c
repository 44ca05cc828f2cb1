// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
/*
 * Event queues (SPEC "Event queue"). The async EQ shares MSI-X vector 0 with
 * admin completions; completion EQ i uses vector i + 1. Each EQ is consumed
 * only by its own hard-IRQ handler, which never runs concurrently with itself,
 * so eq->ci needs no lock. CQ/QP lookups are safe against destroy because
 * destroy erases the object from its xarray and then waits, with
 * vrnic_eq_sync_irq(), for the handlers of the EQs that can name it: the
 * async EQ (QP, SRQ and CQ errors) and, for a CQ, its completion EQ. Other vectors
 * are left alone.
 */
#include <linux/dma-mapping.h>
#include <linux/interrupt.h>
#include <linux/log2.h>

#include "vrnic.h"

static u8 vrnic_eq_phase(const struct vrnic_eq *eq)
{
	return ((eq->ci >> eq->depth_log2) & 1) ^ 1;
}

static void vrnic_eq_update_ci(struct vrnic_eq *eq)
{
	void __iomem *slot = vrnic_kdb_slot(eq->kdb, eq->db.slot);

	/*
	 * Every EQE read must be complete before the device may reuse its
	 * entry. No kick: the device reads the EQ consumer index only when it
	 * posts an event.
	 */
	mb();
	writel(eq->ci, slot + VRNIC_DB_EQ_SLOT_CI_OFF);
}

static void vrnic_port_event(struct vrnic_dev *dev, u32 port,
			     enum ib_event_type type)
{
	struct ib_event event = {
		.device = &dev->ibdev,
		.event = type,
		.element.port_num = port,
	};

	/* RoCE mode: the port follows the paired netdev (vrnic_netdev.c). */
	if (dev->roce) {
		dev_dbg(&dev->pdev->dev, "port event %d ignored in RoCE mode\n",
			type);
		return;
	}
	if (port != VRNIC_PORT_NUM) {
		dev_warn_ratelimited(&dev->pdev->dev,
				     "port event %d for unknown port %u\n",
				     type, port);
		return;
	}
	if (test_bit(VRNIC_FLAG_REGISTERED, &dev->flags))
		ib_dispatch_event(&event);
}

static void vrnic_async_event(struct vrnic_eq *eq, const struct vrnic_eqe *eqe)
{
	struct vrnic_dev *dev = eq->dev;
	u32 obj = le32_to_cpu(eqe->obj);

	switch (eqe->event_type) {
	case VRNIC_EVENT_TYPE_QP_FATAL:
		vrnic_qp_event(dev, obj, IB_EVENT_QP_FATAL);
		break;
	case VRNIC_EVENT_TYPE_QP_REQ_ERR:
		vrnic_qp_event(dev, obj, IB_EVENT_QP_REQ_ERR);
		break;
	case VRNIC_EVENT_TYPE_QP_ACCESS_ERR:
		vrnic_qp_event(dev, obj, IB_EVENT_QP_ACCESS_ERR);
		break;
	case VRNIC_EVENT_TYPE_COMM_EST:
		vrnic_qp_event(dev, obj, IB_EVENT_COMM_EST);
		break;
	case VRNIC_EVENT_TYPE_SQ_DRAINED:
		vrnic_qp_event(dev, obj, IB_EVENT_SQ_DRAINED);
		break;
	case VRNIC_EVENT_TYPE_QP_LAST_WQE_REACHED:
		vrnic_qp_event(dev, obj, IB_EVENT_QP_LAST_WQE_REACHED);
		break;
	case VRNIC_EVENT_TYPE_SRQ_LIMIT_REACHED:
		vrnic_srq_event(dev, obj, IB_EVENT_SRQ_LIMIT_REACHED);
		break;
	case VRNIC_EVENT_TYPE_SRQ_ERR:
		vrnic_srq_event(dev, obj, IB_EVENT_SRQ_ERR);
		break;
	case VRNIC_EVENT_TYPE_CQ_ERR:
		vrnic_cq_event(dev, obj, false);
		break;
	case VRNIC_EVENT_TYPE_PORT_ACTIVE:
		vrnic_port_event(dev, obj, IB_EVENT_PORT_ACTIVE);
		break;
	case VRNIC_EVENT_TYPE_PORT_ERR:
		vrnic_port_event(dev, obj, IB_EVENT_PORT_ERR);
		break;
	case VRNIC_EVENT_TYPE_DEVICE_FATAL:
		/* Resets the device and dispatches IB_EVENT_DEVICE_FATAL. */
		vrnic_aq_mark_dead(dev, "device reported DEVICE_FATAL");
		break;
	default:
		dev_warn_ratelimited(&dev->pdev->dev,
				     "async EQ: unexpected event type %u (obj %u)\n",
				     eqe->event_type, obj);
		break;
	}
}

static void vrnic_eq_dispatch(struct vrnic_eq *eq, const struct vrnic_eqe *eqe)
{
	if (eq->async) {
		vrnic_async_event(eq, eqe);
	} else if (eqe->event_type == VRNIC_EVENT_TYPE_COMPLETION) {
		vrnic_cq_comp_event(eq, le32_to_cpu(eqe->obj));
	} else {
		dev_warn_ratelimited(&eq->dev->pdev->dev,
				     "completion EQ %u: unexpected event type %u\n",
				     eq->eqn, eqe->event_type);
	}
}

/*
 * Consume every valid EQE. The device cannot post more than depth entries
 * ahead of the consumer index we publish, so one pass of at most depth
 * entries empties the ring; entries posted after it come with a new MSI-X
 * message.
 */
static void vrnic_eq_process(struct vrnic_eq *eq)
{
	u32 depth = 1U << eq->depth_log2;
	u32 done;

	for (done = 0; done < depth; done++) {
		const struct vrnic_eqe *eqe = &eq->ring[eq->ci & (depth - 1)];

		if ((READ_ONCE(eqe->owner) & 1) != vrnic_eq_phase(eq))
			break;
		/* Read owner before the rest of the entry (acquire). */
		dma_rmb();
		vrnic_eq_dispatch(eq, eqe);
		eq->ci++;
	}
	if (done)
		vrnic_eq_update_ci(eq);
}

static irqreturn_t vrnic_ctrl_irq(int irq, void *data)
{
	struct vrnic_dev *dev = data;

	vrnic_aq_wake(dev);
	vrnic_eq_process(&dev->async_eq);
	return IRQ_HANDLED;
}

static irqreturn_t vrnic_comp_irq(int irq, void *data)
{
	vrnic_eq_process(data);
	return IRQ_HANDLED;
}

static int vrnic_eq_create(struct vrnic_dev *dev, struct vrnic_eq *eq,
			   u16 vector, bool async, u32 depth_log2)
{
	struct vrnic_pbl pbl;
	u8 flags = async ? VRNIC_EQ_FLAG_ASYNC : 0;
	int err;

	eq->dev = dev;
	eq->vector = vector;
	eq->async = async;
	eq->depth_log2 = depth_log2;
	eq->ci = 0;
	/* At least one page: the ring is described in whole 4 KiB pages. */
	eq->ring_size = max_t(size_t, (size_t)VRNIC_EQE_SIZE << depth_log2,
			      PAGE_SIZE);
	eq->ring = dma_alloc_coherent(vrnic_dma_dev(dev), eq->ring_size,
				      &eq->ring_dma, GFP_KERNEL);
	if (!eq->ring)
		return -ENOMEM;

	vrnic_pbl_contiguous(&pbl, eq->ring_dma, eq->ring_size >> PAGE_SHIFT,
			     PAGE_SHIFT);
	err = vrnic_cmd_create_eq(dev, depth_log2, flags, vector, &pbl.desc,
				  &eq->eqn, &eq->db);
	if (err)
		goto err_free;
	if (eq->db.slot >= VRNIC_DB_SLOTS_PER_PAGE ||
	    eq->db.page >= VRNIC_DB_PAGES) {
		dev_err(&dev->pdev->dev,
			"CREATE_EQ returned doorbell page %u slot %u\n",
			eq->db.page, eq->db.slot);
		/* Resets the device, which then no longer knows the ring. */
		vrnic_aq_mark_dead(dev, "invalid CREATE_EQ result");
		err = -EIO;
		goto err_free;
	}
	eq->kdb = vrnic_kdb_get(dev, eq->db.page);
	if (IS_ERR(eq->kdb)) {
		err = PTR_ERR(eq->kdb);
		eq->kdb = NULL;
		vrnic_aq_mark_dead(dev, "cannot map an EQ doorbell page");
		goto err_free;
	}
	eq->created = true;
	return 0;

err_free:
	/*
	 * A failed command changes nothing on the device; a timed-out one
	 * reset it. Either way the device does not know the ring.
	 */
	dma_free_coherent(vrnic_dma_dev(dev), eq->ring_size, eq->ring,
			  eq->ring_dma);
	eq->ring = NULL;
	return err;
}

static u32 vrnic_eq_depth_log2(u32 entries)
{
	return clamp_t(u32, order_base_2(entries), VRNIC_EQ_DEPTH_LOG2_MIN,
		       VRNIC_EQ_DEPTH_LOG2_MAX);
}

/*
 * Create the async EQ (vector 0) and one completion EQ per remaining vector.
 * Admin commands need no interrupt (they poll), so the IRQs are requested
 * afterwards by vrnic_eqs_request_irqs().
 */
int vrnic_eqs_create(struct vrnic_dev *dev)
{
	u32 async_depth, comp_depth, i;
	int err;

	/* Async events: at most a few per QP and CQ; completions: one per CQ arm. */
	async_depth = vrnic_eq_depth_log2(dev->lim.max_qp + dev->lim.max_cq + 16);
	comp_depth = vrnic_eq_depth_log2(dev->lim.max_cq);

	err = vrnic_eq_create(dev, &dev->async_eq, 0, true, async_depth);
	if (err)
		return err;

	dev->comp_eqs = kcalloc(dev->num_vectors - 1, sizeof(*dev->comp_eqs),
				GFP_KERNEL);
	if (!dev->comp_eqs)
		return -ENOMEM;

	for (i = 0; i < dev->num_vectors - 1; i++) {
		err = vrnic_eq_create(dev, &dev->comp_eqs[i], i + 1, false,
				      comp_depth);
		if (err)
			return err;
		dev->num_comp_eqs = i + 1;
	}
	return 0;
}

static int vrnic_eq_request_irq(struct vrnic_dev *dev, struct vrnic_eq *eq,
				irq_handler_t handler, void *data)
{
	int irq = pci_irq_vector(dev->pdev, eq->vector);
	int err;

	if (irq < 0)
		return irq;
	if (eq->async)
		snprintf(eq->irq_name, sizeof(eq->irq_name), "vrnic-ctrl@pci:%s",
			 pci_name(dev->pdev));
	else
		snprintf(eq->irq_name, sizeof(eq->irq_name), "vrnic-comp%u@pci:%s",
			 eq->vector - 1, pci_name(dev->pdev));
	err = request_irq(irq, handler, 0, eq->irq_name, data);
	if (err)
		return err;
	eq->irq_requested = true;

	/*
	 * Events posted before the handler existed may have had their MSI-X
	 * message lost: consume them now, with the handler held off.
	 */
	disable_irq(irq);
	vrnic_eq_process(eq);
	enable_irq(irq);
	return 0;
}

int vrnic_eqs_request_irqs(struct vrnic_dev *dev)
{
	u32 i;
	int err;

	err = vrnic_eq_request_irq(dev, &dev->async_eq, vrnic_ctrl_irq, dev);
	if (err)
		return err;
	for (i = 0; i < dev->num_comp_eqs; i++) {
		err = vrnic_eq_request_irq(dev, &dev->comp_eqs[i],
					   vrnic_comp_irq, &dev->comp_eqs[i]);
		if (err)
			return err;
	}
	return 0;
}

/* Destroy the EQs on the device; CQs using them must be gone already. */
void vrnic_eqs_destroy(struct vrnic_dev *dev)
{
	u32 i;
	int err;

	for (i = 0; i < dev->num_comp_eqs; i++) {
		struct vrnic_eq *eq = &dev->comp_eqs[i];

		if (!eq->created)
			continue;
		err = vrnic_cmd_destroy_eq(dev, eq->eqn);
		if (err)
			dev_warn(&dev->pdev->dev, "DESTROY_EQ %u: %d\n", eq->eqn, err);
		eq->created = false;
	}
	if (dev->async_eq.created) {
		err = vrnic_cmd_destroy_eq(dev, dev->async_eq.eqn);
		if (err)
			dev_warn(&dev->pdev->dev, "DESTROY_EQ %u (async): %d\n",
				 dev->async_eq.eqn, err);
		dev->async_eq.created = false;
	}
}

/* Wait for a running handler of this EQ's vector, and only this one. */
void vrnic_eq_sync_irq(struct vrnic_eq *eq)
{
	if (eq->irq_requested)
		synchronize_irq(pci_irq_vector(eq->dev->pdev, eq->vector));
}

void vrnic_eqs_free_irqs(struct vrnic_dev *dev)
{
	u32 i;

	for (i = 0; i < dev->num_comp_eqs; i++) {
		struct vrnic_eq *eq = &dev->comp_eqs[i];

		if (eq->irq_requested)
			free_irq(pci_irq_vector(dev->pdev, eq->vector), eq);
		eq->irq_requested = false;
	}
	if (dev->async_eq.irq_requested)
		free_irq(pci_irq_vector(dev->pdev, 0), dev);
	dev->async_eq.irq_requested = false;
}

static void vrnic_eq_free(struct vrnic_dev *dev, struct vrnic_eq *eq)
{
	eq->kdb = NULL;		/* vrnic_kdb_unmap_all() unmaps the pages */
	if (eq->ring)
		dma_free_coherent(vrnic_dma_dev(dev), eq->ring_size, eq->ring,
				  eq->ring_dma);
	eq->ring = NULL;
}

/* Only after the device was reset and the IRQs were freed. */
void vrnic_eqs_free(struct vrnic_dev *dev)
{
	u32 i;

	if (dev->comp_eqs) {
		for (i = 0; i < dev->num_vectors - 1; i++)
			vrnic_eq_free(dev, &dev->comp_eqs[i]);
		kfree(dev->comp_eqs);
		dev->comp_eqs = NULL;
	}
	dev->num_comp_eqs = 0;
	vrnic_eq_free(dev, &dev->async_eq);
}
