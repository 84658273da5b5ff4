/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* redis-queue.c: the wait queue of the Redis store (store.h's acquire_queued and
 * leave_queue; the queued form of the release is redis-lease.c's, beside the release
 * that calls it, so that the lease code never calls up into this file).
 *
 * A lock's waiting processes stand in line beside its key, one place per registry
 * (rl_store_queue_key(): a sorted set of client ids by arrival, each place's value and
 * TTL in a string key that expires with it), so that a release hands the lock to the
 * head of the line in the same script (QUEUED RELEASE, redis-store.c) and tells that
 * registry alone on its own channel (`registry_key-grant:CLIENT_ID`, which notify.c
 * subscribes to), instead of waking every waiting process to race for it: a hand-off
 * costs the same whatever the number of waiters. A waiter takes or keeps its place
 * with each attempt (QUEUED ACQUIRE), which the driver repeats at least every
 * RL_QUEUE_REFRESH_MS while it waits, so the place of a crashed waiter is gone within
 * RL_QUEUE_ENTRY_LIFE_MS; one that gives up leaves it (QUEUED RELEASE with its own
 * client id, which also releases a grant that came meanwhile). The line is read for
 * inspection by rl_redis_queue_list().
 */
#include "config.h"

#include <string.h>

#include "debug.h"
#include "store.h"
#include "redis-store-private.h"

static gboolean
wrote_queued (const redisReply *reply)
{
  return reply->type == REDIS_REPLY_ARRAY
         || (reply->type == REDIS_REPLY_INTEGER && reply->integer == RL_ACQUIRED);
}

RlLeaseResult
rl_redis_acquire_queued (RlStore *store, const char *key, const char *value, const char *prev_value,
                         gint64 ttl_ms, gint64 deadline, const char *fence_key, gboolean contended,
                         guint64 *token, gint64 *pttl_ms, gboolean *queued, GError **error)
{
  RlRedisStore *self = (RlRedisStore *)store;
  g_autofree char *queue_key = rl_store_queue_key (key);
  g_autofree char *counter = rl_store_fence_key (key);
  char ttl[24], life[24];
  redisReply *reply;
  gboolean acked;

  *queued = FALSE;
  if (queue_key == NULL || counter == NULL || !rl_redis_queue_on (self))
    return rl_redis_acquire (store, key, value, ttl_ms, deadline, fence_key, token, pttl_ms, error);
  rl_format_uint (ttl, ttl_ms);
  rl_format_uint (life, RL_QUEUE_ENTRY_LIFE_MS);
  /* The first attempt tries a free key with a plain SET NX, as acquire does: an
   * uncontended lock costs what it did without the queue. */
  if (!contended && fence_key == NULL && prev_value == NULL)
    {
      RlLeaseResult fast = rl_redis_set_nx (self, key, value, ttl, deadline, error);
      if (fast != RL_LEASE_HELD)
        return fast;
    }
  {
    const char *argv[12] = { "EVALSHA",
                             self->queued_acquire.sha,
                             "3",
                             key,
                             queue_key,
                             counter,
                             value,
                             ttl,
                             store->client_id,
                             prev_value != NULL ? prev_value : "",
                             life,
                             self->grant_prefix };
    const char *argv_fenced[13];

    memcpy (argv_fenced, argv, sizeof argv);
    argv_fenced[12] = fence_key != NULL ? "1" : "0";
    /* Not tracked: a change of the key (a grant to another place, each hand-off) would
     * wake every waiter in line, which is what the queue is for not to do. A place is
     * told of its grant; a key freed otherwise (expired) is found by the next refresh. */
    reply = rl_redis_call_tracked (self, key, 13, argv_fenced, &self->queued_acquire, deadline,
                                   NULL, wrote_queued, &acked, FALSE, error);
  }
  if (reply == NULL)
    return RL_LEASE_ERROR;
  if (reply->type == REDIS_REPLY_INTEGER && reply->integer != RL_ACQUIRED)
    {
      *pttl_ms = reply->integer;
      *queued = TRUE;
      freeReplyObject (reply);
      return RL_LEASE_HELD;
    }
  if (reply->type == REDIS_REPLY_ARRAY
      && (reply->elements != 1 || !rl_redis_reply_token (reply->element[0], token)))
    {
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_REDIS,
                   "Redis queued lock script returned an unexpected reply (type %d)", reply->type);
      freeReplyObject (reply);
      return RL_LEASE_ERROR;
    }
  if (reply->type != REDIS_REPLY_ARRAY && reply->type != REDIS_REPLY_INTEGER)
    {
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_REDIS,
                   "Redis queued lock script returned an unexpected reply (type %d)", reply->type);
      freeReplyObject (reply);
      return RL_LEASE_ERROR;
    }
  freeReplyObject (reply);
  return acked ? RL_LEASE_OK : rl_redis_unreplicated_acquisition (self, key, value, error);
}

gboolean
rl_redis_leave_queue (RlStore *store, const char *key, const char *value, GError **error)
{
  RlRedisStore *self = (RlRedisStore *)store;
  g_autofree char *queue_key = rl_store_queue_key (key);
  g_autofree char *channel = g_strconcat (self->channel_prefix, key, NULL);
  g_autofree char *shard = rl_redis_shard_channel (self, key);
  char own[2];
  const char *legacy = rl_redis_release_legacy (self, own);
  const char *argv[10] = { "EVALSHA", self->release.sha, "1", key, value, channel, own, "0" };
  redisReply *reply;
  gboolean retried, acked;
  int argc;

  if (queue_key == NULL)
    return TRUE;
  argc = rl_redis_release_args (self, argv, legacy, shard);
  reply = rl_redis_queued_release (self, queue_key, store->client_id, argc, argv, &retried, NULL,
                                   &acked, error);
  if (reply == NULL)
    return FALSE;
  if (reply->integer == RL_RELEASE_GRANTED)
    RL_ATOMIC_ADD (store->ctx->stats->grants_given, 1);
  if (reply->integer != RL_RELEASE_LOST)
    rl_debug ("Lock “%s” was granted to us as we gave up waiting; released it again", key);
  freeReplyObject (reply);
  return TRUE;
}

/* The score of a place: the server's TIME when it was taken, in µs (16 digits, exact
 * in a double). */
static gboolean
reply_score (const redisReply *reply, gint64 *since_us)
{
  char *end;
  double score;

  if (reply->type != REDIS_REPLY_STRING)
    return FALSE;
  score = g_ascii_strtod (reply->str, &end);
  if (end == reply->str)
    return FALSE;
  *since_us = (gint64)score;
  return TRUE;
}

gboolean
rl_redis_queue_list (RlStore *store, const char *key, GArray *entries, GError **error)
{
  RlRedisStore *self = (RlRedisStore *)store;
  g_autofree char *queue_key = rl_store_queue_key (key);
  const char *range[] = { "ZRANGE", queue_key, "0", "-1", "WITHSCORES" };
  g_autoptr (GPtrArray) argv = NULL;
  g_autoptr (GArray) line = NULL;
  redisReply *reply;
  gboolean ok = TRUE;

  if (queue_key == NULL)
    return TRUE;
  reply = rl_redis_call (self, key, 5, range, NULL, 0, NULL, NULL, NULL, error);
  if (reply == NULL)
    return FALSE;
  if (reply->type != REDIS_REPLY_ARRAY || reply->elements % 2 != 0)
    {
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_REDIS,
                   "Reading the wait queue of “%s”: unexpected reply (type %d)", key, reply->type);
      freeReplyObject (reply);
      return FALSE;
    }
  line = g_array_new (FALSE, FALSE, sizeof (RlStoreQueueEntry));
  argv = g_ptr_array_new_with_free_func (g_free);
  g_ptr_array_add (argv, g_strdup ("MGET"));
  for (size_t i = 0; i + 1 < reply->elements && ok; i += 2)
    {
      RlStoreQueueEntry entry = { NULL, 0 };

      ok = reply->element[i]->type == REDIS_REPLY_STRING
           && reply_score (reply->element[i + 1], &entry.since_us);
      if (!ok)
        break;
      entry.client_id = g_strndup (reply->element[i]->str, reply->element[i]->len);
      g_array_append_val (line, entry);
      g_ptr_array_add (argv, g_strconcat (queue_key, ":", entry.client_id, NULL));
    }
  freeReplyObject (reply);
  if (!ok)
    {
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_REDIS,
                   "Reading the wait queue of “%s”: unexpected member", key);
      goto out;
    }
  if (line->len == 0)
    goto out;
  /* A place whose key is gone is a crashed waiter's: the next grant drops it. The
   * place keys share the queue's slot. */
  reply = rl_redis_call (self, key, (int)argv->len, (const char **)argv->pdata, NULL, 0, NULL, NULL,
                         NULL, error);
  if (reply == NULL)
    {
      ok = FALSE;
      goto out;
    }
  ok = reply->type == REDIS_REPLY_ARRAY && reply->elements == line->len;
  if (!ok)
    g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_REDIS,
                 "Reading the wait queue of “%s”: unexpected reply (type %d)", key, reply->type);
  for (guint i = 0; ok && i < line->len; i++)
    {
      RlStoreQueueEntry *entry = &g_array_index (line, RlStoreQueueEntry, i);

      if (reply->element[i]->type == REDIS_REPLY_STRING)
        {
          g_array_append_val (entries, *entry);
          entry->client_id = NULL;
        }
    }
  freeReplyObject (reply);
out:
  for (guint i = 0; i < line->len; i++)
    g_free (g_array_index (line, RlStoreQueueEntry, i).client_id);
  return ok;
}
