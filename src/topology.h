/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* topology.h: which Redis node a command goes to (see topology.c, sentinel.c,
 * cluster.c, and node.c for the nodes).
 *
 * The Redis store speaks the lease protocol; a topology tells it where: the one server
 * of a redis:// or unix:// URL, the master of a Sentinel deployment, or the owner of
 * a key's slot in a Cluster. The store asks for the node of a key, sends its command
 * there, and hands any error reply back to the topology, which says whether it was a
 * redirection (MOVED, ASK), a "try again later" (TRYAGAIN, CLUSTERDOWN, LOADING,
 * MASTERDOWN, BUSY) or a node that stopped being master (READONLY); connection failures are
 * reported too, so the topology can find the deployment's new shape. The topology
 * owns the nodes and their connection pools; the store owns none.
 */
#ifndef RL_TOPOLOGY_H
#define RL_TOPOLOGY_H

#include <glib.h>
#include <hiredis/hiredis.h>

#include "connection.h"
#include "store.h" /* RlStoreContext: the settings and counters nodes share */
#include "url.h"

/* One data node and its connection pool. Reference-counted: a caller that got one
 * from the topology may use it after the topology moved on to another node. */
typedef struct
{
  gint ref;   /* atomic */
  char *name; /* "host:port" or the socket path: the node's identity, and for messages */
  char *host; /* NULL for a Unix socket */
  int port;
  RlPool *pool;
  gint64 failed_at; /* atomic: monotonic µs of its last connection failure, 0: none */
} RlNode;

/* A node for @config (whose contents it takes). */
RlNode *rl_node_new (RlConnConfig *config, RlStoreContext *ctx);
RlNode *rl_node_ref (RlNode *node);
void rl_node_unref (RlNode *node);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (RlNode, rl_node_unref)

/* What an error reply means for the command that got it. */
typedef enum
{
  RL_REPLY_FINAL,   /* not about routing: the reply stands */
  RL_REPLY_MOVED,   /* the key lives elsewhere: send the command to *target */
  RL_REPLY_ASK,     /* the key is being migrated: send ASKING and the command to *target, once */
  RL_REPLY_RETRY,   /* the node cannot serve now (TRYAGAIN, CLUSTERDOWN, LOADING,
                     * MASTERDOWN, READONLY, BUSY): back off, then route the command again */
} RlReplyKind;

typedef struct _RlTopology RlTopology;

/* Called from a topology thread when the deployment changed shape: the master of a
 * Sentinel deployment changed (@resubscribe: the subscription must move to it), or a
 * Cluster slot changed owner (a failover). Every held lease should be checked. */
typedef void (*RlTopologyChangedFunc) (gpointer user_data, gboolean resubscribe);

typedef struct
{
  /* The node that serves @key (NULL: any master), with a reference; NULL with
   * @error (CONNECTION) when none is known. */
  RlNode *(*route) (RlTopology *topology, const char *key, GError **error);
  /* Every master now, with references (for SCAN over all of them). */
  GPtrArray *(*masters) (RlTopology *topology, GError **error);
  /* What the error reply @reply from @node means; *target gets a reference for
   * MOVED and ASK. */
  RlReplyKind (*classify) (RlTopology *topology, RlNode *node, const redisReply *reply,
                           RlNode **target);
  /* A connection to @node failed: the deployment may have changed shape. */
  void (*failed) (RlTopology *topology, RlNode *node);
  /* After failed(): waits until @deadline_us (monotonic µs) for the deployment to
   * route @key (NULL: any master) to a node other than @node, and returns it with a
   * reference; NULL when it did not in time. NULL in a topology that cannot tell
   * sooner than its next command (one server, Sentinel). */
  RlNode *(*reroute) (RlTopology *topology, RlNode *node, const char *key, gint64 deadline_us);
  /* The node to hold the unlock-notification subscription on, with a reference;
   * after the previous one failed, preferably another. */
  RlNode *(*subscriber) (RlTopology *topology, GError **error);
  /* Stops the topology's threads. */
  void (*close) (RlTopology *topology);
  void (*free) (RlTopology *topology);
} RlTopologyVTable;

/* Defines `static const RlTopologyVTable PREFIX_vtable`, each required slot filled by
 * the function of the same name after PREFIX_ (PREFIX_route ... PREFIX_free), so a
 * topology lists its slots here once and one it lacks is a compile error. The optional
 * slot (reroute) is named in the arguments after PREFIX, as a designated initializer
 * (`.reroute = NULL` where the topology cannot tell sooner). */
#define RL_DEFINE_TOPOLOGY_VTABLE(PREFIX, ...)                                                     \
  static const RlTopologyVTable PREFIX##_vtable = {                                                \
    .route = PREFIX##_route,                                                                       \
    .masters = PREFIX##_masters,                                                                   \
    .classify = PREFIX##_classify,                                                                 \
    .failed = PREFIX##_failed,                                                                     \
    .subscriber = PREFIX##_subscriber,                                                             \
    .close = PREFIX##_close,                                                                       \
    .free = PREFIX##_free,                                                                         \
    __VA_ARGS__                                                                                    \
  }

struct _RlTopology
{
  const RlTopologyVTable *vt;
  RlStoreContext *ctx;
  /* Whether PUBLISH answers how many clients of the whole deployment received the
   * message. On a Cluster it counts only the clients of the node that ran it, though
   * every node delivers it: "nobody else listens" cannot be known there. */
  gboolean publish_counts_all;
  RlTopologyChangedFunc changed;
  gpointer changed_data;
};

/* The topology of @url (parsed): for a Sentinel or a Cluster, discovers the master or
 * the slot map before returning, so a deployment that cannot be reached fails here. */
RlTopology *rl_topology_open (const RlUrl *url, RlStoreContext *ctx,
                              RlTopologyChangedFunc changed, gpointer changed_data,
                              GError **error);
/* Redis Cluster (cluster.c). */
RlTopology *rl_cluster_open (const RlUrl *url, RlStoreContext *ctx,
                             RlTopologyChangedFunc changed, gpointer changed_data,
                             GError **error);
/* The shard channel a release of @key is published on (SPUBLISH) and its waiters
 * subscribe to (SSUBSCRIBE), g_free(): @prefix (`registry_key-channel:`) and @key,
 * formed so that its slot is @key's (a shard channel is served by the master of its
 * slot, and a script may publish only to a slot it serves): `prefix` `key` when that
 * already is (the key's hash tag carries over), else `prefix{key}`. */
char *rl_cluster_shard_channel (const char *prefix, const char *key);
/* Redis Sentinel (sentinel.c). */
RlTopology *rl_sentinel_open (const RlUrl *url, RlStoreContext *ctx,
                              RlTopologyChangedFunc changed, gpointer changed_data,
                              GError **error);

/* Fills the common fields of @topology, a topology's own structure being opened; who
 * is told of changes (changed) is set apart, when they are to be told. */
static inline void
rl_topology_init (RlTopology *topology, const RlTopologyVTable *vt, RlStoreContext *ctx,
                  gboolean publish_counts_all)
{
  topology->vt = vt;
  topology->ctx = ctx;
  topology->publish_counts_all = publish_counts_all;
}

static inline void
rl_topology_free (RlTopology *topology)
{
  if (topology == NULL)
    return;
  topology->vt->close (topology);
  topology->vt->free (topology);
}

/* Error replies every topology reads the same way ("-TRYAGAIN ...", "-LOADING ..."):
 * RL_REPLY_RETRY or RL_REPLY_FINAL. */
RlReplyKind rl_topology_classify_common (const redisReply *reply);

#endif /* RL_TOPOLOGY_H */
