/*
 * cm_reject: connections that do not happen (rdma_reject(3), rdma_listen(3)).
 *   - rdma_reject with private data: the active side gets REJECTED with
 *     status 28 (IBTA "consumer defined") and the private data, the whole
 *     148-byte REJ field zero-padded; its QP is in ERR; 149 bytes are refused
 *   - a passive id that was rejected cannot then be accepted
 *   - connecting to a port nobody listens on: REJECTED with status 8 (IBTA
 *     "invalid service ID") or UNREACHABLE, never a hang
 *   - a second listener on a port already listened on: EADDRINUSE (from
 *     rdma_bind_addr, or at the latest from rdma_listen)
 * Ports 20520-20529.
 */
#include "cm_test.h"

#define PORT_REJECT 20520
#define PORT_NOBODY 20521
#define PORT_INUSE 20522

#define REJ_PDATA 148

static void test_reject_with_pdata(void)
{
	struct rdma_event_channel *ch_p = rdma_create_event_channel();
	struct rdma_event_channel *ch_a = rdma_create_event_channel();
	struct rdma_cm_id *listener, *act, *child;
	struct rdma_cm_event *ev;
	uint8_t req[16], rej[REJ_PDATA + 1];

	SVT_CHECK_PTR(ch_p);
	SVT_CHECK_PTR(ch_a);
	listener = cmt_listen(ch_p, RDMA_PS_TCP, "127.0.0.1", PORT_REJECT);
	SVT_CHECK_CM(rdma_create_id(ch_a, &act, NULL, RDMA_PS_TCP));
	cmt_resolve(act, ch_a, "127.0.0.1", PORT_REJECT);
	SVT_CHECK_EQ(cmt_create_qp(act, IBV_QPT_RC, 4), IBV_QPS_INIT);

	svt_fill(req, sizeof(req), 7);
	struct rdma_conn_param cp = {
		.private_data = req,
		.private_data_len = sizeof(req),
		.responder_resources = 1,
		.initiator_depth = 1,
		.retry_count = 7,
		.rnr_retry_count = 7,
	};

	SVT_CHECK_CM(rdma_connect(act, &cp));
	ev = cmt_expect(ch_p, RDMA_CM_EVENT_CONNECT_REQUEST);
	child = ev->id;
	SVT_CHECK(ev->listen_id == listener);
	/* the REQ field is 56 bytes: what was sent, then zeros */
	SVT_CHECK_EQ(ev->param.conn.private_data_len, 56);
	SVT_CHECK_MEM(ev->param.conn.private_data, req, sizeof(req));
	for (int i = (int)sizeof(req); i < 56; i++)
		SVT_CHECK_EQ(((const uint8_t *)ev->param.conn.private_data)[i], 0);
	SVT_CHECK_CM(rdma_ack_cm_event(ev));

	/* 149 bytes do not fit in a REJ; the refusal leaves the request pending */
	svt_fill(rej, sizeof(rej), 28);
	SVT_CHECK_CM_ERRNO(rdma_reject(child, rej, REJ_PDATA + 1), EINVAL);
	cmt_expect_none(ch_a, 20);
	SVT_CHECK_CM(rdma_reject(child, rej, 100));
	/* rejected: no longer acceptable, nor rejectable again */
	SVT_CHECK_CM_ERRNO(rdma_accept(child, NULL), EINVAL);
	SVT_CHECK_CM_ERRNO(rdma_reject(child, NULL, 0), EINVAL);

	ev = cmt_get_event(ch_a, 0);
	SVT_CHECK_MSG(ev->event == RDMA_CM_EVENT_REJECTED, "got %s", rdma_event_str(ev->event));
	SVT_CHECK(ev->id == act);
	SVT_CHECK_EQ(ev->status, 28);
	SVT_CHECK_EQ(ev->param.conn.private_data_len, REJ_PDATA);
	SVT_CHECK_PTR(ev->param.conn.private_data);
	SVT_CHECK_MEM(ev->param.conn.private_data, rej, 100);
	for (int i = 100; i < REJ_PDATA; i++)
		SVT_CHECK_EQ(((const uint8_t *)ev->param.conn.private_data)[i], 0);
	SVT_CHECK_CM(rdma_ack_cm_event(ev));

	/* a rejected connection's QP is flushed, as librdmacm does on REJECTED */
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qia;

	SVT_CHECK_OK(ibv_query_qp(act->qp, &qa, IBV_QP_STATE, &qia));
	SVT_CHECK_EQ(qa.qp_state, IBV_QPS_ERR);
	/* and the id is not connected: nothing to disconnect */
	SVT_CHECK_CM_ERRNO(rdma_disconnect(act), EINVAL);

	cmt_expect_none(ch_p, 20);
	cmt_expect_none(ch_a, 20);
	rdma_destroy_qp(act);
	SVT_CHECK_CM(rdma_destroy_id(act));
	SVT_CHECK_CM(rdma_destroy_id(child));
	SVT_CHECK_CM(rdma_destroy_id(listener));
	rdma_destroy_event_channel(ch_a);
	rdma_destroy_event_channel(ch_p);
}

static void test_nobody_listens(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *act;
	struct rdma_cm_event *ev;

	SVT_CHECK_PTR(ch);
	SVT_CHECK_CM(rdma_create_id(ch, &act, NULL, RDMA_PS_TCP));
	cmt_resolve(act, ch, "127.0.0.1", PORT_NOBODY);
	/* no QP: the library has nothing to move, the events must still come */
	SVT_CHECK_CM(rdma_connect(act, NULL));
	ev = cmt_get_event(ch, 0);
	SVT_CHECK(ev->id == act);
	if (ev->event == RDMA_CM_EVENT_REJECTED)
		SVT_CHECK_EQ(ev->status, 8);
	else
		SVT_CHECK_MSG(ev->event == RDMA_CM_EVENT_UNREACHABLE, "got %s status %d",
			      rdma_event_str(ev->event), ev->status);
	SVT_CHECK_CM(rdma_ack_cm_event(ev));
	cmt_expect_none(ch, 50);
	SVT_CHECK_CM(rdma_destroy_id(act));
	rdma_destroy_event_channel(ch);
}

static void test_port_in_use(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *first, *second;
	struct sockaddr_in sin = cmt_sin("127.0.0.1", PORT_INUSE);

	SVT_CHECK_PTR(ch);
	first = cmt_listen(ch, RDMA_PS_TCP, "127.0.0.1", PORT_INUSE);
	SVT_CHECK_CM(rdma_create_id(ch, &second, NULL, RDMA_PS_TCP));
	/*
	 * The kernel CM refuses the bind; a CM built on sockets may only find
	 * out at listen(). Either way the second listener must not come up.
	 */
	errno = 0;
	if (rdma_bind_addr(second, (struct sockaddr *)&sin) == 0)
		SVT_CHECK_CM_ERRNO(rdma_listen(second, 1), EADDRINUSE);
	else
		SVT_CHECK_EQ(errno, EADDRINUSE);
	SVT_CHECK_CM(rdma_destroy_id(second));

	/* once the first listener is gone, the port can be listened on again */
	SVT_CHECK_CM(rdma_destroy_id(first));
	first = cmt_listen(ch, RDMA_PS_TCP, "127.0.0.1", PORT_INUSE);
	SVT_CHECK_CM(rdma_destroy_id(first));
	rdma_destroy_event_channel(ch);
}

int main(void)
{
	svt_watchdog(20);
	test_reject_with_pdata();
	test_nobody_listens();
	test_port_in_use();
	svt_log("ok");
	return 0;
}
