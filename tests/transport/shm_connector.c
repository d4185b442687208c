/* The shm connector played by hand; see shm_connector.h. */
#include "shm_connector.h"
#include "wire_peer.h"
#include "sv_test.h"
#include "transport/transport.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
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
	struct in6_addr lo = sv_ip_from_v4((struct in_addr){ htonl(INADDR_LOOPBACK) });
	struct sockaddr_un sa;
	socklen_t sl;
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);

	SVT_CHECK(fd >= 0);
	sv_endpoint_unix_name(&sa, &sl, "shm", &lo, port);
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


/* The rings of struct shm_area, shm.c: one direction's counters. */
struct ring_at {
	size_t tail, tail_logical, room, head, head_logical, bell;
	size_t data;
};
static const struct ring_at ring_at[2] = {
	{ 64, 72, 80, 128, 136, 192, 4096 },
	{ 256, 264, 272, 320, 328, 384, 4096 + SVT_SHM_RING_BYTES },
};

struct bridge {
	int sp;      /* our end of the socket pair */
	int us;      /* the device's shm socket: doorbells and the end */
	int mfd;
	uint8_t *m;
	uint64_t wpos, wlog; /* producer of ring 0 */
	uint64_t rpos, rlog, rec_left; /* consumer of ring 1 */
};

static _Atomic uint64_t *ctr(struct bridge *b, size_t field_off)
{
	return (_Atomic uint64_t *)(b->m + field_off);
}

static void bell(struct bridge *b)
{
	char c = 0;

	(void)!send(b->us, &c, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
}

/* Ring bytes the bridge takes at most at once: an odd size, so that, like
 * shm.c's own reader when its buffer fills, it releases the ring in the
 * middle of records, at heads that are not multiples of 8. */
#define BRIDGE_PIECE 1001u

/* Device to us: the records in ring 1, onto the socket pair. */
static bool bridge_in(struct bridge *b)
{
	const struct ring_at *r = &ring_at[1];
	uint64_t tail = atomic_load(ctr(b, r->tail)), start = b->rpos;

	while (b->rpos != tail) {
		if (!b->rec_left) {
			uint64_t h;

			memcpy(&h, b->m + r->data + (b->rpos & (SVT_SHM_RING_BYTES - 1)), 8);
			b->rpos += 8;
			b->rec_left = h & 0xffffffffull;
			SVT_CHECK_MSG(!(h >> 32), "the device wrote an indirect record");
			continue;
		}
		size_t o = (size_t)(b->rpos & (SVT_SHM_RING_BYTES - 1));
		size_t l = (size_t)(b->rec_left < SVT_SHM_RING_BYTES - o ? b->rec_left
									  : SVT_SHM_RING_BYTES - o);

		l = l < BRIDGE_PIECE ? l : BRIDGE_PIECE;
		if (!svt_send_all(b->sp, b->m + r->data + o, l))
			return false;
		b->rpos += l;
		b->rec_left -= l;
		b->rlog += l;
		if (!b->rec_left)
			b->rpos = (b->rpos + 7) & ~7ull;
		atomic_store(ctr(b, r->head), b->rpos);
		atomic_store(ctr(b, r->head_logical), b->rlog);
	}
	if (b->rpos != start && atomic_exchange((_Atomic uint32_t *)(b->m + r->room), 0))
		bell(b);
	atomic_store((_Atomic uint32_t *)(b->m + r->bell), 1); /* ring us next time */
	return true;
}

/* Us to the device: what the socket pair holds, as one record in ring 0. */
static bool bridge_out(struct bridge *b)
{
	const struct ring_at *r = &ring_at[0];
	uint64_t head = atomic_load(ctr(b, r->head));
	uint64_t space = SVT_SHM_RING_BYTES - (b->wpos - head);
	static uint8_t buf[64 << 10];
	ssize_t n;

	if (space < 8 + 8)
		return true; /* full: the device rings when it has made room */
	n = recv(b->sp, buf, (size_t)(space - 8 < sizeof(buf) ? space - 8 : sizeof(buf)),
		 MSG_DONTWAIT);
	if (n == 0)
		return false;
	if (n < 0)
		return errno == EAGAIN || errno == EINTR;
	uint64_t h = (uint64_t)n, at = b->wpos + 8;

	for (size_t done = 0; done < (size_t)n;) {
		size_t o = (size_t)(at & (SVT_SHM_RING_BYTES - 1));
		size_t l = (size_t)n - done < SVT_SHM_RING_BYTES - o ? (size_t)n - done
								      : SVT_SHM_RING_BYTES - o;

		memcpy(b->m + r->data + o, buf + done, l);
		done += l;
		at += l;
	}
	memcpy(b->m + r->data + (b->wpos & (SVT_SHM_RING_BYTES - 1)), &h, 8);
	b->wpos += 8 + (((uint64_t)n + 7) & ~7ull);
	b->wlog += (uint64_t)n;
	atomic_store(ctr(b, r->tail), b->wpos);
	atomic_store(ctr(b, r->tail_logical), b->wlog);
	bell(b);
	return true;
}

static void *bridge_main(void *arg)
{
	struct bridge *b = arg;

	for (;;) {
		struct pollfd p[2] = { { .fd = b->sp, .events = POLLIN }, { .fd = b->us, .events = POLLIN } };
		char sink[64];

		poll(p, 2, 2);
		if (p[1].revents) {
			ssize_t n = recv(b->us, sink, sizeof(sink), MSG_DONTWAIT);

			if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
				bridge_in(b); /* what it wrote before it closed */
				break;
			}
		}
		if (!bridge_in(b) || !bridge_out(b))
			break;
	}
	close(b->sp);
	close(b->us);
	munmap(b->m, SVT_SHM_MAP_LEN);
	close(b->mfd);
	free(b);
	return NULL;
}

int svt_shm_stream(uint16_t port)
{
	struct bridge *b = calloc(1, sizeof(*b));
	pthread_t t;
	int sv[2];

	SVT_CHECK_PTR(b);
	SVT_CHECK_OK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
	b->sp = sv[1];
	b->mfd = svt_shm_memory(SVT_SHM_MAP_LEN, true);
	b->m = mmap(NULL, SVT_SHM_MAP_LEN, PROT_READ | PROT_WRITE, MAP_SHARED, b->mfd, 0);
	SVT_CHECK(b->m != MAP_FAILED);
	b->us = svt_shm_offer(port, b->mfd);
	SVT_CHECK_OK(pthread_create(&t, NULL, bridge_main, b));
	SVT_CHECK_OK(pthread_detach(t));
	return sv[0];
}
