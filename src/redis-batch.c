/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* redis-batch.c: the batched lease operations of the Redis store: several
 * leases acquired all or none (ACQUIRE ALL, once per Cluster slot), released, or
 * renewed in one pipeline per node (the watchdog's tick). Cut from redis-store.c as
 * one responsibility, over the exchange engine's pipeline and the single-lease
 * operations' reading of replies (redis-lease.c).
 */
#include "config.h"

#include <string.h>

#include "connection.h"
#include "store.h"
#include "topology.h"
#include "sync.h"
#include "notify.h"
#include "redis-store-private.h"

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
          if (!rl_redis_reply_token (reply->element[j + 1], &item->token))
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
      rl_redis_set_not_replicated (self, error, "acquisition", key);
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
                    gint64 deadline, gboolean *taken, GError **error)
{
  g_autofree RlPipeCommand *cmds = g_new0 (RlPipeCommand, n);
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
  rl_redis_pipeline (self, n, cmds, rl_redis_wrote_set, deadline);
  for (guint i = 0; i < n; i++)
    {
      RlPipeCommand *cmd = &cmds[i];

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
      rl_redis_pipe_command_clear (cmd);
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
gboolean
rl_redis_acquire_many (RlStore *store, guint n, RlLeaseItem *items, gint64 ttl_ms,
                       gint64 deadline, gboolean contended, GError **error)
{
  RlRedisStore *self = (RlRedisStore *) store;
  gboolean fenced = n > 0 && items[0].fence_key != NULL;
  g_autofree gboolean *taken = g_new0 (gboolean, n);
  guint max_keys = (RL_ARGV_MAX - 5) / (fenced ? 3 : 2);
  g_autoptr (GHashTable) by_source = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  g_autoptr (GPtrArray) groups = g_ptr_array_new_with_free_func ((GDestroyNotify) g_array_unref);
  g_autofree RlPipeCommand *cmds = NULL;
  g_autoptr (GPtrArray) argvs = g_ptr_array_new_with_free_func (g_free);
  g_autoptr (GError) first_error = NULL;
  gboolean unreplicated = FALSE;
  char ttl[24];

  deadline = rl_store_deadline (store->ctx, deadline);
  rl_format_uint (ttl, ttl_ms);
  for (guint i = 0; i < n; i++)
    {
      g_assert ((items[i].fence_key != NULL) == fenced);
      items[i].token = 0;
    }
  if (!fenced && !contended)
    {
      g_autoptr (GError) plain_error = NULL;

      if (acquire_many_plain (self, n, items, ttl, deadline, taken, &plain_error))
        {
          if (plain_error == NULL)
            return TRUE;
          g_propagate_error (error, g_steal_pointer (&plain_error));
          return FALSE;
        }
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

  cmds = g_new0 (RlPipeCommand, groups->len);
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
  rl_redis_pipeline (self, groups->len, cmds, wrote_all, deadline);

  for (guint g = 0; g < groups->len; g++)
    {
      GArray *group = g_ptr_array_index (groups, g);
      const guint *idx = (const guint *) group->data;
      RlPipeCommand *cmd = &cmds[g];

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
      rl_redis_pipe_command_clear (cmd);
    }
  return !acquisitions_failed (self, &first_error, unreplicated, items[0].key, error);
}

/* RELEASE of each item, pipelined: one round trip per node. */
gboolean
rl_redis_release_many (RlStore *store, guint n, RlLeaseItem *items, GError **error)
{
  RlRedisStore *self = (RlRedisStore *) store;
  g_autofree RlPipeCommand *cmds = g_new0 (RlPipeCommand, n);
  g_autofree const char **argvs = g_new0 (const char *, (gsize) n * 10);
  g_autoptr (GPtrArray) channels = g_ptr_array_new_with_free_func (g_free);
  g_autoptr (GPtrArray) shards = g_ptr_array_new_with_free_func (g_free);
  g_autoptr (GError) first_error = NULL;
  char own[2];
  const char *legacy = rl_redis_release_legacy (self, own);

  for (guint i = 0; i < n; i++)
    {
      const char **argv = argvs + (gsize) i * 10;
      char *channel = g_strconcat (self->channel_prefix, items[i].key, NULL);
      /* On a Cluster, the key's shard channel too, as a single release publishes. */
      char *shard = rl_redis_shard_channel (self, items[i].key);

      g_ptr_array_add (channels, channel);
      g_ptr_array_add (shards, shard);
      argv[2] = "1";
      argv[3] = items[i].key;
      argv[4] = items[i].value;
      argv[5] = channel;
      argv[6] = own;
      argv[7] = "0";
      cmds[i].script = &self->release;
      cmds[i].route = items[i].key;
      cmds[i].argc = rl_redis_release_args (self, argv, legacy, shard);
      cmds[i].argv = argv;
    }
  rl_redis_pipeline (self, n, cmds, NULL, 0);

  for (guint i = 0; i < n; i++)
    {
      RlLeaseItem *item = &items[i];
      RlPipeCommand *cmd = &cmds[i];
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
          item->others = rl_redis_release_heard (self, result, g_ptr_array_index (channels, i));
          item->result = rl_redis_release_outcome (result, cmd->retried, item->key, &cmd->error);
          if (item->result == RL_LEASE_OK)
            rl_redis_remember_release (self);
        }
      if (cmd->error != NULL && first_error == NULL)
        first_error = g_steal_pointer (&cmd->error);
      rl_redis_pipe_command_clear (cmd);
    }
  if (first_error != NULL)
    {
      g_propagate_error (error, g_steal_pointer (&first_error));
      return FALSE;
    }
  return TRUE;
}

/* Renews the leases in one pipelined batch per node that serves some of them (one on
 * a single server, one per master on a Cluster), all nodes at once, through the
 * exchange engine's pipeline: one write and one round trip of wall time, NOSCRIPT
 * answered by EVAL, redirections and "try again" answers followed lease by lease. A
 * node that cannot be reached leaves its leases unconfirmed (RL_LEASE_ERROR), as does
 * a renewal too few replicas acknowledged; the batch fails as a whole only when no
 * node answered. */
gboolean
rl_redis_renew_batch (RlStore *store, guint n, const char *const *keys, const char *const *values,
                      const gint64 *ttls, RlLeaseResult *results, gint64 deadline,
                      guint *round_trips, GError **error)
{
  RlRedisStore *self = (RlRedisStore *) store;
  g_autofree RlPipeCommand *cmds = g_new0 (RlPipeCommand, n);
  g_autofree const char **argvs = g_new0 (const char *, (gsize) n * 8);
  g_autofree char *ttl_s = g_malloc ((gsize) n * 24);
  g_autoptr (GPtrArray) owned = g_ptr_array_new_with_free_func (g_free);
  g_autoptr (GError) first_error = NULL;
  gboolean answered = FALSE;

  *round_trips = 0;
  if (n == 0)
    return TRUE;
  for (guint i = 0; i < n; i++)
    {
      const char **argv = argvs + (gsize) i * 8;
      char *id = NULL;
      char *index = rl_redis_rw_reader_index (keys[i], values[i], &id);

      rl_format_uint (ttl_s + (gsize) i * 24, ttls[i]);
      argv[2] = "1";
      argv[3] = keys[i];
      argv[4] = values[i];
      argv[5] = ttl_s + (gsize) i * 24;
      cmds[i].script = &self->renew;
      cmds[i].route = keys[i];
      cmds[i].argc = 6;
      cmds[i].argv = argv;
      if (index != NULL)
        {
          /* A read-write lock's reader lease: its registration is checked and moved too. */
          g_ptr_array_add (owned, index);
          g_ptr_array_add (owned, id);
          argv[2] = "2";
          argv[4] = index;
          argv[5] = values[i];
          argv[6] = ttl_s + (gsize) i * 24;
          argv[7] = id;
          cmds[i].script = rl_redis_rw_renew_reader_script ();
          cmds[i].argc = 8;
        }
    }
  *round_trips = rl_redis_pipeline (self, n, cmds, rl_redis_wrote_renew, deadline);
  for (guint i = 0; i < n; i++)
    {
      RlPipeCommand *cmd = &cmds[i];

      results[i] = RL_LEASE_ERROR;
      if (cmd->reply != NULL)
        {
          answered = TRUE;
          /* Renewed on the master alone: a failover now could lose it. */
          if (cmd->reply->type == REDIS_REPLY_INTEGER && !cmd->unreplicated)
            results[i] = cmd->reply->integer == 1 ? RL_LEASE_OK : RL_LEASE_LOST;
          else if (cmd->reply->type == REDIS_REPLY_INTEGER && cmd->reply->integer != 1)
            results[i] = RL_LEASE_LOST;
        }
      if (cmd->error != NULL && first_error == NULL)
        first_error = g_steal_pointer (&cmd->error);
      rl_redis_pipe_command_clear (cmd);
    }
  if (!answered && first_error != NULL)
    {
      g_propagate_error (error, g_steal_pointer (&first_error));
      return FALSE;
    }
  return TRUE;
}
