/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* fork.c: tests of what a child process may do with its parent's registries.
 *
 * A registry's client id is what makes a key "ours" in Redis. A child made by fork()
 * inherits the id together with the parent's connections and local lock state, so if
 * it kept using the registry it could release or renew the parent's leases, or corrupt
 * the parent's connections mid-reply. The library therefore marks every registry as
 * forked in the child, and every call there fails with REDIS_LOCK_ERROR_FORKED, while
 * the parent goes on as if nothing happened: its leases, watchdog, subscription and
 * connections are untouched. A registry created in the child is a new owner and works.
 * The child of a multithreaded process may only do simple things, so each child here
 * runs its checks, never asserts, and reports the number of the first failed check as
 * its exit code (0: all passed); the parent waits for it with a bound.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <string.h>
#include <unistd.h>

#include "common.h"

#define REGISTRY_KEY TEST_REGISTRY_KEY
#define MINUTE_MS 60000
/* The lease TTL of the parent's registry. */
#define TTL_MS 1000

/* ---- small helpers ---- */

/* In a child: TRUE when a call returned FALSE/NULL with REDIS_LOCK_ERROR_FORKED. */
static gboolean
forked_error (gboolean ok, GError *error)
{
  gboolean matches = !ok && g_error_matches (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_FORKED);

  if (error != NULL)
    g_error_free (error);
  return matches;
}

/* @other holds @name in Redis; a thread of @r waits for it (PUBSUB, a minute between
 * SPIN tries), @other unlocks, and the waiter must get it within a second: the proof
 * that @r's subscription delivers notifications. */
static void
assert_handoff_by_notification (RedisLockRegistry *r, RedisLockRegistry *other, const char *name)
{
  RedisLock *mine = test_obtain (r, name);
  RedisLock *theirs = test_obtain (other, name);
  TestTaker w = { 0 };
  guint64 before;
  GThread *thread;
  gint64 t0;

  test_lock_ok (theirs);
  before = test_stats (r).contended_attempts;
  thread = test_taker_start (&w, mine, 10000);
  g_assert_true (test_wait_contended (r, before + 1, 10000));
  t0 = test_now_ms ();
  test_unlock_ok (theirs);
  g_thread_join (thread);
  g_assert_no_error (w.error);
  g_assert_true (w.result);
  g_assert_cmpint (w.returned_ms - t0, <, 1000);
  test_taker_clear (&w);
  redis_lock_unref (mine);
  redis_lock_unref (theirs);
}

/* ---- 1: a pre-fork registry refuses every call in the child ---- */

typedef struct
{
  RedisLockRegistry *registry;
  RedisLock *held; /* held by the forking thread */
  RedisLock *idle; /* obtained, not held */
} PreFork;

static int
child_uses_pre_fork_registry (gpointer data)
{
  PreFork *pf = data;
  GError *error = NULL;
  RedisLock *lock;
  gboolean ok;

  lock = redis_lock_registry_obtain (pf->registry, "child-new", &error);
  if (!forked_error (lock != NULL, error))
    return 1;
  error = NULL;
  lock = redis_lock_registry_obtain (pf->registry, "idle", &error);
  if (!forked_error (lock != NULL, error))
    return 2;
  error = NULL;
  ok = redis_lock_lock (pf->idle, &error);
  if (!forked_error (ok, error))
    return 3;
  error = NULL;
  ok = redis_lock_try_lock (pf->idle, &error);
  if (!forked_error (ok, error))
    return 4;
  error = NULL;
  ok = redis_lock_try_lock_for (pf->idle, 100, NULL, &error);
  if (!forked_error (ok, error))
    return 5;
  error = NULL;
  ok = redis_lock_try_lock_full (pf->idle, 0, 1000, NULL, &error);
  if (!forked_error (ok, error))
    return 6;
  /* The child's copy of the forking thread "holds" this lock; releasing it here would
   * delete the parent's key. */
  error = NULL;
  ok = redis_lock_unlock (pf->held, &error);
  if (!forked_error (ok, error))
    return 7;
  error = NULL;
  ok = redis_lock_unlock (pf->idle, &error);
  if (!forked_error (ok, error))
    return 8;
  error = NULL;
  ok = redis_lock_registry_renew (pf->registry, "held", 0, &error);
  if (!forked_error (ok, error))
    return 9;
  return 0;
}

static void
test_pre_fork_registry (TestFixture *fx, gconstpointer data)
{
  RedisLockRegistry *r = fx->registry;
  g_autoptr (RedisLockRegistry) other = NULL;
  PreFork pf;
  g_autoptr (RedisLock) fresh = NULL;

  g_test_summary ("In a child process, obtain, lock, try_lock, try_lock_for, try_lock_full, "
                  "unlock and renew on a registry made before fork () fail with "
                  "REDIS_LOCK_ERROR_FORKED and touch nothing; the parent keeps its lease "
                  "(held across the fork), its watchdog and its subscription, and its unlock "
                  "succeeds");
  TEST_SKIP_IF_NO_SERVER (fx);

  redis_lock_registry_set_expire_after_ms (r, TTL_MS);
  redis_lock_registry_set_idle_between_tries_ms (r, MINUTE_MS);
  other = test_registry_new (fx);
  /* Before the fork: subscriber and watchdog threads running, a lease held. */
  assert_handoff_by_notification (r, other, "before");
  pf.registry = r;
  pf.held = test_obtain (r, "held");
  pf.idle = test_obtain (r, "idle");
  test_lock_ok (pf.held);
  test_wait_full_tick (r);
  (void)redis_lock_error_quark ();

  test_run_child (child_uses_pre_fork_registry, &pf);

  /* The parent's lease was neither released nor disturbed, and is still renewed. */
  g_assert_true (redis_lock_is_held_by_current_thread (pf.held));
  test_assert_held_by (fx, "held", r, TTL_MS);
  test_wait_full_tick (r);
  g_usleep (1200 * 1000); /* time is the subject: longer than the 1 s TTL */
  test_assert_held_by (fx, "held", r, TTL_MS);
  g_assert_false (redis_lock_is_lease_lost (pf.held));

  /* Its subscription still delivers, its connections still work. */
  assert_handoff_by_notification (r, other, "after");
  test_unlock_ok (pf.held);
  test_assert_free (fx, "held");
  test_lock_ok (pf.idle);
  test_assert_held_by (fx, "idle", r, TTL_MS);
  test_unlock_ok (pf.idle);
  fresh = test_obtain (r, "fresh");
  test_lock_ok (fresh);
  test_unlock_ok (fresh);

  redis_lock_unref (pf.held);
  redis_lock_unref (pf.idle);
}

/* ---- 2: a registry made in the child works ---- */

typedef struct
{
  TestFixture *fx;
  RedisLockRegistry *parent;
} ChildNew;

static int
child_new_registry (gpointer data)
{
  ChildNew *cn = data;
  GError *error = NULL;
  RedisLockRegistry *r;
  RedisLock *mine, *theirs;
  redisContext *raw;
  char *value;
  char *pid_part;
  gint64 t0;
  gboolean ok;

  r = redis_lock_registry_new (redis_lock_test_server_get_url (cn->fx->server), REGISTRY_KEY,
                               &error);
  if (r == NULL)
    return 1;
  if (g_strcmp0 (redis_lock_registry_get_client_id (r),
                 redis_lock_registry_get_client_id (cn->parent))
      == 0)
    return 2;
  pid_part = g_strdup_printf (":%ld:", (long)getpid ());
  if (strstr (redis_lock_registry_get_client_id (r), pid_part) == NULL)
    return 3;
  g_free (pid_part);

  mine = redis_lock_registry_obtain (r, "child", &error);
  if (mine == NULL)
    return 4;
  if (!redis_lock_try_lock (mine, &error))
    return 5;
  raw = redisConnectUnix (redis_lock_test_server_get_socket_path (cn->fx->server));
  if (raw == NULL || raw->err)
    return 6;
  {
    redisReply *reply = redisCommand (raw, "GET %s", REGISTRY_KEY ":child");

    if (reply == NULL || reply->type != REDIS_REPLY_STRING)
      return 7;
    value = g_strndup (reply->str, reply->len);
    freeReplyObject (reply);
  }
  if (!test_value_is_of (value, r))
    return 8;
  g_free (value);

  /* The parent holds "held": the child's registry is another owner and is excluded. */
  theirs = redis_lock_registry_obtain (r, "held", &error);
  if (theirs == NULL)
    return 9;
  ok = redis_lock_try_lock (theirs, &error);
  if (ok || error != NULL)
    return 10;
  t0 = test_now_ms ();
  ok = redis_lock_try_lock_for (theirs, 300, NULL, &error);
  if (ok || error != NULL || test_now_ms () - t0 < 250)
    return 11;

  if (!redis_lock_unlock (mine, &error))
    return 12;
  {
    redisReply *reply = redisCommand (raw, "EXISTS %s", REGISTRY_KEY ":child");

    if (reply == NULL || reply->type != REDIS_REPLY_INTEGER || reply->integer != 0)
      return 13;
    freeReplyObject (reply);
  }
  redisFree (raw);
  redis_lock_unref (mine);
  redis_lock_unref (theirs);
  redis_lock_registry_close (r);
  redis_lock_registry_unref (r);
  return 0;
}

static void
test_child_new_registry (TestFixture *fx, gconstpointer data)
{
  RedisLockRegistry *r = fx->registry;
  g_autoptr (RedisLock) held = NULL;
  ChildNew cn = { fx, r };

  g_test_summary ("A registry created in the child process gets its own client id (with the "
                  "child's pid), takes and releases locks there, and is excluded by the "
                  "parent's leases");
  TEST_SKIP_IF_NO_SERVER (fx);
#ifdef __SANITIZE_THREAD__
  /* A registry that holds a lease starts its subscriber (it guards the lease against
   * restarts), and ThreadSanitizer cannot start threads in the child of a
   * multithreaded process: the plain and ASan builds run this test. */
  g_test_skip ("ThreadSanitizer cannot start threads in a forked child");
  return;
#endif

  redis_lock_registry_set_expire_after_ms (r, TTL_MS);
  held = test_obtain (r, "held");
  test_lock_ok (held);
  test_wait_full_tick (r);

  test_run_child (child_new_registry, &cn);

  test_assert_held_by (fx, "held", r, TTL_MS);
  test_assert_free (fx, "child");
  test_unlock_ok (held);
  test_assert_free (fx, "held");
}

/* ---- 3: closing a pre-fork registry in the child leaves the parent's leases ---- */

static int
child_closes_pre_fork_registry (gpointer data)
{
  RedisLockRegistry *r = data;
  GError *error = NULL;
  RedisLock *lock;

  redis_lock_registry_close (r);
  lock = redis_lock_registry_obtain (r, "after-close", &error);
  if (lock != NULL)
    return 1;
  if (!g_error_matches (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_FORKED)
      && !g_error_matches (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CLOSED))
    return 2;
  g_error_free (error);
  return 0;
}

static void
test_child_close (TestFixture *fx, gconstpointer data)
{
  RedisLockRegistry *r = fx->registry;
  g_autoptr (RedisLock) held = NULL;

  g_test_summary ("Closing a pre-fork registry in the child (as a cleanup path would) returns "
                  "promptly and releases none of the parent's leases");
  TEST_SKIP_IF_NO_SERVER (fx);

  redis_lock_registry_set_expire_after_ms (r, TTL_MS);
  held = test_obtain (r, "held");
  test_lock_ok (held);
  test_wait_full_tick (r);

  test_run_child (child_closes_pre_fork_registry, r);

  test_assert_held_by (fx, "held", r, TTL_MS);
  test_wait_full_tick (r);
  test_assert_held_by (fx, "held", r, TTL_MS);
  test_unlock_ok (held);
  test_assert_free (fx, "held");
}

/* ---- 4: a lock held by the forking thread is not held in the child ---- */

static void
never_called (RedisLock *lock, gpointer data)
{
}

typedef struct
{
  RedisLockRegistry *registry;
  RedisLock *lock;
} ChildHold;

static int
child_inherits_no_hold (gpointer data)
{
  ChildHold *ch = data;
  RedisLock *lock = ch->lock;
  RedisLockRegistry *r = ch->registry;

  /* The child's thread has the parent's GThread, but not its holds. */
  if (redis_lock_is_held_by_current_thread (lock))
    return 1;
  if (redis_lock_get_hold_count (lock) != 0)
    return 2;
  if (redis_lock_is_acquired_in_this_process (lock))
    return 3;
  if (redis_lock_get_lease_cancellable (lock) != NULL)
    return 4;
  if (redis_lock_is_lease_lost (lock))
    return 5;
  if (redis_lock_dup_lease_value (lock) != NULL)
    return 6;
  /* References, settings and the callback change nothing in the parent's registry and
   * take none of its mutexes (another thread may have held them at fork time). */
  if (redis_lock_ref (lock) != lock)
    return 7;
  redis_lock_registry_set_lease_lost_callback (r, never_called, NULL, NULL);
  redis_lock_registry_set_cache_capacity (r, 1);
  redis_lock_registry_set_watchdog (r, FALSE);
  if (redis_lock_registry_get_cache_size (r) != 0)
    return 8;
  return 0;
}

static void
test_child_no_hold (TestFixture *fx, gconstpointer data)
{
  RedisLockRegistry *r = fx->registry;
  g_autoptr (RedisLock) held = NULL;

  g_test_summary ("In a child forked by a thread that holds a lock, the lock's getters say "
                  "the child holds nothing (the child's thread has the parent's GThread), and "
                  "references, setters and the callback do nothing");
  TEST_SKIP_IF_NO_SERVER (fx);

  held = test_obtain (r, "parent-hold");
  test_lock_ok (held);
  {
    ChildHold ch = { r, held };
    test_run_child (child_inherits_no_hold, &ch);
  }
  g_assert_true (redis_lock_is_held_by_current_thread (held));
  test_unlock_ok (held);
  test_assert_free (fx, "parent-hold");
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);

#define ADD(path, func)                                                                            \
  g_test_add (path, TestFixture, NULL, test_fixture_setup, func, test_fixture_teardown)

  ADD ("/fork/child/pre-fork-registry-fails", test_pre_fork_registry);
  ADD ("/fork/child/new-registry-works", test_child_new_registry);
  ADD ("/fork/child/close-keeps-parent-leases", test_child_close);
  ADD ("/fork/child/no-hold-no-mutex", test_child_no_hold);

#undef ADD
  return g_test_run ();
}
