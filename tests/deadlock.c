/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* deadlock.c: who waits for whom: deadlock detection across processes, registries and
 * threads (redis_lock_registry_set_deadlock_detection(), REDIS_LOCK_ERROR_DEADLOCK).
 *
 * A cycle is built for real: each party takes its first lock, all of them say so, and
 * only then does each wait for the next party's lock. Exactly one waiter must then
 * fail with DEADLOCK within two seconds of the start of its wait, its message naming
 * the locks, and every other one must get its lock once the victim let go of its own.
 * Parties are processes (this program run again in a hidden worker mode, talking over
 * pipes: "held" once it holds its first lock, "go" to start waiting, then one line
 * with the outcome), threads of one registry (the waits are for the local mutex), and
 * threads of two registries on one store (the waits are in the store, and each
 * record must list the lock its thread holds through the other registry), and a
 * thread waiting for a set of locks (redis_lock_try_lock_all()).
 *
 * The other half is that nothing else ever fails with DEADLOCK: processes and threads
 * taking random pairs of locks in one fixed order (no cycle can form) for several
 * seconds, with waits long enough for many checks; records that look like a cycle
 * while one of their leases has expired and gone to another acquisition; and a real
 * cycle with detection off, which ends in two plain timeouts. A waiter's record says
 * who waits for what (redis_lock_registry_list_waiters()), and goes when the waiter
 * gives up (timeout, cancel). Process tests need a Redis server; the in-process ones
 * run on every store that keeps records (all but the quorum). Cycles through read-write
 * locks are in deadlock-rw.c.
 */
#include "common.h"
#include "deadlock-rw.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char *self_exe;

/* How long a party waits for its second lock: far beyond detection (about 2 s), so a
 * timeout means detection failed. */
#define PARTY_WAIT_MS 10000
/* A wait this long was checked for cycles at least once. */
#define LONG_WAIT_MS 400
/* The detection bound of the contract. */
#define DETECT_MS 2000

/* --- Worker processes ------------------------------------------------------------ */

typedef struct
{
  GPid pid;
  int in_fd;  /* its stdin */
  int out_fd; /* its stdout */
  GString *buffer;
} Worker;

/* The worker mode: one party of a cycle (or of the stress run, with @pairs > 0). */
typedef struct
{
  char *url;
  char *first;
  char *second;
  gint pairs;   /* stress: this many random pairs, in order, per thread */
  gint threads; /* stress: threads */
  gint names;   /* stress: lock names */
} WorkerOptions;

static void
worker_say (const char *format, ...) G_GNUC_PRINTF (1, 2);

static void
worker_say (const char *format, ...)
{
  va_list args;

  va_start (args, format);
  vprintf (format, args);
  va_end (args);
  putchar ('\n');
  fflush (stdout);
}

/* Takes @first, says "held", waits for "go", waits for @second, says how that ended:
 * "acquired MS", "timeout MS" or "error CODE MS MESSAGE"; lets go of everything. */
static int
worker_cycle (const WorkerOptions *opt)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (RedisLockRegistry) registry = redis_lock_registry_new (opt->url, TEST_REGISTRY_KEY, &error);
  g_autoptr (RedisLock) first = NULL, second = NULL;
  char line[64];
  gint64 start;
  gboolean ok;

  if (registry == NULL)
    return 2;
  first = redis_lock_registry_obtain (registry, opt->first, NULL);
  second = redis_lock_registry_obtain (registry, opt->second, NULL);
  if (first == NULL || second == NULL || !redis_lock_lock (first, NULL))
    return 3;
  worker_say ("held");
  if (fgets (line, sizeof line, stdin) == NULL)
    return 4;
  start = test_now_ms ();
  ok = redis_lock_try_lock_for (second, PARTY_WAIT_MS, NULL, &error);
  if (ok)
    {
      worker_say ("acquired %" G_GINT64_FORMAT, test_now_ms () - start);
      redis_lock_unlock (second, NULL);
    }
  else if (error != NULL)
    worker_say ("error %d %" G_GINT64_FORMAT " %s", error->code, test_now_ms () - start,
                error->message);
  else
    worker_say ("timeout %" G_GINT64_FORMAT, test_now_ms () - start);
  redis_lock_unlock (first, NULL);
  return 0;
}

typedef struct
{
  RedisLockRegistry *registry;
  const WorkerOptions *opt;
  gint deadlocks;  /* atomic */
  gint failures;   /* atomic: other errors and timeouts */
  gint long_waits; /* atomic: waits long enough for two checks */
} StressRun;

/* Random pairs i < j, taken in that order: no cycle of waits can form. */
static void
stress_thread (guint index, gpointer data)
{
  StressRun *run = data;
  g_autoptr (GRand) rand = g_rand_new_with_seed ((guint32) (getpid () * 31 + index));

  for (gint n = 0; n < run->opt->pairs; n++)
    {
      guint a = (guint) g_rand_int_range (rand, 0, run->opt->names - 1);
      guint b = (guint) g_rand_int_range (rand, (gint32) a + 1, run->opt->names);
      g_autofree char *name_a = g_strdup_printf ("s%u", a);
      g_autofree char *name_b = g_strdup_printf ("s%u", b);
      g_autoptr (RedisLock) la = redis_lock_registry_obtain (run->registry, name_a, NULL);
      g_autoptr (RedisLock) lb = redis_lock_registry_obtain (run->registry, name_b, NULL);
      g_autoptr (GError) error = NULL;
      gint64 start;

      start = test_now_ms ();
      if (!redis_lock_try_lock_for (la, PARTY_WAIT_MS, NULL, &error))
        {
          g_atomic_int_inc (error != NULL && error->code == REDIS_LOCK_ERROR_DEADLOCK
                                ? &run->deadlocks
                                : &run->failures);
          continue;
        }
      if (test_now_ms () - start > LONG_WAIT_MS)
        g_atomic_int_inc (&run->long_waits);
      start = test_now_ms ();
      if (redis_lock_try_lock_for (lb, PARTY_WAIT_MS, NULL, &error))
        {
          if (test_now_ms () - start > LONG_WAIT_MS)
            g_atomic_int_inc (&run->long_waits);
          /* The critical section's work, so that others wait long enough to check. */
          g_usleep (g_rand_int_range (rand, 40, 140) * 1000);
          redis_lock_unlock (lb, NULL);
        }
      else
        g_atomic_int_inc (error != NULL && error->code == REDIS_LOCK_ERROR_DEADLOCK
                              ? &run->deadlocks
                              : &run->failures);
      redis_lock_unlock (la, NULL);
    }
}

/* Says "held", waits for "go", runs the stress threads, says
 * "done DEADLOCKS FAILURES LONG_WAITS". */
static int
worker_stress (const WorkerOptions *opt)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (RedisLockRegistry) registry = redis_lock_registry_new (opt->url, TEST_REGISTRY_KEY, &error);
  StressRun run = { registry, opt, 0, 0, 0 };
  char line[64];

  if (registry == NULL)
    return 2;
  worker_say ("held");
  if (fgets (line, sizeof line, stdin) == NULL)
    return 4;
  test_run_threads ((guint) opt->threads, stress_thread, &run);
  worker_say ("done %d %d %d", run.deadlocks, run.failures, run.long_waits);
  return 0;
}

static Worker *
worker_spawn (const char *url, const char *first, const char *second, gint pairs, gint threads,
              gint names)
{
  g_autoptr (GPtrArray) argv = g_ptr_array_new_with_free_func (g_free);
  g_autoptr (GError) error = NULL;
  Worker *w = g_new0 (Worker, 1);

  g_ptr_array_add (argv, g_strdup (self_exe));
  g_ptr_array_add (argv, g_strdup ("--worker"));
  g_ptr_array_add (argv, g_strdup_printf ("--url=%s", url));
  if (first != NULL)
    {
      g_ptr_array_add (argv, g_strdup_printf ("--first=%s", first));
      g_ptr_array_add (argv, g_strdup_printf ("--second=%s", second));
    }
  g_ptr_array_add (argv, g_strdup_printf ("--pairs=%d", pairs));
  g_ptr_array_add (argv, g_strdup_printf ("--threads=%d", threads));
  g_ptr_array_add (argv, g_strdup_printf ("--names=%d", names));
  g_ptr_array_add (argv, NULL);
  g_assert_true (g_spawn_async_with_pipes (NULL, (char **) argv->pdata, NULL,
                                           G_SPAWN_DO_NOT_REAP_CHILD, NULL, NULL, &w->pid,
                                           &w->in_fd, &w->out_fd, NULL, &error));
  g_assert_no_error (error);
  w->buffer = g_string_new (NULL);
  return w;
}

/* The worker's next line (without the newline), waiting up to @timeout_ms. */
static char *
worker_read_line (Worker *w, gint64 timeout_ms)
{
  gint64 end = test_now_ms () + timeout_ms;

  for (;;)
    {
      char *nl = memchr (w->buffer->str, '\n', w->buffer->len);
      struct pollfd pfd = { w->out_fd, POLLIN, 0 };
      char chunk[512];
      gssize n;

      if (nl != NULL)
        {
          char *line = g_strndup (w->buffer->str, (gsize) (nl - w->buffer->str));
          g_string_erase (w->buffer, 0, nl - w->buffer->str + 1);
          return line;
        }
      if (test_now_ms () >= end)
        g_error ("worker %d said nothing for %" G_GINT64_FORMAT " ms", (int) w->pid, timeout_ms);
      if (poll (&pfd, 1, (int) MAX (end - test_now_ms (), 1)) <= 0)
        continue;
      n = read (w->out_fd, chunk, sizeof chunk);
      if (n <= 0)
        g_error ("worker %d ended its output", (int) w->pid);
      g_string_append_len (w->buffer, chunk, n);
    }
}

static void
worker_tell (Worker *w, const char *line)
{
  g_autofree char *text = g_strconcat (line, "\n", NULL);
  g_assert_cmpint (write (w->in_fd, text, strlen (text)), ==, (gssize) strlen (text));
}

/* Waits until each of the @n @workers holds what it holds first ("held"), then has
 * them all go on at once. */
static void
workers_start (Worker **workers, guint n)
{
  for (guint i = 0; i < n; i++)
    {
      g_autofree char *line = worker_read_line (workers[i], 20000);
      g_assert_cmpstr (line, ==, "held");
    }
  for (guint i = 0; i < n; i++)
    worker_tell (workers[i], "go");
}

/* Reaps the worker, asserting that it exited with 0. */
static void
worker_finish (Worker *w)
{
  int status = 0;
  pid_t r;

  do
    r = waitpid (w->pid, &status, 0);
  while (r < 0 && errno == EINTR);
  g_assert_cmpint (r, ==, w->pid);
  g_assert_true (WIFEXITED (status));
  g_assert_cmpint (WEXITSTATUS (status), ==, 0);
  g_spawn_close_pid (w->pid);
  close (w->in_fd);
  close (w->out_fd);
  g_string_free (w->buffer, TRUE);
  g_free (w);
}

/* --- Outcomes of one cycle --------------------------------------------------------- */

typedef struct
{
  guint deadlocks;
  guint acquired;
  gint64 victim_ms; /* how long the victim waited */
  char *message;    /* the victim's */
} CycleOutcome;

static void
outcome_add (CycleOutcome *out, gboolean acquired, const GError *error, gint64 waited_ms)
{
  if (acquired)
    out->acquired++;
  else if (error != NULL && g_error_matches (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_DEADLOCK))
    {
      out->deadlocks++;
      out->victim_ms = waited_ms;
      g_free (out->message);
      out->message = g_strdup (error->message);
    }
  else
    g_error ("a party of the cycle neither got its lock nor failed with DEADLOCK: %s",
             error != NULL ? error->message : "timeout");
}

/* Exactly one victim, within the bound, its message naming every lock of the cycle;
 * everybody else got their lock. */
static void
outcome_check (CycleOutcome *out, guint parties, const char *const *names)
{
  g_test_message ("victim after %" G_GINT64_FORMAT " ms: %s", out->victim_ms, out->message);
  g_assert_cmpuint (out->deadlocks, ==, 1);
  g_assert_cmpuint (out->acquired, ==, parties - 1);
  g_assert_cmpint (out->victim_ms, <=, DETECT_MS);
  for (guint i = 0; i < parties; i++)
    {
      g_autofree char *quoted = g_strdup_printf ("“%s”", names[i]);
      g_assert_nonnull (strstr (out->message, quoted));
    }
  g_clear_pointer (&out->message, g_free);
}

/* --- Processes ---------------------------------------------------------------------- */

/* @n processes in a cycle of @n locks: party i holds lock i and waits for lock i + 1. */
static void
run_process_cycle (TestFixture *fx, guint n)
{
  const char *names[] = { "ring-a", "ring-b", "ring-c", "ring-d" };
  Worker *workers[G_N_ELEMENTS (names)];
  CycleOutcome out = { 0 };

  g_assert_cmpuint (n, <=, G_N_ELEMENTS (names));
  for (guint i = 0; i < n; i++)
    workers[i] = worker_spawn (fx->url, names[i], names[(i + 1) % n], 0, 0, 0);
  workers_start (workers, n);
  for (guint i = 0; i < n; i++)
    {
      g_autofree char *line = worker_read_line (workers[i], PARTY_WAIT_MS + 10000);
      g_auto (GStrv) words = g_strsplit (line, " ", 4);

      if (g_str_equal (words[0], "acquired"))
        outcome_add (&out, TRUE, NULL, 0);
      else if (g_str_equal (words[0], "error"))
        {
          g_autoptr (GError) error
              = g_error_new_literal (REDIS_LOCK_ERROR, (gint) g_ascii_strtoll (words[1], NULL, 10),
                                     words[3] != NULL ? words[3] : "");
          outcome_add (&out, FALSE, error, g_ascii_strtoll (words[2], NULL, 10));
        }
      else
        outcome_add (&out, FALSE, NULL, 0);
      worker_finish (workers[i]);
    }
  outcome_check (&out, n, names);
}

static void
test_two_processes (TestFixture *fx, gconstpointer data)
{
  TEST_SKIP_IF_NO_STORE (fx);
  g_test_summary ("Two processes, each holding the lock the other waits for: exactly one "
                  "fails with DEADLOCK within 2 s, naming both locks, and the other gets "
                  "its lock");
  run_process_cycle (fx, 2);
}

static void
test_three_processes (TestFixture *fx, gconstpointer data)
{
  TEST_SKIP_IF_NO_STORE (fx);
  g_test_summary ("Three processes in a cycle of three locks: exactly one fails with "
                  "DEADLOCK within 2 s, the other two get their locks");
  run_process_cycle (fx, 3);
}

static void
test_process_stress (TestFixture *fx, gconstpointer data)
{
  enum { PROCESSES = 3, THREADS = 3, NAMES = 3, PAIRS = 12 };
  Worker *workers[PROCESSES];
  guint deadlocks = 0, failures = 0, long_waits = 0;

  TEST_SKIP_IF_NO_STORE (fx);
  g_test_summary ("Processes and threads taking random pairs of locks, always in the same "
                  "order, with waits long enough to be checked many times: no DEADLOCK, "
                  "since no cycle can form");
  for (guint i = 0; i < PROCESSES; i++)
    workers[i] = worker_spawn (fx->url, NULL, NULL, PAIRS, THREADS, NAMES);
  workers_start (workers, PROCESSES);
  for (guint i = 0; i < PROCESSES; i++)
    {
      g_autofree char *line = worker_read_line (workers[i], 60000);
      guint d, f, l;

      g_assert_cmpint (sscanf (line, "done %u %u %u", &d, &f, &l), ==, 3);
      deadlocks += d;
      failures += f;
      long_waits += l;
      worker_finish (workers[i]);
    }
  g_test_message ("%u waits were long enough to be checked", long_waits);
  g_assert_cmpuint (deadlocks, ==, 0);
  g_assert_cmpuint (failures, ==, 0);
  /* The checks ran: otherwise the test could not fail. */
  g_assert_cmpuint (long_waits, >, 0);
}

/* --- Threads of one process ------------------------------------------------------------ */

/* Counts the calling thread in *@count and waits until @n threads are. */
static void
barrier_pass (TestSync *sync, guint *count, guint n)
{
  test_sync_lock (sync);
  (*count)++;
  test_sync_broadcast (sync);
  while (*count < n)
    test_sync_wait (sync);
  test_sync_unlock (sync);
}

typedef struct
{
  RedisLock *first[2];  /* party i takes first[i]… */
  RedisLock *second[2]; /* …then waits for second[i] */
  gint64 wait_ms;
  gboolean hold_on; /* parties keep their first lock until both have returned */
  TestSync sync;
  guint holding;  /* parties holding their first lock */
  guint returned; /* parties back from waiting for their second */
  gboolean acquired[2];
  GError *error[2];
  gint64 waited_ms[2];
} ThreadCycle;

static void
thread_party (guint i, gpointer data)
{
  ThreadCycle *c = data;
  gint64 start;

  g_assert_true (redis_lock_lock (c->first[i], NULL));
  barrier_pass (&c->sync, &c->holding, 2);
  start = test_now_ms ();
  c->acquired[i] = redis_lock_try_lock_for (c->second[i], c->wait_ms, NULL, &c->error[i]);
  c->waited_ms[i] = test_now_ms () - start;
  barrier_pass (&c->sync, &c->returned, c->hold_on ? 2 : 0);
  if (c->acquired[i])
    g_assert_true (redis_lock_unlock (c->second[i], NULL));
  g_assert_true (redis_lock_unlock (c->first[i], NULL));
}

/* Two threads in a cycle over @r0's lock a / b (party 0) and @r1's b / a (party 1);
 * with @hold_on, neither lets go of its first lock before both returned. */
static void
run_thread_cycle (RedisLockRegistry *r0, RedisLockRegistry *r1, gint64 wait_ms,
                  gboolean hold_on, ThreadCycle *c)
{
  memset (c, 0, sizeof *c);
  c->hold_on = hold_on;
  c->first[0] = test_obtain (r0, "x-a");
  c->second[0] = test_obtain (r0, "x-b");
  c->first[1] = test_obtain (r1, "x-b");
  c->second[1] = test_obtain (r1, "x-a");
  c->wait_ms = wait_ms;
  test_sync_init (&c->sync);
  test_run_threads (2, thread_party, c);
  test_sync_clear (&c->sync);
  for (guint i = 0; i < 2; i++)
    {
      redis_lock_unref (c->first[i]);
      redis_lock_unref (c->second[i]);
    }
}

static void
check_thread_cycle (ThreadCycle *c)
{
  const char *names[] = { "x-a", "x-b" };
  CycleOutcome out = { 0 };

  for (guint i = 0; i < 2; i++)
    {
      outcome_add (&out, c->acquired[i], c->error[i], c->waited_ms[i]);
      g_clear_error (&c->error[i]);
    }
  outcome_check (&out, 2, names);
}

static void
test_two_threads (TestFixture *fx, gconstpointer data)
{
  ThreadCycle c;

  TEST_SKIP_IF_NO_STORE (fx);
  g_test_summary ("Two threads of one registry, each holding the lock the other waits for "
                  "(waits for the local mutex): exactly one fails with DEADLOCK within 2 s");
  run_thread_cycle (fx->registry, fx->registry, PARTY_WAIT_MS, FALSE, &c);
  check_thread_cycle (&c);
}

static void
test_two_registries (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) r0 = test_registry_new (fx);
  g_autoptr (RedisLockRegistry) r1 = test_registry_new (fx);
  ThreadCycle c;

  TEST_SKIP_IF_NO_STORE (fx);
  g_test_summary ("Two registries of one process on one store, each thread holding the lock "
                  "the other waits for in the store: exactly one fails with DEADLOCK");
  run_thread_cycle (r0, r1, PARTY_WAIT_MS, FALSE, &c);
  check_thread_cycle (&c);
}

static void
test_sentinel_two_registries (void)
{
  g_autoptr (RedisLockTestSentinel) s = redis_lock_test_sentinel_new_or_skip (1, 1);
  g_autoptr (RedisLockRegistry) r0 = NULL;
  g_autoptr (RedisLockRegistry) r1 = NULL;
  ThreadCycle c;

  g_test_summary ("On a Sentinel deployment (the records in the master's hash), two "
                  "registries in a cycle of two locks: exactly one fails with DEADLOCK");
  if (s == NULL)
    return;
  r0 = test_registry_new_on (redis_lock_test_sentinel_get_url (s));
  r1 = test_registry_new_on (redis_lock_test_sentinel_get_url (s));
  run_thread_cycle (r0, r1, PARTY_WAIT_MS, FALSE, &c);
  check_thread_cycle (&c);
}

static void
test_detection_off (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) r0 = test_registry_new (fx);
  g_autoptr (RedisLockRegistry) r1 = test_registry_new (fx);
  g_autofree char *waits_key = g_strdup ("waits:{" TEST_REGISTRY_KEY "}");
  ThreadCycle c;

  TEST_SKIP_IF_NO_STORE (fx);
  g_test_summary ("With detection off, a real cycle ends in two plain timeouts: no DEADLOCK "
                  "and no record");
  redis_lock_registry_set_deadlock_detection (r0, FALSE);
  redis_lock_registry_set_deadlock_detection (r1, FALSE);
  run_thread_cycle (r0, r1, 2500, TRUE, &c);
  for (guint i = 0; i < 2; i++)
    {
      g_assert_false (c.acquired[i]);
      g_assert_no_error (c.error[i]);
      g_assert_cmpint (c.waited_ms[i], >=, 2500);
    }
  g_assert_false (test_store_exists (fx, waits_key));
}

/* --- A set of locks ------------------------------------------------------------------------ */

typedef struct
{
  RedisLock *set[2]; /* party 0 (registry 0): waits for the set {x, w} … */
  RedisLock *z0;     /* … holding z */
  RedisLock *x1;     /* party 1 (registry 1): holds x … */
  RedisLock *z1;     /* … and waits for z */
  TestSync sync;
  guint holding;
  gboolean acquired[2];
  GError *error[2];
  gint64 waited_ms[2];
} SetCycle;

static void
set_party (guint i, gpointer data)
{
  SetCycle *c = data;
  gint64 start;

  g_assert_true (redis_lock_lock (i == 0 ? c->z0 : c->x1, NULL));
  barrier_pass (&c->sync, &c->holding, 2);
  start = test_now_ms ();
  if (i == 0)
    {
      c->acquired[0] = redis_lock_try_lock_all (c->set, 2, PARTY_WAIT_MS, NULL, &c->error[0]);
      c->waited_ms[0] = test_now_ms () - start;
      if (c->acquired[0])
        g_assert_true (redis_lock_unlock_all (c->set, 2, NULL));
      g_assert_true (redis_lock_unlock (c->z0, NULL));
    }
  else
    {
      c->acquired[1] = redis_lock_try_lock_for (c->z1, PARTY_WAIT_MS, NULL, &c->error[1]);
      c->waited_ms[1] = test_now_ms () - start;
      if (c->acquired[1])
        g_assert_true (redis_lock_unlock (c->z1, NULL));
      g_assert_true (redis_lock_unlock (c->x1, NULL));
    }
}

static void
test_lock_set (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) r0 = test_registry_new (fx);
  g_autoptr (RedisLockRegistry) r1 = test_registry_new (fx);
  const char *names[] = { "set-x", "set-z" };
  CycleOutcome out = { 0 };
  SetCycle c = { 0 };

  TEST_SKIP_IF_NO_STORE (fx);
  g_test_summary ("A thread holding z waits for the set {x, w} (redis_lock_try_lock_all()) "
                  "while another holds x and waits for z: exactly one fails with DEADLOCK");
  c.set[0] = test_obtain (r0, "set-x");
  c.set[1] = test_obtain (r0, "set-w");
  c.z0 = test_obtain (r0, "set-z");
  c.x1 = test_obtain (r1, "set-x");
  c.z1 = test_obtain (r1, "set-z");
  test_sync_init (&c.sync);
  test_run_threads (2, set_party, &c);
  test_sync_clear (&c.sync);
  for (guint i = 0; i < 2; i++)
    {
      outcome_add (&out, c.acquired[i], c.error[i], c.waited_ms[i]);
      g_clear_error (&c.error[i]);
    }
  outcome_check (&out, 2, names);
  redis_lock_unref (c.set[0]);
  redis_lock_unref (c.set[1]);
  redis_lock_unref (c.z0);
  redis_lock_unref (c.x1);
  redis_lock_unref (c.z1);
}

/* --- A stale record --------------------------------------------------------------------- */

typedef struct
{
  RedisLock *a_x, *a_y, *b_x, *b_y;
  TestSync sync;
  gboolean b_holds, go_b;
  gboolean a_acquired, b_acquired;
  GError *a_error, *b_error;
  gint64 b_waited_ms;
} Stale;

/* A: takes x with a short lease that nothing renews, then waits for y. */
static gpointer
stale_a (gpointer data)
{
  Stale *s = data;

  g_assert_true (redis_lock_try_lock_full (s->a_x, -1, 800, NULL, NULL));
  s->a_acquired = redis_lock_try_lock_for (s->a_y, PARTY_WAIT_MS, NULL, &s->a_error);
  if (s->a_acquired)
    redis_lock_unlock (s->a_y, NULL);
  redis_lock_unlock (s->a_x, NULL); /* LEASE_LOST: it expired */
  return NULL;
}

/* B: holds y; on "go", waits for x. */
static gpointer
stale_b (gpointer data)
{
  Stale *s = data;
  gint64 start;

  g_assert_true (redis_lock_lock (s->b_y, NULL));
  test_sync_lock (&s->sync);
  s->b_holds = TRUE;
  test_sync_broadcast (&s->sync);
  while (!s->go_b)
    test_sync_wait (&s->sync);
  test_sync_unlock (&s->sync);
  start = test_now_ms ();
  s->b_acquired = redis_lock_try_lock_for (s->b_x, 2000, NULL, &s->b_error);
  s->b_waited_ms = test_now_ms () - start;
  if (s->b_acquired)
    redis_lock_unlock (s->b_x, NULL);
  g_assert_true (redis_lock_unlock (s->b_y, NULL));
  return NULL;
}

static guint
count_waiters (RedisLockRegistry *registry)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (GPtrArray) waiters = redis_lock_registry_list_waiters (registry, &error);

  g_assert_no_error (error);
  return waiters->len;
}

static void
test_stale_holder (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) ra = test_registry_new (fx);
  g_autoptr (RedisLockRegistry) rb = test_registry_new (fx);
  g_autoptr (RedisLockRegistry) rc = test_registry_new (fx);
  g_autoptr (RedisLock) c_x = test_obtain (rc, "st-x");
  g_autofree char *x_key = test_lock_key ("st-x");
  Stale s = { 0 };
  GThread *a, *b;

  TEST_SKIP_IF_NO_STORE (fx);
  g_test_summary ("The records look like a cycle (A claims x and waits for y, B holds y and "
                  "waits for x), but A's lease of x expired and another acquisition holds x: "
                  "the key's value says so, and nobody fails with DEADLOCK");
  redis_lock_registry_set_watchdog (ra, FALSE);
  s.a_x = test_obtain (ra, "st-x");
  s.a_y = test_obtain (ra, "st-y");
  s.b_x = test_obtain (rb, "st-x");
  s.b_y = test_obtain (rb, "st-y");
  test_sync_init (&s.sync);
  b = g_thread_new ("stale-b", stale_b, &s);
  g_assert_true (test_sync_wait_flag (&s.sync, &s.b_holds, 10000));
  a = g_thread_new ("stale-a", stale_a, &s);
  /* A waits for y, with its record claiming x… */
  TEST_WAIT_UNTIL (count_waiters (fx->registry) == 1, 10000);
  /* …which expires and goes to C. */
  TEST_WAIT_UNTIL (!test_store_exists (fx, x_key), 10000);
  g_assert_true (redis_lock_lock (c_x, NULL));
  test_sync_lock (&s.sync);
  s.go_b = TRUE;
  test_sync_broadcast (&s.sync);
  test_sync_unlock (&s.sync);
  g_thread_join (b);
  g_assert_no_error (s.b_error);
  g_assert_false (s.b_acquired);
  g_assert_cmpint (s.b_waited_ms, >=, 2000);
  g_assert_true (redis_lock_unlock (c_x, NULL));
  g_thread_join (a);
  g_assert_no_error (s.a_error);
  g_assert_true (s.a_acquired);
  test_sync_clear (&s.sync);
  redis_lock_unref (s.a_x);
  redis_lock_unref (s.a_y);
  redis_lock_unref (s.b_x);
  redis_lock_unref (s.b_y);
}

/* --- Records -------------------------------------------------------------------------- */

typedef struct
{
  RedisLock *lock;
  GCancellable *cancellable;
  gboolean acquired;
  GError *error;
} GiveUp;

static gpointer
give_up_thread (gpointer data)
{
  GiveUp *g = data;

  g->acquired = redis_lock_try_lock_for (g->lock, g->cancellable != NULL ? -1 : 1500,
                                         g->cancellable, &g->error);
  return NULL;
}

/* A waiter of another registry than the holder's gives up (a timeout, or with
 * @cancel, cancelled once its record is there): the record goes with it. */
static void
run_give_up (TestFixture *fx, gboolean cancel)
{
  g_autoptr (RedisLockRegistry) waiter_registry = test_registry_new (fx);
  g_autoptr (RedisLock) held = test_obtain (fx->registry, "given-up");
  g_autoptr (GCancellable) cancellable = cancel ? g_cancellable_new () : NULL;
  g_autoptr (GPtrArray) waiters = NULL;
  RedisLockWaiterInfo *info;
  GiveUp g = { test_obtain (waiter_registry, "given-up"), cancellable, FALSE, NULL };
  gint64 before = g_get_real_time ();
  GThread *thread;

  g_assert_true (redis_lock_lock (held, NULL));
  thread = g_thread_new ("give-up", give_up_thread, &g);
  /* The record appears after the first check, and says who waits for what… */
  TEST_WAIT_UNTIL (count_waiters (fx->registry) == 1, 5000);
  waiters = redis_lock_registry_list_waiters (fx->registry, NULL);
  info = g_ptr_array_index (waiters, 0);
  g_assert_cmpstr (info->name, ==, "given-up");
  g_assert_cmpstr (info->host, ==, g_get_host_name ());
  g_assert_cmpint (info->pid, ==, getpid ());
  g_assert_true (g_str_has_prefix (info->waiter, redis_lock_registry_get_client_id (waiter_registry)));
  g_assert_cmpint (info->since_us, >=, before - 1000);
  g_assert_cmpint (info->since_us, <=, g_get_real_time ());
  if (cancel)
    g_cancellable_cancel (cancellable);
  g_thread_join (thread);
  g_assert_false (g.acquired);
  if (cancel)
    g_assert_error (g.error, G_IO_ERROR, G_IO_ERROR_CANCELLED);
  else
    g_assert_no_error (g.error);
  g_clear_error (&g.error);
  /* …and is gone as soon as the wait ended, long before it would expire. */
  g_assert_cmpuint (count_waiters (fx->registry), ==, 0);
  g_assert_false (test_store_exists (fx, "waits:{" TEST_REGISTRY_KEY "}"));
  g_assert_true (redis_lock_unlock (held, NULL));
  redis_lock_unref (g.lock);
}

static void
test_record_timeout (TestFixture *fx, gconstpointer data)
{
  TEST_SKIP_IF_NO_STORE (fx);
  g_test_summary ("A waiter that times out deletes its waits-for record");
  run_give_up (fx, FALSE);
}

static void
test_record_cancel (TestFixture *fx, gconstpointer data)
{
  TEST_SKIP_IF_NO_STORE (fx);
  g_test_summary ("A waiter that is cancelled deletes its waits-for record");
  run_give_up (fx, TRUE);
}

/* How long the waiter of a frozen store waits; its store's command timeout is five
 * times that, so that a request held for the command timeout shows. */
#define FROZEN_WAIT_MS 1000

typedef struct
{
  RedisLock *lock;
  gboolean acquired;
  GError *error;
  gint64 took_ms;
} FrozenWait;

static gpointer
frozen_wait_thread (gpointer data)
{
  FrozenWait *w = data;
  gint64 start = g_get_monotonic_time ();

  w->acquired = redis_lock_try_lock_for (w->lock, FROZEN_WAIT_MS, NULL, &w->error);
  w->took_ms = (g_get_monotonic_time () - start) / 1000;
  return NULL;
}

static gboolean
contended (RedisLockRegistry *registry)
{
  RedisLockRegistryStats stats;

  redis_lock_registry_get_stats (registry, &stats);
  return stats.contended_attempts >= 1;
}

/* The server freezes while a waiter sleeps (its first attempt found the lock held, its
 * first check comes RL_WAITS_FIRST_CHECK_MS into the wait): the check, and the deletion
 * of its record when the wait ends, are cut short with the wait, as its attempts are,
 * instead of holding the caller for the command timeout each. */
static void
test_record_frozen_store (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) waiter_registry = test_registry_new (fx);
  g_autoptr (RedisLock) held = test_obtain (fx->registry, "frozen");
  FrozenWait w = { test_obtain (waiter_registry, "frozen"), FALSE, NULL, 0 };
  GThread *thread;

  g_test_summary ("A waiter whose server freezes returns within its wait: the deadlock check "
                  "and the deletion of its record end with the wait");
  redis_lock_registry_set_command_timeout_ms (waiter_registry, 5 * FROZEN_WAIT_MS);
  g_assert_true (redis_lock_lock (held, NULL));
  thread = g_thread_new ("frozen-wait", frozen_wait_thread, &w);
  TEST_WAIT_UNTIL (contended (waiter_registry), 5000);
  redis_lock_test_server_pause (fx->server);
  g_thread_join (thread);
  redis_lock_test_server_resume (fx->server);
  g_assert_false (w.acquired);
  if (w.error != NULL)
    g_assert_error (w.error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION);
  g_clear_error (&w.error);
  g_assert_cmpint (w.took_ms, <, 2 * FROZEN_WAIT_MS);
  g_assert_true (redis_lock_unlock (held, NULL));
  redis_lock_unref (w.lock);
}

/* --- main ------------------------------------------------------------------------------ */

/* The stores that keep records: every one but the quorum. */
static void
add_stores (const char *path, TestFixtureFunc func)
{
  test_add_stores_but_quorum (path, NULL, func);
}

int
main (int argc, char **argv)
{
  gboolean worker = FALSE;
  WorkerOptions opt = { 0 };
  const GOptionEntry entries[] = {
    { "worker", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_NONE, &worker, NULL, NULL },
    { "url", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_STRING, &opt.url, NULL, NULL },
    { "first", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_STRING, &opt.first, NULL, NULL },
    { "second", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_STRING, &opt.second, NULL, NULL },
    { "pairs", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_INT, &opt.pairs, NULL, NULL },
    { "threads", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_INT, &opt.threads, NULL, NULL },
    { "names", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_INT, &opt.names, NULL, NULL },
    { NULL },
  };

  if (argc > 1 && g_str_equal (argv[1], "--worker"))
    {
      g_autoptr (GOptionContext) context = g_option_context_new (NULL);
      int status = 1;

      g_option_context_add_main_entries (context, entries, NULL);
      if (g_option_context_parse (context, &argc, &argv, NULL) && worker && opt.url != NULL)
        status = opt.pairs > 0 ? worker_stress (&opt) : worker_cycle (&opt);
      g_free (opt.url);
      g_free (opt.first);
      g_free (opt.second);
      return status;
    }

  self_exe = g_file_read_link ("/proc/self/exe", NULL);
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/deadlock/sentinel/two-registries", test_sentinel_two_registries);
  test_add_redis ("/deadlock/processes/two", NULL, test_two_processes);
  test_add_redis ("/deadlock/processes/three", NULL, test_three_processes);
  test_add_redis ("/deadlock/processes/ordered-stress", NULL, test_process_stress);
  add_stores ("/deadlock/threads/two", test_two_threads);
  add_stores ("/deadlock/registries/two", test_two_registries);
  add_stores ("/deadlock/sets/lock-all", test_lock_set);
  add_stores ("/deadlock/off/no-deadlock", test_detection_off);
  add_stores ("/deadlock/stale/expired-holder", test_stale_holder);
  add_stores ("/deadlock/records/timeout-removes", test_record_timeout);
  add_stores ("/deadlock/records/cancel-removes", test_record_cancel);
  test_add_redis ("/deadlock/records/frozen-server", NULL, test_record_frozen_store);
  deadlock_rw_add_tests ();
  return g_test_run ();
}
