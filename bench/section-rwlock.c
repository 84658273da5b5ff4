/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* section-rwlock.c: an uncontended read lock+unlock of a read-write lock against a plain
 * lock's lock+unlock.
 *
 * A read hold that nobody contends costs what a plain lock's does in Redis (one script
 * that takes the registry's reader lease, one release), plus the read script's extra
 * work (it checks the writer lease and a waiting writer's mark, and records the
 * reader), so the two pairs are timed one pair at a time in blocks of INTERLEAVE_BLOCK
 * that alternate, as section-uncontended.c does, and the registry's counters give the
 * commands per pair. Then BENCH_THREADS reading threads of one registry read at once,
 * each holding its read for a moment, against the same threads taking a plain lock in
 * turn: the readers share the registry's one reader lease, so their sections overlap
 * and cost Redis almost nothing, which the commands per section show.
 */
#include <math.h>
#include <string.h>

#include "bench.h"

/* Sections per reading thread, and how long each holds its read (µs). */
#define READERS_SECTIONS 200
#define READERS_HOLD_US 100

/* Read pairs alternate with plain pairs in blocks of this many. */
#define INTERLEAVE_BLOCK 25

static gboolean
read_pair (RedisRWLock *lock, GError **error)
{
  return redis_rw_lock_try_read_lock_for (lock, -1, NULL, error)
         && redis_rw_lock_read_unlock (lock, error);
}

typedef struct
{
  RedisRWLock *rw;   /* read sections, or: */
  RedisLock *lock;   /* plain sections */
  GError *error;
} Reader;

static void
reader_run (gpointer data)
{
  Reader *r = data;

  for (guint i = 0; i < READERS_SECTIONS && r->error == NULL; i++)
    {
      gboolean ok = r->rw != NULL ? redis_rw_lock_try_read_lock_for (r->rw, -1, NULL, &r->error)
                                  : redis_lock_lock (r->lock, &r->error);
      if (!ok)
        break;
      g_usleep (READERS_HOLD_US); /* the section's work */
      if (r->rw != NULL)
        redis_rw_lock_read_unlock (r->rw, &r->error);
      else
        redis_lock_unlock (r->lock, &r->error);
    }
}

/* BENCH_THREADS threads, READERS_SECTIONS sections each, reading @rw or locking @lock:
 * sections per second and Redis commands per section, or FALSE with @error. */
static gboolean
readers_run (RedisLockRegistry *registry, RedisRWLock *rw, RedisLock *lock, double *rate,
             double *commands, GError **error)
{
  Reader readers[BENCH_THREADS];
  gpointer data[BENCH_THREADS];
  RedisLockRegistryStats before, after;
  double seconds;

  memset (readers, 0, sizeof readers);
  for (guint i = 0; i < BENCH_THREADS; i++)
    {
      readers[i].rw = rw;
      readers[i].lock = lock;
      data[i] = &readers[i];
    }
  redis_lock_registry_get_stats (registry, &before);
  seconds = run_parallel (BENCH_THREADS, reader_run, data);
  redis_lock_registry_get_stats (registry, &after);
  for (guint i = 0; i < BENCH_THREADS; i++)
    if (readers[i].error != NULL)
      {
        g_propagate_error (error, readers[i].error);
        for (guint j = i + 1; j < BENCH_THREADS; j++)
          g_clear_error (&readers[j].error);
        return FALSE;
      }
  *rate = BENCH_THREADS * READERS_SECTIONS / seconds;
  *commands = (double) (after.commands - before.commands) / (BENCH_THREADS * READERS_SECTIONS);
  return TRUE;
}

void
section_rwlock (Bench *b, Section *s)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (RedisLockRegistry) registry = NULL;
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (RedisRWLock) rw = NULL;
  RedisLockRegistryStats before, after;
  guint n = b->uncontended_pairs - b->uncontended_pairs % INTERLEAVE_BLOCK;
  g_autofree gint64 *read_samples = g_new (gint64, n);
  g_autofree gint64 *plain_samples = g_new (gint64, n);
  guint64 read_commands = 0;
  Dist rd, plain;
  guint i, k;

  registry = bench_registry (b, &error);
  if (registry == NULL)
    goto fail;
  lock = redis_lock_registry_obtain (registry, "rw-plain", &error);
  if (lock == NULL)
    goto fail;
  rw = redis_lock_registry_obtain_rw (registry, "rw-read", &error);
  if (rw == NULL)
    goto fail;
  for (i = 0; i < 200; i++)
    if (!redis_lock_lock (lock, &error) || !redis_lock_unlock (lock, &error)
        || !read_pair (rw, &error))
      goto fail;

  for (i = 0; i < n; i += INTERLEAVE_BLOCK)
    {
      for (k = i; k < i + INTERLEAVE_BLOCK; k++)
        {
          gint64 t0 = now_ns ();

          if (!redis_lock_lock (lock, &error) || !redis_lock_unlock (lock, &error))
            goto fail;
          plain_samples[k] = now_ns () - t0;
        }
      redis_lock_registry_get_stats (registry, &before);
      for (k = i; k < i + INTERLEAVE_BLOCK; k++)
        {
          gint64 t0 = now_ns ();

          if (!read_pair (rw, &error))
            goto fail;
          read_samples[k] = now_ns () - t0;
        }
      redis_lock_registry_get_stats (registry, &after);
      read_commands += after.commands - before.commands;
    }
  rd = dist_of (read_samples, n, 1);
  plain = dist_of (plain_samples, n, 1);

  add_row (s, "read lock uncontended pair p50", rd.p50 / 1000, "us", 1, rd.p50 / plain.p50,
           "plain lock pair p50", NULL, FALSE);
  add_row (s, "read lock uncontended pair p99", rd.p99 / 1000, "us", 1, rd.p99 / plain.p99,
           "plain lock pair p99", NULL, FALSE);
  add_row (s, "plain lock pair p50 (baseline)", plain.p50 / 1000, "us", 1, 1.0,
           "plain lock pair p50", NULL, FALSE);
  add_row (s, "Redis commands per read pair", (double) read_commands / n, "", 2, NAN, "", NULL,
           FALSE);
  add_note (s,
            "%u pairs of each from one thread, each timed, in alternating blocks of %d, after "
            "200 warm-up pairs of each",
            n, INTERLEAVE_BLOCK);

  {
    double read_rate, read_cmds, plain_rate, plain_cmds;

    if (!readers_run (registry, rw, NULL, &read_rate, &read_cmds, &error)
        || !readers_run (registry, NULL, lock, &plain_rate, &plain_cmds, &error))
      goto fail;
    add_row (s, "8 reading threads", read_rate, "sections/s", 0, read_rate / plain_rate,
             "8 threads, plain lock", NULL, FALSE);
    add_row (s, "8 reading threads: Redis commands/section", read_cmds, "", 3, NAN, "", NULL,
             FALSE);
    add_row (s, "8 threads, plain lock (baseline)", plain_rate, "sections/s", 0, 1.0,
             "8 threads, plain lock", NULL, FALSE);
    add_row (s, "8 threads, plain lock: Redis commands/section", plain_cmds, "", 3, NAN, "",
             NULL, FALSE);
    add_note (s, "%d threads of one registry, %d sections each holding %d us, reading the "
              "read-write lock, then taking the plain lock",
              BENCH_THREADS, READERS_SECTIONS, READERS_HOLD_US);
  }
  return;

fail:
  add_na (s, "read lock uncontended pair", "%s", error->message);
}
