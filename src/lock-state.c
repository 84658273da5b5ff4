/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* lock-state.c: what a lock object says of itself (its name and key, who holds it
 * here, its lease's state and value, its fencing token): the read-only getters of
 * redislock-lock.h, apart from lock.c's acquisition, so that each reads the state
 * lock.c and leases.c own under their mutexes and changes nothing.
 */
#include "config.h"

#include <string.h>

#include "internal.h"
#include "lock-private.h"

const char *
redis_lock_get_name (RedisLock *lock)
{
  g_return_val_if_fail (lock != NULL, NULL);
  return rl_lock_name (lock);
}

const char *
redis_lock_get_key (RedisLock *lock)
{
  g_return_val_if_fail (lock != NULL, NULL);
  return lock->key_data;
}

/* Whether the calling thread holds @lock (never in a forked child: the holds were the
 * parent's). */
static gboolean
held_by_caller (RedisLock *lock)
{
  return !rl_registry_is_forked (lock->registry)
         && rl_lock_owned_by_caller (lock, rl_lock_current_thread ());
}

gboolean
redis_lock_is_held_by_current_thread (RedisLock *lock)
{
  g_return_val_if_fail (lock != NULL, FALSE);
  return held_by_caller (lock);
}

guint
redis_lock_get_hold_count (RedisLock *lock)
{
  g_return_val_if_fail (lock != NULL, 0);
  return held_by_caller (lock) ? lock->count : 0;
}

gboolean
redis_lock_is_acquired_in_this_process (RedisLock *lock)
{
  gboolean acquired;

  g_return_val_if_fail (lock != NULL, FALSE);
  if (rl_registry_is_forked (lock->registry))
    return FALSE;
  rl_mutex_lock (&lock->m);
  acquired = lock->owner != NULL;
  rl_mutex_unlock (&lock->m);
  return acquired;
}

/* The lease table of @lock's registry when the calling thread holds @lock (its lease
 * is there), else NULL. */
static RlLeases *
held_leases (RedisLock *lock)
{
  return held_by_caller (lock) ? lock->registry->leases : NULL;
}

gboolean
redis_lock_is_lease_lost (RedisLock *lock)
{
  RlLeases *leases;

  g_return_val_if_fail (lock != NULL, FALSE);
  leases = held_leases (lock);
  return leases != NULL && rl_leases_is_lost (leases, lock);
}

GCancellable *
redis_lock_get_lease_cancellable (RedisLock *lock)
{
  RlLeases *leases;

  g_return_val_if_fail (lock != NULL, NULL);
  leases = held_leases (lock);
  return leases != NULL ? rl_leases_get_cancellable (leases, lock) : NULL;
}

char *
redis_lock_dup_lease_value (RedisLock *lock)
{
  RlLeases *leases;
  char value[RL_LEASE_VALUE_MAX];

  g_return_val_if_fail (lock != NULL, NULL);
  leases = held_leases (lock);
  if (leases == NULL)
    return NULL;
  rl_leases_value (leases, rl_leases_view (leases, lock).serial, value);
  return g_strdup (value);
}

guint64
redis_lock_get_fencing_token (RedisLock *lock)
{
  RlLeases *leases;

  g_return_val_if_fail (lock != NULL, 0);
  leases = held_leases (lock);
  return leases != NULL ? rl_leases_get_token (leases, lock) : 0;
}
