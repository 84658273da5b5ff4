/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* cluster-common.h: helpers the Cluster test programs share (see cluster-common.c). */
#ifndef RL_TEST_CLUSTER_COMMON_H
#define RL_TEST_CLUSTER_COMMON_H

#include <hiredis/hiredis.h>
#include <redislock/redislock-test.h>

/* The cluster of three masters with a replica each that the harmless tests of a
 * program share, started on first use; NULL when the test was skipped (no
 * redis-server). common_cluster_free() stops it, at the end of main(). */
RedisLockTestCluster *common_cluster (void);
void common_cluster_free (void);
/* A raw connection to one node. */
redisContext *node_connect (RedisLockTestCluster *cluster, guint node);
/* The master that owns @key's slot now. */
guint key_owner (RedisLockTestCluster *cluster, const char *key);
/* GET @key on @node itself (READONLY and ASKING first); NULL when absent. */
char *node_get (RedisLockTestCluster *cluster, guint node, const char *key);
/* A lock name whose key (under TEST_REGISTRY_KEY) is served by master @node, the
 * @nth such name from @prefix. */
char *name_on (RedisLockTestCluster *cluster, guint node, const char *prefix, guint nth);
/* Polls until GET @key on @node (READONLY) answers @value (10 s at most). */
void wait_replicated (RedisLockTestCluster *cluster, guint node, const char *key,
                      const char *value);

/* Shard notifications, seen from outside (cluster-shard.c, cluster-shard-family.c). */

/* The shard channel of @key: `registry_key-channel:{key}` for a key without a hash
 * tag, `registry_key-channel:key` for one with a tag (the tag carries over). */
char *shard_channel (const char *registry_key, const char *key);
/* How many clients of @node are subscribed to the shard channel @channel. */
long long shard_subscribers (RedisLockTestCluster *cluster, guint node, const char *channel);
/* Polls until a client subscribes to @channel on @node (10 s at most). */
void wait_shard_subscribed (RedisLockTestCluster *cluster, guint node, const char *channel);
/* Polls until no client is subscribed to @channel on @node any more, within
 * @timeout_ms. */
void wait_shard_unsubscribed (RedisLockTestCluster *cluster, guint node, const char *channel,
                              gint64 timeout_ms);
/* A holder registry whose releases are heard on shard channels only (classic
 * notifications off), with a 30 s TTL and one replica acknowledging each write, and a
 * waiter registry that polls only every 60 s: within the holder's TTL, only a
 * notification can wake the waiter. */
void open_pair (RedisLockTestCluster *cluster, RedisLockRegistry **holder,
                RedisLockRegistry **waiter);
#define PAIR_TTL_MS 30000

/* Reads the next pub/sub message of @c, which must be of @kind (smessage, pmessage):
 * its channel in *@channel (when not NULL), its payload as the result (g_free()). */
char *next_message (redisContext *c, const char *kind, char **channel);
/* The next pattern message of @c whose payload is @key or @marker: a classic release
 * of an earlier test may still be on its way over the cluster bus, and is skipped. */
char *next_pmessage_of (redisContext *c, const char *key, const char *marker);
/* A connection to @node subscribed with @command (SSUBSCRIBE, PSUBSCRIBE) to @what. */
redisContext *subscribed (RedisLockTestCluster *cluster, guint node, const char *command,
                          const char *what);

/* Listeners, outside the library, of what a release publishes: an SSUBSCRIBE client of
 * the shard @channel on @node (the master of its slot), and a classic pattern
 * subscriber (`registry_key-channel:*`) on another master. */
typedef struct
{
  redisContext *shard, *classic;
  guint node;
  char *channel;
} ChannelWatch;

void channel_watch_begin (ChannelWatch *watch, RedisLockTestCluster *cluster, guint node,
                          const char *channel);
/* Checks that a release of a key that starts with @key_prefix, made since
 * channel_watch_begin(), was published on the shard channel and not classically (markers
 * published after it reach each listener after it), and closes the listeners. */
void channel_watch_end_sharded_only (ChannelWatch *watch, RedisLockTestCluster *cluster,
                                     const char *key_prefix);

#endif /* RL_TEST_CLUSTER_COMMON_H */
