/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* redis-exchange.c: the exchange engine of the Redis store: one command for a key
 * goes to the node that serves it (rl_redis_call(): MOVED/ASK, TRYAGAIN-like answers with a
 * paused retry, NOSCRIPT answered by EVAL, a stale pooled connection retried once, a
 * Cluster failover rerouted, WAIT for replicas, key tracking for a waiter's read), or
 * many commands go at once, one pipeline per node (rl_redis_pipeline()); either way one reply
 * per command. It knows nothing of what the replies mean: that is the callers' part
 * (redis-lease.c, redis-batch.c, redis-inspect.c, the lock family's script files).
 * Cut from redis-store.c because it is the one layer below every Redis operation, so
 * the calls go one way: the operations call it, it calls only the topology and the
 * connections.
 */
#include "config.h"

#include <string.h>

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

gboolean
rl_redis_is_noscript (redisReply *reply)
{
  return reply->type == REDIS_REPLY_ERROR && g_str_has_prefix (reply->str, "NOSCRIPT");
}

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

/* Reads the @n replies queue_tracking() added for @track_id. FALSE when the
 * connection failed. A refusal leaves the connection without tracking (and the read
 * untracked: the waiter is woken as without it); it is logged at debug level, the
 * subscriber having warned already if the user lacks the command. */
static gboolean
read_tracking (RlConn *conn, gint64 track_id, guint n)
{
  for (guint i = 0; i < n; i++)
    {
      redisReply *reply = NULL;

      if (!rl_conn_get_reply (conn, &reply))
        return FALSE;
      if (reply->type == REDIS_REPLY_ERROR)
        {
          g_debug ("key tracking on a data connection: %s", reply->str);
          conn->tracking_redirect = 0;
        }
      else if (i == 0 && n == 2)
        conn->tracking_redirect = track_id;
      freeReplyObject (reply);
    }
  return TRUE;
}

/* One exchange on @conn: @argv, preceded by ASKING when @asking (the answer to ASKING
 * is read and dropped), and by the tracking of what it reads when @track_id is not 0
 * (queue_tracking()). NULL when the connection failed. */
static redisReply *
exchange (RlConn *conn, gboolean asking, gint64 track_id, int argc, const char **argv)
{
  const char *asking_argv[] = { "ASKING" };
  redisReply *reply = NULL;
  guint tracking;

  if (!asking && track_id == 0)
    return rl_conn_roundtrip (conn, argc, argv);
  tracking = queue_tracking (conn, track_id);
  if (asking)
    rl_conn_append (conn, 1, asking_argv);
  rl_conn_append (conn, argc, argv);
  if (!read_tracking (conn, track_id, tracking))
    return NULL;
  if (asking)
    {
      if (!rl_conn_get_reply (conn, &reply))
        return NULL;
      freeReplyObject (reply);
    }
  if (!rl_conn_get_reply (conn, &reply))
    return NULL;
  return reply;
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

/* Whether a reply says the command wrote the lease (so replicas must acknowledge it). */

/* The replicas redis_lock_registry_set_min_replicas() asks for, 0 when off. */
gint64
rl_redis_min_replicas (RlRedisStore *self)
{
  return RL_ATOMIC_GET (self->parent.ctx->min_replicas);
}

_Thread_local RlWaitShortfall rl_redis_wait_shortfall = { "", -1, -1 };

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
    n = (gint64)reply->element[2]->elements;
  if (reply != NULL)
    freeReplyObject (reply);
  return n;
}

/* `WAIT n timeout` on @conn (to @node), right after a write: whether enough replicas
 * acknowledged it; when not, what WAIT and ROLE said is kept for the message. @budget_ms
 * (0: none) caps the wait, for a caller whose own time is shorter. */
gboolean
rl_redis_replicated (RlRedisStore *self, RlNode *node, RlConn *conn, gint64 budget_ms)
{
  RlStoreContext *ctx = self->parent.ctx;
  gint64 n = rl_redis_min_replicas (self);
  gint64 timeout_ms = RL_ATOMIC_GET (ctx->replica_timeout_ms);
  char count[24], timeout[24];
  const char *argv[] = { "WAIT", count, timeout };
  redisReply *reply;
  gboolean ok;

  if (n == 0)
    return TRUE;
  if (timeout_ms <= 0)
    timeout_ms = RL_ATOMIC_GET (ctx->command_timeout_ms);
  if (budget_ms > 0)
    timeout_ms = MAX (MIN (timeout_ms, budget_ms), 1);
  rl_format_uint (count, n);
  rl_format_uint (timeout, timeout_ms);
  /* The socket waits for WAIT's own timeout plus a command's. */
  rl_conn_set_timeout (conn, timeout_ms + RL_ATOMIC_GET (ctx->command_timeout_ms));
  RL_ATOMIC_ADD (ctx->stats->round_trips, 1);
  RL_ATOMIC_ADD (ctx->stats->commands, 1);
  reply = rl_conn_roundtrip (conn, 3, argv);
  ok = reply != NULL && reply->type == REDIS_REPLY_INTEGER && reply->integer >= n;
  if (!ok)
    g_debug ("WAIT %s %s answered %s%lld%s", count, timeout, reply == NULL ? "nothing: " : "",
             reply != NULL && reply->type == REDIS_REPLY_INTEGER ? reply->integer : -1,
             reply != NULL && reply->type == REDIS_REPLY_ERROR ? reply->str : "");
  if (!ok)
    {
      g_strlcpy (rl_redis_wait_shortfall.node, node->name, sizeof rl_redis_wait_shortfall.node);
      rl_redis_wait_shortfall.acked
          = reply != NULL && reply->type == REDIS_REPLY_INTEGER ? reply->integer : -1;
      rl_redis_wait_shortfall.connected = reply != NULL ? connected_replicas (self, conn) : -1;
    }
  if (reply != NULL)
    freeReplyObject (reply);
  return ok;
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
  g_debug ("%s failed; %s now serves the command", (*node)->name, next->name);
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
 * retries once on a fresh connection when a pooled one turns out stale; all within
 * @timeout_ms (0: the command timeout), which also bounds each exchange. With
 * @script, argv[0..1] are EVALSHA and its SHA-1, and a NOSCRIPT answer is followed by
 * EVAL of the script text on the same connection. With @track, the keys the command
 * reads are tracked while the registry's subscriber hears invalidations (a waiter's
 * read of the key it waits for: see queue_tracking()). */
redisReply *
rl_redis_call_tracked (RlRedisStore *self, const char *key, int argc, const char **argv,
                       const RlScript *script, gint64 timeout_ms, gboolean *retried,
                       RlWroteFunc wrote, gboolean *acked, gboolean track, GError **error)
{
  RlTopology *topology = self->topology;
  RedisLockRegistryStats *stats = self->parent.ctx->stats;
  gint64 budget_ms
      = timeout_ms > 0 ? timeout_ms : RL_ATOMIC_GET (self->parent.ctx->command_timeout_ms);
  gint64 deadline = g_get_monotonic_time () + budget_ms * 1000;
  RlNode *node = topology->vt->route (topology, key, error);
  gboolean asking = FALSE, stale_retried = FALSE;
  guint redirects = 0, pauses = 0, reroutes = 0;
  redisReply *reply = NULL;

  if (retried != NULL)
    *retried = FALSE;
  if (acked != NULL)
    *acked = TRUE;
  while (node != NULL)
    {
      gint64 left_ms = (deadline - g_get_monotonic_time ()) / 1000;
      gboolean reused;
      RlConn *conn;
      RlNode *target = NULL;
      RlReplyKind kind;
      gint64 track_id;

      /* The first exchange has the whole budget even when routing took a moment. */
      conn = rl_pool_get (node->pool, redirects + pauses == 0 ? budget_ms : MAX (left_ms, 1),
                          &reused, error);
      if (conn == NULL)
        {
          if (failover (topology, &node, key, deadline, &reroutes, error))
            continue;
          break;
        }
      if (script != NULL)
        {
          argv[0] = "EVALSHA";
          argv[1] = script->sha;
        }
      track_id = track ? rl_notifier_tracking_id (self->notifier) : 0;
      RL_ATOMIC_ADD (stats->round_trips, 1);
      RL_ATOMIC_ADD (stats->commands, 1);
      reply = exchange (conn, asking, track_id, argc, argv);
      if (reply != NULL && script != NULL && rl_redis_is_noscript (reply))
        {
          freeReplyObject (reply);
          argv[0] = "EVAL";
          argv[1] = script->text;
          RL_ATOMIC_ADD (stats->round_trips, 1);
          RL_ATOMIC_ADD (stats->commands, 1);
          reply = exchange (conn, asking, track_id, argc, argv);
        }
      if (reply == NULL)
        {
          gboolean retry = reused && !stale_retried && rl_conn_is_stale (conn);
          if (!retry)
            {
              g_autofree char *what = g_strdup_printf ("%s on %s", argv[0], node->name);
              rl_set_error_from_conn (error, conn, what);
            }
          rl_pool_put (node->pool, conn);
          if (retry)
            {
              stale_retried = TRUE;
              if (retried != NULL)
                *retried = TRUE;
              continue;
            }
          /* Sent again elsewhere, the request may run twice: every lease script is
           * safe to run twice with the same value, which the caller's *retried says. */
          if (failover (topology, &node, key, deadline, &reroutes, error))
            {
              if (retried != NULL)
                *retried = TRUE;
              continue;
            }
          break;
        }
      if (reply->type != REDIS_REPLY_ERROR && wrote != NULL && acked != NULL && wrote (reply))
        *acked = rl_redis_replicated (self, node, conn, 0);
      rl_pool_put (node->pool, conn);
      if (reply->type != REDIS_REPLY_ERROR)
        break;

      kind = topology->vt->classify (topology, node, reply, &target);
      if ((kind == RL_REPLY_MOVED || kind == RL_REPLY_ASK) && redirects < RL_MAX_REDIRECTS
          && g_get_monotonic_time () < deadline)
        {
          g_debug ("%s from %s: %s", argv[0], node->name, reply->str);
          rl_node_unref (node);
          node = target;
          asking = kind == RL_REPLY_ASK;
          redirects++;
          g_clear_pointer (&reply, freeReplyObject);
          continue;
        }
      if (target != NULL)
        rl_node_unref (target);
      if (kind == RL_REPLY_RETRY && g_get_monotonic_time () < deadline)
        {
          g_clear_pointer (&reply, freeReplyObject);
          retry_pause (pauses++, deadline);
          rl_node_unref (node);
          node = topology->vt->route (topology, key, error);
          asking = FALSE;
          continue;
        }
      if (kind == RL_REPLY_RETRY)
        g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION,
                     "Redis at %s could not serve the lock command in time: %s", node->name,
                     reply->str);
      else
        g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_REDIS, "Redis lock %s failed%s: %s",
                     script != NULL ? "script" : "command",
                     kind == RL_REPLY_MOVED || kind == RL_REPLY_ASK ? " (too many redirections)"
                                                                    : "",
                     reply->str);
      g_clear_pointer (&reply, freeReplyObject);
      break;
    }
  if (node != NULL)
    rl_node_unref (node);
  return reply;
}

redisReply *
rl_redis_store_call (RlStore *store, const char *key, int argc, const char **argv,
                     const RlScript *script, gint64 timeout_ms, RlWroteFunc wrote, gboolean *acked,
                     gboolean track, GError **error)
{
  return rl_redis_call_tracked ((RlRedisStore *)store, key, argc, argv, script, timeout_ms, NULL,
                                wrote, acked, track, error);
}

void
rl_redis_store_not_replicated (RlStore *store, const char *what, const char *key, GError **error)
{
  rl_redis_set_not_replicated ((RlRedisStore *)store, error, what, key);
}

redisReply *
rl_redis_call (RlRedisStore *self, const char *key, int argc, const char **argv,
               const RlScript *script, gint64 timeout_ms, gboolean *retried, RlWroteFunc wrote,
               gboolean *acked, GError **error)
{
  return rl_redis_call_tracked (self, key, argc, argv, script, timeout_ms, retried, wrote, acked,
                                FALSE, error);
}

/* Whether the error @reply of a command sent in a batch means it must go again alone
 * through rl_redis_call(), which follows a redirection (MOVED, ASK) or waits and retries
 * (TRYAGAIN, CLUSTERDOWN, LOADING...). */
gboolean
rl_redis_is_reroute (const redisReply *reply)
{
  return reply->type == REDIS_REPLY_ERROR
         && (rl_topology_classify_common (reply) == RL_REPLY_RETRY
             || g_str_has_prefix (reply->str, "MOVED ") || g_str_has_prefix (reply->str, "ASK "));
}
