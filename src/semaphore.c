/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* semaphore.c: the counting semaphore of the lock family, whose permits are leases.
 *
 * A semaphore NAME of N permits is the key `registry_key:{NAME}:sem`, which holds its
 * size, and N permit keys `registry_key:{NAME}:sem:I`, each a plain lease (store.h,
 * "semaphores"). Taking a permit is one request that checks the size and takes the
 * first free permit (the store's semaphore_acquire); everything after that is a plain
 * lease's life: each permit taken is carried by a RedisLock object of its own (made
 * with rl_lock_new(), never cached, member RL_MEMBER_PERMIT) that the lease table
 * records as it records a lock's lease, so the watchdog renews it in its batch, audits
 * check it after a restart, and a loss is marked and reported (state, cancellable, the
 * callback with NULL) without a line of lease code here. Releasing it is the store's
 * plain compare-and-delete, whose notification (on the permit's key) the registry
 * turns into a wake-up of the semaphore's waiters.
 *
 * There is no local level: threads of one process contend in the store as processes
 * do, each permit being its own lease (sharing one among threads would make a permit
 * count differently here than elsewhere). Waiting is the acquisition machine of
 * acquire.c with an attempt of its own (rl_semaphore_attempt_step(), which
 * semaphore-async.c drives from a main context too); its sleeps are on the
 * cached lock object of the semaphore's key (the anchor), whose notification number
 * the registry bumps when any permit is released, and which close wakes. Holding a
 * reference to the anchor keeps it cached and keeps the registry alive.
 */
#include "config.h"

#include <string.h>

#include "async-once.h"
#include "internal.h"
#include "key-index.h"
#include "semaphore.h"

struct _RedisSemaphore
{
  gint ref_count; /* atomic */
  RedisLock *anchor; /* a user reference to the cached lock of the semaphore's key */
  char *name;
  guint permits;
  guint next; /* atomic: where the next attempt starts looking for a free permit */
  gint hint;  /* atomic: 1 + the permit this process gave back last, which the next
                 attempt names to the store as probably free (0: none) */
  gint64 verified_until; /* atomic, monotonic µs: until then the size stands checked, and
                            an attempt that names a permit needs no check (semaphore.h) */
};

struct _RedisPermit
{
  gint ref_count; /* atomic: the holder's, and a binding's copies */
  RedisSemaphore *semaphore;
  RedisLock *lease; /* the permit's lease carrier (not cached, RL_MEMBER_PERMIT) */
  guint index;
  gint released; /* atomic: redis_permit_release() was called */
};

/* The semaphore's key, `registry_key:{NAME}:sem`. */
static inline const char *
semaphore_key (RedisSemaphore *semaphore)
{
  return semaphore->anchor->key_data;
}

static inline RedisLockRegistry *
semaphore_registry (RedisSemaphore *semaphore)
{
  return semaphore->anchor->registry;
}

/* Obtain -------------------------------------------------------------------------- */

/* A semaphore's name leaves room for `{`, `}:sem` and a permit's index in a key name. */
#define RL_SEMAPHORE_NAME_MAX (REDIS_LOCK_NAME_MAX - 24)

static gboolean
check_semaphore_args (RedisLockRegistry *registry, const char *name, guint permits,
                      GError **error)
{
  gsize len = name != NULL ? strlen (name) : 0;

  if (len == 0 || len > RL_SEMAPHORE_NAME_MAX || strpbrk (name, "{}") != NULL)
    {
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID,
                   "A semaphore name must be 1 to %d bytes long without “{” or “}” (got %s)",
                   RL_SEMAPHORE_NAME_MAX,
                   name == NULL ? "NULL" : len == 0 ? "an empty name"
                                         : len > RL_SEMAPHORE_NAME_MAX ? "a longer one"
                                                                       : "a brace");
      return FALSE;
    }
  if (permits < 1 || permits > RL_SEMAPHORE_MAX_PERMITS)
    {
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID,
                   "Semaphore “%s” must have 1 to %d permits (got %u)", name,
                   RL_SEMAPHORE_MAX_PERMITS, permits);
      return FALSE;
    }
  if (registry->store->vt->semaphore_acquire == NULL)
    {
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID,
                   "Semaphore “%s”: semaphores are not available on a quorum registry "
                   "(permits counted on independent servers do not add up to one count)",
                   name);
      return FALSE;
    }
  return TRUE;
}

RedisSemaphore *
redis_lock_registry_obtain_semaphore (RedisLockRegistry *registry, const char *name,
                                      guint permits, GError **error)
{
  g_autofree char *anchor_name = NULL;
  RedisSemaphore *semaphore;
  RedisLock *anchor;

  g_return_val_if_fail (registry != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (!rl_registry_check (registry, error) || !check_semaphore_args (registry, name, permits, error))
    return NULL;
  anchor_name = g_strconcat ("{", name, "}:sem", NULL);
  anchor = redis_lock_registry_obtain (registry, anchor_name, error);
  if (anchor == NULL)
    return NULL;
  semaphore = g_new0 (RedisSemaphore, 1);
  semaphore->ref_count = 1;
  semaphore->anchor = anchor;
  semaphore->name = g_strdup (name);
  semaphore->permits = permits;
  /* Processes start looking at different permits, so that they rarely meet on one. */
  semaphore->next = g_random_int ();
  return semaphore;
}

RedisSemaphore *
redis_semaphore_ref (RedisSemaphore *semaphore)
{
  g_return_val_if_fail (semaphore != NULL, NULL);
  g_atomic_int_inc (&semaphore->ref_count);
  return semaphore;
}

void
redis_semaphore_unref (RedisSemaphore *semaphore)
{
  if (semaphore == NULL || !g_atomic_int_dec_and_test (&semaphore->ref_count))
    return;
  redis_lock_unref (semaphore->anchor);
  g_free (semaphore->name);
  g_free (semaphore);
}

const char *
redis_semaphore_get_name (RedisSemaphore *semaphore)
{
  g_return_val_if_fail (semaphore != NULL, NULL);
  return semaphore->name;
}

guint
redis_semaphore_get_permits (RedisSemaphore *semaphore)
{
  g_return_val_if_fail (semaphore != NULL, 0);
  return semaphore->permits;
}

/* Permits ------------------------------------------------------------------------ */

static RedisPermit *
permit_new (RedisSemaphore *semaphore, RedisLock *lease, guint index)
{
  RedisPermit *permit = g_new0 (RedisPermit, 1);

  permit->ref_count = 1;
  permit->semaphore = redis_semaphore_ref (semaphore);
  permit->lease = lease;
  permit->index = index;
  return permit;
}

RedisPermit *
rl_permit_ref (RedisPermit *permit)
{
  g_atomic_int_inc (&permit->ref_count);
  return permit;
}

/* Gives the permit back to the store (once). FALSE with @error as
 * redis_permit_release() reports it. */
static gboolean
permit_give_back (RedisPermit *permit, GError **error)
{
  RedisLockRegistry *registry = semaphore_registry (permit->semaphore);
  g_autoptr (GError) local_error = NULL;
  char value[RL_LEASE_VALUE_MAX];
  RlLeaseView view;
  RlLeaseResult result;
  gboolean lost, others;

  if (rl_registry_is_forked (registry))
    return rl_registry_check (registry, error);
  view = rl_leases_view (registry->leases, permit->lease);
  if (!rl_leases_drop (registry->leases, permit->lease, &lost))
    {
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CLOSED,
                   "The lock registry was closed; it released permit %u of semaphore “%s”",
                   permit->index, permit->semaphore->name);
      return FALSE;
    }
  rl_leases_value (registry->leases, view.serial, value);
  result = rl_lock_release_store (permit->lease, value, lost, 0, &others, &local_error);
  if (result == RL_LEASE_ERROR)
    {
      /* Unknown, or not asked (found lost: LEASE_LOST below whatever the store would
       * say). It may still be there: released in the background until its TTL ends. */
      rl_leases_add_doubtful (registry->leases, permit->lease->key_data, value, view.ttl_ms);
      if (!lost)
        {
          g_propagate_error (error, g_steal_pointer (&local_error));
          return FALSE;
        }
    }
  if (result == RL_LEASE_OK)
    {
      RL_ATOMIC_ADD (registry->stats.releases, 1);
      g_atomic_int_set (&permit->semaphore->hint, (gint) permit->index + 1);
    }
  if (lost || result == RL_LEASE_LOST)
    {
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_LEASE_LOST,
                   "The lease of permit %u of semaphore “%s” was lost: the key expired or "
                   "belongs to another owner",
                   permit->index, permit->semaphore->name);
      return FALSE;
    }
  return TRUE;
}

void
rl_permit_unref (RedisPermit *permit)
{
  if (permit == NULL || !g_atomic_int_dec_and_test (&permit->ref_count))
    return;
  if (g_atomic_int_compare_and_exchange (&permit->released, FALSE, TRUE))
    {
      /* Dropped without a release (a binding's last copy): given back all the same. */
      g_autoptr (GError) error = NULL;
      if (!permit_give_back (permit, &error))
        rl_debug ("releasing permit %u of semaphore “%s”: %s", permit->index,
                 permit->semaphore->name, error->message);
    }
  rl_lock_unref_memory (permit->lease);
  redis_semaphore_unref (permit->semaphore);
  g_free (permit);
}

gboolean
redis_permit_release (RedisPermit *permit, GError **error)
{
  gboolean ok;

  g_return_val_if_fail (permit != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);
  g_return_val_if_fail (!g_atomic_int_get (&permit->released), FALSE);

  g_atomic_int_set (&permit->released, TRUE);
  ok = permit_give_back (permit, error);
  rl_permit_unref (permit);
  return ok;
}

void
redis_permit_free (RedisPermit *permit)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *name = NULL;
  guint index;

  if (permit == NULL)
    return;
  name = g_strdup (permit->semaphore->name);
  index = permit->index;
  if (!redis_permit_release (permit, &error))
    g_warning ("Releasing permit %u of semaphore “%s”: %s", index, name, error->message);
}

static gboolean
release_job (gpointer data, GError **error)
{
  return permit_give_back (data, error);
}

void
redis_permit_release_async (RedisPermit *permit, GCancellable *cancellable,
                            GAsyncReadyCallback callback, gpointer user_data)
{
  g_autoptr (GTask) task = NULL;

  g_return_if_fail (permit != NULL);
  g_return_if_fail (cancellable == NULL || G_IS_CANCELLABLE (cancellable));
  g_return_if_fail (g_atomic_int_compare_and_exchange (&permit->released, FALSE, TRUE));

  task = g_task_new (NULL, cancellable, callback, user_data);
  g_task_set_source_tag (task, redis_permit_release_async);
  /* The permit is given back whatever @cancellable says (it was handed over): the
   * outcome is the release's. */
  g_task_set_check_cancellable (task, FALSE);
  rl_async_once (permit->lease, release_job, permit, (GDestroyNotify) rl_permit_unref, task);
}

gboolean
redis_permit_release_finish (GAsyncResult *result, GError **error)
{
  g_return_val_if_fail (g_task_is_valid (result, NULL), FALSE);
  g_return_val_if_fail (g_task_get_source_tag (G_TASK (result)) == redis_permit_release_async,
                        FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);
  return g_task_propagate_boolean (G_TASK (result), error);
}

gboolean
redis_permit_is_lease_lost (RedisPermit *permit)
{
  g_return_val_if_fail (permit != NULL, FALSE);
  return rl_leases_is_lost (semaphore_registry (permit->semaphore)->leases, permit->lease);
}

GCancellable *
redis_permit_get_lease_cancellable (RedisPermit *permit)
{
  g_return_val_if_fail (permit != NULL, NULL);
  return rl_leases_get_cancellable (semaphore_registry (permit->semaphore)->leases,
                                    permit->lease);
}

const char *
redis_permit_get_key (RedisPermit *permit)
{
  g_return_val_if_fail (permit != NULL, NULL);
  return permit->lease->key_data;
}

char *
redis_permit_dup_lease_value (RedisPermit *permit)
{
  RlLeases *leases;
  char value[RL_LEASE_VALUE_MAX];
  RlLeaseView view;

  g_return_val_if_fail (permit != NULL, NULL);
  leases = semaphore_registry (permit->semaphore)->leases;
  view = rl_leases_view (leases, permit->lease);
  if (!view.held)
    return NULL;
  rl_leases_value (leases, view.serial, value);
  return g_strdup (value);
}

guint
redis_permit_get_index (RedisPermit *permit)
{
  g_return_val_if_fail (permit != NULL, 0);
  return permit->index;
}

/* Acquisition --------------------------------------------------------------------- */

/* Where an attempt made at @now starts looking for a free permit (store.h: @start % N):
 * while the size stands checked (semaphore.h), the permit this process gave back last,
 * taken from the hint so that two attempts do not both name it, as an index below N,
 * which tells a Redis store to try that one alone without the size check
 * (redis-semaphore.c); otherwise one further than the last attempt, as N + I, which
 * asks for the full check and the search from I. */
static guint
attempt_start (RedisSemaphore *semaphore, gint64 now)
{
  guint hint;

  if (now < RL_ATOMIC_GET (semaphore->verified_until)
      && (hint = (guint) g_atomic_int_exchange (&semaphore->hint, 0)) > 0
      && hint <= semaphore->permits)
    return hint - 1;
  return semaphore->permits + (guint) g_atomic_int_add (&semaphore->next, 1) % semaphore->permits;
}

/* An attempt with the value @value failed without a verdict (no answer, or one that
 * came too late): it may have taken a permit all the same, and which one is not known
 * here. Each permit it could have taken is released in the background, by value, as a
 * lock's doubtful acquisition is (rl_leases_add_doubtful(): a compare-and-delete of
 * this attempt's value, which touches no other hold), so that it comes back as soon
 * as the store answers again instead of at the end of its TTL. */
static void
release_doubtful_permits (RedisSemaphore *semaphore, const char *value, gint64 ttl_ms)
{
  RlLeases *leases = semaphore_registry (semaphore)->leases;

  for (guint i = 0; i < semaphore->permits; i++)
    {
      char key_buf[160];
      g_autofree char *key_heap = NULL;
      const char *key
          = rl_key_index (key_buf, sizeof key_buf, &key_heap, semaphore_key (semaphore), i);

      rl_leases_add_doubtful (leases, key, value, ttl_ms);
    }
}

/* One request for a permit of @semaphore. Returns OK (*permit: taken, its lease in the
 * table), HELD (*pttl_ms: the smallest remaining TTL among the permits, -1 when
 * unknown) or ERROR: with @error, or without when the wait ran out during the request
 * (not acquired in time). */
static RlLeaseResult
attempt_permit (RedisSemaphore *semaphore, gint64 deadline, gboolean bounded, gint64 ttl_ms,
                RedisPermit **permit, gint64 *pttl_ms, GError **error)
{
  RedisLockRegistry *registry = semaphore_registry (semaphore);
  RlStore *store = registry->store;
  RlLeases *leases = registry->leases;
  guint64 serial = rl_leases_next_serial (leases);
  g_autoptr (GError) local_error = NULL;
  char value[RL_LEASE_VALUE_MAX];
  char name_buf[128];
  g_autofree char *name_heap = NULL;
  RedisLock *lease;
  gint64 sent, request_deadline;
  guint slot = 0, start;
  RlLeaseResult result;

  *pttl_ms = -1;
  rl_leases_value (leases, serial, value);
  sent = g_get_monotonic_time ();
  request_deadline = rl_request_deadline (registry, deadline, bounded, sent);
  start = attempt_start (semaphore, sent);
  result = store->vt->semaphore_acquire (store, semaphore_key (semaphore), semaphore->permits,
                                         start, value, ttl_ms, request_deadline, &slot, pttl_ms,
                                         &local_error);
  if (result == RL_LEASE_ERROR
      && !g_error_matches (local_error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID))
    release_doubtful_permits (semaphore, value, ttl_ms);
  if (result != RL_LEASE_OK)
    return rl_attempt_not_taken (registry, result, "a permit of ", semaphore_key (semaphore),
                                 request_deadline, sent, deadline, &local_error, error);
  RL_ATOMIC_ADD (registry->stats.acquisitions, 1);
  if (start >= semaphore->permits)
    RL_ATOMIC_SET (semaphore->verified_until, sent + RL_SEMAPHORE_VERIFIED_MS * 1000);
  /* The permit's lease is named `{NAME}:sem:SLOT`, after the anchor's `{NAME}:sem`. */
  lease = rl_lock_new (registry, rl_key_index (name_buf, sizeof name_buf, &name_heap,
                                               rl_lock_name (semaphore->anchor), slot));
  lease->member = RL_MEMBER_PERMIT;
  if (!rl_leases_take (leases, lease, serial, ttl_ms, sent, 0))
    {
      rl_lock_release_after_close (lease, value, error);
      rl_lock_unref_memory (lease);
      return RL_LEASE_ERROR;
    }
  *permit = permit_new (semaphore, lease, slot);
  return RL_LEASE_OK;
}

RlAcquireAction
rl_semaphore_attempt_step (RedisSemaphore *semaphore, RlAcquire *acq, gboolean pubsub,
                           gboolean bounded, gint64 ttl_ms, RedisPermit **permit,
                           GError **error)
{
  RlAttemptReport report
      = rl_attempt_report_begin (semaphore_registry (semaphore), semaphore->anchor, pubsub, acq);

  report.result = rl_attempt_result_of (
      attempt_permit (semaphore, acq->deadline, bounded, ttl_ms, permit, &report.pttl_ms, error));
  return rl_acquire_attempted (acq, &report, g_get_monotonic_time ());
}

gboolean
rl_semaphore_begin (RedisSemaphore *semaphore, GCancellable *cancellable, GError **error)
{
  if (!rl_registry_check (semaphore_registry (semaphore), error))
    return FALSE;
  return !g_cancellable_set_error_if_cancelled (cancellable, error);
}

RedisLock *
rl_semaphore_anchor (RedisSemaphore *semaphore)
{
  return semaphore->anchor;
}

static void
on_cancelled (GCancellable *cancellable, gpointer data)
{
  rl_lock_wake_all (data);
}

RedisPermit *
redis_semaphore_try_acquire_for (RedisSemaphore *semaphore, gint64 wait_ms,
                                 GCancellable *cancellable, GError **error)
{
  RedisLockRegistry *registry;
  RedisPermit *permit = NULL;
  RlAcquireAction action;
  g_auto (RlAcquire) acq = { 0 };
  gboolean pubsub;
  gint64 ttl_ms;
  gulong handler = 0;
  guint16 seq;

  g_return_val_if_fail (semaphore != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (!rl_semaphore_begin (semaphore, cancellable, error))
    return NULL;
  registry = semaphore_registry (semaphore);
  pubsub = rl_registry_pubsub (registry);
  ttl_ms = RL_ATOMIC_GET (registry->settings.expire_after_ms);
  rl_acquire_init (&acq, semaphore_key (semaphore),
                   wait_ms < 0 ? RL_FOREVER : rl_deadline_after (g_get_monotonic_time (), wait_ms),
                   0);
  if (cancellable != NULL && wait_ms != 0)
    handler = g_cancellable_connect (cancellable, G_CALLBACK (on_cancelled), semaphore->anchor,
                                     NULL);
  action = rl_acquire_step (&acq, g_get_monotonic_time (), 0);
  while (action != RL_ACQUIRE_DONE)
    switch (action)
      {
      case RL_ACQUIRE_ATTEMPT:
        action = rl_semaphore_attempt_step (semaphore, &acq, pubsub, wait_ms != 0, ttl_ms,
                                            &permit, error);
        break;
      case RL_ACQUIRE_WATCH:
        action = rl_registry_watch (registry, &acq, TRUE);
        break;
      case RL_ACQUIRE_SLEEP:
      default:
        seq = rl_lock_sleep (semaphore->anchor, &acq, cancellable);
        if (rl_lock_wait_error (semaphore->anchor, cancellable, error))
          action = RL_ACQUIRE_DONE;
        else
          action = rl_acquire_step (&acq, g_get_monotonic_time (), seq);
        break;
      }
  g_cancellable_disconnect (cancellable, handler);
  return permit;
}

guint
redis_semaphore_get_available (RedisSemaphore *semaphore, GError **error)
{
  RedisLockRegistry *registry;
  guint available = 0;

  g_return_val_if_fail (semaphore != NULL, 0);
  g_return_val_if_fail (error == NULL || *error == NULL, 0);

  registry = semaphore_registry (semaphore);
  if (!rl_registry_check (registry, error))
    return 0;
  if (!registry->store->vt->semaphore_available (registry->store, semaphore_key (semaphore),
                                                 semaphore->permits, &available, error))
    return 0;
  return available;
}
