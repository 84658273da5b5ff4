/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* testcluster.h: what the two halves of the test Cluster share (testcluster.c makes,
 * watches and breaks the cluster; testcluster-migrate.c moves slots): the cluster's
 * state, a node's view of it, and the calls both make on nodes. Private to the testing
 * library. The cluster's state is owned by testcluster.c (created and freed there);
 * testcluster-migrate.c only adds and removes entries of its migrations array.
 */
#ifndef RL_TESTCLUSTER_H
#define RL_TESTCLUSTER_H

#include <redislock/redislock-test.h>

#include "testprocess.h"

#define N_SLOTS 16384
/* Timeout of one command used to look at the cluster. */
#define COMMAND_TIMEOUT_MS 2000
/* Timeout MIGRATE is given, and the command's own timeout (longer). */
#define MIGRATE_TIMEOUT_MS 5000
/* Keys moved per MIGRATE while finishing a migration. */
#define MIGRATE_BATCH 100
/* How long the cluster may take to form, and to agree on a migrated slot. */
#define FORM_TIMEOUT_MS 30000
#define AGREE_TIMEOUT_MS 10000

typedef struct
{
  RlTestProcess *process;
  int bus_port; /* the cluster bus, `cluster-port` */
  char *id;     /* the node id (CLUSTER MYID), which nodes.conf keeps across restarts */
  char *url;    /* redis://127.0.0.1:PORT */
} Node;

/* A slot whose migration has begun and not finished. */
typedef struct
{
  guint slot;
  guint from;
  guint to;
} Migration;

struct _RedisLockTestCluster
{
  guint n_masters;
  guint replicas_per_master;
  guint n_nodes;
  Node *nodes;
  char *url;          /* redis-cluster://127.0.0.1:PORT,… */
  GArray *migrations; /* of Migration */
};

/* One line of CLUSTER NODES. */
typedef struct
{
  int node; /* our number for it, -1 when its id is none of ours */
  gboolean myself;
  gboolean master;
  gboolean failing;   /* flagged fail or fail? */
  gboolean joining;   /* handshake or noaddr: not a full member yet */
  gboolean connected; /* the bus link is up */
  int master_of;      /* a replica's master (our number), else -1 */
} NodeLine;

/* What one node says about the cluster: its CLUSTER NODES reply, parsed. */
typedef struct
{
  GArray *lines;  /* of NodeLine */
  gint16 *owners; /* [N_SLOTS]: the master owning each slot, -1 when none or not ours */
  char *text;     /* the reply itself, for reports */
} View;

/* Whether @node's process runs. */
gboolean rl_tc_node_is_up (RedisLockTestCluster *cluster, guint node);
/* Runs a command on @node (hiredis formats it: each %s is one argument); an error reply
 * becomes a GError too. */
redisReply *rl_tc_node_command (RedisLockTestCluster *cluster, guint node, GError **error,
                                const char *format, ...) G_GNUC_PRINTF (4, 5);
/* Runs a command whose reply does not matter beyond not being an error. */
gboolean rl_tc_node_run (RedisLockTestCluster *cluster, guint node, GError **error,
                         const char *format, ...) G_GNUC_PRINTF (4, 5);
/* @node's CLUSTER NODES, parsed into @view (rl_tc_view_clear() it). */
gboolean rl_tc_get_view (RedisLockTestCluster *cluster, guint node, View *view, GError **error);
void rl_tc_view_clear (View *view);
/* The line of @view's own node, NULL if none. */
const NodeLine *rl_tc_view_myself (const View *view);
/* The owner of @slot in most running nodes' views (the first such owner on a tie). */
int rl_tc_slot_owner (RedisLockTestCluster *cluster, guint slot);

#endif /* RL_TESTCLUSTER_H */
