/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* testserver-tls.c: the TLS variant of the test server (redis_lock_test_server_new_tls()
 * in redislock-test.h) does what its documentation says.
 *
 * The library's TLS tests stand on this helper, so it is checked here with other
 * programs than the library: redis-cli (Debian's is built with TLS) must get PONG over
 * TLS when it trusts the helper's CA, and present the client certificate when the
 * server requires one; `openssl s_client` must fail to verify the server against the
 * unrelated CA, and say "expired" when the server certificate is; `openssl verify` must
 * agree on the files, and the expired certificate's dates are checked too. The Unix socket of a TLS server still
 * answers plain hiredis, the URL is the documented one, and the server keeps its port
 * and certificates across a stop and a start. A test is skipped when redis-server,
 * redis-cli or openssl is missing.
 */
#include "config.h"

#include <string.h>
#include <sys/wait.h>

#include <gio/gio.h>
#include <hiredis/hiredis.h>
#include <redislock/redislock-test.h>

/* --- Other programs ----------------------------------------------------------------- */

/* The absolute path of @name, or NULL after g_test_skip(). */
static char *
find_or_skip (const char *name)
{
  char *path = g_find_program_in_path (name);

  if (path == NULL)
    {
      g_autofree char *message = g_strdup_printf ("%s is not installed", name);
      g_test_skip (message);
    }
  return path;
}

/* Runs @argv (argv[0] an absolute path) with stdin closed, and returns its exit code
 * (-1 when killed by a signal) with its stdout and stderr in @output (trimmed). */
static int
run (const char *const *argv, char **output)
{
  g_autofree char *out = NULL;
  g_autofree char *err = NULL;
  g_autofree char *command = g_strjoinv (" ", (char **)argv);
  GError *error = NULL;
  int wait_status = 0;

  if (!g_spawn_sync (NULL, (char **)argv, NULL, G_SPAWN_STDIN_FROM_DEV_NULL, NULL, NULL, &out,
                     &err, &wait_status, &error))
    g_error ("cannot run %s: %s", command, error->message);
  *output = g_strstrip (g_strconcat (out, err, NULL));
  g_test_message ("%s -> %s", command, *output);
  if (WIFEXITED (wait_status))
    return WEXITSTATUS (wait_status);
  return -1;
}

/* Runs redis-cli PING over TLS against @server's port, trusting @ca, with the client
 * certificate and key when given, and with the password when given. Returns its exit
 * code and output as run() does. */
static int
tls_ping (const char *redis_cli, RedisLockTestServer *server, const char *ca, const char *cert,
          const char *key, const char *password, char **output)
{
  g_autofree char *port = g_strdup_printf ("%d", redis_lock_test_server_get_port (server));
  g_autoptr (GPtrArray) argv = g_ptr_array_new ();

  g_ptr_array_add (argv, (gpointer)redis_cli);
  g_ptr_array_add (argv, (gpointer) "--tls");
  g_ptr_array_add (argv, (gpointer) "--cacert");
  g_ptr_array_add (argv, (gpointer)ca);
  if (cert != NULL)
    {
      g_ptr_array_add (argv, (gpointer) "--cert");
      g_ptr_array_add (argv, (gpointer)cert);
      g_ptr_array_add (argv, (gpointer) "--key");
      g_ptr_array_add (argv, (gpointer)key);
    }
  if (password != NULL)
    {
      g_ptr_array_add (argv, (gpointer) "--no-auth-warning");
      g_ptr_array_add (argv, (gpointer) "-a");
      g_ptr_array_add (argv, (gpointer)password);
    }
  g_ptr_array_add (argv, (gpointer) "-h");
  g_ptr_array_add (argv, (gpointer) "127.0.0.1");
  g_ptr_array_add (argv, (gpointer) "-p");
  g_ptr_array_add (argv, port);
  g_ptr_array_add (argv, (gpointer) "PING");
  g_ptr_array_add (argv, NULL);
  return run ((const char *const *)argv->pdata, output);
}

/* Asserts that redis-cli gets PONG over TLS. */
static void
assert_tls_pong (const char *redis_cli, RedisLockTestServer *server, const char *cert,
                 const char *key, const char *password)
{
  g_autofree char *output = NULL;
  const char *ca = redis_lock_test_server_get_tls_file (server, REDIS_LOCK_TEST_TLS_CA);

  g_assert_cmpint (tls_ping (redis_cli, server, ca, cert, key, password, &output), ==, 0);
  g_assert_cmpstr (output, ==, "PONG");
}

/* A TLS handshake with @server's port by `openssl s_client`, trusting @ca alone and
 * failing on a verification error. Returns its exit code and output as run() does.
 * (redis-cli serves for what works: where a handshake fails, it leaks the SSL of the
 * connection, which valgrind following the test's children would report.) */
static int
tls_handshake (const char *openssl, RedisLockTestServer *server, const char *ca, char **output)
{
  g_autofree char *address
      = g_strdup_printf ("127.0.0.1:%d", redis_lock_test_server_get_port (server));
  const char *const argv[] = { openssl, "s_client", "-connect", address, "-CAfile", ca,
                               "-no-CApath", "-no-CAstore", "-verify_return_error", "-brief",
                               NULL };

  return run (argv, output);
}

/* Asserts that a client trusting @ca cannot verify the server certificate, and that
 * the reason given includes @reason. */
static void
assert_tls_verify_fails (const char *openssl, RedisLockTestServer *server, const char *ca,
                         const char *reason)
{
  g_autofree char *output = NULL;

  g_assert_cmpint (tls_handshake (openssl, server, ca, &output), !=, 0);
  g_assert_nonnull (strstr (output, "certificate verify failed"));
  g_assert_nonnull (strstr (output, reason));
}

/* `openssl verify -CAfile @ca` of @cert for @purpose (sslserver: also for the name
 * localhost and the address 127.0.0.1). Returns its exit code and output. */
static int
openssl_verify (const char *openssl, const char *ca, const char *cert, const char *purpose,
                char **output)
{
  const char *const server_argv[] = { openssl, "verify", "-CAfile", ca, "-purpose", purpose,
                                      "-verify_hostname", "localhost", "-verify_ip",
                                      "127.0.0.1", cert, NULL };
  const char *const client_argv[]
      = { openssl, "verify", "-CAfile", ca, "-purpose", purpose, cert, NULL };

  return run (strcmp (purpose, "sslserver") == 0 ? server_argv : client_argv, output);
}

static void
assert_verifies (const char *openssl, const char *ca, const char *cert, const char *purpose)
{
  g_autofree char *output = NULL;
  g_autofree char *ok = g_strdup_printf ("%s: OK", cert);

  g_assert_cmpint (openssl_verify (openssl, ca, cert, purpose, &output), ==, 0);
  g_assert_cmpstr (output, ==, ok);
}

/* --- The server seen from its Unix socket ------------------------------------------ */

static redisReply *
socket_command (RedisLockTestServer *server, const char *command)
{
  struct timeval tv = { 5, 0 };
  redisContext *c = redisConnectUnixWithTimeout (redis_lock_test_server_get_socket_path (server), tv);
  redisReply *reply;

  g_assert_nonnull (c);
  if (c->err != 0)
    g_error ("cannot connect to %s: %s", redis_lock_test_server_get_socket_path (server), c->errstr);
  g_assert_cmpint (redisSetTimeout (c, tv), ==, REDIS_OK);
  reply = redisCommand (c, command);
  if (reply == NULL)
    g_error ("no reply to %s: %s", command, c->errstr);
  redisFree (c);
  return reply;
}

static void
assert_socket_pong (RedisLockTestServer *server)
{
  redisReply *reply = socket_command (server, "PING");

  g_assert_cmpint (reply->type, ==, REDIS_REPLY_STATUS);
  g_assert_cmpstr (reply->str, ==, "PONG");
  freeReplyObject (reply);
}

/* The value of a configuration parameter, read over the Unix socket. */
static char *
config_get (RedisLockTestServer *server, const char *name)
{
  g_autofree char *command = g_strdup_printf ("CONFIG GET %s", name);
  redisReply *reply = socket_command (server, command);
  char *value;

  g_assert_cmpint (reply->type, ==, REDIS_REPLY_ARRAY);
  g_assert_cmpuint (reply->elements, ==, 2);
  value = g_strdup (reply->element[1]->str);
  freeReplyObject (reply);
  return value;
}

/* The server certificate, as the server itself names it. */
static char *
server_cert_of (RedisLockTestServer *server)
{
  return config_get (server, "tls-cert-file");
}

/* The TLS files all exist, in one directory inside the server's temporary directory. */
static void
assert_tls_files (RedisLockTestServer *server)
{
  g_autofree char *dir = g_path_get_dirname (redis_lock_test_server_get_socket_path (server));

  for (int f = REDIS_LOCK_TEST_TLS_CA; f <= REDIS_LOCK_TEST_TLS_OTHER_CA; f++)
    {
      const char *path = redis_lock_test_server_get_tls_file (server, (RedisLockTestTlsFile)f);

      g_assert_nonnull (path);
      g_assert_true (g_path_is_absolute (path));
      g_assert_true (g_str_has_prefix (path, dir));
      g_assert_true (g_file_test (path, G_FILE_TEST_IS_REGULAR));
    }
}

/* --- Tests -------------------------------------------------------------------------- */

static void
test_plain_has_no_tls (void)
{
  g_autoptr (RedisLockTestServer) server = redis_lock_test_server_new_or_skip (NULL);

  if (server == NULL)
    return;
  g_assert_cmpint (redis_lock_test_server_get_port (server), ==, 0);
  for (int f = REDIS_LOCK_TEST_TLS_CA; f <= REDIS_LOCK_TEST_TLS_OTHER_CA; f++)
    g_assert_null (redis_lock_test_server_get_tls_file (server, (RedisLockTestTlsFile)f));
  g_assert_true (g_str_has_prefix (redis_lock_test_server_get_url (server), "unix://"));
  assert_socket_pong (server);
}

static void
test_default (void)
{
  g_autofree char *redis_cli = find_or_skip ("redis-cli");
  g_autofree char *openssl = redis_cli != NULL ? find_or_skip ("openssl") : NULL;
  g_autoptr (RedisLockTestServer) server = NULL;
  g_autofree char *url = NULL;
  g_autofree char *cert = NULL;
  g_autofree char *auth_clients = NULL;
  g_autofree char *output = NULL;
  const char *ca;
  const char *other_ca;
  gint64 start;

  if (openssl == NULL)
    return;
  start = g_get_monotonic_time ();
  server = redis_lock_test_server_new_tls_or_skip (REDIS_LOCK_TEST_TLS_DEFAULT, NULL);
  if (server == NULL)
    return;
  g_test_message ("the TLS server started in %" G_GINT64_FORMAT " ms",
                  (g_get_monotonic_time () - start) / 1000);

  ca = redis_lock_test_server_get_tls_file (server, REDIS_LOCK_TEST_TLS_CA);
  other_ca = redis_lock_test_server_get_tls_file (server, REDIS_LOCK_TEST_TLS_OTHER_CA);
  assert_tls_files (server);
  g_assert_cmpint (redis_lock_test_server_get_port (server), >, 0);
  url = g_strdup_printf ("rediss://127.0.0.1:%d?ca=%s", redis_lock_test_server_get_port (server),
                         ca);
  g_assert_cmpstr (redis_lock_test_server_get_url (server), ==, url);

  /* Over TLS, trusting the CA, and not trusting the other one. */
  assert_tls_pong (redis_cli, server, NULL, NULL, NULL);
  g_assert_cmpint (tls_handshake (openssl, server, ca, &output), ==, 0);
  g_assert_nonnull (strstr (output, "Verification: OK"));
  g_clear_pointer (&output, g_free);
  assert_tls_verify_fails (openssl, server, other_ca, "verify error");

  /* The certificates themselves. */
  cert = server_cert_of (server);
  assert_verifies (openssl, ca, cert, "sslserver");
  assert_verifies (openssl, ca, redis_lock_test_server_get_tls_file (server, REDIS_LOCK_TEST_TLS_CLIENT_CERT),
                   "sslclient");
  g_assert_cmpint (openssl_verify (openssl, other_ca, cert, "sslserver", &output), !=, 0);
  g_assert_nonnull (strstr (output, "unable to get local issuer certificate"));
  g_clear_pointer (&output, g_free);
  {
    const char *const argv[] = { openssl, "x509", "-in", cert, "-noout", "-checkend", "86400", NULL };
    g_assert_cmpint (run (argv, &output), ==, 0);
    g_clear_pointer (&output, g_free);
  }

  auth_clients = config_get (server, "tls-auth-clients");
  g_assert_cmpstr (auth_clients, ==, "no");
  assert_socket_pong (server);
}

static void
test_client_cert (void)
{
  g_autofree char *redis_cli = find_or_skip ("redis-cli");
  g_autoptr (RedisLockTestServer) server = NULL;
  g_autofree char *url = NULL;
  g_autofree char *output = NULL;
  g_autofree char *auth_clients = NULL;
  const char *client_cert;
  const char *client_key;

  if (redis_cli == NULL)
    return;
  server = redis_lock_test_server_new_tls_or_skip (REDIS_LOCK_TEST_TLS_REQUIRE_CLIENT_CERT, NULL);
  if (server == NULL)
    return;
  assert_tls_files (server);
  client_cert = redis_lock_test_server_get_tls_file (server, REDIS_LOCK_TEST_TLS_CLIENT_CERT);
  client_key = redis_lock_test_server_get_tls_file (server, REDIS_LOCK_TEST_TLS_CLIENT_KEY);
  url = g_strdup_printf ("rediss://127.0.0.1:%d?ca=%s&cert=%s&key=%s",
                         redis_lock_test_server_get_port (server),
                         redis_lock_test_server_get_tls_file (server, REDIS_LOCK_TEST_TLS_CA),
                         client_cert, client_key);
  g_assert_cmpstr (redis_lock_test_server_get_url (server), ==, url);
  auth_clients = config_get (server, "tls-auth-clients");
  g_assert_cmpstr (auth_clients, ==, "yes");

  /* Without a certificate the server closes the connection: no PONG. */
  g_assert_cmpint (tls_ping (redis_cli, server,
                             redis_lock_test_server_get_tls_file (server, REDIS_LOCK_TEST_TLS_CA),
                             NULL, NULL, NULL, &output),
                   !=, 0);
  g_assert_null (strstr (output, "PONG"));
  assert_tls_pong (redis_cli, server, client_cert, client_key, NULL);
  assert_socket_pong (server);
}

/* Parses "name=2026-11-21 12:44:29Z" (openssl x509 -dateopt iso_8601) from @output. */
static GDateTime *
parse_openssl_date (const char *output, const char *name)
{
  g_autofree char *prefix = g_strdup_printf ("%s=", name);
  const char *p = strstr (output, prefix);
  g_autofree char *value = NULL;
  GDateTime *t;

  g_assert_nonnull (p);
  value = g_strndup (p + strlen (prefix), strcspn (p + strlen (prefix), "\n"));
  g_strdelimit (value, " ", 'T');
  t = g_date_time_new_from_iso8601 (value, NULL);
  g_assert_nonnull (t);
  return t;
}

static void
test_expired (void)
{
  g_autofree char *openssl = find_or_skip ("openssl");
  g_autoptr (RedisLockTestServer) server = NULL;
  g_autoptr (GDateTime) now = NULL;
  g_autoptr (GDateTime) not_before = NULL;
  g_autoptr (GDateTime) not_after = NULL;
  g_autofree char *cert = NULL;
  g_autofree char *output = NULL;
  const char *ca;

  if (openssl == NULL)
    return;
  server = redis_lock_test_server_new_tls_or_skip (REDIS_LOCK_TEST_TLS_EXPIRED, NULL);
  if (server == NULL)
    return;
  now = g_date_time_new_now_utc ();
  ca = redis_lock_test_server_get_tls_file (server, REDIS_LOCK_TEST_TLS_CA);
  assert_tls_files (server);

  assert_tls_verify_fails (openssl, server, ca, "certificate has expired");

  /* Rejected for its dates: it is signed by the CA and made for localhost. */
  cert = server_cert_of (server);
  g_assert_cmpint (openssl_verify (openssl, ca, cert, "sslserver", &output), !=, 0);
  g_assert_nonnull (strstr (output, "certificate has expired"));
  g_clear_pointer (&output, g_free);
  {
    const char *const argv[] = { openssl, "x509", "-in", cert, "-noout", "-checkend", "0", NULL };
    g_assert_cmpint (run (argv, &output), ==, 1);
    g_clear_pointer (&output, g_free);
  }
  {
    const char *const argv[] = { openssl, "x509", "-in", cert, "-noout", "-startdate",
                                 "-enddate", "-dateopt", "iso_8601", NULL };
    GTimeSpan minute = 60 * G_TIME_SPAN_SECOND;

    g_assert_cmpint (run (argv, &output), ==, 0);
    not_before = parse_openssl_date (output, "notBefore");
    not_after = parse_openssl_date (output, "notAfter");
    g_assert_cmpint (g_date_time_difference (now, not_before), >=, 2 * G_TIME_SPAN_DAY - minute);
    g_assert_cmpint (g_date_time_difference (now, not_before), <=, 2 * G_TIME_SPAN_DAY + minute);
    g_assert_cmpint (g_date_time_difference (now, not_after), >=, G_TIME_SPAN_DAY - minute);
    g_assert_cmpint (g_date_time_difference (now, not_after), <=, G_TIME_SPAN_DAY + minute);
    g_clear_pointer (&output, g_free);
  }

  /* The client certificate is not expired. */
  assert_verifies (openssl, ca,
                   redis_lock_test_server_get_tls_file (server, REDIS_LOCK_TEST_TLS_CLIENT_CERT),
                   "sslclient");
  assert_socket_pong (server);
}

static void
test_password (void)
{
  const char *const config[] = { "requirepass \"s3cr&t=x\"", NULL };
  g_autofree char *redis_cli = find_or_skip ("redis-cli");
  g_autoptr (RedisLockTestServer) server = NULL;
  g_autofree char *url = NULL;
  g_autofree char *output = NULL;
  redisReply *reply;

  if (redis_cli == NULL)
    return;
  server = redis_lock_test_server_new_tls_or_skip (REDIS_LOCK_TEST_TLS_DEFAULT, config);
  if (server == NULL)
    return;
  url = g_strdup_printf ("rediss://127.0.0.1:%d?ca=%s&password=s3cr%%26t%%3Dx",
                         redis_lock_test_server_get_port (server),
                         redis_lock_test_server_get_tls_file (server, REDIS_LOCK_TEST_TLS_CA));
  g_assert_cmpstr (redis_lock_test_server_get_url (server), ==, url);

  assert_tls_pong (redis_cli, server, NULL, NULL, "s3cr&t=x");
  g_assert_cmpint (tls_ping (redis_cli, server,
                             redis_lock_test_server_get_tls_file (server, REDIS_LOCK_TEST_TLS_CA),
                             NULL, NULL, NULL, &output),
                   ==, 0);
  g_assert_true (g_str_has_prefix (output, "NOAUTH"));

  /* The socket needs the password too, and still answers. */
  reply = socket_command (server, "PING");
  g_assert_cmpint (reply->type, ==, REDIS_REPLY_ERROR);
  g_assert_true (g_str_has_prefix (reply->str, "NOAUTH"));
  freeReplyObject (reply);
}

static void
test_stop_start (void)
{
  g_autofree char *redis_cli = find_or_skip ("redis-cli");
  RedisLockTestServer *server;
  g_autofree char *ca = NULL;
  g_autofree char *tls_dir = NULL;
  g_autofree char *dir = NULL;
  g_autofree char *url = NULL;
  g_autofree char *output = NULL;
  GError *error = NULL;
  int port;

  if (redis_cli == NULL)
    return;
  server = redis_lock_test_server_new_tls_or_skip (REDIS_LOCK_TEST_TLS_REQUIRE_CLIENT_CERT, NULL);
  if (server == NULL)
    return;
  port = redis_lock_test_server_get_port (server);
  ca = g_strdup (redis_lock_test_server_get_tls_file (server, REDIS_LOCK_TEST_TLS_CA));
  url = g_strdup (redis_lock_test_server_get_url (server));

  redis_lock_test_server_stop (server);
  g_assert_cmpint (redis_lock_test_server_get_pid (server), ==, 0);
  g_assert_cmpint (tls_ping (redis_cli, server, ca, NULL, NULL, NULL, &output), !=, 0);
  g_clear_pointer (&output, g_free);

  g_assert_true (redis_lock_test_server_start (server, &error));
  g_assert_no_error (error);
  g_assert_cmpint (redis_lock_test_server_get_port (server), ==, port);
  g_assert_cmpstr (redis_lock_test_server_get_url (server), ==, url);
  g_assert_cmpstr (redis_lock_test_server_get_tls_file (server, REDIS_LOCK_TEST_TLS_CA), ==, ca);
  assert_tls_pong (redis_cli, server,
                   redis_lock_test_server_get_tls_file (server, REDIS_LOCK_TEST_TLS_CLIENT_CERT),
                   redis_lock_test_server_get_tls_file (server, REDIS_LOCK_TEST_TLS_CLIENT_KEY),
                   NULL);

  redis_lock_test_server_pause (server);
  redis_lock_test_server_resume (server);
  assert_tls_pong (redis_cli, server,
                   redis_lock_test_server_get_tls_file (server, REDIS_LOCK_TEST_TLS_CLIENT_CERT),
                   redis_lock_test_server_get_tls_file (server, REDIS_LOCK_TEST_TLS_CLIENT_KEY),
                   NULL);
  assert_socket_pong (server);

  /* Free removes the certificates with the rest. */
  tls_dir = g_path_get_dirname (ca);
  dir = g_path_get_dirname (tls_dir);
  g_assert_true (g_file_test (dir, G_FILE_TEST_IS_DIR));
  redis_lock_test_server_free (server);
  g_assert_false (g_file_test (ca, G_FILE_TEST_EXISTS));
  g_assert_false (g_file_test (dir, G_FILE_TEST_EXISTS));
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/testserver-tls/plain-has-no-tls", test_plain_has_no_tls);
  g_test_add_func ("/testserver-tls/default", test_default);
  g_test_add_func ("/testserver-tls/client-cert", test_client_cert);
  g_test_add_func ("/testserver-tls/expired", test_expired);
  g_test_add_func ("/testserver-tls/password", test_password);
  g_test_add_func ("/testserver-tls/stop-start", test_stop_start);
  return g_test_run ();
}
