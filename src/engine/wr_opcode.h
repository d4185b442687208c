/*
 * Work-request opcodes and QP types, as tables.  What the verbs and the
 * three roles need to know about an IBV_WR_* opcode (which QP types take
 * it, which wire opcodes carry it, what its completion says, what its local
 * buffers must allow) is one row of sv_wr_opcodes[] (wr_opcode.c); what
 * they need to know about a QP type is one sv_qp_type_info.  Adding an
 * opcode is a row here plus its handling in the role that executes it;
 * code asks the tables instead of switching on opcodes or QP types.
 */
#ifndef SV_WR_OPCODE_H
#define SV_WR_OPCODE_H

#include <infiniband/verbs.h>
#include <stdbool.h>
#include <stdint.h>

enum {
	SV_WRF_SEND = 1 << 0,          /* two-sided: consumes a receive at the target */
	SV_WRF_WRITE = 1 << 1,         /* RDMA WRITE (RETH on the first packet) */
	SV_WRF_READ = 1 << 2,          /* RDMA READ: response data comes back */
	SV_WRF_ATOMIC = 1 << 3,        /* 8-byte atomic: one packet, ATOMIC ACK back */
	SV_WRF_IMM = 1 << 4,           /* carries immediate data (ImmDt on the last packet) */
	SV_WRF_INLINE_OK = 1 << 5,     /* IBV_SEND_INLINE applies (the payload goes out) */
	SV_WRF_CONSUMES_RECV = 1 << 6, /* the target's completion uses a receive WQE */
	SV_WRF_ATOMIC_WRITE = 1 << 7,  /* 8 bytes stored at once; copied at post, like
					* inline data; a READ response without data back */
	SV_WRF_LOCAL = 1 << 8,         /* a local operation of the send queue (bind,
					* invalidate): nothing goes on the wire */
	SV_WRF_DIRECT = 1 << 9,        /* one-sided, nothing asked of the target's CPU:
					* the initiator may execute it on a peer of
					* its host's memory (direct_exec.h) */
	SV_WRF_DIRECT_RECV = 1 << 10,  /* consumes a receive, and the initiator may
					* complete that receive of a peer of its host
					* itself (direct_exec.h, direct_recv.h) */
};
/* the requests that wait for a response (and count against max_rd_atomic) */
#define SV_WRF_RD_ATOMIC (SV_WRF_READ | SV_WRF_ATOMIC | SV_WRF_ATOMIC_WRITE)

#define SV_QPT_BIT(t) (1u << (t))

struct sv_wr_opcode_info {
	const char *name;
	uint32_t qp_types;     /* SV_QPT_BIT() of each QP type that takes it */
	uint32_t flags;        /* SV_WRF_* */
	/* low five bits of the wire opcode of each packet of the message; a
	 * single-packet request (READ request, atomic) uses `only` for all */
	uint8_t wire_first, wire_middle, wire_last, wire_only;
	enum ibv_wc_opcode wc_opcode;
	unsigned int local_access; /* what the local SGL's MRs must allow */
	uint32_t min_len;          /* shortest local buffer (atomics: 8) */
	/* what the target's QP and the MR its rkey names must allow
	 * (IBV_ACCESS_REMOTE_*; 0: no rkey); the responder's and the direct
	 * executor's checks (access_check.h) */
	unsigned int remote_access;
};

/* The row of opcode op, or NULL if softverbs does not execute it. */
const struct sv_wr_opcode_info *sv_wr_opcode_info(enum ibv_wr_opcode op);

/* READ, atomics and atomic write: the requests that wait for a response. */
static inline bool sv_wr_rd_atomic(const struct sv_wr_opcode_info *op)
{
	return op->flags & SV_WRF_RD_ATOMIC;
}

/* An atomic or an atomic write: one 8-byte word, at an aligned address. */
static inline bool sv_wr_word(const struct sv_wr_opcode_info *op)
{
	return op->flags & (SV_WRF_ATOMIC | SV_WRF_ATOMIC_WRITE);
}

/* Does the request itself carry the message's bytes (not READ, not the atomics)? */
static inline bool sv_wr_sends_payload(const struct sv_wr_opcode_info *op)
{
	return !(op->flags & (SV_WRF_READ | SV_WRF_ATOMIC));
}

/* What a QP type means to the roles. */
struct sv_qp_type_info {
	enum ibv_qp_type type;
	uint8_t index;       /* 0 RC (and XRC), 1 UC, 2 UD: its column in per-type tables */
	const char *name;
	uint8_t wire_class;  /* high three bits of its wire opcodes (SV_OP_RC/UC/UD/XRC) */
	bool reliable;       /* ACKs, retries, READ and atomics (RC) */
	bool connected;      /* one peer set by ibv_modify_qp; else an AH per WR (UD) */
	bool ud;             /* unreliable datagram: a message is at most one MTU and carries a GRH */
	bool sends;          /* has a send queue: the requester role (not XRC_RECV) */
	bool receives;       /* takes requests: the responder role (not XRC_SEND) */
	bool xrc;            /* XRC: requests name an XRC SRQ (XRCETH) */
};

/* NULL for a QP type softverbs does not implement. */
const struct sv_qp_type_info *sv_qp_type_info(enum ibv_qp_type type);

#endif
