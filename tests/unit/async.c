/*
 * unit_async: affiliated asynchronous events and the life of the object
 * they name, as ibv_get_async_event(3) describes and rdma-core does:
 *
 *   - an event not yet read when its QP is destroyed is dropped: the next
 *     ibv_get_async_event (non-blocking fd) finds nothing, instead of
 *     handing out a pointer to a freed QP (UCX reads events on a thread of
 *     its own and crashed on such a pointer);
 *   - ibv_destroy_qp waits until every event read for the QP has been
 *     acknowledged (ibv_ack_async_event), then returns;
 *   - events of other QPs are kept, in order.
 *
 * The event used is IBV_EVENT_SQ_DRAINED: raised synchronously when a QP
 * moves to SQD with en_sqd_async_notify set.
 */
#include "sv_test.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>

static void to_sqd_notify(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_SQD, .en_sqd_async_notify = 1 };

	SVT_CHECK_OK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY));
}

struct destroyer {
	struct ibv_qp *qp;
	atomic_bool done;
	int rc;
};

static void *destroy_thread(void *arg)
{
	struct destroyer *d = arg;

	d->rc = ibv_destroy_qp(d->qp);
	atomic_store(&d->done, true);
	return NULL;
}

int main(void)
{
	struct svt_pair p;
	struct ibv_async_event ev;
	struct ibv_qp *extra;
	struct destroyer d = { 0 };
	struct svt_qp_init qi;
	pthread_t t;
	int fd;

	svt_watchdog(30);
	svt_qp_init_default(&qi, IBV_QPT_RC);
	svt_pair_create(&p, IBV_QPT_RC, NULL);
	fd = p.a.ctx->async_fd;
	SVT_CHECK_OK(fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK));

	/* 1. unread event of a destroyed QP: dropped; another QP's event kept */
	extra = svt_create_qp(p.a.pd, p.a.send_cq, p.a.recv_cq, &qi);
	SVT_CHECK(extra != NULL);
	svt_qp_to_state(extra, IBV_QPS_INIT);
	to_sqd_notify(p.a.qp); /* event for the pair's QP, then... */
	{
		struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };

		SVT_CHECK_OK(ibv_modify_qp(extra, &a, IBV_QP_STATE));
	}
	SVT_CHECK_OK(ibv_destroy_qp(p.a.qp)); /* ...destroyed before it was read */
	p.a.qp = NULL;
	errno = 0;
	SVT_CHECK_EQ(ibv_get_async_event(p.a.ctx, &ev), -1);
	SVT_CHECK_EQ(errno, EAGAIN);

	/* 2. a read event holds off the destroy until it is acknowledged */
	to_sqd_notify(p.b.qp);
	SVT_CHECK_OK(svt_wait_async_event(p.b.ctx, 2000, &ev));
	SVT_CHECK_EQ(ev.event_type, IBV_EVENT_SQ_DRAINED);
	SVT_CHECK(ev.element.qp == p.b.qp);
	d.qp = p.b.qp;
	SVT_CHECK_OK(pthread_create(&t, NULL, destroy_thread, &d));
	svt_sleep_ms(200);
	SVT_CHECK(!atomic_load(&d.done)); /* still waiting for the ack */
	ibv_ack_async_event(&ev);
	for (int i = 0; i < 200 && !atomic_load(&d.done); i++)
		svt_sleep_ms(5);
	SVT_CHECK(atomic_load(&d.done));
	pthread_join(t, NULL);
	SVT_CHECK_OK(d.rc);
	p.b.qp = NULL;

	/* 3. several events, some for a QP destroyed meanwhile: the rest in order */
	struct ibv_qp *q[3];
	for (int i = 0; i < 3; i++) {
		q[i] = svt_create_qp(p.a.pd, p.a.send_cq, p.a.recv_cq, &qi);
		/* SQD needs RTS; the peer named is never sent to */
		svt_qp_connect(q[i], NULL, &p.b.gid, 0x11);
	}
	for (int i = 0; i < 3; i++)
		to_sqd_notify(q[i]);
	SVT_CHECK_OK(ibv_destroy_qp(q[1]));
	SVT_CHECK_OK(svt_wait_async_event(p.a.ctx, 2000, &ev));
	SVT_CHECK(ev.element.qp == q[0]);
	ibv_ack_async_event(&ev);
	SVT_CHECK_OK(svt_wait_async_event(p.a.ctx, 2000, &ev));
	SVT_CHECK(ev.element.qp == q[2]);
	ibv_ack_async_event(&ev);
	errno = 0;
	SVT_CHECK_EQ(ibv_get_async_event(p.a.ctx, &ev), -1);
	SVT_CHECK_EQ(errno, EAGAIN);
	SVT_CHECK_OK(ibv_destroy_qp(q[0]));
	SVT_CHECK_OK(ibv_destroy_qp(q[2]));

	SVT_CHECK_OK(ibv_destroy_qp(extra));
	svt_pair_destroy(&p);
	svt_log("unit_async: OK");
	return 0;
}
