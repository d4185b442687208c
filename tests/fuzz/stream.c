/*
 * libFuzzer harness: the bytes a peer sends on a stream connection (tcp,
 * shm), from the first one on, as the receiving side of a connection it
 * accepted takes them: cutting frames out of the stream (stream.c), the
 * peer's HELLO and AUTH (conn.c, auth.c), and the frames after them.  The
 * input's first byte chooses how the stream hands the bytes over (in one
 * read or in pieces of a size the input chooses) and whether the
 * handshake is already done (so that frames reach the owner: then they
 * only count, as the engine's checks have their own tests).
 * Whatever the bytes, nothing may crash, read or write out of bounds, or
 * leak (AddressSanitizer, UndefinedBehaviorSanitizer, LeakSanitizer).
 */
#include "transport/stream.h"
#include "transport/auth.h"

#include <stdlib.h>
#include <string.h>

static const uint8_t *wire;
static size_t wire_len, wire_off, chunk;

static ssize_t fz_writev(struct sv_conn *c, const struct iovec *iov, int n, bool ref)
{
	size_t total = 0;

	(void)c;
	(void)ref;
	for (int i = 0; i < n; i++)
		total += iov[i].iov_len;
	return (ssize_t)total; /* whatever we answer goes nowhere */
}

static ssize_t fz_readv(struct sv_conn *c, const struct iovec *iov, int n)
{
	size_t got = 0, avail = wire_len - wire_off, want = SV_MIN(avail, chunk);

	(void)c;
	if (!avail)
		return 0; /* the peer closed */
	for (int i = 0; i < n && got < want; i++) {
		size_t l = SV_MIN(iov[i].iov_len, want - got);

		memcpy(iov[i].iov_base, wire + wire_off + got, l);
		got += l;
	}
	wire_off += got;
	return (ssize_t)got;
}

static ssize_t fz_readable(struct sv_conn *c)
{
	(void)c;
	return (ssize_t)(wire_len - wire_off);
}

static int fz_set_lowat(struct sv_conn *c, size_t b)
{
	(void)c;
	(void)b;
	return 0;
}

static const struct sv_stream_io io = {
	.writev = fz_writev,
	.readv = fz_readv,
	.readable = fz_readable,
	.set_lowat = fz_set_lowat,
};

static int fz_send(struct sv_conn *c, const struct sv_frames *f)
{
	return sv_stream_send(c, &io, f);
}

static void fz_input(struct sv_conn *c, bool closing)
{
	sv_stream_input(c, &io, closing);
}

static size_t fz_unsent(struct sv_conn *c)
{
	(void)c;
	return 0;
}

static void fz_close(struct sv_conn *c)
{
	(void)c;
}

static const struct sv_transport_ops ops = {
	.name = "fuzz",
	/* a stream's: its frames may carry runs of packets */
	.run_max = SV_STREAM_RUN_MAX,
	.send = fz_send,
	.input = fz_input,
	.unsent = fz_unsent,
	.close = fz_close,
	.destroy = sv_stream_fini,
};

static size_t frames_up;

static void host_rx_frame(struct sv_conn *c, uint8_t *f, size_t len)
{
	(void)c;
	(void)f;
	frames_up += len > 0;
}

static void host_fail(struct sv_conn *c)
{
	atomic_store(&c->state, SV_CONN_DEAD);
}

static void host_want_output(struct sv_conn *c)
{
	(void)c;
}

static const struct sv_conn_host host = {
	.want_output = host_want_output,
	.rx_frame = host_rx_frame,
	.fail = host_fail,
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static union ibv_gid gid = { .raw = { 0xfe, 0x80 } };
	struct sv_conn *c;

	if (size < 1)
		return 0;
	sv_auth_init();
	c = calloc(1, sizeof(*c));
	if (!c)
		return 0;
	c->host = &host;
	c->ops = &ops;
	c->fd = -1;
	c->hello_gid = &gid;
	atomic_init(&c->state, SV_CONN_UP);
	sv_ref_init(&c->ref, 1);
	sv_mutex_init(&c->tx_lock, SV_LOCK_CONN_TX);
	if (sv_stream_init(c)) {
		free(c);
		return 0;
	}
	/* an accepted connection: it answers a HELLO (into nowhere) */
	c->registered = true;
	if (data[0] & 0x80) {
		atomic_store(&c->hello_seen, true);
		atomic_store(&c->peer_authed, true);
	}
	chunk = (data[0] & 0x7f) ? (size_t)(data[0] & 0x7f) * 37 : SIZE_MAX;
	wire = data + 1;
	wire_len = size - 1;
	wire_off = 0;
	for (int i = 0; i < 100000 && atomic_load(&c->state) != SV_CONN_DEAD; i++) {
		c->ops->input(c, wire_off == wire_len);
		sv_mutex_lock(&c->tx_lock);
		(void)sv_conn_txq_write(c);
		sv_mutex_unlock(&c->tx_lock);
		if (wire_off == wire_len)
			break;
	}
	sv_conn_put(c);
	return 0;
}
