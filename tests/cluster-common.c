/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* cluster-common.c: what the Cluster test programs (cluster.c, cluster-shard.c,
 * cluster-shard-family.c) share to look at a test Cluster from outside the library: raw
 * connections to its nodes, which master owns a key, a key's value on one node, names
 * whose keys a given master serves, the wait for a write to reach a replica, and the
 * shard channels' subscribers. Each program starts its own clusters; these only read
 * them (and open the registries of a holder and a waiter).
 */
#include "config.h"

#include <string.h>

#include "common.h"
#include "cluster-common.h"

#define REGISTRY_KEY TEST_REGISTRY_KEY

static RedisLockTestCluster *common;

RedisLockTestCluster *
common_cluster (void)
{
  if (common == NULL)
    common = redis_lock_test_cluster_new_or_skip (3, 1);
  return common;
}

void
common_cluster_free (void)
{
  g_clear_pointer (&common, redis_lock_test_cluster_free);
}

/* A raw connection to one node. */
redisContext *
node_connect (RedisLockTestCluster *cluster, guint node)
{
  struct timeval tv = { 5, 0 };
  redisContext *c
      = redisConnectWithTimeout ("127.0.0.1", redis_lock_test_cluster_get_port (cluster, node), tv);

  g_assert_nonnull (c);
  g_assert_cmpint (c->err, ==, 0);
  redisSetTimeout (c, tv);
  return c;
}

/* The master that owns @key's slot now. */
guint
key_owner (RedisLockTestCluster *cluster, const char *key)
{
  int owner = redis_lock_test_cluster_get_slot_owner (cluster, redis_lock_test_cluster_key_slot (key));

  g_assert_cmpint (owner, >=, 0);
  return (guint) owner;
}

/* GET @key on @node itself (READONLY first, so that a replica answers too, and ASKING,
 * so that a node importing the key's slot does); NULL when absent. */
char *
node_get (RedisLockTestCluster *cluster, guint node, const char *key)
{
  redisContext *c = node_connect (cluster, node);
  redisReply *reply;
  char *value = NULL;

  freeReplyObject (test_redis_command (c, "READONLY"));
  freeReplyObject (test_redis_command (c, "ASKING"));
  reply = test_redis_command (c, "GET %s", key);
  if (reply->type == REDIS_REPLY_STRING)
    value = g_strdup (reply->str);
  else
    /* Not the key's node: MOVED. */
    g_assert_true (reply->type == REDIS_REPLY_NIL || reply->type == REDIS_REPLY_ERROR);
  freeReplyObject (reply);
  redisFree (c);
  return value;
}

/* A lock name whose key is served by master @node, the @nth such name from @prefix. */
char *
name_on (RedisLockTestCluster *cluster, guint node, const char *prefix, guint nth)
{
  for (guint i = 0;; i++)
    {
      char *name = g_strdup_printf ("%s%u", prefix, i);
      g_autofree char *key = g_strconcat (REGISTRY_KEY ":", name, NULL);
      if (key_owner (cluster, key) == node && nth-- == 0)
        return name;
      g_free (name);
    }
}


/* Polls until GET @key on @node (READONLY) answers @value. */
void
wait_replicated (RedisLockTestCluster *cluster, guint node, const char *key, const char *value)
{
  gint64 end = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;

  for (;;)
    {
      g_autofree char *got = node_get (cluster, node, key);
      if (g_strcmp0 (got, value) == 0)
        return;
      g_assert_cmpint (g_get_monotonic_time (), <, end);
      g_usleep (2000);
    }
}

char *
shard_channel (const char *registry_key, const char *key)
{
  if (strchr (key, '{') != NULL)
    return g_strconcat (registry_key, "-channel:", key, NULL);
  return g_strconcat (registry_key, "-channel:{", key, "}", NULL);
}

long long
shard_subscribers (RedisLockTestCluster *cluster, guint node, const char *channel)
{
  redisContext *c = node_connect (cluster, node);
  redisReply *reply = test_redis_command (c, "PUBSUB SHARDNUMSUB %s", channel);
  long long n;

  g_assert_cmpint (reply->type, ==, REDIS_REPLY_ARRAY);
  g_assert_cmpuint (reply->elements, ==, 2);
  n = reply->element[1]->integer;
  freeReplyObject (reply);
  redisFree (c);
  return n;
}

void
wait_shard_subscribed (RedisLockTestCluster *cluster, guint node, const char *channel)
{
  gint64 end = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;

  while (shard_subscribers (cluster, node, channel) < 1)
    {
      g_assert_cmpint (g_get_monotonic_time (), <, end);
      g_usleep (2000);
    }
}

void
wait_shard_unsubscribed (RedisLockTestCluster *cluster, guint node, const char *channel,
                         gint64 timeout_ms)
{
  gint64 end = g_get_monotonic_time () + timeout_ms * 1000;

  while (shard_subscribers (cluster, node, channel) > 0)
    {
      g_assert_cmpint (g_get_monotonic_time (), <, end);
      g_usleep (2000);
    }
}

void
open_pair (RedisLockTestCluster *cluster, RedisLockRegistry **holder, RedisLockRegistry **waiter)
{
  *holder = test_registry_new_on (redis_lock_test_cluster_get_url (cluster));
  redis_lock_registry_set_classic_notifications (*holder, FALSE);
  redis_lock_registry_set_expire_after_ms (*holder, PAIR_TTL_MS);
  redis_lock_registry_set_min_replicas (*holder, 1, 2000);
  *waiter = test_registry_new_on (redis_lock_test_cluster_get_url (cluster));
  redis_lock_registry_set_idle_between_tries_ms (*waiter, 60000);
  /* A failover or migration must not end the waiter's attempts with an error. */
  redis_lock_registry_set_command_timeout_ms (*waiter, 10000);
}

/* Reads the next pub/sub message of @c: its kind, its channel (NULL for pmessage's
 * pattern form: the channel then) and its payload, in *@channel and the result. */
char *
next_message (redisContext *c, const char *kind, char **channel)
{
  redisReply *reply = NULL;
  char *payload;
  gsize n;

  g_assert_cmpint (redisGetReply (c, (void **) &reply), ==, REDIS_OK);
  g_assert_nonnull (reply);
  g_assert_cmpint (reply->type, ==, REDIS_REPLY_ARRAY);
  g_assert_cmpstr (reply->element[0]->str, ==, kind);
  n = reply->elements;
  g_assert_cmpuint (n, >=, 3);
  if (channel != NULL)
    *channel = g_strdup (reply->element[n - 2]->str);
  payload = g_strdup (reply->element[n - 1]->str);
  freeReplyObject (reply);
  return payload;
}

char *
next_pmessage_of (redisContext *c, const char *key, const char *marker)
{
  for (;;)
    {
      char *payload = next_message (c, "pmessage", NULL);
      if (g_strcmp0 (payload, key) == 0 || g_strcmp0 (payload, marker) == 0)
        return payload;
      g_test_message ("skipped a late message: %s", payload);
      g_free (payload);
    }
}

redisContext *
subscribed (RedisLockTestCluster *cluster, guint node, const char *command, const char *what)
{
  redisContext *c = node_connect (cluster, node);
  redisReply *reply = test_redis_command (c, "%s %s", command, what);

  g_assert_cmpint (reply->type, ==, REDIS_REPLY_ARRAY);
  freeReplyObject (reply);
  return c;
}

void
channel_watch_begin (ChannelWatch *watch, RedisLockTestCluster *cluster, guint node,
                     const char *channel)
{
  watch->node = node;
  watch->channel = g_strdup (channel);
  watch->shard = subscribed (cluster, node, "SSUBSCRIBE", channel);
  watch->classic = subscribed (cluster, (node + 1) % 3, "PSUBSCRIBE", REGISTRY_KEY "-channel:*");
}

void
channel_watch_end_sharded_only (ChannelWatch *watch, RedisLockTestCluster *cluster,
                                const char *key_prefix)
{
  redisContext *c = node_connect (cluster, watch->node);

  /* Markers after the release, from the node that ran it: each listener gets them
   * after whatever the release sent it. */
  freeReplyObject (test_redis_command (c, "SPUBLISH %s marker", watch->channel));
  freeReplyObject (test_redis_command (c, "PUBLISH %s marker", REGISTRY_KEY "-channel:marker"));
  redisFree (c);
  for (;;)
    {
      g_autofree char *payload = next_message (watch->shard, "smessage", NULL);
      g_assert_cmpstr (payload, !=, "marker");
      if (g_str_has_prefix (payload, key_prefix))
        break;
      g_test_message ("skipped a sharded message: %s", payload);
    }
  for (;;)
    {
      g_autofree char *payload = next_message (watch->classic, "pmessage", NULL);
      g_assert_false (g_str_has_prefix (payload, key_prefix));
      if (g_str_equal (payload, "marker"))
        break;
    }
  redisFree (watch->shard);
  redisFree (watch->classic);
  g_free (watch->channel);
}
