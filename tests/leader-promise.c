/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* leader-promise.c: tests of what a leadership promises outside its main context.
 *
 * is_leading() answers FALSE, and the leadership's cancellable is cancelled, from the
 * moment its lease is known lost or its time has run out, in whatever thread finds it,
 * not when the leader's main context next runs: a leader whose context is busy is told
 * when its lease is forced open or its server restarts, and a candidate process
 * stopped past its TTL (SIGSTOP) never acts as leader after it resumes (`--act URL NAME
 * TTL`: a candidate that prints "act T" every few milliseconds while is_leading(), T
 * being the monotonic time the question was asked). And a stopped leader dropped with
 * its registry frees them without its context running again: 200 of them leave no
 * file descriptor and no thread behind.
 */
#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "leader-helpers.h"

/* ---- told while the context is busy (Redis) ---- */

typedef struct
{
  TestSync sync;
  gboolean cancelled;
} Told;

static void
on_told (GCancellable *cancellable, gpointer data)
{
  Told *told = data;

  (void) cancellable;
  test_sync_lock (&told->sync);
  told->cancelled = TRUE;
  test_sync_broadcast (&told->sync);
  test_sync_unlock (&told->sync);
}

static void
test_told_while_busy (TestFixture *fx, gconstpointer data)
{
  gboolean restart = GPOINTER_TO_INT (data);
  g_autoptr (RedisLockRegistry) breaker = test_registry_new (fx);
  g_autoptr (GError) error = NULL;
  g_autoptr (GCancellable) cancellable = NULL;
  ContextScope scope;
  Candidate c;
  Told told = { 0 };
  gulong handler;

  g_test_summary ("A leader whose context is busy (not iterated) is told in another thread "
                  "that its lease was forced open or its server restarted: its cancellable "
                  "is cancelled and is_leading() answers FALSE there and then; func (FALSE) "
                  "comes once, when the context runs again (TTL 3 s: the watchdog renews every "
                  "second, and finds the key gone if nothing else told it before)");
  TEST_SKIP_IF_NO_SERVER (fx);

  test_sync_init (&told.sync);
  context_enter (&scope);
  redis_lock_registry_set_expire_after_ms (fx->registry, 3000);
  candidate_init (&c, fx->registry, "busy");
  redis_leader_start (c.leader);
  g_assert_true (test_iterate_until (&c.granted, 1, 10000));
  cancellable = g_object_ref (redis_leader_get_cancellable (c.leader));
  handler = g_cancellable_connect (cancellable, G_CALLBACK (on_told), &told, NULL);
  g_assert_cmpuint (handler, !=, 0);

  /* From here on this thread, which runs the leader's context, does not iterate it. */
  if (restart)
    {
      redis_lock_test_server_stop (fx->server);
      g_assert_true (redis_lock_test_server_start (fx->server, &error));
      g_assert_no_error (error);
    }
  else
    {
      g_assert_true (redis_lock_registry_force_unlock (breaker, "busy", &error));
      g_assert_no_error (error);
    }
  g_assert_true (test_sync_wait_flag (&told.sync, &told.cancelled, 5000));
  g_assert_false (redis_leader_is_leading (c.leader));
  g_assert_true (g_cancellable_is_cancelled (redis_leader_get_cancellable (c.leader)));
  g_assert_cmpuint (c.ended, ==, 0);

  /* The context runs again: the end of the leadership, once; the name is free, so it
   * leads again after its pause. */
  g_assert_true (test_iterate_until (&c.ended, 1, 10000));
  g_assert_true (c.cancelled_at_end);
  g_assert_true (test_iterate_until (&c.granted, 2, 10000));
  g_assert_cmpuint (c.ended, ==, 1);
  g_assert_true (redis_leader_is_leading (c.leader));
  g_cancellable_disconnect (cancellable, handler);
  candidate_clear (&c);
  g_assert_cmpuint (c.ended, ==, 2);
  context_leave (&scope);
  test_sync_clear (&told.sync);
}

/* ---- a candidate process stopped past its TTL (Redis) ---- */

static void
on_act_leader (RedisLeader *leader, gboolean leading, gpointer data)
{
  (void) leader;
  (void) data;
  printf ("%s\n", leading ? "leading" : "ended");
  fflush (stdout);
}

/* Acts as leader when is_leading() says it may: prints when it asked. */
static gboolean
act_tick (gpointer data)
{
  gint64 asked = g_get_monotonic_time ();

  if (redis_leader_is_leading (data))
    {
      printf ("act %" G_GINT64_FORMAT "\n", asked);
      fflush (stdout);
    }
  return G_SOURCE_CONTINUE;
}

int
leader_act_main (const char *url, const char *name, const char *ttl)
{
  RedisLockRegistry *registry = redis_lock_registry_new (url, TEST_REGISTRY_KEY, NULL);
  g_autoptr (GMainLoop) loop = g_main_loop_new (NULL, FALSE);
  RedisLeader *leader;

  if (registry == NULL)
    return 2;
  redis_lock_registry_set_expire_after_ms (registry, g_ascii_strtoll (ttl, NULL, 10));
  leader = redis_leader_new (registry, name, on_act_leader, NULL, NULL);
  redis_leader_start (leader);
  g_timeout_add (5, act_tick, leader);
  g_main_loop_run (loop);
  return 0;
}

/* The next line @fd says within @timeout_ms (without its newline), or NULL. */
static char *
read_line (int fd, GString *buffer, gint64 timeout_ms)
{
  gint64 end = test_now_ms () + timeout_ms;

  for (;;)
    {
      char *nl = strchr (buffer->str, '\n');
      struct pollfd pfd = { .fd = fd, .events = POLLIN };
      gint64 left = end - test_now_ms ();
      char buf[256];
      ssize_t got;

      if (nl != NULL)
        {
          char *line = g_strndup (buffer->str, (gsize) (nl - buffer->str));
          g_string_erase (buffer, 0, nl - buffer->str + 1);
          return line;
        }
      if (left <= 0 || poll (&pfd, 1, (int) left) <= 0)
        return NULL;
      got = read (fd, buf, sizeof buf);
      if (got <= 0)
        return NULL;
      g_string_append_len (buffer, buf, got);
    }
}

/* Reads lines until one equal to @want: whether it came within @timeout_ms. Each "act
 * T" line on the way counts in *@late when T >= @since_us. */
static gboolean
read_until (int fd, GString *buffer, const char *want, gint64 since_us, guint *late,
            gint64 timeout_ms)
{
  gint64 end = test_now_ms () + timeout_ms;

  for (;;)
    {
      g_autofree char *line = read_line (fd, buffer, MAX (end - test_now_ms (), 0));

      if (line == NULL)
        return FALSE;
      if (g_str_equal (line, want))
        return TRUE;
      if (g_str_has_prefix (line, "act ") && late != NULL
          && g_ascii_strtoll (line + 4, NULL, 10) >= since_us)
        {
          g_test_message ("acted as leader after it resumed: %s", line);
          (*late)++;
        }
    }
}

/* The candidate process dies with the test, even one that failed before killing it. */
static void
die_with_parent (gpointer data)
{
  (void) data;
  prctl (PR_SET_PDEATHSIG, SIGKILL);
}

static void
test_stopped_process (TestFixture *fx, gconstpointer data)
{
  g_autofree char *self = g_test_build_filename (G_TEST_BUILT, "leader", NULL);
  const char *argv[] = { self, "--act", fx->url, "paused", "1000", NULL };
  g_autoptr (GError) error = NULL;
  g_autoptr (GString) buffer = g_string_new (NULL);
  ContextScope scope;
  Candidate other;
  GPid pid;
  int out_fd, status;
  guint late = 0;
  gint64 resumed_us;

  g_test_summary ("A candidate process that leads, stopped (SIGSTOP) until its lease ran out "
                  "and another candidate leads, never acts as leader after it resumes: its "
                  "first is_leading() answers FALSE, before any renewal reply, and its "
                  "leadership then ends (TTL 1 s)");
  TEST_SKIP_IF_NO_SERVER (fx);

  g_assert_true (g_spawn_async_with_pipes (NULL, (char **) argv, NULL, G_SPAWN_DO_NOT_REAP_CHILD,
                                           die_with_parent, NULL, &pid, NULL, &out_fd, NULL, &error));
  g_assert_no_error (error);
  g_assert_true (read_until (out_fd, buffer, "leading", 0, NULL, 10000));
  /* It acts. */
  for (;;)
    {
      g_autofree char *line = read_line (out_fd, buffer, 5000);
      g_assert_nonnull (line);
      if (g_str_has_prefix (line, "act "))
        break;
    }

  g_assert_cmpint (kill (pid, SIGSTOP), ==, 0);
  g_assert_cmpint (waitpid (pid, &status, WUNTRACED), ==, pid);
  g_assert_true (WIFSTOPPED (status));
  /* Another candidate is granted once the stopped one's lease has expired. */
  context_enter (&scope);
  candidate_init (&other, fx->registry, "paused");
  redis_leader_start (other.leader);
  g_assert_true (test_iterate_until (&other.granted, 1, 10000));

  /* Every act asked before the stop was asked before this time; one asked after the
   * resume, after it. */
  resumed_us = g_get_monotonic_time ();
  g_assert_cmpint (kill (pid, SIGCONT), ==, 0);
  g_assert_true (read_until (out_fd, buffer, "ended", resumed_us, &late, 10000));
  g_assert_cmpuint (late, ==, 0);
  g_assert_true (redis_leader_is_leading (other.leader));
  test_assert_held_by (fx, "paused", fx->registry, 60000);

  kill (pid, SIGKILL);
  waitpid (pid, NULL, 0);
  g_spawn_close_pid (pid);
  close (out_fd);
  candidate_clear (&other);
  context_leave (&scope);
}

/* ---- stopped and dropped without the context (Redis) ---- */

/* The entries of the directory @path (file descriptors, threads of this process). */
static guint
count_entries (const char *path)
{
  g_autoptr (GDir) dir = g_dir_open (path, 0, NULL);
  guint n = 0;

  g_assert_nonnull (dir);
  while (g_dir_read_name (dir) != NULL)
    n++;
  return n;
}

/* The threads of the library (each named "redislock-…") this process runs now. */
static guint
count_library_threads (void)
{
  g_autoptr (GDir) dir = g_dir_open ("/proc/self/task", 0, NULL);
  const char *tid;
  guint n = 0;

  g_assert_nonnull (dir);
  while ((tid = g_dir_read_name (dir)) != NULL)
    {
      g_autofree char *path = g_strdup_printf ("/proc/self/task/%s/comm", tid);
      g_autofree char *comm = NULL;

      /* A thread that has just left has no comm any more. */
      if (g_file_get_contents (path, &comm, NULL, NULL) && g_str_has_prefix (comm, "redislock"))
        n++;
    }
  return n;
}

/* Waits up to @timeout_ms until no thread of the library runs: every registry is gone. */
static gboolean
wait_library_threads_gone (gint64 timeout_ms)
{
  gint64 end = test_now_ms () + timeout_ms;
  guint n;

  while ((n = count_library_threads ()) > 0)
    {
      if (test_now_ms () >= end)
        {
          g_test_message ("%u threads of the library still run", n);
          return FALSE;
        }
      g_usleep (1000);
    }
  return TRUE;
}

static void
on_round_leader (RedisLeader *leader, gboolean leading, gpointer data)
{
  (void) leader;
  if (leading)
    (*(guint *) data)++;
}

/* A registry of its own, a leader started in a context of its own until it leads,
 * stopped and dropped with the registry, and the context dropped without being
 * iterated again. */
static void
leader_round (TestFixture *fx)
{
  GMainContext *context = g_main_context_new ();
  RedisLockRegistry *registry;
  RedisLeader *leader;
  guint granted = 0;

  g_main_context_push_thread_default (context);
  registry = test_registry_new (fx);
  leader = redis_leader_new (registry, "dropped", on_round_leader, &granted, NULL);
  redis_leader_start (leader);
  g_assert_true (test_iterate_until (&granted, 1, 10000));
  redis_leader_stop (leader);
  redis_leader_unref (leader);
  redis_lock_registry_unref (registry);
  g_main_context_pop_thread_default (context);
  g_main_context_unref (context);
}

static void
test_dropped_frees (TestFixture *fx, gconstpointer data)
{
  guint fds, threads;

  g_test_summary ("200 times: a registry, a leader started until it leads, stopped and "
                  "dropped with its registry, its context dropped without another "
                  "iteration: every file descriptor and thread comes back (the release "
                  "finishes in the background, on the registry's own worker)");
  TEST_SKIP_IF_NO_SERVER (fx);

  /* What the process keeps for good (the test's own connections, GLib's threads) is
   * there after one round. */
  leader_round (fx);
  g_assert_true (wait_library_threads_gone (10000));
  fds = count_entries ("/proc/self/fd");
  threads = count_entries ("/proc/self/task");

  for (guint i = 0; i < 200; i++)
    leader_round (fx);
  g_assert_true (wait_library_threads_gone (20000));
  g_assert_cmpuint (count_entries ("/proc/self/fd"), <=, fds);
  g_assert_cmpuint (count_entries ("/proc/self/task"), <=, threads);
  test_assert_free (fx, "dropped");
}

void
leader_add_promise_tests (void)
{
  test_add_redis ("/leader/told/forced-open", GINT_TO_POINTER (FALSE), test_told_while_busy);
  test_add_redis ("/leader/told/server-restarted", GINT_TO_POINTER (TRUE),
                  test_told_while_busy);
  test_add_redis ("/leader/told/stopped-process", NULL, test_stopped_process);
  test_add_redis ("/leader/stopped-and-dropped/frees-everything", NULL, test_dropped_frees);
}
