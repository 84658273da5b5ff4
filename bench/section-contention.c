/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* section-contention.c: BENCH_THREADS threads of one process on one name.
 *
 * Threads of one process contend on the lock's local mutex, and the lease is handed
 * from one holder to the next without a Redis visit for up to a bounded streak of
 * hand-offs (set_max_local_handoffs). So the figure is compared with the plain model,
 * the same run with hand-offs off where every critical section takes and releases the
 * lease, and with serial pairs of raw calls, the best a lock that visits Redis twice
 * per critical section could do. The threads take their sections by ticket from one
 * shared count, so all of them contend until the end of a round, and each round runs
 * the three back to back; the critical section increments a shared counter that must
 * not lose an increment.
 */
#include <math.h>
#include <string.h>

#include "bench.h"

/* Serial pairs of raw calls on one connection: the rate a lock that must visit Redis
 * twice per critical section could reach at best. Returns pairs/s or NAN. */
static double
raw_serial_pairs (RawConn *raw, guint pairs, GError **error)
{
  gint64 t0 = now_ns ();
  guint i;

  for (i = 0; i < pairs; i++)
    if (!raw_call (raw, error) || !raw_call (raw, error))
      return NAN;
  return pairs * 1e9 / (double)(now_ns () - t0);
}

void
section_contention (Bench *b, Section *s)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (RedisLockRegistry) registry = NULL;
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (RawConn) raw = NULL;
  PairWorker workers[BENCH_THREADS];
  RedisLockRegistryStats before, after;
  guint rounds = b->independent_rounds, per = b->contention_sections, r, i;
  guint64 counter = 0, expected, commands = 0, round_trips = 0, plain_commands = 0;
  gint tickets = 0;
  double lib_rates[8], raw_rates[8], plain_rates[8], lib_rate, raw_rate, plain_rate, sections;
  RunCost cost;

  g_assert (rounds <= G_N_ELEMENTS (lib_rates));
  memset (workers, 0, sizeof workers);
  registry = bench_registry (b, &error);
  if (registry == NULL)
    goto fail;
  lock = redis_lock_registry_obtain (registry, "contended", &error);
  if (lock == NULL)
    goto fail;
  raw = raw_open (&b->target, &error);
  if (raw == NULL)
    goto fail;
  for (i = 0; i < BENCH_THREADS; i++)
    {
      workers[i].lock = lock;
      workers[i].counter = &counter;
      workers[i].tickets = &tickets;
    }
  if (isnan (pair_workers_run (workers, per / 10 + 1, NULL, &cost, &error)))
    goto fail;

  for (r = 0; r < rounds; r++)
    {
      raw_rates[r] = raw_serial_pairs (raw, BENCH_THREADS * per / 2, &error);
      if (isnan (raw_rates[r]))
        goto fail;
      redis_lock_registry_set_max_local_handoffs (registry, 16);
      redis_lock_registry_get_stats (registry, &before);
      lib_rates[r] = pair_workers_run (workers, per, NULL, &cost, &error);
      if (isnan (lib_rates[r]))
        goto fail;
      redis_lock_registry_get_stats (registry, &after);
      commands += after.commands - before.commands;
      round_trips += after.round_trips - before.round_trips;

      /* The plain model in the same round: every hold takes and releases the lease. */
      redis_lock_registry_set_max_local_handoffs (registry, 0);
      redis_lock_registry_get_stats (registry, &before);
      plain_rates[r] = pair_workers_run (workers, per, NULL, &cost, &error);
      if (isnan (plain_rates[r]))
        goto fail;
      redis_lock_registry_get_stats (registry, &after);
      plain_commands += after.commands - before.commands;
    }
  redis_lock_registry_set_max_local_handoffs (registry, 16);
  lib_rate = median (lib_rates, rounds);
  raw_rate = median (raw_rates, rounds);
  plain_rate = median (plain_rates, rounds);
  expected = (guint64)BENCH_THREADS * ((per / 10 + 1) + 2 * (guint64)rounds * per);
  sections = (double)rounds * BENCH_THREADS * per;

  add_row (s, "sections/s", lib_rate, "sections/s", 0, lib_rate / raw_rate, "raw serial pairs/s",
           NULL, FALSE);
  add_row (s, "  vs hand-offs off", lib_rate, "sections/s", 0, lib_rate / plain_rate,
           "hand-offs off sections/s", ">= 10x", lib_rate >= 10 * plain_rate);
  add_row (s, "hand-offs off (plain model)", plain_rate, "sections/s", 0, plain_rate / raw_rate,
           "raw serial pairs/s", NULL, FALSE);
  add_row (s, "raw serial pairs/s (baseline)", raw_rate, "pairs/s", 0, 1.0, "raw serial pairs/s",
           NULL, FALSE);
  add_row (s, "Redis commands per section", commands / sections, "", 3, commands / sections / 2,
           "2 (a Redis visit each)", "<= 0.1", commands / sections <= 0.1);
  add_row (s, "  hand-offs off", plain_commands / sections, "", 2, plain_commands / sections / 2,
           "2 (a Redis visit each)", NULL, FALSE);
  add_row (s, "round trips per section", round_trips / sections, "", 2, round_trips / sections / 2,
           "2 (a Redis visit each)", NULL, FALSE);
  add_row (s, "lost increments", (double)(expected - counter), "", 0, NAN, NULL, "= 0",
           counter == expected);
  add_note (s,
            "%d threads on one name, %u sections per thread per round taken by ticket from "
            "one shared count (so all threads contend until the end), %u rounds, each of raw "
            "serial pairs on one connection, then the lock with hand-offs (bound 16), then "
            "with hand-offs off (set_max_local_handoffs 0); medians of the rounds",
            BENCH_THREADS, per, rounds);
  add_note (s, "a hand-off streak is 16 hand-offs; with no other client listening for the "
               "release, every other streak keeps the lease: an acquisition, a keep and a "
               "release per 34 sections (0.088) is the floor with the default bound");
  add_note (s, "the critical section increments a shared counter; every increment must be "
               "there at the end");
  return;

fail:
  add_na (s, "same-process contention", "%s", error->message);
  for (i = 0; i < BENCH_THREADS; i++)
    g_clear_error (&workers[i].error);
}
