/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* section-raw.c: the raw limit, what Redis itself costs on plain hiredis connections.
 *
 * Every other section divides by a baseline of this kind, so this one shows the
 * baselines alone: the reference round trip (EVALSHA of `return 1` on one connection,
 * timed one call at a time by the run before any section, see redislock-bench.c) as
 * p50, p99 and mean, the rate one connection reaches, and the rate of BENCH_THREADS
 * threads on a connection each, with the server's and this process's CPU per call.
 * The sections that compare the library with raw calls measure those again next to
 * their own figures (see redislock-bench.c on drift); these are the absolute values.
 */
#include <math.h>

#include "bench.h"

void
section_raw (Bench *b, Section *s)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (RawConn) control = NULL;
  RawWorker workers[BENCH_THREADS];
  RunCost cost;
  char metric[64];
  double rate1, rate8;

  if (b->raw_error != NULL)
    {
      add_na (s, "round trip", "%s", b->raw_error);
      return;
    }
  rate1 = 1e9 / b->raw.mean;
  add_row (s, "round trip p50", b->raw.p50 / 1000, "us", 1, 1.0, "raw p50", NULL, FALSE);
  add_row (s, "round trip p99", b->raw.p99 / 1000, "us", 1, b->raw.p99 / b->raw.p50, "raw p50",
           NULL, FALSE);
  add_row (s, "round trip mean", b->raw.mean / 1000, "us", 1, b->raw.mean / b->raw.p50, "raw p50",
           NULL, FALSE);
  add_row (s, "1 connection", rate1, "calls/s", 0, 1.0, "1 connection", NULL, FALSE);

  g_snprintf (metric, sizeof metric, "%d threads, a connection each", BENCH_THREADS);
  control = raw_open (&b->target, &error);
  if (control == NULL || !raw_workers_open (b, workers, &error))
    {
      add_na (s, metric, "%s", error->message);
      return;
    }
  rate8 = raw_workers_run (workers, b->raw8_calls, NULL, control, &cost, &error);
  raw_workers_close (workers);
  if (isnan (rate8))
    {
      add_na (s, metric, "%s", error->message);
      return;
    }
  add_row (s, metric, rate8, "calls/s", 0, rate8 / rate1, "1 connection", NULL, FALSE);
  add_row (s, "  server CPU per call", server_us_per_call (&cost), "us", 2, NAN, NULL, NULL, FALSE);
  add_row (s, "  client CPU per call", cost.cpu_seconds * 1e6 / (BENCH_THREADS * b->raw8_calls),
           "us", 2, NAN, NULL, NULL, FALSE);
  add_note (s,
            "%u timed calls on one connection after 1000 warm-up calls (the reference for "
            "figures without a baseline of their own); %u calls per thread",
            b->raw_calls, b->raw8_calls);
  add_note (s, "server CPU per call is INFO commandstats usec/calls for EVALSHA over the run");
}
