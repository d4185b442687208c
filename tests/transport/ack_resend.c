/*
 * ACKs that arrive while the requester is sending again what it sent
 * before (src/engine/completer.c, requester.c).
 *
 * A peer that speaks RoCEv2 itself plays the responder of an RC QP: a UDP
 * socket on 127.0.0.N:4791 (N >= 2, any address of lo; the device is
 * 127.0.0.1's), which encodes and decodes datagrams with the transport's
 * own roce_wire.c.  It takes every packet of the WRITEs posted and answers
 * none, until the requester's retransmission probe has gone back to the
 * first PSN (about 10 ms after the post, long before the QP's 1 s ack timeout)
 * and resent as much as its congestion window, which the probe halved,
 * lets it: part of the first WRITE, which is PENDING again, partly sent.
 * Then it ACKs a PSN in the middle of that WRITE (the window opens by two
 * packets: it is still partly sent), then the last PSN of all it holds.
 *
 *   1. one WRITE of 48 packets;
 *   2. a WRITE of 40 packets and one of 8 after it, which the probe also
 *      took back (both went out whole before it).
 *
 * The final ACK covers every WRITE: each completes IBV_WC_SUCCESS, in
 * order, at once, and the peer answers nothing else (no ACK of the
 * packets resent after it, which a real responder might send and a lossy
 * path might lose).  Before the fix, the ACK moved sq.una past the WRITE
 * the requester was still sending, which stayed unacknowledged: its ack
 * timer then went back to sq.una, past the WRITE's last PSN, resent
 * nothing, and after retry_cnt timeouts the WRITE ended in RETRY_EXC_ERR.
 * A WRITE posted afterwards starts at the PSN after the last one (the
 * resend point moved to the end, not beyond it) and completes too.
 */
#include "sv_test.h"
#include "common/util.h"
#include "engine/opcode.h"
#include "engine/wire.h"
#include "transport/roce_wire.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#define MTU 1024
#define MAX_PKTS 48 /* within the initial window (64 packets): all go out */
#define SQ_PSN 0x10
#define PEER_QPN 0x7ff000u /* the fake responder's QPNs: one more each case */
#define REMOTE_VA 0x100000ull
#define REMOTE_RKEY 0x4242u
/* timeout 18: 1.07 s, far beyond the first probe (10 ms before any round
 * trip is measured), so the probe, which halves the window, comes first */
#define QP_TIMEOUT 18
#define QP_RETRIES 3
/* what a WRITE may take to complete once all of it is ACKed: the QP's
 * ack timeout and retries, which the old code used up, and a margin for
 * a busy host */
#define COMPLETE_MS (1100 * (QP_RETRIES + 1) + 5000)

static struct {
	int fd;
	struct sockaddr_in self;
	uint32_t requester; /* the QPN ACKs go to */
	uint32_t qpn;	    /* the QPN it plays now */
} peer = { .qpn = PEER_QPN };

static void peer_open(void)
{
	int pmtu = IP_PMTUDISC_DO, big = 4 << 20;

	peer.fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	SVT_CHECK(peer.fd >= 0);
	/* identification 0 and DF, as softverbs' own senders: the ICRC covers them */
	SVT_CHECK_OK(setsockopt(peer.fd, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof(pmtu)));
	(void)setsockopt(peer.fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
	for (int n = 2; n < 64; n++) {
		memset(&peer.self, 0, sizeof(peer.self));
		peer.self.sin_family = AF_INET;
		peer.self.sin_port = htons(SV_ROCE_UDP_PORT);
		peer.self.sin_addr.s_addr = htonl(0x7f000000u | (uint32_t)n);
		if (!bind(peer.fd, (struct sockaddr *)&peer.self, sizeof(peer.self)))
			return;
	}
	svt_skip("no address 127.0.0.N (N < 64) with UDP port 4791 free");
}

static void path_of(struct sv_roce_path *p, const struct sockaddr_in *src,
		    const struct sockaddr_in *dst)
{
	memset(p, 0, sizeof(*p));
	memcpy(p->src, &src->sin_addr, 4);
	memcpy(p->dst, &dst->sin_addr, 4);
	p->sport = ntohs(src->sin_port);
	p->dport = ntohs(dst->sin_port);
}

/* Where the device's datagrams come from (its address, port 4791 for ACKs). */
static struct sockaddr_in device_addr;

/* The next request packet's PSN and opcode, or false after timeout_ms. */
static bool next_packet(int timeout_ms, uint32_t *psn, uint8_t *opcode)
{
	static uint8_t raw[SV_MAX_PACKET_LEN + 64], pkt[SV_MAX_PACKET_LEN + 64];
	uint64_t end = svt_now_ms() + (uint64_t)timeout_ms;

	for (;;) {
		struct pollfd pfd = { .fd = peer.fd, .events = POLLIN };
		struct sockaddr_in from;
		socklen_t fl = sizeof(from);
		struct sv_roce_path path;
		uint64_t now = svt_now_ms();
		ssize_t n;
		int len;

		if (poll(&pfd, 1, now < end ? (int)(end - now) : 0) <= 0)
			return false;
		n = recvfrom(peer.fd, raw, sizeof(raw), MSG_DONTWAIT, (struct sockaddr *)&from, &fl);
		if (n <= 0)
			continue;
		path_of(&path, &from, &peer.self);
		len = sv_roce_decode(&path, raw, (size_t)n, pkt, sizeof(pkt), NULL);
		SVT_CHECK_MSG(len >= (int)sizeof(struct sv_bth), "a datagram refused: %d", len);
		const struct sv_bth *bth = (const void *)pkt;

		if (bth->opcode == SV_OP_CNP || (ntohl(bth->dqpn) & SV_PSN_MASK) != peer.qpn)
			continue;
		device_addr = from;
		device_addr.sin_port = htons(SV_ROCE_UDP_PORT);
		*psn = ntohl(bth->psn) & SV_PSN_MASK;
		*opcode = bth->opcode;
		return true;
	}
}

static void send_ack(uint32_t psn)
{
	uint8_t pkt[sizeof(struct sv_bth) + sizeof(struct sv_aeth)], dg[sizeof(pkt) + 64];
	struct sv_bth *bth = (void *)pkt;
	struct sv_aeth a = { htonl(SV_AETH_ACK << 24) };
	struct sv_roce_path path;
	size_t n;

	memset(bth, 0, sizeof(*bth));
	bth->opcode = SV_OP_RC | SV_OP_ACK;
	bth->pkey = 0xffff;
	bth->dqpn = htonl(peer.requester);
	bth->psn = htonl(psn & SV_PSN_MASK);
	memcpy(pkt + sizeof(*bth), &a, sizeof(a));
	path_of(&path, &peer.self, &device_addr);
	n = sv_roce_encode(&path, pkt, sizeof(pkt), dg, sizeof(dg));
	SVT_CHECK(n > 0);
	SVT_CHECK_EQ(sendto(peer.fd, dg, n, 0, (struct sockaddr *)&device_addr,
			    sizeof(device_addr)),
		     (ssize_t)n);
}

static void post_write(struct ibv_qp *qp, uint64_t id, uint8_t *buf, uint32_t len, uint32_t lkey)
{
	SVT_CHECK_OK(svt_post_send(qp, id, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, buf, len, lkey,
				   REMOTE_VA, REMOTE_RKEY, 0));
}

/* The next completion, or the test fails naming what was waited for. */
static struct ibv_wc next_wc(struct ibv_cq *cq, const char *what)
{
	uint64_t end = svt_now_ms() + COMPLETE_MS;
	struct ibv_wc wc;
	int n;

	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0 && svt_now_ms() < end)
		;
	SVT_CHECK_MSG(n == 1, "%s: no completion in %d ms", what, COMPLETE_MS);
	return wc;
}

/*
 * On a new QP (a fresh congestion window), WRITEs of npkts[0..nw-1]
 * packets: the peer holds back its ACKs until the requester goes back to
 * the first PSN, then ACKs the second and the last.  Then one more WRITE.
 */
static void one_case(const char *name, struct svt_dev *d, struct ibv_cq *cq, uint8_t *buf,
		     uint32_t lkey, const uint32_t *npkts, int nw)
{
	uint32_t first = SQ_PSN, total = 0, expect = first, p;
	struct svt_qp_init qi;
	struct svt_conn c;
	union ibv_gid pgid;
	struct ibv_wc wc;
	int resent = 0;
	uint8_t op;

	svt_qp_init_default(&qi, IBV_QPT_RC);
	struct ibv_qp *qp = svt_create_qp(d->pd, cq, cq, &qi);

	peer.requester = qp->qp_num;
	peer.qpn++; /* packets still on their way to the last case's are not this one's */
	svt_conn_default(&c, IBV_QPT_RC);
	c.path_mtu = IBV_MTU_1024;
	c.sgid_index = 3;
	c.sq_psn = SQ_PSN;
	c.timeout = QP_TIMEOUT;
	c.retry_cnt = QP_RETRIES;
	/* the peer's RoCE v2 GID: its IPv4 address, IPv4-mapped */
	memset(&pgid, 0, sizeof(pgid));
	pgid.raw[10] = pgid.raw[11] = 0xff;
	memcpy(&pgid.raw[12], &peer.self.sin_addr, 4);
	svt_qp_connect(qp, &c, &pgid, peer.qpn);

	for (int i = 0; i < nw; i++) {
		post_write(qp, (uint64_t)i, buf, npkts[i] * MTU, lkey);
		total += npkts[i];
	}
	SVT_CHECK_LE(total, MAX_PKTS);
	/* everything, in order (a loopback datagram lost would show as a
	 * gap: the peer waits for the resend to fill it) */
	while (expect != first + total) {
		SVT_CHECK_MSG(next_packet(5000, &p, &op), "%s: PSN %u never came", name, expect);
		if (p == expect)
			expect++;
	}
	/* the requester's timer fires (no ACK yet) and it goes back to the first PSN */
	do {
		SVT_CHECK_MSG(next_packet(5000, &p, &op), "%s: no retransmission", name);
	} while (p != first);
	/* a middle PSN of the first WRITE, then the end: the WRITE it covers
	 * is being sent again, the rest waits behind the window */
	send_ack(first + 1);
	send_ack(first + total - 1);
	for (int i = 0; i < nw; i++) {
		wc = next_wc(cq, name);
		SVT_CHECK_MSG(wc.status == IBV_WC_SUCCESS && wc.wr_id == (uint64_t)i,
			      "%s: WRITE %d of %u packets: wr_id %llu status %s", name, i, npkts[i],
			      (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status));
	}
	/* what the requester resent in the meantime: none past the end */
	while (next_packet(0, &p, &op)) {
		SVT_CHECK_MSG(p >= first && p < first + total, "%s: PSN %u resent, outside %u..%u",
			      name, p, first, first + total - 1);
		resent++;
	}

	/* the next message goes on from the PSN after the last: the resend
	 * point stopped at the end of what was acknowledged */
	post_write(qp, 9, buf, MTU, lkey);
	do {
		SVT_CHECK_MSG(next_packet(5000, &p, &op), "%s: the next WRITE never came", name);
	} while (p < first + total); /* resends of the WRITEs before it may still come */
	SVT_CHECK_EQ(p, first + total);
	SVT_CHECK_EQ(op, SV_OP_RC | SV_OP_WRITE_ONLY);
	send_ack(p);
	wc = next_wc(cq, name);
	SVT_CHECK_WC_OK(wc);
	SVT_CHECK_EQ(wc.wr_id, 9);
	svt_log("%s: done at the final ACK (%d resent packets seen, none past the last PSN)", name,
		resent);
	SVT_CHECK_OK(ibv_destroy_qp(qp));
}

int main(void)
{
	static const uint32_t one[] = { 48 }, two[] = { 40, 8 };
	struct svt_dev d;
	uint8_t *buf = svt_alloc(MAX_PKTS * MTU);

	svt_watchdog(100);
	setenv("SOFTVERBS_TRANSPORT", "rocev2", 1);
	peer_open();
	svt_dev_open(&d);
	struct ibv_cq *cq = svt_create_cq(d.ctx, 16, NULL);
	struct ibv_mr *mr = svt_reg_mr(d.pd, buf, MAX_PKTS * MTU, SVT_ACCESS_ALL);

	one_case("one WRITE", &d, cq, buf, mr->lkey, one, 1);
	one_case("two WRITEs", &d, cq, buf, mr->lkey, two, 2);
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	SVT_CHECK_OK(ibv_destroy_cq(cq));
	svt_dev_close(&d);
	close(peer.fd);
	free(buf);
	return 0;
}
