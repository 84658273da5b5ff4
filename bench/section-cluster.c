/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* section-cluster.c: what Redis Cluster routing costs a lock, and whether the watchdog
 * renews the leases of several masters at once.
 *
 * Both sections start their own private cluster of three masters without replicas
 * (RedisLockTestCluster, TCP on loopback) instead of using the run's server, and skip
 * with a note when redis-server is not installed. Their baselines go over plain hiredis
 * TCP connections straight to the master that owns the keys in question, so what a
 * ratio shows is the cost of the library's routing and bookkeeping, not of the cluster.
 *
 * cluster-uncontended times lock+unlock pairs of one name against two raw EVALSHA calls
 * made back to back on the master owning the name's slot (and against the same lock
 * protocol done by hand there), in alternating blocks as section-uncontended.c does.
 *
 * cluster-watchdog holds 10 000 leases, which the slots spread over the three masters,
 * and compares the wall time of watchdog ticks that renewed all of them with, for each
 * master, one pipelined batch of as many EVALSHA of the renewal script (GET, compare,
 * PEXPIRE; a copy of the library's) on shadow keys of the same slots. The tick sends one
 * such batch to each master, all at once, so its floor is the slowest master's batch,
 * not the sum of the three; the sum and the three batches sent at once from one thread
 * are reported too. Each baseline round runs right after a tick was seen, between two
 * ticks, so the two never compete for the machine and both see it in the same state.
 */
#include <math.h>
#include <string.h>

#include "bench.h"

/* Declared here as well as in section-list.h: this file does not include the table. */
void section_cluster_uncontended (Bench *b, Section *s);
void section_cluster_watchdog (Bench *b, Section *s);

#define CLUSTER_MASTERS 3
#define CLUSTER_SLOTS 16384

/* Uncontended pairs alternate with raw pairs in blocks of this many. */
#define INTERLEAVE_BLOCK 25

/* Lease TTL of the watchdog section: the watchdog ticks at a third of it. */
#define WATCHDOG_TTL_MS 3000

/* The library's renewal script (src/redis-store.c), for the baseline batches. */
static const char renew_script[] = "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
                                   "  redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
                                   "  return 1\n"
                                   "end\n"
                                   "return 0\n";

/* Starts the section's cluster; NULL after adding an n/a row (a skip when redis-server
 * is not installed). */
static RedisLockTestCluster *
start_cluster (Section *s, const char *metric)
{
  g_autoptr (GError) error = NULL;
  RedisLockTestCluster *cluster = redis_lock_test_cluster_new (CLUSTER_MASTERS, 0, &error);

  if (cluster != NULL)
    return cluster;
  if (g_error_matches (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND))
    add_na (s, metric, "skipped, no cluster can be started: %s", error->message);
  else
    add_na (s, metric, "cannot start a cluster of %d masters: %s", CLUSTER_MASTERS, error->message);
  return NULL;
}

/* A plain connection to one node of @cluster with the bench scripts loaded. */
static RawConn *
open_node (RedisLockTestCluster *cluster, guint node, GError **error)
{
  RawTarget t;
  RawConn *conn;

  if (!raw_target_parse (redis_lock_test_cluster_get_node_url (cluster, node), &t, error))
    return NULL;
  conn = raw_open (&t, error);
  raw_target_clear (&t);
  return conn;
}

/* --- cluster-uncontended ----------------------------------------------------------- */

void
section_cluster_uncontended (Bench *b, Section *s)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (RedisLockTestCluster) cluster = NULL;
  g_autoptr (RedisLockRegistry) registry = NULL;
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (RawConn) raw = NULL;
  RedisLockRegistryStats before, after;
  guint n = b->uncontended_pairs - b->uncontended_pairs % INTERLEAVE_BLOCK;
  g_autofree gint64 *lib_samples = g_new (gint64, n);
  g_autofree gint64 *raw_samples = g_new (gint64, n);
  g_autofree gint64 *hand_samples = g_new (gint64, n);
  g_autofree char *key = g_strconcat (b->key, ":cluster-uncontended", NULL);
  /* The same slot as the lock's key, so the same master serves both. */
  g_autofree char *hand_key = g_strdup_printf ("{%s}-by-hand", key);
  double commands, round_trips;
  Dist lib, raw_pair, hand;
  guint slot, i, k;
  int owner;

  cluster = start_cluster (s, "cluster pair");
  if (cluster == NULL)
    return;
  slot = redis_lock_test_cluster_key_slot (key);
  owner = redis_lock_test_cluster_get_slot_owner (cluster, slot);
  if (owner < 0)
    {
      add_na (s, "cluster pair", "no node of the cluster says it owns slot %u", slot);
      return;
    }
  registry = redis_lock_registry_new (redis_lock_test_cluster_get_url (cluster), b->key, &error);
  if (registry == NULL)
    goto fail;
  lock = redis_lock_registry_obtain (registry, "cluster-uncontended", &error);
  if (lock == NULL)
    goto fail;
  raw = open_node (cluster, (guint)owner, &error);
  if (raw == NULL)
    goto fail;
  for (i = 0; i < 200; i++)
    if (!redis_lock_lock (lock, &error) || !redis_lock_unlock (lock, &error)
        || !raw_call (raw, &error) || !raw_lock_pair (raw, hand_key, &error))
      goto fail;

  /* Blocks of raw pairs (two EVALSHA back to back), by-hand pairs and lock+unlock
   * pairs alternate, so all three see the same machine. */
  redis_lock_registry_get_stats (registry, &before);
  for (i = 0; i < n; i += INTERLEAVE_BLOCK)
    {
      for (k = i; k < i + INTERLEAVE_BLOCK; k++)
        {
          gint64 t0 = now_ns ();

          if (!raw_call (raw, &error) || !raw_call (raw, &error))
            goto fail;
          raw_samples[k] = now_ns () - t0;
        }
      for (k = i; k < i + INTERLEAVE_BLOCK; k++)
        {
          gint64 t0 = now_ns ();

          if (!raw_lock_pair (raw, hand_key, &error))
            goto fail;
          hand_samples[k] = now_ns () - t0;
        }
      for (k = i; k < i + INTERLEAVE_BLOCK; k++)
        {
          gint64 t0 = now_ns ();

          if (!redis_lock_lock (lock, &error) || !redis_lock_unlock (lock, &error))
            goto fail;
          lib_samples[k] = now_ns () - t0;
        }
    }
  redis_lock_registry_get_stats (registry, &after);
  lib = dist_of (lib_samples, n, 1);
  raw_pair = dist_of (raw_samples, n, 1);
  hand = dist_of (hand_samples, n, 1);
  commands = (double)(after.commands - before.commands) / n;
  round_trips = (double)(after.round_trips - before.round_trips) / n;

  add_row (s, "pair p50", lib.p50 / 1000, "us", 1, lib.p50 / raw_pair.p50, "2 raw calls p50",
           "<= 1.15x", lib.p50 <= 1.15 * raw_pair.p50);
  add_row (s, "pair p99", lib.p99 / 1000, "us", 1, lib.p99 / raw_pair.p99, "2 raw calls p99", NULL,
           FALSE);
  add_row (s, "pair mean", lib.mean / 1000, "us", 1, lib.mean / raw_pair.mean, "2 raw calls mean",
           NULL, FALSE);
  add_row (s, "  the same, vs by hand", lib.p50 / 1000, "us", 1, lib.p50 / hand.p50,
           "by-hand pair p50", NULL, FALSE);
  add_row (s, "by-hand pair p50 (baseline)", hand.p50 / 1000, "us", 1, hand.p50 / raw_pair.p50,
           "2 raw calls p50", NULL, FALSE);
  add_row (s, "2 raw calls p50 (baseline)", raw_pair.p50 / 1000, "us", 1, 1.0, "2 raw calls p50",
           NULL, FALSE);
  add_row (s, "2 raw calls p99 (baseline)", raw_pair.p99 / 1000, "us", 1, 1.0, "2 raw calls p99",
           NULL, FALSE);
  add_row (s, "Redis commands per pair", commands, "", 2, commands / 2, "2", NULL, FALSE);
  add_row (s, "round trips per pair", round_trips, "", 2, round_trips / 2, "2", "= 2",
           after.round_trips - before.round_trips == 2 * (guint64)n);
  add_note (s,
            "a private cluster of %d masters, no replicas, on loopback TCP; the lock's key "
            "is in slot %u, owned by node %d (port %d), where the raw connection goes",
            CLUSTER_MASTERS, slot, owner, redis_lock_test_cluster_get_port (cluster, (guint)owner));
  add_note (s,
            "%u pairs on one name from one thread, each timed, in blocks of %d alternating "
            "with blocks of two raw EVALSHA of `return 1` and blocks of by-hand pairs (the "
            "same protocol from plain hiredis), after 200 warm-up pairs",
            n, INTERLEAVE_BLOCK);
  return;

fail:
  add_na (s, "cluster pair", "%s", error->message);
}

/* --- cluster-watchdog -------------------------------------------------------------- */

/* The leases one master serves, and a plain connection to it with the renewal script. */
typedef struct
{
  int node;
  RawConn *conn;
  char *renew_sha;
  GPtrArray *shadow_keys; /* of char *: "{lease key}:raw", in the lease's slot */
  char *value;            /* the shadow keys' value, as long as a lease's value */
  double pipe_us[16];     /* this master's batch, one per round */
  double server_us[16];   /* the server's CPU in that batch's EVALSHA (INFO commandstats) */
} Master;

static void
master_clear (Master *m)
{
  raw_close (m->conn);
  g_free (m->renew_sha);
  if (m->shadow_keys != NULL)
    g_ptr_array_unref (m->shadow_keys);
  g_free (m->value);
}

/* Fills @owner (CLUSTER_SLOTS entries) with the node number serving each slot, from
 * CLUSTER SLOTS on @conn, the node's port telling which node it is; -1 where none. */
static gboolean
read_slot_map (RedisLockTestCluster *cluster, RawConn *conn, int *owner, GError **error)
{
  guint n_nodes = redis_lock_test_cluster_get_n_nodes (cluster);
  redisReply *r = raw_command (conn->c, error, "CLUSTER SLOTS");
  gboolean ok = r != NULL && r->type == REDIS_REPLY_ARRAY;
  size_t i;
  guint j;

  for (i = 0; i < CLUSTER_SLOTS; i++)
    owner[i] = -1;
  for (i = 0; ok && i < r->elements; i++)
    {
      redisReply *range = r->element[i];
      long long first, last, port, slot;
      int node = -1;

      ok = range->type == REDIS_REPLY_ARRAY && range->elements >= 3
           && range->element[2]->type == REDIS_REPLY_ARRAY && range->element[2]->elements >= 2;
      if (!ok)
        break;
      first = range->element[0]->integer;
      last = range->element[1]->integer;
      port = range->element[2]->element[1]->integer;
      for (j = 0; j < n_nodes; j++)
        if (redis_lock_test_cluster_get_port (cluster, j) == port)
          node = (int)j;
      for (slot = MAX (first, 0); slot <= MIN (last, CLUSTER_SLOTS - 1); slot++)
        owner[slot] = node;
    }
  if (r != NULL && !ok)
    g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "unexpected CLUSTER SLOTS reply");
  if (r != NULL)
    freeReplyObject (r);
  return ok;
}

/* Sends @n commands appended to each of @conns beforehand and reads every reply, or,
 * when @n_conns is 1, simply one pipelined batch. The writes all go out before any
 * reply is read, so the servers work at the same time. Replies must be integers 1. */
static gboolean
exchange (RawConn **conns, const guint *n, guint n_conns, GError **error)
{
  guint c, i;

  for (c = 0; c < n_conns; c++)
    {
      int done = 0;

      while (!done)
        if (redisBufferWrite (conns[c]->c, &done) != REDIS_OK)
          goto io_error;
    }
  for (c = 0; c < n_conns; c++)
    for (i = 0; i < n[c]; i++)
      {
        redisReply *reply = NULL;
        gboolean one;

        if (redisGetReply (conns[c]->c, (void **)&reply) != REDIS_OK)
          goto io_error;
        one = reply->type == REDIS_REPLY_INTEGER && reply->integer == 1;
        freeReplyObject (reply);
        if (!one)
          {
            g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED,
                         "a baseline renewal did not answer 1 (shadow key gone or moved?)");
            return FALSE;
          }
      }
  return TRUE;

io_error:
  g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "redis: %s", conns[c]->c->errstr);
  return FALSE;
}

static void
append_renewals (Master *m)
{
  guint i;

  for (i = 0; i < m->shadow_keys->len; i++)
    redisAppendCommand (m->conn->c, "EVALSHA %s 1 %s %s %d", m->renew_sha,
                        (const char *)g_ptr_array_index (m->shadow_keys, i), m->value, 60000);
}

/* One baseline round: each master's batch alone (into pipe_us[@round], and the CPU its
 * server spent in them into server_us[@round]), then the three at once from this
 * thread (returned in µs, NAN on error). */
static double
baseline_round (Master *masters, guint round, GError **error)
{
  RawConn *conns[CLUSTER_MASTERS];
  guint n[CLUSTER_MASTERS];
  gint64 t0;
  guint m;

  for (m = 0; m < CLUSTER_MASTERS; m++)
    {
      guint64 calls0, usec0, calls1, usec1;

      conns[m] = masters[m].conn;
      n[m] = masters[m].shadow_keys->len;
      raw_evalsha_stats (conns[m], &calls0, &usec0);
      t0 = now_ns ();
      append_renewals (&masters[m]);
      if (!exchange (&conns[m], &n[m], 1, error))
        return NAN;
      masters[m].pipe_us[round] = (double)(now_ns () - t0) / 1000;
      raw_evalsha_stats (conns[m], &calls1, &usec1);
      masters[m].server_us[round] = calls1 > calls0 ? (double)(usec1 - usec0) : NAN;
    }
  t0 = now_ns ();
  for (m = 0; m < CLUSTER_MASTERS; m++)
    append_renewals (&masters[m]);
  if (!exchange (conns, n, CLUSTER_MASTERS, error))
    return NAN;
  return (double)(now_ns () - t0) / 1000;
}

/* Loads the renewal script on @m's master and creates a shadow key, with the value the
 * lease holds, next to each lease key of @keys that it serves. The GET of each lease
 * key also checks that the master does serve it (another would answer MOVED). */
static gboolean
master_prepare (Master *m, GPtrArray *keys, GError **error)
{
  redisReply *r;
  guint i;

  r = raw_command (m->conn->c, error, "SCRIPT LOAD %s", renew_script);
  if (r == NULL)
    return FALSE;
  m->renew_sha = g_strdup (r->type == REDIS_REPLY_STRING ? r->str : "");
  freeReplyObject (r);

  for (i = 0; i < keys->len; i++)
    redisAppendCommand (m->conn->c, "GET %s", (const char *)g_ptr_array_index (keys, i));
  for (i = 0; i < keys->len; i++)
    {
      redisReply *reply = NULL;
      const char *key = g_ptr_array_index (keys, i);

      if (redisGetReply (m->conn->c, (void **)&reply) != REDIS_OK)
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "redis: %s", m->conn->c->errstr);
          return FALSE;
        }
      if (reply->type != REDIS_REPLY_STRING)
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "node %d: GET %s answered %s",
                       m->node, key, reply->type == REDIS_REPLY_ERROR ? reply->str : "no value");
          freeReplyObject (reply);
          return FALSE;
        }
      if (m->value == NULL)
        m->value = g_strdup (reply->str);
      freeReplyObject (reply);
      g_ptr_array_add (m->shadow_keys, g_strdup_printf ("{%s}:raw", key));
    }
  if (m->value == NULL)
    m->value = g_strdup ("raw-owner");
  for (i = 0; i < m->shadow_keys->len; i++)
    redisAppendCommand (m->conn->c, "SET %s %s PX %d", (const char *)g_ptr_array_index (m->shadow_keys, i),
                        m->value, 600000);
  for (i = 0; i < m->shadow_keys->len; i++)
    {
      redisReply *reply = NULL;

      if (redisGetReply (m->conn->c, (void **)&reply) != REDIS_OK)
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "redis: %s", m->conn->c->errstr);
          return FALSE;
        }
      freeReplyObject (reply);
    }
  return TRUE;
}

/* Waits up to 10 s for a watchdog tick, after the ones @before counted, that renewed
 * all @n leases; @st gets the registry's counters at the end. Polls every 5 ms, so the
 * baseline round that follows starts soon after the tick. TRUE when one came. */
static gboolean
wait_full_tick (RedisLockRegistry *registry, guint n, const RedisLockRegistryStats *before,
                RedisLockRegistryStats *st)
{
  gint64 deadline = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;
  gboolean got;

  do
    {
      g_usleep (5 * 1000);
      redis_lock_registry_get_stats (registry, st);
      got = st->watchdog_ticks > before->watchdog_ticks && st->last_tick_leases >= n;
    }
  while (!got && g_get_monotonic_time () < deadline);
  return got;
}

void
section_cluster_watchdog (Bench *b, Section *s)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (RedisLockTestCluster) cluster = NULL;
  g_autoptr (RedisLockRegistry) registry = NULL;
  RedisLockRegistryStats before, st;
  Master masters[CLUSTER_MASTERS];
  guint n = b->watchdog_leases, held = 0, unlock_failures = 0, rounds = b->quick ? 3 : 5;
  guint i, m, r, got = 0, max_rt = 0;
  RedisLock **locks = g_new0 (RedisLock *, n);
  GPtrArray *keys[CLUSTER_MASTERS];
  int *slot_owner = g_new (int, CLUSTER_SLOTS);
  double tick_us[16], max_us[16], sum_us[16], at_once_us[16], rt[16], cpu_us[16];
  double tick, slowest = NAN, sum = NAN, at_once = NAN, cpu = NAN, per_master[CLUSTER_MASTERS];
  int slowest_master = -1;
  g_autofree char *counts = NULL;
  g_autofree char *tick_list = NULL;

  memset (masters, 0, sizeof masters);
  for (m = 0; m < CLUSTER_MASTERS; m++)
    keys[m] = g_ptr_array_new_with_free_func (g_free);
  rounds = MIN (rounds, G_N_ELEMENTS (tick_us));

  cluster = start_cluster (s, "cluster watchdog tick");
  if (cluster == NULL)
    goto out;
  for (m = 0; m < CLUSTER_MASTERS; m++)
    {
      masters[m].node = (int)m;
      masters[m].shadow_keys = g_ptr_array_new_with_free_func (g_free);
      masters[m].conn = open_node (cluster, m, &error);
      if (masters[m].conn == NULL)
        goto fail;
    }
  if (!read_slot_map (cluster, masters[0].conn, slot_owner, &error))
    goto fail;

  registry = redis_lock_registry_new (redis_lock_test_cluster_get_url (cluster), b->key, &error);
  if (registry == NULL)
    goto fail;
  redis_lock_registry_set_expire_after_ms (registry, WATCHDOG_TTL_MS);
  for (i = 0; i < n; i++)
    {
      char name[32];
      char *key;
      int owner;

      g_snprintf (name, sizeof name, "lease-%05u", i);
      locks[i] = redis_lock_registry_obtain (registry, name, &error);
      if (locks[i] == NULL || !redis_lock_lock (locks[i], &error))
        goto fail;
      held++;
      key = g_strconcat (b->key, ":", name, NULL);
      owner = slot_owner[redis_lock_test_cluster_key_slot (key)];
      if (owner < 0 || owner >= CLUSTER_MASTERS)
        {
          g_set_error (&error, G_IO_ERROR, G_IO_ERROR_FAILED,
                       "slot of %s served by no master (node %d)", key, owner);
          g_free (key);
          goto fail;
        }
      g_ptr_array_add (keys[owner], key);
    }
  /* The map came from one node: check each master's first lease with the helper. */
  for (m = 0; m < CLUSTER_MASTERS; m++)
    if (keys[m]->len > 0
        && redis_lock_test_cluster_get_slot_owner (
               cluster, redis_lock_test_cluster_key_slot (g_ptr_array_index (keys[m], 0)))
               != (int)m)
      {
        g_set_error (&error, G_IO_ERROR, G_IO_ERROR_FAILED,
                     "CLUSTER SLOTS and the cluster disagree on the owner of %s",
                     (const char *)g_ptr_array_index (keys[m], 0));
        goto fail;
      }
  for (m = 0; m < CLUSTER_MASTERS; m++)
    if (!master_prepare (&masters[m], keys[m], &error))
      goto fail;

  /* Each round: wait for a tick that renewed every lease, then at once (the next tick
   * is a third of the TTL away) time the baseline batches. */
  redis_lock_registry_get_stats (registry, &before);
  for (r = 0; r < rounds; r++)
    {
      double max = 0, total = 0, server = 0;

      if (!wait_full_tick (registry, n, &before, &st))
        break;
      before = st;
      tick_us[got] = (double)st.last_tick_us;
      rt[got] = (double)st.last_tick_round_trips;
      max_rt = MAX (max_rt, (guint)st.last_tick_round_trips);
      at_once_us[got] = baseline_round (masters, got, &error);
      if (isnan (at_once_us[got]))
        goto fail;
      for (m = 0; m < CLUSTER_MASTERS; m++)
        {
          max = MAX (max, masters[m].pipe_us[got]);
          total += masters[m].pipe_us[got];
          server += masters[m].server_us[got];
        }
      max_us[got] = max;
      sum_us[got] = total;
      cpu_us[got] = server;
      got++;
    }
  redis_lock_registry_get_stats (registry, &st);

  if (got == 0)
    {
      add_na (s, "cluster watchdog tick",
              "no tick renewed all %u leases within 10 s (ticks %" G_GUINT64_FORMAT
              " -> %" G_GUINT64_FORMAT ", last tick renewed %" G_GUINT64_FORMAT ")",
              n, before.watchdog_ticks, st.watchdog_ticks, st.last_tick_leases);
      goto out;
    }
  tick_list = g_strdup_printf ("%.0f", tick_us[0]);
  for (i = 1; i < got; i++)
    {
      char *longer = g_strdup_printf ("%s, %.0f", tick_list, tick_us[i]);

      g_free (tick_list);
      tick_list = longer;
    }
  tick = median (tick_us, got);
  slowest = median (max_us, got);
  sum = median (sum_us, got);
  at_once = median (at_once_us, got);
  cpu = median (cpu_us, got);
  for (m = 0; m < CLUSTER_MASTERS; m++)
    {
      per_master[m] = median (masters[m].pipe_us, got);
      if (slowest_master < 0 || per_master[m] > per_master[slowest_master])
        slowest_master = (int)m;
    }

  add_row (s, "tick wall time", tick, "us", 0, tick / slowest, "slowest master's pipeline",
           "<= 1.5x", tick <= 1.5 * slowest);
  add_row (s, "  the same, vs the sum", tick, "us", 0, tick / sum, "sum of the raw pipelines", NULL,
           FALSE);
  add_row (s, "  the same, vs all at once", tick, "us", 0, tick / at_once,
           "raw pipelines sent at once", NULL, FALSE);
  add_row (s, "tick round trips", median (rt, got), "", 0, NAN, NULL, "= 1", max_rt == 1);
  add_row (s, "tick leases", (double)st.last_tick_leases, "", 0, (double)st.last_tick_leases / n,
           "leases held", NULL, FALSE);
  add_row (s, "slowest master (baseline)", slowest, "us", 0, 1.0,
           "slowest master's pipeline", NULL, FALSE);
  add_row (s, "sum of the 3 pipelines", sum, "us", 0, sum / slowest,
           "slowest master's pipeline", NULL, FALSE);
  add_row (s, "3 pipelines at once", at_once, "us", 0, at_once / slowest,
           "slowest master's pipeline", NULL, FALSE);
  add_row (s, "servers' CPU, 3 pipelines", cpu, "us", 0, cpu / slowest,
           "slowest master's pipeline", NULL, FALSE);
  for (m = 0; m < CLUSTER_MASTERS; m++)
    {
      g_autofree char *metric
          = g_strdup_printf ("  master %u: %u leases", m, masters[m].shadow_keys->len);

      add_row (s, metric, per_master[m], "us", 0, per_master[m] / slowest,
               "slowest master's pipeline", NULL, FALSE);
    }
  add_row (s, "leases lost", (double)st.leases_lost, "", 0, NAN, NULL, "= 0", st.leases_lost == 0);
  counts = g_strdup_printf ("%u / %u / %u", masters[0].shadow_keys->len,
                            masters[1].shadow_keys->len, masters[2].shadow_keys->len);
  add_note (s,
            "a private cluster of %d masters, no replicas, on loopback TCP; one registry holds "
            "%u distinct locks taken from one thread (%s on masters 0 / 1 / 2), TTL %d ms",
            CLUSTER_MASTERS, n, counts, WATCHDOG_TTL_MS);
  add_note (s,
            "%u ticks that renewed every lease (the registry's last_tick_* counters, in us: "
            "%s); medians; round trips: the most any of them took",
            got, tick_list);
  add_note (s,
            "baseline, right after each tick: for each master, one pipelined batch of as many "
            "EVALSHA of the renewal script (GET, compare, PEXPIRE) as it serves leases, on "
            "shadow keys of the same slots, on a plain TCP connection; slowest = the largest of "
            "the three in a round (by median, master %d), then the three batches "
            "written at once and read in turn",
            slowest_master);
  add_note (s,
            "the three servers spend %.0f us of CPU in one round of batches (INFO "
            "commandstats, EVALSHA only); on %ld CPUs, shared with this process, the batches "
            "cannot all end in less than %.0f us however well they overlap",
            cpu, b->nproc, cpu / MAX (b->nproc, 1));
  goto out;

fail:
  if (held < n)
    add_na (s, "cluster watchdog tick", "%u of %u locked: %s", held, n, error->message);
  else
    add_na (s, "cluster watchdog tick", "%s", error->message);
out:
  for (i = 0; i < n; i++)
    {
      if (locks[i] == NULL)
        continue;
      if (i < held && !redis_lock_unlock (locks[i], NULL))
        unlock_failures++;
      redis_lock_unref (locks[i]);
    }
  if (unlock_failures > 0)
    add_note (s, "%u of %u unlocks failed", unlock_failures, held);
  for (m = 0; m < CLUSTER_MASTERS; m++)
    {
      master_clear (&masters[m]);
      g_ptr_array_unref (keys[m]);
    }
  g_free (locks);
  g_free (slot_owner);
}
