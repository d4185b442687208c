/*
 * Fault injection (SOFTVERBS_FAULTS): the packets this process sends are
 * dropped, duplicated, reordered, delayed or corrupted with the given
 * probabilities, on every transport, so that a program can be tested
 * against what a lossy network does, which a RoCE NIC cannot be made to do.
 *
 *   SOFTVERBS_FAULTS="drop=0.01,dup=0.01,reorder=0.01,delay=0.01,delay_ms=20,
 *                     corrupt=0.001,ce=0.05,seed=7"
 *
 * Each key is optional.  Every data packet (a frame of the wire format:
 * requests, responses, ACKs and NAKs; not the connection handshake) draws
 * its fate once, in this order: corrupt, drop, delay, reorder, dup, ce.
 *   drop     it is not sent;
 *   corrupt  one of its bits flips on the way: under rocev2 one bit of the
 *            datagram, after its ICRC was computed, so that the
 *            receiver's ICRC check drops it; the stream transports carry
 *            no CRC, so there it is dropped here and counted apart;
 *   ce       it arrives marked "congestion experienced", as a hop whose
 *            queue fills marks it: under rocev2 the IP header's ECN bits,
 *            elsewhere a flag of the packet; its responder answers with a
 *            CNP and the requester's window shrinks (engine/congestion.c);
 *   delay    it leaves delay_ms (default 10) later, after what is sent
 *            meanwhile;
 *   reorder  it leaves 1 ms later: the packets behind it overtake it;
 *   dup      it is sent twice.
 * The draws come from a generator per connection seeded with `seed` (default
 * 1) and the connection's order of creation in the process, so a
 * single-threaded run makes the same decisions each time.  What was injected
 * is counted and printed at exit (SOFTVERBS_LOG=info).
 */
#include "transport/transport.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sv_faults_cfg {
	bool on;
	double p[SV_FAULT_KINDS];
	uint64_t delay_ns;
	uint64_t seed;
};

static struct sv_faults_cfg cfg;
bool sv_faults_enabled;
static pthread_once_t cfg_once = PTHREAD_ONCE_INIT;
static atomic_ulong injected[SV_FAULT_KINDS];
static atomic_ulong nconns;

static const char *const kind_name[SV_FAULT_KINDS] = {
	[SV_FAULT_CORRUPT] = "corrupt", [SV_FAULT_DROP] = "drop", [SV_FAULT_DELAY] = "delay",
	[SV_FAULT_REORDER] = "reorder", [SV_FAULT_DUP] = "dup", [SV_FAULT_CE] = "ce",
};

static void report(void)
{
	sv_info("SOFTVERBS_FAULTS: injected corrupt %lu, drop %lu, delay %lu, reorder %lu, dup %lu, "
		"ce %lu",
		atomic_load(&injected[SV_FAULT_CORRUPT]), atomic_load(&injected[SV_FAULT_DROP]),
		atomic_load(&injected[SV_FAULT_DELAY]), atomic_load(&injected[SV_FAULT_REORDER]),
		atomic_load(&injected[SV_FAULT_DUP]), atomic_load(&injected[SV_FAULT_CE]));
}

static void parse(void)
{
	const char *s = sv_env_str("SOFTVERBS_FAULTS", "");
	char buf[512], *save = NULL;

	cfg.delay_ns = 10000000ull;
	cfg.seed = 1;
	if (!*s)
		return;
	snprintf(buf, sizeof(buf), "%s", s);
	for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(tok, '='), *end;
		int k;

		if (!eq)
			goto bad;
		*eq++ = 0;
		if (!strcmp(tok, "seed")) {
			cfg.seed = strtoull(eq, &end, 0);
		} else if (!strcmp(tok, "delay_ms")) {
			cfg.delay_ns = strtoull(eq, &end, 0) * 1000000ull;
		} else {
			for (k = 0; k < SV_FAULT_KINDS && strcmp(tok, kind_name[k]); k++)
				;
			if (k == SV_FAULT_KINDS)
				goto bad;
			cfg.p[k] = strtod(eq, &end);
			if (cfg.p[k] < 0 || cfg.p[k] > 1)
				goto bad;
			if (cfg.p[k] > 0)
				cfg.on = true;
		}
		if (*end)
			goto bad;
		continue;
bad:
		sv_warn("SOFTVERBS_FAULTS: cannot read '%s' (keys: drop, dup, reorder, delay, "
			"corrupt, ce as probabilities 0-1, delay_ms, seed); no faults injected",
			tok);
		memset(cfg.p, 0, sizeof(cfg.p));
		cfg.on = false;
		return;
	}
	sv_faults_enabled = cfg.on;
	if (cfg.on) {
		sv_info("SOFTVERBS_FAULTS: corrupt %g drop %g delay %g (%llu ms) reorder %g dup %g "
			"ce %g, seed %llu",
			cfg.p[SV_FAULT_CORRUPT], cfg.p[SV_FAULT_DROP], cfg.p[SV_FAULT_DELAY],
			(unsigned long long)(cfg.delay_ns / 1000000ull), cfg.p[SV_FAULT_REORDER],
			cfg.p[SV_FAULT_DUP], cfg.p[SV_FAULT_CE], (unsigned long long)cfg.seed);
		atexit(report);
	}
}

bool sv_faults_on(void)
{
	pthread_once(&cfg_once, parse);
	return cfg.on;
}

void sv_faults_conn_init(struct sv_conn *c)
{
	if (!sv_faults_on())
		return;
	/* splitmix64 of the seed and the connection's number: never 0 */
	uint64_t z = cfg.seed + 0x9e3779b97f4a7c15ull * (atomic_fetch_add(&nconns, 1) + 1);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	c->fault_rng = (z ^ (z >> 31)) | 1;
}

/* xorshift64*: a draw in [0, 1) */
static double draw(struct sv_conn *c)
{
	uint64_t x = c->fault_rng;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	c->fault_rng = x;
	return (double)((x * 0x2545f4914f6cdd1dull) >> 11) / 9007199254740992.0;
}

enum sv_fault_kind sv_faults_draw(struct sv_conn *c, uint64_t *hold_ns)
{
	for (int k = 0; k < SV_FAULT_KINDS; k++) {
		if (cfg.p[k] <= 0 || draw(c) >= cfg.p[k])
			continue;
		atomic_fetch_add(&injected[k], 1);
		*hold_ns = k == SV_FAULT_DELAY ? cfg.delay_ns : 1000000ull;
		return (enum sv_fault_kind)k;
	}
	return SV_FAULT_NONE;
}
