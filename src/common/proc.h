/*
 * A process's identity over time: its start time, which tells a live
 * process from a later one that reused its pid.  Header-only, as the
 * stats reader (built into the preload library and the tool too) and the
 * QPN registry both need it.
 */
#ifndef SV_PROC_H
#define SV_PROC_H

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* The start time of pid (clock ticks after boot), and its state letter (R,
 * S, Z...) when state is not NULL; 0 if unknown. */
static inline uint64_t sv_proc_stat(int pid, char *state)
{
	char path[64], buf[1024];
	unsigned long long start = 0;
	const char *p;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	/* the command name may hold anything, spaces and ')' too: fields
	 * resume after the last ')'; start time is field 22, the 20th after it */
	p = strrchr(buf, ')');
	if (!p || p[1] != ' ')
		return 0;
	if (state)
		*state = p[2];
	for (int field = 2; field < 22 && p; field++)
		p = strchr(p + 1, ' ');
	if (!p || sscanf(p + 1, "%llu", &start) != 1)
		return 0;
	return start;
}

#endif
