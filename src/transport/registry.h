/*
 * The host's QP numbers: one registry per device (per IPv4 address of an
 * interface, in one network namespace), shared by every process of the
 * user on this host, with no daemon.  The 2^24 QP numbers are cut into
 * 1024 blocks of SV_QPN_BLOCK; each opened context claims one block and
 * numbers its QPs in it, so QPNs are unique per device across the host's
 * processes, as on one HCA.  A claim records the claiming process (pid and
 * start time) and its endpoint; a block whose owner died, however it died,
 * is free again.  Block 0 (QPNs 0 and 1 are the IB special QPs) is never
 * handed out.
 *
 * A block also names its endpoint's TCP port, SOFTVERBS_PORT_BASE + block
 * (sv_qpn_port), on every host: so a peer anywhere that knows only (IP,
 * QPN) knows where the process owning that QPN listens, and a block whose
 * port is taken by another program is skipped.
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

/*
 * Claim the lowest free (or abandoned) block of the device at ip from block
 * `from` on.  0, or an errno: ENOSPC when every block is held by a live
 * process (or has no port).  Without a usable registry file (no /dev/shm),
 * a random block is taken, unique with high probability only, and said once.
 */
int sv_qpn_claim(const struct in6_addr *ip, uint32_t from, struct sv_qpn_claim *c);
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
/* The TCP port of the endpoint that owns qpn (on any host); 0 for none. */
uint16_t sv_qpn_port(uint32_t qpn_or_block_shifted);
/* The port of block b. */
uint16_t sv_qpn_block_port(uint32_t block);


#endif
