/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* semaphore-async.c: redis_semaphore_acquire_async(), the acquisition machine of
 * acquire.c driven from the caller's main context.
 *
 * A pending call is not a blocked thread. Each attempt (one request to the store, which
 * blocks for its round trip) runs on a GIO worker thread and hands its verdict back to
 * the caller's context; between attempts the call sleeps there, on a timer at the
 * machine's wake-up time (the smallest permit TTL, the spin interval or the deadline)
 * and as a sleeper of the semaphore's anchor lock (lock.c's queued sleepers), which
 * rl_lock_notify() pokes when any permit is released and close or cancellation poke
 * too. A poke only schedules an idle source in the context (it comes with the anchor's
 * mutex held, from any thread); the next step runs there. The fields the worker and the
 * context both touch (the machine, the permit, the error) are handed over under the
 * call's mutex, a pthread one (sync.h), so ThreadSanitizer sees the hand-over.
 */
#include "config.h"

#include "semaphore.h"

typedef struct
{
  RlLockWaiter waiter; /* poked by the anchor: notifications, close, cancellation */
  gint ref_count;      /* atomic */
  RedisSemaphore *semaphore;
  RedisLock *anchor;
  GTask *task; /* the caller's */
  GMainContext *context;
  GCancellable *cancellable;
  gulong cancel_handler;
  gboolean pubsub;
  gboolean bounded;
  gint64 ttl_ms;
  GSource *timer; /* the context's: the sleep's end */
  gint poked;     /* atomic: an idle source is on its way */

  RlMutex mutex;     /* hands the three below between the worker and the context */
  RlAcquire acq;
  RedisPermit *permit;
  GError *error;
} SemCall;

static void step (SemCall *call, RlAcquireAction action);

static SemCall *
call_ref (SemCall *call)
{
  g_atomic_int_inc (&call->ref_count);
  return call;
}

static void
call_unref (gpointer data)
{
  SemCall *call = data;

  if (!g_atomic_int_dec_and_test (&call->ref_count))
    return;
  g_assert (call->timer == NULL);
  if (call->permit != NULL)
    rl_permit_unref (call->permit);
  g_clear_error (&call->error);
  g_clear_object (&call->cancellable);
  g_main_context_unref (call->context);
  g_object_unref (call->task);
  redis_semaphore_unref (call->semaphore);
  rl_mutex_clear (&call->mutex);
  g_free (call);
}

/* Waking ----------------------------------------------------------------------- */

static gboolean
on_woken (gpointer data)
{
  SemCall *call = data;
  GError *error = NULL;
  guint16 seq;

  g_atomic_int_set (&call->poked, 0);
  if (call->timer == NULL)
    return G_SOURCE_REMOVE; /* finished meanwhile */
  g_source_destroy (call->timer);
  g_clear_pointer (&call->timer, g_source_unref);
  rl_lock_wake_queued (call->anchor, &call->waiter);
  if (rl_lock_wait_error (call->anchor, call->cancellable, &error))
    {
      rl_mutex_lock (&call->mutex);
      call->error = error;
      rl_mutex_unlock (&call->mutex);
      step (call, RL_ACQUIRE_DONE);
      return G_SOURCE_REMOVE;
    }
  seq = rl_lock_notify_seq (call->anchor);
  step (call, rl_acquire_step (&call->acq, g_get_monotonic_time (), seq));
  return G_SOURCE_REMOVE;
}

/* From any thread (the anchor's mutex may be held): only schedules on_woken(). */
static void
poke (SemCall *call)
{
  GSource *idle;

  if (!g_atomic_int_compare_and_exchange (&call->poked, 0, 1))
    return;
  idle = g_idle_source_new ();
  g_source_set_callback (idle, on_woken, call_ref (call), call_unref);
  g_source_attach (idle, call->context);
  g_source_unref (idle);
}

static void
on_poke (RlLockWaiter *waiter)
{
  poke ((SemCall *) waiter);
}

static void
on_cancelled (GCancellable *cancellable, gpointer data)
{
  (void) cancellable;
  poke (data);
}

static gboolean
on_timer (gpointer data)
{
  return on_woken (data);
}

/* Sleeps as the machine says: until wake_at, or a notification past its seq. */
static void
sleep_until_woken (SemCall *call)
{
  gint64 now = g_get_monotonic_time ();
  gint64 ms = call->acq.wake_at > now ? (call->acq.wake_at - now + 999) / 1000 : 0;

  call->timer = g_timeout_source_new ((guint) MIN (ms, G_MAXUINT));
  g_source_set_callback (call->timer, on_timer, call_ref (call), call_unref);
  g_source_attach (call->timer, call->context);
  /* The number moved already, or the registry closed: look again now. */
  if (call->acq.watch_seq && !rl_lock_sleep_queued (call->anchor, &call->waiter, call->acq.seq))
    poke (call);
  if (call->cancellable != NULL && g_cancellable_is_cancelled (call->cancellable))
    poke (call);
}

/* Attempts ---------------------------------------------------------------------- */

static void
attempt_in_thread (GTask *task, gpointer source, gpointer data, GCancellable *cancellable)
{
  SemCall *call = data;
  RlAcquireAction action;

  (void) source;
  (void) cancellable;
  rl_mutex_lock (&call->mutex);
  action = rl_semaphore_attempt_step (call->semaphore, &call->acq, call->pubsub, call->bounded,
                                      call->ttl_ms, &call->permit, &call->error);
  rl_mutex_unlock (&call->mutex);
  g_task_return_int (task, action);
}

static void
on_attempted (GObject *source, GAsyncResult *result, gpointer data)
{
  SemCall *call = data;
  RlAcquireAction action = (RlAcquireAction) g_task_propagate_int (G_TASK (result), NULL);

  (void) source;
  /* What the worker wrote under the mutex is this thread's from here on (the edge
   * ThreadSanitizer needs: GTask's own hand-over uses GLib's locks, which it cannot see). */
  rl_mutex_lock (&call->mutex);
  rl_mutex_unlock (&call->mutex);
  step (call, action);
  call_unref (call);
}

/* The machine's steps, in the caller's context. */
static void
step (SemCall *call, RlAcquireAction action)
{
  RedisLockRegistry *registry = call->anchor->registry;
  GTask *attempt;
  RedisPermit *permit;
  GError *error;

  switch (action)
    {
    case RL_ACQUIRE_ATTEMPT:
      /* Its result comes back in the call's context, whichever thread runs it. */
      g_main_context_push_thread_default (call->context);
      attempt = g_task_new (NULL, NULL, on_attempted, call_ref (call));
      g_main_context_pop_thread_default (call->context);
      g_task_set_task_data (attempt, call, NULL);
      g_task_run_in_thread (attempt, attempt_in_thread);
      g_object_unref (attempt);
      return;
    case RL_ACQUIRE_WATCH:
      step (call, rl_registry_watch (registry, &call->acq, FALSE));
      return;
    case RL_ACQUIRE_SLEEP:
      sleep_until_woken (call);
      return;
    case RL_ACQUIRE_DONE:
    default:
      g_cancellable_disconnect (call->cancellable, call->cancel_handler);
      call->cancel_handler = 0;
      rl_lock_wake_queued (call->anchor, &call->waiter);
      rl_mutex_lock (&call->mutex);
      permit = g_steal_pointer (&call->permit);
      error = g_steal_pointer (&call->error);
      rl_mutex_unlock (&call->mutex);
      if (error != NULL)
        g_task_return_error (call->task, error);
      else
        g_task_return_pointer (call->task, permit, (GDestroyNotify) rl_permit_unref);
      call_unref (call);
      return;
    }
}

void
redis_semaphore_acquire_async (RedisSemaphore *semaphore, gint64 wait_ms,
                               GCancellable *cancellable, GAsyncReadyCallback callback,
                               gpointer user_data)
{
  GTask *task;
  SemCall *call;
  GError *error = NULL;
  RedisLockRegistry *registry;

  g_return_if_fail (semaphore != NULL);

  task = g_task_new (NULL, cancellable, callback, user_data);
  g_task_set_source_tag (task, redis_semaphore_acquire_async);
  if (!rl_semaphore_begin (semaphore, cancellable, &error))
    {
      g_task_return_error (task, error);
      g_object_unref (task);
      return;
    }
  call = g_new0 (SemCall, 1);
  call->ref_count = 1;
  call->waiter.poke = on_poke;
  call->semaphore = redis_semaphore_ref (semaphore);
  call->anchor = rl_semaphore_anchor (semaphore);
  call->task = task;
  call->context = g_main_context_ref_thread_default ();
  call->cancellable = cancellable != NULL ? g_object_ref (cancellable) : NULL;
  registry = call->anchor->registry;
  call->pubsub = rl_registry_pubsub (registry);
  call->bounded = wait_ms != 0;
  call->ttl_ms = RL_ATOMIC_GET (registry->settings.expire_after_ms);
  rl_mutex_init (&call->mutex);
  rl_acquire_init (&call->acq, call->anchor->key_data,
                   wait_ms < 0 ? RL_FOREVER : rl_deadline_after (g_get_monotonic_time (), wait_ms),
                   0);
  if (cancellable != NULL && wait_ms != 0)
    call->cancel_handler = g_cancellable_connect (cancellable, G_CALLBACK (on_cancelled), call,
                                                  NULL);
  step (call, rl_acquire_step (&call->acq, g_get_monotonic_time (), 0));
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
