/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* sentinel.c: Redis Sentinel, a topology whose one master is found through Sentinels.
 *
 * Discovery follows the Sentinel client protocol: ask each Sentinel in turn (the one
 * that answered last first) `SENTINEL get-master-addr-by-name`, connect to the address
 * it gives and check that `ROLE` says master; a node that still says replica (the
 * Sentinels switched before the node was promoted, or the other way round) is asked
 * again after a pause, all within the connect timeout. A name that every Sentinel
 * that answered does not know fails at once: waiting would not make it known.
 *
 * Failover is noticed two ways, because either can be late: a subscription to
 * `+switch-master` on one Sentinel (moved to the next when it fails), and any sign
 * from the data path — a connection failure, or a node answering READONLY, LOADING or
 * MASTERDOWN — which asks for a rediscovery. Both run on the topology's own thread,
 * at most one per RL_SENTINEL_REDISCOVER_MIN_MS, so a burst of failing calls costs
 * one round of questions. When the master changed, the new node replaces the old one
 * (calls under way keep the old node by reference and fail or finish there) and the
 * store is told, which moves its subscription and has every held lease checked on the
 * new master at once: asynchronous replication may have lost some.
 */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <string.h>

#include "debug.h"
#include "sync.h"
#include "topology.h"
#include "wake-pipe.h"

#define RL_SENTINEL_REDISCOVER_MIN_MS 100
#define RL_SENTINEL_BACKOFF_MIN_MS 25
#define RL_SENTINEL_BACKOFF_MAX_MS 1000
#define RL_SENTINEL_PING_MS 5000

typedef struct
{
  RlTopology parent;
  RlConnConfig node_config; /* credentials and db every data node is connected with */
  char *master_name;
  GPtrArray *sentinels; /* RlNode*: the Sentinels, in the URL's order */

  RlMutex mutex; /* guards everything below */
  RlNode *master;
  guint sentinel_turn; /* the Sentinel asked first: the one that answered last */
  gboolean rediscover_wanted;
  gboolean stop;
  RlWakeThread wt; /* its pipe is written to wake the thread: a rediscovery wanted, or stop */
} RlSentinel;

static void
wake_thread (RlSentinel *self)
{
  if (self->wt.wake[1] >= 0)
    rl_wake_pipe_write (self->wt.wake, 'w');
}

static void
request_rediscovery (RlSentinel *self)
{
  rl_mutex_lock (&self->mutex);
  self->rediscover_wanted = TRUE;
  rl_mutex_unlock (&self->mutex);
  wake_thread (self);
}

/* Discovery ------------------------------------------------------------------------- */

typedef enum
{
  ASK_FOUND,
  ASK_UNKNOWN, /* the Sentinel does not know the name */
  ASK_FAILED,
} AskResult;

/* Sends one command (@argc words of @argv) to @node on a connection of its pool and
 * returns the reply, or NULL with @error (@what, followed by the node's name, says
 * what was being done). */
static redisReply *
roundtrip (RlNode *node, gint64 timeout_ms, int argc, const char **argv, const char *what,
           GError **error)
{
  gboolean reused;
  RlConn *conn = rl_pool_get (node->pool, timeout_ms, &reused, error);
  redisReply *reply;

  if (conn == NULL)
    return NULL;
  reply = rl_conn_roundtrip (conn, argc, argv);
  if (reply == NULL)
    {
      g_autofree char *doing = g_strdup_printf ("%s %s", what, node->name);
      rl_set_error_from_conn (error, conn, doing);
    }
  rl_pool_put (node->pool, conn);
  return reply;
}

/* Asks @sentinel where the master is. */
static AskResult
ask_sentinel (RlSentinel *self, RlNode *sentinel, gint64 timeout_ms, char **host, int *port,
              GError **error)
{
  const char *argv[] = { "SENTINEL", "get-master-addr-by-name", self->master_name };
  redisReply *reply = roundtrip (sentinel, timeout_ms, 3, argv, "Asking the Sentinel at", error);
  AskResult result = ASK_FAILED;

  if (reply == NULL)
    return ASK_FAILED;
  if (reply->type == REDIS_REPLY_NIL)
    result = ASK_UNKNOWN;
  else if (reply->type == REDIS_REPLY_ARRAY && reply->elements == 2
           && reply->element[0]->type == REDIS_REPLY_STRING
           && reply->element[1]->type == REDIS_REPLY_STRING)
    {
      guint64 p;
      if (g_ascii_string_to_unsigned (reply->element[1]->str, 10, 1, 65535, &p, NULL))
        {
          *host = g_strdup (reply->element[0]->str);
          *port = (int) p;
          result = ASK_FOUND;
        }
    }
  if (result == ASK_FAILED)
    g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_REDIS,
                 "The Sentinel at %s gave no master address: %s", sentinel->name,
                 reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply");
  freeReplyObject (reply);
  return result;
}

/* Whether @node says it is a master (ROLE). */
static gboolean
is_master (RlSentinel *self, RlNode *node, gint64 timeout_ms, GError **error)
{
  const char *argv[] = { "ROLE" };
  redisReply *reply = roundtrip (node, timeout_ms, 1, argv, "Asking the role of", error);
  gboolean master;

  if (reply == NULL)
    return FALSE;
  master = reply->type == REDIS_REPLY_ARRAY && reply->elements > 0
           && reply->element[0]->type == REDIS_REPLY_STRING
           && strcmp (reply->element[0]->str, "master") == 0;
  if (!master)
    g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION,
                 "%s, named master of “%s” by the Sentinels, is not a master%s%s", node->name,
                 self->master_name, reply->type == REDIS_REPLY_ERROR ? ": " : "",
                 reply->type == REDIS_REPLY_ERROR ? reply->str : "");
  freeReplyObject (reply);
  return master;
}

/* The master's node: the current one when the Sentinels still name it. */
static RlNode *
node_for (RlSentinel *self, const char *host, int port)
{
  RlConnConfig config;
  RlNode *node = NULL;

  rl_mutex_lock (&self->mutex);
  if (self->master != NULL && self->master->port == port
      && g_strcmp0 (self->master->host, host) == 0)
    node = rl_node_ref (self->master);
  rl_mutex_unlock (&self->mutex);
  if (node != NULL)
    return node;
  rl_conn_config_copy (&self->node_config, &config);
  config.host = g_strdup (host);
  config.port = port;
  return rl_node_new (&config, self->parent.ctx);
}

/* Finds the master within @timeout_ms: a node a Sentinel names and that says it is
 * master. With a reference; NULL with @error (CONNECTION) otherwise. */
static RlNode *
discover (RlSentinel *self, gint64 timeout_ms, GError **error)
{
  gint64 deadline = g_get_monotonic_time () + timeout_ms * 1000;
  gint64 backoff_ms = RL_SENTINEL_BACKOFF_MIN_MS;
  g_autoptr (GError) last_error = NULL;

  for (;;)
    {
      guint n = self->sentinels->len, turn, unknown = 0, answered = 0;

      rl_mutex_lock (&self->mutex);
      turn = self->sentinel_turn;
      rl_mutex_unlock (&self->mutex);
      for (guint k = 0; k < n; k++)
        {
          guint i = (turn + k) % n;
          RlNode *sentinel = g_ptr_array_index (self->sentinels, i);
          gint64 left_ms = (deadline - g_get_monotonic_time ()) / 1000;
          g_autoptr (GError) local_error = NULL;
          g_autofree char *host = NULL;
          g_autoptr (RlNode) node = NULL;
          int port = 0;
          AskResult asked;

          if (left_ms <= 0)
            break;
          asked = ask_sentinel (self, sentinel, left_ms, &host, &port, &local_error);
          if (asked != ASK_FAILED)
            answered++;
          if (asked == ASK_UNKNOWN)
            unknown++;
          if (asked != ASK_FOUND)
            {
              if (local_error != NULL)
                {
                  g_clear_error (&last_error);
                  last_error = g_steal_pointer (&local_error);
                }
              continue;
            }
          node = node_for (self, host, port);
          left_ms = MAX ((deadline - g_get_monotonic_time ()) / 1000, 1);
          if (is_master (self, node, left_ms, &local_error))
            {
              rl_mutex_lock (&self->mutex);
              self->sentinel_turn = i;
              rl_mutex_unlock (&self->mutex);
              return g_steal_pointer (&node);
            }
          g_clear_error (&last_error);
          last_error = g_steal_pointer (&local_error);
        }
      /* Every Sentinel that answered says it does not know the name. */
      if (answered > 0 && unknown == answered)
        {
          g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION,
                       "No Sentinel knows a master named “%s”", self->master_name);
          return NULL;
        }
      if (g_get_monotonic_time () + backoff_ms * 1000 >= deadline)
        break;
      g_usleep ((gulong) backoff_ms * 1000);
      backoff_ms = MIN (backoff_ms * 2, RL_SENTINEL_BACKOFF_MAX_MS);
    }
  if (last_error != NULL)
    g_propagate_prefixed_error (error, g_steal_pointer (&last_error),
                                "Cannot find the master “%s” through the Sentinels: ",
                                self->master_name);
  else
    g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION,
                 "Cannot find the master “%s” through the Sentinels in time", self->master_name);
  return NULL;
}

/* Finds the master again; when it is another node, it replaces the current one and
 * the store is told. */
static void
rediscover (RlSentinel *self)
{
  g_autoptr (GError) error = NULL;
  RlNode *node = discover (self, RL_ATOMIC_GET (self->parent.ctx->connect_timeout_ms), &error);
  RlNode *old = NULL;

  if (node == NULL)
    {
      rl_debug ("sentinel: %s", error->message);
      return;
    }
  rl_mutex_lock (&self->mutex);
  if (self->master != node)
    {
      old = self->master;
      self->master = node;
      node = NULL;
    }
  rl_mutex_unlock (&self->mutex);
  if (node != NULL)
    {
      rl_node_unref (node);
      return;
    }
  rl_debug ("sentinel: the master of “%s” is now %s", self->master_name, self->master->name);
  rl_node_unref (old);
  if (self->parent.changed != NULL)
    self->parent.changed (self->parent.changed_data, TRUE);
}

/* The watching thread --------------------------------------------------------------- */

/* Drains the wake-up pipe; TRUE unless stop was asked. */
static gboolean
drain_and_check (RlSentinel *self)
{
  gboolean stop;

  rl_wake_pipe_drain (self->wt.wake);
  rl_mutex_read (&self->mutex, &self->stop, &stop, sizeof stop);
  return !stop;
}

/* A subscription to +switch-master on the next Sentinel that takes it. */
static RlConn *
subscribe (RlSentinel *self, guint *next)
{
  const char *argv[] = { "SUBSCRIBE", "+switch-master" };

  for (guint k = 0; k < self->sentinels->len; k++)
    {
      RlNode *sentinel = g_ptr_array_index (self->sentinels, (*next + k) % self->sentinels->len);
      g_autoptr (GError) error = NULL;
      RlConn *conn = rl_pool_connect (sentinel->pool, &error);
      redisReply *reply;

      if (conn == NULL)
        {
          rl_debug ("sentinel: %s", error->message);
          continue;
        }
      reply = rl_conn_roundtrip (conn, 2, argv);
      if (reply != NULL && reply->type == REDIS_REPLY_ARRAY)
        {
          freeReplyObject (reply);
          *next = (*next + k) % self->sentinels->len;
          return conn;
        }
      if (reply != NULL)
        freeReplyObject (reply);
      rl_conn_free (conn);
    }
  return NULL;
}

/* Whether @reply is a +switch-master message about our master. */
static gboolean
is_our_switch (RlSentinel *self, const redisReply *reply)
{
  gsize n = strlen (self->master_name);

  return reply->type == REDIS_REPLY_ARRAY && reply->elements == 3
         && reply->element[0]->type == REDIS_REPLY_STRING
         && strcmp (reply->element[0]->str, "message") == 0
         && reply->element[2]->type == REDIS_REPLY_STRING
         && strncmp (reply->element[2]->str, self->master_name, n) == 0
         && reply->element[2]->str[n] == ' ';
}

/* Reads what the subscription has: TRUE while it works. */
static gboolean
read_subscription (RlSentinel *self, RlConn *sub, gboolean *pong)
{
  if (!rl_conn_read_some (sub))
    return FALSE;
  for (;;)
    {
      redisReply *reply = NULL;
      if (!rl_conn_next_reply (sub, &reply))
        return FALSE;
      if (reply == NULL)
        return TRUE;
      if (is_our_switch (self, reply))
        {
          rl_mutex_lock (&self->mutex);
          self->rediscover_wanted = TRUE;
          rl_mutex_unlock (&self->mutex);
        }
      else
        *pong = TRUE;
      freeReplyObject (reply);
    }
}

static void *
sentinel_thread (void *data)
{
  RlSentinel *self = data;
  RlConn *sub = NULL;
  guint next = 0;
  gint64 backoff_ms = RL_SENTINEL_BACKOFF_MIN_MS;
  gint64 last_rediscovery = 0, last_traffic = 0;
  gboolean ping_out = FALSE;

  rl_thread_set_name ("redislock-sentinel");
  for (;;)
    {
      struct pollfd pfd[2] = { { self->wt.wake[0], POLLIN, 0 }, { -1, POLLIN, 0 } };
      gint64 now = g_get_monotonic_time ();
      gint64 wait_ms = RL_SENTINEL_PING_MS;
      gboolean want;

      if (!drain_and_check (self))
        break;
      rl_mutex_lock (&self->mutex);
      want = self->rediscover_wanted;
      rl_mutex_unlock (&self->mutex);
      if (want && now - last_rediscovery >= RL_SENTINEL_REDISCOVER_MIN_MS * 1000)
        {
          rl_mutex_lock (&self->mutex);
          self->rediscover_wanted = FALSE;
          rl_mutex_unlock (&self->mutex);
          rediscover (self);
          last_rediscovery = g_get_monotonic_time ();
          continue;
        }
      if (want)
        wait_ms = RL_SENTINEL_REDISCOVER_MIN_MS - (now - last_rediscovery) / 1000;

      if (sub == NULL)
        {
          sub = subscribe (self, &next);
          if (sub != NULL)
            {
              /* A switch announced while nobody listened would go unseen. */
              backoff_ms = RL_SENTINEL_BACKOFF_MIN_MS;
              last_traffic = g_get_monotonic_time ();
              ping_out = FALSE;
              request_rediscovery (self);
              continue;
            }
          wait_ms = MIN (wait_ms, backoff_ms);
          backoff_ms = MIN (backoff_ms * 2, RL_SENTINEL_BACKOFF_MAX_MS);
        }
      else
        {
          gint64 idle_ms = RL_SENTINEL_PING_MS - (now - last_traffic) / 1000;
          if (idle_ms <= 0)
            {
              const char *ping[] = { "PING" };
              if (ping_out)
                {
                  rl_debug ("sentinel: no answer to PING, subscribing again");
                  g_clear_pointer (&sub, rl_conn_free);
                  next++;
                  continue;
                }
              rl_conn_append (sub, 1, ping);
              /* A PING is a few bytes: the socket takes it at once; a failure shows at
               * the next read. */
              rl_conn_write_some (sub);
              ping_out = TRUE;
              last_traffic = now;
              continue;
            }
          wait_ms = MIN (wait_ms, idle_ms);
          pfd[1].fd = sub->fd;
        }
      if (sub != NULL && rl_conn_has_pending (sub))
        pfd[1].revents = POLLIN;
      else if (poll (pfd, sub != NULL ? 2 : 1, (int) MAX (wait_ms, 1)) < 0 && errno != EINTR)
        break;
      if (sub != NULL && pfd[1].revents != 0)
        {
          gboolean pong = FALSE;
          if (!read_subscription (self, sub, &pong))
            {
              rl_debug ("sentinel: the subscription to +switch-master broke");
              g_clear_pointer (&sub, rl_conn_free);
              next++;
              continue;
            }
          if (pong)
            ping_out = FALSE;
          last_traffic = g_get_monotonic_time ();
        }
    }
  rl_conn_free (sub);
  return NULL;
}

/* The table ----------------------------------------------------------------------------- */

static RlNode *
sentinel_route (RlTopology *topology, const char *key, GError **error)
{
  RlSentinel *self = (RlSentinel *) topology;
  RlNode *node;

  rl_mutex_lock (&self->mutex);
  node = rl_node_ref (self->master);
  rl_mutex_unlock (&self->mutex);
  return node;
}

static RlNode *
sentinel_subscriber (RlTopology *topology, GError **error)
{
  return sentinel_route (topology, NULL, error);
}

static GPtrArray *
sentinel_masters (RlTopology *topology, GError **error)
{
  GPtrArray *masters = g_ptr_array_new_with_free_func ((GDestroyNotify) rl_node_unref);

  g_ptr_array_add (masters, sentinel_route (topology, NULL, error));
  return masters;
}

static RlReplyKind
sentinel_classify (RlTopology *topology, RlNode *node, const redisReply *reply, RlNode **target)
{
  RlReplyKind kind = rl_topology_classify_common (reply);

  /* READONLY: the node was demoted; LOADING, MASTERDOWN: it is not serving yet. The
   * Sentinels may name another master by now. */
  if (kind == RL_REPLY_RETRY)
    request_rediscovery ((RlSentinel *) topology);
  return kind;
}

static void
sentinel_failed (RlTopology *topology, RlNode *node)
{
  RL_ATOMIC_SET (node->failed_at, g_get_monotonic_time ());
  request_rediscovery ((RlSentinel *) topology);
}

static void
sentinel_close (RlTopology *topology)
{
  RlSentinel *self = (RlSentinel *) topology;

  rl_wake_thread_stop (&self->wt, &self->mutex, NULL, &self->stop);
}

static void
sentinel_free (RlTopology *topology)
{
  RlSentinel *self = (RlSentinel *) topology;

  rl_wake_pipe_close (self->wt.wake);
  rl_node_unref (self->master);
  g_ptr_array_unref (self->sentinels);
  g_free (self->master_name);
  rl_conn_config_clear (&self->node_config);
  rl_mutex_clear (&self->mutex);
  g_free (self);
}

RL_DEFINE_TOPOLOGY_VTABLE (sentinel, .reroute = NULL);

RlTopology *
rl_sentinel_open (const RlUrl *url, RlStoreContext *ctx, RlTopologyChangedFunc changed,
                  gpointer changed_data, GError **error)
{
  RlSentinel *self = g_new0 (RlSentinel, 1);

  rl_topology_init (&self->parent, &sentinel_vtable, ctx, TRUE);
  self->parent.changed = changed;
  self->parent.changed_data = changed_data;
  rl_wake_thread_init (&self->wt);
  rl_conn_config_copy (&url->node, &self->node_config);
  self->master_name = g_strdup (url->master_name);
  rl_mutex_init (&self->mutex);
  self->sentinels = g_ptr_array_new_with_free_func ((GDestroyNotify) rl_node_unref);
  for (guint i = 0; i < url->hosts->len; i++)
    {
      RlConnConfig config;
      rl_conn_config_copy (&g_array_index (url->hosts, RlConnConfig, i), &config);
      g_ptr_array_add (self->sentinels, rl_node_new (&config, ctx));
    }

  self->master = discover (self, RL_ATOMIC_GET (ctx->connect_timeout_ms), error);
  if (self->master == NULL)
    {
      sentinel_free (&self->parent);
      return NULL;
    }
  if (!rl_wake_thread_start (&self->wt, sentinel_thread, self))
    g_warning ("Cannot start the Sentinel watching thread; failovers are noticed only by "
               "failing calls");
  return &self->parent;
}
