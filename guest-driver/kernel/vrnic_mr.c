// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
/*
 * Memory regions: pin with ib_umem_get(), pick the largest page size the
 * device supports for the layout, hand the device a page list. In RoCE mode
 * kernel PDs also get a DMA MR: the device's LOCAL_DMA_LKEY, local access
 * only, with no device object behind it (ib_core requires get_dma_mr of a
 * kernel verbs provider), and fast-registration MRs (alloc_mr, map_mr_sg;
 * vrnic_post.c posts their REG_MR work requests). User memory windows are
 * allocated here and bound by the provider.
 *
 * rereg_user_mr changes a user MR in place with REREG_MR (SPEC "Memory
 * keys"): new pages (pinned like reg_user_mr's), PD or access, any of them at
 * once, same key; a failure changes nothing, so the old pages are released
 * only after the device has taken the new ones.
 */
#include <linux/dma-mapping.h>
#include <linux/overflow.h>
#include <linux/slab.h>

#include "vrnic.h"

VRNIC_ASSERT_SAME(VRNIC_ACCESS_LOCAL_WRITE, IB_ACCESS_LOCAL_WRITE);
VRNIC_ASSERT_SAME(VRNIC_ACCESS_REMOTE_WRITE, IB_ACCESS_REMOTE_WRITE);
VRNIC_ASSERT_SAME(VRNIC_ACCESS_REMOTE_READ, IB_ACCESS_REMOTE_READ);
VRNIC_ASSERT_SAME(VRNIC_ACCESS_REMOTE_ATOMIC, IB_ACCESS_REMOTE_ATOMIC);

/*
 * Optional access bits may be ignored by definition; HUGETLB is only a hint.
 * Anything else the device does not understand (ZERO_BASED, ...), and
 * MW_BIND without memory windows, is refused rather than silently dropped.
 */
static int vrnic_mr_access(struct vrnic_dev *dev, int ib_access, u32 *access)
{
	u32 flags = ib_access & ~(IB_ACCESS_OPTIONAL | IB_ACCESS_HUGETLB);

	if (flags & ~VRNIC_ACCESS_SUPPORTED_MASK)
		return -EOPNOTSUPP;
	if ((flags & VRNIC_ACCESS_MW_BIND) && !dev->lim.max_mw)
		return -EOPNOTSUPP;
	*access = flags;
	return 0;
}

/*
 * Pin [start, start + length) of the process for an MR at @virt_addr and
 * list its pages in the largest page size the device supports for that
 * layout (@pgsz), for REG_MR or REREG_MR.
 */
static struct ib_umem *vrnic_mr_pin(struct vrnic_dev *dev, u64 start,
				    u64 length, u64 virt_addr, int access_flags,
				    struct vrnic_pbl *pbl, unsigned long *pgsz)
{
	struct ib_umem *umem;
	u64 end;
	int err;

	if (!length || length > dev->lim.max_mr_size ||
	    check_add_overflow(virt_addr, length, &end) ||
	    check_add_overflow(start, length, &end))
		return ERR_PTR(-EINVAL);
	umem = ib_umem_get(&dev->ibdev, start, length, access_flags);
	if (IS_ERR(umem))
		return umem;
	/* Also sets umem->iova = virt_addr, which the block count is based on. */
	*pgsz = ib_umem_find_best_pgsz(umem, dev->lim.page_size_cap, virt_addr);
	err = *pgsz ? vrnic_pbl_from_umem(dev, pbl, umem, *pgsz) : -EINVAL;
	if (err) {
		ib_umem_release(umem);
		return ERR_PTR(err);
	}
	return umem;
}

struct ib_mr *vrnic_reg_user_mr(struct ib_pd *ibpd, u64 start, u64 length,
				u64 virt_addr, int access_flags,
				struct ib_udata *udata)
{
	struct vrnic_dev *dev = to_vdev(ibpd->device);
	struct vrnic_pd *pd = to_vpd(ibpd);
	struct vrnic_pbl pbl;
	struct vrnic_mr *mr;
	unsigned long pgsz;
	u32 access, mkey;
	int err;

	if (!udata)
		return ERR_PTR(-EOPNOTSUPP);
	err = vrnic_mr_access(dev, access_flags, &access);
	if (err)
		return ERR_PTR(err);

	mr = kzalloc(sizeof(*mr), GFP_KERNEL);
	if (!mr)
		return ERR_PTR(-ENOMEM);
	mr->uctx = pd->uctx;
	mr->access = access_flags;

	mr->umem = vrnic_mr_pin(dev, start, length, virt_addr, access_flags,
				&pbl, &pgsz);
	if (IS_ERR(mr->umem)) {
		err = PTR_ERR(mr->umem);
		goto err_free;
	}
	err = vrnic_cmd_reg_mr(dev, pd->uctx, pd->pdn, access, virt_addr, length,
			       &pbl.desc, &mkey);
	vrnic_pbl_free(dev, &pbl);
	if (err)
		goto err_release;

	mr->ibmr.lkey = mkey;
	mr->ibmr.rkey = mkey;
	ibdev_dbg(&dev->ibdev,
		  "uctx %u: MR %#x iova %#llx len %llu, %u pages of %lu\n",
		  mr->uctx, mkey, virt_addr, length,
		  (u32)ib_umem_num_dma_blocks(mr->umem, pgsz), pgsz);
	return &mr->ibmr;

err_release:
	ib_umem_release(mr->umem);
err_free:
	kfree(mr);
	return ERR_PTR(err);
}

/*
 * The MR stays the same object (NULL: changed in place); ib_core then sets
 * its pd, iova and length. Pages pinned read-only cannot take writes, so a
 * change of access to a writable one pins them again, as a new translation
 * of the same range.
 */
struct ib_mr *vrnic_rereg_user_mr(struct ib_mr *ibmr, int flags, u64 start,
				  u64 length, u64 virt_addr, int access_flags,
				  struct ib_pd *ibpd, struct ib_udata *udata)
{
	struct vrnic_dev *dev = to_vdev(ibmr->device);
	struct vrnic_mr *mr = to_vmr(ibmr);
	struct vrnic_rereg_mr_params p = {
		.uctx = mr->uctx,
		.mkey = ibmr->lkey,
	};
	int access = mr->access;
	struct ib_umem *umem = NULL;
	struct vrnic_pbl pbl;
	unsigned long pgsz;
	int err;

	/* Only a user MR (not the DMA MR, not a fast-registration MR). */
	if (!mr->umem || !udata)
		return ERR_PTR(-EINVAL);
	if (!flags || (flags & ~IB_MR_REREG_SUPPORTED))
		return ERR_PTR(-EOPNOTSUPP);
	if (udata->inlen && !ib_is_udata_cleared(udata, 0, udata->inlen))
		return ERR_PTR(-EOPNOTSUPP);

	if (flags & IB_MR_REREG_ACCESS) {
		access = access_flags;
		err = vrnic_mr_access(dev, access, &p.access);
		if (err)
			return ERR_PTR(err);
		p.flags |= VRNIC_REREG_FLAGS_CHANGE_ACCESS;
	}
	if (flags & IB_MR_REREG_PD) {
		if (!ibpd || to_vpd(ibpd)->uctx != mr->uctx)
			return ERR_PTR(-EINVAL);
		p.pdn = to_vpd(ibpd)->pdn;
		p.flags |= VRNIC_REREG_FLAGS_CHANGE_PD;
	}
	if (!(flags & IB_MR_REREG_TRANS) && ib_access_writable(access) &&
	    !mr->umem->writable) {
		start = mr->umem->address;
		length = ibmr->length;
		virt_addr = ibmr->iova;
		flags |= IB_MR_REREG_TRANS;
	}
	if (flags & IB_MR_REREG_TRANS) {
		umem = vrnic_mr_pin(dev, start, length, virt_addr, access, &pbl,
				    &pgsz);
		if (IS_ERR(umem))
			return ERR_CAST(umem);
		p.iova = virt_addr;
		p.length = length;
		p.pages = pbl.desc;
		p.flags |= VRNIC_REREG_FLAGS_CHANGE_TRANSLATION;
	}

	err = vrnic_cmd_rereg_mr(dev, &p);
	if (umem)
		vrnic_pbl_free(dev, &pbl);
	if (err) {
		/* The device kept the old region: keep its pages. */
		ib_umem_release(umem);
		return ERR_PTR(err);
	}
	if (umem) {
		ib_umem_release(mr->umem);
		mr->umem = umem;
	}
	mr->access = access;
	ibdev_dbg(&dev->ibdev, "uctx %u: MR %#x reregistered (flags %#x)\n",
		  mr->uctx, ibmr->lkey, p.flags);
	return NULL;
}

struct ib_mr *vrnic_get_dma_mr(struct ib_pd *ibpd, int access_flags)
{
	struct vrnic_mr *mr;

	/* The DMA key has no rkey: remote access would need a real MR. */
	if (access_flags & ~(IB_ACCESS_LOCAL_WRITE | IB_ACCESS_OPTIONAL))
		return ERR_PTR(-EOPNOTSUPP);
	mr = kzalloc(sizeof(*mr), GFP_KERNEL);
	if (!mr)
		return ERR_PTR(-ENOMEM);
	mr->uctx = VRNIC_KERNEL_UCTX;
	mr->ibmr.lkey = VRNIC_LOCAL_DMA_LKEY;
	mr->ibmr.rkey = 0;
	return &mr->ibmr;
}

/*
 * The access rights of a REG_MR work request: what REG_MR accepts, without
 * MW_BIND (SPEC reg_mr_seg.access); optional bits are dropped.
 */
int vrnic_mr_wr_access(int ib_access, u32 *access)
{
	u32 flags = ib_access & ~IB_ACCESS_OPTIONAL;

	if (flags & ~(VRNIC_ACCESS_SUPPORTED_MASK & ~VRNIC_ACCESS_MW_BIND))
		return -EINVAL;
	*access = flags;
	return 0;
}

/* The page list of a REG_MR WQE must not cross a 4 KiB boundary. */
static_assert(VRNIC_MAX_FAST_REG_PAGES * sizeof(__le64) <= SZ_4K);

static void vrnic_mr_free_pages(struct vrnic_dev *dev, struct vrnic_mr *mr)
{
	dma_free_coherent(vrnic_dma_dev(dev), mr->max_pages * sizeof(__le64),
			  mr->pages, mr->pages_dma);
}

/*
 * A fast-registration MR for a kernel ULP: FREE on the device until a
 * REG_MR work request gives it the pages map_mr_sg wrote into its list.
 */
struct ib_mr *vrnic_alloc_mr(struct ib_pd *ibpd, enum ib_mr_type mr_type,
			     u32 max_num_sg)
{
	struct vrnic_dev *dev = to_vdev(ibpd->device);
	struct vrnic_pd *pd = to_vpd(ibpd);
	struct vrnic_mr *mr;
	u32 mkey;
	int err;

	if (mr_type != IB_MR_TYPE_MEM_REG)
		return ERR_PTR(-EOPNOTSUPP);
	if (!max_num_sg || max_num_sg > dev->lim.max_fast_reg_pages ||
	    pd->uctx != VRNIC_KERNEL_UCTX)
		return ERR_PTR(-EINVAL);

	mr = kzalloc(sizeof(*mr), GFP_KERNEL);
	if (!mr)
		return ERR_PTR(-ENOMEM);
	mr->uctx = VRNIC_KERNEL_UCTX;
	mr->max_pages = max_num_sg;
	/* Coherent memory is page aligned: at most 4 KiB never crosses one. */
	mr->pages = dma_alloc_coherent(vrnic_dma_dev(dev),
				       max_num_sg * sizeof(__le64),
				       &mr->pages_dma, GFP_KERNEL);
	if (!mr->pages) {
		err = -ENOMEM;
		goto err_free;
	}
	err = vrnic_cmd_alloc_mr(dev, pd->pdn, max_num_sg, &mkey);
	if (err)
		goto err_pages;

	mr->ibmr.lkey = mkey;
	mr->ibmr.rkey = mkey;
	ibdev_dbg(&dev->ibdev, "fast-registration MR %#x, %u pages\n", mkey,
		  max_num_sg);
	return &mr->ibmr;

err_pages:
	vrnic_mr_free_pages(dev, mr);
err_free:
	kfree(mr);
	return ERR_PTR(err);
}

static int vrnic_mr_set_page(struct ib_mr *ibmr, u64 addr)
{
	struct vrnic_mr *mr = to_vmr(ibmr);

	if (mr->npages >= mr->max_pages)
		return -ENOMEM;
	mr->pages[mr->npages++] = cpu_to_le64(addr);
	return 0;
}

/* ib_map_mr_sg() has set ibmr->page_size; ib_sg_to_pages() sets iova and length. */
int vrnic_map_mr_sg(struct ib_mr *ibmr, struct scatterlist *sg, int sg_nents,
		    unsigned int *sg_offset)
{
	struct vrnic_dev *dev = to_vdev(ibmr->device);
	struct vrnic_mr *mr = to_vmr(ibmr);

	if (!mr->pages || !is_power_of_2(ibmr->page_size) ||
	    !(ibmr->page_size & dev->lim.page_size_cap))
		return -EINVAL;
	mr->npages = 0;
	return ib_sg_to_pages(ibmr, sg, sg_nents, sg_offset, vrnic_mr_set_page);
}

int vrnic_dereg_mr(struct ib_mr *ibmr, struct ib_udata *udata)
{
	struct vrnic_dev *dev = to_vdev(ibmr->device);
	struct vrnic_mr *mr = to_vmr(ibmr);
	int err;

	if (!mr->umem && !mr->pages) {
		/* The DMA MR: nothing on the device. */
		kfree(mr);
		return 0;
	}

	err = vrnic_cmd_dereg_mr(dev, mr->uctx, ibmr->lkey);
	if (err && !vrnic_is_dead(dev)) {
		/*
		 * The device may still access these pages (or read the page
		 * list): keep them (leaked) rather than let them be reused
		 * under it.
		 */
		dev_err(&dev->pdev->dev,
			"DEREG_MR %#x failed (%d): leaking its pages\n",
			ibmr->lkey, err);
	} else if (mr->pages) {
		vrnic_mr_free_pages(dev, mr);
	} else {
		ib_umem_release(mr->umem);
	}
	kfree(mr);
	return 0;
}

VRNIC_ASSERT_SAME(VRNIC_MW_TYPE_TYPE_1, IB_MW_TYPE_1);
VRNIC_ASSERT_SAME(VRNIC_MW_TYPE_TYPE_2, IB_MW_TYPE_2);

/* A user memory window; the provider binds it with BIND_MW work requests. */
int vrnic_alloc_mw(struct ib_mw *ibmw, struct ib_udata *udata)
{
	struct vrnic_dev *dev = to_vdev(ibmw->device);
	struct vrnic_pd *pd = to_vpd(ibmw->pd);
	struct vrnic_mw *mw = to_vmw(ibmw);
	int err;

	if (!dev->lim.max_mw)
		return -EOPNOTSUPP;
	if (ibmw->type != IB_MW_TYPE_1 && ibmw->type != IB_MW_TYPE_2)
		return -EINVAL;
	if (udata && udata->inlen &&
	    !ib_is_udata_cleared(udata, 0, udata->inlen))
		return -EOPNOTSUPP;

	mw->uctx = pd->uctx;
	err = vrnic_cmd_alloc_mw(dev, mw->uctx, pd->pdn, ibmw->type,
				 &ibmw->rkey);
	if (err)
		return err;
	ibdev_dbg(&dev->ibdev, "uctx %u: MW %#x type %d\n", mw->uctx,
		  ibmw->rkey, ibmw->type);
	return 0;
}

int vrnic_dealloc_mw(struct ib_mw *ibmw)
{
	struct vrnic_dev *dev = to_vdev(ibmw->device);
	struct vrnic_mw *mw = to_vmw(ibmw);
	int err;

	/* A window owns no memory: nothing to keep if the device refuses. */
	err = vrnic_cmd_dealloc_mw(dev, mw->uctx, ibmw->rkey);
	if (err)
		dev_warn(&dev->pdev->dev, "DEALLOC_MW %#x: %d\n", ibmw->rkey, err);
	return 0;
}
