/* softverbs' runtime directory (rundir.h). */
#include "stats/rundir.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* $XDG_RUNTIME_DIR/softverbs when XDG_RUNTIME_DIR is set, absolute and ours */
static int xdg_dir(char *out, size_t len)
{
	const char *xdg = getenv("XDG_RUNTIME_DIR");
	struct stat st;

	if (!xdg || *xdg != '/' || stat(xdg, &st) || st.st_uid != getuid())
		return -1;
	return (size_t)snprintf(out, len, "%s/softverbs", xdg) < len ? 0 : -1;
}

static int tmp_dir(char *out, size_t len)
{
	return (size_t)snprintf(out, len, "/tmp/softverbs-%u", (unsigned)getuid()) < len ? 0 : -1;
}

int sv_rundir(char *out, size_t len)
{
	if (!xdg_dir(out, len) && !sv_private_dir(out))
		return 0;
	if (tmp_dir(out, len)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	return sv_private_dir(out);
}

int sv_rundir_candidates(char out[2][1024])
{
	int n = 0;

	if (!xdg_dir(out[n], sizeof(out[n])))
		n++;
	if (!tmp_dir(out[n], sizeof(out[n])))
		n++;
	return n;
}
