/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* quorum.c: registries made by redis_lock_registry_new_quorum() (Redlock over
 * independent masters) against three real redis-servers on Unix sockets.
 *
 * Every test has its own three servers and one quorum registry over them, and looks at
 * each node through a raw connection of its own, so it can tell "on a majority" from
 * "on one" and "on all". Faults are real: a node is killed (its keys are gone, as after
 * a crash with persistence off), restarted empty, or frozen with SIGSTOP (which also
 * orders a renewal and a release that run side by side: a frozen node runs them in the
 * order they were sent, once it resumes). Timing checks
 * use bounds far from the command timeout (3 s) and close to the per-node timeout
 * (50 ms), so a store that waits for a dead node's command timeout, or that asks the
 * nodes one after another, fails them.
 */
#include "config.h"

#include "common.h"

#define N_NODES 3
#define NAME "q"
#define KEY TEST_REGISTRY_KEY ":" NAME

typedef struct
{
  RedisLockTestServer *servers[N_NODES];
  RedisLockRegistry *registry;
  char *urls[N_NODES + 1];
} QuorumFixture;

static void
quorum_setup (QuorumFixture *f, gconstpointer data)
{
  g_autoptr (GError) error = NULL;

  for (guint i = 0; i < N_NODES; i++)
    {
      f->servers[i] = redis_lock_test_server_new_or_skip (NULL);
      if (f->servers[i] == NULL)
        return;
      f->urls[i] = g_strdup (redis_lock_test_server_get_url (f->servers[i]));
    }
  f->registry = redis_lock_registry_new_quorum ((const char *const *) f->urls, TEST_REGISTRY_KEY,
                                                &error);
  g_assert_no_error (error);
  g_assert_nonnull (f->registry);
}

static void
quorum_teardown (QuorumFixture *f, gconstpointer data)
{
  redis_lock_registry_unref (f->registry);
  for (guint i = 0; i < N_NODES; i++)
    {
      redis_lock_test_server_free (f->servers[i]);
      g_free (f->urls[i]);
    }
}

#define SKIP_IF_NO_SERVERS(f)                                                                      \
  G_STMT_START                                                                                     \
  {                                                                                                \
    if ((f)->registry == NULL)                                                                     \
      return;                                                                                      \
  }                                                                                                \
  G_STMT_END

/* The value of @key on node @i (NULL: absent), on a fresh connection. */
static char *
node_get (QuorumFixture *f, guint i, const char *key)
{
  redisContext *c = test_redis_connect (f->servers[i]);
  char *value = test_redis_get (c, key);

  redisFree (c);
  return value;
}

static void
node_set (QuorumFixture *f, guint i, const char *key, const char *value, gint64 ttl_ms)
{
  redisContext *c = test_redis_connect (f->servers[i]);

  freeReplyObject (test_redis_command (c, "SET %s %s PX %lld", key, value, (long long) ttl_ms));
  redisFree (c);
}

static gboolean
node_del (QuorumFixture *f, guint i, const char *key)
{
  redisContext *c = test_redis_connect (f->servers[i]);
  long long n = test_redis_integer (c, "DEL %s", key);

  redisFree (c);
  return n == 1;
}

static void
assert_ours_on (QuorumFixture *f, guint i)
{
  g_autofree char *value = node_get (f, i, KEY);

  g_assert_nonnull (value);
  test_assert_value_of (value, f->registry);
}

static void
assert_absent_on (QuorumFixture *f, guint i)
{
  g_autofree char *value = node_get (f, i, KEY);

  g_assert_null (value);
}

static gboolean
node_has_ours (QuorumFixture *f, guint i)
{
  g_autofree char *value = node_get (f, i, KEY);

  return value != NULL && test_value_is_of (value, f->registry);
}

static void
node_restart (QuorumFixture *f, guint i)
{
  g_autoptr (GError) error = NULL;

  redis_lock_test_server_stop (f->servers[i]);
  g_assert_true (redis_lock_test_server_start (f->servers[i], &error));
  g_assert_no_error (error);
}

static void
test_all_nodes (QuorumFixture *f, gconstpointer data)
{
  g_autoptr (RedisLock) lock = NULL;

  g_test_summary ("A quorum lease is written to every node and deleted from every node.");
  SKIP_IF_NO_SERVERS (f);
  lock = test_obtain (f->registry, NAME);

  test_lock_ok (lock);
  for (guint i = 0; i < N_NODES; i++)
    assert_ours_on (f, i);
  test_unlock_ok (lock);
  for (guint i = 0; i < N_NODES; i++)
    assert_absent_on (f, i);
}

static void
test_one_down (QuorumFixture *f, gconstpointer data)
{
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (GError) error = NULL;
  gint64 start;

  g_test_summary ("With 1 of 3 nodes down, a lock is still taken on the other two and "
                  "released from them, without waiting for the dead node.");
  SKIP_IF_NO_SERVERS (f);
  lock = test_obtain (f->registry, NAME);

  redis_lock_test_server_stop (f->servers[2]);
  start = test_now_ms ();
  g_assert_true (redis_lock_try_lock_for (lock, 2000, NULL, &error));
  g_assert_no_error (error);
  assert_ours_on (f, 0);
  assert_ours_on (f, 1);
  test_unlock_ok (lock);
  g_assert_cmpint (test_now_ms () - start, <, 1000);
  assert_absent_on (f, 0);
  assert_absent_on (f, 1);
}

static void
test_two_down (QuorumFixture *f, gconstpointer data)
{
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (GError) error = NULL;
  gint64 start;

  g_test_summary ("With 2 of 3 nodes down, acquiring fails (CONNECTION) within the wait and "
                  "leaves no key on the live node.");
  SKIP_IF_NO_SERVERS (f);
  lock = test_obtain (f->registry, NAME);

  redis_lock_test_server_stop (f->servers[1]);
  redis_lock_test_server_stop (f->servers[2]);
  start = test_now_ms ();
  g_assert_false (redis_lock_try_lock_for (lock, 1000, NULL, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION);
  g_assert_cmpint (test_now_ms () - start, <, 1000);
  g_assert_false (redis_lock_is_acquired_in_this_process (lock));
  assert_absent_on (f, 0);
}

static void
test_foreign_majority (QuorumFixture *f, gconstpointer data)
{
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (GError) error = NULL;
  g_autofree char *v0 = NULL, *v1 = NULL;
  gint64 start;

  g_test_summary ("A key held by another owner on 2 of 3 nodes: not acquired (contention, no "
                  "error), and our value is not left on the third node.");
  SKIP_IF_NO_SERVERS (f);
  lock = test_obtain (f->registry, NAME);

  node_set (f, 0, KEY, "someone-else:1", 10000);
  node_set (f, 1, KEY, "someone-else:1", 10000);
  start = test_now_ms ();
  g_assert_false (redis_lock_try_lock_for (lock, 300, NULL, &error));
  g_assert_no_error (error);
  g_assert_cmpint (test_now_ms () - start, >=, 290);
  assert_absent_on (f, 2);
  v0 = node_get (f, 0, KEY);
  v1 = node_get (f, 1, KEY);
  g_assert_cmpstr (v0, ==, "someone-else:1");
  g_assert_cmpstr (v1, ==, "someone-else:1");
}

static void
test_foreign_minority (QuorumFixture *f, gconstpointer data)
{
  g_autoptr (RedisLock) lock = NULL;
  g_autofree char *v0 = NULL;

  g_test_summary ("A key held by another owner on 1 of 3 nodes: acquired on the other two; "
                  "the foreign key is left alone.");
  SKIP_IF_NO_SERVERS (f);
  lock = test_obtain (f->registry, NAME);

  node_set (f, 0, KEY, "someone-else:1", 10000);
  test_lock_ok (lock);
  assert_ours_on (f, 1);
  assert_ours_on (f, 2);
  test_unlock_ok (lock);
  v0 = node_get (f, 0, KEY);
  g_assert_cmpstr (v0, ==, "someone-else:1");
  assert_absent_on (f, 1);
  assert_absent_on (f, 2);
}

static void
test_paused_node (QuorumFixture *f, gconstpointer data)
{
  g_autoptr (RedisLock) lock = NULL;
  gint64 start, locked_ms, unlocked_ms;

  g_test_summary ("A frozen node (SIGSTOP) costs lock and unlock about the per-node timeout "
                  "(50 ms), not the command timeout (3 s).");
  SKIP_IF_NO_SERVERS (f);
  lock = test_obtain (f->registry, NAME);

  /* Connections to every node exist before the pause. */
  test_lock_ok (lock);
  test_unlock_ok (lock);

  redis_lock_test_server_pause (f->servers[2]);
  start = test_now_ms ();
  test_lock_ok (lock);
  locked_ms = test_now_ms () - start;
  assert_ours_on (f, 0);
  assert_ours_on (f, 1);
  start = test_now_ms ();
  test_unlock_ok (lock);
  unlocked_ms = test_now_ms () - start;
  g_test_message ("lock %" G_GINT64_FORMAT " ms, unlock %" G_GINT64_FORMAT " ms", locked_ms,
                  unlocked_ms);
  g_assert_cmpint (locked_ms, <, 400);
  g_assert_cmpint (unlocked_ms, <, 400);
  assert_absent_on (f, 0);
  assert_absent_on (f, 1);
  redis_lock_test_server_resume (f->servers[2]);
}

static void
test_node_timeout_setting (QuorumFixture *f, gconstpointer data)
{
  g_autoptr (RedisLock) lock = NULL;
  gint64 start, locked_ms;

  g_test_summary ("redis_lock_registry_set_quorum_node_timeout_ms() sets how long an "
                  "acquisition waits for a frozen node: at least the 600 ms set, then back to "
                  "the default (50 ms) with 0.");
  SKIP_IF_NO_SERVERS (f);
  lock = test_obtain (f->registry, NAME);
  test_lock_ok (lock);
  test_unlock_ok (lock);

  redis_lock_test_server_pause (f->servers[2]);
  redis_lock_registry_set_quorum_node_timeout_ms (f->registry, 600);
  start = test_now_ms ();
  test_lock_ok (lock);
  locked_ms = test_now_ms () - start;
  g_test_message ("lock with a 600 ms node timeout: %" G_GINT64_FORMAT " ms", locked_ms);
  g_assert_cmpint (locked_ms, >=, 600);
  g_assert_cmpint (locked_ms, <, 2500);
  test_unlock_ok (lock);

  redis_lock_registry_set_quorum_node_timeout_ms (f->registry, 0);
  start = test_now_ms ();
  test_lock_ok (lock);
  locked_ms = test_now_ms () - start;
  g_test_message ("lock with the default node timeout: %" G_GINT64_FORMAT " ms", locked_ms);
  g_assert_cmpint (locked_ms, <, 400);
  test_unlock_ok (lock);
  redis_lock_test_server_resume (f->servers[2]);
}

static void
test_deleted_on_majority (QuorumFixture *f, gconstpointer data)
{
  g_autoptr (RedisLock) lock = NULL;
  TestLeaseLost lost;
  redisContext *c;

  g_test_summary ("Keys deleted on 2 of 3 nodes behind the holder: the watchdog reports the "
                  "lease lost, unlock says LEASE_LOST, and our key on the third node is "
                  "released.");
  SKIP_IF_NO_SERVERS (f);
  lock = test_obtain (f->registry, NAME);

  test_lease_lost_init (&lost);
  redis_lock_registry_set_lease_lost_callback (f->registry, test_lease_lost_cb, &lost, NULL);
  redis_lock_registry_set_expire_after_ms (f->registry, 1500);
  test_lock_ok (lock);
  g_assert_true (node_del (f, 0, KEY));
  g_assert_true (node_del (f, 1, KEY));
  g_assert_cmpuint (test_lease_lost_wait (&lost, 3000), ==, 1);
  g_assert_true (lost.lock == lock);
  c = test_redis_connect (f->servers[2]);
  test_redis_reset_stats (c);
  test_unlock_lease_lost (lock);
  /* The unlock of a lost lease returns at once; our key where it remains is deleted in
   * the background, by the release script (its UNLINK), not left to its TTL. */
  TEST_WAIT_UNTIL (test_redis_command_calls (c, "unlink") >= 1, 5000);
  redisFree (c);
  assert_absent_on (f, 2);
  redis_lock_registry_set_lease_lost_callback (f->registry, NULL, NULL, NULL);
  test_lease_lost_clear (&lost);
}

static void
test_deleted_on_minority (QuorumFixture *f, gconstpointer data)
{
  g_autoptr (RedisLock) lock = NULL;
  TestLeaseLost lost;

  g_test_summary ("A key deleted on 1 of 3 nodes behind the holder: the lease stays "
                  "confirmed by the other two.");
  SKIP_IF_NO_SERVERS (f);
  lock = test_obtain (f->registry, NAME);

  test_lease_lost_init (&lost);
  redis_lock_registry_set_lease_lost_callback (f->registry, test_lease_lost_cb, &lost, NULL);
  redis_lock_registry_set_expire_after_ms (f->registry, 600);
  test_lock_ok (lock);
  g_assert_true (node_del (f, 0, KEY));
  g_assert_cmpuint (test_lease_lost_wait (&lost, 2000), ==, 0);
  assert_ours_on (f, 1);
  assert_ours_on (f, 2);
  test_unlock_ok (lock);
  redis_lock_registry_set_lease_lost_callback (f->registry, NULL, NULL, NULL);
  test_lease_lost_clear (&lost);
}

static void
test_restarted_empty (QuorumFixture *f, gconstpointer data)
{
  g_autoptr (RedisLock) lock = NULL;
  TestLeaseLost lost;

  g_test_summary ("A node restarted empty while the lease is held: the lease stays confirmed "
                  "(a majority still holds it) over several TTLs, and the next renewal sets "
                  "the key on the restarted node again.");
  SKIP_IF_NO_SERVERS (f);
  lock = test_obtain (f->registry, NAME);

  test_lease_lost_init (&lost);
  redis_lock_registry_set_lease_lost_callback (f->registry, test_lease_lost_cb, &lost, NULL);
  redis_lock_registry_set_expire_after_ms (f->registry, 600);
  test_lock_ok (lock);
  node_restart (f, 0);
  assert_absent_on (f, 0);
  /* Renewals run every TTL/3: well within two TTLs the key is back on node 0. */
  TEST_WAIT_UNTIL (node_has_ours (f, 0), 1200);
  g_assert_cmpuint (test_lease_lost_wait (&lost, 2000), ==, 0);
  g_assert_true (redis_lock_is_acquired_in_this_process (lock));
  assert_ours_on (f, 1);
  assert_ours_on (f, 2);
  test_unlock_ok (lock);
  for (guint i = 0; i < N_NODES; i++)
    assert_absent_on (f, i);
  redis_lock_registry_set_lease_lost_callback (f->registry, NULL, NULL, NULL);
  test_lease_lost_clear (&lost);
}

/* A thread that holds NAME until told to unlock it, and reports the unlock. */
typedef struct
{
  RedisLock *lock;
  TestSync sync;
  gboolean holding;
  gboolean unlock;
  gint tid;  /* atomic: set just before the unlock */
  gint done; /* atomic: set after it */
  gboolean unlocked;
  GError *error;
} Unlocker;

static gpointer
unlocker_main (gpointer data)
{
  Unlocker *u = data;

  test_lock_ok (u->lock);
  test_sync_lock (&u->sync);
  u->holding = TRUE;
  test_sync_broadcast (&u->sync);
  while (!u->unlock)
    test_sync_wait (&u->sync);
  test_sync_unlock (&u->sync);
  g_atomic_int_set (&u->tid, test_thread_id ());
  u->unlocked = redis_lock_unlock (u->lock, &u->error);
  g_atomic_int_set (&u->done, 1);
  return NULL;
}

/* A thread that renews NAME once. */
typedef struct
{
  RedisLockRegistry *registry;
  gint tid;  /* atomic: set just before the renewal */
  gint done; /* atomic: set after it */
  gboolean renewed;
  GError *error;
} Renewer;

static gpointer
renewer_main (gpointer data)
{
  Renewer *r = data;

  g_atomic_int_set (&r->tid, test_thread_id ());
  r->renewed = redis_lock_registry_renew (r->registry, NAME, 0, &r->error);
  g_atomic_int_set (&r->done, 1);
  return NULL;
}

static gboolean
flag_set (gpointer flag)
{
  return g_atomic_int_get ((gint *)flag) != 0;
}

/* The scripts node 0 has run since its statistics were reset. */
static long long
scripts_run (redisContext *c)
{
  return test_redis_command_calls (c, "evalsha") + test_redis_command_calls (c, "eval");
}

static void
test_release_beside_renewal (QuorumFixture *f, gconstpointer data)
{
  redisContext *node0;
  Unlocker u = { 0 };
  Renewer r = { .registry = f->registry };
  GThread *unlocker, *renewer;

  g_test_summary ("A renewal that finds the key gone on one node and held on the others, "
                  "while a release of the lease runs beside it, does not set the key again "
                  "there: after a successful unlock the key is on no node.");
  SKIP_IF_NO_SERVERS (f);
  u.lock = test_obtain (f->registry, NAME);
  test_sync_init (&u.sync);
  unlocker = g_thread_new ("unlocker", unlocker_main, &u);
  g_assert_true (test_sync_wait_flag (&u.sync, &u.holding, 10000));

  /* Node 0 has lost the key (as when the release reaches it first); nodes 1 and 2 are
   * frozen, so the renewal, sent first, and then the release wait for them, and each
   * of those nodes runs the renewal before the release. */
  g_assert_true (node_del (f, 0, KEY));
  node0 = test_redis_connect (f->servers[0]);
  test_redis_reset_stats (node0);
  redis_lock_test_server_pause (f->servers[1]);
  redis_lock_test_server_pause (f->servers[2]);

  renewer = g_thread_new ("renewer", renewer_main, &r);
  TEST_WAIT_UNTIL (scripts_run (node0) >= 1, 5000);
  g_assert_true (test_wait_until (flag_set, &r.tid, 5000));
  g_assert_true (test_wait_thread_blocked (g_atomic_int_get (&r.tid), 5000));
  g_assert_false (flag_set (&r.done));

  test_sync_lock (&u.sync);
  u.unlock = TRUE;
  test_sync_broadcast (&u.sync);
  test_sync_unlock (&u.sync);
  TEST_WAIT_UNTIL (scripts_run (node0) >= 2, 5000);
  g_assert_true (test_wait_until (flag_set, &u.tid, 5000));
  g_assert_true (test_wait_thread_blocked (g_atomic_int_get (&u.tid), 5000));
  g_assert_false (flag_set (&r.done));

  redis_lock_test_server_resume (f->servers[1]);
  redis_lock_test_server_resume (f->servers[2]);
  g_assert_true (test_wait_until (flag_set, &r.done, 10000));
  g_assert_true (test_wait_until (flag_set, &u.done, 10000));
  g_thread_join (renewer);
  g_thread_join (unlocker);
  g_test_message ("renewal: %s", r.renewed ? "renewed" : r.error->message);
  g_assert_no_error (u.error);
  g_assert_true (u.unlocked);
  for (guint i = 0; i < N_NODES; i++)
    assert_absent_on (f, i);

  redisFree (node0);
  g_clear_error (&r.error);
  test_sync_clear (&u.sync);
  redis_lock_unref (u.lock);
}

static void
test_open_majority (QuorumFixture *f, gconstpointer data)
{
  g_autoptr (GError) error = NULL;
  RedisLockRegistry *r;

  g_test_summary ("A quorum registry opens with 1 of 3 nodes down and takes locks; with 2 "
                  "down it fails with CONNECTION.");
  SKIP_IF_NO_SERVERS (f);

  redis_lock_test_server_stop (f->servers[0]);
  r = redis_lock_registry_new_quorum ((const char *const *) f->urls, "rlq-open", &error);
  g_assert_no_error (error);
  g_assert_nonnull (r);
  {
    g_autoptr (RedisLock) lock = test_obtain (r, NAME);
    test_lock_ok (lock);
    test_unlock_ok (lock);
  }
  redis_lock_registry_unref (r);

  redis_lock_test_server_stop (f->servers[1]);
  r = redis_lock_registry_new_quorum ((const char *const *) f->urls, "rlq-open", &error);
  g_assert_null (r);
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION);
}

static void
test_waiter_woken (QuorumFixture *f, gconstpointer data)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (RedisLockRegistry) other = NULL;
  g_autoptr (RedisLock) held = NULL;
  g_autoptr (RedisLock) wanted = NULL;
  TestTaker taker = { 0 };
  GThread *thread;
  gint64 unlocked;

  g_test_summary ("A waiter of a second quorum registry is woken by the holder's unlock, "
                  "long before the holder's TTL.");
  SKIP_IF_NO_SERVERS (f);
  other = redis_lock_registry_new_quorum (
      (const char *const *) f->urls, TEST_REGISTRY_KEY, &error);
  held = test_obtain (f->registry, NAME);

  g_assert_no_error (error);
  wanted = test_obtain (other, NAME);
  test_lock_ok (held);
  thread = test_taker_start (&taker, wanted, 10000);
  g_assert_true (test_wait_until (test_taker_started, &taker, 5000));
  g_assert_true (test_wait_contended (other, 1, 5000));
  g_usleep (100 * 1000);
  unlocked = test_now_ms ();
  test_unlock_ok (held);
  test_taker_join (&taker, thread, 5000);
  g_assert_true (taker.result);
  g_assert_no_error (taker.error);
  g_assert_cmpint (taker.returned_ms - unlocked, <, 1000);
  test_taker_clear (&taker);
}

/* On memory:// nodes: the subprocess that the critical aborts never runs a teardown, so
 * it starts no redis-server whose directory it would leave behind. */
static void
test_fencing_refused (void)
{
  const char *urls[] = { "memory://fence-a", "memory://fence-b", "memory://fence-c", NULL };
  g_autoptr (GError) error = NULL;
  g_autoptr (RedisLockRegistry) registry = NULL;

  g_test_summary ("Fencing cannot be turned on for a quorum registry (a critical).");
  registry = redis_lock_registry_new_quorum (urls, TEST_REGISTRY_KEY, &error);
  g_assert_no_error (error);
  if (g_test_subprocess ())
    {
      redis_lock_registry_set_fencing (registry, TRUE);
      return;
    }
  g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_failed ();
  g_test_trap_assert_stderr ("*CRITICAL*quorum*");
  g_assert_false (redis_lock_registry_get_fencing (registry));
}

static void
test_no_validity (QuorumFixture *f, gconstpointer data)
{
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (GError) error = NULL;

  g_test_summary ("A TTL that leaves no validity after the drift allowance (2 ms): never "
                  "acquired, although every node took the key, and no key is left behind.");
  SKIP_IF_NO_SERVERS (f);
  lock = test_obtain (f->registry, NAME);

  redis_lock_registry_set_expire_after_ms (f->registry, 2);
  redis_lock_registry_set_watchdog (f->registry, FALSE);
  /* Every node answers within it (a 1 ms default would not, on a busy machine): the
   * validity, not the nodes' silence, is what refuses the lease. */
  redis_lock_registry_set_quorum_node_timeout_ms (f->registry, 1000);
  g_assert_false (redis_lock_try_lock_for (lock, 0, NULL, &error));
  g_assert_no_error (error);
  for (guint i = 0; i < N_NODES; i++)
    assert_absent_on (f, i);
}

static void
test_memory_nodes (void)
{
  const char *urls[] = { "memory://quorum-a", "memory://quorum-b", "memory://quorum-c", NULL };
  g_autoptr (GError) error = NULL;
  g_autoptr (RedisLockRegistry) a = NULL, b = NULL;
  g_autoptr (RedisLock) la = NULL, lb = NULL;
  g_autofree char *owner = NULL;

  g_test_summary ("A quorum of memory:// stores: two registries exclude each other, and a "
                  "lease expired on 2 of 3 stores is free for the other registry.");
  a = redis_lock_registry_new_quorum (urls, TEST_REGISTRY_KEY, &error);
  g_assert_no_error (error);
  b = redis_lock_registry_new_quorum (urls, TEST_REGISTRY_KEY, &error);
  g_assert_no_error (error);
  la = test_obtain (a, NAME);
  lb = test_obtain (b, NAME);
  test_lock_ok (la);
  g_assert_false (redis_lock_try_lock_for (lb, 50, NULL, &error));
  g_assert_no_error (error);
  owner = redis_lock_memory_store_get_owner ("quorum-c", KEY);
  test_assert_value_of (owner, a);
  redis_lock_memory_store_expire ("quorum-a", KEY);
  redis_lock_memory_store_expire ("quorum-b", KEY);
  g_assert_true (redis_lock_try_lock_for (lb, 0, NULL, &error));
  g_assert_no_error (error);
  test_unlock_ok (lb);
  test_unlock_lease_lost (la);
}

static void
test_cluster_url_refused (void)
{
  const char *urls[] = { "memory://quorum-x", "redis-cluster://127.0.0.1:1",
                         "memory://quorum-y", NULL };
  g_autoptr (GError) error = NULL;
  RedisLockRegistry *r;

  g_test_summary ("A redis-cluster:// URL among the nodes is INVALID at once: a quorum node "
                  "is a single master.");
  r = redis_lock_registry_new_quorum (urls, TEST_REGISTRY_KEY, &error);
  g_assert_null (r);
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID);
  g_assert_nonnull (g_strstr_len (error->message, -1, "node 2"));
}

/* --- Exclusion while a node is killed and restarted --------------------------------- */

typedef struct
{
  QuorumFixture *f;
  RedisLockRegistry *registries[2];
  guint rounds;
  gint counter;  /* read, then written: overlapping holders lose increments */
  gint inside;
  gint overlaps;
  gint sections;
  gint faults;
  gint stop;
} Stress;

static void
stress_worker (guint index, gpointer data)
{
  Stress *s = data;
  g_autoptr (RedisLock) lock = test_obtain (s->registries[index % 2], "stress");

  for (guint round = 0; round < s->rounds; round++)
    {
      g_autoptr (GError) error = NULL;
      gint value;

      if (!redis_lock_try_lock_for (lock, 10000, NULL, &error))
        {
          g_test_message ("lock: %s", error != NULL ? error->message : "timed out");
          continue;
        }
      if (g_atomic_int_add (&s->inside, 1) != 0)
        g_atomic_int_inc (&s->overlaps);
      value = g_atomic_int_get (&s->counter);
      g_thread_yield ();
      g_usleep (g_random_int_range (0, 300));
      g_atomic_int_set (&s->counter, value + 1);
      g_atomic_int_add (&s->inside, -1);
      g_atomic_int_inc (&s->sections);
      if (!redis_lock_unlock (lock, &error))
        g_test_message ("unlock: %s", error->message);
    }
}

/* One fault at a time on a random node, so a majority stays healthy: killed and
 * restarted empty, or frozen (SIGSTOP) for 50-250 ms. */
static gpointer
stress_faults (gpointer data)
{
  Stress *s = data;

  while (!g_atomic_int_get (&s->stop))
    {
      guint node = (guint) g_random_int_range (0, N_NODES);

      g_usleep (g_random_int_range (30, 120) * 1000);
      if (g_random_boolean ())
        node_restart (s->f, node);
      else
        {
          redis_lock_test_server_pause (s->f->servers[node]);
          g_usleep (g_random_int_range (50, 250) * 1000);
          redis_lock_test_server_resume (s->f->servers[node]);
        }
      g_atomic_int_inc (&s->faults);
    }
  return NULL;
}

static void
test_stress_exclusion (QuorumFixture *f, gconstpointer data)
{
  g_autoptr (GError) error = NULL;
  Stress s = { 0 };
  GThread *faults;

  g_test_summary ("2 quorum registries x 2 threads on one lock with a read / +1 / write "
                  "counter, while random nodes, one at a time, are killed and restarted empty "
                  "or frozen (SIGSTOP): no overlap and no lost increment.");
  SKIP_IF_NO_SERVERS (f);

  s.f = f;
  s.rounds = 150;
  s.registries[0] = redis_lock_registry_ref (f->registry);
  s.registries[1] = redis_lock_registry_new_quorum ((const char *const *) f->urls,
                                                    TEST_REGISTRY_KEY, &error);
  g_assert_no_error (error);
  redis_lock_registry_set_max_local_handoffs (s.registries[0], 0);
  redis_lock_registry_set_max_local_handoffs (s.registries[1], 0);
  faults = g_thread_new ("faults", stress_faults, &s);
  test_run_threads (4, stress_worker, &s);
  g_atomic_int_set (&s.stop, 1);
  g_thread_join (faults);
  g_test_message ("%d sections, %d faults", g_atomic_int_get (&s.sections),
                  g_atomic_int_get (&s.faults));
  g_assert_cmpint (s.faults, >, 0);
  g_assert_cmpint (s.overlaps, ==, 0);
  g_assert_cmpint (s.counter, ==, s.sections);
  g_assert_cmpint (s.sections, >=, (gint) (4 * s.rounds / 2));
  redis_lock_registry_unref (s.registries[0]);
  redis_lock_registry_unref (s.registries[1]);
}

#define ADD(path, func)                                                                           \
  g_test_add ("/quorum/" path, QuorumFixture, NULL, quorum_setup, func, quorum_teardown)

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);

  ADD ("all-nodes", test_all_nodes);
  ADD ("one-down", test_one_down);
  ADD ("two-down", test_two_down);
  ADD ("foreign-on-majority", test_foreign_majority);
  ADD ("foreign-on-minority", test_foreign_minority);
  ADD ("paused-node", test_paused_node);
  ADD ("node-timeout-setting", test_node_timeout_setting);
  ADD ("deleted-on-majority", test_deleted_on_majority);
  ADD ("deleted-on-minority", test_deleted_on_minority);
  ADD ("restarted-empty", test_restarted_empty);
  ADD ("release-beside-renewal", test_release_beside_renewal);
  ADD ("open-majority", test_open_majority);
  ADD ("waiter-woken", test_waiter_woken);
  g_test_add_func ("/quorum/fencing-refused", test_fencing_refused);
  ADD ("no-validity", test_no_validity);
  g_test_add_func ("/quorum/memory-nodes", test_memory_nodes);
  g_test_add_func ("/quorum/cluster-url-refused", test_cluster_url_refused);
  ADD ("stress-exclusion", test_stress_exclusion);

  return g_test_run ();
}
