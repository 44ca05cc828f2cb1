// SPDX-License-Identifier: GPL-2.0 OR Linux-OpenIB
/*
 * vrnic rdma-core provider: memory windows (SPEC "Memory keys", "Memory
 * operations"). The kernel allocates and frees them (ALLOC_MW/DEALLOC_MW);
 * binding is a BIND_MW work request on a QP of the window's PD, whose header
 * rkey is the window's new key (same index, a new variant byte).
 */

#include <errno.h>
#include <stdlib.h>

#include "vrnic.h"

struct ibv_mw *vrnic_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type)
{
	struct ib_uverbs_alloc_mw_resp resp;
	struct ibv_alloc_mw cmd = {};
	struct ibv_mw *mw;
	int ret;

	if (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2) {
		errno = EINVAL;
		return NULL;
	}
	mw = calloc(1, sizeof(*mw));
	if (!mw)
		return NULL;
	ret = ibv_cmd_alloc_mw(pd, type, mw, &cmd, sizeof(cmd), &resp,
			       sizeof(resp));
	if (ret) {
		free(mw);
		errno = ret;
		return NULL;
	}
	return mw;
}

int vrnic_dealloc_mw(struct ibv_mw *mw)
{
	int ret = ibv_cmd_dealloc_mw(mw);

	if (ret)
		return ret;
	free(mw);
	return 0;
}

/*
 * The bind_mw_seg of @info. A window grants remote access only: LOCAL_WRITE
 * (which callers such as pyverbs pass along) means nothing for it and is
 * dropped; zero-based windows and other flags are refused. Without an MR
 * (a type 1 unbind, length 0) the segment names no MR.
 */
int vrnic_bind_mw_fields(const struct ibv_mw_bind_info *info,
			 struct vrnic_bind_mw_fields *out)
{
	const unsigned int remote = IBV_ACCESS_REMOTE_WRITE |
				    IBV_ACCESS_REMOTE_READ |
				    IBV_ACCESS_REMOTE_ATOMIC;

	if (info->mw_access_flags & ~(remote | IBV_ACCESS_LOCAL_WRITE))
		return EINVAL;
	if (!info->mr && (info->addr || info->length))
		return EINVAL;
	out->addr = info->addr;
	out->length = info->length;
	out->mr_lkey = info->mr ? info->mr->lkey : 0;
	out->access = info->mw_access_flags & remote;
	return 0;
}

/*
 * ibv_bind_mw (type 1, checked by libibverbs): a BIND_MW work request under
 * the next variant of the window's key, which becomes mw->rkey once posted
 * (verbs semantics: a caller that gets an error completion restores it).
 */
int vrnic_bind_mw(struct ibv_qp *ibqp, struct ibv_mw *mw,
		  struct ibv_mw_bind *mw_bind)
{
	struct ibv_send_wr wr = {
		.wr_id = mw_bind->wr_id,
		.opcode = IBV_WR_BIND_MW,
		.send_flags = mw_bind->send_flags,
		.bind_mw = {
			.mw = mw,
			.rkey = ibv_inc_rkey(mw->rkey),
			.bind_info = mw_bind->bind_info,
		},
	};
	struct ibv_send_wr *bad_wr;
	int ret;

	ret = vrnic_post_send(ibqp, &wr, &bad_wr);
	if (ret)
		return ret;
	mw->rkey = wr.bind_mw.rkey;
	return 0;
}
