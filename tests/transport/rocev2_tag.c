/*
 * transport_rocev2_tag: RoCEv2 in a job with SOFTVERBS_SECRET, against a
 * peer that speaks the wire itself (src/transport/roce_wire.h, auth.h,
 * docs/SECURITY.md "RoCEv2").
 *
 * The process sets SOFTVERBS_SECRET; its device (sv_lo over rocev2) has an
 * RC QP connected to a peer this test plays: a UDP socket on
 * 127.0.0.N:4791 (N >= 2) that encodes and decodes datagrams with the
 * transport's own codec, knowing the QP's number, its PSNs and the MR's
 * rkey, as an off-path injector that guessed them would.  With the tag key
 * derived from the same secret (auth.c compiled into this test) it is the
 * real peer; without it, an injector.
 *
 *   1. A WRITE ONLY (AckReq) at the expected PSN with a valid ICRC (what
 *      rxe or any standard RoCEv2 sender makes), one tagged with another
 *      secret's key, one tagged right but with a payload byte changed, and
 *      one whose tag is right for PSN E+1 with its PSN set to E: no answer,
 *      the memory unchanged, each counted in rx_bad_tag_drops.
 *   2. Then the WRITE tagged with the secret's key at that same PSN:
 *      written, and ACKed at that PSN with MSN 1 (none of the four moved the
 *      QP's PSN or message count), the ACK tagged (it does not decode as
 *      standard RoCEv2), the QP in RTS.
 *   3. The QP as requester: its WRITE reaches the peer tagged; an ACK with
 *      a valid ICRC, and a CNP with one, are dropped and counted (no
 *      completion, cnp_received unchanged); the tagged ACK completes it.
 * Root: in a network namespace of its own, where no other test's datagram
 * (another fake peer's, on 127.0.0.2 too) can add to the counts.
 */
#include "sv_test.h"
#include "svt_counters.h"
#include "common/util.h"
#include "wire/opcode.h"
#include "wire/wire.h"
#include "transport/auth.h"
#include "transport/roce_wire.h"
#include "wire_peer.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sodium.h>
#include <sys/socket.h>
#include <unistd.h>

#define SECRET "rocev2 tag test secret, 39 bytes long."
#define MTU 1024
#define SQ_PSN 0x20
#define RQ_PSN 0x5000
#define PEER_QPN 0x7fe000u
#define REMOTE_VA 0x200000ull
#define REMOTE_RKEY 0x5151u
#define LEN 256

static struct {
	int fd;
	struct sockaddr_in self, dev; /* the peer's address; the device's, port 4791 */
	uint32_t qpn;		      /* the device's QP */
} peer;

static uint8_t other_key[SV_ROCE_TAG_KEY];

static void peer_open(void)
{
	int pmtu = IP_PMTUDISC_DO;

	peer.fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	SVT_CHECK(peer.fd >= 0);
	SVT_CHECK_OK(setsockopt(peer.fd, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof(pmtu)));
	for (int n = 2; n < 64; n++) {
		memset(&peer.self, 0, sizeof(peer.self));
		peer.self.sin_family = AF_INET;
		peer.self.sin_port = htons(SV_ROCE_UDP_PORT);
		peer.self.sin_addr.s_addr = htonl(0x7f000000u | (uint32_t)n);
		if (!bind(peer.fd, (struct sockaddr *)&peer.self, sizeof(peer.self)))
			break;
		if (n == 63)
			svt_skip("no address 127.0.0.N (N < 64) with UDP port 4791 free");
	}
	memset(&peer.dev, 0, sizeof(peer.dev));
	peer.dev.sin_family = AF_INET;
	peer.dev.sin_port = htons(SV_ROCE_UDP_PORT);
	peer.dev.sin_addr.s_addr = htonl(0x7f000001u);
}

static void path_of(struct sv_roce_path *p, const struct sockaddr_in *src,
		    const struct sockaddr_in *dst, const uint8_t *key)
{
	memset(p, 0, sizeof(*p));
	memcpy(p->src, &src->sin_addr, 4);
	memcpy(p->dst, &dst->sin_addr, 4);
	p->sport = ntohs(src->sin_port);
	p->dport = ntohs(dst->sin_port);
	p->tag_key = key;
}

/* A packet (BTH first) to the device, tagged with key (NULL: a valid ICRC);
 * flip: a byte of the datagram to change after it is encoded, or -1. */
static void peer_send(const void *pkt, size_t len, const uint8_t *key, int flip)
{
	uint8_t dg[SV_MAX_PACKET_LEN + 64];
	struct sv_roce_path path;
	size_t n;

	path_of(&path, &peer.self, &peer.dev, key);
	n = sv_roce_encode(&path, pkt, len, dg, sizeof(dg));
	SVT_CHECK(n > 0);
	if (flip >= 0)
		dg[flip] ^= 0x04;
	SVT_CHECK_EQ(sendto(peer.fd, dg, n, 0, (struct sockaddr *)&peer.dev, sizeof(peer.dev)),
		     (ssize_t)n);
}

/*
 * The next datagram from the device within timeout_ms, decoded with the
 * tag key into pkt (its length), or 0.  Each must be tagged: one that
 * decodes as standard RoCEv2 fails the test.
 */
static int peer_recv(uint8_t *pkt, size_t cap, int timeout_ms)
{
	uint8_t raw[SV_MAX_PACKET_LEN + 64];
	struct pollfd pfd = { .fd = peer.fd, .events = POLLIN };
	struct sockaddr_in from;
	socklen_t fl = sizeof(from);
	struct sv_roce_path path;
	ssize_t n;
	int len;

	if (poll(&pfd, 1, timeout_ms) <= 0)
		return 0;
	n = recvfrom(peer.fd, raw, sizeof(raw), 0, (struct sockaddr *)&from, &fl);
	SVT_CHECK(n > 0);
	path_of(&path, &from, &peer.self, NULL);
	SVT_CHECK_MSG(sv_roce_decode(&path, raw, (size_t)n, pkt, cap, NULL) == SV_ROCE_BAD_ICRC,
		      "the device sent a standard RoCEv2 datagram in a job with a secret");
	path.tag_key = sv_auth_roce_key();
	len = sv_roce_decode(&path, raw, (size_t)n, pkt, cap, NULL);
	SVT_CHECK_MSG(len >= (int)sizeof(struct sv_bth), "the device's datagram refused: %d", len);
	return len;
}

/* A WRITE ONLY (AckReq) of LEN bytes of fill at psn to (va, rkey). */
static size_t write_pkt(uint8_t *pkt, uint32_t psn, uint64_t va, uint32_t rkey, uint8_t fill)
{
	size_t n = svt_wire_bth_flags(pkt, SV_OP_RC | SV_OP_WRITE_ONLY, SV_BTH_ACKREQ, peer.qpn, psn);
	struct sv_reth r = { htobe64(va), htonl(rkey), htonl(LEN) };

	memcpy(pkt + n, &r, sizeof(r));
	n += sizeof(r);
	memset(pkt + n, fill, LEN);
	return n + LEN;
}

static uint64_t bad_tags(void)
{
	return svt_ctx_counter(SV_CTXC_RX_BAD_TAG);
}

static bool all(const uint8_t *p, uint8_t v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != v)
			return false;
	return true;
}

int main(void)
{
	struct svt_dev d;
	struct svt_qp_init qi;
	struct svt_conn c;
	union ibv_gid pgid;
	struct ibv_qp_attr attr;
	struct ibv_qp_init_attr ia;
	struct ibv_wc wc;
	uint8_t pkt[SV_MAX_PACKET_LEN + 64], rx[SV_MAX_PACKET_LEN + 64];
	uint8_t *mem = svt_alloc(4 * LEN);
	uint64_t before;
	bool own_ns;
	int n;

	svt_watchdog(100);
	own_ns = svt_private_netns();
	setenv("SOFTVERBS_TRANSPORT", "rocev2", 1);
	setenv("SOFTVERBS_SECRET", SECRET, 1);
	SVT_CHECK(sodium_init() >= 0);
	randombytes_buf(other_key, sizeof(other_key));
	peer_open();
	svt_dev_open(&d);
	struct ibv_cq *cq = svt_create_cq(d.ctx, 16, NULL);
	struct ibv_mr *mr = svt_reg_mr(d.pd, mem, 4 * LEN, SVT_ACCESS_ALL);

	/* the same secret's key, as the real peer holds it */
	SVT_CHECK_OK(sv_auth_init());
	SVT_CHECK(sv_auth_roce_keyed());
	SVT_CHECK_PTR(sv_auth_roce_key());

	svt_qp_init_default(&qi, IBV_QPT_RC);
	struct ibv_qp *qp = svt_create_qp(d.pd, cq, cq, &qi);

	peer.qpn = qp->qp_num;
	svt_conn_default(&c, IBV_QPT_RC);
	c.path_mtu = IBV_MTU_1024;
	c.sgid_index = 3;
	c.sq_psn = SQ_PSN;
	c.rq_psn = RQ_PSN;
	c.timeout = 18; /* 1 s: nothing is sent again while the peer looks */
	c.retry_cnt = 3;
	memset(&pgid, 0, sizeof(pgid));
	pgid.raw[10] = pgid.raw[11] = 0xff;
	memcpy(&pgid.raw[12], &peer.self.sin_addr, 4);
	svt_qp_connect(qp, &c, &pgid, PEER_QPN);

	/* 1. injected at the right QPN, PSN and rkey, without the secret's tag */
	memset(mem, 0x11, 4 * LEN);
	before = bad_tags();
	{
		size_t len = write_pkt(pkt, RQ_PSN, (uintptr_t)mem, mr->rkey, 0xee);
		uint8_t next[SV_MAX_PACKET_LEN + 64];
		uint8_t dg[SV_MAX_PACKET_LEN + 64];
		struct sv_roce_path path;
		size_t m;

		peer_send(pkt, len, NULL, -1);		       /* a valid ICRC */
		peer_send(pkt, len, other_key, -1);	       /* another secret */
		peer_send(pkt, len, sv_auth_roce_key(), 100); /* changed on the way */
		/* a tagged packet for PSN E+1 replayed with its PSN set to E */
		write_pkt(next, RQ_PSN + 1, (uintptr_t)mem, mr->rkey, 0xee);
		path_of(&path, &peer.self, &peer.dev, sv_auth_roce_key());
		m = sv_roce_encode(&path, next, len, dg, sizeof(dg));
		SVT_CHECK(m > 0);
		dg[11] = (uint8_t)RQ_PSN; /* the PSN's low byte */
		SVT_CHECK_EQ(sendto(peer.fd, dg, m, 0, (struct sockaddr *)&peer.dev,
				    sizeof(peer.dev)),
			     (ssize_t)m);
	}
	n = peer_recv(rx, sizeof(rx), 400);
	SVT_CHECK_MSG(n == 0, "an untagged or mistagged WRITE drew an answer (opcode %#x)", rx[0]);
	SVT_CHECK_MSG(all(mem, 0x11, 4 * LEN), "an untagged or mistagged WRITE was placed");
	for (int i = 0; i < 50 && bad_tags() - before < 4; i++)
		usleep(10000);
	SVT_CHECK_EQ(bad_tags() - before, 4);
	svt_log("a WRITE at the expected PSN with a valid ICRC, another secret's tag, a byte "
		"changed, another PSN's tag: no answer, nothing placed, rx_bad_tag_drops +4");

	/* 2. the same WRITE with the secret's tag: taken at that PSN, MSN 1 */
	{
		size_t len = write_pkt(pkt, RQ_PSN, (uintptr_t)mem, mr->rkey, 0xee);
		const struct sv_aeth *a = (const void *)(rx + sizeof(struct sv_bth));
		const struct sv_bth *b = (const void *)rx;

		peer_send(pkt, len, sv_auth_roce_key(), -1);
		n = peer_recv(rx, sizeof(rx), 3000);
		SVT_CHECK_MSG(n >= (int)(sizeof(*b) + sizeof(*a)), "no ACK of the tagged WRITE");
		SVT_CHECK_EQ(b->opcode, SV_OP_RC | SV_OP_ACK);
		SVT_CHECK_EQ(ntohl(b->psn) & SV_PSN_MASK, RQ_PSN);
		SVT_CHECK_EQ(ntohl(b->dqpn) & SV_PSN_MASK, PEER_QPN);
		SVT_CHECK_EQ(ntohl(a->syn_msn) >> 29, 0u);	 /* an ACK */
		SVT_CHECK_EQ(ntohl(a->syn_msn) & 0xffffffu, 1u); /* MSN 1 */
		SVT_CHECK(all(mem, 0xee, LEN) && all(mem + LEN, 0x11, 3 * LEN));
	}
	SVT_CHECK_OK(ibv_query_qp(qp, &attr, IBV_QP_STATE, &ia));
	SVT_CHECK_EQ(attr.qp_state, IBV_QPS_RTS);
	svt_log("the tagged WRITE at that PSN: placed, ACKed (tagged) at the PSN with MSN 1, QP in "
		"RTS");

	/* 3. the QP as requester: forged ACK and CNP with valid ICRCs ignored */
	{
		const struct sv_bth *b = (const void *)rx;
		struct sv_aeth ack = { htonl(SV_AETH_ACK << 24 | 1) };
		int64_t cnps = svt_qp_counter(qp->qp_num, PEER_QPN, SV_QPC_CNP_RCVD);
		size_t len;

		SVT_CHECK_OK(svt_post_send(qp, 9, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, mem + LEN,
					   LEN, mr->lkey, REMOTE_VA, REMOTE_RKEY, 0));
		n = peer_recv(rx, sizeof(rx), 3000);
		SVT_CHECK_MSG(n == (int)(sizeof(*b) + sizeof(struct sv_reth) + LEN),
			      "the requester's WRITE did not come (%d)", n);
		SVT_CHECK_EQ(b->opcode, SV_OP_RC | SV_OP_WRITE_ONLY);
		SVT_CHECK_EQ(ntohl(b->psn) & SV_PSN_MASK, SQ_PSN);
		before = bad_tags();
		len = svt_wire_bth_flags(pkt, SV_OP_RC | SV_OP_ACK, 0, peer.qpn, SQ_PSN);
		memcpy(pkt + len, &ack, sizeof(ack));
		peer_send(pkt, len + sizeof(ack), NULL, -1);
		len = svt_wire_bth_flags(pkt, SV_OP_CNP, 0, peer.qpn, 0);
		memset(pkt + len, 0, 16);
		peer_send(pkt, len + 16, NULL, -1);
		for (int i = 0; i < 50 && bad_tags() - before < 2; i++)
			usleep(10000);
		SVT_CHECK_EQ(bad_tags() - before, 2);
		SVT_CHECK_EQ(ibv_poll_cq(cq, 1, &wc), 0);
		SVT_CHECK_EQ(svt_qp_counter(qp->qp_num, PEER_QPN, SV_QPC_CNP_RCVD), cnps);
		len = svt_wire_bth_flags(pkt, SV_OP_RC | SV_OP_ACK, 0, peer.qpn, SQ_PSN);
		memcpy(pkt + len, &ack, sizeof(ack));
		peer_send(pkt, len + sizeof(ack), sv_auth_roce_key(), -1);
		svt_poll_ok(cq, 1, &wc, 5000);
		SVT_CHECK_EQ(wc.wr_id, 9u);
	}
	svt_log("the requester's WRITE tagged; an ACK and a CNP with valid ICRCs dropped and "
		"counted, no completion, no CNP taken; the tagged ACK completes it");

	SVT_CHECK_OK(ibv_destroy_qp(qp));
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	SVT_CHECK_OK(ibv_destroy_cq(cq));
	svt_dev_close(&d);
	close(peer.fd);
	free(mem);
	if (own_ns)
		svt_private_netns_done();
	return 0;
}
