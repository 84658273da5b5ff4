/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* async-once.c: one blocking call run on the registry's workers for an _async release
 * (async-once.h), as a member of async-driver.c without an acquisition: its local step
 * asks for the job, and once the job ran, ends the call with the job's outcome. The
 * outcome passes from the worker to the caller's context through atomics, as the
 * driver's own results do.
 */
#include "config.h"

#include "async-driver.h"
#include "async-once.h"

typedef struct
{
  RlAsyncOnceFunc func;
  gpointer data;
  GDestroyNotify free_data;
  GTask *task;
  gint ran;       /* atomic: the job ran */
  gint ok;        /* atomic */
  gpointer error; /* atomic: the job's GError, or NULL */
} OnceCall;

static RlAsyncLocal
once_local (gpointer data, RlLockWaiter *waiter, gboolean may_wait)
{
  OnceCall *call = data;

  (void) waiter;
  (void) may_wait; /* a release is made whatever happened meanwhile */
  if (!g_atomic_int_get (&call->ran))
    return RL_ASYNC_LOCAL_JOB;
  return g_atomic_int_get (&call->ok) ? RL_ASYNC_LOCAL_TAKEN : RL_ASYNC_LOCAL_ENDED;
}

static void
once_local_job (gpointer data)
{
  OnceCall *call = data;
  GError *error = NULL;

  g_atomic_int_set (&call->ok, call->func (call->data, &error));
  g_atomic_pointer_set (&call->error, error);
  g_atomic_int_set (&call->ran, TRUE);
}

static RlAcquireAction
once_attempt (gpointer data, RlAcquire *acq, gboolean pubsub, gboolean bounded, GError **error)
{
  (void) data;
  (void) acq;
  (void) pubsub;
  (void) bounded;
  (void) error;
  g_return_val_if_reached (RL_ACQUIRE_DONE); /* the local step never lets the machine in */
}

static void
once_done (gpointer data, gboolean taken, GError *error)
{
  OnceCall *call = data;
  GError *job_error = g_atomic_pointer_exchange (&call->error, NULL);

  (void) taken;
  if (!g_atomic_int_get (&call->ran) && job_error == NULL)
    {
      /* The driver could not be set up: its error is the call's. */
      job_error = error;
      error = NULL;
    }
  g_clear_error (&error);
  if (job_error != NULL)
    g_task_return_error (call->task, job_error);
  else
    g_task_return_boolean (call->task, g_atomic_int_get (&call->ok));
  g_object_unref (call->task);
  if (call->free_data != NULL)
    call->free_data (call->data);
  g_free (call);
}

RL_DEFINE_ASYNC_DRIVER (once, .local = once_local, .local_job = once_local_job);

void
rl_async_once (RedisLock *anchor, RlAsyncOnceFunc func, gpointer data, GDestroyNotify free_data,
               GTask *task)
{
  OnceCall *call = g_new0 (OnceCall, 1);

  call->func = func;
  call->data = data;
  call->free_data = free_data;
  call->task = g_object_ref (task);
  rl_async_drive (anchor, -1, NULL, &once_driver, call);
}
