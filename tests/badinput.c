/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* badinput.c: what every public entry point does with bad input and misuse.
 *
 * A lock library is called from code paths nobody tests: error handlers, shutdown,
 * child processes, configuration typos. Each row of the table below is one such call,
 * with the outcome the API documents: an error code (INVALID for malformed URLs, names
 * and TTLs; CONNECTION for valid URLs nobody answers; REDIS for refused credentials;
 * NOT_OWNER, CLOSED, FORKED, CACHE_FULL, CANCELLED for misuse), success for odd but
 * valid input (names with spaces, UTF-8, ':' and glob characters, the longest name), or
 * a g_return_if_fail() critical for programming errors (NULL objects, invalid
 * settings), checked in a subprocess. Every row is its own test path, /badinput/<row>,
 * so one crash or hang names its row; each row starts its own redis-server when it
 * needs one. Run under `make check-valgrind`, the rows also show that none of these
 * paths leaks.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "config.h"

#include "common.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <glib/gstdio.h>

/* The outcome a row expects, besides the REDIS_LOCK_ERROR codes. */
#define EXPECT_SUCCESS (-1)
#define EXPECT_CANCELLED (-2)
#define EXPECT_UNREACHABLE (-3) /* INVALID or CONNECTION, never a registry */

/* The registry key used by every row. */
#define KEY TEST_REGISTRY_KEY

/* A private server for rows that need one; the subprocess of a critical row finds the
 * parent's server through this variable. */
#define URL_ENV "REDISLOCK_BADINPUT_URL"

typedef struct _BadCase BadCase;

/* What a row gets to work with: a server (when the row has config or needs one), a
 * registry on it, and a raw connection to look at keys. */
typedef struct
{
  RedisLockTestServer *server;
  RedisLockRegistry *registry;
  redisContext *redis;
  char *url;
} Env;

struct _BadCase
{
  const char *path;    /* under /badinput/ */
  const char *summary; /* for g_test_summary() */
  void (*run) (Env *env, const BadCase *c);
  const char *arg;           /* a URL (with %s for the server's socket path), a name, a pattern */
  gint code;                 /* a RedisLockErrorCode, or EXPECT_* */
  const char *const *config; /* extra redis.conf lines */
  gsize len;                 /* names made of @len bytes */
  void (*call) (RedisLockRegistry *registry); /* critical rows: the faulty call */
  gboolean needs_server;
};

static const char *const password_config[] = { "requirepass secret", NULL };
static const char *const acl_config[] = { "user alice on >alicepw ~* &* +@all", NULL };

/* --- Helpers ------------------------------------------------------------------------- */

/* Asserts that @error is what @c expects. */
static void
assert_outcome (const BadCase *c, const GError *error)
{
  if (error != NULL)
    g_test_message ("%s: %s", c->path, error->message);
  switch (c->code)
    {
      case EXPECT_SUCCESS:
        g_assert_no_error (error);
        break;
      case EXPECT_CANCELLED:
        g_assert_error (error, G_IO_ERROR, G_IO_ERROR_CANCELLED);
        break;
      case EXPECT_UNREACHABLE:
        g_assert_nonnull (error);
        g_assert_true (g_error_matches (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID)
                       || g_error_matches (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION));
        break;
      default:
        g_assert_error (error, REDIS_LOCK_ERROR, c->code);
        g_assert_cmpstr (error->message, !=, "");
        break;
    }
}

static void
env_setup (Env *env, const BadCase *c)
{
  GError *error = NULL;

  memset (env, 0, sizeof *env);
  if (!c->needs_server && c->config == NULL)
    return;
  env->server = redis_lock_test_server_new_or_skip (c->config);
  if (env->server == NULL)
    return;
  env->url = g_strdup (redis_lock_test_server_get_url (env->server));
  env->redis = test_redis_connect (env->server);
  if (c->config == NULL)
    {
      env->registry = redis_lock_registry_new (env->url, KEY, &error);
      g_assert_no_error (error);
    }
}

static void
env_teardown (Env *env)
{
  g_clear_pointer (&env->registry, redis_lock_registry_unref);
  g_clear_pointer (&env->redis, redisFree);
  g_clear_pointer (&env->server, redis_lock_test_server_free);
  g_clear_pointer (&env->url, g_free);
}

static gboolean
key_exists (Env *env, const char *name)
{
  g_autofree char *key = test_lock_key (name);

  return test_redis_integer (env->redis, "EXISTS %b", key, strlen (key)) == 1;
}

static RedisLock *
obtain_ok (Env *env, const char *name)
{
  return test_obtain (env->registry, name);
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

/* The URL of @c: its arg with the server's socket path for %s. */
static char *
case_url (Env *env, const BadCase *c)
{
  if (env->server != NULL && strstr (c->arg, "%s") != NULL)
    {
      GString *url = g_string_new (NULL);
      const char *p = strstr (c->arg, "%s");

      g_string_append_len (url, c->arg, p - c->arg);
      g_string_append (url, redis_lock_test_server_get_socket_path (env->server));
      g_string_append (url, p + 2);
      return g_string_free (url, FALSE);
    }
  return g_strdup (c->arg);
}

/* --- Runners ------------------------------------------------------------------------- */

/* redis_lock_registry_new() with the row's URL. */
static void
run_url (Env *env, const BadCase *c)
{
  g_autofree char *url = case_url (env, c);
  g_autoptr (GError) error = NULL;
  RedisLockRegistry *registry = redis_lock_registry_new (url, KEY, &error);

  assert_outcome (c, error);
  if (c->code == EXPECT_SUCCESS)
    g_assert_nonnull (registry);
  else
    g_assert_null (registry);
  /* A refused password never appears in the message. */
  if (error != NULL && strstr (url, "password=") != NULL)
    g_assert_null (strstr (error->message, strstr (url, "password=") + strlen ("password=")));
  g_clear_pointer (&registry, redis_lock_registry_unref);
}

/* A unix:// URL longer than a socket address holds, whose first bytes name a real
 * socket (a symbolic link to the server's): the URL names no socket, so the registry
 * must not connect to the one its truncation would name. */
static void
run_truncated_socket_path (Env *env, const BadCase *c)
{
  struct sockaddr_un sun;
  g_autofree char *dir = g_dir_make_tmp ("rlbad-XXXXXX", NULL);
  g_autoptr (GString) link = g_string_new (dir);
  g_autofree char *url = NULL;
  g_autoptr (GError) error = NULL;
  RedisLockRegistry *registry;

  g_assert_nonnull (dir);
  g_string_append (link, "/");
  while (link->len < sizeof sun.sun_path - 1)
    g_string_append_c (link, 's');
  g_assert_cmpint (symlink (redis_lock_test_server_get_socket_path (env->server), link->str), ==,
                   0);
  url = g_strdup_printf ("unix://%s-and-more", link->str);
  registry = redis_lock_registry_new (url, KEY, &error);
  g_unlink (link->str);
  g_rmdir (dir);
  if (registry != NULL)
    {
      redis_lock_registry_unref (registry);
      g_test_fail_printf ("a URL naming a %u-byte socket path connected to the server at its first "
                          "%u bytes",
                          (guint)strlen (url) - 7, (guint)sizeof sun.sun_path - 1);
      return;
    }
  assert_outcome (c, error);
}

static void
run_registry_key (Env *env, const BadCase *c)
{
  g_autoptr (GError) error = NULL;
  RedisLockRegistry *registry
      = redis_lock_registry_new ("unix:///nonexistent/redis.sock", c->arg, &error);

  g_assert_null (registry);
  assert_outcome (c, error);
}

/* The row's name: its arg, or @len bytes. */
static char *
case_name (const BadCase *c)
{
  if (c->len > 0)
    {
      char *name = g_malloc (c->len + 1);
      for (gsize i = 0; i < c->len; i++)
        name[i] = (char)('a' + i % 26);
      name[c->len] = '\0';
      return name;
    }
  return g_strdup (c->arg);
}

/* obtain(); when the name is valid, lock it, see exactly `key:name` in Redis holding
 * the client id, unlock, see it gone. */
static void
run_name (Env *env, const BadCase *c)
{
  g_autofree char *name = case_name (c);
  g_autoptr (GError) error = NULL;
  RedisLock *lock = redis_lock_registry_obtain (env->registry,
                                                c->len > 0 || c->arg != NULL ? name : NULL, &error);

  assert_outcome (c, error);
  if (c->code != EXPECT_SUCCESS)
    {
      g_assert_null (lock);
      return;
    }
  g_assert_nonnull (lock);
  g_assert_cmpstr (redis_lock_get_name (lock), ==, name);
  lock_ok (lock);
  {
    g_autofree char *key = test_lock_key (name);
    g_autofree char *value = test_redis_get (env->redis, key);
    test_assert_value_of (value, env->registry);
  }
  unlock_ok (lock);
  g_assert_false (key_exists (env, name));
  redis_lock_unref (lock);
}

typedef struct
{
  RedisLock *lock;
  gint tid;
  gboolean acquired;
  GError *error;
} Waiter;

static gpointer
waiter_main (gpointer data)
{
  Waiter *waiter = data;

  g_atomic_int_set (&waiter->tid, test_thread_id ());
  waiter->acquired = redis_lock_try_lock_for (waiter->lock, 10000, NULL, &waiter->error);
  if (waiter->acquired)
    redis_lock_unlock (waiter->lock, NULL);
  return NULL;
}

/* A name full of glob characters: the unlock notification still reaches a waiter in
 * another registry, well before the 60 s TTL would have let it in. */
static void
run_glob_name_wakeup (Env *env, const BadCase *c)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (RedisLockRegistry) other = redis_lock_registry_new (env->url, KEY, &error);
  g_autoptr (RedisLock) held = obtain_ok (env, c->arg);
  Waiter waiter = { 0 };
  GThread *thread;
  gint64 start;

  g_assert_no_error (error);
  waiter.lock = test_obtain (other, c->arg);
  lock_ok (held);
  thread = g_thread_new ("waiter", waiter_main, &waiter);
  g_assert_true (test_wait_contended (other, 1, 10000));
  start = test_now_ms ();
  unlock_ok (held);
  g_thread_join (thread);
  g_assert_no_error (waiter.error);
  g_assert_true (waiter.acquired);
  g_assert_cmpint (test_now_ms () - start, <, 5000);
  redis_lock_unref (waiter.lock);
}

static void
run_ttl_negative (Env *env, const BadCase *c)
{
  g_autoptr (RedisLock) lock = obtain_ok (env, "ttl");
  g_autoptr (GError) error = NULL;

  g_assert_false (redis_lock_try_lock_full (lock, 0, -1, NULL, &error));
  assert_outcome (c, error);
  g_assert_false (redis_lock_is_held_by_current_thread (lock));
  g_assert_false (key_exists (env, "ttl"));
}

static void
run_ttl_zero (Env *env, const BadCase *c)
{
  g_autoptr (RedisLock) lock = obtain_ok (env, "ttl");
  g_autoptr (GError) error = NULL;
  g_autofree char *key = test_lock_key ("ttl");
  long long pttl;

  redis_lock_registry_set_expire_after_ms (env->registry, 5000);
  g_assert_true (redis_lock_try_lock_full (lock, 0, 0, NULL, &error));
  assert_outcome (c, error);
  pttl = test_redis_pttl (env->redis, key);
  g_assert_cmpint (pttl, >, 3000);
  g_assert_cmpint (pttl, <=, 5000);
  unlock_ok (lock);
}

static void
run_unlock_not_held (Env *env, const BadCase *c)
{
  g_autoptr (RedisLock) lock = obtain_ok (env, "never-held");
  g_autoptr (GError) error = NULL;

  g_assert_false (redis_lock_unlock (lock, &error));
  assert_outcome (c, error);
}

static void
run_unlock_twice (Env *env, const BadCase *c)
{
  g_autoptr (RedisLock) lock = obtain_ok (env, "twice");
  g_autoptr (GError) error = NULL;

  lock_ok (lock);
  unlock_ok (lock);
  g_assert_false (key_exists (env, "twice"));
  g_assert_false (redis_lock_unlock (lock, &error));
  assert_outcome (c, error);
  /* Still usable. */
  lock_ok (lock);
  unlock_ok (lock);
}

typedef struct
{
  RedisLock *lock;
  gboolean result;
  GError *error;
} ForeignUnlock;

static gpointer
foreign_unlock_main (gpointer data)
{
  ForeignUnlock *u = data;

  u->result = redis_lock_unlock (u->lock, &u->error);
  return NULL;
}

static void
run_unlock_other_thread (Env *env, const BadCase *c)
{
  g_autoptr (RedisLock) lock = obtain_ok (env, "mine");
  ForeignUnlock u = { lock, TRUE, NULL };

  lock_ok (lock);
  g_thread_join (g_thread_new ("foreign-unlock", foreign_unlock_main, &u));
  g_assert_false (u.result);
  assert_outcome (c, u.error);
  g_clear_error (&u.error);
  /* Nothing changed: still ours, locally and in Redis. */
  g_assert_true (redis_lock_is_held_by_current_thread (lock));
  g_assert_cmpuint (redis_lock_get_hold_count (lock), ==, 1);
  g_assert_true (key_exists (env, "mine"));
  unlock_ok (lock);
}

/* renew() of c->arg (NULL: a name this registry knows but does not hold). */
static void
run_renew (Env *env, const BadCase *c)
{
  g_autoptr (RedisLock) lock = obtain_ok (env, "known");
  g_autofree char *name = c->len > 0 || c->arg != NULL ? case_name (c) : g_strdup ("known");
  g_autoptr (GError) error = NULL;

  g_assert_false (redis_lock_registry_renew (env->registry, name, 1000, &error));
  assert_outcome (c, error);
}

static void
run_renew_negative_ttl (Env *env, const BadCase *c)
{
  g_autoptr (RedisLock) lock = obtain_ok (env, "held");
  g_autoptr (GError) error = NULL;

  lock_ok (lock);
  g_assert_false (redis_lock_registry_renew (env->registry, "held", -5, &error));
  assert_outcome (c, error);
  unlock_ok (lock);
}

static void
run_cancelled (Env *env, const BadCase *c)
{
  g_autoptr (RedisLock) lock = obtain_ok (env, "cancelled");
  g_autoptr (GCancellable) cancellable = g_cancellable_new ();
  g_autoptr (GError) error = NULL;

  g_cancellable_cancel (cancellable);
  g_assert_false (redis_lock_try_lock_for (lock, 1000, cancellable, &error));
  assert_outcome (c, error);
  g_assert_false (redis_lock_is_held_by_current_thread (lock));
  g_assert_false (key_exists (env, "cancelled"));
}

static void
run_cache_full (Env *env, const BadCase *c)
{
  g_autoptr (RedisLock) a = NULL;
  g_autoptr (GError) error = NULL;
  RedisLock *b;

  redis_lock_registry_set_cache_capacity (env->registry, 1);
  a = obtain_ok (env, "a");
  b = redis_lock_registry_obtain (env->registry, "b", &error);
  g_assert_null (b);
  assert_outcome (c, error);
}

/* Calls after close. c->arg says which. */
static void
run_closed (Env *env, const BadCase *c)
{
  g_autoptr (RedisLock) lock = obtain_ok (env, "closing");
  g_autoptr (GError) error = NULL;
  gboolean held_before = g_str_equal (c->arg, "unlock-held");
  gboolean ok = FALSE;

  if (held_before)
    {
      lock_ok (lock);
      g_assert_true (key_exists (env, "closing"));
    }
  redis_lock_registry_close (env->registry);
  if (held_before)
    g_assert_false (key_exists (env, "closing")); /* released by close */

  if (g_str_equal (c->arg, "obtain"))
    {
      RedisLock *other = redis_lock_registry_obtain (env->registry, "other", &error);
      g_assert_null (other);
    }
  else if (g_str_equal (c->arg, "lock"))
    ok = redis_lock_lock (lock, &error);
  else if (g_str_equal (c->arg, "try-lock-for"))
    ok = redis_lock_try_lock_for (lock, 1000, NULL, &error);
  else if (g_str_equal (c->arg, "renew"))
    ok = redis_lock_registry_renew (env->registry, "closing", 1000, &error);
  else if (held_before)
    {
      ok = redis_lock_unlock (lock, &error);
      g_assert_false (redis_lock_is_held_by_current_thread (lock));
    }
  else if (g_str_equal (c->arg, "close-twice"))
    {
      redis_lock_registry_close (env->registry);
      ok = TRUE;
    }
  else
    g_assert_not_reached ();
  g_assert_true (ok == (c->code == EXPECT_SUCCESS));
  assert_outcome (c, error);
  g_assert_false (key_exists (env, "closing"));
}

/* Calls in a child process on a registry made before fork(); the parent holds a lock
 * so the registry's threads and connections are busy. c->arg says which call. The
 * child only makes the call and writes the error code it got to a pipe (its exit
 * status is not used: under valgrind it reports the parent's earlier findings). */
static void
run_forked (Env *env, const BadCase *c)
{
  g_autoptr (RedisLock) lock = obtain_ok (env, "parent");
  int fds[2];
  gint64 deadline;
  char reply[16] = "";
  ssize_t n;
  pid_t pid;
  int status = 0;

  lock_ok (lock);
  g_assert_cmpint (pipe (fds), ==, 0);
  pid = fork ();
  g_assert_cmpint (pid, >=, 0);
  if (pid == 0)
    {
      GError *error = NULL;
      gboolean ok = TRUE;
      char code[16];

      close (fds[0]);
      if (g_str_equal (c->arg, "obtain"))
        ok = redis_lock_registry_obtain (env->registry, "child", &error) != NULL;
      else if (g_str_equal (c->arg, "lock"))
        ok = redis_lock_lock (lock, &error);
      else if (g_str_equal (c->arg, "unlock"))
        ok = redis_lock_unlock (lock, &error);
      else if (g_str_equal (c->arg, "renew"))
        ok = redis_lock_registry_renew (env->registry, "parent", 1000, &error);
      g_snprintf (code, sizeof code, "%d",
                  ok                                  ? EXPECT_SUCCESS
                  : error->domain == REDIS_LOCK_ERROR ? error->code
                                                      : -100);
      if (write (fds[1], code, strlen (code)) < 0)
        _exit (2);
      _exit (0);
    }
  close (fds[1]);
  deadline = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;
  while (waitpid (pid, &status, WNOHANG) == 0 && g_get_monotonic_time () < deadline)
    g_usleep (1000);
  if (g_get_monotonic_time () >= deadline)
    {
      kill (pid, SIGKILL);
      waitpid (pid, &status, 0);
      g_error ("the child hung in %s", c->arg);
    }
  n = read (fds[0], reply, sizeof reply - 1);
  close (fds[0]);
  g_assert_cmpint (n, >, 0);
  g_assert_false (WIFSIGNALED (status));
  g_assert_cmpint (g_ascii_strtoll (reply, NULL, 10), ==, c->code);
  /* The parent's hold is untouched. */
  g_assert_true (key_exists (env, "parent"));
  unlock_ok (lock);
}

/* The last references go while a thread still holds a lock: no crash, and the last
 * unref closes the registry, which releases the lease. */
static void
run_unref_with_holds (Env *env, const BadCase *c)
{
  RedisLock *lock = obtain_ok (env, "abandoned");
  RedisLock *reentered = obtain_ok (env, "abandoned");

  lock_ok (lock);
  lock_ok (reentered);
  g_assert_true (key_exists (env, "abandoned"));
  redis_lock_unref (reentered);
  redis_lock_unref (lock);
  g_clear_pointer (&env->registry, redis_lock_registry_unref);
  g_assert_false (key_exists (env, "abandoned"));
}

/* A programming error: the call must be refused with a critical (in a subprocess). */
static void
run_critical (Env *env, const BadCase *c)
{
  if (g_test_subprocess ())
    {
      const char *url = g_getenv (URL_ENV);
      RedisLockRegistry *registry = NULL;

      if (c->needs_server)
        {
          GError *error = NULL;
          registry = redis_lock_registry_new (url, KEY, &error);
          g_assert_no_error (error);
        }
      c->call (registry);
      if (registry != NULL)
        redis_lock_registry_unref (registry);
      return;
    }
  if (env->url != NULL)
    g_setenv (URL_ENV, env->url, TRUE);
  g_test_trap_subprocess (NULL, 20 * G_USEC_PER_SEC, G_TEST_SUBPROCESS_DEFAULT);
  g_unsetenv (URL_ENV);
  if (c->code == EXPECT_SUCCESS)
    {
      g_test_trap_assert_passed ();
      g_test_trap_assert_stderr_unmatched ("*CRITICAL*");
    }
  else
    {
      g_test_trap_assert_failed ();
      g_test_trap_assert_stderr ("*CRITICAL*");
      g_test_trap_assert_stderr (c->arg);
    }
}

/* The faulty calls of the critical rows. */
static void
call_obtain_null (RedisLockRegistry *r)
{
  redis_lock_registry_obtain (NULL, "x", NULL);
}

static void
call_lock_null (RedisLockRegistry *r)
{
  redis_lock_lock (NULL, NULL);
}

static void
call_try_lock_for_null (RedisLockRegistry *r)
{
  redis_lock_try_lock_for (NULL, 0, NULL, NULL);
}

static void
call_try_lock_full_null (RedisLockRegistry *r)
{
  redis_lock_try_lock_full (NULL, 0, 0, NULL, NULL);
}

static void
call_unlock_null (RedisLockRegistry *r)
{
  redis_lock_unlock (NULL, NULL);
}

static void
call_get_name_null (RedisLockRegistry *r)
{
  redis_lock_get_name (NULL);
}

static void
call_lock_ref_null (RedisLockRegistry *r)
{
  redis_lock_ref (NULL);
}

static void
call_renew_null (RedisLockRegistry *r)
{
  redis_lock_registry_renew (NULL, "x", 0, NULL);
}

static void
call_registry_ref_null (RedisLockRegistry *r)
{
  redis_lock_registry_ref (NULL);
}

static void
call_close_null (RedisLockRegistry *r)
{
  redis_lock_registry_close (NULL);
}

static void
call_client_id_null (RedisLockRegistry *r)
{
  redis_lock_registry_get_client_id (NULL);
}

static void
call_set_ttl_zero (RedisLockRegistry *r)
{
  redis_lock_registry_set_expire_after_ms (r, 0);
}

static void
call_set_ttl_negative (RedisLockRegistry *r)
{
  redis_lock_registry_set_expire_after_ms (r, -1000);
}

static void
call_set_capacity_zero (RedisLockRegistry *r)
{
  redis_lock_registry_set_cache_capacity (r, 0);
}

static void
call_set_idle_negative (RedisLockRegistry *r)
{
  redis_lock_registry_set_idle_between_tries_ms (r, -1);
}

static void
call_set_connect_timeout_zero (RedisLockRegistry *r)
{
  redis_lock_registry_set_connect_timeout_ms (r, 0);
}

static void
call_set_command_timeout_negative (RedisLockRegistry *r)
{
  redis_lock_registry_set_command_timeout_ms (r, -1);
}

static void
call_set_wait_mode_invalid (RedisLockRegistry *r)
{
  redis_lock_registry_set_wait_mode (r, (RedisLockWaitMode)42);
}

static void
call_get_stats_null (RedisLockRegistry *r)
{
  redis_lock_registry_get_stats (r, NULL);
}

static void
call_error_already_set (RedisLockRegistry *r)
{
  GError *error = g_error_new_literal (G_IO_ERROR, G_IO_ERROR_FAILED, "earlier failure");

  redis_lock_registry_obtain (r, "x", &error);
  g_error_free (error);
}

static void
call_unref_null (RedisLockRegistry *r)
{
  redis_lock_unref (NULL);
  redis_lock_registry_unref (NULL);
  redis_lock_locker_free (NULL);
}

static void
call_zero_idle_and_disabled_watchdog (RedisLockRegistry *r)
{
  /* Valid edge values: no critical. */
  redis_lock_registry_set_idle_between_tries_ms (r, 0);
  redis_lock_registry_set_watchdog (r, FALSE);
  redis_lock_registry_set_lease_lost_callback (r, NULL, NULL, NULL);
  redis_lock_registry_expire_unused_older_than (r, -1);
}

/* --- The table ------------------------------------------------------------------------ */

#define URL_ROW(p, u, c)                                                                           \
  {                                                                                                \
    .path = "url/" p, .summary = "redis_lock_registry_new (\"" u "\") fails with " #c,             \
    .run = run_url, .arg = u, .code = c                                                            \
  }

static const BadCase cases[] = {
  /* Malformed URLs: INVALID before any connection. */
  URL_ROW ("empty", "", REDIS_LOCK_ERROR_INVALID),
  URL_ROW ("no-scheme", "127.0.0.1:6379", REDIS_LOCK_ERROR_INVALID),
  URL_ROW ("unknown-scheme", "http://127.0.0.1:6379", REDIS_LOCK_ERROR_INVALID),
  URL_ROW ("rediss-without-tls", "rediss://127.0.0.1:6379", REDIS_LOCK_ERROR_INVALID),
  URL_ROW ("no-host", "redis://", REDIS_LOCK_ERROR_INVALID),
  URL_ROW ("db-without-host", "redis:///0", REDIS_LOCK_ERROR_INVALID),
  URL_ROW ("port-zero", "redis://127.0.0.1:0", REDIS_LOCK_ERROR_INVALID),
  URL_ROW ("port-too-big", "redis://127.0.0.1:65536", REDIS_LOCK_ERROR_INVALID),
  URL_ROW ("port-negative", "redis://127.0.0.1:-5", REDIS_LOCK_ERROR_INVALID),
  URL_ROW ("port-not-a-number", "redis://127.0.0.1:port", REDIS_LOCK_ERROR_INVALID),
  URL_ROW ("db-not-a-number", "redis://127.0.0.1:6379/zero", REDIS_LOCK_ERROR_INVALID),
  URL_ROW ("db-negative", "redis://127.0.0.1:6379/-1", REDIS_LOCK_ERROR_INVALID),
  URL_ROW ("db-too-big", "redis://127.0.0.1:6379/99999999999", REDIS_LOCK_ERROR_INVALID),
  URL_ROW ("db-two-segments", "redis://127.0.0.1:6379/0/1", REDIS_LOCK_ERROR_INVALID),
  URL_ROW ("redis-with-query", "redis://127.0.0.1:6379/0?password=x", REDIS_LOCK_ERROR_INVALID),
  URL_ROW ("redis-with-fragment", "redis://127.0.0.1:6379/0#top", REDIS_LOCK_ERROR_INVALID),
  URL_ROW ("bad-percent-encoding", "redis://%zz:6379", REDIS_LOCK_ERROR_INVALID),
  URL_ROW ("ipv6-unclosed", "redis://[::1:6379", REDIS_LOCK_ERROR_INVALID),
  URL_ROW ("unix-relative-path", "unix://relative/redis.sock", REDIS_LOCK_ERROR_INVALID),
  URL_ROW ("unix-no-path", "unix://", REDIS_LOCK_ERROR_INVALID),
  URL_ROW ("unix-root-only", "unix:///", REDIS_LOCK_ERROR_INVALID),
  URL_ROW ("unix-db-not-a-number", "unix:///tmp/r.sock?db=x", REDIS_LOCK_ERROR_INVALID),
  URL_ROW ("unix-db-empty", "unix:///tmp/r.sock?db=", REDIS_LOCK_ERROR_INVALID),
  URL_ROW ("unix-unknown-parameter", "unix:///tmp/r.sock?timeout=5", REDIS_LOCK_ERROR_INVALID),
  URL_ROW ("unix-parameter-without-value", "unix:///tmp/r.sock?&&", REDIS_LOCK_ERROR_INVALID),
  URL_ROW ("unix-userinfo", "unix://user:pw@/tmp/r.sock", REDIS_LOCK_ERROR_INVALID),
  URL_ROW ("unix-nul-in-path", "unix:///tmp/a%00b.sock", REDIS_LOCK_ERROR_INVALID),
  /* Well-formed, but nobody answers: CONNECTION. */
  URL_ROW ("unix-missing-socket", "unix:///nonexistent-dir/redis.sock",
           REDIS_LOCK_ERROR_CONNECTION),
  URL_ROW ("tcp-refused", "redis://127.0.0.1:1", REDIS_LOCK_ERROR_CONNECTION),
  { .path = "url/unix-path-longer-than-sockaddr",
    .summary = "A unix:// path longer than sockaddr_un holds never connects to the socket its "
               "first bytes name",
    .run = run_truncated_socket_path,
    .code = EXPECT_UNREACHABLE,
    .needs_server = TRUE },
  /* Credentials and databases the server refuses: REDIS, without echoing the password. */
  { .path = "credentials/missing-password",
    .summary = "No password for a server that requires one: REDIS",
    .run = run_url,
    .arg = "unix://%s",
    .code = REDIS_LOCK_ERROR_REDIS,
    .config = password_config },
  { .path = "credentials/wrong-password",
    .summary = "A wrong password: REDIS, and the message does not show it",
    .run = run_url,
    .arg = "unix://%s?password=wrongpass",
    .code = REDIS_LOCK_ERROR_REDIS,
    .config = password_config },
  { .path = "credentials/unknown-user",
    .summary = "An ACL user the server does not know: REDIS",
    .run = run_url,
    .arg = "unix://%s?username=bob&password=alicepw",
    .code = REDIS_LOCK_ERROR_REDIS,
    .config = acl_config },
  { .path = "credentials/user-wrong-password",
    .summary = "A known ACL user with a wrong password: REDIS",
    .run = run_url,
    .arg = "unix://%s?username=alice&password=nope",
    .code = REDIS_LOCK_ERROR_REDIS,
    .config = acl_config },
  { .path = "credentials/acl-user-accepted",
    .summary = "The right ACL user and password: a registry",
    .run = run_url,
    .arg = "unix://%s?username=alice&password=alicepw",
    .code = EXPECT_SUCCESS,
    .config = acl_config },
  { .path = "credentials/password-not-configured",
    .summary = "A password for a server without one: REDIS",
    .run = run_url,
    .arg = "unix://%s?password=secret",
    .code = REDIS_LOCK_ERROR_REDIS,
    .needs_server = TRUE },
  { .path = "credentials/db-out-of-range",
    .summary = "A database the server does not have: REDIS",
    .run = run_url,
    .arg = "unix://%s?db=999",
    .code = REDIS_LOCK_ERROR_REDIS,
    .needs_server = TRUE },
  /* Registry keys. */
  { .path = "registry-key/null",
    .summary = "A NULL registry key: INVALID",
    .run = run_registry_key,
    .code = REDIS_LOCK_ERROR_INVALID },
  { .path = "registry-key/empty",
    .summary = "An empty registry key: INVALID",
    .run = run_registry_key,
    .arg = "",
    .code = REDIS_LOCK_ERROR_INVALID },
  /* Lock names: 1..1024 bytes, anything but NUL. */
  { .path = "name/null",
    .summary = "obtain (NULL): INVALID",
    .run = run_name,
    .code = REDIS_LOCK_ERROR_INVALID,
    .needs_server = TRUE },
  { .path = "name/empty",
    .summary = "obtain (\"\"): INVALID",
    .run = run_name,
    .arg = "",
    .code = REDIS_LOCK_ERROR_INVALID,
    .needs_server = TRUE },
  { .path = "name/oversized",
    .summary = "A 1025-byte name: INVALID",
    .run = run_name,
    .code = REDIS_LOCK_ERROR_INVALID,
    .len = REDIS_LOCK_NAME_MAX + 1,
    .needs_server = TRUE },
  { .path = "name/longest",
    .summary = "A 1024-byte name works, key exactly registry_key:name",
    .run = run_name,
    .code = EXPECT_SUCCESS,
    .len = REDIS_LOCK_NAME_MAX,
    .needs_server = TRUE },
  { .path = "name/spaces",
    .summary = "A name with spaces works",
    .run = run_name,
    .arg = " a name with spaces ",
    .code = EXPECT_SUCCESS,
    .needs_server = TRUE },
  { .path = "name/utf8",
    .summary = "A UTF-8 name works",
    .run = run_name,
    .arg = "z\xc3\xa1mek-\xe9\x8e\x96-\xf0\x9f\x94\x92",
    .code = EXPECT_SUCCESS,
    .needs_server = TRUE },
  { .path = "name/colons",
    .summary = "A name with ':' works",
    .run = run_name,
    .arg = ":a:b::c:",
    .code = EXPECT_SUCCESS,
    .needs_server = TRUE },
  { .path = "name/control-characters",
    .summary = "A name with CR, LF and TAB works",
    .run = run_name,
    .arg = "a\r\nb\tc",
    .code = EXPECT_SUCCESS,
    .needs_server = TRUE },
  { .path = "name/not-utf8",
    .summary = "A name that is not UTF-8 works (any bytes but NUL)",
    .run = run_name,
    .arg = "\xff\xfe-\x80",
    .code = EXPECT_SUCCESS,
    .needs_server = TRUE },
  { .path = "name/glob-characters",
    .summary = "A name with glob characters: the unlock notification still wakes "
               "a waiter in another registry",
    .run = run_glob_name_wakeup,
    .arg = "*?[x]\\-*",
    .code = EXPECT_SUCCESS,
    .needs_server = TRUE },
  /* Lock calls. */
  { .path = "ttl/negative",
    .summary = "try_lock_full with ttl < 0: INVALID, nothing held",
    .run = run_ttl_negative,
    .code = REDIS_LOCK_ERROR_INVALID,
    .needs_server = TRUE },
  { .path = "ttl/zero-means-registry-ttl",
    .summary = "try_lock_full with ttl 0 uses the registry TTL",
    .run = run_ttl_zero,
    .code = EXPECT_SUCCESS,
    .needs_server = TRUE },
  { .path = "unlock/not-held",
    .summary = "unlock of a lock never taken: NOT_OWNER",
    .run = run_unlock_not_held,
    .code = REDIS_LOCK_ERROR_NOT_OWNER,
    .needs_server = TRUE },
  { .path = "unlock/twice",
    .summary = "The second unlock: NOT_OWNER, and the lock stays usable",
    .run = run_unlock_twice,
    .code = REDIS_LOCK_ERROR_NOT_OWNER,
    .needs_server = TRUE },
  { .path = "unlock/other-thread",
    .summary = "unlock from a thread that does not hold it: NOT_OWNER, nothing "
               "changes",
    .run = run_unlock_other_thread,
    .code = REDIS_LOCK_ERROR_NOT_OWNER,
    .needs_server = TRUE },
  { .path = "renew/not-held",
    .summary = "renew of a cached lock nobody holds: NOT_OWNER",
    .run = run_renew,
    .code = REDIS_LOCK_ERROR_NOT_OWNER,
    .needs_server = TRUE },
  { .path = "renew/unknown-name",
    .summary = "renew of a name never obtained: NOT_OWNER",
    .run = run_renew,
    .arg = "never-seen",
    .code = REDIS_LOCK_ERROR_NOT_OWNER,
    .needs_server = TRUE },
  { .path = "renew/empty-name",
    .summary = "renew of \"\": INVALID",
    .run = run_renew,
    .arg = "",
    .code = REDIS_LOCK_ERROR_INVALID,
    .needs_server = TRUE },
  { .path = "renew/oversized-name",
    .summary = "renew of a 1025-byte name: INVALID",
    .run = run_renew,
    .code = REDIS_LOCK_ERROR_INVALID,
    .len = REDIS_LOCK_NAME_MAX + 1,
    .needs_server = TRUE },
  { .path = "renew/negative-ttl",
    .summary = "renew with ttl < 0: INVALID",
    .run = run_renew_negative_ttl,
    .code = REDIS_LOCK_ERROR_INVALID,
    .needs_server = TRUE },
  { .path = "cancellable/already-cancelled",
    .summary = "try_lock_for with a cancelled cancellable: CANCELLED, "
               "nothing held",
    .run = run_cancelled,
    .code = EXPECT_CANCELLED,
    .needs_server = TRUE },
  { .path = "cache/full",
    .summary = "obtain beyond a capacity of 1 with the cached lock referenced: CACHE_FULL",
    .run = run_cache_full,
    .code = REDIS_LOCK_ERROR_CACHE_FULL,
    .needs_server = TRUE },
  /* After close. */
  { .path = "closed/obtain",
    .summary = "obtain after close: CLOSED",
    .run = run_closed,
    .arg = "obtain",
    .code = REDIS_LOCK_ERROR_CLOSED,
    .needs_server = TRUE },
  { .path = "closed/lock",
    .summary = "lock after close: CLOSED",
    .run = run_closed,
    .arg = "lock",
    .code = REDIS_LOCK_ERROR_CLOSED,
    .needs_server = TRUE },
  { .path = "closed/try-lock-for",
    .summary = "try_lock_for after close: CLOSED",
    .run = run_closed,
    .arg = "try-lock-for",
    .code = REDIS_LOCK_ERROR_CLOSED,
    .needs_server = TRUE },
  { .path = "closed/unlock-held",
    .summary = "unlock by a holder after close: CLOSED, the local hold dropped, the key "
               "released by close",
    .run = run_closed,
    .arg = "unlock-held",
    .code = REDIS_LOCK_ERROR_CLOSED,
    .needs_server = TRUE },
  { .path = "closed/renew",
    .summary = "renew after close: CLOSED",
    .run = run_closed,
    .arg = "renew",
    .code = REDIS_LOCK_ERROR_CLOSED,
    .needs_server = TRUE },
  { .path = "closed/close-twice",
    .summary = "close twice: nothing happens the second time",
    .run = run_closed,
    .arg = "close-twice",
    .code = EXPECT_SUCCESS,
    .needs_server = TRUE },
  /* After fork, in the child. */
  { .path = "forked/obtain",
    .summary = "obtain in a child process: FORKED",
    .run = run_forked,
    .arg = "obtain",
    .code = REDIS_LOCK_ERROR_FORKED,
    .needs_server = TRUE },
  { .path = "forked/lock",
    .summary = "lock in a child process: FORKED",
    .run = run_forked,
    .arg = "lock",
    .code = REDIS_LOCK_ERROR_FORKED,
    .needs_server = TRUE },
  { .path = "forked/unlock",
    .summary = "unlock of the parent's hold in a child process: FORKED",
    .run = run_forked,
    .arg = "unlock",
    .code = REDIS_LOCK_ERROR_FORKED,
    .needs_server = TRUE },
  { .path = "forked/renew",
    .summary = "renew in a child process: FORKED",
    .run = run_forked,
    .arg = "renew",
    .code = REDIS_LOCK_ERROR_FORKED,
    .needs_server = TRUE },
  /* Dropping everything while held. */
  { .path = "unref/with-holds",
    .summary = "The last unrefs while a lock is held twice: no crash, the key released",
    .run = run_unref_with_holds,
    .code = EXPECT_SUCCESS,
    .needs_server = TRUE },
  /* Programming errors: criticals. */
  { .path = "critical/obtain-null-registry",
    .summary = "obtain (NULL registry): critical",
    .run = run_critical,
    .arg = "*registry != NULL*",
    .code = REDIS_LOCK_ERROR_INVALID,
    .call = call_obtain_null },
  { .path = "critical/lock-null",
    .summary = "lock (NULL): critical",
    .run = run_critical,
    .arg = "*lock != NULL*",
    .code = REDIS_LOCK_ERROR_INVALID,
    .call = call_lock_null },
  { .path = "critical/try-lock-for-null",
    .summary = "try_lock_for (NULL): critical",
    .run = run_critical,
    .arg = "*lock != NULL*",
    .code = REDIS_LOCK_ERROR_INVALID,
    .call = call_try_lock_for_null },
  { .path = "critical/try-lock-full-null",
    .summary = "try_lock_full (NULL): critical",
    .run = run_critical,
    .arg = "*lock != NULL*",
    .code = REDIS_LOCK_ERROR_INVALID,
    .call = call_try_lock_full_null },
  { .path = "critical/unlock-null",
    .summary = "unlock (NULL): critical",
    .run = run_critical,
    .arg = "*lock != NULL*",
    .code = REDIS_LOCK_ERROR_INVALID,
    .call = call_unlock_null },
  { .path = "critical/get-name-null",
    .summary = "get_name (NULL): critical",
    .run = run_critical,
    .arg = "*lock != NULL*",
    .code = REDIS_LOCK_ERROR_INVALID,
    .call = call_get_name_null },
  { .path = "critical/lock-ref-null",
    .summary = "redis_lock_ref (NULL): critical",
    .run = run_critical,
    .arg = "*lock != NULL*",
    .code = REDIS_LOCK_ERROR_INVALID,
    .call = call_lock_ref_null },
  { .path = "critical/renew-null-registry",
    .summary = "renew (NULL registry): critical",
    .run = run_critical,
    .arg = "*registry != NULL*",
    .code = REDIS_LOCK_ERROR_INVALID,
    .call = call_renew_null },
  { .path = "critical/registry-ref-null",
    .summary = "registry_ref (NULL): critical",
    .run = run_critical,
    .arg = "*registry != NULL*",
    .code = REDIS_LOCK_ERROR_INVALID,
    .call = call_registry_ref_null },
  { .path = "critical/close-null",
    .summary = "close (NULL): critical",
    .run = run_critical,
    .arg = "*registry != NULL*",
    .code = REDIS_LOCK_ERROR_INVALID,
    .call = call_close_null },
  { .path = "critical/client-id-null",
    .summary = "get_client_id (NULL): critical",
    .run = run_critical,
    .arg = "*registry != NULL*",
    .code = REDIS_LOCK_ERROR_INVALID,
    .call = call_client_id_null },
  { .path = "critical/expire-after-zero",
    .summary = "set_expire_after_ms (0): critical",
    .run = run_critical,
    .arg = "*ms > 0*",
    .code = REDIS_LOCK_ERROR_INVALID,
    .call = call_set_ttl_zero,
    .needs_server = TRUE },
  { .path = "critical/expire-after-negative",
    .summary = "set_expire_after_ms (-1000): critical",
    .run = run_critical,
    .arg = "*ms > 0*",
    .code = REDIS_LOCK_ERROR_INVALID,
    .call = call_set_ttl_negative,
    .needs_server = TRUE },
  { .path = "critical/cache-capacity-zero",
    .summary = "set_cache_capacity (0): critical",
    .run = run_critical,
    .arg = "*capacity > 0*",
    .code = REDIS_LOCK_ERROR_INVALID,
    .call = call_set_capacity_zero,
    .needs_server = TRUE },
  { .path = "critical/idle-between-tries-negative",
    .summary = "set_idle_between_tries_ms (-1): critical",
    .run = run_critical,
    .arg = "*ms >= 0*",
    .code = REDIS_LOCK_ERROR_INVALID,
    .call = call_set_idle_negative,
    .needs_server = TRUE },
  { .path = "critical/connect-timeout-zero",
    .summary = "set_connect_timeout_ms (0): critical",
    .run = run_critical,
    .arg = "*ms > 0*",
    .code = REDIS_LOCK_ERROR_INVALID,
    .call = call_set_connect_timeout_zero,
    .needs_server = TRUE },
  { .path = "critical/command-timeout-negative",
    .summary = "set_command_timeout_ms (-1): critical",
    .run = run_critical,
    .arg = "*ms > 0*",
    .code = REDIS_LOCK_ERROR_INVALID,
    .call = call_set_command_timeout_negative,
    .needs_server = TRUE },
  { .path = "critical/wait-mode-invalid",
    .summary = "set_wait_mode (42): critical",
    .run = run_critical,
    .arg = "*mode*",
    .code = REDIS_LOCK_ERROR_INVALID,
    .call = call_set_wait_mode_invalid,
    .needs_server = TRUE },
  { .path = "critical/get-stats-null",
    .summary = "get_stats (registry, NULL): critical",
    .run = run_critical,
    .arg = "*stats != NULL*",
    .code = REDIS_LOCK_ERROR_INVALID,
    .call = call_get_stats_null,
    .needs_server = TRUE },
  { .path = "critical/error-already-set",
    .summary = "obtain with *error already set: critical",
    .run = run_critical,
    .arg = "*error == NULL*",
    .code = REDIS_LOCK_ERROR_INVALID,
    .call = call_error_already_set,
    .needs_server = TRUE },
  { .path = "critical/unref-null-is-fine",
    .summary = "redis_lock_unref, registry_unref and locker_free accept NULL "
               "silently",
    .run = run_critical,
    .code = EXPECT_SUCCESS,
    .call = call_unref_null },
  { .path = "critical/valid-edge-settings",
    .summary = "idle 0 ms, watchdog off, no callback, expire all: no critical",
    .run = run_critical,
    .code = EXPECT_SUCCESS,
    .call = call_zero_idle_and_disabled_watchdog,
    .needs_server = TRUE },
};

static void
run_case (gconstpointer data)
{
  const BadCase *c = data;
  Env env;

  g_test_summary (c->summary);
  /* A critical row's subprocess makes its own registry from the parent's server. */
  if (c->run == run_critical && g_test_subprocess ())
    {
      memset (&env, 0, sizeof env);
      c->run (&env, c);
      return;
    }
  env_setup (&env, c);
  if ((c->needs_server || c->config != NULL) && env.server == NULL)
    return; /* skipped: no redis-server */
  c->run (&env, c);
  env_teardown (&env);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);

  for (gsize i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autofree char *path = g_strconcat ("/badinput/", cases[i].path, NULL);
      g_test_add_data_func (path, &cases[i], run_case);
    }
  return g_test_run ();
}
