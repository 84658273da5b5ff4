/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* lock-queue.c: a blocking acquisition's place in the store's wait queue.
 *
 * The owner of a plain lock's local mutex that finds the lease held elsewhere waits in
 * line (store.h's acquire_queued): each of its attempts takes or keeps the registry's
 * one place in the lock's queue, with that attempt's value, and the place is
 * remembered in the lock's wait state (its serial and send time), so that the next
 * attempt can tell the store which earlier value a grant may already have written,
 * and a grant heard for it (rl_lock_granted(), from the store's notification thread)
 * wakes the owner to hold the lease without a command (lock.c's acquire_lease()). The
 * attempts come at least every RL_QUEUE_REFRESH_MS (the holder's remaining TTL is cut
 * to it), which keeps the place alive. However the acquisition ends, the place is
 * left (rl_lock_leave_line()), and a grant that came meanwhile released at once.
 * redis_lock_registry_list_queue() shows a lock's line to operators.
 */
#include "config.h"

#include <string.h>

#include "internal.h"
#include "lock-private.h"

/* The owner's place in the wait queue is now that of the attempt @serial sent at
 * @sent (0: none). */
void
rl_lock_set_queued (RedisLock *lock, guint64 serial, gint64 sent)
{
  rl_mutex_lock (&lock->m);
  if (serial != 0 || lock->wait != NULL)
    {
      RlLockWait *wait = rl_lock_wait_state (lock);

      wait->queued_serial = serial;
      wait->queued_sent = sent;
      /* A grant already heard for this attempt's place stays. */
      if (serial == 0 || wait->granted_serial != serial)
        {
          wait->granted_serial = 0;
          wait->granted_token = 0;
        }
    }
  rl_mutex_unlock (&lock->m);
}

guint64
rl_lock_queued_serial (RedisLock *lock, gint64 *sent)
{
  guint64 serial = 0;

  rl_mutex_lock (&lock->m);
  if (lock->wait != NULL)
    {
      serial = lock->wait->queued_serial;
      *sent = lock->wait->queued_sent;
    }
  rl_mutex_unlock (&lock->m);
  return serial;
}

static void
set_line_recent (RedisLock *lock, gboolean recent)
{
  rl_mutex_lock (&lock->m);
  if (lock->wait != NULL)
    lock->wait->line_recent = recent;
  rl_mutex_unlock (&lock->m);
}

/* store->vt->acquire_queued() for the attempt @value (@serial, sent at @sent): the
 * place it takes or keeps in the wait queue is remembered, with the value of the
 * previous one, which a grant may already have written into the key; the holder's
 * remaining TTL is cut to the refresh interval, so that the place is kept alive by the
 * next attempt. */
RlLeaseResult
rl_lock_attempt_queued (RedisLock *lock, const char *value, guint64 serial, gint64 sent,
                        gint64 ttl_ms, gint64 request_deadline, const char *fence_key,
                        gboolean contended, guint64 *token, gint64 *pttl_ms, GError **error)
{
  RlStore *store = lock->registry->store;
  char prev[RL_LEASE_VALUE_MAX];
  gint64 prev_sent = 0;
  guint64 prev_serial = rl_lock_queued_serial (lock, &prev_sent);
  gint64 refresh_ms = MAX (MIN (RL_QUEUE_REFRESH_MS, ttl_ms / 3), 1);
  gboolean queued;
  RlLeaseResult result;

  if (prev_serial != 0)
    rl_leases_value (lock->registry->leases, prev_serial, prev);
  rl_mutex_lock (&lock->m);
  contended = contended || (lock->wait != NULL && lock->wait->line_recent);
  rl_mutex_unlock (&lock->m);
  result = store->vt->acquire_queued (store, lock->key_data, value, prev_serial != 0 ? prev : NULL,
                                      ttl_ms, request_deadline, fence_key, contended, token,
                                      pttl_ms, &queued, error);
  if (result == RL_LEASE_OK)
    {
      rl_lock_set_queued (lock, 0, 0);
      /* Free at once, nobody in line: the next acquisition tries SET NX first again. */
      if (prev_serial == 0)
        set_line_recent (lock, FALSE);
    }
  else if (result == RL_LEASE_HELD && queued)
    {
      rl_lock_set_queued (lock, serial, sent);
      set_line_recent (lock, TRUE);
      *pttl_ms = *pttl_ms < 0 ? refresh_ms : MIN (*pttl_ms, refresh_ms);
    }
  return result;
}

/* The owner of @lock stops waiting in line: its place (if any) is left, and a grant
 * that came for it meanwhile released again, granting to the next in line. */
void
rl_lock_leave_line (RedisLock *lock)
{
  RlStore *store = lock->registry->store;
  char value[RL_LEASE_VALUE_MAX];
  g_autoptr (GError) error = NULL;
  gint64 sent;
  guint64 serial = rl_lock_queued_serial (lock, &sent);

  if (serial == 0)
    return;
  rl_lock_set_queued (lock, 0, 0);
  rl_leases_value (lock->registry->leases, serial, value);
  if (!store->vt->leave_queue (store, lock->key_data, value, &error))
    {
      /* The place expires by itself; a grant made to it meanwhile ends with its TTL,
       * or sooner when the release in the background gets through. */
      rl_debug ("Leaving the wait queue of “%s”: %s", lock->key_data, error->message);
      rl_leases_add_doubtful (lock->registry->leases, lock->key_data, value,
                              RL_ATOMIC_GET (lock->registry->settings.expire_after_ms));
    }
}

void
rl_lock_granted (RedisLock *lock, guint64 serial, guint64 token)
{
  RlLockWait *wait;
  gboolean ours = FALSE;

  rl_mutex_lock (&lock->m);
  wait = lock->wait;
  if (wait != NULL && serial >= wait->queued_serial)
    {
      /* Recorded even for an attempt whose reply has not been read yet (the message
       * can overtake it): rl_lock_set_queued() keeps it for that attempt. */
      wait->granted_serial = serial;
      wait->granted_token = token;
      ours = serial == wait->queued_serial;
    }
  rl_mutex_unlock (&lock->m);
  if (ours)
    rl_cond_broadcast (&wait->notify);
}

/* Whether the owner's acquisition waits in line: the registry's wait_queue setting is
 * on and its store keeps queues. */
gboolean
rl_lock_queue_wanted (RedisLock *lock)
{
  RedisLockRegistry *registry = lock->registry;

  return registry->store->vt->acquire_queued != NULL
         && g_atomic_int_get (&registry->store_ctx.wait_queue);
}

gboolean
rl_lock_grant_heard_locked (RedisLock *lock)
{
  rl_mutex_assert_held (&lock->m);
  return lock->wait != NULL && lock->wait->granted_serial != 0
         && lock->wait->granted_serial == lock->wait->queued_serial;
}

void
rl_lock_take_grant (RedisLock *lock, gint64 ttl_ms, RlPretakeLease *taken,
                    char value[RL_LEASE_VALUE_MAX], guint64 *token)
{
  rl_mutex_lock (&lock->m);
  taken->serial = lock->wait->queued_serial;
  taken->sent = lock->wait->queued_sent;
  *token = lock->wait->granted_token;
  rl_mutex_unlock (&lock->m);
  taken->ttl_ms = ttl_ms;
  rl_lock_set_queued (lock, 0, 0);
  RL_ATOMIC_ADD (lock->registry->stats.grants_received, 1);
  rl_leases_value (lock->registry->leases, taken->serial, value);
}

void
rl_lock_queued_report (RedisLock *lock, const RlAcquire *acq, gboolean pubsub,
                       RlAttemptReport *report)
{
  gint64 sent;

  if (report->result == RL_ATTEMPT_HELD && report->notify == RL_NOTIFY_DOWN
      && rl_lock_queued_serial (lock, &sent) != 0)
    report->notify = rl_registry_notify_state (lock->registry, acq->name, pubsub, TRUE);
}

/* Inspection ------------------------------------------------------------------- */

/* Splits a client id `host:pid:hex` into its host and pid (a host of "" and a pid of 0
 * when it has another shape: a registry of another library). */
static void
split_client_id (const char *client_id, char **host, gint64 *pid)
{
  const char *last = strrchr (client_id, ':');
  const char *colon = NULL;
  char *end;

  for (const char *p = client_id; last != NULL && p < last; p++)
    if (*p == ':')
      colon = p;
  *pid = colon != NULL ? g_ascii_strtoll (colon + 1, &end, 10) : 0;
  if (colon == NULL || end != last || *pid <= 0)
    {
      *host = g_strdup ("");
      *pid = 0;
      return;
    }
  *host = g_strndup (client_id, colon - client_id);
}

GPtrArray *
redis_lock_registry_list_queue (RedisLockRegistry *registry, const char *name, GError **error)
{
  g_autoptr (GArray) entries = g_array_new (FALSE, FALSE, sizeof (RlStoreQueueEntry));
  g_autofree char *key = NULL;
  RlStore *store;
  GPtrArray *line;
  gboolean ok = TRUE;
  gsize len;

  g_return_val_if_fail (registry != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);
  if (name == NULL || (len = strlen (name)) == 0 || len > REDIS_LOCK_NAME_MAX)
    {
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID,
                   "A lock name must be 1 to %d bytes long", REDIS_LOCK_NAME_MAX);
      return NULL;
    }
  if (!rl_registry_check (registry, error))
    return NULL;
  store = registry->store;
  key = g_strconcat (registry->registry_key, ":", name, NULL);
  if (store->vt->queue_list != NULL)
    ok = store->vt->queue_list (store, key, entries, error);
  line = g_ptr_array_new_with_free_func ((GDestroyNotify)redis_lock_queue_info_free);
  for (guint i = 0; i < entries->len; i++)
    {
      RlStoreQueueEntry *e = &g_array_index (entries, RlStoreQueueEntry, i);
      RedisLockQueueInfo *info = g_new0 (RedisLockQueueInfo, 1);

      info->name = g_strdup (name);
      info->client_id = e->client_id;
      split_client_id (e->client_id, &info->host, &info->pid);
      info->position = i + 1;
      info->since_us = e->since_us;
      g_ptr_array_add (line, info);
    }
  if (!ok)
    g_clear_pointer (&line, g_ptr_array_unref);
  return line;
}
