/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* testcluster-migrate.c: moving a slot of the test Cluster from one master to another,
 * in the two halves a test needs (begun: keys half moved, so the old owner answers ASK
 * for the moved ones; finished: the new owner serves the slot and every node says so,
 * MOVED), or at once.
 *
 * The steps are Redis's own (CLUSTER SETSLOT IMPORTING / MIGRATING, MIGRATE in batches,
 * SETSLOT NODE on both ends and then on every master), and nothing waits a fixed time:
 * a migration is over when every running master names the new owner and every running
 * node knows the same current epoch, so the next migration starts from a settled
 * cluster. Kept apart from testcluster.c, which makes the cluster and breaks its nodes.
 */
#include "config.h"

#include <string.h>

#include <gio/gio.h>

#include "testcluster.h"

/* --- Slot migration ---------------------------------------------------------------- */

static Migration *
find_migration (RedisLockTestCluster *cluster, guint slot)
{
  for (guint i = 0; i < cluster->migrations->len; i++)
    {
      Migration *m = &g_array_index (cluster->migrations, Migration, i);

      if (m->slot == slot)
        return m;
    }
  return NULL;
}

gboolean
redis_lock_test_cluster_migrate_slot_begin (RedisLockTestCluster *cluster, guint slot,
                                            guint to_node, GError **error)
{
  Migration m = { slot, 0, to_node };
  View view = { 0 };
  const NodeLine *me;
  gboolean master;
  int owner;

  g_return_val_if_fail (cluster != NULL, FALSE);
  g_return_val_if_fail (slot < N_SLOTS, FALSE);
  g_return_val_if_fail (to_node < cluster->n_nodes, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  if (find_migration (cluster, slot) != NULL)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_EXISTS,
                   "The migration of slot %u has begun already", slot);
      return FALSE;
    }
  if (!rl_tc_get_view (cluster, to_node, &view, error))
    return FALSE;
  me = rl_tc_view_myself (&view);
  master = me != NULL && me->master;
  rl_tc_view_clear (&view);
  if (!master)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT, "Node %u is not a master",
                   to_node);
      return FALSE;
    }
  owner = rl_tc_slot_owner (cluster, slot);
  if (owner < 0)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED,
                   "No running node knows the owner of slot %u", slot);
      return FALSE;
    }
  if ((guint)owner == to_node)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT, "Node %u owns slot %u already",
                   to_node, slot);
      return FALSE;
    }
  m.from = (guint)owner;
  /* IMPORTING first, as redis-cli does: once the owner answers ASK, the target must
   * accept the asked commands. */
  if (!rl_tc_node_run (cluster, to_node, error, "CLUSTER SETSLOT %u IMPORTING %s", slot,
                 cluster->nodes[m.from].id)
      || !rl_tc_node_run (cluster, m.from, error, "CLUSTER SETSLOT %u MIGRATING %s", slot,
                    cluster->nodes[to_node].id))
    return FALSE;
  g_array_append_val (cluster->migrations, m);
  return TRUE;
}

/* MIGRATEs the keys @keys (NULL-terminated) from @m's source to its target. */
static gboolean
migrate_keys (RedisLockTestCluster *cluster, const Migration *m, const char *const *keys,
              const size_t *key_lens, guint n_keys, GError **error)
{
  RlTestProcess *from = cluster->nodes[m->from].process;
  g_autofree char *port = g_strdup_printf ("%d", cluster->nodes[m->to].process->port);
  g_autofree char *timeout = g_strdup_printf ("%d", MIGRATE_TIMEOUT_MS);
  g_autofree const char **argv = g_new (const char *, 7 + n_keys);
  g_autofree size_t *lens = g_new (size_t, 7 + n_keys);
  redisReply *reply;
  int argc = 0;
  gboolean ok;

  /* MIGRATE host port "" db timeout KEYS key… */
  argv[argc++] = "MIGRATE";
  argv[argc++] = "127.0.0.1";
  argv[argc++] = port;
  argv[argc++] = "";
  argv[argc++] = "0";
  argv[argc++] = timeout;
  argv[argc++] = "KEYS";
  for (int i = 0; i < argc; i++)
    lens[i] = strlen (argv[i]);
  for (guint k = 0; k < n_keys; k++, argc++)
    {
      argv[argc] = keys[k];
      lens[argc] = key_lens[k];
    }
  reply = rl_test_process_command_argv (from, MIGRATE_TIMEOUT_MS + COMMAND_TIMEOUT_MS, argc, argv,
                                        lens, error);
  if (reply == NULL)
    return FALSE;
  /* NOKEY: none of them exists (any more). */
  ok = reply->type == REDIS_REPLY_STATUS
       && (strcmp (reply->str, "OK") == 0 || strcmp (reply->str, "NOKEY") == 0);
  if (!ok)
    g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "MIGRATE from node %u to node %u: %s",
                 m->from, m->to, reply->str != NULL ? reply->str : "unexpected reply");
  freeReplyObject (reply);
  return ok;
}

gboolean
redis_lock_test_cluster_migrate_key (RedisLockTestCluster *cluster, const char *key, GError **error)
{
  Migration *m;
  size_t len;

  g_return_val_if_fail (cluster != NULL, FALSE);
  g_return_val_if_fail (key != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  m = find_migration (cluster, redis_lock_test_cluster_key_slot (key));
  if (m == NULL)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                   "No migration of slot %u (of key %s) has begun",
                   redis_lock_test_cluster_key_slot (key), key);
      return FALSE;
    }
  len = strlen (key);
  return migrate_keys (cluster, m, &key, &len, 1, error);
}

/* MIGRATEs what is left of @m's slot on its source, a batch at a time. */
static gboolean
migrate_remaining_keys (RedisLockTestCluster *cluster, const Migration *m, GError **error)
{
  for (;;)
    {
      redisReply *reply = rl_tc_node_command (cluster, m->from, error, "CLUSTER GETKEYSINSLOT %u %d",
                                        m->slot, MIGRATE_BATCH);
      g_autofree const char **keys = NULL;
      g_autofree size_t *lens = NULL;
      gboolean ok;
      guint n;

      if (reply == NULL)
        return FALSE;
      if (reply->type != REDIS_REPLY_ARRAY || reply->elements == 0)
        {
          freeReplyObject (reply);
          return TRUE;
        }
      n = (guint)reply->elements;
      keys = g_new (const char *, n);
      lens = g_new (size_t, n);
      for (guint k = 0; k < n; k++)
        {
          keys[k] = reply->element[k]->str;
          lens[k] = reply->element[k]->len;
        }
      ok = migrate_keys (cluster, m, keys, lens, n, error);
      freeReplyObject (reply);
      if (!ok)
        return FALSE;
    }
}

/* Tells every running node but @owner and @told (told already) that @owner owns
 * @slot: the other masters would learn it from the owner's bumped epoch by gossip, and
 * telling them saves that time. A node that is not a master (any more) refuses, which
 * is no matter: a replica follows its master. */
static void
tell_owner (RedisLockTestCluster *cluster, guint slot, guint owner, guint told)
{
  const char *owner_id = cluster->nodes[owner].id;

  for (guint i = 0; i < cluster->n_nodes; i++)
    if (i != owner && i != told && rl_tc_node_is_up (cluster, i))
      rl_tc_node_run (cluster, i, NULL, "CLUSTER SETSLOT %u NODE %s", slot, owner_id);
}

typedef struct
{
  RedisLockTestCluster *cluster;
  guint slot;
  int owner;
  gint64 disagree_since; /* monotonic µs of the first check a master disagreed in, or 0 */
  gboolean reassigned;   /* reassign_slot() ran */
} SlotOwner;

/* How long the masters may disagree on a migrated slot before it is assigned again. */
#define REASSIGN_AFTER_US (2 * G_USEC_PER_SEC)

/* Gossip settles a migrated slot within a few heartbeats. Should a master still name
 * another owner after REASSIGN_AFTER_US (two masters that each name the other were
 * seen once, on a loaded machine), the new owner takes an epoch above every other
 * (CLUSTER BUMPEPOCH) and every master is told the owner again, as `redis-cli
 * --cluster fix` would; the disagreement is logged first, with the disagreeing
 * master's view, so that it is not lost when the repair works. */
static void
reassign_slot (SlotOwner *want, guint master, const char *nodes)
{
  RedisLockTestCluster *cluster = want->cluster;
  const char *owner_id = cluster->nodes[want->owner].id;

  g_message ("slot %u: master %u still names another owner than node %d %d ms after its "
             "migration; assigning it again. Its CLUSTER NODES:\n%s",
             want->slot, master, want->owner,
             (int)((g_get_monotonic_time () - want->disagree_since) / 1000), nodes);
  rl_tc_node_run (cluster, (guint)want->owner, NULL, "CLUSTER BUMPEPOCH");
  rl_tc_node_run (cluster, (guint)want->owner, NULL, "CLUSTER SETSLOT %u NODE %s", want->slot,
                  owner_id);
  tell_owner (cluster, want->slot, (guint)want->owner, (guint)want->owner);
  want->reassigned = TRUE;
}

/* Whether every running node knows the same current epoch. A migration's new owner
 * takes an epoch above every epoch it knows; until the last bump has reached every
 * node, the next one could take an epoch that a late message of the former owner
 * beats, and the slot would flip back on some nodes. */
static gboolean
check_epochs_agree (gpointer data, GString *why)
{
  RedisLockTestCluster *cluster = data;
  g_autofree char *first = NULL;

  for (guint i = 0; i < cluster->n_nodes; i++)
    {
      GError *error = NULL;
      redisReply *reply;
      g_autofree char *epoch = NULL;

      if (!rl_tc_node_is_up (cluster, i))
        continue;
      reply = rl_tc_node_command (cluster, i, &error, "CLUSTER INFO");
      if (reply == NULL)
        {
          g_string_printf (why, "%s", error->message);
          g_error_free (error);
          return FALSE;
        }
      epoch = reply->type == REDIS_REPLY_STRING
                  ? rl_test_info_field (reply->str, "cluster_current_epoch")
                  : NULL;
      freeReplyObject (reply);
      if (epoch == NULL)
        {
          g_string_printf (why, "node %u tells no cluster_current_epoch", i);
          return FALSE;
        }
      if (first == NULL)
        first = g_steal_pointer (&epoch);
      else if (strcmp (first, epoch) != 0)
        {
          g_string_printf (why, "node %u knows epoch %s, another %s", i, epoch, first);
          return FALSE;
        }
    }
  return TRUE;
}

/* Every running master says @data->owner owns @data->slot. */
static gboolean
check_slot_owner (gpointer data, GString *why)
{
  SlotOwner *want = data;
  RedisLockTestCluster *cluster = want->cluster;

  for (guint i = 0; i < cluster->n_nodes; i++)
    {
      View view = { 0 };
      GError *error = NULL;
      const NodeLine *me;

      if (!rl_tc_node_is_up (cluster, i))
        continue;
      if (!rl_tc_get_view (cluster, i, &view, &error))
        {
          g_string_printf (why, "%s", error->message);
          g_error_free (error);
          return FALSE;
        }
      me = rl_tc_view_myself (&view);
      if (me == NULL || !me->master || view.owners[want->slot] == want->owner)
        {
          rl_tc_view_clear (&view);
          continue;
        }

      /* Its whole view (each node's flags and config epoch) says why. */
      g_string_printf (why, "master %u says node %d owns slot %u; its CLUSTER NODES:\n%s", i,
                       view.owners[want->slot], want->slot, view.text);
      if (want->disagree_since == 0)
        want->disagree_since = g_get_monotonic_time ();
      else if (!want->reassigned
               && g_get_monotonic_time () - want->disagree_since > REASSIGN_AFTER_US)
        reassign_slot (want, i, view.text);
      rl_tc_view_clear (&view);
      return FALSE;
    }
  return TRUE;
}

gboolean
redis_lock_test_cluster_migrate_slot_finish (RedisLockTestCluster *cluster, guint slot,
                                             GError **error)
{
  Migration m;
  Migration *found;
  SlotOwner want;
  const char *to_id;

  g_return_val_if_fail (cluster != NULL, FALSE);
  g_return_val_if_fail (slot < N_SLOTS, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  found = find_migration (cluster, slot);
  if (found == NULL)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                   "No migration of slot %u has begun", slot);
      return FALSE;
    }
  m = *found;
  g_array_remove_index_fast (cluster->migrations,
                             (guint)(found - (Migration *)cluster->migrations->data));

  to_id = cluster->nodes[m.to].id;
  if (!migrate_remaining_keys (cluster, &m, error)
      || !rl_tc_node_run (cluster, m.to, error, "CLUSTER SETSLOT %u NODE %s", slot, to_id)
      || !rl_tc_node_run (cluster, m.from, error, "CLUSTER SETSLOT %u NODE %s", slot, to_id))
    return FALSE;
  tell_owner (cluster, slot, m.to, m.from);
  want = (SlotOwner){ .cluster = cluster, .slot = slot, .owner = (int)m.to };
  return rl_test_wait_until (check_slot_owner, &want, AGREE_TIMEOUT_MS,
                             "The masters did not agree on the migrated slot", error)
         && rl_test_wait_until (check_epochs_agree, cluster, AGREE_TIMEOUT_MS,
                                "The nodes did not agree on the current epoch", error);
}

gboolean
redis_lock_test_cluster_migrate_slot (RedisLockTestCluster *cluster, guint slot, guint to_node,
                                      GError **error)
{
  g_return_val_if_fail (cluster != NULL, FALSE);
  g_return_val_if_fail (slot < N_SLOTS, FALSE);
  g_return_val_if_fail (to_node < cluster->n_nodes, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  if (find_migration (cluster, slot) == NULL && rl_tc_slot_owner (cluster, slot) == (int)to_node)
    return TRUE;
  return redis_lock_test_cluster_migrate_slot_begin (cluster, slot, to_node, error)
         && redis_lock_test_cluster_migrate_slot_finish (cluster, slot, error);
}

