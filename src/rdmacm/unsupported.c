/*
 * What librdmacm exports and softverbs does not implement yet.  Each entry
 * fails cleanly with the errno docs/COMPATIBILITY.md lists, changing nothing.
 * (Nothing is left here today: rsockets, the last entries, are in rsocket.c;
 * what they do not do, SOCK_DGRAM, fails there.)
 */
#include <errno.h>
#include <rdma/rsocket.h>

#include "rdmacm/cm.h"
