/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* topology.c: the one-server topology, and which topology a URL names.
 *
 * The one-server topology is the trivial case: one node (node.c) for every key, no
 * redirections; it still reads LOADING and similar "not now" replies as retryable,
 * as every topology does. Sentinel (sentinel.c) and Cluster (cluster.c) live in files
 * of their own behind the same table (topology.h); this file is the only one that
 * knows all three.
 */
#include "config.h"

#include <string.h>

#include "topology.h"

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

RL_DEFINE_TOPOLOGY_VTABLE (single, .reroute = NULL);

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
        rl_topology_init (&self->parent, &single_vtable, ctx, TRUE);
        self->node = rl_node_new (&config, ctx);
        topology = &self->parent;
        break;
      }
    case RL_TOPOLOGY_CLUSTER:
      /* @changed is reported from the slot-map thread, which starts after it is set. */
      topology = rl_cluster_open (url, ctx, changed, changed_data, error);
      break;
    case RL_TOPOLOGY_SENTINEL:
      /* Its thread may call @changed as soon as it runs: given before it starts. */
      topology = rl_sentinel_open (url, ctx, changed, changed_data, error);
      break;
    default:
      g_assert_not_reached ();
    }
  return topology;
}
