/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* leases.c: the lease table of a registry: every lease it holds, and everything that
 * happens to a lease after it was taken.
 *
 * One file owns this state so that its rules can be read in one place: the held
 * table, the lease fields of each lock (RlLeaseState, inline in the lock for memory,
 * touched by no other file; with fencing, the token the lease was taken with, which
 * hand-offs and kept streaks keep since the lease does not change hands), the
 * acquisition numbers that make each hold's value unique, lost-lease detection and reporting, the lease-lost callback, the background
 * release of acquisitions whose outcome was unknown, and the watchdog that renews the
 * held leases in one batch per tick (watchdog.c runs the thread, the work is here).
 *
 * A lease is lost when renewal or release finds the key gone or holding another value,
 * or when no renewal has been confirmed for longer than its TTL minus a drift margin,
 * counted from when the last confirmed request was sent: with Redis unreachable or
 * frozen the key may have expired, so the holder is told to assume the worst. Losses
 * are reported with no mutex held: the lease cancellable is cancelled, then the
 * callback is called, once per lost lease, always from the watchdog thread (never from
 * a thread that may hold the lock).
 *
 * Renewals go one at a time (renew_mutex, taken before the table's mutex and held
 * across the store call): the watchdog's batch, redis_lock_registry_renew() and the
 * renewal before a hand-off with the watchdog off. So the TTL recorded for a lease is
 * always the TTL of the last renewal Redis applied, and an answer counts only for the
 * hold it was sent for (its serial).
 *
 * Library threads that have a lock in hand (the watchdog's batch, the queue of losses
 * whose callback is due) pin it; the cache never drops a pinned lock, so a callback
 * that takes a reference finds the one object obtain() returns, and this file never
 * frees a lock.
 *
 * Reporting a loss (the cancellable, the callback, the pins) is leases-lost.c's; this
 * file finds the losses and hands them over (leases-private.h).
 */
#include "config.h"

#include <string.h>

#include "debug.h"
#include "internal.h"
#include "leases.h"
#include "watchdog.h"
#include "leases-private.h"

/* An acquisition or release whose outcome is unknown: its value may be in the store,
 * where nobody would release it. Released (compare-and-delete on that value, which
 * can never touch another hold) until it is gone or @until_us, when its TTL has run
 * out anyway. */
typedef struct
{
  char *key;
  char *value;
  gint64 until_us;
} Doubtful;

typedef struct
{
  RedisLock *lock;
  guint64 serial;
  gint64 ttl_ms;
} Entry;

static const RlWatchdogFuncs watchdog_funcs;

/* Time ------------------------------------------------------------------------- */

/* Safety margin when deciding that an unconfirmed lease has expired: clock drift
 * between us and Redis (the Redlock paper's 1%) plus the time between the deadline
 * and the holder hearing of it (thread wake-ups, a timed-out batch). 5% of the TTL,
 * at least 25 ms, at most half the TTL. */
static gint64
drift_margin_us (gint64 ttl_ms)
{
  gint64 ttl_us = ttl_ms * 1000;
  return MIN (MAX (ttl_us / 20, 25000), ttl_us / 2);
}

/* When an unconfirmed lease counts as lost. leases->mutex held. */
static gint64
lose_at (const RlLeaseState *lease)
{
  return lease->confirmed + lease->ttl_ms * 1000 - drift_margin_us (lease->ttl_ms);
}

/* The watchdog thread, started for renewals and for reporting. leases->mutex held. */
static void
wake_watchdog (RlLeases *self)
{
  if (self->watchdog == NULL)
    self->watchdog = rl_watchdog_new (&watchdog_funcs, self);
  else
    rl_watchdog_kick (self->watchdog);
}

/* Life -------------------------------------------------------------------------- */

RlLeases *
rl_leases_new (RlStore *store, const char *client_id, const RlSettings *settings,
               RedisLockRegistryStats *stats)
{
  RlLeases *self = g_new0 (RlLeases, 1);

  self->store = store;
  self->client_id = g_strdup (client_id);
  self->settings = settings;
  self->stats = stats;
  rl_mutex_init (&self->renew_mutex);
  rl_mutex_init (&self->mutex);
  rl_mutex_init (&self->callback_mutex);
  self->held = g_hash_table_new (NULL, NULL);
  self->lost_pending = g_ptr_array_new ();
  self->suspects = g_ptr_array_new ();
  self->doubtful = g_array_new (FALSE, FALSE, sizeof (Doubtful));
  return self;
}

static void
doubtful_clear (Doubtful *d)
{
  g_free (d->key);
  g_free (d->value);
}

void
rl_leases_free (RlLeases *self)
{
  if (self == NULL)
    return;
  g_assert (self->watchdog == NULL && self->lost_pending->len == 0 && self->suspects->len == 0);
  rl_leases_callback_unref (self->callback);
  g_hash_table_unref (self->held);
  g_ptr_array_unref (self->lost_pending);
  g_ptr_array_unref (self->suspects);
  for (guint i = 0; i < self->doubtful->len; i++)
    doubtful_clear (&g_array_index (self->doubtful, Doubtful, i));
  g_array_unref (self->doubtful);
  rl_mutex_clear (&self->renew_mutex);
  rl_mutex_clear (&self->mutex);
  rl_mutex_clear (&self->callback_mutex);
  g_free (self->client_id);
  g_free (self);
}

/* Values ------------------------------------------------------------------------ */

guint64
rl_leases_next_serial (RlLeases *self)
{
  return __atomic_add_fetch (&self->next_serial, 1, __ATOMIC_RELAXED);
}

void
rl_leases_value (RlLeases *self, guint64 serial, char value[RL_LEASE_VALUE_MAX])
{
  gsize len = strlen (self->client_id);
  char digits[24];
  int n = 0;

  g_assert (len + 1 + 20 + 1 <= RL_LEASE_VALUE_MAX);
  memcpy (value, self->client_id, len);
  value[len++] = ':';
  do
    digits[n++] = (char) ('0' + serial % 10);
  while ((serial /= 10) != 0);
  while (n > 0)
    value[len++] = digits[--n];
  value[len] = '\0';
}

void
rl_leases_foreach_held (RlLeases *self, RlLeasesHeldFunc func, gpointer user_data)
{
  GHashTableIter iter;
  gpointer key;

  rl_mutex_lock (&self->mutex);
  g_hash_table_iter_init (&iter, self->held);
  while (g_hash_table_iter_next (&iter, &key, NULL))
    {
      RedisLock *lock = key;
      char value[RL_LEASE_VALUE_MAX];

      if (lock->lease_flags.lost)
        continue;
      rl_leases_value (self, lock->lease.serial, value);
      func (lock, value, user_data);
    }
  rl_mutex_unlock (&self->mutex);
}

/* Reporting losses ------------------------------------------------------------- */

/* Another thread found @lock lost (flag just set): cancels its lease cancellable now
 * and has the watchdog thread call the callback (started for it even with renewal
 * off). Once closed, there is no watchdog: the callback comes from this thread. */
static void
lost_found (RlLeases *self, RedisLock *lock)
{
  gboolean queued = FALSE;

  rl_leases_cancel_lease (self, lock);
  rl_mutex_lock (&self->mutex);
  if (!self->closed)
    {
      rl_leases_pin (lock);
      g_ptr_array_add (self->lost_pending, lock);
      wake_watchdog (self);
      queued = TRUE;
    }
  rl_mutex_unlock (&self->mutex);
  if (!queued)
    rl_leases_call_callback (self, lock);
}

/* Holds ------------------------------------------------------------------------- */

gboolean
rl_leases_take (RlLeases *self, RedisLock *lock, guint64 serial, gint64 ttl_ms, gint64 sent_us,
                guint64 token)
{
  RlLeaseState *lease = &lock->lease;
  gboolean first;

  rl_mutex_lock (&self->mutex);
  if (self->closed)
    {
      rl_mutex_unlock (&self->mutex);
      return FALSE;
    }
  first = g_hash_table_size (self->held) == 0;
  lock->lease_flags.held = TRUE;
  lock->lease_flags.lost = FALSE;
  lock->lease_flags.forced = FALSE;
  lease->serial = serial;
  lease->ttl_ms = ttl_ms;
  lease->confirmed = sent_us;
  lease->token = token;
  g_hash_table_add (self->held, lock);
  if (g_atomic_int_get (&self->settings->watchdog_enabled))
    {
      /* Leases taken with the same TTL as those already held are never due earlier
       * than the planned tick: no wake-up, no rescan of the held table. */
      gint64 due = sent_us + ttl_ms * 1000 / 3;
      if (self->watchdog == NULL || due < self->planned)
        {
          self->planned = due;
          wake_watchdog (self);
        }
    }
  rl_mutex_unlock (&self->mutex);
  /* While a lease is held, something must notice that the server restarted or the
   * connection was reset even when nobody waits (rl_leases_audit()). */
  if (first && self->store->vt->guard != NULL)
    self->store->vt->guard (self->store);
  return TRUE;
}

gboolean
rl_leases_drop (RlLeases *self, RedisLock *lock, gboolean *lost)
{
  gboolean was_held;

  rl_mutex_lock (&self->mutex);
  was_held = lock->lease_flags.held;
  *lost = lock->lease_flags.lost;
  if (was_held)
    g_hash_table_remove (self->held, lock);
  /* A suspect not yet being checked goes with its hold: its pin must not keep the
   * lock in the cache. */
  if (lock->lease_flags.suspect && g_ptr_array_remove_fast (self->suspects, lock))
    {
      lock->lease_flags.suspect = FALSE;
      rl_leases_unpin_locked (self, lock);
      /* The caller, the holder, has a reference: this one is never the last. */
      g_atomic_int_add (&lock->ref_count, -1);
      if (self->suspects->len == 0)
        self->check_at = 0;
    }
  lock->lease_flags.held = FALSE;
  lock->lease_flags.lost = FALSE;
  lock->lease_flags.forced = FALSE;
  lock->lease.token = 0;
  rl_mutex_unlock (&self->mutex);
  return was_held;
}

RlLeaseView
rl_leases_view (RlLeases *self, RedisLock *lock)
{
  RlLeaseView view;
  /* Asked first, with no mutex held: while the guard is down (reconnecting), a restart
   * would go unnoticed. */
  gboolean guarded = self->store->vt->guard == NULL || self->store->vt->guard (self->store);

  rl_mutex_lock (&self->mutex);
  view.held = lock->lease_flags.held;
  view.lost = lock->lease_flags.lost;
  view.serial = lock->lease.serial;
  view.ttl_ms = lock->lease.ttl_ms;
  view.token = lock->lease.token;
  view.lose_at = lose_at (&lock->lease);
  view.unconfirmed = lock->lease.confirmed <= self->epoch_at || lock->lease_flags.forced
                     || !guarded;
  rl_mutex_unlock (&self->mutex);
  return view;
}

gboolean
rl_leases_check_time (RlLeases *self, RedisLock *lock)
{
  gboolean lost, newly = FALSE;

  rl_mutex_lock (&self->mutex);
  if (lock->lease_flags.held && !lock->lease_flags.lost
      && g_get_monotonic_time () >= lose_at (&lock->lease))
    newly = lock->lease_flags.lost = TRUE;
  lost = lock->lease_flags.lost;
  rl_mutex_unlock (&self->mutex);
  if (newly)
    lost_found (self, lock);
  return lost;
}

gint64
rl_leases_good_until (RlLeases *self, RedisLock *lock)
{
  gint64 until;

  rl_mutex_lock (&self->mutex);
  until = lock->lease_flags.held && !lock->lease_flags.lost ? lose_at (&lock->lease) : 0;
  rl_mutex_unlock (&self->mutex);
  return until;
}

gboolean
rl_leases_refresh (RlLeases *self, RedisLock *lock)
{
  char value[RL_LEASE_VALUE_MAX];
  RlLeaseResult result;
  guint64 serial;
  gint64 ttl_ms, sent;

  rl_mutex_lock (&self->renew_mutex);
  rl_mutex_lock (&self->mutex);
  serial = lock->lease.serial;
  ttl_ms = lock->lease.ttl_ms;
  rl_mutex_unlock (&self->mutex);
  rl_leases_value (self, serial, value);
  sent = g_get_monotonic_time ();
  result = self->store->vt->renew (self->store, lock->key_data, value, ttl_ms, NULL);
  rl_mutex_lock (&self->mutex);
  if (result == RL_LEASE_OK && lock->lease_flags.held && lock->lease.serial == serial)
    {
      lock->lease.confirmed = sent;
      if (sent >= self->forced_at)
        lock->lease_flags.forced = FALSE;
    }
  rl_mutex_unlock (&self->mutex);
  rl_mutex_unlock (&self->renew_mutex);
  return result == RL_LEASE_OK;
}

void
rl_leases_forget_cancelled (RlLeases *self, RedisLock *lock)
{
  GCancellable *stale = NULL;

  rl_mutex_lock (&self->mutex);
  if (lock->lease.cancellable != NULL && g_cancellable_is_cancelled (lock->lease.cancellable))
    stale = g_steal_pointer (&lock->lease.cancellable);
  rl_mutex_unlock (&self->mutex);
  g_clear_object (&stale);
}

gboolean
rl_leases_is_lost (RlLeases *self, RedisLock *lock)
{
  gboolean lost;

  rl_mutex_lock (&self->mutex);
  lost = lock->lease_flags.lost;
  rl_mutex_unlock (&self->mutex);
  return lost;
}

guint64
rl_leases_get_token (RlLeases *self, RedisLock *lock)
{
  guint64 token;

  rl_mutex_lock (&self->mutex);
  token = lock->lease_flags.held ? lock->lease.token : 0;
  rl_mutex_unlock (&self->mutex);
  return token;
}

GCancellable *
rl_leases_get_cancellable (RlLeases *self, RedisLock *lock)
{
  GCancellable *cancellable;
  gboolean lost;

  rl_mutex_lock (&self->mutex);
  if (lock->lease.cancellable == NULL)
    lock->lease.cancellable = g_cancellable_new ();
  cancellable = lock->lease.cancellable;
  lost = lock->lease_flags.lost;
  rl_mutex_unlock (&self->mutex);
  /* Only the holding thread replaces the cancellable (at its outermost unlock), so
   * the pointer stays valid for it. */
  if (lost)
    g_cancellable_cancel (cancellable);
  return cancellable;
}

gboolean
rl_leases_is_pinned (RlLeases *self, RedisLock *lock)
{
  gboolean pinned;

  rl_mutex_lock (&self->mutex);
  pinned = lock->lease_flags.pins > 0;
  rl_mutex_unlock (&self->mutex);
  return pinned;
}

gboolean
rl_leases_renew (RlLeases *self, RedisLock *lock, const char *name, gint64 ttl_ms, GError **error)
{
  g_autoptr (GError) local_error = NULL;
  char value[RL_LEASE_VALUE_MAX];
  gboolean held, lost;
  guint64 serial;
  gint64 sent;
  RlLeaseResult result;

  /* One renewal at a time: a watchdog batch in flight with the old TTL cannot land
   * after this one and shorten the key. */
  rl_mutex_lock (&self->renew_mutex);
  rl_mutex_lock (&self->mutex);
  held = lock->lease_flags.held;
  lost = lock->lease_flags.lost;
  serial = lock->lease.serial;
  rl_mutex_unlock (&self->mutex);
  if (!held || lost)
    {
      rl_mutex_unlock (&self->renew_mutex);
      if (!held)
        g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_NOT_OWNER,
                     "No thread of this registry holds lock “%s”", name);
      else
        g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_LEASE_LOST,
                     "The lease of lock “%s” was lost", name);
      return FALSE;
    }

  rl_leases_value (self, serial, value);
  sent = g_get_monotonic_time ();
  result = self->store->vt->renew (self->store, lock->key_data, value, ttl_ms, &local_error);
  if (result == RL_LEASE_OK)
    RL_ATOMIC_ADD (self->stats->renewals, 1);
  /* The answer is about the hold whose value was sent: it means nothing for a later
   * hold of the same lock (unlocked and locked again meanwhile). */
  rl_mutex_lock (&self->mutex);
  lost = FALSE;
  if (lock->lease_flags.held && lock->lease.serial == serial && result == RL_LEASE_OK)
    {
      lock->lease.ttl_ms = ttl_ms;
      lock->lease.confirmed = sent;
      if (self->watchdog != NULL)
        rl_watchdog_kick (self->watchdog);
    }
  else if (lock->lease_flags.held && lock->lease.serial == serial && result == RL_LEASE_LOST
           && !lock->lease_flags.lost)
    lost = lock->lease_flags.lost = TRUE;
  rl_mutex_unlock (&self->mutex);
  rl_mutex_unlock (&self->renew_mutex);
  if (lost)
    lost_found (self, lock);

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
}

void
rl_leases_audit (RlLeases *self)
{
  rl_mutex_lock (&self->mutex);
  self->epoch_at = g_get_monotonic_time ();
  if (!self->closed && g_hash_table_size (self->held) > 0)
    {
      /* The watchdog thread checks them, started for it even with renewal off. */
      RL_ATOMIC_ADD (self->stats->audits, 1);
      wake_watchdog (self);
      rl_watchdog_tick_now (self->watchdog);
    }
  rl_mutex_unlock (&self->mutex);
}

/* A release heard for a held key is rarely a forced one: the echo of our own release
 * reaches our subscriber after the next hold of the same lock may have begun, and a
 * kept streak publishes too. So a suspect is read back (GET, which changes nothing: no
 * renewal, no TTL reset) a little later and at most every RL_CHECK_SPACING_US: a lock
 * taken in a loop costs a few reads a second, and a forced release is still found
 * within about a second. */
#define RL_CHECK_DELAY_US (50 * 1000)
#define RL_CHECK_SPACING_US (250 * 1000)

/* Adds @lock to the suspects when it is held and not already one. self->mutex held. */
static gboolean
suspect_locked (RlLeases *self, RedisLock *lock)
{
  rl_mutex_assert_held (&self->mutex);
  if (!lock->lease_flags.held || lock->lease_flags.lost || lock->lease_flags.suspect)
    return FALSE;
  lock->lease_flags.suspect = TRUE;
  rl_leases_pin (lock);
  g_ptr_array_add (self->suspects, lock);
  return TRUE;
}

void
rl_leases_check_soon (RlLeases *self, RedisLock *lock)
{
  rl_mutex_lock (&self->mutex);
  if (!self->closed && suspect_locked (self, lock) && self->check_at == 0)
    {
      /* Most often it is our own release's echo: the read waits a little. */
      self->check_at = MAX (g_get_monotonic_time () + RL_CHECK_DELAY_US,
                            self->checked_at + RL_CHECK_SPACING_US);
      wake_watchdog (self);
    }
  rl_mutex_unlock (&self->mutex);
}

void
rl_leases_forced (RlLeases *self, const char *key)
{
  GHashTableIter iter;
  gpointer held;
  gint64 now = g_get_monotonic_time ();
  gboolean found = FALSE;

  rl_mutex_lock (&self->mutex);
  /* Rare (an operator's call): the held table is searched, so that the carriers no
   * cache knows by name, a permit's, are found as a lock's is. */
  g_hash_table_iter_init (&iter, self->held);
  while (!self->closed && g_hash_table_iter_next (&iter, &held, NULL))
    {
      RedisLock *lock = held;
      if (lock->lease_flags.lost || strcmp (lock->key_data, key) != 0)
        continue;
      lock->lease_flags.forced = TRUE;
      self->forced_at = now;
      /* Being checked already, it is read again (check_suspects()). */
      suspect_locked (self, lock);
      found = TRUE;
    }
  if (found && (self->check_at == 0 || self->check_at > now))
    {
      /* No echo to wait for: read back now. */
      self->check_at = now;
      wake_watchdog (self);
    }
  rl_mutex_unlock (&self->mutex);
}

/* Reads back the value of every suspect: one that is gone or holds another value is
 * lost; a forced one found still ours is confirmed, unless its read went out before
 * the latest forced release was heard, when it is read again. On the watchdog thread,
 * when check_at is due. */
static void
check_suspects (RlLeases *self)
{
  g_autoptr (GPtrArray) suspects = NULL;
  g_autoptr (GPtrArray) lost = g_ptr_array_new ();

  rl_mutex_lock (&self->mutex);
  suspects = g_steal_pointer (&self->suspects);
  self->suspects = g_ptr_array_new ();
  self->check_at = 0;
  self->checked_at = g_get_monotonic_time ();
  rl_mutex_unlock (&self->mutex);

  for (guint i = 0; i < suspects->len; i++)
    {
      RedisLock *lock = g_ptr_array_index (suspects, i);
      g_autoptr (GError) error = NULL;
      g_autofree char *found = NULL;
      char value[RL_LEASE_VALUE_MAX];
      guint64 serial;
      gint64 pttl_ms;
      gboolean exists, mark = FALSE, again = FALSE;
      gint64 sent;

      rl_mutex_lock (&self->mutex);
      serial = lock->lease.serial;
      rl_mutex_unlock (&self->mutex);
      rl_leases_value (self, serial, value);
      sent = g_get_monotonic_time ();
      exists = self->store->vt->inspect (self->store, lock->key_data, &found, &pttl_ms, &error);
      rl_mutex_lock (&self->mutex);
      lock->lease_flags.suspect = FALSE;
      if (lock->lease_flags.held && lock->lease.serial == serial && !lock->lease_flags.lost)
        {
          if (error == NULL && (!exists || strcmp (found, value) != 0))
            mark = lock->lease_flags.lost = TRUE;
          else if (error == NULL && lock->lease_flags.forced && sent >= self->forced_at)
            lock->lease_flags.forced = FALSE;
          else if (error == NULL && lock->lease_flags.forced)
            again = suspect_locked (self, lock);
        }
      if (mark)
        g_ptr_array_add (lost, lock); /* keeps the pin for rl_leases_report_lost() */
      else
        rl_leases_unpin_locked (self, lock);
      if (again && self->check_at == 0)
        self->check_at = g_get_monotonic_time ();
      rl_mutex_unlock (&self->mutex);
      if (error != NULL)
        rl_debug ("checking %s: %s", lock->key_data, error->message);
      if (!mark)
        rl_lock_unref_memory (lock);
    }
  rl_leases_report_lost (self, lost);
}

void
rl_leases_settings_changed (RlLeases *self)
{
  rl_mutex_lock (&self->mutex);
  if (self->watchdog != NULL)
    rl_watchdog_kick (self->watchdog);
  rl_mutex_unlock (&self->mutex);
}

/* Doubtful acquisitions and releases ---------------------------------------------- */

void
rl_leases_add_doubtful (RlLeases *self, const char *key, const char *value, gint64 ttl_ms)
{
  Doubtful d = { g_strdup (key), g_strdup (value),
                 rl_deadline_after (g_get_monotonic_time (), ttl_ms) };

  rl_mutex_lock (&self->mutex);
  if (!self->closed)
    {
      g_array_append_val (self->doubtful, d);
      d.key = d.value = NULL;
      wake_watchdog (self);
    }
  rl_mutex_unlock (&self->mutex);
  /* Closed: close has made its last try already; the key expires with its TTL. */
  doubtful_clear (&d);
}

/* Releases the doubtful acquisitions; returns how many remain. */
static guint
release_doubtful (RlLeases *self)
{
  g_autoptr (GArray) pending = NULL;
  gboolean failed = FALSE;
  guint left;

  rl_mutex_lock (&self->mutex);
  if (self->doubtful->len == 0)
    {
      rl_mutex_unlock (&self->mutex);
      return 0;
    }
  pending = g_steal_pointer (&self->doubtful);
  self->doubtful = g_array_new (FALSE, FALSE, sizeof (Doubtful));
  rl_mutex_unlock (&self->mutex);

  /* One failure means the store is out of reach: the rest wait for the next try (after
   * the watchdog's backoff) instead of each costing a connection attempt now. */
  for (guint i = 0; i < pending->len; i++)
    {
      Doubtful *d = &g_array_index (pending, Doubtful, i);
      g_autoptr (GError) error = NULL;
      gboolean others;

      if (g_get_monotonic_time () < d->until_us
          && (failed
              || self->store->vt->release (self->store, d->key, d->value, 0, &others, &error)
                     == RL_LEASE_ERROR))
        {
          if (!failed)
            rl_debug ("releasing %s after a request with an unknown outcome: %s", d->key,
                     error->message);
          failed = TRUE;
          rl_mutex_lock (&self->mutex);
          g_array_append_val (self->doubtful, *d);
          rl_mutex_unlock (&self->mutex);
          continue;
        }
      doubtful_clear (d);
    }
  rl_mutex_lock (&self->mutex);
  left = self->doubtful->len;
  rl_mutex_unlock (&self->mutex);
  return left;
}

/* The watchdog's work ------------------------------------------------------------ */

static gboolean
watchdog_chores (gpointer data)
{
  RlLeases *self = data;
  gboolean due;

  rl_leases_report_pending (self);
  rl_mutex_lock (&self->mutex);
  due = self->check_at != 0 && g_get_monotonic_time () >= self->check_at;
  rl_mutex_unlock (&self->mutex);
  if (due)
    check_suspects (self);
  return release_doubtful (self) > 0;
}

/* When the next tick is due: a third of the way into the lease that is soonest due,
 * less a jitter. With nothing held, a third of the registry's TTL from now: a lease
 * taken with that TTL before then is due later, so taking it needs no wake-up
 * (rl_leases_take()), and a lock taken and released in a loop never makes the thread
 * run. RL_FOREVER with renewal off. */
static gint64
watchdog_plan (gpointer data, gint64 *deadline_us, gint64 *chores_us)
{
  RlLeases *self = data;
  GHashTableIter iter;
  gpointer key;
  gint64 next = RL_FOREVER;
  gint64 min_ttl = G_MAXINT64;

  *deadline_us = RL_FOREVER;
  rl_mutex_lock (&self->mutex);
  /* The suspects' check is a chore: it renews nothing. */
  *chores_us = self->check_at != 0 ? self->check_at : RL_FOREVER;
  if (!g_atomic_int_get (&self->settings->watchdog_enabled))
    {
      self->planned = RL_FOREVER;
      rl_mutex_unlock (&self->mutex);
      return RL_FOREVER;
    }
  g_hash_table_iter_init (&iter, self->held);
  while (g_hash_table_iter_next (&iter, &key, NULL))
    {
      RlLeaseState *lease = &((RedisLock *) key)->lease;
      if (((RedisLock *) key)->lease_flags.lost)
        continue;
      next = MIN (next, lease->confirmed + lease->ttl_ms * 1000 / 3);
      *deadline_us = MIN (*deadline_us, lose_at (lease));
      next = MIN (next, *deadline_us);
      min_ttl = MIN (min_ttl, lease->ttl_ms);
    }
  if (next == RL_FOREVER)
    next = g_get_monotonic_time () + RL_ATOMIC_GET (self->settings->expire_after_ms) * 1000 / 3;
  else
    next -= g_random_int_range (0, (gint32) MIN (min_ttl * 1000 / 20, G_MAXINT32 - 1) + 1);
  self->planned = next;
  rl_mutex_unlock (&self->mutex);
  return next;
}

/* Renews every held lease in one batch and marks the lost ones. RL_TICK_AGAIN when a
 * lock was released and taken again with another TTL while the batch was in flight,
 * so the batch may have applied the old hold's TTL to the new one. */
static RlTickResult
watchdog_tick (gpointer data)
{
  RlLeases *self = data;
  RlStore *store = self->store;
  g_autoptr (GArray) entries = g_array_new (FALSE, FALSE, sizeof (Entry));
  g_autoptr (GPtrArray) keys = g_ptr_array_new ();
  g_autoptr (GPtrArray) values = g_ptr_array_new ();
  g_autoptr (GArray) ttls = g_array_new (FALSE, FALSE, sizeof (gint64));
  g_autoptr (GPtrArray) lost = g_ptr_array_new ();
  g_autoptr (GPtrArray) unpinned = g_ptr_array_new ();
  g_autoptr (GError) error = NULL;
  g_autofree RlLeaseResult *results = NULL;
  g_autofree char *value_buf = NULL; /* every value, RL_LEASE_VALUE_MAX bytes apart */
  GHashTableIter iter;
  gpointer key;
  gint64 now = g_get_monotonic_time ();
  gint64 deadline;
  gint64 sent;
  guint round_trips = 0;
  gboolean ok;
  RlTickResult result = RL_TICK_DONE;

  rl_mutex_lock (&self->renew_mutex);
  rl_mutex_lock (&self->mutex);
  value_buf = g_malloc ((gsize) MAX (g_hash_table_size (self->held), 1) * RL_LEASE_VALUE_MAX);
  /* The batch ends with the command timeout, or when the first of its leases would be
   * lost, whichever comes first. */
  deadline = rl_deadline_after (now, RL_ATOMIC_GET (store->ctx->command_timeout_ms));
  g_hash_table_iter_init (&iter, self->held);
  while (g_hash_table_iter_next (&iter, &key, NULL))
    {
      RedisLock *lock = key;
      Entry e = { lock, lock->lease.serial, lock->lease.ttl_ms };
      char *value = value_buf + (gsize) entries->len * RL_LEASE_VALUE_MAX;
      if (lock->lease_flags.lost)
        continue;
      rl_leases_pin (lock);
      if (now >= lose_at (&lock->lease))
        {
          lock->lease_flags.lost = TRUE;
          g_ptr_array_add (lost, lock);
          continue;
        }
      deadline = MIN (deadline, MAX (lose_at (&lock->lease), now + 1000));
      rl_leases_value (self, e.serial, value);
      g_array_append_val (entries, e);
      g_ptr_array_add (keys, lock->key_data);
      g_ptr_array_add (values, value);
      g_array_append_val (ttls, e.ttl_ms);
    }
  rl_mutex_unlock (&self->mutex);

  if (entries->len == 0)
    {
      /* An idle wake-up: nothing to renew, only the losses found above to report. */
      rl_mutex_unlock (&self->renew_mutex);
      rl_leases_report_lost (self, lost);
      return RL_TICK_DONE;
    }

  results = g_new0 (RlLeaseResult, entries->len);
  sent = g_get_monotonic_time ();
  ok = store->vt->renew_batch (store, entries->len, (const char *const *) keys->pdata,
                               (const char *const *) values->pdata, (const gint64 *) ttls->data,
                               results, deadline, &round_trips, &error);
  if (!ok)
    {
      rl_debug ("watchdog: renewing %u leases: %s", entries->len, error->message);
      result = RL_TICK_FAILED;
    }
  RL_ATOMIC_ADD (self->stats->watchdog_ticks, 1);
  RL_ATOMIC_SET (self->stats->last_tick_leases, entries->len);
  RL_ATOMIC_SET (self->stats->last_tick_round_trips, round_trips);
  RL_ATOMIC_SET (self->stats->last_tick_us, g_get_monotonic_time () - sent);

  now = g_get_monotonic_time ();
  rl_mutex_lock (&self->mutex);
  for (guint i = 0; i < entries->len; i++)
    {
      Entry *e = &g_array_index (entries, Entry, i);
      RlLeaseState *lease = &e->lock->lease;
      RlLeaseFlags *flags = &e->lock->lease_flags;
      gboolean mark = FALSE;

      if (flags->held && lease->serial != e->serial && ok && results[i] == RL_LEASE_OK
          && lease->ttl_ms != e->ttl_ms)
        result = RL_TICK_AGAIN;
      if (flags->held && lease->serial == e->serial && !flags->lost)
        {
          if (ok && results[i] == RL_LEASE_OK)
            {
              lease->confirmed = MAX (lease->confirmed, sent);
              RL_ATOMIC_ADD (self->stats->renewals, 1);
            }
          else if (ok && results[i] == RL_LEASE_LOST)
            mark = TRUE;
          if (!mark && now >= lose_at (lease))
            mark = TRUE;
        }
      if (mark)
        {
          flags->lost = TRUE;
          g_ptr_array_add (lost, e->lock);
        }
      else
        {
          rl_leases_unpin_locked (self, e->lock);
          g_ptr_array_add (unpinned, e->lock);
        }
    }
  rl_mutex_unlock (&self->mutex);
  rl_mutex_unlock (&self->renew_mutex);

  rl_leases_unref_unpinned (unpinned);
  rl_leases_report_lost (self, lost);
  return result;
}

static const RlWatchdogFuncs watchdog_funcs = {
  .chores = watchdog_chores,
  .plan = watchdog_plan,
  .tick = watchdog_tick,
};

/* Close ------------------------------------------------------------------------- */

void
rl_leases_close (RlLeases *self)
{
  g_autoptr (GPtrArray) held = g_ptr_array_new ();
  g_autoptr (GPtrArray) unchecked = NULL;
  RlWatchdog *watchdog;
  GHashTableIter iter;
  gpointer key;

  /* The watchdog first, so nothing renews while the leases go. Losses found just
   * before still get their callback, from this thread. */
  rl_mutex_lock (&self->mutex);
  self->closed = TRUE;
  watchdog = g_steal_pointer (&self->watchdog);
  rl_mutex_unlock (&self->mutex);
  rl_watchdog_free (watchdog);
  rl_leases_report_pending (self);

  /* Suspects left unchecked: close tells every holder anyway. */
  rl_mutex_lock (&self->mutex);
  for (guint i = 0; i < self->suspects->len; i++)
    {
      RedisLock *lock = g_ptr_array_index (self->suspects, i);
      lock->lease_flags.suspect = FALSE;
      rl_leases_unpin_locked (self, lock);
    }
  unchecked = g_steal_pointer (&self->suspects);
  self->suspects = g_ptr_array_new ();
  self->check_at = 0;
  rl_mutex_unlock (&self->mutex);
  rl_leases_unref_unpinned (unchecked);

  /* Release every lease still held, best effort, and tell the holders as for a lost
   * lease (no callback: the registry is closing): is_lease_lost() is TRUE and the
   * lease cancellable cancelled from now on. Their later unlock finds the lease no
   * longer in the table. */
  rl_mutex_lock (&self->mutex);
  g_hash_table_iter_init (&iter, self->held);
  while (g_hash_table_iter_next (&iter, &key, NULL))
    {
      RedisLock *lock = key;
      lock->lease_flags.held = FALSE;
      lock->lease_flags.lost = TRUE;
      rl_leases_pin (lock);
      g_ptr_array_add (held, lock);
    }
  g_hash_table_remove_all (self->held);
  rl_mutex_unlock (&self->mutex);
  for (guint i = 0; i < held->len; i++)
    {
      RedisLock *lock = g_ptr_array_index (held, i);
      g_autoptr (GError) error = NULL;
      GCancellable *cancellable;
      char value[RL_LEASE_VALUE_MAX];
      gboolean others;

      rl_mutex_lock (&self->mutex);
      rl_leases_value (self, lock->lease.serial, value);
      cancellable = lock->lease.cancellable ? g_object_ref (lock->lease.cancellable) : NULL;
      rl_mutex_unlock (&self->mutex);
      if (cancellable != NULL)
        {
          g_cancellable_cancel (cancellable);
          g_object_unref (cancellable);
        }
      if (self->store->vt->release (self->store, lock->key_data, value, 0, &others, &error)
          == RL_LEASE_ERROR)
        rl_debug ("close: releasing %s: %s", lock->key_data, error->message);
      rl_leases_unpin (self, lock);
    }
  /* Requests whose outcome was unknown: one last try. */
  release_doubtful (self);
}
