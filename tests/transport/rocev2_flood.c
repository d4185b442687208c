/*
 * rocev2_flood KIND SRC DST RATE SECONDS [QPN [PORT]]: a hostile RoCEv2
 * sender (issue 35, point 5).  From address SRC (bound: the address must be
 * one of this namespace's), to DST:4791 (or DST:PORT, where the test's
 * control run sends the same flood to nobody), RATE datagrams a second for
 * SECONDS, in
 * batches of sendmmsg(2), paced by the clock; then it prints what it sent:
 *
 *   flood KIND: sent N datagrams in S s: R/s (asked RATE/s)
 *
 * KIND says what the datagrams are:
 *   valid    RC SEND ONLY / WRITE ONLY packets, 0 to 64 bytes of payload,
 *            at random PSNs, with a right ICRC: RoCE packets a NIC would
 *            take.  Half of them to random 24-bit QPNs (mostly in blocks
 *            no context holds), half to QPN when given (the victim's QP,
 *            connected to another address), else random as well.  Run it
 *            from an admitted address ("admitted") or from one outside
 *            SOFTVERBS_ROCEV2_PEERS ("foreign").
 *   badicrc  the same headers, to QPN (the victim's own QP when given, so
 *            that only the ICRC tells them apart from its peer's), of
 *            random lengths from 16 to 1,100 bytes, with a wrong ICRC.
 *
 * Only to addresses the test names: it is run inside a test's network
 * namespace.  Exit status 0 once SECONDS have passed or on SIGTERM (EAGAIN
 * and ENOBUFS from a full queue are waited out; they count nothing as
 * sent).
 */
#include "common/util.h"
#include "wire/opcode.h"
#include "wire/wire.h"
#include "transport/roce_wire.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BATCH 32
#define DG_MAX 1200

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static volatile sig_atomic_t stop;

static void on_term(int sig)
{
	(void)sig;
	stop = 1;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint32_t rnd(void)
{
	/* xorshift64* */
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return (uint32_t)((rng_state * 0x2545f4914f6cdd1dull) >> 32);
}

/* One datagram into dg, to qpn (random for -1): its length. */
static size_t make(uint8_t *dg, const struct sv_roce_path *path, int bad_icrc, long qpn)
{
	uint8_t pkt[DG_MAX];
	struct sv_bth *bth = (struct sv_bth *)pkt;
	bool write = rnd() & 1;
	size_t hdr = sizeof(*bth) + (write ? sizeof(struct sv_reth) : 0), len, n;

	memset(pkt, 0, sizeof(pkt));
	bth->opcode = SV_OP_RC | (write ? SV_OP_WRITE_ONLY : SV_OP_SEND_ONLY);
	bth->flags = SV_BTH_ACKREQ;
	bth->pkey = htons(0xffff);
	bth->dqpn = htonl(qpn >= 0 ? (uint32_t)qpn : rnd() & 0xffffffu);
	bth->psn = htonl(rnd() & 0xffffffu);
	if (write) {
		struct sv_reth *r = (struct sv_reth *)(pkt + sizeof(*bth));

		r->va = ((uint64_t)rnd() << 32) | rnd();
		r->rkey = rnd();
	}
	len = hdr + (bad_icrc ? rnd() % (1100 - 16 - hdr) : rnd() % 65);
	if (write) {
		struct sv_reth *r = (struct sv_reth *)(pkt + sizeof(*bth));

		r->dma_len = htonl((uint32_t)(len - hdr));
	}
	for (size_t i = hdr; i < len; i++)
		pkt[i] = (uint8_t)rnd();
	n = sv_roce_encode(path, pkt, len, dg, DG_MAX);
	if (n && bad_icrc)
		dg[n - 1 - rnd() % SV_ROCE_ICRC_LEN] ^= (uint8_t)(1 + rnd() % 255);
	return n;
}

int main(int argc, char **argv)
{
	struct sockaddr_in src = { .sin_family = AF_INET }, dst = { .sin_family = AF_INET };
	socklen_t sl = sizeof(src);
	static uint8_t dgs[256][DG_MAX];
	static size_t lens[256];
	struct mmsghdr mm[BATCH];
	struct iovec iov[BATCH];
	struct sv_roce_path path = { .dport = SV_ROCE_UDP_PORT };
	long qpn = -1;
	double rate, secs;
	uint64_t t0, end, sent = 0, forgiven = 0;
	int fd, bad, one = 1;
	unsigned pick = 0;

	if (argc < 6 || (strcmp(argv[1], "valid") && strcmp(argv[1], "badicrc")) ||
	    inet_pton(AF_INET, argv[2], &src.sin_addr) != 1 ||
	    inet_pton(AF_INET, argv[3], &dst.sin_addr) != 1 || (rate = atof(argv[4])) <= 0 ||
	    (secs = atof(argv[5])) <= 0) {
		fprintf(stderr, "usage: %s valid|badicrc SRC DST RATE SECONDS [QPN [PORT]]\n",
			argv[0]);
		return 2;
	}
	bad = !strcmp(argv[1], "badicrc");
	if (argc > 6)
		qpn = strtol(argv[6], NULL, 0) & 0xffffff;
	dst.sin_port = htons(argc > 7 ? (uint16_t)atoi(argv[7]) : SV_ROCE_UDP_PORT);
	fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(fd, (struct sockaddr *)&src, sizeof(src)) ||
	    getsockname(fd, (struct sockaddr *)&src, &sl)) {
		perror("rocev2_flood: socket");
		return 1;
	}
	rng_state ^= (uint64_t)getpid() << 17 ^ now_ns();
	/* the ICRC covers the addresses and ports as the kernel will write
	 * them, and the IPv4 identification: 0 from an unconnected socket with
	 * DF set, as softverbs sends (roce_wire.h) */
	{
		int pmtu = IP_PMTUDISC_DO;

		(void)setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof(pmtu));
	}
	memcpy(path.src, &src.sin_addr, 4);
	memcpy(path.dst, &dst.sin_addr, 4);
	path.sport = ntohs(src.sin_port);
	/* a pool of datagrams made beforehand, sent round and round: the
	 * flooder's CPU goes to sending */
	for (int i = 0; i < 256; i++)
		if (!(lens[i] = make(dgs[i], &path, bad, bad || i % 2 ? qpn : -1))) {
			fprintf(stderr, "rocev2_flood: could not encode a datagram\n");
			return 1;
		}
	memset(mm, 0, sizeof(mm));
	t0 = now_ns();
	end = t0 + (uint64_t)(secs * 1e9);
	signal(SIGTERM, on_term);
	signal(SIGINT, on_term);
	for (uint64_t now = t0; now < end && !stop; now = now_ns()) {
		/* what the rate says is due by now, less what was let go when
		 * this process fell more than 10 ms behind (no catching up
		 * in one burst after a wait for a CPU) */
		uint64_t due = (uint64_t)((double)(now - t0) * rate / 1e9) - forgiven;
		int k, n;

		if (due > sent + (uint64_t)(rate / 100)) {
			forgiven += due - sent - (uint64_t)(rate / 100);
			due = sent + (uint64_t)(rate / 100);
		}
		if (due < sent + BATCH) {
			/* ahead: sleep until a batch is due */
			uint64_t wake = t0 + (uint64_t)((double)(sent + forgiven + BATCH) * 1e9 / rate);
			struct timespec ts = { 0, (long)(wake > now ? SV_MIN(wake - now, 10000000ull) : 0) };

			if (ts.tv_nsec)
				nanosleep(&ts, NULL);
			if (due <= sent)
				continue;
		}
		k = (int)SV_MIN(due - sent, (uint64_t)BATCH);
		for (int i = 0; i < k; i++) {
			unsigned j = pick++ % 256;

			iov[i].iov_base = dgs[j];
			iov[i].iov_len = lens[j];
			mm[i].msg_hdr.msg_iov = &iov[i];
			mm[i].msg_hdr.msg_iovlen = 1;
			mm[i].msg_hdr.msg_name = &dst;
			mm[i].msg_hdr.msg_namelen = sizeof(dst);
		}
		n = sendmmsg(fd, mm, (unsigned)k, MSG_DONTWAIT);
		if (n > 0) {
			sent += (uint64_t)n;
		} else if (n < 0 && errno != EAGAIN && errno != ENOBUFS && errno != ECONNREFUSED &&
			   errno != EINTR) {
			perror("rocev2_flood: sendmmsg");
			return 1;
		} else {
			struct timespec ts = { 0, 20000 };

			nanosleep(&ts, NULL);
		}
	}
	{
		double s = (double)(now_ns() - t0) / 1e9;

		printf("flood %s: sent %llu datagrams in %.2f s: %.0f/s (asked %.0f/s)\n", argv[1],
		       (unsigned long long)sent, s, (double)sent / s, rate);
	}
	return 0;
}
