/*
 * The host's QP numbers: one registry per device (per IPv4 address of an
 * interface, in one network namespace), shared by every process of the
 * user on this host, with no daemon.  The 2^24 QP numbers are cut into
 * 1024 blocks of SV_QPN_BLOCK; each opened context claims one block, drawn
 * at random among the free ones, and numbers its QPs in it, so QPNs are
 * unique per device across the host's processes, as on one HCA.  A claim
 * records the claiming process (pid and start time) and its endpoint; a
 * block whose owner died, however it died, is free again.  Block 0 (QPNs 0
 * and 1 are the IB special QPs) is never handed out, nor block 1023 (whose
 * numbers include 0xffffff, the multicast QPN).
 *
 * Within its block a context numbers its QPs (and its SRQs) through a
 * permutation of the 14 low bits keyed at random per context
 * (sv_qpn_permute): its tables stay dense by slot, and its numbers cannot
 * be guessed one from another (docs/SECURITY.md, "QP numbers and PSNs").
 *
 * A block also names its endpoint's TCP port, SOFTVERBS_PORT_BASE + block
 * (sv_qpn_port), on every host: so a peer anywhere that knows only (IP,
 * QPN) knows where the process owning that QPN listens, and a block whose
 * port is taken by another program is skipped.
 *
 * Over RoCEv2 a context may also take datagrams at that port (UDP), as
 * well as at 4791, which every context of the address shares: a context
 * of this host that sends to it looks that up here (sv_qpn_dgram_port),
 * so that the kernel hands the datagrams to the owner itself and no other
 * context has to pass them on (transport/rocev2.c).
 */
#ifndef SV_REGISTRY_H
#define SV_REGISTRY_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define SV_QPN_BLOCK_SHIFT 14
#define SV_QPN_BLOCK (1u << SV_QPN_BLOCK_SHIFT) /* QPs a context may have */
#define SV_QPN_NBLOCKS (1u << (24 - SV_QPN_BLOCK_SHIFT))

struct sv_qpn_file;

/* One context's block. */
struct sv_qpn_claim {
	struct sv_qpn_file *map; /* NULL: no registry (a block chosen at random) */
	uint32_t block;		 /* 0: none */
	uint64_t owner;		 /* what the slot holds while it is ours */
};

/* Blocks a claim passes over (the caller found their ports held). */
struct sv_qpn_skip {
	uint64_t bit[SV_QPN_NBLOCKS / 64];
};

static inline void sv_qpn_skip_add(struct sv_qpn_skip *s, uint32_t b)
{
	s->bit[(b / 64) % (SV_QPN_NBLOCKS / 64)] |= 1ull << (b % 64);
}

static inline bool sv_qpn_skipped(const struct sv_qpn_skip *s, uint32_t b)
{
	return s && (s->bit[(b / 64) % (SV_QPN_NBLOCKS / 64)] >> (b % 64) & 1);
}

/*
 * Claim a free (or abandoned) block of the device at ip, drawn at random
 * among those with a port and not in skip (NULL: none): a few random
 * probes, then a scan from a random block.  0, or an errno: ENOSPC when
 * every such block is held by a live process.  Without a usable registry
 * file (no /dev/shm), a random block is taken, unique with high probability
 * only, and said once.
 */
int sv_qpn_claim(const struct in6_addr *ip, const struct sv_qpn_skip *skip,
		 struct sv_qpn_claim *c);
/* The endpoint of the block listens now (its port is in the registry). */
void sv_qpn_publish(struct sv_qpn_claim *c, uint16_t port);
void sv_qpn_release(struct sv_qpn_claim *c);
/* The block's export table (engine/mem_export.h): its descriptor in this
 * process and its inode. */
void sv_qpn_publish_export(struct sv_qpn_claim *c, int fd, uint64_t ino);
/* The export table of the block of qpn on the device at ip, if process pid
 * owns that block: its descriptor there and its inode. */
bool sv_qpn_export_of(const struct in6_addr *ip, uint32_t qpn, pid_t pid, int *fd, uint64_t *ino);
/* Is the block of qpn held on the device at ip by a context of this host
 * (of this user, in this network namespace), or might it be (no registry
 * here)?  A load from a registry kept mapped: no system call after the
 * first for an address.  A block whose holder died unseen still counts. */
bool sv_qpn_claimed(const struct in6_addr *ip, uint32_t qpn);
/* The context holding the block of port on the device at ip (this
 * process's) takes RoCEv2 datagrams at that port, or no longer. */
void sv_qpn_publish_dgram(const struct in6_addr *ip, uint16_t port, bool on);
/* The registry of the device at ip, if a context of this host (this user,
 * this network namespace) ever opened one there, mapped for reading; NULL
 * for any other address (no file is made).  Let go with
 * sv_qpn_registry_close. */
struct sv_qpn_file *sv_qpn_registry_open(const struct in6_addr *ip);
void sv_qpn_registry_close(struct sv_qpn_file *f);
/* Does a live context of this host (this user, this network namespace)
 * hold the block of port on the device at ip, its endpoint listening (its
 * port published)?  Makes no file: false for an address of another host. */
bool sv_qpn_port_held_here(const struct in6_addr *ip, uint16_t port);
/* Where f's context that owns qpn takes RoCEv2 datagrams of its own: its
 * block's port, or 0 (none, or f NULL).  Two loads, no system call. */
uint16_t sv_qpn_dgram_port(const struct sv_qpn_file *f, uint32_t qpn);
/* The TCP port of the endpoint that owns qpn (on any host); 0 for none. */
uint16_t sv_qpn_port(uint32_t qpn_or_block_shifted);
/* The port of block b. */
uint16_t sv_qpn_block_port(uint32_t block);

/*
 * The low bits of a context's QP or SRQ numbers from the slots of its
 * tables: a 4-round Feistel network over the two 7-bit halves, whose round
 * functions are tables made from a random 64-bit key, so that a context's
 * numbers are unpredictable one from another while its tables stay dense.
 * Peers of this host that read a context's export table by QPN make the
 * same tables from the key it publishes there (engine/mem_export.h).
 */
struct sv_qpn_perm {
	uint8_t f[4][128];
};

#define SV_QPN_LOW (SV_QPN_BLOCK - 1)

void sv_qpn_perm_init(struct sv_qpn_perm *p, uint64_t key);

static inline uint32_t sv_qpn_feistel(const struct sv_qpn_perm *p, uint32_t x)
{
	uint32_t l = (x >> 7) & 0x7f, r = x & 0x7f, t;

	for (int i = 0; i < 4; i++) {
		t = l ^ p->f[i][r];
		l = r;
		r = t;
	}
	return l << 7 | r;
}

static inline uint32_t sv_qpn_feistel_inv(const struct sv_qpn_perm *p, uint32_t y)
{
	uint32_t l = (y >> 7) & 0x7f, r = y & 0x7f, t;

	for (int i = 3; i >= 0; i--) {
		t = r ^ p->f[i][l];
		r = l;
		l = t;
	}
	return l << 7 | r;
}

/* Slot (< SV_QPN_BLOCK) to the low 14 bits of its number. */
static inline uint32_t sv_qpn_permute(const struct sv_qpn_perm *p, uint32_t slot)
{
	return sv_qpn_feistel(p, slot & SV_QPN_LOW);
}

/* The low 14 bits of a number (the rest is ignored) back to its slot,
 * always < SV_QPN_BLOCK. */
static inline uint32_t sv_qpn_unpermute(const struct sv_qpn_perm *p, uint32_t low)
{
	return sv_qpn_feistel_inv(p, low & SV_QPN_LOW);
}


#endif
