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

static void check_bytes(const char *what, const void *got, const void *want,
			size_t len)
{
	const uint8_t *g = got, *w = want;
	size_t i;

	for (i = 0; i < len; i++) {
		if (g[i] != w[i]) {
			fprintf(stderr, "%s: byte %zu is 0x%02x, want 0x%02x\n",
				what, i, g[i], w[i]);
			failures++;
			return;
		}
	}
}

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
	test_cqe_decode();
	test_cqe_phase();
	if (failures) {
		fprintf(stderr, "wqe_test: %d failure(s)\n", failures);
		return 1;
	}
	printf("wqe_test: ok\n");
	return 0;
}
