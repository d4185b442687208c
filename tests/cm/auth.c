/*
 * cm_auth: an rdma_cm listener hears only peers that prove the secret, and
 * gives those that do not nothing keyed to test guesses of it against
 * (src/rdmacm/protocol.c, docs/SECURITY.md).  A client written by hand
 * connects to the listener's rdma_cm port and
 *   - sends a REQ at once, without the handshake;
 *   - says HELLO with a share of the PAKE that is no group element;
 *   - says HELLO (a valid share), gets the listener's HELLO and nothing
 *     else (no AUTH: the active end proves itself first), then sends an AUTH
 *     that proves nothing, then a REQ;
 *   - says HELLO and stays silent;
 * each time the listener drops the connection, having said nothing (or
 * only its HELLO; for the silent one, it simply waits), and no
 * CONNECT_REQUEST reaches the application.  The listener's HELLO carries a
 * fresh nonce and share each time.  Then a real rdma_connect through the
 * same listener is accepted, so the handshake between two softverbs ends
 * works.
 * Ports 20570-20571.
 */
#include "cm_test.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sodium.h>
#include <sys/socket.h>
#include <unistd.h>

#define PORT 20570
#define HELLO 48 /* a HELLO's private data: a nonce, a share of the PAKE */

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
	struct frame f = { .magic = htonl(0x5356434du), .version = 3, .type = (uint8_t)type };

	f.pdata_len = len;
	memcpy(f.pdata, pdata, len);
	(void)send(fd, &f, sizeof(f), MSG_NOSIGNAL); /* it may be closed already */
}

/* A HELLO of ours: a fresh nonce and a share (a random group element: what
 * a guesser sends, for a generator it made from its guess). */
static void say_hello(int fd, uint8_t hello[HELLO])
{
	randombytes_buf(hello, 16);
	crypto_core_ristretto255_random(hello + 16);
	send_frame(fd, 'H', hello, HELLO);
}

/* The listener's HELLO, the answer to ours: a nonce and a valid share. */
static void expect_hello(int fd, uint8_t hello[HELLO])
{
	struct frame f;

	SVT_CHECK_MSG(read_frame(fd, &f, 5000), "no HELLO from the listener");
	SVT_CHECK_EQ(f.type, 'H');
	SVT_CHECK_EQ(f.pdata_len, HELLO);
	memcpy(hello, f.pdata, HELLO);
	SVT_CHECK(crypto_core_ristretto255_is_valid_point(hello + 16));
}

/* Nothing more comes within ms, and the connection stays open. */
static void expect_quiet(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	SVT_CHECK_MSG(poll(&p, 1, ms) == 0, "the listener said more to a peer that proved nothing");
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
	uint8_t mine[HELLO], h1[HELLO], h2[HELLO], junk[36] = { 0x53, 0x56, 0x41, 0x55 };
	struct rdma_cm_event *ev;

	svt_watchdog(60);
	SVT_CHECK_PTR(ch);
	SVT_CHECK(sodium_init() >= 0);
	struct rdma_cm_id *ls = cmt_listen(ch, RDMA_PS_TCP, "127.0.0.1", PORT);

	/* a REQ before any handshake: the listener speaks only after a HELLO */
	int fd = raw_connect();

	send_frame(fd, 'Q', "hello?", 6);
	expect_closed(fd);

	/* a HELLO whose share is no group element: not answered */
	fd = raw_connect();
	randombytes_buf(mine, 16);
	memset(mine + 16, 0xff, 32);
	send_frame(fd, 'H', mine, HELLO);
	expect_closed(fd);

	/* a HELLO: the listener's HELLO and nothing keyed (before, its AUTH
	 * came at once: an HMAC of the secret to test guesses against); then
	 * an AUTH that proves nothing, a REQ */
	fd = raw_connect();
	say_hello(fd, mine);
	expect_hello(fd, h1);
	expect_quiet(fd, 300);
	send_frame(fd, 'A', junk, sizeof(junk));
	send_frame(fd, 'Q', "hello?", 6);
	expect_closed(fd);

	/* a HELLO, then silence: the listener's HELLO (a fresh nonce and share),
	 * and nothing happens */
	int quiet = raw_connect();

	say_hello(quiet, mine);
	expect_hello(quiet, h2);
	SVT_CHECK(memcmp(h1, h2, 16) != 0 && memcmp(h1 + 16, h2 + 16, 32) != 0);
	cmt_expect_none(ch, 300);
	expect_quiet(quiet, 0);

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
