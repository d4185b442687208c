/*
 * err_retry_exc - the peer dies: IBV_WC_RETRY_EXC_ERR, then flushes, RC.
 *
 * The peer is a separate process (this binary re-executed as child role
 * "peer" by svt_spawn), connected over RC; GID, QPN, PSN, address and rkey
 * travel over the harness pipe. Traffic is shown to work, then the peer is
 * SIGKILLed. With timeout 14 (4.096 us * 2^14 = 67 ms per try) and
 * retry_cnt 3 (4 tries, ~270 ms), the first outstanding WR must complete
 * IBV_WC_RETRY_EXC_ERR and every later WR IBV_WC_WR_FLUSH_ERR, well within
 * a few seconds; the QP is in ERR and nothing hangs.
 *
 * Scenarios:
 *   idle        - nothing in flight at the kill; WRs posted right after it.
 *   outstanding - a SEND is in flight at the kill (held by RNR, the peer has
 *                 no receive and rnr_retry is 7); more WRs posted after it.
 */
#include <signal.h>

#include "err_util.h"

#define BUF_LEN 65536
#define MSG 512
#define PEER_PSN 0x2222
#define MY_PSN 0x3333
#define BOUND_MS 3000 /* ~270 ms implied; generous for a loaded 2-core box */

struct endpoint {
	struct svt_dev d;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	uint8_t *buf;
	struct ibv_mr *mr;
};

static void ep_open(struct endpoint *e)
{
	struct svt_qp_init qi;

	svt_dev_open(&e->d);
	e->cq = svt_create_cq(e->d.ctx, 64, NULL);
	svt_qp_init_default(&qi, IBV_QPT_RC);
	e->qp = svt_create_qp(e->d.pd, e->cq, e->cq, &qi);
	e->buf = svt_alloc(BUF_LEN);
	e->mr = svt_reg_mr(e->d.pd, e->buf, BUF_LEN, SVT_ACCESS_ALL);
}

static void ep_close(struct endpoint *e)
{
	SVT_CHECK_OK(ibv_destroy_qp(e->qp));
	SVT_CHECK_OK(ibv_dereg_mr(e->mr));
	SVT_CHECK_OK(ibv_destroy_cq(e->cq));
	svt_dev_close(&e->d);
	free(e->buf);
}

static struct svt_peer_info ep_info(const struct endpoint *e, uint32_t psn)
{
	struct svt_peer_info i;

	memset(&i, 0, sizeof(i));
	i.gid = e->d.gid;
	i.qpn = e->qp->qp_num;
	i.psn = psn;
	i.addr = (uintptr_t)e->buf;
	i.rkey = e->mr->rkey;
	i.len = BUF_LEN;
	return i;
}

/* Child: connect, post one receive, say 'R', then wait to be killed. */
static int peer_role(int rfd, int wfd, int argc, char **argv)
{
	struct endpoint e;
	struct svt_peer_info me, them;
	struct svt_conn c;

	(void)argc;
	(void)argv;
	ep_open(&e);
	me = ep_info(&e, PEER_PSN);
	svt_send_info(wfd, &me);
	svt_recv_info(rfd, &them);
	svt_conn_default(&c, IBV_QPT_RC);
	c.sq_psn = PEER_PSN;
	c.rq_psn = them.psn;
	svt_qp_connect(e.qp, &c, &them.gid, them.qpn);
	SVT_CHECK_OK(svt_post_recv(e.qp, 1, e.buf, MSG, e.mr->lkey));
	svt_sync_send(wfd, 'R');
	/* The parent never answers: it kills us. */
	(void)svt_sync_recv(rfd, 30000);
	return 3;
}

static void scenario(bool outstanding)
{
	const char *name = outstanding ? "outstanding" : "idle";
	struct endpoint e;
	struct svt_child ch;
	struct svt_peer_info me, them;
	struct svt_conn c;
	struct ibv_wc wc;

	ep_open(&e);
	svt_fill(e.buf, BUF_LEN, 0x5151);
	svt_spawn(&ch, "peer", NULL);
	svt_recv_info(ch.rfd, &them);
	me = ep_info(&e, MY_PSN);
	svt_send_info(ch.wfd, &me);

	svt_conn_default(&c, IBV_QPT_RC);
	c.sq_psn = MY_PSN;
	c.rq_psn = them.psn;
	c.timeout = 14;
	c.retry_cnt = 3;
	c.rnr_retry = 7;
	svt_qp_connect(e.qp, &c, &them.gid, them.qpn);
	SVT_CHECK_EQ(svt_sync_recv(ch.rfd, 0), 'R');

	/* The connection works: a SEND (uses the peer's receive), a WRITE. */
	SVT_CHECK_OK(svt_post_send(e.qp, 1, IBV_WR_SEND, IBV_SEND_SIGNALED,
				   e.buf, MSG, e.mr->lkey, 0, 0, 0));
	SVT_CHECK_OK(svt_post_send(e.qp, 2, IBV_WR_RDMA_WRITE,
				   IBV_SEND_SIGNALED, e.buf, MSG, e.mr->lkey,
				   them.addr + 4096, them.rkey, 0));
	svt_poll_ok(e.cq, 1, &wc, 0);
	SVT_CHECK_EQ(wc.wr_id, 1);
	svt_poll_ok(e.cq, 1, &wc, 0);
	SVT_CHECK_EQ(wc.wr_id, 2);

	uint64_t first = 4;
	if (outstanding) {
		/* No receive left on the peer: held in RNR retries. */
		SVT_CHECK_OK(svt_post_send(e.qp, 3, IBV_WR_SEND,
					   IBV_SEND_SIGNALED, e.buf, MSG,
					   e.mr->lkey, 0, 0, 0));
		svt_expect_no_wc(e.cq, 100);
		first = 3;
	}

	svt_child_kill(&ch, SIGKILL);
	SVT_CHECK_EQ(svt_child_wait(&ch, 0), 128 + SIGKILL);
	uint64_t t0 = svt_now_ms();

	SVT_CHECK_OK(svt_post_send(e.qp, 4, IBV_WR_RDMA_WRITE,
				   IBV_SEND_SIGNALED, e.buf, MSG, e.mr->lkey,
				   them.addr, them.rkey, 0));
	SVT_CHECK_OK(svt_post_send(e.qp, 5, IBV_WR_SEND, IBV_SEND_SIGNALED,
				   e.buf, MSG, e.mr->lkey, 0, 0, 0));
	SVT_CHECK_OK(svt_post_send(e.qp, 6, IBV_WR_RDMA_READ,
				   IBV_SEND_SIGNALED, e.buf + 8192, MSG,
				   e.mr->lkey, them.addr, them.rkey, 0));

	wc = errt_expect_wc(e.cq, first, IBV_WC_RETRY_EXC_ERR, 10000);
	uint64_t ms = svt_now_ms() - t0;
	SVT_CHECK_EQ(wc.qp_num, e.qp->qp_num);
	errt_expect_flushed(e.cq, e.qp, first + 1, (int)(6 - first));
	SVT_CHECK_LT(ms, BOUND_MS);
	ERRT_CHECK_STATE(e.qp, IBV_QPS_ERR);
	svt_expect_no_wc(e.cq, 50);
	/* The READ that never happened wrote nothing. */
	SVT_CHECK_FILL(e.buf, BUF_LEN, 0x5151);

	uint64_t t1 = svt_now_ms();
	ep_close(&e);
	SVT_CHECK_LT(svt_now_ms() - t1, 2000);
	svt_log("ok: %s: peer killed -> RETRY_EXC_ERR after %llu ms, %d "
		"flushed", name, (unsigned long long)ms, (int)(6 - first));
}

int main(int argc, char **argv)
{
	static const struct svt_child_role roles[] = {
		{ "peer", peer_role },
		{ NULL, NULL },
	};

	svt_child_dispatch(argc, argv, roles);
	svt_watchdog(50);
	scenario(false);
	scenario(true);
	return 0;
}
