/*
 * unit_peer_mem: one-sided operations between two processes of this host
 * complete without the target's CPU (engine/peer_mem.c, mem_share.c).
 *   - the target registers memory of each common kind (malloc'd heap, an
 *     anonymous mapping, transparent huge pages, hugetlb pages when the
 *     host has some reserved), then is stopped with SIGSTOP; WRITE, READ,
 *     compare-and-swap, fetch-and-add and atomic write on each complete,
 *     with the right data, while it is stopped; once continued it checks
 *     its memory
 *   - revocation: once the target deregisters an MR, a WRITE with its rkey
 *     fails with a remote access error and changes nothing
 *   - pages replaced at registration lose no store of another thread
 *     writing into them meanwhile, and a forked child gets a copy of
 *     registered memory, not the parent's pages; deregistered, they are
 *     private again
 *   - fork() while heap pages are shared (small malloc'd MRs, registered or
 *     deregistered and freed), a thread allocating and another storing into
 *     an MR all along: every child's heap works (it used to die of one its
 *     parent changed under it), no store is lost, SENDs into the MR are
 *     placed; stores made right after fork() by the parent, or before
 *     softverbs' atfork handler by the child, into a page that holds
 *     malloc's data too, stay on their side
 *   - revocation under fire: a thread WRITEs into an MR as fast as it can
 *     (inline in half of the rounds: then the initiator takes no MR lock)
 *     (atomic writes in a third of them) while the target, a context of the
 *     same process, deregisters it; nothing lands once ibv_dereg_mr has
 *     returned, which it does well before the 1 s a peer stopped inside an
 *     access is waited for, and the writer ends with a remote access error.  (It cannot show the busy count's fence at
 *     work: a store missed by it would have to come after the whole
 *     deregistration, microseconds, not the nanoseconds the fence covers.)
 *   - deregistration waits for an access in progress, asleep: a 32 MiB
 *     WRITE (left to the initiator's engine thread) is being copied when
 *     the target deregisters the MR; ibv_dereg_mr returns once the copy is
 *     over (the whole WRITE is there, nothing changes after), in much less
 *     than 1 s
 *   - the local side of the same: a thread WRITEs 1 MiB at a time from a
 *     buffer of its own MR, each executed in its post, while the main
 *     thread deregisters that MR and then fills the buffer with a poison
 *     pattern; no WRITE copies a poisoned byte (a copy in progress holds
 *     the deregistration off: without the MR read lock, this fails), and
 *     the writer ends with a local protection error
 *   - mappings replaced all along: a thread WRITEs into 79 MRs of the peer
 *     in turn, more than an initiator keeps mapped at once (64), so that
 *     every WRITE unmaps a mapping and makes one; every one lands, and so
 *     do the 256 KiB WRITEs another thread makes meanwhile into one more MR
 *     through a QP of its own.  (That QP may have a connection, and so
 *     mappings, of its own: unit_arwlock shows a reader holding off a
 *     writer.)
 *   - the post's shortcut for a lone WRITE, READ or SEND (once one has
 *     run on the peer's memory, executed from the WR, no WQE in the
 *     ring): 20
 *     unsignaled 8 B WRITEs and a signaled one land, each on return from
 *     its post, and bring exactly one completion (the signaled one's
 *     wr_id, opcode, qp_num); so do 5 READs and a signaled one (its
 *     byte_len), one of them flagged inline (ignored for a READ); a READ
 *     into an MR without local write access completes
 *     IBV_WC_LOC_PROT_ERR, and so does one flagged inline whose lkey
 *     names no MR; with sq_sig_all, an unsignaled one completes too; an
 *     inline WRITE (a bogus lkey, as inline data needs none) from a
 *     buffer overwritten right after the post lands as posted; one longer than
 *     max_inline_data is refused with EINVAL and bad_wr, nothing
 *     completes and the QP still works; an rkey the target never issued
 *     completes IBV_WC_REM_ACCESS_ERR, changes nothing, and what follows
 *     is flushed; an lkey that names no MR completes IBV_WC_LOC_PROT_ERR
 *     and moves the QP to the error state; once the peer's receive queue
 *     has moved, 10 unsignaled SENDs of 8 B are each in their receive by
 *     their post's return, and a SEND_WITH_IMM, an inline SEND (a bogus
 *     lkey, its buffer overwritten after the post) and a
 *     WRITE_WITH_IMM, signaled, complete on both sides (opcode, byte_len,
 *     immediate data, nothing more), the data in place
 *   - a WRITE lands in address order, its last byte last, as a NIC's DMA
 *     does: a thread of the target spins on the last byte of its buffer,
 *     as dtest -D, perftest's ib_write_lat and MPI's eager RDMA do, and
 *     then finds every other byte of that WRITE in place (12 B inline and
 *     not, 100 B, 2 KiB + 65 and 4 KiB + 1 (from about there on glibc's
 *     memcpy uses rep movsb, and a poller was seen to find up to 64 bytes
 *     at the start still stale, once in 50 to 500 copies), up to 1 MiB, an
 *     SGL of three pieces)
 */
#include "sv_test.h"

#include <arpa/inet.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define NKIND 4
#define RLEN (2u << 20) /* each region; hugetlb needs a whole huge page */
#define QUART (RLEN / 4)
#define WORDS (RLEN - 64) /* the atomic words: FAA at +0, CAS at +8, ATOMIC_WRITE at +16 */
#define AW_VALUE 0x0123456789abcd00ull

static const char *const kind_name[NKIND] = { "malloc", "mmap", "thp", "hugetlb" };

/* A region of the kind, or NULL where the host has none; *base is what
 * region_free() takes back. */
static void *region(int kind, void **base)
{
	void *p;

	switch (kind) {
	case 0:
		/* not page-aligned: the heap around it is shared too */
		p = *base = malloc(RLEN + 100);
		return p ? (char *)p + 16 : NULL;
	case 1:
		p = *base = mmap(NULL, RLEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
				 -1, 0);
		return p == MAP_FAILED ? NULL : p;
	case 2:
		p = *base = mmap(NULL, 2 * RLEN, PROT_READ | PROT_WRITE,
				 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			return NULL;
		p = (void *)(((uintptr_t)p + RLEN - 1) & ~(uintptr_t)(RLEN - 1));
		(void)madvise(p, RLEN, MADV_HUGEPAGE);
		return p;
	default:
		p = *base = mmap(NULL, RLEN, PROT_READ | PROT_WRITE,
				 MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
		return p == MAP_FAILED ? NULL : p;
	}
}

static void region_free(int kind, void *base)
{
	if (kind == 0)
		free(base);
	else
		munmap(base, kind == 2 ? 2 * RLEN : RLEN);
}

struct regions {
	uint64_t addr[NKIND];
	uint32_t rkey[NKIND];
	uint32_t qpn;
	union ibv_gid gid;
};

static int target(int rfd, int wfd, int argc, char **argv)
{
	struct svt_dev d;
	struct svt_qp_init qi;
	struct regions me = { 0 }, peer;
	struct ibv_mr *mr[NKIND] = { 0 };
	char *buf[NKIND];
	void *base[NKIND];
	bool shared[NKIND];

	(void)argc;
	(void)argv;
	/* stopped by the parent: if it dies meanwhile, so do we */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() == 1)
		return 1;
	svt_dev_open(&d);
	struct ibv_cq *cq = svt_create_cq(d.ctx, 16, NULL);

	svt_qp_init_default(&qi, IBV_QPT_RC);
	struct ibv_qp *qp = svt_create_qp(d.pd, cq, cq, &qi);

	for (int k = 0; k < NKIND; k++) {
		buf[k] = region(k, &base[k]);
		if (!buf[k])
			continue;
		svt_fill(buf[k], RLEN, 10 + k);
		((uint64_t *)(buf[k] + WORDS))[0] = 1000 + k;
		((uint64_t *)(buf[k] + WORDS))[1] = 5;
		((uint64_t *)(buf[k] + WORDS))[2] = 0;
		mr[k] = svt_reg_mr(d.pd, buf[k], RLEN, SVT_ACCESS_ALL);
		me.addr[k] = (uintptr_t)buf[k];
		me.rkey[k] = mr[k]->rkey;
	}
	me.qpn = qp->qp_num;
	me.gid = d.gid;
	svt_chan_write(wfd, &me, sizeof(me));
	svt_chan_read(rfd, &peer, sizeof(peer), 0);
	svt_qp_connect(qp, NULL, &peer.gid, peer.qpn);
	svt_sync_send(wfd, 'R');

	/* the peer's first READ has been answered, so it has proved itself and
	 * our pages are shared where they can be: say which (a hugetlb region
	 * stays private when no free huge page holds the shared copy) */
	SVT_CHECK_EQ(svt_sync_recv(rfd, 30000), 'Q');
	for (int k = 0; k < NKIND; k++) {
		shared[k] = buf[k] && svt_shared_pages(buf[k]);
		svt_sync_send(wfd, shared[k] ? 'S' : 'P');
	}

	/* stopped here by the parent, then continued */
	SVT_CHECK_EQ(svt_sync_recv(rfd, 30000), 'C');
	for (int k = 0; k < NKIND; k++) {
		if (!shared[k])
			continue; /* not tried (the parent says why) */
		SVT_CHECK_FILL(buf[k], QUART, 20 + k); /* the parent's WRITE */
		SVT_CHECK_EQ(((uint64_t *)(buf[k] + WORDS))[0], 1000 + k + 42);
		SVT_CHECK_EQ(((uint64_t *)(buf[k] + WORDS))[1], 6);
		SVT_CHECK_EQ(((uint64_t *)(buf[k] + WORDS))[2], AW_VALUE + k);
	}
	/* revocation: the first region's MR goes */
	SVT_CHECK_OK(ibv_dereg_mr(mr[0]));
	mr[0] = NULL;
	svt_sync_send(wfd, 'D');
	SVT_CHECK_EQ(svt_sync_recv(rfd, 30000), 'E');
	SVT_CHECK_FILL(buf[0], QUART, 20); /* the refused WRITE changed nothing */

	SVT_CHECK_OK(ibv_destroy_qp(qp));
	for (int k = 0; k < NKIND; k++) {
		if (mr[k])
			SVT_CHECK_OK(ibv_dereg_mr(mr[k]));
		if (buf[k])
			region_free(k, base[k]);
	}
	SVT_CHECK_OK(ibv_destroy_cq(cq));
	svt_dev_close(&d);
	return 0;
}

static void test_stopped_target(void)
{
	struct svt_child c;
	struct svt_dev d;
	struct svt_qp_init qi;
	struct regions me = { 0 }, peer;
	struct ibv_wc wc[5 * NKIND];
	char *buf = svt_alloc(RLEN + 4096);
	int status, n = 0;
	bool shared[NKIND];

	svt_spawn(&c, "target", NULL);
	svt_dev_open(&d);
	struct ibv_cq *cq = svt_create_cq(d.ctx, 64, NULL);

	svt_qp_init_default(&qi, IBV_QPT_RC);
	struct ibv_qp *qp = svt_create_qp(d.pd, cq, cq, &qi);
	struct ibv_mr *mr = svt_reg_mr(d.pd, buf, RLEN + 4096, SVT_ACCESS_ALL);

	svt_chan_read(c.rfd, &peer, sizeof(peer), 0);
	me.qpn = qp->qp_num;
	me.gid = d.gid;
	svt_chan_write(c.wfd, &me, sizeof(me));
	svt_qp_connect(qp, NULL, &peer.gid, peer.qpn);
	SVT_CHECK_EQ(svt_sync_recv(c.rfd, 0), 'R');
	/* softverbs connects the two endpoints at the first operation, a
	 * handshake the target's engine answers: that one with it running */
	SVT_CHECK_OK(svt_post_send(qp, 1, IBV_WR_RDMA_READ, IBV_SEND_SIGNALED, buf, 8, mr->lkey,
				   peer.addr[1], peer.rkey[1], 0));
	svt_poll_ok(cq, 1, wc, 0);
	svt_sync_send(c.wfd, 'Q');
	for (int k = 0; k < NKIND; k++)
		shared[k] = svt_sync_recv(c.rfd, 30000) == 'S';

	SVT_CHECK_OK(kill(c.pid, SIGSTOP));
	SVT_CHECK_EQ(waitpid(c.pid, &status, WUNTRACED), c.pid);
	SVT_CHECK(WIFSTOPPED(status));
	for (int k = 0; k < NKIND; k++) {
		uint64_t *lw = (uint64_t *)(buf + RLEN + 64 * k), aw = AW_VALUE + k;
		char *rd = buf + QUART;

		if (!peer.rkey[k]) {
			svt_log("%s: the host has no such memory; not tried", kind_name[k]);
			continue;
		}
		if (!shared[k] && k == 3) {
			/* another program (UCX's memory pools, say) holds the free
			 * huge pages: the region stays private and is served by the
			 * wire, which a stopped target does not answer */
			svt_log("%s: no free huge page for the shared copy; not tried", kind_name[k]);
			continue;
		}
		SVT_CHECK(shared[k]); /* the other kinds are always shared */
		svt_fill(buf, QUART, 20 + k);
		SVT_CHECK_OK(svt_post_send(qp, 100 + k, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, buf,
					   QUART, mr->lkey, peer.addr[k], peer.rkey[k], 0));
		SVT_CHECK_OK(svt_post_send(qp, 200 + k, IBV_WR_RDMA_READ, IBV_SEND_SIGNALED, rd,
					   QUART, mr->lkey, peer.addr[k] + QUART, peer.rkey[k],
					   0));
		SVT_CHECK_OK(svt_post_atomic(qp, 300 + k, IBV_WR_ATOMIC_FETCH_AND_ADD,
					     IBV_SEND_SIGNALED, &lw[0], mr->lkey,
					     peer.addr[k] + WORDS, peer.rkey[k], 42, 0));
		SVT_CHECK_OK(svt_post_atomic(qp, 400 + k, IBV_WR_ATOMIC_CMP_AND_SWP,
					     IBV_SEND_SIGNALED, &lw[1], mr->lkey,
					     peer.addr[k] + WORDS + 8, peer.rkey[k], 5, 6));
		/* (its 8 bytes are taken at the post, as inline data) */
		SVT_CHECK_OK(svt_post_send(qp, 600 + k, IBV_WR_ATOMIC_WRITE, IBV_SEND_SIGNALED, &aw,
					   8, 0, peer.addr[k] + WORDS + 16, peer.rkey[k], 0));
		/* the target's engine is stopped with it: only this process can
		 * have completed them */
		svt_poll_ok(cq, 5, wc + n, 5000);
		SVT_CHECK_EQ(wc[n].wr_id, 100 + k);
		SVT_CHECK_EQ(wc[n + 3].wr_id, 400 + k);
		SVT_CHECK_EQ(wc[n + 4].wr_id, 600 + k);
		SVT_CHECK_EQ(wc[n + 4].opcode, IBV_WC_ATOMIC_WRITE);
		SVT_CHECK_EQ(wc[n + 1].byte_len, QUART);
		n += 5;
		/* the READ got the target's bytes: its fill at offset QUART */
		for (size_t i = 0; i < QUART; i += 4093)
			SVT_CHECK_EQ((uint8_t)rd[i], svt_pattern_byte(10 + k, QUART + i));
		SVT_CHECK_EQ(lw[0], 1000 + k);
		SVT_CHECK_EQ(lw[1], 5);
		svt_log("%s: WRITE, READ, CAS, FAA and ATOMIC_WRITE done with the target stopped",
			kind_name[k]);
	}
	SVT_CHECK_OK(kill(c.pid, SIGCONT));
	svt_sync_send(c.wfd, 'C');

	/* revoked: the target deregistered the first region */
	SVT_CHECK_EQ(svt_sync_recv(c.rfd, 30000), 'D');
	svt_fill(buf, QUART, 99);
	SVT_CHECK_OK(svt_post_send(qp, 500, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, buf, QUART,
				   mr->lkey, peer.addr[0], peer.rkey[0], 0));
	wc[0] = svt_poll_one(cq);
	SVT_CHECK_WC_STATUS(wc[0], IBV_WC_REM_ACCESS_ERR);
	svt_sync_send(c.wfd, 'E');
	SVT_CHECK_EQ(svt_child_wait(&c, 30000), 0);

	SVT_CHECK_OK(ibv_destroy_qp(qp));
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	SVT_CHECK_OK(ibv_destroy_cq(cq));
	free(buf);
	svt_dev_close(&d);
}

/* ---- page replacement, seen from the registering process ---- */


/*
 * A pair whose side b has a peer of this host connected (a's WRITE made the
 * connection): b's MRs share their pages from then on, and not before.
 */
static void pair_with_peer(struct svt_pair *p)
{
	struct ibv_wc wc;

	svt_pair_create(p, IBV_QPT_RC, NULL);
	SVT_CHECK(!svt_shared_pages(p->b.buf)); /* no peer yet: private */
	SVT_CHECK_OK(svt_post_send(p->a.qp, 1, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, p->a.buf, 64,
				   p->a.mr->lkey, (uintptr_t)p->b.buf, p->b.mr->rkey, 0));
	svt_poll_ok(p->a.send_cq, 1, &wc, 0);
	SVT_CHECK(svt_shared_pages(p->b.buf)); /* registered before: shared now */
}

struct writer {
	volatile uint64_t *word;
	uint64_t n;
	volatile int started, done;
};

static void *write_loop(void *arg)
{
	struct writer *w = arg;

	w->started = 1;
	for (uint64_t i = 0; i < w->n; i++)
		(*w->word)++; /* plain stores: a lost one shows in the total */
	w->done = 1;
	return NULL;
}

static void test_no_store_lost(struct svt_pair *p)
{
	struct writer w = { 0 };
	pthread_t t;
	size_t len = 1u << 20;
	char *buf = svt_alloc(len);
	int regs = 0;

	w.word = (volatile uint64_t *)(buf + len / 2);
	w.n = 30000000;
	SVT_CHECK_OK(pthread_create(&t, NULL, write_loop, &w));
	while (!w.started)
		;
	/* each registration replaces the pages again (the last MR's went);
	 * a bounded number, as the writer waits during each one */
	for (; regs < 200 && (!w.done || regs < 2); regs++) {
		struct ibv_mr *mr = svt_reg_mr(p->b.pd, buf, len, SVT_ACCESS_ALL);

		SVT_CHECK(svt_shared_pages(buf));
		SVT_CHECK_OK(ibv_dereg_mr(mr));
	}
	SVT_CHECK_OK(pthread_join(t, NULL));
	SVT_CHECK_EQ(*w.word, w.n);
	svt_log("%d registrations under a writing thread: no store lost", regs);
	free(buf);
}

static void test_fork_copy(struct svt_pair *p)
{
	size_t len = 64 * 1024;
	char *buf = svt_alloc(len);
	int status;

	svt_fill(buf, len, 7);
	struct ibv_mr *mr = svt_reg_mr(p->b.pd, buf, len, SVT_ACCESS_ALL);
	pid_t pid;

	SVT_CHECK(svt_shared_pages(buf));
	pid = fork();
	SVT_CHECK(pid >= 0);
	if (pid == 0) {
		/* the child sees the bytes, and its stores stay its own */
		if (svt_shared_pages(buf))
			_exit(3);
		for (size_t i = 0; i < len; i++)
			if ((uint8_t)buf[i] != svt_pattern_byte(7, i))
				_exit(2);
		memset(buf, 0xee, len);
		_exit(0);
	}
	SVT_CHECK_EQ(waitpid(pid, &status, 0), pid);
	SVT_CHECK(WIFEXITED(status));
	SVT_CHECK_EQ(WEXITSTATUS(status), 0);
	SVT_CHECK_FILL(buf, len, 7);
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	free(buf);
}

/*
 * Deregistered, the pages are private again, with the same bytes: the heap
 * that malloc hands out again once the buffer is freed is the program's
 * own, not shared memory (that a fork would not copy).
 */
static void test_dereg_private(struct svt_pair *p)
{
	size_t len = 10000; /* not page-aligned: its pages hold other chunks too */
	char *buf = malloc(len);

	SVT_CHECK(buf != NULL);
	svt_fill(buf, len, 8);
	for (int round = 0; round < 3; round++) {
		struct ibv_mr *mr = svt_reg_mr(p->b.pd, buf, len, SVT_ACCESS_ALL);

		SVT_CHECK(svt_shared_pages(buf));
		SVT_CHECK_OK(ibv_dereg_mr(mr));
		SVT_CHECK(!svt_shared_pages(buf));
		SVT_CHECK(!svt_shared_pages(buf + len - 1));
		SVT_CHECK_FILL(buf, len, 8);
	}
	free(buf);
}

/*
 * fork() while pages of the heap are shared: malloc'd buffers registered
 * (their pages hold other chunks and malloc's bookkeeping of them), some
 * deregistered and freed; a thread allocates and frees all along, another
 * stores into an MR, a third SENDs into it.  Each child allocates and
 * frees, and finds its copy of the MR still; the parent loses no store and
 * no SEND.  (While deregistered pages stayed shared and the child copied
 * them only after its own allocations, children died of a heap that
 * contradicted itself, "corrupted size vs. prev_size" and the like, and so
 * could the parent.)
 */
#define FORK_ROUNDS 60
#define FORK_BUFS 16

/* AddressSanitizer's allocator (LLVM's before 17) is not locked across
 * fork(): a child that allocates may wait for ever for a lock a thread of
 * the parent held at the fork.  There the children do not allocate (and
 * the heap they would check is not glibc's anyway). */
#if defined(__SANITIZE_ADDRESS__)
#define CHILD_MAY_ALLOCATE 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CHILD_MAY_ALLOCATE 0
#endif
#endif
#ifndef CHILD_MAY_ALLOCATE
#define CHILD_MAY_ALLOCATE 1
#endif

static atomic_bool fork_stop;

static void heap_churn(unsigned seed, int n)
{
	void *ptr[64] = { 0 };

	for (int i = 0; i < n; i++) {
		unsigned k = ((unsigned)i * 7 + seed) % 64;

		free(ptr[k]);
		ptr[k] = malloc(16 + ((unsigned)i * 131 + seed) % 3000);
		SVT_CHECK(ptr[k] != NULL);
		memset(ptr[k], i, 16);
	}
	for (int k = 0; k < 64; k++)
		free(ptr[k]);
}

static void *churn_loop(void *arg)
{
	unsigned seed = 0;

	(void)arg;
	while (!atomic_load(&fork_stop))
		heap_churn(seed++, 500);
	return NULL;
}

static void *store_loop(void *arg)
{
	struct writer *w = arg;

	w->started = 1;
	while (!atomic_load(&fork_stop)) {
		(*w->word)++; /* plain stores: a lost one shows in the total */
		w->n++;
	}
	return NULL;
}

/* SENDs of 32 KiB a -> b, each awaited: their payloads are placed into b's
 * MR by the kernel (a single-copy read), into pages a fork holds
 * read-only for a moment. */
struct sender {
	struct svt_pair *p;
	uint64_t n, bad;
};

static void *send_loop(void *arg)
{
	struct sender *t = arg;
	struct svt_pair *p = t->p;
	uint8_t *src = (uint8_t *)p->a.buf + 32768, *dst = (uint8_t *)p->b.buf + 32768;

	while (!atomic_load(&fork_stop)) {
		struct ibv_wc wc;

		src[0] = src[32767] = (uint8_t)(t->n + 1);
		SVT_CHECK_OK(svt_post_recv(p->b.qp, t->n, dst, 32768, p->b.mr->lkey));
		SVT_CHECK_OK(svt_post_send(p->a.qp, t->n, IBV_WR_SEND, IBV_SEND_SIGNALED, src,
					   32768, p->a.mr->lkey, 0, 0, 0));
		wc = svt_poll_one(p->a.send_cq);
		t->bad += wc.status != IBV_WC_SUCCESS;
		wc = svt_poll_one(p->b.recv_cq);
		t->bad += wc.status != IBV_WC_SUCCESS || dst[0] != src[0] || dst[32767] != src[0];
		t->n++;
		if (t->bad)
			break;
	}
	return NULL;
}

static void test_fork_heap(struct svt_pair *p)
{
	struct ibv_mr *mr[FORK_BUFS] = { 0 };
	char *buf[FORK_BUFS];
	struct writer w = { .word = (volatile uint64_t *)p->b.buf };
	struct sender snd = { .p = p };
	pthread_t churner, storer, sender;
	int dead = 0;

	for (int i = 0; i < FORK_BUFS; i++) {
		buf[i] = malloc(3000);
		SVT_CHECK(buf[i] != NULL);
		mr[i] = svt_reg_mr(p->b.pd, buf[i], 3000, SVT_ACCESS_ALL);
		SVT_CHECK(svt_shared_pages(buf[i]));
		if (i & 1) {
			SVT_CHECK_OK(ibv_dereg_mr(mr[i]));
			mr[i] = NULL;
			free(buf[i]);
			buf[i] = NULL;
		}
	}
	*w.word = 0;
	atomic_store(&fork_stop, false);
	SVT_CHECK_OK(pthread_create(&churner, NULL, churn_loop, NULL));
	SVT_CHECK_OK(pthread_create(&storer, NULL, store_loop, &w));
	SVT_CHECK_OK(pthread_create(&sender, NULL, send_loop, &snd));
	while (!w.started)
		;
	for (int r = 0; r < FORK_ROUNDS; r++) {
		int status;
		pid_t pid = fork();

		SVT_CHECK(pid >= 0);
		if (pid == 0) {
			uint64_t seen = *w.word;

			if (CHILD_MAY_ALLOCATE)
				heap_churn((unsigned)r, 2000);
			else
				usleep(1000);
			_exit(*w.word == seen ? 0 : 3); /* a copy: nobody stores there */
		}
		heap_churn((unsigned)r + 1, 200);
		SVT_CHECK_EQ(waitpid(pid, &status, 0), pid);
		if (!WIFEXITED(status) || WEXITSTATUS(status)) {
			if (dead++ < 3)
				svt_log("fork round %d: child %s %d", r,
					WIFSIGNALED(status) ? "killed by signal" : "exited with",
					WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
		}
	}
	atomic_store(&fork_stop, true);
	SVT_CHECK_OK(pthread_join(churner, NULL));
	SVT_CHECK_OK(pthread_join(storer, NULL));
	SVT_CHECK_OK(pthread_join(sender, NULL));
	SVT_CHECK_EQ(dead, 0);
	SVT_CHECK_EQ(*w.word, w.n);
	SVT_CHECK_EQ(snd.bad, 0);
	svt_log("%d forks beside a thread allocating, one storing into an MR and one SENDing "
		"into it (%llu SENDs): every child well, no store lost, every SEND placed",
		FORK_ROUNDS, (unsigned long long)snd.n);
	for (int i = 0; i < FORK_BUFS; i++) {
		if (mr[i])
			SVT_CHECK_OK(ibv_dereg_mr(mr[i]));
		free(buf[i]);
	}
}

/*
 * An atfork child handler that runs before softverbs' (registered before
 * the library was loaded, as a program that dlopens libibverbs has them;
 * here from .preinit_array) stores into an MR of one page (the first and
 * last page of an extent, which may hold malloc's data too, are held
 * across the fork), then waits for the parent to store too.  The child's
 * store stays in the child (its copy is made as it stores), and the
 * parent's, made once fork() has returned, is not in the child's copy.
 */
static volatile uint8_t *early_buf; /* set while armed */

static void early_child(void)
{
	uint64_t until;

	if (!early_buf)
		return;
	early_buf[1] = 0xc1;
	until = svt_now_ms() + 200;
	while (early_buf[0] == 0 && svt_now_ms() < until)
		sched_yield();
}

static void early_at_fork(void)
{
	pthread_atfork(NULL, NULL, early_child);
}

__attribute__((section(".preinit_array"), used)) static void (*const early_init)(void) =
	early_at_fork;

static void test_fork_early_store(struct svt_pair *p)
{
	size_t len = 4096;
	uint8_t *buf = svt_alloc(len);
	struct ibv_mr *mr = svt_reg_mr(p->b.pd, buf, len, SVT_ACCESS_ALL);
	int status;
	pid_t pid;

	SVT_CHECK(svt_shared_pages(buf));
	early_buf = buf;
	pid = fork();
	SVT_CHECK(pid >= 0);
	if (pid == 0)
		_exit(buf[1] != 0xc1 ? 2 : buf[0] != 0 ? 3 : 0);
	buf[0] = 0x9a; /* at once: the child may not have started */
	early_buf = NULL;
	SVT_CHECK_EQ(waitpid(pid, &status, 0), pid);
	SVT_CHECK(WIFEXITED(status));
	SVT_CHECK_MSG(WEXITSTATUS(status) != 3, "the child saw a store its parent made after fork()");
	SVT_CHECK_EQ(WEXITSTATUS(status), 0);
	SVT_CHECK_MSG(buf[1] == 0, "a store of the child reached its parent");
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	free(buf);
}

#define RACE_ROUNDS 40
#define RACE_LEN 4096

struct racer {
	struct svt_pair *p;
	uint64_t rkey, addr;
	enum ibv_wr_opcode op;
	bool inl;
	_Atomic uint64_t posted;
	enum ibv_wc_status last; /* read after the join */
};

/* WRITE 8 bytes after 8 bytes, each completion awaited, until one fails. */
static void *race_writer(void *arg)
{
	struct racer *r = arg;
	uint64_t *src = r->p->a.buf;
	struct ibv_wc wc;

	for (uint64_t i = 0; i < 20000000; i++) {
		*src = i + 1;
		SVT_CHECK_OK(svt_post_send(r->p->a.qp, i, r->op,
					   IBV_SEND_SIGNALED | (r->inl ? IBV_SEND_INLINE : 0), src, 8,
					   r->p->a.mr->lkey, r->addr + (i % (RACE_LEN / 8)) * 8,
					   (uint32_t)r->rkey, 0));
		wc = svt_poll_one(r->p->a.send_cq);
		atomic_store(&r->posted, i + 1);
		if (wc.status != IBV_WC_SUCCESS) {
			r->last = wc.status;
			return NULL;
		}
	}
	r->last = IBV_WC_SUCCESS;
	return NULL;
}

static void test_revoke_race(void)
{
	uint8_t *tgt = svt_alloc(RACE_LEN), *seen = svt_alloc(RACE_LEN);
	uint64_t slowest = 0;
	int changed = 0;

	for (int round = 0; round < RACE_ROUNDS; round++) {
		struct svt_pair p;
		/* WRITE, inline WRITE (no MR lock at the initiator), atomic write */
		struct racer r = { .p = &p,
				   .op = round % 3 == 2 ? IBV_WR_ATOMIC_WRITE : IBV_WR_RDMA_WRITE,
				   .inl = round % 3 == 1 };
		uint64_t t0;
		struct ibv_mr *mr;
		pthread_t t;

		struct ibv_wc wc;

		/* a's WRITE connects it: b's MRs share their pages from then on
		 * (p's buffers may reuse pages an earlier pair shared) */
		svt_pair_create(&p, IBV_QPT_RC, NULL);
		SVT_CHECK_OK(svt_post_send(p.a.qp, 1, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, p.a.buf,
					   64, p.a.mr->lkey, (uintptr_t)p.b.buf, p.b.mr->rkey, 0));
		svt_poll_ok(p.a.send_cq, 1, &wc, 0);
		memset(tgt, 0, RACE_LEN);
		mr = svt_reg_mr(p.b.pd, tgt, RACE_LEN, SVT_ACCESS_ALL);
		SVT_CHECK(svt_shared_pages(tgt));
		r.rkey = mr->rkey;
		r.addr = (uintptr_t)tgt;
		SVT_CHECK_OK(pthread_create(&t, NULL, race_writer, &r));
		while (atomic_load(&r.posted) < 2000 + (uint64_t)round * 37)
			;
		t0 = svt_now_ms();
		SVT_CHECK_OK(ibv_dereg_mr(mr));
		memcpy(seen, tgt, RACE_LEN); /* what is there once it is revoked */
		slowest = (svt_now_ms() - t0 > slowest ? svt_now_ms() - t0 : slowest);
		SVT_CHECK_OK(pthread_join(t, NULL));
		SVT_CHECK_EQ((int)r.last, (int)IBV_WC_REM_ACCESS_ERR);
		if (memcmp(seen, tgt, RACE_LEN))
			changed++;
		svt_pair_destroy(&p);
	}
	SVT_CHECK_EQ(changed, 0);
	/* waited for on the busy count, not until the 1 s a stopped peer gets */
	SVT_CHECK(slowest < 500);
	svt_log("%d rounds of WRITEs and atomic writes racing deregistration: none landed after "
		"it; the slowest returned in %llu ms",
		RACE_ROUNDS, (unsigned long long)slowest);
	free(tgt);
	free(seen);
}

#define WAIT_ROUNDS 4
#define WAIT_LEN (32u << 20) /* longer than SV_DIRECT_INLINE_MAX: the engine thread copies */

/*
 * Deregistration while a peer's access is in progress waits for it (asleep
 * on the QP's busy count, woken by the access that ends): the WRITE is being
 * copied (some of its bytes are there) when ibv_dereg_mr is called, all of it
 * is there when it returns, and nothing changes after.
 */
/* A WRITE of WAIT_LEN bytes of fill from src (smr) to tgt (registered on
 * p's b side, returned in *mr), posted on p's a side, once its copy has
 * begun: whether it was not over yet. */
static bool big_write_begun(struct svt_pair *p, uint8_t *src, struct ibv_mr *smr, uint8_t *tgt,
			    uint8_t fill, struct ibv_mr **mr)
{
	/* (a byte a quarter in: memcpy may store its first bytes last) */
	volatile uint8_t *first = tgt + WAIT_LEN / 4;
	uint64_t t0;

	memset(src, fill, WAIT_LEN);
	memset(tgt, 0, WAIT_LEN);
	*mr = svt_reg_mr(p->b.pd, tgt, WAIT_LEN, SVT_ACCESS_ALL);
	SVT_CHECK(svt_shared_pages(tgt));
	SVT_CHECK_OK(svt_post_send(p->a.qp, 2, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, src, WAIT_LEN,
				   smr->lkey, (uintptr_t)tgt, (*mr)->rkey, 0));
	t0 = svt_now_ms();
	while (!*first && svt_now_ms() - t0 < 10000)
		; /* the copy has begun */
	SVT_CHECK(*first);
	return !tgt[WAIT_LEN - 1];
}

static void test_revoke_waits(void)
{
	uint8_t *src = svt_alloc(WAIT_LEN), *tgt = svt_alloc(WAIT_LEN), *seen = svt_alloc(WAIT_LEN);
	uint64_t slowest = 0, t0, dt;
	struct svt_pair p;
	struct ibv_mr *smr, *mr;
	struct ibv_wc wc;
	int during = 0;

	svt_pair_create(&p, IBV_QPT_RC, NULL);
	SVT_CHECK_OK(svt_post_send(p.a.qp, 1, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, p.a.buf, 64,
				   p.a.mr->lkey, (uintptr_t)p.b.buf, p.b.mr->rkey, 0));
	svt_poll_ok(p.a.send_cq, 1, &wc, 0);
	smr = svt_reg_mr(p.a.pd, src, WAIT_LEN, SVT_ACCESS_ALL);
	for (int round = 0; round < WAIT_ROUNDS; round++) {
		during += big_write_begun(&p, src, smr, tgt, 0x40 + round, &mr);
		t0 = svt_now_ms();
		SVT_CHECK_OK(ibv_dereg_mr(mr));
		dt = svt_now_ms() - t0;
		memcpy(seen, tgt, WAIT_LEN);
		slowest = dt > slowest ? dt : slowest;
		wc = svt_poll_one(p.a.send_cq);
		SVT_CHECK_WC_OK(wc); /* it had passed its checks */
		SVT_CHECK_EQ(memcmp(seen, tgt, WAIT_LEN), 0);
		for (size_t i = 0; i < WAIT_LEN; i += 4093)
			SVT_CHECK_EQ(seen[i], 0x40 + round);
		SVT_CHECK_EQ(seen[WAIT_LEN - 1], 0x40 + round);
	}
	SVT_CHECK(slowest < 900);
	svt_log("%d deregistrations during a 32 MiB WRITE (%d caught it mid-copy): each waited for "
		"it, the slowest %llu ms",
		WAIT_ROUNDS, during, (unsigned long long)slowest);
	SVT_CHECK_OK(ibv_dereg_mr(smr));
	svt_pair_destroy(&p);
	free(src);
	free(tgt);
	free(seen);
}

/*
 * A QP's change of state is a revocation too: once ibv_modify_qp has moved
 * the target's QP to the error state, no byte of a WRITE that a peer began
 * through it lands any more (the verb waits out the access, outside the
 * QP's lock); the WRITE had passed its checks and completes.
 */
static void test_qp_error_waits(void)
{
	uint8_t *src = svt_alloc(WAIT_LEN), *tgt = svt_alloc(WAIT_LEN), *seen = svt_alloc(WAIT_LEN);
	struct ibv_qp_attr err = { .qp_state = IBV_QPS_ERR };
	uint64_t slowest = 0, t0, dt;
	int during = 0;

	for (int round = 0; round < WAIT_ROUNDS; round++) {
		struct svt_pair p;
		struct ibv_mr *smr, *mr;
		struct ibv_wc wc;

		svt_pair_create(&p, IBV_QPT_RC, NULL);
		/* (the peers meet first: then memory registered is shared) */
		SVT_CHECK_OK(svt_post_send(p.a.qp, 2, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED,
					   p.a.buf, 64, p.a.mr->lkey, (uintptr_t)p.b.buf,
					   p.b.mr->rkey, 0));
		svt_poll_ok(p.a.send_cq, 1, &wc, 0);
		smr = svt_reg_mr(p.a.pd, src, WAIT_LEN, SVT_ACCESS_ALL);
		during += big_write_begun(&p, src, smr, tgt, 0x60 + round, &mr);
		t0 = svt_now_ms();
		SVT_CHECK_OK(ibv_modify_qp(p.b.qp, &err, IBV_QP_STATE));
		dt = svt_now_ms() - t0;
		memcpy(seen, tgt, WAIT_LEN);
		slowest = dt > slowest ? dt : slowest;
		wc = svt_poll_one(p.a.send_cq);
		SVT_CHECK_WC_OK(wc); /* it had passed its checks */
		SVT_CHECK_EQ(memcmp(seen, tgt, WAIT_LEN), 0); /* nothing landed after */
		SVT_CHECK_EQ(seen[WAIT_LEN - 1], 0x60 + round);
		SVT_CHECK_OK(ibv_dereg_mr(mr));
		SVT_CHECK_OK(ibv_dereg_mr(smr));
		svt_pair_destroy(&p);
	}
	SVT_CHECK(slowest < 900);
	svt_log("%d moves to the error state during a 32 MiB WRITE (%d caught it mid-copy): "
		"each waited for it, the slowest %llu ms",
		WAIT_ROUNDS, during, (unsigned long long)slowest);
	free(src);
	free(tgt);
	free(seen);
}

#define LOCAL_ROUNDS 30
#define LOCAL_LEN (1u << 20)
#define POISON 0xa5

struct local_racer {
	struct svt_pair *p;
	uint8_t *src;
	uint32_t lkey, rkey;
	uint8_t *dst;
	_Atomic uint64_t done;
	uint64_t poisoned, wired;
	enum ibv_wc_status last;
};

/* WRITEs of the whole buffer, each completion awaited, until one fails;
 * a successful one executed in its post (its first byte, a mark that is
 * never the poison, there on return) must have copied no poisoned byte. */
static void *local_writer(void *arg)
{
	struct local_racer *r = arg;
	struct ibv_wc wc;

	for (uint64_t i = 0; i < 1000000; i++) {
		uint8_t mark = (uint8_t)(1 + i % 100);
		bool direct;

		r->src[0] = mark;
		SVT_CHECK_OK(svt_post_send(r->p->a.qp, i, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED,
					   r->src, LOCAL_LEN, r->lkey, (uintptr_t)r->dst, r->rkey,
					   0));
		direct = r->dst[0] == mark;
		wc = svt_poll_one(r->p->a.send_cq);
		if (wc.status != IBV_WC_SUCCESS) {
			r->last = wc.status;
			return NULL;
		}
		if (!direct)
			r->wired++;
		else if (memchr(r->dst, POISON, LOCAL_LEN))
			r->poisoned++;
		atomic_store(&r->done, i + 1);
	}
	r->last = IBV_WC_SUCCESS;
	return NULL;
}

static void test_local_revoke_race(void)
{
	uint64_t wired = 0, n = 0;

	for (int round = 0; round < LOCAL_ROUNDS; round++) {
		struct svt_pair p;
		struct local_racer r = { .p = &p };
		struct ibv_mr *smr, *dmr;
		struct ibv_wc wc;
		pthread_t t;

		/* connected first, so that the target's MR is exported from its
		 * registration: the WRITEs run on the direct path, where the copy
		 * is made in the post, under the MR read lock.  (By the wire, a
		 * payload may travel by reference and be read after the post: as
		 * on a NIC, deregistering a WQE's MR before it completes leaves
		 * what it carries undefined.) */
		svt_pair_create(&p, IBV_QPT_RC, NULL);
		SVT_CHECK_OK(svt_post_send(p.a.qp, 1, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, p.a.buf,
					   64, p.a.mr->lkey, (uintptr_t)p.b.buf, p.b.mr->rkey, 0));
		svt_poll_ok(p.a.send_cq, 1, &wc, 0);
		r.src = svt_alloc(LOCAL_LEN);
		r.dst = svt_alloc(LOCAL_LEN);
		memset(r.src, 0x11, LOCAL_LEN);
		smr = svt_reg_mr(p.a.pd, r.src, LOCAL_LEN, SVT_ACCESS_ALL);
		dmr = svt_reg_mr(p.b.pd, r.dst, LOCAL_LEN, SVT_ACCESS_ALL);
		SVT_CHECK(svt_shared_pages(r.dst)); /* exported */
		r.lkey = smr->lkey;
		r.rkey = dmr->rkey;
		SVT_CHECK_OK(pthread_create(&t, NULL, local_writer, &r));
		while (atomic_load(&r.done) < 50 + (uint64_t)round * 7)
			;
		SVT_CHECK_OK(ibv_dereg_mr(smr));
		memset(r.src, POISON, LOCAL_LEN); /* no longer the HCA's to read */
		SVT_CHECK_OK(pthread_join(t, NULL));
		SVT_CHECK_EQ((int)r.last, (int)IBV_WC_LOC_PROT_ERR);
		SVT_CHECK_EQ(r.poisoned, 0);
		wired += r.wired;
		n += atomic_load(&r.done);
		SVT_CHECK_OK(ibv_dereg_mr(dmr));
		svt_pair_destroy(&p);
		free(r.src);
		free(r.dst);
	}
	svt_log("%d rounds of 1 MiB WRITEs racing their source's deregistration: none copied "
		"after it (%llu WRITEs, %llu of them not executed in their post)",
		LOCAL_ROUNDS, (unsigned long long)n, (unsigned long long)wired);
	SVT_CHECK(wired < n / 2); /* the direct path is what is shown */
}

#define CHURN_MRS 80 /* more extents than a peer's mappings kept at once (64) */
#define CHURN_ROUNDS 25
#define CHURN_LEN (256u << 10) /* the long copy that a munmap must not cut */

/* The long WRITEs' QP and CQ, and when they stop. */
struct churn {
	struct ibv_qp *qp;
	struct ibv_cq *cq;
	atomic_bool stop;
};

struct churner {
	struct churn *c;
	uint64_t *src; /* CHURN_LEN bytes, registered as lkey */
	uint32_t lkey, rkey;
	volatile uint64_t *dst; /* the target MR, in this very process */
	uint64_t n, bad;
};

/* WRITEs of CHURN_LEN into one MR, each checked in place once completed
 * (its first and last words). */
static void *churn_writer(void *arg)
{
	struct churner *t = arg;
	const size_t last = CHURN_LEN / 8 - 1;

	while (!atomic_load(&t->c->stop)) {
		__atomic_store_n(&t->n, t->n + 1, __ATOMIC_RELAXED); /* main waits for one */
		t->src[0] = t->src[last] = t->n;
		struct ibv_wc wc;

		SVT_CHECK_OK(svt_post_send(t->c->qp, t->n, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED,
					   t->src, CHURN_LEN, t->lkey, (uintptr_t)t->dst, t->rkey, 0));
		wc = svt_poll_one(t->c->cq);
		if (wc.status != IBV_WC_SUCCESS || t->dst[0] != t->n || t->dst[last] != t->n)
			t->bad++;
	}
	return NULL;
}

static void test_mapping_churn(void)
{
	struct svt_pair p;
	struct churn c = { 0 };
	struct churner t = { .c = &c };
	struct ibv_mr *mr[CHURN_MRS], *src_mr;
	struct ibv_qp_init_attr qa = { 0 };
	struct ibv_qp *qpb;
	uint8_t *page[CHURN_MRS];
	size_t len[CHURN_MRS];
	uint64_t *src;
	struct ibv_wc wc;
	pthread_t th;
	long pg = sysconf(_SC_PAGESIZE);

	svt_pair_create(&p, IBV_QPT_RC, NULL);
	src = (uint64_t *)p.a.buf;
	/* the long WRITEs' QP pair, on the same two contexts */
	c.cq = svt_create_cq(p.a.ctx, 16, NULL);
	qa.send_cq = qa.recv_cq = c.cq;
	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = qa.cap.max_recv_wr = 16;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	c.qp = ibv_create_qp(p.a.pd, &qa);
	SVT_CHECK(c.qp);
	qa.send_cq = qa.recv_cq = p.b.send_cq;
	qpb = ibv_create_qp(p.b.pd, &qa);
	SVT_CHECK(qpb);
	svt_qp_link(c.qp, &p.a.gid, qpb, &p.b.gid, NULL);
	/* each MR in a mapping of its own, between two unregistered pages:
	 * an extent of its own; the first is the long WRITEs' */
	for (int i = 0; i < CHURN_MRS; i++) {
		uint8_t *m;

		len[i] = i ? (size_t)pg : CHURN_LEN;
		m = mmap(NULL, len[i] + 2 * (size_t)pg, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		SVT_CHECK(m != MAP_FAILED);
		page[i] = m + pg;
		memset(page[i], 0, len[i]);
		mr[i] = svt_reg_mr(p.b.pd, page[i], len[i], SVT_ACCESS_ALL);
	}
	t.src = svt_alloc(CHURN_LEN);
	src_mr = svt_reg_mr(p.a.pd, t.src, CHURN_LEN, SVT_ACCESS_ALL);
	t.lkey = src_mr->lkey;
	t.rkey = mr[0]->rkey;
	t.dst = (volatile uint64_t *)page[0];
	SVT_CHECK_OK(pthread_create(&th, NULL, churn_writer, &t));
	for (int round = 0; round < CHURN_ROUNDS; round++)
		for (int i = 1; i < CHURN_MRS; i++) {
			uint64_t v = ((uint64_t)round << 32) | (uint64_t)i;

			*src = v;
			SVT_CHECK_OK(svt_post_send(p.a.qp, v, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED,
						   src, 8, p.a.mr->lkey, (uintptr_t)page[i] + 8 * round,
						   mr[i]->rkey, 0));
			svt_poll_ok(p.a.send_cq, 1, &wc, 0);
			SVT_CHECK_EQ(*(volatile uint64_t *)(page[i] + 8 * round), v);
		}
	/* on a busy machine the long WRITEs' thread may not have run yet */
	for (uint64_t until = svt_now_ms() + 10000;
	     !__atomic_load_n(&t.n, __ATOMIC_RELAXED) && svt_now_ms() < until;)
		sched_yield();
	atomic_store(&c.stop, true);
	SVT_CHECK_OK(pthread_join(th, NULL));
	SVT_CHECK_EQ(t.bad, 0);
	SVT_CHECK(t.n > 0);
	svt_log("%d WRITEs into %d MRs in turn beside %llu of 256 KiB into one: all in place",
		CHURN_ROUNDS * (CHURN_MRS - 1), CHURN_MRS - 1, (unsigned long long)t.n);
	SVT_CHECK_OK(ibv_destroy_qp(c.qp));
	SVT_CHECK_OK(ibv_destroy_qp(qpb));
	SVT_CHECK_OK(ibv_destroy_cq(c.cq));
	SVT_CHECK_OK(ibv_dereg_mr(src_mr));
	free(t.src);
	for (int i = 0; i < CHURN_MRS; i++) {
		SVT_CHECK_OK(ibv_dereg_mr(mr[i]));
		munmap(page[i] - pg, len[i] + 2 * (size_t)pg);
	}
	svt_pair_destroy(&p);
}

/*
 * Last-byte polling.  The target's thread waits for round r's tag in the
 * last byte of the range, then checks the bytes before it hold round r's
 * fill; the initiator writes round r only once the thread has taken round
 * r - 1.
 */
struct last_byte {
	volatile uint8_t *buf;
	size_t len;
	unsigned rounds;
	atomic_uint round, seen;
	atomic_bool stop; /* no more rounds than seen */
	atomic_uint bad_round;
	size_t bad_off, bad_count;
};

static uint8_t lb_fill(unsigned r)
{
	return (r & 1) ? 0x55 : 0xaa;
}

static uint8_t lb_tag(unsigned r)
{
	return (uint8_t)(1 + r % 250);
}

static void *last_byte_poller(void *arg)
{
	struct last_byte *l = arg;

	for (unsigned r = 1; r <= l->rounds; r++) {
		while (atomic_load(&l->round) != r) {
			if (atomic_load(&l->stop))
				return NULL;
			sched_yield();
		}
		while (l->buf[l->len - 1] != lb_tag(r))
			;
		for (size_t i = 0; i + 1 < l->len; i++) {
			if (l->buf[i] == lb_fill(r))
				continue;
			if (!atomic_load(&l->bad_round)) {
				l->bad_off = i;
				/* a second look: how many are still stale */
				for (size_t j = 0; j + 1 < l->len; j++)
					l->bad_count += l->buf[j] != lb_fill(r);
				atomic_store(&l->bad_round, r);
			}
			break;
		}
		atomic_store(&l->seen, r);
	}
	return NULL;
}

/*
 * Each round is a hand-off between this thread and the poller, so on a
 * machine with more runnable threads than cores a round costs a time slice
 * or two rather than microseconds: 30,000 rounds took over a minute beside
 * busy loops, and the test ran past its watchdog.  A case stops after
 * LB_CASE_MS once it has done LB_MIN_ROUNDS (or all of them); the rounds
 * done are returned and logged.  Alone, every case does all its rounds.
 */
#define LB_CASE_MS 12000
#define LB_MIN_ROUNDS 500u

static unsigned write_rounds(struct svt_pair *p, size_t len, int nsge, bool inl, unsigned rounds)
{
	struct last_byte l = { .buf = p->b.buf, .len = len, .rounds = rounds };
	uint8_t *src = p->a.buf;
	uint64_t until = svt_now_ms() + LB_CASE_MS;
	unsigned done = 0;
	pthread_t t;

	SVT_CHECK_OK(pthread_create(&t, NULL, last_byte_poller, &l));
	for (unsigned r = 1; r <= rounds; r++) {
		struct ibv_sge sge[3];
		struct ibv_send_wr wr, *bad = NULL;
		struct ibv_wc wc;
		size_t piece = len / (size_t)nsge;
		uint64_t deadline;

		memset(src, lb_fill(r), len - 1);
		src[len - 1] = lb_tag(r);
		/* an SGL's pieces lie in reverse order in a's buffer, after the
		 * first len bytes: the WRITE still lands in the order of the list */
		for (int i = 0; i < nsge; i++) {
			size_t off = (size_t)i * piece;
			size_t n = i == nsge - 1 ? len - off : piece;
			uint8_t *at = src + off;

			if (nsge > 1) {
				at = src + len + (size_t)(nsge - 1 - i) * (piece + 64);
				memcpy(at, src + off, n);
			}
			sge[i] = (struct ibv_sge){ (uintptr_t)at, (uint32_t)n, p->a.mr->lkey };
		}
		memset(&wr, 0, sizeof(wr));
		wr.wr_id = r;
		wr.sg_list = sge;
		wr.num_sge = nsge;
		wr.opcode = IBV_WR_RDMA_WRITE;
		wr.send_flags = IBV_SEND_SIGNALED | (inl ? IBV_SEND_INLINE : 0);
		wr.wr.rdma.remote_addr = (uintptr_t)p->b.buf;
		wr.wr.rdma.rkey = p->b.mr->rkey;
		atomic_store(&l.round, r);
		SVT_CHECK_OK(ibv_post_send(p->a.qp, &wr, &bad));
		svt_poll_ok(p->a.send_cq, 1, &wc, 0);
		deadline = svt_now_ms() + 10000;
		while (atomic_load(&l.seen) != r) {
			SVT_CHECK_MSG(svt_now_ms() < deadline, "round %u of %zu B never seen", r, len);
			sched_yield();
		}
		done = r;
		if (r >= LB_MIN_ROUNDS && r < rounds && svt_now_ms() >= until) {
			/* the poller stops at the round it is told is the last */
			atomic_store(&l.stop, true);
			break;
		}
	}
	SVT_CHECK_OK(pthread_join(t, NULL));
	SVT_CHECK_MSG(!atomic_load(&l.bad_round),
		      "WRITE of %zu B (%d SGEs%s): round %u, its last byte in place while byte %zu "
		      "still held the previous round's (%zu bytes stale at a second look)",
		      len, nsge, inl ? ", inline" : "", atomic_load(&l.bad_round), l.bad_off,
		      l.bad_count);
	return done;
}

static void test_last_byte_last(void)
{
	static const struct {
		size_t len;
		int nsge;
		bool inl;
		unsigned rounds;
	} cases[] = {
		{ 12, 1, true, 3000 },	    { 12, 1, false, 3000 },    { 100, 1, false, 3000 },
		{ 2113, 1, false, 30000 },  { 4097, 1, false, 30000 },  { 8193, 1, false, 3000 },
		{ 65536, 1, false, 3000 },  { 65536, 3, false, 3000 }, { 262144, 1, false, 500 },
		{ 1u << 20, 1, false, 50 },
	};
	struct svt_pair_opts o;
	struct svt_pair p;
	struct ibv_wc wc;

	svt_pair_opts_default(&o, IBV_QPT_RC);
	o.buf_len = 2u << 20; /* a's second half: the pieces of an SGL */
	svt_pair_create(&p, IBV_QPT_RC, &o);
	SVT_CHECK_OK(svt_post_send(p.a.qp, 1, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, p.a.buf, 64,
				   p.a.mr->lkey, (uintptr_t)p.b.buf, p.b.mr->rkey, 0));
	svt_poll_ok(p.a.send_cq, 1, &wc, 0);
	SVT_CHECK(svt_shared_pages(p.b.buf)); /* the WRITEs are executed by the initiator */
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		unsigned done = write_rounds(&p, cases[k].len, cases[k].nsge, cases[k].inl,
					     cases[k].rounds);

		svt_log("%u WRITEs of %zu B (%d SGEs%s): each whole when its last byte was%s",
			done, cases[k].len, cases[k].nsge, cases[k].inl ? ", inline" : "",
			done < cases[k].rounds ? " (the case's time was up: a busy machine)" : "");
	}
	svt_pair_destroy(&p);
}

static const struct svt_child_role roles[] = {
	{ "target", target },
	{ NULL, NULL },
};

/* hugetlb pages: as root (CI), a few are reserved for the test if the host
 * has none, and the setting is put back at exit */
static long hugepages_before = -1;

static void hugepages_restore(void)
{
	FILE *f = fopen("/proc/sys/vm/nr_hugepages", "w");

	if (f) {
		fprintf(f, "%ld\n", hugepages_before);
		fclose(f);
	}
}

static void hugepages_reserve(void)
{
	FILE *f = fopen("/proc/sys/vm/nr_hugepages", "r");
	long n = -1;

	if (!f)
		return;
	if (fscanf(f, "%ld", &n) != 1)
		n = -1;
	fclose(f);
	if (n != 0 || geteuid() != 0)
		return;
	f = fopen("/proc/sys/vm/nr_hugepages", "w");
	if (!f)
		return;
	fprintf(f, "4\n"); /* the target's region, and the memfd that replaces it */
	if (fclose(f) == 0) {
		hugepages_before = 0;
		atexit(hugepages_restore);
	}
}

/* A pair whose QPs have met (their memory is shared) and whose first
 * WRITE ran on the peer's memory: the next lone one takes the shortcut. */
static void shortcut_pair(struct svt_pair *p, int sq_sig_all)
{
	struct svt_pair_opts o;
	struct ibv_wc wc;

	svt_pair_opts_default(&o, IBV_QPT_RC);
	o.qp.sq_sig_all = sq_sig_all;
	svt_pair_create(p, IBV_QPT_RC, &o);
	for (int i = 0; i < 2; i++) {
		SVT_CHECK_OK(svt_post_send(p->a.qp, 1, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED,
					   p->a.buf, 64, p->a.mr->lkey, (uintptr_t)p->b.buf,
					   p->b.mr->rkey, 0));
		svt_poll_ok(p->a.send_cq, 1, &wc, 0);
	}
	SVT_CHECK(svt_shared_pages(p->b.buf));
}

static void test_post_shortcut(void)
{
	struct ibv_qp_attr attr;
	struct ibv_qp_init_attr init;
	struct svt_pair p;
	struct ibv_wc wc;
	uint8_t *a, *b;
	uint8_t small[16];

	shortcut_pair(&p, 0);
	a = p.a.buf;
	b = p.b.buf;
	/* unsignaled ones complete silently, the signaled one once */
	for (int i = 0; i <= 20; i++) {
		svt_fill(a + 4096 + 8 * i, 8, 30 + i);
		SVT_CHECK_OK(svt_post_send(p.a.qp, 100 + i, IBV_WR_RDMA_WRITE,
					   i == 20 ? IBV_SEND_SIGNALED : 0, a + 4096 + 8 * i, 8,
					   p.a.mr->lkey, (uintptr_t)(b + 4096 + 8 * i), p.b.mr->rkey,
					   0));
		SVT_CHECK_EQ(memcmp(b + 4096 + 8 * i, a + 4096 + 8 * i, 8), 0); /* on return */
	}
	wc = svt_poll_one(p.a.send_cq);
	SVT_CHECK_WC_OK(wc);
	SVT_CHECK_EQ(wc.wr_id, 120);
	SVT_CHECK_EQ(wc.opcode, IBV_WC_RDMA_WRITE);
	SVT_CHECK_EQ(wc.qp_num, p.a.qp->qp_num);
	svt_expect_no_wc(p.a.send_cq, 100);

	/* READs the same way, into the local buffer by the time the post returns */
	for (int i = 0; i <= 5; i++) {
		svt_fill(b + 12288 + 8 * i, 8, 40 + i);
		SVT_CHECK_OK(svt_post_send(p.a.qp, 150 + i, IBV_WR_RDMA_READ,
					   (i == 5 ? IBV_SEND_SIGNALED : 0) |
						   (i == 2 ? IBV_SEND_INLINE : 0),
					   a + 12288 + 8 * i, 8, p.a.mr->lkey,
					   (uintptr_t)(b + 12288 + 8 * i), p.b.mr->rkey, 0));
		SVT_CHECK_EQ(memcmp(a + 12288 + 8 * i, b + 12288 + 8 * i, 8), 0);
	}
	wc = svt_poll_one(p.a.send_cq);
	SVT_CHECK_WC_OK(wc);
	SVT_CHECK_EQ(wc.wr_id, 155);
	SVT_CHECK_EQ(wc.opcode, IBV_WC_RDMA_READ);
	SVT_CHECK_EQ(wc.byte_len, 8);
	svt_expect_no_wc(p.a.send_cq, 100);

	/* inline: read at the post, no lkey */
	SVT_CHECK_OK(ibv_query_qp(p.a.qp, &attr, IBV_QP_CAP, &init));
	SVT_CHECK(attr.cap.max_inline_data >= sizeof(small));
	svt_fill(small, sizeof(small), 60);
	SVT_CHECK_OK(svt_post_send(p.a.qp, 200, IBV_WR_RDMA_WRITE,
				   IBV_SEND_SIGNALED | IBV_SEND_INLINE, small, sizeof(small),
				   0xdeadbeef, (uintptr_t)(b + 8192), p.b.mr->rkey, 0));
	memset(small, 0, sizeof(small));
	svt_poll_ok(p.a.send_cq, 1, &wc, 0);
	SVT_CHECK_EQ(wc.wr_id, 200);
	for (size_t i = 0; i < sizeof(small); i++)
		SVT_CHECK_EQ(b[8192 + i], svt_pattern_byte(60, i));

	/* inline beyond the QP's cap: refused, nothing done */
	{
		struct ibv_sge sge = { (uintptr_t)a, attr.cap.max_inline_data + 1, 0 };
		struct ibv_send_wr wr = { .wr_id = 201, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_RDMA_WRITE,
					  .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE },
				   *bad = NULL;

		wr.wr.rdma.remote_addr = (uintptr_t)(b + 16384);
		wr.wr.rdma.rkey = p.b.mr->rkey;
		SVT_CHECK_EQ(ibv_post_send(p.a.qp, &wr, &bad), EINVAL);
		SVT_CHECK(bad == &wr);
		svt_expect_no_wc(p.a.send_cq, 100);
		SVT_CHECK_EQ(b[16384], 0);
	}
	svt_fill(a, 64, 61);
	SVT_CHECK_OK(svt_post_send(p.a.qp, 202, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, a, 64,
				   p.a.mr->lkey, (uintptr_t)(b + 16384), p.b.mr->rkey, 0));
	svt_poll_ok(p.a.send_cq, 1, &wc, 0);
	SVT_CHECK_EQ(memcmp(b + 16384, a, 64), 0);

	/* an rkey never issued: the wire's responder answers, nothing lands */
	svt_fill(a, 64, 62);
	SVT_CHECK_OK(svt_post_send(p.a.qp, 203, IBV_WR_RDMA_WRITE, 0, a, 64, p.a.mr->lkey,
				   (uintptr_t)(b + 20480), p.b.mr->rkey ^ 0x5a5a00, 0));
	SVT_CHECK_OK(svt_post_send(p.a.qp, 204, IBV_WR_RDMA_WRITE, 0, a, 64, p.a.mr->lkey,
				   (uintptr_t)(b + 20480), p.b.mr->rkey, 0));
	wc = svt_poll_one(p.a.send_cq);
	SVT_CHECK_EQ(wc.wr_id, 203);
	SVT_CHECK_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
	wc = svt_poll_one(p.a.send_cq);
	SVT_CHECK_EQ(wc.wr_id, 204);
	SVT_CHECK_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
	for (int i = 0; i < 64; i++)
		SVT_CHECK_EQ(b[20480 + i], 0);
	svt_pair_destroy(&p);

	/* sq_sig_all: every one completes */
	shortcut_pair(&p, 1);
	SVT_CHECK_OK(svt_post_send(p.a.qp, 300, IBV_WR_RDMA_WRITE, 0, p.a.buf, 8, p.a.mr->lkey,
				   (uintptr_t)p.b.buf, p.b.mr->rkey, 0));
	svt_poll_ok(p.a.send_cq, 1, &wc, 0);
	SVT_CHECK_EQ(wc.wr_id, 300);

	/* a READ into memory the MR does not let it write: a local protection error */
	{
		struct ibv_mr *ro = svt_reg_mr(p.a.pd, (uint8_t *)p.a.buf + 32768, 4096, 0);

		SVT_CHECK_OK(svt_post_send(p.a.qp, 302, IBV_WR_RDMA_READ, 0,
					   (uint8_t *)p.a.buf + 32768, 8, ro->lkey,
					   (uintptr_t)p.b.buf, p.b.mr->rkey, 0));
		wc = svt_poll_one(p.a.send_cq);
		SVT_CHECK_EQ(wc.wr_id, 302);
		SVT_CHECK_EQ(wc.status, IBV_WC_LOC_PROT_ERR);
		SVT_CHECK_OK(ibv_dereg_mr(ro));
	}
	svt_pair_destroy(&p);
	shortcut_pair(&p, 1);

	/* an lkey that names nothing: a local protection error, the QP in ERR */
	SVT_CHECK_OK(svt_post_send(p.a.qp, 301, IBV_WR_RDMA_WRITE, 0, p.a.buf, 8,
				   p.a.mr->lkey ^ 0x5a5a00, (uintptr_t)p.b.buf, p.b.mr->rkey, 0));
	wc = svt_poll_one(p.a.send_cq);
	SVT_CHECK_EQ(wc.wr_id, 301);
	SVT_CHECK_EQ(wc.status, IBV_WC_LOC_PROT_ERR);
	SVT_CHECK_OK(ibv_query_qp(p.a.qp, &attr, IBV_QP_STATE, &init));
	SVT_CHECK_EQ(attr.qp_state, IBV_QPS_ERR);
	svt_pair_destroy(&p);

	/* two-sided: SENDs placed into the peer's receives by the post, once
	 * the peer's queue has moved (the first SENDs go by the wire) */
	shortcut_pair(&p, 0);
	a = p.a.buf;
	b = p.b.buf;
	for (int i = 0; i < 20; i++)
		SVT_CHECK_OK(svt_post_recv(p.b.qp, 400 + i, b + 1024 * i, 64, p.b.mr->lkey));
	for (int i = 0; i < 3; i++) {
		svt_fill(a + 1024 * i, 8, 70 + i);
		SVT_CHECK_OK(svt_post_send(p.a.qp, 500 + i, IBV_WR_SEND, IBV_SEND_SIGNALED,
					   a + 1024 * i, 8, p.a.mr->lkey, 0, 0, 0));
		svt_poll_ok(p.a.send_cq, 1, &wc, 0);
		svt_poll_ok(p.b.recv_cq, 1, &wc, 0);
		SVT_CHECK_EQ(wc.wr_id, 400 + i);
	}
	for (int i = 3; i < 13; i++) { /* unsignaled, each placed by its post's return */
		svt_fill(a + 1024 * i, 8, 70 + i);
		SVT_CHECK_OK(svt_post_send(p.a.qp, 500 + i, IBV_WR_SEND, 0, a + 1024 * i, 8,
					   p.a.mr->lkey, 0, 0, 0));
		SVT_CHECK_EQ(memcmp(b + 1024 * i, a + 1024 * i, 8), 0);
	}
	svt_fill(a + 1024 * 13, 24, 83);
	SVT_CHECK_OK(svt_post_send(p.a.qp, 513, IBV_WR_SEND_WITH_IMM, IBV_SEND_SIGNALED,
				   a + 1024 * 13, 24, p.a.mr->lkey, 0, 0, 0x1234567));
	svt_fill(small, sizeof(small), 84);
	SVT_CHECK_OK(svt_post_send(p.a.qp, 514, IBV_WR_SEND, IBV_SEND_SIGNALED | IBV_SEND_INLINE,
				   small, sizeof(small), 0xdeadbeef, 0, 0, 0));
	memset(small, 0, sizeof(small));
	svt_fill(a + 1024 * 15, 32, 85);
	SVT_CHECK_OK(svt_post_send(p.a.qp, 515, IBV_WR_RDMA_WRITE_WITH_IMM, IBV_SEND_SIGNALED,
				   a + 1024 * 15, 32, p.a.mr->lkey, (uintptr_t)(b + 40000),
				   p.b.mr->rkey, 0x89abcde));
	for (int i = 513; i <= 515; i++) {
		wc = svt_poll_one(p.a.send_cq);
		SVT_CHECK_WC_OK(wc);
		SVT_CHECK_EQ(wc.wr_id, i);
		SVT_CHECK_EQ(wc.opcode, (i == 515 ? IBV_WC_RDMA_WRITE : IBV_WC_SEND));
	}
	svt_expect_no_wc(p.a.send_cq, 100);
	for (int i = 3; i < 16; i++) {
		wc = svt_poll_one(p.b.recv_cq);
		SVT_CHECK_WC_OK(wc);
		SVT_CHECK_EQ(wc.wr_id, 400 + i);
		SVT_CHECK_EQ(wc.qp_num, p.b.qp->qp_num);
		SVT_CHECK_EQ(wc.opcode, (i == 15 ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV));
		SVT_CHECK_EQ(wc.byte_len, (i < 13 ? 8u : i == 13 ? 24u : i == 14 ? 16u : 32u));
		SVT_CHECK_EQ(!!(wc.wc_flags & IBV_WC_WITH_IMM), (i == 13 || i == 15));
		if (i == 13 || i == 15)
			SVT_CHECK_EQ(ntohl(wc.imm_data), (i == 13 ? 0x1234567u : 0x89abcdeu));
	}
	for (int i = 3; i < 14; i++)
		SVT_CHECK_EQ(memcmp(b + 1024 * i, a + 1024 * i, i == 13 ? 24 : 8), 0);
	for (size_t i = 0; i < sizeof(small); i++)
		SVT_CHECK_EQ(b[1024 * 14 + i], svt_pattern_byte(84, i));
	SVT_CHECK_EQ(memcmp(b + 40000, a + 1024 * 15, 32), 0);
	svt_expect_no_wc(p.b.recv_cq, 100);
	svt_pair_destroy(&p);

	/* a READ's inline flag means nothing: its lkey is checked all the same */
	shortcut_pair(&p, 0);
	SVT_CHECK_OK(svt_post_send(p.a.qp, 303, IBV_WR_RDMA_READ, IBV_SEND_INLINE, p.a.buf, 8,
				   p.a.mr->lkey ^ 0x5a5a00, (uintptr_t)p.b.buf, p.b.mr->rkey, 0));
	wc = svt_poll_one(p.a.send_cq);
	SVT_CHECK_EQ(wc.wr_id, 303);
	SVT_CHECK_EQ(wc.status, IBV_WC_LOC_PROT_ERR);
	svt_pair_destroy(&p);
	svt_log("the post's shortcut: completions as asked, inline read at the post, "
		"errors as the usual post gives them");
}

int main(int argc, char **argv)
{
	const char *tp = getenv("SOFTVERBS_TRANSPORT");

	struct svt_pair p;

	svt_child_dispatch(argc, argv, roles);
	svt_watchdog(230); /* below CTest's 240 s: counts of operations, slow beside busy loops */
	if (tp && (!strcmp(tp, "tcp") || !strcmp(tp, "rocev2")))
		svt_skip("pages are shared with peers of this host over shm only");
	pair_with_peer(&p);
	test_no_store_lost(&p);
	test_fork_copy(&p);
	test_dereg_private(&p);
	test_fork_early_store(&p);
	test_fork_heap(&p);
	svt_pair_destroy(&p);
	test_revoke_race();
	test_revoke_waits();
	test_qp_error_waits();
	test_local_revoke_race();
	test_mapping_churn();
	hugepages_reserve();
	test_stopped_target();
	test_post_shortcut();
	test_last_byte_last();
	return 0;
}
