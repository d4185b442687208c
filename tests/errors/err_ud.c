/*
 * err_ud - UD datagram rules: GRH, qkey, MTU, unknown destination QP.
 *
 * 1. A receive buffer gets the 40-byte GRH first: IBV_WC_GRH set, byte_len =
 *    payload + 40, payload at offset 40, the GRH's sgid is the sender's
 *    GID 0 and its dgid the receiver's; src_qp is the sender's QP number.
 *    Also with the GRH in a 40-byte first SGE and the payload in a second.
 * 2. A datagram with the wrong qkey is dropped: the sender completes
 *    IBV_WC_SUCCESS, the receiver gets nothing within 200 ms, and its receive
 *    is still there for the next, correct, datagram.
 * 3. A datagram longer than the port MTU: Soft-RoCE follows IBA C10-93.1.1
 *    ("the CI shall not emit any packets for this message ... shall not
 *    generate an error"): the send completes IBV_WC_SUCCESS and nothing is
 *    delivered. A datagram of exactly the MTU is delivered.
 * 4. A datagram to a QP number nobody has is dropped; the sender succeeds.
 * Receivers' memory outside the posted buffers never changes.
 */
#include "err_util.h"

#define GRH 40
#define SEED_A 0xd1d1
#define SEED_B 0xd2d2
#define SEED_C 0xd3d3

static void ud_pair(struct svt_pair *p)
{
	struct svt_pair_opts o;

	svt_pair_opts_default(&o, IBV_QPT_UD);
	o.separate_cqs = true;
	svt_pair_create(p, IBV_QPT_UD, &o);
	svt_fill(p->a.buf, p->a.buf_len, SEED_A);
	svt_fill(p->b.buf, p->b.buf_len, SEED_B);
}

static uint32_t qkey_of(const struct svt_pair *p)
{
	return p->opts.conn.qkey;
}

/* a sends len bytes at buf to (qpn, qkey) on b's context; the send
 * succeeds whatever becomes of the datagram. */
static void send_dgram(const struct svt_pair *p, uint64_t wr_id, void *buf,
		       uint32_t len, uint32_t qpn, uint32_t qkey)
{
	SVT_CHECK_OK(svt_post_ud_send(p->a.qp, wr_id, IBV_SEND_SIGNALED, buf,
				      len, p->a.mr->lkey, p->a.ah, qpn, qkey));
	errt_expect_wc(p->a.send_cq, wr_id, IBV_WC_SUCCESS, 0);
}

/* Bytes [from, to) of b.buf still hold SEED_B. */
static void check_b_pattern(const struct svt_pair *p, size_t from, size_t to)
{
	const uint8_t *b = p->b.buf;

	for (size_t off = from; off < to; off++)
		if (b[off] != svt_pattern_byte(SEED_B, off))
			SVT_FAIL("receiver byte %zu changed (outside any "
				 "datagram that should have landed)", off);
}

static void check_grh_wc(const struct svt_pair *p, const struct ibv_wc *wc,
			 const uint8_t *grh_at, uint32_t payload)
{
	struct ibv_grh grh;

	SVT_CHECK_WC_OK(*wc);
	SVT_CHECK_EQ(wc->opcode, IBV_WC_RECV);
	SVT_CHECK_MSG(wc->wc_flags & IBV_WC_GRH, "IBV_WC_GRH not set (%#x)",
		      wc->wc_flags);
	SVT_CHECK_EQ(wc->byte_len, payload + GRH);
	SVT_CHECK_EQ(wc->src_qp, p->a.qp->qp_num);
	SVT_CHECK_EQ(wc->qp_num, p->b.qp->qp_num);
	memcpy(&grh, grh_at, sizeof(grh));
	SVT_CHECK_MEM(&grh.sgid, &p->a.gid, sizeof(union ibv_gid));
	SVT_CHECK_MEM(&grh.dgid, &p->b.gid, sizeof(union ibv_gid));
}

static void grh_single_sge(void)
{
	struct svt_pair p;
	struct ibv_wc wc;
	const uint32_t msg = 1000;
	uint8_t *b = NULL;

	ud_pair(&p);
	b = p.b.buf;
	SVT_CHECK_OK(svt_post_recv(p.b.qp, 1, b + 4096, GRH + msg + 64,
				   p.b.mr->lkey));
	send_dgram(&p, 7, p.a.buf, msg, p.a.remote_qpn, qkey_of(&p));
	wc = errt_expect_wc(p.b.recv_cq, 1, IBV_WC_SUCCESS, 0);
	check_grh_wc(&p, &wc, b + 4096, msg);
	SVT_CHECK_MEM(b + 4096 + GRH, p.a.buf, msg);
	check_b_pattern(&p, 0, 4096);
	check_b_pattern(&p, 4096 + GRH + msg, p.b.buf_len);
	svt_pair_destroy(&p);
	svt_log("ok: UD receive: GRH (sgid, dgid) in the first 40 bytes, "
		"byte_len = payload + 40, src_qp");
}

static void grh_split_sges(void)
{
	struct svt_pair p;
	struct ibv_wc wc;
	const uint32_t msg = 3000;
	uint8_t *b;
	struct ibv_sge sge[2];
	struct ibv_recv_wr rwr, *bad = NULL;

	ud_pair(&p);
	b = p.b.buf;
	sge[0] = (struct ibv_sge){ (uintptr_t)(b + 1024), GRH, p.b.mr->lkey };
	sge[1] = (struct ibv_sge){ (uintptr_t)(b + 8192), msg, p.b.mr->lkey };
	memset(&rwr, 0, sizeof(rwr));
	rwr.wr_id = 2;
	rwr.sg_list = sge;
	rwr.num_sge = 2;
	SVT_CHECK_OK(ibv_post_recv(p.b.qp, &rwr, &bad));
	send_dgram(&p, 8, p.a.buf, msg, p.a.remote_qpn, qkey_of(&p));
	wc = errt_expect_wc(p.b.recv_cq, 2, IBV_WC_SUCCESS, 0);
	check_grh_wc(&p, &wc, b + 1024, msg);
	SVT_CHECK_MEM(b + 8192, p.a.buf, msg);
	check_b_pattern(&p, 0, 1024);
	check_b_pattern(&p, 1024 + GRH, 8192);
	check_b_pattern(&p, 8192 + msg, p.b.buf_len);
	svt_pair_destroy(&p);
	svt_log("ok: UD receive: GRH in a 40-byte first SGE, payload in the "
		"second");
}

static void wrong_qkey(void)
{
	struct svt_pair p;
	struct ibv_wc wc;
	const uint32_t msg = 512;
	uint8_t *b;

	ud_pair(&p);
	b = p.b.buf;
	SVT_CHECK_OK(svt_post_recv(p.b.qp, 3, b, GRH + msg, p.b.mr->lkey));

	/* High bit clear: the WR's qkey is used as given. */
	uint32_t bad_qkey = (qkey_of(&p) ^ 0x5a5a) & 0x7fffffffu;
	send_dgram(&p, 9, p.a.buf, msg, p.a.remote_qpn, bad_qkey);
	svt_expect_no_wc(p.b.recv_cq, 200);
	check_b_pattern(&p, 0, p.b.buf_len);

	/* The receive is still posted: a datagram with the right qkey uses it. */
	uint8_t *second = (uint8_t *)p.a.buf + 16384;
	svt_fill(second, msg, SEED_C);
	send_dgram(&p, 10, second, msg, p.a.remote_qpn, qkey_of(&p));
	wc = errt_expect_wc(p.b.recv_cq, 3, IBV_WC_SUCCESS, 0);
	check_grh_wc(&p, &wc, b, msg);
	SVT_CHECK_FILL(b + GRH, msg, SEED_C);
	svt_expect_no_wc(p.b.recv_cq, 50);
	svt_pair_destroy(&p);
	svt_log("ok: UD datagram with the wrong qkey dropped silently, "
		"receive kept");
}

static void over_mtu(void)
{
	struct svt_pair p;
	struct ibv_port_attr port;
	struct ibv_wc wc;
	uint8_t *b;

	ud_pair(&p);
	b = p.b.buf;
	SVT_CHECK_OK(ibv_query_port(p.a.ctx, 1, &port));
	uint32_t mtu = errt_mtu_bytes(port.active_mtu);
	SVT_CHECK_LE(GRH + mtu + 64, 16384);
	SVT_CHECK_LE(mtu + 1, 16384);

	/* Room for far more than the MTU: only the MTU rule can drop it. */
	SVT_CHECK_OK(svt_post_recv(p.b.qp, 4, b, 16384, p.b.mr->lkey));
	send_dgram(&p, 11, p.a.buf, mtu + 1, p.a.remote_qpn, qkey_of(&p));
	svt_expect_no_wc(p.b.recv_cq, 200);
	check_b_pattern(&p, 0, p.b.buf_len);
	ERRT_CHECK_STATE(p.a.qp, IBV_QPS_RTS);

	/* Exactly the MTU is allowed, and lands in the same receive. */
	send_dgram(&p, 12, p.a.buf, mtu, p.a.remote_qpn, qkey_of(&p));
	wc = errt_expect_wc(p.b.recv_cq, 4, IBV_WC_SUCCESS, 0);
	check_grh_wc(&p, &wc, b, mtu);
	SVT_CHECK_MEM(b + GRH, p.a.buf, mtu);
	check_b_pattern(&p, GRH + mtu, p.b.buf_len);
	svt_pair_destroy(&p);
	svt_log("ok: UD send of MTU+1 (%u) bytes completes without delivery; "
		"MTU bytes delivered", mtu + 1);
}

static void unknown_qpn(void)
{
	struct svt_pair p;

	ud_pair(&p);
	SVT_CHECK_OK(svt_post_recv(p.b.qp, 5, p.b.buf, 4096, p.b.mr->lkey));
	/* A QP number next to the real one that no QP of b's context has. */
	uint32_t qpn = (p.a.remote_qpn + 0x1234) & 0xffffff;
	if (qpn == p.a.remote_qpn || qpn == p.b.qp->qp_num || qpn == p.a.qp->qp_num)
		qpn ^= 0x10000;
	send_dgram(&p, 13, p.a.buf, 256, qpn, qkey_of(&p));
	svt_expect_no_wc(p.b.recv_cq, 200);
	check_b_pattern(&p, 0, p.b.buf_len);
	ERRT_CHECK_STATE(p.a.qp, IBV_QPS_RTS);
	ERRT_CHECK_STATE(p.b.qp, IBV_QPS_RTS);
	svt_pair_destroy(&p);
	svt_log("ok: UD datagram to an unknown QPN dropped, sender succeeds");
}

int main(void)
{
	svt_watchdog(50);
	grh_single_sge();
	grh_split_sges();
	wrong_qkey();
	over_mtu();
	unknown_qpn();
	return 0;
}
