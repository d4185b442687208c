/* The shm connector played by hand; see shm_connector.h. */
#include "shm_connector.h"
#include "sv_test.h"
#include "transport/transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* what shm.c's connector sends first (struct shm_setup) */
struct setup {
	uint32_t magic, version;
	uint64_t map_len;
};

int svt_shm_socket(uint16_t port)
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
bool svt_shm_closed_within(int fd, int ms)
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
int svt_shm_memory(size_t len, bool seal)
{
	int mfd = memfd_create("svt-shm-peer", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	SVT_CHECK(mfd >= 0);
	SVT_CHECK_OK(ftruncate(mfd, (off_t)len));
	/* a valid-looking area: the magic where the device looks first */
	uint32_t *a = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);

	SVT_CHECK(a != MAP_FAILED);
	a[0] = SVT_SHM_MAGIC;
	a[1] = SVT_SHM_VERSION;
	munmap(a, len);
	if (seal)
		SVT_CHECK_OK(fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL));
	return mfd;
}

/* Connect to the endpoint's shm socket and hand it mfd: the socket. */
int svt_shm_offer(uint16_t port, int mfd)
{
	struct setup su = { SVT_SHM_MAGIC, SVT_SHM_VERSION, SVT_SHM_MAP_LEN };
	char cbuf[CMSG_SPACE(sizeof(int))] = { 0 };
	struct iovec iov = { &su, sizeof(su) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			     .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
	int fd = svt_shm_socket(port);

	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &mfd, sizeof(int));
	SVT_CHECK_EQ(sendmsg(fd, &mh, MSG_NOSIGNAL), (ssize_t)sizeof(su));
	return fd;
}

