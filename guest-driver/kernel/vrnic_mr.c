// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
/*
 * Memory regions: pin with ib_umem_get(), pick the largest page size the
 * device supports for the layout, hand the device a page list. In RoCE mode
 * kernel PDs also get a DMA MR: the device's LOCAL_DMA_LKEY, local access
 * only, with no device object behind it (ib_core requires get_dma_mr of a
 * kernel verbs provider).
 */
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

struct ib_mr *vrnic_reg_user_mr(struct ib_pd *ibpd, u64 start, u64 length,
				u64 virt_addr, int access_flags,
				struct ib_udata *udata)
{
	struct vrnic_dev *dev = to_vdev(ibpd->device);
	struct vrnic_pd *pd = to_vpd(ibpd);
	struct vrnic_pbl pbl;
	struct vrnic_mr *mr;
	unsigned long pgsz;
	u64 end;
	u32 access, mkey;
	int err;

	if (!udata)
		return ERR_PTR(-EOPNOTSUPP);
	err = vrnic_mr_access(dev, access_flags, &access);
	if (err)
		return ERR_PTR(err);
	if (!length || length > dev->lim.max_mr_size ||
	    check_add_overflow(virt_addr, length, &end) ||
	    check_add_overflow(start, length, &end))
		return ERR_PTR(-EINVAL);

	mr = kzalloc(sizeof(*mr), GFP_KERNEL);
	if (!mr)
		return ERR_PTR(-ENOMEM);
	mr->uctx = pd->uctx;

	mr->umem = ib_umem_get(ibpd->device, start, length, access_flags);
	if (IS_ERR(mr->umem)) {
		err = PTR_ERR(mr->umem);
		goto err_free;
	}

	/* Also sets umem->iova = virt_addr, which the block count is based on. */
	pgsz = ib_umem_find_best_pgsz(mr->umem, dev->lim.page_size_cap,
				      virt_addr);
	if (!pgsz) {
		err = -EINVAL;
		goto err_release;
	}

	err = vrnic_pbl_from_umem(dev, &pbl, mr->umem, pgsz);
	if (err)
		goto err_release;
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

int vrnic_dereg_mr(struct ib_mr *ibmr, struct ib_udata *udata)
{
	struct vrnic_dev *dev = to_vdev(ibmr->device);
	struct vrnic_mr *mr = to_vmr(ibmr);
	int err;

	if (!mr->umem) {
		/* The DMA MR: nothing on the device. */
		kfree(mr);
		return 0;
	}

	err = vrnic_cmd_dereg_mr(dev, mr->uctx, ibmr->lkey);
	if (err && !vrnic_is_dead(dev)) {
		/*
		 * The device may still access these pages: keep them pinned
		 * (leaked) rather than let them be reused under it.
		 */
		dev_err(&dev->pdev->dev,
			"DEREG_MR %#x failed (%d): leaking its pinned pages\n",
			ibmr->lkey, err);
	} else {
		ib_umem_release(mr->umem);
	}
	kfree(mr);
	return 0;
}
