/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* section-independent.c: BENCH_THREADS threads, each locking a name of its own.
 *
 * With no contention every pair is two round trips on a connection of its own, so the
 * best the threads can reach is half the rate of as many threads making raw EVALSHA
 * calls on a connection each; the same lock protocol done by hand from plain hiredis is
 * the second baseline. Rates drift on a shared machine, so the run is made of rounds,
 * each measuring the raw rate, the by-hand rate and the library's back to back, and
 * the medians of the rounds are compared. The cost on both sides of the socket (the
 * server's EVALSHA CPU from INFO commandstats, this process's CPU) is reported next to
 * the same readings for the raw calls.
 */
#include <math.h>
#include <string.h>

#include "bench.h"

void
section_independent (Bench *b, Section *s)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (RedisLockRegistry) registry = NULL;
  g_autoptr (RawConn) control = NULL;
  g_autofree char *hand_prefix = g_strdup_printf ("%s-by-hand:independent", b->key);
  PairWorker workers[BENCH_THREADS];
  RawWorker raw_workers[BENCH_THREADS];
  RedisLockRegistryStats before, after;
  guint rounds = b->independent_rounds, pairs = b->independent_pairs, r, i;
  double lib_rates[8], raw_rates[8], hand_rates[8], lib_rate, raw_rate, hand_rate;
  double lib_cpu = 0, raw_cpu = 0, hand_cpu = 0, ops;
  RunCost lib_cost = { 0, 0, 0, 0 }, raw_cost = { 0, 0, 0, 0 }, hand_cost = { 0, 0, 0, 0 };
  RunCost cost;
  guint64 commands = 0;

  g_assert (rounds <= G_N_ELEMENTS (lib_rates));
  memset (workers, 0, sizeof workers);
  memset (raw_workers, 0, sizeof raw_workers);
  registry = bench_registry (b, &error);
  if (registry == NULL)
    goto fail;
  for (i = 0; i < BENCH_THREADS; i++)
    {
      g_autofree char *name = g_strdup_printf ("independent-%u", i);

      workers[i].lock = redis_lock_registry_obtain (registry, name, &error);
      if (workers[i].lock == NULL)
        goto fail;
    }
  control = raw_open (&b->target, &error);
  if (control == NULL || !raw_workers_open (b, raw_workers, &error))
    goto fail;
  if (isnan (pair_workers_run (workers, pairs / 10 + 1, NULL, &cost, &error))
      || isnan (raw_workers_run (raw_workers, pairs / 10 + 1, hand_prefix, NULL, &cost, &error)))
    goto fail;

  /* Rounds alternate: the raw rate (two calls per pair's worth), the same protocol by
   * hand, then the library's. */
  for (r = 0; r < rounds; r++)
    {
      raw_rates[r] = raw_workers_run (raw_workers, 2 * pairs, NULL, control, &cost, &error);
      if (isnan (raw_rates[r]))
        goto fail;
      run_cost_add (&raw_cost, &cost);
      hand_rates[r] = raw_workers_run (raw_workers, pairs, hand_prefix, control, &cost, &error);
      if (isnan (hand_rates[r]))
        goto fail;
      run_cost_add (&hand_cost, &cost);

      redis_lock_registry_get_stats (registry, &before);
      lib_rates[r] = pair_workers_run (workers, pairs, control, &cost, &error);
      if (isnan (lib_rates[r]))
        goto fail;
      redis_lock_registry_get_stats (registry, &after);
      commands += after.commands - before.commands;
      run_cost_add (&lib_cost, &cost);
    }
  lib_rate = median (lib_rates, rounds);
  raw_rate = median (raw_rates, rounds);
  hand_rate = median (hand_rates, rounds);
  ops = (double)rounds * BENCH_THREADS * pairs;
  lib_cpu = lib_cost.cpu_seconds * 1e6 / ops;
  raw_cpu = raw_cost.cpu_seconds * 1e6 / ops;
  hand_cpu = hand_cost.cpu_seconds * 1e6 / ops;

  add_row (s, "pairs/s", lib_rate, "pairs/s", 0, lib_rate / (raw_rate / 2), "raw 8-conn rate / 2",
           ">= 0.90x", lib_rate >= 0.9 * raw_rate / 2);
  add_row (s, "  the same, vs by hand", lib_rate, "pairs/s", 0, lib_rate / hand_rate,
           "by-hand pairs/s", NULL, FALSE);
  add_row (s, "raw 8-conn rate (baseline)", raw_rate, "calls/s", 0, 1.0, "raw 8-conn rate", NULL,
           FALSE);
  add_row (s, "by-hand pairs/s (baseline)", hand_rate, "pairs/s", 0, hand_rate / (raw_rate / 2),
           "raw 8-conn rate / 2", NULL, FALSE);
  add_row (s, "server CPU per EVALSHA", server_us_per_call (&lib_cost), "us", 2,
           server_us_per_call (&lib_cost) / server_us_per_call (&raw_cost), "raw EVALSHA", NULL,
           FALSE);
  add_row (s, "  by hand", server_us_per_call (&hand_cost), "us", 2,
           server_us_per_call (&hand_cost) / server_us_per_call (&raw_cost), "raw EVALSHA", NULL,
           FALSE);
  add_row (s, "  raw EVALSHA (baseline)", server_us_per_call (&raw_cost), "us", 2, 1.0,
           "raw EVALSHA", NULL, FALSE);
  add_row (s, "client CPU per pair", lib_cpu, "us", 2, lib_cpu / raw_cpu, "2 raw calls", NULL,
           FALSE);
  add_row (s, "  by hand", hand_cpu, "us", 2, hand_cpu / raw_cpu, "2 raw calls", NULL, FALSE);
  add_row (s, "  2 raw calls (baseline)", raw_cpu, "us", 2, 1.0, "2 raw calls", NULL, FALSE);
  add_row (s, "Redis commands per pair", (double)commands / ops, "", 2, NAN, NULL, NULL, FALSE);
  add_note (s,
            "%d threads, each locking and unlocking its own name %u times per round; %u "
            "rounds, each after %d raw threads making %u calls each and %u pairs by hand; "
            "medians of the rounds",
            BENCH_THREADS, pairs, rounds, BENCH_THREADS, 2 * pairs, pairs);
  add_note (s, "by hand: the same lock protocol from plain hiredis (SET NX PX / GET+UNLINK+PUBLISH "
               "scripts), what the server must do for any correct lock");
  add_note (s, "server CPU: INFO commandstats usec/calls for EVALSHA; client CPU: this "
               "process's CPU time (all threads) per pair");
  goto out;

fail:
  add_na (s, "independent keys", "%s", error->message);
out:
  raw_workers_close (raw_workers);
  for (i = 0; i < BENCH_THREADS; i++)
    {
      redis_lock_unref (workers[i].lock);
      g_clear_error (&workers[i].error);
    }
}
