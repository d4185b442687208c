/*
 * The copier: a second core for long copies (copier.c).  The bytes of a
 * long RDMA WRITE, READ or SEND executed in the posting thread (the direct
 * executor) are moved by two cores at once, as a NIC moves them with DMA
 * engines of its own.
 */
#ifndef SV_COPIER_H
#define SV_COPIER_H

#include <stdbool.h>
#include <stddef.h>

/* Copies shorter than this are one core's (the hand-off costs about what
 * half of such a copy takes). */
#define SV_COPY_SPLIT_MIN (64u << 10)
/* The chunks of a copy the caller and the copier take in turn: about an
 * eighth of it, within these bounds. */
#define SV_COPY_CHUNK_MIN (32u << 10)
#define SV_COPY_CHUNK_MAX (256u << 10)
/* A copier asleep is woken for a copy this long, and offered chunks of
 * it; a shorter one wakes it, for the copies that follow, only when it
 * came within SV_COPY_SPIN_NS of the one before. */
#define SV_COPY_WAKE_MIN (256u << 10)
/* How long the copier waits, spinning, for the next copy before it sleeps. */
#define SV_COPY_SPIN_NS 50000ull
/* How long a look at the host's runnable threads stays good. */
#define SV_COPY_CROWD_NS 1000000ull
/* A gap this long between two looks at the clock, 64 spins apart, means
 * the copier lost its CPU; so does a caller's wait this long from the
 * start of its copy (for a chunk of the copier's, at most 256 KiB).  Callers then copy alone for
 * SV_COPY_BACKOFF_MIN_NS, doubled (up to SV_COPY_BACKOFF_MAX_NS) each time
 * it happens again within SV_COPY_BACKOFF_MAX_NS of the last back-off's
 * end.  (A virtual CPU stops for tens of microseconds now and then by
 * itself; a thread that loses its CPU to another loses it for a time
 * slice, a millisecond or so.) */
#define SV_COPY_PREEMPT_NS 200000ull
#define SV_COPY_BACKOFF_MIN_NS 1000000ull
#define SV_COPY_BACKOFF_MAX_NS 64000000ull

/*
 * memcpy(dst, src, len) guarded as sv_copy_guarded is (fault_guard.h);
 * with last_last, the last byte stored last, after every other byte is
 * visible (sv_place_guarded).  Of SV_COPY_SPLIT_MIN bytes or more, the
 * copier may take chunks.  False when either side could not be reached
 * (dst then partly written).
 */
bool sv_copier_copy(void *dst, const void *src, size_t len, bool last_last);

/* No context of the process is open (ibv_close_device of the last one):
 * the copier's thread stops, as the engines' have, so that a process with
 * no device open runs no thread of ours; the next long copy starts it
 * again.  Nothing may be copying meanwhile. */
void sv_copier_idle(void);

/* For unit_copier: the chunks the copier has copied in this process, the
 * times callers were sent away to copy alone (crowded CPUs), and a copier
 * that is never sent away (a test on a busy machine still sees it work). */
unsigned long sv_copier_parts(void);
unsigned long sv_copier_backoffs(void);
void sv_copier_insist(bool on);

#endif
