/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* lease.c: tests of a lease's identity and of what its holder is told at the edges.
 *
 * Each acquisition in Redis stores a value of its own (the registry's client id, ":",
 * a number), so that a request reaching the store late can never act on a later hold;
 * the tests here check that, and the rest of what must hold when things go wrong
 * around a hold: close() while leases are held, a lease-lost callback that takes a
 * reference or replaces itself, a server that is down, paused or restarted, a Redis
 * user without permission on the notification channel, and durations so large that
 * microsecond arithmetic would overflow (those two in lease-limits.c), and what a forced
 * unlock may delete and how a lease heard forced open is kept from the next local thread
 * (lease-forced.c). They run on both stores where the behaviour
 * is the store's (`/redis/...`, `/memory/...`) and on Redis only where a server fault
 * is the subject. Late replies themselves are made by the fault-injection proxy
 * (tests/proxy.h) in `/redis/lease/late-*`.
 */
#include <string.h>

#include "common.h"
#include "proxy.h"

/* lease-limits.c: the channel permission and overflow tests. */
void lease_add_limit_tests (void);
/* lease-forced.c: the forced unlock's refusals and hand-offs. */
void lease_add_forced_tests (void);

/* ---- values ---- */

static void
test_value_per_acquisition (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLock) lock = NULL;
  g_autofree char *first = NULL, *again = NULL, *second = NULL, *stored = NULL;
  g_autofree char *key = test_lock_key ("unique");

  g_test_summary ("Each acquisition stores a value of its own: the client id, ':' and a "
                  "number; re-entry keeps it, a new acquisition gets another");
  TEST_SKIP_IF_NO_STORE (fx);

  lock = test_obtain (fx->registry, "unique");
  g_assert_null (redis_lock_dup_lease_value (lock));
  test_lock_ok (lock);
  first = redis_lock_dup_lease_value (lock);
  test_assert_value_of (first, fx->registry);
  stored = test_store_get_owner (fx, key);
  g_assert_cmpstr (stored, ==, first);
  test_lock_ok (lock);
  again = redis_lock_dup_lease_value (lock);
  g_assert_cmpstr (again, ==, first);
  test_unlock_ok (lock);
  test_unlock_ok (lock);

  test_lock_ok (lock);
  second = redis_lock_dup_lease_value (lock);
  test_assert_value_of (second, fx->registry);
  g_assert_cmpstr (second, !=, first);
  test_unlock_ok (lock);
}

/* ---- the lease-lost callback ---- */

typedef struct
{
  TestSync sync;
  gboolean in_callback;
  gboolean gate;
  gboolean done;
  RedisLock *ref; /* taken in the callback */
} RefInCallback;

static void
ref_in_callback (RedisLock *lock, gpointer data)
{
  RefInCallback *t = data;

  test_sync_lock (&t->sync);
  t->in_callback = TRUE;
  test_sync_broadcast (&t->sync);
  while (!t->gate)
    test_sync_wait (&t->sync);
  test_sync_unlock (&t->sync);
  t->ref = redis_lock_ref (lock);
  test_sync_lock (&t->sync);
  t->done = TRUE;
  test_sync_broadcast (&t->sync);
  test_sync_unlock (&t->sync);
}

static void
test_callback_ref_keeps_lock_cached (TestFixture *fx, gconstpointer data)
{
  RedisLockRegistry *r;
  RedisLock *lock, *again;
  RefInCallback t = { 0 };
  g_autoptr (GError) error = NULL;

  g_test_summary ("A lock whose lease-lost callback is due or running stays in the cache: "
                  "after its holder unlocked and dropped its reference, expiring unused "
                  "locks does not drop it, and a reference the callback takes is to the one "
                  "object obtain() returns for the name");
  TEST_SKIP_IF_NO_STORE (fx);

  test_sync_init (&t.sync);
  r = fx->registry;
  redis_lock_registry_set_lease_lost_callback (r, ref_in_callback, &t, NULL);
  lock = test_obtain (r, "uaf");
  test_lock_ok (lock);
  g_assert_true (test_store_delete (fx, redis_lock_get_key (lock)));
  g_assert_false (redis_lock_registry_renew (r, "uaf", 0, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_LEASE_LOST);
  g_assert_true (test_sync_wait_flag (&t.sync, &t.in_callback, 5000));

  test_unlock_lease_lost (lock);
  redis_lock_unref (lock);
  g_assert_cmpuint (redis_lock_registry_expire_unused_older_than (r, -1), ==, 0);
  g_assert_cmpuint (redis_lock_registry_get_cache_size (r), ==, 1);

  test_sync_lock (&t.sync);
  t.gate = TRUE;
  test_sync_broadcast (&t.sync);
  test_sync_unlock (&t.sync);
  g_assert_true (test_sync_wait_flag (&t.sync, &t.done, 5000));

  again = test_obtain (r, "uaf");
  g_assert_true (again == t.ref);
  g_assert_true (again == lock);
  redis_lock_unref (again);
  redis_lock_unref (t.ref);
  redis_lock_registry_set_lease_lost_callback (r, NULL, NULL, NULL);
  test_sync_clear (&t.sync);
}

typedef struct
{
  RedisLockRegistry *registry;
  TestLeaseLost *next;
  gint calls;             /* atomic */
  gint destroyed;         /* atomic */
  gint destroyed_in_call; /* atomic: destroy ran before the call returned */
  gint in_call;           /* atomic */
} Replacer;

static void
replacing_callback (RedisLock *lock, gpointer data)
{
  Replacer *p = data;

  g_atomic_int_set (&p->in_call, 1);
  redis_lock_registry_set_lease_lost_callback (p->registry, test_lease_lost_cb, p->next, NULL);
  if (g_atomic_int_get (&p->destroyed))
    g_atomic_int_set (&p->destroyed_in_call, 1);
  g_atomic_int_set (&p->in_call, 0);
  g_atomic_int_inc (&p->calls);
}

static void
replacer_destroy (gpointer data)
{
  Replacer *p = data;

  if (g_atomic_int_get (&p->in_call))
    g_atomic_int_set (&p->destroyed_in_call, 1);
  g_atomic_int_inc (&p->destroyed);
}

/* Takes @name, has its key deleted behind its back and finds the loss by renew. */
static void
lose_lease (TestFixture *fx, RedisLock *lock)
{
  g_autoptr (GError) error = NULL;

  test_lock_ok (lock);
  g_assert_true (test_store_delete (fx, redis_lock_get_key (lock)));
  g_assert_false (redis_lock_registry_renew (fx->registry, redis_lock_get_name (lock), 0, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_LEASE_LOST);
}

static void
test_callback_replaces_itself (TestFixture *fx, gconstpointer data)
{
  TestLeaseLost next;
  Replacer p = { 0 };
  g_autoptr (RedisLock) a = NULL;
  g_autoptr (RedisLock) b = NULL;

  g_test_summary ("A lease-lost callback may replace the callback from inside itself: no "
                  "deadlock, its destroy notify runs after the call returns, the next loss "
                  "goes to the new callback, and close() does not hang");
  TEST_SKIP_IF_NO_STORE (fx);

  test_lease_lost_init (&next);
  p.registry = fx->registry;
  p.next = &next;
  redis_lock_registry_set_lease_lost_callback (fx->registry, replacing_callback, &p,
                                               replacer_destroy);
  a = test_obtain (fx->registry, "first");
  b = test_obtain (fx->registry, "second");

  lose_lease (fx, a);
  TEST_WAIT_UNTIL (g_atomic_int_get (&p.calls) == 1, 5000);
  TEST_WAIT_UNTIL (g_atomic_int_get (&p.destroyed) == 1, 5000);
  g_assert_cmpint (g_atomic_int_get (&p.destroyed_in_call), ==, 0);
  test_unlock_lease_lost (a);

  lose_lease (fx, b);
  g_assert_cmpuint (test_lease_lost_wait (&next, 5000), ==, 1);
  g_assert_cmpint (g_atomic_int_get (&p.calls), ==, 1);
  test_unlock_lease_lost (b);

  redis_lock_registry_close (fx->registry);
  redis_lock_registry_set_lease_lost_callback (fx->registry, NULL, NULL, NULL);
  test_lease_lost_clear (&next);
}

/* ---- close ---- */

static void
test_close_tells_holders (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (GCancellable) cancellable = NULL;
  g_autoptr (GError) error = NULL;
  TestLeaseLost ll;

  g_test_summary ("close() with a lease held releases it and tells the holder as for a lost "
                  "lease: is_lease_lost() is TRUE and the lease cancellable cancelled, with no "
                  "callback; the holder's unlock then fails with CLOSED");
  TEST_SKIP_IF_NO_STORE (fx);

  test_lease_lost_init (&ll);
  redis_lock_registry_set_lease_lost_callback (fx->registry, test_lease_lost_cb, &ll, NULL);
  lock = test_obtain (fx->registry, "closing");
  test_lock_ok (lock);
  cancellable = g_object_ref (redis_lock_get_lease_cancellable (lock));
  g_assert_false (g_cancellable_is_cancelled (cancellable));

  redis_lock_registry_close (fx->registry);
  g_assert_true (g_cancellable_is_cancelled (cancellable));
  g_assert_true (redis_lock_is_lease_lost (lock));
  test_assert_free (fx, "closing");
  g_assert_false (redis_lock_unlock (lock, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CLOSED);
  g_assert_false (redis_lock_is_held_by_current_thread (lock));
  g_assert_cmpuint (test_lease_lost_calls (&ll), ==, 0);
  redis_lock_registry_set_lease_lost_callback (fx->registry, NULL, NULL, NULL);
  test_lease_lost_clear (&ll);
}

/* ---- outages ---- */

/* Another registry on the fixture's server with lease TTL @ttl_ms, reporting losses
 * to @ll, holding the lock @name. */
static RedisLockRegistry *
watched_holder (TestFixture *fx, gint64 ttl_ms, TestLeaseLost *ll, const char *name,
                RedisLock **lock)
{
  RedisLockRegistry *r = test_registry_new (fx);

  test_lease_lost_init (ll);
  redis_lock_registry_set_expire_after_ms (r, ttl_ms);
  redis_lock_registry_set_lease_lost_callback (r, test_lease_lost_cb, ll, NULL);
  *lock = test_obtain (r, name);
  test_lock_ok (*lock);
  return r;
}

/* The end of a watched_holder() whose lease was lost: the unlock says so. */
static void
watched_holder_end (RedisLockRegistry *r, RedisLock *lock, TestLeaseLost *ll)
{
  test_unlock_lease_lost (lock);
  redis_lock_registry_set_lease_lost_callback (r, NULL, NULL, NULL);
  redis_lock_unref (lock);
  redis_lock_registry_unref (r);
  test_lease_lost_clear (ll);
}

static void
test_outage_backoff (TestFixture *fx, gconstpointer data)
{
  RedisLockRegistry *r;
  RedisLock *lock;
  g_autoptr (GError) error = NULL;
  TestLeaseLost ll;
  guint64 ticks;

  g_test_summary ("While the server is down, the watchdog retries a failed batch with a "
                  "backoff (100 ms doubling to 1 s) instead of at once: a handful of attempts "
                  "until the lease counts as lost, not thousands");
  TEST_SKIP_IF_NO_SERVER (fx);

  r = watched_holder (fx, 3000, &ll, "outage", &lock);
  redis_lock_test_server_stop (fx->server);
  ticks = test_stats (r).watchdog_ticks;
  /* The loss is due 2.85 s after the last renewal; the first renewal is due at 1 s. */
  g_assert_cmpuint (test_lease_lost_wait (&ll, 6000), ==, 1);
  ticks = test_stats (r).watchdog_ticks - ticks;
  g_test_message ("%" G_GUINT64_FORMAT " renewal batches during the outage", ticks);
  g_assert_cmpuint (ticks, >=, 1);
  g_assert_cmpuint (ticks, <=, 15);

  g_assert_true (redis_lock_test_server_start (fx->server, &error));
  g_assert_no_error (error);
  watched_holder_end (r, lock, &ll);
}

static void
test_restart_audits_leases (TestFixture *fx, gconstpointer data)
{
  RedisLockRegistry *r;
  RedisLock *lock;
  g_autoptr (RedisLock) busy = NULL;
  g_autoptr (RedisLock) mine = NULL;
  g_autoptr (GError) error = NULL;
  TestLeaseLost ll;
  gint64 t0;

  g_test_summary ("When the server restarts empty, the registry's notification connection "
                  "breaks and comes back, and the watchdog checks every held lease at once: a "
                  "30 s lease is reported lost within seconds, not at the next tick (10 s)");
  TEST_SKIP_IF_NO_SERVER (fx);

  r = watched_holder (fx, 30000, &ll, "restarted", &lock);
  /* One wait, so that the registry subscribes to notifications. */
  busy = test_obtain (fx->registry, "busy");
  test_lock_ok (busy);
  mine = test_obtain (r, "busy");
  g_assert_false (redis_lock_try_lock_for (mine, 50, NULL, &error));
  g_assert_no_error (error);
  test_unlock_ok (busy);

  redis_lock_test_server_stop (fx->server);
  t0 = test_now_ms ();
  g_assert_true (redis_lock_test_server_start (fx->server, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (test_lease_lost_wait (&ll, 7000), ==, 1);
  g_test_message ("loss reported %" G_GINT64_FORMAT " ms after the restart", ll.at_ms - t0);
  g_clear_pointer (&mine, redis_lock_unref);
  watched_holder_end (r, lock, &ll);
}

/* For test_wait_until(): the registry @data checked its leases after a reset. */
typedef struct
{
  RedisLockRegistry *registry;
  guint64 before;
} AuditWait;

static gboolean
audited (gpointer data)
{
  AuditWait *w = data;
  return test_stats (w->registry).audits > w->before;
}

static void
test_restart_without_waiter (TestFixture *fx, gconstpointer data)
{
  RedisLockRegistry *r;
  RedisLock *lock;
  g_autoptr (GError) error = NULL;
  TestLeaseLost ll;
  gint64 t0;

  g_test_summary ("A registry that holds a lease and never waited for one (so no waiter ever "
                  "asked for notifications) still hears of a restart of its server: the "
                  "holder of a 30 s lease is told within 3 s that the restarted server lost it, "
                  "not at the next watchdog tick (10 s)");
  TEST_SKIP_IF_NO_SERVER (fx);

  r = watched_holder (fx, 30000, &ll, "restarted", &lock);
  redis_lock_test_server_stop (fx->server);
  t0 = test_now_ms ();
  g_assert_true (redis_lock_test_server_start (fx->server, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (test_lease_lost_wait (&ll, 3000), ==, 1);
  g_test_message ("loss reported %" G_GINT64_FORMAT " ms after the restart", ll.at_ms - t0);
  g_assert_true (redis_lock_is_lease_lost (lock));
  g_assert_cmpuint (test_stats (r).audits, >=, 1);
  watched_holder_end (r, lock, &ll);
}

static void
test_restart_no_handoff (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) a = test_registry_new (fx);
  g_autoptr (RedisLockRegistry) b = test_registry_new (fx);
  g_autoptr (RedisLock) held = test_obtain (a, "job");
  g_autoptr (RedisLock) other = test_obtain (b, "job");
  g_autoptr (GError) error = NULL;
  TestTaker t2 = { 0 };
  AuditWait w = { a, 0 };
  GThread *thread;

  g_test_summary ("T1 holds a lock and T2 of the same registry waits for it in memory; the "
                  "server restarts empty and another registry takes the lock: T1's unlock "
                  "fails LEASE_LOST instead of handing the vanished lease to T2, and T2 holds "
                  "the lock only once it took it afresh, never while the other registry does");
  TEST_SKIP_IF_NO_SERVER (fx);

  redis_lock_registry_set_expire_after_ms (a, 30000);
  test_lock_ok (held);
  t2.fixture = fx;
  thread = test_taker_start (&t2, held, 20000);
  g_assert_true (test_wait_until (test_taker_started, &t2, 5000));
  g_assert_true (test_wait_thread_blocked (t2.tid, 5000));

  w.before = test_stats (a).audits;
  redis_lock_test_server_stop (fx->server);
  g_assert_true (redis_lock_test_server_start (fx->server, &error));
  g_assert_no_error (error);
  /* The fixture's own connection went with the old server. */
  redisFree (fx->redis);
  fx->redis = test_redis_connect (fx->server);
  g_assert_true (test_wait_until (audited, &w, 5000));
  g_assert_true (redis_lock_try_lock_for (other, 5000, NULL, &error));
  g_assert_no_error (error);

  g_assert_false (redis_lock_unlock (held, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_LEASE_LOST);
  g_clear_error (&error);
  g_assert_false (test_taker_done (&t2));
  test_assert_held_by (fx, "job", b, 60000);
  test_unlock_ok (other);
  test_taker_join (&t2, thread, 10000);
  g_assert_no_error (t2.error);
  g_assert_true (t2.result);
  g_assert_true (test_value_is_of (t2.value_while_held, a));
  test_taker_clear (&t2);
}

static void
test_outage_no_handoff (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) a = test_registry_new (fx);
  g_autoptr (RedisLock) held = test_obtain (a, "job");
  g_autoptr (GError) error = NULL;
  TestTaker t2 = { 0 };
  AuditWait w = { a, 0 };
  GThread *thread;

  g_test_summary ("Once the registry saw its connection break, a lease it has not confirmed "
                  "since is not handed to a waiting thread unchecked: with the server down, "
                  "T1's unlock fails and T2 does not get the lock (it may be gone with a "
                  "restart)");
  TEST_SKIP_IF_NO_SERVER (fx);

  redis_lock_registry_set_expire_after_ms (a, 30000);
  test_lock_ok (held);
  thread = test_taker_start (&t2, held, 20000);
  g_assert_true (test_wait_until (test_taker_started, &t2, 5000));
  g_assert_true (test_wait_thread_blocked (t2.tid, 5000));

  w.before = test_stats (a).audits;
  redis_lock_test_server_stop (fx->server);
  g_assert_true (test_wait_until (audited, &w, 5000));
  g_assert_false (redis_lock_unlock (held, &error));
  g_assert_nonnull (error);
  g_test_message ("unlock: %s", error->message);
  g_clear_error (&error);
  test_taker_join (&t2, thread, 25000);
  g_assert_false (t2.result);
  g_assert_true (redis_lock_test_server_start (fx->server, &error));
  g_assert_no_error (error);
  test_taker_clear (&t2);
}

static void
test_force_unlock (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) holder = test_registry_new (fx);
  g_autoptr (RedisLockRegistry) waiter = test_registry_new (fx);
  g_autoptr (RedisLock) held = test_obtain (holder, "crashed");
  g_autoptr (RedisLock) wanted = test_obtain (waiter, "crashed");
  g_autoptr (GCancellable) cancellable = NULL;
  g_autoptr (GError) error = NULL;
  TestTaker taker = { 0 };
  TestLeaseLost ll;
  GThread *thread;
  gint64 t0;

  g_test_summary ("redis_lock_registry_force_unlock() deletes a key whoever holds it and "
                  "notifies: a waiter of another registry (polling once a minute) gets the "
                  "lock at once, and the holder (60 s lease, watchdog tick at 20 s) is told "
                  "within a second: callback, cancellable, is_lease_lost, unlock LEASE_LOST");
  TEST_SKIP_IF_NO_STORE (fx);

  test_lease_lost_init (&ll);
  redis_lock_registry_set_lease_lost_callback (holder, test_lease_lost_cb, &ll, NULL);
  redis_lock_registry_set_idle_between_tries_ms (waiter, 60000);
  test_lock_ok (held);
  /* The holder hears forced releases once its subscriber is up (on every node). */
  if (fx->store != TEST_STORE_MEMORY)
    TEST_WAIT_UNTIL (test_stats (holder).subscriber_connections >= test_store_nodes (fx), 10000);
  cancellable = g_object_ref (redis_lock_get_lease_cancellable (held));
  thread = test_taker_start (&taker, wanted, 20000);
  g_assert_true (test_wait_contended (waiter, 1, 10000));

  t0 = test_now_ms ();
  g_assert_true (redis_lock_registry_force_unlock (fx->registry, "crashed", &error));
  g_assert_no_error (error);
  test_taker_join (&taker, thread, 15000);
  g_assert_no_error (taker.error);
  g_assert_true (taker.result);
  g_test_message ("the waiter got the lock %" G_GINT64_FORMAT " ms after the forced unlock",
                  taker.returned_ms - t0);
  g_assert_cmpint (taker.returned_ms - t0, <, 1000);

  g_assert_cmpuint (test_lease_lost_wait (&ll, 3000), ==, 1);
  g_test_message ("the holder was told %" G_GINT64_FORMAT " ms after the forced unlock",
                  ll.at_ms - t0);
  g_assert_true (g_cancellable_is_cancelled (cancellable));
  g_assert_true (redis_lock_is_lease_lost (held));
  test_unlock_lease_lost (held);
  redis_lock_registry_set_lease_lost_callback (holder, NULL, NULL, NULL);
  test_lease_lost_clear (&ll);
  test_taker_clear (&taker);
}

static void
test_force_unlock_free (TestFixture *fx, gconstpointer data)
{
  g_autoptr (GError) error = NULL;

  g_test_summary ("force_unlock of a free lock returns FALSE without an error; a bad name is "
                  "INVALID; after close it is CLOSED");
  TEST_SKIP_IF_NO_STORE (fx);

  g_assert_false (redis_lock_registry_force_unlock (fx->registry, "free", &error));
  g_assert_no_error (error);
  g_assert_false (redis_lock_registry_force_unlock (fx->registry, "", &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID);
  g_clear_error (&error);
  redis_lock_registry_close (fx->registry);
  g_assert_false (redis_lock_registry_force_unlock (fx->registry, "free", &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CLOSED);
}

static void
test_paused_server_deadline (TestFixture *fx, gconstpointer data)
{
  RedisLockRegistry *r;
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (GError) error = NULL;
  gint64 t0, elapsed;
  gboolean ok;

  g_test_summary ("try_lock_for (100 ms) against a paused server fails with CONNECTION within "
                  "its wait, not after the 3 s command timeout; if its SET reaches the "
                  "server after all, the key is released in the background");
  TEST_SKIP_IF_NO_SERVER (fx);

  r = test_registry_new (fx);
  lock = test_obtain (r, "slow");
  test_lock_ok (lock);
  test_unlock_ok (lock);

  redis_lock_test_server_pause (fx->server);
  t0 = test_now_ms ();
  ok = redis_lock_try_lock_for (lock, 100, NULL, &error);
  elapsed = test_now_ms () - t0;
  redis_lock_test_server_resume (fx->server);
  g_test_message ("try_lock_for (100) took %" G_GINT64_FORMAT " ms", elapsed);
  g_assert_false (ok);
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION);
  g_clear_error (&error);
  g_assert_cmpint (elapsed, <, 1000);
  TEST_WAIT_UNTIL (!test_store_exists (fx, redis_lock_get_key (lock)), 5000);

  /* The lock works again at once. */
  g_assert_true (redis_lock_try_lock_for (lock, 1000, NULL, &error));
  g_assert_no_error (error);
  test_unlock_ok (lock);
  g_clear_pointer (&lock, redis_lock_unref);
  redis_lock_registry_unref (r);
}

static void
test_paused_server_lost_unlock (TestFixture *fx, gconstpointer data)
{
  RedisLockRegistry *r;
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (RedisSemaphore) semaphore = NULL;
  g_autoptr (RedisRWLock) rw = NULL;
  g_autoptr (GError) error = NULL;
  RedisPermit *permit;
  gint64 t0, took[3];
  gboolean ok[3];
  GError *errors[3] = { NULL, NULL, NULL };

  g_test_summary ("The unlock of a lease found lost while the server is paused reports "
                  "LEASE_LOST at once, not after the 5 s command timeout, for a lock, a "
                  "semaphore's permit and a read-write lock's writer: the lease is lost "
                  "whatever the store would say, so the unlock does not wait for it");
  TEST_SKIP_IF_NO_SERVER (fx);

  r = test_registry_new (fx);
  redis_lock_registry_set_expire_after_ms (r, 1000);
  redis_lock_registry_set_command_timeout_ms (r, 5000);
  lock = test_obtain (r, "lost-while-paused");
  test_lock_ok (lock);
  semaphore = redis_lock_registry_obtain_semaphore (r, "lost-while-paused-sem", 1, &error);
  g_assert_no_error (error);
  permit = redis_semaphore_try_acquire_for (semaphore, 5000, NULL, &error);
  g_assert_no_error (error);
  g_assert_nonnull (permit);
  rw = redis_lock_registry_obtain_rw (r, "lost-while-paused-rw", &error);
  g_assert_no_error (error);
  g_assert_true (redis_rw_lock_try_write_lock_for (rw, 5000, NULL, &error));
  g_assert_no_error (error);

  redis_lock_test_server_pause (fx->server);
  TEST_WAIT_UNTIL (redis_lock_is_lease_lost (lock) && redis_permit_is_lease_lost (permit)
                       && redis_rw_lock_is_lease_lost (rw),
                   10000);
  t0 = test_now_ms ();
  ok[0] = redis_lock_unlock (lock, &errors[0]);
  took[0] = test_now_ms () - t0;
  t0 = test_now_ms ();
  ok[1] = redis_permit_release (permit, &errors[1]);
  took[1] = test_now_ms () - t0;
  t0 = test_now_ms ();
  ok[2] = redis_rw_lock_write_unlock (rw, &errors[2]);
  took[2] = test_now_ms () - t0;
  redis_lock_test_server_resume (fx->server);
  for (guint i = 0; i < 3; i++)
    {
      g_test_message ("unlock %u took %" G_GINT64_FORMAT " ms", i, took[i]);
      g_assert_false (ok[i]);
      g_assert_error (errors[i], REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_LEASE_LOST);
      g_clear_error (&errors[i]);
      g_assert_cmpint (took[i], <, 2000);
    }
  g_assert_false (redis_lock_is_acquired_in_this_process (lock));

  /* Each works again at once. */
  g_assert_true (redis_lock_try_lock_for (lock, 5000, NULL, &error));
  g_assert_no_error (error);
  test_unlock_ok (lock);
  permit = redis_semaphore_try_acquire_for (semaphore, 5000, NULL, &error);
  g_assert_no_error (error);
  g_assert_true (redis_permit_release (permit, &error));
  g_assert_no_error (error);
  g_assert_true (redis_rw_lock_try_write_lock_for (rw, 5000, NULL, &error));
  g_assert_no_error (error);
  g_assert_true (redis_rw_lock_write_unlock (rw, &error));
  g_assert_no_error (error);
  g_clear_pointer (&lock, redis_lock_unref);
  g_clear_pointer (&semaphore, redis_semaphore_unref);
  g_clear_pointer (&rw, redis_rw_lock_unref);
  redis_lock_registry_unref (r);
}

/* ---- late requests ---- */

static void
test_late_release (TestFixture *fx, gconstpointer data)
{
  g_autoptr (TestProxy) proxy = NULL;
  g_autoptr (RedisLockRegistry) r = NULL;
  g_autoptr (RedisLockRegistry) other = NULL;
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (RedisLock) theirs = NULL;
  g_autoptr (GError) error = NULL;
  g_autofree char *first = NULL, *second = NULL, *stored = NULL;
  g_autofree char *key = test_lock_key ("late");
  long long calls;

  g_test_summary ("A release that reaches Redis after its unlock gave up (command timeout) "
                  "cannot delete the registry's next hold of the lock: each hold has its own "
                  "value, so the late compare-and-delete finds another value and leaves it");
  TEST_SKIP_IF_NO_SERVER (fx);

  proxy = test_proxy_new_unix (redis_lock_test_server_get_socket_path (fx->server));
  r = redis_lock_registry_new (test_proxy_get_url (proxy), TEST_REGISTRY_KEY, &error);
  g_assert_no_error (error);
  redis_lock_registry_set_command_timeout_ms (r, 300);
  lock = test_obtain (r, "late");
  test_lock_ok (lock);
  first = redis_lock_dup_lease_value (lock);

  /* The release (the only request naming the notification channel) is held on its way
   * to the server; the unlock gives up after its command timeout. */
  test_proxy_hold_requests (proxy, TEST_REGISTRY_KEY "-channel:");
  g_assert_false (redis_lock_unlock (lock, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION);
  g_clear_error (&error);
  g_assert_true (test_proxy_wait_held (proxy, 1000));
  g_assert_false (redis_lock_is_held_by_current_thread (lock));

  /* The same registry takes the lock again. */
  g_assert_true (redis_lock_try_lock_for (lock, 10000, NULL, &error));
  g_assert_no_error (error);
  second = redis_lock_dup_lease_value (lock);
  g_assert_cmpstr (second, !=, first);

  /* Now the first release reaches the server. */
  calls = test_redis_command_calls (fx->redis, "evalsha");
  test_proxy_release_held (proxy);
  TEST_WAIT_UNTIL (test_redis_command_calls (fx->redis, "evalsha") > calls, 5000);

  stored = test_store_get_owner (fx, key);
  g_assert_cmpstr (stored, ==, second);
  other = test_registry_new (fx);
  theirs = test_obtain (other, "late");
  g_assert_false (redis_lock_try_lock (theirs, &error));
  g_assert_no_error (error);
  test_unlock_ok (lock);
  test_assert_free (fx, "late");
}

/* ---- renewals one at a time ---- */

typedef struct
{
  RedisLockRegistry *registry;
  const char *name;
  gint tid;  /* atomic */
  gint done; /* atomic */
  gboolean ok;
  GError *error;
} Renewer;

static gpointer
renewer_main (gpointer data)
{
  Renewer *rn = data;

  g_atomic_int_set (&rn->tid, test_thread_id ());
  rn->ok = redis_lock_registry_renew (rn->registry, rn->name, 60000, &rn->error);
  g_atomic_int_set (&rn->done, 1);
  return NULL;
}

static void
test_renew_after_batch_in_flight (TestFixture *fx, gconstpointer data)
{
  g_autoptr (TestProxy) proxy = NULL;
  g_autoptr (RedisLockRegistry) r = NULL;
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (GError) error = NULL;
  g_autofree char *key = test_lock_key ("inflight");
  Renewer rn = { 0 };
  guint64 renewals;
  GThread *thread;

  g_test_summary ("A watchdog batch still in flight with the old TTL cannot land after a "
                  "user's renew (60 s) and shorten the key behind the registry's back: "
                  "renewals of a registry go one at a time, so the key ends with the TTL the "
                  "registry records");
  TEST_SKIP_IF_NO_SERVER (fx);

  proxy = test_proxy_new_unix (redis_lock_test_server_get_socket_path (fx->server));
  r = redis_lock_registry_new (test_proxy_get_url (proxy), TEST_REGISTRY_KEY, &error);
  g_assert_no_error (error);
  redis_lock_registry_set_expire_after_ms (r, 3000);
  lock = test_obtain (r, "inflight");
  test_lock_ok (lock);
  renewals = test_stats (r).renewals;

  /* The watchdog's batch (TTL 3000, due after 1 s) is held on its way to the server. */
  test_proxy_hold_requests (proxy, "$4\r\n3000\r\n");
  g_assert_true (test_proxy_wait_held (proxy, 5000));

  rn.registry = r;
  rn.name = "inflight";
  thread = g_thread_new ("renewer", renewer_main, &rn);
  TEST_WAIT_UNTIL (g_atomic_int_get (&rn.tid) != 0, 5000);
  /* Either the renew waits for the batch, or (without one renewal at a time) it is
   * done already. */
  TEST_WAIT_UNTIL (g_atomic_int_get (&rn.done)
                       || test_wait_thread_blocked (g_atomic_int_get (&rn.tid), 10),
                   5000);
  test_proxy_release_held (proxy);
  g_thread_join (thread);
  g_assert_no_error (rn.error);
  g_assert_true (rn.ok);
  /* The batch has landed too (its renewal is counted). */
  TEST_WAIT_UNTIL (test_stats (r).renewals >= renewals + 2, 5000);
  g_test_message ("PTTL after both renewals: %" G_GINT64_FORMAT " ms",
                  test_store_get_pttl (fx, key));
  g_assert_cmpint (test_store_get_pttl (fx, key), >, 30000);
  test_unlock_ok (lock);
}

static void
test_renew_reply_on_next_hold (TestFixture *fx, gconstpointer data)
{
  g_autoptr (TestProxy) proxy = NULL;
  g_autoptr (RedisLockRegistry) r = NULL;
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (GError) error = NULL;
  g_autofree char *key = test_lock_key ("gen");
  Renewer rn = { 0 };
  GThread *thread;

  g_test_summary ("The answer to a renew (60 s) that arrives after its hold ended and a new "
                  "hold with a 1 s TTL began counts for nothing: the registry keeps renewing "
                  "the new hold at its own TTL, so its key does not expire under the holder");
  TEST_SKIP_IF_NO_SERVER (fx);

  proxy = test_proxy_new_unix (redis_lock_test_server_get_socket_path (fx->server));
  r = redis_lock_registry_new (test_proxy_get_url (proxy), TEST_REGISTRY_KEY, &error);
  g_assert_no_error (error);
  lock = test_obtain (r, "gen");
  test_lock_ok (lock);

  /* The renew takes effect in Redis; its answer is held back. */
  test_proxy_hold_replies (proxy, "$5\r\n60000\r\n");
  rn.registry = r;
  rn.name = "gen";
  thread = g_thread_new ("renewer", renewer_main, &rn);
  g_assert_true (test_proxy_wait_held (proxy, 5000));

  /* The hold ends and a new one with a 1 s TTL begins. */
  test_unlock_ok (lock);
  g_assert_true (redis_lock_try_lock_full (lock, 0, 1000, NULL, &error));
  g_assert_no_error (error);

  test_proxy_release_held (proxy);
  g_thread_join (thread);
  g_clear_error (&rn.error);

  /* Time is the subject: the new lease must be renewed at its own TTL. */
  g_usleep (2500 * 1000);
  g_assert_cmpint (test_store_get_pttl (fx, key), >, 0);
  g_assert_false (redis_lock_is_lease_lost (lock));
  test_unlock_ok (lock);
}

static void
test_stale_pool_release (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) a = test_registry_new (fx);
  g_autoptr (RedisLock) held = test_obtain (a, "stale");
  g_autofree char *key = NULL;
  redisReply *reply;

  g_test_summary ("A connection that the server closed while it sat idle in the pool is "
                  "dropped before a request goes out on it, not found broken after: with the "
                  "registry's data connections killed and the key deleted behind the holder, "
                  "the unlock says LEASE_LOST (its release ran once, on a live connection) "
                  "rather than CONNECTION (sent twice, outcome in doubt)");
  TEST_SKIP_IF_NO_SERVER (fx);

  test_lock_ok (held);
  key = g_strdup (redis_lock_get_key (held));
  /* Every normal connection but the fixture's: the registry's pooled data connections
   * (its subscriber is a pubsub connection and stays). The server closes them before it
   * answers, so the pooled sockets have seen the close by the time DEL is answered. */
  reply = test_redis_command (fx->redis, "CLIENT KILL TYPE normal SKIPME yes");
  g_assert_cmpint (reply->type, ==, REDIS_REPLY_INTEGER);
  g_assert_cmpint (reply->integer, >=, 1);
  freeReplyObject (reply);
  reply = test_redis_command (fx->redis, "DEL %s", key);
  g_assert_cmpint (reply->integer, ==, 1);
  freeReplyObject (reply);

  test_unlock_lease_lost (held);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);

  test_add_stores ("/lease/value/per-acquisition", NULL, test_value_per_acquisition);
  test_add_stores ("/lease/callback/ref-keeps-lock-cached", NULL,
                   test_callback_ref_keeps_lock_cached);
  test_add_stores ("/lease/callback/replaces-itself", NULL, test_callback_replaces_itself);
  test_add_stores ("/lease/close/tells-holders", NULL, test_close_tells_holders);
  test_add_redis ("/lease/outage/watchdog-backs-off", NULL, test_outage_backoff);
  test_add_redis ("/lease/outage/restart-audits-leases", NULL, test_restart_audits_leases);
  test_add_redis ("/lease/outage/restart-without-waiter", NULL, test_restart_without_waiter);
  test_add_redis ("/lease/outage/restart-no-handoff", NULL, test_restart_no_handoff);
  test_add_redis ("/lease/outage/outage-no-handoff", NULL, test_outage_no_handoff);
  test_add_redis ("/lease/outage/stale-pool-release", NULL, test_stale_pool_release);
  test_add_redis ("/lease/deadline/paused-server", NULL, test_paused_server_deadline);
  test_add_redis ("/lease/deadline/paused-server-lost-unlock", NULL,
                  test_paused_server_lost_unlock);
  test_add_redis ("/lease/renew/after-batch-in-flight", NULL, test_renew_after_batch_in_flight);
  test_add_redis ("/lease/late-release/cannot-delete-next-hold", NULL, test_late_release);
  test_add_redis ("/lease/renew/reply-on-next-hold", NULL, test_renew_reply_on_next_hold);
  test_add_stores ("/lease/force-unlock/wakes-waiter-tells-holder", NULL, test_force_unlock);
  test_add_stores ("/lease/force-unlock/free-or-invalid", NULL, test_force_unlock_free);
  lease_add_limit_tests ();
  lease_add_forced_tests ();
  return g_test_run ();
}
