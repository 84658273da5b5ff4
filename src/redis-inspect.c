/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* redis-inspect.c: the Redis store's inspection calls, for operators and the
 * command-line tool: a lease's holder and remaining TTL, a fencing counter, every
 * lease of a registry (SCAN on each master), and an operator's forced release. Cut
 * from redis-store.c because none of it is on a lock's path; it reads keys through
 * the exchange engine and the connections.
 */
#include "config.h"

#include <string.h>

#include "connection.h"
#include "store.h"
#include "topology.h"
#include "sync.h"
#include "notify.h"
#include "redis-store-private.h"

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

/* FORCE RELEASE, routed to the key's node. */
RlLeaseResult
rl_redis_force_release (RlStore *store, const char *key, gboolean ours_only, GError **error)
{
  RlRedisStore *self = (RlRedisStore *) store;
  g_autofree char *channel = g_strconcat (self->channel_prefix, key, NULL);
  const char *legacy = g_atomic_int_get (&self->parent.ctx->legacy_channel) ? self->legacy_channel
                                                                            : "";
  /* On a Cluster, the key's shard channel too (FORCE RELEASE's ARGV[5]). */
  g_autofree char *shard = rl_redis_shard_channel (self, key);
  const char *argv[9] = { "EVALSHA", self->force_release.sha, "1", key,
                          rl_redis_classic_channel (self, shard, channel), self->forced_channel,
                          legacy, ours_only ? "1" : "0", shard };
  redisReply *reply;
  RlLeaseResult result;

  reply = rl_redis_run_script_argv (self, &self->force_release, shard != NULL ? 9 : 8, argv, 0,
                                    NULL, NULL, NULL, error);

  if (reply == NULL)
    return RL_LEASE_ERROR;
  if (reply->integer >= 0)
    result = reply->integer == 1 ? RL_LEASE_OK : RL_LEASE_LOST;
  else
    {
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID,
                   "“%s” holds no lease (%s): a forced unlock deletes leases only", key,
                   reply->integer == -1 ? "not a string" : "a string of another shape");
      result = RL_LEASE_ERROR;
    }
  freeReplyObject (reply);
  return result;
}

gboolean
rl_redis_inspect (RlStore *store, const char *key, char **value, gint64 *pttl_ms, GError **error)
{
  RlRedisStore *self = (RlRedisStore *) store;
  const char *get[] = { "GET", key };
  const char *pttl[] = { "PTTL", key };
  redisReply *reply = rl_redis_call (self, key, 2, get, NULL, 0, NULL, NULL, NULL, error);
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
  reply = rl_redis_call (self, key, 2, pttl, NULL, 0, NULL, NULL, NULL, error);
  /* A key that vanished between GET and PTTL (-2) was released. */
  exists = reply != NULL && reply->type == REDIS_REPLY_INTEGER && reply->integer != -2;
  if (exists)
    *pttl_ms = reply->integer;
  else
    g_clear_pointer (value, g_free);
  if (reply != NULL)
    freeReplyObject (reply);
  /* A read-write lock's reader lease whose registration is gone from the lock's index
   * is held no more: writers do not see it. */
  if (exists && !rl_redis_rw_registered (store, key, *value, &exists, error))
    exists = FALSE;
  if (!exists)
    g_clear_pointer (value, g_free);
  return exists;
}

/* GET of the counter, routed to its node. */
gboolean
rl_redis_read_counter (RlStore *store, const char *fence_key, guint64 *value, GError **error)
{
  RlRedisStore *self = (RlRedisStore *) store;
  const char *get[] = { "GET", fence_key };
  redisReply *reply = rl_redis_call (self, fence_key, 2, get, NULL, 0, NULL, NULL, NULL, error);
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
gboolean
rl_redis_list (RlStore *store, GArray *entries, GError **error)
{
  RlRedisStore *self = (RlRedisStore *) store;
  g_autofree char *prefix = g_strconcat (store->registry_key, ":", NULL);
  g_autofree char *pattern = rl_redis_glob_escape (prefix);
  g_autoptr (GPtrArray) masters = self->topology->vt->masters (self->topology, error);

  if (masters == NULL)
    return FALSE;
  for (guint i = 0; i < masters->len; i++)
    if (!list_node (store, g_ptr_array_index (masters, i), pattern, entries, error))
      return FALSE;
  return TRUE;
}

/* The subscription pattern `prefix*`, with the glob characters of @prefix escaped so
 * that a registry key containing `*`, `?` or `[` matches only itself. */
char *
rl_redis_glob_escape (const char *prefix)
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
