// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
/*
 * Page lists (SPEC "Page lists"): how rings and memory regions are described
 * to the device. EQ rings are physically contiguous (CONTIGUOUS, nothing to
 * allocate); pinned user memory and kernel CQ and QP rings (separate pages,
 * vrnic_kring.c) use DIRECT (up to 512 entries in one coherent buffer) or
 * INDIRECT (a contiguous top array of up to 4096 pointers to 4 KiB coherent
 * pages of 512 entries each). The device copies the list while it executes
 * the command, so callers free it right after.
 */
#include <linux/dma-mapping.h>
#include <linux/slab.h>

#include "vrnic.h"

#define VRNIC_PBL_LEAF_SIZE	(VRNIC_PAGE_LIST_DIRECT_MAX * sizeof(__le64))

static_assert(VRNIC_PBL_LEAF_SIZE == SZ_4K);

void vrnic_pbl_contiguous(struct vrnic_pbl *pbl, dma_addr_t addr, u32 npages,
			  unsigned int page_shift)
{
	memset(pbl, 0, sizeof(*pbl));
	pbl->npages = npages;
	pbl->filled = npages;
	pbl->desc.addr = cpu_to_le64(addr);
	pbl->desc.npages = cpu_to_le32(npages);
	pbl->desc.page_shift = page_shift;
	pbl->desc.mode = VRNIC_PAGE_LIST_MODE_CONTIGUOUS;
}

void vrnic_pbl_free(struct vrnic_dev *dev, struct vrnic_pbl *pbl)
{
	struct device *dmadev = vrnic_dma_dev(dev);
	u32 i;

	if (pbl->leaves) {
		for (i = 0; i < pbl->nleaves; i++)
			if (pbl->leaves[i])
				dma_free_coherent(dmadev, VRNIC_PBL_LEAF_SIZE,
						  pbl->leaves[i],
						  pbl->leaves_dma[i]);
		kfree(pbl->leaves);
		kfree(pbl->leaves_dma);
	}
	if (pbl->top)
		dma_free_coherent(dmadev, pbl->top_size, pbl->top, pbl->top_dma);
	memset(pbl, 0, sizeof(*pbl));
}

static int vrnic_pbl_alloc(struct vrnic_dev *dev, struct vrnic_pbl *pbl,
			   size_t npages, unsigned int page_shift)
{
	struct device *dmadev = vrnic_dma_dev(dev);
	u32 i;

	memset(pbl, 0, sizeof(*pbl));
	if (!npages ||
	    npages > (size_t)VRNIC_PAGE_LIST_DIRECT_MAX * VRNIC_PAGE_LIST_INDIRECT_MAX)
		return -EINVAL;

	pbl->npages = npages;
	pbl->desc.npages = cpu_to_le32(npages);
	pbl->desc.page_shift = page_shift;

	if (npages <= VRNIC_PAGE_LIST_DIRECT_MAX) {
		/* <= 4 KiB and page aligned: never crosses a 4 KiB boundary. */
		pbl->top_size = npages * sizeof(__le64);
		pbl->top = dma_alloc_coherent(dmadev, pbl->top_size,
					      &pbl->top_dma, GFP_KERNEL);
		if (!pbl->top)
			return -ENOMEM;
		pbl->desc.mode = VRNIC_PAGE_LIST_MODE_DIRECT;
		pbl->desc.addr = cpu_to_le64(pbl->top_dma);
		return 0;
	}

	pbl->nleaves = DIV_ROUND_UP(npages, VRNIC_PAGE_LIST_DIRECT_MAX);
	pbl->top_size = pbl->nleaves * sizeof(__le64);
	pbl->top = dma_alloc_coherent(dmadev, pbl->top_size, &pbl->top_dma,
				      GFP_KERNEL);
	pbl->leaves = kcalloc(pbl->nleaves, sizeof(*pbl->leaves), GFP_KERNEL);
	pbl->leaves_dma = kcalloc(pbl->nleaves, sizeof(*pbl->leaves_dma),
				  GFP_KERNEL);
	if (!pbl->top || !pbl->leaves || !pbl->leaves_dma)
		goto err_free;

	for (i = 0; i < pbl->nleaves; i++) {
		pbl->leaves[i] = dma_alloc_coherent(dmadev, VRNIC_PBL_LEAF_SIZE,
						    &pbl->leaves_dma[i],
						    GFP_KERNEL);
		if (!pbl->leaves[i])
			goto err_free;
		pbl->top[i] = cpu_to_le64(pbl->leaves_dma[i]);
	}
	pbl->desc.mode = VRNIC_PAGE_LIST_MODE_INDIRECT;
	pbl->desc.addr = cpu_to_le64(pbl->top_dma);
	return 0;

err_free:
	vrnic_pbl_free(dev, pbl);
	return -ENOMEM;
}

static void vrnic_pbl_append(struct vrnic_pbl *pbl, dma_addr_t addr)
{
	u32 i = pbl->filled++;

	if (pbl->desc.mode == VRNIC_PAGE_LIST_MODE_DIRECT)
		pbl->top[i] = cpu_to_le64(addr);
	else
		pbl->leaves[i / VRNIC_PAGE_LIST_DIRECT_MAX]
			   [i % VRNIC_PAGE_LIST_DIRECT_MAX] = cpu_to_le64(addr);
}

/* Describe pinned user memory in blocks of @pgsz bytes (a supported size). */
int vrnic_pbl_from_umem(struct vrnic_dev *dev, struct vrnic_pbl *pbl,
			struct ib_umem *umem, unsigned long pgsz)
{
	struct ib_block_iter biter;
	int err;

	err = vrnic_pbl_alloc(dev, pbl, ib_umem_num_dma_blocks(umem, pgsz),
			      __ffs(pgsz));
	if (err)
		return err;

	rdma_umem_for_each_dma_block(umem, &biter, pgsz) {
		if (WARN_ON_ONCE(pbl->filled >= pbl->npages))
			goto err_count;
		vrnic_pbl_append(pbl, rdma_block_iter_dma_address(&biter));
	}
	if (WARN_ON_ONCE(pbl->filled != pbl->npages))
		goto err_count;
	return 0;

err_count:
	vrnic_pbl_free(dev, pbl);
	return -EINVAL;
}

/* Describe @npages separate 4 KiB pages (a kernel ring). */
int vrnic_pbl_from_dma_pages(struct vrnic_dev *dev, struct vrnic_pbl *pbl,
			     const dma_addr_t *pages, u32 npages)
{
	u32 i;
	int err;

	err = vrnic_pbl_alloc(dev, pbl, npages, PAGE_SHIFT);
	if (err)
		return err;
	for (i = 0; i < npages; i++)
		vrnic_pbl_append(pbl, pages[i]);
	return 0;
}
