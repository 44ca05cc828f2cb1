// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
/*
 * Doorbell pages of the kernel context (SPEC "Doorbell pages"). The device
 * gives the kernel page 0 at enable and further pages as kernel EQs, CQs and
 * QPs fill them; each page (and its kick page) is mapped the first time a
 * CREATE command names it and stays mapped until teardown, after the reset.
 */
#include <linux/io.h>
#include <linux/slab.h>

#include "vrnic.h"

/* The mapped doorbell and kick page @page of the kernel context. */
const struct vrnic_kdb_page *vrnic_kdb_get(struct vrnic_dev *dev, u32 page)
{
	unsigned long off = (unsigned long)page * VRNIC_DB_PAGE_SIZE;
	struct vrnic_kdb_page *p;
	int err;

	/* Never trust the number: it indexes the doorbell and kick BARs. */
	if (page >= VRNIC_DB_PAGES) {
		dev_err(&dev->pdev->dev, "device returned doorbell page %u\n",
			page);
		return ERR_PTR(-EIO);
	}

	mutex_lock(&dev->kdb_lock);
	p = xa_load(&dev->kdb_pages, page);
	if (p)
		goto out;
	p = kzalloc(sizeof(*p), GFP_KERNEL);
	if (!p) {
		p = ERR_PTR(-ENOMEM);
		goto out;
	}
	/* Page 0 is mapped at probe for the admin path's EQs. */
	p->db = page ? pci_iomap_range(dev->pdev, VRNIC_BAR_DB, off,
				       VRNIC_DB_PAGE_SIZE) : dev->kdb;
	p->kick = pci_iomap_range(dev->pdev, VRNIC_BAR_KICK, off,
				  VRNIC_DB_PAGE_SIZE);
	err = (p->db && p->kick) ? xa_insert(&dev->kdb_pages, page, p, GFP_KERNEL) :
				   -ENOMEM;
	if (err) {
		if (p->kick)
			pci_iounmap(dev->pdev, p->kick);
		if (p->db && p->db != dev->kdb)
			pci_iounmap(dev->pdev, p->db);
		kfree(p);
		p = ERR_PTR(err);
	}
out:
	mutex_unlock(&dev->kdb_lock);
	return p;
}

/* Only at teardown: every object using a page is gone. */
void vrnic_kdb_unmap_all(struct vrnic_dev *dev)
{
	struct vrnic_kdb_page *p;
	unsigned long page;

	xa_for_each(&dev->kdb_pages, page, p) {
		pci_iounmap(dev->pdev, p->kick);
		if (p->db != dev->kdb)
			pci_iounmap(dev->pdev, p->db);
		kfree(p);
	}
	xa_destroy(&dev->kdb_pages);
}

void __iomem *vrnic_kdb_slot(const struct vrnic_kdb_page *p, u32 slot)
{
	return p->db + VRNIC_DB_SLOT_BASE + slot * VRNIC_DB_SLOT_SIZE;
}

/*
 * Publish producer index @pi at byte @off of QP doorbell slot @slot (SPEC
 * "Posting work"): the WQEs before the index, then the slot's flag and
 * PAGE_FLAG, a full barrier, and a kick when the device is not polling the
 * page. The caller holds the queue's lock, so indices reach the slot in order.
 */
void vrnic_kdb_ring_qp(const struct vrnic_kdb_page *p, u32 slot, u32 off,
		       u32 pi)
{
	/* writel() orders the WQE stores before it; dma_wmb() says why. */
	dma_wmb();
	writel(pi, vrnic_kdb_slot(p, slot) + off);
	writeb(1, p->db + VRNIC_DB_FLAGS_BASE + slot);
	writel(1, p->db + VRNIC_DB_PAGE_PAGE_FLAG_OFF);
	/* The flag stores before the POLL_STATE load. */
	mb();
	if (!(readl(p->db + VRNIC_DB_PAGE_POLL_STATE_OFF) &
	      VRNIC_DB_PAGE_POLL_STATE_POLLING_MASK))
		writel(1, p->kick + VRNIC_KICK_PAGE_KICK_OFF);
}
