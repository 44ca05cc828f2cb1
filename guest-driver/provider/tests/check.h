/* SPDX-License-Identifier: GPL-2.0 OR Linux-OpenIB */
/*
 * What the provider's tests share: CHECK() counts a failed condition in
 * `failures` and names it, so one run reports every failure, not the first.
 */
#ifndef VRNIC_TEST_CHECK_H
#define VRNIC_TEST_CHECK_H

#include <stdio.h>

static int failures;
#define CHECK(cond)                                                          \
	do {                                                                 \
		if (!(cond)) {                                               \
			fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, \
				__LINE__, #cond);                            \
			failures++;                                          \
		}                                                            \
	} while (0)

#endif
