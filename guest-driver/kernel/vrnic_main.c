// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
/*
 * PCI probe/remove and ib_device registration.
 *
 * Bring-up (SPEC "Bring-up"): map BARs, check VERSION, read limits, reset,
 * start the admin queue, QUERY_DEVICE/QUERY_PORT, allocate MSI-X vectors,
 * create the EQs, request the IRQs, register the ib_device.
 *
 * Teardown, also used to unwind a failed probe: unregister (the core destroys
 * every user object: QPs, then CQs, MRs, PDs, contexts), destroy the EQs,
 * reset the device so it never touches guest memory again, free the IRQs,
 * then free the memory the device knew about. Every reset goes through the
 * admin queue engine, vrnic_aq_dev_reset().
 *
 * A function reset (reset_prepare/reset_done) is teardown, FLR by the PCI
 * core, then bring-up again with a new ib_device.
 *
 * The link mode (PORT_INFO.LINK_ETH) picks the verbs: IB mode has the user
 * data path only (kverbs_provider stays false, so ib_mad, ib_cm, IPoIB and
 * rdma_cm leave the device alone); RoCE mode adds the kernel data path, GIDs
 * and the paired net_device, which ib_mad, ib_cm and rdma_cm need.
 */
#include <linux/cpumask.h>
#include <linux/dma-mapping.h>
#include <linux/interrupt.h>
#include <linux/log2.h>
#include <linux/module.h>
#include <linux/pci.h>

#include "vrnic.h"

MODULE_DESCRIPTION("vrnic software RDMA HCA (vfio-user) driver");
MODULE_LICENSE("GPL");

static const struct pci_device_id vrnic_pci_table[] = {
	{ PCI_DEVICE(VRNIC_PCI_VENDOR_ID, VRNIC_PCI_DEVICE_ID) },
	{ }
};
MODULE_DEVICE_TABLE(pci, vrnic_pci_table);

static u32 vrnic_rd(struct vrnic_dev *dev, u32 off)
{
	return readl(dev->regs + off);
}

static int vrnic_check_version(struct vrnic_dev *dev)
{
	u32 version = vrnic_rd(dev, VRNIC_BAR0_VERSION_OFF);
	u32 major = (version & VRNIC_BAR0_VERSION_MAJOR_MASK) >>
		    VRNIC_BAR0_VERSION_MAJOR_SHIFT;
	u32 minor = (version & VRNIC_BAR0_VERSION_MINOR_MASK) >>
		    VRNIC_BAR0_VERSION_MINOR_SHIFT;

	if (version == U32_MAX || major != VRNIC_VERSION_MAJOR) {
		dev_err(&dev->pdev->dev,
			"unsupported interface version %u.%u (driver speaks %u.x)\n",
			major, minor, VRNIC_VERSION_MAJOR);
		return -ENODEV;
	}
	writel(VRNIC_VERSION_MAJOR << VRNIC_BAR0_VERSION_MAJOR_SHIFT |
	       VRNIC_VERSION_MINOR << VRNIC_BAR0_VERSION_MINOR_SHIFT,
	       dev->regs + VRNIC_BAR0_DRIVER_VERSION_OFF);
	dev_info(&dev->pdev->dev, "vrnic interface %u.%u\n", major, minor);
	return 0;
}

/* Read the limit registers and refuse values the driver cannot work with. */
static int vrnic_read_limits(struct vrnic_dev *dev)
{
	struct vrnic_limits *lim = &dev->lim;

	lim->caps = vrnic_rd(dev, VRNIC_BAR0_CAPS_OFF);
	lim->max_qp = vrnic_rd(dev, VRNIC_BAR0_MAX_QP_OFF);
	lim->max_cq = vrnic_rd(dev, VRNIC_BAR0_MAX_CQ_OFF);
	lim->max_mr = vrnic_rd(dev, VRNIC_BAR0_MAX_MR_OFF);
	lim->max_pd = vrnic_rd(dev, VRNIC_BAR0_MAX_PD_OFF);
	lim->max_qp_wr = vrnic_rd(dev, VRNIC_BAR0_MAX_QP_WR_OFF);
	lim->max_cqe = vrnic_rd(dev, VRNIC_BAR0_MAX_CQE_OFF);
	lim->max_sge = min_t(u32, vrnic_rd(dev, VRNIC_BAR0_MAX_SGE_OFF), U8_MAX);
	lim->max_inline = vrnic_rd(dev, VRNIC_BAR0_MAX_INLINE_OFF);
	lim->max_msg_size = vrnic_rd(dev, VRNIC_BAR0_MAX_MSG_SIZE_OFF);
	lim->max_qp_rd_atom = min_t(u32, vrnic_rd(dev, VRNIC_BAR0_MAX_QP_RD_ATOM_OFF),
				    U8_MAX);
	lim->max_eq = vrnic_rd(dev, VRNIC_BAR0_MAX_EQ_OFF);
	lim->max_uctx = min_t(u32, vrnic_rd(dev, VRNIC_BAR0_MAX_UCTX_OFF),
			      VRNIC_DB_PAGES - 1);
	lim->page_size_cap = vrnic_rd(dev, VRNIC_BAR0_PAGE_SIZE_CAP_OFF) &
			     VRNIC_PAGE_SHIFT_MASK;
	lim->max_mr_size = (u64)vrnic_rd(dev, VRNIC_BAR0_MAX_MR_SIZE_HI_OFF) << 32 |
			   vrnic_rd(dev, VRNIC_BAR0_MAX_MR_SIZE_LO_OFF);

	if (!is_power_of_2(lim->max_qp_wr) || lim->max_qp_wr < 2 ||
	    !is_power_of_2(lim->max_cqe) || lim->max_cqe < 2 ||
	    !lim->max_sge || !lim->max_uctx || lim->max_eq < 2 ||
	    !(lim->page_size_cap & PAGE_SIZE) || !lim->max_mr_size) {
		dev_err(&dev->pdev->dev,
			"unusable limits: max_qp_wr %u max_cqe %u max_sge %u max_uctx %u max_eq %u page_size_cap %#llx max_mr_size %#llx\n",
			lim->max_qp_wr, lim->max_cqe, lim->max_sge, lim->max_uctx,
			lim->max_eq, lim->page_size_cap, lim->max_mr_size);
		return -ENODEV;
	}
	return 0;
}

static void vrnic_warn_mismatch(struct vrnic_dev *dev, const char *name,
				u64 reg, u64 attr)
{
	if (reg != attr)
		dev_warn(&dev->pdev->dev,
			 "QUERY_DEVICE %s %llu differs from register %llu; using the register\n",
			 name, attr, reg);
}

/*
 * The optional features: each only when CAPS announces it, with its limits
 * from QUERY_DEVICE capped by the spec's (a device naming more than the
 * interface allows gets the interface's limit).
 */
static void vrnic_set_ext_attrs(struct vrnic_dev *dev,
				const struct vrnic_device_attr *da)
{
	struct vrnic_limits *lim = &dev->lim;
	struct ib_device_attr *a = &dev->attrs;

	if (vrnic_has_cap(dev, VRNIC_BAR0_CAPS_ATOMICS_MASK) &&
	    da->atomic_cap == VRNIC_ATOMIC_CAP_HCA)
		a->atomic_cap = IB_ATOMIC_HCA;
	if (vrnic_has_cap(dev, VRNIC_BAR0_CAPS_SRQ_MASK)) {
		lim->max_srq = min_t(u32, le32_to_cpu(da->max_srq), VRNIC_MAX_SRQ);
		a->max_srq = lim->max_srq;
		a->max_srq_wr = lim->max_qp_wr;
		a->max_srq_sge = lim->max_sge;
	}
	if (vrnic_has_cap(dev, VRNIC_BAR0_CAPS_MEM_MGT_MASK)) {
		lim->max_fast_reg_pages = min_t(u32, le32_to_cpu(da->max_fast_reg_pages),
						VRNIC_MAX_FAST_REG_PAGES);
		a->max_fast_reg_page_list_len = lim->max_fast_reg_pages;
		if (lim->max_fast_reg_pages)
			a->device_cap_flags |= IB_DEVICE_MEM_MGT_EXTENSIONS;
	}
	if (vrnic_has_cap(dev, VRNIC_BAR0_CAPS_MW_MASK)) {
		lim->max_mw = min_t(u32, le32_to_cpu(da->max_mw), VRNIC_MAX_MW);
		a->max_mw = lim->max_mw;
		if (lim->max_mw)
			a->device_cap_flags |= IB_DEVICE_MEM_WINDOW |
					       IB_DEVICE_MEM_WINDOW_TYPE_2B;
	}
	/* XRC receives through XRC SRQs: nothing without SRQs. */
	if (vrnic_has_cap(dev, VRNIC_BAR0_CAPS_XRC_MASK) && lim->max_srq) {
		lim->max_xrcd = min_t(u32, le32_to_cpu(da->max_xrcd), VRNIC_MAX_XRCD);
		if (lim->max_xrcd)
			a->device_cap_flags |= IB_DEVICE_XRC;
	}
}

/* Build the cached ib_device_attr: identity from QUERY_DEVICE, limits from BAR0. */
static void vrnic_set_attrs(struct vrnic_dev *dev,
			    const struct vrnic_device_attr *da)
{
	struct vrnic_limits *lim = &dev->lim;
	struct ib_device_attr *a = &dev->attrs;

	vrnic_warn_mismatch(dev, "max_qp_wr", lim->max_qp_wr,
			    le32_to_cpu(da->max_qp_wr));
	vrnic_warn_mismatch(dev, "max_cqe", lim->max_cqe, le32_to_cpu(da->max_cqe));
	vrnic_warn_mismatch(dev, "max_sge", lim->max_sge, le32_to_cpu(da->max_sge));
	vrnic_warn_mismatch(dev, "max_inline", lim->max_inline,
			    le32_to_cpu(da->max_inline));
	lim->comp_vectors = le32_to_cpu(da->num_comp_vectors);
	if (da->phys_port_cnt != 1)
		dev_warn(&dev->pdev->dev,
			 "QUERY_DEVICE reports %u ports; using port 1 only\n",
			 da->phys_port_cnt);

	memset(a, 0, sizeof(*a));
	a->fw_ver = le64_to_cpu(da->fw_ver);
	/* Network-order bytes in a little-endian field: pass the bytes through. */
	memcpy(&a->sys_image_guid, &da->sys_image_guid, sizeof(a->sys_image_guid));
	memcpy(&dev->ibdev.node_guid, &da->node_guid, sizeof(dev->ibdev.node_guid));
	a->vendor_id = le32_to_cpu(da->vendor_id);
	a->vendor_part_id = le32_to_cpu(da->vendor_part_id);
	a->hw_ver = le32_to_cpu(da->hw_ver);

	a->max_mr_size = lim->max_mr_size;
	a->page_size_cap = lim->page_size_cap;
	a->max_qp = min_t(u32, lim->max_qp, INT_MAX);
	a->max_qp_wr = lim->max_qp_wr;
	a->max_send_sge = lim->max_sge;
	a->max_recv_sge = lim->max_sge;
	a->max_sge_rd = lim->max_sge;
	a->max_cq = min_t(u32, lim->max_cq, INT_MAX);
	a->max_cqe = lim->max_cqe;
	a->max_mr = min_t(u32, lim->max_mr, INT_MAX);
	a->max_pd = min_t(u32, lim->max_pd, INT_MAX);
	a->max_qp_rd_atom = lim->max_qp_rd_atom;
	a->max_qp_init_rd_atom = lim->max_qp_rd_atom;
	a->max_res_rd_atom = min_t(u64, (u64)a->max_qp * a->max_qp_rd_atom,
				   INT_MAX);
	a->atomic_cap = IB_ATOMIC_NONE;
	a->masked_atomic_cap = IB_ATOMIC_NONE;
	a->max_pkeys = 1;
	/* An AH is driver memory (vrnic_ah.c): the device sets no limit. */
	a->max_ah = INT_MAX;
	a->device_cap_flags = IB_DEVICE_PORT_ACTIVE_EVENT |
			      IB_DEVICE_RC_RNR_NAK_GEN;
	vrnic_set_ext_attrs(dev, da);
	if (dev->roce) {
		/* Kernel users need no MR for their own DMA addresses. */
		a->kernel_cap_flags = IBK_LOCAL_DMA_LKEY;
		dev->ibdev.local_dma_lkey = VRNIC_LOCAL_DMA_LKEY;
	}
}

static int vrnic_query_identity(struct vrnic_dev *dev)
{
	struct vrnic_device_attr da;
	struct vrnic_port_attr pa;
	int err;

	err = vrnic_cmd_query_port(dev, VRNIC_PORT_NUM, &pa);
	if (err)
		return err;
	/* The mode is fixed when the device starts; both places must agree. */
	dev->roce = vrnic_rd(dev, VRNIC_BAR0_PORT_INFO_OFF) &
		    VRNIC_BAR0_PORT_INFO_LINK_ETH_MASK;
	if (pa.link_layer != (dev->roce ? VRNIC_LINK_LAYER_ETHERNET :
				VRNIC_LINK_LAYER_INFINIBAND)) {
		dev_err(&dev->pdev->dev,
			"PORT_INFO.LINK_ETH %u disagrees with QUERY_PORT link layer %u\n",
			dev->roce, pa.link_layer);
		return -ENODEV;
	}
	dev->lid = le16_to_cpu(pa.lid);
	memcpy(dev->gid.raw, pa.gid, sizeof(dev->gid.raw));
	memcpy(dev->mac, pa.mac, sizeof(dev->mac));
	if (dev->roce)
		dev_info(&dev->pdev->dev,
			 "port %u: RoCE v2, pairs with the interface of MAC %pM\n",
			 VRNIC_PORT_NUM, dev->mac);
	else
		dev_info(&dev->pdev->dev, "port %u: LID %u, GID %pI6\n",
			 VRNIC_PORT_NUM, dev->lid, dev->gid.raw);

	err = vrnic_cmd_query_device(dev, &da);
	if (err)
		return err;
	vrnic_set_attrs(dev, &da);
	return 0;
}

/*
 * Vector 0 for admin + async events, then one completion vector per CPU,
 * capped by the device (MSIX_VECTORS, num_comp_vectors, MAX_EQ).
 */
static int vrnic_alloc_vectors(struct vrnic_dev *dev)
{
	u32 want = min3(num_online_cpus(), (unsigned int)VRNIC_MSIX_VECTORS - 1,
			dev->lim.max_eq - 1);
	int nvec;

	if (dev->lim.comp_vectors)
		want = min(want, dev->lim.comp_vectors);

	nvec = pci_alloc_irq_vectors(dev->pdev, 2, 1 + want, PCI_IRQ_MSIX);
	if (nvec < 0) {
		dev_err(&dev->pdev->dev, "cannot allocate MSI-X vectors: %d\n", nvec);
		return nvec;
	}
	dev->num_vectors = nvec;
	return 0;
}

static const struct ib_device_ops vrnic_dev_ops = {
	.owner = THIS_MODULE,
	.driver_id = RDMA_DRIVER_UNKNOWN,
	.uverbs_abi_ver = VRNIC_UVERBS_ABI_VERSION,

	.alloc_mw = vrnic_alloc_mw,
	.alloc_pd = vrnic_alloc_pd,
	.alloc_ucontext = vrnic_alloc_ucontext,
	.alloc_xrcd = vrnic_alloc_xrcd,
	.create_ah = vrnic_create_ah,
	.create_cq = vrnic_create_cq,
	.create_qp = vrnic_create_qp,
	.create_srq = vrnic_create_srq,
	/* The same AV either way: uverbs calls this one for user AHs. */
	.create_user_ah = vrnic_create_ah,
	.dealloc_mw = vrnic_dealloc_mw,
	.dealloc_pd = vrnic_dealloc_pd,
	.dealloc_ucontext = vrnic_dealloc_ucontext,
	.dealloc_xrcd = vrnic_dealloc_xrcd,
	.dereg_mr = vrnic_dereg_mr,
	.destroy_ah = vrnic_destroy_ah,
	.destroy_cq = vrnic_destroy_cq,
	.destroy_qp = vrnic_destroy_qp,
	.destroy_srq = vrnic_destroy_srq,
	.disassociate_ucontext = vrnic_disassociate_ucontext,
	.get_dev_fw_str = vrnic_get_dev_fw_str,
	.get_link_layer = vrnic_get_link_layer,
	.get_port_immutable = vrnic_get_port_immutable,
	.mmap = vrnic_mmap,
	.mmap_free = vrnic_mmap_free,
	.modify_qp = vrnic_modify_qp,
	.modify_srq = vrnic_modify_srq,
	.query_device = vrnic_query_device,
	.query_pkey = vrnic_query_pkey,
	.query_port = vrnic_query_port,
	.query_qp = vrnic_query_qp,
	.query_srq = vrnic_query_srq,
	.reg_user_mr = vrnic_reg_user_mr,
	.rereg_user_mr = vrnic_rereg_user_mr,
	.resize_cq = vrnic_resize_cq,

	INIT_RDMA_OBJ_SIZE(ib_ah, vrnic_ah, ibah),
	INIT_RDMA_OBJ_SIZE(ib_cq, vrnic_cq, ibcq),
	INIT_RDMA_OBJ_SIZE(ib_mw, vrnic_mw, ibmw),
	INIT_RDMA_OBJ_SIZE(ib_pd, vrnic_pd, ibpd),
	INIT_RDMA_OBJ_SIZE(ib_qp, vrnic_qp, ibqp),
	INIT_RDMA_OBJ_SIZE(ib_srq, vrnic_srq, ibsrq),
	INIT_RDMA_OBJ_SIZE(ib_ucontext, vrnic_ucontext, ibuctx),
	INIT_RDMA_OBJ_SIZE(ib_xrcd, vrnic_xrcd, ibxrcd),
};

/* IB mode: one fixed GID, from QUERY_PORT. */
static const struct ib_device_ops vrnic_ib_ops = {
	.query_gid = vrnic_query_gid,
};

/* RoCE mode: GIDs from the paired netdev, and the kernel data path. */
static const struct ib_device_ops vrnic_roce_ops = {
	.add_gid = vrnic_add_gid,
	.alloc_mr = vrnic_alloc_mr,
	.del_gid = vrnic_del_gid,
	.get_dma_mr = vrnic_get_dma_mr,
	.map_mr_sg = vrnic_map_mr_sg,
	.poll_cq = vrnic_poll_cq,
	.post_recv = vrnic_post_recv,
	.post_send = vrnic_post_send,
	.post_srq_recv = vrnic_post_srq_recv,
	.req_notify_cq = vrnic_req_notify_cq,
};

static int vrnic_register(struct vrnic_dev *dev)
{
	struct ib_device *ibdev = &dev->ibdev;
	int err;

	ibdev->node_type = RDMA_NODE_IB_CA;
	ibdev->phys_port_cnt = 1;
	ibdev->num_comp_vectors = dev->num_comp_eqs;
	ibdev->dev.parent = &dev->pdev->dev;
	strscpy(ibdev->node_desc, DRV_NAME, sizeof(ibdev->node_desc));
	ib_set_device_ops(ibdev, &vrnic_dev_ops);
	ib_set_device_ops(ibdev, dev->roce ? &vrnic_roce_ops : &vrnic_ib_ops);
	vrnic_counters_set_ops(dev);

	/*
	 * Pair with the netdev first: registration then fills the GID table
	 * from its addresses (gid_table_setup_one() rescans).
	 */
	if (dev->roce) {
		err = vrnic_netdev_start(dev);
		if (err)
			return err;
	}
	err = ib_register_device(ibdev, DRV_NAME "%d", &dev->pdev->dev);
	if (err) {
		vrnic_netdev_stop(dev);
		return err;
	}
	set_bit(VRNIC_FLAG_REGISTERED, &dev->flags);
	if (dev->roce)
		vrnic_netdev_registered(dev);
	return 0;
}

static void vrnic_unregister(struct vrnic_dev *dev)
{
	/*
	 * No device-level event may be queued to ib_wq after this: clear the
	 * flag, then wait for the async EQ's handler (the only one that
	 * dispatches device-level events) and any admin command that may be
	 * dispatching one.
	 */
	clear_bit(VRNIC_FLAG_REGISTERED, &dev->flags);
	vrnic_eq_sync_irq(&dev->async_eq);
	mutex_lock(&dev->aq.lock);
	mutex_unlock(&dev->aq.lock);
	/* Unpairs (no port events: not registered any more). */
	vrnic_netdev_stop(dev);
	ib_unregister_device(&dev->ibdev);
}

/* Device-level teardown; safe on a partially brought-up device. */
static void vrnic_hw_teardown(struct vrnic_dev *dev)
{
	vrnic_eqs_destroy(dev);
	/* Logged if it fails; the device is gone or will not touch memory. */
	vrnic_aq_dev_reset(dev, "teardown");
	vrnic_eqs_free_irqs(dev);
	vrnic_eqs_free(dev);
	vrnic_kdb_unmap_all(dev);
	vrnic_aq_free(dev);
	if (dev->num_vectors)
		pci_free_irq_vectors(dev->pdev);
	dev->num_vectors = 0;
}

static int vrnic_map_bars(struct vrnic_dev *dev)
{
	struct pci_dev *pdev = dev->pdev;

	if (!(pci_resource_flags(pdev, VRNIC_BAR_CTRL) & IORESOURCE_MEM) ||
	    !(pci_resource_flags(pdev, VRNIC_BAR_DB) & IORESOURCE_MEM) ||
	    !(pci_resource_flags(pdev, VRNIC_BAR_KICK) & IORESOURCE_MEM) ||
	    pci_resource_len(pdev, VRNIC_BAR_CTRL) < VRNIC_BAR_CTRL_SIZE ||
	    pci_resource_len(pdev, VRNIC_BAR_DB) < VRNIC_BAR_DB_SIZE ||
	    pci_resource_len(pdev, VRNIC_BAR_KICK) < VRNIC_BAR_KICK_SIZE) {
		dev_err(&pdev->dev, "unexpected BAR layout\n");
		return -ENODEV;
	}

	/* Registers only: the MSI-X table and PBA behind them belong to the PCI core. */
	dev->regs = pci_iomap_range(pdev, VRNIC_BAR_CTRL, 0, VRNIC_MSIX_TABLE_OFF);
	dev->kdb = pci_iomap_range(pdev, VRNIC_BAR_DB, 0, VRNIC_DB_PAGE_SIZE);
	if (!dev->regs || !dev->kdb)
		return -ENOMEM;
	dev->db_bar = pci_resource_start(pdev, VRNIC_BAR_DB);
	dev->kick_bar = pci_resource_start(pdev, VRNIC_BAR_KICK);
	return 0;
}

static void vrnic_unmap_bars(struct vrnic_dev *dev)
{
	if (dev->kdb)
		pci_iounmap(dev->pdev, dev->kdb);
	if (dev->regs)
		pci_iounmap(dev->pdev, dev->regs);
	dev->kdb = NULL;
	dev->regs = NULL;
}

/*
 * Everything above the PCI function: the vrnic_dev with its ib_device, BAR
 * mappings, admin queue, vectors and EQs. Probe and a function reset bring it
 * up; remove and a function reset take it down. Every bring-up allocates a
 * new ib_device: an unregistered one is freed, never registered again.
 */
static struct vrnic_dev *vrnic_dev_up(struct pci_dev *pdev)
{
	struct vrnic_dev *dev;
	int err;

	dev = ib_alloc_device(vrnic_dev, ibdev);
	if (!dev)
		return ERR_PTR(-ENOMEM);
	dev->pdev = pdev;
	xa_init_flags(&dev->cqs, XA_FLAGS_LOCK_IRQ);
	xa_init_flags(&dev->qps, XA_FLAGS_LOCK_IRQ);
	xa_init(&dev->srqs);
	xa_init(&dev->kdb_pages);
	mutex_init(&dev->kdb_lock);

	err = vrnic_map_bars(dev);
	if (err)
		goto err_unmap;
	err = vrnic_check_version(dev);
	if (err)
		goto err_unmap;
	err = vrnic_read_limits(dev);
	if (err)
		goto err_unmap;

	/* Start from a clean device whatever the previous owner left. */
	err = vrnic_aq_dev_reset(dev, "probe");
	if (err)
		goto err_unmap;
	err = vrnic_aq_init(dev);
	if (err)
		goto err_unmap;
	err = vrnic_query_identity(dev);
	if (err)
		goto err_hw;
	err = vrnic_alloc_vectors(dev);
	if (err)
		goto err_hw;
	err = vrnic_eqs_create(dev);
	if (err)
		goto err_hw;
	err = vrnic_eqs_request_irqs(dev);
	if (err)
		goto err_hw;
	vrnic_counters_init(dev);
	err = vrnic_register(dev);
	if (err)
		goto err_counters;

	dev_info(&pdev->dev, "%s: %u completion vectors\n",
		 dev_name(&dev->ibdev.dev), dev->num_comp_eqs);
	return dev;

err_counters:
	vrnic_counters_free(dev);
err_hw:
	vrnic_hw_teardown(dev);
err_unmap:
	vrnic_unmap_bars(dev);
	ib_dealloc_device(&dev->ibdev);
	return ERR_PTR(err);
}

/*
 * Unregistering disassociates user contexts (their processes get
 * IB_EVENT_DEVICE_FATAL, their mappings are zapped, later verbs fail) and
 * destroys every object; then the device is reset and its memory freed.
 */
static void vrnic_dev_down(struct vrnic_dev *dev)
{
	vrnic_unregister(dev);
	vrnic_counters_free(dev);
	vrnic_hw_teardown(dev);
	WARN_ON(!xa_empty(&dev->cqs) || !xa_empty(&dev->qps) ||
		!xa_empty(&dev->srqs));
	xa_destroy(&dev->cqs);
	xa_destroy(&dev->qps);
	xa_destroy(&dev->srqs);
	vrnic_unmap_bars(dev);
	ib_dealloc_device(&dev->ibdev);
}

static int vrnic_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
	struct vrnic_dev *dev;
	int err;

	err = pci_enable_device_mem(pdev);
	if (err)
		return err;
	err = dma_set_mask_and_coherent(&pdev->dev, DMA_BIT_MASK(64));
	if (err) {
		dev_err(&pdev->dev, "no 64-bit DMA: %d\n", err);
		goto err_disable;
	}
	dma_set_max_seg_size(&pdev->dev, UINT_MAX);
	err = pci_request_regions(pdev, DRV_NAME);
	if (err)
		goto err_disable;
	pci_set_master(pdev);

	dev = vrnic_dev_up(pdev);
	if (IS_ERR(dev)) {
		err = PTR_ERR(dev);
		goto err_release;
	}
	pci_set_drvdata(pdev, dev);
	return 0;

err_release:
	pci_release_regions(pdev);
err_disable:
	pci_clear_master(pdev);
	pci_disable_device(pdev);
	return err;
}

static void vrnic_remove(struct pci_dev *pdev)
{
	struct vrnic_dev *dev = pci_get_drvdata(pdev);

	/* NULL when bring-up after a function reset failed. */
	if (dev)
		vrnic_dev_down(dev);
	pci_set_drvdata(pdev, NULL);
	pci_release_regions(pdev);
	pci_clear_master(pdev);
	pci_disable_device(pdev);
}

/*
 * Function reset (pci_reset_function(): sysfs "reset", FLR), called with the
 * device lock held, so never concurrently with probe or remove. The PCI core
 * saves config space after reset_prepare and restores it (Command, BARs,
 * bus mastering) before reset_done; the PCI-level state (enabled, regions,
 * master) therefore stays, and everything above it goes down and comes back.
 */
static void vrnic_reset_prepare(struct pci_dev *pdev)
{
	struct vrnic_dev *dev = pci_get_drvdata(pdev);

	if (!dev)
		return;
	dev_info(&pdev->dev, "%s: function reset: unregistering\n",
		 dev_name(&dev->ibdev.dev));
	vrnic_dev_down(dev);
	pci_set_drvdata(pdev, NULL);
}

static void vrnic_reset_done(struct pci_dev *pdev)
{
	struct vrnic_dev *dev;

	if (pci_get_drvdata(pdev))
		return;
	dev = vrnic_dev_up(pdev);
	if (IS_ERR(dev)) {
		/* Another function reset or a rebind retries. */
		dev_err(&pdev->dev, "bring-up after function reset failed: %ld\n",
			PTR_ERR(dev));
		return;
	}
	pci_set_drvdata(pdev, dev);
}

static const struct pci_error_handlers vrnic_err_handler = {
	.reset_prepare = vrnic_reset_prepare,
	.reset_done = vrnic_reset_done,
};

static struct pci_driver vrnic_pci_driver = {
	.name = DRV_NAME,
	.id_table = vrnic_pci_table,
	.probe = vrnic_probe,
	.remove = vrnic_remove,
	.err_handler = &vrnic_err_handler,
};

module_pci_driver(vrnic_pci_driver);
