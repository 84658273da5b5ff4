/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* redis-store.c: the Redis lease protocol, the Redis implementation of the store seam.
 *
 * A lease is the key `registry_key:name` holding the registry's client id, ":" and a
 * number unique to the acquisition, with a millisecond expiry: the layout Spring
 * Integration's RedisLockRegistry uses (Spring compares values only with its own
 * client id), so Java and C processes exclude each other. The number makes every
 * hold's value different, so a release or renewal that reaches Redis late (its reply
 * timed out, the holder moved on) can never match a later hold of the same registry. Every step that reads the key and then changes
 * it is one Lua script, because between a GET and a DEL another owner may have taken
 * the key over, and deleting it then would break mutual exclusion. The scripts are
 * sent by EVALSHA with their SHA-1 computed here; a server that does not know a script
 * (restarted, SCRIPT FLUSH) answers NOSCRIPT and gets the script by EVAL, which also
 * caches it, in the same call. A free key is first tried with a plain
 * `SET key id NX PX ttl` (the same write Spring makes), which is cheaper for Redis
 * than any script; the acquire script runs only when the key exists.
 *
 * Connections come from the pool (connection.c). A request that fails because a
 * pooled connection had gone stale (server restarted) is retried once on a fresh one:
 * every request here names the value of one acquisition, so running it twice changes
 * nothing the first run did not (a second acquire finds its own value, a second
 * release finds the key gone). A timeout is not retried: it already used the
 * caller's time.
 *
 * The stepwise requests at the end (redis_request_begin() and the rest) are the same
 * commands and scripts for the quorum store, which sends and reads for several servers
 * at once: each lease moves from SET NX to the acquire script, or from EVALSHA to EVAL,
 * as its replies come, on the request's one connection.
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
#include "redis-waits.h"

/* ACQUIRE: KEYS[1] = lock key, ARGV[1] = this acquisition's value, ARGV[2] = TTL in ms.
 * Absent: SET NX PX takes it (the common case, one command). Ours already (the same
 * acquisition's SET ran, but its reply was lost and the request is retried): refresh
 * the TTL. Both return -3, a value PTTL
 * never returns. Held by another owner: return its PTTL (>= 0, or -1 without expiry),
 * which bounds how long a waiter sleeps if no unlock notification ever comes. A waiter
 * never touches the holder's TTL. One script, so the three cases cannot interleave
 * with another client's release or acquisition. */
static const char acquire_script[]
    = "if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then\n"
      "  return -3\n"
      "end\n"
      "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
      "  redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
      "  return -3\n"
      "end\n"
      "return redis.call('PTTL', KEYS[1])\n";
#define RL_ACQUIRED (-3)

/* NEXT TOKEN, a Lua function the fencing scripts share: the next token of the counter
 * key k, max(counter + 1, the server's clock in microseconds), written back to k
 * before it is returned (a hybrid logical clock). A counter alone starts again lower
 * when it is lost (a restart without persistence, a failover to a replica that had
 * not received the last increments); the clock does not, as long as the servers'
 * clocks agree to within the time between the last token and the fault. The counter
 * is bumped past the clock (INCR) only when tokens come faster than one per
 * microsecond or the clock was set back; otherwise the clock's value is written with
 * SET, so replicas and the AOF get the literal number, not a TIME to evaluate again
 * (Redis replicates a script's effects, by default since 5.0 and only so since 7.0,
 * which is what makes TIME usable in a script that writes). A
 * counter that does not hold an integer makes the script fail (INCR refuses it). The
 * token is returned as the counter's string, not as a Lua number, which is a double
 * and would round a counter past 2^53; and the clock's digits are joined as strings,
 * the microseconds padded to six (a Lua number would print in exponent form), without
 * string.format, which costs a few microseconds a call. */
#define RL_LUA_NEXT_TOKEN                                                                          \
  "local function next_token(k)\n"                                                                 \
  "  local t = redis.call('TIME')\n"                                                               \
  "  local us = t[2]\n"                                                                            \
  "  if #us < 6 then\n"                                                                            \
  "    us = string.rep('0', 6 - #us) .. us\n"                                                      \
  "  end\n"                                                                                        \
  "  local now = t[1] .. us\n"                                                                     \
  "  local c = redis.call('GET', k)\n"                                                             \
  "  if c then\n"                                                                                  \
  "    local n = tonumber(c)\n"                                                                    \
  "    if not n or n >= t[1] * 1000000 + t[2] then\n"                                              \
  "      redis.call('INCR', k)\n"                                                                  \
  "      return redis.call('GET', k)\n"                                                            \
  "    end\n"                                                                                      \
  "  end\n"                                                                                        \
  "  redis.call('SET', k, now)\n"                                                                  \
  "  return now\n"                                                                                 \
  "end\n"

/* FENCED ACQUIRE: KEYS[1] = lock key, KEYS[2] = its fencing counter (in the same slot),
 * ARGV[1] = this acquisition's value, ARGV[2] = TTL in ms. ACQUIRE, and whenever it
 * takes the lease (free, or ours already after a lost reply), NEXT TOKEN of the counter
 * in the same atomic step, so that no two acquisitions of the name can get the same
 * token or take them out of order. Taken: returns {token}, the counter's new value as
 * a string (a retry of the same acquisition gets a new, higher one: tokens only have
 * to rise). Held by another owner: returns its PTTL, as ACQUIRE does, and the counter
 * is untouched. Used only with fencing on, so that without it the keys touched stay
 * Spring's. */
static const char fenced_acquire_script[]
    = RL_LUA_NEXT_TOKEN "if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then\n"
                        "  return {next_token(KEYS[2])}\n"
                        "end\n"
                        "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
                        "  redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
                        "  return {next_token(KEYS[2])}\n"
                        "end\n"
                        "return redis.call('PTTL', KEYS[1])\n";

/* ACQUIRE ALL: several leases, all or none. KEYS[1..n] = lock keys, then with fencing
 * KEYS[n+1..2n] = their counters; ARGV[1] = TTL in ms, ARGV[2] = '1' with fencing,
 * ARGV[3..n+2] = each acquisition's value. Every key is looked at before any is
 * written: the first held by another owner ends the script with nothing written and
 * returns {i, PTTL of KEYS[i]}; otherwise each key is set (taken, or ours already with
 * its TTL refreshed) and, with fencing, its counter moved on by NEXT TOKEN, and the
 * script returns {0, token of KEYS[1], …} (the tokens as strings; integers 0 without
 * fencing). One script, so two clients taking overlapping sets never each get a part,
 * and a set is never seen half taken. On a Cluster its keys must share a slot, so it
 * runs once per slot. */
static const char acquire_all_script[]
    = RL_LUA_NEXT_TOKEN "local n = #ARGV - 2\n"
                        "for i = 1, n do\n"
                        "  local v = redis.call('GET', KEYS[i])\n"
                        "  if v and v ~= ARGV[i + 2] then\n"
                        "    return {i, redis.call('PTTL', KEYS[i])}\n"
                        "  end\n"
                        "end\n"
                        "local result = {0}\n"
                        "for i = 1, n do\n"
                        "  redis.call('SET', KEYS[i], ARGV[i + 2], 'PX', ARGV[1])\n"
                        "  if ARGV[2] == '1' then\n"
                        "    result[i + 1] = next_token(KEYS[n + i])\n"
                        "  else\n"
                        "    result[i + 1] = 0\n"
                        "  end\n"
                        "end\n"
                        "return result\n";

/* RELEASE: KEYS[1] = lock key, ARGV[1] = the hold's value, ARGV[2] = notification channel,
 * ARGV[3] = how many of the receivers are our own subscription (0 to 2), ARGV[4]
 * (optional) = a TTL in ms to keep the lease with when nobody else listens ('0': do
 * not), ARGV[5] (optional) = a second channel to publish on, `registry_key-channel`,
 * where Spring's releases before its per-key channels listen.
 * Gone or foreign: touches nothing and returns 0 (the lease was lost). Ours: PUBLISH
 * the key on `registry_key-channel:key` (and on ARGV[5]) and UNLINK it in the same
 * atomic step, so no waiter can see the key gone without the notification being on
 * its way; returns 2 when a client other than ours received a notification (the
 * receivers of both channels count), else 1. With ARGV[4] and
 * no other receiver (so no waiter anywhere was told), the key stays with its TTL
 * reset and the script returns -1. A user without permission on the channel (an ACL
 * without `&registry_key-channel:*`, Redis 7's default for new users) makes PUBLISH
 * fail: the key is deleted all the same and the script returns 3, so an unlock never
 * leaves a key behind for want of a notification; a refused ARGV[5] is ignored. */
static const char release_script[]
    = "if redis.call('GET', KEYS[1]) ~= ARGV[1] then\n"
      "  return 0\n"
      "end\n"
      "local n = redis.pcall('PUBLISH', ARGV[2], KEYS[1])\n"
      "if ARGV[5] then\n"
      "  local m = redis.pcall('PUBLISH', ARGV[5], KEYS[1])\n"
      "  if type(n) == 'number' and type(m) == 'number' then\n"
      "    n = n + m\n"
      "  end\n"
      "end\n"
      "if type(n) ~= 'number' then\n"
      "  redis.call('UNLINK', KEYS[1])\n"
      "  return 3\n"
      "end\n"
      "local others = n - tonumber(ARGV[3])\n"
      "if others <= 0 and ARGV[4] and ARGV[4] ~= '0' then\n"
      "  redis.call('PEXPIRE', KEYS[1], ARGV[4])\n"
      "  return -1\n"
      "end\n"
      "redis.call('UNLINK', KEYS[1])\n"
      "if others > 0 then\n"
      "  return 2\n"
      "end\n"
      "return 1\n";
#define RL_RELEASE_KEPT (-1)
#define RL_RELEASE_LOST 0
#define RL_RELEASE_OTHERS 2
#define RL_RELEASE_UNPUBLISHED 3

/* FORCE RELEASE: KEYS[1] = lock key, ARGV[1] = notification channel, ARGV[2] = the
 * registry's forced-release channel, ARGV[3] = a third channel ('': none), as
 * RELEASE's older Spring channel. Deletes the key whoever holds it and publishes the
 * notification in the same atomic step, as RELEASE does, so waiters wake at once; and
 * publishes the key on the forced-release channel, which every registry holding a
 * lease listens to (its guarding connection), so that a holder of this library hears
 * of it though nobody of its own waits. Returns 1 when a key was deleted, 0 when
 * there was none. A user without permission on the channels still deletes (the
 * PUBLISH errors are ignored). */
static const char force_release_script[] = "if redis.call('EXISTS', KEYS[1]) == 0 then\n"
                                           "  return 0\n"
                                           "end\n"
                                           "redis.pcall('PUBLISH', ARGV[1], KEYS[1])\n"
                                           "redis.pcall('PUBLISH', ARGV[2], KEYS[1])\n"
                                           "if ARGV[3] ~= '' then\n"
                                           "  redis.pcall('PUBLISH', ARGV[3], KEYS[1])\n"
                                           "end\n"
                                           "redis.call('UNLINK', KEYS[1])\n"
                                           "return 1\n";

/* RENEW: KEYS[1] = lock key, ARGV[1] = the hold's value, ARGV[2] = TTL in ms.
 * Ours: PEXPIRE, returns 1. Gone or foreign: returns 0 and never extends another
 * owner's key. */
static const char renew_script[] = "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
                                   "  redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
                                   "  return 1\n"
                                   "end\n"
                                   "return 0\n";

/* On Sentinel, the releases remembered: those made shortly before the registry learns
 * of a failover went to the old master, maybe after the new one had been promoted
 * and had given the lock to another holder (asynchronous replication had not told it
 * of the hold). They are counted and logged as doubtful (stats.doubtful_releases). */
#define RL_RECENT_RELEASES 64
#define RL_DOUBT_WINDOW_US (2 * G_USEC_PER_SEC)

typedef struct
{
  RlStore parent;
  RlTopology *topology;
  RlNotifier *notifier;
  char *channel_prefix; /* registry_key "-channel:" */
  char *forced_channel; /* registry_key "-forced": forced releases, for their holders */
  char *legacy_channel; /* registry_key "-channel": older Spring releases' one channel */
  RlScript acquire, release, renew;
  RlScript fenced_acquire, acquire_all; /* with fencing, and for several leases at once */
  RlScript force_release;               /* an operator's delete, whoever holds the key */
  RlScript waits;                       /* the waits-for records (redis-waits.c) */
  gboolean slotted; /* a Cluster: a script's keys must share a slot */
  gboolean sentinel; /* a Sentinel deployment: releases are remembered for a while */
  gint publish_refused; /* atomic: the missing channel permission was reported */

  RlMutex recent_mutex;                       /* guards the two below */
  gint64 recent_releases[RL_RECENT_RELEASES]; /* monotonic µs of the latest releases, 0:
                                                 none; a ring */
  guint recent_next;
} RlRedisStore;

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

static gboolean
is_noscript (redisReply *reply)
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
static gint64
min_replicas (RlRedisStore *self)
{
  return RL_ATOMIC_GET (self->parent.ctx->min_replicas);
}

/* What the last WAIT of this thread that fell short found, for the NOT_REPLICATED
 * message that follows it in the same thread (set_not_replicated()): the node, the
 * replicas that acknowledged and those connected to it (ROLE), -1 when unknown. */
typedef struct
{
  char node[128];
  gint64 acked;
  gint64 connected;
} RlWaitShortfall;

static _Thread_local RlWaitShortfall wait_shortfall = { "", -1, -1 };

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
static gboolean
replicated (RlRedisStore *self, RlNode *node, RlConn *conn, gint64 budget_ms)
{
  RlStoreContext *ctx = self->parent.ctx;
  gint64 n = min_replicas (self);
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
    g_debug ("WAIT %s %s answered %s%lld%s", count, timeout,
             reply == NULL ? "nothing: " : "", reply != NULL && reply->type == REDIS_REPLY_INTEGER ? reply->integer : -1,
             reply != NULL && reply->type == REDIS_REPLY_ERROR ? reply->str : "");
  if (!ok)
    {
      g_strlcpy (wait_shortfall.node, node->name, sizeof wait_shortfall.node);
      wait_shortfall.acked
          = reply != NULL && reply->type == REDIS_REPLY_INTEGER ? reply->integer : -1;
      wait_shortfall.connected = reply != NULL ? connected_replicas (self, conn) : -1;
    }
  if (reply != NULL)
    freeReplyObject (reply);
  return ok;
}

static void
set_not_replicated (RlRedisStore *self, GError **error, const char *what, const char *key)
{
  g_autofree char *found = NULL;

  /* What the WAIT that fell short found, when it was this thread's last. */
  if (wait_shortfall.node[0] != '\0' && wait_shortfall.connected >= 0)
    found = g_strdup_printf (" (the master at %s has %" G_GINT64_FORMAT " connected replica%s)",
                             wait_shortfall.node, wait_shortfall.connected,
                             wait_shortfall.connected == 1 ? "" : "s");
  else if (wait_shortfall.node[0] != '\0' && wait_shortfall.acked >= 0)
    found = g_strdup_printf (" (%" G_GINT64_FORMAT " acknowledged at %s)", wait_shortfall.acked,
                             wait_shortfall.node);
  wait_shortfall = (RlWaitShortfall){ "", -1, -1 };
  g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_NOT_REPLICATED,
               "The %s of “%s” was acknowledged by fewer than %" G_GINT64_FORMAT
               " replicas within %" G_GINT64_FORMAT " ms%s",
               what, key, min_replicas (self), RL_ATOMIC_GET (self->parent.ctx->replica_timeout_ms),
               found != NULL ? found : "");
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
static redisReply *
call_tracked (RlRedisStore *self, const char *key, int argc, const char **argv,
              const RlScript *script, gint64 timeout_ms, gboolean *retried, RlWroteFunc wrote,
              gboolean *acked, gboolean track, GError **error)
{
  RlTopology *topology = self->topology;
  RedisLockRegistryStats *stats = self->parent.ctx->stats;
  gint64 budget_ms = timeout_ms > 0 ? timeout_ms : RL_ATOMIC_GET (self->parent.ctx->command_timeout_ms);
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
      if (reply != NULL && script != NULL && is_noscript (reply))
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
        *acked = replicated (self, node, conn, 0);
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
                     const RlScript *script, gint64 timeout_ms, RlWroteFunc wrote,
                     gboolean *acked, gboolean track, GError **error)
{
  return call_tracked ((RlRedisStore *) store, key, argc, argv, script, timeout_ms, NULL, wrote,
                       acked, track, error);
}

void
rl_redis_store_not_replicated (RlStore *store, const char *what, const char *key,
                               GError **error)
{
  set_not_replicated ((RlRedisStore *) store, error, what, key);
}

static redisReply *
call (RlRedisStore *self, const char *key, int argc, const char **argv, const RlScript *script,
      gint64 timeout_ms, gboolean *retried, RlWroteFunc wrote, gboolean *acked, GError **error)
{
  return call_tracked (self, key, argc, argv, script, timeout_ms, retried, wrote, acked, FALSE,
                       error);
}

/* Runs @script with the EVALSHA command line @argv; its reply must be an integer. */
static redisReply *
run_script_argv (RlRedisStore *self, RlScript *script, int argc, const char **argv,
                 gint64 timeout_ms, gboolean *retried, RlWroteFunc wrote, gboolean *acked,
                 GError **error)
{
  redisReply *reply
      = call (self, argv[3], argc, argv, script, timeout_ms, retried, wrote, acked, error);

  if (reply != NULL && reply->type != REDIS_REPLY_INTEGER)
    {
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_REDIS,
                   "Redis lock script returned an unexpected reply (type %d)", reply->type);
      freeReplyObject (reply);
      return NULL;
    }
  return reply;
}

/* Runs @script on @key with two arguments; its reply must be an integer. */
static redisReply *
run_script (RlRedisStore *self, RlScript *script, const char *key, const char *arg1,
            const char *arg2, gint64 timeout_ms, RlWroteFunc wrote, gboolean *acked,
            GError **error)
{
  const char *argv[6] = { "EVALSHA", script->sha, "1", key, arg1, arg2 };

  return run_script_argv (self, script, 6, argv, timeout_ms, NULL, wrote, acked, error);
}

static gboolean
wrote_set (const redisReply *reply)
{
  return reply->type == REDIS_REPLY_STATUS;
}

static gboolean
wrote_acquire (const redisReply *reply)
{
  return reply->type == REDIS_REPLY_INTEGER && reply->integer == RL_ACQUIRED;
}

static gboolean
wrote_renew (const redisReply *reply)
{
  return reply->type == REDIS_REPLY_INTEGER && reply->integer == 1;
}

static gboolean
wrote_kept (const redisReply *reply)
{
  return reply->type == REDIS_REPLY_INTEGER && reply->integer == RL_RELEASE_KEPT;
}

static RlLeaseResult redis_release (RlStore *store, const char *key, const char *value,
                                    gint64 keep_ttl_ms, gboolean *others, GError **error);

/* An acquisition too few replicas acknowledged: released again, and NOT_REPLICATED. */
static RlLeaseResult
unreplicated_acquisition (RlRedisStore *self, const char *key, const char *value, GError **error)
{
  g_autoptr (GError) release_error = NULL;
  gboolean others;

  if (redis_release (&self->parent, key, value, 0, &others, &release_error) == RL_LEASE_ERROR)
    g_debug ("releasing the unreplicated lease of “%s”: %s", key, release_error->message);
  set_not_replicated (self, error, "acquisition", key);
  return RL_LEASE_ERROR;
}

static gboolean
wrote_fenced (const redisReply *reply)
{
  return reply->type == REDIS_REPLY_ARRAY;
}

/* The token in a reply of FENCED ACQUIRE or ACQUIRE ALL: the counter's decimal string
 * (NEXT TOKEN), or the integer 0 of ACQUIRE ALL without fencing. */
static gboolean
reply_token (const redisReply *reply, guint64 *token)
{
  if (reply->type == REDIS_REPLY_STRING)
    return g_ascii_string_to_unsigned (reply->str, 10, 1, G_MAXUINT64, token, NULL);
  if (reply->type != REDIS_REPLY_INTEGER || reply->integer < 0)
    return FALSE;
  *token = (guint64) reply->integer;
  return TRUE;
}

/* One round trip: FENCED ACQUIRE. */
static RlLeaseResult
acquire_fenced (RlRedisStore *self, const char *key, const char *value, const char *ttl,
                gint64 timeout_ms, const char *fence_key, guint64 *token, gint64 *pttl_ms,
                GError **error)
{
  const char *argv[7] = { "EVALSHA", self->fenced_acquire.sha, "2", key, fence_key, value, ttl };
  gboolean acked;
  /* One script that reads the key when it is held: tracked, as ACQUIRE's. */
  redisReply *reply = call_tracked (self, key, 7, argv, &self->fenced_acquire, timeout_ms, NULL,
                                    wrote_fenced, &acked, TRUE, error);

  if (reply == NULL)
    return RL_LEASE_ERROR;
  if (reply->type == REDIS_REPLY_INTEGER)
    {
      *pttl_ms = reply->integer;
      freeReplyObject (reply);
      return RL_LEASE_HELD;
    }
  if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 1
      || !reply_token (reply->element[0], token))
    {
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_REDIS,
                   "Redis fenced lock script returned an unexpected reply (type %d)", reply->type);
      freeReplyObject (reply);
      /* The lease may have been taken: the caller releases it in the background. */
      return RL_LEASE_ERROR;
    }
  freeReplyObject (reply);
  return acked ? RL_LEASE_OK : unreplicated_acquisition (self, key, value, error);
}

static RlLeaseResult
redis_acquire (RlStore *store, const char *key, const char *value, gint64 ttl_ms,
               gint64 timeout_ms, const char *fence_key, guint64 *token, gint64 *pttl_ms,
               GError **error)
{
  RlRedisStore *self = (RlRedisStore *)store;
  char ttl[24];
  redisReply *reply;
  long long result;
  gboolean acked;

  rl_format_uint (ttl, ttl_ms);
  if (fence_key != NULL)
    return acquire_fenced (self, key, value, ttl, timeout_ms, fence_key, token, pttl_ms, error);

  /* Fast path: a free key is taken by a plain SET NX PX, the cheapest command Redis
   * has for it (no script runs). Only when the key exists does the acquire script
   * decide between "ours already" and "held by another, for PTTL ms". */
  {
    const char *argv[6] = { "SET", key, value, "NX", "PX", ttl };
    gboolean taken;

    reply = call (self, key, 6, argv, NULL, timeout_ms, NULL, wrote_set, &acked, error);
    if (reply == NULL)
      return RL_LEASE_ERROR;
    taken = reply->type == REDIS_REPLY_STATUS;
    freeReplyObject (reply);
    if (taken)
      return acked ? RL_LEASE_OK : unreplicated_acquisition (self, key, value, error);
  }

  /* The key is held: this read of it (the script's GET and PTTL) is the one a waiter
   * is woken by a change of, without a notification too. */
  {
    const char *argv[6] = { "EVALSHA", self->acquire.sha, "1", key, value, ttl };

    reply = call_tracked (self, key, 6, argv, &self->acquire, timeout_ms, NULL, wrote_acquire,
                          &acked, TRUE, error);
  }
  if (reply == NULL)
    return RL_LEASE_ERROR;
  if (reply->type != REDIS_REPLY_INTEGER)
    {
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_REDIS,
                   "Redis lock script returned an unexpected reply (type %d)", reply->type);
      freeReplyObject (reply);
      return RL_LEASE_ERROR;
    }
  result = reply->integer;
  freeReplyObject (reply);
  if (result == RL_ACQUIRED)
    return acked ? RL_LEASE_OK : unreplicated_acquisition (self, key, value, error);
  *pttl_ms = result;
  return RL_LEASE_HELD;
}

static RlLeaseResult
redis_renew (RlStore *store, const char *key, const char *value, gint64 ttl_ms, GError **error)
{
  RlRedisStore *self = (RlRedisStore *)store;
  char ttl[24];
  redisReply *reply;
  gboolean kept;

  gboolean acked;

  rl_format_uint (ttl, ttl_ms);
  reply = run_script (self, &self->renew, key, value, ttl, 0, wrote_renew, &acked, error);
  if (reply == NULL)
    return RL_LEASE_ERROR;
  kept = reply->integer == 1;
  freeReplyObject (reply);
  if (kept && !acked)
    {
      /* Kept on the master, but a failover now could lose it: not confirmed. */
      set_not_replicated (self, error, "renewal", key);
      return RL_LEASE_ERROR;
    }
  return kept ? RL_LEASE_OK : RL_LEASE_LOST;
}

/* Whether a client other than our registry heard the release that RELEASE answered
 * @result to on @channel; warns once when the notification was refused. */
static gboolean
release_heard (RlRedisStore *self, long long result, const char *channel)
{
  if (result == RL_RELEASE_UNPUBLISHED && g_atomic_int_compare_and_exchange (&self->publish_refused, 0, 1))
    g_warning ("Redis refused the unlock notification on channel “%s”: the Redis user lacks "
               "permission on the channels “%s*” (ACL `&%s*`). Locks are still released, but "
               "waiters elsewhere learn of it only by polling or when the holder's TTL ends",
               channel, self->channel_prefix, self->channel_prefix);
  /* A Cluster's count is one node's: a waiter subscribed elsewhere may have been
   * told, so a release counts as heard (the cost: a short yield at the end of a
   * streak of hand-offs). */
  return result == RL_RELEASE_OTHERS
         || (!self->topology->publish_counts_all
             && (result == 1 || result == RL_RELEASE_UNPUBLISHED));
}

/* What the release script's @result (but KEPT) means for @key: OK or LOST; or, when
 * the request was sent again after its connection broke (@retried), ERROR with @error:
 * the first attempt may have deleted the key itself, so "gone" then does not mean
 * another owner or expiry took it, and unknown is the honest answer. */
static RlLeaseResult
release_outcome (long long result, gboolean retried, const char *key, GError **error)
{
  if (result == RL_RELEASE_LOST && retried)
    {
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION,
                   "The connection to Redis broke during the release of “%s”; it may or may "
                   "not have been released by it (a lease left behind expires with its TTL)",
                   key);
      return RL_LEASE_ERROR;
    }
  return result == RL_RELEASE_LOST ? RL_LEASE_LOST : RL_LEASE_OK;
}

/* A release on a Sentinel deployment's master succeeded: remembered for
 * count_doubtful_releases(). */
static void
remember_release (RlRedisStore *self)
{
  if (!self->sentinel)
    return;
  rl_mutex_lock (&self->recent_mutex);
  self->recent_releases[self->recent_next] = g_get_monotonic_time ();
  self->recent_next = (self->recent_next + 1) % RL_RECENT_RELEASES;
  rl_mutex_unlock (&self->recent_mutex);
}

/* The master changed: the releases of the last RL_DOUBT_WINDOW_US went to the old one,
 * maybe after the promotion. Counted and logged, then forgotten. */
static void
count_doubtful_releases (RlRedisStore *self)
{
  gint64 now = g_get_monotonic_time ();
  guint n = 0;

  rl_mutex_lock (&self->recent_mutex);
  for (guint i = 0; i < RL_RECENT_RELEASES; i++)
    {
      if (self->recent_releases[i] != 0 && now - self->recent_releases[i] < RL_DOUBT_WINDOW_US)
        n++;
      self->recent_releases[i] = 0;
    }
  rl_mutex_unlock (&self->recent_mutex);
  if (n == 0)
    return;
  RL_ATOMIC_ADD (self->parent.ctx->stats->doubtful_releases, n);
  g_message ("The Redis master of “%s” was replaced: %u release%s made on the old master in "
             "the last %d ms may have come after the promotion, when another holder could "
             "already have had the lock on the new one (writes replicated asynchronously; "
             "see redis_lock_registry_set_min_replicas())",
             self->parent.registry_key, n, n == 1 ? "" : "s",
             (int) (RL_DOUBT_WINDOW_US / 1000));
}

/* The second channel a release publishes on (RELEASE's ARGV[5]), NULL when the
 * registry's legacy_spring_channel setting is off; and in @own (ARGV[3]) how many of
 * the receivers are our own subscription. */
static const char *
release_legacy (RlRedisStore *self, char own[2])
{
  gboolean legacy = g_atomic_int_get (&self->parent.ctx->legacy_channel) != 0;

  own[0] = (char) ('0' + rl_notifier_receivers (self->notifier, legacy));
  own[1] = '\0';
  return legacy ? self->legacy_channel : NULL;
}

static RlLeaseResult
redis_release (RlStore *store, const char *key, const char *value, gint64 keep_ttl_ms,
               gboolean *others, GError **error)
{
  RlRedisStore *self = (RlRedisStore *)store;
  gsize prefix_len = strlen (self->channel_prefix), key_len = strlen (key);
  char stack[512];
  /* The channel is built on the stack: no allocation per release. */
  g_autofree char *heap
      = prefix_len + key_len < sizeof stack ? NULL : g_malloc (prefix_len + key_len + 1);
  char *channel = heap != NULL ? heap : stack;
  char keep[24] = "0", own[2];
  const char *legacy = release_legacy (self, own);
  const char *argv[9] = { "EVALSHA", self->release.sha, "1", key, value, channel, own, keep,
                          legacy };
  redisReply *reply;
  long long result;
  gboolean retried, acked;
  int argc;

  *others = FALSE;
  memcpy (channel, self->channel_prefix, prefix_len);
  memcpy (channel + prefix_len, key, key_len + 1);
  /* Keeping the lease when nobody else listens needs a count of every listener; on a
   * Cluster every streak ends with a release instead. */
  if (!self->topology->publish_counts_all)
    keep_ttl_ms = 0;
  if (keep_ttl_ms > 0)
    rl_format_uint (keep, keep_ttl_ms);

  argc = legacy != NULL ? 9 : keep_ttl_ms > 0 ? 8 : 7;
  reply = run_script_argv (self, &self->release, argc, argv, 0, &retried, wrote_kept, &acked,
                           error);
  if (reply == NULL)
    return RL_LEASE_ERROR;
  result = reply->integer;
  freeReplyObject (reply);
  *others = release_heard (self, result, channel);
  /* A kept streak too few replicas acknowledged ends with a release instead. */
  if (result == RL_RELEASE_KEPT && !acked)
    return redis_release (store, key, value, 0, others, error);
  if (result == RL_RELEASE_KEPT)
    return RL_LEASE_KEPT;
  if (result != RL_RELEASE_LOST)
    remember_release (self);
  return release_outcome (result, retried, key, error);
}

/* Several leases at once ---------------------------------------------------------- */

/* Whether the error @reply of a command sent in a batch means it must go again alone
 * through call(), which follows a redirection (MOVED, ASK) or waits and retries
 * (TRYAGAIN, CLUSTERDOWN, LOADING...). */
static gboolean
is_reroute (const redisReply *reply)
{
  return reply->type == REDIS_REPLY_ERROR
         && (rl_topology_classify_common (reply) == RL_REPLY_RETRY
             || g_str_has_prefix (reply->str, "MOVED ") || g_str_has_prefix (reply->str, "ASK "));
}

/* One command of a pipelined request: EVALSHA of @script with @argv (argv[0] and
 * argv[1] are set here), or @argv as it is without a script, sent to the node that
 * serves @route. */
typedef struct
{
  const RlScript *script; /* NULL: a plain command */
  const char *route;
  int argc;
  const char **argv;
  redisReply *reply;     /* out: the reply, never an error reply; NULL with @error */
  GError *error;         /* out */
  gboolean retried;      /* out: sent again after a stale connection broke (see call()) */
  gboolean unreplicated; /* out: with @wrote, too few replicas acknowledged its write */
  guint8 state;          /* where it stands, below */
} PipeCommand;

enum
{
  PIPE_UNSENT,
  PIPE_SENT,     /* in the exchange under way */
  PIPE_DONE,     /* reply or error final */
  PIPE_NOSCRIPT, /* to be sent again by EVAL */
  PIPE_ALONE,    /* redirected, "try again", or its connection went stale: through call() */
};

/* The commands of a request that one node serves, and the connection they go on. */
typedef struct
{
  RlNode *node;
  RlConn *conn;
  gboolean reused;
  GArray *cmds;    /* guint: indexes of the commands, in the order they are sent */
  guint next;      /* where the next reply's command is looked for */
  guint sent;      /* commands sent in the exchange under way */
  guint answered;  /* of them, answered: the reply after the last is WAIT's */
  gboolean waited; /* a WAIT follows them */
  gboolean unreplicated;
} PipeNode;

typedef struct
{
  PipeNode **live; /* the nodes of the exchange, by connection index */
  PipeCommand *cmds;
  gint64 min_replicas;
} PipeReplies;

static void
on_pipe_reply (guint g, redisReply *reply, gpointer user_data)
{
  PipeReplies *p = user_data;
  PipeNode *pn = p->live[g];
  PipeCommand *cmd;

  if (pn->answered == pn->sent)
    {
      /* WAIT, after the commands. */
      if (reply->type != REDIS_REPLY_INTEGER || reply->integer < p->min_replicas)
        {
          pn->unreplicated = TRUE;
          g_strlcpy (wait_shortfall.node, pn->node->name, sizeof wait_shortfall.node);
          wait_shortfall.acked = reply->type == REDIS_REPLY_INTEGER ? reply->integer : -1;
          wait_shortfall.connected = -1;
        }
      freeReplyObject (reply);
      return;
    }
  pn->answered++;
  /* Replies come in the order the commands were sent; commands not sent in this
   * exchange have none. */
  do
    cmd = &p->cmds[g_array_index (pn->cmds, guint, pn->next++)];
  while (cmd->state != PIPE_SENT);
  cmd->state = PIPE_DONE;
  if (is_noscript (reply))
    cmd->state = PIPE_NOSCRIPT;
  else if (is_reroute (reply))
    cmd->state = PIPE_ALONE;
  else
    {
      cmd->reply = reply;
      return;
    }
  freeReplyObject (reply);
}

/* The node of @node in @nodes, added when new. */
static PipeNode *
pipe_node_for (GPtrArray *nodes, RlNode *node)
{
  PipeNode *pn;

  for (guint g = 0; g < nodes->len; g++)
    if (((PipeNode *) g_ptr_array_index (nodes, g))->node == node)
      return g_ptr_array_index (nodes, g);
  pn = g_new0 (PipeNode, 1);
  pn->node = rl_node_ref (node);
  pn->cmds = g_array_new (FALSE, FALSE, sizeof (guint));
  g_ptr_array_add (nodes, pn);
  return pn;
}

/* Sends the @n commands of @cmds, pipelined on one connection per node that serves
 * some of them, all nodes at once: one write and one round trip of wall time. Commands
 * a node answered NOSCRIPT for go again by EVAL in a second exchange; commands
 * redirected (a slot migrating), answered "try again", or whose pooled connection had
 * gone stale, go one by one through call(), which follows the redirection or retries
 * on a fresh connection. With @wrote and replicas required, a WAIT follows each node's
 * commands (or each command sent alone whose reply @wrote says is a write). Bounded by
 * @timeout_ms as a whole (0: the command timeout). Each command ends with its reply or
 * its error. */
static void
pipeline (RlRedisStore *self, guint n, PipeCommand *cmds, RlWroteFunc wrote, gint64 timeout_ms)
{
  RlTopology *topology = self->topology;
  RedisLockRegistryStats *stats = self->parent.ctx->stats;
  gint64 budget_ms = timeout_ms > 0 ? timeout_ms : RL_ATOMIC_GET (self->parent.ctx->command_timeout_ms);
  gint64 deadline = g_get_monotonic_time () + budget_ms * 1000;
  g_autoptr (GPtrArray) nodes = g_ptr_array_new ();
  g_autofree RlConn **conns = NULL;
  g_autofree guint *expected = NULL;
  g_autofree gboolean *failed = NULL;
  g_autofree PipeNode **live = NULL;
  PipeReplies p = { NULL, cmds, wrote != NULL ? min_replicas (self) : 0 };

  for (guint i = 0; i < n; i++)
    {
      g_autoptr (RlNode) node = NULL;

      cmds[i].state = PIPE_UNSENT;
      cmds[i].reply = NULL;
      cmds[i].error = NULL;
      cmds[i].retried = cmds[i].unreplicated = FALSE;
      node = topology->vt->route (topology, cmds[i].route, &cmds[i].error);
      if (node == NULL)
        {
          cmds[i].state = PIPE_DONE;
          continue;
        }
      g_array_append_val (pipe_node_for (nodes, node)->cmds, i);
    }
  conns = g_new0 (RlConn *, nodes->len + 1);
  expected = g_new0 (guint, nodes->len + 1);
  failed = g_new0 (gboolean, nodes->len + 1);
  live = g_new0 (PipeNode *, nodes->len + 1);
  p.live = live;

  for (int round = 0; round < 2; round++)
    {
      guint wanted = round == 0 ? PIPE_UNSENT : PIPE_NOSCRIPT;
      guint n_live = 0, sent = 0;

      for (guint g = 0; g < nodes->len; g++)
        {
          PipeNode *pn = g_ptr_array_index (nodes, g);
          guint count = 0;

          for (guint k = 0; k < pn->cmds->len; k++)
            count += cmds[g_array_index (pn->cmds, guint, k)].state == wanted;
          if (count == 0)
            continue;
          if (pn->conn == NULL)
            {
              g_autoptr (GError) local_error = NULL;
              gint64 left_ms = MAX ((deadline - g_get_monotonic_time ()) / 1000, 1);
              pn->conn = rl_pool_get (pn->node->pool, round == 0 ? budget_ms : left_ms,
                                      &pn->reused, &local_error);
              if (pn->conn == NULL)
                {
                  topology->vt->failed (topology, pn->node);
                  for (guint k = 0; k < pn->cmds->len; k++)
                    {
                      PipeCommand *cmd = &cmds[g_array_index (pn->cmds, guint, k)];
                      if (cmd->state != wanted)
                        continue;
                      cmd->state = PIPE_DONE;
                      cmd->error = g_error_copy (local_error);
                    }
                  continue;
                }
            }
          for (guint k = 0; k < pn->cmds->len; k++)
            {
              PipeCommand *cmd = &cmds[g_array_index (pn->cmds, guint, k)];
              if (cmd->state != wanted)
                continue;
              if (cmd->script != NULL)
                {
                  cmd->argv[0] = round == 0 ? "EVALSHA" : "EVAL";
                  cmd->argv[1] = round == 0 ? cmd->script->sha : cmd->script->text;
                }
              rl_conn_append (pn->conn, cmd->argc, cmd->argv);
              cmd->state = PIPE_SENT;
            }
          pn->waited = p.min_replicas > 0;
          if (pn->waited)
            {
              char count_s[24], timeout_s[24];
              gint64 wait_ms = RL_ATOMIC_GET (self->parent.ctx->replica_timeout_ms);
              const char *wait[] = { "WAIT", count_s, timeout_s };
              rl_format_uint (count_s, p.min_replicas);
              rl_format_uint (timeout_s, MAX (MIN (wait_ms, budget_ms * 3 / 4), 1));
              rl_conn_append (pn->conn, 3, wait);
            }
          pn->next = 0;
          pn->sent = count;
          pn->answered = 0;
          conns[n_live] = pn->conn;
          expected[n_live] = count + (pn->waited ? 1 : 0);
          live[n_live++] = pn;
          sent += count + (pn->waited ? 1 : 0);
        }
      if (n_live == 0)
        break;
      RL_ATOMIC_ADD (stats->round_trips, 1);
      RL_ATOMIC_ADD (stats->commands, sent);
      if (n_live == 1)
        {
          /* One node (the common case): send, then read the replies in order, as a
           * single command is read; no poll for writability first. */
          failed[0] = FALSE;
          rl_conn_set_timeout (conns[0], MAX ((deadline - g_get_monotonic_time ()) / 1000, 1));
          for (guint r = 0; r < expected[0] && !failed[0]; r++)
            {
              redisReply *reply = NULL;
              if (rl_conn_get_reply (conns[0], &reply))
                on_pipe_reply (0, reply, &p);
              else
                failed[0] = TRUE;
            }
        }
      else
        rl_conns_exchange (conns, n_live, expected,
                           MAX ((deadline - g_get_monotonic_time ()) / 1000, 1), on_pipe_reply,
                           &p, failed);
      for (guint k = 0; k < n_live; k++)
        {
          PipeNode *pn = live[k];
          g_autoptr (GError) local_error = NULL;
          /* Nothing answered on a pooled connection the server had closed: the
           * commands are sent again, alone, on fresh ones. */
          gboolean stale = pn->reused && pn->answered == 0 && rl_conn_is_stale (pn->conn);

          if (!failed[k])
            continue;
          if (!stale)
            {
              g_autofree char *what = g_strdup_printf ("EVALSHA on %s", pn->node->name);
              rl_set_error_from_conn (&local_error, pn->conn, what);
              topology->vt->failed (topology, pn->node);
            }
          /* The WAIT did not answer: the writes count as unacknowledged. */
          pn->unreplicated = pn->waited;
          wait_shortfall = (RlWaitShortfall){ "", -1, -1 };
          for (guint j = 0; j < pn->cmds->len; j++)
            {
              PipeCommand *cmd = &cmds[g_array_index (pn->cmds, guint, j)];
              if (cmd->state != PIPE_SENT)
                continue;
              cmd->state = stale ? PIPE_ALONE : PIPE_DONE;
              if (!stale)
                cmd->error = g_error_copy (local_error);
            }
          rl_pool_put (pn->node->pool, pn->conn);
          pn->conn = NULL;
        }
    }

  for (guint g = 0; g < nodes->len; g++)
    {
      PipeNode *pn = g_ptr_array_index (nodes, g);
      for (guint k = 0; pn->unreplicated && k < pn->cmds->len; k++)
        cmds[g_array_index (pn->cmds, guint, k)].unreplicated = TRUE;
      if (pn->conn != NULL)
        rl_pool_put (pn->node->pool, pn->conn);
      rl_node_unref (pn->node);
      g_array_unref (pn->cmds);
      g_free (pn);
    }

  for (guint i = 0; i < n; i++)
    {
      PipeCommand *cmd = &cmds[i];
      gint64 left_ms = (deadline - g_get_monotonic_time ()) / 1000;
      gboolean acked = TRUE;

      /* A NOSCRIPT left over: its node failed before the second exchange. */
      if (cmd->state == PIPE_ALONE || cmd->state == PIPE_NOSCRIPT)
        {
          if (left_ms <= 0)
            g_set_error (&cmd->error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION,
                         "Redis did not answer the lock command for “%s” in time", cmd->route);
          else
            {
              cmd->reply = call (self, cmd->route, cmd->argc, cmd->argv, cmd->script, left_ms,
                                 &cmd->retried, wrote, &acked, &cmd->error);
              cmd->unreplicated = !acked;
            }
          cmd->state = PIPE_DONE;
        }
      if (cmd->reply != NULL && cmd->reply->type == REDIS_REPLY_ERROR)
        {
          g_set_error (&cmd->error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_REDIS,
                       "Redis lock script failed: %s", cmd->reply->str);
          g_clear_pointer (&cmd->reply, freeReplyObject);
        }
    }
}

static void
pipe_command_clear (PipeCommand *cmd)
{
  g_clear_pointer (&cmd->reply, freeReplyObject);
  g_clear_error (&cmd->error);
}

/* What a key is hashed by on a Cluster: its hash tag, or all of it. */
static char *
slot_source (const char *key)
{
  const char *open = strchr (key, '{');
  const char *close = open != NULL ? strchr (open + 1, '}') : NULL;

  if (close != NULL && close > open + 1)
    return g_strndup (open + 1, (gsize) (close - open - 1));
  return g_strdup (key);
}

static gboolean
wrote_all (const redisReply *reply)
{
  return reply->type == REDIS_REPLY_ARRAY && reply->elements > 0
         && reply->element[0]->type == REDIS_REPLY_INTEGER && reply->element[0]->integer == 0;
}

/* Reads the reply of ACQUIRE ALL for the items @idx of @items. FALSE when it makes no
 * sense (the items' outcome is unknown). */
static gboolean
read_acquire_all (const redisReply *reply, RlLeaseItem *items, const guint *idx, guint m)
{
  long long first;

  if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 2
      || reply->element[0]->type != REDIS_REPLY_INTEGER)
    return FALSE;
  first = reply->element[0]->integer;
  if (first == 0)
    {
      if (reply->elements != m + 1)
        return FALSE;
      for (guint j = 0; j < m; j++)
        {
          RlLeaseItem *item = &items[idx[j]];
          if (!reply_token (reply->element[j + 1], &item->token))
            return FALSE;
          item->result = RL_LEASE_OK;
        }
      return TRUE;
    }
  if (first < 1 || first > (long long) m || reply->element[1]->type != REDIS_REPLY_INTEGER)
    return FALSE;
  for (guint j = 0; j < m; j++)
    items[idx[j]].result = RL_LEASE_SKIPPED;
  items[idx[first - 1]].result = RL_LEASE_HELD;
  items[idx[first - 1]].pttl_ms = reply->element[1]->integer;
  return TRUE;
}

/* The most arguments one ACQUIRE ALL command is given: it bounds how many leases one
 * all-or-none group holds (5, with fencing 3), so that a script's work stays short. */
#define RL_ARGV_MAX 16

/* How a pipelined batch of acquisitions ended: with @first_error (propagated), or
 * NOT_REPLICATED when a lease was taken on the master alone (the caller releases it);
 * FALSE in both cases. */
static gboolean
acquisitions_failed (RlRedisStore *self, GError **first_error, gboolean unreplicated,
                     const char *key, GError **error)
{
  if (*first_error != NULL)
    {
      g_propagate_error (error, g_steal_pointer (first_error));
      return TRUE;
    }
  if (unreplicated)
    {
      set_not_replicated (self, error, "acquisition", key);
      return TRUE;
    }
  return FALSE;
}

/* The cheap way first, as a single acquisition goes: a plain `SET key value NX PX ttl`
 * per lease (no script runs), all pipelined, one round trip. TRUE when every lease was
 * taken (or with @error, when one failed); otherwise the leases it took are OK in
 * @items, the others SKIPPED, and @taken says which it took. */
static gboolean
acquire_many_plain (RlRedisStore *self, guint n, RlLeaseItem *items, const char *ttl,
                    gint64 timeout_ms, gboolean *taken, GError **error)
{
  g_autofree PipeCommand *cmds = g_new0 (PipeCommand, n);
  g_autofree const char **argvs = g_new0 (const char *, (gsize) n * 6);
  g_autoptr (GError) first_error = NULL;
  gboolean all = TRUE, unreplicated = FALSE;

  for (guint i = 0; i < n; i++)
    {
      const char **argv = argvs + (gsize) i * 6;

      argv[0] = "SET";
      argv[1] = items[i].key;
      argv[2] = items[i].value;
      argv[3] = "NX";
      argv[4] = "PX";
      argv[5] = ttl;
      cmds[i].route = items[i].key;
      cmds[i].argc = 6;
      cmds[i].argv = argv;
    }
  pipeline (self, n, cmds, wrote_set, timeout_ms);
  for (guint i = 0; i < n; i++)
    {
      PipeCommand *cmd = &cmds[i];

      taken[i] = cmd->reply != NULL && cmd->reply->type == REDIS_REPLY_STATUS;
      if (cmd->reply != NULL && !taken[i] && cmd->reply->type != REDIS_REPLY_NIL)
        g_set_error (&cmd->error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_REDIS,
                     "Redis lock command returned an unexpected reply (type %d)",
                     cmd->reply->type);
      items[i].result = taken[i] ? RL_LEASE_OK : cmd->error != NULL ? RL_LEASE_ERROR
                                                                    : RL_LEASE_SKIPPED;
      all = all && taken[i];
      unreplicated = unreplicated || (taken[i] && cmd->unreplicated);
      if (cmd->error != NULL && first_error == NULL)
        first_error = g_steal_pointer (&cmd->error);
      pipe_command_clear (cmd);
    }
  if (acquisitions_failed (self, &first_error, unreplicated, items[0].key, error))
    return TRUE;
  return all;
}

/* Without fencing and unless an earlier attempt met a held lease, the plain way first
 * (acquire_many_plain()); when that took every lease, done. Otherwise ACQUIRE ALL once
 * per atomic group: the leases on one server; on a Cluster, those whose keys hash alike
 * (the same hash tag, or the same key); each group on its slot's master, one pipeline
 * per master. The leases the plain way took hold our values, so the script finds them
 * ours already; when the script finds one held by another owner, they stay OK (taken)
 * for the caller to release. A group has at most as many leases as one command's
 * arguments can name (5, with fencing 3); a larger set is taken in several groups, all
 * in the same round trip, each all or none. */
static gboolean
redis_acquire_many (RlStore *store, guint n, RlLeaseItem *items, gint64 ttl_ms,
                    gint64 timeout_ms, gboolean contended, GError **error)
{
  RlRedisStore *self = (RlRedisStore *) store;
  gboolean fenced = n > 0 && items[0].fence_key != NULL;
  g_autofree gboolean *taken = g_new0 (gboolean, n);
  gint64 deadline = g_get_monotonic_time ()
                    + (timeout_ms > 0 ? timeout_ms : RL_ATOMIC_GET (store->ctx->command_timeout_ms))
                          * 1000;
  guint max_keys = (RL_ARGV_MAX - 5) / (fenced ? 3 : 2);
  g_autoptr (GHashTable) by_source = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  g_autoptr (GPtrArray) groups = g_ptr_array_new_with_free_func ((GDestroyNotify) g_array_unref);
  g_autofree PipeCommand *cmds = NULL;
  g_autoptr (GPtrArray) argvs = g_ptr_array_new_with_free_func (g_free);
  g_autoptr (GError) first_error = NULL;
  gboolean unreplicated = FALSE;
  char ttl[24];

  rl_format_uint (ttl, ttl_ms);
  for (guint i = 0; i < n; i++)
    {
      g_assert ((items[i].fence_key != NULL) == fenced);
      items[i].token = 0;
    }
  if (!fenced && !contended)
    {
      g_autoptr (GError) plain_error = NULL;

      if (acquire_many_plain (self, n, items, ttl, timeout_ms, taken, &plain_error))
        {
          if (plain_error == NULL)
            return TRUE;
          g_propagate_error (error, g_steal_pointer (&plain_error));
          return FALSE;
        }
      timeout_ms = MAX ((deadline - g_get_monotonic_time ()) / 1000, 1);
    }

  for (guint i = 0; i < n; i++)
    {
      char *source = g_strdup ("");
      GArray *group;

      items[i].result = RL_LEASE_ERROR;
      if (self->slotted)
        {
          g_free (source);
          source = slot_source (items[i].key);
        }
      group = g_hash_table_lookup (by_source, source);
      if (group == NULL || group->len == max_keys)
        {
          group = g_array_new (FALSE, FALSE, sizeof (guint));
          g_ptr_array_add (groups, group);
          g_hash_table_replace (by_source, g_strdup (source), group);
        }
      g_free (source);
      g_array_append_val (group, i);
    }

  cmds = g_new0 (PipeCommand, groups->len);
  for (guint g = 0; g < groups->len; g++)
    {
      GArray *group = g_ptr_array_index (groups, g);
      guint m = group->len;
      int argc = 3 + (int) (fenced ? 2 * m : m) + 2 + (int) m;
      const char **argv = g_new0 (const char *, argc);
      char *numkeys = g_strdup_printf ("%u", fenced ? 2 * m : m);
      int a = 0;

      g_ptr_array_add (argvs, argv);
      g_ptr_array_add (argvs, numkeys);
      argv[a++] = "EVALSHA";
      argv[a++] = self->acquire_all.sha;
      argv[a++] = numkeys;
      for (guint j = 0; j < m; j++)
        argv[a++] = items[g_array_index (group, guint, j)].key;
      for (guint j = 0; fenced && j < m; j++)
        argv[a++] = items[g_array_index (group, guint, j)].fence_key;
      argv[a++] = ttl;
      argv[a++] = fenced ? "1" : "0";
      for (guint j = 0; j < m; j++)
        argv[a++] = items[g_array_index (group, guint, j)].value;
      cmds[g].script = &self->acquire_all;
      cmds[g].route = items[g_array_index (group, guint, 0)].key;
      cmds[g].argc = argc;
      cmds[g].argv = argv;
    }
  pipeline (self, groups->len, cmds, wrote_all, timeout_ms);

  for (guint g = 0; g < groups->len; g++)
    {
      GArray *group = g_ptr_array_index (groups, g);
      const guint *idx = (const guint *) group->data;
      PipeCommand *cmd = &cmds[g];

      if (cmd->reply != NULL && !read_acquire_all (cmd->reply, items, idx, group->len))
        {
          g_set_error (&cmd->error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_REDIS,
                       "Redis lock script returned an unexpected reply (type %d)",
                       cmd->reply->type);
          for (guint j = 0; j < group->len; j++)
            items[idx[j]].result = RL_LEASE_ERROR;
        }
      else if (cmd->reply != NULL && cmd->unreplicated && wrote_all (cmd->reply))
        /* Taken on the master alone: the caller releases them. */
        unreplicated = TRUE;
      /* Taken by the plain way, not by the script: still ours, to be released. */
      for (guint j = 0; cmd->reply != NULL && j < group->len; j++)
        if (taken[idx[j]] && items[idx[j]].result == RL_LEASE_SKIPPED)
          items[idx[j]].result = RL_LEASE_OK;
      if (cmd->error != NULL && first_error == NULL)
        first_error = g_steal_pointer (&cmd->error);
      pipe_command_clear (cmd);
    }
  return !acquisitions_failed (self, &first_error, unreplicated, items[0].key, error);
}

/* RELEASE of each item, pipelined: one round trip per node. */
static gboolean
redis_release_many (RlStore *store, guint n, RlLeaseItem *items, GError **error)
{
  RlRedisStore *self = (RlRedisStore *) store;
  g_autofree PipeCommand *cmds = g_new0 (PipeCommand, n);
  g_autofree const char **argvs = g_new0 (const char *, (gsize) n * 9);
  g_autoptr (GPtrArray) channels = g_ptr_array_new_with_free_func (g_free);
  g_autoptr (GError) first_error = NULL;
  char own[2];
  const char *legacy = release_legacy (self, own);

  for (guint i = 0; i < n; i++)
    {
      const char **argv = argvs + (gsize) i * 9;
      char *channel = g_strconcat (self->channel_prefix, items[i].key, NULL);

      g_ptr_array_add (channels, channel);
      argv[2] = "1";
      argv[3] = items[i].key;
      argv[4] = items[i].value;
      argv[5] = channel;
      argv[6] = own;
      argv[7] = "0";
      argv[8] = legacy;
      cmds[i].script = &self->release;
      cmds[i].route = items[i].key;
      cmds[i].argc = legacy != NULL ? 9 : 7;
      cmds[i].argv = argv;
    }
  pipeline (self, n, cmds, NULL, 0);

  for (guint i = 0; i < n; i++)
    {
      RlLeaseItem *item = &items[i];
      PipeCommand *cmd = &cmds[i];
      long long result;

      item->others = FALSE;
      item->result = RL_LEASE_ERROR;
      if (cmd->reply != NULL && cmd->reply->type != REDIS_REPLY_INTEGER)
        g_set_error (&cmd->error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_REDIS,
                     "Redis lock script returned an unexpected reply (type %d)",
                     cmd->reply->type);
      else if (cmd->reply != NULL)
        {
          result = cmd->reply->integer;
          item->others = release_heard (self, result, g_ptr_array_index (channels, i));
          item->result = release_outcome (result, cmd->retried, item->key, &cmd->error);
          if (item->result == RL_LEASE_OK)
            remember_release (self);
        }
      if (cmd->error != NULL && first_error == NULL)
        first_error = g_steal_pointer (&cmd->error);
      pipe_command_clear (cmd);
    }
  if (first_error != NULL)
    {
      g_propagate_error (error, g_steal_pointer (&first_error));
      return FALSE;
    }
  return TRUE;
}

/* The leases of one batch that one node serves, and the connection they go on. */
typedef struct
{
  RlNode *node;
  RlConn *conn;
  GArray *items; /* guint: indexes into the batch, in the order they are sent */
  guint next;    /* the position in items where the next reply's lease is looked for */
  guint sent;    /* leases sent in the exchange under way */
  guint answered; /* of them, answered: the reply after the last is WAIT's */
  gboolean unreplicated; /* a WAIT counted too few replicas */
} Group;

/* Where each lease of a batch stands. */
enum
{
  ITEM_UNSENT,
  ITEM_SENT,     /* in the exchange under way */
  ITEM_DONE,     /* results[i] is final */
  ITEM_NOSCRIPT, /* to be sent again by EVAL */
  ITEM_ROUTE,    /* redirected or "try again": to be renewed alone through call() */
};

typedef struct
{
  Group **groups; /* the groups of the exchange, by connection index */
  guint8 *state;
  RlLeaseResult *results;
  gint64 min_replicas;
} BatchReplies;

static void
on_batch_reply (guint g, redisReply *reply, gpointer user_data)
{
  BatchReplies *b = user_data;
  Group *group = b->groups[g];
  guint i;

  if (group->answered == group->sent)
    {
      /* WAIT, after the renewals. */
      if (reply->type != REDIS_REPLY_INTEGER || reply->integer < b->min_replicas)
        group->unreplicated = TRUE;
      freeReplyObject (reply);
      return;
    }
  group->answered++;
  /* Replies come in the order the leases were sent; leases not sent in this exchange
   * have no reply. */
  do
    i = g_array_index (group->items, guint, group->next++);
  while (b->state[i] != ITEM_SENT);
  b->state[i] = ITEM_DONE;
  if (reply->type == REDIS_REPLY_INTEGER)
    b->results[i] = reply->integer == 1 ? RL_LEASE_OK : RL_LEASE_LOST;
  else if (is_noscript (reply))
    b->state[i] = ITEM_NOSCRIPT;
  else if (is_reroute (reply))
    b->state[i] = ITEM_ROUTE;
  freeReplyObject (reply);
}

/* Groups the leases of a batch by the node that serves each; a lease no node serves
 * stays unconfirmed. */
static GPtrArray *
group_by_node (RlTopology *topology, guint n, const char *const *keys, GError **first_error)
{
  GPtrArray *groups = g_ptr_array_new ();

  for (guint i = 0; i < n; i++)
    {
      g_autoptr (GError) local_error = NULL;
      g_autoptr (RlNode) node = topology->vt->route (topology, keys[i], &local_error);
      Group *group = NULL;

      if (node == NULL)
        {
          if (*first_error == NULL)
            *first_error = g_steal_pointer (&local_error);
          continue;
        }
      for (guint g = 0; g < groups->len && group == NULL; g++)
        if (((Group *) g_ptr_array_index (groups, g))->node == node)
          group = g_ptr_array_index (groups, g);
      if (group == NULL)
        {
          group = g_new0 (Group, 1);
          group->node = rl_node_ref (node);
          group->items = g_array_new (FALSE, FALSE, sizeof (guint));
          g_ptr_array_add (groups, group);
        }
      g_array_append_val (group->items, i);
    }
  return groups;
}

/* Renews the leases in one pipelined batch per node that serves some of them (one on
 * a single server, one per master on a Cluster), all nodes at once: one write and
 * one round trip of wall time. Leases a node answered NOSCRIPT for are sent again by
 * EVAL in a second exchange; leases that were redirected (a slot migrating) or met a
 * "try again" answer are renewed one by one through call(), which follows the
 * redirection. A node that cannot be reached leaves its leases unconfirmed
 * (RL_LEASE_ERROR); the batch fails as a whole only when no node answered. */
static gboolean
redis_renew_batch (RlStore *store, guint n, const char *const *keys, const char *const *values,
                   const gint64 *ttls, RlLeaseResult *results, gint64 timeout_ms,
                   guint *round_trips, GError **error)
{
  RlRedisStore *self = (RlRedisStore *) store;
  RlTopology *topology = self->topology;
  RedisLockRegistryStats *stats = store->ctx->stats;
  g_autoptr (GError) first_error = NULL;
  g_autofree guint8 *state = g_new0 (guint8, n);
  gint64 deadline = g_get_monotonic_time () + timeout_ms * 1000;
  g_autoptr (GPtrArray) groups = NULL;
  g_autofree RlConn **conns = NULL;
  g_autofree guint *expected = NULL;
  g_autofree gboolean *failed = NULL;
  g_autofree Group **live = NULL;
  BatchReplies b = { NULL, state, results, min_replicas (self) };
  gboolean answered = FALSE;

  *round_trips = 0;
  for (guint i = 0; i < n; i++)
    results[i] = RL_LEASE_ERROR;
  if (n == 0)
    return TRUE;
  groups = group_by_node (topology, n, keys, &first_error);
  conns = g_new0 (RlConn *, groups->len + 1);
  expected = g_new0 (guint, groups->len + 1);
  failed = g_new0 (gboolean, groups->len + 1);
  live = g_new0 (Group *, groups->len + 1);
  b.groups = live;

  for (int round = 0; round < 2; round++)
    {
      guint wanted = round == 0 ? ITEM_UNSENT : ITEM_NOSCRIPT;
      guint n_live = 0, sent = 0;

      for (guint g = 0; g < groups->len; g++)
        {
          Group *group = g_ptr_array_index (groups, g);
          guint count = 0;

          for (guint k = 0; k < group->items->len; k++)
            count += state[g_array_index (group->items, guint, k)] == wanted;
          if (count == 0)
            continue;
          if (group->conn == NULL)
            {
              g_autoptr (GError) local_error = NULL;
              gboolean reused;
              group->conn = rl_pool_get (group->node->pool, MAX (timeout_ms, 1), &reused,
                                         &local_error);
              if (group->conn == NULL)
                {
                  topology->vt->failed (topology, group->node);
                  if (first_error == NULL)
                    first_error = g_steal_pointer (&local_error);
                  continue;
                }
            }
          for (guint k = 0; k < group->items->len; k++)
            {
              guint i = g_array_index (group->items, guint, k);
              char ttl[24];
              const char *argv[6] = { round == 0 ? "EVALSHA" : "EVAL",
                                      round == 0 ? self->renew.sha : self->renew.text,
                                      "1",
                                      keys[i],
                                      values[i],
                                      ttl };
              if (state[i] != wanted)
                continue;
              rl_format_uint (ttl, ttls[i]);
              rl_conn_append (group->conn, 6, argv);
              state[i] = ITEM_SENT;
            }
          if (b.min_replicas > 0)
            {
              /* Every renewal above is acknowledged, or the group counts as unconfirmed. */
              char count_s[24], timeout_s[24];
              gint64 wait_ms = RL_ATOMIC_GET (store->ctx->replica_timeout_ms);
              const char *wait[] = { "WAIT", count_s, timeout_s };
              rl_format_uint (count_s, b.min_replicas);
              rl_format_uint (timeout_s, MAX (MIN (wait_ms, timeout_ms * 3 / 4), 1));
              rl_conn_append (group->conn, 3, wait);
            }
          group->next = 0;
          group->sent = count;
          group->answered = 0;
          conns[n_live] = group->conn;
          expected[n_live] = count + (b.min_replicas > 0 ? 1 : 0);
          live[n_live++] = group;
          sent += count;
        }
      if (n_live == 0)
        break;
      RL_ATOMIC_ADD (stats->round_trips, 1);
      RL_ATOMIC_ADD (stats->commands, sent);
      (*round_trips)++;
      rl_conns_exchange (conns, n_live, expected,
                         MAX ((deadline - g_get_monotonic_time ()) / 1000, 1), on_batch_reply, &b,
                         failed);
      for (guint k = 0; k < n_live; k++)
        {
          Group *group = live[k];
          if (!failed[k])
            {
              answered = TRUE;
              continue;
            }
          if (first_error == NULL)
            {
              g_autofree char *what = g_strdup_printf ("Renewing leases on %s", group->node->name);
              rl_set_error_from_conn (&first_error, group->conn, what);
            }
          topology->vt->failed (topology, group->node);
          for (guint j = 0; j < group->items->len; j++)
            {
              guint i = g_array_index (group->items, guint, j);
              if (state[i] == ITEM_SENT)
                state[i] = ITEM_DONE;
            }
          rl_pool_put (group->node->pool, group->conn);
          group->conn = NULL;
        }
    }

  for (guint g = 0; g < groups->len; g++)
    {
      Group *group = g_ptr_array_index (groups, g);
      /* Renewed on the master alone: a failover now could lose them. */
      for (guint k = 0; group->unreplicated && k < group->items->len; k++)
        {
          guint i = g_array_index (group->items, guint, k);
          if (results[i] == RL_LEASE_OK)
            results[i] = RL_LEASE_ERROR;
        }
      if (group->conn != NULL)
        rl_pool_put (group->node->pool, group->conn);
      rl_node_unref (group->node);
      g_array_unref (group->items);
      g_free (group);
    }

  /* Leases of a slot on the move: one by one, following the redirection. */
  for (guint i = 0; i < n; i++)
    {
      g_autoptr (GError) local_error = NULL;
      if (state[i] != ITEM_ROUTE || g_get_monotonic_time () >= deadline)
        continue;
      (*round_trips)++;
      results[i] = redis_renew (store, keys[i], values[i], ttls[i], &local_error);
      answered = answered || results[i] != RL_LEASE_ERROR;
    }

  if (!answered && first_error != NULL)
    {
      g_propagate_error (error, g_steal_pointer (&first_error));
      return FALSE;
    }
  return TRUE;
}

static gboolean
redis_watch (RlStore *store, gint64 timeout_ms)
{
  return rl_notifier_watch (((RlRedisStore *)store)->notifier, timeout_ms);
}

static void
redis_rewatch (RlStore *store)
{
  RlRedisStore *self = (RlRedisStore *) store;

  rl_notifier_restart (self->notifier);
}

/* The notification connection is that guard: it breaks when the server restarts or
 * the connection is reset, PINGs while silent, and moves with a failover; each time
 * it goes down or comes back it reports released (NULL, reset). */
static gboolean
redis_guard (RlStore *store)
{
  return rl_notifier_guard (((RlRedisStore *) store)->notifier);
}

static void
redis_close (RlStore *store)
{
  RlRedisStore *self = (RlRedisStore *) store;

  if (self->notifier != NULL)
    rl_notifier_stop (self->notifier);
  if (self->topology != NULL)
    self->topology->vt->close (self->topology);
}

static void
redis_free (RlStore *store)
{
  RlRedisStore *self = (RlRedisStore *)store;

  rl_notifier_free (self->notifier);
  rl_topology_free (self->topology);
  g_free (self->channel_prefix);
  g_free (self->forced_channel);
  g_free (self->legacy_channel);
  rl_mutex_clear (&self->recent_mutex);
  g_free (self);
}

/* GET and PTTL of @key, pipelined on @conn: TRUE with both when it exists. A key that
 * is not a string is no lease: with @skip_others it is passed over (*exists FALSE),
 * otherwise it is an error. */
static gboolean
read_lease (RlConn *conn, const char *key, gboolean skip_others, char **value, gint64 *pttl_ms,
            gboolean *exists, GError **error)
{
  const char *get[] = { "GET", key };
  const char *pttl[] = { "PTTL", key };
  redisReply *replies[2] = { NULL, NULL };
  gboolean ok = TRUE;

  rl_conn_append (conn, 2, get);
  rl_conn_append (conn, 2, pttl);
  for (int i = 0; i < 2; i++)
    if (!rl_conn_get_reply (conn, &replies[i]))
      {
        rl_set_error_from_conn (error, conn, "Reading a lock");
        ok = FALSE;
        break;
      }
  /* Passed over in a listing: a key that is no string, and a key whose slot moved
   * away after SCAN found it (its new owner lists it). */
  if (ok && skip_others && replies[0]->type == REDIS_REPLY_ERROR
      && (g_str_has_prefix (replies[0]->str, "WRONGTYPE")
          || g_str_has_prefix (replies[0]->str, "MOVED ")
          || g_str_has_prefix (replies[0]->str, "ASK ")))
    {
      *exists = FALSE;
      freeReplyObject (replies[0]);
      freeReplyObject (replies[1]);
      return TRUE;
    }
  if (ok && (replies[0]->type == REDIS_REPLY_ERROR || replies[1]->type != REDIS_REPLY_INTEGER))
    {
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_REDIS, "Reading lock “%s”: %s", key,
                   replies[0]->type == REDIS_REPLY_ERROR ? replies[0]->str : "unexpected reply");
      ok = FALSE;
    }
  /* A key that vanished between GET and PTTL (-2) was released. */
  *exists = ok && replies[0]->type == REDIS_REPLY_STRING && replies[1]->integer != -2;
  if (*exists)
    {
      *value = g_strndup (replies[0]->str, replies[0]->len);
      *pttl_ms = replies[1]->integer;
    }
  for (int i = 0; i < 2; i++)
    if (replies[i] != NULL)
      freeReplyObject (replies[i]);
  return ok;
}

/* GET, then PTTL, each routed to the key's node (following a migration). */
static RlLeaseResult
redis_force_release (RlStore *store, const char *key, GError **error)
{
  RlRedisStore *self = (RlRedisStore *) store;
  g_autofree char *channel = g_strconcat (self->channel_prefix, key, NULL);
  const char *legacy = g_atomic_int_get (&self->parent.ctx->legacy_channel) ? self->legacy_channel
                                                                            : "";
  const char *argv[8] = { "EVALSHA", self->force_release.sha, "1", key, channel,
                          self->forced_channel, legacy, NULL };
  redisReply *reply = run_script_argv (self, &self->force_release, 7, argv, 0, NULL, NULL, NULL,
                                       error);
  gboolean deleted;

  if (reply == NULL)
    return RL_LEASE_ERROR;
  deleted = reply->integer == 1;
  freeReplyObject (reply);
  return deleted ? RL_LEASE_OK : RL_LEASE_LOST;
}

static gboolean
redis_inspect (RlStore *store, const char *key, char **value, gint64 *pttl_ms, GError **error)
{
  RlRedisStore *self = (RlRedisStore *) store;
  const char *get[] = { "GET", key };
  const char *pttl[] = { "PTTL", key };
  redisReply *reply = call (self, key, 2, get, NULL, 0, NULL, NULL, NULL, error);
  gboolean exists;

  if (reply == NULL)
    return FALSE;
  if (reply->type != REDIS_REPLY_STRING)
    {
      if (reply->type != REDIS_REPLY_NIL)
        g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_REDIS,
                     "Reading lock “%s”: unexpected reply", key);
      freeReplyObject (reply);
      return FALSE;
    }
  *value = g_strndup (reply->str, reply->len);
  freeReplyObject (reply);
  reply = call (self, key, 2, pttl, NULL, 0, NULL, NULL, NULL, error);
  /* A key that vanished between GET and PTTL (-2) was released. */
  exists = reply != NULL && reply->type == REDIS_REPLY_INTEGER && reply->integer != -2;
  if (exists)
    *pttl_ms = reply->integer;
  else
    g_clear_pointer (value, g_free);
  if (reply != NULL)
    freeReplyObject (reply);
  return exists;
}

/* GET of the counter, routed to its node. */
static gboolean
redis_read_counter (RlStore *store, const char *fence_key, guint64 *value, GError **error)
{
  RlRedisStore *self = (RlRedisStore *) store;
  const char *get[] = { "GET", fence_key };
  redisReply *reply = call (self, fence_key, 2, get, NULL, 0, NULL, NULL, NULL, error);
  gboolean exists;

  *value = 0;
  if (reply == NULL)
    return FALSE;
  exists = reply->type == REDIS_REPLY_STRING;
  if (exists && !g_ascii_string_to_unsigned (reply->str, 10, 0, G_MAXUINT64, value, NULL))
    {
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_REDIS,
                   "The fencing counter “%s” does not hold a number", fence_key);
      exists = FALSE;
    }
  else if (!exists && reply->type != REDIS_REPLY_NIL)
    g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_REDIS,
                 "Reading the fencing counter “%s”: unexpected reply", fence_key);
  freeReplyObject (reply);
  return exists;
}

static char *glob_escape (const char *prefix);

/* SCAN @node for @pattern, then GET + PTTL of each key found. */
static gboolean
list_node (RlStore *store, RlNode *node, const char *pattern, GArray *entries, GError **error)
{
  g_autofree char *cursor = g_strdup ("0");
  gboolean reused, ok = TRUE;
  RlConn *conn = rl_pool_get (node->pool, 0, &reused, error);

  if (conn == NULL)
    return FALSE;
  do
    {
      const char *scan[] = { "SCAN", cursor, "MATCH", pattern, "COUNT", "1000" };
      redisReply *reply = rl_conn_roundtrip (conn, 6, scan);

      RL_ATOMIC_ADD (store->ctx->stats->round_trips, 1);
      if (reply == NULL)
        {
          rl_set_error_from_conn (error, conn, "Listing locks");
          ok = FALSE;
          break;
        }
      if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2
          || reply->element[0]->type != REDIS_REPLY_STRING
          || reply->element[1]->type != REDIS_REPLY_ARRAY)
        {
          g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_REDIS,
                       "Listing locks: unexpected reply to SCAN%s%s",
                       reply->type == REDIS_REPLY_ERROR ? ": " : "",
                       reply->type == REDIS_REPLY_ERROR ? reply->str : "");
          freeReplyObject (reply);
          ok = FALSE;
          break;
        }
      g_free (cursor);
      cursor = g_strdup (reply->element[0]->str);
      for (size_t i = 0; ok && i < reply->element[1]->elements; i++)
        {
          redisReply *k = reply->element[1]->element[i];
          RlStoreEntry e = { NULL, NULL, 0 };
          gboolean exists;

          /* A key with a NUL byte is no lock of ours. */
          if (k->type != REDIS_REPLY_STRING || strlen (k->str) != k->len)
            continue;
          ok = read_lease (conn, k->str, TRUE, &e.value, &e.pttl_ms, &exists, error);
          if (ok && exists)
            {
              e.key = g_strdup (k->str);
              g_array_append_val (entries, e);
            }
        }
      freeReplyObject (reply);
    }
  while (ok && strcmp (cursor, "0") != 0);
  rl_pool_put (node->pool, conn);
  return ok;
}

/* Every master's keys `registry_key:*` (on a Cluster, each master holds its slots'). */
static gboolean
redis_list (RlStore *store, GArray *entries, GError **error)
{
  RlRedisStore *self = (RlRedisStore *) store;
  g_autofree char *prefix = g_strconcat (store->registry_key, ":", NULL);
  g_autofree char *pattern = glob_escape (prefix);
  g_autoptr (GPtrArray) masters = self->topology->vt->masters (self->topology, error);

  if (masters == NULL)
    return FALSE;
  for (guint i = 0; i < masters->len; i++)
    if (!list_node (store, g_ptr_array_index (masters, i), pattern, entries, error))
      return FALSE;
  return TRUE;
}

/* Stepwise requests -------------------------------------------------------------- */

/* The command each lease of a stepwise request is sent next. */
enum
{
  STEP_SET,     /* acquire: SET NX PX, the fast path of redis_acquire() */
  STEP_EVALSHA, /* the kind's script by EVALSHA (acquire: the key existed) */
  STEP_EVAL,    /* the kind's script by EVAL, after NOSCRIPT */
  STEP_DONE,    /* the lease's result is final */
};

/* The requests of redis_request_begin(): the leases of one request on one node, on
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
  req->waited = count > 0 && req->kind != RL_REQUEST_RELEASE && min_replicas (self) > 0;
  if (req->waited)
    {
      char count_s[24], timeout_s[24];
      gint64 wait_ms = RL_ATOMIC_GET (ctx->replica_timeout_ms);
      const char *wait[] = { "WAIT", count_s, timeout_s };

      rl_format_uint (count_s, min_replicas (self));
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
      gboolean acked = reply->type == REDIS_REPLY_INTEGER && reply->integer >= min_replicas (req->self);
      if (!acked)
        {
          g_strlcpy (wait_shortfall.node, req->node->name, sizeof wait_shortfall.node);
          wait_shortfall.acked = reply->type == REDIS_REPLY_INTEGER ? reply->integer : -1;
          wait_shortfall.connected = -1;
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

      if (req->step[i] == STEP_EVALSHA && is_noscript (reply))
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
          item->others = release_heard (req->self, result, req->channels[i]);
          {
            GError *lost_error = NULL;

            item->result = release_outcome (result, req->retried, item->key, &lost_error);
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
       * sent again, once, on a fresh one, as call() does. */
      gboolean stale = req->reused && !req->retried && req->answered == 0 && rl_conn_is_stale (conn);
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

static void
redis_request_ready (RlRequest *request, short revents)
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

static gboolean
redis_request_end (RlRequest *request, GError **error)
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
          set_not_replicated (req->self, &e,
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
static RlRequest *
redis_request_begin (RlStore *store, RlRequestKind kind, guint n, RlLeaseItem *items,
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
      req->legacy = release_legacy (self, req->own);
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
      redis_request_end (&req->pub, NULL);
      g_propagate_error (error, g_steal_pointer (&local_error));
      return NULL;
    }
  request_queue (req);
  request_send (req);
  return &req->pub;
}

/* For the lock family's files (redis-store.h) ------------------------------------ */

redisReply *
rl_redis_store_eval (RlStore *store, const RlScript *script, int argc, const char **argv,
                     gint64 timeout_ms, gboolean *acked, GError **error)
{
  return call_tracked ((RlRedisStore *) store, argv[3], argc, argv, script, timeout_ms, NULL,
                       wrote_acquire, acked, TRUE, error);
}

RlLeaseResult
rl_redis_store_unreplicated (RlStore *store, const char *key, const char *value, GError **error)
{
  return unreplicated_acquisition ((RlRedisStore *) store, key, value, error);
}

char *
rl_redis_store_channel (RlStore *store, const char *key)
{
  return g_strconcat (((RlRedisStore *) store)->channel_prefix, key, NULL);
}

/* The waits-for records: the script of redis-waits.c on the registry key's hash. */
static gboolean
redis_waits_update (RlStore *store, const char *id, const char *record, gint64 ttl_ms,
                    GPtrArray *records, GError **error)
{
  RlRedisStore *self = (RlRedisStore *) store;
  g_autofree char *key = rl_store_waits_key (store->registry_key);
  const char *argv[8];
  char ttl_text[24];
  redisReply *reply;
  gboolean ok;

  rl_redis_waits_argv (argv, key, id, record, ttl_ms, records != NULL, ttl_text);
  reply = call (self, key, 8, argv, &self->waits, 0, NULL, NULL, NULL, error);
  if (reply == NULL)
    return FALSE;
  ok = rl_redis_waits_read_reply (reply, records, error);
  freeReplyObject (reply);
  return ok;
}

static const RlStoreVTable redis_store_vtable = {
  .acquire = redis_acquire,
  .acquire_many = redis_acquire_many,
  .renew = redis_renew,
  .release = redis_release,
  .release_many = redis_release_many,
  .renew_batch = redis_renew_batch,
  .force_release = redis_force_release,
  .inspect = redis_inspect,
  .read_counter = redis_read_counter,
  .list = redis_list,
  .request_begin = redis_request_begin,
  .request_ready = redis_request_ready,
  .request_end = redis_request_end,
  .watch = redis_watch,
  .rewatch = redis_rewatch,
  .guard = redis_guard,
  /* semaphores: redis-semaphore.c */
  .semaphore_acquire = rl_redis_semaphore_acquire,
  .semaphore_available = rl_redis_semaphore_available,
  /* read-write locks (redis-rwlock.c) */
  .rw_acquire = rl_redis_rw_acquire,
  .rw_stop_waiting = rl_redis_rw_stop_waiting,
  /* waits-for records (redis-waits.c) */
  .waits_update = redis_waits_update,
  .close = redis_close,
  .free = redis_free,
};

/* The subscription pattern `prefix*`, with the glob characters of @prefix escaped so
 * that a registry key containing `*`, `?` or `[` matches only itself. */
static char *
glob_escape (const char *prefix)
{
  GString *out = g_string_new (NULL);

  for (const char *p = prefix; *p != '\0'; p++)
    {
      if (strchr ("*?[]\\", *p) != NULL)
        g_string_append_c (out, '\\');
      g_string_append_c (out, *p);
    }
  g_string_append_c (out, '*');
  return g_string_free (out, FALSE);
}

/* Checks a node now, so that redis_lock_registry_new() fails early and clearly:
 * connect, AUTH, SELECT, then in one round trip load the three scripts (so the first
 * watchdog tick or release does not pay a NOSCRIPT retry) and PING. A server that
 * refuses SCRIPT LOAD still works: EVALSHA falls back to EVAL. The connection stays
 * in the pool for the first lock. */
static gboolean
check_node (RlRedisStore *self, RlNode *node, GError **error)
{
  const RlScript *scripts[] = { &self->acquire,        &self->release,    &self->renew,
                                &self->fenced_acquire, &self->acquire_all };
  const char *ping[] = { "PING" };
  gboolean reused;
  RlConn *conn = rl_pool_get (node->pool, 0, &reused, error);
  redisReply *reply = NULL;

  if (conn == NULL)
    return FALSE;
  for (gsize i = 0; i < G_N_ELEMENTS (scripts); i++)
    {
      const char *load[] = { "SCRIPT", "LOAD", scripts[i]->text };
      rl_conn_append (conn, 3, load);
    }
  rl_conn_append (conn, 1, ping);
  for (gsize i = 0; i <= G_N_ELEMENTS (scripts); i++)
    {
      if (!rl_conn_get_reply (conn, &reply))
        {
          g_autofree char *what = g_strdup_printf ("Checking the Redis server at %s", node->name);
          rl_set_error_from_conn (error, conn, what);
          rl_pool_put (node->pool, conn);
          return FALSE;
        }
      if (i < G_N_ELEMENTS (scripts))
        {
          if (reply->type == REDIS_REPLY_ERROR)
            g_debug ("SCRIPT LOAD refused (%s); scripts will be sent by EVAL", reply->str);
          freeReplyObject (reply);
        }
    }
  rl_pool_put (node->pool, conn);
  RL_ATOMIC_ADD (self->parent.ctx->stats->round_trips, 1);
  RL_ATOMIC_ADD (self->parent.ctx->stats->commands, G_N_ELEMENTS (scripts) + 1);
  if (reply->type == REDIS_REPLY_ERROR)
    {
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_REDIS,
                   "Redis at %s refused PING: %s", node->name, reply->str);
      freeReplyObject (reply);
      return FALSE;
    }
  freeReplyObject (reply);
  return TRUE;
}

/* The topology says the deployment changed (a failover): waiters and the watchdog are
 * told that any lease may have gone (the registry then checks every held lease at
 * once), and the subscription moves to the new master when it must. */
static void
on_topology_changed (gpointer user_data, gboolean resubscribe)
{
  RlRedisStore *self = user_data;

  if (resubscribe)
    {
      count_doubtful_releases (self);
      rl_notifier_restart (self->notifier);
    }
  self->parent.released (NULL, TRUE, self->parent.released_data);
}

RlStore *
rl_redis_store_open (const char *url, const char *registry_key, const char *client_id,
                     RlStoreContext *ctx, RlStoreReleasedFunc released, gpointer released_data,
                     GError **error)
{
  RlUrl parsed;
  RlRedisStore *self;
  g_autofree char *pattern = NULL;
  g_autofree char *track_prefix = NULL;
  g_autofree char *key_prefix = NULL;
  g_autoptr (GPtrArray) masters = NULL;

  if (!rl_url_parse (url, &parsed, error))
    return NULL;

  self = g_new0 (RlRedisStore, 1);
  self->parent.vt = &redis_store_vtable;
  self->parent.client_id = g_strdup (client_id);
  self->parent.registry_key = g_strdup (registry_key);
  self->parent.ctx = ctx;
  self->parent.released = released;
  self->parent.released_data = released_data;
  self->channel_prefix = g_strconcat (registry_key, "-channel:", NULL);
  self->forced_channel = g_strconcat (registry_key, "-forced", NULL);
  self->legacy_channel = g_strconcat (registry_key, "-channel", NULL);
  rl_redis_script_init (&self->acquire, acquire_script);
  rl_redis_script_init (&self->release, release_script);
  rl_redis_script_init (&self->renew, renew_script);
  rl_redis_script_init (&self->fenced_acquire, fenced_acquire_script);
  rl_redis_script_init (&self->acquire_all, acquire_all_script);
  rl_redis_script_init (&self->force_release, force_release_script);
  rl_redis_script_init (&self->waits, rl_redis_waits_script);
  self->slotted = parsed.kind == RL_TOPOLOGY_CLUSTER;
  self->sentinel = parsed.kind == RL_TOPOLOGY_SENTINEL;
  rl_mutex_init (&self->recent_mutex);
  self->topology = rl_topology_open (&parsed, ctx, on_topology_changed, self, error);
  rl_url_clear (&parsed);
  if (self->topology == NULL)
    {
      rl_store_free (&self->parent);
      return NULL;
    }
  pattern = glob_escape (self->channel_prefix);
  /* Key tracking reports the keys of the node it runs on only: on a Cluster the one
   * subscriber would hear of a fraction of them, so waiters there rely on
   * notifications and TTLs alone. */
  key_prefix = g_strconcat (registry_key, ":", NULL);
  track_prefix = self->slotted ? NULL : g_strdup (key_prefix);
  self->notifier = rl_notifier_new (&self->parent, self->topology, pattern, self->forced_channel,
                                    self->legacy_channel, key_prefix, track_prefix);

  masters = self->topology->vt->masters (self->topology, error);
  for (guint i = 0; masters != NULL && i < masters->len; i++)
    if (!check_node (self, g_ptr_array_index (masters, i), error))
      g_clear_pointer (&masters, g_ptr_array_unref);
  if (masters == NULL)
    {
      rl_store_free (&self->parent);
      return NULL;
    }
  return &self->parent;
}
