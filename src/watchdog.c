/* watchdog.c: one thread per registry that keeps every held lease alive and says so
 * when it cannot.
 *
 * Spring's renewal schedules one task per lock and stays silent when renewal fails;
 * Redisson renews but never tells the holder. Here one thread wakes at a third of the
 * shortest held TTL (a little early, by a random jitter, so many processes do not
 * renew in step) and renews all leases of the registry in one pipelined batch: one
 * write, N replies, each lease with its own TTL. Re-entry never reaches it.
 *
 * A lease is lost when renewal finds the key gone or foreign, or when no renewal has
 * been confirmed for longer than its TTL minus a drift margin, counted from when the
 * last confirmed request was sent: with Redis unreachable or frozen the key may have
 * expired, so the holder is told to assume the worst. The batch's socket timeout is
 * cut to the earliest such deadline, so a frozen server cannot delay the verdict.
 * Losses are reported outside every lease lock: the lease cancellable is cancelled,
 * then the registry's callback is called, once per lost lease.
 *
 * A batch that fails as a whole (Redis unreachable) is tried again after a backoff,
 * 100 ms doubling to 1 s, never later than the earliest moment a lease would count as
 * lost: retrying at once would spin a core and flood the server with connections as
 * it comes back. The same thread also releases acquisitions whose outcome was unknown
 * (rl_registry_add_doubtful()), and ticks at once when the store says its connection
 * broke (rl_watchdog_tick_now()), so leases a restarted server forgot are reported
 * without waiting for the next tick.
 */
#include "config.h"

#include "internal.h"

struct _RlWatchdog
{
  RedisLockRegistry *registry;
  pthread_t thread;
  RlMutex mutex;
  RlCond cond;
  gboolean stop;   /* watchdog->mutex */
  gboolean kicked; /* watchdog->mutex */
  gboolean now;    /* watchdog->mutex: tick at once */
  gint64 planned;  /* registry->lease_mutex: when the thread means to wake next */
};

typedef struct
{
  RedisLock *lock;
  guint64 serial;
  gint64 ttl_ms;
  char *value;
} Entry;

#define RL_BACKOFF_MIN_US (100 * 1000)
#define RL_BACKOFF_MAX_US (1000 * 1000)

typedef enum
{
  TICK_DONE,   /* renewed, or nothing to renew */
  TICK_AGAIN,  /* renew again at once (see tick()) */
  TICK_FAILED, /* the batch failed as a whole: back off */
} TickResult;

/* When the next tick is due: a third of the way into the lease that is soonest due,
 * less a jitter. registry->lease_mutex held. With nothing held, a third of the
 * registry's TTL from now: a lease taken with that TTL before then is due later, so
 * taking it needs no wake-up (rl_watchdog_schedule), and a lock taken and released
 * in a loop never makes this thread run. RL_FOREVER with renewal off. */
static gint64
next_tick (RedisLockRegistry *registry, gint64 *lose_at)
{
  GHashTableIter iter;
  gpointer key;
  gint64 next = RL_FOREVER;
  gint64 min_ttl = G_MAXINT64;

  *lose_at = RL_FOREVER;
  if (!g_atomic_int_get (&registry->watchdog_enabled))
    return RL_FOREVER;
  g_hash_table_iter_init (&iter, registry->held);
  while (g_hash_table_iter_next (&iter, &key, NULL))
    {
      RedisLock *lock = key;
      if (lock->lost)
        continue;
      next = MIN (next, lock->lease_confirmed + lock->lease_ttl_ms * 1000 / 3);
      *lose_at = MIN (*lose_at, rl_lease_lose_at (lock));
      next = MIN (next, *lose_at);
      min_ttl = MIN (min_ttl, lock->lease_ttl_ms);
    }
  if (next == RL_FOREVER)
    return g_get_monotonic_time () + RL_STAT_GET (registry->expire_after_ms) * 1000 / 3;
  next -= g_random_int_range (0, (gint32) MIN (min_ttl * 1000 / 20, G_MAXINT32 - 1) + 1);
  return next;
}

/* Tells about the leases in @lost and drops the references taken on them. */
static void
report_lost (RedisLockRegistry *registry, GPtrArray *lost)
{
  rl_registry_report_lost (registry, lost);
  for (guint i = 0; i < lost->len; i++)
    rl_lock_release_memory (g_ptr_array_index (lost, i));
}

static void
entry_clear (gpointer data)
{
  g_free (((Entry *) data)->value);
}

/* Renews every held lease in one batch and marks the lost ones. TICK_AGAIN when
 * another tick is due at once: a lock was released and taken again while the batch
 * was in flight (a new acquisition, or a kept streak with another TTL). Renewals of
 * the registry are one at a time (registry->renew_mutex, see internal.h). */
static TickResult
tick (RlWatchdog *self)
{
  RedisLockRegistry *registry = self->registry;
  RlStore *store = registry->store;
  g_autoptr (GArray) entries = g_array_new (FALSE, FALSE, sizeof (Entry));
  g_autoptr (GPtrArray) keys = g_ptr_array_new ();
  g_autoptr (GPtrArray) values = g_ptr_array_new ();
  g_autoptr (GArray) ttls = g_array_new (FALSE, FALSE, sizeof (gint64));
  g_autoptr (GPtrArray) lost = g_ptr_array_new ();
  g_autoptr (GError) error = NULL;
  g_autofree RlLeaseResult *results = NULL;
  GHashTableIter iter;
  gpointer key;
  gint64 now = g_get_monotonic_time ();
  gint64 timeout_ms = RL_STAT_GET (registry->store_ctx.command_timeout_ms);
  gint64 sent;
  guint round_trips = 0;
  gboolean ok;
  TickResult result = TICK_DONE;

  g_array_set_clear_func (entries, entry_clear);
  rl_mutex_lock (&registry->renew_mutex);
  rl_mutex_lock (&registry->lease_mutex);
  g_hash_table_iter_init (&iter, registry->held);
  while (g_hash_table_iter_next (&iter, &key, NULL))
    {
      RedisLock *lock = key;
      Entry e = { lock, lock->lease_serial, lock->lease_ttl_ms, NULL };
      if (lock->lost)
        continue;
      if (now >= rl_lease_lose_at (lock))
        {
          lock->lost = TRUE;
          g_atomic_int_inc (&lock->ref_count);
          g_ptr_array_add (lost, lock);
          continue;
        }
      timeout_ms = MIN (timeout_ms, MAX ((rl_lease_lose_at (lock) - now) / 1000, 1));
      g_atomic_int_inc (&lock->ref_count);
      e.value = g_malloc (RL_LEASE_VALUE_MAX);
      rl_registry_lease_value (registry, e.serial, e.value);
      g_array_append_val (entries, e);
      g_ptr_array_add (keys, lock->key_data);
      g_ptr_array_add (values, e.value);
      g_array_append_val (ttls, e.ttl_ms);
    }
  rl_mutex_unlock (&registry->lease_mutex);

  if (entries->len == 0)
    {
      /* An idle wake-up: nothing to renew, only the losses found above to report. */
      rl_mutex_unlock (&registry->renew_mutex);
      report_lost (registry, lost);
      return TICK_DONE;
    }

  results = g_new0 (RlLeaseResult, MAX (entries->len, 1));
  sent = g_get_monotonic_time ();
  ok = store->vt->renew_batch (store, entries->len, (const char *const *) keys->pdata,
                               (const char *const *) values->pdata, (const gint64 *) ttls->data,
                               results, timeout_ms, &round_trips, &error);
  if (!ok)
    {
      g_debug ("watchdog: renewing %u leases: %s", entries->len, error->message);
      result = TICK_FAILED;
    }
  RL_STAT_ADD (registry->stats.watchdog_ticks, 1);
  RL_STAT_SET (registry->stats.last_tick_leases, entries->len);
  RL_STAT_SET (registry->stats.last_tick_round_trips, round_trips);
  RL_STAT_SET (registry->stats.last_tick_us, g_get_monotonic_time () - sent);

  now = g_get_monotonic_time ();
  rl_mutex_lock (&registry->lease_mutex);
  for (guint i = 0; i < entries->len; i++)
    {
      Entry *e = &g_array_index (entries, Entry, i);
      RedisLock *lock = e->lock;
      gboolean mark = FALSE;

      if (lock->held && lock->lease_serial != e->serial && ok && results[i] == RL_LEASE_OK
          && lock->lease_ttl_ms != e->ttl_ms)
        result = TICK_AGAIN;
      if (lock->held && lock->lease_serial == e->serial && !lock->lost)
        {
          if (ok && results[i] == RL_LEASE_OK)
            {
              lock->lease_confirmed = MAX (lock->lease_confirmed, sent);
              RL_STAT_ADD (registry->stats.renewals, 1);
            }
          else if (ok && results[i] == RL_LEASE_LOST)
            mark = TRUE;
          if (!mark && now >= rl_lease_lose_at (lock))
            mark = TRUE;
        }
      if (mark)
        {
          lock->lost = TRUE;
          g_ptr_array_add (lost, lock);
        }
      else
        rl_lock_release_memory (lock);
    }
  rl_mutex_unlock (&registry->lease_mutex);
  rl_mutex_unlock (&registry->renew_mutex);

  report_lost (registry, lost);
  return result;
}

static void *
watchdog_thread (void *data)
{
  RlWatchdog *self = data;
  RedisLockRegistry *registry = self->registry;
  TickResult last = TICK_DONE;
  gint64 backoff = 0;

  rl_thread_set_name ("redislock-wd");
  for (;;)
    {
      gint64 wake, lose_at, now;
      gboolean doubtful;

      rl_registry_report_pending (registry);
      doubtful = rl_registry_release_doubtful (registry) > 0;
      now = g_get_monotonic_time ();
      if (last == TICK_FAILED || doubtful)
        backoff = backoff == 0 ? RL_BACKOFF_MIN_US : MIN (backoff * 2, RL_BACKOFF_MAX_US);
      else
        backoff = 0;
      rl_mutex_lock (&registry->lease_mutex);
      wake = next_tick (registry, &lose_at);
      if (last == TICK_AGAIN)
        wake = now;
      else if (last == TICK_FAILED)
        /* The leases are unconfirmed: again after the backoff, and not after a lease
         * would count as lost. */
        wake = MIN (now + backoff, lose_at);
      if (doubtful)
        wake = MIN (wake, now + backoff);
      self->planned = wake;
      rl_mutex_unlock (&registry->lease_mutex);

      rl_mutex_lock (&self->mutex);
      while (!self->stop && !self->kicked && !self->now && g_get_monotonic_time () < wake)
        rl_cond_wait_until (&self->cond, &self->mutex, wake);
      if (self->stop)
        {
          rl_mutex_unlock (&self->mutex);
          break;
        }
      if (self->kicked && !self->now)
        {
          /* Plans changed (a new or renewed lease): compute the wake-up again. */
          self->kicked = FALSE;
          rl_mutex_unlock (&self->mutex);
          continue;
        }
      self->kicked = self->now = FALSE;
      rl_mutex_unlock (&self->mutex);
      last = tick (self);
    }
  return NULL;
}

RlWatchdog *
rl_watchdog_new (RedisLockRegistry *registry)
{
  RlWatchdog *self = g_new0 (RlWatchdog, 1);
  int rc;

  self->registry = registry;
  rl_mutex_init (&self->mutex);
  rl_cond_init (&self->cond);
  rc = pthread_create (&self->thread, NULL, watchdog_thread, self);
  if (rc != 0)
    g_error ("Cannot start the lock watchdog thread: %s", g_strerror (rc));
  return self;
}

void
rl_watchdog_kick (RlWatchdog *self)
{
  rl_mutex_lock (&self->mutex);
  self->kicked = TRUE;
  rl_cond_signal (&self->cond);
  rl_mutex_unlock (&self->mutex);
}

void
rl_watchdog_tick_now (RlWatchdog *self)
{
  rl_mutex_lock (&self->mutex);
  self->now = TRUE;
  rl_cond_signal (&self->cond);
  rl_mutex_unlock (&self->mutex);
}

void
rl_watchdog_schedule (RlWatchdog *self, gint64 due_us)
{
  /* Leases taken with the same TTL as those already held are never due earlier
   * than the planned tick: no wake-up, no rescan of the held table. */
  if (due_us < self->planned)
    {
      self->planned = due_us;
      rl_watchdog_kick (self);
    }
}

void
rl_watchdog_free (RlWatchdog *self)
{
  if (self == NULL)
    return;
  rl_mutex_lock (&self->mutex);
  self->stop = TRUE;
  rl_cond_signal (&self->cond);
  rl_mutex_unlock (&self->mutex);
  pthread_join (self->thread, NULL);
  rl_cond_clear (&self->cond);
  rl_mutex_clear (&self->mutex);
  g_free (self);
}
