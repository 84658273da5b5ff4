/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* registry-async.c: the registry's calls that run on a thread of GIO's pool so that
 * their caller need not block: a forced unlock the caller can cancel
 * (redis_lock_registry_force_unlock_full()), and a registry created without blocking
 * (redis_lock_registry_new_async()).
 *
 * The store's forced release has no cancellable of its own, so with one the forced
 * unlock (registry.c) runs on a worker and the caller waits for it there, with the task
 * set to return on cancellation: cancelling ends the caller's wait at once, while the
 * request already under way finishes on the worker, which holds a reference to the
 * registry until it does. A registry's creation connects and PINGs (bounded by the
 * connect timeout); on a worker it leaves the caller's main loop running meanwhile.
 */
#include "config.h"

#include "internal.h"

typedef struct
{
  RedisLockRegistry *registry;
  char *name;
} ForceJob;

static void
force_job_free (ForceJob *job)
{
  redis_lock_registry_unref (job->registry);
  g_free (job->name);
  g_free (job);
}

static void
force_job (GTask *task, gpointer source, gpointer data, GCancellable *cancellable)
{
  ForceJob *job = data;
  GError *error = NULL;
  gboolean ok;

  (void) source;
  (void) cancellable;
  ok = redis_lock_registry_force_unlock (job->registry, job->name, &error);
  if (error != NULL)
    g_task_return_error (task, error);
  else
    g_task_return_boolean (task, ok);
}

gboolean
redis_lock_registry_force_unlock_full (RedisLockRegistry *registry, const char *name,
                                       GCancellable *cancellable, GError **error)
{
  g_autoptr (GTask) task = NULL;
  ForceJob *job;

  g_return_val_if_fail (registry != NULL, FALSE);
  g_return_val_if_fail (cancellable == NULL || G_IS_CANCELLABLE (cancellable), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);
  if (cancellable == NULL)
    return redis_lock_registry_force_unlock (registry, name, error);
  if (g_cancellable_set_error_if_cancelled (cancellable, error))
    return FALSE;
  job = g_new0 (ForceJob, 1);
  job->registry = redis_lock_registry_ref (registry);
  job->name = g_strdup (name);
  task = g_task_new (NULL, cancellable, NULL, NULL);
  g_task_set_source_tag (task, redis_lock_registry_force_unlock_full);
  g_task_set_task_data (task, job, (GDestroyNotify) force_job_free);
  g_task_set_return_on_cancel (task, TRUE);
  g_task_run_in_thread_sync (task, force_job);
  return g_task_propagate_boolean (task, error);
}

/* Creation ------------------------------------------------------------------------ */

typedef struct
{
  char *url;
  char *registry_key;
} NewJob;

static void
new_job_free (NewJob *job)
{
  g_free (job->url);
  g_free (job->registry_key);
  g_free (job);
}

static void
new_job (GTask *task, gpointer source, gpointer data, GCancellable *cancellable)
{
  NewJob *job = data;
  GError *error = NULL;
  RedisLockRegistry *registry;

  (void) source;
  registry = redis_lock_registry_new (job->url, job->registry_key, &error);
  if (registry != NULL && g_cancellable_set_error_if_cancelled (cancellable, &error))
    /* Cancelled while it connected: the caller gets no registry, and none stays open. */
    g_clear_pointer (&registry, redis_lock_registry_unref);
  if (registry == NULL)
    g_task_return_error (task, error);
  else
    g_task_return_pointer (task, registry, (GDestroyNotify) redis_lock_registry_unref);
}

void
redis_lock_registry_new_async (const char *url, const char *registry_key,
                               GCancellable *cancellable, GAsyncReadyCallback callback,
                               gpointer user_data)
{
  g_autoptr (GTask) task = NULL;
  NewJob *job;

  g_return_if_fail (cancellable == NULL || G_IS_CANCELLABLE (cancellable));
  task = g_task_new (NULL, cancellable, callback, user_data);
  g_task_set_source_tag (task, redis_lock_registry_new_async);
  /* The job decides: a registry made is either the result or closed by the job. */
  g_task_set_check_cancellable (task, FALSE);
  job = g_new0 (NewJob, 1);
  job->url = g_strdup (url);
  job->registry_key = g_strdup (registry_key);
  g_task_set_task_data (task, job, (GDestroyNotify) new_job_free);
  g_task_run_in_thread (task, new_job);
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
