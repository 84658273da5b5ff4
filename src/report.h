/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* report.h: what the programs that print figures share (see report.c). */
#ifndef RL_REPORT_H
#define RL_REPORT_H

#include <glib.h>

/* Appends @s as a JSON string ("null" for NULL); bytes that are not UTF-8 become
 * U+FFFD, control characters are escaped. */
void rl_json_append_string (GString *out, const char *s);

/* Appends @v as a JSON number ("null" when it is not finite). */
void rl_json_append_number (GString *out, double v);

/* The nearest-rank percentile of the @n sorted values @sorted: @per_mille 500 is the
 * median, 990 the 99th percentile. @n must be > 0. */
gint64 rl_percentile (const gint64 *sorted, guint n, guint per_mille);

/* Sorts @n values in place, ascending. */
void rl_sort_int64 (gint64 *values, guint n);

#endif /* RL_REPORT_H */
