/*
 * unit_xrc_shared: an XRC domain shared by two processes through its file,
 * as on a NIC: an XRC receive QP of one process delivers into an XRC SRQ
 * of another (ibv_xsrq_pingpong -c N does that).
 *   - the parent has an XRC send QP, connected to its own XRC receive QP,
 *     and an XRC SRQ of its own; a child process (fork+exec, its own
 *     device) opens the same file's domain and makes an XRC SRQ there
 *   - SENDs naming the child's SRQ (1 KiB, 64 KiB in 64 packets, with
 *     immediate data) land in the child's buffers, byte for byte, and
 *     complete on the child SRQ's CQ with the parent's receive QP number in
 *     qp_num and the send QP's in src_qp; the parent's SENDs complete
 *     after that, in order, interleaved with SENDs to its own SRQ
 *   - with no receive posted in the child's SRQ, a SEND waits (RNR) and
 *     lands once the child posts one
 *   - RDMA WRITE (64 KiB), READ (64 KiB), FETCH_ADD, COMPARE_SWAP and
 *     WRITE_WITH_IMM naming the child's SRQ reach the child's memory under
 *     its SRQ's PD, byte for byte (the immediate data completes a receive
 *     of that SRQ); a WRITE with a key the child does not have fails with
 *     IBV_WC_REM_ACCESS_ERR
 *   - a SEND longer than the child's receive buffer: the child's WQE
 *     completes with IBV_WC_LOC_LEN_ERR, the parent's with
 *     IBV_WC_REM_INV_REQ_ERR
 *   - ibv_open_qp in the child of the parent's receive QP: a handle through
 *     which the child queries it (RTR, then ERR after step 4's NAK) and
 *     modifies it (to RESET); the QP outlives the parent's own handle,
 *     destroyed when the parent reconnects, and goes with the child's
 *     (the parent's domain then closes); the parent's send QP's number:
 *     EINVAL (no XRC receive QP)
 * The same over tcp (unit_xrc_shared.tcp), whose peers prove the job's
 * secret from this host's address.  Under SOFTVERBS_FAULTS
 * (unit_xrc_shared.faults) the requester's packets and the answers it gets
 * are lost, duplicated and reordered (the relay between the processes is
 * not the network's: never): everything lands once, in order, and a
 * refusal whose NAK was lost ends in IBV_WC_RETRY_EXC_ERR instead, as on
 * any lossy network.
 */
#include "sv_test.h"
#include "svt_counters.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BIG (64 * 1024)
#define SMALL 1024
#define NBUF 4

static bool faults_on(void)
{
	return getenv("SOFTVERBS_FAULTS") != NULL;
}

/* A refusal's completion: st, or (its NAK lost) RETRY_EXC under faults. */
#define CHECK_REFUSED(wc, st)                                                              \
	do {                                                                               \
		if (!faults_on() || (wc).status != IBV_WC_RETRY_EXC_ERR)                   \
			SVT_CHECK_WC_STATUS(wc, st);                                       \
	} while (0)

static struct ibv_xrcd *open_domain(struct svt_dev *d, const char *path, int *fd)
{
	struct ibv_xrcd_init_attr a = { .comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
					.oflags = O_CREAT };
	struct ibv_xrcd *x;

	*fd = open(path, O_RDONLY);
	SVT_CHECK(*fd >= 0);
	a.fd = *fd;
	x = ibv_open_xrcd(d->ctx, &a);
	SVT_CHECK_PTR(x);
	return x;
}

static struct ibv_srq *xrc_srq(struct svt_dev *d, struct ibv_xrcd *x, struct ibv_cq *cq)
{
	struct ibv_srq_init_attr_ex sa = {
		.attr = { .max_wr = 16, .max_sge = 1 },
		.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ |
			     IBV_SRQ_INIT_ATTR_PD,
		.srq_type = IBV_SRQT_XRC,
		.pd = d->pd,
		.xrcd = x,
		.cq = cq,
	};
	struct ibv_srq *s = ibv_create_srq_ex(d->ctx, &sa);

	SVT_CHECK_PTR(s);
	return s;
}

/* What the child tells the parent, and the parent the child. */
struct msg {
	uint32_t srqn;
	uint32_t step;
	uint64_t addr; /* the child's buffer ... */
	uint32_t rkey; /* ... and its key */
	uint32_t pad;
};

/* In the child's buffer, for the one-sided step: */
#define W_OFF 0		  /* a WRITE lands here (BIG) */
#define WI_OFF BIG	  /* a WRITE_WITH_IMM (SMALL) */
#define R_OFF (2 * BIG)	  /* READ from here (BIG) */
#define A_OFF (3 * BIG)	  /* two atomic words */

/* The child: an XRC SRQ in the parent's domain; receives, checks, reports. */
static int srq_owner(int rfd, int wfd, int argc, char **argv)
{
	struct svt_dev d;
	struct ibv_xrcd *x;
	struct ibv_srq *s;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	struct ibv_wc wc;
	struct msg m = { 0 };
	uint32_t tgt = 0, src = 0;
	struct ibv_qp *h = NULL;
	uint8_t *buf;
	int fd;

	SVT_CHECK(argc >= 1);
	svt_dev_open(&d);
	x = open_domain(&d, argv[0], &fd);
	cq = svt_create_cq(d.ctx, 32, NULL);
	s = xrc_srq(&d, x, cq);
	buf = svt_alloc(NBUF * BIG);
	mr = svt_reg_mr(d.pd, buf, NBUF * BIG, SVT_ACCESS_ALL);
	SVT_CHECK_OK(ibv_get_srq_num(s, &m.srqn));
	m.addr = (uintptr_t)buf;
	m.rkey = mr->rkey;
	/* step 1: a 1 KiB SEND, a 64 KiB one, one with immediate data */
	for (int i = 0; i < 3; i++)
		SVT_CHECK_OK(svt_post_srq_recv(s, 10 + i, buf + i * BIG, BIG, mr->lkey));
	svt_chan_write(wfd, &m, sizeof(m));
	svt_chan_read(rfd, &tgt, sizeof(tgt), 0);
	svt_chan_read(rfd, &src, sizeof(src), 0);
	{
		/* the parent's receive QP, opened here (its process answers
		 * for it); over tcp there is no way to ask it */
		struct ibv_qp_open_attr oa = {
			.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE |
				     IBV_QP_OPEN_ATTR_CONTEXT,
			.qp_num = tgt, .xrcd = x, .qp_type = IBV_QPT_XRC_RECV, .qp_context = &m };
		struct ibv_qp_attr at;
		struct ibv_qp_init_attr ia;

		{
			h = ibv_open_qp(d.ctx, &oa);
			SVT_CHECK_PTR(h);
			SVT_CHECK(h->qp_num == tgt && h->qp_context == &m);
			SVT_CHECK_OK(ibv_query_qp(h, &at, IBV_QP_STATE, &ia));
			SVT_CHECK_EQ(at.qp_state, IBV_QPS_RTR);
			SVT_CHECK(ia.qp_context == &m && ia.qp_type == IBV_QPT_XRC_RECV);
			oa.qp_num = src; /* the parent's XRC send QP: no receive QP */
			SVT_CHECK_NULL_ERRNO(ibv_open_qp(d.ctx, &oa), EINVAL);
		}
	}
	for (int i = 0; i < 3; i++) {
		static const uint32_t len[3] = { SMALL, BIG, SMALL };

		wc = svt_poll_one(cq);
		SVT_CHECK_WC_OK(wc);
		SVT_CHECK_EQ(wc.wr_id, (uint64_t)(10 + i)); /* in order */
		SVT_CHECK_EQ(wc.byte_len, len[i]);
		SVT_CHECK_EQ(wc.qp_num, tgt);
		SVT_CHECK_EQ(wc.src_qp, src);
		SVT_CHECK_EQ(wc.opcode, IBV_WC_RECV);
		SVT_CHECK_EQ(!!(wc.wc_flags & IBV_WC_WITH_IMM), i == 2);
		if (i == 2)
			SVT_CHECK_EQ(ntohl(wc.imm_data), 0x5eed0002u);
		SVT_CHECK_FILL(buf + i * BIG, len[i], 100 + i);
	}
	/* step 2: the SRQ is empty; the parent's SEND waits for a receive */
	m.step = 2;
	svt_chan_write(wfd, &m, sizeof(m));
	svt_expect_no_wc(cq, 300);
	SVT_CHECK_OK(svt_post_srq_recv(s, 20, buf, BIG, mr->lkey));
	wc = svt_poll_one(cq);
	SVT_CHECK_WC_OK(wc);
	SVT_CHECK_EQ(wc.wr_id, 20u);
	SVT_CHECK_EQ(wc.byte_len, (uint32_t)SMALL);
	SVT_CHECK_FILL(buf, SMALL, 200);
	/* step 3: one-sided operations on our memory, under the SRQ's PD */
	svt_fill(buf + R_OFF, BIG, 300);
	((uint64_t *)(buf + A_OFF))[0] = 1000;
	((uint64_t *)(buf + A_OFF))[1] = 7;
	SVT_CHECK_OK(svt_post_srq_recv(s, 30, buf + 3 * BIG + 64, 0, mr->lkey));
	m.step = 3;
	svt_chan_write(wfd, &m, sizeof(m));
	wc = svt_poll_one(cq);
	SVT_CHECK_WC_OK(wc);
	SVT_CHECK_EQ(wc.wr_id, 30u);
	SVT_CHECK_EQ(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
	SVT_CHECK_EQ(wc.byte_len, (uint32_t)SMALL);
	SVT_CHECK_EQ(ntohl(wc.imm_data), 0x5eed0003u);
	SVT_CHECK_EQ(wc.qp_num, tgt);
	svt_chan_read(rfd, &m, sizeof(m), 0); /* the parent checked its part */
	SVT_CHECK_FILL(buf + W_OFF, BIG, 400);
	SVT_CHECK_FILL(buf + WI_OFF, SMALL, 401);
	SVT_CHECK_EQ(((uint64_t *)(buf + A_OFF))[0], 1005u);
	SVT_CHECK_EQ(((uint64_t *)(buf + A_OFF))[1], 9u);
	/* step 4: a receive too short for the parent's SEND */
	SVT_CHECK_OK(svt_post_srq_recv(s, 40, buf, 16, mr->lkey));
	m.step = 4;
	svt_chan_write(wfd, &m, sizeof(m));
	wc = svt_poll_one(cq);
	SVT_CHECK_WC_STATUS(wc, IBV_WC_LOC_LEN_ERR);
	SVT_CHECK_EQ(wc.wr_id, 40u);
	/* done when the parent is; its first receive QP, whose own handle it
	 * destroyed meanwhile, is still there through ours */
	svt_chan_read(rfd, &m, sizeof(m), 0);
	svt_expect_no_wc(cq, 100);
	{
		struct ibv_qp_attr at;
		struct ibv_qp_init_attr ia;

		SVT_CHECK_OK(ibv_query_qp(h, &at, IBV_QP_STATE, &ia));
		SVT_CHECK_EQ(at.qp_state, IBV_QPS_ERR); /* step 4's NAK */
		SVT_CHECK_OK(svt_qp_to_state(h, IBV_QPS_RESET));
		SVT_CHECK_OK(ibv_query_qp(h, &at, IBV_QP_STATE, &ia));
		SVT_CHECK_EQ(at.qp_state, IBV_QPS_RESET);
		SVT_CHECK_OK(ibv_destroy_qp(h)); /* the last handle: it goes */
	}
	m.step = 99;
	svt_chan_write(wfd, &m, sizeof(m));
	SVT_CHECK_OK(ibv_destroy_srq(s));
	SVT_CHECK_OK(ibv_close_xrcd(x));
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	SVT_CHECK_OK(ibv_destroy_cq(cq));
	close(fd);
	free(buf);
	svt_dev_close(&d);
	return 0;
}

struct side {
	struct svt_dev d;
	struct ibv_xrcd *x;
	struct ibv_cq *scq, *rcq;
	struct ibv_srq *own;
	struct ibv_qp *send, *recv;
	uint8_t *buf, *rbuf;
	struct ibv_mr *mr, *rmr;
	uint32_t own_n;
	int fd;
};

static void connect_xrc(struct side *p)
{
	struct ibv_qp_init_attr_ex qa;
	struct ibv_qp_attr at;
	struct svt_conn rc;
	int mask;

	static uint32_t gen;

	svt_conn_default(&rc, IBV_QPT_RC);
	rc.rnr_retry = 7; /* step 2 waits for the child's receive */
	/* 0.5 s: the child, on a loaded host, may take longer than 67 ms
	 * (14) to answer what was relayed to it, seven times running, which
	 * would end the send QP in IBV_WC_RETRY_EXC_ERR; and a resend that
	 * waits for this timer is told apart from one that does not (step 1) */
	rc.timeout = 17;
	/* a new PSN range for each connection: a late answer to the one
	 * before (held back by SOFTVERBS_FAULTS) acknowledges nothing here */
	rc.sq_psn = rc.rq_psn = 4096 + 0x100000 * ++gen;
	memset(&qa, 0, sizeof(qa));
	qa.qp_type = IBV_QPT_XRC_SEND;
	qa.send_cq = p->scq;
	qa.cap.max_send_wr = 32;
	qa.cap.max_send_sge = 1;
	qa.comp_mask = IBV_QP_INIT_ATTR_PD;
	qa.pd = p->d.pd;
	p->send = ibv_create_qp_ex(p->d.ctx, &qa);
	SVT_CHECK_PTR(p->send);
	memset(&qa, 0, sizeof(qa));
	qa.qp_type = IBV_QPT_XRC_RECV;
	qa.comp_mask = IBV_QP_INIT_ATTR_XRCD;
	qa.xrcd = p->x;
	p->recv = ibv_create_qp_ex(p->d.ctx, &qa);
	SVT_CHECK_PTR(p->recv);
	SVT_CHECK_OK(svt_qp_to_init(p->send, &rc));
	SVT_CHECK_OK(svt_qp_to_init(p->recv, &rc));
	mask = svt_rtr_attr(IBV_QPT_RC, &rc, &p->d.gid, p->recv->qp_num, &at);
	SVT_CHECK_OK(ibv_modify_qp(p->send, &at,
				   mask & ~(IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)));
	mask = svt_rts_attr(IBV_QPT_RC, &rc, &at);
	SVT_CHECK_OK(ibv_modify_qp(p->send, &at, mask));
	mask = svt_rtr_attr(IBV_QPT_RC, &rc, &p->d.gid, p->send->qp_num, &at);
	SVT_CHECK_OK(ibv_modify_qp(p->recv, &at, mask));
}

/* A WR of op naming srqn, from our buffer at off; one-sided ones at the
 * remote address raddr under rkey (atomics: add/compare in imm, swap 9). */
static int post_to(struct side *p, uint64_t wr_id, enum ibv_wr_opcode op, uint32_t srqn,
		   uint32_t off, uint32_t len, uint32_t imm, uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge sge = { (uintptr_t)p->buf + off, len, p->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1, .opcode = op,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;

	wr.qp_type.xrc.remote_srqn = srqn;
	if (op == IBV_WR_ATOMIC_FETCH_AND_ADD || op == IBV_WR_ATOMIC_CMP_AND_SWP) {
		wr.wr.atomic.remote_addr = raddr;
		wr.wr.atomic.rkey = rkey;
		wr.wr.atomic.compare_add = imm;
		wr.wr.atomic.swap = 9;
	} else {
		wr.imm_data = htonl(imm);
		wr.wr.rdma.remote_addr = raddr;
		wr.wr.rdma.rkey = rkey;
	}
	return ibv_post_send(p->send, &wr, &bad);
}

static int post(struct side *p, uint64_t wr_id, enum ibv_wr_opcode op, uint32_t srqn,
		uint32_t off, uint32_t len, uint32_t imm)
{
	return post_to(p, wr_id, op, srqn, off, len, imm, 0, 0);
}

/* A fresh send/receive QP pair after one failed (the error moved both to ERR). */
static void reconnect(struct side *p)
{
	SVT_CHECK_OK(ibv_destroy_qp(p->send));
	SVT_CHECK_OK(ibv_destroy_qp(p->recv));
	connect_xrc(p);
}

static void test_shared(void)
{
	char path[] = "/tmp/svt-xrcs-XXXXXX";
	int tfd = mkstemp(path);
	char *args[] = { path, NULL };
	struct svt_child c;
	struct side p;
	struct msg m;
	struct ibv_wc wc[8];
	uint32_t v;

	SVT_CHECK(tfd >= 0);
	close(tfd);
	svt_spawn(&c, "srq_owner", args);
	memset(&p, 0, sizeof(p));
	svt_dev_open(&p.d);
	p.x = open_domain(&p.d, path, &p.fd);
	p.scq = svt_create_cq(p.d.ctx, 32, NULL);
	p.rcq = svt_create_cq(p.d.ctx, 32, NULL);
	p.own = xrc_srq(&p.d, p.x, p.rcq);
	SVT_CHECK_OK(ibv_get_srq_num(p.own, &p.own_n));
	p.buf = svt_alloc(4 * BIG);
	p.rbuf = svt_alloc(BIG);
	p.mr = svt_reg_mr(p.d.pd, p.buf, 4 * BIG, SVT_ACCESS_ALL);
	p.rmr = svt_reg_mr(p.d.pd, p.rbuf, BIG, SVT_ACCESS_ALL);
	for (int i = 0; i < 4; i++)
		svt_fill(p.buf + i * BIG, BIG, 100 + i);
	connect_xrc(&p);

	svt_chan_read(c.rfd, &m, sizeof(m), 0);
	SVT_CHECK(m.srqn != p.own_n);
	v = p.recv->qp_num;
	svt_chan_write(c.wfd, &v, sizeof(v));
	v = p.send->qp_num;
	svt_chan_write(c.wfd, &v, sizeof(v));


	/* step 1: to the child's SRQ, interleaved with SENDs to our own.  A
	 * SEND to our own SRQ that comes while the child's answers are
	 * awaited is dropped, and the receive QP asks for it again once they
	 * are in (a sequence NAK): no resend waits for the ack timeout unless
	 * the child itself took that long */
	SVT_CHECK_OK(svt_post_srq_recv(p.own, 50, p.rbuf, SMALL, p.rmr->lkey));
	SVT_CHECK_OK(svt_post_srq_recv(p.own, 51, p.rbuf + SMALL, SMALL, p.rmr->lkey));
	uint64_t t0 = svt_now_ms(), relayed_ms;
	SVT_CHECK_OK(post(&p, 1, IBV_WR_SEND, m.srqn, 0, SMALL, 0));
	SVT_CHECK_OK(post(&p, 2, IBV_WR_SEND, p.own_n, 3 * BIG, SMALL, 0));
	SVT_CHECK_OK(post(&p, 3, IBV_WR_SEND, m.srqn, BIG, BIG, 0));
	SVT_CHECK_OK(post(&p, 4, IBV_WR_SEND_WITH_IMM, m.srqn, 2 * BIG, SMALL, 0x5eed0002));
	SVT_CHECK_OK(post(&p, 5, IBV_WR_SEND, p.own_n, 3 * BIG + SMALL, SMALL, 0));
	svt_poll_ok(p.scq, 1, wc, 0);
	relayed_ms = svt_now_ms() - t0;
	svt_poll_ok(p.scq, 3, wc + 1, 0);
	for (int i = 0; i < 4; i++)
		SVT_CHECK_EQ(wc[i].wr_id, (uint64_t)(i + 1));
	svt_poll_ok(p.scq, 1, wc, 0);
	SVT_CHECK_EQ(wc[0].wr_id, 5u);
	if (!faults_on() && relayed_ms < 300)
		SVT_CHECK_EQ(svt_qp_counter(p.send->qp_num, p.recv->qp_num, SV_QPC_ACK_TIMEOUTS), 0);
	svt_poll_ok(p.rcq, 2, wc, 0);
	SVT_CHECK_EQ(wc[0].wr_id, 50u);
	SVT_CHECK_EQ(wc[1].wr_id, 51u);
	SVT_CHECK_EQ(wc[0].qp_num, p.recv->qp_num);
	SVT_CHECK_MEM(p.rbuf, p.buf + 3 * BIG, 2 * SMALL);

	/* step 2: the child's SRQ is empty until it posts */
	svt_chan_read(c.rfd, &m, sizeof(m), 0);
	SVT_CHECK_EQ(m.step, 2u);
	svt_fill(p.buf, SMALL, 200);
	SVT_CHECK_OK(post(&p, 6, IBV_WR_SEND, m.srqn, 0, SMALL, 0));
	svt_poll_ok(p.scq, 1, wc, 0);
	SVT_CHECK_EQ(wc[0].wr_id, 6u);

	/* step 3: WRITE, READ, atomics and WRITE_WITH_IMM on the child's memory */
	svt_chan_read(c.rfd, &m, sizeof(m), 0);
	SVT_CHECK_EQ(m.step, 3u);
	svt_fill(p.buf, BIG, 400);
	svt_fill(p.buf + BIG, SMALL, 401);
	memset(p.buf + 2 * BIG, 0, BIG + 16);
	SVT_CHECK_OK(post_to(&p, 10, IBV_WR_RDMA_WRITE, m.srqn, 0, BIG, 0, m.addr + W_OFF, m.rkey));
	SVT_CHECK_OK(post_to(&p, 11, IBV_WR_RDMA_READ, m.srqn, 2 * BIG, BIG, 0, m.addr + R_OFF,
			     m.rkey));
	SVT_CHECK_OK(post_to(&p, 12, IBV_WR_ATOMIC_FETCH_AND_ADD, m.srqn, 3 * BIG, 8, 5,
			     m.addr + A_OFF, m.rkey));
	SVT_CHECK_OK(post_to(&p, 13, IBV_WR_ATOMIC_CMP_AND_SWP, m.srqn, 3 * BIG + 8, 8, 7,
			     m.addr + A_OFF + 8, m.rkey));
	SVT_CHECK_OK(post_to(&p, 14, IBV_WR_RDMA_WRITE_WITH_IMM, m.srqn, BIG, SMALL, 0x5eed0003,
			     m.addr + WI_OFF, m.rkey));
	svt_poll_n(p.scq, 5, wc, 0);
	for (int i = 0; i < 5; i++) {
		if (wc[i].wr_id != (uint64_t)(10 + i) || wc[i].status)
			svt_log("wc %d: wr_id %llu status %s", i, (unsigned long long)wc[i].wr_id,
				ibv_wc_status_str(wc[i].status));
		SVT_CHECK_EQ(wc[i].wr_id, (uint64_t)(10 + i));
		SVT_CHECK_WC_OK(wc[i]);
	}
	SVT_CHECK_FILL(p.buf + 2 * BIG, BIG, 300);
	SVT_CHECK_EQ(*(uint64_t *)(p.buf + 3 * BIG), 1000u);
	SVT_CHECK_EQ(*(uint64_t *)(p.buf + 3 * BIG + 8), 7u);
	svt_chan_write(c.wfd, &m, sizeof(m));

	/* step 4: longer than the child's receive */
	svt_chan_read(c.rfd, &m, sizeof(m), 0);
	SVT_CHECK_EQ(m.step, 4u);
	SVT_CHECK_OK(post(&p, 7, IBV_WR_SEND, m.srqn, 0, SMALL, 0));
	svt_poll_n(p.scq, 1, wc, 0);
	SVT_CHECK_EQ(wc[0].wr_id, 7u);
	CHECK_REFUSED(wc[0], IBV_WC_REM_INV_REQ_ERR);

	/* a WRITE with a key the child does not have */
	reconnect(&p);
	SVT_CHECK_OK(post_to(&p, 8, IBV_WR_RDMA_WRITE, m.srqn, 0, 64, 0, m.addr, m.rkey ^ 0x80));
	svt_poll_n(p.scq, 1, wc, 0);
	CHECK_REFUSED(wc[0], IBV_WC_REM_ACCESS_ERR);
	svt_chan_write(c.wfd, &m, sizeof(m));
	svt_chan_read(c.rfd, &m, sizeof(m), 0);
	SVT_CHECK_EQ(m.step, 99u);
	SVT_CHECK_EQ(svt_child_wait(&c, 10000), 0);
	SVT_CHECK_OK(ibv_destroy_qp(p.send));
	SVT_CHECK_OK(ibv_destroy_qp(p.recv));
	SVT_CHECK_OK(ibv_destroy_srq(p.own));
	SVT_CHECK_OK(ibv_close_xrcd(p.x));
	SVT_CHECK_OK(ibv_dereg_mr(p.mr));
	SVT_CHECK_OK(ibv_dereg_mr(p.rmr));
	SVT_CHECK_OK(ibv_destroy_cq(p.scq));
	SVT_CHECK_OK(ibv_destroy_cq(p.rcq));
	close(p.fd);
	free(p.buf);
	free(p.rbuf);
	unlink(path);
	svt_dev_close(&p.d);
}

static const struct svt_child_role roles[] = {
	{ "srq_owner", srq_owner },
	{ NULL, NULL },
};

int main(int argc, char **argv)
{
	svt_child_dispatch(argc, argv, roles);
	svt_watchdog(50);
	test_shared();
	return 0;
}
