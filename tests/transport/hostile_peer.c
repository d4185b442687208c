/*
 * A hostile peer that speaks the wire format itself.  It connects to a
 * device's TCP listener, says HELLO, and sends 20,000 frames generated
 * from a seed: every wire opcode of RC, UC and UD and some unknown ones,
 * aimed at the victim's real QP numbers or not, PSNs near the expected one
 * or anywhere, the victim's real rkey or another, addresses in, around and
 * far from its MR, lengths beyond the path MTU (runs of packets, whole or
 * not), headers cut short, frame lengths no transport carries.  Whatever softverbs does with them (NAK,
 * drop, error state, closing the connection, which sends the peer back to
 * connecting), it must not touch memory outside the MR, crash (this runs
 * under AddressSanitizer in CI), or stop serving: afterwards a fresh pair of
 * QPs on the same device moves data.
 *
 * SOFTVERBS_FUZZ_SEED=N replays one run; SOFTVERBS_FUZZ_FRAMES=N sets its length.
 */
#include "sv_test.h"
#include "wire/opcode.h"
#include "wire/wire.h"
#include "transport/transport.h"
#include "transport/registry.h"
#include "wire_peer.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define PAGE 4096

static uint64_t rng;
static uint32_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)rng;
}

/* The peer the victim's RC and UC QPs are connected to, which the hostile
 * peer claims to be (and proves, holding the secret: the fuzzing is of what
 * an authenticated but broken peer can send). */
static uint32_t peer_block; /* svt_wire_spare_block */
#define PEER_QPN ((peer_block << SV_QPN_BLOCK_SHIFT) | 0x777)

struct victim {
	struct svt_dev d;
	struct ibv_cq *cq;
	struct ibv_qp *qp[3]; /* RC, UC, UD */
	uint8_t *mem;         /* three pages: canary, the MR, canary */
	struct ibv_mr *mr;
};

static void victim_make(struct victim *v)
{
	enum ibv_qp_type types[3] = { IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD };
	struct svt_qp_init qi;
	union ibv_gid peer = v->d.gid;

	svt_dev_open(&v->d);
	v->cq = svt_create_cq(v->d.ctx, 4096, NULL);
	v->mem = svt_alloc(3 * PAGE);
	memset(v->mem, 0xc5, 3 * PAGE);
	v->mr = svt_reg_mr(v->d.pd, v->mem + PAGE, PAGE, SVT_ACCESS_ALL);
	peer = v->d.gid;
	for (int t = 0; t < 3; t++) {
		svt_qp_init_default(&qi, types[t]);
		v->qp[t] = svt_create_qp(v->d.pd, v->cq, v->cq, &qi);
		/* RC/UC: "connected" to a QP that does not exist, whose
		 * endpoint the hostile peer says it is */
		svt_qp_connect(v->qp[t], NULL, &peer, PEER_QPN);
		for (int i = 0; i < 16; i++)
			SVT_CHECK_OK(svt_post_recv(v->qp[t], (uint64_t)i, v->mem + PAGE + 256u * (unsigned)i,
						   256, v->mr->lkey));
	}
}

static int peer_connect(const struct victim *v)
{
	return svt_wire_connect(v->qp[0]->qp_num, sv_qpn_port(PEER_QPN));
}

/* What the victim answers is read and thrown away, so it never waits on us. */
static void drain(int fd)
{
	char sink[65536];

	while (recv(fd, sink, sizeof(sink), MSG_DONTWAIT) > 0)
		;
}

static uint32_t pick_qpn(const struct victim *v)
{
	uint32_t r = rnd() % 8;

	return r < 6 ? v->qp[r % 3]->qp_num : rnd() & 0xffffff;
}

/* One frame (length word included) into buf; returns its size. */
static size_t gen_frame(const struct victim *v, uint8_t *buf)
{
	static uint8_t valid[256];
	static int nvalid;
	uint8_t *pkt = buf + 4;
	const struct sv_opcode_info *op;
	struct sv_bth *bth = (void *)pkt;
	uint64_t base = (uintptr_t)v->mem + PAGE;
	uint32_t plen, len, flen;
	uint8_t opcode;

	if (!nvalid) /* every opcode softverbs knows, RC, UC and UD */
		for (int o = 0; o < 256; o++)
			if (sv_opcode_info((uint8_t)o))
				valid[nvalid++] = (uint8_t)o;
	opcode = rnd() % 100 ? valid[rnd() % (uint32_t)nvalid] : (uint8_t)rnd();

	if (rnd() % 400 == 0) {
		/* a length word no transport carries (or 0) */
		flen = rnd() % 2 ? 0 : SV_STREAM_FRAME_MAX + 1 + rnd() % 100000;
		flen = htonl(flen);
		memcpy(buf, &flen, 4);
		return 4;
	}
	op = sv_opcode_info(opcode);
	len = op ? op->hdr_len : sizeof(*bth);
	for (uint32_t i = 0; i < len; i++)
		pkt[i] = (uint8_t)rnd();
	bth->opcode = opcode;
	bth->pkey = 0xffff;
	bth->dqpn = htonl(pick_qpn(v));
	bth->psn = htonl(rnd() % 4 ? 0x1000 + rnd() % 8 : rnd() & 0xffffff);
	if (op && op->off_reth) {
		struct sv_reth *r = (void *)(pkt + op->off_reth);

		r->va = htobe64(base + (rnd() % 3 * PAGE) - PAGE + rnd() % 64 * 64);
		r->rkey = htonl(rnd() % 5 ? v->mr->rkey : rnd());
		r->dma_len = htonl(rnd() % 3 ? rnd() % 2048 : rnd());
	}
	if (op && op->off_atmeth) {
		struct sv_atmeth *a = (void *)(pkt + op->off_atmeth);

		a->va = htobe64(base + rnd() % (2 * PAGE) - PAGE / 2);
		a->rkey = htonl(rnd() % 5 ? v->mr->rkey : rnd());
	}
	if (op && op->off_deth) {
		struct sv_deth *d = (void *)(pkt + op->off_deth);

		d->qkey = htonl(rnd() % 4 ? 0x11111111 : rnd());
	}
	plen = op && (op->mask & SV_OPF_PAYLOAD) ? rnd() % 5000 : rnd() % 8;
	/* a stream's frame may carry a run of packets: whole ones or not,
	 * within what a frame holds or past it */
	if (op && (op->mask & SV_OPF_PAYLOAD) && rnd() % 16 == 0)
		plen = rnd() % 2 ? (1 + rnd() % 17) * 4096 : rnd() % (SV_STREAM_RUN_MAX + 8192);
	if (len + plen > SV_STREAM_FRAME_MAX)
		plen = SV_STREAM_FRAME_MAX - len;
	for (uint32_t i = 0; i < plen; i++)
		pkt[len + i] = (uint8_t)rnd();
	len += plen;
	if (rnd() % 200 == 0)
		len = rnd() % len; /* headers cut short (0: an empty frame) */
	flen = htonl(len);
	memcpy(buf, &flen, 4);
	return 4 + len;
}

int main(void)
{
	static uint8_t frame[4 + SV_STREAM_FRAME_MAX + 64];
	const char *s = getenv("SOFTVERBS_FUZZ_SEED");
	const char *nf = getenv("SOFTVERBS_FUZZ_FRAMES");
	long nframes = nf ? atol(nf) : 20000;
	struct victim v;
	int fd, reconnects = 0;

	svt_watchdog(120);
	rng = s ? strtoull(s, NULL, 0) : (uint64_t)svt_now_ms() * 2654435761u;
	if (!rng)
		rng = 1;
	svt_log("seed %llu (SOFTVERBS_FUZZ_SEED replays it)", (unsigned long long)rng);
	memset(&v, 0, sizeof(v));
	peer_block = svt_wire_spare_block();
	victim_make(&v);
	fd = peer_connect(&v);
	for (long k = 0; k < nframes; k++) {
		size_t n = gen_frame(&v, frame);

		if (!svt_send_all(fd, frame, n)) {
			/* the victim closed on us (a malformed frame): start over */
			close(fd);
			fd = peer_connect(&v);
			reconnects++;
		}
		if (k % 64 == 0)
			drain(fd);
	}
	drain(fd);
	close(fd);
	svt_sleep_ms(300); /* what is in flight lands */
	svt_log("%ld frames sent, %d reconnections", nframes, reconnects);

	/* nothing outside the MR changed */
	for (int i = 0; i < PAGE; i++) {
		SVT_CHECK_EQ(v.mem[i], 0xc5);
		SVT_CHECK_EQ(v.mem[2 * PAGE + i], 0xc5);
	}

	/* the victim's context still serves: a new QP on it moves data with a
	 * QP of another context, both ways */
	struct svt_dev w;
	struct svt_qp_init qi;
	struct ibv_wc wc;
	uint8_t *buf = v.mem + PAGE;

	svt_dev_open(&w);
	struct ibv_cq *wcq = svt_create_cq(w.ctx, 16, NULL);
	uint8_t *wbuf = svt_alloc(PAGE);
	struct ibv_mr *wmr = svt_reg_mr(w.pd, wbuf, PAGE, SVT_ACCESS_ALL);

	svt_qp_init_default(&qi, IBV_QPT_RC);
	struct ibv_qp *qa = svt_create_qp(v.d.pd, v.cq, v.cq, &qi);
	struct ibv_qp *qb = svt_create_qp(w.pd, wcq, wcq, &qi);

	while (ibv_poll_cq(v.cq, 1, &wc) > 0)
		; /* what the fuzzing completed or flushed */
	svt_qp_link(qa, &v.d.gid, qb, &w.gid, NULL);
	svt_fill(wbuf, 2048, 9);
	SVT_CHECK_OK(svt_post_recv(qa, 1, buf, 2048, v.mr->lkey));
	SVT_CHECK_OK(svt_post_send(qb, 2, IBV_WR_SEND, IBV_SEND_SIGNALED, wbuf, 2048, wmr->lkey, 0,
				   0, 0));
	svt_poll_ok(wcq, 1, &wc, 10000);
	svt_poll_ok(v.cq, 1, &wc, 10000);
	SVT_CHECK_FILL(buf, 2048, 9);
	svt_fill(buf, 1024, 10);
	SVT_CHECK_OK(svt_post_send(qa, 3, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, buf, 1024,
				   v.mr->lkey, (uintptr_t)wbuf + 2048, wmr->rkey, 0));
	svt_poll_ok(v.cq, 1, &wc, 10000);
	SVT_CHECK_FILL(wbuf + 2048, 1024, 10);
	SVT_CHECK_OK(ibv_destroy_qp(qa));
	SVT_CHECK_OK(ibv_destroy_qp(qb));
	SVT_CHECK_OK(ibv_dereg_mr(wmr));
	SVT_CHECK_OK(ibv_destroy_cq(wcq));
	svt_dev_close(&w);
	free(wbuf);

	/* and so does the victim's context: its QPs go, its MR deregisters */
	for (int t = 0; t < 3; t++)
		SVT_CHECK_OK(ibv_destroy_qp(v.qp[t]));
	SVT_CHECK_OK(ibv_dereg_mr(v.mr));
	while (ibv_poll_cq(v.cq, 1, &wc) > 0)
		;
	SVT_CHECK_OK(ibv_destroy_cq(v.cq));
	svt_dev_close(&v.d);
	free(v.mem);
	return 0;
}
