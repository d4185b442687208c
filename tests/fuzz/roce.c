/*
 * libFuzzer harness: the RoCEv2 transport as a hostile network peer sees
 * it.  A live device in this process (SOFTVERBS_TRANSPORT=rocev2, its
 * listener on UDP port 4791 of the device's address, 127.0.0.1 for sv_lo)
 * holds an RC, a UC and a UD QP connected to a peer at that same address
 * (GID ::ffff:127.0.0.1, index 3) whose QPN exists nowhere: the last of
 * this context's own block, so whatever the QPs send or answer (ACKs,
 * NAKs, READ responses, CNPs, their own requests) comes back to the
 * device's listener and is dropped there as a packet for no QP, after
 * its ICRC was checked.  The harness is that peer: a UDP socket of its own
 * on the device's address (an ephemeral port) sends each datagram of an
 * input to port 4791, so everything the kernel hands the listener is
 * reached: rocev2_recv (the QPN's owner, the TOS, forwarding), the decoder
 * (version, opcode, lengths, pad, the ICRC and the IPv4 identification
 * search), the admission of the sender, the engine's dispatch, from_peer,
 * the responder, the completer, the congestion control (CE marks in the
 * IP header and FECN in the BTH draw CNPs; CNPs halve an RC window).
 *
 * Why the peer is the device's own address, not one of its own where the
 * harness would hear the answers (127.0.0.2:4791, say): that port is not
 * the harness's to take.  Any softverbs context on that address binds it
 * (SO_REUSEPORT, same user), and the kernel would share their datagrams
 * with the harness's socket; nor does any namespace trick keep the harness
 * runnable wherever CTest runs it.  The answers are not needed: what the
 * engine did shows in its coverage and in the sanitizers, and the sync
 * below says when it is done.
 *
 * An input is a setup byte and then records, each one datagram:
 *
 *   input  := setup  record*            (at most MAX_RECORDS records)
 *   setup  := bits 0-2 what the RC QP posts before the records, so that
 *                      the records' responses have a request to answer:
 *                      0 nothing, 1 SEND 64 B, 2 SEND of 3 packets, 3 WRITE
 *                      64 B, 4 WRITE of 3 packets, 5 READ 64 B, 6 READ of 3
 *                      packets, 7 an atomic (FETCH_ADD, COMPARE_SWAP, ...);
 *             bits 3-4 how many of them (1-4);
 *             bits 5-6 the QPs' path MTU: 4096, 1024, 256, 512;
 *             bit 7    the UC QP posts a SEND of 64 B too
 *   record := kind aux len_hi len_lo body[len]   (len clipped to the input)
 *   kind   := bits 0-1 mode: 0 raw (body is the UDP payload as is), 1 and
 *                      3 packet (body is a softverbs packet, engine/wire.h,
 *                      byte 1 softverbs' own flags: encoded with a valid
 *                      ICRC by sv_roce_encode), 2 CNP (a valid one; the
 *                      body's first 3 bytes, if any, are its PSN);
 *             bits 2-3 target: the RC, UC, UD QP, or 3: a QPN of this
 *                      context's block where there is no QP (packet, CNP);
 *             bit 4    keys: RETH/AtomicETH rkey and address into the
 *                      registered buffer, DETH Q_Key the QPs', IETH the
 *                      window's rkey (nobody guesses a random key);
 *             bit 5    the rkey is the type 2 window's (bound to the RC QP)
 *                      rather than the MR's;
 *             bit 6    the PSN is the body's plus the number of earlier
 *                      records of this input with bit 6 to the same
 *                      target: in-order sequences survive mutation
 *   aux    := bits 0-1 the IP ECN codepoint the datagram is sent with (3:
 *                      CE, a congested hop's mark);
 *             bit 2    BTH byte 4 (FECN, BECN, 6 reserved bits; not under
 *                      the ICRC) as the body has it, not as encoded;
 *             bit 3    the ICRC computed for a nonzero IPv4 identification
 *                      (the kernel sends 0): the decoder's search for one
 *                      that explains the ICRC (rxe's datagrams);
 *             bit 4    sent from another address of the host (the device's
 *                      + 1, 127.0.0.2): admitted, but not the QPs' peer;
 *             bit 5    the ICRC spoiled (one byte flipped);
 *             bit 6    512 more bytes after the ICRC (a datagram longer
 *                      than the packet it carries, or than the listener's
 *                      buffer)
 *
 * In raw mode a destination QPN in another context's block is moved into
 * this context's: the listener would pass the datagram on to whichever
 * context of the host owns that block (another test's), and a hostile
 * datagram is not this harness's to send to them.  Nor does raw mode name
 * the sync QP (below): its QPN becomes the peer's.
 *
 * Each input starts from known QP state: a QP that an earlier input touched
 * is reset and connected again (PSNs 0, receives posted; the RC QP's window
 * allocated and bound afresh), so that an input's behaviour is its own.
 * After the records a UD SEND to a fifth QP (the sync QP, which no record
 * can name) with a token: its receive completion means the engine has
 * taken everything the harness sent before it (one socket, one 4-tuple, so
 * the kernel hands them all to the same listener, in order).  A sync that
 * does not come back within half a second is sent again (under CTest other
 * contexts share the port, and one that ends may drop what it was passing
 * on); none in 10 s fails the run: the engine stopped taking datagrams.
 *
 * Whatever the datagrams, nothing may crash, leak, hang or touch memory it
 * was not given (AddressSanitizer, UndefinedBehaviorSanitizer).  The
 * library is built with coverage instrumentation where this harness exists
 * (clang, AddressSanitizer), so mutations are guided by the engine's code.
 */
#include "sv_test.h"
#include "common/util.h"
#include "engine/opcode.h"
#include "engine/wire.h"
#include "transport/registry.h"
#include "transport/roce_wire.h"

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MEM_LEN (128 * 1024) /* receives in the first half, sends from the second */
#define LOCAL_OFF (64 * 1024)
#define NRECV 64
#define MAX_RECORDS 64
#define MAX_DGRAM 9000 /* beyond the listener's buffer (SV_DGRAM_RAW_MAX) */
#define TRAILER 512
#define QKEY 0x11111111u
#define SYNC_MAGIC 0x5356594eu /* "SVYN" */
#define NSYNC 8
#define SYNC_SLOT 128
#define GRH_LEN 40

enum { T_RC, T_UC, T_UD, NTARGETS };

static struct svt_dev d;
static struct ibv_cq *tcq, *scq;
static struct ibv_mr *mr, *smr;
static struct ibv_mw *mw;
static uint8_t *mem, *smem;
static struct ibv_qp *qp[NTARGETS], *sync_qp;
static const enum ibv_qp_type types[NTARGETS] = { IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD };
static bool dirty[NTARGETS];
static enum ibv_mtu cur_mtu = IBV_MTU_4096;
static union ibv_gid peer_gid; /* the device's own IPv4 RoCEv2 GID */
static uint32_t qpn_base, fake_qpn;
static struct in_addr dev_ip, alt_ip;
static int fd = -1, alt_fd = -1;
static uint16_t port, alt_port; /* host order */
static struct sockaddr_in to;
static uint64_t sync_tok;
static uint8_t dg[MAX_DGRAM + 64 + TRAILER], pkt[MAX_DGRAM + 64];

static const enum ibv_mtu mtus[4] = { IBV_MTU_4096, IBV_MTU_1024, IBV_MTU_256, IBV_MTU_512 };

static uint32_t mtu_bytes(enum ibv_mtu m)
{
	return 128u << m;
}

static int udp_socket(struct in_addr ip, uint16_t *p)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr = ip };
	socklen_t sl = sizeof(sa);
	int pmtu = IP_PMTUDISC_DO, big = 4 << 20;
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	SVT_CHECK(s >= 0);
	/* DF and identification 0, what the encoder's ICRC assumes (roce_wire.h) */
	SVT_CHECK_OK(setsockopt(s, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof(pmtu)));
	(void)setsockopt(s, SOL_SOCKET, SO_SNDBUF, &big, sizeof(big));
	if (bind(s, (struct sockaddr *)&sa, sizeof(sa)) ||
	    getsockname(s, (struct sockaddr *)&sa, &sl)) {
		close(s);
		return -1;
	}
	*p = ntohs(sa.sin_port);
	return s;
}

static void post_recvs(struct ibv_qp *q)
{
	for (int i = 0; i < NRECV; i++)
		if (svt_post_recv(q, (uint64_t)i, mem + (i % 16) * 4096, 4096, mr->lkey))
			break;
}

static void drain_tcq(void)
{
	struct ibv_wc wc[64];

	while (ibv_poll_cq(tcq, 64, wc) > 0)
		;
}

/* A type 2 window over the whole buffer, bound to the RC QP (for SEND with
 * invalidate, and remote accesses through a window). */
static void bind_window(void)
{
	struct ibv_send_wr wr = { .opcode = IBV_WR_BIND_MW }, *bad;
	uint64_t end = svt_now_ms() + SVT_TIMEOUT_MS;
	struct ibv_wc wc;

	if (mw)
		SVT_CHECK_OK(ibv_dealloc_mw(mw));
	mw = ibv_alloc_mw(d.pd, IBV_MW_TYPE_2);
	SVT_CHECK_PTR(mw);
	wr.wr_id = 0xb1d;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
	wr.bind_mw.bind_info.mr = mr;
	wr.bind_mw.bind_info.addr = (uintptr_t)mem;
	wr.bind_mw.bind_info.length = MEM_LEN;
	wr.bind_mw.bind_info.mw_access_flags =
		IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	SVT_CHECK_OK(ibv_post_send(qp[T_RC], &wr, &bad));
	for (;;) {
		int n = ibv_poll_cq(tcq, 1, &wc);

		SVT_CHECK(n >= 0);
		if (n && wc.wr_id == 0xb1d) {
			SVT_CHECK_MSG(wc.status == IBV_WC_SUCCESS, "bind: %s",
				      ibv_wc_status_str(wc.status));
			return;
		}
		SVT_CHECK_MSG(svt_now_ms() < end, "no completion of the window's bind");
	}
}

/* Target i connected to the fake peer afresh: PSNs 0, receives posted. */
static void connect_target(int i)
{
	struct svt_conn c;

	svt_conn_default(&c, types[i]);
	c.sq_psn = 0;
	c.rq_psn = 0;
	c.path_mtu = cur_mtu;
	c.timeout = 20; /* no ack timeout within an input */
	c.hop_limit = 64;
	if (svt_qp_state(qp[i]) != IBV_QPS_RESET)
		SVT_CHECK_OK(svt_qp_to_state(qp[i], IBV_QPS_RESET));
	svt_qp_connect(qp[i], &c, &peer_gid, fake_qpn);
	post_recvs(qp[i]);
	if (types[i] == IBV_QPT_RC)
		bind_window();
	dirty[i] = false;
}

static void setup(void)
{
	struct svt_qp_init qi;
	union ibv_gid g;

	setenv("SOFTVERBS_TRANSPORT", "rocev2", 1);
	setenv("SOFTVERBS_LOG", "error", 0);
	unsetenv("SOFTVERBS_ROCEV2_PEERS"); /* the device's subnet: 127.0.0.0/8 on lo */
	unsetenv("SOFTVERBS_FAULTS");
	svt_dev_open(&d);
	SVT_CHECK_OK(ibv_query_gid(d.ctx, 1, 3, &g)); /* ::ffff:a.b.c.d, RoCE v2 */
	peer_gid = g;
	memcpy(&dev_ip.s_addr, g.raw + 12, 4);
	tcq = svt_create_cq(d.ctx, 4096, NULL);
	scq = svt_create_cq(d.ctx, 64, NULL);
	mem = svt_alloc(MEM_LEN);
	smem = svt_alloc(NSYNC * SYNC_SLOT);
	mr = svt_reg_mr(d.pd, mem, MEM_LEN, SVT_ACCESS_ALL | IBV_ACCESS_MW_BIND);
	smr = svt_reg_mr(d.pd, smem, NSYNC * SYNC_SLOT, IBV_ACCESS_LOCAL_WRITE);
	for (int i = 0; i < NTARGETS; i++) {
		svt_qp_init_default(&qi, types[i]);
		qp[i] = svt_create_qp(d.pd, tcq, tcq, &qi);
	}
	svt_qp_init_default(&qi, IBV_QPT_UD);
	sync_qp = svt_create_qp(d.pd, scq, scq, &qi);
	svt_qp_connect(sync_qp, NULL, NULL, 0);
	for (int k = 0; k < NSYNC; k++)
		SVT_CHECK_OK(svt_post_recv(sync_qp, (uint64_t)k, smem + k * SYNC_SLOT, SYNC_SLOT,
					   smr->lkey));
	/* the peer: this context's last QPN, which no QP here takes */
	qpn_base = sync_qp->qp_num & ~(SV_QPN_BLOCK - 1);
	fake_qpn = qpn_base + SV_QPN_BLOCK - 1;
	for (int i = 0; i < NTARGETS; i++)
		connect_target(i);

	fd = udp_socket(dev_ip, &port);
	SVT_CHECK_MSG(fd >= 0, "bind %s: %s", inet_ntoa(dev_ip), strerror(errno));
	alt_ip.s_addr = htonl(ntohl(dev_ip.s_addr) + 1);
	if ((ntohl(dev_ip.s_addr) >> 24) == 127)
		alt_fd = udp_socket(alt_ip, &alt_port);
	to = (struct sockaddr_in){ .sin_family = AF_INET, .sin_port = htons(SV_ROCE_UDP_PORT),
				   .sin_addr = dev_ip };
	fprintf(stderr,
		"fuzz_roce: device %s at %s:4791; targets RC 0x%06x UC 0x%06x UD 0x%06x, "
		"sync 0x%06x, their peer 0x%06x; rkey 0x%x (window 0x%x) at %p; peer port %u%s\n",
		ibv_get_device_name(d.ctx->device), inet_ntoa(dev_ip), qp[T_RC]->qp_num,
		qp[T_UC]->qp_num, qp[T_UD]->qp_num, sync_qp->qp_num, fake_qpn, mr->rkey,
		mw->rkey, (void *)mem, port, alt_fd >= 0 ? "" : " (no second address)");
}

/* One datagram to the listener, with IP ECN codepoint ecn. */
static void send_dgram(int s, const uint8_t *p, size_t n, int ecn)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec v = { (void *)p, n };
	struct msghdr mh = { .msg_name = &to, .msg_namelen = sizeof(to), .msg_iov = &v,
			     .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf) };
	struct cmsghdr *cm;
	int tos = ecn & 3;

	memset(&u, 0, sizeof(u));
	cm = CMSG_FIRSTHDR(&mh);
	cm->cmsg_level = IPPROTO_IP;
	cm->cmsg_type = IP_TOS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &tos, sizeof(tos));
	while (sendmsg(s, &mh, 0) < 0) {
		if (errno == ENOBUFS || errno == EAGAIN) {
			sched_yield(); /* the listener is behind: let it read */
			continue;
		}
		/* EMSGSIZE: over lo's MTU, as a link would refuse it */
		SVT_CHECK_MSG(errno == EMSGSIZE, "sendmsg: %s", strerror(errno));
		return;
	}
}

static uint32_t target_qpn(int t, uint32_t in)
{
	/* 3: a number of this block that no QP has (the sync QP is never named) */
	return t < NTARGETS ? qp[t]->qp_num : qpn_base + 0x3000 + (in & 0xfff);
}

/* Keys and addresses of the real buffer, the UD Q_Key, the window's rkey. */
static void patch_keys(uint8_t *p, size_t len, const struct sv_opcode_info *op, bool by_window)
{
	uint32_t rkey = htonl(by_window ? mw->rkey : mr->rkey);
	size_t at = op->off_reth ? op->off_reth : op->off_atmeth;

	if (at && at + 12 <= len) {
		uint64_t va;

		memcpy(&va, p + at, 8);
		va = (uintptr_t)mem + be64toh(va) % MEM_LEN;
		va = htobe64(op->off_atmeth ? va & ~7ull : va);
		memcpy(p + at, &va, 8);
		memcpy(p + at + 8, &rkey, 4);
	}
	if (op->off_deth && op->off_deth + 4u <= len) {
		uint32_t q = htonl(QKEY);

		memcpy(p + op->off_deth, &q, 4);
	}
	if (op->off_ieth && op->off_ieth + 4u <= len) {
		uint32_t w = htonl(mw->rkey);

		memcpy(p + op->off_ieth, &w, 4);
	}
}

static void send_record(uint8_t kind, uint8_t aux, const uint8_t *body, size_t len,
			unsigned *auto_psn)
{
	int mode = kind & 3, t = (kind >> 2) & 3;
	bool alt = (aux & 0x10) && alt_fd >= 0;
	struct sv_roce_path path = { .sport = alt ? alt_port : port, .dport = SV_ROCE_UDP_PORT };
	const struct sv_opcode_info *op;
	uint32_t w;
	size_t n;

	if (mode == 0) {
		/* raw: as it is, but for a QPN of another context's block */
		memcpy(dg, body, len);
		if (len >= 8) {
			uint32_t q = (uint32_t)dg[5] << 16 | (uint32_t)dg[6] << 8 | dg[7];
			uint32_t b = q >> SV_QPN_BLOCK_SHIFT;

			if ((b && b != qpn_base >> SV_QPN_BLOCK_SHIFT && q != 0xffffffu) ||
			    q == sync_qp->qp_num) {
				/* and never the sync QP */
				q = q == sync_qp->qp_num ? fake_qpn
							 : qpn_base | (q & (SV_QPN_BLOCK - 1));
				dg[5] = (uint8_t)(q >> 16);
				dg[6] = (uint8_t)(q >> 8);
				dg[7] = (uint8_t)q;
			}
			for (int i = 0; i < NTARGETS; i++)
				dirty[i] |= q == qp[i]->qp_num;
		}
		send_dgram(alt ? alt_fd : fd, dg, len, aux);
		return;
	}
	if (mode == 2) {
		/* a CNP: BTH and 16 reserved bytes (annex A17.9.2) */
		struct sv_bth *b = (struct sv_bth *)pkt;

		memset(pkt, 0, sizeof(*b) + 16);
		b->opcode = SV_OP_CNP;
		b->pkey = 0xffff;
		b->dqpn = htonl(target_qpn(t, 0));
		if (len >= 3)
			b->psn = htonl((uint32_t)body[0] << 16 | (uint32_t)body[1] << 8 | body[2]);
		len = sizeof(*b) + 16;
	} else {
		if (len < sizeof(struct sv_bth)) {
			send_dgram(alt ? alt_fd : fd, body, len, aux);
			return;
		}
		memcpy(pkt, body, len);
		/* the destination, the rest of the word (on the wire FECN, BECN
		 * and reserved bits) as the input has it */
		memcpy(&w, pkt + 4, 4);
		w = htonl((ntohl(w) & ~SV_PSN_MASK) | target_qpn(t, ntohl(w)));
		memcpy(pkt + 4, &w, 4);
		/* the flags a wire can say (GPU references never cross one) */
		pkt[1] &= SV_BTH_SE | SV_BTH_ACKREQ;
		if ((kind & 0x10) && (op = sv_opcode_info(pkt[0])))
			patch_keys(pkt, len, op, kind & 0x20);
	}
	if ((kind & 0x40) && t < NTARGETS) {
		memcpy(&w, pkt + 8, 4);
		w = htonl((ntohl(w) & ~SV_PSN_MASK) | ((ntohl(w) + auto_psn[t]++) & SV_PSN_MASK));
		memcpy(pkt + 8, &w, 4);
	}
	if (t < NTARGETS)
		dirty[t] = true;
	memcpy(path.src, alt ? &alt_ip.s_addr : &dev_ip.s_addr, 4);
	memcpy(path.dst, &dev_ip.s_addr, 4);
	if (aux & 0x08)
		path.ip_id = (uint16_t)(0x100 | len); /* the kernel sends 0 */
	n = sv_roce_encode(&path, pkt, len, dg, sizeof(dg));
	if (!n) {
		/* an opcode softverbs does not know, or shorter than its
		 * headers: it goes as it is, for the decoder to refuse */
		send_dgram(alt ? alt_fd : fd, pkt, len, aux);
		return;
	}
	if (aux & 0x04)
		dg[4] = pkt[4]; /* FECN, BECN, reserved: outside the ICRC */
	if (aux & 0x20)
		dg[n - 1] ^= 0x5a;
	if (aux & 0x40) {
		/* bytes after the ICRC: a datagram longer than the packet */
		memset(dg + n, 0xee, TRAILER);
		n += TRAILER;
	}
	send_dgram(alt ? alt_fd : fd, dg, n, aux);
}

static void prepost(uint8_t s)
{
	int kind = s & 7, count = 1 + ((s >> 3) & 3);
	uint32_t big = 2 * mtu_bytes(cur_mtu) + 100;

	for (int i = 0; kind && i < count; i++) {
		uint8_t *buf = mem + LOCAL_OFF + (size_t)i * 12288;
		int r;

		switch (kind) {
		case 1:
		case 2:
			r = svt_post_send(qp[T_RC], 100 + (uint64_t)i, IBV_WR_SEND, IBV_SEND_SIGNALED,
					  buf, kind == 1 ? 64 : big, mr->lkey, 0, 0, 0);
			break;
		case 3: /* WRITE, 64 B or big */
		case 4:
		case 5: /* READ, 64 B or big */
		case 6:
			r = svt_post_send(qp[T_RC], 100 + (uint64_t)i,
					  kind <= 4 ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ,
					  IBV_SEND_SIGNALED, buf, kind & 1 ? 64 : big, mr->lkey,
					  0x10000, 0x1234, 0);
			break;
		default:
			r = svt_post_atomic(qp[T_RC], 100 + (uint64_t)i,
					    i & 1 ? IBV_WR_ATOMIC_CMP_AND_SWP
						  : IBV_WR_ATOMIC_FETCH_AND_ADD,
					    IBV_SEND_SIGNALED, buf, mr->lkey, 0x10000, 0x1234, 1, 2);
			break;
		}
		SVT_CHECK_OK(r);
		dirty[T_RC] = true;
	}
	if (s & 0x80) {
		SVT_CHECK_OK(svt_post_send(qp[T_UC], 200, IBV_WR_SEND, IBV_SEND_SIGNALED,
					   mem + LOCAL_OFF + 4 * 12288, 64, mr->lkey, 0, 0, 0));
		dirty[T_UC] = true;
	}
}

/* A UD SEND with a new token to the sync QP, encoded as the peer would. */
static void send_sync(void)
{
	struct {
		struct sv_bth bth;
		struct sv_deth deth;
		uint32_t magic;
		uint64_t tok;
	} __attribute__((packed)) p;
	struct sv_roce_path path = { .sport = port, .dport = SV_ROCE_UDP_PORT };
	size_t n;

	memset(&p, 0, sizeof(p));
	p.bth.opcode = SV_OP_UD | SV_OP_SEND_ONLY;
	p.bth.pkey = 0xffff;
	p.bth.dqpn = htonl(sync_qp->qp_num);
	p.deth.qkey = htonl(QKEY);
	p.deth.sqpn = htonl(fake_qpn);
	p.magic = SYNC_MAGIC;
	p.tok = ++sync_tok;
	memcpy(path.src, &dev_ip.s_addr, 4);
	memcpy(path.dst, &dev_ip.s_addr, 4);
	n = sv_roce_encode(&path, &p, sizeof(p), dg, sizeof(dg));
	SVT_CHECK(n > 0);
	send_dgram(fd, dg, n, 0);
}

/* Everything sent so far has been taken by the engine. */
static void sync_input(void)
{
	for (int tries = 0; tries < 20; tries++) {
		uint64_t end = svt_now_ms() + 500;

		send_sync();
		do {
			struct ibv_wc wc[NSYNC];
			int n = ibv_poll_cq(scq, NSYNC, wc);
			bool done = false;

			SVT_CHECK(n >= 0);
			for (int i = 0; i < n; i++) {
				const uint8_t *b = smem + wc[i].wr_id * SYNC_SLOT + GRH_LEN;
				uint32_t magic;
				uint64_t tok;

				memcpy(&magic, b, 4);
				memcpy(&tok, b + 4, 8);
				if (wc[i].status == IBV_WC_SUCCESS && magic == SYNC_MAGIC &&
				    tok == sync_tok)
					done = true;
				SVT_CHECK_OK(svt_post_recv(sync_qp, wc[i].wr_id,
							   smem + wc[i].wr_id * SYNC_SLOT, SYNC_SLOT,
							   smr->lkey));
			}
			if (done)
				return;
			drain_tcq();
			if (!n) {
				struct timespec ts = { 0, 20000 };

				nanosleep(&ts, NULL);
			}
		} while (svt_now_ms() < end);
		fprintf(stderr, "fuzz_roce: no sync within 500 ms; again\n");
		if (svt_qp_state(sync_qp) != IBV_QPS_RTS) {
			/* nothing an input sends reaches it: a bug of its own */
			fprintf(stderr, "fuzz_roce: the sync QP left RTS\n");
			abort();
		}
	}
	SVT_FAIL("the device stopped taking datagrams (no sync in 10 s)");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bool ready;
	unsigned auto_psn[NTARGETS] = { 0 };
	enum ibv_mtu mtu;
	size_t off = 1;

	if (!ready) {
		setup();
		ready = true;
	}
	if (size < 1)
		return -1;
	mtu = mtus[(data[0] >> 5) & 3];
	if (mtu != cur_mtu) {
		cur_mtu = mtu;
		for (int i = 0; i < NTARGETS; i++)
			dirty[i] = true;
	}
	for (int i = 0; i < NTARGETS; i++)
		if (dirty[i] || svt_qp_state(qp[i]) != IBV_QPS_RTS)
			connect_target(i);
	drain_tcq();
	prepost(data[0]);
	for (int r = 0; r < MAX_RECORDS && off + 4 <= size; r++) {
		uint8_t kind = data[off], aux = data[off + 1];
		size_t len = (size_t)data[off + 2] << 8 | data[off + 3];

		off += 4;
		if (len > size - off)
			len = size - off;
		if (len > MAX_DGRAM)
			len = MAX_DGRAM;
		send_record(kind, aux, data + off, len, auto_psn);
		off += len;
	}
	sync_input();
	drain_tcq();
	return 0;
}
