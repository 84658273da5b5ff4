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
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

#define REGISTRY_KEY TEST_REGISTRY_KEY
#define MINUTE_MS 60000

/* ---- small helpers ---- */

/* Re-evaluates @expr every millisecond until it holds or @timeout_ms pass, then asserts it. */
#define WAIT_UNTIL(expr, timeout_ms)                                                               \
  G_STMT_START                                                                                     \
  {                                                                                                \
    gint64 wait_until_deadline_ = g_get_monotonic_time () + (gint64)(timeout_ms)*1000;             \
    while (!(expr) && g_get_monotonic_time () < wait_until_deadline_)                              \
      g_usleep (1000);                                                                             \
    g_assert_true (expr);                                                                          \
  }                                                                                                \
  G_STMT_END

static guint64
ticks (RedisLockRegistry *r)
{
  RedisLockRegistryStats st;

  redis_lock_registry_get_stats (r, &st);
  return st.watchdog_ticks;
}

static guint64
contended_attempts (RedisLockRegistry *r)
{
  RedisLockRegistryStats st;

  redis_lock_registry_get_stats (r, &st);
  return st.contended_attempts;
}

/* Returns once the watchdog of @r has completed a tick that started after this call. */
static void
wait_full_tick (RedisLockRegistry *r)
{
  guint64 start = ticks (r);

  WAIT_UNTIL (ticks (r) >= start + 2, 10000);
}

static void
lock_ok (RedisLock *lock)
{
  GError *error = NULL;

  g_assert_true (redis_lock_lock (lock, &error));
  g_assert_no_error (error);
}

static void
unlock_ok (RedisLock *lock)
{
  GError *error = NULL;

  g_assert_true (redis_lock_unlock (lock, &error));
  g_assert_no_error (error);
}

static void
assert_held_by (TestFixture *fx, const char *name, RedisLockRegistry *owner)
{
  g_autofree char *key = test_lock_key (name);
  g_autofree char *value = test_redis_get (fx->redis, key);

  g_assert_cmpstr (value, ==, redis_lock_registry_get_client_id (owner));
  g_assert_cmpint (test_redis_pttl (fx->redis, key), >, 0);
}

static void
assert_free (TestFixture *fx, const char *name)
{
  g_autofree char *key = test_lock_key (name);

  g_assert_cmpint (test_redis_integer (fx->redis, "EXISTS %s", key), ==, 0);
}

/* ---- running a child ---- */

typedef int (*ChildFunc) (gpointer data);

/* Forks; the child runs @func and exits with its result without running any cleanup.
 * The parent waits at most 20 s (then kills the child and fails) and returns the exit
 * code. */
static int
run_child (ChildFunc func, gpointer data)
{
  pid_t pid;
  int status = 0;
  gint64 deadline;

  fflush (stdout);
  fflush (stderr);
  pid = fork ();
  g_assert_cmpint (pid, >=, 0);
  if (pid == 0)
    _exit (func (data));

  deadline = g_get_monotonic_time () + 20 * G_TIME_SPAN_SECOND;
  for (;;)
    {
      pid_t got = waitpid (pid, &status, WNOHANG);

      if (got == pid)
        break;
      g_assert_cmpint (got, ==, 0);
      if (g_get_monotonic_time () > deadline)
        {
          kill (pid, SIGKILL);
          waitpid (pid, &status, 0);
          g_error ("the child process hung (killed after 20 s)");
        }
      g_usleep (1000);
    }
  if (!WIFEXITED (status))
    g_error ("the child process died from signal %d", WTERMSIG (status));
  return WEXITSTATUS (status);
}

/* In a child: TRUE when a call returned FALSE/NULL with REDIS_LOCK_ERROR_FORKED. */
static gboolean
forked_error (gboolean ok, GError *error)
{
  gboolean matches = !ok && g_error_matches (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_FORKED);

  if (error != NULL)
    g_error_free (error);
  return matches;
}

/* ---- a thread waiting for a lock ---- */

typedef struct
{
  RedisLock *lock;
  gboolean acquired;
  GError *error;
  gint64 acquired_at_ms;
} Waiter;

static gpointer
waiter_thread (gpointer data)
{
  Waiter *w = data;

  w->acquired = redis_lock_try_lock_for (w->lock, 10000, NULL, &w->error);
  w->acquired_at_ms = test_now_ms ();
  if (w->acquired)
    unlock_ok (w->lock);
  return NULL;
}

/* @other holds @name in Redis; a thread of @r waits for it (PUBSUB, a minute between
 * SPIN tries), @other unlocks, and the waiter must get it within a second: the proof
 * that @r's subscription delivers notifications. */
static void
assert_handoff_by_notification (RedisLockRegistry *r, RedisLockRegistry *other, const char *name)
{
  RedisLock *mine = test_obtain (r, name);
  RedisLock *theirs = test_obtain (other, name);
  Waiter w = { mine, FALSE, NULL, 0 };
  guint64 before;
  GThread *thread;
  gint64 t0;

  lock_ok (theirs);
  before = contended_attempts (r);
  thread = g_thread_new ("waiter", waiter_thread, &w);
  WAIT_UNTIL (contended_attempts (r) > before, 10000);
  t0 = test_now_ms ();
  unlock_ok (theirs);
  g_thread_join (thread);
  g_assert_no_error (w.error);
  g_assert_true (w.acquired);
  g_assert_cmpint (w.acquired_at_ms - t0, <, 1000);
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
  int code;

  g_test_summary ("In a child process, obtain, lock, try_lock, try_lock_for, try_lock_full, "
                  "unlock and renew on a registry made before fork () fail with "
                  "REDIS_LOCK_ERROR_FORKED and touch nothing; the parent keeps its lease "
                  "(held across the fork), its watchdog and its subscription, and its unlock "
                  "succeeds");
  TEST_SKIP_IF_NO_SERVER (fx);

  redis_lock_registry_set_expire_after_ms (r, 1000);
  redis_lock_registry_set_idle_between_tries_ms (r, MINUTE_MS);
  other = test_registry_new (fx);
  /* Before the fork: subscriber and watchdog threads running, a lease held. */
  assert_handoff_by_notification (r, other, "before");
  pf.registry = r;
  pf.held = test_obtain (r, "held");
  pf.idle = test_obtain (r, "idle");
  lock_ok (pf.held);
  wait_full_tick (r);
  (void)redis_lock_error_quark ();

  code = run_child (child_uses_pre_fork_registry, &pf);
  if (code != 0)
    g_test_message ("check %d failed in the child", code);
  g_assert_cmpint (code, ==, 0);

  /* The parent's lease was neither released nor disturbed, and is still renewed. */
  g_assert_true (redis_lock_is_held_by_current_thread (pf.held));
  assert_held_by (fx, "held", r);
  wait_full_tick (r);
  g_usleep (1200 * 1000); /* time is the subject: longer than the 1 s TTL */
  assert_held_by (fx, "held", r);
  g_assert_false (redis_lock_is_lease_lost (pf.held));

  /* Its subscription still delivers, its connections still work. */
  assert_handoff_by_notification (r, other, "after");
  unlock_ok (pf.held);
  assert_free (fx, "held");
  lock_ok (pf.idle);
  assert_held_by (fx, "idle", r);
  unlock_ok (pf.idle);
  fresh = test_obtain (r, "fresh");
  lock_ok (fresh);
  unlock_ok (fresh);

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
#ifdef __SANITIZE_THREAD__
  /* ThreadSanitizer cannot start threads in the child of a multithreaded process: keep
   * this registry thread-free (no watchdog, no subscriber). */
  redis_lock_registry_set_watchdog (r, FALSE);
  redis_lock_registry_set_wait_mode (r, REDIS_LOCK_WAIT_SPIN);
#endif
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
  if (g_strcmp0 (value, redis_lock_registry_get_client_id (r)) != 0)
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
  int code;

  g_test_summary ("A registry created in the child process gets its own client id (with the "
                  "child's pid), takes and releases locks there, and is excluded by the "
                  "parent's leases");
  TEST_SKIP_IF_NO_SERVER (fx);

  redis_lock_registry_set_expire_after_ms (r, 1000);
  held = test_obtain (r, "held");
  lock_ok (held);
  wait_full_tick (r);

  code = run_child (child_new_registry, &cn);
  if (code != 0)
    g_test_message ("check %d failed in the child", code);
  g_assert_cmpint (code, ==, 0);

  assert_held_by (fx, "held", r);
  assert_free (fx, "child");
  unlock_ok (held);
  assert_free (fx, "held");
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
  int code;

  g_test_summary ("Closing a pre-fork registry in the child (as a cleanup path would) returns "
                  "promptly and releases none of the parent's leases");
  TEST_SKIP_IF_NO_SERVER (fx);

  redis_lock_registry_set_expire_after_ms (r, 1000);
  held = test_obtain (r, "held");
  lock_ok (held);
  wait_full_tick (r);

  code = run_child (child_closes_pre_fork_registry, r);
  if (code != 0)
    g_test_message ("check %d failed in the child", code);
  g_assert_cmpint (code, ==, 0);

  assert_held_by (fx, "held", r);
  wait_full_tick (r);
  assert_held_by (fx, "held", r);
  unlock_ok (held);
  assert_free (fx, "held");
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

#undef ADD
  return g_test_run ();
}
