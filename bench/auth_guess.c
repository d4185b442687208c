/*
 * bench/auth_guess.c (bench/auth-guess.sh): what one guess of a secret a
 * person chose costs someone who holds keyed material to test it against
 * offline, on one core of this machine, before and after the handshake of
 * wire version 4 (docs/SECURITY.md, "Guessing the secret").
 *
 *   before (wire version 3): the accepting side's AUTH, sent to anyone who
 *     said HELLO: HMAC-SHA-256 keyed by BLAKE2b(secret) over a label, the
 *     role and both HELLOs.  A guess costs one BLAKE2b and one HMAC.
 *   after (wire version 4): the key of such a secret is Argon2id with the
 *     parameters of src/transport/auth.h; a guess costs at least one
 *     Argon2id (what a multicast datagram's MAC, the only keyed material
 *     left to someone who has not connected, is tested against), plus what
 *     follows, which is negligible beside it.
 *
 * Prints guesses per second for each, and the CPU time of one Argon2id.
 */
#include "transport/auth.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double cpu_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

#define V3_LABEL "softverbs peer authentication, wire version 3"

int main(int argc, char **argv)
{
	static const char *words[] = { "correct horse battery staple", "hunter2hunter2hunter2",
				       "tr0ub4dor&3-tr0ub4dor&3", "open sesame, open sesame" };
	uint8_t hello_a[44], hello_c[44], key[32], mac[32];
	double t0, t;
	unsigned long n = 0;
	int kdf_runs = argc > 1 ? atoi(argv[1]) : 5;

	if (sodium_init() < 0)
		return 1;
	randombytes_buf(hello_a, sizeof(hello_a));
	randombytes_buf(hello_c, sizeof(hello_c));

	/* before: BLAKE2b + HMAC per guess, for 2 s of CPU */
	t0 = cpu_s();
	do {
		for (int i = 0; i < 1000; i++, n++) {
			crypto_auth_hmacsha256_state st;
			const char *w = words[n % 4];
			uint8_t role = 'A';

			crypto_generichash(key, sizeof(key), (const unsigned char *)w, strlen(w),
					   (const unsigned char *)V3_LABEL, sizeof(V3_LABEL) - 1);
			crypto_auth_hmacsha256_init(&st, key, sizeof(key));
			crypto_auth_hmacsha256_update(&st, (const unsigned char *)V3_LABEL,
						      sizeof(V3_LABEL) - 1);
			crypto_auth_hmacsha256_update(&st, &role, 1);
			crypto_auth_hmacsha256_update(&st, hello_a, sizeof(hello_a));
			crypto_auth_hmacsha256_update(&st, hello_c, sizeof(hello_c));
			crypto_auth_hmacsha256_final(&st, mac);
		}
		t = cpu_s() - t0;
	} while (t < 2.0);
	printf("before (v3, BLAKE2b + HMAC-SHA-256): %.0f guesses/s on one core (C, libsodium)\n",
	       (double)n / t);

	/* after: Argon2id as the library runs it */
	double best = 1e9, sum = 0;

	for (int i = 0; i < kdf_runs; i++) {
		const char *w = words[i % 4];

		t0 = cpu_s();
		if (crypto_pwhash(key, sizeof(key), w, strlen(w),
				  (const unsigned char *)SV_AUTH_KDF_SALT, SV_AUTH_KDF_OPSLIMIT,
				  SV_AUTH_KDF_MEMLIMIT, crypto_pwhash_ALG_ARGON2ID13)) {
			fprintf(stderr, "crypto_pwhash: out of memory\n");
			return 1;
		}
		t = cpu_s() - t0;
		sum += t;
		best = t < best ? t : best;
	}
	printf("after (v4, Argon2id t=%llu m=%llu MiB): %.3f s of CPU per guess (mean of %d, "
	       "fastest %.3f s): %.1f guesses/s on one core\n",
	       SV_AUTH_KDF_OPSLIMIT, SV_AUTH_KDF_MEMLIMIT >> 20, sum / kdf_runs, kdf_runs, best,
	       kdf_runs / sum);
	return 0;
}
