/*
 * What a context tells the processes of its host about its QPs and the
 * memory they may reach, so that a peer executes RDMA WRITE, READ and
 * atomics itself (ARCHITECTURE.md §4.6): the export table, a sealed memfd
 * per context that peers of the same uid take with pidfd_getfd(2) (the
 * QPN registry names its descriptor and inode) and map.
 *
 * The owner writes it; peers only read it, but for each QP's `busy`
 * counter.  Revocation (deregistration, a QP leaving the states that
 * receive, its destruction) is a Dekker handshake with the peers: the owner
 * publishes the change, fences, then waits until every QP's busy count is
 * 0; a peer raises busy (a sequentially consistent RMW), then reads what it
 * checks.  Either the peer sees the change, or the owner sees it busy and
 * waits until its access is over.
 */
#ifndef SV_MEM_EXPORT_H
#define SV_MEM_EXPORT_H

#include "transport/registry.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SV_XSEG_MAGIC 0x53565845u /* "SVXE" */
#define SV_XSEG_VERSION 3u /* 3: QPs by slot, qpn_key */
#define SV_XMR_SLOTS 4096 /* MRs a context exports; more go through its engine */

/* A QP, at the index of its slot: sv_qpn_unpermute of its number's low
 * bits, by the permutation made from qpn_key (transport/registry.h). */
struct sv_xqp {
	_Atomic uint32_t busy; /* peers' accesses through it in progress */
	_Atomic uint32_t open; /* 1: RC, in a state that executes requests */
	_Atomic uint32_t pd;     /* its PD's handle */
	_Atomic uint32_t access; /* qp_access_flags */
	_Atomic uint32_t dest_qpn;
	uint32_t pad[3];
};

/* An exported MR.  seq is odd while the owner rewrites the slot. */
struct sv_xmr {
	_Atomic uint32_t seq;
	_Atomic uint32_t rkey; /* 0: free */
	_Atomic uint32_t pd;
	_Atomic uint32_t access;
	_Atomic uint64_t iova, len;
	_Atomic uint64_t ino;  /* the extent's memfd (engine/mem_share.h) */
	_Atomic uint64_t size; /* its size */
	_Atomic uint64_t off;  /* of iova's byte in it */
	_Atomic int32_t fd;    /* its descriptor in the owner */
	uint32_t pad;
};

struct sv_xseg {
	uint32_t magic, version;
	uint32_t qpn_base;
	_Atomic uint32_t nmr; /* slots in use or used: peers search [0, nmr) */
	uint64_t qpn_key; /* the key of the permutation of its QP numbers */
	uint32_t pad[10];
	/*
	 * A robust, process-shared mutex that the owner's engine thread holds
	 * for as long as it runs.  When that thread ends (the process exits,
	 * is killed or execs) the kernel marks the lock word FUTEX_OWNER_DIED
	 * before the process can be reaped, so a peer learns that the owner
	 * is alive from one load, without a system call or a clock read
	 * (peer_mem.c).  Alone on its cache line: nobody writes it while it
	 * is held.
	 */
	union {
		pthread_mutex_t m;
		uint8_t line[64];
	} alive;
	struct sv_xqp qp[SV_QPN_BLOCK];
	struct sv_xmr mr[SV_XMR_SLOTS];
};

struct sv_context;
struct sv_mr;
struct sv_qp;

/* The context's table, made at open and published in the registry; false
 * when it cannot be (peers then use the engine). */
bool sv_export_open(struct sv_context *ctx);
/* After the engine thread has ended (it held the table's liveness mutex). */
void sv_export_close(struct sv_context *ctx);
/*
 * The extent an MR of [addr, addr+len) with these access flags lies in, its
 * pages shared now if needed (engine/mem_share.h); NULL when peers of this
 * host cannot reach it directly.  Pages are shared only once a peer of this
 * host has connected to the context (sv_export_share_all): a process whose
 * peers are all elsewhere keeps private pages.
 */
struct sv_extent *sv_export_share(struct sv_context *ctx, void *addr, size_t len,
				  unsigned int access, bool gpu);
/* A peer of this host has connected and proved itself: the MRs registered
 * before share their pages and are exported (once per context). */
void sv_export_share_all(struct sv_context *ctx);
/* An MR after its registration (MR table write lock held): exported when
 * peers may reach it and its pages can be shared. */
void sv_export_mr(struct sv_context *ctx, struct sv_mr *mr);
/* Before an MR goes or changes (write lock held): peers stop using it, and
 * the accesses in progress are over, when this returns. */
void sv_export_mr_revoke(struct sv_context *ctx, struct sv_mr *mr);
/* A QP's state or attributes changed, or it is being destroyed
 * (qp->destroyed; qp->lock held): what peers see now; once it no longer
 * executes requests, no peer access through it is in progress when this
 * returns. */
void sv_export_qp(struct sv_qp *qp);

#endif
