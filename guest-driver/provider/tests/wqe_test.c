// SPDX-License-Identifier: GPL-2.0 OR Linux-OpenIB
/*
 * Test of guest-driver/common/vrnic_wqe.h, the encoding the provider and the
 * kernel driver share: each builder's output is compared byte for byte with
 * an image written out from the tables of hw-spec/SPEC.md section 5 (not
 * from the generated structs), and a CQE image decodes field by field.
 * Built and run by `build.sh --test` inside the build root.
 */
#include <stdio.h>
#include <string.h>

#include "vrnic_wqe.h"
#include "check.h"

/* A UD send WQE with SEND_WITH_IMM and two SGEs: header, ud_av at 32, SGEs
 * at UD_PAYLOAD_OFFSET (80). The buffer starts as 0xee: every byte up to
 * the last SGE must be written, the rest left alone. */
static void test_ud_send_wqe_bytes(void)
{
	static const uint8_t want[128] = {
		/* send_wqe_header */
		[0] = 3,	/* opcode SEND_WITH_IMM */
		[1] = 0x03,	/* flags SIGNALED | FENCE */
		[2] = 2,	/* num_sge */
		[3] = 0,	/* reserved0 */
		[4] = 0xde, 0xad, 0xbe, 0xef,	/* imm_data, network order */
		[8] = 0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, /* wr_id */
		[16] = 0, 0, 0, 0, 0, 0, 0, 0,	/* remote_addr */
		[24] = 0, 0, 0, 0,		/* rkey */
		[28] = 0, 0, 0, 0,		/* inline_len */
		/* ud_av */
		[32] = 0x56, 0x34, 0x12, 0x00,	/* remote_qpn 0x123456 */
		[36] = 0x11, 0x11, 0x11, 0x11,	/* remote_qkey */
		[40] = 0x34, 0x12,		/* dlid 0x1234 */
		[42] = 5,			/* sl */
		[43] = 1,			/* is_global */
		[44] = 2,			/* sgid_index */
		[45] = 64,			/* hop_limit */
		[46] = 0x20,			/* traffic_class */
		[47] = 0,			/* reserved0 */
		[48] = 0x45, 0x23, 0x01, 0x00,	/* flow_label 0x12345 */
		[52] = 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff,
		       10, 0, 0, 2,		/* dgid ::ffff:10.0.0.2 */
		[68] = 0x52, 0x54, 0x00, 0x12, 0x34, 0x56, /* dmac */
		[74] = 0, 0, 0, 0, 0, 0,	/* reserved1 */
		/* sge[0] */
		[80] = 0x00, 0x10, 0, 0, 0, 0, 0, 0,	/* addr 0x1000 */
		[88] = 0x28, 0, 0, 0,			/* length 40 */
		[92] = 0x07, 0, 0, 0,			/* lkey 7 */
		/* sge[1] */
		[96] = 0x00, 0x20, 0, 0, 0, 0, 0, 0,	/* addr 0x2000 */
		[104] = 0x00, 0x10, 0, 0,		/* length 4096 */
		[108] = 0x08, 0, 0, 0,			/* lkey 8 */
		[112] = 0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee,
			0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee,
	};
	struct vrnic_send_fields f = {
		.opcode = VRNIC_WR_OPCODE_SEND_WITH_IMM,
		.flags = VRNIC_SEND_FLAGS_SIGNALED | VRNIC_SEND_FLAGS_FENCE,
		.num_sge = 2,
		.imm_data = htobe32(0xdeadbeef),
		.wr_id = 0x0102030405060708ull,
	};
	struct vrnic_av av = {
		.remote_qpn = 0x123456, .remote_qkey = 0x11111111,
		.dlid = 0x1234, .sl = 5, .is_global = 1, .sgid_index = 2,
		.hop_limit = 64, .traffic_class = 0x20, .flow_label = 0x12345,
		.dgid = { [10] = 0xff, [11] = 0xff, [12] = 10, [15] = 2 },
		.dmac = { 0x52, 0x54, 0x00, 0x12, 0x34, 0x56 },
	};
	uint8_t wqe[128];
	struct vrnic_sge *sge;

	memset(wqe, 0xee, sizeof(wqe));
	vrnic_set_send_wqe_header((void *)wqe, &f);
	vrnic_set_ud_av(vrnic_send_wqe_ud_av(wqe), &av);
	sge = vrnic_send_wqe_payload(wqe, true);
	vrnic_set_sge(&sge[0], 0x1000, 40, 7);
	vrnic_set_sge(&sge[1], 0x2000, 4096, 8);
	check_bytes("UD send WQE", wqe, want, sizeof(want));

	CHECK((uint8_t *)sge - wqe == 80);
	CHECK((uint8_t *)vrnic_send_wqe_payload(wqe, false) - wqe == 32);
	CHECK(vrnic_send_wqe_room(VRNIC_UD_SEND_WQE_SHIFT_MIN, true) == 48);
	CHECK(vrnic_send_wqe_room(VRNIC_SEND_WQE_SHIFT_MIN, false) == 32);
}

/* An RC RDMA WRITE header: remote_addr and rkey land at 16 and 24. */
static void test_rdma_header_bytes(void)
{
	static const uint8_t want[32] = {
		[0] = 0,			/* opcode RDMA_WRITE */
		[1] = 0x08,			/* flags INLINE */
		[2] = 0,			/* num_sge */
		[8] = 0x2a,			/* wr_id 42 */
		[16] = 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11,
		[24] = 0x04, 0x03, 0x02, 0x01,	/* rkey */
		[28] = 0x10, 0, 0, 0,		/* inline_len 16 */
	};
	struct vrnic_send_fields f = {
		.opcode = VRNIC_WR_OPCODE_RDMA_WRITE,
		.flags = VRNIC_SEND_FLAGS_INLINE,
		.wr_id = 42,
		.remote_addr = 0x1122334455667788ull,
		.rkey = 0x01020304,
		.inline_len = 16,
	};
	uint8_t hdr[32];

	memset(hdr, 0xee, sizeof(hdr));
	vrnic_set_send_wqe_header((void *)hdr, &f);
	check_bytes("RDMA WRITE header", hdr, want, sizeof(want));
}

static void test_recv_wqe_bytes(void)
{
	static const uint8_t want[48] = {
		[0] = 0x99, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, /* wr_id */
		[8] = 2,			/* num_sge */
		[9] = 0, 0, 0, 0, 0, 0, 0,	/* reserved0 */
		[16] = 0x00, 0x30, 0, 0, 0, 0, 0, 0, /* sge[0].addr 0x3000 */
		[24] = 0x28, 0, 0, 0,		/* length 40 (the GRH) */
		[28] = 0x09, 0, 0, 0,		/* lkey */
		[32] = 0x28, 0x30, 0, 0, 0, 0, 0, 0,
		[40] = 0x00, 0x10, 0, 0,
		[44] = 0x09, 0, 0, 0,
	};
	uint8_t wqe[48];
	struct vrnic_sge *sge;

	memset(wqe, 0xee, sizeof(wqe));
	vrnic_set_recv_wqe_header((void *)wqe, 0x2233445566778899ull, 2);
	sge = vrnic_recv_wqe_sges(wqe);
	vrnic_set_sge(&sge[0], 0x3000, 40, 9);
	vrnic_set_sge(&sge[1], 0x3028, 4096, 9);
	check_bytes("receive WQE", wqe, want, sizeof(want));
}

/* An RC ATOMIC_CMP_AND_SWP: header (remote_addr, rkey, num_sge 1), the
 * atomic_seg at 32, the one 8-byte SGE at 48. */
static void test_atomic_wqe_bytes(void)
{
	static const uint8_t want[72] = {
		[0] = 5,			/* opcode ATOMIC_CMP_AND_SWP */
		[1] = 0x02,			/* flags SIGNALED */
		[2] = 1,			/* num_sge */
		[3] = 0,			/* reserved0 */
		[4] = 0, 0, 0, 0,		/* imm_data */
		[8] = 0x11, 0, 0, 0, 0, 0, 0, 0,	/* wr_id 0x11 */
		[16] = 0x08, 0x70, 0x60, 0x50, 0x40, 0x30, 0x20, 0x10,
		[24] = 0x0d, 0x0c, 0x0b, 0x0a,	/* rkey */
		[28] = 0, 0, 0, 0,		/* inline_len */
		/* atomic_seg */
		[32] = 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08,
		[40] = 0xf1, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7, 0xf8,
		/* sge */
		[48] = 0x00, 0x50, 0, 0, 0, 0, 0, 0,	/* addr 0x5000 */
		[56] = 0x08, 0, 0, 0,			/* length 8 */
		[60] = 0x33, 0, 0, 0,			/* lkey 0x33 */
		[64] = 0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee,
	};
	struct vrnic_atomic_fields a = {
		.remote_addr = 0x1020304050607008ull, .rkey = 0x0a0b0c0d,
		.compare_add = 0x0807060504030201ull,
		.swap = 0xf8f7f6f5f4f3f2f1ull,
		.addr = 0x5000, .length = 8, .lkey = 0x33,
	};
	uint8_t wqe[72];

	memset(wqe, 0xee, sizeof(wqe));
	vrnic_set_atomic_wqe(wqe, VRNIC_WR_OPCODE_ATOMIC_CMP_AND_SWP,
			     VRNIC_SEND_FLAGS_SIGNALED, 0x11, &a);
	check_bytes("atomic WQE", wqe, want, sizeof(want));
	CHECK((uint8_t *)vrnic_atomic_wqe_sge(wqe) - wqe == 48);
}

/* An XRC_INI SEND (SPEC "XRC"): header, xrc_seg at 32 naming the target
 * SRQ (reserved words zero), SGEs at XRC_PAYLOAD_OFFSET (48). */
static void test_xrc_send_wqe_bytes(void)
{
	static const uint8_t want[96] = {
		[0] = 2,			/* opcode SEND */
		[1] = 0x06,			/* flags SIGNALED | SOLICITED */
		[2] = 2,			/* num_sge */
		[8] = 0x31, 0, 0, 0, 0, 0, 0, 0,	/* wr_id 0x31 */
		/* xrc_seg */
		[32] = 0x56, 0x34, 0x12, 0x00,	/* remote_srqn 0x123456 */
		[36] = 0, 0, 0, 0,		/* reserved0 */
		[40] = 0, 0, 0, 0, 0, 0, 0, 0,	/* reserved1 */
		/* sge[0] */
		[48] = 0x00, 0x10, 0, 0, 0, 0, 0, 0,	/* addr 0x1000 */
		[56] = 0x40, 0, 0, 0,			/* length 64 */
		[60] = 0x05, 0, 0, 0,			/* lkey 5 */
		/* sge[1] */
		[64] = 0x00, 0x20, 0, 0, 0, 0, 0, 0,	/* addr 0x2000 */
		[72] = 0x01, 0, 0, 0,			/* length 1 */
		[76] = 0x06, 0, 0, 0,			/* lkey 6 */
		[80] = 0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee,
		       0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee,
	};
	struct vrnic_send_fields f = {
		.opcode = VRNIC_WR_OPCODE_SEND,
		.flags = VRNIC_SEND_FLAGS_SIGNALED | VRNIC_SEND_FLAGS_SOLICITED,
		.num_sge = 2, .wr_id = 0x31,
	};
	uint8_t wqe[96];
	struct vrnic_sge *sge;

	memset(wqe, 0xee, sizeof(wqe));
	vrnic_set_send_wqe_header((void *)wqe, &f);
	vrnic_set_xrc_seg(vrnic_send_wqe_xrc_seg(wqe), 0x123456);
	sge = vrnic_xrc_send_wqe_payload(wqe);
	vrnic_set_sge(&sge[0], 0x1000, 64, 5);
	vrnic_set_sge(&sge[1], 0x2000, 1, 6);
	check_bytes("XRC send WQE", wqe, want, sizeof(want));
	CHECK(vrnic_xrc_send_wqe_room(7) == 80);
}

/* An XRC_INI FETCH_AND_ADD: header, xrc_seg at 32, atomic_seg at 48, its
 * SGE at 64, all within the smallest XRC WQE (128 bytes). */
static void test_xrc_atomic_wqe_bytes(void)
{
	static const uint8_t want[128] = {
		[0] = 6,			/* opcode ATOMIC_FETCH_AND_ADD */
		[1] = 0x02,			/* flags SIGNALED */
		[2] = 1,			/* num_sge */
		[8] = 0x32, 0, 0, 0, 0, 0, 0, 0,	/* wr_id */
		[16] = 0x08, 0x70, 0, 0, 0, 0, 0, 0,	/* remote_addr 0x7008 */
		[24] = 0x44, 0x33, 0x22, 0x11,	/* rkey */
		[32] = 0x0a, 0x0b, 0x0c, 0x00,	/* remote_srqn 0x0c0b0a */
		/* atomic_seg */
		[48] = 0x03, 0, 0, 0, 0, 0, 0, 0,	/* add 3 */
		[56] = 0, 0, 0, 0, 0, 0, 0, 0,		/* swap 0 */
		/* sge */
		[64] = 0x00, 0x60, 0, 0, 0, 0, 0, 0,	/* addr 0x6000 */
		[72] = 0x08, 0, 0, 0,			/* length 8 */
		[76] = 0x34, 0, 0, 0,			/* lkey 0x34 */
		[80] = 0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee,
		       0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee,
		       0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee,
		       0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee,
		       0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee,
		       0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee,
	};
	struct vrnic_atomic_fields a = {
		.remote_addr = 0x7008, .rkey = 0x11223344, .compare_add = 3,
		.addr = 0x6000, .length = 8, .lkey = 0x34,
	};
	uint8_t wqe[128];

	memset(wqe, 0xee, sizeof(wqe));
	vrnic_set_xrc_atomic_wqe(wqe, VRNIC_WR_OPCODE_ATOMIC_FETCH_AND_ADD,
				 VRNIC_SEND_FLAGS_SIGNALED, 0x32, 0x0c0b0a, &a);
	check_bytes("XRC atomic WQE", wqe, want, sizeof(want));
}

/* A REG_MR: header with the new key in rkey, reg_mr_seg at 32. */
static void test_reg_mr_wqe_bytes(void)
{
	static const uint8_t want[72] = {
		[0] = 0x20,			/* opcode REG_MR */
		[1] = 0x02,			/* flags SIGNALED */
		[2] = 0,			/* num_sge */
		[8] = 0x22, 0, 0, 0, 0, 0, 0, 0,	/* wr_id */
		[16] = 0, 0, 0, 0, 0, 0, 0, 0,	/* remote_addr */
		[24] = 0x07, 0x03, 0, 0,	/* rkey: index 3, variant 7 */
		[28] = 0, 0, 0, 0,
		/* reg_mr_seg */
		[32] = 0x10, 0x32, 0x54, 0x76, 0x98, 0xba, 0xdc, 0xfe, /* iova */
		[40] = 0x00, 0x00, 0x03, 0, 0, 0, 0, 0,	/* length 0x30000 */
		[48] = 0x08, 0x90, 0, 0, 0, 0, 0, 0,	/* page_list 0x9008 */
		[56] = 0x04, 0x01,			/* npages 0x104 */
		[58] = 12,				/* page_shift */
		[59] = 0,				/* reserved0 */
		[60] = 0x07, 0, 0, 0,			/* access L_W|R_W|R_R */
		[64] = 0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee,
	};
	struct vrnic_reg_mr_fields r = {
		.iova = 0xfedcba9876543210ull, .length = 0x30000,
		.page_list = 0x9008, .npages = 0x104, .page_shift = 12,
		.access = VRNIC_ACCESS_LOCAL_WRITE | VRNIC_ACCESS_REMOTE_WRITE |
			  VRNIC_ACCESS_REMOTE_READ,
	};
	uint8_t wqe[72];

	memset(wqe, 0xee, sizeof(wqe));
	vrnic_set_reg_mr_wqe(wqe, VRNIC_SEND_FLAGS_SIGNALED, 0x22, 0x307, &r);
	check_bytes("REG_MR WQE", wqe, want, sizeof(want));
}

/* A LOCAL_INV is a header only, the key in rkey. */
static void test_local_inv_wqe_bytes(void)
{
	static const uint8_t want[40] = {
		[0] = 7,			/* opcode LOCAL_INV */
		[1] = 0x03,			/* flags SIGNALED | FENCE */
		[8] = 0x33, 0, 0, 0, 0, 0, 0, 0,	/* wr_id */
		[24] = 0x42, 0x05, 0, 0,	/* rkey 0x542 */
		[32] = 0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee,
	};
	uint8_t wqe[40];

	memset(wqe, 0xee, sizeof(wqe));
	vrnic_set_local_inv_wqe(wqe, VRNIC_SEND_FLAGS_SIGNALED |
				VRNIC_SEND_FLAGS_FENCE, 0x33, 0x542);
	check_bytes("LOCAL_INV WQE", wqe, want, sizeof(want));
}

/* A BIND_MW: header with the window's new rkey, bind_mw_seg at 32. */
static void test_bind_mw_wqe_bytes(void)
{
	static const uint8_t want[72] = {
		[0] = 8,			/* opcode BIND_MW */
		[1] = 0x02,			/* flags SIGNALED */
		[8] = 0x44, 0, 0, 0, 0, 0, 0, 0,	/* wr_id */
		[24] = 0x02, 0x09, 0, 0,	/* rkey 0x902 */
		/* bind_mw_seg */
		[32] = 0x00, 0x11, 0, 0, 0, 0, 0, 0,	/* addr 0x1100 */
		[40] = 0x00, 0x02, 0, 0, 0, 0, 0, 0,	/* length 0x200 */
		[48] = 0x01, 0x08, 0, 0,		/* mr_lkey 0x801 */
		[52] = 0x0e, 0, 0, 0,			/* access R_W|R_R|R_A */
		[56] = 0, 0, 0, 0, 0, 0, 0, 0,		/* reserved0 */
		[64] = 0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee,
	};
	struct vrnic_bind_mw_fields b = {
		.addr = 0x1100, .length = 0x200, .mr_lkey = 0x801,
		.access = VRNIC_ACCESS_REMOTE_WRITE | VRNIC_ACCESS_REMOTE_READ |
			  VRNIC_ACCESS_REMOTE_ATOMIC,
	};
	uint8_t wqe[72];

	memset(wqe, 0xee, sizeof(wqe));
	vrnic_set_bind_mw_wqe(wqe, VRNIC_SEND_FLAGS_SIGNALED, 0x44, 0x902, &b);
	check_bytes("BIND_MW WQE", wqe, want, sizeof(want));
}

/* A SEND_WITH_INV header carries the key the target invalidates in rkey. */
static void test_send_with_inv_header_bytes(void)
{
	static const uint8_t want[32] = {
		[0] = 9,			/* opcode SEND_WITH_INV */
		[1] = 0x02,			/* flags SIGNALED */
		[2] = 1,			/* num_sge */
		[8] = 0x55, 0, 0, 0, 0, 0, 0, 0,	/* wr_id */
		[16] = 0, 0, 0, 0, 0, 0, 0, 0,	/* remote_addr */
		[24] = 0x01, 0x7f, 0x12, 0x00,	/* rkey 0x127f01 */
	};
	struct vrnic_send_fields f = {
		.opcode = VRNIC_WR_OPCODE_SEND_WITH_INV,
		.flags = VRNIC_SEND_FLAGS_SIGNALED, .num_sge = 1,
		.wr_id = 0x55, .rkey = 0x127f01,
	};
	uint8_t hdr[32];

	memset(hdr, 0xee, sizeof(hdr));
	vrnic_set_send_wqe_header((void *)hdr, &f);
	check_bytes("SEND_WITH_INV header", hdr, want, sizeof(want));
}

/* A receive completed by SEND_WITH_INV: the key is little-endian in the
 * imm_data bytes; without WITH_INV those bytes name no key. */
static void test_cqe_decode_with_inv(void)
{
	static const uint8_t img[64] = {
		[0] = 0x77,			/* wr_id */
		[8] = 0x10, 0, 0, 0,		/* byte_len 16 */
		[12] = 0x07, 0x03, 0x02, 0x00,	/* key 0x20307 */
		[16] = 0x10, 0, 0, 0,		/* qpn 16 */
		[26] = 0x80,			/* opcode RECV */
		[28] = 0x08,			/* wc_flags WITH_INV */
		[30] = 0x01,			/* flags RECV */
		[63] = 1,
	};
	struct vrnic_cqe cqe;
	struct vrnic_cqe_fields f;

	memcpy(&cqe, img, sizeof(img));
	vrnic_cqe_decode(&cqe, &f);
	CHECK(f.wc_flags == VRNIC_WC_FLAGS_WITH_INV);
	CHECK(f.invalidated_rkey == 0x20307);
	CHECK(f.opcode == VRNIC_WC_OPCODE_RECV && f.byte_len == 16);

	cqe.wc_flags = VRNIC_WC_FLAGS_WITH_IMM;
	vrnic_cqe_decode(&cqe, &f);
	CHECK(f.invalidated_rkey == 0);
	CHECK(be32toh(f.imm_data) == 0x07030200);
}

/* The send opcodes of this round's CQEs, at byte 26, are ibv_wc's values. */
static void test_cqe_decode_new_opcodes(void)
{
	static const struct {
		uint8_t byte;
		uint8_t opcode;
	} cases[] = {
		{ 3, VRNIC_WC_OPCODE_COMP_SWAP },
		{ 4, VRNIC_WC_OPCODE_FETCH_ADD },
		{ 5, VRNIC_WC_OPCODE_BIND_MW },
		{ 6, VRNIC_WC_OPCODE_LOCAL_INV },
		{ 8, VRNIC_WC_OPCODE_REG_MR },
	};
	uint8_t img[64] = { [8] = 8, [16] = 0x10, [63] = 1 };
	struct vrnic_cqe cqe;
	struct vrnic_cqe_fields f;
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		img[26] = cases[i].byte;
		memcpy(&cqe, img, sizeof(img));
		vrnic_cqe_decode(&cqe, &f);
		CHECK(f.opcode == cases[i].opcode);
		CHECK(f.byte_len == 8 && f.flags == 0);
		CHECK(f.invalidated_rkey == 0);
	}
}

/* A datagram receive CQE as the device writes it (SPEC table "cqe"). */
static void test_cqe_decode(void)
{
	static const uint8_t img[64] = {
		[0] = 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, /* wr_id */
		[8] = 0x28, 0x04, 0, 0,		/* byte_len 1064 */
		[12] = 0xca, 0xfe, 0xba, 0xbe,	/* imm_data */
		[16] = 0x21, 0x43, 0x65, 0x00,	/* qpn 0x654321 */
		[20] = 0x01, 0, 0, 0,		/* src_qp 1 (GSI) */
		[24] = 0x05, 0x01,		/* wqe_index 0x105 */
		[26] = 0x80,			/* opcode RECV */
		[27] = 0,			/* status */
		[28] = 0x03,			/* wc_flags GRH | WITH_IMM */
		[29] = 0,			/* vendor_err */
		[30] = 0x03,			/* flags RECV | SOLICITED */
		[32] = 0x07, 0x00,		/* slid 7 */
		[34] = 3,			/* sl */
		[35] = 2,			/* network_type IPV4 */
		[36] = 0x00, 0x00,		/* pkey_index 0 */
		[63] = 1,			/* owner */
	};
	struct vrnic_cqe cqe;
	struct vrnic_cqe_fields f;

	CHECK(sizeof(cqe) == sizeof(img));
	memcpy(&cqe, img, sizeof(img));
	vrnic_cqe_decode(&cqe, &f);
	CHECK(f.wr_id == 0x0807060504030201ull);
	CHECK(f.byte_len == 1064);
	CHECK(be32toh(f.imm_data) == 0xcafebabe);
	CHECK(f.qpn == 0x654321 && f.src_qp == 1);
	CHECK(f.wqe_index == 0x105);
	CHECK(f.opcode == VRNIC_WC_OPCODE_RECV && f.status == 0);
	CHECK(f.wc_flags == (VRNIC_WC_FLAGS_GRH | VRNIC_WC_FLAGS_WITH_IMM));
	CHECK(f.vendor_err == 0);
	CHECK(f.flags == (VRNIC_CQE_FLAG_RECV | VRNIC_CQE_FLAG_SOLICITED));
	CHECK(f.slid == 7 && f.sl == 3);
	CHECK(f.network_type == VRNIC_NETWORK_TYPE_IPV4);
	CHECK(f.pkey_index == 0);

	cqe.pkey_index = htole16(0x0102);
	vrnic_cqe_decode(&cqe, &f);
	CHECK(f.pkey_index == 0x0102);
	CHECK(f.srqn == 0);
}

/* An SRQ completion: CQE_FLAG_SRQ (bit 2 of flags) and srqn at 40. */
static void test_cqe_decode_srq(void)
{
	static const uint8_t img[64] = {
		[16] = 0x7e, 0x7e, 0x7e, 0x00,	/* qpn 0x7e7e7e (a TGT QP) */
		[24] = 0x01, 0x00,		/* wqe_index 1 (the SRQ slot) */
		[26] = 0x80,			/* opcode RECV */
		[30] = 0x05,			/* flags RECV | SRQ */
		[40] = 0xa5, 0xa5, 0x12, 0x00,	/* srqn 0x12a5a5 */
		[63] = 1,			/* owner */
	};
	struct vrnic_cqe cqe;
	struct vrnic_cqe_fields f;

	memcpy(&cqe, img, sizeof(img));
	vrnic_cqe_decode(&cqe, &f);
	CHECK(f.flags == (VRNIC_CQE_FLAG_RECV | VRNIC_CQE_FLAG_SRQ));
	CHECK(f.srqn == 0x12a5a5 && f.wqe_index == 1 && f.qpn == 0x7e7e7e);
}

/* Phase: 1 on the first pass, flipping at every wrap of the ring. */
static void test_cqe_phase(void)
{
	CHECK(vrnic_cqe_phase(0, 3) == 1);
	CHECK(vrnic_cqe_phase(7, 3) == 1);
	CHECK(vrnic_cqe_phase(8, 3) == 0);
	CHECK(vrnic_cqe_phase(16, 3) == 1);
	CHECK(vrnic_cqe_phase(0xffffffffu, 3) == 0);
	CHECK(vrnic_cqe_owned(1, 0, 3));
	CHECK(!vrnic_cqe_owned(0, 0, 3));
	CHECK(vrnic_cqe_owned(0xfe, 8, 3)); /* only bit 0 is the phase */
	CHECK(!vrnic_cqe_owned(1, 8, 3));
}

int main(void)
{
	test_ud_send_wqe_bytes();
	test_rdma_header_bytes();
	test_recv_wqe_bytes();
	test_atomic_wqe_bytes();
	test_xrc_send_wqe_bytes();
	test_xrc_atomic_wqe_bytes();
	test_reg_mr_wqe_bytes();
	test_local_inv_wqe_bytes();
	test_bind_mw_wqe_bytes();
	test_send_with_inv_header_bytes();
	test_cqe_decode();
	test_cqe_decode_srq();
	test_cqe_decode_with_inv();
	test_cqe_decode_new_opcodes();
	test_cqe_phase();
	if (failures) {
		fprintf(stderr, "wqe_test: %d failure(s)\n", failures);
		return 1;
	}
	printf("wqe_test: ok\n");
	return 0;
}
