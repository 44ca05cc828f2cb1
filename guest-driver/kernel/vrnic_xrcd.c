// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
/*
 * XRC domains (SPEC "XRC"). ib_core shares a domain between the processes
 * that open it through the same file, and it outlives the process that
 * opened it first, so every domain belongs to the kernel context whoever
 * asks (ALLOC_XRCD is a kernel-context command). Its XRC SRQs (of user
 * processes, vrnic_srq.c) and XRC_TGT QPs (the kernel's, vrnic_qp.c) name
 * it by its xrcdn. Only with CAPS.XRC.
 */
#include "vrnic.h"

int vrnic_alloc_xrcd(struct ib_xrcd *ibxrcd, struct ib_udata *udata)
{
	struct vrnic_dev *dev = to_vdev(ibxrcd->device);
	struct vrnic_xrcd *xrcd = to_vxrcd(ibxrcd);
	int err;

	if (!dev->lim.max_xrcd)
		return -EOPNOTSUPP;
	if (udata && udata->inlen &&
	    !ib_is_udata_cleared(udata, 0, udata->inlen))
		return -EOPNOTSUPP;
	err = vrnic_cmd_alloc_xrcd(dev, &xrcd->xrcdn);
	if (err)
		return err;
	ibdev_dbg(&dev->ibdev, "XRCD %u\n", xrcd->xrcdn);
	return 0;
}

int vrnic_dealloc_xrcd(struct ib_xrcd *ibxrcd, struct ib_udata *udata)
{
	struct vrnic_dev *dev = to_vdev(ibxrcd->device);
	struct vrnic_xrcd *xrcd = to_vxrcd(ibxrcd);
	int err;

	/* A domain owns no memory: nothing to keep if the device refuses. */
	err = vrnic_cmd_dealloc_xrcd(dev, xrcd->xrcdn);
	if (err)
		dev_warn(&dev->pdev->dev, "DEALLOC_XRCD %u: %d\n", xrcd->xrcdn,
			 err);
	return 0;
}
