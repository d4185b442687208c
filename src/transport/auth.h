/*
 * Peer authentication: every connection proves, in its handshake, that its
 * two ends hold the same secret, before any frame of it reaches a QP, and
 * without giving anyone who does not hold it something to test guesses of
 * the secret against offline.
 *
 * The handshake is CPace (draft-irtf-cfrg-cpace), a balanced PAKE, over
 * ristretto255, made of libsodium's primitives:
 *
 *   - The side that connects puts a fresh random nonce in its HELLO: the
 *     session's identifier (sid).  Each side's HELLO carries its share
 *     Y = y.G, y a fresh random scalar, G the group element hashed from the
 *     secret's key and the sid (crypto_core_ristretto255_from_hash).  A share
 *     is a uniformly random element whatever the secret: it tells nothing.
 *   - Each side makes the session key from y and the other's share, keyed
 *     BLAKE2b over both HELLOs as they went over the wire (the connector's
 *     first): only a side that used the same secret gets the same key.
 *   - The AUTH frame is HMAC-SHA-256 with the session key over a label, the
 *     sender's role (connecting or accepting) and both HELLOs.  The side
 *     that connects sends its AUTH first; the side that accepts checks it,
 *     and only then answers with its own AUTH and lets its frames go; the
 *     connecting side lets its frames go once that AUTH has passed.
 *
 * So whoever connects without the secret gets a HELLO and nothing keyed,
 * and an impostor answering at an address a peer dialled gets an AUTH it
 * can test one guess against (the one it made its share with), never more;
 * an eavesdropper gets nothing it can test a guess against.  A recorded
 * AUTH is worth nothing on another connection (fresh shares and nonce), one
 * side's cannot be reflected as the other's (the role), and nothing in a
 * HELLO can be changed on the way.
 *
 * The secret, first found of:
 *   SOFTVERBS_SECRET       the secret itself (any string of at least 16 bytes):
 *                          the same on every host of a job opens the network
 *                          to those hosts;
 *   SOFTVERBS_SECRET_FILE  a file holding it (at least 16 bytes), which must be
 *                          the user's own and unreadable to others;
 *   otherwise              this user's secret of this host, made at first use
 *                          (32 random bytes in /tmp/softverbs-UID/secret,
 *                          0600 in a 0700 directory): processes of the same
 *                          user on this host (any network namespace) hold it,
 *                          nobody else does.
 * A secret a person chose (the two variables) becomes the key through
 * Argon2id (crypto_pwhash, the parameters below, paid once per process at
 * the first need), so that each guess of it costs whoever guesses as much;
 * the random one of this host is hashed (BLAKE2b) as it is.
 * docs/SECURITY.md says what that keeps out.
 */
#ifndef SV_AUTH_H
#define SV_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#define SV_AUTH_NONCE 16
#define SV_AUTH_SHARE 32 /* a ristretto255 element */
#define SV_AUTH_MAC 32
#define SV_AUTH_MAGIC 0x53564155u /* "SVAU" */
#define SV_AUTH_SECRET_MIN 16  /* bytes; a shorter secret is refused */

/*
 * The KDF of a secret a person chose: Argon2id v1.3, 5 passes over 64 MiB,
 * one lane, a 32-byte output, the fixed salt below (the same on every host,
 * so that the same secret gives the same key everywhere).  One derivation
 * takes 0.16 to 0.2 s of one core here (bench/auth-guess.sh measures it).
 */
#define SV_AUTH_KDF_OPSLIMIT 5ull
#define SV_AUTH_KDF_MEMLIMIT (64ull << 20)
#define SV_AUTH_KDF_SALT "softverbs secret" /* crypto_pwhash_SALTBYTES */

/* The AUTH frame, the second in each direction. */
struct sv_auth_frame {
	uint32_t magic;
	uint8_t mac[SV_AUTH_MAC];
} __attribute__((packed));

/* One connection's side of the handshake. */
struct sv_auth_hs {
	uint8_t scalar[32]; /* ours, until the session key is made */
	uint8_t key[32];    /* the session key */
	bool keyed;
};

/*
 * Is the configured secret usable?  Cheap: it reads SOFTVERBS_SECRET or
 * SOFTVERBS_SECRET_FILE, when set, and checks it (length, the file's owner
 * and mode) without deriving anything; this host's random secret is looked
 * at only when needed.  0, or -1 with errno EACCES and the reason logged
 * (once).  Opening a device and rdma_create_id call it.
 */
int sv_auth_check(void);
/* Load (or make) the secret and derive its key (the KDF, once a process);
 * 0, or -1 with the reason logged once. */
int sv_auth_init(void);
/* Where the secret came from, for messages: "SOFTVERBS_SECRET", a path. */
const char *sv_auth_source(void);
/* How many times this process ran the KDF (0 or 1; for tests). */
unsigned sv_auth_kdf_runs(void);

void sv_auth_nonce(uint8_t nonce[SV_AUTH_NONCE]);

/* A fresh scalar into hs and our share for the HELLO, for the session sid
 * (the connector's nonce); 0, or -1 without a key. */
int sv_auth_share(struct sv_auth_hs *hs, uint8_t share[SV_AUTH_SHARE],
		  const uint8_t sid[SV_AUTH_NONCE]);
/*
 * Both HELLOs are known (mine as sent, theirs as received, each hello_len
 * bytes, theirs carrying peer_share): the session key into hs; the scalar is
 * forgotten.  -1 when the peer's share is not a valid element (or leads to
 * the identity): the connection must be dropped.
 */
int sv_auth_session(struct sv_auth_hs *hs, const uint8_t peer_share[SV_AUTH_SHARE],
		    bool connecting, const void *mine, const void *theirs, size_t hello_len);
/* The MAC one side sends: `connecting` is its role. */
void sv_auth_mac(uint8_t mac[SV_AUTH_MAC], const struct sv_auth_hs *hs, bool connecting,
		 const void *mine, const void *theirs, size_t hello_len);
/* Is f (len bytes) the AUTH the peer owes us?  Constant time; false before
 * the session key. */
bool sv_auth_verify(const uint8_t *f, size_t len, const struct sv_auth_hs *hs, bool connecting,
		    const void *mine, const void *theirs, size_t hello_len);
/* Wipe hs. */
void sv_auth_forget(struct sv_auth_hs *hs);

/*
 * A datagram's MAC (multicast, mcast.c): HMAC-SHA-256 keyed by a key of its
 * own derived from the secret's, over a label of its own and the n pieces of
 * iov.  There is no handshake to bind it to: a datagram recorded on the
 * wire can be sent again, which UD allows anyway (it may duplicate), and
 * whoever receives one can test guesses of the secret against it, at the
 * KDF's cost each.
 */
void sv_auth_datagram_mac(uint8_t mac[SV_AUTH_MAC], const struct iovec *iov, int n);
/* Does mac match those pieces?  Constant time; false without a secret. */
bool sv_auth_datagram_verify(const uint8_t mac[SV_AUTH_MAC], const struct iovec *iov, int n);

/*
 * RoCEv2 (rocev2.c, roce_wire.h): a job whose secret a person chose
 * (SOFTVERBS_SECRET, SOFTVERBS_SECRET_FILE) tags its RoCEv2 packets with a
 * key of their own derived from the secret's, in place of the ICRC.  This
 * host's random secret (nothing set) does not: rocev2 then stays standard
 * RoCEv2, which rxe and RoCE NICs take (docs/SECURITY.md says why).
 *
 * sv_auth_roce_keyed: does this job tag its packets?  Cheap (the check
 * above).  sv_auth_roce_key: the tag key (SV_ROCE_TAG_KEY bytes), or NULL
 * while it is not derived (sv_auth_init runs the KDF; it never runs here) or
 * the job does not tag.
 */
bool sv_auth_roce_keyed(void);
const uint8_t *sv_auth_roce_key(void);

#endif
