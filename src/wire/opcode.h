/*
 * The opcode table: for every wire opcode, which extension headers follow the
 * BTH, whether it carries payload, and where it sits in a message.  The
 * requester, responder and completer consult this table instead of scattering
 * per-opcode switches.  Opcode values are those of the InfiniBand transport
 * (RC = 0x00.., UC = 0x20.., UD = 0x60.., XRC = 0xa0..).
 */
#ifndef SV_OPCODE_H
#define SV_OPCODE_H

#include <stdint.h>
#include <stddef.h>

enum sv_opcode {
	SV_OP_RC = 0x00,
	SV_OP_UC = 0x20,
	SV_OP_UD = 0x60,
	SV_OP_XRC = 0xa0, /* requests carry an XRCETH after the BTH */

	/* low 5 bits, shared by RC/UC/UD */
	SV_OP_SEND_FIRST = 0x00,
	SV_OP_SEND_MIDDLE = 0x01,
	SV_OP_SEND_LAST = 0x02,
	SV_OP_SEND_LAST_IMM = 0x03,
	SV_OP_SEND_ONLY = 0x04,
	SV_OP_SEND_ONLY_IMM = 0x05,
	SV_OP_WRITE_FIRST = 0x06,
	SV_OP_WRITE_MIDDLE = 0x07,
	SV_OP_WRITE_LAST = 0x08,
	SV_OP_WRITE_LAST_IMM = 0x09,
	SV_OP_WRITE_ONLY = 0x0a,
	SV_OP_WRITE_ONLY_IMM = 0x0b,
	SV_OP_READ_REQUEST = 0x0c,
	SV_OP_READ_RESP_FIRST = 0x0d,
	SV_OP_READ_RESP_MIDDLE = 0x0e,
	SV_OP_READ_RESP_LAST = 0x0f,
	SV_OP_READ_RESP_ONLY = 0x10,
	SV_OP_ACK = 0x11,
	SV_OP_ATOMIC_ACK = 0x12,
	SV_OP_CMP_SWAP = 0x13,
	SV_OP_FETCH_ADD = 0x14,
	SV_OP_SEND_LAST_INV = 0x16, /* RC only, with an IETH */
	SV_OP_SEND_ONLY_INV = 0x17,
	SV_OP_ATOMIC_WRITE = 0x1d, /* RC only: RETH and 8 bytes, answered by a READ response with none */

	/* RoCEv2's congestion notification packet (IBA annex A17.9.2): to the
	 * requester of requests that arrived marked congested; 16 reserved bytes */
	SV_OP_CNP = 0x81,

	/* softverbs' own, in IBA's manufacturer-specific range (0xc0-0xff),
	 * between two processes of one host (shm, or tcp with the secret)
	 * (xrc_relay.c): an XRC receive QP hands a request packet to the
	 * process whose XRC SRQ it names, which answers it in its name */
	SV_OP_XRC_RELAY = 0xc0,
	/* ibv_open_qp of another process's XRC receive QP: open, query,
	 * modify, close, asked of that process and answered (xrc_relay.c) */
	SV_OP_XRC_CTRL = 0xc1,
};

/* Header-presence and role flags. */
enum {
	SV_HDR_RETH = 1 << 0,
	SV_HDR_AETH = 1 << 1,
	SV_HDR_ATMETH = 1 << 2,
	SV_HDR_ATMACK = 1 << 3,
	SV_HDR_IMMDT = 1 << 4,
	SV_HDR_DETH = 1 << 5,
	SV_HDR_IETH = 1 << 6,
	SV_HDR_XRCETH = 1 << 7,
	SV_HDR_CNP_RSVD = 1 << 19, /* a CNP's 16 reserved bytes */
	SV_HDR_RELAY = 1 << 21,    /* struct sv_xrc_relay */
	SV_HDR_CTRL = 1 << 22,     /* struct sv_xrc_ctrl */

	SV_OPF_PAYLOAD = 1 << 8,  /* may carry payload */
	SV_OPF_FIRST = 1 << 9,    /* first packet of a message */
	SV_OPF_LAST = 1 << 10,    /* last packet of a message */
	SV_OPF_REQUEST = 1 << 11, /* travels requester -> responder */
	SV_OPF_SEND = 1 << 12,
	SV_OPF_WRITE = 1 << 13,
	SV_OPF_READ = 1 << 14,    /* read request */
	SV_OPF_ATOMIC = 1 << 15,  /* atomic request */
	SV_OPF_RESPONSE = 1 << 16,/* travels responder -> requester */
	SV_OPF_RDRESP = 1 << 17,  /* read response */
	SV_OPF_ATOMIC_WRITE = 1 << 18, /* atomic write request */
	SV_OPF_CNP = 1 << 20,     /* congestion notification (neither request nor response) */
	SV_OPF_RELAY = 1 << 23,   /* SV_OP_XRC_RELAY (neither request nor response) */
	SV_OPF_CTRL = 1 << 24,    /* SV_OP_XRC_CTRL */
};

struct sv_opcode_info {
	const char *name;
	uint32_t mask;   /* SV_HDR_* | SV_OPF_* */
	uint8_t hdr_len; /* BTH + extension headers */
	/* offsets of extension headers from packet start (0 = absent) */
	uint8_t off_reth, off_aeth, off_atmeth, off_atmack, off_immdt, off_deth, off_ieth, off_xrceth;
};

/* NULL for opcodes softverbs does not know (the packet is malformed). */
const struct sv_opcode_info *sv_opcode_info(uint8_t opcode);

#endif
