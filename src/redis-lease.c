/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* redis-lease.c: the single-lease operations of the Redis store (acquire, renew,
 * release) and what the scripts' replies mean for them, including the fenced
 * acquisition and the releases a Sentinel failover makes doubtful. Cut from
 * redis-store.c (which keeps the scripts, the vtable and opening) so that the
 * batched operations and the stepwise requests, which read the same replies, reach
 * these helpers without calling back into the file that calls them.
 */
#include "config.h"

#include <string.h>

#include "debug.h"
#include "connection.h"
#include "key-slot.h"
#include "store.h"
#include "topology.h"
#include "sync.h"
#include "notify.h"
#include "redis-store-private.h"

/* Runs @script with the EVALSHA command line @argv; its reply must be an integer. */
redisReply *
rl_redis_run_script_argv (RlRedisStore *self, RlScript *script, int argc, const char **argv,
                          gint64 deadline, gboolean *retried, RlWroteFunc wrote, gboolean *acked,
                          GError **error)
{
  redisReply *reply
      = rl_redis_call (self, argv[3], argc, argv, script, deadline, retried, wrote, acked, error);

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
            const char *arg2, gint64 deadline, RlWroteFunc wrote, gboolean *acked,
            GError **error)
{
  const char *argv[6] = { "EVALSHA", script->sha, "1", key, arg1, arg2 };

  return rl_redis_run_script_argv (self, script, 6, argv, deadline, NULL, wrote, acked, error);
}

gboolean
rl_redis_wrote_set (const redisReply *reply)
{
  return reply->type == REDIS_REPLY_STATUS;
}

gboolean
rl_redis_wrote_acquire (const redisReply *reply)
{
  return reply->type == REDIS_REPLY_INTEGER && reply->integer == RL_ACQUIRED;
}

gboolean
rl_redis_wrote_renew (const redisReply *reply)
{
  return reply->type == REDIS_REPLY_INTEGER && reply->integer == 1;
}

static gboolean
wrote_kept (const redisReply *reply)
{
  return reply->type == REDIS_REPLY_INTEGER && reply->integer == RL_RELEASE_KEPT;
}


/* An acquisition too few replicas acknowledged: released again, and NOT_REPLICATED. */
RlLeaseResult
rl_redis_unreplicated_acquisition (RlRedisStore *self, const char *key, const char *value,
                                   GError **error)
{
  g_autoptr (GError) release_error = NULL;
  gboolean others;

  if (rl_redis_release (&self->parent, key, value, 0, &others, &release_error) == RL_LEASE_ERROR)
    rl_debug ("releasing the unreplicated lease of “%s”: %s", key, release_error->message);
  rl_redis_set_not_replicated (self, error, "acquisition", key);
  return RL_LEASE_ERROR;
}

static gboolean
wrote_fenced (const redisReply *reply)
{
  return reply->type == REDIS_REPLY_ARRAY;
}

/* The token in a reply of FENCED ACQUIRE or ACQUIRE ALL: the counter's decimal string
 * (NEXT TOKEN), or the integer 0 of ACQUIRE ALL without fencing. */
gboolean
rl_redis_reply_token (const redisReply *reply, guint64 *token)
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
                gint64 deadline, const char *fence_key, guint64 *token, gint64 *pttl_ms,
                GError **error)
{
  const char *argv[7] = { "EVALSHA", self->fenced_acquire.sha, "2", key, fence_key, value, ttl };
  gboolean acked;
  /* One script that reads the key when it is held: tracked, as ACQUIRE's. */
  redisReply *reply = rl_redis_call_tracked (self, key, 7, argv, &self->fenced_acquire, deadline,
                                             NULL, wrote_fenced, &acked, TRUE, error);

  if (reply == NULL)
    return RL_LEASE_ERROR;
  if (reply->type == REDIS_REPLY_INTEGER)
    {
      *pttl_ms = reply->integer;
      freeReplyObject (reply);
      return RL_LEASE_HELD;
    }
  if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 1
      || !rl_redis_reply_token (reply->element[0], token))
    {
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_REDIS,
                   "Redis fenced lock script returned an unexpected reply (type %d)", reply->type);
      freeReplyObject (reply);
      /* The lease may have been taken: the caller releases it in the background. */
      return RL_LEASE_ERROR;
    }
  freeReplyObject (reply);
  return acked ? RL_LEASE_OK : rl_redis_unreplicated_acquisition (self, key, value, error);
}

RlLeaseResult
rl_redis_set_nx (RlRedisStore *self, const char *key, const char *value, const char *ttl,
                 gint64 deadline, GError **error)
{
  const char *argv[6] = { "SET", key, value, "NX", "PX", ttl };
  redisReply *reply;
  gboolean taken, acked;

  reply = rl_redis_call (self, key, 6, argv, NULL, deadline, NULL, rl_redis_wrote_set, &acked,
                         error);
  if (reply == NULL)
    return RL_LEASE_ERROR;
  taken = reply->type == REDIS_REPLY_STATUS;
  freeReplyObject (reply);
  if (!taken)
    return RL_LEASE_HELD;
  return acked ? RL_LEASE_OK : rl_redis_unreplicated_acquisition (self, key, value, error);
}

RlLeaseResult
rl_redis_acquire (RlStore *store, const char *key, const char *value, gint64 ttl_ms,
                  gint64 deadline, const char *fence_key, guint64 *token, gint64 *pttl_ms,
                  GError **error)
{
  RlRedisStore *self = (RlRedisStore *)store;
  char ttl[24];
  redisReply *reply;
  long long result;
  gboolean acked;

  rl_format_uint (ttl, ttl_ms);
  if (fence_key != NULL)
    return acquire_fenced (self, key, value, ttl, deadline, fence_key, token, pttl_ms, error);

  /* Fast path: a free key is taken by a plain SET NX PX, the cheapest command Redis
   * has for it (no script runs). Only when the key exists does the acquire script
   * decide between "ours already" and "held by another, for PTTL ms". */
  {
    RlLeaseResult fast = rl_redis_set_nx (self, key, value, ttl, deadline, error);
    if (fast != RL_LEASE_HELD)
      return fast;
  }

  /* The key is held: this read of it (the script's GET and PTTL) is the one a waiter
   * is woken by a change of, without a notification too. */
  {
    const char *argv[6] = { "EVALSHA", self->acquire.sha, "1", key, value, ttl };

    reply = rl_redis_call_tracked (self, key, 6, argv, &self->acquire, deadline, NULL,
                                   rl_redis_wrote_acquire, &acked, TRUE, error);
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
    return acked ? RL_LEASE_OK : rl_redis_unreplicated_acquisition (self, key, value, error);
  *pttl_ms = result;
  return RL_LEASE_HELD;
}

RlLeaseResult
rl_redis_renew (RlStore *store, const char *key, const char *value, gint64 ttl_ms, GError **error)
{
  RlRedisStore *self = (RlRedisStore *)store;
  char ttl[24];
  redisReply *reply;
  gboolean kept;

  gboolean acked;

  g_autofree char *id = NULL;
  g_autofree char *index = rl_redis_rw_reader_index (key, value, &id);

  rl_format_uint (ttl, ttl_ms);
  if (index != NULL)
    {
      /* A read-write lock's reader lease: its registration is checked and moved too. */
      RlScript *script = (RlScript *) rl_redis_rw_renew_reader_script ();
      const char *argv[8] = { "EVALSHA", script->sha, "2", key, index, value, ttl, id };

      reply = rl_redis_run_script_argv (self, script, 8, argv, 0, NULL, rl_redis_wrote_renew,
                                        &acked, error);
    }
  else
    reply = run_script (self, &self->renew, key, value, ttl, 0, rl_redis_wrote_renew, &acked,
                        error);
  if (reply == NULL)
    return RL_LEASE_ERROR;
  kept = reply->integer == 1;
  freeReplyObject (reply);
  if (kept && !acked)
    {
      /* Kept on the master, but a failover now could lose it: not confirmed. */
      rl_redis_set_not_replicated (self, error, "renewal", key);
      return RL_LEASE_ERROR;
    }
  return kept ? RL_LEASE_OK : RL_LEASE_LOST;
}

/* Whether a client other than our registry heard the release that RELEASE answered
 * @result to on @channel; warns once when the notification was refused. */
gboolean
rl_redis_release_heard (RlRedisStore *self, long long result, const char *channel)
{
  if (result == RL_RELEASE_UNPUBLISHED
      && g_atomic_int_compare_and_exchange (&self->publish_refused, 0, 1))
    g_warning ("Redis refused the unlock notification on channel “%s”: the Redis user lacks "
               "permission on the channels “%s*” (ACL `&%s*`). Locks are still released, but "
               "waiters elsewhere learn of it only by polling or when the holder's TTL ends",
               channel, self->channel_prefix, self->channel_prefix);
  /* A Cluster's count is one node's: a waiter subscribed elsewhere may have been
   * told, so a release counts as heard (the cost: a short yield at the end of a
   * streak of hand-offs). */
  return result == RL_RELEASE_OTHERS || result == RL_RELEASE_GRANTED
         || (!self->topology->publish_counts_all
             && (result == 1 || result == RL_RELEASE_UNPUBLISHED));
}

/* What the release script's @result (but KEPT) means for @key: OK or LOST; or, when
 * the request was sent again after its connection broke (@retried), ERROR with @error:
 * the first attempt may have deleted the key itself, so "gone" then does not mean
 * another owner or expiry took it, and unknown is the honest answer. */
RlLeaseResult
rl_redis_release_outcome (long long result, gboolean retried, const char *key, GError **error)
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
 * rl_redis_count_doubtful_releases(). */
void
rl_redis_remember_release (RlRedisStore *self)
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
void
rl_redis_count_doubtful_releases (RlRedisStore *self)
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

/* The shard channels of a Cluster's releases ------------------------------------- */

/* A release of any key of a read-write lock `registry_key:{name}:rw:…` may let in a
 * waiter of either lease, so they all share the writer lease's channel; a permit
 * `SEM_KEY:I` wakes the waiters of its semaphore, who wait under SEM_KEY. One
 * subscription per lock then hears every release that concerns its waiters. The
 * channel must lie in @key's slot (a script may publish only there): a form that would
 * not keeps @key's own. */
char *
rl_redis_notify_key (RlRedisStore *self, const char *key)
{
  gsize prefix_len = strlen (self->parent.registry_key);
  gsize sem_len = rl_store_semaphore_key_len (key);
  const char *tail, *end = NULL;
  char *group = NULL;

  if (strncmp (key, self->parent.registry_key, prefix_len) != 0 || key[prefix_len] != ':')
    return g_strdup (key);
  tail = key + prefix_len + 1;
  if (tail[0] == '{')
    for (const char *p = strstr (tail, "}:rw:"); p != NULL; p = strstr (p + 1, "}:rw:"))
      end = p;
  if (end != NULL)
    group = g_strdup_printf ("%.*s:rw:w", (int) (end + 1 - key), key);
  else if (sem_len > prefix_len + 1)
    group = g_strndup (key, sem_len);
  if (group == NULL || rl_key_slot (group) != rl_key_slot (key))
    {
      g_free (group);
      return g_strdup (key);
    }
  return group;
}

char *
rl_redis_shard_channel (RlRedisStore *self, const char *key)
{
  g_autofree char *group = NULL;

  if (self->shard == NULL)
    return NULL;
  group = rl_redis_notify_key (self, key);
  return rl_cluster_shard_channel (self->channel_prefix, group);
}

const char *
rl_redis_classic_channel (RlRedisStore *self, const char *shard, const char *channel)
{
  if (shard != NULL && g_atomic_int_get (&self->parent.ctx->classic_off))
    return "";
  return channel;
}

/* The second channel a release publishes on (RELEASE's ARGV[5]), NULL when the
 * registry's legacy_spring_channel setting is off; and in @own (ARGV[3]) how many of
 * the receivers are our own subscription. */
const char *
rl_redis_release_legacy (RlRedisStore *self, char own[2])
{
  gboolean legacy = g_atomic_int_get (&self->parent.ctx->legacy_channel) != 0;

  own[0] = (char) ('0' + rl_notifier_receivers (self->notifier, legacy));
  own[1] = '\0';
  return legacy ? self->legacy_channel : NULL;
}

int
rl_redis_release_args (RlRedisStore *self, const char **argv, const char *legacy,
                       const char *shard)
{
  argv[5] = rl_redis_classic_channel (self, shard, argv[5]);
  argv[8] = legacy;
  if (shard == NULL)
    return legacy != NULL ? 9 : strcmp (argv[7], "0") != 0 ? 8 : 7;
  argv[8] = legacy != NULL ? legacy : "";
  argv[9] = shard;
  return 10;
}

RlLeaseResult
rl_redis_release (RlStore *store, const char *key, const char *value, gint64 keep_ttl_ms,
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
  const char *legacy = rl_redis_release_legacy (self, own);
  /* On a Cluster, the key's shard channel too (RELEASE's ARGV[6]). */
  g_autofree char *shard = rl_redis_shard_channel (self, key);
  g_autofree char *queue = NULL;
  const char *argv[10] = { "EVALSHA", self->release.sha, "1", key, value, channel, own, keep };
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

  argc = rl_redis_release_args (self, argv, legacy, shard);
  /* With the wait queue, the same script first grants to the head of the line. */
  queue = rl_redis_queue_of (self, key);
  reply = queue != NULL ? rl_redis_queued_release (self, queue, "", argc, argv, &retried,
                                                   wrote_kept, &acked, error)
                        : rl_redis_run_script_argv (self, &self->release, argc, argv, 0, &retried,
                                                    wrote_kept, &acked, error);
  if (reply == NULL)
    return RL_LEASE_ERROR;
  result = reply->integer;
  freeReplyObject (reply);
  if (result == RL_RELEASE_GRANTED)
    RL_ATOMIC_ADD (self->parent.ctx->stats->grants_given, 1);
  *others = rl_redis_release_heard (self, result, channel);
  /* A kept streak too few replicas acknowledged ends with a release instead. */
  if (result == RL_RELEASE_KEPT && !acked)
    return rl_redis_release (store, key, value, 0, others, error);
  if (result == RL_RELEASE_KEPT)
    return RL_LEASE_KEPT;
  if (result != RL_RELEASE_LOST)
    rl_redis_remember_release (self);
  return rl_redis_release_outcome (result, retried, key, error);
}

/* The wait queue's side of a release (redis-queue.c has its acquisition) ----------- */

/* The queued form of the release script's command line @argv (@argc, as RELEASE
 * takes it), removing @me's place first ("" : none). */
redisReply *
rl_redis_queued_release (RlRedisStore *self, const char *queue_key, const char *me, int argc,
                         const char **argv, gboolean *retried, RlWroteFunc wrote, gboolean *acked,
                         GError **error)
{
  g_autofree char *fence_key = rl_store_fence_key (argv[3]);
  const char *qargv[16];
  int qargc = 0;

  g_return_val_if_fail (argc <= 10 && fence_key != NULL, NULL);
  qargv[qargc++] = "EVALSHA";
  qargv[qargc++] = self->queued_release.sha;
  qargv[qargc++] = "3";
  qargv[qargc++] = argv[3];
  qargv[qargc++] = queue_key;
  qargv[qargc++] = fence_key;
  qargv[qargc++] = self->grant_prefix;
  qargv[qargc++] = me;
  for (int i = 4; i < argc; i++)
    qargv[qargc++] = argv[i];
  return rl_redis_run_script_argv (self, &self->queued_release, qargc, qargv, 0, retried, wrote,
                                   acked, error);
}

/* Whether the wait queue is used: the registry's wait_queue setting is on, writes
 * need no replica's acknowledgement (min_replicas): a grant is written by the
 * releaser's script, so a grant too few replicas acknowledged could not be refused as
 * the grantee's own unreplicated acquisition is (released again, NOT_REPLICATED); a
 * failover would then take a lease from a grantee that was told it held it; and the
 * deployment is not a Cluster (self->shard): while a slot migrates, the line's keys and
 * the lock's are met on two nodes and the scripts that read them together are sent
 * back and forth (ASK) until they fail. */
gboolean
rl_redis_queue_on (RlRedisStore *self)
{
  return g_atomic_int_get (&self->parent.ctx->wait_queue)
         && RL_ATOMIC_GET (self->parent.ctx->min_replicas) == 0 && self->shard == NULL;
}

/* Whether releases of @key go through its wait queue: its queue key (g_free()), or
 * NULL when the queue is off (rl_redis_queue_on()) or @key can have none. */
char *
rl_redis_queue_of (RlRedisStore *self, const char *key)
{
  if (!rl_redis_queue_on (self))
    return NULL;
  return rl_store_queue_key (key);
}

/* Several leases at once ---------------------------------------------------------- */
