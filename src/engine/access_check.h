/*
 * The target's checks of a remote request, as the IBA responder makes them:
 * its QP allows the operation (qp_access_flags; an atomic's word aligned),
 * and its key names memory of the QP's PD with the access the operation
 * needs, covering the range (a memory window: bound, and a type 2 window
 * bound to this QP).  What each opcode needs is the remote_access column of
 * the WR opcode table (wr_opcode.h).
 *
 * One definition for the two executors of remote requests: the responder,
 * which looks the key up in its own table (responder.c, mr_table.c's
 * sv_key_translate_remote), and the direct executor, which applies the same
 * predicates to what the target's export table says (direct_exec.c).  They
 * are inline: both call them on every operation.
 */
#ifndef SV_ACCESS_CHECK_H
#define SV_ACCESS_CHECK_H

#include "engine/objects.h"

#include <stdbool.h>
#include <stdint.h>

/* What a key names, as the checks see it (copied from an MR or window of
 * the key table, or from an exported MR's slot). */
struct sv_key_view {
	uintptr_t pd;        /* its PD, as the table names it (pointer, handle) */
	unsigned int access; /* the IBV_ACCESS_* it grants */
	uint64_t iova, len;  /* the range */
	bool unbound;        /* a window bound to nothing (or invalidated) */
	bool qp_bound;       /* a type 2 window: it answers bound_qpn only */
	uint32_t bound_qpn;
};

/* The QP allows the remote operation that needs `need`; word: an atomic,
 * whose address must be 8-byte aligned. */
static inline bool sv_qp_allows_remote(unsigned int qp_access_flags, unsigned int need,
				       uint64_t va, bool word)
{
	return (qp_access_flags & need) && !(word && (va & 7));
}

/* PD, access and bounds of [va, va+len) against what k names; the key
 * itself is not looked at (the local keys' check too). */
static inline enum sv_mem_err sv_key_allows_range(const struct sv_key_view *k, uintptr_t pd,
						  unsigned int need, uint64_t va, uint64_t len)
{
	if (k->pd != pd)
		return SV_MEM_BAD_PD;
	if (need & ~k->access)
		return SV_MEM_ACCESS;
	if (va < k->iova || len > k->len || va - k->iova > k->len - len)
		return SV_MEM_BOUNDS;
	return SV_MEM_OK;
}

/* A key a peer presents (rkey), through the QP qpn of the PD pd: the
 * window it names is bound (to qpn, a type 2 one), then PD, access and
 * bounds. */
static inline enum sv_mem_err sv_key_allows_remote(const struct sv_key_view *k, uintptr_t pd,
						   uint32_t qpn, unsigned int need, uint64_t va,
						   uint64_t len)
{
	if (k->unbound || (k->qp_bound && k->bound_qpn != qpn))
		return SV_MEM_BAD_KEY;
	return sv_key_allows_range(k, pd, need, va, len);
}

#endif
