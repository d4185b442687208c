/* The RoCEv2 packet format: softverbs packets to UDP payloads and back (see roce_wire.h). */
#include "common/lock_order.h"
#include "transport/roce_wire.h"
#include "wire/opcode.h"
#include "wire/wire.h"

#include <arpa/inet.h>
#include <pthread.h>
#include <sodium.h>
#include <stdatomic.h>
#include <string.h>
#include <zlib.h>
#ifdef SV_HAVE_ISAL
#include <isa-l/crc.h>
#endif

/* The IB BTH's bytes that differ from softverbs' (wire/wire.h). */
#define IB_BTH_FLAGS 1	   /* SE | MigReq | PadCnt(2) | TVer(4) */
#define IB_BTH_SE 0x80
#define IB_BTH_PAD_SHIFT 4
#define IB_BTH_PAD_MASK 0x30
#define IB_BTH_TVER_MASK 0x0f
#define IB_BTH_FECN_BYTE 4 /* FECN | BECN | 6 reserved bits, then the DestQP */
#define IB_BTH_FECN 0x80
#define IB_BTH_BECN 0x40
#define IB_BTH_ACK_BYTE 8  /* AckReq | 7 reserved bits, then the PSN */
#define IB_BTH_ACKREQ 0x80

/*
 * The Ethernet CRC-32 (reflected, zlib's crc32) over n more bytes.  ISA-L's
 * crc32_gzip_refl is the same function, folded with carry-less multiplies:
 * about ten times zlib's table-driven one here (45 against 4 GB/s on 4 KiB),
 * and the ICRC is a datagram's whole length on each side.  Without ISA-L at
 * the build, zlib's.
 */
static uint32_t crc_more(uint32_t crc, const void *p, size_t n)
{
#ifdef SV_HAVE_ISAL
	return crc32_gzip_refl(crc, p, n);
#else
	return (uint32_t)crc32_z(crc, p, n);
#endif
}

uint32_t sv_roce_icrc(const struct sv_roce_path *path, const void *dgram, size_t len)
{
	static const uint8_t ones[8] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff };
	const uint8_t *d = dgram;
	uint8_t ip[40], udp[8], bth[sizeof(struct sv_bth)];
	size_t iplen, body = len - SV_ROCE_ICRC_LEN; /* what follows the BTH, ICRC excluded */
	uint16_t udplen = (uint16_t)(8 + len);
	uint32_t crc = 0;

	memset(ip, 0, sizeof(ip));
	if (path->v6) {
		uint16_t plen = htons(udplen);

		/* version 6; traffic class and flow label masked */
		ip[0] = 0x6f;
		ip[1] = ip[2] = ip[3] = 0xff;
		memcpy(ip + 4, &plen, 2);
		ip[6] = 17;   /* next header: UDP */
		ip[7] = 0xff; /* hop limit, masked */
		memcpy(ip + 8, path->src, 16);
		memcpy(ip + 24, path->dst, 16);
		iplen = 40;
	} else {
		uint16_t tot = htons((uint16_t)(20 + udplen)), df = htons(0x4000),
			 id = htons(path->ip_id);

		ip[0] = 0x45;
		ip[1] = 0xff; /* TOS (DSCP, ECN), masked */
		memcpy(ip + 2, &tot, 2);
		/* identification (0 from an unconnected socket with PMTU
		 * discovery on), DF */
		memcpy(ip + 4, &id, 2);
		memcpy(ip + 6, &df, 2);
		ip[8] = 0xff; /* TTL, masked */
		ip[9] = 17;
		ip[10] = ip[11] = 0xff; /* header checksum, masked */
		memcpy(ip + 12, path->src, 4);
		memcpy(ip + 16, path->dst, 4);
		iplen = 20;
	}
	{
		uint16_t sp = htons(path->sport), dp = htons(path->dport), ul = htons(udplen);

		memcpy(udp, &sp, 2);
		memcpy(udp + 2, &dp, 2);
		memcpy(udp + 4, &ul, 2);
		udp[6] = udp[7] = 0xff; /* UDP checksum, masked */
	}
	memcpy(bth, d, sizeof(bth));
	bth[IB_BTH_FECN_BYTE] = 0xff; /* FECN, BECN and reserved, masked */
	crc = crc_more(crc, ones, sizeof(ones));
	crc = crc_more(crc, ip, iplen);
	crc = crc_more(crc, udp, sizeof(udp));
	crc = crc_more(crc, bth, sizeof(bth));
	return crc_more(crc, d + sizeof(bth), body - sizeof(bth));
}

#define TAG_LABEL "svroce1"
_Static_assert(SV_ROCE_TAG_KEY == crypto_shorthash_KEYBYTES, "a tag key is SipHash's");
_Static_assert(crypto_shorthash_siphashx24_BYTES == crypto_shorthash_KEYBYTES,
	       "the per-header key is a SipHash-128 output");

uint32_t sv_roce_tag(const struct sv_roce_path *path, const void *dgram, size_t len)
{
	const uint8_t *d = dgram;
	uint8_t h[sizeof(TAG_LABEL) + 1 + 32 + 6 + sizeof(struct sv_bth)], *p = h;
	uint8_t k[crypto_shorthash_siphashx24_BYTES], t[crypto_shorthash_BYTES];
	size_t alen = path->v6 ? 16 : 4;
	uint16_t f[3] = { htons(path->sport), htons(path->dport), htons((uint16_t)(8 + len)) };

	memset(h, 0, sizeof(h));
	memcpy(p, TAG_LABEL, sizeof(TAG_LABEL)); /* its NUL too */
	p += sizeof(TAG_LABEL);
	*p++ = path->v6 ? 6 : 4;
	memcpy(p, path->src, alen);
	memcpy(p + 16, path->dst, alen);
	p += 32;
	memcpy(p, f, sizeof(f));
	p += sizeof(f);
	memcpy(p, d, sizeof(struct sv_bth));
	p[IB_BTH_FECN_BYTE] = 0; /* FECN, BECN: marked on the way */
	crypto_shorthash_siphashx24(k, h, sizeof(h), path->tag_key);
	crypto_shorthash(t, d + sizeof(struct sv_bth), len - SV_ROCE_ICRC_LEN - sizeof(struct sv_bth),
			 k);
	sodium_memzero(k, sizeof(k));
	return (uint32_t)t[0] | (uint32_t)t[1] << 8 | (uint32_t)t[2] << 16 | (uint32_t)t[3] << 24;
}

/*
 * The images of the identification's 16 bits depend on the datagram's
 * length alone: their basis, reduced (each vector's highest bit set in no
 * other, highest first, at most 16), is kept for every length a datagram
 * can have here, computed the first time that length needs it, so that a
 * datagram from rxe costs an elimination of a 32-bit word.  A flood of
 * datagrams with a wrong ICRC and ever other lengths then costs little more
 * than their CRC: before, the last 8 lengths were kept and any other cost
 * 16 crc32_combine calls (4.5 us a datagram; such a flood at 50,000 a
 * second stopped a RoCEv2 transfer, issue 35).  The table is 288 KiB of
 * zero pages until lengths are seen; filled under a lock, read without one.
 */
#define ID_LENS 4608 /* above the longest datagram (SV_DGRAM_RAW_MAX, transport.h) */
static uint32_t id_vecs[ID_LENS][16];
static _Atomic uint8_t id_ready[ID_LENS];
static struct sv_mutex id_lock = SV_MUTEX_INITIALIZER(SV_LOCK_ROCE_IDS);

static void id_basis_compute(size_t len, uint32_t vecs[16])
{
	static const uint8_t zero[2];
	/* bytes of the ICRC's input after the identification: ones (8) and the
	 * IP header up to it (4 + 2) come first of 8 + 20 + 8 + len - 4 */
	uLong z = crc32(0L, zero, 2), op = crc32_combine_gen((z_off_t)len + 18);
	uint32_t basis[32] = { 0 };
	int n = 0;

	for (int i = 0; i < 16; i++) {
		uint8_t v[2] = { (uint8_t)((1u << i) >> 8), (uint8_t)(1u << i) };
		uint32_t c = (uint32_t)crc32_combine_op(crc32(0L, v, 2) ^ z, 0, op);

		/* reduce c by the basis so far, keyed by its highest set bit */
		for (int b = 31; b >= 0 && c; b--)
			if ((c >> b) & 1) {
				if (!basis[b]) {
					basis[b] = c;
					c = 0;
				} else {
					c ^= basis[b];
				}
			}
	}
	memset(vecs, 0, 16 * sizeof(*vecs));
	for (int b = 31; b >= 0; b--)
		if (basis[b])
			vecs[n++] = basis[b];
}

/* The reduced basis of length len into vecs (0 after the last). */
static const uint32_t *id_basis(size_t len, uint32_t vecs[16])
{
	if (len >= ID_LENS) {
		id_basis_compute(len, vecs);
		return vecs;
	}
	if (!atomic_load_explicit(&id_ready[len], memory_order_acquire)) {
		sv_mutex_lock(&id_lock);
		if (!atomic_load_explicit(&id_ready[len], memory_order_relaxed)) {
			id_basis_compute(len, id_vecs[len]);
			atomic_store_explicit(&id_ready[len], 1, memory_order_release);
		}
		sv_mutex_unlock(&id_lock);
	}
	return id_vecs[len];
}

/*
 * Is there an IPv4 identification for which the ICRC of this datagram
 * (sent with `want`, computed here as `have` with identification 0) is
 * right?  A UDP socket does not show the IP header, and Linux's rxe, unlike
 * an unconnected socket, sends a running identification (__ip_select_ident),
 * which the ICRC covers.  The CRC is affine, so the two differ by a linear
 * function of the identification alone: find one whose image is the
 * difference (16 unknowns, 32 equations, elimination over GF(2)).  A
 * datagram corrupted elsewhere passes only by chance, 1 in 2^16 (the UDP
 * checksum, where the sender sets one, is the kernel's to check as well).
 */
static bool ipv4_id_explains(uint32_t want, uint32_t have, size_t len)
{
	uint32_t mine[16], diff = want ^ have;
	const uint32_t *v = id_basis(len, mine);

	for (int k = 0; k < 16 && v[k] && diff; k++)
		if (diff & (1u << (31 - __builtin_clz(v[k]))))
			diff ^= v[k];
	return !diff;
}

size_t sv_roce_encoded_len(const void *pkt, size_t len)
{
	const uint8_t *p = pkt;
	const struct sv_opcode_info *op;

	if (len < sizeof(struct sv_bth) || !(op = sv_opcode_info(p[0])) || len < op->hdr_len ||
	    (p[1] & SV_BTH_GPUREF))
		return 0;
	return len + (4 - (len - op->hdr_len) % 4) % 4 + SV_ROCE_ICRC_LEN;
}

size_t sv_roce_encode(const struct sv_roce_path *path, const void *pkt, size_t len, void *out,
		      size_t cap)
{
	const uint8_t *p = pkt;
	uint8_t *o = out, flags;
	size_t pad, total = sv_roce_encoded_len(pkt, len);

	if (!total || total > cap)
		return 0;
	pad = total - len - SV_ROCE_ICRC_LEN;
	flags = p[1];
	if (o != p)
		memcpy(o, p, len); /* else in place */
	o[IB_BTH_FLAGS] = (uint8_t)(((flags & SV_BTH_SE) ? IB_BTH_SE : 0) | (pad << IB_BTH_PAD_SHIFT));
	/* a CNP says BECN (annex A17.9.2); nothing else sets FECN or BECN */
	o[IB_BTH_FECN_BYTE] = o[0] == SV_OP_CNP ? IB_BTH_BECN : 0;
	o[IB_BTH_ACK_BYTE] = (flags & SV_BTH_ACKREQ) ? IB_BTH_ACKREQ : 0;
	memset(o + len, 0, pad);
	sv_roce_seal(path, o, total);
	return total;
}

void sv_roce_seal(const struct sv_roce_path *path, void *dgram, size_t len)
{
	uint8_t *d = dgram;
	uint32_t icrc = path->tag_key ? sv_roce_tag(path, d, len) : sv_roce_icrc(path, d, len);

	for (int i = 0; i < SV_ROCE_ICRC_LEN; i++)
		d[len - SV_ROCE_ICRC_LEN + (size_t)i] = (uint8_t)(icrc >> (8 * i)); /* little-endian */
}

int sv_roce_check(const void *dgram, size_t len)
{
	const uint8_t *d = dgram;
	const struct sv_opcode_info *op;
	size_t pad;

	if (len < sizeof(struct sv_bth) + SV_ROCE_ICRC_LEN)
		return SV_ROCE_SHORT;
	if (d[IB_BTH_FLAGS] & IB_BTH_TVER_MASK)
		return SV_ROCE_BAD_VERSION;
	if (!(op = sv_opcode_info(d[0])))
		return SV_ROCE_BAD_OPCODE;
	pad = (d[IB_BTH_FLAGS] & IB_BTH_PAD_MASK) >> IB_BTH_PAD_SHIFT;
	if (len < op->hdr_len + pad + SV_ROCE_ICRC_LEN)
		return SV_ROCE_SHORT;
	return SV_ROCE_OK;
}

int sv_roce_decode(const struct sv_roce_path *path, const void *dgram, size_t len, void *out,
		   size_t cap, bool *ecn_marked)
{
	const uint8_t *d = dgram;
	uint8_t *o = out;
	uint32_t icrc = 0;
	size_t pad, n;
	int r = sv_roce_check(dgram, len);

	if (r < 0)
		return r;
	pad = (d[IB_BTH_FLAGS] & IB_BTH_PAD_MASK) >> IB_BTH_PAD_SHIFT;
	for (int i = 0; i < SV_ROCE_ICRC_LEN; i++)
		icrc |= (uint32_t)d[len - SV_ROCE_ICRC_LEN + (size_t)i] << (8 * i);
	if (path->tag_key) {
		if (icrc != sv_roce_tag(path, d, len))
			return SV_ROCE_BAD_TAG;
	} else {
		uint32_t mine = sv_roce_icrc(path, d, len);

		if (icrc != mine && (path->v6 || !ipv4_id_explains(icrc, mine, len)))
			return SV_ROCE_BAD_ICRC;
	}
	n = len - SV_ROCE_ICRC_LEN - pad;
	if (n > cap)
		return SV_ROCE_NO_ROOM;
	memcpy(o, d, n);
	o[1] = (uint8_t)(((d[IB_BTH_FLAGS] & IB_BTH_SE) ? SV_BTH_SE : 0) |
			 ((d[IB_BTH_ACK_BYTE] & IB_BTH_ACKREQ) ? SV_BTH_ACKREQ : 0));
	o[IB_BTH_FECN_BYTE] = 0;
	o[IB_BTH_ACK_BYTE] = 0;
	if (ecn_marked)
		*ecn_marked = d[IB_BTH_FECN_BYTE] & IB_BTH_FECN;
	return (int)n;
}
