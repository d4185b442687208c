/*
 * Transports carry frames between two endpoints.  Each one owns its side of
 * an endpoint (its interface: listening, accepting, receiving datagrams,
 * leaving the host's shared ports), its connections (connecting,
 * readiness, draining at close), its framing and the HELLO handshake; the
 * engine calls the ops below, and a transport calls the engine only
 * through struct sv_iface_host (descriptors to watch, connections
 * accepted) and struct sv_conn_host (frames in, failures, room for output).
 * Four exist:
 *  - tcp (tcp.c): a byte stream to any endpoint, IPv4 or IPv6, with the
 *    host's shared port and its hand-off;
 *  - shm (shm.c): same host and network namespace, shared-memory rings plus
 *    single-copy transfers between the address spaces;
 *  - rocev2 (rocev2.c, roce_wire.c): RoCEv2 UDP datagrams to port 4791 (a
 *    context of this host: to its own port), for every peer when
 *    SOFTVERBS_TRANSPORT=rocev2;
 *  - multicast (mcast.c): UD datagrams to an IPv4 multicast group, for UD
 *    sends to a multicast GID.
 * select.c chooses among tcp, shm and rocev2 per peer, and makes a group's
 * connection multicast's (sv_transport_group).
 */
#ifndef SV_TRANSPORT_H
#define SV_TRANSPORT_H

#include <infiniband/verbs.h>
#include <errno.h>
#include <net/if.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/un.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/uio.h>

#include "common/lock_order.h"
#include "common/util.h"
#include "common/ref.h"
#include "transport/auth.h"

struct sv_engine;
struct sv_conn;

/*
 * A host's address: IPv6, or IPv4 in its IPv4-mapped form ::ffff:a.b.c.d,
 * which is also how a RoCE GID carries one.  An endpoint is named by its
 * interface's IPv4 address (registry, shm and handoff names); tcp reaches
 * it at its interface's IPv6 address too, and rocev2 sends IPv6 datagrams.
 */
static inline bool sv_ip_is_v4(const struct in6_addr *a)
{
	return IN6_IS_ADDR_V4MAPPED(a);
}

static inline struct in_addr sv_ip_v4(const struct in6_addr *a)
{
	struct in_addr v4;

	memcpy(&v4.s_addr, &a->s6_addr[12], 4);
	return v4;
}

static inline struct in6_addr sv_ip_from_v4(struct in_addr v4)
{
	struct in6_addr a = { 0 };

	a.s6_addr[10] = a.s6_addr[11] = 0xff;
	memcpy(&a.s6_addr[12], &v4.s_addr, 4);
	return a;
}

static inline bool sv_ip_eq(const struct in6_addr *a, const struct in6_addr *b)
{
	return !memcmp(a, b, sizeof(*a));
}

/* Text for logs: dotted for IPv4, RFC 5952 for IPv6 (endpoint.c); SV_IP_STR
 * writes it in a buffer that lives as long as the enclosing block. */
#define SV_IP_STRLEN 46
const char *sv_ip_str(const struct in6_addr *a, char buf[SV_IP_STRLEN]);
#define SV_IP_STR(a) sv_ip_str((a), (char[SV_IP_STRLEN]){ 0 })

/* Where a peer endpoint listens: decoded from its GID (endpoint.c). */
struct sv_endpoint_addr {
	struct in6_addr ip;
	uint16_t port; /* host order */
};

/* An endpoint in the HELLO's GID-shaped form (endpoint.c; not a GID of the
 * port), and back (false: not that form). */
void sv_gid_encode(union ibv_gid *gid, const struct in6_addr *ip, uint16_t port);
/* The abstract unix socket "softverbs-KIND/IP:PORT" of an endpoint (only
 * peers on this host, in this network namespace, reach it); listening on
 * it: the fd or -errno. */
void sv_endpoint_unix_name(struct sockaddr_un *sa, socklen_t *len, const char *kind,
			   const struct in6_addr *ip, uint16_t port);
int sv_endpoint_unix_listen(const char *kind, const struct in6_addr *ip, uint16_t port);
/* fd, connected to such a name, reaches a process of our own user (its
 * listener's SO_PEERCRED): anyone may bind an abstract name first. */
bool sv_endpoint_unix_ours(int fd);
bool sv_gid_decode(const union ibv_gid *gid, struct sv_endpoint_addr *out);
/* An IPv6 address of the interface that has endpoint address ip (IPv4 or
 * IPv6): its first link-local one (with its interface's index), or its
 * first global one (what GIDs 4 and 5 show; scope 0); false when it has
 * none of that kind. */
bool sv_endpoint_ip6(const struct in6_addr *ip, bool link_local, struct in6_addr *ip6,
		     uint32_t *scope);

enum sv_conn_state {
	SV_CONN_CONNECTING,
	SV_CONN_UP,
	SV_CONN_DEAD,
};

/* Outgoing frames the transport did not take yet, back to back, each with
 * its length word (SV_FRAME_HEAD); off: where the next one begins. */
struct sv_txbuf {
	struct sv_txbuf *next;
	size_t len, off;
	uint8_t data[];
};

/* Largest frame a datagram transport carries: a max-MTU packet with room
 * for headers. */
#define SV_MAX_FRAME (4096 + 256)
/* A stream transport's frame carries a run of whole path-MTU packets of one
 * message (their headers once, the first packet's PSN; the engine's
 * sv_conn_run): up to this much payload.  A 1 MiB WRITE over tcp is 64
 * frames, not 256, each dispatched, checked and read once.  Longer runs
 * move no more bytes a second but cost latency: a SEND's frame is copied
 * out only once all of it has arrived, so the copy of a long run does not
 * overlap the transfer of what follows (docs/PERFORMANCE.md, "Runs of
 * packets in a stream's frame"). */
#define SV_STREAM_RUN_MAX (16u << 10)
/* Largest frame a stream transport carries. */
#define SV_STREAM_FRAME_MAX (SV_STREAM_RUN_MAX + 256)
/* The length word before each frame handed to a transport (struct sv_frames). */
#define SV_FRAME_HEAD 4u

/*
 * Direct receive of an RDMA WRITE's payloads by a stream transport
 * (stream.c): the owner plans where they go, the stream reads into place.
 */
/* Packets one direct read may take beyond the first (their range is what a
 * plan's destination must cover). */
#define SV_RX_PREDICT 56

struct sv_rx_plan {
	uint8_t *dst;          /* the first frame's payload goes here ... */
	uint32_t msg_left;     /* ... and the message's next bytes behind it */
	uint32_t seg;          /* payload bytes of each frame that follows */
	uint32_t next_hdr_len; /* header bytes of each frame that follows */
	uint32_t cookie[4];    /* the owner's: what the next frames must say */
};

/*
 * How a connection whose data waits in memory is looked at (registered by
 * its transport: sv_conn_host.in_memory); its descriptor then carries only
 * bells and the end of the stream.
 */
struct sv_mem_poll {
	/* data waits (or the stream ended), seen without a system call */
	bool (*pending)(struct sv_conn *conn);
	/* about to sleep: have the next arrival ring; true if data waits already */
	bool (*arm)(struct sv_conn *conn);
	/* the descriptor said readable (bells, end of stream, an accepted
	 * peer's setup): taken, by one thread only (the engine's) */
	void (*bell)(struct sv_conn *conn);
};

/*
 * What a connection asks of its owner (the engine), set when it is made:
 * the transports call upwards only through this.
 */
struct sv_conn_host {
	/* tx_lock held: bytes wait in the queue; flush when the transport has room */
	void (*want_output)(struct sv_conn *conn);
	/* a frame arrived after the HELLO (contiguous, len bytes) */
	void (*rx_frame)(struct sv_conn *conn, uint8_t *frame, size_t len);
	/* the connection broke or its peer misbehaved: it is gone for good */
	void (*fail)(struct sv_conn *conn);
	/* an accepted connection's peer proved itself (its AUTH passed); may
	 * be NULL */
	void (*proven)(struct sv_conn *conn);
	/* an accepted connection was refused: its HELLO names an endpoint at
	 * an address other than the one it comes from (sv_conn_take_hello);
	 * may be NULL */
	void (*spoofed)(struct sv_conn *conn);
	/* Asked before each frame after the handshake: true while the owner
	 * takes none (its answers to this peer back up).  The transport then
	 * leaves what it has where it is, reads no more, and goes on when the
	 * owner calls input again.  May be NULL. */
	bool (*rx_held)(struct sv_conn *conn);

	/* Direct receive (may be NULL).  Is the frame beginning at frame (have
	 * bytes of it here, flen in all) a packet whose payload may be received
	 * in place?  1 with *hdr_len set, 0 no, -1 not known until more of its
	 * headers are here.  Nothing is held afterwards. */
	int (*rx_classify)(struct sv_conn *conn, const uint8_t *frame, size_t have, uint32_t flen,
			   uint32_t *hdr_len);
	/* The owner accepts it: fills plan, copies the `have` payload bytes that
	 * are here already into place, and keeps plan->dst valid until
	 * rx_plan_end.  False: it does not (nothing held). */
	bool (*rx_plan)(struct sv_conn *conn, const uint8_t *frame, uint32_t plen, uint32_t have,
			struct sv_rx_plan *plan);
	void (*rx_plan_end)(struct sv_conn *conn, struct sv_rx_plan *plan);
	/* Is hdr (plan->next_hdr_len bytes) the header of following frame k,
	 * carrying plen payload bytes, the message's last if last? */
	bool (*rx_match)(const struct sv_rx_plan *plan, int k, uint32_t plen, bool last,
			 const uint8_t *hdr);
	/* a packet whose payload was received in place at payload */
	void (*rx_placed)(struct sv_conn *conn, uint8_t *hdr, const uint8_t *payload,
			  uint32_t plen);
	/* tx_lock held: call sv_conn_fault_release for conn at about `when`
	 * (frames held back by fault injection); may be NULL */
	void (*fault_timer)(struct sv_conn *conn, uint64_t when);
	/* The transport's data for conn waits in memory, seen without a system
	 * call (shm's rings): whoever makes progress looks with poll instead
	 * of waiting for the descriptor (struct sv_mem_poll).  Called by the
	 * open op, before the owner has the connection; may be NULL. */
	void (*in_memory)(struct sv_conn *conn, const struct sv_mem_poll *poll);
};

/*
 * The handshake: the first frame in each direction is a HELLO, carrying the
 * protocol version, the sending endpoint's GID, a nonce and the sender's
 * share of the PAKE (auth.h); the second is an AUTH that proves the sender
 * holds the secret.  The side that connects sends its HELLO at once; the
 * side that accepts answers with its HELLO once the other's has come; the
 * connecting side then sends its AUTH; the accepting side checks it, and
 * only then sends its own AUTH and anything else; the connecting side
 * sends anything else once it has checked that AUTH.  So a side that has
 * not proved itself gets a HELLO and nothing keyed from one that accepted.
 * Each side passes nothing up before it has checked the other's AUTH.
 * A connection's owner hands the frames it receives before that to
 * sv_conn_take_hello and sv_conn_take_auth.
 */
#define SV_WIRE_MAGIC 0x53565242u /* "SVRB" */
/* 3: the nonce and AUTH; 4: the PAKE, connector proves first; 5: a stream's
 * frame carries a run of packets (SV_STREAM_RUN_MAX) */
#define SV_WIRE_VERSION 5

/* HELLO flags: the sender opens GPU memory exported to it (CUDA IPC), so a
 * packet may name such memory instead of carrying its bytes (wire.h). */
#define SV_HELLO_GPU 0x1

struct sv_hello {
	uint32_t magic;
	uint16_t version;
	uint16_t flags;
	uint8_t gid[16]; /* the sending endpoint's GID (endpoint.c) */
	uint16_t to_port; /* the endpoint it is for (its block's port, registry.h):
			     a connection to the host's shared port is handed to it */
	uint16_t from_port; /* the sending endpoint's port: its GID carries it too,
			       but for an endpoint with IPv6 only, whose GID is
			       its address (endpoint.c) */
	uint8_t nonce[SV_AUTH_NONCE]; /* fresh for each connection: the connector's
					 is the session's identifier (auth.h) */
	uint8_t share[SV_AUTH_SHARE]; /* the sender's share of the PAKE (auth.h) */
} __attribute__((packed));

/* A frame fault injection holds back (faults.c): it joins the queue at due_ns. */
struct sv_held_frame {
	struct sv_held_frame *next;
	uint64_t due_ns;
	struct sv_txbuf *b;
};

struct sv_conn {
	struct sv_engine *eng;     /* the owner, opaque to the transports */
	const struct sv_conn_host *host;
	const struct sv_transport_ops *ops;
	void *tp;              /* the transport's own state (shm) */
	int fd;
	_Atomic int state;     /* enum sv_conn_state */
	struct sv_ref ref;     /* freed by the last put (sv_conn_put) */
	bool outgoing;         /* we initiated it (and keyed it by peer addr) */
	/* What the transport's network promises, set by the transport when the
	 * connection is made.  lossy: packets may be lost or reordered on the
	 * way, and one corrupted is dropped by the receiver's own check (a
	 * RoCEv2 ICRC): the owner paces and probes RC (congestion.c).
	 * by_address: one connection per peer address, shared by all of its
	 * endpoints; what arrives names none of them (peer.port is not one). */
	bool lossy, by_address;
	atomic_bool hello_seen; /* the peer's HELLO arrived */
	/* the peer's AUTH proved it holds the secret (auth.h): only then do its
	 * frames go up, and ours (but for the handshake's) go out; read by
	 * posting threads (sv_conn_gated) */
	atomic_bool peer_authed;
	struct sv_endpoint_addr peer;
	uint8_t peer_gid[16];  /* from the peer's HELLO */
	uint16_t local_port;   /* our endpoint's port (set by the engine) */
	struct in6_addr local_ip; /* our endpoint's address (set by the engine) */
	int local_ifindex;     /* its interface (the scope of an IPv6 link-local peer) */
	/* its interface's IPv6 address, the source of a tcp connection to an
	 * IPv6 peer (which takes it for our identity, as RoCE takes a packet's
	 * source GID) (set by the engine) */
	struct in6_addr local_ip6;
	bool has_local_ip6;
	const union ibv_gid *hello_gid; /* what our HELLO says (the engine's endpoint) */
	/* The host's shared port (tcp.c): a connection accepted there answers
	 * only once the peer's HELLO says it is for us (else it is handed on,
	 * and its socket kept open for the owner). */
	bool via_shared, keep_socket;
	bool direct;           /* dial the endpoint's own port, not the shared one */
	/* tx_lock: the connection that took this one's queue when it ended
	 * before the peer's HELLO (with a reference): frames sent here after
	 * that go there */
	struct sv_conn *next;
	bool registered;       /* the engine has it (framing ready: it may send) */
	/* tx_lock: handshake frames (HELLO, AUTH) at the head of the queue,
	 * the only ones that leave while the connection is gated */
	int gate_pass;
	/* the two HELLOs as they went over the wire, which AUTH covers */
	struct sv_hello hello_mine, hello_peer;
	struct sv_auth_hs auth; /* our side of the handshake (auth.h) */
	uint64_t born_ns;      /* when it was made (sv_now_ns) */
	atomic_bool abandoned; /* no more work goes on it (sv_conn_silent) */
	pid_t peer_pid;        /* the peer process, where the transport knows it is on
				  this host with our uid (shm); 0 otherwise */
	atomic_bool peer_gpu;  /* its HELLO says it opens our GPU memory (SV_HELLO_GPU) */
	/* the engine's view of the peer's exported memory (engine/direct_exec.c),
	 * made once; freed with the connection by peer_mem_free */
	_Atomic(void *) peer_mem;
	void (*peer_mem_free)(void *);
	struct sv_list link;   /* engine->conns */

	/* output (conn.c): whole frames the transport did not take yet */
	struct sv_mutex tx_lock;
	struct sv_txbuf *txq_head, *txq_tail;
	_Atomic size_t txq_bytes;
	bool tx_held;          /* tx_lock: the transport holds part of a frame it took */
	bool want_out;         /* EPOLLOUT armed */
	atomic_bool tx_corked; /* a receive pass is running: small frames wait for its end */

	void *framing;         /* the transport's framing state (stream.c) */

	/* fault injection (faults.c): the connection's draws, and the frames
	 * held back (tx_lock; nheld readable without it) */
	uint64_t fault_rng;
	struct sv_held_frame *fault_held;
	atomic_int fault_nheld;
};

/* Output but for the handshake waits for the peer's AUTH (auth.h). */
static inline bool sv_conn_gated(const struct sv_conn *conn)
{
	return !atomic_load_explicit(&conn->peer_authed, memory_order_acquire);
}

/*
 * A connection whose peer has not proved itself for this long: the process
 * the kernel gave it to on a shared port may be stopped (SIGSTOP, a
 * debugger) and never accept it.  New work goes on a new connection,
 * which the kernel may give to another process.  Long enough that a busy
 * host's answer is not taken for silence (the old connection's frames
 * would arrive as duplicates once it does answer).
 */
#define SV_CONN_SILENT_NS 2000000000ull
static inline bool sv_conn_silent(const struct sv_conn *conn, uint64_t now)
{
	return sv_conn_gated(conn) && now - conn->born_ns > SV_CONN_SILENT_NS;
}

/* tx_lock held: does output wait, in the queue or held by the transport? */
static inline bool sv_conn_tx_waiting(const struct sv_conn *conn)
{
	return conn->txq_head || conn->tx_held;
}

/*
 * While the engine processes what a connection received, the small frames
 * it answers with (ACKs, atomic responses) are corked: queued and written
 * together when the pass ends, so a burst of WRITEs is acknowledged with one
 * write.  Before a receive completion becomes visible, what is corked is
 * written (sv_conn_uncork_now): the peer gets its ACK even if the
 * application quits at once.  Bigger frames (READ responses) go out at
 * once, behind what is corked.
 */
#define SV_CONN_CORK_MAX 256u

/* Most pieces one frame is gathered from: headers plus one per SGE piece. */
#define SV_FRAME_MAX_IOV 40

/*
 * Frames gathered for one system call.  Packets stay MTU-sized frames on
 * the wire; a requester pass or a READ response sends many of them with a
 * single write instead of one write per packet.
 */
#define SV_TXBATCH_FRAMES 64
#define SV_TXBATCH_IOV 512
#define SV_TXBATCH_HEAD 176 /* SV_FRAME_HEAD + the largest header stack */

struct sv_txbatch {
	struct sv_conn *conn; /* holds a reference while frames are gathered */
	bool ref;             /* payloads stay valid until acknowledged (RC requests) */
	int nframes, niov;
	size_t bytes;
	uint8_t head[SV_TXBATCH_FRAMES][SV_TXBATCH_HEAD];
	uint16_t first[SV_TXBATCH_FRAMES + 1];
	struct iovec iov[SV_TXBATCH_IOV];
};

/*
 * Frames handed to a transport, as one batch: frame k is the iovecs
 * iov[first[k]] up to iov[first[k + 1]].  A frame's first SV_FRAME_HEAD
 * bytes are its length (u32, network order, those bytes not counted): a
 * stream transport sends them as its length word, a datagram transport
 * leaves them out.
 */
struct sv_frames {
	const struct iovec *iov;
	const uint16_t *first; /* nframes + 1 entries */
	int nframes;
	bool ref; /* payloads stay valid until the peer acknowledges them */
};

/* Room for a datagram as a datagram transport receives it, before decoding. */
#define SV_DGRAM_RAW_MAX (SV_MAX_FRAME + 128)

/* Why a datagram was refused, where its owner counts it (sv_iface_host.refused). */
#define SV_DGRAM_BAD_ICRC 1 /* its RoCEv2 ICRC does not verify */
#define SV_DGRAM_BAD_TAG 2  /* its tag keyed by the job's secret does not (rocev2) */

/*
 * The endpoint side of a transport, an interface as UCX has it: the
 * transport opens its listeners for an endpoint (iface_open), accepts and
 * receives on them itself, and leaves the host's shared ports; its owner
 * (the engine) only watches the descriptors it is given, and takes the
 * connections and packets that come through this.
 */
struct sv_iface_host {
	/* Watch fd in the owner's loop: ready(arg) runs, under the owner's
	 * progress lock, whenever fd is readable; data: packets come through
	 * it (not only peers to accept), so threads that poll look at it too.
	 * 0 or -errno.  unwatch before closing fd. */
	int (*watch)(struct sv_engine *eng, int fd, bool data, void (*ready)(void *arg),
		     void *arg);
	void (*unwatch)(struct sv_engine *eng, int fd);
	/* A connection of ops to accept a peer into, the owner's to be (NULL:
	 * out of memory); after a failed accept the transport puts it. */
	struct sv_conn *(*conn_new)(struct sv_engine *eng, const struct sv_transport_ops *ops);
	/* A peer accepted into conn: the owner takes it, within its admission
	 * caps (one it refuses it puts). */
	void (*accepted)(struct sv_conn *conn);
	/* Out of descriptors or memory: the owner watches no listener for a while. */
	void (*rest)(struct sv_engine *eng);
	/* The connection of the peer at address ip, made at its first packet,
	 * with a reference (NULL: none); a datagram goes up on it (rx_frame). */
	struct sv_conn *(*conn_from)(struct sv_engine *eng, const struct in6_addr *ip);
	/* A datagram the transport's checks refused, counted (SV_DGRAM_BAD_*). */
	void (*refused)(struct sv_engine *eng, int why);
};

/* Where an interface listens, and for whom (iface_open). */
struct sv_iface_at {
	const struct sv_iface_host *host;
	struct sv_engine *eng;
	struct in6_addr ip; /* the endpoint's address */
	uint16_t port;      /* its port, its block's (registry.h) */
};

struct sv_transport_ops {
	const char *name;
	/* The most payload bytes one of its frames carries: a stream's
	 * SV_STREAM_RUN_MAX, a run of packets; 0, one packet of the path MTU
	 * (a datagram's, which the wire's other end may be a NIC's).  Its
	 * largest frame follows (sv_conn_frame_max). */
	uint32_t run_max;
	/* Start a connection to conn->peer; completes asynchronously. */
	int (*connect)(struct sv_conn *conn);
	/* The owner takes the connection (conn->hello_gid set), once its
	 * transport is known: a stream sets up its framing and begins the
	 * handshake (sv_stream_open); a transport without one makes it ready
	 * at once (sv_conn_open_unframed); 0 or -errno. */
	int (*open)(struct sv_conn *conn);
	/* The readiness (EPOLL* bits) the owner watches conn->fd for, given
	 * whether it takes input now (in) and waits for room (out).  NULL:
	 * EPOLLIN and EPOLLOUT as asked, EPOLLRDHUP always (sv_conn_watch). */
	uint32_t (*watch)(const struct sv_conn *conn, bool in, bool out);

	/* ---- frames: a batch out, each frame in ---- */
	/* Take whole frames from the front of f without blocking (tx_lock
	 * held): how many, or -errno when the connection broke.  A frame taken
	 * is the transport's to deliver: a stream that could write only part
	 * of it keeps the rest (conn->tx_held) and sends that before anything
	 * else, on the next call (an empty batch just does that). */
	int (*send)(struct sv_conn *conn, const struct sv_frames *f);
	/* The connection is readable (closing: its end was seen): take what
	 * arrived and hand each frame up (conn->host), the first to
	 * sv_conn_take_hello.  Runs under the engine's progress_lock. */
	void (*input)(struct sv_conn *conn, bool closing);
	/* Bytes taken that the peer has not received yet. */
	size_t (*unsent)(struct sv_conn *conn);
	/* The address an accepted connection comes from, as the network says
	 * (tcp: getpeername): 0, or -errno.  NULL where the peer is not
	 * named by an address (shm: a process of this host and user,
	 * SO_PEERCRED).  The peer's HELLO must name an endpoint at that
	 * address (sv_conn_take_hello). */
	int (*peer_addr)(struct sv_conn *conn, struct in6_addr *ip);
	void (*close)(struct sv_conn *conn);
	/* Free the transport state at the last reference. */
	void (*destroy)(struct sv_conn *conn);

	/* ---- the endpoint side: listening, accepting (struct sv_iface_host) ---- */
	/* Listen for the endpoint at at->ip, at->port (its block's port,
	 * registry.h): the transport makes its listeners, has its owner watch
	 * them, and accepts and receives on them itself; its state in *iface.
	 * 0, or -errno: -ENOENT nothing of this transport's here (no IPv6
	 * address); -EADDRINUSE a port or name of it is another program's,
	 * with *host_held set where that port is the one every process of the
	 * host shares (the shared TCP port, UDP 4791: no other block would
	 * help, and the transport has said what to do). */
	int (*iface_open)(const struct sv_iface_at *at, void **iface, bool *host_held);
	/* The owner's loop stopped for good, the context still open (unload,
	 * exit): leave what every process of the host shares, or the kernel
	 * goes on giving this endpoint traffic nobody takes; what waits there
	 * for the others goes on to them first when pass_on (the owner's
	 * progress lock is held).  Optional. */
	void (*iface_leave)(void *iface, bool pass_on);
	/* Close the listeners (what waits in them for other contexts goes on
	 * to them) and free iface. */
	void (*iface_close)(void *iface);
	/* Pass the connection, whose peer's HELLO (hello, len) named the
	 * endpoint to_port, to that endpoint's process on this host; 0, and
	 * conn->keep_socket set, or -errno.  NULL: not a transport that can. */
	int (*handoff)(struct sv_conn *conn, const uint8_t *hello, size_t len, uint16_t to_port);
	/* Something for the peer was placed in its memory beside the stream
	 * (a SEND placed by its initiator, engine/direct_recv.h): if the peer
	 * sleeps, wake it as an arrival would (seq_cst: after the placement
	 * is published).  Any thread, no lock held.  NULL: never placed. */
	void (*wake)(struct sv_conn *conn);
	/* A connection being set up reported writable or an error: 0 once it is up. */
	int (*finish_connect)(struct sv_conn *conn);
	/* Closing: what is queued goes out and the stream ends, by deadline_ns. */
	void (*drain)(struct sv_conn *conn, uint64_t deadline_ns);
};

/* The largest frame conn carries (sv_conn_send's bound): a stream's run
 * with its headers, else a packet of the largest MTU with its. */
static inline uint32_t sv_conn_frame_max(const struct sv_conn *conn)
{
	return conn->ops && conn->ops->run_max ? SV_STREAM_FRAME_MAX : SV_MAX_FRAME;
}

/* The payload bytes one frame of conn carries for a QP of path MTU mtu: a
 * run of whole packets of one message on a stream, one packet elsewhere. */
static inline uint32_t sv_conn_run(const struct sv_conn *conn, uint32_t mtu)
{
	uint32_t r = conn && conn->ops ? conn->ops->run_max : 0;

	return r > mtu ? r - r % mtu : mtu;
}

/*
 * Multicast groups: a context's connection for one group (mcast.c) sends
 * each frame as a datagram to the group and hands up what the group's
 * members sent, while joined.  UD sends to the multicast QPN go there.
 */
#define SV_MCAST_QPN 0xffffffu
/* A multicast GID: IPv6 multicast (ff00::/8) or IPv4-mapped 224.0.0.0/4. */
bool sv_gid_is_mcast(const union ibv_gid *gid);
/* The group whose connection c is (its MGID), or NULL: c is a peer's. */
const union ibv_gid *sv_conn_group(const struct sv_conn *c);
/* Receive the group's datagrams (join) or not (leave); 0 or -errno. */
int sv_conn_group_join(struct sv_conn *c, bool on);

/* ---- choosing transports (select.c): the only place that names them ---- */
enum sv_transport_mode {
	SV_TRANSPORT_AUTO, /* shm to peers on this host and namespace, else tcp */
	SV_TRANSPORT_TCP,
	SV_TRANSPORT_SHM,  /* shm only: a peer it cannot reach is unreachable */
	SV_TRANSPORT_ROCEV2, /* RoCEv2 datagrams to every peer, this host's too */
};
#define SV_MAX_TRANSPORTS 10
/* The host's shared TCP port for endpoints (SOFTVERBS_PORT, default 4791; 0: none). */
uint16_t sv_tcp_shared_port(void);
/* The port a peer endpoint is reached at, given its own (its block's):
 * under rocev2 every endpoint of an address is at UDP 4791, one
 * connection per address (the transport sends a datagram for a context of
 * this host to that context's own port, rocev2.c). */
uint16_t sv_transport_peer_port(enum sv_transport_mode mode, uint16_t port);
/* Are connections in this mode an address's, shared by its endpoints, so
 * that what arrives names no endpoint (sv_conn.by_address: rocev2)? */
bool sv_transport_by_address(enum sv_transport_mode mode);
/* SOFTVERBS_TRANSPORT, read when a device is opened. */
enum sv_transport_mode sv_transport_mode(void);
/* The transports an endpoint listens with, the one that picks the port first. */
int sv_transports_listening(enum sv_transport_mode mode,
			    const struct sv_transport_ops *out[SV_MAX_TRANSPORTS]);
/* Make c (made by its owner, not yet registered) the connection of
 * multicast group mgid, sending through the interface of ifip: sets
 * c->ops (and c->fd); 0, or -errno with c->ops set. */
int sv_transport_group(struct sv_conn *c, const union ibv_gid *mgid, struct in_addr ifip);
/* Start a connection to conn->peer over the transport mode picks for it:
 * sets conn->ops (and conn->fd); 0, or -errno with conn->ops set. */
int sv_transport_connect(struct sv_conn *conn, enum sv_transport_mode mode);

/*
 * A stream transport's listener (fd, or -errno, which is returned) as an
 * interface (iface.c): each peer waiting there is accepted into a
 * connection of ops by accept, and handed to the owner.  accept returns 0;
 * -EAGAIN when none waits, or when accepting must stop; -EMFILE out of
 * descriptors or memory (the owner rests the listeners); any other -errno:
 * that peer was refused.  leave closes the listener now (a shared port),
 * close closes it and frees the interface.
 */
int sv_iface_stream(const struct sv_iface_at *at, int fd, const struct sv_transport_ops *ops,
		    int (*accept)(int lfd, struct sv_conn *conn), void **iface);
void sv_iface_stream_leave(void *iface, bool pass_on);
void sv_iface_stream_close(void *iface);

/* An accept4() failure as an accept function reports it (-EAGAIN: nobody
 * waits; -EMFILE: out of descriptors or memory, the listener rests a while). */
static inline int sv_accept_error(int err)
{
	if (err == EAGAIN || err == EWOULDBLOCK)
		return -EAGAIN;
	/* out of descriptors or memory: the listener must rest, not spin */
	if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM)
		return -EMFILE;
	return -err;
}

/* The connection is the engine's now (conn->hello_gid set): the side that
 * connects sends its HELLO, one accepted whose HELLO came with it (handed
 * over from the shared port) answers it; 0 or -errno. */
int sv_conn_start(struct sv_conn *conn);
/* The peer's HELLO (the first frame): false if it is not one we speak (or
 * not for us: handed on), or if it names an endpoint at an address other
 * than the one the connection comes from (ops->peer_addr). */
bool sv_conn_take_hello(struct sv_conn *conn, const uint8_t *frame, size_t len);
/* The peer's AUTH (the second frame): false if it does not prove the secret. */
bool sv_conn_take_auth(struct sv_conn *conn, const uint8_t *frame, size_t len);
/* A connection ended: if we connected and proved ourselves and the peer
 * had not, say so (it most likely holds another secret). */
void sv_conn_ended_in_handshake(const struct sv_conn *conn);

/*
 * Fault injection (faults.c, SOFTVERBS_FAULTS): what happens to a packet
 * this process sends.  The draws are conn_write's (conn.c), on every
 * transport; handshake frames are never touched.
 */
enum sv_fault_kind {
	SV_FAULT_CORRUPT, /* a bit flips: the receiver's ICRC drops it (rocev2), or
			   * it is dropped here (stream transports carry no CRC) */
	SV_FAULT_DROP,
	SV_FAULT_DELAY,   /* it leaves delay_ms later */
	SV_FAULT_REORDER, /* it leaves 1 ms later, overtaken */
	SV_FAULT_DUP,     /* sent twice */
	SV_FAULT_CE,      /* marked congested (ECN CE), as a queueing hop marks */
	SV_FAULT_KINDS,
	SV_FAULT_NONE = SV_FAULT_KINDS,
};
bool sv_faults_on(void);
/* sv_faults_on()'s answer, for the write path: set before the first
 * connection is made (sv_faults_conn_init asks) */
extern bool sv_faults_enabled;
/* a new connection's generator (seed, order of creation) */
void sv_faults_conn_init(struct sv_conn *conn);
/* tx_lock held: one packet's fate; *hold_ns how long a held one waits */
enum sv_fault_kind sv_faults_draw(struct sv_conn *conn, uint64_t *hold_ns);
/* Takes tx_lock: frames held back until now join the queue; returns when
 * the next one is due (0: none left). */
uint64_t sv_conn_fault_release(struct sv_conn *conn, uint64_t now);

/* Takes tx_lock: hand queued frames to the transport while it takes them; 0 or -errno. */
int sv_conn_flush_queue(struct sv_conn *conn);

/* The open op of a transport without a handshake or framing (datagrams):
 * each packet proves itself, or nothing does (RoCE); the connection is
 * only where packets go. */
int sv_conn_open_unframed(struct sv_conn *conn);
/* The readiness the owner watches conn->fd for (ops->watch, or its default). */
uint32_t sv_conn_watch(const struct sv_conn *conn, bool in, bool out);

/* tx_lock held, the connection gated: the frames queued behind the
 * handshake's, none of which has left, taken off the queue (their bytes in
 * *bytes), to go on another connection (sv_conn_requeue). */
struct sv_txbuf *sv_conn_take_gated(struct sv_conn *conn, size_t *bytes);
/* A connection nobody else sees yet: frames taken from another join its queue. */
void sv_conn_requeue(struct sv_conn *conn, struct sv_txbuf *frames, size_t bytes);

/*
 * Send one frame.  Never blocks: what the transport does not take now is
 * copied and flushed by the engine.
 * Returns 0, or -ENOTCONN when the connection is dead (the frame is dropped,
 * exactly as a wire would drop it; the requester's retry timer recovers).
 */
int sv_conn_send(struct sv_conn *conn, const struct iovec *iov, int iovcnt);
/* tx_lock held: hand queued frames to the transport while it takes them; 0 or -errno. */
int sv_conn_txq_write(struct sv_conn *conn);
/* During a receive pass: write what is corked now (the pass stays corked). */
void sv_conn_uncork_now(struct sv_conn *conn);
/* Batches: init empty; before add, the frame must fit (else flush first). */
void sv_txbatch_init(struct sv_txbatch *b);
/* Where the headers of the next frame are written (SV_TXBATCH_HEAD - SV_FRAME_HEAD bytes). */
static inline uint8_t *sv_txbatch_hdr(struct sv_txbatch *b)
{
	return b->head[b->nframes] + SV_FRAME_HEAD;
}
/* Room for one more frame with npayload payload pieces, on conn? */
bool sv_txbatch_fits(const struct sv_txbatch *b, struct sv_conn *conn, int npayload);
/* Append the frame whose headers are at sv_txbatch_hdr(b); the payload is
 * referenced, not copied, and must stay valid until the flush. */
void sv_txbatch_add(struct sv_txbatch *b, struct sv_conn *conn, size_t hdr_len,
		    const struct iovec *payload, int npayload);
/* Write (or queue) everything gathered; same result as sv_conn_send. */
int sv_txbatch_flush(struct sv_txbatch *b);

/* True while bytes wait to leave, in user space or in the transport: the
 * requester's timers do not count time a packet spends queued behind others. */
bool sv_conn_busy(struct sv_conn *conn);
/*
 * True while an established connection has bytes waiting in user space.
 * The socket buffer is the real queue:
 * frames sent now would only be copied behind the waiting bytes, so
 * requesters wait for the engine to drain the queue instead.
 */
bool sv_conn_congested(struct sv_conn *conn);

void sv_conn_get(struct sv_conn *conn);
void sv_conn_put(struct sv_conn *conn);

#endif
