/*
 * softverbs' runtime directory, shared by libibverbs (the file-system view,
 * the counters segments), the preload library and the tool:
 * $XDG_RUNTIME_DIR/softverbs when that directory is the user's own, else
 * /tmp/softverbs-UID.  Made mode 0700, and refused when someone else owns
 * it or could change it.
 */
#ifndef SV_RUNDIR_H
#define SV_RUNDIR_H

#include <stddef.h>
#include "common/fs.h" /* sv_private_dir */

/* The runtime directory, made if missing; 0, or -1 with errno set. */
int sv_rundir(char *out, size_t len);
/*
 * Where readers look, made or not: the runtime directory as the rules above
 * give it to this process, and the other of the two places (a process with
 * another XDG_RUNTIME_DIR, from cron, say, writes to /tmp).  Returns how many
 * of the two were written to out[0..1].
 */
int sv_rundir_candidates(char out[2][1024]);

#endif
