/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* notify-shard.c: sharded unlock notifications on a Redis Cluster.
 *
 * A classic PUBLISH is forwarded over the cluster bus to every node; a sharded
 * SPUBLISH (Redis 7) reaches only the nodes of the shard that owns the channel's
 * slot. The release script of a Cluster registry SPUBLISHes the key on its shard
 * channel (rl_cluster_shard_channel(): formed to lie in the key's slot), and this
 * subscriber hears it: one thread, one connection per master that owns a waited-for
 * key, one SSUBSCRIBE per waited-for key. notify.c keeps the classic pattern
 * subscription beside it (the guard, and the releases of Spring peers, which publish
 * classically only); it lives apart because its shape is different: many
 * connections, one subscription per key, each following its key's slot.
 *
 * A waiter asks for its key (rl_shard_notifier_watch()) before each attempt and may
 * count a failed attempt only once the key's subscription is confirmed, as with the
 * pattern. Its first request joins the key's waiters (a count per key), and it leaves
 * them when its acquisition ends, however it ends (rl_shard_notifier_unwatch(): taken,
 * not in time, failed, cancelled, closed); the key whose last waiter left is
 * unsubscribed (SUNSUBSCRIBE) at once, and a master left without keys loses its
 * connection. A key with waiters stays subscribed however long they sleep. A key asked
 * for without joining (a request that counts no waiter) is kept until nobody asked
 * for it in RL_SHARD_LINGER_US, then unsubscribed with its waiters, if any sleep,
 * woken (released with the key) to try again and ask anew: the safety net for such
 * requests. Only this thread removes keys, so its pointers into the table stay valid
 * between its locks.
 *
 * A subscription ends without our asking when its key's slot changes owner: the old
 * master sends an unsolicited `sunsubscribe` when it gives a slot away (a migration, a
 * failover it takes part in), and a connection breaks when its master dies. Either
 * way the key's waiters are woken (they re-check: a release made while nobody
 * listened is not missed) and the key is subscribed again on the master the slot map
 * names now. That map may be stale: an SSUBSCRIBE on a master that does not serve
 * the slot is answered `MOVED`, which the topology reads as for any command (it
 * updates its map), and the key is sent to the new owner. A topology change reported
 * by the Cluster (rl_shard_notifier_restart()) also moves every key whose slot
 * another master serves now, so a failover whose old master is only unreachable is
 * followed before PING notices.
 *
 * A cluster that refuses shard channels (Redis before 7: unknown command; a user
 * without the channel permission) gets one warning; its waiters are then told that
 * sharded notifications are down (they fall back to what the classic subscription
 * hears, or to polling), and the thread asks again at the longest backoff.
 *
 * Why the pattern's guard (notify.c) watches one node of a Cluster and no more: each
 * master that owns a waited-for key has its own watch here, its connection, which
 * PINGs when silent and, when it breaks (a write fails, a PING goes unanswered, the
 * master closes it or restarts), wakes the waiters of its keys to re-check and
 * resubscribes them where the slot map says; a waiter counts a failed attempt only
 * once its key's subscription is confirmed again. So the sharded path of every
 * waited-for key is watched on its own master. The classic path needs one node: the
 * cluster bus forwards every PUBLISH to every node, so any live master hears all
 * classic releases, and a break of that one connection is reported as any break and
 * moves it to another master. What the guard adds besides (a restart that may have
 * taken held leases with it, reported as a reset so that every lease is checked at
 * once) is on a Cluster chiefly the topology's: the slot map is read every second,
 * and a slot that changed owner (a failover) has every held lease checked at once. A
 * master other than the guard's that restarts empty without being failed over is
 * found by the watchdog's next renewal of the leases it held.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>
#include <glib-unix.h>

#include "debug.h"
#include "connection.h"
#include "sync.h"
#include "notify-shard.h"
#include "wake-pipe.h"

#define RL_SHARD_LINGER_US (10 * G_USEC_PER_SEC)
#define RL_SHARD_BACKOFF_MIN_US (50 * 1000)
#define RL_SHARD_BACKOFF_MAX_US (2 * G_USEC_PER_SEC)
#define RL_SHARD_REFUSED_US (5 * G_USEC_PER_SEC)
#define RL_SHARD_PING_US (5 * G_USEC_PER_SEC)
#define RL_SHARD_TICK_MS 1000

/* One waited-for key. The thread writes node, confirmed, retry_at and backoff; a
 * waiter writes last_watch, waiters and drop; all under the mutex. */
typedef struct
{
  char *key;
  char *channel;
  RlNode *node;      /* the master its SSUBSCRIBE went to; NULL: to be sent */
  gboolean confirmed;
  guint waiters;     /* joined and not left (rl_shard_notifier_watch() with join) */
  gboolean drop;     /* its last waiter left: unsubscribed at once */
  gint64 last_watch; /* monotonic µs of the last waiter's request */
  gint64 retry_at;   /* while node is NULL: not before (monotonic µs) */
  gint64 backoff;    /* µs, after a failure */
} ShardKey;

/* One connection, to one master; the thread's own. */
typedef struct
{
  RlNode *node;
  RlConn *conn;
  GQueue pending; /* what awaits its answer, in order: "s" and the channel of an
                     SSUBSCRIBE, "u" and the channel of a SUNSUBSCRIBE (owned) */
  gint64 last_traffic;
  gboolean ping_out;
  gboolean dead; /* a write failed, or PING went unanswered */
} ShardConn;

struct _RlShardNotifier
{
  RlStore *store;
  RlTopology *topology;
  const char *channel_prefix; /* the store's (rl_shard_notifier_new()) */
  GPtrArray *conns; /* of ShardConn: the thread's own */

  RlMutex mutex;    /* guards everything below */
  RlCond cond;      /* a key confirmed, failures or refused changed */
  GHashTable *keys; /* key -> ShardKey (owned); only the thread removes entries */
  GHashTable *channels; /* channel -> ShardKey (the same, not owned) */
  RlWakeThread wt; /* the thread, its pipe, started and joined */
  gboolean stop;
  gboolean recheck;  /* the topology changed: compare every key's node with its route */
  gboolean refused;  /* the cluster refused an SSUBSCRIBE (not a redirection) */
  gboolean warned;
  gint64 refused_until; /* monotonic µs: the next SSUBSCRIBE after a refusal */
  guint64 failures;  /* connections that failed or broke */
};

static void
shard_key_free (gpointer data)
{
  ShardKey *k = data;

  g_clear_pointer (&k->node, rl_node_unref);
  g_free (k->key);
  g_free (k->channel);
  g_free (k);
}

static void
shard_conn_free (ShardConn *c)
{
  rl_conn_free (c->conn);
  rl_node_unref (c->node);
  g_queue_clear_full (&c->pending, g_free);
  g_free (c);
}

static void
wake_thread_locked (RlShardNotifier *self)
{
  rl_mutex_assert_held (&self->mutex);
  if (self->wt.started && !self->stop)
    rl_wake_pipe_write (self->wt.wake, 'w');
}

/* Wakes the waiters of each key of @woken (and frees the array). */
static void
wake_waiters (RlShardNotifier *self, GPtrArray *woken)
{
  for (guint i = 0; i < woken->len; i++)
    self->store->released (g_ptr_array_index (woken, i), FALSE, self->store->released_data);
  g_ptr_array_unref (woken);
}

/* @k's subscription ended: to be sent again (after @delay µs), its waiters to be woken
 * (its key added to @woken). self->mutex held. */
static void
unassign_locked (RlShardNotifier *self, ShardKey *k, gint64 delay, GPtrArray *woken)
{
  rl_mutex_assert_held (&self->mutex);
  g_clear_pointer (&k->node, rl_node_unref);
  if (k->confirmed && woken != NULL)
    g_ptr_array_add (woken, g_strdup (k->key));
  k->confirmed = FALSE;
  k->retry_at = g_get_monotonic_time () + delay;
}

/* Drops @c (it broke): its keys are sent again, their waiters woken. */
static void
conn_broke (RlShardNotifier *self, ShardConn *c)
{
  GPtrArray *woken = g_ptr_array_new_with_free_func (g_free);
  GHashTableIter iter;
  gpointer value;

  rl_debug ("shard subscription on %s broke", c->node->name);
  self->topology->vt->failed (self->topology, c->node);
  rl_mutex_lock (&self->mutex);
  g_hash_table_iter_init (&iter, self->keys);
  while (g_hash_table_iter_next (&iter, NULL, &value))
    {
      ShardKey *k = value;
      if (k->node == c->node)
        {
          k->backoff = MIN (MAX (k->backoff * 2, RL_SHARD_BACKOFF_MIN_US), RL_SHARD_BACKOFF_MAX_US);
          unassign_locked (self, k, k->backoff, woken);
        }
    }
  self->failures++;
  rl_cond_broadcast (&self->cond);
  rl_mutex_unlock (&self->mutex);
  g_ptr_array_remove_fast (self->conns, c);
  shard_conn_free (c);
  wake_waiters (self, woken);
}

static ShardConn *
conn_for (RlShardNotifier *self, RlNode *node)
{
  g_autoptr (GError) error = NULL;
  ShardConn *c;
  RlConn *conn;

  for (guint i = 0; i < self->conns->len; i++)
    {
      c = g_ptr_array_index (self->conns, i);
      if (c->node == node)
        return c;
    }
  conn = rl_pool_connect (node->pool, &error);
  if (conn == NULL)
    {
      rl_debug ("shard subscription: %s", error->message);
      self->topology->vt->failed (self->topology, node);
      return NULL;
    }
  c = g_new0 (ShardConn, 1);
  c->node = rl_node_ref (node);
  c->conn = conn;
  c->last_traffic = g_get_monotonic_time ();
  g_queue_init (&c->pending);
  g_ptr_array_add (self->conns, c);
  return c;
}

/* Sends the SSUBSCRIBE of every key that needs one and is due, on the master its
 * slot's route names. */
static void
send_subscriptions (RlShardNotifier *self)
{
  g_autoptr (GPtrArray) due = g_ptr_array_new ();
  gint64 now = g_get_monotonic_time ();
  GHashTableIter iter;
  gpointer value;

  rl_mutex_lock (&self->mutex);
  if (!self->refused || now >= self->refused_until)
    {
      g_hash_table_iter_init (&iter, self->keys);
      while (g_hash_table_iter_next (&iter, NULL, &value))
        {
          ShardKey *k = value;
          if (k->node == NULL && k->retry_at <= now)
            g_ptr_array_add (due, k);
        }
    }
  rl_mutex_unlock (&self->mutex);
  for (guint i = 0; i < due->len; i++)
    {
      ShardKey *k = g_ptr_array_index (due, i);
      g_autoptr (RlNode) node = self->topology->vt->route (self->topology, k->key, NULL);
      ShardConn *c = node != NULL ? conn_for (self, node) : NULL;
      const char *argv[2] = { "SSUBSCRIBE", k->channel };

      rl_mutex_lock (&self->mutex);
      if (c == NULL)
        {
          k->backoff = MIN (MAX (k->backoff * 2, RL_SHARD_BACKOFF_MIN_US), RL_SHARD_BACKOFF_MAX_US);
          k->retry_at = g_get_monotonic_time () + k->backoff;
          self->failures++;
          rl_cond_broadcast (&self->cond);
        }
      else
        k->node = rl_node_ref (node);
      rl_mutex_unlock (&self->mutex);
      if (c != NULL)
        {
          rl_conn_append (c->conn, 2, argv);
          g_queue_push_tail (&c->pending, g_strconcat ("s", k->channel, NULL));
        }
    }
}

/* Unsubscribes the keys whose last waiter left, and those without waiters nobody asked
 * for lately (waking whoever may still sleep on them), and with a recheck asked, moves
 * the keys whose slot another master serves now (waking their waiters). */
static void
drop_and_move (RlShardNotifier *self)
{
  GPtrArray *woken = g_ptr_array_new_with_free_func (g_free);
  g_autoptr (GPtrArray) moved = g_ptr_array_new ();
  gint64 now = g_get_monotonic_time ();
  gboolean recheck;
  GHashTableIter iter;
  gpointer value;

  rl_mutex_lock (&self->mutex);
  recheck = self->recheck;
  self->recheck = FALSE;
  g_hash_table_iter_init (&iter, self->keys);
  while (g_hash_table_iter_next (&iter, NULL, &value))
    {
      ShardKey *k = value;
      if (k->waiters == 0 && (k->drop || now - k->last_watch > RL_SHARD_LINGER_US))
        {
          if (k->node != NULL)
            for (guint i = 0; i < self->conns->len; i++)
              {
                ShardConn *c = g_ptr_array_index (self->conns, i);
                const char *argv[2] = { "SUNSUBSCRIBE", k->channel };
                if (c->node == k->node)
                  {
                    rl_conn_append (c->conn, 2, argv);
                    g_queue_push_tail (&c->pending, g_strconcat ("u", k->channel, NULL));
                  }
              }
          if (!k->drop)
            g_ptr_array_add (woken, g_strdup (k->key));
          g_hash_table_remove (self->channels, k->channel);
          g_hash_table_iter_remove (&iter);
        }
      else if (recheck && k->node != NULL)
        g_ptr_array_add (moved, k);
    }
  rl_mutex_unlock (&self->mutex);
  for (guint i = 0; i < moved->len; i++)
    {
      ShardKey *k = g_ptr_array_index (moved, i);
      g_autoptr (RlNode) node = self->topology->vt->route (self->topology, k->key, NULL);

      rl_mutex_lock (&self->mutex);
      if (node != NULL && node != k->node)
        unassign_locked (self, k, 0, woken);
      rl_mutex_unlock (&self->mutex);
    }
  /* A connection left without keys is closed (the master owns no waited-for key). */
  for (guint i = self->conns->len; i > 0; i--)
    {
      ShardConn *c = g_ptr_array_index (self->conns, i - 1);
      gboolean used = FALSE;

      rl_mutex_lock (&self->mutex);
      g_hash_table_iter_init (&iter, self->keys);
      while (!used && g_hash_table_iter_next (&iter, NULL, &value))
        used = ((ShardKey *) value)->node == c->node;
      rl_mutex_unlock (&self->mutex);
      if (!used && g_queue_is_empty (&c->pending))
        {
          g_ptr_array_remove_index_fast (self->conns, i - 1);
          shard_conn_free (c);
        }
    }
  wake_waiters (self, woken);
}

/* The answer to the SSUBSCRIBE of @channel was the error @reply. */
static void
subscribe_failed (RlShardNotifier *self, ShardConn *c, const char *channel, redisReply *reply)
{
  g_autoptr (RlNode) target = NULL;
  RlReplyKind kind = self->topology->vt->classify (self->topology, c->node, reply, &target);
  gboolean warn = FALSE;
  ShardKey *k;

  rl_mutex_lock (&self->mutex);
  k = g_hash_table_lookup (self->channels, channel);
  if (kind == RL_REPLY_FINAL)
    {
      /* Refused: the waiters fall back (watch returns FALSE) until it is accepted. */
      self->refused = TRUE;
      self->refused_until = g_get_monotonic_time () + RL_SHARD_REFUSED_US;
      warn = !self->warned;
      self->warned = TRUE;
      rl_cond_broadcast (&self->cond);
    }
  /* MOVED (the map is updated: the route names the new owner) or a retry later. */
  if (k != NULL && k->node == c->node && !k->confirmed)
    unassign_locked (self, k, kind == RL_REPLY_MOVED ? 0 : RL_SHARD_BACKOFF_MIN_US, NULL);
  rl_mutex_unlock (&self->mutex);
  if (warn)
    g_warning ("Redis refused the subscription to the shard channel “%s” (%s): sharded unlock "
               "notifications need Redis 7 and permission on the channels “%s*” (ACL `&%s*`). "
               "Waiters rely on classic notifications, or poll",
               channel, reply->str, self->channel_prefix, self->channel_prefix);
}

/* Handles one reply of @c; FALSE when the connection must be dropped. */
static gboolean
handle_reply (RlShardNotifier *self, ShardConn *c, redisReply *reply)
{
  const char *kind, *channel;
  ShardKey *k;

  if (reply->type == REDIS_REPLY_ERROR)
    {
      g_autofree char *pending = g_queue_pop_head (&c->pending);
      if (pending == NULL)
        return FALSE;
      /* A SUNSUBSCRIBE of a slot the master gave away is answered MOVED: its
       * subscription is gone either way. */
      if (pending[0] == 'u')
        rl_debug ("shard unsubscription from %s: %s", pending + 1, reply->str);
      else
        subscribe_failed (self, c, pending + 1, reply);
      return TRUE;
    }
  if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 2
      || reply->element[0]->type != REDIS_REPLY_STRING)
    return TRUE;
  kind = reply->element[0]->str;
  if (g_ascii_strcasecmp (kind, "pong") == 0)
    {
      c->ping_out = FALSE;
      return TRUE;
    }
  if (reply->element[1]->type != REDIS_REPLY_STRING)
    return TRUE;
  channel = reply->element[1]->str;
  if (g_ascii_strcasecmp (kind, "smessage") == 0 && reply->elements == 3
      && reply->element[2]->type == REDIS_REPLY_STRING)
    {
      RL_ATOMIC_ADD (self->store->ctx->stats->notifications, 1);
      self->store->released (reply->element[2]->str, FALSE, self->store->released_data);
    }
  else if (g_ascii_strcasecmp (kind, "ssubscribe") == 0)
    {
      g_free (g_queue_pop_head (&c->pending));
      rl_mutex_lock (&self->mutex);
      k = g_hash_table_lookup (self->channels, channel);
      if (k != NULL && k->node == c->node)
        {
          k->confirmed = TRUE;
          k->backoff = 0;
        }
      self->refused = FALSE;
      rl_cond_broadcast (&self->cond);
      rl_mutex_unlock (&self->mutex);
    }
  else if (g_ascii_strcasecmp (kind, "sunsubscribe") == 0)
    {
      /* Ours (a key dropped) answers the SUNSUBSCRIBE that waits first; any other is the
       * master giving the slot away. */
      const char *first = g_queue_peek_head (&c->pending);
      GPtrArray *woken;

      if (first != NULL && first[0] == 'u' && strcmp (first + 1, channel) == 0)
        {
          g_free (g_queue_pop_head (&c->pending));
          return TRUE;
        }
      woken = g_ptr_array_new_with_free_func (g_free);

      rl_mutex_lock (&self->mutex);
      k = g_hash_table_lookup (self->channels, channel);
      if (k != NULL && k->node == c->node && k->confirmed)
        {
          rl_debug ("shard subscription to %s ended by %s (its slot moved)", channel,
                   c->node->name);
          unassign_locked (self, k, 0, woken);
        }
      rl_mutex_unlock (&self->mutex);
      wake_waiters (self, woken);
    }
  return TRUE;
}

/* Reads and handles what @c has; FALSE when it broke. */
static gboolean
conn_ready (RlShardNotifier *self, ShardConn *c, short revents)
{
  redisReply *reply;

  if ((revents & ~POLLOUT) != 0 || rl_conn_has_pending (c->conn))
    {
      if (!rl_conn_read_some (c->conn))
        return FALSE;
      c->last_traffic = g_get_monotonic_time ();
    }
  for (;;)
    {
      gboolean ok;

      if (!rl_conn_next_reply (c->conn, &reply))
        return FALSE;
      if (reply == NULL)
        return TRUE;
      ok = handle_reply (self, c, reply);
      freeReplyObject (reply);
      if (!ok)
        return FALSE;
    }
}

static gboolean
should_stop (RlShardNotifier *self)
{
  gboolean stop;

  rl_mutex_read (&self->mutex, &self->stop, &stop, sizeof stop);
  return stop;
}

/* How long the next poll may sleep: until the next key is due, a tick at most. */
static int
poll_timeout_ms (RlShardNotifier *self)
{
  gint64 now = g_get_monotonic_time ();
  gint64 next = now + RL_SHARD_TICK_MS * 1000;
  GHashTableIter iter;
  gpointer value;

  rl_mutex_lock (&self->mutex);
  g_hash_table_iter_init (&iter, self->keys);
  while (g_hash_table_iter_next (&iter, NULL, &value))
    {
      ShardKey *k = value;
      if (k->node == NULL)
        next = MIN (next, MAX (k->retry_at, self->refused ? self->refused_until : 0));
    }
  rl_mutex_unlock (&self->mutex);
  return (int) CLAMP ((next - now + 999) / 1000, 0, RL_SHARD_TICK_MS);
}

static gpointer
shard_thread (gpointer data)
{
  RlShardNotifier *self = data;

  rl_thread_set_name ("redislock-ssub");
  while (!should_stop (self))
    {
      guint n;
      struct pollfd *pfd;

      drop_and_move (self);
      send_subscriptions (self);
      n = self->conns->len;
      pfd = g_newa (struct pollfd, n + 1);
      pfd[0] = (struct pollfd){ self->wt.wake[0], POLLIN, 0 };
      for (guint i = 0; i < n; i++)
        {
          ShardConn *c = g_ptr_array_index (self->conns, i);
          gint64 now = g_get_monotonic_time ();

          if (now - c->last_traffic > RL_SHARD_PING_US)
            {
              const char *ping[1] = { "PING" };
              /* No answer in a whole interval: the master is gone. */
              if (c->ping_out)
                c->dead = TRUE;
              else
                rl_conn_append (c->conn, 1, ping);
              c->ping_out = TRUE;
              c->last_traffic = now;
            }
          pfd[i + 1] = (struct pollfd){ c->conn->fd, POLLIN, 0 };
          if (!rl_conn_write_some (c->conn))
            c->dead = TRUE;
          else if (rl_conn_wants_write (c->conn))
            pfd[i + 1].events |= POLLOUT;
        }
      if (poll (pfd, n + 1, poll_timeout_ms (self)) < 0 && errno != EINTR)
        continue;
      rl_wake_pipe_drain (self->wt.wake);
      /* Backwards: a broken connection is removed from the array. */
      for (guint i = n; i > 0; i--)
        {
          ShardConn *c = g_ptr_array_index (self->conns, i - 1);
          if (c->dead || !conn_ready (self, c, pfd[i].revents))
            conn_broke (self, c);
        }
    }
  /* Stopped (the store closes): the connections close with the thread, not when the
   * store is freed, so that no subscription outlives close. */
  for (guint i = 0; i < self->conns->len; i++)
    shard_conn_free (g_ptr_array_index (self->conns, i));
  g_ptr_array_set_size (self->conns, 0);
  return NULL;
}

RlShardNotifier *
rl_shard_notifier_new (RlStore *store, RlTopology *topology, const char *channel_prefix)
{
  RlShardNotifier *self = g_new0 (RlShardNotifier, 1);

  self->store = store;
  self->topology = topology;
  self->channel_prefix = channel_prefix;
  self->conns = g_ptr_array_new ();
  self->keys = g_hash_table_new_full (g_str_hash, g_str_equal, NULL, shard_key_free);
  self->channels = g_hash_table_new (g_str_hash, g_str_equal);
  rl_wake_thread_init (&self->wt);
  rl_mutex_init (&self->mutex);
  rl_cond_init (&self->cond);
  return self;
}

/* Starts the thread on first use. self->mutex held. */
static void
start_locked (RlShardNotifier *self)
{
  rl_mutex_assert_held (&self->mutex);
  if (self->wt.started || self->stop)
    return;
  if (!rl_wake_thread_start (&self->wt, shard_thread, self))
    g_warning ("Cannot start the shard-notification thread; waiting by polling");
}

gboolean
rl_shard_notifier_watch (RlShardNotifier *self, const char *key, gboolean join,
                         gint64 timeout_ms, gboolean *refused)
{
  gint64 end = g_get_monotonic_time () + timeout_ms * 1000;
  gboolean confirmed = FALSE;
  guint64 failures;
  ShardKey *k;

  rl_mutex_lock (&self->mutex);
  start_locked (self);
  failures = self->failures;
  for (;;)
    {
      k = g_hash_table_lookup (self->keys, key);
      if (k == NULL)
        {
          k = g_new0 (ShardKey, 1);
          k->key = g_strdup (key);
          k->channel = rl_cluster_shard_channel (self->channel_prefix, key);
          g_hash_table_insert (self->keys, k->key, k);
          g_hash_table_insert (self->channels, k->channel, k);
          wake_thread_locked (self);
        }
      if (join)
        k->waiters++;
      join = FALSE;
      k->drop = FALSE;
      k->last_watch = g_get_monotonic_time ();
      confirmed = k->confirmed;
      if (confirmed || !self->wt.started || self->stop || self->refused || timeout_ms <= 0
          || self->failures != failures)
        break;
      if (!rl_cond_wait_until (&self->cond, &self->mutex, end))
        {
          k = g_hash_table_lookup (self->keys, key);
          confirmed = k != NULL && k->confirmed;
          break;
        }
    }
  *refused = !confirmed && self->refused;
  rl_mutex_unlock (&self->mutex);
  return confirmed;
}

void
rl_shard_notifier_unwatch (RlShardNotifier *self, const char *key)
{
  ShardKey *k;

  rl_mutex_lock (&self->mutex);
  k = g_hash_table_lookup (self->keys, key);
  if (k != NULL && k->waiters > 0 && --k->waiters == 0)
    {
      k->drop = TRUE;
      wake_thread_locked (self);
    }
  rl_mutex_unlock (&self->mutex);
}

void
rl_shard_notifier_restart (RlShardNotifier *self)
{
  rl_mutex_lock (&self->mutex);
  self->recheck = TRUE;
  wake_thread_locked (self);
  rl_mutex_unlock (&self->mutex);
}

void
rl_shard_notifier_stop (RlShardNotifier *self)
{
  rl_wake_thread_stop (&self->wt, &self->mutex, &self->cond, &self->stop);
}

void
rl_shard_notifier_free (RlShardNotifier *self)
{
  if (self == NULL)
    return;
  rl_shard_notifier_stop (self);
  rl_wake_pipe_close (self->wt.wake);
  g_ptr_array_unref (self->conns);
  g_hash_table_unref (self->channels);
  g_hash_table_unref (self->keys);
  rl_cond_clear (&self->cond);
  rl_mutex_clear (&self->mutex);
  g_free (self);
}
