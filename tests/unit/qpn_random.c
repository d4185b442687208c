/*
 * unit_qpn_random: QP numbers, SRQ numbers and the PSNs softverbs picks are
 * unpredictable (issue 35): with RoCEv2's trust model a blind injector must
 * guess a QPN and a PSN in the window, which the first QP on an address at
 * 0x4000 and numbers rising by one made easy.
 *   - 8 contexts opened and closed in turn (the lowest-free rule gave each
 *     the same block and first QPN): at least 6 distinct blocks and 6
 *     distinct first QPNs and SRQ numbers
 *   - 100 QPs and 100 SRQs of one context: distinct, all of its block,
 *     never in block 0 or 1023 (QPNs 0, 1 and 0xffffff), and not in
 *     sequence (fewer than 5 successive pairs a step of 1 apart)
 *   - one context still takes max_qp QPs, every number of its block once,
 *     then ENOMEM; destroying half and creating them again works
 *   - rdma_cm: the sq_psn rdma_init_qp_attr gives a UD id (once 0) differs
 *     from id to id (an RC id's comes from the same draw, rdmacm/id.c, and
 *     is the PSN its REQ or REP carries: cm_extqp checks that)
 *   - a context listens on TCP port 61000 + its block, outside Linux's
 *     ephemeral range and never perftest's default 18515: a program that
 *     opens its device and then listens on its own port must not find
 *     that port taken by its context (perftest once failed "Couldn't
 *     listen to port 18790" when its context drew block 790 of base 18000)
 *   - as root, in a network namespace of its own (a registry of its own),
 *     with SOFTVERBS_PORT_BASE leaving 4 blocks: 4 processes take all 4
 *     (a random draw still finds the last free one), a 5th is refused, and
 *     after the 4 are SIGKILLed 4 new ones take every one of their blocks
 */
#include "sv_test.h"

#include <netinet/in.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>
#include <signal.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

#define BLOCK_SHIFT 14
#define LOW 0x3fffu
#define NCTX 8
#define NQP 100

static uint32_t block_of(uint32_t n)
{
	return n >> BLOCK_SHIFT;
}

static int distinct(const uint32_t *v, int n)
{
	int d = 0;

	for (int i = 0; i < n; i++) {
		bool seen = false;

		for (int j = 0; j < i && !seen; j++)
			seen = v[j] == v[i];
		d += !seen;
	}
	return d;
}

static struct ibv_srq *make_srq(struct ibv_pd *pd)
{
	struct ibv_srq_init_attr a = { .attr = { .max_wr = 1, .max_sge = 1 } };

	return ibv_create_srq(pd, &a);
}

/* A small QP: the limit test makes 16384 of them. */
static struct ibv_qp *small_qp(struct ibv_pd *pd, struct ibv_cq *cq, enum ibv_qp_type t)
{
	struct ibv_qp_init_attr a = {
		.send_cq = cq,
		.recv_cq = cq,
		.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = t,
	};

	return ibv_create_qp(pd, &a);
}

static void test_fresh_contexts(void)
{
	uint32_t qpn[NCTX], low[NCTX], blk[NCTX], srqn[NCTX];

	for (int i = 0; i < NCTX; i++) {
		struct svt_dev d;
		struct ibv_cq *cq;
		struct ibv_qp *qp;
		struct ibv_srq *srq;

		svt_dev_open(&d);
		cq = svt_create_cq(d.ctx, 4, NULL);
		qp = small_qp(d.pd, cq, IBV_QPT_RC);
		SVT_CHECK_PTR(qp);
		srq = make_srq(d.pd);
		SVT_CHECK_PTR(srq);
		qpn[i] = qp->qp_num;
		SVT_CHECK_OK(ibv_get_srq_num(srq, &srqn[i]));
		low[i] = qpn[i] & LOW;
		blk[i] = block_of(qpn[i]);
		SVT_CHECK(blk[i] > 0 && blk[i] < 1023);
		SVT_CHECK_EQ(block_of(srqn[i]), blk[i]);
		SVT_CHECK_OK(ibv_destroy_srq(srq));
		SVT_CHECK_OK(ibv_destroy_qp(qp));
		SVT_CHECK_OK(ibv_destroy_cq(cq));
		svt_dev_close(&d);
	}
	svt_log("first QPNs of %d contexts opened in turn: %#x %#x %#x %#x %#x %#x %#x %#x", NCTX,
		qpn[0], qpn[1], qpn[2], qpn[3], qpn[4], qpn[5], qpn[6], qpn[7]);
	SVT_CHECK_GE(distinct(blk, NCTX), 6);
	SVT_CHECK_GE(distinct(qpn, NCTX), 6);
	SVT_CHECK_GE(distinct(low, NCTX), 6);
	SVT_CHECK_GE(distinct(srqn, NCTX), 6);
}

/* The kernel's ephemeral port range; false when it cannot be read. */
static bool ephemeral_range(int *lo, int *hi)
{
	FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
	bool ok = f && fscanf(f, "%d %d", lo, hi) == 2;

	if (f)
		fclose(f);
	return ok;
}

static void test_default_port(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	union ibv_gid gid;
	struct svt_dev d;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	int port, lo, hi, fd;

	SVT_CHECK(!getenv("SOFTVERBS_PORT_BASE"));
	svt_dev_open(&d);
	cq = svt_create_cq(d.ctx, 4, NULL);
	qp = small_qp(d.pd, cq, IBV_QPT_RC);
	SVT_CHECK_PTR(qp);
	port = 61000 + (int)block_of(qp->qp_num);
	SVT_CHECK(port >= 61001 && port <= 62022);
	SVT_CHECK_NE(port, 18515);
	if (ephemeral_range(&lo, &hi) && lo == 32768 && hi == 60999)
		SVT_CHECK(port > hi);
	/* the context's listener is there, at the device's IPv4 address: its
	 * IPv4-mapped GID (::ffff:a.b.c.d) */
	for (int i = 0;; i++) {
		static const uint8_t mapped[12] = { [10] = 0xff, [11] = 0xff };

		SVT_CHECK_MSG(i < 8, "the device has no IPv4-mapped GID");
		SVT_CHECK_OK(ibv_query_gid(d.ctx, 1, i, &gid));
		if (!memcmp(gid.raw, mapped, sizeof(mapped)))
			break;
	}
	memcpy(&sa.sin_addr, gid.raw + 12, 4);
	sa.sin_port = htons((uint16_t)port);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	SVT_CHECK(fd >= 0);
	SVT_CHECK_MSG(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0,
		      "connect to the context's port %d: %s", port, strerror(errno));
	close(fd);
	svt_log("QPN %#x: its context listens on port %d", qp->qp_num, port);
	SVT_CHECK_OK(ibv_destroy_qp(qp));
	SVT_CHECK_OK(ibv_destroy_cq(cq));
	svt_dev_close(&d);
}

static int steps_of_one(const uint32_t *v, int n)
{
	int k = 0;

	for (int i = 1; i < n; i++)
		k += v[i] == v[i - 1] + 1 || v[i - 1] == v[i] + 1;
	return k;
}

static void test_hundred(void)
{
	static const enum ibv_qp_type types[3] = { IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD };
	struct svt_dev d;
	struct ibv_cq *cq;
	struct ibv_qp *qp[NQP];
	struct ibv_srq *srq[NQP];
	uint32_t qpn[NQP], srqn[NQP];

	svt_dev_open(&d);
	cq = svt_create_cq(d.ctx, 16, NULL);
	for (int i = 0; i < NQP; i++) {
		qp[i] = small_qp(d.pd, cq, types[i % 3]);
		SVT_CHECK_PTR(qp[i]);
		qpn[i] = qp[i]->qp_num;
		srq[i] = make_srq(d.pd);
		SVT_CHECK_PTR(srq[i]);
		SVT_CHECK_OK(ibv_get_srq_num(srq[i], &srqn[i]));
		SVT_CHECK_EQ(block_of(qpn[i]), block_of(qpn[0]));
		SVT_CHECK_EQ(block_of(srqn[i]), block_of(qpn[0]));
		SVT_CHECK(qpn[i] > 1 && qpn[i] < 0xffffff);
	}
	SVT_CHECK(block_of(qpn[0]) > 0 && block_of(qpn[0]) < 1023);
	SVT_CHECK_EQ(distinct(qpn, NQP), NQP);
	SVT_CHECK_EQ(distinct(srqn, NQP), NQP);
	svt_log("%d QPNs: %#x %#x %#x %#x ..., %d successive pairs 1 apart; SRQ numbers %#x %#x "
		"%#x ..., %d pairs 1 apart",
		NQP, qpn[0], qpn[1], qpn[2], qpn[3], steps_of_one(qpn, NQP), srqn[0], srqn[1],
		srqn[2], steps_of_one(srqn, NQP));
	SVT_CHECK_LT(steps_of_one(qpn, NQP), 5);
	SVT_CHECK_LT(steps_of_one(srqn, NQP), 5);
	/* each number still finds its QP (ibv_query_qp goes by the object,
	 * so use the QP number table: a destroyed one's number is free) */
	for (int i = 0; i < NQP; i++) {
		SVT_CHECK_OK(ibv_destroy_qp(qp[i]));
		SVT_CHECK_OK(ibv_destroy_srq(srq[i]));
	}
	SVT_CHECK_OK(ibv_destroy_cq(cq));
	svt_dev_close(&d);
}

static void test_limit(void)
{
	struct svt_dev d;
	struct ibv_cq *cq;
	struct ibv_qp **qp;
	uint8_t *seen = calloc(LOW + 1, 1);
	uint32_t n = 0, max, block;
	uint64_t t0 = svt_now_ms();

	svt_dev_open(&d);
	max = (uint32_t)d.dev_attr.max_qp;
	SVT_CHECK_EQ(max, LOW + 1); /* a context's QPs: its whole block */
	qp = calloc(max + 1, sizeof(*qp));
	SVT_CHECK(qp && seen);
	cq = svt_create_cq(d.ctx, 16, NULL);
	for (;;) {
		errno = 0;
		qp[n] = small_qp(d.pd, cq, IBV_QPT_UD);
		if (!qp[n])
			break;
		SVT_CHECK_LE(++n, max);
	}
	SVT_CHECK_EQ(errno, ENOMEM);
	SVT_CHECK_EQ(n, max);
	block = block_of(qp[0]->qp_num);
	for (uint32_t i = 0; i < n; i++) {
		SVT_CHECK_EQ(block_of(qp[i]->qp_num), block);
		SVT_CHECK_MSG(!seen[qp[i]->qp_num & LOW], "QPN %#x twice", qp[i]->qp_num);
		seen[qp[i]->qp_num & LOW] = 1;
	}
	/* every other one goes, and comes back: the numbers freed, no others */
	for (uint32_t i = 0; i < n; i += 2) {
		seen[qp[i]->qp_num & LOW] = 0;
		SVT_CHECK_OK(ibv_destroy_qp(qp[i]));
	}
	for (uint32_t i = 0; i < n; i += 2) {
		qp[i] = small_qp(d.pd, cq, IBV_QPT_RC);
		SVT_CHECK_PTR(qp[i]);
		SVT_CHECK_EQ(block_of(qp[i]->qp_num), block);
		SVT_CHECK_MSG(!seen[qp[i]->qp_num & LOW], "QPN %#x twice", qp[i]->qp_num);
		seen[qp[i]->qp_num & LOW] = 1;
	}
	SVT_CHECK_NULL_ERRNO(small_qp(d.pd, cq, IBV_QPT_RC), ENOMEM);
	for (uint32_t i = 0; i < n; i++)
		SVT_CHECK_OK(ibv_destroy_qp(qp[i]));
	svt_log("%u QPs in one context (block %u, every number once), then ENOMEM; half of them "
		"again: %llu ms",
		n, block, (unsigned long long)(svt_now_ms() - t0));
	SVT_CHECK_OK(ibv_destroy_cq(cq));
	svt_dev_close(&d);
	free(qp);
	free(seen);
}

static void test_cm_psn(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct rdma_cm_id *id[NCTX];
	uint32_t psn[NCTX];

	for (int i = 0; i < NCTX; i++) {
		struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTS };
		int mask = 0;

		SVT_CHECK_OK(rdma_create_id(NULL, &id[i], NULL, RDMA_PS_UDP));
		/* (a synchronous id: the call returns once resolved) */
		SVT_CHECK_OK(rdma_resolve_addr(id[i], NULL, (struct sockaddr *)&sa, 2000));
		SVT_CHECK_MSG(rdma_init_qp_attr(id[i], &a, &mask) == 0, "rdma_init_qp_attr: %s",
			      strerror(errno));
		SVT_CHECK(mask & IBV_QP_SQ_PSN);
		SVT_CHECK_LE(a.sq_psn, 0xffffffu);
		psn[i] = a.sq_psn;
	}
	svt_log("UD ids' first PSNs: %#x %#x %#x %#x ...", psn[0], psn[1], psn[2], psn[3]);
	SVT_CHECK_GE(distinct(psn, NCTX), NCTX - 1);
	for (int i = 0; i < NCTX; i++)
		SVT_CHECK_OK(rdma_destroy_id(id[i]));
}

/* ---- the registry of a namespace of our own ---- */

#define SMALL_BASE "65531" /* blocks 1..4 have ports 65532..65535 */
#define NSMALL 4

/* Child: open the device (0 written back if it cannot), hold it until the
 * parent says or kills us. */
static int holder(int rfd, int wfd, int argc, char **argv)
{
	const char *want = getenv("SVT_DEVICE") ? getenv("SVT_DEVICE") : "sv_lo";
	struct ibv_device **l = ibv_get_device_list(NULL);
	struct ibv_context *ctx = NULL;
	uint32_t qpn = 0;
	char c;

	(void)argc;
	(void)argv;
	for (int i = 0; l && l[i] && !ctx; i++)
		if (!strcmp(ibv_get_device_name(l[i]), want))
			ctx = ibv_open_device(l[i]);
	if (l)
		ibv_free_device_list(l); /* an open device outlives its list */
	if (ctx) {
		struct ibv_pd *pd = ibv_alloc_pd(ctx);
		struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
		struct ibv_qp *qp = pd && cq ? small_qp(pd, cq, IBV_QPT_RC) : NULL;

		SVT_CHECK_PTR(qp);
		qpn = qp->qp_num;
	}
	svt_chan_write(wfd, &qpn, sizeof(qpn));
	svt_chan_read(rfd, &c, 1, 600000);
	return 0; /* exit closes everything */
}

static uint32_t start_holder(struct svt_child *c)
{
	uint32_t qpn;

	svt_spawn(c, "holder", NULL);
	svt_chan_read(c->rfd, &qpn, sizeof(qpn), 0);
	return qpn;
}

static void test_reclaim(void)
{
	struct svt_child c[NSMALL], extra;
	uint32_t blk[NSMALL];

	setenv("SOFTVERBS_PORT_BASE", SMALL_BASE, 1);
	for (int round = 0; round < 2; round++) {
		for (int i = 0; i < NSMALL; i++) {
			uint32_t qpn = start_holder(&c[i]);

			SVT_CHECK_MSG(qpn, "round %d: process %d of %d found no block", round, i + 1,
				      NSMALL);
			blk[i] = block_of(qpn);
			SVT_CHECK(blk[i] >= 1 && blk[i] <= NSMALL);
		}
		SVT_CHECK_EQ(distinct(blk, NSMALL), NSMALL);
		if (round == 0) {
			/* every block held by a live process: refused */
			SVT_CHECK_EQ(start_holder(&extra), 0);
			svt_chan_write(extra.wfd, "g", 1);
			SVT_CHECK_EQ(svt_child_wait(&extra, 0), 0);
		}
		svt_log("round %d: %d processes took blocks %u %u %u %u%s", round, NSMALL, blk[0],
			blk[1], blk[2], blk[3],
			round ? " (all of them SIGKILLed ones')" : "; a 5th was refused");
		for (int i = 0; i < NSMALL; i++) {
			svt_child_kill(&c[i], SIGKILL);
			SVT_CHECK_EQ(svt_child_wait(&c[i], 0), 128 + SIGKILL);
		}
	}
	unsetenv("SOFTVERBS_PORT_BASE");
}

int main(int argc, char **argv)
{
	static const struct svt_child_role roles[] = { { "holder", holder }, { NULL, NULL } };
	bool own_ns;

	svt_child_dispatch(argc, argv, roles);
	svt_watchdog(100);
	/* a network namespace of our own when we may: a registry nobody else
	 * uses, so that the counts below are ours alone */
	own_ns = svt_private_netns();
	if (!own_ns)
		svt_log("not root: in the host's registry; the reclaim part is skipped");
	/* first, while this process holds no context: rdma_cm's (test_cm_psn)
	 * stays open for the process's life, and drawn among the 1022 blocks
	 * it was one of the reclaim part's 4 once in a few hundred runs (its
	 * 4th process then found no block) */
	if (own_ns)
		test_reclaim();
	test_fresh_contexts();
	test_hundred();
	test_limit();
	test_cm_psn();
	test_default_port();
	if (own_ns)
		svt_private_netns_done();
	return 0;
}
