/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* notify.c: tests of how a blocked acquisition waits for a lock held elsewhere.
 *
 * Every outermost unlock publishes `registry_key-channel:key` (message: the key) in the
 * same script that deletes the key, whatever the wait mode, because a Spring peer or
 * another C process may be waiting for it. In PUBSUB mode (the default) each registry
 * keeps one pattern subscription and a waiter sleeps until the notification for its
 * lock, the holder's remaining TTL, its deadline or its cancellable, whichever comes
 * first. These tests prove that the wake-up really comes from the notification (the
 * SPIN interval is set to a minute, so only a notification or an expiry can explain a
 * fast hand-off), that one unlock lets exactly one waiter through, that an expiring
 * holder is noticed at its expiry, that a killed subscription degrades to SPIN timing
 * and comes back, that a Java-format peer's release wakes a C waiter, that SPIN mode
 * still works, and that closing a registry wakes its waiters and joins its threads.
 * What other clients do (older Spring releases' one channel, keys deleted without a
 * notification) is in notify-foreign.c, the waiters of the whole family while the
 * subscription is down in notify-down.c, the waiting thread they use in notify-helpers.c.
 * The tests of how waiters wake run on both stores from this one source, a private
 * redis-server (`/redis/...`) and a `memory://` store of their own (`/memory/...`),
 * where the wake-up comes from the store's release instead of a subscription; what
 * only a Redis server has (the published messages, the subscriber connections, a
 * killed subscription, a peer speaking the Redis protocol) is checked on Redis only.
 * Each test has its own server or store, so they run in parallel safely.
 */
#include "notify-helpers.h"

/* Counts the lines of CLIENT LIST TYPE pubsub: the subscriber connections. */
static guint
pubsub_clients (redisContext *c)
{
  redisReply *reply = test_redis_command (c, "CLIENT LIST TYPE pubsub");
  guint n = 0;
  const char *p;

  g_assert_cmpint (reply->type, ==, REDIS_REPLY_STRING);
  for (p = reply->str; p < reply->str + reply->len; p++)
    if (*p == '\n')
      n++;
  freeReplyObject (reply);
  return n;
}

/* ---- tests ---- */

static void
check_publish_on_unlock (TestFixture *fx, RedisLockWaitMode mode)
{
  g_autoptr (RedisLockRegistry) r = NULL;
  g_autoptr (RedisLock) lock = NULL;
  redisContext *sub;
  redisReply *reply;
  RedisLockRegistryStats before, after;
  guint notifications = 0;
  gboolean sentinel = FALSE;

  sub = test_redis_connect (fx->server);
  reply = test_redis_command (sub, "PSUBSCRIBE %s", REGISTRY_KEY "-channel:*");
  freeReplyObject (reply);

  r = test_registry_new (fx);
  redis_lock_registry_set_wait_mode (r, mode);
  redis_lock_registry_set_watchdog (r, FALSE); /* no background commands */
  lock = test_obtain (r, "pub");

  /* Warm-up: scripts loaded, connections made. */
  test_lock_ok (lock);
  test_unlock_ok (lock);

  test_lock_ok (lock);
  test_lock_ok (lock);
  test_unlock_ok (lock); /* inner: no Redis, no notification */
  g_assert_true (redis_lock_is_held_by_current_thread (lock));
  redis_lock_registry_get_stats (r, &before);
  test_unlock_ok (lock);
  redis_lock_registry_get_stats (r, &after);
  g_assert_false (redis_lock_is_acquired_in_this_process (lock));
  /* Delete and publish travel together as one command: nothing can come between them. */
  g_assert_cmpuint (after.commands - before.commands, ==, 1);
  g_assert_cmpuint (after.round_trips - before.round_trips, ==, 1);

  /* A sentinel published after the unlocks returned is delivered after their messages. */
  freeReplyObject (
      test_redis_command (fx->redis, "PUBLISH %s %s", REGISTRY_KEY "-channel:sentinel", "end"));
  while (!sentinel)
    {
      g_assert_cmpint (redisGetReply (sub, (void **)&reply), ==, REDIS_OK);
      g_assert_cmpint (reply->type, ==, REDIS_REPLY_ARRAY);
      g_assert_cmpuint (reply->elements, ==, 4);
      g_assert_cmpstr (reply->element[0]->str, ==, "pmessage");
      g_assert_cmpstr (reply->element[1]->str, ==, REGISTRY_KEY "-channel:*");
      if (g_strcmp0 (reply->element[2]->str, REGISTRY_KEY "-channel:sentinel") == 0)
        sentinel = TRUE;
      else
        {
          g_assert_cmpstr (reply->element[2]->str, ==,
                           REGISTRY_KEY "-channel:" REGISTRY_KEY ":pub");
          g_assert_cmpstr (reply->element[3]->str, ==, REGISTRY_KEY ":pub");
          notifications++;
        }
      freeReplyObject (reply);
    }
  g_assert_cmpuint (notifications, ==, 2);
  g_assert_null (test_redis_get (fx->redis, REGISTRY_KEY ":pub"));
  redisFree (sub);
}

static void
test_publish_on_unlock_pubsub (TestFixture *fx, gconstpointer data)
{
  g_test_summary ("In PUBSUB mode every outermost unlock publishes the key on "
                  "registry_key-channel:key in the same command that deletes it; inner "
                  "unlocks publish nothing");
  TEST_SKIP_IF_NO_SERVER (fx);
  check_publish_on_unlock (fx, REDIS_LOCK_WAIT_PUBSUB);
}

static void
test_publish_on_unlock_spin (TestFixture *fx, gconstpointer data)
{
  g_test_summary ("In SPIN mode too every outermost unlock publishes the key on "
                  "registry_key-channel:key in the same command that deletes it, for waiters "
                  "of other registries and Spring peers");
  TEST_SKIP_IF_NO_SERVER (fx);
  check_publish_on_unlock (fx, REDIS_LOCK_WAIT_SPIN);
}

static void
test_wakeup_from_notification (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) a = NULL;
  g_autoptr (RedisLockRegistry) b = NULL;
  g_autoptr (RedisLock) la = NULL;
  g_autoptr (RedisLock) lb = NULL;
  gint64 worst = 0;
  int i;

  g_test_summary ("A waiter in another registry gets the lock within a fraction of a second "
                  "of the unlock, 200 times in a row, although it would otherwise only retry "
                  "after a minute: the wake-up is the unlock notification, and none is missed");
  TEST_SKIP_IF_NO_STORE (fx);

  a = registry_new_slow_spin (fx);
  b = registry_new_slow_spin (fx);
  la = test_obtain (a, "handoff");
  lb = test_obtain (b, "handoff");

  for (i = 0; i < 200; i++)
    {
      Waiter *w;
      gint64 t0, delay;

      test_lock_ok (la);
      /* Odd rounds block in lock (), even rounds in try_lock_for (10 s). */
      w = waiter_start_contended (b, lb, i % 2 == 1, 10000, FALSE);
      t0 = test_now_ms ();
      test_unlock_ok (la);
      waiter_assert_acquired (w, 65000);
      delay = w->returned_at_ms - t0;
      worst = MAX (worst, delay);
      if (delay >= 1000)
        g_test_message ("round %d: waiter woke %" G_GINT64_FORMAT " ms after the unlock", i, delay);
      g_assert_cmpint (delay, <, 1000);
      waiter_finish (w);
    }
  g_test_message ("slowest hand-off: %" G_GINT64_FORMAT " ms", worst);
}

static void
test_wakeup_one_of_two (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) a = NULL;
  g_autoptr (RedisLockRegistry) b = NULL;
  g_autoptr (RedisLockRegistry) c = NULL;
  g_autoptr (RedisLock) la = NULL;
  g_autoptr (RedisLock) lb = NULL;
  g_autoptr (RedisLock) lc = NULL;
  Waiter *wb, *wc, *winner, *loser;
  gint64 t0;
  g_autofree char *value = NULL;

  g_test_summary ("One unlock wakes both waiters of two other registries, but exactly one "
                  "gets the lock; the other goes back to waiting for the next unlock");
  TEST_SKIP_IF_NO_STORE (fx);

  a = registry_new_slow_spin (fx);
  b = registry_new_slow_spin (fx);
  c = registry_new_slow_spin (fx);
  la = test_obtain (a, "early");
  lb = test_obtain (b, "early");
  lc = test_obtain (c, "early");

  test_lock_ok (la);
  wb = waiter_start_contended (b, lb, FALSE, 10000, TRUE);
  wc = waiter_start_contended (c, lc, FALSE, 10000, TRUE);
  t0 = test_now_ms ();
  test_unlock_ok (la);

  TEST_WAIT_UNTIL (waiter_has_returned (wb) || waiter_has_returned (wc), 5000);
  winner = waiter_has_returned (wb) ? wb : wc;
  loser = winner == wb ? wc : wb;
  g_assert_no_error (winner->error);
  g_assert_true (winner->acquired);
  g_assert_cmpint (winner->returned_at_ms - t0, <, 1000);
  value = test_store_get_owner (fx, REGISTRY_KEY ":early");
  test_assert_value_of (value, winner == wb ? b : c);

  /* Time is the subject here: the loser must keep waiting while the winner holds. */
  g_assert_false (waiter_wait_returned (loser, 1000));

  t0 = test_now_ms ();
  waiter_finish (winner);
  waiter_assert_acquired (loser, 10000);
  g_assert_cmpint (loser->returned_at_ms - t0, <, 1000);
  waiter_finish (loser);
  g_assert_false (test_store_exists (fx, REGISTRY_KEY ":early"));
}

static void
test_wakeup_holder_expiry (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) a = NULL;
  g_autoptr (RedisLockRegistry) b = NULL;
  g_autoptr (RedisLock) la = NULL;
  g_autoptr (RedisLock) lb = NULL;
  Waiter *w;
  gint64 t0, delay;
  GError *error = NULL;

  g_test_summary ("A holder that dies (its key expires, nobody publishes) is noticed at its "
                  "expiry: the waiter sleeps only as long as the holder's remaining TTL");
  TEST_SKIP_IF_NO_STORE (fx);

  a = test_registry_new (fx);
  redis_lock_registry_set_expire_after_ms (a, 500);
  redis_lock_registry_set_watchdog (a, FALSE);
  b = registry_new_slow_spin (fx);
  la = test_obtain (a, "expiring");
  lb = test_obtain (b, "expiring");

  t0 = test_now_ms ();
  test_lock_ok (la);
  w = waiter_start_contended (b, lb, FALSE, 10000, FALSE);
  waiter_assert_acquired (w, 15000);
  delay = w->returned_at_ms - t0;
  g_test_message ("acquired %" G_GINT64_FORMAT " ms after the 500 ms lease began", delay);
  g_assert_cmpint (delay, >=, 400);
  g_assert_cmpint (delay, <, 500 + 400);
  waiter_finish (w);

  /* The dead holder learns it at unlock. */
  g_assert_false (redis_lock_unlock (la, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_LEASE_LOST);
  g_clear_error (&error);
}

static void
test_resubscribe_after_kill (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) a = NULL;
  g_autoptr (RedisLockRegistry) b = NULL;
  g_autoptr (RedisLock) la = NULL;
  g_autoptr (RedisLock) lb = NULL;
  Waiter *w;
  gint64 t0;
  long long killed;

  g_test_summary ("When the subscription connection is killed, a waiter falls back to SPIN "
                  "timing and still gets the lock after the unlock; the registry resubscribes, "
                  "and later hand-offs are woken by notifications again");
  TEST_SKIP_IF_NO_SERVER (fx);

  a = registry_new_slow_spin (fx);
  b = test_registry_new (fx);
  redis_lock_registry_set_idle_between_tries_ms (b, 200);
  redis_lock_registry_set_expire_after_ms (b, MINUTE_MS);
  la = test_obtain (a, "kill");
  lb = test_obtain (b, "kill");

  test_lock_ok (la);
  w = waiter_start_contended (b, lb, FALSE, 10000, FALSE);
  /* The first failed attempt may come before the subscription is confirmed. Both
   * registries subscribe: the holder to hear of restarts, the waiter for its wake-up. */
  TEST_WAIT_UNTIL (pubsub_clients (fx->redis) == 2, 10000);
  killed = test_redis_integer (fx->redis, "CLIENT KILL TYPE pubsub");
  g_assert_cmpint (killed, ==, 2);
  t0 = test_now_ms ();
  test_unlock_ok (la);
  waiter_assert_acquired (w, 15000);
  g_test_message ("acquired %" G_GINT64_FORMAT " ms after the unlock", w->returned_at_ms - t0);
  g_assert_cmpint (w->returned_at_ms - t0, <, 3000);
  waiter_finish (w);

  /* The subscription comes back on its own... */
  TEST_WAIT_UNTIL (test_redis_integer (fx->redis, "PUBSUB NUMPAT") == 1, 10000);

  /* ... and wakes waiters again: with a minute between tries only it can be fast. */
  redis_lock_registry_set_idle_between_tries_ms (b, MINUTE_MS);
  test_lock_ok (la);
  w = waiter_start_contended (b, lb, FALSE, 10000, FALSE);
  t0 = test_now_ms ();
  test_unlock_ok (la);
  waiter_assert_acquired (w, 15000);
  g_assert_cmpint (w->returned_at_ms - t0, <, 1000);
  waiter_finish (w);
  g_assert_cmpint (test_redis_integer (fx->redis, "PUBSUB NUMPAT"), ==, 1);
}

static void
test_java_peer (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) b = NULL;
  g_autoptr (RedisLock) lb = NULL;
  g_autofree char *value = NULL;
  Waiter *w;
  gint64 t0;

  g_test_summary ("A lock held by a Spring process (same key, its own client id) wakes a C "
                  "waiter when the Spring process deletes the key and publishes the key on "
                  "registry_key-channel:key");
  TEST_SKIP_IF_NO_SERVER (fx);

  freeReplyObject (test_redis_command (fx->redis, "SET %s %s PX %d", REGISTRY_KEY ":shared",
                                       "6f1c4c3e-java-client-id", MINUTE_MS));
  b = registry_new_slow_spin (fx);
  lb = test_obtain (b, "shared");
  w = waiter_start_contended (b, lb, FALSE, 10000, TRUE);

  t0 = test_now_ms ();
  g_assert_cmpint (test_redis_integer (fx->redis, "DEL %s", REGISTRY_KEY ":shared"), ==, 1);
  freeReplyObject (test_redis_command (fx->redis, "PUBLISH %s %s",
                                       REGISTRY_KEY "-channel:" REGISTRY_KEY ":shared",
                                       REGISTRY_KEY ":shared"));
  waiter_assert_acquired (w, 15000);
  g_assert_cmpint (w->returned_at_ms - t0, <, 1000);
  value = test_redis_get (fx->redis, REGISTRY_KEY ":shared");
  test_assert_value_of (value, b);
  waiter_finish (w);
}

static void
test_spin_mode (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) a = NULL;
  g_autoptr (RedisLockRegistry) b = NULL;
  g_autoptr (RedisLock) la = NULL;
  g_autoptr (RedisLock) lb = NULL;
  Waiter *w;
  guint64 attempts;
  gint64 t0;

  g_test_summary ("In SPIN mode a waiter retries every idle_between_tries_ms, without a "
                  "subscription, and gets the lock within about one interval of the unlock");
  TEST_SKIP_IF_NO_STORE (fx);

  a = registry_new_slow_spin (fx);
  b = test_registry_new (fx);
  redis_lock_registry_set_wait_mode (b, REDIS_LOCK_WAIT_SPIN);
  redis_lock_registry_set_idle_between_tries_ms (b, 300);
  la = test_obtain (a, "spin");
  lb = test_obtain (b, "spin");

  test_lock_ok (la);
  /* The holder's own subscription (made with its first lease) is the only one. */
  if (fx->store == TEST_STORE_REDIS)
    TEST_WAIT_UNTIL (pubsub_clients (fx->redis) == 1, 10000);
  w = waiter_start_contended (b, lb, FALSE, 10000, FALSE);
  attempts = test_stats (b).contended_attempts;
  /* Time is the subject: over 1.2 s the waiter tries about four times. */
  g_assert_false (waiter_wait_returned (w, 1200));
  g_assert_cmpuint (test_stats (b).contended_attempts - attempts, >=, 2);
  g_assert_cmpuint (test_stats (b).contended_attempts - attempts, <=, 6);
  if (fx->store == TEST_STORE_REDIS)
    g_assert_cmpuint (pubsub_clients (fx->redis), ==, 1);

  t0 = test_now_ms ();
  test_unlock_ok (la);
  waiter_assert_acquired (w, 15000);
  g_assert_cmpint (w->returned_at_ms - t0, <, 300 + 400);
  waiter_finish (w);
}

static void
test_subscriber_per_registry (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) a = NULL;
  g_autoptr (RedisLockRegistry) b = NULL;
  RedisLock *la[3], *lb[3];
  Waiter *w[3];
  char name[16];
  int i;

  g_test_summary ("A registry opens its subscription when it first holds a lease (to hear of "
                  "restarts) or when a waiter first needs it, and then one connection serves "
                  "all its waiters, whatever the lock");
  TEST_SKIP_IF_NO_SERVER (fx);

  a = registry_new_slow_spin (fx);
  b = registry_new_slow_spin (fx);
  for (i = 0; i < 3; i++)
    {
      g_snprintf (name, sizeof name, "many-%d", i);
      la[i] = test_obtain (a, name);
      lb[i] = test_obtain (b, name);
      test_lock_ok (la[i]);
    }
  /* a's, made with its first lease; b holds nothing and waits for nothing yet. */
  TEST_WAIT_UNTIL (pubsub_clients (fx->redis) >= 1, 10000);
  g_assert_cmpuint (pubsub_clients (fx->redis), ==, 1);
  for (i = 0; i < 3; i++)
    w[i] = waiter_start_contended (b, lb[i], FALSE, 10000, FALSE);
  TEST_WAIT_UNTIL (pubsub_clients (fx->redis) >= 2, 10000);
  g_assert_cmpuint (pubsub_clients (fx->redis), ==, 2);
  /* One pattern, whoever subscribed to it. */
  g_assert_cmpint (test_redis_integer (fx->redis, "PUBSUB NUMPAT"), ==, 1);

  for (i = 0; i < 3; i++)
    {
      gint64 t0 = test_now_ms ();

      test_unlock_ok (la[i]);
      waiter_assert_acquired (w[i], 15000);
      g_assert_cmpint (w[i]->returned_at_ms - t0, <, 1000);
      waiter_finish (w[i]);
      redis_lock_unref (la[i]);
      redis_lock_unref (lb[i]);
    }
  g_assert_cmpuint (pubsub_clients (fx->redis), ==, 2);
}

static void
test_wait_deadline_and_cancel (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) a = NULL;
  g_autoptr (RedisLockRegistry) b = NULL;
  g_autoptr (RedisLock) la = NULL;
  g_autoptr (RedisLock) lb = NULL;
  Waiter *w;
  gint64 t0;

  g_test_summary (
      "A PUBSUB waiter's sleep is bounded by its deadline and ends when its "
      "cancellable fires, although the holder's TTL and the SPIN interval are a minute");
  TEST_SKIP_IF_NO_STORE (fx);

  a = registry_new_slow_spin (fx);
  b = registry_new_slow_spin (fx);
  la = test_obtain (a, "bounded");
  lb = test_obtain (b, "bounded");
  test_lock_ok (la);

  /* Deadline: not acquired, no error, after about 500 ms. */
  t0 = test_now_ms ();
  w = waiter_start (lb, FALSE, 500, FALSE);
  g_assert_true (waiter_wait_returned (w, 10000));
  g_assert_false (w->acquired);
  g_assert_no_error (w->error);
  g_assert_cmpint (w->returned_at_ms - t0, >=, 450);
  g_assert_cmpint (w->returned_at_ms - t0, <, 500 + 400);
  waiter_finish (w);

  /* Cancellable: G_IO_ERROR_CANCELLED shortly after the cancel. */
  w = waiter_start_contended_full (b, lb, FALSE, 30000, g_cancellable_new (), FALSE);
  t0 = test_now_ms ();
  g_cancellable_cancel (w->cancellable);
  g_assert_true (waiter_wait_returned (w, 10000));
  g_assert_false (w->acquired);
  g_assert_error (w->error, G_IO_ERROR, G_IO_ERROR_CANCELLED);
  g_assert_cmpint (w->returned_at_ms - t0, <, 500);
  waiter_finish (w);

  test_unlock_ok (la);
}

static void
test_close_wakes_waiters (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) a = NULL;
  RedisLockRegistry *b;
  RedisLock *la1, *la2, *lb1, *lb2;
  Waiter *w1, *w2;
  guint baseline;
  gint64 t0;
  GError *error = NULL;

  g_test_summary ("Closing a registry wakes its waiters (lock () and try_lock_for ()) with "
                  "REDIS_LOCK_ERROR_CLOSED at once, and joins its subscriber thread before "
                  "returning");
  TEST_SKIP_IF_NO_STORE (fx);

  a = registry_new_slow_spin (fx);
  /* a starts no watchdog; its subscriber (made with its first lease, to hear of
   * restarts) runs before the baseline is counted. */
  redis_lock_registry_set_watchdog (a, FALSE);
  la1 = test_obtain (a, "close-1");
  la2 = test_obtain (a, "close-2");
  test_lock_ok (la1);
  test_lock_ok (la2);

  baseline = test_thread_count ();
  b = registry_new_slow_spin (fx);
  lb1 = test_obtain (b, "close-1");
  lb2 = test_obtain (b, "close-2");
  w1 = waiter_start_contended (b, lb1, TRUE, -1, FALSE);
  w2 = waiter_start_contended (b, lb2, FALSE, 30000, FALSE);
  if (fx->store == TEST_STORE_REDIS)
    TEST_WAIT_UNTIL (pubsub_clients (fx->redis) == 2, 10000);

  t0 = test_now_ms ();
  redis_lock_registry_close (b);
  g_assert_cmpint (test_now_ms () - t0, <, 2000);
  g_assert_true (waiter_wait_returned (w1, 2000));
  g_assert_true (waiter_wait_returned (w2, 2000));
  g_assert_false (w1->acquired);
  g_assert_false (w2->acquired);
  g_assert_error (w1->error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CLOSED);
  g_assert_error (w2->error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CLOSED);
  g_assert_cmpint (w1->returned_at_ms - t0, <, 1000);
  g_assert_cmpint (w2->returned_at_ms - t0, <, 1000);
  waiter_finish (w1);
  waiter_finish (w2);

  /* Every thread the registry started is gone once close () has returned. */
  /* A joined thread can linger in /proc for an instant after pthread_join () returns;
   * the short bound tolerates that, not a thread left running. */
  TEST_WAIT_UNTIL (test_thread_count () == baseline, 200);
  if (fx->store == TEST_STORE_REDIS)
    TEST_WAIT_UNTIL (pubsub_clients (fx->redis) == 1, 5000);

  g_assert_null (redis_lock_registry_obtain (b, "close-3", &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CLOSED);
  g_clear_error (&error);
  redis_lock_unref (lb1);
  redis_lock_unref (lb2);
  redis_lock_registry_unref (b);

  /* The holder in the other registry is unaffected. */
  test_unlock_ok (la1);
  test_unlock_ok (la2);
  redis_lock_unref (la1);
  redis_lock_unref (la2);
}



int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);

  test_add_redis ("/notify/publish/on-unlock/pubsub-mode", NULL, test_publish_on_unlock_pubsub);
  test_add_redis ("/notify/publish/on-unlock/spin-mode", NULL, test_publish_on_unlock_spin);
  test_add_stores ("/notify/wakeup/from-notification", NULL, test_wakeup_from_notification);
  test_add_stores ("/notify/wakeup/one-of-two", NULL, test_wakeup_one_of_two);
  test_add_stores ("/notify/wakeup/holder-expiry", NULL, test_wakeup_holder_expiry);
  test_add_stores ("/notify/wakeup/deadline-and-cancel", NULL, test_wait_deadline_and_cancel);
  test_add_redis ("/notify/subscriber/one-per-registry", NULL, test_subscriber_per_registry);
  test_add_redis ("/notify/subscriber/resubscribe-after-kill", NULL, test_resubscribe_after_kill);
  test_add_redis ("/notify/peer/java-format", NULL, test_java_peer);
  test_add_stores ("/notify/spin/acquires-after-release", NULL, test_spin_mode);
  test_add_stores ("/notify/close/wakes-waiters-and-joins", NULL, test_close_wakes_waiters);
  notify_add_foreign_tests ();
  notify_add_down_tests ();
  return g_test_run ();
}
