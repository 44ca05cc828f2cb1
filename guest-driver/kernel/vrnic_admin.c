// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
/*
 * Admin queue engine (SPEC "Admin queue") and one function per command.
 *
 * Commands are serialized by aq->lock, so at most one is outstanding (well
 * below the ring depth). The device completes a command before the
 * AQ_DOORBELL write returns, so the completion is normally found at once;
 * otherwise the waiter sleeps on aq->wait (woken by MSI-X vector 0) in
 * VRNIC_AQ_POLL_MS slices, polling the ring each time, so a lost interrupt
 * costs a slice and a dead device costs VRNIC_AQ_TIMEOUT_MS, never a hang.
 */
#include <linux/delay.h>
#include <linux/dma-mapping.h>
#include <linux/iopoll.h>
#include <linux/jiffies.h>
#include <linux/sched.h>

#include "vrnic.h"

static int vrnic_aq_status_to_errno(u8 status)
{
	switch (status) {
	case VRNIC_AQ_STATUS_SUCCESS:
		return 0;
	case VRNIC_AQ_STATUS_BAD_FIELD:
	case VRNIC_AQ_STATUS_BAD_SIZE:
	case VRNIC_AQ_STATUS_BAD_STATE:
		return -EINVAL;
	case VRNIC_AQ_STATUS_BAD_HANDLE:
		return -ENOENT;
	case VRNIC_AQ_STATUS_NO_RESOURCES:
		return -ENOMEM;
	case VRNIC_AQ_STATUS_BUSY:
		return -EBUSY;
	case VRNIC_AQ_STATUS_PERMISSION:
		return -EPERM;
	case VRNIC_AQ_STATUS_NOT_SUPPORTED:
		return -EOPNOTSUPP;
	case VRNIC_AQ_STATUS_BAD_ADDRESS:
		return -EFAULT;
	default: /* BAD_OPCODE, INTERNAL and anything unknown */
		return -EIO;
	}
}

/*
 * Reset the device (SPEC "Reset") and wait until it reports neither READY nor
 * FATAL. The only place that resets the device: probe, teardown (remove,
 * function reset, failed probe), a failed enable and every way the admin
 * queue dies (timeout, DEVICE_FATAL, lost synchronization) come through here,
 * @why naming which. A DEVICE_FATAL event calls it from the async EQ's hard
 * IRQ handler, so it busy-waits; the device completes a reset with the
 * write, so the first read normally sees it done.
 *
 * Returns 0 once the device is reset, -ENODEV if it reads as gone (all ones:
 * it cannot touch guest memory either), -ETIMEDOUT if it never finished.
 */
int vrnic_aq_dev_reset(struct vrnic_dev *dev, const char *why)
{
	u32 status;
	int err;

	writel(VRNIC_BAR0_DEV_CTRL_RESET_MASK, dev->regs + VRNIC_BAR0_DEV_CTRL_OFF);
	err = readl_poll_timeout_atomic(dev->regs + VRNIC_BAR0_DEV_STATUS_OFF,
					status,
					status == U32_MAX ||
					!(status & (VRNIC_BAR0_DEV_STATUS_READY_MASK |
						    VRNIC_BAR0_DEV_STATUS_FATAL_MASK)),
					10, VRNIC_RESET_TIMEOUT_US);
	if (status == U32_MAX) {
		dev_warn(&dev->pdev->dev, "reset (%s): the device is gone\n",
			 why);
		return -ENODEV;
	}
	if (err) {
		dev_err(&dev->pdev->dev,
			"reset (%s) timed out: dev_status %#x after %u us\n", why,
			status, VRNIC_RESET_TIMEOUT_US);
		return err;
	}
	dev_dbg(&dev->pdev->dev, "reset (%s) done\n", why);
	return 0;
}

int vrnic_aq_init(struct vrnic_dev *dev)
{
	struct vrnic_aq *aq = &dev->aq;
	struct device *dmadev = vrnic_dma_dev(dev);
	u32 depth, status;
	int err;

	BUILD_BUG_ON(VRNIC_AQ_DEPTH_LOG2 < 1 ||
		     VRNIC_AQ_DEPTH_LOG2 > VRNIC_AQ_DEPTH_LOG2_MAX);
	BUILD_BUG_ON(sizeof(struct vrnic_aq_completion) != VRNIC_ACQ_ENTRY_SIZE);

	mutex_init(&aq->lock);
	init_waitqueue_head(&aq->wait);
	aq->depth_log2 = VRNIC_AQ_DEPTH_LOG2;
	depth = 1U << aq->depth_log2;
	aq->pi = 0;
	aq->ci = 0;
	aq->next_cmd_id = 1;

	/* dma_alloc_coherent() memory is zeroed and at least page aligned. */
	aq->sq = dma_alloc_coherent(dmadev, depth * VRNIC_AQ_ENTRY_SIZE,
				    &aq->sq_dma, GFP_KERNEL);
	if (!aq->sq)
		return -ENOMEM;
	aq->cq = dma_alloc_coherent(dmadev, depth * VRNIC_ACQ_ENTRY_SIZE,
				    &aq->cq_dma, GFP_KERNEL);
	if (!aq->cq) {
		err = -ENOMEM;
		goto err_free_sq;
	}

	writel(lower_32_bits(aq->sq_dma), dev->regs + VRNIC_BAR0_AQ_BASE_LO_OFF);
	writel(upper_32_bits(aq->sq_dma), dev->regs + VRNIC_BAR0_AQ_BASE_HI_OFF);
	writel(lower_32_bits(aq->cq_dma), dev->regs + VRNIC_BAR0_ACQ_BASE_LO_OFF);
	writel(upper_32_bits(aq->cq_dma), dev->regs + VRNIC_BAR0_ACQ_BASE_HI_OFF);
	writel(aq->depth_log2, dev->regs + VRNIC_BAR0_AQ_DEPTH_LOG2_OFF);
	writel(VRNIC_BAR0_DEV_CTRL_ENABLE_MASK, dev->regs + VRNIC_BAR0_DEV_CTRL_OFF);

	err = readl_poll_timeout(dev->regs + VRNIC_BAR0_DEV_STATUS_OFF, status,
				 status & (VRNIC_BAR0_DEV_STATUS_READY_MASK |
					   VRNIC_BAR0_DEV_STATUS_FATAL_MASK),
				 10, VRNIC_READY_TIMEOUT_US);
	if (err || !(status & VRNIC_BAR0_DEV_STATUS_READY_MASK) ||
	    (status & VRNIC_BAR0_DEV_STATUS_FATAL_MASK)) {
		dev_err(&dev->pdev->dev,
			"device not ready after enable: status %#x fatal_code %u\n",
			status, readl(dev->regs + VRNIC_BAR0_FATAL_CODE_OFF));
		err = -EIO;
		goto err_reset;
	}
	return 0;

err_reset:
	/* The device must forget the ring addresses before they are freed. */
	vrnic_aq_dev_reset(dev, "enable failed");
	dma_free_coherent(dmadev, depth * VRNIC_ACQ_ENTRY_SIZE, aq->cq, aq->cq_dma);
	aq->cq = NULL;
err_free_sq:
	dma_free_coherent(dmadev, depth * VRNIC_AQ_ENTRY_SIZE, aq->sq, aq->sq_dma);
	aq->sq = NULL;
	return err;
}

/* Only after the device was reset: it no longer knows the ring addresses. */
void vrnic_aq_free(struct vrnic_dev *dev)
{
	struct vrnic_aq *aq = &dev->aq;
	struct device *dmadev = vrnic_dma_dev(dev);
	u32 depth = 1U << aq->depth_log2;

	if (aq->cq)
		dma_free_coherent(dmadev, depth * VRNIC_ACQ_ENTRY_SIZE, aq->cq,
				  aq->cq_dma);
	if (aq->sq)
		dma_free_coherent(dmadev, depth * VRNIC_AQ_ENTRY_SIZE, aq->sq,
				  aq->sq_dma);
	aq->cq = NULL;
	aq->sq = NULL;
}

void vrnic_aq_wake(struct vrnic_dev *dev)
{
	wake_up(&dev->aq.wait);
}

/*
 * The admin queue can no longer be trusted (timeout, fatal error, lost
 * synchronization). Reset the device so that it never touches guest memory
 * again: every later command fails at once with -EIO and every destroy path
 * may free host memory safely.
 */
void vrnic_aq_mark_dead(struct vrnic_dev *dev, const char *why)
{
	u32 code, rule;

	if (test_and_set_bit(VRNIC_FLAG_DEAD, &dev->flags))
		return;

	code = readl(dev->regs + VRNIC_BAR0_FATAL_CODE_OFF);
	dev_err(&dev->pdev->dev,
		"%s: dev_status %#x fatal_code %u (%s); resetting the device\n",
		why, readl(dev->regs + VRNIC_BAR0_DEV_STATUS_OFF), code,
		vrnic_fatal_code_name(code));
	/* Strict contract checking: the rule this driver broke (SPEC.md). */
	if (code == VRNIC_FATAL_CODE_CONTRACT) {
		rule = readl(dev->regs + VRNIC_BAR0_FATAL_DETAIL_OFF);
		dev_err(&dev->pdev->dev,
			"broke contract rule %u %s (SPEC.md %s)\n", rule,
			vrnic_rule_name(rule), vrnic_rule_section(rule));
	}
	vrnic_aq_dev_reset(dev, why);
	vrnic_aq_wake(dev);

	if (test_bit(VRNIC_FLAG_REGISTERED, &dev->flags)) {
		struct ib_event event = {
			.device = &dev->ibdev,
			.event = IB_EVENT_DEVICE_FATAL,
			.element.port_num = VRNIC_PORT_NUM,
		};

		ib_dispatch_event(&event);
	}
}

/* Phase of the entry at free-running index ci: 1 on the first pass. */
static bool vrnic_aq_comp_ready(struct vrnic_aq *aq)
{
	struct vrnic_aq_completion *comp;
	u8 phase = ((aq->ci >> aq->depth_log2) & 1) ^ 1;

	comp = &aq->cq[aq->ci & ((1U << aq->depth_log2) - 1)];
	return (READ_ONCE(comp->owner) & 1) == phase;
}

static bool vrnic_dev_status_fatal(struct vrnic_dev *dev)
{
	u32 status = readl(dev->regs + VRNIC_BAR0_DEV_STATUS_OFF);

	/* All ones: the device is gone (surprise removal, VMM died). */
	return status == U32_MAX || (status & VRNIC_BAR0_DEV_STATUS_FATAL_MASK);
}

/* Wait for the completion at aq->ci and copy it out. Called with aq->lock. */
static int vrnic_aq_wait(struct vrnic_dev *dev, struct vrnic_aq_completion *out)
{
	struct vrnic_aq *aq = &dev->aq;
	unsigned long deadline = jiffies + msecs_to_jiffies(VRNIC_AQ_TIMEOUT_MS);
	struct vrnic_aq_completion *comp;

	while (!vrnic_aq_comp_ready(aq)) {
		if (vrnic_is_dead(dev))
			return -EIO;
		if (time_after(jiffies, deadline)) {
			vrnic_aq_mark_dead(dev, "admin command timed out");
			return -ETIMEDOUT;
		}
		wait_event_timeout(aq->wait,
				   vrnic_aq_comp_ready(aq) || vrnic_is_dead(dev),
				   msecs_to_jiffies(VRNIC_AQ_POLL_MS));
		if (!vrnic_aq_comp_ready(aq) && vrnic_dev_status_fatal(dev)) {
			vrnic_aq_mark_dead(dev, "device fatal during admin command");
			return -EIO;
		}
	}

	/* owner was read first (acquire): the rest of the entry is valid. */
	dma_rmb();
	comp = &aq->cq[aq->ci & ((1U << aq->depth_log2) - 1)];
	memcpy(out, comp, sizeof(*out));
	aq->ci++;
	return 0;
}

/*
 * Execute one command (VRNIC_AQ_ENTRY_SIZE bytes starting with an aq_header,
 * every reserved field zero). On success the completion is copied to @comp.
 */
static int vrnic_aq_exec(struct vrnic_dev *dev, void *cmd,
			 struct vrnic_aq_completion *comp)
{
	struct vrnic_aq *aq = &dev->aq;
	struct vrnic_aq_header *hdr = cmd;
	u8 opcode = hdr->opcode;
	u16 err_offset;
	u32 cmd_id;
	int err;

	mutex_lock(&aq->lock);
	if (vrnic_is_dead(dev)) {
		err = -EIO;
		goto out_unlock;
	}

	cmd_id = aq->next_cmd_id++;
	hdr->cmd_id = cpu_to_le32(cmd_id);
	memcpy(aq->sq + (aq->pi & ((1U << aq->depth_log2) - 1)) * VRNIC_AQ_ENTRY_SIZE,
	       cmd, VRNIC_AQ_ENTRY_SIZE);
	aq->pi++;
	/* writel() orders the command's memory writes before the doorbell. */
	writel(aq->pi, dev->regs + VRNIC_BAR0_AQ_DOORBELL_OFF);

	err = vrnic_aq_wait(dev, comp);
	if (err) {
		dev_err(&dev->pdev->dev, "admin %s (cmd_id %u) failed: %d\n",
			vrnic_aq_opcode_name(opcode), cmd_id, err);
		goto out_unlock;
	}

	if (le32_to_cpu(comp->cmd_id) != cmd_id || comp->opcode != opcode) {
		dev_err(&dev->pdev->dev,
			"admin completion mismatch: got cmd_id %u opcode %u, expected %u %u\n",
			le32_to_cpu(comp->cmd_id), comp->opcode, cmd_id, opcode);
		vrnic_aq_mark_dead(dev, "admin queue out of sync");
		err = -EIO;
		goto out_unlock;
	}

	err = vrnic_aq_status_to_errno(comp->status);
	if (err) {
		err_offset = le16_to_cpu(comp->err_offset);
		if (err_offset == VRNIC_AQ_ERR_OFFSET_NONE)
			dev_warn_ratelimited(&dev->pdev->dev,
					     "admin %s failed: status %s (%u)\n",
					     vrnic_aq_opcode_name(opcode),
					     vrnic_aq_status_name(comp->status),
					     comp->status);
		else
			dev_warn_ratelimited(&dev->pdev->dev,
					     "admin %s failed: status %s (%u) at command offset %u\n",
					     vrnic_aq_opcode_name(opcode),
					     vrnic_aq_status_name(comp->status),
					     comp->status, err_offset);
	}

out_unlock:
	mutex_unlock(&aq->lock);
	return err;
}

static void vrnic_cmd_init(void *cmd, u8 opcode)
{
	struct vrnic_aq_header *hdr = cmd;

	memset(cmd, 0, VRNIC_AQ_ENTRY_SIZE);
	hdr->opcode = opcode;
}

/*
 * Run @cmd with its answer in a coherent buffer, named by the command's
 * @out_addr and @out_len fields; on success copy the @len bytes to @out and,
 * if @result0 is not NULL, the completion's result0 to it.
 */
static int vrnic_aq_exec_out(struct vrnic_dev *dev, void *cmd, __le64 *out_addr,
			     __le32 *out_len, void *out, size_t len,
			     u32 *result0)
{
	struct device *dmadev = vrnic_dma_dev(dev);
	struct vrnic_aq_completion comp;
	dma_addr_t buf_dma;
	void *buf;
	int err;

	buf = dma_alloc_coherent(dmadev, len, &buf_dma, GFP_KERNEL);
	if (!buf)
		return -ENOMEM;

	*out_addr = cpu_to_le64(buf_dma);
	*out_len = cpu_to_le32(len);
	err = vrnic_aq_exec(dev, cmd, &comp);
	if (!err) {
		memcpy(out, buf, len);
		if (result0)
			*result0 = le32_to_cpu(comp.result0);
	}
	/*
	 * A timed-out command may still be writing: vrnic_aq_mark_dead() reset
	 * the device first, so the buffer can go.
	 */
	dma_free_coherent(dmadev, len, buf, buf_dma);
	return err;
}

/* QUERY_DEVICE or QUERY_PORT into @out. */
static int vrnic_cmd_query(struct vrnic_dev *dev, u8 opcode, u8 port,
			   void *out, size_t len)
{
	struct vrnic_cmd_query cmd;

	vrnic_cmd_init(&cmd, opcode);
	cmd.port = port;
	return vrnic_aq_exec_out(dev, &cmd, &cmd.out_addr, &cmd.out_len, out,
				 len, NULL);
}

int vrnic_cmd_query_device(struct vrnic_dev *dev, struct vrnic_device_attr *out)
{
	return vrnic_cmd_query(dev, VRNIC_AQ_OPCODE_QUERY_DEVICE, 0, out,
			       sizeof(*out));
}

int vrnic_cmd_query_port(struct vrnic_dev *dev, u8 port,
			 struct vrnic_port_attr *out)
{
	return vrnic_cmd_query(dev, VRNIC_AQ_OPCODE_QUERY_PORT, port, out,
			       sizeof(*out));
}

/*
 * QUERY_COUNTERS of the port (@scope PORT) or of QP @qpn (@scope QP, any
 * context's: the kernel asks as KERNEL_UCTX): up to @n little-endian values
 * into @out (zero beyond what the device wrote); *@count is the number the
 * device says it wrote (result0, unchecked).
 */
int vrnic_cmd_query_counters(struct vrnic_dev *dev, u8 scope, u32 qpn,
			     __le64 *out, u32 n, u32 *count)
{
	struct vrnic_cmd_query_counters cmd;

	vrnic_cmd_init(&cmd, VRNIC_AQ_OPCODE_QUERY_COUNTERS);
	cmd.scope = scope;
	if (scope == VRNIC_COUNTER_SCOPE_PORT)
		cmd.port = VRNIC_PORT_NUM;
	else
		cmd.qpn = cpu_to_le32(qpn);
	cmd.uctx = cpu_to_le32(VRNIC_KERNEL_UCTX);
	return vrnic_aq_exec_out(dev, &cmd, &cmd.out_addr, &cmd.out_len, out,
				 n * sizeof(*out), count);
}

static int vrnic_cmd_handle(struct vrnic_dev *dev, u8 opcode, u32 uctx,
			    u32 handle, u32 *result0)
{
	struct vrnic_aq_completion comp;
	struct vrnic_cmd_handle cmd;
	int err;

	vrnic_cmd_init(&cmd, opcode);
	cmd.handle = cpu_to_le32(handle);
	cmd.uctx = cpu_to_le32(uctx);
	err = vrnic_aq_exec(dev, &cmd, &comp);
	if (!err && result0)
		*result0 = le32_to_cpu(comp.result0);
	return err;
}

/*
 * A created object's number (or doorbell slot or page) at or beyond @limit:
 * the answer cannot be the new object's, and undoing the command by that
 * number could destroy another object. Reset the device (it then forgets the
 * new object too) and fail the command.
 */
static int vrnic_aq_check_result(struct vrnic_dev *dev, u8 opcode,
				 const char *what, u32 value, u32 limit)
{
	if (value < limit)
		return 0;
	dev_err(&dev->pdev->dev, "admin %s returned %s %u, beyond %u\n",
		vrnic_aq_opcode_name(opcode), what, value, limit);
	vrnic_aq_mark_dead(dev, "invalid admin result");
	return -EIO;
}

/* Contexts are managed by the kernel: it acts as KERNEL_UCTX for them. */
int vrnic_cmd_alloc_uctx(struct vrnic_dev *dev, u32 *uctx, u32 *db_page)
{
	struct vrnic_aq_completion comp;
	struct vrnic_cmd_handle cmd;
	int err;

	vrnic_cmd_init(&cmd, VRNIC_AQ_OPCODE_ALLOC_UCTX);
	cmd.uctx = cpu_to_le32(VRNIC_KERNEL_UCTX);
	err = vrnic_aq_exec(dev, &cmd, &comp);
	if (!err) {
		*uctx = le32_to_cpu(comp.result0);
		*db_page = le32_to_cpu(comp.result1);
	}
	return err;
}

int vrnic_cmd_dealloc_uctx(struct vrnic_dev *dev, u32 uctx)
{
	return vrnic_cmd_handle(dev, VRNIC_AQ_OPCODE_DEALLOC_UCTX,
				VRNIC_KERNEL_UCTX, uctx, NULL);
}

int vrnic_cmd_alloc_pd(struct vrnic_dev *dev, u32 uctx, u32 *pdn)
{
	int err = vrnic_cmd_handle(dev, VRNIC_AQ_OPCODE_ALLOC_PD, uctx, uctx, pdn);

	return err ?: vrnic_aq_check_result(dev, VRNIC_AQ_OPCODE_ALLOC_PD, "PDN",
					    *pdn, dev->lim.max_pd);
}

int vrnic_cmd_dealloc_pd(struct vrnic_dev *dev, u32 uctx, u32 pdn)
{
	return vrnic_cmd_handle(dev, VRNIC_AQ_OPCODE_DEALLOC_PD, uctx, pdn, NULL);
}

int vrnic_cmd_reg_mr(struct vrnic_dev *dev, u32 uctx, u32 pdn, u32 access,
		     u64 iova, u64 length, const struct vrnic_page_list *pages,
		     u32 *mkey)
{
	struct vrnic_aq_completion comp;
	struct vrnic_cmd_reg_mr cmd;
	int err;

	vrnic_cmd_init(&cmd, VRNIC_AQ_OPCODE_REG_MR);
	cmd.pdn = cpu_to_le32(pdn);
	cmd.access = cpu_to_le32(access);
	cmd.iova = cpu_to_le64(iova);
	cmd.length = cpu_to_le64(length);
	cmd.pages = *pages;
	cmd.uctx = cpu_to_le32(uctx);
	err = vrnic_aq_exec(dev, &cmd, &comp);
	if (!err)
		*mkey = le32_to_cpu(comp.result0);
	return err;
}

int vrnic_cmd_dereg_mr(struct vrnic_dev *dev, u32 uctx, u32 mkey)
{
	return vrnic_cmd_handle(dev, VRNIC_AQ_OPCODE_DEREG_MR, uctx, mkey, NULL);
}

/* Only the fields @p->flags names are sent; the others must be zero. */
int vrnic_cmd_rereg_mr(struct vrnic_dev *dev,
		       const struct vrnic_rereg_mr_params *p)
{
	struct vrnic_aq_completion comp;
	struct vrnic_cmd_rereg_mr cmd;
	int err;

	vrnic_cmd_init(&cmd, VRNIC_AQ_OPCODE_REREG_MR);
	cmd.mkey = cpu_to_le32(p->mkey);
	cmd.flags = cpu_to_le32(p->flags);
	cmd.uctx = cpu_to_le32(p->uctx);
	if (p->flags & VRNIC_REREG_FLAGS_CHANGE_PD)
		cmd.pdn = cpu_to_le32(p->pdn);
	if (p->flags & VRNIC_REREG_FLAGS_CHANGE_ACCESS)
		cmd.access = cpu_to_le32(p->access);
	if (p->flags & VRNIC_REREG_FLAGS_CHANGE_TRANSLATION) {
		cmd.iova = cpu_to_le64(p->iova);
		cmd.length = cpu_to_le64(p->length);
		cmd.pages = p->pages;
	}
	err = vrnic_aq_exec(dev, &cmd, &comp);
	/* The key stays; a device that says otherwise is only logged. */
	if (!err && le32_to_cpu(comp.result0) != p->mkey)
		dev_warn_ratelimited(&dev->pdev->dev,
				     "REREG_MR %#x answered key %#x\n", p->mkey,
				     le32_to_cpu(comp.result0));
	return err;
}

int vrnic_cmd_create_cq(struct vrnic_dev *dev, u32 uctx, u32 eqn, u8 depth_log2,
			const struct vrnic_page_list *ring, u32 *cqn,
			struct vrnic_db_loc *db)
{
	struct vrnic_aq_completion comp;
	struct vrnic_cmd_create_cq cmd;
	int err;

	vrnic_cmd_init(&cmd, VRNIC_AQ_OPCODE_CREATE_CQ);
	cmd.uctx = cpu_to_le32(uctx);
	cmd.eqn = cpu_to_le32(eqn);
	cmd.depth_log2 = depth_log2;
	cmd.ring = *ring;
	err = vrnic_aq_exec(dev, &cmd, &comp);
	if (err)
		return err;
	*cqn = le32_to_cpu(comp.result0);
	db->slot = le32_to_cpu(comp.result1);
	db->page = le32_to_cpu(comp.result2);
	return vrnic_aq_check_result(dev, cmd.hdr.opcode, "CQN", *cqn,
				     dev->lim.max_cq) ?:
	       vrnic_aq_check_result(dev, cmd.hdr.opcode, "doorbell page",
				     db->page, VRNIC_DB_PAGES);
}

int vrnic_cmd_destroy_cq(struct vrnic_dev *dev, u32 uctx, u32 cqn)
{
	return vrnic_cmd_handle(dev, VRNIC_AQ_OPCODE_DESTROY_CQ, uctx, cqn, NULL);
}

/* @moved: the number of CQEs the device moved to the new ring. */
int vrnic_cmd_resize_cq(struct vrnic_dev *dev, u32 uctx, u32 cqn, u8 depth_log2,
			u32 ci, const struct vrnic_page_list *ring, u32 *moved)
{
	struct vrnic_aq_completion comp;
	struct vrnic_cmd_resize_cq cmd;
	int err;

	vrnic_cmd_init(&cmd, VRNIC_AQ_OPCODE_RESIZE_CQ);
	cmd.cqn = cpu_to_le32(cqn);
	cmd.uctx = cpu_to_le32(uctx);
	cmd.depth_log2 = depth_log2;
	cmd.ci = cpu_to_le32(ci);
	cmd.ring = *ring;
	err = vrnic_aq_exec(dev, &cmd, &comp);
	if (!err)
		*moved = le32_to_cpu(comp.result0);
	return err;
}

int vrnic_cmd_create_eq(struct vrnic_dev *dev, u8 depth_log2, u8 flags,
			u16 vector, const struct vrnic_page_list *ring,
			u32 *eqn, struct vrnic_db_loc *db)
{
	struct vrnic_aq_completion comp;
	struct vrnic_cmd_create_eq cmd;
	int err;

	vrnic_cmd_init(&cmd, VRNIC_AQ_OPCODE_CREATE_EQ);
	cmd.depth_log2 = depth_log2;
	cmd.flags = flags;
	cmd.msix_vector = cpu_to_le16(vector);
	cmd.ring = *ring;
	err = vrnic_aq_exec(dev, &cmd, &comp);
	if (!err) {
		*eqn = le32_to_cpu(comp.result0);
		db->slot = le32_to_cpu(comp.result1);
		db->page = le32_to_cpu(comp.result2);
	}
	return err;
}

int vrnic_cmd_destroy_eq(struct vrnic_dev *dev, u32 eqn)
{
	return vrnic_cmd_handle(dev, VRNIC_AQ_OPCODE_DESTROY_EQ,
				VRNIC_KERNEL_UCTX, eqn, NULL);
}

int vrnic_cmd_create_qp(struct vrnic_dev *dev,
			const struct vrnic_create_qp_params *p,
			u32 *qpn, struct vrnic_db_loc *db)
{
	struct vrnic_aq_completion comp;
	struct vrnic_cmd_create_qp cmd;
	int err;

	vrnic_cmd_init(&cmd, VRNIC_AQ_OPCODE_CREATE_QP);
	cmd.uctx = cpu_to_le32(p->uctx);
	cmd.pdn = cpu_to_le32(p->pdn);
	cmd.send_cqn = cpu_to_le32(p->send_cqn);
	cmd.recv_cqn = cpu_to_le32(p->recv_cqn);
	cmd.qp_type = p->qp_type;
	cmd.sq_depth_log2 = p->sq_depth_log2;
	cmd.rq_depth_log2 = p->rq_depth_log2;
	cmd.sq_wqe_shift = p->sq_wqe_shift;
	cmd.rq_wqe_shift = p->rq_wqe_shift;
	cmd.max_send_sge = p->max_send_sge;
	cmd.max_recv_sge = p->max_recv_sge;
	cmd.max_inline = cpu_to_le32(p->max_inline);
	cmd.flags = p->flags;
	cmd.srqn = cpu_to_le32(p->srqn);
	cmd.sq_ring = p->sq_ring;
	cmd.rq_ring = p->rq_ring;
	cmd.xrcdn = cpu_to_le32(p->xrcdn);
	err = vrnic_aq_exec(dev, &cmd, &comp);
	if (!err) {
		*qpn = le32_to_cpu(comp.result0);
		db->slot = le32_to_cpu(comp.result1);
		db->page = le32_to_cpu(comp.result2);
	}
	return err;
}

/* @dmac: RoCE mode with an AV, the destination MAC; NULL otherwise. */
int vrnic_cmd_modify_qp(struct vrnic_dev *dev, u32 uctx, u32 qpn, u32 attr_mask,
			const struct vrnic_qp_attr *attr, const u8 *dmac)
{
	struct vrnic_aq_completion comp;
	struct vrnic_cmd_modify_qp cmd;

	vrnic_cmd_init(&cmd, VRNIC_AQ_OPCODE_MODIFY_QP);
	cmd.qpn = cpu_to_le32(qpn);
	cmd.attr_mask = cpu_to_le32(attr_mask);
	cmd.attr = *attr;
	cmd.uctx = cpu_to_le32(uctx);
	if (dmac)
		memcpy(cmd.dmac, dmac, sizeof(cmd.dmac));
	return vrnic_aq_exec(dev, &cmd, &comp);
}

int vrnic_cmd_query_qp(struct vrnic_dev *dev, u32 uctx, u32 qpn,
		       struct vrnic_qp_attr *out)
{
	struct vrnic_cmd_modify_qp cmd;

	vrnic_cmd_init(&cmd, VRNIC_AQ_OPCODE_QUERY_QP);
	cmd.qpn = cpu_to_le32(qpn);
	cmd.uctx = cpu_to_le32(uctx);
	return vrnic_aq_exec_out(dev, &cmd, &cmd.out_addr, &cmd.out_len, out,
				 sizeof(*out), NULL);
}

int vrnic_cmd_destroy_qp(struct vrnic_dev *dev, u32 uctx, u32 qpn)
{
	return vrnic_cmd_handle(dev, VRNIC_AQ_OPCODE_DESTROY_QP, uctx, qpn, NULL);
}

/* Set GID table entry @index (@gid non-NULL, @gid_type ROCE_V2) or clear it. */
int vrnic_cmd_set_gid(struct vrnic_dev *dev, u8 index, u8 gid_type,
		      const union ib_gid *gid)
{
	struct vrnic_aq_completion comp;
	struct vrnic_cmd_set_gid cmd;

	vrnic_cmd_init(&cmd, VRNIC_AQ_OPCODE_SET_GID);
	cmd.port = VRNIC_PORT_NUM;
	cmd.index = index;
	cmd.uctx = cpu_to_le32(VRNIC_KERNEL_UCTX);
	if (gid) {
		cmd.gid_type = gid_type;
		cmd.valid = 1;
		memcpy(cmd.gid, gid->raw, sizeof(cmd.gid));
	}
	return vrnic_aq_exec(dev, &cmd, &comp);
}

int vrnic_cmd_alloc_mr(struct vrnic_dev *dev, u32 pdn, u32 max_pages, u32 *mkey)
{
	struct vrnic_aq_completion comp;
	struct vrnic_cmd_alloc_mr cmd;
	int err;

	vrnic_cmd_init(&cmd, VRNIC_AQ_OPCODE_ALLOC_MR);
	cmd.pdn = cpu_to_le32(pdn);
	cmd.uctx = cpu_to_le32(VRNIC_KERNEL_UCTX);
	cmd.max_pages = cpu_to_le32(max_pages);
	err = vrnic_aq_exec(dev, &cmd, &comp);
	if (!err)
		*mkey = le32_to_cpu(comp.result0);
	return err;
}

int vrnic_cmd_alloc_mw(struct vrnic_dev *dev, u32 uctx, u32 pdn, u8 mw_type,
		       u32 *rkey)
{
	struct vrnic_aq_completion comp;
	struct vrnic_cmd_alloc_mw cmd;
	int err;

	vrnic_cmd_init(&cmd, VRNIC_AQ_OPCODE_ALLOC_MW);
	cmd.pdn = cpu_to_le32(pdn);
	cmd.uctx = cpu_to_le32(uctx);
	cmd.mw_type = mw_type;
	err = vrnic_aq_exec(dev, &cmd, &comp);
	if (!err)
		*rkey = le32_to_cpu(comp.result0);
	return err;
}

int vrnic_cmd_dealloc_mw(struct vrnic_dev *dev, u32 uctx, u32 rkey)
{
	return vrnic_cmd_handle(dev, VRNIC_AQ_OPCODE_DEALLOC_MW, uctx, rkey, NULL);
}

int vrnic_cmd_create_srq(struct vrnic_dev *dev,
			 const struct vrnic_create_srq_params *p, u32 *srqn,
			 struct vrnic_db_loc *db)
{
	struct vrnic_aq_completion comp;
	struct vrnic_cmd_create_srq cmd;
	int err;

	vrnic_cmd_init(&cmd, VRNIC_AQ_OPCODE_CREATE_SRQ);
	cmd.uctx = cpu_to_le32(p->uctx);
	cmd.pdn = cpu_to_le32(p->pdn);
	cmd.depth_log2 = p->depth_log2;
	cmd.wqe_shift = p->wqe_shift;
	cmd.max_sge = p->max_sge;
	cmd.srq_type = p->srq_type;
	cmd.xrcdn = cpu_to_le32(p->xrcdn);
	cmd.cqn = cpu_to_le32(p->cqn);
	cmd.ring = p->ring;
	err = vrnic_aq_exec(dev, &cmd, &comp);
	if (err)
		return err;
	*srqn = le32_to_cpu(comp.result0);
	db->slot = le32_to_cpu(comp.result1);
	db->page = le32_to_cpu(comp.result2);
	return vrnic_aq_check_result(dev, cmd.hdr.opcode, "SRQN", *srqn,
				     VRNIC_MAX_SRQ) ?:
	       vrnic_aq_check_result(dev, cmd.hdr.opcode, "doorbell page",
				     db->page, VRNIC_DB_PAGES);
}

int vrnic_cmd_modify_srq(struct vrnic_dev *dev, u32 uctx, u32 srqn,
			 u32 attr_mask, u32 srq_limit)
{
	struct vrnic_aq_completion comp;
	struct vrnic_cmd_modify_srq cmd;

	vrnic_cmd_init(&cmd, VRNIC_AQ_OPCODE_MODIFY_SRQ);
	cmd.srqn = cpu_to_le32(srqn);
	cmd.attr_mask = cpu_to_le32(attr_mask);
	cmd.attr.srq_limit = cpu_to_le32(srq_limit);
	cmd.uctx = cpu_to_le32(uctx);
	return vrnic_aq_exec(dev, &cmd, &comp);
}

int vrnic_cmd_query_srq(struct vrnic_dev *dev, u32 uctx, u32 srqn,
			struct vrnic_srq_attr *out)
{
	struct vrnic_cmd_modify_srq cmd;

	vrnic_cmd_init(&cmd, VRNIC_AQ_OPCODE_QUERY_SRQ);
	cmd.srqn = cpu_to_le32(srqn);
	cmd.uctx = cpu_to_le32(uctx);
	return vrnic_aq_exec_out(dev, &cmd, &cmd.out_addr, &cmd.out_len, out,
				 sizeof(*out), NULL);
}

int vrnic_cmd_destroy_srq(struct vrnic_dev *dev, u32 uctx, u32 srqn)
{
	return vrnic_cmd_handle(dev, VRNIC_AQ_OPCODE_DESTROY_SRQ, uctx, srqn, NULL);
}

/* XRC domains belong to the kernel context, whoever opens them (SPEC "XRC"). */
int vrnic_cmd_alloc_xrcd(struct vrnic_dev *dev, u32 *xrcdn)
{
	return vrnic_cmd_handle(dev, VRNIC_AQ_OPCODE_ALLOC_XRCD,
				VRNIC_KERNEL_UCTX, 0, xrcdn);
}

int vrnic_cmd_dealloc_xrcd(struct vrnic_dev *dev, u32 xrcdn)
{
	return vrnic_cmd_handle(dev, VRNIC_AQ_OPCODE_DEALLOC_XRCD,
				VRNIC_KERNEL_UCTX, xrcdn, NULL);
}
