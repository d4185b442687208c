/* The host-wide QPN registry; see registry.h. */
#include "transport/registry.h"
#include "transport/transport.h"
#include "common/lock_order.h"
#include "common/util.h"
#include "common/proc.h"

#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define REG_MAGIC 0x53565152u /* "SVQR" */
#define REG_VERSION 1u

struct sv_qpn_slot {
	_Atomic uint64_t owner;	 /* pid | context tag << 32; 0: free */
	_Atomic uint64_t start;	 /* the owner's start time (clock ticks after boot) */
	_Atomic uint32_t port;	 /* its endpoint's TCP port; 0 while it is set up */
	_Atomic int32_t xfd;	 /* its export table's descriptor in the owner; -1 or 0: none */
	_Atomic uint64_t xino;	 /* that memfd's inode (engine/mem_export.h) */
	/* 1: it takes RoCEv2 datagrams at port too (sv_qpn_publish_dgram); a
	 * word that was padding, so a process of the version before leaves it
	 * 0 and is sent to at 4791, as before */
	_Atomic uint32_t dgram;
	uint32_t pad[7];
};

struct sv_qpn_file {
	_Atomic uint32_t magic; /* written last by whoever made the file */
	uint32_t version;
	uint32_t pad[14];
	struct sv_qpn_slot slot[SV_QPN_NBLOCKS];
};

_Static_assert(sizeof(struct sv_qpn_slot) == 64, "one cache line per block");

/* Is the slot's owner gone (dead, or its pid now another process)? */
static bool abandoned(const struct sv_qpn_slot *s, uint64_t owner)
{
	pid_t pid = (pid_t)(owner & 0xffffffffu);
	uint64_t st = atomic_load(&s->start), now;

	if (kill(pid, 0) && errno == ESRCH)
		return true;
	now = sv_proc_stat(pid, NULL);
	/* a start time not written yet: the owner is claiming it right now */
	return st && now && now != st;
}

/*
 * The registry of the device at ip, mapped: made if need be and writable
 * (make, a context's own device), or only if it exists and for reading (a
 * peer's address, which may be another host's: no file is made for it).
 */
static struct sv_qpn_file *registry_map_as(const struct in6_addr *ip, bool make)
{
	char path[128];
	struct stat ns, st;
	struct sv_qpn_file *f;
	int fd;

	/* one registry per device and network namespace: an address names an
	 * interface only within its namespace */
	if (stat("/proc/self/ns/net", &ns))
		ns.st_ino = 0;
	if (sv_ip_is_v4(ip)) {
		snprintf(path, sizeof(path), "/dev/shm/softverbs-%u-%lu-%08x.qpn",
			 (unsigned)getuid(), (unsigned long)ns.st_ino,
			 (unsigned)ntohl(sv_ip_v4(ip).s_addr));
	} else {
		/* an interface with IPv6 only: the whole address */
		int n = snprintf(path, sizeof(path), "/dev/shm/softverbs-%u-%lu-",
				 (unsigned)getuid(), (unsigned long)ns.st_ino);

		for (int k = 0; k < 16; k++)
			n += snprintf(path + n, sizeof(path) - (size_t)n, "%02x", ip->s6_addr[k]);
		snprintf(path + n, sizeof(path) - (size_t)n, ".qpn");
	}
	fd = make ? open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600)
		  : open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) || st.st_uid != getuid() || (st.st_mode & 077) ||
	    (st.st_size < (off_t)sizeof(*f) && (!make || ftruncate(fd, sizeof(*f))))) {
		close(fd);
		return NULL;
	}
	f = mmap(NULL, sizeof(*f), make ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (f == MAP_FAILED)
		return NULL;
	if (make && !atomic_load(&f->magic)) {
		uint32_t zero = 0;

		f->version = REG_VERSION; /* a new file is all zeros: every block free */
		atomic_compare_exchange_strong(&f->magic, &zero, REG_MAGIC);
	}
	if (atomic_load(&f->magic) != REG_MAGIC || f->version != REG_VERSION) {
		munmap(f, sizeof(*f));
		return NULL;
	}
	return f;
}

static struct sv_qpn_file *registry_map(const struct in6_addr *ip)
{
	return registry_map_as(ip, true);
}

/*
 * 61000: ports 61001-62022, above Linux's ephemeral range (32768-60999, so
 * a connect() never holds one) and away from the ports RDMA programs listen
 * on by default (perftest and the pingpongs 18515, qperf 19765, rping 7174,
 * ucx_perftest 13337, fi_pingpong 47592).  A program opens its device
 * before it listens: had a block's port been its own, its listen(2) would
 * fail whenever the context drew that block.
 */
#define SV_PORT_BASE_DEFAULT 61000

static long port_base(void)
{
	static long base = -1;

	if (base < 0)
		base = sv_env_long("SOFTVERBS_PORT_BASE", SV_PORT_BASE_DEFAULT);
	return base;
}

uint16_t sv_qpn_block_port(uint32_t block)
{
	long p = port_base() + (long)block;

	return block && block < SV_QPN_NBLOCKS && p > 0 && p <= 65535 ? (uint16_t)p : 0;
}

uint16_t sv_qpn_port(uint32_t qpn)
{
	return sv_qpn_block_port((qpn & 0xffffffu) >> SV_QPN_BLOCK_SHIFT);
}

/* The blocks a context may take, those with a port: [*lo, *hi]; *hi 0:
 * none.  Not block 0 (QPNs 0 and 1), nor the last, whose numbers include
 * 0xffffff (the multicast QPN): any of a block's numbers may be a QP's. */
static void port_blocks(uint32_t *lo, uint32_t *hi)
{
	*lo = *hi = 0;
	for (uint32_t b = 1; b < SV_QPN_NBLOCKS - 1; b++) {
		if (!sv_qpn_block_port(b))
			continue;
		if (!*lo)
			*lo = b;
		*hi = b;
	}
}

/* Take block b if it is free or abandoned. */
static bool take(struct sv_qpn_claim *c, uint32_t b, uint64_t me, uint64_t mystart)
{
	struct sv_qpn_slot *s = &c->map->slot[b];
	uint64_t o = atomic_load(&s->owner);

	if (o && !abandoned(s, o))
		return false;
	if (!atomic_compare_exchange_strong(&s->owner, &o, me))
		return false; /* someone else took it first */
	atomic_store(&s->start, mystart);
	atomic_store(&s->port, 0);
	atomic_store(&s->xino, 0);
	atomic_store(&s->dgram, 0);
	c->block = b;
	c->owner = me;
	return true;
}

int sv_qpn_claim(const struct in6_addr *ip, const struct sv_qpn_skip *skip,
		 struct sv_qpn_claim *c)
{
	static _Atomic uint32_t tags;
	uint64_t me = (uint64_t)(uint32_t)getpid() | (uint64_t)(atomic_fetch_add(&tags, 1) + 1)
							     << 32;
	uint64_t mystart = sv_proc_stat(getpid(), NULL);
	uint32_t lo, hi, n, first;

	memset(c, 0, sizeof(*c));
	port_blocks(&lo, &hi);
	if (!hi)
		return ENOSPC;
	n = hi - lo + 1;
	c->map = registry_map(ip);
	if (!c->map) {
		static atomic_bool said;

		if (!atomic_exchange(&said, true))
			sv_warn("no QPN registry in /dev/shm (%s): QP numbers are chosen at random "
				"and only probably unique on this host", strerror(errno));
		for (int i = 0; i < 64; i++) {
			uint32_t b = lo + sv_random_u32() % n;

			if (!sv_qpn_skipped(skip, b)) {
				c->block = b;
				return 0;
			}
		}
		return ENOSPC;
	}
	/*
	 * A block drawn at random among the free ones, so that the first QP
	 * numbers of a context cannot be guessed (docs/SECURITY.md): random
	 * probes first, which find a free block at once unless most are held,
	 * then every block once from a random one.
	 */
	for (int i = 0; i < 8; i++) {
		uint32_t b = lo + sv_random_u32() % n;

		if (!sv_qpn_skipped(skip, b) && take(c, b, me, mystart))
			return 0;
	}
	first = sv_random_u32() % n;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t b = lo + (first + i) % n;

		if (!sv_qpn_skipped(skip, b) && take(c, b, me, mystart))
			return 0;
	}
	munmap(c->map, sizeof(*c->map));
	c->map = NULL;
	return ENOSPC;
}

/* splitmix64's finaliser */
static uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

void sv_qpn_perm_init(struct sv_qpn_perm *p, uint64_t key)
{
	for (uint32_t i = 0; i < 4; i++)
		for (uint32_t r = 0; r < 128; r++)
			p->f[i][r] = (uint8_t)(mix64(key + 0x9e3779b97f4a7c15ull * (i << 7 | r)) >>
					       57);
}

void sv_qpn_publish(struct sv_qpn_claim *c, uint16_t port)
{
	if (c->map && c->block)
		atomic_store(&c->map->slot[c->block].port, port);
}

void sv_qpn_publish_export(struct sv_qpn_claim *c, int fd, uint64_t ino)
{
	if (c->map && c->block) {
		atomic_store(&c->map->slot[c->block].xfd, fd);
		atomic_store(&c->map->slot[c->block].xino, ino);
	}
}

bool sv_qpn_export_of(const struct in6_addr *ip, uint32_t qpn, pid_t pid, int *fd, uint64_t *ino)
{
	struct sv_qpn_file *f = registry_map(ip);
	uint32_t b = (qpn & 0xffffffu) >> SV_QPN_BLOCK_SHIFT;
	bool ok = false;

	if (!f)
		return false;
	if (b) {
		struct sv_qpn_slot *s = &f->slot[b];

		*ino = atomic_load(&s->xino);
		*fd = atomic_load(&s->xfd);
		/* read the owner last: a claim by another process clears xino first */
		ok = *ino && *fd >= 0 && (pid_t)(atomic_load(&s->owner) & 0xffffffffu) == pid;
	}
	munmap(f, sizeof(*f));
	return ok;
}

/* The block whose port is port; 0 for none. */
static uint32_t port_block(uint16_t port)
{
	long b = (long)port - port_base();

	return b > 0 && b < (long)SV_QPN_NBLOCKS && sv_qpn_block_port((uint32_t)b) == port
		       ? (uint32_t)b
		       : 0;
}

void sv_qpn_publish_dgram(const struct in6_addr *ip, uint16_t port, bool on)
{
	struct sv_qpn_file *f = registry_map(ip);
	uint32_t b = port_block(port);

	if (!f)
		return;
	/* only a block this process holds */
	if (b && (pid_t)(atomic_load(&f->slot[b].owner) & 0xffffffffu) == getpid())
		atomic_store(&f->slot[b].dgram, on ? 1u : 0u);
	munmap(f, sizeof(*f));
}

struct sv_qpn_file *sv_qpn_registry_open(const struct in6_addr *ip)
{
	return registry_map_as(ip, false);
}

void sv_qpn_registry_close(struct sv_qpn_file *f)
{
	if (f)
		munmap(f, sizeof(*f));
}

bool sv_qpn_port_held_here(const struct in6_addr *ip, uint16_t port)
{
	struct sv_qpn_file *f = sv_qpn_registry_open(ip);
	uint32_t b = port_block(port);
	bool held = false;

	if (f && b) {
		struct sv_qpn_slot *s = &f->slot[b];
		uint64_t o = atomic_load(&s->owner);

		/* (a holder that died unseen: its port may be anyone's now) */
		held = o && atomic_load(&s->port) == port && !abandoned(s, o);
	}
	sv_qpn_registry_close(f);
	return held;
}

uint16_t sv_qpn_dgram_port(const struct sv_qpn_file *f, uint32_t qpn)
{
	uint32_t b = (qpn & 0xffffffu) >> SV_QPN_BLOCK_SHIFT;

	if (!f || !b || !atomic_load_explicit(&f->slot[b].dgram, memory_order_relaxed) ||
	    !atomic_load_explicit(&f->slot[b].owner, memory_order_relaxed))
		return 0;
	return sv_qpn_block_port(b);
}

void sv_qpn_release(struct sv_qpn_claim *c)
{
	if (c->map && c->block) {
		struct sv_qpn_slot *s = &c->map->slot[c->block];
		uint64_t me = c->owner;

		atomic_store(&s->xino, 0);
		atomic_store(&s->dgram, 0);
		atomic_store(&s->port, 0);
		atomic_store(&s->start, 0);
		atomic_compare_exchange_strong(&s->owner, &me, 0);
	}
	if (c->map)
		munmap(c->map, sizeof(*c->map));
	memset(c, 0, sizeof(*c));
}

/*
 * The registries this process has looked at for sv_qpn_claimed, mapped for
 * its life (64 KiB each): an entry is filled under the lock and published
 * by the count, then read without it.  A NULL map: that address has no
 * usable registry.
 */
static struct {
	struct in6_addr ip;
	struct sv_qpn_file *_Atomic map;
} claimed_maps[16];
static _Atomic int nclaimed_maps;
static struct sv_mutex claimed_lock = SV_MUTEX_INITIALIZER(SV_LOCK_QPN_CLAIMED);

bool sv_qpn_claimed(const struct in6_addr *ip, uint32_t qpn)
{
	uint32_t b = (qpn & 0xffffffu) >> SV_QPN_BLOCK_SHIFT;
	int n = atomic_load_explicit(&nclaimed_maps, memory_order_acquire), k;
	struct sv_qpn_file *f;

	for (k = 0; k < n; k++)
		if (sv_ip_eq(&claimed_maps[k].ip, ip))
			break;
	if (k == n) {
		sv_mutex_lock(&claimed_lock);
		n = atomic_load(&nclaimed_maps);
		for (k = 0; k < n; k++)
			if (sv_ip_eq(&claimed_maps[k].ip, ip))
				break;
		if (k == n && n < (int)SV_ARRAY_SIZE(claimed_maps)) {
			claimed_maps[k].ip = *ip;
			atomic_store(&claimed_maps[k].map, registry_map(ip));
			atomic_store_explicit(&nclaimed_maps, n + 1, memory_order_release);
		}
		sv_mutex_unlock(&claimed_lock);
		if (k == n)
			return true; /* more addresses than kept: cannot tell */
	}
	f = atomic_load_explicit(&claimed_maps[k].map, memory_order_acquire);
	/* no registry: a block chosen at random may be anyone's */
	return !f || atomic_load_explicit(&f->slot[b].owner, memory_order_relaxed) != 0;
}
