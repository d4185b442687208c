/*
 * softverbs system enable|disable|status: softverbs' libraries as the
 * system's libibverbs.so.1 and librdmacm.so.1, for programs started without
 * `softverbs run`.  Opt-in, root only, and undone by `disable`.
 *
 * The mechanism is the dynamic linker's own configuration: a drop-in
 * /etc/ld.so.conf.d/00-softverbs.conf naming softverbs' library directory,
 * then ldconfig.  ldconfig reads the drop-ins in the order of their names,
 * and where two directories hold the same soname the cache answers with the
 * one read first; Debian lists the system's own directories in
 * x86_64-linux-gnu.conf (and the like), so the name sorts before those.
 * rdma-core's files are not touched: removing the drop-in and running
 * ldconfig again restores them exactly.  A program with its own RUNPATH, or
 * LD_LIBRARY_PATH, still decides for itself, as always.
 *
 * Not covered: the file-system view of the devices (/sys/class/infiniband,
 * /dev/infiniband), which needs the preload library that `softverbs run`
 * puts in LD_PRELOAD; middleware that looks there (UCX, Open MPI) still
 * needs `softverbs run`.
 */
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tool.h"

#define DROPIN "/etc/ld.so.conf.d/00-softverbs.conf"
#define DROPIN_MARK "# softverbs system enable"

static const char *ldconfig_path(void)
{
	/* root's PATH has sbin, a user's may not (status works for anyone) */
	if (access("/sbin/ldconfig", X_OK) == 0)
		return "/sbin/ldconfig";
	if (access("/usr/sbin/ldconfig", X_OK) == 0)
		return "/usr/sbin/ldconfig";
	return "ldconfig";
}

/* Rebuild the dynamic linker's cache; 0 on success. */
static int run_ldconfig(void)
{
	pid_t pid = fork();
	int status;

	if (pid < 0) {
		fprintf(stderr, "softverbs: fork: %s\n", strerror(errno));
		return -1;
	}
	if (pid == 0) {
		const char *ld = ldconfig_path();

		execlp(ld, ld, (char *)NULL);
		fprintf(stderr, "softverbs: cannot run %s: %s\n", ld, strerror(errno));
		_exit(127);
	}
	if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status)) {
		fprintf(stderr, "softverbs: ldconfig failed\n");
		return -1;
	}
	return 0;
}

/*
 * The file the dynamic linker's cache gives programs for libibverbs.so.1:
 * the first entry `ldconfig -p` prints for it (the cache is searched in that
 * order).  Empty when there is none.
 */
static void cached_libibverbs(char *out, size_t len)
{
	char cmd[64], line[PATH_MAX + 128];
	FILE *p;

	out[0] = '\0';
	snprintf(cmd, sizeof(cmd), "%s -p", ldconfig_path());
	p = popen(cmd, "r");
	if (!p)
		return;
	while (fgets(line, sizeof(line), p)) {
		const char *arrow = strstr(line, " => ");

		if (!out[0] && arrow && !strncmp(line + strspn(line, " \t"), "libibverbs.so.1 ", 16)) {
			snprintf(out, len, "%s", arrow + 4);
			out[strcspn(out, "\n")] = '\0';
		}
	}
	pclose(p);
}

/* The directory the drop-in names (empty if there is no drop-in). */
static void dropin_dir(char *out, size_t len)
{
	char line[PATH_MAX + 2];
	FILE *f = fopen(DROPIN, "r");

	out[0] = '\0';
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = '\0';
		if (line[0] == '/' && strlen(line) < len) {
			strcpy(out, line);
			break;
		}
	}
	fclose(f);
}

/* Does the cache give programs softverbs' libibverbs.so.1 now? */
static bool cache_is_softverbs(char *lib, size_t len)
{
	char dir[PATH_MAX];

	cached_libibverbs(lib, len);
	if (!lib[0] || !realpath(lib, dir))
		return false;
	return is_lib_dir(dirname(dir));
}

static int sys_enable(void)
{
	char dir[PATH_MAX], tmp[sizeof(DROPIN) + 16], lib[PATH_MAX];
	FILE *f;

	if (find_lib_dir(dir, sizeof(dir)))
		return 1;
	snprintf(tmp, sizeof(tmp), "%s.%d", DROPIN, (int)getpid());
	f = fopen(tmp, "w");
	if (!f) {
		fprintf(stderr, "softverbs: cannot write %s: %s%s\n", tmp, strerror(errno),
			errno == EACCES || errno == EPERM ? " (run as root)" : "");
		return 1;
	}
	fprintf(f,
		DROPIN_MARK ": softverbs' libraries are the system's libibverbs.so.1\n"
		"# and librdmacm.so.1 for every program.  Undo: softverbs system disable\n"
		"# (or remove this file and run ldconfig).\n"
		"%s\n",
		dir);
	/* in place whole or not at all: a half-written drop-in would misdirect ldconfig */
	if (fclose(f) || rename(tmp, DROPIN)) {
		fprintf(stderr, "softverbs: writing %s: %s\n", DROPIN, strerror(errno));
		unlink(tmp);
		return 1;
	}
	if (run_ldconfig())
		return 1;
	if (!cache_is_softverbs(lib, sizeof(lib))) {
		fprintf(stderr,
			"softverbs: %s is in place, but the dynamic linker still gives programs %s\n",
			DROPIN, lib[0] ? lib : "no libibverbs.so.1");
		return 1;
	}
	printf("enabled: programs started without `softverbs run` now load %s\n"
	       "(%s; undo with `softverbs system disable`)\n",
	       lib, DROPIN);
	return 0;
}

static int sys_disable(void)
{
	char lib[PATH_MAX];

	if (unlink(DROPIN)) {
		if (errno == ENOENT) {
			printf("not enabled (no %s)\n", DROPIN);
			return 0;
		}
		fprintf(stderr, "softverbs: cannot remove %s: %s%s\n", DROPIN, strerror(errno),
			errno == EACCES || errno == EPERM ? " (run as root)" : "");
		return 1;
	}
	if (run_ldconfig())
		return 1;
	if (cache_is_softverbs(lib, sizeof(lib))) {
		fprintf(stderr, "softverbs: %s removed, but the dynamic linker still gives "
				"programs softverbs' %s (another ld.so.conf entry names it)\n",
			DROPIN, lib);
		return 1;
	}
	printf("disabled: programs started without `softverbs run` load %s\n",
	       lib[0] ? lib : "no libibverbs.so.1 (rdma-core is not installed)");
	return 0;
}

static int sys_status(void)
{
	char dir[PATH_MAX], lib[PATH_MAX];
	bool ours = cache_is_softverbs(lib, sizeof(lib));

	dropin_dir(dir, sizeof(dir));
	if (dir[0])
		printf("%s names %s\n", DROPIN, dir);
	else
		printf("no %s\n", DROPIN);
	printf("programs started without `softverbs run` load: %s (%s)\n",
	       lib[0] ? lib : "no libibverbs.so.1", ours ? "softverbs" : "not softverbs");
	printf("system-wide: %s\n", ours ? "enabled" : "disabled");
	return 0;
}

int cmd_system(int argc, char **argv)
{
	if (argc != 1)
		return usage_error("system: expected one of enable, disable, status");
	if (!strcmp(argv[0], "enable"))
		return sys_enable();
	if (!strcmp(argv[0], "disable"))
		return sys_disable();
	if (!strcmp(argv[0], "status"))
		return sys_status();
	return usage_error("system: unknown action '%s'", argv[0]);
}
