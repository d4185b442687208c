/*
 * unit_direct_send: RC SEND between two processes of this host, over shm,
 * where the sender executes the SEND itself on the receiver's posted
 * receive (as it already executes WRITE, READ and atomics: unit_peer_mem);
 * the parent is the sender, the spawned child the receiver, each part on
 * a QP pair of its own between the same two contexts.
 *   - the receiver stopped: it registers a malloc'd 4 MiB buffer with
 *     LOCAL_WRITE | REMOTE_WRITE (pages shared with this host's peers),
 *     fills it with a guard pattern and posts 12 receives (1, 2 and 3 SGEs
 *     at odd offsets, some larger than their message) once a first SEND,
 *     into an MR of LOCAL_WRITE only, has made the connection and the
 *     buffer's pages are shared (svt_shared_pages); the sender stops it
 *     with SIGSTOP and posts in one list SENDs of 0, 1, 8, 63, 4096 + 13,
 *     64 KiB (gathered from 2 SGEs), 256 KiB, 4 KiB, 777 B (gathered) and
 *     1 MiB + 7 B, a SEND_WITH_IMM, an inline SEND of 16 B and an
 *     RDMA_WRITE_WITH_IMM of 5000 B (gathered) into the buffer, whose
 *     receive has no SGE, each of its own pattern, all signaled: every one
 *     completes successfully within 5 s while the receiver is stopped.
 *     Continued, the receiver finds its completions in posting order
 *     (wr_id, IBV_WC_RECV or IBV_WC_RECV_RDMA_WITH_IMM, byte_len,
 *     IBV_WC_WITH_IMM and imm_data for those with immediate data,
 *     qp_num, src_qp), every message scattered across its SGEs, and every
 *     other byte of the buffer (beyond byte_len, between the SGEs) still
 *     the guard.  (Before the sender executes SENDs, this is the one
 *     assertion that fails: "SEND did not complete while the receiver was
 *     stopped".)
 *   - order with the wire: one post list of SEND, RDMA_WRITE,
 *     RDMA_WRITE_WITH_IMM, SEND_WITH_IMM, SEND into a receive whose MR has
 *     LOCAL_WRITE only and SEND again (whichever way each goes);
 *     the receive completions come in the order of the requests that
 *     consumed them (IBV_WC_RECV / IBV_WC_RECV_RDMA_WITH_IMM, imm_data,
 *     byte_len), each with its data in place when it is polled (both
 *     WRITEs' data with the WRITE_WITH_IMM's completion), nothing else of
 *     either buffer touched
 *   - RNR, then success: no receive posted, the sender's QP with rnr_retry
 *     7 (no limit) and both QPs with min_rnr_timer 10 (0.32 ms); the
 *     receive comes 50 ms after the SEND is posted; both complete
 *     successfully, the data right, and the SEND not before the receiver
 *     said it was posting the receive
 *   - too small: a SEND of 64 B into a receive of 16 B (then a SEND of 8 B
 *     and a receive of 4 KiB behind them), as tests/errors/err_loc_len.c
 *     asserts in one process: the receive completes IBV_WC_LOC_LEN_ERR, the
 *     SEND IBV_WC_REM_INV_REQ_ERR (qp_num of each), both QPs are in ERR, the
 *     WRs behind are flushed, nothing else completes; no byte of the
 *     receiver's buffer outside the 16 B is written
 *   - completion channel: the receiver's CQ has a channel, armed, the
 *     receiver blocked waiting for its event (svt_wait_cq_event); a SEND
 *     brings the event within 2 s, then the completion, the data right
 *   - deregistration: a receive is posted into an MR (REMOTE_WRITE, so
 *     shared) that is then deregistered, its buffer (still the receiver's
 *     memory) filled with a poison pattern; a SEND of 4 KiB into it writes
 *     nothing (the poison intact), the receive completes
 *     IBV_WC_LOC_PROT_ERR, the SEND IBV_WC_REM_OP_ERR, both QPs in ERR
 *     (what the responder does today over shm, by the wire)
 *   - flush: 4 receives posted, 2 SENDs completed, then the receiver
 *     moves its QP to ERR before polling: 2 successful receive
 *     completions (data right), then 2 IBV_WC_WR_FLUSH_ERR, in order
 *   - the sender's source unmapped under its MR (a page of it, after a
 *     first SEND moved the receive queue): the SEND ends in LOC_PROT_ERR,
 *     the receive it had taken in REM_ABORT_ERR, nothing else completes
 *   - an SRQ: two RC QPs of the receiver, each with a CQ of its own, share
 *     an SRQ of 32; a first SEND on each (by the wire) moves the SRQ's
 *     queue and names it in both QPs' records; 16 receives posted (1 or 2
 *     SGEs at odd offsets), the limit armed at 4, the receiver stopped, 16
 *     SENDs (0 B to 8000 B, some with immediate data) posted alternately
 *     on the two QPs all complete; continued, each QP's CQ has its 8 in
 *     order, each in the receive it took (receives taken in the SRQ's
 *     order, qp_num and src_qp its own), nothing else of the buffer
 *     written, and the SRQ limit event comes; 4 receives posted and the
 *     SRQ resized to 64 (the queue comes back to private memory), 4 more
 *     SENDs take them in order
 *   - a sender killed inside its copy: a third process sends 8000 B into
 *     an SRQ (of 2 QPs) from pages a userfaultfd never supplies, so its
 *     copy blocks with the SRQ's next receive taken; the parent places a
 *     SEND into the receive behind it (which completes at the parent),
 *     then kills the third process: the receiver's first receive
 *     completes IBV_WC_REM_ABORT_ERR on that QP's CQ, and the parent's
 *     SEND completes on the other's, its data in place, rather than being
 *     held back for good; once that QP is destroyed (its wait for the
 *     killed sender's access gives up after 1 s), an MR's deregistration
 *     takes less than 900 ms (it does not wait for that access again) and
 *     a new QP does not get the dead QP's number.  Without userfaultfd (a
 *     container's seccomp profile) this part is logged and not tried.
 *
 *   - polled only: the receiver's CQ an extended CQ without a channel, its
 *     QP's queue of 4 receives (as many as it takes: posted until ENOMEM)
 *     after a first SEND; two SENDs complete at the sender, then two more
 *     receives are posted, unpolled, and must fit (the two completed left
 *     room, as on a NIC); ibv_start_poll finds the two completions, and a
 *     third SEND's (nothing but the poll takes it in), each with its data
 *   - an SRQ of another PD than its QP's: after a first SEND, 8 SENDs
 *     (0 B to 4 KiB) complete with the receiver stopped, each in its
 *     receive (the receives' MR is of the SRQ's PD); a receive whose MR is
 *     of the QP's PD fails: LOC_PROT_ERR at the receiver, nothing written,
 *     REM_OP_ERR at the sender
 *   - ERR during a placement: the receiver's QP enters ERR while the
 *     sender's copy into receive 1302 waits on a source page a
 *     userfaultfd supplies 150 ms after the receiver says it is about to:
 *     by ibv_modify_qp, which returns once the copy is over, 1302 then
 *     completing successfully with the data, as its SEND does (before the
 *     call waited: 1302 flushed, the SEND successful); by a SEND of its
 *     own with an lkey it does not have (LOC_PROT_ERR first), which does
 *     not wait: 1302 is flushed and the SEND fails (RETRY_EXC_ERR, by the
 *     wire to a QP in ERR; before the mark was a compare-and-swap: the
 *     SEND successful).  Either way 1303 is flushed, nothing else of the
 *     buffer written, and a SEND and its receive never end apart.
 *     The same through an SRQ's receive, by ibv_modify_qp and by the
 *     failed SEND: its completion is on the CQ when
 *     IBV_EVENT_QP_LAST_WQE_REACHED comes (a thread polls once as the
 *     event arrives; before the wait, and before the event owed to the
 *     placement, the event came first).  Without userfaultfd, not tried
 *
 * SVT_DSEND_NO_STOP=1 leaves the receiver running in the first part (no
 * SIGSTOP): the rest of the test, as SENDs by the wire pass it, checked
 * on its own.
 */
#include "sv_test.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define LONG_MS 30000 /* a token from the other process (a busy machine) */
#define WC_MS 20000   /* a completion not bound to the 5 s of part 1 */
#define STOPPED_MS 5000

#define GUARD 0x6a7d /* seed of the guard pattern of receive buffers */
#define POISON 0x0b5e

static bool no_stop(void)
{
	const char *s = getenv("SVT_DSEND_NO_STOP");

	return s && *s && strcmp(s, "0") != 0;
}

/* buf[j] = the byte svt_fill(…, seed) puts at offset base + j */
static void fill_at(void *buf, size_t len, uint32_t seed, size_t base)
{
	uint8_t *p = buf;

	for (size_t j = 0; j < len; j++)
		p[j] = svt_pattern_byte(seed, base + j);
}

/* ---- one QP and its CQ in each process, linked through the pipes ---- */

struct end {
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	uint32_t max_inline;
	struct svt_peer_info peer;
};

/* An RC QP and its CQ; its receives srq's if not NULL. */
static void end_open_srq(struct end *e, struct svt_dev *d, struct ibv_comp_channel *ch,
			 struct ibv_srq *srq)
{
	struct ibv_qp_init_attr ia;

	memset(e, 0, sizeof(*e));
	e->cq = svt_create_cq(d->ctx, 64, ch);
	memset(&ia, 0, sizeof(ia));
	ia.send_cq = ia.recv_cq = e->cq;
	ia.srq = srq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = 32;
	ia.cap.max_recv_wr = srq ? 0 : 32;
	ia.cap.max_send_sge = 3;
	ia.cap.max_recv_sge = srq ? 0 : 3;
	ia.cap.max_inline_data = 64;
	e->qp = ibv_create_qp(d->pd, &ia);
	if (!e->qp) {
		/* no inline data: the inline SEND goes as a plain one */
		ia.cap.max_inline_data = 0;
		e->qp = ibv_create_qp(d->pd, &ia);
	}
	SVT_CHECK_PTR(e->qp);
	e->max_inline = ia.cap.max_inline_data;
}

static void end_open(struct end *e, struct svt_dev *d, struct ibv_comp_channel *ch)
{
	end_open_srq(e, d, ch, NULL);
}

/* Tell the peer our QP (and an MR it may WRITE to), learn its, and connect. */
static void end_link(struct end *e, struct svt_dev *d, int rfd, int wfd, const void *addr,
		     uint32_t rkey, const struct svt_conn *c)
{
	struct svt_peer_info me;

	memset(&me, 0, sizeof(me));
	me.gid = d->gid;
	me.qpn = e->qp->qp_num;
	me.addr = (uintptr_t)addr;
	me.rkey = rkey;
	svt_send_info(wfd, &me);
	svt_chan_read(rfd, &e->peer, sizeof(e->peer), LONG_MS);
	svt_qp_connect(e->qp, c, &e->peer.gid, e->peer.qpn);
}

/* Is a token from the other process there to be read, now? */
static bool token_ready(int fd)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	int r;

	while ((r = poll(&pfd, 1, 0)) < 0 && errno == EINTR)
		;
	SVT_CHECK(r >= 0);
	return r > 0;
}

static void end_close(struct end *e)
{
	SVT_CHECK_OK(ibv_destroy_qp(e->qp));
	SVT_CHECK_OK(ibv_destroy_cq(e->cq));
}

/* A receive of n SGEs to qp, or to srq when qp is NULL. */
static void post_recv_to(struct ibv_qp *qp, struct ibv_srq *srq, uint64_t wr_id,
			 struct ibv_sge *sge, int n)
{
	struct ibv_recv_wr wr, *bad = NULL;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = wr_id;
	wr.sg_list = n ? sge : NULL;
	wr.num_sge = n;
	SVT_CHECK_OK(qp ? ibv_post_recv(qp, &wr, &bad) : ibv_post_srq_recv(srq, &wr, &bad));
}

static void post_recv_sgl(struct ibv_qp *qp, uint64_t wr_id, struct ibv_sge *sge, int n)
{
	post_recv_to(qp, NULL, wr_id, sge, n);
}

/* Poll n completions by deadline; returns how many came. */
static int poll_until(struct ibv_cq *cq, int n, struct ibv_wc *wc, uint64_t deadline)
{
	int got = 0;

	while (got < n) {
		int r = ibv_poll_cq(cq, n - got, wc + got);

		SVT_CHECK(r >= 0);
		got += r;
		if (r == 0) {
			struct timespec ts = { 0, 20000 };

			if (svt_now_ms() > deadline)
				break;
			nanosleep(&ts, NULL); /* the other process may need the CPU */
		}
	}
	return got;
}

static struct ibv_wc expect_wc(struct ibv_cq *cq, uint64_t wr_id, enum ibv_wc_status st,
			       const char *what)
{
	struct ibv_wc wc;

	memset(&wc, 0, sizeof(wc));
	if (poll_until(cq, 1, &wc, svt_now_ms() + WC_MS) != 1)
		SVT_FAIL("%s: no completion for wr_id %llu within %d ms", what,
			 (unsigned long long)wr_id, WC_MS);
	if (wc.wr_id != wr_id || wc.status != st)
		SVT_FAIL("%s: completion wr_id %llu status %d (%s), expected wr_id %llu status "
			 "%d (%s)",
			 what, (unsigned long long)wc.wr_id, (int)wc.status,
			 ibv_wc_status_str(wc.status), (unsigned long long)wr_id, (int)st,
			 ibv_wc_status_str(st));
	return wc;
}

/* A successful receive completion of a message from the peer QP. */
static void check_recv_wc(const struct ibv_wc *wc, const struct end *e, uint64_t wr_id,
			  enum ibv_wc_opcode opc, uint32_t byte_len, const uint32_t *imm,
			  const char *what)
{
	if (wc->status != IBV_WC_SUCCESS || wc->wr_id != wr_id)
		SVT_FAIL("%s: receive completion wr_id %llu status %d (%s), expected wr_id %llu, "
			 "success",
			 what, (unsigned long long)wc->wr_id, (int)wc->status,
			 ibv_wc_status_str(wc->status), (unsigned long long)wr_id);
	SVT_CHECK_EQ(wc->opcode, opc);
	SVT_CHECK_EQ(wc->byte_len, byte_len);
	SVT_CHECK_EQ(wc->qp_num, e->qp->qp_num);
	SVT_CHECK_EQ(wc->src_qp, e->peer.qpn);
	if (imm) {
		SVT_CHECK(wc->wc_flags & IBV_WC_WITH_IMM);
		SVT_CHECK_EQ(ntohl(wc->imm_data), *imm);
	} else {
		SVT_CHECK_EQ(wc->wc_flags & IBV_WC_WITH_IMM, 0);
	}
}

/* Into img (an image of the buffer at base): a message of len bytes of
 * pattern seed, scattered over sge[0..n-1]. */
static void scatter(uint8_t *img, const void *base, const struct ibv_sge *sge, int n, uint32_t len,
		    uint32_t seed)
{
	uint32_t k = 0;

	for (int i = 0; i < n && k < len; i++) {
		uint32_t m = sge[i].length < len - k ? sge[i].length : len - k;

		fill_at(img + (sge[i].addr - (uintptr_t)base), m, seed, k);
		k += m;
	}
	SVT_CHECK_EQ(k, len); /* the receive holds the message */
}

/* The message is in place, now (the rest of the buffer is checked later). */
static void check_scattered(const struct ibv_sge *sge, int n, uint32_t len, uint32_t seed,
			    const char *what)
{
	uint32_t k = 0;

	for (int i = 0; i < n && k < len; i++) {
		const volatile uint8_t *p = (const uint8_t *)(uintptr_t)sge[i].addr;
		uint32_t m = sge[i].length < len - k ? sge[i].length : len - k;

		for (uint32_t j = 0; j < m; j++)
			if (p[j] != svt_pattern_byte(seed, k + j))
				SVT_FAIL("%s: message byte %u (SGE %d, byte %u) is 0x%02x, "
					 "expected 0x%02x",
					 what, k + j, i, j, p[j], svt_pattern_byte(seed, k + j));
		k += m;
	}
}

/* buf holds img: every message in place, every other byte the guard. */
static void check_image(const uint8_t *buf, const uint8_t *img, size_t len, const char *what)
{
	for (size_t i = 0; i < len; i++) {
		const char *why = "a message's byte";

		if (buf[i] == img[i])
			continue;
		if (img[i] == svt_pattern_byte(GUARD, i))
			why = "the guard: written where no message goes";
		SVT_FAIL("%s: byte %zu of the buffer is 0x%02x, expected 0x%02x (%s)", what, i,
			 buf[i], img[i], why);
	}
}

/* The guard in buf and in a copy of it, the image of what must be there. */
static uint8_t *guard_image(uint8_t *buf, size_t len)
{
	uint8_t *img = malloc(len);

	SVT_CHECK_PTR(img);
	svt_fill(buf, len, GUARD);
	memcpy(img, buf, len);
	return img;
}

static void check_state(struct ibv_qp *qp, enum ibv_qp_state st, const char *what)
{
	enum ibv_qp_state s = svt_qp_state(qp);

	if (s != st)
		SVT_FAIL("%s: QP %u in state %d, expected %d", what, qp->qp_num, (int)s, (int)st);
}

/* ---- part 1: SENDs complete while the receiver is stopped ---- */

/* Are buf's first and last pages shared with this host's peers? */
static bool pages_shared(const uint8_t *buf, size_t len)
{
	return svt_shared_pages(buf) && svt_shared_pages(buf + len - 1);
}

#define P1_LEN (4u << 20)
#define P1_SRC (2u << 20)
#define P1_IMM 0xd5e7d001u
#define P1_WRITE_AT (P1_LEN - 16384) /* where the WRITE with immediate's bytes go */

struct msg1 {
	uint32_t len;
	enum ibv_wr_opcode op;
	bool inl;
	int gather; /* SGEs of the SEND (2: the pieces in reverse order in memory) */
	uint32_t rsge[3]; /* the receive's SGE lengths (0 ends) */
};

static const struct msg1 msgs1[] = {
	{ 0, IBV_WR_SEND, false, 1, { 64 } },
	{ 1, IBV_WR_SEND, false, 1, { 1 } },
	{ 8, IBV_WR_SEND, false, 1, { 3, 5 } },
	{ 63, IBV_WR_SEND, false, 1, { 10, 20, 100 } },
	{ 4096 + 13, IBV_WR_SEND, false, 1, { 4096, 13 } },
	{ 65536, IBV_WR_SEND, false, 2, { 1000, 64536, 50 } },
	{ 256u << 10, IBV_WR_SEND, false, 1, { (256u << 10) + 100 } },
	{ 100, IBV_WR_SEND_WITH_IMM, false, 1, { 50, 50, 50 } },
	{ 16, IBV_WR_SEND, true, 1, { 7, 9 } },
	{ 4096, IBV_WR_SEND, false, 1, { 4096, 4096 } },
	{ 777, IBV_WR_SEND, false, 2, { 1, 1, 1000 } },
	{ (1u << 20) + 7, IBV_WR_SEND, false, 1, { 1u << 19, 600000 } },
	/* its bytes at P1_WRITE_AT; the receive (no SGE) only completes */
	{ 5000, IBV_WR_RDMA_WRITE_WITH_IMM, false, 2, { 0 } },
};
#define N1 ((int)(sizeof(msgs1) / sizeof(msgs1[0])))

static uint32_t seed1(int i)
{
	return 0x100 + (uint32_t)i;
}

/* Receive i's SGEs in buf: at odd offsets, apart. */
static int sgl1(int i, uint8_t *buf, uint32_t lkey, struct ibv_sge *sge)
{
	size_t off = 37;
	int n = 0;

	for (int m = 0; m <= i; m++)
		for (int s = 0; s < 3 && msgs1[m].rsge[s]; s++) {
			if (m == i) {
				sge[n].addr = (uintptr_t)(buf + off);
				sge[n].length = msgs1[m].rsge[s];
				sge[n].lkey = lkey;
				n++;
			}
			off += msgs1[m].rsge[s] + 61 + 2 * (size_t)s;
		}
	SVT_CHECK_LE(off, P1_LEN);
	return n;
}

static void recv_part1(struct svt_dev *d, int rfd, int wfd)
{
	uint8_t *buf = malloc(P1_LEN), *warm = svt_alloc(4096), *img;
	struct ibv_mr *mr, *wmr;
	struct ibv_sge sge[3];
	struct ibv_wc wc[N1];
	struct end e;
	uint64_t until;

	SVT_CHECK_PTR(buf);
	img = guard_image(buf, P1_LEN);
	mr = svt_reg_mr(d->pd, buf, P1_LEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	wmr = svt_reg_mr(d->pd, warm, 4096, IBV_ACCESS_LOCAL_WRITE);
	end_open(&e, d, NULL);
	end_link(&e, d, rfd, wfd, buf, mr->rkey, NULL);

	/* the connection is made by a SEND, answered by this process running */
	SVT_CHECK_OK(svt_post_recv(e.qp, 900, warm, 4096, wmr->lkey));
	svt_sync_send(wfd, 'R');
	SVT_CHECK_EQ(svt_sync_recv(rfd, LONG_MS), 'W');
	wc[0] = expect_wc(e.cq, 900, IBV_WC_SUCCESS, "warm-up");
	check_recv_wc(&wc[0], &e, 900, IBV_WC_RECV, 32, NULL, "warm-up");
	SVT_CHECK_FILL(warm, 32, 0x99);
	/* a peer of this host has proved itself: the buffer's pages are shared */
	for (until = svt_now_ms() + 5000; !pages_shared(buf, P1_LEN) && svt_now_ms() < until;)
		svt_sleep_ms(1);
	SVT_CHECK_MSG(pages_shared(buf, P1_LEN),
		      "the receive buffer's pages are not shared with the peer");

	for (int i = 0; i < N1; i++) {
		int n = sgl1(i, buf, mr->lkey, sge);

		if (msgs1[i].op == IBV_WR_RDMA_WRITE_WITH_IMM) {
			struct ibv_sge at = { (uintptr_t)(buf + P1_WRITE_AT), msgs1[i].len, 0 };

			scatter(img, buf, &at, 1, msgs1[i].len, seed1(i));
		} else {
			scatter(img, buf, sge, n, msgs1[i].len, seed1(i));
		}
		post_recv_sgl(e.qp, 1000 + (uint64_t)i, sge, n);
	}
	svt_sync_send(wfd, 'S');
	/* stopped here by the sender, then continued */
	SVT_CHECK_EQ(svt_sync_recv(rfd, 60000), 'C');
	if (poll_until(e.cq, N1, wc, svt_now_ms() + WC_MS) != N1)
		SVT_FAIL("part 1: fewer than %d receive completions within %d ms", N1, WC_MS);
	for (int i = 0; i < N1; i++) {
		uint32_t imm = P1_IMM;
		char what[32];

		snprintf(what, sizeof(what), "part 1, message %d", i);
		check_recv_wc(&wc[i], &e, 1000 + (uint64_t)i,
			      msgs1[i].op == IBV_WR_RDMA_WRITE_WITH_IMM ? IBV_WC_RECV_RDMA_WITH_IMM
									 : IBV_WC_RECV,
			      msgs1[i].len, msgs1[i].op == IBV_WR_SEND ? NULL : &imm, what);
	}
	check_image(buf, img, P1_LEN, "part 1");
	svt_expect_no_wc(e.cq, 20);
	svt_sync_send(wfd, 'D');

	end_close(&e);
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	SVT_CHECK_OK(ibv_dereg_mr(wmr));
	free(buf);
	free(img);
	free(warm);
}

static void send_part1(struct svt_dev *d, struct svt_child *c)
{
	uint8_t *src = svt_alloc(P1_SRC);
	struct ibv_mr *mr = svt_reg_mr(d->pd, src, P1_SRC, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_send_wr wr[N1], *bad = NULL;
	struct ibv_sge sge[N1][2];
	struct ibv_wc wc[N1];
	size_t off = 0;
	struct end e;
	int status, got;
	bool stop = !no_stop();

	end_open(&e, d, NULL);
	end_link(&e, d, c->rfd, c->wfd, NULL, 0, NULL);
	SVT_CHECK_EQ(svt_sync_recv(c->rfd, LONG_MS), 'R');
	svt_fill(src, 32, 0x99);
	SVT_CHECK_OK(svt_post_send(e.qp, 900, IBV_WR_SEND, IBV_SEND_SIGNALED, src, 32, mr->lkey, 0,
				   0, 0));
	expect_wc(e.cq, 900, IBV_WC_SUCCESS, "warm-up");
	svt_sync_send(c->wfd, 'W');

	memset(wr, 0, sizeof(wr));
	for (int i = 0; i < N1; i++) {
		const struct msg1 *m = &msgs1[i];
		uint32_t a = m->gather == 2 ? m->len / 2 : m->len;
		uint8_t *first = src + off + (m->len - a) + 64;

		wr[i].wr_id = 1000 + (uint64_t)i;
		wr[i].opcode = m->op;
		wr[i].send_flags = IBV_SEND_SIGNALED;
		if (m->inl && e.max_inline >= m->len)
			wr[i].send_flags |= IBV_SEND_INLINE;
		if (m->op != IBV_WR_SEND)
			wr[i].imm_data = htonl(P1_IMM);
		if (m->op == IBV_WR_RDMA_WRITE_WITH_IMM) {
			wr[i].wr.rdma.remote_addr = e.peer.addr + P1_WRITE_AT;
			wr[i].wr.rdma.rkey = e.peer.rkey;
		}
		wr[i].next = i + 1 < N1 ? &wr[i + 1] : NULL;
		if (!m->len)
			continue;
		/* the first piece after the second in memory */
		sge[i][0] = (struct ibv_sge){ (uintptr_t)first, a, mr->lkey };
		fill_at(first, a, seed1(i), 0);
		if (m->gather == 2) {
			uint8_t *second = src + off;

			sge[i][1] = (struct ibv_sge){ (uintptr_t)second, m->len - a, mr->lkey };
			fill_at(second, m->len - a, seed1(i), a);
		}
		wr[i].sg_list = sge[i];
		wr[i].num_sge = m->gather;
		off += m->len + 64 + 200;
		SVT_CHECK_LE(off, P1_SRC);
	}
	if (e.max_inline < 16)
		svt_log("max_inline_data %u: the 16 B SEND goes as a plain one", e.max_inline);
	SVT_CHECK_EQ(svt_sync_recv(c->rfd, LONG_MS), 'S');

	if (stop) {
		SVT_CHECK_OK(kill(c->pid, SIGSTOP));
		SVT_CHECK_EQ(waitpid(c->pid, &status, WUNTRACED), c->pid);
		SVT_CHECK(WIFSTOPPED(status));
	}
	SVT_CHECK_OK(ibv_post_send(e.qp, wr, &bad));
	got = poll_until(e.cq, N1, wc, svt_now_ms() + (stop ? STOPPED_MS : WC_MS));
	if (got < N1 && stop)
		SVT_FAIL("SEND did not complete while the receiver was stopped (same-host SEND not "
			 "executed by the sender): %d of %d SENDs completed in %d ms",
			 got, N1, STOPPED_MS);
	if (got < N1)
		SVT_FAIL("part 1: %d of %d SENDs completed in %d ms", got, N1, WC_MS);
	for (int i = 0; i < N1; i++) {
		if (wc[i].status != IBV_WC_SUCCESS)
			SVT_FAIL("part 1: SEND wr_id %llu completed with status %d (%s)%s",
				 (unsigned long long)wc[i].wr_id, (int)wc[i].status,
				 ibv_wc_status_str(wc[i].status),
				 stop ? " while the receiver was stopped" : "");
		SVT_CHECK_EQ(wc[i].wr_id, 1000 + i);
		SVT_CHECK_EQ(wc[i].opcode, msgs1[i].op == IBV_WR_RDMA_WRITE_WITH_IMM
						   ? IBV_WC_RDMA_WRITE
						   : IBV_WC_SEND);
		SVT_CHECK_EQ(wc[i].qp_num, e.qp->qp_num);
	}
	if (stop)
		SVT_CHECK_OK(kill(c->pid, SIGCONT));
	svt_sync_send(c->wfd, 'C');
	SVT_CHECK_EQ(svt_sync_recv(c->rfd, LONG_MS), 'D');
	svt_log("part 1: %d SENDs (0 B to 1 MiB + 7, gathered, inline, with immediate data) "
		"and a WRITE with immediate "
		"completed %s; placed, in order, nothing else written",
		N1, stop ? "with the receiver stopped" : "(receiver running: SVT_DSEND_NO_STOP)");

	end_close(&e);
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	free(src);
}

/* ---- part 2: SENDs in order with what goes by the wire ---- */

#define P2_LEN (1u << 20)
#define P2_LLEN (64u << 10)
#define P2_W1 100003u /* the WRITE's target in the shared buffer */
#define P2_W2 200009u /* the WRITE_WITH_IMM's */
#define P2_IMM_W 0xfeed0002u
#define P2_IMM_S 0xfeed0003u

/* the requests, in posting order: opcode, length, seed, the receive consumed (-1: none) */
static const struct {
	enum ibv_wr_opcode op;
	uint32_t len;
	int recv;
} reqs2[] = {
	{ IBV_WR_SEND, 3000, 0 },		 { IBV_WR_RDMA_WRITE, 5000, -1 },
	{ IBV_WR_RDMA_WRITE_WITH_IMM, 7000, 1 }, { IBV_WR_SEND_WITH_IMM, 2000, 2 },
	{ IBV_WR_SEND, 1500, 3 },		 { IBV_WR_SEND, 4097, 4 },
};
#define NREQ2 6
#define NRECV2 5

static uint32_t seed2(int i)
{
	return 0x200 + (uint32_t)i;
}

/* The receives: 0, 1, 2 and 4 in the shared buffer s, 3 in the
 * LOCAL_WRITE-only buffer l. */
static int sgl2(int r, uint8_t *s, uint32_t skey, uint8_t *l, uint32_t lkey, struct ibv_sge *sge)
{
	switch (r) {
	case 0:
		sge[0] = (struct ibv_sge){ (uintptr_t)(s + 1001), 2000, skey };
		sge[1] = (struct ibv_sge){ (uintptr_t)(s + 5003), 1500, skey };
		return 2;
	case 1: /* never written: a WRITE_WITH_IMM places its data by address */
		sge[0] = (struct ibv_sge){ (uintptr_t)(s + 9001), 256, skey };
		return 1;
	case 2:
		sge[0] = (struct ibv_sge){ (uintptr_t)(s + 12007), 4096, skey };
		return 1;
	case 3:
		sge[0] = (struct ibv_sge){ (uintptr_t)(l + 33), 500, lkey };
		sge[1] = (struct ibv_sge){ (uintptr_t)(l + 1033), 500, lkey };
		sge[2] = (struct ibv_sge){ (uintptr_t)(l + 2033), 1000, lkey };
		return 3;
	default:
		sge[0] = (struct ibv_sge){ (uintptr_t)(s + 20011), 8192, skey };
		return 1;
	}
}

static void recv_part2(struct svt_dev *d, int rfd, int wfd)
{
	uint8_t *s = malloc(P2_LEN), *l = malloc(P2_LLEN), *simg, *limg;
	struct ibv_mr *smr, *lmr;
	struct ibv_sge sge[NRECV2][3];
	int nsge[NRECV2];
	struct end e;

	SVT_CHECK(s && l);
	simg = guard_image(s, P2_LEN);
	limg = guard_image(l, P2_LLEN);
	smr = svt_reg_mr(d->pd, s, P2_LEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	lmr = svt_reg_mr(d->pd, l, P2_LLEN, IBV_ACCESS_LOCAL_WRITE);
	end_open(&e, d, NULL);
	end_link(&e, d, rfd, wfd, s, smr->rkey, NULL);
	for (int r = 0; r < NRECV2; r++) {
		nsge[r] = sgl2(r, s, smr->lkey, l, lmr->lkey, sge[r]);
		post_recv_sgl(e.qp, 2000 + (uint64_t)r, sge[r], nsge[r]);
	}
	for (int i = 0; i < NREQ2; i++) {
		if (reqs2[i].op == IBV_WR_RDMA_WRITE || reqs2[i].op == IBV_WR_RDMA_WRITE_WITH_IMM)
			fill_at(simg + (reqs2[i].op == IBV_WR_RDMA_WRITE ? P2_W1 : P2_W2),
				reqs2[i].len, seed2(i), 0);
		else if (reqs2[i].recv == 3)
			scatter(limg, l, sge[3], nsge[3], reqs2[i].len, seed2(i));
		else
			scatter(simg, s, sge[reqs2[i].recv], nsge[reqs2[i].recv], reqs2[i].len,
				seed2(i));
	}
	svt_sync_send(wfd, 'R');

	/* each receive completion, polled one at a time, finds its data (and
	 * that of the requests before it) in place */
	for (int i = 0; i < NREQ2; i++) {
		int r = reqs2[i].recv;
		uint32_t imm_w = P2_IMM_W, imm_s = P2_IMM_S;
		struct ibv_wc wc;
		char what[48];

		if (r < 0)
			continue;
		snprintf(what, sizeof(what), "part 2, request %d (receive %d)", i, r);
		if (poll_until(e.cq, 1, &wc, svt_now_ms() + WC_MS) != 1)
			SVT_FAIL("%s: no receive completion within %d ms", what, WC_MS);
		if (reqs2[i].op == IBV_WR_RDMA_WRITE_WITH_IMM) {
			check_recv_wc(&wc, &e, 2000 + (uint64_t)r, IBV_WC_RECV_RDMA_WITH_IMM,
				      reqs2[i].len, &imm_w, what);
			/* the WRITE before it, and its own data */
			for (int w = 0; w <= i; w++)
				if (reqs2[w].op == IBV_WR_RDMA_WRITE ||
				    reqs2[w].op == IBV_WR_RDMA_WRITE_WITH_IMM) {
					struct ibv_sge at = {
						(uintptr_t)(s + (reqs2[w].op == IBV_WR_RDMA_WRITE
									 ? P2_W1
									 : P2_W2)),
						reqs2[w].len, 0
					};

					check_scattered(&at, 1, reqs2[w].len, seed2(w), what);
				}
		} else {
			check_recv_wc(&wc, &e, 2000 + (uint64_t)r, IBV_WC_RECV, reqs2[i].len,
				      reqs2[i].op == IBV_WR_SEND_WITH_IMM ? &imm_s : NULL, what);
			check_scattered(sge[r], nsge[r], reqs2[i].len, seed2(i), what);
		}
	}
	check_image(s, simg, P2_LEN, "part 2, the shared buffer");
	check_image(l, limg, P2_LLEN, "part 2, the LOCAL_WRITE-only buffer");
	svt_expect_no_wc(e.cq, 20);
	svt_sync_send(wfd, 'D');

	end_close(&e);
	SVT_CHECK_OK(ibv_dereg_mr(smr));
	SVT_CHECK_OK(ibv_dereg_mr(lmr));
	free(s);
	free(l);
	free(simg);
	free(limg);
}

static void send_part2(struct svt_dev *d, struct svt_child *c)
{
	uint8_t *src = svt_alloc(64u << 10);
	struct ibv_mr *mr = svt_reg_mr(d->pd, src, 64u << 10, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_send_wr wr[NREQ2], *bad = NULL;
	struct ibv_sge sge[NREQ2];
	struct ibv_wc wc[NREQ2];
	size_t off = 0;
	struct end e;

	end_open(&e, d, NULL);
	end_link(&e, d, c->rfd, c->wfd, NULL, 0, NULL);
	memset(wr, 0, sizeof(wr));
	for (int i = 0; i < NREQ2; i++) {
		fill_at(src + off, reqs2[i].len, seed2(i), 0);
		sge[i] = (struct ibv_sge){ (uintptr_t)(src + off), reqs2[i].len, mr->lkey };
		off += reqs2[i].len + 100;
		wr[i].wr_id = 20 + (uint64_t)i;
		wr[i].opcode = reqs2[i].op;
		wr[i].send_flags = IBV_SEND_SIGNALED;
		wr[i].sg_list = &sge[i];
		wr[i].num_sge = 1;
		wr[i].next = i + 1 < NREQ2 ? &wr[i + 1] : NULL;
		if (reqs2[i].op == IBV_WR_RDMA_WRITE || reqs2[i].op == IBV_WR_RDMA_WRITE_WITH_IMM) {
			wr[i].wr.rdma.remote_addr =
				e.peer.addr + (reqs2[i].op == IBV_WR_RDMA_WRITE ? P2_W1 : P2_W2);
			wr[i].wr.rdma.rkey = e.peer.rkey;
		}
		if (reqs2[i].op == IBV_WR_RDMA_WRITE_WITH_IMM)
			wr[i].imm_data = htonl(P2_IMM_W);
		if (reqs2[i].op == IBV_WR_SEND_WITH_IMM)
			wr[i].imm_data = htonl(P2_IMM_S);
	}
	SVT_CHECK_EQ(svt_sync_recv(c->rfd, LONG_MS), 'R');
	SVT_CHECK_OK(ibv_post_send(e.qp, wr, &bad));
	svt_poll_ok(e.cq, NREQ2, wc, WC_MS);
	for (int i = 0; i < NREQ2; i++) {
		SVT_CHECK_EQ(wc[i].wr_id, 20 + i);
		SVT_CHECK_EQ(wc[i].opcode, reqs2[i].op == IBV_WR_RDMA_WRITE ||
						   reqs2[i].op == IBV_WR_RDMA_WRITE_WITH_IMM
					   ? IBV_WC_RDMA_WRITE
					   : IBV_WC_SEND);
	}
	SVT_CHECK_EQ(svt_sync_recv(c->rfd, LONG_MS), 'D');
	svt_log("part 2: SEND, WRITE, WRITE_WITH_IMM, SEND_WITH_IMM, SEND by the wire, SEND: "
		"receive completions in order, each with its data");

	end_close(&e);
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	free(src);
}

/* ---- part 3: RNR, then the receive 50 ms later ---- */

#define P3_LEN 3000u
#define P3_SEED 0x300

static void rnr_conn(struct svt_conn *c)
{
	svt_conn_default(c, IBV_QPT_RC);
	c->rnr_retry = 7;      /* no limit */
	c->min_rnr_timer = 10; /* 0.32 ms */
}

static void recv_part3(struct svt_dev *d, int rfd, int wfd)
{
	uint8_t *buf = malloc(64u << 10), *img;
	struct ibv_sge sge = { 0 };
	struct ibv_mr *mr;
	struct svt_conn conn;
	struct ibv_wc wc;
	struct end e;

	SVT_CHECK_PTR(buf);
	img = guard_image(buf, 64u << 10);
	mr = svt_reg_mr(d->pd, buf, 64u << 10, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	rnr_conn(&conn);
	end_open(&e, d, NULL);
	end_link(&e, d, rfd, wfd, NULL, 0, &conn);
	svt_sync_send(wfd, 'R');
	SVT_CHECK_EQ(svt_sync_recv(rfd, LONG_MS), 'P'); /* the SEND is posted */
	svt_sleep_ms(50);
	sge = (struct ibv_sge){ (uintptr_t)(buf + 77), 4096, mr->lkey };
	scatter(img, buf, &sge, 1, P3_LEN, P3_SEED);
	svt_sync_send(wfd, 'A'); /* before the receive is posted */
	post_recv_sgl(e.qp, 3000, &sge, 1);
	wc = expect_wc(e.cq, 3000, IBV_WC_SUCCESS, "part 3");
	check_recv_wc(&wc, &e, 3000, IBV_WC_RECV, P3_LEN, NULL, "part 3");
	check_image(buf, img, 64u << 10, "part 3");
	svt_sync_send(wfd, 'D');

	end_close(&e);
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	free(buf);
	free(img);
}

static void send_part3(struct svt_dev *d, struct svt_child *c)
{
	uint8_t *src = svt_alloc(4096);
	struct ibv_mr *mr = svt_reg_mr(d->pd, src, 4096, IBV_ACCESS_LOCAL_WRITE);
	struct svt_conn conn;
	struct end e;

	rnr_conn(&conn);
	end_open(&e, d, NULL);
	end_link(&e, d, c->rfd, c->wfd, NULL, 0, &conn);
	svt_fill(src, P3_LEN, P3_SEED);
	SVT_CHECK_EQ(svt_sync_recv(c->rfd, LONG_MS), 'R');
	SVT_CHECK_OK(svt_post_send(e.qp, 30, IBV_WR_SEND, IBV_SEND_SIGNALED, src, P3_LEN, mr->lkey,
				   0, 0, 0));
	svt_sync_send(c->wfd, 'P');
	expect_wc(e.cq, 30, IBV_WC_SUCCESS, "part 3");
	/* the receiver said it was posting the receive before it did: the
	 * SEND waited for it */
	SVT_CHECK_MSG(token_ready(c->rfd), "part 3: the SEND completed before the receive came");
	SVT_CHECK_EQ(svt_sync_recv(c->rfd, LONG_MS), 'A');
	SVT_CHECK_EQ(svt_sync_recv(c->rfd, LONG_MS), 'D');
	svt_log("part 3: a SEND with no receive posted completed once the receive came, 50 ms "
		"later, its data in place");

	end_close(&e);
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	free(src);
}

/* ---- part 4: a receive too small ---- */

#define P4_OFF 1024
#define P4_RLEN 16
#define P4_SLEN 64

static void recv_part4(struct svt_dev *d, int rfd, int wfd)
{
	uint8_t *buf = malloc(64u << 10), *img;
	struct ibv_mr *mr;
	struct ibv_wc wc;
	struct end e;

	SVT_CHECK_PTR(buf);
	img = guard_image(buf, 64u << 10);
	mr = svt_reg_mr(d->pd, buf, 64u << 10, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	end_open(&e, d, NULL);
	end_link(&e, d, rfd, wfd, NULL, 0, NULL);
	SVT_CHECK_OK(svt_post_recv(e.qp, 41, buf + P4_OFF, P4_RLEN, mr->lkey));
	/* big enough, but behind: flushed, not used */
	SVT_CHECK_OK(svt_post_recv(e.qp, 42, buf + 8192, 4096, mr->lkey));
	svt_sync_send(wfd, 'R');

	wc = expect_wc(e.cq, 41, IBV_WC_LOC_LEN_ERR, "part 4, the 16 B receive");
	SVT_CHECK_EQ(wc.qp_num, e.qp->qp_num);
	check_state(e.qp, IBV_QPS_ERR, "part 4, the receiver");
	wc = expect_wc(e.cq, 42, IBV_WC_WR_FLUSH_ERR, "part 4, the receive behind");
	SVT_CHECK_EQ(wc.qp_num, e.qp->qp_num);
	svt_expect_no_wc(e.cq, 50);
	/* the 16 B may hold part of the message (the receive failed, its
	 * buffer is undefined); nothing around them may */
	memcpy(img + P4_OFF, buf + P4_OFF, P4_RLEN);
	check_image(buf, img, 64u << 10, "part 4 (outside the 16 B receive)");
	svt_sync_send(wfd, 'D');

	end_close(&e);
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	free(buf);
	free(img);
}

static void send_part4(struct svt_dev *d, struct svt_child *c)
{
	uint8_t *src = svt_alloc(4096);
	struct ibv_mr *mr = svt_reg_mr(d->pd, src, 4096, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_wc wc;
	struct end e;

	end_open(&e, d, NULL);
	end_link(&e, d, c->rfd, c->wfd, NULL, 0, NULL);
	svt_fill(src, 4096, 0x400);
	SVT_CHECK_EQ(svt_sync_recv(c->rfd, LONG_MS), 'R');
	SVT_CHECK_OK(svt_post_send(e.qp, 41, IBV_WR_SEND, IBV_SEND_SIGNALED, src, P4_SLEN, mr->lkey,
				   0, 0, 0));
	SVT_CHECK_OK(svt_post_send(e.qp, 42, IBV_WR_SEND, IBV_SEND_SIGNALED, src, 8, mr->lkey, 0,
				   0, 0));
	wc = expect_wc(e.cq, 41, IBV_WC_REM_INV_REQ_ERR, "part 4, the 64 B SEND");
	SVT_CHECK_EQ(wc.qp_num, e.qp->qp_num);
	check_state(e.qp, IBV_QPS_ERR, "part 4, the sender");
	wc = expect_wc(e.cq, 42, IBV_WC_WR_FLUSH_ERR, "part 4, the SEND behind");
	SVT_CHECK_EQ(wc.qp_num, e.qp->qp_num);
	svt_expect_no_wc(e.cq, 50);
	SVT_CHECK_EQ(svt_sync_recv(c->rfd, LONG_MS), 'D');
	svt_log("part 4: 64 B SEND into 16 B: REM_INV_REQ_ERR / LOC_LEN_ERR, both QPs in ERR, "
		"the WRs behind flushed, nothing written around the receive");

	end_close(&e);
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	free(src);
}

/* ---- part 5: the completion channel ---- */

#define P5_LEN 2500u
#define P5_SEED 0x500

static void recv_part5(struct svt_dev *d, int rfd, int wfd)
{
	uint8_t *buf = malloc(64u << 10), *img;
	struct ibv_comp_channel *ch = ibv_create_comp_channel(d->ctx);
	struct ibv_sge sge;
	struct ibv_mr *mr;
	struct ibv_cq *ecq = NULL;
	void *ectx = NULL;
	struct ibv_wc wc;
	struct end e;
	int rc;

	SVT_CHECK(buf && ch);
	img = guard_image(buf, 64u << 10);
	mr = svt_reg_mr(d->pd, buf, 64u << 10, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	end_open(&e, d, ch);
	end_link(&e, d, rfd, wfd, NULL, 0, NULL);
	sge = (struct ibv_sge){ (uintptr_t)(buf + 129), 4096, mr->lkey };
	scatter(img, buf, &sge, 1, P5_LEN, P5_SEED);
	post_recv_sgl(e.qp, 5000, &sge, 1);
	SVT_CHECK_OK(ibv_req_notify_cq(e.cq, 0));
	svt_sync_send(wfd, 'R');
	rc = svt_wait_cq_event(ch, 2000, &ecq, &ectx);
	SVT_CHECK_MSG(rc == 0, "part 5: no completion event within 2 s of the SEND's post (%s)",
		      strerror(rc));
	SVT_CHECK(ecq == e.cq);
	ibv_ack_cq_events(e.cq, 1);
	wc = expect_wc(e.cq, 5000, IBV_WC_SUCCESS, "part 5");
	check_recv_wc(&wc, &e, 5000, IBV_WC_RECV, P5_LEN, NULL, "part 5");
	check_image(buf, img, 64u << 10, "part 5");
	svt_sync_send(wfd, 'D');

	end_close(&e);
	SVT_CHECK_OK(ibv_destroy_comp_channel(ch));
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	free(buf);
	free(img);
}

static void send_part5(struct svt_dev *d, struct svt_child *c)
{
	uint8_t *src = svt_alloc(4096);
	struct ibv_mr *mr = svt_reg_mr(d->pd, src, 4096, IBV_ACCESS_LOCAL_WRITE);
	struct end e;

	end_open(&e, d, NULL);
	end_link(&e, d, c->rfd, c->wfd, NULL, 0, NULL);
	svt_fill(src, P5_LEN, P5_SEED);
	SVT_CHECK_EQ(svt_sync_recv(c->rfd, LONG_MS), 'R');
	SVT_CHECK_OK(svt_post_send(e.qp, 50, IBV_WR_SEND, IBV_SEND_SIGNALED, src, P5_LEN, mr->lkey,
				   0, 0, 0));
	expect_wc(e.cq, 50, IBV_WC_SUCCESS, "part 5");
	SVT_CHECK_EQ(svt_sync_recv(c->rfd, LONG_MS), 'D');
	svt_log("part 5: the receiver, blocked on its completion channel, woke for the SEND");

	end_close(&e);
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	free(src);
}

/* ---- part 6: a receive whose MR was deregistered ---- */

#define P6_LEN (64u << 10)
/* what the receive and the SEND complete with (the responder's check of
 * the receive's memory, by the wire: the receive LOC_PROT_ERR, a NAK
 * "remote operational error") */
#define P6_RECV_ST IBV_WC_LOC_PROT_ERR
#define P6_SEND_ST IBV_WC_REM_OP_ERR

static void recv_part6(struct svt_dev *d, int rfd, int wfd)
{
	uint8_t *buf = malloc(P6_LEN);
	struct ibv_mr *mr;
	struct ibv_wc wc;
	struct end e;

	SVT_CHECK_PTR(buf);
	memset(buf, 0, P6_LEN);
	mr = svt_reg_mr(d->pd, buf, P6_LEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	end_open(&e, d, NULL);
	end_link(&e, d, rfd, wfd, NULL, 0, NULL);
	SVT_CHECK_OK(svt_post_recv(e.qp, 6000, buf + 4096, 8192, mr->lkey));
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	svt_fill(buf, P6_LEN, POISON); /* ours again, not the HCA's */
	svt_sync_send(wfd, 'R');

	wc = expect_wc(e.cq, 6000, P6_RECV_ST, "part 6, the receive into a deregistered MR");
	SVT_CHECK_EQ(wc.qp_num, e.qp->qp_num);
	check_state(e.qp, IBV_QPS_ERR, "part 6, the receiver");
	SVT_CHECK_EQ(svt_sync_recv(rfd, LONG_MS), 'E'); /* the SEND is over */
	svt_expect_no_wc(e.cq, 20);
	SVT_CHECK_FILL(buf, P6_LEN, POISON);
	svt_sync_send(wfd, 'D');

	end_close(&e);
	free(buf);
}

static void send_part6(struct svt_dev *d, struct svt_child *c)
{
	uint8_t *src = svt_alloc(4096);
	struct ibv_mr *mr = svt_reg_mr(d->pd, src, 4096, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_wc wc;
	struct end e;

	end_open(&e, d, NULL);
	end_link(&e, d, c->rfd, c->wfd, NULL, 0, NULL);
	svt_fill(src, 4096, 0x600);
	SVT_CHECK_EQ(svt_sync_recv(c->rfd, LONG_MS), 'R');
	SVT_CHECK_OK(svt_post_send(e.qp, 60, IBV_WR_SEND, IBV_SEND_SIGNALED, src, 4096, mr->lkey, 0,
				   0, 0));
	wc = expect_wc(e.cq, 60, P6_SEND_ST, "part 6, the SEND into a deregistered MR");
	SVT_CHECK_EQ(wc.qp_num, e.qp->qp_num);
	check_state(e.qp, IBV_QPS_ERR, "part 6, the sender");
	svt_sync_send(c->wfd, 'E');
	SVT_CHECK_EQ(svt_sync_recv(c->rfd, LONG_MS), 'D');
	svt_log("part 6: a SEND into a receive whose MR was deregistered: %s / %s, the poison "
		"intact",
		ibv_wc_status_str(P6_SEND_ST), ibv_wc_status_str(P6_RECV_ST));

	end_close(&e);
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	free(src);
}

/* ---- part 7: completions before a flush ---- */

#define P7_LEN 1000u

/* Parts 7 and 13: a QP with 4 receives of 1 KiB at buf + off + 2048 r
 * (wr_id wr0 + r) of a 64 KiB buffer filled with the guard, whose image
 * *img expects a message of len[r] bytes of pattern seed + r in receive
 * r (none where len[r] is 0); its MR.  c: the connection's attributes
 * (NULL: the defaults). */
static struct ibv_mr *four_receives(struct svt_dev *d, int rfd, int wfd, struct end *e,
				    uint8_t **buf, uint8_t **img, size_t off, uint64_t wr0,
				    const uint32_t len[4], uint32_t seed, const struct svt_conn *c)
{
	struct ibv_sge sge;
	struct ibv_mr *mr;

	*buf = malloc(64u << 10);
	SVT_CHECK_PTR(*buf);
	*img = guard_image(*buf, 64u << 10);
	mr = svt_reg_mr(d->pd, *buf, 64u << 10, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	end_open(e, d, NULL);
	end_link(e, d, rfd, wfd, NULL, 0, c);
	for (int r = 0; r < 4; r++) {
		sge = (struct ibv_sge){ (uintptr_t)(*buf + off + 2048 * r), 1024, mr->lkey };
		if (len[r])
			scatter(*img, *buf, &sge, 1, len[r], seed + (uint32_t)r);
		post_recv_sgl(e->qp, wr0 + (uint64_t)r, &sge, 1);
	}
	return mr;
}

static void recv_part7(struct svt_dev *d, int rfd, int wfd)
{
	static const uint32_t len[4] = { P7_LEN, P7_LEN, 0, 0 };
	uint8_t *buf, *img;
	struct ibv_wc wc[4];
	struct ibv_mr *mr;
	struct end e;

	mr = four_receives(d, rfd, wfd, &e, &buf, &img, 5, 7000, len, 0x700, NULL);
	svt_sync_send(wfd, 'R');
	SVT_CHECK_EQ(svt_sync_recv(rfd, LONG_MS), 'S'); /* both SENDs completed */
	SVT_CHECK_OK(svt_qp_to_state(e.qp, IBV_QPS_ERR));
	if (poll_until(e.cq, 4, wc, svt_now_ms() + WC_MS) != 4)
		SVT_FAIL("part 7: fewer than 4 receive completions within %d ms", WC_MS);
	for (int r = 0; r < 2; r++)
		check_recv_wc(&wc[r], &e, 7000 + (uint64_t)r, IBV_WC_RECV, P7_LEN, NULL, "part 7");
	for (int r = 2; r < 4; r++) {
		SVT_CHECK_WC_STATUS(wc[r], IBV_WC_WR_FLUSH_ERR);
		SVT_CHECK_EQ(wc[r].wr_id, 7000 + r);
		SVT_CHECK_EQ(wc[r].qp_num, e.qp->qp_num);
	}
	svt_expect_no_wc(e.cq, 50);
	check_image(buf, img, 64u << 10, "part 7");
	svt_sync_send(wfd, 'D');

	end_close(&e);
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	free(buf);
	free(img);
}

static void send_part7(struct svt_dev *d, struct svt_child *c)
{
	uint8_t *src = svt_alloc(4096);
	struct ibv_mr *mr = svt_reg_mr(d->pd, src, 4096, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_wc wc[2];
	struct end e;

	end_open(&e, d, NULL);
	end_link(&e, d, c->rfd, c->wfd, NULL, 0, NULL);
	svt_fill(src, P7_LEN, 0x700);
	svt_fill(src + 2048, P7_LEN, 0x701);
	SVT_CHECK_EQ(svt_sync_recv(c->rfd, LONG_MS), 'R');
	SVT_CHECK_OK(svt_post_send(e.qp, 70, IBV_WR_SEND, IBV_SEND_SIGNALED, src, P7_LEN, mr->lkey,
				   0, 0, 0));
	SVT_CHECK_OK(svt_post_send(e.qp, 71, IBV_WR_SEND, IBV_SEND_SIGNALED, src + 2048, P7_LEN,
				   mr->lkey, 0, 0, 0));
	svt_poll_ok(e.cq, 2, wc, WC_MS);
	SVT_CHECK_EQ(wc[0].wr_id, 70);
	SVT_CHECK_EQ(wc[1].wr_id, 71);
	svt_sync_send(c->wfd, 'S');
	SVT_CHECK_EQ(svt_sync_recv(c->rfd, LONG_MS), 'D');
	svt_log("part 7: 2 receives completed, then 2 flushed, in order");

	end_close(&e);
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	free(src);
}

/* ---- part 8: the sender's source unmapped under its MR ---- */

static void recv_part8(struct svt_dev *d, int rfd, int wfd)
{
	uint8_t *buf = malloc(64u << 10);
	struct ibv_wc wc;
	struct ibv_mr *mr;
	struct end e;

	SVT_CHECK_PTR(buf);
	mr = svt_reg_mr(d->pd, buf, 64u << 10, IBV_ACCESS_LOCAL_WRITE);
	end_open(&e, d, NULL);
	end_link(&e, d, rfd, wfd, NULL, 0, NULL);
	SVT_CHECK_OK(svt_post_recv(e.qp, 8000, buf, 4096, mr->lkey));
	SVT_CHECK_OK(svt_post_recv(e.qp, 8001, buf + 8192, 16384, mr->lkey));
	svt_sync_send(wfd, 'R');
	wc = expect_wc(e.cq, 8000, IBV_WC_SUCCESS, "part 8, first");
	SVT_CHECK_EQ(wc.byte_len, 64);
	wc = svt_poll_one(e.cq);
	SVT_CHECK_EQ(wc.wr_id, 8001);
	SVT_CHECK_WC_STATUS(wc, IBV_WC_REM_ABORT_ERR);
	SVT_CHECK_EQ(wc.qp_num, e.qp->qp_num);
	svt_expect_no_wc(e.cq, 20);
	svt_sync_send(wfd, 'D');

	end_close(&e);
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	free(buf);
}

static void send_part8(struct svt_dev *d, struct svt_child *c)
{
	uint8_t *src = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct ibv_mr *mr;
	struct ibv_wc wc;
	struct end e;

	SVT_CHECK(src != MAP_FAILED);
	memset(src, 0x88, 8192);
	mr = svt_reg_mr(d->pd, src, 8192, IBV_ACCESS_LOCAL_WRITE);
	end_open(&e, d, NULL);
	end_link(&e, d, c->rfd, c->wfd, NULL, 0, NULL);
	SVT_CHECK_EQ(svt_sync_recv(c->rfd, LONG_MS), 'R');
	/* the first SEND (by the wire) moves the receive queue where it can
	 * be placed into; then the second page goes, the MR still naming it */
	SVT_CHECK_OK(svt_post_send(e.qp, 80, IBV_WR_SEND, IBV_SEND_SIGNALED, src, 64, mr->lkey, 0,
				   0, 0));
	wc = expect_wc(e.cq, 80, IBV_WC_SUCCESS, "part 8, first");
	SVT_CHECK_OK(munmap(src + 4096, 4096));
	SVT_CHECK_OK(svt_post_send(e.qp, 81, IBV_WR_SEND, IBV_SEND_SIGNALED, src, 8192, mr->lkey, 0,
				   0, 0));
	wc = svt_poll_one(e.cq);
	SVT_CHECK_EQ(wc.wr_id, 81);
	SVT_CHECK_WC_STATUS(wc, IBV_WC_LOC_PROT_ERR);
	SVT_CHECK_EQ(svt_sync_recv(c->rfd, LONG_MS), 'D');
	svt_log("part 8: a SEND whose source page was unmapped under its MR: LOC_PROT_ERR here, "
		"REM_ABORT_ERR at the receiver");

	end_close(&e);
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	SVT_CHECK_OK(munmap(src, 4096));
}

/* ---- part 9: an SRQ shared by two QPs, placed into with the receiver
 * stopped ---- */

#define P9_N 16        /* SENDs placed, alternately on the two QPs */
#define P9_SLOT 8192   /* each receive's part of the buffer */
#define P9_LEN (P9_SLOT * (P9_N + 4))
#define P9_LIMIT 4     /* the SRQ's limit, crossed by the 16 */
#define P9_IMM 0x5a0009u

/* Message k of QP side s (0, 1): its length and pattern */
static uint32_t len9(int s, int k)
{
	static const uint32_t l[8] = { 1, 4096, 0, 777, 8000, 64, 4097, 300 };

	return l[(k + 3 * s) % 8];
}
static uint32_t seed9(int s, int k)
{
	return 0x9000u + (uint32_t)(s * 100 + k);
}

/* Receive i of part 9: one SGE at an odd offset of its slot, or two. */
static int sgl9(int i, uint8_t *buf, uint32_t lkey, struct ibv_sge *sge)
{
	uint8_t *at = buf + (size_t)i * P9_SLOT + 3;

	sge[0] = (struct ibv_sge){ (uintptr_t)at, i % 3 ? 8100 : 1000, lkey };
	if (i % 3)
		return 1;
	sge[1] = (struct ibv_sge){ (uintptr_t)(at + 1100), 7000, lkey };
	return 2;
}

static void post_srq(struct ibv_srq *srq, uint64_t wr_id, struct ibv_sge *sge, int n)
{
	post_recv_to(NULL, srq, wr_id, sge, n);
}

/* Side s's completions: its messages in order, each in the receive it
 * completed on (which receive a message takes follows the SRQ's order). */
static void check_side9(struct end *e, int s, int n, uint8_t *buf, uint8_t *img, uint32_t lkey,
			int first_wqe, const char *what)
{
	struct ibv_wc wc[P9_N];
	struct ibv_sge sge[2];

	if (poll_until(e->cq, n, wc, svt_now_ms() + WC_MS) != n)
		SVT_FAIL("%s: fewer than %d receive completions on QP %d within %d ms", what, n,
			 s, WC_MS);
	for (int k = 0; k < n; k++)
		if (wc[k].byte_len != len9(s, k)) {
			/* out of order, or another's: say what came, before failing */
			for (int j = 0; j < n; j++)
				svt_log("%s, QP %d: completion %d: wr_id %llu, %u B (message %d has %u)",
					what, s, j, (unsigned long long)wc[j].wr_id, wc[j].byte_len, j,
					len9(s, j));
			break;
		}
	for (int k = 0; k < n; k++) {
		int i = (int)wc[k].wr_id - first_wqe, m;
		uint32_t imm = P9_IMM + (uint32_t)k;
		char w[64];

		snprintf(w, sizeof(w), "%s, QP %d message %d", what, s, k);
		SVT_CHECK_MSG(i >= 0 && i < P9_N + 4, "%s: wr_id %llu", w,
			      (unsigned long long)wc[k].wr_id);
		check_recv_wc(&wc[k], e, wc[k].wr_id, IBV_WC_RECV, len9(s, k),
			      k % 4 == 1 ? &imm : NULL, w);
		if (k && wc[k].wr_id <= wc[k - 1].wr_id)
			SVT_FAIL("%s: took receive %llu after %llu", w,
				 (unsigned long long)wc[k].wr_id, (unsigned long long)wc[k - 1].wr_id);
		m = sgl9(i, buf, lkey, sge);
		check_scattered(sge, m, len9(s, k), seed9(s, k), w);
		scatter(img, buf, sge, m, len9(s, k), seed9(s, k));
	}
}

/* The receiver's SRQ and its two QPs, linked through the pipes, each
 * warmed up by a first SEND of 32 B: by the wire, it moves the SRQ's
 * queue where the sender reads it and has the QP's record name it. */
static struct ibv_srq *srq_pair(struct svt_dev *d, int rfd, int wfd, struct ibv_srq_init_attr *sa,
				struct end e[2], uint8_t *warm, uint32_t lkey, const char *what)
{
	struct ibv_srq *srq = ibv_create_srq(d->pd, sa);
	struct ibv_wc wc;

	SVT_CHECK_PTR(srq);
	for (int s = 0; s < 2; s++) {
		end_open_srq(&e[s], d, NULL, srq);
		end_link(&e[s], d, rfd, wfd, NULL, 0, NULL);
	}
	for (int s = 0; s < 2; s++)
		SVT_CHECK_OK(svt_post_srq_recv(srq, 900 + (uint64_t)s, warm + 64 * s, 64, lkey));
	svt_sync_send(wfd, 'R');
	SVT_CHECK_EQ(svt_sync_recv(rfd, LONG_MS), 'W');
	for (int s = 0; s < 2; s++) {
		wc = expect_wc(e[s].cq, 900 + (uint64_t)s, IBV_WC_SUCCESS, what);
		check_recv_wc(&wc, &e[s], 900 + (uint64_t)s, IBV_WC_RECV, 32, NULL, what);
	}
	return srq;
}

static void srq_pair_close(struct end e[2], struct ibv_srq *srq, struct ibv_mr *mr,
			   struct ibv_mr *wmr)
{
	for (int s = 0; s < 2; s++)
		end_close(&e[s]);
	SVT_CHECK_OK(ibv_destroy_srq(srq));
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	SVT_CHECK_OK(ibv_dereg_mr(wmr));
}

static void recv_part9(struct svt_dev *d, int rfd, int wfd)
{
	uint8_t *buf = malloc(P9_LEN), *warm = svt_alloc(4096), *img;
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 32, .max_sge = 2 } };
	struct ibv_srq_attr at = { .srq_limit = P9_LIMIT };
	struct ibv_async_event ev;
	struct ibv_mr *mr, *wmr;
	struct ibv_srq *srq;
	struct ibv_sge sge[2];
	struct end e[2];
	uint64_t until;

	SVT_CHECK_PTR(buf);
	img = guard_image(buf, P9_LEN);
	mr = svt_reg_mr(d->pd, buf, P9_LEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	wmr = svt_reg_mr(d->pd, warm, 4096, IBV_ACCESS_LOCAL_WRITE);
	srq = srq_pair(d, rfd, wfd, &sa, e, warm, wmr->lkey, "part 9, warm-up");
	for (until = svt_now_ms() + 5000; !pages_shared(buf, P9_LEN) && svt_now_ms() < until;)
		svt_sleep_ms(1);
	SVT_CHECK_MSG(pages_shared(buf, P9_LEN), "part 9: the buffer's pages are not shared");

	for (int i = 0; i < P9_N; i++) {
		int n = sgl9(i, buf, mr->lkey, sge);

		post_srq(srq, 1000 + (uint64_t)i, sge, n);
	}
	SVT_CHECK_OK(ibv_modify_srq(srq, &at, IBV_SRQ_LIMIT));
	svt_sync_send(wfd, 'S');
	/* stopped here by the sender, then continued */
	SVT_CHECK_EQ(svt_sync_recv(rfd, 60000), 'C');
	for (int s = 0; s < 2; s++)
		check_side9(&e[s], s, P9_N / 2, buf, img, mr->lkey, 1000, "part 9");
	/* 16 taken of 16: the limit of 4 was crossed */
	SVT_CHECK_MSG(svt_wait_async_event(d->ctx, 5000, &ev) == 0,
		      "part 9: no SRQ limit event");
	SVT_CHECK_EQ(ev.event_type, IBV_EVENT_SRQ_LIMIT_REACHED);
	SVT_CHECK(ev.element.srq == srq);
	ibv_ack_async_event(&ev);

	/* resized with receives posted: they stay, in order, and take the
	 * next SENDs (by the wire, then placed again) */
	for (int i = P9_N; i < P9_N + 4; i++) {
		int n = sgl9(i, buf, mr->lkey, sge);

		post_srq(srq, 1000 + (uint64_t)i, sge, n);
	}
	at.max_wr = 64;
	SVT_CHECK_OK(ibv_modify_srq(srq, &at, IBV_SRQ_MAX_WR));
	SVT_CHECK_OK(ibv_query_srq(srq, &at));
	SVT_CHECK_EQ(at.max_wr, 64);
	svt_sync_send(wfd, 'X');
	check_side9(&e[0], 0, 2, buf, img, mr->lkey, 1000, "part 9, resized");
	check_side9(&e[1], 1, 2, buf, img, mr->lkey, 1000, "part 9, resized");
	check_image(buf, img, P9_LEN, "part 9");
	svt_expect_no_wc(e[0].cq, 20);
	svt_expect_no_wc(e[1].cq, 20);
	svt_sync_send(wfd, 'D');
	srq_pair_close(e, srq, mr, wmr);
	free(buf);
	free(img);
	free(warm);
}

/* Side s's SEND k (of pattern seed9) from src. */
static void send9(struct end *e, int s, int k, uint64_t wr_id, uint8_t *src, uint32_t lkey)
{
	struct ibv_send_wr wr, *bad = NULL;
	struct ibv_sge sge = { (uintptr_t)src, len9(s, k), lkey };

	memset(&wr, 0, sizeof(wr));
	fill_at(src, len9(s, k), seed9(s, k), 0);
	wr.wr_id = wr_id;
	wr.opcode = k % 4 == 1 ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND;
	wr.imm_data = htonl(P9_IMM + (uint32_t)k);
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.sg_list = len9(s, k) ? &sge : NULL;
	wr.num_sge = len9(s, k) ? 1 : 0;
	SVT_CHECK_OK(ibv_post_send(e->qp, &wr, &bad));
}

static void send_part9(struct svt_dev *d, struct svt_child *c)
{
	uint8_t *src = svt_alloc(P9_N * P9_SLOT);
	struct ibv_mr *mr = svt_reg_mr(d->pd, src, P9_N * P9_SLOT, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_wc wc[P9_N];
	struct end e[2];
	bool stop = !no_stop();
	int status, got[2] = { 0, 0 };
	uint64_t until;

	for (int s = 0; s < 2; s++) {
		end_open(&e[s], d, NULL);
		end_link(&e[s], d, c->rfd, c->wfd, NULL, 0, NULL);
	}
	SVT_CHECK_EQ(svt_sync_recv(c->rfd, LONG_MS), 'R');
	svt_fill(src, 32, 0x99);
	for (int s = 0; s < 2; s++) {
		SVT_CHECK_OK(svt_post_send(e[s].qp, 900, IBV_WR_SEND, IBV_SEND_SIGNALED, src, 32,
					   mr->lkey, 0, 0, 0));
		expect_wc(e[s].cq, 900, IBV_WC_SUCCESS, "part 9, warm-up");
	}
	svt_sync_send(c->wfd, 'W');
	SVT_CHECK_EQ(svt_sync_recv(c->rfd, LONG_MS), 'S');

	if (stop) {
		SVT_CHECK_OK(kill(c->pid, SIGSTOP));
		SVT_CHECK_EQ(waitpid(c->pid, &status, WUNTRACED), c->pid);
		SVT_CHECK(WIFSTOPPED(status));
	}
	/* alternately on the two QPs: the SRQ's receives go to each in turn */
	for (int k = 0; k < P9_N / 2; k++)
		for (int s = 0; s < 2; s++)
			send9(&e[s], s, k, 100 + (uint64_t)k, src + (size_t)(2 * k + s) * P9_SLOT,
			      mr->lkey);
	until = svt_now_ms() + (stop ? STOPPED_MS : WC_MS);
	for (int s = 0; s < 2; s++) {
		got[s] = poll_until(e[s].cq, P9_N / 2, wc, until);
		for (int k = 0; k < got[s]; k++) {
			SVT_CHECK_WC_STATUS(wc[k], IBV_WC_SUCCESS);
			SVT_CHECK_EQ(wc[k].wr_id, 100 + (uint64_t)k);
		}
	}
	if ((got[0] < P9_N / 2 || got[1] < P9_N / 2) && stop)
		SVT_FAIL("part 9: SENDs to an SRQ's QPs did not complete while the receiver was "
			 "stopped (not placed by the sender): %d and %d of %d",
			 got[0], got[1], P9_N / 2);
	SVT_CHECK_EQ(got[0] + got[1], P9_N);
	if (stop)
		SVT_CHECK_OK(kill(c->pid, SIGCONT));
	svt_sync_send(c->wfd, 'C');

	SVT_CHECK_EQ(svt_sync_recv(c->rfd, LONG_MS), 'X');
	for (int k = 0; k < 2; k++)
		for (int s = 0; s < 2; s++) {
			send9(&e[s], s, k, 200 + (uint64_t)k, src + (size_t)(2 * k + s) * P9_SLOT,
			      mr->lkey);
			wc[0] = expect_wc(e[s].cq, 200 + (uint64_t)k, IBV_WC_SUCCESS,
					  "part 9, resized");
		}
	SVT_CHECK_EQ(svt_sync_recv(c->rfd, LONG_MS), 'D');
	svt_log("part 9: %d SENDs to two QPs of one SRQ completed %s, each on its QP's CQ in "
		"order, the limit event raised; after a resize, 4 more",
		P9_N, stop ? "with the receiver stopped" : "(receiver running)");

	for (int s = 0; s < 2; s++)
		end_close(&e[s]);
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	free(src);
}

/* ---- part 10: a sender killed inside its copy into an SRQ's receive ----
 * A third process ("doomed") sends into the SRQ from a buffer whose pages
 * a userfaultfd never supplies: its copy blocks with the SRQ's next
 * receive taken.  The parent places a SEND behind it, then kills it. */

#define P10_LEN 8000

/* The killed sender left the busy count of its QP's record raised for
 * good, and that QP is destroyed (its wait gave up once): a revocation
 * (an MR's deregistration) does not wait for that record again, and a new
 * QP does not get its slot (its number) while the count stays raised. */
static void after_dead_peer(struct svt_dev *d, uint32_t dead_qpn)
{
	uint8_t *b = svt_alloc(4096);
	struct ibv_mr *m = svt_reg_mr(d->pd, b, 4096, IBV_ACCESS_LOCAL_WRITE |
						       IBV_ACCESS_REMOTE_WRITE);
	uint64_t t0 = svt_now_ms(), took;
	struct end n[64];

	SVT_CHECK_OK(ibv_dereg_mr(m));
	took = svt_now_ms() - t0;
	if (took >= 900)
		SVT_FAIL("part 10: ibv_dereg_mr took %llu ms: it waited again for the access a "
			 "killed peer never ended", (unsigned long long)took);
	/* (slots are taken lowest first: 64 cover every one this test freed) */
	for (int i = 0; i < 64; i++) {
		end_open(&n[i], d, NULL);
		SVT_CHECK_MSG(n[i].qp->qp_num != dead_qpn,
			      "part 10: a new QP got the number (the record) the killed peer left "
			      "busy");
	}
	for (int i = 0; i < 64; i++)
		end_close(&n[i]);
	free(b);
}

static void recv_part10(struct svt_dev *d, int rfd, int wfd)
{
	uint8_t *buf = svt_alloc(4 * P9_SLOT), *warm = svt_alloc(4096);
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 16, .max_sge = 1 } };
	struct ibv_mr *mr, *wmr;
	struct ibv_srq *srq;
	struct end e[2];
	struct ibv_wc wc;
	uint32_t dead_qpn;
	char go;

	mr = svt_reg_mr(d->pd, buf, 4 * P9_SLOT, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	wmr = svt_reg_mr(d->pd, warm, 4096, IBV_ACCESS_LOCAL_WRITE);
	/* e[0] the parent's, e[1] the doomed process's (through the parent) */
	srq = srq_pair(d, rfd, wfd, &sa, e, warm, wmr->lkey, "part 10, warm-up");
	for (int i = 0; i < 4; i++)
		SVT_CHECK_OK(svt_post_srq_recv(srq, 1000 + (uint64_t)i, buf + (size_t)i * P9_SLOT,
					       P9_SLOT, mr->lkey));
	svt_sync_send(wfd, 'S');
	go = svt_sync_recv(rfd, LONG_MS);
	if (go == 'K') {
		/* the doomed process took receive 1000 and was killed in its
		 * copy; the parent's SEND took 1001 behind it */
		wc = expect_wc(e[1].cq, 1000, IBV_WC_REM_ABORT_ERR, "part 10, the killed sender's");
		SVT_CHECK_EQ(wc.qp_num, e[1].qp->qp_num);
		wc = expect_wc(e[0].cq, 1001, IBV_WC_SUCCESS,
			       "part 10, the SEND behind the killed sender's (held back?)");
		check_recv_wc(&wc, &e[0], 1001, IBV_WC_RECV, P10_LEN, NULL, "part 10");
		check_scattered(&(struct ibv_sge){ (uintptr_t)(buf + P9_SLOT), P10_LEN, 0 }, 1,
				P10_LEN, seed9(0, 10), "part 10");
	} else {
		SVT_CHECK_EQ(go, 'U'); /* no userfaultfd here */
	}
	svt_sync_send(wfd, 'D');
	dead_qpn = e[1].qp->qp_num;
	srq_pair_close(e, srq, mr, wmr);
	if (go == 'K')
		after_dead_peer(d, dead_qpn);
	free(buf);
	free(warm);
}

/* The doomed process's fault thread: the first fault of the buffer is
 * reported to the parent ('B') and never supplied. */
struct uffd_watch {
	int uffd, wfd;
};

static void *uffd_thread(void *arg)
{
	struct uffd_watch *w = arg;
	struct uffd_msg m;

	while (read(w->uffd, &m, sizeof(m)) != (ssize_t)sizeof(m))
		if (errno != EINTR && errno != EAGAIN)
			return NULL;
	if (m.event == UFFD_EVENT_PAGEFAULT)
		svt_sync_send(w->wfd, 'B');
	for (;;)
		pause(); /* killed here, with the copy still waiting */
	return NULL;
}

/* A buffer of len bytes whose pages are missing, supplied by nobody until
 * the caller's thread reads *uffd: NULL if this kernel or process has no
 * userfaultfd (what is then not tried). */
static void *missing_pages(size_t len, int *uffd, const char *what)
{
	struct uffdio_api api = { .api = UFFD_API };
	struct uffdio_register reg = { .mode = UFFDIO_REGISTER_MODE_MISSING };
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	SVT_CHECK(p != MAP_FAILED);
	reg.range.start = (uintptr_t)p;
	reg.range.len = len;
	/* (a container's seccomp profile may refuse it) */
	*uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC);
	if (*uffd < 0 || ioctl(*uffd, UFFDIO_API, &api) || ioctl(*uffd, UFFDIO_REGISTER, &reg)) {
		svt_log("no userfaultfd (%s): %s is not tried", strerror(errno), what);
		return NULL;
	}
	return p;
}

/* Role "doomed": a second sender, linked through the parent. */
static int doomed(int rfd, int wfd, int argc, char **argv)
{
	struct uffd_watch w = { -1, wfd };
	uint8_t *warm = svt_alloc(4096), *src;
	struct ibv_mr *wmr, *mr;
	struct svt_dev d;
	pthread_t t;
	struct end e;

	(void)argc;
	(void)argv;
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	svt_watchdog(115);
	svt_dev_open(&d);
	end_open(&e, &d, NULL);
	end_link(&e, &d, rfd, wfd, NULL, 0, NULL);
	wmr = svt_reg_mr(d.pd, warm, 4096, 0);
	SVT_CHECK_EQ(svt_sync_recv(rfd, LONG_MS), 'G');
	svt_fill(warm, 32, 0x99);
	SVT_CHECK_OK(svt_post_send(e.qp, 900, IBV_WR_SEND, IBV_SEND_SIGNALED, warm, 32,
				   wmr->lkey, 0, 0, 0));
	expect_wc(e.cq, 900, IBV_WC_SUCCESS, "part 10, the doomed sender's warm-up");
	src = missing_pages(2 * 4096, &w.uffd, "part 10, the killed sender,");
	if (!src) {
		svt_sync_send(wfd, 'U');
		SVT_CHECK_EQ(svt_sync_recv(rfd, LONG_MS), 'E');
		end_close(&e);
		SVT_CHECK_OK(ibv_dereg_mr(wmr));
		svt_dev_close(&d);
		free(warm);
		return 0;
	}
	/* registered over the missing pages (no access flag: not shared,
	 * nothing touches them until the copy) */
	mr = svt_reg_mr(d.pd, src, 2 * 4096, 0);
	SVT_CHECK_OK(pthread_create(&t, NULL, uffd_thread, &w));
	svt_sync_send(wfd, 'P');
	SVT_CHECK_EQ(svt_sync_recv(rfd, LONG_MS), 'Q');
	/* blocks in the copy, receive 1000 taken, until killed */
	(void)svt_post_send(e.qp, 1, IBV_WR_SEND, IBV_SEND_SIGNALED, src, P10_LEN, mr->lkey, 0,
			    0, 0);
	svt_log("part 10: the doomed sender's SEND did not block: its copy found its pages");
	svt_sync_send(wfd, 'N');
	for (;;)
		pause();
	return 1;
}

static void send_part10(struct svt_dev *d, struct svt_child *c)
{
	uint8_t *src = svt_alloc(P9_SLOT);
	struct ibv_mr *mr = svt_reg_mr(d->pd, src, P9_SLOT, IBV_ACCESS_LOCAL_WRITE);
	struct svt_peer_info info;
	struct svt_child dc;
	struct end e;
	int status;
	char what;

	svt_spawn(&dc, "doomed", NULL);
	end_open(&e, d, NULL);
	end_link(&e, d, c->rfd, c->wfd, NULL, 0, NULL);
	/* the receiver's second QP and the doomed process's, through us */
	svt_recv_info(c->rfd, &info);
	svt_send_info(dc.wfd, &info);
	svt_recv_info(dc.rfd, &info);
	svt_send_info(c->wfd, &info);
	SVT_CHECK_EQ(svt_sync_recv(c->rfd, LONG_MS), 'R');
	svt_fill(src, 32, 0x99);
	SVT_CHECK_OK(svt_post_send(e.qp, 900, IBV_WR_SEND, IBV_SEND_SIGNALED, src, 32, mr->lkey, 0,
				   0, 0));
	expect_wc(e.cq, 900, IBV_WC_SUCCESS, "part 10, warm-up");
	svt_sync_send(dc.wfd, 'G');
	what = svt_sync_recv(dc.rfd, LONG_MS);
	if (what == 'U') {
		svt_sync_send(dc.wfd, 'E');
		SVT_CHECK_EQ(svt_child_wait(&dc, LONG_MS), 0);
		svt_sync_send(c->wfd, 'W');
		SVT_CHECK_EQ(svt_sync_recv(c->rfd, LONG_MS), 'S');
		svt_sync_send(c->wfd, 'U');
		SVT_CHECK_EQ(svt_sync_recv(c->rfd, LONG_MS), 'D');
		end_close(&e);
		SVT_CHECK_OK(ibv_dereg_mr(mr));
		free(src);
		return;
	}
	SVT_CHECK_EQ(what, 'P');
	svt_sync_send(c->wfd, 'W');
	SVT_CHECK_EQ(svt_sync_recv(c->rfd, LONG_MS), 'S');
	svt_sync_send(dc.wfd, 'Q');
	/* the doomed sender is inside its copy, receive 1000 taken */
	SVT_CHECK_EQ(svt_sync_recv(dc.rfd, LONG_MS), 'B');
	fill_at(src, P10_LEN, seed9(0, 10), 0);
	SVT_CHECK_OK(svt_post_send(e.qp, 2, IBV_WR_SEND, IBV_SEND_SIGNALED, src, P10_LEN,
				   mr->lkey, 0, 0, 0));
	expect_wc(e.cq, 2, IBV_WC_SUCCESS, "part 10, the SEND behind");
	SVT_CHECK_OK(kill(dc.pid, SIGKILL));
	SVT_CHECK_EQ(waitpid(dc.pid, &status, 0), dc.pid);
	SVT_CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	svt_sync_send(c->wfd, 'K');
	SVT_CHECK_EQ(svt_sync_recv(c->rfd, LONG_MS), 'D');
	svt_log("part 10: a sender killed inside its copy into an SRQ's receive: that receive "
		"aborted, the SEND placed behind it completed");

	end_close(&e);
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	free(src);
}

/* ---- part 11: polled only, through an extended CQ, the queue full ---- */

#define P11_LEN 300u
#define P11_MAX 14 /* receives of 4 KiB in the 64 KiB buffer, the first apart */

static uint32_t seed11(int i)
{
	return 0xb00 + (uint32_t)i;
}

/* A completion of cx, as a struct ibv_wc. */
static struct ibv_wc read_ex(struct ibv_cq_ex *cx)
{
	struct ibv_wc wc;

	memset(&wc, 0, sizeof(wc));
	wc.wr_id = cx->wr_id;
	wc.status = cx->status;
	wc.opcode = ibv_wc_read_opcode(cx);
	wc.byte_len = ibv_wc_read_byte_len(cx);
	wc.qp_num = ibv_wc_read_qp_num(cx);
	wc.src_qp = ibv_wc_read_src_qp(cx);
	wc.wc_flags = ibv_wc_read_wc_flags(cx);
	return wc;
}

/* n completions of cx within WC_MS, through ibv_start_poll alone. */
static void expect_ex(struct ibv_cq_ex *cx, int n, struct ibv_wc *wc, const char *what)
{
	uint64_t deadline = svt_now_ms() + WC_MS;
	int got = 0, rc;

	while (got < n) {
		while ((rc = ibv_start_poll(cx, NULL)) == ENOENT) {
			struct timespec ts = { 0, 20000 };

			if (svt_now_ms() > deadline)
				SVT_FAIL("%s: ibv_start_poll found %d completions of %d within %d ms",
					 what, got, n, WC_MS);
			nanosleep(&ts, NULL);
		}
		SVT_CHECK_OK(rc);
		do {
			SVT_CHECK_MSG(got < n, "%s: more than %d completions", what, n);
			wc[got++] = read_ex(cx);
		} while ((rc = ibv_next_poll(cx)) == 0);
		SVT_CHECK_EQ(rc, ENOENT);
		ibv_end_poll(cx);
	}
}

static void recv_part11(struct svt_dev *d, int rfd, int wfd)
{
	struct ibv_cq_init_attr_ex ca = { .cqe = 64, .wc_flags = IBV_WC_STANDARD_FLAGS };
	uint8_t *buf = malloc(64u << 10);
	struct ibv_qp_init_attr ia;
	struct ibv_sge sge[P11_MAX + 2];
	struct ibv_cq_ex *cx;
	struct ibv_mr *mr;
	struct ibv_wc wc[2];
	struct end e;
	int k, rc;

	SVT_CHECK_PTR(buf);
	mr = svt_reg_mr(d->pd, buf, 64u << 10, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	cx = ibv_create_cq_ex(d->ctx, &ca);
	SVT_CHECK_PTR(cx);
	memset(&e, 0, sizeof(e));
	e.cq = ibv_cq_ex_to_cq(cx);
	memset(&ia, 0, sizeof(ia));
	ia.send_cq = ia.recv_cq = e.cq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = 4;
	ia.cap.max_recv_wr = 4;
	ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
	e.qp = ibv_create_qp(d->pd, &ia);
	SVT_CHECK_PTR(e.qp);
	end_link(&e, d, rfd, wfd, NULL, 0, NULL);
	for (int i = 0; i < P11_MAX + 2; i++)
		sge[i] = (struct ibv_sge){ (uintptr_t)(buf + 4096 * i + 7), 1024, mr->lkey };

	/* the first SEND (by the wire) moves the queue to the arena */
	post_recv_sgl(e.qp, 11000, &sge[0], 1);
	svt_sync_send(wfd, 'R');
	expect_ex(cx, 1, wc, "part 11, the first SEND");
	check_recv_wc(&wc[0], &e, 11000, IBV_WC_RECV, P11_LEN, NULL, "part 11, the first SEND");
	check_scattered(&sge[0], 1, P11_LEN, seed11(0), "part 11, the first SEND");

	/* the queue filled: as many receives as it holds */
	for (k = 0;; k++) {
		struct ibv_recv_wr wr = { .wr_id = 11001 + (uint64_t)k, .sg_list = &sge[k + 1],
					  .num_sge = 1 };
		struct ibv_recv_wr *bad = NULL;

		SVT_CHECK(k < P11_MAX);
		rc = ibv_post_recv(e.qp, &wr, &bad);
		if (rc == ENOMEM)
			break;
		SVT_CHECK_OK(rc);
	}
	SVT_CHECK(k >= 2);
	svt_sync_send(wfd, 'F');
	SVT_CHECK_EQ(svt_sync_recv(rfd, LONG_MS), 'S'); /* two SENDs completed */
	/* not polled: the two receives they completed left room for two */
	for (int j = 0; j < 2; j++) {
		struct ibv_recv_wr wr = { .wr_id = 11001 + (uint64_t)(k + j), .sg_list = &sge[k + j + 1],
					  .num_sge = 1 };
		struct ibv_recv_wr *bad = NULL;

		rc = ibv_post_recv(e.qp, &wr, &bad);
		SVT_CHECK_MSG(rc == 0,
			      "part 11: ibv_post_recv into a queue of %d receives, two of them "
			      "completed by SENDs and not polled yet: %s",
			      k, strerror(rc));
	}
	expect_ex(cx, 2, wc, "part 11, SENDs into a full queue");
	for (int j = 1; j <= 2; j++) {
		check_recv_wc(&wc[j - 1], &e, 11000 + (uint64_t)j, IBV_WC_RECV, P11_LEN, NULL,
			      "part 11, a SEND into a full queue");
		check_scattered(&sge[j], 1, P11_LEN, seed11(j), "part 11, a SEND into a full queue");
	}
	/* one more, found by ibv_start_poll alone (no channel: nothing else
	 * takes it in) */
	svt_sync_send(wfd, 'P');
	SVT_CHECK_EQ(svt_sync_recv(rfd, LONG_MS), 'S');
	expect_ex(cx, 1, wc, "part 11, the last SEND");
	check_recv_wc(&wc[0], &e, 11003, IBV_WC_RECV, P11_LEN, NULL, "part 11, the last SEND");
	check_scattered(&sge[3], 1, P11_LEN, seed11(3), "part 11, the last SEND");
	SVT_CHECK_EQ(ibv_start_poll(cx, NULL), ENOENT);
	svt_sync_send(wfd, 'D');

	SVT_CHECK_OK(ibv_destroy_qp(e.qp));
	SVT_CHECK_OK(ibv_destroy_cq(e.cq));
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	free(buf);
}

static void send_part11(struct svt_dev *d, struct svt_child *c)
{
	uint8_t *src = svt_alloc(4 * 4096);
	struct ibv_mr *mr = svt_reg_mr(d->pd, src, 4 * 4096, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_wc wc[2];
	struct end e;

	end_open(&e, d, NULL);
	end_link(&e, d, c->rfd, c->wfd, NULL, 0, NULL);
	for (int i = 0; i < 4; i++)
		svt_fill(src + 4096 * i, P11_LEN, seed11(i));
	SVT_CHECK_EQ(svt_sync_recv(c->rfd, LONG_MS), 'R');
	SVT_CHECK_OK(svt_post_send(e.qp, 110, IBV_WR_SEND, IBV_SEND_SIGNALED, src, P11_LEN,
				   mr->lkey, 0, 0, 0));
	expect_wc(e.cq, 110, IBV_WC_SUCCESS, "part 11, the first SEND");
	SVT_CHECK_EQ(svt_sync_recv(c->rfd, LONG_MS), 'F');
	for (int i = 1; i <= 2; i++)
		SVT_CHECK_OK(svt_post_send(e.qp, 110 + (uint64_t)i, IBV_WR_SEND, IBV_SEND_SIGNALED,
					   src + 4096 * i, P11_LEN, mr->lkey, 0, 0, 0));
	svt_poll_ok(e.cq, 2, wc, WC_MS);
	SVT_CHECK_EQ(wc[0].wr_id, 111);
	SVT_CHECK_EQ(wc[1].wr_id, 112);
	svt_sync_send(c->wfd, 'S');
	SVT_CHECK_EQ(svt_sync_recv(c->rfd, LONG_MS), 'P');
	SVT_CHECK_OK(svt_post_send(e.qp, 113, IBV_WR_SEND, IBV_SEND_SIGNALED, src + 3 * 4096,
				   P11_LEN, mr->lkey, 0, 0, 0));
	expect_wc(e.cq, 113, IBV_WC_SUCCESS, "part 11, the last SEND");
	svt_sync_send(c->wfd, 'S');
	SVT_CHECK_EQ(svt_sync_recv(c->rfd, LONG_MS), 'D');
	svt_log("part 11: an extended CQ without a channel polled, and a full queue posted to "
		"after two SENDs, unpolled");

	end_close(&e);
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	free(src);
}

/* ---- part 12: an SRQ of another PD than its QP's ----
 * The receives' lkeys belong to the SRQ's PD, as the responder checks
 * them: the sender places into them with the receiver stopped; a receive
 * whose MR is of the QP's PD (not the SRQ's) fails as by the wire. */

#define P12_N 8
#define P12_SLOT 4096

static uint32_t len12(int k)
{
	static const uint32_t l[P12_N] = { 1, 4096, 0, 777, 64, 4000, 300, 2048 };

	return l[k];
}

static void recv_part12(struct svt_dev *d, int rfd, int wfd)
{
	struct ibv_pd *pd2 = ibv_alloc_pd(d->ctx);
	uint8_t *buf = malloc(P12_SLOT * P12_N), *warm = svt_alloc(4096), *img, *other;
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 16, .max_sge = 1 } };
	struct ibv_mr *mr, *wmr, *omr;
	struct ibv_wc wc;
	struct ibv_srq *srq;
	struct end e;
	uint64_t until;

	SVT_CHECK_PTR(pd2);
	SVT_CHECK_PTR(buf);
	other = svt_alloc(4096);
	img = guard_image(buf, P12_SLOT * P12_N);
	mr = svt_reg_mr(pd2, buf, P12_SLOT * P12_N, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	wmr = svt_reg_mr(pd2, warm, 4096, IBV_ACCESS_LOCAL_WRITE);
	/* of the QP's PD, not the SRQ's */
	omr = svt_reg_mr(d->pd, other, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	srq = ibv_create_srq(pd2, &sa);
	SVT_CHECK_PTR(srq);
	end_open_srq(&e, d, NULL, srq);
	SVT_CHECK(e.qp->pd != pd2);
	end_link(&e, d, rfd, wfd, NULL, 0, NULL);
	SVT_CHECK_OK(svt_post_srq_recv(srq, 1200, warm, 64, wmr->lkey));
	svt_sync_send(wfd, 'R');
	SVT_CHECK_EQ(svt_sync_recv(rfd, LONG_MS), 'W');
	wc = expect_wc(e.cq, 1200, IBV_WC_SUCCESS, "part 12, warm-up");
	check_recv_wc(&wc, &e, 1200, IBV_WC_RECV, 32, NULL, "part 12, warm-up");
	for (until = svt_now_ms() + 5000;
	     !pages_shared(buf, P12_SLOT * P12_N) && svt_now_ms() < until;)
		svt_sleep_ms(1);
	SVT_CHECK_MSG(pages_shared(buf, P12_SLOT * P12_N),
		      "part 12: the buffer's pages are not shared");

	for (int k = 0; k < P12_N; k++)
		SVT_CHECK_OK(svt_post_srq_recv(srq, 1210 + (uint64_t)k, buf + (size_t)k * P12_SLOT,
					       P12_SLOT, mr->lkey));
	svt_sync_send(wfd, 'S');
	/* stopped here by the sender, then continued */
	SVT_CHECK_EQ(svt_sync_recv(rfd, 60000), 'C');
	for (int k = 0; k < P12_N; k++) {
		struct ibv_sge sge = { (uintptr_t)(buf + (size_t)k * P12_SLOT), P12_SLOT, mr->lkey };
		char w[48];

		snprintf(w, sizeof(w), "part 12, message %d", k);
		wc = expect_wc(e.cq, 1210 + (uint64_t)k, IBV_WC_SUCCESS, w);
		check_recv_wc(&wc, &e, 1210 + (uint64_t)k, IBV_WC_RECV, len12(k), NULL, w);
		check_scattered(&sge, 1, len12(k), 0x1200u + (uint32_t)k, w);
		scatter(img, buf, &sge, 1, len12(k), 0x1200u + (uint32_t)k);
	}
	check_image(buf, img, P12_SLOT * P12_N, "part 12");

	/* a receive whose lkey is of the QP's PD: not the SRQ's, so it fails */
	SVT_CHECK_OK(svt_post_srq_recv(srq, 1299, other, 4096, omr->lkey));
	svt_sync_send(wfd, 'B');
	wc = svt_poll_one(e.cq);
	SVT_CHECK_EQ(wc.wr_id, 1299);
	SVT_CHECK_WC_STATUS(wc, IBV_WC_LOC_PROT_ERR);
	for (int i = 0; i < 4096; i++)
		SVT_CHECK_MSG(!other[i], "part 12: byte %d of the failed receive written", i);
	SVT_CHECK_EQ(svt_sync_recv(rfd, LONG_MS), 'D');

	end_close(&e);
	SVT_CHECK_OK(ibv_destroy_srq(srq));
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	SVT_CHECK_OK(ibv_dereg_mr(wmr));
	SVT_CHECK_OK(ibv_dereg_mr(omr));
	SVT_CHECK_OK(ibv_dealloc_pd(pd2));
	free(buf);
	free(img);
	free(warm);
	free(other);
}

static void send_part12(struct svt_dev *d, struct svt_child *c)
{
	uint8_t *src = svt_alloc(P12_SLOT * P12_N);
	struct ibv_mr *mr = svt_reg_mr(d->pd, src, P12_SLOT * P12_N, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_wc wc[P12_N];
	bool stop = !no_stop();
	int status, got;
	struct end e;

	end_open(&e, d, NULL);
	end_link(&e, d, c->rfd, c->wfd, NULL, 0, NULL);
	SVT_CHECK_EQ(svt_sync_recv(c->rfd, LONG_MS), 'R');
	svt_fill(src, 32, 0x12);
	SVT_CHECK_OK(svt_post_send(e.qp, 1200, IBV_WR_SEND, IBV_SEND_SIGNALED, src, 32, mr->lkey, 0,
				   0, 0));
	expect_wc(e.cq, 1200, IBV_WC_SUCCESS, "part 12, warm-up");
	svt_sync_send(c->wfd, 'W');
	SVT_CHECK_EQ(svt_sync_recv(c->rfd, LONG_MS), 'S');

	if (stop) {
		SVT_CHECK_OK(kill(c->pid, SIGSTOP));
		SVT_CHECK_EQ(waitpid(c->pid, &status, WUNTRACED), c->pid);
		SVT_CHECK(WIFSTOPPED(status));
	}
	for (int k = 0; k < P12_N; k++) {
		uint8_t *at = src + (size_t)k * P12_SLOT;

		fill_at(at, len12(k), 0x1200u + (uint32_t)k, 0);
		SVT_CHECK_OK(svt_post_send(e.qp, 1210 + (uint64_t)k, IBV_WR_SEND, IBV_SEND_SIGNALED,
					   at, len12(k), mr->lkey, 0, 0, 0));
	}
	got = poll_until(e.cq, P12_N, wc, svt_now_ms() + (stop ? STOPPED_MS : WC_MS));
	for (int k = 0; k < got; k++) {
		SVT_CHECK_WC_STATUS(wc[k], IBV_WC_SUCCESS);
		SVT_CHECK_EQ(wc[k].wr_id, 1210 + (uint64_t)k);
	}
	if (got < P12_N && stop)
		SVT_FAIL("part 12: SENDs into an SRQ of another PD did not complete while the "
			 "receiver was stopped (not placed by the sender): %d of %d",
			 got, P12_N);
	SVT_CHECK_EQ(got, P12_N);
	if (stop)
		SVT_CHECK_OK(kill(c->pid, SIGCONT));
	svt_sync_send(c->wfd, 'C');

	SVT_CHECK_EQ(svt_sync_recv(c->rfd, LONG_MS), 'B');
	svt_fill(src, 64, 0x13);
	SVT_CHECK_OK(svt_post_send(e.qp, 1299, IBV_WR_SEND, IBV_SEND_SIGNALED, src, 64, mr->lkey, 0,
				   0, 0));
	wc[0] = svt_poll_one(e.cq);
	SVT_CHECK_EQ(wc[0].wr_id, 1299);
	SVT_CHECK_WC_STATUS(wc[0], IBV_WC_REM_OP_ERR);
	check_state(e.qp, IBV_QPS_ERR, "part 12, after the failed receive");
	svt_sync_send(c->wfd, 'D');
	svt_log("part 12: %d SENDs into an SRQ of another PD than its QP's completed %s; a "
		"receive of the QP's PD failed (LOC_PROT_ERR there, REM_OP_ERR here)",
		P12_N, stop ? "with the receiver stopped" : "(receiver running)");

	end_close(&e);
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	free(src);
}

/* ---- parts 13 and 14: the receiver's QP enters ERR while a SEND is placed ----
 * The parent sends from a page a userfaultfd supplies only a while after
 * the receiver says its QP enters ERR: the receive is taken and the copy
 * waits in between.  The SEND and its receive must end alike: both
 * successful (the placement ended before the flush) or neither (the
 * receive flushed, the SEND failing by the wire, where the responder in
 * ERR answers nothing).  Part 13: ibv_modify_qp(ERR), which waits for the
 * placement.  Part 14: a SEND of the receiver's with an lkey it does not
 * have, whose local protection error takes the QP to ERR at once. */

#define P13_LEN 1000u
#define P13_HOLD_MS 150 /* the copy held after the receiver's 'M' */

/* Part 14's connection: a SEND gone by the wire to a QP in ERR fails
 * after 3 tries of 1 ms (timeout 8: 4.096 us << 8). */
static void quick_conn(struct svt_conn *c)
{
	svt_conn_default(c, IBV_QPT_RC);
	c->timeout = 8;
	c->retry_cnt = 2;
}

/* Parts 13-16, the receiver: the sender's two warm-up SENDs (the first
 * moves the queue) complete in receives wr0 and wr0 + 1, and then its
 * third is held in its copy, receive wr0 + 2 taken; false when the sender
 * has no userfaultfd (nothing is tried: the part's end is said). */
static bool placement_held(struct end *e, int rfd, int wfd, uint64_t wr0, const char *what)
{
	struct ibv_wc wc;
	char go;

	for (int r = 0; r < 2; r++) {
		wc = expect_wc(e->cq, wr0 + (uint64_t)r, IBV_WC_SUCCESS, what);
		check_recv_wc(&wc, e, wr0 + (uint64_t)r, IBV_WC_RECV, 32, NULL, what);
	}
	svt_sync_send(wfd, 'W');
	go = svt_sync_recv(rfd, LONG_MS);
	if (go == 'U') {
		svt_sync_send(wfd, 'D');
		return false;
	}
	SVT_CHECK_EQ(go, 'G');
	SVT_CHECK_EQ(svt_sync_recv(rfd, LONG_MS), 'B');
	return true;
}

static void recv_err_placing(struct svt_dev *d, int rfd, int wfd, int part)
{
	static const uint32_t len[4] = { 32, 32, P13_LEN, 0 };
	const bool own = part == 14;
	struct svt_conn qc;
	uint8_t *buf, *img;
	struct ibv_wc wc[3], *rwc = wc;
	struct ibv_mr *mr;
	uint64_t t0, took;
	struct end e;

	quick_conn(&qc);
	mr = four_receives(d, rfd, wfd, &e, &buf, &img, 3, 1300, len, 0x1300, own ? &qc : NULL);
	svt_sync_send(wfd, 'R');
	if (!placement_held(&e, rfd, wfd, 1300, "parts 13-14, warm-up"))
		goto out;
	svt_sync_send(wfd, 'M');
	t0 = svt_now_ms();
	if (own)
		SVT_CHECK_OK(svt_post_send(e.qp, 1399, IBV_WR_SEND, IBV_SEND_SIGNALED, buf, 8,
					   mr->lkey ^ 0x5a5a00, 0, 0, 0));
	else
		SVT_CHECK_OK(svt_qp_to_state(e.qp, IBV_QPS_ERR));
	took = svt_now_ms() - t0;
	if (poll_until(e.cq, own ? 3 : 2, wc, svt_now_ms() + WC_MS) != (own ? 3 : 2))
		SVT_FAIL("part %d: fewer completions than WRs within %d ms", part, WC_MS);
	if (own) {
		/* its SEND's error comes before the flush */
		SVT_CHECK_EQ(wc[0].wr_id, 1399);
		SVT_CHECK_WC_STATUS(wc[0], IBV_WC_LOC_PROT_ERR);
		check_state(e.qp, IBV_QPS_ERR, "part 14, after the failed SEND");
		rwc = wc + 1;
	}
	SVT_CHECK_EQ(rwc[0].wr_id, 1302);
	SVT_CHECK_WC_STATUS(rwc[1], IBV_WC_WR_FLUSH_ERR);
	SVT_CHECK_EQ(rwc[1].wr_id, 1303);
	if (rwc[0].status == IBV_WC_SUCCESS)
		check_recv_wc(&rwc[0], &e, 1302, IBV_WC_RECV, P13_LEN, NULL, "parts 13-14");
	else
		SVT_CHECK_WC_STATUS(rwc[0], IBV_WC_WR_FLUSH_ERR);
	if (!own && rwc[0].status != IBV_WC_SUCCESS && took < 1000)
		/* (where the wait gave up, 1 s, either end is right) */
		SVT_FAIL("part 13: ibv_modify_qp(ERR) did not wait for the SEND being placed "
			 "(%llu ms): its receive was flushed",
			 (unsigned long long)took);
	svt_expect_no_wc(e.cq, 50);
	/* the flushed receive's buffer may hold the message or not */
	if (rwc[0].status != IBV_WC_SUCCESS)
		memcpy(img + 3 + 2 * 2048, buf + 3 + 2 * 2048, P13_LEN);
	check_image(buf, img, 64u << 10, part == 13 ? "part 13" : "part 14");
	/* the SEND's end, as its receive's */
	svt_sync_send(wfd, rwc[0].status == IBV_WC_SUCCESS ? 'Y' : 'N');
	SVT_CHECK_EQ(svt_sync_recv(rfd, LONG_MS), 'D');
	svt_log("part %d: the receiver's QP entered ERR (%s, %llu ms) while a SEND was placed "
		"into its receive: the receive %s, the one behind flushed",
		part, own ? "a SEND of its own failed" : "ibv_modify_qp", (unsigned long long)took,
		rwc[0].status == IBV_WC_SUCCESS ? "completed with the data, as did the SEND"
						 : "flushed, and the SEND failed");
out:
	end_close(&e);
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	free(buf);
	free(img);
}

/* Parts 15-16's watcher: once IBV_EVENT_QP_LAST_WQE_REACHED comes (no WQE
 * of the SRQ is the QP's after it), the CQ must hold the receive being
 * placed when the QP entered ERR: one poll, at once. */
struct last_wqe_watch {
	struct svt_dev *d;
	struct end *e;
	int got, event;
	struct ibv_wc wc[4];
};

static void *last_wqe_watcher(void *arg)
{
	struct last_wqe_watch *w = arg;
	struct ibv_async_event ev;

	if (svt_wait_async_event(w->d->ctx, WC_MS, &ev))
		return NULL;
	w->event = ev.event_type;
	if (ev.event_type == IBV_EVENT_QP_LAST_WQE_REACHED && ev.element.qp == w->e->qp)
		w->got = ibv_poll_cq(w->e->cq, 4, w->wc);
	ibv_ack_async_event(&ev);
	return NULL;
}

/* Parts 15 and 16: parts 13 and 14 with the receive an SRQ's.  Part 15:
 * ibv_modify_qp(ERR) waits for the placement there too.  Part 16: the
 * QP's own SEND fails (a local protection error), and its ERR, which is
 * not waited for, does not take an SRQ's WQE back: the event waits for the
 * placement instead.  Both: the receive completes with its data, on the
 * CQ before IBV_EVENT_QP_LAST_WQE_REACHED comes, and nothing follows. */
static void recv_err_placing_srq(struct svt_dev *d, int rfd, int wfd, int part)
{
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 8, .max_sge = 1 } };
	const bool own = part == 16;
	const uint64_t wr0 = own ? 1600 : 1500;
	uint8_t *buf = svt_alloc(4 * 2048), *img;
	struct last_wqe_watch lw = { d, NULL, -1, -1, { { 0 } } };
	struct ibv_srq *srq;
	pthread_t t;
	struct ibv_mr *mr;
	struct ibv_wc wc[4], *rwc = NULL;
	uint64_t t0, took;
	int n = 0;
	struct end e;

	img = guard_image(buf, 4 * 2048);
	mr = svt_reg_mr(d->pd, buf, 4 * 2048, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	srq = ibv_create_srq(d->pd, &sa);
	SVT_CHECK_PTR(srq);
	end_open_srq(&e, d, NULL, srq);
	end_link(&e, d, rfd, wfd, NULL, 0, NULL);
	for (int r = 0; r < 3; r++) {
		struct ibv_sge sge = { (uintptr_t)(buf + 3 + 2048 * r), 1024, mr->lkey };

		scatter(img, buf, &sge, 1, r < 2 ? 32 : P13_LEN, 0x1300u + (uint32_t)r);
		SVT_CHECK_OK(svt_post_srq_recv(srq, wr0 + (uint64_t)r, buf + 3 + 2048 * r, 1024,
					       mr->lkey));
	}
	svt_sync_send(wfd, 'R');
	if (!placement_held(&e, rfd, wfd, wr0, own ? "part 16, warm-up" : "part 15, warm-up"))
		goto out;
	lw.e = &e;
	SVT_CHECK_OK(pthread_create(&t, NULL, last_wqe_watcher, &lw));
	svt_sync_send(wfd, 'M');
	t0 = svt_now_ms();
	if (own)
		SVT_CHECK_OK(svt_post_send(e.qp, wr0 + 99, IBV_WR_SEND, IBV_SEND_SIGNALED, buf, 8,
					   mr->lkey ^ 0x5a5a00, 0, 0, 0));
	else
		SVT_CHECK_OK(svt_qp_to_state(e.qp, IBV_QPS_ERR));
	took = svt_now_ms() - t0;
	SVT_CHECK_OK(pthread_join(t, NULL));
	SVT_CHECK_MSG(lw.event == IBV_EVENT_QP_LAST_WQE_REACHED,
		      "part %d: the event was %d, not IBV_EVENT_QP_LAST_WQE_REACHED", part, lw.event);
	/* what the watcher's one poll found: the failed SEND's completion
	 * (part 16), then the receive */
	for (int k = 0; k < lw.got; k++)
		wc[n++] = lw.wc[k];
	if (own && n >= 1) {
		SVT_CHECK_EQ(wc[0].wr_id, wr0 + 99);
		SVT_CHECK_WC_STATUS(wc[0], IBV_WC_LOC_PROT_ERR);
	}
	if (n == (own ? 2 : 1))
		rwc = &wc[n - 1];
	else if (took < 1000)
		/* (where the wait gave up, 1 s, the placement may end later) */
		SVT_FAIL("part %d: IBV_EVENT_QP_LAST_WQE_REACHED came (%s: %llu ms) before the "
			 "receive a SEND was being placed into had completed (%d completions)",
			 part, own ? "the QP's SEND failed" : "ibv_modify_qp",
			 (unsigned long long)took, lw.got);
	if (!rwc) {
		if (own && n == 0)
			SVT_CHECK_EQ(poll_until(e.cq, 1, &wc[n++], svt_now_ms() + WC_MS), 1);
		SVT_CHECK_EQ(poll_until(e.cq, 1, &wc[n], svt_now_ms() + WC_MS), 1);
		rwc = &wc[n];
	}
	check_recv_wc(rwc, &e, wr0 + 2, IBV_WC_RECV, P13_LEN, NULL, own ? "part 16" : "part 15");
	if (own)
		check_state(e.qp, IBV_QPS_ERR, "part 16, after the failed SEND");
	svt_expect_no_wc(e.cq, 50);
	check_image(buf, img, 4 * 2048, own ? "part 16" : "part 15");
	svt_sync_send(wfd, 'Y'); /* as the SEND must end */
	SVT_CHECK_EQ(svt_sync_recv(rfd, LONG_MS), 'D');
	svt_log("part %d: a QP of an SRQ entered ERR (%s, %llu ms) while a SEND was placed for it: "
		"its receive completed with the data, before IBV_EVENT_QP_LAST_WQE_REACHED",
		part, own ? "a SEND of its own failed" : "ibv_modify_qp, which waited",
		(unsigned long long)took);
out:
	end_close(&e);
	SVT_CHECK_OK(ibv_destroy_srq(srq));
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	free(buf);
	free(img);
}

/* The parent's fault thread: the fault of the SEND's copy is told to the
 * receiver ('B'); once it says its QP enters ERR ('M'), the page is
 * supplied a little later, with the message in it. */
struct uffd_supply {
	int uffd, rfd, wfd;
	uint8_t *page;
};

static void *supply_thread(void *arg)
{
	struct uffd_supply *u = arg;
	uint8_t *data = svt_alloc(4096);
	struct uffdio_copy cp = { .dst = (uintptr_t)u->page, .src = (uintptr_t)data, .len = 4096 };
	struct uffd_msg m;

	fill_at(data, P13_LEN, 0x1302, 0);
	while (read(u->uffd, &m, sizeof(m)) != (ssize_t)sizeof(m))
		if (errno != EINTR && errno != EAGAIN)
			return NULL;
	SVT_CHECK_EQ(m.event, UFFD_EVENT_PAGEFAULT);
	svt_sync_send(u->wfd, 'B');
	SVT_CHECK_EQ(svt_sync_recv(u->rfd, LONG_MS), 'M');
	svt_sleep_ms(P13_HOLD_MS); /* the receiver's QP is in ERR by then */
	SVT_CHECK(ioctl(u->uffd, UFFDIO_COPY, &cp) == 0);
	free(data);
	return NULL;
}

static void send_err_placing(struct svt_dev *d, struct svt_child *c, int part)
{
	uint8_t *warm = svt_alloc(4096), *src;
	struct ibv_mr *wmr = svt_reg_mr(d->pd, warm, 4096, IBV_ACCESS_LOCAL_WRITE), *mr;
	struct uffd_supply u = { -1, c->rfd, c->wfd, NULL };
	struct svt_conn qc;
	struct ibv_wc wc;
	pthread_t t;
	struct end e;
	char how;

	quick_conn(&qc);
	end_open(&e, d, NULL);
	end_link(&e, d, c->rfd, c->wfd, NULL, 0, part == 14 ? &qc : NULL);
	SVT_CHECK_EQ(svt_sync_recv(c->rfd, LONG_MS), 'R');
	for (int r = 0; r < 2; r++) {
		fill_at(warm + 64 * r, 32, 0x1300u + (uint32_t)r, 0);
		SVT_CHECK_OK(svt_post_send(e.qp, 130 + (uint64_t)r, IBV_WR_SEND, IBV_SEND_SIGNALED,
					   warm + 64 * r, 32, wmr->lkey, 0, 0, 0));
		expect_wc(e.cq, 130 + (uint64_t)r, IBV_WC_SUCCESS, "parts 13-16, warm-up");
	}
	SVT_CHECK_EQ(svt_sync_recv(c->rfd, LONG_MS), 'W');
	src = missing_pages(4096, &u.uffd, "parts 13-16, ERR during a placement,");
	if (!src) {
		svt_sync_send(c->wfd, 'U');
		SVT_CHECK_EQ(svt_sync_recv(c->rfd, LONG_MS), 'D');
		goto out;
	}
	/* (no access flag: not shared, nothing touches the page before the
	 * copy) */
	mr = svt_reg_mr(d->pd, src, 4096, 0);
	u.page = src;
	svt_sync_send(c->wfd, 'G');
	SVT_CHECK_OK(pthread_create(&t, NULL, supply_thread, &u));
	/* blocks in the copy until the page comes */
	SVT_CHECK_OK(svt_post_send(e.qp, 131, IBV_WR_SEND, IBV_SEND_SIGNALED, src, P13_LEN,
				   mr->lkey, 0, 0, 0));
	SVT_CHECK_OK(pthread_join(t, NULL));
	if (poll_until(e.cq, 1, &wc, svt_now_ms() + WC_MS) != 1)
		SVT_FAIL("part %d: the SEND did not complete within %d ms", part, WC_MS);
	SVT_CHECK_EQ(wc.wr_id, 131);
	how = svt_sync_recv(c->rfd, LONG_MS);
	if (how == 'Y') {
		SVT_CHECK_WC_STATUS(wc, IBV_WC_SUCCESS);
	} else {
		SVT_CHECK_EQ(how, 'N');
		if (wc.status == IBV_WC_SUCCESS)
			SVT_FAIL("part %d: the SEND completed successfully, its receive was flushed",
				 part);
		/* by the wire, to a responder in ERR: no answer */
		SVT_CHECK_WC_STATUS(wc, IBV_WC_RETRY_EXC_ERR);
	}
	svt_sync_send(c->wfd, 'D');
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	close(u.uffd);
	SVT_CHECK(munmap(src, 4096) == 0);
out:
	end_close(&e);
	SVT_CHECK_OK(ibv_dereg_mr(wmr));
	free(warm);
}

/* ---- the two processes ---- */

static int receiver(int rfd, int wfd, int argc, char **argv)
{
	struct svt_dev d;

	(void)argc;
	(void)argv;
	/* stopped by the parent: if it dies meanwhile, so do we */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() == 1)
		return 1;
	svt_watchdog(115);
	svt_dev_open(&d);
	recv_part1(&d, rfd, wfd);
	recv_part2(&d, rfd, wfd);
	recv_part3(&d, rfd, wfd);
	recv_part4(&d, rfd, wfd);
	recv_part5(&d, rfd, wfd);
	recv_part6(&d, rfd, wfd);
	recv_part7(&d, rfd, wfd);
	recv_part8(&d, rfd, wfd);
	recv_part9(&d, rfd, wfd);
	recv_part10(&d, rfd, wfd);
	recv_part11(&d, rfd, wfd);
	recv_part12(&d, rfd, wfd);
	recv_err_placing(&d, rfd, wfd, 13);
	recv_err_placing(&d, rfd, wfd, 14);
	recv_err_placing_srq(&d, rfd, wfd, 15);
	recv_err_placing_srq(&d, rfd, wfd, 16);
	svt_dev_close(&d);
	return 0;
}

static const struct svt_child_role roles[] = {
	{ "receiver", receiver },
	{ "doomed", doomed },
	{ NULL, NULL },
};

int main(int argc, char **argv)
{
	const char *tp = getenv("SOFTVERBS_TRANSPORT");
	const char *share = getenv("SOFTVERBS_SHARED_MR");
	struct svt_child c;
	struct svt_dev d;

	svt_child_dispatch(argc, argv, roles);
	svt_watchdog(110); /* below CTest's 120 s; alone it takes a few seconds */
	if (tp && (!strcmp(tp, "tcp") || !strcmp(tp, "rocev2")))
		svt_skip("a SEND is executed by the sender between processes of this host over shm "
			 "only");
	if (share && !strcmp(share, "0"))
		svt_skip("SOFTVERBS_SHARED_MR=0: no receive buffer is shared with the sender");
	svt_spawn(&c, "receiver", NULL);
	svt_dev_open(&d);
	send_part1(&d, &c);
	send_part2(&d, &c);
	send_part3(&d, &c);
	send_part4(&d, &c);
	send_part5(&d, &c);
	send_part6(&d, &c);
	send_part7(&d, &c);
	send_part8(&d, &c);
	send_part9(&d, &c);
	send_part10(&d, &c);
	send_part11(&d, &c);
	send_part12(&d, &c);
	send_err_placing(&d, &c, 13);
	send_err_placing(&d, &c, 14);
	send_err_placing(&d, &c, 15);
	send_err_placing(&d, &c, 16);
	SVT_CHECK_EQ(svt_child_wait(&c, LONG_MS), 0);
	svt_dev_close(&d);
	return 0;
}
