// SPDX-License-Identifier: GPL-2.0 OR Linux-OpenIB
/*
 * Extended verbs against the classic ones, without a kernel or device (a
 * fake context and doorbell page, as in datapath_test.c):
 * - the same work requests through ibv_post_send and through ibv_wr_* give
 *   the same WQEs, byte for byte, and the same producer index (RC, UC, UD,
 *   and XRC_SEND with ibv_wr_set_xrc_srqn);
 * - a wr batch rings the doorbell once, at ibv_wr_complete; ibv_wr_abort
 *   and a failed batch post nothing;
 * - the same CQEs through ibv_poll_cq and through the poll_cq_ex iterator
 *   give the same fields;
 * - create_qp_ex and create_cq_ex refuse what the device cannot do.
 * Built and run by `build.sh --test` inside the build root.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../vrnic.h"
#include "check.h"

#define START 0xfffffffcu /* every free-running index wraps */
#define DEPTH 16u
#define WQE_SHIFT 7u	/* 128 bytes: RC 6 SGEs / 96 inline, UD 3 / 48 */

static struct vrnic_context *ctx;
static struct ibv_pd pd;
static uint8_t *db_page;
static uint8_t *kick_page;

static uint32_t db_read(const uint32_t *w)
{
	return le32toh(*(volatile const uint32_t *)w);
}

static void setup(void)
{
	ctx = calloc(1, sizeof(*ctx));
	db_page = aligned_alloc(4096, VRNIC_DB_PAGE_SIZE);
	kick_page = aligned_alloc(4096, VRNIC_DB_PAGE_SIZE);
	memset(db_page, 0, VRNIC_DB_PAGE_SIZE);
	memset(kick_page, 0, VRNIC_DB_PAGE_SIZE);
	ctx->max_sge = 16;
	ctx->max_inline = 256;
	pthread_mutex_init(&ctx->qp_table_mutex, NULL);
	pd.context = &ctx->ibv_ctx.context;
}

/* A QP in RTS of @type with its own doorbell slot; its ring is filled with
 * the same junk as every other, so untouched bytes compare equal too. */
static void fake_qp(struct vrnic_qp *qp, enum ibv_qp_type type, uint32_t qpn,
		    uint32_t slot)
{
	memset(qp, 0, sizeof(*qp));
	qp->ibv_qp.context = &ctx->ibv_ctx.context;
	qp->ibv_qp.qp_num = qpn;
	qp->ibv_qp.qp_type = type;
	qp->datagram = type == IBV_QPT_UD;
	qp->xrc = type == IBV_QPT_XRC_SEND;
	qp->sq = (struct vrnic_wq){ .depth = DEPTH, .wqe_shift = WQE_SHIFT,
				    .pi = START, .ci = START };
	qp->max_inline = qp->xrc ? vrnic_xrc_send_wqe_room(WQE_SHIFT) :
			 vrnic_send_wqe_room(WQE_SHIFT, qp->datagram);
	qp->sq.max_sge = qp->max_inline / VRNIC_SGE_SIZE;
	qp->sq.ring = malloc(DEPTH << WQE_SHIFT);
	memset(qp->sq.ring, 0xee, DEPTH << WQE_SHIFT);
	qp->sq.db = vrnic_db_word(db_page, slot, VRNIC_DB_QP_SLOT_SQ_PI_OFF);
	qp->sq.db_flag = db_page + VRNIC_DB_FLAGS_BASE + slot;
	qp->sq.db_page = db_page;
	qp->sq.kick_page = kick_page;
	qp->state = IBV_QPS_RTS;
	pthread_spin_init(&qp->sq.lock, PTHREAD_PROCESS_PRIVATE);
}

static struct vrnic_qp *qp_of(struct ibv_qp_ex *qpx)
{
	return container_of(qpx, struct vrnic_qp, vqp.qp_ex);
}

static struct ibv_qp_ex *fake_qp_ex(struct vrnic_qp *qp, enum ibv_qp_type type,
				    uint32_t qpn, uint32_t slot)
{
	fake_qp(qp, type, qpn, slot);
	CHECK(vrnic_qp_ex_init(qp) == 0);
	CHECK(ibv_qp_to_qp_ex(&qp->ibv_qp) == &qp->vqp.qp_ex);
	return ibv_qp_to_qp_ex(&qp->ibv_qp);
}

/*
 * @wr through the ibv_wr_* API: the builder of its opcode, then the address
 * (UD) and data setters. SGE lists of one entry go through wr_set_sge and
 * inline data of one buffer through wr_set_inline_data, to cover both forms.
 */
static void post_ex(struct ibv_qp_ex *qpx, const struct ibv_send_wr *wr)
{
	qpx->wr_id = wr->wr_id;
	qpx->wr_flags = wr->send_flags;
	switch (wr->opcode) {
	case IBV_WR_SEND:
		ibv_wr_send(qpx);
		break;
	case IBV_WR_SEND_WITH_IMM:
		ibv_wr_send_imm(qpx, wr->imm_data);
		break;
	case IBV_WR_SEND_WITH_INV:
		ibv_wr_send_inv(qpx, wr->invalidate_rkey);
		break;
	case IBV_WR_RDMA_WRITE:
		ibv_wr_rdma_write(qpx, wr->wr.rdma.rkey, wr->wr.rdma.remote_addr);
		break;
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		ibv_wr_rdma_write_imm(qpx, wr->wr.rdma.rkey,
				      wr->wr.rdma.remote_addr, wr->imm_data);
		break;
	case IBV_WR_RDMA_READ:
		ibv_wr_rdma_read(qpx, wr->wr.rdma.rkey, wr->wr.rdma.remote_addr);
		break;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
		ibv_wr_atomic_cmp_swp(qpx, wr->wr.atomic.rkey,
				      wr->wr.atomic.remote_addr,
				      wr->wr.atomic.compare_add,
				      wr->wr.atomic.swap);
		break;
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		ibv_wr_atomic_fetch_add(qpx, wr->wr.atomic.rkey,
					wr->wr.atomic.remote_addr,
					wr->wr.atomic.compare_add);
		break;
	case IBV_WR_LOCAL_INV:
		ibv_wr_local_inv(qpx, wr->invalidate_rkey);
		return;
	case IBV_WR_BIND_MW:
		ibv_wr_bind_mw(qpx, wr->bind_mw.mw, wr->bind_mw.rkey,
			       &wr->bind_mw.bind_info);
		return;
	default:
		CHECK(!"opcode the test does not know");
		return;
	}
	if (qp_of(qpx)->datagram)
		ibv_wr_set_ud_addr(qpx, wr->wr.ud.ah, wr->wr.ud.remote_qpn,
				   wr->wr.ud.remote_qkey);
	if (qp_of(qpx)->xrc)
		ibv_wr_set_xrc_srqn(qpx, wr->qp_type.xrc.remote_srqn);
	if (wr->send_flags & IBV_SEND_INLINE) {
		struct ibv_data_buf bufs[8];
		int i;

		for (i = 0; i < wr->num_sge && i < 8; i++)
			bufs[i] = (struct ibv_data_buf){
				.addr = (void *)(uintptr_t)wr->sg_list[i].addr,
				.length = wr->sg_list[i].length };
		if (wr->num_sge == 1)
			ibv_wr_set_inline_data(qpx, bufs[0].addr,
					       bufs[0].length);
		else
			ibv_wr_set_inline_data_list(qpx, wr->num_sge, bufs);
	} else if (wr->num_sge == 1) {
		ibv_wr_set_sge(qpx, wr->sg_list[0].lkey, wr->sg_list[0].addr,
			       wr->sg_list[0].length);
	} else if (wr->num_sge) {
		ibv_wr_set_sge_list(qpx, wr->num_sge, wr->sg_list);
	}
}

/* Link wr[0..n-1] into one list for post_send. */
static struct ibv_send_wr *chain(struct ibv_send_wr *wr, int n)
{
	int i;

	for (i = 0; i < n; i++)
		wr[i].next = i + 1 < n ? &wr[i + 1] : NULL;
	return wr;
}

/*
 * Post @wr through post_send on @classic and through ibv_wr_* on @ex (same
 * geometry, same starting index): both succeed, and the rings and producer
 * indices are equal.
 */
static void check_same_wqes(struct vrnic_qp *classic, struct ibv_qp_ex *qpx,
			    struct ibv_send_wr *wr, int n)
{
	struct vrnic_qp *ex = qp_of(qpx);
	struct ibv_send_wr *bad = NULL;
	uint32_t pi = classic->sq.pi;
	int i;

	CHECK(ex->sq.pi == pi);
	CHECK(vrnic_post_send(&classic->ibv_qp, chain(wr, n), &bad) == 0);
	CHECK(classic->sq.pi == pi + n);
	ibv_wr_start(qpx);
	for (i = 0; i < n; i++)
		post_ex(qpx, &wr[i]);
	CHECK(ibv_wr_complete(qpx) == 0);
	CHECK(ex->sq.pi == pi + n);
	CHECK(db_read(ex->sq.db) == pi + n);
	check_bytes("ibv_wr_* ring vs post_send's", ex->sq.ring,
		    classic->sq.ring, DEPTH << WQE_SHIFT);
	/* Each WQE is the one of its opcode (the WR opcodes are SPEC's). */
	for (i = 0; i < n; i++) {
		struct vrnic_send_wqe_header *hdr = vrnic_wqe(&ex->sq, pi + i);

		CHECK(hdr->opcode == wr[i].opcode);
		CHECK(le64toh(hdr->wr_id) == wr[i].wr_id);
	}
}

static uint8_t payload[64];
static struct ibv_sge sges[3] = {
	{ .addr = (uintptr_t)payload, .length = 20, .lkey = 0x11 },
	{ .addr = (uintptr_t)payload + 20, .length = 7, .lkey = 0x22 },
	{ .addr = (uintptr_t)payload + 27, .length = 30, .lkey = 0x33 },
};
static uint64_t atomic_result;
static struct ibv_sge atomic_sge = { .addr = (uintptr_t)&atomic_result,
				     .length = 8, .lkey = 0x44 };

/* Every RC work request, with each send flag, SGE lists and inline data. */
static void test_rc_wqes_equal_post_send(void)
{
	struct ibv_mw mw = { .rkey = 0x700, .type = IBV_MW_TYPE_2 };
	struct ibv_mr mr = { .lkey = 0x555 };
	struct ibv_send_wr wr[] = {
		{ .wr_id = 1, .opcode = IBV_WR_SEND, .sg_list = sges,
		  .num_sge = 3, .send_flags = IBV_SEND_SIGNALED },
		{ .wr_id = 2, .opcode = IBV_WR_SEND_WITH_IMM, .sg_list = sges,
		  .num_sge = 2, .send_flags = IBV_SEND_INLINE,
		  .imm_data = htobe32(0xa1b2c3d4) },
		{ .wr_id = 3, .opcode = IBV_WR_SEND_WITH_INV, .sg_list = sges,
		  .num_sge = 1, .invalidate_rkey = 0x1234,
		  .send_flags = IBV_SEND_SOLICITED },
		{ .wr_id = 4, .opcode = IBV_WR_RDMA_WRITE, .sg_list = &sges[2],
		  .num_sge = 1, .send_flags = IBV_SEND_FENCE,
		  .wr.rdma = { .remote_addr = 0x1122334455667788ull,
			       .rkey = 0x99 } },
		{ .wr_id = 5, .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
		  .sg_list = &sges[1], .num_sge = 1,
		  .send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED,
		  .imm_data = htobe32(7),
		  .wr.rdma = { .remote_addr = 0x5000, .rkey = 0x98 } },
		{ .wr_id = 6, .opcode = IBV_WR_RDMA_READ, .sg_list = sges,
		  .num_sge = 2,
		  .wr.rdma = { .remote_addr = 0x6000, .rkey = 0x97 } },
		{ .wr_id = 7, .opcode = IBV_WR_ATOMIC_CMP_AND_SWP,
		  .sg_list = &atomic_sge, .num_sge = 1,
		  .send_flags = IBV_SEND_SIGNALED,
		  .wr.atomic = { .remote_addr = 0x7008, .compare_add = 5,
				 .swap = 0xfeedfacecafebeefull, .rkey = 0x96 } },
		{ .wr_id = 8, .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
		  .sg_list = &atomic_sge, .num_sge = 1,
		  .wr.atomic = { .remote_addr = 0x8000, .compare_add = 3,
				 .rkey = 0x95 } },
		{ .wr_id = 9, .opcode = IBV_WR_LOCAL_INV,
		  .invalidate_rkey = 0x4321, .send_flags = IBV_SEND_SIGNALED },
		{ .wr_id = 10, .opcode = IBV_WR_BIND_MW,
		  .send_flags = IBV_SEND_SIGNALED,
		  .bind_mw = { .mw = &mw, .rkey = 0x701,
			       .bind_info = { .mr = &mr, .addr = 0x9000,
					      .length = 4096,
					      .mw_access_flags =
						IBV_ACCESS_REMOTE_READ |
						IBV_ACCESS_REMOTE_WRITE } } },
		{ .wr_id = 11, .opcode = IBV_WR_SEND, .num_sge = 0 },
	};
	struct vrnic_qp classic, ex;
	struct ibv_qp_ex *qpx;
	unsigned int i;

	for (i = 0; i < sizeof(payload); i++)
		payload[i] = 3 * i + 1;
	fake_qp(&classic, IBV_QPT_RC, 0x100, 1);
	qpx = fake_qp_ex(&ex, IBV_QPT_RC, 0x101, 2);
	check_same_wqes(&classic, qpx, wr, sizeof(wr) / sizeof(wr[0]));
}

/* UC: sends, writes and the memory operations; UD: sends with an AH. */
static void test_uc_ud_wqes_equal_post_send(void)
{
	struct vrnic_ah ah = { .av = {
		.dlid = 0x17, .sl = 3, .is_global = 1, .sgid_index = 1,
		.hop_limit = 64, .traffic_class = 2, .flow_label = 0x12345,
		.dgid = { 0xfe, 0x80, [15] = 9 },
		.dmac = { 0x52, 0x54, 0, 1, 2, 3 } } };
	struct ibv_send_wr uc_wr[] = {
		{ .wr_id = 21, .opcode = IBV_WR_SEND_WITH_INV, .sg_list = sges,
		  .num_sge = 2, .invalidate_rkey = 0x77 },
		{ .wr_id = 22, .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
		  .sg_list = sges, .num_sge = 3, .imm_data = htobe32(1),
		  .send_flags = IBV_SEND_SIGNALED,
		  .wr.rdma = { .remote_addr = 0xa000, .rkey = 0x88 } },
		{ .wr_id = 23, .opcode = IBV_WR_LOCAL_INV,
		  .invalidate_rkey = 0x66 },
	};
	struct ibv_send_wr ud_wr[] = {
		{ .wr_id = 31, .opcode = IBV_WR_SEND, .sg_list = sges,
		  .num_sge = 3, .send_flags = IBV_SEND_SIGNALED,
		  .wr.ud = { .ah = &ah.ibv_ah, .remote_qpn = 0x10203,
			     .remote_qkey = 0x11111111 } },
		{ .wr_id = 32, .opcode = IBV_WR_SEND_WITH_IMM, .sg_list = sges,
		  .num_sge = 2, .send_flags = IBV_SEND_INLINE,
		  .imm_data = htobe32(0x5a5a),
		  .wr.ud = { .ah = &ah.ibv_ah, .remote_qpn = 0x30201,
			     .remote_qkey = 0x80000000 } },
	};
	struct vrnic_qp classic, ex;
	struct ibv_qp_ex *qpx;

	fake_qp(&classic, IBV_QPT_UC, 0x200, 3);
	qpx = fake_qp_ex(&ex, IBV_QPT_UC, 0x201, 4);
	check_same_wqes(&classic, qpx, uc_wr, sizeof(uc_wr) / sizeof(uc_wr[0]));

	fake_qp(&classic, IBV_QPT_UD, 0x300, 5);
	qpx = fake_qp_ex(&ex, IBV_QPT_UD, 0x301, 6);
	check_same_wqes(&classic, qpx, ud_wr, sizeof(ud_wr) / sizeof(ud_wr[0]));
}

/*
 * XRC_SEND: every request it has, each naming its target SRQ through
 * ibv_wr_set_xrc_srqn (and qp_type.xrc.remote_srqn for post_send), SGEs at
 * 48 (5 of them in 128 bytes), inline data up to 80 bytes.
 */
static void test_xrc_wqes_equal_post_send(void)
{
	struct ibv_send_wr wr[] = {
		{ .wr_id = 41, .opcode = IBV_WR_SEND, .sg_list = sges,
		  .num_sge = 3, .send_flags = IBV_SEND_SIGNALED,
		  .qp_type.xrc.remote_srqn = 0x10 },
		{ .wr_id = 42, .opcode = IBV_WR_SEND_WITH_IMM, .sg_list = sges,
		  .num_sge = 2, .send_flags = IBV_SEND_INLINE,
		  .imm_data = htobe32(0x42), .qp_type.xrc.remote_srqn = 0x11 },
		{ .wr_id = 43, .opcode = IBV_WR_RDMA_WRITE, .sg_list = &sges[2],
		  .num_sge = 1, .send_flags = IBV_SEND_FENCE,
		  .wr.rdma = { .remote_addr = 0x1234, .rkey = 0x81 },
		  .qp_type.xrc.remote_srqn = 0xfffffe },
		{ .wr_id = 44, .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
		  .sg_list = sges, .num_sge = 1, .imm_data = htobe32(3),
		  .send_flags = IBV_SEND_INLINE | IBV_SEND_SOLICITED,
		  .wr.rdma = { .remote_addr = 0x5678, .rkey = 0x82 },
		  .qp_type.xrc.remote_srqn = 0x13 },
		{ .wr_id = 45, .opcode = IBV_WR_RDMA_READ, .sg_list = sges,
		  .num_sge = 3,
		  .wr.rdma = { .remote_addr = 0x9abc, .rkey = 0x83 },
		  .qp_type.xrc.remote_srqn = 0x14 },
		{ .wr_id = 46, .opcode = IBV_WR_ATOMIC_CMP_AND_SWP,
		  .sg_list = &atomic_sge, .num_sge = 1,
		  .wr.atomic = { .remote_addr = 0x7000, .compare_add = 1,
				 .swap = 2, .rkey = 0x84 },
		  .qp_type.xrc.remote_srqn = 0x15 },
		{ .wr_id = 47, .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
		  .sg_list = &atomic_sge, .num_sge = 1,
		  .send_flags = IBV_SEND_SIGNALED,
		  .wr.atomic = { .remote_addr = 0x7008, .compare_add = 9,
				 .rkey = 0x85 },
		  .qp_type.xrc.remote_srqn = 0x16 },
	};
	struct vrnic_qp classic, ex, rc;
	struct ibv_qp_ex *qpx;

	fake_qp(&classic, IBV_QPT_XRC_SEND, 0x700, 12);
	qpx = fake_qp_ex(&ex, IBV_QPT_XRC_SEND, 0x701, 13);
	CHECK(ex.sq.max_sge == 5 && ex.max_inline == 80);
	check_same_wqes(&classic, qpx, wr, sizeof(wr) / sizeof(wr[0]));
	CHECK(le32toh(vrnic_send_wqe_xrc_seg(vrnic_wqe(&ex.sq, START + 2))
			      ->remote_srqn) == 0xfffffe);

	/* The memory operations are not XRC's; an RC QP has no setter. */
	ibv_wr_start(qpx);
	ibv_wr_local_inv(qpx, 0x100);
	CHECK(ibv_wr_complete(qpx) == EINVAL);
	ibv_wr_start(qpx);
	ibv_wr_send_inv(qpx, 0x100);
	ibv_wr_set_xrc_srqn(qpx, 1);
	CHECK(ibv_wr_complete(qpx) == EINVAL);
	CHECK(ex.sq.pi == START + 7);
	fake_qp_ex(&rc, IBV_QPT_RC, 0x702, 14);
	CHECK(rc.vqp.qp_ex.wr_set_xrc_srqn == NULL);
}

/*
 * A batch reaches the device once, at wr_complete: before it the producer
 * index, the slot flag and PAGE_FLAG are untouched; after it they name the
 * whole batch (and the device, not polling, is kicked).
 */
static void test_batch_rings_doorbell_once(void)
{
	uint32_t *page_flag = (uint32_t *)(db_page + VRNIC_DB_PAGE_PAGE_FLAG_OFF);
	uint32_t *kick = (uint32_t *)(kick_page + VRNIC_KICK_PAGE_KICK_OFF);
	struct ibv_qp_ex *qpx;
	struct vrnic_qp qp;

	qpx = fake_qp_ex(&qp, IBV_QPT_RC, 0x400, 7);
	*page_flag = 0;
	*kick = 0;
	ibv_wr_start(qpx);
	qpx->wr_id = 1;
	qpx->wr_flags = 0;
	ibv_wr_send(qpx);
	ibv_wr_set_sge(qpx, 1, 0x1000, 8);
	qpx->wr_id = 2;
	ibv_wr_rdma_write(qpx, 5, 0x2000);
	ibv_wr_set_sge(qpx, 1, 0x1000, 8);
	qpx->wr_id = 3;
	ibv_wr_send(qpx);
	CHECK(db_read(qp.sq.db) == 0 && qp.sq.pi == START);
	CHECK(*qp.sq.db_flag == 0 && db_read(page_flag) == 0);
	CHECK(db_read(kick) == 0);
	CHECK(ibv_wr_complete(qpx) == 0);
	CHECK(db_read(qp.sq.db) == START + 3 && qp.sq.pi == START + 3);
	CHECK(*qp.sq.db_flag == 1 && db_read(page_flag) == 1);
	CHECK(db_read(kick) == 1);
}

/* wr_abort and every failure leave the queue as it was; the next batch
 * writes into the same slots. */
static void test_abort_and_failures_post_nothing(void)
{
	struct vrnic_send_wqe_header *hdr;
	struct ibv_sge many[8] = {};
	struct ibv_qp_ex *qpx;
	struct vrnic_qp qp;
	uint8_t data[100];
	int i;

	qpx = fake_qp_ex(&qp, IBV_QPT_RC, 0x500, 8);

	ibv_wr_start(qpx);
	qpx->wr_id = 0xdead;
	ibv_wr_send(qpx);
	ibv_wr_set_sge(qpx, 1, 0x1000, 8);
	ibv_wr_abort(qpx);
	CHECK(qp.sq.pi == START && db_read(qp.sq.db) == 0);

	/* A good WR, then one with more SGEs than max_send_sge (6). */
	ibv_wr_start(qpx);
	qpx->wr_id = 1;
	ibv_wr_send(qpx);
	ibv_wr_set_sge(qpx, 1, 0x1000, 8);
	ibv_wr_send(qpx);
	ibv_wr_set_sge_list(qpx, 7, many);
	CHECK(ibv_wr_complete(qpx) == EINVAL);
	CHECK(qp.sq.pi == START && db_read(qp.sq.db) == 0);

	/* Inline data beyond max_inline (96). */
	memset(data, 0x5a, sizeof(data));
	ibv_wr_start(qpx);
	ibv_wr_send(qpx);
	ibv_wr_set_inline_data(qpx, data, 97);
	CHECK(ibv_wr_complete(qpx) == EINVAL);
	CHECK(qp.sq.pi == START);

	/* A setter without a builder. */
	ibv_wr_start(qpx);
	ibv_wr_set_sge(qpx, 1, 0x1000, 8);
	CHECK(ibv_wr_complete(qpx) == EINVAL);

	/* An atomic needs its one 8-byte SGE; an RDMA READ cannot be inline
	 * (the encoder's checks, as for post_send). */
	ibv_wr_start(qpx);
	ibv_wr_rdma_read(qpx, 1, 0x1000);
	ibv_wr_set_inline_data(qpx, data, 8);
	CHECK(ibv_wr_complete(qpx) == EINVAL);
	CHECK(qp.sq.pi == START);

	/* More WRs than the queue holds: ENOMEM, none posted. */
	ibv_wr_start(qpx);
	for (i = 0; i <= (int)DEPTH; i++) {
		qpx->wr_id = i;
		ibv_wr_send(qpx);
	}
	CHECK(ibv_wr_complete(qpx) == ENOMEM);
	CHECK(qp.sq.pi == START && db_read(qp.sq.db) == 0);

	/* Before RTS nothing is posted. */
	qp.state = IBV_QPS_RTR;
	ibv_wr_start(qpx);
	ibv_wr_send(qpx);
	CHECK(ibv_wr_complete(qpx) == EINVAL);
	qp.state = IBV_QPS_RTS;

	/* Inline data is copied by the setter: the caller may reuse its
	 * buffer at once. The aborted WR's slot is reused. */
	ibv_wr_start(qpx);
	qpx->wr_id = 0xbeef;
	ibv_wr_send(qpx);
	ibv_wr_set_inline_data(qpx, data, 10);
	memset(data, 0, sizeof(data));
	CHECK(ibv_wr_complete(qpx) == 0);
	hdr = vrnic_wqe(&qp.sq, START);
	CHECK(le64toh(hdr->wr_id) == 0xbeef);
	CHECK(hdr->flags == VRNIC_SEND_FLAGS_INLINE);
	CHECK(le32toh(hdr->inline_len) == 10);
	CHECK(memcmp(hdr + 1, "\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a\x5a", 10) == 0);
	CHECK(qp.sq.pi == START + 1 && db_read(qp.sq.db) == START + 1);
}

/* Work requests the QP type cannot do fail at wr_complete (UD: no RDMA, UC:
 * no READ or atomics), as they fail through post_send. */
static void test_ops_the_qp_type_cannot_do_fail(void)
{
	struct ibv_qp_ex *qpx;
	struct vrnic_qp qp;

	qpx = fake_qp_ex(&qp, IBV_QPT_UD, 0x600, 9);
	ibv_wr_start(qpx);
	ibv_wr_rdma_write(qpx, 1, 0x1000);
	CHECK(ibv_wr_complete(qpx) == EINVAL);
	ibv_wr_start(qpx);
	ibv_wr_send(qpx); /* no wr_set_ud_addr */
	CHECK(ibv_wr_complete(qpx) == EINVAL);
	CHECK(qp.sq.pi == START);

	qpx = fake_qp_ex(&qp, IBV_QPT_UC, 0x601, 10);
	ibv_wr_start(qpx);
	ibv_wr_rdma_read(qpx, 1, 0x1000);
	CHECK(ibv_wr_complete(qpx) == EINVAL);
	ibv_wr_start(qpx);
	ibv_wr_atomic_fetch_add(qpx, 1, 0x1000, 1);
	ibv_wr_set_sge(qpx, 1, 0x2000, 8);
	CHECK(ibv_wr_complete(qpx) == EINVAL);
	CHECK(qp.sq.pi == START);
}

/* create_qp_ex refuses, before any command, what the device cannot do. */
static void test_create_qp_ex_refusals(void)
{
	struct ibv_qp_init_attr_ex attr = {
		.comp_mask = IBV_QP_INIT_ATTR_PD |
			     IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = &pd,
	};
	struct ibv_context *ibctx = &ctx->ibv_ctx.context;

	attr.qp_type = IBV_QPT_UD;
	attr.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE;
	errno = 0;
	CHECK(!vrnic_create_qp_ex(ibctx, &attr) && errno == EOPNOTSUPP);
	attr.qp_type = IBV_QPT_UC;
	attr.send_ops_flags = IBV_QP_EX_WITH_RDMA_READ;
	errno = 0;
	CHECK(!vrnic_create_qp_ex(ibctx, &attr) && errno == EOPNOTSUPP);
	attr.send_ops_flags = IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
	errno = 0;
	CHECK(!vrnic_create_qp_ex(ibctx, &attr) && errno == EOPNOTSUPP);
	attr.qp_type = IBV_QPT_RC;
	attr.send_ops_flags = IBV_QP_EX_WITH_TSO;
	errno = 0;
	CHECK(!vrnic_create_qp_ex(ibctx, &attr) && errno == EOPNOTSUPP);
	attr.send_ops_flags = IBV_QP_EX_WITH_FLUSH;
	errno = 0;
	CHECK(!vrnic_create_qp_ex(ibctx, &attr) && errno == EOPNOTSUPP);
	attr.send_ops_flags = IBV_QP_EX_WITH_ATOMIC_WRITE;
	errno = 0;
	CHECK(!vrnic_create_qp_ex(ibctx, &attr) && errno == EOPNOTSUPP);
	attr.send_ops_flags = IBV_QP_EX_WITH_SEND;
	attr.comp_mask |= IBV_QP_INIT_ATTR_CREATE_FLAGS;
	attr.create_flags = IBV_QP_CREATE_BLOCK_SELF_MCAST_LB;
	errno = 0;
	CHECK(!vrnic_create_qp_ex(ibctx, &attr) && errno == EOPNOTSUPP);
	attr.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_MAX_TSO_HEADER;
	errno = 0;
	CHECK(!vrnic_create_qp_ex(ibctx, &attr) && errno == EOPNOTSUPP);
	attr.comp_mask = IBV_QP_INIT_ATTR_SEND_OPS_FLAGS; /* no PD */
	errno = 0;
	CHECK(!vrnic_create_qp_ex(ibctx, &attr) && errno == EINVAL);

	/* XRC_SEND: no memory operations; XRC_RECV: an XRCD, no sends. */
	attr.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	attr.qp_type = IBV_QPT_XRC_SEND;
	attr.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_LOCAL_INV;
	errno = 0;
	CHECK(!vrnic_create_qp_ex(ibctx, &attr) && errno == EOPNOTSUPP);
	attr.qp_type = IBV_QPT_XRC_RECV;
	attr.comp_mask = IBV_QP_INIT_ATTR_PD;
	errno = 0;
	CHECK(!vrnic_create_qp_ex(ibctx, &attr) && errno == EINVAL);
	{
		struct ibv_xrcd xrcd = { .context = ibctx };

		attr.comp_mask = IBV_QP_INIT_ATTR_XRCD |
				 IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
		attr.xrcd = &xrcd;
		attr.send_ops_flags = IBV_QP_EX_WITH_SEND;
		errno = 0;
		CHECK(!vrnic_create_qp_ex(ibctx, &attr) && errno == EOPNOTSUPP);
	}
}

/* The fake device's CQ: 8 entries, written like the device does. */
static struct vrnic_cq cq;
static uint32_t dev_cq_pi = START;

static void fake_cq(void)
{
	uint32_t i;

	cq.ibv_cq.context = &ctx->ibv_ctx.context;
	cq.depth_log2 = 3;
	cq.ring = calloc(8, sizeof(*cq.ring));
	/* Each entry as the pass before START left it: consumed. */
	for (i = START - 8; i != START; i++)
		cq.ring[i & 7].owner = vrnic_cqe_phase(i, 3);
	cq.ci = START;
	cq.db_ci = vrnic_db_word(db_page, 11, VRNIC_DB_CQ_SLOT_CI_OFF);
	cq.db_arm = vrnic_db_word(db_page, 11, VRNIC_DB_CQ_SLOT_ARM_OFF);
	pthread_spin_init(&cq.lock, PTHREAD_PROCESS_PRIVATE);
	vrnic_cq_ex_init(&cq, IBV_WC_STANDARD_FLAGS);
}

static void dev_cqe(const struct vrnic_cqe *img)
{
	struct vrnic_cqe *cqe = &cq.ring[dev_cq_pi & 7];

	memcpy(cqe, img, offsetof(struct vrnic_cqe, owner));
	__atomic_store_n(&cqe->owner, ((dev_cq_pi >> 3) & 1) ^ 1,
			 __ATOMIC_RELEASE);
	dev_cq_pi++;
}

/* CQEs of every kind the device writes (QPNs the table does not hold, so
 * nothing is retired). */
static void dev_cqes(void)
{
	struct vrnic_cqe img[6] = {
		{ .wr_id = htole64(1), .byte_len = htole32(4096),
		  .qpn = htole32(0x42), .opcode = VRNIC_WC_OPCODE_RDMA_READ },
		{ .wr_id = htole64(2), .byte_len = htole32(12),
		  .imm_data = { 1, 2, 3, 4 }, .qpn = htole32(0x42),
		  .opcode = VRNIC_WC_OPCODE_RECV_RDMA_WITH_IMM,
		  .wc_flags = VRNIC_WC_FLAGS_WITH_IMM,
		  .flags = VRNIC_CQE_FLAG_RECV },
		{ .wr_id = htole64(3), .byte_len = htole32(33),
		  .imm_data = { 0x34, 0x12, 0, 0 }, .qpn = htole32(0x42),
		  .opcode = VRNIC_WC_OPCODE_RECV,
		  .wc_flags = VRNIC_WC_FLAGS_WITH_INV,
		  .flags = VRNIC_CQE_FLAG_RECV },
		{ .wr_id = htole64(4), .qpn = 0 },	/* cleaned */
		{ .wr_id = htole64(5), .byte_len = htole32(1000),
		  .qpn = htole32(0x43), .src_qp = htole32(0x10203),
		  .opcode = VRNIC_WC_OPCODE_RECV,
		  .wc_flags = VRNIC_WC_FLAGS_GRH | VRNIC_WC_FLAGS_WITH_IMM,
		  .imm_data = { 9, 9, 9, 9 },
		  .flags = VRNIC_CQE_FLAG_RECV, .slid = htole16(0x17), .sl = 5 },
		{ .wr_id = htole64(6), .qpn = htole32(0x42),
		  .opcode = VRNIC_WC_OPCODE_COMP_SWAP,
		  .status = VRNIC_WC_STATUS_REM_INV_REQ_ERR,
		  .vendor_err = VRNIC_VENDOR_ERR_MISALIGNED },
	};
	int i;

	for (i = 0; i < 6; i++)
		dev_cqe(&img[i]);
}

static void check_wc_equal(struct ibv_cq_ex *cqx, const struct ibv_wc *wc)
{
	CHECK(cqx->wr_id == wc->wr_id);
	CHECK(cqx->status == wc->status);
	CHECK(ibv_wc_read_opcode(cqx) == wc->opcode);
	CHECK(ibv_wc_read_vendor_err(cqx) == wc->vendor_err);
	CHECK(ibv_wc_read_byte_len(cqx) == wc->byte_len);
	CHECK(ibv_wc_read_imm_data(cqx) == wc->imm_data);
	CHECK(ibv_wc_read_invalidated_rkey(cqx) == wc->invalidated_rkey);
	CHECK(ibv_wc_read_qp_num(cqx) == wc->qp_num);
	CHECK(ibv_wc_read_src_qp(cqx) == wc->src_qp);
	CHECK(ibv_wc_read_wc_flags(cqx) == wc->wc_flags);
	CHECK(ibv_wc_read_slid(cqx) == wc->slid);
	CHECK(ibv_wc_read_sl(cqx) == wc->sl);
	CHECK(ibv_wc_read_dlid_path_bits(cqx) == wc->dlid_path_bits);
}

/* The same CQEs, once through poll_cq and once through the iterator. */
static void test_poll_cq_ex_equals_poll_cq(void)
{
	struct ibv_cq_ex *cqx = &cq.vcq.cq_ex;
	struct ibv_poll_cq_attr attr = {};
	struct ibv_wc wc[8];
	int n, i;

	fake_cq();
	CHECK(ibv_start_poll(cqx, &attr) == ENOENT);

	dev_cqes();
	n = vrnic_poll_cq(&cq.ibv_cq, 8, wc);
	CHECK(n == 5);
	CHECK(db_read(cq.db_ci) == dev_cq_pi);
	/* What the decoder makes of them (so equal is also right). */
	CHECK(wc[0].opcode == IBV_WC_RDMA_READ && wc[0].byte_len == 4096);
	CHECK(wc[1].opcode == IBV_WC_RECV_RDMA_WITH_IMM &&
	      wc[1].wc_flags == IBV_WC_WITH_IMM &&
	      wc[1].imm_data == htobe32(0x01020304));
	CHECK(wc[2].wc_flags == IBV_WC_WITH_INV &&
	      wc[2].invalidated_rkey == 0x1234);
	CHECK(wc[3].wr_id == 5 && wc[3].src_qp == 0x10203 &&
	      wc[3].slid == 0x17 && wc[3].sl == 5 &&
	      wc[3].wc_flags == (IBV_WC_GRH | IBV_WC_WITH_IMM));
	CHECK(wc[4].status == IBV_WC_REM_INV_REQ_ERR &&
	      wc[4].vendor_err == VRNIC_VENDOR_ERR_MISALIGNED &&
	      wc[4].opcode == IBV_WC_COMP_SWAP);

	dev_cqes();
	CHECK(ibv_start_poll(cqx, &attr) == 0);
	for (i = 0; i < n; i++) {
		check_wc_equal(cqx, &wc[i]);
		if (i + 1 < n)
			CHECK(ibv_next_poll(cqx) == 0);
	}
	CHECK(ibv_next_poll(cqx) == ENOENT);
	/* Entries go back to the device at end_poll. */
	CHECK(db_read(cq.db_ci) == dev_cq_pi - 6);
	ibv_end_poll(cqx);
	CHECK(db_read(cq.db_ci) == dev_cq_pi && cq.ci == dev_cq_pi);
	CHECK(ibv_start_poll(cqx, &attr) == ENOENT);
	CHECK(vrnic_poll_cq(&cq.ibv_cq, 8, wc) == 0);
}

/* create_cq_ex refuses what a CQE cannot carry, before any command. */
static void test_create_cq_ex_refusals(void)
{
	static const uint64_t unsupported[] = {
		IBV_WC_EX_WITH_COMPLETION_TIMESTAMP, IBV_WC_EX_WITH_CVLAN,
		IBV_WC_EX_WITH_FLOW_TAG, IBV_WC_EX_WITH_TM_INFO,
		IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK,
	};
	struct ibv_context *ibctx = &ctx->ibv_ctx.context;
	struct ibv_cq_init_attr_ex attr = { .cqe = 4 };
	unsigned int i;

	for (i = 0; i < sizeof(unsupported) / sizeof(unsupported[0]); i++) {
		attr.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | unsupported[i];
		errno = 0;
		CHECK(!vrnic_create_cq_ex(ibctx, &attr) && errno == EOPNOTSUPP);
	}
	attr.wc_flags = IBV_WC_STANDARD_FLAGS;
	attr.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
	attr.flags = IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;
	errno = 0;
	CHECK(!vrnic_create_cq_ex(ibctx, &attr) && errno == EOPNOTSUPP);
	attr.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD;
	attr.flags = 0;
	errno = 0;
	CHECK(!vrnic_create_cq_ex(ibctx, &attr) && errno == EOPNOTSUPP);
}

int main(void)
{
	setup();
	test_rc_wqes_equal_post_send();
	test_uc_ud_wqes_equal_post_send();
	test_xrc_wqes_equal_post_send();
	test_batch_rings_doorbell_once();
	test_abort_and_failures_post_nothing();
	test_ops_the_qp_type_cannot_do_fail();
	test_create_qp_ex_refusals();
	test_poll_cq_ex_equals_poll_cq();
	test_create_cq_ex_refusals();
	if (failures) {
		fprintf(stderr, "verbs_ex_test: %d failure(s)\n", failures);
		return 1;
	}
	printf("verbs_ex_test: ok\n");
	return 0;
}
