/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* common.c: helpers shared by the test programs; see common.h for what each is for.
 * Everything here asserts instead of returning errors: a helper that fails means the
 * test environment is broken, and the test should stop right there with a message.
 */
/* kill(), waitpid(WCONTINUED), O_CLOEXEC and syscall() are POSIX/Linux, not ISO C. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "config.h"

#include "common.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/syscall.h>
#endif

/* --- A raw look at the server ------------------------------------------------------ */

redisContext *
test_redis_connect (RedisLockTestServer *server)
{
  struct timeval tv = { 10, 0 };
  const char *url = redis_lock_test_server_get_url (server);
  const char *password = strstr (url, "?password=");
  redisContext *c
      = redisConnectUnixWithTimeout (redis_lock_test_server_get_socket_path (server), tv);

  g_assert_nonnull (c);
  if (c->err != 0)
    g_error ("cannot connect to the test server: %s", c->errstr);
  g_assert_cmpint (redisSetTimeout (c, tv), ==, REDIS_OK);
  if (password != NULL)
    {
      g_autofree char *plain = g_uri_unescape_string (password + strlen ("?password="), NULL);
      g_autofree char *ok = test_redis_string (c, "AUTH %s", plain);
      g_assert_cmpstr (ok, ==, "OK");
    }
  return c;
}

static redisReply *
command_va (redisContext *c, const char *format, va_list ap)
{
  redisReply *reply = redisvCommand (c, format, ap);

  if (reply == NULL)
    g_error ("raw Redis command \"%s\" failed: %s", format, c->errstr);
  return reply;
}

redisReply *
test_redis_command (redisContext *c, const char *format, ...)
{
  va_list ap;
  redisReply *reply;

  va_start (ap, format);
  reply = command_va (c, format, ap);
  va_end (ap);
  return reply;
}

long long
test_redis_integer (redisContext *c, const char *format, ...)
{
  va_list ap;
  redisReply *reply;
  long long value;

  va_start (ap, format);
  reply = command_va (c, format, ap);
  va_end (ap);
  if (reply->type != REDIS_REPLY_INTEGER)
    g_error ("\"%s\": expected an integer reply, got type %d (%s)", format, reply->type,
             reply->str != NULL ? reply->str : "");
  value = reply->integer;
  freeReplyObject (reply);
  return value;
}

char *
test_redis_string (redisContext *c, const char *format, ...)
{
  va_list ap;
  redisReply *reply;
  char *value = NULL;

  va_start (ap, format);
  reply = command_va (c, format, ap);
  va_end (ap);
  switch (reply->type)
    {
      case REDIS_REPLY_STRING:
      case REDIS_REPLY_STATUS:
        value = g_strndup (reply->str, reply->len);
        break;
      case REDIS_REPLY_NIL:
        break;
      default:
        g_error ("\"%s\": expected a string reply, got type %d (%s)", format, reply->type,
                 reply->str != NULL ? reply->str : "");
    }
  freeReplyObject (reply);
  return value;
}

char *
test_redis_get (redisContext *c, const char *key)
{
  return test_redis_string (c, "GET %b", key, strlen (key));
}

long long
test_redis_pttl (redisContext *c, const char *key)
{
  return test_redis_integer (c, "PTTL %b", key, strlen (key));
}

char *
test_lock_key (const char *name)
{
  return g_strconcat (TEST_REGISTRY_KEY, ":", name, NULL);
}

void
test_redis_reset_stats (redisContext *c)
{
  g_autofree char *ok = test_redis_string (c, "CONFIG RESETSTAT");

  g_assert_cmpstr (ok, ==, "OK");
}

long long
test_redis_command_calls (redisContext *c, const char *command)
{
  g_autofree char *info = test_redis_string (c, "INFO commandstats");
  g_autofree char *prefix = g_strdup_printf ("cmdstat_%s:", command);
  g_auto (GStrv) lines = NULL;

  g_assert_nonnull (info);
  lines = g_strsplit (info, "\n", -1);
  for (gsize i = 0; lines[i] != NULL; i++)
    {
      const char *fields;
      const char *calls;

      if (!g_str_has_prefix (lines[i], prefix))
        continue;
      fields = lines[i] + strlen (prefix);
      calls = strstr (fields, "calls=");
      g_assert_nonnull (calls);
      return g_ascii_strtoll (calls + strlen ("calls="), NULL, 10);
    }
  return 0;
}

/* --- Time ------------------------------------------------------------------------ */

gint64
test_now_ms (void)
{
  return g_get_monotonic_time () / 1000;
}

gboolean
test_wait_until (gboolean (*condition) (gpointer data), gpointer data, gint64 timeout_ms)
{
  gint64 deadline = g_get_monotonic_time () + timeout_ms * 1000;

  for (;;)
    {
      if (condition (data))
        return TRUE;
      if (g_get_monotonic_time () >= deadline)
        return FALSE;
      g_usleep (1000);
    }
}

typedef struct
{
  RedisLockRegistry *registry;
  guint64 at_least;
} ContendedWait;

static gboolean
contended_reached (gpointer data)
{
  ContendedWait *wait = data;

  return test_stats (wait->registry).contended_attempts >= wait->at_least;
}

gboolean
test_wait_contended (RedisLockRegistry *registry, guint64 at_least, gint64 timeout_ms)
{
  ContendedWait wait = { registry, at_least };

  return test_wait_until (contended_reached, &wait, timeout_ms);
}

/* --- A registry's statistics ------------------------------------------------------- */

RedisLockRegistryStats
test_stats (RedisLockRegistry *registry)
{
  RedisLockRegistryStats stats;

  redis_lock_registry_get_stats (registry, &stats);
  return stats;
}

void
test_wait_full_tick (RedisLockRegistry *registry)
{
  /* The tick under way (if any) started before this call; the one after it did not. */
  guint64 start = test_stats (registry).watchdog_ticks;

  TEST_WAIT_UNTIL (test_stats (registry).watchdog_ticks >= start + 2, 10000);
}

/* --- Threads ----------------------------------------------------------------------- */

typedef struct
{
  TestThreadFunc func;
  gpointer data;
  guint index;
} ThreadStart;

static gpointer
thread_main (gpointer user_data)
{
  ThreadStart *start = user_data;

  start->func (start->index, start->data);
  return NULL;
}

void
test_run_threads (guint n_threads, TestThreadFunc func, gpointer data)
{
  g_autofree ThreadStart *starts = g_new0 (ThreadStart, n_threads);
  g_autofree GThread **threads = g_new0 (GThread *, n_threads);

  for (guint i = 0; i < n_threads; i++)
    {
      starts[i].func = func;
      starts[i].data = data;
      starts[i].index = i;
      threads[i] = g_thread_new ("test-worker", thread_main, &starts[i]);
    }
  for (guint i = 0; i < n_threads; i++)
    g_thread_join (threads[i]);
}

gint
test_thread_id (void)
{
#ifdef __linux__
  return (gint)syscall (SYS_gettid);
#else
  return 0;
#endif
}

#ifdef __linux__
static gboolean
thread_blocked (gpointer data)
{
  gint tid = GPOINTER_TO_INT (data);
  g_autofree char *path = g_strdup_printf ("/proc/self/task/%d/stat", tid);
  g_autofree char *stat = NULL;
  const char *paren;

  if (!g_file_get_contents (path, &stat, NULL, NULL))
    return FALSE;
  /* "tid (comm) S ...": the state follows the last parenthesis. */
  paren = strrchr (stat, ')');
  return paren != NULL && paren[1] == ' ' && (paren[2] == 'S' || paren[2] == 'D');
}
#endif

gboolean
test_wait_thread_blocked (gint tid, gint64 timeout_ms)
{
#ifdef __linux__
  return test_wait_until (thread_blocked, GINT_TO_POINTER (tid), timeout_ms);
#else
  return TRUE;
#endif
}

typedef struct
{
  guint n_threads;
  TestThreadFunc func;
  gpointer data;
} Background;

static gpointer
background_main (gpointer user_data)
{
  Background *background = user_data;

  test_run_threads (background->n_threads, background->func, background->data);
  g_free (background);
  return NULL;
}

GThread *
test_run_threads_in_background (guint n_threads, TestThreadFunc func, gpointer data)
{
  Background *background = g_new0 (Background, 1);

  background->n_threads = n_threads;
  background->func = func;
  background->data = data;
  return g_thread_new ("test-threads", background_main, background);
}

typedef struct
{
  gint *tids;
  guint n_tids;
} Tids;

static gboolean
tids_set (gpointer data)
{
  Tids *tids = data;

  for (guint i = 0; i < tids->n_tids; i++)
    if (g_atomic_int_get (&tids->tids[i]) == 0)
      return FALSE;
  return TRUE;
}

void
test_wait_threads_blocked (gint *tids, guint n_tids, gint64 timeout_ms)
{
  Tids wait = { tids, n_tids };

  g_assert_true (test_wait_until (tids_set, &wait, timeout_ms));
  for (guint i = 0; i < n_tids; i++)
    g_assert_true (test_wait_thread_blocked (g_atomic_int_get (&tids[i]), timeout_ms));
}

guint
test_thread_count (void)
{
  GDir *dir = g_dir_open ("/proc/self/task", 0, NULL);
  guint n = 0;

  g_assert_nonnull (dir);
  while (g_dir_read_name (dir) != NULL)
    n++;
  g_dir_close (dir);
  return n;
}

gboolean
test_iterate_until (const guint *counter, guint value, gint64 timeout_ms)
{
  gint64 end = test_now_ms () + timeout_ms;

  while (*counter < value)
    {
      if (test_now_ms () >= end)
        return FALSE;
      if (!g_main_context_iteration (g_main_context_get_thread_default (), FALSE))
        g_usleep (1000);
    }
  return TRUE;
}

gint
test_find_thread (const char *name)
{
  GDir *dir = g_dir_open ("/proc/self/task", 0, NULL);
  const char *entry;
  gint tid = 0;

  g_assert_nonnull (dir);
  while (tid == 0 && (entry = g_dir_read_name (dir)) != NULL)
    {
      g_autofree char *path = g_strdup_printf ("/proc/self/task/%s/comm", entry);
      g_autofree char *comm = NULL;
      if (g_file_get_contents (path, &comm, NULL, NULL) && strcmp (g_strchomp (comm), name) == 0)
        tid = atoi (entry);
    }
  g_dir_close (dir);
  return tid;
}

guint64
test_thread_sleeps (gint tid)
{
  g_autofree char *path = g_strdup_printf ("/proc/self/task/%d/status", tid);
  g_autofree char *status = NULL;
  const char *field;

  g_assert_true (g_file_get_contents (path, &status, NULL, NULL));
  field = strstr (status, "\nvoluntary_ctxt_switches:");
  g_assert_nonnull (field);
  return g_ascii_strtoull (field + strlen ("\nvoluntary_ctxt_switches:"), NULL, 10);
}

void
test_sync_init (TestSync *sync)
{
  pthread_condattr_t attr;

  pthread_mutex_init (&sync->mutex, NULL);
  pthread_condattr_init (&attr);
  pthread_condattr_setclock (&attr, CLOCK_MONOTONIC);
  pthread_cond_init (&sync->cond, &attr);
  pthread_condattr_destroy (&attr);
}

void
test_sync_clear (TestSync *sync)
{
  pthread_mutex_destroy (&sync->mutex);
  pthread_cond_destroy (&sync->cond);
}

void
test_sync_lock (TestSync *sync)
{
  pthread_mutex_lock (&sync->mutex);
}

void
test_sync_unlock (TestSync *sync)
{
  pthread_mutex_unlock (&sync->mutex);
}

void
test_sync_broadcast (TestSync *sync)
{
  pthread_cond_broadcast (&sync->cond);
}

void
test_sync_wait (TestSync *sync)
{
  pthread_cond_wait (&sync->cond, &sync->mutex);
}

gboolean
test_sync_wait_until (TestSync *sync, gint64 end_us)
{
  struct timespec ts;

  if (g_get_monotonic_time () >= end_us)
    return FALSE;
  ts.tv_sec = end_us / G_USEC_PER_SEC;
  ts.tv_nsec = (end_us % G_USEC_PER_SEC) * 1000;
  return pthread_cond_timedwait (&sync->cond, &sync->mutex, &ts) != ETIMEDOUT;
}

gboolean
test_sync_wait_flag (TestSync *sync, const gboolean *flag, gint64 timeout_ms)
{
  gint64 end = g_get_monotonic_time () + timeout_ms * 1000;
  gboolean set;

  test_sync_lock (sync);
  while (!*flag && test_sync_wait_until (sync, end))
    ;
  set = *flag;
  test_sync_unlock (sync);
  return set;
}

/* --- The fixture ----------------------------------------------------------------- */

static void
fixture_init (TestFixture *fixture, TestStore store)
{
  fixture->store = store;
  pthread_mutex_init (&fixture->mutex, NULL);
}

static void
fixture_open_redis (TestFixture *fixture, const char *const *config_lines)
{
  GError *error = NULL;

  fixture_init (fixture, TEST_STORE_REDIS);
  fixture->server = redis_lock_test_server_new_or_skip (config_lines);
  if (fixture->server == NULL)
    return;
  fixture->url = g_strdup (redis_lock_test_server_get_url (fixture->server));
  fixture->registry = redis_lock_registry_new (fixture->url, TEST_REGISTRY_KEY, &error);
  g_assert_no_error (error);
  g_assert_nonnull (fixture->registry);
  fixture->redis = test_redis_connect (fixture->server);
}

void
test_fixture_setup (TestFixture *fixture, gconstpointer data)
{
  fixture_open_redis (fixture, (const char *const *)data);
}

void
test_fixture_setup_redis (TestFixture *fixture, gconstpointer data)
{
  fixture_open_redis (fixture, NULL);
}

/* A store NAME unique in the process and readable in a failure: the test path with
 * its separators as dots, and a serial number. */
static char *
memory_name_new (void)
{
  static gint serial;
  const char *path = g_test_get_path ();
  GString *name = g_string_new ("t");

  for (const char *p = path != NULL ? path : ""; *p != '\0'; p++)
    g_string_append_c (name, g_ascii_isalnum (*p) || *p == '_' || *p == '-' ? *p : '.');
  g_string_append_printf (name, ".%d", g_atomic_int_add (&serial, 1));
  return g_string_free (name, FALSE);
}

void
test_fixture_setup_memory (TestFixture *fixture, gconstpointer data)
{
  GError *error = NULL;

  fixture_init (fixture, TEST_STORE_MEMORY);
  fixture->memory_name = memory_name_new ();
  fixture->url = g_strconcat ("memory://", fixture->memory_name, NULL);
  g_test_message ("store: %s", fixture->url);
  /* A memory store lives while a registry has it open. The keeper holds it open from
   * setup to teardown, as the server outlives the registries of a Redis test; its
   * registry key is another one, so it never hears of the test's leases. */
  fixture->keeper = redis_lock_registry_new (fixture->url, "test-store-keeper", &error);
  g_assert_no_error (error);
  fixture->registry = redis_lock_registry_new (fixture->url, TEST_REGISTRY_KEY, &error);
  g_assert_no_error (error);
  g_assert_nonnull (fixture->registry);
  fixture->counters = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
}

/* The cluster the /cluster tests of this program share: started by the first, stopped
 * when the program exits (and by the kernel, should it crash: the nodes die with it). */
static RedisLockTestCluster *shared_cluster;

static void
free_shared_cluster (void)
{
  g_clear_pointer (&shared_cluster, redis_lock_test_cluster_free);
}

/* A raw connection to node @node of @cluster. */
static redisContext *
cluster_node_connect (RedisLockTestCluster *cluster, guint node)
{
  struct timeval tv = { 10, 0 };
  redisContext *c
      = redisConnectWithTimeout ("127.0.0.1", redis_lock_test_cluster_get_port (cluster, node), tv);

  g_assert_nonnull (c);
  if (c->err != 0)
    g_error ("cannot connect to the test cluster: %s", c->errstr);
  g_assert_cmpint (redisSetTimeout (c, tv), ==, REDIS_OK);
  return c;
}

/* A raw connection to the master that serves @key. */
static redisContext *
cluster_connect_for_key (RedisLockTestCluster *cluster, const char *key)
{
  /* The helper is driven by one thread at a time; store helpers run on many. */
  static pthread_mutex_t helper_mutex = PTHREAD_MUTEX_INITIALIZER;
  int owner;

  pthread_mutex_lock (&helper_mutex);
  owner = redis_lock_test_cluster_get_slot_owner (cluster, redis_lock_test_cluster_key_slot (key));
  pthread_mutex_unlock (&helper_mutex);

  g_assert_cmpint (owner, >=, 0);
  return cluster_node_connect (cluster, (guint) owner);
}

void
test_fixture_setup_cluster (TestFixture *fixture, gconstpointer data)
{
  GError *error = NULL;

  fixture_init (fixture, TEST_STORE_CLUSTER);
  if (shared_cluster == NULL)
    {
      shared_cluster = redis_lock_test_cluster_new_or_skip (3, 0);
      if (shared_cluster == NULL)
        return;
      atexit (free_shared_cluster);
    }
  fixture->cluster = shared_cluster;
  for (guint node = 0; node < redis_lock_test_cluster_get_n_nodes (shared_cluster); node++)
    {
      redisContext *c = cluster_node_connect (shared_cluster, node);
      g_autofree char *ok = test_redis_string (c, "FLUSHALL");
      g_assert_cmpstr (ok, ==, "OK");
      redisFree (c);
    }
  fixture->url = g_strdup (redis_lock_test_cluster_get_url (shared_cluster));
  fixture->registry = redis_lock_registry_new (fixture->url, TEST_REGISTRY_KEY, &error);
  g_assert_no_error (error);
  g_assert_nonnull (fixture->registry);
}

/* The TLS server the /tls tests of this program share. */
static RedisLockTestServer *shared_tls;

static void
free_shared_tls (void)
{
  g_clear_pointer (&shared_tls, redis_lock_test_server_free);
}

void
test_fixture_setup_tls (TestFixture *fixture, gconstpointer data)
{
  GError *error = NULL;
  g_autofree char *ok = NULL;

  fixture_init (fixture, TEST_STORE_TLS);
  if (shared_tls == NULL)
    {
      /* A build without TLS refuses rediss:// URLs: nothing to test. */
      RedisLockRegistry *probe = redis_lock_registry_new ("rediss://127.0.0.1:1", "probe", &error);
      g_assert_null (probe);
      if (g_error_matches (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID))
        {
          g_error_free (error);
          g_test_skip ("this build has no TLS");
          return;
        }
      g_clear_error (&error);
      shared_tls = redis_lock_test_server_new_tls_or_skip (REDIS_LOCK_TEST_TLS_DEFAULT, NULL);
      if (shared_tls == NULL)
        return;
      atexit (free_shared_tls);
    }
  fixture->server = shared_tls;
  fixture->redis = test_redis_connect (shared_tls);
  ok = test_redis_string (fixture->redis, "FLUSHALL");
  g_assert_cmpstr (ok, ==, "OK");
  fixture->url = g_strdup (redis_lock_test_server_get_url (shared_tls));
  fixture->registry = redis_lock_registry_new (fixture->url, TEST_REGISTRY_KEY, &error);
  g_assert_no_error (error);
  g_assert_nonnull (fixture->registry);
}

void
test_fixture_setup_quorum (TestFixture *fixture, gconstpointer data)
{
  fixture_init (fixture, TEST_STORE_QUORUM);
  for (guint i = 0; i < TEST_QUORUM_NODES; i++)
    {
      fixture->nodes[i] = redis_lock_test_server_new_or_skip (NULL);
      if (fixture->nodes[i] == NULL)
        return;
      fixture->urls[i] = g_strdup (redis_lock_test_server_get_url (fixture->nodes[i]));
    }
  fixture->server = fixture->nodes[0];
  fixture->redis = test_redis_connect (fixture->server);
  fixture->url = g_strdup (fixture->urls[0]);
  fixture->registry = test_registry_new (fixture);
}

void
test_fixture_teardown (TestFixture *fixture, gconstpointer data)
{
  g_clear_pointer (&fixture->registry, redis_lock_registry_unref);
  g_clear_pointer (&fixture->keeper, redis_lock_registry_unref);
  g_clear_pointer (&fixture->redis, redisFree);
  if (fixture->store == TEST_STORE_TLS || fixture->store == TEST_STORE_QUORUM)
    fixture->server = NULL; /* the program's, shared; or the first node */
  for (guint i = 0; i < TEST_QUORUM_NODES; i++)
    {
      g_clear_pointer (&fixture->nodes[i], redis_lock_test_server_free);
      g_clear_pointer (&fixture->urls[i], g_free);
    }
  g_clear_pointer (&fixture->server, redis_lock_test_server_free);
  g_clear_pointer (&fixture->counters, g_hash_table_unref);
  g_clear_pointer (&fixture->url, g_free);
  g_clear_pointer (&fixture->memory_name, g_free);
  pthread_mutex_destroy (&fixture->mutex);
}

static void
add_one (const char *prefix, const char *path, gconstpointer data,
         void (*setup) (TestFixture *, gconstpointer), TestFixtureFunc func)
{
  g_autofree char *full = g_strconcat (prefix, path, NULL);

  g_assert_true (path[0] == '/');
  g_test_add (full, TestFixture, data, setup, func, test_fixture_teardown);
}

static void
add_stores (const char *path, gconstpointer data, TestFixtureFunc func, gboolean quorum)
{
  static const struct
  {
    const char *name;
    void (*setup) (TestFixture *, gconstpointer);
  } stores[] = {
    { "redis", test_fixture_setup_redis },
    { "memory", test_fixture_setup_memory },
    { "cluster", test_fixture_setup_cluster },
    { "tls", test_fixture_setup_tls },
    { "quorum", test_fixture_setup_quorum },
  };
  /* REDISLOCK_TEST_STORES=redis,memory picks stores (default: all); the sanitizer
   * builds of CI leave out the cluster, whose own program still runs there. */
  const char *picked = g_getenv ("REDISLOCK_TEST_STORES");
  g_auto (GStrv) names = picked != NULL ? g_strsplit (picked, ",", -1) : NULL;

  for (gsize i = 0; i < G_N_ELEMENTS (stores); i++)
    if ((names == NULL || g_strv_contains ((const char *const *) names, stores[i].name))
        && (quorum || stores[i].setup != test_fixture_setup_quorum))
      {
        g_autofree char *prefix = g_strconcat ("/", stores[i].name, NULL);
        add_one (prefix, path, data, stores[i].setup, func);
      }
}

void
test_add_stores (const char *path, gconstpointer data, TestFixtureFunc func)
{
  add_stores (path, data, func, TRUE);
}

void
test_add_stores_but_quorum (const char *path, gconstpointer data, TestFixtureFunc func)
{
  add_stores (path, data, func, FALSE);
}

guint
test_store_nodes (TestFixture *fixture)
{
  return fixture->store == TEST_STORE_QUORUM ? TEST_QUORUM_NODES : 1;
}

void
test_add_redis (const char *path, gconstpointer data, TestFixtureFunc func)
{
  add_one ("/redis", path, data, test_fixture_setup_redis, func);
}

int
test_free_tcp_port (void)
{
  struct sockaddr_in addr = { 0 };
  socklen_t len = sizeof addr;
  int fd = socket (AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int port;

  g_assert_cmpint (fd, >=, 0);
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
  g_assert_cmpint (bind (fd, (struct sockaddr *) &addr, sizeof addr), ==, 0);
  g_assert_cmpint (getsockname (fd, (struct sockaddr *) &addr, &len), ==, 0);
  port = ntohs (addr.sin_port);
  close (fd);
  return port;
}

RedisLockRegistry *
test_registry_new_on (const char *url)
{
  GError *error = NULL;
  RedisLockRegistry *registry = redis_lock_registry_new (url, TEST_REGISTRY_KEY, &error);

  g_assert_no_error (error);
  g_assert_nonnull (registry);
  return registry;
}

gpointer
test_waiter_main (gpointer data)
{
  TestWaiter *w = data;
  GError *error = NULL;

  w->acquired = redis_lock_try_lock_for (w->lock, 20000, NULL, &error);
  g_assert_no_error (error);
  w->returned_ms = test_now_ms ();
  if (w->acquired)
    test_unlock_ok (w->lock);
  return NULL;
}

RedisLockRegistry *
test_registry_new (TestFixture *fixture)
{
  GError *error = NULL;
  RedisLockRegistry *registry
      = fixture->store == TEST_STORE_QUORUM
            ? redis_lock_registry_new_quorum ((const char *const *) fixture->urls,
                                              TEST_REGISTRY_KEY, &error)
            : redis_lock_registry_new (fixture->url, TEST_REGISTRY_KEY, &error);

  g_assert_no_error (error);
  g_assert_nonnull (registry);
  return registry;
}

RedisLock *
test_obtain (RedisLockRegistry *registry, const char *name)
{
  GError *error = NULL;
  RedisLock *lock = redis_lock_registry_obtain (registry, name, &error);

  g_assert_no_error (error);
  g_assert_nonnull (lock);
  return lock;
}

void
test_lock_ok (RedisLock *lock)
{
  GError *error = NULL;
  gboolean ok = redis_lock_lock (lock, &error);

  /* The error first: its message says why. */
  g_assert_no_error (error);
  g_assert_true (ok);
}

void
test_unlock_ok (RedisLock *lock)
{
  GError *error = NULL;
  gboolean ok = redis_lock_unlock (lock, &error);

  g_assert_no_error (error);
  g_assert_true (ok);
}

void
test_unlock_lease_lost (RedisLock *lock)
{
  GError *error = NULL;

  g_assert_false (redis_lock_unlock (lock, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_LEASE_LOST);
  g_clear_error (&error);
  /* The local hold is gone all the same. */
  g_assert_false (redis_lock_is_held_by_current_thread (lock));
  g_assert_false (redis_lock_is_acquired_in_this_process (lock));
}

/* --- The store, seen from outside, on either store ---------------------------------- */

/* On Redis: takes the fixture's raw connection for the calling thread and returns it
 * (give it back with redis_end()). On a cluster: a new connection to the master that
 * serves @key, closed by redis_end(). On the memory store: NULL. */
static redisContext *
redis_begin (TestFixture *fixture, const char *key)
{
  g_assert_nonnull (fixture->url);
  if (fixture->store == TEST_STORE_CLUSTER)
    return cluster_connect_for_key (fixture->cluster, key);
  if (fixture->store == TEST_STORE_MEMORY)
    {
      g_assert_nonnull (fixture->memory_name);
      return NULL;
    }
  g_assert_nonnull (fixture->redis);
  pthread_mutex_lock (&fixture->mutex);
  return fixture->redis;
}

static void
redis_end (TestFixture *fixture, redisContext *redis)
{
  if (fixture->store == TEST_STORE_CLUSTER)
    redisFree (redis);
  else
    pthread_mutex_unlock (&fixture->mutex);
}

/* A new raw connection to quorum node @i. */
static redisContext *
quorum_node (TestFixture *fixture, guint i)
{
  return test_redis_connect (fixture->nodes[i]);
}

/* Quorum: the value a majority of the nodes holds for @key, with the shortest TTL
 * among them in *pttl (-2 and NULL when no majority holds one value). */
static char *
quorum_get (TestFixture *fixture, const char *key, gint64 *pttl)
{
  char *values[TEST_QUORUM_NODES];
  gint64 pttls[TEST_QUORUM_NODES];
  char *found = NULL;

  *pttl = -2;
  for (guint i = 0; i < TEST_QUORUM_NODES; i++)
    {
      redisContext *c = quorum_node (fixture, i);
      values[i] = test_redis_get (c, key);
      pttls[i] = test_redis_pttl (c, key);
      redisFree (c);
    }
  for (guint i = 0; i < TEST_QUORUM_NODES && found == NULL; i++)
    {
      guint count = 0;
      gint64 least = G_MAXINT64;
      for (guint k = 0; values[i] != NULL && k < TEST_QUORUM_NODES; k++)
        if (g_strcmp0 (values[i], values[k]) == 0)
          {
            count++;
            least = MIN (least, pttls[k] < 0 ? G_MAXINT64 - 1 : pttls[k]);
          }
      if (count > TEST_QUORUM_NODES / 2)
        {
          found = g_strdup (values[i]);
          *pttl = least == G_MAXINT64 - 1 ? -1 : least;
        }
    }
  for (guint i = 0; i < TEST_QUORUM_NODES; i++)
    g_free (values[i]);
  return found;
}

/* Quorum: runs the integer command @format on @key on every node; the sum. */
static long long
quorum_integer (TestFixture *fixture, const char *format, const char *key)
{
  long long sum = 0;

  for (guint i = 0; i < TEST_QUORUM_NODES; i++)
    {
      redisContext *c = quorum_node (fixture, i);
      sum += test_redis_integer (c, format, key, strlen (key));
      redisFree (c);
    }
  return sum;
}

char *
test_store_get_owner (TestFixture *fixture, const char *key)
{
  redisContext *redis;
  char *owner;
  gint64 pttl;

  if (fixture->store == TEST_STORE_QUORUM)
    return quorum_get (fixture, key, &pttl);
  redis = redis_begin (fixture, key);

  if (redis == NULL)
    return redis_lock_memory_store_get_owner (fixture->memory_name, key);
  owner = test_redis_get (redis, key);
  redis_end (fixture, redis);
  return owner;
}

gint64
test_store_get_pttl (TestFixture *fixture, const char *key)
{
  redisContext *redis;
  gint64 pttl;

  if (fixture->store == TEST_STORE_QUORUM)
    {
      g_free (quorum_get (fixture, key, &pttl));
      return pttl;
    }
  redis = redis_begin (fixture, key);

  if (redis == NULL)
    return redis_lock_memory_store_get_pttl (fixture->memory_name, key);
  pttl = test_redis_pttl (redis, key);
  redis_end (fixture, redis);
  return pttl;
}

gboolean
test_store_exists (TestFixture *fixture, const char *key)
{
  redisContext *redis;
  long long n;

  if (fixture->store == TEST_STORE_QUORUM)
    return quorum_integer (fixture, "EXISTS %b", key) > 0;
  redis = redis_begin (fixture, key);

  if (redis == NULL)
    return redis_lock_memory_store_get_pttl (fixture->memory_name, key) != -2;
  n = test_redis_integer (redis, "EXISTS %b", key, strlen (key));
  redis_end (fixture, redis);
  g_assert_cmpint (n, >=, 0);
  g_assert_cmpint (n, <=, 1);
  return n == 1;
}

gboolean
test_store_delete (TestFixture *fixture, const char *key)
{
  redisContext *redis;
  long long n;

  if (fixture->store == TEST_STORE_QUORUM)
    return quorum_integer (fixture, "DEL %b", key) > 0;
  redis = redis_begin (fixture, key);

  if (redis == NULL)
    return redis_lock_memory_store_expire (fixture->memory_name, key);
  n = test_redis_integer (redis, "DEL %b", key, strlen (key));
  redis_end (fixture, redis);
  return n == 1;
}

void
test_store_set_owner (TestFixture *fixture, const char *key, const char *owner, gint64 ttl_ms)
{
  redisContext *redis;
  g_autofree char *ok = NULL;

  g_assert_cmpint (ttl_ms, !=, 0);
  if (fixture->store == TEST_STORE_QUORUM)
    {
      guint set = 0;
      for (guint i = 0; i < TEST_QUORUM_NODES; i++)
        {
          redisContext *c = quorum_node (fixture, i);
          g_autofree char *reply
              = ttl_ms < 0 ? test_redis_string (c, "SET %b %s XX", key, strlen (key), owner)
                           : test_redis_string (c, "SET %b %s PX %lld XX", key, strlen (key),
                                                owner, (long long) ttl_ms);
          set += g_strcmp0 (reply, "OK") == 0;
          redisFree (c);
        }
      /* The key existed on a majority. */
      g_assert_cmpuint (set, >, TEST_QUORUM_NODES / 2);
      return;
    }
  redis = redis_begin (fixture, key);
  if (redis == NULL)
    {
      g_assert_true (redis_lock_memory_store_steal (fixture->memory_name, key, owner, ttl_ms));
      return;
    }
  if (ttl_ms < 0)
    ok = test_redis_string (redis, "SET %b %s XX", key, strlen (key), owner);
  else
    ok = test_redis_string (redis, "SET %b %s PX %lld XX", key, strlen (key), owner,
                            (long long)ttl_ms);
  redis_end (fixture, redis);
  /* nil: the key did not exist. */
  g_assert_cmpstr (ok, ==, "OK");
}

gboolean
test_value_is_of (const char *value, RedisLockRegistry *registry)
{
  const char *id = redis_lock_registry_get_client_id (registry);
  gsize len = strlen (id);
  const char *serial;

  if (value == NULL || strncmp (value, id, len) != 0 || value[len] != ':')
    return FALSE;
  serial = value + len + 1;
  if (*serial == '\0')
    return FALSE;
  for (const char *p = serial; *p != '\0'; p++)
    if (!g_ascii_isdigit (*p))
      return FALSE;
  return TRUE;
}

void
test_assert_held_by (TestFixture *fixture, const char *name, RedisLockRegistry *owner,
                     gint64 max_pttl_ms)
{
  g_autofree char *key = test_lock_key (name);
  g_autofree char *value = test_store_get_owner (fixture, key);
  gint64 pttl = test_store_get_pttl (fixture, key);

  test_assert_value_of (value, owner);
  g_assert_cmpint (pttl, >, 0);
  g_assert_cmpint (pttl, <=, max_pttl_ms);
}

void
test_assert_free (TestFixture *fixture, const char *name)
{
  g_autofree char *key = test_lock_key (name);

  g_assert_false (test_store_exists (fixture, key));
}

/* --- A counter shared by critical sections ------------------------------------------- */

struct _TestCounter
{
  redisContext *redis; /* Redis: a connection of this handle's own */
  char *name;
  gint64 *value; /* memory: the number in fixture->counters */
};

TestCounter *
test_counter_open (TestFixture *fixture, const char *name)
{
  TestCounter *counter = g_new0 (TestCounter, 1);

  counter->name = g_strdup (name);
  if (fixture->store == TEST_STORE_REDIS || fixture->store == TEST_STORE_TLS
      || fixture->store == TEST_STORE_QUORUM)
    {
      counter->redis = test_redis_connect (fixture->server);
      return counter;
    }
  if (fixture->store == TEST_STORE_CLUSTER)
    {
      counter->redis = cluster_connect_for_key (fixture->cluster, name);
      return counter;
    }
  pthread_mutex_lock (&fixture->mutex);
  counter->value = g_hash_table_lookup (fixture->counters, name);
  if (counter->value == NULL)
    {
      counter->value = g_new0 (gint64, 1);
      g_hash_table_insert (fixture->counters, g_strdup (name), counter->value);
    }
  pthread_mutex_unlock (&fixture->mutex);
  return counter;
}

gint64
test_counter_get (TestCounter *counter)
{
  g_autofree char *value = NULL;

  if (counter->redis == NULL)
    return __atomic_load_n (counter->value, __ATOMIC_RELAXED);
  value = test_redis_get (counter->redis, counter->name);
  return value != NULL ? g_ascii_strtoll (value, NULL, 10) : 0;
}

void
test_counter_set (TestCounter *counter, gint64 value)
{
  g_autofree char *ok = NULL;

  if (counter->redis == NULL)
    {
      __atomic_store_n (counter->value, value, __ATOMIC_RELAXED);
      return;
    }
  ok = test_redis_string (counter->redis, "SET %s %lld", counter->name, (long long)value);
  g_assert_cmpstr (ok, ==, "OK");
}

void
test_counter_free (TestCounter *counter)
{
  if (counter == NULL)
    return;
  g_clear_pointer (&counter->redis, redisFree);
  g_free (counter->name);
  g_free (counter);
}

/* --- A thread that takes a lock and reports ------------------------------------------ */

gpointer
test_taker_main (gpointer taker)
{
  TestTaker *t = taker;

  g_atomic_int_set (&t->tid, test_thread_id ());
  t->called_ms = test_now_ms ();
  if (t->wait_ms == G_MININT64)
    t->result = redis_lock_lock (t->lock, &t->error);
  else
    t->result = redis_lock_try_lock_for (t->lock, t->wait_ms, t->cancellable, &t->error);
  t->returned_ms = test_now_ms ();
  if (t->result && t->fixture != NULL)
    t->value_while_held = test_store_get_owner (t->fixture, redis_lock_get_key (t->lock));
  if (t->result)
    g_assert_true (redis_lock_unlock (t->lock, NULL));
  g_atomic_int_set (&t->done, 1);
  return NULL;
}

GThread *
test_taker_start (TestTaker *taker, RedisLock *lock, gint64 wait_ms)
{
  taker->lock = lock;
  taker->wait_ms = wait_ms;
  return g_thread_new ("taker", test_taker_main, taker);
}

gboolean
test_taker_started (gpointer taker)
{
  return g_atomic_int_get (&((TestTaker *)taker)->tid) != 0;
}

gboolean
test_taker_done (gpointer taker)
{
  return g_atomic_int_get (&((TestTaker *)taker)->done) != 0;
}

void
test_taker_join (TestTaker *taker, GThread *thread, gint64 timeout_ms)
{
  g_assert_true (test_wait_until (test_taker_done, taker, timeout_ms));
  g_thread_join (thread);
}

void
test_taker_clear (TestTaker *taker)
{
  g_clear_error (&taker->error);
  g_clear_pointer (&taker->value_while_held, g_free);
}

/* --- What the lease-lost callback saw ------------------------------------------------ */

void
test_lease_lost_init (TestLeaseLost *lease_lost)
{
  memset (lease_lost, 0, sizeof *lease_lost);
  test_sync_init (&lease_lost->sync);
}

void
test_lease_lost_clear (TestLeaseLost *lease_lost)
{
  test_sync_clear (&lease_lost->sync);
}

void
test_lease_lost_cb (RedisLock *lock, gpointer lease_lost)
{
  TestLeaseLost *ll = lease_lost;

  test_sync_lock (&ll->sync);
  if (ll->calls++ == 0)
    ll->at_ms = test_now_ms ();
  ll->lock = lock;
  ll->thread = g_thread_self ();
  if (ll->cancellable != NULL)
    ll->cancelled_first = g_cancellable_is_cancelled (ll->cancellable);
  test_sync_broadcast (&ll->sync);
  test_sync_unlock (&ll->sync);
}

void
test_lease_lost_destroy (gpointer lease_lost)
{
  TestLeaseLost *ll = lease_lost;

  g_atomic_int_inc (&ll->destroyed);
}

void
test_lease_lost_set_cancellable (TestLeaseLost *lease_lost, GCancellable *cancellable)
{
  test_sync_lock (&lease_lost->sync);
  lease_lost->cancellable = cancellable;
  test_sync_unlock (&lease_lost->sync);
}

guint
test_lease_lost_wait (TestLeaseLost *lease_lost, gint64 timeout_ms)
{
  gint64 deadline = g_get_monotonic_time () + timeout_ms * 1000;
  guint calls;

  test_sync_lock (&lease_lost->sync);
  while (lease_lost->calls == 0 && test_sync_wait_until (&lease_lost->sync, deadline))
    ;
  calls = lease_lost->calls;
  test_sync_unlock (&lease_lost->sync);
  return calls;
}

guint
test_lease_lost_calls (TestLeaseLost *lease_lost)
{
  guint calls;

  test_sync_lock (&lease_lost->sync);
  calls = lease_lost->calls;
  test_sync_unlock (&lease_lost->sync);
  return calls;
}

/* --- A forked child ------------------------------------------------------------------ */

void
test_run_child (TestChildFunc func, gpointer data)
{
  pid_t pid;
  int status = 0;
  int code;
  gint64 deadline;

  fflush (stdout);
  fflush (stderr);
  pid = fork ();
  g_assert_cmpint (pid, >=, 0);
  if (pid == 0)
    _exit (func (data));

  deadline = g_get_monotonic_time () + 20 * G_TIME_SPAN_SECOND;
  for (;;)
    {
      pid_t got = waitpid (pid, &status, WNOHANG);

      if (got == pid)
        break;
      g_assert_cmpint (got, ==, 0);
      if (g_get_monotonic_time () > deadline)
        {
          kill (pid, SIGKILL);
          waitpid (pid, &status, 0);
          g_error ("the child process hung (killed after 20 s)");
        }
      g_usleep (1000);
    }
  if (!WIFEXITED (status))
    g_error ("the child process died from signal %d", WTERMSIG (status));
  code = WEXITSTATUS (status);
  if (code != 0)
    g_test_message ("check %d failed in the child", code);
  g_assert_cmpint (code, ==, 0);
}
