/* Peer authentication; see auth.h. */
#include "transport/auth.h"
#include "common/util.h"
#include "common/fs.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SECRET_MIN 16
#define SECRET_MAX 4096
#define LABEL "softverbs peer authentication, wire version 3"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int loaded_rc = -1;
static uint8_t key[crypto_auth_hmacsha256_KEYBYTES];
static char source[1100];

/* The key is a hash of the secret: any length of secret makes one key. */
static void take_secret(const void *s, size_t len)
{
	crypto_generichash(key, sizeof(key), s, len, (const unsigned char *)LABEL,
			   sizeof(LABEL) - 1);
}

/* Read a secret file that must be ours alone; 0 or -1 with the reason logged. */
static int read_secret(const char *path, bool must_exist)
{
	uint8_t buf[SECRET_MAX];
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
	n = read(fd, buf, sizeof(buf));
	close(fd);
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
		n--;
	if (n < SECRET_MIN) {
		sv_err("the secret in %s is shorter than %d bytes", path, SECRET_MIN);
		return -1;
	}
	take_secret(buf, (size_t)n);
	sodium_memzero(buf, sizeof(buf));
	return 0;
}

/* This user's secret of this host: made once, atomically (link), then read. */
static int host_secret(void)
{
	char dir[64], tmp[128];
	uint8_t r[32];
	int fd;

	snprintf(dir, sizeof(dir), "/tmp/softverbs-%u", (unsigned)getuid());
	snprintf(source, sizeof(source), "%s/secret", dir);
	if (sv_private_dir(dir)) {
		sv_err("cannot use %s for this user's secret: %s", dir, strerror(errno));
		return -1;
	}
	if (!read_secret(source, false))
		return 0;
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
	return read_secret(source, true);
}

static void load(void)
{
	/* a set-user-ID program does not take its secret from the caller */
	bool env_ok = getuid() == geteuid();
	const char *s = env_ok ? getenv("SOFTVERBS_SECRET") : NULL;
	const char *file = env_ok ? getenv("SOFTVERBS_SECRET_FILE") : NULL;

	if (sodium_init() < 0) {
		sv_err("libsodium failed to start: no connection can be authenticated");
		return;
	}
	if (s && *s) {
		if (strlen(s) < SECRET_MIN)
			sv_warn("SOFTVERBS_SECRET is shorter than %d bytes: easy to guess",
				SECRET_MIN);
		take_secret(s, strlen(s));
		snprintf(source, sizeof(source), "SOFTVERBS_SECRET");
		loaded_rc = 0;
	} else if (file && *file) {
		snprintf(source, sizeof(source), "%s", file);
		loaded_rc = read_secret(file, true);
	} else {
		loaded_rc = host_secret();
	}
}

int sv_auth_init(void)
{
	pthread_once(&once, load);
	return loaded_rc;
}

const char *sv_auth_source(void)
{
	return source;
}

void sv_auth_nonce(uint8_t nonce[SV_AUTH_NONCE])
{
	randombytes_buf(nonce, SV_AUTH_NONCE);
}

void sv_auth_mac(uint8_t mac[SV_AUTH_MAC], bool connecting, const void *mine, const void *theirs,
		 size_t hello_len)
{
	crypto_auth_hmacsha256_state st;
	uint8_t role = connecting ? 'C' : 'A';

	crypto_auth_hmacsha256_init(&st, key, sizeof(key));
	crypto_auth_hmacsha256_update(&st, (const unsigned char *)LABEL, sizeof(LABEL) - 1);
	crypto_auth_hmacsha256_update(&st, &role, 1);
	crypto_auth_hmacsha256_update(&st, mine, hello_len);
	crypto_auth_hmacsha256_update(&st, theirs, hello_len);
	crypto_auth_hmacsha256_final(&st, mac);
	sodium_memzero(&st, sizeof(st));
}

bool sv_auth_verify(const uint8_t *f, size_t len, bool connecting, const void *mine,
		    const void *theirs, size_t hello_len)
{
	struct sv_auth_frame a;
	uint8_t want[SV_AUTH_MAC];

	if (len != sizeof(a) || loaded_rc)
		return false;
	memcpy(&a, f, sizeof(a));
	if (be32toh(a.magic) != SV_AUTH_MAGIC)
		return false;
	/* what the peer computed: its role, its HELLO first */
	sv_auth_mac(want, !connecting, theirs, mine, hello_len);
	return sodium_memcmp(want, a.mac, SV_AUTH_MAC) == 0;
}

#define DATAGRAM_LABEL "softverbs multicast datagram v1"

void sv_auth_datagram_mac(uint8_t mac[SV_AUTH_MAC], const struct iovec *iov, int n)
{
	crypto_auth_hmacsha256_state st;

	crypto_auth_hmacsha256_init(&st, key, sizeof(key));
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

	if (loaded_rc)
		return false;
	sv_auth_datagram_mac(want, iov, n);
	return sodium_memcmp(want, mac, SV_AUTH_MAC) == 0;
}
