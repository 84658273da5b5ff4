/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* memory-queue.c: the wait queue of the memory store (store.h's acquire_queued and
 * leave_queue, and the store's release, which grants to the first in line: here, so
 * that the lease table of memory-store.c never calls up into the queue), so that code tested on `memory://`
 * meets the queue a Redis store keeps: one place per registry and lock in order of
 * arrival, a release that hands the lease to the first live place and tells that
 * registry alone, places that expire unless their waiter's attempts refresh them.
 *
 * A space keeps one line per lock key (RlMemorySpace.queues, under rl_memory_mutex as
 * everything of the space); a place names its registry by client id. A grant is told
 * to the store of that client id still listening on the space, through its granted
 * callback, after rl_memory_mutex is dropped, counted as a delivery (close waits for
 * it) as release notifications are. rl_memory_queue_list() reads a line for inspection.
 */
#include "config.h"

#include <string.h>

#include "store.h"
#include "sync.h"
#include "memory-store-private.h"

typedef struct
{
  char *client_id;
  char *value;
  gint64 ttl_ms;
  gboolean fenced;
  gint64 expires_us; /* monotonic */
  gint64 since_us;   /* wall-clock: when it took its place */
} Place;

static void
place_free (gpointer data)
{
  Place *place = data;

  g_free (place->client_id);
  g_free (place->value);
  g_free (place);
}

void
rl_memory_queue_free (gpointer data)
{
  g_queue_free_full (data, place_free);
}

/* The line of @key, made when @create. rl_memory_mutex held. */
static GQueue *
line_of (RlMemorySpace *space, const char *key, gboolean create)
{
  GQueue *line = g_hash_table_lookup (space->queues, key);

  if (line == NULL && create)
    {
      line = g_queue_new ();
      g_hash_table_insert (space->queues, g_strdup (key), line);
    }
  return line;
}

static GList *
find_place (GQueue *line, const char *client_id)
{
  for (GList *l = line != NULL ? line->head : NULL; l != NULL; l = l->next)
    if (strcmp (((Place *)l->data)->client_id, client_id) == 0)
      return l;
  return NULL;
}

/* Removes @client_id's place in @key's line, if any. rl_memory_mutex held. */
static void
leave_locked (RlMemorySpace *space, const char *key, const char *client_id)
{
  GQueue *line = line_of (space, key, FALSE);
  GList *link = find_place (line, client_id);

  if (link == NULL)
    return;
  place_free (link->data);
  g_queue_delete_link (line, link);
  if (g_queue_is_empty (line))
    g_hash_table_remove (space->queues, key);
}

gboolean
rl_memory_queue_grant_locked (RlMemorySpace *space, const char *key, const char *me, gint64 now,
                              RlMemoryGrant *grant)
{
  GQueue *line = line_of (space, key, FALSE);
  Place *head;

  memset (grant, 0, sizeof *grant);
  while (line != NULL && (head = g_queue_peek_head (line)) != NULL)
    {
      if (now >= head->expires_us)
        {
          /* A crashed waiter's place: dropped on the way. */
          place_free (g_queue_pop_head (line));
          continue;
        }
      if (me != NULL && strcmp (head->client_id, me) == 0)
        return FALSE;
      g_queue_pop_head (line);
      g_hash_table_remove (space->leases, key);
      rl_memory_lease_take (space, key, head->value, head->ttl_ms, now);
      if (head->fenced)
        {
          g_autofree char *fence_key = rl_store_fence_key (key);
          grant->token = rl_memory_counter_next_token (space, fence_key);
        }
      for (GList *l = space->listeners.head; l != NULL; l = l->next)
        {
          RlMemoryStore *store = l->data;
          if (strcmp (store->parent.client_id, head->client_id) == 0
              && g_str_has_prefix (key, store->key_prefix))
            {
              store->delivering++;
              grant->target = store;
              break;
            }
        }
      grant->key = g_strdup (key);
      grant->value = g_strdup (head->value);
      place_free (head);
      if (g_queue_is_empty (line))
        g_hash_table_remove (space->queues, key);
      return TRUE;
    }
  if (line != NULL && g_queue_is_empty (line))
    g_hash_table_remove (space->queues, key);
  return FALSE;
}

void
rl_memory_queue_deliver (RlMemoryGrant *grant)
{
  RlMemoryStore *target = grant->target;

  if (target != NULL)
    {
      if (target->parent.granted != NULL)
        target->parent.granted (grant->key, grant->value, grant->token,
                                target->parent.released_data);
      rl_memory_delivered (target);
    }
  g_free (grant->key);
  g_free (grant->value);
}

RlLeaseResult
rl_memory_acquire_queued (RlStore *store, const char *key, const char *value,
                          const char *prev_value, gint64 ttl_ms, gint64 deadline,
                          const char *fence_key, gboolean contended, guint64 *token,
                          gint64 *pttl_ms, gboolean *queued, GError **error)
{
  RlMemoryStore *self = (RlMemoryStore *)store;
  RlMemorySpace *space = self->space;
  gint64 now = g_get_monotonic_time ();
  RlMemoryLease *lease;
  RlMemoryGrant grant = { 0 };
  gboolean ours, granted = FALSE;

  *queued = FALSE;
  rl_memory_count_request (store, 1);
  if (rl_memory_wants_replicas (store, "acquisition", key, error))
    return RL_LEASE_ERROR;
  rl_mutex_lock (&rl_memory_mutex);
  lease = rl_memory_lease_lookup (space, key, now);
  ours = lease != NULL
         && (strcmp (lease->owner, value) == 0
             || (prev_value != NULL && strcmp (lease->owner, prev_value) == 0));
  if (lease == NULL)
    granted = rl_memory_queue_grant_locked (space, key, store->client_id, now, &grant);
  if (ours || (lease == NULL && !granted))
    {
      g_hash_table_remove (space->leases, key);
      rl_memory_lease_take (space, key, value, ttl_ms, now);
      if (fence_key != NULL)
        *token = rl_memory_counter_next_token (space, fence_key);
      leave_locked (space, key, store->client_id);
      rl_mutex_unlock (&rl_memory_mutex);
      return RL_LEASE_OK;
    }
  {
    GQueue *line = line_of (space, key, TRUE);
    GList *link = find_place (line, store->client_id);
    Place *place = link != NULL ? link->data : g_new0 (Place, 1);

    if (link == NULL)
      {
        place->client_id = g_strdup (store->client_id);
        place->since_us = g_get_real_time ();
        g_queue_push_tail (line, place);
      }
    g_free (place->value);
    place->value = g_strdup (value);
    place->ttl_ms = ttl_ms;
    place->fenced = fence_key != NULL;
    place->expires_us = rl_memory_expiry_after (now, RL_QUEUE_ENTRY_LIFE_MS);
  }
  lease = rl_memory_lease_lookup (space, key, now);
  *pttl_ms = lease != NULL ? rl_memory_lease_pttl (lease, now) : -1;
  *queued = TRUE;
  rl_mutex_unlock (&rl_memory_mutex);
  if (granted)
    rl_memory_queue_deliver (&grant);
  return RL_LEASE_HELD;
}

gboolean
rl_memory_leave_queue (RlStore *store, const char *key, const char *value, GError **error)
{
  RlMemoryStore *self = (RlMemoryStore *)store;
  gboolean others;

  rl_mutex_lock (&rl_memory_mutex);
  leave_locked (self->space, key, store->client_id);
  rl_mutex_unlock (&rl_memory_mutex);
  /* Granted meanwhile: released at once, granting to the next in line. */
  store->vt->release (store, key, value, 0, &others, NULL);
  return TRUE;
}

gboolean
rl_memory_queue_list (RlStore *store, const char *key, GArray *entries, GError **error)
{
  RlMemoryStore *self = (RlMemoryStore *)store;
  gint64 now = g_get_monotonic_time ();
  GQueue *line;

  rl_memory_count_request (store, 1);
  rl_mutex_lock (&rl_memory_mutex);
  line = line_of (self->space, key, FALSE);
  for (GList *l = line != NULL ? line->head : NULL; l != NULL; l = l->next)
    {
      Place *place = l->data;
      RlStoreQueueEntry entry = { g_strdup (place->client_id), place->since_us };

      if (now < place->expires_us)
        g_array_append_val (entries, entry);
      else
        g_free (entry.client_id);
    }
  rl_mutex_unlock (&rl_memory_mutex);
  return TRUE;
}

/* The release --------------------------------------------------------------------- */

/* Every store open on the space is called back from open to close, but like a Redis
 * store, which subscribes when a lock first has to wait, it counts as "another client
 * received the notification" only once a waiter of its registry has asked for
 * notifications. */
RlLeaseResult
memory_release (RlStore *store, const char *key, const char *value, gint64 keep_ttl_ms,
                gboolean *others, GError **error)
{
  RlMemoryStore *self = (RlMemoryStore *) store;
  gint64 now = g_get_monotonic_time ();
  GPtrArray *targets = NULL;
  RlMemoryLease *lease;
  RlMemoryGrant grant;
  gboolean kept = FALSE;

  *others = FALSE;
  rl_memory_count_request (store, 1);
  /* A kept streak is a write no replica would acknowledge: release instead. */
  if (RL_ATOMIC_GET (store->ctx->min_replicas) > 0)
    keep_ttl_ms = 0;
  rl_mutex_lock (&rl_memory_mutex);
  lease = rl_memory_lease_lookup_ours (self, key, value, now);
  /* With the wait queue, to the first in line, who alone is told. */
  if (lease != NULL && g_atomic_int_get (&store->ctx->wait_queue)
      && rl_memory_queue_grant_locked (self->space, key, NULL, now, &grant))
    {
      rl_mutex_unlock (&rl_memory_mutex);
      RL_ATOMIC_ADD (store->ctx->stats->grants_given, 1);
      rl_memory_queue_deliver (&grant);
      *others = TRUE;
      return RL_LEASE_OK;
    }
  if (lease != NULL)
    {
      targets = rl_memory_listeners_take (self->space, key);
      for (guint i = 0; i < targets->len; i++)
        {
          RlMemoryStore *target = g_ptr_array_index (targets, i);
          if (target != self && target->watched)
            *others = TRUE;
        }
      kept = keep_ttl_ms > 0 && !*others;
      if (kept)
        lease->expires_us = rl_memory_expiry_after (now, keep_ttl_ms);
      else
        g_hash_table_remove (self->space->leases, key);
    }
  rl_mutex_unlock (&rl_memory_mutex);
  if (targets == NULL)
    return RL_LEASE_LOST;
  rl_memory_listeners_deliver (targets, key);
  return kept ? RL_LEASE_KEPT : RL_LEASE_OK;
}
