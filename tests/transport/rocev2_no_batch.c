/*
 * A rocev2 listener that cannot allocate its receive batch (16 slots of
 * 64 KiB, src/transport/rocev2.c) reads one datagram at a time into the
 * packet's own room, which holds one datagram, not a run the kernel joined
 * (UDP_GRO).  Before, such a run came back truncated and was dropped, and
 * every resend of it was joined and dropped again: RC WRITEs of 64 KiB
 * (sent as runs) ended in IBV_WC_RETRY_EXC_ERR.  Now the listener turns
 * the joining off and takes them singly.
 *
 * This program's malloc refuses that one size (the batch's); everything
 * else is glibc's.  An RC pair over rocev2 on lo moves 64 WRITEs of 64 KiB
 * and 64 SENDs of 4 KiB, data checked.  Under a sanitizer, which has a
 * malloc of its own, it is skipped.
 */
#include "sv_test.h"

#include <stdlib.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SANITIZED 1
#endif
#endif

#define MSG (64u << 10)
#define N 64

#ifndef SANITIZED
extern void *__libc_malloc(size_t n);
static int refused;

/* the batch: 16 slots of 64 KiB and their headers; nothing else asks for
 * a size between 1 MiB and 1 MiB + 64 KiB */
void *malloc(size_t n)
{
	if (n > 16 * 65536 && n < 16 * 65536 + 65536) {
		__atomic_fetch_add(&refused, 1, __ATOMIC_RELAXED);
		return NULL;
	}
	return __libc_malloc(n);
}
#endif

int main(void)
{
#ifdef SANITIZED
	svt_skip("a sanitizer's malloc cannot be replaced here");
#else
	struct svt_pair_opts o;
	struct svt_pair p;
	struct ibv_wc wc[N];
	uint8_t *a, *b;

	svt_watchdog(100);
	setenv("SOFTVERBS_TRANSPORT", "rocev2", 1);
	svt_pair_opts_default(&o, IBV_QPT_RC);
	o.buf_len = 2 * (size_t)N * MSG;
	o.conn.sgid_index = 3; /* the IPv4 address's RoCE v2 GID */
	svt_pair_create(&p, IBV_QPT_RC, &o);
	a = p.a.buf;
	b = p.b.buf;
	svt_fill(a, (size_t)N * MSG, 11);
	for (int i = 0; i < N; i++)
		SVT_CHECK_OK(svt_post_send(p.a.qp, (uint64_t)i, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED,
					   a + (size_t)i * MSG, MSG, p.a.mr->lkey,
					   (uintptr_t)b + (size_t)i * MSG, p.b.mr->rkey, 0));
	svt_poll_ok(p.a.send_cq, N, wc, 0);
	SVT_CHECK_FILL(b, (size_t)N * MSG, 11);
	for (int i = 0; i < N; i++) {
		uint8_t *to = b + (size_t)N * MSG + (size_t)i * 4096;

		SVT_CHECK_OK(svt_post_recv(p.b.qp, (uint64_t)i, to, 4096, p.b.mr->lkey));
		svt_fill(a + (size_t)i * 4096, 4096, 200u + (uint32_t)i);
		SVT_CHECK_OK(svt_post_send(p.a.qp, (uint64_t)i, IBV_WR_SEND, IBV_SEND_SIGNALED,
					   a + (size_t)i * 4096, 4096, p.a.mr->lkey, 0, 0, 0));
	}
	svt_poll_ok(p.a.send_cq, N, wc, 0);
	svt_poll_ok(p.b.send_cq, N, wc, 0); /* (one CQ a side) */
	for (int i = 0; i < N; i++)
		SVT_CHECK_FILL(b + (size_t)N * MSG + (size_t)i * 4096, 4096, 200u + (uint32_t)i);
	SVT_CHECK_MSG(__atomic_load_n(&refused, __ATOMIC_RELAXED) > 0,
		      "no listener asked for its batch: the test did not test it");
	svt_log("%d WRITEs of 64 KiB and %d SENDs, data checked; %d batch allocations refused", N,
		N, refused);
	svt_pair_destroy(&p);
	return 0;
#endif
}
