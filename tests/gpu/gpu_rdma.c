/*
 * gpu_rdma: the data path with GPU memory, between two contexts of this
 * process (an RC pair from the harness; run over shm and over tcp).
 *   - SEND/RECV, RDMA WRITE and RDMA READ of 1 B, 4 KiB, 1 MiB and 8 MiB,
 *     with scatter/gather lists that mix host and GPU memory on both ends
 *     (e.g. host 1000 B, GPU the rest, host 33 B; receive lists cut
 *     differently), and a remote range in GPU or host memory; every byte
 *     of both buffers of the receiving side is checked (GPU memory copied
 *     back to the host), the bytes around each piece included
 *   - RDMA WRITE_WITH_IMM from and into GPU memory: immediate, length
 *   - FETCH_AND_ADD and CMP_AND_SWP (both outcomes) on a word in GPU
 *     memory with the 8-byte result landing in GPU memory, and mixed with
 *     host memory either way; 2 x 32 FETCH_AND_ADDs from two QPs of two
 *     contexts on one GPU word: the sum is exact and the old values are
 *     all distinct (atomic with respect to each other)
 *   - UD SEND from GPU and host memory into a receive list of GPU and host
 *     memory (the GRH in GPU memory)
 *   - pinned host memory (cuMemAllocHost) and managed memory, which the
 *     CPU reaches, work as host memory
 */
#include "sv_test.h"
#include "cuda_shim.h"

#include <arpa/inet.h>

#define KiB 1024u
#define MiB (1024u * 1024u)
#define MAXN (8 * MiB)
#define SLACK (64 * KiB)      /* room for gaps between pieces and guard bytes */
#define BLEN (MAXN + SLACK)   /* each of the four buffers of a side */
#define GAP 7		      /* bytes left between two pieces of a list */
#define GUARD_BYTES 64	      /* checked after the last piece */
#define FILLER 0xa5
#define MAXSEG 4

/* One side's memory: a host and a GPU buffer, each registered. */
struct mem {
	uint8_t *host, *gpu;
	struct ibv_mr *host_mr, *gpu_mr;
};

static void mem_init(struct mem *m, struct ibv_pd *pd)
{
	m->host = svt_alloc(BLEN);
	m->gpu = svt_gpu_alloc(BLEN);
	m->host_mr = svt_reg_mr(pd, m->host, BLEN, SVT_ACCESS_ALL);
	m->gpu_mr = ibv_reg_mr(pd, m->gpu, BLEN, SVT_ACCESS_ALL);
	SVT_CHECK_MSG(m->gpu_mr, "ibv_reg_mr of GPU memory: %s", strerror(errno));
}

static void mem_fini(struct mem *m)
{
	SVT_CHECK_OK(ibv_dereg_mr(m->host_mr));
	SVT_CHECK_OK(ibv_dereg_mr(m->gpu_mr));
	free(m->host);
	svt_gpu_free(m->gpu);
}

/* How a list is cut: pieces of fixed length (at least 1 byte each) and
 * one taking the rest, each in host ('H') or GPU ('G') memory. */
struct layout {
	const char *name;
	int n;
	struct {
		char kind;
		size_t len; /* 0: the rest */
	} s[MAXSEG];
};

static const struct layout src_layouts[] = {
	{ "H1000+G*+H33", 3, { { 'H', 1000 }, { 'G', 0 }, { 'H', 33 } } },
	{ "G*", 1, { { 'G', 0 } } },
	{ "G70000+H*+G4103", 3, { { 'G', 70000 }, { 'H', 0 }, { 'G', 4103 } } },
};
static const struct layout dst_layouts[] = {
	{ "G4097+H12345+G*", 3, { { 'G', 4097 }, { 'H', 12345 }, { 'G', 0 } } },
	{ "H*+G65537", 2, { { 'H', 0 }, { 'G', 65537 } } },
	{ "G*", 1, { { 'G', 0 } } },
};
#define NLAYOUTS 3

/* A list built from a layout in a side's memory. */
struct sgl {
	int n;
	struct ibv_sge sge[MAXSEG];
	bool gpu[MAXSEG];
	size_t off[MAXSEG]; /* offset in its buffer */
	size_t host_end, gpu_end; /* bytes of each buffer the list spans */
};

/*
 * Cut total bytes per layout l. Every piece gets at least one byte (a
 * total smaller than the number of pieces: one GPU piece); fixed pieces
 * get up to their length from what is left, the rest piece the remainder.
 * Pieces are placed one after another in their buffer from a small odd
 * offset, GAP bytes apart.
 */
static void sgl_build(struct sgl *g, const struct mem *m, const struct layout *l, size_t total)
{
	size_t len[MAXSEG], budget, host_at = 1, gpu_at = 3;
	char kind[MAXSEG];
	int n = l->n;

	memset(g, 0, sizeof(*g));
	if (total < (size_t)n) {
		n = 1;
		kind[0] = 'G';
		len[0] = total;
	} else {
		int rest = -1;

		budget = total - (size_t)n;
		for (int i = 0; i < n; i++) {
			kind[i] = l->s[i].kind;
			len[i] = 1;
			if (!l->s[i].len) {
				rest = i;
				continue;
			}
			size_t extra = l->s[i].len - 1 < budget ? l->s[i].len - 1 : budget;

			len[i] += extra;
			budget -= extra;
		}
		SVT_CHECK(rest >= 0);
		len[rest] += budget;
	}
	g->n = n;
	for (int i = 0; i < n; i++) {
		bool gpu = kind[i] == 'G';
		size_t *at = gpu ? &gpu_at : &host_at;

		g->gpu[i] = gpu;
		g->off[i] = *at;
		g->sge[i].addr = (uintptr_t)(gpu ? m->gpu : m->host) + *at;
		g->sge[i].length = (uint32_t)len[i];
		g->sge[i].lkey = gpu ? m->gpu_mr->lkey : m->host_mr->lkey;
		*at += len[i] + GAP;
	}
	g->host_end = host_at;
	g->gpu_end = gpu_at;
	SVT_CHECK_LE(host_at + GUARD_BYTES, BLEN);
	SVT_CHECK_LE(gpu_at + GUARD_BYTES, BLEN);
}

/* Put ref[0..total) into the pieces of list g (its source data). */
static void sgl_load(const struct sgl *g, const struct mem *m, const uint8_t *ref)
{
	size_t at = 0;

	for (int i = 0; i < g->n; i++) {
		size_t len = g->sge[i].length;

		if (g->gpu[i])
			svt_gpu_from_host(m->gpu + g->off[i], ref + at, len);
		else
			memcpy(m->host + g->off[i], ref + at, len);
		at += len;
	}
}

/* Both buffers of m set to FILLER over what a check looks at. */
static void mem_clear(const struct mem *m, size_t host_len, size_t gpu_len)
{
	memset(m->host, FILLER, host_len);
	svt_gpu_memset(m->gpu, FILLER, gpu_len);
}

/*
 * Check host[0..host_len) and gpu[0..gpu_len) of m: the pieces of g hold
 * want[] in list order, every other byte is still FILLER.
 */
static void check_landed_at(int line, const struct mem *m, const struct sgl *g,
			    const uint8_t *want, size_t host_len, size_t gpu_len)
{
	uint8_t *want_h = malloc(host_len), *want_g = malloc(gpu_len);
	size_t at = 0;

	SVT_CHECK(want_h && want_g);
	memset(want_h, FILLER, host_len);
	memset(want_g, FILLER, gpu_len);
	for (int i = 0; i < g->n; i++) {
		size_t len = g->sge[i].length;

		memcpy((g->gpu[i] ? want_g : want_h) + g->off[i], want + at, len);
		at += len;
	}
	svt_check_mem_at(__FILE__, line, m->host, want_h, host_len);
	svt_gpu_check_mem_at(__FILE__, line, m->gpu, want_g, gpu_len);
	free(want_h);
	free(want_g);
}
#define check_landed(m, g, want, hl, gl) check_landed_at(__LINE__, m, g, want, hl, gl)

static struct svt_pair pair;
static struct mem ma, mb; /* pair.a's, pair.b's */
static uint8_t *ref;	  /* MAXN bytes of reference data */

static int post_list(struct ibv_qp *qp, uint64_t id, enum ibv_wr_opcode op, struct sgl *g,
		     uint64_t raddr, uint32_t rkey, uint32_t imm)
{
	struct ibv_send_wr wr, *bad = NULL;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = id;
	wr.opcode = op;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.sg_list = g ? g->sge : NULL;
	wr.num_sge = g ? g->n : 0;
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	wr.imm_data = htonl(imm);
	return ibv_post_send(qp, &wr, &bad);
}

static int post_recv_list(struct ibv_qp *qp, uint64_t id, struct sgl *g)
{
	struct ibv_recv_wr wr, *bad = NULL;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = id;
	wr.sg_list = g ? g->sge : NULL;
	wr.num_sge = g ? g->n : 0;
	return ibv_post_recv(qp, &wr, &bad);
}

enum op { OP_SEND, OP_WRITE, OP_READ };

/* One transfer of n bytes and its check. */
static void transfer(enum op op, size_t n, int combo)
{
	const struct layout *sl = &src_layouts[combo];
	const struct layout *dl = &dst_layouts[(combo + (int)op) % NLAYOUTS];
	bool remote_gpu = combo != 1;
	uint32_t seed = (uint32_t)(n * 7 + (size_t)op * 3 + (size_t)combo);
	struct sgl src, dst;
	struct ibv_wc wc;

	if (op == OP_SEND)
		svt_log("SEND of %zu bytes: %s -> %s", n, sl->name, dl->name);
	else if (op == OP_WRITE)
		svt_log("WRITE of %zu bytes: %s -> remote %s memory", n, sl->name,
			remote_gpu ? "GPU" : "host");
	else
		svt_log("READ of %zu bytes: remote %s memory -> %s", n, remote_gpu ? "GPU" : "host",
			dl->name);
	svt_fill(ref, n, seed);
	switch (op) {
	case OP_SEND:
		sgl_build(&src, &ma, sl, n);
		sgl_build(&dst, &mb, dl, n);
		sgl_load(&src, &ma, ref);
		mem_clear(&mb, dst.host_end + GUARD_BYTES, dst.gpu_end + GUARD_BYTES);
		SVT_CHECK_OK(post_recv_list(pair.b.qp, 20, &dst));
		SVT_CHECK_OK(post_list(pair.a.qp, 10, IBV_WR_SEND, &src, 0, 0, 0));
		wc = svt_poll_one(pair.a.send_cq);
		SVT_CHECK_WC_OK(wc);
		SVT_CHECK_EQ(wc.opcode, IBV_WC_SEND);
		wc = svt_poll_one(pair.b.recv_cq);
		SVT_CHECK_WC_OK(wc);
		SVT_CHECK_EQ(wc.wr_id, 20);
		SVT_CHECK_EQ(wc.opcode, IBV_WC_RECV);
		SVT_CHECK_EQ(wc.byte_len, n);
		check_landed(&mb, &dst, ref, dst.host_end + GUARD_BYTES,
			     dst.gpu_end + GUARD_BYTES);
		break;
	case OP_WRITE: {
		/* the remote range seen as a one-piece list, for the check */
		struct layout one = { "remote", 1, { { remote_gpu ? 'G' : 'H', 0 } } };

		sgl_build(&src, &ma, sl, n);
		sgl_build(&dst, &mb, &one, n);
		sgl_load(&src, &ma, ref);
		mem_clear(&mb, dst.host_end + GUARD_BYTES, dst.gpu_end + GUARD_BYTES);
		SVT_CHECK_OK(post_list(pair.a.qp, 11, IBV_WR_RDMA_WRITE, &src,
				       dst.sge[0].addr, remote_gpu ? mb.gpu_mr->rkey : mb.host_mr->rkey,
				       0));
		wc = svt_poll_one(pair.a.send_cq);
		SVT_CHECK_WC_OK(wc);
		SVT_CHECK_EQ(wc.opcode, IBV_WC_RDMA_WRITE);
		check_landed(&mb, &dst, ref, dst.host_end + GUARD_BYTES,
			     dst.gpu_end + GUARD_BYTES);
		break;
	}
	case OP_READ: {
		struct layout one = { "remote", 1, { { remote_gpu ? 'G' : 'H', 0 } } };

		sgl_build(&src, &mb, &one, n); /* what is read, on b */
		sgl_build(&dst, &ma, dl, n);   /* where it lands, on a */
		sgl_load(&src, &mb, ref);
		mem_clear(&ma, dst.host_end + GUARD_BYTES, dst.gpu_end + GUARD_BYTES);
		SVT_CHECK_OK(post_list(pair.a.qp, 12, IBV_WR_RDMA_READ, &dst, src.sge[0].addr,
				       remote_gpu ? mb.gpu_mr->rkey : mb.host_mr->rkey, 0));
		wc = svt_poll_one(pair.a.send_cq);
		SVT_CHECK_WC_OK(wc);
		SVT_CHECK_EQ(wc.opcode, IBV_WC_RDMA_READ);
		SVT_CHECK_EQ(wc.byte_len, n);
		check_landed(&ma, &dst, ref, dst.host_end + GUARD_BYTES,
			     dst.gpu_end + GUARD_BYTES);
		break;
	}
	}
}

static void test_transfers(void)
{
	static const size_t sizes[] = { 1, 4 * KiB, 1 * MiB, 8 * MiB };

	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++)
		for (int op = OP_SEND; op <= OP_READ; op++)
			for (int c = 0; c < NLAYOUTS; c++)
				transfer((enum op)op, sizes[s], c);
}

static void test_write_imm(void)
{
	static const struct layout src_l = { "G5000+H*", 2, { { 'G', 5000 }, { 'H', 0 } } };
	struct layout one = { "remote", 1, { { 'G', 0 } } };
	const size_t n = 300000;
	struct sgl src, dst;
	struct ibv_wc wc;

	svt_fill(ref, n, 77);
	sgl_build(&src, &ma, &src_l, n);
	sgl_build(&dst, &mb, &one, n);
	sgl_load(&src, &ma, ref);
	mem_clear(&mb, dst.host_end + GUARD_BYTES, dst.gpu_end + GUARD_BYTES);
	SVT_CHECK_OK(post_recv_list(pair.b.qp, 21, NULL));
	SVT_CHECK_OK(post_list(pair.a.qp, 13, IBV_WR_RDMA_WRITE_WITH_IMM, &src, dst.sge[0].addr,
			       mb.gpu_mr->rkey, 0xc0ffee));
	wc = svt_poll_one(pair.a.send_cq);
	SVT_CHECK_WC_OK(wc);
	wc = svt_poll_one(pair.b.recv_cq);
	SVT_CHECK_WC_OK(wc);
	SVT_CHECK_EQ(wc.wr_id, 21);
	SVT_CHECK_EQ(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
	SVT_CHECK(wc.wc_flags & IBV_WC_WITH_IMM);
	SVT_CHECK_EQ(wc.imm_data, htonl(0xc0ffee));
	SVT_CHECK_EQ(wc.byte_len, n);
	check_landed(&mb, &dst, ref, dst.host_end + GUARD_BYTES, dst.gpu_end + GUARD_BYTES);
}

/* One atomic from pair.a: result into (res, res_lkey), on (target, rkey). */
static struct ibv_wc atomic_one(enum ibv_wr_opcode op, void *res, uint32_t res_lkey,
				void *target, uint32_t rkey, uint64_t cmp_add, uint64_t swap)
{
	SVT_CHECK_OK(svt_post_atomic(pair.a.qp, 30, op, IBV_SEND_SIGNALED, res, res_lkey,
				     (uintptr_t)target, rkey, cmp_add, swap));
	struct ibv_wc wc = svt_poll_one(pair.a.send_cq);

	SVT_CHECK_WC_OK(wc);
	return wc;
}

static void test_atomics(void)
{
	uint8_t *word = mb.gpu + 4096;	/* target in GPU memory */
	uint8_t *res = ma.gpu + 8192;	/* result in GPU memory */
	uint64_t *hword = (uint64_t *)(mb.host + 4096);
	uint64_t *hres = (uint64_t *)(ma.host + 8192);
	uint32_t rk = mb.gpu_mr->rkey, lk = ma.gpu_mr->lkey;
	struct ibv_wc wc;

	svt_gpu_memset(ma.gpu, 0, 65536);
	svt_gpu_memset(mb.gpu, 0, 65536);
	svt_gpu_put_u64(word, 1000);
	svt_gpu_put_u64(word + 8, 0x1111111111111111ull); /* neighbours stay */
	svt_gpu_put_u64(word - 8, 0x2222222222222222ull);
	svt_gpu_put_u64(res + 8, 0x3333333333333333ull);

	wc = atomic_one(IBV_WR_ATOMIC_FETCH_AND_ADD, res, lk, word, rk, 42, 0);
	SVT_CHECK_EQ(wc.opcode, IBV_WC_FETCH_ADD);
	SVT_CHECK_EQ(wc.byte_len, 8);
	SVT_CHECK_EQ(svt_gpu_get_u64(res), 1000);
	SVT_CHECK_EQ(svt_gpu_get_u64(word), 1042);

	wc = atomic_one(IBV_WR_ATOMIC_CMP_AND_SWP, res, lk, word, rk, 1042, 7);
	SVT_CHECK_EQ(wc.opcode, IBV_WC_COMP_SWAP);
	SVT_CHECK_EQ(svt_gpu_get_u64(res), 1042);
	SVT_CHECK_EQ(svt_gpu_get_u64(word), 7);

	wc = atomic_one(IBV_WR_ATOMIC_CMP_AND_SWP, res, lk, word, rk, 1, 9); /* no match */
	SVT_CHECK_EQ(svt_gpu_get_u64(res), 7);
	SVT_CHECK_EQ(svt_gpu_get_u64(word), 7);

	/* wrap-around of the add */
	svt_gpu_put_u64(word, ~0ull);
	atomic_one(IBV_WR_ATOMIC_FETCH_AND_ADD, res, lk, word, rk, 2, 0);
	SVT_CHECK_EQ(svt_gpu_get_u64(res), ~0ull);
	SVT_CHECK_EQ(svt_gpu_get_u64(word), 1);

	SVT_CHECK_EQ(svt_gpu_get_u64(word + 8), 0x1111111111111111ull);
	SVT_CHECK_EQ(svt_gpu_get_u64(word - 8), 0x2222222222222222ull);
	SVT_CHECK_EQ(svt_gpu_get_u64(res + 8), 0x3333333333333333ull);

	/* GPU target, host result */
	*hres = 0;
	atomic_one(IBV_WR_ATOMIC_FETCH_AND_ADD, hres, ma.host_mr->lkey, word, rk, 5, 0);
	SVT_CHECK_EQ(*hres, 1);
	SVT_CHECK_EQ(svt_gpu_get_u64(word), 6);

	/* host target, GPU result */
	*hword = 500;
	atomic_one(IBV_WR_ATOMIC_CMP_AND_SWP, res, lk, hword, mb.host_mr->rkey, 500, 501);
	SVT_CHECK_EQ(svt_gpu_get_u64(res), 500);
	SVT_CHECK_EQ(*hword, 501);
	atomic_one(IBV_WR_ATOMIC_FETCH_AND_ADD, res, lk, hword, mb.host_mr->rkey, 9, 0);
	SVT_CHECK_EQ(svt_gpu_get_u64(res), 501);
	SVT_CHECK_EQ(*hword, 510);
}

/* 32 FETCH_AND_ADD 1 from each of two QPs of two contexts on one GPU word. */
#define NADD 32
static void test_atomics_concurrent(void)
{
	struct svt_dev c;
	struct svt_qp_init qi;
	struct ibv_cq *ccq, *bcq;
	struct ibv_qp *cqp, *bqp;
	uint8_t *cres;
	struct ibv_mr *cres_mr;
	uint8_t *word = mb.gpu + 12288;
	uint8_t *ares = ma.gpu + 16384;
	const uint64_t base = 1ull << 40;
	uint64_t got[2 * NADD];
	struct ibv_wc wc[NADD];

	svt_dev_open(&c);
	ccq = svt_create_cq(c.ctx, 2 * NADD, NULL);
	bcq = svt_create_cq(pair.b.ctx, 16, NULL);
	svt_qp_init_default(&qi, IBV_QPT_RC);
	qi.cap.max_send_wr = 2 * NADD;
	cqp = svt_create_qp(c.pd, ccq, ccq, &qi);
	bqp = svt_create_qp(pair.b.pd, bcq, bcq, &qi);
	svt_qp_link(cqp, &c.gid, bqp, &pair.b.gid, NULL);
	cres = svt_gpu_alloc(NADD * 8);
	cres_mr = ibv_reg_mr(c.pd, cres, NADD * 8, SVT_ACCESS_ALL);
	SVT_CHECK_PTR(cres_mr);

	svt_gpu_put_u64(word, base);
	for (int i = 0; i < NADD; i++) {
		SVT_CHECK_OK(svt_post_atomic(pair.a.qp, 100 + i, IBV_WR_ATOMIC_FETCH_AND_ADD,
					     IBV_SEND_SIGNALED, ares + 8 * i, ma.gpu_mr->lkey,
					     (uintptr_t)word, mb.gpu_mr->rkey, 1, 0));
		SVT_CHECK_OK(svt_post_atomic(cqp, 200 + i, IBV_WR_ATOMIC_FETCH_AND_ADD,
					     IBV_SEND_SIGNALED, cres + 8 * i, cres_mr->lkey,
					     (uintptr_t)word, mb.gpu_mr->rkey, 1, 0));
	}
	svt_poll_ok(pair.a.send_cq, NADD, wc, 10000);
	svt_poll_ok(ccq, NADD, wc, 10000);
	SVT_CHECK_EQ(svt_gpu_get_u64(word), base + 2 * NADD);
	svt_gpu_to_host(got, ares, NADD * 8);
	svt_gpu_to_host(got + NADD, cres, NADD * 8);
	/* every old value from base to base + 2*NADD - 1, each once */
	bool seen[2 * NADD] = { false };

	for (int i = 0; i < 2 * NADD; i++) {
		SVT_CHECK_GE(got[i], base);
		SVT_CHECK_LT(got[i], base + 2 * NADD);
		SVT_CHECK_MSG(!seen[got[i] - base], "old value %llu returned twice",
			      (unsigned long long)got[i]);
		seen[got[i] - base] = true;
	}
	/* each QP's own results increase in posting order */
	for (int i = 1; i < NADD; i++) {
		SVT_CHECK_GT(got[i], got[i - 1]);
		SVT_CHECK_GT(got[NADD + i], got[NADD + i - 1]);
	}

	SVT_CHECK_OK(ibv_destroy_qp(cqp));
	SVT_CHECK_OK(ibv_destroy_qp(bqp));
	SVT_CHECK_OK(ibv_dereg_mr(cres_mr));
	svt_gpu_free(cres);
	SVT_CHECK_OK(ibv_destroy_cq(ccq));
	SVT_CHECK_OK(ibv_destroy_cq(bcq));
	svt_dev_close(&c);
}

/* UD: a SEND from GPU and host memory into a GPU/host receive list. */
static void test_ud(void)
{
	static const struct layout src_l = { "G1500+H*", 2, { { 'G', 1500 }, { 'H', 0 } } };
	static const struct layout dst_l = { "G100+H1000+G*", 3,
					     { { 'G', 100 }, { 'H', 1000 }, { 'G', 0 } } };
	const size_t n = 2048, grh = 40;
	struct svt_pair u;
	struct mem ua, ub;
	struct sgl src, dst;
	struct ibv_send_wr wr, *bad = NULL;
	struct ibv_wc wc;

	svt_pair_create(&u, IBV_QPT_UD, NULL);
	mem_init(&ua, u.a.pd);
	mem_init(&ub, u.b.pd);
	svt_fill(ref, n, 99);
	sgl_build(&src, &ua, &src_l, n);
	sgl_build(&dst, &ub, &dst_l, n + grh);
	sgl_load(&src, &ua, ref);
	mem_clear(&ub, dst.host_end + GUARD_BYTES, dst.gpu_end + GUARD_BYTES);
	SVT_CHECK_OK(post_recv_list(u.b.qp, 40, &dst));

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 41;
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.sg_list = src.sge;
	wr.num_sge = src.n;
	wr.wr.ud.ah = u.a.ah;
	wr.wr.ud.remote_qpn = u.a.remote_qpn;
	wr.wr.ud.remote_qkey = u.opts.conn.qkey;
	SVT_CHECK_OK(ibv_post_send(u.a.qp, &wr, &bad));
	wc = svt_poll_one(u.a.send_cq);
	SVT_CHECK_WC_OK(wc);
	wc = svt_poll_one(u.b.recv_cq);
	SVT_CHECK_WC_OK(wc);
	SVT_CHECK_EQ(wc.wr_id, 40);
	SVT_CHECK_EQ(wc.byte_len, n + grh);
	SVT_CHECK(wc.wc_flags & IBV_WC_GRH);
	/* the payload after the GRH, and nothing outside the list; the GRH
	 * bytes themselves are not compared */
	uint8_t grh_bytes[40];

	uint8_t *full = malloc(n + grh); /* the GRH as it landed, then the payload */

	SVT_CHECK_PTR(full);
	svt_gpu_to_host(grh_bytes, (uint8_t *)(uintptr_t)dst.sge[0].addr, grh);
	memcpy(full, grh_bytes, grh);
	memcpy(full + grh, ref, n);
	check_landed(&ub, &dst, full, dst.host_end + GUARD_BYTES, dst.gpu_end + GUARD_BYTES);
	free(full);
	mem_fini(&ua);
	mem_fini(&ub);
	svt_pair_destroy(&u);
}

/* Memory CUDA made but the CPU reaches: pinned host and managed memory. */
static void test_host_kinds(void)
{
	void *pinned = NULL;
	svt_cu_ptr managed = 0;
	struct ibv_mr *pmr, *mmr;
	struct ibv_wc wc;
	const size_t len = 256 * KiB;

	SVT_CU_OK(svt_cu.MemAllocHost(&pinned, len));
	SVT_CU_OK(svt_cu.MemAllocManaged(&managed, len, SVT_CU_MEM_ATTACH_GLOBAL));
	uint8_t *mg = (uint8_t *)(uintptr_t)managed;

	pmr = ibv_reg_mr(pair.a.pd, pinned, len, SVT_ACCESS_ALL);
	SVT_CHECK_PTR(pmr);
	mmr = ibv_reg_mr(pair.b.pd, mg, len, SVT_ACCESS_ALL);
	SVT_CHECK_PTR(mmr);
	SVT_CU_OK(svt_cu.CtxSynchronize());
	memset(mg, 0, len);
	svt_fill(pinned, len, 31);
	SVT_CHECK_OK(svt_post_send(pair.a.qp, 50, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, pinned,
				   (uint32_t)len, pmr->lkey, managed, mmr->rkey, 0));
	wc = svt_poll_one(pair.a.send_cq);
	SVT_CHECK_WC_OK(wc);
	SVT_CHECK_FILL(mg, len, 31);

	svt_fill(mg, len, 32);
	SVT_CHECK_OK(svt_post_send(pair.a.qp, 51, IBV_WR_RDMA_READ, IBV_SEND_SIGNALED, pinned,
				   (uint32_t)len, pmr->lkey, managed, mmr->rkey, 0));
	wc = svt_poll_one(pair.a.send_cq);
	SVT_CHECK_WC_OK(wc);
	SVT_CHECK_FILL(pinned, len, 32);

	SVT_CHECK_OK(ibv_dereg_mr(pmr));
	SVT_CHECK_OK(ibv_dereg_mr(mmr));
	SVT_CU_OK(svt_cu.MemFreeHost(pinned));
	SVT_CU_OK(svt_cu.MemFree(managed));
}

int main(void)
{
	struct svt_pair_opts o;

	svt_watchdog(170);
	svt_cuda_init(); /* before any verbs call */
	ref = malloc(MAXN + 64);
	SVT_CHECK_PTR(ref);

	svt_pair_opts_default(&o, IBV_QPT_RC);
	o.buf_len = 4096;
	svt_pair_create(&pair, IBV_QPT_RC, &o);
	mem_init(&ma, pair.a.pd);
	mem_init(&mb, pair.b.pd);

	test_transfers();
	test_write_imm();
	test_atomics();
	test_atomics_concurrent();
	test_host_kinds();

	mem_fini(&ma);
	mem_fini(&mb);
	svt_pair_destroy(&pair);
	test_ud();
	free(ref);
	return 0;
}
