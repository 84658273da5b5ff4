/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* contend.c: several threads in two registries contending on one lock.
 *
 * The smallest program that shows what redislock is for. Two registries stand for two
 * processes (each has its own client id, so Redis sees two owners); four threads in
 * each take the lock "example:counter" and do a deliberately non-atomic
 * read-sleep-write on a shared counter. Without the lock increments would be lost;
 * with it the final count is exact. Uses $REDIS_URL when set, otherwise starts a
 * throwaway redis-server on a Unix socket (redislock-test.h) and removes it at exit.
 */
#include <stdio.h>
#include <stdlib.h>

#include <redislock/redislock.h>
#include <redislock/redislock-test.h>

#define THREADS_PER_REGISTRY 4
#define ROUNDS 50

static volatile int counter; /* protected only by the distributed lock */

typedef struct
{
  RedisLockRegistry *registry;
  int id;
} Worker;

static gpointer
worker (gpointer data)
{
  Worker *w = data;
  g_autoptr (GError) error = NULL;
  g_autoptr (RedisLock) lock = redis_lock_registry_obtain (w->registry, "example:counter", &error);

  if (lock == NULL)
    g_error ("obtain: %s", error->message);
  for (int i = 0; i < ROUNDS; i++)
    {
      g_autoptr (RedisLockLocker) held = redis_lock_locker_new (lock, &error);
      int seen;

      if (held == NULL)
        g_error ("lock: %s", error->message);
      seen = counter;
      g_usleep (50); /* widen the race window a lock must close */
      counter = seen + 1;
    }
  return NULL;
}

int
main (void)
{
  g_autoptr (RedisLockTestServer) server = NULL;
  g_autoptr (GError) error = NULL;
  const char *url = g_getenv ("REDIS_URL");
  RedisLockRegistry *registries[2];
  Worker workers[2 * THREADS_PER_REGISTRY];
  GThread *threads[2 * THREADS_PER_REGISTRY];
  gint64 start;

  if (url == NULL)
    {
      server = redis_lock_test_server_new (NULL, &error);
      if (server == NULL)
        {
          fprintf (stderr, "contend: %s (set REDIS_URL to use a running server)\n", error->message);
          return 1;
        }
      url = redis_lock_test_server_get_url (server);
    }
  printf ("redislock %s, Redis at %s\n", REDIS_LOCK_VERSION_S, url);

  for (int r = 0; r < 2; r++)
    {
      registries[r] = redis_lock_registry_new (url, "example", &error);
      if (registries[r] == NULL)
        {
          fprintf (stderr, "contend: %s\n", error->message);
          return 1;
        }
      printf ("registry %d client id %s\n", r, redis_lock_registry_get_client_id (registries[r]));
    }

  start = g_get_monotonic_time ();
  for (int i = 0; i < 2 * THREADS_PER_REGISTRY; i++)
    {
      workers[i].registry = registries[i % 2];
      workers[i].id = i;
      threads[i] = g_thread_new ("worker", worker, &workers[i]);
    }
  for (int i = 0; i < 2 * THREADS_PER_REGISTRY; i++)
    g_thread_join (threads[i]);

  printf ("%d threads x %d rounds: counter = %d (expected %d) in %.0f ms\n",
          2 * THREADS_PER_REGISTRY, ROUNDS, counter, 2 * THREADS_PER_REGISTRY * ROUNDS,
          (g_get_monotonic_time () - start) / 1000.0);
  for (int r = 0; r < 2; r++)
    {
      RedisLockRegistryStats stats;
      redis_lock_registry_get_stats (registries[r], &stats);
      printf ("registry %d: %" G_GUINT64_FORMAT " Redis acquisitions, %" G_GUINT64_FORMAT
              " contended attempts, %" G_GUINT64_FORMAT " notifications, %" G_GUINT64_FORMAT
              " commands\n",
              r, stats.acquisitions, stats.contended_attempts, stats.notifications, stats.commands);
      redis_lock_registry_unref (registries[r]);
    }
  return counter == 2 * THREADS_PER_REGISTRY * ROUNDS ? 0 : 1;
}
