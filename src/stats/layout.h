/*
 * The counters segment of one opened context: a file that the library maps
 * and counts into, and that any process of the same user (or root) reads
 * without stopping the one that counts: `softverbs stat/top`, the sysfs
 * view's counters files (src/preload/fsview.c), ibv_query_port.
 *
 *   RUNDIR/stats/PID-N      N: the context's number within process PID
 *
 * RUNDIR is the runtime directory of the file-system view (rundir.c).  The
 * file is mode 0600, created at ibv_open_device and removed at
 * ibv_close_device or at exit; a process killed before that leaves it
 * behind, and readers tell such a file by its pid and the process's start
 * time, and remove it (reader.c).
 *
 * Layout: a header, then one slot per QP number of the context's block of
 * the host's QP numbers (slot i is the block's i-th QPN, which the slot
 * also holds).  Writers only ever add to counters with relaxed
 * atomics; readers load each with a relaxed atomic, so no value is ever
 * torn.  Numbers are native-endian: only processes of this host read them.
 * Port counters are not stored: they are the sum of the live QPs' counters,
 * the counters of QPs destroyed since (hdr.gone) and the context's own
 * (hdr.ctx_c), summed by the reader.
 */
#ifndef SV_STATS_LAYOUT_H
#define SV_STATS_LAYOUT_H

#include <stdint.h>

#define SV_STAT_MAGIC "SVSTATS"  /* 8 bytes with the NUL */
#define SV_STAT_VERSION 1
#define SV_STAT_NSLOTS 16384      /* = SV_MAX_QP */

/* Counters of one QP (and, summed, of a port). */
enum sv_stat_qp_counter {
	SV_QPC_TX_PKTS,        /* packets sent: requests, responses, ACKs */
	SV_QPC_TX_BYTES,       /* payload bytes of those packets (no headers) */
	SV_QPC_RX_PKTS,        /* packets received for this QP */
	SV_QPC_RX_BYTES,       /* their payload bytes */
	SV_QPC_RETRANS,        /* request packets sent again (RC: after an ack timeout, a
				* probe, a sequence NAK or an RNR NAK) */
	SV_QPC_ACK_TIMEOUTS,   /* transport retry timer expiries that resent */
	SV_QPC_RNR_NAK_SENT,   /* RNR NAKs sent: a SEND found no receive WQE */
	SV_QPC_RNR_NAK_RCVD,
	SV_QPC_SEQ_ERR,        /* requests out of sequence (after a gap), dropped */
	SV_QPC_DUP_REQ,        /* duplicate requests, answered again */
	SV_QPC_REM_ACCESS_SENT, /* requests refused for rkey, bounds or access: NAK
				  * sent (RC) or message dropped (UC) */
	SV_QPC_REM_ACCESS_RCVD, /* remote access NAKs received */
	SV_QPC_REM_INV_SENT,   /* invalid request NAKs sent */
	SV_QPC_REM_INV_RCVD,
	SV_QPC_REM_OP_SENT,    /* remote operation error NAKs sent */
	SV_QPC_REM_OP_RCVD,
	SV_QPC_QKEY_VIOL,      /* UD datagrams dropped for a wrong Q_Key */
	SV_QPC_CQE_OK,         /* completions of this QP: successful */
	SV_QPC_CQE_ERR,        /* completions with an error status (flushes included) */
	SV_QPC_ECN_MARKED,     /* requests that arrived marked congested (IP ECN CE) */
	SV_QPC_CNP_SENT,       /* congestion notification packets sent for them */
	SV_QPC_CNP_RCVD,       /* CNPs received: the requester's window halved (congestion.c) */
	SV_QPC_PROBES,         /* RC over rocev2: the requester went back to the first
				* unacknowledged packet after a silent round trip,
				* before the ack timeout, using no retry */
	SV_QPC_ACK_ASKS,       /* RC over tcp or shm: the last packet sent again,
				* asking for the ACK that coalesced messages did not
				* ask for (none came within 1 ms), using no retry */
	SV_QPC_COUNT
};

/* Counters of a context that belong to no QP. */
enum sv_stat_ctx_counter {
	SV_CTXC_CQ_OVERRUN,    /* completions lost to a full CQ */
	SV_CTXC_CONN_LOST,     /* established connections to peer endpoints that
				* ended while the context was open: the peer
				* closed its device or exited, or an error broke it */
	SV_CTXC_CONNECT_FAIL,  /* connections to a peer endpoint that could not be
				* made (nobody listens there, unreachable) */
	SV_CTXC_RX_NO_QP,      /* packets for a QP number that does not exist, dropped */
	SV_CTXC_RX_WRONG_PEER, /* packets for an RC/UC QP from an endpoint it is not
				* connected to, dropped */
	SV_CTXC_HELLO_SPOOFED, /* connections refused: the peer's HELLO names an
				* endpoint at an address other than the one the
				* connection comes from */
	SV_CTXC_RX_BAD_ICRC,   /* RoCEv2 datagrams whose ICRC does not verify, dropped */
	SV_CTXC_RX_BAD_TAG,    /* RoCEv2 datagrams whose tag keyed by the job's
				* SOFTVERBS_SECRET does not verify (a sender
				* without it: rxe, a forger), dropped */
	SV_CTXC_COUNT
};

#define SV_STAT_QPC_MAX 28  /* room in a slot */
#define SV_STAT_CTXC_MAX 16
#define SV_STAT_WC_MAX 32   /* completion statuses counted (enum ibv_wc_status) */

/* One QP (256 bytes). */
struct sv_stat_qp {
	uint32_t in_use;    /* 1 while the QP exists */
	uint32_t qpn;
	uint8_t type;       /* enum ibv_qp_type */
	uint8_t state;      /* enum ibv_qp_state */
	uint16_t peer_port; /* RC/UC: the peer endpoint (host order), 0 if none */
	uint32_t peer_ip;   /* network order */
	uint32_t dest_qpn;
	uint32_t psn_next;  /* writer's own: the requester's next new PSN */
	uint32_t psn_valid; /* writer's own: psn_next is set */
	uint32_t pad;
	uint64_t c[SV_STAT_QPC_MAX];
};

struct sv_stat_hdr {
	char magic[8];
	uint32_t version;
	uint32_t hdr_size, slot_size, nslots;
	int32_t pid;
	uint32_t ctx_no;          /* the context's number within the process */
	uint64_t pid_start;       /* the process's start time (/proc/PID/stat
				   * field 22), to tell a reused pid */
	uint64_t opened_ns;       /* CLOCK_REALTIME at ibv_open_device */
	char comm[16];            /* the program's name */
	char dev[64];             /* device name, e.g. sv_lo */
	uint64_t netns;           /* the network namespace (inode of /proc/self/ns/net):
				   * sv_lo of another namespace is another device */
	uint32_t ep_ip;           /* the context's endpoint (network order) */
	uint16_t ep_port;         /* host order */
	uint16_t pad;
	uint32_t slots_used;      /* slots at or above this were never used */
	uint32_t gone_seq;        /* odd while a destroyed QP's counters move to gone */
	uint64_t ctx_c[SV_STAT_CTXC_MAX];
	uint64_t wc_status[SV_STAT_WC_MAX]; /* error completions by status (the
					     * successful ones are SV_QPC_CQE_OK) */
	uint64_t gone[SV_STAT_QPC_MAX];     /* counters of QPs destroyed since open */
	char file[1024];          /* writer's own: the file's path, to remove it
				   * ("" while anonymous memory) */
};

#define SV_STAT_HDR_SIZE 4096 /* the header's room: slots start here */

_Static_assert(sizeof(struct sv_stat_qp) == 256, "a QP slot is 256 bytes");
_Static_assert(sizeof(struct sv_stat_hdr) <= SV_STAT_HDR_SIZE, "header fits its room");
_Static_assert(SV_QPC_COUNT <= SV_STAT_QPC_MAX, "QP counters fit a slot");
_Static_assert(SV_CTXC_COUNT <= SV_STAT_CTXC_MAX, "context counters fit");

#define SV_STAT_FILE_SIZE ((uint64_t)SV_STAT_HDR_SIZE + (uint64_t)SV_STAT_NSLOTS * 256)

#endif
