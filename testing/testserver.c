/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* testserver.c: a private, throwaway redis-server for test programs.
 *
 * Tests of a Redis lock library are only worth something against a real Redis, and
 * they must be able to run in parallel (`make -j check`) without touching anyone's
 * server. So each test starts its own redis-server from the Debian package, listening
 * only on a Unix socket (`port 0`) inside a fresh g_dir_make_tmp() directory, with
 * persistence off (`save ""`, `appendonly no`): nothing survives it and nothing collides.
 * The configuration is a redis.conf file written next to the socket, so its exact
 * content can be read after a failure together with redis.log (the server's stdout and
 * stderr, kept in the same directory).
 *
 * The process itself (a child tracked by pid, killed with SIGKILL, frozen with SIGSTOP,
 * ready when it answers PING, any reply including NOAUTH when a password is required,
 * polled for up to 10 seconds) is testprocess.c's, shared with the Cluster and Sentinel
 * helpers; this file writes the configuration and builds the URL.
 *
 * A TLS server (redis_lock_test_server_new_tls()) keeps the same Unix socket, so that
 * tests still look at it with plain hiredis and readiness is still a PING there, and
 * also listens for TLS on a free port of 127.0.0.1 (`bind 127.0.0.1`, `port 0`,
 * `tls-port`). Its certificates are made at creation by the openssl command line in
 * dir/tls, from a configuration file written there (openssl.cnf, kept to read after a
 * failure): a self-signed CA and an unrelated one, and a server and a client key with
 * their requests, all four at the same time; then the CA signs the server certificate
 * (DNS:localhost, IP:127.0.0.1) and the client certificate, both at once, with
 * `openssl ca`, because `openssl x509 -req` cannot set a start date in the past and
 * an expired server certificate must have been valid once (from two days ago to
 * yesterday). The two signings use two CA sections with their own database files so
 * they cannot race. EC P-256 keys take no time to make, so the whole takes two rounds
 * of openssl start-up: some tens of milliseconds. Nothing prompts: every subject is
 * given with -subj, -batch answers the questions, stdin is /dev/null.
 *
 * A TLS port picked free may be taken before redis-server binds it: the server then
 * exits saying "Address already in use", and creation picks another port (as the
 * Cluster helper does); a restart keeps the port, waiting until it is free again.
 *
 * A server is reference-counted so that a language binding can hold it as a boxed value
 * (testtypes.c), whose copy is a reference: redis_lock_test_server_free() drops one, and the
 * last stops the process. C tests never take a second one.
 */
#include "config.h"

#include <redislock/redislock-test.h>

#include <errno.h>
#include <string.h>

#include <gio/gio.h>
#include <glib/gstdio.h>

#include "testprocess.h"

/* The validity of the certificates that are not expired, around the time of creation. */
#define CA_DAYS "3650"
#define CERT_DAYS 365

struct _RedisLockTestServer
{
  RlTestProcess *process; /* listens on process->socket_path, dir/redis.sock */
  char *url;              /* unix://socket_path[?password=...], or rediss://127.0.0.1:PORT?ca=... */
  char *password;         /* of the last `requirepass` line, or NULL */

  /* A TLS server only; a plain one has 0 and NULLs. */
  int tls_port;                   /* on 127.0.0.1 */
  RedisLockTestTlsFlags tls_flags;
  char *tls_dir;                  /* dir/tls */
  char *tls_files[REDIS_LOCK_TEST_TLS_OTHER_CA + 1]; /* by RedisLockTestTlsFile */
  char *server_cert;
  char *server_key;

};

/* Returns the password of a `requirepass` line, or NULL when @line is something else.
 * Surrounding quotes are dropped, as redis.conf does. */
static char *
parse_requirepass (const char *line)
{
  const char *p = line;
  const char *value;
  gsize len;

  while (g_ascii_isspace (*p))
    p++;
  if (g_ascii_strncasecmp (p, "requirepass", strlen ("requirepass")) != 0)
    return NULL;
  p += strlen ("requirepass");
  if (!g_ascii_isspace (*p))
    return NULL;
  while (g_ascii_isspace (*p))
    p++;
  value = p;
  len = strlen (value);
  while (len > 0 && g_ascii_isspace (value[len - 1]))
    len--;
  if (len >= 2 && (value[0] == '"' || value[0] == '\'') && value[len - 1] == value[0])
    {
      value++;
      len -= 2;
    }
  return len > 0 ? g_strndup (value, len) : NULL;
}

static char *
find_redis_server (GError **error)
{
  char *executable = rl_test_find_redis_server ();

  if (executable == NULL)
    g_set_error (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND,
                 "redis-server is not installed (looked in PATH, /usr/sbin and /usr/bin); "
                 "install the redis-server package to run these tests");
  return executable;
}

/* Writes redis.conf: the Unix socket, the TLS port when there is one, then
 * @config_lines. */
static gboolean
write_conf (RedisLockTestServer *server, const char *const *config_lines, GError **error)
{
  RlTestProcess *process = server->process;
  g_autoptr (GString) conf = NULL;

  if (server->tls_port == 0)
    conf = g_string_new (
        "# Written by redis_lock_test_server_new(): Unix socket only, no persistence.\n");
  else
    conf = g_string_new ("# Written by redis_lock_test_server_new_tls(): Unix socket and TLS "
                         "on 127.0.0.1, no persistence.\n");
  g_string_append (conf, "port 0\n");
  g_string_append (conf, "unixsocket ");
  rl_test_append_quoted (conf, process->socket_path);
  g_string_append (conf, "\nunixsocketperm 700\n");
  if (server->tls_port != 0)
    {
      g_string_append_printf (conf, "bind 127.0.0.1\ntls-port %d\n", server->tls_port);
      g_string_append (conf, "tls-cert-file ");
      rl_test_append_quoted (conf, server->server_cert);
      g_string_append (conf, "\ntls-key-file ");
      rl_test_append_quoted (conf, server->server_key);
      g_string_append (conf, "\ntls-ca-cert-file ");
      rl_test_append_quoted (conf, server->tls_files[REDIS_LOCK_TEST_TLS_CA]);
      g_string_append_printf (conf, "\ntls-auth-clients %s\n",
                              (server->tls_flags & REDIS_LOCK_TEST_TLS_REQUIRE_CLIENT_CERT) != 0
                                  ? "yes"
                                  : "no");
    }
  g_string_append (conf, "save \"\"\n");
  g_string_append (conf, "appendonly no\n");
  rl_test_process_append_conf (process, conf);
  for (gsize i = 0; config_lines != NULL && config_lines[i] != NULL; i++)
    {
      g_string_append (conf, config_lines[i]);
      g_string_append_c (conf, '\n');
    }
  return rl_test_process_write_conf (process, conf, error);
}

/* A path as a query value: %-encoded but for "/". */
static void
append_escaped_path (GString *url, const char *name, const char *path)
{
  g_autofree char *escaped = g_uri_escape_string (path, "/", FALSE);

  g_string_append_printf (url, "%s=%s", name, escaped);
}

static char *
build_url (RedisLockTestServer *server)
{
  GString *url = g_string_new (NULL);
  char sep = '?';

  if (server->tls_port == 0)
    g_string_append_printf (url, "unix://%s", server->process->socket_path);
  else
    {
      g_string_append_printf (url, "rediss://127.0.0.1:%d?", server->tls_port);
      append_escaped_path (url, "ca", server->tls_files[REDIS_LOCK_TEST_TLS_CA]);
      if ((server->tls_flags & REDIS_LOCK_TEST_TLS_REQUIRE_CLIENT_CERT) != 0)
        {
          g_string_append_c (url, '&');
          append_escaped_path (url, "cert", server->tls_files[REDIS_LOCK_TEST_TLS_CLIENT_CERT]);
          g_string_append_c (url, '&');
          append_escaped_path (url, "key", server->tls_files[REDIS_LOCK_TEST_TLS_CLIENT_KEY]);
        }
      sep = '&';
    }
  if (server->password != NULL)
    {
      g_autofree char *escaped = g_uri_escape_string (server->password, "!$'()*+,;:@/", FALSE);
      g_string_append_printf (url, "%cpassword=%s", sep, escaped);
    }
  return g_string_free (url, FALSE);
}

/* The configuration of `openssl req` and `openssl ca`, but for the CA sections that
 * append_ca_section() adds: the extensions of each kind of certificate. */
static const char openssl_cnf_head[] =
    "# Written by redis_lock_test_server_new_tls(): how the certificates here were made.\n"
    "[req]\n"
    "distinguished_name = rl_dn\n"
    "prompt = no\n"
    "[rl_dn]\n"
    "CN = redislock test\n"
    "[ca_ext]\n"
    "basicConstraints = critical, CA:TRUE\n"
    "keyUsage = critical, keyCertSign, cRLSign\n"
    "subjectKeyIdentifier = hash\n"
    "[server_ext]\n"
    "basicConstraints = critical, CA:FALSE\n"
    "keyUsage = critical, digitalSignature, keyAgreement\n"
    "extendedKeyUsage = serverAuth\n"
    "subjectAltName = DNS:localhost, IP:127.0.0.1\n"
    "subjectKeyIdentifier = hash\n"
    "authorityKeyIdentifier = keyid\n"
    "[client_ext]\n"
    "basicConstraints = critical, CA:FALSE\n"
    "keyUsage = critical, digitalSignature, keyAgreement\n"
    "extendedKeyUsage = clientAuth\n"
    "subjectKeyIdentifier = hash\n"
    "authorityKeyIdentifier = keyid\n"
    "[rl_policy]\n"
    "commonName = supplied\n";

/* Adds the CA section @kind_ca of `openssl ca -name`, with database files of its own
 * (dir/tls/@kind-index.txt, created empty here, and @kind-serial), so that the server
 * and the client certificates can be signed at the same time. The paths are absolute
 * and quoted (openssl.cnf reads quotes and backslashes as redis.conf does, and "$"
 * outside quotes), since openssl does not run in dir/tls. */
static gboolean
append_ca_section (GString *cnf, const char *tls_dir, const char *kind, GError **error)
{
  g_autofree char *index_name = g_strdup_printf ("%s-index.txt", kind);
  g_autofree char *serial_name = g_strdup_printf ("%s-serial", kind);
  g_autofree char *database = g_build_filename (tls_dir, index_name, NULL);
  g_autofree char *serial = g_build_filename (tls_dir, serial_name, NULL);
  g_autofree char *issued = g_build_filename (tls_dir, "issued", NULL);

  g_string_append_printf (cnf, "[%s_ca]\ndatabase = ", kind);
  rl_test_append_quoted (cnf, database);
  g_string_append (cnf, "\nserial = ");
  rl_test_append_quoted (cnf, serial);
  g_string_append (cnf, "\nnew_certs_dir = ");
  rl_test_append_quoted (cnf, issued);
  g_string_append (cnf, "\ndefault_md = sha256\n"
                        "policy = rl_policy\n"
                        "unique_subject = no\n"
                        "email_in_dn = no\n"
                        "copy_extensions = none\n");
  return g_file_set_contents (database, "", 0, error);
}

/* A time for `openssl ca -startdate/-enddate`, @days days from @now. */
static char *
openssl_time (GDateTime *now, double days)
{
  g_autoptr (GDateTime) t = g_date_time_add_seconds (now, days * 24 * 60 * 60);

  return g_date_time_format (t, "%Y%m%d%H%M%SZ");
}

/* The absolute path of the file @name of dir/tls. */
static char *
tls_path (RedisLockTestServer *server, const char *name)
{
  return g_build_filename (server->tls_dir, name, NULL);
}

/* Makes the CA, the server certificate, the client certificate and the other CA in
 * dir/tls with @openssl, which runs in our own working directory, not in dir/tls: a
 * tool that runs the test (valgrind following children) may have been given paths
 * relative to it. So every path is absolute. */
static gboolean
make_certificates (RedisLockTestServer *server, const char *openssl, GError **error)
{
  const char *ca_crt = server->tls_files[REDIS_LOCK_TEST_TLS_CA];
  const char *other_ca_crt = server->tls_files[REDIS_LOCK_TEST_TLS_OTHER_CA];
  const char *client_crt = server->tls_files[REDIS_LOCK_TEST_TLS_CLIENT_CERT];
  const char *client_key = server->tls_files[REDIS_LOCK_TEST_TLS_CLIENT_KEY];
  g_autofree char *cnf = tls_path (server, "openssl.cnf");
  g_autofree char *issued = tls_path (server, "issued");
  g_autofree char *ca_key = tls_path (server, "ca.key");
  g_autofree char *other_ca_key = tls_path (server, "other-ca.key");
  g_autofree char *server_csr = tls_path (server, "server.csr");
  g_autofree char *client_csr = tls_path (server, "client.csr");
#define RL_REQ openssl, "req", "-config", cnf, "-batch"
#define RL_NEW_KEY "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"
  const char *const ca_argv[]
      = { RL_REQ, "-x509", RL_NEW_KEY, "-keyout", ca_key, "-out", ca_crt,
          "-subj", "/CN=redislock test CA", "-days", CA_DAYS, "-extensions", "ca_ext", NULL };
  const char *const other_ca_argv[]
      = { RL_REQ, "-x509", RL_NEW_KEY, "-keyout", other_ca_key, "-out", other_ca_crt,
          "-subj", "/CN=redislock unrelated test CA", "-days", CA_DAYS,
          "-extensions", "ca_ext", NULL };
  const char *const server_req_argv[]
      = { RL_REQ, "-new", RL_NEW_KEY, "-keyout", server->server_key, "-out", server_csr,
          "-subj", "/CN=localhost", NULL };
  const char *const client_req_argv[]
      = { RL_REQ, "-new", RL_NEW_KEY, "-keyout", client_key, "-out", client_csr,
          "-subj", "/CN=redislock test client", NULL };
#undef RL_NEW_KEY
#undef RL_REQ
  const RlTestProgram keys[] = {
    { ca_argv, "ca.log" },
    { other_ca_argv, "other-ca.log" },
    { server_req_argv, "server-req.log" },
    { client_req_argv, "client-req.log" },
  };
  gboolean expired = (server->tls_flags & REDIS_LOCK_TEST_TLS_EXPIRED) != 0;
  g_autoptr (GDateTime) now = g_date_time_new_now_utc ();
  /* Valid since an hour ago (a little clock skew does no harm), or expired yesterday. */
  g_autofree char *valid_start = openssl_time (now, -1.0 / 24);
  g_autofree char *valid_end = openssl_time (now, CERT_DAYS);
  g_autofree char *expired_start = openssl_time (now, -2);
  g_autofree char *expired_end = openssl_time (now, -1);
#define RL_CA openssl, "ca", "-config", cnf, "-batch", "-notext", "-rand_serial", \
              "-cert", ca_crt, "-keyfile", ca_key
  const char *const server_sign_argv[]
      = { RL_CA, "-name", "server_ca", "-in", server_csr, "-out", server->server_cert,
          "-extensions", "server_ext", "-startdate", expired ? expired_start : valid_start,
          "-enddate", expired ? expired_end : valid_end, NULL };
  const char *const client_sign_argv[]
      = { RL_CA, "-name", "client_ca", "-in", client_csr, "-out", client_crt,
          "-extensions", "client_ext", "-startdate", valid_start, "-enddate", valid_end, NULL };
#undef RL_CA
  const RlTestProgram signatures[] = {
    { server_sign_argv, "server-sign.log" },
    { client_sign_argv, "client-sign.log" },
  };
  g_autoptr (GString) conf = g_string_new (openssl_cnf_head);

  if (g_mkdir (server->tls_dir, 0700) != 0 || g_mkdir (issued, 0700) != 0)
    {
      int saved = errno;
      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (saved), "Cannot create %s: %s",
                   issued, g_strerror (saved));
      return FALSE;
    }
  if (!append_ca_section (conf, server->tls_dir, "server", error)
      || !append_ca_section (conf, server->tls_dir, "client", error)
      || !g_file_set_contents (cnf, conf->str, (gssize)conf->len, error))
    return FALSE;
  return rl_test_run_programs (server->tls_dir, keys, G_N_ELEMENTS (keys), error)
         && rl_test_run_programs (server->tls_dir, signatures, G_N_ELEMENTS (signatures), error);
}

typedef struct
{
  RedisLockTestServer *server;
  const char *const *config_lines;
} TlsStart;

/* Configures a new TLS server for ports[0], its TLS port. */
static gboolean
configure_tls (RlTestProcess *process, const int *ports, gpointer data, GError **error)
{
  TlsStart *start = data;

  start->server->tls_port = ports[0];
  return write_conf (start->server, start->config_lines, error);
}

static RedisLockTestServer *
server_new (gboolean tls, RedisLockTestTlsFlags flags, const char *const *config_lines,
            GError **error)
{
  g_autoptr (RedisLockTestServer) server = NULL;
  g_autofree char *executable = NULL;
  g_autofree char *openssl = NULL;
  TlsStart start;

  executable = find_redis_server (error);
  if (executable == NULL)
    return NULL;
  if (tls)
    {
      openssl = rl_test_find_program ("openssl", NULL);
      if (openssl == NULL)
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND,
                       "openssl is not installed (looked in PATH, /usr/sbin and /usr/bin); "
                       "install the openssl package to run the TLS tests");
          return NULL;
        }
    }

  /* Reference counted: the last redis_lock_test_server_free() stops the server. */
  server = g_atomic_rc_box_new0 (RedisLockTestServer);
  server->process
      = rl_test_process_new (executable, NULL, "redislock-test", "redis.sock", 0, error);
  if (server->process == NULL)
    return NULL;
  for (gsize i = 0; config_lines != NULL && config_lines[i] != NULL; i++)
    {
      char *pw = parse_requirepass (config_lines[i]);

      if (pw != NULL)
        {
          g_free (server->password);
          server->password = pw;
        }
    }

  if (!tls)
    {
      server->url = build_url (server);
      if (!write_conf (server, config_lines, error)
          || !rl_test_process_start (server->process, error))
        return NULL;
      return g_steal_pointer (&server);
    }

  server->tls_flags = flags;
  server->tls_dir = g_build_filename (server->process->dir, "tls", NULL);
  server->tls_files[REDIS_LOCK_TEST_TLS_CA] = g_build_filename (server->tls_dir, "ca.crt", NULL);
  server->tls_files[REDIS_LOCK_TEST_TLS_CLIENT_CERT]
      = g_build_filename (server->tls_dir, "client.crt", NULL);
  server->tls_files[REDIS_LOCK_TEST_TLS_CLIENT_KEY]
      = g_build_filename (server->tls_dir, "client.key", NULL);
  server->tls_files[REDIS_LOCK_TEST_TLS_OTHER_CA]
      = g_build_filename (server->tls_dir, "other-ca.crt", NULL);
  server->server_cert = g_build_filename (server->tls_dir, "server.crt", NULL);
  server->server_key = g_build_filename (server->tls_dir, "server.key", NULL);
  start.server = server;
  start.config_lines = config_lines;
  if (!make_certificates (server, openssl, error)
      || !rl_test_process_start_new (server->process, 1, configure_tls, &start, error))
    return NULL;
  server->url = build_url (server);
  return g_steal_pointer (&server);
}

RedisLockTestServer *
redis_lock_test_server_new (const char *const *config_lines, GError **error)
{
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);
  return server_new (FALSE, REDIS_LOCK_TEST_TLS_DEFAULT, config_lines, error);
}

RedisLockTestServer *
redis_lock_test_server_new_tls (RedisLockTestTlsFlags flags, const char *const *config_lines,
                                GError **error)
{
  g_return_val_if_fail ((flags & ~(REDIS_LOCK_TEST_TLS_REQUIRE_CLIENT_CERT
                                   | REDIS_LOCK_TEST_TLS_EXPIRED))
                            == 0,
                        NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);
  return server_new (TRUE, flags, config_lines, error);
}

RedisLockTestServer *
redis_lock_test_server_new_or_skip (const char *const *config_lines)
{
  GError *error = NULL;
  RedisLockTestServer *server = redis_lock_test_server_new (config_lines, &error);

  return rl_test_or_skip (server, error, "redislock test server");
}

RedisLockTestServer *
redis_lock_test_server_new_tls_or_skip (RedisLockTestTlsFlags flags,
                                        const char *const *config_lines)
{
  GError *error = NULL;
  RedisLockTestServer *server = redis_lock_test_server_new_tls (flags, config_lines, &error);

  return rl_test_or_skip (server, error, "redislock test server");
}

const char *
redis_lock_test_server_get_url (RedisLockTestServer *server)
{
  g_return_val_if_fail (server != NULL, NULL);
  return server->url;
}

const char *
redis_lock_test_server_get_socket_path (RedisLockTestServer *server)
{
  g_return_val_if_fail (server != NULL, NULL);
  return server->process->socket_path;
}

int
redis_lock_test_server_get_port (RedisLockTestServer *server)
{
  g_return_val_if_fail (server != NULL, 0);
  return server->tls_port;
}

const char *
redis_lock_test_server_get_tls_file (RedisLockTestServer *server, RedisLockTestTlsFile file)
{
  g_return_val_if_fail (server != NULL, NULL);
  g_return_val_if_fail (file >= REDIS_LOCK_TEST_TLS_CA && file <= REDIS_LOCK_TEST_TLS_OTHER_CA,
                        NULL);
  return server->tls_files[file];
}

GPid
redis_lock_test_server_get_pid (RedisLockTestServer *server)
{
  g_return_val_if_fail (server != NULL, 0);
  return server->process->pid;
}

gboolean
redis_lock_test_server_start (RedisLockTestServer *server, GError **error)
{
  g_return_val_if_fail (server != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);
  /* While it was stopped, another socket may have taken its TLS port (as its local
   * port, say): wait until it is free again, the URL names it. */
  if (server->tls_port != 0)
    return rl_test_process_restart (server->process, error);
  return rl_test_process_start (server->process, error);
}

void
redis_lock_test_server_stop (RedisLockTestServer *server)
{
  g_return_if_fail (server != NULL);
  rl_test_process_stop (server->process);
}

void
redis_lock_test_server_pause (RedisLockTestServer *server)
{
  g_return_if_fail (server != NULL);
  rl_test_process_pause (server->process);
}

void
redis_lock_test_server_resume (RedisLockTestServer *server)
{
  g_return_if_fail (server != NULL);
  rl_test_process_resume (server->process);
}

RedisLockTestServer *
redis_lock_test_server_ref (RedisLockTestServer *server)
{
  g_return_val_if_fail (server != NULL, NULL);
  return g_atomic_rc_box_acquire (server);
}

/* Stops @data, a server whose last reference went, and frees what it holds. */
static void
server_clear (gpointer data)
{
  RedisLockTestServer *server = data;

  rl_test_process_free (server->process);
  g_free (server->url);
  g_free (server->password);
  g_free (server->tls_dir);
  for (gsize i = 0; i < G_N_ELEMENTS (server->tls_files); i++)
    g_free (server->tls_files[i]);
  g_free (server->server_cert);
  g_free (server->server_key);
}

void
redis_lock_test_server_free (RedisLockTestServer *server)
{
  if (server != NULL)
    g_atomic_rc_box_release_full (server, server_clear);
}
