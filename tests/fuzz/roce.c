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
 * Over IPv6 too, where the device's interface has an IPv6 address (GID
 * index 5; ::1 for sv_lo): a second harness socket on that address (an
 * ephemeral port) sends the records that ask to [::1]:4791, where the
 * device's IPv6 listener (bound to [::]:4791 on its interface) hears them:
 * the IPv6 branch of rocev2_recv (IPV6_PKTINFO's destination, the traffic
 * class), the IPv6 ICRC (traffic class, flow label and hop limit masked),
 * the admission of an IPv6 sender.  Twins of the RC and UC QPs are
 * connected to the same fake QPN at the IPv6 address (GID index 5), so
 * that the IPv6 datagrams reach a responder and a completer whose peer
 * they are, and what those QPs send (requests, ACKs, CNPs) is IPv6 too.
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
 * An input is a setup byte and then records, each one datagram (an input
 * is "over IPv6" when one of its records has aux bit 7 and the device has
 * an IPv6 address; nothing changes for the others):
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
 *             (an input over IPv6: the RC and UC twins post the same as
 *             the RC and UC QPs, and with bit 7 the UD QP sends 64 B to
 *             the fake peer at the IPv6 address too)
 *   record := kind aux len_hi len_lo body[len]   (len clipped to the input)
 *   kind   := bits 0-1 mode: 0 raw (body is the UDP payload as is), 1 and
 *                      3 packet (body is a softverbs packet, wire/wire.h,
 *                      byte 1 softverbs' own flags: encoded with a valid
 *                      ICRC by sv_roce_encode), 2 CNP (a valid one; the
 *                      body's first 3 bytes, if any, are its PSN);
 *             bits 2-3 target: the RC, UC, UD QP, or 3: a QPN of this
 *                      context's block where there is no QP (packet, CNP);
 *             bit 4    keys: RETH/AtomicETH rkey and address into the
 *                      registered buffer, DETH Q_Key the QPs', IETH the
 *                      window's rkey (nobody guesses a random key);
 *             bit 5    the rkey is the type 2 window's (bound to the RC QP;
 *                      over IPv6 the RC twin's) rather than the MR's;
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
 *                      buffer);
 *             bit 7    over IPv6: from the harness's IPv6 socket to
 *                      [device's IPv6 address]:4791, the ICRC computed for
 *                      IPv6 (path.v6), bits 0-1 the traffic class's ECN
 *                      bits (IPV6_TCLASS); the RC and UC targets are the
 *                      twins connected over IPv6.  Two bits then mean
 *                      something else: bit 3 sends it with UDP checksum 0
 *                      (UDP_NO_CHECK6_TX, as rxe sends IPv6; the
 *                      listener's UDP_NO_CHECK6_RX takes it), bit 4 names
 *                      the RC and UC QPs connected over IPv4 instead of the
 *                      twins (admitted, but not their peer: another
 *                      family).  Ignored where the device has no IPv6
 *                      address (the record goes over IPv4)
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
 * After the records a UD SEND to another QP (the sync QP, which no record
 * can name) with a token: its receive completion means the engine has
 * taken everything the harness sent before it (one socket, one 4-tuple, so
 * the kernel hands them all to the same listener, in order).  An input
 * over IPv6 sends one over each family, since the two listeners are read
 * in no particular order; each one's GRH must name the family's address
 * as its source and destination GIDs (the UD responder's GRH).  A sync that
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
#include "wire/opcode.h"
#include "wire/wire.h"
#include "transport/registry.h"
#include "transport/roce_wire.h"

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/udp.h>
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
/* the QPs: the three targets, then the RC and UC twins connected over IPv6 */
enum { Q_RC6 = NTARGETS, Q_UC6, NQPS };

static struct svt_dev d;
static struct ibv_cq *tcq, *scq;
static struct ibv_mr *mr, *smr;
static struct ibv_mw *mw[NQPS]; /* the RC QPs' windows */
static uint8_t *mem, *smem;
static struct ibv_qp *qp[NQPS], *sync_qp;
static const enum ibv_qp_type types[NQPS] = { IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD, IBV_QPT_RC,
					      IBV_QPT_UC };
static int nqps = NTARGETS; /* NQPS where the device has IPv6 */
static bool dirty[NQPS];
static enum ibv_mtu cur_mtu = IBV_MTU_4096;
static union ibv_gid peer_gid;	/* the device's own IPv4 RoCEv2 GID (index 3) */
static union ibv_gid peer_gid6; /* its IPv6 RoCEv2 GID (index 5), when have_v6 */
static bool have_v6;
static uint32_t qpn_base, fake_qpn;

/* n, or the next number of its block that none of our QPs has: a block's
 * QP numbers are a random permutation of its slots, any may be a QP's */
static uint32_t no_qp(uint32_t n)
{
	for (;;) {
		bool held = sync_qp && n == sync_qp->qp_num;

		for (int i = 0; i < NQPS && !held; i++)
			held = qp[i] && n == qp[i]->qp_num;
		if (!held)
			return n;
		n = (n & ~(SV_QPN_BLOCK - 1)) | ((n + 1) & (SV_QPN_BLOCK - 1));
	}
}
static struct in_addr dev_ip, alt_ip;
static struct in6_addr dev_ip6;
static int fd = -1, alt_fd = -1, fd6 = -1;
static uint16_t port, alt_port, port6; /* host order */
static struct sockaddr_in to;
static struct sockaddr_in6 to6;
static struct ibv_ah *ah6; /* the fake peer at the IPv6 address, for the UD QP */
static uint64_t sync_tok;
static uint8_t dg[MAX_DGRAM + 64 + TRAILER], pkt[MAX_DGRAM + 64];

static const enum ibv_mtu mtus[4] = { IBV_MTU_4096, IBV_MTU_1024, IBV_MTU_256, IBV_MTU_512 };

static uint32_t mtu_bytes(enum ibv_mtu m)
{
	return 128u << m;
}

/* A harness socket on address ip of family af (an ephemeral port), or -1. */
static int udp_socket(int af, const void *ip, uint16_t *p)
{
	union {
		struct sockaddr sa;
		struct sockaddr_in v4;
		struct sockaddr_in6 v6;
	} a;
	socklen_t sl = af == AF_INET ? sizeof(a.v4) : sizeof(a.v6);
	int one = 1, pmtu = IP_PMTUDISC_DO, big = 4 << 20;
	int s = socket(af, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	if (s < 0)
		return -1;
	memset(&a, 0, sizeof(a));
	if (af == AF_INET) {
		a.v4.sin_family = AF_INET;
		memcpy(&a.v4.sin_addr, ip, 4);
		/* DF and identification 0, what the encoder's ICRC assumes (roce_wire.h) */
		SVT_CHECK_OK(setsockopt(s, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof(pmtu)));
	} else {
		a.v6.sin6_family = AF_INET6;
		memcpy(&a.v6.sin6_addr, ip, 16);
		(void)setsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	}
	(void)setsockopt(s, SOL_SOCKET, SO_SNDBUF, &big, sizeof(big));
	if (bind(s, &a.sa, sl) || getsockname(s, &a.sa, &sl)) {
		close(s);
		return -1;
	}
	*p = ntohs(af == AF_INET ? a.v4.sin_port : a.v6.sin6_port);
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

/* A type 2 window over the whole buffer, bound to RC QP i (for SEND with
 * invalidate, and remote accesses through a window). */
static void bind_window(int i)
{
	struct ibv_send_wr wr = { .opcode = IBV_WR_BIND_MW }, *bad;
	uint64_t end = svt_now_ms() + SVT_TIMEOUT_MS;
	struct ibv_wc wc;

	if (mw[i])
		SVT_CHECK_OK(ibv_dealloc_mw(mw[i]));
	mw[i] = ibv_alloc_mw(d.pd, IBV_MW_TYPE_2);
	SVT_CHECK_PTR(mw[i]);
	wr.wr_id = 0xb1d;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.bind_mw.mw = mw[i];
	wr.bind_mw.rkey = ibv_inc_rkey(mw[i]->rkey);
	wr.bind_mw.bind_info.mr = mr;
	wr.bind_mw.bind_info.addr = (uintptr_t)mem;
	wr.bind_mw.bind_info.length = MEM_LEN;
	wr.bind_mw.bind_info.mw_access_flags =
		IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	SVT_CHECK_OK(ibv_post_send(qp[i], &wr, &bad));
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

/* QP i connected to the fake peer afresh: PSNs 0, receives posted; the
 * twins (i >= NTARGETS) at its IPv6 address. */
static void connect_target(int i)
{
	struct svt_conn c;

	svt_conn_default(&c, types[i]);
	c.sq_psn = 0;
	c.rq_psn = 0;
	c.path_mtu = cur_mtu;
	c.timeout = 20; /* no ack timeout within an input */
	c.hop_limit = 64;
	if (i >= NTARGETS)
		c.sgid_index = 5; /* the IPv6 RoCE v2 GID */
	if (svt_qp_state(qp[i]) != IBV_QPS_RESET)
		SVT_CHECK_OK(svt_qp_to_state(qp[i], IBV_QPS_RESET));
	svt_qp_connect(qp[i], &c, i >= NTARGETS ? &peer_gid6 : &peer_gid, fake_qpn);
	post_recvs(qp[i]);
	if (types[i] == IBV_QPT_RC)
		bind_window(i);
	dirty[i] = false;
}

static void setup(void)
{
	struct svt_qp_init qi;
	union ibv_gid g, g6;
	char ip6s[INET6_ADDRSTRLEN] = "";

	setenv("SOFTVERBS_TRANSPORT", "rocev2", 1);
	setenv("SOFTVERBS_LOG", "error", 0);
	unsetenv("SOFTVERBS_ROCEV2_PEERS"); /* the device's subnet: 127.0.0.0/8 on lo */
	unsetenv("SOFTVERBS_FAULTS");
	svt_dev_open(&d);
	SVT_CHECK_OK(ibv_query_gid(d.ctx, 1, 3, &g)); /* ::ffff:a.b.c.d, RoCE v2 */
	peer_gid = g;
	memcpy(&dev_ip.s_addr, g.raw + 12, 4);
	/* IPv6: GID 5, where the device's interface has an IPv6 address */
	if (!ibv_query_gid(d.ctx, 1, 5, &g6)) {
		memcpy(&dev_ip6, g6.raw, 16);
		have_v6 = !IN6_IS_ADDR_UNSPECIFIED(&dev_ip6) && !IN6_IS_ADDR_V4MAPPED(&dev_ip6);
		peer_gid6 = g6;
	}
	if (have_v6 && (fd6 = udp_socket(AF_INET6, &dev_ip6, &port6)) < 0) {
		fprintf(stderr, "fuzz_roce: no IPv6 socket: %s; IPv6 records go over IPv4\n",
			strerror(errno));
		have_v6 = false;
	}
	nqps = have_v6 ? NQPS : NTARGETS;
	tcq = svt_create_cq(d.ctx, 4096, NULL);
	scq = svt_create_cq(d.ctx, 64, NULL);
	mem = svt_alloc(MEM_LEN);
	smem = svt_alloc(NSYNC * SYNC_SLOT);
	mr = svt_reg_mr(d.pd, mem, MEM_LEN, SVT_ACCESS_ALL | IBV_ACCESS_MW_BIND);
	smr = svt_reg_mr(d.pd, smem, NSYNC * SYNC_SLOT, IBV_ACCESS_LOCAL_WRITE);
	for (int i = 0; i < nqps; i++) {
		svt_qp_init_default(&qi, types[i]);
		qp[i] = svt_create_qp(d.pd, tcq, tcq, &qi);
	}
	svt_qp_init_default(&qi, IBV_QPT_UD);
	sync_qp = svt_create_qp(d.pd, scq, scq, &qi);
	svt_qp_connect(sync_qp, NULL, NULL, 0);
	for (int k = 0; k < NSYNC; k++)
		SVT_CHECK_OK(svt_post_recv(sync_qp, (uint64_t)k, smem + k * SYNC_SLOT, SYNC_SLOT,
					   smr->lkey));
	/* the peer: a QPN of this context's block that no QP here has */
	qpn_base = sync_qp->qp_num & ~(SV_QPN_BLOCK - 1);
	fake_qpn = no_qp(qpn_base + SV_QPN_BLOCK - 1);
	for (int i = 0; i < nqps; i++)
		connect_target(i);
	if (have_v6) {
		struct svt_conn c;
		struct ibv_ah_attr aa;

		svt_conn_default(&c, IBV_QPT_UD);
		c.sgid_index = 5;
		c.hop_limit = 64;
		svt_ah_attr(&aa, &peer_gid6, &c);
		ah6 = ibv_create_ah(d.pd, &aa);
		SVT_CHECK_PTR(ah6);
		to6 = (struct sockaddr_in6){ .sin6_family = AF_INET6,
					     .sin6_port = htons(SV_ROCE_UDP_PORT),
					     .sin6_addr = dev_ip6 };
		inet_ntop(AF_INET6, &dev_ip6, ip6s, sizeof(ip6s));
	}

	fd = udp_socket(AF_INET, &dev_ip, &port);
	SVT_CHECK_MSG(fd >= 0, "bind %s: %s", inet_ntoa(dev_ip), strerror(errno));
	alt_ip.s_addr = htonl(ntohl(dev_ip.s_addr) + 1);
	if ((ntohl(dev_ip.s_addr) >> 24) == 127)
		alt_fd = udp_socket(AF_INET, &alt_ip, &alt_port);
	to = (struct sockaddr_in){ .sin_family = AF_INET, .sin_port = htons(SV_ROCE_UDP_PORT),
				   .sin_addr = dev_ip };
	fprintf(stderr,
		"fuzz_roce: device %s at %s:4791; targets RC 0x%06x UC 0x%06x UD 0x%06x, "
		"sync 0x%06x, their peer 0x%06x; rkey 0x%x (window 0x%x) at %p; peer port %u%s\n",
		ibv_get_device_name(d.ctx->device), inet_ntoa(dev_ip), qp[T_RC]->qp_num,
		qp[T_UC]->qp_num, qp[T_UD]->qp_num, sync_qp->qp_num, fake_qpn, mr->rkey,
		mw[T_RC]->rkey, (void *)mem, port, alt_fd >= 0 ? "" : " (no second address)");
	if (have_v6)
		fprintf(stderr,
			"fuzz_roce: IPv6 at [%s]:4791; twins RC 0x%06x UC 0x%06x (window 0x%x); "
			"peer port %u\n",
			ip6s, qp[Q_RC6]->qp_num, qp[Q_UC6]->qp_num, mw[Q_RC6]->rkey, port6);
	else
		fprintf(stderr, "fuzz_roce: the device has no IPv6 address: all records over IPv4\n");
}

/* One datagram to the listener of s's family, with IP ECN codepoint aux
 * bits 0-1; over IPv6 with UDP checksum 0 where aux bit 3 says so. */
static void send_dgram(int s, const uint8_t *p, size_t n, uint8_t aux)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	bool v6 = s == fd6;
	struct iovec v = { (void *)p, n };
	struct msghdr mh = { .msg_name = v6 ? (void *)&to6 : (void *)&to,
			     .msg_namelen = v6 ? sizeof(to6) : sizeof(to),
			     .msg_iov = &v,
			     .msg_iovlen = 1,
			     .msg_control = u.buf,
			     .msg_controllen = sizeof(u.buf) };
	struct cmsghdr *cm;
	int tos = aux & 3, nocsum = v6 && (aux & 0x08);

	memset(&u, 0, sizeof(u));
	cm = CMSG_FIRSTHDR(&mh);
	cm->cmsg_level = v6 ? IPPROTO_IPV6 : IPPROTO_IP;
	cm->cmsg_type = v6 ? IPV6_TCLASS : IP_TOS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &tos, sizeof(tos));
	/* the same socket either way: one 4-tuple, one listener, in order */
	if (nocsum)
		SVT_CHECK_OK(setsockopt(s, IPPROTO_UDP, UDP_NO_CHECK6_TX, &nocsum, sizeof(nocsum)));
	while (sendmsg(s, &mh, 0) < 0) {
		if (errno == ENOBUFS || errno == EAGAIN) {
			sched_yield(); /* the listener is behind: let it read */
			continue;
		}
		/* EMSGSIZE: over lo's MTU, as a link would refuse it */
		SVT_CHECK_MSG(errno == EMSGSIZE, "sendmsg: %s", strerror(errno));
		break;
	}
	if (nocsum) {
		nocsum = 0;
		SVT_CHECK_OK(setsockopt(s, IPPROTO_UDP, UDP_NO_CHECK6_TX, &nocsum, sizeof(nocsum)));
	}
}

/* The QP target t names (-1: none): over IPv6 the RC and UC targets are the
 * twins connected over IPv6, unless `cross` (aux bit 4) asks for the ones
 * connected over IPv4. */
static int target_qp(int t, bool v6, bool cross)
{
	if (t >= NTARGETS)
		return -1;
	if (v6 && !cross && t != T_UD)
		return t == T_RC ? Q_RC6 : Q_UC6;
	return t;
}

static uint32_t target_qpn(int q, uint32_t in)
{
	/* none: a number of this block that no QP has (the sync QP is never named) */
	return q >= 0 ? qp[q]->qp_num : no_qp(qpn_base + 0x3000 + (in & 0xfff));
}

/* Keys and addresses of the real buffer, the UD Q_Key, the rkey of window
 * win (the RC QP's of the family the record goes to). */
static void patch_keys(uint8_t *p, size_t len, const struct sv_opcode_info *op, bool by_window,
		       const struct ibv_mw *win)
{
	uint32_t rkey = htonl(by_window ? win->rkey : mr->rkey);
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
		uint32_t w = htonl(win->rkey);

		memcpy(p + op->off_ieth, &w, 4);
	}
}

static void send_record(uint8_t kind, uint8_t aux, const uint8_t *body, size_t len,
			unsigned *auto_psn)
{
	int mode = kind & 3;
	bool v6 = (aux & 0x80) && have_v6;
	bool alt = !v6 && (aux & 0x10) && alt_fd >= 0;
	int s = v6 ? fd6 : alt ? alt_fd : fd, q = target_qp((kind >> 2) & 3, v6, aux & 0x10);
	struct sv_roce_path path = { .v6 = v6,
				     .sport = v6 ? port6 : alt ? alt_port : port,
				     .dport = SV_ROCE_UDP_PORT };
	const struct sv_opcode_info *op;
	uint32_t w;
	size_t n;

	if (mode == 0) {
		/* raw: as it is, but for a QPN of another context's block */
		memcpy(dg, body, len);
		if (len >= 8) {
			uint32_t dq = (uint32_t)dg[5] << 16 | (uint32_t)dg[6] << 8 | dg[7];
			uint32_t b = dq >> SV_QPN_BLOCK_SHIFT;

			if ((b && b != qpn_base >> SV_QPN_BLOCK_SHIFT && dq != 0xffffffu) ||
			    dq == sync_qp->qp_num) {
				/* and never the sync QP */
				dq = dq == sync_qp->qp_num ? fake_qpn
							   : qpn_base | (dq & (SV_QPN_BLOCK - 1));
				if (dq == sync_qp->qp_num)
					dq = fake_qpn;
				dg[5] = (uint8_t)(dq >> 16);
				dg[6] = (uint8_t)(dq >> 8);
				dg[7] = (uint8_t)dq;
			}
			for (int i = 0; i < nqps; i++)
				dirty[i] |= dq == qp[i]->qp_num;
		}
		send_dgram(s, dg, len, aux);
		return;
	}
	if (mode == 2) {
		/* a CNP: BTH and 16 reserved bytes (annex A17.9.2) */
		struct sv_bth *b = (struct sv_bth *)pkt;

		memset(pkt, 0, sizeof(*b) + 16);
		b->opcode = SV_OP_CNP;
		b->pkey = 0xffff;
		b->dqpn = htonl(target_qpn(q, 0));
		if (len >= 3)
			b->psn = htonl((uint32_t)body[0] << 16 | (uint32_t)body[1] << 8 | body[2]);
		len = sizeof(*b) + 16;
	} else {
		if (len < sizeof(struct sv_bth)) {
			send_dgram(s, body, len, aux);
			return;
		}
		memcpy(pkt, body, len);
		/* the destination, the rest of the word (on the wire FECN, BECN
		 * and reserved bits) as the input has it */
		memcpy(&w, pkt + 4, 4);
		w = htonl((ntohl(w) & ~SV_PSN_MASK) | target_qpn(q, ntohl(w)));
		memcpy(pkt + 4, &w, 4);
		/* the flags a wire can say (GPU references never cross one) */
		pkt[1] &= SV_BTH_SE | SV_BTH_ACKREQ;
		if ((kind & 0x10) && (op = sv_opcode_info(pkt[0])))
			patch_keys(pkt, len, op, kind & 0x20,
				   mw[q == Q_RC6 || q == Q_UC6 ? Q_RC6 : T_RC]);
	}
	if ((kind & 0x40) && q >= 0) {
		memcpy(&w, pkt + 8, 4);
		w = htonl((ntohl(w) & ~SV_PSN_MASK) | ((ntohl(w) + auto_psn[q]++) & SV_PSN_MASK));
		memcpy(pkt + 8, &w, 4);
	}
	if (q >= 0)
		dirty[q] = true;
	if (v6) {
		memcpy(path.src, &dev_ip6, 16);
		memcpy(path.dst, &dev_ip6, 16);
	} else {
		memcpy(path.src, alt ? &alt_ip.s_addr : &dev_ip.s_addr, 4);
		memcpy(path.dst, &dev_ip.s_addr, 4);
		if (aux & 0x08)
			path.ip_id = (uint16_t)(0x100 | len); /* the kernel sends 0 */
	}
	n = sv_roce_encode(&path, pkt, len, dg, sizeof(dg));
	if (!n) {
		/* an opcode softverbs does not know, or shorter than its
		 * headers: it goes as it is, for the decoder to refuse */
		send_dgram(s, pkt, len, aux);
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
	send_dgram(s, dg, n, aux);
}

/* What setup byte s asks the RC and UC QPs of one family (rc, uc) to post. */
static void prepost_family(uint8_t s, int rc, int uc)
{
	int kind = s & 7, count = 1 + ((s >> 3) & 3);
	uint32_t big = 2 * mtu_bytes(cur_mtu) + 100;

	for (int i = 0; kind && i < count; i++) {
		uint8_t *buf = mem + LOCAL_OFF + (size_t)i * 12288;
		int r;

		switch (kind) {
		case 1:
		case 2:
			r = svt_post_send(qp[rc], 100 + (uint64_t)i, IBV_WR_SEND, IBV_SEND_SIGNALED,
					  buf, kind == 1 ? 64 : big, mr->lkey, 0, 0, 0);
			break;
		case 3: /* WRITE, 64 B or big */
		case 4:
		case 5: /* READ, 64 B or big */
		case 6:
			r = svt_post_send(qp[rc], 100 + (uint64_t)i,
					  kind <= 4 ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ,
					  IBV_SEND_SIGNALED, buf, kind & 1 ? 64 : big, mr->lkey,
					  0x10000, 0x1234, 0);
			break;
		default:
			r = svt_post_atomic(qp[rc], 100 + (uint64_t)i,
					    i & 1 ? IBV_WR_ATOMIC_CMP_AND_SWP
						  : IBV_WR_ATOMIC_FETCH_AND_ADD,
					    IBV_SEND_SIGNALED, buf, mr->lkey, 0x10000, 0x1234, 1, 2);
			break;
		}
		SVT_CHECK_OK(r);
		dirty[rc] = true;
	}
	if (s & 0x80) {
		SVT_CHECK_OK(svt_post_send(qp[uc], 200, IBV_WR_SEND, IBV_SEND_SIGNALED,
					   mem + LOCAL_OFF + 4 * 12288, 64, mr->lkey, 0, 0, 0));
		dirty[uc] = true;
	}
}

static void prepost(uint8_t s, bool v6)
{
	prepost_family(s, T_RC, T_UC);
	if (!v6)
		return;
	prepost_family(s, Q_RC6, Q_UC6);
	if (s & 0x80) /* a UD SEND over IPv6 (its AH's IPv6 GID) */
		SVT_CHECK_OK(svt_post_ud_send(qp[T_UD], 300, IBV_SEND_SIGNALED,
					      mem + LOCAL_OFF + 4 * 12288 + 64, 64, mr->lkey, ah6,
					      fake_qpn, QKEY));
}

/* A UD SEND with token tok to the sync QP, encoded as the peer would, over
 * IPv6 when the token's low bit says so. */
static void send_sync(uint64_t tok)
{
	struct {
		struct sv_bth bth;
		struct sv_deth deth;
		uint32_t magic;
		uint64_t tok;
	} __attribute__((packed)) p;
	bool v6 = tok & 1;
	struct sv_roce_path path = { .v6 = v6, .sport = v6 ? port6 : port,
				     .dport = SV_ROCE_UDP_PORT };
	size_t n;

	memset(&p, 0, sizeof(p));
	p.bth.opcode = SV_OP_UD | SV_OP_SEND_ONLY;
	p.bth.pkey = 0xffff;
	p.bth.dqpn = htonl(sync_qp->qp_num);
	p.deth.qkey = htonl(QKEY);
	p.deth.sqpn = htonl(fake_qpn);
	p.magic = SYNC_MAGIC;
	p.tok = tok;
	if (v6) {
		memcpy(path.src, &dev_ip6, 16);
		memcpy(path.dst, &dev_ip6, 16);
	} else {
		memcpy(path.src, &dev_ip.s_addr, 4);
		memcpy(path.dst, &dev_ip.s_addr, 4);
	}
	n = sv_roce_encode(&path, &p, sizeof(p), dg, sizeof(dg));
	SVT_CHECK(n > 0);
	send_dgram(v6 ? fd6 : fd, dg, n, 0);
}

/* The GRH of a sync's receive: both GIDs the address of its family. */
static void check_sync_grh(const uint8_t *grh, bool v6)
{
	struct in6_addr want;

	if (v6) {
		want = dev_ip6;
	} else {
		memset(&want, 0, sizeof(want));
		want.s6_addr[10] = want.s6_addr[11] = 0xff;
		memcpy(want.s6_addr + 12, &dev_ip.s_addr, 4);
	}
	if (memcmp(grh + 8, &want, 16) || memcmp(grh + 24, &want, 16)) {
		char a[INET6_ADDRSTRLEN], b[INET6_ADDRSTRLEN], w[INET6_ADDRSTRLEN];

		fprintf(stderr, "fuzz_roce: the %s sync's GRH says %s -> %s, not %s\n",
			v6 ? "IPv6" : "IPv4", inet_ntop(AF_INET6, grh + 8, a, sizeof(a)),
			inet_ntop(AF_INET6, grh + 24, b, sizeof(b)),
			inet_ntop(AF_INET6, &want, w, sizeof(w)));
		abort();
	}
}

/* Everything sent so far has been taken by the engine: over IPv4, and over
 * IPv6 too when the input used it (the two listeners are read in no
 * particular order). */
static void sync_input(bool v6)
{
	for (int tries = 0; tries < 20; tries++) {
		uint64_t end = svt_now_ms() + 500;
		unsigned want = v6 ? 3 : 1, got = 0;

		sync_tok++;
		send_sync(sync_tok << 1);
		if (v6)
			send_sync(sync_tok << 1 | 1);
		do {
			struct ibv_wc wc[NSYNC];
			int n = ibv_poll_cq(scq, NSYNC, wc);

			SVT_CHECK(n >= 0);
			for (int i = 0; i < n; i++) {
				const uint8_t *b = smem + wc[i].wr_id * SYNC_SLOT + GRH_LEN;
				uint32_t magic;
				uint64_t tok;

				memcpy(&magic, b, 4);
				memcpy(&tok, b + 4, 8);
				if (wc[i].status == IBV_WC_SUCCESS && magic == SYNC_MAGIC &&
				    tok >> 1 == sync_tok) {
					check_sync_grh(b - GRH_LEN, tok & 1);
					got |= 1u << (tok & 1);
				}
				SVT_CHECK_OK(svt_post_recv(sync_qp, wc[i].wr_id,
							   smem + wc[i].wr_id * SYNC_SLOT, SYNC_SLOT,
							   smr->lkey));
			}
			if (got == want)
				return;
			drain_tcq();
			if (!n) {
				struct timespec ts = { 0, 20000 };

				nanosleep(&ts, NULL);
			}
		} while (svt_now_ms() < end);
		fprintf(stderr, "fuzz_roce: no sync within 500 ms (%s missing); again\n",
			(want & ~got) == 3 ? "IPv4, IPv6" : (want & ~got) == 2 ? "IPv6" : "IPv4");
		if (svt_qp_state(sync_qp) != IBV_QPS_RTS) {
			/* nothing an input sends reaches it: a bug of its own */
			fprintf(stderr, "fuzz_roce: the sync QP left RTS\n");
			abort();
		}
	}
	SVT_FAIL("the device stopped taking datagrams (no sync in 10 s)");
}

/* The record at *off of an input (at most MAX_RECORDS are read): its body
 * and length, *off moved past it; false when there is none. */
static bool next_record(const uint8_t *data, size_t size, size_t *off, int *r, uint8_t *kind,
			uint8_t *aux, const uint8_t **body, size_t *len)
{
	if (*r >= MAX_RECORDS || *off + 4 > size)
		return false;
	*kind = data[*off];
	*aux = data[*off + 1];
	*len = (size_t)data[*off + 2] << 8 | data[*off + 3];
	*off += 4;
	if (*len > size - *off)
		*len = size - *off;
	if (*len > MAX_DGRAM)
		*len = MAX_DGRAM;
	*body = data + *off;
	*off += *len;
	(*r)++;
	return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bool ready;
	unsigned auto_psn[NQPS] = { 0 };
	enum ibv_mtu mtu;
	const uint8_t *body;
	size_t off = 1, len;
	uint8_t kind, aux;
	bool v6 = false;
	int r = 0;

	if (!ready) {
		setup();
		ready = true;
	}
	if (size < 1)
		return -1;
	mtu = mtus[(data[0] >> 5) & 3];
	if (mtu != cur_mtu) {
		cur_mtu = mtu;
		for (int i = 0; i < nqps; i++)
			dirty[i] = true;
	}
	for (int i = 0; i < nqps; i++)
		if (dirty[i] || svt_qp_state(qp[i]) != IBV_QPS_RTS)
			connect_target(i);
	drain_tcq();
	/* over IPv6: one of its records says so (aux bit 7) */
	while (have_v6 && !v6 && next_record(data, size, &off, &r, &kind, &aux, &body, &len))
		v6 = aux & 0x80;
	prepost(data[0], v6);
	off = 1;
	r = 0;
	while (next_record(data, size, &off, &r, &kind, &aux, &body, &len))
		send_record(kind, aux, body, len, auto_psn);
	sync_input(v6);
	drain_tcq();
	return 0;
}
