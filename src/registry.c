/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* registry.c: the registry: settings, client id, fork guard and the lock cache.
 *
 * The cache maps names to lock objects and guarantees what Spring's registry broke
 * more than once: while a lock object is referenced, held or waited on it is never
 * dropped, so two objects for one name can never coexist. Idle objects are kept in
 * least-recently-obtained order and dropped only when an obtain would exceed the
 * capacity (just enough to fit), or by redis_lock_registry_expire_unused_older_than().
 *
 * The registry also turns the store's "this key may have been released" into a
 * wake-up of that one lock's waiter. The leases it holds belong to its lease table
 * (leases.c); the registry creates, closes and frees it and forwards the calls that
 * concern it.
 */
#include "config.h"

#include <string.h>
#include <unistd.h>

#include "debug.h"
#include "internal.h"
#include "rwlock.h"
#include "waits.h"

#define RL_DEFAULT_TTL_MS 60000
#define RL_DEFAULT_IDLE_MS 100
#define RL_DEFAULT_CAPACITY 100000
#define RL_DEFAULT_CONNECT_TIMEOUT_MS 3000
#define RL_DEFAULT_COMMAND_TIMEOUT_MS 3000
#define RL_DEFAULT_MAX_LOCAL_HANDOFFS 16

#define is_forked rl_registry_is_forked

/* hostname:pid:32 hex digits of randomness (128 bits), so an operator reading a key
 * sees which process holds it, and two registries never share an id. The host name is
 * cut at 64 bytes, so a hold's value always fits in RL_LEASE_VALUE_MAX. */
#define RL_CLIENT_ID_HOST_MAX 64

static char *
make_client_id (void)
{
  guint8 bytes[16];
  GString *id = g_string_new (NULL);

  if (getentropy (bytes, sizeof bytes) != 0)
    for (gsize i = 0; i < sizeof bytes; i++)
      bytes[i] = (guint8) g_random_int ();
  g_string_append_printf (id, "%.*s:%ld:", RL_CLIENT_ID_HOST_MAX, g_get_host_name (),
                          (long) getpid ());
  for (gsize i = 0; i < sizeof bytes; i++)
    g_string_append_printf (id, "%02x", bytes[i]);
  return g_string_free (id, FALSE);
}

/* A key of a read-write lock (`registry_key:{name}:rw:…`, @tail after the registry
 * key) may have been released: wake that lock's waiters. registry->cache_mutex held. */
static void
notify_rw (RedisLockRegistry *registry, const char *key, const char *tail)
{
  g_autofree char *name = rl_store_rw_name_of_key (tail);
  RedisRWLock *lock = name != NULL ? g_hash_table_lookup (registry->rw_locks, name) : NULL;

  if (lock != NULL)
    rl_rw_lock_notify (lock, key);
}

/* The store says @key may have been released (NULL: any key): wake its waiter. A
 * reset means the store's connection broke or came back, or its deployment failed
 * over (a server restart or failover may have taken leases with it): a new epoch
 * starts, and the watchdog checks every held lease at once instead of at its next
 * tick. A reset with @key: someone forced @key open (RlStoreReleasedFunc). */
/* A release granted @key to this registry from its place in the key's wait queue
 * (store.h's RlStoreGrantedFunc): handed to the owner of the lock's local mutex, which
 * waits in line with the value it queued (rl_lock_granted()). */
static void
on_granted (const char *key, const char *value, guint64 token, gpointer user_data)
{
  RedisLockRegistry *registry = user_data;
  gsize prefix_len = registry->key_prefix_len - 1;
  gsize id_len = strlen (registry->client_id);
  guint64 serial;
  RedisLock *lock;

  if (strncmp (key, registry->registry_key, prefix_len) != 0 || key[prefix_len] != ':'
      || strncmp (value, registry->client_id, id_len) != 0 || value[id_len] != ':'
      || !g_ascii_string_to_unsigned (value + id_len + 1, 10, 1, G_MAXUINT64, &serial, NULL))
    return;
  rl_mutex_lock (&registry->cache_mutex);
  lock = g_hash_table_lookup (registry->locks, key + prefix_len + 1);
  if (lock != NULL)
    rl_lock_granted (lock, serial, token);
  rl_mutex_unlock (&registry->cache_mutex);
}

static void
on_released (const char *key, gboolean reset, gpointer user_data)
{
  RedisLockRegistry *registry = user_data;
  gsize prefix_len = registry->key_prefix_len - 1;
  RedisLock *pretake = NULL;

  if (key == NULL && reset && registry->leases != NULL)
    rl_leases_audit (registry->leases);

  rl_mutex_lock (&registry->cache_mutex);
  if (key == NULL)
    {
      GHashTableIter iter;
      gpointer lock;
      g_hash_table_iter_init (&iter, registry->locks);
      while (g_hash_table_iter_next (&iter, NULL, &lock))
        rl_lock_notify (lock);
      g_hash_table_iter_init (&iter, registry->rw_locks);
      while (g_hash_table_iter_next (&iter, NULL, &lock))
        rl_rw_lock_notify (lock, NULL);
    }
  else if (strncmp (key, registry->registry_key, prefix_len) == 0 && key[prefix_len] == ':')
    {
      RedisLock *lock = g_hash_table_lookup (registry->locks, key + prefix_len + 1);
      gsize sem_len = lock == NULL ? rl_store_semaphore_key_len (key) : 0;
      if (sem_len > prefix_len + 1)
        {
          /* A permit's release wakes the waiters of its semaphore, which wait on the
           * lock object of the semaphore's key (semaphore.c). */
          g_autofree char *name = g_strndup (key + prefix_len + 1, sem_len - prefix_len - 1);
          RedisLock *anchor = g_hash_table_lookup (registry->locks, name);
          if (anchor != NULL)
            rl_lock_notify (anchor);
        }
      if (lock != NULL)
        {
          /* Its sleeping owner's attempt is sent once the cache's mutex is unlocked. */
          if (rl_lock_notify_release (lock))
            {
              g_atomic_int_inc (&lock->ref_count);
              pretake = lock;
            }
          /* Released while we hold it: someone forced it open (or it is the echo of
           * our own kept streak). Its lease is checked now, not at the next tick. */
          if (registry->leases != NULL)
            rl_leases_check_soon (registry->leases, lock);
        }
      notify_rw (registry, key, key + prefix_len + 1);
      /* Forced open, not an echo: whatever carries a lease of it (a lock, a permit, a
       * read-write lock's lease) is told, and hands it to no other thread unchecked. */
      if (reset && registry->leases != NULL)
        rl_leases_forced (registry->leases, key);
    }
  rl_mutex_unlock (&registry->cache_mutex);
  if (pretake != NULL)
    {
      rl_pretake_run (pretake);
      rl_lock_unref_memory (pretake);
    }
}

/* A registry on the store of @url, or the quorum store of @urls when it is not NULL. */
static RedisLockRegistry *
registry_new (const char *url, const char *const *urls, const char *registry_key, GError **error)
{
  RedisLockRegistry *registry;

  if (registry_key == NULL || *registry_key == '\0')
    {
      g_set_error_literal (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID,
                           "The registry key must be a non-empty string");
      return NULL;
    }

  rl_fork_guard_init ();
  registry = g_new0 (RedisLockRegistry, 1);
  registry->ref_count = 1;
  registry->fork_generation = __atomic_load_n (&rl_fork_generation, __ATOMIC_RELAXED);
  registry->registry_key = g_strdup (registry_key);
  registry->key_prefix_len = strlen (registry_key) + 1;
  registry->client_id = make_client_id ();
  registry->settings.expire_after_ms = RL_DEFAULT_TTL_MS;
  registry->settings.idle_between_tries_ms = RL_DEFAULT_IDLE_MS;
  registry->settings.wait_mode = REDIS_LOCK_WAIT_PUBSUB;
  registry->settings.watchdog_enabled = TRUE;
  registry->settings.max_local_handoffs = RL_DEFAULT_MAX_LOCAL_HANDOFFS;
  registry->settings.deadlock_detection = TRUE;
  registry->capacity = RL_DEFAULT_CAPACITY;
  registry->store_ctx.connect_timeout_ms = RL_DEFAULT_CONNECT_TIMEOUT_MS;
  registry->store_ctx.command_timeout_ms = RL_DEFAULT_COMMAND_TIMEOUT_MS;
  /* Waiters hear of keys changed without a notification unless told otherwise: it
   * costs only keys someone waits for (see redis_lock_registry_set_key_tracking()). */
  registry->store_ctx.key_tracking = 1;
  /* Processes wait in line only when asked (redis_lock_registry_set_wait_queue()). */
  registry->store_ctx.wait_queue = 0;
  registry->store_ctx.stats = &registry->stats;
  registry->quorum = urls != NULL;
  rl_mutex_init (&registry->cache_mutex);
  registry->locks = g_hash_table_new (g_str_hash, g_str_equal);
  registry->rw_locks = g_hash_table_new (g_str_hash, g_str_equal);

  if (urls != NULL)
    registry->store = rl_quorum_store_open (urls, registry_key, registry->client_id,
                                            &registry->store_ctx, on_released, registry, error);
  else
    registry->store = rl_store_open (url, registry_key, registry->client_id,
                                     &registry->store_ctx, on_released, registry, error);
  if (registry->store == NULL)
    {
      registry->closed = TRUE;
      redis_lock_registry_unref (registry);
      return NULL;
    }
  registry->store->granted = on_granted;
  registry->leases = rl_leases_new (registry->store, registry->client_id, &registry->settings,
                                    &registry->stats);
  rl_waits_register (registry);
  return registry;
}

RedisLockRegistry *
redis_lock_registry_new (const char *url, const char *registry_key, GError **error)
{
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (url == NULL)
    url = "redis://127.0.0.1:6379";
  return registry_new (url, NULL, registry_key, error);
}

RedisLockRegistry *
redis_lock_registry_new_quorum (const char *const *urls, const char *registry_key,
                                GError **error)
{
  g_return_val_if_fail (urls != NULL && urls[0] != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  return registry_new (NULL, urls, registry_key, error);
}

RedisLockRegistry *
redis_lock_registry_ref (RedisLockRegistry *registry)
{
  g_return_val_if_fail (registry != NULL, NULL);
  g_atomic_int_inc (&registry->ref_count);
  return registry;
}

/* The LRU list of cached locks, least recently obtained first. registry->cache_mutex held. */
static void
lru_unlink (RedisLockRegistry *registry, RedisLock *lock)
{
  if (lock->lru_prev != NULL)
    lock->lru_prev->lru_next = lock->lru_next;
  else
    registry->lru_head = lock->lru_next;
  if (lock->lru_next != NULL)
    lock->lru_next->lru_prev = lock->lru_prev;
  else
    registry->lru_tail = lock->lru_prev;
  lock->lru_prev = lock->lru_next = NULL;
}

static void
lru_push_tail (RedisLockRegistry *registry, RedisLock *lock)
{
  lock->lru_prev = registry->lru_tail;
  lock->lru_next = NULL;
  if (registry->lru_tail != NULL)
    registry->lru_tail->lru_next = lock;
  else
    registry->lru_head = lock;
  registry->lru_tail = lock;
}

/* Drops cached lock @lock (idle, registry->cache_mutex held). */
static void
drop_cached (RedisLockRegistry *registry, RedisLock *lock)
{
  g_hash_table_remove (registry->locks, rl_lock_name (lock));
  lru_unlink (registry, lock);
  lock->cached = FALSE;
  rl_lock_unref_memory (lock);
}

static void
free_rw (gpointer name, gpointer lock, gpointer data)
{
  rl_rw_lock_free (lock);
}

static void
registry_free (RedisLockRegistry *registry)
{
  /* Every user reference of a lock holds a registry reference, so only idle locks
   * remain, and no thread can reach them any more. */
  while (registry->lru_head != NULL)
    drop_cached (registry, registry->lru_head);
  g_hash_table_foreach (registry->rw_locks, free_rw, NULL);
  g_hash_table_unref (registry->rw_locks);
  if (registry->leases != NULL)
    rl_waits_unregister (registry);
  rl_leases_free (registry->leases);
  if (registry->store != NULL)
    rl_store_free (registry->store);
  g_hash_table_unref (registry->locks);
  rl_mutex_clear (&registry->cache_mutex);
  if (registry->async_pool != NULL)
    registry->async_pool_release (registry->async_pool);
  g_free (registry->registry_key);
  g_free (registry->client_id);
  g_free (registry);
}

void
redis_lock_registry_unref (RedisLockRegistry *registry)
{
  if (registry == NULL)
    return;
  if (!g_atomic_int_dec_and_test (&registry->ref_count))
    return;
  /* In a forked child the registry's threads do not exist and its mutexes may have
   * been held by them at fork time: leave everything alone. */
  if (is_forked (registry))
    return;
  redis_lock_registry_close (registry);
  registry_free (registry);
}

void
redis_lock_registry_close (RedisLockRegistry *registry)
{
  GHashTableIter iter;
  gpointer lock;

  g_return_if_fail (registry != NULL);
  if (is_forked (registry))
    return;
  if (!g_atomic_int_compare_and_exchange (&registry->closed, FALSE, TRUE))
    return;

  /* The watchdog, the held leases (released, their holders told) and the store's
   * threads; then every waiter, which sees the closed flag and returns CLOSED. */
  if (registry->leases != NULL)
    rl_leases_close (registry->leases);
  if (registry->store != NULL)
    registry->store->vt->close (registry->store);
  rl_mutex_lock (&registry->cache_mutex);
  g_hash_table_iter_init (&iter, registry->locks);
  while (g_hash_table_iter_next (&iter, NULL, &lock))
    rl_lock_wake_all (lock);
  g_hash_table_iter_init (&iter, registry->rw_locks);
  while (g_hash_table_iter_next (&iter, NULL, &lock))
    rl_rw_lock_wake_all (lock);
  rl_mutex_unlock (&registry->cache_mutex);
}

/* Settings --------------------------------------------------------------------- */

void
redis_lock_registry_set_expire_after_ms (RedisLockRegistry *registry, gint64 ms)
{
  g_return_if_fail (registry != NULL);
  g_return_if_fail (ms > 0 && ms <= RL_TTL_MAX_MS);
  RL_ATOMIC_SET (registry->settings.expire_after_ms, ms);
}

gint64
redis_lock_registry_get_expire_after_ms (RedisLockRegistry *registry)
{
  g_return_val_if_fail (registry != NULL, 0);
  return RL_ATOMIC_GET (registry->settings.expire_after_ms);
}

void
redis_lock_registry_set_wait_mode (RedisLockRegistry *registry, RedisLockWaitMode mode)
{
  g_return_if_fail (registry != NULL);
  g_return_if_fail (mode == REDIS_LOCK_WAIT_PUBSUB || mode == REDIS_LOCK_WAIT_SPIN);
  g_atomic_int_set (&registry->settings.wait_mode, mode);
}

void
redis_lock_registry_set_idle_between_tries_ms (RedisLockRegistry *registry, gint64 ms)
{
  g_return_if_fail (registry != NULL);
  g_return_if_fail (ms >= 0);
  RL_ATOMIC_SET (registry->settings.idle_between_tries_ms, ms);
}

void
redis_lock_registry_set_max_local_handoffs (RedisLockRegistry *registry, guint max)
{
  g_return_if_fail (registry != NULL);
  g_atomic_int_set (&registry->settings.max_local_handoffs, MIN (max, G_MAXUINT16));
}

void
redis_lock_registry_set_watchdog (RedisLockRegistry *registry, gboolean enabled)
{
  g_return_if_fail (registry != NULL);
  g_atomic_int_set (&registry->settings.watchdog_enabled, enabled ? 1 : 0);
  if (is_forked (registry))
    return;
  rl_leases_settings_changed (registry->leases);
}

void
redis_lock_registry_set_deadlock_detection (RedisLockRegistry *registry, gboolean enabled)
{
  g_return_if_fail (registry != NULL);
  g_atomic_int_set (&registry->settings.deadlock_detection, enabled ? 1 : 0);
}

/* Drops least recently obtained idle locks until @target entries remain or none can
 * be dropped. registry->cache_mutex held. */
static void
trim_cache (RedisLockRegistry *registry, guint target)
{
  RedisLock *next = registry->lru_head;

  while (next != NULL && g_hash_table_size (registry->locks) > target)
    {
      RedisLock *lock = next;
      next = lock->lru_next;
      if (rl_lock_is_idle (lock))
        drop_cached (registry, lock);
    }
}

void
redis_lock_registry_set_cache_capacity (RedisLockRegistry *registry, guint capacity)
{
  g_return_if_fail (registry != NULL);
  g_return_if_fail (capacity > 0);
  if (is_forked (registry))
    return;
  rl_mutex_lock (&registry->cache_mutex);
  registry->capacity = capacity;
  trim_cache (registry, capacity);
  rl_mutex_unlock (&registry->cache_mutex);
}

void
redis_lock_registry_set_connect_timeout_ms (RedisLockRegistry *registry, gint64 ms)
{
  g_return_if_fail (registry != NULL);
  g_return_if_fail (ms > 0);
  RL_ATOMIC_SET (registry->store_ctx.connect_timeout_ms, ms);
}

void
redis_lock_registry_set_command_timeout_ms (RedisLockRegistry *registry, gint64 ms)
{
  g_return_if_fail (registry != NULL);
  g_return_if_fail (ms > 0);
  RL_ATOMIC_SET (registry->store_ctx.command_timeout_ms, ms);
}

void
redis_lock_registry_set_quorum_node_timeout_ms (RedisLockRegistry *registry, gint64 ms)
{
  g_return_if_fail (registry != NULL);
  g_return_if_fail (ms >= 0);
  RL_ATOMIC_SET (registry->store_ctx.quorum_node_timeout_ms, ms);
}

void
redis_lock_registry_set_min_replicas (RedisLockRegistry *registry, guint n, gint64 timeout_ms)
{
  g_return_if_fail (registry != NULL);
  g_return_if_fail (n == 0 || timeout_ms > 0);
  RL_ATOMIC_SET (registry->store_ctx.replica_timeout_ms, n > 0 ? timeout_ms : 0);
  RL_ATOMIC_SET (registry->store_ctx.min_replicas, (gint64) n);
}

void
redis_lock_registry_set_key_tracking (RedisLockRegistry *registry, gboolean enabled)
{
  RlStore *store;

  g_return_if_fail (registry != NULL);
  if (g_atomic_int_exchange (&registry->store_ctx.key_tracking, enabled ? 1 : 0)
      == (enabled ? 1 : 0))
    return;
  store = registry->store;
  if (store->vt->rewatch != NULL)
    store->vt->rewatch (store);
}

gboolean
redis_lock_registry_get_key_tracking (RedisLockRegistry *registry)
{
  g_return_val_if_fail (registry != NULL, FALSE);
  return g_atomic_int_get (&registry->store_ctx.key_tracking) != 0;
}

void
redis_lock_registry_set_legacy_spring_channel (RedisLockRegistry *registry, gboolean enabled)
{
  g_return_if_fail (registry != NULL);
  g_atomic_int_set (&registry->store_ctx.legacy_channel, enabled ? 1 : 0);
}

void
redis_lock_registry_set_wait_queue (RedisLockRegistry *registry, gboolean enabled)
{
  g_return_if_fail (registry != NULL);
  g_atomic_int_set (&registry->store_ctx.wait_queue, enabled ? 1 : 0);
}

gboolean
redis_lock_registry_get_wait_queue (RedisLockRegistry *registry)
{
  g_return_val_if_fail (registry != NULL, FALSE);
  return g_atomic_int_get (&registry->store_ctx.wait_queue) != 0;
}

void
redis_lock_registry_set_classic_notifications (RedisLockRegistry *registry, gboolean enabled)
{
  g_return_if_fail (registry != NULL);
  g_atomic_int_set (&registry->store_ctx.classic_off, enabled ? 0 : 1);
}

gboolean
redis_lock_registry_get_classic_notifications (RedisLockRegistry *registry)
{
  g_return_val_if_fail (registry != NULL, TRUE);
  return g_atomic_int_get (&registry->store_ctx.classic_off) == 0;
}

void
redis_lock_registry_set_fencing (RedisLockRegistry *registry, gboolean enabled)
{
  g_return_if_fail (registry != NULL);
  g_return_if_fail (!enabled || !registry->quorum);
  g_atomic_int_set (&registry->fencing, enabled ? 1 : 0);
}

gboolean
redis_lock_registry_get_fencing (RedisLockRegistry *registry)
{
  g_return_val_if_fail (registry != NULL, FALSE);
  return g_atomic_int_get (&registry->fencing) != 0;
}

void
redis_lock_registry_set_lease_lost_callback (RedisLockRegistry *registry,
                                             RedisLockLeaseLostFunc func,
                                             gpointer user_data,
                                             GDestroyNotify destroy)
{
  g_return_if_fail (registry != NULL);
  if (is_forked (registry))
    return;
  rl_leases_set_callback (registry->leases, func, user_data, destroy);
}

const char *
redis_lock_registry_get_client_id (RedisLockRegistry *registry)
{
  g_return_val_if_fail (registry != NULL, NULL);
  return registry->client_id;
}

const char *
redis_lock_registry_get_registry_key (RedisLockRegistry *registry)
{
  g_return_val_if_fail (registry != NULL, NULL);
  return registry->registry_key;
}

guint
redis_lock_registry_get_cache_size (RedisLockRegistry *registry)
{
  guint size;

  g_return_val_if_fail (registry != NULL, 0);
  if (is_forked (registry))
    return 0;
  rl_mutex_lock (&registry->cache_mutex);
  size = g_hash_table_size (registry->locks);
  rl_mutex_unlock (&registry->cache_mutex);
  return size;
}

void
redis_lock_registry_get_stats (RedisLockRegistry *registry, RedisLockRegistryStats *stats)
{
  RedisLockRegistryStats *s;

  g_return_if_fail (registry != NULL);
  g_return_if_fail (stats != NULL);
  s = &registry->stats;
  memset (stats, 0, sizeof *stats);
  stats->round_trips = RL_ATOMIC_GET (s->round_trips);
  stats->commands = RL_ATOMIC_GET (s->commands);
  stats->acquisitions = RL_ATOMIC_GET (s->acquisitions);
  stats->contended_attempts = RL_ATOMIC_GET (s->contended_attempts);
  stats->releases = RL_ATOMIC_GET (s->releases);
  stats->renewals = RL_ATOMIC_GET (s->renewals);
  stats->leases_lost = RL_ATOMIC_GET (s->leases_lost);
  stats->notifications = RL_ATOMIC_GET (s->notifications);
  stats->local_handoffs = RL_ATOMIC_GET (s->local_handoffs);
  stats->yields = RL_ATOMIC_GET (s->yields);
  stats->audits = RL_ATOMIC_GET (s->audits);
  stats->doubtful_releases = RL_ATOMIC_GET (s->doubtful_releases);
  stats->subscriber_connections = RL_ATOMIC_GET (s->subscriber_connections);
  stats->grants_received = RL_ATOMIC_GET (s->grants_received);
  stats->grants_given = RL_ATOMIC_GET (s->grants_given);
  stats->watchdog_ticks = RL_ATOMIC_GET (s->watchdog_ticks);
  stats->last_tick_leases = RL_ATOMIC_GET (s->last_tick_leases);
  stats->last_tick_round_trips = RL_ATOMIC_GET (s->last_tick_round_trips);
  stats->last_tick_us = RL_ATOMIC_GET (s->last_tick_us);
}

guint
redis_lock_registry_expire_unused_older_than (RedisLockRegistry *registry, gint64 age_ms)
{
  gint64 now = g_get_monotonic_time ();
  guint dropped = 0;
  RedisLock *next;

  g_return_val_if_fail (registry != NULL, 0);
  if (is_forked (registry))
    return 0;
  rl_mutex_lock (&registry->cache_mutex);
  next = registry->lru_head;
  while (next != NULL)
    {
      RedisLock *lock = next;
      next = lock->lru_next;
      if ((age_ms < 0 || now - RL_ATOMIC_GET (lock->last_used) >= age_ms * 1000)
          && rl_lock_is_idle (lock))
        {
          drop_cached (registry, lock);
          dropped++;
        }
    }
  rl_mutex_unlock (&registry->cache_mutex);
  return dropped;
}

/* Obtain ----------------------------------------------------------------------- */

gboolean
rl_registry_check_name (const char *name, GError **error)
{
  gsize len;

  if (name == NULL || (len = strlen (name)) == 0 || len > REDIS_LOCK_NAME_MAX)
    {
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID,
                   "A lock name must be 1 to %d bytes long (got %s)", REDIS_LOCK_NAME_MAX,
                   name == NULL ? "NULL" : *name == '\0' ? "an empty name" : "a longer one");
      return FALSE;
    }
  return TRUE;
}

/* Counts one more reference handed out of a cached object (@user_refs, its count); the
 * first one holds a registry reference. registry->cache_mutex held. */
static void
take_user_ref_locked (RedisLockRegistry *registry, guint *user_refs)
{
  rl_mutex_assert_held (&registry->cache_mutex);
  if ((*user_refs)++ == 0)
    redis_lock_registry_ref (registry);
}

/* Takes one more reference to a cached object (@user_refs, its count) for a holder of
 * one. @cached, when not NULL, says whether the cache still keeps the object: only a
 * holder of a reference (or the lease-lost callback, whose lock cannot be dropped while
 * the call runs) may take another, and an object the cache dropped was unreferenced and
 * idle, and may be freed at any moment (@name for the critical then). */
static void
user_ref (RedisLockRegistry *registry, guint *user_refs, const guint8 *cached, const char *name)
{
  if (is_forked (registry))
    return;
  rl_mutex_lock (&registry->cache_mutex);
  if (cached != NULL && !*cached)
    {
      rl_mutex_unlock (&registry->cache_mutex);
      g_critical ("redis_lock_ref: lock “%s” is no longer referenced by anyone; obtain it again "
                  "with redis_lock_registry_obtain()",
                  name);
      return;
    }
  take_user_ref_locked (registry, user_refs);
  rl_mutex_unlock (&registry->cache_mutex);
}

RedisLock *
redis_lock_registry_obtain (RedisLockRegistry *registry, const char *name, GError **error)
{
  RedisLock *lock;

  g_return_val_if_fail (registry != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (!rl_registry_check_name (name, error))
    return NULL;
  if (!rl_registry_check (registry, error))
    return NULL;

  rl_mutex_lock (&registry->cache_mutex);
  lock = g_hash_table_lookup (registry->locks, name);
  if (lock == NULL)
    {
      if (g_hash_table_size (registry->locks) >= registry->capacity)
        trim_cache (registry, registry->capacity - 1);
      if (g_hash_table_size (registry->locks) >= registry->capacity)
        {
          guint capacity = registry->capacity;
          rl_mutex_unlock (&registry->cache_mutex);
          g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CACHE_FULL,
                       "All %u cached locks of registry “%s” are in use; cannot obtain “%s”",
                       capacity, registry->registry_key, name);
          return NULL;
        }
      lock = rl_lock_new (registry, name);
      lock->cached = TRUE;
      g_hash_table_insert (registry->locks, (gpointer) rl_lock_name (lock), lock);
      lru_push_tail (registry, lock);
    }
  else if (registry->lru_tail != lock)
    {
      lru_unlink (registry, lock);
      lru_push_tail (registry, lock);
    }
  take_user_ref_locked (registry, &lock->user_refs);
  RL_ATOMIC_SET (lock->last_used, g_get_monotonic_time ());
  rl_mutex_unlock (&registry->cache_mutex);
  return lock;
}

RedisLock *
redis_lock_ref (RedisLock *lock)
{
  g_return_val_if_fail (lock != NULL, NULL);
  user_ref (lock->registry, &lock->user_refs, &lock->cached, rl_lock_name (lock));
  return lock;
}

/* Drops one of the references handed out of a cached object (@user_refs, its count;
 * @what and @name for the critical when none is left), and when it was the last, calls
 * @drop (@object) (the cache may drop it now) and drops the registry reference the
 * object held. */
static void
user_unref (RedisLockRegistry *registry, guint *user_refs, const char *what, const char *name,
            void (*drop) (RedisLockRegistry *registry, gpointer object), gpointer object)
{
  gboolean last;

  if (is_forked (registry))
    return;
  rl_mutex_lock (&registry->cache_mutex);
  if (*user_refs == 0)
    {
      rl_mutex_unlock (&registry->cache_mutex);
      g_critical ("%s “%s” has no reference left", what, name);
      return;
    }
  last = --*user_refs == 0;
  if (last && drop != NULL)
    drop (registry, object);
  rl_mutex_unlock (&registry->cache_mutex);
  if (last)
    redis_lock_registry_unref (registry);
}

void
redis_lock_unref (RedisLock *lock)
{
  if (lock == NULL)
    return;
  user_unref (lock->registry, &lock->user_refs, "redis_lock_unref: lock", rl_lock_name (lock),
              NULL, NULL);
}

/* Read-write locks ---------------------------------------------------------------- */

/* Drops read-write lock @data from the cache when nobody references, holds or waits on
 * it. registry->cache_mutex held. */
static void
drop_rw_if_idle (RedisLockRegistry *registry, gpointer data)
{
  RedisRWLock *lock = data;

  if (lock->user_refs > 0 || !rl_rw_lock_is_idle (lock))
    return;
  g_hash_table_remove (registry->rw_locks, lock->name);
  rl_rw_lock_free (lock);
}

RedisRWLock *
redis_lock_registry_obtain_rw (RedisLockRegistry *registry, const char *name, GError **error)
{
  RedisRWLock *lock;

  g_return_val_if_fail (registry != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (!rl_registry_check_name (name, error) || !rl_registry_check (registry, error)
      || !rl_rw_lock_check_name (registry, name, error))
    return NULL;
  rl_mutex_lock (&registry->cache_mutex);
  lock = g_hash_table_lookup (registry->rw_locks, name);
  if (lock == NULL)
    {
      lock = rl_rw_lock_new (registry, name);
      g_hash_table_insert (registry->rw_locks, lock->name, lock);
    }
  take_user_ref_locked (registry, &lock->user_refs);
  rl_mutex_unlock (&registry->cache_mutex);
  return lock;
}

RedisRWLock *
redis_rw_lock_ref (RedisRWLock *lock)
{
  g_return_val_if_fail (lock != NULL, NULL);
  user_ref (lock->registry, &lock->user_refs, NULL, lock->name);
  return lock;
}

void
redis_rw_lock_unref (RedisRWLock *lock)
{
  if (lock == NULL)
    return;
  /* Held or waited on still (a hold may outlive the references): kept until the next
   * obtain of the name or the registry's end. */
  user_unref (lock->registry, &lock->user_refs, "redis_rw_lock_unref: read-write lock",
              lock->name, drop_rw_if_idle, lock);
}

/* Renewal ----------------------------------------------------------------------- */

gboolean
redis_lock_registry_renew (RedisLockRegistry *registry, const char *name, gint64 ttl_ms,
                           GError **error)
{
  RedisLock *lock;
  gboolean ok;

  g_return_val_if_fail (registry != NULL, FALSE);
  if (!rl_registry_check_name (name, error) || !rl_check_ttl (ttl_ms, error)
      || !rl_registry_check (registry, error))
    return FALSE;
  if (ttl_ms == 0)
    ttl_ms = RL_ATOMIC_GET (registry->settings.expire_after_ms);

  rl_mutex_lock (&registry->cache_mutex);
  lock = g_hash_table_lookup (registry->locks, name);
  if (lock != NULL)
    g_atomic_int_inc (&lock->ref_count);
  rl_mutex_unlock (&registry->cache_mutex);
  if (lock == NULL)
    {
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_NOT_OWNER,
                   "No thread of this registry holds lock “%s”", name);
      return FALSE;
    }
  ok = rl_leases_renew (registry->leases, lock, name, ttl_ms, error);
  rl_lock_unref_memory (lock);
  return ok;
}

/* The keys of the lock family that are no leases: a read-write lock's readers set and
 * waiting writer's mark (redis-rwlock.c), a semaphore's size and size record
 * (redis-semaphore.c). The phrase naming what a name of such a shape is, with the
 * family member's name in *@member (g_free()); NULL for a name of any other shape. */
static const char *
non_lease_shape (const char *name, char **member)
{
  static const struct
  {
    const char *suffix;
    const char *what;
  } shapes[] = {
    { "}:rw:readers", "the readers set of read-write lock" },
    { "}:rw:ww", "the waiting writer's mark of read-write lock" },
    { "}:sem", "the size of semaphore" },
    { "}:sem:size", "the size record of semaphore" },
  };
  gsize len = strlen (name);

  if (name[0] != '{')
    return NULL;
  for (gsize i = 0; i < G_N_ELEMENTS (shapes); i++)
    {
      gsize n = strlen (shapes[i].suffix);
      if (len > n + 1 && strcmp (name + len - n, shapes[i].suffix) == 0)
        {
          *member = g_strndup (name + 1, len - n - 1);
          return shapes[i].what;
        }
    }
  return NULL;
}

gboolean
redis_lock_registry_force_unlock (RedisLockRegistry *registry, const char *name, GError **error)
{
  g_autofree char *key = NULL;
  g_autofree char *member = NULL;
  g_autoptr (GError) local_error = NULL;
  const char *shape;
  RlLeaseResult result;

  g_return_val_if_fail (registry != NULL, FALSE);
  if (!rl_registry_check_name (name, error) || !rl_registry_check (registry, error))
    return FALSE;
  key = g_strconcat (registry->registry_key, ":", name, NULL);
  /* A name of the shape of the family's other keys is forced only when the store holds
   * a lease of this library under it: a plain lock so named. Deleting a readers set
   * would let a writer in beside live readers, nobody told. */
  shape = non_lease_shape (name, &member);
  result = registry->store->vt->force_release (registry->store, key, shape != NULL,
                                               &local_error);
  if (shape != NULL
      && (result == RL_LEASE_LOST
          || g_error_matches (local_error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID)))
    {
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID,
                   "“%s” names %s “%s”, which is no lease: a forced unlock deletes leases only",
                   name, shape, member);
      return FALSE;
    }
  if (local_error != NULL)
    g_propagate_error (error, g_steal_pointer (&local_error));
  if (result == RL_LEASE_OK)
    rl_debug ("forced unlock of %s", key);
  return result == RL_LEASE_OK;
}
