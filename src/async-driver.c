/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* async-driver.c: the acquisition machine of acquire.c driven from the caller's main
 * context, for the asynchronous calls of the lock family whose acquisition needs no
 * local queue (a semaphore's permits; see async-driver.h for what a member supplies).
 *
 * A pending call is not a blocked thread. Each attempt (one request to the store, which
 * blocks for its round trip) runs as a job on the registry's bounded worker pool
 * (async-pool.c, shared with lock-async.c), so no thread is made per call or per
 * attempt, and a registry whose server does not answer ties up its own workers only.
 * The attempt hands its verdict back to the caller's context; between attempts the
 * call sleeps there, holding no thread, on a timer at the machine's wake-up time (the
 * holder's TTL, the spin interval or the deadline) and as a sleeper of the member's
 * anchor lock (lock.c's queued sleepers; a semaphore's key), which rl_lock_notify()
 * pokes when what it waits for is released, and which close pokes too, as cancellation
 * does.
 *
 * Everything that reaches the context from another thread (an attempt's end, a poke)
 * is one byte written to the call's pipe, which a source in the context reads: 'd' for
 * an attempt's end, the last thing the worker does with the call, 'x' for a poke. The
 * machine itself is touched only in the context, and by the attempt's job between its
 * push and its byte. So the hand-overs are the pool's mutex and a pipe's write and
 * read, edges ThreadSanitizer sees (GLib's own locks, behind GTask and
 * g_source_set_ready_time(), it cannot), and no mutex guards the call. A poke comes with
 * the anchor's mutex held, from any thread: a write() of one byte to a non-blocking
 * pipe is all it does. The pipe is closed only once nothing can write to it any more:
 * the call has left the anchor's sleepers, its cancellation handler is disconnected and
 * no attempt is under way.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <glib-unix.h>
#include <string.h>
#include <unistd.h>

#include "async-driver.h"
#include "async-pool.h"

typedef struct
{
  RlLockWaiter waiter; /* poked by the anchor: notifications, close */
  RlAsyncJob job;      /* an attempt on the registry's workers */
  const RlAsyncDriverClass *klass;
  gpointer data;     /* the member's call, handed to klass */
  RedisLock *anchor; /* a user reference */
  GMainContext *context;
  GCancellable *cancellable;
  gulong cancel_handler;
  gboolean pubsub;
  gboolean bounded;
  int pipe[2];          /* [1]: written by pokes and attempts; [0]: read in the context */
  GSource *pipe_source; /* the context's */
  GSource *timer;       /* the context's: the sleep's end */
  gboolean sleeping;    /* the context's: between two attempts */
  gboolean attempting;  /* the context's: an attempt's job is queued or runs */

  /* Written by the attempt's job, read in the context after its byte. */
  RlAcquire acq;
  RlAcquireAction action;
  GError *error;
} DriverCall;

static void step (DriverCall *call, RlAcquireAction action);

/* Any thread: the context looks at the call soon (@byte 'd': an attempt ended). */
static void
send_byte (DriverCall *call, char byte)
{
  ssize_t n;

  do
    n = write (call->pipe[1], &byte, 1);
  while (n < 0 && errno == EINTR);
  /* EAGAIN: bytes are waiting already, which is enough for a poke; the pipe holds far
   * more bytes than a call's pokes between two reads, and an attempt's 'd' is one. */
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
  redis_lock_unref (call->anchor);
  g_free (call);
}

/* Sleeping -------------------------------------------------------------------------- */

static void
stop_sleeping (DriverCall *call)
{
  if (call->timer != NULL)
    {
      g_source_destroy (call->timer);
      g_clear_pointer (&call->timer, g_source_unref);
    }
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

static gboolean
on_timer (gpointer data)
{
  DriverCall *call = data;

  g_clear_pointer (&call->timer, g_source_unref);
  woken (call);
  return G_SOURCE_REMOVE;
}

/* Sleeps as the machine says: until wake_at, or a notification past its seq. */
static void
sleep_until_woken (DriverCall *call)
{
  gint64 now = g_get_monotonic_time ();
  gint64 ms = call->acq.wake_at > now ? (call->acq.wake_at - now + 999) / 1000 : 0;

  call->sleeping = TRUE;
  call->timer = g_timeout_source_new ((guint) MIN (ms, G_MAXUINT));
  g_source_set_callback (call->timer, on_timer, call, NULL);
  g_source_attach (call->timer, call->context);
  /* The number moved already, or the registry closed: look again now. */
  if (call->acq.watch_seq && !rl_lock_sleep_queued (call->anchor, &call->waiter, call->acq.seq))
    nudge (call);
  if (g_cancellable_is_cancelled (call->cancellable))
    nudge (call);
}

/* Attempts ----------------------------------------------------------------------- */

/* A worker of the registry makes the attempt. */
static void
attempt_job (RlAsyncJob *job)
{
  DriverCall *call = (DriverCall *) ((char *) job - G_STRUCT_OFFSET (DriverCall, job));

  if (rl_async_job_late (job, &call->acq, call->bounded))
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

/* The pipe had bytes: an attempt ended, or the sleep is to end. */
static gboolean
on_pipe (gint fd, GIOCondition condition, gpointer data)
{
  DriverCall *call = data;
  gboolean attempt_done = FALSE;
  char buf[64];
  ssize_t n;

  (void) condition;
  while ((n = read (fd, buf, sizeof buf)) > 0)
    attempt_done = attempt_done || memchr (buf, 'd', (size_t) n) != NULL;
  if (attempt_done)
    {
      g_assert (call->attempting);
      call->attempting = FALSE;
      step (call, call->action);
    }
  else if (call->sleeping)
    woken (call);
  /* Otherwise a poke or a cancellation during an attempt: the sleep that may follow
   * looks at the cancellable, and a notification moved the number it compares. */
  return G_SOURCE_CONTINUE;
}

/* The machine's steps, in the caller's context. */
static void
step (DriverCall *call, RlAcquireAction action)
{
  RedisLockRegistry *registry = call->anchor->registry;
  GError *error;

  switch (action)
    {
    case RL_ACQUIRE_ATTEMPT:
      call->attempting = TRUE;
      rl_async_pool_push (registry, &call->job);
      return;
    case RL_ACQUIRE_WATCH:
      step (call, rl_registry_watch (registry, &call->acq, FALSE));
      return;
    case RL_ACQUIRE_SLEEP:
      sleep_until_woken (call);
      return;
    case RL_ACQUIRE_DONE:
    default:
      /* Nothing writes to the pipe after this: out of the sleepers, no handler, no
       * attempt under way. */
      stop_sleeping (call);
      g_cancellable_disconnect (call->cancellable, call->cancel_handler);
      call->cancel_handler = 0;
      error = g_steal_pointer (&call->error);
      call->klass->done (call->data, call->acq.outcome == RL_ACQUIRE_TAKEN, error);
      call_free (call);
      return;
    }
}

void
rl_async_drive (RedisLock *anchor, gint64 wait_ms, GCancellable *cancellable,
                const RlAsyncDriverClass *klass, gpointer data)
{
  RedisLockRegistry *registry = anchor->registry;
  DriverCall *call = g_new0 (DriverCall, 1);
  GError *error = NULL;

  if (!g_unix_open_pipe (call->pipe, FD_CLOEXEC, &error)
      || !g_unix_set_fd_nonblocking (call->pipe[0], TRUE, &error)
      || !g_unix_set_fd_nonblocking (call->pipe[1], TRUE, &error))
    {
      klass->done (data, FALSE,
                   g_error_new (REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION,
                                "Cannot wait for “%s”: %s", anchor->key_data, error->message));
      g_error_free (error);
      g_free (call);
      return;
    }
  call->waiter.poke = on_poke;
  call->job.run = attempt_job;
  call->klass = klass;
  call->data = data;
  call->anchor = redis_lock_ref (anchor);
  call->context = g_main_context_ref_thread_default ();
  call->cancellable = cancellable != NULL ? g_object_ref (cancellable) : NULL;
  call->pubsub = rl_registry_pubsub (registry);
  call->bounded = wait_ms != 0;
  call->pipe_source = g_unix_fd_source_new (call->pipe[0], G_IO_IN);
  g_source_set_callback (call->pipe_source, G_SOURCE_FUNC (on_pipe), call, NULL);
  g_source_attach (call->pipe_source, call->context);
  if (cancellable != NULL && wait_ms != 0)
    call->cancel_handler = g_cancellable_connect (cancellable, G_CALLBACK (on_cancelled), call,
                                                  NULL);
  rl_acquire_init (&call->acq, anchor->key_data,
                   wait_ms < 0 ? RL_FOREVER : rl_deadline_after (g_get_monotonic_time (), wait_ms),
                   0);
  step (call, rl_acquire_step (&call->acq, g_get_monotonic_time (), 0));
}
