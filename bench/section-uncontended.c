/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* section-uncontended.c: an outermost lock+unlock that no one else wants.
 *
 * Taking and releasing a free lock needs two Redis round trips (the acquire, the
 * release), so the pair is compared with two raw EVALSHA calls made back to back, and
 * with the same lock protocol done by hand from plain hiredis (bench-hiredis.c), which
 * is what the server must do for any correct lock. The three are timed one pair at a
 * time in blocks of INTERLEAVE_BLOCK that alternate, so that all three see the same
 * machine even when the speed of a round trip drifts during the run; the registry's
 * counters give the commands and round trips per pair.
 */
#include <math.h>

#include "bench.h"

/* Uncontended pairs alternate with raw pairs in blocks of this many. */
#define INTERLEAVE_BLOCK 25

void
section_uncontended (Bench *b, Section *s)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (RedisLockRegistry) registry = NULL;
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (RawConn) raw = NULL;
  RedisLockRegistryStats before, after;
  guint n = b->uncontended_pairs - b->uncontended_pairs % INTERLEAVE_BLOCK;
  g_autofree gint64 *lib_samples = g_new (gint64, n);
  g_autofree gint64 *raw_samples = g_new (gint64, n);
  g_autofree gint64 *hand_samples = g_new (gint64, n);
  g_autofree char *hand_key = g_strdup_printf ("%s-by-hand:uncontended", b->key);
  double commands, round_trips;
  Dist lib, raw_pair, hand;
  guint i, k;

  registry = bench_registry (b, &error);
  if (registry == NULL)
    goto fail;
  lock = redis_lock_registry_obtain (registry, "uncontended", &error);
  if (lock == NULL)
    goto fail;
  raw = raw_open (&b->target, &error);
  if (raw == NULL)
    goto fail;
  for (i = 0; i < 200; i++)
    if (!redis_lock_lock (lock, &error) || !redis_lock_unlock (lock, &error)
        || !raw_call (raw, &error))
      goto fail;

  /* Blocks of lock+unlock pairs alternate with blocks of raw pairs (two EVALSHA back
   * to back), so both see the same machine. */
  redis_lock_registry_get_stats (registry, &before);
  for (i = 0; i < n; i += INTERLEAVE_BLOCK)
    {
      for (k = i; k < i + INTERLEAVE_BLOCK; k++)
        {
          gint64 t0 = now_ns ();

          if (!raw_call (raw, &error) || !raw_call (raw, &error))
            goto fail;
          raw_samples[k] = now_ns () - t0;
        }
      for (k = i; k < i + INTERLEAVE_BLOCK; k++)
        {
          gint64 t0 = now_ns ();

          if (!raw_lock_pair (raw, hand_key, &error))
            goto fail;
          hand_samples[k] = now_ns () - t0;
        }
      for (k = i; k < i + INTERLEAVE_BLOCK; k++)
        {
          gint64 t0 = now_ns ();

          if (!redis_lock_lock (lock, &error) || !redis_lock_unlock (lock, &error))
            goto fail;
          lib_samples[k] = now_ns () - t0;
        }
    }
  redis_lock_registry_get_stats (registry, &after);
  lib = dist_of (lib_samples, n, 1);
  raw_pair = dist_of (raw_samples, n, 1);
  hand = dist_of (hand_samples, n, 1);
  commands = (double)(after.commands - before.commands) / n;
  round_trips = (double)(after.round_trips - before.round_trips) / n;

  add_row (s, "pair p50", lib.p50 / 1000, "us", 1, lib.p50 / raw_pair.p50, "2 raw calls p50",
           "<= 1.15x", lib.p50 <= 1.15 * raw_pair.p50);
  add_row (s, "pair p99", lib.p99 / 1000, "us", 1, lib.p99 / raw_pair.p99, "2 raw calls p99", NULL,
           FALSE);
  add_row (s, "pair mean", lib.mean / 1000, "us", 1, lib.mean / raw_pair.mean, "2 raw calls mean",
           NULL, FALSE);
  add_row (s, "  the same, vs by hand", lib.p50 / 1000, "us", 1, lib.p50 / hand.p50,
           "by-hand pair p50", NULL, FALSE);
  add_row (s, "by-hand pair p50 (baseline)", hand.p50 / 1000, "us", 1, hand.p50 / raw_pair.p50,
           "2 raw calls p50", NULL, FALSE);
  add_row (s, "2 raw calls p50 (baseline)", raw_pair.p50 / 1000, "us", 1, 1.0, "2 raw calls p50",
           NULL, FALSE);
  add_row (s, "2 raw calls p99 (baseline)", raw_pair.p99 / 1000, "us", 1, 1.0, "2 raw calls p99",
           NULL, FALSE);
  add_row (s, "Redis commands per pair", commands, "", 2, commands / 2, "2", NULL, FALSE);
  add_row (s, "round trips per pair", round_trips, "", 2, round_trips / 2, "2", NULL, FALSE);
  add_note (s,
            "%u pairs on one name from one thread, each timed, in blocks of %d alternating "
            "with blocks of two raw EVALSHA calls and blocks of by-hand pairs (the same protocol "
            "from plain hiredis), after 200 warm-up pairs",
            n, INTERLEAVE_BLOCK);
  return;

fail:
  add_na (s, "outermost pair", "%s", error->message);
}
