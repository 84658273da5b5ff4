/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* notify-foreign.c: waiters woken by what other clients do. Older Spring releases
 * publish on the one channel `registry_key-channel`: a release made by their script
 * (or any message there) wakes a C waiter, releases publish there too when the
 * registry's legacy setting asks for it, and the registry's own subscriber, which then
 * hears each release twice, still counts as nobody else. A key deleted or expired
 * without any notification wakes a waiter through key tracking (on by default), and
 * another client overwriting the key keeps it waiting. Part of the notify test program
 * (notify.c adds these tests).
 */
#include <string.h>

#include "notify-helpers.h"

/* ---- older Spring releases: the one channel `registry_key-channel` ---- */

#define LEGACY_CHANNEL REGISTRY_KEY "-channel"

/* Starts a waiter on @lock and returns once it has made a failed attempt that counts: one
 * made with the subscription confirmed (the first attempt does not wait for it, the
 * second follows its confirmation), so only a message heard from now on can wake it
 * before the SPIN interval. */
static Waiter *
waiter_start_watched (RedisLockRegistry *r, RedisLock *lock, gint64 wait_ms)
{
  guint64 before = test_stats (r).contended_attempts;
  Waiter *w = waiter_start_full (lock, FALSE, wait_ms, NULL, TRUE);

  TEST_WAIT_UNTIL (test_stats (r).contended_attempts >= before + 2 || waiter_has_returned (w),
                   10000);
  g_assert_false (waiter_has_returned (w));
  return w;
}

/* Spring Integration's pub-sub unlock before its per-key channels, in our words: the
 * owner's key is unlinked and the key published on the one channel ARGV[2]. */
#define OLD_SPRING_UNLOCK                                                                          \
  "if redis.call('GET', KEYS[1]) == ARGV[1] and redis.call('UNLINK', KEYS[1]) == 1 then "         \
  "redis.call('PUBLISH', ARGV[2], KEYS[1]) return 1 end return 0"

static void
test_legacy_release_wakes (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) b = NULL;
  g_autoptr (RedisLock) lb = NULL;
  g_autofree char *value = NULL;
  Waiter *w;
  gint64 t0, delay;

  g_test_summary ("A release by an older Spring registry (its unlock script deletes the key "
                  "and publishes it on registry_key-channel only) wakes a waiter at once, "
                  "although it would otherwise retry only after a minute");
  TEST_SKIP_IF_NO_SERVER (fx);

  freeReplyObject (test_redis_command (fx->redis, "SET %s %s PX %d", REGISTRY_KEY ":old",
                                       "3b0d0a5e-old-spring-id", MINUTE_MS));
  b = registry_new_slow_spin (fx);
  lb = test_obtain (b, "old");
  w = waiter_start_watched (b, lb, 30000);

  t0 = test_now_ms ();
  g_assert_cmpint (test_redis_integer (fx->redis, "EVAL %s 1 %s %s %s", OLD_SPRING_UNLOCK,
                                       REGISTRY_KEY ":old", "3b0d0a5e-old-spring-id",
                                       LEGACY_CHANNEL),
                   ==, 1);
  waiter_assert_acquired (w, 35000);
  delay = w->returned_at_ms - t0;
  g_test_message ("woken %" G_GINT64_FORMAT " ms after the older Spring release", delay);
  g_assert_cmpint (delay, <, 1000);
  value = test_redis_get (fx->redis, REGISTRY_KEY ":old");
  test_assert_value_of (value, b);
  waiter_finish (w);
}

static void
test_legacy_other_message_wakes_all (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) b = NULL;
  g_autoptr (RedisLock) lb = NULL;
  Waiter *w;
  gint64 t0, delay;

  g_test_summary ("A message on registry_key-channel that names no key of the registry wakes "
                  "its waiters all the same: it may stand for any of their locks");
  TEST_SKIP_IF_NO_SERVER (fx);

  freeReplyObject (test_redis_command (fx->redis, "SET %s %s PX %d", REGISTRY_KEY ":any",
                                       "3b0d0a5e-old-spring-id", MINUTE_MS));
  b = registry_new_slow_spin (fx);
  lb = test_obtain (b, "any");
  w = waiter_start_watched (b, lb, 30000);

  /* Deleted without a notification: only the odd message can wake the waiter now. */
  g_assert_cmpint (test_redis_integer (fx->redis, "DEL %s", REGISTRY_KEY ":any"), ==, 1);
  t0 = test_now_ms ();
  freeReplyObject (test_redis_command (fx->redis, "PUBLISH %s %s", LEGACY_CHANNEL, "not-a-key"));
  waiter_assert_acquired (w, 35000);
  delay = w->returned_at_ms - t0;
  g_test_message ("woken %" G_GINT64_FORMAT " ms after the message", delay);
  g_assert_cmpint (delay, <, 1000);
  waiter_finish (w);
}

/* Locks and unlocks "pub" in @r, then publishes a marker on LEGACY_CHANNEL, and returns
 * how many messages naming the key @sub (subscribed to LEGACY_CHANNEL) heard first. */
static guint
legacy_messages_of_release (TestFixture *fx, redisContext *sub, RedisLockRegistry *r)
{
  g_autoptr (RedisLock) lock = test_obtain (r, "pub");
  gboolean marker = FALSE;
  guint n = 0;

  test_lock_ok (lock);
  test_unlock_ok (lock);
  freeReplyObject (test_redis_command (fx->redis, "PUBLISH %s %s", LEGACY_CHANNEL, "marker"));
  while (!marker)
    {
      redisReply *reply;

      g_assert_cmpint (redisGetReply (sub, (void **) &reply), ==, REDIS_OK);
      g_assert_cmpint (reply->type, ==, REDIS_REPLY_ARRAY);
      g_assert_cmpuint (reply->elements, ==, 3);
      g_assert_cmpstr (reply->element[0]->str, ==, "message");
      g_assert_cmpstr (reply->element[1]->str, ==, LEGACY_CHANNEL);
      if (g_strcmp0 (reply->element[2]->str, "marker") == 0)
        marker = TRUE;
      else
        {
          g_assert_cmpstr (reply->element[2]->str, ==, REGISTRY_KEY ":pub");
          n++;
        }
      freeReplyObject (reply);
    }
  return n;
}

static void
test_legacy_publish_setting (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) r = NULL;
  redisContext *sub;

  g_test_summary ("With redis_lock_registry_set_legacy_spring_channel (TRUE) a release also "
                  "publishes its key on registry_key-channel, where an older Spring waiter "
                  "listens; without it (the default), it does not");
  TEST_SKIP_IF_NO_SERVER (fx);

  sub = test_redis_connect (fx->server);
  freeReplyObject (test_redis_command (sub, "SUBSCRIBE %s", LEGACY_CHANNEL));
  r = test_registry_new (fx);
  redis_lock_registry_set_watchdog (r, FALSE);

  g_assert_cmpuint (legacy_messages_of_release (fx, sub, r), ==, 0);
  redis_lock_registry_set_legacy_spring_channel (r, TRUE);
  g_assert_cmpuint (legacy_messages_of_release (fx, sub, r), ==, 1);
  /* An operator's forced unlock too. */
  freeReplyObject (test_redis_command (fx->redis, "SET %s %s PX %d", REGISTRY_KEY ":pub",
                                       "3b0d0a5e-old-spring-id", MINUTE_MS));
  g_assert_true (redis_lock_registry_force_unlock (r, "pub", NULL));
  g_assert_cmpuint (legacy_messages_of_release (fx, sub, r), ==, 2);
  redis_lock_registry_set_legacy_spring_channel (r, FALSE);
  g_assert_cmpuint (legacy_messages_of_release (fx, sub, r), ==, 0);
  redisFree (sub);
}

typedef struct
{
  RedisLock *lock;
  gint tids[2];
} Streak;

static void
streak_thread (guint i, gpointer data)
{
  Streak *s = data;

  g_atomic_int_set (&s->tids[i], test_thread_id ());
  g_assert_true (redis_lock_lock (s->lock, NULL));
  g_assert_true (redis_lock_unlock (s->lock, NULL));
}

/* Whether a streak of local hand-offs in @r that ends while another thread still waits
 * keeps the lease (TRUE) or releases it (FALSE), with the subscription of @r confirmed
 * and no other listener. */
/* Makes @registry hear releases: one wait of its (behind the fixture's registry) asks
 * for the subscription, and a probe it hears shows that its PSUBSCRIBE was answered. */
static void
registry_hears_releases (TestFixture *fx, RedisLockRegistry *registry)
{
  g_autoptr (RedisLock) held = test_obtain (fx->registry, "subscribe-probe");
  g_autoptr (RedisLock) probe = test_obtain (registry, "subscribe-probe");
  guint64 notifications;

  test_lock_ok (held);
  g_assert_false (redis_lock_try_lock_for (probe, 50, NULL, NULL));
  notifications = test_stats (registry).notifications;
  test_unlock_ok (held);
  while (test_stats (registry).notifications == notifications)
    {
      freeReplyObject (test_redis_command (fx->redis, "PUBLISH %s %s",
                                           REGISTRY_KEY "-channel:probe", "probe"));
      g_usleep (1000);
    }
}

static gboolean
streak_kept (TestFixture *fx, RedisLockRegistry *r, const char *name)
{
  g_autoptr (RedisLock) lock = test_obtain (r, name);
  RedisLockRegistryStats before, after;
  Streak s = { lock, { 0, 0 } };
  GThread *threads;

  /* A notification it hears shows it counts itself among the receivers. */
  registry_hears_releases (fx, r);
  test_lock_ok (lock);
  threads = test_run_threads_in_background (2, streak_thread, &s);
  test_wait_threads_blocked (s.tids, 2, 10000);
  redis_lock_registry_get_stats (r, &before);
  /* Handed to one waiter (the streak's bound), whose unlock ends the streak with the
   * other still waiting: kept, or released and taken again by it. */
  test_unlock_ok (lock);
  g_thread_join (threads);
  redis_lock_registry_get_stats (r, &after);
  g_assert_cmpuint (after.local_handoffs - before.local_handoffs, >=, 1);
  return after.acquisitions == before.acquisitions;
}

static void
test_legacy_own_receivers (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) r = NULL;

  g_test_summary ("With the older Spring channel on, a registry's own subscriber hears a "
                  "release twice (it listens on both channels) and still counts as nobody "
                  "else: with no other listener, a streak's lease is kept, as without it");
  TEST_SKIP_IF_NO_SERVER (fx);

  r = test_registry_new (fx);
  redis_lock_registry_set_max_local_handoffs (r, 1);
  g_assert_true (streak_kept (fx, r, "plain"));
  redis_lock_registry_set_legacy_spring_channel (r, TRUE);
  g_assert_true (streak_kept (fx, r, "legacy"));
}

/* ---- keys changed without a notification (key tracking, on by default) ---- */

/* How many clients of the server have key tracking on (flag `t` in CLIENT LIST). */
static guint
tracking_clients (redisContext *c)
{
  redisReply *reply = test_redis_command (c, "CLIENT LIST");
  g_auto (GStrv) lines = NULL;
  guint n = 0;

  g_assert_cmpint (reply->type, ==, REDIS_REPLY_STRING);
  lines = g_strsplit (reply->str, "\n", -1);
  freeReplyObject (reply);
  for (guint i = 0; lines[i] != NULL; i++)
    {
      const char *flags = strstr (lines[i], " flags=");
      if (flags != NULL && strchr (flags + 7, 't') != NULL
          && strchr (flags + 7, 't') < strchr (flags + 7, ' '))
        n++;
    }
  return n;
}

static void
test_tracking_overwrite_keeps_waiting (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) b = NULL;
  g_autoptr (RedisLock) lb = NULL;
  g_autofree char *value = NULL;
  guint64 attempts;
  Waiter *w;
  gint64 t0, delay;

  g_test_summary ("With key tracking on, a key overwritten by another foreign holder without "
                  "a notification wakes the waiter, which tries once and goes on waiting for "
                  "the new holder; that holder's DEL (no notification either) then wakes it "
                  "at once");
  TEST_SKIP_IF_NO_SERVER (fx);

  freeReplyObject (test_redis_command (fx->redis, "SET %s %s PX %d", REGISTRY_KEY ":over",
                                       "foreign-a", MINUTE_MS));
  /* Key tracking on: the default. */
  b = registry_new_slow_spin (fx);
  lb = test_obtain (b, "over");
  w = waiter_start_watched (b, lb, 30000);

  attempts = test_stats (b).contended_attempts;
  freeReplyObject (test_redis_command (fx->redis, "SET %s %s PX %d", REGISTRY_KEY ":over",
                                       "foreign-b", MINUTE_MS));
  /* Woken: it tried again (and read the key again, which tracks it again). */
  TEST_WAIT_UNTIL (test_stats (b).contended_attempts > attempts || waiter_has_returned (w), 5000);
  g_assert_false (waiter_has_returned (w));
  value = test_redis_get (fx->redis, REGISTRY_KEY ":over");
  g_assert_cmpstr (value, ==, "foreign-b");

  t0 = test_now_ms ();
  g_assert_cmpint (test_redis_integer (fx->redis, "DEL %s", REGISTRY_KEY ":over"), ==, 1);
  waiter_assert_acquired (w, 35000);
  delay = w->returned_at_ms - t0;
  g_test_message ("woken %" G_GINT64_FORMAT " ms after the second holder's DEL", delay);
  g_assert_cmpint (delay, <, 1000);
  g_free (value);
  value = test_redis_get (fx->redis, REGISTRY_KEY ":over");
  test_assert_value_of (value, b);
  waiter_finish (w);
}

static void
test_tracking_delete_after_own_release (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) r = NULL;
  g_autoptr (RedisLock) lock = NULL;
  g_autofree char *value = NULL;
  guint64 notifications;
  Waiter *w;
  gint64 t0, delay;

  g_test_summary ("With key tracking on, a registry releases a key nobody tracked (its own "
                  "notification, no invalidation follows); a foreign client then takes it and "
                  "deletes it without a notification: the registry's waiter is woken at once "
                  "(the earlier notification must not hide the later change)");
  TEST_SKIP_IF_NO_SERVER (fx);

  r = registry_new_slow_spin (fx);
  lock = test_obtain (r, "own");
  registry_hears_releases (fx, r);
  test_lock_ok (lock);
  notifications = test_stats (r).notifications;
  test_unlock_ok (lock);
  /* Heard its own release before anything below happens. */
  TEST_WAIT_UNTIL (test_stats (r).notifications > notifications, 5000);

  freeReplyObject (test_redis_command (fx->redis, "SET %s %s PX %d", REGISTRY_KEY ":own",
                                       "foreign-a", MINUTE_MS));
  w = waiter_start_watched (r, lock, 30000);
  t0 = test_now_ms ();
  g_assert_cmpint (test_redis_integer (fx->redis, "DEL %s", REGISTRY_KEY ":own"), ==, 1);
  waiter_assert_acquired (w, 35000);
  delay = w->returned_at_ms - t0;
  g_test_message ("woken %" G_GINT64_FORMAT " ms after the DEL", delay);
  g_assert_cmpint (delay, <, 1000);
  value = test_redis_get (fx->redis, REGISTRY_KEY ":own");
  test_assert_value_of (value, r);
  waiter_finish (w);
}

static void
test_tracking_default (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) r = NULL;
  g_autoptr (RedisLock) lock = NULL;
  Waiter *w;

  g_test_summary ("Key tracking is on by default: the subscriber and the connection that read "
                  "the waited-for key have it on (CLIENT LIST flag t); after "
                  "redis_lock_registry_set_key_tracking (FALSE) no connection of a waiting "
                  "registry has it");
  TEST_SKIP_IF_NO_SERVER (fx);

  freeReplyObject (test_redis_command (fx->redis, "SET %s %s PX %d", REGISTRY_KEY ":off",
                                       "foreign-a", MINUTE_MS));
  g_assert_cmpuint (tracking_clients (fx->redis), ==, 0);

  r = registry_new_slow_spin (fx);
  g_assert_true (redis_lock_registry_get_key_tracking (r));
  lock = test_obtain (r, "off");
  w = waiter_start_watched (r, lock, 500);
  /* The subscriber, and the data connection that read the key. */
  g_assert_cmpuint (tracking_clients (fx->redis), ==, 2);
  g_assert_true (waiter_wait_returned (w, 10000));
  g_assert_false (w->acquired);
  waiter_finish (w);
  g_clear_pointer (&lock, redis_lock_unref);
  g_clear_pointer (&r, redis_lock_registry_unref);
  /* The closed registry's connections gone from the server's list. */
  TEST_WAIT_UNTIL (tracking_clients (fx->redis) == 0, 5000);

  r = registry_new_slow_spin (fx);
  redis_lock_registry_set_key_tracking (r, FALSE);
  g_assert_false (redis_lock_registry_get_key_tracking (r));
  lock = test_obtain (r, "off");
  w = waiter_start_watched (r, lock, 500);
  g_assert_cmpuint (tracking_clients (fx->redis), ==, 0);
  g_assert_true (waiter_wait_returned (w, 10000));
  g_assert_false (w->acquired);
  waiter_finish (w);
}

void
notify_add_foreign_tests (void)
{
  test_add_redis ("/notify/legacy/older-spring-release-wakes", NULL, test_legacy_release_wakes);
  test_add_redis ("/notify/legacy/other-message-wakes-all", NULL,
                  test_legacy_other_message_wakes_all);
  test_add_redis ("/notify/legacy/publish-with-setting", NULL, test_legacy_publish_setting);
  test_add_redis ("/notify/legacy/own-receivers", NULL, test_legacy_own_receivers);
  test_add_redis ("/notify/tracking/overwrite-keeps-waiting", NULL,
                  test_tracking_overwrite_keeps_waiting);
  test_add_redis ("/notify/tracking/delete-after-own-release", NULL,
                  test_tracking_delete_after_own_release);
  test_add_redis ("/notify/tracking/on-by-default", NULL, test_tracking_default);
}
