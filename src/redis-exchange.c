/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* redis-exchange.c: the top of the Redis store's exchange engine, over the node
 * exchange of redis-node-exchange.c (which answers NOSCRIPT by EVAL, retries a stale
 * pooled connection once, tracks a waiter's read, sends WAIT after the writes): a
 * single command for a key (rl_redis_call()), one node exchange inside the loop only a
 * single command needs (MOVED/ASK followed to the node named, "try again" answers sent
 * again after a paused backoff, a Cluster failover rerouted); and many commands at once
 * (rl_redis_pipeline()), one node exchange per node that serves some of them, every
 * node in one poll loop, a command redirected sent again alone. All by one deadline.
 * Also the scripts' SHA-1s and the NOT_REPLICATED message. It knows nothing of what the
 * replies mean: that is the callers' part (redis-lease.c, redis-batch.c,
 * redis-inspect.c, the lock family's script files).
 */
#include "config.h"

#include <string.h>

#include "debug.h"
#include "connection.h"
#include "store.h"
#include "topology.h"
#include "sync.h"
#include "notify.h"
#include "redis-store-private.h"

/* Redirections (MOVED, ASK) one call follows before it gives up: a slot moves once per
 * migration, so more means the cluster disagrees with itself. */
#define RL_MAX_REDIRECTS 5
/* Nodes one call goes on to after the one it was sent to failed (a Cluster failover). */
#define RL_MAX_REROUTES 2

/* The first pause before a command that got TRYAGAIN, CLUSTERDOWN, LOADING or
 * MASTERDOWN is sent again; it doubles, with jitter, within the call's time. */
#define RL_RETRY_BACKOFF_MS 10

void
rl_redis_script_init (RlScript *script, const char *text)
{
  g_autofree char *sha = g_compute_checksum_for_string (G_CHECKSUM_SHA1, text, -1);
  script->text = text;
  memcpy (script->sha, sha, 40);
  script->sha[40] = '\0';
}

/* Sleeps before a command that the node could not serve is sent again: @attempt-th
 * doubling of RL_RETRY_BACKOFF_MS, ±50 % jitter so that many clients do not come back
 * at once, never past @deadline. */
static void
retry_pause (guint attempt, gint64 deadline)
{
  gint64 ms = RL_RETRY_BACKOFF_MS << MIN (attempt, 8);
  gint64 us = ms * 500 + g_random_int_range (0, (gint32) (ms * 1000));

  g_usleep ((gulong) MAX (MIN (us, deadline - g_get_monotonic_time ()), 0));
}

void
rl_redis_set_not_replicated (RlRedisStore *self, GError **error, const char *what, const char *key)
{
  g_autofree char *found = NULL;

  /* What the WAIT that fell short found, when it was this thread's last. */
  if (rl_redis_wait_shortfall.node[0] != '\0' && rl_redis_wait_shortfall.connected >= 0)
    found = g_strdup_printf (" (the master at %s has %" G_GINT64_FORMAT " connected replica%s)",
                             rl_redis_wait_shortfall.node, rl_redis_wait_shortfall.connected,
                             rl_redis_wait_shortfall.connected == 1 ? "" : "s");
  else if (rl_redis_wait_shortfall.node[0] != '\0' && rl_redis_wait_shortfall.acked >= 0)
    found = g_strdup_printf (" (%" G_GINT64_FORMAT " acknowledged at %s)",
                             rl_redis_wait_shortfall.acked, rl_redis_wait_shortfall.node);
  rl_redis_wait_shortfall = (RlWaitShortfall){ "", -1, -1 };
  g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_NOT_REPLICATED,
               "The %s of “%s” was acknowledged by fewer than %" G_GINT64_FORMAT
               " replicas within %" G_GINT64_FORMAT " ms%s",
               what, key, rl_redis_min_replicas (self),
               RL_ATOMIC_GET (self->parent.ctx->replica_timeout_ms), found != NULL ? found : "");
}

/* The connection to *@node failed (@error says how): tells the topology, and when it
 * can route @key elsewhere before @deadline (a Cluster that failed over), replaces
 * *@node with the new owner, clears @error and returns TRUE so that the caller sends
 * again there. At most RL_MAX_REROUTES times per command. */
static gboolean
failover (RlTopology *topology, RlNode **node, const char *key, gint64 deadline, guint *reroutes,
          GError **error)
{
  RlNode *next;

  topology->vt->failed (topology, *node);
  if (topology->vt->reroute == NULL || *reroutes >= RL_MAX_REROUTES)
    return FALSE;
  next = topology->vt->reroute (topology, *node, key, deadline);
  if (next == NULL)
    return FALSE;
  rl_debug ("%s failed; %s now serves the command", (*node)->name, next->name);
  rl_node_unref (*node);
  *node = next;
  (*reroutes)++;
  g_clear_error (error);
  return TRUE;
}

/* Sends @argv for @key (NULL: any master) to the node that serves it and returns the
 * reply (NULL with @error on failure or an error reply). When @wrote says the reply
 * is a write and replicas must acknowledge writes, *@acked tells whether enough did
 * (`WAIT` on the same connection); otherwise it is TRUE. Follows MOVED and ASK (at
 * most RL_MAX_REDIRECTS), sends again after TRYAGAIN-like answers with a pause, and
 * retries once on a fresh connection when a pooled one turns out stale; all by the
 * monotonic @deadline (0: the command timeout from now), which also bounds each
 * exchange and the setting up of a new connection. With
 * @script, argv[0..1] are EVALSHA and its SHA-1, and a NOSCRIPT answer is followed by
 * EVAL of the script text on the same connection. With @track, the keys the command
 * reads are tracked while the registry's subscriber hears invalidations (a waiter's
 * read of the key it waits for: see queue_tracking()). */
redisReply *
rl_redis_call_tracked (RlRedisStore *self, const char *key, int argc, const char **argv,
                       const RlScript *script, gint64 deadline, gboolean *retried,
                       RlWroteFunc wrote, gboolean *acked, gboolean track, GError **error)
{
  RlTopology *topology = self->topology;
  RlNode *node = topology->vt->route (topology, key, error);
  RlPipeCommand cmd = { .script = script, .route = key, .argc = argc, .argv = argv };
  gboolean asking = FALSE;
  guint redirects = 0, pauses = 0, reroutes = 0;
  redisReply *reply = NULL;

  deadline = rl_store_deadline (self->parent.ctx, deadline);
  if (retried != NULL)
    *retried = FALSE;
  if (acked != NULL)
    *acked = TRUE;
  while (node != NULL)
    {
      RlNodeExchange ex;
      RlNode *target = NULL;
      RlReplyKind kind;
      redisReply *refusal;

      cmd.state = RL_PIPE_UNSENT;
      cmd.eval = cmd.wrote = cmd.unreplicated = cmd.refused = FALSE;
      rl_node_exchange_init (&ex, self, node, &cmd, wrote, NULL, NULL, deadline);
      rl_node_exchange_set_prefix (&ex, asking,
                                   track ? rl_notifier_tracking_id (self->notifier) : 0);
      rl_node_exchange_add (&ex, 0);
      rl_node_exchange_run (&ex);
      rl_node_exchange_clear (&ex);
      if (retried != NULL && cmd.retried)
        *retried = TRUE;
      if (cmd.reply != NULL)
        {
          if (acked != NULL && cmd.wrote)
            *acked = !cmd.unreplicated;
          reply = g_steal_pointer (&cmd.reply);
          break;
        }
      if (cmd.state != RL_PIPE_ALONE && !cmd.refused)
        {
          /* The node could not be reached, or the connection broke. Sent again
           * elsewhere, the request may run twice: every lease script is safe to run
           * twice with the same value, which the caller's *retried says. */
          if (failover (topology, &node, key, deadline, &reroutes, &cmd.error))
            {
              if (retried != NULL && cmd.sent)
                *retried = TRUE;
              continue;
            }
          break;
        }
      if (cmd.state != RL_PIPE_ALONE)
        break;

      refusal = g_steal_pointer (&cmd.redirect);
      kind = topology->vt->classify (topology, node, refusal, &target);
      if ((kind == RL_REPLY_MOVED || kind == RL_REPLY_ASK) && redirects < RL_MAX_REDIRECTS
          && g_get_monotonic_time () < deadline)
        {
          rl_debug ("%s from %s: %s", argv[0], node->name, refusal->str);
          freeReplyObject (refusal);
          rl_node_unref (node);
          node = target;
          asking = kind == RL_REPLY_ASK;
          redirects++;
          g_clear_error (&cmd.error);
          continue;
        }
      if (target != NULL)
        rl_node_unref (target);
      g_clear_error (&cmd.error);
      if (kind == RL_REPLY_RETRY && g_get_monotonic_time () < deadline)
        {
          freeReplyObject (refusal);
          retry_pause (pauses++, deadline);
          rl_node_unref (node);
          node = topology->vt->route (topology, key, &cmd.error);
          asking = FALSE;
          continue;
        }
      if (kind == RL_REPLY_RETRY)
        g_set_error (&cmd.error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION,
                     "Redis at %s could not serve the lock command in time: %s", node->name,
                     refusal->str);
      else
        g_set_error (&cmd.error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_REDIS,
                     "Redis lock %s failed%s: %s", script != NULL ? "script" : "command",
                     kind == RL_REPLY_MOVED || kind == RL_REPLY_ASK ? " (too many redirections)"
                                                                    : "",
                     refusal->str);
      freeReplyObject (refusal);
      break;
    }
  if (node != NULL)
    rl_node_unref (node);
  if (reply == NULL && cmd.error != NULL)
    g_propagate_error (error, g_steal_pointer (&cmd.error));
  rl_redis_pipe_command_clear (&cmd);
  return reply;
}

redisReply *
rl_redis_store_call (RlStore *store, const char *key, int argc, const char **argv,
                     const RlScript *script, gint64 deadline, RlWroteFunc wrote, gboolean *acked,
                     gboolean track, GError **error)
{
  return rl_redis_call_tracked ((RlRedisStore *)store, key, argc, argv, script, deadline, NULL,
                                wrote, acked, track, error);
}

void
rl_redis_store_not_replicated (RlStore *store, const char *what, const char *key, GError **error)
{
  rl_redis_set_not_replicated ((RlRedisStore *)store, error, what, key);
}

redisReply *
rl_redis_call (RlRedisStore *self, const char *key, int argc, const char **argv,
               const RlScript *script, gint64 deadline, gboolean *retried, RlWroteFunc wrote,
               gboolean *acked, GError **error)
{
  return rl_redis_call_tracked (self, key, argc, argv, script, deadline, retried, wrote, acked,
                                FALSE, error);
}

/* The exchange for @node among the *@n_nodes of @nodes, added when new. */
static RlNodeExchange *
exchange_for (RlNodeExchange **nodes, guint *n_nodes, RlRedisStore *self, RlNode *node,
              RlPipeCommand *cmds, RlWroteFunc wrote, gint64 deadline)
{
  for (guint g = 0; g < *n_nodes; g++)
    if (rl_node_exchange_node (nodes[g]) == node)
      return nodes[g];
  nodes[*n_nodes] = rl_node_exchange_new (self, node, cmds, wrote, NULL, NULL, deadline);
  return nodes[(*n_nodes)++];
}

static void
on_reply (guint g, redisReply *reply, gpointer user_data)
{
  rl_node_exchange_reply (((RlNodeExchange **) user_data)[g], reply);
}

guint
rl_redis_pipeline (RlRedisStore *self, guint n, RlPipeCommand *cmds, RlWroteFunc wrote,
                   gint64 deadline)
{
  RlTopology *topology = self->topology;
  /* Plain arrays, at most one exchange per command: GPtrArray's header comes from
   * GSlice, whose reuse across threads ThreadSanitizer cannot follow. */
  g_autofree RlNodeExchange **nodes = g_new0 (RlNodeExchange *, n + 1);
  guint n_nodes = 0;
  g_autofree RlConn **conns = NULL;
  g_autofree guint *expected = NULL;
  g_autofree gboolean *failed = NULL;
  g_autofree RlNodeExchange **live = NULL;
  guint round_trips = 0;

  deadline = rl_store_deadline (self->parent.ctx, deadline);
  for (guint i = 0; i < n; i++)
    {
      g_autoptr (RlNode) node = NULL;

      cmds[i].state = RL_PIPE_UNSENT;
      cmds[i].reply = NULL;
      cmds[i].error = NULL;
      cmds[i].redirect = NULL;
      cmds[i].refused = FALSE;
      cmds[i].retried = cmds[i].unreplicated = cmds[i].eval = cmds[i].wrote = cmds[i].sent
          = FALSE;
      node = topology->vt->route (topology, cmds[i].route, &cmds[i].error);
      if (node == NULL)
        {
          cmds[i].state = RL_PIPE_DONE;
          continue;
        }
      rl_node_exchange_add (
          exchange_for (nodes, &n_nodes, self, node, cmds, wrote, deadline), i);
    }
  conns = g_new0 (RlConn *, n_nodes + 1);
  expected = g_new0 (guint, n_nodes + 1);
  failed = g_new0 (gboolean, n_nodes + 1);
  live = g_new0 (RlNodeExchange *, n_nodes + 1);

  for (;;)
    {
      guint n_live = 0;

      for (guint g = 0; g < n_nodes; g++)
        {
          RlNodeExchange *ex = nodes[g];
          guint count = rl_node_exchange_queue (ex);

          if (count == 0)
            continue;
          conns[n_live] = rl_node_exchange_conn (ex);
          expected[n_live] = count;
          live[n_live++] = ex;
        }
      if (n_live == 0)
        break;
      /* One round trip of wall time, however many nodes. */
      RL_ATOMIC_ADD (self->parent.ctx->stats->round_trips, 1);
      round_trips++;
      if (n_live == 1)
        /* One node (the common case): no poll for writability first. */
        failed[0] = !rl_node_exchange_read (live[0]);
      else
        rl_conns_exchange (conns, n_live, expected,
                           MAX ((deadline - g_get_monotonic_time ()) / 1000, 1), on_reply, live,
                           failed);
      for (guint k = 0; k < n_live; k++)
        if (failed[k])
          rl_node_exchange_broke (live[k]);
    }
  for (guint g = 0; g < n_nodes; g++)
    rl_node_exchange_free (nodes[g]);

  for (guint i = 0; i < n; i++)
    {
      RlPipeCommand *cmd = &cmds[i];
      gboolean acked = TRUE;

      if (cmd->state != RL_PIPE_ALONE)
        continue;
      /* Redirected (a slot migrating) or "try again": alone, through the path that
       * follows it. */
      g_clear_error (&cmd->error);
      g_clear_pointer (&cmd->redirect, freeReplyObject);
      if (g_get_monotonic_time () >= deadline)
        g_set_error (&cmd->error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION,
                     "Redis did not answer the lock command for “%s” in time", cmd->route);
      else
        {
          gboolean retried = FALSE;

          round_trips++;
          cmd->reply = rl_redis_call (self, cmd->route, cmd->argc, cmd->argv, cmd->script,
                                      deadline, &retried, wrote, &acked, &cmd->error);
          cmd->retried = cmd->retried || retried;
          cmd->unreplicated = !acked;
        }
      cmd->state = RL_PIPE_DONE;
    }
  return round_trips;
}
