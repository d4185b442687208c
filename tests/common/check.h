/*
 * check.h - the one check of the white-box tests built from softverbs'
 * sources without libibverbs (and so without sv_test): a failed condition
 * prints "file:line: check failed: <condition>" and exits 1.
 */
#ifndef SV_CHECK_H
#define SV_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define CHECK(c)                                                                     \
	do {                                                                         \
		if (!(c)) {                                                          \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #c); \
			exit(1);                                                     \
		}                                                                    \
	} while (0)

#endif
