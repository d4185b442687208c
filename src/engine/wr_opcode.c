/*
 * The work-request opcode table and the QP type descriptors (see
 * wr_opcode.h).  Rows follow the IBA's valid operations per service type:
 * SEND on all three, RDMA WRITE on RC and UC, READ, atomics and atomic
 * write (IBA 1.5) on RC only.  The remote access each needs is the
 * responder's (an atomic write needs REMOTE_WRITE, as on rxe).
 */
#include "engine/wr_opcode.h"
#include "wire/opcode.h"

#include <stddef.h>

#define RC SV_QPT_BIT(IBV_QPT_RC)
#define UC SV_QPT_BIT(IBV_QPT_UC)
#define UD SV_QPT_BIT(IBV_QPT_UD)
#define XRC SV_QPT_BIT(IBV_QPT_XRC_SEND) /* what RC does, from an XRC send QP */

/* indexed by enum ibv_wr_opcode */
static const struct sv_wr_opcode_info wr_opcodes[] = {
	[IBV_WR_SEND] = {
		"SEND", RC | UC | UD | XRC,
		SV_WRF_SEND | SV_WRF_INLINE_OK | SV_WRF_CONSUMES_RECV | SV_WRF_DIRECT_RECV,
		SV_OP_SEND_FIRST, SV_OP_SEND_MIDDLE, SV_OP_SEND_LAST, SV_OP_SEND_ONLY,
		IBV_WC_SEND, 0, 0, 0 },
	[IBV_WR_SEND_WITH_IMM] = {
		"SEND_WITH_IMM", RC | UC | UD | XRC,
		SV_WRF_SEND | SV_WRF_IMM | SV_WRF_INLINE_OK | SV_WRF_CONSUMES_RECV |
			SV_WRF_DIRECT_RECV,
		SV_OP_SEND_FIRST, SV_OP_SEND_MIDDLE, SV_OP_SEND_LAST_IMM, SV_OP_SEND_ONLY_IMM,
		IBV_WC_SEND, 0, 0, 0 },
	[IBV_WR_RDMA_WRITE] = {
		"RDMA_WRITE", RC | UC | XRC, SV_WRF_WRITE | SV_WRF_INLINE_OK | SV_WRF_DIRECT,
		SV_OP_WRITE_FIRST, SV_OP_WRITE_MIDDLE, SV_OP_WRITE_LAST, SV_OP_WRITE_ONLY,
		IBV_WC_RDMA_WRITE, 0, 0, IBV_ACCESS_REMOTE_WRITE },
	[IBV_WR_RDMA_WRITE_WITH_IMM] = {
		"RDMA_WRITE_WITH_IMM", RC | UC | XRC,
		SV_WRF_WRITE | SV_WRF_IMM | SV_WRF_INLINE_OK | SV_WRF_CONSUMES_RECV |
			SV_WRF_DIRECT_RECV,
		SV_OP_WRITE_FIRST, SV_OP_WRITE_MIDDLE, SV_OP_WRITE_LAST_IMM, SV_OP_WRITE_ONLY_IMM,
		IBV_WC_RDMA_WRITE, 0, 0, IBV_ACCESS_REMOTE_WRITE },
	[IBV_WR_RDMA_READ] = {
		"RDMA_READ", RC | XRC, SV_WRF_READ | SV_WRF_DIRECT,
		SV_OP_READ_REQUEST, SV_OP_READ_REQUEST, SV_OP_READ_REQUEST, SV_OP_READ_REQUEST,
		IBV_WC_RDMA_READ, IBV_ACCESS_LOCAL_WRITE, 0, IBV_ACCESS_REMOTE_READ },
	[IBV_WR_ATOMIC_CMP_AND_SWP] = {
		"ATOMIC_CMP_AND_SWP", RC | XRC, SV_WRF_ATOMIC | SV_WRF_DIRECT,
		SV_OP_CMP_SWAP, SV_OP_CMP_SWAP, SV_OP_CMP_SWAP, SV_OP_CMP_SWAP,
		IBV_WC_COMP_SWAP, IBV_ACCESS_LOCAL_WRITE, 8, IBV_ACCESS_REMOTE_ATOMIC },
	[IBV_WR_ATOMIC_FETCH_AND_ADD] = {
		"ATOMIC_FETCH_AND_ADD", RC | XRC, SV_WRF_ATOMIC | SV_WRF_DIRECT,
		SV_OP_FETCH_ADD, SV_OP_FETCH_ADD, SV_OP_FETCH_ADD, SV_OP_FETCH_ADD,
		IBV_WC_FETCH_ADD, IBV_ACCESS_LOCAL_WRITE, 8, IBV_ACCESS_REMOTE_ATOMIC },
	[IBV_WR_SEND_WITH_INV] = {
		"SEND_WITH_INV", RC | XRC, SV_WRF_SEND | SV_WRF_INLINE_OK | SV_WRF_CONSUMES_RECV,
		SV_OP_SEND_FIRST, SV_OP_SEND_MIDDLE, SV_OP_SEND_LAST_INV, SV_OP_SEND_ONLY_INV,
		IBV_WC_SEND, 0, 0, 0 },
	[IBV_WR_BIND_MW] = {
		"BIND_MW", RC | UC | XRC, SV_WRF_LOCAL, 0, 0, 0, 0, IBV_WC_BIND_MW, 0, 0, 0 },
	[IBV_WR_LOCAL_INV] = {
		"LOCAL_INV", RC | UC | XRC, SV_WRF_LOCAL, 0, 0, 0, 0, IBV_WC_LOCAL_INV, 0, 0, 0 },
	[IBV_WR_ATOMIC_WRITE] = {
		"ATOMIC_WRITE", RC | XRC, SV_WRF_ATOMIC_WRITE | SV_WRF_DIRECT,
		SV_OP_ATOMIC_WRITE, SV_OP_ATOMIC_WRITE, SV_OP_ATOMIC_WRITE, SV_OP_ATOMIC_WRITE,
		IBV_WC_ATOMIC_WRITE, 0, 8, IBV_ACCESS_REMOTE_WRITE },
};

const struct sv_wr_opcode_info *sv_wr_opcode_info(enum ibv_wr_opcode op)
{
	if ((unsigned int)op >= sizeof(wr_opcodes) / sizeof(wr_opcodes[0]))
		return NULL;
	return wr_opcodes[op].name ? &wr_opcodes[op] : NULL;
}

static const struct sv_qp_type_info qp_types[] = {
	{ IBV_QPT_RC, 0, "RC", SV_OP_RC, true, true, false, true, true, false },
	{ IBV_QPT_UC, 1, "UC", SV_OP_UC, false, true, false, true, true, false },
	{ IBV_QPT_UD, 2, "UD", SV_OP_UD, false, false, true, true, true, false },
	/* XRC: an RC connection whose send end has no receive queue and
	 * whose receive end has no send queue and delivers into the XRC SRQ
	 * each request names */
	{ IBV_QPT_XRC_SEND, 0, "XRC_SEND", SV_OP_XRC, true, true, false, true, false, true },
	{ IBV_QPT_XRC_RECV, 0, "XRC_RECV", SV_OP_XRC, true, true, false, false, true, true },
};

const struct sv_qp_type_info *sv_qp_type_info(enum ibv_qp_type type)
{
	for (size_t i = 0; i < sizeof(qp_types) / sizeof(qp_types[0]); i++)
		if (qp_types[i].type == type)
			return &qp_types[i];
	return NULL;
}
