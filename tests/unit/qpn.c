/*
 * unit_qpn: QP numbers are unique per device across the processes of a host
 * (issue 11), as on one HCA, with no daemon.
 *   - 200 processes each open the device and create an RC, a UC and a UD
 *     QP: no two live processes share a QP number
 *   - 100 of them are killed with SIGKILL (no chance to let go of their
 *     numbers), then 150 new processes come: again no collision with the
 *     100 still alive, and the dead ones' numbers are used again (the
 *     registry reclaims what a crashed process held).  Blocks are drawn
 *     at random among the free ones (issue 35), so a new process takes a
 *     dead one's block with a probability of about 100 in the ~900 free:
 *     about 16 of the 150, and fewer than 3 once in some 10^5 runs
 *     (unit_qpn_random takes every block of a small range, all of them
 *     dead processes', deterministically)
 *   - two contexts of one process get different numbers
 */
#include "sv_test.h"

#include <signal.h>

#define WAVE1 200
#define KILLED 100
#define WAVE2 150
#define NQ 3

/* Child: open, make NQ QPs, report their numbers, wait for the parent. */
static int child(int rfd, int wfd, int argc, char **argv)
{
	static const enum ibv_qp_type types[NQ] = { IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD };
	struct svt_dev d;
	struct ibv_cq *cq;
	struct ibv_qp *qp[NQ];
	uint32_t qpn[NQ];
	char c;

	(void)argc;
	(void)argv;
	svt_dev_open(&d);
	cq = svt_create_cq(d.ctx, 16, NULL);
	for (int i = 0; i < NQ; i++) {
		struct svt_qp_init qi;

		svt_qp_init_default(&qi, types[i]);
		qp[i] = svt_create_qp(d.pd, cq, cq, &qi);
		qpn[i] = qp[i]->qp_num;
	}
	svt_chan_write(wfd, qpn, sizeof(qpn));
	svt_chan_read(rfd, &c, 1, 600000); /* the parent's go */
	for (int i = 0; i < NQ; i++)
		SVT_CHECK_OK(ibv_destroy_qp(qp[i]));
	SVT_CHECK_OK(ibv_destroy_cq(cq));
	svt_dev_close(&d);
	return 0;
}

struct proc {
	struct svt_child c;
	uint32_t qpn[NQ];
	bool alive;
};

static void start(struct proc *p)
{
	svt_spawn(&p->c, "child", NULL);
	svt_chan_read(p->c.rfd, p->qpn, sizeof(p->qpn), 0);
	p->alive = true;
}

/* No QP number is held twice among the live processes. */
static void check_unique(struct proc *ps, int n)
{
	for (int i = 0; i < n; i++)
		for (int j = i; j < n; j++)
			for (int a = 0; a < NQ && ps[i].alive && ps[j].alive; a++)
				for (int b = 0; b < NQ; b++)
					if (i != j || a != b)
						SVT_CHECK_MSG(ps[i].qpn[a] != ps[j].qpn[b],
							      "QPN 0x%x in processes %d and %d",
							      ps[i].qpn[a], (int)ps[i].c.pid,
							      (int)ps[j].c.pid);
}

static void test_processes(void)
{
	static struct proc ps[WAVE1 + WAVE2];
	int reused = 0;

	for (int i = 0; i < WAVE1; i++)
		start(&ps[i]);
	check_unique(ps, WAVE1);
	for (int i = 0; i < KILLED; i++) {
		int k = i * 2; /* every other one */

		svt_child_kill(&ps[k].c, SIGKILL);
		SVT_CHECK_EQ(svt_child_wait(&ps[k].c, 0), 128 + SIGKILL);
		ps[k].alive = false;
	}
	for (int i = WAVE1; i < WAVE1 + WAVE2; i++) {
		start(&ps[i]);
		for (int k = 0; k < WAVE1; k++)
			if (!ps[k].alive && ps[k].qpn[0] >> 14 == ps[i].qpn[0] >> 14)
				reused++;
	}
	check_unique(ps, WAVE1 + WAVE2);
	svt_log("%d processes, %d killed, %d new; %d new ones use a dead one's numbers",
		WAVE1, KILLED, WAVE2, reused);
	SVT_CHECK(reused >= 3);
	for (int i = 0; i < WAVE1 + WAVE2; i++) {
		if (!ps[i].alive)
			continue;
		svt_chan_write(ps[i].c.wfd, "g", 1);
		SVT_CHECK_EQ(svt_child_wait(&ps[i].c, 0), 0);
	}
}

static void test_two_contexts(void)
{
	struct svt_dev a, b;
	struct ibv_cq *ca, *cb;
	struct ibv_qp *qa, *qb;
	struct svt_qp_init qi;

	svt_dev_open(&a);
	svt_dev_open(&b);
	ca = svt_create_cq(a.ctx, 4, NULL);
	cb = svt_create_cq(b.ctx, 4, NULL);
	svt_qp_init_default(&qi, IBV_QPT_RC);
	qa = svt_create_qp(a.pd, ca, ca, &qi);
	qb = svt_create_qp(b.pd, cb, cb, &qi);
	SVT_CHECK(qa->qp_num != qb->qp_num);
	SVT_CHECK(qa->qp_num > 1 && qb->qp_num > 1);
	SVT_CHECK_OK(ibv_destroy_qp(qa));
	SVT_CHECK_OK(ibv_destroy_qp(qb));
	SVT_CHECK_OK(ibv_destroy_cq(ca));
	SVT_CHECK_OK(ibv_destroy_cq(cb));
	svt_dev_close(&a);
	svt_dev_close(&b);
}

int main(int argc, char **argv)
{
	static const struct svt_child_role roles[] = { { "child", child }, { NULL, NULL } };

	svt_child_dispatch(argc, argv, roles);
	svt_watchdog(200);
	test_two_contexts();
	test_processes();
	return 0;
}
