/* Peer authentication; see auth.h. */
#include "transport/auth.h"
#include "common/util.h"
#include "common/fs.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SECRET_MAX 4096
/* the labels of wire version 4 (transport.h) and CM version 3 (protocol.c) */
#define LABEL "softverbs peer authentication, wire version 4"
#define HOST_LABEL "softverbs random secret of this host"
#define GEN_LABEL "softverbs CPace generator"
#define ISK_LABEL "softverbs CPace session key"
#define KDF_CONTEXT "svauthv4" /* crypto_kdf_CONTEXTBYTES */
#define SUBKEY_PAKE 1
#define SUBKEY_DATAGRAM 2
#define SUBKEY_ROCE 3
#define ROCE_KEY_BYTES 16 /* SV_ROCE_TAG_KEY, roce_wire.h */

_Static_assert(sizeof(SV_AUTH_KDF_SALT) - 1 == crypto_pwhash_SALTBYTES, "the KDF's salt");
_Static_assert(sizeof(KDF_CONTEXT) - 1 == crypto_kdf_CONTEXTBYTES, "the subkeys' context");
_Static_assert(SV_AUTH_SHARE == crypto_core_ristretto255_BYTES, "a share is an element");
_Static_assert(ROCE_KEY_BYTES == crypto_shorthash_KEYBYTES &&
		       ROCE_KEY_BYTES >= crypto_kdf_BYTES_MIN,
	       "RoCEv2's tag key is SipHash's, derived by crypto_kdf");
_Static_assert(sizeof(((struct sv_auth_hs *)0)->scalar) == crypto_core_ristretto255_SCALARBYTES,
	       "a scalar");

enum source_kind { SRC_HOST, SRC_ENV, SRC_FILE };

static pthread_once_t check_once = PTHREAD_ONCE_INIT, key_once = PTHREAD_ONCE_INIT;
static int check_rc = -1, key_rc = -1;
static enum source_kind kind;
static atomic_uint kdf_runs;
/* the password of the PAKE and the multicast datagrams' key, both derived
 * from the secret's key */
static uint8_t pake_key[32], datagram_key[crypto_auth_hmacsha256_KEYBYTES];
/* RoCEv2's tag key: a chosen secret's only, set once derived */
static uint8_t roce_key[ROCE_KEY_BYTES];
static atomic_bool roce_key_ready;
static char source[1100];

/* Read a secret file that must be ours alone into buf (SECRET_MAX); its
 * length, or -1 with the reason logged. */
static ssize_t read_secret(const char *path, uint8_t *buf, bool must_exist)
{
	struct stat st;
	ssize_t n;
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);

	if (fd < 0) {
		if (must_exist || errno != ENOENT)
			sv_err("cannot read the secret in %s: %s", path, strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_uid != getuid() ||
	    (st.st_mode & 077)) {
		sv_err("refusing the secret in %s: it must be a file of this user that nobody "
		       "else can read (chmod 600)",
		       path);
		close(fd);
		return -1;
	}
	n = read(fd, buf, SECRET_MAX);
	close(fd);
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
		n--;
	if (n < SV_AUTH_SECRET_MIN) {
		sv_err("refusing the secret in %s: it is shorter than %d bytes, too easy to guess "
		       "(see docs/SECURITY.md)",
		       path, SV_AUTH_SECRET_MIN);
		sodium_memzero(buf, SECRET_MAX);
		return -1;
	}
	return n;
}

/* This user's secret of this host, made once, atomically (link), then read
 * into buf; its length or -1. */
static ssize_t host_secret(uint8_t *buf)
{
	char dir[64], tmp[128];
	uint8_t r[32];
	ssize_t n;
	int fd;

	snprintf(dir, sizeof(dir), "/tmp/softverbs-%u", (unsigned)getuid());
	snprintf(source, sizeof(source), "%s/secret", dir);
	if (sv_private_dir(dir)) {
		sv_err("cannot use %s for this user's secret: %s", dir, strerror(errno));
		return -1;
	}
	if ((n = read_secret(source, buf, false)) >= 0)
		return n;
	snprintf(tmp, sizeof(tmp), "%s/secret.%d.tmp", dir, (int)getpid());
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		sv_err("cannot make %s: %s", tmp, strerror(errno));
		return -1;
	}
	randombytes_buf(r, sizeof(r));
	if (write(fd, r, sizeof(r)) != (ssize_t)sizeof(r)) {
		sv_err("cannot write %s: %s", tmp, strerror(errno));
		close(fd);
		unlink(tmp);
		return -1;
	}
	close(fd);
	/* whoever links first made this host's secret; the others read it */
	if (link(tmp, source) && errno != EEXIST)
		sv_err("cannot make %s: %s", source, strerror(errno));
	unlink(tmp);
	sodium_memzero(r, sizeof(r));
	return read_secret(source, buf, true);
}

/* The variables are read only by a program that is not set-user-ID: such a
 * program does not take its secret from the caller. */
static const char *env_secret(const char *name)
{
	const char *v = getuid() == geteuid() ? getenv(name) : NULL;

	return v && *v ? v : NULL;
}

static void check(void)
{
	const char *s = env_secret("SOFTVERBS_SECRET");
	const char *file = env_secret("SOFTVERBS_SECRET_FILE");

	if (sodium_init() < 0) {
		sv_err("libsodium failed to start: no connection can be authenticated");
		return;
	}
	if (s) {
		kind = SRC_ENV;
		snprintf(source, sizeof(source), "SOFTVERBS_SECRET");
		if (strlen(s) < SV_AUTH_SECRET_MIN) {
			sv_err("refusing SOFTVERBS_SECRET: it is shorter than %d bytes, too easy to "
			       "guess (see docs/SECURITY.md)",
			       SV_AUTH_SECRET_MIN);
			return;
		}
	} else if (file) {
		uint8_t buf[SECRET_MAX];
		ssize_t n;

		kind = SRC_FILE;
		snprintf(source, sizeof(source), "%s", file);
		n = read_secret(file, buf, true);
		sodium_memzero(buf, sizeof(buf));
		if (n < 0)
			return;
	} else {
		kind = SRC_HOST; /* made or read when first needed (load) */
	}
	check_rc = 0;
}

int sv_auth_check(void)
{
	pthread_once(&check_once, check);
	if (check_rc)
		errno = EACCES;
	return check_rc;
}

/* The keys from the secret: Argon2id for one a person chose, a hash for
 * the random one of this host; 0 or -1 with the reason logged. */
static int derive(const uint8_t *s, size_t len, bool chosen)
{
	uint8_t master[32];

	if (chosen) {
		struct timespec t0, t1;

		atomic_fetch_add(&kdf_runs, 1);
		clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
		if (crypto_pwhash(master, sizeof(master), (const char *)s, len,
				  (const unsigned char *)SV_AUTH_KDF_SALT, SV_AUTH_KDF_OPSLIMIT,
				  SV_AUTH_KDF_MEMLIMIT, crypto_pwhash_ALG_ARGON2ID13)) {
			sv_err("cannot derive the key of the secret (%s): out of memory (Argon2id "
			       "needs %llu MiB)",
			       source, SV_AUTH_KDF_MEMLIMIT >> 20);
			return -1;
		}
		clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
		sv_dbg("derived the key of the secret (%s) with Argon2id: %.0f ms of CPU", source,
		       (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6);
	} else {
		crypto_generichash(master, sizeof(master), s, len, (const unsigned char *)HOST_LABEL,
				   sizeof(HOST_LABEL) - 1);
	}
	crypto_kdf_derive_from_key(pake_key, sizeof(pake_key), SUBKEY_PAKE, KDF_CONTEXT, master);
	crypto_kdf_derive_from_key(datagram_key, sizeof(datagram_key), SUBKEY_DATAGRAM, KDF_CONTEXT,
				   master);
	if (chosen) {
		crypto_kdf_derive_from_key(roce_key, sizeof(roce_key), SUBKEY_ROCE, KDF_CONTEXT,
					   master);
		atomic_store_explicit(&roce_key_ready, true, memory_order_release);
	}
	sodium_memzero(master, sizeof(master));
	return 0;
}

static void load(void)
{
	uint8_t buf[SECRET_MAX];
	const char *s;
	ssize_t n;

	if (sv_auth_check())
		return;
	if (kind == SRC_ENV) {
		/* read again (the check kept nothing): it may have changed since */
		s = env_secret("SOFTVERBS_SECRET");
		if (!s || strlen(s) < SV_AUTH_SECRET_MIN)
			sv_err("refusing SOFTVERBS_SECRET: it changed since it was checked");
		else
			key_rc = derive((const uint8_t *)s, strlen(s), true);
		return;
	}
	n = kind == SRC_FILE ? read_secret(source, buf, true) : host_secret(buf);
	if (n >= 0)
		key_rc = derive(buf, (size_t)n, kind == SRC_FILE);
	sodium_memzero(buf, sizeof(buf));
}

int sv_auth_init(void)
{
	pthread_once(&key_once, load);
	return key_rc;
}

bool sv_auth_roce_keyed(void)
{
	return !sv_auth_check() && kind != SRC_HOST;
}

const uint8_t *sv_auth_roce_key(void)
{
	return atomic_load_explicit(&roce_key_ready, memory_order_acquire) ? roce_key : NULL;
}

const char *sv_auth_source(void)
{
	return source;
}

unsigned sv_auth_kdf_runs(void)
{
	return atomic_load(&kdf_runs);
}

void sv_auth_nonce(uint8_t nonce[SV_AUTH_NONCE])
{
	randombytes_buf(nonce, SV_AUTH_NONCE);
}

int sv_auth_share(struct sv_auth_hs *hs, uint8_t share[SV_AUTH_SHARE],
		  const uint8_t sid[SV_AUTH_NONCE])
{
	crypto_generichash_state st;
	uint8_t h[crypto_core_ristretto255_HASHBYTES], g[crypto_core_ristretto255_BYTES];
	int err;

	hs->keyed = false;
	if (key_rc)
		return -1;
	/* the generator: the PAKE's password and the session, hashed to the group */
	crypto_generichash_init(&st, pake_key, sizeof(pake_key), sizeof(h));
	crypto_generichash_update(&st, (const unsigned char *)GEN_LABEL, sizeof(GEN_LABEL) - 1);
	crypto_generichash_update(&st, sid, SV_AUTH_NONCE);
	crypto_generichash_final(&st, h, sizeof(h));
	crypto_core_ristretto255_from_hash(g, h);
	crypto_core_ristretto255_scalar_random(hs->scalar);
	err = crypto_scalarmult_ristretto255(share, hs->scalar, g);
	sodium_memzero(h, sizeof(h));
	sodium_memzero(g, sizeof(g));
	sodium_memzero(&st, sizeof(st));
	return err ? -1 : 0;
}

int sv_auth_session(struct sv_auth_hs *hs, const uint8_t peer_share[SV_AUTH_SHARE],
		    bool connecting, const void *mine, const void *theirs, size_t hello_len)
{
	crypto_generichash_state st;
	uint8_t k[crypto_scalarmult_ristretto255_BYTES];

	hs->keyed = false;
	/* refused: not an element's encoding, or the identity as the result */
	if (key_rc || crypto_scalarmult_ristretto255(k, hs->scalar, peer_share)) {
		sodium_memzero(hs, sizeof(*hs));
		return -1;
	}
	/* the transcript: the connector's HELLO (the sid in it), then the acceptor's */
	crypto_generichash_init(&st, k, sizeof(k), sizeof(hs->key));
	crypto_generichash_update(&st, (const unsigned char *)ISK_LABEL, sizeof(ISK_LABEL) - 1);
	crypto_generichash_update(&st, connecting ? mine : theirs, hello_len);
	crypto_generichash_update(&st, connecting ? theirs : mine, hello_len);
	crypto_generichash_final(&st, hs->key, sizeof(hs->key));
	sodium_memzero(k, sizeof(k));
	sodium_memzero(&st, sizeof(st));
	sodium_memzero(hs->scalar, sizeof(hs->scalar));
	hs->keyed = true;
	return 0;
}

void sv_auth_mac(uint8_t mac[SV_AUTH_MAC], const struct sv_auth_hs *hs, bool connecting,
		 const void *mine, const void *theirs, size_t hello_len)
{
	crypto_auth_hmacsha256_state st;
	uint8_t role = connecting ? 'C' : 'A';

	crypto_auth_hmacsha256_init(&st, hs->key, sizeof(hs->key));
	crypto_auth_hmacsha256_update(&st, (const unsigned char *)LABEL, sizeof(LABEL) - 1);
	crypto_auth_hmacsha256_update(&st, &role, 1);
	crypto_auth_hmacsha256_update(&st, mine, hello_len);
	crypto_auth_hmacsha256_update(&st, theirs, hello_len);
	crypto_auth_hmacsha256_final(&st, mac);
	sodium_memzero(&st, sizeof(st));
}

bool sv_auth_verify(const uint8_t *f, size_t len, const struct sv_auth_hs *hs, bool connecting,
		    const void *mine, const void *theirs, size_t hello_len)
{
	struct sv_auth_frame a;
	uint8_t want[SV_AUTH_MAC];

	if (len != sizeof(a) || key_rc || !hs->keyed)
		return false;
	memcpy(&a, f, sizeof(a));
	if (be32toh(a.magic) != SV_AUTH_MAGIC)
		return false;
	/* what the peer computed: its role, its HELLO first */
	sv_auth_mac(want, hs, !connecting, theirs, mine, hello_len);
	return sodium_memcmp(want, a.mac, SV_AUTH_MAC) == 0;
}

void sv_auth_forget(struct sv_auth_hs *hs)
{
	sodium_memzero(hs, sizeof(*hs));
}

#define DATAGRAM_LABEL "softverbs multicast datagram v2"

void sv_auth_datagram_mac(uint8_t mac[SV_AUTH_MAC], const struct iovec *iov, int n)
{
	crypto_auth_hmacsha256_state st;

	crypto_auth_hmacsha256_init(&st, datagram_key, sizeof(datagram_key));
	crypto_auth_hmacsha256_update(&st, (const unsigned char *)DATAGRAM_LABEL,
				      sizeof(DATAGRAM_LABEL) - 1);
	for (int i = 0; i < n; i++)
		crypto_auth_hmacsha256_update(&st, iov[i].iov_base, iov[i].iov_len);
	crypto_auth_hmacsha256_final(&st, mac);
	sodium_memzero(&st, sizeof(st));
}

bool sv_auth_datagram_verify(const uint8_t mac[SV_AUTH_MAC], const struct iovec *iov, int n)
{
	uint8_t want[SV_AUTH_MAC];

	if (key_rc)
		return false;
	sv_auth_datagram_mac(want, iov, n);
	return sodium_memcmp(want, mac, SV_AUTH_MAC) == 0;
}
