/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* testcluster.c: a private, throwaway Redis Cluster for test programs.
 *
 * A client of Redis Cluster is only tested for real against a cluster that moves
 * under it: a master dies and its replica takes over, a slot migrates with keys half
 * moved (ASK) and then for good (MOVED). So the helper starts every node as its own
 * redis-server (testprocess.c: a temporary directory each, SIGKILL, SIGSTOP, restart
 * on the same ports), bound to 127.0.0.1 on free ports, both the client port and the
 * cluster bus port (`cluster-port`), with persistence off, and lets the tests kill,
 * freeze, restart nodes and migrate slots by number.
 *
 * The cluster is joined directly over hiredis, as `redis-cli --cluster create` would
 * but without its fixed waits and without letting it choose the roles: distinct config
 * epochs first (no epoch collisions to resolve later), the slots in equal ranges on
 * nodes 0 … n_masters − 1 in that order (CLUSTER ADDSLOTSRANGE), every node MEETs every
 * later one (so nobody waits for gossip to learn a peer), then CLUSTER REPLICATE on
 * each replica once it knows its master. Replicas sync diskless with no delay (Redis 7
 * waits 5 s by default for more replicas to share the transfer) and load straight from
 * the socket, so no node ever writes a dump.rdb that a restart would load: a restarted
 * node comes back empty, as persistence off promises.
 *
 * Nothing waits a fixed time for the cluster's state: rl_test_wait_until() polls every
 * node every few milliseconds over cached connections with timeouts, until the check
 * holds or the deadline passes, and a timeout says which node was not there yet and why.
 * "Whole" (check_whole()) means what a test needs before it acts: every running node
 * says cluster_state:ok, knows all nodes and sees no running node failing, the running
 * nodes agree on the owner of every slot and on who replicates whom, every owner runs,
 * and every running replica's link to its master is up. A node's own CLUSTER NODES line
 * is the truth about its role, CLUSTER NODES the only source of views (slots included),
 * so one reply per node and poll is parsed. Note that a master refuses to report
 * cluster_state:ok during its first two seconds (Redis's writable delay), which bounds
 * how fast a cluster forms or a restarted master rejoins. A migration is over when
 * every running master names the new owner and every running node knows the same
 * current epoch (check_epochs_agree() in testcluster-migrate.c), so the next migration starts from a settled
 * cluster.
 *
 * The slot of a key is computed here with its own CRC16 (redis_lock_test_cluster_key_slot())
 * so a test checks the library's routing against an independent implementation.
 */
#include "config.h"

#include <redislock/redislock-test.h>

#include <string.h>

#include <gio/gio.h>
#include <glib/gstdio.h>

#include "key-slot.h"
#include "testprocess.h"

#include "testcluster.h"

/* --- Slots of keys ----------------------------------------------------------------- */

guint
redis_lock_test_cluster_key_slot (const char *key)
{
  g_return_val_if_fail (key != NULL, 0);
  return rl_key_slot (key);
}

/* --- Talking to nodes -------------------------------------------------------------- */

gboolean
rl_tc_node_is_up (RedisLockTestCluster *cluster, guint node)
{
  return rl_test_process_is_up (cluster->nodes[node].process);
}

/* Runs a command on @node (hiredis formats it: each %s is one argument); an error reply
 * becomes a GError too. */
static redisReply *
node_vcommand (RedisLockTestCluster *cluster, guint node, GError **error, const char *format,
               va_list ap)
{
  redisReply *reply = rl_test_process_vcommand (cluster->nodes[node].process,
                                                COMMAND_TIMEOUT_MS, error, format, ap);

  if (reply == NULL)
    g_prefix_error (error, "node %u: ", node);
  return reply;
}

redisReply *
rl_tc_node_command (RedisLockTestCluster *cluster, guint node, GError **error, const char *format, ...)
{
  redisReply *reply;
  va_list ap;

  va_start (ap, format);
  reply = node_vcommand (cluster, node, error, format, ap);
  va_end (ap);
  return reply;
}

/* Runs a command whose reply does not matter beyond not being an error. */
gboolean
rl_tc_node_run (RedisLockTestCluster *cluster, guint node, GError **error, const char *format, ...)
{
  redisReply *reply;
  va_list ap;

  va_start (ap, format);
  reply = node_vcommand (cluster, node, error, format, ap);
  va_end (ap);
  if (reply == NULL)
    return FALSE;
  freeReplyObject (reply);
  return TRUE;
}

/* A command whose reply is a string (CLUSTER INFO, CLUSTER NODES, INFO, CLUSTER MYID). */
static char *node_string (RedisLockTestCluster *cluster, guint node, GError **error,
                          const char *format, ...) G_GNUC_PRINTF (4, 5);

static char *
node_string (RedisLockTestCluster *cluster, guint node, GError **error, const char *format, ...)
{
  redisReply *reply;
  char *text;
  va_list ap;

  va_start (ap, format);
  reply = node_vcommand (cluster, node, error, format, ap);
  va_end (ap);
  if (reply == NULL)
    return NULL;
  if (reply->type != REDIS_REPLY_STRING && reply->type != REDIS_REPLY_STATUS)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "node %u: unexpected reply to %s", node,
                   format);
      freeReplyObject (reply);
      return NULL;
    }
  text = g_strndup (reply->str, reply->len);
  freeReplyObject (reply);
  return text;
}

static int
node_of_id (RedisLockTestCluster *cluster, const char *id, gsize len)
{
  for (guint i = 0; i < cluster->n_nodes; i++)
    if (cluster->nodes[i].id != NULL && strlen (cluster->nodes[i].id) == len
        && memcmp (cluster->nodes[i].id, id, len) == 0)
      return (int)i;
  return -1;
}

void
rl_tc_view_clear (View *view)
{
  if (view->lines != NULL)
    g_array_unref (view->lines);
  g_free (view->owners);
  g_free (view->text);
  view->lines = NULL;
  view->owners = NULL;
  view->text = NULL;
}

static gboolean
has_flag (char **flags, const char *flag)
{
  return g_strv_contains ((const char *const *)flags, flag);
}

/* Parses a CLUSTER NODES reply:
 *   id ip:port@cport[,hostname] flags master ping-sent pong-recv epoch link slot…
 * where a slot is "N" or "A-B", or "[N->-id]" / "[N-<-id]" for a migration (skipped). */
static void
parse_view (RedisLockTestCluster *cluster, const char *text, View *view)
{
  g_auto (GStrv) lines = g_strsplit (text, "\n", -1);

  view->lines = g_array_new (FALSE, TRUE, sizeof (NodeLine));
  view->owners = g_new (gint16, N_SLOTS);
  for (guint s = 0; s < N_SLOTS; s++)
    view->owners[s] = -1;

  for (guint i = 0; lines[i] != NULL; i++)
    {
      g_auto (GStrv) fields = g_strsplit (g_strstrip (lines[i]), " ", -1);
      g_auto (GStrv) flags = NULL;
      NodeLine line = { 0 };

      if (g_strv_length (fields) < 8)
        continue;
      flags = g_strsplit (fields[2], ",", -1);
      line.node = node_of_id (cluster, fields[0], strlen (fields[0]));
      line.myself = has_flag (flags, "myself");
      line.master = has_flag (flags, "master");
      line.failing = has_flag (flags, "fail") || has_flag (flags, "fail?");
      line.joining = has_flag (flags, "handshake") || has_flag (flags, "noaddr");
      line.connected = strcmp (fields[7], "connected") == 0;
      line.master_of
          = strcmp (fields[3], "-") == 0 ? -1 : node_of_id (cluster, fields[3], strlen (fields[3]));
      g_array_append_val (view->lines, line);

      for (guint f = 8; fields[f] != NULL; f++)
        {
          char *end = NULL;
          guint64 first;
          guint64 last;

          if (fields[f][0] == '[' || !g_ascii_isdigit (fields[f][0]))
            continue;
          first = g_ascii_strtoull (fields[f], &end, 10);
          last = first;
          if (*end == '-')
            last = g_ascii_strtoull (end + 1, NULL, 10);
          for (guint64 s = first; s <= last && s < N_SLOTS; s++)
            view->owners[s] = (gint16)line.node;
        }
    }
}

/* CLUSTER NODES of @node, parsed. */
gboolean
rl_tc_get_view (RedisLockTestCluster *cluster, guint node, View *view, GError **error)
{
  char *text = node_string (cluster, node, error, "CLUSTER NODES");

  if (text == NULL)
    return FALSE;
  parse_view (cluster, text, view);
  view->text = text;
  return TRUE;
}

static const NodeLine *
view_find (const View *view, int node)
{
  for (guint i = 0; i < view->lines->len; i++)
    {
      const NodeLine *line = &g_array_index (view->lines, NodeLine, i);

      if (line->node == node)
        return line;
    }
  return NULL;
}

const NodeLine *
rl_tc_view_myself (const View *view)
{
  for (guint i = 0; i < view->lines->len; i++)
    {
      const NodeLine *line = &g_array_index (view->lines, NodeLine, i);

      if (line->myself)
        return line;
    }
  return NULL;
}

/* --- Waiting for the cluster ------------------------------------------------------- */

/* The views of the running nodes (views[i].lines NULL for the others); FALSE with
 * @why when a running node does not answer. */
static gboolean
get_views (RedisLockTestCluster *cluster, View *views, GString *why)
{
  for (guint i = 0; i < cluster->n_nodes; i++)
    {
      GError *error = NULL;

      if (!rl_tc_node_is_up (cluster, i))
        continue;
      if (!rl_tc_get_view (cluster, i, &views[i], &error))
        {
          g_string_printf (why, "%s", error->message);
          g_error_free (error);
          return FALSE;
        }
    }
  return TRUE;
}

static void
clear_views (RedisLockTestCluster *cluster, View *views)
{
  for (guint i = 0; i < cluster->n_nodes; i++)
    rl_tc_view_clear (&views[i]);
  g_free (views);
}

/* Every running node knows every node (no handshake left) and is linked to every
 * running one: the cluster has met. */
static gboolean
check_met (gpointer data, GString *why)
{
  RedisLockTestCluster *cluster = data;
  View *views = g_new0 (View, cluster->n_nodes);
  gboolean ok = get_views (cluster, views, why);

  for (guint i = 0; ok && i < cluster->n_nodes; i++)
    {
      if (views[i].lines == NULL)
        continue;
      for (guint j = 0; ok && j < cluster->n_nodes; j++)
        {
          const NodeLine *line = view_find (&views[i], (int)j);

          if (line == NULL || line->joining || (rl_tc_node_is_up (cluster, j) && !line->connected))
            {
              g_string_printf (why, "node %u does not know node %u yet", i, j);
              ok = FALSE;
            }
        }
    }
  clear_views (cluster, views);
  return ok;
}

/* The cluster is whole: see the opening comment. */
static gboolean
check_whole (gpointer data, GString *why)
{
  RedisLockTestCluster *cluster = data;
  View *views = g_new0 (View, cluster->n_nodes);
  gboolean ok = get_views (cluster, views, why);
  int first = -1;

  for (guint i = 0; ok && i < cluster->n_nodes; i++)
    {
      const NodeLine *me;
      GError *error = NULL;
      g_autofree char *info = NULL;
      g_autofree char *state = NULL;

      if (views[i].lines == NULL)
        continue;
      info = node_string (cluster, i, &error, "CLUSTER INFO");
      if (info == NULL)
        {
          g_string_printf (why, "%s", error->message);
          g_error_free (error);
          ok = FALSE;
          break;
        }
      state = rl_test_info_field (info, "cluster_state");
      if (g_strcmp0 (state, "ok") != 0)
        {
          g_string_printf (why, "node %u says cluster_state:%s", i, state ? state : "?");
          ok = FALSE;
          break;
        }
      if (views[i].lines->len != cluster->n_nodes)
        {
          g_string_printf (why, "node %u knows %u nodes", i, views[i].lines->len);
          ok = FALSE;
          break;
        }
      /* What @i says about each running node matches what that node says of itself. */
      for (guint j = 0; ok && j < cluster->n_nodes; j++)
        {
          const NodeLine *line = view_find (&views[i], (int)j);
          const NodeLine *self = views[j].lines != NULL ? rl_tc_view_myself (&views[j]) : NULL;

          if (self == NULL)
            continue;
          if (line == NULL || line->failing || line->joining || !line->connected)
            {
              g_string_printf (why, "node %u sees node %u %s", i, j,
                               line == NULL    ? "nowhere"
                               : line->failing ? "failing"
                               : line->joining ? "joining"
                                               : "disconnected");
              ok = FALSE;
            }
          else if (line->master != self->master || line->master_of != self->master_of)
            {
              g_string_printf (why, "node %u does not know node %u's role yet", i, j);
              ok = FALSE;
            }
        }
      if (!ok)
        break;
      /* Every slot owned by a running master, as every running node sees it. */
      for (guint s = 0; s < N_SLOTS; s++)
        {
          int owner = views[i].owners[s];

          if (owner < 0 || !rl_tc_node_is_up (cluster, (guint)owner))
            {
              if (owner < 0)
                g_string_printf (why, "node %u sees slot %u unassigned", i, s);
              else
                g_string_printf (why, "node %u sees slot %u owned by node %d, which is %s", i, s,
                                 owner,
                                 cluster->nodes[owner].process->pid == 0 ? "stopped" : "paused");
              ok = FALSE;
              break;
            }
          if (first >= 0 && views[first].owners[s] != owner)
            {
              g_string_printf (why, "nodes %d and %u disagree on the owner of slot %u", first, i,
                               s);
              ok = FALSE;
              break;
            }
        }
      if (!ok)
        break;
      if (first < 0)
        first = (int)i;
      /* A replica is in sync. */
      me = rl_tc_view_myself (&views[i]);
      if (me != NULL && !me->master)
        {
          g_autofree char *replication = node_string (cluster, i, &error, "INFO replication");
          g_autofree char *link
              = replication ? rl_test_info_field (replication, "master_link_status") : NULL;

          if (replication == NULL)
            {
              g_string_printf (why, "%s", error->message);
              g_error_free (error);
              ok = FALSE;
            }
          else if (g_strcmp0 (link, "up") != 0)
            {
              g_string_printf (why, "replica %u has master_link_status:%s", i, link ? link : "?");
              ok = FALSE;
            }
        }
    }
  if (ok && first < 0)
    {
      g_string_printf (why, "no node runs");
      ok = FALSE;
    }
  clear_views (cluster, views);
  return ok;
}

gboolean
redis_lock_test_cluster_wait_ok (RedisLockTestCluster *cluster, gint64 timeout_ms, GError **error)
{
  g_return_val_if_fail (cluster != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);
  return rl_test_wait_until (check_whole, cluster, timeout_ms, "The cluster is not whole", error);
}

/* --- Making the cluster ------------------------------------------------------------ */

static gboolean
write_node_conf (RedisLockTestCluster *cluster, guint node, GError **error)
{
  Node *n = &cluster->nodes[node];
  g_autoptr (GString) conf = g_string_new (NULL);

  g_string_append_printf (conf,
                          "# Written by redis_lock_test_cluster_new(): node %u, 127.0.0.1 only,\n"
                          "# no persistence.\n"
                          "bind 127.0.0.1\n"
                          "protected-mode no\n"
                          "port %d\n"
                          "cluster-enabled yes\n"
                          "cluster-config-file nodes.conf\n"
                          "cluster-node-timeout 1000\n"
                          "cluster-port %d\n"
                          "save \"\"\n"
                          "appendonly no\n"
                          "repl-diskless-sync yes\n"
                          "repl-diskless-sync-delay 0\n"
                          "repl-diskless-load swapdb\n",
                          node, n->process->port, n->bus_port);
  rl_test_process_append_conf (n->process, conf);
  return rl_test_process_write_conf (n->process, conf, error);
}

typedef struct
{
  RedisLockTestCluster *cluster;
  guint node;
} NodeStart;

/* Configures a new node for ports[0] and its bus on ports[1]. */
static gboolean
configure_node (RlTestProcess *process, const int *ports, gpointer data, GError **error)
{
  NodeStart *start = data;
  g_autofree char *nodes_conf = g_build_filename (process->dir, "nodes.conf", NULL);

  /* A try before this one on other ports may have written the node's id with them:
   * start afresh. */
  g_unlink (nodes_conf);
  rl_test_process_set_port (process, ports[0]);
  start->cluster->nodes[start->node].bus_port = ports[1];
  return write_node_conf (start->cluster, start->node, error);
}

/* Starts @node for the first time, on new ports when its ports were taken. */
static gboolean
start_new_node (RedisLockTestCluster *cluster, guint node, GError **error)
{
  NodeStart start = { cluster, node };

  return rl_test_process_start_new (cluster->nodes[node].process, 2, configure_node, &start,
                                    error);
}

/* The node @node replicates, or -1 for a master. */
static int
intended_master (RedisLockTestCluster *cluster, guint node)
{
  if (node < cluster->n_masters)
    return -1;
  return (int)((node - cluster->n_masters) / cluster->replicas_per_master);
}

static gboolean
form (RedisLockTestCluster *cluster, GError **error)
{
  for (guint i = 0; i < cluster->n_nodes; i++)
    {
      cluster->nodes[i].id = node_string (cluster, i, error, "CLUSTER MYID");
      if (cluster->nodes[i].id == NULL)
        return FALSE;
      /* Distinct epochs, set while the node knows nobody (the only time it may). */
      if (!rl_tc_node_run (cluster, i, error, "CLUSTER SET-CONFIG-EPOCH %u", i + 1))
        return FALSE;
    }
  for (guint m = 0; m < cluster->n_masters; m++)
    {
      guint first = (guint)((guint64)m * N_SLOTS / cluster->n_masters);
      guint last = (guint)((guint64)(m + 1) * N_SLOTS / cluster->n_masters) - 1;

      if (!rl_tc_node_run (cluster, m, error, "CLUSTER ADDSLOTSRANGE %u %u", first, last))
        return FALSE;
    }
  /* A MEET introduces both sides to each other. */
  for (guint i = 0; i < cluster->n_nodes; i++)
    for (guint j = i + 1; j < cluster->n_nodes; j++)
      if (!rl_tc_node_run (cluster, i, error, "CLUSTER MEET 127.0.0.1 %d %d",
                     cluster->nodes[j].process->port, cluster->nodes[j].bus_port))
        return FALSE;
  if (!rl_test_wait_until (check_met, cluster, FORM_TIMEOUT_MS, "The cluster nodes did not meet",
                           error))
    return FALSE;
  for (guint r = cluster->n_masters; r < cluster->n_nodes; r++)
    if (!rl_tc_node_run (cluster, r, error, "CLUSTER REPLICATE %s",
                   cluster->nodes[intended_master (cluster, r)].id))
      return FALSE;
  return rl_test_wait_until (check_whole, cluster, FORM_TIMEOUT_MS, "The cluster did not form",
                             error);
}

RedisLockTestCluster *
redis_lock_test_cluster_new (guint n_masters, guint replicas_per_master, GError **error)
{
  g_autoptr (RedisLockTestCluster) cluster = NULL;
  g_autofree char *executable = NULL;
  g_autoptr (GString) url = g_string_new ("redis-cluster://");

  g_return_val_if_fail (n_masters >= 1, NULL);
  g_return_val_if_fail (n_masters <= N_SLOTS, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  executable = rl_test_find_redis_server ();
  if (executable == NULL)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND,
                   "redis-server is not installed (looked in PATH, /usr/sbin and /usr/bin); "
                   "install the redis-server package to run these tests");
      return NULL;
    }

  cluster = g_new0 (RedisLockTestCluster, 1);
  cluster->n_masters = n_masters;
  cluster->replicas_per_master = replicas_per_master;
  cluster->n_nodes = n_masters * (1 + replicas_per_master);
  cluster->nodes = g_new0 (Node, cluster->n_nodes);
  cluster->migrations = g_array_new (FALSE, FALSE, sizeof (Migration));

  for (guint i = 0; i < cluster->n_nodes; i++)
    {
      Node *n = &cluster->nodes[i];

      n->process = rl_test_process_new (executable, NULL, "redislock-cluster", NULL, 0, error);
      if (n->process == NULL || !start_new_node (cluster, i, error))
        return NULL;
      n->url = g_strdup_printf ("redis://127.0.0.1:%d", n->process->port);
      g_string_append_printf (url, "%s127.0.0.1:%d", i > 0 ? "," : "", n->process->port);
    }
  cluster->url = g_string_free (g_steal_pointer (&url), FALSE);

  if (!form (cluster, error))
    return NULL;
  return g_steal_pointer (&cluster);
}

RedisLockTestCluster *
redis_lock_test_cluster_new_or_skip (guint n_masters, guint replicas_per_master)
{
  GError *error = NULL;
  RedisLockTestCluster *cluster
      = redis_lock_test_cluster_new (n_masters, replicas_per_master, &error);

  return rl_test_or_skip (cluster, error, "redislock test cluster");
}

/* --- Accessors --------------------------------------------------------------------- */

const char *
redis_lock_test_cluster_get_url (RedisLockTestCluster *cluster)
{
  g_return_val_if_fail (cluster != NULL, NULL);
  return cluster->url;
}

guint
redis_lock_test_cluster_get_n_nodes (RedisLockTestCluster *cluster)
{
  g_return_val_if_fail (cluster != NULL, 0);
  return cluster->n_nodes;
}

/* Node @node of @cluster, or NULL (with a critical) when there is no such node. */
static RlTestProcess *
node_process (RedisLockTestCluster *cluster, guint node)
{
  g_return_val_if_fail (cluster != NULL, NULL);
  g_return_val_if_fail (node < cluster->n_nodes, NULL);
  return cluster->nodes[node].process;
}

const char *
redis_lock_test_cluster_get_node_url (RedisLockTestCluster *cluster, guint node)
{
  return node_process (cluster, node) != NULL ? cluster->nodes[node].url : NULL;
}

int
redis_lock_test_cluster_get_port (RedisLockTestCluster *cluster, guint node)
{
  RlTestProcess *process = node_process (cluster, node);

  return process != NULL ? process->port : -1;
}

GPid
redis_lock_test_cluster_get_pid (RedisLockTestCluster *cluster, guint node)
{
  RlTestProcess *process = node_process (cluster, node);

  return process != NULL ? process->pid : 0;
}

/* The owner of @slot in most running nodes' views (the first such owner on a tie). */
int
rl_tc_slot_owner (RedisLockTestCluster *cluster, guint slot)
{
  g_autofree guint *votes = g_new0 (guint, cluster->n_nodes);
  int best = -1;

  for (guint i = 0; i < cluster->n_nodes; i++)
    {
      View view = { 0 };
      int owner;

      if (!rl_tc_node_is_up (cluster, i) || !rl_tc_get_view (cluster, i, &view, NULL))
        continue;
      owner = view.owners[slot];
      rl_tc_view_clear (&view);
      if (owner < 0)
        continue;
      votes[owner]++;
      if (best < 0 || votes[owner] > votes[best])
        best = owner;
    }
  return best;
}

int
redis_lock_test_cluster_get_slot_owner (RedisLockTestCluster *cluster, guint slot)
{
  g_return_val_if_fail (cluster != NULL, -1);
  g_return_val_if_fail (slot < N_SLOTS, -1);
  return rl_tc_slot_owner (cluster, slot);
}

/* --- Faults ------------------------------------------------------------------------ */

RL_TEST_DEFINE_NODE_FAULTS (RedisLockTestCluster, redis_lock_test_cluster, node_process)

void
redis_lock_test_cluster_free (RedisLockTestCluster *cluster)
{
  if (cluster == NULL)
    return;
  for (guint i = 0; i < cluster->n_nodes; i++)
    {
      rl_test_process_free (cluster->nodes[i].process);
      g_free (cluster->nodes[i].id);
      g_free (cluster->nodes[i].url);
    }
  g_free (cluster->nodes);
  g_free (cluster->url);
  if (cluster->migrations != NULL)
    g_array_unref (cluster->migrations);
  g_free (cluster);
}
