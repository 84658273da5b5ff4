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
                    gint64 timeout_ms, gboolean *taken, GError **error)
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
  rl_redis_pipeline (self, n, cmds, rl_redis_wrote_set, timeout_ms);
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
  g_autofree RlPipeCommand *cmds = NULL;
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
  rl_redis_pipeline (self, groups->len, cmds, wrote_all, timeout_ms);

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
  g_autofree const char **argvs = g_new0 (const char *, (gsize) n * 9);
  g_autoptr (GPtrArray) channels = g_ptr_array_new_with_free_func (g_free);
  g_autoptr (GError) first_error = NULL;
  char own[2];
  const char *legacy = rl_redis_release_legacy (self, own);

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
  ITEM_ROUTE,    /* redirected or "try again": to be renewed alone through rl_redis_call() */
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
  else if (rl_redis_is_noscript (reply))
    b->state[i] = ITEM_NOSCRIPT;
  else if (rl_redis_is_reroute (reply))
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
 * "try again" answer are renewed one by one through rl_redis_call(), which follows the
 * redirection. A node that cannot be reached leaves its leases unconfirmed
 * (RL_LEASE_ERROR); the batch fails as a whole only when no node answered. */
gboolean
rl_redis_renew_batch (RlStore *store, guint n, const char *const *keys, const char *const *values,
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
  BatchReplies b = { NULL, state, results, rl_redis_min_replicas (self) };
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
      results[i] = rl_redis_renew (store, keys[i], values[i], ttls[i], &local_error);
      answered = answered || results[i] != RL_LEASE_ERROR;
    }

  if (!answered && first_error != NULL)
    {
      g_propagate_error (error, g_steal_pointer (&first_error));
      return FALSE;
    }
  return TRUE;
}
