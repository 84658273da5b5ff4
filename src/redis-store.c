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
 */
#include "config.h"

#include <string.h>

#include "connection.h"
#include "store.h"
#include "sync.h"
#include "notify.h"

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

/* RELEASE: KEYS[1] = lock key, ARGV[1] = the hold's value, ARGV[2] = notification channel,
 * ARGV[3] = how many of the receivers are our own subscription (0 or 1), ARGV[4]
 * (optional) = a TTL in ms to keep the lease with when nobody else listens.
 * Gone or foreign: touches nothing and returns 0 (the lease was lost). Ours: PUBLISH
 * the key on `registry_key-channel:key` and UNLINK it in the same atomic step, so no
 * waiter can see the key gone without the notification being on its way; returns 2
 * when a client other than ours received the notification, else 1. With ARGV[4] and
 * no other receiver (so no waiter anywhere was told), the key stays with its TTL
 * reset and the script returns -1. A user without permission on the channel (an ACL
 * without `&registry_key-channel:*`, Redis 7's default for new users) makes PUBLISH
 * fail: the key is deleted all the same and the script returns 3, so an unlock never
 * leaves a key behind for want of a notification. */
static const char release_script[]
    = "if redis.call('GET', KEYS[1]) ~= ARGV[1] then\n"
      "  return 0\n"
      "end\n"
      "local n = redis.pcall('PUBLISH', ARGV[2], KEYS[1])\n"
      "if type(n) ~= 'number' then\n"
      "  redis.call('UNLINK', KEYS[1])\n"
      "  return 3\n"
      "end\n"
      "local others = n - tonumber(ARGV[3])\n"
      "if others <= 0 and ARGV[4] then\n"
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

/* RENEW: KEYS[1] = lock key, ARGV[1] = the hold's value, ARGV[2] = TTL in ms.
 * Ours: PEXPIRE, returns 1. Gone or foreign: returns 0 and never extends another
 * owner's key. */
static const char renew_script[] = "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
                                   "  redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
                                   "  return 1\n"
                                   "end\n"
                                   "return 0\n";

typedef struct
{
  const char *text;
  char sha[41];
} RlScript;

typedef struct
{
  RlStore parent;
  RlPool *pool;
  RlNotifier *notifier;
  char *channel_prefix; /* registry_key "-channel:" */
  RlScript acquire, release, renew;
  gint publish_refused; /* atomic: the missing channel permission was reported */
} RlRedisStore;

static void
script_init (RlScript *script, const char *text)
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

/* Sends @argv on a pooled connection and returns the reply (NULL with @error on
 * failure or an error reply). Retries once on a fresh connection when a pooled one
 * turns out stale. With @script, argv[0..1] are EVALSHA and its SHA-1, and a NOSCRIPT
 * answer is followed by EVAL of the script text on the same connection. @timeout_ms
 * bounds each exchange (0: the command timeout). */
static redisReply *
call (RlRedisStore *self, int argc, const char **argv, const RlScript *script, gint64 timeout_ms,
      gboolean *retried, GError **error)
{
  RedisLockRegistryStats *stats = self->parent.ctx->stats;

  if (retried != NULL)
    *retried = FALSE;
  for (int attempt = 0;; attempt++)
    {
      gboolean reused;
      RlConn *conn = rl_pool_get (self->pool, timeout_ms, &reused, error);
      redisReply *reply;

      if (conn == NULL)
        return NULL;
      if (script != NULL)
        {
          argv[0] = "EVALSHA";
          argv[1] = script->sha;
        }
      RL_ATOMIC_ADD (stats->round_trips, 1);
      RL_ATOMIC_ADD (stats->commands, 1);
      reply = rl_conn_roundtrip (conn, argc, argv);
      if (reply != NULL && script != NULL && is_noscript (reply))
        {
          freeReplyObject (reply);
          argv[0] = "EVAL";
          argv[1] = script->text;
          RL_ATOMIC_ADD (stats->round_trips, 1);
          RL_ATOMIC_ADD (stats->commands, 1);
          reply = rl_conn_roundtrip (conn, argc, argv);
        }
      if (reply == NULL)
        {
          gboolean retry = reused && attempt == 0 && rl_context_is_stale (conn->c);
          if (!retry)
            rl_set_error_from_context (error, conn->c, argv[0]);
          rl_pool_put (self->pool, conn);
          if (retry)
            {
              if (retried != NULL)
                *retried = TRUE;
              continue;
            }
          return NULL;
        }
      rl_pool_put (self->pool, conn);
      if (reply->type == REDIS_REPLY_ERROR)
        {
          g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_REDIS, "Redis lock %s failed: %s",
                       script != NULL ? "script" : "command", reply->str);
          freeReplyObject (reply);
          return NULL;
        }
      return reply;
    }
}

/* Runs @script with the EVALSHA command line @argv; its reply must be an integer. */
static redisReply *
run_script_argv (RlRedisStore *self, RlScript *script, int argc, const char **argv,
                 gint64 timeout_ms, gboolean *retried, GError **error)
{
  redisReply *reply = call (self, argc, argv, script, timeout_ms, retried, error);

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
            const char *arg2, gint64 timeout_ms, GError **error)
{
  const char *argv[6] = { "EVALSHA", script->sha, "1", key, arg1, arg2 };

  return run_script_argv (self, script, 6, argv, timeout_ms, NULL, error);
}

static RlLeaseResult
redis_acquire (RlStore *store, const char *key, const char *value, gint64 ttl_ms,
               gint64 timeout_ms, gint64 *pttl_ms, GError **error)
{
  RlRedisStore *self = (RlRedisStore *)store;
  char ttl[24];
  redisReply *reply;
  long long result;

  rl_format_uint (ttl, ttl_ms);

  /* Fast path: a free key is taken by a plain SET NX PX, the cheapest command Redis
   * has for it (no script runs). Only when the key exists does the acquire script
   * decide between "ours already" and "held by another, for PTTL ms". */
  {
    const char *argv[6] = { "SET", key, value, "NX", "PX", ttl };
    gboolean taken;

    reply = call (self, 6, argv, NULL, timeout_ms, NULL, error);
    if (reply == NULL)
      return RL_LEASE_ERROR;
    taken = reply->type == REDIS_REPLY_STATUS;
    freeReplyObject (reply);
    if (taken)
      return RL_LEASE_OK;
  }

  reply = run_script (self, &self->acquire, key, value, ttl, timeout_ms, error);
  if (reply == NULL)
    return RL_LEASE_ERROR;
  result = reply->integer;
  freeReplyObject (reply);
  if (result == RL_ACQUIRED)
    return RL_LEASE_OK;
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

  rl_format_uint (ttl, ttl_ms);
  reply = run_script (self, &self->renew, key, value, ttl, 0, error);
  if (reply == NULL)
    return RL_LEASE_ERROR;
  kept = reply->integer == 1;
  freeReplyObject (reply);
  return kept ? RL_LEASE_OK : RL_LEASE_LOST;
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
  char keep[24];
  const char *argv[8] = { "EVALSHA", self->release.sha, "1", key, value, channel,
                          rl_notifier_is_subscribed (self->notifier) ? "1" : "0", keep };
  redisReply *reply;
  long long result;
  gboolean retried;

  *others = FALSE;
  memcpy (channel, self->channel_prefix, prefix_len);
  memcpy (channel + prefix_len, key, key_len + 1);
  if (keep_ttl_ms > 0)
    rl_format_uint (keep, keep_ttl_ms);

  reply = run_script_argv (self, &self->release, keep_ttl_ms > 0 ? 8 : 7, argv, 0, &retried,
                           error);
  if (reply == NULL)
    return RL_LEASE_ERROR;
  result = reply->integer;
  freeReplyObject (reply);
  *others = result == RL_RELEASE_OTHERS;
  if (result == RL_RELEASE_UNPUBLISHED && g_atomic_int_compare_and_exchange (&self->publish_refused, 0, 1))
    g_warning ("Redis refused the unlock notification on channel “%s”: the Redis user lacks "
               "permission on the channels “%s*” (ACL `&%s*`). Locks are still released, but "
               "waiters elsewhere learn of it only by polling or when the holder's TTL ends",
               channel, self->channel_prefix, self->channel_prefix);
  if (result == RL_RELEASE_KEPT)
    return RL_LEASE_KEPT;
  if (result == RL_RELEASE_LOST && retried)
    {
      /* The first attempt broke after it was sent: it may have deleted the key itself,
       * so "gone" now does not mean another owner or expiry took it. Unknown is the
       * honest answer, not LEASE_LOST. */
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION,
                   "The connection to Redis broke during the release of “%s”; it may or may "
                   "not have been released by it (a lease left behind expires with its TTL)",
                   key);
      return RL_LEASE_ERROR;
    }
  return result == RL_RELEASE_LOST ? RL_LEASE_LOST : RL_LEASE_OK;
}

/* Appends one renew per lease to the output buffer, then reads the N replies: one
 * write and one round trip for the whole batch. Leases the server answered NOSCRIPT
 * for are sent again by EVAL in a second batch. */
static gboolean
redis_renew_batch (RlStore *store, guint n, const char *const *keys, const char *const *values,
                   const gint64 *ttls, RlLeaseResult *results, gint64 timeout_ms,
                   guint *round_trips, GError **error)
{
  RlRedisStore *self = (RlRedisStore *)store;
  RedisLockRegistryStats *stats = store->ctx->stats;
  g_autofree gboolean *noscript = g_new0 (gboolean, n);
  gboolean reused;
  RlConn *conn;
  guint pending = n;
  gboolean by_eval = FALSE;

  *round_trips = 0;
  if (n == 0)
    return TRUE;
  conn = rl_pool_get (self->pool, timeout_ms, &reused, error);
  if (conn == NULL)
    return FALSE;

  while (pending > 0)
    {
      guint sent = 0;
      for (guint i = 0; i < n; i++)
        {
          char ttl[24];
          const char *argv[6];
          if (by_eval && !noscript[i])
            continue;
          rl_format_uint (ttl, ttls[i]);
          argv[0] = by_eval ? "EVAL" : "EVALSHA";
          argv[1] = by_eval ? self->renew.text : self->renew.sha;
          argv[2] = "1";
          argv[3] = keys[i];
          argv[4] = values[i];
          argv[5] = ttl;
          rl_conn_append (conn, 6, argv);
          sent++;
        }
      RL_ATOMIC_ADD (stats->round_trips, 1);
      RL_ATOMIC_ADD (stats->commands, sent);
      (*round_trips)++;
      pending = 0;
      for (guint i = 0; i < n; i++)
        {
          redisReply *reply;
          if (by_eval && !noscript[i])
            continue;
          if (redisGetReply (conn->c, (void **)&reply) != REDIS_OK)
            {
              rl_set_error_from_context (error, conn->c, "Renewing leases");
              rl_pool_put (self->pool, conn);
              return FALSE;
            }
          noscript[i] = !by_eval && is_noscript (reply);
          if (noscript[i])
            pending++;
          else if (reply->type == REDIS_REPLY_INTEGER)
            results[i] = reply->integer == 1 ? RL_LEASE_OK : RL_LEASE_LOST;
          else
            results[i] = RL_LEASE_ERROR;
          freeReplyObject (reply);
        }
      by_eval = TRUE;
    }
  rl_pool_put (self->pool, conn);
  return TRUE;
}

static gboolean
redis_watch (RlStore *store, gint64 timeout_ms)
{
  return rl_notifier_watch (((RlRedisStore *)store)->notifier, timeout_ms);
}

static void
redis_close (RlStore *store)
{
  rl_notifier_stop (((RlRedisStore *)store)->notifier);
}

static void
redis_free (RlStore *store)
{
  RlRedisStore *self = (RlRedisStore *)store;

  rl_notifier_free (self->notifier);
  rl_pool_free (self->pool);
  g_free (self->channel_prefix);
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
    if (redisGetReply (conn->c, (void **) &replies[i]) != REDIS_OK)
      {
        rl_set_error_from_context (error, conn->c, "Reading a lock");
        ok = FALSE;
        break;
      }
  if (ok && skip_others && replies[0]->type == REDIS_REPLY_ERROR
      && g_str_has_prefix (replies[0]->str, "WRONGTYPE"))
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

static gboolean
redis_inspect (RlStore *store, const char *key, char **value, gint64 *pttl_ms, GError **error)
{
  RlRedisStore *self = (RlRedisStore *) store;
  gboolean reused, exists = FALSE;
  RlConn *conn = rl_pool_get (self->pool, 0, &reused, error);

  if (conn == NULL)
    return FALSE;
  RL_ATOMIC_ADD (store->ctx->stats->round_trips, 1);
  RL_ATOMIC_ADD (store->ctx->stats->commands, 2);
  read_lease (conn, key, FALSE, value, pttl_ms, &exists, error);
  rl_pool_put (self->pool, conn);
  return exists;
}

static char *glob_escape (const char *prefix);

/* SCAN for `registry_key:*`, then GET + PTTL of each batch of keys found. */
static gboolean
redis_list (RlStore *store, GArray *entries, GError **error)
{
  RlRedisStore *self = (RlRedisStore *) store;
  g_autofree char *prefix = g_strconcat (store->registry_key, ":", NULL);
  g_autofree char *pattern = glob_escape (prefix);
  g_autofree char *cursor = g_strdup ("0");
  gboolean reused, ok = TRUE;
  RlConn *conn = rl_pool_get (self->pool, 0, &reused, error);

  if (conn == NULL)
    return FALSE;
  do
    {
      const char *scan[] = { "SCAN", cursor, "MATCH", pattern, "COUNT", "1000" };
      redisReply *reply = rl_conn_roundtrip (conn, 6, scan);

      RL_ATOMIC_ADD (store->ctx->stats->round_trips, 1);
      if (reply == NULL)
        {
          rl_set_error_from_context (error, conn->c, "Listing locks");
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
  rl_pool_put (self->pool, conn);
  return ok;
}

static const RlStoreVTable redis_store_vtable = {
  .acquire = redis_acquire,
  .renew = redis_renew,
  .release = redis_release,
  .renew_batch = redis_renew_batch,
  .inspect = redis_inspect,
  .list = redis_list,
  .watch = redis_watch,
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

/* Checks the server now, so that redis_lock_registry_new() fails early and clearly:
 * connect, AUTH, SELECT, then in one round trip load the three scripts (so the first
 * watchdog tick or release does not pay a NOSCRIPT retry) and PING. A server that
 * refuses SCRIPT LOAD still works: EVALSHA falls back to EVAL. The connection stays
 * in the pool for the first lock. */
static RlStore *
redis_store_open (RlRedisStore *self, GError **error)
{
  const RlScript *scripts[] = { &self->acquire, &self->release, &self->renew };
  const char *ping[] = { "PING" };
  gboolean reused;
  RlConn *conn = rl_pool_get (self->pool, 0, &reused, error);
  redisReply *reply = NULL;

  if (conn == NULL)
    return NULL;
  for (gsize i = 0; i < G_N_ELEMENTS (scripts); i++)
    {
      const char *load[] = { "SCRIPT", "LOAD", scripts[i]->text };
      rl_conn_append (conn, 3, load);
    }
  rl_conn_append (conn, 1, ping);
  for (gsize i = 0; i <= G_N_ELEMENTS (scripts); i++)
    {
      if (redisGetReply (conn->c, (void **)&reply) != REDIS_OK)
        {
          rl_set_error_from_context (error, conn->c, "Checking the Redis server");
          rl_pool_put (self->pool, conn);
          return NULL;
        }
      if (i < G_N_ELEMENTS (scripts))
        {
          if (reply->type == REDIS_REPLY_ERROR)
            g_debug ("SCRIPT LOAD refused (%s); scripts will be sent by EVAL", reply->str);
          freeReplyObject (reply);
        }
    }
  rl_pool_put (self->pool, conn);
  if (reply->type == REDIS_REPLY_ERROR)
    {
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_REDIS, "Redis refused PING: %s",
                   reply->str);
      freeReplyObject (reply);
      return NULL;
    }
  freeReplyObject (reply);
  RL_ATOMIC_ADD (self->parent.ctx->stats->round_trips, 1);
  RL_ATOMIC_ADD (self->parent.ctx->stats->commands, 4);
  return &self->parent;
}

RlStore *
rl_redis_store_open (const char *url, const char *registry_key, const char *client_id,
                     RlStoreContext *ctx, RlStoreReleasedFunc released, gpointer released_data,
                     GError **error)
{
  RlConnConfig config;
  RlRedisStore *self;
  g_autofree char *pattern = NULL;

  if (!rl_conn_config_parse (url, &config, error))
    return NULL;

  self = g_new0 (RlRedisStore, 1);
  self->parent.vt = &redis_store_vtable;
  self->parent.client_id = g_strdup (client_id);
  self->parent.registry_key = g_strdup (registry_key);
  self->parent.ctx = ctx;
  self->parent.released = released;
  self->parent.released_data = released_data;
  self->pool = rl_pool_new (&config, ctx);
  self->channel_prefix = g_strconcat (registry_key, "-channel:", NULL);
  script_init (&self->acquire, acquire_script);
  script_init (&self->release, release_script);
  script_init (&self->renew, renew_script);
  pattern = glob_escape (self->channel_prefix);
  self->notifier = rl_notifier_new (&self->parent, self->pool, pattern);

  if (redis_store_open (self, error) == NULL)
    {
      rl_store_free (&self->parent);
      return NULL;
    }
  return &self->parent;
}
