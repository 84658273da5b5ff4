/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* types.c: the GTypes of the public types, for GValues and language bindings.
 *
 * GObject introspection (the Redislock GIR and typelib) and bindings such as PyGObject
 * can only hold, copy and free a C structure when it has a GType that says how, and can
 * only map an enumeration to named values when it is a GEnum or GFlags. Everything here
 * is that registration and nothing else, in one place, so the rest of the library does
 * not depend on GObject's type system.
 *
 * The reference-counted objects (registry and lock) are boxed types whose copy takes a
 * reference and whose free drops one: a binding that copies a handle shares the one
 * object, as C code that calls _ref() does. The plain structures handed to callers
 * (stats, lease, waiter and queue info) are boxed types copied by value, the info structures'
 * strings with them; their free functions are defined here too. The GEnum of
 * the error codes is named after the error domain (redis_lock_error_get_type, as
 * GLib's error enumerations are), which is what lets g-ir-scanner pair it with
 * redis_lock_error_quark(). The test types (redislock-test.h) are registered by the
 * testing library (testing/testtypes.c), not here.
 */
#include "config.h"

#include <redislock/redislock.h>

#include "semaphore.h"

G_DEFINE_BOXED_TYPE (RedisLockRegistry, redis_lock_registry, redis_lock_registry_ref,
                     redis_lock_registry_unref)
G_DEFINE_BOXED_TYPE (RedisLock, redis_lock, redis_lock_ref, redis_lock_unref)
G_DEFINE_BOXED_TYPE (RedisLeader, redis_leader, redis_leader_ref, redis_leader_unref)
G_DEFINE_BOXED_TYPE (RedisSemaphore, redis_semaphore, redis_semaphore_ref, redis_semaphore_unref)
/* A permit's copy is a reference to the one permit; the last one dropped gives it back
 * if redis_permit_release() did not. */
G_DEFINE_BOXED_TYPE (RedisPermit, redis_permit, rl_permit_ref, rl_permit_unref)
G_DEFINE_BOXED_TYPE (RedisRWLock, redis_rw_lock, redis_rw_lock_ref, redis_rw_lock_unref)

static RedisLockRegistryStats *
registry_stats_copy (const RedisLockRegistryStats *stats)
{
  return g_memdup2 (stats, sizeof *stats);
}

G_DEFINE_BOXED_TYPE (RedisLockRegistryStats, redis_lock_registry_stats, registry_stats_copy, g_free)

/* The info structures: their scalars copied with them, their strings duplicated. */
static RedisLockLeaseInfo *
lease_info_copy (const RedisLockLeaseInfo *info)
{
  RedisLockLeaseInfo *copy = g_memdup2 (info, sizeof *info);

  copy->name = g_strdup (info->name);
  copy->owner = g_strdup (info->owner);
  return copy;
}

void
redis_lock_lease_info_free (RedisLockLeaseInfo *info)
{
  if (info == NULL)
    return;
  g_free (info->name);
  g_free (info->owner);
  g_free (info);
}

G_DEFINE_BOXED_TYPE (RedisLockLeaseInfo, redis_lock_lease_info, lease_info_copy,
                     redis_lock_lease_info_free)

static RedisLockWaiterInfo *
waiter_info_copy (const RedisLockWaiterInfo *info)
{
  RedisLockWaiterInfo *copy = g_memdup2 (info, sizeof *info);

  copy->name = g_strdup (info->name);
  copy->waiter = g_strdup (info->waiter);
  copy->host = g_strdup (info->host);
  return copy;
}

void
redis_lock_waiter_info_free (RedisLockWaiterInfo *info)
{
  if (info == NULL)
    return;
  g_free (info->name);
  g_free (info->waiter);
  g_free (info->host);
  g_free (info);
}

G_DEFINE_BOXED_TYPE (RedisLockWaiterInfo, redis_lock_waiter_info, waiter_info_copy,
                     redis_lock_waiter_info_free)

static RedisLockQueueInfo *
queue_info_copy (const RedisLockQueueInfo *info)
{
  RedisLockQueueInfo *copy = g_memdup2 (info, sizeof *info);

  copy->name = g_strdup (info->name);
  copy->client_id = g_strdup (info->client_id);
  copy->host = g_strdup (info->host);
  return copy;
}

void
redis_lock_queue_info_free (RedisLockQueueInfo *info)
{
  if (info == NULL)
    return;
  g_free (info->name);
  g_free (info->client_id);
  g_free (info->host);
  g_free (info);
}

G_DEFINE_BOXED_TYPE (RedisLockQueueInfo, redis_lock_queue_info, queue_info_copy,
                     redis_lock_queue_info_free)

G_DEFINE_ENUM_TYPE (RedisLockErrorCode, redis_lock_error,
                    G_DEFINE_ENUM_VALUE (REDIS_LOCK_ERROR_INVALID, "invalid"),
                    G_DEFINE_ENUM_VALUE (REDIS_LOCK_ERROR_CONNECTION, "connection"),
                    G_DEFINE_ENUM_VALUE (REDIS_LOCK_ERROR_REDIS, "redis"),
                    G_DEFINE_ENUM_VALUE (REDIS_LOCK_ERROR_NOT_OWNER, "not-owner"),
                    G_DEFINE_ENUM_VALUE (REDIS_LOCK_ERROR_LEASE_LOST, "lease-lost"),
                    G_DEFINE_ENUM_VALUE (REDIS_LOCK_ERROR_CACHE_FULL, "cache-full"),
                    G_DEFINE_ENUM_VALUE (REDIS_LOCK_ERROR_FORKED, "forked"),
                    G_DEFINE_ENUM_VALUE (REDIS_LOCK_ERROR_CLOSED, "closed"),
                    G_DEFINE_ENUM_VALUE (REDIS_LOCK_ERROR_NOT_REPLICATED, "not-replicated"),
                    G_DEFINE_ENUM_VALUE (REDIS_LOCK_ERROR_DEADLOCK, "deadlock"))

G_DEFINE_ENUM_TYPE (RedisLockWaitMode, redis_lock_wait_mode,
                    G_DEFINE_ENUM_VALUE (REDIS_LOCK_WAIT_PUBSUB, "pubsub"),
                    G_DEFINE_ENUM_VALUE (REDIS_LOCK_WAIT_SPIN, "spin"))
