/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* multilock-async.c: a set of locks, all or none, without blocking the caller
 * (redis_lock_try_lock_all_async()).
 *
 * The set's blocking call (multilock.c) runs on a thread of its own (async-thread.c),
 * and what it takes is handed to the calling thread there: that thread takes each
 * local mutex and lease as itself, then passes each hold to the calling thread (rl_lock_set_owner(),
 * as an asynchronous plain lock call does), so that the caller's blocking calls made
 * meanwhile wait for it and then count it as a re-entry. The locks the calling thread
 * holds already are counted one hold more when the call starts (only their holder may
 * change the count), and lose it again, in the caller's context, when the set is not
 * taken. The caller's context gets the outcome from async-thread.c, and makes that
 * correction before completing the caller's task.
 */
#include "config.h"

#include "async-thread.h"
#include "internal.h"
#include "lock-private.h"

typedef struct
{
  RedisLock **rest; /* the locks the worker takes (a reference each) */
  guint n_rest;
  RedisLock **again; /* the locks the caller held already: one hold more (a reference each) */
  guint n_again;
  gint64 wait_ms;
  gpointer thread; /* the calling thread, to which the holds go */
  GTask *outer;    /* the caller's */
} SetCall;

static void
set_call_free (SetCall *call)
{
  for (guint i = 0; i < call->n_rest; i++)
    redis_lock_unref (call->rest[i]);
  for (guint i = 0; i < call->n_again; i++)
    redis_lock_unref (call->again[i]);
  g_free (call->rest);
  g_free (call->again);
  g_clear_object (&call->outer);
  g_free (call);
}

/* On the call's thread: the set's blocking call, and on success the holds passed on. */
static gboolean
set_job (gpointer data, GError **error)
{
  SetCall *call = data;
  gpointer self = rl_lock_current_thread ();
  gboolean ok;

  ok = redis_lock_try_lock_all (call->rest, call->n_rest, call->wait_ms,
                                g_task_get_cancellable (call->outer), error);
  if (ok)
    for (guint i = 0; i < call->n_rest; i++)
      rl_lock_set_owner (call->rest[i], self, call->thread);
  return ok;
}

/* In the caller's context: the holds counted at the start go when the set was not
 * taken; then the caller's task completes. */
static void
set_done (gpointer data, gboolean ok, GError *error)
{
  SetCall *call = data;

  if (!ok)
    for (guint i = 0; i < call->n_again; i++)
      rl_lock_unlock_background (call->again[i]);
  if (error != NULL)
    g_task_return_error (call->outer, error);
  else
    g_task_return_boolean (call->outer, ok);
  set_call_free (call);
}

void
redis_lock_try_lock_all_async (RedisLock *const *locks, guint n, gint64 wait_ms,
                               GCancellable *cancellable, GAsyncReadyCallback callback,
                               gpointer user_data)
{
  gpointer self = rl_lock_current_thread ();
  SetCall *call;

  g_return_if_fail (locks != NULL);
  g_return_if_fail (n > 0);
  for (guint i = 0; i < n; i++)
    g_return_if_fail (locks[i] != NULL);
  g_return_if_fail (cancellable == NULL || G_IS_CANCELLABLE (cancellable));

  call = g_new0 (SetCall, 1);
  call->rest = g_new0 (RedisLock *, n);
  call->again = g_new0 (RedisLock *, n);
  call->wait_ms = wait_ms;
  call->thread = self;
  call->outer = g_task_new (NULL, cancellable, callback, user_data);
  g_task_set_source_tag (call->outer, redis_lock_try_lock_all_async);
  /* A set taken stays taken: a cancellation after it does not turn it into an error. */
  g_task_set_check_cancellable (call->outer, FALSE);
  for (guint i = 0; i < n; i++)
    {
      gboolean seen = FALSE;

      for (guint j = 0; j < i && !seen; j++)
        seen = locks[j] == locks[i];
      if (seen)
        continue;
      if (rl_lock_owned_by_caller (locks[i], self) && rl_registry_check (locks[i]->registry, NULL))
        {
          /* Its holder's count: the calling thread's own, changed here. */
          locks[i]->count++;
          call->again[call->n_again++] = redis_lock_ref (locks[i]);
        }
      else
        call->rest[call->n_rest++] = redis_lock_ref (locks[i]);
    }
  if (call->n_rest == 0)
    {
      /* Every lock one hold more: done, in the caller's context. */
      g_task_return_boolean (call->outer, TRUE);
      set_call_free (call);
      return;
    }
  rl_async_thread ("redislock-set", set_job, set_done, call);
}

gboolean
redis_lock_try_lock_all_finish (GAsyncResult *result, GError **error)
{
  g_return_val_if_fail (g_task_is_valid (result, NULL), FALSE);
  g_return_val_if_fail (g_task_get_source_tag (G_TASK (result)) == redis_lock_try_lock_all_async,
                        FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);
  return g_task_propagate_boolean (G_TASK (result), error);
}
