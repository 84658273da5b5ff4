/* registry.c: the registry: settings, client id, fork guard and the lock cache.
 *
 * The cache maps names to lock objects and guarantees what Spring's registry broke
 * more than once: while a lock object is referenced, held or waited on it is never
 * dropped, so two objects for one name can never coexist. Idle objects are kept in
 * least-recently-obtained order and dropped only when an obtain would exceed the
 * capacity (just enough to fit), or by redis_lock_registry_expire_unused_older_than().
 *
 * The registry also keeps the table of leases it holds, which the watchdog renews in
 * one batch, and turns the store's "this key may have been released" into a wake-up
 * of that one lock's waiter.
 */
#include "config.h"

#include <string.h>
#include <unistd.h>

#include "internal.h"

#define RL_DEFAULT_TTL_MS 60000
#define RL_DEFAULT_IDLE_MS 100
#define RL_DEFAULT_CAPACITY 100000
#define RL_DEFAULT_CONNECT_TIMEOUT_MS 3000
#define RL_DEFAULT_COMMAND_TIMEOUT_MS 3000
#define RL_DEFAULT_MAX_LOCAL_HANDOFFS 16

gboolean
rl_registry_is_closed (RedisLockRegistry *registry)
{
  return g_atomic_int_get (&registry->closed) != 0;
}

gboolean
rl_registry_is_forked (RedisLockRegistry *registry)
{
  return registry->fork_generation != __atomic_load_n (&rl_fork_generation, __ATOMIC_RELAXED);
}

#define is_forked rl_registry_is_forked

gboolean
rl_registry_check (RedisLockRegistry *registry, GError **error)
{
  if (G_UNLIKELY (is_forked (registry)))
    {
      g_set_error_literal (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_FORKED,
                           "This lock registry was created before fork() and cannot be used in "
                           "the child process; create a new registry there");
      return FALSE;
    }
  if (G_UNLIKELY (rl_registry_is_closed (registry)))
    {
      g_set_error_literal (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CLOSED,
                           "The lock registry is closed");
      return FALSE;
    }
  return TRUE;
}

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

guint64
rl_registry_next_serial (RedisLockRegistry *registry)
{
  return __atomic_add_fetch (&registry->next_serial, 1, __ATOMIC_RELAXED);
}

void
rl_registry_lease_value (RedisLockRegistry *registry, guint64 serial,
                         char value[RL_LEASE_VALUE_MAX])
{
  gsize len = strlen (registry->client_id);
  char digits[24];
  int n = 0;

  G_STATIC_ASSERT (RL_CLIENT_ID_HOST_MAX + 1 + 20 + 1 + 32 + 1 + 20 + 1 <= RL_LEASE_VALUE_MAX);
  memcpy (value, registry->client_id, len);
  value[len++] = ':';
  do
    digits[n++] = (char) ('0' + serial % 10);
  while ((serial /= 10) != 0);
  while (n > 0)
    value[len++] = digits[--n];
  value[len] = '\0';
}

/* The store says @key may have been released (NULL: any key): wake its waiter. Any
 * key means the store's notification connection went down or came back (a server
 * restart or failover may have taken leases with it): the watchdog checks every held
 * lease at once instead of at its next tick. */
static void
on_released (const char *key, gpointer user_data)
{
  RedisLockRegistry *registry = user_data;
  gsize prefix_len = registry->key_prefix_len - 1;

  if (key == NULL)
    {
      rl_mutex_lock (&registry->lease_mutex);
      if (registry->watchdog != NULL && g_hash_table_size (registry->held) > 0)
        rl_watchdog_tick_now (registry->watchdog);
      rl_mutex_unlock (&registry->lease_mutex);
    }
  rl_mutex_lock (&registry->mutex);
  if (key == NULL)
    {
      GHashTableIter iter;
      gpointer lock;
      g_hash_table_iter_init (&iter, registry->locks);
      while (g_hash_table_iter_next (&iter, NULL, &lock))
        rl_lock_notify (lock);
    }
  else if (strncmp (key, registry->registry_key, prefix_len) == 0 && key[prefix_len] == ':')
    {
      RedisLock *lock = g_hash_table_lookup (registry->locks, key + prefix_len + 1);
      if (lock != NULL)
        rl_lock_notify (lock);
    }
  rl_mutex_unlock (&registry->mutex);
}

RedisLockRegistry *
redis_lock_registry_new (const char *url, const char *registry_key, GError **error)
{
  RedisLockRegistry *registry;

  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (registry_key == NULL || *registry_key == '\0')
    {
      g_set_error_literal (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID,
                           "The registry key must be a non-empty string");
      return NULL;
    }
  if (url == NULL)
    url = "redis://127.0.0.1:6379";

  rl_fork_guard_init ();
  registry = g_new0 (RedisLockRegistry, 1);
  registry->ref_count = 1;
  registry->fork_generation = __atomic_load_n (&rl_fork_generation, __ATOMIC_RELAXED);
  registry->registry_key = g_strdup (registry_key);
  registry->key_prefix_len = strlen (registry_key) + 1;
  registry->client_id = make_client_id ();
  registry->expire_after_ms = RL_DEFAULT_TTL_MS;
  registry->idle_between_tries_ms = RL_DEFAULT_IDLE_MS;
  registry->wait_mode = REDIS_LOCK_WAIT_PUBSUB;
  registry->watchdog_enabled = TRUE;
  registry->max_local_handoffs = RL_DEFAULT_MAX_LOCAL_HANDOFFS;
  registry->capacity = RL_DEFAULT_CAPACITY;
  registry->store_ctx.connect_timeout_ms = RL_DEFAULT_CONNECT_TIMEOUT_MS;
  registry->store_ctx.command_timeout_ms = RL_DEFAULT_COMMAND_TIMEOUT_MS;
  registry->store_ctx.stats = &registry->stats;
  rl_mutex_init (&registry->mutex);
  rl_mutex_init (&registry->lease_mutex);
  rl_mutex_init (&registry->renew_mutex);
  rl_mutex_init (&registry->callback_mutex);
  registry->locks = g_hash_table_new (g_str_hash, g_str_equal);
  registry->held = g_hash_table_new (NULL, NULL);
  registry->lost_pending = g_ptr_array_new ();
  registry->doubtful = g_array_new (FALSE, FALSE, sizeof (RlDoubtful));

  registry->store = rl_store_open (url, registry_key, registry->client_id, &registry->store_ctx,
                                   on_released, registry, error);
  if (registry->store == NULL)
    {
      registry->closed = TRUE;
      redis_lock_registry_unref (registry);
      return NULL;
    }
  return registry;
}

RedisLockRegistry *
redis_lock_registry_ref (RedisLockRegistry *registry)
{
  g_return_val_if_fail (registry != NULL, NULL);
  g_atomic_int_inc (&registry->ref_count);
  return registry;
}

/* The LRU list of cached locks, least recently obtained first. registry->mutex held. */
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

/* Drops cached lock @lock (idle, registry->mutex held). */
static void
drop_cached (RedisLockRegistry *registry, RedisLock *lock)
{
  g_hash_table_remove (registry->locks, rl_lock_name (lock));
  lru_unlink (registry, lock);
  lock->cached = FALSE;
  rl_lock_release_memory (lock);
}

static void
lost_callback_unref (RlLostCallback *callback)
{
  if (callback == NULL || !g_atomic_int_dec_and_test (&callback->ref_count))
    return;
  if (callback->destroy != NULL)
    callback->destroy (callback->data);
  g_free (callback);
}

static void
doubtful_clear (gpointer data)
{
  RlDoubtful *d = data;
  g_free (d->key);
  g_free (d->value);
}

static void
registry_free (RedisLockRegistry *registry)
{
  /* Every user reference of a lock holds a registry reference, so only idle locks
   * remain, and no thread can reach them any more. */
  while (registry->lru_head != NULL)
    drop_cached (registry, registry->lru_head);
  if (registry->store != NULL)
    rl_store_free (registry->store);
  lost_callback_unref (registry->lost_callback);
  g_hash_table_unref (registry->locks);
  g_hash_table_unref (registry->held);
  g_ptr_array_unref (registry->lost_pending);
  for (guint i = 0; i < registry->doubtful->len; i++)
    doubtful_clear (&g_array_index (registry->doubtful, RlDoubtful, i));
  g_array_unref (registry->doubtful);
  rl_mutex_clear (&registry->mutex);
  rl_mutex_clear (&registry->lease_mutex);
  rl_mutex_clear (&registry->renew_mutex);
  rl_mutex_clear (&registry->callback_mutex);
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
  GPtrArray *held;
  GHashTableIter iter;
  gpointer lock;

  g_return_if_fail (registry != NULL);
  if (is_forked (registry))
    return;
  if (!g_atomic_int_compare_and_exchange (&registry->closed, FALSE, TRUE))
    return;

  /* Background threads first, so nothing renews or notifies while we tear down. */
  rl_mutex_lock (&registry->lease_mutex);
  {
    RlWatchdog *watchdog = g_steal_pointer (&registry->watchdog);
    rl_mutex_unlock (&registry->lease_mutex);
    rl_watchdog_free (watchdog);
  }
  /* Losses found just before close still get their callback, from this thread. */
  rl_registry_report_pending (registry);
  if (registry->store != NULL)
    registry->store->vt->close (registry->store);

  /* Wake every waiter: they see the closed flag and return REDIS_LOCK_ERROR_CLOSED. */
  rl_mutex_lock (&registry->mutex);
  g_hash_table_iter_init (&iter, registry->locks);
  while (g_hash_table_iter_next (&iter, NULL, &lock))
    rl_lock_wake_all (lock);
  rl_mutex_unlock (&registry->mutex);

  /* Release every lease still held, best effort, and tell the holders as for a lost
   * lease (no callback: the registry is closing): is_lease_lost() is TRUE and the
   * lease cancellable cancelled from now on. Their later unlock finds the lease no
   * longer in the table and reports CLOSED. */
  held = g_ptr_array_new_with_free_func ((GDestroyNotify) rl_lock_release_memory);
  rl_mutex_lock (&registry->lease_mutex);
  g_hash_table_iter_init (&iter, registry->held);
  while (g_hash_table_iter_next (&iter, &lock, NULL))
    {
      RedisLock *l = lock;
      l->held = FALSE;
      l->lost = TRUE;
      g_atomic_int_inc (&l->ref_count);
      g_ptr_array_add (held, l);
    }
  g_hash_table_remove_all (registry->held);
  rl_mutex_unlock (&registry->lease_mutex);
  for (guint i = 0; i < held->len; i++)
    {
      RedisLock *l = g_ptr_array_index (held, i);
      g_autoptr (GError) error = NULL;
      GCancellable *cancellable;
      char value[RL_LEASE_VALUE_MAX];
      gboolean others;

      rl_mutex_lock (&registry->lease_mutex);
      rl_registry_lease_value (registry, l->lease_serial, value);
      cancellable = l->lease_cancellable ? g_object_ref (l->lease_cancellable) : NULL;
      rl_mutex_unlock (&registry->lease_mutex);
      if (cancellable != NULL)
        {
          g_cancellable_cancel (cancellable);
          g_object_unref (cancellable);
        }
      if (registry->store->vt->release (registry->store, l->key_data, value, 0, &others, &error)
          == RL_LEASE_ERROR)
        g_debug ("close: releasing %s: %s", l->key_data, error->message);
    }
  g_ptr_array_unref (held);
  /* Acquisitions whose outcome was unknown: one last try. */
  rl_registry_release_doubtful (registry);
}

/* Settings --------------------------------------------------------------------- */

void
redis_lock_registry_set_expire_after_ms (RedisLockRegistry *registry, gint64 ms)
{
  g_return_if_fail (registry != NULL);
  g_return_if_fail (ms > 0 && ms <= RL_TTL_MAX_MS);
  RL_STAT_SET (registry->expire_after_ms, ms);
}

gint64
redis_lock_registry_get_expire_after_ms (RedisLockRegistry *registry)
{
  g_return_val_if_fail (registry != NULL, 0);
  return RL_STAT_GET (registry->expire_after_ms);
}

void
redis_lock_registry_set_wait_mode (RedisLockRegistry *registry, RedisLockWaitMode mode)
{
  g_return_if_fail (registry != NULL);
  g_return_if_fail (mode == REDIS_LOCK_WAIT_PUBSUB || mode == REDIS_LOCK_WAIT_SPIN);
  g_atomic_int_set (&registry->wait_mode, mode);
}

void
redis_lock_registry_set_idle_between_tries_ms (RedisLockRegistry *registry, gint64 ms)
{
  g_return_if_fail (registry != NULL);
  g_return_if_fail (ms >= 0);
  RL_STAT_SET (registry->idle_between_tries_ms, ms);
}

void
redis_lock_registry_set_max_local_handoffs (RedisLockRegistry *registry, guint max)
{
  g_return_if_fail (registry != NULL);
  g_atomic_int_set (&registry->max_local_handoffs, max);
}

void
redis_lock_registry_set_watchdog (RedisLockRegistry *registry, gboolean enabled)
{
  g_return_if_fail (registry != NULL);
  g_atomic_int_set (&registry->watchdog_enabled, enabled ? 1 : 0);
  if (is_forked (registry))
    return;
  rl_mutex_lock (&registry->lease_mutex);
  if (registry->watchdog != NULL)
    rl_watchdog_kick (registry->watchdog);
  rl_mutex_unlock (&registry->lease_mutex);
}

/* Drops least recently obtained idle locks until @target entries remain or none can
 * be dropped. registry->mutex held. */
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
  rl_mutex_lock (&registry->mutex);
  registry->capacity = capacity;
  trim_cache (registry, capacity);
  rl_mutex_unlock (&registry->mutex);
}

void
redis_lock_registry_set_connect_timeout_ms (RedisLockRegistry *registry, gint64 ms)
{
  g_return_if_fail (registry != NULL);
  g_return_if_fail (ms > 0);
  RL_STAT_SET (registry->store_ctx.connect_timeout_ms, ms);
}

void
redis_lock_registry_set_command_timeout_ms (RedisLockRegistry *registry, gint64 ms)
{
  g_return_if_fail (registry != NULL);
  g_return_if_fail (ms > 0);
  RL_STAT_SET (registry->store_ctx.command_timeout_ms, ms);
}

void
redis_lock_registry_set_lease_lost_callback (RedisLockRegistry *registry,
                                             RedisLockLeaseLostFunc func,
                                             gpointer user_data,
                                             GDestroyNotify destroy)
{
  RlLostCallback *callback = NULL, *old;

  g_return_if_fail (registry != NULL);
  if (is_forked (registry))
    return;
  if (func != NULL || destroy != NULL)
    {
      callback = g_new (RlLostCallback, 1);
      callback->ref_count = 1;
      callback->func = func;
      callback->data = user_data;
      callback->destroy = destroy;
    }
  rl_mutex_lock (&registry->callback_mutex);
  old = registry->lost_callback;
  registry->lost_callback = callback;
  rl_mutex_unlock (&registry->callback_mutex);
  /* A call in flight keeps the old one until it returns; its destroy runs then. */
  lost_callback_unref (old);
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
  rl_mutex_lock (&registry->mutex);
  size = g_hash_table_size (registry->locks);
  rl_mutex_unlock (&registry->mutex);
  return size;
}

void
redis_lock_registry_get_stats (RedisLockRegistry *registry, RedisLockRegistryStats *stats)
{
  RedisLockRegistryStats *s;

  g_return_if_fail (registry != NULL);
  g_return_if_fail (stats != NULL);
  s = &registry->stats;
  stats->round_trips = RL_STAT_GET (s->round_trips);
  stats->commands = RL_STAT_GET (s->commands);
  stats->acquisitions = RL_STAT_GET (s->acquisitions);
  stats->contended_attempts = RL_STAT_GET (s->contended_attempts);
  stats->releases = RL_STAT_GET (s->releases);
  stats->renewals = RL_STAT_GET (s->renewals);
  stats->leases_lost = RL_STAT_GET (s->leases_lost);
  stats->notifications = RL_STAT_GET (s->notifications);
  stats->local_handoffs = RL_STAT_GET (s->local_handoffs);
  stats->watchdog_ticks = RL_STAT_GET (s->watchdog_ticks);
  stats->last_tick_leases = RL_STAT_GET (s->last_tick_leases);
  stats->last_tick_round_trips = RL_STAT_GET (s->last_tick_round_trips);
  stats->last_tick_us = RL_STAT_GET (s->last_tick_us);
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
  rl_mutex_lock (&registry->mutex);
  next = registry->lru_head;
  while (next != NULL)
    {
      RedisLock *lock = next;
      next = lock->lru_next;
      if ((age_ms < 0 || now - RL_STAT_GET (lock->last_used) >= age_ms * 1000)
          && rl_lock_is_idle (lock))
        {
          drop_cached (registry, lock);
          dropped++;
        }
    }
  rl_mutex_unlock (&registry->mutex);
  return dropped;
}

/* Obtain ----------------------------------------------------------------------- */

RedisLock *
redis_lock_registry_obtain (RedisLockRegistry *registry, const char *name, GError **error)
{
  RedisLock *lock;
  gsize len;

  g_return_val_if_fail (registry != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (name == NULL || (len = strlen (name)) == 0 || len > REDIS_LOCK_NAME_MAX)
    {
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID,
                   "A lock name must be 1 to %d bytes long (got %s)", REDIS_LOCK_NAME_MAX,
                   name == NULL ? "NULL" : *name == '\0' ? "an empty name" : "a longer one");
      return NULL;
    }
  if (!rl_registry_check (registry, error))
    return NULL;

  rl_mutex_lock (&registry->mutex);
  lock = g_hash_table_lookup (registry->locks, name);
  if (lock == NULL)
    {
      if (g_hash_table_size (registry->locks) >= registry->capacity)
        trim_cache (registry, registry->capacity - 1);
      if (g_hash_table_size (registry->locks) >= registry->capacity)
        {
          guint capacity = registry->capacity;
          rl_mutex_unlock (&registry->mutex);
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
  if (lock->user_refs++ == 0)
    redis_lock_registry_ref (registry);
  RL_STAT_SET (lock->last_used, g_get_monotonic_time ());
  rl_mutex_unlock (&registry->mutex);
  return lock;
}

RedisLock *
redis_lock_ref (RedisLock *lock)
{
  RedisLockRegistry *registry;

  g_return_val_if_fail (lock != NULL, NULL);
  registry = lock->registry;
  if (is_forked (registry))
    return lock;
  rl_mutex_lock (&registry->mutex);
  if (!lock->cached)
    {
      /* Only a holder of a reference (or the lease-lost callback, whose lock cannot be
       * dropped while the call runs) may take another: a lock the cache dropped was
       * unreferenced and idle, and may be freed at any moment. */
      rl_mutex_unlock (&registry->mutex);
      g_critical ("redis_lock_ref: lock “%s” is no longer referenced by anyone; obtain it again "
                  "with redis_lock_registry_obtain()",
                  rl_lock_name (lock));
      return lock;
    }
  if (lock->user_refs++ == 0)
    redis_lock_registry_ref (registry);
  rl_mutex_unlock (&registry->mutex);
  return lock;
}

void
redis_lock_unref (RedisLock *lock)
{
  RedisLockRegistry *registry;
  gboolean last;

  if (lock == NULL)
    return;
  registry = lock->registry;
  if (is_forked (registry))
    return;
  rl_mutex_lock (&registry->mutex);
  if (lock->user_refs == 0)
    {
      rl_mutex_unlock (&registry->mutex);
      g_critical ("redis_lock_unref: lock “%s” has no reference left", rl_lock_name (lock));
      return;
    }
  last = --lock->user_refs == 0;
  rl_mutex_unlock (&registry->mutex);
  if (last)
    redis_lock_registry_unref (registry);
}

/* Held leases ------------------------------------------------------------------ */

/* Safety margin when deciding that an unconfirmed lease has expired: clock drift
 * between us and Redis (the Redlock paper's 1%) plus the time between the deadline
 * and the holder hearing of it (thread wake-ups, a timed-out batch). 5% of the TTL,
 * at least 25 ms, at most half the TTL. */
gint64
rl_drift_margin_us (gint64 ttl_ms)
{
  gint64 ttl_us = ttl_ms * 1000;
  return MIN (MAX (ttl_us / 20, 25000), ttl_us / 2);
}

gint64
rl_lease_lose_at (RedisLock *lock)
{
  return lock->lease_confirmed + lock->lease_ttl_ms * 1000 - rl_drift_margin_us (lock->lease_ttl_ms);
}

gboolean
rl_registry_lease_is_stale (RedisLockRegistry *registry, RedisLock *lock)
{
  gboolean stale;

  rl_mutex_lock (&registry->lease_mutex);
  stale = !lock->held || lock->lost || g_get_monotonic_time () >= rl_lease_lose_at (lock);
  rl_mutex_unlock (&registry->lease_mutex);
  return stale;
}

gboolean
rl_registry_check_lease_time (RedisLockRegistry *registry, RedisLock *lock)
{
  gboolean lost, newly = FALSE;

  rl_mutex_lock (&registry->lease_mutex);
  if (lock->held && !lock->lost && g_get_monotonic_time () >= rl_lease_lose_at (lock))
    newly = lock->lost = TRUE;
  lost = lock->lost;
  rl_mutex_unlock (&registry->lease_mutex);
  if (newly)
    rl_registry_lost_found (registry, lock);
  return lost;
}

/* Records the lease of @lock, just taken (or kept) in the store by a request sent at
 * @sent_us. Returns FALSE, recording nothing, when the registry was closed meanwhile:
 * close() has released the leases it found, and this one, taken after, is the
 * caller's to release. (The closed flag is set before close() looks at the table,
 * under this same mutex, so a lease is either in its sweep or refused here.) */
gboolean
rl_registry_lease_taken (RedisLockRegistry *registry, RedisLock *lock, guint64 serial,
                         gint64 ttl_ms, gint64 sent_us)
{
  rl_mutex_lock (&registry->lease_mutex);
  if (rl_registry_is_closed (registry))
    {
      rl_mutex_unlock (&registry->lease_mutex);
      return FALSE;
    }
  lock->held = TRUE;
  lock->lost = FALSE;
  lock->lease_serial = serial;
  lock->lease_ttl_ms = ttl_ms;
  lock->lease_confirmed = sent_us;
  g_hash_table_add (registry->held, lock);
  if (g_atomic_int_get (&registry->watchdog_enabled))
    {
      if (registry->watchdog == NULL)
        registry->watchdog = rl_watchdog_new (registry);
      else
        rl_watchdog_schedule (registry->watchdog, sent_us + ttl_ms * 1000 / 3);
    }
  rl_mutex_unlock (&registry->lease_mutex);
  return TRUE;
}

/* Forgets the lease of @lock at its outermost unlock. Returns FALSE when the lease
 * was no longer in the table (close released it). *lost tells whether it had been
 * found lost; the lease cancellable is returned to its owner by the caller. */
gboolean
rl_registry_lease_drop (RedisLockRegistry *registry, RedisLock *lock, gboolean *lost)
{
  gboolean was_held;

  rl_mutex_lock (&registry->lease_mutex);
  was_held = lock->held;
  *lost = lock->lost;
  if (was_held)
    g_hash_table_remove (registry->held, lock);
  lock->held = FALSE;
  lock->lost = FALSE;
  rl_mutex_unlock (&registry->lease_mutex);
  return was_held;
}

/* Counts a loss and cancels the lease cancellable of its hold. */
static void
cancel_lease (RedisLockRegistry *registry, RedisLock *lock)
{
  GCancellable *cancellable;

  RL_STAT_ADD (registry->stats.leases_lost, 1);
  rl_mutex_lock (&registry->lease_mutex);
  cancellable = lock->lease_cancellable ? g_object_ref (lock->lease_cancellable) : NULL;
  rl_mutex_unlock (&registry->lease_mutex);
  if (cancellable != NULL)
    {
      g_cancellable_cancel (cancellable);
      g_object_unref (cancellable);
    }
  g_debug ("Lease of lock “%s” lost: the key expired or belongs to another owner",
           lock->key_data);
}

/* Calls the lease-lost callback with no mutex held, so that it may call any function
 * of the library, set_lease_lost_callback() included. */
static void
call_callback (RedisLockRegistry *registry, RedisLock *lock)
{
  RlLostCallback *callback;

  rl_mutex_lock (&registry->callback_mutex);
  callback = registry->lost_callback;
  if (callback != NULL)
    g_atomic_int_inc (&callback->ref_count);
  rl_mutex_unlock (&registry->callback_mutex);
  if (callback == NULL)
    return;
  if (callback->func != NULL)
    callback->func (lock, callback->data);
  lost_callback_unref (callback);
}

void
rl_registry_report_lost (RedisLockRegistry *registry, GPtrArray *locks)
{
  for (guint i = 0; i < locks->len; i++)
    {
      cancel_lease (registry, g_ptr_array_index (locks, i));
      call_callback (registry, g_ptr_array_index (locks, i));
    }
}

void
rl_registry_lost_found (RedisLockRegistry *registry, RedisLock *lock)
{
  gboolean queued = FALSE;

  cancel_lease (registry, lock);
  /* The callback always comes from the watchdog thread, never from a thread that may
   * hold the lock (it is found here by unlock, acquire and renew); the thread is
   * started for it even with renewal off. */
  rl_mutex_lock (&registry->lease_mutex);
  if (!rl_registry_is_closed (registry))
    {
      g_atomic_int_inc (&lock->ref_count);
      g_ptr_array_add (registry->lost_pending, lock);
      if (registry->watchdog == NULL)
        registry->watchdog = rl_watchdog_new (registry);
      else
        rl_watchdog_kick (registry->watchdog);
      queued = TRUE;
    }
  rl_mutex_unlock (&registry->lease_mutex);
  if (!queued)
    call_callback (registry, lock);
}

void
rl_registry_report_pending (RedisLockRegistry *registry)
{
  GPtrArray *pending;

  rl_mutex_lock (&registry->lease_mutex);
  if (registry->lost_pending->len == 0)
    {
      rl_mutex_unlock (&registry->lease_mutex);
      return;
    }
  pending = registry->lost_pending;
  registry->lost_pending = g_ptr_array_new ();
  rl_mutex_unlock (&registry->lease_mutex);
  for (guint i = 0; i < pending->len; i++)
    {
      call_callback (registry, g_ptr_array_index (pending, i));
      rl_lock_release_memory (g_ptr_array_index (pending, i));
    }
  g_ptr_array_unref (pending);
}

gboolean
redis_lock_registry_renew (RedisLockRegistry *registry, const char *name, gint64 ttl_ms,
                           GError **error)
{
  g_autoptr (GError) local_error = NULL;
  char value[RL_LEASE_VALUE_MAX];
  RedisLock *lock;
  gboolean held, lost;
  guint64 serial;
  gint64 sent;
  RlLeaseResult result;

  g_return_val_if_fail (registry != NULL, FALSE);
  if (name == NULL || *name == '\0' || strlen (name) > REDIS_LOCK_NAME_MAX)
    {
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID,
                   "A lock name must be 1 to %d bytes long", REDIS_LOCK_NAME_MAX);
      return FALSE;
    }
  if (ttl_ms < 0 || ttl_ms > RL_TTL_MAX_MS)
    {
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID,
                   "Invalid TTL %" G_GINT64_FORMAT " ms: it must be 1 to %" G_GINT64_FORMAT
                   " ms, or 0 for the registry's TTL",
                   ttl_ms, RL_TTL_MAX_MS);
      return FALSE;
    }
  if (!rl_registry_check (registry, error))
    return FALSE;
  if (ttl_ms == 0)
    ttl_ms = RL_STAT_GET (registry->expire_after_ms);

  rl_mutex_lock (&registry->mutex);
  lock = g_hash_table_lookup (registry->locks, name);
  if (lock != NULL)
    g_atomic_int_inc (&lock->ref_count);
  rl_mutex_unlock (&registry->mutex);
  if (lock == NULL)
    goto not_owner;

  /* One renewal of this registry at a time (see internal.h): a watchdog batch in
   * flight with the old TTL cannot land after this one and shorten the key. */
  rl_mutex_lock (&registry->renew_mutex);
  rl_mutex_lock (&registry->lease_mutex);
  held = lock->held;
  lost = lock->lost;
  serial = lock->lease_serial;
  rl_mutex_unlock (&registry->lease_mutex);
  if (!held || lost)
    {
      rl_mutex_unlock (&registry->renew_mutex);
      rl_lock_release_memory (lock);
      if (!held)
        goto not_owner;
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_LEASE_LOST,
                   "The lease of lock “%s” was lost", name);
      return FALSE;
    }

  rl_registry_lease_value (registry, serial, value);
  sent = g_get_monotonic_time ();
  result = registry->store->vt->renew (registry->store, lock->key_data, value, ttl_ms,
                                       &local_error);
  if (result == RL_LEASE_OK)
    RL_STAT_ADD (registry->stats.renewals, 1);
  /* The answer is about the hold whose value was sent: it means nothing for a later
   * hold of the same lock (unlocked and locked again meanwhile). */
  rl_mutex_lock (&registry->lease_mutex);
  lost = FALSE;
  if (lock->held && lock->lease_serial == serial && result == RL_LEASE_OK)
    {
      lock->lease_ttl_ms = ttl_ms;
      lock->lease_confirmed = sent;
      if (registry->watchdog != NULL)
        rl_watchdog_kick (registry->watchdog);
    }
  else if (lock->held && lock->lease_serial == serial && result == RL_LEASE_LOST && !lock->lost)
    lost = lock->lost = TRUE;
  rl_mutex_unlock (&registry->lease_mutex);
  rl_mutex_unlock (&registry->renew_mutex);
  if (lost)
    rl_registry_lost_found (registry, lock);
  rl_lock_release_memory (lock);

  if (result == RL_LEASE_ERROR)
    {
      g_propagate_error (error, g_steal_pointer (&local_error));
      return FALSE;
    }
  if (result == RL_LEASE_LOST)
    {
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_LEASE_LOST,
                   "The lease of lock “%s” was lost: the key expired or belongs to another owner",
                   name);
      return FALSE;
    }
  return TRUE;

not_owner:
  g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_NOT_OWNER,
               "No thread of this registry holds lock “%s”", name);
  return FALSE;
}

/* Doubtful acquisitions --------------------------------------------------------- */

void
rl_registry_add_doubtful (RedisLockRegistry *registry, const char *key, const char *value,
                          gint64 ttl_ms)
{
  RlDoubtful d = { g_strdup (key), g_strdup (value),
                   rl_deadline_after (g_get_monotonic_time (), ttl_ms) };

  rl_mutex_lock (&registry->lease_mutex);
  if (!rl_registry_is_closed (registry))
    {
      g_array_append_val (registry->doubtful, d);
      d.key = d.value = NULL;
      if (registry->watchdog == NULL)
        registry->watchdog = rl_watchdog_new (registry);
      else
        rl_watchdog_kick (registry->watchdog);
    }
  rl_mutex_unlock (&registry->lease_mutex);
  /* Closed: close() has made its last try already; the key expires with its TTL. */
  doubtful_clear (&d);
}

guint
rl_registry_release_doubtful (RedisLockRegistry *registry)
{
  g_autoptr (GArray) pending = NULL;
  guint left;

  rl_mutex_lock (&registry->lease_mutex);
  if (registry->doubtful->len == 0)
    {
      rl_mutex_unlock (&registry->lease_mutex);
      return 0;
    }
  pending = g_steal_pointer (&registry->doubtful);
  registry->doubtful = g_array_new (FALSE, FALSE, sizeof (RlDoubtful));
  rl_mutex_unlock (&registry->lease_mutex);

  for (guint i = 0; i < pending->len; i++)
    {
      RlDoubtful *d = &g_array_index (pending, RlDoubtful, i);
      g_autoptr (GError) error = NULL;
      gboolean others;

      if (g_get_monotonic_time () < d->until_us
          && registry->store->vt->release (registry->store, d->key, d->value, 0, &others, &error)
                 == RL_LEASE_ERROR)
        {
          g_debug ("releasing %s after an acquisition with an unknown outcome: %s", d->key,
                   error->message);
          rl_mutex_lock (&registry->lease_mutex);
          g_array_append_val (registry->doubtful, *d);
          rl_mutex_unlock (&registry->lease_mutex);
          continue;
        }
      doubtful_clear (d);
    }
  rl_mutex_lock (&registry->lease_mutex);
  left = registry->doubtful->len;
  rl_mutex_unlock (&registry->lease_mutex);
  return left;
}
