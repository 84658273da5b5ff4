/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* badinput-calls.c: what the rows of the bad-input table run (see badinput.c).
 *
 * The environment of a row (a private server when it needs one, a registry, a raw
 * connection), the check of its outcome, and one function per kind of row: URLs,
 * names and registry keys, TTLs, unlock and renew misuse, cancellation, a full cache,
 * a closed registry, a forked child, and the faulty calls of the critical rows, which
 * run in a subprocess.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <glib/gstdio.h>

#include "badinput.h"

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

void
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

void
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
void
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
void
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

void
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
void
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
void
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

void
run_ttl_negative (Env *env, const BadCase *c)
{
  g_autoptr (RedisLock) lock = obtain_ok (env, "ttl");
  g_autoptr (GError) error = NULL;

  g_assert_false (redis_lock_try_lock_full (lock, 0, -1, NULL, &error));
  assert_outcome (c, error);
  g_assert_false (redis_lock_is_held_by_current_thread (lock));
  g_assert_false (key_exists (env, "ttl"));
}

void
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

void
run_unlock_not_held (Env *env, const BadCase *c)
{
  g_autoptr (RedisLock) lock = obtain_ok (env, "never-held");
  g_autoptr (GError) error = NULL;

  g_assert_false (redis_lock_unlock (lock, &error));
  assert_outcome (c, error);
}

void
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

void
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
void
run_renew (Env *env, const BadCase *c)
{
  g_autoptr (RedisLock) lock = obtain_ok (env, "known");
  g_autofree char *name = c->len > 0 || c->arg != NULL ? case_name (c) : g_strdup ("known");
  g_autoptr (GError) error = NULL;

  g_assert_false (redis_lock_registry_renew (env->registry, name, 1000, &error));
  assert_outcome (c, error);
}

void
run_renew_negative_ttl (Env *env, const BadCase *c)
{
  g_autoptr (RedisLock) lock = obtain_ok (env, "held");
  g_autoptr (GError) error = NULL;

  lock_ok (lock);
  g_assert_false (redis_lock_registry_renew (env->registry, "held", -5, &error));
  assert_outcome (c, error);
  unlock_ok (lock);
}

void
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

void
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
void
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
void
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
void
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
void
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
void
call_obtain_null (RedisLockRegistry *r)
{
  redis_lock_registry_obtain (NULL, "x", NULL);
}

void
call_lock_null (RedisLockRegistry *r)
{
  redis_lock_lock (NULL, NULL);
}

void
call_try_lock_for_null (RedisLockRegistry *r)
{
  g_assert_false (redis_lock_try_lock_for (NULL, 0, NULL, NULL));
}

void
call_try_lock_full_null (RedisLockRegistry *r)
{
  g_assert_false (redis_lock_try_lock_full (NULL, 0, 0, NULL, NULL));
}

void
call_unlock_null (RedisLockRegistry *r)
{
  redis_lock_unlock (NULL, NULL);
}

void
call_get_name_null (RedisLockRegistry *r)
{
  redis_lock_get_name (NULL);
}

void
call_lock_ref_null (RedisLockRegistry *r)
{
  redis_lock_ref (NULL);
}

void
call_renew_null (RedisLockRegistry *r)
{
  redis_lock_registry_renew (NULL, "x", 0, NULL);
}

void
call_registry_ref_null (RedisLockRegistry *r)
{
  redis_lock_registry_ref (NULL);
}

void
call_close_null (RedisLockRegistry *r)
{
  redis_lock_registry_close (NULL);
}

void
call_client_id_null (RedisLockRegistry *r)
{
  redis_lock_registry_get_client_id (NULL);
}

void
call_set_ttl_zero (RedisLockRegistry *r)
{
  redis_lock_registry_set_expire_after_ms (r, 0);
}

void
call_set_ttl_negative (RedisLockRegistry *r)
{
  redis_lock_registry_set_expire_after_ms (r, -1000);
}

void
call_set_capacity_zero (RedisLockRegistry *r)
{
  redis_lock_registry_set_cache_capacity (r, 0);
}

void
call_set_idle_negative (RedisLockRegistry *r)
{
  redis_lock_registry_set_idle_between_tries_ms (r, -1);
}

void
call_set_connect_timeout_zero (RedisLockRegistry *r)
{
  redis_lock_registry_set_connect_timeout_ms (r, 0);
}

void
call_set_command_timeout_negative (RedisLockRegistry *r)
{
  redis_lock_registry_set_command_timeout_ms (r, -1);
}

void
call_set_wait_mode_invalid (RedisLockRegistry *r)
{
  redis_lock_registry_set_wait_mode (r, (RedisLockWaitMode)42);
}

void
call_get_stats_null (RedisLockRegistry *r)
{
  redis_lock_registry_get_stats (r, NULL);
}

void
call_error_already_set (RedisLockRegistry *r)
{
  GError *error = g_error_new_literal (G_IO_ERROR, G_IO_ERROR_FAILED, "earlier failure");

  redis_lock_registry_obtain (r, "x", &error);
  g_error_free (error);
}

void
call_unref_null (RedisLockRegistry *r)
{
  redis_lock_unref (NULL);
  redis_lock_registry_unref (NULL);
  redis_lock_locker_free (NULL);
}

void
call_zero_idle_and_disabled_watchdog (RedisLockRegistry *r)
{
  /* Valid edge values: no critical. */
  redis_lock_registry_set_idle_between_tries_ms (r, 0);
  redis_lock_registry_set_watchdog (r, FALSE);
  redis_lock_registry_set_lease_lost_callback (r, NULL, NULL, NULL);
  redis_lock_registry_expire_unused_older_than (r, -1);
}
