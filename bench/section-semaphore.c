/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* section-semaphore.c: taking and giving back a permit that no one else wants.
 *
 * A permit is one request (a plain SET of the permit this process gave back last while
 * the size stands checked, the size-checking script the first time and every 10 s) and
 * one release (the lease's compare-and-delete), two round trips, so the pair is compared
 * with two raw EVALSHA calls made back to back, timed in alternating blocks as the
 * uncontended lock is (section-uncontended.c), on a semaphore of 4 permits; the
 * registry's counters give the commands and round trips per pair. Then the same pair through
 * redis_semaphore_acquire_async() from a main context (the attempt on a worker of the
 * registry, the verdict back in the context) against the blocking pair.
 */
#include "bench.h"

/* Permit pairs alternate with raw pairs in blocks of this many. */
#define INTERLEAVE_BLOCK 25
#define PERMITS 4

/* One acquire+release of a permit of @sem. */
static gboolean
permit_pair (RedisSemaphore *sem, GError **error)
{
  RedisPermit *permit = redis_semaphore_try_acquire_for (sem, 0, NULL, error);

  if (permit == NULL)
    {
      if (*error == NULL)
        g_set_error_literal (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_REDIS,
                             "no permit free in an uncontended semaphore");
      return FALSE;
    }
  return redis_permit_release (permit, error);
}

typedef struct
{
  RedisSemaphore *sem;
  RedisPermit *permit;
  GError *error;
  gboolean done;
} AsyncPair;

static void
on_acquired (GObject *source, GAsyncResult *result, gpointer data)
{
  AsyncPair *p = data;

  (void) source;
  p->permit = redis_semaphore_acquire_finish (p->sem, result, &p->error);
  p->done = TRUE;
}

/* One acquire_async (run to its callback in @context) + release of a permit of @sem. */
static gboolean
async_permit_pair (RedisSemaphore *sem, GMainContext *context, GError **error)
{
  AsyncPair p = { sem, NULL, NULL, FALSE };

  redis_semaphore_acquire_async (sem, 0, NULL, on_acquired, &p);
  while (!p.done)
    g_main_context_iteration (context, TRUE);
  if (p.permit == NULL)
    {
      if (p.error != NULL)
        g_propagate_error (error, p.error);
      else
        g_set_error_literal (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_REDIS,
                             "no permit free in an uncontended semaphore");
      return FALSE;
    }
  return redis_permit_release (p.permit, error);
}

/* The async pair against the blocking one, in alternating blocks: a row. */
static gboolean
async_rows (Bench *b, Section *s, RedisSemaphore *sem, guint n, GError **error)
{
  g_autoptr (GMainContext) context = g_main_context_new ();
  g_autofree gint64 *async_samples = g_new (gint64, n);
  g_autofree gint64 *sync_samples = g_new (gint64, n);
  gboolean ok = FALSE;
  Dist apair, spair;
  guint i, k;

  (void) b;
  g_main_context_push_thread_default (context);
  for (i = 0; i < 200; i++)
    if (!async_permit_pair (sem, context, error))
      goto out;
  for (i = 0; i < n; i += INTERLEAVE_BLOCK)
    {
      for (k = i; k < i + INTERLEAVE_BLOCK; k++)
        {
          gint64 t0 = now_ns ();

          if (!permit_pair (sem, error))
            goto out;
          sync_samples[k] = now_ns () - t0;
        }
      for (k = i; k < i + INTERLEAVE_BLOCK; k++)
        {
          gint64 t0 = now_ns ();

          if (!async_permit_pair (sem, context, error))
            goto out;
          async_samples[k] = now_ns () - t0;
        }
    }
  apair = dist_of (async_samples, n, 1);
  spair = dist_of (sync_samples, n, 1);
  add_row (s, "async acquire+release p50", apair.p50 / 1000, "us", 1, apair.p50 / spair.p50,
           "sync pair p50", NULL, FALSE);
  add_row (s, "async acquire+release p99", apair.p99 / 1000, "us", 1, apair.p99 / spair.p99,
           "sync pair p99", NULL, FALSE);
  ok = TRUE;
out:
  g_main_context_pop_thread_default (context);
  return ok;
}

void
section_semaphore (Bench *b, Section *s)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (RedisLockRegistry) registry = NULL;
  g_autoptr (RedisSemaphore) sem = NULL;
  g_autoptr (RawConn) raw = NULL;
  RedisLockRegistryStats before, after;
  guint n = b->uncontended_pairs - b->uncontended_pairs % INTERLEAVE_BLOCK;
  g_autofree gint64 *sem_samples = g_new (gint64, n);
  g_autofree gint64 *raw_samples = g_new (gint64, n);
  double commands, round_trips;
  Dist pair, raw_pair;
  guint i, k;

  registry = bench_registry (b, &error);
  if (registry == NULL)
    goto fail;
  sem = redis_lock_registry_obtain_semaphore (registry, "bench-semaphore", PERMITS, &error);
  if (sem == NULL)
    goto fail;
  raw = raw_open (&b->target, &error);
  if (raw == NULL)
    goto fail;
  for (i = 0; i < 200; i++)
    if (!permit_pair (sem, &error) || !raw_call (raw, &error))
      goto fail;

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

          if (!permit_pair (sem, &error))
            goto fail;
          sem_samples[k] = now_ns () - t0;
        }
    }
  redis_lock_registry_get_stats (registry, &after);
  pair = dist_of (sem_samples, n, 1);
  raw_pair = dist_of (raw_samples, n, 1);
  commands = (double) (after.commands - before.commands) / n;
  round_trips = (double) (after.round_trips - before.round_trips) / n;

  add_row (s, "acquire+release p50", pair.p50 / 1000, "us", 1, pair.p50 / raw_pair.p50,
           "2 raw calls p50", "<= 1.15x", pair.p50 <= 1.15 * raw_pair.p50);
  add_row (s, "acquire+release p99", pair.p99 / 1000, "us", 1, pair.p99 / raw_pair.p99,
           "2 raw calls p99", NULL, FALSE);
  add_row (s, "2 raw calls p50 (baseline)", raw_pair.p50 / 1000, "us", 1, 1.0, "2 raw calls p50",
           NULL, FALSE);
  add_row (s, "Redis commands per pair", commands, "", 2, commands / 2, "2", NULL, FALSE);
  add_row (s, "round trips per pair", round_trips, "", 2, round_trips / 2, "2", NULL, FALSE);
  add_note (s,
            "%u acquire+release pairs of a semaphore of %d permits from one thread, each timed, "
            "in blocks of %d alternating with blocks of two raw EVALSHA calls, after 200 "
            "warm-up pairs",
            n, PERMITS, INTERLEAVE_BLOCK);
  if (!async_rows (b, s, sem, n, &error))
    goto fail;
  add_note (s,
            "then %u acquire_async (wait 0, run to its callback in a main context) + release "
            "pairs in blocks of %d alternating with blocking pairs, after 200 warm-up pairs",
            n, INTERLEAVE_BLOCK);
  return;

fail:
  add_na (s, "acquire+release", "%s", error->message);
}
