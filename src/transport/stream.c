/*
 * Frames over a byte stream, for the stream transports (tcp, shm).
 *
 * Sending: a batch of frames goes to the transport in one write, each frame
 * behind its length word.  When the transport takes only part of a frame,
 * the rest is kept here and goes out before anything else, so the
 * connection's queue (conn.c) only ever holds whole frames.
 *
 * Receiving: the byte stream is cut into frames, the first two are the
 * peer's HELLO and AUTH (the handshake, conn.c), and each one after them
 * goes up to the connection's owner (conn->host->rx_frame).
 *
 * Frames normally arrive through large reads into the connection's buffer.
 * The payload of an RDMA WRITE would then be copied a second time, from the
 * buffer into target memory, and at TCP speeds that copy costs as much as
 * the kernel's own.  So the payload of an in-order WRITE is received
 * straight into target memory instead ("direct receive"):
 *
 *  1. The headers of a WRITE packet are in the buffer, (most of) its payload
 *     is not.  The owner (the engine: the responder's checks) says whether
 *     it would accept the packet and where the payload goes
 *     (host->rx_classify, host->rx_plan); the rest of the message lies
 *     contiguous behind it in the same MR.
 *  2. Once the socket holds the rest of that packet (SO_RCVLOWAT keeps epoll
 *     quiet until then, so a payload is never half placed), one readv takes
 *     it into place, together with the packets predicted to follow (same
 *     QP, next PSNs, WRITE MIDDLE/LAST): for each a small header slot and
 *     its payload in place, as many as the socket holds whole.
 *  3. Each predicted header is checked against what arrived (host->rx_match).
 *     Matching packets go up with their payload already in place
 *     (host->rx_placed: the responder finds source == destination and does
 *     not copy).  At
 *     the first mismatch (another QP's packet, a WRITE with immediate data,
 *     ...) the bytes from there on are gathered back into the buffer and
 *     parsed as usual.  Bytes a mismatch left inside the message's range
 *     are overwritten when the real packet arrives; until the WRITE
 *     completes its target range is undefined, as on hardware.
 *
 * The stream knows frames, not packets: what a packet is, where it goes and
 * whether a header is the one predicted are the owner's answers, through
 * struct sv_conn_host.  Everything here runs in the thread that holds the
 * engine's progress_lock.
 */
#include "transport/stream.h"
#include "common/fault_guard.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Receive buffer of a connection: frames are cut out of large reads. */
#define SV_RXBUF_CAP (256u << 10)
/* Most iovecs one batch of frames may have (the largest batch conn.c makes). */
#define SV_STREAM_SEND_IOV SV_TXBATCH_IOV
/* Payload bytes below which placing a packet is not worth a system call. */
#define RX_DIRECT_MIN 1024u
/* Room for the length word and the headers of a predicted frame. */
#define RX_SLOT_MAX 32u
/* Bytes after the predicted packets that a direct read also takes (the next
 * packet's headers), and where in the buffer they go. */
#define RX_TAIL_LEN 64u
#define RX_TAIL_OFF 128u

struct sv_stream {
	/* send: the rest of a frame the transport took only part of */
	size_t held_len, held_off;
	uint8_t held[SV_FRAME_HEAD + SV_STREAM_FRAME_MAX];
	/* receive (the holder of the engine's progress_lock) */
	size_t rx_len, rx_cap;
	bool rx_direct;  /* the stream is in direct receive */
	size_t rx_lowat; /* bytes the transport waits for before it says readable */
	uint8_t rxbuf[];
};

static inline struct sv_stream *to_stream(struct sv_conn *c)
{
	return c->framing;
}

enum rx_direct {
	RX_PLACED,  /* packets were received in place and dispatched */
	RX_WAIT,    /* the rest of the packet is not here yet */
	RX_NOT_NOW, /* a WRITE, but too little left to be worth it */
	RX_NO,      /* not a packet for direct receive */
};

/* Does the owner take no frames for now (host->rx_held)? */
static bool rx_held(struct sv_conn *c)
{
	return c->host->rx_held && atomic_load(&c->peer_authed) && c->host->rx_held(c);
}

/* Hand up the complete frames in the buffer (the first must be the HELLO),
 * as long as the owner takes them; the rest moves to its start.  False if
 * the connection died. */
static bool parse_frames(struct sv_conn *c)
{
	struct sv_stream *st = to_stream(c);
	size_t off = 0;

	while (st->rx_len - off >= 4) {
		uint32_t flen;

		memcpy(&flen, st->rxbuf + off, 4);
		flen = ntohl(flen);
		if (flen > SV_STREAM_FRAME_MAX || flen == 0) {
			sv_warn_limited("bad frame length %u; closing connection", flen);
			c->host->fail(c);
			return false;
		}
		if (st->rx_len - off - 4 < flen || rx_held(c))
			break;
		if (!c->hello_seen || !atomic_load(&c->peer_authed)) {
			/* the handshake: nothing goes up before the peer's AUTH */
			if (!(c->hello_seen ? sv_conn_take_auth : sv_conn_take_hello)(
				    c, st->rxbuf + off + 4, flen)) {
				c->host->fail(c);
				return false;
			}
		} else {
			c->host->rx_frame(c, st->rxbuf + off + 4, flen);
		}
		if (atomic_load(&c->state) == SV_CONN_DEAD)
			return false;
		off += 4 + flen;
	}
	memmove(st->rxbuf, st->rxbuf + off, st->rx_len - off);
	st->rx_len -= off;
	return true;
}

static int set_lowat(struct sv_conn *c, const struct sv_stream_io *io, size_t bytes)
{
	struct sv_stream *st = to_stream(c);

	if (st->rx_lowat == bytes)
		return 0;
	st->rx_lowat = bytes;
	return io->set_lowat(c, bytes);
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
	struct sv_stream *st = to_stream(c);
	int end = has_tail ? niov - 1 : niov;
	size_t g = 0, left = got;

	for (int i = from; i < end && left; i++) {
		size_t l = SV_MIN(iov[i].iov_len, left);

		g += l;
		left -= l;
	}
	/* the tail first: the pieces below may overwrite where it was read */
	memmove(st->rxbuf + g, st->rxbuf + RX_TAIL_OFF, left);
	st->rx_len = g + left;
	g = 0;
	left = got;
	for (int i = from; i < end && left; i++) {
		size_t l = SV_MIN(iov[i].iov_len, left);

		memcpy(st->rxbuf + g, iov[i].iov_base, l);
		g += l;
		left -= l;
	}
}

/*
 * The buffer holds the start of one incomplete frame.  Receive it, and the
 * frames predicted to follow it, in place if the owner would accept it.
 */
static enum rx_direct rx_direct(struct sv_conn *c, const struct sv_stream_io *io)
{
	struct sv_stream *st = to_stream(c);
	const struct sv_conn_host *host = c->host;
	uint8_t slots[SV_RX_PREDICT][RX_SLOT_MAX];
	struct iovec iov[2 + 2 * SV_RX_PREDICT];
	struct sv_rx_plan plan;
	uint32_t flen, hl, plen, have, need, off, slot;
	size_t avail_left, pred;
	ssize_t avail, n;
	int niov = 0, npred = 0, cls;

	bool authed = atomic_load(&c->peer_authed);

	if (st->rx_len < 4 || !authed || !host->rx_classify)
		return authed && host->rx_classify ? RX_NOT_NOW : RX_NO;
	memcpy(&flen, st->rxbuf, 4);
	flen = ntohl(flen);
	if (flen > SV_STREAM_FRAME_MAX)
		return RX_NO; /* the plain parser deals with it */
	cls = host->rx_classify(c, st->rxbuf + 4, st->rx_len - 4, flen, &hl);
	if (cls < 0)
		return RX_NOT_NOW; /* its headers are not all here yet */
	if (!cls)
		return RX_NO;
	plen = flen - hl;
	have = (uint32_t)(st->rx_len - 4 - hl);
	need = plen - have;
	if (need < RX_DIRECT_MIN)
		return RX_NOT_NOW;

	avail = io->readable(c);
	if (avail < 0)
		return RX_NO; /* the plain read reports the error */
	if ((size_t)avail < need) {
		/* wake when the whole payload can be taken at once */
		if (set_lowat(c, io, need))
			return RX_NO;
		return RX_WAIT;
	}
	if (set_lowat(c, io, 1))
		return RX_NO;
	/* from here until rx_plan_end the owner keeps plan.dst valid; what is
	 * here already it copies into place, the rest comes by the read */
	if (!host->rx_plan(c, st->rxbuf + 4, plen, have, &plan))
		return RX_NO;
	slot = 4 + plan.next_hdr_len;
	iov[niov].iov_base = plan.dst + have;
	iov[niov++].iov_len = need;
	off = plen;
	avail_left = (size_t)avail - need;
	/* what a read takes beyond the first payload goes back into the
	 * buffer where it is not what was predicted (rx_gather): no more than
	 * the buffer holds, the tail's bytes included */
	pred = RX_TAIL_LEN;
	while (npred < SV_RX_PREDICT && off < plan.msg_left && slot <= RX_SLOT_MAX) {
		uint32_t pl = SV_MIN(plan.seg, plan.msg_left - off);

		if (avail_left < slot + pl || pred + slot + pl > st->rx_cap)
			break;
		pred += slot + pl;
		iov[niov].iov_base = slots[npred];
		iov[niov++].iov_len = slot;
		iov[niov].iov_base = plan.dst + off;
		iov[niov++].iov_len = pl;
		avail_left -= slot + pl;
		off += pl;
		npred++;
	}
	if (avail_left) {
		iov[niov].iov_base = st->rxbuf + RX_TAIL_OFF;
		iov[niov++].iov_len = SV_MIN(avail_left, RX_TAIL_LEN);
	}
	n = io->readv(c, iov, niov);
	if (n == -EFAULT || (n >= 0 && (size_t)n < need)) {
		/* the socket promised these bytes, so the read stopped at memory
		 * the application unmapped after the plan looked at it: what was
		 * placed goes back into the buffer and the frame is finished the
		 * plain way, where the owner's own copy fails it (a NAK) */
		size_t got = n > 0 ? (size_t)n : 0;
		bool ok = sv_copy_guarded(st->rxbuf + st->rx_len, plan.dst + have, got);

		host->rx_plan_end(c, &plan);
		if (!ok) {
			host->fail(c);
			return RX_PLACED;
		}
		st->rx_len += got;
		return RX_NO;
	}
	host->rx_plan_end(c, &plan);
	if (n < 0) {
		/* a payload half placed cannot be handed on, so the connection
		 * goes, as a broken link would */
		sv_warn_limited("read error on a connection (%zd); closing it", n);
		host->fail(c);
		return RX_PLACED;
	}

	host->rx_placed(c, st->rxbuf + 4, plan.dst, plen);
	n -= (ssize_t)need;
	st->rx_len = 0;
	int j = 0;

	for (; j < npred && n > 0 && atomic_load(&c->state) != SV_CONN_DEAD; j++) {
		uint32_t pl = (uint32_t)iov[2 + 2 * j].iov_len;
		uint32_t got_len;

		memcpy(&got_len, slots[j], 4);
		if ((size_t)n < slot + pl || ntohl(got_len) != plan.next_hdr_len + pl ||
		    !host->rx_match(&plan, j, pl, plen + (uint32_t)j * plan.seg + pl == plan.msg_left,
				    slots[j] + 4))
			break; /* not the packet predicted */
		host->rx_placed(c, slots[j] + 4, iov[2 + 2 * j].iov_base, pl);
		n -= (ssize_t)(slot + pl);
	}
	if (atomic_load(&c->state) != SV_CONN_DEAD)
		rx_gather(c, iov, 1 + 2 * j, niov, (size_t)n, avail_left != 0);
	return RX_PLACED;
}

/* In a stream of WRITEs: the rest of the frame begun in the buffer and the
 * headers of the next one, so that its payload can be received in place. */
static size_t direct_read_len(const struct sv_stream *st)
{
	uint32_t flen;

	if (st->rx_len < 4)
		return RX_TAIL_LEN - st->rx_len;
	memcpy(&flen, st->rxbuf, 4);
	flen = ntohl(flen);
	if (flen > SV_STREAM_FRAME_MAX)
		return 1; /* the parser rejects it */
	return 4 + flen - st->rx_len + RX_TAIL_LEN;
}

int sv_stream_init(struct sv_conn *c)
{
	struct sv_stream *st = malloc(sizeof(*st) + SV_RXBUF_CAP);

	if (!st)
		return -ENOMEM;
	st->held_len = st->held_off = 0;
	st->rx_len = 0;
	st->rx_cap = SV_RXBUF_CAP;
	st->rx_direct = false;
	st->rx_lowat = 1; /* the socket's default */
	c->framing = st;
	return 0;
}

int sv_stream_open(struct sv_conn *c)
{
	int err = sv_stream_init(c);

	return err ? err : sv_conn_start(c);
}

void sv_stream_fini(struct sv_conn *c)
{
	free(c->framing);
	c->framing = NULL;
}

int sv_stream_send(struct sv_conn *c, const struct sv_stream_io *io, const struct sv_frames *f)
{
	struct sv_stream *st = to_stream(c);
	const struct iovec *iov = f->iov + (f->nframes ? f->first[0] : 0);
	int niov = f->nframes ? f->first[f->nframes] - f->first[0] : 0, k;
	struct iovec v[1 + SV_STREAM_SEND_IOV];
	size_t left, flen = 0, held = 0;
	bool ref = f->ref;
	ssize_t w;

	if (niov > SV_STREAM_SEND_IOV)
		return -EINVAL;
	if (c->tx_held) {
		/* what is left of the frame taken in part goes first, in the same
		 * system call.  It lies in our buffer, which the next partial frame
		 * reuses: it must be copied, never referenced */
		held = st->held_len - st->held_off;
		v[0].iov_base = st->held + st->held_off;
		v[0].iov_len = held;
		memcpy(v + 1, iov, (size_t)niov * sizeof(*iov));
		iov = v;
		niov++;
		ref = false;
	}
	if (!niov)
		return 0;
	w = io->writev(c, iov, niov, ref);
	if (w <= 0)
		return (int)w;
	left = (size_t)w;
	if (held) {
		size_t l = SV_MIN(left, held);

		st->held_off += l;
		atomic_store_explicit(&c->txq_bytes, c->txq_bytes - l, memory_order_relaxed);
		left -= l;
		if (st->held_off < st->held_len)
			return 0;
		c->tx_held = false;
	}
	/* the frames written whole */
	for (k = 0; k < f->nframes; k++) {
		flen = 0;
		for (int i = f->first[k]; i < f->first[k + 1]; i++)
			flen += f->iov[i].iov_len;
		if (left < flen)
			break;
		left -= flen;
	}
	if (!left)
		return k;
	/* frame k went out in part: the rest is ours to send */
	if (flen > sizeof(st->held))
		return -EMSGSIZE; /* no frame is this big (sv_conn_send checks) */
	st->held_len = 0;
	for (int i = f->first[k]; i < f->first[k + 1]; i++) {
		size_t l = f->iov[i].iov_len, skip = SV_MIN(l, left);

		/* a payload the application unmapped while it was on its way
		 * (its WQE was checked readable when the packet was made) goes
		 * as zeros: the frame must stay whole for the stream's sake */
		if (!sv_copy_guarded(st->held + st->held_len,
				     (const uint8_t *)f->iov[i].iov_base + skip, l - skip))
			memset(st->held + st->held_len, 0, l - skip);
		st->held_len += l - skip;
		left -= skip;
	}
	st->held_off = 0;
	c->tx_held = true;
	atomic_store_explicit(&c->txq_bytes, c->txq_bytes + st->held_len, memory_order_relaxed);
	return k + 1;
}

/* Read what a connection has and hand up its frames. */
void sv_stream_input(struct sv_conn *c, const struct sv_stream_io *io, bool closing)
{
	struct sv_stream *st = to_stream(c);

	/* frames left here while the owner held its input go up first */
	if (st->rx_len >= 4 && !parse_frames(c))
		return;
	for (int rounds = 0; rounds < 16; rounds++) {
		struct iovec v;
		size_t want;
		ssize_t n;

		/* the owner takes nothing now: nothing more is read either, so
		 * what the peer sends waits in its socket or ring */
		if (rx_held(c))
			return;
		if (!closing && st->rx_len) {
			switch (rx_direct(c, io)) {
			case RX_PLACED:
				st->rx_direct = true;
				if (atomic_load(&c->state) == SV_CONN_DEAD || !parse_frames(c))
					return;
				continue;
			case RX_WAIT:
				st->rx_direct = true;
				return;
			case RX_NOT_NOW:
				break;
			case RX_NO:
				st->rx_direct = false;
				break;
			}
		}
		if (st->rx_lowat != 1 && set_lowat(c, io, 1)) {
			c->host->fail(c);
			return;
		}
		/* inside a stream of WRITEs, read only up to the next headers, so
		 * that the payloads that follow can be received in place */
		want = st->rx_cap - st->rx_len;
		if (st->rx_direct && !closing)
			want = SV_MIN(want, direct_read_len(st));
		if (!want)
			return; /* full of frames the owner does not take yet */
		v.iov_base = st->rxbuf + st->rx_len;
		v.iov_len = want;
		n = io->readv(c, &v, 1);
		/* the buffer comes from malloc, and may share a page with an MR
		 * that is read-only for a moment (being replaced by a shared
		 * one, or held across a fork: engine/mem_share.c): once it can
		 * be written, again */
		if (n == -EFAULT && sv_touch_guarded(v.iov_base, v.iov_len))
			n = io->readv(c, &v, 1);
		if (n == 0 || (n < 0 && n != -EAGAIN && n != -EWOULDBLOCK && n != -EINTR)) {
			c->host->fail(c);
			return;
		}
		if (n < 0)
			return;
		st->rx_len += (size_t)n;
		if (!parse_frames(c))
			return;
		if ((size_t)n < want / 2 && !st->rx_direct)
			return; /* drained for now */
	}
}
