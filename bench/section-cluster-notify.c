/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* section-cluster-notify.c: what one unlock notification costs a Redis Cluster.
 *
 * cluster-notify starts a private cluster of three masters with one replica each
 * (RedisLockTestCluster, TCP on loopback), locks and unlocks a run of names whose keys
 * the slots spread over the three masters, and counts the pub/sub messages the cluster
 * bus carried for them: the sum over every node of CLUSTER INFO's
 * `cluster_stats_messages_publish_sent` (classic PUBLISH, which a node forwards to
 * every other node) and `cluster_stats_messages_publishshard_sent` (SPUBLISH, which a
 * master forwards to its own replicas only), per release. Two baselines go over plain
 * hiredis connections straight to the master owning each key, for the same keys in
 * the same run: one PUBLISH of the key per release, what a classic release costs, and
 * one SPUBLISH of the key on a channel of the key's own slot (the key itself), what a
 * release heard only on its key's shard costs. The library is measured twice: with
 * its defaults (SPUBLISH on the key's shard channel and a classic PUBLISH for Spring
 * peers) and with classic notifications off (SPUBLISH only).
 *
 * It also times the cluster hand-off: a second registry's thread waits for a lock
 * the first registry holds, and the time from the holder's unlock call to the
 * waiter's lock returning is taken, HANDOFFS times (the waiter's contended_attempts
 * counter confirms it was waiting), once with a holder registry at its defaults and
 * once with one whose classic notifications are off. Its floor, interleaved with it, is the same
 * hand-off done by hand from one thread: PUBLISH on the key's master, the message read
 * on a SUBSCRIBE connection of another master (the broadcast's hop), then one SET NX
 * PX on the key's master; and the sharded floor: SPUBLISH on the key's master, read
 * on an SSUBSCRIBE connection to that same master, then the SET.
 */
#include <math.h>
#include <string.h>

#include "bench.h"
#include "sync.h" /* pthread locks, which ThreadSanitizer sees (GMutex it does not) */

/* Declared here as well as in section-list.h: this file does not include the table. */
void section_cluster_notify (Bench *b, Section *s);

#define NOTIFY_MASTERS 3
#define NOTIFY_REPLICAS 1
#define NOTIFY_NAMES 300
#define HANDOFFS 200
#define HANDOFF_WARMUP 20

/* The bus messages every node of @cluster has sent so far: classic in *@classic,
 * sharded in *@sharded. */
static gboolean
bus_messages (RedisLockTestCluster *cluster, RawConn **nodes, guint64 *classic,
              guint64 *sharded, GError **error)
{
  guint n = redis_lock_test_cluster_get_n_nodes (cluster);

  *classic = *sharded = 0;
  for (guint i = 0; i < n; i++)
    {
      redisReply *reply = raw_command (nodes[i]->c, error, "CLUSTER INFO");
      const char *p;

      if (reply == NULL)
        return FALSE;
      if ((p = strstr (reply->str, "cluster_stats_messages_publish_sent:")) != NULL)
        *classic += g_ascii_strtoull (strchr (p, ':') + 1, NULL, 10);
      if ((p = strstr (reply->str, "cluster_stats_messages_publishshard_sent:")) != NULL)
        *sharded += g_ascii_strtoull (strchr (p, ':') + 1, NULL, 10);
      freeReplyObject (reply);
    }
  return TRUE;
}

/* Sends "@command @key @key" for each key to the master owning it, and counts the bus
 * messages that caused, per key, into *@classic and *@sharded. */
static gboolean
raw_publish_all (RedisLockTestCluster *cluster, RawConn **nodes, GPtrArray *keys,
                 const char *command, double *classic, double *sharded, GError **error)
{
  guint64 c0, s0, c1, s1;

  if (!bus_messages (cluster, nodes, &c0, &s0, error))
    return FALSE;
  for (guint i = 0; i < keys->len; i++)
    {
      const char *key = g_ptr_array_index (keys, i);
      int owner = redis_lock_test_cluster_get_slot_owner (cluster,
                                                          redis_lock_test_cluster_key_slot (key));
      redisReply *reply;

      if (owner < 0)
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "no node owns the slot of %s", key);
          return FALSE;
        }
      reply = raw_command (nodes[owner]->c, error, "%s %s %s", command, key, key);
      if (reply == NULL)
        return FALSE;
      freeReplyObject (reply);
    }
  if (!bus_messages (cluster, nodes, &c1, &s1, error))
    return FALSE;
  *classic = (double) (c1 - c0) / keys->len;
  *sharded = (double) (s1 - s0) / keys->len;
  return TRUE;
}

/* --- the hand-off ------------------------------------------------------------------ */

typedef struct
{
  RedisLock *lock; /* the waiter registry's */
  RlMutex mutex;
  RlCond cond;
  guint asked;    /* hand-offs the main thread asked for */
  guint done;     /* hand-offs the waiter completed */
  gint64 got_ns;  /* when the waiter's last lock returned */
  gboolean failed;
} Waiter;

static gpointer
waiter_thread (gpointer data)
{
  Waiter *w = data;

  for (guint i = 0; i < 2 * (HANDOFF_WARMUP + HANDOFFS); i++)
    {
      g_autoptr (GError) error = NULL;
      gboolean ok;
      gint64 got;

      rl_mutex_lock (&w->mutex);
      while (w->asked <= i)
        rl_cond_wait_until (&w->cond, &w->mutex, RL_FOREVER);
      rl_mutex_unlock (&w->mutex);
      ok = redis_lock_lock (w->lock, &error);
      got = now_ns ();
      ok = ok && redis_lock_unlock (w->lock, &error);
      rl_mutex_lock (&w->mutex);
      w->got_ns = got;
      w->failed = !ok;
      w->done = i + 1;
      rl_cond_broadcast (&w->cond);
      rl_mutex_unlock (&w->mutex);
      if (!ok)
        return NULL;
    }
  return NULL;
}

/* One hand-off of @holder's lock to the waiter; its latency in ns, 0 when the waiter
 * was not seen waiting, -1 on failure. */
static gint64
library_handoff (RedisLock *holder, RedisLockRegistry *waiting, Waiter *w, GError **error)
{
  RedisLockRegistryStats before, now;
  gint64 t0, got_ns;
  gboolean waited = FALSE, failed;
  guint target;

  if (!redis_lock_lock (holder, error))
    return -1;
  redis_lock_registry_get_stats (waiting, &before);
  rl_mutex_lock (&w->mutex);
  target = ++w->asked;
  rl_cond_broadcast (&w->cond);
  rl_mutex_unlock (&w->mutex);
  /* Until the waiter's attempt failed, for at most 100 ms. */
  for (guint i = 0; i < 1000 && !waited; i++)
    {
      g_usleep (100);
      redis_lock_registry_get_stats (waiting, &now);
      waited = now.contended_attempts > before.contended_attempts;
    }
  t0 = now_ns ();
  if (!redis_lock_unlock (holder, error))
    return -1;
  rl_mutex_lock (&w->mutex);
  while (w->done < target)
    rl_cond_wait_until (&w->cond, &w->mutex, RL_FOREVER);
  failed = w->failed;
  got_ns = w->got_ns;
  rl_mutex_unlock (&w->mutex);
  if (failed)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "the waiter's lock failed");
      return -1;
    }
  return waited ? got_ns - t0 : 0;
}

/* Reads one pub/sub message from @c; FALSE with @error on failure. */
static gboolean
read_message (redisContext *c, GError **error)
{
  redisReply *reply = NULL;

  if (redisGetReply (c, (void **) &reply) != REDIS_OK || reply == NULL)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "subscriber: %s", c->errstr);
      return FALSE;
    }
  freeReplyObject (reply);
  return TRUE;
}

/* One hand-off by hand: @publish on @owner, the message read on @sub, SET NX PX of
 * @key on @owner (then deleted, untimed); its latency in ns, -1 on failure. */
static gint64
floor_handoff (redisContext *owner, redisContext *sub, const char *publish, const char *channel,
               const char *key, GError **error)
{
  redisReply *reply;
  gint64 t0 = now_ns (), t1;

  reply = raw_command (owner, error, "%s %s %s", publish, channel, key);
  if (reply == NULL)
    return -1;
  freeReplyObject (reply);
  if (!read_message (sub, error))
    return -1;
  reply = raw_command (owner, error, "SET %s x NX PX 30000", key);
  t1 = now_ns ();
  if (reply == NULL)
    return -1;
  freeReplyObject (reply);
  reply = raw_command (owner, error, "DEL %s", key);
  if (reply == NULL)
    return -1;
  freeReplyObject (reply);
  return t1 - t0;
}

/* Subscribes @c with @command to @channel and reads the confirmation. */
static gboolean
subscribe (redisContext *c, const char *command, const char *channel, GError **error)
{
  redisReply *reply = raw_command (c, error, "%s %s", command, channel);

  if (reply == NULL)
    return FALSE;
  freeReplyObject (reply);
  return TRUE;
}

static void
handoff_rows (Bench *b, Section *s, RedisLockTestCluster *cluster, RedisLockRegistry *registry,
              RedisLockRegistry *registry_off)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (RedisLockRegistry) waiting = NULL;
  g_autoptr (RedisLock) holder = NULL;
  g_autoptr (RedisLock) holder_off = NULL;
  g_autofree char *key = g_strconcat (b->key, ":cluster-handoff", NULL);
  g_autofree char *floor_key = g_strdup_printf ("{%s}:floor", key);
  g_autofree char *channel = g_strdup_printf ("{%s}:channel", key);
  g_autofree gint64 *lib_ns = g_new0 (gint64, HANDOFFS);
  g_autofree gint64 *off_ns = g_new0 (gint64, HANDOFFS);
  g_autofree gint64 *classic_ns = g_new0 (gint64, HANDOFFS);
  g_autofree gint64 *sharded_ns = g_new0 (gint64, HANDOFFS);
  redisContext *owner_c = NULL, *classic_sub = NULL, *sharded_sub = NULL;
  RawTarget owner_t = { 0 }, other_t = { 0 };
  Waiter w = { 0 };
  GThread *thread = NULL;
  guint n_lib = 0, n_off = 0, slot = redis_lock_test_cluster_key_slot (key);
  int owner = redis_lock_test_cluster_get_slot_owner (cluster, slot), other = -1;
  Dist lib, off, classic, sharded;
  guint on_owner = 0;

  for (guint i = 0; i < redis_lock_test_cluster_get_n_nodes (cluster) && other < 0; i++)
    if ((int) i != owner && redis_lock_test_cluster_get_slot_owner (cluster, 0) >= 0)
      {
        /* Another master: one that owns a slot. */
        for (guint sl = 0; sl < 16384; sl += 512)
          if (redis_lock_test_cluster_get_slot_owner (cluster, sl) == (int) i)
            {
              other = (int) i;
              break;
            }
      }
  if (owner < 0 || other < 0)
    {
      add_na (s, "cluster hand-off p50", "no two masters found");
      return;
    }
  rl_mutex_init (&w.mutex);
  rl_cond_init (&w.cond);
  if (!raw_target_parse (redis_lock_test_cluster_get_node_url (cluster, (guint) owner), &owner_t,
                         &error)
      || !raw_target_parse (redis_lock_test_cluster_get_node_url (cluster, (guint) other),
                            &other_t, &error)
      || (owner_c = raw_connect (&owner_t, &error)) == NULL
      || (classic_sub = raw_connect (&other_t, &error)) == NULL
      || (sharded_sub = raw_connect (&owner_t, &error)) == NULL
      || !subscribe (classic_sub, "SUBSCRIBE", channel, &error)
      || !subscribe (sharded_sub, "SSUBSCRIBE", channel, &error))
    goto out;
  waiting = redis_lock_registry_new (redis_lock_test_cluster_get_url (cluster), b->key, &error);
  if (waiting == NULL)
    goto out;
  holder = redis_lock_registry_obtain (registry, "cluster-handoff", &error);
  holder_off = holder == NULL ? NULL
                              : redis_lock_registry_obtain (registry_off, "cluster-handoff", &error);
  w.lock = holder_off == NULL ? NULL
                              : redis_lock_registry_obtain (waiting, "cluster-handoff", &error);
  if (w.lock == NULL)
    goto out;
  /* Two hand-offs per round, one from each holder. */
  thread = g_thread_new ("cluster-handoff-waiter", waiter_thread, &w);
  /* Interleaved: a library hand-off from each holder, a classic floor, a sharded floor. */
  for (guint i = 0; i < HANDOFF_WARMUP + HANDOFFS; i++)
    {
      gint64 l = library_handoff (holder, waiting, &w, &error);
      gint64 o = l < 0 ? -1 : library_handoff (holder_off, waiting, &w, &error);
      gint64 c = o < 0 ? -1 : floor_handoff (owner_c, classic_sub, "PUBLISH", channel, floor_key,
                                             &error);
      gint64 sh = c < 0 ? -1 : floor_handoff (owner_c, sharded_sub, "SPUBLISH", channel,
                                              floor_key, &error);

      if (sh < 0)
        goto out;
      if (i < HANDOFF_WARMUP)
        continue;
      if (l > 0)
        lib_ns[n_lib++] = l;
      if (o > 0)
        off_ns[n_off++] = o;
      classic_ns[i - HANDOFF_WARMUP] = c;
      sharded_ns[i - HANDOFF_WARMUP] = sh;
    }
  if (n_lib == 0 || n_off == 0)
    {
      add_na (s, "cluster hand-off p50", "the waiter was never seen waiting");
      goto out;
    }
  /* Where the registries' pattern subscriptions sit: on the key's master, the
   * library's hand-off has no bus hop. */
  {
    redisReply *list = raw_command (owner_c, &error, "CLIENT LIST TYPE pubsub");

    if (list == NULL)
      goto out;
    for (const char *p = list->str; (p = strstr (p, " psub=")) != NULL; p++)
      on_owner += p[6] != '0';
    freeReplyObject (list);
  }
  lib = dist_of (lib_ns, n_lib, 1);
  off = dist_of (off_ns, n_off, 1);
  classic = dist_of (classic_ns, HANDOFFS, 1);
  sharded = dist_of (sharded_ns, HANDOFFS, 1);
  add_row (s, "cluster hand-off p50", lib.p50 / 1000, "us", 1, lib.p50 / classic.p50,
           "classic floor p50", NULL, FALSE);
  add_row (s, "cluster hand-off p99", lib.p99 / 1000, "us", 1, lib.p99 / classic.p99,
           "classic floor p99", NULL, FALSE);
  add_row (s, "  the same, vs sharded floor", lib.p50 / 1000, "us", 1, lib.p50 / sharded.p50,
           "sharded floor p50", NULL, FALSE);
  add_row (s, "cluster hand-off p50, classic off", off.p50 / 1000, "us", 1,
           off.p50 / sharded.p50, "sharded floor p50", NULL, FALSE);
  add_row (s, "cluster hand-off p99, classic off", off.p99 / 1000, "us", 1,
           off.p99 / sharded.p99, "sharded floor p99", NULL, FALSE);
  add_row (s, "classic floor p50 (baseline)", classic.p50 / 1000, "us", 1, 1.0,
           "classic floor p50", NULL, FALSE);
  add_row (s, "classic floor p99 (baseline)", classic.p99 / 1000, "us", 1, 1.0,
           "classic floor p99", NULL, FALSE);
  add_row (s, "sharded floor p50 (baseline)", sharded.p50 / 1000, "us", 1,
           sharded.p50 / classic.p50, "classic floor p50", NULL, FALSE);
  add_row (s, "sharded floor p99 (baseline)", sharded.p99 / 1000, "us", 1,
           sharded.p99 / classic.p99, "classic floor p99", NULL, FALSE);
  add_note (s,
            "hand-off: registries of this process, the waiter in its own thread; %u and %u "
            "(classic off) of %d hand-offs counted (the waiter seen waiting), after %d "
            "warm-up ones; the floors "
            "by hand from one thread, interleaved: PUBLISH on the key's master (port %d) read "
            "on a SUBSCRIBE connection to another master (port %d), or SPUBLISH read on an "
            "SSUBSCRIBE connection to the key's master, then SET NX PX there; %u of the "
            "registries' pattern subscriptions on the key's master",
            n_lib, n_off, HANDOFFS, HANDOFF_WARMUP, owner_t.port, other_t.port, on_owner);

out:
  if (thread != NULL)
    {
      /* A failure leaves the waiter waiting for hand-offs never asked for: ask them all,
       * with the holder's lock let go, so each lock returns at once. */
      if (redis_lock_is_held_by_current_thread (holder))
        redis_lock_unlock (holder, NULL);
      if (holder_off != NULL && redis_lock_is_held_by_current_thread (holder_off))
        redis_lock_unlock (holder_off, NULL);
      rl_mutex_lock (&w.mutex);
      w.asked = 2 * (HANDOFF_WARMUP + HANDOFFS);
      rl_cond_broadcast (&w.cond);
      rl_mutex_unlock (&w.mutex);
      g_thread_join (thread);
    }
  if (error != NULL)
    add_na (s, "cluster hand-off p50", "%s", error->message);
  g_clear_pointer (&w.lock, redis_lock_unref);
  if (owner_c != NULL)
    redisFree (owner_c);
  if (classic_sub != NULL)
    redisFree (classic_sub);
  if (sharded_sub != NULL)
    redisFree (sharded_sub);
  raw_target_clear (&owner_t);
  raw_target_clear (&other_t);
  rl_cond_clear (&w.cond);
  rl_mutex_clear (&w.mutex);
}

/* --- the section ------------------------------------------------------------------- */

/* Locks and unlocks NOTIFY_NAMES names on @registry (after one warm-up pair, so its
 * connections and scripts are in place) and counts the bus messages per release. */
static gboolean
library_release_all (RedisLockTestCluster *cluster, RawConn **nodes,
                     RedisLockRegistry *registry, double *classic, double *sharded,
                     GError **error)
{
  guint64 c0 = 0, s0 = 0, c1, s1;

  for (guint i = 0; i < NOTIFY_NAMES + 1; i++)
    {
      g_autofree char *name = g_strdup_printf ("cluster-notify-%u", i == 0 ? NOTIFY_NAMES : i - 1);
      g_autoptr (RedisLock) lock = redis_lock_registry_obtain (registry, name, error);

      if (lock == NULL)
        return FALSE;
      if (i == 1 && !bus_messages (cluster, nodes, &c0, &s0, error))
        return FALSE;
      if (!redis_lock_lock (lock, error) || !redis_lock_unlock (lock, error))
        return FALSE;
    }
  if (!bus_messages (cluster, nodes, &c1, &s1, error))
    return FALSE;
  *classic = (double) (c1 - c0) / NOTIFY_NAMES;
  *sharded = (double) (s1 - s0) / NOTIFY_NAMES;
  return TRUE;
}

void
section_cluster_notify (Bench *b, Section *s)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (RedisLockTestCluster) cluster = NULL;
  g_autoptr (RedisLockRegistry) registry = NULL;
  g_autoptr (RedisLockRegistry) registry_off = NULL;
  g_autoptr (GPtrArray) keys = g_ptr_array_new_with_free_func (g_free);
  g_autoptr (GPtrArray) nodes = g_ptr_array_new_with_free_func ((GDestroyNotify) raw_close);
  double lib_classic, lib_sharded, off_classic, off_sharded, pub_classic, pub_sharded, spub_classic, spub_sharded;
  guint n_nodes, i;

  cluster = redis_lock_test_cluster_new (NOTIFY_MASTERS, NOTIFY_REPLICAS, &error);
  if (cluster == NULL)
    {
      add_na (s, "messages per release", "%s: %s",
              g_error_matches (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND)
                  ? "skipped, no cluster can be started"
                  : "cannot start the cluster",
              error->message);
      return;
    }
  n_nodes = redis_lock_test_cluster_get_n_nodes (cluster);
  for (i = 0; i < n_nodes; i++)
    {
      RawTarget t;
      RawConn *conn;

      if (!raw_target_parse (redis_lock_test_cluster_get_node_url (cluster, i), &t, &error))
        goto fail;
      conn = raw_open (&t, &error);
      raw_target_clear (&t);
      if (conn == NULL)
        goto fail;
      g_ptr_array_add (nodes, conn);
    }
  registry = redis_lock_registry_new (redis_lock_test_cluster_get_url (cluster), b->key, &error);
  registry_off = registry == NULL ? NULL
                                  : redis_lock_registry_new (redis_lock_test_cluster_get_url (cluster),
                                                             b->key, &error);
  if (registry_off == NULL)
    goto fail;
  redis_lock_registry_set_classic_notifications (registry_off, FALSE);

  for (i = 0; i < NOTIFY_NAMES; i++)
    g_ptr_array_add (keys, g_strdup_printf ("%s:cluster-notify-%u", b->key, i));
  if (!library_release_all (cluster, (RawConn **) nodes->pdata, registry, &lib_classic,
                            &lib_sharded, &error)
      || !library_release_all (cluster, (RawConn **) nodes->pdata, registry_off, &off_classic,
                               &off_sharded, &error))
    goto fail;

  if (!raw_publish_all (cluster, (RawConn **) nodes->pdata, keys, "PUBLISH", &pub_classic,
                        &pub_sharded, &error)
      || !raw_publish_all (cluster, (RawConn **) nodes->pdata, keys, "SPUBLISH", &spub_classic,
                           &spub_sharded, &error))
    goto fail;

  add_row (s, "bus messages per release", lib_classic + lib_sharded, "", 2,
           (lib_classic + lib_sharded) / (pub_classic + pub_sharded), "raw PUBLISH", NULL, FALSE);
  add_row (s, "  the same, vs raw SPUBLISH", lib_classic + lib_sharded, "", 2,
           spub_classic + spub_sharded > 0
               ? (lib_classic + lib_sharded) / (spub_classic + spub_sharded)
               : (double) NAN,
           "raw SPUBLISH", NULL, FALSE);
  add_row (s, "  of which sharded (publishshard)", lib_sharded, "", 2, (double) NAN, "", NULL,
           FALSE);
  add_row (s, "bus messages per release, classic off", off_classic + off_sharded, "", 2,
           spub_classic + spub_sharded > 0
               ? (off_classic + off_sharded) / (spub_classic + spub_sharded)
               : (double) NAN,
           "raw SPUBLISH", NULL, FALSE);
  add_row (s, "raw PUBLISH (baseline)", pub_classic + pub_sharded, "", 2, 1.0,
           "raw PUBLISH", NULL, FALSE);
  add_row (s, "raw SPUBLISH (baseline)", spub_classic + spub_sharded, "", 2,
           (spub_classic + spub_sharded) / (pub_classic + pub_sharded), "raw PUBLISH", NULL,
           FALSE);
  add_note (s,
            "a private cluster of %d masters with %d replica each (%u nodes), loopback TCP; "
            "%d names locked and unlocked once each, their keys spread over the slots; "
            "messages counted as the sum over all nodes of CLUSTER INFO "
            "cluster_stats_messages_publish_sent and ..._publishshard_sent; the raw baselines "
            "send one PUBLISH / SPUBLISH of each key to its owner; the library at its "
            "defaults (classic notifications on: SPUBLISH and PUBLISH) and with "
            "redis_lock_registry_set_classic_notifications (FALSE)",
            NOTIFY_MASTERS, NOTIFY_REPLICAS, n_nodes, NOTIFY_NAMES);
  handoff_rows (b, s, cluster, registry, registry_off);
  return;

fail:
  add_na (s, "messages per release", "%s", error->message);
}
