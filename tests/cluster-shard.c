/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* cluster-shard.c: sharded unlock notifications on a real Redis Cluster.
 *
 * A release on a Cluster is published with SPUBLISH on the key's shard channel (a
 * channel in the key's slot) and, while classic notifications are on (the default,
 * for Spring peers), with a classic PUBLISH too; waiters subscribe to the shard
 * channel of the key they wait for, on its master. The tests watch the channels from
 * outside with raw SSUBSCRIBE and PSUBSCRIBE connections, and check that a waiter in
 * another registry is woken by a sharded-only release at once, also after the key's
 * slot migrated to another master and after its master failed over to its replica,
 * both while the waiter waited; that a key's subscription ends as soon as its last
 * waiter leaves, however it leaves, and stays however long a waiter sleeps; and that
 * Spring peers, which publish and subscribe classically only, still wake and are woken
 * with the defaults. The harmless tests share one cluster of three masters with a
 * replica each; the failover starts its own. cluster-shard-family.c has the releases
 * of sets, read-write locks, semaphores and forced unlocks.
 */
#include "config.h"

#include <string.h>

#include "common.h"
#include "cluster-common.h"

#define REGISTRY_KEY TEST_REGISTRY_KEY
/* How soon a waiter must be woken by a release, well under the holder's TTL and the
 * waiter's spin interval: only a notification can wake it that soon. ThreadSanitizer
 * slows every memory access several times over (and the failover's waiter has just
 * been through reconnections): there the bound is wider, still far under both. */
#ifdef __SANITIZE_THREAD__
#define WAKE_MS 250
#else
#define WAKE_MS 50
#endif

/* Polls until some running master of @cluster has a client subscribed to a pattern:
 * the waiter registry's classic subscription, back after a failover (10 s at most). */
static void
wait_pattern_subscribed (RedisLockTestCluster *cluster)
{
  gint64 end = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;

  for (;;)
    {
      for (guint node = 0; node < redis_lock_test_cluster_get_n_nodes (cluster); node++)
        {
          redisContext *c;
          redisReply *reply;
          long long n;

          if (redis_lock_test_cluster_get_pid (cluster, node) == 0)
            continue;
          c = node_connect (cluster, node);
          reply = test_redis_command (c, "PUBSUB NUMPAT");
          n = reply->integer;
          freeReplyObject (reply);
          redisFree (c);
          if (n > 0)
            return;
        }
      g_assert_cmpint (g_get_monotonic_time (), <, end);
      g_usleep (2000);
    }
}

/* The channel of a release of @key on a cluster with classic notifications off: heard
 * by an SSUBSCRIBE client on the key's master, in the key's slot; not by classic
 * pattern subscribers on any master (a classic marker published after it on the
 * key's master reaches them first). */
static void
check_sharded_only (RedisLockTestCluster *cluster, RedisLockRegistry *registry,
                    const char *registry_key, const char *name)
{
  g_autoptr (RedisLock) lock = test_obtain (registry, name);
  const char *key = redis_lock_get_key (lock);
  g_autofree char *channel = shard_channel (registry_key, key);
  g_autofree char *pattern = g_strconcat (registry_key, "-channel:*", NULL);
  g_autofree char *marker_channel = g_strconcat (registry_key, "-channel:marker", NULL);
  g_autofree char *heard_channel = NULL, *payload = NULL;
  guint owner = key_owner (cluster, key);
  redisContext *shard, *classic[3], *c;
  redisReply *reply;

  g_assert_cmpuint (redis_lock_test_cluster_key_slot (channel), ==,
                    redis_lock_test_cluster_key_slot (key));
  c = node_connect (cluster, owner);
  reply = test_redis_command (c, "CLUSTER KEYSLOT %s", channel);
  g_assert_cmpint (reply->integer, ==, redis_lock_test_cluster_key_slot (key));
  freeReplyObject (reply);
  shard = subscribed (cluster, owner, "SSUBSCRIBE", channel);
  for (guint i = 0; i < 3; i++)
    classic[i] = subscribed (cluster, i, "PSUBSCRIBE", pattern);

  test_lock_ok (lock);
  test_unlock_ok (lock);
  freeReplyObject (test_redis_command (c, "PUBLISH %s marker", marker_channel));
  redisFree (c);

  payload = next_message (shard, "smessage", &heard_channel);
  g_assert_cmpstr (heard_channel, ==, channel);
  g_assert_cmpstr (payload, ==, key);
  redisFree (shard);
  for (guint i = 0; i < 3; i++)
    {
      g_autofree char *first = next_pmessage_of (classic[i], key, "marker");
      g_assert_cmpstr (first, ==, "marker");
      redisFree (classic[i]);
    }
}

static void
test_sharded_only (void)
{
  RedisLockTestCluster *cluster = common_cluster ();
  g_autoptr (RedisLockRegistry) registry = NULL;
  g_autoptr (RedisLockRegistry) tagged = NULL;
  g_autoptr (GError) error = NULL;

  g_test_summary ("With classic notifications off, a release on a cluster is an SPUBLISH on a "
                  "channel in the key's slot (registry_key-channel:{key}, or the key's own "
                  "hash tag): an SSUBSCRIBE client on the key's master hears it, a classic "
                  "pattern subscriber on no master does");
  if (cluster == NULL)
    return;
  registry = test_registry_new_on (redis_lock_test_cluster_get_url (cluster));
  g_assert_true (redis_lock_registry_get_classic_notifications (registry));
  redis_lock_registry_set_classic_notifications (registry, FALSE);
  g_assert_false (redis_lock_registry_get_classic_notifications (registry));
  for (guint node = 0; node < 3; node++)
    {
      g_autofree char *name = name_on (cluster, node, "sharded", 0);
      check_sharded_only (cluster, registry, REGISTRY_KEY, name);
    }

  /* A registry key with a hash tag: every key and channel in the tag's slot. */
  tagged = redis_lock_registry_new (redis_lock_test_cluster_get_url (cluster), "{tagged}", &error);
  g_assert_no_error (error);
  redis_lock_registry_set_classic_notifications (tagged, FALSE);
  check_sharded_only (cluster, tagged, "{tagged}", "name");
}

static void
test_default_publishes_both (void)
{
  RedisLockTestCluster *cluster = common_cluster ();
  g_autoptr (RedisLockRegistry) registry = NULL;
  g_autoptr (RedisLock) lock = NULL;
  g_autofree char *name = NULL, *channel = NULL, *heard = NULL;
  g_autofree char *sharded = NULL, *classic_payload = NULL;
  redisContext *shard, *classic;
  guint owner;

  g_test_summary ("By default a release on a cluster is published both ways: SPUBLISH on the "
                  "key's shard channel and a classic PUBLISH that a Spring-style pattern "
                  "subscriber on another master hears");
  if (cluster == NULL)
    return;
  registry = test_registry_new_on (redis_lock_test_cluster_get_url (cluster));
  name = name_on (cluster, 1, "both", 0);
  lock = test_obtain (registry, name);
  owner = key_owner (cluster, redis_lock_get_key (lock));
  channel = shard_channel (REGISTRY_KEY, redis_lock_get_key (lock));
  shard = subscribed (cluster, owner, "SSUBSCRIBE", channel);
  classic = subscribed (cluster, (owner + 1) % 3, "PSUBSCRIBE", REGISTRY_KEY "-channel:*");

  test_lock_ok (lock);
  test_unlock_ok (lock);
  sharded = next_message (shard, "smessage", &heard);
  g_assert_cmpstr (heard, ==, channel);
  g_assert_cmpstr (sharded, ==, redis_lock_get_key (lock));
  classic_payload = next_pmessage_of (classic, redis_lock_get_key (lock), NULL);
  g_assert_cmpstr (classic_payload, ==, redis_lock_get_key (lock));
  redisFree (shard);
  redisFree (classic);
}

/* Starts @w waiting for @lock (held by another registry) and returns once its registry
 * found the lock held and its shard subscription is on @node. */
static GThread *
start_waiter (RedisLockTestCluster *cluster, RedisLockRegistry *registry, TestWaiter *w,
              RedisLock *lock, guint node)
{
  g_autofree char *channel = shard_channel (REGISTRY_KEY, redis_lock_get_key (lock));
  guint64 contended = test_stats (registry).contended_attempts;
  GThread *thread;

  w->lock = lock;
  thread = g_thread_new ("waiter", test_waiter_main, w);
  g_assert_true (test_wait_contended (registry, contended + 1, 10000));
  wait_shard_subscribed (cluster, node, channel);
  return thread;
}

/* Unlocks @held and checks that @w's waiter took the lock within WAKE_MS. */
static void
release_and_check_woken (RedisLock *held, TestWaiter *w, GThread *thread)
{
  gint64 unlocked_ms;

  test_unlock_ok (held);
  unlocked_ms = test_now_ms ();
  g_thread_join (thread);
  g_assert_true (w->acquired);
  g_test_message ("woken %" G_GINT64_FORMAT " ms after the unlock", w->returned_ms - unlocked_ms);
  g_assert_cmpint (w->returned_ms - unlocked_ms, <, WAKE_MS);
}

static void
test_woken_by_sharded_release (void)
{
  RedisLockTestCluster *cluster = common_cluster ();
  g_autoptr (RedisLockRegistry) holder = NULL;
  g_autoptr (RedisLockRegistry) waiter = NULL;
  g_autoptr (RedisLock) held = NULL;
  g_autoptr (RedisLock) waited = NULL;
  g_autofree char *name = NULL;
  TestWaiter w = { 0 };
  GThread *thread;

  g_test_summary ("A release published on the key's shard channel only wakes a waiter of "
                  "another registry within 50 ms: it subscribes to the key's channel on the "
                  "key's master");
  if (cluster == NULL)
    return;
  open_pair (cluster, &holder, &waiter);
  name = name_on (cluster, 2, "woken", 0);
  held = test_obtain (holder, name);
  waited = test_obtain (waiter, name);
  test_lock_ok (held);
  thread = start_waiter (cluster, waiter, &w, waited, key_owner (cluster, redis_lock_get_key (held)));
  release_and_check_woken (held, &w, thread);
}

/* --- A waiter leaves ----------------------------------------------------------------- */

/* How soon the subscription of a key must be gone once its last waiter left: far under
 * the 10 s a key asked for without a waiter lingers, so only the waiter's leaving can
 * have ended it. */
#define GONE_MS 5000

/* A wait of @lock for @wait_ms in a thread of its own, cancellable; what it returned
 * (the lock it got is unlocked at once). */
typedef struct
{
  RedisLock *lock;
  gint64 wait_ms;
  GCancellable *cancellable;
  gboolean acquired;
  GError *error;
} Leaver;

static gpointer
leaver_main (gpointer data)
{
  Leaver *l = data;

  l->acquired = redis_lock_try_lock_for (l->lock, l->wait_ms, l->cancellable, &l->error);
  if (l->acquired)
    test_unlock_ok (l->lock);
  return NULL;
}

/* Starts @l waiting for @lock (held by another registry) and returns once @registry
 * found it held and the key's subscription is on @node. */
static GThread *
start_leaver (RedisLockTestCluster *cluster, RedisLockRegistry *registry, Leaver *l,
              RedisLock *lock, gint64 wait_ms, guint node)
{
  g_autofree char *channel = shard_channel (REGISTRY_KEY, redis_lock_get_key (lock));
  guint64 contended = test_stats (registry).contended_attempts;
  GThread *thread;

  l->lock = lock;
  l->wait_ms = wait_ms;
  l->cancellable = g_cancellable_new ();
  thread = g_thread_new ("leaver", leaver_main, l);
  g_assert_true (test_wait_contended (registry, contended + 1, 10000));
  wait_shard_subscribed (cluster, node, channel);
  return thread;
}

static void
leaver_clear (Leaver *l)
{
  g_clear_object (&l->cancellable);
  g_clear_error (&l->error);
}

/* An asynchronous wait of @lock, and whether it ended. */
typedef struct
{
  RedisLock *lock;
  gboolean ended;
} AsyncWait;

/* The asynchronous wait ended without the lock. */
static void
on_lock_done (GObject *source, GAsyncResult *result, gpointer data)
{
  g_autoptr (GError) error = NULL;
  AsyncWait *wait = data;

  g_assert_false (redis_lock_lock_finish (wait->lock, result, &error));
  g_assert_no_error (error);
  wait->ended = TRUE;
}

static void
test_dropped_when_waiter_leaves (void)
{
  RedisLockTestCluster *cluster = common_cluster ();
  g_autoptr (RedisLockRegistry) holder = NULL;
  g_autoptr (RedisLockRegistry) waiter = NULL;
  g_autoptr (RedisLockRegistry) closed = NULL;
  g_autoptr (GError) error = NULL;
  const char *ways[] = { "timeout", "cancel", "acquired", "async", "close" };
  guint done = 0;

  g_test_summary ("The shard subscription of a key ends as soon as its last waiter leaves "
                  "(not after the 10 s a key lingers): when the wait times out, is "
                  "cancelled, acquires, ends as an asynchronous call, or its registry "
                  "closes");
  if (cluster == NULL)
    return;
  open_pair (cluster, &holder, &waiter);
  for (guint i = 0; i < G_N_ELEMENTS (ways); i++)
    {
      g_autofree char *name = name_on (cluster, i % 3, ways[i], 0);
      g_autoptr (RedisLock) held = test_obtain (holder, name);
      g_autoptr (RedisLock) waited = NULL;
      g_autofree char *channel = shard_channel (REGISTRY_KEY, redis_lock_get_key (held));
      guint owner = key_owner (cluster, redis_lock_get_key (held));
      Leaver l = { 0 };
      GThread *thread;

      g_test_message ("leaving: %s", ways[i]);
      test_lock_ok (held);
      if (g_str_equal (ways[i], "timeout"))
        {
          waited = test_obtain (waiter, name);
          g_assert_false (redis_lock_try_lock_for (waited, 300, NULL, &error));
          g_assert_no_error (error);
          g_assert_cmpuint (test_stats (waiter).contended_attempts, >, 0);
        }
      else if (g_str_equal (ways[i], "cancel"))
        {
          waited = test_obtain (waiter, name);
          thread = start_leaver (cluster, waiter, &l, waited, -1, owner);
          g_cancellable_cancel (l.cancellable);
          g_thread_join (thread);
          g_assert_error (l.error, G_IO_ERROR, G_IO_ERROR_CANCELLED);
          g_assert_false (l.acquired);
        }
      else if (g_str_equal (ways[i], "acquired"))
        {
          waited = test_obtain (waiter, name);
          thread = start_leaver (cluster, waiter, &l, waited, -1, owner);
          test_unlock_ok (held);
          g_thread_join (thread);
          g_assert_no_error (l.error);
          g_assert_true (l.acquired);
          test_lock_ok (held);
        }
      else if (g_str_equal (ways[i], "async"))
        {
          AsyncWait wait = { 0 };

          waited = test_obtain (waiter, name);
          wait.lock = waited;
          redis_lock_lock_async (waited, 300, 0, NULL, on_lock_done, &wait);
          while (!wait.ended)
            g_main_context_iteration (NULL, TRUE);
        }
      else
        {
          closed = test_registry_new_on (redis_lock_test_cluster_get_url (cluster));
          waited = test_obtain (closed, name);
          thread = start_leaver (cluster, closed, &l, waited, -1, owner);
          redis_lock_registry_close (closed);
          g_thread_join (thread);
          g_assert_error (l.error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CLOSED);
        }
      wait_shard_unsubscribed (cluster, owner, channel, GONE_MS);
      test_unlock_ok (held);
      leaver_clear (&l);
      done++;
    }
  g_assert_cmpuint (done, ==, G_N_ELEMENTS (ways));
}

static void
test_kept_while_waiting (void)
{
  RedisLockTestCluster *cluster = common_cluster ();
  g_autoptr (RedisLockRegistry) holder = NULL;
  g_autoptr (RedisLockRegistry) waiter = NULL;
  g_autoptr (RedisLock) held = NULL;
  g_autoptr (RedisLock) waited = NULL;
  g_autofree char *name = NULL, *channel = NULL;
  TestWaiter w = { 0 };
  GThread *thread;
  guint64 notifications;
  gint64 locked_ms, end;
  guint owner;

  g_test_summary ("A waiter that sleeps longer than a key asked for by nobody lingers (10 s) "
                  "keeps its shard subscription all along, and is woken by the sharded "
                  "release long before the holder's TTL");
  if (cluster == NULL)
    return;
  open_pair (cluster, &holder, &waiter);
  name = name_on (cluster, 2, "long", 0);
  held = test_obtain (holder, name);
  waited = test_obtain (waiter, name);
  channel = shard_channel (REGISTRY_KEY, redis_lock_get_key (held));
  owner = key_owner (cluster, redis_lock_get_key (held));
  test_lock_ok (held);
  locked_ms = test_now_ms ();
  thread = start_waiter (cluster, waiter, &w, waited, owner);
  /* Watched from outside for longer than the linger, the subscription never goes. */
  end = g_get_monotonic_time () + 12 * G_USEC_PER_SEC;
  while (g_get_monotonic_time () < end)
    {
      g_assert_cmpint (shard_subscribers (cluster, owner, channel), ==, 1);
      g_usleep (50000);
    }
  g_assert_false (w.acquired);
  notifications = test_stats (waiter).notifications;
  test_unlock_ok (held);
  g_thread_join (thread);
  g_assert_true (w.acquired);
  g_assert_cmpint (w.returned_ms - locked_ms, <, PAIR_TTL_MS);
  g_assert_cmpuint (test_stats (waiter).notifications, >, notifications);
  wait_shard_unsubscribed (cluster, owner, channel, GONE_MS);
}
static void
test_slot_migrated_mid_wait (void)
{
  RedisLockTestCluster *cluster = common_cluster ();
  g_autoptr (RedisLockRegistry) holder = NULL;
  g_autoptr (RedisLockRegistry) waiter = NULL;
  g_autoptr (RedisLock) held = NULL;
  g_autoptr (RedisLock) waited = NULL;
  g_autoptr (GError) error = NULL;
  g_autofree char *name = NULL, *channel = NULL;
  TestWaiter w = { 0 };
  GThread *thread;
  guint from, to, slot;

  g_test_summary ("The key's slot migrates to another master while a waiter waits: the old "
                  "master ends the shard subscription, the waiter subscribes on the new "
                  "owner and is woken by the release made there within 50 ms");
  if (cluster == NULL)
    return;
  open_pair (cluster, &holder, &waiter);
  redis_lock_registry_set_min_replicas (holder, 0, 0);
  name = name_on (cluster, 0, "migrated", 0);
  held = test_obtain (holder, name);
  waited = test_obtain (waiter, name);
  from = key_owner (cluster, redis_lock_get_key (held));
  to = (from + 1) % 3;
  slot = redis_lock_test_cluster_key_slot (redis_lock_get_key (held));
  test_lock_ok (held);
  thread = start_waiter (cluster, waiter, &w, waited, from);

  TEST_ASSERT_OK (redis_lock_test_cluster_migrate_slot (cluster, slot, to, &error));
  g_assert_cmpuint (key_owner (cluster, redis_lock_get_key (held)), ==, to);
  channel = shard_channel (REGISTRY_KEY, redis_lock_get_key (held));
  wait_shard_subscribed (cluster, to, channel);
  g_assert_false (w.acquired);
  release_and_check_woken (held, &w, thread);
}

static void
test_failover_mid_wait (void)
{
  g_autoptr (RedisLockTestCluster) cluster = redis_lock_test_cluster_new_or_skip (3, 1);
  g_autoptr (RedisLockRegistry) holder = NULL;
  g_autoptr (RedisLockRegistry) waiter = NULL;
  g_autoptr (RedisLock) held = NULL;
  g_autoptr (RedisLock) waited = NULL;
  g_autoptr (GError) error = NULL;
  g_autofree char *name = NULL, *channel = NULL;
  TestWaiter w = { 0 };
  GThread *thread;
  guint master = 1;

  g_test_summary ("The key's master dies while a waiter waits: the cluster promotes its "
                  "replica, the waiter subscribes there and is woken by the release made "
                  "on the new master within 50 ms");
  if (cluster == NULL)
    return;
  open_pair (cluster, &holder, &waiter);
  name = name_on (cluster, master, "failover", 0);
  held = test_obtain (holder, name);
  waited = test_obtain (waiter, name);
  channel = shard_channel (REGISTRY_KEY, redis_lock_get_key (held));
  /* Acknowledged by the replica (min_replicas): it survives the failover. */
  test_lock_ok (held);
  thread = start_waiter (cluster, waiter, &w, waited, master);

  redis_lock_test_cluster_stop_node (cluster, master);
  TEST_ASSERT_OK (redis_lock_test_cluster_wait_ok (cluster, 30000, &error));
  g_assert_cmpuint (key_owner (cluster, redis_lock_get_key (held)), ==, 3 + master);
  wait_shard_subscribed (cluster, 3 + master, channel);
  /* The waiter's classic subscription too (it hears Spring's releases): until it is
   * back, the waiter counts notifications as down. */
  wait_pattern_subscribed (cluster);
  g_assert_false (w.acquired);
  release_and_check_woken (held, &w, thread);
  redis_lock_registry_close (waiter);
  redis_lock_registry_close (holder);
}

/* --- A Spring peer -------------------------------------------------------------------- */

/* Spring Integration's RedisLockRegistry scripts (6.x, with the channel in ARGV as a
 * cluster needs it), run as a Java process would run them. */
static const char spring_obtain[]
    = "local lockClientId = redis.call('GET', KEYS[1])\n"
      "if lockClientId == ARGV[1] then\n"
      "  redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
      "  return true\n"
      "elseif not lockClientId then\n"
      "  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])\n"
      "  return true\n"
      "end\n"
      "return false";
static const char spring_unlock[]
    = "local lockClientId = redis.call('GET', KEYS[1])\n"
      "if (lockClientId == ARGV[1] and redis.call('DEL', KEYS[1]) == 1) then\n"
      "  redis.call('PUBLISH', ARGV[2], KEYS[1])\n"
      "  return true\n"
      "end\n"
      "return false";

#define SPRING_ID "7d0c1e7a-5a3e-4c61-9d4e-spring-peer"

/* Runs a Spring script on the master of @key; TRUE when it returned true. */
static gboolean
spring_run (RedisLockTestCluster *cluster, const char *script, const char *key, const char *arg2)
{
  redisContext *c = node_connect (cluster, key_owner (cluster, key));
  redisReply *reply = test_redis_command (c, "EVAL %s 1 %s %s %s", script, key, SPRING_ID, arg2);
  gboolean ok;

  g_assert_cmpint (reply->type, !=, REDIS_REPLY_ERROR);
  ok = reply->type == REDIS_REPLY_INTEGER && reply->integer == 1;
  freeReplyObject (reply);
  redisFree (c);
  return ok;
}

static void
test_spring_peer (void)
{
  RedisLockTestCluster *cluster = common_cluster ();
  g_autoptr (RedisLockRegistry) registry = NULL;
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (GError) error = NULL;
  g_autofree char *name = NULL, *key = NULL, *channel = NULL;
  TestWaiter w = { 0 };
  GThread *thread;
  gint64 unlocked_ms;

  g_test_summary ("A Spring peer running its own scripts on the cluster excludes our registry "
                  "and is excluded by it, and its unlock (PUBLISH on the classic channel, from "
                  "the key's master) wakes our waiter wherever its subscription is");
  if (cluster == NULL)
    return;
  registry = test_registry_new_on (redis_lock_test_cluster_get_url (cluster));
  /* Only a notification can wake the waiter quickly. */
  redis_lock_registry_set_idle_between_tries_ms (registry, 20000);
  /* A key on another master than the subscription's (the first master's). */
  name = name_on (cluster, 2, "spring", 0);
  key = g_strconcat (REGISTRY_KEY ":", name, NULL);
  channel = g_strconcat (REGISTRY_KEY "-channel:", key, NULL);
  lock = test_obtain (registry, name);

  test_lock_ok (lock);
  g_assert_false (spring_run (cluster, spring_obtain, key, "30000"));
  test_unlock_ok (lock);

  g_assert_true (spring_run (cluster, spring_obtain, key, "30000"));
  g_assert_false (redis_lock_try_lock (lock, &error));
  g_assert_no_error (error);
  w.lock = lock;
  thread = g_thread_new ("waiter", test_waiter_main, &w);
  g_assert_true (test_wait_contended (registry, test_stats (registry).contended_attempts + 1,
                                      10000));
  unlocked_ms = test_now_ms ();
  g_assert_true (spring_run (cluster, spring_unlock, key, channel));
  g_thread_join (thread);
  g_assert_true (w.acquired);
  g_test_message ("woken %" G_GINT64_FORMAT " ms after the Spring unlock",
                  w.returned_ms - unlocked_ms);
  g_assert_cmpint (w.returned_ms - unlocked_ms, <, 5000);
  g_assert_null (node_get (cluster, 2, key));
}

static void
test_release_heard_by_spring_pattern (void)
{
  RedisLockTestCluster *cluster = common_cluster ();
  g_autoptr (RedisLockRegistry) registry = NULL;
  g_autoptr (RedisLock) lock = NULL;
  g_autofree char *name = NULL, *key = NULL;
  redisContext *subs[3];
  redisContext *owner;
  redisReply *reply;

  g_test_summary ("On a cluster an unlock is a classic PUBLISH on the per-key channel: a "
                  "Spring waiter's pattern subscription (registry_key-channel:*) hears it "
                  "once, on every master, not only on the key's");
  if (cluster == NULL)
    return;
  registry = test_registry_new_on (redis_lock_test_cluster_get_url (cluster));
  name = name_on (cluster, 2, "heard", 0);
  key = g_strconcat (REGISTRY_KEY ":", name, NULL);
  lock = test_obtain (registry, name);
  for (guint i = 0; i < 3; i++)
    {
      subs[i] = node_connect (cluster, i);
      reply = test_redis_command (subs[i], "PSUBSCRIBE %s", REGISTRY_KEY "-channel:*");
      g_assert_cmpint (reply->type, ==, REDIS_REPLY_ARRAY);
      freeReplyObject (reply);
    }

  test_lock_ok (lock);
  test_unlock_ok (lock);
  /* A marker published after the release on the same master reaches each node after
   * it (one cluster bus link per pair of nodes, in order): a second copy of the
   * release would come between the two. */
  owner = node_connect (cluster, 2);
  freeReplyObject (test_redis_command (owner, "PUBLISH %s marker", REGISTRY_KEY "-channel:marker"));
  redisFree (owner);
  for (guint i = 0; i < 3; i++)
    {
      g_autofree char *first = next_pmessage_of (subs[i], key, "marker");
      g_autofree char *second = next_pmessage_of (subs[i], key, "marker");

      g_assert_cmpstr (first, ==, key);
      g_assert_cmpstr (second, ==, "marker");
      redisFree (subs[i]);
    }
}

int
main (int argc, char **argv)
{
  int status;

  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/cluster-shard/publish/sharded-only", test_sharded_only);
  g_test_add_func ("/cluster-shard/publish/default-both", test_default_publishes_both);
  g_test_add_func ("/cluster-shard/wait/woken-by-sharded-release", test_woken_by_sharded_release);
  g_test_add_func ("/cluster-shard/wait/dropped-when-waiter-leaves",
                   test_dropped_when_waiter_leaves);
  g_test_add_func ("/cluster-shard/wait/kept-while-waiting", test_kept_while_waiting);
  g_test_add_func ("/cluster-shard/wait/slot-migrated", test_slot_migrated_mid_wait);
  g_test_add_func ("/cluster-shard/wait/failover", test_failover_mid_wait);
  /* Their names from when they lived in tests/cluster. */
  g_test_add_func ("/cluster/interop/spring-peer", test_spring_peer);
  g_test_add_func ("/cluster/interop/release-heard-by-spring-pattern",
                   test_release_heard_by_spring_pattern);
  status = g_test_run ();
  common_cluster_free ();
  return status;
}
