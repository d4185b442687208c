/*
 * The ACK of a message received in the polling thread's own pass leaves
 * after the application's next step, and never waits long
 * (src/engine/connections.c, sv_eng_answers_for_completion).
 *
 * A peer X that speaks the wire format itself (wire_peer.h, as the endpoint
 * a device QP B is connected to) sends SENDs, each asking for an ACK, while
 * the test thread polls B's receive CQ:
 *
 *   1. the test thread finds the message and posts a reply at once: when
 *      it sees the completion, X has no ACK yet (in a pass of the engine
 *      thread, which a busy machine may make, the ACK leaves first: such
 *      rounds are counted apart, and at least one of them must be the
 *      polling thread's), and the ACK comes once the reply is posted;
 *   2. the test thread finds the message and goes on polling, posting
 *      nothing: the ACK comes anyway (after a grace of some microseconds);
 *   3. the test thread finds the message and stops calling the library: the
 *      ACK comes anyway (the engine thread, at the end of the poll lease,
 *      a millisecond after the last poll).
 * Every ACK names its SEND's PSN, and each reply B posts completes.
 *
 * Over tcp.  With SVT_WIRE_VIA=shm X comes over shm, where an ACK is
 * written into a ring at no cost worth saving and goes before the
 * completion as from the engine thread: 1 is not asserted there (X's
 * bridge thread makes its timing unknowable), 2 and 3 are.
 */
#include "sv_test.h"
#include "wire_peer.h"
#include "common/util.h"
#include "transport/registry.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RQ_PSN 0x200
#define ROUNDS 20
/* the bound of every wait: far above the lease (1 ms), for a busy host */
#define ACK_MS 2000

static struct {
	struct svt_wire_listener f; /* where B's own requests go */
	int fd_f;                   /* B's connection to it, once dialled */
	int x;                      /* X's connection to B */
	uint32_t psn;               /* X's next PSN */
	uint32_t reply_msn;
	struct ibv_qp *b;
	struct ibv_cq *rcq, *scq;
	struct ibv_mr *mr;
	uint8_t *buf;
} t;

static uint8_t pkt[SV_MAX_PACKET_LEN];

/* X sends one SEND of 8 bytes (svt_wire_bth asks for its ACK). */
static void x_send(void)
{
	size_t hl = svt_wire_bth(pkt, SV_OP_RC | SV_OP_SEND_ONLY, t.b->qp_num, t.psn);

	memcpy(pkt + hl, "answers!", 8);
	SVT_CHECK(svt_wire_send(t.x, pkt, hl + 8));
}

/* X's next frame within ms, which must be the ACK of its last SEND; false
 * when none came. */
static bool x_acked(int ms)
{
	long n = svt_wire_recv(t.x, pkt, sizeof(pkt), ms);
	const struct sv_bth *bth = (const void *)pkt;

	SVT_CHECK(n >= 0);
	if (!n)
		return false;
	SVT_CHECK_EQ(bth->opcode, SV_OP_RC | SV_OP_ACK);
	SVT_CHECK_EQ(ntohl(bth->psn) & SV_PSN_MASK, t.psn);
	return true;
}

/* Poll the receive CQ for ms, where nothing must come: the polling
 * thread's lease holds when X sends. */
static void poll_idle(int ms)
{
	uint64_t end = svt_now_ms() + (uint64_t)ms;
	struct ibv_wc wc;

	while (svt_now_ms() < end)
		SVT_CHECK_EQ(ibv_poll_cq(t.rcq, 1, &wc), 0);
}

/* Post a receive, let X send, and poll until the message is there. */
static void receive_one(void)
{
	uint64_t end;
	struct ibv_wc wc;
	int n;

	SVT_CHECK_OK(svt_post_recv(t.b, t.psn, t.buf, 64, t.mr->lkey));
	poll_idle(2);
	x_send();
	end = svt_now_ms() + ACK_MS;
	while ((n = ibv_poll_cq(t.rcq, 1, &wc)) == 0 && svt_now_ms() < end)
		;
	SVT_CHECK_EQ(n, 1);
	SVT_CHECK_WC_OK(wc);
	SVT_CHECK_EQ(wc.wr_id, t.psn);
	SVT_CHECK_EQ(wc.byte_len, 8u);
}

/* B replies with a SEND to F, which F ACKs; it completes. */
static void reply(void)
{
	long n;
	struct sv_aeth a;
	size_t hl;
	struct ibv_wc wc;

	SVT_CHECK_OK(svt_post_send(t.b, 1, IBV_WR_SEND, IBV_SEND_SIGNALED, t.buf + 64, 8,
				   t.mr->lkey, 0, 0, 0));
	if (t.fd_f < 0)
		t.fd_f = svt_wire_accept(&t.f);
	n = svt_wire_recv(t.fd_f, pkt, sizeof(pkt), ACK_MS);
	SVT_CHECK_MSG(n > 0, "B's reply did not come");
	const struct sv_bth *bth = (const void *)pkt;
	uint32_t psn = ntohl(bth->psn) & SV_PSN_MASK;

	SVT_CHECK_EQ(bth->opcode, SV_OP_RC | SV_OP_SEND_ONLY);
	hl = svt_wire_bth(pkt, SV_OP_RC | SV_OP_ACK, t.b->qp_num, psn);
	a.syn_msn = htonl((uint32_t)SV_AETH_ACK << 24 | ++t.reply_msn);
	memcpy(pkt + hl, &a, sizeof(a));
	SVT_CHECK(svt_wire_send(t.fd_f, pkt, hl + sizeof(a)));
	svt_poll_ok(t.scq, 1, &wc, ACK_MS);
	SVT_CHECK_EQ(wc.opcode, IBV_WC_SEND);
}

int main(void)
{
	struct svt_dev d;
	struct svt_qp_init qi;
	struct svt_conn c;
	int deferred = 0, by_post = 0;

	svt_watchdog(120);
	setenv("SOFTVERBS_PORT", "0", 1);
	setenv("SOFTVERBS_TRANSPORT", svt_wire_via_shm() ? "auto" : "tcp", 1);
	svt_wire_listen(&t.f);
	t.fd_f = -1;
	svt_dev_open(&d);
	t.rcq = svt_create_cq(d.ctx, 16, NULL);
	t.scq = svt_create_cq(d.ctx, 16, NULL);
	t.buf = svt_alloc(4096);
	t.mr = svt_reg_mr(d.pd, t.buf, 4096, SVT_ACCESS_ALL);
	svt_qp_init_default(&qi, IBV_QPT_RC);
	t.b = svt_create_qp(d.pd, t.scq, t.rcq, &qi);
	svt_conn_default(&c, IBV_QPT_RC);
	c.rq_psn = RQ_PSN;
	svt_qp_connect(t.b, &c, &d.gid, t.f.qpn);
	t.x = svt_wire_connect(t.b->qp_num, sv_qpn_port(t.f.qpn));
	t.psn = RQ_PSN;

	/* 1. the reply goes first */
	for (int r = 0; r < ROUNDS; r++, t.psn++) {
		receive_one();
		if (x_acked(0)) {
			/* the engine thread's pass: the ACK went before */
			reply();
			continue;
		}
		deferred++;
		reply();
		if (x_acked(0))
			by_post++;
		else
			SVT_CHECK_MSG(x_acked(ACK_MS), "round %d: no ACK", r);
	}
	printf("1. %d of %d messages taken in by the polling thread, their ACK after its "
	       "completion; %d of them out by the end of the reply's post\n",
	       deferred, ROUNDS, by_post);
	if (!svt_wire_via_shm())
		SVT_CHECK_GT(deferred, 0);

	/* 2. polling on, nothing posted */
	for (int r = 0; r < 3; r++, t.psn++) {
		uint64_t t0, end;
		struct ibv_wc wc;
		bool acked = false;

		receive_one();
		t0 = svt_now_ms();
		end = t0 + ACK_MS;
		while (!acked && svt_now_ms() < end) {
			SVT_CHECK_EQ(ibv_poll_cq(t.rcq, 1, &wc), 0);
			acked = x_acked(0);
		}
		SVT_CHECK_MSG(acked, "round %d: no ACK while the application polls", r);
		printf("2. ACK within %llu ms of the completion, polling on\n",
		       (unsigned long long)(svt_now_ms() - t0));
	}

	/* 3. no call into the library after the completion */
	for (int r = 0; r < 3; r++, t.psn++) {
		uint64_t t0;

		receive_one();
		t0 = svt_now_ms();
		SVT_CHECK_MSG(x_acked(ACK_MS), "round %d: no ACK once the application stopped", r);
		printf("3. ACK within %llu ms of the completion, nobody polling\n",
		       (unsigned long long)(svt_now_ms() - t0));
	}

	SVT_CHECK_OK(ibv_destroy_qp(t.b));
	SVT_CHECK_OK(ibv_dereg_mr(t.mr));
	SVT_CHECK_OK(ibv_destroy_cq(t.rcq));
	SVT_CHECK_OK(ibv_destroy_cq(t.scq));
	svt_dev_close(&d);
	free(t.buf);
	close(t.x);
	if (t.fd_f >= 0)
		close(t.fd_f);
	close(t.f.fd);
	return 0;
}
