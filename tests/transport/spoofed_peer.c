/*
 * A peer that holds the secret but connects from another address than the
 * endpoint its HELLO names is refused (issue 35, point 1).
 *
 * Two contexts of the loopback device, V (the victim) and R (its real
 * peer), over tcp: V's RC QP b is connected to R's QP r.  An outsider X
 * holds the job's secret (it proves it in its AUTH) and connects from
 * 127.0.0.2, another address of this host's lo, with a HELLO that names R's
 * endpoint (127.0.0.1, R's port).  Before, V took the HELLO's word for who
 * X was, and X played the attack of the report: a zero-length WRITE at a
 * wrong PSN drew a NAK naming the PSN b expects; four zero-length WRITEs
 * (rkey 0) at the next PSNs were ACKed and moved b's expected PSN on; R's
 * 4 KiB WRITE then completed IBV_WC_SUCCESS with none of its bytes placed
 * (b took it for a duplicate); one WRITE with a wrong rkey moved b to ERR.
 *
 * Now V takes the peer's address from the connection (getpeername), and a
 * HELLO naming another IPv4 address closes the connection before V answers
 * it, counted as hello_address_mismatches (softverbs stat).  X tries each way a
 * connection reaches an endpoint: its own port; with a private network
 * namespace (root), also the host's shared port (SOFTVERBS_PORT), and a
 * connection handed to V's hand-off socket as the process that took it
 * on the shared port would hand it (the socket kept, so V still sees where
 * it comes from).  Every try is refused and counted, and R's WRITE then
 * lands whole and completes, b still in RTS.  A peer that connects from
 * the address it names (R itself, and X from 127.0.0.1) is taken.
 */
#include "sv_test.h"
#include "svt_counters.h"
#include "wire_peer.h"
#include "common/util.h"
#include "transport/registry.h"

#include <arpa/inet.h>
#include <endian.h>
#include <net/if.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define LEN 4096
#define PSN0 0x1000

static uint8_t pkt[SV_MAX_PACKET_LEN];

/* A zero-length (or len-byte) RDMA WRITE ONLY asking for an ACK. */
static bool send_write(int fd, uint32_t dqpn, uint32_t psn, uint64_t va, uint32_t rkey,
		       uint32_t len)
{
	uint8_t p[sizeof(struct sv_bth) + sizeof(struct sv_reth) + 64] = { 0 };
	size_t hl = svt_wire_bth(p, SV_OP_RC | SV_OP_WRITE_ONLY, dqpn, psn);
	struct sv_reth r = { htobe64(va), htonl(rkey), htonl(len) };

	((struct sv_bth *)p)->flags = SV_BTH_ACKREQ;
	memcpy(p + hl, &r, sizeof(r));
	return svt_wire_send(fd, p, hl + sizeof(r) + len);
}

/* The next ACK/NAK on fd within 1 s: its AETH syndrome, PSN in *psn; -1 none. */
static int next_aeth(int fd, uint32_t *psn)
{
	for (;;) {
		long n = svt_wire_recv(fd, pkt, sizeof(pkt), 1000);
		const struct sv_bth *bth = (const void *)pkt;
		struct sv_aeth a;

		if (n <= 0)
			return -1;
		if ((bth->opcode & 0x1f) != SV_OP_ACK ||
		    (size_t)n < sizeof(*bth) + sizeof(a))
			continue;
		memcpy(&a, pkt + sizeof(*bth), sizeof(a));
		*psn = ntohl(bth->psn) & SV_PSN_MASK;
		return (int)(ntohl(a.syn_msn) >> 24);
	}
}

/*
 * The attack of the report, on a connection V accepted from X: what it
 * got, for the log.  Only ever reached when V takes the HELLO's word.
 */
static uint32_t attack(int x, uint32_t bqpn, uint64_t va, char *out, size_t cap)
{
	uint32_t psn = 0, e;
	int syn, acked = 0;

	send_write(x, bqpn, PSN0 + 1000, va, 0, 0);
	syn = next_aeth(x, &psn);
	e = syn >= 0 ? psn : PSN0;
	for (int i = 0; i < 4; i++) {
		uint32_t p;

		send_write(x, bqpn, e + (uint32_t)i, va, 0, 0);
		if ((next_aeth(x, &p) & SV_AETH_TYPE_MASK) == SV_AETH_ACK)
			acked++;
	}
	snprintf(out, cap,
		 "a WRITE at a wrong PSN drew syndrome 0x%02x naming PSN 0x%x (expected 0x%x); "
		 "%d of 4 zero-length WRITEs at the next PSNs ACKed",
		 syn < 0 ? 0xff : syn, psn, (unsigned)PSN0, acked);
	return e + 4;
}

int main(void)
{
	/* root: a network namespace of our own (gone with the process); the
	 * host's shared port there is ours alone */
	bool ns = svt_private_netns();
	struct svt_dev v, r;
	struct svt_qp_init qi;
	struct svt_conn c;
	struct ibv_wc wc;
	char what[256] = "";
	int tries = 0, taken = 0, kept = -1;
	uint32_t next_psn = 0;

	svt_watchdog(60);
	setenv("SOFTVERBS_TRANSPORT", "tcp", 1);
	/* the host's shared port is everyone's; in our namespace, the default */
	setenv("SOFTVERBS_PORT", ns ? "4791" : "0", 1);
	svt_dev_open(&v);
	svt_dev_open(&r);
	struct ibv_cq *vcq = svt_create_cq(v.ctx, 16, NULL), *rcq = svt_create_cq(r.ctx, 16, NULL);
	uint8_t *vmem = svt_alloc(LEN), *rmem = svt_alloc(LEN);
	struct ibv_mr *vmr = svt_reg_mr(v.pd, vmem, LEN, SVT_ACCESS_ALL);
	struct ibv_mr *rmr = svt_reg_mr(r.pd, rmem, LEN, SVT_ACCESS_ALL);

	svt_qp_init_default(&qi, IBV_QPT_RC);
	struct ibv_qp *b = svt_create_qp(v.pd, vcq, vcq, &qi);
	struct ibv_qp *q = svt_create_qp(r.pd, rcq, rcq, &qi);

	svt_conn_default(&c, IBV_QPT_RC);
	c.sq_psn = c.rq_psn = PSN0;
	svt_qp_link(b, &v.gid, q, &r.gid, &c);
	memset(vmem, 0xee, LEN);
	svt_fill(rmem, LEN, 7);

	uint64_t before = svt_ctx_counter(SV_CTXC_HELLO_SPOOFED);
	struct in_addr lo = { htonl(INADDR_LOOPBACK) }, other = { htonl(0x7f000002) };
	struct svt_wire_spec x = { .qpn = b->qp_num, .from = other, .claim = lo,
				   .claim_port = sv_qpn_port(q->qp_num), .know_secret = true };
	const char *ways[] = { "its own port", "the shared port", "handed over" };

	for (int way = 0; way < (ns ? 3 : 1); way++) {
		int taken0 = taken;

		x.port = way == 1 ? 4791 : 0;
		x.handoff = way == 2;
		for (int i = 0; i < 4; i++) {
			int fd = svt_wire_connect_spec(&x);

			tries++;
			if (fd < 0)
				continue;
			taken++;
			if (kept < 0) {
				next_psn = attack(fd, b->qp_num, (uintptr_t)vmem, what, sizeof(what));
				kept = fd;
			} else {
				close(fd);
			}
		}
		svt_log("X from 127.0.0.2 naming R's endpoint, by %s: %d of 4 taken", ways[way],
			taken - taken0);
	}
	if (what[0])
		svt_log("X's attack: %s", what);

	/* the real peer's WRITE: placed whole, SUCCESS, b still in RTS */
	SVT_CHECK_OK(svt_post_send(q, 1, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, rmem, LEN, rmr->lkey,
				   (uintptr_t)vmem, vmr->rkey, 0));
	svt_poll_n(rcq, 1, &wc, 10000);
	bool placed = !memcmp(vmem, rmem, LEN);

	if (kept >= 0) {
		/* and one WRITE with a wrong rkey at the PSN b expects next */
		send_write(kept, b->qp_num, next_psn, (uintptr_t)vmem, vmr->rkey ^ 0x100, 1);
		svt_sleep_ms(200);
		svt_log("X's WRITE with a wrong rkey: b %s", svt_qp_state(b) == IBV_QPS_ERR
								 ? "in ERR" : "not in ERR");
		close(kept);
	}

	svt_log("R's 4 KiB WRITE: %s, %s; b %s; hello_address_mismatches +%llu",
		ibv_wc_status_str(wc.status), placed ? "placed" : "NOT placed",
		svt_qp_state(b) == IBV_QPS_RTS ? "in RTS" : "not in RTS",
		(unsigned long long)(svt_ctx_counter(SV_CTXC_HELLO_SPOOFED) - before));
	SVT_CHECK_MSG(!taken, "%d of %d connections naming R's endpoint from 127.0.0.2 taken",
		      taken, tries);
	SVT_CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	SVT_CHECK_MSG(placed, "the real peer's WRITE was not placed");
	SVT_CHECK_EQ(svt_qp_state(b), IBV_QPS_RTS);
	SVT_CHECK_EQ(svt_ctx_counter(SV_CTXC_HELLO_SPOOFED) - before, (uint64_t)tries);

	/* the same outsider, from the address it names: a peer like any other
	 * (what it sends to b is a wrong peer's, dropped: connection identity) */
	x.from = lo;
	x.port = 0;
	x.handoff = false;
	int fd = svt_wire_connect_spec(&x);

	SVT_CHECK_MSG(fd >= 0, "a peer connecting from the address it names was refused");
	close(fd);
	SVT_CHECK_EQ(svt_ctx_counter(SV_CTXC_HELLO_SPOOFED) - before, (uint64_t)tries);

	SVT_CHECK_OK(ibv_destroy_qp(b));
	SVT_CHECK_OK(ibv_destroy_qp(q));
	SVT_CHECK_OK(ibv_dereg_mr(vmr));
	SVT_CHECK_OK(ibv_dereg_mr(rmr));
	SVT_CHECK_OK(ibv_destroy_cq(vcq));
	SVT_CHECK_OK(ibv_destroy_cq(rcq));
	svt_dev_close(&v);
	svt_dev_close(&r);
	if (ns)
		svt_private_netns_done();
	free(vmem);
	free(rmem);
	return 0;
}
