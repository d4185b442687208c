/*
 * A same-user process that connects to a device's shared-memory socket and
 * hands it ring memory it could shrink later (which would make the
 * device's next access to the rings SIGBUS): refused.  The ring memory
 * must come sealed against shrinking and growing, at the rings' size
 * (src/transport/shm.c, sealed_at_size):
 *   - an unsealed memfd of the right size: the device closes the socket;
 *   - a sealed one of the wrong size: closed;
 *   - a sealed one of the right size (the control, so that this test
 *     cannot pass by getting the setup message wrong): kept;
 * and a peer that then scribbles on the ring's counters (a tail beyond
 * what a ring holds, a record longer than what was published) is cut off
 * at its next doorbell, without a crash.  Eight peers that connect and
 * never send their setup do not hold up the device (each used to stall its
 * engine for a second), and through all of it the device still moves data
 * between two of its QPs over shm.
 */
#include "sv_test.h"
#include "transport/transport.h"
#include "transport/registry.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <stdlib.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* What shm.c's connector sends (struct shm_setup, SHM_MAGIC, SHM_VERSION,
 * SHM_MAP_LEN there). */
#define SETUP_MAGIC 0x5356534du
#define SETUP_VERSION 2u
#define MAP_LEN (4096u + 2u * (2u << 20))

struct setup {
	uint32_t magic, version;
	uint64_t map_len;
};

/* Where shm.c's struct shm_area keeps the connector's ring (tail first)
 * and that ring's data. */
#define RING0_TAIL 64
#define RING0_DATA 4096

static int shm_socket(uint16_t port)
{
	struct in_addr lo = { htonl(INADDR_LOOPBACK) };
	struct sockaddr_un sa;
	socklen_t sl;
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);

	SVT_CHECK(fd >= 0);
	sv_endpoint_unix_name(&sa, &sl, "shm", lo, port);
	SVT_CHECK_OK(connect(fd, (struct sockaddr *)&sa, sl));
	return fd;
}

/* Did the device close fd within ms? */
static bool closed_within(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	uint64_t end = svt_now_ms() + (uint64_t)ms;
	char b;

	while (svt_now_ms() < end) {
		if (poll(&p, 1, 50) == 1 && recv(fd, &b, 1, MSG_DONTWAIT) == 0)
			return true;
	}
	return false;
}

/* Ring memory as a connector makes it: sized, and sealed if asked. */
static int ring_memory(size_t len, bool seal)
{
	int mfd = memfd_create("svt-shm-peer", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	SVT_CHECK(mfd >= 0);
	SVT_CHECK_OK(ftruncate(mfd, (off_t)len));
	/* a valid-looking area: the magic where the device looks first */
	uint32_t *a = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);

	SVT_CHECK(a != MAP_FAILED);
	a[0] = SETUP_MAGIC;
	a[1] = SETUP_VERSION;
	munmap(a, len);
	if (seal)
		SVT_CHECK_OK(fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL));
	return mfd;
}

/* Connect to the endpoint's shm socket and hand it mfd: the socket. */
static int offer_keep(uint16_t port, int mfd)
{
	struct setup su = { SETUP_MAGIC, SETUP_VERSION, MAP_LEN };
	char cbuf[CMSG_SPACE(sizeof(int))] = { 0 };
	struct iovec iov = { &su, sizeof(su) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			     .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
	int fd = shm_socket(port);

	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &mfd, sizeof(int));
	SVT_CHECK_EQ(sendmsg(fd, &mh, MSG_NOSIGNAL), (ssize_t)sizeof(su));
	return fd;
}

/* The same; true if the device is still connected 300 ms later. */
static bool offer(uint16_t port, int mfd)
{
	int fd = offer_keep(port, mfd);
	bool open = !closed_within(fd, 300);

	close(fd);
	return open;
}

/*
 * Hand the device good ring memory, then write the connector ring's tail
 * (and the first record header, when rec is not 0) as a broken peer would,
 * and ring: the device must close the connection.
 */
static void scribble(uint16_t port, uint64_t tail, uint64_t rec, const char *what)
{
	int mfd = ring_memory(MAP_LEN, true);
	uint8_t *m = mmap(NULL, MAP_LEN, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
	int fd = offer_keep(port, mfd);
	char bell = 0;

	SVT_CHECK(m != MAP_FAILED);
	SVT_CHECK_MSG(!closed_within(fd, 200), "good ring memory refused (%s)", what);
	memcpy(m + RING0_DATA, &rec, 8);
	__atomic_store_n((uint64_t *)(m + RING0_TAIL), tail, __ATOMIC_SEQ_CST);
	SVT_CHECK_EQ(send(fd, &bell, 1, MSG_NOSIGNAL), 1);
	SVT_CHECK_MSG(closed_within(fd, 3000), "a ring with %s was read on", what);
	svt_log("ok: a ring with %s: connection closed", what);
	close(fd);
	munmap(m, MAP_LEN);
	close(mfd);
}

int main(void)
{
	struct svt_dev d;
	struct svt_qp_init qi;
	struct ibv_wc wc[2];
	int mfd;

	svt_watchdog(60);
	setenv("SOFTVERBS_TRANSPORT", "shm", 1);
	svt_dev_open(&d);
	struct ibv_cq *cq = svt_create_cq(d.ctx, 16, NULL);

	svt_qp_init_default(&qi, IBV_QPT_RC);
	struct ibv_qp *a = svt_create_qp(d.pd, cq, cq, &qi);
	struct ibv_qp *b = svt_create_qp(d.pd, cq, cq, &qi);
	uint16_t port = sv_qpn_port(a->qp_num);

	mfd = ring_memory(MAP_LEN, false);
	SVT_CHECK_MSG(!offer(port, mfd), "unsealed ring memory was accepted");
	close(mfd);
	mfd = ring_memory(4096, true);
	SVT_CHECK_MSG(!offer(port, mfd), "ring memory of the wrong size was accepted");
	close(mfd);
	mfd = ring_memory(MAP_LEN, true);
	SVT_CHECK_MSG(offer(port, mfd), "sealed ring memory of the right size was refused: "
					"does this test's setup message match shm.c's?");
	close(mfd);
	scribble(port, (4u << 20) + 8, 0, "a tail beyond a ring");
	scribble(port, 12, 0, "a tail inside a record header");
	scribble(port, 16, 1u << 20, "a record longer than what was published");
	scribble(port, 16, (1ull << 40) | 8, "a record header with unknown flags");

	/* peers that connect and never send their setup */
	int silent[8];

	for (int i = 0; i < 8; i++)
		silent[i] = shm_socket(port);
	svt_sleep_ms(50);

	/* the device still moves data over shm, without waiting on them */
	uint8_t *buf = svt_alloc(8192);
	struct ibv_mr *mr = svt_reg_mr(d.pd, buf, 8192, SVT_ACCESS_ALL);

	svt_qp_link(a, &d.gid, b, &d.gid, NULL);
	svt_fill(buf, 4096, 4);
	SVT_CHECK_OK(svt_post_recv(b, 1, buf + 4096, 4096, mr->lkey));
	uint64_t t0 = svt_now_ms();

	SVT_CHECK_OK(svt_post_send(a, 2, IBV_WR_SEND, IBV_SEND_SIGNALED, buf, 4096, mr->lkey, 0, 0,
				   0));
	/* 8 s if each silent peer held the engine for its second */
	svt_poll_ok(cq, 2, wc, 3000);
	SVT_CHECK_FILL(buf + 4096, 4096, 4);
	svt_log("ok: 8 silent connectors, a SEND completed in %llu ms",
		(unsigned long long)(svt_now_ms() - t0));
	for (int i = 0; i < 8; i++)
		close(silent[i]);
	SVT_CHECK_OK(ibv_destroy_qp(a));
	SVT_CHECK_OK(ibv_destroy_qp(b));
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	SVT_CHECK_OK(ibv_destroy_cq(cq));
	svt_dev_close(&d);
	free(buf);
	return 0;
}
