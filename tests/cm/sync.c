/*
 * cm_sync: synchronous ids (no event channel) and endpoints, the way
 * rdma_server/rdma_client use them (rdma_create_ep(3), rdma_get_request(3)):
 * each call waits for its own event and returns 0 or -1/errno.
 *   - server thread: rdma_getaddrinfo(RAI_PASSIVE) + rdma_create_ep with
 *     qp_init_attr + rdma_listen + rdma_get_request (the new id already has
 *     its QP, and its CONNECT_REQUEST in id->event) + rdma_accept
 *   - client thread: rdma_getaddrinfo + rdma_create_ep (QP made, route
 *     resolved) + rdma_connect, which returns once established
 *   - one message each way with the rdma_verbs.h helpers, rdma_disconnect,
 *     rdma_destroy_ep
 *   - rdma_get_request on an id that does not listen: EINVAL
 * Port 20530.
 */
#include "cm_test.h"

#include <pthread.h>
#include <rdma/rdma_verbs.h>

#define PORT "20530"
#define MSG 256

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static bool listening;

static void init_attr(struct ibv_qp_init_attr *attr)
{
	memset(attr, 0, sizeof(*attr));
	attr->cap.max_send_wr = attr->cap.max_recv_wr = 4;
	attr->cap.max_send_sge = attr->cap.max_recv_sge = 1;
	attr->cap.max_inline_data = 16;
	attr->sq_sig_all = 1;
}

/* Receive one MSG-byte message of pattern seed on id (recv already posted). */
static void check_recv(struct rdma_cm_id *id, const void *buf, uint32_t seed)
{
	cmt_recv_comp(id, 0, MSG);
	SVT_CHECK_FILL(buf, MSG, seed);
}

static void send_msg(struct rdma_cm_id *id, void *buf, struct ibv_mr *mr, uint32_t seed)
{
	svt_fill(buf, MSG, seed);
	/* no IBV_SEND_SIGNALED: sq_sig_all from the endpoint's attributes */
	SVT_CHECK_CM(rdma_post_send(id, NULL, buf, MSG, mr, 0));
	cmt_send_comp(id, IBV_WC_SEND, 0);
}

static void *server(void *arg)
{
	struct rdma_addrinfo hints = { .ai_flags = RAI_PASSIVE, .ai_port_space = RDMA_PS_TCP };
	struct rdma_addrinfo *res;
	struct rdma_cm_id *listen_id, *id;
	struct ibv_qp_init_attr attr;
	char *buf = svt_alloc(2 * MSG);
	struct ibv_mr *mr;

	(void)arg;
	SVT_CHECK_CM(rdma_getaddrinfo("127.0.0.1", PORT, &hints, &res));
	SVT_CHECK(res->ai_flags & RAI_PASSIVE);
	SVT_CHECK_PTR(res->ai_src_addr);
	SVT_CHECK_EQ(res->ai_port_space, RDMA_PS_TCP);
	init_attr(&attr);
	SVT_CHECK_CM(rdma_create_ep(&listen_id, res, NULL, &attr));
	rdma_freeaddrinfo(res);
	SVT_CHECK(listen_id->qp == NULL); /* a listener has no QP of its own */
	SVT_CHECK_PTR(listen_id->channel);   /* a private one: the id is synchronous */
	/* not listening yet: nothing to get a request from */
	SVT_CHECK_CM_ERRNO(rdma_get_request(listen_id, &id), EINVAL);
	SVT_CHECK_CM(rdma_listen(listen_id, 2));

	pthread_mutex_lock(&lock);
	listening = true;
	pthread_cond_signal(&cond);
	pthread_mutex_unlock(&lock);

	SVT_CHECK_CM(rdma_get_request(listen_id, &id));
	SVT_CHECK(id != listen_id);
	SVT_CHECK_PTR(id->qp); /* made from the endpoint's qp_init_attr */
	SVT_CHECK_EQ(id->qp->qp_type, IBV_QPT_RC);
	SVT_CHECK_PTR(id->event);
	SVT_CHECK_EQ(id->event->event, RDMA_CM_EVENT_CONNECT_REQUEST);
	SVT_CHECK(id->event->listen_id == listen_id);

	mr = rdma_reg_msgs(id, buf, 2 * MSG);
	SVT_CHECK_PTR(mr);
	SVT_CHECK_CM(rdma_post_recv(id, NULL, buf + MSG, MSG, mr));
	/* returns once the client's RTU is in */
	SVT_CHECK_CM(rdma_accept(id, NULL));

	check_recv(id, buf + MSG, 1);
	send_msg(id, buf, mr, 2);

	/* whoever disconnects first, the other's rdma_disconnect succeeds too */
	SVT_CHECK_CM(rdma_disconnect(id));
	SVT_CHECK_CM(rdma_dereg_mr(mr));
	rdma_destroy_ep(id);
	rdma_destroy_ep(listen_id);
	free(buf);
	return NULL;
}

static void *client(void *arg)
{
	struct rdma_addrinfo hints = { .ai_port_space = RDMA_PS_TCP };
	struct rdma_addrinfo *res;
	struct rdma_cm_id *id;
	struct ibv_qp_init_attr attr;
	char *buf = svt_alloc(2 * MSG);
	struct ibv_mr *mr;

	(void)arg;
	pthread_mutex_lock(&lock);
	while (!listening)
		pthread_cond_wait(&cond, &lock);
	pthread_mutex_unlock(&lock);

	SVT_CHECK_CM(rdma_getaddrinfo("127.0.0.1", PORT, &hints, &res));
	SVT_CHECK_PTR(res->ai_dst_addr);
	SVT_CHECK_EQ(res->ai_qp_type, IBV_QPT_RC);
	init_attr(&attr);
	SVT_CHECK_CM(rdma_create_ep(&id, res, NULL, &attr));
	rdma_freeaddrinfo(res);
	/* the endpoint is route-resolved and has its QP, PD and CQs */
	SVT_CHECK_PTR(id->qp);
	SVT_CHECK_PTR(id->pd);
	SVT_CHECK_PTR(id->verbs);
	SVT_CHECK_EQ(id->route.num_paths, 1);
	SVT_CHECK_EQ(rdma_get_dst_port(id), htons(20530));

	mr = rdma_reg_msgs(id, buf, 2 * MSG);
	SVT_CHECK_PTR(mr);
	SVT_CHECK_CM(rdma_post_recv(id, NULL, buf + MSG, MSG, mr));
	SVT_CHECK_CM(rdma_connect(id, NULL));
	/* connected means the QP is ready to send */
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qia;

	SVT_CHECK_OK(ibv_query_qp(id->qp, &qa, IBV_QP_STATE, &qia));
	SVT_CHECK_EQ(qa.qp_state, IBV_QPS_RTS);

	send_msg(id, buf, mr, 1);
	check_recv(id, buf + MSG, 2);

	SVT_CHECK_CM(rdma_disconnect(id));
	SVT_CHECK_CM(rdma_dereg_mr(mr));
	rdma_destroy_ep(id);
	free(buf);
	return NULL;
}

int main(void)
{
	pthread_t ts, tc;

	svt_watchdog(20);
	SVT_CHECK_EQ(pthread_create(&ts, NULL, server, NULL), 0);
	SVT_CHECK_EQ(pthread_create(&tc, NULL, client, NULL), 0);
	SVT_CHECK_EQ(pthread_join(tc, NULL), 0);
	SVT_CHECK_EQ(pthread_join(ts, NULL), 0);
	svt_log("ok");
	return 0;
}
