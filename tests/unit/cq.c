/*
 * unit_cq: completion queues and completion channels.
 *   - create limits (cqe > max_cqe: EINVAL), resize keeping completions,
 *     destroy (EBUSY while a QP uses it)
 *   - completion channel: events only when armed, one event per arm,
 *     poll()/select()/epoll on channel->fd, blocking get_cq_event,
 *     O_NONBLOCK (EAGAIN), solicited_only, several CQs on one channel,
 *     destroy_comp_channel while CQs use it: EBUSY
 */
#include "sv_test.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <unistd.h>

/* Is fd readable within ms? */
static bool readable(int fd, int ms)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };

	return poll(&pfd, 1, ms) == 1 && (pfd.revents & POLLIN);
}

/* a -> b SEND of len bytes (b posts the receive), a's send completion polled. */
static void send_ab(struct svt_side *a, struct svt_side *b, unsigned int flags,
		    uint64_t id)
{
	struct ibv_wc wc;

	SVT_CHECK_OK(svt_post_recv(b->qp, id, b->buf, 4096, b->mr->lkey));
	SVT_CHECK_OK(svt_post_send(a->qp, id, IBV_WR_SEND,
				   IBV_SEND_SIGNALED | flags, a->buf, 64,
				   a->mr->lkey, 0, 0, 0));
	svt_poll_ok(a->send_cq, 1, &wc, 0);
	SVT_CHECK_EQ(wc.wr_id, id);
}

static void test_create_limits(void)
{
	struct svt_dev d;
	int marker;

	svt_dev_open(&d);
	struct ibv_comp_channel *ch = ibv_create_comp_channel(d.ctx);

	SVT_CHECK_PTR(ch);
	SVT_CHECK_GE(ch->fd, 0);
	SVT_CHECK(ch->context == d.ctx);

	struct ibv_cq *cq = ibv_create_cq(d.ctx, 1, &marker, ch, 0);

	SVT_CHECK_PTR(cq);
	SVT_CHECK_GE(cq->cqe, 1);
	SVT_CHECK(cq->context == d.ctx);
	SVT_CHECK(cq->cq_context == &marker);
	SVT_CHECK(cq->channel == ch);

	SVT_CHECK_NULL_ERRNO(ibv_create_cq(d.ctx, d.dev_attr.max_cqe + 1, NULL,
					   NULL, 0),
			     EINVAL);
	SVT_CHECK_NULL(ibv_create_cq(d.ctx, -1, NULL, NULL, 0));
	SVT_CHECK_NULL_ERRNO(ibv_create_cq(d.ctx, 4, NULL, NULL,
					   d.ctx->num_comp_vectors),
			     EINVAL);

	/* Resize: grows to at least the request; too large is EINVAL. */
	SVT_CHECK_OK(ibv_resize_cq(cq, 300));
	SVT_CHECK_GE(cq->cqe, 300);
	SVT_CHECK_RC(ibv_resize_cq(cq, d.dev_attr.max_cqe + 1), EINVAL);
	SVT_CHECK_GE(cq->cqe, 300);

	/* A channel with a CQ on it cannot be destroyed. */
	SVT_CHECK_RC(ibv_destroy_comp_channel(ch), EBUSY);
	SVT_CHECK_OK(ibv_destroy_cq(cq));
	SVT_CHECK_OK(ibv_destroy_comp_channel(ch));
	svt_dev_close(&d);
}

static void test_resize_keeps_completions(void)
{
	struct svt_pair_opts o;
	struct svt_pair p;
	struct ibv_wc wc[8];

	svt_pair_opts_default(&o, IBV_QPT_RC);
	o.cqe = 16;
	svt_pair_create(&p, IBV_QPT_RC, &o);
	for (int i = 0; i < 10; i++)
		SVT_CHECK_OK(svt_post_send(p.a.qp, (uint64_t)i, IBV_WR_RDMA_WRITE,
					   IBV_SEND_SIGNALED, p.a.buf, 128,
					   p.a.mr->lkey,
					   (uintptr_t)p.b.buf + 128u * (unsigned)i,
					   p.b.mr->rkey, 0));
	svt_poll_ok(p.a.send_cq, 4, wc, 0);
	SVT_CHECK_OK(ibv_resize_cq(p.a.send_cq, 1024));
	SVT_CHECK_GE(p.a.send_cq->cqe, 1024);
	svt_poll_ok(p.a.send_cq, 6, wc, 0);
	for (int i = 0; i < 6; i++)
		SVT_CHECK_EQ(wc[i].wr_id, 4 + i); /* in order, none lost */
	svt_expect_no_wc(p.a.send_cq, 20);

	/* Still in use by the QP. */
	SVT_CHECK_RC(ibv_destroy_cq(p.a.send_cq), EBUSY);
	svt_pair_destroy(&p);
}

static void create_channel_pair(struct svt_pair *p)
{
	struct svt_pair_opts o;

	svt_pair_opts_default(&o, IBV_QPT_RC);
	o.comp_channel = true;
	o.separate_cqs = true;
	svt_pair_create(p, IBV_QPT_RC, &o);
}

/* Get one event for want_cq from ch, ack it. */
static void expect_event(struct ibv_comp_channel *ch, struct ibv_cq *want_cq)
{
	struct ibv_cq *cq = NULL;
	void *ctx = (void *)1;

	SVT_CHECK_OK(svt_wait_cq_event(ch, 0, &cq, &ctx));
	SVT_CHECK(cq == want_cq);
	SVT_CHECK(ctx == want_cq->cq_context);
	ibv_ack_cq_events(cq, 1);
}

static void test_arming(struct svt_pair *p)
{
	struct ibv_wc wc[2];
	int fd = p->b.channel->fd;

	/* Not armed: the completion arrives, no event does. */
	send_ab(&p->a, &p->b, 0, 1);
	svt_poll_ok(p->b.recv_cq, 1, wc, 0);
	SVT_CHECK_MSG(!readable(fd, 100), "event without ibv_req_notify_cq");

	/* Armed: poll() wakes up; the event names the CQ. */
	SVT_CHECK_OK(ibv_req_notify_cq(p->b.recv_cq, 0));
	send_ab(&p->a, &p->b, 0, 2);
	SVT_CHECK(readable(fd, SVT_TIMEOUT_MS));
	expect_event(p->b.channel, p->b.recv_cq);
	svt_poll_ok(p->b.recv_cq, 1, wc, 0);
	SVT_CHECK_EQ(wc[0].wr_id, 2);

	/* One shot: two completions after one arm give one event. */
	SVT_CHECK_OK(ibv_req_notify_cq(p->b.recv_cq, 0));
	send_ab(&p->a, &p->b, 0, 3);
	send_ab(&p->a, &p->b, 0, 4);
	svt_poll_ok(p->b.recv_cq, 2, wc, 0);
	expect_event(p->b.channel, p->b.recv_cq);
	SVT_CHECK_MSG(!readable(fd, 100), "second event for one arm");
}

static void test_select_epoll(struct svt_pair *p)
{
	struct ibv_wc wc;
	int fd = p->b.channel->fd;

	/* select() */
	SVT_CHECK_OK(ibv_req_notify_cq(p->b.recv_cq, 0));
	send_ab(&p->a, &p->b, 0, 10);
	fd_set rfds;
	struct timeval tv = { .tv_sec = SVT_TIMEOUT_MS / 1000 };

	FD_ZERO(&rfds);
	FD_SET(fd, &rfds);
	SVT_CHECK_EQ(select(fd + 1, &rfds, NULL, NULL, &tv), 1);
	SVT_CHECK(FD_ISSET(fd, &rfds));
	expect_event(p->b.channel, p->b.recv_cq);
	svt_poll_ok(p->b.recv_cq, 1, &wc, 0);

	/* epoll */
	int ep = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event ev = { .events = EPOLLIN, .data.u32 = 77 }, out;

	SVT_CHECK_GE(ep, 0);
	SVT_CHECK_EQ(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev), 0);
	SVT_CHECK_EQ(epoll_wait(ep, &out, 1, 50), 0); /* nothing pending */
	SVT_CHECK_OK(ibv_req_notify_cq(p->b.recv_cq, 0));
	send_ab(&p->a, &p->b, 0, 11);
	SVT_CHECK_EQ(epoll_wait(ep, &out, 1, SVT_TIMEOUT_MS), 1);
	SVT_CHECK_EQ(out.data.u32, 77);
	SVT_CHECK(out.events & EPOLLIN);
	expect_event(p->b.channel, p->b.recv_cq);
	svt_poll_ok(p->b.recv_cq, 1, &wc, 0);
	SVT_CHECK_EQ(epoll_wait(ep, &out, 1, 50), 0); /* consumed */
	close(ep);
}

static void test_solicited(struct svt_pair *p)
{
	struct ibv_wc wc;
	int fd = p->b.channel->fd;

	SVT_CHECK_OK(ibv_req_notify_cq(p->b.recv_cq, 1));
	/* Unsolicited SEND: completion, no event. */
	send_ab(&p->a, &p->b, 0, 20);
	svt_poll_ok(p->b.recv_cq, 1, &wc, 0);
	SVT_CHECK_EQ(wc.wr_id, 20);
	SVT_CHECK_MSG(!readable(fd, 150),
		      "solicited_only CQ got an event for an unsolicited SEND");
	/* Solicited SEND: event. */
	send_ab(&p->a, &p->b, IBV_SEND_SOLICITED, 21);
	SVT_CHECK(readable(fd, SVT_TIMEOUT_MS));
	expect_event(p->b.channel, p->b.recv_cq);
	svt_poll_ok(p->b.recv_cq, 1, &wc, 0);
	SVT_CHECK_EQ(wc.wr_id, 21);

	/* Send completions are never solicited. */
	SVT_CHECK_OK(ibv_req_notify_cq(p->a.send_cq, 1));
	send_ab(&p->a, &p->b, IBV_SEND_SOLICITED, 22);
	svt_poll_ok(p->b.recv_cq, 1, &wc, 0);
	SVT_CHECK_MSG(!readable(p->a.channel->fd, 150),
		      "solicited_only send CQ got an event for a send");
	/* a.send_cq stays armed (solicited only); the remaining tests only
	 * wait on b's channel. */
}

static void test_nonblocking(struct svt_pair *p)
{
	struct ibv_cq *cq;
	void *ctx;
	struct ibv_wc wc;
	int fd = p->b.channel->fd;
	int fl = fcntl(fd, F_GETFL);

	SVT_CHECK_GE(fl, 0);
	SVT_CHECK_EQ(fcntl(fd, F_SETFL, fl | O_NONBLOCK), 0);
	errno = 0;
	SVT_CHECK_EQ(ibv_get_cq_event(p->b.channel, &cq, &ctx), -1);
	SVT_CHECK_EQ(errno, EAGAIN);

	SVT_CHECK_OK(ibv_req_notify_cq(p->b.recv_cq, 0));
	send_ab(&p->a, &p->b, 0, 30);
	SVT_CHECK(readable(fd, SVT_TIMEOUT_MS));
	SVT_CHECK_EQ(ibv_get_cq_event(p->b.channel, &cq, &ctx), 0);
	SVT_CHECK(cq == p->b.recv_cq);
	ibv_ack_cq_events(cq, 1);
	svt_poll_ok(p->b.recv_cq, 1, &wc, 0);
	errno = 0;
	SVT_CHECK_EQ(ibv_get_cq_event(p->b.channel, &cq, &ctx), -1);
	SVT_CHECK_EQ(errno, EAGAIN);
	SVT_CHECK_EQ(fcntl(fd, F_SETFL, fl), 0);
}

struct blocker {
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq;
	atomic_int done;
	int rc;
};

static void *block_get_event(void *arg)
{
	struct blocker *b = arg;
	void *ctx;

	b->rc = ibv_get_cq_event(b->ch, &b->cq, &ctx);
	atomic_store(&b->done, 1);
	return NULL;
}

static void test_blocking(struct svt_pair *p)
{
	struct blocker bl = { .ch = p->b.channel };
	pthread_t th;
	struct ibv_wc wc;

	atomic_init(&bl.done, 0);
	SVT_CHECK_OK(ibv_req_notify_cq(p->b.recv_cq, 0));
	SVT_CHECK_EQ(pthread_create(&th, NULL, block_get_event, &bl), 0);
	svt_sleep_ms(100);
	SVT_CHECK_MSG(!atomic_load(&bl.done),
		      "ibv_get_cq_event returned with no event (rc %d)", bl.rc);
	send_ab(&p->a, &p->b, 0, 40);
	uint64_t deadline = svt_now_ms() + SVT_TIMEOUT_MS;

	while (!atomic_load(&bl.done) && svt_now_ms() < deadline)
		svt_sleep_ms(1);
	SVT_CHECK_MSG(atomic_load(&bl.done),
		      "blocked ibv_get_cq_event did not wake up");
	SVT_CHECK_EQ(pthread_join(th, NULL), 0);
	SVT_CHECK_EQ(bl.rc, 0);
	SVT_CHECK(bl.cq == p->b.recv_cq);
	ibv_ack_cq_events(bl.cq, 1);
	svt_poll_ok(p->b.recv_cq, 1, &wc, 0);
}

static void test_two_cqs_one_channel(struct svt_pair *p)
{
	struct ibv_wc wc;
	bool got_send = false, got_recv = false;

	/* b receives from a (recv_cq) and sends to a (send_cq). */
	SVT_CHECK_OK(ibv_req_notify_cq(p->b.recv_cq, 0));
	SVT_CHECK_OK(ibv_req_notify_cq(p->b.send_cq, 0));
	send_ab(&p->a, &p->b, 0, 50);
	SVT_CHECK_OK(svt_post_recv(p->a.qp, 51, p->a.buf, 4096, p->a.mr->lkey));
	SVT_CHECK_OK(svt_post_send(p->b.qp, 51, IBV_WR_SEND, IBV_SEND_SIGNALED,
				   p->b.buf, 64, p->b.mr->lkey, 0, 0, 0));
	for (int i = 0; i < 2; i++) {
		struct ibv_cq *cq;
		void *ctx;

		SVT_CHECK_OK(svt_wait_cq_event(p->b.channel, 0, &cq, &ctx));
		if (cq == p->b.recv_cq) {
			SVT_CHECK(!got_recv);
			got_recv = true;
		} else {
			SVT_CHECK(cq == p->b.send_cq);
			SVT_CHECK(!got_send);
			got_send = true;
		}
		ibv_ack_cq_events(cq, 1);
	}
	svt_poll_ok(p->b.recv_cq, 1, &wc, 0);
	svt_poll_ok(p->b.send_cq, 1, &wc, 0);
	svt_poll_ok(p->a.recv_cq, 1, &wc, 0);
	SVT_CHECK_MSG(!readable(p->b.channel->fd, 50), "extra event");

	/* Channel in use: EBUSY. */
	SVT_CHECK_RC(ibv_destroy_comp_channel(p->b.channel), EBUSY);
}

int main(void)
{
	struct svt_pair p;

	svt_watchdog(50);
	test_create_limits();
	test_resize_keeps_completions();

	create_channel_pair(&p);
	test_arming(&p);
	test_select_epoll(&p);
	test_solicited(&p);
	test_nonblocking(&p);
	test_blocking(&p);
	test_two_cqs_one_channel(&p);
	svt_pair_destroy(&p); /* would hang on an unacked event */
	return 0;
}
