/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* cluster.c: Redis Cluster, a topology that routes each key to the owner of its slot.
 *
 * A key's slot is CRC16-XMODEM of the key, or of its first non-empty `{hash tag}`,
 * mod 16384, as the cluster specification says. The slot map (which master owns
 * which slot) is read with `CLUSTER SHARDS`, or `CLUSTER SLOTS` from servers before
 * Redis 7, from any node that answers: the seeds of the URL first, later every node
 * seen. Each master gets a node (an address and its connection pool) that lives as
 * long as the topology, so routing a command is an array lookup and a reference
 * under one mutex.
 *
 * The map changes under the library's feet: a slot migrates (the old owner answers
 * `ASK` for keys it no longer has while the migration runs, then `MOVED` for the
 * whole slot), a master fails and a replica takes over. `MOVED` updates the one slot
 * at once and asks for a full refresh; `ASK` changes nothing; a connection failure
 * marks the node and asks for a refresh too, so after a failover calls find the new
 * owner without any `MOVED` having been seen. Refreshes run on a thread of their own,
 * at most one per RL_CLUSTER_REFRESH_MIN_MS, so that a burst of redirections or
 * failures costs one `CLUSTER SHARDS`, not one each, and never adds a round trip to
 * the caller's command.
 *
 * A failover must also be noticed when no command of ours went to the failed master:
 * a lease whose write never reached the replica is gone from the new owner, and its
 * holder must hear of it at once, not at the watchdog's next tick. So the map is read
 * again every RL_CLUSTER_PERIODIC_MS, and every RL_CLUSTER_WATCH_MS for a while after
 * a node failed (until the map changes); a refresh that finds a slot with another
 * owner than before reports the change (the registry then checks every held lease).
 * A command whose node refused the connection or broke it waits, within its own
 * deadline, for a map that routes its key elsewhere and goes there
 * (cluster_reroute()), so that a release right after a failover reaches the new
 * master instead of failing on the dead one.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "debug.h"
#include "key-slot.h"
#include "reply-map.h"
#include "sync.h"
#include "topology.h"

#define RL_CLUSTER_REFRESH_MIN_MS 100
#define RL_CLUSTER_PERIODIC_MS 1000
#define RL_CLUSTER_WATCH_MS 250
/* How long refreshes come every RL_CLUSTER_WATCH_MS after a node failed, unless the
 * map changes first: longer than a failover takes with Redis's default timeouts. */
#define RL_CLUSTER_WATCH_US (30 * G_USEC_PER_SEC)
/* A node that failed this recently is asked for the map, or given the subscription,
 * only when no other node can be. */
#define RL_CLUSTER_FAILED_RECENTLY_US (2 * G_USEC_PER_SEC)

typedef struct
{
  RlTopology parent;
  RlConnConfig node_config; /* the credentials every node is connected with */

  RlMutex mutex; /* guards everything below */
  RlCond cond;   /* refresh_wanted or stop changed */
  RlNode *slots[RL_CLUSTER_SLOTS]; /* the owner of each slot, borrowed from nodes; NULL: none known */
  GPtrArray *nodes;                /* RlNode*, owned: every node seen, the seeds first */
  guint subscriber_turn;           /* where the search for a subscriber node starts */
  gboolean refresh_wanted;
  gboolean stop;
  gboolean started;
  gint64 refreshed_at; /* monotonic µs of the last refresh */
  gint64 watch_until;  /* monotonic µs until which refreshes come every
                          RL_CLUSTER_WATCH_MS (a node failed), 0: none */
  guint64 refreshes;   /* refreshes done, successful or not */
  pthread_t thread;
} RlCluster;

/* One range of the map as a node described it. */
typedef struct
{
  guint start, end;
  char *host;
  int port;
} Range;

static void
range_clear (gpointer data)
{
  g_free (((Range *) data)->host);
}

/* Slots ------------------------------------------------------------------------------ */

/* The first form whose slot is the key's: Spring's own channel name (a hash tag of the
 * key carries over, as when the registry key holds one), the key braced as a whole, or
 * the key's tag in front; the key itself when no form can be (a key without a tag that
 * holds a `}`, which no brace can enclose). */
char *
rl_cluster_shard_channel (const char *prefix, const char *key)
{
  guint slot = rl_key_slot (key);
  const char *open = strchr (key, '{');
  const char *close = open != NULL ? strchr (open + 1, '}') : NULL;
  char *channel = g_strconcat (prefix, key, NULL);

  if (rl_key_slot (channel) == slot)
    return channel;
  g_free (channel);
  channel = g_strconcat (prefix, "{", key, "}", NULL);
  if (rl_key_slot (channel) == slot)
    return channel;
  g_free (channel);
  if (close != NULL && close > open + 1)
    channel = g_strdup_printf ("{%.*s}%s%s", (int) (close - open - 1), open + 1, prefix, key);
  else
    channel = g_strconcat ("{", key, "}", prefix, key, NULL);
  if (rl_key_slot (channel) == slot)
    return channel;
  g_free (channel);
  return g_strdup (key);
}

/* Nodes ------------------------------------------------------------------------------ */

/* The node at @host:@port, made on first sight. self->mutex held. */
static RlNode *
node_at_locked (RlCluster *self, const char *host, int port)
{
  RlConnConfig config;

  rl_mutex_assert_held (&self->mutex);
  for (guint i = 0; i < self->nodes->len; i++)
    {
      RlNode *node = g_ptr_array_index (self->nodes, i);
      if (node->port == port && g_strcmp0 (node->host, host) == 0)
        return node;
    }
  rl_conn_config_copy (&self->node_config, &config);
  g_free (config.host);
  config.host = g_strdup (host);
  config.port = port;
  config.db = 0;
  g_ptr_array_add (self->nodes, rl_node_new (&config, self->parent.ctx));
  return g_ptr_array_index (self->nodes, self->nodes->len - 1);
}

static gboolean
failed_recently (RlNode *node, gint64 now)
{
  gint64 failed_at = RL_ATOMIC_GET (node->failed_at);
  return failed_at != 0 && now - failed_at < RL_CLUSTER_FAILED_RECENTLY_US;
}

/* The distinct owners of slots, in slot order, with references. self->mutex held. */
static GPtrArray *
masters_locked (RlCluster *self)
{
  GPtrArray *masters = g_ptr_array_new_with_free_func ((GDestroyNotify) rl_node_unref);
  RlNode *last = NULL;

  rl_mutex_assert_held (&self->mutex);
  for (guint s = 0; s < RL_CLUSTER_SLOTS; s++)
    {
      RlNode *node = self->slots[s];
      if (node == NULL || node == last)
        continue;
      last = node;
      if (!g_ptr_array_find (masters, node, NULL))
        g_ptr_array_add (masters, rl_node_ref (node));
    }
  return masters;
}

/* The map ------------------------------------------------------------------------------ */

static gboolean
is_string (const redisReply *reply)
{
  return reply != NULL && (reply->type == REDIS_REPLY_STRING || reply->type == REDIS_REPLY_STATUS);
}

/* The host a node announced: unknown ("", "?") means the host of the node asked. */
static const char *
announced_host (const char *host, RlNode *asked)
{
  return host == NULL || *host == '\0' || strcmp (host, "?") == 0 ? asked->host : host;
}

static void
add_range (GArray *ranges, long long start, long long end, const char *host, long long port)
{
  Range range;

  if (start < 0 || end >= RL_CLUSTER_SLOTS || start > end || port <= 0 || port > 65535
      || host == NULL)
    return;
  range.start = (guint) start;
  range.end = (guint) end;
  range.host = g_strdup (host);
  range.port = (int) port;
  g_array_append_val (ranges, range);
}

/* CLUSTER SHARDS: each shard lists its slot ranges and its nodes; the master whose
 * role says so owns them. */
static void
parse_shards (const redisReply *reply, RlNode *asked, GArray *ranges)
{
  for (size_t i = 0; i < reply->elements; i++)
    {
      const redisReply *shard = reply->element[i];
      const redisReply *slots = rl_reply_map_get (shard, "slots");
      const redisReply *nodes = rl_reply_map_get (shard, "nodes");
      const char *host = NULL;
      long long port = 0;

      if (slots == NULL || nodes == NULL || slots->type != REDIS_REPLY_ARRAY
          || nodes->type != REDIS_REPLY_ARRAY)
        continue;
      for (size_t n = 0; n < nodes->elements; n++)
        {
          const redisReply *role = rl_reply_map_get (nodes->element[n], "role");
          const redisReply *endpoint = rl_reply_map_get (nodes->element[n], "endpoint");
          const redisReply *ip = rl_reply_map_get (nodes->element[n], "ip");
          const redisReply *p = rl_reply_map_get (nodes->element[n], "port");
          if (!is_string (role) || strcmp (role->str, "master") != 0 || p == NULL
              || p->type != REDIS_REPLY_INTEGER)
            continue;
          host = announced_host (is_string (endpoint) && strcmp (endpoint->str, "?") != 0
                                     ? endpoint->str
                                     : is_string (ip) ? ip->str : NULL,
                                 asked);
          port = p->integer;
          break;
        }
      for (size_t s = 0; s + 1 < slots->elements; s += 2)
        if (slots->element[s]->type == REDIS_REPLY_INTEGER
            && slots->element[s + 1]->type == REDIS_REPLY_INTEGER)
          add_range (ranges, slots->element[s]->integer, slots->element[s + 1]->integer, host,
                     port);
    }
}

/* CLUSTER SLOTS: [start, end, [host, port, id, ...] (the master), replicas...]. */
static void
parse_slots (const redisReply *reply, RlNode *asked, GArray *ranges)
{
  for (size_t i = 0; i < reply->elements; i++)
    {
      const redisReply *r = reply->element[i];
      const redisReply *master;
      if (r->type != REDIS_REPLY_ARRAY || r->elements < 3
          || r->element[0]->type != REDIS_REPLY_INTEGER
          || r->element[1]->type != REDIS_REPLY_INTEGER)
        continue;
      master = r->element[2];
      if (master->type != REDIS_REPLY_ARRAY || master->elements < 2 || !is_string (master->element[0])
          || master->element[1]->type != REDIS_REPLY_INTEGER)
        continue;
      add_range (ranges, r->element[0]->integer, r->element[1]->integer,
                 announced_host (master->element[0]->str, asked), master->element[1]->integer);
    }
}

/* Reads the slot map from @node into @ranges. */
static gboolean
fetch_map (RlCluster *self, RlNode *node, GArray *ranges, GError **error)
{
  const char *shards[] = { "CLUSTER", "SHARDS" };
  const char *slots[] = { "CLUSTER", "SLOTS" };
  gboolean reused, by_slots = FALSE;
  RlConn *conn = rl_pool_get (node->pool, RL_ATOMIC_GET (self->parent.ctx->connect_timeout_ms),
                              &reused, error);
  redisReply *reply;

  if (conn == NULL)
    return FALSE;
  reply = rl_conn_roundtrip (conn, 2, shards);
  if (reply != NULL && reply->type == REDIS_REPLY_ERROR
      && strstr (reply->str, "cluster support disabled") == NULL)
    {
      /* Before Redis 7: no SHARDS. */
      freeReplyObject (reply);
      reply = rl_conn_roundtrip (conn, 2, slots);
      by_slots = TRUE;
    }
  if (reply == NULL)
    {
      g_autofree char *what = g_strdup_printf ("Reading the Redis Cluster slot map from %s",
                                               node->name);
      rl_set_error_from_conn (error, conn, what);
      rl_pool_put (node->pool, conn);
      return FALSE;
    }
  rl_pool_put (node->pool, conn);
  if (reply->type == REDIS_REPLY_ERROR)
    {
      gboolean not_cluster = strstr (reply->str, "cluster support disabled") != NULL;
      g_set_error (error, REDIS_LOCK_ERROR,
                   not_cluster ? REDIS_LOCK_ERROR_INVALID : REDIS_LOCK_ERROR_REDIS,
                   not_cluster ? "%s is not a Redis Cluster node (it answered “%s”): use a "
                                 "redis:// URL for a single server"
                               : "%s refused to tell the Redis Cluster slot map: %s",
                   node->name, reply->str);
      freeReplyObject (reply);
      return FALSE;
    }
  if (reply->type == REDIS_REPLY_ARRAY)
    {
      if (by_slots)
        parse_slots (reply, node, ranges);
      else
        parse_shards (reply, node, ranges);
    }
  freeReplyObject (reply);
  if (ranges->len == 0)
    {
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION,
                   "%s knows no owner of any Redis Cluster slot (the cluster is not set up)",
                   node->name);
      return FALSE;
    }
  return TRUE;
}

/* Replaces the map with @ranges; reports a slot that changed owner (a failover, a
 * migration finished without our having seen its MOVED) to the store, which then
 * checks every held lease. */
static void
apply_map (RlCluster *self, GArray *ranges)
{
  g_autofree RlNode **fresh = g_new0 (RlNode *, RL_CLUSTER_SLOTS);
  gboolean moved = FALSE;

  rl_mutex_lock (&self->mutex);
  for (guint i = 0; i < ranges->len; i++)
    {
      Range *range = &g_array_index (ranges, Range, i);
      RlNode *node = node_at_locked (self, range->host, range->port);
      for (guint s = range->start; s <= range->end; s++)
        fresh[s] = node;
    }
  for (guint s = 0; s < RL_CLUSTER_SLOTS && !moved; s++)
    moved = self->slots[s] != NULL && self->slots[s] != fresh[s];
  memcpy (self->slots, fresh, sizeof self->slots);
  if (moved)
    self->watch_until = 0;
  rl_mutex_unlock (&self->mutex);
  if (moved && self->parent.changed != NULL)
    {
      rl_debug ("cluster: the slot map changed owners; checking held leases");
      self->parent.changed (self->parent.changed_data, FALSE);
    }
}

/* Reads the map from the first node that tells it: the masters of the current map
 * first, then every other node seen, nodes that just failed last. */
static gboolean
refresh (RlCluster *self, GError **error)
{
  g_autoptr (GPtrArray) candidates = NULL;
  g_autoptr (GError) invalid = NULL;
  g_autoptr (GError) first_error = NULL;
  gint64 now = g_get_monotonic_time ();

  rl_mutex_lock (&self->mutex);
  candidates = masters_locked (self);
  for (guint i = 0; i < self->nodes->len; i++)
    if (!g_ptr_array_find (candidates, g_ptr_array_index (self->nodes, i), NULL))
      g_ptr_array_add (candidates, rl_node_ref (g_ptr_array_index (self->nodes, i)));
  rl_mutex_unlock (&self->mutex);

  for (int pass = 0; pass < 2; pass++)
    for (guint i = 0; i < candidates->len; i++)
      {
        RlNode *node = g_ptr_array_index (candidates, i);
        g_autoptr (GArray) ranges = NULL;
        g_autoptr (GError) local_error = NULL;

        if (failed_recently (node, now) != (pass == 1))
          continue;
        ranges = g_array_new (FALSE, FALSE, sizeof (Range));
        g_array_set_clear_func (ranges, range_clear);
        if (fetch_map (self, node, ranges, &local_error))
          {
            apply_map (self, ranges);
            return TRUE;
          }
        rl_debug ("cluster: %s", local_error->message);
        if (local_error->code != REDIS_LOCK_ERROR_INVALID)
          RL_ATOMIC_SET (node->failed_at, g_get_monotonic_time ());
        if (local_error->code == REDIS_LOCK_ERROR_INVALID && invalid == NULL)
          invalid = g_steal_pointer (&local_error);
        else if (first_error == NULL)
          first_error = g_steal_pointer (&local_error);
      }
  /* A seed that is no cluster node is the likelier mistake than a network error. */
  if (invalid != NULL)
    g_propagate_error (error, g_steal_pointer (&invalid));
  else if (first_error != NULL)
    g_propagate_prefixed_error (error, g_steal_pointer (&first_error),
                                "No node of the Redis Cluster answered: ");
  else
    g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION,
                 "No node of the Redis Cluster is known");
  return FALSE;
}

static void
request_refresh (RlCluster *self)
{
  rl_mutex_raise (&self->mutex, &self->cond, &self->refresh_wanted);
}

/* When the next unasked refresh is due. self->mutex held. */
static gint64
next_periodic_locked (RlCluster *self, gint64 now)
{
  gint64 period;

  rl_mutex_assert_held (&self->mutex);
  period = now < self->watch_until ? RL_CLUSTER_WATCH_MS : RL_CLUSTER_PERIODIC_MS;
  return self->refreshed_at + period * 1000;
}

static void *
refresh_thread (void *data)
{
  RlCluster *self = data;

  rl_thread_set_name ("redislock-slots");
  rl_mutex_lock (&self->mutex);
  while (!self->stop)
    {
      gint64 earliest = self->refreshed_at + RL_CLUSTER_REFRESH_MIN_MS * 1000;
      g_autoptr (GError) error = NULL;

      if (!self->refresh_wanted)
        {
          gint64 due = next_periodic_locked (self, g_get_monotonic_time ());
          if (g_get_monotonic_time () < due)
            {
              rl_cond_wait_until (&self->cond, &self->mutex, due);
              continue;
            }
          self->refresh_wanted = TRUE;
        }
      if (g_get_monotonic_time () < earliest)
        {
          rl_cond_wait_until (&self->cond, &self->mutex, earliest);
          continue;
        }
      self->refresh_wanted = FALSE;
      rl_mutex_unlock (&self->mutex);
      if (!refresh (self, &error))
        rl_debug ("cluster: refreshing the slot map: %s", error->message);
      rl_mutex_lock (&self->mutex);
      self->refreshed_at = g_get_monotonic_time ();
      self->refreshes++;
      rl_cond_broadcast (&self->cond);
    }
  rl_mutex_unlock (&self->mutex);
  return NULL;
}

/* The table ------------------------------------------------------------------------------ */

static RlNode *
cluster_route (RlTopology *topology, const char *key, GError **error)
{
  RlCluster *self = (RlCluster *) topology;
  RlNode *node = NULL;
  guint slot = key != NULL ? rl_key_slot (key) : 0;

  rl_mutex_lock (&self->mutex);
  if (key != NULL)
    node = self->slots[slot];
  else
    for (guint s = 0; s < RL_CLUSTER_SLOTS && node == NULL; s++)
      node = self->slots[s];
  if (node != NULL)
    rl_node_ref (node);
  rl_mutex_unlock (&self->mutex);
  if (node == NULL)
    {
      request_refresh (self);
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION,
                   "No master of the Redis Cluster serves slot %u", slot);
    }
  return node;
}

static GPtrArray *
cluster_masters (RlTopology *topology, GError **error)
{
  RlCluster *self = (RlCluster *) topology;
  GPtrArray *masters;

  rl_mutex_lock (&self->mutex);
  masters = masters_locked (self);
  rl_mutex_unlock (&self->mutex);
  if (masters->len == 0)
    {
      g_ptr_array_unref (masters);
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION,
                   "No master of the Redis Cluster is known");
      return NULL;
    }
  return masters;
}

/* Parses "MOVED 3999 127.0.0.1:6381" (or ASK): the slot and the address; an empty host
 * means the host of the node that answered. */
static gboolean
parse_redirect (const char *text, RlNode *from, guint *slot, char **host, int *port)
{
  char *end;
  const char *addr, *colon;
  guint64 s, p;

  text = strchr (text, ' ');
  if (text == NULL)
    return FALSE;
  s = g_ascii_strtoull (text + 1, &end, 10);
  if (end == text + 1 || *end != ' ' || s >= RL_CLUSTER_SLOTS)
    return FALSE;
  addr = end + 1;
  colon = strrchr (addr, ':');
  if (colon == NULL)
    return FALSE;
  p = g_ascii_strtoull (colon + 1, &end, 10);
  if (end == colon + 1 || *end != '\0' || p == 0 || p > 65535)
    return FALSE;
  *slot = (guint) s;
  *port = (int) p;
  *host = colon == addr ? g_strdup (from->host) : g_strndup (addr, (gsize) (colon - addr));
  return *host != NULL;
}

static RlReplyKind
cluster_classify (RlTopology *topology, RlNode *node, const redisReply *reply, RlNode **target)
{
  RlCluster *self = (RlCluster *) topology;
  gboolean moved = g_str_has_prefix (reply->str, "MOVED ");
  g_autofree char *host = NULL;
  guint slot;
  int port;

  if (reply->type != REDIS_REPLY_ERROR)
    return RL_REPLY_FINAL;
  if (!moved && !g_str_has_prefix (reply->str, "ASK "))
    {
      RlReplyKind kind = rl_topology_classify_common (reply);
      if (kind == RL_REPLY_RETRY)
        request_refresh (self);
      return kind;
    }
  if (!parse_redirect (reply->str, node, &slot, &host, &port))
    return RL_REPLY_FINAL;
  rl_mutex_lock (&self->mutex);
  *target = rl_node_ref (node_at_locked (self, host, port));
  if (moved)
    self->slots[slot] = *target;
  rl_mutex_unlock (&self->mutex);
  if (moved)
    request_refresh (self);
  return moved ? RL_REPLY_MOVED : RL_REPLY_ASK;
}

static void
cluster_failed (RlTopology *topology, RlNode *node)
{
  RlCluster *self = (RlCluster *) topology;
  gint64 now = g_get_monotonic_time ();

  RL_ATOMIC_SET (node->failed_at, now);
  rl_mutex_lock (&self->mutex);
  self->watch_until = now + RL_CLUSTER_WATCH_US;
  rl_mutex_unlock (&self->mutex);
  request_refresh (self);
}

/* @node failed a command for @key: waits until @deadline_us for a refreshed map that
 * routes @key to another node, and returns that node (with a reference); NULL when
 * none came in time (the topology was stopped, or the cluster has not failed over
 * yet). */
static RlNode *
cluster_reroute (RlTopology *topology, RlNode *node, const char *key, gint64 deadline_us)
{
  RlCluster *self = (RlCluster *) topology;
  guint slot = key != NULL ? rl_key_slot (key) : 0;
  RlNode *next = NULL;

  rl_mutex_lock (&self->mutex);
  while (!self->stop && self->started && g_get_monotonic_time () < deadline_us)
    {
      guint64 seen = self->refreshes;

      self->refresh_wanted = TRUE;
      rl_cond_broadcast (&self->cond);
      while (!self->stop && self->refreshes == seen && g_get_monotonic_time () < deadline_us)
        rl_cond_wait_until (&self->cond, &self->mutex, deadline_us);
      if (self->refreshes == seen)
        break;
      next = key != NULL ? self->slots[slot] : NULL;
      if (key == NULL)
        for (guint s = 0; s < RL_CLUSTER_SLOTS && next == NULL; s++)
          if (self->slots[s] != node)
            next = self->slots[s];
      if (next != NULL && next != node)
        {
          rl_node_ref (next);
          break;
        }
      next = NULL;
    }
  rl_mutex_unlock (&self->mutex);
  return next;
}

/* Any master serves the subscription (the cluster broadcasts every PUBLISH); after
 * one failed, the next that did not fail lately. */
static RlNode *
cluster_subscriber (RlTopology *topology, GError **error)
{
  RlCluster *self = (RlCluster *) topology;
  gint64 now = g_get_monotonic_time ();
  RlNode *node = NULL;
  GPtrArray *masters;

  rl_mutex_lock (&self->mutex);
  masters = masters_locked (self);
  for (guint i = 0; i < masters->len && node == NULL; i++)
    {
      RlNode *candidate = g_ptr_array_index (masters, (self->subscriber_turn + i) % masters->len);
      if (!failed_recently (candidate, now))
        node = candidate;
    }
  if (node == NULL && masters->len > 0)
    node = g_ptr_array_index (masters, self->subscriber_turn % masters->len);
  if (node != NULL)
    {
      guint index;
      g_ptr_array_find (masters, node, &index);
      self->subscriber_turn = index;
      rl_node_ref (node);
    }
  rl_mutex_unlock (&self->mutex);
  g_ptr_array_unref (masters);
  if (node == NULL)
    g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION,
                 "No master of the Redis Cluster is known");
  return node;
}

static void
cluster_close (RlTopology *topology)
{
  RlCluster *self = (RlCluster *) topology;
  gboolean join;

  rl_mutex_lock (&self->mutex);
  self->stop = TRUE;
  join = self->started;
  self->started = FALSE;
  rl_cond_broadcast (&self->cond);
  rl_mutex_unlock (&self->mutex);
  if (join)
    pthread_join (self->thread, NULL);
}

static void
cluster_free (RlTopology *topology)
{
  RlCluster *self = (RlCluster *) topology;

  g_ptr_array_unref (self->nodes);
  rl_conn_config_clear (&self->node_config);
  rl_cond_clear (&self->cond);
  rl_mutex_clear (&self->mutex);
  g_free (self);
}

RL_DEFINE_TOPOLOGY_VTABLE (cluster, .reroute = cluster_reroute);

RlTopology *
rl_cluster_open (const RlUrl *url, RlStoreContext *ctx, RlTopologyChangedFunc changed,
                 gpointer changed_data, GError **error)
{
  RlCluster *self = g_new0 (RlCluster, 1);

  rl_topology_init (&self->parent, &cluster_vtable, ctx, FALSE);
  rl_conn_config_copy (&url->node, &self->node_config);
  rl_mutex_init (&self->mutex);
  rl_cond_init (&self->cond);
  self->nodes = g_ptr_array_new_with_free_func ((GDestroyNotify) rl_node_unref);
  rl_mutex_lock (&self->mutex);
  for (guint i = 0; i < url->hosts->len; i++)
    {
      const RlConnConfig *seed = &g_array_index (url->hosts, RlConnConfig, i);
      node_at_locked (self, seed->host, seed->port);
    }
  rl_mutex_unlock (&self->mutex);

  if (!refresh (self, error))
    {
      cluster_free (&self->parent);
      return NULL;
    }
  /* The first map is not a change; later ones are reported. */
  self->parent.changed = changed;
  self->parent.changed_data = changed_data;
  self->refreshed_at = g_get_monotonic_time ();
  if (pthread_create (&self->thread, NULL, refresh_thread, self) == 0)
    self->started = TRUE;
  else
    g_warning ("Cannot start the Redis Cluster slot-map thread; the map is read once");
  return &self->parent;
}
