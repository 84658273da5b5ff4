/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* redis-node-exchange.c: the bottom of the Redis store's exchange engine: the
 * pipelined exchange of the commands that one node serves, on one connection, replies
 * read in order (RlNodeExchange). Driven blocking (rl_node_exchange_run(), or every
 * node at once by redis-exchange.c's pipeline) or by the caller's poll (the quorum
 * store's stepwise requests, redis-request.c).
 *
 * It is the one place where a command meets the protocol's detours: NOSCRIPT answered
 * by the script's text by EVAL, a pooled connection found stale retried once on a
 * fresh one, key tracking and ASKING before the commands, WAIT after the writes when
 * replicas must acknowledge them, an error reply the topology learns from; a
 * redirection or "try again" is marked for the single-command path of
 * redis-exchange.c, which follows it. A caller's follow-up (an acquisition whose SET
 * NX found the key taken goes on with the acquire script) is one more command in the
 * next exchange, through the caller's RlFollowFunc. Everything is bounded by one
 * monotonic deadline, turned into a relative timeout only at the socket.
 */
#include "config.h"

#include <string.h>

#include "debug.h"
#include "connection.h"
#include "store.h"
#include "topology.h"
#include "sync.h"
#include "redis-store-private.h"

/* Exchanges one pipeline may take before its remaining commands are failed: a command
 * goes again only after NOSCRIPT, a caller's follow-up or a stale connection, each
 * bounded, so this is a guard, never reached by a server that behaves. */
#define RL_MAX_EXCHANGES 8


gboolean
rl_redis_is_noscript (redisReply *reply)
{
  return reply->type == REDIS_REPLY_ERROR && g_str_has_prefix (reply->str, "NOSCRIPT");
}

/* The replicas redis_lock_registry_set_min_replicas() asks for, 0 when off. */
gint64
rl_redis_min_replicas (RlRedisStore *self)
{
  return RL_ATOMIC_GET (self->parent.ctx->min_replicas);
}

_Thread_local RlWaitShortfall rl_redis_wait_shortfall = { "", -1, -1 };

/* The waiter's read of a key is tracked (see notify.c): with @track_id, the
 * connection's key tracking reports to that client (the registry's subscriber), in
 * OPTIN mode, so that only the command right after CLIENT CACHING yes has the keys it
 * reads tracked, and NOLOOP, so that its own writes report nothing. Queues CLIENT
 * TRACKING when the connection reports elsewhere or nowhere yet, then CLIENT CACHING
 * yes; returns how many replies they add. */
static guint
queue_tracking (RlConn *conn, gint64 track_id)
{
  char id[24];
  const char *tracking[7] = { "CLIENT", "TRACKING", "on", "REDIRECT", id, "OPTIN", "NOLOOP" };
  const char *caching[3] = { "CLIENT", "CACHING", "yes" };
  guint n = 0;

  if (track_id == 0)
    return 0;
  if (conn->tracking_redirect != track_id)
    {
      rl_format_uint (id, track_id);
      rl_conn_append (conn, 7, tracking);
      n++;
    }
  rl_conn_append (conn, 3, caching);
  return n + 1;
}

/* The reply to the @i-th command queue_tracking() queued (@n in all). A refusal leaves
 * the connection without tracking (and the read untracked: the waiter is woken as
 * without it); it is logged at debug level, the subscriber having warned already if
 * the user lacks the command. */
static void
read_tracking (RlConn *conn, gint64 track_id, guint i, guint n, const redisReply *reply)
{
  if (reply->type == REDIS_REPLY_ERROR)
    {
      rl_debug ("key tracking on a data connection: %s", reply->str);
      conn->tracking_redirect = 0;
    }
  else if (i == 0 && n == 2)
    conn->tracking_redirect = track_id;
}

static gint64
left_ms (gint64 deadline)
{
  return MAX ((deadline - g_get_monotonic_time ()) / 1000, 1);
}

void
rl_node_exchange_init (RlNodeExchange *ex, RlRedisStore *self, RlNode *node, RlPipeCommand *cmds,
                       RlWroteFunc wrote, RlFollowFunc follow, gpointer data, gint64 deadline)
{
  *ex = (RlNodeExchange){ 0 };
  ex->self = self;
  ex->node = rl_node_ref (node);
  ex->cmds = cmds;
  ex->idx = &ex->idx_one;
  ex->idx_size = 1;
  ex->wrote = wrote != NULL && rl_redis_min_replicas (self) > 0 ? wrote : NULL;
  ex->follow = follow;
  ex->data = data;
  ex->deadline = deadline;
}

RlNodeExchange *
rl_node_exchange_new (RlRedisStore *self, RlNode *node, RlPipeCommand *cmds, RlWroteFunc wrote,
                      RlFollowFunc follow, gpointer data, gint64 deadline)
{
  RlNodeExchange *ex = g_new (RlNodeExchange, 1);

  rl_node_exchange_init (ex, self, node, cmds, wrote, follow, data, deadline);
  return ex;
}

void
rl_node_exchange_set_prefix (RlNodeExchange *ex, gboolean asking, gint64 track_id)
{
  ex->asking = asking;
  ex->track_id = track_id;
}

void
rl_node_exchange_add (RlNodeExchange *ex, guint i)
{
  if (ex->n_idx == ex->idx_size)
    {
      guint *bigger = g_new (guint, ex->idx_size * 2);

      memcpy (bigger, ex->idx, ex->n_idx * sizeof (guint));
      if (ex->idx != &ex->idx_one)
        g_free (ex->idx);
      ex->idx = bigger;
      ex->idx_size *= 2;
    }
  ex->idx[ex->n_idx++] = i;
}

RlNode *
rl_node_exchange_node (RlNodeExchange *ex)
{
  return ex->node;
}

RlConn *
rl_node_exchange_conn (RlNodeExchange *ex)
{
  return ex->conn;
}

gboolean
rl_node_exchange_complete (RlNodeExchange *ex)
{
  return ex->got == ex->expected;
}

/* Ends every command of @ex in @state with a copy of @error. */
static void
fail_commands (RlNodeExchange *ex, guint8 state, const GError *error)
{
  for (guint k = 0; k < ex->n_idx; k++)
    {
      RlPipeCommand *cmd = &ex->cmds[ex->idx[k]];
      if (cmd->state != state)
        continue;
      cmd->state = RL_PIPE_DONE;
      g_clear_error (&cmd->error);
      cmd->error = g_error_copy (error);
    }
}

/* Whether a command waiting to be sent may not be sent twice (RlScript's once). */
static gboolean
has_once (RlNodeExchange *ex)
{
  for (guint k = 0; k < ex->n_idx; k++)
    {
      const RlPipeCommand *cmd = &ex->cmds[ex->idx[k]];
      if (cmd->state == RL_PIPE_UNSENT && cmd->script != NULL && cmd->script->once)
        return TRUE;
    }
  return FALSE;
}

/* A connection for the next exchange, set up within what is left of the deadline; on
 * failure the node counts as failing and the commands waiting to be sent end with the
 * error. */
static gboolean
connect_node (RlNodeExchange *ex)
{
  g_autoptr (GError) error = NULL;

  ex->conn = rl_pool_get_until (ex->node->pool, ex->deadline, !has_once (ex), &ex->reused,
                                &error);
  if (ex->conn != NULL)
    return TRUE;
  ex->self->topology->vt->failed (ex->self->topology, ex->node);
  fail_commands (ex, RL_PIPE_UNSENT, error);
  return FALSE;
}

guint
rl_node_exchange_queue (RlNodeExchange *ex)
{
  RlStoreContext *ctx = ex->self->parent.ctx;
  guint count = 0;

  ex->expected = ex->got = 0;
  for (guint k = 0; k < ex->n_idx; k++)
    count += ex->cmds[ex->idx[k]].state == RL_PIPE_UNSENT;
  if (count == 0)
    return 0;
  if (ex->exchanges++ == RL_MAX_EXCHANGES)
    {
      g_autoptr (GError) error
          = g_error_new (REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_REDIS,
                         "Redis at %s kept asking for the lock command again", ex->node->name);
      fail_commands (ex, RL_PIPE_UNSENT, error);
      return 0;
    }
  if (ex->conn == NULL && !connect_node (ex))
    return 0;
  rl_conn_set_timeout (ex->conn, left_ms (ex->deadline));
  ex->tracking = queue_tracking (ex->conn, ex->track_id);
  if (ex->asking)
    {
      const char *asking[] = { "ASKING" };
      rl_conn_append (ex->conn, 1, asking);
    }
  ex->prefix = ex->tracking + (ex->asking ? 1 : 0);
  for (guint k = 0; k < ex->n_idx; k++)
    {
      RlPipeCommand *cmd = &ex->cmds[ex->idx[k]];
      if (cmd->state != RL_PIPE_UNSENT)
        continue;
      if (cmd->script != NULL)
        {
          cmd->argv[0] = cmd->eval ? "EVAL" : "EVALSHA";
          cmd->argv[1] = cmd->eval ? cmd->script->text : cmd->script->sha;
        }
      rl_conn_append (ex->conn, cmd->argc, cmd->argv);
      cmd->state = RL_PIPE_SENT;
      cmd->sent = TRUE;
      cmd->wrote = FALSE;
    }
  ex->waited = ex->wrote != NULL;
  if (ex->waited)
    {
      /* Every write above is acknowledged, or it counts as unreplicated. */
      char count_s[24], timeout_s[24];
      gint64 wait_ms = RL_ATOMIC_GET (ctx->replica_timeout_ms);
      const char *wait[] = { "WAIT", count_s, timeout_s };
      if (wait_ms <= 0)
        wait_ms = RL_ATOMIC_GET (ctx->command_timeout_ms);
      rl_format_uint (count_s, rl_redis_min_replicas (ex->self));
      rl_format_uint (timeout_s, MAX (MIN (wait_ms, left_ms (ex->deadline) * 3 / 4), 1));
      rl_conn_append (ex->conn, 3, wait);
    }
  ex->next = 0;
  ex->short_wait = FALSE;
  ex->sent = count;
  ex->answered = 0;
  ex->expected = ex->prefix + count + (ex->waited ? 1 : 0);
  RL_ATOMIC_ADD (ctx->stats->commands, ex->expected);
  return ex->expected;
}

/* The writes of the exchange under way had no acknowledgement from enough replicas. */
static void
mark_unreplicated (RlNodeExchange *ex)
{
  for (guint k = 0; k < ex->n_idx; k++)
    {
      RlPipeCommand *cmd = &ex->cmds[ex->idx[k]];
      if (cmd->wrote)
        cmd->unreplicated = TRUE;
    }
}

void
rl_node_exchange_reply (RlNodeExchange *ex, redisReply *reply)
{
  RlTopology *topology = ex->self->topology;
  RlPipeCommand *cmd;

  ex->got++;
  if (ex->got <= ex->prefix)
    {
      /* Key tracking's replies, then ASKING's, which says nothing. */
      if (ex->got <= ex->tracking)
        read_tracking (ex->conn, ex->track_id, ex->got - 1, ex->tracking, reply);
      freeReplyObject (reply);
      return;
    }
  if (ex->answered == ex->sent)
    {
      /* WAIT, after the commands. */
      if (reply->type != REDIS_REPLY_INTEGER || reply->integer < rl_redis_min_replicas (ex->self))
        {
          mark_unreplicated (ex);
          ex->short_wait = TRUE;
          g_strlcpy (rl_redis_wait_shortfall.node, ex->node->name,
                     sizeof rl_redis_wait_shortfall.node);
          rl_redis_wait_shortfall.acked = reply->type == REDIS_REPLY_INTEGER ? reply->integer : -1;
          rl_redis_wait_shortfall.connected = -1;
        }
      freeReplyObject (reply);
      return;
    }
  ex->answered++;
  /* Replies come in the order the commands were sent; commands not sent in this
   * exchange have none. */
  do
    cmd = &ex->cmds[ex->idx[ex->next++]];
  while (cmd->state != RL_PIPE_SENT);
  cmd->state = RL_PIPE_DONE;

  if (reply->type == REDIS_REPLY_ERROR)
    {
      RlNode *target = NULL;
      RlReplyKind kind;

      if (cmd->script != NULL && !cmd->eval && rl_redis_is_noscript (reply))
        {
          cmd->eval = TRUE;
          cmd->state = RL_PIPE_UNSENT;
          freeReplyObject (reply);
          return;
        }
      /* The topology learns from it (MOVED: the slot's owner; READONLY: a failover). */
      kind = topology->vt->classify (topology, ex->node, reply, &target);
      if (target != NULL)
        rl_node_unref (target);
      g_clear_error (&cmd->error);
      cmd->error = g_error_new (REDIS_LOCK_ERROR,
                                kind == RL_REPLY_FINAL ? REDIS_LOCK_ERROR_REDIS
                                                       : REDIS_LOCK_ERROR_CONNECTION,
                                "Redis at %s refused the lock command: %s", ex->node->name,
                                reply->str);
      if (kind == RL_REPLY_FINAL)
        {
          cmd->refused = TRUE;
          freeReplyObject (reply);
          return;
        }
      /* Redirected, or "try again": followed by the single-command path
       * (rl_redis_call()), which reads where to from the reply; the error is what a
       * caller that cannot follow it ends with. */
      cmd->state = RL_PIPE_ALONE;
      g_clear_pointer (&cmd->redirect, freeReplyObject);
      cmd->redirect = reply;
      return;
    }
  cmd->wrote = ex->wrote != NULL && ex->wrote (reply);
  if (ex->follow != NULL && ex->follow (ex->data, cmd, reply))
    {
      /* The caller armed the command's next step. */
      cmd->state = RL_PIPE_UNSENT;
      cmd->eval = FALSE;
      freeReplyObject (reply);
      return;
    }
  cmd->reply = reply;
}

gboolean
rl_node_exchange_broke (RlNodeExchange *ex)
{
  RlConn *conn = ex->conn;
  /* Nothing answered on a pooled connection the server had closed (restarted): sent
   * again, once, on a fresh one. */
  gboolean stale = ex->reused && !ex->retried && ex->answered == 0 && rl_conn_is_stale (conn);
  g_autoptr (GError) error = NULL;

  if (!stale)
    {
      g_autofree char *what = g_strdup_printf ("Lock request on %s", ex->node->name);
      rl_set_error_from_conn (&error, conn, what);
      ex->self->topology->vt->failed (ex->self->topology, ex->node);
    }
  /* A WAIT that did not answer: the writes count as unacknowledged. */
  if (ex->waited)
    {
      mark_unreplicated (ex);
      rl_redis_wait_shortfall = (RlWaitShortfall){ "", -1, -1 };
    }
  rl_pool_put (ex->node->pool, conn);
  ex->conn = NULL;
  ex->expected = ex->got = 0;
  if (stale)
    {
      ex->retried = TRUE;
      ex->conn = rl_pool_get_until (ex->node->pool, ex->deadline, !has_once (ex), &ex->reused,
                                    &error);
    }
  if (ex->conn == NULL)
    {
      fail_commands (ex, RL_PIPE_SENT, error);
      return FALSE;
    }
  for (guint k = 0; k < ex->n_idx; k++)
    {
      RlPipeCommand *cmd = &ex->cmds[ex->idx[k]];
      if (cmd->state != RL_PIPE_SENT)
        continue;
      cmd->state = RL_PIPE_UNSENT;
      cmd->retried = TRUE;
    }
  return TRUE;
}

void
rl_node_exchange_clear (RlNodeExchange *ex)
{
  gboolean pending = FALSE;

  if (ex->conn != NULL)
    {
      /* Ended with replies outstanding: the connection can serve nobody else, and the
       * node counts as failing, as for any timeout. */
      if (ex->got < ex->expected)
        {
          rl_conn_fail (ex->conn, RL_CONN_ERR_TIMEOUT, "Redis timed out");
          ex->self->topology->vt->failed (ex->self->topology, ex->node);
        }
      rl_pool_put (ex->node->pool, ex->conn);
    }
  for (guint k = 0; k < ex->n_idx && !pending; k++)
    pending = ex->cmds[ex->idx[k]].state == RL_PIPE_SENT
              || ex->cmds[ex->idx[k]].state == RL_PIPE_UNSENT;
  /* The common end, every command answered, makes no error to throw away. */
  if (pending)
    {
      g_autoptr (GError) error
          = g_error_new (REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION,
                         "Redis at %s did not answer the lock request in time", ex->node->name);
      fail_commands (ex, RL_PIPE_SENT, error);
      fail_commands (ex, RL_PIPE_UNSENT, error);
    }
  rl_node_unref (ex->node);
  if (ex->idx != &ex->idx_one)
    g_free (ex->idx);
}

void
rl_node_exchange_free (RlNodeExchange *ex)
{
  rl_node_exchange_clear (ex);
  g_free (ex);
}

/* The replicas connected to the master @conn talks to, by ROLE; -1 when it does not say. */
static gint64
connected_replicas (RlRedisStore *self, RlConn *conn)
{
  const char *argv[] = { "ROLE" };
  redisReply *reply;
  gint64 n = -1;

  RL_ATOMIC_ADD (self->parent.ctx->stats->round_trips, 1);
  RL_ATOMIC_ADD (self->parent.ctx->stats->commands, 1);
  reply = rl_conn_roundtrip (conn, 1, argv);
  if (reply != NULL && reply->type == REDIS_REPLY_ARRAY && reply->elements >= 3
      && reply->element[0]->type == REDIS_REPLY_STRING
      && strcmp (reply->element[0]->str, "master") == 0
      && reply->element[2]->type == REDIS_REPLY_ARRAY)
    n = (gint64) reply->element[2]->elements;
  if (reply != NULL)
    freeReplyObject (reply);
  return n;
}

/* Reads the replies of the exchange under way on its one connection, in order, as a
 * single command is read (no poll first); FALSE when the connection failed. A WAIT
 * that fell short is followed by ROLE, for the message that says how many replicas the
 * master has. */
gboolean
rl_node_exchange_read (RlNodeExchange *ex)
{
  while (!rl_node_exchange_complete (ex))
    {
      redisReply *reply = NULL;

      if (!rl_conn_get_reply (ex->conn, &reply))
        return FALSE;
      rl_node_exchange_reply (ex, reply);
    }
  if (ex->short_wait && rl_redis_wait_shortfall.acked >= 0)
    rl_redis_wait_shortfall.connected = connected_replicas (ex->self, ex->conn);
  return TRUE;
}

void
rl_node_exchange_run (RlNodeExchange *ex)
{
  while (rl_node_exchange_queue (ex) > 0)
    {
      RL_ATOMIC_ADD (ex->self->parent.ctx->stats->round_trips, 1);
      if (!rl_node_exchange_read (ex))
        rl_node_exchange_broke (ex);
    }
}

void
rl_redis_pipe_command_clear (RlPipeCommand *cmd)
{
  g_clear_pointer (&cmd->reply, freeReplyObject);
  g_clear_pointer (&cmd->redirect, freeReplyObject);
  g_clear_error (&cmd->error);
}
