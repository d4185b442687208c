/*
 * Packets from an endpoint a QP is not connected to change nothing.
 *
 * Two RC QPs of one device, A and B, are connected to a fake peer F (a
 * wire_peer.h listener that plays the other side by hand).  An outsider X
 * connects to the device under an identity of its own (not F's) and plays
 * the forged-packet attacks of issue 12, each while the real exchange with
 * F is half-way:
 *   - an ACK for A's outstanding WRITE: A must not complete it (F has not
 *     acknowledged it yet: the data might never have arrived);
 *   - a READ response for A's outstanding READ: neither completes it nor
 *     puts X's bytes in A's buffer;
 *   - at B, the responder: a WRITE at B's expected PSN with B's real rkey
 *     (would write B's memory), the same WRITE at an old PSN (would draw an
 *     ACK that tells X the expected PSN) and a READ with a bad rkey at an old
 *     PSN (would move B to the error state).
 * Each time X hears nothing back, memory is unchanged, B stays in RTS, and
 * the real exchange with F then completes with F's data.  An outsider that
 * claims F's identity in its HELLO but cannot prove the secret in its AUTH
 * is shut out before anything it sends counts (transport/auth.h).  A
 * proven peer that opens connection after connection under one identity
 * keeps only its newest eight.  The outsiders connect over tcp, or over shm
 * with SVT_WIRE_VIA=shm (transport_forged_peer.shm).
 */
#include "sv_test.h"
#include "wire_peer.h"
#include "common/util.h"
#include "transport/registry.h"

#include <arpa/inet.h>
#include <endian.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LEN 64
#define A_PSN 0x100
#define B_RQ_PSN 0x200

static uint8_t pkt[SV_MAX_PACKET_LEN];

/* The next frame from fd with this opcode (others skipped: retransmissions). */
static long expect(int fd, uint8_t opcode)
{
	for (;;) {
		long n = svt_wire_recv(fd, pkt, sizeof(pkt), 10000);

		SVT_CHECK_MSG(n > 0, "no frame with opcode 0x%02x", opcode);
		if (((const struct sv_bth *)pkt)->opcode == opcode)
			return n;
	}
}

static void send_ack(int fd, uint8_t low, uint32_t dqpn, uint32_t psn, const void *data,
		     uint32_t len)
{
	uint8_t p[sizeof(struct sv_bth) + sizeof(struct sv_aeth) + LEN];
	size_t hl = svt_wire_bth(p, SV_OP_RC | low, dqpn, psn);
	struct sv_aeth a = { htonl(SV_AETH_ACK << 24) };

	memcpy(p + hl, &a, sizeof(a));
	hl += sizeof(a);
	if (len)
		memcpy(p + hl, data, len);
	SVT_CHECK(svt_wire_send(fd, p, hl + len));
}

static void send_req(int fd, uint8_t low, uint32_t dqpn, uint32_t psn, uint64_t va,
		     uint32_t rkey, uint32_t len, const void *data)
{
	uint8_t p[sizeof(struct sv_bth) + sizeof(struct sv_reth) + LEN];
	size_t hl = svt_wire_bth(p, SV_OP_RC | low, dqpn, psn);
	struct sv_reth r = { htobe64(va), htonl(rkey), htonl(len) };

	memcpy(p + hl, &r, sizeof(r));
	hl += sizeof(r);
	if (data) {
		memcpy(p + hl, data, len);
		hl += len;
	}
	SVT_CHECK(svt_wire_send(fd, p, hl));
}

static void hears_nothing(int x)
{
	SVT_CHECK_EQ(svt_wire_recv(x, pkt, sizeof(pkt), 100), 0);
}

int main(void)
{
	struct svt_wire_listener f;
	struct svt_dev d;
	struct svt_qp_init qi;
	struct svt_conn c;
	struct ibv_wc wc;
	uint8_t theirs[LEN], evil[LEN];

	svt_watchdog(60);
	setenv("SOFTVERBS_PORT", "0", 1);
	/* the fake peer F is reached over tcp; the outsiders come over tcp,
	 * or over shm (SVT_WIRE_VIA=shm), for which the device listens there */
	setenv("SOFTVERBS_TRANSPORT", svt_wire_via_shm() ? "auto" : "tcp", 1);
	svt_fill(theirs, LEN, 3);
	memset(evil, 0xaa, LEN);
	svt_wire_listen(&f);
	svt_dev_open(&d);
	struct ibv_cq *cq = svt_create_cq(d.ctx, 16, NULL);
	uint8_t *mem = svt_alloc(4 * LEN);
	struct ibv_mr *mr = svt_reg_mr(d.pd, mem, 4 * LEN, SVT_ACCESS_ALL);

	memset(mem, 0xee, 4 * LEN);
	svt_qp_init_default(&qi, IBV_QPT_RC);
	struct ibv_qp *a = svt_create_qp(d.pd, cq, cq, &qi);
	struct ibv_qp *b = svt_create_qp(d.pd, cq, cq, &qi);

	svt_conn_default(&c, IBV_QPT_RC);
	c.sq_psn = A_PSN;
	c.rq_psn = B_RQ_PSN;
	c.timeout = 18; /* 1 s: no retransmission muddles the exchange */
	svt_qp_connect(a, &c, &d.gid, f.qpn);
	svt_qp_connect(b, &c, &d.gid, f.qpn + 1);

	/* A's WRITE, which F receives and does not acknowledge yet */
	svt_fill(mem, LEN, 1);
	SVT_CHECK_OK(svt_post_send(a, 1, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, mem, LEN, mr->lkey,
				   0x5000, 0x77, 0));
	int fd = svt_wire_accept(&f);

	expect(fd, SV_OP_RC | SV_OP_WRITE_ONLY);
	int x = svt_wire_connect(a->qp_num, (uint16_t)(sv_qpn_port(f.qpn) + 1));

	send_ack(x, SV_OP_ACK, a->qp_num, A_PSN, NULL, 0);
	svt_sleep_ms(100);
	SVT_CHECK_EQ(ibv_poll_cq(cq, 1, &wc), 0); /* X's ACK completed nothing */
	send_ack(fd, SV_OP_ACK, a->qp_num, A_PSN, NULL, 0);
	svt_poll_ok(cq, 1, &wc, 5000);
	SVT_CHECK_EQ(wc.wr_id, 1);

	/* A's READ: X answers first */
	SVT_CHECK_OK(svt_post_send(a, 2, IBV_WR_RDMA_READ, IBV_SEND_SIGNALED, mem + LEN, LEN,
				   mr->lkey, 0x5000, 0x77, 0));
	expect(fd, SV_OP_RC | SV_OP_READ_REQUEST);
	send_ack(x, SV_OP_READ_RESP_ONLY, a->qp_num, A_PSN + 1, evil, LEN);
	svt_sleep_ms(100);
	SVT_CHECK_EQ(ibv_poll_cq(cq, 1, &wc), 0);
	for (int i = 0; i < LEN; i++)
		SVT_CHECK_EQ(mem[LEN + i], 0xee);
	send_ack(fd, SV_OP_READ_RESP_ONLY, a->qp_num, A_PSN + 1, theirs, LEN);
	svt_poll_ok(cq, 1, &wc, 5000);
	SVT_CHECK_EQ(wc.wr_id, 2);
	SVT_CHECK_MEM(mem + LEN, theirs, LEN);

	/* B as the responder: X's WRITE at the expected PSN, again at an old
	 * one, and a READ with a bad rkey at an old PSN */
	uint64_t target = (uintptr_t)mem + 2 * LEN;

	send_req(x, SV_OP_WRITE_ONLY, b->qp_num, B_RQ_PSN, target, mr->rkey, LEN, evil);
	send_req(x, SV_OP_WRITE_ONLY, b->qp_num, B_RQ_PSN - 1, target, mr->rkey, LEN, evil);
	send_req(x, SV_OP_READ_REQUEST, b->qp_num, B_RQ_PSN - 2, target, mr->rkey ^ 0x100, LEN,
		 NULL);
	hears_nothing(x);
	for (int i = 0; i < LEN; i++)
		SVT_CHECK_EQ(mem[2 * LEN + i], 0xee);
	SVT_CHECK_EQ(svt_qp_state(b), IBV_QPS_RTS);
	SVT_CHECK_EQ(ibv_poll_cq(cq, 1, &wc), 0);

	/* F's WRITE to B at that PSN is executed and acknowledged */
	send_req(fd, SV_OP_WRITE_ONLY, b->qp_num, B_RQ_PSN, target, mr->rkey, LEN, theirs);
	expect(fd, SV_OP_RC | SV_OP_ACK);
	SVT_CHECK_EQ(ntohl(((const struct sv_bth *)pkt)->psn) & SV_PSN_MASK, B_RQ_PSN);
	SVT_CHECK_MEM(mem + 2 * LEN, theirs, LEN);
	hears_nothing(x);

	/* an outsider that says it is F, but cannot prove the secret: the
	 * device closes the connection before any frame of it counts */
	int y = svt_wire_connect_as(b->qp_num, sv_qpn_port(f.qpn), false);
	uint8_t p[sizeof(struct sv_bth) + sizeof(struct sv_reth) + LEN];
	size_t hl = svt_wire_bth(p, SV_OP_RC | SV_OP_WRITE_ONLY, b->qp_num, B_RQ_PSN + 1);
	struct sv_reth r = { htobe64(target), htonl(mr->rkey), htonl(LEN) };

	memcpy(p + hl, &r, sizeof(r));
	memcpy(p + hl + sizeof(r), evil, LEN);
	(void)svt_wire_send(y, p, hl + sizeof(r) + LEN); /* it may be closed already */
	SVT_CHECK_EQ(svt_wire_recv(y, pkt, sizeof(pkt), 5000), -1);
	SVT_CHECK_MEM(mem + 2 * LEN, theirs, LEN);
	SVT_CHECK_EQ(svt_qp_state(b), IBV_QPS_RTS);
	close(y);

	/* a proven peer that keeps opening connections under one identity:
	 * the device keeps its newest SV_MAX_CONNS_PER_PEER (8) and closes the
	 * older ones, so no peer holds more than that much buffer memory */
	int z[12];
	uint16_t zport = (uint16_t)(sv_qpn_port(f.qpn) + 2);

	for (int i = 0; i < 12; i++)
		z[i] = svt_wire_connect(a->qp_num, zport);
	for (int i = 0; i < 4; i++)
		SVT_CHECK_MSG(svt_wire_recv(z[i], pkt, sizeof(pkt), 5000) == -1,
			      "the peer's connection %d of 12 was kept", i + 1);
	for (int i = 4; i < 12; i++)
		SVT_CHECK_MSG(svt_wire_recv(z[i], pkt, sizeof(pkt), 200) == 0,
			      "the peer's connection %d of 12 was closed", i + 1);
	for (int i = 0; i < 12; i++)
		close(z[i]);
	svt_log("ok: one peer, 12 connections: the oldest 4 closed, the newest 8 kept");

	close(x);
	close(fd);
	SVT_CHECK_OK(ibv_destroy_qp(a));
	SVT_CHECK_OK(ibv_destroy_qp(b));
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	while (ibv_poll_cq(cq, 1, &wc) > 0)
		;
	SVT_CHECK_OK(ibv_destroy_cq(cq));
	svt_dev_close(&d);
	close(f.fd);
	free(mem);
	return 0;
}
