/*
 * Registered memory that the peers of this host can map (ARCHITECTURE.md
 * §4.6).  A NIC reaches registered memory without the CPU of the process
 * that owns it; another process can do the same only through pages both
 * map.  So at registration the private anonymous pages under an MR that
 * peers may access (malloc, mmap, transparent or hugetlb huge pages) are
 * replaced, in place and with the same bytes, by the pages of a memfd: an
 * extent.  The application sees the same memory at the same address; a
 * peer of this host that maps the memfd (engine/direct_exec.c) writes, reads
 * and performs atomics on it with the target asleep or stopped.
 *
 * Memory that cannot be replaced (file mappings, shared mappings, the
 * stack, GPU memory, partly shared ranges) is not exported: peers reach it
 * through the target's engine, as before.
 */
#ifndef SV_MEM_SHARE_H
#define SV_MEM_SHARE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sv_extent {
	struct sv_extent *next;
	uintptr_t start; /* the memfd's byte 0 is mapped here */
	size_t len;
	int fd;       /* the memfd, sealed at its size */
	uint64_t ino; /* its inode: what peers check after taking the fd */
	unsigned refs; /* MRs that export it */
	bool huge;     /* hugetlb pages (the memory was hugetlb memory) */
};

/*
 * The extent that holds [addr, addr+len), made now if needed, with a
 * reference for the caller (addr's offset in its memfd: addr - start).
 * NULL when the memory cannot be shared (or sharing is off:
 * SOFTVERBS_SHARED_MR=0).
 */
struct sv_extent *sv_share_get(void *addr, size_t len);
/* The caller's reference goes; with the last one the pages under the
 * extent become private anonymous memory again, with the same bytes. */
void sv_share_put(struct sv_extent *e);

/* fork(): the library's atfork handlers call these (verbs/device.c), so
 * that its locks are taken in the lock order (lock_order.h).  The child's
 * runs first of the library's: it copies the shared pages before anything
 * stores into the heap. */
void sv_share_fork_prepare(void);
void sv_share_fork_parent(void);
void sv_share_fork_child(void);

#endif
