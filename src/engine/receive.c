/*
 * Receive path of a connection: the byte stream is cut into frames, and
 * each frame goes to the responder or the completer.
 *
 * Frames normally arrive through large reads into the connection's buffer.
 * The payload of an RDMA WRITE would then be copied a second time, from the
 * buffer into target memory, and at TCP speeds that copy costs as much as
 * the kernel's own.  So the payload of an in-order WRITE is received
 * straight into target memory instead ("direct receive"):
 *
 *  1. The headers of a WRITE packet are in the buffer, (most of) its payload
 *     is not.  The responder says whether it would accept the packet and
 *     where the payload goes (sv_responder_direct); the rest of the message
 *     lies contiguous behind it in the same MR.
 *  2. Once the socket holds the rest of that packet (SO_RCVLOWAT keeps epoll
 *     quiet until then, so a payload is never half placed), one readv takes
 *     it into place, together with the packets predicted to follow (same
 *     QP, next PSNs, WRITE MIDDLE/LAST): for each a small header slot and
 *     its payload in place, as many as the socket holds whole.
 *  3. Each predicted header is checked against what arrived.  Matching
 *     packets are dispatched as usual with their payload already in place
 *     (the responder finds source == destination and does not copy).  At
 *     the first mismatch (another QP's packet, a WRITE with immediate data,
 *     ...) the bytes from there on are gathered back into the buffer and
 *     parsed as usual.  Bytes a mismatch left inside the message's range
 *     are overwritten when the real packet arrives; until the WRITE
 *     completes its target range is undefined, as on hardware.
 *
 * Everything here runs in the thread that holds the engine's progress_lock.
 */
#include "engine/engine.h"
#include "engine/dma.h"

#include <arpa/inet.h>
#include <errno.h>
#include <string.h>

/* Payload bytes below which placing a packet is not worth a system call. */
#define RX_DIRECT_MIN 1024u
/* Length word + BTH: the whole header of a WRITE MIDDLE or LAST. */
#define RX_SLOT 16u
/* Packets one direct read may take beyond the first. */
#define RX_PREDICT 56
/* Bytes after the predicted packets that a direct read also takes (the next
 * packet's headers), and where in the buffer they go. */
#define RX_TAIL_LEN 64u
#define RX_TAIL_OFF 128u

enum rx_direct {
	RX_PLACED,  /* packets were received in place and dispatched */
	RX_WAIT,    /* the rest of the packet is not here yet */
	RX_NOT_NOW, /* a WRITE, but too little left to be worth it */
	RX_NO,      /* not a packet for direct receive */
};

/* Dispatch the complete frames in the buffer; the incomplete rest moves to
 * its start.  Returns false if the connection died. */
static bool parse_frames(struct sv_conn *c)
{
	size_t off = 0;

	while (c->rx_len - off >= 4) {
		uint32_t flen;

		memcpy(&flen, c->rxbuf + off, 4);
		flen = ntohl(flen);
		if (flen > SV_MAX_FRAME_LEN || flen == 0) {
			sv_warn("bad frame length %u; closing connection", flen);
			sv_engine_conn_fail(c);
			return false;
		}
		if (c->rx_len - off - 4 < flen)
			break;
		sv_engine_rx_frame(c, c->rxbuf + off + 4, flen);
		if (atomic_load(&c->state) == SV_CONN_DEAD)
			return false;
		off += 4 + flen;
	}
	memmove(c->rxbuf, c->rxbuf + off, c->rx_len - off);
	c->rx_len -= off;
	return true;
}

static int set_lowat(struct sv_conn *c, size_t bytes)
{
	if (c->rx_lowat == bytes)
		return 0;
	c->rx_lowat = bytes;
	return c->ops->set_lowat(c, bytes);
}

/* What the header of predicted packet j must say. */
struct rx_expect {
	uint32_t flen, psn, qpn;
	uint8_t opcode;
};

static bool slot_matches(const uint8_t *slot, const struct rx_expect *x)
{
	const struct sv_bth *bth = (const void *)(slot + 4);
	uint32_t flen;

	memcpy(&flen, slot, 4);
	return ntohl(flen) == x->flen && bth->opcode == x->opcode &&
	       (ntohl(bth->dqpn) & SV_PSN_MASK) == x->qpn &&
	       (ntohl(bth->psn) & SV_PSN_MASK) == x->psn;
}

/*
 * Bytes a direct read put into iov[from..niov) that were not the packets
 * predicted, `got` of them from iov[from] on: back into the buffer, in
 * stream order, for the plain parser.  The last iovec is the buffer's own
 * tail area when has_tail.
 */
static void rx_gather(struct sv_conn *c, const struct iovec *iov, int from, int niov, size_t got,
		      bool has_tail)
{
	int end = has_tail ? niov - 1 : niov;
	size_t g = 0, left = got;

	for (int i = from; i < end && left; i++) {
		size_t l = SV_MIN(iov[i].iov_len, left);

		g += l;
		left -= l;
	}
	/* the tail first: the pieces below may overwrite where it was read */
	memmove(c->rxbuf + g, c->rxbuf + RX_TAIL_OFF, left);
	c->rx_len = g + left;
	g = 0;
	left = got;
	for (int i = from; i < end && left; i++) {
		size_t l = SV_MIN(iov[i].iov_len, left);

		memcpy(c->rxbuf + g, iov[i].iov_base, l);
		g += l;
		left -= l;
	}
}

/*
 * The buffer holds the start of one incomplete frame.  Receive it, and the
 * packets predicted to follow it, in place if the responder would accept it.
 */
static enum rx_direct rx_direct(struct sv_conn *c)
{
	struct sv_context *ctx = c->eng->ctx;
	uint8_t slots[RX_PREDICT][RX_SLOT];
	struct rx_expect expect[RX_PREDICT];
	struct iovec iov[2 + 2 * RX_PREDICT];
	const struct sv_opcode_info *op;
	const struct sv_bth *bth;
	uint32_t flen, hl, plen, have, need, msg_left, mtu, off, psn, qpn;
	uint8_t *dst = NULL;
	size_t avail_left;
	ssize_t avail, n;
	struct sv_qp *qp;
	int niov = 0, npred = 0;
	bool ok;

	if (c->rx_len < 4 + sizeof(*bth))
		return RX_NOT_NOW;
	memcpy(&flen, c->rxbuf, 4);
	flen = ntohl(flen);
	bth = (const void *)(c->rxbuf + 4);
	op = sv_opcode_info(bth->opcode);
	if (!c->hello_seen || !op || !(op->mask & SV_OPF_WRITE) || op->off_immdt ||
	    flen < op->hdr_len || flen > SV_MAX_FRAME_LEN)
		return RX_NO; /* the plain parser deals with it */
	hl = op->hdr_len;
	if (c->rx_len < 4 + hl)
		return RX_NOT_NOW;
	plen = flen - hl;
	have = (uint32_t)(c->rx_len - 4 - hl);
	need = plen - have;
	if (need < RX_DIRECT_MIN)
		return RX_NOT_NOW;
	qpn = ntohl(bth->dqpn) & SV_PSN_MASK;
	psn = ntohl(bth->psn) & SV_PSN_MASK;

	avail = c->ops->readable(c);
	if (avail < 0)
		return RX_NO; /* the plain read reports the error */
	if ((size_t)avail < need) {
		/* wake when the whole payload can be taken at once */
		if (set_lowat(c, need))
			return RX_NO;
		return RX_WAIT;
	}
	if (set_lowat(c, 1))
		return RX_NO;

	qp = sv_qp_lookup(ctx, qpn);
	if (!qp)
		return RX_NO;
	/* the pointer stays valid while the MR read lock is held; it is taken
	 * inside qp->lock, as everywhere, and kept for the read */
	pthread_mutex_lock(&qp->lock);
	sv_mr_read_lock(ctx);
	ok = sv_responder_direct(qp, op, c->rxbuf + 4, plen, &dst, &msg_left);
	mtu = qp->mtu;
	pthread_mutex_unlock(&qp->lock);
	sv_qp_put(qp);
	if (!ok) {
		sv_mr_read_unlock(ctx);
		return RX_NO;
	}

	/* what is here already goes into place by copy, the rest by the read */
	sv_dma_write(dst, c->rxbuf + 4 + hl, have);
	iov[niov].iov_base = dst + have;
	iov[niov++].iov_len = need;
	off = plen;
	avail_left = (size_t)avail - need;
	while (npred < RX_PREDICT && off < msg_left) {
		uint32_t pl = SV_MIN(mtu, msg_left - off);
		struct rx_expect *x = &expect[npred];

		if (avail_left < RX_SLOT + pl)
			break;
		x->flen = sizeof(struct sv_bth) + pl;
		x->psn = sv_psn_add(psn, (uint32_t)npred + 1);
		x->qpn = qpn;
		x->opcode = (bth->opcode & 0xe0) |
			    (off + pl == msg_left ? SV_OP_WRITE_LAST : SV_OP_WRITE_MIDDLE);
		iov[niov].iov_base = slots[npred];
		iov[niov++].iov_len = RX_SLOT;
		iov[niov].iov_base = dst + off;
		iov[niov++].iov_len = pl;
		avail_left -= RX_SLOT + pl;
		off += pl;
		npred++;
	}
	if (avail_left) {
		iov[niov].iov_base = c->rxbuf + RX_TAIL_OFF;
		iov[niov++].iov_len = SV_MIN(avail_left, RX_TAIL_LEN);
	}
	n = c->ops->readv(c, iov, niov);
	sv_mr_read_unlock(ctx);
	if (n < 0 || (size_t)n < need) {
		/* the socket promised these bytes; a payload half placed cannot be
		 * handed on, so the connection goes, as a broken link would */
		sv_warn("short read on a connection (%zd); closing it", n);
		sv_engine_conn_fail(c);
		return RX_PLACED;
	}

	sv_engine_rx_placed(c, c->rxbuf + 4, dst, plen);
	n -= (ssize_t)need;
	c->rx_len = 0;
	int j = 0;

	for (; j < npred && n > 0 && atomic_load(&c->state) != SV_CONN_DEAD; j++) {
		uint32_t pl = (uint32_t)iov[2 + 2 * j].iov_len;

		if ((size_t)n < RX_SLOT + pl || !slot_matches(slots[j], &expect[j]))
			break; /* not the packet predicted */
		sv_engine_rx_placed(c, slots[j] + 4, iov[2 + 2 * j].iov_base, pl);
		n -= (ssize_t)(RX_SLOT + pl);
	}
	if (atomic_load(&c->state) != SV_CONN_DEAD)
		rx_gather(c, iov, 1 + 2 * j, niov, (size_t)n, avail_left != 0);
	return RX_PLACED;
}

/* In a stream of WRITEs: the rest of the frame begun in the buffer and the
 * headers of the next one, so that its payload can be received in place. */
static size_t direct_read_len(const struct sv_conn *c)
{
	uint32_t flen;

	if (c->rx_len < 4)
		return RX_TAIL_LEN - c->rx_len;
	memcpy(&flen, c->rxbuf, 4);
	flen = ntohl(flen);
	if (flen > SV_MAX_FRAME_LEN)
		return 1; /* the parser rejects it */
	return 4 + flen - c->rx_len + RX_TAIL_LEN;
}

/* Read and dispatch what a connection has. */
void sv_conn_input(struct sv_conn *c, bool closing)
{
	for (int rounds = 0; rounds < 16; rounds++) {
		size_t want;
		ssize_t n;

		if (!closing && c->rx_len) {
			switch (rx_direct(c)) {
			case RX_PLACED:
				c->rx_direct = true;
				if (atomic_load(&c->state) == SV_CONN_DEAD || !parse_frames(c))
					return;
				continue;
			case RX_WAIT:
				c->rx_direct = true;
				return;
			case RX_NOT_NOW:
				break;
			case RX_NO:
				c->rx_direct = false;
				break;
			}
		}
		if (c->rx_lowat != 1 && set_lowat(c, 1)) {
			sv_engine_conn_fail(c);
			return;
		}
		/* inside a stream of WRITEs, read only up to the next headers, so
		 * that the payloads that follow can be received in place */
		want = c->rx_cap - c->rx_len;
		if (c->rx_direct && !closing)
			want = SV_MIN(want, direct_read_len(c));
		n = c->ops->read(c, c->rxbuf + c->rx_len, want);
		if (n == 0 || (n < 0 && n != -EAGAIN && n != -EWOULDBLOCK && n != -EINTR)) {
			sv_engine_conn_fail(c);
			return;
		}
		if (n < 0)
			return;
		c->rx_len += (size_t)n;
		if (!parse_frames(c))
			return;
		if ((size_t)n < want / 2 && !c->rx_direct)
			return; /* drained for now */
	}
}
