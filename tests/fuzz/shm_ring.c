/*
 * libFuzzer harness: the shm ring reader.  Each input is what a same-user
 * peer puts in the ring it hands a live device (in this process): the
 * harness connects to the device's shm socket as a connector does, with
 * sealed ring memory of the right size, writes the input's bytes into the
 * connector's ring (records, headers, payloads, whatever they are), sets
 * the ring's tail (where the input says, or just past its bytes), and
 * rings the doorbell.  The device must take what is there or close the
 * connection: nothing may crash, touch memory outside the rings, or hang
 * (src/transport/shm.c checks every counter it reads).  A hang is told from
 * a busy machine by HANG_MS, not by a second, which a device thread
 * waiting for a core under load (CI runs this beside other tests of the
 * AddressSanitizer build) could take without anything being wrong.
 *
 * Input: byte 0, bit 0: the tail is the next 4 bytes (little endian) rather
 * than the length of the bytes after the header, rounded up to 8; the rest
 * goes into the ring from its start.
 */
#include "sv_test.h"
#include "transport/registry.h"
#include "transport/transport.h"
#include "shm_connector.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* Neither taken nor closed by then: a hang.  Below the -timeout=30 that
 * tests/fuzz/CMakeLists.txt gives libFuzzer, so that the message says
 * which. */
#define HANG_MS 20000

static struct svt_dev d;
static struct ibv_qp *qp;
static uint16_t port;

static void setup_device(void)
{
	struct svt_qp_init qi;

	setenv("SOFTVERBS_TRANSPORT", "shm", 1);
	setenv("SOFTVERBS_LOG", "error", 0);
	svt_dev_open(&d);
	struct ibv_cq *cq = svt_create_cq(d.ctx, 16, NULL);

	svt_qp_init_default(&qi, IBV_QPT_RC);
	qp = svt_create_qp(d.pd, cq, cq, &qi);
	port = sv_qpn_port(qp->qp_num);
}

/* Sealed ring memory, mapped here, handed to the device over a new socket. */
static int connect_with(int *mfd_out, uint8_t **map_out)
{
	int mfd = svt_shm_memory(SVT_SHM_MAP_LEN, true);
	uint8_t *m = mmap(NULL, SVT_SHM_MAP_LEN, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);

	SVT_CHECK(m != MAP_FAILED);
	*mfd_out = mfd;
	*map_out = m;
	return svt_shm_offer(port, mfd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bool ready;
	uint64_t tail, head;
	uint8_t *m;
	int mfd, fd;
	char bell = 0;
	bool done = false;

	if (!ready) {
		setup_device();
		ready = true;
	}
	if (size < 5 || size - 5 > SVT_SHM_RING_BYTES)
		return -1;
	if (data[0] & 1) {
		uint32_t t;

		memcpy(&t, data + 1, 4);
		tail = t;
	} else {
		tail = (size - 5 + 7) & ~7ull;
	}
	fd = connect_with(&mfd, &m);
	memcpy(m + SVT_SHM_RING0_DATA, data + 5, size - 5);
	__atomic_store_n((uint64_t *)(m + SVT_SHM_RING0_TAIL), tail, __ATOMIC_SEQ_CST);
	if (send(fd, &bell, 1, MSG_NOSIGNAL) != 1) {
		/* closed already: a device thread that polls the rings read them
		 * as soon as the tail moved, without waiting for the doorbell,
		 * and refused what it found */
		done = true;
	}
	/* taken, or the connection closed */
	for (uint64_t end = svt_now_ms() + HANG_MS; !done && svt_now_ms() < end;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		char b;

		head = __atomic_load_n((uint64_t *)(m + SVT_SHM_RING0_HEAD), __ATOMIC_SEQ_CST);
		if (head == tail)
			break;
		if (poll(&p, 1, 1) == 1 && recv(fd, &b, 1, MSG_DONTWAIT) == 0)
			done = true;
	}
	head = __atomic_load_n((uint64_t *)(m + SVT_SHM_RING0_HEAD), __ATOMIC_SEQ_CST);
	SVT_CHECK_MSG(done || head == tail,
		      "the device neither took the ring (head %llu, tail %llu) nor closed it "
		      "in %d ms",
		      (unsigned long long)head, (unsigned long long)tail, HANG_MS);
	close(fd);
	munmap(m, SVT_SHM_MAP_LEN);
	close(mfd);
	return 0;
}
