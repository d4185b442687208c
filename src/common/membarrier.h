/*
 * membarrier(2)'s global barrier, for the asymmetric fences of the one-sided
 * path (engine/mem_export.h): the frequent side of a store/load handshake
 * takes no fence, and the rare side has every CPU that runs a registered
 * process pass a full barrier instead.
 */
#ifndef SV_MEMBARRIER_H
#define SV_MEMBARRIER_H

#include <stdbool.h>

/* This process is registered for MEMBARRIER_CMD_GLOBAL_EXPEDITED (asked once,
 * and again in a child of fork(), whose registration is its own). */
bool sv_membarrier_registered(void);
/* The kernel offers MEMBARRIER_CMD_GLOBAL_EXPEDITED. */
bool sv_membarrier_available(void);
/* Every running thread of every registered process passes a full memory
 * barrier before this returns; false if the call failed. */
bool sv_membarrier_global(void);

#endif
