/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* section-tls.c: what an uncontended lock+unlock costs over TLS (rediss://).
 *
 * The section starts its own TLS server (redis_lock_test_server_new_tls(), certificates
 * made by openssl) instead of using the run's server, and skips with a note when it
 * cannot (no redis-server or openssl, or a build without TLS). As in
 * section-uncontended.c, a lock+unlock pair through a registry on the server's rediss://
 * URL is compared with two raw round trips of an EVALSHA of `return 1` made back to
 * back, timed one pair at a time in alternating blocks so that both see the same
 * machine. hiredis 0.14 speaks no TLS, so the raw calls go through a minimal blocking
 * GnuTLS client written here (one socket, TCP_NODELAY, the default priorities, the
 * test CA as the only trust anchor, the certificate verified for 127.0.0.1, requests
 * encoded once beforehand, replies read until one complete reply is in), the least any
 * TLS client must do; the ratio then shows what the library's own TLS path and
 * bookkeeping add. The server also listens on a plain TCP port, when one could be
 * given to it, so the same pairs over redis:// against two raw EVALSHA on a plain
 * hiredis connection run in the same blocks, and the two ratios tell what TLS itself
 * costs from what the library adds to it.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#ifdef RL_HAVE_GNUTLS
#include <gnutls/gnutls.h>
#endif

#include "bench.h"

/* Declared here as well as in section-list.h: this file does not include the table. */
void section_tls (Bench *b, Section *s);

#ifdef RL_HAVE_GNUTLS

/* Pairs of each kind alternate in blocks of this many. */
#define INTERLEAVE_BLOCK 25

/* --- A minimal blocking GnuTLS client ------------------------------------------------ */

typedef struct
{
  int fd;
  gnutls_certificate_credentials_t creds;
  gnutls_session_t session;
  char buf[4096]; /* bytes received and not yet consumed */
  gsize len;
} TlsClient;

static void
tls_client_free (TlsClient *c)
{
  if (c == NULL)
    return;
  if (c->session != NULL)
    gnutls_deinit (c->session);
  if (c->creds != NULL)
    gnutls_certificate_free_credentials (c->creds);
  if (c->fd >= 0)
    close (c->fd);
  g_free (c);
}

G_DEFINE_AUTOPTR_CLEANUP_FUNC (TlsClient, tls_client_free)

static gboolean
tls_fail (GError **error, const char *what, int rc)
{
  g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "raw TLS client: %s: %s", what,
               gnutls_strerror (rc));
  return FALSE;
}

/* A TLS connection to 127.0.0.1:@port that trusts @ca only, the server's certificate
 * verified for 127.0.0.1; NULL with @error set. */
static TlsClient *
tls_client_open (int port, const char *ca, GError **error)
{
  g_autoptr (TlsClient) c = g_new0 (TlsClient, 1);
  struct sockaddr_in addr;
  const char *what;
  int one = 1, rc;

  c->fd = socket (AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (c->fd < 0)
    goto sys_error;
  memset (&addr, 0, sizeof addr);
  addr.sin_family = AF_INET;
  addr.sin_port = htons ((guint16)port);
  addr.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
  if (connect (c->fd, (struct sockaddr *)&addr, sizeof addr) < 0)
    goto sys_error;
  setsockopt (c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);

  what = "credentials";
  rc = gnutls_certificate_allocate_credentials (&c->creds);
  if (rc < 0)
    goto tls_error;
  what = ca;
  rc = gnutls_certificate_set_x509_trust_file (c->creds, ca, GNUTLS_X509_FMT_PEM);
  if (rc <= 0)
    {
      rc = rc == 0 ? GNUTLS_E_NO_CERTIFICATE_FOUND : rc;
      goto tls_error;
    }
  what = "session";
  rc = gnutls_init (&c->session, GNUTLS_CLIENT);
  if (rc < 0)
    goto tls_error;
  rc = gnutls_set_default_priority (c->session);
  if (rc < 0)
    goto tls_error;
  rc = gnutls_credentials_set (c->session, GNUTLS_CRD_CERTIFICATE, c->creds);
  if (rc < 0)
    goto tls_error;
  gnutls_session_set_verify_cert (c->session, "127.0.0.1", 0);
  gnutls_transport_set_int (c->session, c->fd);
  what = "handshake";
  do
    rc = gnutls_handshake (c->session);
  while (rc < 0 && gnutls_error_is_fatal (rc) == 0);
  if (rc < 0)
    goto tls_error;
  return g_steal_pointer (&c);

tls_error:
  tls_fail (error, what, rc);
  return NULL;

sys_error:
  g_set_error (error, G_IO_ERROR, g_io_error_from_errno (errno), "raw TLS client: 127.0.0.1:%d: %s",
               port, g_strerror (errno));
  return NULL;
}

/* The length of the complete reply at the start of @c's buffer, 0 when more bytes are
 * needed, -1 for a reply this client does not read (arrays). Simple strings, errors,
 * integers and bulk strings are all the section asks for. */
static gssize
reply_length (TlsClient *c)
{
  const char *crlf = c->len > 0 ? memchr (c->buf, '\n', c->len) : NULL;
  gsize header;
  long bulk;

  if (crlf == NULL)
    return 0;
  header = (gsize)(crlf - c->buf) + 1;
  switch (c->buf[0])
    {
    case '+':
    case '-':
    case ':':
      return (gssize)header;
    case '$':
      bulk = strtol (c->buf + 1, NULL, 10);
      if (bulk < 0)
        return (gssize)header;
      if ((gsize)bulk + 2 > sizeof c->buf - header)
        return -1;
      return c->len >= header + (gsize)bulk + 2 ? (gssize)(header + (gsize)bulk + 2) : 0;
    default:
      return -1;
    }
}

/* Sends @req (RESP, @req_len bytes) and reads until one complete reply is in; the reply
 * is at the start of @c->buf, @reply_len bytes long, until the next call. An error
 * reply is an error. */
static gboolean
tls_roundtrip (TlsClient *c, const char *req, gsize req_len, gsize *reply_len, GError **error)
{
  gsize sent = 0;
  gssize n, whole;

  /* Consumes the previous reply (normally all the buffer holds). */
  if (*reply_len > 0)
    {
      memmove (c->buf, c->buf + *reply_len, c->len - *reply_len);
      c->len -= *reply_len;
      *reply_len = 0;
    }
  while (sent < req_len)
    {
      n = gnutls_record_send (c->session, req + sent, req_len - sent);
      if (n == GNUTLS_E_AGAIN || n == GNUTLS_E_INTERRUPTED)
        continue;
      if (n < 0)
        return tls_fail (error, "send", (int)n);
      sent += (gsize)n;
    }
  while ((whole = reply_length (c)) == 0)
    {
      if (c->len == sizeof c->buf)
        break;
      n = gnutls_record_recv (c->session, c->buf + c->len, sizeof c->buf - c->len);
      if (n > 0)
        c->len += (gsize)n;
      else if (n == 0)
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_CONNECTION_CLOSED,
                       "raw TLS client: the server closed the connection");
          return FALSE;
        }
      else if (gnutls_error_is_fatal ((int)n) != 0)
        return tls_fail (error, "receive", (int)n);
    }
  if (whole <= 0)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED,
                   "raw TLS client: a reply this client does not read (%.20s)", c->buf);
      return FALSE;
    }
  *reply_len = (gsize)whole;
  if (c->buf[0] == '-')
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "raw TLS client: Redis answered %.*s",
                   (int)strcspn (c->buf + 1, "\r\n"), c->buf + 1);
      return FALSE;
    }
  return TRUE;
}

/* The RESP encoding of the command @argv. */
static char *
resp_encode (const char *const *argv, gsize *len)
{
  GString *out = g_string_new (NULL);
  guint argc = g_strv_length ((char **)argv), i;

  g_string_append_printf (out, "*%u\r\n", argc);
  for (i = 0; i < argc; i++)
    g_string_append_printf (out, "$%zu\r\n%s\r\n", strlen (argv[i]), argv[i]);
  *len = out->len;
  return g_string_free (out, FALSE);
}

/* The raw TLS baseline: a client, and EVALSHA of `return 1` encoded once. */
typedef struct
{
  TlsClient *client;
  char *evalsha;
  gsize evalsha_len;
  gsize reply_len;
} TlsRaw;

static void
tls_raw_clear (TlsRaw *r)
{
  tls_client_free (r->client);
  g_free (r->evalsha);
}

/* Connects and loads the script (its SHA1 computed here, checked against the reply). */
static gboolean
tls_raw_open (TlsRaw *r, int port, const char *ca, GError **error)
{
  static const char script[] = "return 1";
  const char *load[] = { "SCRIPT", "LOAD", script, NULL };
  g_autofree char *sha = g_compute_checksum_for_string (G_CHECKSUM_SHA1, script, -1);
  const char *call[] = { "EVALSHA", sha, "0", NULL };
  g_autofree char *load_req = NULL;
  gsize load_len;

  memset (r, 0, sizeof *r);
  r->client = tls_client_open (port, ca, error);
  if (r->client == NULL)
    return FALSE;
  load_req = resp_encode (load, &load_len);
  if (!tls_roundtrip (r->client, load_req, load_len, &r->reply_len, error))
    return FALSE;
  if (r->reply_len < 4 + strlen (sha) || memcmp (r->client->buf, "$40\r\n", 5) != 0
      || memcmp (r->client->buf + 5, sha, strlen (sha)) != 0)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED,
                   "raw TLS client: SCRIPT LOAD did not answer the SHA1 of the script");
      return FALSE;
    }
  r->evalsha = resp_encode (call, &r->evalsha_len);
  return TRUE;
}

/* One EVALSHA of `return 1`, which must answer 1. */
static gboolean
tls_raw_call (TlsRaw *r, GError **error)
{
  if (!tls_roundtrip (r->client, r->evalsha, r->evalsha_len, &r->reply_len, error))
    return FALSE;
  if (r->reply_len != 4 || memcmp (r->client->buf, ":1\r\n", 4) != 0)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED,
                   "raw TLS client: EVALSHA of `return 1` answered %.*s", (int)r->reply_len,
                   r->client->buf);
      return FALSE;
    }
  return TRUE;
}

/* --- The section ------------------------------------------------------------------- */

/* A free TCP port of 127.0.0.1 for the server's plain port, or 0. Another socket may
 * take it before the server binds it: the server then fails to start, and the section
 * starts one without a plain port. */
static int
pick_free_port (void)
{
  struct sockaddr_in addr;
  socklen_t len = sizeof addr;
  int fd = socket (AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), port = 0;

  if (fd < 0)
    return 0;
  memset (&addr, 0, sizeof addr);
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
  if (bind (fd, (struct sockaddr *)&addr, sizeof addr) == 0
      && getsockname (fd, (struct sockaddr *)&addr, &len) == 0)
    port = ntohs (addr.sin_port);
  close (fd);
  return port;
}

/* Starts the section's TLS server, with a plain TCP port as well when one can be had
 * (*@plain_port, else 0); NULL after adding an n/a row. */
static RedisLockTestServer *
start_server (Section *s, int *plain_port)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *port_line = NULL;
  RedisLockTestServer *server = NULL;

  *plain_port = pick_free_port ();
  if (*plain_port != 0)
    {
      const char *lines[] = { NULL, NULL };

      port_line = g_strdup_printf ("port %d", *plain_port);
      lines[0] = port_line;
      server = redis_lock_test_server_new_tls (REDIS_LOCK_TEST_TLS_DEFAULT, lines, &error);
      if (server != NULL)
        return server;
      if (g_error_matches (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND))
        goto fail;
      add_note (s, "no plain TCP port: a server with one did not start (%s)", error->message);
      g_clear_error (&error);
    }
  *plain_port = 0;
  server = redis_lock_test_server_new_tls (REDIS_LOCK_TEST_TLS_DEFAULT, NULL, &error);
  if (server != NULL)
    return server;

fail:
  *plain_port = 0;
  if (g_error_matches (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND))
    add_na (s, "TLS pair", "skipped, no TLS server can be started: %s", error->message);
  else
    add_na (s, "TLS pair", "cannot start a TLS server: %s", error->message);
  return NULL;
}

/* The plain TCP comparison: a registry on redis://127.0.0.1:PORT and a plain hiredis
 * connection there. */
typedef struct
{
  RedisLockRegistry *registry;
  RedisLock *lock;
  RawConn *raw;
  gint64 *lib_samples;
  gint64 *raw_samples;
} Plain;

static void
plain_clear (Plain *p)
{
  if (p->lock != NULL)
    redis_lock_unref (p->lock);
  if (p->registry != NULL)
    redis_lock_registry_unref (p->registry);
  if (p->raw != NULL)
    raw_close (p->raw);
  g_free (p->lib_samples);
  g_free (p->raw_samples);
}

static gboolean
plain_open (Plain *p, Bench *b, int port, guint n, GError **error)
{
  g_autofree char *url = g_strdup_printf ("redis://127.0.0.1:%d", port);
  RawTarget t;

  p->registry = redis_lock_registry_new (url, b->key, error);
  if (p->registry == NULL)
    return FALSE;
  p->lock = redis_lock_registry_obtain (p->registry, "tls-plain", error);
  if (p->lock == NULL)
    return FALSE;
  if (!raw_target_parse (url, &t, error))
    return FALSE;
  p->raw = raw_open (&t, error);
  raw_target_clear (&t);
  if (p->raw == NULL)
    return FALSE;
  p->lib_samples = g_new (gint64, n);
  p->raw_samples = g_new (gint64, n);
  return TRUE;
}

void
section_tls (Bench *b, Section *s)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (RedisLockTestServer) server = NULL;
  g_autoptr (RedisLockRegistry) registry = NULL;
  g_autoptr (RedisLock) lock = NULL;
  TlsRaw raw;
  Plain plain;
  RedisLockRegistryStats before, after;
  guint n = b->uncontended_pairs - b->uncontended_pairs % INTERLEAVE_BLOCK;
  g_autofree gint64 *lib_samples = g_new (gint64, n);
  g_autofree gint64 *raw_samples = g_new (gint64, n);
  g_autofree char *plain_why = NULL;
  double commands, round_trips;
  Dist lib, raw_pair;
  gboolean with_plain;
  int plain_port;
  guint i, k;

  memset (&raw, 0, sizeof raw);
  memset (&plain, 0, sizeof plain);
  server = start_server (s, &plain_port);
  if (server == NULL)
    return;
  registry = redis_lock_registry_new (redis_lock_test_server_get_url (server), b->key, &error);
  if (registry == NULL)
    goto fail;
  lock = redis_lock_registry_obtain (registry, "tls", &error);
  if (lock == NULL)
    goto fail;
  if (!tls_raw_open (&raw, redis_lock_test_server_get_port (server),
                     redis_lock_test_server_get_tls_file (server, REDIS_LOCK_TEST_TLS_CA), &error))
    goto fail;
  with_plain = plain_port != 0;
  if (with_plain)
    {
      g_autoptr (GError) plain_error = NULL;

      if (!plain_open (&plain, b, plain_port, n, &plain_error))
        {
          plain_why = g_strdup (plain_error->message);
          with_plain = FALSE;
        }
    }
  else
    plain_why = g_strdup ("the server has no plain TCP port");
  for (i = 0; i < 200; i++)
    {
      if (!redis_lock_lock (lock, &error) || !redis_lock_unlock (lock, &error)
          || !tls_raw_call (&raw, &error))
        goto fail;
      if (with_plain
          && (!redis_lock_lock (plain.lock, &error) || !redis_lock_unlock (plain.lock, &error)
              || !raw_call (plain.raw, &error)))
        goto fail;
    }

  /* Blocks of raw TLS pairs (two EVALSHA back to back) and of lock+unlock pairs over
   * TLS alternate, and with them the same two over plain TCP, so all see the same
   * machine. */
  redis_lock_registry_get_stats (registry, &before);
  for (i = 0; i < n; i += INTERLEAVE_BLOCK)
    {
      for (k = i; k < i + INTERLEAVE_BLOCK; k++)
        {
          gint64 t0 = now_ns ();

          if (!tls_raw_call (&raw, &error) || !tls_raw_call (&raw, &error))
            goto fail;
          raw_samples[k] = now_ns () - t0;
        }
      for (k = i; k < i + INTERLEAVE_BLOCK; k++)
        {
          gint64 t0 = now_ns ();

          if (!redis_lock_lock (lock, &error) || !redis_lock_unlock (lock, &error))
            goto fail;
          lib_samples[k] = now_ns () - t0;
        }
      if (!with_plain)
        continue;
      for (k = i; k < i + INTERLEAVE_BLOCK; k++)
        {
          gint64 t0 = now_ns ();

          if (!raw_call (plain.raw, &error) || !raw_call (plain.raw, &error))
            goto fail;
          plain.raw_samples[k] = now_ns () - t0;
        }
      for (k = i; k < i + INTERLEAVE_BLOCK; k++)
        {
          gint64 t0 = now_ns ();

          if (!redis_lock_lock (plain.lock, &error) || !redis_lock_unlock (plain.lock, &error))
            goto fail;
          plain.lib_samples[k] = now_ns () - t0;
        }
    }
  redis_lock_registry_get_stats (registry, &after);
  lib = dist_of (lib_samples, n, 1);
  raw_pair = dist_of (raw_samples, n, 1);
  commands = (double)(after.commands - before.commands) / n;
  round_trips = (double)(after.round_trips - before.round_trips) / n;

  add_row (s, "TLS pair p50", lib.p50 / 1000, "us", 1, lib.p50 / raw_pair.p50,
           "2 raw TLS calls p50", "<= 1.15x", lib.p50 <= 1.15 * raw_pair.p50);
  add_row (s, "TLS pair p99", lib.p99 / 1000, "us", 1, lib.p99 / raw_pair.p99,
           "2 raw TLS calls p99", NULL, FALSE);
  add_row (s, "TLS pair mean", lib.mean / 1000, "us", 1, lib.mean / raw_pair.mean,
           "2 raw TLS calls mean", NULL, FALSE);
  add_row (s, "2 raw TLS calls p50 (baseline)", raw_pair.p50 / 1000, "us", 1, 1.0,
           "2 raw TLS calls p50", NULL, FALSE);
  add_row (s, "2 raw TLS calls p99 (baseline)", raw_pair.p99 / 1000, "us", 1, 1.0,
           "2 raw TLS calls p99", NULL, FALSE);
  add_row (s, "Redis commands per pair", commands, "", 2, commands / 2, "2", NULL, FALSE);
  add_row (s, "round trips per pair", round_trips, "", 2, round_trips / 2, "2", "= 2",
           after.round_trips - before.round_trips == 2 * (guint64)n);
  if (with_plain)
    {
      Dist plib = dist_of (plain.lib_samples, n, 1);
      Dist praw = dist_of (plain.raw_samples, n, 1);

      add_row (s, "TCP pair p50", plib.p50 / 1000, "us", 1, plib.p50 / praw.p50,
               "2 raw TCP calls p50", NULL, FALSE);
      add_row (s, "TCP pair p99", plib.p99 / 1000, "us", 1, plib.p99 / praw.p99,
               "2 raw TCP calls p99", NULL, FALSE);
      add_row (s, "2 raw TCP calls p50 (baseline)", praw.p50 / 1000, "us", 1, 1.0,
               "2 raw TCP calls p50", NULL, FALSE);
      add_row (s, "TLS pair vs TCP pair", lib.p50 / 1000, "us", 1, lib.p50 / plib.p50,
               "TCP pair p50", NULL, FALSE);
      add_row (s, "2 raw TLS vs 2 raw TCP calls", raw_pair.p50 / 1000, "us", 1,
               raw_pair.p50 / praw.p50, "2 raw TCP calls p50", NULL, FALSE);
    }
  else
    add_na (s, "TCP pair", "%s", plain_why);
  add_note (s,
            "a private server with TLS on 127.0.0.1:%d (GnuTLS %s in this process; default "
            "priorities, the test CA, the certificate verified for 127.0.0.1)%s",
            redis_lock_test_server_get_port (server), gnutls_check_version (NULL),
            with_plain ? " and plain TCP on another port of 127.0.0.1" : "");
  add_note (s,
            "%u pairs on one name from one thread, each timed, in blocks of %d alternating "
            "with blocks of two EVALSHA of `return 1` on a minimal blocking GnuTLS client%s, "
            "after 200 warm-up pairs",
            n, INTERLEAVE_BLOCK,
            with_plain ? " (and the same two blocks over plain TCP, the raw calls on hiredis)"
                       : "");
  tls_raw_clear (&raw);
  plain_clear (&plain);
  return;

fail:
  add_na (s, "TLS pair", "%s", error->message);
  tls_raw_clear (&raw);
  plain_clear (&plain);
}

#else /* !RL_HAVE_GNUTLS */

void
section_tls (Bench *b, Section *s)
{
  add_na (s, "TLS pair", "this build has no TLS (configure found no GnuTLS, or --with-tls=no)");
}

#endif /* RL_HAVE_GNUTLS */
