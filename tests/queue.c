/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* tests/queue.c: the wait queue: processes waiting for a lock stand in line in Redis,
 * and a release grants the lock to the head of the line and tells that registry alone.
 *
 * Each registry has a client id of its own, so several registries of this process
 * stand for as many processes; the cases that need a process to die or many processes
 * to share a lock run copies of this program as children (`--queue-child`). The cases
 * that look into the queue itself or kill a process are Redis-only; the others run on
 * every store that keeps a queue (all but the quorum).
 */
#include "config.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

#define NAME "queued"

/* The lock's wait queue (a sorted set of client ids) and a place's key. */
static char *
queue_key (void)
{
  g_autofree char *key = test_lock_key (NAME);

  return g_strconcat ("queue:{", key, "}", NULL);
}

static long long
places (TestFixture *fx)
{
  g_autofree char *queue = queue_key ();

  return test_redis_integer (fx->redis, "ZCARD %s", queue);
}

typedef struct
{
  TestFixture *fx;
  long long at_least;
} PlacesWait;

static gboolean
places_reached (gpointer data)
{
  PlacesWait *w = data;
  long long n;

  pthread_mutex_lock (&w->fx->mutex);
  n = places (w->fx);
  pthread_mutex_unlock (&w->fx->mutex);
  return n >= w->at_least;
}

/* How many places have their key (`queue:{KEY}:CLIENT_ID`): a place whose key expired
 * is dead, and is dropped from the sorted set when it comes to the head of the line. */
static size_t
live_places (TestFixture *fx)
{
  g_autofree char *queue = queue_key ();
  redisReply *reply;
  size_t n;

  reply = test_redis_command (fx->redis, "KEYS %s:*", queue);
  n = reply->elements;
  freeReplyObject (reply);
  return n;
}

static gboolean
no_live_place (gpointer data)
{
  PlacesWait *w = data;
  size_t n;

  pthread_mutex_lock (&w->fx->mutex);
  n = live_places (w->fx);
  pthread_mutex_unlock (&w->fx->mutex);
  return n == 0;
}

/* Waits until the queue has at least @n places. */
static void
wait_places (TestFixture *fx, long long n)
{
  PlacesWait w = { fx, n };

  g_assert_true (test_wait_until (places_reached, &w, 10000));
}

/* A thread of its own registry that waits for the lock (try_lock_for @wait_ms),
 * records the order it got it in, holds it for a moment and unlocks. */
typedef struct
{
  RedisLockRegistry *registry;
  RedisLock *lock;
  gint64 wait_ms;
  GCancellable *cancellable;
  gint *order; /* shared counter */
  gint got;    /* atomic: 1 + place in the order it got the lock; 0: not (yet) */
  gint done;   /* atomic */
  gboolean acquired;
  guint64 token;
  GError *error;
} Waiter;

static gpointer
waiter_main (gpointer data)
{
  Waiter *w = data;

  w->acquired = redis_lock_try_lock_full (w->lock, w->wait_ms, 0, w->cancellable, &w->error);
  if (w->acquired)
    {
      g_atomic_int_set (&w->got, g_atomic_int_add (w->order, 1) + 1);
      w->token = redis_lock_get_fencing_token (w->lock);
      g_assert_true (redis_lock_unlock (w->lock, NULL));
    }
  g_atomic_int_set (&w->done, 1);
  return NULL;
}

/* The fixture's registry waits in line (the queue is off by default); FALSE, with the
 * test skipped, without a store or on a Cluster, where no registry keeps a line yet. */
static gboolean
queue_fixture (TestFixture *fx)
{
  if (fx->registry == NULL)
    {
      g_test_skip ("no store");
      return FALSE;
    }
  if (fx->store == TEST_STORE_CLUSTER)
    {
      g_test_skip ("a Cluster registry keeps no wait queue yet");
      return FALSE;
    }
  redis_lock_registry_set_wait_queue (fx->registry, TRUE);
  return TRUE;
}

static void
waiter_init (Waiter *w, TestFixture *fx, gint *order, gint64 wait_ms)
{
  memset (w, 0, sizeof *w);
  w->registry = test_registry_new (fx);
  redis_lock_registry_set_wait_queue (w->registry, TRUE);
  w->lock = test_obtain (w->registry, NAME);
  w->wait_ms = wait_ms;
  w->order = order;
}

static void
waiter_clear (Waiter *w)
{
  g_clear_error (&w->error);
  g_clear_object (&w->cancellable);
  redis_lock_unref (w->lock);
  redis_lock_registry_unref (w->registry);
}

/* Waits until @w stands in line, asleep: its second attempt found the lock held (the
 * first one counts only once notifications are confirmed, and is followed by another). */
static void
wait_in_line (Waiter *w)
{
  g_assert_true (test_wait_contended (w->registry, 2, 10000));
}

static gboolean
waiter_done (gpointer data)
{
  return g_atomic_int_get (&((Waiter *)data)->done) != 0;
}

/* A release with a process in line grants it the lock: the waiter holds it without a
 * command of its own (one script in all: the release), and nobody else is told. */
static void
test_grant (TestFixture *fx, gconstpointer data)
{
  RedisLock *held;
  Waiter w;
  gint order = 0;
  GThread *thread;

  if (!queue_fixture (fx))
    return;
  held = test_obtain (fx->registry, NAME);
  test_lock_ok (held);
  waiter_init (&w, fx, &order, 10000);
  thread = g_thread_new ("waiter", waiter_main, &w);
  wait_in_line (&w);
  if (fx->redis != NULL)
    {
      pthread_mutex_lock (&fx->mutex);
      test_redis_reset_stats (fx->redis);
      pthread_mutex_unlock (&fx->mutex);
    }

  test_unlock_ok (held);
  g_assert_true (test_wait_until (waiter_done, &w, 10000));
  g_thread_join (thread);
  g_assert_no_error (w.error);
  g_assert_true (w.acquired);

  if (fx->redis != NULL)
    {
      pthread_mutex_lock (&fx->mutex);
      /* The release's script, and the waiter's unlock: nothing else. */
      g_assert_cmpint (test_redis_command_calls (fx->redis, "evalsha"), ==, 2);
      /* The waiter sent no SET NX: the one SET is the grant's, inside the script. */
      g_assert_cmpint (test_redis_command_calls (fx->redis, "set"), ==, 1);
      g_assert_cmpint (places (fx), ==, 0);
      pthread_mutex_unlock (&fx->mutex);
    }
  g_assert_cmpuint (test_stats (w.registry).grants_received, ==, 1);
  g_assert_cmpuint (test_stats (fx->registry).grants_given, ==, 1);
  redis_lock_unref (held);
  waiter_clear (&w);
}

/* Three processes in line are served in their order of arrival. */
static void
test_fifo (TestFixture *fx, gconstpointer data)
{
  RedisLock *held;
  Waiter w[4];
  GThread *threads[4];
  gint order = 0;

  if (!queue_fixture (fx))
    return;
  held = test_obtain (fx->registry, NAME);
  test_lock_ok (held);
  for (guint i = 0; i < G_N_ELEMENTS (w); i++)
    {
      waiter_init (&w[i], fx, &order, 10000);
      threads[i] = g_thread_new ("waiter", waiter_main, &w[i]);
      /* Each stands in line before the next comes. */
      wait_in_line (&w[i]);
    }
  test_unlock_ok (held);
  for (guint i = 0; i < G_N_ELEMENTS (w); i++)
    {
      g_thread_join (threads[i]);
      g_assert_no_error (w[i].error);
      g_assert_true (w[i].acquired);
    }
  for (guint i = 0; i < G_N_ELEMENTS (w); i++)
    {
      g_assert_cmpint (w[i].got, ==, i + 1);
      g_assert_cmpuint (test_stats (w[i].registry).grants_received, ==, 1);
      waiter_clear (&w[i]);
    }
  redis_lock_unref (held);
}

/* Inspection shows the line: two processes in line, in their order of arrival, with
 * their host, pid and when they came; nobody once the lock has been handed down. A
 * quorum registry keeps no line, and shows none. */
static void
test_inspect (TestFixture *fx, gconstpointer data)
{
  RedisLock *held;
  Waiter w[2];
  GThread *threads[2];
  gint order = 0;
  g_autoptr (GPtrArray) line = NULL;
  g_autoptr (GError) error = NULL;
  gint64 before = g_get_real_time ();

  TEST_SKIP_IF_NO_STORE (fx);
  if (fx->store == TEST_STORE_QUORUM || fx->store == TEST_STORE_CLUSTER)
    {
      /* No line is kept there: an empty one is listed. */
      line = redis_lock_registry_list_queue (fx->registry, NAME, &error);
      g_assert_no_error (error);
      g_assert_cmpuint (line->len, ==, 0);
      return;
    }
  redis_lock_registry_set_wait_queue (fx->registry, TRUE);
  line = redis_lock_registry_list_queue (fx->registry, "", &error);
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID);
  g_assert_null (line);
  g_clear_error (&error);
  held = test_obtain (fx->registry, NAME);
  test_lock_ok (held);
  line = redis_lock_registry_list_queue (fx->registry, NAME, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (line->len, ==, 0);
  g_clear_pointer (&line, g_ptr_array_unref);
  for (guint i = 0; i < G_N_ELEMENTS (w); i++)
    {
      waiter_init (&w[i], fx, &order, 10000);
      threads[i] = g_thread_new ("waiter", waiter_main, &w[i]);
      wait_in_line (&w[i]);
    }

  line = redis_lock_registry_list_queue (fx->registry, NAME, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (line->len, ==, 2);
  for (guint i = 0; i < line->len; i++)
    {
      RedisLockQueueInfo *info = g_ptr_array_index (line, i);

      g_assert_cmpstr (info->name, ==, NAME);
      g_assert_cmpstr (info->client_id, ==, redis_lock_registry_get_client_id (w[i].registry));
      g_assert_cmpstr (info->host, ==, g_get_host_name ());
      g_assert_cmpint (info->pid, ==, getpid ());
      g_assert_cmpuint (info->position, ==, i + 1);
      /* The server's clock is this machine's. */
      g_assert_cmpint (info->since_us, >=, before - 1000);
      g_assert_cmpint (info->since_us, <=, g_get_real_time () + 1000);
      if (i > 0)
        g_assert_cmpint (info->since_us, >=,
                         ((RedisLockQueueInfo *)g_ptr_array_index (line, i - 1))->since_us);
    }
  {
    /* The boxed type copies it whole. */
    RedisLockQueueInfo *copy = g_boxed_copy (REDIS_LOCK_TYPE_QUEUE_INFO, line->pdata[1]);

    g_assert_cmpstr (copy->client_id, ==, ((RedisLockQueueInfo *)line->pdata[1])->client_id);
    g_assert_cmpuint (copy->position, ==, 2);
    g_boxed_free (REDIS_LOCK_TYPE_QUEUE_INFO, copy);
  }
  g_clear_pointer (&line, g_ptr_array_unref);

  test_unlock_ok (held);
  for (guint i = 0; i < G_N_ELEMENTS (w); i++)
    {
      g_thread_join (threads[i]);
      g_assert_no_error (w[i].error);
      g_assert_true (w[i].acquired);
      g_assert_cmpint (w[i].got, ==, i + 1);
    }
  line = redis_lock_registry_list_queue (fx->registry, NAME, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (line->len, ==, 0);
  for (guint i = 0; i < G_N_ELEMENTS (w); i++)
    waiter_clear (&w[i]);
  redis_lock_unref (held);
}

/* A waiter that gives up leaves the line at once: the next one in line gets the lock
 * from the release. */
static void
test_give_up (TestFixture *fx, gconstpointer data)
{
  RedisLock *held;
  Waiter quitter, next;
  GThread *thread;
  gint order = 0;
  if (!queue_fixture (fx))
    return;
  held = test_obtain (fx->registry, NAME);
  test_lock_ok (held);
  waiter_init (&quitter, fx, &order, 10000);
  quitter.cancellable = g_cancellable_new ();
  thread = g_thread_new ("quitter", waiter_main, &quitter);
  wait_in_line (&quitter);
  g_cancellable_cancel (quitter.cancellable);
  g_thread_join (thread);
  g_assert_false (quitter.acquired);
  g_assert_error (quitter.error, G_IO_ERROR, G_IO_ERROR_CANCELLED);
  /* Gone from the line when the call returns, not when the place expires. */
  if (fx->redis != NULL)
    {
      g_assert_cmpint (places (fx), ==, 0);
      g_assert_cmpuint (live_places (fx), ==, 0);
    }

  waiter_init (&next, fx, &order, 10000);
  thread = g_thread_new ("next", waiter_main, &next);
  wait_in_line (&next);
  test_unlock_ok (held);
  g_thread_join (thread);
  g_assert_no_error (next.error);
  g_assert_true (next.acquired);
  g_assert_cmpuint (test_stats (next.registry).grants_received, ==, 1);
  g_assert_cmpuint (test_stats (quitter.registry).grants_received, ==, 0);
  redis_lock_unref (held);
  waiter_clear (&quitter);
  waiter_clear (&next);
}

typedef struct
{
  GCancellable *cancellable;
  gint64 delay_us;
  gint go; /* atomic */
} Race;

static gpointer
race_cancel (gpointer data)
{
  Race *r = data;

  gint64 until;

  while (!g_atomic_int_get (&r->go))
    ;
  /* A little later each round (0 to 1 ms), so that the release's grant comes first in
   * some rounds and the cancel in others: a shift in time, not a synchronisation. */
  until = g_get_monotonic_time () + r->delay_us;
  while (g_get_monotonic_time () < until)
    ;
  g_cancellable_cancel (r->cancellable);
  return NULL;
}

/* A waiter that gives up just as the release grants it the lock releases it at once,
 * granting it to the next in line: the lock never stays with a waiter that returned
 * without it. The two are started together, many times, so that either comes first. */
static void
test_give_up_granted (TestFixture *fx, gconstpointer data)
{
  guint quit_first = 0;

  if (!queue_fixture (fx))
    return;
  for (guint round = 0; round < 20; round++)
    {
      RedisLock *held = test_obtain (fx->registry, NAME);
      Waiter quitter, next;
      GThread *threads[2], *canceller;
      gint order = 0;
      Race race = { 0 };

      test_lock_ok (held);
      waiter_init (&quitter, fx, &order, 10000);
      quitter.cancellable = g_cancellable_new ();
      threads[0] = g_thread_new ("quitter", waiter_main, &quitter);
      wait_in_line (&quitter);
      waiter_init (&next, fx, &order, 10000);
      threads[1] = g_thread_new ("next", waiter_main, &next);
      wait_in_line (&next);

      race.cancellable = quitter.cancellable;
      race.delay_us = round * 50;
      canceller = g_thread_new ("canceller", race_cancel, &race);
      g_atomic_int_set (&race.go, 1);
      test_unlock_ok (held);
      g_thread_join (canceller);
      g_thread_join (threads[0]);
      g_thread_join (threads[1]);
      /* Whoever of the two came first, the next in line got the lock by a grant, well
       * before any TTL would have freed it. */
      g_assert_no_error (next.error);
      g_assert_true (next.acquired);
      g_assert_cmpuint (test_stats (next.registry).grants_received, ==, 1);
      if (!quitter.acquired)
        quit_first++;
      test_assert_free (fx, NAME);
      redis_lock_unref (held);
      waiter_clear (&quitter);
      waiter_clear (&next);
    }
  g_test_message ("the waiter gave up before its grant in %u rounds of 20", quit_first);
}

/* Children ------------------------------------------------------------------------ */

/* `--queue-child URL TTL_MS`: waits for the lock (up to 60 s) with a lease of TTL_MS,
 * printing "waiting" once it asked; then holds it until its stdin closes. */
static int
child_main (char **argv)
{
  g_autoptr (GError) error = NULL;
  RedisLockRegistry *registry = redis_lock_registry_new (argv[2], TEST_REGISTRY_KEY, &error);
  RedisLock *lock;
  char line[64];

  if (registry == NULL)
    return 2;
  redis_lock_registry_set_wait_queue (registry, TRUE);
  lock = redis_lock_registry_obtain (registry, NAME, &error);
  if (lock == NULL)
    return 2;
  printf ("waiting\n");
  fflush (stdout);
  if (!redis_lock_try_lock_full (lock, 60000, g_ascii_strtoll (argv[3], NULL, 10), NULL, &error))
    return 3;
  printf ("held\n");
  fflush (stdout);
  while (fgets (line, sizeof line, stdin) != NULL)
    ;
  return redis_lock_unlock (lock, NULL) ? 0 : 4;
}

/* `--queue-loop URL MS`: after a line on stdin, takes and releases the lock for MS
 * milliseconds, one section after another, then prints how many it made. */
static int
loop_main (char **argv)
{
  g_autoptr (GError) error = NULL;
  RedisLockRegistry *registry = redis_lock_registry_new (argv[2], TEST_REGISTRY_KEY, &error);
  RedisLock *lock;
  char line[64];
  gint64 end;
  guint sections = 0;

  if (registry == NULL)
    return 2;
  redis_lock_registry_set_wait_queue (registry, TRUE);
  lock = redis_lock_registry_obtain (registry, NAME, &error);
  if (lock == NULL)
    return 2;
  printf ("ready\n");
  fflush (stdout);
  if (fgets (line, sizeof line, stdin) == NULL)
    return 3;
  end = g_get_monotonic_time () + g_ascii_strtoll (argv[3], NULL, 10) * 1000;
  while (g_get_monotonic_time () < end)
    {
      if (!redis_lock_lock (lock, &error) || !redis_lock_unlock (lock, &error))
        return 4;
      sections++;
    }
  printf ("%u %" G_GUINT64_FORMAT "\n", sections, test_stats (registry).grants_received);
  fflush (stdout);
  redis_lock_unref (lock);
  redis_lock_registry_unref (registry);
  return 0;
}

typedef struct
{
  GPid pid;
  int in;
  FILE *out;
} Child;

static void
child_start (Child *child, const char *url, gint64 ttl_ms)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *exe = g_file_read_link ("/proc/self/exe", NULL);
  g_autofree char *ttl = g_strdup_printf ("%" G_GINT64_FORMAT, ttl_ms);
  const char *argv[] = { exe, "--queue-child", url, ttl, NULL };
  char line[64];
  int out;

  g_assert_nonnull (exe);
  g_assert_true (g_spawn_async_with_pipes (NULL, (char **)argv, NULL, G_SPAWN_DO_NOT_REAP_CHILD,
                                           NULL, NULL, &child->pid, &child->in, &out, NULL,
                                           &error));
  g_assert_no_error (error);
  child->out = fdopen (out, "r");
  g_assert_nonnull (fgets (line, sizeof line, child->out));
  g_assert_cmpstr (line, ==, "waiting\n");
}

static void
child_kill (Child *child)
{
  int status;

  g_assert_cmpint (kill (child->pid, SIGKILL), ==, 0);
  g_assert_cmpint (waitpid (child->pid, &status, 0), ==, child->pid);
  g_assert_true (WIFSIGNALED (status));
  close (child->in);
  fclose (child->out);
  g_spawn_close_pid (child->pid);
}

/* The place of a waiter that crashed is gone within the place's life (3 s), and the
 * release that follows grants to nobody: it frees the key and notifies as before. */
static void
test_crashed_waiter (TestFixture *fx, gconstpointer data)
{
  RedisLock *held;
  Child child;
  PlacesWait empty = { fx, 0 };
  gint64 killed;

  if (!queue_fixture (fx))
    return;
  held = test_obtain (fx->registry, NAME);
  test_lock_ok (held);
  child_start (&child, fx->url, 30000);
  wait_places (fx, 1);
  child_kill (&child);
  killed = test_now_ms ();
  g_assert_true (test_wait_until (no_live_place, &empty, 4000));
  g_test_message ("the crashed waiter's place went after %" G_GINT64_FORMAT " ms",
                  test_now_ms () - killed);
  /* At most the place's life after the child's last refresh, which came before it was
   * killed (a second at most before). */
  g_assert_cmpint (test_now_ms () - killed, <=, 3000 + 200);
  {
    /* The dead place is still in the sorted set, but inspection does not show it. */
    g_autoptr (GPtrArray) line = redis_lock_registry_list_queue (fx->registry, NAME, NULL);

    g_assert_nonnull (line);
    g_assert_cmpuint (line->len, ==, 0);
    pthread_mutex_lock (&fx->mutex);
    g_assert_cmpint (places (fx), ==, 1);
    pthread_mutex_unlock (&fx->mutex);
  }
  pthread_mutex_lock (&fx->mutex);
  test_redis_reset_stats (fx->redis);
  pthread_mutex_unlock (&fx->mutex);
  test_unlock_ok (held);
  test_assert_free (fx, NAME);
  g_assert_cmpuint (test_stats (fx->registry).grants_given, ==, 0);
  pthread_mutex_lock (&fx->mutex);
  g_assert_cmpint (test_redis_command_calls (fx->redis, "publish"), ==, 1);
  pthread_mutex_unlock (&fx->mutex);
  redis_lock_unref (held);
}

/* A grant to a waiter that crashed while in line (its place still alive) keeps the
 * lock at most the TTL it asked for, as a crashed holder does; the next in line then
 * gets it. */
static void
test_grant_to_crashed (TestFixture *fx, gconstpointer data)
{
  RedisLock *held;
  Child child;
  Waiter next;
  GThread *thread;
  gint order = 0;
  g_autofree char *key = test_lock_key (NAME);
  g_autofree char *owner = NULL;
  gint64 released, waited;

  if (!queue_fixture (fx))
    return;
  held = test_obtain (fx->registry, NAME);
  test_lock_ok (held);
  child_start (&child, fx->url, 1000);
  wait_places (fx, 1);
  waiter_init (&next, fx, &order, 10000);
  thread = g_thread_new ("next", waiter_main, &next);
  wait_in_line (&next);
  child_kill (&child);
  test_unlock_ok (held);
  released = test_now_ms ();
  /* Granted to the dead child, with its value and its TTL. */
  owner = test_store_get_owner (fx, key);
  g_assert_nonnull (owner);
  g_assert_false (test_value_is_of (owner, fx->registry));
  g_assert_false (test_value_is_of (owner, next.registry));
  g_thread_join (thread);
  waited = test_now_ms () - released;
  g_test_message ("the next waiter got the lock %" G_GINT64_FORMAT " ms after the grant to "
                  "the crashed one",
                  waited);
  g_assert_no_error (next.error);
  g_assert_true (next.acquired);
  /* The child's TTL (1 s) and the waiter's next attempt (a refresh interval at most). */
  g_assert_cmpint (waited, <=, 1000 + 1000 + 300);
  redis_lock_unref (held);
  waiter_clear (&next);
}

/* Fencing tokens keep rising through grants: each grantee gets the counter's next
 * token from the release that granted it. */
static void
test_fencing (TestFixture *fx, gconstpointer data)
{
  RedisLock *held;
  Waiter w[3];
  GThread *threads[3];
  gint order = 0;
  guint64 first;

  if (!queue_fixture (fx))
    return;
  redis_lock_registry_set_fencing (fx->registry, TRUE);
  held = test_obtain (fx->registry, NAME);
  test_lock_ok (held);
  first = redis_lock_get_fencing_token (held);
  g_assert_cmpuint (first, >, 0);
  for (guint i = 0; i < G_N_ELEMENTS (w); i++)
    {
      waiter_init (&w[i], fx, &order, 10000);
      redis_lock_registry_set_fencing (w[i].registry, TRUE);
      threads[i] = g_thread_new ("waiter", waiter_main, &w[i]);
      wait_in_line (&w[i]);
    }
  test_unlock_ok (held);
  for (guint i = 0; i < G_N_ELEMENTS (w); i++)
    {
      g_thread_join (threads[i]);
      g_assert_no_error (w[i].error);
      g_assert_true (w[i].acquired);
      g_assert_cmpuint (test_stats (w[i].registry).grants_received, ==, 1);
    }
  g_assert_cmpuint (w[0].token, >, first);
  g_assert_cmpuint (w[1].token, >, w[0].token);
  g_assert_cmpuint (w[2].token, >, w[1].token);
  for (guint i = 0; i < G_N_ELEMENTS (w); i++)
    waiter_clear (&w[i]);
  redis_lock_unref (held);
}

/* With the switch off, waiters are woken by the release's notification and take the
 * key with a SET of their own: nobody stands in line. */
static void
test_switch_off (TestFixture *fx, gconstpointer data)
{
  RedisLock *held;
  Waiter w;
  GThread *thread;
  gint order = 0;

  if (!queue_fixture (fx))
    return;
  {
    /* Off by default: a registry waits in line only when asked. */
    g_autoptr (RedisLockRegistry) fresh = test_registry_new (fx);
    g_assert_false (redis_lock_registry_get_wait_queue (fresh));
  }
  g_assert_true (redis_lock_registry_get_wait_queue (fx->registry));
  redis_lock_registry_set_wait_queue (fx->registry, FALSE);
  g_assert_false (redis_lock_registry_get_wait_queue (fx->registry));
  held = test_obtain (fx->registry, NAME);
  test_lock_ok (held);
  waiter_init (&w, fx, &order, 10000);
  redis_lock_registry_set_wait_queue (w.registry, FALSE);
  thread = g_thread_new ("waiter", waiter_main, &w);
  wait_in_line (&w);
  if (fx->redis != NULL)
    g_assert_cmpint (places (fx), ==, 0);
  test_unlock_ok (held);
  g_thread_join (thread);
  g_assert_true (w.acquired);
  g_assert_cmpuint (test_stats (w.registry).grants_received, ==, 0);
  g_assert_cmpuint (test_stats (fx->registry).grants_given, ==, 0);
  /* Woken by the release's notification. */
  g_assert_cmpuint (test_stats (w.registry).notifications, >=, 1);
  redis_lock_unref (held);
  waiter_clear (&w);
}

/* With nobody in line a release is Spring's: the key deleted and its name published on
 * `registry_key-channel:KEY`, where Spring's waiters listen. */
static void
test_nobody_queued (TestFixture *fx, gconstpointer data)
{
  RedisLock *lock;
  g_autofree char *key = test_lock_key (NAME);
  g_autofree char *channel = g_strdup_printf ("%s-channel:%s", TEST_REGISTRY_KEY, key);
  redisContext *sub;
  redisReply *reply;

  if (!queue_fixture (fx))
    return;
  sub = test_redis_connect (fx->server);
  reply = test_redis_command (sub, "SUBSCRIBE %s", channel);
  freeReplyObject (reply);
  lock = test_obtain (fx->registry, NAME);
  test_lock_ok (lock);
  test_unlock_ok (lock);
  g_assert_cmpint (redisGetReply (sub, (void **)&reply), ==, REDIS_OK);
  g_assert_cmpint (reply->type, ==, REDIS_REPLY_ARRAY);
  g_assert_cmpstr (reply->element[0]->str, ==, "message");
  g_assert_cmpstr (reply->element[2]->str, ==, key);
  freeReplyObject (reply);
  test_assert_free (fx, NAME);
  g_assert_cmpuint (test_stats (fx->registry).grants_given, ==, 0);
  redisFree (sub);
  redis_lock_unref (lock);
}

/* Eight processes taking turns on one lock, each as fast as it can, get shares of the
 * sections within 25 % of the mean: the line serves them in turn. */
static void
test_fair_processes (TestFixture *fx, gconstpointer data)
{
  g_autofree char *exe = g_file_read_link ("/proc/self/exe", NULL);
  Child children[8];
  guint sections[8], total = 0;
  guint64 grants = 0;
  double mean;

  if (!queue_fixture (fx))
    return;
  for (guint i = 0; i < G_N_ELEMENTS (children); i++)
    {
      g_autoptr (GError) error = NULL;
      const char *argv[] = { exe, "--queue-loop", fx->url, "3000", NULL };
      char line[64];
      int out;

      g_assert_true (g_spawn_async_with_pipes (NULL, (char **)argv, NULL, G_SPAWN_DO_NOT_REAP_CHILD,
                                               NULL, NULL, &children[i].pid, &children[i].in, &out,
                                               NULL, &error));
      g_assert_no_error (error);
      children[i].out = fdopen (out, "r");
      g_assert_nonnull (fgets (line, sizeof line, children[i].out));
      g_assert_cmpstr (line, ==, "ready\n");
    }
  for (guint i = 0; i < G_N_ELEMENTS (children); i++)
    g_assert_cmpint (write (children[i].in, "go\n", 3), ==, 3);
  for (guint i = 0; i < G_N_ELEMENTS (children); i++)
    {
      char line[64];
      guint64 granted;
      int status;

      g_assert_nonnull (fgets (line, sizeof line, children[i].out));
      g_assert_cmpint (sscanf (line, "%u %" G_GUINT64_FORMAT, &sections[i], &granted), ==, 2);
      total += sections[i];
      grants += granted;
      g_assert_cmpint (waitpid (children[i].pid, &status, 0), ==, children[i].pid);
      g_assert_true (WIFEXITED (status) && WEXITSTATUS (status) == 0);
      close (children[i].in);
      fclose (children[i].out);
      g_spawn_close_pid (children[i].pid);
    }
  mean = total / (double)G_N_ELEMENTS (children);
  g_test_message ("%u sections, %" G_GUINT64_FORMAT " by a grant; each process's share:", total,
                  grants);
  for (guint i = 0; i < G_N_ELEMENTS (children); i++)
    g_test_message ("  %u (%.0f %% of the mean)", sections[i], 100 * sections[i] / mean);
  g_assert_cmpuint (total, >, 8 * 10);
  for (guint i = 0; i < G_N_ELEMENTS (children); i++)
    {
      g_assert_cmpfloat (sections[i], >=, 0.75 * mean);
      g_assert_cmpfloat (sections[i], <=, 1.25 * mean);
    }
}

int
main (int argc, char **argv)
{
  if (argc == 4 && strcmp (argv[1], "--queue-child") == 0)
    return child_main (argv);
  if (argc == 4 && strcmp (argv[1], "--queue-loop") == 0)
    return loop_main (argv);
  g_test_init (&argc, &argv, NULL);
  test_add_stores_but_quorum ("/queue/grant", NULL, test_grant);
  test_add_stores_but_quorum ("/queue/fifo", NULL, test_fifo);
  test_add_stores ("/queue/inspect", NULL, test_inspect);
  test_add_stores_but_quorum ("/queue/give-up", NULL, test_give_up);
  test_add_stores_but_quorum ("/queue/give-up-granted", NULL, test_give_up_granted);
  test_add_redis ("/queue/crashed-waiter", NULL, test_crashed_waiter);
  test_add_redis ("/queue/grant-to-crashed", NULL, test_grant_to_crashed);
  test_add_stores_but_quorum ("/queue/fencing", NULL, test_fencing);
  test_add_stores_but_quorum ("/queue/switch-off", NULL, test_switch_off);
  test_add_redis ("/queue/nobody-queued", NULL, test_nobody_queued);
  test_add_redis ("/queue/fair-processes", NULL, test_fair_processes);
  return g_test_run ();
}
