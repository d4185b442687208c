/*
 * File-system helpers with no other dependency, compiled into every binary
 * that needs them (the libraries, the preload library, the tool).
 */
#ifndef SV_FS_H
#define SV_FS_H

/* A directory of ours: made 0700 if missing, refused (EPERM) if anyone else
 * owns it or could change it; 0 or -1 with errno. */
int sv_private_dir(const char *path);

#endif
