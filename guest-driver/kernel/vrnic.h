/* SPDX-License-Identifier: GPL-2.0 OR Apache-2.0 */
/*
 * vrnic: driver for the vrnic software RDMA HCA. User processes run their
 * data path in the rdma-core provider, as with EFA; in RoCE mode the driver
 * also has a kernel data path (kernel PDs, CQs, QPs including the GSI QP) so
 * that ib_mad, ib_cm and rdma_cm work.
 *
 * Layers: vrnic_admin.c (admin queue engine, one function per command) ->
 * vrnic_eq.c (event queues, interrupts), vrnic_kdb.c (the kernel context's
 * doorbell pages) -> vrnic_pbl.c (page lists), vrnic_kring.c (kernel rings)
 * -> vrnic_verbs.c, vrnic_mr.c, vrnic_cq.c, vrnic_srq.c, vrnic_qp.c,
 * vrnic_xrcd.c, vrnic_ah.c (verbs),
 * vrnic_poll.c, vrnic_post.c (kernel data path), vrnic_netdev.c,
 * vrnic_gid.c (RoCE: the paired net_device, GIDs), vrnic_counters.c (hw
 * counters) -> vrnic_main.c (PCI
 * probe/remove, ib_device registration).
 *
 * Every hardware layout comes from the generated hw-spec headers; WQEs and
 * CQEs are encoded by guest-driver/common/vrnic_wqe.h, shared with the
 * provider.
 */
#ifndef VRNIC_H
#define VRNIC_H

#include <linux/bitops.h>
#include <linux/etherdevice.h>
#include <linux/mutex.h>
#include <linux/netdevice.h>
#include <linux/pci.h>
#include <linux/spinlock.h>
#include <linux/types.h>
#include <linux/wait.h>
#include <linux/xarray.h>
#include <rdma/ib_umem.h>
#include <rdma/ib_verbs.h>

#include "vrnic/vrnic_hw.h"
#include "vrnic_compat.h"
#include "vrnic_wqe.h"

#define DRV_NAME "vrnic"

/* Admin queue geometry and timing (driver choices, within the spec limits). */
#define VRNIC_AQ_DEPTH_LOG2	6
#define VRNIC_AQ_TIMEOUT_MS	5000
#define VRNIC_AQ_POLL_MS	10
#define VRNIC_READY_TIMEOUT_US	(1000 * 1000)
/* Busy-waited (a reset may run in hard-IRQ context); the device needs none. */
#define VRNIC_RESET_TIMEOUT_US	(100 * 1000)

/* EQ depth bounds from the spec (cmd_create_eq.depth_log2 is 1..16). */
#define VRNIC_EQ_DEPTH_LOG2_MIN	6
#define VRNIC_EQ_DEPTH_LOG2_MAX	16

/* Page sizes the driver may ever hand to the device. */
#define VRNIC_PAGE_SHIFT_MASK	GENMASK(VRNIC_PAGE_SHIFT_MAX, VRNIC_PAGE_SHIFT_MIN)

/* The generated layouts assume 4 KiB kernel pages for doorbell mappings. */
static_assert(PAGE_SIZE == VRNIC_DB_PAGE_SIZE);

/* A hw-spec enum value that is defined as equal to its verbs counterpart. */
#define VRNIC_ASSERT_SAME(hw, ib) static_assert((int)(hw) == (int)(ib), #hw)

/* Limits read from BAR0 at probe, sanitized; these are what the driver enforces. */
struct vrnic_limits {
	u32 caps;
	u32 max_qp;
	u32 max_cq;
	u32 max_mr;
	u32 max_pd;
	u32 max_qp_wr;		/* power of two */
	u32 max_cqe;		/* power of two */
	u32 max_sge;		/* <= U8_MAX */
	u32 max_inline;
	u32 max_msg_size;
	u32 max_qp_rd_atom;
	u32 max_eq;
	u32 max_uctx;		/* < VRNIC_DB_PAGES: each holds a page */
	u64 page_size_cap;	/* restricted to VRNIC_PAGE_SHIFT_MASK */
	u64 max_mr_size;
	u32 comp_vectors;	/* from QUERY_DEVICE: vectors for completion EQs */
	/* From QUERY_DEVICE, 0 without the CAPS bit, capped by the spec. */
	u32 max_srq;		/* CAPS.SRQ */
	u32 max_fast_reg_pages;	/* CAPS.MEM_MGT */
	u32 max_mw;		/* CAPS.MW */
	u32 max_xrcd;		/* CAPS.XRC (and CAPS.SRQ) */
};

/* Where an object's doorbell is: a page of the doorbell BAR and a slot in it. */
struct vrnic_db_loc {
	u32 page;
	u32 slot;
};

/* A doorbell page of the kernel context, mapped once (vrnic_kdb.c). */
struct vrnic_kdb_page {
	void __iomem *db;		/* BAR2 page */
	void __iomem *kick;		/* BAR4 page of the same number */
};

/*
 * A ring in kernel memory (kernel CQs and QPs): DMA-coherent pages, zeroed,
 * handed to the device as a page list. Entries are powers of two no larger
 * than a page, so none straddles two pages.
 */
struct vrnic_kring {
	void **pages;
	dma_addr_t *pages_dma;
	u32 npages;
	u32 entry_shift;
};

struct vrnic_aq {
	struct mutex lock;		/* one command in flight */
	wait_queue_head_t wait;		/* woken by MSI-X vector 0 */
	void *sq;			/* 2^depth_log2 commands of 128 bytes */
	dma_addr_t sq_dma;
	struct vrnic_aq_completion *cq;	/* 2^depth_log2 completions */
	dma_addr_t cq_dma;
	u32 depth_log2;
	u32 pi;				/* free-running producer index */
	u32 ci;				/* free-running consumer index */
	u32 next_cmd_id;
};

struct vrnic_eq {
	struct vrnic_dev *dev;
	struct vrnic_eqe *ring;
	dma_addr_t ring_dma;
	size_t ring_size;
	u32 depth_log2;
	u32 ci;				/* free-running consumer index */
	u32 eqn;
	struct vrnic_db_loc db;		/* in a page of the kernel context */
	const struct vrnic_kdb_page *kdb; /* that page */
	u16 vector;			/* MSI-X vector index */
	bool async;
	bool created;			/* exists on the device */
	bool irq_requested;
	char irq_name[32];
};

/* Room for a counter's lowercased hw-spec name ("cqe_rnr_retry_exc_err"). */
#define VRNIC_COUNTER_NAME_LEN	32

/*
 * The device's counters (SPEC "Counters", with CAPS.COUNTERS) as rdma hw
 * counters: the port's, and rdma_counters that aggregate the QPs bound to
 * them (vrnic_counters.c). Lock order: the core's rdma_counter lock or
 * port hw_stats lock, then @lock, then the admin queue's.
 */
struct vrnic_counters {
	u32 num;			/* counters the device has (<= COUNTER_COUNT); 0: none */
	char names[VRNIC_COUNTER_COUNT][VRNIC_COUNTER_NAME_LEN];
	struct rdma_stat_desc descs[VRNIC_COUNTER_COUNT];
	struct mutex lock;		/* everything below */
	struct xarray counters;		/* rdma_counter id -> struct vrnic_cnt */
	u32 next_id;			/* of counters (xa_alloc_cyclic) */
	/* Counted by QPs while bound to an rdma_counter, then unbound. */
	u64 moved[VRNIC_COUNTER_COUNT];
	__le64 raw[VRNIC_COUNTER_COUNT];	/* scratch: one answer */
	u64 now[VRNIC_COUNTER_COUNT];		/* scratch: its values */
	u64 sum[VRNIC_COUNTER_COUNT];		/* scratch: a sum of QPs */
};

enum vrnic_dev_flag {
	VRNIC_FLAG_DEAD,		/* admin queue unusable; device was reset */
	VRNIC_FLAG_REGISTERED,		/* ib_device registered: device events may be dispatched */
};

struct vrnic_dev {
	struct ib_device ibdev;
	struct pci_dev *pdev;
	void __iomem *regs;		/* BAR0 registers */
	void __iomem *kdb;		/* BAR2 page 0: the kernel's first doorbell page */
	phys_addr_t db_bar;		/* BAR2 bus address, for user mmap */
	phys_addr_t kick_bar;		/* BAR4 bus address, for user mmap */
	unsigned long flags;

	struct vrnic_limits lim;
	struct ib_device_attr attrs;	/* from QUERY_DEVICE at probe */
	u16 lid;
	union ib_gid gid;

	struct vrnic_aq aq;
	int num_vectors;		/* MSI-X vectors allocated */
	struct vrnic_eq async_eq;	/* vector 0 */
	struct vrnic_eq *comp_eqs;	/* vectors 1..num_comp_eqs */
	u32 num_comp_eqs;

	struct xarray cqs;		/* cqn -> struct vrnic_cq */
	struct xarray qps;		/* qpn -> struct vrnic_qp */
	struct xarray srqs;		/* srqn -> struct vrnic_srq */
	struct mutex kdb_lock;		/* serializes adding to kdb_pages */
	struct xarray kdb_pages;	/* page -> struct vrnic_kdb_page */

	/* RoCE mode (PORT_INFO.LINK_ETH): an Ethernet port paired with a netdev. */
	bool roce;
	u8 mac[ETH_ALEN];		/* from QUERY_PORT: the netdev to pair with */
	struct notifier_block netdev_nb;
	bool netdev_nb_registered;
	struct net_device *netdev;	/* the paired netdev (under rtnl) */
	bool port_active;		/* last state reported (under rtnl) */
	struct work_struct rescan_work;	/* GID rescan after a late pairing */

	struct vrnic_counters cnt;
};

struct vrnic_user_mmap_entry {
	struct rdma_user_mmap_entry rdma_entry;
	phys_addr_t address;
};

/* A doorbell page of a user context: its doorbell and kick mmap entries. */
struct vrnic_db_page {
	struct rdma_user_mmap_entry *db_entry;
	struct rdma_user_mmap_entry *kick_entry;
	u64 db_key;
	u64 kick_key;
};

struct vrnic_ucontext {
	struct ib_ucontext ibuctx;
	u32 uctx;
	u32 first_page;
	struct mutex pages_lock;	/* serializes adding to pages */
	struct xarray pages;		/* page number -> struct vrnic_db_page */
	u32 num_pages;			/* entries in pages */
};

struct vrnic_pd {
	struct ib_pd ibpd;
	u32 pdn;
	u32 uctx;
};

struct vrnic_mr {
	struct ib_mr ibmr;
	struct ib_umem *umem;
	u32 uctx;
	int access;			/* user MR: its verbs access flags */

	/*
	 * Fast-registration MR (alloc_mr, pages != NULL): the page list that
	 * its REG_MR work requests name, read by the device when it executes
	 * one, so map_mr_sg may rewrite it only while no REG_MR is in flight
	 * (the verbs rule).
	 */
	__le64 *pages;
	dma_addr_t pages_dma;
	u32 max_pages;
	u32 npages;
};

/* A memory window: the device's object; the provider binds it. */
struct vrnic_mw {
	struct ib_mw ibmw;
	u32 uctx;
};

struct vrnic_cq {
	struct ib_cq ibcq;
	struct ib_umem *umem;		/* user CQ: the provider's ring */
	struct vrnic_eq *eq;
	u32 cqn;
	struct vrnic_db_loc db;
	u32 uctx;

	/*
	 * lock: poll_cq, req_notify_cq and resizing. While resizing (set and
	 * cleared under it; one resize at a time) a kernel CQ's pollers are
	 * turned away: RESIZE_CQ sleeps, so the lock cannot be held across it.
	 */
	spinlock_t lock;
	bool resizing;

	/* Kernel CQ (umem == NULL): polled by vrnic_poll.c. */
	struct vrnic_kring ring;
	void __iomem *slot;		/* its struct vrnic_db_cq_slot */
	u32 depth_log2;
	u32 ci;				/* free-running consumer index */
	u32 arm_seq;			/* last arm sequence number written */
};

struct vrnic_srq {
	struct ib_srq ibsrq;
	struct ib_umem *umem;		/* user SRQ: the provider's ring */
	u32 srqn;
	struct vrnic_db_loc db;
	u32 uctx;
	u32 depth_log2;
	u32 max_sge;

	/* Kernel SRQ (umem == NULL): posted to by vrnic_post_srq_recv(). */
	spinlock_t lock;		/* posting */
	struct vrnic_kring ring;
	void __iomem *slot;		/* its struct vrnic_db_srq_slot */
	u32 pi;				/* free-running producer index (lock) */
	unsigned long *busy;		/* slots posted and not yet polled */
};

/* An XRC domain: the kernel context's, shared by processes (vrnic_xrcd.c). */
struct vrnic_xrcd {
	struct ib_xrcd ibxrcd;
	u32 xrcdn;
};

/* A send or receive queue of a kernel QP. */
struct vrnic_wq {
	spinlock_t lock;		/* posting */
	struct vrnic_kring ring;
	u32 depth_log2;
	u32 max_sge;
	u32 pi;				/* free-running producer index (lock) */
	u32 ci;				/* retired by poll_cq: acquire/release */
};

struct vrnic_qp {
	struct ib_qp ibqp;
	struct mutex lock;		/* serializes modify/query; protects state */
	struct ib_umem *sq_umem;	/* user QP: the provider's rings */
	struct ib_umem *rq_umem;
	enum ib_qp_state state;		/* last state set or seen */
	struct ib_qp_cap cap;
	enum ib_sig_type sq_sig_type;
	u32 qpn;			/* the device's (also for the GSI QP) */
	struct vrnic_db_loc db;
	u32 uctx;
	u8 dmac[ETH_ALEN];		/* RoCE: of the last AV set, for query_qp */

	/* Kernel QP (sq_umem == NULL): posted to by vrnic_post.c. */
	bool kernel;
	bool datagram;			/* UD or GSI: send WQEs carry a ud_av */
	struct vrnic_wq sq;
	struct vrnic_wq rq;
	const struct vrnic_kdb_page *kdb; /* page holding the doorbell slot */
};

/* An address handle: the AV copied into every UD WQE that names it. */
struct vrnic_ah {
	struct ib_ah ibah;
	struct vrnic_av av;		/* remote_qpn and remote_qkey unset */
};

static inline struct vrnic_dev *to_vdev(struct ib_device *ibdev)
{
	return container_of(ibdev, struct vrnic_dev, ibdev);
}

static inline struct vrnic_ucontext *to_vuctx(struct ib_ucontext *ibuctx)
{
	return container_of(ibuctx, struct vrnic_ucontext, ibuctx);
}

static inline struct vrnic_pd *to_vpd(struct ib_pd *ibpd)
{
	return container_of(ibpd, struct vrnic_pd, ibpd);
}

static inline struct vrnic_mr *to_vmr(struct ib_mr *ibmr)
{
	return container_of(ibmr, struct vrnic_mr, ibmr);
}

static inline struct vrnic_mw *to_vmw(struct ib_mw *ibmw)
{
	return container_of(ibmw, struct vrnic_mw, ibmw);
}

static inline struct vrnic_cq *to_vcq(struct ib_cq *ibcq)
{
	return container_of(ibcq, struct vrnic_cq, ibcq);
}

static inline struct vrnic_srq *to_vsrq(struct ib_srq *ibsrq)
{
	return container_of(ibsrq, struct vrnic_srq, ibsrq);
}

static inline struct vrnic_xrcd *to_vxrcd(struct ib_xrcd *ibxrcd)
{
	return container_of(ibxrcd, struct vrnic_xrcd, ibxrcd);
}

static inline struct vrnic_qp *to_vqp(struct ib_qp *ibqp)
{
	return container_of(ibqp, struct vrnic_qp, ibqp);
}

static inline struct vrnic_ah *to_vah(struct ib_ah *ibah)
{
	return container_of(ibah, struct vrnic_ah, ibah);
}

static inline struct vrnic_user_mmap_entry *
to_vmmap(struct rdma_user_mmap_entry *rdma_entry)
{
	return container_of(rdma_entry, struct vrnic_user_mmap_entry, rdma_entry);
}

static inline struct device *vrnic_dma_dev(struct vrnic_dev *dev)
{
	return &dev->pdev->dev;
}

/* Whether CAPS announces @mask (a VRNIC_BAR0_CAPS_*_MASK). */
static inline bool vrnic_has_cap(const struct vrnic_dev *dev, u32 mask)
{
	return dev->lim.caps & mask;
}

static inline bool vrnic_is_dead(struct vrnic_dev *dev)
{
	return test_bit(VRNIC_FLAG_DEAD, &dev->flags);
}

/* The context number of a verbs call: a user context, or the kernel's own. */
static inline u32 vrnic_udata_uctx(struct ib_udata *udata)
{
	struct vrnic_ucontext *uctx =
		rdma_udata_to_drv_context(udata, struct vrnic_ucontext, ibuctx);

	return uctx ? uctx->uctx : VRNIC_KERNEL_UCTX;
}

/* vrnic_admin.c: the queue engine, which owns device reset */
int vrnic_aq_dev_reset(struct vrnic_dev *dev, const char *why);
int vrnic_aq_init(struct vrnic_dev *dev);
void vrnic_aq_free(struct vrnic_dev *dev);
void vrnic_aq_wake(struct vrnic_dev *dev);
void vrnic_aq_mark_dead(struct vrnic_dev *dev, const char *why);

/* vrnic_admin.c: one function per command */
struct vrnic_create_qp_params {
	u8 qp_type;			/* enum vrnic_qp_type */
	u32 uctx;
	u32 pdn;
	u32 send_cqn;
	u32 recv_cqn;
	u8 sq_depth_log2;
	u8 rq_depth_log2;
	u8 sq_wqe_shift;
	u8 rq_wqe_shift;
	u8 max_send_sge;
	u8 max_recv_sge;
	u32 max_inline;
	u8 flags;			/* VRNIC_QP_FLAG_SRQ */
	u32 srqn;			/* with VRNIC_QP_FLAG_SRQ */
	struct vrnic_page_list sq_ring;
	struct vrnic_page_list rq_ring;
	u32 xrcdn;			/* XRC_TGT */
};

struct vrnic_create_srq_params {
	u32 uctx;
	u32 pdn;
	u8 depth_log2;
	u8 wqe_shift;
	u8 max_sge;
	u8 srq_type;			/* enum vrnic_srq_type */
	u32 xrcdn;			/* XRC */
	u32 cqn;			/* XRC */
	struct vrnic_page_list ring;
};

struct vrnic_rereg_mr_params {
	u32 uctx;
	u32 mkey;
	u32 flags;			/* enum vrnic_rereg_flags */
	u32 pdn;			/* CHANGE_PD */
	u32 access;			/* CHANGE_ACCESS */
	u64 iova;			/* CHANGE_TRANSLATION */
	u64 length;
	struct vrnic_page_list pages;
};

int vrnic_cmd_query_device(struct vrnic_dev *dev, struct vrnic_device_attr *out);
int vrnic_cmd_query_port(struct vrnic_dev *dev, u8 port, struct vrnic_port_attr *out);
int vrnic_cmd_query_counters(struct vrnic_dev *dev, u8 scope, u32 qpn,
			     __le64 *out, u32 n, u32 *count);
int vrnic_cmd_alloc_uctx(struct vrnic_dev *dev, u32 *uctx, u32 *db_page);
int vrnic_cmd_dealloc_uctx(struct vrnic_dev *dev, u32 uctx);
int vrnic_cmd_alloc_pd(struct vrnic_dev *dev, u32 uctx, u32 *pdn);
int vrnic_cmd_dealloc_pd(struct vrnic_dev *dev, u32 uctx, u32 pdn);
int vrnic_cmd_reg_mr(struct vrnic_dev *dev, u32 uctx, u32 pdn, u32 access,
		     u64 iova, u64 length, const struct vrnic_page_list *pages,
		     u32 *mkey);
int vrnic_cmd_dereg_mr(struct vrnic_dev *dev, u32 uctx, u32 mkey);
int vrnic_cmd_create_cq(struct vrnic_dev *dev, u32 uctx, u32 eqn, u8 depth_log2,
			const struct vrnic_page_list *ring, u32 *cqn,
			struct vrnic_db_loc *db);
int vrnic_cmd_destroy_cq(struct vrnic_dev *dev, u32 uctx, u32 cqn);
int vrnic_cmd_resize_cq(struct vrnic_dev *dev, u32 uctx, u32 cqn, u8 depth_log2,
			u32 ci, const struct vrnic_page_list *ring, u32 *moved);
int vrnic_cmd_rereg_mr(struct vrnic_dev *dev,
		       const struct vrnic_rereg_mr_params *p);
int vrnic_cmd_alloc_xrcd(struct vrnic_dev *dev, u32 *xrcdn);
int vrnic_cmd_dealloc_xrcd(struct vrnic_dev *dev, u32 xrcdn);
int vrnic_cmd_create_eq(struct vrnic_dev *dev, u8 depth_log2, u8 flags,
			u16 vector, const struct vrnic_page_list *ring,
			u32 *eqn, struct vrnic_db_loc *db);
int vrnic_cmd_destroy_eq(struct vrnic_dev *dev, u32 eqn);
int vrnic_cmd_create_qp(struct vrnic_dev *dev,
			const struct vrnic_create_qp_params *p,
			u32 *qpn, struct vrnic_db_loc *db);
int vrnic_cmd_modify_qp(struct vrnic_dev *dev, u32 uctx, u32 qpn, u32 attr_mask,
			const struct vrnic_qp_attr *attr, const u8 *dmac);
int vrnic_cmd_query_qp(struct vrnic_dev *dev, u32 uctx, u32 qpn,
		       struct vrnic_qp_attr *out);
int vrnic_cmd_destroy_qp(struct vrnic_dev *dev, u32 uctx, u32 qpn);
int vrnic_cmd_set_gid(struct vrnic_dev *dev, u8 index, u8 gid_type,
		      const union ib_gid *gid);
int vrnic_cmd_alloc_mr(struct vrnic_dev *dev, u32 pdn, u32 max_pages, u32 *mkey);
int vrnic_cmd_alloc_mw(struct vrnic_dev *dev, u32 uctx, u32 pdn, u8 mw_type,
		       u32 *rkey);
int vrnic_cmd_dealloc_mw(struct vrnic_dev *dev, u32 uctx, u32 rkey);
int vrnic_cmd_create_srq(struct vrnic_dev *dev,
			 const struct vrnic_create_srq_params *p, u32 *srqn,
			 struct vrnic_db_loc *db);
int vrnic_cmd_modify_srq(struct vrnic_dev *dev, u32 uctx, u32 srqn,
			 u32 attr_mask, u32 srq_limit);
int vrnic_cmd_query_srq(struct vrnic_dev *dev, u32 uctx, u32 srqn,
			struct vrnic_srq_attr *out);
int vrnic_cmd_destroy_srq(struct vrnic_dev *dev, u32 uctx, u32 srqn);

/* vrnic_eq.c */
int vrnic_eqs_create(struct vrnic_dev *dev);
int vrnic_eqs_request_irqs(struct vrnic_dev *dev);
void vrnic_eqs_destroy(struct vrnic_dev *dev);
void vrnic_eqs_free_irqs(struct vrnic_dev *dev);
void vrnic_eqs_free(struct vrnic_dev *dev);
void vrnic_eq_sync_irq(struct vrnic_eq *eq);

/* vrnic_kdb.c: the kernel context's doorbell pages */
const struct vrnic_kdb_page *vrnic_kdb_get(struct vrnic_dev *dev, u32 page);
void vrnic_kdb_unmap_all(struct vrnic_dev *dev);
void __iomem *vrnic_kdb_slot(const struct vrnic_kdb_page *p, u32 slot);
void vrnic_kdb_ring_qp(const struct vrnic_kdb_page *p, u32 slot, u32 off,
		       u32 pi);

/* vrnic_pbl.c: page lists handed to the device */
struct vrnic_pbl {
	struct vrnic_page_list desc;	/* goes into the command */
	u32 npages;
	u32 filled;
	__le64 *top;			/* DIRECT: the list; INDIRECT: level pointers */
	dma_addr_t top_dma;
	size_t top_size;
	__le64 **leaves;		/* INDIRECT: 4 KiB pages of addresses */
	dma_addr_t *leaves_dma;
	u32 nleaves;
};

int vrnic_pbl_from_umem(struct vrnic_dev *dev, struct vrnic_pbl *pbl,
			struct ib_umem *umem, unsigned long pgsz);
void vrnic_pbl_contiguous(struct vrnic_pbl *pbl, dma_addr_t addr, u32 npages,
			  unsigned int page_shift);
void vrnic_pbl_free(struct vrnic_dev *dev, struct vrnic_pbl *pbl);
int vrnic_pbl_from_dma_pages(struct vrnic_dev *dev, struct vrnic_pbl *pbl,
			     const dma_addr_t *pages, u32 npages);

/* vrnic_kring.c */
int vrnic_kring_alloc(struct vrnic_dev *dev, struct vrnic_kring *ring,
		      u32 depth_log2, u32 entry_shift);
void vrnic_kring_free(struct vrnic_dev *dev, struct vrnic_kring *ring);
int vrnic_kring_pbl(struct vrnic_dev *dev, const struct vrnic_kring *ring,
		    struct vrnic_pbl *pbl);

/* Entry @idx (already reduced modulo the depth) of @ring. */
static inline void *vrnic_kring_entry(const struct vrnic_kring *ring, u32 idx)
{
	size_t off = (size_t)idx << ring->entry_shift;

	return ring->pages[off >> PAGE_SHIFT] + (off & ~PAGE_MASK);
}

/* Copy a driver command from udata: zero-filled, min() of the sizes. */
int vrnic_copy_cmd_from_udata(void *cmd, size_t size, size_t min_size,
			      struct ib_udata *udata);
int vrnic_copy_resp_to_udata(struct ib_udata *udata, void *resp, size_t size);

/* vrnic_verbs.c */
int vrnic_query_device(struct ib_device *ibdev, struct ib_device_attr *props,
		       struct ib_udata *udata);
int vrnic_query_port(struct ib_device *ibdev, u32 port,
		     struct ib_port_attr *props);
int vrnic_get_port_immutable(struct ib_device *ibdev, u32 port,
			     struct ib_port_immutable *immutable);
enum rdma_link_layer vrnic_get_link_layer(struct ib_device *ibdev, u32 port);
int vrnic_query_pkey(struct ib_device *ibdev, u32 port, u16 index, u16 *pkey);
int vrnic_query_gid(struct ib_device *ibdev, u32 port, int index,
		    union ib_gid *gid);
void vrnic_get_dev_fw_str(struct ib_device *ibdev, char *str);
int vrnic_alloc_ucontext(struct ib_ucontext *ibuctx, struct ib_udata *udata);
void vrnic_dealloc_ucontext(struct ib_ucontext *ibuctx);
void vrnic_disassociate_ucontext(struct ib_ucontext *ibuctx);
int vrnic_mmap(struct ib_ucontext *ibuctx, struct vm_area_struct *vma);
int vrnic_uctx_db_page(struct ib_udata *udata, const struct vrnic_db_loc *db,
		       u64 *db_key, u64 *kick_key);
void vrnic_mmap_free(struct rdma_user_mmap_entry *rdma_entry);
int vrnic_alloc_pd(struct ib_pd *ibpd, struct ib_udata *udata);
int vrnic_dealloc_pd(struct ib_pd *ibpd, struct ib_udata *udata);
int vrnic_query_port_roce(struct vrnic_dev *dev, struct ib_port_attr *props);

/* vrnic_netdev.c: RoCE mode's paired net_device */
int vrnic_netdev_start(struct vrnic_dev *dev);
void vrnic_netdev_stop(struct vrnic_dev *dev);
void vrnic_netdev_registered(struct vrnic_dev *dev);

/* vrnic_gid.c */
int vrnic_add_gid(const struct ib_gid_attr *attr, void **context);
int vrnic_del_gid(const struct ib_gid_attr *attr, void **context);

/* vrnic_counters.c */
void vrnic_counters_init(struct vrnic_dev *dev);
void vrnic_counters_set_ops(struct vrnic_dev *dev);
void vrnic_counters_free(struct vrnic_dev *dev);

/* vrnic_ah.c */
int vrnic_create_ah(struct ib_ah *ibah, struct rdma_ah_init_attr *init_attr,
		    struct ib_udata *udata);
int vrnic_destroy_ah(struct ib_ah *ibah, u32 flags);
int vrnic_av_from_ah_attr(struct vrnic_dev *dev, const struct rdma_ah_attr *a,
			  struct vrnic_av *av);

/* vrnic_mr.c */
struct ib_mr *vrnic_reg_user_mr(struct ib_pd *ibpd, u64 start, u64 length,
				u64 virt_addr, int access_flags,
				struct ib_udata *udata);
struct ib_mr *vrnic_rereg_user_mr(struct ib_mr *ibmr, int flags, u64 start,
				  u64 length, u64 virt_addr, int access_flags,
				  struct ib_pd *ibpd, struct ib_udata *udata);
int vrnic_dereg_mr(struct ib_mr *ibmr, struct ib_udata *udata);
struct ib_mr *vrnic_get_dma_mr(struct ib_pd *ibpd, int access_flags);
struct ib_mr *vrnic_alloc_mr(struct ib_pd *ibpd, enum ib_mr_type mr_type,
			     u32 max_num_sg);
int vrnic_map_mr_sg(struct ib_mr *ibmr, struct scatterlist *sg, int sg_nents,
		    unsigned int *sg_offset);
int vrnic_mr_wr_access(int ib_access, u32 *access);
int vrnic_alloc_mw(struct ib_mw *ibmw, struct ib_udata *udata);
int vrnic_dealloc_mw(struct ib_mw *ibmw);

/* vrnic_cq.c */
int vrnic_create_cq(struct ib_cq *ibcq, const struct ib_cq_init_attr *attr,
		    struct uverbs_attr_bundle *attrs);
int vrnic_destroy_cq(struct ib_cq *ibcq, struct ib_udata *udata);
int vrnic_resize_cq(struct ib_cq *ibcq, int cqe, struct ib_udata *udata);
void vrnic_cq_event(struct vrnic_dev *dev, u32 cqn, bool completion);
void vrnic_cq_comp_event(struct vrnic_eq *eq, u32 cqn);

/* vrnic_poll.c: kernel CQs */
int vrnic_poll_cq(struct ib_cq *ibcq, int num_entries, struct ib_wc *wc);
int vrnic_req_notify_cq(struct ib_cq *ibcq, enum ib_cq_notify_flags flags);
void vrnic_cq_clean(struct ib_cq *ibcq, struct vrnic_qp *qp);

/* vrnic_post.c: kernel QPs */
int vrnic_post_send(struct ib_qp *ibqp, const struct ib_send_wr *wr,
		    const struct ib_send_wr **bad_wr);
int vrnic_post_recv(struct ib_qp *ibqp, const struct ib_recv_wr *wr,
		    const struct ib_recv_wr **bad_wr);

/* vrnic_srq.c */
int vrnic_create_srq(struct ib_srq *ibsrq, struct ib_srq_init_attr *init_attr,
		     struct ib_udata *udata);
int vrnic_modify_srq(struct ib_srq *ibsrq, struct ib_srq_attr *attr,
		     enum ib_srq_attr_mask mask, struct ib_udata *udata);
int vrnic_query_srq(struct ib_srq *ibsrq, struct ib_srq_attr *attr);
int vrnic_destroy_srq(struct ib_srq *ibsrq, struct ib_udata *udata);
int vrnic_post_srq_recv(struct ib_srq *ibsrq, const struct ib_recv_wr *wr,
			const struct ib_recv_wr **bad_wr);
void vrnic_srq_event(struct vrnic_dev *dev, u32 srqn, enum ib_event_type type);
void vrnic_srq_retire(struct vrnic_srq *srq, u16 wqe_index);

/* vrnic_xrcd.c */
int vrnic_alloc_xrcd(struct ib_xrcd *ibxrcd, struct ib_udata *udata);
int vrnic_dealloc_xrcd(struct ib_xrcd *ibxrcd, struct ib_udata *udata);

/* vrnic_qp.c */
int vrnic_create_qp(struct ib_qp *ibqp, struct ib_qp_init_attr *init_attr,
		    struct ib_udata *udata);
int vrnic_modify_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr, int attr_mask,
		    struct ib_udata *udata);
int vrnic_query_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr, int attr_mask,
		   struct ib_qp_init_attr *init_attr);
int vrnic_destroy_qp(struct ib_qp *ibqp, struct ib_udata *udata);
void vrnic_qp_event(struct vrnic_dev *dev, u32 qpn, enum ib_event_type type);

#endif /* VRNIC_H */
