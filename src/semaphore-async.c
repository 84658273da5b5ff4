/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* semaphore-async.c: redis_semaphore_acquire_async(), a thin driver over
 * async-driver.c: an attempt is rl_semaphore_attempt_step() (one request for a free
 * permit, on a worker of the registry), the sleeps are on the semaphore's anchor lock,
 * whose notification number moves when any permit is released, and the result is the
 * permit taken, returned through the GTask in the caller's main context.
 */
#include "config.h"

#include "async-driver.h"
#include "semaphore.h"

typedef struct
{
  RedisSemaphore *semaphore; /* a reference */
  GTask *task;
  gint64 ttl_ms;
  RedisPermit *permit; /* the attempt's, until done() */
} SemCall;

static RlAcquireAction
sem_attempt (gpointer data, RlAcquire *acq, gboolean pubsub, gboolean bounded, GError **error)
{
  SemCall *call = data;

  return rl_semaphore_attempt_step (call->semaphore, acq, pubsub, bounded, call->ttl_ms,
                                    &call->permit, error);
}

static void
sem_done (gpointer data, gboolean taken, GError *error)
{
  SemCall *call = data;
  RedisPermit *permit = g_steal_pointer (&call->permit);

  if (!taken || error != NULL)
    g_clear_pointer (&permit, rl_permit_unref);
  if (error != NULL)
    g_task_return_error (call->task, error);
  else
    g_task_return_pointer (call->task, permit, (GDestroyNotify) rl_permit_unref);
  g_object_unref (call->task);
  redis_semaphore_unref (call->semaphore);
  g_free (call);
}

RL_DEFINE_ASYNC_DRIVER (sem, .local = NULL);

void
redis_semaphore_acquire_async (RedisSemaphore *semaphore, gint64 wait_ms,
                               GCancellable *cancellable, GAsyncReadyCallback callback,
                               gpointer user_data)
{
  GTask *task;
  SemCall *call;
  GError *error = NULL;
  RedisLock *anchor;

  g_return_if_fail (semaphore != NULL);

  task = g_task_new (NULL, cancellable, callback, user_data);
  g_task_set_source_tag (task, redis_semaphore_acquire_async);
  if (!rl_semaphore_begin (semaphore, cancellable, &error))
    {
      g_task_return_error (task, error);
      g_object_unref (task);
      return;
    }
  anchor = rl_semaphore_anchor (semaphore);
  call = g_new0 (SemCall, 1);
  call->semaphore = redis_semaphore_ref (semaphore);
  call->task = task;
  call->ttl_ms = RL_ATOMIC_GET (anchor->registry->settings.expire_after_ms);
  rl_async_drive (anchor, wait_ms, cancellable, &sem_driver, call);
}

RedisPermit *
redis_semaphore_acquire_finish (RedisSemaphore *semaphore, GAsyncResult *result, GError **error)
{
  g_return_val_if_fail (semaphore != NULL, NULL);
  g_return_val_if_fail (g_task_is_valid (result, NULL), NULL);
  g_return_val_if_fail (g_task_get_source_tag (G_TASK (result)) == redis_semaphore_acquire_async,
                        NULL);
  return g_task_propagate_pointer (G_TASK (result), error);
}
