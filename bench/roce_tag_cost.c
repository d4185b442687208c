/*
 * What the RoCEv2 tag costs against the ICRC it replaces (roce_wire.h):
 * CPU time of sv_roce_encode + sv_roce_decode of one WRITE packet of 8 B,
 * 1 KiB and 4 KiB payload, with and without a tag key, on one core.
 *   cc -O2 -Isrc bench/roce_tag_cost.c src/transport/roce_wire.c \
 *      src/wire/opcode.c src/common/lock_order.c -lsodium -lz -lpthread \
 *      -DSV_HAVE_ISAL -lisal -o roce_tag_cost
 * (without the last line, the ICRC with zlib's CRC-32, as a build without
 * ISA-L computes it)
 * Prints ns per packet (encode + decode), the best of ROUNDS rounds.
 */
#include "transport/roce_wire.h"
#include "wire/opcode.h"
#include "wire/wire.h"

#include <arpa/inet.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define ROUNDS 7

static double cpu_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

int main(void)
{
	static const size_t sizes[] = { 8, 1024, 4096 };
	static uint8_t pkt[SV_MAX_PACKET_LEN + 64], dg[SV_MAX_PACKET_LEN + 64],
		back[SV_MAX_PACKET_LEN + 64];
	uint8_t key[SV_ROCE_TAG_KEY];
	struct sv_roce_path path;
	struct sv_bth *b = (void *)pkt;

	if (sodium_init() < 0)
		return 1;
	randombytes_buf(key, sizeof(key));
	memset(&path, 0, sizeof(path));
	inet_pton(AF_INET, "10.215.0.1", path.src);
	inet_pton(AF_INET, "10.215.0.2", path.dst);
	path.sport = 49152;
	path.dport = SV_ROCE_UDP_PORT;
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		size_t len = sizeof(*b) + sizeof(struct sv_reth) + sizes[k];
		double best[2] = { 1e18, 1e18 };
		int iters = sizes[k] < 100 ? 400000 : 40000;

		memset(pkt, 0x5a, len);
		memset(b, 0, sizeof(*b));
		b->opcode = SV_OP_RC | SV_OP_WRITE_ONLY;
		b->pkey = 0xffff;
		b->dqpn = htonl(0x4321);
		for (int r = 0; r < ROUNDS; r++)
			for (int tagged = 0; tagged < 2; tagged++) {
				double t0;

				path.tag_key = tagged ? key : NULL;
				t0 = cpu_ns();
				for (int i = 0; i < iters; i++) {
					size_t n = sv_roce_encode(&path, pkt, len, dg, sizeof(dg));

					if (sv_roce_decode(&path, dg, n, back, sizeof(back), NULL) !=
					    (int)len)
						return 2;
				}
				t0 = (cpu_ns() - t0) / iters;
				if (t0 < best[tagged])
					best[tagged] = t0;
			}
		printf("%5zu B payload: ICRC %7.0f ns, tag %7.0f ns per packet (encode + decode), "
		       "ratio %.2f\n",
		       sizes[k], best[0], best[1], best[1] / best[0]);
	}
	return 0;
}
