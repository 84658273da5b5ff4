/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* cluster-common.h: helpers the Cluster test programs share (see cluster-common.c). */
#ifndef RL_TEST_CLUSTER_COMMON_H
#define RL_TEST_CLUSTER_COMMON_H

#include <hiredis/hiredis.h>
#include <redislock/redislock-test.h>

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

#endif /* RL_TEST_CLUSTER_COMMON_H */
