/*
 * The softverbs wire format: InfiniBand-transport-like packets framed over a
 * byte stream transport.  Every multi-byte field is big-endian (network order),
 * as on an IB/RoCE wire, so captures read naturally and hosts of any
 * endianness interoperate.
 *
 *   frame   := u32 frame_len (bytes after this field) | packet
 *   packet  := BTH | extension headers (by opcode, see opcode.c) | payload
 *
 * The first frame in each direction of a connection is the transport's
 * HELLO (src/transport/conn.c), not a packet.
 */
#ifndef SV_WIRE_H
#define SV_WIRE_H

#include <stdint.h>

/* Base transport header. */
struct sv_bth {
	uint8_t opcode;
	uint8_t flags; /* SV_BTH_SE, SV_BTH_ACKREQ */
	uint16_t pkey;
	uint32_t dqpn; /* destination QP number (24 bits used) */
	uint32_t psn;  /* packet sequence number (24 bits used) */
} __attribute__((packed));

#define SV_BTH_SE 0x80     /* solicited event */
#define SV_BTH_ACKREQ 0x40 /* requester wants an ACK for this packet */
#define SV_BTH_GPUREF 0x20 /* the payload is named, not carried: struct sv_gpu_ref */
/* The network marked it congested (RoCEv2: IP ECN CE on arrival; any
 * transport: SOFTVERBS_FAULTS ce=P), so its responder sends a CNP. */
#define SV_BTH_CE 0x10
/* SOFTVERBS_FAULTS corrupt=P on a datagram transport: one bit of the
 * datagram flips after its ICRC is computed (rocev2.c); never on a wire */
#define SV_BTH_CORRUPT 0x08
/* An answer to a relayed XRC request, from the SRQ's process to the receive
 * QP's (engine/xrc_relay.c; shm or tcp): no fault is injected into it, nor
 * into the relay, which are no network's packets */
#define SV_BTH_RELAYED 0x04

/* RDMA extended transport header: WRITE first/only and READ request. */
struct sv_reth {
	uint64_t va;
	uint32_t rkey;
	uint32_t dma_len;
} __attribute__((packed));

/* Atomic extended transport header. */
struct sv_atmeth {
	uint64_t va;
	uint32_t rkey;
	uint64_t swap_add;
	uint64_t compare;
} __attribute__((packed));

/* ACK extended transport header: syndrome (8 bits) | MSN (24 bits). */
struct sv_aeth {
	uint32_t syn_msn;
} __attribute__((packed));

/* Atomic acknowledge: the value found in target memory before the op. */
struct sv_atmack {
	uint64_t orig;
} __attribute__((packed));

/* Invalidate extended transport header: the rkey SEND_WITH_INV invalidates. */
struct sv_ieth {
	uint32_t rkey;
} __attribute__((packed));

struct sv_immdt {
	uint32_t imm; /* already big-endian in ibv_send_wr; copied verbatim */
} __attribute__((packed));

/* XRC extended transport header: the XRC SRQ a request is for (24 bits). */
struct sv_xrceth {
	uint32_t srqn;
} __attribute__((packed));

/* Datagram extended transport header (UD). */
struct sv_deth {
	uint32_t qkey;
	uint32_t sqpn;
} __attribute__((packed));

/* AETH syndromes (IBA 9.7.5.2.x): top 3 bits select the kind. */
#define SV_AETH_ACK 0x00      /* | credit count; we send "no credit info" */
#define SV_AETH_RNR_NAK 0x20  /* | 5-bit RNR timer code */
#define SV_AETH_NAK 0x60      /* | NAK code below */
#define SV_AETH_TYPE_MASK 0xe0
#define SV_NAK_PSN_SEQ 0
#define SV_NAK_INV_REQ 1
#define SV_NAK_REM_ACCESS 2
#define SV_NAK_REM_OP 3

/*
 * GPU reference (softverbs' own, between two processes of one host over the
 * shm transport, RC SEND/WRITE packets and READ responses only): instead of
 * its payload a packet names where the payload is, in GPU memory of the
 * sender that the receiver opens by CUDA IPC and copies from GPU to GPU (no
 * trip through host memory).  It follows the other headers; the packet's
 * payload length is `len`.  Valid until the packet is acknowledged (RC
 * requests) or its READ completes, as for any RDMA source buffer.
 */
struct sv_gpu_ref {
	uint8_t handle[64]; /* CUipcMemHandle of the allocation */
	uint64_t off;	    /* of the payload in that allocation */
	uint32_t len;	    /* payload bytes */
	uint32_t ordinal;   /* the sender's CUDA device */
} __attribute__((packed));

/*
 * XRC relay (softverbs' own, between two processes of one host, over shm
 * or tcp; xrc_relay.c).  An XRC receive QP whose request names an XRC
 * SRQ of another process of its domain hands the packet on: BTH (opcode
 * SV_OP_XRC_RELAY, dqpn = the SRQ's number, the request's PSN), this
 * header, then the request packet itself, BTH to payload.  The SRQ's
 * process executes it as that receive QP would and sends the answers (ACK,
 * NAK, RNR NAK, READ responses, atomic ACK) to that receive QP, which hands
 * them on to its requester.
 */
struct sv_xrc_relay {
	uint32_t tgt_qpn; /* the XRC receive QP that took the request */
	uint32_t src_qpn; /* the XRC send QP that sent it (the WC's src_qp) */
	uint32_t msn;	  /* the receive QP's MSN before this packet's message */
	uint32_t access;  /* the receive QP's qp_access_flags */
	uint16_t mtu;	  /* its path MTU, bytes */
	uint8_t rnr_timer; /* its min_rnr_timer */
	uint8_t flags;	  /* SV_RELAY_* */
	uint32_t rsvd;
	uint64_t dev;	  /* the domain's file: st_dev and st_ino */
	uint64_t ino;
} __attribute__((packed));

#define SV_RELAY_WINDOW 0x01 /* the first packet since every earlier one was answered */

/*
 * XRC control (softverbs' own, between processes of a host): another process's ibv_open_qp
 * handle of an XRC receive QP asks the QP's process to open, query, modify
 * or close it, and is answered with the same header (reply 1, status an
 * errno).  MODIFY carries, and a QUERY's answer returns, a struct
 * ibv_qp_attr as the two processes of one host lay it out.
 */
struct sv_xrc_ctrl {
	uint8_t op;	/* SV_XRC_CTRL_* */
	uint8_t reply;	/* 1: the answer */
	uint16_t rsvd;
	int32_t status; /* the answer's: 0 or an errno */
	uint32_t id;	/* the asker's, echoed */
	uint32_t qpn;	/* the XRC receive QP */
	int32_t mask;	/* MODIFY: ibv_modify_qp's attr_mask */
	uint32_t rsvd2;
	uint64_t dev;	/* the domain's file */
	uint64_t ino;
} __attribute__((packed));

enum { SV_XRC_CTRL_OPEN = 1, SV_XRC_CTRL_QUERY, SV_XRC_CTRL_MODIFY, SV_XRC_CTRL_CLOSE };

/* Largest header stack any opcode carries, for fixed-size header buffers. */
#define SV_MAX_HDR_LEN \
	(sizeof(struct sv_bth) + sizeof(struct sv_xrceth) + sizeof(struct sv_atmeth) + \
	 sizeof(struct sv_deth) + \
	 sizeof(struct sv_immdt) + sizeof(struct sv_reth) + sizeof(struct sv_aeth) + \
	 sizeof(struct sv_atmack) + sizeof(struct sv_ieth) + sizeof(struct sv_gpu_ref))

/* A packet is at most a max-MTU payload plus headers: it fits a transport
 * frame (SV_MAX_FRAME, transport.h). */
#define SV_MAX_PACKET_LEN (4096 + SV_MAX_HDR_LEN)
/* a relayed XRC request (BTH, XRCETH, AtomicETH the longest headers) too */
_Static_assert(sizeof(struct sv_bth) + sizeof(struct sv_xrc_relay) + sizeof(struct sv_bth) +
		       sizeof(struct sv_xrceth) + sizeof(struct sv_atmeth) + 4096 <=
	       SV_MAX_PACKET_LEN,
	       "a relayed request fits a packet");

#endif
