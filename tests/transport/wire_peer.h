/*
 * A peer that speaks softverbs' wire format itself, over TCP, for tests
 * that must send what softverbs would never send: a fake responder that a
 * real QP connects to (it listens where the QPs of an unclaimed block of QP
 * numbers are reached), or an outsider that connects to a real device's
 * endpoint under an identity of its own choosing.
 *
 * The tests that use it set SOFTVERBS_PORT=0 before opening a device, so
 * that a QP reaches its peer's own port rather than the host's shared one.
 * A fake responder is reached over tcp; an outsider connects over tcp or,
 * with SVT_WIRE_VIA=shm, over shm.
 */
#ifndef SVT_WIRE_PEER_H
#define SVT_WIRE_PEER_H

#include "wire/opcode.h"
#include "wire/wire.h"

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct svt_wire_listener {
	int fd;
	uint32_t qpn; /* a QP number softverbs reaches here */
};

/* Listen on the port of a block of QP numbers nobody on this host claims
 * (and load the secret this user's devices use: the peer holds it). */
void svt_wire_listen(struct svt_wire_listener *l);
/*
 * A block of QP numbers for a peer the test plays but that is not there
 * (a QP "connected" to it, an endpoint a connection claims to be): its TCP
 * port on 127.0.0.1 is bound here for the rest of the process's life, so
 * that no context of the host takes that block meanwhile (contexts draw
 * their blocks at random, and pass over one whose port is held).
 */
uint32_t svt_wire_spare_block(void);
/* Accept a connection and go through the handshake; the connected socket. */
int svt_wire_accept(struct svt_wire_listener *l);
/*
 * Connect to the endpoint of a real device's QP qpn on 127.0.0.1 and say
 * HELLO as the endpoint 127.0.0.1:claim_port; proves the secret first and
 * then checks the device's AUTH (the handshake, transport/auth.h).
 */
int svt_wire_connect(uint32_t qpn, uint16_t claim_port);
/* The same; know_secret false: an AUTH that proves nothing (the device
 * closes the connection, and sends no AUTH of its own). */
int svt_wire_connect_as(uint32_t qpn, uint16_t claim_port, bool know_secret);
/*
 * A connection over tcp from an address of our choosing, whose HELLO names
 * any endpoint: the lower-level form of svt_wire_connect_as.
 */
struct svt_wire_spec {
	uint32_t qpn;            /* the device endpoint it is for (to_port) */
	struct in_addr from;     /* the source address (INADDR_ANY: the kernel's) */
	struct in_addr claim;    /* the endpoint address its HELLO names ... */
	uint16_t claim_port;     /* ... and port */
	uint16_t port;           /* the TCP port it dials on 127.0.0.1 (0: the
				    endpoint's own), e.g. the shared port */
	bool handoff;            /* instead of dialling the device: accept a
				    connection from `from` on a socket of our own
				    and hand it, with the HELLO, to the endpoint's
				    hand-off socket, as the process that took it on
				    the shared port would (transport/tcp.c) */
	bool know_secret;
};
/* The socket, through the handshake; -1 when the device closed the
 * connection before it was done (a HELLO refused). */
int svt_wire_connect_spec(const struct svt_wire_spec *s);

/* With SVT_WIRE_VIA=shm, connections made by svt_wire_connect(_as) go over
 * the device's shm transport (shm_connector.h) instead of tcp, and the
 * device must listen on shm too (SOFTVERBS_TRANSPORT unset or auto). */
bool svt_wire_via_shm(void);

/* A raw connection to the endpoint of qpn (tcp, or shm with
 * SVT_WIRE_VIA=shm), before any handshake. */
int svt_wire_dial(uint32_t qpn);
/* A HELLO from the endpoint 127.0.0.1:port for to_port, with a fresh nonce
 * and no share (auth.h makes that). */
struct sv_hello;
void svt_wire_hello_make(struct sv_hello *h, uint16_t port, uint16_t to_port);

bool svt_wire_send(int fd, const void *pkt, size_t len);
/* All n bytes of buf on a stream socket (false: it ended or failed). */
bool svt_send_all(int fd, const void *buf, size_t n);
/* The next frame into buf (at most cap bytes): its length, or -1 when the
 * connection ended; timeout_ms < 0 waits for ever, 0 when nothing came. */
long svt_wire_recv(int fd, void *buf, size_t cap, int timeout_ms);

/* A BTH into pkt; the header's length.  The last packet of a SEND or
 * WRITE asks for an ACK; _flags: with those BTH flags instead
 * (SV_BTH_ACKREQ, SV_BTH_SE). */
size_t svt_wire_bth(uint8_t *pkt, uint8_t opcode, uint32_t dqpn, uint32_t psn);
size_t svt_wire_bth_flags(uint8_t *pkt, uint8_t opcode, uint8_t flags, uint32_t dqpn,
			  uint32_t psn);

#endif
