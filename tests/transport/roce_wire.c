/*
 * transport_roce_wire: the RoCEv2 packet format (src/transport/roce_wire.c).
 *
 * Without arguments, self-checks:
 *   - softverbs packets of every header layout (SEND with and without
 *     immediate, WRITE FIRST/MIDDLE/LAST with RETH, READ request, READ
 *     response with AETH, ACK, CMP_SWAP and FETCH_ADD with AtomicETH,
 *     ATOMIC ACK, SEND with invalidate, UD SEND with DETH and immediate),
 *     payloads of 0 to 13 bytes (every pad count), over IPv4 and IPv6, come
 *     back from encode + decode byte for byte, SE and AckReq included
 *   - the IB BTH is as the spec lays it out: PadCnt, AckReq in the PSN's
 *     word, transport version 0, the ICRC little-endian at the end
 *   - the ICRC covers the payload, the addresses, the ports, the BTH: a
 *     change to any refuses the datagram (SV_ROCE_BAD_ICRC); what routers
 *     may change (FECN, here) does not, and FECN is reported
 *   - transport version 1, an unknown opcode, a datagram shorter than its
 *     headers are refused; a GPU reference is never encoded
 *   - with a tag key (a job with SOFTVERBS_SECRET): the same round trips;
 *     the tag is what roce_wire.h says (computed here from libsodium's
 *     SipHash directly); a change to any byte it covers, to an address or
 *     port, or another key refuses the datagram (SV_ROCE_BAD_TAG), FECN
 *     does not; a datagram with a valid ICRC is refused with a key, a
 *     tagged one without
 *
 * --emit FILE writes encoded datagrams for tests/transport/roce_scapy.py,
 * which decodes them with scapy's RoCE layer (its own ICRC code);
 * --decode FILE decodes datagrams that script built with scapy.
 * One line each: hex(udp payload) src dst sport opcode dqpn psn se ackreq plen
 * (IPv4 addresses, dotted).
 */
#include "transport/roce_wire.h"
#include "wire/opcode.h"
#include "wire/wire.h"

#include <arpa/inet.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

#define CHECK(c, ...)                                                                          \
	do {                                                                                   \
		if (!(c)) {                                                                    \
			fprintf(stderr, "%s:%d: FAIL: ", __FILE__, __LINE__);                   \
			fprintf(stderr, __VA_ARGS__);                                          \
			fprintf(stderr, "\n");                                                 \
			failures++;                                                            \
		}                                                                              \
	} while (0)

static const uint8_t opcodes[] = {
	SV_OP_RC | SV_OP_SEND_ONLY,	  SV_OP_RC | SV_OP_SEND_ONLY_IMM,
	SV_OP_RC | SV_OP_SEND_FIRST,	  SV_OP_RC | SV_OP_WRITE_FIRST,
	SV_OP_RC | SV_OP_WRITE_MIDDLE,	  SV_OP_RC | SV_OP_WRITE_LAST_IMM,
	SV_OP_RC | SV_OP_READ_REQUEST,	  SV_OP_RC | SV_OP_READ_RESP_FIRST,
	SV_OP_RC | SV_OP_READ_RESP_MIDDLE, SV_OP_RC | SV_OP_ACK,
	SV_OP_RC | SV_OP_CMP_SWAP,	  SV_OP_RC | SV_OP_FETCH_ADD,
	SV_OP_RC | SV_OP_ATOMIC_ACK,	  SV_OP_RC | SV_OP_SEND_ONLY_INV,
	SV_OP_UC | SV_OP_WRITE_ONLY,	  SV_OP_UD | SV_OP_SEND_ONLY_IMM,
};

/* A softverbs packet: opcode's headers (filled with a pattern), then plen bytes. */
static size_t make_packet(uint8_t *p, uint8_t opcode, uint32_t dqpn, uint32_t psn, bool se,
			  bool ackreq, size_t plen, unsigned seed)
{
	const struct sv_opcode_info *op = sv_opcode_info(opcode);
	struct sv_bth *bth = (void *)p;
	size_t hl = op->hdr_len;

	if (!(op->mask & SV_OPF_PAYLOAD))
		plen = 0;
	for (size_t i = sizeof(*bth); i < hl + plen; i++)
		p[i] = (uint8_t)(seed * 31 + i * 7);
	if (op->off_deth) {
		struct sv_deth *d = (void *)(p + op->off_deth);

		d->sqpn = htonl(0x123456); /* 24 bits: the reserved byte is 0 */
	}
	bth->opcode = opcode;
	bth->flags = (uint8_t)((se ? SV_BTH_SE : 0) | (ackreq ? SV_BTH_ACKREQ : 0));
	bth->pkey = 0xffff;
	bth->dqpn = htonl(dqpn);
	bth->psn = htonl(psn);
	return hl + plen;
}

static void path_v4(struct sv_roce_path *path, const char *src, const char *dst, uint16_t sport)
{
	memset(path, 0, sizeof(*path));
	inet_pton(AF_INET, src, path->src);
	inet_pton(AF_INET, dst, path->dst);
	path->sport = sport;
	path->dport = SV_ROCE_UDP_PORT;
}

static void round_trips(const struct sv_roce_path *path)
{
	uint8_t pkt[256], dg[300], back[300];

	for (size_t k = 0; k < sizeof(opcodes); k++) {
		for (size_t plen = 0; plen <= 13; plen++) {
			const struct sv_opcode_info *op = sv_opcode_info(opcodes[k]);
			bool se = plen & 1, ack = plen & 2;
			size_t len = make_packet(pkt, opcodes[k], 0xabcdef, 0x654321 + (uint32_t)plen,
						 se, ack, plen, (unsigned)k);
			size_t pay = len - op->hdr_len, pad = (4 - pay % 4) % 4;
			size_t n = sv_roce_encode(path, pkt, len, dg, sizeof(dg));
			bool ecn = true;
			int m;

			CHECK(n == len + pad + 4, "%s plen %zu: encoded %zu bytes, expected %zu", op->name,
			      plen, n, len + pad + 4);
			if (n != len + pad + 4)
				continue;
			/* the IB BTH, as the spec lays it out */
			CHECK(dg[0] == opcodes[k], "opcode");
			CHECK(dg[1] == (uint8_t)((se ? 0x80 : 0) | pad << 4), "%s: BTH byte 1 %#x",
			      op->name, dg[1]);
			CHECK(dg[4] == 0 && dg[5] == 0xab && dg[6] == 0xcd && dg[7] == 0xef,
			      "DestQP word");
			CHECK(dg[8] == (ack ? 0x80 : 0) && dg[9] == 0x65 && dg[10] == 0x43 &&
				      dg[11] == (uint8_t)(0x21 + plen),
			      "AckReq/PSN word");
			for (size_t i = 0; i < pad; i++)
				CHECK(dg[len + i] == 0, "pad byte not zero");
			{
				uint32_t icrc = path->tag_key ? sv_roce_tag(path, dg, n)
							: sv_roce_icrc(path, dg, n);

				CHECK(dg[n - 4] == (uint8_t)icrc && dg[n - 1] == (uint8_t)(icrc >> 24),
				      "ICRC not little-endian at the end");
			}
			m = sv_roce_decode(path, dg, n, back, sizeof(back), &ecn);
			CHECK(m == (int)len, "%s plen %zu: decoded %d, expected %zu", op->name, plen, m,
			      len);
			CHECK(m != (int)len || !memcmp(back, pkt, len), "%s plen %zu: not the same packet",
			      op->name, plen);
			CHECK(!ecn, "FECN reported on an unmarked packet");
		}
	}
}

static void refusals(void)
{
	struct sv_roce_path path, other;
	uint8_t pkt[256], dg[300], bad[300], back[300];
	size_t len = make_packet(pkt, SV_OP_RC | SV_OP_WRITE_ONLY, 77, 1000, false, true, 9, 3);
	size_t n;
	bool ecn = false;

	path_v4(&path, "10.0.0.1", "10.0.0.2", 49152);
	n = sv_roce_encode(&path, pkt, len, dg, sizeof(dg));
	CHECK(n > 0, "encode");
	/* every byte the ICRC covers, flipped in turn, is noticed (but FECN/BECN) */
	for (size_t i = 0; i < n - 4; i++) {
		memcpy(bad, dg, n);
		bad[i] ^= 0x01;
		if (i == 1) /* TVer's low bit: refused as a version first */
			CHECK(sv_roce_decode(&path, bad, n, back, sizeof(back), NULL) ==
				      SV_ROCE_BAD_VERSION,
			      "TVer 1 accepted");
		else if (i == 0) /* another opcode: unknown, or the ICRC */
			CHECK(sv_roce_decode(&path, bad, n, back, sizeof(back), NULL) < 0,
			      "opcode changed, accepted");
		else if (i != 4)
			CHECK(sv_roce_decode(&path, bad, n, back, sizeof(back), NULL) ==
				      SV_ROCE_BAD_ICRC,
			      "byte %zu changed, accepted", i);
	}
	/* FECN set on the way (a router's ECN mark turned into the BTH's): still good */
	memcpy(bad, dg, n);
	bad[4] |= 0x80;
	CHECK(sv_roce_decode(&path, bad, n, back, sizeof(back), &ecn) == (int)len && ecn,
	      "FECN-marked packet refused or not reported");
	/* the ICRC itself */
	memcpy(bad, dg, n);
	bad[n - 2] ^= 0x40;
	CHECK(sv_roce_decode(&path, bad, n, back, sizeof(back), NULL) == SV_ROCE_BAD_ICRC,
	      "bad ICRC accepted");
	/* another address or port on the way: not the packet that was sent */
	other = path;
	other.src[3] = 9;
	CHECK(sv_roce_decode(&other, dg, n, back, sizeof(back), NULL) == SV_ROCE_BAD_ICRC,
	      "other source address accepted");
	other = path;
	other.sport = 49153;
	CHECK(sv_roce_decode(&other, dg, n, back, sizeof(back), NULL) == SV_ROCE_BAD_ICRC,
	      "other source port accepted");
	other = path;
	other.v6 = true;
	CHECK(sv_roce_decode(&other, dg, n, back, sizeof(back), NULL) == SV_ROCE_BAD_ICRC,
	      "IPv6 pseudo-header accepted for an IPv4 packet");
	/* a sender with a running IPv4 identification (Linux's rxe): the ICRC
	 * covers it, the receiver cannot see it, and takes the packet if some
	 * identification makes the ICRC right */
	{
		uint8_t rx[300];
		size_t m;

		other = path;
		other.ip_id = 0x5a3c;
		m = sv_roce_encode(&other, pkt, len, rx, sizeof(rx));
		CHECK(m == n && memcmp(rx + n - 4, dg + n - 4, 4), "identification not covered by the ICRC");
		CHECK(sv_roce_decode(&path, rx, m, back, sizeof(back), NULL) == (int)len &&
			      !memcmp(back, pkt, len),
		      "a packet sent with IP identification 0x5a3c refused");
		/* ... but not one corrupted besides (every byte of the payload) */
		for (size_t i = 12 + 16; i < m - 4; i++) {
			memcpy(bad, rx, m);
			bad[i] ^= 0x10;
			CHECK(sv_roce_decode(&path, bad, m, back, sizeof(back), NULL) ==
				      SV_ROCE_BAD_ICRC,
			      "byte %zu changed under identification 0x5a3c, accepted", i);
		}
		/* nor with another source address */
		other.src[3] = 9;
		CHECK(sv_roce_decode(&other, rx, m, back, sizeof(back), NULL) == SV_ROCE_BAD_ICRC,
		      "identification and source address both changed, accepted");
	}
	/* truncated: shorter than the RETH, or than BTH + ICRC */
	CHECK(sv_roce_decode(&path, dg, 12 + 8, back, sizeof(back), NULL) == SV_ROCE_SHORT,
	      "datagram shorter than its RETH accepted");
	CHECK(sv_roce_decode(&path, dg, 15, back, sizeof(back), NULL) == SV_ROCE_SHORT,
	      "datagram shorter than BTH + ICRC accepted");
	CHECK(sv_roce_decode(&path, dg, n, back, len - 1, NULL) == SV_ROCE_NO_ROOM,
	      "output buffer overrun");
	/* an opcode softverbs does not know (RD class, CNP) */
	memcpy(bad, dg, n);
	bad[0] = 0x40;
	CHECK(sv_roce_decode(&path, bad, n, back, sizeof(back), NULL) == SV_ROCE_BAD_OPCODE,
	      "RD opcode accepted");
	/* a GPU reference names memory of this host: never on a RoCE wire */
	pkt[1] |= SV_BTH_GPUREF;
	CHECK(sv_roce_encode(&path, pkt, len, dg, sizeof(dg)) == 0, "GPU reference encoded");
	pkt[1] &= (uint8_t)~SV_BTH_GPUREF;
	/* no room */
	CHECK(sv_roce_encode(&path, pkt, len, dg, len + 2) == 0, "encoded past cap");
}

/* The tag as roce_wire.h specifies it, from SipHash itself. */
static uint32_t spec_tag(const struct sv_roce_path *p, const uint8_t *dg, size_t n)
{
	uint8_t h[8 + 1 + 32 + 6 + 12], k[16], t[8];
	uint16_t udplen = htons((uint16_t)(8 + n)), sp = htons(p->sport), dp = htons(p->dport);

	memset(h, 0, sizeof(h));
	memcpy(h, "svroce1", 8);
	h[8] = p->v6 ? 6 : 4;
	memcpy(h + 9, p->src, p->v6 ? 16 : 4);
	memcpy(h + 25, p->dst, p->v6 ? 16 : 4);
	memcpy(h + 41, &sp, 2);
	memcpy(h + 43, &dp, 2);
	memcpy(h + 45, &udplen, 2);
	memcpy(h + 47, dg, 12);
	h[47 + 4] = 0;
	crypto_shorthash_siphashx24(k, h, sizeof(h), p->tag_key);
	crypto_shorthash(t, dg + 12, n - 12 - 4, k);
	return (uint32_t)t[0] | (uint32_t)t[1] << 8 | (uint32_t)t[2] << 16 | (uint32_t)t[3] << 24;
}

/* The last 4 bytes of a datagram, little-endian: its ICRC or tag. */
static uint32_t carried(const uint8_t *dg, size_t n)
{
	return (uint32_t)dg[n - 4] | (uint32_t)dg[n - 3] << 8 | (uint32_t)dg[n - 2] << 16 |
	       (uint32_t)dg[n - 1] << 24;
}

static void tagged(const struct sv_roce_path *v4, const struct sv_roce_path *v6)
{
	static const uint8_t key[SV_ROCE_TAG_KEY] = "0123456789abcdef",
			     key2[SV_ROCE_TAG_KEY] = "0123456789abcdeF";
	struct sv_roce_path path = *v4, other, plain = *v4, path6 = *v6;
	uint8_t pkt[256], dg[300], bad[300], back[300];
	size_t len = make_packet(pkt, SV_OP_RC | SV_OP_WRITE_ONLY, 77, 1000, false, true, 9, 3);
	size_t n, m;
	bool ecn = false;
	uint32_t tag;

	path.tag_key = key;
	path6.tag_key = key;
	round_trips(&path);
	round_trips(&path6);
	n = sv_roce_encode(&path, pkt, len, dg, sizeof(dg));
	CHECK(n > 0, "tagged encode");
	tag = carried(dg, n);
	CHECK(tag == spec_tag(&path, dg, n), "the tag is not roce_wire.h's construction");
	CHECK(tag != sv_roce_icrc(&plain, dg, n), "the tag is the ICRC");
	m = sv_roce_encode(&path6, pkt, len, bad, sizeof(bad));
	CHECK(m == n && !memcmp(bad, dg, n - 4), "IPv6 changed more than the tag");
	CHECK(carried(bad, n) == spec_tag(&path6, bad, n),
	      "the IPv6 tag is not roce_wire.h's construction");
	/* every byte the tag covers, flipped in turn, is noticed (but FECN/BECN) */
	for (size_t i = 2; i < n; i++) {
		if (i == 4)
			continue;
		memcpy(bad, dg, n);
		bad[i] ^= 0x01;
		CHECK(sv_roce_decode(&path, bad, n, back, sizeof(back), NULL) == SV_ROCE_BAD_TAG,
		      "tagged: byte %zu changed, accepted", i);
	}
	memcpy(bad, dg, n);
	bad[4] |= 0x80;
	CHECK(sv_roce_decode(&path, bad, n, back, sizeof(back), &ecn) == (int)len && ecn &&
		      !memcmp(back, pkt, len),
	      "tagged: FECN-marked packet refused or not reported");
	other = path;
	other.src[3] = 9;
	CHECK(sv_roce_decode(&other, dg, n, back, sizeof(back), NULL) == SV_ROCE_BAD_TAG,
	      "tagged: other source address accepted");
	other = path;
	other.dst[0] = 11;
	CHECK(sv_roce_decode(&other, dg, n, back, sizeof(back), NULL) == SV_ROCE_BAD_TAG,
	      "tagged: other destination address accepted");
	other = path;
	other.sport++;
	CHECK(sv_roce_decode(&other, dg, n, back, sizeof(back), NULL) == SV_ROCE_BAD_TAG,
	      "tagged: other source port accepted");
	other = path;
	other.ip_id = 0x1234; /* not covered: the kernel's */
	CHECK(sv_roce_decode(&other, dg, n, back, sizeof(back), NULL) == (int)len,
	      "tagged: refused for the IPv4 identification");
	other = path;
	other.tag_key = key2;
	CHECK(sv_roce_decode(&other, dg, n, back, sizeof(back), NULL) == SV_ROCE_BAD_TAG,
	      "tagged: accepted with another key");
	/* a standard RoCEv2 datagram (rxe's) with a key, a tagged one without */
	CHECK(sv_roce_decode(&plain, dg, n, back, sizeof(back), NULL) == SV_ROCE_BAD_ICRC,
	      "a tagged datagram passed as an ICRC");
	m = sv_roce_encode(&plain, pkt, len, bad, sizeof(bad));
	CHECK(sv_roce_decode(&path, bad, m, back, sizeof(back), NULL) == SV_ROCE_BAD_TAG,
	      "a datagram with a valid ICRC passed the tag check");
	/* the tag binds the header to the payload: another packet's payload
	 * under this header, or this payload under a header with another PSN */
	{
		uint8_t pkt2[256], dg2[300];
		size_t len2 = make_packet(pkt2, SV_OP_RC | SV_OP_WRITE_ONLY, 77, 1001, false, true, 9,
					  4);

		CHECK(len2 == len && sv_roce_encode(&path, pkt2, len2, dg2, sizeof(dg2)) == n,
		      "second packet");
		memcpy(bad, dg, 12);
		memcpy(bad + 12, dg2 + 12, n - 12);
		CHECK(sv_roce_decode(&path, bad, n, back, sizeof(back), NULL) == SV_ROCE_BAD_TAG,
		      "tagged: a header spliced onto another packet's payload and tag accepted");
		memcpy(bad, dg2, 12);
		memcpy(bad + 12, dg + 12, n - 12);
		CHECK(sv_roce_decode(&path, bad, n, back, sizeof(back), NULL) == SV_ROCE_BAD_TAG,
		      "tagged: another PSN's header on this payload and tag accepted");
	}
}

static void hex(FILE *f, const uint8_t *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		fprintf(f, "%02x", b[i]);
}

static int emit(const char *file)
{
	FILE *f = fopen(file, "w");
	struct sv_roce_path path;
	uint8_t pkt[256], dg[300];

	if (!f)
		return 1;
	path_v4(&path, "10.211.5.1", "10.211.5.2", 50000);
	for (size_t k = 0; k < sizeof(opcodes); k++) {
		for (size_t plen = 0; plen <= 5; plen++) {
			const struct sv_opcode_info *op = sv_opcode_info(opcodes[k]);
			uint32_t dqpn = 0x10000 + (uint32_t)k, psn = 0xfffff0 + (uint32_t)plen;
			bool se = plen & 1, ack = (plen & 2) != 0;
			size_t len = make_packet(pkt, opcodes[k], dqpn, psn, se, ack, plen, (unsigned)k);
			size_t n;

			path.sport = (uint16_t)(50000 + k); /* a source port per "QP" */
			n = sv_roce_encode(&path, pkt, len, dg, sizeof(dg));
			hex(f, dg, n);
			fprintf(f, " 10.211.5.1 10.211.5.2 %u %u %u %u %d %d %zu\n", path.sport,
				opcodes[k], dqpn, psn, se, ack, len - op->hdr_len);
		}
	}
	return fclose(f) ? 1 : 0;
}

static int decode_file(const char *file)
{
	FILE *f = fopen(file, "r");
	char hexs[1024], src[64], dst[64];
	unsigned sport, opcode, dqpn, psn, se, ack;
	size_t plen;
	int lines = 0;

	if (!f)
		return 1;
	while (fscanf(f, "%1023s %63s %63s %u %u %u %u %u %u %zu", hexs, src, dst, &sport, &opcode,
		      &dqpn, &psn, &se, &ack, &plen) == 10) {
		uint8_t dg[512], back[512];
		size_t n = strlen(hexs) / 2;
		struct sv_roce_path path;
		const struct sv_opcode_info *op = sv_opcode_info((uint8_t)opcode);
		int m;

		for (size_t i = 0; i < n; i++)
			sscanf(hexs + 2 * i, "%2hhx", &dg[i]);
		path_v4(&path, src, dst, (uint16_t)sport);
		m = sv_roce_decode(&path, dg, n, back, sizeof(back), NULL);
		lines++;
		CHECK(op && m == (int)(op->hdr_len + plen), "scapy's %s (%u): decoded %d",
		      op ? op->name : "?", opcode, m);
		if (!op || m != (int)(op->hdr_len + plen))
			continue;
		{
			const struct sv_bth *b = (const void *)back;

			CHECK(b->opcode == opcode && ntohl(b->dqpn) == dqpn && ntohl(b->psn) == psn,
			      "scapy's %s: opcode/dqpn/psn differ", op->name);
			CHECK(!!(b->flags & SV_BTH_SE) == !!se && !!(b->flags & SV_BTH_ACKREQ) == !!ack,
			      "scapy's %s: SE/AckReq differ", op->name);
		}
	}
	fclose(f);
	CHECK(lines > 0, "no datagram in %s", file);
	printf("decoded %d datagrams built by scapy\n", lines);
	return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
	struct sv_roce_path v4, v6;

	if (argc == 3 && !strcmp(argv[1], "--emit"))
		return emit(argv[2]);
	if (argc == 3 && !strcmp(argv[1], "--decode"))
		return decode_file(argv[2]);
	path_v4(&v4, "192.168.7.1", "192.168.7.2", 0xc123);
	memset(&v6, 0, sizeof(v6));
	v6.v6 = true;
	inet_pton(AF_INET6, "fe80::5054:ff:fe12:3456", v6.src);
	inet_pton(AF_INET6, "fe80::5054:ff:fe12:3457", v6.dst);
	v6.sport = 0xc124;
	v6.dport = SV_ROCE_UDP_PORT;
	round_trips(&v4);
	round_trips(&v6);
	refusals();
	if (sodium_init() < 0) {
		fprintf(stderr, "libsodium failed to start\n");
		return 1;
	}
	tagged(&v4, &v6);
	if (failures) {
		fprintf(stderr, "%d checks failed\n", failures);
		return 1;
	}
	printf("roce_wire: all checks passed\n");
	return 0;
}
