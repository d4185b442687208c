/*
 * Opcode table.  Each row lists the extension headers in wire order; header
 * offsets are derived once at start-up from that order so that the table
 * stays declarative.
 */
#include "wire/opcode.h"
#include "wire/wire.h"

#include <pthread.h>

#define REQ_SEND (SV_OPF_REQUEST | SV_OPF_SEND | SV_OPF_PAYLOAD)
#define REQ_WRITE (SV_OPF_REQUEST | SV_OPF_WRITE | SV_OPF_PAYLOAD)
#define FL (SV_OPF_FIRST | SV_OPF_LAST)

struct row {
	uint8_t opcode;
	const char *name;
	uint32_t mask;
};

/* Rows for the low five bits; transports (RC/UC/UD/XRC) enable subsets below. */
static const struct row rows[] = {
	{ SV_OP_SEND_FIRST, "SEND_FIRST", REQ_SEND | SV_OPF_FIRST },
	{ SV_OP_SEND_MIDDLE, "SEND_MIDDLE", REQ_SEND },
	{ SV_OP_SEND_LAST, "SEND_LAST", REQ_SEND | SV_OPF_LAST },
	{ SV_OP_SEND_LAST_IMM, "SEND_LAST_WITH_IMMEDIATE", REQ_SEND | SV_OPF_LAST | SV_HDR_IMMDT },
	{ SV_OP_SEND_ONLY, "SEND_ONLY", REQ_SEND | FL },
	{ SV_OP_SEND_ONLY_IMM, "SEND_ONLY_WITH_IMMEDIATE", REQ_SEND | FL | SV_HDR_IMMDT },
	{ SV_OP_WRITE_FIRST, "RDMA_WRITE_FIRST", REQ_WRITE | SV_OPF_FIRST | SV_HDR_RETH },
	{ SV_OP_WRITE_MIDDLE, "RDMA_WRITE_MIDDLE", REQ_WRITE },
	{ SV_OP_WRITE_LAST, "RDMA_WRITE_LAST", REQ_WRITE | SV_OPF_LAST },
	{ SV_OP_WRITE_LAST_IMM, "RDMA_WRITE_LAST_WITH_IMMEDIATE", REQ_WRITE | SV_OPF_LAST | SV_HDR_IMMDT },
	{ SV_OP_WRITE_ONLY, "RDMA_WRITE_ONLY", REQ_WRITE | FL | SV_HDR_RETH },
	{ SV_OP_WRITE_ONLY_IMM, "RDMA_WRITE_ONLY_WITH_IMMEDIATE", REQ_WRITE | FL | SV_HDR_RETH | SV_HDR_IMMDT },
	{ SV_OP_READ_REQUEST, "RDMA_READ_REQUEST", SV_OPF_REQUEST | SV_OPF_READ | FL | SV_HDR_RETH },
	{ SV_OP_READ_RESP_FIRST, "RDMA_READ_RESPONSE_FIRST", SV_OPF_RESPONSE | SV_OPF_RDRESP | SV_OPF_PAYLOAD | SV_OPF_FIRST | SV_HDR_AETH },
	{ SV_OP_READ_RESP_MIDDLE, "RDMA_READ_RESPONSE_MIDDLE", SV_OPF_RESPONSE | SV_OPF_RDRESP | SV_OPF_PAYLOAD },
	{ SV_OP_READ_RESP_LAST, "RDMA_READ_RESPONSE_LAST", SV_OPF_RESPONSE | SV_OPF_RDRESP | SV_OPF_PAYLOAD | SV_OPF_LAST | SV_HDR_AETH },
	{ SV_OP_READ_RESP_ONLY, "RDMA_READ_RESPONSE_ONLY", SV_OPF_RESPONSE | SV_OPF_RDRESP | SV_OPF_PAYLOAD | FL | SV_HDR_AETH },
	{ SV_OP_ACK, "ACKNOWLEDGE", SV_OPF_RESPONSE | FL | SV_HDR_AETH },
	{ SV_OP_ATOMIC_ACK, "ATOMIC_ACKNOWLEDGE", SV_OPF_RESPONSE | FL | SV_HDR_AETH | SV_HDR_ATMACK },
	{ SV_OP_CMP_SWAP, "COMPARE_SWAP", SV_OPF_REQUEST | SV_OPF_ATOMIC | FL | SV_HDR_ATMETH },
	{ SV_OP_FETCH_ADD, "FETCH_ADD", SV_OPF_REQUEST | SV_OPF_ATOMIC | FL | SV_HDR_ATMETH },
	{ SV_OP_SEND_LAST_INV, "SEND_LAST_WITH_INVALIDATE", REQ_SEND | SV_OPF_LAST | SV_HDR_IETH },
	{ SV_OP_SEND_ONLY_INV, "SEND_ONLY_WITH_INVALIDATE", REQ_SEND | FL | SV_HDR_IETH },
	{ SV_OP_ATOMIC_WRITE, "ATOMIC_WRITE",
	  SV_OPF_REQUEST | SV_OPF_ATOMIC_WRITE | SV_OPF_PAYLOAD | FL | SV_HDR_RETH },
};

static struct sv_opcode_info table[256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void add(uint8_t opcode, const struct row *r, uint32_t extra)
{
	struct sv_opcode_info *i = &table[opcode];
	uint32_t m = r->mask | extra;
	uint8_t off = sizeof(struct sv_bth);

	i->name = r->name;
	i->mask = m;
	/* wire order of extension headers: XRCETH, DETH, RETH, AETH, ATMETH, ATMACK, IMMDT, IETH */
	if (m & SV_HDR_XRCETH) {
		i->off_xrceth = off;
		off += sizeof(struct sv_xrceth);
	}
	if (m & SV_HDR_DETH) {
		i->off_deth = off;
		off += sizeof(struct sv_deth);
	}
	if (m & SV_HDR_RETH) {
		i->off_reth = off;
		off += sizeof(struct sv_reth);
	}
	if (m & SV_HDR_AETH) {
		i->off_aeth = off;
		off += sizeof(struct sv_aeth);
	}
	if (m & SV_HDR_ATMETH) {
		i->off_atmeth = off;
		off += sizeof(struct sv_atmeth);
	}
	if (m & SV_HDR_ATMACK) {
		i->off_atmack = off;
		off += sizeof(struct sv_atmack);
	}
	if (m & SV_HDR_IMMDT) {
		i->off_immdt = off;
		off += sizeof(struct sv_immdt);
	}
	if (m & SV_HDR_IETH) {
		i->off_ieth = off;
		off += sizeof(struct sv_ieth);
	}
	if (m & SV_HDR_CNP_RSVD)
		off += 16;
	if (m & SV_HDR_RELAY)
		off += sizeof(struct sv_xrc_relay);
	if (m & SV_HDR_CTRL)
		off += sizeof(struct sv_xrc_ctrl);
	i->hdr_len = off;
}

/* the opcodes outside the four transport classes */
static const struct row cnp_row = { SV_OP_CNP, "CNP", SV_OPF_CNP | FL | SV_HDR_CNP_RSVD };
static const struct row relay_row = { SV_OP_XRC_RELAY, "XRC_RELAY (softverbs)",
				      SV_OPF_RELAY | SV_OPF_PAYLOAD | SV_HDR_RELAY };
static const struct row ctrl_row = { SV_OP_XRC_CTRL, "XRC_CONTROL (softverbs)",
				     SV_OPF_CTRL | SV_OPF_PAYLOAD | FL | SV_HDR_CTRL };

static void table_init(void)
{
	add(SV_OP_CNP, &cnp_row, 0);
	add(SV_OP_XRC_RELAY, &relay_row, 0);
	add(SV_OP_XRC_CTRL, &ctrl_row, 0);
	for (size_t k = 0; k < sizeof(rows) / sizeof(rows[0]); k++) {
		const struct row *r = &rows[k];

		add(SV_OP_RC | r->opcode, r, 0);
		/* XRC: RC's operations; each request names its XRC SRQ */
		add(SV_OP_XRC | r->opcode, r, (r->mask & SV_OPF_REQUEST) ? SV_HDR_XRCETH : 0);
		/* UC: sends and writes only, never acknowledged (and no
		 * invalidation: IBA allows it on RC only) */
		if ((r->mask & (SV_OPF_SEND | SV_OPF_WRITE)) && !(r->mask & SV_HDR_IETH))
			add(SV_OP_UC | r->opcode, r, 0);
		/* UD: single-packet sends carrying a DETH */
		if (r->opcode == SV_OP_SEND_ONLY || r->opcode == SV_OP_SEND_ONLY_IMM)
			add(SV_OP_UD | r->opcode, r, SV_HDR_DETH);
	}
}

const struct sv_opcode_info *sv_opcode_info(uint8_t opcode)
{
	pthread_once(&table_once, table_init);
	return table[opcode].name ? &table[opcode] : NULL;
}
