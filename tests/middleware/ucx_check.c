/*
 * ucx_check: UCX's UCP API between two processes, every byte checked.
 * ucx_perftest measures but never looks at the data; this does, over
 * whatever transports UCX_TLS allows (the tests set rc_verbs,ud_verbs or
 * ud_verbs alone, so the bytes cross softverbs).
 *
 *   ucx_check -s PORT            server
 *   ucx_check -c HOST PORT       client
 *
 * Worker addresses and the server's remote key travel over a plain TCP
 * socket, as ucx_perftest does.  The client then:
 *   1. tag ping-pong, 1 B to 1 MiB: the server checks each message and
 *      answers with a different pattern, which the client checks;
 *   2. RMA: GETs a region the server filled (pattern checked), PUTs a
 *      pattern into another region, GETs it back and compares;
 *   3. atomics: 1000 fetch-and-adds on one 64-bit word (the old values must
 *      be consecutive) and a compare-and-swap that must succeed then fail;
 *   4. tells the server, which checks the PUT region and the atomic word
 *      in its own memory and answers "OK".
 * Prints "ucx_check: OK ..." on success; any mismatch exits 1.
 */
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <ucp/api/ucp.h>

#define REGION (1u << 20)     /* each RMA region */
#define MAX_MSG (1u << 20)
#define N_FADD 1000
#define TAG_DATA 0x100
#define TAG_DONE 0x200

struct remote_info {
	uint64_t get_addr, put_addr, word_addr;
	uint32_t rkey_len;
};

static ucp_context_h ctx;
static ucp_worker_h worker;

#define CHECK(cond, ...)                                       \
	do {                                                   \
		if (!(cond)) {                                 \
			fprintf(stderr, "ucx_check: " __VA_ARGS__); \
			fprintf(stderr, "\n");                 \
			exit(1);                               \
		}                                              \
	} while (0)

static uint8_t pat(uint32_t size, int dir, size_t i)
{
	return (uint8_t)(i * 151u + size * 3u + (unsigned)dir * 77u + 5u);
}

static void wait_req(void *req, const char *what)
{
	ucs_status_t st;

	if (req == NULL)
		return;
	CHECK(!UCS_PTR_IS_ERR(req), "%s: %s", what, ucs_status_string(UCS_PTR_STATUS(req)));
	do {
		ucp_worker_progress(worker);
		st = ucp_request_check_status(req);
	} while (st == UCS_INPROGRESS);
	CHECK(st == UCS_OK, "%s: %s", what, ucs_status_string(st));
	ucp_request_free(req);
}

static void xfer(int fd, void *buf, size_t len, int send_it)
{
	for (size_t done = 0; done < len;) {
		ssize_t n = send_it ? send(fd, (char *)buf + done, len - done, 0)
				    : recv(fd, (char *)buf + done, len - done, 0);
		CHECK(n > 0, "out-of-band socket closed");
		done += (size_t)n;
	}
}

/* both sides reach this point before either goes on */
static void oob_barrier(int fd)
{
	char b = 'b';

	xfer(fd, &b, 1, 1);
	xfer(fd, &b, 1, 0);
}

static void tag_send(ucp_ep_h ep, void *buf, size_t len, ucp_tag_t tag)
{
	ucp_request_param_t p = { 0 };

	wait_req(ucp_tag_send_nbx(ep, buf, len, tag, &p), "tag send");
}

static void tag_recv(void *buf, size_t len, ucp_tag_t tag)
{
	ucp_request_param_t p = { 0 };

	wait_req(ucp_tag_recv_nbx(worker, buf, len, tag, (ucp_tag_t)-1, &p), "tag recv");
}

static void flush(void)
{
	ucp_request_param_t p = { 0 };

	wait_req(ucp_worker_flush_nbx(worker, &p), "flush");
}

/* after the last barrier: the peer may already be gone, so a failed close is no failed check */
static void close_ep(ucp_ep_h ep)
{
	ucp_request_param_t cp = { .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
				   .flags = UCP_EP_CLOSE_FLAG_FORCE };
	void *r = ucp_ep_close_nbx(ep, &cp);

	while (r && !UCS_PTR_IS_ERR(r) && ucp_request_check_status(r) == UCS_INPROGRESS)
		ucp_worker_progress(worker);
	if (r && !UCS_PTR_IS_ERR(r))
		ucp_request_free(r);
}

static ucp_ep_h connect_ep(int fd)
{
	ucp_address_t *addr;
	size_t len;
	uint64_t rlen;
	void *raddr;
	ucp_ep_h ep;

	CHECK(ucp_worker_get_address(worker, &addr, &len) == UCS_OK, "worker address");
	rlen = len;
	xfer(fd, &rlen, sizeof(rlen), 1);
	xfer(fd, addr, len, 1);
	xfer(fd, &rlen, sizeof(rlen), 0);
	raddr = malloc(rlen);
	CHECK(raddr, "oom");
	xfer(fd, raddr, rlen, 0);
	ucp_ep_params_t ep_params = {
		.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS,
		.address = raddr,
	};
	CHECK(ucp_ep_create(worker, &ep_params, &ep) == UCS_OK, "ep create");
	ucp_worker_release_address(worker, addr);
	free(raddr);
	return ep;
}

static void run_server(int fd)
{
	uint8_t *mem, *msg = malloc(MAX_MSG);
	ucp_mem_h memh;
	void *rkey;
	size_t rkey_len;
	ucp_ep_h ep = connect_ep(fd);
	struct remote_info ri;
	uint64_t *word;
	char ok[4];

	CHECK(msg, "oom");
	/* get region | put region | atomic word, registered as one */
	ucp_mem_map_params_t mp = {
		.field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS,
		.length = 2 * REGION + 64,
		.flags = UCP_MEM_MAP_ALLOCATE,
	};
	CHECK(ucp_mem_map(ctx, &mp, &memh) == UCS_OK, "mem map");
	ucp_mem_attr_t ma = { .field_mask = UCP_MEM_ATTR_FIELD_ADDRESS };
	CHECK(ucp_mem_query(memh, &ma) == UCS_OK, "mem query");
	mem = ma.address;
	for (size_t i = 0; i < REGION; i++)
		mem[i] = pat(REGION, 2, i);
	memset(mem + REGION, 0, REGION);
	word = (uint64_t *)(mem + 2 * REGION);
	*word = 1000;
	CHECK(ucp_rkey_pack(ctx, memh, &rkey, &rkey_len) == UCS_OK, "rkey pack");
	ri = (struct remote_info){ (uintptr_t)mem, (uintptr_t)(mem + REGION), (uintptr_t)word,
				   (uint32_t)rkey_len };
	xfer(fd, &ri, sizeof(ri), 1);
	xfer(fd, rkey, rkey_len, 1);
	ucp_rkey_buffer_release(rkey);

	for (uint32_t size = 1; size <= MAX_MSG; size *= 2) {
		memset(msg, 0, size);
		tag_recv(msg, size, TAG_DATA + size);
		for (size_t i = 0; i < size; i++)
			CHECK(msg[i] == pat(size, 0, i), "server: tag message of %u B, byte %zu", size,
			      i);
		for (size_t i = 0; i < size; i++)
			msg[i] = pat(size, 1, i);
		tag_send(ep, msg, size, TAG_DATA + size);
	}

	tag_recv(ok, sizeof(ok), TAG_DONE);
	/* what the client PUT and the atomics it ran, seen in our own memory */
	for (size_t i = 0; i < REGION; i++)
		CHECK(mem[REGION + i] == pat(REGION, 3, i), "server: PUT region byte %zu", i);
	CHECK(*word == 2000 + N_FADD + 1, "server: atomic word is %llu, expected %u",
	      (unsigned long long)*word, 2000 + N_FADD + 1);
	memcpy(ok, "OK!", 4);
	tag_send(ep, ok, sizeof(ok), TAG_DONE);
	flush();
	oob_barrier(fd); /* the client stays until our last message is acknowledged */
	close_ep(ep);
	ucp_mem_unmap(ctx, memh);
	free(msg);
	printf("ucx_check: server OK\n");
}

static void atomic_op(ucp_ep_h ep, ucp_atomic_op_t op, uint64_t *value, uint64_t *result,
		      uint64_t raddr, ucp_rkey_h rkey)
{
	ucp_request_param_t p = {
		.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_REPLY_BUFFER,
		.datatype = ucp_dt_make_contig(8),
		.reply_buffer = result,
	};

	wait_req(ucp_atomic_op_nbx(ep, op, value, 1, raddr, rkey, &p), "atomic");
}

static void run_client(int fd)
{
	uint8_t *msg = malloc(MAX_MSG), *local = malloc(REGION);
	ucp_ep_h ep = connect_ep(fd);
	struct remote_info ri;
	ucp_rkey_h rkey;
	void *rkey_buf;
	ucp_request_param_t p = { 0 };
	char ok[4] = "go";

	CHECK(msg && local, "oom");
	xfer(fd, &ri, sizeof(ri), 0);
	rkey_buf = malloc(ri.rkey_len);
	CHECK(rkey_buf, "oom");
	xfer(fd, rkey_buf, ri.rkey_len, 0);
	CHECK(ucp_ep_rkey_unpack(ep, rkey_buf, &rkey) == UCS_OK, "rkey unpack");
	free(rkey_buf);

	/* 1. tag ping-pong */
	for (uint32_t size = 1; size <= MAX_MSG; size *= 2) {
		for (size_t i = 0; i < size; i++)
			msg[i] = pat(size, 0, i);
		tag_send(ep, msg, size, TAG_DATA + size);
		memset(msg, 0, size);
		tag_recv(msg, size, TAG_DATA + size);
		for (size_t i = 0; i < size; i++)
			CHECK(msg[i] == pat(size, 1, i), "client: tag reply of %u B, byte %zu", size,
			      i);
	}

	/* 2. RMA: GET what the server wrote, PUT ours and GET it back */
	memset(local, 0, REGION);
	wait_req(ucp_get_nbx(ep, local, REGION, ri.get_addr, rkey, &p), "get");
	flush();
	for (size_t i = 0; i < REGION; i++)
		CHECK(local[i] == pat(REGION, 2, i), "client: GET byte %zu", i);
	for (size_t i = 0; i < REGION; i++)
		local[i] = pat(REGION, 3, i);
	wait_req(ucp_put_nbx(ep, local, REGION, ri.put_addr, rkey, &p), "put");
	flush();
	memset(local, 0, REGION);
	/* small GETs too: they take the bcopy path, large ones zcopy */
	for (size_t off = 0; off < 4096; off += 512)
		wait_req(ucp_get_nbx(ep, local + off, 512, ri.put_addr + off, rkey, &p), "get");
	wait_req(ucp_get_nbx(ep, local + 4096, REGION - 4096, ri.put_addr + 4096, rkey, &p), "get");
	flush();
	for (size_t i = 0; i < REGION; i++)
		CHECK(local[i] == pat(REGION, 3, i), "client: PUT then GET byte %zu", i);

	/* 3. atomics on the server's word (starts at 1000) */
	uint64_t v, old;
	v = 1000;
	atomic_op(ep, UCP_ATOMIC_OP_ADD, &v, &old, ri.word_addr, rkey); /* fetch-and-add */
	CHECK(old == 1000, "client: first fetch-and-add returned %llu", (unsigned long long)old);
	for (uint64_t i = 0; i < N_FADD; i++) {
		v = 1;
		wait_req(ucp_atomic_op_nbx(ep, UCP_ATOMIC_OP_ADD, &v, 1, ri.word_addr, rkey,
					   &(ucp_request_param_t){
						   .op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE |
								   UCP_OP_ATTR_FIELD_REPLY_BUFFER,
						   .datatype = ucp_dt_make_contig(8),
						   .reply_buffer = &old }),
			 "fetch-add");
		CHECK(old == 2000 + i, "client: fetch-and-add %llu returned %llu",
		      (unsigned long long)i, (unsigned long long)old);
	}
	/* UCP's CSWAP: buffer = compare value, reply buffer = new value in, old value out */
	v = 2000 + N_FADD;
	old = 2000 + N_FADD + 1;
	atomic_op(ep, UCP_ATOMIC_OP_CSWAP, &v, &old, ri.word_addr, rkey);
	CHECK(old == 2000 + N_FADD, "client: compare-and-swap saw %llu", (unsigned long long)old);
	v = 7; /* wrong compare value: no swap, the current value comes back */
	old = 99;
	atomic_op(ep, UCP_ATOMIC_OP_CSWAP, &v, &old, ri.word_addr, rkey);
	CHECK(old == 2000 + N_FADD + 1, "client: failed compare-and-swap saw %llu",
	      (unsigned long long)old);
	flush();

	/* 4. the server checks its own memory */
	tag_send(ep, ok, sizeof(ok), TAG_DONE);
	tag_recv(ok, sizeof(ok), TAG_DONE);
	CHECK(!memcmp(ok, "OK!", 4), "client: server did not confirm");
	flush();
	oob_barrier(fd);
	ucp_rkey_destroy(rkey);
	close_ep(ep);
	free(msg);
	free(local);
	printf("ucx_check: OK (tag 1 B - 1 MiB, GET/PUT 1 MiB and 512 B, %d fetch-and-add, "
	       "compare-and-swap)\n", N_FADD);
}

int main(int argc, char **argv)
{
	int server = argc == 3 && !strcmp(argv[1], "-s");
	int fd, one = 1;

	if (!server && !(argc == 4 && !strcmp(argv[1], "-c"))) {
		fprintf(stderr, "usage: ucx_check -s PORT | -c HOST PORT\n");
		return 2;
	}
	ucp_params_t params = {
		.field_mask = UCP_PARAM_FIELD_FEATURES,
		.features = UCP_FEATURE_TAG | UCP_FEATURE_RMA | UCP_FEATURE_AMO64,
	};
	CHECK(ucp_init(&params, NULL, &ctx) == UCS_OK, "ucp_init");
	ucp_worker_params_t wp = { .field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
				   .thread_mode = UCS_THREAD_MODE_SINGLE };
	CHECK(ucp_worker_create(ctx, &wp, &worker) == UCS_OK, "worker");

	if (server) {
		struct sockaddr_in a = { .sin_family = AF_INET,
					 .sin_port = htons((uint16_t)atoi(argv[2])) };
		int lfd = socket(AF_INET, SOCK_STREAM, 0);

		setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		CHECK(!bind(lfd, (struct sockaddr *)&a, sizeof(a)) && !listen(lfd, 1), "listen");
		printf("ucx_check: listening\n");
		fflush(stdout);
		fd = accept(lfd, NULL, NULL);
		CHECK(fd >= 0, "accept");
		close(lfd);
	} else {
		struct addrinfo h = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM }, *ai;

		CHECK(!getaddrinfo(argv[2], argv[3], &h, &ai), "resolve %s", argv[2]);
		fd = socket(AF_INET, SOCK_STREAM, 0);
		CHECK(!connect(fd, ai->ai_addr, ai->ai_addrlen), "connect to %s:%s", argv[2],
		      argv[3]);
		freeaddrinfo(ai);
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (server)
		run_server(fd);
	else
		run_client(fd);
	close(fd);
	ucp_worker_destroy(worker);
	ucp_cleanup(ctx);
	return 0;
}
