/*
 * READ responses in order, or not at all: a peer that speaks the wire format
 * itself plays the responder of an RC READ and answers it badly.
 *
 *   - a response lost at the start (MIDDLE..LAST arrive, FIRST never does):
 *     when the requester asks again (its ack timer), it asks for the whole
 *     READ;
 *   - a response lost in the middle: it asks for the rest, from the lost
 *     one on (the PSN of that response, the address and length of the rest,
 *     as rxe does), and takes that answered as a READ of its own
 *     (FIRST..LAST) or, as rxe answers it, as a replay of the first READ
 *     from there (MIDDLE..LAST);
 *     either way the READ must complete once, successfully, with every
 *     byte; completing at the first LAST would leave a hole in the buffer
 *     (what CI saw once under load, a READ into GPU memory that kept its old
 *     first bytes);
 *   - a READ ended early (LAST where a MIDDLE belongs): IBV_WC_BAD_RESP_ERR,
 *     never a success with bytes that were not written.
 *
 * The fake responder is a wire_peer.h listener, reached over TCP.
 */
#include "sv_test.h"
#include "wire_peer.h"
#include "common/util.h"

#include <arpa/inet.h>
#include <endian.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MTU 1024
#define NPKT 8
#define LEN (MTU * NPKT)
#define REMOTE_VA 0x100000ull
#define REMOTE_RKEY 0x4242u

enum flaw { LOSE_FIRST, LOSE_MIDDLE, LOSE_MIDDLE_REPLAY, END_EARLY };
#define LOST_MIDDLE 3 /* the response lost in the middle */

static struct {
	struct svt_wire_listener l;
	uint8_t mem[LEN];     /* what it answers READs from */
	_Atomic uint32_t requester; /* the QPN responses go to */
	_Atomic int flaw;
	_Atomic int requests; /* READ requests seen for the current case */
	_Atomic uint32_t last_from; /* the first response the last request asked for */
} fake;

/* Response k of the READ whose request had PSN psn, opcode `low` (FIRST...). */
static bool send_resp(int fd, uint32_t psn, uint32_t k, uint8_t low, uint64_t off)
{
	uint8_t pkt[sizeof(struct sv_bth) + sizeof(struct sv_aeth) + MTU];
	size_t hl = svt_wire_bth(pkt, SV_OP_RC | low, atomic_load(&fake.requester), psn + k);

	if (sv_opcode_info(SV_OP_RC | low)->off_aeth) {
		struct sv_aeth a = { htonl(SV_AETH_ACK << 24) };

		memcpy(pkt + hl, &a, sizeof(a));
		hl += sizeof(a);
	}
	memcpy(pkt + hl, fake.mem + off, MTU);
	return svt_wire_send(fd, pkt, hl + MTU);
}

/*
 * Answer one READ request: whole, or with this case's flaw the first time.
 * A request for the rest (from response `from` on: its PSN, address and
 * length moved on) is answered as a READ of its own, or as a replay of the
 * first READ from there (LOSE_MIDDLE_REPLAY).
 */
static bool answer(int fd, uint32_t psn, uint64_t va, uint32_t len)
{
	int flaw = atomic_load(&fake.flaw);
	bool first_time = atomic_fetch_add(&fake.requests, 1) == 0;
	uint32_t from, n;

	SVT_CHECK(va >= REMOTE_VA && va < REMOTE_VA + LEN && (va - REMOTE_VA) % MTU == 0);
	from = (uint32_t)((va - REMOTE_VA) / MTU);
	SVT_CHECK_EQ(len, LEN - from * MTU);
	atomic_store(&fake.last_from, from);
	n = len / MTU;
	for (uint32_t k = 0; k < n; k++) {
		uint32_t at = from + k; /* its place in the whole READ */
		uint8_t low = k == 0 ? SV_OP_READ_RESP_FIRST
			      : k + 1 == n ? SV_OP_READ_RESP_LAST : SV_OP_READ_RESP_MIDDLE;

		if (flaw == LOSE_MIDDLE_REPLAY && from)
			low = at + 1 == NPKT ? SV_OP_READ_RESP_LAST : SV_OP_READ_RESP_MIDDLE;
		if (first_time && flaw == LOSE_FIRST && k == 0)
			continue;
		if (first_time && (flaw == LOSE_MIDDLE || flaw == LOSE_MIDDLE_REPLAY) &&
		    k == LOST_MIDDLE)
			continue;
		if (first_time && flaw == END_EARLY && k == 2) {
			low = SV_OP_READ_RESP_LAST; /* the READ "ends" two packets in */
			return send_resp(fd, psn, k, low, (uint64_t)at * MTU);
		}
		if (!send_resp(fd, psn, k, low, (uint64_t)at * MTU))
			return false;
	}
	return true;
}

static void *responder(void *arg)
{
	static uint8_t pkt[SV_MAX_PACKET_LEN];
	int fd = svt_wire_accept(&fake.l);
	long n;

	(void)arg;
	while ((n = svt_wire_recv(fd, pkt, sizeof(pkt), -1)) > 0) {
		const struct sv_bth *bth = (const void *)pkt;

		if (bth->opcode != (SV_OP_RC | SV_OP_READ_REQUEST))
			continue; /* nothing else is asked of it here */
		SVT_CHECK_EQ(ntohl(bth->dqpn) & SV_PSN_MASK, fake.l.qpn);
		const struct sv_reth *r = (const void *)(pkt + sizeof(*bth));

		SVT_CHECK_EQ(ntohl(r->rkey), REMOTE_RKEY);
		if (!answer(fd, ntohl(bth->psn) & SV_PSN_MASK, be64toh(r->va), ntohl(r->dma_len)))
			break;
	}
	close(fd);
	return NULL;
}

static void one_case(struct svt_dev *d, struct ibv_cq *cq, enum flaw flaw)
{
	static const char *names[] = { "first response lost", "a middle response lost",
				       "a middle response lost, the rest replayed", "ended early" };
	struct svt_qp_init qi;
	struct svt_conn c;
	struct ibv_wc wc;
	uint8_t *buf = svt_alloc(LEN + 2 * 64);
	struct ibv_mr *mr = svt_reg_mr(d->pd, buf, LEN + 2 * 64, SVT_ACCESS_ALL);

	memset(buf, 0xee, LEN + 2 * 64);
	svt_qp_init_default(&qi, IBV_QPT_RC);
	struct ibv_qp *qp = svt_create_qp(d->pd, cq, cq, &qi);

	svt_conn_default(&c, IBV_QPT_RC);
	c.path_mtu = IBV_MTU_1024;
	c.timeout = 1; /* the engine's floor, 1 ms: the retry comes soon */
	atomic_store(&fake.requester, qp->qp_num);
	atomic_store(&fake.flaw, flaw);
	atomic_store(&fake.requests, 0);
	svt_qp_connect(qp, &c, &d->gid, fake.l.qpn);
	SVT_CHECK_OK(svt_post_send(qp, 7, IBV_WR_RDMA_READ, IBV_SEND_SIGNALED, buf + 64, LEN,
				   mr->lkey, REMOTE_VA, REMOTE_RKEY, 0));
	svt_poll_n(cq, 1, &wc, 10000);
	SVT_CHECK_EQ(wc.wr_id, 7);
	if (flaw == END_EARLY) {
		SVT_CHECK_MSG(wc.status == IBV_WC_BAD_RESP_ERR, "%s: status %s", names[flaw],
			      ibv_wc_status_str(wc.status));
		SVT_CHECK_EQ(atomic_load(&fake.requests), 1);
	} else {
		SVT_CHECK_MSG(wc.status == IBV_WC_SUCCESS, "%s: status %s", names[flaw],
			      ibv_wc_status_str(wc.status));
		SVT_CHECK_EQ(wc.byte_len, LEN);
		/* asked again after the loss, and complete only then: for the
		 * whole READ when nothing of it came, else for the rest */
		uint32_t asked_from = atomic_load(&fake.last_from);

		SVT_CHECK(atomic_load(&fake.requests) >= 2);
		SVT_CHECK_EQ(asked_from, flaw == LOSE_FIRST ? 0 : LOST_MIDDLE);
		SVT_CHECK_MEM(buf + 64, fake.mem, LEN);
	}
	for (int i = 0; i < 64; i++) {
		SVT_CHECK_EQ(buf[i], 0xee);
		SVT_CHECK_EQ(buf[64 + LEN + i], 0xee);
	}
	svt_log("%s: %s after %d request(s)", names[flaw], ibv_wc_status_str(wc.status),
		atomic_load(&fake.requests));
	SVT_CHECK_OK(ibv_destroy_qp(qp));
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	while (ibv_poll_cq(cq, 1, &wc) > 0)
		;
	free(buf);
}

int main(void)
{
	struct svt_dev d;
	pthread_t t;

	svt_watchdog(60);
	/* before the device opens: a QPN's own port, over TCP */
	setenv("SOFTVERBS_PORT", "0", 1);
	setenv("SOFTVERBS_TRANSPORT", "tcp", 1);
	svt_fill(fake.mem, LEN, 5);
	svt_wire_listen(&fake.l);
	SVT_CHECK_OK(pthread_create(&t, NULL, responder, NULL));
	svt_dev_open(&d);
	struct ibv_cq *cq = svt_create_cq(d.ctx, 16, NULL);

	one_case(&d, cq, LOSE_FIRST);
	one_case(&d, cq, LOSE_MIDDLE);
	one_case(&d, cq, LOSE_MIDDLE_REPLAY);
	one_case(&d, cq, END_EARLY);
	SVT_CHECK_OK(ibv_destroy_cq(cq));
	svt_dev_close(&d); /* closes the connection: the responder's read ends */
	pthread_join(t, NULL);
	close(fake.l.fd);
	return 0;
}
