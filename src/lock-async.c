/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* lock-async.c: redis_lock_lock_async() and redis_lock_unlock_async(), for code that
 * runs a GMainLoop and must not block it.
 *
 * A pending call is not a thread. It waits in the lock's queue (lock.c's queued
 * waiters, counted with the threads that wait, so the unlock's hand-off rules see it);
 * whoever frees the local mutex grants it to the first queued call when it is the
 * queue's turn, lease and all when the plan hands the lease over, so a local hand-off
 * costs no Redis command. The granted call then owns the mutex under a marker (the
 * call itself, which no thread compares equal to) through its lease phase, the
 * acquisition machine of acquire.c driven by the call's steps: attempts in the store
 * (lock.c's attempt step), and between them a sleep on the lock's notification
 * number, poked by the store's release notification (rl_lock_notify()), a timer at the
 * holder's PTTL bound or the deadline, close or cancellation. Only when the lease is
 * its own does the hold pass to the calling thread, and the result go back to that
 * thread's main context (GTask), so everything a thread can ask of its hold works from
 * there on.
 *
 * What each step does runs on the worker pool of the call's registry (async-pool.c:
 * RL_ASYNC_THREADS threads at most per server, leaving after RL_ASYNC_IDLE_MS idle): the store's
 * calls block, so they never run in the caller's main context, and a registry whose
 * server does not answer ties up its own workers only, never another registry's. A
 * call whose step could not start before its deadline (every worker of its registry
 * blocked) fails with CONNECTION instead of reporting the lock held. The one step that
 * needs no request, taking a lease handed over with the mutex, runs in the caller's
 * context when nothing else of the call is under way, so a local hand-off to a
 * pending call costs no worker either. A call's steps never
 * run two at a time: every event (granted, poked, a timer, cancelled) counts a poke,
 * and only the first uncounted poke schedules the step, which runs until it has seen
 * them all. Each call has one source in the caller's context, made by the calling
 * thread; the workers only set its ready time, for a timer (the deadline, the PTTL
 * bound) or for the result, which the source delivers with the GTask in that context.
 * So a deadline needs that context running, as the callback does, and every GTask and
 * GMainContext call but g_source_set_ready_time() stays in the caller's thread. Results
 * pass through atomics: GLib's own locks are invisible to ThreadSanitizer, these are
 * not. The library's own unlock that nobody waits for (rl_lock_unlock_background(),
 * the leader's) is the same unlock call with neither task nor source: it needs no
 * main context, and its end on the worker drops what it held.
 */
#include "config.h"

#include "async-pool.h"

typedef struct _AsyncCall AsyncCall;
static void pool_push (AsyncCall *call);
static void run_call (RlAsyncJob *job);

/* A call -------------------------------------------------------------------------- */

typedef enum
{
  CALL_LOCK,
  CALL_UNLOCK,
} CallKind;

/* Where a call stands; the lease phase is the three in the middle, in which the call
 * owns the local mutex under its marker. */
typedef enum
{
  PHASE_QUEUED,    /* in the lock's queue, or granted and not yet seen so */
  PHASE_KEPT,      /* owns the mutex with the lease handed over, not yet accepted */
  PHASE_OWNED,     /* owns the mutex without a lease: the machine is to start */
  PHASE_ACQUIRING, /* the acquisition machine runs */
  PHASE_DONE,      /* the result is set, for the caller's context to deliver */
} CallPhase;

struct _AsyncCall
{
  RlLockWaiter waiter; /* first: &call->waiter is the owner marker */
  RlAsyncJob job;      /* a step on the registry's workers (async-pool.h) */
  gint ref_count;      /* atomic */
  gint pokes;          /* atomic: events not yet seen by a step; the first schedules one */
  CallKind kind;
  RedisLock *lock; /* a user reference */
  GTask *task;               /* the caller's thread only */
  GSource *source;           /* in the caller's context: timers and the result */
  GThread *thread;           /* the caller: the owner once the lease is taken */
  GCancellable *cancellable; /* the task's, or NULL */
  gulong cancel_handler;     /* the caller's thread only */
  gint done;                 /* atomic: the result below is set */
  gint ok;                   /* atomic */
  gpointer error;            /* atomic: GError, or NULL */
  gint64 deadline; /* monotonic µs, RL_FOREVER */
  gint64 ttl_ms;
  gboolean bounded; /* wait_ms != 0: requests are cut short at the deadline */
  char *fence_key;
  gint started; /* atomic: the source is attached (call_start()) */
  gint granted; /* atomic, set by granted() */
  gint kept;    /* atomic, set by granted() before granted */

  /* The steps' own (one step at a time). */
  CallPhase phase;
  gboolean pubsub;   /* the registry's wait mode when the machine started */
  gboolean sleeping; /* registered as the lock's sleeper, with the timer set */
  RlAcquire acq;     /* the acquisition machine (PHASE_ACQUIRING) */
};

/* Orders a call's result being set and its source being told, against the source
 * firing: the source never sees the result before the worker is done with it. */
static RlMutex result_mutex = { PTHREAD_MUTEX_INITIALIZER };

/* The source of a call, in the caller's context. */
typedef struct
{
  GSource source;
  AsyncCall *call; /* alive while the source can fire: the result is delivered first */
} CallSource;

static AsyncCall *
call_ref (AsyncCall *call)
{
  g_atomic_int_inc (&call->ref_count);
  return call;
}

static void
call_unref (gpointer data)
{
  AsyncCall *call = data;

  if (!g_atomic_int_dec_and_test (&call->ref_count))
    return;
  g_clear_pointer (&call->source, g_source_unref);
  g_clear_object (&call->cancellable);
  g_clear_object (&call->task);
  g_free (call->fence_key);
  redis_lock_unref (call->lock);
  g_free (call);
}

/* Queues a step of @call (which brings a reference for it) on its registry's workers. */
static void
pool_push (AsyncCall *call)
{
  rl_async_pool_push (call->lock->registry, &call->job, call->lock->key_data);
}

/* Counts an event; the first one not yet seen schedules a step. Any thread, any
 * mutex held (only the pool's mutex is taken). */
static void
call_poke (AsyncCall *call)
{
  if (g_atomic_int_add (&call->pokes, 1) == 0)
    pool_push (call_ref (call));
}

static void
on_granted (RlLockWaiter *waiter, gboolean kept)
{
  AsyncCall *call = (AsyncCall *) waiter;

  g_atomic_int_set (&call->kept, kept);
  g_atomic_int_set (&call->granted, TRUE);
  if (kept && g_atomic_int_get (&call->started))
    /* The lease came with the mutex: taking it needs no request, so the caller's
     * context does it (call_source_dispatch()) without a trip through a worker. */
    g_source_set_ready_time (call->source, 0);
  else
    call_poke (call);
}

static void
on_poke (RlLockWaiter *waiter)
{
  call_poke ((AsyncCall *) waiter);
}

static void
on_cancelled (GCancellable *cancellable, gpointer data)
{
  call_poke (data);
}

static gboolean step_kept_inline (AsyncCall *call);

/* The call's source fired, in the caller's context: the result is there (delivered
 * now, and the call's own reference dropped); or the call was granted the mutex with
 * the lease, which this thread takes when no step is under way; or a timer was due
 * (poked). */
static gboolean
call_source_dispatch (GSource *source, GSourceFunc callback, gpointer data)
{
  AsyncCall *call = ((CallSource *) source)->call;
  GError *error;
  gboolean done;

  rl_mutex_lock (&result_mutex);
  g_source_set_ready_time (source, -1);
  done = g_atomic_int_get (&call->done);
  rl_mutex_unlock (&result_mutex);
  if (!done)
    {
      if (!g_atomic_int_get (&call->granted)
          || !g_atomic_int_compare_and_exchange (&call->pokes, 0, 1))
        {
          call_poke (call);
          return G_SOURCE_CONTINUE;
        }
      /* This thread runs the step now, as a worker would (see run_call()). */
      done = step_kept_inline (call);
      if (!done || !g_atomic_int_compare_and_exchange (&call->pokes, 1, 0))
        pool_push (call_ref (call));
      if (!done)
        return G_SOURCE_CONTINUE;
    }
  g_cancellable_disconnect (call->cancellable, call->cancel_handler);
  call->cancel_handler = 0;
  error = g_atomic_pointer_get (&call->error);
  if (error != NULL)
    g_task_return_error (call->task, error);
  else
    g_task_return_boolean (call->task, g_atomic_int_get (&call->ok));
  g_clear_object (&call->task);
  call_unref (call); /* call_start()'s */
  return G_SOURCE_REMOVE;
}

static GSourceFuncs call_source_funcs = {
  .dispatch = call_source_dispatch,
};

static AsyncCall *
call_new (CallKind kind, RedisLock *lock, GTask *task, GCancellable *cancellable)
{
  AsyncCall *call = g_new0 (AsyncCall, 1);

  call->waiter.granted = on_granted;
  call->waiter.poke = on_poke;
  call->job.run = run_call;
  call->ref_count = 1;
  /* Held until the caller has set the call up: events until then are counted and
   * seen by the step the caller schedules. */
  call->pokes = 1;
  call->kind = kind;
  call->lock = redis_lock_ref (lock);
  call->task = task != NULL ? g_object_ref (task) : NULL;
  call->thread = g_thread_self ();
  call->cancellable = cancellable != NULL ? g_object_ref (cancellable) : NULL;
  call->deadline = RL_FOREVER;
  return call;
}

/* Schedules the first step, with the events counted since call_new(). The call keeps
 * a reference of its own until its result is delivered: the lock's queue and its
 * owner field do not count. Its source is made here, in the caller's thread, and only
 * its ready time is set from the workers: what GLib does across threads under its own
 * locks stays inside GLib, and the call's state passes through atomics and the pool's
 * mutex, which ThreadSanitizer sees. */
static void
call_start (AsyncCall *call)
{
  call->source = g_source_new (&call_source_funcs, sizeof (CallSource));
  ((CallSource *) call->source)->call = call;
  g_source_set_static_name (call->source, "redislock async call");
  g_source_attach (call->source, g_task_get_context (call->task));
  g_atomic_int_set (&call->started, TRUE);
  call_ref (call);
  pool_push (call_ref (call));
}

/* Has the call's source poke it at @at (monotonic µs; RL_FOREVER: never). A step that
 * waits sets it every time: the source clears it when it fires, then pokes. */
static void
arm_timer (AsyncCall *call, gint64 at)
{
  g_source_set_ready_time (call->source, at == RL_FOREVER ? -1 : at);
}

/* Sets the result, for the caller's context to deliver; a call nobody waits for (no
 * source: rl_lock_unlock_background()) only logs a failure. */
static void
complete (AsyncCall *call, gboolean ok, GError *error)
{
  rl_registry_leave (&call->acq);
  call->phase = PHASE_DONE;
  if (call->source == NULL)
    {
      if (error != NULL)
        rl_debug ("unlock of %s in the background: %s", call->lock->key_data, error->message);
      g_clear_error (&error);
      return;
    }
  g_atomic_pointer_set (&call->error, error);
  g_atomic_int_set (&call->ok, ok);
  rl_mutex_lock (&result_mutex);
  g_atomic_int_set (&call->done, TRUE);
  g_source_set_ready_time (call->source, 0);
  rl_mutex_unlock (&result_mutex);
}

/* The acquisition's steps ------------------------------------------------------------ */

/* Gives the local mutex up after the lease phase failed: a lease handed over and not
 * taken goes on to the next waiter (unless the registry closed, which released it). */
static void
give_back (AsyncCall *call)
{
  gboolean pass_lease
      = call->phase == PHASE_KEPT && !rl_registry_is_closed (call->lock->registry);

  if (call->sleeping)
    rl_lock_wake_queued (call->lock, &call->waiter);
  call->sleeping = FALSE;
  rl_lock_give_back_local (call->lock, pass_lease ? RL_LOCAL_WITH_LEASE : RL_LOCAL_NEEDS_LEASE);
}

static void
fail (AsyncCall *call, GError *error)
{
  give_back (call);
  complete (call, FALSE, error);
}

static void
succeed (AsyncCall *call)
{
  rl_lock_set_owner (call->lock, &call->waiter, call->thread);
  RL_ATOMIC_SET (call->lock->last_used, g_get_monotonic_time ());
  complete (call, TRUE, NULL);
}

/* The machine's RL_ACQUIRE_SLEEP: the call sleeps until the lock's notification number
 * moves past @seq (which pokes it) or the timer at @wake_at. FALSE when the number
 * moved already (or the registry closed): step again at once. */
static gboolean
sleep_until (AsyncCall *call, guint16 seq, gint64 wake_at)
{
  if (!rl_lock_sleep_queued (call->lock, &call->waiter, seq))
    return FALSE;
  call->sleeping = TRUE;
  arm_timer (call, wake_at);
  return TRUE;
}

/* The machine is done (or the attempt just made ended it): the call completes with
 * the lock, or without it (@error: the attempt's, taken; NULL: not acquired in time). */
static void
end_acquire (AsyncCall *call, GError *error)
{
  if (call->acq.outcome == RL_ACQUIRE_TAKEN)
    succeed (call);
  else
    fail (call, error);
}

/* The lease phase: the call owns the local mutex under its marker, and its steps drive
 * the acquisition machine; between them it sleeps as the lock's queued sleeper, poked
 * by notifications, its timer, close or cancellation. */
static void
step_lease (AsyncCall *call)
{
  RedisLock *lock = call->lock;
  RedisLockRegistry *registry = lock->registry;
  GError *error = NULL;

  for (;;)
    {
      RlAcquireAction action;
      gint64 now;

      if (rl_lock_wait_error (lock, call->cancellable, &error))
        {
          fail (call, error);
          return;
        }
      if (call->sleeping)
        {
          /* Poked: by the notification, the timer, or for nothing (then the machine
           * sleeps on). */
          rl_lock_wake_queued (lock, &call->waiter);
          call->sleeping = FALSE;
        }
      if (call->phase == PHASE_KEPT)
        {
          call->phase = PHASE_OWNED;
          if (rl_lock_accept_kept_lease (lock))
            {
              succeed (call);
              return;
            }
        }
      if (call->phase == PHASE_OWNED)
        {
          call->phase = PHASE_ACQUIRING;
          call->pubsub = rl_registry_pubsub (registry);
          rl_lock_begin_acquire (lock, &call->acq, call->deadline);
        }
      now = g_get_monotonic_time ();
      action = rl_acquire_step (&call->acq, now, rl_lock_notify_seq (lock));
      while (action == RL_ACQUIRE_ATTEMPT || action == RL_ACQUIRE_WATCH)
        if (action == RL_ACQUIRE_WATCH)
          /* Asking starts the subscription without waiting for it: the machine
           * retries at once when it is up; until then, the spin interval (its coming
           * up bumps the notification number). */
          action = rl_registry_watch (registry, &call->acq, FALSE);
        else if (rl_async_job_late (&call->job, &call->acq, call->bounded))
          {
            fail (call, g_error_new (REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION,
                                     "Lock “%s”: no request reached Redis within the call's "
                                     "wait; the registry's earlier requests had not returned",
                                     rl_lock_name (lock)));
            return;
          }
        else
          action = rl_lock_attempt_step (lock, &call->acq, call->pubsub, call->bounded,
                                         call->ttl_ms, call->fence_key, &error);
      if (action == RL_ACQUIRE_DONE)
        {
          end_acquire (call, error);
          return;
        }
      /* RL_ACQUIRE_SLEEP; if the number moved already, the machine looks again. */
      if (sleep_until (call, call->acq.seq, rl_acquire_sleep_end (&call->acq)))
        return;
    }
}

/* The first step of a call granted the mutex with the lease, run in the caller's
 * context: the lease is taken there, without a worker. FALSE when a worker must go on
 * (cancelled or closed, or the lease was stale and must be acquired afresh). */
static gboolean
step_kept_inline (AsyncCall *call)
{
  if (call->phase != PHASE_QUEUED || !g_atomic_int_get (&call->kept)
      || rl_lock_wait_error (call->lock, call->cancellable, NULL))
    return FALSE;
  call->phase = PHASE_OWNED;
  if (!rl_lock_accept_kept_lease (call->lock))
    return FALSE;
  succeed (call);
  return TRUE;
}

static void
step_lock (AsyncCall *call)
{
  RedisLock *lock = call->lock;
  GError *error = NULL;

  if (call->phase == PHASE_QUEUED)
    {
      if (!g_atomic_int_get (&call->granted))
        {
          gboolean stop = rl_lock_wait_error (lock, call->cancellable, &error);
          if (!stop && g_get_monotonic_time () < call->deadline)
            {
              arm_timer (call, call->deadline);
              if (!g_atomic_int_get (&call->granted))
                return;
              /* Granted meanwhile: setting the timer may have undone the grant's
               * wake-up of the source, so the lease phase starts here. */
            }
          else if (rl_lock_leave_queue (lock, &call->waiter))
            {
              complete (call, FALSE, error);
              return;
            }
          else
            /* Granted meanwhile: the lease phase gives the mutex back. */
            g_clear_error (&error);
        }
      call->phase = g_atomic_int_get (&call->kept) ? PHASE_KEPT : PHASE_OWNED;
    }
  if (call->phase != PHASE_DONE)
    step_lease (call);
}

static void
step_unlock (AsyncCall *call)
{
  GError *error = NULL;
  gboolean ok = rl_lock_unlock_outermost (call->lock, &error);

  complete (call, ok, error);
}

/* A worker runs the call's steps until it has seen every poke counted. */
static void
run_call (RlAsyncJob *job)
{
  AsyncCall *call = (AsyncCall *) ((char *) job - G_STRUCT_OFFSET (AsyncCall, job));

  for (;;)
    {
      gint seen = g_atomic_int_get (&call->pokes);

      if (call->phase != PHASE_DONE)
        {
          if (call->kind == CALL_LOCK)
            step_lock (call);
          else
            step_unlock (call);
        }
      if (g_atomic_int_compare_and_exchange (&call->pokes, seen, 0))
        break;
    }
  call_unref (call);
}

/* The public calls ----------------------------------------------------------------- */

static GTask *
task_new (RedisLock *lock, GCancellable *cancellable, GAsyncReadyCallback callback,
          gpointer user_data, gpointer tag)
{
  GTask *task = g_task_new (NULL, cancellable, callback, user_data);

  g_task_set_source_tag (task, tag);
  g_task_set_task_data (task, lock, NULL);
  /* The result stands as it is: a call that took the lock before it was cancelled
   * says so (the caller holds it and must unlock). */
  g_task_set_check_cancellable (task, FALSE);
  return task;
}

void
redis_lock_lock_async (RedisLock *lock, gint64 wait_ms, gint64 ttl_ms, GCancellable *cancellable,
                       GAsyncReadyCallback callback, gpointer user_data)
{
  g_autoptr (GTask) task = NULL;
  g_autofree char *fence_key = NULL;
  GError *error = NULL;
  AsyncCall *call;
  RlQueueTake taken;
  gint64 deadline;

  g_return_if_fail (lock != NULL);
  g_return_if_fail (cancellable == NULL || G_IS_CANCELLABLE (cancellable));

  task = task_new (lock, cancellable, callback, user_data, redis_lock_lock_async);
  if (!rl_check_ttl (ttl_ms, &error) || !rl_registry_check (lock->registry, &error)
      || g_cancellable_set_error_if_cancelled (cancellable, &error)
      || !rl_lock_fence_key (lock, &fence_key, &error))
    {
      g_task_return_error (task, error);
      return;
    }
  deadline = rl_deadline_after (g_get_monotonic_time (), wait_ms);

  call = call_new (CALL_LOCK, lock, task, cancellable);
  call->deadline = deadline;
  call->ttl_ms = ttl_ms != 0 ? ttl_ms : RL_ATOMIC_GET (lock->registry->settings.expire_after_ms);
  call->bounded = wait_ms != 0;
  call->fence_key = g_steal_pointer (&fence_key);
  taken = rl_lock_take_or_queue (lock, call->thread, &call->waiter, wait_ms != 0);
  switch (taken)
    {
    case RL_QUEUE_REENTERED:
      g_task_return_boolean (task, TRUE);
      call_unref (call);
      return;
    case RL_QUEUE_BUSY:
      g_task_return_boolean (task, FALSE);
      call_unref (call);
      return;
    case RL_QUEUE_OWNED:
    case RL_QUEUE_KEPT:
      on_granted (&call->waiter, taken == RL_QUEUE_KEPT);
      break;
    case RL_QUEUE_QUEUED:
    default:
      break;
    }
  if (cancellable != NULL)
    call->cancel_handler = g_cancellable_connect (cancellable, G_CALLBACK (on_cancelled),
                                                  call_ref (call), call_unref);
  call_start (call);
  call_unref (call);
}

/* The end of a `_finish` call: the boolean outcome of @result, a task of @lock made by
 * the call whose source tag is @tag. */
static gboolean
finish_boolean (RedisLock *lock, GAsyncResult *result, gpointer tag, GError **error)
{
  g_return_val_if_fail (lock != NULL, FALSE);
  g_return_val_if_fail (g_task_is_valid (result, NULL), FALSE);
  g_return_val_if_fail (g_task_get_source_tag (G_TASK (result)) == tag, FALSE);
  g_return_val_if_fail (g_task_get_task_data (G_TASK (result)) == lock, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);
  return g_task_propagate_boolean (G_TASK (result), error);
}

gboolean
redis_lock_lock_finish (RedisLock *lock, GAsyncResult *result, GError **error)
{
  return finish_boolean (lock, result, redis_lock_lock_async, error);
}

void
redis_lock_unlock_async (RedisLock *lock, GCancellable *cancellable, GAsyncReadyCallback callback,
                         gpointer user_data)
{
  g_autoptr (GTask) task = NULL;
  GError *error = NULL;
  AsyncCall *call;

  g_return_if_fail (lock != NULL);
  g_return_if_fail (cancellable == NULL || G_IS_CANCELLABLE (cancellable));

  task = task_new (lock, cancellable, callback, user_data, redis_lock_unlock_async);
  if (g_cancellable_set_error_if_cancelled (cancellable, &error))
    {
      g_task_return_error (task, error);
      return;
    }
  switch (rl_lock_unlock_local (lock, &error))
    {
    case RL_UNLOCK_INNER:
      g_task_return_boolean (task, TRUE);
      return;
    case RL_UNLOCK_OUTERMOST:
      /* The calling thread holds the lock no more: the release goes on under the
       * call's marker, on a worker. */
      call = call_new (CALL_UNLOCK, lock, task, NULL);
      rl_lock_set_owner (lock, call->thread, &call->waiter);
      call_start (call);
      call_unref (call);
      return;
    case RL_UNLOCK_FAILED:
    default:
      g_task_return_error (task, error);
      return;
    }
}

gboolean
redis_lock_unlock_finish (RedisLock *lock, GAsyncResult *result, GError **error)
{
  return finish_boolean (lock, result, redis_lock_unlock_async, error);
}

void
rl_lock_unlock_background (RedisLock *lock)
{
  g_autoptr (GError) error = NULL;
  AsyncCall *call;

  switch (rl_lock_unlock_local (lock, &error))
    {
    case RL_UNLOCK_OUTERMOST:
      /* As redis_lock_unlock_async(), with no task and no source: the call's own
       * reference goes with its one step, whose end drops the call, the lock and,
       * when it was the last reference, the registry, on the worker. */
      call = call_new (CALL_UNLOCK, lock, NULL, NULL);
      rl_lock_set_owner (lock, call->thread, &call->waiter);
      pool_push (call);
      return;
    case RL_UNLOCK_INNER:
      return;
    case RL_UNLOCK_FAILED:
    default:
      rl_debug ("unlock of %s in the background: %s", lock->key_data, error->message);
      return;
    }
}
