/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* section-silent.c: a waiter woken by a key deleted without an unlock notification.
 *
 * A client outside the library (a Spring registry in spin mode, an operator) may delete
 * a lock's key without publishing anything; the waiters hear of it through Redis's key
 * tracking (see src/notify.c). Here a plain hiredis connection takes the key with a
 * 30 s TTL, a thread of a registry blocks in lock(), and once its failed attempt is
 * counted and it had time to fall asleep, the plain connection deletes the key; the
 * figure is the time from the DEL's reply to lock() returning. Without the wake-up it
 * would be the 30 s TTL. The baseline is the run's reference round trip.
 */
#include <math.h>

#include "bench.h"

/* Deletions timed; the first few are left out (subscription set-up). */
#define SILENT_WARMUP 3

/* The waiter, on its own thread: lock() (bounded, so a lost wake-up fails the run
 * instead of hanging it), the time it returned, unlock. */
typedef struct
{
  RedisLock *lock;
  gint64 acquired;
  GError *error;
} SilentWaiter;

static gpointer
silent_waiter (gpointer data)
{
  SilentWaiter *w = data;

  if (!redis_lock_try_lock_for (w->lock, 10000, NULL, &w->error))
    {
      if (w->error == NULL)
        g_set_error (&w->error, G_IO_ERROR, G_IO_ERROR_TIMED_OUT,
                     "the waiter did not get the lock within 10 s of the DEL");
      return NULL;
    }
  w->acquired = now_ns ();
  redis_lock_unlock (w->lock, w->error == NULL ? &w->error : NULL);
  return NULL;
}

void
section_silent (Bench *b, Section *s)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (RedisLockRegistry) registry = NULL;
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (RawConn) raw = NULL;
  guint n = b->quick ? 20 : 100, i, counted = 0;
  g_autofree gint64 *latency = g_new0 (gint64, n);
  const char *key;
  Dist d;

  raw = raw_open (&b->target, &error);
  if (raw == NULL)
    goto fail;
  registry = bench_registry (b, &error);
  if (registry == NULL)
    goto fail;
  redis_lock_registry_set_key_tracking (registry, TRUE);
  lock = redis_lock_registry_obtain (registry, "silent", &error);
  if (lock == NULL)
    goto fail;
  key = redis_lock_get_key (lock);
  for (i = 0; i < n; i++)
    {
      RedisLockRegistryStats before, now;
      SilentWaiter w = { lock, 0, NULL };
      GThread *thread;
      redisReply *reply;
      gint64 deleted, until;

      reply = raw_command (raw->c, &error, "SET %s foreign-holder PX 30000", key);
      if (reply == NULL)
        goto fail;
      freeReplyObject (reply);
      redis_lock_registry_get_stats (registry, &before);
      thread = g_thread_new ("silent-waiter", silent_waiter, &w);
      until = now_ns () + 10 * G_GINT64_CONSTANT (1000000000);
      do
        {
          g_usleep (100);
          redis_lock_registry_get_stats (registry, &now);
        }
      while (now.contended_attempts == before.contended_attempts && now_ns () < until);
      /* Time to fall asleep after the failed attempt, as the hand-off's holder gives. */
      g_usleep (HANDOFF_HOLD_US);
      reply = raw_command (raw->c, &error, "DEL %s", key);
      deleted = now_ns ();
      g_thread_join (thread);
      if (reply == NULL)
        goto fail;
      freeReplyObject (reply);
      if (w.error != NULL)
        {
          g_propagate_error (&error, w.error);
          goto fail;
        }
      if (i >= SILENT_WARMUP)
        latency[counted++] = w.acquired - deleted;
    }
  d = dist_of (latency, counted, 1);
  add_row (s, "wake-up after a silent DEL p50", d.p50 / 1000, "us", 1, d.p50 / 1000 / raw_us (b),
           "reference p50", "<= 5000 us", d.p50 <= 5e6);
  add_row (s, "wake-up after a silent DEL p99", d.p99 / 1000, "us", 1, d.p99 / 1000 / raw_us (b),
           "reference p50", NULL, FALSE);
  add_row (s, "wake-up after a silent DEL max", d.max / 1000, "us", 1, d.max / 1000 / raw_us (b),
           "reference p50", NULL, FALSE);
  add_note (s,
            "%u deletions (first %d not counted): a plain connection holds the key with a 30 s "
            "TTL, a registry thread blocks in lock(), the plain connection DELs the key "
            "without publishing; from the DEL's reply to lock() returning",
            n, SILENT_WARMUP);
  return;

fail:
  add_na (s, "wake-up after a silent DEL", "%s", error->message);
}
