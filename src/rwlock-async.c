/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* rwlock-async.c: redis_rw_lock_read_lock_async() and redis_rw_lock_write_lock_async(),
 * for code that runs a GMainLoop and must not block it: a thin driver over
 * async-driver.c, as the semaphore's call is, with the read-write lock's local level in
 * front of the machine.
 *
 * A pending call is not a thread. Its local step is rwlock.c's, the one the blocking
 * calls take (re-entry, a waiting writer holding new readers back, readers of this
 * process sharing one reader lease): while it must wait, the call's waiter sits in the
 * lock's queue, poked whenever the local state changes, as the blocking threads are
 * signalled; a reader lease that must be confirmed first is confirmed on a worker. Once
 * let in, the call takes its lease on the acquisition machine (rl_rw_lock_attempt_step()
 * on the registry's workers, sleeping on the lease's carrier); a writer that did not get
 * it removes its waiting mark on a worker too. One deadline covers both levels.
 *
 * A call takes the hold for the thread that made it, exactly as the blocking call would
 * there, so the unlocks that follow are that thread's plain read or write unlocks; the
 * result goes back through the GTask in that thread's main context.
 *
 * The asynchronous unlocks end the calling thread's hold in that thread, at once, as
 * the blocking unlocks' local part does; only the release of a lease (the last reading
 * thread's reader lease, the outermost write hold's writer lease) runs on a worker
 * (async-once.c), a writer's under the call's marker meanwhile.
 */
#include "config.h"

#include "async-driver.h"
#include "async-once.h"
#include "rwlock.h"

typedef enum
{
  STAGE_LOCAL,   /* counted among the lock's waiters, at the local level */
  STAGE_LEASING, /* let in: the machine takes the lease (rl_rw_lock_lease_end() at the end) */
  STAGE_OUT,     /* counted out by the local level (taken there, or gave up) */
} RwStage;

typedef struct
{
  RlRwCall rw;
  RedisRWLock *lock; /* a user reference: keeps the carriers and the registry */
  GTask *task;
  RwStage stage; /* the caller's context */
} RwAsync;

static RlAsyncLocal
rw_local (gpointer data, RlLockWaiter *waiter, gboolean may_wait)
{
  RwAsync *call = data;

  switch (rl_rw_lock_local_async (&call->rw, waiter, may_wait))
    {
    case RL_RW_LOCAL_WAIT:
      return RL_ASYNC_LOCAL_WAIT;
    case RL_RW_LOCAL_CONFIRM:
      return RL_ASYNC_LOCAL_JOB;
    case RL_RW_LOCAL_LEASE:
      call->stage = STAGE_LEASING;
      return RL_ASYNC_LOCAL_GO;
    case RL_RW_LOCAL_TAKEN:
      call->stage = STAGE_OUT;
      return RL_ASYNC_LOCAL_TAKEN;
    case RL_RW_LOCAL_ENDED:
    default:
      call->stage = STAGE_OUT;
      return RL_ASYNC_LOCAL_ENDED;
    }
}

static void
rw_local_job (gpointer data)
{
  rl_rw_lock_confirm (&((RwAsync *) data)->rw);
}

static RlAcquireAction
rw_attempt (gpointer data, RlAcquire *acq, gboolean pubsub, gboolean bounded, GError **error)
{
  return rl_rw_lock_attempt_step (&((RwAsync *) data)->rw, acq, pubsub, bounded, error);
}

static void
rw_settle (gpointer data)
{
  rl_rw_lock_stop_waiting (&((RwAsync *) data)->rw);
}

static void
rw_done (gpointer data, gboolean taken, GError *error)
{
  RwAsync *call = data;

  if (call->stage == STAGE_LEASING)
    rl_rw_lock_lease_end (&call->rw, taken);
  else if (call->stage == STAGE_LOCAL)
    rl_rw_lock_leave (&call->rw); /* the driver could not start */
  if (error != NULL)
    g_task_return_error (call->task, error);
  else
    g_task_return_boolean (call->task, taken);
  g_object_unref (call->task);
  redis_rw_lock_unref (call->lock);
  g_free (call);
}

RL_DEFINE_ASYNC_DRIVER (rw, .local = rw_local, .local_job = rw_local_job, .settle = rw_settle);

/* The GTask's source tag of a @mode call. */
static gpointer
tag_of (RlRwMode mode)
{
  return mode == RL_RW_WRITE ? (gpointer) redis_rw_lock_write_lock_async
                             : (gpointer) redis_rw_lock_read_lock_async;
}

static void
start (RedisRWLock *lock, RlRwMode mode, gint64 wait_ms, GCancellable *cancellable,
       GAsyncReadyCallback callback, gpointer user_data)
{
  GTask *task;
  GError *error = NULL;
  gboolean taken;
  RwAsync *call;

  g_return_if_fail (lock != NULL);
  g_return_if_fail (cancellable == NULL || G_IS_CANCELLABLE (cancellable));

  task = g_task_new (NULL, cancellable, callback, user_data);
  g_task_set_source_tag (task, tag_of (mode));
  g_task_set_task_data (task, lock, NULL);
  /* The result stands as it is: a call that took the lock before it was cancelled says
   * so (the calling thread holds it and must unlock). */
  g_task_set_check_cancellable (task, FALSE);

  call = g_new0 (RwAsync, 1);
  if (!rl_rw_lock_enter (&call->rw, lock, mode, g_thread_self (), wait_ms, cancellable, &taken,
                         &error)
      || taken)
    {
      if (error != NULL)
        g_task_return_error (task, error);
      else
        g_task_return_boolean (task, TRUE);
      g_object_unref (task);
      g_free (call);
      return;
    }
  call->lock = redis_rw_lock_ref (lock);
  call->task = task;
  call->stage = STAGE_LOCAL;
  rl_async_drive (rl_rw_lock_carrier (&call->rw), wait_ms, cancellable, &rw_driver, call);
}

static gboolean
finish (RedisRWLock *lock, GAsyncResult *result, RlRwMode mode, GError **error)
{
  g_return_val_if_fail (g_task_is_valid (result, NULL), FALSE);
  g_return_val_if_fail (g_task_get_source_tag (G_TASK (result)) == tag_of (mode), FALSE);
  g_return_val_if_fail (g_task_get_task_data (G_TASK (result)) == lock, FALSE);
  return g_task_propagate_boolean (G_TASK (result), error);
}

void
redis_rw_lock_read_lock_async (RedisRWLock *lock, gint64 wait_ms, GCancellable *cancellable,
                               GAsyncReadyCallback callback, gpointer user_data)
{
  start (lock, RL_RW_READ, wait_ms, cancellable, callback, user_data);
}

void
redis_rw_lock_write_lock_async (RedisRWLock *lock, gint64 wait_ms, GCancellable *cancellable,
                                GAsyncReadyCallback callback, gpointer user_data)
{
  start (lock, RL_RW_WRITE, wait_ms, cancellable, callback, user_data);
}

gboolean
redis_rw_lock_read_lock_finish (RedisRWLock *lock, GAsyncResult *result, GError **error)
{
  return finish (lock, result, RL_RW_READ, error);
}

gboolean
redis_rw_lock_write_lock_finish (RedisRWLock *lock, GAsyncResult *result, GError **error)
{
  return finish (lock, result, RL_RW_WRITE, error);
}

/* Unlocks ------------------------------------------------------------------------- */

typedef struct
{
  RedisRWLock *lock; /* a user reference */
  gpointer self;     /* the thread whose hold ends */
  gboolean write;
  gboolean reading; /* WRITE: the thread also reads (never, with a marker) */
} RwUnlock;

static gboolean
unlock_job (gpointer data, GError **error)
{
  RwUnlock *call = data;

  if (call->write)
    return rl_rw_lock_write_unlock_release (call->lock, call->self, call->reading, error);
  return rl_rw_lock_read_unlock_release (call->lock, error);
}

static void
unlock_free (gpointer data)
{
  RwUnlock *call = data;

  redis_rw_lock_unref (call->lock);
  g_free (call);
}

static gpointer
unlock_tag_of (gboolean write)
{
  return write ? (gpointer) redis_rw_lock_write_unlock_async
               : (gpointer) redis_rw_lock_read_unlock_async;
}

static void
unlock_start (RedisRWLock *lock, gboolean write, GCancellable *cancellable,
              GAsyncReadyCallback callback, gpointer user_data)
{
  g_autoptr (GTask) task = NULL;
  GError *error = NULL;
  RwUnlock *call;
  RlRwUnlock step;

  g_return_if_fail (lock != NULL);
  g_return_if_fail (cancellable == NULL || G_IS_CANCELLABLE (cancellable));

  task = g_task_new (NULL, cancellable, callback, user_data);
  g_task_set_source_tag (task, unlock_tag_of (write));
  g_task_set_task_data (task, lock, NULL);
  g_task_set_check_cancellable (task, FALSE);
  if (g_cancellable_set_error_if_cancelled (cancellable, &error))
    {
      g_task_return_error (task, error);
      return;
    }
  call = g_new0 (RwUnlock, 1);
  call->self = g_thread_self ();
  call->write = write;
  step = write ? rl_rw_lock_write_unlock_begin (lock, call->self, call, &call->reading, &error)
               : rl_rw_lock_read_unlock_begin (lock, call->self, &error);
  switch (step)
    {
    case RL_RW_UNLOCK_RELEASE:
      call->lock = redis_rw_lock_ref (lock);
      rl_async_once (write ? lock->writer : lock->reader, unlock_job, call, unlock_free, task);
      return;
    case RL_RW_UNLOCK_DONE:
      g_task_return_boolean (task, TRUE);
      break;
    case RL_RW_UNLOCK_FAILED:
    default:
      g_task_return_error (task, error);
      break;
    }
  g_free (call);
}

static gboolean
unlock_finish (RedisRWLock *lock, GAsyncResult *result, gboolean write, GError **error)
{
  g_return_val_if_fail (g_task_is_valid (result, NULL), FALSE);
  g_return_val_if_fail (g_task_get_source_tag (G_TASK (result)) == unlock_tag_of (write), FALSE);
  g_return_val_if_fail (g_task_get_task_data (G_TASK (result)) == lock, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);
  return g_task_propagate_boolean (G_TASK (result), error);
}

void
redis_rw_lock_read_unlock_async (RedisRWLock *lock, GCancellable *cancellable,
                                 GAsyncReadyCallback callback, gpointer user_data)
{
  unlock_start (lock, FALSE, cancellable, callback, user_data);
}

gboolean
redis_rw_lock_read_unlock_finish (RedisRWLock *lock, GAsyncResult *result, GError **error)
{
  return unlock_finish (lock, result, FALSE, error);
}

void
redis_rw_lock_write_unlock_async (RedisRWLock *lock, GCancellable *cancellable,
                                  GAsyncReadyCallback callback, gpointer user_data)
{
  unlock_start (lock, TRUE, cancellable, callback, user_data);
}

gboolean
redis_rw_lock_write_unlock_finish (RedisRWLock *lock, GAsyncResult *result, GError **error)
{
  return unlock_finish (lock, result, TRUE, error);
}
