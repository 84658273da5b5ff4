/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* stress-family.c: the history scenarios of the lock family beyond the plain lock.
 *
 * The same workers, topologies and faults as stress-jepsen.c's, holding another member
 * of the family: a semaphore of N permits (at most N holders at once), a read-write
 * lock (readers together, a writer alone), or leader election (at most one leader, and
 * a leader acts only while it leads). The workers' loops are here: each hold is
 * recorded as the lock's sections are, its interval on CLOCK_MONOTONIC from the return
 * of the acquisition to the moment before the release, and when its holder was first
 * told the lease was lost (the lease cancellable's handler notes the time it fired).
 * A leader records each leadership from func (TRUE) to func (FALSE), and, every few
 * milliseconds while it leads, an action: the interval around a call of
 * redis_leader_is_leading() that answered TRUE.
 *
 * Here too the forced-unlock fault (redis_lock_registry_force_unlock() of a held lease:
 * a lock, a leader's lock, a permit, a writer lease), whose broken holder must be told,
 * and the verdicts: concurrent holders beyond the permits (silent when more of them
 * than the permits were never told), a writer overlapping anyone, and a leader's
 * actions after another candidate was granted leadership before it was told (stale) or
 * after its own leadership cancellable had fired (late).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "config.h"

#include "stress.h"

#include <string.h>

/* A leader acts (asks is_leading) this often, and competes again this soon after it
 * resigned or lost its lease. */
#define LEADER_TICK_MS 2
#define LEADER_PAUSE_MS 10
/* Silent anomalies named one by one in the test log. */
#define MAX_EXAMPLES 5

void
family_note_told (GCancellable *cancellable, gpointer told_us)
{
  gint64 none = 0;

  __atomic_compare_exchange_n ((gint64 *)told_us, &none, g_get_monotonic_time (), FALSE,
                               __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}

/* ------------------------------------------------------------------------------------- */
/* Worker side: the semaphore and the read-write lock. */

void
family_hold (WorkerThread *t, gboolean freeze)
{
  Worker *w = t->w;

  if (freeze)
    {
      worker_freeze (w);
      g_atomic_int_set (&w->freezing, 0);
    }
  /* Workload: most holds are short, one in LONG_HOLD_ONE_IN lasts up to half the TTL,
   * so that faults find holders inside their holds. */
  if (w->opt->hold_us > 0 && g_rand_int_range (t->rand, 0, LONG_HOLD_ONE_IN) == 0)
    g_usleep ((gulong)g_rand_int_range (t->rand, 0, (gint32)(w->opt->ttl_ms * 500)));
  else if (w->opt->hold_us > 0)
    g_usleep ((gulong)g_rand_int_range (t->rand, 0, (gint32)w->opt->hold_us));
}

/* The end of a hold @e whose lease cancellable is @cancellable (watched by @handler):
 * whether its holder was told (@lost: is_lease_lost), the interval's end, the handler
 * gone before the entry is read. */
static void
hold_end (HistoryEntry *e, GCancellable *cancellable, gulong handler, gboolean lost)
{
  e->told = lost || (cancellable != NULL && g_cancellable_is_cancelled (cancellable));
  e->end_us = g_get_monotonic_time ();
  if (e->told)
    family_note_told (NULL, &e->told_us);
  if (cancellable != NULL)
    g_cancellable_disconnect (cancellable, handler);
}

/* A release that failed with @error: LEASE_LOST tells the holder too. */
static void
release_end (WorkerThread *t, HistoryEntry *e, const char *op, const GError *error)
{
  e->unlocked = error != NULL ? error_code_name (error) : "OK";
  if (error != NULL)
    count_error (&t->tally, op, error);
  if (g_error_matches (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_LEASE_LOST))
    {
      e->told = TRUE;
      family_note_told (NULL, &e->told_us);
    }
  g_array_append_val (t->history, *e);
  tally_add (&t->tally, "sections", 1);
  __atomic_fetch_add (t->w->progress, 1, __ATOMIC_RELAXED);
}

/* An acquisition that did not succeed: counted, and a freeze asked for again. */
static void
not_acquired (WorkerThread *t, const char *op, const GError *error, gboolean freeze)
{
  if (error != NULL)
    count_error (&t->tally, op, error);
  else
    tally_add (&t->tally, "timeouts", 1);
  if (freeze)
    g_atomic_int_set (&t->w->self_stop, 1);
}

static void
semaphore_hold (WorkerThread *t, guint name, gboolean freeze)
{
  WorkerOptions *opt = t->w->opt;
  g_autoptr (GError) error = NULL;
  g_autofree char *semaphore_name = g_strdup_printf ("name-%u", name);
  g_autoptr (RedisSemaphore) semaphore = redis_lock_registry_obtain_semaphore (
      t->w->registries[t->reg], semaphore_name, (guint)opt->permits, &error);
  HistoryEntry e = { .name = name, .reg = t->reg, .thread = t->index, .role = 'P' };
  GCancellable *cancellable;
  RedisPermit *permit;
  gulong handler;

  if (semaphore == NULL)
    {
      not_acquired (t, "obtain", error, freeze);
      return;
    }
  e.call_us = g_get_monotonic_time ();
  permit = redis_semaphore_try_acquire_for (semaphore, opt->wait_ms, NULL, &error);
  e.start_us = g_get_monotonic_time ();
  if (permit == NULL)
    {
      not_acquired (t, "acquire", error, freeze);
      return;
    }
  tally_add (&t->tally, "acquired", 1);
  e.token = redis_permit_get_index (permit);
  cancellable = redis_permit_get_lease_cancellable (permit);
  handler = g_cancellable_connect (cancellable, G_CALLBACK (family_note_told), &e.told_us, NULL);
  family_hold (t, freeze);
  hold_end (&e, cancellable, handler, redis_permit_is_lease_lost (permit));
  redis_permit_release (permit, &error);
  release_end (t, &e, "unlock", error);
}

/* A read or (@write) write hold; a freeze is always in a write hold. */
static void
rwlock_hold (WorkerThread *t, guint name, gboolean write, gboolean freeze)
{
  WorkerOptions *opt = t->w->opt;
  g_autoptr (GError) error = NULL;
  g_autofree char *lock_name = g_strdup_printf ("name-%u", name);
  g_autoptr (RedisRWLock) lock
      = redis_lock_registry_obtain_rw (t->w->registries[t->reg], lock_name, &error);
  HistoryEntry e = { .name = name, .reg = t->reg, .thread = t->index, .role = write ? 'W' : 'R' };
  GCancellable *cancellable;
  gulong handler = 0;
  gboolean acquired;

  if (lock == NULL)
    {
      not_acquired (t, "obtain", error, freeze);
      return;
    }
  e.call_us = g_get_monotonic_time ();
  acquired = write ? redis_rw_lock_try_write_lock_for (lock, opt->wait_ms, NULL, &error)
                   : redis_rw_lock_try_read_lock_for (lock, opt->wait_ms, NULL, &error);
  e.start_us = g_get_monotonic_time ();
  if (!acquired)
    {
      not_acquired (t, "acquire", error, freeze);
      return;
    }
  tally_add (&t->tally, "acquired", 1);
  cancellable = redis_rw_lock_get_lease_cancellable (lock);
  if (cancellable != NULL)
    handler = g_cancellable_connect (cancellable, G_CALLBACK (family_note_told), &e.told_us, NULL);
  family_hold (t, freeze);
  hold_end (&e, cancellable, handler, redis_rw_lock_is_lease_lost (lock));
  if (write)
    redis_rw_lock_write_unlock (lock, &error);
  else
    redis_rw_lock_read_unlock (lock, &error);
  release_end (t, &e, "unlock", error);
}

/* ------------------------------------------------------------------------------------- */
/* Worker side: leader election. */

typedef struct
{
  WorkerThread *t;
  RedisLeader *leader;
  GMainLoop *loop;
  HistoryEntry *term;        /* the current leadership, or NULL */
  GCancellable *cancellable; /* its cancellable, watched by handler */
  gulong handler;
  gboolean resigned;   /* this leadership was given up by resign or stop */
  gint64 resign_at_us; /* when to give it up */
} Candidate;

static void
on_leading (RedisLeader *leader, gboolean leading, gpointer data)
{
  Candidate *cd = data;
  WorkerThread *t = cd->t;
  gint64 now = g_get_monotonic_time ();

  if (leading)
    {
      if (cd->term != NULL)
        tally_record (&t->tally, "failure leader granted twice without an end");
      cd->term = g_new0 (HistoryEntry, 1);
      cd->term->name = (guint)g_ascii_strtoull (redis_leader_get_name (leader) + 5, NULL, 10);
      cd->term->reg = t->reg;
      cd->term->thread = t->index;
      cd->term->role = 'G';
      cd->term->call_us = cd->term->start_us = now;
      cd->resigned = FALSE;
      cd->cancellable = g_object_ref (redis_leader_get_cancellable (leader));
      cd->handler = g_cancellable_connect (cd->cancellable, G_CALLBACK (family_note_told),
                                           &cd->term->told_us, NULL);
      cd->resign_at_us = now + g_rand_int_range (t->rand, 0, (gint32)MAX (1, t->w->opt->hold_us))
                        * (g_rand_int_range (t->rand, 0, LONG_HOLD_ONE_IN) == 0 ? 20 : 1);
      tally_add (&t->tally, "acquired", 1);
      return;
    }
  if (cd->term == NULL)
    {
      tally_record (&t->tally, "failure leader told FALSE without a leadership");
      return;
    }
  cd->term->end_us = now;
  g_cancellable_disconnect (cd->cancellable, cd->handler);
  g_clear_object (&cd->cancellable);
  /* Ended by the candidate itself or lost (told). */
  cd->term->told = !cd->resigned;
  cd->term->unlocked = cd->resigned ? "OK" : "LEASE_LOST";
  g_array_append_val (t->history, *cd->term);
  g_clear_pointer (&cd->term, g_free);
  tally_add (&t->tally, "sections", 1);
  __atomic_fetch_add (t->w->progress, 1, __ATOMIC_RELAXED);
}

/* Every LEADER_TICK_MS: while it leads, the candidate acts (is_leading() answered
 * TRUE: an action, recorded), freezes when asked for, or resigns once its time is up. */
static gboolean
on_tick (gpointer data)
{
  Candidate *cd = data;
  WorkerThread *t = cd->t;
  Worker *w = t->w;

  if (g_atomic_int_get (&w->stop) || g_get_monotonic_time () >= w->deadline_us)
    {
      g_main_loop_quit (cd->loop);
      return G_SOURCE_REMOVE;
    }
  if (cd->term != NULL && !cd->resigned)
    {
      HistoryEntry a = { .name = cd->term->name,
                         .reg = t->reg,
                         .thread = t->index,
                         .role = 'A',
                         .call_us = cd->term->start_us,
                         .unlocked = "OK" };
      gboolean leading;

      a.start_us = g_get_monotonic_time ();
      leading = redis_leader_is_leading (cd->leader);
      a.end_us = g_get_monotonic_time ();
      if (!leading)
        return G_SOURCE_CONTINUE; /* func (FALSE) is on its way */
      g_array_append_val (t->history, a);
      tally_add (&t->tally, "actions", 1);
      if (t->reg == 0 && t->index == 0 && g_atomic_int_compare_and_exchange (&w->self_stop, 1, 0))
        {
          /* Frozen as leader, past its TTL: the next tick after the resume asks again. */
          worker_freeze (w);
          g_atomic_int_set (&w->freezing, 0);
        }
      else if (a.end_us >= cd->resign_at_us)
        {
          cd->resigned = !g_cancellable_is_cancelled (cd->cancellable);
          redis_leader_resign (cd->leader);
        }
    }
  return G_SOURCE_CONTINUE;
}

/* One candidate per thread, in a main context of its own, for name-(its number mod
 * names), until the run ends; then it stops and its context is drained a while. */
static void
leader_run (WorkerThread *t)
{
  Worker *w = t->w;
  guint number = (guint)w->opt->index * w->n_threads + t->reg * (guint)w->opt->threads + t->index;
  g_autofree char *name = g_strdup_printf ("name-%u", number % (guint)w->opt->names);
  GMainContext *context = g_main_context_new ();
  Candidate cd = { .t = t };
  GSource *tick;
  gint64 drain_until;

  g_main_context_push_thread_default (context);
  cd.loop = g_main_loop_new (context, FALSE);
  cd.leader = redis_leader_new (w->registries[t->reg], name, on_leading, &cd, NULL);
  redis_leader_set_pause_ms (cd.leader, LEADER_PAUSE_MS);
  tick = g_timeout_source_new (LEADER_TICK_MS);
  g_source_set_callback (tick, on_tick, &cd, NULL);
  g_source_attach (tick, context);
  redis_leader_start (cd.leader);
  g_main_loop_run (cd.loop);
  g_source_destroy (tick);
  g_source_unref (tick);
  /* A leadership still running ends by this stop, unless it was lost already. */
  cd.resigned = cd.cancellable == NULL || !g_cancellable_is_cancelled (cd.cancellable);
  redis_leader_stop (cd.leader);
  /* The release and a wait given up still complete in this context. */
  drain_until = g_get_monotonic_time () + 200 * 1000;
  while (g_get_monotonic_time () < drain_until)
    if (!g_main_context_iteration (context, FALSE))
      g_usleep (1000);
  redis_leader_unref (cd.leader);
  if (cd.term != NULL)
    tally_record (&t->tally, "failure a stopped leader was not told FALSE");
  g_free (cd.term);
  g_main_loop_unref (cd.loop);
  g_main_context_pop_thread_default (context);
  g_main_context_unref (context);
}

void
family_thread_run (WorkerThread *t)
{
  Worker *w = t->w;
  WorkerOptions *opt = w->opt;

  if (opt->member == MEMBER_LEADER)
    {
      leader_run (t);
      return;
    }
  while (!g_atomic_int_get (&w->stop) && g_get_monotonic_time () < w->deadline_us)
    {
      guint name = (guint)g_rand_int_range (t->rand, 0, opt->names);
      gboolean freeze = t->reg == 0 && t->index == 0
                        && g_atomic_int_compare_and_exchange (&w->self_stop, 1, 0);

      if (opt->member == MEMBER_SEMAPHORE)
        semaphore_hold (t, name, freeze);
      else
        rwlock_hold (t, name, freeze || g_rand_int_range (t->rand, 0, 100) < 30, freeze);
    }
}

/* ------------------------------------------------------------------------------------- */
/* Controller side: the forced-unlock fault. */

/* The lock name whose key is a held lease of the scenario's member on name-@name:
 * the lock (a leader's too), a permit (any of them), the writer lease. */
static char *
forced_target (Controller *c, GRand *rand, guint name)
{
  switch (c->s->member)
    {
      case MEMBER_SEMAPHORE:
        return g_strdup_printf ("{name-%u}:sem:%d", name,
                                g_rand_int_range (rand, 0, (gint32)c->s->permits));
      case MEMBER_RWLOCK:
        return g_strdup_printf ("{name-%u}:rw:w", name);
      case MEMBER_LOCK:
      case MEMBER_LEADER:
      default:
        return g_strdup_printf ("name-%u", name);
    }
}

void
inject_forced_unlocks (Controller *c)
{
  const Scenario *s = c->s;
  g_autoptr (GError) error = NULL;
  g_auto (GStrv) urls = NULL;
  g_autoptr (RedisLockRegistry) registry = NULL;
  g_autoptr (GRand) rand = g_rand_new ();

  if (s->forced == 0)
    return;
  urls = g_strsplit (c->url, " ", -1);
  registry = s->topology == TOPOLOGY_QUORUM
                 ? redis_lock_registry_new_quorum ((const char *const *)urls, STRESS_REGISTRY_KEY,
                                                   &error)
                 : redis_lock_registry_new (c->url, STRESS_REGISTRY_KEY, &error);
  if (registry == NULL)
    {
      problem (c, "forced unlocks: %s", error->message);
      return;
    }
  for (guint i = 0; i < s->forced; i++)
    {
      gint64 deadline = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;
      gboolean deleted = FALSE;

      /* Tries held leases until one is deleted: a forced unlock of a free one is none. */
      while (!deleted && g_get_monotonic_time () < deadline)
        {
          guint number = (guint)g_rand_int_range (rand, 0, (gint32)s->names);
          gint64 from = g_get_monotonic_time ();
          g_autofree char *name = forced_target (c, rand, number);

          deleted = redis_lock_registry_force_unlock (registry, name, &error);
          if (deleted)
            note_lease_fault (c, number, from);
          if (error != NULL)
            {
              g_test_message ("%s: forced unlock of %s: %s", s->name, name, error->message);
              g_clear_error (&error);
            }
          if (!deleted)
            g_usleep (2 * 1000); /* fault timing: try again soon, a holder comes */
        }
      if (deleted)
        c->forced_done++;
      if (!wait_progress (c, progress_total (c) + POST_FAULT_SECTIONS / 4, 30000))
        problem (c, "no progress within 30 s after forced unlock %u", i + 1);
    }
  if (!wait_progress (c, progress_total (c) + POST_FAULT_SECTIONS, 30000))
    problem (c, "no progress within 30 s after the forced unlocks");
}

/* ------------------------------------------------------------------------------------- */
/* Controller side: the verdicts. */

static gint
compare_gint64 (gconstpointer a, gconstpointer b)
{
  gint64 x = *(const gint64 *)a, y = *(const gint64 *)b;

  return x < y ? -1 : x > y ? 1 : 0;
}

/* Holders beyond the permits: sorted by name and start, each hold meets the holds of
 * its name still open at its start; more open holds than permits is an excess (one
 * per hold that entered then), silent when more of them than the permits were never
 * told. */
static void
judge_excess (Controller *c, GArray *sections, Row *row)
{
  g_autoptr (GArray) open = g_array_new (FALSE, FALSE, sizeof (guint));
  g_autoptr (GArray) told = g_array_new (FALSE, FALSE, sizeof (gint64));
  guint permits = c->s->permits, examples = 0;

  for (guint i = 0; i < sections->len; i++)
    {
      const Section *s = &g_array_index (sections, Section, i);
      guint untold = 0;

      if (i == 0 || s->name != g_array_index (sections, Section, i - 1).name)
        g_array_set_size (open, 0);
      if (s->told)
        row->told++;
      for (guint k = 0; k < open->len;)
        if (g_array_index (sections, Section, g_array_index (open, guint, k)).end_us <= s->start_us)
          g_array_remove_index_fast (open, k);
        else
          k++;
      g_array_append_val (open, i);
      if (open->len <= permits)
        continue;
      row->overlaps++;
      g_array_set_size (told, 0);
      for (guint k = 0; k < open->len; k++)
        {
          const Section *o = &g_array_index (sections, Section, g_array_index (open, guint, k));

          if (!o->told)
            untold++;
          else if (o->told_us > 0)
            g_array_append_val (told, o->told_us);
        }
      if (untold <= permits)
        {
          guint needed = open->len - permits; /* told holders that make up the excess */

          row->reported++;
          if (told->len >= needed)
            {
              gint64 at;

              g_array_sort (told, compare_gint64);
              at = g_array_index (told, gint64, needed - 1);
              row->max_told_ms = MAX (row->max_told_ms, MAX (0, at - s->start_us) / 1000);
            }
          continue;
        }
      row->silent++;
      if (examples++ < MAX_EXAMPLES)
        {
          g_autofree char *d = describe (c, s);

          g_test_message ("%s: %u holders of name-%u at once (%u permits, %u never told), the "
                          "last: %s",
                          c->s->name, open->len, s->name, permits, untold, d);
        }
    }
}

/* The first leadership of @terms (one name's, sorted by start) granted after @after to
 * another candidate than @actor, or NULL. */
static const Section *
next_grant (GArray *terms, const Section *actor, gint64 after)
{
  guint lo = 0, hi = terms->len;

  while (lo < hi)
    {
      guint mid = (lo + hi) / 2;

      if (g_array_index (terms, Section, mid).start_us <= after)
        lo = mid + 1;
      else
        hi = mid;
    }
  for (; lo < terms->len; lo++)
    {
      const Section *g = &g_array_index (terms, Section, lo);

      if (g->proc != actor->proc || g->reg != actor->reg || g->thread != actor->thread)
        return g;
    }
  return NULL;
}

/* The leadership (of @terms, one name's, sorted by start) an action belongs to. */
static const Section *
term_of (GArray *terms, const Section *a)
{
  for (guint i = 0; i < terms->len; i++)
    {
      const Section *g = &g_array_index (terms, Section, i);

      if (g->start_us == a->call_us && g->proc == a->proc && g->reg == a->reg
          && g->thread == a->thread)
        return g;
    }
  return NULL;
}

void
note_lease_fault (Controller *c, guint name, gint64 from_us)
{
  LeaseFault f = { name, from_us, g_get_monotonic_time () };

  if (c->lease_faults == NULL)
    c->lease_faults = g_array_new (FALSE, FALSE, sizeof (LeaseFault));
  g_array_append_val (c->lease_faults, f);
}

/* Whether a fault took leases of name-@name away between @from and @to. */
static gboolean
fault_during (Controller *c, guint name, gint64 from, gint64 to)
{
  for (guint i = 0; c->lease_faults != NULL && i < c->lease_faults->len; i++)
    {
      const LeaseFault *f = &g_array_index (c->lease_faults, LeaseFault, i);

      if ((f->name == name || f->name == LEASE_FAULT_ALL_NAMES) && f->from_us < to
          && f->to_us > from)
        return TRUE;
    }
  return FALSE;
}

/* Leaders: leaderships overlap as holds do; each action is checked against the
 * leaderships granted after its own began: one granted before the action (another
 * leader already) makes it stale unless its leader had been told by then; and an
 * action after its own leadership's cancellable fired is late, whatever else. A stale
 * action is the fault's, not the library's, when a forced unlock, a restart or a
 * failover took the lease away during its leadership (a leader cannot know before its
 * registry finds the loss, and one that gave leadership up first is never told: its
 * release completes in the background); such actions are counted apart, and so the
 * leaderships' overlaps are measured, not judged. A leader frozen past its TTL is no
 * such fault: is_leading() answers FALSE once the lease's time has run out. */
static void
judge_leaders (Controller *c, GArray *sections, Row *row)
{
  g_autoptr (GArray) terms = g_array_new (FALSE, FALSE, sizeof (Section));
  guint examples = 0;

  for (guint i = 0; i < sections->len; i++)
    if (g_array_index (sections, Section, i).role == 'G')
      g_array_append_val (terms, g_array_index (sections, Section, i));
  judge_overlaps (c, terms, row);
  for (guint begin = 0, end; begin < sections->len; begin = end)
    {
      guint name = g_array_index (sections, Section, begin).name;
      g_autoptr (GArray) own = g_array_new (FALSE, FALSE, sizeof (Section));

      for (end = begin; end < sections->len && g_array_index (sections, Section, end).name == name;
           end++)
        if (g_array_index (sections, Section, end).role == 'G')
          g_array_append_val (own, g_array_index (sections, Section, end));
      for (guint i = begin; i < end; i++)
        {
          const Section *a = &g_array_index (sections, Section, i);
          const Section *term, *other;
          gboolean told;

          if (a->role != 'A')
            continue;
          row->actions++;
          term = term_of (own, a);
          if (term == NULL)
            {
              problem (c, "an action of p%u.r%u.t%u on name-%u outside its leaderships", a->proc,
                       a->reg, a->thread, name);
              continue;
            }
          told = term->told_us > 0 && term->told_us < a->start_us;
          other = next_grant (own, a, a->call_us);
          if (told)
            row->after_told_actions++;
          else if (other == NULL || other->start_us >= a->start_us)
            continue;
          /* The lease behind a leadership was taken before func (TRUE) reached the
           * leader's context, at most a TTL before (older, it would have run out): a
           * fault since then may have taken it away. */
          else if (fault_during (c, name, term->start_us - (gint64) c->s->ttl_ms * 1000,
                                 a->start_us))
            {
              row->forced_stale_actions++;
              continue;
            }
          else
            row->stale_actions++;
          if (examples++ < MAX_EXAMPLES)
            {
              g_autofree char *t = describe (c, term);
              g_autofree char *o = other != NULL ? describe (c, other) : g_strdup ("none");

              g_test_message ("%s: name-%u: action at %.3f s by %s (%s); next leadership: %s",
                              c->s->name, name, (a->start_us - c->start_us) / 1e6, t,
                              told ? "after it was told" : "another leads", o);
            }
        }
    }
}

void
judge_family (Controller *c, GArray *sections, Row *row)
{
  switch (c->s->member)
    {
      case MEMBER_SEMAPHORE:
        judge_excess (c, sections, row);
        break;
      case MEMBER_LEADER:
        judge_leaders (c, sections, row);
        break;
      case MEMBER_RWLOCK:
      case MEMBER_LOCK:
      default:
        judge_overlaps (c, sections, row);
        break;
    }
}

/* ------------------------------------------------------------------------------------- */
/* The family's scenarios (make jepsen): every topology a member supports (the semaphore
 * and the read-write lock refuse the quorum store), with that topology's faults and
 * forced unlocks of held leases; smaller than the lock's, so that the whole profile
 * stays within minutes. */

#define FAMILY_SCENARIO(member_, mname, permits_)                                                \
  { .name = mname "-server",                                                                     \
    .summary = "The " mname " on one server: CLIENT KILL storm, a worker frozen past its 1 s "  \
               "TTL, a restart empty, forced unlocks. No silent overlap.",                       \
    .history = TRUE,                                                                             \
    .member = member_,                                                                           \
    .permits = permits_,                                                                         \
    .topology = TOPOLOGY_SERVER,                                                                 \
    .procs = 3,                                                                                  \
    .registries = 2,                                                                             \
    .threads = 2,                                                                                \
    .names = 2,                                                                                  \
    .ttl_ms = 1000,                                                                              \
    .wait_ms = 2000,                                                                             \
    .hold_us = 2000,                                                                             \
    .min_sections = 600,                                                                         \
    .kill_ms = 2000,                                                                             \
    .pauses = 1,                                                                                 \
    .stop_ms = 2500,                                                                             \
    .restarts = 1,                                                                               \
    .forced = 5,                                                                                 \
    .safe_silent = TRUE,                                                                         \
    .cap_ms = 120000 },                                                                          \
  { .name = mname "-sentinel",                                                                   \
    .summary = "The " mname " on Sentinel, two replicas, no replica acknowledgement: a forced " \
               "failover, forced unlocks. Overlaps in the failover window are measured.",        \
    .history = TRUE,                                                                             \
    .member = member_,                                                                           \
    .permits = permits_,                                                                         \
    .topology = TOPOLOGY_SENTINEL,                                                               \
    .replicas = 2,                                                                               \
    .procs = 3,                                                                                  \
    .registries = 2,                                                                             \
    .threads = 2,                                                                                \
    .names = 2,                                                                                  \
    .ttl_ms = 1000,                                                                              \
    .wait_ms = 2000,                                                                             \
    .hold_us = 2000,                                                                             \
    .min_sections = 600,                                                                         \
    .failovers = 1,                                                                              \
    .settle_ms = 6000,                                                                           \
    .forced = 5,                                                                                 \
    .cap_ms = 120000 },                                                                          \
  { .name = mname "-cluster",                                                                    \
    .summary = "The " mname " on a Cluster: a replica paused, its master killed, the replica "  \
               "promoted; a worker frozen past the TTL; forced unlocks. No silent overlap.",     \
    .history = TRUE,                                                                             \
    .member = member_,                                                                           \
    .permits = permits_,                                                                         \
    .topology = TOPOLOGY_CLUSTER,                                                                \
    .procs = 3,                                                                                  \
    .registries = 2,                                                                             \
    .threads = 2,                                                                                \
    .names = 2,                                                                                  \
    .ttl_ms = 3000,                                                                              \
    .wait_ms = 2000,                                                                             \
    .hold_us = 2000,                                                                             \
    .min_sections = 600,                                                                         \
    .pauses = 1,                                                                                 \
    .stop_ms = 5000,                                                                             \
    .failovers = 1,                                                                              \
    .forced = 5,                                                                                 \
    .safe_silent = TRUE,                                                                         \
    .cap_ms = 120000 }

const Scenario family_scenarios[] = {
  FAMILY_SCENARIO (MEMBER_SEMAPHORE, "semaphore", 2),
  FAMILY_SCENARIO (MEMBER_RWLOCK, "rwlock", 0),
  FAMILY_SCENARIO (MEMBER_LEADER, "leader", 0),
  { .name = "leader-quorum",
    .summary = "The leader on a quorum of three servers: each node restarted empty in turn, a "
               "worker frozen past the TTL, forced unlocks. No silent overlap, no stale action.",
    .history = TRUE,
    .member = MEMBER_LEADER,
    .topology = TOPOLOGY_QUORUM,
    .procs = 3,
    .registries = 2,
    .threads = 2,
    .names = 2,
    .ttl_ms = 1000,
    .wait_ms = 2000,
    .hold_us = 2000,
    .min_sections = 600,
    .pauses = 1,
    .stop_ms = 2500,
    .failovers = 3,
    .forced = 5,
    .safe_silent = TRUE,
    .cap_ms = 120000 },
};
const gsize n_family_scenarios = G_N_ELEMENTS (family_scenarios);
