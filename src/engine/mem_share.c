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
 * fork(): a child would share the pages with its parent, where it expects
 * a copy.  The child's atfork handler copies every extent back into
 * private pages before the child goes on.
 */
#include "engine/mem_share.h"
#include "common/fault_guard.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MEMFD_NAME "softverbs-mr"

static pthread_mutex_t share_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sv_extent *extents; /* share_lock */

static bool sharing_on(void)
{
	/* registering threads and the engine thread may ask first at once:
	 * each computes the same answer */
	static _Atomic int on = -1;
	int v = atomic_load_explicit(&on, memory_order_relaxed);

	if (v < 0) {
		v = sv_env_long("SOFTVERBS_SHARED_MR", 1) != 0;
		atomic_store_explicit(&on, v, memory_order_relaxed);
	}
	return v;
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
enum area_kind { AREA_NONE, AREA_ANON, AREA_HUGE, AREA_OURS, AREA_OTHER };

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
	if (!strcmp(perms, "rw-s") && !strncmp(path, "/memfd:" MEMFD_NAME " ", 8 + strlen(MEMFD_NAME)))
		return AREA_OURS;
	return AREA_OTHER;
}

/* One line of /proc/self/maps: the mapping's bounds, file offset, inode and
 * kind; false for a line that does not parse. */
struct vma {
	uintptr_t start, end;
	uint64_t off, ino;
	enum area_kind kind;
};

static bool maps_line(const char *line, struct vma *v)
{
	unsigned long long vs, ve, off, ino;
	char perms[8], dev[16], path[256] = "";

	if (sscanf(line, "%llx-%llx %7s %llx %15s %llu %255[^\n]", &vs, &ve, perms, &off, dev,
		   &ino, path) < 6)
		return false;
	*v = (struct vma){ (uintptr_t)vs, (uintptr_t)ve, off, ino,
			   kind_of(perms, ino, path + strspn(path, " ")) };
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
		if (k == AREA_OURS && !live_extent(v.ino)) {
			k = AREA_ANON; /* no MR exports it: replaced like private pages */
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

static void at_fork_child(void);

/* fork() waits for a replacement in progress, and the child gets the list whole */
static void at_fork_prepare(void)
{
	pthread_mutex_lock(&share_lock);
}

static void at_fork_parent(void)
{
	pthread_mutex_unlock(&share_lock);
}

static void init_once(void)
{
	pthread_atfork(at_fork_prepare, at_fork_parent, at_fork_child);
}

struct sv_extent *sv_share_get(void *addr, size_t len)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	size_t pg = (size_t)sysconf(_SC_PAGESIZE), hp;
	uintptr_t a = (uintptr_t)addr, s, e;
	struct sv_extent *x = NULL;
	struct area ar;

	/* a store of another thread during the copy waits in our fault
	 * handler: no replacing once the program has put its own in place */
	if (!sharing_on() || !len || a + len < a || !sv_fault_guard_active())
		return NULL;
	pthread_once(&once, init_once);
	s = a & ~(uintptr_t)(pg - 1);
	e = (a + len + pg - 1) & ~(uintptr_t)(pg - 1);
	pthread_mutex_lock(&share_lock);
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
	pthread_mutex_unlock(&share_lock);
	if (!x)
		sv_dbg("MR pages %#lx+%zu stay private: %s", (unsigned long)s, (size_t)(e - s),
		       ar.kind == AREA_OURS ? "partly in another MR's shared pages"
		       : ar.kind == AREA_HUGE || ar.kind == AREA_ANON
			       ? "they could not be replaced"
			       : "not private anonymous memory");
	return x;
}

void sv_share_put(struct sv_extent *x)
{
	struct sv_extent **p;

	if (!x)
		return;
	pthread_mutex_lock(&share_lock);
	if (--x->refs) {
		pthread_mutex_unlock(&share_lock);
		return;
	}
	for (p = &extents; *p && *p != x; p = &(*p)->next)
		;
	if (*p)
		*p = x->next;
	pthread_mutex_unlock(&share_lock);
	/* the pages stay the application's memory, mapped where they were;
	 * peers see the extent gone from every table before this */
	close(x->fd);
	free(x);
}

/* Private pages with the bytes of [s, s+n), in place of the shared ones. */
static void privatize(uintptr_t s, size_t n)
{
	void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return; /* stays shared with the parent: said in COMPATIBILITY.md */
	page_copy(p, (void *)s, n);
	if (mremap(p, n, n, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)s) == MAP_FAILED)
		munmap(p, n);
}

/*
 * In the child of fork(), one thread: every mapping of an extent (exported
 * or not any more) becomes private again, and the extents are the
 * parent's, not ours.
 */
static void at_fork_child(void)
{
	char line[512];
	FILE *f;

	while (extents) {
		struct sv_extent *x = extents;

		extents = x->next;
		close(x->fd);
		free(x);
	}
	pthread_mutex_init(&share_lock, NULL);
	f = fopen("/proc/self/maps", "re");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		struct vma v;

		if (maps_line(line, &v) && v.kind == AREA_OURS)
			privatize(v.start, v.end - v.start);
	}
	fclose(f);
}
