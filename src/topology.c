/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* topology.c: nodes, the one-server topology, and which topology a URL names.
 *
 * A node is an address and its connection pool, shared by reference so that a call
 * that got a node keeps a valid pool while the topology replaces it (a Cluster slot
 * map refresh, a Sentinel failover). The one-server topology is the trivial case: one
 * node for every key, no redirections; it still reads LOADING and similar "not now"
 * replies as retryable, as every topology does. Sentinel (sentinel.c) and Cluster
 * (cluster.c) live in files of their own behind the same table (topology.h).
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
  node->pool = rl_pool_new (config, ctx);
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
  static const char *const retry[] = { "TRYAGAIN", "CLUSTERDOWN", "LOADING", "MASTERDOWN",
                                       "READONLY" };

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

/* One server ----------------------------------------------------------------------- */

typedef struct
{
  RlTopology parent;
  RlNode *node;
} RlSingle;

static RlNode *
single_route (RlTopology *topology, const char *key, GError **error)
{
  return rl_node_ref (((RlSingle *) topology)->node);
}

static GPtrArray *
single_masters (RlTopology *topology, GError **error)
{
  GPtrArray *masters = g_ptr_array_new_with_free_func ((GDestroyNotify) rl_node_unref);

  g_ptr_array_add (masters, rl_node_ref (((RlSingle *) topology)->node));
  return masters;
}

static RlReplyKind
single_classify (RlTopology *topology, RlNode *node, const redisReply *reply, RlNode **target)
{
  RlReplyKind kind = rl_topology_classify_common (reply);

  /* A lone server that answers READONLY is a replica it will stay: retrying cannot
   * help, the error should reach the caller now. */
  if (kind == RL_REPLY_RETRY && g_str_has_prefix (reply->str, "READONLY"))
    return RL_REPLY_FINAL;
  return kind;
}

static RlNode *
single_subscriber (RlTopology *topology, GError **error)
{
  return rl_node_ref (((RlSingle *) topology)->node);
}

static void
single_failed (RlTopology *topology, RlNode *node)
{
}

static void
single_close (RlTopology *topology)
{
}

static void
single_free (RlTopology *topology)
{
  rl_node_unref (((RlSingle *) topology)->node);
  g_free (topology);
}

static const RlTopologyVTable single_vtable = {
  .route = single_route,
  .masters = single_masters,
  .classify = single_classify,
  .failed = single_failed,
  .subscriber = single_subscriber,
  .close = single_close,
  .free = single_free,
};

RlTopology *
rl_topology_open (const RlUrl *url, RlStoreContext *ctx, RlTopologyChangedFunc changed,
                  gpointer changed_data, GError **error)
{
  RlTopology *topology = NULL;

  switch (url->kind)
    {
    case RL_TOPOLOGY_SINGLE:
      {
        RlSingle *self = g_new0 (RlSingle, 1);
        RlConnConfig config;
        rl_conn_config_copy (&url->node, &config);
        self->parent.vt = &single_vtable;
        self->parent.publish_counts_all = TRUE;
        self->node = rl_node_new (&config, ctx);
        topology = &self->parent;
        break;
      }
    case RL_TOPOLOGY_CLUSTER:
      topology = rl_cluster_open (url, ctx, error);
      break;
    case RL_TOPOLOGY_SENTINEL:
      topology = rl_sentinel_open (url, ctx, error);
      break;
    default:
      g_assert_not_reached ();
    }
  if (topology != NULL)
    {
      topology->ctx = ctx;
      topology->changed = changed;
      topology->changed_data = changed_data;
    }
  return topology;
}
