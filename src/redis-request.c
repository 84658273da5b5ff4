/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* redis-request.c: the Redis store's stepwise requests, for the quorum store:
 * the same commands and scripts as the blocking operations, sent and read for
 * several servers at once. Each lease moves from SET NX to the acquire script, or
 * from EVALSHA to EVAL, as its replies come, on the request's one connection; the
 * request names the socket to wait on and takes its next step when it is ready. Cut
 * from redis-store.c because it is a second, poll-driven way to run the lease
 * operations, with its own state machine.
 */
#include "config.h"

#include <poll.h>

#include "connection.h"
#include "store.h"
#include "topology.h"
#include "sync.h"
#include "notify.h"
#include "redis-store-private.h"

/* Stepwise requests -------------------------------------------------------------- */

/* The command each lease of a stepwise request is sent next. */
enum
{
  STEP_SET,     /* acquire: SET NX PX, the fast path of rl_redis_acquire() */
  STEP_EVALSHA, /* the kind's script by EVALSHA (acquire: the key existed) */
  STEP_EVAL,    /* the kind's script by EVAL, after NOSCRIPT */
  STEP_DONE,    /* the lease's result is final */
};

/* The requests of rl_redis_request_begin(): the leases of one request on one node, on
 * one connection, each lease moving through the steps above as its replies come. The
 * replies of one exchange come in the order the leases were sent (a WAIT last). */
typedef struct
{
  RlRequest pub;
  RlRedisStore *self;
  RlConn *conn;     /* the request's own connection, NULL once failed for good */
  guint expected;   /* replies of the exchange under way */
  guint got;        /* of them, read */
  RlRequestKind kind;
  const RlScript *script;
  guint n;
  RlLeaseItem *items;
  RlNode *node;
  gboolean reused;  /* the connection came from the pool */
  gboolean retried; /* sent again on a fresh connection after a stale one broke */
  gint64 timeout_ms; /* bounds setting up a new connection */
  guint8 *step;     /* per lease */
  gboolean *sent;   /* per lease: in the exchange under way */
  gboolean *wrote;  /* per lease: wrote in the exchange under way (WAIT's to confirm) */
  gboolean *unreplicated;
  GError **errors;  /* per lease, with result ERROR */
  char (*ttls)[24];
  char **channels; /* release: each lease's notification channel */
  char own[2];        /* release: RELEASE's ARGV[3] */
  const char *legacy; /* release: RELEASE's ARGV[5], or NULL */
  guint next;       /* where the next reply's lease is looked for */
  guint n_sent;     /* leases sent in the exchange under way */
  guint answered;   /* of them, answered */
  gboolean waited;  /* a WAIT follows them */
} RedisRequest;

/* Queues the next command of every lease not done, and WAIT after writes when
 * replicas must acknowledge them; sets expected. */
static void
request_queue (RedisRequest *req)
{
  RlRedisStore *self = req->self;
  RlStoreContext *ctx = self->parent.ctx;
  guint count = 0;

  for (guint i = 0; i < req->n; i++)
    {
      RlLeaseItem *item = &req->items[i];
      const char *argv[9];
      int argc = 6;

      req->sent[i] = req->wrote[i] = FALSE;
      if (req->step[i] == STEP_DONE)
        continue;
      if (req->step[i] == STEP_SET)
        {
          argv[0] = "SET";
          argv[1] = item->key;
          argv[2] = item->value;
          argv[3] = "NX";
          argv[4] = "PX";
          argv[5] = req->ttls[i];
        }
      else
        {
          argv[0] = req->step[i] == STEP_EVALSHA ? "EVALSHA" : "EVAL";
          argv[1] = req->step[i] == STEP_EVALSHA ? req->script->sha : req->script->text;
          argv[2] = "1";
          argv[3] = item->key;
          argv[4] = item->value;
          if (req->kind == RL_REQUEST_RELEASE)
            {
              argv[5] = req->channels[i];
              argv[6] = req->own;
              argv[7] = "0";
              argv[8] = req->legacy;
              argc = req->legacy != NULL ? 9 : 7;
            }
          else
            argv[5] = req->ttls[i];
        }
      rl_conn_append (req->conn, argc, argv);
      req->sent[i] = TRUE;
      count++;
    }
  req->waited = count > 0 && req->kind != RL_REQUEST_RELEASE && rl_redis_min_replicas (self) > 0;
  if (req->waited)
    {
      char count_s[24], timeout_s[24];
      gint64 wait_ms = RL_ATOMIC_GET (ctx->replica_timeout_ms);
      const char *wait[] = { "WAIT", count_s, timeout_s };

      rl_format_uint (count_s, rl_redis_min_replicas (self));
      rl_format_uint (timeout_s, wait_ms > 0 ? wait_ms : RL_ATOMIC_GET (ctx->command_timeout_ms));
      rl_conn_append (req->conn, 3, wait);
    }
  req->next = 0;
  req->n_sent = count;
  req->answered = 0;
  req->expected = count + (req->waited ? 1 : 0);
  RL_ATOMIC_ADD (ctx->stats->round_trips, 1);
  RL_ATOMIC_ADD (ctx->stats->commands, req->expected);
}

/* Ends lease @i with @error. An acquisition whose SET NX found the key taken stays
 * HELD (the node did answer that much), with the error saying its follow-up is
 * unknown. */
static void
request_fail_item (RedisRequest *req, guint i, GError *error)
{
  if (!(req->kind == RL_REQUEST_ACQUIRE && req->step[i] != STEP_SET
        && req->items[i].result == RL_LEASE_HELD))
    req->items[i].result = RL_LEASE_ERROR;
  req->step[i] = STEP_DONE;
  g_clear_error (&req->errors[i]);
  req->errors[i] = error;
}

/* One reply of the exchange under way, in the order the commands were sent. */
static void
request_reply (RedisRequest *req, redisReply *reply)
{
  RlLeaseItem *item;
  guint i;

  if (req->answered == req->n_sent)
    {
      /* WAIT, after the commands. */
      gboolean acked = reply->type == REDIS_REPLY_INTEGER
                       && reply->integer >= rl_redis_min_replicas (req->self);
      if (!acked)
        {
          g_strlcpy (rl_redis_wait_shortfall.node, req->node->name,
                     sizeof rl_redis_wait_shortfall.node);
          rl_redis_wait_shortfall.acked = reply->type == REDIS_REPLY_INTEGER ? reply->integer : -1;
          rl_redis_wait_shortfall.connected = -1;
        }
      for (guint k = 0; k < req->n; k++)
        if (req->wrote[k] && !acked)
          req->unreplicated[k] = TRUE;
      freeReplyObject (reply);
      return;
    }
  req->answered++;
  do
    i = req->next++;
  while (!req->sent[i]);
  item = &req->items[i];

  if (reply->type == REDIS_REPLY_ERROR)
    {
      RlTopology *topology = req->self->topology;
      RlNode *target = NULL;
      RlReplyKind kind;

      if (req->step[i] == STEP_EVALSHA && rl_redis_is_noscript (reply))
        {
          req->step[i] = STEP_EVAL;
          freeReplyObject (reply);
          return;
        }
      /* The topology learns of a failover from it (READONLY, a master no more). */
      kind = topology->vt->classify (topology, req->node, reply, &target);
      if (target != NULL)
        rl_node_unref (target);
      request_fail_item (req, i,
                         g_error_new (REDIS_LOCK_ERROR,
                                      kind == RL_REPLY_RETRY ? REDIS_LOCK_ERROR_CONNECTION
                                                             : REDIS_LOCK_ERROR_REDIS,
                                      "Redis at %s refused the lock command: %s",
                                      req->node->name, reply->str));
    }
  else if (req->step[i] == STEP_SET)
    {
      if (reply->type == REDIS_REPLY_STATUS)
        {
          item->result = RL_LEASE_OK;
          req->wrote[i] = TRUE;
          req->step[i] = STEP_DONE;
        }
      else if (reply->type == REDIS_REPLY_NIL)
        {
          /* The key exists: the script says whether it is ours already, or whose for
           * how long; until it answers, held (-1: for how long is unknown). */
          item->result = RL_LEASE_HELD;
          item->pttl_ms = -1;
          req->step[i] = STEP_EVALSHA;
        }
      else
        request_fail_item (req, i,
                           g_error_new (REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_REDIS,
                                        "Redis lock command returned an unexpected reply (type %d)",
                                        reply->type));
    }
  else if (reply->type != REDIS_REPLY_INTEGER)
    request_fail_item (req, i,
                       g_error_new (REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_REDIS,
                                    "Redis lock script returned an unexpected reply (type %d)",
                                    reply->type));
  else
    {
      long long result = reply->integer;

      req->step[i] = STEP_DONE;
      switch (req->kind)
        {
        case RL_REQUEST_ACQUIRE:
          item->result = result == RL_ACQUIRED ? RL_LEASE_OK : RL_LEASE_HELD;
          req->wrote[i] = result == RL_ACQUIRED;
          if (result != RL_ACQUIRED)
            item->pttl_ms = result;
          break;
        case RL_REQUEST_RENEW:
          item->result = result == 1 ? RL_LEASE_OK : RL_LEASE_LOST;
          req->wrote[i] = result == 1;
          break;
        case RL_REQUEST_RELEASE:
          item->others = rl_redis_release_heard (req->self, result, req->channels[i]);
          {
            GError *lost_error = NULL;

            item->result = rl_redis_release_outcome (result, req->retried, item->key, &lost_error);
            if (lost_error != NULL)
              request_fail_item (req, i, lost_error);
          }
          break;
        default:
          g_assert_not_reached ();
        }
    }
  freeReplyObject (reply);
}

/* The exchange under way ended, every reply read or @failed (its connection broke):
 * TRUE when a follow-up was queued (the script by EVAL after NOSCRIPT, the acquire
 * script for a key SET NX found taken, everything again on a fresh connection for one
 * that had gone stale), FALSE when every lease has its result. */
static gboolean
request_step (RedisRequest *req, gboolean failed)
{
  RlPool *pool = req->node->pool;
  gboolean pending = FALSE;

  if (failed)
    {
      RlConn *conn = req->conn;
      /* Nothing answered on a pooled connection the server had closed (restarted):
       * sent again, once, on a fresh one, as rl_redis_call() does. */
      gboolean stale
          = req->reused && !req->retried && req->answered == 0 && rl_conn_is_stale (conn);
      g_autoptr (GError) error = NULL;

      if (!stale)
        {
          g_autofree char *what = g_strdup_printf ("Lock request on %s", req->node->name);
          rl_set_error_from_conn (&error, conn, what);
          req->self->topology->vt->failed (req->self->topology, req->node);
        }
      rl_pool_put (pool, conn);
      req->conn = NULL;
      req->expected = req->got = 0;
      if (stale)
        {
          req->retried = TRUE;
          req->conn = rl_pool_get_within (pool, 0, req->timeout_ms, &req->reused, &error);
        }
      for (guint i = 0; i < req->n; i++)
        {
          if (req->waited && req->wrote[i])
            req->unreplicated[i] = TRUE;
          if (req->sent[i] && req->step[i] != STEP_DONE && req->conn == NULL)
            request_fail_item (req, i, g_error_copy (error));
        }
      if (req->conn == NULL)
        return FALSE;
    }
  for (guint i = 0; i < req->n; i++)
    pending = pending || req->step[i] != STEP_DONE;
  if (!pending)
    return FALSE;
  request_queue (req);
  return TRUE;
}

/* What the caller waits on now: the connection's socket, for reading, and for writing
 * while bytes wait to be sent; or nothing, with ready set, when the next step needs no
 * wait (decrypted bytes already in, the connection failed). */
static void
request_wait_for (RedisRequest *req)
{
  req->pub.fd = req->conn->fd;
  req->pub.events = (short) (POLLIN | (rl_conn_wants_write (req->conn) ? POLLOUT : 0));
  req->pub.ready = req->conn->err != RL_CONN_OK || rl_conn_has_pending (req->conn);
}

/* Sends what is queued, as far as the socket takes it without waiting. */
static void
request_send (RedisRequest *req)
{
  if (rl_conn_wants_write (req->conn))
    rl_conn_write_some (req->conn);
  request_wait_for (req);
}

void
rl_redis_request_ready (RlRequest *request, short revents)
{
  RedisRequest *req = (RedisRequest *) request;
  RlConn *conn = req->conn;
  gboolean ok = conn->err == RL_CONN_OK;

  g_return_if_fail (!req->pub.done);
  if (ok && (revents & POLLOUT) != 0)
    ok = rl_conn_write_some (conn);
  if (ok && ((revents & (POLLIN | POLLHUP | POLLERR)) != 0 || rl_conn_has_pending (conn)))
    ok = rl_conn_read_some (conn);
  while (ok && req->got < req->expected)
    {
      redisReply *reply = NULL;

      ok = rl_conn_next_reply (conn, &reply);
      if (!ok || reply == NULL)
        break;
      req->got++;
      request_reply (req, reply);
    }
  if (!ok)
    rl_conn_fail (conn, RL_CONN_ERR_IO, "Redis connection failed");
  if (!ok || req->got == req->expected)
    {
      if (!request_step (req, !ok))
        {
          req->pub.done = TRUE;
          req->pub.fd = -1;
          req->pub.events = 0;
          req->pub.ready = FALSE;
          return;
        }
      req->got = 0;
      request_send (req);
      return;
    }
  request_wait_for (req);
}

gboolean
rl_redis_request_end (RlRequest *request, GError **error)
{
  RedisRequest *req = (RedisRequest *) request;
  GError *first = NULL;

  if (req->conn != NULL)
    {
      /* Ended by the caller with replies outstanding: the connection can serve nobody
       * else, and the node counts as failing, as for any timeout. */
      if (!req->pub.done)
        {
          rl_conn_fail (req->conn, RL_CONN_ERR_TIMEOUT, "Redis timed out");
          req->self->topology->vt->failed (req->self->topology, req->node);
        }
      rl_pool_put (req->node->pool, req->conn);
    }
  for (guint i = 0; i < req->n; i++)
    {
      RlLeaseItem *item = &req->items[i];

      /* Ended by the caller before its answer came. */
      if (req->step[i] != STEP_DONE)
        request_fail_item (req, i,
                           g_error_new (REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION,
                                        "Redis at %s did not answer the lock request in time",
                                        req->node->name));
      /* Written on the master alone: a failover now could lose it, so it does not
       * count (an acquisition is released by the caller, which asked for it). */
      if (req->unreplicated[i] && item->result == RL_LEASE_OK && req->kind != RL_REQUEST_RELEASE)
        {
          GError *e = NULL;
          rl_redis_set_not_replicated (req->self, &e,
                                       req->kind == RL_REQUEST_ACQUIRE ? "acquisition" : "renewal",
                                       item->key);
          request_fail_item (req, i, e);
        }
      if (req->errors[i] != NULL && first == NULL)
        first = g_steal_pointer (&req->errors[i]);
      g_clear_error (&req->errors[i]);
    }
  rl_node_unref (req->node);
  g_strfreev (req->channels);
  g_free (req->step);
  g_free (req->sent);
  g_free (req->wrote);
  g_free (req->unreplicated);
  g_free (req->errors);
  g_free (req->ttls);
  g_free (req);
  if (first != NULL)
    {
      g_propagate_error (error, first);
      return FALSE;
    }
  return TRUE;
}

/* A request for leases of one server: every key is routed to its node, and they must
 * be the same (a Cluster's keys of different slots are refused: INVALID). */
RlRequest *
rl_redis_request_begin (RlStore *store, RlRequestKind kind, guint n, RlLeaseItem *items,
                        gint64 timeout_ms, GError **error)
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

  req = g_new0 (RedisRequest, 1);
  req->self = self;
  req->kind = kind;
  req->script = kind == RL_REQUEST_ACQUIRE ? &self->acquire
                : kind == RL_REQUEST_RENEW ? &self->renew
                                           : &self->release;
  req->n = n;
  req->items = items;
  req->node = node;
  req->timeout_ms = timeout_ms;
  req->step = g_new0 (guint8, n);
  req->sent = g_new0 (gboolean, n);
  req->wrote = g_new0 (gboolean, n);
  req->unreplicated = g_new0 (gboolean, n);
  req->errors = g_new0 (GError *, n);
  req->ttls = g_malloc0 (sizeof *req->ttls * n);
  if (kind == RL_REQUEST_RELEASE)
    {
      req->channels = g_new0 (char *, n + 1);
      req->legacy = rl_redis_release_legacy (self, req->own);
    }
  for (guint i = 0; i < n; i++)
    {
      req->step[i] = kind == RL_REQUEST_ACQUIRE ? STEP_SET : STEP_EVALSHA;
      rl_format_uint (req->ttls[i], items[i].ttl_ms);
      if (req->channels != NULL)
        req->channels[i] = g_strconcat (self->channel_prefix, items[i].key, NULL);
    }
  req->conn = rl_pool_get_within (node->pool, 0, timeout_ms, &req->reused, &local_error);
  if (req->conn == NULL)
    {
      topology->vt->failed (topology, node);
      rl_redis_request_end (&req->pub, NULL);
      g_propagate_error (error, g_steal_pointer (&local_error));
      return NULL;
    }
  request_queue (req);
  request_send (req);
  return &req->pub;
}
