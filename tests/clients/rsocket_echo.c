/*
 * rsocket_echo: an ordinary BSD-sockets TCP echo pair, nothing RDMA in it,
 * for the rsocket preload test (rsocket.sh preload): run with Debian's
 * librspreload.so preloaded, its sockets become rsockets.
 *   rsocket_echo server ADDR PORT: accept one connection, echo until EOF
 *   rsocket_echo client ADDR PORT: send 4 x 256 KiB of a pattern, each
 *     echoed back and checked; then SHUT_WR and expect EOF
 * "echo: rsocket" tells that the client's socket answered an rsockets-only
 * option (SOL_RDMA), which the kernel would refuse.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define SOL_RDMA 0x10000
#define RDMA_SQSIZE 0
#define CHUNK (256 * 1024)
#define ROUNDS 4

static int die(const char *what)
{
	fprintf(stderr, "echo: %s: %s\n", what, strerror(errno));
	exit(1);
}

static uint8_t pat(size_t i)
{
	return (uint8_t)(i * 131 + (i >> 9) + 7);
}

static void wait_in(int s)
{
	struct pollfd p = {.fd = s, .events = POLLIN};
	if (poll(&p, 1, 10000) != 1 || !(p.revents & (POLLIN | POLLHUP)))
		die("poll");
}

int main(int argc, char **argv)
{
	if (argc != 4)
		return 2;
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[3]))};
	inet_pton(AF_INET, argv[2], &a.sin_addr);
	int s = socket(AF_INET, SOCK_STREAM, 0);
	if (s < 0)
		die("socket");
	static uint8_t buf[CHUNK], back[CHUNK];
	if (!strcmp(argv[1], "server")) {
		int one = 1;
		setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(s, (struct sockaddr *)&a, sizeof(a)) || listen(s, 1))
			die("bind/listen");
		int c = accept(s, NULL, NULL);
		if (c < 0)
			die("accept");
		size_t total = 0;
		for (;;) {
			wait_in(c);
			ssize_t n = read(c, buf, sizeof(buf));
			if (n < 0)
				die("read");
			if (n == 0)
				break;
			for (ssize_t off = 0; off < n;) {
				ssize_t w = write(c, buf + off, (size_t)(n - off));
				if (w <= 0)
					die("write");
				off += w;
			}
			total += (size_t)n;
		}
		close(c);
		close(s);
		printf("echo: server ok %zu bytes\n", total);
		return total == (size_t)CHUNK * ROUNDS ? 0 : 1;
	}
	if (connect(s, (struct sockaddr *)&a, sizeof(a)))
		die("connect");
	int v = 0;
	socklen_t vl = sizeof(v);
	if (getsockopt(s, SOL_RDMA, RDMA_SQSIZE, &v, &vl) == 0)
		printf("echo: rsocket (sq size %d)\n", v);
	for (size_t r = 0; r < ROUNDS; r++) {
		for (size_t i = 0; i < CHUNK; i++)
			buf[i] = pat(r * CHUNK + i);
		if (send(s, buf, CHUNK, 0) != CHUNK)
			die("send");
		size_t got = 0;
		while (got < CHUNK) {
			wait_in(s);
			ssize_t n = recv(s, back + got, CHUNK - got, 0);
			if (n <= 0)
				die("recv");
			got += (size_t)n;
		}
		if (memcmp(buf, back, CHUNK)) {
			fprintf(stderr, "echo: round %zu: data differs\n", r);
			return 1;
		}
	}
	shutdown(s, SHUT_WR);
	wait_in(s);
	if (recv(s, back, 1, 0) != 0)
		die("no EOF");
	close(s);
	printf("echo: client ok %d bytes\n", CHUNK * ROUNDS);
	return 0;
}
