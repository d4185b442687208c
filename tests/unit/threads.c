/*
 * unit_threads: verbs called from several threads at once (label "threaded").
 *   Phase 1: 4 threads on two shared contexts/PDs each create their own CQs,
 *            MRs and QPs concurrently, pass SEND and RDMA WRITE traffic, check
 *            the data, and destroy everything.
 *   Phase 2: 4 sender threads, each on its own QP, SEND into QPs that share
 *            one receive CQ, which 2 threads poll concurrently: every message
 *            completes exactly once.
 *   Phase 3: an MR is deregistered (and its memory unmapped) while a peer
 *            thread streams RDMA WRITEs into it: REM_ACCESS_ERR, no crash.
 */
#include "sv_test.h"

#include <pthread.h>
#include <sys/mman.h>
#include <stdatomic.h>

#define NTHREADS 4
#define ITERS 300
#define P2_MSGS 200

static struct svt_dev da, db;

/* ---------------------------------------------------------------- phase 1 */

static void *phase1_thread(void *arg)
{
	uint32_t t = (uint32_t)(uintptr_t)arg;
	struct svt_qp_init qi;
	struct ibv_cq *acq = svt_create_cq(da.ctx, 64, NULL);
	struct ibv_cq *bcq = svt_create_cq(db.ctx, 64, NULL);
	char *abuf = svt_alloc(65536), *bbuf = svt_alloc(65536);
	struct ibv_mr *amr = svt_reg_mr(da.pd, abuf, 65536, SVT_ACCESS_ALL);
	struct ibv_mr *bmr = svt_reg_mr(db.pd, bbuf, 65536, SVT_ACCESS_ALL);
	struct ibv_wc wc;

	svt_qp_init_default(&qi, IBV_QPT_RC);
	struct ibv_qp *qa = svt_create_qp(da.pd, acq, acq, &qi);
	struct ibv_qp *qb = svt_create_qp(db.pd, bcq, bcq, &qi);

	svt_qp_link(qa, &da.gid, qb, &db.gid, NULL);

	for (uint32_t i = 0; i < ITERS; i++) {
		uint32_t seed = t * 100000 + i;
		uint32_t len = 64 + (i * 131) % 4000;
		size_t off = (i % 8) * 8192;

		svt_fill(abuf + off, len, seed);
		if (i % 4 == 3) {
			SVT_CHECK_OK(svt_post_send(qa, i, IBV_WR_RDMA_WRITE,
						   IBV_SEND_SIGNALED,
						   abuf + off, len, amr->lkey,
						   (uintptr_t)bbuf + off,
						   bmr->rkey, 0));
			wc = svt_poll_one(acq);
			SVT_CHECK_WC_OK(wc);
			SVT_CHECK_EQ(wc.wr_id, i);
		} else {
			SVT_CHECK_OK(svt_post_recv(qb, i, bbuf + off, 8192,
						   bmr->lkey));
			SVT_CHECK_OK(svt_post_send(qa, i, IBV_WR_SEND,
						   IBV_SEND_SIGNALED,
						   abuf + off, len, amr->lkey,
						   0, 0, 0));
			wc = svt_poll_one(acq);
			SVT_CHECK_WC_OK(wc);
			SVT_CHECK_EQ(wc.wr_id, i);
			wc = svt_poll_one(bcq);
			SVT_CHECK_WC_OK(wc);
			SVT_CHECK_EQ(wc.wr_id, i);
			SVT_CHECK_EQ(wc.byte_len, len);
			SVT_CHECK_EQ(wc.qp_num, qb->qp_num);
		}
		SVT_CHECK_FILL(bbuf + off, len, seed);
	}
	SVT_CHECK_OK(ibv_destroy_qp(qa));
	SVT_CHECK_OK(ibv_destroy_qp(qb));
	SVT_CHECK_OK(ibv_dereg_mr(amr));
	SVT_CHECK_OK(ibv_dereg_mr(bmr));
	SVT_CHECK_OK(ibv_destroy_cq(acq));
	SVT_CHECK_OK(ibv_destroy_cq(bcq));
	free(abuf);
	free(bbuf);
	return NULL;
}

static void phase1(void)
{
	pthread_t th[NTHREADS];

	for (uintptr_t t = 0; t < NTHREADS; t++)
		SVT_CHECK_EQ(pthread_create(&th[t], NULL, phase1_thread,
					    (void *)t),
			     0);
	for (int t = 0; t < NTHREADS; t++)
		SVT_CHECK_EQ(pthread_join(th[t], NULL), 0);
}

/* ---------------------------------------------------------------- phase 2 */

struct p2 {
	struct ibv_cq *shared_rcq;          /* b side, all QPs */
	struct ibv_cq *scq[NTHREADS];       /* a side, one per sender */
	struct ibv_cq *b_scq;               /* b side send CQ (unused) */
	struct ibv_qp *qa[NTHREADS], *qb[NTHREADS];
	char *abuf, *bbuf;
	struct ibv_mr *amr, *bmr;
	atomic_uchar seen[NTHREADS][P2_MSGS];
	atomic_int total;
	atomic_int dup;
};
static struct p2 g;

static void *p2_sender(void *arg)
{
	int t = (int)(uintptr_t)arg;
	struct ibv_wc wc;

	for (int i = 0; i < P2_MSGS; i++) {
		bool sig = (i % 16 == 15) || i == P2_MSGS - 1;

		SVT_CHECK_OK(svt_post_send(g.qa[t],
					   ((uint64_t)t << 32) | (uint64_t)i,
					   IBV_WR_SEND,
					   sig ? IBV_SEND_SIGNALED : 0,
					   g.abuf + t * 64, 16, g.amr->lkey, 0,
					   0, 0));
		if (sig) {
			wc = svt_poll_one(g.scq[t]);
			SVT_CHECK_WC_OK(wc);
		}
	}
	return NULL;
}

static void *p2_poller(void *arg)
{
	struct ibv_wc wc[8];
	uint64_t deadline = svt_now_ms() + 20000;

	(void)arg;
	while (atomic_load(&g.total) < NTHREADS * P2_MSGS) {
		int n = ibv_poll_cq(g.shared_rcq, 8, wc);

		SVT_CHECK_GE(n, 0);
		for (int k = 0; k < n; k++) {
			SVT_CHECK_WC_OK(wc[k]);
			int t = (int)(wc[k].wr_id >> 32);
			int i = (int)(wc[k].wr_id & 0xffffffff);

			SVT_CHECK(t >= 0 && t < NTHREADS && i >= 0 &&
				  i < P2_MSGS);
			SVT_CHECK_EQ(wc[k].qp_num, g.qb[t]->qp_num);
			if (atomic_fetch_add(&g.seen[t][i], 1) != 0)
				atomic_fetch_add(&g.dup, 1);
			atomic_fetch_add(&g.total, 1);
		}
		if (n == 0 && svt_now_ms() > deadline)
			SVT_FAIL("pollers: %d of %d completions",
				 atomic_load(&g.total), NTHREADS * P2_MSGS);
	}
	return NULL;
}

static void phase2(void)
{
	struct svt_qp_init qi;
	pthread_t snd[NTHREADS], pol[2];

	g.shared_rcq = svt_create_cq(db.ctx, NTHREADS * P2_MSGS, NULL);
	g.b_scq = svt_create_cq(db.ctx, 16, NULL);
	g.abuf = svt_alloc(4096);
	g.bbuf = svt_alloc(NTHREADS * P2_MSGS * 16);
	g.amr = svt_reg_mr(da.pd, g.abuf, 4096, 0);
	g.bmr = svt_reg_mr(db.pd, g.bbuf, NTHREADS * P2_MSGS * 16,
			   IBV_ACCESS_LOCAL_WRITE);
	atomic_init(&g.total, 0);
	atomic_init(&g.dup, 0);
	for (int t = 0; t < NTHREADS; t++) {
		svt_qp_init_default(&qi, IBV_QPT_RC);
		qi.cap.max_send_wr = 32;
		qi.cap.max_recv_wr = P2_MSGS;
		g.scq[t] = svt_create_cq(da.ctx, 32, NULL);
		g.qa[t] = svt_create_qp(da.pd, g.scq[t], g.scq[t], &qi);
		g.qb[t] = svt_create_qp(db.pd, g.b_scq, g.shared_rcq, &qi);
		svt_qp_link(g.qa[t], &da.gid, g.qb[t], &db.gid, NULL);
		for (int i = 0; i < P2_MSGS; i++)
			SVT_CHECK_OK(svt_post_recv(
				g.qb[t], ((uint64_t)t << 32) | (uint64_t)i,
				g.bbuf + (t * P2_MSGS + i) * 16, 16,
				g.bmr->lkey));
	}
	for (int k = 0; k < 2; k++)
		SVT_CHECK_EQ(pthread_create(&pol[k], NULL, p2_poller, NULL), 0);
	for (uintptr_t t = 0; t < NTHREADS; t++)
		SVT_CHECK_EQ(pthread_create(&snd[t], NULL, p2_sender,
					    (void *)t),
			     0);
	for (int t = 0; t < NTHREADS; t++)
		SVT_CHECK_EQ(pthread_join(snd[t], NULL), 0);
	for (int k = 0; k < 2; k++)
		SVT_CHECK_EQ(pthread_join(pol[k], NULL), 0);

	SVT_CHECK_EQ(atomic_load(&g.dup), 0);
	SVT_CHECK_EQ(atomic_load(&g.total), NTHREADS * P2_MSGS);
	for (int t = 0; t < NTHREADS; t++)
		for (int i = 0; i < P2_MSGS; i++)
			SVT_CHECK_EQ(atomic_load(&g.seen[t][i]), 1);
	svt_expect_no_wc(g.shared_rcq, 20);

	for (int t = 0; t < NTHREADS; t++) {
		SVT_CHECK_OK(ibv_destroy_qp(g.qa[t]));
		SVT_CHECK_OK(ibv_destroy_qp(g.qb[t]));
		SVT_CHECK_OK(ibv_destroy_cq(g.scq[t]));
	}
	SVT_CHECK_OK(ibv_destroy_cq(g.shared_rcq));
	SVT_CHECK_OK(ibv_destroy_cq(g.b_scq));
	SVT_CHECK_OK(ibv_dereg_mr(g.amr));
	SVT_CHECK_OK(ibv_dereg_mr(g.bmr));
	free(g.abuf);
	free(g.bbuf);
}

/* ---------------------------------------------------------------- phase 3 */

/*
 * Deregistration while a peer streams RDMA WRITEs into the region: once
 * ibv_dereg_mr returns, the memory is the application's again, so we unmap
 * it at once. The writer then gets an error completion (remote access), the
 * rest is flushed, and nobody touches the unmapped pages (no SIGSEGV).
 */
struct p3 {
	struct svt_pair *p;
	uint64_t raddr;
	uint32_t rkey;
	atomic_int stop;
	int ok, errors, flushed;
	enum ibv_wc_status first_err;
};

static void *p3_writer(void *arg)
{
	struct p3 *w = arg;
	struct ibv_wc wc[16];
	int outstanding = 0;
	uint64_t id = 0;
	uint64_t deadline = svt_now_ms() + 20000;

	while (!atomic_load(&w->stop) || outstanding) {
		while (!w->errors && !atomic_load(&w->stop) && outstanding < 16) {
			int rc = svt_post_send(w->p->a.qp, id,
					       IBV_WR_RDMA_WRITE,
					       IBV_SEND_SIGNALED, w->p->a.buf,
					       65536, w->p->a.mr->lkey,
					       w->raddr + (id % 16) * 65536,
					       w->rkey, 0);

			id++;
			if (rc)
				break; /* QP in error: stop posting */
			outstanding++;
		}
		int n = ibv_poll_cq(w->p->a.send_cq, 16, wc);

		SVT_CHECK_GE(n, 0);
		for (int i = 0; i < n; i++) {
			outstanding--;
			if (wc[i].status == IBV_WC_SUCCESS) {
				w->ok++;
			} else if (wc[i].status == IBV_WC_WR_FLUSH_ERR) {
				w->flushed++;
			} else {
				if (!w->errors)
					w->first_err = wc[i].status;
				w->errors++;
			}
		}
		if (w->errors && !atomic_load(&w->stop) && !outstanding)
			break;
		if (svt_now_ms() > deadline)
			SVT_FAIL("writer: %d outstanding, ok %d err %d flushed "
				 "%d",
				 outstanding, w->ok, w->errors, w->flushed);
	}
	return NULL;
}

static void phase3(void)
{
	struct svt_pair_opts o;
	struct svt_pair p;
	struct p3 w;
	pthread_t th;
	size_t len = 16 * 65536;

	svt_pair_opts_default(&o, IBV_QPT_RC);
	o.cqe = 64;
	svt_pair_create(&p, IBV_QPT_RC, &o);
	char *target = mmap(NULL, len, PROT_READ | PROT_WRITE,
			    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	SVT_CHECK(target != MAP_FAILED);
	struct ibv_mr *mr = svt_reg_mr(p.b.pd, target, len, SVT_ACCESS_ALL);

	memset(&w, 0, sizeof(w));
	w.p = &p;
	w.raddr = (uintptr_t)target;
	w.rkey = mr->rkey;
	atomic_init(&w.stop, 0);
	memset(p.a.buf, 0x5a, 65536);
	SVT_CHECK_EQ(pthread_create(&th, NULL, p3_writer, &w), 0);
	/* Let some writes land first. */
	uint64_t deadline = svt_now_ms() + 5000;

	while (*(volatile char *)target == 0 && svt_now_ms() < deadline)
		svt_sleep_ms(1);
	svt_sleep_ms(20);
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	SVT_CHECK_EQ(munmap(target, len), 0);
	svt_sleep_ms(50);
	atomic_store(&w.stop, 1);
	SVT_CHECK_EQ(pthread_join(th, NULL), 0);
	svt_log("dereg under traffic: %d ok, %d errors (first %s), %d flushed",
		w.ok, w.errors,
		w.errors ? ibv_wc_status_str(w.first_err) : "-", w.flushed);
	SVT_CHECK_GT(w.ok, 0);
	SVT_CHECK_MSG(w.errors > 0,
		      "WRITEs to a deregistered MR did not fail");
	SVT_CHECK_EQ(w.first_err, IBV_WC_REM_ACCESS_ERR);
	svt_pair_destroy(&p);
}

int main(void)
{
	svt_watchdog(55);
	svt_dev_open(&da);
	svt_dev_open(&db);
	phase1();
	phase2();
	phase3();
	svt_dev_close(&da);
	svt_dev_close(&db);
	return 0;
}
