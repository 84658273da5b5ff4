/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* cluster.c: locks on a real Redis Cluster (redis-cluster:// URLs).
 *
 * Every test runs against `redis-server --cluster-enabled yes` nodes on loopback
 * ports, started by the public test helper: routing by slot from a single seed,
 * a lock held while its slot migrates (ASK while the migration runs, MOVED after),
 * migrations in a loop under contention with a check that no two holders are ever
 * inside together, a master killed with and without a replica (fencing tokens still
 * rising after it, though the replica lost the counter), one watchdog batch
 * per master, and the errors a bad seed list or an unserved slot give. The tests
 * that do not harm the cluster share one, started on first use; the others start
 * their own.
 */
#include "config.h"

#include <signal.h>
#include <sys/wait.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "cluster-common.h"

#define REGISTRY_KEY TEST_REGISTRY_KEY

static RedisLockTestCluster *shared;

/* The cluster of three masters without replicas that the harmless tests share; NULL
 * when the test was skipped (no redis-server). */
static RedisLockTestCluster *
shared_cluster (void)
{
  if (shared == NULL)
    shared = redis_lock_test_cluster_new_or_skip (3, 0);
  return shared;
}

/* The URL naming only node @node as seed. */
static char *
single_seed_url (RedisLockTestCluster *cluster, guint node)
{
  return g_strdup_printf ("redis-cluster://127.0.0.1:%d",
                          redis_lock_test_cluster_get_port (cluster, node));
}

/* --- Routing ------------------------------------------------------------------------ */

static void
test_spread (void)
{
  RedisLockTestCluster *cluster = shared_cluster ();
  g_autoptr (RedisLockRegistry) registry = NULL;
  g_autofree char *url = NULL;
  RedisLock *locks[120];
  guint per_master[3] = { 0, 0, 0 };

  g_test_summary ("From a single seed, locks over many names land each on the master that "
                  "owns its slot, with this registry's value, and nowhere else; unlock deletes "
                  "each there");
  if (cluster == NULL)
    return;
  url = single_seed_url (cluster, 1);
  registry = test_registry_new_on (url);

  for (guint i = 0; i < G_N_ELEMENTS (locks); i++)
    {
      g_autofree char *name = g_strdup_printf ("spread-%u", i);
      locks[i] = test_obtain (registry, name);
      test_lock_ok (locks[i]);
    }
  for (guint i = 0; i < G_N_ELEMENTS (locks); i++)
    {
      const char *key = redis_lock_get_key (locks[i]);
      guint owner = key_owner (cluster, key);
      per_master[owner]++;
      for (guint node = 0; node < 3; node++)
        {
          g_autofree char *value = node_get (cluster, node, key);
          if (node == owner)
            test_assert_value_of (value, registry);
          else
            g_assert_null (value);
        }
    }
  for (guint node = 0; node < 3; node++)
    g_assert_cmpuint (per_master[node], >, 0);
  for (guint i = 0; i < G_N_ELEMENTS (locks); i++)
    {
      g_autofree char *key = g_strdup (redis_lock_get_key (locks[i]));
      test_unlock_ok (locks[i]);
      g_assert_null (node_get (cluster, key_owner (cluster, key), key));
      redis_lock_unref (locks[i]);
    }
}

static void
test_hash_tag (void)
{
  RedisLockTestCluster *cluster = shared_cluster ();
  g_autoptr (RedisLockRegistry) registry = NULL;
  g_autoptr (GError) error = NULL;
  guint slot = 0;

  g_test_summary ("A registry key with a {hash tag} puts every lock of the registry in one slot, "
                  "on one master");
  if (cluster == NULL)
    return;
  registry = redis_lock_registry_new (redis_lock_test_cluster_get_url (cluster), "{orders}",
                                      &error);
  g_assert_no_error (error);
  for (guint i = 0; i < 20; i++)
    {
      g_autofree char *name = g_strdup_printf ("tagged-%u", i);
      g_autoptr (RedisLock) lock = test_obtain (registry, name);
      const char *key = redis_lock_get_key (lock);
      g_autofree char *value = NULL;

      test_lock_ok (lock);
      if (i == 0)
        slot = redis_lock_test_cluster_key_slot (key);
      g_assert_cmpuint (redis_lock_test_cluster_key_slot (key), ==, slot);
      value = node_get (cluster, key_owner (cluster, key), key);
      test_assert_value_of (value, registry);
      test_unlock_ok (lock);
    }
}

/* --- The watchdog ------------------------------------------------------------------- */

static long long
node_calls (RedisLockTestCluster *cluster, guint node, const char *command)
{
  redisContext *c = node_connect (cluster, node);
  long long calls = test_redis_command_calls (c, command);

  redisFree (c);
  return calls;
}

static void
test_watchdog_batch_per_master (void)
{
  RedisLockTestCluster *cluster = shared_cluster ();
  g_autoptr (RedisLockRegistry) registry = NULL;
  RedisLock *locks[30];
  long long before[3], held[3] = { 0, 0, 0 };
  RedisLockRegistryStats stats;

  g_test_summary ("The watchdog renews the leases held on three masters in one exchange: one "
                  "pipelined batch per master, sent to all at once");
  if (cluster == NULL)
    return;
  registry = test_registry_new_on (redis_lock_test_cluster_get_url (cluster));
  redis_lock_registry_set_expire_after_ms (registry, 900);
  for (guint i = 0; i < G_N_ELEMENTS (locks); i++)
    {
      g_autofree char *name = g_strdup_printf ("batch-%u", i);
      locks[i] = test_obtain (registry, name);
      test_lock_ok (locks[i]);
      held[key_owner (cluster, redis_lock_get_key (locks[i]))]++;
    }
  for (guint node = 0; node < 3; node++)
    before[node] = node_calls (cluster, node, "evalsha") + node_calls (cluster, node, "eval");

  test_wait_full_tick (registry);
  stats = test_stats (registry);
  g_assert_cmpuint (stats.last_tick_leases, ==, G_N_ELEMENTS (locks));
  g_assert_cmpuint (stats.last_tick_round_trips, ==, 1);
  for (guint node = 0; node < 3; node++)
    {
      long long after = node_calls (cluster, node, "evalsha") + node_calls (cluster, node, "eval");
      g_assert_cmpuint (held[node], >, 0);
      /* At least this tick's renewals; a tick may have run between the two reads. */
      g_assert_cmpint (after - before[node], >=, held[node]);
      g_assert_cmpint ((after - before[node]) % held[node], ==, 0);
    }
  for (guint i = 0; i < G_N_ELEMENTS (locks); i++)
    {
      g_assert_false (redis_lock_is_lease_lost (locks[i]));
      test_unlock_ok (locks[i]);
      redis_lock_unref (locks[i]);
    }
}

/* --- Slot migration ----------------------------------------------------------------- */

static void
test_migrate_held_lock (void)
{
  RedisLockTestCluster *cluster = shared_cluster ();
  g_autoptr (RedisLockRegistry) a = NULL;
  g_autoptr (RedisLockRegistry) b = NULL;
  g_autoptr (RedisLock) la = NULL;
  g_autoptr (RedisLock) lb = NULL;
  g_autoptr (GError) error = NULL;
  g_autofree char *value = NULL;
  const char *key;
  guint slot, from, to;

  g_test_summary ("A lock held while its slot migrates stays held: another registry is refused "
                  "through ASK, renewal follows ASK to the importing node, unlock deletes the "
                  "key there; after the migration, MOVED leads to the new owner");
  if (cluster == NULL)
    return;
  a = test_registry_new_on (redis_lock_test_cluster_get_url (cluster));
  b = test_registry_new_on (redis_lock_test_cluster_get_url (cluster));
  redis_lock_registry_set_watchdog (a, FALSE);
  la = test_obtain (a, "migrating");
  lb = test_obtain (b, "migrating");
  key = redis_lock_get_key (la);
  slot = redis_lock_test_cluster_key_slot (key);
  from = key_owner (cluster, key);
  to = (from + 1) % 3;

  test_lock_ok (la);
  TEST_ASSERT_OK (redis_lock_test_cluster_migrate_slot_begin (cluster, slot, to, &error));
  TEST_ASSERT_OK (redis_lock_test_cluster_migrate_key (cluster, key, &error));
  value = node_get (cluster, to, key);
  test_assert_value_of (value, a);
  g_clear_pointer (&value, g_free);

  /* The old owner no longer has the key and answers ASK. */
  g_assert_false (redis_lock_try_lock (lb, &error));
  g_assert_no_error (error);
  g_assert_true (redis_lock_registry_renew (a, "migrating", 60000, &error));
  g_assert_no_error (error);
  value = node_get (cluster, to, key);
  test_assert_value_of (value, a);
  g_clear_pointer (&value, g_free);
  test_unlock_ok (la);
  g_assert_null (node_get (cluster, to, key));
  g_assert_null (node_get (cluster, from, key));

  test_lock_ok (la);
  TEST_ASSERT_OK (redis_lock_test_cluster_migrate_slot_finish (cluster, slot, &error));
  g_assert_cmpuint (key_owner (cluster, key), ==, to);
  g_assert_false (redis_lock_try_lock (lb, &error));
  g_assert_no_error (error);
  test_unlock_ok (la);
  /* b's map still names the old owner: MOVED. */
  test_lock_ok (lb);
  value = node_get (cluster, to, key);
  test_assert_value_of (value, b);
  test_unlock_ok (lb);
}

static void
test_migrate_watchdog (void)
{
  RedisLockTestCluster *cluster = shared_cluster ();
  g_autoptr (RedisLockRegistry) a = NULL;
  g_autoptr (RedisLock) la = NULL;
  g_autoptr (GError) error = NULL;
  g_autofree char *value = NULL;
  const char *key;
  guint slot, to;

  g_test_summary ("The watchdog keeps a lease alive while its slot migrates and after: its "
                  "renewals follow ASK, then MOVED");
  if (cluster == NULL)
    return;
  a = test_registry_new_on (redis_lock_test_cluster_get_url (cluster));
  redis_lock_registry_set_expire_after_ms (a, 600);
  la = test_obtain (a, "watched");
  key = redis_lock_get_key (la);
  slot = redis_lock_test_cluster_key_slot (key);
  to = (key_owner (cluster, key) + 2) % 3;

  test_lock_ok (la);
  TEST_ASSERT_OK (redis_lock_test_cluster_migrate_slot_begin (cluster, slot, to, &error));
  TEST_ASSERT_OK (redis_lock_test_cluster_migrate_key (cluster, key, &error));
  for (int i = 0; i < 3; i++)
    test_wait_full_tick (a);
  g_assert_false (redis_lock_is_lease_lost (la));
  TEST_ASSERT_OK (redis_lock_test_cluster_migrate_slot_finish (cluster, slot, &error));
  for (int i = 0; i < 3; i++)
    test_wait_full_tick (a);
  g_assert_false (redis_lock_is_lease_lost (la));
  value = node_get (cluster, to, key);
  test_assert_value_of (value, a);
  test_unlock_ok (la);
  g_assert_null (node_get (cluster, to, key));
}

/* Threads of two registries (two "processes") take one lock in turns, each time
 * checking that nobody else is inside and adding one to a counter, while the lock's
 * slot migrates back and forth. */
typedef struct
{
  RedisLock *locks[2];
  gint inside;
  gint overlaps;
  gint64 counter;
  gint errors;
  gint stop;
  gint sections;
} MigrationRun;

static void
migration_worker (guint index, gpointer data)
{
  MigrationRun *run = data;
  RedisLock *lock = run->locks[index % 2];

  while (!g_atomic_int_get (&run->stop))
    {
      g_autoptr (GError) error = NULL;
      gint64 value;

      if (!redis_lock_try_lock_for (lock, 5000, NULL, &error))
        {
          g_test_message ("worker %u: %s", index, error != NULL ? error->message : "timed out");
          g_atomic_int_inc (&run->errors);
          continue;
        }
      if (g_atomic_int_add (&run->inside, 1) != 0)
        g_atomic_int_inc (&run->overlaps);
      value = run->counter;
      g_thread_yield ();
      run->counter = value + 1;
      g_atomic_int_add (&run->inside, -1);
      g_atomic_int_inc (&run->sections);
      if (!redis_lock_unlock (lock, &error))
        {
          g_test_message ("worker %u: unlock: %s", index, error->message);
          g_atomic_int_inc (&run->errors);
        }
    }
}

static void
test_migrate_stress (void)
{
  RedisLockTestCluster *cluster = shared_cluster ();
  g_autoptr (RedisLockRegistry) a = NULL;
  g_autoptr (RedisLockRegistry) b = NULL;
  MigrationRun run = { 0 };
  GThread *workers;
  const char *key;
  guint slot, owner;

  g_test_summary ("Four threads in two registries lock one name in turns while its slot "
                  "migrates back and forth ten times: never two holders inside, no increment "
                  "lost, no call fails");
  if (cluster == NULL)
    return;
  a = test_registry_new_on (redis_lock_test_cluster_get_url (cluster));
  b = test_registry_new_on (redis_lock_test_cluster_get_url (cluster));
  /* Each registry must go to Redis for each section: no hand-offs that would hide
   * the cross-registry exclusion. */
  redis_lock_registry_set_max_local_handoffs (a, 0);
  redis_lock_registry_set_max_local_handoffs (b, 0);
  run.locks[0] = test_obtain (a, "hot");
  run.locks[1] = test_obtain (b, "hot");
  key = redis_lock_get_key (run.locks[0]);
  slot = redis_lock_test_cluster_key_slot (key);
  owner = key_owner (cluster, key);

  workers = test_run_threads_in_background (4, migration_worker, &run);
  for (int i = 0; i < 10; i++)
    {
      g_autoptr (GError) error = NULL;
      gint before = g_atomic_int_get (&run.sections);
      guint to = (owner + 1 + (guint) i % 2) % 3;

      TEST_ASSERT_OK (redis_lock_test_cluster_migrate_slot_begin (cluster, slot, to, &error));
      /* Let some sections run while the slot is half-moved. */
      TEST_WAIT_UNTIL (g_atomic_int_get (&run.sections) >= before + 5, 20000);
      TEST_ASSERT_OK (redis_lock_test_cluster_migrate_key (cluster, key, &error));
      before = g_atomic_int_get (&run.sections);
      TEST_WAIT_UNTIL (g_atomic_int_get (&run.sections) >= before + 5, 20000);
      TEST_ASSERT_OK (redis_lock_test_cluster_migrate_slot_finish (cluster, slot, &error));
      owner = to;
      before = g_atomic_int_get (&run.sections);
      TEST_WAIT_UNTIL (g_atomic_int_get (&run.sections) >= before + 5, 20000);
    }
  g_atomic_int_set (&run.stop, 1);
  g_thread_join (workers);

  g_test_message ("%d sections across 10 migrations", run.sections);
  g_assert_cmpint (run.overlaps, ==, 0);
  g_assert_cmpint (run.counter, ==, run.sections);
  g_assert_cmpint (run.errors, ==, 0);
  g_assert_false (redis_lock_is_lease_lost (run.locks[0]));
  g_assert_false (redis_lock_is_lease_lost (run.locks[1]));
  redis_lock_unref (run.locks[0]);
  redis_lock_unref (run.locks[1]);
}

/* --- Failures ----------------------------------------------------------------------- */


static void
test_failover_with_replica (void)
{
  g_autoptr (RedisLockTestCluster) cluster = redis_lock_test_cluster_new_or_skip (3, 1);
  g_autoptr (RedisLockRegistry) registry = NULL;
  g_autoptr (RedisLock) kept = NULL;
  g_autoptr (RedisLock) dropped = NULL;
  g_autoptr (RedisLock) fresh = NULL;
  g_autoptr (GError) error = NULL;
  g_autofree char *kept_name = NULL, *dropped_name = NULL, *fresh_name = NULL;
  g_autofree char *kept_value = NULL, *dropped_value = NULL;
  TestLeaseLost lost;
  redisContext *replica;
  guint master = 0, replica_node;
  gint64 ok_at;
  gboolean acquired = FALSE;

  g_test_summary ("A master killed with a replica: the cluster fails over; a lease that reached "
                  "the replica survives and unlocks cleanly, one that did not is reported lost, "
                  "and new acquisitions work within a second of the cluster being whole again");
  if (cluster == NULL)
    return;
  replica_node = 3 + master;
  test_lease_lost_init (&lost);
  registry = test_registry_new_on (redis_lock_test_cluster_get_url (cluster));
  redis_lock_registry_set_expire_after_ms (registry, 30000);
  redis_lock_registry_set_command_timeout_ms (registry, 500);
  redis_lock_registry_set_connect_timeout_ms (registry, 500);
  redis_lock_registry_set_lease_lost_callback (registry, test_lease_lost_cb, &lost, NULL);
  kept_name = name_on (cluster, master, "kept", 0);
  dropped_name = name_on (cluster, master, "dropped", 0);
  fresh_name = name_on (cluster, master, "fresh", 0);
  kept = test_obtain (registry, kept_name);
  dropped = test_obtain (registry, dropped_name);
  fresh = test_obtain (registry, fresh_name);

  /* The dropped lease reaches the replica, which then forgets it (a write the
   * asynchronous replication had not delivered yet); the kept one stays there. */
  test_lock_ok (dropped);
  dropped_value = redis_lock_dup_lease_value (dropped);
  wait_replicated (cluster, replica_node, redis_lock_get_key (dropped), dropped_value);
  replica = node_connect (cluster, replica_node);
  freeReplyObject (test_redis_command (replica, "CONFIG SET replica-read-only no"));
  freeReplyObject (test_redis_command (replica, "FLUSHALL"));
  redisFree (replica);
  g_assert_null (node_get (cluster, replica_node, redis_lock_get_key (dropped)));
  test_lock_ok (kept);
  kept_value = redis_lock_dup_lease_value (kept);
  wait_replicated (cluster, replica_node, redis_lock_get_key (kept), kept_value);

  redis_lock_test_cluster_stop_node (cluster, master);
  TEST_ASSERT_OK (redis_lock_test_cluster_wait_ok (cluster, 30000, &error));
  ok_at = test_now_ms ();
  g_assert_cmpint (key_owner (cluster, redis_lock_get_key (kept)), ==, replica_node);

  /* New acquisitions: the first calls may still go to the dead master and fail. */
  while (!acquired && test_now_ms () - ok_at < 1000)
    {
      g_clear_error (&error);
      acquired = redis_lock_try_lock (fresh, &error);
      if (!acquired)
        g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION);
    }
  g_test_message ("acquired %" G_GINT64_FORMAT " ms after the cluster was whole",
                  test_now_ms () - ok_at);
  g_assert_true (acquired);
  test_unlock_ok (fresh);

  g_assert_cmpuint (test_lease_lost_wait (&lost, 10000), >=, 1);
  g_assert_true (redis_lock_is_lease_lost (dropped));
  g_assert_false (redis_lock_is_lease_lost (kept));
  test_unlock_lease_lost (dropped);
  test_unlock_ok (kept);
  g_assert_null (node_get (cluster, replica_node, redis_lock_get_key (kept)));
  g_assert_cmpuint (test_lease_lost_calls (&lost), ==, 1);
  redis_lock_registry_close (registry);
  test_lease_lost_clear (&lost);
}

/* Subscribers to the registry's forced-release channel on one node: the guarding
 * connection a registry holding a lease keeps. */
static long long
node_guards (RedisLockTestCluster *cluster, guint node)
{
  redisContext *c = node_connect (cluster, node);
  redisReply *reply = test_redis_command (c, "PUBSUB NUMSUB " REGISTRY_KEY "-forced");
  long long n;

  g_assert_cmpint (reply->type, ==, REDIS_REPLY_ARRAY);
  g_assert_cmpuint (reply->elements, ==, 2);
  n = reply->element[1]->integer;
  freeReplyObject (reply);
  redisFree (c);
  return n;
}

/* A cluster of three masters with a replica each, and a registry on it with the
 * default 60 s TTL (its watchdog ticks every 20 s) that reports losses to @lost and
 * holds @name (a name served by master @master) with *@value as the key's value, which
 * has reached the replica of that master. */
static RedisLockRegistry *
failover_holder (RedisLockTestCluster *cluster, guint master, TestLeaseLost *lost,
                 const char *name, RedisLock **lock, char **value)
{
  RedisLockRegistry *registry = test_registry_new_on (redis_lock_test_cluster_get_url (cluster));

  test_lease_lost_init (lost);
  redis_lock_registry_set_command_timeout_ms (registry, 2000);
  redis_lock_registry_set_connect_timeout_ms (registry, 500);
  redis_lock_registry_set_lease_lost_callback (registry, test_lease_lost_cb, lost, NULL);
  *lock = test_obtain (registry, name);
  test_lock_ok (*lock);
  *value = redis_lock_dup_lease_value (*lock);
  wait_replicated (cluster, 3 + master, redis_lock_get_key (*lock), *value);
  return registry;
}

static void
test_failover_audit (void)
{
  g_autoptr (RedisLockTestCluster) cluster = redis_lock_test_cluster_new_or_skip (3, 1);
  g_autoptr (RedisLockRegistry) registry = NULL;
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (GError) error = NULL;
  g_autofree char *name = NULL, *value = NULL;
  TestLeaseLost lost;
  redisContext *replica;
  gint64 ok_at;

  g_test_summary ("A lease whose write the replica lost, its master killed and the replica "
                  "promoted: the slot changing owner makes the registry check its leases, so "
                  "the holder of a 60 s lease (watchdog tick every 20 s) is told within 5 s "
                  "of the promotion, though neither a command of its own nor its subscription "
                  "(on another master) went to the dead one");
  if (cluster == NULL)
    return;
  name = name_on (cluster, 1, "audited", 0);
  registry = failover_holder (cluster, 1, &lost, name, &lock, &value);
  /* The guarding connection (made with the first lease) is on another master. */
  TEST_WAIT_UNTIL (node_guards (cluster, 0) + node_guards (cluster, 2) == 1, 10000);
  g_assert_cmpint (node_guards (cluster, 1), ==, 0);
  /* The replica forgets the write, as when asynchronous replication had not
   * delivered it yet. */
  replica = node_connect (cluster, 4);
  freeReplyObject (test_redis_command (replica, "CONFIG SET replica-read-only no"));
  freeReplyObject (test_redis_command (replica, "FLUSHALL"));
  redisFree (replica);

  redis_lock_test_cluster_stop_node (cluster, 1);
  TEST_ASSERT_OK (redis_lock_test_cluster_wait_ok (cluster, 30000, &error));
  ok_at = test_now_ms ();
  g_assert_cmpuint (test_lease_lost_wait (&lost, 5000), ==, 1);
  g_test_message ("told %" G_GINT64_FORMAT " ms after the cluster was whole", lost.at_ms - ok_at);
  g_assert_true (redis_lock_is_lease_lost (lock));
  g_assert_cmpuint (test_stats (registry).audits, >=, 1);
  test_unlock_lease_lost (lock);
  redis_lock_registry_close (registry);
  test_lease_lost_clear (&lost);
}

static void
test_failover_unlock (void)
{
  g_autoptr (RedisLockTestCluster) cluster = redis_lock_test_cluster_new_or_skip (3, 1);
  g_autoptr (RedisLockRegistry) registry = NULL;
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (GError) error = NULL;
  g_autofree char *name = NULL, *value = NULL;
  TestLeaseLost lost;

  g_test_summary ("A lease that reached the replica, its master killed and the replica "
                  "promoted: the unlock right after the failover reaches the new master and "
                  "succeeds (the refused connection to the dead one refreshes the slot map and "
                  "the release goes again), and the key is gone");
  if (cluster == NULL)
    return;
  name = name_on (cluster, 0, "released", 0);
  registry = failover_holder (cluster, 0, &lost, name, &lock, &value);

  redis_lock_test_cluster_stop_node (cluster, 0);
  TEST_ASSERT_OK (redis_lock_test_cluster_wait_ok (cluster, 30000, &error));
  test_unlock_ok (lock);
  g_assert_null (node_get (cluster, 3, redis_lock_get_key (lock)));
  g_assert_cmpuint (test_lease_lost_calls (&lost), ==, 0);
  redis_lock_registry_close (registry);
  test_lease_lost_clear (&lost);
}

static void
test_failover_fencing (void)
{
  g_autoptr (RedisLockTestCluster) cluster = redis_lock_test_cluster_new_or_skip (3, 1);
  g_autoptr (RedisLockRegistry) registry = NULL;
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (GError) error = NULL;
  g_autofree char *name = NULL, *fence_key = NULL, *last = NULL, *counter = NULL;
  redisContext *replica;
  guint master = 0, replica_node;
  guint64 highest = 0, first_after = 0;
  gint64 ok_at;

  g_test_summary ("A master killed, its replica promoted without the fencing counter (the "
                  "writes that made it never reached the replica): the first token after the "
                  "failover, and every one after it, is higher than every token before");
  if (cluster == NULL)
    return;
  replica_node = 3 + master;
  registry = test_registry_new_on (redis_lock_test_cluster_get_url (cluster));
  redis_lock_registry_set_fencing (registry, TRUE);
  redis_lock_registry_set_command_timeout_ms (registry, 500);
  redis_lock_registry_set_connect_timeout_ms (registry, 500);
  name = name_on (cluster, master, "fenced", 0);
  lock = test_obtain (registry, name);
  fence_key = g_strdup_printf ("fence:{%s}", redis_lock_get_key (lock));
  for (int i = 0; i < 10; i++)
    {
      test_lock_ok (lock);
      g_assert_cmpuint (redis_lock_get_fencing_token (lock), >, highest);
      highest = redis_lock_get_fencing_token (lock);
      test_unlock_ok (lock);
    }
  last = g_strdup_printf ("%" G_GUINT64_FORMAT, highest);
  wait_replicated (cluster, replica_node, fence_key, last);
  /* The replica forgets the counter: asynchronous replication had not delivered it. */
  replica = node_connect (cluster, replica_node);
  freeReplyObject (test_redis_command (replica, "CONFIG SET replica-read-only no"));
  freeReplyObject (test_redis_command (replica, "FLUSHALL"));
  redisFree (replica);
  g_assert_null (node_get (cluster, replica_node, fence_key));

  redis_lock_test_cluster_stop_node (cluster, master);
  TEST_ASSERT_OK (redis_lock_test_cluster_wait_ok (cluster, 30000, &error));
  ok_at = test_now_ms ();
  g_assert_cmpint (key_owner (cluster, redis_lock_get_key (lock)), ==, replica_node);

  /* The first calls may still go to the dead master and fail. */
  while (first_after == 0 && test_now_ms () - ok_at < 5000)
    {
      g_clear_error (&error);
      if (!redis_lock_try_lock (lock, &error))
        {
          g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION);
          continue;
        }
      first_after = redis_lock_get_fencing_token (lock);
      test_unlock_ok (lock);
    }
  g_test_message ("first token after the failover %" G_GUINT64_FORMAT
                  ", the highest before %" G_GUINT64_FORMAT,
                  first_after, highest);
  g_assert_cmpuint (first_after, >, highest);
  highest = first_after;
  for (int i = 0; i < 10; i++)
    {
      test_lock_ok (lock);
      g_assert_cmpuint (redis_lock_get_fencing_token (lock), >, highest);
      highest = redis_lock_get_fencing_token (lock);
      test_unlock_ok (lock);
    }
  g_free (last);
  last = g_strdup_printf ("%" G_GUINT64_FORMAT, highest);
  counter = node_get (cluster, replica_node, fence_key);
  g_assert_cmpstr (counter, ==, last);
  redis_lock_registry_close (registry);
}

/* PUBSUB NUMPAT of one node: the pattern subscriptions made there. */
static long long
node_numpat (RedisLockTestCluster *cluster, guint node)
{
  redisContext *c = node_connect (cluster, node);
  long long n = test_redis_integer (c, "PUBSUB NUMPAT");

  redisFree (c);
  return n;
}

static void
test_master_down_without_replica (void)
{
  g_autoptr (RedisLockTestCluster) cluster = redis_lock_test_cluster_new_or_skip (3, 0);
  g_autoptr (RedisLockRegistry) a = NULL;
  g_autoptr (RedisLockRegistry) b = NULL;
  g_autoptr (RedisLock) dead = NULL;
  g_autoptr (RedisLock) la = NULL;
  g_autoptr (RedisLock) lb = NULL;
  g_autoptr (GError) error = NULL;
  g_autofree char *dead_name = NULL, *live_name = NULL;
  TestWaiter w = { 0 };
  GThread *thread;
  gint64 t0, unlocked_ms;
  guint64 notifications;

  g_test_summary ("A master killed without a replica: locks in its slots fail with CONNECTION "
                  "within the command timeout, blocking lock() included; locks in other slots "
                  "keep working, and the unlock-notification subscription moves off the dead "
                  "node");
  if (cluster == NULL)
    return;
  /* The other masters keep serving their slots once they see node 0 fail. */
  for (guint node = 0; node < 3; node++)
    {
      redisContext *c = node_connect (cluster, node);
      freeReplyObject (test_redis_command (c, "CONFIG SET cluster-require-full-coverage no"));
      redisFree (c);
    }
  a = test_registry_new_on (redis_lock_test_cluster_get_url (cluster));
  b = test_registry_new_on (redis_lock_test_cluster_get_url (cluster));
  for (guint i = 0; i < 2; i++)
    {
      RedisLockRegistry *r = i == 0 ? a : b;
      redis_lock_registry_set_command_timeout_ms (r, 400);
      redis_lock_registry_set_connect_timeout_ms (r, 400);
      redis_lock_registry_set_expire_after_ms (r, 30000);
    }
  dead_name = name_on (cluster, 0, "dead", 0);
  live_name = name_on (cluster, 1, "live", 0);
  dead = test_obtain (a, dead_name);
  la = test_obtain (a, live_name);
  lb = test_obtain (b, live_name);
  /* Polling could not explain a quick wake-up: only a notification can. */
  redis_lock_registry_set_idle_between_tries_ms (b, 20000);
  /* b's subscription runs (on the first master) before the kill. */
  test_lock_ok (la);
  g_assert_false (redis_lock_try_lock_for (lb, 50, NULL, &error));
  g_assert_no_error (error);
  g_assert_cmpint (node_numpat (cluster, 0), ==, 1);

  redis_lock_test_cluster_stop_node (cluster, 0);

  t0 = test_now_ms ();
  g_assert_false (redis_lock_try_lock (dead, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION);
  g_assert_cmpint (test_now_ms () - t0, <, 400 * 5);
  g_clear_error (&error);
  t0 = test_now_ms ();
  g_assert_false (redis_lock_lock (dead, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION);
  g_assert_cmpint (test_now_ms () - t0, <, 400 * 5);
  g_clear_error (&error);

  /* Other slots: b waits for a's lock and is woken by the notification, which its
   * subscription now receives from another node. */
  TEST_WAIT_UNTIL (node_numpat (cluster, 1) + node_numpat (cluster, 2) == 1, 10000);
  notifications = test_stats (b).notifications;
  w.lock = lb;
  thread = g_thread_new ("waiter", test_waiter_main, &w);
  g_assert_true (test_wait_contended (b, test_stats (b).contended_attempts + 1, 10000));
  unlocked_ms = test_now_ms ();
  test_unlock_ok (la);
  g_thread_join (thread);
  g_assert_true (w.acquired);
  g_assert_cmpint (w.returned_ms - unlocked_ms, <, 20000 / 2);
  g_assert_cmpuint (test_stats (b).notifications, >, notifications);
  test_lock_ok (la);
  test_unlock_ok (la);
}

/* --- The command-line tool ----------------------------------------------------------- */

/* Runs the built `redislock` with @argv (NULL-terminated, after the program name);
 * returns its exit status and its standard output in *@out. */
static int
run_tool (char **out, const char *const *argv)
{
  g_autoptr (GPtrArray) args = g_ptr_array_new ();
  g_autofree char *tool = g_test_build_filename (G_TEST_BUILT, "..", "tools", "redislock", NULL);
  g_autoptr (GError) error = NULL;
  int status = 0;

  g_ptr_array_add (args, tool);
  for (guint i = 0; argv[i] != NULL; i++)
    g_ptr_array_add (args, (gpointer) argv[i]);
  g_ptr_array_add (args, NULL);
  g_assert_true (g_spawn_sync (NULL, (char **) args->pdata, NULL, G_SPAWN_DEFAULT, NULL, NULL,
                               out, NULL, &status, &error));
  g_assert_no_error (error);
  g_assert_true (WIFEXITED (status));
  return WEXITSTATUS (status);
}

static void
test_tool (void)
{
  RedisLockTestCluster *cluster = shared_cluster ();
  g_autoptr (RedisLockRegistry) registry = NULL;
  RedisLock *locks[3];
  const char *url;
  g_autofree char *list = NULL, *status = NULL, *ran = NULL;

  g_test_summary ("redislock list finds the locks held on every master of a cluster, status "
                  "reads each from its master, and run holds a lock there");
  if (cluster == NULL)
    return;
  url = redis_lock_test_cluster_get_url (cluster);
  registry = test_registry_new_on (url);
  for (guint node = 0; node < 3; node++)
    {
      g_autofree char *name = name_on (cluster, node, "tool", 0);
      locks[node] = test_obtain (registry, name);
      test_lock_ok (locks[node]);
    }

  g_assert_cmpint (run_tool (&list, (const char *[]) { "list", "--url", url, "--registry",
                                                      REGISTRY_KEY, NULL }),
                   ==, 0);
  for (guint node = 0; node < 3; node++)
    {
      const char *name = redis_lock_get_name (locks[node]);
      g_autofree char *status_out = NULL;
      g_assert_nonnull (strstr (list, name));
      g_assert_cmpint (run_tool (&status_out, (const char *[]) { "status", "--url", url,
                                                                "--registry", REGISTRY_KEY,
                                                                name, NULL }),
                       ==, 0);
      g_assert_nonnull (strstr (status_out, redis_lock_registry_get_client_id (registry)));
      test_unlock_ok (locks[node]);
      redis_lock_unref (locks[node]);
    }
  g_assert_cmpint (run_tool (&status, (const char *[]) { "status", "--url", url, "--registry",
                                                        REGISTRY_KEY, "tool-free", NULL }),
                   ==, 1);
  g_assert_cmpint (run_tool (&ran, (const char *[]) { "run", "--url", url, "--registry",
                                                     REGISTRY_KEY, "tool-run", "--", "sh", "-c",
                                                     "echo \"$REDIS_LOCK_KEY\"", NULL }),
                   ==, 0);
  g_assert_cmpstr (ran, ==, REGISTRY_KEY ":tool-run\n");
}

/* --- Bad input ---------------------------------------------------------------------- */

static void
test_seeds_down (void)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *url = g_strdup_printf ("redis-cluster://127.0.0.1:%d,127.0.0.1:%d",
                                          test_free_tcp_port (), test_free_tcp_port ());
  gint64 t0 = test_now_ms ();
  RedisLockRegistry *registry = redis_lock_registry_new (url, REGISTRY_KEY, &error);

  g_test_summary ("When no seed answers, redis_lock_registry_new() fails with CONNECTION within "
                  "the connect timeout");
  g_assert_null (registry);
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION);
  g_assert_cmpint (test_now_ms () - t0, <, 3000 + 2000);
}

static void
test_seed_not_cluster (void)
{
  int port = test_free_tcp_port ();
  g_autofree char *port_line = g_strdup_printf ("port %d", port);
  const char *lines[] = { "bind 127.0.0.1", port_line, NULL };
  g_autoptr (RedisLockTestServer) server = redis_lock_test_server_new_or_skip (lines);
  g_autoptr (GError) error = NULL;
  g_autofree char *url = NULL;
  g_autofree char *where = NULL;

  g_test_summary ("A seed that is a plain server (cluster support disabled) is INVALID, and the "
                  "message names the seed");
  if (server == NULL)
    return;
  url = g_strdup_printf ("redis-cluster://127.0.0.1:%d", port);
  where = g_strdup_printf ("127.0.0.1:%d", port);
  g_assert_null (redis_lock_registry_new (url, REGISTRY_KEY, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID);
  g_assert_nonnull (strstr (error->message, where));
  g_assert_nonnull (strstr (error->message, "not a Redis Cluster node"));
}

static void
test_slot_without_owner (void)
{
  g_autoptr (RedisLockTestCluster) cluster = redis_lock_test_cluster_new_or_skip (1, 0);
  g_autoptr (RedisLockRegistry) registry = NULL;
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (GError) error = NULL;
  redisContext *c;
  guint slot;
  gint64 t0;

  g_test_summary ("A lock whose slot no master serves fails with a clear error within the "
                  "command timeout, not a hang");
  if (cluster == NULL)
    return;
  registry = test_registry_new_on (redis_lock_test_cluster_get_url (cluster));
  redis_lock_registry_set_command_timeout_ms (registry, 300);
  lock = test_obtain (registry, "orphan");
  slot = redis_lock_test_cluster_key_slot (redis_lock_get_key (lock));
  c = node_connect (cluster, 0);
  freeReplyObject (test_redis_command (c, "CLUSTER DELSLOTS %u", slot));
  redisFree (c);

  t0 = test_now_ms ();
  g_assert_false (redis_lock_try_lock (lock, &error));
  g_assert_nonnull (error);
  g_assert_true (error->code == REDIS_LOCK_ERROR_CONNECTION || error->code == REDIS_LOCK_ERROR_REDIS);
  g_test_message ("%s", error->message);
  g_assert_cmpint (test_now_ms () - t0, <, 300 * 5);
}

int
main (int argc, char **argv)
{
  int rc;

  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/cluster/route/spread-from-one-seed", test_spread);
  g_test_add_func ("/cluster/route/hash-tag", test_hash_tag);
  g_test_add_func ("/cluster/watchdog/one-batch-per-master", test_watchdog_batch_per_master);
  g_test_add_func ("/cluster/migrate/held-lock", test_migrate_held_lock);
  g_test_add_func ("/cluster/migrate/watchdog", test_migrate_watchdog);
  g_test_add_func ("/cluster/migrate/stress", test_migrate_stress);
  g_test_add_func ("/cluster/failover/with-replica", test_failover_with_replica);
  g_test_add_func ("/cluster/failover/without-replica", test_master_down_without_replica);
  g_test_add_func ("/cluster/failover/audit-after-promotion", test_failover_audit);
  g_test_add_func ("/cluster/failover/unlock-on-new-master", test_failover_unlock);
  g_test_add_func ("/cluster/failover/fencing-lost-counter", test_failover_fencing);
  g_test_add_func ("/cluster/tool/list-status-run", test_tool);
  g_test_add_func ("/cluster/bad-input/seeds-down", test_seeds_down);
  g_test_add_func ("/cluster/bad-input/not-a-cluster", test_seed_not_cluster);
  g_test_add_func ("/cluster/bad-input/slot-without-owner", test_slot_without_owner);
  rc = g_test_run ();
  g_clear_pointer (&shared, redis_lock_test_cluster_free);
  return rc;
}
