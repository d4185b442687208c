/*
 * Peer authentication: every connection proves, in its handshake, that its
 * two ends hold the same secret, before any frame of it reaches a QP.
 *
 * Each side's HELLO carries a fresh random nonce; each then sends an AUTH
 * frame, HMAC-SHA-256 (libsodium) keyed by the secret over a label, its
 * role (connecting or accepting) and both HELLOs as they went over the wire
 * (nonces, GIDs, flags).  A recorded AUTH is worth nothing on another
 * connection (the nonces differ), one side's cannot be reflected as the
 * other's (the role), and nothing in a HELLO can be changed on the way.
 * The side that connects sends its AUTH, and only then its frames, once it
 * has checked the other's: an impostor answering at a peer's address learns
 * nothing the connection would have carried.
 *
 * The secret, first found of:
 *   SOFTVERBS_SECRET       the secret itself (any string, at least 16 bytes):
 *                          the same on every host of a job opens the network
 *                          to those hosts;
 *   SOFTVERBS_SECRET_FILE  a file holding it, which must be the user's own
 *                          and unreadable to others;
 *   otherwise              this user's secret of this host, made at first use
 *                          (32 random bytes in /tmp/softverbs-UID/secret,
 *                          0600 in a 0700 directory): processes of the same
 *                          user on this host (any network namespace) hold it,
 *                          nobody else does.
 * docs/SECURITY.md says what that keeps out.
 */
#ifndef SV_AUTH_H
#define SV_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#define SV_AUTH_NONCE 16
#define SV_AUTH_MAC 32
#define SV_AUTH_MAGIC 0x53564155u /* "SVAU" */

/* The AUTH frame, the first after the HELLO in each direction. */
struct sv_auth_frame {
	uint32_t magic;
	uint8_t mac[SV_AUTH_MAC];
} __attribute__((packed));

/* Load (or make) the secret; 0, or -1 with the reason logged once. */
int sv_auth_init(void);
/* Where the secret came from, for messages: "SOFTVERBS_SECRET", a path. */
const char *sv_auth_source(void);

void sv_auth_nonce(uint8_t nonce[SV_AUTH_NONCE]);

/*
 * The MAC one side sends: `connecting` is its role, mine/theirs the two
 * HELLOs as sent and received.  The other side checks it with the role
 * flipped and the HELLOs swapped (sv_auth_verify).
 */
void sv_auth_mac(uint8_t mac[SV_AUTH_MAC], bool connecting, const void *mine, const void *theirs,
		 size_t hello_len);
/*
 * A datagram's MAC (multicast, mcast.c): HMAC-SHA-256 keyed by the secret
 * over a label of its own and the n pieces of iov.  There is no handshake to
 * bind it to: a datagram recorded on the wire can be sent again, which UD
 * allows anyway (it may duplicate).
 */
void sv_auth_datagram_mac(uint8_t mac[SV_AUTH_MAC], const struct iovec *iov, int n);
/* Does mac match those pieces?  Constant time; false without a secret. */
bool sv_auth_datagram_verify(const uint8_t mac[SV_AUTH_MAC], const struct iovec *iov, int n);

/* Is f (len bytes) the AUTH the peer owes us?  Constant time. */
bool sv_auth_verify(const uint8_t *f, size_t len, bool connecting, const void *mine,
		    const void *theirs, size_t hello_len);

#endif
