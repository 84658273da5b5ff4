/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* section-async.c: redis_lock_lock_async() and redis_lock_unlock_async() from a main loop.
 *
 * Two figures. An uncontended lock_async+unlock_async pair, each call driven to its
 * callback from the default main context of the bench thread, is compared with the
 * sync lock+unlock pair on the same registry and name, the two alternating in blocks
 * of ASYNC_BLOCK so both see the same machine: what the worker pool and the trip back
 * to the loop add to the two round trips. And the local hand-off to queued calls: the
 * calls wait behind a holder thread, and each unlocks in its callback, which hands the
 * lease to the next; the time per hand-off is compared with the same sync pair, and
 * the registry's counters give the Redis commands per hand-off (the lease stays in the
 * process) while the process's thread count gives what the pending calls cost in
 * threads (none of their own).
 */
#include <math.h>

#include "bench.h"

/* Async pairs alternate with sync pairs in blocks of this many. */
#define ASYNC_BLOCK 25

typedef struct
{
  RedisLock *lock;
  gboolean done;
  gboolean ok;
  GError *error;
} AsyncWait;

static void
on_locked (GObject *source, GAsyncResult *result, gpointer data)
{
  AsyncWait *w = data;

  w->ok = redis_lock_lock_finish (w->lock, result, &w->error);
  w->done = TRUE;
}

static void
on_unlocked (GObject *source, GAsyncResult *result, gpointer data)
{
  AsyncWait *w = data;

  w->ok = redis_lock_unlock_finish (w->lock, result, &w->error);
  w->done = TRUE;
}

/* Iterates the default context until @w's callback ran; its result, with @error. */
static gboolean
wait_done (AsyncWait *w, GError **error)
{
  while (!w->done)
    g_main_context_iteration (NULL, TRUE);
  if (w->error != NULL)
    g_propagate_error (error, g_steal_pointer (&w->error));
  else if (!w->ok)
    g_set_error_literal (error, G_IO_ERROR, G_IO_ERROR_FAILED, "lock_async: not acquired");
  return w->ok;
}

static gboolean
async_pair (RedisLock *lock, GError **error)
{
  AsyncWait w = { .lock = lock };
  AsyncWait u = { .lock = lock };

  redis_lock_lock_async (lock, -1, 0, NULL, on_locked, &w);
  if (!wait_done (&w, error))
    return FALSE;
  redis_lock_unlock_async (lock, NULL, on_unlocked, &u);
  return wait_done (&u, error);
}

/* The queued calls and the holder thread they wait behind. */
typedef struct
{
  RedisLock *lock;
  GMutex mutex;
  GCond cond;
  gboolean held;
  gboolean release;
  guint done;
  guint failed;
} Queue;

static gpointer
holder_main (gpointer data)
{
  Queue *q = data;
  g_autoptr (GError) error = NULL;
  gboolean ok = redis_lock_lock (q->lock, &error);

  g_mutex_lock (&q->mutex);
  q->held = TRUE;
  q->failed += ok ? 0 : 1;
  g_cond_broadcast (&q->cond);
  while (!q->release)
    g_cond_wait (&q->cond, &q->mutex);
  g_mutex_unlock (&q->mutex);
  if (ok && !redis_lock_unlock (q->lock, NULL))
    q->failed++;
  return NULL;
}

static void
on_queued (GObject *source, GAsyncResult *result, gpointer data)
{
  Queue *q = data;

  q->done++;
  if (!redis_lock_lock_finish (q->lock, result, NULL) || !redis_lock_unlock (q->lock, NULL))
    q->failed++;
}

static guint
thread_count (void)
{
  g_autoptr (GDir) dir = g_dir_open ("/proc/self/task", 0, NULL);
  guint n = 0;

  while (dir != NULL && g_dir_read_name (dir) != NULL)
    n++;
  return n;
}

void
section_async (Bench *b, Section *s)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (RedisLockRegistry) registry = NULL;
  g_autoptr (RedisLock) lock = NULL;
  RedisLockRegistryStats before, after;
  guint n = (b->uncontended_pairs / 2) - (b->uncontended_pairs / 2) % ASYNC_BLOCK;
  guint queued = b->contention_sections;
  g_autofree gint64 *async_samples = g_new (gint64, n);
  g_autofree gint64 *sync_samples = g_new (gint64, n);
  guint threads_before, threads_pending;
  Queue q = { 0 };
  GThread *holder;
  Dist async, sync;
  gint64 t0, handoff_ns;
  guint i, k;

  registry = bench_registry (b, &error);
  if (registry == NULL)
    goto fail;
  lock = redis_lock_registry_obtain (registry, "async", &error);
  if (lock == NULL)
    goto fail;
  for (i = 0; i < 200; i++)
    if (!async_pair (lock, &error) || !redis_lock_lock (lock, &error)
        || !redis_lock_unlock (lock, &error))
      goto fail;

  for (i = 0; i < n; i += ASYNC_BLOCK)
    {
      for (k = i; k < i + ASYNC_BLOCK; k++)
        {
          t0 = now_ns ();
          if (!redis_lock_lock (lock, &error) || !redis_lock_unlock (lock, &error))
            goto fail;
          sync_samples[k] = now_ns () - t0;
        }
      for (k = i; k < i + ASYNC_BLOCK; k++)
        {
          t0 = now_ns ();
          if (!async_pair (lock, &error))
            goto fail;
          async_samples[k] = now_ns () - t0;
        }
    }
  async = dist_of (async_samples, n, 1);
  sync = dist_of (sync_samples, n, 1);

  /* The queued calls, behind a holder thread. */
  q.lock = lock;
  g_mutex_init (&q.mutex);
  g_cond_init (&q.cond);
  holder = g_thread_new ("bench-holder", holder_main, &q);
  g_mutex_lock (&q.mutex);
  while (!q.held)
    g_cond_wait (&q.cond, &q.mutex);
  g_mutex_unlock (&q.mutex);
  threads_before = thread_count ();
  for (i = 0; i < queued; i++)
    redis_lock_lock_async (lock, -1, 0, NULL, on_queued, &q);
  while (g_main_context_iteration (NULL, FALSE))
    ;
  threads_pending = thread_count ();
  redis_lock_registry_get_stats (registry, &before);
  t0 = now_ns ();
  g_mutex_lock (&q.mutex);
  q.release = TRUE;
  g_cond_broadcast (&q.cond);
  g_mutex_unlock (&q.mutex);
  while (q.done < queued)
    g_main_context_iteration (NULL, TRUE);
  handoff_ns = (now_ns () - t0) / queued;
  redis_lock_registry_get_stats (registry, &after);
  g_thread_join (holder);
  g_mutex_clear (&q.mutex);
  g_cond_clear (&q.cond);
  if (q.failed > 0)
    {
      g_set_error (&error, G_IO_ERROR, G_IO_ERROR_FAILED, "%u queued calls failed", q.failed);
      goto fail;
    }

  add_row (s, "async pair p50", async.p50 / 1000, "us", 1, async.p50 / sync.p50, "sync pair p50",
           NULL, FALSE);
  add_row (s, "async pair p99", async.p99 / 1000, "us", 1, async.p99 / sync.p99, "sync pair p99",
           NULL, FALSE);
  add_row (s, "sync pair p50 (baseline)", sync.p50 / 1000, "us", 1, 1.0, "sync pair p50", NULL,
           FALSE);
  add_row (s, "hand-off to a queued call", handoff_ns / 1000.0, "us", 1, handoff_ns / sync.p50,
           "sync pair p50", NULL, FALSE);
  add_row (s, "Redis commands per hand-off",
           (double)(after.commands - before.commands) / queued, "", 3, NAN, NULL, NULL, FALSE);
  add_row (s, "threads added by the pending calls", (double) threads_pending - threads_before, "",
           0, NAN, NULL, "<= 4 (the pool)", threads_pending <= threads_before + 4);
  add_note (s,
            "%u async pairs (lock_async, then unlock_async, each run to its callback from the "
            "default main context) alternating in blocks of %d with sync pairs on the same name, "
            "after 200 warm-up pairs of each; then %u calls queued behind a holder thread, each "
            "unlocking in its callback, timed from the holder's release to the last callback",
            n, ASYNC_BLOCK, queued);
  return;

fail:
  add_na (s, "async pair", "%s", error->message);
}
