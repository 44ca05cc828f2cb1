// SPDX-License-Identifier: GPL-2.0 OR Linux-OpenIB
/*
 * Data path test without a kernel or device: a fake context (a doorbell and
 * a kick page in plain memory), a CQ and a QP whose indices start just below
 * 2^32, and a fake device that reads WQEs and writes CQEs by the SPEC.md
 * rules. Built and run by `build.sh --test` inside the build root.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../vrnic.h"
#include "check.h"

#define START 0xfffffffeu /* every free-running index wraps during the test */
#define QPN 0x123456u
#define UD_QPN 0x000abcu
#define UC_QPN 0x00c0deu
#define SRQ_QPN 0x005e1fu
#define SRQ_SLOT 11
#define SRQN 0x000303u
#define XRC_QPN 0x00c0ffu	/* XRC_SEND, slot 13 */
#define XSRQN 0x00a5a5u		/* an XRC SRQ of 2 WQEs, slot 14 */
#define TGT_QPN 0x7e7e7eu	/* the kernel's XRC_RECV QP: not in our table */

static struct vrnic_context *ctx;
static uint8_t *db_page;	/* the fake doorbell page holding both slots */
static uint8_t *kick_page;
static struct vrnic_cq cq;
static struct vrnic_qp qp;
static struct vrnic_qp ud_qp;	/* UD, 128-byte send WQEs, own slot 9 */
static struct vrnic_qp uc_qp;	/* UC, slot 10 */
static struct vrnic_qp srq_qp;	/* RC with an SRQ, slot 12 */
static struct vrnic_srq srq;	/* 4 WQEs of 32 bytes, slot SRQ_SLOT */
static struct vrnic_qp xrc_qp;	/* XRC_SEND, 4 send WQEs of 128 bytes */
static struct vrnic_srq xsrq;	/* XRC, XSRQN, 2 WQEs of 32 bytes */
static uint32_t dev_cq_pi = START; /* fake device's CQ producer index */
static struct vrnic_cqe *dev_cq_ring;	/* its ring (moved by RESIZE_CQ) */
static uint32_t dev_cq_log2 = 2;	/* and that ring's depth */

static uint32_t db_read(const uint32_t *w)
{
	return le32toh(*(volatile const uint32_t *)w);
}

static uint32_t *poll_state(void)
{
	return (uint32_t *)(db_page + VRNIC_DB_PAGE_POLL_STATE_OFF);
}

static uint32_t *kick(void)
{
	return (uint32_t *)(kick_page + VRNIC_KICK_PAGE_KICK_OFF);
}

static uint32_t *page_flag(void)
{
	return (uint32_t *)(db_page + VRNIC_DB_PAGE_PAGE_FLAG_OFF);
}

/* The flag byte of doorbell slot @slot. */
static uint8_t *slot_flag(uint32_t slot)
{
	return db_page + VRNIC_DB_FLAGS_BASE + slot;
}

/* An RC or UC QP in RTS with 4 send WQEs of 64 bytes (2 SGEs or 32 inline
 * bytes) and 4 receive WQEs of 32, in doorbell slot @slot. */
static void setup_connected_qp(struct vrnic_qp *q, uint32_t qpn,
			       enum ibv_qp_type type, uint32_t slot)
{
	*q = (struct vrnic_qp){ .max_inline = 32, .state = IBV_QPS_RTS };
	q->ibv_qp.context = &ctx->ibv_ctx.context;
	q->ibv_qp.qp_num = qpn;
	q->ibv_qp.qp_type = type;
	q->ibv_qp.send_cq = &cq.ibv_cq;
	q->ibv_qp.recv_cq = &cq.ibv_cq;
	q->sq = (struct vrnic_wq){ .depth = 4, .wqe_shift = 6, .max_sge = 2,
				   .pi = START, .ci = START };
	q->rq = (struct vrnic_wq){ .depth = 4, .wqe_shift = 5, .max_sge = 1,
				   .pi = START, .ci = START };
	q->sq.ring = calloc(4, 64);
	q->rq.ring = calloc(4, 32);
	q->sq.db = vrnic_db_word(db_page, slot, VRNIC_DB_QP_SLOT_SQ_PI_OFF);
	q->rq.db = vrnic_db_word(db_page, slot, VRNIC_DB_QP_SLOT_RQ_PI_OFF);
	q->sq.db_flag = q->rq.db_flag = slot_flag(slot);
	q->sq.db_page = q->rq.db_page = db_page;
	q->sq.kick_page = q->rq.kick_page = kick_page;
	pthread_spin_init(&q->sq.lock, PTHREAD_PROCESS_PRIVATE);
	pthread_spin_init(&q->rq.lock, PTHREAD_PROCESS_PRIVATE);
}

static void setup(void)
{
	uint32_t i;

	ctx = calloc(1, sizeof(*ctx));
	db_page = aligned_alloc(4096, VRNIC_DB_PAGE_SIZE);
	kick_page = aligned_alloc(4096, VRNIC_DB_PAGE_SIZE);
	memset(db_page, 0, VRNIC_DB_PAGE_SIZE);
	memset(kick_page, 0, VRNIC_DB_PAGE_SIZE);
	ctx->max_sge = 16;
	ctx->max_inline = 256;
	ctx->max_cqe = 1024;
	pthread_mutex_init(&ctx->qp_table_mutex, NULL);
	pthread_mutex_init(&ctx->srq_table_mutex, NULL);

	cq.ibv_cq.context = &ctx->ibv_ctx.context;
	cq.depth_log2 = 2;
	cq.ring = calloc(4, sizeof(*cq.ring));
	dev_cq_ring = cq.ring;
	/* Entries still hold the previous pass's phase. */
	for (i = 0; i < 4; i++)
		cq.ring[i].owner = (START >> 2) & 1;
	cq.ci = START;
	cq.db_ci = vrnic_db_word(db_page, 3, VRNIC_DB_CQ_SLOT_CI_OFF);
	cq.db_arm = vrnic_db_word(db_page, 3, VRNIC_DB_CQ_SLOT_ARM_OFF);
	pthread_spin_init(&cq.lock, PTHREAD_PROCESS_PRIVATE);

	qp.ibv_qp.context = &ctx->ibv_ctx.context;
	qp.ibv_qp.qp_num = QPN;
	qp.ibv_qp.qp_type = IBV_QPT_RC;
	qp.ibv_qp.send_cq = &cq.ibv_cq;
	qp.ibv_qp.recv_cq = &cq.ibv_cq;
	qp.sq = (struct vrnic_wq){ .depth = 4, .wqe_shift = 6, .max_sge = 2,
				   .pi = START, .ci = START };
	qp.rq = (struct vrnic_wq){ .depth = 4, .wqe_shift = 5, .max_sge = 1,
				   .pi = START, .ci = START };
	qp.sq.ring = calloc(4, 64);
	qp.rq.ring = calloc(4, 32);
	qp.sq.db = vrnic_db_word(db_page, 7, VRNIC_DB_QP_SLOT_SQ_PI_OFF);
	qp.rq.db = vrnic_db_word(db_page, 7, VRNIC_DB_QP_SLOT_RQ_PI_OFF);
	qp.sq.db_flag = slot_flag(7);
	qp.rq.db_flag = slot_flag(7);
	qp.sq.db_page = db_page;
	qp.rq.db_page = db_page;
	qp.sq.kick_page = kick_page;
	qp.rq.kick_page = kick_page;
	qp.max_inline = 32;
	qp.state = IBV_QPS_RTS;
	pthread_spin_init(&qp.sq.lock, PTHREAD_PROCESS_PRIVATE);
	pthread_spin_init(&qp.rq.lock, PTHREAD_PROCESS_PRIVATE);
	CHECK(vrnic_insert_qp(ctx, &qp) == 0);
	CHECK(vrnic_find_qp(ctx, QPN) == &qp);
	CHECK(vrnic_find_qp(ctx, QPN + 1) == NULL);

	ud_qp = qp;
	ud_qp.ibv_qp.qp_num = UD_QPN;
	ud_qp.ibv_qp.qp_type = IBV_QPT_UD;
	ud_qp.datagram = true;
	ud_qp.sq = (struct vrnic_wq){ .depth = 2, .wqe_shift = 7, .max_sge = 3,
				      .pi = START, .ci = START };
	ud_qp.rq = (struct vrnic_wq){ .depth = 2, .wqe_shift = 5, .max_sge = 1,
				      .pi = START, .ci = START };
	ud_qp.sq.ring = calloc(2, 128);
	ud_qp.rq.ring = calloc(2, 32);
	ud_qp.sq.db = vrnic_db_word(db_page, 9, VRNIC_DB_QP_SLOT_SQ_PI_OFF);
	ud_qp.rq.db = vrnic_db_word(db_page, 9, VRNIC_DB_QP_SLOT_RQ_PI_OFF);
	ud_qp.sq.db_flag = slot_flag(9);
	ud_qp.rq.db_flag = slot_flag(9);
	ud_qp.sq.db_page = ud_qp.rq.db_page = db_page;
	ud_qp.sq.kick_page = ud_qp.rq.kick_page = kick_page;
	ud_qp.max_inline = 48;
	pthread_spin_init(&ud_qp.sq.lock, PTHREAD_PROCESS_PRIVATE);
	pthread_spin_init(&ud_qp.rq.lock, PTHREAD_PROCESS_PRIVATE);
	CHECK(vrnic_insert_qp(ctx, &ud_qp) == 0);

	setup_connected_qp(&uc_qp, UC_QPN, IBV_QPT_UC, 10);
	CHECK(vrnic_insert_qp(ctx, &uc_qp) == 0);

	srq = (struct vrnic_srq){ .depth = 4, .wqe_shift = 5, .max_sge = 1,
				  .pi = START, .srqn = SRQN };
	srq.ring = calloc(4, 32);
	srq.busy = calloc(4, 1);
	srq.db = vrnic_db_word(db_page, SRQ_SLOT, VRNIC_DB_SRQ_SLOT_PI_OFF);
	pthread_spin_init(&srq.lock, PTHREAD_PROCESS_PRIVATE);
	setup_connected_qp(&srq_qp, SRQ_QPN, IBV_QPT_RC, 12);
	srq_qp.srq = &srq;
	srq_qp.rq = (struct vrnic_wq){ .db = srq_qp.rq.db };
	pthread_spin_init(&srq_qp.rq.lock, PTHREAD_PROCESS_PRIVATE);
	CHECK(vrnic_insert_qp(ctx, &srq_qp) == 0);
	CHECK(vrnic_table_insert(&ctx->srq_table, SRQN, &srq) == 0);

	/* XRC_SEND: no receive queue; 128-byte WQEs hold 5 SGEs or 80
	 * inline bytes after the xrc_seg. */
	setup_connected_qp(&xrc_qp, XRC_QPN, IBV_QPT_XRC_SEND, 13);
	free(xrc_qp.sq.ring);
	free(xrc_qp.rq.ring);
	xrc_qp.xrc = true;
	xrc_qp.ibv_qp.recv_cq = NULL;
	xrc_qp.sq = (struct vrnic_wq){ .depth = 4, .wqe_shift = 7,
				       .max_sge = 5, .pi = START, .ci = START,
				       .db = xrc_qp.sq.db,
				       .db_flag = xrc_qp.sq.db_flag,
				       .db_page = db_page,
				       .kick_page = kick_page };
	xrc_qp.rq = (struct vrnic_wq){ .db = xrc_qp.rq.db };
	xrc_qp.max_inline = vrnic_xrc_send_wqe_room(7);
	xrc_qp.sq.ring = calloc(4, 128);
	pthread_spin_init(&xrc_qp.sq.lock, PTHREAD_PROCESS_PRIVATE);
	pthread_spin_init(&xrc_qp.rq.lock, PTHREAD_PROCESS_PRIVATE);
	CHECK(vrnic_insert_qp(ctx, &xrc_qp) == 0);

	xsrq = (struct vrnic_srq){ .depth = 2, .wqe_shift = 5, .max_sge = 1,
				   .pi = START, .srqn = XSRQN };
	xsrq.vsrq.srq_type = IBV_SRQT_XRC;
	xsrq.ring = calloc(2, 32);
	xsrq.busy = calloc(2, 1);
	xsrq.db = vrnic_db_word(db_page, 14, VRNIC_DB_SRQ_SLOT_PI_OFF);
	pthread_spin_init(&xsrq.lock, PTHREAD_PROCESS_PRIVATE);
	CHECK(vrnic_table_insert(&ctx->srq_table, XSRQN, &xsrq) == 0);
}

/* Fake device: write every field but owner into the next entry... */
static struct vrnic_cqe *dev_cqe_fill(uint32_t qpn, uint16_t wqe_index,
				      uint64_t wr_id, uint8_t flags,
				      uint8_t status)
{
	struct vrnic_cqe *cqe =
		&dev_cq_ring[dev_cq_pi & ((1u << dev_cq_log2) - 1)];

	memset(cqe, 0, offsetof(struct vrnic_cqe, owner));
	cqe->wr_id = htole64(wr_id);
	cqe->byte_len = htole32(100);
	memcpy(cqe->imm_data, "\x01\x02\x03\x04", 4);
	cqe->qpn = htole32(qpn);
	cqe->src_qp = htole32(77);
	cqe->wqe_index = htole16(wqe_index);
	cqe->opcode = flags & VRNIC_CQE_FLAG_RECV ? VRNIC_WC_OPCODE_RECV :
						   VRNIC_WC_OPCODE_SEND;
	cqe->status = status;
	cqe->wc_flags = VRNIC_WC_FLAGS_WITH_IMM;
	cqe->flags = flags;
	return cqe;
}

/* ...then owner with the pass's phase. */
static void dev_cqe_publish(struct vrnic_cqe *cqe)
{
	__atomic_store_n(&cqe->owner, vrnic_cqe_phase(dev_cq_pi, dev_cq_log2),
			 __ATOMIC_RELEASE);
	dev_cq_pi++;
}

static void dev_cqe(uint32_t qpn, uint16_t wqe_index, uint64_t wr_id,
		    uint8_t flags, uint8_t status)
{
	dev_cqe_publish(dev_cqe_fill(qpn, wqe_index, wr_id, flags, status));
}

/* The completion of SRQ @srqn's slot @wqe_index, received by QP @qpn. */
static void dev_srq_cqe(uint32_t qpn, uint32_t srqn, uint16_t wqe_index,
			uint64_t wr_id)
{
	struct vrnic_cqe *cqe = dev_cqe_fill(qpn, wqe_index, wr_id,
					     VRNIC_CQE_FLAG_RECV |
					     VRNIC_CQE_FLAG_SRQ, 0);

	cqe->srqn = htole32(srqn);
	dev_cqe_publish(cqe);
}

static void test_send_ring_and_kick(void)
{
	struct ibv_sge sge = { .addr = 0x1000, .length = 8, .lkey = 5 };
	struct ibv_send_wr wr[5], *bad = NULL;
	struct vrnic_send_wqe_header *hdr;
	struct vrnic_sge *wsge;
	int i;

	memset(wr, 0, sizeof(wr));
	for (i = 0; i < 5; i++) {
		wr[i].wr_id = 100 + i;
		wr[i].opcode = IBV_WR_RDMA_WRITE;
		wr[i].sg_list = &sge;
		wr[i].num_sge = 1;
		wr[i].wr.rdma.remote_addr = 0xabcdef;
		wr[i].wr.rdma.rkey = 9;
		wr[i].next = i < 4 ? &wr[i + 1] : NULL;
	}
	wr[3].send_flags = IBV_SEND_SIGNALED;

	*poll_state() = 0;
	*kick() = 0;
	/* Five WRs into a queue of four: four posted, the fifth is bad_wr. */
	CHECK(vrnic_post_send(&qp.ibv_qp, wr, &bad) == ENOMEM);
	CHECK(bad == &wr[4]);
	CHECK(db_read(qp.sq.db) == START + 4);
	CHECK(db_read(qp.sq.db) == 2); /* wrapped */
	CHECK(db_read(kick()) == 1);
	/* The QP's slot flag and PAGE_FLAG tell the device where to look. */
	CHECK(*slot_flag(7) == 1 && db_read(page_flag()) == 1);
	CHECK(*slot_flag(3) == 0 && *slot_flag(6) == 0 && *slot_flag(8) == 0);

	hdr = vrnic_wqe(&qp.sq, START + 3);
	wsge = (struct vrnic_sge *)(hdr + 1);
	CHECK(hdr == (void *)(qp.sq.ring + 64));
	CHECK(hdr->opcode == VRNIC_WR_OPCODE_RDMA_WRITE);
	CHECK(hdr->flags == VRNIC_SEND_FLAGS_SIGNALED);
	CHECK(hdr->num_sge == 1 && hdr->inline_len == 0);
	CHECK(le64toh(hdr->wr_id) == 103);
	CHECK(le64toh(hdr->remote_addr) == 0xabcdef && le32toh(hdr->rkey) == 9);
	CHECK(le64toh(wsge->addr) == 0x1000 && le32toh(wsge->length) == 8 &&
	      le32toh(wsge->lkey) == 5);

	/* The signalled CQE of WQE 3 retires WQEs 0..3. */
	dev_cqe(QPN, (START + 3) & 3, 103, 0, VRNIC_WC_STATUS_SUCCESS);
	{
		struct ibv_wc wc[4];

		CHECK(vrnic_poll_cq(&cq.ibv_cq, 4, wc) == 1);
		CHECK(wc[0].wr_id == 103 && wc[0].status == IBV_WC_SUCCESS);
		CHECK(wc[0].opcode == IBV_WC_SEND && wc[0].qp_num == QPN);
		CHECK(wc[0].wc_flags == IBV_WC_WITH_IMM);
		CHECK(memcmp(&wc[0].imm_data, "\x01\x02\x03\x04", 4) == 0);
		CHECK(vrnic_poll_cq(&cq.ibv_cq, 4, wc) == 0);
	}
	CHECK(qp.sq.ci == START + 4);
	CHECK(db_read(cq.db_ci) == START + 1);

	/* Device polling: no kick. */
	*poll_state() = htole32(1);
	*kick() = 0;
	/* The device took the flags (swapped them to 0). */
	*slot_flag(7) = 0;
	*page_flag() = 0;
	wr[4].send_flags = IBV_SEND_SIGNALED | IBV_SEND_SOLICITED |
			   IBV_SEND_FENCE;
	CHECK(vrnic_post_send(&qp.ibv_qp, &wr[4], &bad) == 0);
	CHECK(db_read(kick()) == 0);
	CHECK(*slot_flag(7) == 1 && db_read(page_flag()) == 1);
	hdr = vrnic_wqe(&qp.sq, START + 4);
	CHECK(hdr->flags == (VRNIC_SEND_FLAGS_SIGNALED |
			     VRNIC_SEND_FLAGS_SOLICITED |
			     VRNIC_SEND_FLAGS_FENCE));
	dev_cqe(QPN, (START + 4) & 3, 104, 0, VRNIC_WC_STATUS_SUCCESS);
}

static void test_send_errors_and_inline(void)
{
	uint8_t data[40];
	struct ibv_sge sge[3] = { { .addr = (uintptr_t)data, .length = 20 },
				  { .addr = (uintptr_t)data + 20, .length = 4 },
				  { .addr = 0, .length = 0 } };
	struct ibv_send_wr wr = { .wr_id = 7, .sg_list = sge, .num_sge = 3,
				  .opcode = IBV_WR_SEND };
	struct ibv_send_wr *bad = NULL;
	struct vrnic_send_wqe_header *hdr;
	struct ibv_wc wc;
	uint32_t pi = qp.sq.pi;
	int i;

	for (i = 0; i < 40; i++)
		data[i] = i;
	CHECK(vrnic_post_send(&qp.ibv_qp, &wr, &bad) == EINVAL); /* 3 > 2 SGEs */
	CHECK(bad == &wr && qp.sq.pi == pi);
	wr.opcode = IBV_WR_TSO; /* not an opcode of ours */
	wr.num_sge = 1;
	CHECK(vrnic_post_send(&qp.ibv_qp, &wr, &bad) == EINVAL);

	wr.opcode = IBV_WR_SEND_WITH_IMM;
	wr.imm_data = htobe32(0x11223344);
	wr.send_flags = IBV_SEND_INLINE;
	wr.num_sge = 3;
	CHECK(vrnic_post_send(&qp.ibv_qp, &wr, &bad) == 0);
	hdr = vrnic_wqe(&qp.sq, pi);
	CHECK(hdr->opcode == VRNIC_WR_OPCODE_SEND_WITH_IMM);
	CHECK(hdr->flags == VRNIC_SEND_FLAGS_INLINE && hdr->num_sge == 0);
	CHECK(le32toh(hdr->inline_len) == 24);
	CHECK(memcmp(hdr + 1, data, 24) == 0);
	CHECK(memcmp(hdr->imm_data, "\x11\x22\x33\x44", 4) == 0);
	CHECK(hdr->remote_addr == 0 && hdr->rkey == 0);

	sge[0].length = 40; /* 44 > max_inline 32 */
	CHECK(vrnic_post_send(&qp.ibv_qp, &wr, &bad) == EINVAL);

	qp.state = IBV_QPS_RTR;
	sge[0].length = 4;
	CHECK(vrnic_post_send(&qp.ibv_qp, &wr, &bad) == EINVAL);
	qp.state = IBV_QPS_RTS;

	/* An error CQE retires the inline WQE; the 104 CQE comes first. */
	dev_cqe(QPN, pi & 3, 7, 0, VRNIC_WC_STATUS_WR_FLUSH_ERR);
	CHECK(vrnic_poll_cq(&cq.ibv_cq, 1, &wc) == 1 && wc.wr_id == 104);
	CHECK(vrnic_poll_cq(&cq.ibv_cq, 1, &wc) == 1 && wc.wr_id == 7);
	CHECK(wc.status == IBV_WC_WR_FLUSH_ERR);
	CHECK(qp.sq.ci == qp.sq.pi);
	/* A bogus wqe_index (nothing outstanding) does not move ci. */
	dev_cqe(QPN, 1, 8, 0, VRNIC_WC_STATUS_SUCCESS);
	CHECK(vrnic_poll_cq(&cq.ibv_cq, 1, &wc) == 1 && qp.sq.ci == qp.sq.pi);
}

static void test_recv_and_clean(void)
{
	struct ibv_sge sge = { .addr = 0x2000, .length = 64, .lkey = 3 };
	struct ibv_recv_wr wr[2] = { { .wr_id = 1, .sg_list = &sge, .num_sge = 1,
				       .next = &wr[1] },
				     { .wr_id = 2, .sg_list = &sge, .num_sge = 1 } };
	struct ibv_recv_wr *bad = NULL;
	struct vrnic_recv_wqe_header *hdr;
	struct ibv_wc wc[4];

	CHECK(vrnic_post_recv(&qp.ibv_qp, wr, &bad) == 0);
	CHECK(db_read(qp.rq.db) == START + 2);
	hdr = vrnic_wqe(&qp.rq, START + 1);
	CHECK(le64toh(hdr->wr_id) == 2 && hdr->num_sge == 1);

	dev_cqe(QPN, START & 3, 1, VRNIC_CQE_FLAG_RECV, 0);
	CHECK(vrnic_poll_cq(&cq.ibv_cq, 4, wc) == 1);
	CHECK(wc[0].opcode == IBV_WC_RECV && wc[0].src_qp == 77);
	CHECK(wc[0].byte_len == 100);
	CHECK(qp.rq.ci == START + 1);

	/* Cleaning drops the QP's unpolled CQEs, others stay. */
	dev_cqe(QPN, (START + 1) & 3, 2, VRNIC_CQE_FLAG_RECV, 0);
	dev_cqe(QPN + 1, 0, 99, 0, 0);
	pthread_spin_lock(&cq.lock);
	vrnic_cq_clean(&cq, &qp);
	pthread_spin_unlock(&cq.lock);
	CHECK(vrnic_poll_cq(&cq.ibv_cq, 4, wc) == 1 && wc[0].wr_id == 99);
	CHECK(db_read(cq.db_ci) == dev_cq_pi);

	qp.state = IBV_QPS_RESET;
	CHECK(vrnic_post_recv(&qp.ibv_qp, wr, &bad) == EINVAL && bad == wr);
	qp.state = IBV_QPS_RTS;
}

/*
 * UD: the AH's address vector plus the WR's remote_qpn/remote_qkey land in
 * the WQE's ud_av (offset 32), the SGE at UD_PAYLOAD_OFFSET (80); RDMA
 * opcodes are refused; a datagram receive CQE reports src_qp, slid, sl,
 * pkey_index and the GRH flag.
 */
static void test_ud_send_and_recv(void)
{
	static const uint8_t want_av[48] = {
		[0] = 0x03, 0x02, 0x01, 0x00,	/* remote_qpn 0x10203 */
		[4] = 0x11, 0x11, 0x11, 0x11,	/* remote_qkey */
		[8] = 0x00, 0x00,		/* dlid (RoCE: 0) */
		[10] = 0,			/* sl */
		[11] = 1,			/* is_global */
		[12] = 1,			/* sgid_index */
		[13] = 1,			/* hop_limit */
		[14] = 0,			/* traffic_class */
		[16] = 0, 0, 0, 0,		/* flow_label */
		[20] = 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff,
		       192, 168, 7, 2,		/* dgid ::ffff:192.168.7.2 */
		[36] = 0x52, 0x54, 0x00, 0xaa, 0xbb, 0xcc, /* dmac */
	};
	static const uint8_t want_sge[16] = {
		0x00, 0x50, 0, 0, 0, 0, 0, 0,	/* addr 0x5000 */
		0x00, 0x04, 0, 0,		/* length 1024 */
		0x0b, 0, 0, 0,			/* lkey 11 */
	};
	struct vrnic_ah ah = { .av = {
		.is_global = 1, .sgid_index = 1, .hop_limit = 1,
		.dgid = { [10] = 0xff, [11] = 0xff, [12] = 192, [13] = 168,
			  [14] = 7, [15] = 2 },
		.dmac = { 0x52, 0x54, 0x00, 0xaa, 0xbb, 0xcc },
	} };
	struct ibv_sge sge = { .addr = 0x5000, .length = 1024, .lkey = 11 };
	struct ibv_send_wr wr = {
		.wr_id = 55, .sg_list = &sge, .num_sge = 1,
		.opcode = IBV_WR_SEND_WITH_IMM, .send_flags = IBV_SEND_SIGNALED,
		.imm_data = htobe32(0x0a0b0c0d),
		.wr.ud = { .ah = &ah.ibv_ah, .remote_qpn = 0x10203,
			   .remote_qkey = 0x11111111 },
	};
	struct ibv_send_wr *bad = NULL;
	struct vrnic_send_wqe_header *hdr;
	uint8_t *wqe, data[48];
	struct vrnic_cqe *cqe;
	struct ibv_wc wc;

	/* Leftovers of an earlier WQE must not survive in the AV. */
	memset(ud_qp.sq.ring, 0xee, 2 * 128);
	CHECK(vrnic_post_send(&ud_qp.ibv_qp, &wr, &bad) == 0);
	CHECK(db_read(ud_qp.sq.db) == START + 1);
	CHECK(*slot_flag(9) == 1);
	wqe = vrnic_wqe(&ud_qp.sq, START);
	hdr = (struct vrnic_send_wqe_header *)wqe;
	CHECK(hdr->opcode == VRNIC_WR_OPCODE_SEND_WITH_IMM);
	CHECK(hdr->flags == VRNIC_SEND_FLAGS_SIGNALED && hdr->num_sge == 1);
	CHECK(hdr->reserved0 == 0);
	CHECK(memcmp(hdr->imm_data, "\x0a\x0b\x0c\x0d", 4) == 0);
	CHECK(le64toh(hdr->wr_id) == 55);
	CHECK(hdr->remote_addr == 0 && hdr->rkey == 0 && hdr->inline_len == 0);
	CHECK(memcmp(wqe + 32, want_av, sizeof(want_av)) == 0);
	CHECK(memcmp(wqe + VRNIC_UD_PAYLOAD_OFFSET, want_sge,
		     sizeof(want_sge)) == 0);

	/* Inline: payload at 80 too, up to max_inline (48 = 128 - 80). */
	memset(data, 0x5a, sizeof(data));
	sge = (struct ibv_sge){ .addr = (uintptr_t)data, .length = 48 };
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = IBV_SEND_INLINE;
	CHECK(vrnic_post_send(&ud_qp.ibv_qp, &wr, &bad) == 0);
	wqe = vrnic_wqe(&ud_qp.sq, START + 1);
	hdr = (struct vrnic_send_wqe_header *)wqe;
	CHECK(hdr->flags == VRNIC_SEND_FLAGS_INLINE && hdr->num_sge == 0);
	CHECK(le32toh(hdr->inline_len) == 48);
	CHECK(memcmp(hdr->imm_data, "\0\0\0\0", 4) == 0);
	CHECK(memcmp(wqe + 32, want_av, sizeof(want_av)) == 0);
	CHECK(memcmp(wqe + VRNIC_UD_PAYLOAD_OFFSET, data, 48) == 0);

	/* One CQE of the second WQE retires both. */
	dev_cqe(UD_QPN, (START + 1) & 1, 0, 0, VRNIC_WC_STATUS_SUCCESS);
	CHECK(vrnic_poll_cq(&cq.ibv_cq, 1, &wc) == 1);
	CHECK(ud_qp.sq.ci == START + 2);

	sge.length = 49;
	CHECK(vrnic_post_send(&ud_qp.ibv_qp, &wr, &bad) == EINVAL);
	wr.send_flags = 0;
	wr.opcode = IBV_WR_RDMA_WRITE;
	CHECK(vrnic_post_send(&ud_qp.ibv_qp, &wr, &bad) == EINVAL);
	wr.opcode = IBV_WR_RDMA_READ;
	CHECK(vrnic_post_send(&ud_qp.ibv_qp, &wr, &bad) == EINVAL);
	wr.opcode = IBV_WR_SEND;
	wr.wr.ud.ah = NULL;
	CHECK(vrnic_post_send(&ud_qp.ibv_qp, &wr, &bad) == EINVAL);
	CHECK(bad == &wr && ud_qp.sq.pi == START + 2);

	/* A datagram receive completion. */
	{
		struct ibv_sge rsge = { .addr = 0x6000, .length = 4136,
					.lkey = 12 };
		struct ibv_recv_wr rwr = { .wr_id = 66, .sg_list = &rsge,
					   .num_sge = 1 };
		struct ibv_recv_wr *rbad = NULL;

		CHECK(vrnic_post_recv(&ud_qp.ibv_qp, &rwr, &rbad) == 0);
	}
	cqe = dev_cqe_fill(UD_QPN, START & 1, 66, VRNIC_CQE_FLAG_RECV, 0);
	cqe->src_qp = htole32(0x10203);
	cqe->slid = htole16(0x22);
	cqe->sl = 4;
	cqe->pkey_index = htole16(0);
	cqe->network_type = VRNIC_NETWORK_TYPE_IPV4;
	cqe->wc_flags = VRNIC_WC_FLAGS_GRH;
	dev_cqe_publish(cqe);
	CHECK(vrnic_poll_cq(&cq.ibv_cq, 1, &wc) == 1);
	CHECK(wc.wr_id == 66 && wc.opcode == IBV_WC_RECV);
	CHECK(wc.qp_num == UD_QPN && wc.src_qp == 0x10203);
	CHECK(wc.slid == 0x22 && wc.sl == 4 && wc.pkey_index == 0);
	CHECK(wc.wc_flags == IBV_WC_GRH);
	CHECK(ud_qp.rq.ci == START + 1);
}

/* Post @wr alone to @q, expecting @want; on success the WQE is returned. */
static void *post_one(struct vrnic_qp *q, struct ibv_send_wr *wr, int want)
{
	struct ibv_send_wr *bad = NULL;
	uint32_t pi = q->sq.pi;
	int ret = vrnic_post_send(&q->ibv_qp, wr, &bad);

	CHECK(ret == want);
	if (ret) {
		CHECK(bad == wr && q->sq.pi == pi);
		return NULL;
	}
	CHECK(q->sq.pi == pi + 1 && db_read(q->sq.db) == pi + 1);
	return vrnic_wqe(&q->sq, pi);
}

/* Poll exactly one completion. */
static struct ibv_wc poll_one(void)
{
	struct ibv_wc wc = {};

	CHECK(vrnic_poll_cq(&cq.ibv_cq, 1, &wc) == 1);
	return wc;
}

/* A CQE at @slot of QP @qpn with one field made hostile by @edit. */
static void dev_cqe_edited(uint32_t qpn, uint16_t slot,
			   void (*edit)(struct vrnic_cqe *cqe))
{
	struct vrnic_cqe *cqe = dev_cqe_fill(qpn, slot, 0x61, 0, 0);

	if (edit)
		edit(cqe);
	dev_cqe_publish(cqe);
}

static void bad_status(struct vrnic_cqe *cqe)
{
	cqe->status = 0x40;
}

static void bad_opcode(struct vrnic_cqe *cqe)
{
	cqe->opcode = 0x7f;
}

static void bad_flags(struct vrnic_cqe *cqe)
{
	cqe->flags |= 0x10;
}

static void bad_wc_flags(struct vrnic_cqe *cqe)
{
	cqe->wc_flags |= 0x20;
}

static void bad_len(struct vrnic_cqe *cqe)
{
	cqe->byte_len = htole32(0x80000001);
}

/*
 * CQEs no device may write (the hostile-device mode writes them): an
 * unknown status, opcode or flag bit, a byte_len beyond any message, a
 * number no QP can have, a QP whose send CQ is another, a slot with nothing
 * posted. Each is an error completion that retires nothing; the real CQE
 * then retires the WQE.
 */
static void test_cqe_hostile_values(void)
{
	struct ibv_sge sge = { .addr = 0x1000, .length = 8, .lkey = 1 };
	struct ibv_send_wr wr = { .wr_id = 0x61, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED };
	void (*edits[])(struct vrnic_cqe *) = { bad_status, bad_opcode,
						bad_flags, bad_wc_flags,
						bad_len };
	struct vrnic_cq other = {};
	uint32_t ci;
	uint16_t slot;
	struct ibv_wc wc;
	unsigned int i;

	CHECK(post_one(&qp, &wr, 0) != NULL);
	ci = qp.sq.ci;
	slot = (qp.sq.pi - 1) & 3;
	for (i = 0; i < sizeof(edits) / sizeof(edits[0]); i++) {
		dev_cqe_edited(QPN, slot, edits[i]);
		wc = poll_one();
		CHECK(wc.status == IBV_WC_GENERAL_ERR && qp.sq.ci == ci);
		CHECK(wc.opcode == IBV_WC_SEND && wc.wc_flags == 0);
	}
	dev_cqe_edited(1, slot, NULL);
	CHECK(poll_one().status == IBV_WC_GENERAL_ERR && qp.sq.ci == ci);
	dev_cqe_edited(VRNIC_QPN_MAX + 1, slot, NULL);
	CHECK(poll_one().status == IBV_WC_GENERAL_ERR && qp.sq.ci == ci);
	qp.ibv_qp.send_cq = &other.ibv_cq;
	dev_cqe_edited(QPN, slot, NULL);
	CHECK(poll_one().status == IBV_WC_GENERAL_ERR && qp.sq.ci == ci);
	qp.ibv_qp.send_cq = &cq.ibv_cq;
	dev_cqe_edited(QPN, (slot + 1) & 3, NULL);
	CHECK(poll_one().status == IBV_WC_GENERAL_ERR && qp.sq.ci == ci);

	dev_cqe_edited(QPN, slot, NULL);
	wc = poll_one();
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 0x61);
	CHECK(qp.sq.ci == qp.sq.pi);
}

/* Which opcodes each QP type posts (SPEC "Datagrams", "UC", "Atomics"). */
static void test_opcodes_by_qp_type(void)
{
	static const struct {
		unsigned int opcode;
		bool rc, uc, ud;
	} cases[] = {
		{ IBV_WR_RDMA_WRITE, true, true, false },
		{ IBV_WR_RDMA_WRITE_WITH_IMM, true, true, false },
		{ IBV_WR_SEND, true, true, true },
		{ IBV_WR_SEND_WITH_IMM, true, true, true },
		{ IBV_WR_RDMA_READ, true, false, false },
		{ IBV_WR_ATOMIC_CMP_AND_SWP, true, false, false },
		{ IBV_WR_ATOMIC_FETCH_AND_ADD, true, false, false },
		{ IBV_WR_LOCAL_INV, true, true, false },
		{ IBV_WR_BIND_MW, true, true, false },
		{ IBV_WR_SEND_WITH_INV, true, true, false },
		{ IBV_WR_TSO, false, false, false },
		{ IBV_WR_ATOMIC_WRITE, false, false, false },
		{ VRNIC_WR_OPCODE_REG_MR, false, false, false },
		{ 200, false, false, false },
	};
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		CHECK(vrnic_qp_allows(&qp, cases[i].opcode) == cases[i].rc);
		CHECK(vrnic_qp_allows(&uc_qp, cases[i].opcode) == cases[i].uc);
		CHECK(vrnic_qp_allows(&ud_qp, cases[i].opcode) == cases[i].ud);
	}
}

/*
 * Atomics: header (remote_addr, rkey, one SGE), atomic_seg at 32, the SGE
 * at 48; FETCH_AND_ADD carries no swap value; anything but one 8-byte SGE,
 * inline, or a non-RC QP is refused. The CQE reports COMP_SWAP, 8 bytes.
 */
static void test_atomics(void)
{
	static const uint8_t want[64] = {
		[0] = 5,			/* ATOMIC_CMP_AND_SWP */
		[1] = 0x02,			/* SIGNALED */
		[2] = 1,			/* num_sge */
		[8] = 0x31, 0, 0, 0, 0, 0, 0, 0,	/* wr_id */
		[16] = 0x08, 0x10, 0, 0, 0, 0, 0, 0,	/* remote_addr 0x1008 */
		[24] = 0x05, 0x04, 0, 0,	/* rkey 0x405 */
		[32] = 0x0a, 0, 0, 0, 0, 0, 0, 0,	/* compare 10 */
		[40] = 0x0b, 0, 0, 0, 0, 0, 0, 0,	/* swap 11 */
		[48] = 0x00, 0x70, 0, 0, 0, 0, 0, 0,	/* addr 0x7000 */
		[56] = 0x08, 0, 0, 0,		/* length 8 */
		[60] = 0x06, 0, 0, 0,		/* lkey 6 */
	};
	struct ibv_sge sge = { .addr = 0x7000, .length = 8, .lkey = 6 };
	struct ibv_sge two[2] = { sge, sge };
	struct ibv_send_wr wr = {
		.wr_id = 0x31, .sg_list = &sge, .num_sge = 1,
		.opcode = IBV_WR_ATOMIC_CMP_AND_SWP,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.atomic = { .remote_addr = 0x1008, .compare_add = 10,
			       .swap = 11, .rkey = 0x405 },
	};
	struct vrnic_cqe *cqe;
	struct ibv_wc wc;
	uint8_t *wqe;

	memset(vrnic_wqe(&qp.sq, qp.sq.pi), 0xee, 64);
	wqe = post_one(&qp, &wr, 0);
	if (wqe)
		check_bytes("CMP_AND_SWP WQE", wqe, want, sizeof(want));

	wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
	wqe = post_one(&qp, &wr, 0);
	if (wqe) {
		CHECK(wqe[0] == VRNIC_WR_OPCODE_ATOMIC_FETCH_AND_ADD);
		CHECK(le64toh(((struct vrnic_atomic_seg *)(wqe + 32))->swap) == 0);
		check_bytes("FETCH_AND_ADD operand", wqe + 32, want + 32, 8);
		check_bytes("FETCH_AND_ADD SGE", wqe + 48, want + 48, 16);
	}

	sge.length = 4;
	post_one(&qp, &wr, EINVAL);
	sge.length = 8;
	wr.sg_list = two;
	wr.num_sge = 2;
	post_one(&qp, &wr, EINVAL);
	wr.num_sge = 0;
	post_one(&qp, &wr, EINVAL);
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.send_flags |= IBV_SEND_INLINE;
	post_one(&qp, &wr, EINVAL);
	wr.send_flags = IBV_SEND_SIGNALED;
	post_one(&uc_qp, &wr, EINVAL);
	post_one(&ud_qp, &wr, EINVAL);

	/* The device answers the two WQEs in order. */
	cqe = dev_cqe_fill(QPN, (qp.sq.pi - 2) & 3, 0x31, 0, 0);
	cqe->opcode = VRNIC_WC_OPCODE_COMP_SWAP;
	cqe->byte_len = htole32(8);
	cqe->wc_flags = 0;
	dev_cqe_publish(cqe);
	cqe = dev_cqe_fill(QPN, (qp.sq.pi - 1) & 3, 0x31, 0, 0);
	cqe->opcode = VRNIC_WC_OPCODE_FETCH_ADD;
	cqe->byte_len = htole32(8);
	cqe->wc_flags = 0;
	dev_cqe_publish(cqe);
	wc = poll_one();
	CHECK(wc.opcode == IBV_WC_COMP_SWAP && wc.byte_len == 8);
	CHECK(wc.wc_flags == 0 && wc.status == IBV_WC_SUCCESS);
	wc = poll_one();
	CHECK(wc.opcode == IBV_WC_FETCH_ADD && wc.byte_len == 8);
	CHECK(qp.sq.ci == qp.sq.pi);
}

/* UC: SENDs and WRITEs (with immediate), laid out as on RC; no READ. */
static void test_uc_send_and_write(void)
{
	static const uint8_t want[64] = {
		[0] = 1,			/* RDMA_WRITE_WITH_IMM */
		[1] = 0x02,			/* SIGNALED */
		[2] = 1,			/* num_sge */
		[4] = 0xa1, 0xb2, 0xc3, 0xd4,	/* imm_data */
		[8] = 0x41, 0, 0, 0, 0, 0, 0, 0,	/* wr_id */
		[16] = 0x00, 0x90, 0, 0, 0, 0, 0, 0,	/* remote_addr 0x9000 */
		[24] = 0x22, 0x02, 0, 0,	/* rkey 0x222 */
		[32] = 0x00, 0x80, 0, 0, 0, 0, 0, 0,	/* sge addr 0x8000 */
		[40] = 0x00, 0x01, 0, 0,	/* length 256 */
		[44] = 0x07, 0, 0, 0,		/* lkey 7 */
		[48] = 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	};
	struct ibv_sge sge = { .addr = 0x8000, .length = 256, .lkey = 7 };
	struct ibv_send_wr wr = {
		.wr_id = 0x41, .sg_list = &sge, .num_sge = 1,
		.opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
		.send_flags = IBV_SEND_SIGNALED,
		.imm_data = htobe32(0xa1b2c3d4),
		.wr.rdma = { .remote_addr = 0x9000, .rkey = 0x222 },
	};
	uint8_t *wqe;

	wqe = post_one(&uc_qp, &wr, 0);
	if (wqe)
		check_bytes("UC WRITE_WITH_IMM WQE", wqe, want, 48);
	CHECK(*slot_flag(10) == 1);

	wr.opcode = IBV_WR_SEND;
	wqe = post_one(&uc_qp, &wr, 0);
	if (wqe) {
		CHECK(wqe[0] == VRNIC_WR_OPCODE_SEND);
		CHECK(memcmp(wqe + 4, "\0\0\0\0", 4) == 0);	/* no imm */
		check_bytes("UC SEND SGE", wqe + 32, want + 32, 16);
		CHECK(memcmp(wqe + 16, "\0\0\0\0\0\0\0\0\0\0\0\0", 12) == 0);
	}
	wr.opcode = IBV_WR_RDMA_READ;
	post_one(&uc_qp, &wr, EINVAL);

	dev_cqe(UC_QPN, (uc_qp.sq.pi - 1) & 3, 0x41, 0, 0);
	CHECK(poll_one().qp_num == UC_QPN);
	CHECK(uc_qp.sq.ci == uc_qp.sq.pi);
}

/*
 * LOCAL_INV is a header naming the key; SEND_WITH_INV is a SEND whose rkey
 * the target invalidates; the target's CQE carries WITH_INV and the key
 * (little-endian in imm_data), reported as invalidated_rkey.
 */
static void test_invalidation(void)
{
	static const uint8_t want_inv[64] = {
		[0] = 7,			/* LOCAL_INV */
		[1] = 0x03,			/* SIGNALED | FENCE */
		[8] = 0x51, 0, 0, 0, 0, 0, 0, 0,	/* wr_id */
		[24] = 0x12, 0x34, 0x56, 0x00,	/* rkey 0x563412 */
	};
	static const uint8_t want_send_inv[48] = {
		[0] = 9,			/* SEND_WITH_INV */
		[1] = 0x02,
		[2] = 1,
		[8] = 0x52, 0, 0, 0, 0, 0, 0, 0,
		[24] = 0x01, 0x09, 0, 0,	/* rkey 0x901 */
		[32] = 0x00, 0x30, 0, 0, 0, 0, 0, 0,
		[40] = 0x10, 0, 0, 0,
		[44] = 0x02, 0, 0, 0,
	};
	struct ibv_sge sge = { .addr = 0x3000, .length = 16, .lkey = 2 };
	struct ibv_send_wr wr = {
		.wr_id = 0x51, .sg_list = &sge, .num_sge = 1,
		.opcode = IBV_WR_LOCAL_INV,
		.send_flags = IBV_SEND_SIGNALED | IBV_SEND_FENCE,
		.invalidate_rkey = 0x563412,
	};
	struct vrnic_cqe *cqe;
	struct ibv_wc wc;
	uint8_t *wqe;

	memset(vrnic_wqe(&qp.sq, qp.sq.pi), 0xee, 64);
	wqe = post_one(&qp, &wr, 0);	/* the SGE is no part of it */
	if (wqe)
		check_bytes("LOCAL_INV WQE", wqe, want_inv, 32);
	wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	post_one(&qp, &wr, EINVAL);

	wr = (struct ibv_send_wr){
		.wr_id = 0x52, .sg_list = &sge, .num_sge = 1,
		.opcode = IBV_WR_SEND_WITH_INV,
		.send_flags = IBV_SEND_SIGNALED, .invalidate_rkey = 0x901,
	};
	wqe = post_one(&uc_qp, &wr, 0);
	if (wqe)
		check_bytes("SEND_WITH_INV WQE", wqe, want_send_inv, 48);
	post_one(&ud_qp, &wr, EINVAL);

	dev_cqe(QPN, (qp.sq.pi - 1) & 3, 0x51, 0, 0);
	dev_cqe(UC_QPN, (uc_qp.sq.pi - 1) & 3, 0x52, 0, 0);
	poll_one();
	poll_one();
	CHECK(qp.sq.ci == qp.sq.pi && uc_qp.sq.ci == uc_qp.sq.pi);

	/* A receive completed by SEND_WITH_INV. */
	{
		struct ibv_recv_wr rwr = { .wr_id = 0x53, .sg_list = &sge,
					   .num_sge = 1 };
		struct ibv_recv_wr *rbad;

		CHECK(vrnic_post_recv(&uc_qp.ibv_qp, &rwr, &rbad) == 0);
	}
	cqe = dev_cqe_fill(UC_QPN, (uc_qp.rq.pi - 1) & 3, 0x53,
			   VRNIC_CQE_FLAG_RECV, 0);
	memcpy(cqe->imm_data, "\x01\x09\x00\x00", 4);
	cqe->wc_flags = VRNIC_WC_FLAGS_WITH_INV;
	dev_cqe_publish(cqe);
	wc = poll_one();
	CHECK(wc.opcode == IBV_WC_RECV && wc.wr_id == 0x53);
	CHECK(wc.wc_flags == IBV_WC_WITH_INV);
	CHECK(wc.invalidated_rkey == 0x901);
	CHECK(uc_qp.rq.ci == uc_qp.rq.pi);
}

/*
 * Memory windows: IBV_WR_BIND_MW (type 2) with the caller's new key;
 * ibv_bind_mw (type 1) with the next variant of mw->rkey, which it then
 * takes. Only the window's REMOTE_* bits are sent.
 */
static void test_bind_mw(void)
{
	static const uint8_t want[64] = {
		[0] = 8,			/* BIND_MW */
		[1] = 0x02,			/* SIGNALED */
		[8] = 0x61, 0, 0, 0, 0, 0, 0, 0,	/* wr_id */
		[24] = 0x2a, 0x07, 0, 0,	/* rkey 0x72a */
		[32] = 0x00, 0x40, 0, 0, 0, 0, 0, 0,	/* addr 0x4000 */
		[40] = 0x00, 0x01, 0, 0, 0, 0, 0, 0,	/* length 256 */
		[48] = 0x10, 0x03, 0, 0,	/* mr_lkey 0x310 */
		[52] = 0x02, 0, 0, 0,		/* REMOTE_WRITE */
		[56] = 0, 0, 0, 0, 0, 0, 0, 0,	/* reserved0 */
	};
	struct ibv_mr mr = { .lkey = 0x310, .rkey = 0x310 };
	struct ibv_mw mw2 = { .rkey = 0x729, .type = IBV_MW_TYPE_2 };
	struct ibv_mw mw1 = { .rkey = 0x8ff, .type = IBV_MW_TYPE_1 };
	struct ibv_send_wr wr = {
		.wr_id = 0x61, .opcode = IBV_WR_BIND_MW,
		.send_flags = IBV_SEND_SIGNALED,
		.bind_mw = { .mw = &mw2, .rkey = 0x72a, .bind_info = {
			.mr = &mr, .addr = 0x4000, .length = 256,
			.mw_access_flags = IBV_ACCESS_REMOTE_WRITE |
					   IBV_ACCESS_LOCAL_WRITE } },
	};
	struct ibv_mw_bind bind = {
		.wr_id = 0x62, .send_flags = IBV_SEND_SIGNALED,
		.bind_info = { .mr = &mr, .addr = 0x4000, .length = 16,
			       .mw_access_flags = IBV_ACCESS_REMOTE_READ },
	};
	struct vrnic_bind_mw_seg *seg;
	struct vrnic_send_wqe_header *hdr;
	struct vrnic_cqe *cqe;
	uint8_t *wqe;
	uint32_t pi;

	memset(vrnic_wqe(&qp.sq, qp.sq.pi), 0xee, 64);
	wqe = post_one(&qp, &wr, 0);
	if (wqe)
		check_bytes("BIND_MW WQE", wqe, want, sizeof(want));

	wr.bind_mw.rkey = 0x82a;	/* another window's index */
	post_one(&qp, &wr, EINVAL);
	wr.bind_mw.rkey = 0x72a;
	wr.bind_mw.bind_info.mw_access_flags |= IBV_ACCESS_ZERO_BASED;
	post_one(&qp, &wr, EINVAL);
	wr.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_MW_BIND;
	post_one(&qp, &wr, EINVAL);
	wr.bind_mw.bind_info.mw_access_flags = 0;
	wr.bind_mw.bind_info.mr = NULL;	/* a range without an MR */
	post_one(&qp, &wr, EINVAL);
	post_one(&ud_qp, &wr, EINVAL);

	/* Type 1: variant 0xff wraps to 0x00 within the index. */
	pi = qp.sq.pi;
	CHECK(vrnic_bind_mw(&qp.ibv_qp, &mw1, &bind) == 0);
	CHECK(mw1.rkey == 0x800 && qp.sq.pi == pi + 1);
	hdr = vrnic_wqe(&qp.sq, pi);
	seg = (struct vrnic_bind_mw_seg *)(hdr + 1);
	CHECK(hdr->opcode == VRNIC_WR_OPCODE_BIND_MW);
	CHECK(le32toh(hdr->rkey) == 0x800 && le64toh(hdr->wr_id) == 0x62);
	CHECK(le64toh(seg->addr) == 0x4000 && le64toh(seg->length) == 16);
	CHECK(le32toh(seg->mr_lkey) == 0x310);
	CHECK(le32toh(seg->access) == VRNIC_ACCESS_REMOTE_READ);

	/* An unbind: length 0, no MR. */
	bind.bind_info = (struct ibv_mw_bind_info){};
	CHECK(vrnic_bind_mw(&qp.ibv_qp, &mw1, &bind) == 0);
	CHECK(mw1.rkey == 0x801);
	seg = (struct vrnic_bind_mw_seg *)((uint8_t *)vrnic_wqe(&qp.sq, pi + 1) +
					   32);
	CHECK(seg->length == 0 && seg->mr_lkey == 0 && seg->access == 0);

	/* A third fills the queue (4); a fourth leaves the key alone. */
	CHECK(vrnic_bind_mw(&qp.ibv_qp, &mw1, &bind) == 0);
	CHECK(mw1.rkey == 0x802);
	CHECK(vrnic_bind_mw(&qp.ibv_qp, &mw1, &bind) == ENOMEM);
	CHECK(mw1.rkey == 0x802);

	cqe = dev_cqe_fill(QPN, (qp.sq.pi - 1) & 3, 0x62, 0, 0);
	cqe->opcode = VRNIC_WC_OPCODE_BIND_MW;
	cqe->wc_flags = 0;
	dev_cqe_publish(cqe);
	CHECK(poll_one().opcode == IBV_WC_BIND_MW);
	CHECK(qp.sq.ci == qp.sq.pi);
}

/*
 * SRQ: receives go to the SRQ ring at pi mod depth with one store of the
 * producer index (no flag, no kick); a slot is busy until the CQE naming it
 * is polled, so completions out of order leave the next slot busy (ENOMEM)
 * though others are free. The QP itself refuses post_recv.
 */
static void test_srq(void)
{
	static const uint8_t want[32] = {
		[0] = 0x03, 0, 0, 0, 0, 0, 0xaa, 0,	/* wr_id */
		[8] = 1,				/* num_sge */
		[16] = 0x00, 0xa0, 0, 0, 0, 0, 0, 0,	/* addr 0xa000 */
		[24] = 0x00, 0x02, 0, 0,		/* length 512 */
		[28] = 0x0c, 0, 0, 0,			/* lkey 12 */
	};
	struct ibv_sge sge = { .addr = 0xa000, .length = 512, .lkey = 12 };
	struct ibv_recv_wr wr[5], *bad = NULL;
	struct ibv_sge two[2] = { sge, sge };
	struct ibv_wc wc;
	int i;

	for (i = 0; i < 5; i++)
		wr[i] = (struct ibv_recv_wr){
			.wr_id = 0xaa000000000000ull + i, .sg_list = &sge,
			.num_sge = 1, .next = i < 4 ? &wr[i + 1] : NULL };
	wr[3].wr_id = 0xaa000000000003ull;

	*kick() = 0;
	*slot_flag(SRQ_SLOT) = 0;
	*page_flag() = 0;
	memset(srq.ring, 0xee, 4 * 32);
	CHECK(vrnic_post_srq_recv(&srq.ibv_srq, wr, &bad) == ENOMEM);
	CHECK(bad == &wr[4] && srq.pi == START + 4);
	CHECK(db_read(srq.db) == START + 4);
	CHECK(db_read(kick()) == 0 && *slot_flag(SRQ_SLOT) == 0 &&
	      db_read(page_flag()) == 0);
	check_bytes("SRQ WQE", vrnic_srq_wqe(&srq, START + 3), want,
		    sizeof(want));

	/* A QP with an SRQ has no receive queue of its own. */
	CHECK(vrnic_post_recv(&srq_qp.ibv_qp, &wr[4], &bad) == EINVAL);
	CHECK(bad == &wr[4]);

	/* Slot 2 of 0..3 (free-running START+2..) completes first. */
	dev_srq_cqe(SRQ_QPN, SRQN, (START + 3) & 3, 0xaa000000000003ull);
	wc = poll_one();
	CHECK(wc.wr_id == 0xaa000000000003ull && wc.qp_num == SRQ_QPN);
	CHECK(wc.opcode == IBV_WC_RECV);
	CHECK(srq.busy[(START + 3) & 3] == 0 && srq.busy[START & 3] == 1);

	/* The next slot, (START + 4) & 3 = START & 3, is still busy. */
	wr[4].next = NULL;
	CHECK(vrnic_post_srq_recv(&srq.ibv_srq, &wr[4], &bad) == ENOMEM);
	CHECK(bad == &wr[4] && db_read(srq.db) == START + 4);

	dev_srq_cqe(SRQ_QPN, SRQN, START & 3, 0xaa000000000000ull);
	CHECK(poll_one().wr_id == 0xaa000000000000ull);
	CHECK(vrnic_post_srq_recv(&srq.ibv_srq, &wr[4], &bad) == 0);
	CHECK(db_read(srq.db) == START + 5);
	CHECK(le64toh(((struct vrnic_recv_wqe_header *)
		       vrnic_srq_wqe(&srq, START + 4))->wr_id) ==
	      0xaa000000000004ull);

	/* A dropped CQE (QP reset or destroyed) frees its slot too. */
	dev_srq_cqe(SRQ_QPN, SRQN, (START + 1) & 3, 1);
	pthread_spin_lock(&cq.lock);
	vrnic_cq_clean(&cq, &srq_qp);
	pthread_spin_unlock(&cq.lock);
	CHECK(srq.busy[(START + 1) & 3] == 0);
	CHECK(vrnic_poll_cq(&cq.ibv_cq, 1, &wc) == 0);
	CHECK(srq.busy[(START + 2) & 3] == 1 && srq.busy[START & 3] == 1);

	/* That slot is next: too many SGEs for the SRQ's WQE are refused. */
	wr[4].sg_list = two;
	wr[4].num_sge = 2;
	CHECK(vrnic_post_srq_recv(&srq.ibv_srq, &wr[4], &bad) == EINVAL);
	CHECK(srq.pi == START + 5 && srq.busy[(START + 1) & 3] == 0);

	/* The QP's sends still retire its own send queue. */
	{
		struct ibv_send_wr swr = { .wr_id = 9, .sg_list = &sge,
					   .num_sge = 1,
					   .opcode = IBV_WR_SEND };

		post_one(&srq_qp, &swr, 0);
		dev_cqe(SRQ_QPN, (srq_qp.sq.pi - 1) & 3, 9, 0, 0);
		CHECK(poll_one().wr_id == 9);
		CHECK(srq_qp.sq.ci == srq_qp.sq.pi);
		CHECK(srq.busy[(START + 2) & 3] == 1);
	}
}

/* SRQ and SRQ-QP geometry (README "Decisions"). */
static void test_srq_sizes(void)
{
	struct vrnic_context lim = { .max_sge = 16, .max_inline = 256,
				     .max_qp_wr = 4096 };
	struct ibv_srq_attr req = { .max_wr = 500, .max_sge = 1 };
	struct ibv_qp_cap cap = { .max_send_wr = 8, .max_recv_wr = 99999,
				  .max_send_sge = 1, .max_recv_sge = 99 };
	struct vrnic_srq s = {};
	struct vrnic_qp q = { .srq = &s };

	CHECK(vrnic_size_srq(&lim, &s, &req) == 0);
	CHECK(s.depth == 512 && s.wqe_shift == 5 && s.max_sge == 1);
	req.max_sge = 0;	/* the device needs one SGE: still 32 bytes */
	CHECK(vrnic_size_srq(&lim, &s, &req) == 0 && s.max_sge == 1);
	req = (struct ibv_srq_attr){ .max_wr = 1, .max_sge = 3 };
	CHECK(vrnic_size_srq(&lim, &s, &req) == 0);
	CHECK(s.depth == 2 && s.wqe_shift == 6 && s.max_sge == 3);
	req.max_wr = 4097;
	CHECK(vrnic_size_srq(&lim, &s, &req) == EINVAL);
	req = (struct ibv_srq_attr){ .max_wr = 4, .max_sge = 17 };
	CHECK(vrnic_size_srq(&lim, &s, &req) == EINVAL);

	/* The receive caps of a QP with an SRQ are ignored and become 0. */
	CHECK(vrnic_size_queues(&lim, &q, &cap) == 0);
	CHECK(q.sq.depth == 8 && q.rq.depth == 0 && q.rq.max_sge == 0);
}

/* Queue geometry (README "Decisions"): UD send WQEs hold a ud_av. */
static void test_queue_sizes(void)
{
	struct vrnic_context lim = { .max_sge = 16, .max_inline = 256,
				     .max_qp_wr = 4096 };
	struct ibv_qp_cap cap = { .max_send_wr = 1, .max_recv_wr = 500,
				  .max_send_sge = 1, .max_recv_sge = 1 };
	struct vrnic_qp q = {};

	/* ibv_ud_pingpong: the smallest UD WQE, 128 bytes: 3 SGEs or 48 B. */
	q.datagram = true;
	CHECK(vrnic_size_queues(&lim, &q, &cap) == 0);
	CHECK(q.sq.depth == 2 && q.rq.depth == 512);
	CHECK(q.sq.wqe_shift == VRNIC_UD_SEND_WQE_SHIFT_MIN);
	CHECK(q.sq.max_sge == 3 && q.max_inline == 48);
	CHECK(q.rq.wqe_shift == 5 && q.rq.max_sge == 1);

	/* rsockets' datagram QP: 64 inline bytes after the 80-byte head. */
	cap.max_inline_data = 64;
	cap.max_recv_sge = 2;
	CHECK(vrnic_size_queues(&lim, &q, &cap) == 0);
	CHECK(q.sq.wqe_shift == 8 && q.max_inline == 176 && q.sq.max_sge == 11);
	CHECK(q.rq.wqe_shift == 6 && q.rq.max_sge == 3);

	/* rsockets' stream QP (RC): 2 SGEs, 64 inline -> 128 bytes, 96 inline. */
	q.datagram = false;
	cap = (struct ibv_qp_cap){ .max_send_wr = 384, .max_recv_wr = 384,
				   .max_send_sge = 2, .max_recv_sge = 1,
				   .max_inline_data = 64 };
	CHECK(vrnic_size_queues(&lim, &q, &cap) == 0);
	CHECK(q.sq.depth == 512 && q.sq.wqe_shift == 7);
	CHECK(q.max_inline == 96 && q.sq.max_sge == 6);

	/* Beyond the device's inline limit. */
	cap.max_inline_data = 257;
	CHECK(vrnic_size_queues(&lim, &q, &cap) == EINVAL);
}

/* Whether every busy byte of @s is as in @want. */
static bool busy_is(const struct vrnic_srq *s, const uint8_t *want)
{
	return memcmp(s->busy, want, s->depth) == 0;
}

/*
 * SRQ completions the provider cannot have caused (unknown srqn, one wider
 * than 24 bits, a slot beyond the depth, a slot with no WQE out, FLAG_SRQ
 * on a send) are error completions that free nothing; and an SRQ
 * completion naming one of our QPs never retires that QP's receive queue.
 */
static void test_srq_cqe_hostile(void)
{
	uint8_t srq_busy[4], xsrq_busy[2];
	uint32_t rq_ci = qp.rq.ci;
	struct vrnic_cqe *cqe;
	struct ibv_wc wc;

	memcpy(srq_busy, srq.busy, sizeof(srq_busy));
	memcpy(xsrq_busy, xsrq.busy, sizeof(xsrq_busy));
	CHECK(xsrq_busy[0] == 0);	/* nothing posted to the XRC SRQ yet */

	dev_srq_cqe(SRQ_QPN, 0x999, 0, 0x51);
	wc = poll_one();
	CHECK(wc.wr_id == 0x51 && wc.status == IBV_WC_GENERAL_ERR);
	dev_srq_cqe(SRQ_QPN, SRQN | 1u << 24, 0, 0x52);
	CHECK(poll_one().status == IBV_WC_GENERAL_ERR);
	dev_srq_cqe(SRQ_QPN, SRQN, 4, 0x53);
	CHECK(poll_one().status == IBV_WC_GENERAL_ERR);
	dev_srq_cqe(SRQ_QPN, SRQN, 0xffff, 0x54);
	CHECK(poll_one().status == IBV_WC_GENERAL_ERR);
	dev_srq_cqe(TGT_QPN, XSRQN, 0, 0x55);
	CHECK(poll_one().status == IBV_WC_GENERAL_ERR);
	cqe = dev_cqe_fill(SRQ_QPN, 0, 0x56, VRNIC_CQE_FLAG_SRQ, 0);
	cqe->srqn = htole32(SRQN);
	dev_cqe_publish(cqe);
	CHECK(poll_one().status == IBV_WC_GENERAL_ERR);
	CHECK(busy_is(&srq, srq_busy) && busy_is(&xsrq, xsrq_busy));

	/* Our RC QP with a receive WQE out: an SRQ CQE naming it frees an
	 * SRQ slot (here: none, so an error), not its receive WQE. */
	{
		struct ibv_sge sge = { .addr = 0x1000, .length = 8, .lkey = 1 };
		struct ibv_recv_wr rwr = { .wr_id = 0x57, .sg_list = &sge,
					   .num_sge = 1 };
		struct ibv_recv_wr *bad;

		CHECK(vrnic_post_recv(&qp.ibv_qp, &rwr, &bad) == 0);
		dev_srq_cqe(QPN, XSRQN, qp.rq.pi - 1, 0x57);
		CHECK(poll_one().status == IBV_WC_GENERAL_ERR);
		CHECK(qp.rq.ci == rq_ci);
		dev_cqe(QPN, (qp.rq.pi - 1) & 3, 0x57, VRNIC_CQE_FLAG_RECV, 0);
		wc = poll_one();
		CHECK(wc.status == IBV_WC_SUCCESS && qp.rq.ci == qp.rq.pi);
	}
	CHECK(db_read(cq.db_ci) == dev_cq_pi);
}

/*
 * An XRC SRQ: its completions name the kernel's TGT QP (not ours) and
 * free the slot they name; a CQ clean by SRQ number (the SRQ destroyed)
 * frees and drops them.
 */
static void test_xrc_srq_completions(void)
{
	struct ibv_sge sge = { .addr = 0xb000, .length = 64, .lkey = 5 };
	struct ibv_recv_wr wr[3], *bad = NULL;
	struct ibv_wc wc;
	int i;

	for (i = 0; i < 3; i++)
		wr[i] = (struct ibv_recv_wr){ .wr_id = 0xc0 + i, .sg_list = &sge,
					      .num_sge = 1,
					      .next = i < 2 ? &wr[i + 1] : NULL };
	CHECK(vrnic_post_srq_recv(&xsrq.ibv_srq, wr, &bad) == ENOMEM);
	CHECK(bad == &wr[2] && db_read(xsrq.db) == START + 2);

	/* The second WQE (slot (START + 1) & 1) completes first. */
	dev_srq_cqe(TGT_QPN, XSRQN, (START + 1) & 1, 0xc1);
	wc = poll_one();
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 0xc1);
	CHECK(wc.qp_num == TGT_QPN && wc.opcode == IBV_WC_RECV);
	CHECK(xsrq.busy[(START + 1) & 1] == 0 && xsrq.busy[START & 1] == 1);
	wr[2].next = NULL;
	CHECK(vrnic_post_srq_recv(&xsrq.ibv_srq, &wr[2], &bad) == ENOMEM);

	/* The SRQ destroyed with a completion unpolled: dropped, freed. */
	dev_srq_cqe(TGT_QPN, XSRQN, START & 1, 0xc0);
	pthread_spin_lock(&cq.lock);
	vrnic_cq_clean_srq(&cq, XSRQN);
	pthread_spin_unlock(&cq.lock);
	CHECK(xsrq.busy[START & 1] == 0);
	CHECK(vrnic_poll_cq(&cq.ibv_cq, 1, &wc) == 0);
	CHECK(db_read(cq.db_ci) == dev_cq_pi);
}

/*
 * XRC_SEND (SPEC "XRC"): every send WQE is a header, the xrc_seg naming
 * the target SRQ at 32, the payload at XRC_PAYLOAD_OFFSET (48), written
 * byte for byte; its opcodes are RC's data and atomic requests; it has no
 * receive queue.
 */
static void test_xrc_send(void)
{
	static const uint8_t want[128] = {
		[0] = 0,		/* opcode RDMA_WRITE */
		[1] = 0x02,		/* SIGNALED */
		[2] = 2,		/* num_sge */
		[8] = 0x21,		/* wr_id */
		[16] = 0x00, 0x30, 0, 0, 0, 0, 0, 0,	/* remote_addr 0x3000 */
		[24] = 0x42, 0, 0, 0,			/* rkey 0x42 */
		[32] = 0xef, 0xcd, 0xab, 0x00,		/* remote_srqn */
		[48] = 0x00, 0x10, 0, 0, 0, 0, 0, 0,	/* sge[0] addr */
		[56] = 0x10, 0, 0, 0, 0x07, 0, 0, 0,	/* length 16, lkey 7 */
		[64] = 0x00, 0x20, 0, 0, 0, 0, 0, 0,	/* sge[1] addr */
		[72] = 0x20, 0, 0, 0, 0x08, 0, 0, 0,	/* length 32, lkey 8 */
		[80] = 0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee,
		       0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee,
		       0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee,
		       0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee,
		       0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee,
		       0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee,
	};
	struct ibv_sge sges[2] = { { .addr = 0x1000, .length = 16, .lkey = 7 },
				   { .addr = 0x2000, .length = 32, .lkey = 8 } };
	uint64_t orig;
	struct ibv_sge asge = { .addr = (uintptr_t)&orig, .length = 8,
				.lkey = 9 };
	struct ibv_send_wr wr = {
		.wr_id = 0x21, .opcode = IBV_WR_RDMA_WRITE, .sg_list = sges,
		.num_sge = 2, .send_flags = IBV_SEND_SIGNALED,
		.wr.rdma = { .remote_addr = 0x3000, .rkey = 0x42 },
		.qp_type.xrc.remote_srqn = 0xabcdef,
	};
	static const unsigned int refused[] = {
		IBV_WR_SEND_WITH_INV, IBV_WR_LOCAL_INV, IBV_WR_BIND_MW,
	};
	struct ibv_recv_wr rwr = { .wr_id = 1 }, *rbad;
	uint8_t data[81];
	uint8_t *wqe;
	unsigned int i;

	memset(xrc_qp.sq.ring, 0xee, 4 * 128);
	wqe = post_one(&xrc_qp, &wr, 0);
	if (wqe)
		check_bytes("XRC RDMA_WRITE WQE", wqe, want, sizeof(want));

	/* An atomic: atomic_seg at 48, its SGE at 64. */
	wr = (struct ibv_send_wr){
		.wr_id = 0x22, .opcode = IBV_WR_ATOMIC_CMP_AND_SWP,
		.sg_list = &asge, .num_sge = 1,
		.wr.atomic = { .remote_addr = 0x4008, .compare_add = 0x11,
			       .swap = 0x22, .rkey = 0x43 },
		.qp_type.xrc.remote_srqn = 0x123,
	};
	wqe = post_one(&xrc_qp, &wr, 0);
	if (wqe) {
		struct vrnic_xrc_seg *x = (void *)(wqe + 32);
		struct vrnic_atomic_seg *a = (void *)(wqe + 48);
		struct vrnic_sge *sg = (void *)(wqe + 64);

		CHECK(le32toh(x->remote_srqn) == 0x123 && !x->reserved0 &&
		      !x->reserved1);
		CHECK(le64toh(a->compare_add) == 0x11 &&
		      le64toh(a->swap) == 0x22);
		CHECK(le64toh(sg->addr) == (uintptr_t)&orig &&
		      le32toh(sg->length) == 8 && le32toh(sg->lkey) == 9);
	}

	/* Inline data fills the 80 bytes after the xrc_seg, no more. */
	memset(data, 0x3c, sizeof(data));
	sges[0] = (struct ibv_sge){ .addr = (uintptr_t)data, .length = 80 };
	wr = (struct ibv_send_wr){
		.wr_id = 0x23, .opcode = IBV_WR_SEND, .sg_list = sges,
		.num_sge = 1, .send_flags = IBV_SEND_INLINE,
		.qp_type.xrc.remote_srqn = 0x124,
	};
	wqe = post_one(&xrc_qp, &wr, 0);
	if (wqe) {
		CHECK(le32toh(((struct vrnic_xrc_seg *)(wqe + 32))->remote_srqn) ==
		      0x124);
		CHECK(memcmp(wqe + 48, data, 80) == 0);
	}
	sges[0].length = 81;
	post_one(&xrc_qp, &wr, EINVAL);

	for (i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		wr = (struct ibv_send_wr){ .opcode = refused[i] };
		post_one(&xrc_qp, &wr, EINVAL);
	}
	CHECK(vrnic_post_recv(&xrc_qp.ibv_qp, &rwr, &rbad) == EINVAL);

	/* Its send CQEs retire its send queue, as an RC QP's. */
	dev_cqe(XRC_QPN, (xrc_qp.sq.pi - 1) & 3, 0x23, 0, 0);
	CHECK(poll_one().wr_id == 0x23 && xrc_qp.sq.ci == xrc_qp.sq.pi);
}

/* The fake kernel of OPEN_QP and MODIFY_QP: the QP as libibverbs makes it. */
int ibv_cmd_open_qp(struct ibv_context *context, struct verbs_qp *qp,
		    int vqp_sz, struct ibv_qp_open_attr *attr,
		    struct ibv_open_qp *cmd, size_t cmd_size,
		    struct ib_uverbs_create_qp_resp *resp, size_t resp_size)
{
	qp->qp.context = context;
	qp->qp.qp_num = attr->qp_num;
	qp->qp.qp_type = attr->qp_type;
	return 0;
}

int ibv_cmd_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr,
		      int attr_mask, struct ibv_modify_qp *cmd, size_t cmd_size)
{
	return 0;
}

/*
 * An XRC_RECV QP (the kernel's, no rings, no slot), here one opened with
 * ibv_open_qp: posting fails, and moving it to RESET touches no doorbell
 * and no CQ. Only XRC_RECV QPs can be opened.
 */
static void test_xrc_recv_qp_posts_nothing(void)
{
	struct ibv_qp_open_attr oattr = {
		.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_TYPE |
			     IBV_QP_OPEN_ATTR_XRCD,
		.qp_num = TGT_QPN, .qp_type = IBV_QPT_XRC_RECV,
	};
	struct ibv_send_wr wr = { .opcode = IBV_WR_SEND }, *bad;
	struct ibv_recv_wr rwr = {}, *rbad;
	struct ibv_qp_attr attr = {};
	struct vrnic_qp *tgt;
	struct ibv_qp *ibqp;

	ibqp = vrnic_open_qp(&ctx->ibv_ctx.context, &oattr);
	CHECK(ibqp != NULL);
	if (!ibqp)
		return;
	tgt = to_vqp(ibqp);
	CHECK(ibqp->qp_num == TGT_QPN && vrnic_qp_is_xrc_tgt(tgt));
	CHECK(!tgt->sq.ring && !tgt->rq.ring && !tgt->sq.db);
	attr.qp_state = IBV_QPS_RTR;
	CHECK(vrnic_modify_qp(ibqp, &attr, IBV_QP_STATE) == 0);
	CHECK(vrnic_post_send(ibqp, &wr, &bad) == EINVAL && bad == &wr);
	CHECK(vrnic_post_recv(ibqp, &rwr, &rbad) == EINVAL && rbad == &rwr);
	attr.qp_state = IBV_QPS_RESET;
	CHECK(vrnic_modify_qp(ibqp, &attr, IBV_QP_STATE) == 0);
	free(tgt);

	oattr.qp_type = IBV_QPT_RC;
	errno = 0;
	CHECK(!vrnic_open_qp(&ctx->ibv_ctx.context, &oattr) && errno == EINVAL);
}

/*
 * The fake kernel and device of RESIZE_CQ (SPEC "Resizing a CQ"), linked
 * in place of libibverbs' command: checks the request, moves the CQEs
 * [ci, producer) to entries 0.. of the new ring with the first pass's
 * phase, continues there and zeroes the slot's ci word. resize_fail makes
 * it fail as the kernel would (after checking).
 */
static int resize_fail;
static int resize_calls;

int ibv_cmd_resize_cq(struct ibv_cq *ibcq, int cqe, struct ibv_resize_cq *cmd,
		      size_t cmd_size, struct ib_uverbs_resize_cq_resp *resp,
		      size_t resp_size)
{
	struct vrnic_resize_cq_cmd *drv = (void *)(cmd + 1);
	struct vrnic_cqe *ring;
	uint32_t ci, n, i, log2;

	resize_calls++;
	CHECK(ibcq == &cq.ibv_cq);
	CHECK(cmd_size == sizeof(*cmd) + sizeof(*drv));
	CHECK(drv->reserved0[0] == 0 && drv->reserved0[1] == 0 &&
	      drv->reserved0[2] == 0);
	ring = (void *)(uintptr_t)le64toh(drv->buf_addr);
	log2 = drv->depth_log2;
	ci = le32toh(drv->ci);
	CHECK(((uintptr_t)ring & 4095) == 0);
	CHECK(ci == cq.ci);
	n = dev_cq_pi - ci;
	if (n > (1u << dev_cq_log2))
		return EINVAL;		/* BAD_FIELD */
	if (n > (1u << log2))
		return EINVAL;		/* BAD_SIZE */
	for (i = 0; i < (1u << log2); i++)
		CHECK(ring[i].owner == 0);	/* zeroed by the provider */
	if (resize_fail)
		return resize_fail;
	for (i = 0; i < n; i++) {
		memcpy(&ring[i], &dev_cq_ring[(ci + i) & ((1u << dev_cq_log2) - 1)],
		       offsetof(struct vrnic_cqe, owner));
		ring[i].owner = vrnic_cqe_phase(i, log2);
	}
	dev_cq_ring = ring;
	dev_cq_log2 = log2;
	dev_cq_pi = n;
	*cq.db_ci = 0;
	resp->cqe = cqe;
	return 0;
}

/*
 * ibv_resize_cq moves polling to the new ring at index 0 (the device moved
 * the unpolled CQEs there) and frees the old one; a failed resize keeps
 * the old ring and index. Through poll_cq and the poll_cq_ex iterator.
 */
static void test_resize_cq(void)
{
	struct ibv_poll_cq_attr pattr = {};
	struct vrnic_cqe *old_ring;
	struct ibv_cq_ex *cqx;
	struct ibv_wc wc[16];
	uint32_t old_ci;
	int i, n;

	/* 3 CQEs of no QP of ours (they retire nothing), one polled. */
	for (i = 1; i <= 3; i++)
		dev_cqe(0x424242, 0, 0xd0 + i, 0, 0);
	CHECK(poll_one().wr_id == 0xd1);

	/* Out of range; more unpolled CQEs (2) than 1 entry... (depth 2
	 * holds them: ask the device's BAD_SIZE with a failing kernel). */
	CHECK(vrnic_resize_cq(&cq.ibv_cq, 0) == EINVAL);
	CHECK(vrnic_resize_cq(&cq.ibv_cq, 2000) == EINVAL);
	CHECK(resize_calls == 0);
	old_ring = cq.ring;
	old_ci = cq.ci;
	resize_fail = ENOMEM;
	CHECK(vrnic_resize_cq(&cq.ibv_cq, 7) == ENOMEM);
	resize_fail = 0;
	CHECK(resize_calls == 1);
	CHECK(cq.ring == old_ring && cq.ci == old_ci && cq.depth_log2 == 2);
	CHECK(poll_one().wr_id == 0xd2);

	/* Grow to 8 entries with one CQE unpolled. */
	CHECK(vrnic_resize_cq(&cq.ibv_cq, 7) == 0);
	CHECK(cq.ring != old_ring && cq.ring == dev_cq_ring);
	CHECK(cq.depth_log2 == 3 && cq.ci == 0 && cq.ibv_cq.cqe == 7);
	CHECK(db_read(cq.db_ci) == 0);
	CHECK(poll_one().wr_id == 0xd3);
	CHECK(db_read(cq.db_ci) == 1);

	/* 12 more: the new ring wraps (phase flips) and all come in order. */
	for (i = 0; i < 7; i++)
		dev_cqe(0x424242, 0, 0xe0 + i, 0, 0);
	n = vrnic_poll_cq(&cq.ibv_cq, 16, wc);
	CHECK(n == 7);
	for (i = 0; i < n; i++)
		CHECK(wc[i].wr_id == 0xe0u + i);
	for (i = 0; i < 5; i++)
		dev_cqe(0x424242, 0, 0xf0 + i, 0, 0);

	/* Shrink to 2 entries, 5 unpolled: refused (BAD_SIZE), kept. */
	CHECK(vrnic_resize_cq(&cq.ibv_cq, 1) == EINVAL);
	CHECK(cq.depth_log2 == 3 && cq.ring == dev_cq_ring);

	/* Shrink to 8 -> 8 (cqe 5) is a move too; then the iterator. */
	old_ring = cq.ring;
	CHECK(vrnic_resize_cq(&cq.ibv_cq, 5) == 0);
	CHECK(cq.ring != old_ring && cq.ci == 0 && cq.ibv_cq.cqe == 7);
	vrnic_cq_ex_init(&cq, IBV_WC_STANDARD_FLAGS);
	cqx = &cq.vcq.cq_ex;
	CHECK(ibv_start_poll(cqx, &pattr) == 0);
	CHECK(cqx->wr_id == 0xf0);
	for (i = 1; i < 5; i++) {
		CHECK(ibv_next_poll(cqx) == 0);
		CHECK(cqx->wr_id == 0xf0u + i);
	}
	CHECK(ibv_next_poll(cqx) == ENOENT);
	ibv_end_poll(cqx);
	CHECK(cq.ci == 5 && db_read(cq.db_ci) == 5 && dev_cq_pi == 5);
}

static struct verbs_mr *rereg_vmr;
static int rereg_flags;
static uint64_t rereg_hca_va;

/* The fake kernel of REREG_MR: records what the provider asked. */
int ibv_cmd_rereg_mr(struct verbs_mr *vmr, uint32_t flags, void *addr,
		     size_t length, uint64_t hca_va, int access,
		     struct ibv_pd *pd, struct ibv_rereg_mr *cmd,
		     size_t cmd_sz, struct ib_uverbs_rereg_mr_resp *resp,
		     size_t resp_sz)
{
	rereg_vmr = vmr;
	rereg_flags = flags;
	rereg_hca_va = hca_va;
	return 0;
}

/* ibv_rereg_mr: a new translation is at iova = addr; a PD of another
 * context is refused before any command. */
static void test_rereg_mr(void)
{
	struct vrnic_context other = {};
	struct ibv_pd pd = { .context = &ctx->ibv_ctx.context };
	struct ibv_pd foreign = { .context = &other.ibv_ctx.context };
	struct verbs_mr vmr = {};
	static uint8_t buf[64];

	vmr.ibv_mr.context = &ctx->ibv_ctx.context;
	CHECK(vrnic_rereg_mr(&vmr, IBV_REREG_MR_CHANGE_TRANSLATION |
			     IBV_REREG_MR_CHANGE_PD, &pd, buf, sizeof(buf),
			     0) == 0);
	CHECK(rereg_vmr == &vmr && rereg_hca_va == (uintptr_t)buf);
	CHECK(rereg_flags == (IBV_REREG_MR_CHANGE_TRANSLATION |
			      IBV_REREG_MR_CHANGE_PD));
	rereg_vmr = NULL;
	CHECK(vrnic_rereg_mr(&vmr, IBV_REREG_MR_CHANGE_PD, &foreign, NULL, 0,
			     0) == EINVAL);
	CHECK(vrnic_rereg_mr(&vmr, IBV_REREG_MR_CHANGE_PD, NULL, NULL, 0,
			     0) == EINVAL);
	CHECK(rereg_vmr == NULL);
}

static void test_arm(void)
{
	CHECK(vrnic_req_notify_cq(&cq.ibv_cq, 0) == 0);
	CHECK(db_read(cq.db_arm) == ((1u << 2) | VRNIC_CQ_ARM_NEXT));
	CHECK(vrnic_req_notify_cq(&cq.ibv_cq, 1) == 0);
	CHECK(db_read(cq.db_arm) == ((2u << 2) | VRNIC_CQ_ARM_SOLICITED));
}

int main(void)
{
	setup();
	test_send_ring_and_kick();
	test_send_errors_and_inline();
	test_recv_and_clean();
	test_ud_send_and_recv();
	test_queue_sizes();
	test_opcodes_by_qp_type();
	test_atomics();
	test_uc_send_and_write();
	test_invalidation();
	test_bind_mw();
	test_srq();
	test_srq_sizes();
	test_srq_cqe_hostile();
	test_cqe_hostile_values();
	test_xrc_srq_completions();
	test_xrc_send();
	test_xrc_recv_qp_posts_nothing();
	test_resize_cq();
	test_rereg_mr();
	test_arm();
	if (failures) {
		fprintf(stderr, "datapath_test: %d failure(s)\n", failures);
		return 1;
	}
	printf("datapath_test: ok (CQ at %u, SQ at %u, RQ at %u)\n", cq.ci,
	       qp.sq.pi, qp.rq.pi);
	return 0;
}
