/*
 * A process of this host that speaks the XRC relay itself
 * (engine/xrc_relay.c, ARCHITECTURE.md §4.7) to a device with an XRC SRQ of
 * a file's domain: what another process's XRC receive QP would send, and
 * what none would; over tcp, proving the job's secret from this host's
 * address (transport_xrc_relay_peer), and over shm, as a process of the
 * same user (transport_xrc_relay_peer.shm).
 *   - a relayed SEND lands in the
 *     SRQ's receive, byte for byte, completing with the claimed receive
 *     QP's number in qp_num and the send QP's in src_qp, and is answered
 *     with an ACK marked SV_BTH_RELAYED, addressed to that receive QP; a
 *     relayed WRITE lands in the SRQ PD's memory, a READ answers with it
 *   - a relay naming the SRQ with another domain's inode, or a WRITE with a
 *     key the device does not have: NAKed (invalid request, remote access),
 *     nothing written, and what that window relays next is dropped until a
 *     new one starts
 *   - malformed relays (the request inside cut short, not an XRC request,
 *     an MTU no path has, another receive QP or SRQ inside than outside):
 *     the device closes the connection, and nothing lands
 *   - then thousands of relays with random fields (every XRC request
 *     opcode, PSNs, windows, SRQ and receive QP numbers, MTUs, addresses,
 *     keys, lengths, payloads, cut headers), into a second SRQ of the
 *     domain (SVT_RELAY_FUZZ_SEED replays a run, SVT_RELAY_FUZZ_N sets how
 *     many)
 *   - through all of it the device's memory outside the MR is untouched,
 *     and a last valid relay is still executed.
 */
#include "sv_test.h"
#include "transport/registry.h"
#include "transport/transport.h"
#include "wire_peer.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define PAGE 4096
/* the receive QP and send QP the peer claims to relay for */
static uint32_t tgt_block; /* svt_wire_spare_block */
#define TGT_QPN ((tgt_block << SV_QPN_BLOCK_SHIFT) | 0x321)
#define SRC_QPN 0x4567

struct victim {
	struct svt_dev d;
	char path[32];
	int fd;
	struct stat st;
	struct ibv_xrcd *x;
	struct ibv_cq *cq;
	struct ibv_srq *srq, *srq2; /* srq2: the random relays' */
	struct ibv_cq *cq2;
	uint32_t srqn, srqn2;
	uint8_t *mem; /* canary page, the MR's page, canary page */
	struct ibv_mr *mr;
};

static void victim_make(struct victim *v)
{
	struct ibv_xrcd_init_attr xa = { .comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
					 .oflags = O_CREAT };
	struct ibv_srq_init_attr_ex sa = {
		.attr = { .max_wr = 16, .max_sge = 1 },
		.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ |
			     IBV_SRQ_INIT_ATTR_PD,
		.srq_type = IBV_SRQT_XRC,
	};

	svt_dev_open(&v->d);
	strcpy(v->path, "/tmp/svt-xrcp-XXXXXX");
	v->fd = mkstemp(v->path);
	SVT_CHECK(v->fd >= 0 && !fstat(v->fd, &v->st));
	xa.fd = v->fd;
	v->x = ibv_open_xrcd(v->d.ctx, &xa);
	SVT_CHECK_PTR(v->x);
	v->cq = svt_create_cq(v->d.ctx, 64, NULL);
	sa.pd = v->d.pd;
	sa.xrcd = v->x;
	sa.cq = v->cq;
	v->srq = ibv_create_srq_ex(v->d.ctx, &sa);
	SVT_CHECK_PTR(v->srq);
	SVT_CHECK_OK(ibv_get_srq_num(v->srq, &v->srqn));
	v->cq2 = svt_create_cq(v->d.ctx, 256, NULL);
	sa.cq = v->cq2;
	v->srq2 = ibv_create_srq_ex(v->d.ctx, &sa);
	SVT_CHECK_PTR(v->srq2);
	SVT_CHECK_OK(ibv_get_srq_num(v->srq2, &v->srqn2));
	v->mem = svt_alloc(3 * PAGE);
	memset(v->mem, 0xc5, 3 * PAGE);
	v->mr = svt_reg_mr(v->d.pd, v->mem + PAGE, PAGE, SVT_ACCESS_ALL);
	for (int i = 0; i < 4; i++)
		SVT_CHECK_OK(svt_post_srq_recv(v->srq, (uint64_t)i, v->mem + PAGE + 256u * (unsigned)i,
					       256, v->mr->lkey));
}

/* Connect as a process whose endpoint owns the receive QP TGT_QPN. */
static int peer_connect(const struct victim *v)
{
	return svt_wire_connect(v->srqn, sv_qpn_port(TGT_QPN));
}

struct relay_opts {
	uint8_t opcode;	  /* the request's (XRC) */
	uint32_t psn;
	bool window;
	uint32_t srqn;	  /* in the XRCETH */
	uint32_t tgt;	  /* in the relay header and the request's BTH */
	uint32_t inner_tgt;
	uint16_t mtu;
	bool other_inode;
	uint64_t va;	  /* WRITE, READ, atomics */
	uint32_t rkey, dma_len;
	const void *payload;
	uint32_t plen;
	int cut;	  /* bytes cut off the request's headers */
};

static void relay_defaults(const struct victim *v, struct relay_opts *o, uint8_t opcode,
			   uint32_t psn)
{
	memset(o, 0, sizeof(*o));
	o->opcode = opcode;
	o->psn = psn;
	o->window = true;
	o->srqn = v->srqn;
	o->tgt = o->inner_tgt = TGT_QPN;
	o->mtu = 1024;
}

static bool send_relay(int fd, const struct victim *v, const struct relay_opts *o)
{
	static uint8_t pkt[SV_MAX_FRAME];
	const struct sv_opcode_info *op = sv_opcode_info(o->opcode);
	struct sv_xrc_relay *x;
	uint8_t *in;
	size_t n = svt_wire_bth(pkt, SV_OP_XRC_RELAY, o->srqn, o->psn);

	x = (void *)(pkt + n);
	memset(x, 0, sizeof(*x));
	x->tgt_qpn = htonl(o->tgt);
	x->src_qpn = htonl(SRC_QPN);
	x->access = htonl(IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	x->mtu = htons(o->mtu);
	x->rnr_timer = 1;
	x->flags = o->window ? SV_RELAY_WINDOW : 0;
	x->dev = htobe64((uint64_t)v->st.st_dev);
	x->ino = htobe64((uint64_t)v->st.st_ino + (o->other_inode ? 1 : 0));
	n += sizeof(*x);
	in = pkt + n;
	memset(in, 0, op ? op->hdr_len : 12);
	svt_wire_bth(in, o->opcode, o->inner_tgt, o->psn);
	if (op && op->off_xrceth) {
		struct sv_xrceth e = { htonl(o->srqn) };

		memcpy(in + op->off_xrceth, &e, sizeof(e));
	}
	if (op && op->off_reth) {
		struct sv_reth r = { htobe64(o->va), htonl(o->rkey), htonl(o->dma_len) };

		memcpy(in + op->off_reth, &r, sizeof(r));
	}
	if (op && op->off_atmeth) {
		struct sv_atmeth a = { htobe64(o->va), htonl(o->rkey), htobe64(o->dma_len), 0 };

		memcpy(in + op->off_atmeth, &a, sizeof(a));
	}
	n += (op ? op->hdr_len : 12) - (size_t)o->cut;
	if (o->plen && !o->cut) {
		memcpy(pkt + n, o->payload, o->plen);
		n += o->plen;
	}
	return svt_wire_send(fd, pkt, n);
}

/* The next answer within ms: its opcode, PSN and AETH syndrome; false if none. */
static bool answer(int fd, int ms, uint8_t *opcode, uint32_t *psn, uint8_t *syn, uint8_t *flags,
		   uint32_t *dqpn, uint8_t *payload, uint32_t *plen)
{
	static uint8_t buf[SV_MAX_FRAME];
	const struct sv_opcode_info *op;
	long n = svt_wire_recv(fd, buf, sizeof(buf), ms);
	const struct sv_bth *b = (const void *)buf;

	if (n < (long)sizeof(*b))
		return false;
	op = sv_opcode_info(b->opcode);
	SVT_CHECK_PTR(op);
	*opcode = b->opcode;
	*psn = ntohl(b->psn) & 0xffffff;
	*dqpn = ntohl(b->dqpn) & 0xffffff;
	*flags = b->flags;
	*syn = 0;
	if (op->off_aeth) {
		struct sv_aeth a;

		memcpy(&a, buf + op->off_aeth, sizeof(a));
		*syn = (uint8_t)(ntohl(a.syn_msn) >> 24);
	}
	if (payload) {
		*plen = (uint32_t)(n - op->hdr_len);
		memcpy(payload, buf + op->hdr_len, *plen);
	}
	return true;
}

static void expect_answer(int fd, uint8_t want_op, uint32_t want_psn, uint8_t want_syn,
			  uint8_t *payload, uint32_t *plen)
{
	uint8_t opcode, syn, flags;
	uint32_t psn, dqpn;

	SVT_CHECK(answer(fd, 3000, &opcode, &psn, &syn, &flags, &dqpn, payload, plen));
	if (opcode != want_op || psn != want_psn || syn != want_syn)
		svt_log("answer opcode 0x%02x psn %u syn 0x%02x (want 0x%02x %u 0x%02x)", opcode, psn,
			syn, want_op, want_psn, want_syn);
	SVT_CHECK_EQ(opcode, want_op);
	SVT_CHECK_EQ(psn, want_psn);
	SVT_CHECK_EQ(syn, want_syn);
	SVT_CHECK(flags & SV_BTH_RELAYED);
	SVT_CHECK_EQ(dqpn, (uint32_t)TGT_QPN);
}

/* Did the device end the connection within ms (what it sent before read and dropped)? */
static bool closed_within(int fd, int ms)
{
	static uint8_t buf[SV_MAX_FRAME];
	uint64_t end = svt_now_ms() + (uint64_t)ms;

	while (svt_now_ms() < end) {
		long n = svt_wire_recv(fd, buf, sizeof(buf), (int)(end - svt_now_ms()) + 1);

		if (n < 0)
			return true;
		if (n == 0)
			break;
	}
	return false;
}

static void check_canaries(const struct victim *v)
{
	for (int i = 0; i < PAGE; i++) {
		SVT_CHECK_EQ(v->mem[i], 0xc5);
		SVT_CHECK_EQ(v->mem[2 * PAGE + i], 0xc5);
	}
}

/* A relayed SEND of 64 bytes (seed) at psn: lands in the next receive. */
static void valid_send(int fd, const struct victim *v, uint32_t psn, uint64_t wr_id, uint32_t seed)
{
	uint8_t data[64];
	struct relay_opts o;
	struct ibv_wc wc;

	svt_fill(data, sizeof(data), seed);
	relay_defaults(v, &o, SV_OP_XRC | SV_OP_SEND_ONLY, psn);
	o.payload = data;
	o.plen = sizeof(data);
	SVT_CHECK(send_relay(fd, v, &o));
	expect_answer(fd, SV_OP_XRC | SV_OP_ACK, psn, SV_AETH_ACK | 0x1f, NULL, NULL);
	wc = svt_poll_one(v->cq);
	SVT_CHECK_WC_OK(wc);
	SVT_CHECK_EQ(wc.wr_id, wr_id);
	SVT_CHECK_EQ(wc.byte_len, 64u);
	SVT_CHECK_EQ(wc.qp_num, (uint32_t)TGT_QPN);
	SVT_CHECK_EQ(wc.src_qp, (uint32_t)SRC_QPN);
	SVT_CHECK_FILL(v->mem + PAGE + 256 * wr_id, 64, seed);
}

static void scenario(struct victim *v)
{
	uint8_t data[128], got[4096];
	uint32_t plen = 0;
	struct relay_opts o;
	int fd = peer_connect(v);

	/* a SEND, a WRITE and a READ, as another process's receive QP */
	valid_send(fd, v, 100, 0, 1);
	svt_fill(data, sizeof(data), 2);
	relay_defaults(v, &o, SV_OP_XRC | SV_OP_WRITE_ONLY, 101);
	o.va = (uintptr_t)v->mem + PAGE + 2048;
	o.rkey = v->mr->rkey;
	o.dma_len = o.plen = sizeof(data);
	o.payload = data;
	SVT_CHECK(send_relay(fd, v, &o));
	expect_answer(fd, SV_OP_XRC | SV_OP_ACK, 101, SV_AETH_ACK | 0x1f, NULL, NULL);
	SVT_CHECK_FILL(v->mem + PAGE + 2048, sizeof(data), 2);
	relay_defaults(v, &o, SV_OP_XRC | SV_OP_READ_REQUEST, 102);
	o.va = (uintptr_t)v->mem + PAGE + 2048;
	o.rkey = v->mr->rkey;
	o.dma_len = sizeof(data);
	SVT_CHECK(send_relay(fd, v, &o));
	expect_answer(fd, SV_OP_XRC | SV_OP_READ_RESP_ONLY, 102, SV_AETH_ACK, got, &plen);
	SVT_CHECK_EQ(plen, (uint32_t)sizeof(data));
	SVT_CHECK_FILL(got, sizeof(data), 2);

	/* another domain's inode: NAK invalid request, nothing lands; the
	 * rest of that window is dropped */
	relay_defaults(v, &o, SV_OP_XRC | SV_OP_SEND_ONLY, 103);
	o.other_inode = true;
	o.payload = data;
	o.plen = 64;
	SVT_CHECK(send_relay(fd, v, &o));
	expect_answer(fd, SV_OP_XRC | SV_OP_ACK, 103, SV_AETH_NAK | SV_NAK_INV_REQ, NULL, NULL);
	relay_defaults(v, &o, SV_OP_XRC | SV_OP_SEND_ONLY, 104);
	o.window = false;
	o.payload = data;
	o.plen = 64;
	SVT_CHECK(send_relay(fd, v, &o));
	svt_expect_no_wc(v->cq, 200);
	/* a key the device does not have: NAK remote access, nothing written */
	relay_defaults(v, &o, SV_OP_XRC | SV_OP_WRITE_ONLY, 105);
	o.va = (uintptr_t)v->mem + PAGE;
	o.rkey = v->mr->rkey ^ 0x5a;
	o.dma_len = o.plen = 64;
	o.payload = data;
	SVT_CHECK(send_relay(fd, v, &o));
	expect_answer(fd, SV_OP_XRC | SV_OP_ACK, 105, SV_AETH_NAK | SV_NAK_REM_ACCESS, NULL, NULL);
	SVT_CHECK_FILL(v->mem + PAGE, 64, 1);
	/* a new window: taken again */
	valid_send(fd, v, 106, 1, 3);
	close(fd);

	/* malformed relays: the connection is closed, nothing lands */
	for (int k = 0; k < 4; k++) {
		fd = peer_connect(v);
		relay_defaults(v, &o, SV_OP_XRC | SV_OP_SEND_ONLY, 200);
		o.payload = data;
		o.plen = 64;
		if (k == 0)
			o.cut = 6; /* the XRCETH cut short */
		else if (k == 1)
			o.opcode = SV_OP_RC | SV_OP_SEND_ONLY; /* not an XRC request */
		else if (k == 2)
			o.mtu = 1000; /* no path's MTU */
		else
			o.inner_tgt = TGT_QPN + 1; /* another receive QP inside */
		SVT_CHECK(send_relay(fd, v, &o));
		SVT_CHECK(closed_within(fd, 2000));
		close(fd);
	}
	svt_expect_no_wc(v->cq, 100);

	/* still working */
	fd = peer_connect(v);
	valid_send(fd, v, 300, 2, 4);
	close(fd);
}

static uint64_t rng;

static uint32_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng >> 16);
}

/* Relays with random fields into srq2; the device must take or refuse
 * each, or close the connection, and nothing else. */
static void random_relays(struct victim *v)
{
	static const uint8_t ops[] = {
		SV_OP_SEND_FIRST,	 SV_OP_SEND_MIDDLE,	SV_OP_SEND_LAST,     SV_OP_SEND_LAST_IMM,
		SV_OP_SEND_ONLY,	 SV_OP_SEND_ONLY_IMM,	SV_OP_WRITE_FIRST,   SV_OP_WRITE_MIDDLE,
		SV_OP_WRITE_LAST,	 SV_OP_WRITE_LAST_IMM,	SV_OP_WRITE_ONLY,    SV_OP_WRITE_ONLY_IMM,
		SV_OP_READ_REQUEST,	 SV_OP_CMP_SWAP,	SV_OP_FETCH_ADD,     SV_OP_SEND_LAST_INV,
		SV_OP_SEND_ONLY_INV,	 SV_OP_ATOMIC_WRITE,
	};
	static const uint16_t mtus[] = { 256, 512, 1024, 2048, 4096, 1000 };
	const char *s = getenv("SVT_RELAY_FUZZ_SEED"), *ns = getenv("SVT_RELAY_FUZZ_N");
	long n = ns ? atol(ns) : 3000, reconnects = 0, taken = 0;
	uint8_t payload[4096], sink[65536];
	uint32_t psn = rnd() & 0xffffff;
	struct relay_opts o;
	struct ibv_wc wc[16];
	int fd, posted = 0;

	rng = s ? strtoull(s, NULL, 0) : svt_now_ms() * 2654435761u;
	if (!rng)
		rng = 1;
	svt_log("random relays: seed %llu (SVT_RELAY_FUZZ_SEED replays it)",
		(unsigned long long)rng);
	fd = peer_connect(v);
	for (long k = 0; k < n; k++) {
		uint16_t mtu = mtus[rnd() % (sizeof(mtus) / sizeof(mtus[0]))];

		while (posted < 16) {
			SVT_CHECK_OK(svt_post_srq_recv(v->srq2, 500 + (uint64_t)posted,
						       v->mem + PAGE + 1024u * (unsigned)(posted % 4),
						       1024, v->mr->lkey));
			posted++;
		}
		relay_defaults(v, &o, SV_OP_XRC | ops[rnd() % (sizeof(ops) / sizeof(ops[0]))],
			       rnd() % 4 ? psn : rnd() & 0xffffff);
		psn = (psn + 1) & 0xffffff;
		o.window = rnd() % 2;
		o.srqn = rnd() % 10 ? v->srqn2 : rnd() & 0xffffff;
		o.tgt = o.inner_tgt = TGT_QPN + rnd() % 3;
		if (rnd() % 50 == 0)
			o.inner_tgt = rnd() & 0xffffff;
		o.mtu = mtu;
		o.other_inode = rnd() % 50 == 0;
		o.va = (uintptr_t)v->mem + PAGE + (rnd() % (PAGE + 1024)) - 512;
		if (rnd() % 4 == 0)
			o.va &= ~7ull; /* atomics: aligned, mostly */
		o.rkey = rnd() % 10 ? v->mr->rkey : rnd();
		o.dma_len = rnd() % 5000;
		o.plen = rnd() % (mtu + 1u) % 4097;
		for (uint32_t i = 0; i < o.plen; i++)
			payload[i] = (uint8_t)rnd();
		o.payload = payload;
		o.cut = rnd() % 100 == 0 ? (int)(rnd() % 8) : 0;
		if (!send_relay(fd, v, &o)) {
			close(fd);
			fd = peer_connect(v);
			reconnects++;
		}
		while (recv(fd, sink, sizeof(sink), MSG_DONTWAIT) > 0)
			;
		for (int got; (got = ibv_poll_cq(v->cq2, 16, wc)) > 0;) {
			taken += got;
			posted -= got;
		}
	}
	close(fd);
	svt_log("random relays: %ld sent, %ld receives taken, %ld reconnections", n, taken,
		reconnects);
}

int main(void)
{
	struct victim v;

	svt_watchdog(60);
	memset(&v, 0, sizeof(v));
	tgt_block = svt_wire_spare_block();
	victim_make(&v);
	scenario(&v);
	random_relays(&v);
	check_canaries(&v);
	{
		/* still working after all that */
		int fd = peer_connect(&v);

		valid_send(fd, &v, 400, 3, 5);
		close(fd);
	}
	SVT_CHECK_OK(ibv_destroy_srq(v.srq));
	SVT_CHECK_OK(ibv_destroy_srq(v.srq2));
	SVT_CHECK_OK(ibv_close_xrcd(v.x));
	SVT_CHECK_OK(ibv_dereg_mr(v.mr));
	SVT_CHECK_OK(ibv_destroy_cq(v.cq));
	SVT_CHECK_OK(ibv_destroy_cq(v.cq2));
	svt_dev_close(&v.d);
	free(v.mem);
	close(v.fd);
	unlink(v.path);
	return 0;
}
