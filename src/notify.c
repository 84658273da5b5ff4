/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* notify.c: unlock notifications for the Redis store, without missed wake-ups.
 *
 * One thread and one connection per registry hold a pattern subscription on
 * `registry_key-channel:*`; the release script publishes the lock key there in the
 * same atomic step as the delete. Each message is handed to the registry, which bumps
 * the notification sequence number of that one lock and wakes its waiter.
 *
 * A waiter may only count a failed attempt once the subscription is confirmed
 * (rl_notifier_watch() returns TRUE): a release published before that could not have
 * been seen. Whenever the subscription goes down or comes back, every lock is bumped
 * (released (NULL)): waiters re-check, fall back to SPIN timing while it is down, and
 * cannot sleep through a release published while nobody listened. A break, or a
 * connection up again after one, is also reported as a reset: the server may have
 * restarted empty, so the registry checks every lease it holds. The Redis store
 * starts the connection with its first lease (rl_notifier_guard()), not only with its
 * first waiter, so that a holder nobody waits for still hears of a restart at once;
 * until a waiter asks, the connection only guards (it subscribes to nothing, so it
 * is not woken by every release, its own included), and the first waiter's request
 * adds the subscription on the same connection.
 *
 * The guarding connection also subscribes to the registry's own grant channel,
 * `registry_key-grant:CLIENT_ID`, where a release that granted a lock to this
 * registry from the lock's wait queue (redis-queue.c) tells it alone; such a message
 * goes to the registry's granted callback, not to the waiters of the key.
 *
 * The topology names the node to subscribe on: the one server, the Sentinel
 * deployment's master, any master of a Cluster (a Cluster broadcasts every PUBLISH to
 * all its nodes). When the subscription breaks, the node is reported failed and the
 * next attempt asks the topology again, so it moves to another node. On a Cluster,
 * releases of this library are also published on each key's shard channel, which
 * notify-shard.c subscribes to per waited-for key; this pattern then hears Spring's
 * releases (classic only) and those published classically too.
 *
 * The thread polls the socket together with a wake-up pipe, so close() stops it at
 * once and restart() makes it resubscribe at once, and PINGs an otherwise silent
 * connection so a dead server is noticed. Reconnection backs off from 50 ms to 5 s
 * while the server cannot be reached (connecting or subscribing fails); a connection
 * the server set up resets it, so a subscription killed on a healthy server comes
 * back after 50 ms however often it was killed before.
 *
 * With the registry's key_tracking setting (off by default), the same connection also
 * hears of keys that change without a notification: a lock deleted by a client that
 * does not publish (Spring's registry in spin mode, an operator's DEL), one that
 * expires (a crashed holder's), one overwritten. Only what a waiter waits for is
 * tracked, so the cost is one small message per change of a waited-for key, nothing
 * for the keys nobody waits for (broadcast tracking would send every write of every
 * lock key to every process). Redis's client-side-caching tracking in default mode
 * does that: the server remembers, per client, the keys it read, and reports the next
 * change of each once. Here the clients that read are the store's data connections:
 * each turns tracking on with REDIRECT to this connection's id, OPTIN and NOLOOP
 * (redis-exchange.c), and sends CLIENT CACHING yes right before the acquire script of a
 * key found held, whose GET and PTTL are the waiter's read; nothing else they read is
 * tracked, and their own writes report nothing. This connection gets its id (CLIENT
 * ID), checks that the user may turn tracking on (CLIENT TRACKING on REDIRECT <own
 * id> OPTIN, which tracks nothing by itself) and subscribes to `__redis__:invalidate`,
 * the RESP2 form, where the server sends the reports as messages, all before the
 * PSUBSCRIBE: its id is handed out (rl_notifier_tracking_id()) only while the
 * subscription is confirmed, so a waiter's confirmed attempt cannot miss the change
 * that follows it, and a subscription that breaks (its id then reports to nobody)
 * wakes every waiter as any break does. The setting is read at each
 * (re)subscription, and a change of it resubscribes (rl_notifier_restart()).
 *
 * Each invalidated key is handed on as a possible release, except the one that
 * follows a release's notification for the same key in the same read: the release
 * script publishes and deletes in one atomic step, and the server sends the
 * invalidation (there is one only when a waiter had read the key) with the
 * notification, so it is the same news. Only in the same read: a later invalidation
 * of the key is a later change (a foreign client took the released key and deleted it
 * without a notification) and must wake its waiters. One that came in the same read
 * was sent before the notification was handed on, so the read it reports was made
 * before that hand-on, whose wake-up then covers it. An acquisition by another
 * client also invalidates: the waiter wakes, tries once (reading the key again, so
 * tracking it again) and sleeps. A server that refuses tracking (Redis before 6, a user without
 * the CLIENT command or the channel) gets one warning, and its waiters are woken by
 * notifications and their holder's TTL. On a Cluster the keys live on many masters
 * and one subscriber cannot hear all of them, so tracking is off there (the store
 * passes no track_prefix) and waiters rely on notifications and TTLs. The set-up
 * steps wait for their replies within the connection's command timeout, which bounds
 * how long a stop waits for a thread caught in them.
 *
 * The same connection also subscribes to `registry_key-channel`, the one channel that
 * Spring Integration releases before the per-key channels publish on (message: the
 * full key). Such a message wakes that lock's waiters; one that names no key of this
 * registry wakes every waiter, since it may stand for any of them. The SUBSCRIBE goes
 * just before the PSUBSCRIBE and its answer is read with the rest: a refusal (a user
 * whose channel permission is only `&registry_key-channel:*`) is logged at debug level
 * and costs nothing else, the older releases being missed as before. Whether this
 * channel is heard counts in rl_notifier_receivers(), which the release script uses to
 * tell its own subscriber from other listeners when it publishes there too (the
 * registry's legacy_spring_channel setting). A release of this library that publishes
 * on both channels reaches this connection twice, back to back: both are handed on
 * (the second is no different from a release by an older Spring process right after
 * the first, which must not be dropped), at worst costing the lock's waiter one more
 * attempt.
 *
 * A server that refuses the subscription (a Redis user without permission on the
 * channels, Redis 7's default for new ACL users) gets one warning naming the missing
 * permission; while it refuses, waiters fall back to SPIN timing at once instead of
 * waiting for a confirmation that cannot come, and the thread asks again at the
 * longest backoff in case the permission is granted.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>
#include <glib-unix.h>

#include "debug.h"
#include "store.h"
#include "sync.h"
#include "notify.h"
#include "wake-pipe.h"

#define RL_NOTIFY_BACKOFF_MIN_MS 50
#define RL_NOTIFY_BACKOFF_MAX_MS 5000
#define RL_NOTIFY_PING_MS 5000

struct _RlNotifier
{
  RlStore *store;
  RlTopology *topology;
  /* The names, the store's (rl_notifier_new()): */
  const char *pattern;
  const char *legacy_channel; /* `registry_key-channel`, older Spring releases' one channel */
  const char *key_prefix;     /* `registry_key:`: the keys a legacy message may name */
  const char *track_prefix;   /* NULL: no key tracking */
  const char *guard_channel;  /* where forced releases are told to holders (guarding
                                 connection) */
  char *grant_channel;        /* `registry_key-grant:CLIENT_ID`: grants from the wait
                                 queue to this registry (subscribed with guard_channel) */

  /* The thread's own: */
  gboolean tracking;     /* invalidations are heard on the current connection */
  gint64 track_id;       /* ... and reported to this client id, the connection's */
  gboolean track_warned; /* a refusal of tracking was reported */
  char *last_published;  /* the key of the message just handed on, when it was an
                            unlock notification */
  gboolean legacy_pending; /* the SUBSCRIBE to legacy_channel is not answered yet */
  gboolean legacy_on;      /* ... and it was accepted on the current connection */

  RlMutex mutex; /* guards everything below */
  RlCond cond;   /* subscribed or failures changed */
  RlWakeThread wt; /* the thread, its pipe, started and joined */
  gboolean stop;
  gboolean restart; /* resubscribe now, on the node the topology names */
  gboolean subscribed;     /* the pattern subscription is confirmed */
  gboolean legacy_subscribed; /* subscribed, with legacy_channel too */
  gint64 tracking_id; /* subscribed, hearing invalidations sent to this client id; 0: not */
  gboolean connected;      /* the connection is up and set up (the pattern confirmed,
                              when one is wanted) */
  gboolean was_up;         /* a connection was up once */
  gint guarding;           /* atomic, written under the mutex: connected, or never up
                              yet (rl_notifier_guard()'s answer) */
  gint running;            /* atomic: started (read without the mutex) */
  gboolean pattern_wanted; /* a waiter asked for notifications (rl_notifier_watch()):
                              until then the connection only guards (no pattern) */
  gboolean pattern_news;   /* pattern_wanted was set since the thread last looked */
  gboolean upgrading;      /* the connection was replaced to set key tracking up: its
                              successor coming up is no reset */
  gboolean refused; /* the server answered the PSUBSCRIBE with an error */
  gboolean warned;  /* the refusal was reported */
  guint64 failures; /* connection attempts that failed, and subscriptions that broke */
};

/* A failure, or a connection up again after one that was up, is a reset: the server
 * may have restarted, or the node behind the address changed. The first connection
 * is not (nothing was known before it), nor is the pattern subscription added to a
 * guarding connection when the first waiter asks for it. */
static void
set_state (RlNotifier *self, gboolean connected, gboolean subscribed, gboolean failed)
{
  gboolean changed, reset;

  rl_mutex_lock (&self->mutex);
  changed = self->subscribed != subscribed || self->connected != connected;
  /* A refusal is the server's answer, not a break: it says nothing of restarts. */
  reset = (failed && !self->refused)
          || (connected && !self->connected && self->was_up && !self->upgrading);
  if (connected && !self->connected)
    RL_ATOMIC_ADD (self->store->ctx->stats->subscriber_connections, 1);
  if (connected)
    self->upgrading = FALSE;
  self->subscribed = subscribed;
  self->connected = connected;
  self->legacy_subscribed = subscribed && self->legacy_on;
  self->tracking_id = subscribed && self->tracking ? self->track_id : 0;
  self->was_up = self->was_up || connected;
  /* Before its first connection there is no break to miss (a restart before it is
   * found by the next renewal); after, only while it is up. */
  g_atomic_int_set (&self->guarding, self->connected || !self->was_up);
  if (failed)
    self->failures++;
  rl_cond_broadcast (&self->cond);
  rl_mutex_unlock (&self->mutex);
  if (changed || failed)
    self->store->released (NULL, reset, self->store->released_data);
}

static gboolean
should_stop (RlNotifier *self)
{
  gboolean stop;

  rl_mutex_read (&self->mutex, &self->stop, &stop, sizeof stop);
  return stop;
}

/* Whether a restart was asked; clears the request and drains the wake-up pipe. */
static gboolean
take_restart (RlNotifier *self)
{
  gboolean restart;

  rl_mutex_lock (&self->mutex);
  restart = self->restart && !self->stop;
  if (restart)
    {
      self->restart = FALSE;
      rl_wake_pipe_drain (self->wt.wake);
    }
  rl_mutex_unlock (&self->mutex);
  return restart;
}

/* Whether notifications are wanted (a waiter asked); drains the wake-up pipe when that
 * is news. The pattern, once wanted, stays wanted. */
static gboolean
take_pattern_news (RlNotifier *self)
{
  gboolean wanted;

  rl_mutex_lock (&self->mutex);
  wanted = self->pattern_wanted;
  if (self->pattern_news)
    {
      self->pattern_news = FALSE;
      rl_wake_pipe_drain (self->wt.wake);
    }
  rl_mutex_unlock (&self->mutex);
  return wanted;
}

/* Sleeps @ms unless woken by stop. Returns FALSE when told to stop. */
static gboolean
backoff_sleep (RlNotifier *self, gint64 ms)
{
  struct pollfd pfd = { self->wt.wake[0], POLLIN, 0 };
  gint64 end = g_get_monotonic_time () + ms * 1000;

  for (;;)
    {
      gint64 left = (end - g_get_monotonic_time ()) / 1000;
      if (should_stop (self))
        return FALSE;
      if (left <= 0 || take_restart (self))
        return TRUE;
      poll (&pfd, 1, (int) left);
    }
}

/* Whether @reply is an error a server gives only for a while (a script running past
 * busy-reply-threshold, a dataset still loading): not a refusal, the connection is made
 * again. */
static gboolean
transient_error (const redisReply *reply)
{
  return reply->type == REDIS_REPLY_ERROR
         && (g_str_has_prefix (reply->str, "BUSY") || g_str_has_prefix (reply->str, "LOADING"));
}

/* The server refused the subscription: says so once, and has waiters poll. */
static void
refused (RlNotifier *self, const char *why)
{
  gboolean warn;

  rl_mutex_lock (&self->mutex);
  self->refused = TRUE;
  warn = !self->warned;
  self->warned = TRUE;
  rl_mutex_unlock (&self->mutex);
  if (warn)
    g_warning ("Redis refused the subscription to unlock notifications (%s): the Redis user "
               "lacks permission on the channels “%s” (ACL `&%s`). Waiters fall back to polling",
               why, self->pattern, self->pattern);
}

#define RL_INVALIDATE_CHANNEL "__redis__:invalidate"

/* Makes the subscriber connection @conn the receiver of key invalidations, before the
 * PSUBSCRIBE: its id, a check that tracking may be turned on, the invalidation
 * channel; each step waits for its reply. A refusal is reported once and leaves
 * tracking off for this connection. Returns FALSE when the connection failed or the
 * server answered an error it gives only for a while (transient_error()). */
static gboolean
track_keys (RlNotifier *self, RlConn *conn)
{
  redisReply *reply;
  char id[24];
  const char *why = NULL;
  const char *client_id[2] = { "CLIENT", "ID" };
  const char *tracking[6] = { "CLIENT", "TRACKING", "on", "REDIRECT", id, "OPTIN" };
  const char *subscribe[2] = { "SUBSCRIBE", RL_INVALIDATE_CHANNEL };
  g_autofree char *refusal = NULL;
  gint64 own_id;

  self->tracking = FALSE;
  self->track_id = 0;
  if (self->track_prefix == NULL || !g_atomic_int_get (&self->store->ctx->key_tracking))
    return TRUE;
  reply = rl_conn_roundtrip (conn, 2, client_id);
  if (reply == NULL)
    return FALSE;
  if (reply->type != REDIS_REPLY_INTEGER || reply->integer <= 0)
    {
      if (transient_error (reply))
        {
          freeReplyObject (reply);
          return FALSE;
        }
      why = "CLIENT ID";
      refusal = g_strdup (reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply");
      freeReplyObject (reply);
      goto refused;
    }
  own_id = reply->integer;
  rl_format_uint (id, own_id);
  freeReplyObject (reply);
  reply = rl_conn_roundtrip (conn, 6, tracking);
  if (reply == NULL)
    return FALSE;
  if (reply->type != REDIS_REPLY_STATUS)
    {
      if (transient_error (reply))
        {
          freeReplyObject (reply);
          return FALSE;
        }
      why = "CLIENT TRACKING";
      refusal = g_strdup (reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply");
      freeReplyObject (reply);
      goto refused;
    }
  freeReplyObject (reply);
  reply = rl_conn_roundtrip (conn, 2, subscribe);
  if (reply == NULL)
    return FALSE;
  if (reply->type != REDIS_REPLY_ARRAY)
    {
      if (transient_error (reply))
        {
          freeReplyObject (reply);
          return FALSE;
        }
      why = "SUBSCRIBE " RL_INVALIDATE_CHANNEL;
      refusal = g_strdup (reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply");
      freeReplyObject (reply);
      goto refused;
    }
  freeReplyObject (reply);
  self->tracking = TRUE;
  self->track_id = own_id;
  return TRUE;

refused:
  if (!self->track_warned)
    g_warning ("Redis refused %s (%s), needed to hear of lock keys deleted or expired without "
               "an unlock notification (Redis 6 or later; the user needs the CLIENT command "
               "and permission on the channel “%s”). Waiters are woken by unlock "
               "notifications and at the end of the holder's TTL",
               why, refusal, RL_INVALIDATE_CHANNEL);
  self->track_warned = TRUE;
  return TRUE;
}

/* An invalidation message: each key it names (none: the whole database was flushed)
 * may have been released, except the release's own invalidation, which comes right
 * after its notification. */
static void
handle_invalidation (RlNotifier *self, const redisReply *keys)
{
  RlStore *store = self->store;
  g_autofree char *published = g_steal_pointer (&self->last_published);

  if (keys->type != REDIS_REPLY_ARRAY)
    {
      store->released (NULL, FALSE, store->released_data);
      return;
    }
  for (size_t i = 0; i < keys->elements; i++)
    {
      const redisReply *key = keys->element[i];

      if (key->type != REDIS_REPLY_STRING)
        continue;
      if (published == NULL || strcmp (published, key->str) != 0)
        store->released (key->str, FALSE, store->released_data);
    }
}

/* A grant from the wait queue (QUEUED RELEASE, redis-store.c): `TOKEN\nVALUE\nKEY`. */
static void
handle_grant (RlNotifier *self, const char *message)
{
  const char *value_at = strchr (message, '\n');
  const char *key_at = value_at != NULL ? strchr (value_at + 1, '\n') : NULL;
  g_autofree char *token_text = NULL, *value = NULL;
  guint64 token = 0;

  if (key_at == NULL || self->store->granted == NULL)
    return;
  token_text = g_strndup (message, value_at - message);
  value = g_strndup (value_at + 1, key_at - value_at - 1);
  if (!g_ascii_string_to_unsigned (token_text, 10, 0, G_MAXUINT64, &token, NULL))
    return;
  self->store->granted (key_at + 1, value, token, self->store->released_data);
}

/* Returns FALSE when the subscription was refused, or answered with an error the server
 * gives only for a while: the connection is then made again. */
static gboolean
handle_reply (RlNotifier *self, redisReply *reply, gboolean *ping_out)
{
  const char *kind;

  if (reply->type == REDIS_REPLY_ERROR && self->legacy_pending)
    {
      /* The first answer is the legacy SUBSCRIBE's. */
      self->legacy_pending = FALSE;
      rl_debug ("subscription: the channel “%s” of older Spring releases was refused (%s)",
               self->legacy_channel, reply->str);
      return TRUE;
    }
  if (reply->type == REDIS_REPLY_ERROR)
    {
      if (transient_error (reply))
        rl_debug ("subscription: the server answered %s, reconnecting", reply->str);
      else
        refused (self, reply->str);
      return FALSE;
    }
  /* A guarding connection (no subscription) answers PING with a status. */
  if (reply->type == REDIS_REPLY_STATUS && g_ascii_strcasecmp (reply->str, "PONG") == 0)
    {
      *ping_out = FALSE;
      return TRUE;
    }
  if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 2
      || reply->element[0]->type != REDIS_REPLY_STRING)
    return TRUE;
  kind = reply->element[0]->str;
  if (g_ascii_strcasecmp (kind, "pmessage") == 0 && reply->elements == 4
      && reply->element[3]->type == REDIS_REPLY_STRING)
    {
      RL_ATOMIC_ADD (self->store->ctx->stats->notifications, 1);
      self->store->released (reply->element[3]->str, FALSE, self->store->released_data);
      g_free (self->last_published);
      self->last_published = self->tracking ? g_strdup (reply->element[3]->str) : NULL;
      return TRUE;
    }
  else if (g_ascii_strcasecmp (kind, "message") == 0 && reply->elements == 3
           && reply->element[1]->type == REDIS_REPLY_STRING
           && strcmp (reply->element[1]->str, RL_INVALIDATE_CHANNEL) == 0)
    {
      handle_invalidation (self, reply->element[2]);
      return TRUE;
    }
  else if (g_ascii_strcasecmp (kind, "message") == 0 && reply->elements == 3
           && reply->element[1]->type == REDIS_REPLY_STRING
           && strcmp (reply->element[1]->str, self->guard_channel) == 0
           && reply->element[2]->type == REDIS_REPLY_STRING)
    {
      /* A forced release (its waiters hear the pattern's message too): told as one,
       * so that a holder knows it is no echo of its own release. */
      RL_ATOMIC_ADD (self->store->ctx->stats->notifications, 1);
      self->store->released (reply->element[2]->str, TRUE, self->store->released_data);
      return TRUE;
    }
  else if (g_ascii_strcasecmp (kind, "message") == 0 && reply->elements == 3
           && reply->element[1]->type == REDIS_REPLY_STRING
           && strcmp (reply->element[1]->str, self->grant_channel) == 0
           && reply->element[2]->type == REDIS_REPLY_STRING)
    {
      handle_grant (self, reply->element[2]->str);
      return TRUE;
    }
  else if (g_ascii_strcasecmp (kind, "message") == 0 && reply->elements == 3
           && reply->element[1]->type == REDIS_REPLY_STRING
           && strcmp (reply->element[1]->str, self->legacy_channel) == 0
           && reply->element[2]->type == REDIS_REPLY_STRING)
    {
      const char *key = reply->element[2]->str;
      gboolean ours = g_str_has_prefix (key, self->key_prefix);

      RL_ATOMIC_ADD (self->store->ctx->stats->notifications, 1);
      self->store->released (ours ? key : NULL, FALSE, self->store->released_data);
      /* Like a notification: the invalidation that follows is the same news. */
      g_free (self->last_published);
      self->last_published = self->tracking && ours ? g_strdup (key) : NULL;
      return TRUE;
    }
  else if (g_ascii_strcasecmp (kind, "subscribe") == 0 && reply->elements == 3
           && reply->element[1]->type == REDIS_REPLY_STRING
           && strcmp (reply->element[1]->str, self->guard_channel) == 0)
    {
      gboolean subscribed;

      rl_mutex_lock (&self->mutex);
      self->refused = FALSE;
      subscribed = self->subscribed;
      rl_mutex_unlock (&self->mutex);
      set_state (self, TRUE, subscribed, FALSE);
    }
  else if (g_ascii_strcasecmp (kind, "subscribe") == 0 && reply->elements == 3
           && reply->element[1]->type == REDIS_REPLY_STRING
           && strcmp (reply->element[1]->str, self->legacy_channel) == 0)
    {
      self->legacy_pending = FALSE;
      self->legacy_on = TRUE;
    }
  else if (g_ascii_strcasecmp (kind, "psubscribe") == 0)
    {
      rl_mutex_lock (&self->mutex);
      self->refused = FALSE;
      rl_mutex_unlock (&self->mutex);
      set_state (self, TRUE, TRUE, FALSE);
    }
  else if (g_ascii_strcasecmp (kind, "pong") == 0)
    *ping_out = FALSE;
  g_clear_pointer (&self->last_published, g_free);
  return TRUE;
}

/* How a connection's subscription ended. */
typedef enum
{
  SUB_BROKE,   /* the connection broke, or the server refused */
  SUB_RESTART, /* stop, or a restart was asked (a failover) */
  SUB_UPGRADE, /* the first waiter wants key tracking, set up before any subscription:
                  a new connection, which is no reset */
} SubEnd;

/* Whether key tracking is wanted for the next connection. */
static gboolean
tracking_wanted (RlNotifier *self)
{
  return self->track_prefix != NULL && g_atomic_int_get (&self->store->ctx->key_tracking);
}

/* Runs one connection: the guard channel always, the pattern (with key tracking
 * first, when wanted) once a waiter asked, until it breaks or stop or restart is
 * asked. */
static SubEnd
subscribe_once (RlNotifier *self, RlConn *conn)
{
  gboolean ping_out = FALSE;
  gint64 last_traffic = g_get_monotonic_time ();
  const char *argv[2] = { "PSUBSCRIBE", self->pattern };
  const char *guard[3] = { "SUBSCRIBE", self->guard_channel, self->grant_channel };
  const char *legacy[2] = { "SUBSCRIBE", self->legacy_channel };
  gboolean pattern_sent = take_pattern_news (self);

  g_clear_pointer (&self->last_published, g_free);
  self->legacy_on = FALSE;
  if (pattern_sent && !track_keys (self, conn))
    return SUB_BROKE;
  rl_conn_append (conn, 3, guard);
  if (pattern_sent)
    {
      /* Answered before the PSUBSCRIBE: confirmed, the subscription includes it. */
      rl_conn_append (conn, 2, legacy);
      self->legacy_pending = TRUE;
      rl_conn_append (conn, 2, argv);
    }
  for (;;)
    {
      struct pollfd pfd[2] = { { conn->fd, POLLIN, 0 }, { self->wt.wake[0], POLLIN, 0 } };
      gint64 idle_ms;
      redisReply *reply;

      /* Send what is queued (the PSUBSCRIBE, a PING) as far as the socket takes it. */
      if (!rl_conn_write_some (conn))
        return SUB_BROKE;
      if (rl_conn_wants_write (conn))
        pfd[0].events |= POLLOUT;
      /* Hand over every complete reply already read. */
      for (;;)
        {
          if (!rl_conn_next_reply (conn, &reply))
            return SUB_BROKE;
          if (reply == NULL)
            {
              /* A release's invalidation comes with its notification, in the same
               * read; one read later is a change of its own (see notify.c). */
              g_clear_pointer (&self->last_published, g_free);
              break;
            }
          if (!handle_reply (self, reply, &ping_out))
            {
              freeReplyObject (reply);
              return SUB_BROKE;
            }
          freeReplyObject (reply);
        }
      idle_ms = RL_NOTIFY_PING_MS - (g_get_monotonic_time () - last_traffic) / 1000;
      if (idle_ms <= 0)
        {
          const char *ping[1] = { "PING" };
          if (ping_out)
            {
              rl_debug ("subscription: no answer to PING, reconnecting");
              return SUB_BROKE;
            }
          rl_conn_append (conn, 1, ping);
          ping_out = TRUE;
          last_traffic = g_get_monotonic_time ();
          continue;
        }
      /* Decrypted bytes poll() cannot see are read at once. */
      if (rl_conn_has_pending (conn))
        pfd[0].revents = POLLIN;
      else if (poll (pfd, 2, (int) idle_ms) < 0 && errno != EINTR)
        return SUB_BROKE;
      if (should_stop (self) || take_restart (self))
        return SUB_RESTART;
      if (take_pattern_news (self) && !pattern_sent)
        {
          /* The first waiter: the guarding connection subscribes to the pattern too,
           * with no reconnect, unless key tracking must be set up first (commands a
           * subscribed connection may not send). */
          if (tracking_wanted (self))
            return SUB_UPGRADE;
          rl_conn_append (conn, 2, legacy);
          self->legacy_pending = TRUE;
          rl_conn_append (conn, 2, argv);
          pattern_sent = TRUE;
          continue;
        }
      if ((pfd[0].revents & ~POLLOUT) != 0)
        {
          if (!rl_conn_read_some (conn))
            return SUB_BROKE;
          last_traffic = g_get_monotonic_time ();
        }
    }
}

static gpointer
notifier_thread (gpointer data)
{
  RlNotifier *self = data;
  gint64 backoff = RL_NOTIFY_BACKOFF_MIN_MS;

  rl_thread_set_name ("redislock-sub");
  while (!should_stop (self))
    {
      g_autoptr (GError) error = NULL;
      g_autoptr (RlNode) node = self->topology->vt->subscriber (self->topology, &error);
      RlConn *conn = node != NULL ? rl_pool_connect (node->pool, &error) : NULL;
      SubEnd end = SUB_BROKE;
      gboolean restarted;

      if (conn != NULL)
        {
          gboolean was_set_up;

          end = subscribe_once (self, conn);
          rl_conn_free (conn);
          /* A connection the server set up (it answered the subscription) resets the
           * backoff: the server is there, and a kill of a healthy server's connection,
           * however many in a row, is followed by a prompt reconnection. Only attempts
           * that fail to connect or subscribe back off. */
          rl_mutex_read (&self->mutex, &self->connected, &was_set_up, sizeof was_set_up);
          if (was_set_up)
            backoff = RL_NOTIFY_BACKOFF_MIN_MS;
        }
      else
        rl_debug ("subscription: %s", error->message);
      if (should_stop (self))
        break;
      if (end == SUB_UPGRADE)
        {
          /* Not a break: the next connection up is no reset. */
          rl_mutex_lock (&self->mutex);
          self->upgrading = TRUE;
          rl_mutex_unlock (&self->mutex);
          set_state (self, FALSE, FALSE, FALSE);
          continue;
        }
      restarted = end == SUB_RESTART;
      if (!restarted && node != NULL)
        self->topology->vt->failed (self->topology, node);
      set_state (self, FALSE, FALSE, TRUE);
      if (restarted)
        continue;
      rl_mutex_lock (&self->mutex);
      if (self->refused)
        backoff = RL_NOTIFY_BACKOFF_MAX_MS;
      rl_mutex_unlock (&self->mutex);
      if (!backoff_sleep (self, backoff))
        break;
      backoff = MIN (backoff * 2, RL_NOTIFY_BACKOFF_MAX_MS);
    }
  rl_mutex_lock (&self->mutex);
  self->subscribed = self->connected = FALSE;
  rl_cond_broadcast (&self->cond);
  rl_mutex_unlock (&self->mutex);
  return NULL;
}

RlNotifier *
rl_notifier_new (RlStore *store, RlTopology *topology, const char *pattern,
                 const char *guard_channel, const char *legacy_channel, const char *key_prefix,
                 const char *track_prefix)
{
  RlNotifier *self = g_new0 (RlNotifier, 1);

  self->store = store;
  self->topology = topology;
  self->pattern = pattern;
  self->legacy_channel = legacy_channel;
  self->key_prefix = key_prefix;
  self->track_prefix = track_prefix;
  self->guard_channel = guard_channel;
  self->grant_channel = g_strconcat (store->registry_key, "-grant:", store->client_id, NULL);
  rl_wake_thread_init (&self->wt);
  self->guarding = TRUE;
  rl_mutex_init (&self->mutex);
  rl_cond_init (&self->cond);
  return self;
}

/* Starts the thread on first use. self->mutex held. */
static void
start_locked (RlNotifier *self)
{
  rl_mutex_assert_held (&self->mutex);
  if (self->wt.started || self->stop)
    return;
  if (rl_wake_thread_start (&self->wt, notifier_thread, self))
    g_atomic_int_set (&self->running, TRUE);
  else
    g_warning ("Cannot start the unlock-notification thread; waiting by polling");
}

gboolean
rl_notifier_watch (RlNotifier *self, gint64 timeout_ms)
{
  gboolean subscribed;
  guint64 failures;
  gint64 end;

  rl_mutex_lock (&self->mutex);
  if (!self->pattern_wanted)
    {
      /* Read by the thread when it next connects; a connection that only guards is
       * told through the wake-up pipe (written under the mutex, as for restart). */
      self->pattern_wanted = self->pattern_news = TRUE;
      if (self->wt.started && !self->stop)
        {
          rl_wake_pipe_write (self->wt.wake, 'p');
        }
    }
  start_locked (self);
  failures = self->failures;
  end = g_get_monotonic_time () + timeout_ms * 1000;
  while (!self->subscribed && self->wt.started && !self->stop && !self->refused
         && self->failures == failures && timeout_ms > 0)
    if (!rl_cond_wait_until (&self->cond, &self->mutex, end))
      break;
  subscribed = self->subscribed;
  rl_mutex_unlock (&self->mutex);
  return subscribed;
}

gboolean
rl_notifier_guard (RlNotifier *self)
{
  gboolean guarding;

  /* Asked at every outermost unlock: once the thread runs, an atomic read. */
  if (G_LIKELY (g_atomic_int_get (&self->running)))
    return g_atomic_int_get (&self->guarding);
  rl_mutex_lock (&self->mutex);
  start_locked (self);
  guarding = g_atomic_int_get (&self->guarding);
  rl_mutex_unlock (&self->mutex);
  return guarding;
}

gint64
rl_notifier_tracking_id (RlNotifier *self)
{
  gint64 id;

  rl_mutex_read (&self->mutex, &self->tracking_id, &id, sizeof id);
  return id;
}

guint
rl_notifier_receivers (RlNotifier *self, gboolean legacy)
{
  guint n;

  rl_mutex_lock (&self->mutex);
  n = (self->subscribed ? 1 : 0) + (legacy && self->legacy_subscribed ? 1 : 0);
  rl_mutex_unlock (&self->mutex);
  return n;
}

void
rl_notifier_restart (RlNotifier *self)
{
  gboolean wake;

  /* The byte is written under the mutex, so the thread cannot take the request and
   * drain the pipe between the flag and the byte (a byte left behind would keep
   * waking it). */
  rl_mutex_lock (&self->mutex);
  wake = self->wt.started && !self->stop && !self->restart;
  if (wake)
    {
      self->restart = TRUE;
      rl_wake_pipe_write (self->wt.wake, 'r');
    }
  rl_mutex_unlock (&self->mutex);
}

void
rl_notifier_stop (RlNotifier *self)
{
  rl_wake_thread_stop (&self->wt, &self->mutex, &self->cond, &self->stop);
}

void
rl_notifier_free (RlNotifier *self)
{
  if (self == NULL)
    return;
  rl_notifier_stop (self);
  rl_wake_pipe_close (self->wt.wake);
  rl_cond_clear (&self->cond);
  rl_mutex_clear (&self->mutex);
  g_free (self->last_published);
  g_free (self->grant_channel);
  g_free (self);
}
