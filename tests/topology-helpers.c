/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* topology-helpers.c: the test helpers for a Redis Cluster and a Sentinel deployment
 * (redislock-test.h) do what their documentation says.
 *
 * The library's own Cluster and Sentinel tests stand on these helpers, so they are
 * checked here against Redis itself, over plain hiredis connections and never through
 * the library: the cluster forms with the documented roles and slot ranges, the helper's
 * slot of a key is the one CLUSTER KEYSLOT answers, a migrated slot moves with its keys
 * (ASK while half moved), a killed master is replaced by its replica and comes back as
 * a node of the cluster; a Sentinel deployment forms with node 0 as master and a forced
 * failover names a node that really is master.
 *
 * Forming a cluster or a deployment takes seconds (a Redis master reports
 * cluster_state:ok only two seconds after it started), so one cluster and one Sentinel
 * deployment are shared by the tests of each group, in the order they are added: the
 * tests that change the topology for good (failover) come last in their group.
 */
#include "config.h"

#include <string.h>

#include <gio/gio.h>
#include <hiredis/hiredis.h>
#include <redislock/redislock-test.h>

#include "common.h"

/* --- Plain connections ------------------------------------------------------------- */

static redisContext *
connect_port (int port)
{
  struct timeval tv = { 5, 0 };
  redisContext *c = redisConnectWithTimeout ("127.0.0.1", port, tv);

  g_assert_nonnull (c);
  if (c->err != 0)
    g_error ("cannot connect to 127.0.0.1:%d: %s", port, c->errstr);
  g_assert_cmpint (redisSetTimeout (c, tv), ==, REDIS_OK);
  return c;
}

/* Runs a command on a fresh connection to 127.0.0.1:@port and returns the reply
 * (asserts there is one; an error reply is a reply). */
static redisReply *command_on (int port, const char *format, ...) G_GNUC_PRINTF (2, 3);

static redisReply *
command_on (int port, const char *format, ...)
{
  redisContext *c = connect_port (port);
  redisReply *reply;
  va_list ap;

  va_start (ap, format);
  reply = redisvCommand (c, format, ap);
  va_end (ap);
  if (reply == NULL)
    g_error ("no reply from 127.0.0.1:%d: %s", port, c->errstr);
  redisFree (c);
  return reply;
}

/* The first word of ROLE on 127.0.0.1:@port ("master", "slave", "sentinel"). */
static char *
role_of (int port)
{
  redisReply *reply = command_on (port, "ROLE");
  char *role;

  g_assert_cmpint (reply->type, ==, REDIS_REPLY_ARRAY);
  g_assert_cmpuint (reply->elements, >=, 1);
  role = g_strdup (reply->element[0]->str);
  freeReplyObject (reply);
  return role;
}

/* --- Cluster ------------------------------------------------------------------------ */

#define N_MASTERS 3
#define N_SLOTS 16384

/* The cluster the cluster tests share: 3 masters, 1 replica each. */
static RedisLockTestCluster *shared_cluster;
static gboolean cluster_skipped;

static RedisLockTestCluster *
get_cluster (void)
{
  if (shared_cluster == NULL && !cluster_skipped)
    {
      gint64 start = g_get_monotonic_time ();

      shared_cluster = redis_lock_test_cluster_new_or_skip (N_MASTERS, 1);
      cluster_skipped = shared_cluster == NULL;
      if (shared_cluster != NULL)
        g_test_message ("cluster of %u nodes formed in %" G_GINT64_FORMAT " ms",
                        redis_lock_test_cluster_get_n_nodes (shared_cluster),
                        (g_get_monotonic_time () - start) / 1000);
    }
  else if (cluster_skipped)
    g_test_skip ("redis-server is not installed");
  return shared_cluster;
}

static int
port_of (RedisLockTestCluster *cluster, guint node)
{
  return redis_lock_test_cluster_get_port (cluster, node);
}

/* The slot range master @m was given. */
static guint
first_slot (guint m)
{
  return m * N_SLOTS / N_MASTERS;
}

static void
test_cluster_forms (void)
{
  RedisLockTestCluster *cluster;
  g_autoptr (GError) error = NULL;
  g_autoptr (GString) url = g_string_new ("redis-cluster://");
  guint n;

  g_test_summary ("A cluster of three masters with a replica each forms with the documented "
                  "roles, slot ranges, ports and URLs.");
  cluster = get_cluster ();
  if (cluster == NULL)
    return;

  n = redis_lock_test_cluster_get_n_nodes (cluster);
  g_assert_cmpuint (n, ==, 2 * N_MASTERS);
  for (guint i = 0; i < n; i++)
    {
      g_autofree char *node_url = g_strdup_printf ("redis://127.0.0.1:%d", port_of (cluster, i));
      g_autofree char *role = role_of (port_of (cluster, i));
      redisReply *reply;

      g_assert_cmpint (redis_lock_test_cluster_get_pid (cluster, i), >, 0);
      g_assert_cmpstr (redis_lock_test_cluster_get_node_url (cluster, i), ==, node_url);
      g_string_append_printf (url, "%s127.0.0.1:%d", i > 0 ? "," : "", port_of (cluster, i));
      for (guint j = 0; j < i; j++)
        g_assert_cmpint (port_of (cluster, i), !=, port_of (cluster, j));
      /* Masters first, then replica r of master m at n_masters + m. */
      g_assert_cmpstr (role, ==, i < N_MASTERS ? "master" : "slave");
      if (i >= N_MASTERS)
        {
          reply = command_on (port_of (cluster, i), "ROLE");
          g_assert_cmpint (reply->element[2]->integer, ==, port_of (cluster, i - N_MASTERS));
          freeReplyObject (reply);
        }
      reply = command_on (port_of (cluster, i), "CLUSTER INFO");
      g_assert_nonnull (strstr (reply->str, "cluster_state:ok"));
      g_assert_nonnull (strstr (reply->str, "cluster_known_nodes:6"));
      freeReplyObject (reply);
    }
  g_assert_cmpstr (redis_lock_test_cluster_get_url (cluster), ==, url->str);

  for (guint m = 0; m < N_MASTERS; m++)
    {
      g_assert_cmpint (redis_lock_test_cluster_get_slot_owner (cluster, first_slot (m)), ==, m);
      g_assert_cmpint (redis_lock_test_cluster_get_slot_owner (cluster, first_slot (m + 1) - 1), ==,
                       m);
    }
  TEST_ASSERT_OK (redis_lock_test_cluster_wait_ok (cluster, 5000, &error));
}

static void
test_cluster_key_slot (void)
{
  static const char *const keys[] = {
    "",
    "a",
    "foo",
    "123456789",
    "rltest:lock",
    "{user1000}.following",
    "{user1000}.followers",
    "foo{}{bar}",
    "foo{{bar}}zap",
    "foo{bar}{zap}",
    "{}",
    "}{",
    "{a",
    "a}",
    "x{y}",
    "{"
    "}"
    "x",
    "€uro{€}",
    "very long key with spaces and {tags} in it",
  };
  RedisLockTestCluster *cluster;
  redisContext *c;

  g_test_summary ("redis_lock_test_cluster_key_slot() agrees with CLUSTER KEYSLOT, with and "
                  "without hash tags.");
  /* Known values first: CRC16-XMODEM("123456789") is 0x31C3. */
  g_assert_cmpuint (redis_lock_test_cluster_key_slot ("123456789"), ==, 0x31C3 % N_SLOTS);
  g_assert_cmpuint (redis_lock_test_cluster_key_slot ("{user1000}.following"), ==,
                    redis_lock_test_cluster_key_slot ("{user1000}.followers"));
  g_assert_cmpuint (redis_lock_test_cluster_key_slot ("foo{bar}{zap}"), ==,
                    redis_lock_test_cluster_key_slot ("bar"));
  g_assert_cmpuint (redis_lock_test_cluster_key_slot ("foo{{bar}}zap"), ==,
                    redis_lock_test_cluster_key_slot ("{bar"));

  cluster = get_cluster ();
  if (cluster == NULL)
    return;
  c = connect_port (port_of (cluster, 0));
  for (gsize i = 0; i < G_N_ELEMENTS (keys) + 200; i++)
    {
      g_autofree char *generated
          = i < G_N_ELEMENTS (keys)
                ? g_strdup (keys[i])
                : g_strdup_printf ("%s%u{%s}%u", (i % 3) ? "lock:" : "",
                                   g_test_rand_int_range (0, 100000), (i % 5) ? "tag" : "",
                                   g_test_rand_int_range (0, 1000));
      redisReply *reply = redisCommand (c, "CLUSTER KEYSLOT %s", generated);

      g_assert_nonnull (reply);
      g_assert_cmpint (reply->type, ==, REDIS_REPLY_INTEGER);
      if ((guint)reply->integer != redis_lock_test_cluster_key_slot (generated))
        g_error ("slot of “%s”: CLUSTER KEYSLOT says %lld, the helper %u", generated,
                 reply->integer, redis_lock_test_cluster_key_slot (generated));
      freeReplyObject (reply);
    }
  redisFree (c);
}

/* A key of @slot (found by trying names), with a hash tag so other keys can join it. */
static char *
key_in_slot (guint slot)
{
  for (guint i = 0;; i++)
    {
      char *tag = g_strdup_printf ("t%u", i);

      if (redis_lock_test_cluster_key_slot (tag) == slot)
        return tag;
      g_free (tag);
    }
}

/* SET @key @value on @node, asserting OK. */
static void
set_on (RedisLockTestCluster *cluster, guint node, const char *key, const char *value)
{
  redisReply *reply = command_on (port_of (cluster, node), "SET %s %s", key, value);

  g_assert_cmpint (reply->type, ==, REDIS_REPLY_STATUS);
  g_assert_cmpstr (reply->str, ==, "OK");
  freeReplyObject (reply);
}

/* GET @key on @node (after ASKING when @asking): the value, or the error's first word
 * ("MOVED", "ASK") prefixed with '-'. */
static char *
get_on (RedisLockTestCluster *cluster, guint node, const char *key, gboolean asking)
{
  redisContext *c = connect_port (port_of (cluster, node));
  redisReply *reply;
  char *result;

  if (asking)
    {
      reply = redisCommand (c, "ASKING");
      g_assert_nonnull (reply);
      freeReplyObject (reply);
    }
  reply = redisCommand (c, "GET %s", key);
  g_assert_nonnull (reply);
  if (reply->type == REDIS_REPLY_STRING)
    result = g_strdup (reply->str);
  else if (reply->type == REDIS_REPLY_ERROR)
    result = g_strdup_printf ("-%.*s", (int)strcspn (reply->str, " "), reply->str);
  else
    result = g_strdup ("(nil)");
  freeReplyObject (reply);
  redisFree (c);
  return result;
}

static void
test_cluster_migrate_slot (void)
{
  RedisLockTestCluster *cluster;
  g_autoptr (GError) error = NULL;
  g_autofree char *tag = NULL;
  g_autofree char *key = NULL;
  g_autofree char *value = NULL;
  g_autofree char *moved = NULL;
  guint slot = first_slot (1) + 7;

  g_test_summary ("migrate_slot() moves a slot with its keys to another master.");
  cluster = get_cluster ();
  if (cluster == NULL)
    return;

  tag = key_in_slot (slot);
  key = g_strdup_printf ("{%s}:moved", tag);
  g_assert_cmpint (redis_lock_test_cluster_get_slot_owner (cluster, slot), ==, 1);
  set_on (cluster, 1, key, "v1");

  TEST_ASSERT_OK (redis_lock_test_cluster_migrate_slot (cluster, slot, 2, &error));
  g_assert_cmpint (redis_lock_test_cluster_get_slot_owner (cluster, slot), ==, 2);
  value = get_on (cluster, 2, key, FALSE);
  g_assert_cmpstr (value, ==, "v1");
  moved = get_on (cluster, 1, key, FALSE);
  g_assert_cmpstr (moved, ==, "-MOVED");
  /* Its neighbours stayed. */
  g_assert_cmpint (redis_lock_test_cluster_get_slot_owner (cluster, slot - 1), ==, 1);
  g_assert_cmpint (redis_lock_test_cluster_get_slot_owner (cluster, slot + 1), ==, 1);

  /* A slot already where it is asked to go stays there. */
  TEST_ASSERT_OK (redis_lock_test_cluster_migrate_slot (cluster, slot, 2, &error));
  TEST_ASSERT_OK (redis_lock_test_cluster_wait_ok (cluster, 5000, &error));
}

static void
test_cluster_migrate_in_steps (void)
{
  RedisLockTestCluster *cluster;
  g_autoptr (GError) error = NULL;
  g_autofree char *tag = NULL;
  g_autofree char *moved = NULL;
  g_autofree char *stays = NULL;
  guint slot = first_slot (0) + 11;
  char *answer;

  g_test_summary ("migrate_slot_begin(), migrate_key() and migrate_slot_finish(): a key moved "
                  "alone is answered ASK by the owner and served after ASKING by the "
                  "importing node; finishing moves the rest and the slot.");
  cluster = get_cluster ();
  if (cluster == NULL)
    return;

  tag = key_in_slot (slot);
  moved = g_strdup_printf ("{%s}:first", tag);
  stays = g_strdup_printf ("{%s}:second", tag);
  set_on (cluster, 0, moved, "one");
  set_on (cluster, 0, stays, "two");

  TEST_ASSERT_OK (redis_lock_test_cluster_migrate_slot_begin (cluster, slot, 1, &error));
  /* A second begin of the same slot, a key of a slot not migrating: refused. */
  g_assert_false (redis_lock_test_cluster_migrate_slot_begin (cluster, slot, 2, &error));
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_EXISTS);
  g_clear_error (&error);
  g_assert_false (redis_lock_test_cluster_migrate_key (cluster, "elsewhere", &error));
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);

  TEST_ASSERT_OK (redis_lock_test_cluster_migrate_key (cluster, moved, &error));
  /* Absent keys are no error. */
  TEST_ASSERT_OK (redis_lock_test_cluster_migrate_key (cluster, moved, &error));

  g_assert_cmpint (redis_lock_test_cluster_get_slot_owner (cluster, slot), ==, 0);
  answer = get_on (cluster, 0, moved, FALSE);
  g_assert_cmpstr (answer, ==, "-ASK");
  g_free (answer);
  answer = get_on (cluster, 1, moved, TRUE);
  g_assert_cmpstr (answer, ==, "one");
  g_free (answer);
  answer = get_on (cluster, 1, moved, FALSE);
  g_assert_cmpstr (answer, ==, "-MOVED");
  g_free (answer);
  answer = get_on (cluster, 0, stays, FALSE);
  g_assert_cmpstr (answer, ==, "two");
  g_free (answer);

  TEST_ASSERT_OK (redis_lock_test_cluster_migrate_slot_finish (cluster, slot, &error));
  g_assert_cmpint (redis_lock_test_cluster_get_slot_owner (cluster, slot), ==, 1);
  answer = get_on (cluster, 1, stays, FALSE);
  g_assert_cmpstr (answer, ==, "two");
  g_free (answer);
  answer = get_on (cluster, 1, moved, FALSE);
  g_assert_cmpstr (answer, ==, "one");
  g_free (answer);
  answer = get_on (cluster, 0, stays, FALSE);
  g_assert_cmpstr (answer, ==, "-MOVED");
  g_free (answer);

  g_assert_false (redis_lock_test_cluster_migrate_slot_finish (cluster, slot, &error));
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);
  TEST_ASSERT_OK (redis_lock_test_cluster_wait_ok (cluster, 5000, &error));
}

static void
test_cluster_pause (void)
{
  RedisLockTestCluster *cluster;
  g_autoptr (GError) error = NULL;
  struct timeval tv = { 0, 200 * 1000 };
  redisContext *c;
  redisReply *reply;
  guint replica = N_MASTERS + 2;

  g_test_summary ("A paused node answers nothing until it is resumed.");
  cluster = get_cluster ();
  if (cluster == NULL)
    return;

  redis_lock_test_cluster_pause_node (cluster, replica);
  g_assert_cmpint (redis_lock_test_cluster_get_pid (cluster, replica), >, 0);
  c = redisConnectWithTimeout ("127.0.0.1", port_of (cluster, replica), tv);
  g_assert_nonnull (c);
  /* The kernel still accepts the connection; the reply never comes. */
  if (c->err == 0)
    {
      g_assert_cmpint (redisSetTimeout (c, tv), ==, REDIS_OK);
      reply = redisCommand (c, "PING");
      g_assert_null (reply);
    }
  redisFree (c);
  redis_lock_test_cluster_resume_node (cluster, replica);
  reply = command_on (port_of (cluster, replica), "PING");
  g_assert_cmpstr (reply->str, ==, "PONG");
  freeReplyObject (reply);
  TEST_ASSERT_OK (redis_lock_test_cluster_wait_ok (cluster, 10000, &error));
}

static void
test_cluster_wait_times_out (void)
{
  RedisLockTestCluster *cluster;
  g_autoptr (GError) error = NULL;
  gint64 start;

  g_test_summary ("wait_ok() fails with G_IO_ERROR_TIMED_OUT while a master is paused (its "
                  "slots have no running owner), and succeeds once it is resumed.");
  cluster = get_cluster ();
  if (cluster == NULL)
    return;

  redis_lock_test_cluster_pause_node (cluster, 0);
  start = g_get_monotonic_time ();
  g_assert_false (redis_lock_test_cluster_wait_ok (cluster, 100, &error));
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_TIMED_OUT);
  g_test_message ("%s", error->message);
  g_clear_error (&error);
  redis_lock_test_cluster_resume_node (cluster, 0);
  g_assert_cmpint (g_get_monotonic_time () - start, <, 5 * G_USEC_PER_SEC);
  TEST_ASSERT_OK (redis_lock_test_cluster_wait_ok (cluster, 20000, &error));
}

static void
test_cluster_failover (void)
{
  RedisLockTestCluster *cluster;
  g_autoptr (GError) error = NULL;
  g_autofree char *role = NULL;
  guint master = 2;
  guint replica = N_MASTERS + master;
  guint slot = first_slot (master) + 100;
  gint64 start;

  g_test_summary ("A master killed is replaced by its replica: wait_ok() returns once it is, "
                  "get_slot_owner() names the former replica, and the old master restarted "
                  "rejoins as a replica.");
  cluster = get_cluster ();
  if (cluster == NULL)
    return;

  g_assert_cmpint (redis_lock_test_cluster_get_slot_owner (cluster, slot), ==, master);
  redis_lock_test_cluster_stop_node (cluster, master);
  g_assert_cmpint (redis_lock_test_cluster_get_pid (cluster, master), ==, 0);
  /* No-op when stopped. */
  redis_lock_test_cluster_stop_node (cluster, master);

  start = g_get_monotonic_time ();
  TEST_ASSERT_OK (redis_lock_test_cluster_wait_ok (cluster, 20000, &error));
  g_test_message ("failover took %" G_GINT64_FORMAT " ms",
                  (g_get_monotonic_time () - start) / 1000);
  g_assert_cmpint (redis_lock_test_cluster_get_slot_owner (cluster, slot), ==, replica);
  role = role_of (port_of (cluster, replica));
  g_assert_cmpstr (role, ==, "master");
  g_clear_pointer (&role, g_free);

  start = g_get_monotonic_time ();
  TEST_ASSERT_OK (redis_lock_test_cluster_start_node (cluster, master, &error));
  g_assert_cmpint (redis_lock_test_cluster_get_pid (cluster, master), >, 0);
  TEST_ASSERT_OK (redis_lock_test_cluster_wait_ok (cluster, 20000, &error));
  g_test_message ("rejoin took %" G_GINT64_FORMAT " ms", (g_get_monotonic_time () - start) / 1000);
  role = role_of (port_of (cluster, master));
  g_assert_cmpstr (role, ==, "slave");
  g_assert_cmpint (redis_lock_test_cluster_get_slot_owner (cluster, slot), ==, replica);
}

/* --- Sentinel ---------------------------------------------------------------------- */

#define N_REPLICAS 2
#define N_SENTINELS 3

/* The deployment the Sentinel tests share: a master, 2 replicas, 3 Sentinels. */
static RedisLockTestSentinel *shared_sentinel;
static gboolean sentinel_skipped;

static RedisLockTestSentinel *
get_sentinel (void)
{
  if (shared_sentinel == NULL && !sentinel_skipped)
    {
      gint64 start = g_get_monotonic_time ();

      shared_sentinel = redis_lock_test_sentinel_new_or_skip (N_REPLICAS, N_SENTINELS);
      sentinel_skipped = shared_sentinel == NULL;
      if (shared_sentinel != NULL)
        g_test_message ("Sentinel deployment up in %" G_GINT64_FORMAT " ms",
                        (g_get_monotonic_time () - start) / 1000);
    }
  else if (sentinel_skipped)
    g_test_skip ("redis-server is not installed");
  return shared_sentinel;
}

/* The port of data node @node, from its URL. */
static int
node_port (RedisLockTestSentinel *sentinel, guint node)
{
  const char *url = redis_lock_test_sentinel_get_node_url (sentinel, node);

  g_assert_true (g_str_has_prefix (url, "redis://127.0.0.1:"));
  return (int)g_ascii_strtoll (url + strlen ("redis://127.0.0.1:"), NULL, 10);
}

/* The port of Sentinel @index, from the deployment's URL. */
static int
sentinel_port (RedisLockTestSentinel *sentinel, guint index)
{
  const char *url = redis_lock_test_sentinel_get_url (sentinel);
  g_auto (GStrv) hosts = NULL;
  g_autofree char *list = NULL;

  g_assert_true (g_str_has_prefix (url, "redis-sentinel://"));
  list = g_strndup (url + strlen ("redis-sentinel://"),
                    strcspn (url, "#") - strlen ("redis-sentinel://"));
  hosts = g_strsplit (list, ",", -1);
  g_assert_cmpuint (index, <, g_strv_length (hosts));
  g_assert_true (g_str_has_prefix (hosts[index], "127.0.0.1:"));
  return (int)g_ascii_strtoll (hosts[index] + strlen ("127.0.0.1:"), NULL, 10);
}

/* The port Sentinel @index names for the master. */
static int
port_named_by (RedisLockTestSentinel *sentinel, guint index)
{
  redisReply *reply
      = command_on (sentinel_port (sentinel, index), "SENTINEL get-master-addr-by-name %s",
                    redis_lock_test_sentinel_get_master_name (sentinel));
  int port;

  g_assert_cmpint (reply->type, ==, REDIS_REPLY_ARRAY);
  g_assert_cmpuint (reply->elements, ==, 2);
  g_assert_cmpstr (reply->element[0]->str, ==, "127.0.0.1");
  port = (int)g_ascii_strtoll (reply->element[1]->str, NULL, 10);
  freeReplyObject (reply);
  return port;
}

static void
test_sentinel_forms (void)
{
  RedisLockTestSentinel *sentinel;
  g_autoptr (GString) url = g_string_new ("redis-sentinel://");

  g_test_summary ("A master, two replicas and three Sentinels come up: node 0 is master, the "
                  "others replicate it, every Sentinel names it and knows every replica.");
  sentinel = get_sentinel ();
  if (sentinel == NULL)
    return;

  g_assert_cmpuint (redis_lock_test_sentinel_get_n_nodes (sentinel), ==, 1 + N_REPLICAS);
  g_assert_cmpstr (redis_lock_test_sentinel_get_master_name (sentinel), ==, "mymaster");
  g_assert_cmpint (redis_lock_test_sentinel_get_master (sentinel), ==, 0);
  for (guint i = 0; i <= N_REPLICAS; i++)
    {
      g_autofree char *role = role_of (node_port (sentinel, i));

      g_assert_cmpint (redis_lock_test_sentinel_get_pid (sentinel, i), >, 0);
      g_assert_cmpstr (role, ==, i == 0 ? "master" : "slave");
    }
  for (guint s = 0; s < N_SENTINELS; s++)
    {
      g_autofree char *role = role_of (sentinel_port (sentinel, s));
      redisReply *reply;

      g_assert_cmpstr (role, ==, "sentinel");
      g_assert_cmpint (port_named_by (sentinel, s), ==, node_port (sentinel, 0));
      reply = command_on (sentinel_port (sentinel, s), "SENTINEL REPLICAS mymaster");
      g_assert_cmpint (reply->type, ==, REDIS_REPLY_ARRAY);
      g_assert_cmpuint (reply->elements, ==, N_REPLICAS);
      freeReplyObject (reply);
      g_string_append_printf (url, "%s127.0.0.1:%d", s > 0 ? "," : "", sentinel_port (sentinel, s));
    }
  g_string_append (url, "#mymaster");
  g_assert_cmpstr (redis_lock_test_sentinel_get_url (sentinel), ==, url->str);
}

static void
test_sentinel_restart_replica (void)
{
  RedisLockTestSentinel *sentinel;
  g_autoptr (GError) error = NULL;
  redisReply *reply;

  g_test_summary ("A data node stopped and started again answers on its port.");
  sentinel = get_sentinel ();
  if (sentinel == NULL)
    return;

  redis_lock_test_sentinel_stop_node (sentinel, N_REPLICAS);
  g_assert_cmpint (redis_lock_test_sentinel_get_pid (sentinel, N_REPLICAS), ==, 0);
  redis_lock_test_sentinel_stop_node (sentinel, N_REPLICAS);
  g_assert_true (redis_lock_test_sentinel_start_node (sentinel, N_REPLICAS, &error));
  g_assert_no_error (error);
  g_assert_cmpint (redis_lock_test_sentinel_get_pid (sentinel, N_REPLICAS), >, 0);
  reply = command_on (node_port (sentinel, N_REPLICAS), "PING");
  g_assert_cmpstr (reply->str, ==, "PONG");
  freeReplyObject (reply);

  redis_lock_test_sentinel_pause_node (sentinel, N_REPLICAS);
  redis_lock_test_sentinel_resume_node (sentinel, N_REPLICAS);
  reply = command_on (node_port (sentinel, N_REPLICAS), "PING");
  g_assert_cmpstr (reply->str, ==, "PONG");
  freeReplyObject (reply);
  g_assert_cmpint (redis_lock_test_sentinel_get_master (sentinel), ==, 0);
}

static void
test_sentinel_failover (void)
{
  RedisLockTestSentinel *sentinel;
  g_autoptr (GError) error = NULL;
  g_autofree char *role = NULL;
  gint64 start;
  int master;

  g_test_summary ("failover() returns a new master that answers ROLE as master and that every "
                  "Sentinel names.");
  sentinel = get_sentinel ();
  if (sentinel == NULL)
    return;

  start = g_get_monotonic_time ();
  master = redis_lock_test_sentinel_failover (sentinel, 30000, &error);
  g_assert_no_error (error);
  g_test_message ("failover took %" G_GINT64_FORMAT " ms",
                  (g_get_monotonic_time () - start) / 1000);
  g_assert_cmpint (master, >=, 1);
  g_assert_cmpint (master, <=, N_REPLICAS);
  role = role_of (node_port (sentinel, (guint)master));
  g_assert_cmpstr (role, ==, "master");
  for (guint s = 0; s < N_SENTINELS; s++)
    g_assert_cmpint (port_named_by (sentinel, s), ==, node_port (sentinel, (guint)master));
  g_assert_cmpint (redis_lock_test_sentinel_get_master (sentinel), ==, master);
}

static void
test_sentinel_no_replica (void)
{
  g_autoptr (RedisLockTestSentinel) sentinel = NULL;
  g_autoptr (GError) error = NULL;

  g_test_summary ("A master without replicas and one Sentinel come up; a failover is refused.");
  sentinel = redis_lock_test_sentinel_new_or_skip (0, 1);
  if (sentinel == NULL)
    return;

  g_assert_cmpuint (redis_lock_test_sentinel_get_n_nodes (sentinel), ==, 1);
  g_assert_cmpint (redis_lock_test_sentinel_get_master (sentinel), ==, 0);
  g_assert_cmpint (port_named_by (sentinel, 0), ==, node_port (sentinel, 0));
  g_assert_cmpint (redis_lock_test_sentinel_failover (sentinel, 1000, &error), ==, -1);
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT);
  redis_lock_test_sentinel_stop_node (sentinel, 0);
  g_assert_cmpint (redis_lock_test_sentinel_get_master (sentinel), ==, -1);
}

static void
test_sentinel_stop_sentinel (void)
{
  RedisLockTestSentinel *sentinel;
  g_autoptr (GError) error = NULL;
  struct timeval tv = { 1, 0 };
  redisContext *c;
  gint64 start;
  int before;
  int master;

  g_test_summary ("A stopped Sentinel no longer answers; the others still fail over.");
  sentinel = get_sentinel ();
  if (sentinel == NULL)
    return;

  redis_lock_test_sentinel_stop_sentinel (sentinel, 0);
  redis_lock_test_sentinel_stop_sentinel (sentinel, 0);
  c = redisConnectWithTimeout ("127.0.0.1", sentinel_port (sentinel, 0), tv);
  g_assert_nonnull (c);
  g_assert_cmpint (c->err, !=, 0);
  redisFree (c);

  before = redis_lock_test_sentinel_get_master (sentinel);
  start = g_get_monotonic_time ();
  master = redis_lock_test_sentinel_failover (sentinel, 30000, &error);
  g_assert_no_error (error);
  g_test_message ("second failover took %" G_GINT64_FORMAT " ms",
                  (g_get_monotonic_time () - start) / 1000);
  g_assert_cmpint (master, >=, 0);
  g_assert_cmpint (master, !=, before);
  for (guint s = 1; s < N_SENTINELS; s++)
    g_assert_cmpint (port_named_by (sentinel, s), ==, node_port (sentinel, (guint)master));
}

int
main (int argc, char **argv)
{
  int status;

  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/topology-helpers/cluster/forms", test_cluster_forms);
  g_test_add_func ("/topology-helpers/cluster/key-slot", test_cluster_key_slot);
  g_test_add_func ("/topology-helpers/cluster/migrate-slot", test_cluster_migrate_slot);
  g_test_add_func ("/topology-helpers/cluster/migrate-in-steps", test_cluster_migrate_in_steps);
  g_test_add_func ("/topology-helpers/cluster/pause", test_cluster_pause);
  g_test_add_func ("/topology-helpers/cluster/wait-times-out", test_cluster_wait_times_out);
  g_test_add_func ("/topology-helpers/cluster/failover", test_cluster_failover);
  g_test_add_func ("/topology-helpers/sentinel/forms", test_sentinel_forms);
  g_test_add_func ("/topology-helpers/sentinel/restart-replica", test_sentinel_restart_replica);
  g_test_add_func ("/topology-helpers/sentinel/failover", test_sentinel_failover);
  g_test_add_func ("/topology-helpers/sentinel/stop-sentinel", test_sentinel_stop_sentinel);
  g_test_add_func ("/topology-helpers/sentinel/no-replica", test_sentinel_no_replica);

  status = g_test_run ();
  g_clear_pointer (&shared_cluster, redis_lock_test_cluster_free);
  g_clear_pointer (&shared_sentinel, redis_lock_test_sentinel_free);
  return status;
}
