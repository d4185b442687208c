/*
 * unit_send: the SEND family on RC and UC (both directions of a pair).
 *   - SEND / SEND_WITH_IMM: wc fields on both sides (wr_id, opcode, byte_len,
 *     imm_data in network order, wc_flags, qp_num), data intact
 *   - SGL: gather across max_sge entries in order, scatter across max_sge
 *     receive entries in order; zero-length SGEs; zero-length messages
 *   - IBV_SEND_INLINE: source reusable right after post, lkey not checked;
 *     too large inline data is refused
 *   - sq_sig_all vs unsignaled WRs (one CQE per signaled WR, SQ slots reused)
 *   - chained WR lists: bad_wr points at the first bad WR, earlier ones run
 *   - completions in posting order
 *   - full send/receive queues: ENOMEM, bad_wr at the first WR that
 *     did not fit
 */
#include "sv_test.h"

#include <arpa/inet.h>

static int dev_max_sge;

/* Post one receive of len bytes at s->buf + off. */
static void post_recv_at(struct svt_side *s, uint64_t id, size_t off,
			 uint32_t len)
{
	SVT_CHECK_OK(svt_post_recv(s->qp, id, (char *)s->buf + off, len,
				   s->mr->lkey));
}

static void test_send_basic(struct svt_side *a, struct svt_side *b)
{
	struct ibv_wc wc;

	for (int imm = 0; imm <= 1; imm++) {
		memset(b->buf, 0, 4096);
		svt_fill(a->buf, 1000, 1 + (uint32_t)imm);
		post_recv_at(b, 100 + (uint64_t)imm, 0, 4096);
		SVT_CHECK_OK(svt_post_send(a->qp, 1 + (uint64_t)imm,
					   imm ? IBV_WR_SEND_WITH_IMM
					       : IBV_WR_SEND,
					   IBV_SEND_SIGNALED, a->buf, 1000,
					   a->mr->lkey, 0, 0, 0x12345678));
		wc = svt_poll_one(a->send_cq);
		SVT_CHECK_WC_OK(wc);
		SVT_CHECK_EQ(wc.wr_id, 1 + imm);
		SVT_CHECK_EQ(wc.opcode, IBV_WC_SEND);
		SVT_CHECK_EQ(wc.qp_num, a->qp->qp_num);

		wc = svt_poll_one(b->recv_cq);
		SVT_CHECK_WC_OK(wc);
		SVT_CHECK_EQ(wc.wr_id, 100 + imm);
		SVT_CHECK_EQ(wc.opcode, IBV_WC_RECV);
		SVT_CHECK_EQ(wc.byte_len, 1000);
		SVT_CHECK_EQ(wc.qp_num, b->qp->qp_num);
		SVT_CHECK_EQ(wc.wc_flags & IBV_WC_GRH, 0); /* RC/UC: no GRH */
		if (imm) {
			SVT_CHECK(wc.wc_flags & IBV_WC_WITH_IMM);
			/* imm_data is in network byte order. */
			SVT_CHECK_EQ(wc.imm_data, htonl(0x12345678));
		} else {
			SVT_CHECK_EQ(wc.wc_flags & IBV_WC_WITH_IMM, 0);
		}
		SVT_CHECK_FILL(b->buf, 1000, 1 + (uint32_t)imm);
		for (int i = 1000; i < 4096; i++)
			SVT_CHECK_EQ(((char *)b->buf)[i], 0);
	}
}

static void test_zero_length(struct svt_side *a, struct svt_side *b)
{
	struct ibv_wc wc;

	/* Zero-length SEND into a receive with no SGE, and into one with. */
	SVT_CHECK_OK(svt_post_recv(b->qp, 1, NULL, 0, 0));
	post_recv_at(b, 2, 0, 64);
	memset(b->buf, 0x5a, 64);
	SVT_CHECK_OK(svt_post_send(a->qp, 1, IBV_WR_SEND, IBV_SEND_SIGNALED,
				   NULL, 0, 0, 0, 0, 0));
	SVT_CHECK_OK(svt_post_send(a->qp, 2, IBV_WR_SEND_WITH_IMM,
				   IBV_SEND_SIGNALED, NULL, 0, 0, 0, 0, 7));
	struct ibv_wc w2[2];

	svt_poll_ok(a->send_cq, 2, w2, 0);
	svt_poll_ok(b->recv_cq, 2, w2, 0);
	SVT_CHECK_EQ(w2[0].wr_id, 1);
	SVT_CHECK_EQ(w2[0].byte_len, 0);
	SVT_CHECK_EQ(w2[1].wr_id, 2);
	SVT_CHECK_EQ(w2[1].byte_len, 0);
	SVT_CHECK(w2[1].wc_flags & IBV_WC_WITH_IMM);
	SVT_CHECK_EQ(w2[1].imm_data, htonl(7));
	for (int i = 0; i < 64; i++)
		SVT_CHECK_EQ(((uint8_t *)b->buf)[i], 0x5a); /* untouched */

	/* Zero-length SGEs inside gather and scatter lists. */
	char *src = a->buf, *dst = b->buf;

	svt_fill(src, 64, 3);
	memset(dst, 0, 256);
	struct ibv_sge ss[3] = {
		{ (uintptr_t)src, 10, a->mr->lkey },
		{ (uintptr_t)src + 10, 0, a->mr->lkey },
		{ (uintptr_t)src + 10, 20, a->mr->lkey },
	};
	struct ibv_sge rs[4] = {
		{ (uintptr_t)dst, 0, b->mr->lkey },
		{ (uintptr_t)dst + 100, 16, b->mr->lkey },
		{ (uintptr_t)dst + 50, 0, b->mr->lkey },
		{ (uintptr_t)dst + 200, 50, b->mr->lkey },
	};
	struct ibv_send_wr swr = { .wr_id = 3, .sg_list = ss, .num_sge = 3,
				   .opcode = IBV_WR_SEND,
				   .send_flags = IBV_SEND_SIGNALED };
	struct ibv_recv_wr rwr = { .wr_id = 3, .sg_list = rs, .num_sge = 4 };
	struct ibv_send_wr *sbad;
	struct ibv_recv_wr *rbad;

	SVT_CHECK_OK(ibv_post_recv(b->qp, &rwr, &rbad));
	SVT_CHECK_OK(ibv_post_send(a->qp, &swr, &sbad));
	svt_poll_ok(a->send_cq, 1, &wc, 0);
	svt_poll_ok(b->recv_cq, 1, &wc, 0);
	SVT_CHECK_EQ(wc.byte_len, 30);
	SVT_CHECK_MEM(dst + 100, src, 16);
	SVT_CHECK_MEM(dst + 200, src + 16, 14);
	SVT_CHECK_EQ(dst[0], 0);
	SVT_CHECK_EQ(dst[50], 0);
	SVT_CHECK_EQ(dst[214], 0);
}

/*
 * Gather from max_sge pieces of a's buffer (taken in reverse address order,
 * of varying lengths) and scatter into max_sge receive pieces (different
 * lengths, also out of address order). The receiver must see the
 * concatenation of the gather list, in list order.
 */
static void test_sgl_max(struct svt_side *a, struct svt_side *b, int nsge)
{
	struct ibv_sge *ss = calloc((size_t)nsge, sizeof(*ss));
	struct ibv_sge *rs = calloc((size_t)nsge, sizeof(*rs));
	uint8_t *expect = svt_alloc(65536);
	size_t total = 0, off = 0;
	char *src = a->buf, *dst = b->buf;
	struct ibv_wc wc;

	SVT_CHECK(ss && rs);
	svt_fill(src, 32768, 9);
	memset(dst, 0, 65536);
	/* Gather: piece i at offset 32768 - (i+1)*96, length 1 + (i*37)%90. */
	for (int i = 0; i < nsge; i++) {
		uint32_t len = 1 + (uint32_t)(i * 37) % 90;
		size_t at = 32768 - (size_t)(i + 1) * 96;

		ss[i] = (struct ibv_sge){ (uintptr_t)src + at, len,
					  a->mr->lkey };
		memcpy(expect + total, src + at, len);
		total += len;
	}
	/* Scatter: piece i at offset 65536 - (i+1)*256, length 1 + (i*53)%200
	 * (more room in total than the gather list carries). */
	size_t cap = 0;

	for (int i = 0; i < nsge; i++) {
		uint32_t len = 1 + (uint32_t)(i * 53) % 200;

		rs[i] = (struct ibv_sge){
			(uintptr_t)dst + 65536 - (size_t)(i + 1) * 256, len,
			b->mr->lkey
		};
		cap += len;
	}
	SVT_CHECK_GE(cap, total);

	struct ibv_recv_wr rwr = { .wr_id = 77, .sg_list = rs,
				   .num_sge = nsge };
	struct ibv_send_wr swr = { .wr_id = 78, .sg_list = ss, .num_sge = nsge,
				   .opcode = IBV_WR_SEND,
				   .send_flags = IBV_SEND_SIGNALED };
	struct ibv_recv_wr *rbad;
	struct ibv_send_wr *sbad;

	SVT_CHECK_OK(ibv_post_recv(b->qp, &rwr, &rbad));
	SVT_CHECK_OK(ibv_post_send(a->qp, &swr, &sbad));
	svt_poll_ok(a->send_cq, 1, &wc, 0);
	svt_poll_ok(b->recv_cq, 1, &wc, 0);
	SVT_CHECK_EQ(wc.wr_id, 77);
	SVT_CHECK_EQ(wc.byte_len, total);

	/* Walk the scatter list in order. */
	off = 0;
	for (int i = 0; i < nsge && off < total; i++) {
		size_t n = rs[i].length;

		if (n > total - off)
			n = total - off;
		SVT_CHECK_MEM((void *)(uintptr_t)rs[i].addr, expect + off, n);
		off += n;
	}
	SVT_CHECK_EQ(off, total);
	free(expect);
	free(ss);
	free(rs);
}

static void test_inline(struct svt_side *a, struct svt_side *b)
{
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr ia;
	struct ibv_wc wc;

	SVT_CHECK_OK(ibv_query_qp(a->qp, &qa, IBV_QP_CAP, &ia));
	uint32_t max_inline = ia.cap.max_inline_data;

	SVT_CHECK_GE(max_inline, 64);

	/* Unregistered stack memory, lkey 0: inline data is not checked. */
	char stackbuf[64];
	uint8_t copy[64];

	svt_fill(stackbuf, 64, 21);
	memcpy(copy, stackbuf, 64);
	post_recv_at(b, 5, 0, 4096);
	SVT_CHECK_OK(svt_post_send(a->qp, 5, IBV_WR_SEND,
				   IBV_SEND_SIGNALED | IBV_SEND_INLINE,
				   stackbuf, 64, 0, 0, 0, 0));
	memset(stackbuf, 0xee, sizeof(stackbuf)); /* reusable at once */
	svt_poll_ok(a->send_cq, 1, &wc, 0);
	svt_poll_ok(b->recv_cq, 1, &wc, 0);
	SVT_CHECK_EQ(wc.byte_len, 64);
	SVT_CHECK_MEM(b->buf, copy, 64);

	/* Inline with two SGEs and immediate data. */
	char p1[10], p2[20];

	memset(p1, 'x', sizeof(p1));
	memset(p2, 'y', sizeof(p2));
	struct ibv_sge sg[2] = { { (uintptr_t)p1, 10, 0 },
				 { (uintptr_t)p2, 20, 0 } };
	struct ibv_send_wr wr = { .wr_id = 6, .sg_list = sg, .num_sge = 2,
				  .opcode = IBV_WR_SEND_WITH_IMM,
				  .send_flags = IBV_SEND_SIGNALED |
						IBV_SEND_INLINE,
				  .imm_data = htonl(99) };
	struct ibv_send_wr *bad;

	post_recv_at(b, 6, 0, 4096);
	SVT_CHECK_OK(ibv_post_send(a->qp, &wr, &bad));
	memset(p1, 0, sizeof(p1));
	memset(p2, 0, sizeof(p2));
	svt_poll_ok(a->send_cq, 1, &wc, 0);
	svt_poll_ok(b->recv_cq, 1, &wc, 0);
	SVT_CHECK_EQ(wc.byte_len, 30);
	SVT_CHECK_EQ(wc.imm_data, htonl(99));
	for (int i = 0; i < 30; i++)
		SVT_CHECK_EQ(((char *)b->buf)[i], i < 10 ? 'x' : 'y');

	/* More than max_inline_data: refused at post time. */
	char *big = calloc(1, max_inline + 1);

	SVT_CHECK_PTR(big);
	SVT_CHECK_FAILS(svt_post_send(a->qp, 7, IBV_WR_SEND,
				      IBV_SEND_SIGNALED | IBV_SEND_INLINE, big,
				      max_inline + 1, 0, 0, 0, 0));
	free(big);
	svt_expect_no_wc(a->send_cq, 20);
}

/* Unsignaled WRs complete silently but free their SQ slots. */
static void test_unsignaled(struct svt_side *a, struct svt_side *b)
{
	struct ibv_wc wc[8];

	for (int round = 0; round < 40; round++) {
		for (int i = 0; i < 8; i++)
			post_recv_at(b, (uint64_t)(round * 8 + i),
				     (size_t)i * 512, 512);
		for (int i = 0; i < 8; i++) {
			uint64_t id = (uint64_t)(round * 8 + i);

			SVT_CHECK_OK(svt_post_send(a->qp, id, IBV_WR_SEND,
						   i == 7 ? IBV_SEND_SIGNALED
							  : 0,
						   a->buf, 32, a->mr->lkey, 0,
						   0, 0));
		}
		svt_poll_ok(a->send_cq, 1, wc, 0);
		SVT_CHECK_EQ(wc[0].wr_id, round * 8 + 7);
		svt_poll_ok(b->recv_cq, 8, wc, 0);
		for (int i = 0; i < 8; i++)
			SVT_CHECK_EQ(wc[i].wr_id, round * 8 + i);
	}
	svt_expect_no_wc(a->send_cq, 30);
}

static void test_sq_sig_all(enum ibv_qp_type t)
{
	struct svt_pair_opts o;
	struct svt_pair p;
	struct ibv_wc wc[3];

	svt_pair_opts_default(&o, t);
	o.qp.sq_sig_all = 1;
	o.separate_cqs = true;
	svt_pair_create(&p, t, &o);
	for (int i = 0; i < 3; i++)
		post_recv_at(&p.b, (uint64_t)i, 0, 4096);
	for (int i = 0; i < 3; i++)
		SVT_CHECK_OK(svt_post_send(p.a.qp, (uint64_t)i, IBV_WR_SEND, 0,
					   p.a.buf, 16, p.a.mr->lkey, 0, 0, 0));
	svt_poll_ok(p.a.send_cq, 3, wc, 0);
	for (int i = 0; i < 3; i++)
		SVT_CHECK_EQ(wc[i].wr_id, i);
	svt_poll_ok(p.b.recv_cq, 3, wc, 0);
	svt_pair_destroy(&p);
}

static void test_chain(struct svt_side *a, struct svt_side *b, int max_sge,
		       int max_recv_sge)
{
	struct ibv_sge sge[64];
	struct ibv_send_wr wr[5], *bad = NULL;
	struct ibv_recv_wr rwr[5], *rbad = NULL;
	struct ibv_wc wc[5];

	SVT_CHECK_LT(max_sge, 64);
	SVT_CHECK_LT(max_recv_sge, 64);
	for (int i = 0; i < 64; i++)
		sge[i] = (struct ibv_sge){ (uintptr_t)a->buf + 64u * (unsigned)i,
					   8, a->mr->lkey };

	/* Receive chain: the 3rd has too many SGEs. */
	memset(rwr, 0, sizeof(rwr));
	struct ibv_sge rsge[64];

	for (int i = 0; i < 64; i++)
		rsge[i] = (struct ibv_sge){ (uintptr_t)b->buf + 1024u * (unsigned)i,
					    1024, b->mr->lkey };
	for (int i = 0; i < 5; i++) {
		rwr[i].wr_id = 200 + (uint64_t)i;
		rwr[i].sg_list = &rsge[i];
		rwr[i].num_sge = 1;
		rwr[i].next = i < 4 ? &rwr[i + 1] : NULL;
	}
	rwr[2].num_sge = max_recv_sge + 1;
	rwr[2].sg_list = rsge;
	SVT_CHECK_RC(ibv_post_recv(b->qp, rwr, &rbad), EINVAL);
	SVT_CHECK(rbad == &rwr[2]);

	/* Send chain: the 3rd has too many SGEs. */
	memset(wr, 0, sizeof(wr));
	for (int i = 0; i < 5; i++) {
		wr[i].wr_id = 100 + (uint64_t)i;
		wr[i].sg_list = &sge[i];
		wr[i].num_sge = 1;
		wr[i].opcode = IBV_WR_SEND;
		wr[i].send_flags = IBV_SEND_SIGNALED;
		wr[i].next = i < 4 ? &wr[i + 1] : NULL;
	}
	wr[2].num_sge = max_sge + 1;
	wr[2].sg_list = sge;
	SVT_CHECK_RC(ibv_post_send(a->qp, wr, &bad), EINVAL);
	SVT_CHECK(bad == &wr[2]);

	/* The first two of each chain were posted and run. */
	svt_poll_ok(a->send_cq, 2, wc, 0);
	SVT_CHECK_EQ(wc[0].wr_id, 100);
	SVT_CHECK_EQ(wc[1].wr_id, 101);
	svt_poll_ok(b->recv_cq, 2, wc, 0);
	SVT_CHECK_EQ(wc[0].wr_id, 200);
	SVT_CHECK_EQ(wc[1].wr_id, 201);
	svt_expect_no_wc(a->send_cq, 30);
	svt_expect_no_wc(b->recv_cq, 1);

	/* An invalid opcode in the 2nd WR. */
	for (int i = 0; i < 3; i++)
		post_recv_at(b, 300 + (uint64_t)i, 0, 4096);
	for (int i = 0; i < 3; i++) {
		wr[i].num_sge = 1;
		wr[i].sg_list = &sge[i];
		wr[i].next = i < 2 ? &wr[i + 1] : NULL;
	}
	wr[1].opcode = (enum ibv_wr_opcode)0x7f;
	SVT_CHECK_RC(ibv_post_send(a->qp, wr, &bad), EINVAL);
	SVT_CHECK(bad == &wr[1]);
	svt_poll_ok(a->send_cq, 1, wc, 0);
	SVT_CHECK_EQ(wc[0].wr_id, 100);
	svt_poll_ok(b->recv_cq, 1, wc, 0);
	SVT_CHECK_EQ(wc[0].wr_id, 300);

	/* A valid chain of 5: all complete in order, 2 receives left over
	 * from above are consumed first. */
	wr[1].opcode = IBV_WR_SEND;
	for (int i = 0; i < 5; i++)
		wr[i].next = i < 4 ? &wr[i + 1] : NULL;
	for (int i = 0; i < 3; i++)
		post_recv_at(b, 303 + (uint64_t)i, 0, 4096);
	SVT_CHECK_OK(ibv_post_send(a->qp, wr, &bad));
	svt_poll_ok(a->send_cq, 5, wc, 0);
	for (int i = 0; i < 5; i++)
		SVT_CHECK_EQ(wc[i].wr_id, 100 + i);
	svt_poll_ok(b->recv_cq, 5, wc, 0);
	for (int i = 0; i < 5; i++)
		SVT_CHECK_EQ(wc[i].wr_id, 301 + i);
}

static void test_order(struct svt_side *a, struct svt_side *b)
{
	struct ibv_wc wc[48];

	for (int i = 0; i < 48; i++)
		post_recv_at(b, 1000 + (uint64_t)i, (size_t)i * 1024, 1024);
	for (int i = 0; i < 48; i++) {
		svt_fill((char *)a->buf + i * 1024, 1024, 500 + (uint32_t)i);
		SVT_CHECK_OK(svt_post_send(a->qp, 2000 + (uint64_t)i,
					   IBV_WR_SEND, IBV_SEND_SIGNALED,
					   (char *)a->buf + i * 1024,
					   1 + (uint32_t)i * 21, a->mr->lkey,
					   0, 0, 0));
	}
	svt_poll_ok(a->send_cq, 48, wc, 0);
	for (int i = 0; i < 48; i++)
		SVT_CHECK_EQ(wc[i].wr_id, 2000 + i);
	svt_poll_ok(b->recv_cq, 48, wc, 0);
	for (int i = 0; i < 48; i++) {
		SVT_CHECK_EQ(wc[i].wr_id, 1000 + i);
		SVT_CHECK_EQ(wc[i].byte_len, 1 + i * 21);
		SVT_CHECK_FILL((char *)b->buf + i * 1024, 1 + (size_t)i * 21,
			       500 + (uint32_t)i);
	}
}

/*
 * A full queue refuses more work with ENOMEM (ibv_post_send(3)), and
 * bad_wr names the first WR that did not fit. The send queue is kept full by
 * a peer whose QP stays in INIT (it drops everything: no ACKs, RC retries).
 */
static void test_queue_full(void)
{
	struct svt_pair_opts o;
	struct svt_pair p;
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr ia;

	svt_pair_opts_default(&o, IBV_QPT_RC);
	o.qp.cap.max_send_wr = 16;
	o.qp.cap.max_recv_wr = 16;
	o.conn.timeout = 14;
	o.no_connect = true;
	svt_pair_create(&p, IBV_QPT_RC, &o);
	svt_qp_connect(p.a.qp, &o.conn, &p.b.gid, p.b.qp->qp_num);
	SVT_CHECK_OK(svt_qp_to_init(p.b.qp, &o.conn));
	SVT_CHECK_OK(ibv_query_qp(p.a.qp, &qa, IBV_QP_CAP, &ia));

	/* Receive queue of a (nothing arrives): cap fit, one more fails. */
	uint32_t n = ia.cap.max_recv_wr;
	struct ibv_recv_wr *rwr = calloc(n + 1, sizeof(*rwr)), *rbad = NULL;

	SVT_CHECK_PTR(rwr);
	for (uint32_t i = 0; i <= n; i++) {
		rwr[i].wr_id = i;
		rwr[i].next = i < n ? &rwr[i + 1] : NULL;
	}
	SVT_CHECK_RC(ibv_post_recv(p.a.qp, rwr, &rbad), ENOMEM);
	SVT_CHECK(rbad == &rwr[n]);
	SVT_CHECK_RC(ibv_post_recv(p.a.qp, &rwr[n], &rbad), ENOMEM);
	free(rwr);

	/* Send queue: cap WRs that stay outstanding, then one more. */
	n = ia.cap.max_send_wr;
	struct ibv_send_wr *swr = calloc(n + 1, sizeof(*swr)), *sbad = NULL;

	SVT_CHECK_PTR(swr);
	for (uint32_t i = 0; i <= n; i++) {
		swr[i].wr_id = i;
		swr[i].opcode = IBV_WR_SEND;
		swr[i].send_flags = IBV_SEND_SIGNALED;
		swr[i].next = i < n ? &swr[i + 1] : NULL;
	}
	SVT_CHECK_RC(ibv_post_send(p.a.qp, swr, &sbad), ENOMEM);
	SVT_CHECK(sbad == &swr[n]);
	SVT_CHECK_RC(ibv_post_send(p.a.qp, &swr[n], &sbad), ENOMEM);
	free(swr);

	/* Flush everything (QP to ERR) before tearing down. */
	int total = (int)(ia.cap.max_send_wr + ia.cap.max_recv_wr);
	struct ibv_wc *wc = calloc((size_t)total, sizeof(*wc));

	SVT_CHECK_PTR(wc);
	SVT_CHECK_OK(svt_qp_to_state(p.a.qp, IBV_QPS_ERR));
	svt_poll_n(p.a.send_cq, total, wc, 0);
	free(wc);
	svt_pair_destroy(&p);
}

static void run_type(enum ibv_qp_type t)
{
	struct svt_pair_opts o;
	struct svt_pair p;
	int nsge = dev_max_sge > 32 ? 32 : dev_max_sge;

	svt_pair_opts_default(&o, t);
	o.separate_cqs = true;
	o.qp.cap.max_send_sge = (uint32_t)dev_max_sge;
	o.qp.cap.max_recv_sge = (uint32_t)dev_max_sge;
	svt_pair_create(&p, t, &o);

	/* Both directions. */
	test_send_basic(&p.a, &p.b);
	test_send_basic(&p.b, &p.a);
	test_zero_length(&p.a, &p.b);
	test_sgl_max(&p.a, &p.b, dev_max_sge);
	test_sgl_max(&p.b, &p.a, nsge);
	test_inline(&p.a, &p.b);
	test_unsignaled(&p.a, &p.b);
	test_order(&p.b, &p.a);
	svt_pair_destroy(&p);

	/* Chains need a QP whose max_sge is below 63. */
	svt_pair_opts_default(&o, t);
	o.separate_cqs = true;
	o.qp.cap.max_send_sge = 4;
	o.qp.cap.max_recv_sge = 4;
	svt_pair_create(&p, t, &o);
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr ia;

	SVT_CHECK_OK(ibv_query_qp(p.a.qp, &qa, IBV_QP_CAP, &ia));
	if (ia.cap.max_send_sge < 63 && ia.cap.max_recv_sge < 63)
		test_chain(&p.a, &p.b, (int)ia.cap.max_send_sge,
			   (int)ia.cap.max_recv_sge);
	else
		svt_log("chain test skipped: max_sge rounded up to %u",
			ia.cap.max_send_sge);
	svt_pair_destroy(&p);

	test_sq_sig_all(t);
}

int main(void)
{
	struct svt_dev d;

	svt_watchdog(50);
	svt_dev_open(&d);
	dev_max_sge = d.dev_attr.max_sge;
	svt_dev_close(&d);
	/* Keep the test quick even if a device reports huge limits. */
	if (dev_max_sge > 256)
		dev_max_sge = 256;

	run_type(IBV_QPT_RC);
	run_type(IBV_QPT_UC);
	test_queue_full();
	return 0;
}
