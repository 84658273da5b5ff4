/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* rwlock-async.c: redis_rw_lock_read_lock_async() and redis_rw_lock_write_lock_async(),
 * for code that runs a GMainLoop and must not block it.
 *
 * A call takes the hold for the thread that made it, exactly as the blocking call
 * would there, so the unlocks that follow are that thread's plain read or write
 * unlocks. The acquisition itself is the blocking one (rwlock.c's read and write
 * paths, given the calling thread as the owner), run on a thread of its own, so the
 * local wait, the acquisition machine's attempts and sleeps, the deadline, close and
 * cancellation behave exactly as for a blocking call; a pending call costs that
 * thread until it ends. The result goes back to the calling thread's main context: a
 * source made there by the calling thread and owned by its context, whose ready time
 * the call's thread sets once (with the result, under a mutex the dispatch takes too),
 * delivers it with the GTask, so every GTask and GMainContext call but
 * g_source_set_ready_time() stays in the calling thread, as in lock-async.c.
 */
#include "config.h"

#include "rwlock.h"

typedef struct
{
  gint ref_count; /* atomic: the call's thread and the source */
  RedisRWLock *lock; /* a user reference */
  gboolean write;
  gpointer owner;  /* the calling thread */
  gint64 wait_ms;
  GCancellable *cancellable;
  GTask *task;     /* the calling thread only */
  GSource *source; /* in the calling thread's context, which owns it */
  gint ok;         /* atomic, set before the source is made ready */
  gpointer error;  /* atomic: GError, or NULL */
} RwCall;

/* Orders the call's thread's g_source_set_ready_time() before the dispatch that reads
 * the result and then frees the source, for ThreadSanitizer, which cannot see the
 * main context's own futex-based lock. A leaf: nothing is called under it but that. */
static RlMutex result_mutex = { PTHREAD_MUTEX_INITIALIZER };

static void
call_unref (RwCall *call)
{
  if (!g_atomic_int_dec_and_test (&call->ref_count))
    return;
  g_clear_object (&call->cancellable);
  redis_rw_lock_unref (call->lock);
  g_free (call);
}

/* The source that delivers the result; it holds the call's second reference. */
typedef struct
{
  GSource source;
  RwCall *call;
} CallSource;

static gboolean
call_source_dispatch (GSource *source, GSourceFunc callback, gpointer data)
{
  RwCall *call = ((CallSource *) source)->call;
  GError *error;

  rl_mutex_lock (&result_mutex);
  error = g_atomic_pointer_get (&call->error);
  rl_mutex_unlock (&result_mutex);

  if (error != NULL)
    g_task_return_error (call->task, error);
  else
    g_task_return_boolean (call->task, g_atomic_int_get (&call->ok));
  g_clear_object (&call->task);
  return G_SOURCE_REMOVE;
}

static void
call_source_finalize (GSource *source)
{
  call_unref (((CallSource *) source)->call);
}

static GSourceFuncs call_source_funcs = {
  .dispatch = call_source_dispatch,
  .finalize = call_source_finalize,
};

static gpointer
call_thread (gpointer data)
{
  RwCall *call = data;
  GError *error = NULL;
  gboolean ok;

  rl_thread_set_name ("redislock-rw");
  ok = call->write ? rl_rw_lock_write_as (call->lock, call->owner, call->wait_ms,
                                          call->cancellable, &error)
                   : rl_rw_lock_read_as (call->lock, call->owner, call->wait_ms,
                                         call->cancellable, &error);
  rl_mutex_lock (&result_mutex);
  g_atomic_int_set (&call->ok, ok);
  g_atomic_pointer_set (&call->error, error);
  g_source_set_ready_time (call->source, 0);
  rl_mutex_unlock (&result_mutex);
  call_unref (call);
  return NULL;
}

static void
start (RedisRWLock *lock, gboolean write, gint64 wait_ms, GCancellable *cancellable,
       GAsyncReadyCallback callback, gpointer user_data, gpointer tag)
{
  g_autoptr (GTask) task = g_task_new (NULL, cancellable, callback, user_data);
  g_autoptr (GMainContext) context = g_main_context_ref_thread_default ();
  g_autoptr (GError) error = NULL;
  GThread *thread;
  RwCall *call;

  g_task_set_source_tag (task, tag);
  g_task_set_task_data (task, lock, NULL);
  /* The result stands as it is: a call that took the lock before it was cancelled says
   * so (the calling thread holds it and must unlock). */
  g_task_set_check_cancellable (task, FALSE);

  call = g_new0 (RwCall, 1);
  call->ref_count = 2;
  call->lock = redis_rw_lock_ref (lock);
  call->write = write;
  call->owner = g_thread_self ();
  call->wait_ms = wait_ms;
  call->cancellable = cancellable != NULL ? g_object_ref (cancellable) : NULL;
  call->task = g_object_ref (task);
  call->source = g_source_new (&call_source_funcs, sizeof (CallSource));
  ((CallSource *) call->source)->call = call;
  g_source_set_static_name (call->source, write ? "redislock rw write" : "redislock rw read");
  g_source_attach (call->source, context);
  g_source_unref (call->source); /* the context's now, until the result is delivered */

  thread = g_thread_try_new ("redislock-rw", call_thread, call, &error);
  if (thread == NULL)
    {
      g_atomic_pointer_set (&call->error,
                            g_error_new (REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION,
                                         "Read-write lock “%s”: no thread for the call: %s",
                                         lock->name, error->message));
      g_source_set_ready_time (call->source, 0);
      call_unref (call);
      return;
    }
  g_thread_unref (thread);
}

static gboolean
finish (RedisRWLock *lock, GAsyncResult *result, gpointer tag, GError **error)
{
  g_return_val_if_fail (g_task_is_valid (result, NULL), FALSE);
  g_return_val_if_fail (g_task_get_source_tag (G_TASK (result)) == tag, FALSE);
  g_return_val_if_fail (g_task_get_task_data (G_TASK (result)) == lock, FALSE);
  return g_task_propagate_boolean (G_TASK (result), error);
}

void
redis_rw_lock_read_lock_async (RedisRWLock *lock, gint64 wait_ms, GCancellable *cancellable,
                               GAsyncReadyCallback callback, gpointer user_data)
{
  g_return_if_fail (lock != NULL);
  g_return_if_fail (cancellable == NULL || G_IS_CANCELLABLE (cancellable));
  start (lock, FALSE, wait_ms, cancellable, callback, user_data, redis_rw_lock_read_lock_async);
}

gboolean
redis_rw_lock_read_lock_finish (RedisRWLock *lock, GAsyncResult *result, GError **error)
{
  return finish (lock, result, redis_rw_lock_read_lock_async, error);
}

void
redis_rw_lock_write_lock_async (RedisRWLock *lock, gint64 wait_ms, GCancellable *cancellable,
                                GAsyncReadyCallback callback, gpointer user_data)
{
  g_return_if_fail (lock != NULL);
  g_return_if_fail (cancellable == NULL || G_IS_CANCELLABLE (cancellable));
  start (lock, TRUE, wait_ms, cancellable, callback, user_data, redis_rw_lock_write_lock_async);
}

gboolean
redis_rw_lock_write_lock_finish (RedisRWLock *lock, GAsyncResult *result, GError **error)
{
  return finish (lock, result, redis_rw_lock_write_lock_async, error);
}
