/*
 * libsoftverbs-fsview.so: shows softverbs' devices where middleware looks
 * for RDMA devices in the file system, with no root and no change to the
 * host.
 *
 * `softverbs run` preloads it (LD_PRELOAD, so every child the program starts
 * has it too: mpirun's daemons, the ranks they start).  It interposes the C
 * library's path-taking calls, and a path under
 *
 *   /sys/class/infiniband, /sys/class/infiniband_verbs, /dev/infiniband,
 *   /sys/devices/virtual/infiniband (where the class entries link to)
 *
 * is redirected into the view that softverbs' libibverbs writes for the
 * devices this process sees (softverbs_fs_view(), src/verbs/sysfs.c).  Every
 * other path goes to the C library untouched, after a few byte comparisons.
 *
 * The counters files of a device's port (ports/1/counters, hw_counters)
 * are the exception to a view that never changes: opening one gives a new
 * file with the counter's value at that moment (counter_open).  The type
 * and netdev files of an empty GID entry read as the kernel's do: EINVAL
 * (gid_attr_open).
 *
 * What is covered: open/openat (and their 64-bit and fortified forms),
 * fopen/freopen, stat/lstat/fstatat/statx (and the __xstat forms older
 * binaries call), access/faccessat/euidaccess, opendir/scandir,
 * readlink/readlinkat, realpath/canonicalize_file_name, chdir.  Paths
 * relative to a directory descriptor are resolved when they name one of
 * these trees (hwloc opens "/" and reads "sys/class/infiniband" from there).
 * Not covered: programs that make system calls themselves (statically
 * linked or Go programs), and paths that reach these trees through "..".
 *
 * The view is found on first use, by asking libibverbs.so.1 from this
 * library's own directory; if that fails the paths go through unchanged.
 */
#include <dlfcn.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "stats/reader.h"

#define SV_EXPORT __attribute__((visibility("default")))

static const struct {
	const char *path;
	size_t len;
} trees[] = {
	{ "/sys/class/infiniband", sizeof("/sys/class/infiniband") - 1 },
	{ "/sys/class/infiniband_verbs", sizeof("/sys/class/infiniband_verbs") - 1 },
	{ "/sys/devices/virtual/infiniband", sizeof("/sys/devices/virtual/infiniband") - 1 },
	{ "/dev/infiniband", sizeof("/dev/infiniband") - 1 },
};

static pthread_once_t root_once = PTHREAD_ONCE_INIT;
static char root[PATH_MAX];
static size_t root_len;

/* The C library's own function behind each interposed name. */
static void *next_fn(void *_Atomic *slot, const char *name)
{
	void *f = atomic_load_explicit(slot, memory_order_acquire);

	if (!f) {
		f = dlsym(RTLD_NEXT, name);
		atomic_store_explicit(slot, f, memory_order_release);
	}
	return f;
}

#define NEXT(type, name)                                  \
	({                                                \
		static void *_Atomic slot_;               \
		(type)next_fn(&slot_, #name);             \
	})

static void find_root(void)
{
	const char *(*view)(void) = (const char *(*)(void))dlsym(RTLD_DEFAULT, "softverbs_fs_view");
	Dl_info self;

	if (!view && dladdr((void *)find_root, &self) && self.dli_fname) {
		char lib[PATH_MAX];
		const char *slash = strrchr(self.dli_fname, '/');
		void *h;

		if (slash && (size_t)snprintf(lib, sizeof(lib), "%.*s/libibverbs.so.1",
					      (int)(slash - self.dli_fname),
					      self.dli_fname) < sizeof(lib)) {
			h = dlopen(lib, RTLD_NOW | RTLD_LOCAL); /* kept for the life of the process */
			if (h)
				view = (const char *(*)(void))dlsym(h, "softverbs_fs_view");
		}
	}
	const char *r = view ? view() : NULL;

	if (r && strlen(r) < sizeof(root)) {
		strcpy(root, r);
		root_len = strlen(r);
	}
}

static bool in_trees(const char *path)
{
	if (!path || path[0] != '/' || (path[1] != 's' && path[1] != 'd'))
		return false;
	for (size_t i = 0; i < sizeof(trees) / sizeof(trees[0]); i++)
		if (!strncmp(path, trees[i].path, trees[i].len) &&
		    (path[trees[i].len] == '\0' || path[trees[i].len] == '/'))
			return true;
	return false;
}

/*
 * The path to use for `path`: itself, or its place in the view (written
 * into buf).  Errors keep the original path: the caller then sees what the
 * host has there.
 */
static const char *map(const char *path, char *buf)
{
	if (!in_trees(path))
		return path;
	pthread_once(&root_once, find_root);
	if (!root_len || (size_t)snprintf(buf, PATH_MAX, "%s%s", root, path) >= PATH_MAX)
		return path;
	return buf;
}

/* A path relative to a directory descriptor, mapped if it lands in the trees. */
static const char *map_at(int dirfd, const char *path, char *buf)
{
	char dir[PATH_MAX], link[64], abs[PATH_MAX];
	ssize_t n;

	if (!path || path[0] == '/' || dirfd == AT_FDCWD)
		return map(path, buf);
	if (!strstr(path, "infiniband"))
		return path;
	snprintf(link, sizeof(link), "/proc/self/fd/%d", dirfd);
	n = NEXT(ssize_t(*)(const char *, char *, size_t), readlink)(link, dir, sizeof(dir) - 1);
	if (n <= 0)
		return path;
	dir[n] = '\0';
	if ((size_t)snprintf(abs, sizeof(abs), "%s/%s", strcmp(dir, "/") ? dir : "", path) >=
	    sizeof(abs))
		return path;
	if (!in_trees(abs))
		return path;
	const char *m = map(abs, buf);

	return m == abs ? path : m;
}

/* A path the C library produced inside the view, shown as the host path it stands for. */
static char *unmap_result(char *res)
{
	if (res && root_len && !strncmp(res, root, root_len) && res[root_len] == '/' &&
	    in_trees(res + root_len))
		memmove(res, res + root_len, strlen(res + root_len) + 1);
	return res;
}

/*
 * ports/1/gid_attrs/types/N or ndevs/N of an empty GID entry, which the view
 * holds empty (src/verbs/sysfs.c): the kernel's file opens, and each read
 * fails with EINVAL.  An epoll descriptor does just that (it has no read),
 * so the open gets one in place of the empty file.  A filled entry's file
 * is opened as it is.
 */
static int gid_attr_open(const char *vpath, int flags)
{
	int fd = NEXT(int (*)(int, const char *, int, ...), openat)(AT_FDCWD, vpath, flags, 0);
	struct stat st;

	if (fd < 0 || fstat(fd, &st) || st.st_size > 0)
		return fd;
	close(fd);
	return epoll_create1((flags & O_CLOEXEC) ? EPOLL_CLOEXEC : 0);
}

/*
 * A device's ports/1/counters/NAME or ports/1/hw_counters/NAME.  The view is
 * shared and never changes, so it holds these files empty; an open for
 * reading gets a new file holding the value now: the device's counter summed
 * over every live context of it (this user's, on this host) from their
 * counters segments (src/stats), as `softverbs stat` shows it on its
 * "device" line.  vpath is the path in the view.  Returns the descriptor, -1
 * with errno, or -2 when vpath is no counters file (or is opened to write,
 * which the view's read-only file refuses).  The GID attribute files of the
 * same directory are answered here too (gid_attr_open).
 */
static int counter_open(const char *vpath, int flags)
{
	static const char *const dirs[] = { "/sys/class/infiniband/",
					    "/sys/devices/virtual/infiniband/" };
	const char *p, *slash, *group;
	char dev[65];
	struct sv_stat_ctx_view sum;
	int idx, fd;

	if (!root_len || strncmp(vpath, root, root_len) || (flags & O_ACCMODE) != O_RDONLY)
		return -2;
	p = vpath + root_len;
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		size_t n = strlen(dirs[i]);

		if (!strncmp(p, dirs[i], n)) {
			p += n;
			break;
		}
	}
	slash = strchr(p, '/');
	if (p == vpath + root_len || !slash || (size_t)(slash - p) >= sizeof(dev) ||
	    strncmp(slash, "/ports/1/", 9))
		return -2;
	memcpy(dev, p, (size_t)(slash - p));
	dev[slash - p] = '\0';
	group = slash + 9;
	if (!strncmp(group, "gid_attrs/types/", 16) || !strncmp(group, "gid_attrs/ndevs/", 16))
		return gid_attr_open(vpath, flags);
	if (!strncmp(group, "counters/", 9))
		idx = sv_stat_sysfs_find("counters", group + 9);
	else if (!strncmp(group, "hw_counters/", 12))
		idx = sv_stat_sysfs_find("hw_counters", group + 12);
	else
		return -2;
	if (idx < 0)
		return -2;
	if (sv_stat_device_sum(dev, &sum) < 0)
		return -1;
	fd = memfd_create("softverbs-counter", (flags & O_CLOEXEC) ? MFD_CLOEXEC : 0);
	if (fd < 0)
		return -1;
	if (dprintf(fd, "%llu\n", (unsigned long long)sv_stat_sysfs_value((size_t)idx, &sum)) < 0 ||
	    lseek(fd, 0, SEEK_SET)) {
		int err = errno;

		close(fd);
		errno = err;
		return -1;
	}
	return fd;
}

/* fopen's mode string as open flags, as far as counter_open cares */
static int fopen_flags(const char *mode)
{
	return mode[0] == 'r' && !strchr(mode, '+') ? O_RDONLY | (strchr(mode, 'e') ? O_CLOEXEC : 0)
						     : O_RDWR;
}

static mode_t open_mode(int flags, va_list ap)
{
	return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? (mode_t)va_arg(ap, int) : 0;
}

/* ---- open ---- */

/*
 * Every open form ends here: open(path) is openat(AT_FDCWD, path), and on
 * 64-bit Linux the *64 forms are the same calls.
 */
static int open_at(int dirfd, const char *path, int flags, mode_t mode)
{
	char buf[PATH_MAX];
	const char *m = map_at(dirfd, path, buf);
	int fd = counter_open(m, flags);

	if (fd != -2)
		return fd;
	return NEXT(int (*)(int, const char *, int, ...), openat)(dirfd, m, flags, mode);
}

/* open() is openat(AT_FDCWD, ...): one body for the four of them */
#define DEF_OPEN(name, params, dirfd)                                \
	SV_EXPORT int name params                                    \
	{                                                            \
		va_list ap;                                          \
		mode_t mode;                                         \
                                                                     \
		va_start(ap, flags);                                 \
		mode = open_mode(flags, ap);                         \
		va_end(ap);                                          \
		return open_at(dirfd, path, flags, mode);            \
	}
DEF_OPEN(open, (const char *path, int flags, ...), AT_FDCWD)
DEF_OPEN(open64, (const char *path, int flags, ...), AT_FDCWD)
DEF_OPEN(openat, (int dirfd, const char *path, int flags, ...), dirfd)
DEF_OPEN(openat64, (int dirfd, const char *path, int flags, ...), dirfd)

/* _FORTIFY_SOURCE builds call these for open() without a mode */
#define DEF_OPEN_2(name)                                                             \
	int name(const char *path, int flags);                                       \
	SV_EXPORT int name(const char *path, int flags)                              \
	{                                                                            \
		char buf[PATH_MAX];                                                  \
		const char *m = map(path, buf);                                      \
		int fd = counter_open(m, flags);                                     \
                                                                                     \
		if (fd != -2)                                                        \
			return fd;                                                   \
		return NEXT(int (*)(const char *, int), name)(m, flags);             \
	}
DEF_OPEN_2(__open_2)
DEF_OPEN_2(__open64_2)

#define DEF_OPENAT_2(name)                                                                 \
	int name(int dirfd, const char *path, int flags);                                  \
	SV_EXPORT int name(int dirfd, const char *path, int flags)                         \
	{                                                                                  \
		char buf[PATH_MAX];                                                        \
		const char *m = map_at(dirfd, path, buf);                                  \
		int fd = counter_open(m, flags);                                           \
                                                                                           \
		if (fd != -2)                                                              \
			return fd;                                                         \
		return NEXT(int (*)(int, const char *, int), name)(dirfd, m, flags);       \
	}
DEF_OPENAT_2(__openat_2)
DEF_OPENAT_2(__openat64_2)

#define DEF_FOPEN(name)                                                                   \
	SV_EXPORT FILE *name(const char *path, const char *mode)                          \
	{                                                                                 \
		char buf[PATH_MAX];                                                       \
		const char *m = map(path, buf);                                           \
		int fd = counter_open(m, fopen_flags(mode));                              \
		FILE *f;                                                                  \
                                                                                          \
		if (fd == -2)                                                             \
			return NEXT(FILE * (*)(const char *, const char *), name)(m, mode); \
		if (fd < 0 || !(f = fdopen(fd, mode))) {                                  \
			if (fd >= 0)                                                      \
				close(fd);                                                \
			return NULL;                                                      \
		}                                                                         \
		return f;                                                                 \
	}
DEF_FOPEN(fopen)
DEF_FOPEN(fopen64)

#define DEF_FREOPEN(name)                                                                  \
	SV_EXPORT FILE *name(const char *path, const char *mode, FILE *f)                  \
	{                                                                                  \
		char buf[PATH_MAX];                                                        \
                                                                                           \
		return NEXT(FILE * (*)(const char *, const char *, FILE *), name)(         \
			path ? map(path, buf) : NULL, mode, f);                            \
	}
DEF_FREOPEN(freopen)
DEF_FREOPEN(freopen64)

/* ---- stat ---- */

#define DEF_STAT(name, st_type)                                                              \
	SV_EXPORT int name(const char *path, struct st_type *st)                             \
	{                                                                                    \
		char buf[PATH_MAX];                                                          \
                                                                                             \
		return NEXT(int (*)(const char *, struct st_type *), name)(map(path, buf), st); \
	}
DEF_STAT(stat, stat)
DEF_STAT(stat64, stat64)
DEF_STAT(lstat, stat)
DEF_STAT(lstat64, stat64)

#define DEF_FSTATAT(name, st_type)                                                        \
	SV_EXPORT int name(int dirfd, const char *path, struct st_type *st, int flags)    \
	{                                                                                 \
		char buf[PATH_MAX];                                                       \
                                                                                          \
		return NEXT(int (*)(int, const char *, struct st_type *, int), name)(     \
			dirfd, map_at(dirfd, path, buf), st, flags);                      \
	}
DEF_FSTATAT(fstatat, stat)
DEF_FSTATAT(fstatat64, stat64)

SV_EXPORT int statx(int dirfd, const char *path, int flags, unsigned int mask, struct statx *stx)
{
	char buf[PATH_MAX];

	return NEXT(int (*)(int, const char *, int, unsigned int, struct statx *), statx)(
		dirfd, map_at(dirfd, path, buf), flags, mask, stx);
}

/*
 * Binaries built against a C library before 2.33 call stat() as __xstat()
 * and friends, which remain only as compatibility versions: found with
 * dlvsym under the version of this architecture's first glibc.
 */
static void *next_compat(void *_Atomic *slot, const char *name)
{
	static const char *const versions[] = { "GLIBC_2.2.5", "GLIBC_2.17", "GLIBC_2.0",
						"GLIBC_2.2", "GLIBC_2.27" };
	void *f = atomic_load_explicit(slot, memory_order_acquire);

	for (size_t i = 0; !f && i < sizeof(versions) / sizeof(versions[0]); i++)
		f = dlvsym(RTLD_NEXT, name, versions[i]);
	if (f)
		atomic_store_explicit(slot, f, memory_order_release);
	return f;
}

#define DEF_XSTAT(name, st_type)                                                         \
	int name(int ver, const char *path, struct st_type *st);                          \
	SV_EXPORT int name(int ver, const char *path, struct st_type *st)                 \
	{                                                                                \
		static void *_Atomic slot;                                               \
		char buf[PATH_MAX];                                                      \
		int (*f)(int, const char *, struct st_type *) =                          \
			(int (*)(int, const char *, struct st_type *))next_compat(&slot, #name); \
                                                                                         \
		if (!f) {                                                                \
			errno = ENOSYS;                                                  \
			return -1;                                                       \
		}                                                                        \
		return f(ver, map(path, buf), st);                                       \
	}
DEF_XSTAT(__xstat, stat)
DEF_XSTAT(__xstat64, stat64)
DEF_XSTAT(__lxstat, stat)
DEF_XSTAT(__lxstat64, stat64)

#define DEF_FXSTATAT(name, st_type)                                                          \
	int name(int ver, int dirfd, const char *path, struct st_type *st, int flags);        \
	SV_EXPORT int name(int ver, int dirfd, const char *path, struct st_type *st, int flags) \
	{                                                                                    \
		static void *_Atomic slot;                                                   \
		char buf[PATH_MAX];                                                          \
		int (*f)(int, int, const char *, struct st_type *, int) =                    \
			(int (*)(int, int, const char *, struct st_type *, int))next_compat( \
				&slot, #name);                                               \
                                                                                             \
		if (!f) {                                                                    \
			errno = ENOSYS;                                                      \
			return -1;                                                           \
		}                                                                            \
		return f(ver, dirfd, map_at(dirfd, path, buf), st, flags);                   \
	}
DEF_FXSTATAT(__fxstatat, stat)
DEF_FXSTATAT(__fxstatat64, stat64)

/* ---- access ---- */

#define DEF_ACCESS(name)                                                             \
	SV_EXPORT int name(const char *path, int mode)                               \
	{                                                                            \
		char buf[PATH_MAX];                                                  \
                                                                                     \
		return NEXT(int (*)(const char *, int), name)(map(path, buf), mode); \
	}
DEF_ACCESS(access)
DEF_ACCESS(euidaccess)
DEF_ACCESS(eaccess)

SV_EXPORT int faccessat(int dirfd, const char *path, int mode, int flags)
{
	char buf[PATH_MAX];

	return NEXT(int (*)(int, const char *, int, int), faccessat)(
		dirfd, map_at(dirfd, path, buf), mode, flags);
}

/* ---- directories ---- */

SV_EXPORT DIR *opendir(const char *path)
{
	char buf[PATH_MAX];

	return NEXT(DIR * (*)(const char *), opendir)(map(path, buf));
}

typedef int (*dirent_filter)(const struct dirent *);
typedef int (*dirent_compar)(const struct dirent **, const struct dirent **);
typedef int (*dirent64_filter)(const struct dirent64 *);
typedef int (*dirent64_compar)(const struct dirent64 **, const struct dirent64 **);

SV_EXPORT int scandir(const char *path, struct dirent ***list, dirent_filter filter,
		      dirent_compar compar)
{
	char buf[PATH_MAX];

	return NEXT(int (*)(const char *, struct dirent ***, dirent_filter, dirent_compar),
		    scandir)(map(path, buf), list, filter, compar);
}

SV_EXPORT int scandir64(const char *path, struct dirent64 ***list, dirent64_filter filter,
			dirent64_compar compar)
{
	char buf[PATH_MAX];

	return NEXT(int (*)(const char *, struct dirent64 ***, dirent64_filter, dirent64_compar),
		    scandir64)(map(path, buf), list, filter, compar);
}

SV_EXPORT int chdir(const char *path)
{
	char buf[PATH_MAX];

	return NEXT(int (*)(const char *), chdir)(map(path, buf));
}

/* ---- links and canonical names ---- */

SV_EXPORT ssize_t readlink(const char *path, char *out, size_t len)
{
	char buf[PATH_MAX];

	return NEXT(ssize_t(*)(const char *, char *, size_t), readlink)(map(path, buf), out, len);
}

SV_EXPORT ssize_t readlinkat(int dirfd, const char *path, char *out, size_t len)
{
	char buf[PATH_MAX];

	return NEXT(ssize_t(*)(int, const char *, char *, size_t), readlinkat)(
		dirfd, map_at(dirfd, path, buf), out, len);
}

SV_EXPORT char *realpath(const char *path, char *resolved)
{
	char buf[PATH_MAX];

	return unmap_result(NEXT(char *(*)(const char *, char *), realpath)(map(path, buf),
									      resolved));
}

/* _FORTIFY_SOURCE builds call realpath() as this (UCX, libfabric, Open MPI do) */
char *__realpath_chk(const char *path, char *resolved, size_t resolved_len);

SV_EXPORT char *__realpath_chk(const char *path, char *resolved, size_t resolved_len)
{
	char buf[PATH_MAX];

	return unmap_result(NEXT(char *(*)(const char *, char *, size_t), __realpath_chk)(
		map(path, buf), resolved, resolved_len));
}

SV_EXPORT char *canonicalize_file_name(const char *path)
{
	char buf[PATH_MAX];

	return unmap_result(
		NEXT(char *(*)(const char *), canonicalize_file_name)(map(path, buf)));
}

/* ---- extended attributes (ls -l asks for ACLs and security labels) ---- */

#define DEF_GETXATTR(name)                                                                \
	SV_EXPORT ssize_t name(const char *path, const char *attr, void *value, size_t size) \
	{                                                                                 \
		char buf[PATH_MAX];                                                       \
                                                                                          \
		return NEXT(ssize_t(*)(const char *, const char *, void *, size_t), name)( \
			map(path, buf), attr, value, size);                               \
	}
DEF_GETXATTR(getxattr)
DEF_GETXATTR(lgetxattr)

#define DEF_LISTXATTR(name)                                                                 \
	SV_EXPORT ssize_t name(const char *path, char *list, size_t size)                   \
	{                                                                                   \
		char buf[PATH_MAX];                                                         \
                                                                                            \
		return NEXT(ssize_t(*)(const char *, char *, size_t), name)(map(path, buf), \
									     list, size);   \
	}
DEF_LISTXATTR(listxattr)
DEF_LISTXATTR(llistxattr)
