/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* stress.c: mutual exclusion under load, under faults, across processes.
 *
 * Workers are P child processes (this program run again in a hidden worker mode, so no
 * registry is ever used across fork()) with R registries each and T threads per
 * registry. Every loop obtains a lock from a small set of names, takes it, and inside
 * the critical section reads that name's holder key and counter key in Redis on the
 * thread's own raw connection, checks nobody else is inside (holder empty), writes its
 * own section id to the holder key, increments the counter non-atomically (read, then
 * `SET counter "n+1 id" GET`), and clears the holder key only if it still holds its own
 * id. Because every counter write returns the value it replaced, each lost increment is
 * caught at the write that lost it and names the section that wrote the replaced value;
 * the final counters are compared with the confirmed writes as well. A section seen
 * inside someone else's section is an overlap. Both are failures, except that a section
 * whose unlock reported LEASE_LOST really did lose its lease: anomalies involving such a
 * section count as "expired-lease" overlaps and lost updates, which are allowed only
 * around a worker process that was frozen with SIGSTOP for longer than its TTL.
 *
 * Faults, each its own scenario, then all together: CLIENT KILL of random library
 * connections every 100 ms (the harness's own connections are named "stress-*" and
 * spared); a worker process stopping itself inside a section held with a short TTL and
 * resumed later; redis-server killed and restarted (no persistence) while locks are
 * held; redis-server frozen for a few seconds with 500 ms timeouts, where every library
 * call must return within its bound. The raw connection of a section is opened before
 * the lock is taken and never reopened inside the section, so a section never writes
 * to a server other than the one it locked on; the counters are checked per server run
 * (run_id). Two small fault cases follow the scenarios: a holder frozen past its lease
 * while a thread of its registry waits (no hand-over of the dead lease), and an unlock
 * whose release reply is lost to CLIENT KILL (no false LEASE_LOST).
 *
 * With no option this is the quick profile run by `make check` (/stress/quick/...);
 * `--long` runs the long profile (/stress/long/..., `make stress`). Each scenario prints
 * one summary row; the whole table is printed at the end.
 *
 * This file is the controller: the scenario tables, the run of one scenario (its own
 * server, progress file and worker processes, then its faults, the workers' reports and
 * the verdicts, all under an alarm) and main, which also dispatches the hidden worker
 * and probe modes. The workers, the faults and the checks each have a file of their
 * own (stress-worker.c, stress-faults.c, stress-check.c; stress.h says what they share),
 * so each part reads on its own and the controller reads as the order of events.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "config.h"

#include "stress.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <glib/gstdio.h>

/* ------------------------------------------------------------------------------------- */
/* The controller: runs one scenario, injects its faults, checks what the workers saw. */

static GPtrArray *summary_rows; /* the Rows of the scenarios run so far */
gchar *self_exe;

void
problem (Controller *c, const char *format, ...)
{
  va_list ap;

  va_start (ap, format);
  g_ptr_array_add (c->problems, g_strdup_vprintf (format, ap));
  va_end (ap);
}

guint64
progress_total (Controller *c)
{
  guint64 sum = 0;

  for (guint i = 0; i < c->s->procs; i++)
    sum += __atomic_load_n (&c->progress[i], __ATOMIC_RELAXED);
  return sum;
}

/* Polls the shared progress counters until @target sections are done; gives up early
 * when a worker has exited. */
gboolean
wait_progress (Controller *c, guint64 target, gint64 timeout_ms)
{
  gint64 deadline = g_get_monotonic_time () + timeout_ms * 1000;

  while (progress_total (c) < target)
    {
      for (guint i = 0; i < c->s->procs; i++)
        if (child_reap (&c->children[i], WNOHANG))
          return FALSE;
      if (g_get_monotonic_time () >= deadline)
        return FALSE;
      g_usleep (5 * 1000);
    }
  return TRUE;
}

/* Polls until every worker has done @sections sections: faults start only then. */
static gboolean
wait_started (Controller *c, guint64 sections, gint64 timeout_ms)
{
  gint64 deadline = g_get_monotonic_time () + timeout_ms * 1000;

  for (guint i = 0; i < c->s->procs; i++)
    while (__atomic_load_n (&c->progress[i], __ATOMIC_RELAXED) < sections)
      {
        if (child_reap (&c->children[i], WNOHANG) || g_get_monotonic_time () >= deadline)
          return FALSE;
        g_usleep (5 * 1000);
      }
  return TRUE;
}

redisContext *
named_connection (RedisLockTestServer *server, const char *name)
{
  struct timeval tv = { RAW_TIMEOUT_S, 0 };
  redisContext *c
      = redisConnectUnixWithTimeout (redis_lock_test_server_get_socket_path (server), tv);
  redisReply *reply;

  if (c == NULL || c->err != 0)
    {
      if (c != NULL)
        redisFree (c);
      return NULL;
    }
  redisSetTimeout (c, tv);
  reply = redisCommand (c, "CLIENT SETNAME %s", name);
  if (reply == NULL || reply->type != REDIS_REPLY_STATUS)
    {
      if (reply != NULL)
        freeReplyObject (reply);
      redisFree (c);
      return NULL;
    }
  freeReplyObject (reply);
  return c;
}

/* A command on the controller's connection, reconnecting once if the server was
 * restarted since the last one. */
redisReply *
controller_command (Controller *c, const char *format, ...)
{
  for (int attempt = 0; attempt < 2; attempt++)
    {
      va_list ap;
      redisReply *reply;

      if (c->redis == NULL)
        c->redis = named_connection (c->server, "stress-controller");
      if (c->redis == NULL)
        return NULL;
      va_start (ap, format);
      reply = redisvCommand (c->redis, format, ap);
      va_end (ap);
      if (reply != NULL)
        return reply;
      g_clear_pointer (&c->redis, redisFree);
    }
  return NULL;
}

static gboolean
spawn_worker (Controller *c, guint index, GError **error)
{
  const Scenario *s = c->s;
  Child *child = &c->children[index];
  g_autoptr (GPtrArray) argv = g_ptr_array_new_with_free_func (g_free);

  g_ptr_array_add (argv, g_strdup (self_exe));
  g_ptr_array_add (argv, g_strdup ("--worker"));
  g_ptr_array_add (argv, g_strdup_printf ("--index=%u", index));
  g_ptr_array_add (argv, g_strdup_printf ("--url=%s", c->url));
  if (c->server != NULL)
    g_ptr_array_add (
        argv, g_strdup_printf ("--socket=%s", redis_lock_test_server_get_socket_path (c->server)));
  g_ptr_array_add (argv, g_strdup_printf ("--progress=%s", c->progress_path));
  g_ptr_array_add (argv, g_strdup_printf ("--registries=%u", s->registries));
  g_ptr_array_add (argv, g_strdup_printf ("--threads=%u", s->threads));
  g_ptr_array_add (argv, g_strdup_printf ("--names=%u", s->names));
  g_ptr_array_add (argv, g_strdup_printf ("--ttl=%" G_GINT64_FORMAT, s->ttl_ms));
  g_ptr_array_add (argv, g_strdup_printf ("--timeout=%" G_GINT64_FORMAT, s->timeout_ms));
  g_ptr_array_add (argv, g_strdup_printf ("--wait=%" G_GINT64_FORMAT, s->wait_ms));
  g_ptr_array_add (argv, g_strdup_printf ("--stop-ttl=%" G_GINT64_FORMAT, s->stop_ttl_ms));
  g_ptr_array_add (argv, g_strdup_printf ("--stop-ms=%" G_GINT64_FORMAT, s->stop_ms));
  g_ptr_array_add (argv, g_strdup_printf ("--max-ms=%" G_GINT64_FORMAT, s->cap_ms));
  if (s->use_lock)
    g_ptr_array_add (argv, g_strdup ("--use-lock"));
  if (s->history)
    {
      g_autofree char *path = history_path (c, index);

      g_ptr_array_add (argv, g_strdup_printf ("--history=%s", path));
      g_ptr_array_add (argv, g_strdup_printf ("--hold-us=%" G_GINT64_FORMAT, s->hold_us));
      g_ptr_array_add (argv, g_strdup_printf ("--min-replicas=%u", s->min_replicas));
      if (s->fencing)
        g_ptr_array_add (argv, g_strdup ("--fencing"));
      if (s->topology == TOPOLOGY_QUORUM)
        g_ptr_array_add (argv, g_strdup ("--quorum"));
      g_ptr_array_add (argv, g_strdup_printf ("--member=%d", (int)s->member));
      g_ptr_array_add (argv, g_strdup_printf ("--permits=%u", s->permits));
    }
  g_ptr_array_add (argv, NULL);

  child->output = g_string_new (NULL);
  return g_spawn_async_with_pipes (NULL, (char **)argv->pdata, NULL, G_SPAWN_DO_NOT_REAP_CHILD,
                                   NULL, NULL, &child->pid, &child->stdin_fd, &child->stdout_fd,
                                   NULL, error);
}

/* Records @child's exit if it has exited (never its stops). */
gboolean
child_reap (Child *child, int options)
{
  int status;
  pid_t r;

  if (child->exited)
    return TRUE;
  do
    r = waitpid (child->pid, &status, options);
  while (r < 0 && errno == EINTR);
  if (r == child->pid && (WIFEXITED (status) || WIFSIGNALED (status)))
    {
      child->exited = TRUE;
      child->status = status;
      g_spawn_close_pid (child->pid);
      return TRUE;
    }
  return FALSE;
}

static void
on_alarm (int signum)
{
  static const char message[] = "stress: scenario exceeded its time cap; aborting\n";

  if (write (STDERR_FILENO, message, sizeof message - 1) < 0)
    _exit (99);
  _exit (99);
}

static double
scale_factor (void)
{
  const char *env = g_getenv ("REDISLOCK_STRESS_SCALE");
  double scale = env != NULL ? g_ascii_strtod (env, NULL) : 1.0;

  return scale > 0 && scale <= 1 ? scale : 1.0;
}

/* The progress file the workers count their sections in, in a temporary directory and
 * mapped shared, then the workers themselves. */
static void
start_workers (Controller *c)
{
  const Scenario *s = c->s;
  g_autoptr (GError) error = NULL;
  int fd;

  c->dir = g_dir_make_tmp ("redislock-stress-XXXXXX", &error);
  g_assert_no_error (error);
  c->progress_path = g_build_filename (c->dir, "progress", NULL);
  fd = open (c->progress_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  g_assert_cmpint (fd, >=, 0);
  g_assert_cmpint (ftruncate (fd, 4096), ==, 0);
  c->progress = mmap (NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  g_assert_true (c->progress != MAP_FAILED);
  close (fd);
  g_assert_cmpuint (s->procs, <=, 4096 / sizeof (guint64));

  c->children = g_new0 (Child, s->procs);
  c->start_us = g_get_monotonic_time ();
  for (guint i = 0; i < s->procs; i++)
    {
      g_assert_true (spawn_worker (c, i, &error));
      g_assert_no_error (error);
    }
}

/* Once every worker has got going: the faults, then work until at least @min_sections
 * sections are done and POST_FAULT_SECTIONS more after the last fault, within the
 * scenario's time cap. */
static void
run_workload (Controller *c, GHashTable *victims, Row *row, guint64 min_sections)
{
  const Scenario *s = c->s;
  guint64 after;

  if (!wait_started (c, 10, 60000))
    {
      problem (c, "the workers did not all get going: %" G_GUINT64_FORMAT " sections in 60 s",
               progress_total (c));
      return;
    }
  inject_faults (c, victims, row);
  inject_topology_faults (c);
  inject_forced_unlocks (c);
  after = MAX (min_sections,
               progress_total (c)
                   + (s->kill_ms + s->pauses + s->restarts + s->outages + s->failovers + s->forced
                              > 0
                          ? POST_FAULT_SECTIONS
                          : 0));
  if (!wait_progress (c, after,
                      MAX (1000, s->cap_ms - (g_get_monotonic_time () - c->start_us) / 1000)))
    problem (c, "%" G_GUINT64_FORMAT " sections by the time cap, wanted %" G_GUINT64_FORMAT,
             progress_total (c), after);
}

/* The scenario's row, printed and kept for the summary table; its problems as test
 * messages, the first one in the failure. */
static void
report_scenario (Controller *c, Row *row)
{
  const char *name = c->s->name;

  row->passed = c->problems->len == 0;
  print_row (row, TRUE);
  g_ptr_array_add (summary_rows, row);
  for (guint i = 0; i < c->problems->len; i++)
    g_test_message ("%s: %s", name, (const char *)g_ptr_array_index (c->problems, i));
  if (c->problems->len > 0)
    g_test_fail_printf ("%s: %u problems, the first: %s", name, c->problems->len,
                        (const char *)g_ptr_array_index (c->problems, 0));
}

static void
controller_clear (Controller *c)
{
  g_clear_pointer (&c->redis, redisFree);
  munmap (c->progress, 4096);
  for (guint i = 0; c->s->history && i < c->s->procs; i++)
    {
      g_autofree char *path = history_path (c, i);
      g_unlink (path);
    }
  g_unlink (c->progress_path);
  g_rmdir (c->dir);
  g_free (c->progress_path);
  g_free (c->dir);
  g_free (c->children);
  g_ptr_array_unref (c->problems);
  g_clear_pointer (&c->lease_faults, g_array_unref);
  if (c->server != NULL)
    {
      redis_lock_test_server_free (c->server);
      g_free (c->url);
    }
  else
    topology_stop (c);
}

/* One scenario: its own server and workers, the faults, the workers' reports, the
 * verdicts (against the minimum number of sections scaled by REDISLOCK_STRESS_SCALE),
 * and its row; all within the scenario's time cap plus 3 minutes, or the alarm ends
 * the program. */
static void
run_scenario (gconstpointer data)
{
  const Scenario *s = data;
  Controller c = { 0 };
  Collected col = { 0 };
  Row *row = g_new0 (Row, 1);
  guint64 min_sections = (guint64)(s->min_sections * scale_factor ());
  Scenario scaled = *s;

  g_test_summary (s->summary);
  c.s = s;
  c.problems = g_ptr_array_new_with_free_func (g_free);
  if (s->topology == TOPOLOGY_SERVER)
    {
      c.server = redis_lock_test_server_new_or_skip (NULL);
      if (c.server != NULL)
        c.url = g_strdup (redis_lock_test_server_get_url (c.server));
    }
  if (s->topology == TOPOLOGY_SERVER ? c.server == NULL : !topology_start (&c))
    {
      g_ptr_array_unref (c.problems);
      g_free (row);
      return;
    }
  alarm ((unsigned)(s->cap_ms / 1000 + 180));

  start_workers (&c);
  collected_init (&col);
  run_workload (&c, col.victims, row, min_sections);
  collect_children (&c, &col);
  row->duration_ms = (g_get_monotonic_time () - c.start_us) / 1000;
  row->name = g_strdup (s->name);
  row->scenario = s;
  row->errors = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  scaled.min_sections = min_sections;
  c.s = &scaled;
  if (s->history)
    check_history (&c, &col, row);
  else
    check_scenario (&c, &col, row);
  c.s = s;
  alarm (0);

  report_scenario (&c, row);
  collected_clear (&col);
  controller_clear (&c);
}

/* ------------------------------------------------------------------------------------- */
/* Profiles. */

/* make check: about 20 s on two cores, >= 5 000 sections, every fault once, small. */
static const Scenario quick_scenarios[] = {
  { .name = "baseline",
    .summary = "3 processes x 2 registries x 3 threads on 4 names, 10 000 sections, no fault: "
               "no overlap, no lost update, no error, no timeout, counters exact, no lock key "
               "left.",
    .procs = 3,
    .registries = 2,
    .threads = 3,
    .names = 4,
    .ttl_ms = 10000,
    .wait_ms = 10000,
    .use_lock = TRUE,
    .min_sections = 10000,
    .cap_ms = 60000 },
  { .name = "client-kill",
    .summary = "CLIENT KILL of random library connections (data and subscription) every 100 ms "
               "for 2 s: calls may fail with CONNECTION, exclusion holds, work goes on.",
    .procs = 2,
    .registries = 2,
    .threads = 2,
    .names = 4,
    .ttl_ms = 3000,
    .wait_ms = 5000,
    .use_lock = TRUE,
    .min_sections = 600,
    .kill_ms = 2000,
    .cap_ms = 60000 },
  { .name = "pause-worker",
    .summary = "A worker frozen (SIGSTOP) inside a section for 6x its lease TTL, until another "
               "worker enters: its unlock reports LEASE_LOST, the overlap it causes is an "
               "expired-lease one, nobody else loses a lease.",
    .procs = 3,
    .registries = 1,
    .threads = 2,
    .names = 3,
    .ttl_ms = 20000,
    .wait_ms = 1000,
    .use_lock = FALSE,
    .min_sections = 500,
    .pauses = 1,
    .stop_ms = 1200,
    .stop_ttl_ms = 200,
    .cap_ms = 60000 },
  { .name = "restart",
    .summary
    = "redis-server killed and restarted 3 times while locks are held: holders see "
      "LEASE_LOST or CONNECTION, waiters recover, no overlap, counters exact per server run.",
    .procs = 2,
    .registries = 2,
    .threads = 2,
    .names = 4,
    .ttl_ms = 3000,
    .wait_ms = 5000,
    .use_lock = TRUE,
    .min_sections = 2000,
    .restarts = 3,
    .cap_ms = 60000 },
  { .name = "unreachable",
    .summary
    = "redis-server frozen for 2 s with 500 ms timeouts: calls fail with CONNECTION within "
      "their bound, nothing hangs, work resumes.",
    .procs = 2,
    .registries = 2,
    .threads = 2,
    .names = 4,
    .ttl_ms = 8000,
    .timeout_ms = 500,
    .wait_ms = 500,
    .min_sections = 500,
    .outages = 1,
    .outage_ms = 2000,
    .cap_ms = 60000 },
  { .name = "combined",
    .summary = "Every fault at once: kills throughout, a frozen worker, a restart and an outage.",
    .procs = 3,
    .registries = 2,
    .threads = 2,
    .names = 4,
    .ttl_ms = 8000,
    .timeout_ms = 500,
    .wait_ms = 500,
    .min_sections = 800,
    .kill_ms = 2000,
    .pauses = 1,
    .stop_ms = 1200,
    .stop_ttl_ms = 200,
    .restarts = 1,
    .outages = 1,
    .outage_ms = 1500,
    .cap_ms = 90000 },
};

/* make stress: >= 100 000 sections, every fault several times. */
static const Scenario long_scenarios[] = {
  { .name = "baseline",
    .summary = "4 processes x 2 registries x 4 threads on 8 names, no fault, 60 000 sections.",
    .procs = 4,
    .registries = 2,
    .threads = 4,
    .names = 8,
    .ttl_ms = 10000,
    .wait_ms = 10000,
    .use_lock = TRUE,
    .min_sections = 60000,
    .cap_ms = 600000 },
  { .name = "client-kill",
    .summary = "CLIENT KILL every 100 ms for 20 s.",
    .procs = 3,
    .registries = 2,
    .threads = 3,
    .names = 6,
    .ttl_ms = 3000,
    .wait_ms = 5000,
    .use_lock = TRUE,
    .min_sections = 10000,
    .kill_ms = 20000,
    .cap_ms = 600000 },
  { .name = "pause-worker",
    .summary = "Three workers frozen in turn, 2 s each, inside sections with a 300 ms TTL.",
    .procs = 4,
    .registries = 2,
    .threads = 2,
    .names = 4,
    .ttl_ms = 20000,
    .wait_ms = 1000,
    .use_lock = FALSE,
    .min_sections = 6000,
    .pauses = 3,
    .stop_ms = 2000,
    .stop_ttl_ms = 300,
    .cap_ms = 600000 },
  { .name = "restart",
    .summary = "redis-server killed and restarted 5 times while locks are held.",
    .procs = 3,
    .registries = 2,
    .threads = 3,
    .names = 6,
    .ttl_ms = 3000,
    .wait_ms = 5000,
    .use_lock = TRUE,
    .min_sections = 10000,
    .restarts = 5,
    .cap_ms = 600000 },
  { .name = "unreachable",
    .summary = "redis-server frozen twice for 3 s with 500 ms timeouts.",
    .procs = 3,
    .registries = 2,
    .threads = 2,
    .names = 4,
    .ttl_ms = 8000,
    .timeout_ms = 500,
    .wait_ms = 500,
    .min_sections = 6000,
    .outages = 2,
    .outage_ms = 3000,
    .cap_ms = 600000 },
  { .name = "combined",
    .summary = "Kills for 20 s, two frozen workers, three restarts and two outages.",
    .procs = 4,
    .registries = 2,
    .threads = 3,
    .names = 6,
    .ttl_ms = 8000,
    .timeout_ms = 500,
    .wait_ms = 500,
    .min_sections = 15000,
    .kill_ms = 20000,
    .pauses = 2,
    .stop_ms = 2000,
    .stop_ttl_ms = 300,
    .restarts = 3,
    .outages = 2,
    .outage_ms = 2500,
    .cap_ms = 900000 },
};

/* History scenarios (stress-jepsen.c): short TTLs so that the faults matter, fencing
 * wherever the store has it; a verdict only where the contract promises it. make check
 * runs the short profile (a few seconds each); --jepsen (make jepsen) the full one. */
static const Scenario jepsen_short_scenarios[] = {
  { .name = "server",
    .summary = "One server: CLIENT KILL storm, a worker frozen past its 1 s TTL, two restarts "
               "empty. No silent overlap, no token regression.",
    .history = TRUE,
    .topology = TOPOLOGY_SERVER,
    .procs = 3,
    .registries = 1,
    .threads = 3,
    .names = 3,
    .ttl_ms = 1000,
    .wait_ms = 2000,
    .hold_us = 2000,
    .fencing = TRUE,
    .min_sections = 200,
    .kill_ms = 1000,
    .pauses = 1,
    .stop_ms = 2000,
    .restarts = 2,
    .safe_silent = TRUE,
    .safe_tokens = TRUE,
    .cap_ms = 60000 },
  { .name = "sentinel",
    .summary = "Sentinel, two replicas, no replica acknowledgement: a forced failover. "
               "No token regression; overlaps in the failover window are measured.",
    .history = TRUE,
    .topology = TOPOLOGY_SENTINEL,
    .replicas = 2,
    .procs = 3,
    .registries = 1,
    .threads = 3,
    .names = 3,
    .ttl_ms = 1000,
    .wait_ms = 2000,
    .hold_us = 2000,
    .fencing = TRUE,
    .min_sections = 200,
    .failovers = 1,
    .settle_ms = 1000,
    .safe_tokens = TRUE,
    .cap_ms = 60000 },
  { .name = "sentinel-acked",
    .summary = "Sentinel, two replicas, set_min_replicas 2: a forced failover. No overlap at "
               "all, no token regression.",
    .history = TRUE,
    .topology = TOPOLOGY_SENTINEL,
    .replicas = 2,
    .min_replicas = 2,
    .procs = 3,
    .registries = 1,
    .threads = 3,
    .names = 3,
    .ttl_ms = 1000,
    .wait_ms = 2000,
    .hold_us = 2000,
    .fencing = TRUE,
    .min_sections = 200,
    .failovers = 1,
    .safe_overlap = TRUE,
    .safe_tokens = TRUE,
    .cap_ms = 60000 },
  { .name = "cluster",
    .summary = "Cluster of three masters with a replica each: a replica paused, its master "
               "killed, the replica promoted. No silent overlap, no token regression.",
    .history = TRUE,
    .topology = TOPOLOGY_CLUSTER,
    .procs = 3,
    .registries = 1,
    .threads = 3,
    .names = 3,
    .ttl_ms = 3000,
    .wait_ms = 2000,
    .hold_us = 2000,
    .fencing = TRUE,
    .min_sections = 200,
    .failovers = 1,
    .safe_silent = TRUE,
    .safe_tokens = TRUE,
    .cap_ms = 60000 },
  { .name = "quorum",
    .summary = "Quorum of three servers: two nodes restarted empty in turn. No silent overlap.",
    .history = TRUE,
    .topology = TOPOLOGY_QUORUM,
    .procs = 3,
    .registries = 1,
    .threads = 3,
    .names = 3,
    .ttl_ms = 1000,
    .wait_ms = 2000,
    .hold_us = 2000,
    .min_sections = 200,
    .failovers = 2,
    .safe_silent = TRUE,
    .cap_ms = 60000 },
};

/* make jepsen: more processes, threads and faults; a few minutes on two cores. */
static const Scenario jepsen_full_scenarios[] = {
  { .name = "server",
    .summary = "One server: CLIENT KILL storm for 5 s, two workers frozen past the TTL, "
               "four restarts empty, five forced unlocks.",
    .history = TRUE,
    .topology = TOPOLOGY_SERVER,
    .procs = 4,
    .registries = 2,
    .threads = 2,
    .names = 4,
    .ttl_ms = 1000,
    .wait_ms = 2000,
    .hold_us = 2000,
    .fencing = TRUE,
    .min_sections = 3000,
    .kill_ms = 5000,
    .pauses = 2,
    .stop_ms = 2500,
    .restarts = 4,
    .safe_silent = TRUE,
    .safe_tokens = TRUE,
    .forced = 5,
    .cap_ms = 300000 },
  { .name = "sentinel",
    .summary = "Sentinel, two replicas, no replica acknowledgement: three forced failovers, "
               "five forced unlocks.",
    .history = TRUE,
    .topology = TOPOLOGY_SENTINEL,
    .replicas = 2,
    .procs = 4,
    .registries = 2,
    .threads = 2,
    .names = 4,
    .ttl_ms = 1000,
    .wait_ms = 2000,
    .hold_us = 2000,
    .fencing = TRUE,
    .min_sections = 3000,
    .failovers = 3,
    .settle_ms = 11000,
    .safe_tokens = TRUE,
    .forced = 5,
    .cap_ms = 300000 },
  { .name = "sentinel-acked",
    .summary = "Sentinel, two replicas, set_min_replicas 2: three forced failovers.",
    .history = TRUE,
    .topology = TOPOLOGY_SENTINEL,
    .replicas = 2,
    .min_replicas = 2,
    .procs = 4,
    .registries = 2,
    .threads = 2,
    .names = 4,
    .ttl_ms = 1000,
    .wait_ms = 2000,
    .hold_us = 2000,
    .fencing = TRUE,
    .min_sections = 3000,
    .failovers = 3,
    .safe_overlap = TRUE,
    .safe_tokens = TRUE,
    .cap_ms = 300000 },
  { .name = "cluster",
    .summary = "Cluster of three masters with a replica each: three masters killed after "
               "their replica fell behind, and failed over; a worker frozen past the TTL; five "
               "forced unlocks.",
    .history = TRUE,
    .topology = TOPOLOGY_CLUSTER,
    .procs = 4,
    .registries = 2,
    .threads = 2,
    .names = 4,
    .ttl_ms = 3000,
    .wait_ms = 2000,
    .hold_us = 2000,
    .fencing = TRUE,
    .min_sections = 3000,
    .pauses = 1,
    .stop_ms = 5000,
    .failovers = 3,
    .safe_silent = TRUE,
    .safe_tokens = TRUE,
    .forced = 5,
    .cap_ms = 300000 },
  { .name = "quorum",
    .summary = "Quorum of three servers: each node restarted empty in turn, twice; a worker "
               "frozen past the TTL; five forced unlocks.",
    .history = TRUE,
    .topology = TOPOLOGY_QUORUM,
    .procs = 4,
    .registries = 2,
    .threads = 2,
    .names = 4,
    .ttl_ms = 1000,
    .wait_ms = 2000,
    .hold_us = 2000,
    .min_sections = 3000,
    .pauses = 1,
    .stop_ms = 2500,
    .failovers = 6,
    .safe_silent = TRUE,
    .forced = 5,
    .cap_ms = 300000 },
};

/* The hidden modes this program is run again in: a worker process of a scenario
 * (--worker) or the frozen-holder probe (--probe), with the options the controller
 * passed. */
static int
hidden_mode_main (WorkerOptions *opt, gboolean probe)
{
  int rc;

  if (probe)
    {
      if (opt->url == NULL || opt->socket_path == NULL || opt->stop_ttl_ms <= 0)
        {
          g_printerr ("stress: incomplete probe options\n");
          return 2;
        }
      rc = probe_main (opt);
      g_free (opt->url);
      g_free (opt->socket_path);
      return rc;
    }
  if (opt->url == NULL || (opt->socket_path == NULL && opt->history_path == NULL)
      || opt->progress_path == NULL || opt->registries <= 0 || opt->threads <= 0 || opt->names <= 0
      || opt->ttl_ms <= 0 || opt->max_ms <= 0)
    {
      g_printerr ("stress: incomplete worker options\n");
      return 2;
    }
  if (opt->stop_ttl_ms <= 0)
    opt->stop_ttl_ms = opt->ttl_ms;
  rc = worker_main (opt);
  g_free (opt->url);
  g_free (opt->socket_path);
  g_free (opt->progress_path);
  g_free (opt->history_path);
  return rc;
}

int
main (int argc, char **argv)
{
  gboolean long_profile = FALSE, jepsen = FALSE, worker = FALSE, probe = FALSE;
  WorkerOptions opt = { 0 };
  const GOptionEntry entries[] = {
    { "long", 0, 0, G_OPTION_ARG_NONE, &long_profile,
      "Run the long profile (>= 100 000 sections, every fault several times)", NULL },
    { "jepsen", 0, 0, G_OPTION_ARG_NONE, &jepsen,
      "Run the full fault-history profile (every topology, every fault several times)", NULL },
    { "worker", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_NONE, &worker, NULL, NULL },
    { "probe", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_NONE, &probe, NULL, NULL },
    { "index", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_INT, &opt.index, NULL, NULL },
    { "url", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_STRING, &opt.url, NULL, NULL },
    { "socket", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_FILENAME, &opt.socket_path, NULL, NULL },
    { "progress", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_FILENAME, &opt.progress_path, NULL, NULL },
    { "registries", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_INT, &opt.registries, NULL, NULL },
    { "threads", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_INT, &opt.threads, NULL, NULL },
    { "names", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_INT, &opt.names, NULL, NULL },
    { "ttl", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_INT64, &opt.ttl_ms, NULL, NULL },
    { "timeout", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_INT64, &opt.timeout_ms, NULL, NULL },
    { "wait", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_INT64, &opt.wait_ms, NULL, NULL },
    { "stop-ttl", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_INT64, &opt.stop_ttl_ms, NULL, NULL },
    { "stop-ms", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_INT64, &opt.stop_ms, NULL, NULL },
    { "max-ms", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_INT64, &opt.max_ms, NULL, NULL },
    { "use-lock", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_NONE, &opt.use_lock, NULL, NULL },
    { "history", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_FILENAME, &opt.history_path, NULL, NULL },
    { "quorum", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_NONE, &opt.quorum, NULL, NULL },
    { "fencing", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_NONE, &opt.fencing, NULL, NULL },
    { "min-replicas", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_INT, &opt.min_replicas, NULL, NULL },
    { "hold-us", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_INT64, &opt.hold_us, NULL, NULL },
    { "member", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_INT, &opt.member, NULL, NULL },
    { "permits", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_INT, &opt.permits, NULL, NULL },
    { NULL },
  };
  GOptionContext *context = g_option_context_new (NULL);
  g_autoptr (GError) error = NULL;
  const Scenario *scenarios;
  gsize n_scenarios;
  char **args = NULL;
  int rc;

  g_option_context_set_summary (context,
                                "Stress and fault harness for redislock. Without --long, "
                                "runs the quick profile; GLib test options (-p, --tap, -v) apply.");
  g_option_context_set_ignore_unknown_options (context, TRUE);
  g_option_context_add_main_entries (context, entries, NULL);
  if (!g_option_context_parse (context, &argc, &argv, &error))
    {
      g_printerr ("stress: %s\n", error->message);
      return 2;
    }
  g_option_context_free (context);

  if (probe || worker)
    return hidden_mode_main (&opt, probe);

  /* The controller writes to workers' pipes; a worker that died must not kill it. */
  signal (SIGPIPE, SIG_IGN);
  signal (SIGALRM, on_alarm);
  self_exe = g_file_read_link ("/proc/self/exe", NULL);
  if (self_exe == NULL)
    self_exe = g_strdup (argv[0]);

  /* The long profiles report every scenario and the summary table even when one fails. */
  if (long_profile || jepsen)
    {
      args = g_new0 (char *, argc + 2);
      memcpy (args, argv, sizeof (char *) * argc);
      args[argc++] = (char *)"--keep-going";
      argv = args;
    }
  g_test_init (&argc, &argv, NULL);
  summary_rows = g_ptr_array_new_with_free_func (row_free);
  if (!jepsen)
    {
      scenarios = long_profile ? long_scenarios : quick_scenarios;
      n_scenarios = long_profile ? G_N_ELEMENTS (long_scenarios) : G_N_ELEMENTS (quick_scenarios);
      for (gsize i = 0; i < n_scenarios; i++)
        {
          g_autofree char *path = g_strdup_printf ("/stress/%s/%s", long_profile ? "long" : "quick",
                                                   scenarios[i].name);
          g_test_add_data_func (path, &scenarios[i], run_scenario);
        }
      g_test_add_func (long_profile ? "/stress/long/frozen-holder-waiter"
                                    : "/stress/quick/frozen-holder-waiter",
                       test_frozen_holder_waiter);
      g_test_add_func (long_profile ? "/stress/long/killed-release-reply"
                                    : "/stress/quick/killed-release-reply",
                       test_killed_release_reply);
    }
  /* The history scenarios: the short profile with the quick one, the full one alone. */
  if (!long_profile)
    {
      scenarios = jepsen ? jepsen_full_scenarios : jepsen_short_scenarios;
      n_scenarios
          = jepsen ? G_N_ELEMENTS (jepsen_full_scenarios) : G_N_ELEMENTS (jepsen_short_scenarios);
      for (gsize i = 0; i < n_scenarios; i++)
        {
          g_autofree char *path = g_strdup_printf ("/stress/jepsen/%s/%s",
                                                   jepsen ? "full" : "short", scenarios[i].name);
          g_test_add_data_func (path, &scenarios[i], run_scenario);
        }
      for (gsize i = 0; jepsen && i < n_family_scenarios; i++)
        {
          g_autofree char *path
              = g_strdup_printf ("/stress/jepsen/full/%s", family_scenarios[i].name);
          g_test_add_data_func (path, &family_scenarios[i], run_scenario);
        }
    }
  rc = g_test_run ();
  print_summary (summary_rows, long_profile ? "long" : jepsen ? "jepsen" : "quick");
  print_history_summary (summary_rows, jepsen ? "full" : "short");
  g_ptr_array_unref (summary_rows);
  g_free (self_exe);
  g_free (args);
  return rc;
}
