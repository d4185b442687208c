/*
 * sv_test.h - shared test harness for softverbs tests (static library sv_test).
 *
 * Everything here goes through the public verbs API (<infiniband/verbs.h>) only,
 * so the same tests would run against rdma-core + rxe.
 *
 * Conventions
 *   - A failed check prints "file:line: ..." with the values and exit(1)s.
 *     Helpers named svt_* that "must" succeed (create, connect, poll N) fail the
 *     test the same way; helpers that return an int are meant for checking
 *     error paths yourself.
 *   - svt_skip() exits with 77; register tests with svt_add_test() (CMake) or
 *     set SKIP_RETURN_CODE 77 so CTest reports them as skipped.
 *   - Nothing may hang: every wait has a timeout (SVT_TIMEOUT_MS by default),
 *     and svt_watchdog() arms an alarm that aborts a stuck test with a message.
 *   - Device name: $SVT_DEVICE, default "sv_lo". AVs need
 *     ah_attr.is_global=1 with grh.dgid = a GID of the peer's port (any
 *     index; the harness uses index 3, the IPv4-mapped RoCE v2 GID).
 *   - Never use an ibv_context across fork(): two-process tests use
 *     svt_spawn(), which fork+execs the test binary itself, and the child opens
 *     its own device.
 */
#ifndef SV_TEST_H
#define SV_TEST_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include <infiniband/verbs.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Default timeout of every wait in the harness (completions, events, children). */
#define SVT_TIMEOUT_MS 5000

/* ------------------------------------------------------------------------- */
/* Assertions                                                                 */
/* ------------------------------------------------------------------------- */

/* Print "file:line: <message>" to stderr and exit(1). printf-style. */
void svt_fail_at(const char *file, int line, const char *fmt, ...)
	__attribute__((noreturn, format(printf, 3, 4)));
#define SVT_FAIL(...) svt_fail_at(__FILE__, __LINE__, __VA_ARGS__)

/* Print the reason ("SKIP: reason") and exit(77): CTest reports "skipped". */
void svt_skip(const char *reason) __attribute__((noreturn));

/* Informational line on stderr, prefixed with the program name. */
void svt_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* SVT_CHECK(cond): fail if cond is false; prints the expression and errno. */
#define SVT_CHECK(cond)                                                        \
	do {                                                                   \
		if (!(cond))                                                   \
			svt_fail_at(__FILE__, __LINE__,                        \
				    "check failed: %s (errno %d: %s)", #cond,  \
				    errno, strerror(errno));                   \
	} while (0)

/* SVT_CHECK_MSG(cond, fmt, ...): same with an explanation. */
#define SVT_CHECK_MSG(cond, ...)                                               \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__,  \
				__LINE__, #cond);                              \
			svt_fail_at(__FILE__, __LINE__, __VA_ARGS__);          \
		}                                                              \
	} while (0)

/*
 * Integer comparisons. Both sides are evaluated once and compared as
 * long long (so mixed signedness in the caller does not matter); on failure
 * both expressions and both values (decimal and hex) are printed.
 */
void svt_fail_cmp(const char *file, int line, const char *ea, const char *op,
		  const char *eb, long long a, long long b)
	__attribute__((noreturn));
#define SVT__CMP(a, op, b)                                                     \
	do {                                                                   \
		long long svt_a_ = (long long)(a);                             \
		long long svt_b_ = (long long)(b);                             \
		if (!(svt_a_ op svt_b_))                                       \
			svt_fail_cmp(__FILE__, __LINE__, #a, #op, #b, svt_a_,   \
				     svt_b_);                                  \
	} while (0)
#define SVT_CHECK_EQ(a, b) SVT__CMP(a, ==, b)
#define SVT_CHECK_NE(a, b) SVT__CMP(a, !=, b)
#define SVT_CHECK_LT(a, b) SVT__CMP(a, <, b)
#define SVT_CHECK_LE(a, b) SVT__CMP(a, <=, b)
#define SVT_CHECK_GT(a, b) SVT__CMP(a, >, b)
#define SVT_CHECK_GE(a, b) SVT__CMP(a, >=, b)

/* SVT_CHECK_PTR(p): p must be non-NULL (prints errno otherwise). */
#define SVT_CHECK_PTR(p) SVT_CHECK((p) != NULL)

/*
 * SVT_CHECK_OK(expr): expr is a verb returning 0 on success and an errno
 * value on failure (ibv_modify_qp, ibv_post_send, ibv_dealloc_pd, ...).
 * Fails printing the returned value and its strerror.
 */
void svt_fail_rc(const char *file, int line, const char *expr, int rc,
		 int expected) __attribute__((noreturn));
#define SVT_CHECK_OK(expr)                                                     \
	do {                                                                   \
		int svt_rc_ = (int)(expr);                                     \
		if (svt_rc_ != 0)                                              \
			svt_fail_rc(__FILE__, __LINE__, #expr, svt_rc_, 0);    \
	} while (0)

/*
 * SVT_CHECK_RC(expr, E): expr must return exactly the errno value E
 * (the "returns the value of errno on failure" convention of the man pages).
 */
#define SVT_CHECK_RC(expr, E)                                                  \
	do {                                                                   \
		int svt_rc_ = (int)(expr);                                     \
		if (svt_rc_ != (E))                                            \
			svt_fail_rc(__FILE__, __LINE__, #expr, svt_rc_, (E));  \
	} while (0)

/*
 * SVT_CHECK_FAILS(expr): expr must return nonzero (any error). Use when the
 * man page promises failure but no particular errno.
 */
#define SVT_CHECK_FAILS(expr)                                                  \
	do {                                                                   \
		if ((int)(expr) == 0)                                          \
			svt_fail_at(__FILE__, __LINE__,                        \
				    "expected failure, got success: %s",       \
				    #expr);                                    \
	} while (0)

/*
 * SVT_CHECK_NULL_ERRNO(expr, E): expr (returning a pointer) must return NULL
 * with errno == E. errno is cleared first. Destroys nothing: on unexpected
 * success the test fails (and leaks the object, which is fine on exit).
 */
#define SVT_CHECK_NULL_ERRNO(expr, E)                                          \
	do {                                                                   \
		errno = 0;                                                     \
		const void *svt_p_ = (const void *)(expr);                     \
		int svt_e_ = errno;                                            \
		if (svt_p_ != NULL)                                            \
			svt_fail_at(__FILE__, __LINE__,                        \
				    "expected NULL (errno %d %s), got %p: %s", \
				    (E), strerror(E), svt_p_, #expr);          \
		if (svt_e_ != (E))                                             \
			svt_fail_at(__FILE__, __LINE__,                        \
				    "%s: NULL as expected but errno %d (%s), " \
				    "expected %d (%s)",                        \
				    #expr, svt_e_, strerror(svt_e_), (E),      \
				    strerror(E));                              \
	} while (0)

/* SVT_CHECK_NULL(expr): expr must return NULL (any errno). */
#define SVT_CHECK_NULL(expr)                                                   \
	do {                                                                   \
		const void *svt_p_ = (const void *)(expr);                     \
		if (svt_p_ != NULL)                                            \
			svt_fail_at(__FILE__, __LINE__,                        \
				    "expected NULL, got %p: %s", svt_p_,       \
				    #expr);                                    \
	} while (0)

/*
 * SVT_CHECK_MEM(a, b, len): memcmp(a, b, len) == 0; on failure prints the
 * first differing offset and the bytes around it.
 */
void svt_check_mem_at(const char *file, int line, const void *a, const void *b,
		      size_t len);
#define SVT_CHECK_MEM(a, b, len) svt_check_mem_at(__FILE__, __LINE__, a, b, len)

/*
 * svt_watchdog(seconds): alarm() that prints "watchdog: test exceeded N s"
 * and aborts. Call at the start of main() with a value below the CTest
 * TIMEOUT so a hang names itself. 0 disarms.
 */
void svt_watchdog(unsigned int seconds);

/* Monotonic milliseconds, for timeouts. */
uint64_t svt_now_ms(void);
/* Sleep for ms milliseconds. */
void svt_sleep_ms(unsigned int ms);
/*
 * Root: move this process (call it before any thread or device exists)
 * into a network namespace of its own, with lo up: its devices' QPN
 * registry and ports are then its own (and its children's).  false when
 * not root or it cannot.  svt_private_netns_done() removes the registry
 * file that namespace's sv_lo left in /dev/shm.
 */
bool svt_private_netns(void);
void svt_private_netns_done(void);

/* ------------------------------------------------------------------------- */
/* Buffers                                                                    */
/* ------------------------------------------------------------------------- */

/* Fill buf with a deterministic byte pattern depending on seed and offset. */
/* Is addr in pages softverbs shared with peers of its host (a mapping of its memfd)? */
bool svt_shared_pages(const void *addr);
void svt_fill(void *buf, size_t len, uint32_t seed);
/* The byte svt_fill(…, seed) puts at offset off. */
uint8_t svt_pattern_byte(uint32_t seed, size_t off);
/* Check buf holds svt_fill(buf, len, seed) (offsets relative to buf). Fails
 * the test with the first mismatching offset. */
void svt_check_fill_at(const char *file, int line, const void *buf, size_t len,
		       uint32_t seed);
#define SVT_CHECK_FILL(buf, len, seed)                                         \
	svt_check_fill_at(__FILE__, __LINE__, buf, len, seed)

/*
 * Wait until buf holds svt_fill(…, seed) (for one-sided writes whose
 * placement is not tied to a local completion, e.g. UC); fails the test with
 * the first mismatch after timeout_ms (<= 0 -> SVT_TIMEOUT_MS).
 */
void svt_wait_fill_at(const char *file, int line, const void *buf, size_t len,
		      uint32_t seed, int timeout_ms);
#define SVT_WAIT_FILL(buf, len, seed)                                          \
	svt_wait_fill_at(__FILE__, __LINE__, buf, len, seed, 0)

/* Page-aligned zeroed allocation that fails the test on ENOMEM. */
void *svt_alloc(size_t len);

/* ------------------------------------------------------------------------- */
/* Device, PD, CQ, QP                                                         */
/* ------------------------------------------------------------------------- */

/* The device name tests use: $SVT_DEVICE or "sv_lo". */
const char *svt_device_name(void);

/*
 * svt_open_context(): open the device named svt_device_name(). Fails the test
 * (listing the devices found) if it is absent or cannot be opened.
 */
struct ibv_context *svt_open_context(void);

/* One opened device with a PD and its port/GID facts. */
struct svt_dev {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_device_attr dev_attr;
	struct ibv_port_attr port_attr; /* port 1 */
	union ibv_gid gid;              /* port 1, GID index 0 */
};

/* Open the device, allocate a PD, query device, port 1 and GID 0. */
void svt_dev_open(struct svt_dev *d);
/* Dealloc the PD and close the device (checks both succeed). */
void svt_dev_close(struct svt_dev *d);

/* Register an MR or fail the test. */
struct ibv_mr *svt_reg_mr(struct ibv_pd *pd, void *addr, size_t len,
			  unsigned int access);

/* All of LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ | REMOTE_ATOMIC. */
#define SVT_ACCESS_ALL                                                         \
	(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |                    \
	 IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)

/* Create a CQ with cqe entries (channel may be NULL) or fail the test. */
struct ibv_cq *svt_create_cq(struct ibv_context *ctx, int cqe,
			     struct ibv_comp_channel *channel);

/*
 * QP creation parameters. svt_qp_init_default() gives: 64 send / 64 recv WRs,
 * 4 SGEs each, 64 bytes inline, sq_sig_all 0, no SRQ.
 */
struct svt_qp_init {
	enum ibv_qp_type type;
	struct ibv_qp_cap cap;
	int sq_sig_all;
	struct ibv_srq *srq;
};
void svt_qp_init_default(struct svt_qp_init *qi, enum ibv_qp_type type);

/* Create a QP (fails the test if creation fails). */
struct ibv_qp *svt_create_qp(struct ibv_pd *pd, struct ibv_cq *send_cq,
			     struct ibv_cq *recv_cq,
			     const struct svt_qp_init *qi);

/*
 * Connection attributes used when moving a QP through INIT/RTR/RTS.
 * svt_conn_default() gives:
 *   port_num 1, pkey_index 0, access LOCAL_WRITE|REMOTE_WRITE|REMOTE_READ|
 *   REMOTE_ATOMIC (UC: without READ/ATOMIC), path_mtu IBV_MTU_4096,
 *   sq_psn 0x1000, rq_psn (= peer's sq_psn) 0x1000, timeout 14, retry_cnt 7,
 *   rnr_retry 7, min_rnr_timer 12, max_rd_atomic 4, max_dest_rd_atomic 4,
 *   qkey 0x11111111, sgid_index 0, hop_limit 1.
 * Override any field before calling the transition helpers.
 */
struct svt_conn {
	uint8_t port_num;
	uint16_t pkey_index;
	unsigned int access;
	enum ibv_mtu path_mtu;
	uint32_t sq_psn;
	uint32_t rq_psn;
	uint8_t timeout;
	uint8_t retry_cnt;
	uint8_t rnr_retry;
	uint8_t min_rnr_timer;
	uint8_t max_rd_atomic;
	uint8_t max_dest_rd_atomic;
	uint32_t qkey;
	uint8_t sgid_index;
	uint8_t hop_limit;
};
void svt_conn_default(struct svt_conn *c, enum ibv_qp_type type);

/*
 * Fill ah_attr for reaching a peer with the given GID: is_global=1,
 * grh.dgid=*dgid, sgid_index/hop_limit from c (c may be NULL: defaults),
 * port_num 1.
 */
void svt_ah_attr(struct ibv_ah_attr *ah, const union ibv_gid *dgid,
		 const struct svt_conn *c);

/*
 * Individual transitions with the required masks of ibv_modify_qp(3) for the
 * QP's type. They return ibv_modify_qp's result (0 or an errno value) so error
 * paths can be tested; wrap in SVT_CHECK_OK when they must succeed.
 *   INIT: STATE|PKEY_INDEX|PORT|ACCESS_FLAGS (RC/UC), STATE|PKEY_INDEX|PORT|QKEY (UD)
 *   RTR : STATE|AV|PATH_MTU|DEST_QPN|RQ_PSN [+MAX_DEST_RD_ATOMIC|MIN_RNR_TIMER for RC]
 *         (UD: STATE only)
 *   RTS : STATE|SQ_PSN [+TIMEOUT|RETRY_CNT|RNR_RETRY|MAX_QP_RD_ATOMIC for RC]
 */
int svt_qp_to_init(struct ibv_qp *qp, const struct svt_conn *c);

/*
 * The attributes and mask the transitions above use, without calling
 * ibv_modify_qp (to test variations of the mask). Each returns the mask.
 * dgid may be NULL for UD.
 */
int svt_init_attr(enum ibv_qp_type type, const struct svt_conn *c,
		  struct ibv_qp_attr *a);
int svt_rtr_attr(enum ibv_qp_type type, const struct svt_conn *c,
		 const union ibv_gid *dgid, uint32_t dest_qpn,
		 struct ibv_qp_attr *a);
int svt_rts_attr(enum ibv_qp_type type, const struct svt_conn *c,
		 struct ibv_qp_attr *a);
int svt_qp_to_rtr(struct ibv_qp *qp, const struct svt_conn *c,
		  const union ibv_gid *dgid, uint32_t dest_qpn);
int svt_qp_to_rts(struct ibv_qp *qp, const struct svt_conn *c);
/* Move to ERR / RESET (STATE mask only). */
int svt_qp_to_state(struct ibv_qp *qp, enum ibv_qp_state state);

/*
 * RESET -> INIT -> RTR -> RTS, failing the test on error. For UD, dgid and
 * dest_qpn are ignored (pass NULL, 0). c may be NULL (defaults for the type).
 */
void svt_qp_connect(struct ibv_qp *qp, const struct svt_conn *c,
		    const union ibv_gid *dgid, uint32_t dest_qpn);

/* A UD QP with the default init attributes, in RTS with qkey and
 * sgid_index (the rest svt_conn_default's). */
struct ibv_qp *svt_ud_qp(struct ibv_pd *pd, struct ibv_cq *scq, struct ibv_cq *rcq,
			 uint32_t qkey, uint8_t sgid_index);

/*
 * Connect two QPs (of the same type) to each other: qa (on the context whose
 * GID is *ga) <-> qb (GID *gb). c may be NULL (defaults for the type).
 */
void svt_qp_link(struct ibv_qp *qa, const union ibv_gid *ga, struct ibv_qp *qb,
		 const union ibv_gid *gb, const struct svt_conn *c);

/* ibv_query_qp for the current state (fails test on error). */
enum ibv_qp_state svt_qp_state(struct ibv_qp *qp);

/* ------------------------------------------------------------------------- */
/* Pair: two connected QPs in one process, on two separate contexts           */
/* ------------------------------------------------------------------------- */

/* One side of a pair: its own context (endpoint), PD, CQs, QP and buffer. */
struct svt_side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	union ibv_gid gid;
	struct ibv_device_attr dev_attr;
	struct ibv_comp_channel *channel; /* only with opts.comp_channel */
	struct ibv_cq *send_cq;
	struct ibv_cq *recv_cq; /* == send_cq unless opts.separate_cqs */
	struct ibv_qp *qp;
	void *buf;              /* buf_len bytes, zeroed, page aligned */
	size_t buf_len;
	struct ibv_mr *mr;      /* covers buf, access opts.mr_access */
	struct ibv_ah *ah;      /* UD only: AH towards the other side */
	uint32_t remote_qpn;    /* the other side's QP number */
};

struct svt_pair_opts {
	enum ibv_qp_type type;     /* IBV_QPT_RC, IBV_QPT_UC or IBV_QPT_UD */
	size_t buf_len;            /* per side, default 64 KiB */
	int cqe;                   /* default 256 */
	bool separate_cqs;         /* send and recv CQ distinct, default false */
	bool comp_channel;         /* CQs attached to a new completion channel */
	unsigned int mr_access;    /* default SVT_ACCESS_ALL */
	struct svt_qp_init qp;     /* default svt_qp_init_default(type) */
	struct svt_conn conn;      /* default svt_conn_default(type) */
	bool no_connect;           /* leave both QPs in RESET */
};

struct svt_pair {
	enum ibv_qp_type type;
	struct svt_side a, b;
	struct svt_pair_opts opts;
};

/* Defaults for a pair of the given QP type (see field comments). */
void svt_pair_opts_default(struct svt_pair_opts *o, enum ibv_qp_type type);
/*
 * Build both sides and connect a.qp <-> b.qp (RTS), unless no_connect.
 * opts may be NULL for defaults of `type`. For UD, each side also gets an AH
 * towards the other (side.ah) and remote_qpn; qkey is opts.conn.qkey.
 */
void svt_pair_create(struct svt_pair *p, enum ibv_qp_type type,
		     const struct svt_pair_opts *opts);
/* Connect both sides (when created with no_connect). */
void svt_pair_connect(struct svt_pair *p);
/* Destroy everything in reverse order, checking each destroy succeeds. */
void svt_pair_destroy(struct svt_pair *p);

/* ------------------------------------------------------------------------- */
/* Posting                                                                    */
/* ------------------------------------------------------------------------- */

/*
 * Post one send WR with one SGE (len 0 -> num_sge 0). remote_addr/rkey are
 * used for RDMA opcodes, imm (host order; converted with htonl) for *_WITH_IMM.
 * Returns ibv_post_send's result.
 */
int svt_post_send(struct ibv_qp *qp, uint64_t wr_id, enum ibv_wr_opcode op,
		  unsigned int flags, void *addr, uint32_t len, uint32_t lkey,
		  uint64_t remote_addr, uint32_t rkey, uint32_t imm_host);

/* UD SEND of one SGE to (ah, remote_qpn, remote_qkey). Returns post result. */
int svt_post_ud_send(struct ibv_qp *qp, uint64_t wr_id, unsigned int flags,
		     void *addr, uint32_t len, uint32_t lkey, struct ibv_ah *ah,
		     uint32_t remote_qpn, uint32_t remote_qkey);

/* Atomic CMP_AND_SWP / FETCH_AND_ADD of 8 bytes into addr/lkey. */
int svt_post_atomic(struct ibv_qp *qp, uint64_t wr_id, enum ibv_wr_opcode op,
		    unsigned int flags, void *addr, uint32_t lkey,
		    uint64_t remote_addr, uint32_t rkey, uint64_t compare_add,
		    uint64_t swap);

/* Post one receive WR with one SGE (len 0 -> num_sge 0). Returns result. */
int svt_post_recv(struct ibv_qp *qp, uint64_t wr_id, void *addr, uint32_t len,
		  uint32_t lkey);

/* Post one SRQ receive WR with one SGE. Returns ibv_post_srq_recv's result. */
int svt_post_srq_recv(struct ibv_srq *srq, uint64_t wr_id, void *addr,
		      uint32_t len, uint32_t lkey);

/* ------------------------------------------------------------------------- */
/* Completions and events                                                     */
/* ------------------------------------------------------------------------- */

/*
 * Wait until exactly n completions have been polled from cq into wc[0..n-1]
 * (never polls more than n), failing the test on timeout_ms (<= 0 ->
 * SVT_TIMEOUT_MS). Statuses are NOT checked: see svt_poll_ok.
 */
void svt_poll_n_at(const char *file, int line, struct ibv_cq *cq, int n,
		   struct ibv_wc *wc, int timeout_ms);
#define svt_poll_n(cq, n, wc, timeout_ms)                                      \
	svt_poll_n_at(__FILE__, __LINE__, cq, n, wc, timeout_ms)

/* Like svt_poll_n and also checks every status is IBV_WC_SUCCESS. */
void svt_poll_ok_at(const char *file, int line, struct ibv_cq *cq, int n,
		    struct ibv_wc *wc, int timeout_ms);
#define svt_poll_ok(cq, n, wc, timeout_ms)                                     \
	svt_poll_ok_at(__FILE__, __LINE__, cq, n, wc, timeout_ms)

/* Poll one completion (default timeout) and return it; status unchecked. */
struct ibv_wc svt_poll_one_at(const char *file, int line, struct ibv_cq *cq);
#define svt_poll_one(cq) svt_poll_one_at(__FILE__, __LINE__, cq)

/* Fail the test if any completion arrives on cq within ms milliseconds. */
void svt_expect_no_wc_at(const char *file, int line, struct ibv_cq *cq,
			 int ms);
#define svt_expect_no_wc(cq, ms) svt_expect_no_wc_at(__FILE__, __LINE__, cq, ms)

/* SVT_CHECK_WC_OK(wc): wc.status == IBV_WC_SUCCESS (prints status string). */
#define SVT_CHECK_WC_STATUS(wc, st)                                            \
	do {                                                                   \
		if ((wc).status != (st))                                       \
			svt_fail_at(__FILE__, __LINE__,                        \
				    "wc wr_id %llu: status %d (%s), "          \
				    "expected %d (%s)",                        \
				    (unsigned long long)(wc).wr_id,            \
				    (int)(wc).status,                          \
				    ibv_wc_status_str((wc).status), (int)(st), \
				    ibv_wc_status_str(st));                    \
	} while (0)
#define SVT_CHECK_WC_OK(wc) SVT_CHECK_WC_STATUS(wc, IBV_WC_SUCCESS)

/*
 * Wait for a completion-channel event with a timeout (poll() on channel->fd,
 * then ibv_get_cq_event). Returns 0 and sets *cq and *cq_context, or ETIMEDOUT.
 * The caller acks (ibv_ack_cq_events).
 */
int svt_wait_cq_event(struct ibv_comp_channel *ch, int timeout_ms,
		      struct ibv_cq **cq, void **cq_context);

/*
 * Wait for an async event on ctx (poll() on ctx->async_fd, then
 * ibv_get_async_event). Returns 0 with *ev filled (caller acks with
 * ibv_ack_async_event) or ETIMEDOUT.
 */
int svt_wait_async_event(struct ibv_context *ctx, int timeout_ms,
			 struct ibv_async_event *ev);

/* ------------------------------------------------------------------------- */
/* Two-process tests                                                          */
/* ------------------------------------------------------------------------- */

/*
 * A child role: a function run in a child process started by svt_spawn().
 * rfd reads from the parent, wfd writes to it. Its return value is the
 * child's exit status. argv[0..argc-1] are the extra arguments given to
 * svt_spawn.
 */
typedef int (*svt_child_fn)(int rfd, int wfd, int argc, char **argv);
struct svt_child_role {
	const char *name;
	svt_child_fn fn;
};

/*
 * Call first thing in main(argc, argv) of a test that uses svt_spawn. If the
 * process was started as a child ("--svt-child NAME ..."), runs the role NAME
 * from roles[] (terminated by {NULL, NULL}) and exits with its return value;
 * otherwise returns.
 */
void svt_child_dispatch(int argc, char **argv,
			const struct svt_child_role *roles);

struct svt_child {
	pid_t pid;
	int rfd; /* parent reads what the child writes */
	int wfd; /* parent writes what the child reads */
};

/*
 * Start a child by fork+exec of /proc/self/exe with "--svt-child role args...".
 * args is a NULL-terminated list (may be NULL). The child opens its own
 * device; nothing verbs-related crosses the fork. Fails the test on error.
 */
void svt_spawn(struct svt_child *c, const char *role, char *const args[]);

/*
 * Wait for the child to exit (timeout_ms <= 0 -> SVT_TIMEOUT_MS); on timeout
 * the child is killed (SIGKILL) and the test fails. Returns the exit status
 * (128+signal if killed by a signal). Closes the pipes.
 */
int svt_child_wait(struct svt_child *c, int timeout_ms);

/* Kill the child with sig (e.g. SIGKILL, for peer-death tests). */
void svt_child_kill(struct svt_child *c, int sig);

/*
 * Write/read exactly len bytes on a pipe; the read fails the test after
 * timeout_ms (<= 0 -> SVT_TIMEOUT_MS) or on EOF.
 */
void svt_chan_write(int fd, const void *buf, size_t len);
void svt_chan_read(int fd, void *buf, size_t len, int timeout_ms);

/* What two peers exchange to connect and to do RDMA on each other's buffer. */
struct svt_peer_info {
	union ibv_gid gid;
	uint32_t qpn;
	uint32_t psn;
	uint64_t addr;
	uint32_t rkey;
	uint32_t len;
	uint32_t qkey;
};
static inline void svt_send_info(int fd, const struct svt_peer_info *i)
{
	svt_chan_write(fd, i, sizeof(*i));
}
static inline void svt_recv_info(int fd, struct svt_peer_info *i)
{
	svt_chan_read(fd, i, sizeof(*i), 0);
}

/* Tiny synchronisation: send/receive a one-byte token (read has a timeout). */
void svt_sync_send(int fd, char token);
char svt_sync_recv(int fd, int timeout_ms);

#ifdef __cplusplus
}
#endif

#endif /* SV_TEST_H */
