/*
 * sv-demo — the program behind `make demo`.
 *
 *   sv-demo server [port]        (port 0 = any free port; the chosen one is printed)
 *   sv-demo client HOST [port]
 *
 * Two separate processes talk RDMA over RC queue pairs using nothing but the
 * public verbs API (<infiniband/verbs.h>), the way ibv_rc_pingpong does: a
 * plain TCP socket is used only to swap QPN/PSN/GID/rkey/addresses and a few
 * "go"/"done" words; every byte of payload moves through verbs.
 *
 * What is shown, each step printed with addresses, lengths, keys and SGE
 * lists, and every byte verified:
 *   (a) SEND gathering three scattered buffers (three MRs) into one contiguous
 *       receive buffer; SEND_WITH_IMM back into a 3-entry receive SGL that
 *       scatters it again;
 *   (b) RDMA WRITE with a 3-entry gather list into the server's buffer, RDMA
 *       READ with a 3-entry scatter list back from it;
 *   (c) ATOMIC_FETCH_AND_ADD and ATOMIC_CMP_AND_SWP (a hit and a miss) on a
 *       remote 8-byte counter;
 *   plus RDMA_WRITE_WITH_IMM, whose imm_data the server reads from its CQ.
 *
 * The one-sided point: once the server has posted its receives and sent its
 * reply, it makes no verbs call at all while the client writes, reads and
 * does atomics on its memory.  It sleeps in read() on the TCP socket until the
 * client says "done", then checks its memory.  Whatever happened there was done
 * by the library's engine, not by the server program.
 *
 * Waiting: the server's first receive is awaited through a completion channel
 * (ibv_req_notify_cq + ibv_get_cq_event + ibv_ack_cq_events); everything else
 * polls the CQ.  alarm() bounds the whole run, so nothing can hang.
 *
 * Environment: SV_DEMO_DEVICE (default: the first device), SV_DEMO_TIMEOUT (seconds,
 * default 30), SV_DEMO_BIND (server's control-socket address, default
 * 127.0.0.1).
 */
#include <infiniband/verbs.h>

#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* no device named: the first of the list, what ibv_rc_pingpong takes without -d */
#define DEFAULT_DEVICE  "the first device"
#define DEFAULT_PORT    "18600"
#define DEFAULT_TIMEOUT 30      /* seconds for the whole run (alarm) */
#define CQ_WAIT_MS      10000   /* one completion must arrive within this */
#define IB_PORT         1
#define GID_INDEX       0

/* ------------------------------------------------------------------------- */
/* The shared script: layouts both sides know, so each can check the other.  */
/* ------------------------------------------------------------------------- */

/* (a1) client -> server SEND, gathered from three client buffers. */
#define G0_LEN 1500
#define G1_LEN 2600
#define G2_LEN 300
#define A1_LEN (G0_LEN + G1_LEN + G2_LEN)          /* 4400: two MTU segments */
#define SRV_RX_LEN 8192                             /* server's contiguous RX */

/* (a2) server -> client SEND_WITH_IMM, scattered into three client buffers. */
#define A2_LEN 5000
#define R0_LEN 1024
#define R1_LEN 3000
#define R2_LEN 2000                                 /* only 976 bytes land here */
#define A2_IMM 0x5eed0a02u

/* (b) RDMA WRITE gathered from sub-ranges of the client's g0/g1/g2 (refilled
 * with new text first), to TARGET_WR_OFF in the server's target buffer. */
#define W0_OFF 200
#define W0_LEN 1000
#define W1_OFF 0
#define W1_LEN 2600
#define W2_OFF 50
#define W2_LEN 250
#define WR_LEN (W0_LEN + W1_LEN + W2_LEN)          /* 3850 */
#define TARGET_LEN 16384
#define TARGET_WR_OFF 1000
/* RDMA READ of those same 3850 bytes back into one client buffer, scattered
 * to three places with gaps in between (the gaps must stay untouched). */
#define RB_LEN 8192
#define RB0_OFF 0
#define RB0_LEN 1500
#define RB1_OFF 3000
#define RB1_LEN 1500
#define RB2_OFF 6000
#define RB2_LEN 850

/* (c) atomics on the server's 8-byte counter. */
#define CTR_INITIAL 1000u
#define FAA_ADD     234u            /* 1000 -> 1234 */
#define CAS_SWAP    5678u           /* 1234 -> 5678 (compare hits) */
#define CAS2_SWAP   9999u           /* compare 1234 misses: stays 5678 */

/* RDMA_WRITE_WITH_IMM: a text line to TARGET_IMM_OFF, consumes the server's
 * second (zero-SGE) receive. */
#define TARGET_IMM_OFF 8192
#define IMM_MSG "hello from the client, placed by RDMA_WRITE_WITH_IMM"
#define WRITE_IMM 0x1234abcdu

/* Fill byte for buffers that should be (partly) left alone. */
#define UNTOUCHED '.'

enum wr_ids {
	WRID_RECV_GATHERED = 0x100, /* server: contiguous RX for (a1) */
	WRID_RECV_IMM,              /* server: zero-SGE RX for WRITE_WITH_IMM */
	WRID_RECV_SCATTER,          /* client: 3-SGE RX for (a2) */
	WRID_SEND_GATHER,
	WRID_SEND_IMM,
	WRID_WRITE,
	WRID_READ,
	WRID_FAA,
	WRID_CAS_HIT,
	WRID_CAS_MISS,
	WRID_READ_CTR,
	WRID_WRITE_IMM,
};

/* What travels over the TCP socket once, each way. */
struct wire_info {
	char magic[8];
	uint32_t qpn;
	uint32_t psn;
	uint8_t gid[16];
	uint64_t target_addr;  /* server only */
	uint32_t target_rkey;
	uint32_t target_len;
	uint64_t counter_addr; /* server only */
	uint32_t counter_rkey;
	uint32_t pad;
	uint64_t counter_initial;
};
#define WIRE_MAGIC "SVDEMO1"

/* Small control words over the same socket. */
struct ctrl_msg {
	char word[8];   /* "READY", "DONE", "VERDICT" */
	uint32_t a, b;  /* VERDICT: checks passed, checks run */
};

/* ------------------------------------------------------------------------- */
/* Report and checks                                                          */
/* ------------------------------------------------------------------------- */

static unsigned checks_run, checks_failed;

/* SV_DEMO_STAMP=1 (set by softverbs-demo-run): every line starts with the
 * CLOCK_MONOTONIC time in microseconds, which is the same clock in both
 * processes, so the runner can merge the two reports in the order things
 * happened. */
static bool stamp_lines;

static void vline(const char *prefix, const char *fmt, va_list ap)
{
	char text[1024];
	int n = snprintf(text, sizeof text, "%s", prefix);
	vsnprintf(text + n, sizeof text - (size_t)n, fmt, ap);
	if (stamp_lines) {
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		printf("%llu ", (unsigned long long)ts.tv_sec * 1000000ull +
				(unsigned long long)ts.tv_nsec / 1000);
	}
	printf("%s\n", text);
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vline("", fmt, ap);
	va_end(ap);
}

static void section(const char *title)
{
	say("%s", "");
	say("---- %s ----", title);
}

static bool check(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool check(bool ok, const char *fmt, ...)
{
	va_list ap;
	checks_run++;
	if (!ok)
		checks_failed++;
	va_start(ap, fmt);
	vline(ok ? "  [ok]   " : "  [FAIL] ", fmt, ap);
	va_end(ap);
	return ok;
}

/* A verb failed: report the verb and errno and give up (the run fails). */
static void die(const char *what, int err) __attribute__((noreturn));
static void die(const char *what, int err)
{
	check(false, "%s failed: %s (errno %d)", what, strerror(err), err);
	say("RESULT: FAIL (%u/%u checks passed; stopped at: %s)", checks_run - checks_failed,
	    checks_run, what);
	exit(1);
}

static void on_alarm(int sig)
{
	/* Only write() here (async-signal-safe).  The stamp is "end of time" so
	 * the runner sorts this line last. */
	static const char plain[] = "RESULT: FAIL (timeout: the demo did not finish in time)\n";
	static const char stamped[] = "99999999999999999999 "
				      "RESULT: FAIL (timeout: the demo did not finish in time)\n";
	(void)sig;
	if (stamp_lines) {
		if (write(STDOUT_FILENO, stamped, sizeof stamped - 1) < 0) { /* nothing to do */ }
	} else if (write(STDOUT_FILENO, plain, sizeof plain - 1) < 0) { /* nothing to do */ }
	_exit(2);
}

/* Deterministic, self-describing content: records "TAG@OFFSET|" where OFFSET
 * is the record's offset inside its buffer, so a misplaced byte is visible
 * in the report and cannot compare equal by accident. */
static void fill_text(char *p, size_t len, const char *tag)
{
	char rec[32];
	size_t off = 0;
	while (off < len) {
		int n = snprintf(rec, sizeof rec, "%s@%05zu|", tag, off);
		size_t k = (size_t)n < len - off ? (size_t)n : len - off;
		memcpy(p + off, rec, k);
		off += k;
	}
}

/* One piece of an expected message: bytes [off, off+len) of a buffer of
 * buf_len bytes filled by fill_text(tag). */
struct piece {
	const char *tag;
	size_t buf_len, off, len;
};

/* The shared layouts of the gathered messages: both sides build from these. */
static const struct piece A1_PIECES[3] = {
	{ "g0", G0_LEN, 0, G0_LEN }, { "g1", G1_LEN, 0, G1_LEN }, { "g2", G2_LEN, 0, G2_LEN },
};
static const struct piece WRITE_PIECES[3] = {
	{ "w0", G0_LEN, W0_OFF, W0_LEN }, { "w1", G1_LEN, W1_OFF, W1_LEN },
	{ "w2", G2_LEN, W2_OFF, W2_LEN },
};

/* The concatenation of pieces, as the peer gathered them: what must arrive. */
static char *expected_text(const struct piece *p, size_t n, size_t *total)
{
	size_t i, len = 0, at = 0, biggest = 0;
	char *out, *tmp;
	for (i = 0; i < n; i++) {
		len += p[i].len;
		if (p[i].buf_len > biggest)
			biggest = p[i].buf_len;
	}
	out = malloc(len + biggest);
	if (!out)
		die("malloc", ENOMEM);
	tmp = out + len;
	for (i = 0; i < n; i++) {
		fill_text(tmp, p[i].buf_len, p[i].tag);
		memcpy(out + at, tmp + p[i].off, p[i].len);
		at += p[i].len;
	}
	*total = len;
	return out;
}

/* n bytes of src as a C string, non-printables shown as '~'. */
static void printable(char *dst, const char *src, size_t n)
{
	size_t i;
	for (i = 0; i < n; i++)
		dst[i] = (src[i] >= 32 && src[i] < 127) ? src[i] : '~';
	dst[n] = '\0';
}

/* Print bytes [off, off+len) of buf as a quoted string. */
static void show_bytes(const char *label, const char *buf, size_t off, size_t len)
{
	char s[96];
	if (len > sizeof s - 1)
		len = sizeof s - 1;
	printable(s, buf + off, len);
	say("      %-28s [%5zu..%5zu) \"%s\"", label, off, off + len, s);
}

/* Around a seam at offset `at` in a contiguous buffer, where one source ends
 * and the next begins: the bytes before and after, quoted separately. */
static void show_seam(const char *label, const char *buf, size_t at, size_t total)
{
	char before[24], after[24];
	size_t from = at >= 18 ? at - 18 : 0;
	size_t to = at + 18 <= total ? at + 18 : total;
	printable(before, buf + from, at - from);
	printable(after, buf + at, to - at);
	say("      %-28s [%5zu..%5zu) \"%s\" + [%5zu..%5zu) \"%s\"", label, from, at, before, at,
	    to, after);
}

static bool verify_same(const char *what, const char *got, const char *want, size_t len)
{
	size_t i;
	for (i = 0; i < len; i++)
		if (got[i] != want[i])
			break;
	if (i == len)
		return check(true, "%s: %zu bytes identical, byte for byte", what, len);
	check(false, "%s: first difference at byte %zu of %zu", what, i, len);
	show_bytes("expected", want, i, len - i < 40 ? len - i : 40);
	show_bytes("got", got, i, len - i < 40 ? len - i : 40);
	return false;
}

static bool verify_untouched(const char *what, const char *buf, size_t from, size_t to)
{
	size_t i;
	for (i = from; i < to; i++)
		if (buf[i] != UNTOUCHED)
			break;
	if (i == to)
		return check(true, "%s: bytes [%zu..%zu) untouched", what, from, to);
	return check(false, "%s: byte %zu was overwritten (0x%02x), must be untouched",
		     what, i, (unsigned char)buf[i]);
}

/* ------------------------------------------------------------------------- */
/* Names for the report                                                       */
/* ------------------------------------------------------------------------- */

static const char *wc_opcode_str(enum ibv_wc_opcode op)
{
	switch (op) {
	case IBV_WC_SEND: return "IBV_WC_SEND";
	case IBV_WC_RDMA_WRITE: return "IBV_WC_RDMA_WRITE";
	case IBV_WC_RDMA_READ: return "IBV_WC_RDMA_READ";
	case IBV_WC_COMP_SWAP: return "IBV_WC_COMP_SWAP";
	case IBV_WC_FETCH_ADD: return "IBV_WC_FETCH_ADD";
	case IBV_WC_RECV: return "IBV_WC_RECV";
	case IBV_WC_RECV_RDMA_WITH_IMM: return "IBV_WC_RECV_RDMA_WITH_IMM";
	default: return "(other)";
	}
}

static const char *wr_opcode_str(enum ibv_wr_opcode op)
{
	switch (op) {
	case IBV_WR_SEND: return "IBV_WR_SEND";
	case IBV_WR_SEND_WITH_IMM: return "IBV_WR_SEND_WITH_IMM";
	case IBV_WR_RDMA_WRITE: return "IBV_WR_RDMA_WRITE";
	case IBV_WR_RDMA_WRITE_WITH_IMM: return "IBV_WR_RDMA_WRITE_WITH_IMM";
	case IBV_WR_RDMA_READ: return "IBV_WR_RDMA_READ";
	case IBV_WR_ATOMIC_FETCH_AND_ADD: return "IBV_WR_ATOMIC_FETCH_AND_ADD";
	case IBV_WR_ATOMIC_CMP_AND_SWP: return "IBV_WR_ATOMIC_CMP_AND_SWP";
	default: return "(other)";
	}
}

static const char *qp_state_str(enum ibv_qp_state s)
{
	static const char *const names[] = { "RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR" };
	return (unsigned)s < sizeof names / sizeof names[0] ? names[s] : "?";
}

static void gid_str(const uint8_t gid[16], char out[40])
{
	int i;
	for (i = 0; i < 8; i++)
		sprintf(out + i * 5, "%02x%02x%s", gid[2 * i], gid[2 * i + 1], i < 7 ? ":" : "");
}

static void access_str(int a, char out[80])
{
	out[0] = '\0';
	if (a & IBV_ACCESS_LOCAL_WRITE) strcat(out, "LOCAL_WRITE|");
	if (a & IBV_ACCESS_REMOTE_WRITE) strcat(out, "REMOTE_WRITE|");
	if (a & IBV_ACCESS_REMOTE_READ) strcat(out, "REMOTE_READ|");
	if (a & IBV_ACCESS_REMOTE_ATOMIC) strcat(out, "REMOTE_ATOMIC|");
	if (out[0])
		out[strlen(out) - 1] = '\0';
	else
		strcpy(out, "(local read only)");
}

/* ------------------------------------------------------------------------- */
/* Verbs objects                                                              */
/* ------------------------------------------------------------------------- */

struct buf {
	const char *name;
	char *addr;
	size_t len;
	int access;
	struct ibv_mr *mr;
};

struct demo {
	struct ibv_device **devs;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_comp_channel *channel;
	struct ibv_cq *send_cq, *recv_cq;
	struct ibv_qp *qp;
	union ibv_gid gid;
	uint32_t psn;
	uint8_t rd_atomic;
	int sock;
	struct wire_info peer;
};

static const char recv_cq_cookie[] = "recv CQ context";

static void open_device(struct demo *d)
{
	const char *want = getenv("SV_DEMO_DEVICE");
	struct ibv_device_attr dattr;
	struct ibv_port_attr pattr;
	char names[512] = "";
	char g[40];
	Dl_info dli;
	int n = 0, i, pick = -1;

	if (want && !*want)
		want = NULL;
	if (dladdr((void *)ibv_get_device_list, &dli) && dli.dli_fname)
		say("verbs library : %s", dli.dli_fname);

	d->devs = ibv_get_device_list(&n);
	if (!d->devs)
		die("ibv_get_device_list", errno);
	for (i = 0; i < n; i++) {
		const char *nm = ibv_get_device_name(d->devs[i]);
		if (strlen(names) + strlen(nm) + 2 < sizeof names) {
			strcat(names, " ");
			strcat(names, nm);
		}
		if (pick < 0 && (!want || strcmp(nm, want) == 0))
			pick = i;
	}
	say("devices       :%s", n ? names : " (none)");
	if (pick < 0) {
		check(false, "device \"%s\" is in the list (set SV_DEMO_DEVICE to pick another)",
		      want ? want : DEFAULT_DEVICE);
		die("finding the device", ENODEV);
	}
	d->ctx = ibv_open_device(d->devs[pick]);
	if (!d->ctx)
		die("ibv_open_device", errno);
	if (ibv_query_device(d->ctx, &dattr))
		die("ibv_query_device", errno);
	if (ibv_query_port(d->ctx, IB_PORT, &pattr))
		die("ibv_query_port", errno);
	if (ibv_query_gid(d->ctx, IB_PORT, GID_INDEX, &d->gid))
		die("ibv_query_gid", errno);

	gid_str(d->gid.raw, g);
	say("opened        : %s (fw %s, max_qp %d, max_sge %d, atomic_cap %s, max_qp_rd_atom %d/%d)",
	    want, dattr.fw_ver, dattr.max_qp, dattr.max_sge,
	    dattr.atomic_cap == IBV_ATOMIC_HCA ? "HCA" :
	    dattr.atomic_cap == IBV_ATOMIC_GLOB ? "GLOB" : "NONE",
	    dattr.max_qp_rd_atom, dattr.max_qp_init_rd_atom);
	say("port %d        : %s, link layer %s, active_mtu %d bytes",
	    IB_PORT, ibv_port_state_str(pattr.state),
	    pattr.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" :
	    pattr.link_layer == IBV_LINK_LAYER_INFINIBAND ? "InfiniBand" : "unspecified",
	    128 << pattr.active_mtu);
	say("GID[%d]        : %s", GID_INDEX, g);
	check(pattr.state == IBV_PORT_ACTIVE, "port %d is ACTIVE", IB_PORT);
	check(dattr.max_sge >= 3, "device takes 3-entry SGLs (max_sge %d)", dattr.max_sge);
	check(dattr.atomic_cap != IBV_ATOMIC_NONE, "device supports atomics");

	d->rd_atomic = 4;
	if (dattr.max_qp_rd_atom < d->rd_atomic)
		d->rd_atomic = (uint8_t)dattr.max_qp_rd_atom;
	if (dattr.max_qp_init_rd_atom < d->rd_atomic)
		d->rd_atomic = (uint8_t)dattr.max_qp_init_rd_atom;
}

static void create_objects(struct demo *d)
{
	struct ibv_qp_init_attr init = {
		.qp_type = IBV_QPT_RC,
		.sq_sig_all = 0,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16,
			 .max_send_sge = 3, .max_recv_sge = 3 },
	};

	d->pd = ibv_alloc_pd(d->ctx);
	if (!d->pd)
		die("ibv_alloc_pd", errno);
	d->channel = ibv_create_comp_channel(d->ctx);
	if (!d->channel)
		die("ibv_create_comp_channel", errno);
	d->send_cq = ibv_create_cq(d->ctx, 32, NULL, NULL, 0);
	if (!d->send_cq)
		die("ibv_create_cq (send)", errno);
	d->recv_cq = ibv_create_cq(d->ctx, 32, (void *)recv_cq_cookie, d->channel, 0);
	if (!d->recv_cq)
		die("ibv_create_cq (recv, with completion channel)", errno);
	init.send_cq = d->send_cq;
	init.recv_cq = d->recv_cq;
	d->qp = ibv_create_qp(d->pd, &init);
	if (!d->qp)
		die("ibv_create_qp (RC)", errno);
	d->psn = (uint32_t)lrand48() & 0xffffff;
	say("objects       : PD, send CQ, recv CQ (+ completion channel fd %d), RC QP 0x%06x, "
	    "initial PSN 0x%06x", d->channel->fd, d->qp->qp_num, d->psn);
}

static void reg_buf(struct demo *d, struct buf *b, const char *name, size_t len,
		    int access, char fill)
{
	void *p = NULL;
	/* Separate allocations: the gathered/scattered buffers really are
	 * scattered in the address space. */
	if (posix_memalign(&p, 64, len < 64 ? 64 : len))
		die("posix_memalign", ENOMEM);
	memset(p, fill, len);
	b->name = name;
	b->addr = p;
	b->len = len;
	b->access = access;
	b->mr = ibv_reg_mr(d->pd, p, len, access);
	if (!b->mr) {
		char what[64];
		snprintf(what, sizeof what, "ibv_reg_mr(%s)", name);
		die(what, errno);
	}
}

static void print_mrs(struct buf *const *bufs, size_t n)
{
	size_t i;
	char acc[80];
	say("  %-9s %-18s %6s  %-10s %-10s %s", "MR", "addr", "length", "lkey", "rkey", "access");
	for (i = 0; i < n; i++) {
		access_str(bufs[i]->access, acc);
		say("  %-9s %#-18" PRIxPTR " %6zu  0x%08x 0x%08x %s", bufs[i]->name,
		    (uintptr_t)bufs[i]->addr, bufs[i]->len, bufs[i]->mr->lkey, bufs[i]->mr->rkey, acc);
	}
}

static void dereg_buf(struct buf *b)
{
	if (b->mr && ibv_dereg_mr(b->mr))
		check(false, "ibv_dereg_mr(%s): %s", b->name, strerror(errno));
	free(b->addr);
	b->mr = NULL;
	b->addr = NULL;
}

static struct ibv_sge sge_of(const struct buf *b, size_t off, size_t len)
{
	struct ibv_sge s = { .addr = (uintptr_t)(b->addr + off), .length = (uint32_t)len,
			     .lkey = b->mr->lkey };
	return s;
}

static void print_sgl(const char *title, const struct ibv_sge *sg, int n,
		      const char *const *names)
{
	int i;
	uint32_t total = 0;
	say("    %s (%d entr%s):", title, n, n == 1 ? "y" : "ies");
	for (i = 0; i < n; i++) {
		say("      sge[%d] addr=%#" PRIx64 " length=%5u lkey=0x%08x   (%s)", i, sg[i].addr,
		    sg[i].length, sg[i].lkey, names[i]);
		total += sg[i].length;
	}
	say("      total %u bytes", total);
}

/* ---- QP state machine ---- */

static void modify(struct demo *d, struct ibv_qp_attr *a, int mask, const char *what)
{
	int rc = ibv_modify_qp(d->qp, a, mask);
	if (rc)
		die(what, rc);
}

static void qp_to_init(struct demo *d)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.pkey_index = 0,
		.port_num = IB_PORT,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				   IBV_ACCESS_REMOTE_ATOMIC,
	};
	modify(d, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
	       "ibv_modify_qp(RESET->INIT)");
	say("QP 0x%06x    : RESET -> INIT (port %d, remote write/read/atomic allowed)",
	    d->qp->qp_num, IB_PORT);
}

static void qp_to_rtr_rts(struct demo *d)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	char g[40];

	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_4096;
	a.dest_qp_num = d->peer.qpn;
	a.rq_psn = d->peer.psn;
	a.max_dest_rd_atomic = d->rd_atomic;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	memcpy(a.ah_attr.grh.dgid.raw, d->peer.gid, 16);
	a.ah_attr.grh.sgid_index = GID_INDEX;
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.dlid = 0;
	a.ah_attr.sl = 0;
	a.ah_attr.port_num = IB_PORT;
	modify(d, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
		   IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
	       "ibv_modify_qp(INIT->RTR)");
	gid_str(d->peer.gid, g);
	say("QP 0x%06x    : INIT -> RTR  (path MTU 4096, dest QPN 0x%06x, rq_psn 0x%06x, "
	    "is_global=1 dgid %s)", d->qp->qp_num, d->peer.qpn, d->peer.psn, g);

	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = d->psn;
	a.max_rd_atomic = d->rd_atomic;
	modify(d, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
		   IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC,
	       "ibv_modify_qp(RTR->RTS)");
	say("QP 0x%06x    : RTR -> RTS   (sq_psn 0x%06x, timeout 14, retry_cnt 7, rnr_retry 7, "
	    "max_rd_atomic %u)", d->qp->qp_num, d->psn, d->rd_atomic);

	memset(&a, 0, sizeof a);
	if (ibv_query_qp(d->qp, &a, IBV_QP_STATE | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			 IBV_QP_SQ_PSN, &ia))
		die("ibv_query_qp", errno);
	check(a.qp_state == IBV_QPS_RTS && a.path_mtu == IBV_MTU_4096 &&
	      a.dest_qp_num == d->peer.qpn && a.sq_psn == d->psn,
	      "ibv_query_qp says: state %s, path_mtu %d, dest_qp_num 0x%06x, sq_psn 0x%06x",
	      qp_state_str(a.qp_state), 128 << a.path_mtu, a.dest_qp_num, a.sq_psn);
}

/* ---- posting and completions ---- */

static void post_send(struct demo *d, struct ibv_send_wr *wr, const char *const *names)
{
	struct ibv_send_wr *bad = NULL;
	int rc;
	say("  post_send   wr_id=%#" PRIx64 " opcode=%s%s", wr->wr_id, wr_opcode_str(wr->opcode),
	    wr->send_flags & IBV_SEND_SIGNALED ? " SIGNALED" : "");
	switch (wr->opcode) {
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
	case IBV_WR_RDMA_READ:
		say("    remote: addr=%#" PRIx64 " rkey=0x%08x", wr->wr.rdma.remote_addr,
		    wr->wr.rdma.rkey);
		break;
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
	case IBV_WR_ATOMIC_CMP_AND_SWP:
		say("    remote: addr=%#" PRIx64 " rkey=0x%08x compare_add=%" PRIu64 " swap=%" PRIu64,
		    wr->wr.atomic.remote_addr, wr->wr.atomic.rkey, wr->wr.atomic.compare_add,
		    wr->wr.atomic.swap);
		break;
	default:
		break;
	}
	if (wr->opcode == IBV_WR_SEND_WITH_IMM || wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM)
		say("    imm_data=0x%08x (network byte order on the wire)", ntohl(wr->imm_data));
	print_sgl(wr->opcode == IBV_WR_RDMA_READ ? "local scatter list" :
		  wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD ||
		  wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ? "local result buffer" :
		  "local gather list", wr->sg_list, wr->num_sge, names);
	rc = ibv_post_send(d->qp, wr, &bad);
	if (rc)
		die("ibv_post_send", rc);
}

static void post_recv(struct demo *d, struct ibv_recv_wr *wr, const char *const *names)
{
	struct ibv_recv_wr *bad = NULL;
	int rc;
	say("  post_recv   wr_id=%#" PRIx64, wr->wr_id);
	if (wr->num_sge)
		print_sgl("receive scatter list", wr->sg_list, wr->num_sge, names);
	else
		say("    no SGEs (this receive only carries a completion: for RDMA_WRITE_WITH_IMM)");
	rc = ibv_post_recv(d->qp, wr, &bad);
	if (rc)
		die("ibv_post_recv", rc);
}

static void print_wc(const struct ibv_wc *wc)
{
	char imm[48] = "";
	if (wc->wc_flags & IBV_WC_WITH_IMM)
		snprintf(imm, sizeof imm, " imm_data=0x%08x", ntohl(wc->imm_data));
	say("  completion  wr_id=%#" PRIx64 " status=%s opcode=%s byte_len=%u qp_num=0x%06x%s",
	    wc->wr_id, ibv_wc_status_str(wc->status), wc_opcode_str(wc->opcode), wc->byte_len,
	    wc->qp_num, imm);
}

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Busy-poll one completion (yielding, then napping, so the engine thread
 * gets the CPU on a small machine). */
static void poll_one(struct ibv_cq *cq, struct ibv_wc *wc, const char *what)
{
	double deadline = now_ms() + CQ_WAIT_MS;
	unsigned spins = 0;
	for (;;) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n < 0)
			die("ibv_poll_cq", EIO);
		if (n == 1)
			break;
		if (now_ms() > deadline) {
			char m[128];
			snprintf(m, sizeof m, "waiting (polling) for the completion of %s", what);
			die(m, ETIMEDOUT);
		}
		if (++spins < 2000) {
			sched_yield();
		} else {
			struct timespec nap = { 0, 50000 };
			nanosleep(&nap, NULL);
		}
	}
	print_wc(wc);
}

static void expect_wc(const struct ibv_wc *wc, uint64_t wr_id, enum ibv_wc_opcode op)
{
	check(wc->status == IBV_WC_SUCCESS && wc->wr_id == wr_id && wc->opcode == op,
	      "completion: status SUCCESS, wr_id %#" PRIx64 ", opcode %s", wr_id, wc_opcode_str(op));
}

/* Post one signaled send WR and poll the send CQ for its completion. */
static void send_wait(struct demo *d, struct ibv_send_wr *wr, const char *const *names,
		      enum ibv_wc_opcode want)
{
	struct ibv_wc wc;
	wr->send_flags |= IBV_SEND_SIGNALED;
	post_send(d, wr, names);
	poll_one(d->send_cq, &wc, wr_opcode_str(wr->opcode));
	expect_wc(&wc, wr->wr_id, want);
}

/* A send WR aimed at remote memory (RDMA WRITE/READ, WRITE_WITH_IMM). */
static struct ibv_send_wr rdma_wr(uint64_t wr_id, enum ibv_wr_opcode op, struct ibv_sge *sg,
				  int nsge, uint64_t remote_addr, uint32_t rkey)
{
	struct ibv_send_wr wr = { .wr_id = wr_id, .sg_list = sg, .num_sge = nsge, .opcode = op };
	wr.wr.rdma.remote_addr = remote_addr;
	wr.wr.rdma.rkey = rkey;
	return wr;
}

/* ---- the TCP side channel ---- */

static void xfer_all(int fd, void *p, size_t len, bool out, const char *what)
{
	char *c = p;
	while (len) {
		ssize_t n = out ? write(fd, c, len) : read(fd, c, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			char m[96];
			snprintf(m, sizeof m, "TCP %s (%s)", out ? "send" : "receive", what);
			die(m, n == 0 ? ECONNRESET : errno);
		}
		c += n;
		len -= (size_t)n;
	}
}

static void send_ctrl(struct demo *d, const char *word, uint32_t a, uint32_t b)
{
	struct ctrl_msg m;
	memset(&m, 0, sizeof m);
	snprintf(m.word, sizeof m.word, "%s", word);
	m.a = a;
	m.b = b;
	xfer_all(d->sock, &m, sizeof m, true, word);
}

static struct ctrl_msg recv_ctrl(struct demo *d, const char *word)
{
	struct ctrl_msg m;
	xfer_all(d->sock, &m, sizeof m, false, word);
	m.word[sizeof m.word - 1] = '\0';
	if (strcmp(m.word, word) != 0) {
		check(false, "TCP control: expected \"%s\", got \"%s\"", word, m.word);
		die("TCP control protocol", EPROTO);
	}
	return m;
}

static void exchange_info(struct demo *d, const struct wire_info *mine)
{
	char g[40];
	xfer_all(d->sock, (void *)mine, sizeof *mine, true, "QP info");
	xfer_all(d->sock, &d->peer, sizeof d->peer, false, "QP info");
	if (memcmp(d->peer.magic, WIRE_MAGIC, sizeof WIRE_MAGIC) != 0)
		die("TCP exchange: peer is not sv-demo", EPROTO);
	gid_str(d->peer.gid, g);
	say("exchanged over TCP: peer QPN 0x%06x, PSN 0x%06x, GID %s", d->peer.qpn, d->peer.psn, g);
}

static void fill_mine(struct demo *d, struct wire_info *w)
{
	memset(w, 0, sizeof *w);
	memcpy(w->magic, WIRE_MAGIC, sizeof WIRE_MAGIC);
	w->qpn = d->qp->qp_num;
	w->psn = d->psn;
	memcpy(w->gid, d->gid.raw, 16);
}

static void teardown(struct demo *d, struct buf *const *bufs, size_t n)
{
	size_t i;
	bool ok = true;
	if (ibv_destroy_qp(d->qp))
		ok = check(false, "ibv_destroy_qp: %s", strerror(errno));
	for (i = 0; i < n; i++)
		dereg_buf(bufs[i]);
	if (ibv_destroy_cq(d->send_cq))
		ok = check(false, "ibv_destroy_cq(send): %s", strerror(errno));
	if (ibv_destroy_cq(d->recv_cq))
		ok = check(false, "ibv_destroy_cq(recv): %s", strerror(errno));
	if (ibv_destroy_comp_channel(d->channel))
		ok = check(false, "ibv_destroy_comp_channel: %s", strerror(errno));
	if (ibv_dealloc_pd(d->pd))
		ok = check(false, "ibv_dealloc_pd: %s", strerror(errno));
	if (ibv_close_device(d->ctx))
		ok = check(false, "ibv_close_device: %s", strerror(errno));
	ibv_free_device_list(d->devs);
	if (ok)
		check(true, "QP, MRs, CQs, completion channel, PD and device released");
	if (d->sock >= 0)
		close(d->sock);
}

static int finish(void)
{
	say("%s", "");
	say("RESULT: %s (%u/%u checks passed)", checks_failed ? "FAIL" : "PASS",
	    checks_run - checks_failed, checks_run);
	return checks_failed ? 1 : 0;
}

/* ------------------------------------------------------------------------- */
/* Server                                                                     */
/* ------------------------------------------------------------------------- */

struct server {
	struct demo d;
	struct buf rx, tx, target, counter;
};

static int listen_socket(const char *port)
{
	const char *bind_addr = getenv("SV_DEMO_BIND");
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t sl = sizeof sa;
	int one = 1;
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		die("socket", errno);
	if (!bind_addr || !*bind_addr)
		bind_addr = "127.0.0.1";
	if (inet_pton(AF_INET, bind_addr, &sa.sin_addr) != 1)
		die("SV_DEMO_BIND is not an IPv4 address", EINVAL);
	sa.sin_port = htons((uint16_t)atoi(port));
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(fd, (struct sockaddr *)&sa, sizeof sa) || listen(fd, 1))
		die("bind/listen of the TCP control socket", errno);
	getsockname(fd, (struct sockaddr *)&sa, &sl);
	/* softverbs-demo-run reads the port from this line. */
	say("TCP control socket: listening on %s port %u", bind_addr, ntohs(sa.sin_port));
	return fd;
}

static void server_setup(struct server *s, const char *port)
{
	struct demo *d = &s->d;
	struct buf *const all[] = { &s->rx, &s->tx, &s->target, &s->counter };
	struct ibv_sge sg; /* filled once srv_rx is registered */
	struct ibv_recv_wr r1 = { .wr_id = WRID_RECV_GATHERED, .sg_list = &sg, .num_sge = 1 };
	struct ibv_recv_wr r2 = { .wr_id = WRID_RECV_IMM, .sg_list = NULL, .num_sge = 0 };
	const char *n1[] = { "srv_rx, whole buffer" };
	struct wire_info mine;
	uint64_t ctr = CTR_INITIAL;
	int lfd;

	section("memory regions (server)");
	reg_buf(d, &s->rx, "srv_rx", SRV_RX_LEN, IBV_ACCESS_LOCAL_WRITE, UNTOUCHED);
	reg_buf(d, &s->tx, "srv_tx", A2_LEN, 0, 0);
	fill_text(s->tx.addr, A2_LEN, "s1");
	reg_buf(d, &s->target, "target", TARGET_LEN,
		IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ, UNTOUCHED);
	reg_buf(d, &s->counter, "counter", 8,
		IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_REMOTE_READ, 0);
	memcpy(s->counter.addr, &ctr, 8);
	print_mrs(all, 4);
	say("  counter = %" PRIu64 " (8 bytes, 8-byte aligned, REMOTE_ATOMIC)", ctr);

	section("connection setup");
	qp_to_init(d);
	/* Receives first: they are in place before the client learns our QPN. */
	sg = sge_of(&s->rx, 0, SRV_RX_LEN);
	post_recv(d, &r1, n1);
	post_recv(d, &r2, NULL);

	lfd = listen_socket(port);
	d->sock = accept(lfd, NULL, NULL);
	if (d->sock < 0)
		die("accept", errno);
	close(lfd);
	fill_mine(d, &mine);
	mine.target_addr = (uintptr_t)s->target.addr;
	mine.target_rkey = s->target.mr->rkey;
	mine.target_len = TARGET_LEN;
	mine.counter_addr = (uintptr_t)s->counter.addr;
	mine.counter_rkey = s->counter.mr->rkey;
	mine.counter_initial = CTR_INITIAL;
	say("sending over TCP: QPN, PSN, GID; target addr %#" PRIx64 " rkey 0x%08x; "
	    "counter addr %#" PRIx64 " rkey 0x%08x", mine.target_addr, mine.target_rkey,
	    mine.counter_addr, mine.counter_rkey);
	exchange_info(d, &mine);
	qp_to_rtr_rts(d);

	/* Arm before telling the client to go: the completion cannot slip past
	 * the notification. */
	if (ibv_req_notify_cq(d->recv_cq, 0))
		die("ibv_req_notify_cq", errno);
	say("recv CQ armed (ibv_req_notify_cq); telling the client READY");
	send_ctrl(d, "READY", 0, 0);
}

/* Sleep on the completion channel until the recv CQ's event arrives. */
static void wait_cq_event(struct demo *d)
{
	struct pollfd pfd = { .fd = d->channel->fd, .events = POLLIN };
	struct ibv_cq *ev_cq = NULL;
	void *ev_ctx = NULL;
	int pr;

	say("  sleeping in poll() on the completion channel fd %d ...", d->channel->fd);
	do
		pr = poll(&pfd, 1, CQ_WAIT_MS);
	while (pr < 0 && errno == EINTR);
	if (pr == 0)
		die("waiting on the completion channel", ETIMEDOUT);
	if (pr < 0)
		die("poll(completion channel)", errno);
	if (ibv_get_cq_event(d->channel, &ev_cq, &ev_ctx))
		die("ibv_get_cq_event", errno);
	ibv_ack_cq_events(ev_cq, 1);
	check(ev_cq == d->recv_cq && ev_ctx == recv_cq_cookie,
	      "ibv_get_cq_event: event for the recv CQ, cq_context \"%s\" (acked with "
	      "ibv_ack_cq_events)", ev_ctx == recv_cq_cookie ? recv_cq_cookie : "?");
}

static void server_a1_gathered_recv(struct server *s)
{
	struct ibv_wc wc;
	size_t len;
	char *want;

	section("(a1) SEND: client gathers 3 buffers -> 1 contiguous receive buffer here");
	wait_cq_event(&s->d);
	poll_one(s->d.recv_cq, &wc, "the gathered SEND");
	expect_wc(&wc, WRID_RECV_GATHERED, IBV_WC_RECV);
	check(wc.byte_len == A1_LEN, "byte_len %u == %d (%d + %d + %d)", wc.byte_len, A1_LEN,
	      G0_LEN, G1_LEN, G2_LEN);
	want = expected_text(A1_PIECES, 3, &len);
	say("    where the client's three buffers meet in srv_rx:");
	show_bytes("start (from g0)", s->rx.addr, 0, 36);
	show_seam("seam g0|g1", s->rx.addr, G0_LEN, A1_LEN);
	show_seam("seam g1|g2", s->rx.addr, G0_LEN + G1_LEN, A1_LEN);
	show_seam("end of message", s->rx.addr, A1_LEN, SRV_RX_LEN);
	verify_same("srv_rx[0..4400) == g0|g1|g2", s->rx.addr, want, len);
	verify_untouched("srv_rx after the message", s->rx.addr, A1_LEN, SRV_RX_LEN);
	free(want);
}

static void server_a2_send_imm(struct server *s)
{
	struct ibv_sge sg = sge_of(&s->tx, 0, A2_LEN);
	struct ibv_send_wr wr = { .wr_id = WRID_SEND_IMM, .sg_list = &sg, .num_sge = 1,
				  .opcode = IBV_WR_SEND_WITH_IMM };
	const char *n[] = { "srv_tx, whole buffer" };

	section("(a2) SEND_WITH_IMM: 1 contiguous buffer here -> client's 3-entry receive SGL");
	wr.imm_data = htonl(A2_IMM);
	send_wait(&s->d, &wr, n, IBV_WC_SEND);
}

/* After the client's DONE: plain loads of our own memory, no verbs. */
static void server_check_one_sided(struct server *s)
{
	const char *t = s->target.addr;
	uint64_t ctr;
	size_t len;
	char *want = expected_text(WRITE_PIECES, 3, &len);

	say("  client says DONE; looking at our memory now (plain loads, no verbs):");
	say("    RDMA WRITE landed at target+%d (addr %#" PRIxPTR "):", TARGET_WR_OFF,
	    (uintptr_t)(t + TARGET_WR_OFF));
	show_seam("before the write", t, TARGET_WR_OFF, TARGET_LEN);
	show_seam("seam w0|w1", t, TARGET_WR_OFF + W0_LEN, TARGET_LEN);
	show_seam("seam w1|w2", t, TARGET_WR_OFF + W0_LEN + W1_LEN, TARGET_LEN);
	show_seam("end of the write", t, TARGET_WR_OFF + WR_LEN, TARGET_LEN);
	verify_same("target[1000..4850) == w0[200..1200)|w1|w2[50..300)", t + TARGET_WR_OFF,
		    want, len);
	verify_untouched("target before the write", t, 0, TARGET_WR_OFF);
	verify_untouched("target between the write and the imm message", t,
			 TARGET_WR_OFF + WR_LEN, TARGET_IMM_OFF);
	free(want);

	memcpy(&ctr, s->counter.addr, 8);
	say("    counter now %" PRIu64 " (was %u: +%u by FETCH_AND_ADD, then CMP_AND_SWP "
	    "%u -> %u, then a CMP_AND_SWP that must miss)", ctr, CTR_INITIAL, FAA_ADD,
	    CTR_INITIAL + FAA_ADD, CAS_SWAP);
	check(ctr == CAS_SWAP, "counter == %u", CAS_SWAP);

	show_bytes("target+8192 (WRITE_WITH_IMM)", t, TARGET_IMM_OFF, sizeof IMM_MSG - 1);
	verify_same("WRITE_WITH_IMM text at target+8192", t + TARGET_IMM_OFF, IMM_MSG,
		    sizeof IMM_MSG - 1);
	verify_untouched("target after the imm message", t, TARGET_IMM_OFF + sizeof IMM_MSG - 1,
			 TARGET_LEN);
}

/* Nothing but the expected completions may be on our CQs. */
static void check_cqs_empty(struct demo *d)
{
	struct ibv_wc extra;
	int n = ibv_poll_cq(d->recv_cq, 1, &extra);
	int m = ibv_poll_cq(d->send_cq, 1, &extra);
	check(n == 0 && m == 0, "no other completions on our CQs");
}

static int run_server(const char *port)
{
	struct server s = { .d = { .sock = -1 } };
	struct buf *const all[] = { &s.rx, &s.tx, &s.target, &s.counter };
	struct ibv_wc wc;

	say("=== softverbs demo: SERVER (pid %d) ===", (int)getpid());
	open_device(&s.d);
	create_objects(&s.d);
	server_setup(&s, port);
	server_a1_gathered_recv(&s);
	server_a2_send_imm(&s);

	section("(b)+(c) one-sided: the client writes, reads and does atomics on our memory");
	say("  From here the server makes NO verbs calls: it sleeps in read() on the TCP");
	say("  socket until the client says DONE.  Whatever changes in `target` and");
	say("  `counter` meanwhile is done by the library's engine, not by this program.");
	recv_ctrl(&s.d, "DONE");
	server_check_one_sided(&s);

	say("  now one verbs call: the WRITE_WITH_IMM consumed our second (zero-SGE) receive:");
	poll_one(s.d.recv_cq, &wc, "RDMA_WRITE_WITH_IMM's receive");
	expect_wc(&wc, WRID_RECV_IMM, IBV_WC_RECV_RDMA_WITH_IMM);
	check((wc.wc_flags & IBV_WC_WITH_IMM) && ntohl(wc.imm_data) == WRITE_IMM,
	      "IBV_WC_WITH_IMM set, imm_data 0x%08x == 0x%08x", ntohl(wc.imm_data), WRITE_IMM);
	check_cqs_empty(&s.d);

	section("teardown (server)");
	send_ctrl(&s.d, "VERDICT", checks_run - checks_failed, checks_run);
	teardown(&s.d, all, 4);
	return finish();
}

/* ------------------------------------------------------------------------- */
/* Client                                                                     */
/* ------------------------------------------------------------------------- */

struct client {
	struct demo d;
	struct buf g[3];  /* gather sources: SEND (a1), then RDMA WRITE (b) */
	struct buf r[3];  /* scatter targets of the server's SEND_WITH_IMM (a2) */
	struct buf rb;    /* RDMA READ lands here, in three places */
	struct buf res;   /* 4 x 8 bytes: atomics' original values, counter read */
	struct buf msg;   /* RDMA_WRITE_WITH_IMM source */
};
#define CLIENT_NBUFS 9

static void client_bufs(struct client *c, struct buf **all)
{
	int i;
	for (i = 0; i < 3; i++) {
		all[i] = &c->g[i];
		all[3 + i] = &c->r[i];
	}
	all[6] = &c->rb;
	all[7] = &c->res;
	all[8] = &c->msg;
}

static int connect_socket(const char *host, const char *port)
{
	struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM };
	struct addrinfo *res = NULL;
	double deadline = now_ms() + CQ_WAIT_MS;
	int fd = -1, rc;

	rc = getaddrinfo(host, port, &hints, &res);
	if (rc) {
		check(false, "getaddrinfo(%s): %s", host, gai_strerror(rc));
		die("resolving the server's address", EINVAL);
	}
	/* The server may still be starting: retry for a while. */
	for (;;) {
		fd = socket(AF_INET, SOCK_STREAM, 0);
		if (fd < 0)
			die("socket", errno);
		if (connect(fd, res->ai_addr, res->ai_addrlen) == 0)
			break;
		close(fd);
		if (now_ms() > deadline)
			die("connecting to the server's TCP control socket", errno);
		usleep(100000);
	}
	freeaddrinfo(res);
	say("TCP control socket: connected to %s port %s", host, port);
	return fd;
}

static void client_setup(struct client *c, const char *host, const char *port)
{
	static const char *const gname[] = { "g0", "g1", "g2" };
	static const char *const rname[] = { "r0", "r1", "r2" };
	static const size_t rlen[] = { R0_LEN, R1_LEN, R2_LEN };
	struct demo *d = &c->d;
	struct buf *all[CLIENT_NBUFS];
	struct ibv_sge sg[3];
	struct ibv_recv_wr r = { .wr_id = WRID_RECV_SCATTER, .sg_list = sg, .num_sge = 3 };
	struct wire_info mine;
	int i;

	section("memory regions (client)");
	for (i = 0; i < 3; i++) {
		/* Send sources need no access flags at all: local read is implied. */
		reg_buf(d, &c->g[i], gname[i], A1_PIECES[i].buf_len, 0, 0);
		fill_text(c->g[i].addr, c->g[i].len, A1_PIECES[i].tag);
		reg_buf(d, &c->r[i], rname[i], rlen[i], IBV_ACCESS_LOCAL_WRITE, UNTOUCHED);
	}
	reg_buf(d, &c->rb, "readback", RB_LEN, IBV_ACCESS_LOCAL_WRITE, UNTOUCHED);
	reg_buf(d, &c->res, "results", 32, IBV_ACCESS_LOCAL_WRITE, (char)0xff);
	reg_buf(d, &c->msg, "msg", sizeof IMM_MSG - 1, 0, 0);
	memcpy(c->msg.addr, IMM_MSG, sizeof IMM_MSG - 1);
	client_bufs(c, all);
	print_mrs(all, CLIENT_NBUFS);

	section("connection setup");
	qp_to_init(d);
	/* The 3-entry receive SGL for (a2), posted before the server can send. */
	for (i = 0; i < 3; i++)
		sg[i] = sge_of(&c->r[i], 0, rlen[i]);
	post_recv(d, &r, rname);

	d->sock = connect_socket(host, port);
	fill_mine(d, &mine);
	exchange_info(d, &mine);
	say("server's target: addr %#" PRIx64 " len %u rkey 0x%08x; counter: addr %#" PRIx64
	    " rkey 0x%08x (initial %" PRIu64 ")", d->peer.target_addr, d->peer.target_len,
	    d->peer.target_rkey, d->peer.counter_addr, d->peer.counter_rkey,
	    d->peer.counter_initial);
	qp_to_rtr_rts(d);
	recv_ctrl(d, "READY");
	say("server is READY (its QP is in RTS, its recv CQ armed)");
}

static void client_a1_gather_send(struct client *c)
{
	static const char *const n[] = { "g0, MR #1", "g1, MR #2", "g2, MR #3" };
	struct ibv_sge sg[3];
	struct ibv_send_wr wr = { .wr_id = WRID_SEND_GATHER, .sg_list = sg, .num_sge = 3,
				  .opcode = IBV_WR_SEND };
	int i;

	section("(a1) SEND gathering 3 scattered buffers (3 MRs) -> server's contiguous buffer");
	for (i = 0; i < 3; i++) {
		sg[i] = sge_of(&c->g[i], A1_PIECES[i].off, A1_PIECES[i].len);
		show_bytes(n[i], c->g[i].addr, 0, 36);
	}
	send_wait(&c->d, &wr, n, IBV_WC_SEND);
}

static void client_a2_scattered_recv(struct client *c)
{
	static const struct piece msg = { "s1", A2_LEN, 0, A2_LEN };
	const size_t in_r2 = A2_LEN - R0_LEN - R1_LEN;
	struct ibv_wc wc;
	size_t len;
	char *want;

	section("(a2) receive: server's one buffer scattered into our 3-entry receive SGL");
	poll_one(c->d.recv_cq, &wc, "the server's SEND_WITH_IMM");
	expect_wc(&wc, WRID_RECV_SCATTER, IBV_WC_RECV);
	check(wc.byte_len == A2_LEN, "byte_len %u == %d", wc.byte_len, A2_LEN);
	check((wc.wc_flags & IBV_WC_WITH_IMM) && ntohl(wc.imm_data) == A2_IMM,
	      "IBV_WC_WITH_IMM set, imm_data 0x%08x == 0x%08x", ntohl(wc.imm_data), A2_IMM);
	want = expected_text(&msg, 1, &len);
	say("    the message (%d bytes) split as r0 %d + r1 %d + r2 %zu of %d:", A2_LEN, R0_LEN,
	    R1_LEN, in_r2, R2_LEN);
	show_bytes("r0 start", c->r[0].addr, 0, 36);
	show_bytes("r0 end", c->r[0].addr, R0_LEN - 36, 36);
	show_bytes("r1 start", c->r[1].addr, 0, 36);
	show_bytes("r1 end", c->r[1].addr, R1_LEN - 36, 36);
	show_bytes("r2 start", c->r[2].addr, 0, 36);
	show_seam("r2 where the message ends", c->r[2].addr, in_r2, R2_LEN);
	verify_same("r0 == message[0..1024)", c->r[0].addr, want, R0_LEN);
	verify_same("r1 == message[1024..4024)", c->r[1].addr, want + R0_LEN, R1_LEN);
	verify_same("r2[0..976) == message[4024..5000)", c->r[2].addr, want + R0_LEN + R1_LEN,
		    in_r2);
	verify_untouched("r2 beyond the message", c->r[2].addr, in_r2, R2_LEN);
	free(want);
}

static void client_b_write_read(struct client *c)
{
	static const char *const wn[] = { "g0+200, MR #1", "g1, MR #2", "g2+50, MR #3" };
	static const char *const rn[] = { "readback+0", "readback+3000", "readback+6000" };
	static const size_t rb_off[] = { RB0_OFF, RB1_OFF, RB2_OFF };
	static const size_t rb_len[] = { RB0_LEN, RB1_LEN, RB2_LEN };
	const uint64_t raddr = c->d.peer.target_addr + TARGET_WR_OFF;
	const uint32_t rkey = c->d.peer.target_rkey;
	struct ibv_sge sg[3];
	struct ibv_send_wr wr;
	size_t len, at = 0;
	char *want;
	int i;

	section("(b) RDMA WRITE with a 3-entry gather list into the server's target buffer");
	/* The SEND has completed, so its buffers may be reused: new text, and
	 * this time sub-ranges of them are gathered. */
	for (i = 0; i < 3; i++) {
		fill_text(c->g[i].addr, c->g[i].len, WRITE_PIECES[i].tag);
		sg[i] = sge_of(&c->g[i], WRITE_PIECES[i].off, WRITE_PIECES[i].len);
	}
	say("    (g0/g1/g2 refilled with new text w0/w1/w2)");
	wr = rdma_wr(WRID_WRITE, IBV_WR_RDMA_WRITE, sg, 3, raddr, rkey);
	send_wait(&c->d, &wr, wn, IBV_WC_RDMA_WRITE);

	section("(b) RDMA READ of the same 3850 bytes back, scattered into 3 places");
	for (i = 0; i < 3; i++)
		sg[i] = sge_of(&c->rb, rb_off[i], rb_len[i]);
	wr = rdma_wr(WRID_READ, IBV_WR_RDMA_READ, sg, 3, raddr, rkey);
	send_wait(&c->d, &wr, rn, IBV_WC_RDMA_READ);

	want = expected_text(WRITE_PIECES, 3, &len);
	for (i = 0; i < 3; i++) {
		char what[80];
		show_bytes(rn[i], c->rb.addr, rb_off[i], 36);
		snprintf(what, sizeof what, "readback[%zu..%zu) == written[%zu..%zu)", rb_off[i],
			 rb_off[i] + rb_len[i], at, at + rb_len[i]);
		verify_same(what, c->rb.addr + rb_off[i], want + at, rb_len[i]);
		at += rb_len[i];
	}
	check(at == len, "the read covered all %zu written bytes", len);
	verify_untouched("readback gap 1", c->rb.addr, RB0_OFF + RB0_LEN, RB1_OFF);
	verify_untouched("readback gap 2", c->rb.addr, RB1_OFF + RB1_LEN, RB2_OFF);
	verify_untouched("readback tail", c->rb.addr, RB2_OFF + RB2_LEN, RB_LEN);
	free(want);
}

/* One atomic on the server's counter; returns the original value the
 * responder sent back (written into results[slot]). */
static uint64_t remote_atomic(struct client *c, uint64_t wr_id, enum ibv_wr_opcode op,
			      uint64_t compare_add, uint64_t swap, int slot)
{
	static const char *const names[][1] = { { "results[0]" }, { "results[1]" },
						{ "results[2]" }, { "results[3]" } };
	struct ibv_sge sg = sge_of(&c->res, (size_t)slot * 8, 8);
	struct ibv_send_wr wr = { .wr_id = wr_id, .sg_list = &sg, .num_sge = 1, .opcode = op };
	uint64_t v;

	wr.wr.atomic.remote_addr = c->d.peer.counter_addr;
	wr.wr.atomic.rkey = c->d.peer.counter_rkey;
	wr.wr.atomic.compare_add = compare_add;
	wr.wr.atomic.swap = swap;
	send_wait(&c->d, &wr, names[slot],
		  op == IBV_WR_ATOMIC_FETCH_AND_ADD ? IBV_WC_FETCH_ADD : IBV_WC_COMP_SWAP);
	memcpy(&v, c->res.addr + slot * 8, 8);
	return v;
}

static void client_c_atomics(struct client *c)
{
	static const char *const n3[] = { "results[3]" };
	const uint64_t base = c->d.peer.counter_initial;
	struct ibv_sge sg = sge_of(&c->res, 24, 8);
	struct ibv_send_wr wr;
	uint64_t v;

	section("(c) atomics on the server's 8-byte counter");
	v = remote_atomic(c, WRID_FAA, IBV_WR_ATOMIC_FETCH_AND_ADD, FAA_ADD, 0, 0);
	check(v == base, "FETCH_AND_ADD(+%u) returned the original value %" PRIu64
	      " (expected %" PRIu64 ")", FAA_ADD, v, base);
	v = remote_atomic(c, WRID_CAS_HIT, IBV_WR_ATOMIC_CMP_AND_SWP, base + FAA_ADD, CAS_SWAP, 1);
	check(v == base + FAA_ADD, "CMP_AND_SWP(compare %" PRIu64 ", swap %u) returned %" PRIu64
	      ": equal to compare, so it swapped", base + FAA_ADD, CAS_SWAP, v);
	v = remote_atomic(c, WRID_CAS_MISS, IBV_WR_ATOMIC_CMP_AND_SWP, base + FAA_ADD, CAS2_SWAP, 2);
	check(v == CAS_SWAP, "CMP_AND_SWP(compare %" PRIu64 ", swap %u) returned %" PRIu64
	      ": not equal to compare, so no swap", base + FAA_ADD, CAS2_SWAP, v);

	/* Read the counter itself to see the final value from here too. */
	wr = rdma_wr(WRID_READ_CTR, IBV_WR_RDMA_READ, &sg, 1, c->d.peer.counter_addr,
		     c->d.peer.counter_rkey);
	send_wait(&c->d, &wr, n3, IBV_WC_RDMA_READ);
	memcpy(&v, c->res.addr + 24, 8);
	check(v == CAS_SWAP, "counter read back remotely: %" PRIu64 " (expected %u)", v, CAS_SWAP);
}

static void client_write_imm(struct client *c)
{
	static const char *const n[] = { "msg" };
	struct ibv_sge sg = sge_of(&c->msg, 0, c->msg.len);
	struct ibv_send_wr wr = rdma_wr(WRID_WRITE_IMM, IBV_WR_RDMA_WRITE_WITH_IMM, &sg, 1,
					c->d.peer.target_addr + TARGET_IMM_OFF,
					c->d.peer.target_rkey);

	section("RDMA_WRITE_WITH_IMM: data into target+8192, imm_data into the server's CQ");
	wr.imm_data = htonl(WRITE_IMM);
	show_bytes("msg", c->msg.addr, 0, c->msg.len);
	send_wait(&c->d, &wr, n, IBV_WC_RDMA_WRITE);
}

static int run_client(const char *host, const char *port)
{
	struct client c = { .d = { .sock = -1 } };
	struct buf *all[CLIENT_NBUFS];
	struct ctrl_msg verdict;

	say("=== softverbs demo: CLIENT (pid %d) ===", (int)getpid());
	open_device(&c.d);
	create_objects(&c.d);
	client_setup(&c, host, port);
	client_a1_gather_send(&c);
	client_a2_scattered_recv(&c);
	client_b_write_read(&c);
	client_c_atomics(&c);
	client_write_imm(&c);

	section("done: telling the server to look at its memory");
	send_ctrl(&c.d, "DONE", 0, 0);
	verdict = recv_ctrl(&c.d, "VERDICT");
	check(verdict.a == verdict.b, "server verified its memory and CQ: %u/%u checks passed",
	      verdict.a, verdict.b);
	check_cqs_empty(&c.d);

	section("teardown (client)");
	client_bufs(&c, all);
	teardown(&c.d, all, CLIENT_NBUFS);
	return finish();
}

/* ------------------------------------------------------------------------- */

static void usage(const char *argv0)
{
	fprintf(stderr,
		"usage: %s server [port]\n"
		"       %s client HOST [port]\n"
		"  port defaults to %s; the server accepts 0 (any free port, printed).\n"
		"  SV_DEMO_DEVICE picks the verbs device (default %s), SV_DEMO_TIMEOUT the\n"
		"  time limit in seconds (default %d), SV_DEMO_BIND the server's address\n"
		"  for the TCP control socket (default 127.0.0.1).\n",
		argv0, argv0, DEFAULT_PORT, DEFAULT_DEVICE, DEFAULT_TIMEOUT);
}

int main(int argc, char **argv)
{
	struct sigaction sa;
	const char *t = getenv("SV_DEMO_TIMEOUT");
	unsigned timeout = t && atoi(t) > 0 ? (unsigned)atoi(t) : DEFAULT_TIMEOUT;

	/* Line-buffered even into a pipe/file, so the two reports interleave
	 * in the order things happen. */
	setvbuf(stdout, NULL, _IOLBF, 0);
	stamp_lines = getenv("SV_DEMO_STAMP") && strcmp(getenv("SV_DEMO_STAMP"), "1") == 0;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_alarm;
	sigaction(SIGALRM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	alarm(timeout);
	srand48((long)getpid() ^ (long)time(NULL));

	if (argc >= 2 && strcmp(argv[1], "server") == 0 && argc <= 3)
		return run_server(argc == 3 ? argv[2] : DEFAULT_PORT);
	if (argc >= 3 && strcmp(argv[1], "client") == 0 && argc <= 4)
		return run_client(argv[2], argc == 4 ? argv[3] : DEFAULT_PORT);
	usage(argv[0]);
	return 2;
}
