/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* tls.c: locks over TLS (rediss:// URLs), against a real redis-server --tls-port.
 *
 * The test helper starts each server with a throwaway CA, a server certificate for
 * localhost and 127.0.0.1, a client certificate and an unrelated CA. The tests check
 * that locking, waiting for a notification and watchdog renewals work over TLS, and
 * that every way verification can fail (an unknown CA, an expired certificate, a name
 * the certificate does not carry, a missing client certificate) and every mix-up of
 * plain and TLS ports ends with CONNECTION naming the cause, within the connect
 * timeout: never a silent success, never a hang.
 */
#include "config.h"

#include <string.h>
#include <unistd.h>

#include "common.h"

#define REGISTRY_KEY TEST_REGISTRY_KEY

/* A TLS test server, or NULL (the test skipped) when redis-server or openssl is
 * missing or this build has no TLS. */
static RedisLockTestServer *
tls_server_new (RedisLockTestTlsFlags flags)
{
  g_autoptr (GError) error = NULL;
  RedisLockRegistry *registry = redis_lock_registry_new ("rediss://127.0.0.1:1", "probe", &error);

  g_assert_null (registry);
  if (g_error_matches (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID))
    {
      g_assert_nonnull (strstr (error->message, "built without TLS"));
      g_test_skip ("this build has no TLS");
      return NULL;
    }
  return redis_lock_test_server_new_tls_or_skip (flags, NULL);
}

/* redis_lock_registry_new (@url) must fail with CONNECTION within the connect timeout
 * (1 s here), with @cause in the message. */
static void
assert_refused (const char *url, const char *cause)
{
  g_autoptr (GError) error = NULL;
  gint64 t0 = test_now_ms ();
  RedisLockRegistry *registry;

  /* The timeouts are the registry's; a refused registry cannot be given them first,
   * so the bound is the default connect timeout (3 s) plus slack. */
  registry = redis_lock_registry_new (url, REGISTRY_KEY, &error);
  g_assert_null (registry);
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION);
  g_test_message ("%s", error->message);
  if (cause != NULL)
    g_assert_nonnull (strstr (error->message, cause));
  g_assert_cmpint (test_now_ms () - t0, <, 3000 + 2000);
}

/* The server's URL with its ca= replaced by @ca and &sni=@sni added (either may be
 * NULL to keep or leave out). */
static char *
url_with (RedisLockTestServer *server, const char *ca, const char *sni)
{
  int port = redis_lock_test_server_get_port (server);
  const char *default_ca = redis_lock_test_server_get_tls_file (server, REDIS_LOCK_TEST_TLS_CA);

  return g_strdup_printf ("rediss://127.0.0.1:%d?ca=%s%s%s", port, ca != NULL ? ca : default_ca,
                          sni != NULL ? "&sni=" : "", sni != NULL ? sni : "");
}

/* --- Working over TLS -------------------------------------------------------------- */

static void
test_lock_unlock (void)
{
  g_autoptr (RedisLockTestServer) server
      = tls_server_new (REDIS_LOCK_TEST_TLS_DEFAULT);
  g_autoptr (RedisLockRegistry) registry = NULL;
  g_autoptr (RedisLock) lock = NULL;
  g_autofree char *value = NULL;
  redisContext *raw;

  g_test_summary ("Over rediss:// with the test CA, lock and unlock work and the key is on the "
                  "server");
  if (server == NULL)
    return;
  g_assert_true (g_str_has_prefix (redis_lock_test_server_get_url (server), "rediss://"));
  registry = test_registry_new_on (redis_lock_test_server_get_url (server));
  lock = test_obtain (registry, "tls");
  test_lock_ok (lock);
  raw = test_redis_connect (server);
  value = test_redis_get (raw, redis_lock_get_key (lock));
  test_assert_value_of (value, registry);
  test_unlock_ok (lock);
  g_assert_cmpint (test_redis_integer (raw, "EXISTS %s", redis_lock_get_key (lock)), ==, 0);
  redisFree (raw);
}

static void
test_by_host_name (void)
{
  g_autoptr (RedisLockTestServer) server
      = tls_server_new (REDIS_LOCK_TEST_TLS_DEFAULT);
  g_autoptr (RedisLockRegistry) registry = NULL;
  g_autoptr (RedisLock) lock = NULL;
  g_autofree char *url = NULL;

  g_test_summary ("A host name the certificate carries (localhost) verifies, and so does sni= "
                  "naming it while connecting by address");
  if (server == NULL)
    return;
  url = g_strdup_printf ("rediss://localhost:%d?ca=%s", redis_lock_test_server_get_port (server),
                         redis_lock_test_server_get_tls_file (server, REDIS_LOCK_TEST_TLS_CA));
  registry = test_registry_new_on (url);
  lock = test_obtain (registry, "named");
  test_lock_ok (lock);
  test_unlock_ok (lock);
  g_clear_pointer (&lock, redis_lock_unref);
  g_clear_pointer (&registry, redis_lock_registry_unref);
  g_free (url);
  url = url_with (server, NULL, "localhost");
  registry = test_registry_new_on (url);
  lock = test_obtain (registry, "named");
  test_lock_ok (lock);
  test_unlock_ok (lock);
}

static void
test_notification_and_watchdog (void)
{
  g_autoptr (RedisLockTestServer) server
      = tls_server_new (REDIS_LOCK_TEST_TLS_DEFAULT);
  g_autoptr (RedisLockRegistry) a = NULL;
  g_autoptr (RedisLockRegistry) b = NULL;
  g_autoptr (RedisLock) la = NULL;
  g_autoptr (RedisLock) lb = NULL;
  TestWaiter w = { 0 };
  GThread *thread;
  gint64 unlocked_ms;
  guint64 notifications;
  redisContext *raw;

  g_test_summary ("Over TLS, the watchdog keeps a short lease alive through several ticks, and "
                  "a waiter of another registry is woken by the unlock notification (its "
                  "subscription is a TLS connection too)");
  if (server == NULL)
    return;
  a = test_registry_new_on (redis_lock_test_server_get_url (server));
  b = test_registry_new_on (redis_lock_test_server_get_url (server));
  redis_lock_registry_set_expire_after_ms (a, 600);
  /* Polling could not explain a quick wake-up. */
  redis_lock_registry_set_idle_between_tries_ms (b, 20000);
  la = test_obtain (a, "shared");
  lb = test_obtain (b, "shared");

  test_lock_ok (la);
  for (int i = 0; i < 3; i++)
    test_wait_full_tick (a);
  g_assert_false (redis_lock_is_lease_lost (la));
  test_unlock_ok (la);

  /* A long lease now: the waiter's sleep, bounded by the holder's PTTL, cannot end
   * before the unlock by itself. */
  redis_lock_registry_set_expire_after_ms (a, 30000);
  test_lock_ok (la);

  /* b's subscription is up before its waiter starts: the subscription coming up wakes
   * waiters too, and must not stand in for the notification. */
  g_assert_false (redis_lock_try_lock_for (lb, 50, NULL, NULL));
  raw = test_redis_connect (server);
  TEST_WAIT_UNTIL (test_redis_integer (raw, "PUBSUB NUMPAT") == 1, 10000);
  redisFree (raw);
  notifications = test_stats (b).notifications;
  w.lock = lb;
  thread = g_thread_new ("waiter", test_waiter_main, &w);
  g_assert_true (test_wait_contended (b, test_stats (b).contended_attempts + 1, 10000));
  unlocked_ms = test_now_ms ();
  test_unlock_ok (la);
  g_thread_join (thread);
  g_assert_true (w.acquired);
  g_assert_cmpint (w.returned_ms - unlocked_ms, <, 5000);
  g_assert_cmpuint (test_stats (b).notifications, >, notifications);
}

static void
test_client_certificate (void)
{
  g_autoptr (RedisLockTestServer) server
      = tls_server_new (REDIS_LOCK_TEST_TLS_REQUIRE_CLIENT_CERT);
  g_autoptr (RedisLockRegistry) registry = NULL;
  g_autoptr (RedisLock) lock = NULL;
  g_autofree char *without = NULL;

  g_test_summary ("A server that requires client certificates accepts the URL's cert= and "
                  "key=, and refuses a client without one: CONNECTION, not a hang");
  if (server == NULL)
    return;
  g_assert_nonnull (strstr (redis_lock_test_server_get_url (server), "cert="));
  registry = test_registry_new_on (redis_lock_test_server_get_url (server));
  lock = test_obtain (registry, "client-cert");
  test_lock_ok (lock);
  test_unlock_ok (lock);

  without = url_with (server, NULL, NULL);
  assert_refused (without, "client certificate");
}

/* --- Verification failures ------------------------------------------------------------ */

static void
test_wrong_ca (void)
{
  g_autoptr (RedisLockTestServer) server
      = tls_server_new (REDIS_LOCK_TEST_TLS_DEFAULT);
  g_autofree char *url = NULL;

  g_test_summary ("A server certificate that the given CA did not sign fails verification");
  if (server == NULL)
    return;
  url = url_with (server, redis_lock_test_server_get_tls_file (server, REDIS_LOCK_TEST_TLS_OTHER_CA),
                  NULL);
  assert_refused (url, "certificate verification");
}

static void
test_system_ca (void)
{
  g_autoptr (RedisLockTestServer) server
      = tls_server_new (REDIS_LOCK_TEST_TLS_DEFAULT);
  g_autofree char *url = NULL;

  g_test_summary ("Without ca= the system's trust store is used, which does not know the test "
                  "CA: verification fails");
  if (server == NULL)
    return;
  url = g_strdup_printf ("rediss://127.0.0.1:%d", redis_lock_test_server_get_port (server));
  assert_refused (url, "certificate verification");
}

static void
test_expired (void)
{
  g_autoptr (RedisLockTestServer) server
      = tls_server_new (REDIS_LOCK_TEST_TLS_EXPIRED);

  g_test_summary ("An expired server certificate fails verification, and the message says "
                  "it expired");
  if (server == NULL)
    return;
  assert_refused (redis_lock_test_server_get_url (server), "expired");
}

static void
test_name_mismatch (void)
{
  g_autoptr (RedisLockTestServer) server
      = tls_server_new (REDIS_LOCK_TEST_TLS_DEFAULT);
  g_autofree char *url = NULL;

  g_test_summary ("A name the certificate does not carry (sni=redis.example) fails "
                  "verification, naming the name");
  if (server == NULL)
    return;
  url = url_with (server, NULL, "redis.example");
  assert_refused (url, "redis.example");
}

/* --- Plain and TLS mixed up ------------------------------------------------------------ */

static void
test_plain_client_tls_port (void)
{
  g_autoptr (RedisLockTestServer) server
      = tls_server_new (REDIS_LOCK_TEST_TLS_DEFAULT);
  g_autofree char *url = NULL;

  g_test_summary ("redis:// to a TLS port fails with CONNECTION within the connect timeout");
  if (server == NULL)
    return;
  url = g_strdup_printf ("redis://127.0.0.1:%d", redis_lock_test_server_get_port (server));
  assert_refused (url, NULL);
}

static void
test_tls_client_plain_port (void)
{
  int port = test_free_tcp_port ();
  g_autofree char *port_line = g_strdup_printf ("port %d", port);
  const char *lines[] = { "bind 127.0.0.1", port_line, NULL };
  g_autoptr (RedisLockTestServer) tls
      = tls_server_new (REDIS_LOCK_TEST_TLS_DEFAULT);
  g_autoptr (RedisLockTestServer) plain = NULL;
  g_autofree char *url = NULL;

  g_test_summary ("rediss:// to a plain port fails with CONNECTION within the connect timeout, "
                  "suggesting the port may not speak TLS");
  if (tls == NULL)
    return;
  plain = redis_lock_test_server_new_or_skip (lines);
  if (plain == NULL)
    return;
  url = g_strdup_printf ("rediss://127.0.0.1:%d?ca=%s", port,
                         redis_lock_test_server_get_tls_file (tls, REDIS_LOCK_TEST_TLS_CA));
  assert_refused (url, "TLS");
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/tls/lock-unlock", test_lock_unlock);
  g_test_add_func ("/tls/host-name-and-sni", test_by_host_name);
  g_test_add_func ("/tls/notification-and-watchdog", test_notification_and_watchdog);
  g_test_add_func ("/tls/client-certificate", test_client_certificate);
  g_test_add_func ("/tls/refused/wrong-ca", test_wrong_ca);
  g_test_add_func ("/tls/refused/system-ca", test_system_ca);
  g_test_add_func ("/tls/refused/expired", test_expired);
  g_test_add_func ("/tls/refused/name-mismatch", test_name_mismatch);
  g_test_add_func ("/tls/refused/plain-client-on-tls-port", test_plain_client_tls_port);
  g_test_add_func ("/tls/refused/tls-client-on-plain-port", test_tls_client_plain_port);
  return g_test_run ();
}
