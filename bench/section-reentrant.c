/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* section-reentrant.c: re-entry, a lock+unlock of a lock the thread already holds.
 *
 * The library promises that re-entry never talks to Redis, so it is compared with the
 * structure a user would otherwise reach for, a GRecMutex held once, and the registry's
 * `commands` counter must not move during the loop: "no Redis traffic" is proved, not
 * assumed. A pair takes tens of ns, too short to time one at a time, so pairs are
 * timed in batches of REENTRANT_BATCH, lock batches alternating with GRecMutex batches
 * so both see the same machine, and the percentiles are of the batch means.
 */
#include <math.h>

#include "bench.h"

/* Re-entrant pairs are timed in batches of this many. */
#define REENTRANT_BATCH 1000

void
section_reentrant (Bench *b, Section *s)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (RedisLockRegistry) registry = NULL;
  g_autoptr (RedisLock) lock = NULL;
  RedisLockRegistryStats before, after;
  guint batches = b->reentrant_pairs / REENTRANT_BATCH;
  g_autofree gint64 *lib_samples = g_new (gint64, batches);
  g_autofree gint64 *glib_samples = g_new (gint64, batches);
  GRecMutex rec;
  Dist lib, glib;
  guint i, j;

  registry = bench_registry (b, &error);
  if (registry == NULL)
    goto fail;
  lock = redis_lock_registry_obtain (registry, "reentrant", &error);
  if (lock == NULL || !redis_lock_lock (lock, &error))
    goto fail;

  /* The baseline, a GRecMutex held once, in batches alternating with the lock's. */
  g_rec_mutex_init (&rec);
  g_rec_mutex_lock (&rec);
  redis_lock_registry_get_stats (registry, &before);
  for (i = 0; i < batches; i++)
    {
      gint64 t0 = now_ns ();

      for (j = 0; j < REENTRANT_BATCH; j++)
        {
          g_rec_mutex_lock (&rec);
          g_rec_mutex_unlock (&rec);
        }
      glib_samples[i] = now_ns () - t0;

      t0 = now_ns ();
      for (j = 0; j < REENTRANT_BATCH; j++)
        {
          if (!redis_lock_lock (lock, &error) || !redis_lock_unlock (lock, &error))
            break;
        }
      lib_samples[i] = now_ns () - t0;
      if (error != NULL)
        break;
    }
  redis_lock_registry_get_stats (registry, &after);
  g_rec_mutex_unlock (&rec);
  g_rec_mutex_clear (&rec);
  if (error != NULL)
    {
      g_autoptr (GError) local = NULL;

      redis_lock_unlock (lock, &local);
      goto fail;
    }
  if (!redis_lock_unlock (lock, &error))
    goto fail;
  lib = dist_of (lib_samples, batches, REENTRANT_BATCH);
  glib = dist_of (glib_samples, batches, REENTRANT_BATCH);

  add_row (s, "pair p50", lib.p50, "ns", 1, lib.p50 / glib.p50, "GRecMutex p50", NULL, FALSE);
  add_row (s, "pair p99", lib.p99, "ns", 1, lib.p99 / glib.p99, "GRecMutex p99", NULL, FALSE);
  add_row (s, "Redis commands in the loop", (double)(after.commands - before.commands), "", 0, NAN,
           NULL, "= 0", after.commands == before.commands);
  add_row (s, "GRecMutex pair p50", glib.p50, "ns", 1, 1.0, "GRecMutex p50", NULL, FALSE);
  add_row (s, "GRecMutex pair p99", glib.p99, "ns", 1, 1.0, "GRecMutex p99", NULL, FALSE);
  add_note (s,
            "%u pairs in batches of %u alternating with GRecMutex batches; percentiles are "
            "of the batch means",
            batches * REENTRANT_BATCH, REENTRANT_BATCH);
  add_note (s, "commands: the registry's `commands` counter (get_stats), delta over the loop");
  return;

fail:
  add_na (s, "re-entrant pair", "%s", error->message);
}
