/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* registry-async.c: the registry's calls that run on a thread of their own so that
 * their caller need not block: a forced unlock the caller can cancel
 * (redis_lock_registry_force_unlock_full()), and a registry created without blocking
 * (redis_lock_registry_new_async()).
 *
 * The store's forced release has no cancellable of its own, so with one the forced
 * unlock (registry.c) runs on a thread of its own and the caller waits for its end or
 * the cancellation, whichever comes first, each one byte on the job's pipe: cancelling ends the caller's
 * wait at once, while the request already under way finishes on that thread,
 * which holds a reference to the registry and to the job until it does. A registry's
 * creation connects and PINGs (bounded by the connect timeout); on a thread of its own
 * (async-thread.c) it leaves the caller's main loop running meanwhile.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <glib-unix.h>
#include <poll.h>
#include <unistd.h>

#include "async-thread.h"
#include "internal.h"

/* The forced unlock ----------------------------------------------------------------- */

typedef struct
{
  gint refs; /* atomic: the caller's and the thread's */
  int pipe[2]; /* [1]: the thread's one byte once its outcome is written; [0]: read by
                  the caller */
  gboolean ok;
  GError *error;
  RedisLockRegistry *registry;
  char *name;
} ForceJob;

static void
force_job_unref (ForceJob *job)
{
  if (!g_atomic_int_dec_and_test (&job->refs))
    return;
  redis_lock_registry_unref (job->registry);
  g_clear_error (&job->error);
  g_free (job->name);
  close (job->pipe[0]);
  close (job->pipe[1]);
  g_free (job);
}

static gpointer
force_thread (gpointer data)
{
  ForceJob *job = data;
  char byte = 'd';
  gssize n;

  job->ok = redis_lock_registry_force_unlock (job->registry, job->name, &job->error);
  /* The outcome is written: the byte hands it to the caller, if it still waits. */
  do
    n = write (job->pipe[1], &byte, 1);
  while (n < 0 && errno == EINTR);
  force_job_unref (job);
  return NULL;
}

/* Publishes a job to the cancellation handler: taken by the caller after it made the
 * job and before it connects the handler, and by the handler before it touches the
 * job, so that the handler, which may run in any thread, sees the job whole. */
static RlMutex force_mutex = { PTHREAD_MUTEX_INITIALIZER };

static void
on_force_cancelled (GCancellable *cancellable, gpointer data)
{
  ForceJob *job = data;
  char byte = 'c';
  gssize n;

  (void) cancellable;
  rl_mutex_lock (&force_mutex);
  do
    n = write (job->pipe[1], &byte, 1);
  while (n < 0 && errno == EINTR);
  rl_mutex_unlock (&force_mutex);
}

gboolean
redis_lock_registry_force_unlock_full (RedisLockRegistry *registry, const char *name,
                                       GCancellable *cancellable, GError **error)
{
  g_autoptr (GError) pipe_error = NULL;
  struct pollfd pfd;
  ForceJob *job;
  gulong handler;
  gboolean ok = FALSE, done = FALSE;

  g_return_val_if_fail (registry != NULL, FALSE);
  g_return_val_if_fail (cancellable == NULL || G_IS_CANCELLABLE (cancellable), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);
  if (cancellable == NULL)
    return redis_lock_registry_force_unlock (registry, name, error);
  if (g_cancellable_set_error_if_cancelled (cancellable, error))
    return FALSE;
  job = g_new0 (ForceJob, 1);
  if (!g_unix_open_pipe (job->pipe, FD_CLOEXEC, &pipe_error))
    g_error ("force unlock: cannot make a pipe: %s", pipe_error->message);
  job->refs = 2;
  job->registry = redis_lock_registry_ref (registry);
  job->name = g_strdup (name);
  rl_mutex_lock (&force_mutex);
  rl_mutex_unlock (&force_mutex);
  /* Both ends come as one byte on the pipe: 'd' from the thread once its outcome is
   * written, 'c' from the cancellation (the pipe is the hand-over). */
  handler = g_cancellable_connect (cancellable, G_CALLBACK (on_force_cancelled), job, NULL);
  g_thread_unref (g_thread_new ("redislock-force", force_thread, job));
  while (!done)
    {
      char byte;
      gssize n;

      pfd = (struct pollfd){ .fd = job->pipe[0], .events = POLLIN };
      if (poll (&pfd, 1, -1) < 0 && errno != EINTR)
        g_error ("force unlock: poll: %s", g_strerror (errno));
      n = read (job->pipe[0], &byte, 1);
      if (n == 1 && byte == 'd')
        {
          done = TRUE;
          ok = job->ok;
          if (job->error != NULL)
            g_propagate_error (error, g_steal_pointer (&job->error));
        }
      else if (n == 1 && g_cancellable_set_error_if_cancelled (cancellable, error))
        /* The request goes on without the caller: its outcome is unknown. */
        break;
    }
  g_cancellable_disconnect (cancellable, handler);
  force_job_unref (job);
  return ok;
}

/* Creation ------------------------------------------------------------------------ */

typedef struct
{
  char *url;
  char *registry_key;
  GTask *task;
  RedisLockRegistry *registry;
} NewCall;

static gboolean
new_job (gpointer data, GError **error)
{
  NewCall *call = data;

  call->registry = redis_lock_registry_new (call->url, call->registry_key, error);
  return call->registry != NULL;
}

static void
new_done (gpointer data, gboolean ok, GError *error)
{
  NewCall *call = data;
  GError *cancelled = NULL;

  if (ok && g_cancellable_set_error_if_cancelled (g_task_get_cancellable (call->task), &cancelled))
    {
      /* Cancelled while it connected: the caller gets no registry, and none stays open. */
      g_clear_pointer (&call->registry, redis_lock_registry_unref);
      error = cancelled;
    }
  if (call->registry != NULL)
    g_task_return_pointer (call->task, g_steal_pointer (&call->registry),
                           (GDestroyNotify) redis_lock_registry_unref);
  else
    g_task_return_error (call->task, error);
  g_object_unref (call->task);
  g_free (call->url);
  g_free (call->registry_key);
  g_free (call);
}

void
redis_lock_registry_new_async (const char *url, const char *registry_key,
                               GCancellable *cancellable, GAsyncReadyCallback callback,
                               gpointer user_data)
{
  NewCall *call;

  g_return_if_fail (cancellable == NULL || G_IS_CANCELLABLE (cancellable));
  call = g_new0 (NewCall, 1);
  call->url = g_strdup (url);
  call->registry_key = g_strdup (registry_key);
  call->task = g_task_new (NULL, cancellable, callback, user_data);
  g_task_set_source_tag (call->task, redis_lock_registry_new_async);
  /* The call decides: a registry made is either the result or closed by it. */
  g_task_set_check_cancellable (call->task, FALSE);
  rl_async_thread ("redislock-new", new_job, new_done, call);
}

RedisLockRegistry *
redis_lock_registry_new_finish (GAsyncResult *result, GError **error)
{
  g_return_val_if_fail (g_task_is_valid (result, NULL), NULL);
  g_return_val_if_fail (g_task_get_source_tag (G_TASK (result)) == redis_lock_registry_new_async,
                        NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);
  return g_task_propagate_pointer (G_TASK (result), error);
}
