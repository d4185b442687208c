/*
 * cm_peer_death: the peer of an established connection is killed with
 * SIGKILL, so it never sends a DREQ. The survivor must still learn of it
 * from the CM and get RDMA_CM_EVENT_DISCONNECTED within a few seconds, be
 * able to rdma_disconnect, and see its outstanding receive flushed.
 *   - the child is the active side (the survivor is the passive side)
 *   - the child is the passive side (the survivor is the active side)
 * The child is a fresh process (svt_spawn: fork+exec) with its own device.
 * Ports 20540-20541.
 */
#include "cm_test.h"

#include <rdma/rdma_verbs.h>
#include <signal.h>

#define PORT_CHILD_ACTIVE 20540
#define PORT_CHILD_PASSIVE 20541
/* what the survivor allows itself to notice the death */
#define NOTICE_MS 3000

/* Accept the next request on the listener's channel; returns the connected id. */
static struct rdma_cm_id *accept_one(struct rdma_event_channel *ch)
{
	struct rdma_cm_event *ev = cmt_expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
	struct rdma_cm_id *id = ev->id;

	SVT_CHECK_CM(rdma_ack_cm_event(ev));
	SVT_CHECK_EQ(cmt_create_qp(id, IBV_QPT_RC, 4), IBV_QPS_INIT);
	SVT_CHECK_CM(rdma_accept(id, NULL));
	ev = cmt_expect(ch, RDMA_CM_EVENT_ESTABLISHED);
	SVT_CHECK(ev->id == id);
	SVT_CHECK_CM(rdma_ack_cm_event(ev));
	return id;
}

static struct rdma_cm_id *connect_to(struct rdma_event_channel *ch, uint16_t port)
{
	struct rdma_cm_id *id;
	struct rdma_cm_event *ev;

	SVT_CHECK_CM(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP));
	cmt_resolve(id, ch, "127.0.0.1", port);
	SVT_CHECK_EQ(cmt_create_qp(id, IBV_QPT_RC, 4), IBV_QPS_INIT);
	SVT_CHECK_CM(rdma_connect(id, NULL));
	ev = cmt_expect(ch, RDMA_CM_EVENT_ESTABLISHED);
	SVT_CHECK(ev->id == id);
	SVT_CHECK_CM(rdma_ack_cm_event(ev));
	return id;
}

/* Child roles: connect (or accept), tell the parent, then wait to be killed. */
static int child_active(int rfd, int wfd, int argc, char **argv)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();

	(void)argc;
	(void)argv;
	SVT_CHECK_PTR(ch);
	connect_to(ch, PORT_CHILD_ACTIVE);
	svt_sync_send(wfd, 'E');
	/* the parent kills us; EOF or a timeout here means it is gone: give up */
	svt_sync_recv(rfd, 20000);
	return 1;
}

static int child_passive(int rfd, int wfd, int argc, char **argv)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();

	(void)argc;
	(void)argv;
	SVT_CHECK_PTR(ch);
	cmt_listen(ch, RDMA_PS_TCP, "127.0.0.1", PORT_CHILD_PASSIVE);
	svt_sync_send(wfd, 'L');
	accept_one(ch);
	svt_sync_send(wfd, 'E');
	svt_sync_recv(rfd, 20000);
	return 1;
}

/* The child is established with `id`: kill it and watch `id` notice. */
static void kill_and_observe(struct svt_child *c, struct rdma_event_channel *ch,
			     struct rdma_cm_id *id)
{
	struct ibv_wc wc;
	char *buf = svt_alloc(4096);
	struct ibv_mr *mr = rdma_reg_msgs(id, buf, 4096);

	SVT_CHECK_PTR(mr);
	SVT_CHECK_CM(rdma_post_recv(id, (void *)77, buf, 4096, mr));
	cmt_expect_none(ch, 20);

	svt_child_kill(c, SIGKILL);
	uint64_t t0 = svt_now_ms();
	struct rdma_cm_event *ev = cmt_get_event(ch, NOTICE_MS);
	uint64_t took = svt_now_ms() - t0;

	SVT_CHECK_MSG(ev->event == RDMA_CM_EVENT_DISCONNECTED, "got %s status %d",
		      rdma_event_str(ev->event), ev->status);
	SVT_CHECK(ev->id == id);
	SVT_CHECK_CM(rdma_ack_cm_event(ev));
	svt_log("DISCONNECTED %llu ms after SIGKILL", (unsigned long long)took);
	SVT_CHECK_EQ(svt_child_wait(c, 0), 128 + SIGKILL);

	/* the usual answer to DISCONNECTED: it succeeds and flushes the QP */
	SVT_CHECK_CM(rdma_disconnect(id));
	SVT_CHECK_EQ(rdma_get_recv_comp(id, &wc), 1);
	SVT_CHECK_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
	SVT_CHECK_EQ(wc.wr_id, 77);
	cmt_drain_timewait(ch);

	SVT_CHECK_CM(rdma_dereg_mr(mr));
	rdma_destroy_qp(id);
	SVT_CHECK_CM(rdma_destroy_id(id));
	free(buf);
}

static void test_active_dies(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *listener;
	struct svt_child c;

	SVT_CHECK_PTR(ch);
	listener = cmt_listen(ch, RDMA_PS_TCP, "127.0.0.1", PORT_CHILD_ACTIVE);
	svt_spawn(&c, "active", NULL);
	struct rdma_cm_id *id = accept_one(ch);

	SVT_CHECK_EQ(svt_sync_recv(c.rfd, 0), 'E');
	kill_and_observe(&c, ch, id);
	SVT_CHECK_CM(rdma_destroy_id(listener));
	rdma_destroy_event_channel(ch);
}

static void test_passive_dies(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct svt_child c;

	SVT_CHECK_PTR(ch);
	svt_spawn(&c, "passive", NULL);
	SVT_CHECK_EQ(svt_sync_recv(c.rfd, 0), 'L');
	struct rdma_cm_id *id = connect_to(ch, PORT_CHILD_PASSIVE);

	SVT_CHECK_EQ(svt_sync_recv(c.rfd, 0), 'E');
	kill_and_observe(&c, ch, id);
	rdma_destroy_event_channel(ch);
}

int main(int argc, char **argv)
{
	static const struct svt_child_role roles[] = {
		{ "active", child_active },
		{ "passive", child_passive },
		{ NULL, NULL },
	};

	svt_child_dispatch(argc, argv, roles);
	svt_watchdog(20);
	test_active_dies();
	test_passive_dies();
	svt_log("ok");
	return 0;
}
