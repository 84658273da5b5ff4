/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* bench-registry.c: the registries the sections and their child processes make, with
 * the run's settings.
 *
 * Below redislock-bench.c and the sections alike, so that a section (or a child
 * process of one) makes its registry without calling back into the file that runs it.
 * The settings reach the child processes through the environment, which
 * redislock-bench.c sets from its options.
 */
#include "bench.h"

void
bench_registry_settings (RedisLockRegistry *registry)
{
  if (g_strcmp0 (g_getenv ("REDISLOCK_BENCH_KEY_TRACKING"), "off") == 0)
    redis_lock_registry_set_key_tracking (registry, FALSE);
  if (g_strcmp0 (g_getenv ("REDISLOCK_BENCH_DEADLOCK_DETECTION"), "off") == 0)
    redis_lock_registry_set_deadlock_detection (registry, FALSE);
  if (g_strcmp0 (g_getenv ("REDISLOCK_BENCH_WAIT_QUEUE"), "on") == 0)
    redis_lock_registry_set_wait_queue (registry, TRUE);
}

RedisLockRegistry *
bench_registry (Bench *b, GError **error)
{
  RedisLockRegistry *registry = redis_lock_registry_new (b->url, b->key, error);

  if (registry != NULL)
    bench_registry_settings (registry);
  return registry;
}
