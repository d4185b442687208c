/*
 * What the parts of the softverbs tool share (tools/softverbs.c holds
 * main, run, devices and version; each other command has its own file).
 */
#ifndef SV_TOOL_H
#define SV_TOOL_H

#include <stdbool.h>
#include <stddef.h>

enum { EXIT_USAGE = 2, EXIT_EXEC_FAILED = 126, EXIT_NOT_FOUND = 127 };

/* Bad command line: say what is wrong, show the usage, return exit status 2. */
int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Does dir hold softverbs' libraries (libibverbs.so.1 and the preload library)? */
bool is_lib_dir(const char *dir);
/* The directory holding softverbs' libraries (absolute); 0 or -1 (said on stderr). */
int find_lib_dir(char *out, size_t out_size);

/* softverbs system enable|disable|status (system.c) */
int cmd_system(int argc, char **argv);
/* softverbs stat, softverbs top (stat.c) */
int cmd_stat(int argc, char **argv);
int cmd_top(int argc, char **argv);

#endif
