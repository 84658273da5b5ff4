/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* memory-store.c: the in-process store behind `memory://NAME`, for unit tests of code
 * that takes locks, on machines without Redis.
 *
 * Every registry opened on `memory://NAME` gets a store of its own (its client id, its
 * registry key, its release callback), and all stores on one NAME share one table of
 * leases, so two registries on one NAME behave like two processes on one Redis server:
 * the same key (`registry_key:name`), the same value (the client id and a number unique
 * to the acquisition), a TTL on a
 * monotonic clock after which the key is absent, renewal and release only by the
 * owner, and a wake-up of the other registries' waiters on every release. An expired
 * lease is removed when it is next looked at (and by an occasional sweep), never by a
 * timer, so the store has no thread of its own.
 *
 * One process-wide mutex guards the table of NAMEs and every lease table. Each
 * operation is a hash lookup or two, so one mutex costs nothing a test could see, and
 * it makes the NAME lookup, the debugging hooks and the operations on leases atomic
 * together. It is a leaf lock: nothing is called while it is held. Release callbacks
 * run after it is dropped, because the registry's callback takes registry->cache_mutex and
 * then lock->m (see internal.h); a store counts the callbacks running into it, and
 * close/free wait for them, so a registry is never called back after its store closed.
 * A child made by fork() starts with no memory stores: it is another process.
 *
 * The debugging hooks (expire a lease, hand it to another owner, read a key) are
 * redislock-test.h's, in libredislock-testing, which reaches them through a table of
 * function pointers this file hands out without exporting a symbol (memory-hooks.h).
 *
 * Fencing counters live in a second table of the space, under the key a Redis store
 * would use (rl_store_fence_key()), so that a token means the same on both stores: a
 * counter moves on to max (itself + 1, the wall clock in microseconds) in the same
 * critical section that takes the lease, and never expires. Requests on several
 * leases (acquire_many, release_many) run under the mutex once, all or none, and
 * count as one round trip, as a Redis store's pipeline does.
 *
 * The lock family's entries (semaphores, read-write locks, waits-for records) are
 * memory-family.c's, and the wait queue memory-queue.c's, over this file's lease table
 * (memory-store-private.h).
 */
#include "config.h"

#include <string.h>

#include "memory-hooks.h"
#include "store.h"
#include "sync.h"
#include "memory-store-private.h"

#define MEMORY_SCHEME "memory://"

/* rl_memory_mutex guards everything below and every RlMemorySpace and RlMemoryLease. */
RlMutex rl_memory_mutex = { PTHREAD_MUTEX_INITIALIZER };
static RlCond memory_cond = { PTHREAD_COND_INITIALIZER }; /* a delivering count reached 0 */
static GHashTable *memory_spaces;                         /* NAME -> RlMemorySpace */

/* Fork ------------------------------------------------------------------------- */

static void
memory_fork_prepare (void)
{
  rl_mutex_lock (&rl_memory_mutex);
}

static void
memory_fork_parent (void)
{
  rl_mutex_unlock (&rl_memory_mutex);
}

/* The child forgets the parent's stores: it is another process, and no thread there
 * can finish a delivery the parent had started. The old tables stay allocated; only
 * registries made before the fork reach them, and the fork guard refuses every call
 * on those. */
static void
memory_fork_child (void)
{
  memory_spaces = NULL;
  pthread_cond_init (&memory_cond.c, NULL);
  rl_mutex_unlock (&rl_memory_mutex);
}

static void memory_publish_hooks (void);

static void
memory_init (void)
{
  static gsize once = 0;

  if (g_once_init_enter (&once))
    {
      pthread_atfork (memory_fork_prepare, memory_fork_parent, memory_fork_child);
      memory_publish_hooks ();
      g_once_init_leave (&once, 1);
    }
}

/* Leases ----------------------------------------------------------------------- */

void
rl_memory_lease_free (gpointer data)
{
  RlMemoryLease *lease = data;

  g_free (lease->owner);
  g_free (lease);
}

/* The monotonic time @ttl_ms from @now, saturated far below RL_FOREVER. */
gint64
rl_memory_expiry_after (gint64 now, gint64 ttl_ms)
{
  if (ttl_ms > (G_MAXINT64 / 2 - now) / 1000)
    return G_MAXINT64 / 2;
  return now + ttl_ms * 1000;
}

/* What PTTL would answer: milliseconds left, -1 without expiry. */
gint64
rl_memory_lease_pttl (const RlMemoryLease *lease, gint64 now)
{
  if (lease->expires_us == RL_FOREVER)
    return -1;
  return MAX (lease->expires_us - now, 0) / 1000;
}

static RlMemorySpace *
space_lookup (const char *name)
{
  return memory_spaces == NULL ? NULL : g_hash_table_lookup (memory_spaces, name);
}

/* The lease @key if it has not expired; an expired one is removed, as Redis does on
 * access. */
RlMemoryLease *
rl_memory_lease_lookup (RlMemorySpace *space, const char *key, gint64 now)
{
  RlMemoryLease *lease = g_hash_table_lookup (space->leases, key);

  if (lease != NULL && now >= lease->expires_us)
    {
      g_hash_table_remove (space->leases, key);
      return NULL;
    }
  return lease;
}

/* Removes every expired lease once as many keys were added as the last sweep left,
 * so keys that expire untouched cannot pile up, at a constant cost per insertion. */
static void
space_maybe_sweep (RlMemorySpace *space, gint64 now)
{
  GHashTableIter iter;
  gpointer value;

  if (++space->inserts <= MAX (space->size_after_sweep, 64))
    return;
  g_hash_table_iter_init (&iter, space->leases);
  while (g_hash_table_iter_next (&iter, NULL, &value))
    if (now >= ((RlMemoryLease *) value)->expires_us)
      g_hash_table_iter_remove (&iter);
  space->inserts = 0;
  space->size_after_sweep = g_hash_table_size (space->leases);
}

void
rl_memory_lease_insert (RlMemorySpace *space, const char *key, const char *owner, gint64 expires_us,
                        gint64 now)
{
  RlMemoryLease *lease = g_new (RlMemoryLease, 1);

  lease->owner = g_strdup (owner);
  lease->expires_us = expires_us;
  space_maybe_sweep (space, now);
  g_hash_table_replace (space->leases, g_strdup (key), lease);
}

RlMemoryLease *
rl_memory_lease_lookup_ours (RlMemoryStore *self, const char *key, const char *value, gint64 now)
{
  RlMemoryLease *lease = rl_memory_lease_lookup (self->space, key, now);

  if (lease != NULL && strcmp (lease->owner, value) == 0)
    return lease;
  return NULL;
}

void
rl_memory_count_request (RlStore *store, guint commands)
{
  RL_ATOMIC_ADD (store->ctx->stats->round_trips, 1);
  RL_ATOMIC_ADD (store->ctx->stats->commands, commands);
}

/* Release notifications -------------------------------------------------------- */

/* The listening stores of @space that @key concerns, each marked as being delivered
 * to. rl_memory_mutex held. */
GPtrArray *
rl_memory_listeners_take (RlMemorySpace *space, const char *key)
{
  GPtrArray *targets = g_ptr_array_new ();

  for (GList *l = space->listeners.head; l != NULL; l = l->next)
    {
      RlMemoryStore *store = l->data;
      if (g_str_has_prefix (key, store->key_prefix))
        {
          store->delivering++;
          g_ptr_array_add (targets, store);
        }
    }
  return targets;
}

/* Calls the release callbacks of @targets (rl_memory_mutex not held), telling them
 * that @key was @forced open (RlStoreReleasedFunc), then lets stores waiting to close
 * go. */
static void
listeners_deliver (GPtrArray *targets, const char *key, gboolean forced)
{
  gboolean done = FALSE;

  for (guint i = 0; i < targets->len; i++)
    {
      RlStore *store = g_ptr_array_index (targets, i);
      RL_ATOMIC_ADD (store->ctx->stats->notifications, 1);
      store->released (key, forced, store->released_data);
    }
  rl_mutex_lock (&rl_memory_mutex);
  for (guint i = 0; i < targets->len; i++)
    {
      RlMemoryStore *store = g_ptr_array_index (targets, i);
      if (--store->delivering == 0)
        done = TRUE;
    }
  if (done)
    rl_cond_broadcast (&memory_cond);
  rl_mutex_unlock (&rl_memory_mutex);
  g_ptr_array_unref (targets);
}

void
rl_memory_delivered (RlMemoryStore *store)
{
  rl_mutex_lock (&rl_memory_mutex);
  if (--store->delivering == 0)
    rl_cond_broadcast (&memory_cond);
  rl_mutex_unlock (&rl_memory_mutex);
}

/* Calls the release callbacks of @targets (rl_memory_mutex not held), then lets stores
 * waiting to close go. */
void
rl_memory_listeners_deliver (GPtrArray *targets, const char *key)
{
  listeners_deliver (targets, key, FALSE);
}

/* Unlocks rl_memory_mutex, then delivers @key's release to @targets, if any (NULL: none
 * were taken). */
void
rl_memory_unlock_and_deliver (GPtrArray *targets, const char *key)
{
  rl_mutex_unlock (&rl_memory_mutex);
  if (targets != NULL)
    rl_memory_listeners_deliver (targets, key);
}

/* Whether writes must be acknowledged by replicas, which this store has none of:
 * what a Redis server without replicas answers to WAIT. */
gboolean
rl_memory_wants_replicas (RlStore *store, const char *what, const char *key, GError **error)
{
  gint64 n = RL_ATOMIC_GET (store->ctx->min_replicas);

  if (n == 0)
    return FALSE;
  g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_NOT_REPLICATED,
               "The %s of “%s” was acknowledged by fewer than %" G_GINT64_FORMAT
               " replicas: a memory:// store has none",
               what, key, n);
  return TRUE;
}

/* Fencing counters --------------------------------------------------------------- */

/* Moves the counter @fence_key on to the next token and returns it: max (counter + 1,
 * the wall clock in microseconds), as the Redis store's scripts compute it with the
 * server's TIME, so that tokens mean the same on both stores. rl_memory_mutex held. */
guint64
rl_memory_counter_next_token (RlMemorySpace *space, const char *fence_key)
{
  guint64 *counter = g_hash_table_lookup (space->counters, fence_key);
  guint64 now = (guint64) MAX (g_get_real_time (), 0);

  if (counter == NULL)
    {
      counter = g_new0 (guint64, 1);
      g_hash_table_insert (space->counters, g_strdup (fence_key), counter);
    }
  *counter = MAX (*counter + 1, now);
  return *counter;
}

/* The vtable ------------------------------------------------------------------- */

/* The live lease @key when another owner than @value holds it. rl_memory_mutex held. */
static RlMemoryLease *
lease_held_by_other (RlMemorySpace *space, const char *key, const char *value, gint64 now)
{
  RlMemoryLease *lease = rl_memory_lease_lookup (space, key, now);

  return lease != NULL && strcmp (lease->owner, value) != 0 ? lease : NULL;
}

/* Takes @key for @value: inserts it, or refreshes the TTL when it holds @value
 * already. The caller checked that no other owner holds it. rl_memory_mutex held. */
void
rl_memory_lease_take (RlMemorySpace *space, const char *key, const char *value, gint64 ttl_ms,
                      gint64 now)
{
  RlMemoryLease *lease = rl_memory_lease_lookup (space, key, now);

  if (lease == NULL)
    rl_memory_lease_insert (space, key, value, rl_memory_expiry_after (now, ttl_ms), now);
  else
    lease->expires_us = rl_memory_expiry_after (now, ttl_ms);
}

static RlLeaseResult
memory_acquire (RlStore *store, const char *key, const char *value, gint64 ttl_ms,
                gint64 deadline, const char *fence_key, guint64 *token, gint64 *pttl_ms,
                GError **error)
{
  RlMemoryStore *self = (RlMemoryStore *) store;
  gint64 now = g_get_monotonic_time ();
  RlLeaseResult result = RL_LEASE_OK;
  RlMemoryLease *lease;

  rl_memory_count_request (store, 1);
  if (rl_memory_wants_replicas (store, "acquisition", key, error))
    return RL_LEASE_ERROR;
  rl_mutex_lock (&rl_memory_mutex);
  lease = lease_held_by_other (self->space, key, value, now);
  if (lease == NULL)
    {
      rl_memory_lease_take (self->space, key, value, ttl_ms, now);
      if (fence_key != NULL)
        *token = rl_memory_counter_next_token (self->space, fence_key);
    }
  else
    {
      *pttl_ms = rl_memory_lease_pttl (lease, now);
      result = RL_LEASE_HELD;
    }
  rl_mutex_unlock (&rl_memory_mutex);
  return result;
}

/* All or none, in one critical section: the first lease held by another owner makes
 * every item not taken. */
static gboolean
memory_acquire_many (RlStore *store, guint n, RlLeaseItem *items, gint64 ttl_ms,
                     gint64 deadline, gboolean contended, GError **error)
{
  RlMemoryStore *self = (RlMemoryStore *) store;
  gint64 now = g_get_monotonic_time ();
  RlMemoryLease *held = NULL;
  guint i;

  rl_memory_count_request (store, n);
  if (rl_memory_wants_replicas (store, "acquisition", items[0].key, error))
    {
      for (i = 0; i < n; i++)
        items[i].result = RL_LEASE_ERROR;
      return FALSE;
    }
  rl_mutex_lock (&rl_memory_mutex);
  for (i = 0; i < n && held == NULL; i++)
    held = lease_held_by_other (self->space, items[i].key, items[i].value, now);
  for (guint k = 0; k < n; k++)
    {
      RlLeaseItem *item = &items[k];
      item->token = 0;
      if (held != NULL)
        {
          item->result = k + 1 == i ? RL_LEASE_HELD : RL_LEASE_SKIPPED;
          if (k + 1 == i)
            item->pttl_ms = rl_memory_lease_pttl (held, now);
          continue;
        }
      rl_memory_lease_take (self->space, item->key, item->value, ttl_ms, now);
      if (item->fence_key != NULL)
        item->token = rl_memory_counter_next_token (self->space, item->fence_key);
      item->result = RL_LEASE_OK;
    }
  rl_mutex_unlock (&rl_memory_mutex);
  return TRUE;
}

static RlLeaseResult
memory_renew (RlStore *store, const char *key, const char *value, gint64 ttl_ms, GError **error)
{
  RlMemoryStore *self = (RlMemoryStore *) store;
  gint64 now = g_get_monotonic_time ();
  RlMemoryLease *lease;

  rl_memory_count_request (store, 1);
  rl_mutex_lock (&rl_memory_mutex);
  lease = rl_memory_lease_lookup_ours (self, key, value, now);
  if (lease != NULL)
    lease->expires_us = rl_memory_expiry_after (now, ttl_ms);
  rl_mutex_unlock (&rl_memory_mutex);
  if (lease != NULL && rl_memory_wants_replicas (store, "renewal", key, error))
    return RL_LEASE_ERROR;
  return lease != NULL ? RL_LEASE_OK : RL_LEASE_LOST;
}

/* As the Redis store's FORCE RELEASE script: every key of the table is a string, so
 * only @ours_only refuses one (a waiting writer's mark, a semaphore's size). */
static RlLeaseResult
memory_force_release (RlStore *store, const char *key, gboolean ours_only, GError **error)
{
  RlMemoryStore *self = (RlMemoryStore *) store;
  gint64 now = g_get_monotonic_time ();
  GPtrArray *targets = NULL;
  RlMemoryLease *lease;
  gboolean refused = FALSE;

  rl_memory_count_request (store, 1);
  rl_mutex_lock (&rl_memory_mutex);
  lease = rl_memory_lease_lookup (self->space, key, now);
  if (lease != NULL && ours_only && !rl_store_is_lease_value (lease->owner))
    refused = TRUE;
  else if (lease != NULL)
    {
      targets = rl_memory_listeners_take (self->space, key);
      g_hash_table_remove (self->space->leases, key);
    }
  rl_mutex_unlock (&rl_memory_mutex);
  if (refused)
    {
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID,
                   "“%s” holds no lease (a string of another shape): a forced unlock deletes "
                   "leases only",
                   key);
      return RL_LEASE_ERROR;
    }
  if (targets == NULL)
    return RL_LEASE_LOST;
  listeners_deliver (targets, key, TRUE);
  return RL_LEASE_OK;
}

static gboolean
memory_release_many (RlStore *store, guint n, RlLeaseItem *items, GError **error)
{
  RlMemoryStore *self = (RlMemoryStore *) store;
  gint64 now = g_get_monotonic_time ();
  g_autoptr (GPtrArray) deliveries = g_ptr_array_new ();
  guint i;

  rl_memory_count_request (store, n);
  rl_mutex_lock (&rl_memory_mutex);
  for (i = 0; i < n; i++)
    {
      RlLeaseItem *item = &items[i];
      GPtrArray *targets;

      item->others = FALSE;
      item->result = RL_LEASE_LOST;
      if (rl_memory_lease_lookup_ours (self, item->key, item->value, now) == NULL)
        continue;
      targets = rl_memory_listeners_take (self->space, item->key);
      for (guint k = 0; k < targets->len; k++)
        {
          RlMemoryStore *target = g_ptr_array_index (targets, k);
          if (target != self && target->watched)
            item->others = TRUE;
        }
      g_hash_table_remove (self->space->leases, item->key);
      item->result = RL_LEASE_OK;
      g_ptr_array_add (deliveries, targets);
      g_ptr_array_add (deliveries, (gpointer) item->key);
    }
  rl_mutex_unlock (&rl_memory_mutex);
  for (i = 0; i < deliveries->len; i += 2)
    rl_memory_listeners_deliver (g_ptr_array_index (deliveries, i),
                                 g_ptr_array_index (deliveries, i + 1));
  return TRUE;
}

static gboolean
memory_renew_batch (RlStore *store, guint n, const char *const *keys, const char *const *values,
                    const gint64 *ttls, RlLeaseResult *results, gint64 deadline,
                    guint *round_trips, GError **error)
{
  RlMemoryStore *self = (RlMemoryStore *) store;
  gint64 now = g_get_monotonic_time ();

  *round_trips = 0;
  if (n == 0)
    return TRUE;
  rl_memory_count_request (store, n);
  *round_trips = 1;
  rl_mutex_lock (&rl_memory_mutex);
  for (guint i = 0; i < n; i++)
    {
      RlMemoryLease *lease = rl_memory_lease_lookup_ours (self, keys[i], values[i], now);
      if (lease != NULL)
        lease->expires_us = rl_memory_expiry_after (now, ttls[i]);
      results[i] = lease == NULL                                      ? RL_LEASE_LOST
                   : RL_ATOMIC_GET (store->ctx->min_replicas) > 0 ? RL_LEASE_ERROR
                                                                  : RL_LEASE_OK;
    }
  rl_mutex_unlock (&rl_memory_mutex);
  return TRUE;
}

static gboolean
memory_inspect (RlStore *store, const char *key, char **value, gint64 *pttl_ms, GError **error)
{
  RlMemoryStore *self = (RlMemoryStore *) store;
  gint64 now = g_get_monotonic_time ();
  RlMemoryLease *lease;

  rl_memory_count_request (store, 2);
  rl_mutex_lock (&rl_memory_mutex);
  lease = rl_memory_lease_lookup (self->space, key, now);
  if (lease != NULL)
    {
      *value = g_strdup (lease->owner);
      *pttl_ms = rl_memory_lease_pttl (lease, now);
    }
  rl_mutex_unlock (&rl_memory_mutex);
  return lease != NULL;
}

static gboolean
memory_read_counter (RlStore *store, const char *fence_key, guint64 *value, GError **error)
{
  RlMemoryStore *self = (RlMemoryStore *) store;
  guint64 *counter;

  rl_memory_count_request (store, 1);
  rl_mutex_lock (&rl_memory_mutex);
  counter = g_hash_table_lookup (self->space->counters, fence_key);
  *value = counter != NULL ? *counter : 0;
  rl_mutex_unlock (&rl_memory_mutex);
  return counter != NULL;
}

static gboolean
memory_list (RlStore *store, GArray *entries, GError **error)
{
  RlMemoryStore *self = (RlMemoryStore *) store;
  gint64 now = g_get_monotonic_time ();
  GHashTableIter iter;
  gpointer key, value;

  rl_memory_count_request (store, 1);
  rl_mutex_lock (&rl_memory_mutex);
  g_hash_table_iter_init (&iter, self->space->leases);
  while (g_hash_table_iter_next (&iter, &key, &value))
    {
      RlMemoryLease *lease = value;
      RlStoreEntry e;

      if (!g_str_has_prefix (key, self->key_prefix) || now >= lease->expires_us)
        continue;
      e.key = g_strdup (key);
      e.value = g_strdup (lease->owner);
      e.pttl_ms = rl_memory_lease_pttl (lease, now);
      g_array_append_val (entries, e);
    }
  rl_mutex_unlock (&rl_memory_mutex);
  return TRUE;
}

/* Notifications are synchronous calls made by the releasing thread: they run from
 * the moment the store is open until it is closed, and none can be missed. */
static gboolean
memory_watch (RlStore *store, gint64 timeout_ms)
{
  RlMemoryStore *self = (RlMemoryStore *) store;
  gboolean listening;

  rl_mutex_lock (&rl_memory_mutex);
  listening = self->listening;
  self->watched = TRUE;
  rl_mutex_unlock (&rl_memory_mutex);
  return listening;
}

/* Stops notifications and waits for those being delivered, like joining the Redis
 * store's subscriber thread. Releases made through the store still notify others. */
static void
memory_close (RlStore *store)
{
  RlMemoryStore *self = (RlMemoryStore *) store;

  rl_mutex_lock (&rl_memory_mutex);
  if (self->listening)
    {
      g_queue_unlink (&self->space->listeners, &self->link);
      self->listening = FALSE;
    }
  while (self->delivering > 0)
    rl_cond_wait_until (&memory_cond, &rl_memory_mutex, RL_FOREVER);
  rl_mutex_unlock (&rl_memory_mutex);
}

static void
space_unref (RlMemorySpace *space)
{
  if (--space->refs > 0)
    return;
  g_hash_table_remove (memory_spaces, space->name);
  g_hash_table_unref (space->leases);
  g_hash_table_unref (space->counters);
  g_hash_table_unref (space->waits);
  g_hash_table_unref (space->queues);
  g_free (space->name);
  g_free (space);
}

/* rl_store_free() has already freed the common fields: only our own are used. */
static void
memory_free (RlStore *store)
{
  RlMemoryStore *self = (RlMemoryStore *) store;

  memory_close (store);
  rl_mutex_lock (&rl_memory_mutex);
  space_unref (self->space);
  rl_mutex_unlock (&rl_memory_mutex);
  g_free (self->key_prefix);
  g_free (self);
}

/* The lock family's entries are memory-family.c's. */
RL_DEFINE_STORE_VTABLE (memory, .acquire_queued = rl_memory_acquire_queued,
                        .leave_queue = rl_memory_leave_queue,
                        .queue_list = rl_memory_queue_list,
                        RL_STORE_FAMILY_ENTRIES (rl_memory));

/* Opening ---------------------------------------------------------------------- */

static gboolean
name_is_valid (const char *name)
{
  for (const char *p = name; *p != '\0'; p++)
    if (!g_ascii_isalnum (*p) && *p != '.' && *p != '_' && *p != '-')
      return FALSE;
  return *name != '\0';
}

RlStore *
rl_memory_store_open (const char *url, const char *registry_key, const char *client_id,
                      RlStoreContext *ctx, RlStoreReleasedFunc released, gpointer released_data,
                      GError **error)
{
  const char *name = url + strlen (MEMORY_SCHEME);
  RlMemoryStore *self;
  RlMemorySpace *space;

  g_return_val_if_fail (g_str_has_prefix (url, MEMORY_SCHEME), NULL);
  if (*name == '\0')
    {
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID,
                   "Invalid memory store URL “%s”: the store name after “" MEMORY_SCHEME
                   "” is empty",
                   url);
      return NULL;
    }
  if (!name_is_valid (name))
    {
      /* The URL is not shown: whatever follows the name may be a password. */
      g_set_error_literal (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID,
                           "Invalid memory store URL: the store name may contain only ASCII "
                           "letters, digits, “.”, “_” and “-”");
      return NULL;
    }

  memory_init ();
  self = g_new0 (RlMemoryStore, 1);
  rl_store_init (&self->parent, &memory_vtable, registry_key, client_id, ctx, released,
                 released_data);
  self->key_prefix = g_strconcat (registry_key, ":", NULL);
  self->link.data = self;

  rl_mutex_lock (&rl_memory_mutex);
  if (memory_spaces == NULL)
    memory_spaces = g_hash_table_new (g_str_hash, g_str_equal);
  space = g_hash_table_lookup (memory_spaces, name);
  if (space == NULL)
    {
      space = g_new0 (RlMemorySpace, 1);
      space->name = g_strdup (name);
      space->leases = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, rl_memory_lease_free);
      space->counters = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
      space->waits = g_hash_table_new_full (g_str_hash, g_str_equal, g_free,
                                            (GDestroyNotify) g_hash_table_unref);
      space->queues = g_hash_table_new_full (g_str_hash, g_str_equal, g_free,
                                             rl_memory_queue_free);
      g_queue_init (&space->listeners);
      g_hash_table_insert (memory_spaces, space->name, space);
    }
  space->refs++;
  self->space = space;
  g_queue_push_tail_link (&space->listeners, &self->link);
  self->listening = TRUE;
  rl_mutex_unlock (&rl_memory_mutex);
  return &self->parent;
}

/* Debugging hooks for tests ----------------------------------------------------- */

/* What redislock-test.h's redis_lock_memory_store_*() do, reached by libredislock-testing
 * through the table published below (see memory-hooks.h): not exported. Their callers
 * have checked the arguments. */

static gboolean
hook_expire (const char *store_name, const char *key)
{
  gint64 now = g_get_monotonic_time ();
  RlMemorySpace *space;
  gboolean found = FALSE;

  rl_mutex_lock (&rl_memory_mutex);
  space = space_lookup (store_name);
  if (space != NULL && rl_memory_lease_lookup (space, key, now) != NULL)
    {
      g_hash_table_remove (space->leases, key);
      found = TRUE;
    }
  rl_mutex_unlock (&rl_memory_mutex);
  return found;
}

static gboolean
hook_steal (const char *store_name, const char *key, const char *new_owner, gint64 ttl_ms)
{
  gint64 now = g_get_monotonic_time ();
  RlMemorySpace *space;
  RlMemoryLease *lease = NULL;

  rl_mutex_lock (&rl_memory_mutex);
  space = space_lookup (store_name);
  if (space != NULL)
    lease = rl_memory_lease_lookup (space, key, now);
  if (lease != NULL)
    {
      g_free (lease->owner);
      lease->owner = g_strdup (new_owner);
      lease->expires_us = ttl_ms < 0 ? RL_FOREVER : rl_memory_expiry_after (now, ttl_ms);
    }
  rl_mutex_unlock (&rl_memory_mutex);
  return lease != NULL;
}

static char *
hook_get_owner (const char *store_name, const char *key)
{
  gint64 now = g_get_monotonic_time ();
  RlMemorySpace *space;
  RlMemoryLease *lease = NULL;
  char *owner;

  rl_mutex_lock (&rl_memory_mutex);
  space = space_lookup (store_name);
  if (space != NULL)
    lease = rl_memory_lease_lookup (space, key, now);
  owner = lease != NULL ? g_strdup (lease->owner) : NULL;
  rl_mutex_unlock (&rl_memory_mutex);
  return owner;
}

static gint64
hook_get_pttl (const char *store_name, const char *key)
{
  gint64 now = g_get_monotonic_time ();
  RlMemorySpace *space;
  RlMemoryLease *lease = NULL;
  gint64 pttl;

  rl_mutex_lock (&rl_memory_mutex);
  space = space_lookup (store_name);
  if (space != NULL)
    lease = rl_memory_lease_lookup (space, key, now);
  pttl = lease != NULL ? rl_memory_lease_pttl (lease, now) : -2;
  rl_mutex_unlock (&rl_memory_mutex);
  return pttl;
}

static const RlMemoryHooks memory_hooks = {
  .version = RL_MEMORY_HOOKS_VERSION,
  .expire = hook_expire,
  .steal = hook_steal,
  .get_owner = hook_get_owner,
  .get_pttl = hook_get_pttl,
};

/* Called once, when the first memory store opens (memory_init()). */
static void
memory_publish_hooks (void)
{
  g_type_set_qdata (REDIS_LOCK_TYPE_REGISTRY, g_quark_from_static_string (RL_MEMORY_HOOKS_QDATA),
                    (gpointer) &memory_hooks);
}
