/*
 * ACKs that arrive while the requester is sending again what it sent
 * before, and what it sends again (src/engine/completer.c, requester.c).
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
 * path might lose).  Before the fix, the ACK moved comp.una past the WRITE
 * the requester was still sending, which stayed unacknowledged: its ack
 * timer then went back to comp.una, past the WRITE's last PSN, resent
 * nothing, and after retry_cnt timeouts the WRITE ended in RETRY_EXC_ERR.
 * A WRITE posted afterwards starts at the PSN after the last one (the
 * resend point moved to the end, not beyond it) and completes too.
 *
 *   3. local operations (BIND_MW, LOCAL_INV) between the WQEs the probe
 *      takes back (local_ops_case): done once, never sent;
 *   4. one that fails there (failed_local_case): nothing after it is sent;
 *   5. NAKs that come after the probe, for PSNs beyond what it has resent
 *      so far (nak_case): taken, not dropped as stale.
 */
#include "sv_test.h"
#include "common/util.h"
#include "wire/opcode.h"
#include "wire/wire.h"
#include "transport/roce_wire.h"
#include "wire_peer.h"

#include <arpa/inet.h>
#include <endian.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#define MTU 1024
#define MAX_PKTS 48 /* within the initial window (64 packets): all go out */
#define SQ_PSN 0x10
#define RQ_PSN 0x1000 /* the PSN of the peer's first request */
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

/* The last packet next_packet took, decoded (BTH first), and its length. */
static uint8_t rx[SV_MAX_PACKET_LEN + 64];
static int rx_len;

/* The next packet's PSN and opcode (in rx), or false after timeout_ms. */
static bool next_packet(int timeout_ms, uint32_t *psn, uint8_t *opcode)
{
	static uint8_t raw[SV_MAX_PACKET_LEN + 64];
	uint8_t *pkt = rx;
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
		len = sv_roce_decode(&path, raw, (size_t)n, pkt, sizeof(rx), NULL);
		SVT_CHECK_MSG(len >= (int)sizeof(struct sv_bth), "a datagram refused: %d", len);
		const struct sv_bth *bth = (const void *)pkt;

		if (bth->opcode == SV_OP_CNP || (ntohl(bth->dqpn) & SV_PSN_MASK) != peer.qpn)
			continue;
		rx_len = len;
		device_addr = from;
		device_addr.sin_port = htons(SV_ROCE_UDP_PORT);
		*psn = ntohl(bth->psn) & SV_PSN_MASK;
		*opcode = bth->opcode;
		return true;
	}
}

/* A packet (BTH first) to the device, as a RoCEv2 datagram. */
static void peer_send(const void *pkt, size_t len)
{
	uint8_t dg[SV_MAX_PACKET_LEN + 64];
	struct sv_roce_path path;
	size_t n;

	path_of(&path, &peer.self, &device_addr);
	n = sv_roce_encode(&path, pkt, len, dg, sizeof(dg));
	SVT_CHECK(n > 0);
	SVT_CHECK_EQ(sendto(peer.fd, dg, n, 0, (struct sockaddr *)&device_addr,
			    sizeof(device_addr)),
		     (ssize_t)n);
}

/* A BTH for the requester's QP into pkt; its length. */
/* An ACK (syndrome syn) or, with an opcode of a READ response, that with
 * plen bytes of payload. */
static void send_aeth(uint8_t opcode, uint32_t psn, uint8_t syn, const void *payload,
		      uint32_t plen)
{
	uint8_t pkt[sizeof(struct sv_bth) + sizeof(struct sv_aeth) + 64];
	struct sv_aeth a = { htonl((uint32_t)syn << 24) };
	size_t n = svt_wire_bth_flags(pkt, SV_OP_RC | opcode, 0, peer.requester, psn);

	SVT_CHECK_LE(plen, 64);
	memcpy(pkt + n, &a, sizeof(a));
	n += sizeof(a);
	if (plen)
		memcpy(pkt + n, payload, plen);
	peer_send(pkt, n + plen);
}

static void send_ack(uint32_t psn)
{
	send_aeth(SV_OP_ACK, psn, SV_AETH_ACK, NULL, 0);
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

/* A new RC QP (a fresh congestion window) connected to the peer, which
 * plays a QPN of its own for it. */
static struct ibv_qp *peer_qp(struct svt_dev *d, struct ibv_cq *cq)
{
	struct svt_qp_init qi;
	struct svt_conn c;
	union ibv_gid pgid;

	svt_qp_init_default(&qi, IBV_QPT_RC);
	struct ibv_qp *qp = svt_create_qp(d->pd, cq, cq, &qi);

	peer.requester = qp->qp_num;
	peer.qpn++; /* packets still on their way to the last case's are not this one's */
	svt_conn_default(&c, IBV_QPT_RC);
	c.path_mtu = IBV_MTU_1024;
	c.sgid_index = 3;
	c.sq_psn = SQ_PSN;
	c.rq_psn = RQ_PSN;
	c.timeout = QP_TIMEOUT;
	c.retry_cnt = QP_RETRIES;
	/* the peer's RoCE v2 GID: its IPv4 address, IPv4-mapped */
	memset(&pgid, 0, sizeof(pgid));
	pgid.raw[10] = pgid.raw[11] = 0xff;
	memcpy(&pgid.raw[12], &peer.self.sin_addr, 4);
	svt_qp_connect(qp, &c, &pgid, peer.qpn);
	return qp;
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
	struct ibv_qp *qp = peer_qp(d, cq);
	struct ibv_wc wc;
	int resent = 0;
	uint8_t op;

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

/*
 * Local operations between RC WQEs that a probe takes back: they were
 * done once, in order, and a resend sends the WQEs around them with the
 * PSNs they had, and nothing for them.  Posted, from PSN P = SQ_PSN:
 *
 *   0  WRITE of LOP_WPKTS packets        P .. P+7
 *   1  BIND_MW, a type 2 window, key k1  (local)
 *   2  LOCAL_INV k1                      (local)
 *   3  SEND_WITH_INV                     P+8
 *   4  READ of 8 bytes                   P+9
 *   5  BIND_MW k2, IBV_SEND_FENCE        (local, after the READ's answer)
 *   6  WRITE of one packet               P+10
 *
 * The peer answers nothing until the probe has gone back to P, and checks
 * every packet against that table (opcode at each PSN, the SEND's IETH),
 * and that the WRITE behind the fence waits for the READ's answer.  Then
 * it ACKs P+8, answers the READ and ACKs P+10: all seven complete
 * successfully, in order, once each.  The window was bound with k2 once:
 * the peer's WRITE through k2 lands, one through k1 is refused.
 */
#define LOP_WPKTS 8
#define LOP_INV_KEY 0x00c0ffeeu /* what the SEND asks the peer to invalidate */
#define LOP_READ_LEN 8
#define WIN_LEN 4096

static uint8_t lop_opcode(uint32_t psn)
{
	uint32_t k = (psn - SQ_PSN) & SV_PSN_MASK;

	if (k < LOP_WPKTS)
		return SV_OP_RC | (k == 0		  ? SV_OP_WRITE_FIRST
				   : k + 1 < LOP_WPKTS ? SV_OP_WRITE_MIDDLE
						       : SV_OP_WRITE_LAST);
	if (k == LOP_WPKTS)
		return SV_OP_RC | SV_OP_SEND_ONLY_INV;
	if (k == LOP_WPKTS + 1)
		return SV_OP_RC | SV_OP_READ_REQUEST;
	if (k == LOP_WPKTS + 2)
		return SV_OP_RC | SV_OP_WRITE_ONLY;
	return 0xff; /* no packet has that PSN */
}

/* A packet of the requester (in rx): the one the table has at its PSN. */
static void lop_check(uint32_t psn, uint8_t op, bool read_answered)
{
	SVT_CHECK_MSG(op == lop_opcode(psn),
		      "local ops: PSN %u went out as opcode 0x%02x, expected 0x%02x at that PSN", psn,
		      op, lop_opcode(psn));
	SVT_CHECK_MSG(read_answered || psn != SQ_PSN + LOP_WPKTS + 2,
		      "local ops: the WRITE after the fenced BIND_MW went out before the READ's "
		      "answer");
	if (op == (SV_OP_RC | SV_OP_SEND_ONLY_INV)) {
		const struct sv_ieth *i = (const void *)(rx + sizeof(struct sv_bth));

		SVT_CHECK_GE(rx_len, (int)(sizeof(struct sv_bth) + sizeof(*i)));
		SVT_CHECK_EQ(ntohl(i->rkey), LOP_INV_KEY);
	}
}

static void post_wr(struct ibv_qp *qp, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad = NULL;

	SVT_CHECK_OK(ibv_post_send(qp, wr, &bad));
}

static void post_bind(struct ibv_qp *qp, uint64_t id, unsigned int flags, struct ibv_mw *mw,
		      uint32_t key, struct ibv_mr *win_mr)
{
	struct ibv_send_wr wr = { .wr_id = id, .opcode = IBV_WR_BIND_MW, .send_flags = flags };

	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = key;
	wr.bind_mw.bind_info.mr = win_mr;
	wr.bind_mw.bind_info.addr = (uintptr_t)win_mr->addr;
	wr.bind_mw.bind_info.length = WIN_LEN;
	wr.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
	post_wr(qp, &wr);
}

/* The peer WRITEs len bytes of svt_fill(seed) through rkey at va, as
 * request psn; the syndrome of the device's answer. */
static uint8_t peer_write(uint32_t psn, uint64_t va, uint32_t rkey, uint32_t len, uint32_t seed)
{
	uint8_t pkt[sizeof(struct sv_bth) + sizeof(struct sv_reth) + 256];
	size_t n = svt_wire_bth_flags(pkt, SV_OP_RC | SV_OP_WRITE_ONLY, SV_BTH_ACKREQ,
				      peer.requester, psn);
	struct sv_reth r = { .va = htobe64(va), .rkey = htonl(rkey), .dma_len = htonl(len) };
	uint8_t op;
	uint32_t p;

	SVT_CHECK_LE(len, 256);
	memcpy(pkt + n, &r, sizeof(r));
	n += sizeof(r);
	svt_fill(pkt + n, len, seed);
	peer_send(pkt, n + len);
	do {
		SVT_CHECK_MSG(next_packet(5000, &p, &op), "local ops: no answer to the peer's WRITE");
		if (op != (SV_OP_RC | SV_OP_ACK))
			lop_check(p, op, true); /* a late resend */
	} while (op != (SV_OP_RC | SV_OP_ACK));
	SVT_CHECK_EQ(p, psn);
	SVT_CHECK_GE(rx_len, (int)(sizeof(struct sv_bth) + sizeof(struct sv_aeth)));
	return (uint8_t)(ntohl(((const struct sv_aeth *)(rx + sizeof(struct sv_bth)))->syn_msn) >>
			 24);
}

static void local_ops_case(struct svt_dev *d, struct ibv_cq *cq, uint8_t *buf, struct ibv_mr *mr)
{
	static const enum ibv_wc_opcode wc_op[] = { IBV_WC_RDMA_WRITE, IBV_WC_BIND_MW,
						    IBV_WC_LOCAL_INV,  IBV_WC_SEND,
						    IBV_WC_RDMA_READ,  IBV_WC_BIND_MW,
						    IBV_WC_RDMA_WRITE };
	const uint32_t first = SQ_PSN, last = first + LOP_WPKTS + 1; /* the READ's */
	uint8_t *win = svt_alloc(WIN_LEN), *rbuf = buf + LOP_WPKTS * MTU, rdata[LOP_READ_LEN];
	struct ibv_mr *win_mr =
		svt_reg_mr(d->pd, win, WIN_LEN, SVT_ACCESS_ALL | IBV_ACCESS_MW_BIND);
	struct ibv_mw *mw = ibv_alloc_mw(d->pd, IBV_MW_TYPE_2);
	struct ibv_qp *qp = peer_qp(d, cq);
	uint32_t k1, k2, expect = first, p;
	struct ibv_sge sge;
	struct ibv_send_wr wr;
	struct ibv_wc wc;
	uint8_t op, syn;

	SVT_CHECK_PTR(mw);
	k1 = ibv_inc_rkey(mw->rkey);
	k2 = ibv_inc_rkey(k1);
	memset(win, 0, WIN_LEN);
	memset(rbuf, 0, LOP_READ_LEN);

	post_write(qp, 0, buf, LOP_WPKTS * MTU, mr->lkey);
	post_bind(qp, 1, IBV_SEND_SIGNALED, mw, k1, win_mr);
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 2;
	wr.opcode = IBV_WR_LOCAL_INV;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.invalidate_rkey = k1;
	post_wr(qp, &wr);
	sge = (struct ibv_sge){ .addr = (uintptr_t)buf, .length = 16, .lkey = mr->lkey };
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 3;
	wr.opcode = IBV_WR_SEND_WITH_INV;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.invalidate_rkey = LOP_INV_KEY;
	post_wr(qp, &wr);
	SVT_CHECK_OK(svt_post_send(qp, 4, IBV_WR_RDMA_READ, IBV_SEND_SIGNALED, rbuf, LOP_READ_LEN,
				   mr->lkey, REMOTE_VA, REMOTE_RKEY, 0));
	post_bind(qp, 5, IBV_SEND_SIGNALED | IBV_SEND_FENCE, mw, k2, win_mr);
	post_write(qp, 6, buf, MTU, mr->lkey);

	/* the first time: P .. P+9, and nothing behind the fence */
	while (expect != last + 1) {
		SVT_CHECK_MSG(next_packet(5000, &p, &op), "local ops: PSN %u never came", expect);
		lop_check(p, op, false);
		if (p == expect)
			expect++;
	}
	/* the probe goes back to P: the same packets again, none for the
	 * local operations (before the fix the BIND_MW went out as a SEND,
	 * and the WQEs after it with the wrong PSNs) */
	do {
		SVT_CHECK_MSG(next_packet(5000, &p, &op), "local ops: no retransmission");
		lop_check(p, op, false);
	} while (p != first);
	for (expect = first + 1; expect != last + 1;) {
		SVT_CHECK_MSG(next_packet(5000, &p, &op), "local ops: PSN %u never came again",
			      expect);
		lop_check(p, op, false);
		if (p == expect)
			expect++;
	}
	/* the WRITE and the SEND are ACKed, the READ answered: the fence opens */
	send_ack(last - 1);
	svt_fill(rdata, sizeof(rdata), 7);
	send_aeth(SV_OP_READ_RESP_ONLY, last, SV_AETH_ACK, rdata, sizeof(rdata));
	do {
		SVT_CHECK_MSG(next_packet(5000, &p, &op), "local ops: the last WRITE never came");
		lop_check(p, op, true);
		if (p == last) /* the answer was lost: again */
			send_aeth(SV_OP_READ_RESP_ONLY, last, SV_AETH_ACK, rdata, sizeof(rdata));
	} while (p != last + 1);
	send_ack(last + 1);
	for (uint64_t i = 0; i < sizeof(wc_op) / sizeof(wc_op[0]); i++) {
		wc = next_wc(cq, "local ops");
		SVT_CHECK_MSG(wc.wr_id == i && wc.status == IBV_WC_SUCCESS && wc.opcode == wc_op[i],
			      "local ops: completion %llu: wr_id %llu opcode %d status %s",
			      (unsigned long long)i, (unsigned long long)wc.wr_id, wc.opcode,
			      ibv_wc_status_str(wc.status));
	}
	SVT_CHECK_MEM(rbuf, rdata, sizeof(rdata));
	SVT_CHECK_EQ(ibv_poll_cq(cq, 1, &wc), 0); /* none twice */

	/* bound once, with k2: the peer writes through it; k1 was invalidated */
	syn = peer_write(RQ_PSN, (uintptr_t)win, k2, 64, 9);
	SVT_CHECK_MSG((syn & SV_AETH_TYPE_MASK) == SV_AETH_ACK,
		      "local ops: the WRITE through the window's key: syndrome %#x", syn);
	SVT_CHECK_FILL(win, 64, 9);
	syn = peer_write(RQ_PSN + 1, (uintptr_t)win + 64, k1, 64, 10);
	SVT_CHECK_MSG(syn == (SV_AETH_NAK | SV_NAK_REM_ACCESS),
		      "local ops: the WRITE through the invalidated key: syndrome %#x", syn);
	svt_log("local ops: resent without them, each completed once, the window bound once");
	SVT_CHECK_OK(ibv_destroy_qp(qp));
	SVT_CHECK_OK(ibv_dealloc_mw(mw));
	SVT_CHECK_OK(ibv_dereg_mr(win_mr));
	free(win);
}

/*
 * A local operation that fails while a WRITE before it is unacknowledged:
 * WRITE (LOP_WPKTS packets), BIND_MW to an MR without IBV_ACCESS_MW_BIND,
 * WRITE, and one more WRITE posted once the first has gone out.  Nothing
 * after the bind goes out: not when the last WRITE is posted, not when the
 * probe resends the first.  The first's ACK completes it, then the bind
 * with IBV_WC_MW_BIND_ERR, then both WRITEs with IBV_WC_WR_FLUSH_ERR.
 */
static void failed_local_case(struct svt_dev *d, struct ibv_cq *cq, uint8_t *buf,
			      struct ibv_mr *mr)
{
	static const enum ibv_wc_status want[] = { IBV_WC_SUCCESS, IBV_WC_MW_BIND_ERR,
						   IBV_WC_WR_FLUSH_ERR, IBV_WC_WR_FLUSH_ERR };
	const uint32_t first = SQ_PSN, last = first + LOP_WPKTS - 1;
	struct ibv_mw *mw = ibv_alloc_mw(d->pd, IBV_MW_TYPE_2);
	struct ibv_qp *qp = peer_qp(d, cq);
	uint32_t expect = first, p;
	struct ibv_wc wc;
	uint8_t op;

	SVT_CHECK_PTR(mw);
	post_write(qp, 0, buf, LOP_WPKTS * MTU, mr->lkey);
	post_bind(qp, 1, IBV_SEND_SIGNALED, mw, ibv_inc_rkey(mw->rkey), mr); /* no MW_BIND */
	post_write(qp, 2, buf, MTU, mr->lkey);
	while (expect != last + 1) {
		SVT_CHECK_MSG(next_packet(5000, &p, &op), "failed bind: PSN %u never came", expect);
		SVT_CHECK_MSG(p - first < LOP_WPKTS, "failed bind: PSN %u went out after it", p);
		if (p == expect)
			expect++;
	}
	/* runs the requester: before the fix it went on after the failed bind */
	post_write(qp, 3, buf, MTU, mr->lkey);
	do {
		SVT_CHECK_MSG(next_packet(5000, &p, &op), "failed bind: no retransmission");
		SVT_CHECK_MSG(p - first < LOP_WPKTS, "failed bind: PSN %u went out after it", p);
	} while (p != first);
	for (expect = first + 1; expect != last + 1;) {
		SVT_CHECK_MSG(next_packet(5000, &p, &op), "failed bind: PSN %u never came again",
			      expect);
		SVT_CHECK_MSG(p - first < LOP_WPKTS, "failed bind: PSN %u went out after it", p);
		if (p == expect)
			expect++;
	}
	send_ack(last);
	for (uint64_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		wc = next_wc(cq, "failed bind");
		SVT_CHECK_MSG(wc.wr_id == i && wc.status == want[i],
			      "failed bind: completion %llu: wr_id %llu status %s, expected %s",
			      (unsigned long long)i, (unsigned long long)wc.wr_id,
			      ibv_wc_status_str(wc.status), ibv_wc_status_str(want[i]));
	}
	SVT_CHECK_EQ(ibv_poll_cq(cq, 1, &wc), 0);
	while (next_packet(50, &p, &op)) /* resends still on their way */
		SVT_CHECK_MSG(p - first < LOP_WPKTS, "failed bind: PSN %u went out after it", p);
	svt_log("failed bind: nothing after it went out; completed, then flushed");
	SVT_CHECK_OK(ibv_destroy_qp(qp));
	SVT_CHECK_OK(ibv_dealloc_mw(mw));
}

/*
 * A NAK that comes late, after the probe went back: for a PSN the
 * requester sent before and is sending again, beyond what it has resent so
 * far (the halved window stopped it in the first WRITE).  WRITEs of 40 and
 * 8 packets; once the probe has resent the first PSN the peer NAKs, as the
 * responder would have answered the first transmission:
 *
 *   - remote access at the second WRITE's first PSN: the first completes
 *     (the NAK acknowledges every PSN before it), the second ends in
 *     IBV_WC_REM_ACCESS_ERR;
 *   - remote operation at a PSN in the first WRITE, past the resent part:
 *     it ends in IBV_WC_REM_OP_ERR, the second is flushed;
 *   - PSN sequence at a PSN in the second WRITE: the first completes, the
 *     second goes out again and completes at its ACK.
 *
 * Before the fix each NAK was dropped as stale, and the requester went on
 * resending from the first PSN to a peer that answers nothing more: after
 * a remote error NAK a real responder is in ERR and does the same, and the
 * first WRITE ended in IBV_WC_RETRY_EXC_ERR.  (After a sequence NAK a real
 * responder would ACK the resent duplicates that ask for it, which gets
 * the requester there more slowly; this peer waits for the PSN it asked
 * for, and the second WRITE never came.)
 */
#define NAK_W1 40
#define NAK_W2 8

static void nak_case(const char *name, struct svt_dev *d, struct ibv_cq *cq, uint8_t *buf,
		     uint32_t lkey, uint32_t nak_off, uint8_t code, enum ibv_wc_status want1,
		     enum ibv_wc_status want2)
{
	const uint32_t first = SQ_PSN, total = NAK_W1 + NAK_W2;
	const enum ibv_wc_status want[2] = { want1, want2 };
	struct ibv_qp *qp = peer_qp(d, cq);
	uint32_t expect = first, p;
	struct ibv_wc wc;
	uint8_t op;

	post_write(qp, 0, buf, NAK_W1 * MTU, lkey);
	post_write(qp, 1, buf, NAK_W2 * MTU, lkey);
	while (expect != first + total) {
		SVT_CHECK_MSG(next_packet(5000, &p, &op), "%s: PSN %u never came", name, expect);
		if (p == expect)
			expect++;
	}
	/* the probe goes back to the first PSN; its window (halved: 32
	 * packets at most) ends before nak_off */
	do {
		SVT_CHECK_MSG(next_packet(5000, &p, &op), "%s: no retransmission", name);
	} while (p != first);
	send_aeth(SV_OP_ACK, first + nak_off, SV_AETH_NAK | code, NULL, 0);
	if (code == SV_NAK_PSN_SEQ) {
		/* the second WRITE goes out again, to its last PSN */
		do {
			SVT_CHECK_MSG(next_packet(5000, &p, &op), "%s: the second WRITE never came",
				      name);
			SVT_CHECK_MSG(p - first < total, "%s: PSN %u sent", name, p);
		} while (p != first + total - 1);
		send_ack(p);
	}
	for (int i = 0; i < 2; i++) {
		wc = next_wc(cq, name);
		SVT_CHECK_MSG(wc.wr_id == (uint64_t)i && wc.status == want[i],
			      "%s: completion %d: wr_id %llu status %s, expected %s", name, i,
			      (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status),
			      ibv_wc_status_str(want[i]));
	}
	SVT_CHECK_EQ(ibv_poll_cq(cq, 1, &wc), 0);
	svt_log("%s: taken", name);
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
	local_ops_case(&d, cq, buf, mr);
	failed_local_case(&d, cq, buf, mr);
	nak_case("late access NAK", &d, cq, buf, mr->lkey, NAK_W1, SV_NAK_REM_ACCESS,
		 IBV_WC_SUCCESS, IBV_WC_REM_ACCESS_ERR);
	nak_case("late operation NAK", &d, cq, buf, mr->lkey, NAK_W1 - 4, SV_NAK_REM_OP,
		 IBV_WC_REM_OP_ERR, IBV_WC_WR_FLUSH_ERR);
	nak_case("late sequence NAK", &d, cq, buf, mr->lkey, NAK_W1 + 4, SV_NAK_PSN_SEQ,
		 IBV_WC_SUCCESS, IBV_WC_SUCCESS);
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	SVT_CHECK_OK(ibv_destroy_cq(cq));
	svt_dev_close(&d);
	close(peer.fd);
	free(buf);
	return 0;
}
