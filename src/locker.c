/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* locker.c: the scoped holder, RedisLockLocker: a lock held from its creation to its
 * free, for g_autoptr() cleanup.
 *
 * It sits above both the lock and the cache: it takes the lock (lock.c) and keeps a
 * reference to it (registry.c, which owns the references as part of the cache), so it
 * lives in a file of its own and neither of those calls the other for it.
 */
#include "config.h"

#include "internal.h"

struct _RedisLockLocker
{
  RedisLock *lock;
};

RedisLockLocker *
redis_lock_locker_new (RedisLock *lock, GError **error)
{
  RedisLockLocker *locker;

  g_return_val_if_fail (lock != NULL, NULL);
  if (!redis_lock_lock (lock, error))
    return NULL;
  locker = g_new (RedisLockLocker, 1);
  locker->lock = redis_lock_ref (lock);
  return locker;
}

void
redis_lock_locker_free (RedisLockLocker *locker)
{
  g_autoptr (GError) error = NULL;

  if (locker == NULL)
    return;
  if (!redis_lock_unlock (locker->lock, &error))
    g_warning ("Unlocking “%s”: %s", rl_lock_name (locker->lock), error->message);
  redis_lock_unref (locker->lock);
  g_free (locker);
}
