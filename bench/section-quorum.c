/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* section-quorum.c: a quorum registry (Redlock over 3 independent masters) against a
 * registry on one of those masters alone, measured in the same run.
 *
 * The quorum store sends each request to the 3 nodes at once and collects the replies
 * with one poll, so an uncontended lock+unlock should cost about one node's, not
 * three: the two are timed one pair at a time in blocks of INTERLEAVE_BLOCK that
 * alternate, on three private redis-servers (the single-node registry uses the first),
 * so both see the same machine. The hand-off is a ping-pong between two registries of
 * this process on two threads (a waiter blocked in its wait, woken by the holder's
 * unlock notification), once over one node and once over the quorum, in alternating
 * halves; waits the waiter's contended_attempts does not confirm are left out, as in
 * section-handoff.c.
 */
#include <math.h>

#include "bench.h"

void section_quorum (Bench *b, Section *s);

#define QUORUM_NODES 3

/* Pairs of the two registries alternate in blocks of this many. */
#define INTERLEAVE_BLOCK 25

/* Hand-offs at the start of each ping-pong run that are not counted. */
#define PINGPONG_WARMUP 10

/* No hand-off within this long is a failure. */
#define PINGPONG_TIMEOUT_MS 10000

/* --- Uncontended ------------------------------------------------------------------- */

static gboolean
time_pairs (RedisLock *lock, gint64 *samples, guint n, GError **error)
{
  for (guint k = 0; k < n; k++)
    {
      gint64 t0 = now_ns ();

      if (!redis_lock_lock (lock, error) || !redis_lock_unlock (lock, error))
        return FALSE;
      samples[k] = now_ns () - t0;
    }
  return TRUE;
}

/* Two rounds of EVALSHA sent to each of the @m connections of @raw at once and then
 * read. Without @key, of `return 1`: the least a lock+unlock on @m nodes costs on this
 * machine; with it, the lock protocol by hand (bench-hiredis.c's acquire script, then
 * its release script, on @key): the same fan-out a Redlock written with raw hiredis
 * makes, so that the server's work for the lock commands is in both. */
static gboolean
time_raw (RawConn **raw, guint m, const char *key, gint64 *samples, guint n, GError **error)
{
  g_autofree char *channel = key != NULL ? g_strconcat (key, "-channel", NULL) : NULL;
  gboolean ok = TRUE;

  for (guint k = 0; k < n; k++)
    {
      gint64 t0 = now_ns ();

      for (guint round = 0; round < 2; round++)
        {
          for (guint i = 0; i < m; i++)
            {
              int done = 0;
              if (key == NULL)
                redisAppendCommand (raw[i]->c, "EVALSHA %s 0", raw[i]->sha);
              else if (round == 0)
                redisAppendCommand (raw[i]->c, "EVALSHA %s 1 %s raw-owner 60000",
                                    raw[i]->acquire_sha, key);
              else
                redisAppendCommand (raw[i]->c, "EVALSHA %s 1 %s raw-owner %s",
                                    raw[i]->release_sha, key, channel);
              redisBufferWrite (raw[i]->c, &done);
            }
          for (guint i = 0; i < m; i++)
            {
              redisReply *reply = NULL;
              if (redisGetReply (raw[i]->c, (void **) &reply) != REDIS_OK)
                {
                  g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "redis: %s",
                               raw[i]->c->errstr);
                  return FALSE;
                }
              /* Each script of the lock by hand answers 1: taken, then released. */
              ok = ok
                   && (key == NULL
                       || (reply->type == REDIS_REPLY_INTEGER && reply->integer == 1));
              freeReplyObject (reply);
            }
        }
      samples[k] = now_ns () - t0;
      if (!ok)
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "the lock by hand of %s failed", key);
          return FALSE;
        }
    }
  return TRUE;
}

static void
quorum_uncontended (Bench *b, Section *s, RedisLockRegistry *single, RedisLockRegistry *quorum,
                    RawConn **raw)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (RedisLock) one = NULL;
  g_autoptr (RedisLock) all = NULL;
  guint n = b->uncontended_pairs - b->uncontended_pairs % INTERLEAVE_BLOCK;
  g_autofree gint64 *one_samples = g_new (gint64, n);
  g_autofree gint64 *all_samples = g_new (gint64, n);
  g_autofree gint64 *raw1_samples = g_new (gint64, n);
  g_autofree gint64 *raw3_samples = g_new (gint64, n);
  g_autofree gint64 *hand3_samples = g_new (gint64, n);
  g_autofree char *hand_key = g_strconcat (b->key, "-quorum-by-hand", NULL);
  RedisLockRegistryStats before, after;
  Dist d1, dq, r1, r3, h3;

  one = redis_lock_registry_obtain (single, "quorum-uncontended", &error);
  all = one != NULL ? redis_lock_registry_obtain (quorum, "quorum-uncontended", &error) : NULL;
  if (all == NULL || !time_pairs (one, one_samples, 200, &error)
      || !time_pairs (all, all_samples, 200, &error))
    goto fail;
  redis_lock_registry_get_stats (quorum, &before);
  for (guint i = 0; i < n; i += INTERLEAVE_BLOCK)
    if (!time_pairs (one, one_samples + i, INTERLEAVE_BLOCK, &error)
        || !time_pairs (all, all_samples + i, INTERLEAVE_BLOCK, &error)
        || !time_raw (raw, 1, NULL, raw1_samples + i, INTERLEAVE_BLOCK, &error)
        || !time_raw (raw, QUORUM_NODES, NULL, raw3_samples + i, INTERLEAVE_BLOCK, &error)
        || !time_raw (raw, QUORUM_NODES, hand_key, hand3_samples + i, INTERLEAVE_BLOCK, &error))
      goto fail;
  redis_lock_registry_get_stats (quorum, &after);
  d1 = dist_of (one_samples, n, 1);
  dq = dist_of (all_samples, n, 1);
  r1 = dist_of (raw1_samples, n, 1);
  r3 = dist_of (raw3_samples, n, 1);
  h3 = dist_of (hand3_samples, n, 1);

  add_row (s, "3-node pair p50", dq.p50 / 1000, "us", 1, dq.p50 / d1.p50, "1-node pair p50",
           "<= 1.3x", dq.p50 <= 1.3 * d1.p50);
  add_row (s, "3-node pair p99", dq.p99 / 1000, "us", 1, dq.p99 / d1.p99, "1-node pair p99", NULL,
           FALSE);
  add_row (s, "3-node pair mean", dq.mean / 1000, "us", 1, dq.mean / d1.mean, "1-node pair mean",
           NULL, FALSE);
  add_row (s, "1-node pair p50 (baseline)", d1.p50 / 1000, "us", 1, 1.0, "1-node pair p50", NULL,
           FALSE);
  add_row (s, "  3-node pair vs raw 3-node floor", dq.p50 / 1000, "us", 1, dq.p50 / r3.p50,
           "raw 3-node p50", NULL, FALSE);
  add_row (s, "  3-node pair vs by-hand 3-node lock", dq.p50 / 1000, "us", 1, dq.p50 / h3.p50,
           "by-hand 3-node p50", NULL, FALSE);
  add_row (s, "by-hand 3-node lock p50", h3.p50 / 1000, "us", 1, h3.p50 / r3.p50,
           "raw 3-node p50", NULL, FALSE);
  add_row (s, "raw 3-node floor p50", r3.p50 / 1000, "us", 1, r3.p50 / r1.p50, "raw 1-node p50",
           NULL, FALSE);
  add_row (s, "raw 1-node p50", r1.p50 / 1000, "us", 1, 1.0, "raw 1-node p50", NULL, FALSE);
  add_row (s, "3-node commands per pair", (double) (after.commands - before.commands) / n, "", 2,
           NAN, NULL, NULL, FALSE);
  add_note (s,
            "%u lock+unlock pairs per registry from one thread, each timed, in blocks of %d "
            "alternating between a registry on node 1 alone and a quorum registry on nodes "
            "1-3 (three private redis-servers on Unix sockets), after 200 warm-up pairs each",
            n, INTERLEAVE_BLOCK);
  add_note (s,
            "raw floor: two rounds of EVALSHA `return 1` on plain hiredis connections, sent to "
            "node 1 alone, or to nodes 1-3 at once and then read, in blocks alternating with "
            "the pairs: what any lock+unlock on 1 or 3 servers costs on this machine (the "
            "three servers share its CPUs)");
  add_note (s,
            "by-hand 3-node lock: the same fan-out with the lock protocol written by hand "
            "(an acquire script, then a compare-and-delete script that publishes), in the "
            "same blocks: it adds the servers' work for the lock commands to the floor, "
            "which the three servers sharing the machine's CPUs make visible in the pair");
  return;

fail:
  add_na (s, "quorum pair", "%s", error->message);
}

/* --- Hand-off ---------------------------------------------------------------------- */

/* Two threads on two registries ping-pong one lock: the waiter says it is about to
 * wait, the holder keeps the lock HANDOFF_HOLD_US longer, unlocks and notes when its
 * unlock returned; the waiter's lock returns some time after that. */
typedef struct
{
  RedisLockRegistry *registries[2];
  guint steps;
  GMutex m;
  GCond c;
  gboolean started;   /* side 0 holds the lock */
  guint step;         /* the hand-off under way */
  gboolean waiting;   /* its waiter is about to wait */
  gint64 released_ns; /* its holder's unlock returned; 0: not yet */
  gint64 *latency;    /* per step */
  gboolean *waited;   /* per step: contended_attempts confirmed the wait */
  GError *error;
  gboolean failed;
} PingPong;

typedef struct
{
  PingPong *pp;
  guint side;
} Player;

static gboolean
pp_wait_for (PingPong *pp, gboolean (*ready) (PingPong *pp))
{
  gint64 end = g_get_monotonic_time () + PINGPONG_TIMEOUT_MS * 1000;
  gboolean ok = TRUE;

  g_mutex_lock (&pp->m);
  while (ok && !ready (pp) && !pp->failed)
    ok = g_cond_wait_until (&pp->c, &pp->m, end);
  ok = ok && !pp->failed;
  g_mutex_unlock (&pp->m);
  return ok;
}

static gboolean
pp_waiting (PingPong *pp)
{
  return pp->waiting;
}

static gboolean
pp_started (PingPong *pp)
{
  return pp->started;
}

static gboolean
pp_released (PingPong *pp)
{
  return pp->released_ns != 0;
}

static void
pp_fail (PingPong *pp, GError *error)
{
  g_mutex_lock (&pp->m);
  if (!pp->failed)
    pp->error = error;
  else
    g_clear_error (&error);
  pp->failed = TRUE;
  g_cond_broadcast (&pp->c);
  g_mutex_unlock (&pp->m);
}

static gpointer
player_main (gpointer data)
{
  Player *pl = data;
  PingPong *pp = pl->pp;
  RedisLockRegistry *registry = pp->registries[pl->side];
  g_autoptr (RedisLock) lock = NULL;
  GError *error = NULL;

  lock = redis_lock_registry_obtain (registry, "quorum-handoff", &error);
  if (lock == NULL)
    goto fail;
  /* Side 0 holds first. */
  if (pl->side == 0)
    {
      if (!redis_lock_lock (lock, &error))
        goto fail;
      g_mutex_lock (&pp->m);
      pp->started = TRUE;
      g_cond_broadcast (&pp->c);
      g_mutex_unlock (&pp->m);
    }
  else if (!pp_wait_for (pp, pp_started))
    return NULL;
  for (guint i = 0; i < pp->steps; i++)
    {
      gboolean holder = i % 2 == pl->side;

      if (holder)
        {
          if (!pp_wait_for (pp, pp_waiting))
            return NULL;
          g_usleep (HANDOFF_HOLD_US);
          if (!redis_lock_unlock (lock, &error))
            goto fail;
          g_mutex_lock (&pp->m);
          pp->released_ns = now_ns ();
          g_cond_broadcast (&pp->c);
          g_mutex_unlock (&pp->m);
          /* The next step starts once the waiter recorded this one. */
          g_mutex_lock (&pp->m);
          while (pp->step == i && !pp->failed)
            g_cond_wait (&pp->c, &pp->m);
          g_mutex_unlock (&pp->m);
        }
      else
        {
          RedisLockRegistryStats before, after;
          gint64 acquired;

          redis_lock_registry_get_stats (registry, &before);
          g_mutex_lock (&pp->m);
          pp->waiting = TRUE;
          pp->released_ns = 0;
          g_cond_broadcast (&pp->c);
          g_mutex_unlock (&pp->m);
          if (!redis_lock_try_lock_for (lock, PINGPONG_TIMEOUT_MS, NULL, &error))
            {
              if (error == NULL)
                error = g_error_new (G_IO_ERROR, G_IO_ERROR_TIMED_OUT,
                                     "the released lock was not acquired within %d ms",
                                     PINGPONG_TIMEOUT_MS);
              goto fail;
            }
          acquired = now_ns ();
          redis_lock_registry_get_stats (registry, &after);
          if (!pp_wait_for (pp, pp_released))
            return NULL;
          g_mutex_lock (&pp->m);
          pp->latency[i] = acquired - pp->released_ns;
          pp->waited[i] = after.contended_attempts > before.contended_attempts;
          pp->waiting = FALSE;
          pp->step = i + 1;
          g_cond_broadcast (&pp->c);
          g_mutex_unlock (&pp->m);
        }
    }
  if (redis_lock_is_held_by_current_thread (lock) && !redis_lock_unlock (lock, &error))
    goto fail;
  return NULL;

fail:
  pp_fail (pp, error);
  return NULL;
}

/* Runs @steps hand-offs between @a and @b and appends the confirmed latencies after
 * the warm-up to @out. */
static gboolean
pingpong (RedisLockRegistry *a, RedisLockRegistry *b, guint steps, GArray *out, GError **error)
{
  PingPong pp = { .registries = { a, b }, .steps = steps };
  Player players[2] = { { &pp, 0 }, { &pp, 1 } };
  g_autofree gint64 *latency = g_new0 (gint64, steps);
  g_autofree gboolean *waited = g_new0 (gboolean, steps);
  GThread *threads[2];

  pp.latency = latency;
  pp.waited = waited;
  g_mutex_init (&pp.m);
  g_cond_init (&pp.c);
  threads[0] = g_thread_new ("pingpong-0", player_main, &players[0]);
  threads[1] = g_thread_new ("pingpong-1", player_main, &players[1]);
  g_thread_join (threads[0]);
  g_thread_join (threads[1]);
  g_mutex_clear (&pp.m);
  g_cond_clear (&pp.c);
  if (pp.failed)
    {
      if (pp.error != NULL)
        g_propagate_error (error, pp.error);
      else
        g_set_error (error, G_IO_ERROR, G_IO_ERROR_TIMED_OUT, "no hand-off within %d ms",
                     PINGPONG_TIMEOUT_MS);
      return FALSE;
    }
  for (guint i = PINGPONG_WARMUP; i < steps; i++)
    if (waited[i])
      g_array_append_val (out, latency[i]);
  return TRUE;
}

static void
quorum_handoff (Bench *b, Section *s, RedisLockRegistry *single[2], RedisLockRegistry *quorum[2])
{
  g_autoptr (GError) error = NULL;
  g_autoptr (GArray) one = g_array_new (FALSE, FALSE, sizeof (gint64));
  g_autoptr (GArray) all = g_array_new (FALSE, FALSE, sizeof (gint64));
  guint steps = MAX (b->handoffs / 4, PINGPONG_WARMUP + 10);
  Dist d1, dq;

  for (guint half = 0; half < 2; half++)
    if (!pingpong (single[0], single[1], steps, one, &error)
        || !pingpong (quorum[0], quorum[1], steps, all, &error))
      {
        add_na (s, "quorum hand-off", "%s", error->message);
        return;
      }
  if (one->len == 0 || all->len == 0)
    {
      add_na (s, "quorum hand-off", "no wait was confirmed by contended_attempts");
      return;
    }
  d1 = dist_of ((gint64 *) one->data, one->len, 1);
  dq = dist_of ((gint64 *) all->data, all->len, 1);
  add_row (s, "3-node hand-off p50", dq.p50 / 1000, "us", 1, dq.p50 / d1.p50,
           "1-node hand-off p50", "<= 1.5x", dq.p50 <= 1.5 * d1.p50);
  add_row (s, "3-node hand-off p99", dq.p99 / 1000, "us", 1, dq.p99 / d1.p99,
           "1-node hand-off p99", NULL, FALSE);
  add_row (s, "1-node hand-off p50 (baseline)", d1.p50 / 1000, "us", 1, 1.0,
           "1-node hand-off p50", NULL, FALSE);
  add_row (s, "confirmed waits, 3 nodes", (double) all->len, "", 0,
           (double) all->len / (2 * (steps - PINGPONG_WARMUP)), "hand-offs counted", NULL, FALSE);
  add_note (s,
            "hand-off: two registries of this process on two threads ping-pong one lock "
            "(%u hand-offs per run, first %d not counted), from the holder's unlock returning "
            "to the waiter's lock returning; the holder keeps the lock %d us after the waiter "
            "announces itself; runs alternate 1 node, 3 nodes, 1 node, 3 nodes",
            steps, PINGPONG_WARMUP, HANDOFF_HOLD_US);
}

void
section_quorum (Bench *b, Section *s)
{
  g_autoptr (GError) error = NULL;
  RedisLockTestServer *servers[QUORUM_NODES] = { NULL };
  const char *urls[QUORUM_NODES + 1] = { NULL };
  RedisLockRegistry *single[2] = { NULL }, *quorum[2] = { NULL };
  RawConn *raw[QUORUM_NODES] = { NULL };
  g_autofree char *key = g_strconcat (b->key, "-quorum", NULL);

  for (guint i = 0; i < QUORUM_NODES; i++)
    {
      servers[i] = redis_lock_test_server_new (NULL, &error);
      if (servers[i] == NULL)
        {
          add_na (s, "quorum", "%s%s",
                  g_error_matches (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND) ? "skipped: " : "",
                  error->message);
          goto out;
        }
      urls[i] = redis_lock_test_server_get_url (servers[i]);
    }
  for (guint i = 0; i < QUORUM_NODES; i++)
    {
      RawTarget t;
      if (!raw_target_parse (urls[i], &t, &error))
        goto raw_failed;
      raw[i] = raw_open (&t, &error);
      raw_target_clear (&t);
      if (raw[i] == NULL)
        goto raw_failed;
    }
  for (guint k = 0; k < 2; k++)
    {
      single[k] = redis_lock_registry_new (urls[0], key, &error);
      quorum[k] = single[k] != NULL ? redis_lock_registry_new_quorum (urls, key, &error) : NULL;
      if (quorum[k] == NULL)
        {
          add_na (s, "quorum", "%s", error->message);
          goto out;
        }
    }
  quorum_uncontended (b, s, single[0], quorum[0], raw);
  quorum_handoff (b, s, single, quorum);
  goto out;

raw_failed:
  add_na (s, "quorum", "%s", error->message);
out:
  for (guint k = 0; k < 2; k++)
    {
      g_clear_pointer (&single[k], redis_lock_registry_unref);
      g_clear_pointer (&quorum[k], redis_lock_registry_unref);
    }
  for (guint i = 0; i < QUORUM_NODES; i++)
    {
      g_clear_pointer (&raw[i], raw_close);
      g_clear_pointer (&servers[i], redis_lock_test_server_free);
    }
}
