/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* stress-faults.c: the faults the stress test injects, and its two small fault cases.
 *
 * inject_faults() runs a scenario's faults one kind after the other, each followed by
 * some progress of the workers: CLIENT KILL of random library connections every 100 ms
 * from a thread of its own; a worker frozen with SIGSTOP inside a section held with a
 * short TTL, resumed only once another worker has taken that lock over; redis-server
 * killed and restarted while a lock is held; redis-server frozen. A fault only acts and
 * counts what it did (in the Controller or the Row); whether the workers behaved under
 * it is judged afterwards from their reports (stress-check.c). The two small fault
 * cases are tests of their own, without workers: a holder frozen past its lease while a
 * thread of its registry waits (the probe, this program run with --probe, is that
 * holder), and an unlock whose release reply is lost to CLIENT KILL.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "config.h"

#include "stress.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

/* ------------------------------------------------------------------------------------- */
/* Faults injected into a scenario. */

typedef struct
{
  RedisLockTestServer *server; /* only its socket path is read */
  gint stop;                   /* atomic */
  guint64 kills, pubsub_kills, rounds;
  GThread *thread;
} Killer;

/* Every 100 ms: CLIENT LIST, then CLIENT KILL a random quarter (at least one) of the
 * library's connections, data and subscription alike. The harness's connections are
 * named "stress-*"; a connection whose last command is NULL or CLIENT might be one of
 * them about to be named, so it is spared too. */
static gpointer
killer_main (gpointer data)
{
  Killer *k = data;
  redisContext *c = NULL;
  GRand *rand = g_rand_new ();

  while (!g_atomic_int_get (&k->stop))
    {
      g_autoptr (GArray) ids = g_array_new (FALSE, FALSE, sizeof (long long));
      g_autoptr (GArray) pubsub = g_array_new (FALSE, FALSE, sizeof (gboolean));
      g_auto (GStrv) lines = NULL;
      redisReply *reply;
      guint n_kill;

      if (c == NULL)
        c = named_connection (k->server, "stress-killer");
      reply = c != NULL ? redisCommand (c, "CLIENT LIST") : NULL;
      if (reply == NULL || reply->type != REDIS_REPLY_STRING)
        {
          if (reply != NULL)
            freeReplyObject (reply);
          g_clear_pointer (&c, redisFree);
          g_usleep (50 * 1000);
          continue;
        }
      lines = g_strsplit (reply->str, "\n", -1);
      freeReplyObject (reply);
      for (guint i = 0; lines[i] != NULL; i++)
        {
          g_auto (GStrv) fields = g_strsplit (g_strchomp (lines[i]), " ", -1);
          long long id = -1;
          gboolean spare = FALSE, is_pubsub = FALSE;

          for (guint f = 0; fields[f] != NULL; f++)
            {
              const char *v = strchr (fields[f], '=');
              if (v == NULL)
                continue;
              v++;
              if (g_str_has_prefix (fields[f], "id="))
                id = g_ascii_strtoll (v, NULL, 10);
              else if (g_str_has_prefix (fields[f], "name="))
                spare |= *v != '\0';
              else if (g_str_has_prefix (fields[f], "cmd="))
                spare |= g_str_equal (v, "NULL") || g_str_has_prefix (v, "client");
              else if (g_str_has_prefix (fields[f], "psub="))
                is_pubsub = g_ascii_strtoll (v, NULL, 10) > 0;
            }
          if (id >= 0 && !spare)
            {
              g_array_append_val (ids, id);
              g_array_append_val (pubsub, is_pubsub);
            }
        }
      n_kill = MAX (1, ids->len / 4);
      for (guint i = 0; i < n_kill && ids->len > 0; i++)
        {
          guint pick = (guint)g_rand_int_range (rand, 0, (gint32)ids->len);
          long long id = g_array_index (ids, long long, pick);
          gboolean is_pubsub = g_array_index (pubsub, gboolean, pick);

          reply = redisCommand (c, "CLIENT KILL ID %lld", id);
          if (reply != NULL && reply->type == REDIS_REPLY_INTEGER && reply->integer == 1)
            {
              k->kills++;
              if (is_pubsub)
                k->pubsub_kills++;
            }
          if (reply != NULL)
            freeReplyObject (reply);
          g_array_remove_index_fast (ids, pick);
          g_array_remove_index_fast (pubsub, pick);
        }
      k->rounds++;
      g_usleep (100 * 1000); /* fault timing: one round every 100 ms */
    }
  if (c != NULL)
    redisFree (c);
  g_rand_free (rand);
  return NULL;
}

/* The section the frozen worker @victim stopped in (its thread 0 of registry 0
 * freezes), as it recorded it just before, and the lock name in @name. */
static char *
frozen_holder (Controller *c, guint victim, char **name)
{
  g_autofree char *prefix = g_strdup_printf ("p%u.r0.t0.", victim);
  redisReply *reply = controller_command (c, "GETDEL " DATA_PREFIX ":frozen");
  const char *colon;
  char *id = NULL;

  /* NAME:ID, written by the worker right before it stopped itself. */
  if (reply != NULL && reply->type == REDIS_REPLY_STRING
      && (colon = strchr (reply->str, ':')) != NULL && g_str_has_prefix (colon + 1, prefix))
    {
      *name = g_strndup (reply->str, (gsize) (colon - reply->str));
      id = g_strdup (colon + 1);
    }
  if (reply != NULL)
    freeReplyObject (reply);
  return id;
}

/* Polls the holder key of @name until it no longer holds @id. */
static gboolean
wait_takeover (Controller *c, const char *name, const char *id, gint64 timeout_ms)
{
  gint64 deadline = g_get_monotonic_time () + timeout_ms * 1000;

  for (;;)
    {
      redisReply *reply = controller_command (c, "GET " DATA_PREFIX ":holder:%s", name);
      gboolean same
          = reply != NULL && reply->type == REDIS_REPLY_STRING && g_str_equal (reply->str, id);

      if (reply != NULL)
        freeReplyObject (reply);
      if (!same)
        return TRUE;
      if (g_get_monotonic_time () >= deadline)
        return FALSE;
      g_usleep (2 * 1000);
    }
}

/* A worker freezes itself with SIGSTOP inside its next section (held with the short
 * TTL); it stays frozen for stop_ms, well past that TTL, then goes on. */
static void
pause_worker (Controller *c, guint victim)
{
  Child *child = &c->children[victim];
  gint64 deadline = g_get_monotonic_time () + 30 * G_USEC_PER_SEC;
  gboolean stopped = FALSE;
  g_autofree char *frozen = NULL;
  g_autofree char *frozen_name = NULL;

  if (write (child->stdin_fd, "s", 1) != 1)
    {
      problem (c, "cannot tell worker %u to freeze: %s", victim, g_strerror (errno));
      return;
    }
  while (!stopped && g_get_monotonic_time () < deadline)
    {
      int status;
      pid_t r = waitpid (child->pid, &status, WNOHANG | WUNTRACED);

      if (r == child->pid && WIFSTOPPED (status))
        stopped = TRUE;
      else if (r == child->pid)
        {
          child->exited = TRUE;
          child->status = status;
          g_spawn_close_pid (child->pid);
          problem (c, "worker %u exited instead of freezing", victim);
          return;
        }
      else
        g_usleep (2 * 1000);
    }
  if (!stopped)
    {
      problem (c, "worker %u did not freeze within 30 s", victim);
      return;
    }
  if (c->s->history)
    {
      /* No holder key to watch: the history shows who entered meanwhile. */
      g_usleep (c->s->stop_ms * 1000); /* fault timing: frozen longer than its TTL */
      kill (child->pid, SIGCONT);
      c->pauses_done++;
      return;
    }
  frozen = frozen_holder (c, victim, &frozen_name);
  g_usleep (c->s->stop_ms * 1000); /* fault timing: frozen longer than its TTL */
  /* Its lease has expired; resume it only once another worker has entered the section
   * (overwritten the holder key), so the overlap really happens. */
  if (frozen == NULL)
    {
      for (guint i = 0; i < c->s->names; i++)
        {
          redisReply *reply = controller_command (c, "GET " DATA_PREFIX ":holder:name-%u", i);
          g_test_message ("holder of name-%u: %s", i,
                          reply == NULL                       ? "(no reply)"
                          : reply->type == REDIS_REPLY_STRING ? reply->str
                                                              : "(none)");
          if (reply != NULL)
            freeReplyObject (reply);
        }
      problem (c, "worker %u froze, but recorded no section it froze in", victim);
    }
  else if (!wait_takeover (c, frozen_name, frozen, 30000))
    problem (c, "nobody took over %s within 30 s of worker %u freezing in it", frozen_name, victim);
  kill (child->pid, SIGCONT);
  c->pauses_done++;
}

static gboolean
some_lock_held (gpointer data)
{
  Controller *c = data;
  gboolean held = FALSE;

  for (guint i = 0; i < c->s->names && !held; i++)
    {
      /* The keys of the scenario's member (stress-family.c): a lock's (a leader's), the
       * first two permits, the writer lease and the set of reading registries. */
      redisReply *reply
          = c->s->member == MEMBER_SEMAPHORE
                ? controller_command (c, "EXISTS " STRESS_REGISTRY_KEY ":{name-%u}:sem:0 "
                                         STRESS_REGISTRY_KEY ":{name-%u}:sem:1", i, i)
            : c->s->member == MEMBER_RWLOCK
                ? controller_command (c, "EXISTS " STRESS_REGISTRY_KEY ":{name-%u}:rw:w "
                                         STRESS_REGISTRY_KEY ":{name-%u}:rw:readers", i, i)
                : controller_command (c, "EXISTS " STRESS_REGISTRY_KEY ":name-%u", i);
      held = reply != NULL && reply->type == REDIS_REPLY_INTEGER && reply->integer >= 1;
      if (reply != NULL)
        freeReplyObject (reply);
    }
  return held;
}

/* redis-server killed (SIGKILL, no persistence: every key is gone) while a lock is
 * held, and started again on the same socket. */
static void
restart_server (Controller *c)
{
  g_autoptr (GError) error = NULL;

  gint64 from;

  if (!test_wait_until (some_lock_held, c, 10000))
    problem (c, "restart: no lock was held within 10 s");
  from = g_get_monotonic_time ();
  redis_lock_test_server_stop (c->server);
  g_clear_pointer (&c->redis, redisFree);
  if (!redis_lock_test_server_start (c->server, &error))
    {
      problem (c, "restart: %s", error->message);
      return;
    }
  note_lease_fault (c, LEASE_FAULT_ALL_NAMES, from);
  c->restarts_done++;
}

/* redis-server frozen (SIGSTOP): connections stay open, nothing is answered. */
static void
outage (Controller *c)
{
  redis_lock_test_server_pause (c->server);
  g_usleep (c->s->outage_ms * 1000); /* fault timing: how long the server is unreachable */
  redis_lock_test_server_resume (c->server);
  c->outages_done++;
}

/* The scenario's faults, one kind after the other, each followed by some progress;
 * CLIENT KILL runs in a thread of its own from the first fault for at least kill_ms.
 * Frozen workers are added to @victims ("p<index>"); the row gets the kill count. */
void
inject_faults (Controller *c, GHashTable *victims, Row *row)
{
  const Scenario *s = c->s;
  Killer killer = { 0 };
  gint64 kill_until = g_get_monotonic_time () + s->kill_ms * 1000;

  if (s->kill_ms > 0)
    {
      killer.server = c->server;
      killer.thread = g_thread_new ("stress-killer", killer_main, &killer);
    }
  for (guint i = 0; i < s->pauses; i++)
    {
      guint victim = i % s->procs;
      g_hash_table_add (victims, g_strdup_printf ("p%u", victim));
      pause_worker (c, victim);
      if (!wait_progress (c, progress_total (c) + POST_FAULT_SECTIONS, 30000))
        problem (c, "no progress within 30 s after worker %u resumed", victim);
    }
  for (guint i = 0; i < s->restarts; i++)
    {
      restart_server (c);
      if (!wait_progress (c, progress_total (c) + POST_FAULT_SECTIONS, 30000))
        problem (c, "no progress within 30 s after restart %u", i + 1);
    }
  for (guint i = 0; i < s->outages; i++)
    {
      outage (c);
      if (!wait_progress (c, progress_total (c) + POST_FAULT_SECTIONS, 30000))
        problem (c, "no progress within 30 s after outage %u", i + 1);
    }
  if (s->kill_ms > 0)
    {
      gint64 left = kill_until - g_get_monotonic_time ();
      if (left > 0)
        g_usleep (left); /* fault timing: keep killing for kill_ms */
      g_atomic_int_set (&killer.stop, 1);
      g_thread_join (killer.thread);
      row->kills = killer.kills;
      g_test_message ("%s: %" G_GUINT64_FORMAT " connections killed (%" G_GUINT64_FORMAT
                      " subscriptions) in %" G_GUINT64_FORMAT " rounds",
                      s->name, killer.kills, killer.pubsub_kills, killer.rounds);
      if (!wait_progress (c, progress_total (c) + POST_FAULT_SECTIONS, 30000))
        problem (c, "no progress within 30 s after the kills stopped");
    }
}

/* ------------------------------------------------------------------------------------- */
/* Two small fault cases. */

/* The frozen-holder probe, a worker process of its own: thread 0 holds "probe" with a
 * short TTL while thread 1 waits for it, then the process freezes; after the controller
 * has let the lease expire, taken "probe" itself and resumed us, thread 0 unlocks and
 * thread 1 reports whether it got the lock and who owned the key when it did. */
typedef struct
{
  RedisLock *lock;
  const char *socket_path;
  RedisLockRegistry *registry;
  gint tid; /* atomic */
} Probe;

static gpointer
probe_waiter (gpointer data)
{
  Probe *probe = data;
  g_autoptr (GError) error = NULL;
  gboolean acquired;

  g_atomic_int_set (&probe->tid, test_thread_id ());
  acquired = redis_lock_try_lock_for (probe->lock, 5000, NULL, &error);
  if (acquired)
    {
      struct timeval tv = { RAW_TIMEOUT_S, 0 };
      redisContext *c = redisConnectUnixWithTimeout (probe->socket_path, tv);
      redisReply *reply = c != NULL && c->err == 0
                              ? redisCommand (c, "GET %s", redis_lock_get_key (probe->lock))
                              : NULL;
      gboolean own = reply != NULL && reply->type == REDIS_REPLY_STRING
                     && test_value_is_of (reply->str, probe->registry);

      printf ("waiter acquired, key owner %s\n", own ? "self" : "OTHER");
      if (reply != NULL)
        freeReplyObject (reply);
      if (c != NULL)
        redisFree (c);
      redis_lock_unlock (probe->lock, NULL);
    }
  else
    printf ("waiter %s\n", error != NULL ? error_code_name (error) : "timed-out");
  return NULL;
}

int
probe_main (WorkerOptions *opt)
{
  g_autoptr (GError) error = NULL;
  RedisLockRegistry *registry;
  Probe probe = { 0 };
  GThread *waiter;
  gboolean ok;

#ifdef __linux__
  prctl (PR_SET_PDEATHSIG, SIGKILL);
#endif
  g_error_free (g_error_new_literal (REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION,
                                     "first error")); /* see worker_main(), stress-worker.c */
  registry = redis_lock_registry_new (opt->url, STRESS_REGISTRY_KEY, &error);
  if (registry == NULL)
    {
      printf ("failure probe registry: %s\n", error->message);
      return 2;
    }
  probe.lock = redis_lock_registry_obtain (registry, "probe", &error);
  probe.socket_path = opt->socket_path;
  probe.registry = registry;
  if (!redis_lock_try_lock_full (probe.lock, 0, opt->stop_ttl_ms, NULL, &error))
    {
      printf ("failure probe lock: %s\n", error != NULL ? error->message : "busy");
      return 2;
    }
  waiter = g_thread_new ("probe-waiter", probe_waiter, &probe);
  while (g_atomic_int_get (&probe.tid) == 0)
    g_usleep (1000);
  test_wait_thread_blocked (g_atomic_int_get (&probe.tid), 5000);
  fflush (stdout);
  raise (SIGSTOP);
  ok = redis_lock_unlock (probe.lock, &error);
  printf ("holder unlock %s\n", ok ? "OK" : error_code_name (error));
  fflush (stdout);
  g_thread_join (waiter);
  printf ("end\n");
  fflush (stdout);
  redis_lock_unref (probe.lock);
  redis_lock_registry_unref (registry);
  return 0;
}

/* A holder frozen past its TTL while another thread of its registry waits for the
 * lock: once resumed, its unlock must report LEASE_LOST and the waiter must not be
 * handed a lease another registry now owns. Three rounds, since the outcome can depend
 * on whether the holder or its registry's watchdog runs first after the freeze. */
void
test_frozen_holder_waiter (void)
{
  g_autoptr (RedisLockTestServer) server = NULL;
  g_autoptr (GPtrArray) failures = g_ptr_array_new_with_free_func (g_free);

  g_test_summary (
      "A holder frozen (SIGSTOP) past its lease while a thread of its registry waits "
      "for the lock: after another registry takes the key, the holder's unlock reports "
      "LEASE_LOST and the waiter never holds the lock while the key is someone else's.");
  server = redis_lock_test_server_new_or_skip (NULL);
  if (server == NULL)
    return;

  for (guint round = 0; round < 3; round++)
    {
      g_autoptr (GError) error = NULL;
      g_autoptr (RedisLockRegistry) other = NULL;
      g_autoptr (RedisLock) lock = NULL;
      g_autofree char *url_arg
          = g_strdup_printf ("--url=%s", redis_lock_test_server_get_url (server));
      g_autofree char *socket_arg
          = g_strdup_printf ("--socket=%s", redis_lock_test_server_get_socket_path (server));
      const char *argv[] = { self_exe, "--probe", url_arg, socket_arg, "--stop-ttl=150", NULL };
      g_autoptr (GString) output = g_string_new (NULL);
      gboolean stopped = FALSE, taken;
      gint64 deadline;
      Child child = { 0 };
      char buf[1024];
      ssize_t n;
      int status;

      g_assert_true (g_spawn_async_with_pipes (NULL, (char **)argv, NULL, G_SPAWN_DO_NOT_REAP_CHILD,
                                               NULL, NULL, &child.pid, NULL, &child.stdout_fd, NULL,
                                               &error));
      g_assert_no_error (error);
      deadline = g_get_monotonic_time () + 30 * G_USEC_PER_SEC;
      while (!stopped && g_get_monotonic_time () < deadline)
        {
          pid_t r = waitpid (child.pid, &status, WNOHANG | WUNTRACED);
          if (r == child.pid && !WIFSTOPPED (status))
            break;
          stopped = r == child.pid;
          if (!stopped)
            g_usleep (2 * 1000);
        }
      if (!stopped)
        {
          kill (child.pid, SIGKILL);
          g_error ("the probe process did not freeze");
        }
      g_usleep (500 * 1000); /* fault timing: frozen well past the 150 ms lease */
      other = redis_lock_registry_new (redis_lock_test_server_get_url (server), STRESS_REGISTRY_KEY,
                                       &error);
      g_assert_no_error (error);
      lock = test_obtain (other, "probe");
      taken = redis_lock_try_lock_for (lock, 2000, NULL, &error);
      g_assert_no_error (error);
      g_assert_true (taken);
      kill (child.pid, SIGCONT);
      g_usleep (300 * 1000); /* fault timing: the other owner keeps the key a while */
      g_assert_true (redis_lock_unlock (lock, &error));
      g_assert_no_error (error);

      while ((n = read (child.stdout_fd, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR))
        if (n > 0)
          g_string_append_len (output, buf, n);
      close (child.stdout_fd);
      waitpid (child.pid, &status, 0);
      g_spawn_close_pid (child.pid);
      g_test_message ("round %u: %s", round + 1, output->str);
      g_assert_true (WIFEXITED (status) && WEXITSTATUS (status) == 0);
      g_assert_nonnull (strstr (output->str, "end\n"));
      if (strstr (output->str, "holder unlock LEASE_LOST\n") == NULL)
        g_ptr_array_add (failures,
                         g_strdup_printf ("round %u: the frozen holder's unlock did not report "
                                          "LEASE_LOST",
                                          round + 1));
      if (strstr (output->str, "key owner OTHER") != NULL)
        g_ptr_array_add (failures, g_strdup_printf ("round %u: the waiter was given the lock while "
                                                    "another registry owned the key",
                                                    round + 1));
    }
  for (guint i = 0; i < failures->len; i++)
    g_test_message ("%s", (const char *)g_ptr_array_index (failures, i));
  if (failures->len > 0)
    g_test_fail_printf ("%s (and %u more)", (const char *)g_ptr_array_index (failures, 0),
                        failures->len - 1);
}

/* The outermost unlock whose release ran in Redis but whose reply was lost (its
 * connection killed right after): the lease was released by this very unlock, nobody
 * else owned the key, so LEASE_LOST ("the data may have been changed concurrently")
 * would be a false alarm. CONNECTION (outcome unknown) or success are both honest.
 * The server is frozen while the release and then the CLIENT KILL are queued, so on
 * resume it usually runs the release first; ten rounds. */
typedef struct
{
  RedisLock *lock;
  TestSync sync;
  gint stage; /* 1: locked, 2: unlock now, 3: unlocked; under sync */
  gint tid;   /* atomic */
  gboolean ok;
  GError *error;
} KilledRelease;

static gpointer
killed_release_main (gpointer data)
{
  KilledRelease *k = data;
  GError *error = NULL;

  g_assert_true (redis_lock_lock (k->lock, &error));
  g_assert_no_error (error);
  test_sync_lock (&k->sync);
  k->stage = 1;
  test_sync_broadcast (&k->sync);
  while (k->stage < 2)
    test_sync_wait (&k->sync);
  test_sync_unlock (&k->sync);
  g_atomic_int_set (&k->tid, test_thread_id ());
  k->ok = redis_lock_unlock (k->lock, &k->error);
  test_sync_lock (&k->sync);
  k->stage = 3;
  test_sync_broadcast (&k->sync);
  test_sync_unlock (&k->sync);
  return NULL;
}

/* The subscriber connections of the server @c is connected to. */
static guint
pubsub_count (redisContext *c)
{
  redisReply *reply = redisCommand (c, "CLIENT LIST TYPE pubsub");
  guint n = 0;

  g_assert_nonnull (reply);
  g_assert_cmpint (reply->type, ==, REDIS_REPLY_STRING);
  for (const char *p = reply->str; p < reply->str + reply->len; p++)
    n += *p == '\n';
  freeReplyObject (reply);
  return n;
}

void
test_killed_release_reply (void)
{
  g_autoptr (RedisLockTestServer) server = NULL;
  guint false_alarms = 0;

  g_test_summary (
      "An unlock whose release ran but whose reply was lost to CLIENT KILL never "
      "reports LEASE_LOST: the lease was released by that unlock, nobody else owned it.");
  server = redis_lock_test_server_new_or_skip (NULL);
  if (server == NULL)
    return;

  for (guint round = 0; round < 10; round++)
    {
      g_autoptr (GError) error = NULL;
      g_autoptr (RedisLockRegistry) registry = redis_lock_registry_new (
          redis_lock_test_server_get_url (server), STRESS_REGISTRY_KEY, &error);
      redisContext *c = named_connection (server, "stress-controller");
      KilledRelease k = { 0 };
      g_autoptr (GArray) ids = g_array_new (FALSE, FALSE, sizeof (long long));
      g_auto (GStrv) lines = NULL;
      redisReply *reply;
      GThread *thread;
      long long self;
      int done = 0;

      g_assert_no_error (error);
      g_assert_nonnull (c);
      k.lock = test_obtain (registry, "released");
      test_sync_init (&k.sync);
      thread = g_thread_new ("killed-release", killed_release_main, &k);
      test_sync_lock (&k.sync);
      while (k.stage < 1)
        test_sync_wait (&k.sync);
      test_sync_unlock (&k.sync);

      /* The registry's only data connection now: the pooled one the release will reuse
       * (its other one, the subscription it makes with its first lease, is of type
       * pubsub once confirmed). */
      reply = redisCommand (c, "CLIENT ID");
      self = reply->integer;
      freeReplyObject (reply);
      TEST_WAIT_UNTIL (pubsub_count (c) == 1, 10000);
      reply = redisCommand (c, "CLIENT LIST TYPE normal");
      lines = g_strsplit (reply->str, "\n", -1);
      freeReplyObject (reply);
      for (guint i = 0; lines[i] != NULL; i++)
        if (g_str_has_prefix (lines[i], "id="))
          {
            long long id = g_ascii_strtoll (lines[i] + 3, NULL, 10);
            if (id != self)
              g_array_append_val (ids, id);
          }
      g_assert_cmpuint (ids->len, ==, 1);

      redis_lock_test_server_pause (server);
      test_sync_lock (&k.sync);
      k.stage = 2;
      test_sync_broadcast (&k.sync);
      test_sync_unlock (&k.sync);
      while (g_atomic_int_get (&k.tid) == 0)
        g_usleep (1000);
      /* The release is written and the thread waits for its reply. */
      g_assert_true (test_wait_thread_blocked (g_atomic_int_get (&k.tid), 10000));
      redisAppendCommand (c, "CLIENT KILL ID %lld", g_array_index (ids, long long, 0));
      while (!done)
        g_assert_cmpint (redisBufferWrite (c, &done), ==, REDIS_OK);
      redis_lock_test_server_resume (server);
      g_thread_join (thread);
      g_assert_cmpint (redisGetReply (c, (void **)&reply), ==, REDIS_OK);
      freeReplyObject (reply);
      g_assert_cmpint (test_redis_integer (c, "EXISTS " STRESS_REGISTRY_KEY ":released"), ==, 0);
      g_test_message ("round %u: unlock %s", round + 1, k.ok ? "succeeded" : k.error->message);
      if (g_error_matches (k.error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_LEASE_LOST))
        false_alarms++;
      g_clear_error (&k.error);
      redis_lock_unref (k.lock);
      test_sync_clear (&k.sync);
      redisFree (c);
    }
  if (false_alarms > 0)
    g_test_fail_printf (
        "%u of 10 unlocks reported LEASE_LOST for a lease they had released themselves",
        false_alarms);
}
