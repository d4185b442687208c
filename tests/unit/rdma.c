/*
 * unit_rdma: one-sided operations.
 *   RC: RDMA_WRITE (gather over max_sge, inline, zero-length),
 *       RDMA_WRITE_WITH_IMM (consumes a receive, imm in network order),
 *       RDMA_READ (scatter over max_sge), ATOMIC_CMP_AND_SWP,
 *       ATOMIC_FETCH_AND_ADD (atomic across two QPs), IBV_SEND_FENCE after
 *       READ/atomic, many READs in flight with max_rd_atomic 1, WRITE then
 *       SEND ordering, zero-length READ; the responder QP's access flags
 *       are enforced, and any other bits in them are taken and kept.
 *   UC: RDMA_WRITE and WRITE_WITH_IMM work; READ and atomics are refused.
 */
#include "sv_test.h"

#include <arpa/inet.h>

static int dev_max_sge;

static void test_write(struct svt_pair *p)
{
	struct svt_side *a = &p->a, *b = &p->b;
	struct ibv_wc wc;
	char *dst = b->buf;

	svt_fill(a->buf, 4000, 1);
	memset(dst, 0, 8192);
	/* A receive is posted; a plain WRITE must not consume it. */
	SVT_CHECK_OK(svt_post_recv(b->qp, 9, (char *)b->buf + 60000, 64,
				   b->mr->lkey));
	SVT_CHECK_OK(svt_post_send(a->qp, 1, IBV_WR_RDMA_WRITE,
				   IBV_SEND_SIGNALED, a->buf, 4000, a->mr->lkey,
				   (uintptr_t)dst + 1000, b->mr->rkey, 0));
	wc = svt_poll_one(a->send_cq);
	SVT_CHECK_WC_OK(wc);
	SVT_CHECK_EQ(wc.wr_id, 1);
	SVT_CHECK_EQ(wc.opcode, IBV_WC_RDMA_WRITE);
	SVT_CHECK_EQ(wc.qp_num, a->qp->qp_num);
	SVT_WAIT_FILL(dst + 1000, 4000, 1); /* UC: no ACK before placement */
	for (int i = 0; i < 1000; i++)
		SVT_CHECK_EQ(dst[i], 0);
	for (int i = 5000; i < 8192; i++)
		SVT_CHECK_EQ(dst[i], 0);
	svt_expect_no_wc(b->recv_cq, 30);

	/* Zero-length READ completes (RC only). */
	if (p->type == IBV_QPT_RC) {
		SVT_CHECK_OK(svt_post_send(a->qp, 6, IBV_WR_RDMA_READ,
					   IBV_SEND_SIGNALED, NULL, 0, 0,
					   (uintptr_t)dst, b->mr->rkey, 0));
		wc = svt_poll_one(a->send_cq);
		SVT_CHECK_WC_OK(wc);
		SVT_CHECK_EQ(wc.opcode, IBV_WC_RDMA_READ);
		SVT_CHECK_EQ(wc.byte_len, 0);
	}

	/* Zero-length WRITE completes and changes nothing. */
	SVT_CHECK_OK(svt_post_send(a->qp, 2, IBV_WR_RDMA_WRITE,
				   IBV_SEND_SIGNALED, NULL, 0, 0,
				   (uintptr_t)dst, b->mr->rkey, 0));
	svt_poll_ok(a->send_cq, 1, &wc, 0);
	SVT_CHECK_EQ(wc.wr_id, 2);
	SVT_CHECK_EQ(dst[0], 0);

	/* Inline WRITE from unregistered stack memory. */
	char tmp[48];

	svt_fill(tmp, sizeof(tmp), 3);
	SVT_CHECK_OK(svt_post_send(a->qp, 3, IBV_WR_RDMA_WRITE,
				   IBV_SEND_SIGNALED | IBV_SEND_INLINE, tmp,
				   sizeof(tmp), 0, (uintptr_t)dst + 7000,
				   b->mr->rkey, 0));
	memset(tmp, 0, sizeof(tmp));
	svt_poll_ok(a->send_cq, 1, &wc, 0);
	SVT_WAIT_FILL(dst + 7000, 48, 3);

	/* WRITE_WITH_IMM consumes the receive posted above. */
	svt_fill(a->buf, 300, 2);
	SVT_CHECK_OK(svt_post_send(a->qp, 4, IBV_WR_RDMA_WRITE_WITH_IMM,
				   IBV_SEND_SIGNALED, a->buf, 300, a->mr->lkey,
				   (uintptr_t)dst + 100, b->mr->rkey,
				   0xdeadbeef));
	wc = svt_poll_one(a->send_cq);
	SVT_CHECK_WC_OK(wc);
	SVT_CHECK_EQ(wc.opcode, IBV_WC_RDMA_WRITE);
	wc = svt_poll_one(b->recv_cq);
	SVT_CHECK_WC_OK(wc);
	SVT_CHECK_EQ(wc.wr_id, 9);
	SVT_CHECK_EQ(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
	SVT_CHECK(wc.wc_flags & IBV_WC_WITH_IMM);
	SVT_CHECK_EQ(wc.imm_data, htonl(0xdeadbeef));
	SVT_CHECK_EQ(wc.byte_len, 300);
	SVT_CHECK_EQ(wc.qp_num, b->qp->qp_num);
	SVT_CHECK_FILL(dst + 100, 300, 2);

	/* Zero-length WRITE_WITH_IMM into a receive without SGEs. */
	SVT_CHECK_OK(svt_post_recv(b->qp, 10, NULL, 0, 0));
	SVT_CHECK_OK(svt_post_send(a->qp, 5, IBV_WR_RDMA_WRITE_WITH_IMM,
				   IBV_SEND_SIGNALED, NULL, 0, 0, 0, 0, 42));
	svt_poll_ok(a->send_cq, 1, &wc, 0);
	svt_poll_ok(b->recv_cq, 1, &wc, 0);
	SVT_CHECK_EQ(wc.wr_id, 10);
	SVT_CHECK_EQ(wc.imm_data, htonl(42));
	SVT_CHECK_EQ(wc.byte_len, 0);
}

/* Gather n pieces for a WRITE, scatter n pieces for a READ. */
static void test_sgl(struct svt_pair *p, int n)
{
	struct svt_side *a = &p->a, *b = &p->b;
	struct ibv_sge *sg = calloc((size_t)n, sizeof(*sg));
	char *src = a->buf, *dst = b->buf;
	size_t total = 0;
	struct ibv_wc wc;

	SVT_CHECK_PTR(sg);
	svt_fill(src, 32768, 5);
	memset(dst, 0, 32768);
	for (int i = 0; i < n; i++) {
		uint32_t len = 3 + (uint32_t)(i * 29) % 100;
		size_t at = 32768 - (size_t)(i + 1) * 120;

		sg[i] = (struct ibv_sge){ (uintptr_t)src + at, len,
					  a->mr->lkey };
		total += len;
	}
	struct ibv_send_wr wr = { .wr_id = 20, .sg_list = sg, .num_sge = n,
				  .opcode = IBV_WR_RDMA_WRITE,
				  .send_flags = IBV_SEND_SIGNALED };
	struct ibv_send_wr *bad;

	wr.wr.rdma.remote_addr = (uintptr_t)dst + 16;
	wr.wr.rdma.rkey = b->mr->rkey;
	SVT_CHECK_OK(ibv_post_send(a->qp, &wr, &bad));
	svt_poll_ok(a->send_cq, 1, &wc, 0);
	size_t off = 16;

	for (int i = 0; i < n; i++) {
		SVT_CHECK_MEM(dst + off, (void *)(uintptr_t)sg[i].addr,
			      sg[i].length);
		off += sg[i].length;
	}
	SVT_CHECK_EQ(dst[off], 0);

	/* READ the same bytes back, scattered over n pieces of a's buffer
	 * at other offsets. */
	char *back = src + 32768;

	memset(back, 0, 32768);
	for (int i = 0; i < n; i++)
		sg[i].addr = (uintptr_t)back + (size_t)i * 120;
	wr.wr_id = 21;
	wr.opcode = IBV_WR_RDMA_READ;
	SVT_CHECK_OK(ibv_post_send(a->qp, &wr, &bad));
	wc = svt_poll_one(a->send_cq);
	SVT_CHECK_WC_OK(wc);
	SVT_CHECK_EQ(wc.wr_id, 21);
	SVT_CHECK_EQ(wc.opcode, IBV_WC_RDMA_READ);
	SVT_CHECK_EQ(wc.byte_len, total);
	off = 16;
	for (int i = 0; i < n; i++) {
		SVT_CHECK_MEM((void *)(uintptr_t)sg[i].addr, dst + off,
			      sg[i].length);
		off += sg[i].length;
	}
	free(sg);
}

static void test_atomics(struct svt_pair *p)
{
	struct svt_side *a = &p->a, *b = &p->b;
	uint64_t *remote = (uint64_t *)b->buf + 16; /* 8-byte aligned */
	uint64_t *local = (uint64_t *)a->buf + 16;
	uint64_t raddr = (uintptr_t)remote;
	struct ibv_wc wc;

	/* CMP_AND_SWP, compare equal: swapped, old value returned. */
	*remote = 0x1111222233334444ull;
	*local = 0;
	SVT_CHECK_OK(svt_post_atomic(a->qp, 30, IBV_WR_ATOMIC_CMP_AND_SWP,
				     IBV_SEND_SIGNALED, local, a->mr->lkey,
				     raddr, b->mr->rkey, 0x1111222233334444ull,
				     0x5555666677778888ull));
	wc = svt_poll_one(a->send_cq);
	SVT_CHECK_WC_OK(wc);
	SVT_CHECK_EQ(wc.opcode, IBV_WC_COMP_SWAP);
	SVT_CHECK_EQ(wc.byte_len, 8);
	SVT_CHECK_EQ(*local, 0x1111222233334444ull);
	SVT_CHECK_EQ(*remote, 0x5555666677778888ull);

	/* Compare not equal: unchanged, old value returned. */
	*local = 0;
	SVT_CHECK_OK(svt_post_atomic(a->qp, 31, IBV_WR_ATOMIC_CMP_AND_SWP,
				     IBV_SEND_SIGNALED, local, a->mr->lkey,
				     raddr, b->mr->rkey, 1, 2));
	svt_poll_ok(a->send_cq, 1, &wc, 0);
	SVT_CHECK_EQ(*local, 0x5555666677778888ull);
	SVT_CHECK_EQ(*remote, 0x5555666677778888ull);

	/* FETCH_AND_ADD, with carry across 32 bits. */
	*remote = 0xfffffffeull;
	SVT_CHECK_OK(svt_post_atomic(a->qp, 32, IBV_WR_ATOMIC_FETCH_AND_ADD,
				     IBV_SEND_SIGNALED, local, a->mr->lkey,
				     raddr, b->mr->rkey, 3, 0));
	wc = svt_poll_one(a->send_cq);
	SVT_CHECK_WC_OK(wc);
	SVT_CHECK_EQ(wc.opcode, IBV_WC_FETCH_ADD);
	SVT_CHECK_EQ(wc.byte_len, 8);
	SVT_CHECK_EQ(*local, 0xfffffffeull);
	SVT_CHECK_EQ(*remote, 0x100000001ull);
}

/* 2 x 40 FETCH_AND_ADD(1) through two QPs onto one word: the final value is
 * 80 and the 80 returned values are exactly 0..79. */
static void test_atomic_two_qps(struct svt_pair *p)
{
	struct svt_side *a = &p->a, *b = &p->b;
	struct svt_qp_init qi;

	svt_qp_init_default(&qi, IBV_QPT_RC);
	struct ibv_qp *qa = svt_create_qp(a->pd, a->send_cq, a->recv_cq, &qi);
	struct ibv_qp *qb = svt_create_qp(b->pd, b->send_cq, b->recv_cq, &qi);

	svt_qp_link(qa, &a->gid, qb, &b->gid, &p->opts.conn);

	uint64_t *remote = (uint64_t *)b->buf + 40;
	uint64_t *res = (uint64_t *)a->buf + 1024;
	struct ibv_wc wc[80];
	bool seen[80] = { false };

	*remote = 0;
	for (int i = 0; i < 40; i++) {
		SVT_CHECK_OK(svt_post_atomic(a->qp, (uint64_t)(2 * i),
					     IBV_WR_ATOMIC_FETCH_AND_ADD,
					     IBV_SEND_SIGNALED, &res[2 * i],
					     a->mr->lkey, (uintptr_t)remote,
					     b->mr->rkey, 1, 0));
		SVT_CHECK_OK(svt_post_atomic(qa, (uint64_t)(2 * i + 1),
					     IBV_WR_ATOMIC_FETCH_AND_ADD,
					     IBV_SEND_SIGNALED, &res[2 * i + 1],
					     a->mr->lkey, (uintptr_t)remote,
					     b->mr->rkey, 1, 0));
	}
	svt_poll_ok(a->send_cq, 80, wc, 0);
	SVT_CHECK_EQ(*remote, 80);
	for (int i = 0; i < 80; i++) {
		SVT_CHECK_LT(res[i], 80);
		SVT_CHECK_MSG(!seen[res[i]], "value %llu returned twice",
			      (unsigned long long)res[i]);
		seen[res[i]] = true;
	}
	/* Per QP, results increase in posting order. */
	for (int i = 2; i < 80; i++)
		SVT_CHECK_GT(res[i], res[i - 2]);
	SVT_CHECK_OK(ibv_destroy_qp(qa));
	SVT_CHECK_OK(ibv_destroy_qp(qb));
}

static void test_fence(struct svt_pair *p)
{
	struct svt_side *a = &p->a, *b = &p->b;
	char *l = (char *)a->buf + 8192;
	char *r = (char *)b->buf + 8192;
	struct ibv_wc wc[2];

	/* READ remote into L, then a fenced SEND of L: the SEND carries what
	 * the READ brought. */
	for (int round = 0; round < 10; round++) {
		svt_fill(r, 4096, 100 + (uint32_t)round);
		memset(l, 0, 4096);
		SVT_CHECK_OK(svt_post_recv(b->qp, 50, (char *)b->buf + 20000,
					   4096, b->mr->lkey));
		SVT_CHECK_OK(svt_post_send(a->qp, 51, IBV_WR_RDMA_READ,
					   IBV_SEND_SIGNALED, l, 4096,
					   a->mr->lkey, (uintptr_t)r,
					   b->mr->rkey, 0));
		SVT_CHECK_OK(svt_post_send(a->qp, 52, IBV_WR_SEND,
					   IBV_SEND_SIGNALED | IBV_SEND_FENCE,
					   l, 4096, a->mr->lkey, 0, 0, 0));
		svt_poll_ok(a->send_cq, 2, wc, 0);
		SVT_CHECK_EQ(wc[0].wr_id, 51);
		SVT_CHECK_EQ(wc[1].wr_id, 52);
		svt_poll_ok(b->recv_cq, 1, wc, 0);
		SVT_CHECK_FILL((char *)b->buf + 20000, 4096,
			       100 + (uint32_t)round);
	}

	/* FETCH_AND_ADD into L, then a fenced WRITE of L. */
	uint64_t *word = (uint64_t *)r;
	uint64_t *lw = (uint64_t *)l;

	*word = 1234;
	*lw = 0;
	SVT_CHECK_OK(svt_post_atomic(a->qp, 53, IBV_WR_ATOMIC_FETCH_AND_ADD,
				     IBV_SEND_SIGNALED, lw, a->mr->lkey,
				     (uintptr_t)word, b->mr->rkey, 1, 0));
	SVT_CHECK_OK(svt_post_send(a->qp, 54, IBV_WR_RDMA_WRITE,
				   IBV_SEND_SIGNALED | IBV_SEND_FENCE, lw, 8,
				   a->mr->lkey, (uintptr_t)word + 8,
				   b->mr->rkey, 0));
	svt_poll_ok(a->send_cq, 2, wc, 0);
	SVT_CHECK_EQ(word[1], 1234);

	/* READ of X, then a fenced WRITE to X: the READ sees the old data. */
	svt_fill(r, 4096, 7);
	memset(l, 0, 4096);
	svt_fill(a->buf, 4096, 8);
	SVT_CHECK_OK(svt_post_send(a->qp, 55, IBV_WR_RDMA_READ,
				   IBV_SEND_SIGNALED, l, 4096, a->mr->lkey,
				   (uintptr_t)r, b->mr->rkey, 0));
	SVT_CHECK_OK(svt_post_send(a->qp, 56, IBV_WR_RDMA_WRITE,
				   IBV_SEND_SIGNALED | IBV_SEND_FENCE, a->buf,
				   4096, a->mr->lkey, (uintptr_t)r,
				   b->mr->rkey, 0));
	svt_poll_ok(a->send_cq, 2, wc, 0);
	SVT_CHECK_FILL(l, 4096, 7);
	SVT_CHECK_FILL(r, 4096, 8);
}

/* Many READs in flight on a QP limited to one outstanding READ. */
static void test_many_reads(void)
{
	struct svt_pair_opts o;
	struct svt_pair p;
	struct ibv_wc wc[32];

	svt_pair_opts_default(&o, IBV_QPT_RC);
	o.conn.max_rd_atomic = 1;
	o.conn.max_dest_rd_atomic = 1;
	o.buf_len = 32 * 2048;
	svt_pair_create(&p, IBV_QPT_RC, &o);
	for (int i = 0; i < 32; i++)
		svt_fill((char *)p.b.buf + i * 2048, 2048, 300 + (uint32_t)i);
	for (int i = 0; i < 32; i++)
		SVT_CHECK_OK(svt_post_send(p.a.qp, (uint64_t)i,
					   IBV_WR_RDMA_READ, IBV_SEND_SIGNALED,
					   (char *)p.a.buf + i * 2048, 2048,
					   p.a.mr->lkey,
					   (uintptr_t)p.b.buf + (size_t)i * 2048,
					   p.b.mr->rkey, 0));
	svt_poll_ok(p.a.send_cq, 32, wc, 0);
	for (int i = 0; i < 32; i++) {
		SVT_CHECK_EQ(wc[i].wr_id, i);
		SVT_CHECK_FILL((char *)p.a.buf + i * 2048, 2048,
			       300 + (uint32_t)i);
	}
	svt_pair_destroy(&p);
}

/* WRITE of a buffer, then a SEND: when the SEND's receive completes, the
 * WRITE's data is all there (RC executes in order). */
static void test_write_then_send(struct svt_pair *p)
{
	struct svt_side *a = &p->a, *b = &p->b;
	struct ibv_wc wc[2];

	for (int round = 0; round < 5; round++) {
		memset(b->buf, 0, 49152);
		svt_fill(a->buf, 49152, 900 + (uint32_t)round);
		SVT_CHECK_OK(svt_post_recv(b->qp, 60, (char *)b->buf + 60000,
					   64, b->mr->lkey));
		SVT_CHECK_OK(svt_post_send(a->qp, 61, IBV_WR_RDMA_WRITE, 0,
					   a->buf, 49152, a->mr->lkey,
					   (uintptr_t)b->buf, b->mr->rkey, 0));
		SVT_CHECK_OK(svt_post_send(a->qp, 62, IBV_WR_SEND,
					   IBV_SEND_SIGNALED, a->buf, 8,
					   a->mr->lkey, 0, 0, 0));
		svt_poll_ok(b->recv_cq, 1, wc, 0);
		SVT_CHECK_FILL(b->buf, 49152, 900 + (uint32_t)round);
		svt_poll_ok(a->send_cq, 1, wc, 0);
		SVT_CHECK_EQ(wc[0].wr_id, 62);
	}
}

/*
 * The responder QP's qp_access_flags gate remote operations too (not only
 * the MR's): without REMOTE_WRITE/READ/ATOMIC on b's QP, the operation
 * fails at a (remote access or invalid request error) and b's memory is
 * untouched.
 */
static void test_qp_access_flags(void)
{
	static const struct {
		enum ibv_wr_opcode op;
		unsigned int missing;
	} cases[] = {
		{ IBV_WR_RDMA_WRITE, IBV_ACCESS_REMOTE_WRITE },
		{ IBV_WR_RDMA_READ, IBV_ACCESS_REMOTE_READ },
		{ IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_ACCESS_REMOTE_ATOMIC },
	};

	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		struct svt_pair_opts o;
		struct svt_pair p;
		struct svt_conn cb;
		struct ibv_wc wc;

		svt_pair_opts_default(&o, IBV_QPT_RC);
		o.no_connect = true;
		svt_pair_create(&p, IBV_QPT_RC, &o);
		cb = o.conn;
		cb.access &= ~cases[k].missing;
		svt_qp_connect(p.a.qp, &o.conn, &p.b.gid, p.b.qp->qp_num);
		svt_qp_connect(p.b.qp, &cb, &p.a.gid, p.a.qp->qp_num);

		memset(p.b.buf, 0x11, 64);
		memset(p.a.buf, 0x22, 64);
		if (cases[k].op == IBV_WR_ATOMIC_FETCH_AND_ADD)
			SVT_CHECK_OK(svt_post_atomic(
				p.a.qp, 1, cases[k].op, IBV_SEND_SIGNALED,
				p.a.buf, p.a.mr->lkey, (uintptr_t)p.b.buf,
				p.b.mr->rkey, 1, 0));
		else
			SVT_CHECK_OK(svt_post_send(
				p.a.qp, 1, cases[k].op, IBV_SEND_SIGNALED,
				p.a.buf, 64, p.a.mr->lkey, (uintptr_t)p.b.buf,
				p.b.mr->rkey, 0));
		wc = svt_poll_one(p.a.send_cq);
		SVT_CHECK_MSG(wc.status == IBV_WC_REM_ACCESS_ERR ||
				      wc.status == IBV_WC_REM_INV_REQ_ERR,
			      "opcode %d to a QP without access 0x%x: %s",
			      cases[k].op, cases[k].missing,
			      ibv_wc_status_str(wc.status));
		for (int i = 0; i < 64; i++) {
			SVT_CHECK_EQ(((uint8_t *)p.b.buf)[i], 0x11);
			if (cases[k].op != IBV_WR_RDMA_WRITE)
				SVT_CHECK_EQ(((uint8_t *)p.a.buf)[i], 0x22);
		}
		svt_pair_destroy(&p);
	}
}

/*
 * qp_access_flags takes the bits Linux stores (issue 34): the MR access
 * flags programs pass there (ON_DEMAND, RELAXED_ORDERING, ...) and any
 * other bit are accepted and returned by ibv_query_qp as set, at INIT and
 * at RTS -> RTS; the remote bits among them still decide.
 */
static void test_qp_access_extra_bits(void)
{
	const unsigned int extra = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND |
				   IBV_ACCESS_ZERO_BASED | IBV_ACCESS_ON_DEMAND |
				   IBV_ACCESS_HUGETLB | IBV_ACCESS_RELAXED_ORDERING | (1u << 30);
	struct svt_pair_opts o;
	struct svt_pair p;
	struct svt_conn cb;
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	struct ibv_wc wc;

	svt_pair_opts_default(&o, IBV_QPT_RC);
	o.no_connect = true;
	svt_pair_create(&p, IBV_QPT_RC, &o);
	cb = o.conn;
	cb.access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | extra;
	svt_qp_connect(p.a.qp, &o.conn, &p.b.gid, p.b.qp->qp_num);
	svt_qp_connect(p.b.qp, &cb, &p.a.gid, p.a.qp->qp_num);
	memset(&a, 0, sizeof(a));
	SVT_CHECK_OK(ibv_query_qp(p.b.qp, &a, IBV_QP_ACCESS_FLAGS, &ia));
	SVT_CHECK_EQ(a.qp_access_flags, cb.access);

	svt_fill(p.a.buf, 64, 3);
	SVT_CHECK_OK(svt_post_send(p.a.qp, 1, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, p.a.buf, 64,
				   p.a.mr->lkey, (uintptr_t)p.b.buf, p.b.mr->rkey, 0));
	SVT_CHECK_WC_OK(svt_poll_one(p.a.send_cq));
	SVT_CHECK_FILL(p.b.buf, 64, 3);

	/* RTS -> RTS: READ and the extra bits only; a WRITE is now refused */
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.qp_access_flags = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_ON_DEMAND | (1u << 30);
	SVT_CHECK_OK(ibv_modify_qp(p.b.qp, &a, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS));
	memset(&a, 0, sizeof(a));
	SVT_CHECK_OK(ibv_query_qp(p.b.qp, &a, IBV_QP_ACCESS_FLAGS, &ia));
	SVT_CHECK_EQ(a.qp_access_flags, IBV_ACCESS_REMOTE_READ | IBV_ACCESS_ON_DEMAND | (1u << 30));
	memset(p.a.buf, 0, 64);
	SVT_CHECK_OK(svt_post_send(p.a.qp, 2, IBV_WR_RDMA_READ, IBV_SEND_SIGNALED, p.a.buf, 64,
				   p.a.mr->lkey, (uintptr_t)p.b.buf, p.b.mr->rkey, 0));
	SVT_CHECK_WC_OK(svt_poll_one(p.a.send_cq));
	SVT_CHECK_FILL(p.a.buf, 64, 3);
	svt_fill(p.a.buf, 64, 4);
	SVT_CHECK_OK(svt_post_send(p.a.qp, 3, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, p.a.buf, 64,
				   p.a.mr->lkey, (uintptr_t)p.b.buf, p.b.mr->rkey, 0));
	wc = svt_poll_one(p.a.send_cq);
	SVT_CHECK(wc.status == IBV_WC_REM_ACCESS_ERR || wc.status == IBV_WC_REM_INV_REQ_ERR);
	SVT_CHECK_FILL(p.b.buf, 64, 3);
	svt_pair_destroy(&p);
}

static void test_uc(void)
{
	struct svt_pair_opts o;
	struct svt_pair p;
	struct ibv_wc wc;

	svt_pair_opts_default(&o, IBV_QPT_UC);
	o.separate_cqs = true;
	o.qp.cap.max_send_sge = (uint32_t)dev_max_sge;
	o.qp.cap.max_recv_sge = 4;
	svt_pair_create(&p, IBV_QPT_UC, &o);
	test_write(&p);

	/* Gather over max_sge for a UC WRITE. */
	struct ibv_sge *sg = calloc((size_t)dev_max_sge, sizeof(*sg));
	size_t total = 0;

	SVT_CHECK_PTR(sg);
	svt_fill(p.a.buf, 32768, 44);
	memset(p.b.buf, 0, 32768);
	for (int i = 0; i < dev_max_sge; i++) {
		sg[i] = (struct ibv_sge){
			(uintptr_t)p.a.buf + total, 1 + (uint32_t)i % 7,
			p.a.mr->lkey };
		total += sg[i].length;
	}
	struct ibv_send_wr wr = { .wr_id = 70, .sg_list = sg,
				  .num_sge = dev_max_sge,
				  .opcode = IBV_WR_RDMA_WRITE,
				  .send_flags = IBV_SEND_SIGNALED };
	struct ibv_send_wr *bad;

	wr.wr.rdma.remote_addr = (uintptr_t)p.b.buf;
	wr.wr.rdma.rkey = p.b.mr->rkey;
	SVT_CHECK_OK(ibv_post_send(p.a.qp, &wr, &bad));
	svt_poll_ok(p.a.send_cq, 1, &wc, 0);
	SVT_WAIT_FILL(p.b.buf, total, 44); /* UC: no ACK before placement */
	free(sg);

	/* READ and atomics do not exist on UC: refused at post, or failed. */
	int rc = svt_post_send(p.a.qp, 71, IBV_WR_RDMA_READ, IBV_SEND_SIGNALED,
			       p.a.buf, 64, p.a.mr->lkey, (uintptr_t)p.b.buf,
			       p.b.mr->rkey, 0);
	if (rc == 0) {
		wc = svt_poll_one(p.a.send_cq);
		SVT_CHECK_MSG(wc.status != IBV_WC_SUCCESS,
			      "RDMA READ on a UC QP succeeded");
	} else {
		rc = svt_post_atomic(p.a.qp, 72, IBV_WR_ATOMIC_FETCH_AND_ADD,
				     IBV_SEND_SIGNALED, p.a.buf, p.a.mr->lkey,
				     (uintptr_t)p.b.buf, p.b.mr->rkey, 1, 0);
		if (rc == 0) {
			wc = svt_poll_one(p.a.send_cq);
			SVT_CHECK_MSG(wc.status != IBV_WC_SUCCESS,
				      "atomic on a UC QP succeeded");
		}
	}
	svt_pair_destroy(&p);
}

int main(void)
{
	struct svt_dev d;
	struct svt_pair_opts o;
	struct svt_pair p;

	svt_watchdog(50);
	svt_dev_open(&d);
	dev_max_sge = d.dev_attr.max_sge > 256 ? 256 : d.dev_attr.max_sge;
	svt_dev_close(&d);

	svt_pair_opts_default(&o, IBV_QPT_RC);
	o.separate_cqs = true;
	o.qp.cap.max_send_sge = (uint32_t)dev_max_sge;
	o.qp.cap.max_send_wr = 128;
	o.cqe = 512;
	svt_pair_create(&p, IBV_QPT_RC, &o);
	test_write(&p);
	test_sgl(&p, dev_max_sge);
	test_atomics(&p);
	test_atomic_two_qps(&p);
	test_fence(&p);
	test_write_then_send(&p);
	svt_pair_destroy(&p);

	test_many_reads();
	test_qp_access_flags();
	test_qp_access_extra_bits();
	test_uc();
	return 0;
}
