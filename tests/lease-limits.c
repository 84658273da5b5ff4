/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* lease-limits.c: a lease at the limits of what the server and the numbers allow: a
 * Redis user without permission on the notification channel or without the CLIENT
 * command, a forever wait, a TTL too large for microsecond arithmetic, and a foreign
 * holder's huge remaining TTL. Part of the lease test program (lease.c adds these
 * tests).
 */
#include <string.h>

#include "common.h"

/* Adds this file's tests; called by lease.c's main(). */
void lease_add_limit_tests (void);

/* ---- channel permission ---- */

static gint acl_warnings;      /* atomic */
static gint tracking_warnings; /* atomic */

/* The warning about the unlock-notification channel. */
static gboolean
is_channel_warning (const char *domain, const char *message)
{
  return g_strcmp0 (domain, "redislock") == 0 && strstr (message, "permission") != NULL
         && strstr (message, "rltest-channel:") != NULL;
}

/* The warning about key tracking (CLIENT TRACKING and its invalidation channel). */
static gboolean
is_tracking_warning (const char *domain, const char *message)
{
  return g_strcmp0 (domain, "redislock") == 0 && strstr (message, "Redis refused") != NULL
         && strstr (message, "__redis__:invalidate") != NULL;
}

static gboolean
is_acl_warning (const char *domain, const char *message)
{
  return is_channel_warning (domain, message) || is_tracking_warning (domain, message);
}

/* The fatal handler: an expected warning does not abort. */
static gboolean
acl_warning_not_fatal (const char *domain, GLogLevelFlags level, const char *message,
                       gpointer data)
{
  return !is_acl_warning (domain, message);
}

/* The log handler: an expected warning is counted, not printed (as a TAP "Bail out!"). */
static void
log_acl_warning (const char *domain, GLogLevelFlags level, const char *message, gpointer data)
{
  if (is_channel_warning (domain, message))
    g_atomic_int_inc (&acl_warnings);
  else if (is_tracking_warning (domain, message))
    g_atomic_int_inc (&tracking_warnings);
  else
    g_log_default_handler (domain, level, message, data);
}

/* Makes the Redis user @user (password "pw") with the ACL rules @rules (NULL-terminated),
 * starts counting the warnings about refused permissions (*handler: the log handler, for
 * acl_end()), and opens two registries logged in as that user: *a, and *b with key
 * tracking on. */
static void
acl_registries_new (TestFixture *fx, const char *user, const char *const *rules,
                    RedisLockRegistry **a, RedisLockRegistry **b, guint *handler)
{
  g_autoptr (GPtrArray) argv = g_ptr_array_new ();
  g_autoptr (GError) error = NULL;
  g_autofree char *url = NULL;
  redisReply *reply;

  g_ptr_array_add (argv, (gpointer) "ACL");
  g_ptr_array_add (argv, (gpointer) "SETUSER");
  g_ptr_array_add (argv, (gpointer) user);
  g_ptr_array_add (argv, (gpointer) "on");
  g_ptr_array_add (argv, (gpointer) ">pw");
  for (guint i = 0; rules[i] != NULL; i++)
    g_ptr_array_add (argv, (gpointer) rules[i]);
  reply = redisCommandArgv (fx->redis, (int) argv->len, (const char **) argv->pdata, NULL);
  g_assert_nonnull (reply);
  g_assert_cmpint (reply->type, ==, REDIS_REPLY_STATUS);
  freeReplyObject (reply);
  url = g_strdup_printf ("unix://%s?username=%s&password=pw",
                         redis_lock_test_server_get_socket_path (fx->server), user);
  g_atomic_int_set (&acl_warnings, 0);
  g_atomic_int_set (&tracking_warnings, 0);
  *handler = g_log_set_handler ("redislock", G_LOG_LEVEL_WARNING | G_LOG_FLAG_FATAL,
                                log_acl_warning, NULL);
  g_test_log_set_fatal_handler (acl_warning_not_fatal, NULL);

  *a = redis_lock_registry_new (url, TEST_REGISTRY_KEY, &error);
  g_assert_no_error (error);
  redis_lock_registry_set_key_tracking (*a, FALSE);
  *b = redis_lock_registry_new (url, TEST_REGISTRY_KEY, &error);
  g_assert_no_error (error);
  /* Key tracking on, the default. */
  g_assert_true (redis_lock_registry_get_key_tracking (*b));
}

/* Stops counting warnings (after the registries are gone: their last ones count). */
static void
acl_end (guint handler)
{
  g_test_log_set_fatal_handler (NULL, NULL);
  g_log_remove_handler ("redislock", handler);
}

static void
test_acl_without_channel_permission (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) a = NULL;
  g_autoptr (RedisLockRegistry) b = NULL;
  g_autoptr (RedisLock) la = NULL;
  g_autoptr (RedisLock) lb = NULL;
  const char *const rules[] = { "~*", "+@all", "resetchannels", NULL };
  TestTaker taker = { 0 };
  GThread *thread;
  guint handler;

  g_test_summary ("A Redis user without permission on the notification channel (an ACL "
                  "without &rltest-channel:*) can still lock and unlock: unlock deletes the "
                  "key, one warning names the permission, and a waiter of another registry "
                  "gets the lock by polling within a second, not after seconds");
  TEST_SKIP_IF_NO_SERVER (fx);

  acl_registries_new (fx, "locker", rules, &a, &b, &handler);
  la = test_obtain (a, "acl");
  lb = test_obtain (b, "acl");

  test_lock_ok (la);
  test_unlock_ok (la);
  test_assert_free (fx, "acl");

  test_lock_ok (la);
  thread = test_taker_start (&taker, lb, 10000);
  g_assert_true (test_wait_contended (b, 1, 5000));
  test_unlock_ok (la);
  test_taker_join (&taker, thread, 5000);
  g_assert_true (taker.result);
  g_assert_no_error (taker.error);
  g_test_message ("the waiter got the lock %" G_GINT64_FORMAT " ms after it started waiting",
                  taker.returned_ms - taker.called_ms);
  g_assert_cmpint (taker.returned_ms - taker.called_ms, <, 1500);
  test_taker_clear (&taker);
  test_assert_free (fx, "acl");
  /* At most one about PUBLISH and one about PSUBSCRIBE from each registry (a holder
   * subscribes too, to hear of restarts). */
  g_assert_cmpint (g_atomic_int_get (&acl_warnings), >=, 1);
  g_assert_cmpint (g_atomic_int_get (&acl_warnings), <=, 4);
  /* The invalidation channel is refused too: one warning from the waiting registry. */
  g_assert_cmpint (g_atomic_int_get (&tracking_warnings), ==, 1);
  g_clear_pointer (&la, redis_lock_unref);
  g_clear_pointer (&lb, redis_lock_unref);
  g_clear_pointer (&a, redis_lock_registry_unref);
  g_clear_pointer (&b, redis_lock_registry_unref);
  acl_end (handler);
}

static void
test_acl_without_client_command (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) a = NULL;
  g_autoptr (RedisLockRegistry) b = NULL;
  g_autoptr (RedisLock) la = NULL;
  g_autoptr (RedisLock) lb = NULL;
  const char *const rules[] = { "~*", "&*", "+@all", "-client", NULL };
  TestTaker taker = { 0 };
  GThread *thread;
  gint64 unlocked_at;
  guint handler;

  g_test_summary ("A Redis user that may not run CLIENT (so no key tracking) gets one warning "
                  "and waits as before: a waiter of another registry is woken by the unlock "
                  "notification within a second (the holder's TTL is 30 s)");
  TEST_SKIP_IF_NO_SERVER (fx);

  acl_registries_new (fx, "notrack", rules, &a, &b, &handler);
  redis_lock_registry_set_expire_after_ms (a, 30000);
  la = test_obtain (a, "notrack");
  lb = test_obtain (b, "notrack");

  test_lock_ok (la);
  thread = test_taker_start (&taker, lb, 20000);
  g_assert_true (test_wait_contended (b, 1, 5000));
  g_assert_true (test_wait_thread_blocked (g_atomic_int_get (&taker.tid), 5000));
  TEST_WAIT_UNTIL (g_atomic_int_get (&tracking_warnings) == 1, 5000);
  unlocked_at = test_now_ms ();
  test_unlock_ok (la);
  test_taker_join (&taker, thread, 5000);
  g_assert_true (taker.result);
  g_assert_no_error (taker.error);
  g_assert_cmpint (taker.returned_ms - unlocked_at, <, 1000);
  test_taker_clear (&taker);
  test_assert_free (fx, "notrack");
  g_assert_cmpint (g_atomic_int_get (&tracking_warnings), ==, 1);
  g_assert_cmpint (g_atomic_int_get (&acl_warnings), ==, 0);
  g_clear_pointer (&la, redis_lock_unref);
  g_clear_pointer (&lb, redis_lock_unref);
  g_clear_pointer (&a, redis_lock_registry_unref);
  g_clear_pointer (&b, redis_lock_registry_unref);
  acl_end (handler);
}

/* ---- overflow ---- */

static void
test_forever_wait (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) other = NULL;
  g_autoptr (RedisLock) held = NULL;
  g_autoptr (RedisLock) lock = NULL;
  TestTaker taker = { 0 };
  GThread *thread;

  g_test_summary ("try_lock_for (G_MAXINT64), a common 'forever', waits for the holder "
                  "instead of overflowing into a deadline in the past");
  TEST_SKIP_IF_NO_STORE (fx);

  other = test_registry_new (fx);
  held = test_obtain (other, "forever");
  test_lock_ok (held);
  lock = test_obtain (fx->registry, "forever");
  thread = test_taker_start (&taker, lock, G_MAXINT64);
  g_assert_true (test_wait_contended (fx->registry, 1, 5000));
  TEST_WAIT_UNTIL (g_atomic_int_get (&taker.tid) != 0, 5000);
  g_assert_true (test_wait_thread_blocked (g_atomic_int_get (&taker.tid), 5000));
  g_assert_false (g_atomic_int_get (&taker.done));
  test_unlock_ok (held);
  test_taker_join (&taker, thread, 5000);
  g_assert_true (taker.result);
  g_assert_no_error (taker.error);
  test_taker_clear (&taker);
}

static void
test_huge_ttl_refused (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (GError) error = NULL;

  g_test_summary ("A lease TTL of 1e16 ms is refused with INVALID instead of being taken and "
                  "reported lost at once; 100 years is accepted");
  TEST_SKIP_IF_NO_STORE (fx);

  lock = test_obtain (fx->registry, "huge");
  g_assert_false (redis_lock_try_lock_full (lock, 0, (gint64) 1e16, NULL, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID);
  g_clear_error (&error);
  g_assert_false (redis_lock_registry_renew (fx->registry, "huge", (gint64) 1e16, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID);
  g_clear_error (&error);
  g_assert_true (redis_lock_try_lock_full (lock, 0, (gint64) 100 * 365 * 24 * 3600 * 1000, NULL,
                                           &error));
  g_assert_no_error (error);
  g_assert_false (redis_lock_is_lease_lost (lock));
  test_unlock_ok (lock);
}

static void
test_huge_foreign_pttl (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (GError) error = NULL;
  g_autofree char *key = test_lock_key ("eternal");
  guint64 attempts;
  redisReply *reply;

  g_test_summary ("A foreign key with a PTTL near the largest Redis accepts does not make a "
                  "waiter spin: it sleeps until its deadline (a few attempts in 300 ms)");
  TEST_SKIP_IF_NO_SERVER (fx);

  reply = test_redis_command (fx->redis, "SET %s foreign PX 9000000000000000000", key);
  g_assert_cmpint (reply->type, ==, REDIS_REPLY_STATUS);
  freeReplyObject (reply);
  lock = test_obtain (fx->registry, "eternal");
  g_assert_false (redis_lock_try_lock_for (lock, 300, NULL, &error));
  g_assert_no_error (error);
  attempts = test_stats (fx->registry).contended_attempts;
  g_test_message ("%" G_GUINT64_FORMAT " attempts", attempts);
  g_assert_cmpuint (attempts, <=, 5);
}

void
lease_add_limit_tests (void)
{
  test_add_redis ("/lease/acl/no-channel-permission", NULL, test_acl_without_channel_permission);
  test_add_redis ("/lease/acl/no-client-command", NULL, test_acl_without_client_command);
  test_add_stores ("/lease/overflow/forever-wait", NULL, test_forever_wait);
  test_add_stores ("/lease/overflow/huge-ttl-refused", NULL, test_huge_ttl_refused);
  test_add_redis ("/lease/overflow/huge-foreign-pttl", NULL, test_huge_foreign_pttl);
}
