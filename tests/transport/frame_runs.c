/*
 * A stream's frame carries a run of whole packets of one message
 * (SV_STREAM_RUN_MAX of payload, one header, the PSN of its first packet),
 * where a datagram carries one packet of the path MTU.  A peer that speaks
 * the wire format itself checks both ends over tcp:
 *
 *   - as a fake responder of a real RC QP: a 1 MiB WRITE arrives as 64
 *     frames of 16 KiB (not 256 of 4 KiB), FIRST, MIDDLE..., LAST, each
 *     PSN the one after the run before it, every byte the source's, and
 *     a run + 100 bytes as a run and a LAST of 100; a READ answered in
 *     runs (three of 16 KiB and one of 8, FIRST, MIDDLE, MIDDLE, LAST) completes
 *     with every byte, and one whose MIDDLE run is not whole packets fails
 *     IBV_WC_BAD_RESP_ERR without a success of bytes never written;
 *   - as the peer of a real QP that it sends to: a WRITE in two runs lands
 *     whole and is acknowledged at the last PSN of the last run; a WRITE
 *     whose run is followed, in one burst, by 100 single packets (cut
 *     otherwise than the receiver predicts the frames after a run: what
 *     its direct read took goes back into its buffer, never more than
 *     that holds; gpu_rdma's GPU sources, sent a packet at a time, showed
 *     it writing past the buffer before) lands whole too; a FIRST
 *     run that is not whole packets is refused (NAK invalid request), and
 *     nothing of it is written.
 */
#include "sv_test.h"
#include "wire_peer.h"
#include "transport/transport.h"
#include "transport/registry.h"
#include "common/util.h"

#include <arpa/inet.h>
#include <endian.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MTU 4096u
#define RUN SV_STREAM_RUN_MAX
#define WLEN (1u << 20)
#define RLEN (3 * RUN + 8192)
#define REMOTE_VA 0x100000ull
#define REMOTE_RKEY 0x4242u
/* the responder side's MR, and where its burst lands in it */
#define MEM_LEN (1u << 20)
#define BURST_AT (2 * RUN)

static struct {
	struct svt_wire_listener l;
	uint8_t *mem;               /* what it answers READs from */
	uint8_t *got;               /* what WRITEs brought */
	_Atomic uint32_t requester; /* the QPN responses go to */
	_Atomic int bad_read;       /* answer the next READ with a broken run */
	/* the WRITE being taken: its first PSN and offset; the frames that
	 * carried new PSNs (a resend, a busy machine's ack timeout, is not
	 * counted), and the PSN after the newest */
	_Atomic int frames, bad;
	uint32_t msg_psn, hi_psn;
	uint64_t msg_off;
	bool have_msg, have_hi;
} fake;

static void fail_frame(const char *what, uint32_t psn, uint32_t plen)
{
	svt_log("FAIL: %s (psn %#x, %u bytes)", what, psn, plen);
	atomic_fetch_add(&fake.bad, 1);
}

static bool ack(int fd, uint32_t psn)
{
	uint8_t pkt[sizeof(struct sv_bth) + sizeof(struct sv_aeth)];
	size_t hl = svt_wire_bth(pkt, SV_OP_RC | SV_OP_ACK, atomic_load(&fake.requester), psn);
	struct sv_aeth a = { htonl((uint32_t)SV_AETH_ACK << 24 | 0x1f << 24) };

	memcpy(pkt + hl, &a, sizeof(a));
	return svt_wire_send(fd, pkt, hl + sizeof(a));
}

/* One frame of a WRITE: where it is in the run sequence, and its bytes. */
static bool take_write(int fd, const uint8_t *pkt, long n)
{
	const struct sv_bth *bth = (const void *)pkt;
	const struct sv_opcode_info *op = sv_opcode_info(bth->opcode);
	uint32_t psn = ntohl(bth->psn) & SV_PSN_MASK, plen = (uint32_t)(n - op->hdr_len);
	bool first = op->mask & SV_OPF_FIRST, last = op->mask & SV_OPF_LAST;

	uint32_t npk = (plen + MTU - 1) / MTU;
	uint64_t off;

	if (first) {
		const struct sv_reth *r = (const void *)(pkt + op->off_reth);

		fake.msg_off = be64toh(r->va) - REMOTE_VA;
		fake.msg_psn = psn;
		fake.have_msg = true;
	}
	if (!fake.have_msg) {
		fail_frame("a WRITE that did not begin with FIRST", psn, plen);
		return true;
	}
	if (plen > RUN || (!last && plen % MTU) || !plen)
		fail_frame("not a run of whole packets within a frame", psn, plen);
	/* its place: one path MTU a PSN from the message's first */
	off = fake.msg_off + (uint64_t)((psn - fake.msg_psn) & SV_PSN_MASK) * MTU;
	if (off + plen > WLEN)
		fail_frame("past the end of the WRITE", psn, plen);
	else
		memcpy(fake.got + off, pkt + op->hdr_len, plen);
	if (!fake.have_hi || sv_psn_cmp(psn, fake.hi_psn) >= 0) {
		if (fake.have_hi && psn != fake.hi_psn)
			fail_frame("not the PSN after the run before it", psn, plen);
		atomic_fetch_add(&fake.frames, 1);
		fake.hi_psn = sv_psn_add(psn, npk);
		fake.have_hi = true;
	}
	return !last || ack(fd, sv_psn_add(psn, npk - 1));
}

/* A READ's responses in runs; the broken one's MIDDLE is 100 bytes short
 * of whole packets. */
static bool answer_read(int fd, uint32_t psn, uint64_t va, uint32_t len)
{
	static uint8_t pkt[sizeof(struct sv_bth) + sizeof(struct sv_aeth) + RUN];
	bool bad = atomic_exchange(&fake.bad_read, 0);

	SVT_CHECK(va == REMOTE_VA && len == RLEN);
	for (uint32_t off = 0; off < len;) {
		uint32_t plen = SV_MIN(RUN, len - off), k = off / MTU;
		uint8_t low = !off ? SV_OP_READ_RESP_FIRST
			      : off + plen == len ? SV_OP_READ_RESP_LAST
						  : SV_OP_READ_RESP_MIDDLE;
		size_t hl = svt_wire_bth(pkt, SV_OP_RC | low, atomic_load(&fake.requester),
					 sv_psn_add(psn, k));

		if (bad && low == SV_OP_READ_RESP_MIDDLE)
			plen -= 100;
		if (sv_opcode_info(SV_OP_RC | low)->off_aeth) {
			struct sv_aeth a = { htonl((uint32_t)SV_AETH_ACK << 24) };

			memcpy(pkt + hl, &a, sizeof(a));
			hl += sizeof(a);
		}
		memcpy(pkt + hl, fake.mem + off, plen);
		if (!svt_wire_send(fd, pkt, hl + plen))
			return false;
		if (bad && low == SV_OP_READ_RESP_MIDDLE)
			return true; /* (the rest would not be looked at) */
		off += plen;
	}
	return true;
}

static void *responder(void *arg)
{
	static uint8_t pkt[SV_STREAM_FRAME_MAX];
	int fd = svt_wire_accept(&fake.l);
	long n;
	bool ok = true;

	(void)arg;
	while (ok && (n = svt_wire_recv(fd, pkt, sizeof(pkt), -1)) > 0) {
		const struct sv_bth *bth = (const void *)pkt;
		const struct sv_opcode_info *op = sv_opcode_info(bth->opcode);

		if (!op || (bth->opcode & 0xe0) != SV_OP_RC)
			continue;
		if (op->mask & SV_OPF_WRITE) {
			ok = take_write(fd, pkt, n);
		} else if (bth->opcode == (SV_OP_RC | SV_OP_READ_REQUEST)) {
			const struct sv_reth *r = (const void *)(pkt + sizeof(*bth));

			ok = answer_read(fd, ntohl(bth->psn) & SV_PSN_MASK, be64toh(r->va),
					 ntohl(r->dma_len));
		}
	}
	close(fd);
	return NULL;
}

/* ---- softverbs as the requester ---- */

/* A READ of the fake's RLEN bytes into buf: its completion. */
static struct ibv_wc read_once(struct ibv_qp *qp, struct ibv_cq *cq, uint8_t *buf, uint32_t lkey,
			       uint64_t id)
{
	struct ibv_wc wc;

	SVT_CHECK_OK(svt_post_send(qp, id, IBV_WR_RDMA_READ, IBV_SEND_SIGNALED, buf, RLEN, lkey,
				   REMOTE_VA, REMOTE_RKEY, 0));
	svt_poll_n(cq, 1, &wc, 20000);
	SVT_CHECK_EQ(wc.wr_id, id);
	return wc;
}

static void requester_side(struct svt_dev *d)
{
	struct ibv_cq *cq = svt_create_cq(d->ctx, 16, NULL);
	uint8_t *buf = svt_alloc(WLEN + 128);
	struct ibv_mr *mr = svt_reg_mr(d->pd, buf, WLEN + 128, SVT_ACCESS_ALL);
	struct svt_qp_init qi;
	struct svt_conn c;
	struct ibv_wc wc;
	struct ibv_qp *qp;
	int frames;

	svt_qp_init_default(&qi, IBV_QPT_RC);
	qp = svt_create_qp(d->pd, cq, cq, &qi);
	svt_conn_default(&c, IBV_QPT_RC);
	c.path_mtu = IBV_MTU_4096;
	atomic_store(&fake.requester, qp->qp_num);
	svt_qp_connect(qp, &c, &d->gid, fake.l.qpn);

	/* a 1 MiB WRITE: 16 runs */
	svt_fill(buf, WLEN, 0x31);
	SVT_CHECK_OK(svt_post_send(qp, 1, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, buf, WLEN,
				   mr->lkey, REMOTE_VA, REMOTE_RKEY, 0));
	svt_poll_n(cq, 1, &wc, 20000);
	SVT_CHECK_EQ(wc.wr_id, 1);
	SVT_CHECK_WC_STATUS(wc, IBV_WC_SUCCESS);
	frames = atomic_exchange(&fake.frames, 0);
	SVT_CHECK_EQ(atomic_load(&fake.bad), 0);
	SVT_CHECK_MEM(fake.got, buf, WLEN);
	SVT_CHECK_MSG(frames == (int)(WLEN / RUN), "a 1 MiB WRITE came in %d frames, not %u runs",
		      frames, WLEN / RUN);
	svt_log("a 1 MiB WRITE: %d frames of %u KiB", frames, RUN >> 10);

	/* a run and the 100 bytes after it */
	svt_fill(buf, RUN + 100, 0x32);
	SVT_CHECK_OK(svt_post_send(qp, 2, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, buf, RUN + 100,
				   mr->lkey, REMOTE_VA, REMOTE_RKEY, 0));
	svt_poll_n(cq, 1, &wc, 20000);
	SVT_CHECK_WC_STATUS(wc, IBV_WC_SUCCESS);
	SVT_CHECK_EQ(atomic_exchange(&fake.frames, 0), 2);
	SVT_CHECK_EQ(atomic_load(&fake.bad), 0);
	SVT_CHECK_MEM(fake.got, buf, RUN + 100);

	/* a READ answered in runs */
	memset(buf, 0xee, RLEN + 128);
	wc = read_once(qp, cq, buf + 64, mr->lkey, 3);
	SVT_CHECK_MSG(wc.status == IBV_WC_SUCCESS, "a READ answered in runs: %s",
		      ibv_wc_status_str(wc.status));
	SVT_CHECK_EQ(wc.byte_len, RLEN);
	SVT_CHECK_MEM(buf + 64, fake.mem, RLEN);
	for (int i = 0; i < 64; i++) {
		SVT_CHECK_EQ(buf[i], 0xee);
		SVT_CHECK_EQ(buf[64 + RLEN + i], 0xee);
	}

	/* ... and one whose MIDDLE run is short of whole packets */
	atomic_store(&fake.bad_read, 1);
	wc = read_once(qp, cq, buf + 64, mr->lkey, 4);
	SVT_CHECK_MSG(wc.status == IBV_WC_BAD_RESP_ERR, "a READ with a broken run: %s",
		      ibv_wc_status_str(wc.status));
	svt_log("a READ answered in runs: success; one with a MIDDLE run short of whole "
		"packets: %s", ibv_wc_status_str(wc.status));
	SVT_CHECK_OK(ibv_destroy_qp(qp));
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	SVT_CHECK_OK(ibv_destroy_cq(cq));
	free(buf);
}

/* ---- softverbs as the responder ---- */

static uint32_t peer_block; /* svt_wire_spare_block */
#define PEER_QPN ((peer_block << SV_QPN_BLOCK_SHIFT) | 0x777)

/* A WRITE request frame, its length word first, into out: FIRST (with its
 * RETH), MIDDLE or LAST, plen bytes of fill from psn.  Its size. */
static size_t write_frame(uint8_t *out, uint8_t low, uint32_t dqpn, uint32_t psn, uint64_t va,
			  uint32_t rkey, uint32_t len, uint32_t plen, uint8_t fill)
{
	uint8_t *pkt = out + 4;
	size_t hl = svt_wire_bth_flags(pkt, SV_OP_RC | low,
				       low == SV_OP_WRITE_LAST ? SV_BTH_ACKREQ : 0, dqpn, psn);
	uint32_t flen;

	if (low == SV_OP_WRITE_FIRST) {
		struct sv_reth r = { htobe64(va), htonl(rkey), htonl(len) };

		memcpy(pkt + hl, &r, sizeof(r));
		hl += sizeof(r);
	}
	memset(pkt + hl, fill, plen);
	flen = htonl((uint32_t)(hl + plen));
	memcpy(out, &flen, 4);
	return 4 + hl + plen;
}

static bool send_write(int fd, uint8_t low, uint32_t dqpn, uint32_t psn, uint64_t va,
		       uint32_t rkey, uint32_t len, uint32_t plen, uint8_t fill)
{
	static uint8_t frame[4 + SV_STREAM_FRAME_MAX];

	return svt_send_all(fd, frame, write_frame(frame, low, dqpn, psn, va, rkey, len, plen, fill));
}

/* The next ACK or NAK the device sends: its AETH syndrome, and its PSN. */
static uint8_t next_answer(int fd, uint32_t *psn)
{
	uint8_t pkt[SV_STREAM_FRAME_MAX];
	long n;

	while ((n = svt_wire_recv(fd, pkt, sizeof(pkt), 5000)) > 0) {
		const struct sv_bth *bth = (const void *)pkt;
		const struct sv_aeth *a = (const void *)(pkt + sizeof(*bth));

		if (bth->opcode != (SV_OP_RC | SV_OP_ACK))
			continue;
		*psn = ntohl(bth->psn) & SV_PSN_MASK;
		return (uint8_t)(ntohl(a->syn_msn) >> 24);
	}
	SVT_FAIL("no ACK or NAK from the device within 5 s");
	return 0;
}

static void responder_side(void)
{
	struct svt_dev d;
	struct svt_qp_init qi;
	struct ibv_qp *qp;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	union ibv_gid peer;
	const uint32_t nsingle = 100, blen = RUN + (nsingle + 1) * MTU;
	uint8_t *mem = svt_alloc(MEM_LEN), *burst = svt_alloc(blen + 64 * (nsingle + 2)), syn;
	uint32_t psn, first = 0x1000, n1 = RUN / MTU, p;
	size_t bl = 0;
	int fd;

	svt_dev_open(&d);
	cq = svt_create_cq(d.ctx, 16, NULL);
	memset(mem, 0xc5, MEM_LEN);
	mr = svt_reg_mr(d.pd, mem, MEM_LEN, SVT_ACCESS_ALL);
	svt_qp_init_default(&qi, IBV_QPT_RC);
	qp = svt_create_qp(d.pd, cq, cq, &qi);
	peer = d.gid;
	svt_qp_connect(qp, NULL, &peer, PEER_QPN); /* path MTU 4096, rq_psn 0x1000 */
	fd = svt_wire_connect(qp->qp_num, sv_qpn_port(PEER_QPN));
	SVT_CHECK(fd >= 0);

	/* a WRITE of a run and 300 bytes */
	SVT_CHECK(send_write(fd, SV_OP_WRITE_FIRST, qp->qp_num, first, (uintptr_t)mem, mr->rkey,
			     RUN + 300, RUN, 0x41));
	SVT_CHECK(send_write(fd, SV_OP_WRITE_LAST, qp->qp_num, sv_psn_add(first, n1), 0, 0, 0,
			     300, 0x41));
	syn = next_answer(fd, &psn);
	SVT_CHECK_EQ(syn & SV_AETH_TYPE_MASK, SV_AETH_ACK);
	SVT_CHECK_EQ(psn, sv_psn_add(first, n1)); /* the last PSN of the last run */
	for (uint32_t i = 0; i < RUN + 300; i++)
		if (mem[i] != 0x41)
			SVT_FAIL("byte %u of a WRITE in runs is %#x", i, mem[i]);
	SVT_CHECK_EQ(mem[RUN + 300], 0xc5);

	/* a run, then single packets, in one burst */
	p = sv_psn_add(first, n1 + 1);
	bl += write_frame(burst + bl, SV_OP_WRITE_FIRST, qp->qp_num, p, (uintptr_t)mem + BURST_AT,
			  mr->rkey, blen, RUN, 0x43);
	p = sv_psn_add(p, n1);
	for (uint32_t i = 0; i <= nsingle; i++, p = sv_psn_add(p, 1))
		bl += write_frame(burst + bl, i < nsingle ? SV_OP_WRITE_MIDDLE : SV_OP_WRITE_LAST,
				  qp->qp_num, p, 0, 0, 0, MTU, 0x43);
	SVT_CHECK(svt_send_all(fd, burst, bl));
	syn = next_answer(fd, &psn);
	SVT_CHECK_EQ(syn & SV_AETH_TYPE_MASK, SV_AETH_ACK);
	SVT_CHECK_EQ(psn, sv_psn_add(p, SV_PSN_MASK));
	for (uint32_t i = 0; i < blen; i++)
		if (mem[BURST_AT + i] != 0x43)
			SVT_FAIL("byte %u of a run and single packets is %#x", i, mem[BURST_AT + i]);
	SVT_CHECK_EQ(mem[BURST_AT - 1], 0xc5);
	SVT_CHECK_EQ(mem[BURST_AT + blen], 0xc5);

	/* a FIRST run that is not whole packets */
	SVT_CHECK(send_write(fd, SV_OP_WRITE_FIRST, qp->qp_num, p, (uintptr_t)mem + RUN, mr->rkey,
			     RUN, RUN - 100, 0x42));
	syn = next_answer(fd, &psn);
	SVT_CHECK_MSG((syn & SV_AETH_TYPE_MASK) == SV_AETH_NAK && (syn & 0x1f) == SV_NAK_INV_REQ,
		      "a run short of whole packets answered with syndrome %#x", syn);
	SVT_CHECK_EQ(psn, p);
	for (uint32_t i = RUN + 300; i < BURST_AT; i++)
		if (mem[i] != 0xc5)
			SVT_FAIL("byte %u written by a run refused", i);
	svt_log("a WRITE in two runs landed, acknowledged at its last PSN; a run and %u single "
		"packets in one burst landed; a run short of whole packets: NAK invalid request, "
		"nothing written",
		nsingle);
	close(fd);
	SVT_CHECK_OK(ibv_destroy_qp(qp));
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	SVT_CHECK_OK(ibv_destroy_cq(cq));
	svt_dev_close(&d);
	free(mem);
	free(burst);
}

int main(void)
{
	struct svt_dev d;
	pthread_t t;

	svt_watchdog(60);
	/* before the device opens: a QPN's own port, over TCP */
	setenv("SOFTVERBS_PORT", "0", 1);
	setenv("SOFTVERBS_TRANSPORT", "tcp", 1);
	fake.mem = svt_alloc(RLEN);
	fake.got = svt_alloc(WLEN);
	svt_fill(fake.mem, RLEN, 5);
	svt_wire_listen(&fake.l);
	SVT_CHECK_OK(pthread_create(&t, NULL, responder, NULL));
	svt_dev_open(&d);
	requester_side(&d);
	svt_dev_close(&d); /* closes the connection: the responder's read ends */
	pthread_join(t, NULL);
	close(fake.l.fd);

	peer_block = svt_wire_spare_block();
	responder_side();
	free(fake.mem);
	free(fake.got);
	return 0;
}
