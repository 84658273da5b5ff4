/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* section-processes.c: single-threaded processes contending on one name.
 *
 * The figure a deployment of many one-thread workers sees: PROCESSES_N copies of this
 * program (`--child=processes`, started with exec like the hand-off's child), each
 * taking the same lock over and over, and each critical section doing two Redis round
 * trips of its own on a plain hiredis connection (LLEN of a shared list, then RPUSH of
 * the process's number, which must make the list one longer: a section that overlaps
 * another shows as a wrong length). The list is the order in which the sections ran, so the fraction of
 * consecutive sections that changed process tells whether the lock is shared or one
 * process keeps it.
 *
 * The baseline is the same run with the protocol written by hand, in its cheapest form:
 * `SET NX PX`, on failure wait on a SUBSCRIBE connection (subscribed once, drained
 * before each attempt, so no release is missed) for the release script's PUBLISH, at
 * most 100 ms; release by the hand-made script (GET, UNLINK, PUBLISH). Both runs last
 * the same time, every process running until one shared end time, so all of them
 * contend until the end; the two alternate, rounds of each.
 *
 * Children are told the end time through their stdin and report their section count on
 * stdout; the counts are checked against the list. The section processes-scaling runs
 * the same with 2 to 64 processes and counts the server's commands per section.
 */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

#define PROCESSES_N 4
/* The most processes a run may have (processes-scaling). */
#define PROCESSES_MAX 64

/* A raw waiter sleeps on its subscription at most this long before trying again. */
#define PROCESSES_RAW_WAIT_MS 100

/* No word from a child for this long is a failure. */
#define PROCESSES_TIMEOUT_MS 20000

/* Reads exactly @len bytes of @fd within PROCESSES_TIMEOUT_MS. */
static gboolean
read_full (int fd, void *buf, gsize len, GError **error)
{
  gsize done = 0;

  while (done < len)
    {
      struct pollfd p = { fd, POLLIN, 0 };
      ssize_t n;
      int ready = poll (&p, 1, PROCESSES_TIMEOUT_MS);

      if (ready < 0 && errno == EINTR)
        continue;
      if (ready <= 0)
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_TIMED_OUT, "no word from a child for %d ms",
                       PROCESSES_TIMEOUT_MS);
          return FALSE;
        }
      n = read (fd, (char *)buf + done, len - done);
      if (n < 0 && (errno == EINTR || errno == EAGAIN))
        continue;
      if (n <= 0)
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_BROKEN_PIPE,
                       "a child went away (see its messages above)");
          return FALSE;
        }
      done += (gsize)n;
    }
  return TRUE;
}

static gboolean
write_full (int fd, const void *buf, gsize len, GError **error)
{
  ssize_t n;

  do
    n = write (fd, buf, len);
  while (n < 0 && errno == EINTR);
  if (n != (ssize_t)len)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_BROKEN_PIPE, "cannot write to a child");
      return FALSE;
    }
  return TRUE;
}

/* --- The child's side -------------------------------------------------------------- */

/* The critical section: LLEN, then RPUSH of @id, which must make the list one longer. */
static gboolean
critical_section (redisContext *c, const char *list, guint id, GError **error)
{
  redisReply *r = raw_command (c, error, "LLEN %s", list);
  long long before;
  gboolean ok;

  if (r == NULL)
    return FALSE;
  before = r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
  freeReplyObject (r);
  r = raw_command (c, error, "RPUSH %s %u", list, id);
  if (r == NULL)
    return FALSE;
  ok = r->type == REDIS_REPLY_INTEGER && r->integer == before + 1;
  freeReplyObject (r);
  if (!ok)
    g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED,
                 "two critical sections overlapped (the list changed under one)");
  return ok;
}

/* Reads every message the subscription @sub has for us, waiting up to @timeout_ms for
 * the first when there is none yet (0: does not wait). */
static gboolean
sub_drain (redisContext *sub, int timeout_ms, GError **error)
{
  for (;;)
    {
      void *reply = NULL;
      struct pollfd p = { sub->fd, POLLIN, 0 };
      int ready;

      if (redisGetReplyFromReader (sub, &reply) != REDIS_OK)
        goto fail;
      if (reply != NULL)
        {
          freeReplyObject (reply);
          timeout_ms = 0;
          continue;
        }
      ready = poll (&p, 1, timeout_ms);
      if (ready < 0 && errno == EINTR)
        continue;
      if (ready <= 0)
        return ready == 0;
      if (redisBufferRead (sub) != REDIS_OK)
        goto fail;
    }
fail:
  g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "redis: %s", sub->errstr);
  return FALSE;
}

/* The hand-made protocol until @end: SET NX PX, a wait for the release's PUBLISH on
 * failure, the section, the release script. */
static gboolean
raw_contend (RawConn *cmd, redisContext *sub, const char *key, const char *channel,
             const char *list, guint id, gint64 end, guint *sections, GError **error)
{
  g_autofree char *owner = g_strdup_printf ("raw-%u", id);
  redisReply *r;

  r = raw_command (sub, error, "SUBSCRIBE %s", channel);
  if (r == NULL)
    return FALSE;
  freeReplyObject (r);
  while (now_ns () < end)
    {
      gboolean taken;

      if (!sub_drain (sub, 0, error))
        return FALSE;
      r = raw_command (cmd->c, error, "SET %s %s NX PX 10000", key, owner);
      if (r == NULL)
        return FALSE;
      taken = r->type == REDIS_REPLY_STATUS;
      freeReplyObject (r);
      if (!taken)
        {
          if (!sub_drain (sub, PROCESSES_RAW_WAIT_MS, error))
            return FALSE;
          continue;
        }
      if (!critical_section (cmd->c, list, id, error))
        return FALSE;
      r = raw_command (cmd->c, error, "EVALSHA %s 1 %s %s %s", cmd->release_sha, key, owner,
                       channel);
      if (r == NULL)
        return FALSE;
      freeReplyObject (r);
      (*sections)++;
    }
  return TRUE;
}

/* The library until @end, with its defaults. */
static gboolean
lib_contend (RawConn *cmd, const char *name, const char *list, guint id, gint64 end,
             guint *sections, GError **error)
{
  const char *url = g_getenv ("REDISLOCK_BENCH_URL");
  const char *key = g_getenv ("REDISLOCK_BENCH_KEY");
  g_autoptr (RedisLockRegistry) registry = NULL;
  g_autoptr (RedisLock) lock = NULL;

  registry = redis_lock_registry_new (url != NULL && *url != '\0' ? url : NULL,
                                      key != NULL ? key : "", error);
  if (registry == NULL)
    return FALSE;
  bench_registry_settings (registry);
  lock = redis_lock_registry_obtain (registry, name, error);
  if (lock == NULL)
    return FALSE;
  while (now_ns () < end)
    {
      gboolean ok;

      if (!redis_lock_lock (lock, error))
        return FALSE;
      ok = critical_section (cmd->c, list, id, error);
      if (!redis_lock_unlock (lock, ok ? error : NULL) || !ok)
        return FALSE;
      (*sections)++;
    }
  return TRUE;
}

int
processes_child (const char *mode, const char *name, guint id, gint64 hold_us)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (RawConn) cmd = NULL;
  const char *url = g_getenv ("REDISLOCK_BENCH_URL");
  const char *key = g_getenv ("REDISLOCK_BENCH_KEY");
  g_autofree char *list = g_strdup_printf ("%s-%s-order", key, name);
  g_autofree char *raw_key = g_strdup_printf ("%s-raw:%s", key, name);
  g_autofree char *channel = g_strdup_printf ("%s-raw-channel:%s", key, name);
  redisContext *sub = NULL;
  int in_fd = dup (STDIN_FILENO), out_fd = dup (STDOUT_FILENO);
  guint sections = 0;
  gint64 end;
  RawTarget t;
  gboolean ok = FALSE;
  char ready = 'R';

  dup2 (STDERR_FILENO, STDOUT_FILENO);
  if (!raw_target_parse (url != NULL && *url != '\0' ? url : NULL, &t, &error))
    goto fail;
  cmd = raw_open (&t, &error);
  sub = cmd != NULL ? raw_connect (&t, &error) : NULL;
  if (sub != NULL && write_full (out_fd, &ready, 1, &error)
      && read_full (in_fd, &end, sizeof end, &error))
    ok = g_strcmp0 (mode, "contend-raw") == 0
             ? raw_contend (cmd, sub, raw_key, channel, list, id, end, &sections, &error)
             : lib_contend (cmd, name, list, id, end, &sections, &error);
  if (sub != NULL)
    redisFree (sub);
  raw_target_clear (&t);
  if (ok && write_full (out_fd, &sections, sizeof sections, &error))
    return 0;
fail:
  g_printerr ("redislock-bench --child=processes: %s\n", error->message);
  return 1;
}

/* --- The parent's side ------------------------------------------------------------- */

/* What one run measured. */
typedef struct
{
  double rate;    /* sections per second */
  double changes; /* fraction of consecutive sections run by different processes */
  double longest; /* the longest run of consecutive sections of one process */
  double least;   /* the fewest sections of one process, over the mean per process */
  double commands; /* server commands per section (INFO commandstats, commands run by
                      scripts included), the section's own two left out */
} ProcessesRun;

/* The calls of every command the server counted (INFO commandstats), -1 on failure. */
static gint64
server_commands (RawConn *raw)
{
  g_autoptr (GError) error = NULL;
  redisReply *r = raw_command (raw->c, &error, "INFO commandstats");
  gint64 total = 0;

  if (r == NULL || r->type != REDIS_REPLY_STRING)
    {
      if (r != NULL)
        freeReplyObject (r);
      return -1;
    }
  for (const char *p = strstr (r->str, "calls="); p != NULL; p = strstr (p + 1, "calls="))
    total += g_ascii_strtoll (p + strlen ("calls="), NULL, 10);
  freeReplyObject (r);
  return total;
}

/* One run: @procs children in @mode on @name for @ms; fills @out. */
static gboolean
processes_run (Bench *b, RawConn *raw, const char *mode, const char *name, gint64 ms,
               guint procs, ProcessesRun *out, GError **error)
{
  g_autofree char *list = g_strdup_printf ("%s-%s-order", b->key, name);
  GPid pid[PROCESSES_MAX];
  int to[PROCESSES_MAX], from[PROCESSES_MAX];
  guint counts[PROCESSES_MAX], i, n = 0, total = 0, changed = 0, run = 1, longest = 1, least;
  gboolean ok = TRUE;
  gint64 end, commands_before, commands_after;
  redisReply *r;

  g_assert (procs <= PROCESSES_MAX);
  for (i = 0; ok && i < procs; i++)
    {
      g_autofree char *mode_arg = g_strdup_printf ("--child-mode=%s", mode);
      g_autofree char *name_arg = g_strdup_printf ("--child-name=%s", name);
      g_autofree char *id_arg = g_strdup_printf ("--child-steps=%u", i);
      const char *argv[] = { b->self_path, "--child=processes", mode_arg, name_arg, id_arg, NULL };
      g_auto (GStrv) envp = g_get_environ ();

      envp = g_environ_setenv (envp, "REDISLOCK_BENCH_URL", b->url != NULL ? b->url : "", TRUE);
      envp = g_environ_setenv (envp, "REDISLOCK_BENCH_KEY", b->key, TRUE);
      ok = g_spawn_async_with_pipes (NULL, (char **)argv, envp, G_SPAWN_DO_NOT_REAP_CHILD, NULL,
                                     NULL, &pid[i], &to[i], &from[i], NULL, error);
      if (ok)
        n++;
    }
  for (i = 0; ok && i < n; i++)
    {
      char ready;

      ok = read_full (from[i], &ready, 1, error);
    }
  commands_before = server_commands (raw);
  end = now_ns () + ms * 1000000;
  for (i = 0; ok && i < n; i++)
    ok = write_full (to[i], &end, sizeof end, error);
  for (i = 0; ok && i < n; i++)
    {
      ok = read_full (from[i], &counts[i], sizeof counts[i], error);
      total += ok ? counts[i] : 0;
    }
  commands_after = server_commands (raw);
  for (i = 0; i < n; i++)
    {
      int status = 0;

      close (to[i]);
      close (from[i]);
      if (!ok)
        kill (pid[i], SIGKILL);
      while (waitpid (pid[i], &status, 0) < 0 && errno == EINTR)
        ;
      g_spawn_close_pid (pid[i]);
      if (ok && (!WIFEXITED (status) || WEXITSTATUS (status) != 0))
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "a child failed (status %d)", status);
          ok = FALSE;
        }
    }
  if (!ok)
    return FALSE;
  r = raw_command (raw->c, error, "LRANGE %s 0 -1", list);
  if (r == NULL)
    return FALSE;
  ok = r->type == REDIS_REPLY_ARRAY && r->elements == total && total > 1;
  for (i = 1; ok && i < r->elements; i++)
    {
      gboolean change = strcmp (r->element[i]->str, r->element[i - 1]->str) != 0;

      changed += change;
      run = change ? 1 : run + 1;
      longest = MAX (longest, run);
    }
  freeReplyObject (r);
  if (!ok)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED,
                   "the order list does not match the %u sections the children counted", total);
      return FALSE;
    }
  r = raw_command (raw->c, error, "DEL %s", list);
  if (r == NULL)
    return FALSE;
  freeReplyObject (r);
  least = counts[0];
  for (i = 1; i < n; i++)
    least = MIN (least, counts[i]);
  out->rate = total * 1000.0 / ms;
  out->changes = (double)changed / (total - 1);
  out->longest = longest;
  out->least = (double)least * n / total;
  /* Less the section's own LLEN and RPUSH, and this INFO. */
  out->commands = commands_before >= 0 && commands_after >= 0
                      ? (double) (commands_after - commands_before - 1) / total - 2
                      : NAN;
  return TRUE;
}

/* The median over @n runs of the figure at @offset in ProcessesRun. */
static double
median_of (const ProcessesRun *runs, guint n, glong offset)
{
  double v[3];

  g_assert (n <= G_N_ELEMENTS (v));
  for (guint k = 0; k < n; k++)
    v[k] = G_STRUCT_MEMBER (double, &runs[k], offset);
  return median (v, n);
}

void
section_processes (Bench *b, Section *s)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (RawConn) raw = NULL;
  guint rounds = b->quick ? 1 : 3, r;
  gint64 ms = b->quick ? 1000 : 2000;
  ProcessesRun lib[3], rawp[3];
  double lr, lc, rr, rc;

  raw = raw_open (&b->target, &error);
  if (raw == NULL)
    goto fail;
  for (r = 0; r < rounds; r++)
    if (!processes_run (b, raw, "contend-raw", "processes", ms, PROCESSES_N, &rawp[r], &error)
        || !processes_run (b, raw, "contend-lib", "processes", ms, PROCESSES_N, &lib[r], &error))
      goto fail;
  lr = median_of (lib, rounds, G_STRUCT_OFFSET (ProcessesRun, rate));
  lc = median_of (lib, rounds, G_STRUCT_OFFSET (ProcessesRun, changes));
  rr = median_of (rawp, rounds, G_STRUCT_OFFSET (ProcessesRun, rate));
  rc = median_of (rawp, rounds, G_STRUCT_OFFSET (ProcessesRun, changes));
  add_row (s, "sections/s", lr, "sections/s", 0, lr / rr, "raw protocol sections/s", ">= 0.8x",
           lr >= 0.8 * rr);
  add_row (s, "holder changes", 100 * lc, "%", 0, NAN, NULL, ">= 20 %", lc >= 0.2);
  add_row (s, "longest run of one process", median_of (lib, rounds, G_STRUCT_OFFSET (ProcessesRun, longest)), "sections", 0,
           median_of (lib, rounds, G_STRUCT_OFFSET (ProcessesRun, longest)) / median_of (rawp, rounds, G_STRUCT_OFFSET (ProcessesRun, longest)), "raw protocol's", NULL, FALSE);
  add_row (s, "least-served process", 100 * median_of (lib, rounds, G_STRUCT_OFFSET (ProcessesRun, least)), "% of the mean", 0, NAN,
           NULL, NULL, FALSE);
  add_row (s, "raw protocol sections/s (baseline)", rr, "sections/s", 0, 1.0,
           "raw protocol sections/s", NULL, FALSE);
  add_row (s, "raw protocol holder changes", 100 * rc, "%", 0, NAN, NULL, NULL, FALSE);
  add_row (s, "raw protocol longest run", median_of (rawp, rounds, G_STRUCT_OFFSET (ProcessesRun, longest)), "sections", 0, NAN, NULL,
           NULL, FALSE);
  add_row (s, "raw protocol least-served process", 100 * median_of (rawp, rounds, G_STRUCT_OFFSET (ProcessesRun, least)),
           "% of the mean", 0, NAN, NULL, NULL, FALSE);
  add_note (s,
            "%d single-threaded processes on one name for %" G_GINT64_FORMAT
            " ms, %u rounds of the raw protocol then the library (defaults); medians of the "
            "rounds; each section is LLEN + RPUSH on the process's own connection",
            PROCESSES_N, ms, rounds);
  add_note (s, "raw protocol: SET NX PX, on failure wait for the release's PUBLISH on a "
               "SUBSCRIBE connection (at most 100 ms), release by script (GET, UNLINK, PUBLISH)");
  add_note (s, "holder changes: consecutive sections (in the order of the shared list) run by "
               "different processes; longest run: the most consecutive sections of one "
               "process; least-served: the fewest sections of one process over the mean");
  return;

fail:
  add_na (s, "contending processes", "%s", error->message);
}

/* processes-scaling: the same runs with 2, 4, 16 and 64 processes, one run each of the
 * raw protocol and the library, counting the server's commands per section: with the
 * wait queue a hand-off costs the same whatever the number of waiting processes. */
void
section_processes_scaling (Bench *b, Section *s)
{
  static const guint counts[] = { 2, 4, 16, 64 };
  g_autoptr (GError) error = NULL;
  g_autoptr (RawConn) raw = NULL;
  gint64 ms = b->quick ? 1000 : 2000;
  ProcessesRun lib[G_N_ELEMENTS (counts)], rawp[G_N_ELEMENTS (counts)];

  raw = raw_open (&b->target, &error);
  if (raw == NULL)
    goto fail;
  for (guint k = 0; k < G_N_ELEMENTS (counts); k++)
    if (!processes_run (b, raw, "contend-raw", "scaling", ms, counts[k], &rawp[k], &error)
        || !processes_run (b, raw, "contend-lib", "scaling", ms, counts[k], &lib[k], &error))
      goto fail;
  for (guint k = 0; k < G_N_ELEMENTS (counts); k++)
    {
      g_autofree char *rate = g_strdup_printf ("P=%u sections/s", counts[k]);
      g_autofree char *cmds = g_strdup_printf ("P=%u server commands per section", counts[k]);
      g_autofree char *raw_rate = g_strdup_printf ("P=%u raw protocol sections/s", counts[k]);
      g_autofree char *raw_cmds
          = g_strdup_printf ("P=%u raw protocol server commands per section", counts[k]);
      const char *rate_target = counts[k] == 16 ? ">= 1.5x" : counts[k] == 4 ? ">= 0.8x" : NULL;
      double ratio = lib[k].rate / rawp[k].rate;

      add_row (s, rate, lib[k].rate, "sections/s", 0, ratio, "raw protocol's", rate_target,
               counts[k] == 16 ? ratio >= 1.5 : counts[k] == 4 ? ratio >= 0.8 : FALSE);
      add_row (s, cmds, lib[k].commands, "commands", 1, lib[k].commands / rawp[k].commands,
               "raw protocol's", "<= 8", lib[k].commands <= 8);
      add_row (s, raw_rate, rawp[k].rate, "sections/s", 0, NAN, NULL, NULL, FALSE);
      add_row (s, raw_cmds, rawp[k].commands, "commands", 1, NAN, NULL, NULL, FALSE);
    }
  add_row (s, "P=64 rate over P=4 rate", lib[3].rate / lib[1].rate, "x", 2, NAN, NULL, ">= 0.8x",
           lib[3].rate >= 0.8 * lib[1].rate);
  add_note (s,
            "P single-threaded processes on one name for %" G_GINT64_FORMAT
            " ms each, the raw protocol then the library (defaults, the wait queue on); each "
            "section is LLEN + RPUSH on the process's own connection; server commands per "
            "section: INFO commandstats calls (commands run by scripts included) over the "
            "run, less the section's own two",
            ms);
  add_note (s, "raw protocol: SET NX PX, on failure wait for the release's PUBLISH on a "
               "SUBSCRIBE connection (at most 100 ms), release by script (GET, UNLINK, PUBLISH)");
  return;

fail:
  add_na (s, "contending processes", "%s", error->message);
}
