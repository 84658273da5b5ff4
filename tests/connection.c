/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* connection.c: reaching Redis, and what happens when it cannot be reached.
 *
 * A registry refuses malformed URLs before any network traffic (INVALID, with a message
 * naming the problem), reports an unreachable server as CONNECTION quickly, and a
 * refused or missing password as REDIS. While a registry lives, its server may crash
 * (SIGKILL) or hang (SIGSTOP): calls must then fail with CONNECTION within the
 * configured timeouts instead of blocking, and the same registry must work again once
 * the server is back, without being recreated. Through a fault-injecting proxy
 * (proxy.h), narrower faults hit a registry whose server stays up (connection-proxy.c).
 * No error message shows any
 * piece of a password, whatever the shape of the URL, and the sockets a registry opens
 * are close-on-exec. A server that does not speak the Redis protocol is named as such,
 * and an IPv6 address is shown in brackets.
 */
#include "config.h"

#include "connection-tests.h"
#include "proxy.h"

#include <fcntl.h>
#include <glib/gstdio.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static const char *const password_config[] = { "requirepass secret", NULL };

static void
test_malformed_urls (void)
{
  const char *urls[] = {
    "http://x",
    "redis://",
    "redis://host:99999",
    "redis://host:port",
    "unix://relative",
    "unix://",
    "redis://h/notanumber",
    "rediss://h?ca=/nonexistent/ca.pem",
    "",
    "redis://local host:6379",
    "unix:///tmp/redislock.sock?db=1&db=2",
  };

  g_test_summary ("Malformed or unsupported URLs are INVALID with a message, before connecting.");

  for (gsize i = 0; i < G_N_ELEMENTS (urls); i++)
    {
      g_autoptr (GError) error = NULL;
      RedisLockRegistry *registry = redis_lock_registry_new (urls[i], TEST_REGISTRY_KEY, &error);

      g_test_message ("\"%s\": %s", urls[i], error != NULL ? error->message : "(no error)");
      g_assert_null (registry);
      g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID);
      g_assert_cmpstr (error->message, !=, "");
    }
}

/* A TCP port on 127.0.0.1 that nothing listens on: bound, then released. */
static guint16
closed_port (void)
{
  struct sockaddr_in addr = { 0 };
  socklen_t len = sizeof addr;
  int fd = socket (AF_INET, SOCK_STREAM, 0);

  g_assert_cmpint (fd, >=, 0);
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
  g_assert_cmpint (bind (fd, (struct sockaddr *)&addr, sizeof addr), ==, 0);
  g_assert_cmpint (getsockname (fd, (struct sockaddr *)&addr, &len), ==, 0);
  close (fd);
  return ntohs (addr.sin_port);
}

/* A TCP listener on 127.0.0.1 that is not Redis: it answers every connection with an
 * HTTP error, as a web server on the wrong port would, and closes it. */
typedef struct
{
  int fd;
  guint16 port;
  GThread *thread;
} NotRedis;

static gpointer
not_redis_serve (gpointer data)
{
  NotRedis *self = data;
  static const char answer[] = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n";

  for (;;)
    {
      char buf[256];
      int client = accept (self->fd, NULL, NULL);
      gssize got, sent;

      if (client < 0)
        return NULL; /* the listening socket was shut down */
      got = read (client, buf, sizeof buf);
      sent = write (client, answer, sizeof answer - 1);
      /* A client that hung up before the answer is the client's business: the test
       * looks at what the client saw, and this server just closes. */
      if (got < 0 || sent < 0)
        g_debug ("not-redis: the client left early (read %" G_GSSIZE_FORMAT
                 ", wrote %" G_GSSIZE_FORMAT ")",
                 got, sent);
      close (client);
    }
}

static NotRedis *
not_redis_new (void)
{
  NotRedis *self = g_new0 (NotRedis, 1);
  struct sockaddr_in addr = { 0 };
  socklen_t len = sizeof addr;

  self->fd = socket (AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  g_assert_cmpint (self->fd, >=, 0);
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
  g_assert_cmpint (bind (self->fd, (struct sockaddr *)&addr, sizeof addr), ==, 0);
  g_assert_cmpint (listen (self->fd, 8), ==, 0);
  g_assert_cmpint (getsockname (self->fd, (struct sockaddr *)&addr, &len), ==, 0);
  self->port = ntohs (addr.sin_port);
  self->thread = g_thread_new ("not-redis", not_redis_serve, self);
  return self;
}

static void
not_redis_free (NotRedis *self)
{
  shutdown (self->fd, SHUT_RDWR); /* wakes the accept() */
  g_thread_join (self->thread);
  close (self->fd);
  g_free (self);
}

static void
test_not_a_redis_server (void)
{
  NotRedis *server = not_redis_new ();
  g_autofree char *url = g_strdup_printf ("redis://127.0.0.1:%u", server->port);
  g_autofree char *where = g_strdup_printf ("127.0.0.1:%u", server->port);
  g_autoptr (GError) error = NULL;
  RedisLockRegistry *registry;
  const char *after;

  g_test_summary ("A server that answers with something other than the Redis protocol (an "
                  "HTTP error) is CONNECTION “not a Redis server”, naming its address, not "
                  "the parser's “Protocol error, got \"H\" as reply type byte”.");
  registry = redis_lock_registry_new (url, TEST_REGISTRY_KEY, &error);
  g_test_message ("%s", error != NULL ? error->message : "(no error)");
  g_assert_null (registry);
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION);
  after = strstr (error->message, "not a Redis server");
  g_assert_nonnull (after);
  g_assert_nonnull (strstr (after, where));
  g_assert_null (strstr (error->message, "Protocol error"));
  not_redis_free (server);
}

static void
test_ipv6_address_in_brackets (void)
{
  g_autofree char *url = g_strdup_printf ("redis://[::1]:%u", closed_port ());
  g_autofree char *where = g_strdup_printf ("[::1]:%s", strrchr (url, ':') + 1);
  g_autoptr (GError) error = NULL;
  RedisLockRegistry *registry;

  g_test_summary ("A message names an IPv6 address in brackets, as a URL writes it: "
                  "“[::1]:PORT”, not “::1:PORT”.");
  registry = redis_lock_registry_new (url, TEST_REGISTRY_KEY, &error);
  g_test_message ("%s", error != NULL ? error->message : "(no error)");
  g_assert_null (registry);
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION);
  g_assert_nonnull (strstr (error->message, where));
}

static void
test_password_not_in_messages (void)
{
  const char *urls[] = {
    "redis://:s3cr3t@127.0.0.1:1/abc",
    "redis://user:s3cr3t@127.0.0.1:99999",
    "unix:///tmp/x.sock?password=s3cr3t&db=zz",
    "unix:///tmp/x.sock?password=s3cr3t&bogus=1",
  };

  g_test_summary ("Error messages about a URL never show its password.");
  for (gsize i = 0; i < G_N_ELEMENTS (urls); i++)
    {
      GError *error = NULL;
      RedisLockRegistry *r = redis_lock_registry_new (urls[i], "k", &error);
      g_assert_null (r);
      g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID);
      g_assert_null (strstr (error->message, "s3cr3t"));
      g_assert_nonnull (strstr (error->message, "***"));
      g_clear_error (&error);
    }
}

static void
test_unreachable (void)
{
  g_autofree char *tcp = g_strdup_printf ("redis://127.0.0.1:%u", closed_port ());
  g_autofree char *dir = g_dir_make_tmp ("redislock-nosock-XXXXXX", NULL);
  g_autofree char *unix_url = g_strdup_printf ("unix://%s/absent.sock", dir);
  const char *urls[] = { tcp, unix_url };

  g_test_summary ("A closed TCP port on 127.0.0.1 and a missing Unix socket are CONNECTION, "
                  "reported quickly.");
  g_assert_nonnull (dir);

  for (gsize i = 0; i < G_N_ELEMENTS (urls); i++)
    {
      g_autoptr (GError) error = NULL;
      gint64 start = test_now_ms ();
      RedisLockRegistry *registry = redis_lock_registry_new (urls[i], TEST_REGISTRY_KEY, &error);

      g_test_message ("%s: %s", urls[i], error != NULL ? error->message : "(no error)");
      g_assert_null (registry);
      g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION);
      g_assert_cmpint (test_now_ms () - start, <, 2000);
    }
  g_rmdir (dir);
}

static void
test_password (TestFixture *f, gconstpointer data)
{
  const char *socket_path;
  g_autofree char *wrong = NULL;
  g_autofree char *missing = NULL;
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (GError) error = NULL;
  g_autofree char *value = NULL;
  RedisLockRegistry *registry;

  g_test_summary ("Against a server with requirepass: the right password works, a wrong one "
                  "and a missing one are REDIS.");
  TEST_SKIP_IF_NO_SERVER (f);

  /* The fixture's registry used the right password (the URL carries it). */
  g_assert_nonnull (strstr (redis_lock_test_server_get_url (f->server), "password=secret"));
  lock = test_obtain (f->registry, "authenticated");
  test_lock_ok (lock);
  value = test_redis_get (f->redis, TEST_REGISTRY_KEY ":authenticated");
  test_assert_value_of (value, f->registry);
  test_unlock_ok (lock);

  socket_path = redis_lock_test_server_get_socket_path (f->server);
  wrong = g_strdup_printf ("unix://%s?password=wrong", socket_path);
  registry = redis_lock_registry_new (wrong, TEST_REGISTRY_KEY, &error);
  g_assert_null (registry);
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_REDIS);
  g_test_message ("wrong password: %s", error->message);
  g_clear_error (&error);

  missing = g_strdup_printf ("unix://%s", socket_path);
  registry = redis_lock_registry_new (missing, TEST_REGISTRY_KEY, &error);
  g_assert_null (registry);
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_REDIS);
  g_test_message ("missing password: %s", error->message);
}

void
assert_fails_in_time (gboolean ok, GError *error, gint64 start_ms, const char *what)
{
  gint64 elapsed = test_now_ms () - start_ms;

  g_test_message ("%s failed after %" G_GINT64_FORMAT " ms: %s", what, elapsed,
                  error != NULL ? error->message : "(no error)");
  g_assert_false (ok);
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION);
  /* Within a connect plus a command timeout, with slack for a slow machine. */
  g_assert_cmpint (elapsed, <, 2 * TIMEOUT_MS + 1000);
}

static void
test_server_stopped (TestFixture *f, gconstpointer data)
{
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (GError) error = NULL;
  g_autofree char *value = NULL;
  GError *local = NULL;
  gint64 start;
  gboolean ok;

  g_test_summary ("With the server killed, lock, try_lock and try_lock_for fail with CONNECTION "
                  "within the timeouts; after a restart the same registry locks again.");
  TEST_SKIP_IF_NO_SERVER (f);

  redis_lock_registry_set_connect_timeout_ms (f->registry, TIMEOUT_MS);
  redis_lock_registry_set_command_timeout_ms (f->registry, TIMEOUT_MS);
  lock = test_obtain (f->registry, "outage");
  test_lock_ok (lock);
  test_unlock_ok (lock);

  redis_lock_test_server_stop (f->server);
  g_assert_cmpint (redis_lock_test_server_get_pid (f->server), ==, 0);
  g_clear_pointer (&f->redis, redisFree);

  start = test_now_ms ();
  ok = redis_lock_lock (lock, &local);
  assert_fails_in_time (ok, local, start, "lock");
  g_clear_error (&local);
  g_assert_false (redis_lock_is_held_by_current_thread (lock));

  start = test_now_ms ();
  ok = redis_lock_try_lock (lock, &local);
  assert_fails_in_time (ok, local, start, "try_lock");
  g_clear_error (&local);

  start = test_now_ms ();
  ok = redis_lock_try_lock_for (lock, 200, NULL, &local);
  assert_fails_in_time (ok, local, start, "try_lock_for");
  g_clear_error (&local);
  g_assert_false (redis_lock_is_held_by_current_thread (lock));

  g_assert_true (redis_lock_test_server_start (f->server, &error));
  g_assert_no_error (error);
  f->redis = test_redis_connect (f->server);

  test_lock_ok (lock);
  value = test_redis_get (f->redis, TEST_REGISTRY_KEY ":outage");
  test_assert_value_of (value, f->registry);
  test_unlock_ok (lock);
  g_assert_cmpint (test_redis_integer (f->redis, "EXISTS %s", TEST_REGISTRY_KEY ":outage"), ==, 0);
}

static void
test_pooled_connection_killed (TestFixture *f, gconstpointer data)
{
  g_autoptr (RedisLock) lock = NULL;
  g_autofree char *value = NULL;

  g_test_summary ("A pooled connection the server closed a moment after its last use (CLIENT "
                  "KILL) costs the next acquisition and the next release nothing: the "
                  "acquisition, sent on it unchecked, goes once more on a fresh connection; "
                  "the release finds it dropped before it goes out; neither reports an error.");
  TEST_SKIP_IF_NO_SERVER (f);

  lock = test_obtain (f->registry, "killed-pooled");
  test_lock_ok (lock);
  test_unlock_ok (lock);

  /* Every ordinary client but this test's own: the registry's pooled connection. */
  g_assert_cmpint (test_redis_integer (f->redis, "CLIENT KILL TYPE normal SKIPME yes"), >=, 1);
  test_lock_ok (lock);
  value = test_redis_get (f->redis, TEST_REGISTRY_KEY ":killed-pooled");
  test_assert_value_of (value, f->registry);

  g_assert_cmpint (test_redis_integer (f->redis, "CLIENT KILL TYPE normal SKIPME yes"), >=, 1);
  test_unlock_ok (lock);
  g_assert_cmpint (test_redis_integer (f->redis, "EXISTS %s", TEST_REGISTRY_KEY ":killed-pooled"),
                   ==, 0);
}

static void
test_unlock_after_ttl_during_outage (TestFixture *f, gconstpointer data)
{
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (GError) error = NULL;

  g_test_summary ("A holder whose lease ran out while Redis was down learns LEASE_LOST from "
                  "unlock, not just that the release could not be sent.");
  TEST_SKIP_IF_NO_SERVER (f);

  redis_lock_registry_set_connect_timeout_ms (f->registry, TIMEOUT_MS);
  redis_lock_registry_set_command_timeout_ms (f->registry, TIMEOUT_MS);
  redis_lock_registry_set_watchdog (f->registry, FALSE);
  redis_lock_registry_set_expire_after_ms (f->registry, 300);
  lock = test_obtain (f->registry, "outage-ttl");
  test_lock_ok (lock);

  redis_lock_test_server_stop (f->server);
  g_clear_pointer (&f->redis, redisFree);
  /* Time is the subject: the lease's TTL passes while the server is gone. */
  g_usleep (400 * G_TIME_SPAN_MILLISECOND);

  g_assert_false (redis_lock_unlock (lock, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_LEASE_LOST);
  g_assert_false (redis_lock_is_held_by_current_thread (lock));

  g_assert_true (redis_lock_test_server_start (f->server, NULL));
  f->redis = test_redis_connect (f->server);
}

static void
test_server_paused (TestFixture *f, gconstpointer data)
{
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (RedisLock) other = NULL;
  g_autoptr (GError) error = NULL;
  g_autofree char *value = NULL;
  GError *local = NULL;
  gint64 start;
  gboolean ok;

  g_test_summary ("With the server frozen (SIGSTOP), try_lock and lock fail with CONNECTION "
                  "within the command timeout instead of hanging; after SIGCONT locking works.");
  TEST_SKIP_IF_NO_SERVER (f);

  redis_lock_registry_set_connect_timeout_ms (f->registry, TIMEOUT_MS);
  redis_lock_registry_set_command_timeout_ms (f->registry, TIMEOUT_MS);
  lock = test_obtain (f->registry, "frozen");
  other = test_obtain (f->registry, "frozen-too");
  test_lock_ok (lock);
  test_unlock_ok (lock);

  redis_lock_test_server_pause (f->server);

  start = test_now_ms ();
  ok = redis_lock_try_lock (lock, &local);
  assert_fails_in_time (ok, local, start, "try_lock");
  g_clear_error (&local);
  g_assert_false (redis_lock_is_held_by_current_thread (lock));

  start = test_now_ms ();
  ok = redis_lock_lock (other, &local);
  assert_fails_in_time (ok, local, start, "lock");
  g_clear_error (&local);
  g_assert_false (redis_lock_is_held_by_current_thread (other));

  redis_lock_test_server_resume (f->server);

  test_lock_ok (lock);
  value = test_redis_get (f->redis, TEST_REGISTRY_KEY ":frozen");
  test_assert_value_of (value, f->registry);
  test_unlock_ok (lock);
}

/* A connection made for an acquisition is set up within what is left of the caller's
 * wait, not the whole connect timeout: the server accepts (the kernel does, for a
 * stopped process) but never answers the SELECT of the connection's setup. */
static void
test_cold_connect_within_wait (TestFixture *f, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) registry = NULL;
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (GError) error = NULL;
  g_autofree char *url = NULL;
  gint64 start, took;
  gboolean ok;

  g_test_summary ("With the server frozen and no connection in the pool, try_lock_for (200 ms) "
                  "ends within its wait, not after the 5 s connect timeout: a new connection "
                  "is set up within what is left of the caller's wait.");
  TEST_SKIP_IF_NO_SERVER (f);

  url = g_strdup_printf ("%s%sdb=1", redis_lock_test_server_get_url (f->server),
                         strchr (redis_lock_test_server_get_url (f->server), '?') != NULL ? "&"
                                                                                          : "?");
  registry = redis_lock_registry_new (url, TEST_REGISTRY_KEY, &error);
  g_assert_no_error (error);
  redis_lock_registry_set_connect_timeout_ms (registry, 5000);
  redis_lock_registry_set_command_timeout_ms (registry, 5000);
  lock = test_obtain (registry, "cold-connect");

  redis_lock_test_server_pause (f->server);
  start = test_now_ms ();
  ok = redis_lock_try_lock_for (lock, 200, NULL, &error);
  took = test_now_ms () - start;
  redis_lock_test_server_resume (f->server);
  g_test_message ("try_lock_for (200 ms) on a frozen server: %" G_GINT64_FORMAT " ms, %s", took,
                  error != NULL ? error->message : ok ? "acquired" : "not acquired");
  g_assert_false (ok);
  g_assert_cmpint (took, <, 2500);
  g_clear_error (&error);

  /* The server back, the lock is taken through the same registry. */
  ok = redis_lock_try_lock_for (lock, 5000, NULL, &error);
  g_assert_no_error (error);
  g_assert_true (ok);
  test_unlock_ok (lock);
}

/* URLs that carry the secret "S3cr3t" in every way a password can be misplaced or
 * mis-encoded, each (in upper and lower case) anywhere it could leak: each must fail,
 * INVALID before connecting or CONNECTION on port 1 of 127.0.0.1 or a missing socket,
 * with a message in which no piece of the password appears. A password with a raw
 * separator is written as "S3cr3t" on each side of it, so any piece of it that leaks
 * is found. */
static const char *const secret_urls[] = {
  /* A raw "/", "?", "#" or "@" in the password moves the URL's split points. */
  "redis://:S3cr3t/S3cr3t@127.0.0.1:1",
  "memory://store?password=S3cr3t",
  "memory://store/S3cr3t",
  "redis://:S3cr3t?S3cr3t@127.0.0.1:1",
  "redis://:S3cr3t#S3cr3t@127.0.0.1:1",
  "redis://:S3cr3t@S3cr3t@127.0.0.1:1",
  "redis://user:S3cr3t/S3cr3t@127.0.0.1:1/0",
  "redis://:12/S3cr3t@127.0.0.1:1",
  "redis://:S3cr3t S3cr3t@127.0.0.1:1",
  /* No host after the password, no "//", no scheme. */
  "redis://:S3cr3t",
  "redis://user:S3cr3t",
  "redis:S3cr3t@127.0.0.1:1",
  "redis:user:S3cr3t@127.0.0.1:1",
  ":S3cr3t@127.0.0.1:1",
  "//:S3cr3t@127.0.0.1:1",
  "user:S3cr3t@127.0.0.1:1",
  "S3cr3t",
  "S3cr3t:S3cr3t",
  "http://:S3cr3t@127.0.0.1:1",
  /* The password as the only user info, as some clients take it. */
  "redis://S3cr3t@127.0.0.1:1/x",
  "unix://S3cr3t@/tmp/redislock-absent.sock",
  /* Parameter names in another case, or %-encoded. */
  "unix:///tmp/redislock-absent.sock?Password=S3cr3t",
  "unix:///tmp/redislock-absent.sock?PASSWORD=S3cr3t&db=0",
  "unix:///tmp/redislock-absent.sock?pass%77ord=S3cr3t&db=x",
  "unix:///tmp/redislock-absent.sock?%70assword=S3cr3t&bogus=1",
  /* A raw "&", "=", "#" or "%" in a password given as a parameter. */
  "unix:///tmp/redislock-absent.sock?password=S3cr3t&S3cr3t",
  "unix:///tmp/redislock-absent.sock?password=S3cr3t&S3cr3t=S3cr3t",
  "unix:///tmp/redislock-absent.sock?password=S3cr3t=S3cr3t&db=x",
  "unix:///tmp/redislock-absent.sock?password=S3cr3t#S3cr3t",
  "unix:///tmp/redislock-absent.sock?password=S3cr3t%zz",
  "unix:///tmp/redislock-absent.sock?db=x&password=S3cr3t",
  "unix:///tmp/redislock-absent.sock?password=S3cr3t&password=S3cr3t",
  /* The password where the query should have started. */
  "unix:///tmp/redislock-absent.sock&password=S3cr3t",
  "unix:///tmp/redislock-absent.sock;password=S3cr3t",
  "unix:///tmp/redislock-absent.sock/password=S3cr3t",
  /* Bad %-encoding, control characters, white space. */
  "redis://:S3cr3t%zz@127.0.0.1:1",
  "redis://:S3cr3t%00@127.0.0.1:1",
  "redis://:S3cr3t\001@127.0.0.1:1",
  "redis://:S3cr3t@local host:1",
  /* Mistakes after a well-placed password. */
  "redis://:S3cr3t@127.0.0.1:99999",
  "redis://:S3cr3t@127.0.0.1:0",
  "redis://:S3cr3t@127.0.0.1:1/db",
  "redis://:S3cr3t@127.0.0.1:1/0?password=S3cr3t",
  "redis://:S3cr3t@127.0.0.1:1#S3cr3t",
  "REDIS://:S3cr3t@127.0.0.1:1/x",
  "rediss://:S3cr3t@127.0.0.1:1",
  /* Well formed: they fail to connect. */
  "redis://:S3cr3t@127.0.0.1:1",
  "redis://default:S3cr3t%2FS3cr3t%3FS3cr3t%23S3cr3t%40S3cr3t@127.0.0.1:1/1",
  "unix:///tmp/redislock-absent.sock?password=S3cr3t%26S3cr3t",
};

static void
test_password_redacted_table (void)
{
  g_test_summary ("Whatever the shape of a URL with a password, the error message of a "
                  "registry that cannot be made contains no piece of the password.");

  for (gsize i = 0; i < G_N_ELEMENTS (secret_urls); i++)
    {
      g_autoptr (GError) error = NULL;
      g_autofree char *lower = NULL;
      RedisLockRegistry *registry
          = redis_lock_registry_new (secret_urls[i], TEST_REGISTRY_KEY, &error);

      g_test_message ("%s", error != NULL ? error->message : "(no error)");
      g_assert_null (registry);
      g_assert_nonnull (error);
      g_assert_true (g_error_matches (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID)
                     || g_error_matches (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION));
      lower = g_ascii_strdown (error->message, -1);
      if (strstr (lower, "s3cr3t") != NULL)
        g_error ("URL %" G_GSIZE_FORMAT " leaks its password: %s", i, error->message);
    }
}

/* A password with every character that has a meaning in a URL. */
#define SPECIAL_PASSWORD "S3/cr?3#t@x:y&z=w%v+u;"
static const char *const special_password_config[] = { "requirepass " SPECIAL_PASSWORD, NULL };

/* Locks and unlocks through a new registry on @url, checking the key in Redis. */
static void
assert_url_locks (TestFixture *f, const char *url)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (RedisLock) lock = NULL;
  g_autofree char *value = NULL;
  RedisLockRegistry *registry = redis_lock_registry_new (url, TEST_REGISTRY_KEY, &error);

  g_assert_no_error (error);
  lock = test_obtain (registry, "special");
  test_lock_ok (lock);
  value = test_redis_get (f->redis, TEST_REGISTRY_KEY ":special");
  test_assert_value_of (value, registry);
  test_unlock_ok (lock);
  g_clear_pointer (&lock, redis_lock_unref);
  redis_lock_registry_unref (registry);
}

static void
test_password_special_characters (TestFixture *f, gconstpointer data)
{
  g_autofree char *escaped = g_uri_escape_string (SPECIAL_PASSWORD, NULL, FALSE);
  g_autofree char *wrong_escaped = g_uri_escape_string (SPECIAL_PASSWORD "x", NULL, FALSE);
  g_autoptr (TestProxy) proxy = NULL;
  g_autofree char *tcp = NULL;
  g_autofree char *tcp_user = NULL;
  g_autofree char *unix_encoded_name = NULL;
  g_autofree char *wrong = NULL;
  g_autoptr (GError) error = NULL;
  const char *socket_path;

  g_test_summary ("A password with “/ ? # @ : & = % + ;” works %-encoded in every place a URL "
                  "takes one: user info of redis://, with and without a user name, and the "
                  "password parameter of unix://, also under a %-encoded name.");
  TEST_SKIP_IF_NO_SERVER (f);

  /* The fixture's registry: unix://…?password=, from the test server's URL. */
  assert_url_locks (f, f->url);

  socket_path = redis_lock_test_server_get_socket_path (f->server);
  proxy = test_proxy_new_unix (socket_path);
  tcp = g_strdup_printf ("redis://:%s@127.0.0.1:%u", escaped, test_proxy_get_port (proxy));
  assert_url_locks (f, tcp);
  tcp_user
      = g_strdup_printf ("redis://default:%s@127.0.0.1:%u/0", escaped, test_proxy_get_port (proxy));
  assert_url_locks (f, tcp_user);
  unix_encoded_name = g_strdup_printf ("unix://%s?db=0&pass%%77ord=%s", socket_path, escaped);
  assert_url_locks (f, unix_encoded_name);

  /* A wrong one is refused by the server, and not shown either. */
  wrong = g_strdup_printf ("redis://:%s@127.0.0.1:%u", wrong_escaped, test_proxy_get_port (proxy));
  g_assert_null (redis_lock_registry_new (wrong, TEST_REGISTRY_KEY, &error));
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_REDIS);
  g_test_message ("wrong password: %s", error->message);
  g_assert_null (strstr (error->message, "S3"));
}

/* --- Sockets and exec ------------------------------------------------------------------ */

/* The targets ("socket:[inode]") of this process's descriptors that are sockets, each
 * mapped to its descriptor number. */
static GHashTable *
open_sockets (void)
{
  GHashTable *sockets = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  GDir *dir = g_dir_open ("/proc/self/fd", 0, NULL);
  const char *entry;

  g_assert_nonnull (dir);
  while ((entry = g_dir_read_name (dir)) != NULL)
    {
      g_autofree char *path = g_build_filename ("/proc/self/fd", entry, NULL);
      g_autofree char *target = g_file_read_link (path, NULL);

      if (target != NULL && g_str_has_prefix (target, "socket:"))
        g_hash_table_insert (sockets, g_steal_pointer (&target),
                             GINT_TO_POINTER (atoi (entry)));
    }
  g_dir_close (dir);
  return sockets;
}

static void
test_sockets_close_on_exec (TestFixture *f, gconstpointer data)
{
  g_autoptr (GHashTable) before = NULL;
  g_autoptr (GHashTable) after = NULL;
  g_autoptr (RedisLock) holder_lock = NULL;
  g_autoptr (RedisLock) waiter_lock = NULL;
  RedisLockRegistry *holder, *waiter;
  TestTaker taker = { 0 };
  GHashTableIter iter;
  gpointer target, fd;
  guint new_sockets = 0;
  GThread *thread;

  g_test_summary ("Every socket a registry opens (its pool's connections and the "
                  "subscription of a waiter) is close-on-exec, so programs the application "
                  "fork-execs do not inherit connections to Redis.");
  TEST_SKIP_IF_NO_SERVER (f);
  if (!g_file_test ("/proc/self/fd", G_FILE_TEST_IS_DIR))
    {
      g_test_skip ("no /proc/self/fd");
      return;
    }

  before = open_sockets ();
  holder = test_registry_new (f);
  waiter = test_registry_new (f);
  holder_lock = test_obtain (holder, "cloexec");
  waiter_lock = test_obtain (waiter, "cloexec");
  test_lock_ok (holder_lock);
  /* A waiter of the other registry subscribes to the unlock notifications. */
  thread = test_taker_start (&taker, waiter_lock, 10000);
  g_assert_true (test_wait_contended (waiter, 1, 5000));
  TEST_WAIT_UNTIL (test_redis_integer (f->redis, "PUBSUB NUMPAT") >= 1, 5000);

  after = open_sockets ();
  g_hash_table_iter_init (&iter, after);
  while (g_hash_table_iter_next (&iter, &target, &fd))
    {
      int flags;

      if (g_hash_table_contains (before, target))
        continue;
      flags = fcntl (GPOINTER_TO_INT (fd), F_GETFD);
      g_test_message ("fd %d (%s): flags %d", GPOINTER_TO_INT (fd), (const char *)target, flags);
      g_assert_cmpint (flags, >=, 0);
      g_assert_true (flags & FD_CLOEXEC);
      new_sockets++;
    }
  /* Two pools and a subscription, at least. */
  g_assert_cmpuint (new_sockets, >=, 3);

  test_unlock_ok (holder_lock);
  test_taker_join (&taker, thread, 10000);
  g_assert_true (taker.result);
  test_taker_clear (&taker);
  g_clear_pointer (&holder_lock, redis_lock_unref);
  g_clear_pointer (&waiter_lock, redis_lock_unref);
  redis_lock_registry_unref (waiter);
  redis_lock_registry_unref (holder);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/connection/url/malformed", test_malformed_urls);
  g_test_add_func ("/connection/unreachable", test_unreachable);
  g_test_add_func ("/connection/unreachable/ipv6-address-in-brackets",
                   test_ipv6_address_in_brackets);
  g_test_add_func ("/connection/not-a-redis-server", test_not_a_redis_server);
  g_test_add_func ("/connection/url/password-redacted", test_password_not_in_messages);
  g_test_add ("/connection/auth/password", TestFixture, password_config, test_fixture_setup,
              test_password, test_fixture_teardown);
  g_test_add ("/connection/outage/server-stopped", TestFixture, NULL, test_fixture_setup,
              test_server_stopped, test_fixture_teardown);
  g_test_add ("/connection/outage/server-paused", TestFixture, NULL, test_fixture_setup,
              test_server_paused, test_fixture_teardown);
  g_test_add ("/connection/outage/pooled-connection-killed", TestFixture, NULL, test_fixture_setup,
              test_pooled_connection_killed, test_fixture_teardown);
  g_test_add ("/connection/outage/cold-connect-within-wait", TestFixture, NULL,
              test_fixture_setup, test_cold_connect_within_wait, test_fixture_teardown);
  g_test_add ("/connection/outage/unlock-after-ttl-is-lease-lost", TestFixture, NULL,
              test_fixture_setup, test_unlock_after_ttl_during_outage, test_fixture_teardown);

  g_test_add_func ("/connection/url/password-redacted-table", test_password_redacted_table);
  g_test_add ("/connection/auth/password-special-characters", TestFixture,
              special_password_config, test_fixture_setup, test_password_special_characters,
              test_fixture_teardown);
  g_test_add ("/connection/sockets/close-on-exec", TestFixture, NULL, test_fixture_setup,
              test_sockets_close_on_exec, test_fixture_teardown);

  connection_add_proxy_tests ();
  return g_test_run ();
}
