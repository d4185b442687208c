/*
 * Accesses to application memory that survive the application unmapping it.
 *
 * A NIC pins registered pages, so an application that unmaps registered
 * memory leaves the NIC writing to orphaned pages; softverbs touches the
 * mapping itself, and a load or store to a page that is gone (or to a file
 * mapping past its end) raises SIGSEGV or SIGBUS in whichever thread made
 * it.  The operation that met the hole must fail (an error completion or a
 * NAK), never the process.
 *
 * A guarded access arms a per-thread jump buffer; the fault handler, when a
 * fault hits an armed thread, jumps back and the access returns false.  On
 * x86-64 a copy of up to 64 bytes arms nothing: it is a routine whose
 * instructions the handler knows by address, and a fault in it resumes at
 * its fix-up, which returns false (fault_guard.c, sv_place_short).  A
 * fault anywhere else is passed on to the handler that was installed before
 * softverbs' (or the default action), so the application's own crashes and
 * handlers behave as without softverbs.  An application that installs its
 * own SIGSEGV handler after opening a device replaces this one: then an
 * unmapped MR faults as it would in any program (docs/SECURITY.md).
 *
 * Under ThreadSanitizer the jump does not work (its runtime holds a lock
 * around an intercepted atomic, and keeps state for the signal handler it
 * wraps): builds with it are not protected, and errors_unmapped is not
 * among the tests run under it.
 */
#ifndef SV_FAULT_GUARD_H
#define SV_FAULT_GUARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Install the handler (once per process; called when a device is opened). */
void sv_fault_guard_init(void);
/* The library is unloaded (its destructor): the handlers from before come
 * back, unless the program has installed its own since. */
void sv_fault_guard_fini(void);

/*
 * Pages of [start, start+len) are being replaced (engine/mem_share.c): the
 * range is made read-only while they are copied, and a thread that stores
 * into it meanwhile faults; the handler makes it wait until
 * sv_fault_guard_release(), then lets it run the store again on the new
 * pages, so no store is lost.  One range at a time.
 */
void sv_fault_guard_hold(void *start, size_t len);
/* The handler is the one SIGSEGV calls (the program has not replaced it). */
bool sv_fault_guard_active(void);
void sv_fault_guard_release(void);

/*
 * fork() (engine/mem_share.c): the child must get the extents' pages as
 * they were at the fork, and nothing it stores may reach its parent, but
 * the two processes map them shared until the child has copied them.  So
 * the parent holds some (the pages that hold more than an MR's bytes)
 * read-only from its prepare handler until the child has its own copies:
 * frozen ranges.  A thread of the parent that
 * stores into one waits, as for sv_fault_guard_hold().  A fault that must
 * not wait calls `unhold` on the range, in the handler, and then runs the
 * store again: one of the child (its copy is made there and then) or of
 * the forking thread itself (the range is released early).  So does a
 * thread that has waited while the forking thread sleeps before fork() has
 * returned: the forking thread may be waiting for a lock the waiting thread
 * holds (malloc's, to take it across the fork).  `unhold` must be
 * async-signal-safe.
 */
enum sv_frozen_state { SV_FROZEN_HELD, SV_FROZEN_THAWED, SV_FROZEN_PRIVATE };

struct sv_frozen {
	uintptr_t start, end;
	_Atomic int state; /* enum sv_frozen_state */
	int fd;		   /* what is mapped there (the holder's business) */
	uint64_t off;
};

/* Publish ranges[0..n) (held, already read-only or about to be), frozen
 * by this thread of this process. */
void sv_fault_guard_freeze(struct sv_frozen *ranges, size_t n,
			   void (*unhold)(struct sv_frozen *r));
/* The forking thread is back from fork(): waiting can no longer hold it. */
void sv_fault_guard_forked(void);
/* Over (the ranges are writable or private again). */
void sv_fault_guard_thaw(void);

/* memcpy; false when either side could not be reached (dst partly written). */
bool sv_copy_guarded(void *dst, const void *src, size_t len);

/* The same, the last byte stored last: when another thread sees it, it sees
 * every byte before it too (memcpy may store its first bytes after the rest;
 * engine/dma.h, sv_dma_write). */
bool sv_place_guarded(void *dst, const void *src, size_t len);

/* Read one byte in every page of [p, p+len): false if one is not readable.
 * For memory handed to the kernel or to a peer to read later (a gather). */
bool sv_probe_guarded(const void *p, size_t len);

/* Wait until every page of [p, p+len) can be written (one is read-only
 * for a moment while it is replaced by a shared one, or held across a
 * fork, and the kernel, writing there, gets EFAULT where a store waits): a
 * write to one byte in each that leaves it as it was.  False if one is not
 * writable. */
bool sv_touch_guarded(void *p, size_t len);

/* 64-bit compare-and-swap / fetch-and-add (sequentially consistent) on a
 * word of application memory; *orig gets the value before.  False: the
 * word could not be reached, nothing changed. */
bool sv_cas_guarded(uint64_t *word, uint64_t compare, uint64_t swap, uint64_t *orig);
bool sv_fadd_guarded(uint64_t *word, uint64_t add, uint64_t *orig);
/* An 8-byte store (release), for ATOMIC_WRITE. */
bool sv_store_guarded(uint64_t *word, uint64_t v);

#endif
