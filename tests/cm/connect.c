/*
 * cm_connect: a whole RC connection through librdmacm, both sides in this
 * process on 127.0.0.1, each with its own event channel.
 *   - rdma_create_qp with no PD and no CQs: the default PD, CQs with
 *     completion channels (what the rdma_verbs.h helpers wait on), QP in INIT
 *   - CONNECT_REQUEST carries the REQ's 56 bytes of private data and
 *     ESTABLISHED the REP's 196, byte for byte; the lengths are the whole CM
 *     fields; oversized private data (57, 197) is refused with EINVAL
 *   - responder_resources/initiator_depth are reported from the receiver's
 *     point of view, and the QPs are set up with what was negotiated
 *     (IBTA 12.7.29: the active side takes the REP's values)
 *   - rdma_init_qp_attr gives the masks and values of INIT/RTR/RTS
 *   - SEND/RECV both ways, RDMA WRITE both ways and RDMA READ, with
 *     rdma_post_* and rdma_get_*_comp, to addresses and rkeys that travelled
 *     in the private data
 *   - rdma_disconnect: DISCONNECTED on both sides, the disconnecting side's
 *     QP in ERR at once, the other side's once it disconnects too
 * Port 20510.
 */
#include "cm_test.h"

#include <rdma/rdma_verbs.h>

#define PORT 20510
#define BUF 4096
/* buffer layout of each side */
#define OFF_SEND 0
#define OFF_RECV 1024
#define OFF_WRITE 2048 /* target of the peer's RDMA WRITE */
#define OFF_READ 3072  /* source of the peer's RDMA READ / local READ landing */

#define REQ_PDATA 56
#define REP_PDATA 196

/* What a side tells the other in its private data, at offset 0. */
struct cmt_target {
	uint64_t addr;
	uint32_t rkey;
} __attribute__((packed));

struct side {
	struct rdma_cm_id *id;
	char *buf;
	struct ibv_mr *mr;
	struct cmt_target peer;
};

static void make_qp(struct side *s)
{
	/* RC: INIT now, RTR/RTS once the peer is known */
	SVT_CHECK_EQ(cmt_create_qp(s->id, IBV_QPT_RC, 16), IBV_QPS_INIT);
	s->buf = svt_alloc(BUF);
	s->mr = ibv_reg_mr(s->id->pd, s->buf, BUF,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	SVT_CHECK_PTR(s->mr);
}

/* pdata: svt_fill(seed) with s's WRITE/READ target in the first bytes. */
static void make_pdata(struct side *s, uint8_t *pdata, size_t len, uint32_t seed)
{
	struct cmt_target t = { (uintptr_t)s->buf, s->mr->rkey };

	svt_fill(pdata, len, seed);
	memcpy(pdata, &t, sizeof(t));
}

static struct ibv_qp_attr query(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	SVT_CHECK_OK(ibv_query_qp(qp, &a,
				  IBV_QP_STATE | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_SQ_PSN |
					  IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC |
					  IBV_QP_RNR_RETRY | IBV_QP_RETRY_CNT | IBV_QP_PATH_MTU |
					  IBV_QP_ACCESS_FLAGS,
				  &ia));
	return a;
}

/*
 * rdma_init_qp_attr on a connected id: the transitions' required masks and
 * the values the connection implies. The rd_atomic values it gives (RTR's
 * max_dest_rd_atomic, RTS's max_rd_atomic) are returned for the caller to
 * check against what this side negotiated.
 */
static void check_init_qp_attr(struct side *s, struct side *peer, int rnr_retry,
			       struct ibv_qp_attr *rd_atomic)
{
	struct ibv_qp_attr a, mine = query(s->id->qp), theirs = query(peer->id->qp);
	union ibv_gid peer_gid;
	int mask;
	const int init_mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
	const int rtr_mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			     IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	const int rts_mask = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			     IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;

	SVT_CHECK_OK(ibv_query_gid(peer->id->verbs, 1, 3, &peer_gid));

	memset(&a, 0xa5, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	SVT_CHECK_CM(rdma_init_qp_attr(s->id, &a, &mask));
	SVT_CHECK_EQ(mask, init_mask);
	SVT_CHECK_EQ(a.qp_state, IBV_QPS_INIT);
	SVT_CHECK_EQ(a.port_num, 1);
	SVT_CHECK_EQ(a.pkey_index, 0);
	SVT_CHECK_EQ(a.qp_access_flags & IBV_ACCESS_REMOTE_WRITE, IBV_ACCESS_REMOTE_WRITE);
	/* this side has responder resources: the peer may READ */
	SVT_CHECK_EQ(a.qp_access_flags & IBV_ACCESS_REMOTE_READ, IBV_ACCESS_REMOTE_READ);

	memset(&a, 0xa5, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	SVT_CHECK_CM(rdma_init_qp_attr(s->id, &a, &mask));
	SVT_CHECK_EQ(mask & rtr_mask, rtr_mask);
	SVT_CHECK_EQ(a.qp_state, IBV_QPS_RTR);
	SVT_CHECK_EQ(a.dest_qp_num, peer->id->qp->qp_num);
	SVT_CHECK_EQ(a.rq_psn, theirs.sq_psn);
	SVT_CHECK_EQ(a.path_mtu, mine.path_mtu);
	SVT_CHECK_EQ(a.ah_attr.is_global, 1);
	SVT_CHECK_EQ(a.ah_attr.port_num, 1);
	SVT_CHECK_MEM(&a.ah_attr.grh.dgid, &peer_gid, sizeof(peer_gid));
	rd_atomic->max_dest_rd_atomic = a.max_dest_rd_atomic;

	memset(&a, 0xa5, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	SVT_CHECK_CM(rdma_init_qp_attr(s->id, &a, &mask));
	SVT_CHECK_EQ(mask & rts_mask, rts_mask);
	SVT_CHECK_EQ(a.qp_state, IBV_QPS_RTS);
	SVT_CHECK_EQ(a.sq_psn, mine.sq_psn);
	rd_atomic->max_rd_atomic = a.max_rd_atomic;
	SVT_CHECK_EQ(a.retry_cnt, 7);
	SVT_CHECK_EQ(a.rnr_retry, rnr_retry);

	/* and the QP the library moved along has exactly that */
	SVT_CHECK_EQ(mine.qp_state, IBV_QPS_RTS);
	SVT_CHECK_EQ(mine.dest_qp_num, peer->id->qp->qp_num);
	SVT_CHECK_EQ(mine.rq_psn, theirs.sq_psn);
	SVT_CHECK_EQ(mine.rnr_retry, rnr_retry);
	SVT_CHECK_EQ(mine.retry_cnt, 7);

	/* a state that is no connection step */
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_SQD;
	SVT_CHECK_CM_ERRNO(rdma_init_qp_attr(s->id, &a, &mask), EINVAL);
}

static void send_recv(struct side *from, struct side *to, uint32_t len, uint32_t seed)
{
	svt_fill(from->buf + OFF_SEND, len, seed);
	memset(to->buf + OFF_RECV, 0, 1024);
	SVT_CHECK_CM(rdma_post_recv(to->id, (void *)(uintptr_t)(seed + 100), to->buf + OFF_RECV,
				    1024, to->mr));
	SVT_CHECK_CM(rdma_post_send(from->id, (void *)(uintptr_t)seed, from->buf + OFF_SEND, len,
				    from->mr, IBV_SEND_SIGNALED));
	cmt_send_comp(from->id, IBV_WC_SEND, seed);
	cmt_recv_comp(to->id, seed + 100, len);
	SVT_CHECK_FILL(to->buf + OFF_RECV, len, seed);
}

static void rdma_write_to(struct side *from, struct side *to, uint32_t len, uint32_t seed)
{
	svt_fill(from->buf + OFF_SEND, len, seed);
	memset(to->buf + OFF_WRITE, 0, 1024);
	SVT_CHECK_CM(rdma_post_write(from->id, (void *)(uintptr_t)seed, from->buf + OFF_SEND, len,
				     from->mr, IBV_SEND_SIGNALED, from->peer.addr + OFF_WRITE,
				     from->peer.rkey));
	cmt_send_comp(from->id, IBV_WC_RDMA_WRITE, seed);
	/* RC: the write is placed before the requester sees its ACK */
	SVT_CHECK_FILL(to->buf + OFF_WRITE, len, seed);
}

static void rdma_read_from(struct side *from, struct side *to, uint32_t len, uint32_t seed)
{
	svt_fill(to->buf + OFF_READ, len, seed);
	memset(from->buf + OFF_READ, 0, 1024);
	SVT_CHECK_CM(rdma_post_read(from->id, (void *)(uintptr_t)seed, from->buf + OFF_READ, len,
				    from->mr, IBV_SEND_SIGNALED, from->peer.addr + OFF_READ,
				    from->peer.rkey));
	struct ibv_wc wc = cmt_send_comp(from->id, IBV_WC_RDMA_READ, seed);

	SVT_CHECK_EQ(wc.byte_len, len);
	SVT_CHECK_FILL(from->buf + OFF_READ, len, seed);
}

static enum ibv_qp_state qp_state(struct rdma_cm_id *id)
{
	return query(id->qp).qp_state;
}

int main(void)
{
	struct rdma_event_channel *ch_p, *ch_a;
	struct rdma_cm_id *listener;
	struct rdma_cm_event *ev;
	struct side act = { 0 }, pas = { 0 };
	uint8_t req_pdata[REQ_PDATA + 1], rep_pdata[REP_PDATA + 1];
	int ctx_l, ctx_a;

	svt_watchdog(20);
	ch_p = rdma_create_event_channel();
	ch_a = rdma_create_event_channel();
	SVT_CHECK_PTR(ch_p);
	SVT_CHECK_PTR(ch_a);

	listener = cmt_listen(ch_p, RDMA_PS_TCP, "127.0.0.1", PORT);
	listener->context = &ctx_l;
	SVT_CHECK_EQ(rdma_get_src_port(listener), htons(PORT));
	/* a loopback bind names no device, as on Linux (the request will) */
	SVT_CHECK(listener->verbs == NULL);
	SVT_CHECK_EQ(((struct sockaddr_in *)rdma_get_local_addr(listener))->sin_addr.s_addr,
		     htonl(INADDR_LOOPBACK));

	SVT_CHECK_CM(rdma_create_id(ch_a, &act.id, &ctx_a, RDMA_PS_TCP));
	cmt_resolve(act.id, ch_a, "127.0.0.1", PORT);
	make_qp(&act);

	/* connect: 57 bytes of private data do not fit in a REQ, 56 do */
	make_pdata(&act, req_pdata, sizeof(req_pdata), 56);
	struct rdma_conn_param cp = {
		.private_data = req_pdata,
		.private_data_len = REQ_PDATA + 1,
		.responder_resources = 4,
		.initiator_depth = 3,
		.retry_count = 7,
		.rnr_retry_count = 5,
	};

	SVT_CHECK_CM_ERRNO(rdma_connect(act.id, &cp), EINVAL);
	cp.private_data_len = REQ_PDATA;
	SVT_CHECK_CM(rdma_connect(act.id, &cp));

	/* passive: the request, as the receiver sees it */
	ev = cmt_expect(ch_p, RDMA_CM_EVENT_CONNECT_REQUEST);
	SVT_CHECK(ev->listen_id == listener);
	SVT_CHECK_PTR(ev->id);
	SVT_CHECK(ev->id != listener);
	pas.id = ev->id;
	SVT_CHECK(pas.id->context == &ctx_l); /* a request's id inherits the listener's context */
	SVT_CHECK(pas.id->channel == ch_p);
	SVT_CHECK_PTR(pas.id->verbs);
	SVT_CHECK(strcmp(ibv_get_device_name(pas.id->verbs->device), "sv_lo") == 0);
	SVT_CHECK_EQ(ev->param.conn.private_data_len, REQ_PDATA);
	SVT_CHECK_PTR(ev->param.conn.private_data);
	SVT_CHECK_MEM(ev->param.conn.private_data, req_pdata, REQ_PDATA);
	SVT_CHECK_EQ(ev->param.conn.responder_resources, 3); /* the peer's initiator depth */
	SVT_CHECK_EQ(ev->param.conn.initiator_depth, 4);     /* the peer's responder resources */
	SVT_CHECK_EQ(ev->param.conn.retry_count, 7);
	SVT_CHECK_EQ(ev->param.conn.rnr_retry_count, 5);
	SVT_CHECK_EQ(ev->param.conn.qp_num, act.id->qp->qp_num);
	memcpy(&pas.peer, ev->param.conn.private_data, sizeof(pas.peer));
	SVT_CHECK_CM(rdma_ack_cm_event(ev));
	/* the two ends of the CM connection name each other */
	SVT_CHECK_EQ(rdma_get_src_port(pas.id), htons(PORT));
	SVT_CHECK_EQ(rdma_get_dst_port(pas.id), rdma_get_src_port(act.id));
	SVT_CHECK_EQ(rdma_get_dst_port(act.id), htons(PORT));

	make_qp(&pas);
	make_pdata(&pas, rep_pdata, sizeof(rep_pdata), 196);
	struct rdma_conn_param ap = {
		.private_data = rep_pdata,
		.private_data_len = REP_PDATA + 1,
		.responder_resources = 2, /* <= the 3 the request offered */
		.initiator_depth = 1,     /* <= the 4 the request offered */
		.rnr_retry_count = 6,
	};

	SVT_CHECK_CM_ERRNO(rdma_accept(pas.id, &ap), EINVAL);
	ap.private_data_len = REP_PDATA;
	SVT_CHECK_CM(rdma_accept(pas.id, &ap));

	/* active: ESTABLISHED with the reply */
	ev = cmt_expect(ch_a, RDMA_CM_EVENT_ESTABLISHED);
	SVT_CHECK(ev->id == act.id);
	SVT_CHECK(ev->listen_id == NULL);
	SVT_CHECK(ev->id->context == &ctx_a);
	SVT_CHECK_EQ(ev->param.conn.private_data_len, REP_PDATA);
	SVT_CHECK_PTR(ev->param.conn.private_data);
	SVT_CHECK_MEM(ev->param.conn.private_data, rep_pdata, REP_PDATA);
	SVT_CHECK_EQ(ev->param.conn.responder_resources, 1); /* the passive side's initiator depth */
	SVT_CHECK_EQ(ev->param.conn.initiator_depth, 2);     /* its responder resources */
	SVT_CHECK_EQ(ev->param.conn.rnr_retry_count, 6);
	SVT_CHECK_EQ(ev->param.conn.qp_num, pas.id->qp->qp_num);
	memcpy(&act.peer, ev->param.conn.private_data, sizeof(act.peer));
	SVT_CHECK_CM(rdma_ack_cm_event(ev));

	ev = cmt_expect(ch_p, RDMA_CM_EVENT_ESTABLISHED);
	SVT_CHECK(ev->id == pas.id);
	SVT_CHECK_CM(rdma_ack_cm_event(ev));
	cmt_expect_none(ch_a, 20);
	cmt_expect_none(ch_p, 20);

	/*
	 * The QPs: the passive side's with what it accepted; the active
	 * side's rd_atomic values are checked at the end so that a mismatch
	 * there does not hide the rest of the test.
	 */
	struct ibv_qp_attr pa = query(pas.id->qp), aa = query(act.id->qp), p_init, a_init;

	SVT_CHECK_EQ(pa.max_dest_rd_atomic, 2);
	SVT_CHECK_EQ(pa.max_rd_atomic, 1);
	/* the REQ's RNR retry count is for the passive QP, the REP's for the active */
	check_init_qp_attr(&pas, &act, 5, &p_init);
	SVT_CHECK_EQ(p_init.max_dest_rd_atomic, 2);
	SVT_CHECK_EQ(p_init.max_rd_atomic, 1);
	check_init_qp_attr(&act, &pas, 6, &a_init);

	send_recv(&act, &pas, 100, 1);
	send_recv(&pas, &act, 1000, 2);
	rdma_write_to(&act, &pas, 512, 3);
	rdma_write_to(&pas, &act, 700, 4);
	rdma_read_from(&act, &pas, 900, 5);
	rdma_read_from(&pas, &act, 64, 6);

	/* disconnect from the active side */
	SVT_CHECK_CM(rdma_disconnect(act.id));
	SVT_CHECK_EQ(qp_state(act.id), IBV_QPS_ERR);
	ev = cmt_expect(ch_p, RDMA_CM_EVENT_DISCONNECTED);
	SVT_CHECK(ev->id == pas.id);
	SVT_CHECK_CM(rdma_ack_cm_event(ev));
	ev = cmt_expect(ch_a, RDMA_CM_EVENT_DISCONNECTED);
	SVT_CHECK(ev->id == act.id);
	SVT_CHECK_CM(rdma_ack_cm_event(ev));
	/* the passive side answers by disconnecting too, which flushes its QP */
	SVT_CHECK_CM(rdma_disconnect(pas.id));
	SVT_CHECK_EQ(qp_state(pas.id), IBV_QPS_ERR);
	cmt_drain_timewait(ch_a);
	cmt_drain_timewait(ch_p);

	SVT_CHECK_CM(rdma_dereg_mr(act.mr));
	SVT_CHECK_CM(rdma_dereg_mr(pas.mr));
	rdma_destroy_qp(act.id);
	rdma_destroy_qp(pas.id);
	free(act.buf);
	free(pas.buf);
	SVT_CHECK(act.id->qp == NULL);
	SVT_CHECK_CM(rdma_destroy_id(act.id));
	SVT_CHECK_CM(rdma_destroy_id(pas.id));
	SVT_CHECK_CM(rdma_destroy_id(listener));
	rdma_destroy_event_channel(ch_a);
	rdma_destroy_event_channel(ch_p);

	/*
	 * The active QP after the REP: an initiator may have no more RDMA
	 * READs/atomics outstanding than the responder accepted, so the
	 * active side takes max_rd_atomic from the REP's responder resources
	 * (2) and max_dest_rd_atomic from its initiator depth (1), as the
	 * kernel CM does on a REP (cm_rep_handler), not what it asked for in
	 * rdma_connect (3 and 4). Both the QP and rdma_init_qp_attr.
	 */
	SVT_CHECK_EQ(aa.max_rd_atomic, 2);
	SVT_CHECK_EQ(aa.max_dest_rd_atomic, 1);
	SVT_CHECK_EQ(a_init.max_rd_atomic, 2);
	SVT_CHECK_EQ(a_init.max_dest_rd_atomic, 1);
	svt_log("ok");
	return 0;
}
