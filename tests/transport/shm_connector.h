/*
 * A same-user peer of a device's shm transport, played by hand: what
 * src/transport/shm.c's connector does (sealed ring memory handed over the
 * device's abstract unix socket), for tests and fuzzers that then put into
 * the rings what shm.c would never put there.  The layout constants are
 * shm.c's (struct shm_setup, struct shm_area, SHM_*): change both together.
 */
#ifndef SVT_SHM_CONNECTOR_H
#define SVT_SHM_CONNECTOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SVT_SHM_MAGIC 0x5356534du
#define SVT_SHM_VERSION 3u
#define SVT_SHM_RING_BYTES (2u << 20)
#define SVT_SHM_MAP_LEN (4096u + 2u * SVT_SHM_RING_BYTES)
/* the connector's ring: its tail, its head, its data */
#define SVT_SHM_RING0_TAIL 64
#define SVT_SHM_RING0_HEAD 128
#define SVT_SHM_RING0_DATA 4096

/* A socket connected to the shm endpoint of port on 127.0.0.1. */
int svt_shm_socket(uint16_t port);
/* Ring memory as a connector makes it (a memfd of len bytes with the area's
 * magic), sealed against shrinking and growing if seal. */
int svt_shm_memory(size_t len, bool seal);
/* Connect and hand the device mfd with the setup message: the socket. */
int svt_shm_offer(uint16_t port, int mfd);
/* Did the device close fd within ms? */
bool svt_shm_closed_within(int fd, int ms);

/*
 * A shm connection to the device's endpoint port, as a byte stream: the
 * returned socket carries what a tcp connection would (frames behind their
 * length words), and a thread moves it into and out of the rings (inline
 * records only).  When the device closes the connection, the socket ends;
 * closing the socket closes the connection.  So the wire-format peers of
 * wire_peer.h speak over shm unchanged.
 */
int svt_shm_stream(uint16_t port);

#endif
