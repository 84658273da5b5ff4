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
 * Older Spring releases publish on the one channel `registry_key-channel`: a release
 * made by their script (or any message there) wakes a C waiter, releases publish there
 * too when the registry's legacy setting asks for it, and the registry's own
 * subscriber, which then hears each release twice, still counts as nobody else.
 * The tests of how waiters wake run on both stores from this one source, a private
 * redis-server (`/redis/...`) and a `memory://` store of their own (`/memory/...`),
 * where the wake-up comes from the store's release instead of a subscription; what
 * only a Redis server has (the published messages, the subscriber connections, a
 * killed subscription, a peer speaking the Redis protocol) is checked on Redis only.
 * Each test has its own server or store, so they run in parallel safely.
 */
#include "common.h"

#define REGISTRY_KEY TEST_REGISTRY_KEY
#define MINUTE_MS 60000

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

/* ---- a thread that waits for a lock ---- */

typedef struct
{
  RedisLock *lock;
  gboolean use_lock; /* redis_lock_lock () rather than try_lock_for () */
  gint64 wait_ms;
  GCancellable *cancellable;
  gboolean hold; /* once acquired, keep the lock until waiter_finish () */

  TestSync sync;
  gboolean returned;
  gboolean acquired;
  GError *error;
  gint64 returned_at_ms;
  gboolean release;
  gboolean unlocked;
  GError *unlock_error;
  GThread *thread;
} Waiter;

static gpointer
waiter_thread (gpointer data)
{
  Waiter *w = data;
  GError *error = NULL;
  gboolean ok;

  if (w->use_lock)
    ok = redis_lock_lock (w->lock, &error);
  else
    ok = redis_lock_try_lock_for (w->lock, w->wait_ms, w->cancellable, &error);

  test_sync_lock (&w->sync);
  w->returned = TRUE;
  w->returned_at_ms = test_now_ms ();
  w->acquired = ok;
  w->error = error;
  test_sync_broadcast (&w->sync);
  if (ok)
    {
      while (w->hold && !w->release)
        test_sync_wait (&w->sync);
      test_sync_unlock (&w->sync);
      error = NULL;
      ok = redis_lock_unlock (w->lock, &error);
      test_sync_lock (&w->sync);
      w->unlocked = ok;
      w->unlock_error = error;
    }
  test_sync_unlock (&w->sync);
  return NULL;
}

/* Starts a thread that calls redis_lock_lock () (@use_lock) or redis_lock_try_lock_for
 * (@wait_ms, @cancellable) on @lock. Takes ownership of @cancellable. */
static Waiter *
waiter_start_full (RedisLock *lock, gboolean use_lock, gint64 wait_ms, GCancellable *cancellable,
                   gboolean hold)
{
  Waiter *w = g_new0 (Waiter, 1);

  w->lock = redis_lock_ref (lock);
  w->use_lock = use_lock;
  w->wait_ms = wait_ms;
  w->cancellable = cancellable;
  w->hold = hold;
  test_sync_init (&w->sync);
  w->thread = g_thread_new ("waiter", waiter_thread, w);
  return w;
}

static Waiter *
waiter_start (RedisLock *lock, gboolean use_lock, gint64 wait_ms, gboolean hold)
{
  return waiter_start_full (lock, use_lock, wait_ms, NULL, hold);
}

/* Waits up to @timeout_ms for the waiter's acquisition call to return; returns whether it did. */
static gboolean
waiter_wait_returned (Waiter *w, gint64 timeout_ms)
{
  gint64 deadline = g_get_monotonic_time () + timeout_ms * 1000;
  gboolean returned;

  test_sync_lock (&w->sync);
  while (!w->returned && test_sync_wait_until (&w->sync, deadline))
    ;
  returned = w->returned;
  test_sync_unlock (&w->sync);
  return returned;
}

static gboolean
waiter_has_returned (Waiter *w)
{
  gboolean returned;

  test_sync_lock (&w->sync);
  returned = w->returned;
  test_sync_unlock (&w->sync);
  return returned;
}

/* Lets a holding waiter unlock, joins it, checks its unlock succeeded, and frees it. */
static void
waiter_finish (Waiter *w)
{
  test_sync_lock (&w->sync);
  w->release = TRUE;
  test_sync_broadcast (&w->sync);
  test_sync_unlock (&w->sync);
  g_thread_join (w->thread);

  if (w->acquired)
    {
      g_assert_no_error (w->unlock_error);
      g_assert_true (w->unlocked);
    }
  g_clear_error (&w->error);
  g_clear_error (&w->unlock_error);
  g_clear_object (&w->cancellable);
  redis_lock_unref (w->lock);
  test_sync_clear (&w->sync);
  g_free (w);
}

/* Asserts that the waiter's call returns within @timeout_ms, having acquired the lock
 * without an error. */
static void
waiter_assert_acquired (Waiter *w, gint64 timeout_ms)
{
  g_assert_true (waiter_wait_returned (w, timeout_ms));
  g_assert_no_error (w->error);
  g_assert_true (w->acquired);
}

/* ---- registries and locks ---- */

/* A registry whose waiters could only be woken by a notification or an expiry: a SPIN
 * retry would come after a minute, and the leases it takes last a minute. */
static RedisLockRegistry *
registry_new_slow_spin (TestFixture *fx)
{
  RedisLockRegistry *r = test_registry_new (fx);

  redis_lock_registry_set_idle_between_tries_ms (r, MINUTE_MS);
  redis_lock_registry_set_expire_after_ms (r, MINUTE_MS);
  return r;
}

/* Starts a waiter on @lock and returns once it has found the lock held in Redis at least
 * once, i.e. it is now (or about to be) asleep waiting for the holder. */
static Waiter *
waiter_start_contended_full (RedisLockRegistry *r, RedisLock *lock, gboolean use_lock,
                             gint64 wait_ms, GCancellable *cancellable, gboolean hold)
{
  guint64 before = test_stats (r).contended_attempts;
  Waiter *w = waiter_start_full (lock, use_lock, wait_ms, cancellable, hold);

  TEST_WAIT_UNTIL (test_stats (r).contended_attempts > before || waiter_has_returned (w), 10000);
  g_assert_false (waiter_has_returned (w));
  return w;
}

static Waiter *
waiter_start_contended (RedisLockRegistry *r, RedisLock *lock, gboolean use_lock, gint64 wait_ms,
                        gboolean hold)
{
  return waiter_start_contended_full (r, lock, use_lock, wait_ms, NULL, hold);
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
  test_add_stores ("/notify/spin/acquires-after-release", NULL, test_spin_mode);
  test_add_stores ("/notify/close/wakes-waiters-and-joins", NULL, test_close_wakes_waiters);
  return g_test_run ();
}
