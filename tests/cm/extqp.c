/*
 * cm_extqp: rdma_cm connections whose QPs the program makes and moves
 * itself, as middleware does: ibv_create_qp on id->pd, rdma_init_qp_attr and
 * ibv_modify_qp for each step, the QP number in conn_param.qp_num.
 *   1. The passive side's QP is its own: it takes it to INIT, RTR and RTS
 *      with rdma_init_qp_attr before rdma_accept; the active side uses
 *      rdma_create_qp. rdma_init_qp_attr before the accept already gives
 *      the PSN the REP then carries, and the rd_atomic values the request
 *      offered.
 *   2. Both QPs are the program's: the active one is made on id->pd after
 *      rdma_resolve_addr and taken to INIT before rdma_connect, to RTR and
 *      RTS on CONNECT_RESPONSE, then rdma_establish.
 * Each time the PSNs agree (ibv_query_qp: each side's sq_psn is the other's
 * rq_psn), and SENDs, RDMA WRITEs and RDMA READs go both ways with the data.
 * Port 20578.
 */
#include "cm_test.h"

#include <rdma/rdma_verbs.h>

#define PORT 20578
#define BUF 4096
#define OFF_SEND 0
#define OFF_RECV 1024
#define OFF_WRITE 2048 /* target of the peer's RDMA WRITE */
#define OFF_READ 3072  /* source of the peer's RDMA READ / local READ landing */
#define RD_ATOMIC 4

/* What a side tells the other in its private data. */
struct target {
	uint64_t addr;
	uint32_t rkey;
} __attribute__((packed));

struct side {
	struct rdma_cm_id *id;
	struct ibv_qp *qp;
	struct ibv_cq *send_cq, *recv_cq;
	bool external;
	char *buf;
	struct ibv_mr *mr;
	struct target peer;
};

static void make_buffer(struct side *s)
{
	s->buf = svt_alloc(BUF);
	s->mr = ibv_reg_mr(s->id->pd, s->buf, BUF,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	SVT_CHECK_PTR(s->mr);
}

/* The program's own QP and CQ, on the PD librdmacm gave the id. */
static void make_external_qp(struct side *s)
{
	SVT_CHECK_PTR(s->id->pd);
	struct ibv_cq *cq = ibv_create_cq(s->id->verbs, 32, NULL, NULL, 0);

	SVT_CHECK_PTR(cq);
	struct ibv_qp_init_attr qa = {
		.send_cq = cq,
		.recv_cq = cq,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};

	s->qp = ibv_create_qp(s->id->pd, &qa);
	SVT_CHECK_MSG(s->qp != NULL, "ibv_create_qp on id->pd: %s", strerror(errno));
	s->send_cq = s->recv_cq = cq;
	s->external = true;
	make_buffer(s);
}

static void make_cm_qp(struct side *s)
{
	SVT_CHECK_EQ(cmt_create_qp(s->id, IBV_QPT_RC, 16), IBV_QPS_INIT);
	s->qp = s->id->qp;
	s->send_cq = s->id->send_cq;
	s->recv_cq = s->id->recv_cq;
	make_buffer(s);
}

/* One step of the program's own QP, with what librdmacm says it takes. */
static void move(struct side *s, enum ibv_qp_state to)
{
	struct ibv_qp_attr a = { .qp_state = to };
	int mask;

	SVT_CHECK_CM(rdma_init_qp_attr(s->id, &a, &mask));
	SVT_CHECK_OK(ibv_modify_qp(s->qp, &a, mask));
}

static struct ibv_qp_attr query(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	SVT_CHECK_OK(ibv_query_qp(qp, &a,
				  IBV_QP_STATE | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_SQ_PSN |
					  IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC,
				  &ia));
	return a;
}

/* rdma_init_qp_attr's sq_psn for RTS: the PSN this side's REQ or REP carries. */
static uint32_t cm_sq_psn(struct side *s)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTS };
	int mask;

	SVT_CHECK_CM(rdma_init_qp_attr(s->id, &a, &mask));
	SVT_CHECK(mask & IBV_QP_SQ_PSN);
	return a.sq_psn;
}

static void make_pdata(struct side *s, uint8_t *pdata, size_t len)
{
	struct target t = { (uintptr_t)s->buf, s->mr->rkey };

	memset(pdata, 0, len);
	memcpy(pdata, &t, sizeof(t));
}

/* Both QPs in RTS, each sending with the PSN the other expects. */
static void check_connected(struct side *a, struct side *p)
{
	struct ibv_qp_attr qa = query(a->qp), qp = query(p->qp);

	SVT_CHECK_EQ(qa.qp_state, IBV_QPS_RTS);
	SVT_CHECK_EQ(qp.qp_state, IBV_QPS_RTS);
	SVT_CHECK_EQ(qa.dest_qp_num, p->qp->qp_num);
	SVT_CHECK_EQ(qp.dest_qp_num, a->qp->qp_num);
	SVT_CHECK_EQ(qa.sq_psn, qp.rq_psn);
	SVT_CHECK_EQ(qp.sq_psn, qa.rq_psn);
	SVT_CHECK_EQ(cm_sq_psn(a), qa.sq_psn);
	SVT_CHECK_EQ(cm_sq_psn(p), qp.sq_psn);
	/* READs may be outstanding both ways */
	SVT_CHECK_EQ(qa.max_rd_atomic, RD_ATOMIC);
	SVT_CHECK_EQ(qp.max_dest_rd_atomic, RD_ATOMIC);
	SVT_CHECK_EQ(qp.max_rd_atomic, RD_ATOMIC);
	SVT_CHECK_EQ(qa.max_dest_rd_atomic, RD_ATOMIC);
}

static struct ibv_wc one_wc(struct ibv_cq *cq, enum ibv_wc_opcode op, uint64_t wr_id)
{
	struct ibv_wc wc = svt_poll_one(cq);

	SVT_CHECK_WC_OK(wc);
	SVT_CHECK_EQ(wc.opcode, op);
	SVT_CHECK_EQ(wc.wr_id, wr_id);
	return wc;
}

static void send_recv(struct side *from, struct side *to, uint32_t len, uint32_t seed)
{
	svt_fill(from->buf + OFF_SEND, len, seed);
	memset(to->buf + OFF_RECV, 0, 1024);
	SVT_CHECK_OK(svt_post_recv(to->qp, seed + 100, to->buf + OFF_RECV, 1024, to->mr->lkey));
	SVT_CHECK_OK(svt_post_send(from->qp, seed, IBV_WR_SEND, IBV_SEND_SIGNALED,
				   from->buf + OFF_SEND, len, from->mr->lkey, 0, 0, 0));
	one_wc(from->send_cq, IBV_WC_SEND, seed);
	struct ibv_wc wc = one_wc(to->recv_cq, IBV_WC_RECV, seed + 100);

	SVT_CHECK_EQ(wc.byte_len, len);
	SVT_CHECK_FILL(to->buf + OFF_RECV, len, seed);
}

static void rdma_write_to(struct side *from, struct side *to, uint32_t len, uint32_t seed)
{
	svt_fill(from->buf + OFF_SEND, len, seed);
	memset(to->buf + OFF_WRITE, 0, 1024);
	SVT_CHECK_OK(svt_post_send(from->qp, seed, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED,
				   from->buf + OFF_SEND, len, from->mr->lkey,
				   from->peer.addr + OFF_WRITE, from->peer.rkey, 0));
	one_wc(from->send_cq, IBV_WC_RDMA_WRITE, seed);
	SVT_CHECK_FILL(to->buf + OFF_WRITE, len, seed);
}

static void rdma_read_from(struct side *from, struct side *to, uint32_t len, uint32_t seed)
{
	svt_fill(to->buf + OFF_READ, len, seed);
	memset(from->buf + OFF_READ, 0, 1024);
	SVT_CHECK_OK(svt_post_send(from->qp, seed, IBV_WR_RDMA_READ, IBV_SEND_SIGNALED,
				   from->buf + OFF_READ, len, from->mr->lkey,
				   from->peer.addr + OFF_READ, from->peer.rkey, 0));
	struct ibv_wc wc = one_wc(from->send_cq, IBV_WC_RDMA_READ, seed);

	SVT_CHECK_EQ(wc.byte_len, len);
	SVT_CHECK_FILL(from->buf + OFF_READ, len, seed);
}

static void traffic(struct side *a, struct side *p, uint32_t seed)
{
	send_recv(a, p, 100, seed + 1);
	send_recv(p, a, 1000, seed + 2);
	rdma_write_to(a, p, 512, seed + 3);
	rdma_write_to(p, a, 700, seed + 4);
	rdma_read_from(a, p, 900, seed + 5);
	rdma_read_from(p, a, 64, seed + 6);
	/* and SENDs again after the one-sided traffic, in both directions */
	send_recv(a, p, 1024, seed + 7);
	send_recv(p, a, 1, seed + 8);
}

/*
 * The passive side answers the request with its own QP, taken to RTS
 * before rdma_accept, and qp_num in conn_param.
 */
static void accept_external(struct rdma_event_channel *ch_p, struct side *p, uint32_t active_qpn)
{
	struct rdma_cm_event *ev = cmt_expect(ch_p, RDMA_CM_EVENT_CONNECT_REQUEST);
	uint8_t pdata[64];

	p->id = ev->id;
	SVT_CHECK_EQ(ev->param.conn.qp_num, active_qpn);
	SVT_CHECK_EQ(ev->param.conn.responder_resources, RD_ATOMIC);
	SVT_CHECK_EQ(ev->param.conn.initiator_depth, RD_ATOMIC);
	memcpy(&p->peer, ev->param.conn.private_data, sizeof(p->peer));
	SVT_CHECK_CM(rdma_ack_cm_event(ev));

	make_external_qp(p);
	move(p, IBV_QPS_INIT);
	move(p, IBV_QPS_RTR);
	move(p, IBV_QPS_RTS);
	/* before the accept: the rd_atomic values the request offered */
	struct ibv_qp_attr q = query(p->qp);

	SVT_CHECK_EQ(q.max_dest_rd_atomic, RD_ATOMIC);
	SVT_CHECK_EQ(q.max_rd_atomic, RD_ATOMIC);

	make_pdata(p, pdata, sizeof(pdata));
	struct rdma_conn_param ap = {
		.private_data = pdata,
		.private_data_len = sizeof(pdata),
		.responder_resources = RD_ATOMIC,
		.initiator_depth = RD_ATOMIC,
		.rnr_retry_count = 7,
		.qp_num = p->qp->qp_num,
	};

	SVT_CHECK_CM(rdma_accept(p->id, &ap));
}

static void connect_param(struct side *a, uint8_t *pdata, size_t len, struct rdma_conn_param *cp)
{
	make_pdata(a, pdata, len);
	*cp = (struct rdma_conn_param){
		.private_data = pdata,
		.private_data_len = (uint8_t)len,
		.responder_resources = RD_ATOMIC,
		.initiator_depth = RD_ATOMIC,
		.retry_count = 7,
		.rnr_retry_count = 7,
		.qp_num = a->external ? a->qp->qp_num : 0,
	};
}

static void teardown(struct side *s)
{
	SVT_CHECK_OK(ibv_dereg_mr(s->mr));
	if (s->external) {
		SVT_CHECK_OK(ibv_destroy_qp(s->qp));
		SVT_CHECK_OK(ibv_destroy_cq(s->send_cq));
	} else {
		rdma_destroy_qp(s->id);
	}
	free(s->buf);
	SVT_CHECK_CM(rdma_destroy_id(s->id));
}

static void disconnect(struct rdma_event_channel *ch_from, struct side *from,
		       struct rdma_event_channel *ch_to, struct side *to)
{
	struct rdma_cm_event *ev;

	SVT_CHECK_CM(rdma_disconnect(from->id));
	ev = cmt_expect(ch_to, RDMA_CM_EVENT_DISCONNECTED);
	SVT_CHECK(ev->id == to->id);
	SVT_CHECK_CM(rdma_ack_cm_event(ev));
	ev = cmt_expect(ch_from, RDMA_CM_EVENT_DISCONNECTED);
	SVT_CHECK(ev->id == from->id);
	SVT_CHECK_CM(rdma_ack_cm_event(ev));
	cmt_drain_timewait(ch_from);
	cmt_drain_timewait(ch_to);
}

/* 1: the passive QP is the program's, the active one librdmacm's. */
static void passive_external(struct rdma_event_channel *ch_p, struct rdma_event_channel *ch_a)
{
	struct side act = { 0 }, pas = { 0 };
	struct rdma_conn_param cp;
	struct rdma_cm_event *ev;
	uint8_t pdata[56];

	SVT_CHECK_CM(rdma_create_id(ch_a, &act.id, NULL, RDMA_PS_TCP));
	cmt_resolve(act.id, ch_a, "127.0.0.1", PORT);
	make_cm_qp(&act);
	connect_param(&act, pdata, sizeof(pdata), &cp);
	SVT_CHECK_CM(rdma_connect(act.id, &cp));

	accept_external(ch_p, &pas, act.qp->qp_num);
	ev = cmt_expect(ch_a, RDMA_CM_EVENT_ESTABLISHED);
	SVT_CHECK_EQ(ev->param.conn.qp_num, pas.qp->qp_num);
	memcpy(&act.peer, ev->param.conn.private_data, sizeof(act.peer));
	SVT_CHECK_CM(rdma_ack_cm_event(ev));
	ev = cmt_expect(ch_p, RDMA_CM_EVENT_ESTABLISHED);
	SVT_CHECK(ev->id == pas.id);
	SVT_CHECK_CM(rdma_ack_cm_event(ev));

	check_connected(&act, &pas);
	traffic(&act, &pas, 10);

	disconnect(ch_a, &act, ch_p, &pas);
	teardown(&act);
	teardown(&pas);
}

/* 2: both QPs are the program's; the active one on the id's PD. */
static void both_external(struct rdma_event_channel *ch_p, struct rdma_event_channel *ch_a)
{
	struct side act = { 0 }, pas = { 0 };
	struct rdma_conn_param cp;
	struct rdma_cm_event *ev;
	uint8_t pdata[56];

	SVT_CHECK_CM(rdma_create_id(ch_a, &act.id, NULL, RDMA_PS_TCP));
	cmt_resolve(act.id, ch_a, "127.0.0.1", PORT);
	make_external_qp(&act);
	move(&act, IBV_QPS_INIT);
	connect_param(&act, pdata, sizeof(pdata), &cp);
	SVT_CHECK_CM(rdma_connect(act.id, &cp));

	accept_external(ch_p, &pas, act.qp->qp_num);
	ev = cmt_expect(ch_a, RDMA_CM_EVENT_CONNECT_RESPONSE);
	SVT_CHECK_EQ(ev->param.conn.qp_num, pas.qp->qp_num);
	memcpy(&act.peer, ev->param.conn.private_data, sizeof(act.peer));
	SVT_CHECK_CM(rdma_ack_cm_event(ev));
	move(&act, IBV_QPS_RTR);
	move(&act, IBV_QPS_RTS);
	SVT_CHECK_CM(rdma_establish(act.id));
	ev = cmt_expect(ch_p, RDMA_CM_EVENT_ESTABLISHED);
	SVT_CHECK(ev->id == pas.id);
	SVT_CHECK_CM(rdma_ack_cm_event(ev));

	check_connected(&act, &pas);
	traffic(&act, &pas, 20);

	disconnect(ch_p, &pas, ch_a, &act);
	teardown(&act);
	teardown(&pas);
}

int main(void)
{
	struct rdma_event_channel *ch_p, *ch_a;
	struct rdma_cm_id *listener;

	svt_watchdog(20);
	ch_p = rdma_create_event_channel();
	ch_a = rdma_create_event_channel();
	SVT_CHECK_PTR(ch_p);
	SVT_CHECK_PTR(ch_a);
	listener = cmt_listen(ch_p, RDMA_PS_TCP, "127.0.0.1", PORT);

	passive_external(ch_p, ch_a);
	both_external(ch_p, ch_a);

	SVT_CHECK_CM(rdma_destroy_id(listener));
	rdma_destroy_event_channel(ch_a);
	rdma_destroy_event_channel(ch_p);
	svt_log("ok");
	return 0;
}
