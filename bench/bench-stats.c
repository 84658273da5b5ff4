/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* bench-stats.c: the clocks, the percentiles and the memory readings of redislock-bench.
 *
 * Every section times with these and nothing else, so that all figures mean the same
 * thing: wall time is CLOCK_MONOTONIC (which the two processes of the hand-off share,
 * so their timestamps subtract), CPU time is the whole process's, and a distribution is
 * the nearest-rank p50 and p99 of samples that each cover a known number of operations
 * (one operation for round trips, a batch for operations too short to time alone).
 * Memory is the resident set size from /proc, read after malloc_trim so that a delta
 * shows what one phase allocated.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "bench.h"
#include "report.h"

gint64
now_ns (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (gint64)ts.tv_sec * G_GINT64_CONSTANT (1000000000) + ts.tv_nsec;
}

gint64
cpu_ns (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (gint64)ts.tv_sec * G_GINT64_CONSTANT (1000000000) + ts.tv_nsec;
}

static int
cmp_double (const void *a, const void *b)
{
  double x = *(const double *)a;
  double y = *(const double *)b;

  return (x > y) - (x < y);
}

double
median (double *v, guint n)
{
  if (n == 0)
    return NAN;
  qsort (v, n, sizeof (double), cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

Dist
dist_of (gint64 *samples, guint n, guint ops_per_sample)
{
  Dist d = { 0, NAN, NAN, NAN, NAN };
  double sum = 0;
  guint i;

  if (n == 0)
    return d;
  rl_sort_int64 (samples, n);
  for (i = 0; i < n; i++)
    sum += (double)samples[i];
  d.n = n;
  d.p50 = (double)rl_percentile (samples, n, 500) / ops_per_sample;
  d.p99 = (double)rl_percentile (samples, n, 990) / ops_per_sample;
  d.max = (double)samples[n - 1] / ops_per_sample;
  d.mean = sum / n / ops_per_sample;
  return d;
}

gint64
rss_bytes (void)
{
  g_autofree char *contents = NULL;
  long long size = 0, resident = 0;

  if (!g_file_get_contents ("/proc/self/statm", &contents, NULL, NULL))
    return -1;
  if (sscanf (contents, "%lld %lld", &size, &resident) != 2)
    return -1;
  return (gint64)resident * sysconf (_SC_PAGESIZE);
}

void
trim_heap (void)
{
#ifdef __GLIBC__
  malloc_trim (0);
#endif
}
