/*
 * The frame interface of the transports, white-box: frames handed to
 * conn.c (one at a time, in batches, corked) reach the far side whole and
 * in order over a stream transport (stream.c) whose byte-level calls take
 * and give bytes in random amounts, frames cut anywhere included.  Checks
 * every byte, that the queue and the bytes held in user space count down
 * to zero, that a stream carrying a bad length fails the connection, and
 * that such peer-provoked warnings are rate limited.
 */
#include "transport/stream.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)rng;
}

/* The "wire": what the sending side wrote, read back by the receiving side. */
static uint8_t *wire;
static size_t wire_len, wire_off, wire_cap = 160u << 20;
static size_t write_budget; /* bytes the next writev takes at most */

static ssize_t fake_writev(struct sv_conn *c, const struct iovec *iov, int n, bool ref)
{
	size_t took = 0;

	(void)c;
	(void)ref;
	for (int i = 0; i < n && took < write_budget; i++) {
		size_t l = iov[i].iov_len;

		if (l > write_budget - took)
			l = write_budget - took;
		CHECK(wire_len + l <= wire_cap);
		memcpy(wire + wire_len, iov[i].iov_base, l);
		wire_len += l;
		took += l;
	}
	write_budget -= took;
	return (ssize_t)took;
}

static ssize_t fake_readv(struct sv_conn *c, const struct iovec *iov, int n)
{
	size_t got = 0, avail = wire_len - wire_off, chunk;

	(void)c;
	if (!avail)
		return -EAGAIN;
	chunk = 1 + rnd() % 9000; /* reads return odd amounts */
	for (int i = 0; i < n && got < chunk && got < avail; i++) {
		size_t l = SV_MIN(iov[i].iov_len, SV_MIN(chunk, avail) - got);

		memcpy(iov[i].iov_base, wire + wire_off + got, l);
		got += l;
	}
	wire_off += got;
	return (ssize_t)got;
}

static ssize_t fake_readable(struct sv_conn *c)
{
	(void)c;
	return (ssize_t)(wire_len - wire_off);
}

static int fake_set_lowat(struct sv_conn *c, size_t b)
{
	(void)c;
	(void)b;
	return 0;
}

static const struct sv_stream_io fake_io = {
	.writev = fake_writev,
	.readv = fake_readv,
	.readable = fake_readable,
	.set_lowat = fake_set_lowat,
};

static int fake_send(struct sv_conn *c, const struct sv_frames *f)
{
	return sv_stream_send(c, &fake_io, f);
}

static void fake_input(struct sv_conn *c, bool closing)
{
	sv_stream_input(c, &fake_io, closing);
}

static size_t fake_unsent(struct sv_conn *c)
{
	(void)c;
	return 0;
}

static void fake_close(struct sv_conn *c)
{
	(void)c;
}

static const struct sv_transport_ops fake_ops = {
	.name = "fake",
	.run_max = SV_STREAM_RUN_MAX, /* a stream's frames, runs of packets */
	.send = fake_send,
	.input = fake_input,
	.unsent = fake_unsent,
	.close = fake_close,
	.destroy = sv_stream_fini,
};

/* Frame k: its length and its bytes follow from k. */
static uint32_t frame_len(uint32_t k)
{
	uint32_t x = k * 2654435761u;

	if (x % 32 == 1)
		return SV_STREAM_FRAME_MAX; /* a stream's largest: a run of packets */
	if (x % 32 == 2)
		return 1 + (x >> 8) % SV_STREAM_FRAME_MAX;
	switch (x % 4) {
	case 0: return 1 + x % 64;         /* ACK-sized */
	case 1: return SV_MAX_FRAME;       /* a packet of the largest MTU */
	default: return 1 + (x >> 8) % SV_MAX_FRAME;
	}
}

static uint8_t frame_byte(uint32_t k, uint32_t j)
{
	return (uint8_t)(k * 131u + j * 7u + (j >> 8));
}

static uint32_t rx_next, failures, want_outputs;

static void host_rx_frame(struct sv_conn *c, uint8_t *f, size_t len)
{
	(void)c;
	CHECK(len == frame_len(rx_next));
	for (uint32_t j = 0; j < len; j++)
		CHECK(f[j] == frame_byte(rx_next, j));
	rx_next++;
}

static void host_fail(struct sv_conn *c)
{
	atomic_store(&c->state, SV_CONN_DEAD);
	failures++;
}

static void host_want_output(struct sv_conn *c)
{
	(void)c;
	want_outputs++;
}

static const struct sv_conn_host host = {
	.want_output = host_want_output,
	.rx_frame = host_rx_frame,
	.fail = host_fail,
};

static struct sv_conn *conn_make(void)
{
	struct sv_conn *c = calloc(1, sizeof(*c));

	CHECK(c);
	c->host = &host;
	c->ops = &fake_ops;
	c->fd = -1;
	atomic_init(&c->state, SV_CONN_UP);
	sv_ref_init(&c->ref, 1);
	sv_mutex_init(&c->tx_lock, SV_LOCK_CONN_TX);
	CHECK(sv_stream_init(c) == 0);
	return c;
}

/* The engine's side: room came (a random amount), then the receive pass. */
static void engine_pass(struct sv_conn *tx, struct sv_conn *rx)
{
	write_budget = rnd() % 3 ? rnd() % 20000 : 0;
	CHECK(sv_conn_flush_queue(tx) == 0);
	if (rnd() % 2)
		rx->ops->input(rx, false);
}

/* Frame k's bytes as 1 to 3 pieces (the first ones as a header would be). */
static int frame_iov(uint32_t k, uint8_t *buf, struct iovec *iov)
{
	uint32_t len = frame_len(k), a, b;
	int n = 0;

	for (uint32_t j = 0; j < len; j++)
		buf[j] = frame_byte(k, j);
	a = len > 1 ? rnd() % len : len;
	b = a < len ? a + rnd() % (len - a) : len;
	iov[n++] = (struct iovec){ buf, a };
	iov[n++] = (struct iovec){ buf + a, b - a };
	iov[n++] = (struct iovec){ buf + b, len - b };
	return n;
}

int main(void)
{
	static uint8_t bufs[SV_TXBATCH_FRAMES][SV_STREAM_FRAME_MAX];
	static struct sv_txbatch batch;
	struct sv_conn *tx, *rx;
	union ibv_gid gid = { .raw = { 0xfe, 0x80 } };
	const uint32_t nframes = 20000;
	uint32_t k = 0;

	wire = malloc(wire_cap);
	CHECK(wire);
	tx = conn_make();
	rx = conn_make();
	write_budget = 0; /* the HELLO waits in the queue, as when connecting */
	tx->outgoing = true;
	tx->hello_gid = &gid;
	CHECK(sv_conn_start(tx) == 0);
	CHECK(tx->txq_head && !tx->tx_held && tx->gate_pass == 1);
	CHECK(want_outputs == 1); /* it asked for room to write the HELLO */
	/* the AUTHs travel the other way too, which this one-way wire has not:
	 * both ends count as proven (the devices' tests cover the handshake) */
	atomic_store(&tx->peer_authed, true);
	atomic_store(&rx->peer_authed, true);

	while (k < nframes) {
		struct iovec iov[3];

		tx->tx_corked = rnd() % 4 == 0; /* a receive pass on the sender */
		write_budget = rnd() % 2 ? rnd() % 6000 : 0;
		if (rnd() % 2) {
			CHECK(sv_conn_send(tx, iov, frame_iov(k, bufs[0], iov)) == 0);
			k++;
		} else {
			int n = 1 + (int)(rnd() % SV_TXBATCH_FRAMES);

			sv_txbatch_init(&batch);
			for (int i = 0; i < n && k < nframes; i++, k++) {
				int cnt = frame_iov(k, bufs[i], iov);
				uint32_t hl = (uint32_t)SV_MIN(iov[0].iov_len, 64u);

				/* the first bytes go in the batch's header slot */
				memcpy(sv_txbatch_hdr(&batch), iov[0].iov_base, hl);
				iov[0].iov_base = (uint8_t *)iov[0].iov_base + hl;
				iov[0].iov_len -= hl;
				CHECK(sv_txbatch_fits(&batch, tx, cnt));
				sv_txbatch_add(&batch, tx, hl, iov, cnt);
			}
			CHECK(sv_txbatch_flush(&batch) == 0);
		}
		/* whatever the transport holds counts as waiting in user space */
		CHECK(!tx->tx_held || tx->txq_bytes > 0);
		tx->tx_corked = false;
		engine_pass(tx, rx);
	}
	for (int i = 0; i < 100000 && (sv_conn_tx_waiting(tx) || wire_off < wire_len); i++)
		engine_pass(tx, rx);
	rx->ops->input(rx, false);
	CHECK(!sv_conn_tx_waiting(tx));
	CHECK(tx->txq_bytes == 0);
	CHECK(failures == 0);
	CHECK(rx->hello_seen);
	CHECK(rx_next == nframes);
	CHECK(want_outputs > 0); /* the queue asked for room when it had to */

	/* A frame longer than any transport carries fails the connection. */
	{
		uint32_t bad = htonl(SV_STREAM_FRAME_MAX + 1);

		memcpy(wire + wire_len, &bad, 4);
		wire_len += 4;
		rx->ops->input(rx, false);
		CHECK(failures == 1);
		/* and sv_conn_send refuses to make one */
		static uint8_t big[SV_STREAM_FRAME_MAX + 1];
		struct iovec v = { big, sizeof(big) };

		CHECK(sv_conn_send(tx, &v, 1) == -EMSGSIZE);
	}
	/* the peer-provoked warnings above are limited: one a second, the
	 * rest counted into the next line */
	{
		struct sv_log_limit lim = { 0 };
		uint32_t held = 99;

		CHECK(sv_log_limit_pass(&lim, &held) && held == 0);
		for (int i = 0; i < 1000; i++)
			CHECK(!sv_log_limit_pass(&lim, &held));
		atomic_store(&lim.next_ns, 0); /* as if the second had passed */
		CHECK(sv_log_limit_pass(&lim, &held) && held == 1000);
	}
	sv_conn_put(tx);
	sv_conn_put(rx);
	free(wire);
	printf("frames: %u frames whole and in order, %zu bytes on the wire\n", rx_next, wire_len);
	return 0;
}
