/*
 * cm_auth: an rdma_cm listener hears only peers that prove the secret.
 * A client written by hand connects to the listener's rdma_cm port and
 *   - sends a REQ at once, without the handshake;
 *   - says HELLO, then sends an AUTH that proves nothing, then a REQ;
 *   - says HELLO and stays silent;
 * each time the listener drops the connection (or, for the silent one,
 * simply waits) and no CONNECT_REQUEST reaches the application.  The
 * listener's own HELLO comes first and carries a fresh nonce each time.
 * Then a real rdma_connect through the same listener is accepted, so the
 * handshake between two softverbs ends works.
 * Ports 20570-20571.
 */
#include "cm_test.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#define PORT 20570

/* The CM frame (src/rdmacm/protocol.c, docs/ARCHITECTURE.md §11.3). */
struct frame {
	uint32_t magic;
	uint8_t version, type, pdata_len, mtu;
	uint8_t mid[48];
	uint8_t pdata[224];
} __attribute__((packed));
_Static_assert(sizeof(struct frame) == 280, "CM frame layout");

static int raw_connect(void)
{
	struct sockaddr_in sa = cmt_sin("127.0.0.1", PORT);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	SVT_CHECK(fd >= 0);
	SVT_CHECK_OK(connect(fd, (struct sockaddr *)&sa, sizeof(sa)));
	return fd;
}

/* The next frame within ms, or false when the connection ended (or nothing came). */
static bool read_frame(int fd, struct frame *f, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	size_t got = 0;

	while (got < sizeof(*f)) {
		ssize_t n;

		if (poll(&p, 1, ms) != 1)
			return false;
		n = recv(fd, (uint8_t *)f + got, sizeof(*f) - got, 0);
		if (n <= 0)
			return false;
		got += (size_t)n;
	}
	return true;
}

static void send_frame(int fd, char type, const void *pdata, uint8_t len)
{
	struct frame f = { .magic = htonl(0x5356434du), .version = 2, .type = (uint8_t)type };

	f.pdata_len = len;
	memcpy(f.pdata, pdata, len);
	(void)send(fd, &f, sizeof(f), MSG_NOSIGNAL); /* it may be closed already */
}

/* The listener's HELLO, the first thing it says; its nonce. */
static void expect_hello(int fd, uint8_t nonce[16])
{
	struct frame f;

	SVT_CHECK_MSG(read_frame(fd, &f, 5000), "no HELLO from the listener");
	SVT_CHECK_EQ(f.type, 'H');
	SVT_CHECK_EQ(f.pdata_len, 16);
	memcpy(nonce, f.pdata, 16);
}

/* The listener closes the connection (nothing else comes). */
static void expect_closed(int fd)
{
	struct frame f;

	SVT_CHECK_MSG(!read_frame(fd, &f, 5000), "the listener answered a peer that proved nothing");
	close(fd);
}

int main(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	uint8_t n1[16], n2[16], junk[36] = { 0x53, 0x56, 0x41, 0x55 };
	struct rdma_cm_event *ev;

	svt_watchdog(60);
	SVT_CHECK_PTR(ch);
	struct rdma_cm_id *ls = cmt_listen(ch, RDMA_PS_TCP, "127.0.0.1", PORT);

	/* a REQ before any handshake */
	int fd = raw_connect();

	expect_hello(fd, n1);
	send_frame(fd, 'Q', "hello?", 6);
	expect_closed(fd);

	/* a HELLO, an AUTH that proves nothing, a REQ */
	fd = raw_connect();
	expect_hello(fd, n2);
	SVT_CHECK(memcmp(n1, n2, 16) != 0); /* a fresh nonce each time */
	send_frame(fd, 'H', n1, 16);
	struct frame f;

	SVT_CHECK_MSG(read_frame(fd, &f, 5000) && f.type == 'A', "no AUTH from the listener");
	send_frame(fd, 'A', junk, sizeof(junk));
	send_frame(fd, 'Q', "hello?", 6);
	expect_closed(fd);

	/* a HELLO, then silence: nothing happens */
	int quiet = raw_connect();

	expect_hello(quiet, n1);
	send_frame(quiet, 'H', n2, 16);
	cmt_expect_none(ch, 300);

	/* a real client gets through */
	struct rdma_event_channel *cch = rdma_create_event_channel();
	struct rdma_cm_id *c;

	SVT_CHECK_PTR(cch);
	SVT_CHECK_CM(rdma_create_id(cch, &c, NULL, RDMA_PS_TCP));
	cmt_resolve(c, cch, "127.0.0.1", PORT);
	SVT_CHECK_EQ(cmt_create_qp(c, IBV_QPT_RC, 4), IBV_QPS_INIT);
	struct rdma_conn_param p = { .responder_resources = 1, .initiator_depth = 1,
				     .retry_count = 7, .rnr_retry_count = 7 };

	SVT_CHECK_CM(rdma_connect(c, &p));
	ev = cmt_expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
	struct rdma_cm_id *child = ev->id;

	SVT_CHECK_CM(rdma_ack_cm_event(ev));
	SVT_CHECK_EQ(cmt_create_qp(child, IBV_QPT_RC, 4), IBV_QPS_INIT);
	SVT_CHECK_CM(rdma_accept(child, &p));
	ev = cmt_expect(cch, RDMA_CM_EVENT_ESTABLISHED);
	SVT_CHECK_CM(rdma_ack_cm_event(ev));
	ev = cmt_expect(ch, RDMA_CM_EVENT_ESTABLISHED);
	SVT_CHECK_CM(rdma_ack_cm_event(ev));
	svt_log("raw peers refused, a real client accepted");

	close(quiet);
	SVT_CHECK_CM(rdma_disconnect(c));
	ev = cmt_expect(cch, RDMA_CM_EVENT_DISCONNECTED);
	SVT_CHECK_CM(rdma_ack_cm_event(ev));
	ev = cmt_expect(ch, RDMA_CM_EVENT_DISCONNECTED);
	SVT_CHECK_CM(rdma_ack_cm_event(ev));
	rdma_destroy_qp(child);
	SVT_CHECK_CM(rdma_destroy_id(child));
	rdma_destroy_qp(c);
	SVT_CHECK_CM(rdma_destroy_id(c));
	SVT_CHECK_CM(rdma_destroy_id(ls));
	rdma_destroy_event_channel(cch);
	rdma_destroy_event_channel(ch);
	return 0;
}
