/*
 * unit_large: large messages and fairness.
 *   - 1 MiB and 16 MiB SEND, RDMA WRITE and RDMA READ on RC arrive intact
 *   - a 1.5 MiB SEND gathered from 16 SGEs and scattered over 16 others
 *   - 1 MiB SEND and WRITE on UC
 *   - two QPs of the same contexts pushing large messages at once both
 *     progress: a small message on one QP is not stuck behind 16 MiB queued
 *     on the other, and traffic in the other direction completes too
 *   - two QPs writing large messages at once, one with immediate data,
 *     land intact
 */
#include "sv_test.h"

#include <time.h>

#define MiB (1024u * 1024u)
#define BIG (16u * MiB)

static void send_big(struct svt_pair *p, uint32_t len, uint32_t seed)
{
	struct ibv_wc wc;

	svt_fill(p->a.buf, len, seed);
	memset(p->b.buf, 0, len + 4096);
	SVT_CHECK_OK(svt_post_recv(p->b.qp, seed, p->b.buf, len + 4096,
				   p->b.mr->lkey));
	SVT_CHECK_OK(svt_post_send(p->a.qp, seed, IBV_WR_SEND,
				   IBV_SEND_SIGNALED, p->a.buf, len,
				   p->a.mr->lkey, 0, 0, 0));
	svt_poll_ok(p->a.send_cq, 1, &wc, 10000);
	svt_poll_ok(p->b.recv_cq, 1, &wc, 10000);
	SVT_CHECK_EQ(wc.wr_id, seed);
	SVT_CHECK_EQ(wc.byte_len, len);
	SVT_CHECK_FILL(p->b.buf, len, seed);
	SVT_CHECK_EQ(((char *)p->b.buf)[len], 0);
}

static void write_big(struct svt_pair *p, uint32_t len, uint32_t seed)
{
	struct ibv_wc wc;

	svt_fill(p->a.buf, len, seed);
	memset(p->b.buf, 0, len + 4096);
	SVT_CHECK_OK(svt_post_send(p->a.qp, seed, IBV_WR_RDMA_WRITE,
				   IBV_SEND_SIGNALED, p->a.buf, len,
				   p->a.mr->lkey, (uintptr_t)p->b.buf,
				   p->b.mr->rkey, 0));
	svt_poll_ok(p->a.send_cq, 1, &wc, 10000);
	SVT_WAIT_FILL(p->b.buf, len, seed); /* immediate for RC, not UC */
	SVT_CHECK_EQ(((char *)p->b.buf)[len], 0);
}

static void read_big(struct svt_pair *p, uint32_t len, uint32_t seed)
{
	struct ibv_wc wc;

	svt_fill(p->b.buf, len, seed);
	memset(p->a.buf, 0, len + 4096);
	SVT_CHECK_OK(svt_post_send(p->a.qp, seed, IBV_WR_RDMA_READ,
				   IBV_SEND_SIGNALED, p->a.buf, len,
				   p->a.mr->lkey, (uintptr_t)p->b.buf,
				   p->b.mr->rkey, 0));
	svt_poll_ok(p->a.send_cq, 1, &wc, 10000);
	SVT_CHECK_EQ(wc.byte_len, len);
	SVT_CHECK_FILL(p->a.buf, len, seed);
	SVT_CHECK_EQ(((char *)p->a.buf)[len], 0);
}

/* 1 MiB gathered from 16 pieces and scattered over 16 others, the piece
 * sizes unrelated to the MTU, so packets straddle SGE boundaries. */
static void sgl_big(struct svt_pair *p)
{
	enum { N = 16 };
	struct ibv_sge ss[N], rs[N];
	char *src = p->a.buf, *dst = p->b.buf;
	size_t total = 0, cap = 0;
	struct ibv_wc wc;

	svt_fill(src, 2 * MiB, 12);
	memset(dst, 0, 4 * MiB);
	for (int i = 0; i < N; i++) {
		/* Gather pieces in descending address order. */
		uint32_t len = 65536 + 4093u * (uint32_t)i;

		ss[i] = (struct ibv_sge){ (uintptr_t)src + (size_t)(N - 1 - i) *
								  131072,
					  len, p->a.mr->lkey };
		total += len;
		uint32_t rlen = 70000 + 5003u * (uint32_t)i;

		rs[i] = (struct ibv_sge){ (uintptr_t)dst + (size_t)i * 262144,
					  rlen, p->b.mr->lkey };
		cap += rlen;
	}
	SVT_CHECK_GE(cap, total);
	struct ibv_recv_wr rwr = { .wr_id = 1, .sg_list = rs, .num_sge = N };
	struct ibv_send_wr swr = { .wr_id = 2, .sg_list = ss, .num_sge = N,
				   .opcode = IBV_WR_SEND,
				   .send_flags = IBV_SEND_SIGNALED };
	struct ibv_recv_wr *rbad;
	struct ibv_send_wr *sbad;

	SVT_CHECK_OK(ibv_post_recv(p->b.qp, &rwr, &rbad));
	SVT_CHECK_OK(ibv_post_send(p->a.qp, &swr, &sbad));
	svt_poll_ok(p->a.send_cq, 1, &wc, 10000);
	svt_poll_ok(p->b.recv_cq, 1, &wc, 10000);
	SVT_CHECK_EQ(wc.byte_len, total);

	/* Compare the two byte streams. */
	size_t gi = 0, goff = 0, ri = 0, roff = 0;

	for (size_t n = 0; n < total; n++) {
		const char *g = (const char *)(uintptr_t)ss[gi].addr + goff;
		const char *r = (const char *)(uintptr_t)rs[ri].addr + roff;

		if (*g != *r)
			SVT_FAIL("byte %zu of %zu: gather sge %zu+%zu != "
				 "scatter sge %zu+%zu",
				 n, total, gi, goff, ri, roff);
		if (++goff == ss[gi].length) {
			gi++;
			goff = 0;
		}
		if (++roff == rs[ri].length) {
			ri++;
			roff = 0;
		}
	}
}

struct qp2 {
	struct ibv_cq *cq_a, *cq_b;
	struct ibv_qp *qa, *qb;
};

static void make_qp2(struct svt_pair *p, struct qp2 *q)
{
	struct svt_qp_init qi;

	svt_qp_init_default(&qi, IBV_QPT_RC);
	q->cq_a = svt_create_cq(p->a.ctx, 64, NULL);
	q->cq_b = svt_create_cq(p->b.ctx, 64, NULL);
	q->qa = svt_create_qp(p->a.pd, q->cq_a, q->cq_a, &qi);
	q->qb = svt_create_qp(p->b.pd, q->cq_b, q->cq_b, &qi);
	svt_qp_link(q->qa, &p->a.gid, q->qb, &p->b.gid, &p->opts.conn);
}

static void destroy_qp2(struct qp2 *q)
{
	SVT_CHECK_OK(ibv_destroy_qp(q->qa));
	SVT_CHECK_OK(ibv_destroy_qp(q->qb));
	SVT_CHECK_OK(ibv_destroy_cq(q->cq_a));
	SVT_CHECK_OK(ibv_destroy_cq(q->cq_b));
}

/* true when the small SEND finished no later than the last big WRITE */
static bool test_concurrent(struct svt_pair *p)
{
	struct qp2 q;
	const uint32_t chunk = 4 * MiB;
	char *abuf = p->a.buf, *bbuf = p->b.buf;
	/* b's buffer: [0,16M) target of QP1's writes; a's buffer: [0,16M)
	 * source of QP1, its tail region [BIG, BIG+64K) the small SEND's
	 * source; b's tail region receives it. */
	struct ibv_wc wc;

	make_qp2(p, &q);
	svt_fill(abuf, BIG, 70);
	memset(bbuf, 0, BIG);
	svt_fill(abuf + BIG, 65536, 71);
	SVT_CHECK_OK(svt_post_recv(q.qb, 1, bbuf + BIG, 65536, p->b.mr->lkey));

	/* Reverse direction on QP2: b writes 8 MiB into a region of a's
	 * buffer after the ones above. */
	char *rev_src = bbuf + BIG + 65536, *rev_dst = abuf + BIG + 65536;

	svt_fill(rev_src, 8 * MiB, 72);
	memset(rev_dst, 0, 8 * MiB);

	for (uint32_t i = 0; i < 4; i++)
		SVT_CHECK_OK(svt_post_send(p->a.qp, 10 + i, IBV_WR_RDMA_WRITE,
					   IBV_SEND_SIGNALED, abuf + i * chunk,
					   chunk, p->a.mr->lkey,
					   (uintptr_t)bbuf + i * chunk,
					   p->b.mr->rkey, 0));
	SVT_CHECK_OK(svt_post_send(q.qa, 20, IBV_WR_SEND, IBV_SEND_SIGNALED,
				   abuf + BIG, 65536, p->a.mr->lkey, 0, 0, 0));
	SVT_CHECK_OK(svt_post_send(q.qb, 30, IBV_WR_RDMA_WRITE,
				   IBV_SEND_SIGNALED, rev_src, 8 * MiB,
				   p->b.mr->lkey, (uintptr_t)rev_dst,
				   p->a.mr->rkey, 0));

	/* Poll all three in one loop, recording the round each finished. */
	int big_done = 0, round = 0;
	int small_round = -1, last_big_round = -1, rev_round = -1, recv_round = -1;
	uint64_t deadline = svt_now_ms() + 20000;

	while (big_done < 4 || small_round < 0 || rev_round < 0 ||
	       recv_round < 0) {
		round++;
		if (svt_now_ms() > deadline)
			SVT_FAIL("timeout: big %d/4 small %d rev %d recv %d",
				 big_done, small_round, rev_round, recv_round);
		while (ibv_poll_cq(p->a.send_cq, 1, &wc) == 1) {
			SVT_CHECK_WC_OK(wc);
			SVT_CHECK_EQ(wc.wr_id, 10 + big_done);
			if (++big_done == 4)
				last_big_round = round;
		}
		while (ibv_poll_cq(q.cq_a, 1, &wc) == 1) {
			SVT_CHECK_WC_OK(wc);
			SVT_CHECK_EQ(wc.wr_id, 20);
			small_round = round;
		}
		while (ibv_poll_cq(q.cq_b, 1, &wc) == 1) {
			SVT_CHECK_WC_OK(wc);
			if (wc.wr_id == 30) {
				rev_round = round;
			} else {
				SVT_CHECK_EQ(wc.wr_id, 1);
				SVT_CHECK_EQ(wc.byte_len, 65536);
				recv_round = round;
			}
		}
		struct timespec ts = { 0, 50000 };
		nanosleep(&ts, NULL);
	}
	svt_log("rounds: small send %d, reverse write %d, last big write %d",
		small_round, rev_round, last_big_round);
	SVT_CHECK_FILL(bbuf, BIG, 70);
	SVT_CHECK_FILL(bbuf + BIG, 65536, 71);
	SVT_CHECK_FILL(rev_dst, 8 * MiB, 72);
	destroy_qp2(&q);
	return small_round <= last_big_round;
}

/* Two QPs write large messages at once over the same connection, one of
 * them WRITE with immediate: their packets interleave, and each lands
 * where it belongs (the receive side places WRITE payloads directly and
 * must tell the two streams apart). */
static void test_write_interleaved(struct svt_pair *p)
{
	struct qp2 q;
	const uint32_t len = 4 * MiB + 1000;
	char *abuf = p->a.buf, *bbuf = p->b.buf;
	struct ibv_wc wc;
	int done_a = 0, done_b = 0, got_imm = 0;
	uint64_t deadline;

	make_qp2(p, &q);
	svt_fill(abuf, len, 80);
	svt_fill(abuf + 8 * MiB, len, 81);
	memset(bbuf, 0, 16 * MiB);
	SVT_CHECK_OK(svt_post_recv(q.qb, 2, bbuf + 15 * MiB, 16, p->b.mr->lkey));
	for (int round = 0; round < 3; round++) {
		SVT_CHECK_OK(svt_post_send(p->a.qp, 1, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, abuf,
					   len, p->a.mr->lkey, (uintptr_t)bbuf, p->b.mr->rkey, 0));
		SVT_CHECK_OK(svt_post_send(q.qa, 2,
					   round == 2 ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE,
					   IBV_SEND_SIGNALED, abuf + 8 * MiB, len, p->a.mr->lkey,
					   (uintptr_t)bbuf + 8 * MiB, p->b.mr->rkey, 0x1234));
	}
	deadline = svt_now_ms() + 20000;
	while (done_a < 3 || done_b < 3 || !got_imm) {
		if (svt_now_ms() > deadline)
			SVT_FAIL("timeout: %d/3 and %d/3 writes, imm %d", done_a, done_b, got_imm);
		while (ibv_poll_cq(p->a.send_cq, 1, &wc) == 1) {
			SVT_CHECK_WC_OK(wc);
			done_a++;
		}
		while (ibv_poll_cq(q.cq_a, 1, &wc) == 1) {
			SVT_CHECK_WC_OK(wc);
			done_b++;
		}
		while (ibv_poll_cq(q.cq_b, 1, &wc) == 1) {
			SVT_CHECK_WC_OK(wc);
			SVT_CHECK_EQ(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
			SVT_CHECK_EQ(wc.byte_len, len);
			got_imm++;
		}
	}
	SVT_CHECK_FILL(bbuf, len, 80);
	SVT_CHECK_FILL(bbuf + 8 * MiB, len, 81);
	SVT_CHECK_EQ(bbuf[len], 0);
	SVT_CHECK_EQ(bbuf[8 * MiB + len], 0);
	destroy_qp2(&q);
}

int main(void)
{
	struct svt_pair_opts o;
	struct svt_pair p;

	/* the engine's interleaving of QPs on the wire is what is tested: a
	 * WRITE that the initiator executes on shared pages
	 * (SOFTVERBS_SHARED_MR, unit_peer_mem) completes in its post */
	setenv("SOFTVERBS_SHARED_MR", "0", 1);
	svt_watchdog(55);
	svt_pair_opts_default(&o, IBV_QPT_RC);
	o.buf_len = BIG + 65536 + 8 * MiB;
	o.separate_cqs = true;
	o.qp.cap.max_send_sge = 16;
	o.qp.cap.max_recv_sge = 16;
	svt_pair_create(&p, IBV_QPT_RC, &o);
	send_big(&p, MiB, 1);
	send_big(&p, BIG, 2);
	write_big(&p, MiB, 3);
	write_big(&p, BIG, 4);
	read_big(&p, MiB, 5);
	read_big(&p, BIG, 6);
	send_big(&p, MiB + 17, 7); /* not a multiple of the MTU */
	sgl_big(&p);
	/* The rounds are this thread's: one the scheduler keeps off a core
	 * while the engine threads move the whole 16 MiB (CI's ASan pass
	 * once: all four WRITEs done by round 4, the SEND at 16) cannot see
	 * the interleaving.  A second try then; QPs that do not interleave
	 * fail both. */
	if (!test_concurrent(&p)) {
		svt_log("the small SEND finished after the big WRITEs: once more");
		SVT_CHECK_MSG(test_concurrent(&p),
			      "64 KiB SEND on QP2 finished after all 16 MiB queued on QP1, "
			      "twice: QPs do not interleave");
	}
	test_write_interleaved(&p);
	svt_pair_destroy(&p);

	svt_pair_opts_default(&o, IBV_QPT_UC);
	o.buf_len = MiB + 8192;
	o.separate_cqs = true;
	svt_pair_create(&p, IBV_QPT_UC, &o);
	send_big(&p, MiB, 8);
	write_big(&p, MiB, 9);
	svt_pair_destroy(&p);
	return 0;
}
