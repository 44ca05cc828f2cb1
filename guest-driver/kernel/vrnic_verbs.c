// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
/*
 * Device, port, user context, mmap and PD verbs.
 *
 * IB mode: the port is InfiniBand, always ACTIVE with a fixed LID, no subnet
 * manager: one GID (from QUERY_PORT at probe), one P_Key (0xffff), no MADs.
 * RoCE mode: an Ethernet port with RoCE v2, MADs (the GSI QP) and CM, whose
 * state, MTU and GIDs follow the paired netdev (vrnic_netdev.c); one P_Key.
 */
#include <linux/mm.h>
#include <linux/slab.h>
#include <rdma/ib_addr.h>
#include <rdma/ib_mad.h>
#include <rdma/ib_user_verbs.h>

#include "vrnic.h"

VRNIC_ASSERT_SAME(VRNIC_PORT_STATE_DOWN, IB_PORT_DOWN);
VRNIC_ASSERT_SAME(VRNIC_PORT_STATE_INIT, IB_PORT_INIT);
VRNIC_ASSERT_SAME(VRNIC_PORT_STATE_ARMED, IB_PORT_ARMED);
VRNIC_ASSERT_SAME(VRNIC_PORT_STATE_ACTIVE, IB_PORT_ACTIVE);
VRNIC_ASSERT_SAME(VRNIC_MTU_SIZE_256, IB_MTU_256);
VRNIC_ASSERT_SAME(VRNIC_MTU_SIZE_512, IB_MTU_512);
VRNIC_ASSERT_SAME(VRNIC_MTU_SIZE_1024, IB_MTU_1024);
VRNIC_ASSERT_SAME(VRNIC_MTU_SIZE_2048, IB_MTU_2048);
VRNIC_ASSERT_SAME(VRNIC_MTU_SIZE_4096, IB_MTU_4096);

int vrnic_copy_cmd_from_udata(void *cmd, size_t size, size_t min_size,
			      struct ib_udata *udata)
{
	memset(cmd, 0, size);
	if (!udata || udata->inlen < min_size)
		return -EINVAL;
	/* A newer provider's trailing fields must be zero: we ignore them. */
	if (udata->inlen > size &&
	    !ib_is_udata_cleared(udata, size, udata->inlen - size))
		return -EOPNOTSUPP;
	return ib_copy_from_udata(cmd, udata, min(size, udata->inlen));
}

int vrnic_copy_resp_to_udata(struct ib_udata *udata, void *resp, size_t size)
{
	if (!udata || !udata->outlen)
		return 0;
	return ib_copy_to_udata(udata, resp, min(size, udata->outlen));
}

int vrnic_query_device(struct ib_device *ibdev, struct ib_device_attr *props,
		       struct ib_udata *udata)
{
	struct vrnic_dev *dev = to_vdev(ibdev);

	if (udata && udata->inlen &&
	    !ib_is_udata_cleared(udata, 0, udata->inlen))
		return -EINVAL;

	*props = dev->attrs;
	return 0;
}

static int vrnic_port_state(u8 state, enum ib_port_state *out)
{
	if (state < VRNIC_PORT_STATE_DOWN || state > VRNIC_PORT_STATE_ACTIVE)
		return -EIO;
	*out = state;
	return 0;
}

static int vrnic_mtu(u8 mtu, enum ib_mtu *out)
{
	if (mtu < VRNIC_MTU_SIZE_256 || mtu > VRNIC_MTU_SIZE_4096)
		return -EIO;
	*out = mtu;
	return 0;
}

int vrnic_query_port(struct ib_device *ibdev, u32 port,
		     struct ib_port_attr *props)
{
	struct vrnic_dev *dev = to_vdev(ibdev);
	struct vrnic_port_attr pa;
	int err;

	err = vrnic_cmd_query_port(dev, port, &pa);
	if (err)
		return err;

	err = vrnic_port_state(pa.state, &props->state);
	if (!err)
		err = vrnic_mtu(pa.max_mtu, &props->max_mtu);
	if (!err)
		err = vrnic_mtu(pa.active_mtu, &props->active_mtu);
	if (err) {
		dev_warn_ratelimited(&dev->pdev->dev,
				     "QUERY_PORT: bad state %u or mtu %u/%u\n",
				     pa.state, pa.max_mtu, pa.active_mtu);
		return err;
	}

	props->phys_mtu = ib_mtu_enum_to_int(props->max_mtu);
	props->phys_state = pa.phys_state;
	props->lid = le16_to_cpu(pa.lid);
	props->sm_lid = le16_to_cpu(pa.sm_lid);
	props->lmc = pa.lmc;
	props->port_cap_flags = le32_to_cpu(pa.port_cap_flags);
	props->max_msg_sz = le32_to_cpu(pa.max_msg_sz);
	/* Must match get_port_immutable(), whatever the device says. */
	props->gid_tbl_len = 1;	/* RoCE: GID_TABLE_LEN, below */
	props->pkey_tbl_len = 1;
	props->active_width = pa.active_width;
	props->active_speed = pa.active_speed;
	props->max_vl_num = 1;
	return dev->roce ? vrnic_query_port_roce(dev, props) : 0;
}

/*
 * RoCE mode: what the device said, adjusted to the paired netdev. The port
 * is ACTIVE (LinkUp) while that netdev is up with a carrier, else DOWN
 * (Disabled), also with no netdev at all; the active MTU is the smaller of
 * the device's and the one the netdev's MTU allows.
 */
int vrnic_query_port_roce(struct vrnic_dev *dev, struct ib_port_attr *props)
{
	struct net_device *ndev;

	props->lid = 0;
	props->sm_lid = 0;
	props->lmc = 0;
	props->gid_tbl_len = VRNIC_GID_TABLE_LEN;
	props->ip_gids = true;
	props->port_cap_flags = IB_PORT_CM_SUP;
	props->state = IB_PORT_DOWN;
	props->phys_state = IB_PORT_PHYS_STATE_DISABLED;

	ndev = ib_device_get_netdev(&dev->ibdev, VRNIC_PORT_NUM);
	if (!ndev)
		return 0;
	if (netif_running(ndev) && netif_carrier_ok(ndev)) {
		props->state = IB_PORT_ACTIVE;
		props->phys_state = IB_PORT_PHYS_STATE_LINK_UP;
	}
	props->active_mtu = min(props->active_mtu, iboe_get_mtu(READ_ONCE(ndev->mtu)));
	dev_put(ndev);
	return 0;
}

int vrnic_get_port_immutable(struct ib_device *ibdev, u32 port,
			     struct ib_port_immutable *immutable)
{
	struct vrnic_dev *dev = to_vdev(ibdev);

	immutable->pkey_tbl_len = 1;
	if (dev->roce) {
		/* RoCE v2 only: the GID cache then adds v2 GIDs only. */
		immutable->core_cap_flags = RDMA_CORE_PORT_IBA_ROCE_UDP_ENCAP;
		immutable->gid_tbl_len = VRNIC_GID_TABLE_LEN;
		immutable->max_mad_size = IB_MGMT_MAD_SIZE;
	} else {
		immutable->core_cap_flags = RDMA_CORE_CAP_PROT_IB;
		immutable->gid_tbl_len = 1;
		immutable->max_mad_size = 0;
	}
	return 0;
}

enum rdma_link_layer vrnic_get_link_layer(struct ib_device *ibdev, u32 port)
{
	return to_vdev(ibdev)->roce ? IB_LINK_LAYER_ETHERNET :
				      IB_LINK_LAYER_INFINIBAND;
}

int vrnic_query_pkey(struct ib_device *ibdev, u32 port, u16 index, u16 *pkey)
{
	if (index != 0)
		return -EINVAL;
	*pkey = 0xffff;
	return 0;
}

int vrnic_query_gid(struct ib_device *ibdev, u32 port, int index,
		    union ib_gid *gid)
{
	if (index != 0)
		return -EINVAL;
	*gid = to_vdev(ibdev)->gid;
	return 0;
}

void vrnic_get_dev_fw_str(struct ib_device *ibdev, char *str)
{
	u64 fw = to_vdev(ibdev)->attrs.fw_ver;

	snprintf(str, IB_FW_VERSION_NAME_MAX, "%u.%u.%u", (u32)(fw >> 32),
		 (u32)(fw >> 16) & 0xffff, (u32)fw & 0xffff);
}

static struct rdma_user_mmap_entry *
vrnic_mmap_entry_insert(struct vrnic_ucontext *uctx, phys_addr_t address,
			u64 *key)
{
	struct vrnic_user_mmap_entry *entry;
	int err;

	entry = kzalloc(sizeof(*entry), GFP_KERNEL);
	if (!entry)
		return NULL;
	entry->address = address;
	err = rdma_user_mmap_entry_insert(&uctx->ibuctx, &entry->rdma_entry,
					  PAGE_SIZE);
	if (err) {
		kfree(entry);
		return NULL;
	}
	*key = rdma_user_mmap_get_offset(&entry->rdma_entry);
	return &entry->rdma_entry;
}

/* Removes every page's mmap entries; the core frees them once unmapped. */
static void vrnic_db_pages_remove(struct vrnic_ucontext *uctx)
{
	struct vrnic_db_page *dbp;
	unsigned long page;

	xa_for_each(&uctx->pages, page, dbp) {
		rdma_user_mmap_entry_remove(dbp->db_entry);
		rdma_user_mmap_entry_remove(dbp->kick_entry);
		kfree(dbp);
	}
	xa_destroy(&uctx->pages);
	uctx->num_pages = 0;
}

/*
 * The mmap entries of doorbell page @page of @uctx, created the first time the
 * device names the page for this context. Only pages the device returned for
 * this context get entries, so a process can only map its own pages.
 */
static struct vrnic_db_page *vrnic_db_page_get(struct vrnic_ucontext *uctx,
					       u32 page)
{
	struct vrnic_dev *dev = to_vdev(uctx->ibuctx.device);
	struct vrnic_db_page *dbp;
	phys_addr_t off;
	int err;

	/* Never trust the number: it indexes the doorbell and kick BARs. */
	if (page == 0 || page >= VRNIC_DB_PAGES) {
		dev_err(&dev->pdev->dev, "uctx %u: device returned doorbell page %u\n",
			uctx->uctx, page);
		return ERR_PTR(-EIO);
	}

	mutex_lock(&uctx->pages_lock);
	dbp = xa_load(&uctx->pages, page);
	if (dbp)
		goto out;
	if (uctx->num_pages >= VRNIC_MAX_DB_PAGES_PER_UCTX) {
		dev_err(&dev->pdev->dev, "uctx %u: device gave more than %u doorbell pages\n",
			uctx->uctx, VRNIC_MAX_DB_PAGES_PER_UCTX);
		dbp = ERR_PTR(-EIO);
		goto out;
	}
	dbp = kzalloc(sizeof(*dbp), GFP_KERNEL);
	if (!dbp) {
		dbp = ERR_PTR(-ENOMEM);
		goto out;
	}
	off = (phys_addr_t)page * VRNIC_DB_PAGE_SIZE;
	dbp->db_entry = vrnic_mmap_entry_insert(uctx, dev->db_bar + off,
						&dbp->db_key);
	dbp->kick_entry = vrnic_mmap_entry_insert(uctx, dev->kick_bar + off,
						  &dbp->kick_key);
	if (!dbp->db_entry || !dbp->kick_entry) {
		err = -ENOMEM;
		goto err_remove;
	}
	err = xa_insert(&uctx->pages, page, dbp, GFP_KERNEL);
	if (err)
		goto err_remove;
	uctx->num_pages++;
	ibdev_dbg(&dev->ibdev, "uctx %u: doorbell page %u\n", uctx->uctx, page);
	goto out;

err_remove:
	if (dbp->db_entry)
		rdma_user_mmap_entry_remove(dbp->db_entry);
	if (dbp->kick_entry)
		rdma_user_mmap_entry_remove(dbp->kick_entry);
	kfree(dbp);
	dbp = ERR_PTR(err);
out:
	mutex_unlock(&uctx->pages_lock);
	return dbp;
}

/* The mmap keys of the page holding a new object's doorbell (udata's context). */
int vrnic_uctx_db_page(struct ib_udata *udata, const struct vrnic_db_loc *db,
		       u64 *db_key, u64 *kick_key)
{
	struct vrnic_ucontext *uctx =
		rdma_udata_to_drv_context(udata, struct vrnic_ucontext, ibuctx);
	struct vrnic_db_page *dbp;

	if (!uctx)
		return -EINVAL;
	dbp = vrnic_db_page_get(uctx, db->page);
	if (IS_ERR(dbp))
		return PTR_ERR(dbp);
	*db_key = dbp->db_key;
	*kick_key = dbp->kick_key;
	return 0;
}

int vrnic_alloc_ucontext(struct ib_ucontext *ibuctx, struct ib_udata *udata)
{
	struct vrnic_ucontext *uctx = to_vuctx(ibuctx);
	struct vrnic_dev *dev = to_vdev(ibuctx->device);
	struct vrnic_alloc_ucontext_resp resp = {};
	struct vrnic_db_page *dbp;
	u32 num, page;
	int err;

	if (udata->inlen && !ib_is_udata_cleared(udata, 0, udata->inlen))
		return -EINVAL;

	mutex_init(&uctx->pages_lock);
	xa_init(&uctx->pages);
	err = vrnic_cmd_alloc_uctx(dev, &num, &page);
	if (err)
		goto err_mutex;
	uctx->uctx = num;
	if (num == VRNIC_KERNEL_UCTX || num > dev->lim.max_uctx) {
		dev_err(&dev->pdev->dev, "ALLOC_UCTX returned context %u\n", num);
		err = -EIO;
		goto err_dealloc;
	}
	uctx->first_page = page;
	dbp = vrnic_db_page_get(uctx, page);
	if (IS_ERR(dbp)) {
		err = PTR_ERR(dbp);
		goto err_remove;
	}

	resp.abi_version = cpu_to_le32(VRNIC_UVERBS_ABI_VERSION);
	resp.uctx = cpu_to_le32(num);
	resp.db_mmap_key = cpu_to_le64(dbp->db_key);
	resp.kick_mmap_key = cpu_to_le64(dbp->kick_key);
	resp.max_sge = cpu_to_le32(dev->lim.max_sge);
	resp.max_inline = cpu_to_le32(dev->lim.max_inline);
	resp.max_qp_wr = cpu_to_le32(dev->lim.max_qp_wr);
	resp.max_cqe = cpu_to_le32(dev->lim.max_cqe);
	resp.db_page = cpu_to_le32(page);
	err = vrnic_copy_resp_to_udata(udata, &resp, sizeof(resp));
	if (err)
		goto err_remove;
	return 0;

err_remove:
	vrnic_db_pages_remove(uctx);
err_dealloc:
	vrnic_cmd_dealloc_uctx(dev, num);
err_mutex:
	mutex_destroy(&uctx->pages_lock);
	return err;
}

void vrnic_dealloc_ucontext(struct ib_ucontext *ibuctx)
{
	struct vrnic_ucontext *uctx = to_vuctx(ibuctx);
	struct vrnic_dev *dev = to_vdev(ibuctx->device);
	int err;

	vrnic_db_pages_remove(uctx);
	err = vrnic_cmd_dealloc_uctx(dev, uctx->uctx);
	if (err)
		dev_warn(&dev->pdev->dev, "DEALLOC_UCTX %u: %d\n", uctx->uctx, err);
	mutex_destroy(&uctx->pages_lock);
}

/*
 * Nothing to do: the core zaps the user mappings of the doorbell and kick
 * pages and destroys every object through the normal destroy verbs. Having
 * this op lets ib_unregister_device() proceed while files are still open.
 */
void vrnic_disassociate_ucontext(struct ib_ucontext *ibuctx)
{
}

int vrnic_mmap(struct ib_ucontext *ibuctx, struct vm_area_struct *vma)
{
	struct rdma_user_mmap_entry *rdma_entry;
	struct vrnic_user_mmap_entry *entry;
	int err;

	if (vma->vm_flags & VM_EXEC)
		return -EPERM;

	/* Also checks that the mapping length matches the entry (one page). */
	rdma_entry = rdma_user_mmap_entry_get(ibuctx, vma);
	if (!rdma_entry)
		return -EINVAL;
	entry = to_vmmap(rdma_entry);

	err = rdma_user_mmap_io(ibuctx, vma, PHYS_PFN(entry->address),
				rdma_entry->npages * PAGE_SIZE,
				pgprot_noncached(vma->vm_page_prot), rdma_entry);
	rdma_user_mmap_entry_put(rdma_entry);
	return err;
}

void vrnic_mmap_free(struct rdma_user_mmap_entry *rdma_entry)
{
	kfree(to_vmmap(rdma_entry));
}

int vrnic_alloc_pd(struct ib_pd *ibpd, struct ib_udata *udata)
{
	struct vrnic_dev *dev = to_vdev(ibpd->device);
	struct vrnic_pd *pd = to_vpd(ibpd);
	int err;

	pd->uctx = vrnic_udata_uctx(udata);
	err = vrnic_cmd_alloc_pd(dev, pd->uctx, &pd->pdn);
	if (err)
		return err;
	ibdev_dbg(&dev->ibdev, "uctx %u: PD %u\n", pd->uctx, pd->pdn);
	return 0;
}

int vrnic_dealloc_pd(struct ib_pd *ibpd, struct ib_udata *udata)
{
	struct vrnic_dev *dev = to_vdev(ibpd->device);
	struct vrnic_pd *pd = to_vpd(ibpd);
	int err;

	/* A PD owns no guest memory: nothing to keep if the device refuses. */
	err = vrnic_cmd_dealloc_pd(dev, pd->uctx, pd->pdn);
	if (err)
		dev_warn(&dev->pdev->dev, "DEALLOC_PD %u: %d\n", pd->pdn, err);
	return 0;
}
