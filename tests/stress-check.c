/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* stress-check.c: the verdicts on a stress scenario and the summary table.
 *
 * Once a scenario's faults are over, collect_children() ends the workers and merges
 * their reports into one Collected; check_scenario() then judges it, one function per
 * check (the workers' own failures and error codes, frozen sections, overlaps and lost
 * updates, lease losses, call bounds, counters per name), each adding problems to the
 * controller. The checks run in a fixed order, since the first problem is the one a
 * failure names and some checks build on earlier ones (frozen sections count as lost
 * leases). An anomaly is allowed only where an injected fault explains it, so each check
 * reads the scenario as well as the report. Each scenario's figures become its Row;
 * print_summary() prints the table of all rows with a total at the end.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "config.h"

#include "stress.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <glib-unix.h>

/* ------------------------------------------------------------------------------------- */
/* Collecting the workers' reports. */

void
collected_init (Collected *col)
{
  col->victims = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  col->lease_lost = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  col->stops = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  col->overlaps = g_ptr_array_new_with_free_func (g_free);
  col->clobbers = g_ptr_array_new_with_free_func (g_free);
  col->failures = g_ptr_array_new_with_free_func (g_free);
  tally_init (&col->tally);
}

void
collected_clear (Collected *col)
{
  tally_clear (&col->tally);
  g_hash_table_unref (col->lease_lost);
  g_hash_table_unref (col->stops);
  g_hash_table_unref (col->victims);
  g_ptr_array_unref (col->overlaps);
  g_ptr_array_unref (col->clobbers);
  g_ptr_array_unref (col->failures);
}

static void
collect_line (Collected *col, const char *line)
{
  g_auto (GStrv) f = g_strsplit (line, " ", 3);
  guint n = g_strv_length (f);

  if (n >= 3 && g_str_equal (f[0], "count"))
    tally_add (&col->tally, f[2], g_ascii_strtoull (f[1], NULL, 10));
  else if (n >= 3 && g_str_equal (f[0], "max"))
    {
      gint64 v = g_ascii_strtoll (f[2], NULL, 10);
      if (g_str_equal (f[1], "acquire"))
        col->tally.max_acquire_ms = MAX (col->tally.max_acquire_ms, v);
      else if (g_str_equal (f[1], "unlock"))
        col->tally.max_unlock_ms = MAX (col->tally.max_unlock_ms, v);
      else if (g_str_equal (f[1], "failed-acquire"))
        col->tally.max_failed_acquire_ms = MAX (col->tally.max_failed_acquire_ms, v);
      else if (g_str_equal (f[1], "failed-unlock"))
        col->tally.max_failed_unlock_ms = MAX (col->tally.max_failed_unlock_ms, v);
    }
  else if (n >= 2 && g_str_equal (f[0], "lease-lost"))
    g_hash_table_add (col->lease_lost, g_strdup (f[1]));
  else if (n >= 3 && g_str_equal (f[0], "stop"))
    g_hash_table_insert (col->stops, g_strdup (f[1]), g_strdup (f[2]));
  else if (n >= 2 && g_str_equal (f[0], "overlap"))
    g_ptr_array_add (col->overlaps, g_strdup (line + strlen ("overlap ")));
  else if (n >= 2 && g_str_equal (f[0], "clobber"))
    g_ptr_array_add (col->clobbers, g_strdup (line + strlen ("clobber ")));
  else if (n >= 2 && g_str_equal (f[0], "failure"))
    g_ptr_array_add (col->failures, g_strdup (line + strlen ("failure ")));
  else if (!g_str_equal (line, "end") && *line != '\0')
    g_ptr_array_add (col->failures, g_strdup_printf ("unexpected worker output: %s", line));
}

/* Reads every worker's report until end of file, then reaps it, all within a bound. */
void
collect_children (Controller *c, Collected *col)
{
  gint64 deadline = g_get_monotonic_time () + 120 * G_USEC_PER_SEC;
  guint open_fds = c->s->procs;

  for (guint i = 0; i < c->s->procs; i++)
    {
      close (c->children[i].stdin_fd); /* end of file: the workers finish */
      c->children[i].stdin_fd = -1;
      g_unix_set_fd_nonblocking (c->children[i].stdout_fd, TRUE, NULL);
    }
  while (open_fds > 0 && g_get_monotonic_time () < deadline)
    {
      g_autofree struct pollfd *pfds = g_new0 (struct pollfd, c->s->procs);
      for (guint i = 0; i < c->s->procs; i++)
        {
          pfds[i].fd = c->children[i].stdout_fd;
          pfds[i].events = POLLIN;
        }
      poll (pfds, c->s->procs, 100);
      for (guint i = 0; i < c->s->procs; i++)
        {
          char buf[4096];
          ssize_t r;

          if (c->children[i].stdout_fd < 0 || pfds[i].revents == 0)
            continue;
          r = read (c->children[i].stdout_fd, buf, sizeof buf);
          if (r > 0)
            g_string_append_len (c->children[i].output, buf, r);
          else if (r == 0 || (errno != EAGAIN && errno != EINTR))
            {
              close (c->children[i].stdout_fd);
              c->children[i].stdout_fd = -1;
              open_fds--;
            }
        }
    }
  for (guint i = 0; i < c->s->procs; i++)
    {
      Child *child = &c->children[i];
      gboolean reaped = child_reap (child, WNOHANG);

      while (!reaped && g_get_monotonic_time () < deadline)
        {
          g_usleep (10 * 1000);
          reaped = child_reap (child, WNOHANG);
        }
      if (!reaped)
        {
          problem (c, "worker %u did not exit: killed", i);
          kill (child->pid, SIGKILL);
          child_reap (child, 0);
        }
      else if (!WIFEXITED (child->status) || WEXITSTATUS (child->status) != 0)
        problem (c, "worker %u %s %d", i,
                 WIFEXITED (child->status) ? "exited with" : "was killed by signal",
                 WIFEXITED (child->status) ? WEXITSTATUS (child->status)
                                           : WTERMSIG (child->status));
      if (child->stdout_fd >= 0)
        close (child->stdout_fd);
      if (!g_str_has_suffix (child->output->str, "end\n"))
        problem (c, "worker %u report is incomplete", i);
      {
        g_auto (GStrv) lines = g_strsplit (child->output->str, "\n", -1);
        g_autofree char *proc = g_strdup_printf ("p%u", i);
        gboolean victim = g_hash_table_contains (col->victims, proc);
        for (guint l = 0; lines[l] != NULL; l++)
          {
            /* A frozen worker's call durations include the freeze: not checked. */
            if (victim && g_str_has_prefix (lines[l], "max "))
              continue;
            collect_line (col, lines[l]);
          }
      }
      g_string_free (child->output, TRUE);
      child->output = NULL;
    }
}

/* ------------------------------------------------------------------------------------- */
/* Verdicts. */

/* Whether one of the two section ids that open @record is in @ids. */
static gboolean
record_involves (const char *record, GHashTable *ids)
{
  g_auto (GStrv) f = g_strsplit (record, " ", -1);

  for (guint i = 0; i < 2 && f[i] != NULL; i++)
    if (g_hash_table_contains (ids, f[i]))
      return TRUE;
  return FALSE;
}

/* Whether section @id ("p3.r1.t0.42") ran in a worker process that was frozen. */
static gboolean
in_frozen_worker (const char *id, GHashTable *victims)
{
  g_autofree char *proc = g_strndup (id, strcspn (id, "."));

  return g_hash_table_contains (victims, proc);
}

/* Whether one of the two section ids that open @record ran in a frozen worker. */
static gboolean
record_in_frozen_worker (const char *record, GHashTable *victims)
{
  g_auto (GStrv) f = g_strsplit (record, " ", -1);

  for (guint i = 0; i < 2 && f[i] != NULL; i++)
    if (in_frozen_worker (f[i], victims))
      return TRUE;
  return FALSE;
}

static guint64
sum_prefixed (Tally *tally, const char *prefix, const char *suffix)
{
  GHashTableIter iter;
  gpointer key, value;
  guint64 sum = 0;

  g_hash_table_iter_init (&iter, tally->counts);
  while (g_hash_table_iter_next (&iter, &key, &value))
    if (g_str_has_prefix (key, prefix) && (suffix == NULL || g_str_has_suffix (key, suffix)))
      sum += *(guint64 *)value;
  return sum;
}

static gboolean
code_allowed (const Scenario *s, const char *op, const char *code)
{
  gboolean faults = s->kill_ms > 0 || s->restarts > 0 || s->outages > 0;

  if (g_str_equal (code, "CONNECTION"))
    return faults && !g_str_equal (op, "obtain");
  if (g_str_equal (code, "LEASE_LOST"))
    return g_str_equal (op, "unlock") && (faults || s->pauses > 0);
  return FALSE;
}

/* The row's figures: what the workers reported and which faults were done. */
static void
fill_row (Controller *c, Collected *col, Row *row)
{
  Tally *tally = &col->tally;

  row->sections = tally_get (tally, "sections");
  row->interrupted = tally_get (tally, "interrupted");
  row->timeouts = tally_get (tally, "timeouts");
  row->busy = tally_get (tally, "busy");
  row->lease_lost = g_hash_table_size (col->lease_lost);
  row->max_acquire_ms = tally->max_acquire_ms;
  row->max_unlock_ms = tally->max_unlock_ms;
  row->pauses = c->pauses_done;
  row->restarts = c->restarts_done;
  row->outages = c->outages_done;
}

/* The workers' own check failures, lost records, too few sections, and errors by code:
 * the row counts them, and a code the scenario's faults do not explain is a problem. */
static void
check_reports (Controller *c, Collected *col, Row *row)
{
  const Scenario *s = c->s;
  Tally *tally = &col->tally;
  GHashTableIter iter;
  gpointer key, value;

  for (guint i = 0; i < col->failures->len; i++)
    problem (c, "worker check: %s", (const char *)g_ptr_array_index (col->failures, i));
  if (tally->dropped > 0)
    problem (c, "%" G_GUINT64_FORMAT " records were dropped", tally->dropped);
  if (row->sections < s->min_sections)
    problem (c, "only %" G_GUINT64_FORMAT " sections, expected at least %" G_GUINT64_FORMAT,
             row->sections, s->min_sections);

  g_hash_table_iter_init (&iter, tally->counts);
  while (g_hash_table_iter_next (&iter, &key, &value))
    {
      g_auto (GStrv) f = NULL;
      guint64 *sum;

      if (!g_str_has_prefix (key, "error "))
        continue;
      f = g_strsplit (key, " ", 3);
      sum = g_hash_table_lookup (row->errors, f[2]);
      if (sum == NULL)
        {
          sum = g_new0 (guint64, 1);
          g_hash_table_insert (row->errors, g_strdup (f[2]), sum);
        }
      *sum += *(guint64 *)value;
      if (!code_allowed (s, f[1], f[2]))
        problem (c, "%" G_GUINT64_FORMAT " × %s failed with %s, not expected in this scenario",
                 *(guint64 *)value, f[1], f[2]);
    }
}

/* A frozen section's lease expired by construction (checked short, frozen for longer,
 * taken over meanwhile): its unlock must say so. With connections being killed or
 * the server frozen, the release itself may fail first and report CONNECTION. Every
 * frozen section counts as one that lost its lease from here on. */
static void
check_stops (Controller *c, Collected *col)
{
  const Scenario *s = c->s;
  GHashTableIter iter;
  gpointer key, value;

  g_hash_table_iter_init (&iter, col->stops);
  while (g_hash_table_iter_next (&iter, &key, &value))
    {
      gboolean connection_ok
          = (s->kill_ms > 0 || s->outages > 0) && g_str_equal (value, "CONNECTION");
      if (!g_str_equal (value, "LEASE_LOST") && !connection_ok)
        problem (c, "frozen section %s: unlock gave %s, expected LEASE_LOST", (const char *)key,
                 (const char *)value);
      g_hash_table_add (col->lease_lost, g_strdup (key));
    }
}

/* Overlaps and lost updates: those involving a section whose lease was lost are
 * expired-lease ones, allowed only for a worker frozen by the pause fault. */
static void
check_overlaps (Controller *c, Collected *col, Row *row)
{
  guint64 real_overlaps = 0;

  for (guint i = 0; i < col->overlaps->len; i++)
    {
      const char *r = g_ptr_array_index (col->overlaps, i);
      if (record_involves (r, col->lease_lost))
        {
          row->expired_overlaps++;
          if (!record_in_frozen_worker (r, col->victims))
            problem (c, "expired-lease overlap outside a frozen worker: %s", r);
        }
      else
        {
          real_overlaps++;
          if (real_overlaps <= 10)
            problem (c, "overlap: section %s", r);
        }
    }
  row->overlaps = real_overlaps;
  for (guint i = 0; i < col->clobbers->len; i++)
    {
      const char *r = g_ptr_array_index (col->clobbers, i);
      g_auto (GStrv) f = g_strsplit (r, " ", -1);
      gint64 delta = g_ascii_strtoll (f[2], NULL, 10);
      if (record_involves (r, col->lease_lost))
        {
          row->expired_lost += (guint64)ABS (delta);
          if (!record_in_frozen_worker (r, col->victims))
            problem (c, "expired-lease lost update outside a frozen worker: %s", r);
        }
      else
        {
          row->lost += (guint64)ABS (delta);
          problem (c, "lost update: section %s replaced a value it had not read (%s)", f[0], r);
        }
    }
}

/* Lease losses: without other faults, only the frozen worker may lose leases; every
 * pause froze one section, whose lease another worker then took (an overlap). */
static void
check_lease_losses (Controller *c, Collected *col, Row *row)
{
  const Scenario *s = c->s;
  GHashTableIter iter;
  gpointer key;
  guint64 lease_lost_outside = 0;

  g_hash_table_iter_init (&iter, col->lease_lost);
  while (g_hash_table_iter_next (&iter, &key, NULL))
    if (!in_frozen_worker (key, col->victims))
      lease_lost_outside++;
  if (lease_lost_outside > 0 && s->kill_ms == 0 && s->restarts == 0 && s->outages == 0)
    problem (c,
             "%" G_GUINT64_FORMAT " sections outside the frozen worker lost their lease without a "
             "fault that explains it",
             lease_lost_outside);
  if (s->pauses > 0)
    {
      if (g_hash_table_size (col->stops) != c->pauses_done || c->pauses_done != s->pauses)
        problem (c, "%u frozen sections reported, %u pauses done, %u planned",
                 g_hash_table_size (col->stops), c->pauses_done, s->pauses);
      if (row->expired_overlaps == 0)
        problem (c, "no expired-lease overlap was seen around the frozen worker");
    }
}

/* Faults had an effect and calls stayed within their bounds: an acquisition within its
 * wait plus a connect and a command timeout, an unlock within the two timeouts, each
 * with REDISLOCK_STRESS_SLACK_MS of slack (1 s unless set). The workers leave out of
 * each call the time their own process stood stopped by a pause (stress-worker.c). */
static void
check_bounds (Controller *c, Collected *col, Row *row)
{
  const Scenario *s = c->s;
  Tally *tally = &col->tally;
  gint64 timeout_ms = s->timeout_ms > 0 ? s->timeout_ms : LIBRARY_DEFAULT_TIMEOUT_MS;
  gint64 slack_ms = 1000;
  const char *slack_env = g_getenv ("REDISLOCK_STRESS_SLACK_MS");

  if (slack_env != NULL)
    slack_ms = g_ascii_strtoll (slack_env, NULL, 10);
  g_test_message (
      "%s: longest acquisition %" G_GINT64_FORMAT " ms (failed with CONNECTION: %" G_GINT64_FORMAT
      " ms), longest unlock %" G_GINT64_FORMAT " ms (failed with CONNECTION: %" G_GINT64_FORMAT
      " ms); timeouts %" G_GINT64_FORMAT " ms",
      s->name, tally->max_acquire_ms, tally->max_failed_acquire_ms, tally->max_unlock_ms,
      tally->max_failed_unlock_ms, timeout_ms);

  if (s->kill_ms > 0 && row->kills == 0)
    problem (c, "CLIENT KILL never killed a library connection");
  if (s->restarts != c->restarts_done)
    problem (c, "%u of %u restarts done", c->restarts_done, s->restarts);
  if (s->outages > 0 && sum_prefixed (tally, "error ", " CONNECTION") == 0)
    problem (c, "the server was unreachable, yet no call failed with CONNECTION");
  if (s->outages != c->outages_done)
    problem (c, "%u of %u outages done", c->outages_done, s->outages);
  if (tally->max_acquire_ms > s->wait_ms + 2 * timeout_ms + slack_ms)
    problem (c,
             "an acquisition took %" G_GINT64_FORMAT " ms, bound %" G_GINT64_FORMAT
             " ms (wait + connect + command timeout + slack)",
             tally->max_acquire_ms, s->wait_ms + 2 * timeout_ms + slack_ms);
  if (tally->max_unlock_ms > 2 * timeout_ms + slack_ms)
    problem (c,
             "an unlock took %" G_GINT64_FORMAT " ms, bound %" G_GINT64_FORMAT
             " ms (connect + command timeout + slack)",
             tally->max_unlock_ms, 2 * timeout_ms + slack_ms);
  if (s->kill_ms == 0 && s->restarts == 0 && s->outages == 0 && s->pauses == 0)
    {
      if (row->timeouts > 0)
        problem (c, "%" G_GUINT64_FORMAT " acquisitions timed out without any fault",
                 row->timeouts);
      if (row->interrupted > 0)
        problem (c, "%" G_GUINT64_FORMAT " sections interrupted without any fault",
                 row->interrupted);
    }
}

/* The run_id of the server's current run, read on the controller's connection. */
static char *
server_run_id (Controller *c)
{
  redisReply *reply = controller_command (c, "INFO server");
  char *run_id = NULL;

  if (reply != NULL && reply->type == REDIS_REPLY_STRING)
    {
      const char *p = strstr (reply->str, "run_id:");
      if (p != NULL)
        run_id = g_strndup (p + 7, strcspn (p + 7, "\r\n"));
    }
  if (reply != NULL)
    freeReplyObject (reply);
  return run_id;
}

/* The counter of name-@i in the server's run @run_id against the writes confirmed on
 * it: they differ by exactly the lost updates recorded, unless a write's outcome is
 * unknown. Without a fault that loses keys or leases, no lock key is left either. */
static void
check_counter (Controller *c, Collected *col, const char *run_id, guint i)
{
  const Scenario *s = c->s;
  Tally *tally = &col->tally;
  g_autofree char *writes_key = g_strdup_printf ("writes %s name-%u", run_id, i);
  g_autofree char *uncertain_key = g_strdup_printf ("uncertain %s", run_id);
  guint64 expected = tally_get (tally, writes_key);
  guint64 uncertain = tally_get (tally, uncertain_key);
  gint64 explained = 0;
  guint64 actual;
  const char *writer;
  redisReply *reply = controller_command (c, "GET " DATA_PREFIX ":counter:name-%u", i);

  actual = parse_counter (reply, &writer);
  if (reply != NULL)
    freeReplyObject (reply);
  for (guint k = 0; k < col->clobbers->len; k++)
    {
      g_auto (GStrv) f = g_strsplit (g_ptr_array_index (col->clobbers, k), " ", -1);
      g_autofree char *name = g_strdup_printf ("name-%u", i);
      if (g_str_equal (f[3], run_id) && g_str_equal (f[4], name))
        explained += g_ascii_strtoll (f[2], NULL, 10);
    }
  g_test_message ("%s name-%u: %" G_GUINT64_FORMAT
                  " confirmed increments, counter %" G_GUINT64_FORMAT ", %" G_GINT64_FORMAT
                  " explained by recorded lost updates",
                  s->name, i, expected, actual, explained);
  if ((gint64)expected - (gint64)actual != explained && uncertain == 0)
    problem (c,
             "name-%u: %" G_GUINT64_FORMAT " increments confirmed, counter is %" G_GUINT64_FORMAT
             ", lost updates recorded explain %" G_GINT64_FORMAT,
             i, expected, actual, explained);
  if (s->kill_ms == 0 && s->restarts == 0 && s->outages == 0)
    {
      g_autofree char *lock_key = g_strdup_printf (STRESS_REGISTRY_KEY ":name-%u", i);
      reply = controller_command (c, "EXISTS %s", lock_key);
      if (reply == NULL || reply->type != REDIS_REPLY_INTEGER || reply->integer != 0)
        problem (c, "lock key %s still exists after every worker closed its registries", lock_key);
      if (reply != NULL)
        freeReplyObject (reply);
    }
}

/* The verdicts on one scenario, in the order its problems are listed; fills @row. The
 * row's figures come first: checking the frozen sections adds them to the lease
 * losses, and the overlap counts feed the lease-loss check. */
void
check_scenario (Controller *c, Collected *col, Row *row)
{
  g_autofree char *run_id = NULL;

  fill_row (c, col, row);
  check_reports (c, col, row);
  check_stops (c, col);
  check_overlaps (c, col, row);
  check_lease_losses (c, col, row);
  check_bounds (c, col, row);

  /* The counters of the server's last run against the writes confirmed on it. */
  run_id = server_run_id (c);
  if (run_id == NULL)
    problem (c, "cannot read the server's run_id");
  for (guint i = 0; run_id != NULL && i < c->s->names; i++)
    check_counter (c, col, run_id, i);
}

/* ------------------------------------------------------------------------------------- */
/* The summary table. */

void
print_row (const Row *row, gboolean header)
{
  g_autoptr (GString) errors = g_string_new (NULL);

  for (gsize i = 0; i < n_code_names + 2; i++)
    {
      const char *code = i < n_code_names    ? code_names[i]
                         : i == n_code_names ? "CANCELLED"
                                             : "OTHER";
      guint64 *n = g_hash_table_lookup (row->errors, code);
      if (n != NULL && *n > 0)
        g_string_append_printf (errors, "%s%s=%" G_GUINT64_FORMAT, errors->len > 0 ? "," : "", code,
                                *n);
    }
  if (errors->len == 0)
    g_string_append (errors, "-");
  if (header)
    g_print ("# %-14s %9s %6s %8s %8s %6s %8s %6s %8s %6s %8s %8s %7s  %s\n", "scenario",
             "sections", "interr", "overlaps", "exp-ovl", "lost", "exp-lost", "lease", "timeouts",
             "kills", "max-acq", "max-unl", "secs", "errors by code");
  g_print ("# %-14s %9" G_GUINT64_FORMAT " %6" G_GUINT64_FORMAT " %8" G_GUINT64_FORMAT
           " %8" G_GUINT64_FORMAT " %6" G_GUINT64_FORMAT " %8" G_GUINT64_FORMAT
           " %6" G_GUINT64_FORMAT " %8" G_GUINT64_FORMAT " %6" G_GUINT64_FORMAT
           " %6" G_GINT64_FORMAT "ms %6" G_GINT64_FORMAT "ms %6.1f  %s%s\n",
           row->name, row->sections, row->interrupted, row->overlaps, row->expired_overlaps,
           row->lost, row->expired_lost, row->lease_lost, row->timeouts, row->kills,
           row->max_acquire_ms, row->max_unlock_ms, row->duration_ms / 1000.0, errors->str,
           row->passed ? "" : "  FAILED");
}

void
row_free (gpointer data)
{
  Row *row = data;

  g_free (row->name);
  g_hash_table_unref (row->errors);
  g_free (row);
}

void
print_summary (GPtrArray *rows, const char *profile)
{
  Row total = { 0 };
  GHashTableIter iter;
  gpointer key, value;

  if (rows->len == 0)
    return;
  total.name = (char *)"TOTAL";
  total.errors = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  total.passed = TRUE;
  g_print ("#\n# redislock stress, %s profile\n", profile);
  for (guint i = 0; i < rows->len; i++)
    {
      Row *row = g_ptr_array_index (rows, i);

      print_row (row, i == 0);
      total.sections += row->sections;
      total.interrupted += row->interrupted;
      total.overlaps += row->overlaps;
      total.expired_overlaps += row->expired_overlaps;
      total.lost += row->lost;
      total.expired_lost += row->expired_lost;
      total.lease_lost += row->lease_lost;
      total.timeouts += row->timeouts;
      total.kills += row->kills;
      total.max_acquire_ms = MAX (total.max_acquire_ms, row->max_acquire_ms);
      total.max_unlock_ms = MAX (total.max_unlock_ms, row->max_unlock_ms);
      total.duration_ms += row->duration_ms;
      total.passed &= row->passed;
      g_hash_table_iter_init (&iter, row->errors);
      while (g_hash_table_iter_next (&iter, &key, &value))
        {
          guint64 *sum = g_hash_table_lookup (total.errors, key);
          if (sum == NULL)
            {
              sum = g_new0 (guint64, 1);
              g_hash_table_insert (total.errors, g_strdup (key), sum);
            }
          *sum += *(guint64 *)value;
        }
    }
  print_row (&total, FALSE);
  g_print (
      "# (interr: sections cut short by a broken connection; exp-ovl / exp-lost: overlaps and\n"
      "#  lost updates involving a section whose lease expired while its worker was frozen;\n"
      "#  lease: unlocks that reported LEASE_LOST; max-acq / max-unl: longest bounded call)\n");
  g_hash_table_unref (total.errors);
}
