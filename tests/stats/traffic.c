/*
 * stats_traffic - the counters against known traffic, exactly.
 *
 * Two contexts of this process, A (opened first: context 0) and B (context
 * 1), exchange traffic whose packets can be counted in advance (MTU 4096):
 *
 *   main RC pair   10 SENDs of 5000 B (2 packets each, 1 ACK each), an RDMA
 *                  WRITE of 10000 B (3 packets, 1 ACK), an RDMA READ of
 *                  8192 B (1 request, 2 responses), a FETCH_AND_ADD (1 + 1)
 *   RNR pair       rnr_retry 1, no receive posted: the SEND, an RNR NAK, the
 *                  SEND again (a retransmission), an RNR NAK, and
 *                  RNR_RETRY_EXC_ERR
 *   access pair    an RDMA WRITE of 100 B with an rkey naming no MR: a
 *                  remote access NAK, REM_ACCESS_ERR
 *   UD pair        a 64 B datagram with the wrong Q_Key: dropped, counted
 *   overrun pair   two signalled SENDs into a send CQ with room for one: one
 *                  completion, one CQ overrun
 *   dead peer      a SEND to the endpoint of a context closed before:
 *                  a connect failure, RETRY_EXC_ERR (retry_cnt 0)
 *
 * Every counter of both contexts and of each QP, zeros included, must then
 * equal the expectation, read from the counters segments with the reader the
 * tool uses (src/stats); and ibv_query_port's qkey_viol_cntr must count the
 * datagram (exactly, when SV_STATS_EXCLUSIVE says that no other process of
 * this user uses sv_lo in this network namespace: tests/stats/stats.sh runs
 * it in a namespace of its own when it can).
 *
 * With an argument FILE it then writes its expectations there as JSON,
 * prints READY and waits for its standard input to close, so that
 * stats.sh can compare `softverbs stat --json`, the text output, `softverbs
 * top` and the sysfs view's counters files with them while the contexts
 * are alive.  Then it destroys everything and checks that closing the
 * devices removed their segments; with a second argument "exit-open" it
 * exits with the devices open instead (stats.sh checks that exit removes
 * them).
 */
#include "sv_test.h"
#include "stats/reader.h"

#include <inttypes.h>
#include <unistd.h>

#define NSEND 10
#define SEND_LEN 5000
#define WRITE_LEN 10000
#define READ_LEN 8192
#define SMALL 100
#define UD_LEN 64
#define SV_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* ---- expectations ---- */

#define MAX_QPS 8
struct exp_qp {
	uint32_t qpn;
	struct ibv_qp *qp;
	uint64_t c[SV_QPC_COUNT];
};
struct exp_side {
	struct exp_qp qp[MAX_QPS];
	int nqp;
	uint64_t ctx_c[SV_CTXC_COUNT];
	uint64_t wc[SV_STAT_WC_MAX];
};
static struct exp_side ex[2]; /* A, B */

static uint64_t *E(int side, struct ibv_qp *qp, enum sv_stat_qp_counter c)
{
	struct exp_side *s = &ex[side];

	for (int i = 0; i < s->nqp; i++)
		if (s->qp[i].qpn == qp->qp_num)
			return &s->qp[i].c[c];
	SVT_CHECK(s->nqp < MAX_QPS);
	s->qp[s->nqp].qpn = qp->qp_num;
	s->qp[s->nqp].qp = qp;
	return &s->qp[s->nqp++].c[c];
}

/* A packet of `bytes` payload from QP `from` of side sf to QP `to` of side st. */
static void pkt(int sf, struct ibv_qp *from, int st, struct ibv_qp *to, uint64_t n, uint64_t bytes)
{
	*E(sf, from, SV_QPC_TX_PKTS) += n;
	*E(sf, from, SV_QPC_TX_BYTES) += bytes;
	if (to) {
		*E(st, to, SV_QPC_RX_PKTS) += n;
		*E(st, to, SV_QPC_RX_BYTES) += bytes;
	}
}

static void port_sum(const struct exp_side *s, uint64_t *port)
{
	memset(port, 0, sizeof(uint64_t) * SV_QPC_COUNT);
	for (int i = 0; i < s->nqp; i++)
		for (int c = 0; c < SV_QPC_COUNT; c++)
			port[c] += s->qp[i].c[c];
}

/* ---- comparing with the segments ---- */

/* The views of this process's two contexts (0: A, 1: B); false if missing. */
static bool own_views(struct sv_stat_ctx_view **all, size_t *n, struct sv_stat_ctx_view *side[2])
{
	SVT_CHECK_OK(sv_stat_collect(SV_STAT_QPS, all, n));
	side[0] = side[1] = NULL;
	for (size_t i = 0; i < *n; i++)
		if ((*all)[i].pid == getpid() && (*all)[i].ctx_no < 2)
			side[(*all)[i].ctx_no] = &(*all)[i];
	return side[0] && side[1];
}

/* Every difference between expectation and segment, as text; 0 when none. */
static int diff(char *out, size_t len)
{
	struct sv_stat_ctx_view *all, *v[2];
	size_t n, at = 0;
	int ndiff = 0;

#define NOTE(...)                                                                       \
	do {                                                                            \
		ndiff++;                                                                \
		if (at < len)                                                           \
			at += (size_t)snprintf(out + at, len - at, __VA_ARGS__);        \
	} while (0)
	out[0] = '\0';
	if (!own_views(&all, &n, v)) {
		NOTE("the segments of contexts 0 and 1 of pid %d are not there\n", (int)getpid());
		sv_stat_views_free(all, n);
		return ndiff;
	}
	for (int s = 0; s < 2; s++) {
		uint64_t port[SV_QPC_COUNT];

		port_sum(&ex[s], port);
		for (int c = 0; c < SV_QPC_COUNT; c++)
			if (v[s]->port[c] != port[c])
				NOTE("context %d port %s: %" PRIu64 ", expected %" PRIu64 "\n", s,
				     sv_stat_qpc_name(c), v[s]->port[c], port[c]);
		for (int c = 0; c < SV_CTXC_COUNT; c++)
			if (v[s]->ctx_c[c] != ex[s].ctx_c[c])
				NOTE("context %d %s: %" PRIu64 ", expected %" PRIu64 "\n", s,
				     sv_stat_ctxc_name(c), v[s]->ctx_c[c], ex[s].ctx_c[c]);
		for (int c = 0; c < SV_STAT_WC_MAX; c++)
			if (v[s]->wc_status[c] != ex[s].wc[c])
				NOTE("context %d completions with status %d: %" PRIu64
				     ", expected %" PRIu64 "\n",
				     s, c, v[s]->wc_status[c], ex[s].wc[c]);
		if ((int)v[s]->nqp != ex[s].nqp)
			NOTE("context %d: %zu QPs, expected %d\n", s, v[s]->nqp, ex[s].nqp);
		for (int q = 0; q < ex[s].nqp; q++) {
			const struct sv_stat_qp_view *qv = NULL;

			for (size_t k = 0; k < v[s]->nqp; k++)
				if (v[s]->qp[k].qpn == ex[s].qp[q].qpn)
					qv = &v[s]->qp[k];
			if (!qv) {
				NOTE("context %d: no QP %u\n", s, ex[s].qp[q].qpn);
				continue;
			}
			for (int c = 0; c < SV_QPC_COUNT; c++)
				if (qv->c[c] != ex[s].qp[q].c[c])
					NOTE("context %d QP %u %s: %" PRIu64 ", expected %" PRIu64
					     "\n",
					     s, qv->qpn, sv_stat_qpc_name(c), qv->c[c],
					     ex[s].qp[q].c[c]);
		}
	}
#undef NOTE
	sv_stat_views_free(all, n);
	return ndiff;
}

/*
 * Counters are updated by the thread that sends or receives, a moment after
 * the packet goes: wait until they match, then make sure nothing more comes
 * (a retransmission nobody asked for would).
 */
static void check_counters(const char *when)
{
	static char text[16384];
	uint64_t t0 = svt_now_ms();

	while (diff(text, sizeof(text)) && svt_now_ms() - t0 < SVT_TIMEOUT_MS)
		svt_sleep_ms(5);
	if (!diff(text, sizeof(text))) {
		svt_sleep_ms(100);
		if (!diff(text, sizeof(text))) {
			svt_log("counters exact after %s", when);
			return;
		}
	}
	SVT_FAIL("counters after %s differ from the traffic:\n%s", when, text);
}

/* Wait until QP qp of context side has received n packets. */
static void wait_rx(int side, struct ibv_qp *qp, uint64_t n)
{
	uint64_t t0 = svt_now_ms(), got = 0;

	for (;;) {
		struct sv_stat_ctx_view *all, *v[2];
		size_t k;

		if (own_views(&all, &k, v))
			for (size_t i = 0; i < v[side]->nqp; i++)
				if (v[side]->qp[i].qpn == qp->qp_num)
					got = v[side]->qp[i].c[SV_QPC_RX_PKTS];
		sv_stat_views_free(all, k);
		if (got >= n)
			return;
		if (svt_now_ms() - t0 > SVT_TIMEOUT_MS)
			SVT_FAIL("QP %u received %" PRIu64 " packets, waited for %" PRIu64,
				 qp->qp_num, got, n);
		svt_sleep_ms(1);
	}
}

/* ---- traffic ---- */

/* What the scenarios create beside the pair, destroyed before it. */
static struct ibv_cq *cqs[16];
static int ncqs;
static struct ibv_ah *ud_ah;

static struct ibv_cq *new_cq(struct ibv_context *ctx, int cqe)
{
	SVT_CHECK(ncqs < (int)SV_ARRAY_LEN(cqs));
	return cqs[ncqs++] = svt_create_cq(ctx, cqe, NULL);
}

static struct ibv_qp *rc_qp(struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct svt_qp_init qi;

	svt_qp_init_default(&qi, IBV_QPT_RC);
	return svt_create_qp(pd, cq, cq, &qi);
}

static void main_pair(struct svt_pair *p)
{
	struct ibv_qp *qa = p->a.qp, *qb = p->b.qp;
	struct ibv_wc wc[NSEND];
	uint8_t *a = p->a.buf, *b = p->b.buf;

	for (int i = 0; i < NSEND; i++)
		SVT_CHECK_OK(svt_post_recv(qb, i, b + i * SEND_LEN, SEND_LEN, p->b.mr->lkey));
	for (int i = 0; i < NSEND; i++)
		SVT_CHECK_OK(svt_post_send(qa, i, IBV_WR_SEND, IBV_SEND_SIGNALED, a + i * SEND_LEN,
					   SEND_LEN, p->a.mr->lkey, 0, 0, 0));
	svt_poll_ok(p->a.send_cq, NSEND, wc, 0);
	svt_poll_ok(p->b.recv_cq, NSEND, wc, 0);
	pkt(0, qa, 1, qb, NSEND * 2, NSEND * SEND_LEN); /* 4096 + 904 each */
	pkt(1, qb, 0, qa, NSEND, 0);                     /* one ACK a message */
	*E(0, qa, SV_QPC_CQE_OK) += NSEND;
	*E(1, qb, SV_QPC_CQE_OK) += NSEND;

	SVT_CHECK_OK(svt_post_send(qa, 20, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, a, WRITE_LEN,
				   p->a.mr->lkey, (uintptr_t)b, p->b.mr->rkey, 0));
	svt_poll_ok(p->a.send_cq, 1, wc, 0);
	pkt(0, qa, 1, qb, 3, WRITE_LEN);
	pkt(1, qb, 0, qa, 1, 0);
	*E(0, qa, SV_QPC_CQE_OK) += 1;

	SVT_CHECK_OK(svt_post_send(qa, 21, IBV_WR_RDMA_READ, IBV_SEND_SIGNALED, a + 16384,
				   READ_LEN, p->a.mr->lkey, (uintptr_t)b, p->b.mr->rkey, 0));
	svt_poll_ok(p->a.send_cq, 1, wc, 0);
	pkt(0, qa, 1, qb, 1, 0);
	pkt(1, qb, 0, qa, 2, READ_LEN);
	*E(0, qa, SV_QPC_CQE_OK) += 1;

	SVT_CHECK_OK(svt_post_atomic(qa, 22, IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_SEND_SIGNALED,
				     a + 32768, p->a.mr->lkey, (uintptr_t)(b + 32768),
				     p->b.mr->rkey, 5, 0));
	svt_poll_ok(p->a.send_cq, 1, wc, 0);
	pkt(0, qa, 1, qb, 1, 0);
	pkt(1, qb, 0, qa, 1, 0);
	*E(0, qa, SV_QPC_CQE_OK) += 1;
}

/* Another RC QP on each context, connected with c, each with a CQ of its own; *cq is A's. */
static void rc_pair_on(struct svt_pair *p, const struct svt_conn *c, struct ibv_cq **cq,
		       struct ibv_qp **qa, struct ibv_qp **qb)
{
	*cq = new_cq(p->a.ctx, 4);
	*qa = rc_qp(p->a.pd, *cq);
	*qb = rc_qp(p->b.pd, new_cq(p->b.ctx, 4));
	svt_qp_link(*qa, &p->a.gid, *qb, &p->b.gid, c);
}

static void rnr(struct svt_pair *p, struct ibv_qp **qa, struct ibv_qp **qb)
{
	struct svt_conn c;
	struct ibv_cq *cq;
	struct ibv_wc wc;

	svt_conn_default(&c, IBV_QPT_RC);
	c.timeout = 20;
	c.rnr_retry = 1;
	c.min_rnr_timer = 1; /* 10 us */
	rc_pair_on(p, &c, &cq, qa, qb);
	SVT_CHECK_OK(svt_post_send(*qa, 1, IBV_WR_SEND, IBV_SEND_SIGNALED, p->a.buf, SMALL,
				   p->a.mr->lkey, 0, 0, 0));
	svt_poll_n(cq, 1, &wc, 0);
	SVT_CHECK_WC_STATUS(wc, IBV_WC_RNR_RETRY_EXC_ERR);
	pkt(0, *qa, 1, *qb, 2, 2 * SMALL); /* sent, and sent again */
	pkt(1, *qb, 0, *qa, 2, 0);         /* two RNR NAKs */
	*E(0, *qa, SV_QPC_RETRANS) += 1;
	*E(0, *qa, SV_QPC_RNR_NAK_RCVD) += 2;
	*E(1, *qb, SV_QPC_RNR_NAK_SENT) += 2;
	*E(0, *qa, SV_QPC_CQE_ERR) += 1;
	ex[0].wc[IBV_WC_RNR_RETRY_EXC_ERR]++;
}

static void rem_access(struct svt_pair *p, struct ibv_qp **qa, struct ibv_qp **qb)
{
	struct svt_conn c;
	struct ibv_cq *cq;
	struct ibv_wc wc;

	svt_conn_default(&c, IBV_QPT_RC);
	c.timeout = 20;
	rc_pair_on(p, &c, &cq, qa, qb);
	/* the key's top bit moves it to a table slot far past any MR */
	SVT_CHECK_OK(svt_post_send(*qa, 1, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, p->a.buf, SMALL,
				   p->a.mr->lkey, (uintptr_t)p->b.buf, p->b.mr->rkey ^ 0x80000000u,
				   0));
	svt_poll_n(cq, 1, &wc, 0);
	SVT_CHECK_WC_STATUS(wc, IBV_WC_REM_ACCESS_ERR);
	pkt(0, *qa, 1, *qb, 1, SMALL);
	pkt(1, *qb, 0, *qa, 1, 0); /* the NAK */
	*E(1, *qb, SV_QPC_REM_ACCESS_SENT) += 1;
	*E(0, *qa, SV_QPC_REM_ACCESS_RCVD) += 1;
	*E(0, *qa, SV_QPC_CQE_ERR) += 1;
	ex[0].wc[IBV_WC_REM_ACCESS_ERR]++;
}

static void qkey(struct svt_pair *p, struct ibv_qp **qa, struct ibv_qp **qb)
{
	struct svt_qp_init qi;
	struct svt_conn c;
	struct ibv_cq *cqa = new_cq(p->a.ctx, 4);
	struct ibv_ah_attr aa;
	struct ibv_wc wc;

	svt_qp_init_default(&qi, IBV_QPT_UD);
	svt_conn_default(&c, IBV_QPT_UD);
	*qa = svt_create_qp(p->a.pd, cqa, cqa, &qi);
	struct ibv_cq *cqb = new_cq(p->b.ctx, 4);

	*qb = svt_create_qp(p->b.pd, cqb, cqb, &qi);
	svt_qp_connect(*qa, &c, NULL, 0);
	svt_qp_connect(*qb, &c, NULL, 0);
	svt_ah_attr(&aa, &p->b.gid, &c);
	ud_ah = ibv_create_ah(p->a.pd, &aa);
	SVT_CHECK_PTR(ud_ah);
	SVT_CHECK_OK(svt_post_ud_send(*qa, 1, IBV_SEND_SIGNALED, p->a.buf, UD_LEN, p->a.mr->lkey,
				      ud_ah, (*qb)->qp_num, c.qkey ^ 0x2222u));
	svt_poll_ok(cqa, 1, &wc, 0);
	pkt(0, *qa, 1, *qb, 1, UD_LEN);
	*E(1, *qb, SV_QPC_QKEY_VIOL) += 1;
	*E(0, *qa, SV_QPC_CQE_OK) += 1;
}

static void overrun(struct svt_pair *p, struct ibv_qp **qa, struct ibv_qp **qb)
{
	struct svt_conn c;
	struct ibv_cq *small = new_cq(p->a.ctx, 1);
	struct ibv_cq *cqb = new_cq(p->b.ctx, 4);
	struct ibv_wc wc[2];

	SVT_CHECK_EQ(small->cqe, 1); /* room for one completion */
	svt_conn_default(&c, IBV_QPT_RC);
	c.timeout = 20;
	*qa = rc_qp(p->a.pd, small);
	*qb = rc_qp(p->b.pd, cqb);
	svt_qp_link(*qa, &p->a.gid, *qb, &p->b.gid, &c);
	for (int i = 0; i < 2; i++)
		SVT_CHECK_OK(svt_post_recv(*qb, i, (uint8_t *)p->b.buf + i * SMALL, SMALL,
					   p->b.mr->lkey));
	for (int i = 0; i < 2; i++)
		SVT_CHECK_OK(svt_post_send(*qa, i, IBV_WR_SEND, IBV_SEND_SIGNALED, p->a.buf, SMALL,
					   p->a.mr->lkey, 0, 0, 0));
	svt_poll_ok(cqb, 2, wc, 0);
	/* both ACKs in, both completions made: only then empty the CQ */
	wait_rx(0, *qa, 2);
	svt_poll_ok(small, 1, wc, 0);
	svt_expect_no_wc(small, 0);
	pkt(0, *qa, 1, *qb, 2, 2 * SMALL);
	pkt(1, *qb, 0, *qa, 2, 0);
	*E(0, *qa, SV_QPC_CQE_OK) += 1; /* the second found the CQ full */
	*E(1, *qb, SV_QPC_CQE_OK) += 2;
	ex[0].ctx_c[SV_CTXC_CQ_OVERRUN]++;
}

static void dead_peer(struct svt_pair *p, struct ibv_qp **qa)
{
	struct ibv_context *gone = svt_open_context();
	union ibv_gid gid;
	struct svt_conn c;
	struct ibv_cq *cq = new_cq(p->a.ctx, 4);
	struct ibv_wc wc;

	/* the GID of an endpoint that no longer listens */
	SVT_CHECK_OK(ibv_query_gid(gone, 1, 0, &gid));
	SVT_CHECK_OK(ibv_close_device(gone));
	svt_conn_default(&c, IBV_QPT_RC);
	c.retry_cnt = 0;
	c.timeout = 1; /* the shortest the engine keeps: 1 ms */
	*qa = rc_qp(p->a.pd, cq);
	svt_qp_connect(*qa, &c, &gid, 0x11);
	SVT_CHECK_OK(svt_post_send(*qa, 1, IBV_WR_SEND, IBV_SEND_SIGNALED, p->a.buf, SMALL,
				   p->a.mr->lkey, 0, 0, 0));
	svt_poll_n(cq, 1, &wc, 0);
	SVT_CHECK_WC_STATUS(wc, IBV_WC_RETRY_EXC_ERR);
	pkt(0, *qa, 1, NULL, 1, SMALL); /* handed to a connection that never came up */
	*E(0, *qa, SV_QPC_CQE_ERR) += 1;
	ex[0].wc[IBV_WC_RETRY_EXC_ERR]++;
	ex[0].ctx_c[SV_CTXC_CONNECT_FAIL]++;
}

/* ---- the expectations as JSON, for stats.sh ---- */

static void write_json(const char *file)
{
	FILE *f = fopen(file, "w");

	SVT_CHECK_PTR(f);
	fprintf(f, "{\"pid\":%d,\"contexts\":[", (int)getpid());
	for (int s = 0; s < 2; s++) {
		uint64_t port[SV_QPC_COUNT];

		port_sum(&ex[s], port);
		fprintf(f, "%s{\"context\":%d,\"counters\":{", s ? "," : "", s);
		for (int c = 0; c < SV_QPC_COUNT; c++)
			fprintf(f, "%s\"%s\":%" PRIu64, c ? "," : "", sv_stat_qpc_name(c), port[c]);
		for (int c = 0; c < SV_CTXC_COUNT; c++)
			fprintf(f, ",\"%s\":%" PRIu64, sv_stat_ctxc_name(c), ex[s].ctx_c[c]);
		fprintf(f, "},\"completion_errors_by_status\":{");
		for (int c = 0, first = 1; c < SV_STAT_WC_MAX; c++)
			if (ex[s].wc[c]) {
				fprintf(f, "%s\"%s\":%" PRIu64, first ? "" : ",", sv_stat_wc_name(c),
					ex[s].wc[c]);
				first = 0;
			}
		fprintf(f, "},\"qps\":{");
		for (int q = 0; q < ex[s].nqp; q++) {
			static const char *const states[] = { "RESET", "INIT", "RTR", "RTS",
							       "SQD",   "SQE",  "ERR" };
			struct ibv_qp *qp = ex[s].qp[q].qp;

			fprintf(f, "%s\"%u\":{\"type\":\"%s\",\"state\":\"%s\",\"counters\":{",
				q ? "," : "", ex[s].qp[q].qpn,
				qp->qp_type == IBV_QPT_UD ? "UD" : "RC", states[svt_qp_state(qp)]);
			for (int c = 0; c < SV_QPC_COUNT; c++)
				fprintf(f, "%s\"%s\":%" PRIu64, c ? "," : "", sv_stat_qpc_name(c),
					ex[s].qp[q].c[c]);
			fprintf(f, "}}");
		}
		fprintf(f, "}}");
	}
	fprintf(f, "]}\n");
	SVT_CHECK_OK(fclose(f));
}

int main(int argc, char **argv)
{
	struct svt_pair_opts o;
	struct svt_pair p;
	struct ibv_qp *qa[5], *qb[4];
	struct ibv_port_attr pa;
	uint64_t dev_qkey;

	/* the counters count packets: one-sided operations that the initiator
	 * executes on the shared pages of an MR (SOFTVERBS_SHARED_MR) make none */
	setenv("SOFTVERBS_SHARED_MR", "0", 1);
	svt_watchdog(50);
	svt_pair_opts_default(&o, IBV_QPT_RC);
	o.separate_cqs = true;
	o.conn.timeout = 20; /* 4 s: no retransmission a busy machine did not cause */
	svt_pair_create(&p, IBV_QPT_RC, &o);

	main_pair(&p);
	check_counters("SEND, WRITE, READ, atomic");
	rnr(&p, &qa[0], &qb[0]);
	rem_access(&p, &qa[1], &qb[1]);
	qkey(&p, &qa[2], &qb[2]);
	overrun(&p, &qa[3], &qb[3]);
	dead_peer(&p, &qa[4]);
	check_counters("RNR, remote access error, Q_Key violation, CQ overrun, dead peer");

	/* ibv_query_port: the device's Q_Key violations, and no P_Key ones */
	SVT_CHECK_OK(ibv_query_port(p.a.ctx, 1, &pa));
	SVT_CHECK_EQ(pa.bad_pkey_cntr, 0);
	dev_qkey = pa.qkey_viol_cntr;
	if (getenv("SV_STATS_EXCLUSIVE"))
		SVT_CHECK_EQ(dev_qkey, 1);
	else
		SVT_CHECK_GE(dev_qkey, 1);
	SVT_CHECK_OK(ibv_query_port(p.b.ctx, 1, &pa));
	SVT_CHECK_GE(pa.qkey_viol_cntr, dev_qkey); /* the same device: the same count */

	if (argc > 1) {
		char line[16];

		write_json(argv[1]);
		printf("READY\n");
		fflush(stdout);
		while (fgets(line, sizeof(line), stdin))
			;
	}
	/* destroyed QPs stay counted in their context's port */
	for (int i = 0; i < 4; i++) {
		SVT_CHECK_OK(ibv_destroy_qp(qa[i]));
		SVT_CHECK_OK(ibv_destroy_qp(qb[i]));
	}
	SVT_CHECK_OK(ibv_destroy_qp(qa[4]));
	{
		struct sv_stat_ctx_view *all, *v[2];
		uint64_t port[SV_QPC_COUNT];
		size_t n;

		SVT_CHECK(own_views(&all, &n, v));
		for (int s = 0; s < 2; s++) {
			port_sum(&ex[s], port);
			SVT_CHECK_EQ(v[s]->nqp, 1);
			for (int c = 0; c < SV_QPC_COUNT; c++)
				SVT_CHECK_EQ(v[s]->port[c], port[c]);
		}
		sv_stat_views_free(all, n);
	}
	svt_log("port counters kept after the QPs were destroyed");
	if (argc > 2 && !strcmp(argv[2], "exit-open"))
		return 0; /* the library removes the segments at exit (stats.sh checks) */

	SVT_CHECK_OK(ibv_destroy_ah(ud_ah));
	for (int i = 0; i < ncqs; i++)
		SVT_CHECK_OK(ibv_destroy_cq(cqs[i]));
	svt_pair_destroy(&p);
	{
		struct sv_stat_ctx_view *all;
		size_t n;

		SVT_CHECK_OK(sv_stat_collect(0, &all, &n));
		for (size_t i = 0; i < n; i++)
			SVT_CHECK_NE(all[i].pid, getpid());
		sv_stat_views_free(all, n);
	}
	svt_log("segments removed when the devices were closed");
	return 0;
}
