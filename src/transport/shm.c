/*
 * The shm transport: two processes (or two contexts) on one host, in one
 * network namespace.
 *
 * Setup.  Every engine also listens on an abstract unix socket named after
 * its tcp endpoint ("softverbs-shm/IP:PORT").  Abstract names live in the
 * network namespace and have no file, so reaching one proves the peer is on
 * this host and in this namespace, and a killed process leaves nothing
 * behind.  The connecting side creates a memfd (mode 0600, never named in
 * any file system), maps it, and passes it over the socket (SCM_RIGHTS).
 * Only peers of the same uid are accepted (SO_PEERCRED).
 *
 * Data.  The memfd holds one single-producer/single-consumer ring per
 * direction.  The ring carries the same byte stream as a tcp connection
 * (frames back to back), cut into records:
 *
 *   inline   u64 {len, 0}         + len bytes (padded to 8)
 *   indirect u64 {len, INDIRECT}  + u64 address in the producer's memory
 *
 * An indirect record is a payload the consumer copies itself, straight from
 * the producer's memory into its own (process_vm_readv): one copy between
 * the two address spaces, with the sender's SGL as the remote vectors and the
 * receiver's (the target range of a WRITE, in stream.c's direct receive) as
 * the local ones.  The producer only emits them for payloads that stay valid
 * until the peer has acknowledged them (RC requests: the WQE is only retired
 * by the ACK that follows the read), and only once the consumer has shown
 * that it may read the producer's memory at all (Yama ptrace scope or a
 * seccomp filter may forbid it): otherwise every byte travels inline.
 *
 * No system call on the fast path.  The socket stays only as a doorbell and
 * a liveness signal: a consumer about to sleep sets `bell` in its ring, and a
 * producer that finds it set clears it and writes one byte to the socket.  A
 * consumer that polls (the engine thread while busy, or an application
 * thread in ibv_poll_cq) never sets it, so a busy pair exchanges messages
 * through memory alone.  A producer that finds the ring full sets `room`, and
 * the consumer rings back once it has made space.  The death of the peer
 * closes the socket, which the engine sees as end of stream once the ring is
 * drained.
 */

#include "transport/stream.h"
#include "common/fault_guard.h"

#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

/* This file's transport (select.c names it). */
extern const struct sv_transport_ops sv_shm_ops;

#define SHM_MAGIC 0x5356534du /* "SVSM" */
/* 2: the memory comes sealed at its size; 3: bell and cma_ok on a line of
 * their own */
#define SHM_VERSION 3u
/* Bytes of ring per direction (a power of two). */
#define SHM_RING_BYTES (2u << 20)
/* Payload pieces at least this big travel indirect, when allowed: whole
 * 4 KiB packets, which come in trains that one process_vm_readv takes
 * together; a lone smaller piece is cheaper to copy through the ring than a
 * system call on the receiving side. */
#define SHM_INDIRECT_MIN 4096u
#define REC_INDIRECT (1ull << 63)
/* Pieces one process_vm_readv takes. */
#define SHM_CMA_BATCH 64

/*
 * One direction.  Producer and consumer fields on separate cache lines, and
 * what the producer reads on every write (bell, cma_ok: written seldom) apart
 * from head, which the consumer writes on every read: the producer reads
 * head only when the room it knew of is used up, so the consumer's store
 * finds the line its own rather than in the producer's cache.
 */
struct shm_ring {
	_Alignas(64) _Atomic uint64_t tail;     /* producer: ring bytes published */
	_Atomic uint64_t tail_logical;          /* producer: stream bytes published */
	_Atomic uint32_t room;                  /* producer waits for space: ring back */
	_Alignas(64) _Atomic uint64_t head;     /* consumer: ring bytes released */
	_Atomic uint64_t head_logical;
	_Alignas(64) _Atomic uint32_t bell;     /* consumer sleeps: ring the doorbell */
	_Atomic uint32_t cma_ok;                /* consumer may read the producer's memory */
};

struct shm_area {
	uint32_t magic, version;
	uint64_t ring_bytes;
	_Atomic uint64_t base[2]; /* where each side mapped the area (CMA self-test) */
	_Alignas(64) struct shm_ring ring[2]; /* [0]: connector -> acceptor */
};

#define SHM_DATA_OFF(i) (4096u + (size_t)(i) * SHM_RING_BYTES)
#define SHM_MAP_LEN (4096u + 2u * SHM_RING_BYTES)
_Static_assert(sizeof(struct shm_area) <= 4096, "area header fits its page");
/* where tests/transport/shm_connector.c, which plays a connector, finds them */
_Static_assert(offsetof(struct shm_area, ring[1].head) == 320 &&
		       offsetof(struct shm_area, ring[1].bell) == 384,
	       "the ring layout of SHM_VERSION 3");

/* What the connector sends with the memfd. */
struct shm_setup {
	uint32_t magic, version;
	uint64_t map_len;
};

struct sv_shm {
	struct shm_area *area;
	int side; /* 0: connector, 1: acceptor */
	pid_t peer_pid;
	struct shm_ring *tx, *rx;
	uint8_t *txdata, *rxdata;
	/* consumer state (the thread holding the engine's progress_lock) */
	uint64_t rpos;     /* next ring byte to read */
	uint64_t rec_left; /* stream bytes left in the current record */
	uint64_t rec_addr; /* indirect: where they are in the producer */
	uint64_t rx_logical; /* stream bytes taken (our copy of rx->head_logical) */
	/* producer state (under the connection's tx_lock).  The ring's own
	 * counters are in memory the peer can write: ours are kept here and
	 * only published there; the peer's are checked on every read */
	_Atomic uint64_t wpos; /* ring bytes published (our copy of tx->tail) */
	uint64_t tx_head;      /* tx->head when last read (checked then) */
	uint64_t tx_logical;
	bool rec_indirect;
	bool eof;          /* the socket ended: the peer is gone */
	bool cma_tested;
	/* the rings are mapped; until then (an accepted peer whose setup has
	 * not come yet) nothing looks at them.  Set once, with release order */
	atomic_bool ready;
};

static inline struct sv_shm *to_shm(struct sv_conn *c)
{
	return c->tp;
}

/* Listen on the abstract unix name of the endpoint's tcp address and port:
 * only peers on this host and in this network namespace can reach it. */
static int shm_accept(int lfd, struct sv_conn *c);

static int shm_iface(const struct sv_iface_at *at, void **iface, bool *host_held)
{
	(void)host_held;
	return sv_iface_stream(at, sv_endpoint_unix_listen("shm", &at->ip, at->port), &sv_shm_ops,
			       shm_accept, iface);
}

static bool peer_is_us(int fd, pid_t *pid)
{
	struct ucred cr;
	socklen_t l = sizeof(cr);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &l) || cr.uid != getuid())
		return false;
	*pid = cr.pid;
	return true;
}

static void shm_attach(struct sv_shm *s, void *map, int side, pid_t peer)
{
	s->area = map;
	s->side = side;
	s->peer_pid = peer;
	s->tx = &s->area->ring[side];
	s->rx = &s->area->ring[1 - side];
	s->txdata = (uint8_t *)map + SHM_DATA_OFF(side);
	s->rxdata = (uint8_t *)map + SHM_DATA_OFF(1 - side);
	/* a child forked later must not share the rings */
	madvise(map, SHM_MAP_LEN, MADV_DONTFORK);
	atomic_store_explicit(&s->area->base[side], (uint64_t)(uintptr_t)map, memory_order_release);
	atomic_store_explicit(&s->ready, true, memory_order_release);
}

static inline bool shm_ready(const struct sv_shm *s)
{
	return s && atomic_load_explicit(&s->ready, memory_order_acquire);
}

static bool cma_allowed(void)
{
	static _Atomic int allowed = -1;

	return sv_env_switch(&allowed, "SOFTVERBS_SHM_CMA", true);
}

/*
 * Consumer: can we read the producer's memory?  Read the area's magic
 * through the producer's own mapping and compare.  EPERM (Yama, seccomp,
 * another uid) or ENOSYS leave cma_ok clear: the producer keeps everything
 * inline.
 */
static void cma_test(struct sv_shm *s)
{
	uint64_t peer_base = atomic_load_explicit(&s->area->base[1 - s->side], memory_order_acquire);
	uint32_t got = 0;
	struct iovec l = { &got, sizeof(got) }, r = { (void *)(uintptr_t)peer_base, sizeof(got) };

	if (!peer_base)
		return; /* not mapped over there yet: test again later */
	s->cma_tested = true;
	if (!cma_allowed())
		return;
	if (process_vm_readv(s->peer_pid, &l, 1, &r, 1, 0) == (ssize_t)sizeof(got) &&
	    got == SHM_MAGIC) {
		atomic_store_explicit(&s->rx->cma_ok, 1, memory_order_release);
		sv_dbg("shm: single-copy reads from pid %d allowed", (int)s->peer_pid);
	} else {
		sv_dbg("shm: cannot read pid %d's memory (%s): payloads inline", (int)s->peer_pid,
		       strerror(errno));
	}
}

/* Is the memfd a peer sent sealed against shrinking and growing, at our size? */
static bool sealed_at_size(int mfd)
{
	int seals = fcntl(mfd, F_GET_SEALS);
	struct stat st;

	return seals >= 0 && (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) == (F_SEAL_SHRINK | F_SEAL_GROW) &&
	       !fstat(mfd, &st) && (uint64_t)st.st_size == SHM_MAP_LEN;
}

/*
 * The connector's setup message (its memfd), on an accepted socket: 0 and
 * the rings mapped; -EAGAIN: not here yet; another error: refused.
 */
static int shm_take_setup(struct sv_conn *c)
{
	struct sv_shm *s = to_shm(c);
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct shm_setup su;
	struct iovec iov = { &su, sizeof(su) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			     .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *cm;
	int mfd = -1;
	ssize_t n;
	void *map;

	n = recvmsg(c->fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return -EAGAIN;
	cm = CMSG_FIRSTHDR(&mh);
	if (cm && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS)
		memcpy(&mfd, CMSG_DATA(cm), sizeof(int));
	if (n != (ssize_t)sizeof(su) || su.magic != SHM_MAGIC || su.version != SHM_VERSION ||
	    su.map_len != SHM_MAP_LEN || mfd < 0 || (mh.msg_flags & MSG_CTRUNC))
		goto bad;
	/* sealed at its size: nobody (the peer included) can shrink it under
	 * our mapping, so no access to the rings can raise SIGBUS */
	if (!sealed_at_size(mfd)) {
		sv_warn_limited("shm: a peer's memory is not sealed at its size; refused");
		goto bad;
	}
	map = mmap(NULL, SHM_MAP_LEN, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
	close(mfd);
	if (map == MAP_FAILED)
		return -ECONNREFUSED;
	if (((struct shm_area *)map)->magic != SHM_MAGIC) {
		munmap(map, SHM_MAP_LEN);
		return -ECONNREFUSED;
	}
	shm_attach(s, map, 1, c->peer_pid);
	cma_test(s);
	return 0;
bad:
	if (mfd >= 0)
		close(mfd);
	return -ECONNREFUSED;
}

/*
 * Accept one peer.  Its setup normally came with its connect; one that has
 * not (a process that connects and stays silent) does not hold up the
 * engine: the connection waits for it like any other input (shm_poll_in),
 * and the handshake deadline ends it if it never comes.
 */
static int shm_accept(int lfd, struct sv_conn *c)
{
	struct sv_shm *s;
	pid_t pid;
	int fd, err;

	fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd < 0)
		return sv_accept_error(errno);
	if (!peer_is_us(fd, &pid) || !(s = calloc(1, sizeof(*s)))) {
		close(fd);
		return -ECONNREFUSED;
	}
	c->tp = s;
	c->fd = fd;
	c->peer_pid = pid;
	err = shm_take_setup(c);
	if (err && err != -EAGAIN) {
		c->tp = NULL;
		c->fd = -1;
		free(s);
		close(fd);
		return err;
	}
	return 0;
}

static int shm_connect(struct sv_conn *c)
{
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct shm_setup su = { SHM_MAGIC, SHM_VERSION, SHM_MAP_LEN };
	struct iovec iov = { &su, sizeof(su) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			     .msg_controllen = sizeof(cbuf) };
	struct sockaddr_un sa;
	struct shm_area *a;
	struct cmsghdr *cm;
	socklen_t sl;
	pid_t pid;
	int fd, mfd = -1, err;
	void *map = MAP_FAILED;

	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	sv_endpoint_unix_name(&sa, &sl, "shm", &c->peer.ip, c->peer.port);
	/* a unix connect to a listener completes at once (or fails: no such
	 * endpoint here, or its backlog is full) */
	if (connect(fd, (struct sockaddr *)&sa, sl) || !peer_is_us(fd, &pid)) {
		err = errno ? -errno : -EPERM;
		goto fail;
	}
	mfd = memfd_create("softverbs-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (mfd < 0 || fchmod(mfd, 0600) || ftruncate(mfd, SHM_MAP_LEN) ||
	    fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) {
		err = -errno;
		goto fail;
	}
	map = mmap(NULL, SHM_MAP_LEN, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
	if (map == MAP_FAILED) {
		err = -errno;
		goto fail;
	}
	a = map;
	a->magic = SHM_MAGIC;
	a->version = SHM_VERSION;
	a->ring_bytes = SHM_RING_BYTES;
	/* both sides start asleep: the first frame each way rings */
	a->ring[0].bell = a->ring[1].bell = 1;
	memset(cbuf, 0, sizeof(cbuf));
	cm = CMSG_FIRSTHDR(&mh);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &mfd, sizeof(int));
	if (sendmsg(fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)sizeof(su)) {
		err = errno ? -errno : -EIO;
		goto fail;
	}
	close(mfd);
	mfd = -1;
	c->tp = calloc(1, sizeof(struct sv_shm));
	if (!c->tp) {
		err = -ENOMEM;
		goto fail;
	}
	shm_attach(c->tp, map, 0, pid);
	c->fd = fd;
	c->peer_pid = pid;
	atomic_store(&c->state, SV_CONN_UP); /* nothing left to wait for */
	return 0;
fail:
	if (map != MAP_FAILED)
		munmap(map, SHM_MAP_LEN);
	if (mfd >= 0)
		close(mfd);
	close(fd);
	return err;
}

/* The consumer of the ring we write armed its bell, and this takes it (the
 * one ring that follows is ours): seq_cst, as the consumer's arming. */
static bool take_bell(struct sv_shm *s)
{
	return atomic_load_explicit(&s->tx->bell, memory_order_seq_cst) &&
	       atomic_exchange_explicit(&s->tx->bell, 0, memory_order_seq_cst);
}

static void ring_bell(struct sv_conn *c)
{
	char b = 0;
	ssize_t r = send(c->fd, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL);

	(void)r; /* a full socket already holds a pending bell */
}

/*
 * Payload pieces are application memory, which the application may have
 * unmapped while it was still registered (a bug, but over tcp the kernel's
 * copy fails cleanly).  Whole pages (pieces of SHM_SAFE_MIN bytes or more)
 * are therefore copied into the ring by the kernel, with process_vm_readv on
 * our own process, one call per ring_put; smaller pieces by the CPU, since a
 * system call costs more than the copy there (COMPATIBILITY.md §6).
 */
#define SHM_SAFE_MIN 4096u

/*
 * Pieces gathered for one process_vm_readv: local destinations l[i] filled
 * from remote sources r[i] (in our own process for the self copy below, in
 * the peer for single-copy reads).
 */
struct cma_batch {
	struct iovec l[SHM_CMA_BATCH], r[SHM_CMA_BATCH];
	int n;
	size_t bytes;
};

static void cma_add(struct cma_batch *b, void *dst, const void *src, size_t len)
{
	b->l[b->n] = (struct iovec){ dst, len };
	b->r[b->n++] = (struct iovec){ (void *)src, len };
	b->bytes += len;
}

/* Copy the batch; returns bytes copied or -1 (errno), and empties it. */
static ssize_t cma_pull(pid_t pid, struct cma_batch *b)
{
	ssize_t got = process_vm_readv(pid, b->l, (unsigned long)b->n, b->r,
				       (unsigned long)b->n, 0);

	b->n = 0;
	b->bytes = 0;
	return got;
}

static atomic_int self_copy_ok = -1; /* process_vm_readv works on ourselves */

static void self_copy_flush(struct cma_batch *b)
{
	int n = b->n;
	size_t bytes = b->bytes;
	ssize_t got;

	if (!n)
		return;
	got = cma_pull(getpid(), b);
	if (got < 0 && (errno == EPERM || errno == ENOSYS)) {
		/* a seccomp filter forbids it: the CPU copies from now on */
		atomic_store_explicit(&self_copy_ok, 0, memory_order_relaxed);
		for (int i = 0; i < n; i++)
			if (!sv_copy_guarded(b->l[i].iov_base, b->r[i].iov_base, b->l[i].iov_len))
				memset(b->l[i].iov_base, 0, b->l[i].iov_len);
	} else if (got != (ssize_t)bytes) {
		sv_warn("shm: a payload in unmapped memory was sent as it stood (%zd of %zu bytes)",
			got, bytes);
	}
}

static void copy_piece(struct cma_batch *b, void *dst, const void *src, size_t len)
{
	if (len < SHM_SAFE_MIN || !atomic_load_explicit(&self_copy_ok, memory_order_relaxed)) {
		/* unmapped in a race with the WQE's check: sent as zeros */
		if (!sv_copy_guarded(dst, src, len))
			memset(dst, 0, len);
		return;
	}
	if (b->n == SHM_CMA_BATCH)
		self_copy_flush(b);
	cma_add(b, dst, src, len);
}

/* A record header of ours into the ring (no guard needed: our memory). */
static void ring_put_word(struct sv_shm *s, uint64_t pos, const void *w)
{
	size_t o = (size_t)(pos & (SHM_RING_BYTES - 1));

	memcpy(s->txdata + o, w, 8); /* records are 8-aligned: never split */
}

static void ring_copy_in(struct sv_shm *s, struct cma_batch *b, uint64_t pos, const void *src,
			 size_t len)
{
	size_t o = (size_t)(pos & (SHM_RING_BYTES - 1)), first = SV_MIN(len, SHM_RING_BYTES - o);

	copy_piece(b, s->txdata + o, src, first);
	if (first < len)
		copy_piece(b, s->txdata, (const uint8_t *)src + first, len - first);
}

static void ring_copy_out(struct sv_shm *s, uint64_t pos, void *dst, size_t len)
{
	size_t o = (size_t)(pos & (SHM_RING_BYTES - 1)), first = SV_MIN(len, SHM_RING_BYTES - o);

	memcpy(dst, s->rxdata + o, first);
	if (first < len)
		memcpy((uint8_t *)dst + first, s->rxdata, len - first);
}

/* The same into application memory (a payload received in place), which
 * the application may have unmapped: false, and the bytes stay in the ring.
 * The last byte is stored last, as engine/dma.h's sv_dma_write places it. */
static bool ring_copy_out_guarded(struct sv_shm *s, uint64_t pos, void *dst, size_t len)
{
	size_t o = (size_t)(pos & (SHM_RING_BYTES - 1)), first = SV_MIN(len, SHM_RING_BYTES - o);

	return sv_place_guarded(dst, s->rxdata + o, first) &&
	       (first == len || sv_place_guarded((uint8_t *)dst + first, s->rxdata, len - first));
}

static inline uint64_t round8(uint64_t v)
{
	return (v + 7) & ~7ull;
}

/* Producer: put as much of iov in the ring as fits; returns stream bytes. */
static ssize_t ring_put(struct sv_conn *c, const struct iovec *iov, int iovcnt, bool indirect_ok)
{
	struct sv_shm *s = to_shm(c);
	uint64_t head = s->tx_head; /* the room known of; tx->head is read when it runs out */
	uint64_t wpos = atomic_load_explicit(&s->wpos, memory_order_relaxed), start = wpos;
	struct cma_batch sc; /* not cleared whole: 2 KB of iovecs per call */
	size_t taken = 0;
	int i = 0;
	size_t off = 0;
	bool fresh = false;

	sc.n = 0;
	sc.bytes = 0;
	if (atomic_load_explicit(&self_copy_ok, memory_order_relaxed) < 0)
		atomic_store_explicit(&self_copy_ok, cma_allowed(), memory_order_relaxed);

	while (i < iovcnt) {
		uint64_t space = SHM_RING_BYTES - (wpos - head);
		size_t len = iov[i].iov_len - off;

		if (!len) {
			i++, off = 0;
			continue;
		}
		if (space < 16 + 8 && !fresh) {
			/* seq_cst: after `room` (shm_writev) */
			head = atomic_load_explicit(&s->tx->head, memory_order_seq_cst);
			fresh = true;
			if (wpos - head > SHM_RING_BYTES) {
				/* the consumer released bytes never written, or more than
				 * a ring (it may stop inside a record: any byte position
				 * is a head) */
				sv_warn_limited("shm: pid %d's ring head is impossible; closing the "
						"connection",
						(int)s->peer_pid);
				return -EIO;
			}
			s->tx_head = head;
			continue;
		}
		if (indirect_ok && !off && len >= SHM_INDIRECT_MIN) {
			uint64_t rec[2] = { len | REC_INDIRECT, (uint64_t)(uintptr_t)iov[i].iov_base };

			if (space < sizeof(rec))
				break;
			ring_put_word(s, wpos, &rec[0]);
			ring_put_word(s, wpos + 8, &rec[1]);
			wpos += sizeof(rec);
			taken += len;
			i++;
			continue;
		}
		/* an inline record: as many of the following inline pieces as fit */
		if (space < 16)
			break;
		uint64_t room = (space - 8) & ~7ull, put = 0, hpos = wpos;

		wpos += 8;
		while (i < iovcnt && put < room) {
			size_t l = iov[i].iov_len - off;

			if (put && indirect_ok && !off && l >= SHM_INDIRECT_MIN)
				break; /* that one goes indirect */
			l = SV_MIN(l, room - put);
			ring_copy_in(s, &sc, wpos + put, (const uint8_t *)iov[i].iov_base + off, l);
			put += l;
			off += l;
			if (off == iov[i].iov_len)
				i++, off = 0;
		}
		ring_put_word(s, hpos, &put);
		wpos += round8(put);
		taken += put;
	}
	self_copy_flush(&sc);
	if (wpos != start) {
		/* tail before tail_logical: what readable() counts is readable.
		 * seq_cst: ordered before the load of `bell` that follows */
		atomic_store_explicit(&s->wpos, wpos, memory_order_release);
		atomic_store_explicit(&s->tx->tail, wpos, memory_order_seq_cst);
		s->tx_logical += taken;
		atomic_store_explicit(&s->tx->tail_logical, s->tx_logical, memory_order_release);
	}
	return (ssize_t)taken;
}

static size_t iov_total(const struct iovec *iov, int iovcnt)
{
	size_t t = 0;

	for (int i = 0; i < iovcnt; i++)
		t += iov[i].iov_len;
	return t;
}

static ssize_t shm_writev(struct sv_conn *c, const struct iovec *iov, int iovcnt, bool ref)
{
	struct sv_shm *s = to_shm(c);
	bool indirect_ok;
	size_t total = iov_total(iov, iovcnt), taken;
	ssize_t put;

	if (!shm_ready(s))
		return 0; /* nothing goes before the peer's setup (nothing is sent) */
	indirect_ok = ref && atomic_load_explicit(&s->tx->cma_ok, memory_order_acquire);
	put = ring_put(c, iov, iovcnt, indirect_ok);
	if (put < 0)
		return put;
	taken = (size_t)put;
	if (taken < total) {
		/* full: ask for a ring back, then look once more, since the
		 * consumer may have made room before it could see the request */
		struct iovec rest[SV_TXBATCH_IOV + 1];
		int n = 0;
		size_t skip = taken;

		atomic_store_explicit(&s->tx->room, 1, memory_order_seq_cst);
		for (int i = 0; i < iovcnt && n < (int)SV_ARRAY_SIZE(rest); i++) {
			if (skip >= iov[i].iov_len) {
				skip -= iov[i].iov_len;
				continue;
			}
			rest[n].iov_base = (uint8_t *)iov[i].iov_base + skip;
			rest[n++].iov_len = iov[i].iov_len - skip;
			skip = 0;
		}
		/* a piece cut at `taken` still lies in the same registered memory */
		put = ring_put(c, rest, n, indirect_ok);
		if (put < 0)
			return put;
		taken += (size_t)put;
	}
	/* Each side stores, then loads what the other stores, all seq_cst (no
	 * fences: ThreadSanitizer does not model them): either the consumer
	 * sees our tail, or we see its bell */
	if (taken && take_bell(s))
		ring_bell(c);
	return (ssize_t)taken;
}

/* Single-copy reads from the peer's memory; 0 or -EIO. */
static int cma_flush(struct sv_shm *s, struct cma_batch *b)
{
	size_t bytes = b->bytes;
	ssize_t got;

	int n = b->n;

	if (!n)
		return 0;
	got = cma_pull(s->peer_pid, b);
	if (got != (ssize_t)bytes) {
		/* a destination may be read-only for a moment (its pages being
		 * replaced by shared ones, or held across a fork:
		 * engine/mem_share.c), where the kernel's copy fails and a store
		 * of ours would wait: once each can be written, again */
		bool writable = true;

		for (int i = 0; i < n && writable; i++)
			writable = sv_touch_guarded(b->l[i].iov_base, b->l[i].iov_len);
		if (writable) {
			b->n = n;
			b->bytes = bytes;
			got = cma_pull(s->peer_pid, b);
		}
	}
	if (got != (ssize_t)bytes) {
		/* the peer's memory went away under a posted request (or the peer
		 * did): the stream cannot go on, as with a broken link */
		sv_warn("shm: single-copy read from pid %d failed (%zd of %zu: %s)",
			(int)s->peer_pid, got, bytes, got < 0 ? strerror(errno) : "short");
		return -EIO;
	}
	return 0;
}

/* Consumer: take up to the bytes of iov from the stream. */
static ssize_t shm_readv(struct sv_conn *c, const struct iovec *iov, int iovcnt)
{
	struct sv_shm *s = to_shm(c);
	struct cma_batch b; /* (not zeroed: 2 KiB of it, at every read) */
	uint64_t tail, start = s->rpos;
	size_t got = 0, off = 0;
	bool fault = false;
	int i = 0;

	b.n = 0;
	b.bytes = 0;

	if (!shm_ready(s))
		return s->eof ? 0 : -EAGAIN;
	/* the peer's counter, read once: everything below stays inside it */
	tail = atomic_load_explicit(&s->rx->tail, memory_order_acquire);
	if (tail - s->rpos > SHM_RING_BYTES || (tail & 7))
		goto broken; /* published bytes it never wrote, or more than a ring */
	if (!s->cma_tested)
		cma_test(s);
	while (i < iovcnt) {
		size_t want = iov[i].iov_len - off, l;
		uint8_t *dst = (uint8_t *)iov[i].iov_base + off;

		if (!want) {
			i++, off = 0;
			continue;
		}
		if (!s->rec_left) {
			uint64_t h;

			if (s->rpos == tail)
				break;
			ring_copy_out(s, s->rpos, &h, 8);
			s->rpos += 8;
			s->rec_left = h & 0xffffffffull;
			s->rec_indirect = (h & REC_INDIRECT) != 0;
			/* a record lies whole inside what was published */
			if ((h & ~(REC_INDIRECT | 0xffffffffull)) ||
			    (s->rec_indirect ? tail - s->rpos < 8
					     : round8(s->rec_left) > tail - s->rpos))
				goto broken;
			if (s->rec_indirect) {
				ring_copy_out(s, s->rpos, &s->rec_addr, 8);
				s->rpos += 8;
			}
			continue;
		}
		l = (size_t)SV_MIN(want, s->rec_left);
		if (s->rec_indirect) {
			if (b.n == SHM_CMA_BATCH && cma_flush(s, &b))
				return -EIO;
			cma_add(&b, dst, (const void *)(uintptr_t)s->rec_addr, l);
			s->rec_addr += l;
		} else {
			if (!ring_copy_out_guarded(s, s->rpos, dst, l)) {
				fault = true; /* as a socket's read: what came before */
				break;
			}
			s->rpos += l;
		}
		s->rec_left -= l;
		if (!s->rec_left && !s->rec_indirect)
			s->rpos = round8(s->rpos);
		got += l;
		off += l;
	}
	if (cma_flush(s, &b))
		return -EIO;
	if (s->rpos != start || got) {
		atomic_store_explicit(&s->rx->head, s->rpos, memory_order_seq_cst);
		s->rx_logical += got;
		atomic_store_explicit(&s->rx->head_logical, s->rx_logical, memory_order_release);
		if (atomic_load_explicit(&s->rx->room, memory_order_seq_cst) &&
		    atomic_exchange_explicit(&s->rx->room, 0, memory_order_seq_cst))
			ring_bell(c);
	}
	if (got)
		return (ssize_t)got;
	if (fault)
		return -EFAULT;
	return s->eof ? 0 : -EAGAIN;
broken:
	sv_warn_limited("shm: pid %d's ring holds an impossible record or tail; closing the "
			"connection",
			(int)s->peer_pid);
	return -EIO;
}

static ssize_t shm_readable(struct sv_conn *c)
{
	struct sv_shm *s = to_shm(c);
	uint64_t n;

	if (!shm_ready(s))
		return 0;
	/* a hint only (the peer writes it): a read finds what is really there */
	n = atomic_load_explicit(&s->rx->tail_logical, memory_order_acquire) - s->rx_logical;
	return (ssize_t)SV_MIN(n, (uint64_t)SSIZE_MAX);
}

/* Readiness comes from the ring, not the socket: nothing to tune. */
static int shm_set_lowat(struct sv_conn *c, size_t bytes)
{
	(void)c;
	(void)bytes;
	return 0;
}

/* The socket said readable: take the bells, and notice the peer's end
 * (first, on an accepted connection: the peer's setup). */
static void shm_poll_in(struct sv_conn *c)
{
	char sink[64];

	if (!shm_ready(to_shm(c))) {
		int err = shm_take_setup(c);

		if (err == -EAGAIN)
			return;
		if (err) {
			to_shm(c)->eof = true; /* the stream ends before it began */
			return;
		}
	}

	for (;;) {
		ssize_t n = recv(c->fd, sink, sizeof(sink), MSG_DONTWAIT);

		if (n > 0)
			continue;
		if (n == 0 || (errno != EAGAIN && errno != EINTR))
			to_shm(c)->eof = true;
		if (n < 0 && errno == EINTR)
			continue;
		return;
	}
}

/* seq_cst: in shm_arm it is the load after the store of `bell` */
static bool shm_rx_pending(struct sv_conn *c)
{
	struct sv_shm *s = to_shm(c);

	if (!shm_ready(s))
		return s->eof;
	return s->rec_left || atomic_load_explicit(&s->rx->tail, memory_order_seq_cst) != s->rpos;
}

static bool shm_arm(struct sv_conn *c)
{
	if (!shm_ready(to_shm(c)))
		return to_shm(c)->eof; /* the socket wakes us with the setup */
	atomic_store_explicit(&to_shm(c)->rx->bell, 1, memory_order_seq_cst);
	return shm_rx_pending(c);
}

/* The peer sees the socket end; the rings stay mapped until the last
 * reference goes (threads may still look at them). */
static void shm_close(struct sv_conn *c)
{
	if (c->fd >= 0) {
		shutdown(c->fd, SHUT_RDWR);
		close(c->fd);
		c->fd = -1;
	}
}

static void shm_destroy(struct sv_conn *c)
{
	struct sv_shm *s = to_shm(c);

	if (s) {
		if (s->area)
			munmap(s->area, SHM_MAP_LEN);
		free(s);
		c->tp = NULL;
	}
	sv_stream_fini(c);
}

static size_t shm_unsent(struct sv_conn *c)
{
	struct sv_shm *s = to_shm(c);

	if (!shm_ready(s))
		return 0;
	/* any thread may ask (sv_conn_busy), not only the producer; the head
	 * is the peer's, and clamped */
	return (size_t)SV_MIN(atomic_load_explicit(&s->wpos, memory_order_acquire) -
				      atomic_load_explicit(&s->tx->head, memory_order_acquire),
			      (uint64_t)SHM_RING_BYTES);
}

/* Set up synchronously by shm_connect: nothing left to finish. */
static int shm_finish_connect(struct sv_conn *c)
{
	(void)c;
	return 0;
}

/* Closing: the peer reads the ring (and our memory, for single-copy
 * payloads) after we are gone only if it was drained before. */
static void shm_drain(struct sv_conn *c, uint64_t deadline)
{
	if (c->fd < 0)
		return;
	while ((sv_conn_tx_waiting(c) || shm_unsent(c)) && sv_now_ns() < deadline &&
	       atomic_load(&c->state) == SV_CONN_UP) {
		if (sv_conn_flush_queue(c) < 0)
			return;
		poll(NULL, 0, 1);
	}
}

/* A peer that sleeps armed the bell of the ring we write: ring it as a
 * write would (shm_send), with nothing written.  The rings stay mapped
 * while the caller holds its reference; the socket is looked at under
 * tx_lock, which its closing takes. */
static void shm_wake(struct sv_conn *c)
{
	struct sv_shm *s = to_shm(c);

	if (!shm_ready(s) || !take_bell(s))
		return;
	sv_mutex_lock(&c->tx_lock);
	if (c->fd >= 0)
		ring_bell(c);
	sv_mutex_unlock(&c->tx_lock);
}

/* Room after a full ring is signalled by a bell (EPOLLIN), never EPOLLOUT;
 * and the bells are watched while the input waits, since they say there
 * is room as well as data. */
static uint32_t shm_watch(const struct sv_conn *c, bool in, bool out)
{
	(void)c;
	(void)in;
	(void)out;
	return EPOLLIN | EPOLLRDHUP;
}

static const struct sv_mem_poll shm_poll = {
	.pending = shm_rx_pending,
	.arm = shm_arm,
	.bell = shm_poll_in,
};

/* The owner takes the connection: the stream's framing and handshake, and
 * its rings are looked at in memory. */
static int shm_conn_open(struct sv_conn *c)
{
	int err = sv_stream_open(c);

	if (!err && c->host->in_memory)
		c->host->in_memory(c, &shm_poll);
	return err;
}

static const struct sv_stream_io shm_io = {
	.writev = shm_writev,
	.readv = shm_readv,
	.readable = shm_readable,
	.set_lowat = shm_set_lowat,
};

static int shm_send(struct sv_conn *c, const struct sv_frames *f)
{
	return sv_stream_send(c, &shm_io, f);
}

static void shm_input(struct sv_conn *c, bool closing)
{
	sv_stream_input(c, &shm_io, closing);
}

const struct sv_transport_ops sv_shm_ops = {
	.name = "shm",
	.run_max = SV_STREAM_RUN_MAX,
	.watch = shm_watch,
	.wake = shm_wake,
	.iface_open = shm_iface,
	.iface_close = sv_iface_stream_close,
	.finish_connect = shm_finish_connect,
	.drain = shm_drain,
	.connect = shm_connect,
	.open = shm_conn_open,
	.send = shm_send,
	.input = shm_input,
	.close = shm_close,
	.destroy = shm_destroy,
	.unsent = shm_unsent,
};
