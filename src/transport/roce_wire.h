/*
 * The RoCEv2 packet format (IBA annex A17): what a softverbs packet becomes
 * inside a UDP datagram to port 4791, and back.
 *
 * A softverbs packet (wire/wire.h) already carries the InfiniBand
 * transport's headers in their wire order with IB's opcodes; only the BTH's
 * flag bytes differ (softverbs keeps SE and AckReq in one byte of its own),
 * and IB adds what a byte stream did not need: the payload is padded to a
 * multiple of 4 bytes (PadCnt in the BTH) and the packet ends with the
 * invariant CRC.  The ICRC is the Ethernet CRC-32 (zlib's crc32) over
 *
 *   8 bytes of 0xff | IP header | UDP header | BTH | the rest, pad included
 *
 * with the fields that routers may change set to all ones first: for IPv4
 * the TOS, TTL and header checksum, for IPv6 the traffic class, flow label
 * and hop limit, the UDP checksum, and the BTH's FECN/BECN/reserved byte.
 * It is carried little-endian, as rxe and the NICs put it on the wire.
 *
 * The kernel writes the IP and UDP headers of a datagram sent on a UDP
 * socket, so the ICRC is computed from what it will write: the addresses and
 * ports, the lengths, and, for IPv4, identification 0 and DF, which is what
 * Linux sends from an unconnected socket with path-MTU discovery on
 * (IP_PMTUDISC_DO) and what rxe sends.
 *
 * A job with a secret a person chose (SOFTVERBS_SECRET or
 * SOFTVERBS_SECRET_FILE, auth.h) puts a keyed tag in the ICRC's place
 * instead (path->tag_key, sv_roce_tag), so that only holders of the secret
 * can make a packet the receiver takes; such packets are RoCEv2 in every
 * other respect, but no RoCE NIC or rxe takes them, and softverbs with a
 * tag key takes none of theirs.  The tag is SipHash-2-4 (libsodium's
 * crypto_shorthash) in two steps, since it has no incremental form:
 *
 *   K_p = SipHash-2-4-128(key; "svroce1" | IP version | source, destination
 *         address (16 bytes each, IPv4 in the first 4, zeros after) | UDP
 *         source, destination port | UDP length | the BTH, its FECN/BECN
 *         byte 4 zero)
 *   tag = the first 4 bytes of SipHash-2-4(K_p; what follows the BTH, pad
 *         included, up to the tag)
 *
 * over the same fields as the ICRC but what a router or the kernel may
 * change (TOS/traffic class, TTL/hop limit, flow label, the IPv4
 * identification, the checksums, FECN/BECN).  A key per header and a PRF
 * over the rest is a PRF of the whole: a header cannot be given another
 * packet's payload.  4 bytes, so a forgery made blind passes 1 time in 2^32
 * (docs/SECURITY.md says what that means).
 */
#ifndef SV_ROCE_WIRE_H
#define SV_ROCE_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SV_ROCE_UDP_PORT 4791
#define SV_ROCE_ICRC_LEN 4
#define SV_ROCE_TAG_KEY 16 /* bytes of a tag key (crypto_shorthash_KEYBYTES) */

/* What the ICRC covers of the IP and UDP headers around a packet. */
struct sv_roce_path {
	bool v6;
	uint8_t src[16], dst[16]; /* IPv4: the address in the first 4 bytes */
	uint16_t sport, dport;	  /* UDP ports, host order (dport 4791) */
	/* IPv4 identification as sent: 0 from an unconnected socket with DF,
	 * softverbs' own.  Decoding cannot know it (a UDP socket does not show
	 * the IP header) and takes whichever one makes the ICRC right. */
	uint16_t ip_id;
	/* NULL: the ICRC, standard RoCEv2.  Else the job's tag key
	 * (SV_ROCE_TAG_KEY bytes, auth.h): the keyed tag in the ICRC's place. */
	const uint8_t *tag_key;
};

/* Why a datagram was refused (sv_roce_decode). */
enum sv_roce_err {
	SV_ROCE_OK = 0,
	SV_ROCE_SHORT = -1,	  /* shorter than its headers, pad and ICRC */
	SV_ROCE_BAD_VERSION = -2, /* BTH transport version not 0 */
	SV_ROCE_BAD_OPCODE = -3,  /* an opcode softverbs does not know */
	SV_ROCE_BAD_ICRC = -4,	  /* the invariant CRC does not match */
	SV_ROCE_NO_ROOM = -5,	  /* the output buffer is too small */
	SV_ROCE_BAD_TAG = -6,	  /* with a tag key: the tag does not match (a sender
				   * without the job's secret, or changed on the way) */
};

/*
 * The UDP payload for softverbs packet pkt (len bytes: headers as its opcode
 * says, then payload) sent along path, written to out; its length, or 0 if
 * it does not fit in cap or cannot go on a RoCE wire (an unknown opcode, a
 * GPU reference, which names memory instead of carrying it).
 */
size_t sv_roce_encode(const struct sv_roce_path *path, const void *pkt, size_t len, void *out,
		      size_t cap); /* out may be pkt: encoded in place */
/* The length sv_roce_encode gives packet pkt (len bytes), or 0 if it cannot go. */
size_t sv_roce_encoded_len(const void *pkt, size_t len);
/* The ICRC (or the tag) of encoded UDP payload dgram (len bytes) along path
 * written again into its last 4 bytes (another IPv4 identification). */
void sv_roce_seal(const struct sv_roce_path *path, void *dgram, size_t len);

/*
 * The softverbs packet carried by UDP payload dgram (len bytes) that arrived
 * along path, written to out: its length, or an sv_roce_err.  Everything the
 * ICRC covers is checked; what the packet asks is for the responder.  The
 * BTH's FECN bit is returned in *ecn_marked when ecn_marked is not NULL.
 */
int sv_roce_decode(const struct sv_roce_path *path, const void *dgram, size_t len, void *out,
		   size_t cap, bool *ecn_marked);

/* The checks of sv_roce_decode that read nothing but the datagram's first
 * bytes and its length (the BTH's version and opcode, the length its
 * headers, pad and ICRC need): SV_ROCE_OK or an sv_roce_err.  No CRC. */
int sv_roce_check(const void *dgram, size_t len);

/* The ICRC of UDP payload dgram, its last 4 bytes (the ICRC's place) excluded. */
uint32_t sv_roce_icrc(const struct sv_roce_path *path, const void *dgram, size_t len);
/* The keyed tag of UDP payload dgram with path->tag_key (which must be set),
 * its last 4 bytes excluded; carried little-endian, as the ICRC. */
uint32_t sv_roce_tag(const struct sv_roce_path *path, const void *dgram, size_t len);

#endif
