// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
/*
 * Address handles. The device has no AH objects: an AH is the address
 * vector the driver (kernel QPs, vrnic_post.c) or the provider (user QPs)
 * copies into every UD WQE. So create_ah never sleeps and sends no command,
 * as ib_cm needs (it creates AHs in atomic context, without
 * RDMA_CREATE_AH_SLEEPABLE).
 *
 * RoCE mode: every AV carries a GRH (RoCE v2 source GID) and the
 * destination MAC that ib_core resolved through the neighbour table
 * (rdma_ah_attr.roce.dmac); a user AH returns that MAC in create_ah_resp.
 * IB mode: the AV names the destination LID, the GRH is optional.
 */
#include "vrnic.h"

int vrnic_av_from_ah_attr(struct vrnic_dev *dev, const struct rdma_ah_attr *a,
			  struct vrnic_av *av)
{
	const struct ib_global_route *grh = rdma_ah_read_grh(a);
	bool global = rdma_ah_get_ah_flags(a) & IB_AH_GRH;

	memset(av, 0, sizeof(*av));
	av->sl = rdma_ah_get_sl(a) & 0xf;
	if (dev->roce) {
		if (!global || a->type != RDMA_AH_ATTR_TYPE_ROCE)
			return -EINVAL;
		if (grh->sgid_attr &&
		    grh->sgid_attr->gid_type != IB_GID_TYPE_ROCE_UDP_ENCAP)
			return -EINVAL;
		ether_addr_copy(av->dmac, a->roce.dmac);
	} else {
		if (a->type != RDMA_AH_ATTR_TYPE_IB)
			return -EINVAL;
		av->dlid = rdma_ah_get_dlid(a);
	}
	if (global) {
		if (grh->sgid_index >= (dev->roce ? VRNIC_GID_TABLE_LEN : 1))
			return -EINVAL;
		av->is_global = 1;
		av->sgid_index = grh->sgid_index;
		av->hop_limit = grh->hop_limit;
		av->traffic_class = grh->traffic_class;
		av->flow_label = grh->flow_label & 0xfffff;
		memcpy(av->dgid, grh->dgid.raw, sizeof(av->dgid));
	}
	return 0;
}

int vrnic_create_ah(struct ib_ah *ibah, struct rdma_ah_init_attr *init_attr,
		    struct ib_udata *udata)
{
	struct vrnic_dev *dev = to_vdev(ibah->device);
	struct vrnic_ah *ah = to_vah(ibah);
	struct vrnic_create_ah_resp resp = {};
	int err;

	err = vrnic_av_from_ah_attr(dev, init_attr->ah_attr, &ah->av);
	if (err)
		return err;
	if (!udata)
		return 0;
	memcpy(resp.dmac, ah->av.dmac, sizeof(resp.dmac));
	return vrnic_copy_resp_to_udata(udata, &resp, sizeof(resp));
}

int vrnic_destroy_ah(struct ib_ah *ibah, u32 flags)
{
	return 0;
}
