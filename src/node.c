/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* node.c: one data node of a deployment, and the error replies every topology reads
 * the same way.
 *
 * A node is an address and its connection pool, shared by reference so that a call
 * that got a node keeps a valid pool while the topology replaces it (a Cluster slot
 * map refresh, a Sentinel failover). It sits below the topologies (topology.c,
 * sentinel.c, cluster.c), which all make and drop nodes, so that none of them calls
 * another.
 */
#include "config.h"

#include <string.h>

#include "topology.h"

RlNode *
rl_node_new (RlConnConfig *config, RlStoreContext *ctx)
{
  RlNode *node = g_new0 (RlNode, 1);

  node->ref = 1;
  if (config->path != NULL)
    node->name = g_strdup (config->path);
  else if (strchr (config->host, ':') != NULL)
    node->name = g_strdup_printf ("[%s]:%d", config->host, config->port);
  else
    node->name = g_strdup_printf ("%s:%d", config->host, config->port);
  node->host = g_strdup (config->host);
  node->port = config->port;
  node->pool = rl_pool_new (config, &ctx->connect_timeout_ms, &ctx->command_timeout_ms);
  return node;
}

RlNode *
rl_node_ref (RlNode *node)
{
  g_atomic_int_inc (&node->ref);
  return node;
}

void
rl_node_unref (RlNode *node)
{
  if (node == NULL || !g_atomic_int_dec_and_test (&node->ref))
    return;
  rl_pool_free (node->pool);
  g_free (node->name);
  g_free (node->host);
  g_free (node);
}

RlReplyKind
rl_topology_classify_common (const redisReply *reply)
{
  /* BUSY: a script of another client runs past busy-reply-threshold. */
  static const char *const retry[] = { "TRYAGAIN", "CLUSTERDOWN", "LOADING", "MASTERDOWN",
                                       "READONLY", "BUSY" };

  if (reply->type != REDIS_REPLY_ERROR)
    return RL_REPLY_FINAL;
  for (gsize i = 0; i < G_N_ELEMENTS (retry); i++)
    {
      gsize n = strlen (retry[i]);
      if (strncmp (reply->str, retry[i], n) == 0 && (reply->str[n] == ' ' || reply->str[n] == '\0'))
        return RL_REPLY_RETRY;
    }
  return RL_REPLY_FINAL;
}

