/* SPDX-License-Identifier: GPL-2.0 OR Apache-2.0 */
/*
 * Everything that depends on the kernel version lives here. The driver targets
 * Debian trixie's 6.12 kernel; the verbs op signatures it uses are:
 *   create_cq(ib_cq *, const ib_cq_init_attr *, uverbs_attr_bundle *)
 *   reg_user_mr(ib_pd *, start, length, virt_addr, access, ib_udata *)
 *   ib_modify_qp_is_ok(cur, next, type, mask) (no link-layer argument)
 * and struct pci_error_handlers.reset_prepare/reset_done (since 4.13), so a
 * function reset reaches the driver; no wrapper needed within the 6.12 floor.
 */
#ifndef VRNIC_COMPAT_H
#define VRNIC_COMPAT_H

#include <linux/version.h>
#include <rdma/ib_verbs.h>
#include <rdma/iter.h>		/* rdma_umem_for_each_dma_block() since 6.12 */
#include <rdma/uverbs_ioctl.h>

#if LINUX_VERSION_CODE < KERNEL_VERSION(6, 12, 0)
#error "vrnic needs Linux 6.12 or later (create_cq takes a uverbs_attr_bundle)"
#endif

/* The driver-private udata of create_cq; NULL for in-kernel callers. */
static inline struct ib_udata *
vrnic_cq_udata(struct uverbs_attr_bundle *attrs)
{
	return attrs ? &attrs->driver_udata : NULL;
}

static inline bool vrnic_modify_qp_is_ok(enum ib_qp_state cur,
					 enum ib_qp_state next,
					 enum ib_qp_type type, int mask)
{
	/* 6.12 dropped the link-layer argument; IB transitions are implied. */
	return ib_modify_qp_is_ok(cur, next, type, (enum ib_qp_attr_mask)mask);
}

#endif /* VRNIC_COMPAT_H */
