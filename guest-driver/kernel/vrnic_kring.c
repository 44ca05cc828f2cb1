// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
/*
 * Rings in kernel memory (kernel CQs, send and receive queues): separate
 * DMA-coherent pages, so a large ring needs no contiguous allocation, given
 * to the device as a DIRECT or INDIRECT page list. Coherent memory comes
 * zeroed, as the device requires of a new ring.
 */
#include <linux/dma-mapping.h>
#include <linux/slab.h>

#include "vrnic.h"

/* 2^depth_log2 entries of 2^entry_shift bytes (entry_shift <= PAGE_SHIFT). */
int vrnic_kring_alloc(struct vrnic_dev *dev, struct vrnic_kring *ring,
		      u32 depth_log2, u32 entry_shift)
{
	size_t size = (size_t)1 << (depth_log2 + entry_shift);
	u32 i;

	memset(ring, 0, sizeof(*ring));
	if (WARN_ON_ONCE(entry_shift > PAGE_SHIFT))
		return -EINVAL;
	ring->entry_shift = entry_shift;
	ring->npages = DIV_ROUND_UP(size, PAGE_SIZE);
	ring->pages = kcalloc(ring->npages, sizeof(*ring->pages), GFP_KERNEL);
	ring->pages_dma = kcalloc(ring->npages, sizeof(*ring->pages_dma),
				  GFP_KERNEL);
	if (!ring->pages || !ring->pages_dma)
		goto err;
	for (i = 0; i < ring->npages; i++) {
		ring->pages[i] = dma_alloc_coherent(vrnic_dma_dev(dev), PAGE_SIZE,
						    &ring->pages_dma[i],
						    GFP_KERNEL);
		if (!ring->pages[i])
			goto err;
	}
	return 0;

err:
	vrnic_kring_free(dev, ring);
	return -ENOMEM;
}

/* Only once the device no longer knows the ring (destroyed, or reset). */
void vrnic_kring_free(struct vrnic_dev *dev, struct vrnic_kring *ring)
{
	u32 i;

	if (ring->pages)
		for (i = 0; i < ring->npages; i++)
			if (ring->pages[i])
				dma_free_coherent(vrnic_dma_dev(dev), PAGE_SIZE,
						  ring->pages[i],
						  ring->pages_dma[i]);
	kfree(ring->pages);
	kfree(ring->pages_dma);
	memset(ring, 0, sizeof(*ring));
}

int vrnic_kring_pbl(struct vrnic_dev *dev, const struct vrnic_kring *ring,
		    struct vrnic_pbl *pbl)
{
	return vrnic_pbl_from_dma_pages(dev, pbl, ring->pages_dma, ring->npages);
}
