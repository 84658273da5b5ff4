/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* locker.c: the scoped holders, RedisLockLocker and the read-write lock's
 * RedisRWLockReaderLocker and RedisRWLockWriterLocker: a hold from the locker's
 * creation to its free, for g_autoptr() cleanup.
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

struct _RedisRWLockReaderLocker
{
  RedisRWLock *lock;
};

struct _RedisRWLockWriterLocker
{
  RedisRWLock *lock;
};

RedisRWLockReaderLocker *
redis_rw_lock_reader_locker_new (RedisRWLock *lock, GError **error)
{
  RedisRWLockReaderLocker *locker;

  g_return_val_if_fail (lock != NULL, NULL);
  if (!redis_rw_lock_try_read_lock_for (lock, -1, NULL, error))
    return NULL;
  locker = g_new (RedisRWLockReaderLocker, 1);
  locker->lock = redis_rw_lock_ref (lock);
  return locker;
}

void
redis_rw_lock_reader_locker_free (RedisRWLockReaderLocker *locker)
{
  g_autoptr (GError) error = NULL;

  if (locker == NULL)
    return;
  if (!redis_rw_lock_read_unlock (locker->lock, &error))
    g_warning ("Ending the read hold of “%s”: %s", redis_rw_lock_get_name (locker->lock),
               error->message);
  redis_rw_lock_unref (locker->lock);
  g_free (locker);
}

RedisRWLockWriterLocker *
redis_rw_lock_writer_locker_new (RedisRWLock *lock, GError **error)
{
  RedisRWLockWriterLocker *locker;

  g_return_val_if_fail (lock != NULL, NULL);
  if (!redis_rw_lock_try_write_lock_for (lock, -1, NULL, error))
    return NULL;
  locker = g_new (RedisRWLockWriterLocker, 1);
  locker->lock = redis_rw_lock_ref (lock);
  return locker;
}

void
redis_rw_lock_writer_locker_free (RedisRWLockWriterLocker *locker)
{
  g_autoptr (GError) error = NULL;

  if (locker == NULL)
    return;
  if (!redis_rw_lock_write_unlock (locker->lock, &error))
    g_warning ("Ending the write hold of “%s”: %s", redis_rw_lock_get_name (locker->lock),
               error->message);
  redis_rw_lock_unref (locker->lock);
  g_free (locker);
}
