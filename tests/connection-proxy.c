/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* connection-proxy.c: narrower faults through the fault-injecting proxy (proxy.h),
 * which hit a registry whose server stays up: a request held back, a reply dropped or
 * delayed, every connection cut. Part of the connection test program (connection.c
 * adds these tests).
 */
#include "config.h"

#include "connection-tests.h"
#include "proxy.h"

#include <string.h>
#include <unistd.h>

/* --- The fault-injecting proxy --------------------------------------------------------- */

static RedisLockRegistry *
proxied_registry (TestProxy *proxy)
{
  g_autoptr (GError) error = NULL;
  RedisLockRegistry *registry
      = redis_lock_registry_new (test_proxy_get_url (proxy), TEST_REGISTRY_KEY, &error);

  g_assert_no_error (error);
  g_assert_nonnull (registry);
  return registry;
}

static void
test_proxy_forwarding (TestFixture *f, gconstpointer data)
{
  g_autoptr (TestProxy) proxy = NULL;
  g_autoptr (TestProxy) front = NULL;
  RedisLockRegistry *registries[2];

  g_test_summary ("Through the proxy (to the server's Unix socket, and through a second proxy "
                  "to the first one's TCP port), a registry locks and unlocks as directly.");
  TEST_SKIP_IF_NO_SERVER (f);

  proxy = test_proxy_new_unix (redis_lock_test_server_get_socket_path (f->server));
  front = test_proxy_new_tcp (test_proxy_get_port (proxy));
  g_assert_true (g_str_has_prefix (test_proxy_get_url (proxy), "redis://127.0.0.1:"));
  g_assert_cmpuint (test_proxy_connections_accepted (proxy), ==, 0);
  registries[0] = proxied_registry (proxy);
  registries[1] = proxied_registry (front);
  g_assert_cmpuint (test_proxy_connections_accepted (proxy), >=, 2);
  g_assert_cmpuint (test_proxy_connections_accepted (front), >=, 1);

  for (guint i = 0; i < G_N_ELEMENTS (registries); i++)
    {
      g_autoptr (RedisLock) lock = test_obtain (registries[i], "proxied");
      g_autofree char *value = NULL;

      test_lock_ok (lock);
      value = test_redis_get (f->redis, TEST_REGISTRY_KEY ":proxied");
      test_assert_value_of (value, registries[i]);
      test_unlock_ok (lock);
      g_assert_cmpint (test_redis_integer (f->redis, "EXISTS %s", TEST_REGISTRY_KEY ":proxied"),
                       ==, 0);
    }
  redis_lock_registry_unref (registries[1]);
  redis_lock_registry_unref (registries[0]);
}

/* Queues @resp, a request already in the wire format, and writes it out. */
static void
raw_send (redisContext *c, const char *resp)
{
  int done = 0;

  g_assert_cmpint (redisAppendFormattedCommand (c, resp, strlen (resp)), ==, REDIS_OK);
  while (!done)
    g_assert_cmpint (redisBufferWrite (c, &done), ==, REDIS_OK);
}

static long long
raw_integer_reply (redisContext *c)
{
  redisReply *reply = NULL;
  long long value;

  g_assert_cmpint (redisGetReply (c, (void **)&reply), ==, REDIS_OK);
  g_assert_cmpint (reply->type, ==, REDIS_REPLY_INTEGER);
  value = reply->integer;
  freeReplyObject (reply);
  return value;
}

static char *
list_items (redisContext *c, const char *key)
{
  redisReply *reply = test_redis_command (c, "LRANGE %s 0 -1", key);
  GString *items = g_string_new (NULL);

  g_assert_cmpint (reply->type, ==, REDIS_REPLY_ARRAY);
  for (size_t i = 0; i < reply->elements; i++)
    g_string_append_printf (items, "%s%s", i > 0 ? "," : "", reply->element[i]->str);
  freeReplyObject (reply);
  return g_string_free (items, FALSE);
}

#define RPUSH_ORDER(item) "*3\r\n$5\r\nRPUSH\r\n$5\r\norder\r\n$1\r\n" item "\r\n"

static void
test_proxy_hold (TestFixture *f, gconstpointer data)
{
  struct timeval tv = { 10, 0 };
  const char *held[] = { RPUSH_ORDER ("M"), RPUSH_ORDER ("b"), RPUSH_ORDER ("c") };
  g_autoptr (TestProxy) proxy = NULL;
  g_autoptr (RedisLock) lock = NULL;
  g_autofree char *items = NULL;
  g_autofree char *pong = NULL;
  RedisLockRegistry *registry;
  redisContext *raw, *other;
  TestTaker taker = { 0 };
  GThread *thread;
  gsize held_len = 0;

  g_test_summary ("A held request, and what its client sends after it, reach the server only "
                  "when released, in order, while other connections flow; a lock call held "
                  "that way completes once released.");
  TEST_SKIP_IF_NO_SERVER (f);

  proxy = test_proxy_new_unix (redis_lock_test_server_get_socket_path (f->server));
  raw = redisConnectWithTimeout ("127.0.0.1", test_proxy_get_port (proxy), tv);
  other = redisConnectWithTimeout ("127.0.0.1", test_proxy_get_port (proxy), tv);
  g_assert_true (raw != NULL && raw->err == 0 && other != NULL && other->err == 0);
  redisSetTimeout (raw, tv);
  redisSetTimeout (other, tv);

  raw_send (raw, RPUSH_ORDER ("a"));
  g_assert_cmpint (raw_integer_reply (raw), ==, 1);

  /* "$1\r\nM" is only in the request pushing "M". */
  test_proxy_hold_requests (proxy, "$1\r\nM\r\n");
  raw_send (raw, held[0]);
  g_assert_true (test_proxy_wait_held (proxy, 5000));
  raw_send (raw, held[1]);
  raw_send (raw, held[2]);
  for (guint i = 0; i < G_N_ELEMENTS (held); i++)
    held_len += strlen (held[i]);
  TEST_WAIT_UNTIL (test_proxy_held_bytes (proxy) == held_len, 5000);

  /* Nothing of it reached the server; another connection through the proxy flows. */
  items = list_items (f->redis, "order");
  g_assert_cmpstr (items, ==, "a");
  g_clear_pointer (&items, g_free);
  pong = test_redis_string (other, "PING");
  g_assert_cmpstr (pong, ==, "PONG");

  test_proxy_release_held (proxy);
  g_assert_cmpuint (test_proxy_held_bytes (proxy), ==, 0);
  g_assert_cmpint (raw_integer_reply (raw), ==, 2);
  g_assert_cmpint (raw_integer_reply (raw), ==, 3);
  g_assert_cmpint (raw_integer_reply (raw), ==, 4);
  items = list_items (f->redis, "order");
  g_assert_cmpstr (items, ==, "a,M,b,c");
  redisFree (other);
  redisFree (raw);

  /* A registry's lock request, held: the lock call waits for it. */
  registry = proxied_registry (proxy);
  redis_lock_registry_set_command_timeout_ms (registry, 10000);
  lock = test_obtain (registry, "held-request");
  test_proxy_hold_requests (proxy, TEST_REGISTRY_KEY ":held-request");
  taker.fixture = f;
  thread = test_taker_start (&taker, lock, G_MININT64);
  g_assert_true (test_proxy_wait_held (proxy, 5000));
  g_assert_false (test_store_exists (f, TEST_REGISTRY_KEY ":held-request"));
  g_assert_false (g_atomic_int_get (&taker.done));
  test_proxy_release_held (proxy);
  test_taker_join (&taker, thread, 10000);
  g_assert_true (taker.result);
  g_assert_no_error (taker.error);
  test_assert_value_of (taker.value_while_held, registry);
  test_taker_clear (&taker);
  g_clear_pointer (&lock, redis_lock_unref);
  redis_lock_registry_unref (registry);
}

static void
test_proxy_dropped_reply (TestFixture *f, gconstpointer data)
{
  g_autoptr (TestProxy) proxy = NULL;
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (RedisLock) after = NULL;
  RedisLockRegistry *registry;
  GError *error = NULL;
  gint64 start;
  gboolean ok;

  g_test_summary ("A reply that never comes makes the call fail with CONNECTION within the "
                  "command timeout; the registry works again on the next call.");
  TEST_SKIP_IF_NO_SERVER (f);

  proxy = test_proxy_new_unix (redis_lock_test_server_get_socket_path (f->server));
  registry = proxied_registry (proxy);
  redis_lock_registry_set_command_timeout_ms (registry, TIMEOUT_MS);
  lock = test_obtain (registry, "reply-dropped");
  test_lock_ok (lock);
  test_unlock_ok (lock);
  /* The subscriber (started with the first lease) is up: the reply dropped next is
   * the lock call's, not its SUBSCRIBE's. */
  TEST_WAIT_UNTIL (test_stats (registry).subscriber_connections >= 1, 10000);

  test_proxy_drop_replies (proxy, 1);
  start = test_now_ms ();
  ok = redis_lock_try_lock (lock, &error);
  assert_fails_in_time (ok, error, start, "try_lock with its reply dropped");
  g_clear_error (&error);
  g_assert_cmpuint (test_proxy_replies_dropped (proxy), ==, 1);
  g_assert_false (redis_lock_is_held_by_current_thread (lock));

  /* A fresh connection replaces the one that timed out. */
  after = test_obtain (registry, "after-the-drop");
  test_lock_ok (after);
  test_unlock_ok (after);
  g_clear_pointer (&after, redis_lock_unref);
  g_clear_pointer (&lock, redis_lock_unref);
  redis_lock_registry_unref (registry);
}

static void
test_proxy_delayed_replies (TestFixture *f, gconstpointer data)
{
  g_autoptr (TestProxy) proxy = NULL;
  g_autoptr (RedisLock) lock = NULL;
  RedisLockRegistry *registry;
  GError *error = NULL;
  gint64 start;
  gboolean ok;

  g_test_summary ("Replies delayed past the command timeout make a call fail with CONNECTION "
                  "in time; delayed less, they only slow it down.");
  TEST_SKIP_IF_NO_SERVER (f);

  proxy = test_proxy_new_unix (redis_lock_test_server_get_socket_path (f->server));
  registry = proxied_registry (proxy);
  redis_lock_registry_set_command_timeout_ms (registry, TIMEOUT_MS);
  lock = test_obtain (registry, "reply-delayed");

  test_proxy_delay_replies (proxy, 3 * TIMEOUT_MS);
  start = test_now_ms ();
  ok = redis_lock_try_lock (lock, &error);
  assert_fails_in_time (ok, error, start, "try_lock with its reply delayed");
  g_clear_error (&error);
  g_assert_false (redis_lock_is_held_by_current_thread (lock));

  test_proxy_delay_replies (proxy, TIMEOUT_MS / 4);
  start = test_now_ms ();
  ok = redis_lock_try_lock (lock, &error);
  g_assert_no_error (error);
  g_assert_true (ok);
  g_assert_cmpint (test_now_ms () - start, >=, TIMEOUT_MS / 4);
  test_unlock_ok (lock);

  test_proxy_delay_replies (proxy, 0);
  g_clear_pointer (&lock, redis_lock_unref);
  redis_lock_registry_unref (registry);
}

static void
test_proxy_killed_connections (TestFixture *f, gconstpointer data)
{
  g_autoptr (TestProxy) proxy = NULL;
  g_autoptr (RedisLock) lock = NULL;
  RedisLockRegistry *registry;
  guint accepted, open;

  g_test_summary ("With every connection cut under it, a registry whose server stayed up "
                  "reconnects on the next call, which succeeds.");
  TEST_SKIP_IF_NO_SERVER (f);

  proxy = test_proxy_new_unix (redis_lock_test_server_get_socket_path (f->server));
  registry = proxied_registry (proxy);
  lock = test_obtain (registry, "cut");
  test_lock_ok (lock);
  test_unlock_ok (lock);
  g_assert_cmpuint (test_proxy_connections_open (proxy), >=, 1);
  accepted = test_proxy_connections_accepted (proxy);

  test_proxy_kill_connections (proxy);
  /* None of the connections cut is open. A background connection of the registry (the
   * guard of its leases) may already have come back: every connection open now was
   * accepted after the cut. (Read in this order, both counts cover it.) */
  open = test_proxy_connections_open (proxy);
  g_assert_cmpuint (open, <=, test_proxy_connections_accepted (proxy) - accepted);

  test_lock_ok (lock);
  test_unlock_ok (lock);
  g_assert_cmpuint (test_proxy_connections_accepted (proxy), >, accepted);
  g_clear_pointer (&lock, redis_lock_unref);
  redis_lock_registry_unref (registry);
}

void
connection_add_proxy_tests (void)
{
  g_test_add ("/connection/proxy/forwarding", TestFixture, NULL, test_fixture_setup,
              test_proxy_forwarding, test_fixture_teardown);
  g_test_add ("/connection/proxy/hold-and-release", TestFixture, NULL, test_fixture_setup,
              test_proxy_hold, test_fixture_teardown);
  g_test_add ("/connection/proxy/dropped-reply", TestFixture, NULL, test_fixture_setup,
              test_proxy_dropped_reply, test_fixture_teardown);
  g_test_add ("/connection/proxy/delayed-replies", TestFixture, NULL, test_fixture_setup,
              test_proxy_delayed_replies, test_fixture_teardown);
  g_test_add ("/connection/proxy/killed-connections", TestFixture, NULL, test_fixture_setup,
              test_proxy_killed_connections, test_fixture_teardown);
}
