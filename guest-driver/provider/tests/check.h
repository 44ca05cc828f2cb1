/* SPDX-License-Identifier: GPL-2.0 OR Linux-OpenIB */
/*
 * What the provider's tests share: CHECK() counts a failed condition in
 * `failures` and names it, so one run reports every failure, not the first;
 * check_bytes() does the same for the first differing byte of an image.
 */
#ifndef VRNIC_TEST_CHECK_H
#define VRNIC_TEST_CHECK_H

#include <stddef.h>
#include <stdint.h>
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

static void check_bytes(const char *what, const void *got, const void *want,
			size_t len)
{
	const uint8_t *g = got, *w = want;
	size_t i;

	for (i = 0; i < len; i++) {
		if (g[i] != w[i]) {
			fprintf(stderr, "%s: byte %zu is 0x%02x, want 0x%02x\n",
				what, i, g[i], w[i]);
			failures++;
			return;
		}
	}
}

#endif
