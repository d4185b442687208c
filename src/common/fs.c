/* File-system helpers shared by the libraries and the tool; see fs.h. */
#include "common/fs.h"

#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

int sv_private_dir(const char *path)
{
	struct stat st;

	if (mkdir(path, 0700) && errno != EEXIST)
		return -1;
	if (lstat(path, &st))
		return -1;
	if (!S_ISDIR(st.st_mode) || st.st_uid != getuid() || (st.st_mode & 022)) {
		errno = EPERM;
		return -1;
	}
	return 0;
}
