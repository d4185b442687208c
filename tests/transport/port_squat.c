/*
 * A port or name a device's peers reach it by, taken first by another
 * program, makes the device fail to open, loudly; nothing reaches the
 * squatter (issue 35, point 3).
 *
 * In a network namespace of its own (root; skipped otherwise), where the
 * host's ports are this test's alone:
 *
 *  1. A TCP socket without SO_REUSEPORT on 127.0.0.1:4791, the shared port
 *     (SOFTVERBS_PORT) where peers connect: ibv_open_device fails with
 *     EADDRINUSE, and the log names the port, says another program holds
 *     it and what to do (SOFTVERBS_PORT).  Before, the device opened
 *     without that listener (a warning), and a peer's connection went to
 *     the squatter, which held it while the peer's WRITE waited with no
 *     completion.
 *  2. The same port held, with SO_REUSEPORT, by another user (uid 65534):
 *     the kernel groups one user's sockets only, so it is held all the
 *     same (EADDRINUSE).  (A process of our own user may join the group:
 *     softverbs trusts it as the user, docs/SECURITY.md.)
 *  3. With SOFTVERBS_TRANSPORT=rocev2, a UDP socket on 127.0.0.1:4791, and
 *     one on [::1]:4791 (the device's IPv6 listener): EADDRINUSE, the log
 *     names UDP 4791.  Before, the device opened deaf, and a peer's WRITE
 *     payloads went to the squatter.
 *  4. Another user binds the abstract names of two blocks of QP numbers
 *     (softverbs-handoff/ and softverbs-rocev2/ of blocks 1 and 3): the
 *     device passes over block 1 (its names are another program's) and
 *     opens at block 2; a connection on the shared port naming block 3's
 *     endpoint is not handed to that user's socket, nor a datagram for a
 *     QPN of block 3 passed to it (the listener's SO_PEERCRED).
 *
 * Each time the squatter receives nothing.  When there is no squatter,
 * the device opens (1 and 3 end so).
 */
#include "sv_test.h"
#include "wire_peer.h"
#include "common/util.h"
#include "transport/transport.h"
#include "transport/registry.h"
#include "transport/auth.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define NOBODY 65534

/* ibv_open_device of the test's device, with what the library logs
 * meanwhile in log (cap bytes, NUL-terminated); errno set when NULL. */
static struct ibv_context *open_logged(char *log, size_t cap)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = NULL;
	int mfd = memfd_create("svt-log", MFD_CLOEXEC), saved = dup(2), e = 0;
	ssize_t n;

	SVT_CHECK(list && mfd >= 0 && saved >= 0);
	fflush(stderr);
	dup2(mfd, 2);
	for (int i = 0; list[i]; i++)
		if (!strcmp(ibv_get_device_name(list[i]), svt_device_name())) {
			ctx = ibv_open_device(list[i]);
			e = errno;
			break;
		}
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	ibv_free_device_list(list);
	n = pread(mfd, log, cap - 1, 0);
	log[n > 0 ? n : 0] = 0;
	close(mfd);
	if (log[0])
		fprintf(stderr, "%s", log);
	errno = e;
	return ctx;
}

/* A socket of type on (family) addr:port, without SO_REUSEPORT (reuseport
 * with it), listening if a stream. */
static int squat(int family, int type, const char *addr, uint16_t port, bool reuseport)
{
	struct sockaddr_storage ss = { 0 };
	socklen_t l;
	int fd = socket(family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), one = 1;

	SVT_CHECK(fd >= 0);
	if (family == AF_INET) {
		struct sockaddr_in *sa = (void *)&ss;

		sa->sin_family = AF_INET;
		sa->sin_port = htons(port);
		SVT_CHECK(inet_pton(AF_INET, addr, &sa->sin_addr) == 1);
		l = sizeof(*sa);
	} else {
		struct sockaddr_in6 *sa = (void *)&ss;

		sa->sin6_family = AF_INET6;
		sa->sin6_port = htons(port);
		SVT_CHECK(inet_pton(AF_INET6, addr, &sa->sin6_addr) == 1);
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
		l = sizeof(*sa);
	}
	/* connections of an earlier step may linger in TIME_WAIT */
	if (type == SOCK_STREAM)
		SVT_CHECK_OK(setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)));
	if (reuseport)
		SVT_CHECK_OK(setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)));
	SVT_CHECK_OK(bind(fd, (struct sockaddr *)&ss, l));
	if (type == SOCK_STREAM)
		SVT_CHECK_OK(listen(fd, 16));
	return fd;
}

/* Everything a squatter socket got within ms: bytes (stream: of every
 * connection it accepted), datagrams counted as their bytes. */
static size_t drain(int fd, int type, int ms)
{
	uint64_t end = svt_now_ms() + (uint64_t)ms;
	size_t got = 0;
	uint8_t buf[8192];
	int conns[64], nconns = 0;

	for (;;) {
		int left = (int)(end - svt_now_ms());
		struct pollfd p = { .fd = fd, .events = POLLIN };

		if (left <= 0)
			break;
		if (poll(&p, 1, SV_MIN(left, 50)) > 0) {
			if (type == SOCK_STREAM) {
				int c = accept4(fd, NULL, NULL, SOCK_NONBLOCK);

				if (c >= 0 && nconns < 64)
					conns[nconns++] = c;
			} else {
				ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);

				got += n > 0 ? (size_t)n : 0;
			}
		}
		for (int i = 0; i < nconns; i++) {
			ssize_t n = recv(conns[i], buf, sizeof(buf), MSG_DONTWAIT);

			got += n > 0 ? (size_t)n : 0;
		}
	}
	for (int i = 0; i < nconns; i++)
		close(conns[i]);
	return got;
}

/*
 * Before the fix the device opened without hearing its peers: what then
 * happened (a second context's RC WRITE to it), for the log.
 */
static void deaf(struct ibv_context *ctx, int sq, int type, char *out, size_t cap)
{
	struct svt_dev r;
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = svt_create_cq(ctx, 4, NULL);
	struct svt_qp_init qi;
	struct ibv_wc wc;
	union ibv_gid g;
	uint8_t *mem = svt_alloc(4096);
	struct ibv_mr *mr = svt_reg_mr(pd, mem, 4096, SVT_ACCESS_ALL);

	svt_dev_open(&r);
	struct ibv_cq *rcq = svt_create_cq(r.ctx, 4, NULL);
	struct ibv_mr *rmr = svt_reg_mr(r.pd, mem, 4096, SVT_ACCESS_ALL);

	svt_qp_init_default(&qi, IBV_QPT_RC);
	struct ibv_qp *v = svt_create_qp(pd, cq, cq, &qi);
	struct ibv_qp *q = svt_create_qp(r.pd, rcq, rcq, &qi);

	SVT_CHECK_OK(ibv_query_gid(ctx, 1, 0, &g));
	svt_qp_link(v, &g, q, &r.gid, NULL);
	SVT_CHECK_OK(svt_post_send(q, 1, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, mem, 4096,
				   rmr->lkey, (uintptr_t)mem, mr->rkey, 0));
	size_t got = drain(sq, type, 3000);
	int n = ibv_poll_cq(rcq, 1, &wc);

	snprintf(out, cap, "the squatter got %zu bytes of a peer's traffic; the peer's WRITE: %s",
		 got, n > 0 ? ibv_wc_status_str(wc.status) : "no completion in 3 s");
	ibv_destroy_qp(v);
	ibv_destroy_qp(q);
	ibv_dereg_mr(mr);
	ibv_dereg_mr(rmr);
	ibv_destroy_cq(cq);
	ibv_destroy_cq(rcq);
	ibv_dealloc_pd(pd);
	svt_dev_close(&r);
	free(mem);
}

static int fails;

/* The device must not open while sq (type) is held; the log must say
 * `what`, and SOFTVERBS_PORT when `hint`. */
static void refused(const char *step, int sq, int type, const char *what, bool hint)
{
	char log[4096], why[256] = "";
	struct ibv_context *ctx = open_logged(log, sizeof(log));
	int e = errno;

	if (ctx) {
		if (sq >= 0)
			deaf(ctx, sq, type, why, sizeof(why));
		svt_log("%s: the device opened (%s)", step, why);
		ibv_close_device(ctx);
		fails++;
		return;
	}
	svt_log("%s: ibv_open_device: %s", step, strerror(e));
	SVT_CHECK_EQ(e, EADDRINUSE);
	SVT_CHECK_MSG(strstr(log, what) && strstr(log, "held by another program") &&
			      (!hint || strstr(log, "SOFTVERBS_PORT")),
		      "the log does not say %s is held%s: \"%s\"", what,
		      hint ? " (and SOFTVERBS_PORT)" : "", log);
	if (sq >= 0)
		SVT_CHECK_EQ(drain(sq, type, 200), 0);
}

static void opens(const char *step)
{
	char log[4096];
	struct ibv_context *ctx = open_logged(log, sizeof(log));

	SVT_CHECK_MSG(ctx, "%s: the device does not open with nothing squatting: %s", step,
		      strerror(errno));
	SVT_CHECK_OK(ibv_close_device(ctx));
}

/* ---- another user ---- */

struct other {
	pid_t pid;
	int ctl;    /* ours: closing it tells the child to report and end */
	int report; /* the child's report: bytes and descriptors it was given */
};

/* A child of uid NOBODY that binds (kind) names or the shared port, says
 * it is ready, takes what comes until ctl closes, then reports. */
static void other_user(struct other *o, bool shared_port, const uint16_t *ports, int nports)
{
	int ctl[2], rep[2];

	SVT_CHECK_OK(pipe2(ctl, O_CLOEXEC));
	SVT_CHECK_OK(pipe2(rep, O_CLOEXEC));
	o->pid = fork();
	SVT_CHECK(o->pid >= 0);
	if (!o->pid) {
		struct pollfd p[16];
		int np = 0, fds = 0;
		size_t bytes = 0;
		char line[64];
		struct in6_addr lo = sv_ip_from_v4((struct in_addr){ htonl(INADDR_LOOPBACK) });

		close(ctl[1]);
		close(rep[0]);
		if (setgroups(0, NULL) || setresgid(NOBODY, NOBODY, NOBODY) ||
		    setresuid(NOBODY, NOBODY, NOBODY))
			_exit(2);
		if (shared_port)
			p[np++] = (struct pollfd){ squat(AF_INET, SOCK_STREAM, "127.0.0.1", 4791, true),
						   POLLIN, 0 };
		for (int i = 0; i < nports; i++) {
			struct sockaddr_un sa;
			socklen_t sl;
			int h = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
			int r = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK, 0);

			sv_endpoint_unix_name(&sa, &sl, "handoff", &lo, ports[i]);
			if (bind(h, (struct sockaddr *)&sa, sl) || listen(h, 8))
				_exit(3);
			sv_endpoint_unix_name(&sa, &sl, "rocev2", &lo, ports[i]);
			if (bind(r, (struct sockaddr *)&sa, sl) || listen(r, 8))
				_exit(3);
			p[np++] = (struct pollfd){ h, POLLIN, 0 };
			p[np++] = (struct pollfd){ r, POLLIN, 0 };
		}
		if (write(rep[1], "r", 1) != 1)
			_exit(4);
		p[np++] = (struct pollfd){ ctl[0], POLLIN, 0 };
		for (;;) {
			if (poll(p, (nfds_t)np, -1) <= 0)
				continue;
			if (p[np - 1].revents)
				break;
			for (int i = 0; i < np - 1; i++) {
				char buf[4096], cbuf[CMSG_SPACE(sizeof(int) * 4)];
				struct iovec iov = { buf, sizeof(buf) };
				struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
						     .msg_control = cbuf,
						     .msg_controllen = sizeof(cbuf) };
				int c;
				ssize_t n;

				if (!p[i].revents)
					continue;
				c = accept(p[i].fd, NULL, NULL);
				if (c < 0)
					continue;
				usleep(100000);
				while ((n = recvmsg(c, &mh, MSG_DONTWAIT)) > 0) {
					bytes += (size_t)n;
					if (mh.msg_controllen)
						fds++;
					mh.msg_controllen = sizeof(cbuf);
				}
				close(c);
			}
		}
		snprintf(line, sizeof(line), "%zu %d\n", bytes, fds);
		if (write(rep[1], line, strlen(line)) < 0)
			_exit(5);
		_exit(0);
	}
	close(ctl[0]);
	close(rep[1]);
	o->ctl = ctl[1];
	o->report = rep[0];
	char c;

	SVT_CHECK_MSG(read(o->report, &c, 1) == 1, "the other user's process did not start");
}

/* End the child; what it was given: bytes, and descriptors in *fds. */
static size_t other_end(struct other *o, int *fds)
{
	char line[64] = "";
	size_t bytes = 0;
	int st;
	ssize_t n;

	close(o->ctl);
	n = read(o->report, line, sizeof(line) - 1);
	line[n > 0 ? n : 0] = 0;
	close(o->report);
	SVT_CHECK_EQ(waitpid(o->pid, &st, 0), o->pid);
	SVT_CHECK_MSG(WIFEXITED(st) && !WEXITSTATUS(st), "the other user's process: status 0x%x",
		      st);
	*fds = 0;
	SVT_CHECK_EQ(sscanf(line, "%zu %d", &bytes, fds), 2);
	return bytes;
}

/* A HELLO for the endpoint to_port, to the shared port (a stream). */
static int hello_to(uint16_t to_port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
				  .sin_port = htons(4791) };
	struct in6_addr lo = sv_ip_from_v4(sa.sin_addr);
	struct sv_hello h = { .magic = htonl(SV_WIRE_MAGIC), .version = htons(SV_WIRE_VERSION),
			      .to_port = htons(to_port) };
	union ibv_gid g;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	sv_gid_encode(&g, &lo, 17000);
	memcpy(h.gid, g.raw, 16);
	SVT_CHECK(fd >= 0);
	SVT_CHECK_OK(connect(fd, (struct sockaddr *)&sa, sizeof(sa)));
	SVT_CHECK(svt_wire_send(fd, &h, sizeof(h)));
	return fd;
}

int main(void)
{
	char log[4096];
	int sq, sq6;

	svt_watchdog(60);
	if (!svt_private_netns())
		svt_skip("needs root: a network namespace of its own");
	signal(SIGPIPE, SIG_IGN);
	setenv("SOFTVERBS_TRANSPORT", "tcp", 1);
	setenv("SOFTVERBS_PORT", "4791", 1); /* the default, whatever the harness gave */

	/* 1. the shared TCP port, bound by a socket without SO_REUSEPORT */
	sq = squat(AF_INET, SOCK_STREAM, "127.0.0.1", 4791, false);
	refused("1. TCP 127.0.0.1:4791 held (no SO_REUSEPORT)", sq, SOCK_STREAM, "TCP port 4791",
		true);
	close(sq);
	opens("1. nothing on TCP 4791");

	/* 2. the same port held by another user, SO_REUSEPORT or not */
	struct other o;
	int fds;

	other_user(&o, true, NULL, 0);
	refused("2. TCP 127.0.0.1:4791 held by uid 65534 with SO_REUSEPORT", -1, SOCK_STREAM,
		"TCP port 4791", true);
	SVT_CHECK_EQ(other_end(&o, &fds), 0);

	/* 3. UDP 4791 for rocev2, IPv4 and IPv6 */
	setenv("SOFTVERBS_TRANSPORT", "rocev2", 1);
	sq = squat(AF_INET, SOCK_DGRAM, "127.0.0.1", 4791, false);
	refused("3. UDP 127.0.0.1:4791 held", sq, SOCK_DGRAM, "UDP port 4791", false);
	close(sq);
	sq6 = squat(AF_INET6, SOCK_DGRAM, "::1", 4791, false);
	refused("3. UDP [::1]:4791 held", sq6, SOCK_DGRAM, "UDP port 4791", false);
	close(sq6);
	opens("3. nothing on UDP 4791");

	/* 4. another user's names of blocks 1 and 3 */
	uint16_t ports[2] = { sv_qpn_block_port(1), sv_qpn_block_port(3) };
	uint32_t qpn3 = (3u << SV_QPN_BLOCK_SHIFT) | 5;

	other_user(&o, false, ports, 2);
	for (int tcp = 1; tcp >= 0; tcp--) {
		struct ibv_context *ctx;
		struct ibv_pd *pd;
		struct ibv_cq *cq;
		struct svt_qp_init qi;
		struct ibv_qp *qp;

		setenv("SOFTVERBS_TRANSPORT", tcp ? "tcp" : "rocev2", 1);
		ctx = open_logged(log, sizeof(log));
		SVT_CHECK_MSG(ctx, "4. the device does not open: %s", strerror(errno));
		pd = ibv_alloc_pd(ctx);
		cq = svt_create_cq(ctx, 4, NULL);
		svt_qp_init_default(&qi, IBV_QPT_RC);
		qp = svt_create_qp(pd, cq, cq, &qi);
		svt_log("4. %s: the device opened at block %u (block 1's names are uid 65534's)",
			tcp ? "tcp" : "rocev2", qp->qp_num >> SV_QPN_BLOCK_SHIFT);
		if (qp->qp_num >> SV_QPN_BLOCK_SHIFT == 1)
			fails++;
		if (tcp) {
			/* a connection for block 3's endpoint, on the shared port */
			int fd = hello_to(ports[1]);
			struct pollfd p = { .fd = fd, .events = POLLIN };
			uint8_t b;

			/* closed (nobody of ours has that port), not answered */
			if (poll(&p, 1, 2000) != 1 || recv(fd, &b, 1, MSG_DONTWAIT) > 0) {
				svt_log("4. the connection for block 3 was not closed");
				fails++;
			}
			close(fd);
		} else {
			/* a datagram for a QPN of block 3, to UDP 4791 */
			struct sockaddr_in to = { .sin_family = AF_INET,
						  .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
						  .sin_port = htons(4791) };
			uint8_t d[12 + 64 + 4] = { 0 };
			int u = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

			svt_wire_bth(d, SV_OP_RC | SV_OP_WRITE_ONLY, qpn3, 1);
			SVT_CHECK_EQ(sendto(u, d, sizeof(d), 0, (struct sockaddr *)&to,
					    sizeof(to)),
				     (ssize_t)sizeof(d));
			close(u);
			svt_sleep_ms(300);
		}
		SVT_CHECK_OK(ibv_destroy_qp(qp));
		SVT_CHECK_OK(ibv_destroy_cq(cq));
		SVT_CHECK_OK(ibv_dealloc_pd(pd));
		SVT_CHECK_OK(ibv_close_device(ctx));
	}
	size_t got = other_end(&o, &fds);

	svt_log("4. uid 65534's names were given %zu bytes, %d descriptors", got, fds);
	if (got || fds)
		fails++;
	svt_private_netns_done();
	SVT_CHECK_MSG(!fails, "%d of the steps above let a squatter in, or ran deaf", fails);
	return 0;
}
