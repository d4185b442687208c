/*
 * cm_test.h - small helpers shared by the rdma_cm tests (static library
 * cm_test, on top of sv_test).
 *
 * The tests play both sides of a connection in one process, each side with
 * its own event channel, so every wait on a channel has a timeout: a lost
 * event must fail the test with its name, not hang it until CTest's TIMEOUT.
 */
#ifndef CM_TEST_H
#define CM_TEST_H

#include <netinet/in.h>
#include <rdma/rdma_cma.h>

#include "sv_test.h"

/* ip:port as the sockaddr the rdma_cm calls take. */
struct sockaddr_in cmt_sin(const char *ip, uint16_t port);

/* ip:port of either family: "a.b.c.d", "x::y" or "fe80::y%ifname". */
struct sockaddr_storage cmt_sa(const char *ip, uint16_t port);

/*
 * Next event on ch within timeout_ms (<= 0: SVT_TIMEOUT_MS), or fail the
 * test. The caller acks it.
 */
struct rdma_cm_event *cmt_get_event_at(const char *file, int line, struct rdma_event_channel *ch,
				       int timeout_ms);
#define cmt_get_event(ch, ms) cmt_get_event_at(__FILE__, __LINE__, ch, ms)

/* Next event on ch must be `type` with status 0; the caller acks it. */
struct rdma_cm_event *cmt_expect_at(const char *file, int line, struct rdma_event_channel *ch,
				    enum rdma_cm_event_type type);
#define cmt_expect(ch, type) cmt_expect_at(__FILE__, __LINE__, ch, type)

/* No event arrives on ch for ms milliseconds. */
void cmt_expect_none_at(const char *file, int line, struct rdma_event_channel *ch, int ms);
#define cmt_expect_none(ch, ms) cmt_expect_none_at(__FILE__, __LINE__, ch, ms)

/* Drop events of type TIMEWAIT_EXIT that are queued now (they are optional). */
void cmt_drain_timewait(struct rdma_event_channel *ch);

/*
 * rdma_resolve_addr + rdma_resolve_route on an id of channel ch, expecting
 * both events; fails the test otherwise.  ip as cmt_sa takes it.
 */
void cmt_resolve_at(const char *file, int line, struct rdma_cm_id *id,
		    struct rdma_event_channel *ch, const char *ip, uint16_t port);
#define cmt_resolve(id, ch, ip, port) cmt_resolve_at(__FILE__, __LINE__, id, ch, ip, port)

/*
 * A listener on ip:port (own id on channel ch), in the port space ps; ip as
 * cmt_sa takes it.
 */
struct rdma_cm_id *cmt_listen_at(const char *file, int line, struct rdma_event_channel *ch,
				 enum rdma_port_space ps, const char *ip, uint16_t port);
#define cmt_listen(ch, ps, ip, port) cmt_listen_at(__FILE__, __LINE__, ch, ps, ip, port)

/*
 * rdma_create_qp(id, NULL, attr) with no CQs given, `depth` WRs each way and
 * one SGE: checks that librdmacm used the device's default PD and made both
 * CQs, each with a completion channel (what the rdma_verbs.h helpers wait
 * on), and reported them back. Returns the QP's state, so that callers can
 * check how far the library moved it for this QP type.
 */
enum ibv_qp_state cmt_create_qp_at(const char *file, int line, struct rdma_cm_id *id,
				   enum ibv_qp_type type, uint32_t depth);
#define cmt_create_qp(id, type, depth) cmt_create_qp_at(__FILE__, __LINE__, id, type, depth)

/*
 * The next completion of id's send (recv) CQ, waited for with
 * rdma_get_send_comp (rdma_get_recv_comp), must be a success with this
 * opcode and wr_id (and for receives, byte_len). Returns it.
 */
struct ibv_wc cmt_send_comp_at(const char *file, int line, struct rdma_cm_id *id,
			       enum ibv_wc_opcode opcode, uint64_t wr_id);
#define cmt_send_comp(id, op, wr_id) cmt_send_comp_at(__FILE__, __LINE__, id, op, wr_id)
struct ibv_wc cmt_recv_comp_at(const char *file, int line, struct rdma_cm_id *id, uint64_t wr_id,
			       uint32_t byte_len);
#define cmt_recv_comp(id, wr_id, len) cmt_recv_comp_at(__FILE__, __LINE__, id, wr_id, len)

/*
 * An RC connection made through the CM and used with the rdma_verbs.h
 * helpers: each side has a QP (cmt_create_qp), a 4 KiB buffer registered
 * for remote READ and WRITE, and the peer's buffer address and rkey, which
 * travel in the REQ's and REP's private data.
 */
struct cmt_side {
	struct rdma_cm_id *id;
	char *buf;
	struct ibv_mr *mr;
	uint64_t peer_addr;
	uint32_t peer_rkey;
};

/*
 * act, resolved (address and route) on channel ch_a, connects to a listener
 * of channel ch_p; pas->id becomes the request's id, accepted.  Both sides
 * see ESTABLISHED.
 */
void cmt_connect_pair_at(const char *file, int line, struct cmt_side *act,
			 struct rdma_event_channel *ch_a, struct cmt_side *pas,
			 struct rdma_event_channel *ch_p);
#define cmt_connect_pair(act, ch_a, pas, ch_p) \
	cmt_connect_pair_at(__FILE__, __LINE__, act, ch_a, pas, ch_p)

/* SEND a->b and b->a, RDMA WRITE a->b, RDMA READ a<-b; each checked byte for byte. */
void cmt_exchange_at(const char *file, int line, struct cmt_side *a, struct cmt_side *b,
		     uint32_t seed);
#define cmt_exchange(a, b, seed) cmt_exchange_at(__FILE__, __LINE__, a, b, seed)

/* a disconnects: DISCONNECTED on both channels; then both sides are freed. */
void cmt_close_pair(struct cmt_side *a, struct rdma_event_channel *ch_a, struct cmt_side *b,
		    struct rdma_event_channel *ch_b);

/*
 * SVT_CHECK_CM(expr): an rdma_cm call that must return 0 (they return -1 and
 * set errno on failure, unlike the verbs).
 */
#define SVT_CHECK_CM(expr)                                                     \
	do {                                                                   \
		errno = 0;                                                     \
		if ((expr) != 0)                                               \
			svt_fail_at(__FILE__, __LINE__, "%s failed: errno %d (%s)", \
				    #expr, errno, strerror(errno));            \
	} while (0)

/* SVT_CHECK_CM_ERRNO(expr, E): an rdma_cm call that must return -1 with errno E. */
#define SVT_CHECK_CM_ERRNO(expr, E)                                            \
	do {                                                                   \
		errno = 0;                                                     \
		int svt_r_ = (expr);                                           \
		int svt_e_ = errno;                                            \
		if (svt_r_ != -1 || svt_e_ != (E))                             \
			svt_fail_at(__FILE__, __LINE__,                        \
				    "%s: returned %d errno %d (%s), expected -1 errno %d (%s)", \
				    #expr, svt_r_, svt_e_, strerror(svt_e_), (E), strerror(E)); \
	} while (0)

#endif /* CM_TEST_H */
