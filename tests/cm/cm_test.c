/*
 * cm_test.c - helpers for the rdma_cm tests (see cm_test.h).
 */
#include "cm_test.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <rdma/rdma_verbs.h>

struct sockaddr_in cmt_sin(const char *ip, uint16_t port)
{
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(port) };

	if (inet_pton(AF_INET, ip, &sin.sin_addr) != 1)
		SVT_FAIL("bad IPv4 address %s", ip);
	return sin;
}

struct sockaddr_storage cmt_sa(const char *ip, uint16_t port)
{
	struct addrinfo h = { .ai_flags = AI_NUMERICHOST, .ai_socktype = SOCK_STREAM }, *ai;
	struct sockaddr_storage ss;
	int r = getaddrinfo(ip, NULL, &h, &ai);

	if (r)
		SVT_FAIL("bad address %s: %s", ip, gai_strerror(r));
	memset(&ss, 0, sizeof(ss));
	memcpy(&ss, ai->ai_addr, ai->ai_addrlen);
	freeaddrinfo(ai);
	/* sin_port and sin6_port are at the same place */
	((struct sockaddr_in *)&ss)->sin_port = htons(port);
	return ss;
}

struct rdma_cm_event *cmt_get_event_at(const char *file, int line, struct rdma_event_channel *ch,
				       int timeout_ms)
{
	uint64_t deadline = svt_now_ms() + (uint64_t)(timeout_ms > 0 ? timeout_ms : SVT_TIMEOUT_MS);
	struct rdma_cm_event *ev;

	/*
	 * Wait with poll() on the channel's fd rather than a blocking
	 * rdma_get_cm_event: it bounds the wait, and it also checks that the fd
	 * becomes readable when an event is queued, which event loops rely on.
	 */
	for (;;) {
		uint64_t now = svt_now_ms();
		struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };

		if (now >= deadline)
			svt_fail_at(file, line, "no rdma_cm event within %d ms",
				    timeout_ms > 0 ? timeout_ms : SVT_TIMEOUT_MS);
		int n = poll(&pfd, 1, (int)(deadline - now));

		if (n < 0 && errno != EINTR)
			svt_fail_at(file, line, "poll on the event channel: %s", strerror(errno));
		if (n > 0)
			break;
	}
	if (rdma_get_cm_event(ch, &ev))
		svt_fail_at(file, line, "channel fd readable but rdma_get_cm_event failed: %s",
			    strerror(errno));
	return ev;
}

struct rdma_cm_event *cmt_expect_at(const char *file, int line, struct rdma_event_channel *ch,
				    enum rdma_cm_event_type type)
{
	struct rdma_cm_event *ev = cmt_get_event_at(file, line, ch, 0);

	if (ev->event != type || ev->status != 0)
		svt_fail_at(file, line, "expected %s, got %s status %d", rdma_event_str(type),
			    rdma_event_str(ev->event), ev->status);
	return ev;
}

void cmt_expect_none_at(const char *file, int line, struct rdma_event_channel *ch, int ms)
{
	struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
	int n = poll(&pfd, 1, ms);

	if (n < 0)
		svt_fail_at(file, line, "poll: %s", strerror(errno));
	if (n > 0) {
		struct rdma_cm_event *ev;

		if (rdma_get_cm_event(ch, &ev))
			svt_fail_at(file, line, "unexpected readable channel, no event: %s",
				    strerror(errno));
		svt_fail_at(file, line, "unexpected event %s status %d", rdma_event_str(ev->event),
			    ev->status);
	}
}

void cmt_drain_timewait(struct rdma_event_channel *ch)
{
	struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
	struct rdma_cm_event *ev;

	while (poll(&pfd, 1, 50) > 0) {
		if (rdma_get_cm_event(ch, &ev))
			SVT_FAIL("rdma_get_cm_event: %s", strerror(errno));
		if (ev->event != RDMA_CM_EVENT_TIMEWAIT_EXIT)
			SVT_FAIL("unexpected event %s", rdma_event_str(ev->event));
		rdma_ack_cm_event(ev);
	}
}

void cmt_resolve_at(const char *file, int line, struct rdma_cm_id *id,
		    struct rdma_event_channel *ch, const char *ip, uint16_t port)
{
	struct sockaddr_storage dst = cmt_sa(ip, port);
	struct rdma_cm_event *ev;

	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000))
		svt_fail_at(file, line, "rdma_resolve_addr %s:%u: %s", ip, port, strerror(errno));
	ev = cmt_expect_at(file, line, ch, RDMA_CM_EVENT_ADDR_RESOLVED);
	if (ev->id != id)
		svt_fail_at(file, line, "ADDR_RESOLVED for another id");
	rdma_ack_cm_event(ev);
	if (rdma_resolve_route(id, 2000))
		svt_fail_at(file, line, "rdma_resolve_route: %s", strerror(errno));
	ev = cmt_expect_at(file, line, ch, RDMA_CM_EVENT_ROUTE_RESOLVED);
	if (ev->id != id)
		svt_fail_at(file, line, "ROUTE_RESOLVED for another id");
	rdma_ack_cm_event(ev);
}

struct rdma_cm_id *cmt_listen_at(const char *file, int line, struct rdma_event_channel *ch,
				 enum rdma_port_space ps, const char *ip, uint16_t port)
{
	struct sockaddr_storage sin = cmt_sa(ip, port);
	struct rdma_cm_id *id;

	if (rdma_create_id(ch, &id, NULL, ps))
		svt_fail_at(file, line, "rdma_create_id: %s", strerror(errno));
	if (rdma_bind_addr(id, (struct sockaddr *)&sin))
		svt_fail_at(file, line, "rdma_bind_addr %s:%u: %s", ip, port, strerror(errno));
	if (rdma_listen(id, 8))
		svt_fail_at(file, line, "rdma_listen %s:%u: %s", ip, port, strerror(errno));
	return id;
}

enum ibv_qp_state cmt_create_qp_at(const char *file, int line, struct rdma_cm_id *id,
				   enum ibv_qp_type type, uint32_t depth)
{
	struct ibv_qp_init_attr attr = {
		.cap = { .max_send_wr = depth, .max_recv_wr = depth, .max_send_sge = 1,
			 .max_recv_sge = 1 },
		.qp_type = type,
	};
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qia;

	if (rdma_create_qp(id, NULL, &attr))
		svt_fail_at(file, line, "rdma_create_qp: %s", strerror(errno));
	if (!id->qp || !id->pd || id->pd->context != id->verbs || id->qp->pd != id->pd)
		svt_fail_at(file, line, "rdma_create_qp: no QP, or not on the id's default PD");
	if (id->qp->qp_type != type)
		svt_fail_at(file, line, "QP type %d, asked for %d", id->qp->qp_type, type);
	if (!id->send_cq || !id->recv_cq || !id->send_cq_channel || !id->recv_cq_channel ||
	    id->send_cq->channel != id->send_cq_channel ||
	    id->recv_cq->channel != id->recv_cq_channel)
		svt_fail_at(file, line, "rdma_create_qp did not make CQs with completion channels");
	if (attr.send_cq != id->send_cq || attr.recv_cq != id->recv_cq ||
	    id->qp->send_cq != id->send_cq || id->qp->recv_cq != id->recv_cq)
		svt_fail_at(file, line, "the CQs made are not the QP's, or not reported back");
	if (attr.cap.max_send_wr < depth || attr.cap.max_recv_wr < depth)
		svt_fail_at(file, line, "capabilities reported below what was asked");
	if (ibv_query_qp(id->qp, &qa, IBV_QP_STATE, &qia))
		svt_fail_at(file, line, "ibv_query_qp: %s", strerror(errno));
	return qa.qp_state;
}

static void check_wc(const char *file, int line, int n, const struct ibv_wc *wc,
		     enum ibv_wc_opcode opcode, uint64_t wr_id)
{
	if (n != 1)
		svt_fail_at(file, line, "rdma_get_*_comp returned %d (errno %d)", n, errno);
	if (wc->status != IBV_WC_SUCCESS)
		svt_fail_at(file, line, "completion wr_id %llu: %s", (unsigned long long)wc->wr_id,
			    ibv_wc_status_str(wc->status));
	if (wc->opcode != opcode || wc->wr_id != wr_id)
		svt_fail_at(file, line, "completion opcode %d wr_id %llu, expected %d wr_id %llu",
			    wc->opcode, (unsigned long long)wc->wr_id, opcode,
			    (unsigned long long)wr_id);
}

struct ibv_wc cmt_send_comp_at(const char *file, int line, struct rdma_cm_id *id,
			       enum ibv_wc_opcode opcode, uint64_t wr_id)
{
	struct ibv_wc wc;
	int n = rdma_get_send_comp(id, &wc);

	check_wc(file, line, n, &wc, opcode, wr_id);
	return wc;
}

struct ibv_wc cmt_recv_comp_at(const char *file, int line, struct rdma_cm_id *id, uint64_t wr_id,
			       uint32_t byte_len)
{
	struct ibv_wc wc;
	int n = rdma_get_recv_comp(id, &wc);

	check_wc(file, line, n, &wc, IBV_WC_RECV, wr_id);
	if (wc.byte_len != byte_len)
		svt_fail_at(file, line, "received %u bytes, expected %u", wc.byte_len, byte_len);
	if (wc.qp_num != id->qp->qp_num)
		svt_fail_at(file, line, "completion for QP %u on the CQ of QP %u", wc.qp_num,
			    id->qp->qp_num);
	return wc;
}

/* ---- RC pairs (cmt_side) ---- */

#define PAIR_BUF 4096
#define PAIR_SEND 0
#define PAIR_RECV 1024
#define PAIR_WRITE 2048 /* target of the peer's RDMA WRITE */
#define PAIR_READ 3072  /* source of the peer's RDMA READ, and where a READ lands */

struct pair_target {
	uint64_t addr;
	uint32_t rkey;
} __attribute__((packed));

static void pair_side(struct cmt_side *s)
{
	if (cmt_create_qp(s->id, IBV_QPT_RC, 8) != IBV_QPS_INIT)
		SVT_FAIL("an RC QP made on an id is in INIT");
	s->buf = svt_alloc(PAIR_BUF);
	s->mr = ibv_reg_mr(s->id->pd, s->buf, PAIR_BUF,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	SVT_CHECK_PTR(s->mr);
}

void cmt_connect_pair_at(const char *file, int line, struct cmt_side *act,
			 struct rdma_event_channel *ch_a, struct cmt_side *pas,
			 struct rdma_event_channel *ch_p)
{
	struct pair_target t;
	struct rdma_cm_event *ev;

	pair_side(act);
	t = (struct pair_target){ (uintptr_t)act->buf, act->mr->rkey };
	struct rdma_conn_param cp = { .private_data = &t, .private_data_len = sizeof(t),
				      .responder_resources = 1, .initiator_depth = 1,
				      .retry_count = 7, .rnr_retry_count = 7 };

	if (rdma_connect(act->id, &cp))
		svt_fail_at(file, line, "rdma_connect: %s", strerror(errno));
	ev = cmt_expect_at(file, line, ch_p, RDMA_CM_EVENT_CONNECT_REQUEST);
	pas->id = ev->id;
	memcpy(&t, ev->param.conn.private_data, sizeof(t));
	pas->peer_addr = t.addr;
	pas->peer_rkey = t.rkey;
	rdma_ack_cm_event(ev);
	pair_side(pas);
	t = (struct pair_target){ (uintptr_t)pas->buf, pas->mr->rkey };
	if (rdma_accept(pas->id, &cp))
		svt_fail_at(file, line, "rdma_accept: %s", strerror(errno));
	ev = cmt_expect_at(file, line, ch_a, RDMA_CM_EVENT_ESTABLISHED);
	memcpy(&t, ev->param.conn.private_data, sizeof(t));
	act->peer_addr = t.addr;
	act->peer_rkey = t.rkey;
	rdma_ack_cm_event(ev);
	rdma_ack_cm_event(cmt_expect_at(file, line, ch_p, RDMA_CM_EVENT_ESTABLISHED));
}

static void pair_send(const char *file, int line, struct cmt_side *from, struct cmt_side *to,
		      uint32_t len, uint32_t seed)
{
	svt_fill(from->buf + PAIR_SEND, len, seed);
	memset(to->buf + PAIR_RECV, 0, 1024);
	if (rdma_post_recv(to->id, (void *)(uintptr_t)(seed + 100), to->buf + PAIR_RECV, 1024,
			   to->mr) ||
	    rdma_post_send(from->id, (void *)(uintptr_t)seed, from->buf + PAIR_SEND, len, from->mr,
			   IBV_SEND_SIGNALED))
		svt_fail_at(file, line, "rdma_post_recv/send: %s", strerror(errno));
	cmt_send_comp_at(file, line, from->id, IBV_WC_SEND, seed);
	cmt_recv_comp_at(file, line, to->id, seed + 100, len);
	svt_check_fill_at(file, line, to->buf + PAIR_RECV, len, seed);
}

void cmt_exchange_at(const char *file, int line, struct cmt_side *a, struct cmt_side *b,
		     uint32_t seed)
{
	pair_send(file, line, a, b, 1000, seed);
	pair_send(file, line, b, a, 777, seed + 1);

	/* RDMA WRITE into b's buffer: placed before a sees the ACK */
	svt_fill(a->buf + PAIR_SEND, 1024, seed + 2);
	memset(b->buf + PAIR_WRITE, 0, 1024);
	if (rdma_post_write(a->id, (void *)(uintptr_t)(seed + 2), a->buf + PAIR_SEND, 1024, a->mr,
			    IBV_SEND_SIGNALED, a->peer_addr + PAIR_WRITE, a->peer_rkey))
		svt_fail_at(file, line, "rdma_post_write: %s", strerror(errno));
	cmt_send_comp_at(file, line, a->id, IBV_WC_RDMA_WRITE, seed + 2);
	svt_check_fill_at(file, line, b->buf + PAIR_WRITE, 1024, seed + 2);

	/* RDMA READ of b's buffer */
	svt_fill(b->buf + PAIR_READ, 1024, seed + 3);
	memset(a->buf + PAIR_READ, 0, 1024);
	if (rdma_post_read(a->id, (void *)(uintptr_t)(seed + 3), a->buf + PAIR_READ, 1024, a->mr,
			   IBV_SEND_SIGNALED, a->peer_addr + PAIR_READ, a->peer_rkey))
		svt_fail_at(file, line, "rdma_post_read: %s", strerror(errno));
	cmt_send_comp_at(file, line, a->id, IBV_WC_RDMA_READ, seed + 3);
	svt_check_fill_at(file, line, a->buf + PAIR_READ, 1024, seed + 3);
}

static void pair_free(struct cmt_side *s)
{
	rdma_dereg_mr(s->mr);
	rdma_destroy_qp(s->id);
	rdma_destroy_id(s->id);
	free(s->buf);
	memset(s, 0, sizeof(*s));
}

void cmt_close_pair(struct cmt_side *a, struct rdma_event_channel *ch_a, struct cmt_side *b,
		    struct rdma_event_channel *ch_b)
{
	SVT_CHECK_CM(rdma_disconnect(a->id));
	rdma_ack_cm_event(cmt_expect(ch_a, RDMA_CM_EVENT_DISCONNECTED));
	rdma_ack_cm_event(cmt_expect(ch_b, RDMA_CM_EVENT_DISCONNECTED));
	cmt_drain_timewait(ch_a);
	cmt_drain_timewait(ch_b);
	pair_free(a);
	pair_free(b);
}
