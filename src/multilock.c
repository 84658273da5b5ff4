/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* multilock.c: several locks at once, all or none (redis_lock_try_lock_all(),
 * redis_lock_unlock_all()).
 *
 * Built from the steps of lock.c, in the order a single acquisition takes them: the
 * local mutexes first, then the leases. The locks are sorted into one canonical order
 * (registry, then key) and listed once each. The local mutexes are taken in that
 * order, each waiting until the call's one deadline: two threads of a process that
 * take overlapping sets then meet on the first lock they share and never hold one
 * another's next lock, so they cannot deadlock locally. Locks the thread holds already
 * just count one more hold.
 *
 * The leases cannot rely on an order: another process sorts its registries by other
 * addresses, and a holder of one lock need not be taking sets at all. So no lease is
 * kept while waiting for another. Each attempt asks each registry's store for all of
 * its leases in one request (one round trip per server; on one server they are taken
 * all or none in one script, on a Cluster per slot); if any is held elsewhere, the
 * leases the attempt took are released at once (one request again), and the call sleeps
 * until the holder's unlock notification, its remaining TTL or the deadline, then
 * tries the whole set again: one acquisition machine of acquire.c over the whole set,
 * whose attempt is the set's request, so the rules are a single acquisition's. After
 * an attempt that had taken part of the set, the retry also waits a short random time,
 * so that two processes that each took a part do not collide again in step.
 *
 * On failure everything this call took is given back before it returns: leases
 * released, local mutexes freed (a lease handed over with one goes on as at an unlock),
 * extra holds dropped. The leases are recorded in the lease table only once the whole
 * set is had, so the watchdog never renews part of a failed attempt.
 *
 * redis_lock_unlock_all() unlocks in the reverse order. The outermost unlocks that
 * simply release their lease (no local waiter to hand it to) go to each registry's
 * store in one request; the others take the single unlock's path.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "debug.h"
#include "internal.h"
#include "waits.h"

/* The longest random pause before a retry that follows a partly taken set. */
#define RL_MULTI_JITTER_MAX_MS 20

/* One lock of the set, and where its acquisition stands. */
typedef struct
{
  RedisLock *lock;
  RlLocalTake local;
  char *fence_key;
  guint64 serial;
  gint64 ttl_ms;
  guint16 seq;
  RlNotifyState notify; /* its notifications, as they stood when the attempt was sent */
  gboolean joined;      /* it joined the waiters of its key (watch_set()) */
  char value[RL_LEASE_VALUE_MAX];
} Entry;

static int
compare_locks (const void *a, const void *b)
{
  const RedisLock *x = *(RedisLock *const *) a;
  const RedisLock *y = *(RedisLock *const *) b;

  if (x->registry != y->registry)
    return (guintptr) x->registry < (guintptr) y->registry ? -1 : 1;
  return strcmp (x->key_data, y->key_data);
}

/* @locks sorted into the canonical order, each once; *m says how many. */
static RedisLock **
canonical_set (RedisLock *const *locks, guint n, guint *m)
{
  RedisLock **sorted = g_memdup2 (locks, sizeof (RedisLock *) * n);
  guint k = 0;

  qsort (sorted, n, sizeof (RedisLock *), compare_locks);
  for (guint i = 0; i < n; i++)
    if (k == 0 || sorted[k - 1] != sorted[i])
      sorted[k++] = sorted[i];
  *m = k;
  return sorted;
}

/* Wakes every lock of the set when the call is cancelled. The callback may run on the
 * cancelling thread: the set is published with an atomic store (GCancellable's own
 * mutex is one ThreadSanitizer cannot see). */
typedef struct
{
  Entry *entries;
  gint m; /* atomic */
} WakeSet;

static void
on_cancelled (GCancellable *cancellable, gpointer data)
{
  WakeSet *set = data;
  gint m = g_atomic_int_get (&set->m);

  for (gint i = 0; i < m; i++)
    rl_lock_wake_all (set->entries[i].lock);
}

/* The store phase --------------------------------------------------------------- */

/* One request per registry: entries [start, end) of @need (indexes into @entries),
 * all of one registry. */
typedef struct
{
  guint start, end;
} Group;

/* Releases the leases of @items that ended OK (the attempt took them): one request per
 * registry. A release that fails is left to the background (doubtful). */
static void
release_taken (Entry *entries, const guint *need, RlLeaseItem *items, const Group *groups,
               guint n_groups)
{
  for (guint g = 0; g < n_groups; g++)
    {
      RedisLockRegistry *registry = entries[need[groups[g].start]].lock->registry;
      RlStore *store = registry->store;
      g_autofree RlLeaseItem *taken = g_new0 (RlLeaseItem, groups[g].end - groups[g].start);
      g_autofree guint *which = g_new0 (guint, groups[g].end - groups[g].start);
      g_autoptr (GError) error = NULL;
      guint k = 0;

      for (guint i = groups[g].start; i < groups[g].end; i++)
        if (items[i].result == RL_LEASE_OK)
          {
            taken[k].key = items[i].key;
            taken[k].value = items[i].value;
            which[k++] = i;
          }
      if (k == 0)
        continue;
      if (!store->vt->release_many (store, k, taken, &error))
        rl_debug ("releasing a partly taken set: %s", error->message);
      for (guint j = 0; j < k; j++)
        {
          Entry *e = &entries[need[which[j]]];
          if (taken[j].result == RL_LEASE_ERROR)
            rl_leases_add_doubtful (registry->leases, e->lock->key_data, e->value, e->ttl_ms);
          else
            RL_ATOMIC_ADD (registry->stats.releases, 1);
        }
    }
}

/* Records the leases just taken in each lock's lease table. FALSE with CLOSED when a
 * registry closed meanwhile: the leases not recorded are released here, those recorded
 * before went with close(), and the table forgets them. */
static gboolean
record_taken (Entry *entries, const guint *need, guint n_need, const RlLeaseItem *items,
              gint64 sent, GError **error)
{
  guint i;

  for (i = 0; i < n_need; i++)
    {
      Entry *e = &entries[need[i]];
      RedisLockRegistry *registry = e->lock->registry;

      if (!rl_leases_take (registry->leases, e->lock, e->serial, e->ttl_ms, sent, items[i].token))
        break;
      RL_ATOMIC_ADD (registry->stats.acquisitions, 1);
    }
  if (i == n_need)
    return TRUE;
  for (guint j = 0; j < n_need; j++)
    {
      Entry *e = &entries[need[j]];
      gboolean lost;

      if (j < i)
        {
          rl_leases_drop (e->lock->registry->leases, e->lock, &lost);
          rl_leases_forget_cancelled (e->lock->registry->leases, e->lock);
        }
      else
        rl_lock_release_after_close (e->lock, e->value, NULL);
    }
  g_set_error_literal (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CLOSED,
                       "The lock registry was closed during this call; the leases it had just "
                       "taken were released");
  return FALSE;
}

/* The set's attempts and their outcome, as the driver of the machine keeps them. */
typedef struct
{
  Entry *entries;
  const guint *need; /* indexes into entries of the locks that need a lease */
  guint n_need;
  Group *groups;
  guint n_groups;
  RlLeaseItem *items; /* one per need */
  gboolean bounded;
  Entry *held;      /* the last attempt: the first lock found held */
  gboolean partial; /* the last attempt: part of the set was taken (and released) */
} SetAttempt;

/* The machine's RL_ACQUIRE_ATTEMPT for a set: one request per registry for all its
 * leases, reported to @acq. The leases of a whole set are recorded; those of a part are
 * released again. TRUE when that settled the acquisition (all recorded, or failed: with
 * @error, or without when the wait ran out during a request); FALSE: the machine goes
 * on with *@next. */
static gboolean
attempt_set (SetAttempt *a, RlAcquire *acq, RlAcquireAction *next, gboolean *ok, GError **error)
{
  g_autoptr (GError) local_error = NULL;
  RlAttemptReport report = { .result = RL_ATTEMPT_HELD, .pttl_ms = -1 };
  gboolean failed = FALSE;
  gint64 sent, request_deadline = 0;

  *ok = FALSE;
  a->held = NULL;
  a->partial = FALSE;
  for (guint i = 0; i < a->n_need; i++)
    if (!rl_registry_check (a->entries[a->need[i]].lock->registry, error))
      return TRUE;

  /* Notification numbers before the attempt: a release between the attempt and the
   * sleep is not missed. */
  for (guint i = 0; i < a->n_need; i++)
    {
      Entry *e = &a->entries[a->need[i]];
      RlLeases *leases = e->lock->registry->leases;

      e->seq = rl_lock_notify_seq (e->lock);
      e->serial = rl_leases_next_serial (leases);
      rl_leases_value (leases, e->serial, e->value);
      e->ttl_ms = RL_ATOMIC_GET (e->lock->registry->settings.expire_after_ms);
      a->items[i] = (RlLeaseItem) { .key = e->lock->key_data, .value = e->value,
                                    .fence_key = e->fence_key, .result = RL_LEASE_SKIPPED };
    }

  sent = g_get_monotonic_time ();
  for (guint g = 0; g < a->n_groups && !failed; g++)
    {
      Group *group = &a->groups[g];
      Entry *first = &a->entries[a->need[group->start]];
      RedisLockRegistry *registry = first->lock->registry;
      RlStore *store = registry->store;
      gboolean pubsub = rl_registry_pubsub (registry);

      for (guint i = group->start; i < group->end; i++)
        {
          Entry *e = &a->entries[a->need[i]];

          e->notify
              = rl_registry_notify_state (registry, e->lock->key_data, pubsub, acq->need_watch);
        }
      request_deadline
          = rl_request_deadline (registry, acq->deadline, a->bounded, g_get_monotonic_time ());
      if (!store->vt->acquire_many (store, group->end - group->start, a->items + group->start,
                                    first->ttl_ms, request_deadline, rl_acquire_contended (acq),
                                    &local_error))
        failed = TRUE;
    }

  for (guint g = 0; g < a->n_groups; g++)
    for (guint i = a->groups[g].start; i < a->groups[g].end; i++)
      {
        Entry *e = &a->entries[a->need[i]];
        RedisLockRegistry *registry = e->lock->registry;

        if (a->items[i].result == RL_LEASE_OK)
          a->partial = TRUE;
        else if (a->items[i].result == RL_LEASE_HELD && a->held == NULL)
          {
            a->held = e;
            report.pttl_ms = a->items[i].pttl_ms;
            report.notify = e->notify;
            report.seq = e->seq;
            report.spin_ms = RL_ATOMIC_GET (registry->settings.idle_between_tries_ms);
            RL_ATOMIC_ADD (registry->stats.contended_attempts, 1);
          }
        else if (a->items[i].result == RL_LEASE_ERROR)
          /* It may have reached the store and taken the key after all. */
          rl_leases_add_doubtful (registry->leases, e->lock->key_data, e->value, e->ttl_ms);
      }
  if (!failed && a->held == NULL)
    {
      report.result = RL_ATTEMPT_TAKEN;
      rl_acquire_attempted (acq, &report, g_get_monotonic_time ());
      *ok = record_taken (a->entries, a->need, a->n_need, a->items, sent, error);
      return TRUE;
    }

  release_taken (a->entries, a->need, a->items, a->groups, a->n_groups);
  if (failed)
    {
      report.result = RL_ATTEMPT_FAILED;
      rl_acquire_attempted (acq, &report, g_get_monotonic_time ());
      if (rl_request_ran_out (request_deadline, sent, acq->deadline, local_error))
        rl_debug ("acquiring %u locks: the wait ended during the request: %s", a->n_need,
                 local_error->message);
      else
        g_propagate_error (error, g_steal_pointer (&local_error));
      return TRUE;
    }
  *next = rl_acquire_attempted (acq, &report, g_get_monotonic_time ());
  return FALSE;
}

/* The machine's RL_ACQUIRE_WATCH for a set: confirms the notifications of every key
 * of the set whose registry waits for them (on a Cluster, each key's shard
 * subscription), as long as the machine allows and the connect timeout of the
 * registry of the lock found held at most. Each key's first watch joins its waiters,
 * which set_attempt_leave() leaves: the set waits under one subscription per key, for
 * whichever of them its next attempt finds held, and they end with the call. */
static RlAcquireAction
watch_set (SetAttempt *a, RlAcquire *acq)
{
  RedisLockRegistry *held = a->held->lock->registry;
  gint64 end = g_get_monotonic_time ()
               + 1000 * MIN (acq->watch_ms, RL_ATOMIC_GET (held->store_ctx.connect_timeout_ms));
  gboolean up = TRUE;

  for (guint i = 0; i < a->n_need; i++)
    {
      Entry *e = &a->entries[a->need[i]];
      RedisLockRegistry *registry = e->lock->registry;
      gint64 left_ms = MAX ((end - g_get_monotonic_time ()) / 1000, 0);

      if (!rl_registry_pubsub (registry))
        continue;
      up = rl_store_watch (registry->store, e->lock->key_data, !e->joined, left_ms) && up;
      e->joined = TRUE;
    }
  return rl_acquire_watched (acq, up);
}

/* The set's acquisition ends: it leaves the waiters of each key it joined. */
static void
set_attempt_leave (SetAttempt *a)
{
  for (guint i = 0; i < a->n_need; i++)
    {
      Entry *e = &a->entries[a->need[i]];

      if (e->joined)
        rl_store_unwatch (e->lock->registry->store, e->lock->key_data);
      e->joined = FALSE;
    }
}
G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC (SetAttempt, set_attempt_leave)

/* Takes the leases of the entries that need one, with every local mutex of the set
 * owned: the acquisition machine, driven by this thread, over the whole set, sleeping
 * on the first lock an attempt found held. TRUE when all are taken and recorded; FALSE
 * with @error on failure, without on timeout, and then none is held. */
static gboolean
acquire_leases_waiting (Entry *entries, guint m, gint64 deadline, gboolean bounded,
                        GCancellable *cancellable, RlWaiting *waiting, GError **error)
{
  g_autofree guint *need = g_new0 (guint, m);
  g_autofree Group *groups = g_new0 (Group, m);
  g_autofree RlLeaseItem *items = g_new0 (RlLeaseItem, m);
  g_auto (SetAttempt) a = { .entries = entries, .need = need, .groups = groups,
                            .items = items, .bounded = bounded };
  RlAcquireAction action;
  g_auto (RlAcquire) acq = { 0 };
  guint16 seq;
  gboolean ok;

  for (guint i = 0; i < m; i++)
    if (entries[i].local == RL_LOCAL_NEEDS_LEASE)
      {
        if (a.n_groups == 0
            || entries[need[a.n_need - 1]].lock->registry != entries[i].lock->registry)
          groups[a.n_groups++].start = a.n_need;
        need[a.n_need++] = i;
        groups[a.n_groups - 1].end = a.n_need;
      }
  if (a.n_need == 0)
    return TRUE;

  /* A set never yields: the yield policy is about one lock taken again and again. */
  rl_acquire_init (&acq, entries[need[0]].lock->key_data, deadline, 0);
  rl_acquire_check_at (&acq, waiting->check_at);
  action = rl_acquire_step (&acq, g_get_monotonic_time (), 0);
  for (;;)
    switch (action)
      {
      case RL_ACQUIRE_ATTEMPT:
        if (attempt_set (&a, &acq, &action, &ok, error))
          return ok;
        break;
      case RL_ACQUIRE_WATCH:
        action = watch_set (&a, &acq);
        break;
      case RL_ACQUIRE_SLEEP:
        if (a.partial)
          {
            /* Part of the set was ours for a moment: someone else may have taken the
             * rest at the same time and be about to retry too. */
            gint64 jitter_us = g_random_int_range (
                0, 1000 * MIN (1 << MIN (acq.attempts - 1, 5), RL_MULTI_JITTER_MAX_MS) + 1);
            a.partial = FALSE;
            g_usleep ((gulong) MAX (MIN (jitter_us, deadline - acq.held_at), 0));
            if (rl_lock_wait_error (a.held->lock, cancellable, error))
              return FALSE;
          }
        seq = rl_lock_sleep (a.held->lock, &acq, cancellable);
        if (rl_lock_wait_error (a.held->lock, cancellable, error))
          return FALSE;
        action = rl_acquire_step (&acq, g_get_monotonic_time (), seq);
        break;
      case RL_ACQUIRE_CHECK:
        /* The set waits for the first lock its last attempt found held. */
        rl_waiting_retarget (waiting, a.held->lock);
        if (!rl_waiting_check (waiting, error))
          return FALSE;
        action = rl_acquire_checked (&acq, waiting->check_at, g_get_monotonic_time (),
                                     rl_lock_notify_seq (a.held->lock));
        break;
      case RL_ACQUIRE_DONE:
      default:
        return FALSE;
      }
}

/* acquire_leases_waiting(), its wait recorded and checked for cycles as a blocking
 * lock's is (waits.h). */
static gboolean
acquire_leases (Entry *entries, guint m, gint64 deadline, gboolean bounded,
                GCancellable *cancellable, GError **error)
{
  RlWaiting waiting;
  gboolean ok;

  rl_waiting_begin (&waiting, entries[0].lock, deadline, bounded);
  ok = acquire_leases_waiting (entries, m, deadline, bounded, cancellable, &waiting, error);
  rl_waiting_end (&waiting);
  return ok;
}

/* Try lock all ------------------------------------------------------------------ */

gboolean
redis_lock_try_lock_all (RedisLock *const *locks, guint n, gint64 wait_ms,
                         GCancellable *cancellable, GError **error)
{
  g_autofree RedisLock **set = NULL;
  g_autofree Entry *entries = NULL;
  WakeSet wake = { NULL, 0 };
  gulong handler = 0;
  gint64 deadline;
  gboolean ok = TRUE;
  guint m, taken = 0;

  g_return_val_if_fail (locks != NULL, FALSE);
  g_return_val_if_fail (n > 0, FALSE);
  for (guint i = 0; i < n; i++)
    g_return_val_if_fail (locks[i] != NULL, FALSE);
  g_return_val_if_fail (cancellable == NULL || G_IS_CANCELLABLE (cancellable), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  set = canonical_set (locks, n, &m);
  entries = g_new0 (Entry, m);
  for (guint i = 0; i < m; i++)
    entries[i].lock = set[i];
  for (guint i = 0; ok && i < m; i++)
    ok = rl_registry_check (set[i]->registry, error)
         && rl_lock_fence_key (set[i], &entries[i].fence_key, error);
  if (ok && g_cancellable_set_error_if_cancelled (cancellable, error))
    ok = FALSE;
  if (!ok)
    goto out;

  deadline = wait_ms < 0 ? RL_FOREVER : rl_deadline_after (g_get_monotonic_time (), wait_ms);
  wake.entries = entries;
  g_atomic_int_set (&wake.m, (gint) m);
  if (cancellable != NULL && wait_ms != 0)
    handler = g_cancellable_connect (cancellable, G_CALLBACK (on_cancelled), &wake, NULL);

  /* The local mutexes, in the canonical order. */
  for (; taken < m; taken++)
    {
      entries[taken].local = rl_lock_take_local (set[taken], deadline, cancellable, error);
      if (entries[taken].local == RL_LOCAL_FAILED)
        break;
    }
  /* Then the leases. */
  ok = taken == m && acquire_leases (entries, m, deadline, wait_ms != 0, cancellable, error);
  g_cancellable_disconnect (cancellable, handler);
  if (!ok)
    for (guint i = taken; i > 0; i--)
      rl_lock_give_back_local (set[i - 1], entries[i - 1].local);
  for (guint i = 0; i < m; i++)
    RL_ATOMIC_SET (set[i]->last_used, g_get_monotonic_time ());

out:
  for (guint i = 0; i < m; i++)
    g_free (entries[i].fence_key);
  return ok;
}

/* Unlock all -------------------------------------------------------------------- */

/* The outermost unlock of a lock that releases its lease in a shared request. */
typedef struct
{
  RedisLock *lock;
  RlLeaseView view;
  guint max;
  gboolean lost;
  char value[RL_LEASE_VALUE_MAX];
} Release;

static void
keep_first (GError **first, GError *error)
{
  if (error == NULL)
    return;
  if (*first == NULL)
    *first = error;
  else
    g_error_free (error);
}

/* Releases the leases of @batch, all of one registry, in one request. */
static void
release_batch (GArray *batch, GError **first)
{
  RlStore *store;
  g_autofree RlLeaseItem *items = NULL;
  g_autoptr (GError) store_error = NULL;
  g_autofree guint *sent = NULL;
  guint k = 0;
  gint64 start;

  if (batch->len == 0)
    return;
  if (batch->len == 1)
    {
      /* One lease alone takes the single unlock's path (and its plan). */
      GError *error = NULL;
      rl_lock_unlock_outermost (g_array_index (batch, Release, 0).lock, &error);
      keep_first (first, error);
      return;
    }
  store = g_array_index (batch, Release, 0).lock->registry->store;
  items = g_new0 (RlLeaseItem, batch->len);
  sent = g_new0 (guint, batch->len);
  for (guint i = 0; i < batch->len; i++)
    {
      Release *r = &g_array_index (batch, Release, i);
      GError *error = NULL;

      if (!rl_lock_release_begin (r->lock, &r->view, r->max, r->value, &r->lost, &error))
        {
          keep_first (first, error);
          continue;
        }
      items[k].key = r->lock->key_data;
      items[k].value = r->value;
      sent[k++] = i;
    }
  if (k == 0)
    return;
  start = g_get_monotonic_time ();
  store->vt->release_many (store, k, items, &store_error);
  for (guint j = 0; j < k; j++)
    {
      Release *r = &g_array_index (batch, Release, sent[j]);
      GError *error = NULL;
      GError *item_error = NULL;

      if (items[j].result == RL_LEASE_ERROR)
        item_error = store_error != NULL
                         ? g_error_copy (store_error)
                         : g_error_new_literal (REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION,
                                                "The release did not complete");
      rl_lock_release_end (r->lock, &r->view, r->max, r->value, r->lost, items[j].result,
                           items[j].others, start, item_error, &error);
      keep_first (first, error);
    }
}

gboolean
redis_lock_unlock_all (RedisLock *const *locks, guint n, GError **error)
{
  g_autofree RedisLock **set = NULL;
  g_autoptr (GArray) batch = g_array_new (FALSE, FALSE, sizeof (Release));
  GError *first = NULL;
  guint m;

  g_return_val_if_fail (locks != NULL, FALSE);
  g_return_val_if_fail (n > 0, FALSE);
  for (guint i = 0; i < n; i++)
    g_return_val_if_fail (locks[i] != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  set = canonical_set (locks, n, &m);
  for (guint i = m; i > 0; i--)
    {
      RedisLock *lock = set[i - 1];
      GError *local_error = NULL;
      Release r = { .lock = lock };

      /* Another registry: the leases gathered so far go first. */
      if (batch->len > 0 && g_array_index (batch, Release, 0).lock->registry != lock->registry)
        {
          release_batch (batch, &first);
          g_array_set_size (batch, 0);
        }
      switch (rl_lock_unlock_local (lock, &local_error))
        {
        case RL_UNLOCK_OUTERMOST:
          if (rl_lock_plans_release (lock, &r.view, &r.max))
            g_array_append_val (batch, r);
          else
            rl_lock_unlock_outermost (lock, &local_error);
          break;
        case RL_UNLOCK_INNER:
        case RL_UNLOCK_FAILED:
        default:
          break;
        }
      keep_first (&first, local_error);
    }
  release_batch (batch, &first);

  if (first != NULL)
    {
      g_propagate_error (error, first);
      return FALSE;
    }
  return TRUE;
}
