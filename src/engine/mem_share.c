/*
 * Replacing registered pages by shared ones; see mem_share.h.
 *
 * How pages are replaced without losing a store of another thread: a memfd
 * of the range's size is mapped aside, the range is made read-only (a
 * thread that stores into it faults, and common/fault_guard.c makes it
 * wait), the bytes are copied, and the memfd is mapped over the range with
 * MAP_FIXED, which swaps the mappings in one step.  The waiting threads
 * then store into the new pages.  A system call that writes into the range
 * meanwhile (read(2) into it) fails with EFAULT: the one thing another
 * thread can see (docs/COMPATIBILITY.md).
 *
 * Deregistration (the extent's last MR) makes the range private again,
 * without a copy: the memfd mapped over it privately (unshare_pages).
 *
 * fork(): a child would share the pages with its parent, where it expects
 * a copy.  The child's atfork handler copies every exported extent into
 * private pages before it does anything else (sv_share_fork_child).
 */
#include "common/lock_order.h"
#include "engine/mem_share.h"
#include "common/fault_guard.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MEMFD_NAME "softverbs-mr"

static struct sv_mutex share_lock = SV_MUTEX_INITIALIZER(SV_LOCK_SHARE);
static struct sv_extent *extents; /* share_lock */
static atomic_bool ever_shared;	  /* an extent was made: a fork has pages to copy */

static bool sharing_on(void)
{
	/* (registering threads and the engine thread may ask first at once) */
	static _Atomic int on = -1;

	return sv_env_switch(&on, "SOFTVERBS_SHARED_MR", true);
}

static size_t huge_page_size(void)
{
	char line[128];
	unsigned long kb = 0;
	FILE *f = fopen("/proc/meminfo", "re");

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "Hugepagesize: %lu kB", &kb) == 1)
			break;
	fclose(f);
	return (size_t)kb * 1024;
}

/* What the mappings under a range are. */
enum area_kind { AREA_NONE, AREA_ANON, AREA_HUGE, AREA_OURS, AREA_OURS_PRIVATE, AREA_OTHER };

struct area {
	enum area_kind kind;
	uint64_t ino; /* AREA_OURS: the memfd's inode */
	bool shmem;   /* pages of a memfd no MR exports: a page without an entry
			 in pagemap may hold data (all is copied) */
	uintptr_t start, end; /* AREA_OURS: its mapping */
};

static enum area_kind kind_of(const char *perms, unsigned long long ino, const char *path)
{
	if (!strcmp(perms, "rw-p") && !ino && (!*path || !strcmp(path, "[heap]")))
		return AREA_ANON;
	if (!strcmp(perms, "rw-p") && !strncmp(path, "/anon_hugepage", 14))
		return AREA_HUGE;
	if (!strncmp(path, "/memfd:" MEMFD_NAME " ", 8 + strlen(MEMFD_NAME))) {
		if (!strcmp(perms, "rw-s"))
			return AREA_OURS;
		if (!strcmp(perms, "rw-p"))
			return AREA_OURS_PRIVATE; /* deregistered (unshare_pages) */
	}
	return AREA_OTHER;
}

/* One line of /proc/self/maps: the mapping's bounds, file offset, inode and
 * kind; false for a line that does not parse. */
struct vma {
	uintptr_t start, end;
	uint64_t off, ino;
	enum area_kind kind;
	bool ours_ro; /* a shared mapping of ours made read-only (by the program) */
};

static const char *hex_field(const char *p, unsigned long long *v, char end)
{
	unsigned long long x = 0;
	const char *q = p;

	for (;; q++) {
		int d = *q >= '0' && *q <= '9'	 ? *q - '0'
			: *q >= 'a' && *q <= 'f' ? *q - 'a' + 10
						 : -1;

		if (d < 0)
			break;
		x = x * 16 + (unsigned)d;
	}
	if (q == p || *q != end)
		return NULL;
	*v = x;
	return q + 1;
}

/*
 * Parsed by hand, not with sscanf: the child of a fork reads the maps
 * before it may store into its heap (sv_share_fork_child), and this takes
 * neither memory nor a lock.
 */
static bool maps_line(const char *line, struct vma *v)
{
	unsigned long long vs, ve, off, ino = 0;
	char perms[5];
	const char *p = line, *path;

	if (!(p = hex_field(p, &vs, '-')) || !(p = hex_field(p, &ve, ' ')))
		return false;
	for (int i = 0; i < 4; i++, p++) {
		if (!*p || *p == ' ')
			return false;
		perms[i] = *p;
	}
	perms[4] = 0;
	if (*p++ != ' ' || !(p = hex_field(p, &off, ' ')))
		return false;
	while (*p && *p != ' ') /* the device */
		p++;
	if (*p++ != ' ' || *p < '0' || *p > '9')
		return false;
	while (*p >= '0' && *p <= '9')
		ino = ino * 10 + (unsigned)(*p++ - '0');
	path = p + strspn(p, " ");
	/* the path ends the line (fgets keeps its newline) */
	char name[256];
	size_t n = strcspn(path, "\n");

	n = SV_MIN(n, sizeof(name) - 1);
	memcpy(name, path, n);
	name[n] = 0;
	*v = (struct vma){ (uintptr_t)vs, (uintptr_t)ve, off, ino, kind_of(perms, ino, name),
			   !strcmp(perms, "r--s") && kind_of("rw-s", ino, name) == AREA_OURS };
	return true;
}

/* share_lock held: an extent with this inode exists (an MR exports it). */
static bool live_extent(uint64_t ino)
{
	for (struct sv_extent *x = extents; x; x = x->next)
		if (x->ino == ino)
			return true;
	return false;
}

/*
 * Look at the mappings under [s, e): one kind for all of them (several
 * anonymous ones count as one), or AREA_OTHER.  A range that starts or
 * ends inside an extent of ours, or spans two mappings of ours, is OTHER.
 */
static struct area survey(uintptr_t s, uintptr_t e)
{
	struct area a = { .kind = AREA_NONE };
	char line[512];
	uintptr_t covered = s;
	FILE *f = fopen("/proc/self/maps", "re");

	if (!f)
		return (struct area){ .kind = AREA_OTHER };
	while (fgets(line, sizeof(line), f)) {
		struct vma v;
		enum area_kind k;

		if (!maps_line(line, &v) || v.end <= s)
			continue;
		if (v.start >= e)
			break;
		k = v.kind;
		if ((k == AREA_OURS && !live_extent(v.ino)) || k == AREA_OURS_PRIVATE) {
			/* no MR exports it: replaced like private pages, and all
			 * copied (pagemap cannot tell which pages of a memfd hold
			 * data) */
			k = AREA_ANON;
			a.shmem = true;
		}
		if (v.start > covered || (a.kind != AREA_NONE && (k != a.kind || k == AREA_OURS)) ||
		    (k == AREA_OURS && v.off)) {
			a.kind = AREA_OTHER; /* a hole, a mix, or a second extent */
			break;
		}
		a.kind = k;
		a.ino = v.ino;
		a.start = v.start;
		a.end = v.end;
		covered = v.end;
		if (k == AREA_OTHER)
			break;
	}
	fclose(f);
	if (a.kind != AREA_OTHER && covered < e)
		a.kind = AREA_OTHER;
	return a;
}

/*
 * Copies of whole pages of the application: they hold freed heap chunks
 * and allocator redzones too, which AddressSanitizer would take for bad
 * reads by memcpy, so these copies are not instrumented (nor intercepted).
 */
__attribute__((no_sanitize("address"))) static void page_copy(void *d, const void *s, size_t n)
{
#if defined(__x86_64__)
	__asm__ volatile("rep movsb" : "+D"(d), "+S"(s), "+c"(n) : : "memory");
#else
	volatile uint8_t *to = d;
	const volatile uint8_t *from = s;

	while (n--)
		*to++ = *from++;
#endif
}

/*
 * Between hold and release nothing may store into the held range, this
 * thread included: a store would wait for this very thread.  Programs and
 * libraries hook mmap(2) and friends (libfabric's and UCX's memory
 * monitors patch them to watch for unmapped registrations), and a hook
 * may store into the heap: so the calls made in that window are system
 * calls, not the library's functions.
 */
static int raw_mprotect(uintptr_t a, size_t n, int prot)
{
	return (int)syscall(SYS_mprotect, a, n, prot);
}

static void *raw_mmap_fixed(uintptr_t a, size_t n, int fd)
{
	return (void *)syscall(SYS_mmap, a, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd,
			       0L);
}

/* Private anonymous pages, or NULL. */
static void *raw_mmap_private(size_t n)
{
	long p = syscall(SYS_mmap, 0L, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			 -1, 0L);

	return p == -1 ? NULL : (void *)p;
}

/* The mapping at `from` moved over [to, to+n), replacing what was there
 * in one step. */
static bool raw_move_over(void *from, size_t n, uintptr_t to)
{
	return syscall(SYS_mremap, from, n, n, MREMAP_MAYMOVE | MREMAP_FIXED, to) == (long)to;
}

/*
 * Copy [s, s+n), which maps `fd` from offset `off`, to `to`: only where
 * the memfd holds data (its holes read as zeros, as fresh anonymous pages
 * do, and copying them would fill them); everything where that cannot be
 * told (fd < 0, or no SEEK_DATA).  System calls only: this runs in the
 * child of a fork before it may store into its heap.
 */
static void copy_data(uint8_t *to, uintptr_t s, size_t n, int fd, uint64_t off)
{
	long d = (long)off, end = (long)(off + n), h;

	if (fd < 0) {
		page_copy(to, (void *)s, n);
		return;
	}
	while (d < end) {
		long at = syscall(SYS_lseek, fd, d, SEEK_DATA);

		if (at < 0 && errno == ENXIO)
			break; /* no data from d on */
		if (at < 0) {
			page_copy(to + (d - (long)off), (void *)(s + (uintptr_t)(d - (long)off)),
				  (size_t)(end - d));
			break;
		}
		if (at >= end)
			break;
		h = syscall(SYS_lseek, fd, at, SEEK_HOLE);
		if (h < 0 || h > end)
			h = end;
		page_copy(to + (at - (long)off), (void *)(s + (uintptr_t)(at - (long)off)),
			  (size_t)(h - at));
		d = h;
	}
}

/*
 * Each line of /proc/self/maps, parsed, to fn (which returns false to
 * stop), read with system calls into a buffer on the stack: the child of a
 * fork reads them before it may store into its heap.  A line longer than
 * the buffer (a long path: not a mapping of ours) is skipped.
 */
static void each_mapping(bool (*fn)(const struct vma *v, void *arg), void *arg)
{
	char buf[4096];
	size_t have = 0;
	bool skipping = false;
	int fd = (int)syscall(SYS_openat, AT_FDCWD, "/proc/self/maps", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return;
	for (;;) {
		ssize_t got = syscall(SYS_read, fd, buf + have, sizeof(buf) - 1 - have);
		char *line = buf, *nl;

		if (got <= 0)
			break;
		have += (size_t)got;
		buf[have] = 0;
		while ((nl = memchr(line, '\n', have - (size_t)(line - buf)))) {
			struct vma v;

			*nl = 0;
			if (!skipping && maps_line(line, &v) && !fn(&v, arg)) {
				syscall(SYS_close, fd);
				return;
			}
			skipping = false;
			line = nl + 1;
		}
		have -= (size_t)(line - buf);
		memmove(buf, line, have);
		if (have == sizeof(buf) - 1) {
			have = 0; /* a line longer than the buffer */
			skipping = true;
		}
	}
	syscall(SYS_close, fd);
}

/*
 * Copy [s, s+n) into the memfd mapped at `to`, leaving out pages the
 * process never touched (neither present nor swapped, /proc/self/pagemap):
 * they read as zeros, and so do the memfd's holes, which then take no
 * memory.  Where pagemap cannot be read, everything is copied.
 */
static void copy_touched(uint8_t *to, uintptr_t s, size_t n, bool all)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE), npages = n / pg, i = 0;
	uint64_t ent[512];
	int fd = all ? -1
		     : (int)syscall(SYS_openat, AT_FDCWD, "/proc/self/pagemap",
				    O_RDONLY | O_CLOEXEC);

	if (fd < 0) {
		page_copy(to, (void *)s, n);
		return;
	}
	while (i < npages) {
		size_t k = SV_MIN(npages - i, SV_ARRAY_SIZE(ent));
		ssize_t got = syscall(SYS_pread64, fd, ent, k * sizeof(ent[0]),
				      (off_t)((s / pg + i) * sizeof(ent[0])));

		if (got < (ssize_t)sizeof(ent[0])) {
			page_copy(to + i * pg, (uint8_t *)s + i * pg, n - i * pg);
			break;
		}
		k = (size_t)got / sizeof(ent[0]);
		for (size_t j = 0; j < k; j++) {
			/* bit 63: present, 62: swapped */
			if (ent[j] >> 62)
				page_copy(to + (i + j) * pg, (uint8_t *)s + (i + j) * pg, pg);
		}
		i += k;
	}
	syscall(SYS_close, fd);
}

/*
 * The new mapping has no page table entries yet: the pages that hold data
 * (the memfd's, SEEK_DATA) get them now, as the private ones had, so that
 * the process's resident size stays what it was and the first accesses
 * take no fault.  The holes stay holes.
 */
static void populate(uintptr_t s, int fd, size_t n)
{
#ifdef MADV_POPULATE_WRITE
	off_t d = 0, h;

	while ((size_t)d < n && (d = lseek(fd, d, SEEK_DATA)) >= 0 && (size_t)d < n) {
		h = lseek(fd, d, SEEK_HOLE);
		if (h < 0 || (size_t)h > n)
			h = (off_t)n;
		(void)madvise((void *)(s + (size_t)d), (size_t)(h - d), MADV_POPULATE_WRITE);
		d = h;
	}
#else
	(void)s;
	(void)fd;
	(void)n;
#endif
}

/* Replace the pages of [s, s+n) by a new extent's. */
static struct sv_extent *replace(uintptr_t s, size_t n, bool huge, bool copy_all)
{
	struct sv_extent *x = calloc(1, sizeof(*x));
	struct stat st;
	void *aside = MAP_FAILED;
	int fd;

	if (!x)
		return NULL;
	fd = memfd_create(MEMFD_NAME, MFD_CLOEXEC | MFD_ALLOW_SEALING | (huge ? MFD_HUGETLB : 0));
	if (fd < 0 || ftruncate(fd, (off_t)n) ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) || fstat(fd, &st))
		goto fail;
	aside = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (aside == MAP_FAILED)
		goto fail;
	sv_fault_guard_hold((void *)s, n);
	if (raw_mprotect(s, n, PROT_READ)) {
		sv_fault_guard_release();
		goto fail;
	}
	copy_touched(aside, s, n, copy_all);
	if (raw_mmap_fixed(s, n, fd) != (void *)s) {
		raw_mprotect(s, n, PROT_READ | PROT_WRITE);
		sv_fault_guard_release();
		goto fail;
	}
	sv_fault_guard_release();
	munmap(aside, n);
	populate(s, fd, n);
	x->start = s;
	x->len = n;
	x->fd = fd;
	x->ino = (uint64_t)st.st_ino;
	x->huge = huge;
	atomic_store(&ever_shared, true);
	sv_dbg("shared MR pages %#lx+%zu (memfd %d%s)", (unsigned long)s, n, fd,
	       huge ? ", huge pages" : "");
	return x;
fail:
	sv_dbg("MR pages %#lx+%zu stay private: %s", (unsigned long)s, n, strerror(errno));
	if (aside != MAP_FAILED)
		munmap(aside, n);
	if (fd >= 0)
		close(fd);
	free(x);
	return NULL;
}

struct sv_extent *sv_share_get(void *addr, size_t len)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE), hp;
	uintptr_t a = (uintptr_t)addr, s, e;
	struct sv_extent *x = NULL;
	struct area ar;

	/* a store of another thread during the copy waits in our fault
	 * handler: no replacing once the program has put its own in place */
	if (!sharing_on() || !len || a + len < a || !sv_fault_guard_active())
		return NULL;
	s = a & ~(uintptr_t)(pg - 1);
	e = (a + len + pg - 1) & ~(uintptr_t)(pg - 1);
	sv_mutex_lock(&share_lock);
	ar = survey(s, e);
	if (ar.kind == AREA_OURS) {
		for (x = extents; x && x->ino != ar.ino; x = x->next)
			;
		if (x && x->start == ar.start && x->start + x->len == ar.end) {
			x->refs++;
			goto out;
		}
		x = NULL;
		goto out; /* a range partly inside an exported extent */
	}
	if (ar.kind == AREA_HUGE) {
		hp = huge_page_size();
		if (!hp)
			goto out;
		s = a & ~(uintptr_t)(hp - 1);
		e = (a + len + hp - 1) & ~(uintptr_t)(hp - 1);
		if (survey(s, e).kind != AREA_HUGE)
			goto out;
	} else if (ar.kind != AREA_ANON) {
		goto out;
	}
	x = replace(s, e - s, ar.kind == AREA_HUGE, ar.shmem);
	if (x) {
		x->refs = 1;
		x->next = extents;
		extents = x;
	}
out:
	sv_mutex_unlock(&share_lock);
	if (!x)
		sv_dbg("MR pages %#lx+%zu stay private: %s", (unsigned long)s, (size_t)(e - s),
		       ar.kind == AREA_OURS ? "partly in another MR's shared pages"
		       : ar.kind == AREA_HUGE || ar.kind == AREA_ANON
			       ? "they could not be replaced"
			       : "not private anonymous memory");
	return x;
}

/*
 * The last MR of an extent is gone: its range becomes private memory
 * again, in one step and without a copy, by mapping the memfd over it
 * privately (MAP_FIXED replaces the shared mapping atomically: a store of
 * another thread lands in the memfd's page before, or in a private copy of
 * it after; nothing waits, nothing is lost).  Left shared, it would be
 * memory the program reuses (malloc hands it out again, with its own
 * bookkeeping in it) that the kernel does not copy for a forked child:
 * such a child, copying it itself after the fork while the parent went on
 * allocating there, got a heap that contradicted itself.  Mapped
 * privately, fork() copies it as any private memory, and a peer stopped
 * inside an access past the revocation's wait no longer reaches the
 * program's memory.  The memfd stays as long as the mapping (a page the
 * program writes then exists twice).  Done for each part of the extent
 * still mapped where it was (the program may have unmapped some).  Not for
 * hugetlb pages: a private copy of one is taken at the first store, and
 * without a free huge page then that store would get SIGBUS; those stay
 * shared, as all did before, and a fork copies them (sv_share_fork_child).
 */
struct pieces {
	const struct sv_extent *x;
	struct vma v[8];
	size_t n;
};

static bool piece_of(const struct vma *v, void *arg)
{
	struct pieces *p = arg;

	if (v->start >= p->x->start + p->x->len)
		return false;
	if (v->end > p->x->start && v->kind == AREA_OURS && v->ino == p->x->ino &&
	    p->n < SV_ARRAY_SIZE(p->v))
		p->v[p->n++] = *v;
	return true;
}

static void unshare_pages(const struct sv_extent *x)
{
	struct pieces ps = { .x = x };

	if (x->huge)
		return;
	each_mapping(piece_of, &ps);
	for (size_t i = 0; i < ps.n; i++) {
		uintptr_t s = ps.v[i].start;
		size_t n = ps.v[i].end - s;

		/* a system call: a hook on mmap(2) (memory monitors) is not for
		 * this */
		if (syscall(SYS_mmap, s, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, x->fd,
			    (long)ps.v[i].off) != (long)s)
			sv_dbg("MR pages %#lx+%zu stay shared: %s", (unsigned long)s, n,
			       strerror(errno));
	}
}

void sv_share_put(struct sv_extent *x)
{
	struct sv_extent **p;

	if (!x)
		return;
	sv_mutex_lock(&share_lock);
	if (--x->refs) {
		sv_mutex_unlock(&share_lock);
		return;
	}
	for (p = &extents; *p && *p != x; p = &(*p)->next)
		;
	if (*p)
		*p = x->next;
	/* peers see the extent gone from every table before this */
	unshare_pages(x);
	sv_mutex_unlock(&share_lock);
	close(x->fd);
	free(x);
}

/*
 * fork().  The kernel copies private pages for a child, not shared ones,
 * and the pages of an extent hold more than its MRs' bytes: its first and
 * last pages hold whatever else shares them (a malloc'd buffer's
 * neighbours, and malloc's bookkeeping of them).  A child that copied them
 * while its parent's threads went on allocating there got a heap that
 * contradicted its own (glibc: "corrupted size vs. prev_size"), and its
 * stores before its copy reached the parent's.  So:
 *   - prepare: the first and last page of each extent (a mapping of ours
 *     that no MR exports, all of it) are made read-only
 *     (sv_fault_guard_freeze: a thread of the parent that stores there
 *     waits), and a pipe is made;
 *   - child: copies those into private pages first, with system calls
 *     only (no stdio, no heap), closes its end of the pipe, then makes the
 *     rest of every mapping of ours private too; a store of the child's
 *     into a held page before that (glibc's, another atfork handler's)
 *     copies its range there and then, in the fault handler;
 *   - parent: waits for the pipe's end of file (the child has copied them,
 *     or exited, or exec'd; at most FORK_COPY_WAIT_MS), then makes them
 *     writable again.
 * An MR's own bytes are not held: stores the parent makes into them just
 * after the fork may or may not be in the child's copy (COMPATIBILITY.md),
 * as a NIC's DMA in that instant would be.  Holding few pages for a few
 * microseconds also keeps small the chance that a thread with SIGSEGV
 * blocked (glibc blocks every signal in a thread that ends) stores into
 * one: the kernel would kill the process.  The handlers are registered
 * when the library is loaded, so that the prepare handler runs after the
 * program's and the child's before them.
 */
#define FROZEN_MAX 65536	/* ranges held at once; beyond, the child's copy only */
#define FORK_COPY_WAIT_MS 10000 /* a child that does not copy in that time (stopped) */

static struct sv_frozen *frozen; /* FROZEN_MAX, mapped once, never unmapped */
static size_t nfrozen;
static bool freezing; /* share_lock held: prepare froze them */
static int copied_pipe[2] = { -1, -1 };
static pid_t freezer_pid;

/* The memfd of the live extent with this inode, or NULL. */
static struct sv_extent *extent_of(uint64_t ino)
{
	for (struct sv_extent *x = extents; x; x = x->next)
		if (x->ino == ino)
			return x;
	return NULL;
}

/* [s, s+n), which maps `fd` from `off`, becomes private pages with its
 * bytes (read-only if `ro`); false if it could not.  System calls only. */
static bool privatize_range(uintptr_t s, size_t n, int fd, uint64_t off, bool ro)
{
	void *p = raw_mmap_private(n);

	if (!p)
		return false;
	copy_data(p, s, n, fd, off);
	if (ro)
		raw_mprotect((uintptr_t)p, n, PROT_READ);
	if (raw_move_over(p, n, s))
		return true;
	syscall(SYS_munmap, p, n);
	return false;
}

/* In the child: a held range, private now (still mapped: another thread
 * of the parent may have unmapped it before the fork).  One that gets no
 * private pages (no memory) stays shared with the parent, writable. */
static void privatize_held(struct sv_frozen *r)
{
	size_t n = r->end - r->start;

	if (!syscall(SYS_msync, r->start, n, MS_ASYNC) &&
	    !privatize_range(r->start, n, r->fd, r->off, false))
		raw_mprotect(r->start, n, PROT_READ | PROT_WRITE);
	atomic_store(&r->state, SV_FROZEN_PRIVATE);
}

/* The fault handler's: a range that must not wait (fault_guard.h). */
static void unhold(struct sv_frozen *r)
{
	int saved = errno, held = SV_FROZEN_HELD;

	if ((pid_t)syscall(SYS_getpid) != freezer_pid)
		privatize_held(r);
	else if (atomic_compare_exchange_strong(&r->state, &held, SV_FROZEN_THAWED))
		raw_mprotect(r->start, r->end - r->start, PROT_READ | PROT_WRITE);
	errno = saved;
}

static void hold(uintptr_t s, uintptr_t e, int fd, uint64_t off)
{
	struct sv_frozen *r;

	if (nfrozen == FROZEN_MAX)
		return; /* the child's copy only */
	r = &frozen[nfrozen++];
	r->start = s;
	r->end = e;
	r->fd = fd;
	r->off = off;
	atomic_store(&r->state, SV_FROZEN_HELD);
}

static bool collect_held(const struct vma *v, void *arg)
{
	size_t pg = *(const size_t *)arg;
	struct sv_extent *x;

	if (v->kind != AREA_OURS)
		return true;
	x = extent_of(v->ino);
	if (!x) {
		hold(v->start, v->end, -1, v->off); /* no MR's: all of it */
		return true;
	}
	/* an extent's pages are huge pages where it is hugetlb memory */
	pg = x->huge ? SV_MAX(pg, huge_page_size()) : pg;
	if (v->end - v->start <= 2 * pg) {
		hold(v->start, v->end, x->fd, v->off);
		return true;
	}
	if (v->start == x->start)
		hold(v->start, v->start + pg, x->fd, v->off);
	if (v->end == x->start + x->len)
		hold(v->end - pg, v->end, x->fd, v->off + (v->end - pg - v->start));
	return true;
}

void sv_share_fork_prepare(void)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);

	/* fork() waits for a replacement in progress, and the child gets the
	 * list whole */
	sv_mutex_lock(&share_lock);
	nfrozen = 0;
	if (!atomic_load(&ever_shared))
		return;
	if (!frozen) {
		void *m = mmap(NULL, FROZEN_MAX * sizeof(*frozen), PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

		if (m == MAP_FAILED)
			return;
		frozen = m;
	}
	each_mapping(collect_held, &pg);
	/* without softverbs' fault handler, a store would crash instead of
	 * waiting: then the child copies them as it can */
	if (!nfrozen || !sv_fault_guard_active() || pipe2(copied_pipe, O_CLOEXEC)) {
		nfrozen = 0;
		return;
	}
	freezer_pid = getpid();
	sv_fault_guard_freeze(frozen, nfrozen, unhold);
	for (size_t i = 0; i < nfrozen; i++)
		if (raw_mprotect(frozen[i].start, frozen[i].end - frozen[i].start, PROT_READ))
			atomic_store(&frozen[i].state, SV_FROZEN_THAWED);
	freezing = true;
}

void sv_share_fork_parent(void)
{
	if (freezing) {
		struct pollfd pfd = { .fd = copied_pipe[0], .events = POLLIN };
		uint64_t deadline = sv_now_ns() + FORK_COPY_WAIT_MS * 1000000ull;
		char c;

		sv_fault_guard_forked();
		close(copied_pipe[1]);
		for (;;) {
			int left = (int)((int64_t)(deadline - sv_now_ns()) / 1000000);

			if (left <= 0) {
				sv_warn_limited("a child of fork() has not copied the shared pages "
						"of MRs in %d ms; going on",
						FORK_COPY_WAIT_MS);
				break;
			}
			if (poll(&pfd, 1, left) < 0 && errno != EINTR)
				break;
			if (pfd.revents && read(copied_pipe[0], &c, 1) <= 0)
				break; /* end of file (or an error): copied */
		}
		close(copied_pipe[0]);
		for (size_t i = 0; i < nfrozen; i++) {
			int held = SV_FROZEN_HELD;

			if (atomic_compare_exchange_strong(&frozen[i].state, &held,
							   SV_FROZEN_THAWED))
				raw_mprotect(frozen[i].start, frozen[i].end - frozen[i].start,
					     PROT_READ | PROT_WRITE);
		}
		sv_fault_guard_thaw();
		freezing = false;
	}
	sv_mutex_unlock(&share_lock);
}

/* Shared mappings of ours, the first few met. */
struct ours_in {
	struct vma v[8];
	size_t n;
	uintptr_t failed[16]; /* those that could not be copied */
	size_t nfailed;
};

static bool find_ours(const struct vma *v, void *arg)
{
	struct ours_in *f = arg;

	if (v->kind != AREA_OURS && !v->ours_ro)
		return true;
	for (size_t i = 0; i < f->nfailed; i++)
		if (f->failed[i] == v->start)
			return true;
	f->v[f->n++] = *v;
	return f->n < SV_ARRAY_SIZE(f->v);
}

/*
 * In the child: every shared mapping of ours becomes private pages with
 * its bytes (only the memfd's data pages are copied where it is known:
 * copying a hole would fill it, in the parent's memfd too).  The maps are
 * read again after each change (a pass that changes them may miss a
 * line), until none is left.  One that gets no private pages (no memory)
 * stays shared with the parent (COMPATIBILITY.md).
 */
static void privatize_all(void)
{
	struct ours_in f = { .n = 0 };

	for (int pass = 0; pass < 1000; pass++) {
		f.n = 0;
		each_mapping(find_ours, &f);
		if (!f.n)
			return;
		for (size_t i = 0; i < f.n; i++) {
			struct sv_extent *x = extent_of(f.v[i].ino);

			if (privatize_range(f.v[i].start, f.v[i].end - f.v[i].start,
					    x ? x->fd : -1, f.v[i].off, f.v[i].ours_ro))
				continue;
			if (f.nfailed == SV_ARRAY_SIZE(f.failed))
				return;
			f.failed[f.nfailed++] = f.v[i].start;
		}
	}
}

/*
 * In the child of fork(), one thread: the held pages first (those the
 * parent released early before the others), then the parent goes on, then
 * the rest; only then anything that stores into the heap, and the extents
 * are the parent's, not ours.
 */
void sv_share_fork_child(void)
{
	if (freezing) {
		for (int pass = 0; pass < 2; pass++)
			for (size_t i = 0; i < nfrozen; i++)
				if (atomic_load(&frozen[i].state) ==
				    (pass ? SV_FROZEN_HELD : SV_FROZEN_THAWED))
					privatize_held(&frozen[i]);
		sv_fault_guard_thaw();
		syscall(SYS_close, copied_pipe[1]); /* the parent goes on */
		syscall(SYS_close, copied_pipe[0]);
		freezing = false;
	}
	if (atomic_load(&ever_shared))
		privatize_all();
	while (extents) {
		struct sv_extent *x = extents;

		extents = x->next;
		close(x->fd);
		free(x);
	}
	sv_mutex_init(&share_lock, SV_LOCK_SHARE);
}
