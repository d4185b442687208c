/*
 * Frames over a byte stream, shared by the stream transports (tcp, shm):
 * each frame goes out as its u32 length (network order) and its bytes, and
 * the receive side cuts the stream back into frames (stream.c).  A stream
 * transport gives the byte-level calls below and forwards its frame ops
 * (send, input, init) to the sv_stream_* functions; nothing outside
 * src/transport sees a byte stream.
 */
#ifndef SV_TRANSPORT_STREAM_H
#define SV_TRANSPORT_STREAM_H

#include "transport/transport.h"

/* The byte-level calls of one stream transport. */
struct sv_stream_io {
	/* Write as much as the transport takes now; bytes, or -errno when the
	 * stream broke.  ref: the payloads stay valid until the peer
	 * acknowledges them (RC requests), so they may be referenced rather
	 * than copied (shm single copy). */
	ssize_t (*writev)(struct sv_conn *conn, const struct iovec *iov, int iovcnt, bool ref);
	/* Read what is available; bytes, 0 at the end of the stream, -errno. */
	ssize_t (*readv)(struct sv_conn *conn, const struct iovec *iov, int iovcnt);
	/* Bytes a read would return now without waiting; -errno. */
	ssize_t (*readable)(struct sv_conn *conn);
	/* Report the connection readable only once `bytes` can be read (>= 1). */
	int (*set_lowat)(struct sv_conn *conn, size_t bytes);
};

/* The framing state of a connection (conn->framing): 0 or -ENOMEM; freed by fini. */
int sv_stream_init(struct sv_conn *conn);
/* The open op of a stream transport: its framing, then the handshake
 * (sv_conn_start); 0 or -errno. */
int sv_stream_open(struct sv_conn *conn);
void sv_stream_fini(struct sv_conn *conn);
/* The frame ops of a stream transport (struct sv_transport_ops send and
 * input), given its byte-level calls.  Bytes of a frame the stream holds
 * (conn->tx_held) count in conn->txq_bytes: they wait in user space. */
int sv_stream_send(struct sv_conn *conn, const struct sv_stream_io *io, const struct sv_frames *f);
void sv_stream_input(struct sv_conn *conn, const struct sv_stream_io *io, bool closing);

#endif
