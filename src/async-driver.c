/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* async-driver.c: the acquisition machine of acquire.c driven from the caller's main
 * context, for the asynchronous calls of the lock family other than the plain lock's
 * (a semaphore's permits, a read-write lock's holds; see async-driver.h for what a
 * member supplies).
 *
 * A pending call is not a blocked thread. A member with a local level (the read-write
 * lock: its readers, writers and waiting writers of this process) first has the call
 * wait there: the member queues the call's waiter and pokes it when its state changes,
 * close or cancellation poke it too, a timer ends it at the deadline, and each poke has
 * the member's local step look again in the caller's context; a store request the local
 * step needs first (confirming a lease) runs as a job. Once let in, each attempt (one
 * request to the store, which blocks for its round trip) runs as a job on the
 * registry's bounded worker pool (async-pool.c, shared with lock-async.c), so no
 * thread is made per call or per attempt, and a registry whose server does not answer
 * ties up its own workers only. The attempt hands its verdict back to the caller's
 * context; between attempts the call sleeps there, holding no thread, on a timer at the
 * machine's wake-up time (the holder's TTL, the spin interval or the deadline) and as a
 * sleeper of the member's anchor lock (lock.c's queued sleepers; a semaphore's key, a
 * read-write lock's lease carrier), which rl_lock_notify() pokes when what it waits for
 * is released, and which close pokes too, as cancellation does. One deadline covers the
 * local wait and the machine.
 *
 * Everything that reaches the context from another thread (a job's end, a poke) is one
 * byte written to the call's pipe, which a source in the context reads: 'd' for a
 * job's end, the last thing the worker does with the call, 'x' for a poke. The
 * machine itself is touched only in the context, and by the attempt's job between its
 * push and its byte. So the hand-overs are the pool's mutex and a pipe's write and
 * read, edges ThreadSanitizer sees (GLib's own locks, behind GTask and
 * g_source_set_ready_time(), it cannot), and no mutex guards the call. A poke comes with
 * the anchor's (or the member's) mutex held, from any thread: a write() of one byte to
 * a non-blocking pipe is all it does. The pipe is closed only once nothing can write to
 * it any more: the call has left the member's queue and the anchor's sleepers, its
 * cancellation handler is disconnected and no job is under way.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <glib-unix.h>
#include <string.h>
#include <unistd.h>

#include "async-driver.h"
#include "async-pool.h"

/* Where a call stands; the job (RlAsyncJob) does what its phase says. */
typedef enum
{
  PHASE_LOCAL,   /* the member's local level: waiting, or its local job */
  PHASE_MACHINE, /* the acquisition machine: sleeping, or an attempt */
  PHASE_SETTLE,  /* the member's settle job, after the machine failed */
} CallPhase;

typedef struct
{
  RlLockWaiter waiter; /* poked by the member and the anchor: local state, notifications,
                          close */
  RlAsyncJob job;      /* a job on the registry's workers */
  const RlAsyncDriverClass *klass;
  gpointer data;     /* the member's call, handed to klass */
  RedisLock *anchor; /* kept alive by the member */
  GMainContext *context;
  GCancellable *cancellable;
  gulong cancel_handler;
  gint64 deadline;
  gboolean pubsub;
  gboolean bounded;
  int pipe[2];          /* [1]: written by pokes and jobs; [0]: read in the context */
  GSource *pipe_source; /* the context's */
  GSource *timer;       /* the context's: the sleep's end, or the local wait's */
  CallPhase phase;      /* the context's */
  gboolean sleeping;    /* the context's: between two attempts */
  gboolean working;     /* the context's: a job is queued or runs */

  /* Written by the attempt's job, read in the context after its byte. */
  RlAcquire acq;
  RlAcquireAction action;
  GError *error;
} DriverCall;

static void step (DriverCall *call, RlAcquireAction action);
static void local_step (DriverCall *call);
static void start_machine (DriverCall *call);

/* Any thread: the context looks at the call soon (@byte 'd': a job ended). */
static void
send_byte (DriverCall *call, char byte)
{
  ssize_t n;

  do
    n = write (call->pipe[1], &byte, 1);
  while (n < 0 && errno == EINTR);
  /* EAGAIN: bytes are waiting already, which is enough for a poke; the pipe holds far
   * more bytes than a call's pokes between two reads, and a job's 'd' is one. */
}

static void
nudge (DriverCall *call)
{
  send_byte (call, 'x');
}

static void
on_poke (RlLockWaiter *waiter)
{
  nudge ((DriverCall *) waiter);
}

static void
on_cancelled (GCancellable *cancellable, gpointer data)
{
  (void) cancellable;
  nudge (data);
}

static void
call_free (DriverCall *call)
{
  if (call->pipe_source != NULL)
    {
      g_source_destroy (call->pipe_source);
      g_source_unref (call->pipe_source);
    }
  close (call->pipe[0]);
  close (call->pipe[1]);
  g_clear_error (&call->error);
  g_clear_object (&call->cancellable);
  g_main_context_unref (call->context);
  g_free (call);
}

/* Ends the call: done() with @taken (@error: why not, taken), in the context. Nothing
 * writes to the pipe after this: out of the member's queue (it answered) and the
 * sleepers, no handler, no job under way. */
static void
finish (DriverCall *call, gboolean taken, GError *error)
{
  rl_registry_leave (&call->acq);
  g_cancellable_disconnect (call->cancellable, call->cancel_handler);
  call->cancel_handler = 0;
  call->klass->done (call->data, taken, error);
  call_free (call);
}

/* Timers ------------------------------------------------------------------------- */

static void
stop_timer (DriverCall *call)
{
  if (call->timer != NULL)
    {
      g_source_destroy (call->timer);
      g_clear_pointer (&call->timer, g_source_unref);
    }
}

static void woken (DriverCall *call);

static gboolean
on_timer (gpointer data)
{
  DriverCall *call = data;

  g_clear_pointer (&call->timer, g_source_unref);
  if (call->phase != PHASE_LOCAL)
    woken (call);
  else if (!call->working)
    local_step (call);
  /* Otherwise the end of the local job looks again. */
  return G_SOURCE_REMOVE;
}

/* Has the timer end the wait at @at (monotonic µs; RL_FOREVER: no timer). */
static void
set_timer (DriverCall *call, gint64 at)
{
  gint64 now = g_get_monotonic_time ();
  gint64 ms;

  stop_timer (call);
  if (at == RL_FOREVER)
    return;
  ms = at > now ? (at - now + 999) / 1000 : 0;
  call->timer = g_timeout_source_new ((guint) MIN (ms, G_MAXUINT));
  g_source_set_callback (call->timer, on_timer, call, NULL);
  g_source_attach (call->timer, call->context);
}

/* Jobs ---------------------------------------------------------------------------- */

/* A worker of the registry does what the call's phase says. */
static void
run_job (RlAsyncJob *job)
{
  DriverCall *call = (DriverCall *) ((char *) job - G_STRUCT_OFFSET (DriverCall, job));

  if (call->phase == PHASE_LOCAL)
    call->klass->local_job (call->data);
  else if (call->phase == PHASE_SETTLE)
    call->klass->settle (call->data);
  else if (rl_async_job_late (job, &call->acq, call->bounded))
    {
      call->error = g_error_new (REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION,
                                 "“%s”: no request reached Redis within the call's wait; the "
                                 "registry's earlier requests had not returned",
                                 call->anchor->key_data);
      call->action = RL_ACQUIRE_DONE;
    }
  else
    call->action
        = call->klass->attempt (call->data, &call->acq, call->pubsub, call->bounded, &call->error);
  send_byte (call, 'd'); /* the context may free the call from here on */
}

static void
push_job (DriverCall *call)
{
  call->working = TRUE;
  rl_async_pool_push (call->anchor->registry, &call->job, call->anchor->key_data);
}

/* The local level ------------------------------------------------------------------ */

/* The member's local step, in the context: at the start, and on each poke, the
 * deadline's timer and the end of its job. */
static void
local_step (DriverCall *call)
{
  GError *stop = NULL;
  gboolean may_wait;

  may_wait = !rl_lock_wait_error (call->anchor, call->cancellable, &stop)
             && g_get_monotonic_time () < call->deadline;
  switch (call->klass->local (call->data, &call->waiter, may_wait))
    {
    case RL_ASYNC_LOCAL_WAIT:
      g_clear_error (&stop);
      if (call->timer == NULL)
        set_timer (call, call->deadline);
      /* Cancelled between the look and the queueing: look again. */
      if (g_cancellable_is_cancelled (call->cancellable))
        nudge (call);
      return;
    case RL_ASYNC_LOCAL_JOB:
      g_clear_error (&stop);
      push_job (call);
      return;
    case RL_ASYNC_LOCAL_GO:
      g_clear_error (&stop);
      stop_timer (call);
      start_machine (call);
      return;
    case RL_ASYNC_LOCAL_TAKEN:
      g_clear_error (&stop);
      stop_timer (call);
      finish (call, TRUE, NULL);
      return;
    case RL_ASYNC_LOCAL_ENDED:
    default:
      stop_timer (call);
      finish (call, FALSE, stop);
      return;
    }
}

/* Sleeping -------------------------------------------------------------------------- */

static void
stop_sleeping (DriverCall *call)
{
  stop_timer (call);
  rl_lock_wake_queued (call->anchor, &call->waiter);
  call->sleeping = FALSE;
}

/* The sleep ended (its time, a poke, cancellation, close): the machine's next step. */
static void
woken (DriverCall *call)
{
  GError *error = NULL;

  stop_sleeping (call);
  if (rl_lock_wait_error (call->anchor, call->cancellable, &error))
    {
      call->error = error;
      step (call, RL_ACQUIRE_DONE);
      return;
    }
  step (call, rl_acquire_step (&call->acq, g_get_monotonic_time (),
                               rl_lock_notify_seq (call->anchor)));
}

/* Sleeps as the machine says: until wake_at, or a notification past its seq. */
static void
sleep_until_woken (DriverCall *call)
{
  call->sleeping = TRUE;
  set_timer (call, call->acq.wake_at);
  /* The number moved already, or the registry closed: look again now. */
  if (call->acq.watch_seq && !rl_lock_sleep_queued (call->anchor, &call->waiter, call->acq.seq))
    nudge (call);
  if (g_cancellable_is_cancelled (call->cancellable))
    nudge (call);
}

/* The pipe had bytes: a job ended, or the wait is to end. */
static gboolean
on_pipe (gint fd, GIOCondition condition, gpointer data)
{
  DriverCall *call = data;
  gboolean job_done = FALSE;
  char buf[64];
  ssize_t n;

  (void) condition;
  while ((n = read (fd, buf, sizeof buf)) > 0)
    job_done = job_done || memchr (buf, 'd', (size_t) n) != NULL;
  if (job_done)
    {
      g_assert (call->working);
      call->working = FALSE;
      if (call->phase == PHASE_LOCAL)
        local_step (call);
      else if (call->phase == PHASE_SETTLE)
        finish (call, FALSE, g_steal_pointer (&call->error));
      else
        step (call, call->action);
    }
  else if (call->phase == PHASE_LOCAL && !call->working)
    local_step (call);
  else if (call->sleeping)
    woken (call);
  /* Otherwise a poke or a cancellation during a job: the step that follows looks at
   * the cancellable, and a notification moved the number it compares. */
  return G_SOURCE_CONTINUE;
}

/* The machine starts, the local level (if any) having let the call in. */
static void
start_machine (DriverCall *call)
{
  call->phase = PHASE_MACHINE;
  call->pubsub = rl_registry_pubsub (call->anchor->registry);
  rl_lock_begin_acquire (call->anchor, &call->acq, call->deadline);
  step (call, rl_acquire_step (&call->acq, g_get_monotonic_time (), 0));
}

/* The machine's steps, in the caller's context. */
static void
step (DriverCall *call, RlAcquireAction action)
{
  RedisLockRegistry *registry = call->anchor->registry;
  gboolean taken;

  switch (action)
    {
    case RL_ACQUIRE_ATTEMPT:
      push_job (call);
      return;
    case RL_ACQUIRE_WATCH:
      step (call, rl_registry_watch (registry, &call->acq, FALSE));
      return;
    case RL_ACQUIRE_SLEEP:
      sleep_until_woken (call);
      return;
    case RL_ACQUIRE_DONE:
    default:
      stop_sleeping (call);
      taken = call->acq.outcome == RL_ACQUIRE_TAKEN;
      if (!taken && call->klass->settle != NULL)
        {
          call->phase = PHASE_SETTLE;
          push_job (call);
          return;
        }
      finish (call, taken, g_steal_pointer (&call->error));
      return;
    }
}

void
rl_async_drive (RedisLock *anchor, gint64 wait_ms, GCancellable *cancellable,
                const RlAsyncDriverClass *klass, gpointer data)
{
  DriverCall *call = g_new0 (DriverCall, 1);
  GError *error = NULL;

  if (!g_unix_open_pipe (call->pipe, FD_CLOEXEC, &error)
      || !g_unix_set_fd_nonblocking (call->pipe[0], TRUE, &error)
      || !g_unix_set_fd_nonblocking (call->pipe[1], TRUE, &error))
    {
      /* The member's local level is left alone: its step was never called. */
      klass->done (data, FALSE,
                   g_error_new (REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION,
                                "Cannot wait for “%s”: %s", anchor->key_data, error->message));
      g_error_free (error);
      g_free (call);
      return;
    }
  call->waiter.poke = on_poke;
  call->job.run = run_job;
  call->klass = klass;
  call->data = data;
  call->anchor = anchor;
  call->context = g_main_context_ref_thread_default ();
  call->cancellable = cancellable != NULL ? g_object_ref (cancellable) : NULL;
  call->bounded = wait_ms != 0;
  call->deadline
      = wait_ms < 0 ? RL_FOREVER : rl_deadline_after (g_get_monotonic_time (), wait_ms);
  call->pipe_source = g_unix_fd_source_new (call->pipe[0], G_IO_IN);
  g_source_set_callback (call->pipe_source, G_SOURCE_FUNC (on_pipe), call, NULL);
  g_source_attach (call->pipe_source, call->context);
  if (cancellable != NULL && wait_ms != 0)
    call->cancel_handler = g_cancellable_connect (cancellable, G_CALLBACK (on_cancelled), call,
                                                  NULL);
  if (klass->local != NULL)
    {
      call->phase = PHASE_LOCAL;
      local_step (call);
      return;
    }
  start_machine (call);
}
