// SPDX-License-Identifier: GPL-2.0 OR Linux-OpenIB
/* vrnic rdma-core provider: device matching, context, QP number table. */

#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "vrnic.h"

static void vrnic_unmap_db_pages(struct vrnic_context *ctx)
{
	unsigned int i;

	for (i = 0; i < ctx->num_db_maps; i++) {
		munmap(ctx->db_maps[i].kick, VRNIC_DB_PAGE_SIZE);
		munmap(ctx->db_maps[i].db, VRNIC_DB_PAGE_SIZE);
	}
	free(ctx->db_maps);
	ctx->db_maps = NULL;
	ctx->num_db_maps = 0;
	ctx->db_maps_cap = 0;
}

/*
 * The mapping of doorbell page @page (and its kick page), mapped with the
 * kernel's keys the first time the page is named. At most
 * MAX_DB_PAGES_PER_UCTX pages: the cache is a small array, searched only when
 * a CQ or QP is created.
 */
int vrnic_map_db_page(struct vrnic_context *ctx, uint32_t page,
		      uint64_t db_key, uint64_t kick_key,
		      struct vrnic_db_map *out)
{
	int cmd_fd = ctx->ibv_ctx.context.cmd_fd;
	struct vrnic_db_map map = { .page = page };
	unsigned int i;
	int ret = 0;

	pthread_mutex_lock(&ctx->db_mutex);
	for (i = 0; i < ctx->num_db_maps; i++) {
		if (ctx->db_maps[i].page == page) {
			*out = ctx->db_maps[i];
			goto out;
		}
	}
	if (ctx->num_db_maps >= VRNIC_MAX_DB_PAGES_PER_UCTX) {
		ret = EPROTO;
		goto out;
	}
	if (ctx->num_db_maps == ctx->db_maps_cap) {
		unsigned int cap = ctx->db_maps_cap ? 2 * ctx->db_maps_cap : 4;
		struct vrnic_db_map *maps;

		maps = realloc(ctx->db_maps, cap * sizeof(*maps));
		if (!maps) {
			ret = ENOMEM;
			goto out;
		}
		ctx->db_maps = maps;
		ctx->db_maps_cap = cap;
	}
	map.db = mmap(NULL, VRNIC_DB_PAGE_SIZE, PROT_READ | PROT_WRITE,
		      MAP_SHARED, cmd_fd, (off_t)db_key);
	if (map.db == MAP_FAILED) {
		ret = errno;
		goto out;
	}
	map.kick = mmap(NULL, VRNIC_DB_PAGE_SIZE, PROT_WRITE, MAP_SHARED,
			cmd_fd, (off_t)kick_key);
	if (map.kick == MAP_FAILED) {
		ret = errno;
		munmap(map.db, VRNIC_DB_PAGE_SIZE);
		goto out;
	}
	ctx->db_maps[ctx->num_db_maps++] = map;
	*out = map;
out:
	pthread_mutex_unlock(&ctx->db_mutex);
	return ret;
}

/*
 * The doorbell page of an object the kernel just created (@what names the
 * command in errors), after checking the slot it reported. Returns 0 or an
 * errno value.
 */
int vrnic_map_object_slot(struct vrnic_context *ctx, const char *what,
			  uint32_t slot, uint32_t page, uint64_t db_key,
			  uint64_t kick_key, struct vrnic_db_map *map)
{
	int ret;

	if (slot >= VRNIC_DB_SLOTS_PER_PAGE) {
		verbs_err(&ctx->ibv_ctx, "vrnic: bad %s response (slot %u)\n",
			  what, slot);
		return EPROTO;
	}
	ret = vrnic_map_db_page(ctx, page, db_key, kick_key, map);
	if (ret)
		verbs_err(&ctx->ibv_ctx,
			  "vrnic: cannot map doorbell page %u: %d\n", page, ret);
	return ret;
}

static void vrnic_free_context(struct ibv_context *ibctx)
{
	struct vrnic_context *ctx = to_vctx(ibctx);

	vrnic_unmap_db_pages(ctx);
	vrnic_table_free(&ctx->qp_table);
	vrnic_table_free(&ctx->srq_table);
	pthread_mutex_destroy(&ctx->qp_table_mutex);
	pthread_mutex_destroy(&ctx->srq_table_mutex);
	pthread_mutex_destroy(&ctx->db_mutex);
	verbs_uninit_context(&ctx->ibv_ctx);
	free(ctx);
}

static const struct verbs_context_ops vrnic_ctx_ops = {
	.alloc_mw = vrnic_alloc_mw,
	.alloc_pd = vrnic_alloc_pd,
	.bind_mw = vrnic_bind_mw,
	.close_xrcd = vrnic_close_xrcd,
	.create_ah = vrnic_create_ah,
	.create_cq = vrnic_create_cq,
	.create_cq_ex = vrnic_create_cq_ex,
	.create_qp = vrnic_create_qp,
	.create_qp_ex = vrnic_create_qp_ex,
	.create_srq = vrnic_create_srq,
	.create_srq_ex = vrnic_create_srq_ex,
	.dealloc_mw = vrnic_dealloc_mw,
	.dealloc_pd = vrnic_dealloc_pd,
	.dereg_mr = vrnic_dereg_mr,
	.destroy_ah = vrnic_destroy_ah,
	.destroy_cq = vrnic_destroy_cq,
	.destroy_qp = vrnic_destroy_qp,
	.destroy_srq = vrnic_destroy_srq,
	.free_context = vrnic_free_context,
	.get_srq_num = vrnic_get_srq_num,
	.modify_qp = vrnic_modify_qp,
	.modify_srq = vrnic_modify_srq,
	.open_qp = vrnic_open_qp,
	.open_xrcd = vrnic_open_xrcd,
	.poll_cq = vrnic_poll_cq,
	.post_recv = vrnic_post_recv,
	.post_send = vrnic_post_send,
	.post_srq_recv = vrnic_post_srq_recv,
	.query_device_ex = vrnic_query_device,
	.query_port = vrnic_query_port,
	.query_qp = vrnic_query_qp,
	.query_srq = vrnic_query_srq,
	.reg_mr = vrnic_reg_mr,
	.req_notify_cq = vrnic_req_notify_cq,
	.rereg_mr = vrnic_rereg_mr,
	.resize_cq = vrnic_resize_cq,
	/* Everything else (flows, DM, counters, TM, ...) stays at the
	 * libibverbs defaults, which fail with EOPNOTSUPP. */
};

/* Limits from the ucontext response; a zero (older kernel driver) falls back
 * to the device's documented reset value of the register. */
static uint32_t limit_or(uint32_t le_val, uint32_t dflt)
{
	uint32_t v = le32toh(le_val);

	return v ? v : dflt;
}

static struct verbs_context *vrnic_alloc_context(struct ibv_device *ibdev,
						 int cmd_fd,
						 void *private_data)
{
	struct vrnic_ucmd_get_context_resp resp = {};
	struct ibv_get_context cmd = {};
	struct vrnic_db_map map;
	struct vrnic_context *ctx;
	int ret;

	ctx = verbs_init_and_alloc_context(ibdev, cmd_fd, ctx, ibv_ctx,
					   RDMA_DRIVER_UNKNOWN);
	if (!ctx)
		return NULL;
	pthread_mutex_init(&ctx->qp_table_mutex, NULL);
	pthread_mutex_init(&ctx->srq_table_mutex, NULL);
	pthread_mutex_init(&ctx->db_mutex, NULL);

	if (ibv_cmd_get_context(&ctx->ibv_ctx, &cmd, sizeof(cmd),
				&resp.ibv_resp, sizeof(resp)))
		goto err;

	if (le32toh(resp.drv_payload.abi_version) != VRNIC_UVERBS_ABI_VERSION) {
		verbs_err(&ctx->ibv_ctx,
			  "vrnic: kernel ABI version %u, provider supports %u\n",
			  le32toh(resp.drv_payload.abi_version),
			  VRNIC_UVERBS_ABI_VERSION);
		errno = EPROTONOSUPPORT;
		goto err;
	}
	ctx->uctx = le32toh(resp.drv_payload.uctx);
	ctx->max_sge = limit_or(resp.drv_payload.max_sge,
				VRNIC_BAR0_MAX_SGE_RESET);
	ctx->max_inline = limit_or(resp.drv_payload.max_inline,
				   VRNIC_BAR0_MAX_INLINE_RESET);
	ctx->max_qp_wr = limit_or(resp.drv_payload.max_qp_wr,
				  VRNIC_BAR0_MAX_QP_WR_RESET);
	ctx->max_cqe = limit_or(resp.drv_payload.max_cqe,
				VRNIC_BAR0_MAX_CQE_RESET);

	/* The first page: mapped now, so a context that cannot map fails early. */
	ret = vrnic_map_db_page(ctx, le32toh(resp.drv_payload.db_page),
				le64toh(resp.drv_payload.db_mmap_key),
				le64toh(resp.drv_payload.kick_mmap_key), &map);
	if (ret) {
		errno = ret;
		goto err;
	}

	verbs_set_ops(&ctx->ibv_ctx, &vrnic_ctx_ops);
	return &ctx->ibv_ctx;

err:
	vrnic_unmap_db_pages(ctx);
	pthread_mutex_destroy(&ctx->qp_table_mutex);
	pthread_mutex_destroy(&ctx->srq_table_mutex);
	pthread_mutex_destroy(&ctx->db_mutex);
	verbs_uninit_context(&ctx->ibv_ctx);
	free(ctx);
	return NULL;
}

/*
 * Number -> object tables (QPs, SRQs): two levels indexed by the number's
 * 24 bits. The caller serializes changes. Readers may go without a lock:
 * second-level arrays are published with release stores and freed only
 * with the table, entries are stored and loaded atomically; whether the
 * object itself is still alive is the caller's rule (vrnic_find_qp).
 */
void *vrnic_table_find(struct vrnic_table *t, uint32_t key)
{
	void **chunk;

	if (key >> VRNIC_TABLE_KEY_BITS)
		return NULL;
	chunk = __atomic_load_n(&t->chunks[key >> VRNIC_TABLE_SHIFT],
				__ATOMIC_ACQUIRE);
	if (!chunk)
		return NULL;
	return __atomic_load_n(&chunk[key & VRNIC_TABLE_MASK],
			       __ATOMIC_ACQUIRE);
}

/*
 * Overwrites an object of the same number whose destroy has not yet
 * removed it; vrnic_table_remove only removes its own entry. EPROTO for a
 * number wider than 24 bits (the kernel never reports one).
 */
int vrnic_table_insert(struct vrnic_table *t, uint32_t key, void *obj)
{
	void ***top;
	void **chunk;

	if (key >> VRNIC_TABLE_KEY_BITS)
		return EPROTO;
	top = &t->chunks[key >> VRNIC_TABLE_SHIFT];
	chunk = *top;
	if (!chunk) {
		chunk = calloc(VRNIC_TABLE_SIZE, sizeof(*chunk));
		if (!chunk)
			return ENOMEM;
		__atomic_store_n(top, chunk, __ATOMIC_RELEASE);
	}
	__atomic_store_n(&chunk[key & VRNIC_TABLE_MASK], obj, __ATOMIC_RELEASE);
	return 0;
}

void vrnic_table_remove(struct vrnic_table *t, uint32_t key, void *obj)
{
	void **chunk;

	if (key >> VRNIC_TABLE_KEY_BITS)
		return;
	chunk = t->chunks[key >> VRNIC_TABLE_SHIFT];
	if (chunk && chunk[key & VRNIC_TABLE_MASK] == obj)
		__atomic_store_n(&chunk[key & VRNIC_TABLE_MASK], NULL,
				 __ATOMIC_RELEASE);
}

void vrnic_table_free(struct vrnic_table *t)
{
	unsigned int i;

	for (i = 0; i < VRNIC_TABLE_SIZE; i++)
		free(t->chunks[i]);
}

/*
 * QP table. Readers (poll_cq) do not take the mutex: a QP is removed while
 * the locks of its CQs are held (see vrnic_destroy_qp), so a poller can
 * never hold a pointer to a freed QP.
 */
struct vrnic_qp *vrnic_find_qp(struct vrnic_context *ctx, uint32_t qpn)
{
	return vrnic_table_find(&ctx->qp_table, qpn);
}

int vrnic_insert_qp(struct vrnic_context *ctx, struct vrnic_qp *qp)
{
	int ret;

	pthread_mutex_lock(&ctx->qp_table_mutex);
	ret = vrnic_table_insert(&ctx->qp_table, qp->ibv_qp.qp_num, qp);
	pthread_mutex_unlock(&ctx->qp_table_mutex);
	return ret;
}

void vrnic_remove_qp(struct vrnic_context *ctx, struct vrnic_qp *qp)
{
	pthread_mutex_lock(&ctx->qp_table_mutex);
	vrnic_table_remove(&ctx->qp_table, qp->ibv_qp.qp_num, qp);
	pthread_mutex_unlock(&ctx->qp_table_mutex);
}

static struct verbs_device *vrnic_alloc_device(struct verbs_sysfs_dev *sysfs_dev)
{
	struct vrnic_device *dev = calloc(1, sizeof(*dev));

	return dev ? &dev->ibv_dev : NULL;
}

static void vrnic_uninit_device(struct verbs_device *vdev)
{
	free(container_of(vdev, struct vrnic_device, ibv_dev));
}

static const struct verbs_match_ent vrnic_match_table[] = {
	VERBS_PCI_MATCH(VRNIC_PCI_VENDOR_ID, VRNIC_PCI_DEVICE_ID, NULL),
	/* Devices started with other PCI IDs (vendor=/device=) keep our kernel name. */
	VERBS_NAME_MATCH("vrnic", NULL),
	{},
};

static const struct verbs_device_ops vrnic_dev_ops = {
	.name = "vrnic",
	.match_min_abi_version = 0,
	.match_max_abi_version = VRNIC_UVERBS_ABI_VERSION,
	.match_table = vrnic_match_table,
	.alloc_device = vrnic_alloc_device,
	.uninit_device = vrnic_uninit_device,
	.alloc_context = vrnic_alloc_context,
};

PROVIDER_DRIVER(vrnic, vrnic_dev_ops);
