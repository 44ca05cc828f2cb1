// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
/*
 * RoCE mode: the device's GID table mirrors ib_core's (SPEC cmd_set_gid).
 * The GID cache (core/cache.c) calls add_gid/del_gid with its table mutex
 * held, from process context or its workqueue, so the admin command may
 * sleep. Only RoCE v2 entries exist: the port advertises UDP encapsulation
 * alone, so the cache never offers RoCE v1 entries; one would be refused.
 *
 * A function reset brings up a new ib_device, whose registration fills the
 * table again; nothing has to be replayed by hand.
 */
#include "vrnic.h"

VRNIC_ASSERT_SAME(VRNIC_GID_TYPE_IB, IB_GID_TYPE_IB);
VRNIC_ASSERT_SAME(VRNIC_GID_TYPE_ROCE_V1, IB_GID_TYPE_ROCE);
VRNIC_ASSERT_SAME(VRNIC_GID_TYPE_ROCE_V2, IB_GID_TYPE_ROCE_UDP_ENCAP);

int vrnic_add_gid(const struct ib_gid_attr *attr, void **context)
{
	struct vrnic_dev *dev = to_vdev(attr->device);

	might_sleep();
	if (attr->gid_type != IB_GID_TYPE_ROCE_UDP_ENCAP) {
		ibdev_dbg(&dev->ibdev, "GID %u: type %d refused (RoCE v2 only)\n",
			  attr->index, attr->gid_type);
		return -EOPNOTSUPP;
	}
	if (attr->port_num != VRNIC_PORT_NUM ||
	    attr->index >= VRNIC_GID_TABLE_LEN)
		return -EINVAL;
	ibdev_dbg(&dev->ibdev, "GID %u: %pI6\n", attr->index, attr->gid.raw);
	return vrnic_cmd_set_gid(dev, attr->index, VRNIC_GID_TYPE_ROCE_V2,
				 &attr->gid);
}

int vrnic_del_gid(const struct ib_gid_attr *attr, void **context)
{
	struct vrnic_dev *dev = to_vdev(attr->device);

	might_sleep();
	if (attr->port_num != VRNIC_PORT_NUM ||
	    attr->index >= VRNIC_GID_TABLE_LEN)
		return -EINVAL;
	ibdev_dbg(&dev->ibdev, "GID %u: cleared\n", attr->index);
	/* A dead device answers -EIO at once; its table is gone anyway. */
	return vrnic_cmd_set_gid(dev, attr->index, 0, NULL);
}
