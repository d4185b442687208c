/*
 * unit_keys: memory keys are unpredictable and a freed key names nothing.
 *
 *   - 4096 registrations: every key distinct, and the keys of consecutive
 *     registrations no closer than random 32-bit values would be (a counter,
 *     or slot bits XOR one secret, puts them next to each other: knowing one
 *     key gave the others away); MRs and windows alike;
 *   - a key freed by ibv_dereg_mr is refused (as an lkey and as a peer's
 *     rkey), and 20,000 later registrations never hand it out again;
 *   - churn: 60,000 registrations and deregistrations in random order with
 *     up to 3000 alive, each key checked to resolve while alive and not
 *     after (ibv_advise_mr with PREFETCH_NO_FAULT looks a key up and moves
 *     nothing), so the table never loses or keeps an entry.
 */
#include "sv_test.h"

#include <stdlib.h>
#include <string.h>

#define N 4096
#define ALIVE 3000

static int resolves(struct ibv_pd *pd, uint8_t *buf, uint32_t key)
{
	struct ibv_sge sge = { (uintptr_t)buf, 64, key };

	return ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT, 0, &sge, 1);
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/* Consecutive keys within 2^16 of each other: a random pair is that close
 * with odds 2^-15, so 4096 keys give 0.1 such pairs on average. */
static int close_pairs(const uint32_t *k, int n)
{
	int close = 0;

	for (int i = 1; i < n; i++) {
		uint32_t d = k[i] > k[i - 1] ? k[i] - k[i - 1] : k[i - 1] - k[i];

		close += d < (1u << 16);
	}
	return close;
}

static void all_distinct(const uint32_t *k, int n)
{
	uint32_t *s = malloc(sizeof(*s) * (size_t)n);

	SVT_CHECK_PTR(s);
	memcpy(s, k, sizeof(*s) * (size_t)n);
	qsort(s, (size_t)n, sizeof(*s), cmp_u32);
	for (int i = 1; i < n; i++)
		SVT_CHECK_MSG(s[i] != s[i - 1], "key 0x%08x handed out twice", s[i]);
	free(s);
}

static void test_unpredictable(struct svt_dev *d, uint8_t *buf)
{
	static struct ibv_mr *mr[N];
	static struct ibv_mw *mw[N];
	static uint32_t k[N];

	for (int i = 0; i < N; i++) {
		mr[i] = svt_reg_mr(d->pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND);
		k[i] = mr[i]->lkey;
		SVT_CHECK_EQ(mr[i]->rkey, k[i]);
	}
	all_distinct(k, N);
	SVT_CHECK_MSG(close_pairs(k, N) <= 3, "%d consecutive MR keys within 2^16",
		      close_pairs(k, N));
	for (int i = 0; i < N; i++)
		SVT_CHECK_OK(ibv_dereg_mr(mr[i]));

	for (int i = 0; i < N; i++) {
		mw[i] = ibv_alloc_mw(d->pd, IBV_MW_TYPE_2);
		SVT_CHECK_PTR(mw[i]);
		k[i] = mw[i]->rkey;
	}
	all_distinct(k, N);
	SVT_CHECK_MSG(close_pairs(k, N) <= 3, "%d consecutive MW keys within 2^16",
		      close_pairs(k, N));
	for (int i = 0; i < N; i++)
		SVT_CHECK_OK(ibv_dealloc_mw(mw[i]));
}

static void test_freed_key(struct svt_dev *d, uint8_t *buf)
{
	unsigned int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND;
	struct ibv_mr *mr = svt_reg_mr(d->pd, buf, 4096, acc);
	uint32_t freed = mr->lkey;

	SVT_CHECK_OK(resolves(d->pd, buf, freed));
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	SVT_CHECK_EQ(resolves(d->pd, buf, freed), EFAULT);
	for (int i = 0; i < 20000; i++) {
		mr = svt_reg_mr(d->pd, buf, 4096, acc);
		SVT_CHECK_MSG(mr->lkey != freed, "freed key 0x%08x again after %d registrations",
			      freed, i);
		SVT_CHECK_OK(ibv_dereg_mr(mr));
	}
}

static void test_churn(struct svt_dev *d, uint8_t *buf)
{
	static struct ibv_mr *live[ALIVE];
	static uint32_t dead[64];
	unsigned int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND;
	uint32_t rng = 12345;
	int n = 0, ndead = 0;

	for (int op = 0; op < 60000; op++) {
		rng = rng * 1103515245u + 12345u;
		/* grow while small, shrink while large, random in between */
		if (n == 0 || (n < ALIVE && (rng >> 16) % 100 < (op < 30000 ? 60 : 40))) {
			live[n++] = svt_reg_mr(d->pd, buf, 4096, acc);
		} else {
			int i = (int)((rng >> 8) % (uint32_t)n);

			dead[ndead++ % 64] = live[i]->lkey;
			SVT_CHECK_OK(ibv_dereg_mr(live[i]));
			live[i] = live[--n];
		}
		if (op % 2000 == 1999) {
			for (int i = 0; i < n; i++)
				SVT_CHECK_MSG(!resolves(d->pd, buf, live[i]->lkey),
					      "live key 0x%08x lost (op %d)", live[i]->lkey, op);
			for (int i = 0; i < ndead && i < 64; i++)
				SVT_CHECK_EQ(resolves(d->pd, buf, dead[i]), EFAULT);
		}
	}
	svt_log("churn: 60000 operations, %d keys alive at the end", n);
	while (n)
		SVT_CHECK_OK(ibv_dereg_mr(live[--n]));
}

int main(void)
{
	struct svt_dev d;

	svt_watchdog(120);
	svt_dev_open(&d);
	uint8_t *buf = svt_alloc(4096);

	test_unpredictable(&d, buf);
	test_freed_key(&d, buf);
	test_churn(&d, buf);
	free(buf);
	svt_dev_close(&d);
	return 0;
}
