// SPDX-License-Identifier: GPL-2.0 OR Linux-OpenIB
/*
 * Data path test without a kernel or device: a fake context (a doorbell and
 * a kick page in plain memory), a CQ and a QP whose indices start just below
 * 2^32, and a fake device that reads WQEs and writes CQEs by the SPEC.md
 * rules. Built and run by `build.sh --test` inside the build root.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../vrnic.h"
#include "check.h"

#define START 0xfffffffeu /* every free-running index wraps during the test */
#define QPN 0x123456u
#define UD_QPN 0x000abcu

static struct vrnic_context *ctx;
static uint8_t *db_page;	/* the fake doorbell page holding both slots */
static uint8_t *kick_page;
static struct vrnic_cq cq;
static struct vrnic_qp qp;
static struct vrnic_qp ud_qp;	/* UD, 128-byte send WQEs, own slot 9 */
static uint32_t dev_cq_pi = START; /* fake device's CQ producer index */

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
	pthread_mutex_init(&ctx->qp_table_mutex, NULL);

	cq.ibv_cq.context = &ctx->ibv_ctx.context;
	cq.depth_log2 = 2;
	cq.ring = calloc(4, sizeof(*cq.ring));
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
}

/* Fake device: write every field but owner into the next entry... */
static struct vrnic_cqe *dev_cqe_fill(uint32_t qpn, uint16_t wqe_index,
				      uint64_t wr_id, uint8_t flags,
				      uint8_t status)
{
	struct vrnic_cqe *cqe = &cq.ring[dev_cq_pi & 3];

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
	__atomic_store_n(&cqe->owner, ((dev_cq_pi >> 2) & 1) ^ 1,
			 __ATOMIC_RELEASE);
	dev_cq_pi++;
}

static void dev_cqe(uint32_t qpn, uint16_t wqe_index, uint64_t wr_id,
		    uint8_t flags, uint8_t status)
{
	dev_cqe_publish(dev_cqe_fill(qpn, wqe_index, wr_id, flags, status));
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
	wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
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
	test_arm();
	if (failures) {
		fprintf(stderr, "datapath_test: %d failure(s)\n", failures);
		return 1;
	}
	printf("datapath_test: ok (CQ at %u, SQ at %u, RQ at %u)\n", cq.ci,
	       qp.sq.pi, qp.rq.pi);
	return 0;
}
