/*
 * gpu_process: GPU memory on both sides of two processes (a child started
 * with svt_spawn: fork+exec of this binary, which loads the CUDA driver
 * and opens its own device).  The parent, from GPU memory:
 *   - RDMA WRITEs 64 MiB into the child's GPU memory,
 *   - RDMA READs 64 MiB of the child's GPU memory into its own,
 *   - SENDs 1 MiB into a receive list of GPU and host memory,
 * while the child is blocked in read() on a pipe (the target does not call
 * into the library).  Every byte is checked on both sides, and the bytes
 * around the written ranges are untouched.
 */
#include "sv_test.h"
#include "cuda_shim.h"

#define MiB (1024u * 1024u)
#define BIG (64 * MiB)
#define SMALL (1 * MiB)
/* Each side's GPU buffer: [0, BIG) WRITE source / target, [BIG, 2 BIG)
 * READ target / source, then the SEND source / receive area, then a page
 * of guard bytes. */
#define W_OFF 0
#define R_OFF BIG
#define S_OFF (2 * BIG)
#define GLEN (2 * BIG + SMALL + 4096)
/* The child's receive list: GPU for most, host memory for the end. */
#define RECV_GPU (SMALL - 5000)
#define RECV_HOST (SMALL - RECV_GPU)
#define FILLER 0x3c

static void check_filler(const uint8_t *gpu, size_t len)
{
	uint8_t *want = malloc(len);

	SVT_CHECK_PTR(want);
	memset(want, FILLER, len);
	SVT_GPU_CHECK_MEM(gpu, want, len);
	free(want);
}

static int target(int rfd, int wfd, int argc, char **argv)
{
	struct svt_dev d;
	struct svt_peer_info me, peer;
	struct svt_qp_init qi;
	struct ibv_wc wc;
	struct ibv_sge sge[2];
	struct ibv_recv_wr rwr, *bad = NULL;

	(void)argc;
	(void)argv;
	svt_cuda_init();
	svt_dev_open(&d);
	struct ibv_cq *cq = svt_create_cq(d.ctx, 16, NULL);

	svt_qp_init_default(&qi, IBV_QPT_RC);
	struct ibv_qp *qp = svt_create_qp(d.pd, cq, cq, &qi);
	uint8_t *g = svt_gpu_alloc(GLEN);
	uint8_t *h = svt_alloc(RECV_HOST + 4096);
	struct ibv_mr *gmr = ibv_reg_mr(d.pd, g, GLEN, SVT_ACCESS_ALL);
	struct ibv_mr *hmr = svt_reg_mr(d.pd, h, RECV_HOST + 4096, SVT_ACCESS_ALL);

	SVT_CHECK_MSG(gmr, "ibv_reg_mr of GPU memory: %s", strerror(errno));
	svt_gpu_memset(g, FILLER, GLEN);
	svt_gpu_fill(g + R_OFF, BIG, 2); /* the parent READs this */
	memset(h, FILLER, RECV_HOST + 4096);

	memset(&me, 0, sizeof(me));
	me.gid = d.gid;
	me.qpn = qp->qp_num;
	me.addr = (uintptr_t)g;
	me.rkey = gmr->rkey;
	me.len = GLEN;
	svt_send_info(wfd, &me);
	svt_recv_info(rfd, &peer);
	svt_qp_connect(qp, NULL, &peer.gid, peer.qpn);

	/* the SEND lands in GPU memory, its last RECV_HOST bytes in host memory */
	sge[0].addr = (uintptr_t)g + S_OFF;
	sge[0].length = RECV_GPU;
	sge[0].lkey = gmr->lkey;
	sge[1].addr = (uintptr_t)h + 1;
	sge[1].length = RECV_HOST;
	sge[1].lkey = hmr->lkey;
	memset(&rwr, 0, sizeof(rwr));
	rwr.wr_id = 7;
	rwr.sg_list = sge;
	rwr.num_sge = 2;
	SVT_CHECK_OK(ibv_post_recv(qp, &rwr, &bad));
	svt_sync_send(wfd, 'R');

	/* Blocked here, outside the library, while the parent works. */
	char t = svt_sync_recv(rfd, 60000);

	SVT_CHECK_EQ(t, 'C');
	SVT_GPU_CHECK_FILL(g + W_OFF, BIG, 1); /* the parent's WRITE */
	SVT_GPU_CHECK_FILL(g + R_OFF, BIG, 2); /* READ leaves it as it was */
	wc = svt_poll_one(cq);		       /* completed while we were not looking */
	SVT_CHECK_WC_OK(wc);
	SVT_CHECK_EQ(wc.wr_id, 7);
	SVT_CHECK_EQ(wc.opcode, IBV_WC_RECV);
	SVT_CHECK_EQ(wc.byte_len, SMALL);
	/* the 1 MiB message: svt_fill(…, 3) cut in two */
	uint8_t *msg = malloc(SMALL);

	SVT_CHECK_PTR(msg);
	svt_gpu_to_host(msg, g + S_OFF, RECV_GPU);
	memcpy(msg + RECV_GPU, h + 1, RECV_HOST);
	SVT_CHECK_FILL(msg, SMALL, 3);
	free(msg);
	check_filler(g + S_OFF + RECV_GPU, GLEN - S_OFF - RECV_GPU);
	SVT_CHECK_EQ(h[0], FILLER);
	for (size_t i = RECV_HOST + 1; i < RECV_HOST + 4096; i++)
		SVT_CHECK_EQ(h[i], FILLER);
	svt_sync_send(wfd, 'K');

	SVT_CHECK_OK(ibv_destroy_qp(qp));
	SVT_CHECK_OK(ibv_dereg_mr(gmr));
	SVT_CHECK_OK(ibv_dereg_mr(hmr));
	SVT_CHECK_OK(ibv_destroy_cq(cq));
	svt_gpu_free(g);
	free(h);
	svt_dev_close(&d);
	return 0;
}

static void test_two_processes(void)
{
	struct svt_child c;
	struct svt_dev d;
	struct svt_peer_info me, peer;
	struct svt_qp_init qi;
	struct ibv_wc wc[3];

	svt_spawn(&c, "target", NULL);
	svt_dev_open(&d);
	struct ibv_cq *cq = svt_create_cq(d.ctx, 16, NULL);

	svt_qp_init_default(&qi, IBV_QPT_RC);
	struct ibv_qp *qp = svt_create_qp(d.pd, cq, cq, &qi);
	uint8_t *g = svt_gpu_alloc(GLEN);
	struct ibv_mr *gmr = ibv_reg_mr(d.pd, g, GLEN, SVT_ACCESS_ALL);

	SVT_CHECK_MSG(gmr, "ibv_reg_mr of GPU memory: %s", strerror(errno));
	svt_gpu_memset(g, FILLER, GLEN);
	svt_gpu_fill(g + W_OFF, BIG, 1);
	svt_gpu_fill(g + S_OFF, SMALL, 3);

	svt_recv_info(c.rfd, &peer);
	SVT_CHECK_EQ(peer.len, GLEN);
	memset(&me, 0, sizeof(me));
	me.gid = d.gid;
	me.qpn = qp->qp_num;
	svt_send_info(c.wfd, &me);
	/* one host port: the same GID in both processes, QPNs unique on the host */
	SVT_CHECK_MEM(&me.gid, &peer.gid, sizeof(me.gid));
	SVT_CHECK(me.qpn != peer.qpn);
	svt_qp_connect(qp, NULL, &peer.gid, peer.qpn);
	SVT_CHECK_EQ(svt_sync_recv(c.rfd, 20000), 'R');

	uint64_t t0 = svt_now_ms();

	SVT_CHECK_OK(svt_post_send(qp, 1, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, g + W_OFF, BIG,
				   gmr->lkey, peer.addr + W_OFF, peer.rkey, 0));
	SVT_CHECK_OK(svt_post_send(qp, 2, IBV_WR_RDMA_READ, IBV_SEND_SIGNALED, g + R_OFF, BIG,
				   gmr->lkey, peer.addr + R_OFF, peer.rkey, 0));
	SVT_CHECK_OK(svt_post_send(qp, 3, IBV_WR_SEND, IBV_SEND_SIGNALED, g + S_OFF, SMALL,
				   gmr->lkey, 0, 0, 0));
	svt_poll_ok(cq, 3, wc, 60000);
	svt_log("64 MiB WRITE + 64 MiB READ + 1 MiB SEND between GPU buffers: %llu ms",
		(unsigned long long)(svt_now_ms() - t0));
	for (int i = 0; i < 3; i++)
		SVT_CHECK_EQ(wc[i].wr_id, 1 + i);
	SVT_CHECK_EQ(wc[1].byte_len, BIG);
	SVT_GPU_CHECK_FILL(g + R_OFF, BIG, 2);
	SVT_GPU_CHECK_FILL(g + W_OFF, BIG, 1);	/* sources unchanged */
	SVT_GPU_CHECK_FILL(g + S_OFF, SMALL, 3);
	check_filler(g + S_OFF + SMALL, GLEN - S_OFF - SMALL);

	svt_sync_send(c.wfd, 'C');
	SVT_CHECK_EQ(svt_sync_recv(c.rfd, 60000), 'K');
	SVT_CHECK_EQ(svt_child_wait(&c, 20000), 0);

	SVT_CHECK_OK(ibv_destroy_qp(qp));
	SVT_CHECK_OK(ibv_dereg_mr(gmr));
	SVT_CHECK_OK(ibv_destroy_cq(cq));
	svt_gpu_free(g);
	svt_dev_close(&d);
}

static const struct svt_child_role roles[] = {
	{ "target", target },
	{ NULL, NULL },
};

int main(int argc, char **argv)
{
	svt_child_dispatch(argc, argv, roles);
	svt_watchdog(170);
	svt_cuda_init(); /* before any verbs call */
	test_two_processes();
	return 0;
}
