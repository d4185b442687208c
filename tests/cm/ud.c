/*
 * cm_ud: RDMA_PS_UDP ids, where "connecting" is a service ID resolution
 * (SIDR) that tells the active side the remote QPN, Q_Key and address.
 *   - rdma_create_qp on a UD id: the QP is in RTS right away, Q_Key
 *     RDMA_UDP_QKEY
 *   - CONNECT_REQUEST carries param.ud with the active QPN and the 180-byte
 *     SIDR REQ private data; 181 bytes are refused with EINVAL
 *   - rdma_accept: ESTABLISHED on the active side with param.ud.qp_num of the
 *     passive QP, qkey RDMA_UDP_QKEY, the 136-byte SIDR REP private data and
 *     an ah_attr from which ibv_create_ah works; the passive side gets no
 *     event
 *   - one datagram each way: the GRH in the first 40 bytes of the receive
 *     buffer, src_qp, and a reply AH made from the work completion
 * Port 20550.
 */
#include "cm_test.h"

#include <rdma/rdma_verbs.h>

#define PORT 20550
#define GRH 40
#define BUF 4096
#define SIDR_REQ_PDATA 180
#define SIDR_REP_PDATA 136

struct side {
	struct rdma_cm_id *id;
	char *buf;
	struct ibv_mr *mr;
};

static void make_qp(struct side *s)
{
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qia;

	/* a UD QP needs no peer: the library takes it all the way */
	SVT_CHECK_EQ(cmt_create_qp(s->id, IBV_QPT_UD, 8), IBV_QPS_RTS);
	SVT_CHECK_OK(ibv_query_qp(s->id->qp, &qa, IBV_QP_QKEY, &qia));
	SVT_CHECK_EQ(qa.qkey, RDMA_UDP_QKEY);
	s->buf = svt_alloc(BUF);
	s->mr = rdma_reg_msgs(s->id, s->buf, BUF);
	SVT_CHECK_PTR(s->mr);
}

/* from sends len bytes to (ah, qpn); to receives them behind the GRH. */
static struct ibv_wc datagram(struct side *from, struct side *to, struct ibv_ah *ah, uint32_t qpn,
			      uint32_t len, uint32_t seed)
{
	struct ibv_wc wc;
	union ibv_gid from_gid, to_gid;

	memset(to->buf, 0, BUF);
	svt_fill(from->buf + 2048, len, seed);
	SVT_CHECK_CM(rdma_post_recv(to->id, (void *)(uintptr_t)(seed + 10), to->buf, GRH + 1024,
				    to->mr));
	SVT_CHECK_CM(rdma_post_ud_send(from->id, (void *)(uintptr_t)seed, from->buf + 2048, len,
				       from->mr, IBV_SEND_SIGNALED, ah, qpn));
	cmt_send_comp(from->id, IBV_WC_SEND, seed);
	wc = cmt_recv_comp(to->id, seed + 10, GRH + len);
	SVT_CHECK(wc.wc_flags & IBV_WC_GRH);
	SVT_CHECK_EQ(wc.src_qp, from->id->qp->qp_num);
	SVT_CHECK_FILL(to->buf + GRH, len, seed);

	const struct ibv_grh *grh = (const struct ibv_grh *)to->buf;

	/* a GRH carries the IPv4-mapped GIDs (index 3) */
	SVT_CHECK_OK(ibv_query_gid(from->id->verbs, 1, 3, &from_gid));
	SVT_CHECK_OK(ibv_query_gid(to->id->verbs, 1, 3, &to_gid));
	SVT_CHECK_MEM(&grh->sgid, &from_gid, sizeof(from_gid));
	SVT_CHECK_MEM(&grh->dgid, &to_gid, sizeof(to_gid));
	return wc;
}

int main(void)
{
	struct rdma_event_channel *ch_p, *ch_a;
	struct rdma_cm_id *listener;
	struct rdma_cm_event *ev;
	struct side act = { 0 }, pas = { 0 };
	uint8_t req[SIDR_REQ_PDATA + 1], rep[100];
	uint32_t remote_qpn, remote_qkey;
	struct ibv_ah *ah_a, *ah_p;

	svt_watchdog(20);
	ch_p = rdma_create_event_channel();
	ch_a = rdma_create_event_channel();
	SVT_CHECK_PTR(ch_p);
	SVT_CHECK_PTR(ch_a);
	listener = cmt_listen(ch_p, RDMA_PS_UDP, "127.0.0.1", PORT);
	SVT_CHECK_EQ(listener->qp_type, IBV_QPT_UD);

	SVT_CHECK_CM(rdma_create_id(ch_a, &act.id, NULL, RDMA_PS_UDP));
	SVT_CHECK_EQ(act.id->qp_type, IBV_QPT_UD);
	cmt_resolve(act.id, ch_a, "127.0.0.1", PORT);
	make_qp(&act);

	svt_fill(req, sizeof(req), 180);
	struct rdma_conn_param cp = { .private_data = req, .private_data_len = SIDR_REQ_PDATA + 1 };

	SVT_CHECK_CM_ERRNO(rdma_connect(act.id, &cp), EINVAL);
	cp.private_data_len = SIDR_REQ_PDATA;
	SVT_CHECK_CM(rdma_connect(act.id, &cp));

	ev = cmt_expect(ch_p, RDMA_CM_EVENT_CONNECT_REQUEST);
	SVT_CHECK(ev->listen_id == listener);
	pas.id = ev->id;
	SVT_CHECK_PTR(pas.id);
	SVT_CHECK(pas.id != listener);
	SVT_CHECK_EQ(pas.id->ps, RDMA_PS_UDP);
	SVT_CHECK_EQ(ev->param.ud.qp_num, act.id->qp->qp_num);
	SVT_CHECK_EQ(ev->param.ud.private_data_len, SIDR_REQ_PDATA);
	SVT_CHECK_PTR(ev->param.ud.private_data);
	SVT_CHECK_MEM(ev->param.ud.private_data, req, SIDR_REQ_PDATA);
	SVT_CHECK_CM(rdma_ack_cm_event(ev));

	make_qp(&pas);
	svt_fill(rep, sizeof(rep), 136);
	struct rdma_conn_param ap = { .private_data = rep, .private_data_len = SIDR_REP_PDATA + 1 };

	SVT_CHECK_CM_ERRNO(rdma_accept(pas.id, &ap), EINVAL);
	ap.private_data_len = sizeof(rep);
	SVT_CHECK_CM(rdma_accept(pas.id, &ap));

	ev = cmt_expect(ch_a, RDMA_CM_EVENT_ESTABLISHED);
	SVT_CHECK(ev->id == act.id);
	SVT_CHECK_EQ(ev->param.ud.qp_num, pas.id->qp->qp_num);
	SVT_CHECK_EQ(ev->param.ud.qkey, RDMA_UDP_QKEY);
	SVT_CHECK_EQ(ev->param.ud.private_data_len, SIDR_REP_PDATA);
	SVT_CHECK_PTR(ev->param.ud.private_data);
	SVT_CHECK_MEM(ev->param.ud.private_data, rep, sizeof(rep));
	for (size_t i = sizeof(rep); i < SIDR_REP_PDATA; i++)
		SVT_CHECK_EQ(((const uint8_t *)ev->param.ud.private_data)[i], 0);
	ah_a = ibv_create_ah(act.id->pd, &ev->param.ud.ah_attr);
	SVT_CHECK_PTR(ah_a);
	remote_qpn = ev->param.ud.qp_num;
	remote_qkey = ev->param.ud.qkey;
	SVT_CHECK_CM(rdma_ack_cm_event(ev));
	/* SIDR has no third message: the passive side hears nothing more */
	cmt_expect_none(ch_p, 50);
	cmt_expect_none(ch_a, 20);
	SVT_CHECK_EQ(remote_qkey, RDMA_UDP_QKEY); /* what rdma_post_ud_send uses */

	/* active -> passive, through the AH from the event */
	struct ibv_wc wc = datagram(&act, &pas, ah_a, remote_qpn, 200, 1);

	/* passive -> active, through an AH made from what arrived */
	ah_p = ibv_create_ah_from_wc(pas.id->pd, &wc, (struct ibv_grh *)pas.buf, 1);
	SVT_CHECK_PTR(ah_p);
	datagram(&pas, &act, ah_p, wc.src_qp, 1000, 2);

	SVT_CHECK_OK(ibv_destroy_ah(ah_a));
	SVT_CHECK_OK(ibv_destroy_ah(ah_p));
	SVT_CHECK_CM(rdma_dereg_mr(act.mr));
	SVT_CHECK_CM(rdma_dereg_mr(pas.mr));
	rdma_destroy_qp(act.id);
	rdma_destroy_qp(pas.id);
	free(act.buf);
	free(pas.buf);
	SVT_CHECK_CM(rdma_destroy_id(act.id));
	SVT_CHECK_CM(rdma_destroy_id(pas.id));
	SVT_CHECK_CM(rdma_destroy_id(listener));
	rdma_destroy_event_channel(ch_a);
	rdma_destroy_event_channel(ch_p);
	svt_log("ok");
	return 0;
}
