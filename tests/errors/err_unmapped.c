/*
 * err_unmapped - registered memory the application unmapped (or a file
 * mapping truncated under it) fails the operation that touches it, never
 * the process, RC.
 *
 * A NIC pins registered pages; softverbs reads and writes the mapping, so
 * an access to a page that is gone would raise SIGSEGV (SIGBUS past the end
 * of a file).  Each case registers a region, takes its pages away (the
 * range then reserved PROT_NONE, so that nothing else is mapped there), and
 * posts one operation that touches it:
 *   - remote side: RDMA WRITE (small, and large enough to be received in
 *     place by the stream transports), RDMA READ (small, large), CMP_AND_SWP,
 *     FETCH_AND_ADD -> the initiator gets IBV_WC_REM_ACCESS_ERR, as for an
 *     rkey the MR does not cover;
 *   - local side: SEND and RDMA WRITE gathered from it -> LOC_PROT_ERR;
 *     RDMA READ and an atomic's result into it -> LOC_PROT_ERR;
 *   - a receive WQE whose buffer is gone -> the receive fails
 *     (LOC_PROT_ERR) and the sender gets an error completion.
 * The same with a memfd mapping truncated to nothing (SIGBUS, not SIGSEGV).
 * A pair that is not involved moves data correctly after every case, and
 * the process is still here to check it.
 */
#include "err_util.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define SMALL 128
#define LARGE (256u << 10)
#define SEED 0x5151

enum hole { H_MUNMAP, H_TRUNCATE };

enum kase {
	C_WRITE_SMALL,
	C_WRITE_LARGE,
	C_READ_SMALL,
	C_READ_LARGE,
	C_CAS,
	C_FADD,
	C_SEND_FROM,
	C_WRITE_FROM,
	C_READ_INTO,
	C_ATOMIC_INTO,
	C_RECV_INTO,
	C_COUNT
};
static const char *const kase_name[] = {
	"RDMA WRITE 128 B into",  "RDMA WRITE 256 KiB into", "RDMA READ 128 B from",
	"RDMA READ 256 KiB from", "CMP_AND_SWP on",	      "FETCH_AND_ADD on",
	"SEND gathered from",	  "RDMA WRITE gathered from", "RDMA READ result into",
	"atomic result into",	  "SEND received into",
};

/* A region of len bytes, registered on pd, whose pages are then taken away. */
static struct ibv_mr *holed_mr(struct ibv_pd *pd, size_t len, enum hole h, void **addr)
{
	struct ibv_mr *mr;
	int fd = -1;
	void *p;

	if (h == H_TRUNCATE) {
		fd = memfd_create("svt-unmapped", 0);
		SVT_CHECK(fd >= 0);
		SVT_CHECK_OK(ftruncate(fd, (off_t)len));
		p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	} else {
		p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	}
	SVT_CHECK(p != MAP_FAILED);
	memset(p, 0x33, len);
	mr = svt_reg_mr(pd, p, len, SVT_ACCESS_ALL);
	if (h == H_TRUNCATE) {
		SVT_CHECK_OK(ftruncate(fd, 0)); /* the mapping stays, its pages go */
		close(fd);
	} else {
		/* the pages go as with munmap(2), but the range stays reserved
		 * (PROT_NONE, no pages): after a bare munmap, the next mapping
		 * of this process (a thread's stack, a sanitizer's large
		 * allocation) could land there, and the operation then touched
		 * real memory and succeeded (seen once under ASan in CI) */
		SVT_CHECK(mmap(p, len, PROT_NONE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
			       -1, 0) == p);
	}
	*addr = p;
	return mr;
}

/* An uninvolved pair still carries a WRITE and a READ, byte for byte. */
static void check_bystander(struct svt_pair *q, uint32_t seed)
{
	svt_fill(q->a.buf, 4096, seed);
	SVT_CHECK_OK(svt_post_send(q->a.qp, 10, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, q->a.buf,
				   4096, q->a.mr->lkey, (uintptr_t)q->b.buf, q->b.mr->rkey, 0));
	errt_expect_wc(q->a.send_cq, 10, IBV_WC_SUCCESS, 0);
	SVT_CHECK_FILL(q->b.buf, 4096, seed);
	SVT_CHECK_OK(svt_post_send(q->a.qp, 11, IBV_WR_RDMA_READ, IBV_SEND_SIGNALED,
				   (uint8_t *)q->a.buf + 8192, 4096, q->a.mr->lkey,
				   (uintptr_t)q->b.buf, q->b.mr->rkey, 0));
	errt_expect_wc(q->a.send_cq, 11, IBV_WC_SUCCESS, 0);
	SVT_CHECK_FILL((uint8_t *)q->a.buf + 8192, 4096, seed);
}

static void run_case(struct svt_pair *bystander, enum kase k, enum hole h)
{
	struct svt_pair_opts o;
	struct svt_pair p;
	struct ibv_mr *mr;
	void *hole;
	bool remote = k <= C_FADD, big = k == C_WRITE_LARGE || k == C_READ_LARGE;
	uint32_t len = big ? LARGE : SMALL;
	struct svt_side *a, *b;
	enum ibv_wc_status expect = remote ? IBV_WC_REM_ACCESS_ERR : IBV_WC_LOC_PROT_ERR;

	svt_pair_opts_default(&o, IBV_QPT_RC);
	o.buf_len = 2 * LARGE;
	o.separate_cqs = true;
	svt_pair_create(&p, IBV_QPT_RC, &o);
	a = &p.a;
	b = &p.b;
	/* the connection (over shm: its ring mappings) is made before the hole,
	 * so that nothing new is mapped where the hole is */
	SVT_CHECK_OK(svt_post_send(a->qp, 9, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, a->buf, 8,
				   a->mr->lkey, (uintptr_t)b->buf, b->mr->rkey, 0));
	errt_expect_wc(a->send_cq, 9, IBV_WC_SUCCESS, 0);
	svt_fill(a->buf, a->buf_len, SEED);
	/* the hole is on the target (b) for remote cases, on a for local ones */
	mr = holed_mr((remote || k == C_RECV_INTO) ? b->pd : a->pd, LARGE, h, &hole);

	switch (k) {
	case C_WRITE_SMALL:
	case C_WRITE_LARGE:
		SVT_CHECK_OK(svt_post_send(a->qp, 1, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, a->buf,
					   len, a->mr->lkey, (uintptr_t)hole, mr->rkey, 0));
		break;
	case C_READ_SMALL:
	case C_READ_LARGE:
		SVT_CHECK_OK(svt_post_send(a->qp, 1, IBV_WR_RDMA_READ, IBV_SEND_SIGNALED, a->buf,
					   len, a->mr->lkey, (uintptr_t)hole, mr->rkey, 0));
		break;
	case C_CAS:
		SVT_CHECK_OK(svt_post_atomic(a->qp, 1, IBV_WR_ATOMIC_CMP_AND_SWP,
					     IBV_SEND_SIGNALED, a->buf, a->mr->lkey,
					     (uintptr_t)hole, mr->rkey, 0, 1));
		break;
	case C_FADD:
		SVT_CHECK_OK(svt_post_atomic(a->qp, 1, IBV_WR_ATOMIC_FETCH_AND_ADD,
					     IBV_SEND_SIGNALED, a->buf, a->mr->lkey,
					     (uintptr_t)hole, mr->rkey, 1, 0));
		break;
	case C_SEND_FROM:
		SVT_CHECK_OK(svt_post_recv(b->qp, 5, b->buf, SMALL, b->mr->lkey));
		SVT_CHECK_OK(svt_post_send(a->qp, 1, IBV_WR_SEND, IBV_SEND_SIGNALED, hole, SMALL,
					   mr->lkey, 0, 0, 0));
		break;
	case C_WRITE_FROM:
		SVT_CHECK_OK(svt_post_send(a->qp, 1, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, hole,
					   LARGE, mr->lkey, (uintptr_t)b->buf, b->mr->rkey, 0));
		break;
	case C_READ_INTO:
		SVT_CHECK_OK(svt_post_send(a->qp, 1, IBV_WR_RDMA_READ, IBV_SEND_SIGNALED, hole,
					   SMALL, mr->lkey, (uintptr_t)b->buf, b->mr->rkey, 0));
		break;
	case C_ATOMIC_INTO:
		SVT_CHECK_OK(svt_post_atomic(a->qp, 1, IBV_WR_ATOMIC_FETCH_AND_ADD,
					     IBV_SEND_SIGNALED, hole, mr->lkey,
					     (uintptr_t)b->buf, b->mr->rkey, 1, 0));
		break;
	case C_RECV_INTO:
		SVT_CHECK_OK(svt_post_recv(b->qp, 5, hole, SMALL, mr->lkey));
		SVT_CHECK_OK(svt_post_send(a->qp, 1, IBV_WR_SEND, IBV_SEND_SIGNALED, a->buf, SMALL,
					   a->mr->lkey, 0, 0, 0));
		break;
	case C_COUNT:
		break;
	}

	if (k == C_RECV_INTO) {
		struct ibv_wc wc = svt_poll_one(b->recv_cq);

		SVT_CHECK_EQ(wc.wr_id, 5);
		SVT_CHECK_EQ(wc.status, IBV_WC_LOC_PROT_ERR);
		wc = svt_poll_one(a->send_cq);
		SVT_CHECK_EQ(wc.wr_id, 1);
		SVT_CHECK(wc.status != IBV_WC_SUCCESS);
		svt_log("ok: %-26s %s -> receive LOC_PROT_ERR, sender %s", kase_name[k],
			h == H_MUNMAP ? "unmapped memory " : "truncated memfd ", errt_st(wc.status));
	} else {
		struct ibv_wc wc = errt_expect_wc(a->send_cq, 1, expect, 0);

		SVT_CHECK_EQ(wc.qp_num, a->qp->qp_num);
		ERRT_CHECK_STATE(a->qp, IBV_QPS_ERR);
		if (k == C_SEND_FROM)
			svt_expect_no_wc(b->recv_cq, 50); /* nothing was sent */
		/* the local buffer of a remote case is untouched (a READ's too) */
		if (remote)
			SVT_CHECK_FILL(a->buf, a->buf_len, SEED);
		svt_log("ok: %-26s %s -> %s", kase_name[k],
			h == H_MUNMAP ? "unmapped memory " : "truncated memfd ", errt_st(expect));
	}
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	SVT_CHECK_OK(munmap(hole, LARGE)); /* the reservation, or the truncated mapping */
	svt_pair_destroy(&p);
	check_bystander(bystander, SEED + 1 + (uint32_t)k);
}

static void own_handler(int sig)
{
	(void)sig;
	_exit(42);
}

/*
 * A fault that is the program's own, outside softverbs, is handled as
 * without softverbs: by the handler the program installed before opening a
 * device, else by the default action (or a sanitizer's report).
 */
static void check_own_faults(bool with_handler)
{
	pid_t pid = fork();
	int st;

	SVT_CHECK(pid >= 0);
	if (!pid) {
		struct svt_pair q;

		if (with_handler)
			signal(SIGSEGV, own_handler);
		svt_pair_create(&q, IBV_QPT_RC, NULL);
		volatile int *bad = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		SVT_CHECK(bad != MAP_FAILED);
		*bad = 1; /* the program's own bug */
		_exit(0);
	}
	SVT_CHECK_EQ(waitpid(pid, &st, 0), pid);
	if (with_handler) {
		SVT_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 42);
		svt_log("ok: the program's own SIGSEGV handler still gets its own faults");
	} else {
		SVT_CHECK(!WIFEXITED(st) || WEXITSTATUS(st) != 0);
		svt_log("ok: the program's own fault still kills it (%s %d)",
			WIFSIGNALED(st) ? "signal" : "exit", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
	}
}

int main(void)
{
	struct svt_pair_opts o;
	struct svt_pair bystander;

	/* the remote-side cases are about the target's engine touching a hole;
	 * with shared pages (SOFTVERBS_SHARED_MR) a peer of this host writes
	 * the pages the MR was given, as a NIC would, and succeeds */
	setenv("SOFTVERBS_SHARED_MR", "0", 1);
	svt_watchdog(120);
	svt_pair_opts_default(&o, IBV_QPT_RC);
	o.buf_len = 16384;
	svt_pair_create(&bystander, IBV_QPT_RC, &o);
	for (int h = H_MUNMAP; h <= H_TRUNCATE; h++)
		for (int k = 0; k < C_COUNT; k++)
			run_case(&bystander, (enum kase)k, (enum hole)h);
	svt_pair_destroy(&bystander);
	check_own_faults(true);
	check_own_faults(false);
	return 0;
}
