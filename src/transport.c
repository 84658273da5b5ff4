/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* transport.c: the bytes between the library and one Redis node, plain or TLS.
 *
 * hiredis 0.14, the version Debian ships, has no TLS and no pluggable I/O, but its
 * reply parser is public; the library already encodes commands itself. So this file
 * owns the socket: a non-blocking TCP or Unix socket, TLS over it through GnuTLS when
 * the URL says rediss, an output buffer of encoded commands, and hiredis's reader fed
 * with whatever arrives. Every blocking step (connect, handshake, sending, waiting for
 * a reply) is bounded by a deadline, so a dead or frozen server becomes "timed out"
 * instead of a hang, whatever the transport.
 *
 * The socket is connected non-blocking, then left in blocking mode with a receive
 * timeout of RL_RECV_SLICE_US: every send and every read that must not wait says so
 * (MSG_DONTWAIT), and a caller waiting for one connection's reply reads with a plain
 * recv() that sleeps in the kernel, in slices, while a whole slice is left before its
 * deadline, and with poll() then recv() for the rest. A round trip is then two system
 * calls, as for a blocking client; nothing ever waits past its deadline. Measured on
 * the 2-CPU VM the bench runs on, quiet, a lock+unlock pair took 1.00-1.02x two raw
 * round trips this way against 1.26-1.35x waiting in poll() (the extra system call
 * after each wake-up is what costs there); with other load on the machine the order
 * turned (1.32-1.40x against 1.15-1.23x). Benchmarks run on a quiet machine, and a
 * blocking client (hiredis, the baselines) waits this way too.
 *
 * TLS specifics: certificates and host names are always verified (there is no switch
 * to turn that off); the name verified, and sent as SNI, is the URL's host unless
 * `sni=` says otherwise (an IP address is verified against the certificate's IP
 * addresses and not sent as SNI). GnuTLS may hold decrypted bytes that poll() cannot
 * see, so readers ask rl_conn_has_pending() before sleeping; a read may also return
 * "again" without data right after a TLS 1.3 handshake, while GnuTLS takes in a
 * session ticket.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* POLLRDHUP */
#endif
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#ifdef RL_HAVE_GNUTLS
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#endif

#include "key-index.h"
#include "sync.h"
#include "transport.h"

#define RL_READ_CHUNK 16384
/* The longest a single blocking recv() sleeps (SO_RCVTIMEO); it is used only while at
 * least this much is left before the reader's deadline. */
#define RL_RECV_SLICE_US (100 * 1000)

/* Errors ----------------------------------------------------------------------------- */

void
rl_conn_fail (RlConn *conn, RlConnError err, const char *why)
{
  if (conn->err != RL_CONN_OK)
    return;
  conn->err = err;
  g_strlcpy (conn->errstr, why, sizeof conn->errstr);
}

static void
fail_errno (RlConn *conn, int errnum)
{
  conn->sys_errno = errnum;
  rl_conn_fail (conn, RL_CONN_ERR_IO, g_strerror (errnum));
}

void
rl_set_error_from_conn (GError **error, RlConn *conn, const char *what)
{
  /* A server that requires client certificates accepts the handshake (TLS 1.3) and
   * then drops the connection; whether its alert arrives before the drop is a race. */
  if (conn->without_cert && !conn->answered && conn->err != RL_CONN_ERR_TIMEOUT
      && strstr (conn->errstr, "client certificate") == NULL)
    {
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION,
                   "%s: %s, before any reply (does the server require a client certificate: "
                   "cert= and key=?)",
                   what,
                   conn->err == RL_CONN_ERR_EOF ? "Redis closed the connection"
                   : conn->errstr[0] != '\0'   ? conn->errstr
                                                : "the connection failed");
      return;
    }
  switch (conn->err)
    {
    case RL_CONN_ERR_TIMEOUT:
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION, "%s: Redis timed out",
                   what);
      break;
    case RL_CONN_ERR_EOF:
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION,
                   "%s: Redis closed the connection", what);
      break;
    default:
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION, "%s: %s", what,
                   conn->errstr[0] != '\0' ? conn->errstr : "Redis connection failed");
      break;
    }
}

gboolean
rl_conn_is_stale (RlConn *conn)
{
  return conn->err == RL_CONN_ERR_EOF
         || (conn->err == RL_CONN_ERR_IO
             && (conn->sys_errno == ECONNRESET || conn->sys_errno == EPIPE));
}

gboolean
rl_conn_peer_closed (RlConn *conn)
{
  struct pollfd pfd = { .fd = conn->fd, .events = POLLIN | POLLRDHUP };
  char byte;
  ssize_t n;

  if (conn->err != RL_CONN_OK)
    return TRUE;
  if (poll (&pfd, 1, 0) <= 0)
    return FALSE;
  if (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL))
    return TRUE;
  if (!(pfd.revents & POLLIN))
    return FALSE;
  /* Readable while idle: a plain connection has nothing to say unasked, so whatever it
   * is makes the connection unusable; over TLS the bytes may be a record the server
   * sends after the handshake (a session ticket), which the next read takes in. */
  n = recv (conn->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0)
    return TRUE;
  if (n < 0)
    return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
  return conn->tls == NULL;
}

/* TLS ----------------------------------------------------------------------------------- */

#ifdef RL_HAVE_GNUTLS

struct _RlTls
{
  gnutls_certificate_credentials_t creds;
  char *verify_name; /* the name the certificate must carry */
  char *sni;         /* the name sent, or NULL (an IP address is not sent) */
};

/* GnuTLS reads a record as two reads of the socket (its 5-byte header, then the
 * rest). The session reads through @in instead: one recv() takes whatever the socket
 * has (a whole reply burst, usually), and GnuTLS's reads are served from it. */
#define RL_TLS_IN_SIZE (16384 + 2048) /* a maximal TLS record and some */

struct _RlTlsSession
{
  gnutls_session_t session;
  int fd;
  gsize in_off, in_len; /* @in[in_off, in_len) read from the socket, not yet by GnuTLS */
  gboolean block;       /* the read under way may sleep in recv() for one slice */
  char in[RL_TLS_IN_SIZE];
};

static ssize_t
tls_pull (gnutls_transport_ptr_t ptr, void *data, size_t len)
{
  struct _RlTlsSession *s = ptr;
  gsize n;

  if (s->in_off == s->in_len)
    {
      /* Only the first read of a blocking read may sleep: it was given one slice. */
      int flags = s->block ? 0 : MSG_DONTWAIT;
      ssize_t got;

      s->block = FALSE;
      got = recv (s->fd, s->in, sizeof s->in, flags);

      if (got <= 0)
        {
          if (got < 0)
            gnutls_transport_set_errno (s->session, errno);
          return got;
        }
      s->in_off = 0;
      s->in_len = (gsize) got;
    }
  n = MIN (len, s->in_len - s->in_off);
  memcpy (data, s->in + s->in_off, n);
  s->in_off += n;
  return (ssize_t) n;
}

static int
tls_pull_timeout (gnutls_transport_ptr_t ptr, unsigned int ms)
{
  struct _RlTlsSession *s = ptr;
  struct pollfd pfd = { .fd = s->fd, .events = POLLIN };

  if (s->in_off < s->in_len)
    return 1;
  return poll (&pfd, 1, ms == GNUTLS_INDEFINITE_TIMEOUT ? -1 : (int) ms);
}

static ssize_t
tls_push (gnutls_transport_ptr_t ptr, const void *data, size_t len)
{
  struct _RlTlsSession *s = ptr;
  ssize_t n = send (s->fd, data, len, MSG_NOSIGNAL | MSG_DONTWAIT);

  if (n < 0)
    gnutls_transport_set_errno (s->session, errno);
  return n;
}

static gboolean
is_ip_address (const char *host)
{
  return g_hostname_is_ip_address (host);
}

RlTls *
rl_tls_new (const RlConnConfig *config, GError **error)
{
  RlTls *tls = g_new0 (RlTls, 1);
  const char *name = config->tls_sni != NULL ? config->tls_sni : config->host;
  int rc;

  rc = gnutls_certificate_allocate_credentials (&tls->creds);
  if (rc < 0)
    goto fail_rc;
  if (config->tls_ca != NULL)
    rc = gnutls_certificate_set_x509_trust_file (tls->creds, config->tls_ca, GNUTLS_X509_FMT_PEM);
  else
    rc = gnutls_certificate_set_x509_system_trust (tls->creds);
  if (rc <= 0)
    {
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID,
                   "Cannot load the TLS CA certificates from %s: %s",
                   config->tls_ca != NULL ? config->tls_ca : "the system trust store",
                   rc == 0 ? "no certificate in it" : gnutls_strerror (rc));
      rl_tls_free (tls);
      return NULL;
    }
  if (config->tls_cert != NULL || config->tls_key != NULL)
    {
      if (config->tls_cert == NULL || config->tls_key == NULL)
        {
          g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID,
                       "A TLS client certificate needs both cert= and key=");
          rl_tls_free (tls);
          return NULL;
        }
      rc = gnutls_certificate_set_x509_key_file (tls->creds, config->tls_cert, config->tls_key,
                                                 GNUTLS_X509_FMT_PEM);
      if (rc < 0)
        {
          g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID,
                       "Cannot load the TLS client certificate %s with key %s: %s",
                       config->tls_cert, config->tls_key, gnutls_strerror (rc));
          rl_tls_free (tls);
          return NULL;
        }
    }
  tls->verify_name = g_strdup (name);
  tls->sni = is_ip_address (name) ? NULL : g_strdup (name);
  return tls;

fail_rc:
  g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION, "TLS: %s",
               gnutls_strerror (rc));
  rl_tls_free (tls);
  return NULL;
}

void
rl_tls_free (RlTls *tls)
{
  if (tls == NULL)
    return;
  if (tls->creds != NULL)
    gnutls_certificate_free_credentials (tls->creds);
  g_free (tls->verify_name);
  g_free (tls->sni);
  g_free (tls);
}

static void
session_free (struct _RlTlsSession *s)
{
  if (s == NULL)
    return;
  gnutls_deinit (s->session);
  g_free (s);
}

/* Waits until @fd is ready for @events or @deadline passes, with a last look past it
 * (rl_poll_until()). */
static int wait_fd (int fd, short events, gint64 deadline);

/* The handshake, within @deadline: FALSE with @error naming the cause. */
static gboolean
handshake (RlConn *conn, RlTls *tls, const char *where, gint64 deadline, GError **error)
{
  struct _RlTlsSession *s = g_new0 (struct _RlTlsSession, 1);
  int rc;

  rc = gnutls_init (&s->session, GNUTLS_CLIENT | GNUTLS_NONBLOCK);
  if (rc < 0)
    {
      g_free (s);
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION, "TLS to %s: %s", where,
                   gnutls_strerror (rc));
      return FALSE;
    }
  conn->tls = s;
  gnutls_set_default_priority (s->session);
  gnutls_credentials_set (s->session, GNUTLS_CRD_CERTIFICATE, tls->creds);
  if (tls->sni != NULL)
    gnutls_server_name_set (s->session, GNUTLS_NAME_DNS, tls->sni, strlen (tls->sni));
  gnutls_session_set_verify_cert (s->session, tls->verify_name, 0);
  s->fd = conn->fd;
  gnutls_transport_set_ptr (s->session, s);
  gnutls_transport_set_pull_function (s->session, tls_pull);
  gnutls_transport_set_pull_timeout_function (s->session, tls_pull_timeout);
  gnutls_transport_set_push_function (s->session, tls_push);
  gnutls_handshake_set_timeout (s->session, 0);

  for (;;)
    {
      rc = gnutls_handshake (s->session);
      if (rc == GNUTLS_E_SUCCESS)
        return TRUE;
      if (rc == GNUTLS_E_AGAIN || rc == GNUTLS_E_INTERRUPTED)
        {
          short events = gnutls_record_get_direction (s->session) ? POLLOUT : POLLIN;
          int ready = wait_fd (conn->fd, events, deadline);
          if (ready == 0)
            {
              g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION,
                           "TLS handshake with %s: Redis timed out (is it a TLS port?)", where);
              return FALSE;
            }
          if (ready < 0)
            {
              g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION,
                           "TLS handshake with %s: %s", where, g_strerror (errno));
              return FALSE;
            }
          continue;
        }
      if (gnutls_error_is_fatal (rc) == 0)
        continue;
      if (rc == GNUTLS_E_CERTIFICATE_VERIFICATION_ERROR)
        {
          gnutls_datum_t text = { NULL, 0 };
          unsigned status = gnutls_session_get_verify_cert_status (s->session);
          gnutls_certificate_type_t type = gnutls_certificate_type_get (s->session);
          gnutls_certificate_verification_status_print (status, type, &text, 0);
          g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION,
                       "TLS certificate verification of %s (as “%s”) failed: %s", where,
                       tls->verify_name, text.data != NULL ? (char *) text.data : "rejected");
          gnutls_free (text.data);
          return FALSE;
        }
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION,
                   "TLS handshake with %s failed: %s%s%s%s", where, gnutls_strerror (rc),
                   rc == GNUTLS_E_FATAL_ALERT_RECEIVED ? ": " : "",
                   rc == GNUTLS_E_FATAL_ALERT_RECEIVED
                       ? gnutls_alert_get_name (gnutls_alert_get (s->session))
                       : "",
                   rc == GNUTLS_E_UNEXPECTED_PACKET_LENGTH || rc == GNUTLS_E_UNEXPECTED_PACKET
                           || rc == GNUTLS_E_PULL_ERROR || rc == GNUTLS_E_PREMATURE_TERMINATION
                       ? " (is it a TLS port?)"
                       : "");
      return FALSE;
    }
}

/* Marks @conn failed by the TLS error @rc, naming the alert the server sent, if any
 * (in TLS 1.3 a refused client certificate shows only as an alert on the first read). */
static void
tls_fail (RlConn *conn, int rc)
{
  g_autofree char *why = NULL;

  if (rc == GNUTLS_E_FATAL_ALERT_RECEIVED || rc == GNUTLS_E_WARNING_ALERT_RECEIVED)
    why = g_strdup_printf ("TLS: the server sent the alert “%s”%s",
                           gnutls_alert_get_name (gnutls_alert_get (conn->tls->session)),
                           gnutls_alert_get (conn->tls->session) == GNUTLS_A_CERTIFICATE_REQUIRED
                                   || gnutls_alert_get (conn->tls->session) == GNUTLS_A_HANDSHAKE_FAILURE
                               ? " (does it require a client certificate: cert= and key=?)"
                               : "");
  else
    why = g_strdup_printf ("TLS: %s", gnutls_strerror (rc));
  rl_conn_fail (conn, RL_CONN_ERR_TLS, why);
}

static gssize
tls_recv (RlConn *conn, char *buf, gsize len)
{
  gssize n = gnutls_record_recv (conn->tls->session, buf, len);

  if (n >= 0)
    return n;
  if (n == GNUTLS_E_AGAIN || n == GNUTLS_E_INTERRUPTED || gnutls_error_is_fatal ((int) n) == 0)
    {
      errno = EAGAIN;
      return -1;
    }
  if (n == GNUTLS_E_PREMATURE_TERMINATION)
    return 0;
  tls_fail (conn, (int) n);
  errno = EPROTO;
  return -2;
}

static gssize
tls_send (RlConn *conn, const char *buf, gsize len)
{
  gssize n = gnutls_record_send (conn->tls->session, buf, len);

  if (n >= 0)
    return n;
  if (n == GNUTLS_E_AGAIN || n == GNUTLS_E_INTERRUPTED)
    {
      errno = EAGAIN;
      return -1;
    }
  tls_fail (conn, (int) n);
  errno = EPROTO;
  return -2;
}

gboolean
rl_conn_has_pending (RlConn *conn)
{
  return conn->tls != NULL
         && (gnutls_record_check_pending (conn->tls->session) > 0
             || conn->tls->in_off < conn->tls->in_len);
}

#else /* !RL_HAVE_GNUTLS */

struct _RlTlsSession
{
  gboolean block;
};

RlTls *
rl_tls_new (const RlConnConfig *config, GError **error)
{
  g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID,
               "TLS (rediss://) is not supported by this build: it was built without TLS");
  return NULL;
}

void
rl_tls_free (RlTls *tls)
{
}

static void
session_free (struct _RlTlsSession *s)
{
  g_free (s);
}

static gssize
tls_recv (RlConn *conn, char *buf, gsize len)
{
  errno = EPROTO;
  return -2;
}

static gssize
tls_send (RlConn *conn, const char *buf, gsize len)
{
  errno = EPROTO;
  return -2;
}

gboolean
rl_conn_has_pending (RlConn *conn)
{
  return FALSE;
}

#endif /* RL_HAVE_GNUTLS */

/* Sockets ------------------------------------------------------------------------------ */

static int
wait_fd (int fd, short events, gint64 deadline)
{
  struct pollfd pfd = { fd, events, 0 };

  return rl_poll_until (&pfd, 1, deadline);
}

/* Waits for @events on @conn's socket until @deadline; FALSE with @conn failed (timed
 * out, or the poll's error). */
static gboolean
wait_conn (RlConn *conn, short events, gint64 deadline)
{
  int ready = wait_fd (conn->fd, events, deadline);

  if (ready > 0)
    return TRUE;
  if (ready == 0)
    rl_conn_fail (conn, RL_CONN_ERR_TIMEOUT, "Redis timed out");
  else
    fail_errno (conn, errno);
  return FALSE;
}

/* A non-blocking socket connected to @addr within @deadline; -1 with errno. */
static int
connect_addr (int family, const struct sockaddr *addr, socklen_t len, gint64 deadline)
{
  int fd = socket (family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  int err = 0;
  socklen_t err_len = sizeof err;

  if (fd < 0)
    return -1;
  if (connect (fd, addr, len) == 0)
    return fd;
  if (errno != EINPROGRESS && errno != EAGAIN)
    goto fail;
  switch (wait_fd (fd, POLLOUT, deadline))
    {
    case 0:
      errno = ETIMEDOUT;
      goto fail;
    case -1:
      goto fail;
    default:
      break;
    }
  if (getsockopt (fd, SOL_SOCKET, SO_ERROR, &err, &err_len) < 0)
    goto fail;
  if (err != 0)
    {
      errno = err;
      goto fail;
    }
  return fd;

fail:
  err = errno;
  close (fd);
  errno = err;
  return -1;
}

static int
connect_tcp (const char *host, int port, gint64 deadline, const char **why)
{
  struct addrinfo hints = { 0 };
  struct addrinfo *list = NULL;
  char service[16];
  int fd = -1, rc, err = ECONNREFUSED;

  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  g_snprintf (service, sizeof service, "%d", port);
  rc = getaddrinfo (host, service, &hints, &list);
  if (rc != 0)
    {
      *why = gai_strerror (rc);
      return -1;
    }
  for (struct addrinfo *a = list; a != NULL && fd < 0; a = a->ai_next)
    {
      fd = connect_addr (a->ai_family, a->ai_addr, a->ai_addrlen, deadline);
      if (fd < 0)
        err = errno;
    }
  freeaddrinfo (list);
  if (fd >= 0)
    {
      int one = 1;
      setsockopt (fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      return fd;
    }
  errno = err;
  *why = err == ETIMEDOUT ? "Connection timed out" : g_strerror (err);
  return -1;
}

static int
connect_unix (const char *path, gint64 deadline, const char **why)
{
  struct sockaddr_un addr = { 0 };
  int fd;

  addr.sun_family = AF_UNIX;
  g_strlcpy (addr.sun_path, path, sizeof addr.sun_path);
  fd = connect_addr (AF_UNIX, (struct sockaddr *) &addr, sizeof addr, deadline);
  if (fd < 0)
    *why = errno == ETIMEDOUT ? "Connection timed out" : g_strerror (errno);
  return fd;
}

/* Puts the connected @fd in blocking mode, each blocking recv() sleeping at most one
 * slice (see the top of the file); FALSE with errno. */
static gboolean
set_blocking_in_slices (int fd)
{
  struct timeval slice = { 0, RL_RECV_SLICE_US };
  int flags = fcntl (fd, F_GETFL);

  return flags >= 0 && fcntl (fd, F_SETFL, flags & ~O_NONBLOCK) == 0
         && setsockopt (fd, SOL_SOCKET, SO_RCVTIMEO, &slice, sizeof slice) == 0;
}

RlConn *
rl_conn_open (const RlConnConfig *config, RlTls *tls, gint64 timeout_ms, GError **error)
{
  gint64 deadline = g_get_monotonic_time () + timeout_ms * 1000;
  g_autofree char *where = rl_conn_config_describe (config);
  const char *why = NULL;
  RlConn *conn;
  int fd;

  fd = config->path != NULL ? connect_unix (config->path, deadline, &why)
                            : connect_tcp (config->host, config->port, deadline, &why);
  if (fd < 0)
    {
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION,
                   "Cannot connect to Redis at %s: %s", where, why);
      return NULL;
    }
  if (!set_blocking_in_slices (fd))
    {
      int err = errno;

      close (fd);
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION,
                   "Cannot connect to Redis at %s: %s", where, g_strerror (err));
      return NULL;
    }
  conn = g_new0 (RlConn, 1);
  conn->fd = fd;
  conn->where = g_strdup (where);
  conn->reader = redisReaderCreate ();
  conn->timeout_ms = timeout_ms;
#ifdef RL_HAVE_GNUTLS
  if (tls != NULL && !handshake (conn, tls, where, deadline, error))
    {
      rl_conn_free (conn);
      return NULL;
    }
  conn->without_cert = tls != NULL && config->tls_cert == NULL;
#endif
  return conn;
}

void
rl_conn_free (RlConn *conn)
{
  if (conn == NULL)
    return;
#ifdef RL_HAVE_GNUTLS
  /* No close_notify: the socket goes away with the session either way, and a frozen
   * server must not hold up the close. */
#endif
  session_free (conn->tls);
  if (conn->fd >= 0)
    close (conn->fd);
  if (conn->reader != NULL)
    redisReaderFree (conn->reader);
  g_free (conn->out);
  g_free (conn->where);
  g_free (conn);
}

void
rl_conn_set_timeout (RlConn *conn, gint64 timeout_ms)
{
  conn->timeout_ms = timeout_ms;
}

/* Output --------------------------------------------------------------------------------- */

static void
out_reserve (RlConn *conn, gsize more)
{
  if (conn->out_sent == conn->out_len)
    conn->out_sent = conn->out_len = 0;
  if (conn->out_len + more <= conn->out_size)
    return;
  conn->out_size = MAX (conn->out_size * 2, conn->out_len + more + 256);
  conn->out = g_realloc (conn->out, conn->out_size);
}

void
rl_conn_append (RlConn *conn, int argc, const char **argv)
{
  gsize stack_lens[16];
  g_autofree gsize *heap_lens = argc > 16 ? g_new (gsize, argc) : NULL;
  gsize *lens = heap_lens != NULL ? heap_lens : stack_lens;
  gsize size = 16;
  char *p;

  for (int i = 0; i < argc; i++)
    {
      lens[i] = strlen (argv[i]);
      size += lens[i] + 32;
    }
  out_reserve (conn, size);
  p = conn->out + conn->out_len;
  *p++ = '*';
  p = rl_put_uint (p, (guint64) argc);
  *p++ = '\r';
  *p++ = '\n';
  for (int i = 0; i < argc; i++)
    {
      *p++ = '$';
      p = rl_put_uint (p, lens[i]);
      *p++ = '\r';
      *p++ = '\n';
      memcpy (p, argv[i], lens[i]);
      p += lens[i];
      *p++ = '\r';
      *p++ = '\n';
    }
  conn->out_len = (gsize) (p - conn->out);
}

gboolean
rl_conn_wants_write (RlConn *conn)
{
  return conn->out_sent < conn->out_len;
}

gboolean
rl_conn_write_some (RlConn *conn)
{
  while (conn->err == RL_CONN_OK && conn->out_sent < conn->out_len)
    {
      const char *buf = conn->out + conn->out_sent;
      gsize len = conn->out_len - conn->out_sent;
      gssize n = conn->tls != NULL ? tls_send (conn, buf, len)
                                   : send (conn->fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n >= 0)
        {
          conn->out_sent += (gsize) n;
          continue;
        }
      if (n == -1 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return TRUE;
      if (conn->err == RL_CONN_OK)
        fail_errno (conn, errno);
    }
  return conn->err == RL_CONN_OK;
}

/* Input ----------------------------------------------------------------------------------- */

/* One read fed to the parser; @block: it may sleep in recv() for up to one slice
 * (an "again" after the slice is not an error). */
static gboolean
read_some (RlConn *conn, gboolean block)
{
  char buf[RL_READ_CHUNK];
  gssize n;

  if (conn->err != RL_CONN_OK)
    return FALSE;
  if (conn->tls != NULL)
    {
      conn->tls->block = block;
      n = tls_recv (conn, buf, sizeof buf);
      conn->tls->block = FALSE;
    }
  else
    n = recv (conn->fd, buf, sizeof buf, block ? 0 : MSG_DONTWAIT);
  if (n > 0)
    {
      if (redisReaderFeed (conn->reader, buf, (size_t) n) != REDIS_OK)
        rl_conn_fail (conn, RL_CONN_ERR_PROTOCOL, "out of memory reading a reply");
      return conn->err == RL_CONN_OK;
    }
  if (n == 0)
    {
      rl_conn_fail (conn, RL_CONN_ERR_EOF, "Server closed the connection");
      return FALSE;
    }
  if (n == -1 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
    return TRUE;
  if (conn->err == RL_CONN_OK)
    fail_errno (conn, errno);
  return FALSE;
}

gboolean
rl_conn_read_some (RlConn *conn)
{
  return read_some (conn, FALSE);
}

/* Reads what arrives before @deadline: in the kernel's recv() while a whole slice is
 * left, else after poll(). FALSE with @conn failed (timed out included). */
static gboolean
read_until (RlConn *conn, gint64 deadline)
{
  if (rl_conn_has_pending (conn))
    return read_some (conn, FALSE);
  if (deadline - g_get_monotonic_time () >= RL_RECV_SLICE_US)
    return read_some (conn, TRUE);
  return wait_conn (conn, POLLIN, deadline) && read_some (conn, FALSE);
}

gboolean
rl_conn_next_reply (RlConn *conn, redisReply **reply)
{
  void *r = NULL;

  *reply = NULL;
  if (conn->err != RL_CONN_OK)
    return FALSE;
  if (redisReaderGetReply (conn->reader, &r) != REDIS_OK)
    {
      /* hiredis says "Protocol error, got "H" as reply type byte": an HTTP server, a
       * proxy's banner, another service on the port. Say what that means instead. */
      g_autofree char *why = NULL;

      if (conn->reader->err == REDIS_ERR_PROTOCOL)
        why = g_strdup_printf ("not a Redis server: %s answered with something other than "
                               "the Redis protocol",
                               conn->where != NULL ? conn->where : "the server");
      rl_conn_fail (conn, RL_CONN_ERR_PROTOCOL,
                    why != NULL                       ? why
                    : conn->reader->errstr[0] != '\0' ? conn->reader->errstr
                                                      : "Protocol error");
      return FALSE;
    }
  *reply = r;
  if (r != NULL)
    conn->answered = TRUE;
  return TRUE;
}

gboolean
rl_conn_get_reply (RlConn *conn, redisReply **reply)
{
  gint64 deadline = g_get_monotonic_time () + conn->timeout_ms * 1000;

  *reply = NULL;
  if (!rl_conn_next_reply (conn, reply))
    return FALSE;
  if (*reply != NULL)
    return TRUE;
  while (rl_conn_wants_write (conn))
    {
      if (!rl_conn_write_some (conn))
        return FALSE;
      if (!rl_conn_wants_write (conn))
        break;
      if (!wait_conn (conn, POLLOUT, deadline))
        return FALSE;
    }
  for (;;)
    {
      if (!rl_conn_next_reply (conn, reply))
        return FALSE;
      if (*reply != NULL)
        return TRUE;
      if (!read_until (conn, deadline))
        return FALSE;
    }
}

redisReply *
rl_conn_roundtrip (RlConn *conn, int argc, const char **argv)
{
  redisReply *reply = NULL;

  rl_conn_append (conn, argc, argv);
  if (!rl_conn_get_reply (conn, &reply))
    return NULL;
  return reply;
}
