/*
 * librdmacm over softverbs: the connection manager's private state.
 *
 * An rdma_cm_id is the public head of a struct cm_id.  There is no kernel
 * and no daemon: the CM protocol (REQ/REP/RTU/REJ/DREQ/DREP and SIDR for UD)
 * travels over a TCP socket between the two processes, to the rdma_cm port
 * the passive side listens on, on the address of the device that serves it.
 * One CM thread per process (protocol.c) owns those sockets; every other
 * piece of state is guarded by one process-wide lock, cm_lock.  Events are
 * queued on event channels (channel.c) and read with rdma_get_cm_event.
 *
 * Files: addr.c (socket addresses of either family), channel.c (event
 * channels and events), device.c (which device serves an address;
 * rdma_get_devices), id.c (ids, bind, address and route
 * resolution, options), protocol.c (the CM thread and the wire messages),
 * connect.c (listen/connect/accept/reject/disconnect), qp.c (QPs, SRQs,
 * endpoints, rdma_init_qp_attr), multicast.c (joins), addrinfo.c,
 * unsupported.c.
 */
#ifndef SV_CM_H
#define SV_CM_H

#include <infiniband/verbs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/lock_order.h"
#include "common/util.h"
#include "transport/auth.h"

/*
 * The GID an id uses is the RoCE v2 GID of its address, as rxe's CM takes
 * the GID of the address (the table: verbs/gid.c): index 3, the device's
 * IPv4 address as ::ffff:a.b.c.d, for an IPv4 connection; index 5, the
 * interface's IPv6 address, for an IPv6 one.  Where the device has no
 * entry of that family (an IPv6 link-local connection on an interface
 * without a global IPv6 address, a loopback address served by a device of
 * the other family), the other one; index 1 (link-local from the MAC,
 * always filled) as a last resort.  cm_id_gid_index (device.c).
 */
#define CM_GID_INDEX_V4 3
#define CM_GID_INDEX_V6 5
#define CM_GID_INDEX_LL 1

/* Private-data sizes a user may pass, as rdma_cm over RoCE allows (the CM
 * message's private data less the 36-byte rdma_cm header where there is one). */
enum {
	CM_REQ_PDATA = 56,
	CM_REP_PDATA = 196,
	CM_REJ_PDATA = 148,
	CM_RTU_PDATA = 224,
	CM_DREQ_PDATA = 220,
	CM_DREP_PDATA = 224,
	CM_SIDR_REQ_PDATA = 180,
	CM_SIDR_REP_PDATA = 136,
	CM_MAX_PDATA = 224,
};

/* A CM HELLO's private data: a nonce and a share of the PAKE (protocol.c). */
#define CM_HELLO_LEN (SV_AUTH_NONCE + SV_AUTH_SHARE)

/* IB CM reject reasons and SIDR statuses the events report (IBTA 12.6.7). */
enum {
	CM_REJ_INVALID_SERVICE_ID = 8,
	CM_REJ_CONSUMER_DEFINED = 28,
	CM_REJ_VENDOR_OPTION_NOT_SUPPORTED = 35,
	CM_SIDR_REJECT = 2,
};

/* The CM messages (IBTA 12.6), as the type byte of a frame (protocol.c). */
enum cm_msg_type {
	MSG_REQ = 'Q',
	MSG_REP = 'P',
	MSG_RTU = 'U',
	MSG_REJ = 'J',
	MSG_DREQ = 'D',
	MSG_DREP = 'E',
	MSG_SIDR_REQ = 'S',
	MSG_SIDR_REP = 'R',
	MSG_HELLO = 'H', /* the handshake: a nonce, then */
	MSG_AUTH = 'A',  /* the proof of the secret (transport/auth.h) */
};

enum cm_state {
	CM_IDLE,
	CM_BOUND,          /* rdma_bind_addr done */
	CM_ADDR_RESOLVED,
	CM_ROUTE_RESOLVED,
	CM_LISTEN,
	CM_CONNECTING,     /* active: TCP connect to the peer's CM port in flight */
	CM_REQ_SENT,       /* active: REQ (or SIDR REQ) out, waiting for REP */
	CM_REP_RCVD,       /* active without a QP: CONNECT_RESPONSE given, waiting for rdma_establish */
	CM_PENDING,        /* passive: accepted socket, no REQ yet (invisible to the user) */
	CM_REQ_RCVD,       /* passive: CONNECT_REQUEST given, waiting for accept/reject */
	CM_REP_SENT,       /* passive: REP out, waiting for RTU */
	CM_ESTABLISHED,
	CM_DREQ_SENT,      /* rdma_disconnect called, waiting for DREP */
	CM_DISCONNECTED,   /* DISCONNECTED given (timewait is instant here) */
	CM_UD_DONE,        /* UD exchange finished or rejected; the socket is gone */
	CM_FAILED,         /* connection attempt ended in an error event */
};

struct cm_channel {
	struct rdma_event_channel pub; /* pub.fd: the read end of `pipe` */
	int pipe_w;
	bool armed;                    /* one byte sits in the pipe iff the queue is not empty */
	int waiters;                   /* threads blocked in rdma_get_cm_event on it */
	bool destroyed;                /* rdma_destroy_event_channel'ed: kept, never freed */
	struct cm_channel *retired_next; /* on the list of destroyed channels */
	struct sv_list events;         /* struct cm_event, oldest first */
};

struct cm_event {
	struct rdma_cm_event pub;
	struct sv_list link;
	struct cm_id *owner;           /* whose event it is (for destroy and migrate) */
	uint8_t pdata[CM_MAX_PDATA];
};

/* One opened softverbs device, shared by every id on it (as librdmacm does). */
struct cm_device {
	struct ibv_context *verbs;
	int refcnt;                    /* ids on it, and rdma_get_devices lists not yet freed */
	struct ibv_pd *pd;             /* every id's id->pd while refcnt > 0 (cm_device_get) */
	struct ibv_xrcd *xrcd;         /* the XRC domain of XRC ids (made on first use) */
	/* its addresses, from its GID table; a device has either or both */
	bool has_ip, has_ip6;
	struct in_addr ip;             /* GID index 3 */
	struct in6_addr ip6;           /* GID index 5 */
	union ibv_gid gid_v4, gid_v6, gid_ll; /* indexes 3, 5 and 1 */
	enum ibv_mtu mtu;
	uint8_t max_rd_atomic;         /* max_qp_init_rd_atom */
	uint8_t max_dest_rd_atomic;    /* max_qp_rd_atom */
};

struct cm_id {
	struct rdma_cm_id pub;         /* must stay first */
	struct sv_list link;           /* all ids, for the CM thread's lookups */
	uint64_t serial;               /* the CM thread's handle: pointers may go stale */
	enum cm_state state;
	struct cm_device *dev;
	bool sync;                     /* created with no channel: calls wait for their event */
	int sock;                      /* bound, listening or connected TCP socket, or -1 */
	bool sock_polled;              /* sock is in the CM thread's epoll set */
	bool want_write;               /* connect() in progress */
	struct cm_id *listener;        /* passive child: who its CONNECT_REQUEST goes to */
	int backlog;

	/* options */
	uint8_t tos;
	bool reuseaddr;
	bool afonly_set;               /* RDMA_OPTION_ID_AFONLY given: IPV6_V6ONLY = afonly */
	bool afonly;
	bool ack_timeout_set;
	uint8_t ack_timeout;

	/* the connection as negotiated */
	struct ibv_sa_path_rec path;
	uint32_t local_psn, remote_psn, remote_qpn, remote_qkey;
	union ibv_gid remote_gid;
	enum ibv_mtu mtu;
	uint8_t resp_res, init_depth;  /* this side's, for its own QP */
	uint8_t retry_count, rnr_retry;/* for this side's QP (rnr_retry: what the peer asked) */
	bool remote_srq;
	uint32_t local_ece_vendor, local_ece_options;
	uint32_t remote_ece_vendor, remote_ece_options;
	uint64_t deadline_ns;          /* connect/REP/DREP timer, 0 = none */
	uint64_t retry_ns;             /* when to try the refused TCP connect again, 0 = none */
	uint64_t refused_until_ns;     /* refusals before this are retried, not reported */

	/* resources librdmacm created for the user, released with the QP/id */
	bool own_send_cq, own_recv_cq;
	struct ibv_qp_init_attr *ep_qp_attr; /* rdma_create_ep on a passive id: for rdma_get_request */
	struct ibv_pd *ep_pd;

	/* the REQ to send once the TCP connection to the peer's CM port is up
	 * and the peer has proved the secret (req_due) */
	struct rdma_conn_param pending;
	uint8_t pending_pdata[CM_MAX_PDATA];
	bool req_due;

	/* the CM connection's handshake (protocol.c): nothing but HELLO and
	 * AUTH counts before the peer's AUTH has passed */
	bool active;                   /* this end connected (the AUTH's role) */
	bool hello_seen, authed;
	/* the HELLOs: a nonce and a share of the PAKE each (transport/auth.h) */
	uint8_t hello_mine[CM_HELLO_LEN], hello_peer[CM_HELLO_LEN];
	struct sv_auth_hs auth;

	/* receive side of the CM socket */
	uint8_t rx[512];
	size_t rx_len;
	struct cm_channel *own_channel;/* the private channel of a sync id */
	struct cm_mcast *mcasts;       /* multicast groups joined (multicast.c) */
};

static inline struct cm_id *cm_id_of(struct rdma_cm_id *id)
{
	return SV_CONTAINER_OF(id, struct cm_id, pub);
}
static inline struct cm_channel *cm_channel_of(struct rdma_event_channel *ch)
{
	return SV_CONTAINER_OF(ch, struct cm_channel, pub);
}

/* librdmacm's convention: return -1 with errno set. */
static inline int cm_err(int e)
{
	errno = e;
	return -1;
}

/* The process-wide lock: ids, channels' queues, devices, the CM thread. */
extern struct sv_mutex cm_lock;

/* channel.c */
struct cm_event *cm_event_new(struct cm_id *id, enum rdma_cm_event_type type, int status);
void cm_event_post(struct cm_event *ev);           /* cm_lock held */
void cm_post_simple(struct cm_id *id, enum rdma_cm_event_type type, int status);
void cm_channel_forget(struct cm_id *id);          /* drop undelivered events of id */
void cm_channel_move(struct cm_id *id, struct cm_channel *to);
int cm_wait_sync(struct cm_id *id, enum rdma_cm_event_type want); /* sync ids; cm_lock NOT held */
struct cm_channel *cm_channel_create(void);
void cm_channel_destroy(struct cm_channel *ch);

/* addr.c: socket addresses of either family (AF_INET, AF_INET6) */
socklen_t cm_sa_len(const struct sockaddr *sa);
int cm_sa_take(const struct sockaddr *sa, struct sockaddr_storage *out); /* 0 or EAFNOSUPPORT */
bool cm_sa_is_any(const struct sockaddr *sa);
bool cm_sa_is_loopback(const struct sockaddr *sa);
bool cm_sa_is_linklocal(const struct sockaddr *sa);
void cm_sa_set_loopback(struct sockaddr *sa);     /* same family, port kept */
void cm_sa_set_addr(struct sockaddr *sa, const struct sockaddr *from); /* address (and scope), not port */
void cm_sa_from_any(struct sockaddr_storage *out, const struct sockaddr *in); /* v4-mapped IPv6 -> IPv4 */
void cm_gid_of_sa(const struct sockaddr *sa, union ibv_gid *gid); /* ::ffff:a.b.c.d or the IPv6 address */
const char *cm_sa_str(const struct sockaddr *sa, char *buf, size_t len);
#define CM_SA_STRLEN (INET6_ADDRSTRLEN + IF_NAMESIZE + 2)

/* device.c */
struct cm_device *cm_device_for_addr(const struct sockaddr *sa); /* cm_lock held; NULL: no device */
bool cm_addr_is_local(const struct sockaddr *sa);  /* an address of this host */
int cm_route_source(const struct sockaddr *dst, struct sockaddr_storage *src);
uint8_t cm_id_gid_index(const struct cm_id *id);   /* the GID index of the id's address family */
const union ibv_gid *cm_id_gid(const struct cm_id *id);
void cm_fill_route(struct cm_id *id);              /* path record from what is known */
struct ibv_pd *cm_device_pd(struct cm_device *d);     /* the device's default PD */
struct ibv_xrcd *cm_device_xrcd(struct cm_device *d);
int cm_device_get(struct cm_device *d);            /* a user more; its PD exists after (0 or errno) */
void cm_device_put(struct cm_device *d);           /* a user less; the last releases the PD */

/* id.c */
struct cm_id *cm_id_alloc(struct rdma_event_channel *ch, void *context, enum rdma_port_space ps,
			  enum ibv_qp_type qpt);
void cm_id_free(struct cm_id *id);                 /* cm_lock held */
struct cm_id *cm_id_by_serial(uint64_t serial);     /* cm_lock held */
struct sv_list *cm_all_ids(void);                  /* cm_lock held */
bool cm_ps_is_ud(enum rdma_port_space ps);
int cm_bind_socket(struct cm_id *id, const struct sockaddr *sa);
int cm_id_set_device(struct cm_id *id, struct cm_device *d); /* id->dev, verbs, pd (0 or errno) */

/* protocol.c */
int cm_thread_start(void);                         /* cm_lock held */
void cm_sock_watch(struct cm_id *id);              /* cm_lock held: add/modify id->sock in epoll */
void cm_sock_close(struct cm_id *id);              /* cm_lock held */
int cm_send_req(struct cm_id *id, const struct rdma_conn_param *p);
int cm_send_rep(struct cm_id *id, const struct rdma_conn_param *p);
int cm_send_simple(struct cm_id *id, enum cm_msg_type type, uint32_t reason, const void *pdata, uint8_t len);
int cm_send_sidr_req(struct cm_id *id, const struct rdma_conn_param *p);
int cm_send_sidr_rep(struct cm_id *id, uint32_t status, uint32_t qpn, uint32_t qkey,
		     const void *pdata, uint8_t len);
void cm_timer_kick(void);                          /* a deadline changed */
void cm_set_deadline(struct cm_id *id);            /* the CM timeout starts now */
void cm_connect_failed(struct cm_id *id, int err); /* TCP connect to the peer's CM port failed */
void cm_start_connect(struct cm_id *id);           /* TCP connect, then the REQ/SIDR REQ */
uint64_t cm_refused_grace_ns(void);                /* how long a refused connect is retried */

/* multicast.c (cm_lock held) */
void cm_mcast_detach_all(struct cm_id *id, struct ibv_qp *qp); /* before the QP goes */
void cm_mcast_free_all(struct cm_id *id);                      /* the id goes */

/* qp.c */
int cm_qp_to_rtr_rts(struct cm_id *id, bool rts);  /* move id->pub.qp along; cm_lock NOT needed */
void cm_qp_to_err(struct cm_id *id);
void cm_release_qp_resources(struct cm_id *id);

#endif
