/*
 * Congestion control and the round-trip clock of an RC requester over a
 * datagram transport (rocev2).  Over a stream transport TCP's own flow and
 * congestion control stand between a sender and the network; over UDP
 * nothing does, and a sender as fast as softverbs' requester drowns a
 * receiver that drains its socket more slowly, which then drops, and every
 * drop costs go-back-N a window of packets.
 *
 * Window.  At most cwnd packets unacknowledged, counted from comp.una.  It
 * starts at SV_CWND_INIT, grows by one packet for every window of packets
 * acknowledged (additive increase) up to SV_CWND_MAX, and halves, at most
 * once a round trip, when a CNP arrives (multiplicative decrease), down to
 * SV_CWND_MIN.  That is the reaction point of DCQCN, the congestion control
 * of RoCE NICs, done as a window rather than a rate: a window needs no
 * timers and cannot overshoot by more than itself.  A loss (a sequence NAK,
 * a probe) halves it as well, once a round trip: a RoCE NIC lives on a
 * lossless fabric and does not, but over UDP a receiver that falls behind
 * drops, and its drops are the sign a sender gets first.  It costs random
 * loss nothing: go-back-N resends a smaller window per loss (1 % drop on
 * a veth: 85-91 MB/s without it, 148-160 with it).
 *
 * Notification.  A request that arrives marked congested (IP ECN CE under
 * rocev2: a switch's or a qdisc's mark, or the receiver's own when it falls
 * behind, transport/rocev2.c) makes its responder send the requester a CNP (opcode
 * 0x81, IBA annex A17.9.2), at most one per QP every SV_CNP_INTERVAL_NS,
 * as a RoCE NIC's notification point does: for RC and UC to the connected
 * peer QP, for UD to the source QPN of the datagram (its DETH).  A peer's
 * CNPs are honoured whatever sent them (rxe sends none, ConnectX NICs do);
 * a UD or UC sender, which has no window, only counts them.
 *
 * Round trip and probes.  One packet that asks for an ACK is timed at a
 * time, never a resent one (Karn), and smoothed as TCP does (RFC 6298).
 * When nothing is acknowledged for max(4 ms, srtt + 4 rttvar), doubling
 * with each try, the requester goes back to comp.una without using a retry:
 * a lost NAK, a lost resend or a lost last ACK then costs about a round
 * trip instead of the QP's ack timeout (67 ms at ib_write_bw's timeout 14).
 * The ack timeout keeps its own deadline (flow.ib_deadline) and counts
 * retries as before, so total loss still ends in IBV_WC_RETRY_EXC_ERR after
 * timeout x retry_cnt.
 *
 * Stream transports lose nothing by themselves, and TCP's own window paces
 * them.  Under SOFTVERBS_FAULTS they lose what it drops, and go-back-N
 * with no window would resend all that is in flight (megabytes) for each
 * loss: there the window, the ACK requests and the probes apply too (not
 * while what a probe would resend still waits in the connection's queue).
 */
#include "engine/engine.h"
#include "engine/stats.h"

#include <arpa/inet.h>
#include <string.h>

#define SV_CWND_INIT 64u
#define SV_CWND_MIN 2u
#define SV_CWND_MAX 128u
#define SV_CNP_INTERVAL_NS 50000ull
/* the engine's timers fire at millisecond granularity (epoll_wait), and on
 * a busy host a responder's thread may wait a few for a CPU: a probe that
 * fires then resends a window for nothing */
#define SV_PROBE_MIN_NS 4000000ull
/* before any round trip is measured */
#define SV_PROBE_INIT_NS 10000000ull
#define SV_PROBE_MAX_DOUBLINGS 6

void sv_flow_init(struct sv_qp *qp)
{
	qp->sq.flow = (struct sv_flow){ .cwnd = SV_CWND_INIT, .hi_psn = qp->sq.psn };
}

bool sv_flow_probing(const struct sv_qp *qp)
{
	/* a stream transport loses nothing unless SOFTVERBS_FAULTS makes it */
	return qp->ti->reliable && qp->conn && (qp->conn->lossy || sv_faults_enabled);
}

bool sv_flow_window_open(const struct sv_qp *qp, uint32_t psn)
{
	return sv_psn_cmp(psn, sv_psn_add(qp->comp.una, qp->sq.flow.cwnd)) < 0;
}

void sv_flow_sent(struct sv_qp *qp, uint32_t psn, bool ackreq)
{
	struct sv_flow *f = &qp->sq.flow;

	if (sv_psn_cmp(psn, f->hi_psn) < 0)
		return; /* a resend: times nothing */
	f->hi_psn = sv_psn_add(psn, 1);
	if (ackreq && !f->rtt_sent_ns) {
		f->rtt_psn = psn;
		f->rtt_sent_ns = sv_now_ns();
	}
}

void sv_flow_acked(struct sv_qp *qp, uint32_t old_una)
{
	struct sv_flow *f = &qp->sq.flow;
	uint32_t n = (qp->comp.una - old_una) & SV_PSN_MASK;

	if (f->rtt_sent_ns && sv_psn_cmp(qp->comp.una, f->rtt_psn) > 0) {
		uint64_t r = sv_now_ns() - f->rtt_sent_ns;

		if (!f->srtt_ns) {
			f->srtt_ns = r;
			f->rttvar_ns = r / 2;
		} else {
			uint64_t d = r > f->srtt_ns ? r - f->srtt_ns : f->srtt_ns - r;

			f->rttvar_ns = (3 * f->rttvar_ns + d) / 4;
			f->srtt_ns = (7 * f->srtt_ns + r) / 8;
		}
		f->rtt_sent_ns = 0;
	}
	for (f->cwnd_acc += n; f->cwnd_acc >= f->cwnd && f->cwnd < SV_CWND_MAX;) {
		f->cwnd_acc -= f->cwnd;
		f->cwnd++;
	}
	if (f->cwnd >= SV_CWND_MAX)
		f->cwnd_acc = 0;
}

void sv_flow_rewound(struct sv_qp *qp)
{
	qp->sq.flow.rtt_sent_ns = 0;
}

uint64_t sv_flow_probe_ns(const struct sv_qp *qp)
{
	const struct sv_flow *f = &qp->sq.flow;
	uint64_t t = f->srtt_ns ? f->srtt_ns + 4 * f->rttvar_ns : SV_PROBE_INIT_NS;

	if (t < SV_PROBE_MIN_NS)
		t = SV_PROBE_MIN_NS;
	return t << (f->probes < SV_PROBE_MAX_DOUBLINGS ? f->probes : SV_PROBE_MAX_DOUBLINGS);
}

/* The window halves, at most once a round trip. */
static void cut(struct sv_qp *qp)
{
	struct sv_flow *f = &qp->sq.flow;
	uint64_t now = sv_now_ns();

	if (!qp->ti->reliable || !qp->ti->connected || (f->cut_ns && now - f->cut_ns < f->srtt_ns))
		return; /* UC and UD have no window; one cut a round trip */
	f->cwnd = f->cwnd / 2 > SV_CWND_MIN ? f->cwnd / 2 : SV_CWND_MIN;
	f->cwnd_acc = 0;
	f->cut_ns = now;
}

void sv_flow_cnp(struct sv_qp *qp)
{
	sv_stat_count(qp, SV_QPC_CNP_RCVD);
	cut(qp);
}

void sv_flow_lost(struct sv_qp *qp)
{
	if (qp->conn && qp->conn->lossy)
		cut(qp);
}

void sv_flow_marked(struct sv_qp *qp, struct sv_conn *conn, const uint8_t *pkt,
		    const struct sv_opcode_info *op)
{
	struct {
		struct sv_bth bth;
		uint8_t rsvd[16];
	} __attribute__((packed)) p;
	uint64_t now = sv_now_ns();

	uint32_t to;

	sv_stat_count(qp, SV_QPC_ECN_MARKED);
	if (qp->resp.cnp_sent_ns && now - qp->resp.cnp_sent_ns < SV_CNP_INTERVAL_NS)
		return;
	if (qp->ti->connected) {
		to = qp->attr.dest_qp_num;
	} else if (op->off_deth) {
		/* UD: to the QP the datagram names as its source */
		const struct sv_deth *d = (const void *)(pkt + op->off_deth);

		to = ntohl(d->sqpn);
	} else {
		return;
	}
	qp->resp.cnp_sent_ns = now;
	memset(&p, 0, sizeof(p));
	p.bth.opcode = SV_OP_CNP;
	p.bth.pkey = 0xffff;
	p.bth.dqpn = htonl(to & SV_PSN_MASK);
	sv_send_packet(conn, &p, sizeof(p), NULL, 0);
	sv_stat_count(qp, SV_QPC_CNP_SENT);
}
