/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* memory-family.c: the memory store's entries for the rest of the lock family:
 * semaphores (permits as plain leases under `sem_key:i`, with the size stored beside
 * them), read-write locks (a writer's lease, the readers' leases and the writer
 * waiting) and the waits-for records of deadlock detection. Cut from memory-store.c,
 * which keeps the lease table, the release notifications, the plain lease operations
 * and opening, because these entries are built on that table as the Redis family's
 * scripts are built on the Redis store's engine: they call memory-store.c's helpers
 * under rl_memory_mutex, and memory-store.c refers to them only from its vtable.
 */
#include "config.h"

#include <string.h>

#include "store.h"
#include "sync.h"
#include "memory-store-private.h"

/* Semaphores ------------------------------------------------------------------- */

/* Checks the size stored in @sem_key against @permits, storing it (without expiry)
 * when there is none: FALSE with INVALID naming both sizes. rl_memory_mutex held. */
static gboolean
semaphore_size_check (RlMemorySpace *space, const char *sem_key, guint permits, gint64 now,
                      GError **error)
{
  RlMemoryLease *size = rl_memory_lease_lookup (space, sem_key, now);
  char digits[24];

  g_snprintf (digits, sizeof digits, "%u", permits);
  if (size == NULL)
    {
      rl_memory_lease_insert (space, sem_key, digits, RL_FOREVER, now);
      return TRUE;
    }
  if (strcmp (size->owner, digits) == 0)
    return TRUE;
  g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID,
               "Semaphore “%s” has %s permits in the store, not %u", sem_key, size->owner,
               permits);
  return FALSE;
}

/* The key of permit @i of @sem_key, in @buf. */
static const char *
permit_key (GString *buf, const char *sem_key, guint i)
{
  g_string_printf (buf, "%s:%u", sem_key, i);
  return buf->str;
}

/* As the Redis store's SEMAPHORE ACQUIRE script: a permit holding @value already (a
 * request sent twice) is returned again; else the first free one from @start. */
RlLeaseResult
rl_memory_semaphore_acquire (RlStore *store, const char *sem_key, guint permits, guint start,
                             const char *value, gint64 ttl_ms, gint64 deadline, guint *slot,
                             gint64 *pttl_ms, GError **error)
{
  RlMemoryStore *self = (RlMemoryStore *) store;
  g_autoptr (GString) key = g_string_new (NULL);
  gint64 now = g_get_monotonic_time ();
  RlLeaseResult result = RL_LEASE_HELD;
  gint64 min_pttl = -1;
  gboolean free_found = FALSE;

  rl_memory_count_request (store, 1);
  if (rl_memory_wants_replicas (store, "acquisition", sem_key, error))
    return RL_LEASE_ERROR;
  rl_mutex_lock (&rl_memory_mutex);
  if (!semaphore_size_check (self->space, sem_key, permits, now, error))
    {
      rl_mutex_unlock (&rl_memory_mutex);
      return RL_LEASE_ERROR;
    }
  for (guint j = 0; j < permits && result != RL_LEASE_OK; j++)
    {
      guint i = (start + j) % permits;
      RlMemoryLease *lease
          = rl_memory_lease_lookup (self->space, permit_key (key, sem_key, i), now);
      if (lease != NULL && strcmp (lease->owner, value) == 0)
        {
          *slot = i;
          result = RL_LEASE_OK;
        }
      else if (lease == NULL && !free_found)
        {
          *slot = i;
          free_found = TRUE;
        }
      else if (lease != NULL && lease->expires_us != RL_FOREVER)
        {
          gint64 pttl = rl_memory_lease_pttl (lease, now);
          min_pttl = min_pttl < 0 ? pttl : MIN (min_pttl, pttl);
        }
    }
  if (result != RL_LEASE_OK && free_found)
    result = RL_LEASE_OK;
  if (result == RL_LEASE_OK)
    rl_memory_lease_take (self->space, permit_key (key, sem_key, *slot), value, ttl_ms, now);
  else
    *pttl_ms = min_pttl;
  rl_mutex_unlock (&rl_memory_mutex);
  return result;
}

gboolean
rl_memory_semaphore_available (RlStore *store, const char *sem_key, guint permits, guint *available,
                               GError **error)
{
  RlMemoryStore *self = (RlMemoryStore *) store;
  g_autoptr (GString) key = g_string_new (NULL);
  gint64 now = g_get_monotonic_time ();
  RlMemoryLease *size;
  char digits[24];
  gboolean ok = TRUE;

  rl_memory_count_request (store, 1);
  g_snprintf (digits, sizeof digits, "%u", permits);
  *available = 0;
  rl_mutex_lock (&rl_memory_mutex);
  size = rl_memory_lease_lookup (self->space, sem_key, now);
  if (size != NULL && strcmp (size->owner, digits) != 0)
    ok = semaphore_size_check (self->space, sem_key, permits, now, error);
  for (guint i = 0; ok && i < permits; i++)
    if (rl_memory_lease_lookup (self->space, permit_key (key, sem_key, i), now) == NULL)
      (*available)++;
  rl_mutex_unlock (&rl_memory_mutex);
  return ok;
}

/* Read-write locks --------------------------------------------------------------- */

/* How long another owner's lease holds back a read-write acquisition as @mode asks:
 * the longest remaining TTL (-1: one has no expiry), or -2 when nothing does. The
 * readers are the live keys under the reader prefix, so this store needs no set of
 * them. rl_memory_mutex held. */
static gint64
rw_held_back (RlMemorySpace *space, const RlRwKeys *keys, RlRwMode mode, const char *value,
              gint64 now)
{
  gsize owner_len = strlen (keys->owner);
  RlMemoryLease *writer = rl_memory_lease_lookup (space, keys->writer, now);
  RlMemoryLease *waiting;
  GHashTableIter iter;
  gpointer key, data;
  gint64 longest = -2;

  if (writer != NULL
      && (mode == RL_RW_WRITE ? strcmp (writer->owner, value) != 0
                              : strncmp (writer->owner, keys->owner, owner_len) != 0
                                    || writer->owner[owner_len] != ':'))
    return rl_memory_lease_pttl (writer, now);
  if (mode == RL_RW_READ)
    {
      waiting = rl_memory_lease_lookup (space, keys->waiting, now);
      return waiting != NULL && strcmp (waiting->owner, keys->owner) != 0
                 ? rl_memory_lease_pttl (waiting, now)
                 : -2;
    }
  if (mode != RL_RW_WRITE)
    return -2;
  g_hash_table_iter_init (&iter, space->leases);
  while (g_hash_table_iter_next (&iter, &key, &data))
    {
      RlMemoryLease *reader = data;
      if (!g_str_has_prefix (key, keys->reader_prefix) || strcmp (key, keys->reader) == 0
          || now >= reader->expires_us)
        continue;
      if (rl_memory_lease_pttl (reader, now) < 0 || longest == -1)
        longest = -1;
      else
        longest = MAX (longest, rl_memory_lease_pttl (reader, now));
    }
  return longest;
}

RlLeaseResult
rl_memory_rw_acquire (RlStore *store, const RlRwKeys *keys, RlRwMode mode, const char *value,
                      gint64 ttl_ms, gint64 deadline, gint64 *pttl_ms, GError **error)
{
  RlMemoryStore *self = (RlMemoryStore *) store;
  const char *key = mode == RL_RW_WRITE ? keys->writer : keys->reader;
  gint64 now = g_get_monotonic_time ();
  RlLeaseResult result = RL_LEASE_OK;
  GPtrArray *targets = NULL;
  RlMemoryLease *waiting;
  gint64 held;

  rl_memory_count_request (store, 1);
  if (rl_memory_wants_replicas (store, "acquisition", key, error))
    return RL_LEASE_ERROR;
  rl_mutex_lock (&rl_memory_mutex);
  held = rw_held_back (self->space, keys, mode, value, now);
  waiting = rl_memory_lease_lookup (self->space, keys->waiting, now);
  if (held != -2)
    {
      *pttl_ms = held;
      result = RL_LEASE_HELD;
      if (mode == RL_RW_WRITE && (waiting == NULL || strcmp (waiting->owner, keys->owner) == 0))
        rl_memory_lease_insert (self->space, keys->waiting, keys->owner,
                                rl_memory_expiry_after (now, MAX (ttl_ms, held) + 1000), now);
      /* A mark newly set is told to every registry, as the Redis store publishes it. */
      if (mode == RL_RW_WRITE && waiting == NULL)
        targets = rl_memory_listeners_take (self->space, keys->waiting);
    }
  else
    {
      rl_memory_lease_take (self->space, key, value, ttl_ms, now);
      if (mode == RL_RW_WRITE && waiting != NULL && strcmp (waiting->owner, keys->owner) == 0)
        g_hash_table_remove (self->space->leases, keys->waiting);
    }
  rl_memory_unlock_and_deliver (targets, keys->waiting);
  return result;
}

gboolean
rl_memory_rw_stop_waiting (RlStore *store, const RlRwKeys *keys, gint64 deadline, GError **error)
{
  RlMemoryStore *self = (RlMemoryStore *) store;
  GPtrArray *targets = NULL;
  RlMemoryLease *waiting;

  rl_memory_count_request (store, 1);
  rl_mutex_lock (&rl_memory_mutex);
  waiting = rl_memory_lease_lookup (self->space, keys->waiting, g_get_monotonic_time ());
  if (waiting != NULL && strcmp (waiting->owner, keys->owner) == 0)
    {
      targets = rl_memory_listeners_take (self->space, keys->waiting);
      g_hash_table_remove (self->space->leases, keys->waiting);
    }
  rl_memory_unlock_and_deliver (targets, keys->waiting);
  return TRUE;
}

/* The waits-for records of the store's registry key, as the Redis store keeps them:
 * one table per registry key, each record a RlMemoryLease whose owner is the record,
 * expired ones removed when the table is read. */
gboolean
rl_memory_waits_update (RlStore *store, const char *id, const char *record, gint64 ttl_ms,
                        GPtrArray *records, gint64 deadline, GError **error)
{
  RlMemoryStore *self = (RlMemoryStore *) store;
  g_autofree char *key = rl_store_waits_key (store->registry_key);
  gint64 now = g_get_monotonic_time ();
  GHashTable *table;

  rl_mutex_lock (&rl_memory_mutex);
  rl_memory_count_request (store, 1);
  table = g_hash_table_lookup (self->space->waits, key);
  if (table == NULL && record != NULL)
    {
      table = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, rl_memory_lease_free);
      g_hash_table_insert (self->space->waits, g_strdup (key), table);
    }
  if (id != NULL && record == NULL && table != NULL)
    g_hash_table_remove (table, id);
  else if (id != NULL && record != NULL)
    {
      RlMemoryLease *entry = g_new (RlMemoryLease, 1);

      entry->owner = g_strdup (record);
      entry->expires_us = rl_memory_expiry_after (now, ttl_ms);
      g_hash_table_replace (table, g_strdup (id), entry);
    }
  if (records != NULL && table != NULL)
    {
      GHashTableIter iter;
      gpointer value;

      g_hash_table_iter_init (&iter, table);
      while (g_hash_table_iter_next (&iter, NULL, &value))
        if (now >= ((RlMemoryLease *) value)->expires_us)
          g_hash_table_iter_remove (&iter);
        else
          g_ptr_array_add (records, g_strdup (((RlMemoryLease *) value)->owner));
    }
  if (table != NULL && g_hash_table_size (table) == 0)
    g_hash_table_remove (self->space->waits, key);
  rl_mutex_unlock (&rl_memory_mutex);
  return TRUE;
}
