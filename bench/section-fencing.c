/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* section-fencing.c: what fencing tokens and holding several locks at once cost.
 *
 * Fencing turns the acquisition into one script that also increments the name's
 * counter (instead of a plain SET NX), so an uncontended lock+unlock with fencing on is
 * compared with the same pair with fencing off, on two registries of one server. And
 * redis_lock_try_lock_all() of ten free locks of one registry, one script over ten
 * keys in one round trip, is compared with one uncontended acquisition (the plain SET
 * NX); each is followed by its release, outside the timed call, and the pairs (lock and
 * release together) are shown too. Every figure is timed one call at a time in blocks of
 * INTERLEAVE_BLOCK that alternate between the variants, so that all of them see the
 * same machine even when the speed of a round trip drifts during the run.
 */
#include <math.h>

#include "bench.h"

/* Declared here as well as in section-list.h: this file does not include the table. */
void section_fencing (Bench *b, Section *s);

/* Calls of one variant in a row before the next variant's block. */
#define INTERLEAVE_BLOCK 25
/* Locks taken together by try_lock_all. */
#define MULTI_LOCKS 10

/* A timed lock+unlock pair; *acquire_ns gets the lock alone. */
static gboolean
timed_pair (RedisLock *lock, gint64 *acquire_ns, gint64 *pair_ns, GError **error)
{
  gint64 t0 = now_ns (), t1;

  if (!redis_lock_lock (lock, error))
    return FALSE;
  t1 = now_ns ();
  if (!redis_lock_unlock (lock, error))
    return FALSE;
  *acquire_ns = t1 - t0;
  *pair_ns = now_ns () - t0;
  return TRUE;
}

static gboolean
timed_all (RedisLock **locks, gint64 *acquire_ns, gint64 *pair_ns, GError **error)
{
  gint64 t0 = now_ns (), t1;

  if (!redis_lock_try_lock_all (locks, MULTI_LOCKS, 0, NULL, error))
    {
      if (error != NULL && *error == NULL)
        g_set_error_literal (error, G_IO_ERROR, G_IO_ERROR_BUSY, "a free lock was taken elsewhere");
      return FALSE;
    }
  t1 = now_ns ();
  if (!redis_lock_unlock_all (locks, MULTI_LOCKS, error))
    return FALSE;
  *acquire_ns = t1 - t0;
  *pair_ns = now_ns () - t0;
  return TRUE;
}

void
section_fencing (Bench *b, Section *s)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (RedisLockRegistry) plain = NULL;
  g_autoptr (RedisLockRegistry) fenced = NULL;
  g_autoptr (RedisLock) plain_lock = NULL;
  g_autoptr (RedisLock) fenced_lock = NULL;
  RedisLock *locks[MULTI_LOCKS] = { NULL };
  RedisLockRegistryStats before, after;
  guint n = b->uncontended_pairs - b->uncontended_pairs % INTERLEAVE_BLOCK;
  g_autofree gint64 *off_acq = g_new (gint64, n), *off_pair = g_new (gint64, n);
  g_autofree gint64 *on_acq = g_new (gint64, n), *on_pair = g_new (gint64, n);
  g_autofree gint64 *all_acq = g_new (gint64, n), *all_pair = g_new (gint64, n);
  Dist off_a, off_p, on_a, on_p, all_a, all_p;
  double all_round_trips;
  guint i, k;

  plain = bench_registry (b, &error);
  if (plain == NULL)
    goto fail;
  fenced = bench_registry (b, &error);
  if (fenced == NULL)
    goto fail;
  redis_lock_registry_set_fencing (fenced, TRUE);
  plain_lock = redis_lock_registry_obtain (plain, "fencing-off", &error);
  if (plain_lock == NULL)
    goto fail;
  fenced_lock = redis_lock_registry_obtain (fenced, "fencing-on", &error);
  if (fenced_lock == NULL)
    goto fail;
  for (i = 0; i < MULTI_LOCKS; i++)
    {
      g_autofree char *name = g_strdup_printf ("multi-%u", i);
      locks[i] = redis_lock_registry_obtain (plain, name, &error);
      if (locks[i] == NULL)
        goto fail;
    }
  for (i = 0; i < 200; i++)
    {
      gint64 a, p;
      if (!timed_pair (plain_lock, &a, &p, &error) || !timed_pair (fenced_lock, &a, &p, &error)
          || !timed_all (locks, &a, &p, &error))
        goto fail;
    }

  redis_lock_registry_get_stats (plain, &before);
  for (i = 0; i < n; i += INTERLEAVE_BLOCK)
    {
      for (k = i; k < i + INTERLEAVE_BLOCK; k++)
        if (!timed_pair (plain_lock, &off_acq[k], &off_pair[k], &error))
          goto fail;
      for (k = i; k < i + INTERLEAVE_BLOCK; k++)
        if (!timed_pair (fenced_lock, &on_acq[k], &on_pair[k], &error))
          goto fail;
      for (k = i; k < i + INTERLEAVE_BLOCK; k++)
        if (!timed_all (locks, &all_acq[k], &all_pair[k], &error))
          goto fail;
    }
  redis_lock_registry_get_stats (plain, &after);
  /* The plain registry's round trips: n single pairs (2 each) and n multi pairs. */
  all_round_trips = (double) (after.round_trips - before.round_trips - 2 * (guint64) n) / n;

  off_a = dist_of (off_acq, n, 1);
  off_p = dist_of (off_pair, n, 1);
  on_a = dist_of (on_acq, n, 1);
  on_p = dist_of (on_pair, n, 1);
  all_a = dist_of (all_acq, n, 1);
  all_p = dist_of (all_pair, n, 1);

  add_row (s, "fenced pair p50", on_p.p50 / 1000, "us", 1, on_p.p50 / off_p.p50,
           "unfenced pair p50", "<= 1.10x", on_p.p50 <= 1.10 * off_p.p50);
  add_row (s, "fenced pair p99", on_p.p99 / 1000, "us", 1, on_p.p99 / off_p.p99,
           "unfenced pair p99", NULL, FALSE);
  add_row (s, "fenced lock p50", on_a.p50 / 1000, "us", 1, on_a.p50 / off_a.p50,
           "unfenced lock p50", NULL, FALSE);
  add_row (s, "unfenced pair p50 (baseline)", off_p.p50 / 1000, "us", 1, 1.0,
           "unfenced pair p50", NULL, FALSE);
  add_row (s, "try_lock_all(10) p50", all_a.p50 / 1000, "us", 1, all_a.p50 / off_a.p50,
           "unfenced lock p50", "<= 1.5x", all_a.p50 <= 1.5 * off_a.p50);
  add_row (s, "try_lock_all(10) p99", all_a.p99 / 1000, "us", 1, all_a.p99 / off_a.p99,
           "unfenced lock p99", NULL, FALSE);
  add_row (s, "  with unlock_all, p50", all_p.p50 / 1000, "us", 1, all_p.p50 / off_p.p50,
           "unfenced pair p50", NULL, FALSE);
  add_row (s, "unfenced lock p50 (baseline)", off_a.p50 / 1000, "us", 1, 1.0,
           "unfenced lock p50", NULL, FALSE);
  add_row (s, "round trips per 10-lock pair", all_round_trips, "", 2, all_round_trips / 2, "2",
           NULL, FALSE);
  add_note (s,
            "%u timed calls of each variant from one thread, in blocks of %d alternating: "
            "lock+unlock with fencing off, the same on a registry with fencing on, and "
            "try_lock_all+unlock_all of %d free locks of one registry; after 200 warm-up rounds",
            n, INTERLEAVE_BLOCK, MULTI_LOCKS);
  for (i = 0; i < MULTI_LOCKS; i++)
    redis_lock_unref (locks[i]);
  return;

fail:
  for (i = 0; i < MULTI_LOCKS; i++)
    if (locks[i] != NULL)
      redis_lock_unref (locks[i]);
  add_na (s, "fencing and try_lock_all", "%s", error->message);
}
