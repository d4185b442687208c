/*
 * libFuzzer harness: the engine's check path.  Each input is one packet
 * that the peer a device's QPs are connected to sends them, over the real
 * connection (a live device in this process, its TCP endpoint, the peer
 * speaking the wire format itself: tests/transport/wire_peer.h).  The
 * device holds an RC, a UC and a UD QP connected to that peer, with receives
 * posted and a registered buffer; the input's packet goes to one of them
 * (its destination QPN is replaced by one of theirs, chosen by the input,
 * and where the input asks, its rkey and address by the buffer's, offset),
 * so everything after the frame is cut out of the stream is reached: the
 * connection's identity check, the opcode and header checks, the
 * responder's and completer's steps, the memory accesses they allow.
 *
 * After each packet a zero-length READ to a fourth QP (the sync QP, which
 * inputs never reach) comes back only once the engine has dealt with
 * everything before it on the connection, so every input is finished
 * before the next (and its coverage is its own).  A QP the input moved to
 * the error state is reset and connected again.  Whatever the packet,
 * nothing may crash or touch memory it was not given (AddressSanitizer,
 * UndefinedBehaviorSanitizer), and the sync QP keeps answering.
 *
 * The library is built with coverage instrumentation in the build where
 * this harness exists (clang, AddressSanitizer), so mutations are guided.
 */
#include "sv_test.h"
#include "wire_peer.h"
#include "common/util.h"
#include "transport/transport.h"

#include <arpa/inet.h>
#include <endian.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MEM_LEN 65536
#define NRECV 64

static struct svt_wire_listener f;
static struct svt_dev d;
static struct ibv_cq *cq;
static struct ibv_mr *mr;
static uint8_t *mem;
static struct ibv_qp *qp[3]; /* RC, UC, UD: the inputs' targets */
static struct ibv_qp *sync_qp;
static int fd = -1;
static uint32_t sync_psn, sync_sq_psn;
/* a frame of the stream: a packet, or a run of them (READ responses too) */
static uint8_t rx[SV_STREAM_FRAME_MAX];

static const enum ibv_qp_type types[3] = { IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD };

static void post_recvs(struct ibv_qp *q)
{
	for (int i = 0; i < NRECV; i++)
		if (svt_post_recv(q, (uint64_t)i, mem + (i % 16) * 4096, 4096, mr->lkey))
			break;
}

/* Connect target i to the peer (PSNs 0), again after an error. */
static void connect_target(int i)
{
	struct svt_conn c;

	svt_conn_default(&c, types[i]);
	c.sq_psn = 0;
	c.rq_psn = 0;
	c.timeout = 20; /* no retransmission of our own in the way */
	c.retry_cnt = 7;
	if (svt_qp_state(qp[i]) != IBV_QPS_RESET)
		SVT_CHECK_OK(svt_qp_to_state(qp[i], IBV_QPS_RESET));
	svt_qp_connect(qp[i], &c, &d.gid, f.qpn + 1 + (uint32_t)i);
	post_recvs(qp[i]);
}

/* The device connects to the peer when it first sends it something: an
 * empty WRITE from the sync QP, which the peer acknowledges. */
static void open_connection(void)
{
	uint8_t p[sizeof(struct sv_bth) + sizeof(struct sv_aeth)];
	struct sv_aeth a = { htonl((uint32_t)SV_AETH_ACK << 24) };
	size_t hl;

	if (fd >= 0)
		close(fd);
	SVT_CHECK_OK(svt_post_send(sync_qp, 1, IBV_WR_RDMA_WRITE, 0, mem, 0, mr->lkey, 0, 0, 0));
	fd = svt_wire_accept(&f);
	for (;;) {
		long n = svt_wire_recv(fd, rx, sizeof(rx), 10000);

		SVT_CHECK_MSG(n > 0, "no WRITE from the sync QP");
		if (((const struct sv_bth *)rx)->opcode == (SV_OP_RC | SV_OP_WRITE_ONLY))
			break;
	}
	hl = svt_wire_bth(p, SV_OP_RC | SV_OP_ACK, sync_qp->qp_num, sync_sq_psn);
	memcpy(p + hl, &a, sizeof(a));
	SVT_CHECK(svt_wire_send(fd, p, hl + sizeof(a)));
	sync_sq_psn = (sync_sq_psn + 1) & SV_PSN_MASK;
}

static void setup(void)
{
	struct svt_qp_init qi;
	struct svt_conn c;

	setenv("SOFTVERBS_PORT", "0", 1);
	setenv("SOFTVERBS_TRANSPORT", "tcp", 1);
	setenv("SOFTVERBS_LOG", "error", 0);
	svt_wire_listen(&f);
	svt_dev_open(&d);
	cq = svt_create_cq(d.ctx, 4096, NULL);
	mem = svt_alloc(MEM_LEN);
	mr = svt_reg_mr(d.pd, mem, MEM_LEN, SVT_ACCESS_ALL);
	for (int i = 0; i < 3; i++) {
		svt_qp_init_default(&qi, types[i]);
		qp[i] = svt_create_qp(d.pd, cq, cq, &qi);
		connect_target(i);
	}
	svt_qp_init_default(&qi, IBV_QPT_RC);
	sync_qp = svt_create_qp(d.pd, cq, cq, &qi);
	svt_conn_default(&c, IBV_QPT_RC);
	c.sq_psn = 0;
	c.rq_psn = 0;
	c.timeout = 20;
	svt_qp_connect(sync_qp, &c, &d.gid, f.qpn);
	open_connection();
	fprintf(stderr, "fuzz_packet: targets RC %u UC %u UD %u, sync %u; rkey 0x%x at %p\n",
		qp[0]->qp_num, qp[1]->qp_num, qp[2]->qp_num, sync_qp->qp_num, mr->rkey,
		(void *)mem);
}

/* A zero-length READ to the sync QP; true once its response is back. */
static bool synced(void)
{
	uint8_t p[sizeof(struct sv_bth) + sizeof(struct sv_reth)];
	size_t hl = svt_wire_bth(p, SV_OP_RC | SV_OP_READ_REQUEST, sync_qp->qp_num, sync_psn);
	struct sv_reth r = { 0, 0, 0 };

	memcpy(p + hl, &r, sizeof(r));
	if (!svt_wire_send(fd, p, hl + sizeof(r)))
		return false;
	for (;;) {
		long n = svt_wire_recv(fd, rx, sizeof(rx), 5000);
		const struct sv_bth *b = (const void *)rx;

		if (n <= 0)
			return false;
		if ((size_t)n >= sizeof(*b) && b->opcode == (SV_OP_RC | SV_OP_READ_RESP_ONLY) &&
		    (ntohl(b->psn) & SV_PSN_MASK) == sync_psn) {
			sync_psn = (sync_psn + 1) & SV_PSN_MASK;
			return true;
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bool ready;
	struct ibv_wc wc[64];
	struct sv_bth *b;
	int t;

	if (!ready) {
		setup();
		ready = true;
	}
	if (size < 1 + sizeof(*b) || size > 1 + SV_STREAM_FRAME_MAX)
		return -1;
	t = data[0] % 3;
	memcpy(rx, data + 1, size - 1);
	b = (struct sv_bth *)rx;
	/* the input's destination: one of the targets, the rest of the word
	 * (the reserved bits above the QPN) as the input has it */
	b->dqpn = htonl((ntohl(b->dqpn) & ~SV_PSN_MASK) | qp[t]->qp_num);
	if (data[0] & 4) {
		/* a key and an address of the real buffer (nobody can guess a
		 * random rkey): the accesses behind the key check are reached */
		const struct sv_opcode_info *op = sv_opcode_info(b->opcode);
		size_t at = op ? (op->off_reth ? op->off_reth : op->off_atmeth) : 0;

		if (at && at + 12 <= size - 1) {
			uint64_t va;

			memcpy(&va, rx + at, 8);
			va = (uintptr_t)mem + be64toh(va) % MEM_LEN;
			va = htobe64(op->off_atmeth ? va & ~7ull : va);
			memcpy(rx + at, &va, 8);
			uint32_t rkey = htonl(mr->rkey);

			memcpy(rx + at + 8, &rkey, 4);
		}
	}
	if (!svt_wire_send(fd, rx, size - 1) || !synced()) {
		/* the device closed the connection (its right, for a peer that
		 * breaks the rules): a new one, and the sync QP must answer */
		fprintf(stderr, "fuzz_packet: connection closed; opening a new one\n");
		open_connection();
		SVT_CHECK_MSG(synced(), "the device stopped answering");
	}
	while (ibv_poll_cq(cq, 64, wc) > 0)
		;
	if (svt_qp_state(qp[t]) != IBV_QPS_RTS)
		connect_target(t);
	else
		post_recvs(qp[t]); /* top up what the input consumed */
	return 0;
}
