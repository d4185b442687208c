/*
 * What librdmacm exports and softverbs does not implement yet.  Each entry
 * fails cleanly with the errno docs/COMPATIBILITY.md lists, changing nothing.
 * (Nothing is left here today: rsockets, the last entries, are in
 * rsocket.c, SOCK_STREAM and SOCK_DGRAM both.)
 */
#include <errno.h>
#include <rdma/rsocket.h>

#include "rdmacm/cm.h"
