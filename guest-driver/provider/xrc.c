// SPDX-License-Identifier: GPL-2.0 OR Linux-OpenIB
/*
 * vrnic rdma-core provider: XRC domains and XRC_RECV QPs (SPEC "XRC").
 * Both are the kernel's: an XRC domain outlives the process that opened
 * it (the kernel decides who shares it, by the file passed to open_xrcd),
 * and an XRC_RECV QP (the device's XRC_TGT) belongs to the kernel context,
 * created by ib_core without udata: no rings, no doorbell slot, no CQEs of
 * its own (its receives complete on an XRC SRQ's CQ under the SRQ's
 * number). So nothing of them lives here but the handles, and the QP
 * object exists only for modify, query and destroy; posting to it fails.
 * XRC SRQs are srq.c's, XRC_SEND QPs verbs.c's and datapath.c's.
 */

#include <errno.h>
#include <stdlib.h>

#include "vrnic.h"

struct ibv_xrcd *vrnic_open_xrcd(struct ibv_context *ibctx,
				 struct ibv_xrcd_init_attr *attr)
{
	struct ib_uverbs_open_xrcd_resp resp;
	struct ibv_open_xrcd cmd = {};
	struct verbs_xrcd *xrcd;
	int ret;

	xrcd = calloc(1, sizeof(*xrcd));
	if (!xrcd)
		return NULL;
	ret = ibv_cmd_open_xrcd(ibctx, xrcd, sizeof(*xrcd), attr, &cmd,
				sizeof(cmd), &resp, sizeof(resp));
	if (ret) {
		free(xrcd);
		errno = ret;
		return NULL;
	}
	return &xrcd->xrcd;
}

int vrnic_close_xrcd(struct ibv_xrcd *ibxrcd)
{
	struct verbs_xrcd *xrcd = container_of(ibxrcd, struct verbs_xrcd, xrcd);
	int ret = ibv_cmd_close_xrcd(xrcd);

	if (ret)
		return ret;
	free(xrcd);
	return 0;
}

/* The object of an XRC_RECV QP, created or opened: queues of depth 0
 * (post_send and post_recv refuse them), in RESET for our bookkeeping. */
static struct vrnic_qp *vrnic_xrc_tgt_alloc(void)
{
	struct vrnic_qp *qp = calloc(1, sizeof(*qp));

	if (!qp)
		return NULL;
	pthread_spin_init(&qp->sq.lock, PTHREAD_PROCESS_PRIVATE);
	pthread_spin_init(&qp->rq.lock, PTHREAD_PROCESS_PRIVATE);
	qp->state = IBV_QPS_RESET;
	return qp;
}

static void vrnic_xrc_tgt_free(struct vrnic_qp *qp)
{
	pthread_spin_destroy(&qp->sq.lock);
	pthread_spin_destroy(&qp->rq.lock);
	free(qp);
}

/*
 * create_qp_ex of an XRC_RECV QP (create_qp_ex has checked the attributes:
 * XRCD, no send_ops_flags): the core command alone, as the kernel reads no
 * driver request and writes no driver response for it.
 */
struct vrnic_qp *vrnic_xrc_recv_qp_create(struct ibv_context *ibctx,
					  struct ibv_qp_init_attr_ex *attr)
{
	struct ib_uverbs_create_qp_resp resp;
	struct ibv_create_qp cmd = {};
	struct vrnic_qp *qp;
	int ret;

	qp = vrnic_xrc_tgt_alloc();
	if (!qp)
		return NULL;
	ret = ibv_cmd_create_qp_ex(ibctx, &qp->vqp, attr, &cmd, sizeof(cmd),
				   &resp, sizeof(resp));
	if (ret) {
		vrnic_xrc_tgt_free(qp);
		errno = ret;
		return NULL;
	}
	attr->cap = (struct ibv_qp_cap){};
	return qp;
}

/* ibv_open_qp: another handle on an XRC_RECV QP of a shared domain. */
struct ibv_qp *vrnic_open_qp(struct ibv_context *ibctx,
			     struct ibv_qp_open_attr *attr)
{
	struct ib_uverbs_create_qp_resp resp;
	struct ibv_open_qp cmd = {};
	struct vrnic_qp *qp;
	int ret;

	if ((attr->comp_mask & IBV_QP_OPEN_ATTR_TYPE) &&
	    attr->qp_type != IBV_QPT_XRC_RECV) {
		errno = EINVAL;
		return NULL;
	}
	qp = vrnic_xrc_tgt_alloc();
	if (!qp)
		return NULL;
	ret = ibv_cmd_open_qp(ibctx, &qp->vqp, sizeof(qp->vqp), attr, &cmd,
			      sizeof(cmd), &resp, sizeof(resp));
	if (ret) {
		vrnic_xrc_tgt_free(qp);
		errno = ret;
		return NULL;
	}
	return &qp->ibv_qp;
}
