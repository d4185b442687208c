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
 * and the device still moves data between two of its QPs over shm.
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

/* Connect to the endpoint's shm socket and hand it mfd; true if the device
 * is still connected 300 ms later. */
static bool offer(uint16_t port, int mfd)
{
	struct setup su = { SETUP_MAGIC, SETUP_VERSION, MAP_LEN };
	char cbuf[CMSG_SPACE(sizeof(int))] = { 0 };
	struct iovec iov = { &su, sizeof(su) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			     .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
	struct in_addr lo = { htonl(INADDR_LOOPBACK) };
	struct sockaddr_un sa;
	socklen_t sl;
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	char b;

	SVT_CHECK(fd >= 0);
	sv_endpoint_unix_name(&sa, &sl, "shm", lo, port);
	SVT_CHECK_OK(connect(fd, (struct sockaddr *)&sa, sl));
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &mfd, sizeof(int));
	SVT_CHECK_EQ(sendmsg(fd, &mh, MSG_NOSIGNAL), (ssize_t)sizeof(su));
	struct pollfd p = { .fd = fd, .events = POLLIN };
	bool open = poll(&p, 1, 300) == 0 || recv(fd, &b, 1, MSG_DONTWAIT) > 0;

	close(fd);
	return open;
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

	/* the device still moves data over shm */
	uint8_t *buf = svt_alloc(8192);
	struct ibv_mr *mr = svt_reg_mr(d.pd, buf, 8192, SVT_ACCESS_ALL);

	svt_qp_link(a, &d.gid, b, &d.gid, NULL);
	svt_fill(buf, 4096, 4);
	SVT_CHECK_OK(svt_post_recv(b, 1, buf + 4096, 4096, mr->lkey));
	SVT_CHECK_OK(svt_post_send(a, 2, IBV_WR_SEND, IBV_SEND_SIGNALED, buf, 4096, mr->lkey, 0, 0,
				   0));
	svt_poll_ok(cq, 2, wc, 10000);
	SVT_CHECK_FILL(buf + 4096, 4096, 4);
	SVT_CHECK_OK(ibv_destroy_qp(a));
	SVT_CHECK_OK(ibv_destroy_qp(b));
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	SVT_CHECK_OK(ibv_destroy_cq(cq));
	svt_dev_close(&d);
	free(buf);
	return 0;
}
