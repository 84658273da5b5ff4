/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* leader.c: tests of leader election on a lock (RedisLeader).
 *
 * The in-process cases run on every store (`/redis/...`, `/memory/...`,
 * `/cluster/...`, `/tls/...`, `/quorum/...`): candidates of several registries in one
 * thread's main context, which the test iterates, counting the callbacks of each. One
 * candidate at most leads; stop, resign, a lost lease and a closed registry each end a
 * leadership with exactly one func (FALSE) and a cancelled cancellable. The case with
 * processes runs on Redis: this program started three times as a candidate
 * (`--lead URL NAME TTL`, printing "leading CLIENT-ID" when granted), the leader killed,
 * a new one granted within its TTL and a second. What a leadership promises outside
 * its context (told in the thread that finds the lease gone, the lease's time, a
 * stopped leader freed without its context) is leader-promise.c's, registered from
 * main() here.
 */
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "leader-helpers.h"

/* Candidates leading at once, across every candidate of a test (only the test's thread
 * touches it: every callback runs in its context). */
static gint leaders_now;

static void
on_leader (RedisLeader *leader, gboolean leading, gpointer data)
{
  Candidate *c = data;

  g_assert_true (leader == c->leader);
  if (leading)
    {
      c->granted++;
      g_assert_cmpint (++leaders_now, ==, 1);
      g_set_object (&c->cancellable, redis_leader_get_cancellable (leader));
      g_assert_false (g_cancellable_is_cancelled (c->cancellable));
      g_assert_true (redis_leader_is_leading (leader));
    }
  else
    {
      c->ended++;
      leaders_now--;
      g_assert_cmpuint (c->ended, <=, c->granted);
      c->cancelled_at_end = g_cancellable_is_cancelled (c->cancellable);
      g_assert_false (redis_leader_is_leading (leader));
    }
}

void
candidate_init (Candidate *c, RedisLockRegistry *registry, const char *name)
{
  *c = (Candidate){ 0 };
  c->leader = redis_leader_new (registry, name, on_leader, c, NULL);
  g_assert_nonnull (c->leader);
  redis_leader_set_pause_ms (c->leader, 100);
}

void
candidate_clear (Candidate *c)
{
  redis_leader_stop (c->leader);
  redis_leader_unref (c->leader);
  g_clear_object (&c->cancellable);
}

void
iterate_for (gint64 ms)
{
  gint64 end = test_now_ms () + ms;

  while (test_now_ms () < end)
    if (!g_main_context_iteration (g_main_context_get_thread_default (), FALSE))
      g_usleep (1000);
}

void
context_enter (ContextScope *scope)
{
  scope->context = g_main_context_new ();
  g_main_context_push_thread_default (scope->context);
  leaders_now = 0;
}

void
context_leave (ContextScope *scope)
{
  /* Dispatch what stopping left (the sources' references). */
  iterate_for (50);
  g_main_context_pop_thread_default (scope->context);
  g_main_context_unref (scope->context);
}

/* Iterates the thread-default context until the lock @name is free in the store (a
 * leadership's release completes in the background) or 10 s pass; asserts it is free. */
static void
iterate_until_free (TestFixture *fx, const char *name)
{
  g_autofree char *key = test_lock_key (name);
  gint64 end = test_now_ms () + 10000;

  while (test_store_exists (fx, key) && test_now_ms () < end)
    iterate_for (1);
  test_assert_free (fx, name);
}

static void
test_grant_and_stop (TestFixture *fx, gconstpointer data)
{
  ContextScope scope;
  Candidate c;
  GCancellable *cancellable;

  g_test_summary ("A lone candidate is granted leadership (func TRUE, is_leading, the lock "
                  "held by its registry, a live cancellable); stop ends it with one func "
                  "FALSE, the cancellable cancelled and the lock released, and it is never "
                  "granted again");
  TEST_SKIP_IF_NO_STORE (fx);

  context_enter (&scope);
  candidate_init (&c, fx->registry, "solo");
  g_assert_false (redis_leader_is_leading (c.leader));
  g_assert_true (g_cancellable_is_cancelled (redis_leader_get_cancellable (c.leader)));
  g_assert_cmpstr (redis_leader_get_name (c.leader), ==, "solo");
  redis_leader_start (c.leader);
  g_assert_true (test_iterate_until (&c.granted, 1, 10000));
  g_assert_true (redis_leader_is_leading (c.leader));
  test_assert_held_by (fx, "solo", fx->registry, 60000);
  cancellable = redis_leader_get_cancellable (c.leader);
  g_assert_false (g_cancellable_is_cancelled (cancellable));

  redis_leader_stop (c.leader);
  g_assert_cmpuint (c.ended, ==, 1);
  g_assert_true (c.cancelled_at_end);
  g_assert_false (redis_leader_is_leading (c.leader));
  g_assert_true (g_cancellable_is_cancelled (redis_leader_get_cancellable (c.leader)));
  iterate_until_free (fx, "solo");
  iterate_for (300);
  g_assert_cmpuint (c.granted, ==, 1);
  g_assert_cmpuint (c.ended, ==, 1);
  redis_leader_stop (c.leader);
  g_assert_cmpuint (c.ended, ==, 1);
  candidate_clear (&c);
  context_leave (&scope);
}

static void
test_failover_on_stop (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) r2 = test_registry_new (fx);
  ContextScope scope;
  Candidate a, b;
  Candidate *first, *second;
  gint64 stopped_ms;

  g_test_summary ("Of two candidates in two registries one leads; when it stops, the other "
                  "is granted at once, woken by the release (TTL and spin interval 60 s)");
  TEST_SKIP_IF_NO_STORE (fx);

  context_enter (&scope);
  redis_lock_registry_set_idle_between_tries_ms (fx->registry, 60000);
  redis_lock_registry_set_idle_between_tries_ms (r2, 60000);
  candidate_init (&a, fx->registry, "pair");
  candidate_init (&b, r2, "pair");
  redis_leader_start (a.leader);
  g_assert_true (test_iterate_until (&a.granted, 1, 10000));
  redis_leader_start (b.leader);
  g_assert_true (test_wait_contended (r2, 1, 10000));
  iterate_for (200);
  g_assert_cmpuint (b.granted, ==, 0);
  first = &a;
  second = &b;

  stopped_ms = test_now_ms ();
  redis_leader_stop (first->leader);
  g_assert_cmpuint (first->ended, ==, 1);
  g_assert_true (test_iterate_until (&second->granted, 1, 10000));
  g_assert_cmpint (test_now_ms () - stopped_ms, <, 2000);
  g_assert_true (redis_leader_is_leading (second->leader));
  test_assert_held_by (fx, "pair", r2, 60000);
  candidate_clear (&b);
  g_assert_cmpuint (b.ended, ==, 1);
  candidate_clear (&a);
  context_leave (&scope);
}

static void
test_resign (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) r2 = test_registry_new (fx);
  ContextScope scope;
  Candidate a, b;

  g_test_summary ("A leader that resigns ends its leadership (one func FALSE), another "
                  "candidate is granted, and the one that resigned competes again after its "
                  "pause: it leads again once the other stops");
  TEST_SKIP_IF_NO_STORE (fx);

  context_enter (&scope);
  candidate_init (&a, fx->registry, "resign");
  candidate_init (&b, r2, "resign");
  redis_leader_start (a.leader);
  g_assert_true (test_iterate_until (&a.granted, 1, 10000));
  redis_leader_start (b.leader);
  g_assert_true (test_wait_contended (r2, 1, 10000));

  redis_leader_resign (a.leader);
  g_assert_cmpuint (a.ended, ==, 1);
  g_assert_true (a.cancelled_at_end);
  g_assert_false (redis_leader_is_leading (a.leader));
  g_assert_true (test_iterate_until (&b.granted, 1, 10000));
  /* a's pause (100 ms) is over: it waits for b. */
  iterate_for (300);
  g_assert_cmpuint (a.granted, ==, 1);
  redis_leader_resign (b.leader);
  g_assert_cmpuint (b.ended, ==, 1);
  g_assert_true (test_iterate_until (&a.granted, 2, 10000));
  g_assert_cmpuint (a.ended, ==, 1);
  candidate_clear (&a);
  g_assert_cmpuint (a.ended, ==, 2);
  candidate_clear (&b);
  g_assert_cmpuint (b.ended, ==, 1);
  context_leave (&scope);
}

static void
test_lease_lost (TestFixture *fx, gconstpointer data)
{
  ContextScope scope;
  Candidate c;
  g_autofree char *key = test_lock_key ("lost");

  g_test_summary ("A leader whose lease is lost (its key deleted behind it) gets one func "
                  "FALSE with its cancellable cancelled, then, the name being free, leads "
                  "again after its pause");
  TEST_SKIP_IF_NO_STORE (fx);

  context_enter (&scope);
  redis_lock_registry_set_expire_after_ms (fx->registry, 1500);
  candidate_init (&c, fx->registry, "lost");
  redis_leader_start (c.leader);
  g_assert_true (test_iterate_until (&c.granted, 1, 10000));
  g_assert_true (test_store_delete (fx, key));
  g_assert_true (test_iterate_until (&c.ended, 1, 10000));
  g_assert_true (c.cancelled_at_end);
  g_assert_true (test_iterate_until (&c.granted, 2, 10000));
  g_assert_cmpuint (c.ended, ==, 1);
  test_assert_held_by (fx, "lost", fx->registry, 1500);
  candidate_clear (&c);
  g_assert_cmpuint (c.ended, ==, 2);
  context_leave (&scope);
}

static void
test_registry_closed (TestFixture *fx, gconstpointer data)
{
  RedisLockRegistry *registry = test_registry_new (fx);
  ContextScope scope;
  Candidate c, waiting;

  g_test_summary ("Closing the registry ends a leadership with one func FALSE and a "
                  "cancelled cancellable; neither the leader nor a waiting candidate is "
                  "granted again");
  TEST_SKIP_IF_NO_STORE (fx);

  context_enter (&scope);
  candidate_init (&c, registry, "closing");
  candidate_init (&waiting, registry, "closing-other");
  redis_leader_start (c.leader);
  g_assert_true (test_iterate_until (&c.granted, 1, 10000));
  redis_lock_registry_close (registry);
  g_assert_true (test_iterate_until (&c.ended, 1, 10000));
  g_assert_true (c.cancelled_at_end);
  g_assert_false (redis_leader_is_leading (c.leader));
  redis_leader_start (waiting.leader);
  iterate_for (300);
  g_assert_cmpuint (c.granted, ==, 1);
  g_assert_cmpuint (c.ended, ==, 1);
  g_assert_cmpuint (waiting.granted, ==, 0);
  candidate_clear (&c);
  candidate_clear (&waiting);
  g_assert_cmpuint (c.ended, ==, 1);
  context_leave (&scope);
  redis_lock_registry_unref (registry);
}

static gpointer
stop_in_thread (gpointer data)
{
  redis_leader_stop (data);
  return NULL;
}

static void
test_stop_from_other_thread (TestFixture *fx, gconstpointer data)
{
  ContextScope scope;
  Candidate c;

  g_test_summary ("stop from another thread is carried out in the leader's context: one "
                  "func FALSE there, the lock released");
  TEST_SKIP_IF_NO_STORE (fx);

  context_enter (&scope);
  candidate_init (&c, fx->registry, "remote");
  redis_leader_start (c.leader);
  g_assert_true (test_iterate_until (&c.granted, 1, 10000));
  g_thread_join (g_thread_new ("stopper", stop_in_thread, c.leader));
  g_assert_true (test_iterate_until (&c.ended, 1, 10000));
  iterate_until_free (fx, "remote");
  candidate_clear (&c);
  g_assert_cmpuint (c.ended, ==, 1);
  context_leave (&scope);
}

/* ---- a frozen server (Redis) ---- */

static void
test_stop_frozen_server (TestFixture *fx, gconstpointer data)
{
  gboolean resign = GPOINTER_TO_INT (data);
  const char *name = resign ? "frozen-resign" : "frozen-stop";
  ContextScope scope;
  Candidate c;
  gint64 start, took;

  g_test_summary ("stop and resign on a leader whose server stopped answering return "
                  "at once (func FALSE has run) instead of waiting the command timeout "
                  "for the release in the leader's context; once the server answers, the "
                  "lock is released (not left to expire), and a resigned candidate leads "
                  "again");
  TEST_SKIP_IF_NO_SERVER (fx);

  context_enter (&scope);
  redis_lock_registry_set_command_timeout_ms (fx->registry, 10000);
  candidate_init (&c, fx->registry, name);
  redis_leader_start (c.leader);
  g_assert_true (test_iterate_until (&c.granted, 1, 10000));

  redis_lock_test_server_pause (fx->server);
  start = test_now_ms ();
  if (resign)
    redis_leader_resign (c.leader);
  else
    redis_leader_stop (c.leader);
  took = test_now_ms () - start;
  g_test_message ("%s returned in %" G_GINT64_FORMAT " ms", resign ? "resign" : "stop", took);
  g_assert_cmpuint (c.ended, ==, 1);
  g_assert_true (c.cancelled_at_end);
  g_assert_false (redis_leader_is_leading (c.leader));
  /* A release sent from the context would take the whole command timeout (10 s). */
  g_assert_cmpint (took, <, 2000);
  redis_lock_test_server_resume (fx->server);

  if (resign)
    {
      /* Released, then taken again after the pause: its lease is a new one, with the
       * full TTL (60 s) from the moment it was taken. */
      g_assert_true (test_iterate_until (&c.granted, 2, 15000));
      test_assert_held_by (fx, name, fx->registry, 60000);
    }
  else
    iterate_until_free (fx, name);
  candidate_clear (&c);
  context_leave (&scope);
}

/* ---- processes (Redis) ---- */

static void
on_child_leader (RedisLeader *leader, gboolean leading, gpointer data)
{
  RedisLockRegistry *registry = data;

  if (leading)
    printf ("leading %s\n", redis_lock_registry_get_client_id (registry));
  else
    printf ("ended\n");
  fflush (stdout);
}

/* A candidate in a process of its own, until killed. */
static int
lead_main (const char *url, const char *name, const char *ttl)
{
  g_autoptr (GError) error = NULL;
  RedisLockRegistry *registry = redis_lock_registry_new (url, TEST_REGISTRY_KEY, &error);
  g_autoptr (GMainLoop) loop = g_main_loop_new (NULL, FALSE);
  RedisLeader *leader;

  if (registry == NULL)
    return 2;
  redis_lock_registry_set_expire_after_ms (registry, g_ascii_strtoll (ttl, NULL, 10));
  leader = redis_leader_new (registry, name, on_child_leader, registry, NULL);
  redis_leader_start (leader);
  g_main_loop_run (loop);
  return 0;
}

typedef struct
{
  GPid pid;
  int out_fd;
  GString *buffer;
  char *leading_id; /* the client id it reported leading with */
} Child;

static void
child_start (Child *child, const char *url, const char *name, gint64 ttl_ms)
{
  g_autofree char *self = g_test_build_filename (G_TEST_BUILT, "leader", NULL);
  g_autofree char *ttl = g_strdup_printf ("%" G_GINT64_FORMAT, ttl_ms);
  const char *argv[] = { self, "--lead", url, name, ttl, NULL };
  g_autoptr (GError) error = NULL;

  *child = (Child){ 0 };
  child->buffer = g_string_new (NULL);
  g_assert_true (g_spawn_async_with_pipes (NULL, (char **) argv, NULL, G_SPAWN_DO_NOT_REAP_CHILD,
                                           NULL, NULL, &child->pid, NULL, &child->out_fd, NULL,
                                           &error));
  g_assert_no_error (error);
}

static void
child_stop (Child *child)
{
  if (child->pid != 0)
    {
      kill (child->pid, SIGKILL);
      waitpid (child->pid, NULL, 0);
      g_spawn_close_pid (child->pid);
      child->pid = 0;
    }
  if (child->out_fd >= 0)
    close (child->out_fd);
  child->out_fd = -1;
  g_string_free (child->buffer, TRUE);
  g_free (child->leading_id);
}

/* Reads what the @n children say for up to @timeout_ms, until one not in @except
 * reports leading: its index, or -1. Lines other than "leading" are skipped. */
static int
wait_for_leader (Child *children, guint n, int except, gint64 timeout_ms)
{
  gint64 end = test_now_ms () + timeout_ms;

  for (;;)
    {
      struct pollfd fds[8];
      gint64 left = end - test_now_ms ();

      for (guint i = 0; i < n; i++)
        {
          char *nl;
          while ((nl = strchr (children[i].buffer->str, '\n')) != NULL)
            {
              g_autofree char *line = g_strndup (children[i].buffer->str,
                                                 (gsize) (nl - children[i].buffer->str));
              g_string_erase (children[i].buffer, 0, nl - children[i].buffer->str + 1);
              if (g_str_has_prefix (line, "leading ") && (int) i != except)
                {
                  g_free (children[i].leading_id);
                  children[i].leading_id = g_strdup (line + strlen ("leading "));
                  return (int) i;
                }
            }
          fds[i].fd = children[i].out_fd;
          fds[i].events = POLLIN;
          fds[i].revents = 0;
        }
      if (left <= 0)
        return -1;
      if (poll (fds, n, (int) left) > 0)
        for (guint i = 0; i < n; i++)
          if (fds[i].revents & (POLLIN | POLLHUP))
            {
              char buf[256];
              ssize_t got = read (fds[i].fd, buf, sizeof buf);
              if (got > 0)
                g_string_append_len (children[i].buffer, buf, got);
            }
    }
}

static void
test_processes (TestFixture *fx, gconstpointer data)
{
  Child children[3];
  const gint64 ttl_ms = 2000;
  g_autofree char *key = test_lock_key ("proc");
  g_autofree char *owner = NULL, *owner2 = NULL;
  int first, second;
  gint64 killed_ms;

  g_test_summary ("Of three candidate processes exactly one leads (the lock holds its "
                  "client id); killed, another is granted within its TTL and a second");
  TEST_SKIP_IF_NO_SERVER (fx);

  for (guint i = 0; i < 3; i++)
    child_start (&children[i], fx->url, "proc", ttl_ms);
  first = wait_for_leader (children, 3, -1, 10000);
  g_assert_cmpint (first, >=, 0);
  owner = test_store_get_owner (fx, key);
  g_assert_nonnull (owner);
  g_assert_true (g_str_has_prefix (owner, children[first].leading_id));
  /* Nobody else is granted while it lives. */
  g_assert_cmpint (wait_for_leader (children, 3, first, 500), ==, -1);

  kill (children[first].pid, SIGKILL);
  killed_ms = test_now_ms ();
  second = wait_for_leader (children, 3, first, ttl_ms + 5000);
  g_assert_cmpint (second, >=, 0);
  g_assert_cmpint (test_now_ms () - killed_ms, <, ttl_ms + 1000);
  owner2 = test_store_get_owner (fx, key);
  g_assert_nonnull (owner2);
  g_assert_true (g_str_has_prefix (owner2, children[second].leading_id));
  g_assert_cmpint (wait_for_leader (children, 3, second, 300), ==, -1);
  for (guint i = 0; i < 3; i++)
    child_stop (&children[i]);
}

int
main (int argc, char **argv)
{
  if (argc == 5 && strcmp (argv[1], "--lead") == 0)
    return lead_main (argv[2], argv[3], argv[4]);
  if (argc == 5 && strcmp (argv[1], "--act") == 0)
    return leader_act_main (argv[2], argv[3], argv[4]);

  g_test_init (&argc, &argv, NULL);

  test_add_stores ("/leader/grant-and-stop", NULL, test_grant_and_stop);
  test_add_stores ("/leader/failover/on-stop", NULL, test_failover_on_stop);
  test_add_stores ("/leader/resign", NULL, test_resign);
  test_add_stores ("/leader/lease-lost", NULL, test_lease_lost);
  test_add_stores ("/leader/registry-closed", NULL, test_registry_closed);
  test_add_stores ("/leader/stop-from-other-thread", NULL,
                              test_stop_from_other_thread);
  test_add_redis ("/leader/frozen-server/stop", GINT_TO_POINTER (FALSE),
                  test_stop_frozen_server);
  test_add_redis ("/leader/frozen-server/resign", GINT_TO_POINTER (TRUE),
                  test_stop_frozen_server);
  test_add_redis ("/leader/processes/one-of-three", NULL, test_processes);
  leader_add_promise_tests ();
  return g_test_run ();
}
