/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* stress-jepsen.c: the history scenarios of the stress test, in the style of Jepsen.
 *
 * A history scenario runs the stress workers in history mode on one topology (a single
 * server, a Sentinel deployment, a Cluster, a quorum of three servers) while faults are
 * injected, and judges the locks only afterwards, from what every holder recorded:
 * each critical section's interval [lock returned TRUE, unlock about to be called] on
 * CLOCK_MONOTONIC, its fencing token and whether its holder was told the lease was lost.
 * All processes run on one machine, so one monotonic clock orders every interval of
 * every process; nothing is asked of Redis to judge, so the same check serves every
 * topology, including the ones where the servers themselves lose writes.
 *
 * The faults of a single server (CLIENT KILL storms, a worker frozen past its TTL, the
 * server restarted empty) are those of stress-faults.c; this file adds the topologies'
 * own: a forced Sentinel failover, a Cluster master killed after its replica fell
 * behind (paused) and failed over, a quorum node restarted empty. The verdicts are
 * counts over the merged history: overlaps (two holders of one name at once), of which
 * reported (at least one of the two was told) and silent (neither was), and token
 * regressions; each scenario says which of them its contract rules out.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "config.h"

#include "stress.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define QUORUM_NODES 3
/* Silent overlaps and token regressions named one by one in the test log. */
#define MAX_EXAMPLES 5

/* ------------------------------------------------------------------------------------- */
/* Topologies. */

gboolean
topology_start (Controller *c)
{
  const Scenario *s = c->s;

  switch (s->topology)
    {
      case TOPOLOGY_SENTINEL:
        c->sentinel = redis_lock_test_sentinel_new_or_skip (s->replicas, 1);
        if (c->sentinel == NULL)
          return FALSE;
        c->url = g_strdup (redis_lock_test_sentinel_get_url (c->sentinel));
        return TRUE;
      case TOPOLOGY_CLUSTER:
        c->cluster = redis_lock_test_cluster_new_or_skip (3, 1);
        if (c->cluster == NULL)
          return FALSE;
        c->url = g_strdup (redis_lock_test_cluster_get_url (c->cluster));
        return TRUE;
      case TOPOLOGY_QUORUM:
        {
          g_autoptr (GString) urls = g_string_new (NULL);

          for (guint i = 0; i < QUORUM_NODES; i++)
            {
              c->quorum[i] = redis_lock_test_server_new_or_skip (NULL);
              if (c->quorum[i] == NULL)
                {
                  topology_stop (c);
                  return FALSE;
                }
              g_string_append_printf (urls, "%s%s", i > 0 ? " " : "",
                                      redis_lock_test_server_get_url (c->quorum[i]));
            }
          c->url = g_string_free (g_steal_pointer (&urls), FALSE);
          return TRUE;
        }
      case TOPOLOGY_SERVER:
      default:
        g_assert_not_reached ();
    }
  return FALSE;
}

void
topology_stop (Controller *c)
{
  g_clear_pointer (&c->sentinel, redis_lock_test_sentinel_free);
  g_clear_pointer (&c->cluster, redis_lock_test_cluster_free);
  for (guint i = 0; i < QUORUM_NODES; i++)
    g_clear_pointer (&c->quorum[i], redis_lock_test_server_free);
  g_clear_pointer (&c->url, g_free);
}

char *
history_path (Controller *c, guint index)
{
  g_autofree char *file = g_strdup_printf ("history-%u", index);

  return g_build_filename (c->dir, file, NULL);
}

/* ------------------------------------------------------------------------------------- */
/* Faults of the topologies. */

static void
after_fault (Controller *c, const char *what, guint i)
{
  if (!wait_progress (c, progress_total (c) + POST_FAULT_SECTIONS, 30000))
    problem (c, "no progress within 30 s after %s %u", what, i + 1);
}

/* SENTINEL FAILOVER, and the helper's wait until the Sentinel names a new master that
 * answers ROLE as master. The former master goes on taking writes until it is demoted. */
static void
sentinel_failover (Controller *c, guint i)
{
  g_autoptr (GError) error = NULL;
  gint64 from = g_get_monotonic_time ();

  if (redis_lock_test_sentinel_failover (c->sentinel, 30000, &error) < 0)
    {
      problem (c, "failover %u: %s", i + 1, error->message);
      return;
    }
  /* The former master takes writes until it is demoted: the window lasts the settle. */
  note_lease_fault (c, LEASE_FAULT_ALL_NAMES, from);
  g_array_index (c->lease_faults, LeaseFault, c->lease_faults->len - 1).to_us
      += c->s->settle_ms * 1000;
  c->failovers_done++;
  after_fault (c, "failover", i);
}

/* Sends @command to cluster node @node on a connection of its own; FALSE when it
 * could not be sent or was refused. */
static gboolean
cluster_node_command (Controller *c, guint node, const char *command)
{
  struct timeval tv = { 5, 0 };
  redisContext *rc = redisConnectWithTimeout (
      "127.0.0.1", redis_lock_test_cluster_get_port (c->cluster, node), tv);
  redisReply *reply;
  gboolean ok;

  if (rc == NULL || rc->err != 0)
    {
      if (rc != NULL)
        redisFree (rc);
      return FALSE;
    }
  redisSetTimeout (rc, tv);
  reply = redisCommand (rc, command);
  ok = reply != NULL && reply->type != REDIS_REPLY_ERROR;
  if (reply != NULL)
    freeReplyObject (reply);
  redisFree (rc);
  return ok;
}

/* The master owning name-(i mod names): its replica is paused and the master drops the
 * replica's link (a paused replica's socket would otherwise still take in the
 * replication stream), so the replica misses the workers' latest writes; then the
 * master is killed and the replica resumed, and the Cluster promotes it (its data age
 * does not bar it: the replica validity factor is 0). When another failover follows,
 * the killed master is started again once the Cluster is whole, and rejoins as a
 * replica. */
static void
cluster_failover (Controller *c, guint i)
{
  g_autoptr (GError) error = NULL;
  /* The semaphore's and the read-write lock's keys are tagged with the name. */
  g_autofree char *key
      = c->s->member == MEMBER_SEMAPHORE || c->s->member == MEMBER_RWLOCK
            ? g_strdup_printf (STRESS_REGISTRY_KEY ":{name-%u}", i % c->s->names)
            : g_strdup_printf (STRESS_REGISTRY_KEY ":name-%u", i % c->s->names);
  int master
      = redis_lock_test_cluster_get_slot_owner (c->cluster, redis_lock_test_cluster_key_slot (key));
  int replica = -1;
  gint64 from = g_get_monotonic_time ();

  if (master < 0)
    {
      problem (c, "failover %u: no owner of %s's slot", i + 1, key);
      return;
    }
  /* The replica of a master: node 3 + m for the first masters; after a failover the
   * former master (now its replica) is that number instead. */
  for (guint n = 0; n < redis_lock_test_cluster_get_n_nodes (c->cluster); n++)
    if ((int)n != master && (n % 3) == ((guint)master % 3))
      replica = (int)n;
  if (replica < 0)
    {
      problem (c, "failover %u: no replica of node %d", i + 1, master);
      return;
    }
  if (!cluster_node_command (c, (guint)replica, "CONFIG SET cluster-replica-validity-factor 0"))
    problem (c, "failover %u: node %d refused the validity factor", i + 1, replica);
  redis_lock_test_cluster_pause_node (c->cluster, (guint)replica);
  if (!cluster_node_command (c, (guint)master, "CLIENT KILL TYPE replica"))
    problem (c, "failover %u: node %d did not drop its replica", i + 1, master);
  if (!wait_progress (c, progress_total (c) + POST_FAULT_SECTIONS / 2, 30000))
    problem (c, "no progress within 30 s with node %d paused", replica);
  redis_lock_test_cluster_stop_node (c->cluster, (guint)master);
  redis_lock_test_cluster_resume_node (c->cluster, (guint)replica);
  if (!redis_lock_test_cluster_wait_ok (c->cluster, 30000, &error))
    {
      problem (c, "failover %u: %s", i + 1, error->message);
      return;
    }
  note_lease_fault (c, LEASE_FAULT_ALL_NAMES, from);
  c->failovers_done++;
  after_fault (c, "failover", i);
  if (i + 1 < c->s->failovers
      && (!redis_lock_test_cluster_start_node (c->cluster, (guint)master, &error)
          || !redis_lock_test_cluster_wait_ok (c->cluster, 30000, &error)))
    problem (c, "failover %u: node %d does not rejoin: %s", i + 1, master, error->message);
}

/* Quorum node i mod 3 killed and started again empty. The next restart waits two TTLs
 * first, so each one finds every lease of the run either renewed on the restarted node
 * or expired: a quorum rules out silent overlaps only while at most a minority of the
 * nodes lost a lease at a time. */
static void
quorum_restart (Controller *c, guint i)
{
  g_autoptr (GError) error = NULL;
  RedisLockTestServer *node = c->quorum[i % QUORUM_NODES];
  gint64 from;

  if (i > 0)
    g_usleep (2 * c->s->ttl_ms * 1000); /* fault timing: one restarted node at a time */
  from = g_get_monotonic_time ();
  redis_lock_test_server_stop (node);
  if (!redis_lock_test_server_start (node, &error))
    {
      problem (c, "restart of quorum node %u: %s", i % QUORUM_NODES, error->message);
      return;
    }
  /* A lease held on a bare majority that counted this node is now on a minority: a
   * leader that held it cannot know until its registry checks (as after a failover). */
  note_lease_fault (c, LEASE_FAULT_ALL_NAMES, from);
  c->failovers_done++;
  after_fault (c, "quorum node restart", i);
}

void
inject_topology_faults (Controller *c)
{
  for (guint i = 0; i < c->s->failovers; i++)
    {
      switch (c->s->topology)
        {
          case TOPOLOGY_SENTINEL:
            sentinel_failover (c, i);
            break;
          case TOPOLOGY_CLUSTER:
            cluster_failover (c, i);
            break;
          case TOPOLOGY_QUORUM:
            quorum_restart (c, i);
            break;
          case TOPOLOGY_SERVER:
          default:
            break;
        }
      /* Fault timing: through the window that follows each fault (a former Sentinel
       * master takes writes until it is demoted, some ten seconds later). */
      if (c->s->settle_ms > 0)
        g_usleep (c->s->settle_ms * 1000);
    }
}

/* ------------------------------------------------------------------------------------- */
/* The history and its verdicts. */

static gboolean
read_history (Controller *c, guint index, GArray *into)
{
  g_autofree char *path = history_path (c, index);
  g_autofree char *text = NULL;
  g_auto (GStrv) lines = NULL;

  if (!g_file_get_contents (path, &text, NULL, NULL))
    return FALSE;
  lines = g_strsplit (text, "\n", -1);
  for (guint i = 0; lines[i] != NULL; i++)
    {
      Section s = { 0 };
      int told = 0;
      char role = 0;

      if (*lines[i] == '\0')
        continue;
      if (sscanf (lines[i],
                  "%u %u %u %u %" G_GINT64_FORMAT " %" G_GINT64_FORMAT " %" G_GINT64_FORMAT
                  " %" G_GUINT64_FORMAT " %d %15s %" G_GINT64_FORMAT " %c",
                  &s.name, &s.proc, &s.reg, &s.thread, &s.call_us, &s.start_us, &s.end_us,
                  &s.token, &told, s.unlocked, &s.told_us, &role)
          != 12)
        {
          problem (c, "worker %u history: bad line \"%s\"", index, lines[i]);
          return FALSE;
        }
      s.told = told != 0;
      s.role = role;
      g_array_append_val (into, s);
    }
  return TRUE;
}

static gint
section_compare (gconstpointer a, gconstpointer b)
{
  const Section *x = a, *y = b;

  if (x->name != y->name)
    return x->name < y->name ? -1 : 1;
  if (x->start_us != y->start_us)
    return x->start_us < y->start_us ? -1 : 1;
  return 0;
}

static gboolean
same_holder (const Section *x, const Section *y)
{
  return x->proc == y->proc && x->reg == y->reg && x->thread == y->thread;
}

char *
describe (Controller *c, const Section *s)
{
  g_autofree char *told = s->told_us > 0 ? g_strdup_printf (" told at %.3f s",
                                                            (s->told_us - c->start_us) / 1e6)
                                         : g_strdup (s->told ? " told" : "");

  return g_strdup_printf ("%c p%u.r%u.t%u (called %.3f s) [%.3f s, %.3f s] token %" G_GUINT64_FORMAT
                          " unlock %s%s",
                          s->role, s->proc, s->reg, s->thread, (s->call_us - c->start_us) / 1e6,
                          (s->start_us - c->start_us) / 1e6, (s->end_us - c->start_us) / 1e6,
                          s->token, s->unlocked, told);
}

/* An overlap of @o and the later @s that at least one of them was told of: how long it
 * went on from the start of @s until the first of them was told. */
static void
note_told_delay (const Section *o, const Section *s, Row *row)
{
  gint64 first = G_MAXINT64;

  if (o->told && o->told_us > 0)
    first = o->told_us;
  if (s->told && s->told_us > 0)
    first = MIN (first, s->told_us);
  if (first != G_MAXINT64)
    row->max_told_ms = MAX (row->max_told_ms, MAX (0, first - s->start_us) / 1000);
}

/* Whether @o and @s conflict: two holders, unless both only read. */
static gboolean
conflicting (const Section *o, const Section *s)
{
  return !same_holder (o, s) && !(o->role == 'R' && s->role == 'R');
}

/* Overlaps: sorted by name and start, each section meets the earlier sections of its
 * name still open at its start (end after it), kept in @open. Two readers of a
 * read-write lock do not overlap; a writer overlaps with anyone. */
void
judge_overlaps (Controller *c, GArray *sections, Row *row)
{
  g_autoptr (GArray) open = g_array_new (FALSE, FALSE, sizeof (guint));
  guint examples = 0;

  for (guint i = 0; i < sections->len; i++)
    {
      const Section *s = &g_array_index (sections, Section, i);

      if (i == 0 || s->name != g_array_index (sections, Section, i - 1).name)
        g_array_set_size (open, 0);
      if (s->told)
        row->told++;
      for (guint k = 0; k < open->len;)
        {
          const Section *o = &g_array_index (sections, Section, g_array_index (open, guint, k));

          if (o->end_us <= s->start_us)
            {
              g_array_remove_index_fast (open, k);
              continue;
            }
          k++;
          if (!conflicting (o, s))
            continue;
          row->overlaps++;
          if (o->told || s->told)
            {
              row->reported++;
              note_told_delay (o, s, row);
            }
          else
            {
              row->silent++;
              if (examples++ < MAX_EXAMPLES)
                {
                  g_autofree char *a = describe (c, o);
                  g_autofree char *b = describe (c, s);
                  g_test_message ("%s: silent overlap on name-%u: %s and %s", c->s->name, s->name,
                                  a, b);
                }
            }
        }
      g_array_append_val (open, i);
    }
}

static gint
call_order_compare (gconstpointer a, gconstpointer b, gpointer sections)
{
  const Section *x = &g_array_index ((GArray *)sections, Section, *(const guint *)a);
  const Section *y = &g_array_index ((GArray *)sections, Section, *(const guint *)b);

  return x->call_us < y->call_us ? -1 : x->call_us > y->call_us ? 1 : 0;
}

/* Token regressions, in real time: a section's token must exceed the token of every
 * section of its name whose lock returned before this section's lock was called (its
 * acquisition certainly came later), or equal it when both are one lease of one
 * registry (a local hand-off and re-entry keep the token of the lease they share).
 * Acquisitions that were under way at the same time have no order a client could
 * see: a holder whose lease vanished between the server's reply and the return of its
 * lock may return after a later holder with a higher token, and it is the resource's
 * check that then refuses its lower token. Sections sorted by name and start. */
static void
judge_tokens (Controller *c, GArray *sections, Row *row)
{
  guint examples = 0;

  row->regressions = 0;
  for (guint begin = 0, end; begin < sections->len; begin = end)
    {
      guint name = g_array_index (sections, Section, begin).name;
      g_autoptr (GArray) by_call = g_array_new (FALSE, FALSE, sizeof (guint));
      guint64 max_token = 0;
      const Section *max_holder = NULL;
      guint returned = begin; /* sections [begin, returned) returned before the call */

      for (end = begin; end < sections->len && g_array_index (sections, Section, end).name == name;
           end++)
        g_array_append_val (by_call, end);
      g_array_sort_with_data (by_call, call_order_compare, sections);
      for (guint k = 0; k < by_call->len; k++)
        {
          const Section *s = &g_array_index (sections, Section, g_array_index (by_call, guint, k));

          for (; returned < end && g_array_index (sections, Section, returned).start_us < s->call_us;
               returned++)
            {
              const Section *r = &g_array_index (sections, Section, returned);

              if (r->token > max_token)
                {
                  max_token = r->token;
                  max_holder = r;
                }
            }
          if (s->token < max_token || s->token == 0
              || (s->token == max_token && max_holder != NULL
                  && (max_holder->proc != s->proc || max_holder->reg != s->reg)))
            {
              row->regressions++;
              if (examples++ < MAX_EXAMPLES)
                {
                  g_autofree char *a = describe (c, s);
                  g_autofree char *b = max_holder != NULL ? describe (c, max_holder) : NULL;
                  g_test_message ("%s: token regression on name-%u: %s after %s", c->s->name,
                                  name, a, b != NULL ? b : "none");
                }
            }
        }
    }
}

static void
judge (Controller *c, GArray *sections, Row *row)
{
  g_array_sort (sections, section_compare);
  row->max_told_ms = -1;
  if (c->s->member != MEMBER_LOCK)
    {
      row->regressions = -1;
      judge_family (c, sections, row);
      return;
    }
  judge_overlaps (c, sections, row);
  if (c->s->fencing)
    judge_tokens (c, sections, row);
  else
    row->regressions = -1;
}

void
check_history (Controller *c, Collected *col, Row *row)
{
  const Scenario *s = c->s;
  g_autoptr (GArray) sections = g_array_new (FALSE, FALSE, sizeof (Section));
  GHashTableIter iter;
  gpointer key, value;

  row->history = TRUE;
  row->sections = tally_get (&col->tally, "sections");
  row->timeouts = tally_get (&col->tally, "timeouts");
  row->busy = tally_get (&col->tally, "busy");
  row->lease_lost = g_hash_table_size (col->lease_lost);
  row->max_acquire_ms = col->tally.max_acquire_ms;
  row->max_unlock_ms = col->tally.max_unlock_ms;
  row->pauses = c->pauses_done;
  row->restarts = c->restarts_done;
  row->outages = c->outages_done;
  row->failovers = c->failovers_done;
  row->forced = c->forced_done;
  g_hash_table_iter_init (&iter, col->tally.counts);
  while (g_hash_table_iter_next (&iter, &key, &value))
    if (g_str_has_prefix (key, "error "))
      {
        const char *code = strrchr (key, ' ') + 1;
        guint64 *sum = g_hash_table_lookup (row->errors, code);

        if (sum == NULL)
          {
            sum = g_new0 (guint64, 1);
            g_hash_table_insert (row->errors, g_strdup (code), sum);
          }
        *sum += *(guint64 *)value;
      }
  for (guint i = 0; i < col->failures->len; i++)
    problem (c, "worker check: %s", (const char *)g_ptr_array_index (col->failures, i));
  if (row->sections < s->min_sections)
    problem (c, "only %" G_GUINT64_FORMAT " sections, expected at least %" G_GUINT64_FORMAT,
             row->sections, s->min_sections);
  if (c->failovers_done < s->failovers)
    problem (c, "%u of %u topology faults done", c->failovers_done, s->failovers);

  for (guint i = 0; i < s->procs; i++)
    if (!read_history (c, i, sections))
      problem (c, "worker %u left no readable history", i);
  {
    guint holds = 0; /* a leader's actions are entries of the history, not holds */

    for (guint i = 0; i < sections->len; i++)
      holds += g_array_index (sections, Section, i).role != 'A';
    if (holds != row->sections)
      problem (c, "%u sections in the histories, %" G_GUINT64_FORMAT " reported", holds,
               row->sections);
  }
  judge (c, sections, row);

  if (s->safe_overlap && row->overlaps > 0)
    problem (c,
             "%" G_GUINT64_FORMAT " overlaps (%" G_GUINT64_FORMAT " reported, %" G_GUINT64_FORMAT
             " silent), none allowed",
             row->overlaps, row->reported, row->silent);
  /* A leader's verdict is on its actions (stress-family.c), its leaderships measured. */
  if (s->safe_silent && row->silent > 0 && s->member != MEMBER_LEADER)
    problem (c, "%" G_GUINT64_FORMAT " silent overlaps: two holders at once, neither told",
             row->silent);
  if (s->safe_tokens && row->regressions > 0)
    problem (c, "%" G_GINT64_FORMAT " token regressions", row->regressions);
  if (s->safe_silent && row->stale_actions > 0)
    problem (c,
             "%" G_GUINT64_FORMAT " actions by a leader after another was granted leadership, "
             "before it was told",
             row->stale_actions);
  /* Whatever the topology: is_leading() answers FALSE once the loss is known. */
  if (row->after_told_actions > 0)
    problem (c,
             "%" G_GUINT64_FORMAT " actions by a leader whose leadership cancellable had "
             "already fired",
             row->after_told_actions);
  if (c->forced_done < s->forced)
    problem (c, "%u of %u forced unlocks deleted a held lease", c->forced_done, s->forced);
}

/* ------------------------------------------------------------------------------------- */
/* The table. */

static const char *const topology_names[] = { "server", "sentinel", "cluster", "quorum" };
static const char *const member_names[] = { "lock", "semaphore", "rwlock", "leader" };

static char *
faults_done (const Row *row)
{
  const Scenario *s = row->scenario;
  g_autoptr (GString) f = g_string_new (NULL);

  if (s->kill_ms > 0)
    g_string_append_printf (f, "kills %" G_GUINT64_FORMAT ",", row->kills);
  if (row->pauses > 0)
    g_string_append_printf (f, "sigstop %u,", row->pauses);
  if (row->restarts > 0)
    g_string_append_printf (f, "restart %u,", row->restarts);
  if (row->failovers > 0)
    g_string_append_printf (
        f, "%s %u,", s->topology == TOPOLOGY_QUORUM ? "node-restart" : "failover", row->failovers);
  if (row->forced > 0)
    g_string_append_printf (f, "forced %u,", row->forced);
  if (f->len > 0)
    g_string_truncate (f, f->len - 1);
  else
    g_string_append (f, "-");
  return g_string_free (g_steal_pointer (&f), FALSE);
}

static const char *
verdict (const Row *row)
{
  const Scenario *s = row->scenario;

  if (!s->safe_overlap && !s->safe_silent && !s->safe_tokens)
    return row->passed ? "measured" : "FAILED";
  return row->passed ? "ok" : "FAILED";
}

void
print_history_summary (GPtrArray *rows, const char *profile)
{
  gboolean any = FALSE;

  for (guint i = 0; i < rows->len; i++)
    {
      Row *row = g_ptr_array_index (rows, i);
      const Scenario *s = row->scenario;
      g_autofree char *shape = NULL;
      g_autofree char *faults = NULL;
      g_autofree char *regressions = NULL;
      g_autofree char *actions = NULL;
      g_autofree char *told_ms = NULL;

      if (!row->history)
        continue;
      if (!any)
        {
          g_print ("#\n# redislock fault histories, %s profile\n", profile);
          g_print ("# %-20s %-9s %-8s %-7s %-38s %8s %6s %8s %8s %6s %6s %12s %7s %6s  %s\n",
                   "scenario", "member", "topology", "PxRxT", "faults", "sections", "told",
                   "overlaps", "reported", "silent", "tokreg", "stale/late", "tell-ms", "secs",
                   "verdict");
          any = TRUE;
        }
      shape = g_strdup_printf ("%ux%ux%u", s->procs, s->registries, s->threads);
      faults = faults_done (row);
      regressions = row->regressions < 0 ? g_strdup ("n/a")
                                         : g_strdup_printf ("%" G_GINT64_FORMAT, row->regressions);
      actions = s->member == MEMBER_LEADER
                    ? g_strdup_printf ("%" G_GUINT64_FORMAT "+%" G_GUINT64_FORMAT
                                       "/%" G_GUINT64_FORMAT,
                                       row->stale_actions, row->forced_stale_actions,
                                       row->after_told_actions)
                    : g_strdup ("-");
      told_ms = row->max_told_ms < 0 ? g_strdup ("-")
                                     : g_strdup_printf ("%" G_GINT64_FORMAT, row->max_told_ms);
      g_print ("# %-20s %-9s %-8s %-7s %-38s %8" G_GUINT64_FORMAT " %6" G_GUINT64_FORMAT
               " %8" G_GUINT64_FORMAT " %8" G_GUINT64_FORMAT " %6" G_GUINT64_FORMAT
               " %6s %12s %7s %6.1f  %s\n",
               row->name, member_names[s->member], topology_names[s->topology], shape, faults,
               row->sections, row->told, row->overlaps, row->reported, row->silent, regressions,
               actions, told_ms, row->duration_ms / 1000.0, verdict (row));
    }
  if (any)
    g_print ("# (told: sections whose holder was told its lease was lost; overlaps: pairs of\n"
             "#  sections of one name by two holders whose intervals intersect (a semaphore:\n"
             "#  holders entering while more than its permits hold; a read-write lock: a\n"
             "#  writer and anyone; a leader: two leaderships); reported: at least one holder\n"
             "#  was told; silent: neither was (a semaphore: more untold holders than permits);\n"
             "#  tokreg: sections whose fencing token is not above every token handed out\n"
             "#  before they started; stale+forced/late: a leader's actions after another was\n"
             "#  granted leadership before it was told (+ those after a forced unlock of its\n"
             "#  lease, told later) / after it was told; tell-ms: the longest\n"
             "#  time from the start of a reported overlap until a holder was told)\n");
}
