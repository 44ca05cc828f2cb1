/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * vrnic WQE and CQE encoding, shared by the kernel driver and the rdma-core
 * provider so that neither writes the ring formats out on its own.
 *
 * Every layout comes from the generated hw-spec headers (vrnic/vrnic_hw.h,
 * hw-spec/SPEC.md section 5); this file only converts host-order values to
 * those layouts and back. The includer sets up the include path for both
 * (kernel: ccflags -I hw-spec/include -I guest-driver/common; provider: the
 * copies build.sh makes).
 *
 * Host-order values are uint*_t (the kernel's <linux/types.h> defines them
 * too). Immediate data stays in network order end to end, as __be32, the
 * type of ibv_send_wr.imm_data, ib_send_wr.ex.imm_data and the wc fields.
 *
 * Nothing here orders memory: the caller publishes WQEs with its doorbell
 * barrier and loads a CQE's owner byte with acquire ordering (then checks
 * vrnic_cqe_owned()) before vrnic_cqe_decode() reads the other fields.
 */
#ifndef VRNIC_WQE_H
#define VRNIC_WQE_H

#ifdef __KERNEL__
#include <linux/types.h>
#include <linux/string.h>
#include <asm/byteorder.h>
#include <rdma/ib_verbs.h>
#define vrnic_cpu_to_le16(v) cpu_to_le16(v)
#define vrnic_cpu_to_le32(v) cpu_to_le32(v)
#define vrnic_cpu_to_le64(v) cpu_to_le64(v)
#define vrnic_le16_to_cpu(v) le16_to_cpu(v)
#define vrnic_le32_to_cpu(v) le32_to_cpu(v)
#define vrnic_le64_to_cpu(v) le64_to_cpu(v)
#else
#include <endian.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <linux/types.h>
#define vrnic_cpu_to_le16(v) htole16(v)
#define vrnic_cpu_to_le32(v) htole32(v)
#define vrnic_cpu_to_le64(v) htole64(v)
#define vrnic_le16_to_cpu(v) le16toh(v)
#define vrnic_le32_to_cpu(v) le32toh(v)
#define vrnic_le64_to_cpu(v) le64toh(v)
#endif

#include "vrnic/vrnic_hw.h"

/*
 * Header fields of a send WQE, host order (values of enum vrnic_wr_opcode
 * and enum vrnic_send_flags).
 */
struct vrnic_send_fields {
	uint8_t opcode;
	uint8_t flags;
	uint8_t num_sge;	/* 0 with VRNIC_SEND_FLAGS_INLINE */
	__be32 imm_data;	/* network order; 0 unless *_WITH_IMM */
	uint64_t wr_id;
	uint64_t remote_addr;	/* RDMA and atomics; 0 otherwise (and for UD) */
	uint32_t rkey;		/* see below; 0 otherwise (and for UD) */
	uint32_t inline_len;	/* INLINE only; 0 otherwise */
};

/*
 * Header rkey by opcode (SPEC table send_wqe_header): RDMA and atomics the
 * remote key, SEND_WITH_INV and LOCAL_INV the key to invalidate, REG_MR the
 * MR's new key, BIND_MW the window's new rkey. The vrnic_set_*_wqe()
 * encoders below fill it in; a SEND_WITH_INV is a SEND with it set.
 */

/* An atomic WQE's operands and its one local SGE (8 bytes, LOCAL_WRITE). */
struct vrnic_atomic_fields {
	uint64_t remote_addr;	/* 8-byte aligned */
	uint32_t rkey;
	uint64_t compare_add;	/* compare (CMP_AND_SWP) or addend (FETCH_AND_ADD) */
	uint64_t swap;		/* CMP_AND_SWP only; 0 otherwise */
	uint64_t addr;		/* receives the original value */
	uint32_t length;
	uint32_t lkey;
};

/* A REG_MR WQE's reg_mr_seg, host order (kernel QPs only). */
struct vrnic_reg_mr_fields {
	uint64_t iova;
	uint64_t length;
	uint64_t page_list;	/* DMA address of npages __le64 page addresses */
	uint16_t npages;
	uint8_t page_shift;
	uint32_t access;	/* enum vrnic_access bits */
};

/* A BIND_MW WQE's bind_mw_seg, host order. */
struct vrnic_bind_mw_fields {
	uint64_t addr;
	uint64_t length;	/* type 1: 0 unbinds */
	uint32_t mr_lkey;
	uint32_t access;	/* VRNIC_ACCESS_REMOTE_* bits only */
};

/* A datagram's destination, host order (GRH fields valid with is_global). */
struct vrnic_av {
	uint32_t remote_qpn;
	uint32_t remote_qkey;	/* bit 31 set: the sending QP's own qkey */
	uint16_t dlid;
	uint8_t sl;
	uint8_t is_global;
	uint8_t sgid_index;
	uint8_t hop_limit;
	uint8_t traffic_class;
	uint32_t flow_label;
	uint8_t dgid[16];	/* network order */
	uint8_t dmac[6];
};

/*
 * Every field of a CQE but owner, host order (values of the hw-spec enums,
 * which equal those of ibv_wc / ib_wc where SPEC.md says so).
 */
struct vrnic_cqe_fields {
	uint64_t wr_id;
	uint32_t byte_len;
	__be32 imm_data;	/* network order */
	uint32_t qpn;
	uint32_t src_qp;
	uint16_t wqe_index;
	uint8_t opcode;
	uint8_t status;
	uint8_t wc_flags;
	uint8_t vendor_err;
	uint8_t flags;		/* VRNIC_CQE_FLAG_* */
	uint16_t slid;
	uint8_t sl;
	uint8_t network_type;
	uint16_t pkey_index;
	uint32_t srqn;		/* with VRNIC_CQE_FLAG_SRQ; else 0 */
	uint32_t invalidated_rkey; /* with VRNIC_WC_FLAGS_WITH_INV; else 0 */
};

/*
 * Where a send WQE's SGEs or inline bytes start: after the header, or for a
 * UD/GSI QP after the header and its ud_av.
 */
static inline void *vrnic_send_wqe_payload(void *wqe, bool datagram)
{
	return (uint8_t *)wqe + (datagram ? VRNIC_UD_PAYLOAD_OFFSET :
				 VRNIC_SEND_WQE_HEADER_SIZE);
}

/*
 * Where an XRC_INI send WQE's SGEs, inline bytes or atomic_seg start: after
 * the header and its xrc_seg (SPEC "XRC").
 */
static inline void *vrnic_xrc_send_wqe_payload(void *wqe)
{
	return (uint8_t *)wqe + VRNIC_XRC_PAYLOAD_OFFSET;
}

/* The xrc_seg of an XRC_INI send WQE, after its header. */
static inline struct vrnic_xrc_seg *vrnic_send_wqe_xrc_seg(void *wqe)
{
	return (struct vrnic_xrc_seg *)((uint8_t *)wqe +
					VRNIC_SEND_WQE_HEADER_SIZE);
}

/* The ud_av of a UD/GSI send WQE. */
static inline struct vrnic_ud_av *vrnic_send_wqe_ud_av(void *wqe)
{
	return (struct vrnic_ud_av *)((uint8_t *)wqe +
				      VRNIC_SEND_WQE_HEADER_SIZE);
}

/* Where a receive WQE's SGEs start. */
static inline struct vrnic_sge *vrnic_recv_wqe_sges(void *wqe)
{
	return (struct vrnic_sge *)((uint8_t *)wqe +
				    VRNIC_RECV_WQE_HEADER_SIZE);
}

/* Bytes a send WQE of 2^wqe_shift bytes holds after its header (and ud_av). */
static inline uint32_t vrnic_send_wqe_room(uint32_t wqe_shift, bool datagram)
{
	return (1u << wqe_shift) - (datagram ? VRNIC_UD_PAYLOAD_OFFSET :
				    VRNIC_SEND_WQE_HEADER_SIZE);
}

/* Bytes an XRC_INI send WQE of 2^wqe_shift bytes holds after its xrc_seg. */
static inline uint32_t vrnic_xrc_send_wqe_room(uint32_t wqe_shift)
{
	return (1u << wqe_shift) - VRNIC_XRC_PAYLOAD_OFFSET;
}

static inline void vrnic_set_send_wqe_header(struct vrnic_send_wqe_header *hdr,
					     const struct vrnic_send_fields *f)
{
	hdr->opcode = f->opcode;
	hdr->flags = f->flags;
	hdr->num_sge = f->num_sge;
	hdr->reserved0 = 0;
	memcpy(hdr->imm_data, &f->imm_data, sizeof(hdr->imm_data));
	hdr->wr_id = vrnic_cpu_to_le64(f->wr_id);
	hdr->remote_addr = vrnic_cpu_to_le64(f->remote_addr);
	hdr->rkey = vrnic_cpu_to_le32(f->rkey);
	hdr->inline_len = vrnic_cpu_to_le32(f->inline_len);
}

static inline void vrnic_set_sge(struct vrnic_sge *sge, uint64_t addr,
				 uint32_t length, uint32_t lkey)
{
	sge->addr = vrnic_cpu_to_le64(addr);
	sge->length = vrnic_cpu_to_le32(length);
	sge->lkey = vrnic_cpu_to_le32(lkey);
}

/* The segment after the header of an atomic, REG_MR or BIND_MW WQE. */
static inline void *vrnic_send_wqe_seg(void *wqe)
{
	return (uint8_t *)wqe + VRNIC_SEND_WQE_HEADER_SIZE;
}

/* The one SGE of an atomic WQE, after its atomic_seg. */
static inline struct vrnic_sge *vrnic_atomic_wqe_sge(void *wqe)
{
	return (struct vrnic_sge *)((uint8_t *)vrnic_send_wqe_seg(wqe) +
				    VRNIC_ATOMIC_SEG_SIZE);
}

static inline void vrnic_set_atomic_seg(struct vrnic_atomic_seg *seg,
					uint64_t compare_add, uint64_t swap)
{
	seg->compare_add = vrnic_cpu_to_le64(compare_add);
	seg->swap = vrnic_cpu_to_le64(swap);
}

/* The target SRQ of an XRC_INI request. */
static inline void vrnic_set_xrc_seg(struct vrnic_xrc_seg *seg,
				     uint32_t remote_srqn)
{
	seg->remote_srqn = vrnic_cpu_to_le32(remote_srqn);
	seg->reserved0 = 0;
	seg->reserved1 = 0;
}

/*
 * An atomic's atomic_seg and its one SGE, from @payload on: after the
 * header (vrnic_send_wqe_seg()) or, for XRC_INI, after the xrc_seg.
 */
static inline void vrnic_set_atomic_payload(void *payload,
					    const struct vrnic_atomic_fields *a)
{
	vrnic_set_atomic_seg(payload, a->compare_add, a->swap);
	vrnic_set_sge((struct vrnic_sge *)((uint8_t *)payload +
					   VRNIC_ATOMIC_SEG_SIZE),
		      a->addr, a->length, a->lkey);
}

static inline void vrnic_set_reg_mr_seg(struct vrnic_reg_mr_seg *seg,
					const struct vrnic_reg_mr_fields *f)
{
	seg->iova = vrnic_cpu_to_le64(f->iova);
	seg->length = vrnic_cpu_to_le64(f->length);
	seg->page_list = vrnic_cpu_to_le64(f->page_list);
	seg->npages = vrnic_cpu_to_le16(f->npages);
	seg->page_shift = f->page_shift;
	seg->reserved0 = 0;
	seg->access = vrnic_cpu_to_le32(f->access);
}

static inline void vrnic_set_bind_mw_seg(struct vrnic_bind_mw_seg *seg,
					 const struct vrnic_bind_mw_fields *f)
{
	seg->addr = vrnic_cpu_to_le64(f->addr);
	seg->length = vrnic_cpu_to_le64(f->length);
	seg->mr_lkey = vrnic_cpu_to_le32(f->mr_lkey);
	seg->access = vrnic_cpu_to_le32(f->access);
	seg->reserved0 = 0;
}

/*
 * A whole ATOMIC_CMP_AND_SWP or ATOMIC_FETCH_AND_ADD WQE (@opcode): header
 * with remote_addr and rkey, atomic_seg, one SGE (SPEC "Atomics").
 */
static inline void vrnic_set_atomic_wqe(void *wqe, uint8_t opcode,
					uint8_t flags, uint64_t wr_id,
					const struct vrnic_atomic_fields *a)
{
	struct vrnic_send_fields f = {
		.opcode = opcode, .flags = flags, .num_sge = 1, .wr_id = wr_id,
		.remote_addr = a->remote_addr, .rkey = a->rkey,
	};

	vrnic_set_send_wqe_header(wqe, &f);
	vrnic_set_atomic_payload(vrnic_send_wqe_seg(wqe), a);
}

/*
 * A whole XRC_INI atomic WQE: as vrnic_set_atomic_wqe(), with the xrc_seg
 * naming @remote_srqn between the header and the atomic_seg.
 */
static inline void vrnic_set_xrc_atomic_wqe(void *wqe, uint8_t opcode,
					    uint8_t flags, uint64_t wr_id,
					    uint32_t remote_srqn,
					    const struct vrnic_atomic_fields *a)
{
	struct vrnic_send_fields f = {
		.opcode = opcode, .flags = flags, .num_sge = 1, .wr_id = wr_id,
		.remote_addr = a->remote_addr, .rkey = a->rkey,
	};

	vrnic_set_send_wqe_header(wqe, &f);
	vrnic_set_xrc_seg(vrnic_send_wqe_xrc_seg(wqe), remote_srqn);
	vrnic_set_atomic_payload(vrnic_xrc_send_wqe_payload(wqe), a);
}

/* A whole REG_MR WQE: header with the MR's new @key, reg_mr_seg. */
static inline void vrnic_set_reg_mr_wqe(void *wqe, uint8_t flags,
					uint64_t wr_id, uint32_t key,
					const struct vrnic_reg_mr_fields *r)
{
	struct vrnic_send_fields f = {
		.opcode = VRNIC_WR_OPCODE_REG_MR, .flags = flags,
		.wr_id = wr_id, .rkey = key,
	};

	vrnic_set_send_wqe_header(wqe, &f);
	vrnic_set_reg_mr_seg(vrnic_send_wqe_seg(wqe), r);
}

/* A whole LOCAL_INV WQE: a header naming the @key to invalidate. */
static inline void vrnic_set_local_inv_wqe(void *wqe, uint8_t flags,
					   uint64_t wr_id, uint32_t key)
{
	struct vrnic_send_fields f = {
		.opcode = VRNIC_WR_OPCODE_LOCAL_INV, .flags = flags,
		.wr_id = wr_id, .rkey = key,
	};

	vrnic_set_send_wqe_header(wqe, &f);
}

/* A whole BIND_MW WQE: header with the window's @new_rkey, bind_mw_seg. */
static inline void vrnic_set_bind_mw_wqe(void *wqe, uint8_t flags,
					 uint64_t wr_id, uint32_t new_rkey,
					 const struct vrnic_bind_mw_fields *b)
{
	struct vrnic_send_fields f = {
		.opcode = VRNIC_WR_OPCODE_BIND_MW, .flags = flags,
		.wr_id = wr_id, .rkey = new_rkey,
	};

	vrnic_set_send_wqe_header(wqe, &f);
	vrnic_set_bind_mw_seg(vrnic_send_wqe_seg(wqe), b);
}

static inline void vrnic_set_ud_av(struct vrnic_ud_av *av,
				   const struct vrnic_av *src)
{
	av->remote_qpn = vrnic_cpu_to_le32(src->remote_qpn);
	av->remote_qkey = vrnic_cpu_to_le32(src->remote_qkey);
	av->dlid = vrnic_cpu_to_le16(src->dlid);
	av->sl = src->sl;
	av->is_global = src->is_global;
	av->sgid_index = src->sgid_index;
	av->hop_limit = src->hop_limit;
	av->traffic_class = src->traffic_class;
	av->reserved0 = 0;
	av->flow_label = vrnic_cpu_to_le32(src->flow_label);
	memcpy(av->dgid, src->dgid, sizeof(av->dgid));
	memcpy(av->dmac, src->dmac, sizeof(av->dmac));
	memset(av->reserved1, 0, sizeof(av->reserved1));
}

static inline void vrnic_set_recv_wqe_header(struct vrnic_recv_wqe_header *hdr,
					     uint64_t wr_id, uint8_t num_sge)
{
	hdr->wr_id = vrnic_cpu_to_le64(wr_id);
	hdr->num_sge = num_sge;
	memset(hdr->reserved0, 0, sizeof(hdr->reserved0));
}

/*
 * Phase bit a valid CQE at free-running index @ci carries: 1 on the first
 * pass over the ring, flipping on every wrap.
 */
static inline uint8_t vrnic_cqe_phase(uint32_t ci, uint32_t depth_log2)
{
	return ((ci >> depth_log2) & 1) ^ 1;
}

/*
 * Whether the CQE at @ci, whose owner byte (loaded with acquire ordering) is
 * @owner, has been written by the device and not yet consumed.
 */
static inline bool vrnic_cqe_owned(uint8_t owner, uint32_t ci,
				   uint32_t depth_log2)
{
	return (owner & 1) == vrnic_cqe_phase(ci, depth_log2);
}

/* Decode a valid CQE (see vrnic_cqe_owned()). */
static inline void vrnic_cqe_decode(const struct vrnic_cqe *cqe,
				    struct vrnic_cqe_fields *f)
{
	f->wr_id = vrnic_le64_to_cpu(cqe->wr_id);
	f->byte_len = vrnic_le32_to_cpu(cqe->byte_len);
	memcpy(&f->imm_data, cqe->imm_data, sizeof(f->imm_data));
	f->qpn = vrnic_le32_to_cpu(cqe->qpn);
	f->src_qp = vrnic_le32_to_cpu(cqe->src_qp);
	f->wqe_index = vrnic_le16_to_cpu(cqe->wqe_index);
	f->opcode = cqe->opcode;
	f->status = cqe->status;
	f->wc_flags = cqe->wc_flags;
	f->vendor_err = cqe->vendor_err;
	f->flags = cqe->flags;
	f->slid = vrnic_le16_to_cpu(cqe->slid);
	f->sl = cqe->sl;
	f->network_type = cqe->network_type;
	f->pkey_index = vrnic_le16_to_cpu(cqe->pkey_index);
	f->srqn = vrnic_le32_to_cpu(cqe->srqn);
	f->invalidated_rkey = 0;
	if (f->wc_flags & VRNIC_WC_FLAGS_WITH_INV) {
		__le32 key;

		/* Unlike immediate data, the key is little-endian. */
		memcpy(&key, cqe->imm_data, sizeof(key));
		f->invalidated_rkey = vrnic_le32_to_cpu(key);
	}
}

#ifdef __KERNEL__
/*
 * The ib_wc opcode of a CQE opcode. SPEC's wc_opcode values are those of
 * ibv_wc_opcode, which ib_wc_opcode shares up to LOCAL_INV and for the
 * receives; REG_MR, seen only by kernel QPs, has a kernel value of its own.
 */
static inline enum ib_wc_opcode vrnic_cqe_ib_opcode(uint8_t opcode)
{
	switch (opcode) {
	case VRNIC_WC_OPCODE_SEND:
		return IB_WC_SEND;
	case VRNIC_WC_OPCODE_RDMA_WRITE:
		return IB_WC_RDMA_WRITE;
	case VRNIC_WC_OPCODE_RDMA_READ:
		return IB_WC_RDMA_READ;
	case VRNIC_WC_OPCODE_COMP_SWAP:
		return IB_WC_COMP_SWAP;
	case VRNIC_WC_OPCODE_FETCH_ADD:
		return IB_WC_FETCH_ADD;
	case VRNIC_WC_OPCODE_BIND_MW:
		return IB_WC_BIND_MW;
	case VRNIC_WC_OPCODE_LOCAL_INV:
		return IB_WC_LOCAL_INV;
	case VRNIC_WC_OPCODE_REG_MR:
		return IB_WC_REG_MR;
	case VRNIC_WC_OPCODE_RECV:
		return IB_WC_RECV;
	case VRNIC_WC_OPCODE_RECV_RDMA_WITH_IMM:
		return IB_WC_RECV_RDMA_WITH_IMM;
	default:
		return opcode;	/* not a wc_opcode: passed on as it came */
	}
}

/*
 * The ib_wc flags of a CQE's wc_flags (SPEC's are ibv_wc's: WITH_INV is bit
 * 3 there, IB_WC_WITH_INVALIDATE bit 2).
 */
static inline int vrnic_cqe_ib_wc_flags(uint8_t wc_flags)
{
	return (wc_flags & VRNIC_WC_FLAGS_GRH ? IB_WC_GRH : 0) |
	       (wc_flags & VRNIC_WC_FLAGS_WITH_IMM ? IB_WC_WITH_IMM : 0) |
	       (wc_flags & VRNIC_WC_FLAGS_WITH_INV ? IB_WC_WITH_INVALIDATE : 0);
}
#endif

#endif /* VRNIC_WQE_H */
