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

static gboolean
heard_more (gpointer data)
{
  ContendedWait *wait = data;

  return test_stats (wait->registry).notifications > wait->at_least;
}

gboolean
test_wait_heard (RedisLockRegistry *registry, guint64 before, gint64 timeout_ms)
{
  ContendedWait wait = { registry, before };

  return test_wait_until (heard_more, &wait, timeout_ms);
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
redisContext *
test_cluster_connect_for_key (RedisLockTestCluster *cluster, const char *key)
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
      counter->redis = test_cluster_connect_for_key (fixture->cluster, name);
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
