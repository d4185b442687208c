/*
 * scale_qp10k: 10,000 connected RC QPs in one pair of processes on one host.
 *
 * The parent and a child, forked before either makes any verbs call, each
 * open their own device, create N RC QPs (default 10000; $SV_SCALE_QPS
 * overrides it for quick local runs) with small queues on one CQ per
 * process, exchange the QP numbers through two pipes and connect QP i of
 * one to QP i of the other. (A plain fork rather than svt_spawn's fork+exec
 * of /proc/self/exe, because under valgrind that exec names valgrind's own
 * tool binary and fails; valgrind does follow a fork.) Then, on every pair, the parent posts one RDMA WRITE, one RDMA
 * READ and one SEND (in that order, all signaled), into a receive the child
 * posted beforehand:
 *   - every completion is checked (status, opcode, wr_id, qp_num, byte_len)
 *     and counted: exactly N per kind on the parent, N receives on the child;
 *   - the SEND and WRITE payloads carry the QP index; the child checks both
 *     when the receive of QP i completes (RC executes the WRITE before the
 *     SEND that follows it on the same QP), the parent checks what READ
 *     brought back.
 * Everything is destroyed afterwards, each destroy checked.
 *
 * Both processes print the time of each phase and their memory use: RSS
 * (/proc/self/statm) and heap in use (mallinfo2) after opening the device and
 * allocating the buffers, CQ and MR, then after creating the QPs, after
 * connecting them and after the traffic. "memory per QP" is the RSS growth
 * from the first to the connected point divided by N: what the QPs
 * themselves cost, before traffic touches the CQ ring and connection buffers.
 */
#include "sv_test.h"

#include <malloc.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#define DEFAULT_QPS 10000
#define SLOT 128        /* bytes of buffer per QP index, see the offsets */
#define OFF_SEND 0      /* parent: SEND source; child: receive buffer */
#define RECV_LEN 64     /* receive buffer size: larger than the message */
#define OFF_WRITE 64    /* parent: WRITE source; child: WRITE target */
#define OFF_READ 96     /* parent: READ destination; child: READ source */
#define MSG_LEN 32      /* every message */
#define WAIT_MS 120000  /* any single wait; the watchdog bounds the whole */

enum kind { K_WRITE = 1, K_READ = 2, K_SEND = 3 };

/* What one side tells the other before connecting. */
struct hello {
	union ibv_gid gid;
	uint64_t addr;
	uint32_t rkey;
	uint32_t n;
};

struct mem {
	long rss;  /* bytes */
	long heap; /* bytes in use per mallinfo2 */
};

struct side {
	const char *name;
	uint32_t n;
	struct svt_dev d;
	struct ibv_cq *cq;
	struct ibv_qp **qp;
	uint8_t *buf;
	size_t buf_len;
	struct ibv_mr *mr;
	struct hello peer;
	uint32_t *peer_qpn;
	struct mem m_base, m_created, m_connected, m_traffic;
};

static uint32_t qp_count(void)
{
	const char *s = getenv("SV_SCALE_QPS");
	long v;

	if (!s || !*s)
		return DEFAULT_QPS;
	v = strtol(s, NULL, 10);
	SVT_CHECK_MSG(v > 0 && v <= 16384, "SV_SCALE_QPS=%s: want 1..16384", s);
	return (uint32_t)v;
}

static struct mem mem_now(void)
{
	struct mem m = { 0, 0 };
	long size = 0, resident = 0;
	FILE *f = fopen("/proc/self/statm", "r");

	SVT_CHECK_PTR(f);
	SVT_CHECK_EQ(fscanf(f, "%ld %ld", &size, &resident), 2);
	fclose(f);
	m.rss = resident * sysconf(_SC_PAGESIZE);
	m.heap = (long)mallinfo2().uordblks;
	return m;
}

/* The 32 bytes of message `kind` on QP index i: the index, the kind, then
 * a pattern that depends on both, so a message landing on the wrong QP or
 * in the wrong place is caught. */
static void payload(uint8_t *p, uint32_t i, enum kind k)
{
	uint32_t hdr[2] = { i, (uint32_t)k };

	memcpy(p, hdr, sizeof(hdr));
	svt_fill(p + sizeof(hdr), MSG_LEN - sizeof(hdr), i * 4 + (uint32_t)k);
}

static void check_payload(const uint8_t *p, uint32_t i, enum kind k)
{
	uint8_t want[MSG_LEN];

	payload(want, i, k);
	SVT_CHECK_MEM(p, want, MSG_LEN);
}

static double ms_since(uint64_t t0)
{
	return (double)(svt_now_ms() - t0);
}

/* Device, PD, CQ (cqe entries), the buffer and its MR: everything that does
 * not scale with the QP count, set up before the baseline. */
static void side_open(struct side *s, const char *name, uint32_t n, int cqe)
{
	memset(s, 0, sizeof(*s));
	s->name = name;
	s->n = n;
	svt_dev_open(&s->d);
	SVT_CHECK_MSG((uint32_t)s->d.dev_attr.max_qp >= n,
		      "device max_qp %d < %u QPs", s->d.dev_attr.max_qp, n);
	s->cq = svt_create_cq(s->d.ctx, cqe, NULL);
	s->buf_len = (size_t)n * SLOT;
	s->buf = svt_alloc(s->buf_len);
	s->mr = svt_reg_mr(s->d.pd, s->buf, s->buf_len, SVT_ACCESS_ALL);
	s->qp = calloc(n, sizeof(*s->qp));
	s->peer_qpn = calloc(n, sizeof(*s->peer_qpn));
	SVT_CHECK(s->qp && s->peer_qpn);
	s->m_base = mem_now();
}

static void side_create(struct side *s)
{
	struct svt_qp_init qi;
	uint64_t t0 = svt_now_ms();

	svt_qp_init_default(&qi, IBV_QPT_RC);
	/* small queues: 3 sends and 1 receive are all a QP ever holds here */
	qi.cap.max_send_wr = 4;
	qi.cap.max_recv_wr = 4;
	qi.cap.max_send_sge = 1;
	qi.cap.max_recv_sge = 1;
	qi.cap.max_inline_data = 0;
	for (uint32_t i = 0; i < s->n; i++) {
		s->qp[i] = svt_create_qp(s->d.pd, s->cq, s->cq, &qi);
		SVT_CHECK_OK(svt_qp_to_init(s->qp[i], NULL));
	}
	s->m_created = mem_now();
	svt_log("%s: created %u QPs (RESET->INIT) in %.0f ms", s->name, s->n,
		ms_since(t0));
}

static void send_hello(struct side *s, int wfd)
{
	struct hello h;
	uint32_t *qpn = calloc(s->n, sizeof(*qpn));

	SVT_CHECK_PTR(qpn);
	memset(&h, 0, sizeof(h));
	h.gid = s->d.gid;
	h.addr = (uintptr_t)s->buf;
	h.rkey = s->mr->rkey;
	h.n = s->n;
	for (uint32_t i = 0; i < s->n; i++)
		qpn[i] = s->qp[i]->qp_num;
	svt_chan_write(wfd, &h, sizeof(h));
	svt_chan_write(wfd, qpn, sizeof(*qpn) * s->n);
	free(qpn);
}

static void recv_hello(struct side *s, int rfd)
{
	svt_chan_read(rfd, &s->peer, sizeof(s->peer), WAIT_MS);
	SVT_CHECK_EQ(s->peer.n, s->n);
	svt_chan_read(rfd, s->peer_qpn, sizeof(*s->peer_qpn) * s->n, WAIT_MS);
}

/* INIT -> RTR -> RTS towards the peer's QP of the same index. */
static void side_connect(struct side *s)
{
	uint64_t t0 = svt_now_ms();

	for (uint32_t i = 0; i < s->n; i++) {
		SVT_CHECK_OK(svt_qp_to_rtr(s->qp[i], NULL, &s->peer.gid,
					   s->peer_qpn[i]));
		SVT_CHECK_OK(svt_qp_to_rts(s->qp[i], NULL));
	}
	s->m_connected = mem_now();
	svt_log("%s: connected %u QPs (INIT->RTR->RTS) in %.0f ms", s->name,
		s->n, ms_since(t0));
}

/* Poll until `want` completions have arrived, handing each to fn; fails
 * after WAIT_MS without progress. */
static void poll_all(struct side *s, uint32_t want,
		     void (*fn)(struct side *, const struct ibv_wc *))
{
	struct ibv_wc wc[64];
	uint32_t got = 0;
	uint64_t last = svt_now_ms();
	unsigned int idle = 0;

	while (got < want) {
		int max = want - got < 64 ? (int)(want - got) : 64;
		int r = ibv_poll_cq(s->cq, max, wc);

		SVT_CHECK_MSG(r >= 0, "ibv_poll_cq: %d", r);
		for (int k = 0; k < r; k++)
			fn(s, &wc[k]);
		got += (uint32_t)r;
		if (r > 0) {
			last = svt_now_ms();
			idle = 0;
			continue;
		}
		if (svt_now_ms() - last > WAIT_MS)
			SVT_FAIL("%s: %u of %u completions, none for %d ms",
				 s->name, got, want, WAIT_MS);
		/* the CPUs are shared with the engine threads: do not spin */
		if (++idle > 100)
			usleep(50);
	}
	/* nothing more may come */
	SVT_CHECK_EQ(ibv_poll_cq(s->cq, 1, wc), 0);
}

static void print_mem(const struct side *s)
{
	const struct mem *m[] = { &s->m_created, &s->m_connected, &s->m_traffic };
	const char *what[] = { "created", "connected", "after traffic" };

	/* a sanitizer's allocator bypasses glibc's arenas: mallinfo2 is 0 */
	bool heap = s->m_base.heap != 0;

	svt_log("%s: baseline RSS %ld KiB, heap %ld KiB%s", s->name,
		s->m_base.rss >> 10, s->m_base.heap >> 10,
		heap ? "" : " (mallinfo2 reports nothing here)");
	for (int k = 0; k < 3; k++)
		svt_log("%s: %-13s RSS +%ld KiB (%ld B/QP), heap +%ld KiB "
			"(%ld B/QP)",
			s->name, what[k], (m[k]->rss - s->m_base.rss) >> 10,
			(m[k]->rss - s->m_base.rss) / (long)s->n,
			(m[k]->heap - s->m_base.heap) >> 10,
			(m[k]->heap - s->m_base.heap) / (long)s->n);
	long per_qp = (s->m_connected.rss - s->m_base.rss) / (long)s->n;

	svt_log("%s: memory per QP: %ld bytes (RSS growth to connected / %u)",
		s->name, per_qp, s->n);
	/* About 2.9 KB (4.3 KB under valgrind) with these queue sizes; the
	 * bound catches something per-QP that should not be (a buffer, a
	 * socket), not small growth. Few QPs leave RSS noise per QP too big. */
	if (s->n >= 1000)
		SVT_CHECK_LT(per_qp, 16384);
}

static void side_destroy(struct side *s)
{
	uint64_t t0 = svt_now_ms();

	for (uint32_t i = 0; i < s->n; i++)
		SVT_CHECK_OK(ibv_destroy_qp(s->qp[i]));
	svt_log("%s: destroyed %u QPs in %.0f ms", s->name, s->n,
		ms_since(t0));
	SVT_CHECK_OK(ibv_dereg_mr(s->mr));
	SVT_CHECK_OK(ibv_destroy_cq(s->cq));
	svt_dev_close(&s->d);
	free(s->buf);
	free(s->qp);
	free(s->peer_qpn);
}

/* ------------------------------------------------------------ the child */

static uint32_t child_recvs;

static void child_wc(struct side *s, const struct ibv_wc *wc)
{
	uint64_t i = wc->wr_id;

	SVT_CHECK_WC_OK(*wc);
	SVT_CHECK_LT(i, s->n);
	SVT_CHECK_EQ(wc->opcode, IBV_WC_RECV);
	SVT_CHECK_EQ(wc->qp_num, s->qp[i]->qp_num);
	SVT_CHECK_EQ(wc->byte_len, MSG_LEN);
	check_payload(s->buf + i * SLOT + OFF_SEND, (uint32_t)i, K_SEND);
	/* the WRITE was posted before the SEND on the same QP */
	check_payload(s->buf + i * SLOT + OFF_WRITE, (uint32_t)i, K_WRITE);
	child_recvs++;
}

static int child(int rfd, int wfd)
{
	struct side s;
	uint32_t n = qp_count();
	uint64_t t0;

	side_open(&s, "child", n, (int)n);
	for (uint32_t i = 0; i < n; i++)
		payload(s.buf + (size_t)i * SLOT + OFF_READ, i, K_READ);
	side_create(&s);
	/* receives may be posted from INIT on, before the peer can send */
	for (uint32_t i = 0; i < n; i++)
		SVT_CHECK_OK(svt_post_recv(s.qp[i], i,
					   s.buf + (size_t)i * SLOT + OFF_SEND,
					   RECV_LEN, s.mr->lkey));
	send_hello(&s, wfd);
	recv_hello(&s, rfd);
	side_connect(&s);
	svt_sync_send(wfd, 'R');

	t0 = svt_now_ms();
	poll_all(&s, n, child_wc);
	SVT_CHECK_EQ(child_recvs, n);
	s.m_traffic = mem_now();
	svt_log("child: %u receives completed and checked %.0f ms after "
		"connecting", n, ms_since(t0));
	print_mem(&s);
	svt_sync_send(wfd, 'D');
	/* the parent has all its completions too before anyone destroys */
	SVT_CHECK_EQ(svt_sync_recv(rfd, WAIT_MS), 'X');
	side_destroy(&s);
	return 0;
}

/* ----------------------------------------------------------- the parent */

static uint32_t parent_count[4];

static void parent_wc(struct side *s, const struct ibv_wc *wc)
{
	uint64_t i = wc->wr_id >> 2;
	enum kind k = (enum kind)(wc->wr_id & 3);

	SVT_CHECK_WC_OK(*wc);
	SVT_CHECK_LT(i, s->n);
	SVT_CHECK_EQ(wc->qp_num, s->qp[i]->qp_num);
	switch (k) {
	case K_WRITE:
		SVT_CHECK_EQ(wc->opcode, IBV_WC_RDMA_WRITE);
		break;
	case K_READ:
		SVT_CHECK_EQ(wc->opcode, IBV_WC_RDMA_READ);
		SVT_CHECK_EQ(wc->byte_len, MSG_LEN);
		check_payload(s->buf + i * SLOT + OFF_READ, (uint32_t)i, K_READ);
		break;
	case K_SEND:
		SVT_CHECK_EQ(wc->opcode, IBV_WC_SEND);
		break;
	default:
		SVT_FAIL("completion with unknown wr_id %#llx",
			 (unsigned long long)wc->wr_id);
	}
	parent_count[k]++;
}

/* WRITE, READ, SEND on QP i, chained in one post. */
static void post_three(struct side *s, uint32_t i)
{
	uint8_t *slot = s->buf + (size_t)i * SLOT;
	uint64_t rslot = s->peer.addr + (uint64_t)i * SLOT;
	struct ibv_sge sge[3] = {
		{ (uintptr_t)(slot + OFF_WRITE), MSG_LEN, s->mr->lkey },
		{ (uintptr_t)(slot + OFF_READ), MSG_LEN, s->mr->lkey },
		{ (uintptr_t)(slot + OFF_SEND), MSG_LEN, s->mr->lkey },
	};
	struct ibv_send_wr wr[3], *bad = NULL;

	memset(wr, 0, sizeof(wr));
	for (int k = 0; k < 3; k++) {
		wr[k].wr_id = ((uint64_t)i << 2) | (uint64_t)(k + 1);
		wr[k].sg_list = &sge[k];
		wr[k].num_sge = 1;
		wr[k].send_flags = IBV_SEND_SIGNALED;
		wr[k].next = k < 2 ? &wr[k + 1] : NULL;
	}
	wr[0].opcode = IBV_WR_RDMA_WRITE;
	wr[0].wr.rdma.remote_addr = rslot + OFF_WRITE;
	wr[0].wr.rdma.rkey = s->peer.rkey;
	wr[1].opcode = IBV_WR_RDMA_READ;
	wr[1].wr.rdma.remote_addr = rslot + OFF_READ;
	wr[1].wr.rdma.rkey = s->peer.rkey;
	wr[2].opcode = IBV_WR_SEND;
	SVT_CHECK_OK(ibv_post_send(s->qp[i], wr, &bad));
}

/* Fork the child; nothing verbs-related exists yet in either process. */
static void start_child(struct svt_child *c)
{
	int to_child[2], from_child[2];
	pid_t parent = getpid(), pid;

	SVT_CHECK(pipe(to_child) == 0);
	SVT_CHECK(pipe(from_child) == 0);
	fflush(stdout);
	fflush(stderr);
	pid = fork();
	SVT_CHECK(pid >= 0);
	if (pid == 0) {
		close(to_child[1]);
		close(from_child[0]);
		/* a parent that dies (watchdog, failed check) takes us along
		 * instead of leaving us in a 2-minute wait */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(1);
		svt_watchdog(280); /* alarms do not survive fork */
		exit(child(to_child[0], from_child[1]));
	}
	close(to_child[0]);
	close(from_child[1]);
	c->pid = pid;
	c->rfd = from_child[0];
	c->wfd = to_child[1];
}

int main(void)
{
	struct svt_child c;
	struct side s;
	uint32_t n;
	uint64_t t_all, t0;

	svt_watchdog(280); /* CTest TIMEOUT is 300 */
	n = qp_count();
	t_all = svt_now_ms();

	start_child(&c);
	side_open(&s, "parent", n, (int)(3 * n));
	for (uint32_t i = 0; i < n; i++) {
		payload(s.buf + (size_t)i * SLOT + OFF_SEND, i, K_SEND);
		payload(s.buf + (size_t)i * SLOT + OFF_WRITE, i, K_WRITE);
	}
	side_create(&s);
	/* the child writes first, so neither blocks on a full pipe */
	recv_hello(&s, c.rfd);
	send_hello(&s, c.wfd);
	side_connect(&s);
	SVT_CHECK_EQ(svt_sync_recv(c.rfd, WAIT_MS), 'R');

	t0 = svt_now_ms();
	for (uint32_t i = 0; i < n; i++)
		post_three(&s, i);
	svt_log("parent: posted %u WRs in %.0f ms", 3 * n, ms_since(t0));
	poll_all(&s, 3 * n, parent_wc);
	SVT_CHECK_EQ(parent_count[K_WRITE], n);
	SVT_CHECK_EQ(parent_count[K_READ], n);
	SVT_CHECK_EQ(parent_count[K_SEND], n);
	s.m_traffic = mem_now();
	svt_log("parent: %u WRITE + %u READ + %u SEND completed and checked "
		"in %.0f ms", n, n, n, ms_since(t0));
	SVT_CHECK_EQ(svt_sync_recv(c.rfd, WAIT_MS), 'D');
	print_mem(&s);

	svt_sync_send(c.wfd, 'X');
	side_destroy(&s);
	SVT_CHECK_EQ(svt_child_wait(&c, WAIT_MS), 0);
	svt_log("total %.0f ms for %u QP pairs", ms_since(t_all), n);
	return 0;
}
