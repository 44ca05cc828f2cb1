/* SPDX-License-Identifier: GPL-2.0 OR Linux-OpenIB */
/*
 * vrnic rdma-core provider: shared definitions.
 *
 * Object model (see hw-spec/SPEC.md, "Data path" and "Kernel <-> provider ABI"):
 * - The context maps its doorbell pages (POLL_STATE, PAGE_FLAG, slot flags,
 *   8-byte slots) and their kick pages, each once, as the kernel names them
 *   (the device adds pages to a context on demand).
 * - Every CQ, QP and SRQ owns one doorbell slot in one of those pages and
 *   rings in our memory. A QP created with an SRQ, and an XRC_SEND QP, have
 *   no receive ring; an XRC_RECV QP (the kernel's) has no rings and no slot.
 * - SRQ completions name their SRQ (CQE_FLAG_SRQ, srqn), found through the
 *   context's SRQ table: an XRC SRQ's CQEs name a QP of some other context.
 * - Ring indices are free-running 32-bit counters; entry i lives at i mod depth.
 *
 * Locking: cq->lock serialises poll/arm/clean of a CQ; wq->lock serialises
 * posting to one queue, srq->lock to one SRQ. Lock order: CQ locks (by
 * address) before WQ locks. wq->ci is advanced by poll_cq under the CQ lock
 * and read by post under the WQ lock, so it (and wq->pi, read by poll_cq for
 * a sanity check) is accessed with atomics; likewise an SRQ's busy bytes,
 * set by post_srq_recv and cleared by poll_cq. The SRQ table is read and
 * changed under srq_table_mutex, taken after a CQ lock (poll_cq frees a slot
 * under it, so destroy_srq cannot free the SRQ under a poller).
 */
#ifndef VRNIC_PROVIDER_H
#define VRNIC_PROVIDER_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <infiniband/driver.h>
#include <infiniband/kern-abi.h>
#include <util/util.h>

#include "vrnic_wqe.h"

/* uverbs command wrappers: core command followed by our udata struct. */
#define _STRUCT_vrnic_alloc_ucontext_resp struct {}
#define _STRUCT_vrnic_create_cq_cmd struct {}
#define _STRUCT_vrnic_create_cq_resp struct {}
#define _STRUCT_vrnic_create_qp_cmd struct {}
#define _STRUCT_vrnic_create_qp_resp struct {}
#define _STRUCT_vrnic_create_ah_resp struct {}
#define _STRUCT_vrnic_create_srq_cmd struct {}
#define _STRUCT_vrnic_create_srq_resp struct {}
#define _STRUCT_vrnic_resize_cq_cmd struct {}
DECLARE_DRV_CMD(vrnic_ucmd_get_context, IB_USER_VERBS_CMD_GET_CONTEXT, empty,
		vrnic_alloc_ucontext_resp);
DECLARE_DRV_CMD(vrnic_ucmd_create_cq_ex, IB_USER_VERBS_EX_CMD_CREATE_CQ,
		vrnic_create_cq_cmd, vrnic_create_cq_resp);
DECLARE_DRV_CMD(vrnic_ucmd_create_qp, IB_USER_VERBS_CMD_CREATE_QP,
		vrnic_create_qp_cmd, vrnic_create_qp_resp);
DECLARE_DRV_CMD(vrnic_ucmd_create_ah, IB_USER_VERBS_CMD_CREATE_AH, empty,
		vrnic_create_ah_resp);
DECLARE_DRV_CMD(vrnic_ucmd_create_srq, IB_USER_VERBS_CMD_CREATE_SRQ,
		vrnic_create_srq_cmd, vrnic_create_srq_resp);
DECLARE_DRV_CMD(vrnic_ucmd_create_xsrq, IB_USER_VERBS_CMD_CREATE_XSRQ,
		vrnic_create_srq_cmd, vrnic_create_srq_resp);
DECLARE_DRV_CMD(vrnic_ucmd_resize_cq, IB_USER_VERBS_CMD_RESIZE_CQ,
		vrnic_resize_cq_cmd, empty);

/* A 24-bit number (QPN, SRQN) -> object, two levels of 4096 entries; the
 * second level is allocated on demand. */
#define VRNIC_TABLE_SHIFT 12
#define VRNIC_TABLE_SIZE (1u << VRNIC_TABLE_SHIFT)
#define VRNIC_TABLE_MASK (VRNIC_TABLE_SIZE - 1)
#define VRNIC_TABLE_KEY_BITS (2 * VRNIC_TABLE_SHIFT)

struct vrnic_table {
	void **chunks[VRNIC_TABLE_SIZE];
};

struct vrnic_device {
	struct verbs_device ibv_dev;
};

/* One mapped doorbell page of the context and its kick page. */
struct vrnic_db_map {
	uint32_t page;
	uint8_t *db;		/* POLL_STATE, flags and slots (read/write) */
	uint8_t *kick;		/* KICK register (trapped, write only) */
};

struct vrnic_context {
	struct verbs_context ibv_ctx;
	pthread_mutex_t db_mutex;	/* serializes db_maps */
	struct vrnic_db_map *db_maps;	/* every page mapped so far */
	unsigned int num_db_maps;
	unsigned int db_maps_cap;
	uint32_t uctx;
	uint32_t max_sge;
	uint32_t max_inline;
	uint32_t max_qp_wr;
	uint32_t max_cqe;
	pthread_mutex_t qp_table_mutex;	/* serializes qp_table changes */
	struct vrnic_table qp_table;	/* readers: lock-free (vrnic.c) */
	pthread_mutex_t srq_table_mutex; /* every use of srq_table */
	struct vrnic_table srq_table;
};

struct vrnic_cq {
	union {
		struct ibv_cq ibv_cq;
		struct verbs_cq vcq;	/* its ibv_cq_ex, for create_cq_ex */
	};
	pthread_spinlock_t lock;
	struct vrnic_cqe *ring;
	size_t ring_size;
	uint32_t depth_log2;
	uint32_t ci;		/* free-running consumer index (under lock) */
	uint32_t arm_seq;	/* last arm sequence number (under lock) */
	uint32_t cqn;
	uint32_t *db_ci;	/* CQ slot words in the doorbell page */
	uint32_t *db_arm;
	/* Between start_poll and end_poll (under lock): the consumer index
	 * past the current completion, and that completion. */
	uint32_t poll_ci;
	struct ibv_wc poll_wc;
};

struct vrnic_wq {
	pthread_spinlock_t lock;
	uint8_t *ring;
	size_t ring_size;
	uint32_t depth;		/* power of two */
	uint32_t wqe_shift;
	uint32_t max_sge;
	uint32_t pi;		/* free-running producer index (atomic) */
	uint32_t ci;		/* free-running consumer index (atomic) */
	uint32_t *db;		/* sq_pi or rq_pi word of the QP slot */
	uint8_t *db_flag;	/* the slot's flag byte */
	uint8_t *db_page;	/* the page holding the slot */
	uint8_t *kick_page;	/* its kick page */
};

/*
 * A shared receive queue (SPEC "Shared receive queues"). QPs take its WQEs
 * in index order but complete them in any order, so slot i is free again
 * only once the CQE naming it has been polled: busy[i] is set by post and
 * cleared by poll_cq (or by a CQ clean that drops that CQE).
 */
struct vrnic_srq {
	union {
		struct ibv_srq ibv_srq;
		struct verbs_srq vsrq;	/* type, xrcd and cq, for XRC SRQs */
	};
	pthread_spinlock_t lock;
	uint8_t *ring;
	size_t ring_size;
	uint32_t depth;		/* power of two */
	uint32_t wqe_shift;
	uint32_t max_sge;
	uint32_t pi;		/* free-running producer index (under lock) */
	uint8_t *busy;		/* depth bytes, 1 while a slot's WQE is out */
	uint32_t *db;		/* pi word of the SRQ slot */
	uint32_t srqn;
};

struct vrnic_wr_batch;

struct vrnic_qp {
	union {
		struct ibv_qp ibv_qp;
		struct verbs_qp vqp;	/* its ibv_qp_ex, for create_qp_ex */
	};
	struct vrnic_wq sq;
	struct vrnic_wq rq;	/* unused (depth 0) with an SRQ */
	struct vrnic_srq *srq;	/* or NULL */
	uint32_t max_inline;
	bool sq_sig_all;
	bool datagram;		/* UD: send WQEs carry a ud_av */
	bool xrc;		/* XRC_SEND: send WQEs carry an xrc_seg */
	enum ibv_qp_state state; /* local copy, under both WQ locks */
	struct vrnic_wr_batch *wr_batch; /* ibv_wr_* state (qp_ex.c) or NULL */
};

/* An address handle: the AV every send through it copies into its WQE
 * (remote_qpn and remote_qkey come from the work request). */
struct vrnic_ah {
	struct ibv_ah ibv_ah;
	struct vrnic_av av;
};

static inline struct vrnic_context *to_vctx(struct ibv_context *ibctx)
{
	return container_of(ibctx, struct vrnic_context, ibv_ctx.context);
}

static inline struct vrnic_cq *to_vcq(struct ibv_cq *ibcq)
{
	return container_of(ibcq, struct vrnic_cq, ibv_cq);
}

static inline struct vrnic_qp *to_vqp(struct ibv_qp *ibqp)
{
	return container_of(ibqp, struct vrnic_qp, ibv_qp);
}

static inline struct vrnic_ah *to_vah(struct ibv_ah *ibah)
{
	return container_of(ibah, struct vrnic_ah, ibv_ah);
}

static inline struct vrnic_srq *to_vsrq(struct ibv_srq *ibsrq)
{
	return container_of(ibsrq, struct vrnic_srq, ibv_srq);
}

/* An XRC_RECV QP, created or opened: the kernel's, without rings. */
static inline bool vrnic_qp_is_xrc_tgt(const struct vrnic_qp *qp)
{
	return qp->ibv_qp.qp_type == IBV_QPT_XRC_RECV;
}

/* Smallest n with 2^n >= v. */
static inline uint32_t vrnic_log2_ceil(uint32_t v)
{
	return v <= 1 ? 0 : ilog32(v - 1);
}

/* Address of a 32-bit word in doorbell slot @slot of doorbell page @page. */
static inline uint32_t *vrnic_db_word(uint8_t *page, uint32_t slot,
				      unsigned int off)
{
	return (uint32_t *)(page + VRNIC_DB_SLOT_BASE +
			    (size_t)slot * VRNIC_DB_SLOT_SIZE + off);
}

/* WQE of free-running index @idx. */
static inline void *vrnic_wqe(struct vrnic_wq *wq, uint32_t idx)
{
	return wq->ring + ((size_t)(idx & (wq->depth - 1)) << wq->wqe_shift);
}

static inline struct vrnic_cqe *vrnic_cqe_at(struct vrnic_cq *cq, uint32_t ci)
{
	return &cq->ring[ci & ((1u << cq->depth_log2) - 1)];
}

static inline void *vrnic_srq_wqe(struct vrnic_srq *srq, uint32_t idx)
{
	return srq->ring + ((size_t)(idx & (srq->depth - 1)) << srq->wqe_shift);
}

/* Whether the CQE at free-running index @ci is the device's (phase rule in
 * vrnic_wqe.h). Reads owner with acquire ordering, so the caller may read
 * the other fields afterwards. */
static inline bool vrnic_cqe_valid(struct vrnic_cq *cq, uint32_t ci)
{
	uint8_t owner = __atomic_load_n(&vrnic_cqe_at(cq, ci)->owner,
					__ATOMIC_ACQUIRE);

	return vrnic_cqe_owned(owner, ci, cq->depth_log2);
}

/* Sends may be posted from RTS on (in SQD they wait, in ERR they are
 * flushed); before RTS the device would fail the QP. Under sq.lock. */
static inline bool vrnic_sq_ready(const struct vrnic_qp *qp)
{
	return qp->state != IBV_QPS_RESET && qp->state != IBV_QPS_INIT &&
	       qp->state != IBV_QPS_RTR;
}

/* vrnic.c */
int vrnic_map_db_page(struct vrnic_context *ctx, uint32_t page,
		      uint64_t db_key, uint64_t kick_key,
		      struct vrnic_db_map *out);
int vrnic_map_object_slot(struct vrnic_context *ctx, const char *what,
			  uint32_t slot, uint32_t page, uint64_t db_key,
			  uint64_t kick_key, struct vrnic_db_map *map);
void *vrnic_table_find(struct vrnic_table *t, uint32_t key);
int vrnic_table_insert(struct vrnic_table *t, uint32_t key, void *obj);
void vrnic_table_remove(struct vrnic_table *t, uint32_t key, void *obj);
void vrnic_table_free(struct vrnic_table *t);
struct vrnic_qp *vrnic_find_qp(struct vrnic_context *ctx, uint32_t qpn);
int vrnic_insert_qp(struct vrnic_context *ctx, struct vrnic_qp *qp);
void vrnic_remove_qp(struct vrnic_context *ctx, struct vrnic_qp *qp);

/* verbs.c */
void *vrnic_alloc_ring(size_t bytes, size_t *size);
void vrnic_free_ring(void *buf, size_t size);
int vrnic_size_queues(struct vrnic_context *ctx, struct vrnic_qp *qp,
		      const struct ibv_qp_cap *req);
int vrnic_query_device(struct ibv_context *ibctx,
		       const struct ibv_query_device_ex_input *input,
		       struct ibv_device_attr_ex *attr, size_t attr_size);
int vrnic_query_port(struct ibv_context *ibctx, uint8_t port,
		     struct ibv_port_attr *attr);
struct ibv_pd *vrnic_alloc_pd(struct ibv_context *ibctx);
int vrnic_dealloc_pd(struct ibv_pd *pd);
struct ibv_mr *vrnic_reg_mr(struct ibv_pd *pd, void *addr, size_t len,
			    uint64_t hca_va, int access);
int vrnic_rereg_mr(struct verbs_mr *vmr, int flags, struct ibv_pd *pd,
		   void *addr, size_t length, int access);
int vrnic_dereg_mr(struct verbs_mr *vmr);
struct vrnic_cq *vrnic_cq_create(struct ibv_context *ibctx,
				 struct ibv_cq_init_attr_ex *attr);
struct ibv_cq *vrnic_create_cq(struct ibv_context *ibctx, int cqe,
			       struct ibv_comp_channel *channel,
			       int comp_vector);
int vrnic_resize_cq(struct ibv_cq *ibcq, int cqe);
int vrnic_destroy_cq(struct ibv_cq *ibcq);
struct vrnic_qp *vrnic_qp_create(struct ibv_qp_init_attr_ex *attr);
struct ibv_qp *vrnic_create_qp(struct ibv_pd *pd,
			       struct ibv_qp_init_attr *attr);
int vrnic_modify_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr,
		    int attr_mask);
int vrnic_query_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr,
		   int attr_mask, struct ibv_qp_init_attr *init_attr);
int vrnic_destroy_qp(struct ibv_qp *ibqp);
struct ibv_ah *vrnic_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr);
int vrnic_destroy_ah(struct ibv_ah *ibah);

/* srq.c */
int vrnic_size_srq(struct vrnic_context *ctx, struct vrnic_srq *srq,
		   const struct ibv_srq_attr *req);
struct ibv_srq *vrnic_create_srq(struct ibv_pd *pd,
				 struct ibv_srq_init_attr *attr);
struct ibv_srq *vrnic_create_srq_ex(struct ibv_context *ibctx,
				    struct ibv_srq_init_attr_ex *attr);
int vrnic_get_srq_num(struct ibv_srq *ibsrq, uint32_t *srq_num);
int vrnic_modify_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr,
		     int attr_mask);
int vrnic_query_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr);
int vrnic_destroy_srq(struct ibv_srq *ibsrq);
int vrnic_post_srq_recv(struct ibv_srq *ibsrq, struct ibv_recv_wr *wr,
			struct ibv_recv_wr **bad_wr);
bool vrnic_srq_complete(struct vrnic_context *ctx, uint32_t srqn,
			uint16_t wqe_index);

/* xrc.c */
struct ibv_xrcd *vrnic_open_xrcd(struct ibv_context *ibctx,
				 struct ibv_xrcd_init_attr *attr);
int vrnic_close_xrcd(struct ibv_xrcd *xrcd);
struct vrnic_qp *vrnic_xrc_recv_qp_create(struct ibv_context *ibctx,
					  struct ibv_qp_init_attr_ex *attr);
struct ibv_qp *vrnic_open_qp(struct ibv_context *ibctx,
			     struct ibv_qp_open_attr *attr);

/* mw.c */
struct ibv_mw *vrnic_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type);
int vrnic_dealloc_mw(struct ibv_mw *mw);
int vrnic_bind_mw(struct ibv_qp *ibqp, struct ibv_mw *mw,
		  struct ibv_mw_bind *mw_bind);
int vrnic_bind_mw_fields(const struct ibv_mw_bind_info *info,
			 struct vrnic_bind_mw_fields *out);

/*
 * datapath.c. The per-WQE pieces (vrnic_qp_allows, vrnic_build_send_wqe,
 * vrnic_wq_full, vrnic_ring_doorbell, vrnic_cqe_retire) are also what the
 * extended verbs (ibv_wr_*, poll_cq_ex) post and poll with.
 */
bool vrnic_qp_allows(const struct vrnic_qp *qp, unsigned int opcode);
int vrnic_build_send_wqe(struct vrnic_qp *qp, void *wqe,
			 const struct ibv_send_wr *wr);
bool vrnic_wq_full(struct vrnic_wq *wq, uint32_t pi);
void vrnic_ring_doorbell(struct vrnic_wq *wq, uint32_t pi);
bool vrnic_cqe_retire(struct vrnic_context *ctx,
		      const struct vrnic_cqe_fields *cqe);
int vrnic_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr,
		    struct ibv_send_wr **bad_wr);
int vrnic_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr,
		    struct ibv_recv_wr **bad_wr);
bool vrnic_cq_next_wc(struct vrnic_cq *cq, uint32_t *ci, struct ibv_wc *wc);
void vrnic_cq_consumed(struct vrnic_cq *cq, uint32_t ci);
int vrnic_poll_cq(struct ibv_cq *ibcq, int num_entries, struct ibv_wc *wc);
int vrnic_req_notify_cq(struct ibv_cq *ibcq, int solicited_only);
void vrnic_cq_clean(struct vrnic_cq *cq, struct vrnic_qp *qp);
void vrnic_cq_clean_srq(struct vrnic_cq *cq, uint32_t srqn);

/* qp_ex.c */
int vrnic_qp_ex_init(struct vrnic_qp *qp);
struct ibv_qp *vrnic_create_qp_ex(struct ibv_context *ibctx,
				  struct ibv_qp_init_attr_ex *attr);

/* cq_ex.c */
void vrnic_cq_ex_init(struct vrnic_cq *cq, uint64_t wc_flags);
struct ibv_cq_ex *vrnic_create_cq_ex(struct ibv_context *ibctx,
				     struct ibv_cq_init_attr_ex *attr);

#endif /* VRNIC_PROVIDER_H */
