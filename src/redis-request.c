/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* redis-request.c: the Redis store's stepwise requests, for the quorum store: the
 * lease operations of one server as the poll-driven form of the exchange engine (one
 * RlNodeExchange of redis-node-exchange.c, driven by the caller's poll), so that the quorum
 * store waits on several servers at once. What is particular to a request is here: the
 * leases' commands (an acquisition's SET NX, followed by the acquire script when the
 * key was taken), and what each reply means for its lease; NOSCRIPT, stale
 * connections and WAIT are the engine's.
 */
#include "config.h"

#include <poll.h>
#include <string.h>

#include "connection.h"
#include "store.h"
#include "topology.h"
#include "sync.h"
#include "notify.h"
#include "redis-store-private.h"

/* The requests of rl_redis_request_begin(): the leases of one request on one node, as
 * one RlNodeExchange (redis-node-exchange.c), whose commands are the leases' commands: SET NX
 * PX first for an acquisition (the fast path of rl_redis_acquire()), followed by the
 * acquire script when the key was taken; the kind's script for the others. What each
 * reply means is read at the end, by rl_redis_request_end(). */
typedef struct
{
  RlRequest pub;
  RlRedisStore *self;
  RlNodeExchange ex;
  RlRequestKind kind;
  guint n;
  RlLeaseItem *items;
  /* The arrays below live in the request's own allocation, after the struct. */
  RlPipeCommand *cmds;  /* per lease */
  const char **argvs;   /* 9 per lease */
  const char **channels; /* release: each lease's notification channel; else NULL */
  char (*ttls)[24];
  char own[2];          /* release: RELEASE's ARGV[3] */
  const char *legacy;   /* release: RELEASE's ARGV[5], or NULL */
} RedisRequest;

/* An acquisition's write: SET NX PX's OK, or the acquire script's "taken". */
static gboolean
wrote_acquire (const redisReply *reply)
{
  return rl_redis_wrote_set (reply) || rl_redis_wrote_acquire (reply);
}

/* An acquisition's SET NX found the key taken: until the acquire script answers, held
 * (-1: for how long is unknown), and the script goes next. */
static gboolean
follow_set (gpointer data, RlPipeCommand *cmd, const redisReply *reply)
{
  RedisRequest *req = data;
  guint i = (guint) (cmd - req->cmds);

  if (cmd->script != NULL || reply->type != REDIS_REPLY_NIL)
    return FALSE;
  req->items[i].result = RL_LEASE_HELD;
  req->items[i].pttl_ms = -1;
  cmd->script = &req->self->acquire;
  cmd->argv[2] = "1";
  cmd->argv[3] = req->items[i].key;
  cmd->argv[4] = req->items[i].value;
  cmd->argv[5] = req->ttls[i];
  return TRUE;
}

/* What the connection is waited on for now: its socket, for reading, and for writing
 * while bytes wait to be sent; or nothing, with ready set, when the next step needs no
 * wait (decrypted bytes already in, the connection failed). */
static void
request_wait_for (RedisRequest *req)
{
  RlConn *conn = rl_node_exchange_conn (&req->ex);

  req->pub.fd = conn->fd;
  req->pub.events = (short) (POLLIN | (rl_conn_wants_write (conn) ? POLLOUT : 0));
  req->pub.ready = conn->err != RL_CONN_OK || rl_conn_has_pending (conn);
}

/* Queues the next exchange and sends it as far as the socket takes it without
 * waiting; FALSE when there is nothing left to send (every lease is final). */
static gboolean
request_send (RedisRequest *req)
{
  RlConn *conn;

  if (rl_node_exchange_queue (&req->ex) == 0)
    {
      req->pub.done = TRUE;
      req->pub.fd = -1;
      req->pub.events = 0;
      req->pub.ready = FALSE;
      return FALSE;
    }
  RL_ATOMIC_ADD (req->self->parent.ctx->stats->round_trips, 1);
  conn = rl_node_exchange_conn (&req->ex);
  if (rl_conn_wants_write (conn))
    rl_conn_write_some (conn);
  request_wait_for (req);
  return TRUE;
}

void
rl_redis_request_ready (RlRequest *request, short revents)
{
  RedisRequest *req = (RedisRequest *) request;
  RlConn *conn = rl_node_exchange_conn (&req->ex);
  gboolean ok = conn->err == RL_CONN_OK;

  g_return_if_fail (!req->pub.done);
  if (ok && (revents & POLLOUT) != 0)
    ok = rl_conn_write_some (conn);
  if (ok && ((revents & (POLLIN | POLLHUP | POLLERR)) != 0 || rl_conn_has_pending (conn)))
    ok = rl_conn_read_some (conn);
  while (ok && !rl_node_exchange_complete (&req->ex))
    {
      redisReply *reply = NULL;

      ok = rl_conn_next_reply (conn, &reply);
      if (!ok || reply == NULL)
        break;
      rl_node_exchange_reply (&req->ex, reply);
    }
  if (!ok)
    {
      rl_conn_fail (conn, RL_CONN_ERR_IO, "Redis connection failed");
      rl_node_exchange_broke (&req->ex);
    }
  if (!ok || rl_node_exchange_complete (&req->ex))
    {
      request_send (req);
      return;
    }
  request_wait_for (req);
}

/* What the reply of lease @i's last command means for it. */
static void
read_reply (RedisRequest *req, guint i)
{
  RlLeaseItem *item = &req->items[i];
  RlPipeCommand *cmd = &req->cmds[i];
  const redisReply *reply = cmd->reply;

  if (cmd->script == NULL)
    {
      /* SET NX PX: taken (a NIL was followed by the script). */
      if (reply->type == REDIS_REPLY_STATUS)
        item->result = RL_LEASE_OK;
      else
        g_set_error (&cmd->error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_REDIS,
                     "Redis lock command returned an unexpected reply (type %d)", reply->type);
      return;
    }
  if (reply->type != REDIS_REPLY_INTEGER)
    {
      g_set_error (&cmd->error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_REDIS,
                   "Redis lock script returned an unexpected reply (type %d)", reply->type);
      return;
    }
  switch (req->kind)
    {
    case RL_REQUEST_ACQUIRE:
      item->result = reply->integer == RL_ACQUIRED ? RL_LEASE_OK : RL_LEASE_HELD;
      if (reply->integer != RL_ACQUIRED)
        item->pttl_ms = reply->integer;
      break;
    case RL_REQUEST_RENEW:
      item->result = reply->integer == 1 ? RL_LEASE_OK : RL_LEASE_LOST;
      break;
    case RL_REQUEST_RELEASE:
      item->others = rl_redis_release_heard (req->self, reply->integer, req->channels[i]);
      item->result = rl_redis_release_outcome (reply->integer, cmd->retried, item->key,
                                               &cmd->error);
      break;
    default:
      g_assert_not_reached ();
    }
}

gboolean
rl_redis_request_end (RlRequest *request, GError **error)
{
  RedisRequest *req = (RedisRequest *) request;
  GError *first = NULL;

  /* Ends what has not: with replies outstanding, the connection is failed and the
   * commands end with a timeout error. */
  rl_node_exchange_clear (&req->ex);
  for (guint i = 0; i < req->n; i++)
    {
      RlLeaseItem *item = &req->items[i];
      RlPipeCommand *cmd = &req->cmds[i];

      if (cmd->reply != NULL)
        read_reply (req, i);
      /* An acquisition whose SET NX found the key taken stays HELD (the node did answer
       * that much), with the error saying its follow-up is unknown. */
      if (cmd->error != NULL
          && !(req->kind == RL_REQUEST_ACQUIRE && item->result == RL_LEASE_HELD))
        item->result = RL_LEASE_ERROR;
      /* Written on the master alone: a failover now could lose it, so it does not
       * count (an acquisition is released by the caller, which asked for it). */
      if (cmd->unreplicated && item->result == RL_LEASE_OK && req->kind != RL_REQUEST_RELEASE)
        {
          item->result = RL_LEASE_ERROR;
          g_clear_error (&cmd->error);
          rl_redis_set_not_replicated (req->self, &cmd->error,
                                       req->kind == RL_REQUEST_ACQUIRE ? "acquisition" : "renewal",
                                       item->key);
        }
      if (cmd->error != NULL && first == NULL)
        first = g_steal_pointer (&cmd->error);
      rl_redis_pipe_command_clear (cmd);
    }
  g_free (req);
  if (first != NULL)
    {
      g_propagate_error (error, first);
      return FALSE;
    }
  return TRUE;
}

/* A request for the @n leases of @items in one allocation: the struct, then its
 * arrays (each a multiple of 8 bytes, so each stays aligned), zeroed, then, with a
 * @channel_prefix (a release), the text of each lease's notification channel. */
static RedisRequest *
request_new (guint n, const RlLeaseItem *items, const char *channel_prefix)
{
  gsize cmds = sizeof (RlPipeCommand) * n, argvs = sizeof (const char *) * 9 * n;
  gsize chans = channel_prefix != NULL ? sizeof (char *) * n : 0, ttls = 24 * (gsize) n;
  gsize prefix_len = channel_prefix != NULL ? strlen (channel_prefix) : 0, text = 0;
  RedisRequest *req;
  char *p;

  G_STATIC_ASSERT (sizeof (RedisRequest) % 8 == 0 && sizeof (RlPipeCommand) % 8 == 0);
  for (guint i = 0; channel_prefix != NULL && i < n; i++)
    text += prefix_len + strlen (items[i].key) + 1;
  req = g_malloc0 (sizeof (RedisRequest) + cmds + argvs + chans + ttls + text);
  p = (char *) (req + 1);
  req->n = n;
  req->cmds = (RlPipeCommand *) p;
  p += cmds;
  req->argvs = (const char **) p;
  p += argvs;
  req->channels = channel_prefix != NULL ? (const char **) p : NULL;
  p += chans;
  req->ttls = (char (*)[24]) p;
  p += ttls;
  for (guint i = 0; channel_prefix != NULL && i < n; i++)
    {
      req->channels[i] = p;
      p = g_stpcpy (g_stpcpy (p, channel_prefix), items[i].key) + 1;
    }
  return req;
}

/* A request for leases of one server: every key is routed to its node, and they must
 * be the same (a Cluster's keys of different slots are refused: INVALID). */
RlRequest *
rl_redis_request_begin (RlStore *store, RlRequestKind kind, guint n, RlLeaseItem *items,
                        gint64 deadline, GError **error)
{
  RlRedisStore *self = (RlRedisStore *) store;
  RlTopology *topology = self->topology;
  g_autoptr (GError) local_error = NULL;
  RedisRequest *req;
  RlNode *node;

  g_return_val_if_fail (n > 0, NULL);
  for (guint i = 0; i < n; i++)
    {
      items[i].result = RL_LEASE_ERROR;
      items[i].others = FALSE;
      items[i].pttl_ms = 0;
      items[i].token = 0;
    }
  node = topology->vt->route (topology, items[0].key, &local_error);
  for (guint i = 1; node != NULL && i < n; i++)
    {
      RlNode *other = topology->vt->route (topology, items[i].key, &local_error);
      if (other != NULL)
        rl_node_unref (other);
      if (other != node)
        {
          if (other != NULL)
            g_set_error_literal (&local_error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID,
                                 "A stepwise lock request must be for keys of one server");
          g_clear_pointer (&node, rl_node_unref);
        }
    }
  if (node == NULL)
    {
      g_propagate_error (error, g_steal_pointer (&local_error));
      return NULL;
    }

  req = request_new (n, items, kind == RL_REQUEST_RELEASE ? self->channel_prefix : NULL);
  req->self = self;
  req->kind = kind;
  req->items = items;
  /* Releases are not written for replicas to confirm: WAIT follows acquisitions and
   * renewals only. */
  rl_node_exchange_init (&req->ex, self, node, req->cmds,
                         kind == RL_REQUEST_ACQUIRE ? wrote_acquire
                         : kind == RL_REQUEST_RENEW ? rl_redis_wrote_renew
                                                    : NULL,
                         kind == RL_REQUEST_ACQUIRE ? follow_set : NULL, req,
                         rl_store_deadline (store->ctx, deadline));
  if (kind == RL_REQUEST_RELEASE)
    req->legacy = rl_redis_release_legacy (self, req->own);
  for (guint i = 0; i < n; i++)
    {
      RlPipeCommand *cmd = &req->cmds[i];
      const char **argv = req->argvs + (gsize) i * 9;

      rl_format_uint (req->ttls[i], items[i].ttl_ms);
      cmd->route = items[i].key;
      cmd->argv = argv;
      cmd->argc = 6;
      if (kind == RL_REQUEST_ACQUIRE)
        {
          argv[0] = "SET";
          argv[1] = items[i].key;
          argv[2] = items[i].value;
          argv[3] = "NX";
          argv[4] = "PX";
          argv[5] = req->ttls[i];
        }
      else
        {
          cmd->script = kind == RL_REQUEST_RENEW ? &self->renew : &self->release;
          argv[2] = "1";
          argv[3] = items[i].key;
          argv[4] = items[i].value;
          argv[5] = req->ttls[i];
        }
      if (kind == RL_REQUEST_RELEASE)
        {
          argv[5] = req->channels[i];
          argv[6] = req->own;
          argv[7] = "0";
          /* No shard channel: stepwise releases are the quorum store's, whose nodes are
           * never a Cluster's. */
          cmd->argc = rl_redis_release_args (self, argv, req->legacy, NULL);
        }
      cmd->state = RL_PIPE_UNSENT;
      rl_node_exchange_add (&req->ex, i);
    }
  rl_node_unref (node);
  if (!request_send (req))
    {
      rl_redis_request_end (&req->pub, error);
      return NULL;
    }
  return &req->pub;
}
