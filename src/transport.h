/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* transport.h: one connection to a Redis node, plain or TLS (see transport.c). */
#ifndef RL_TRANSPORT_H
#define RL_TRANSPORT_H

#include <glib.h>
#include <hiredis/hiredis.h>

#include "url.h"

/* How a connection failed. */
typedef enum
{
  RL_CONN_OK,
  RL_CONN_ERR_IO,       /* a system call failed; sys_errno says which */
  RL_CONN_ERR_EOF,      /* the server closed the connection */
  RL_CONN_ERR_TIMEOUT,  /* the operation's time ran out */
  RL_CONN_ERR_PROTOCOL, /* the server sent something that is not RESP */
  RL_CONN_ERR_TLS,      /* the TLS layer failed after the handshake */
} RlConnError;

typedef struct _RlTls RlTls;

/* One connection: a non-blocking socket, TLS over it or not, the commands queued to
 * be sent, and hiredis's reply parser fed with what was read. Used by one thread at a
 * time. */
typedef struct _RlConn
{
  int fd;
  struct _RlTlsSession *tls; /* NULL: plain */
  redisReader *reader;
  char *out;       /* queued commands */
  gsize out_len;   /* bytes in out */
  gsize out_sent;  /* of them, already sent */
  gsize out_size;  /* allocated */
  gint64 timeout_ms; /* bound on each blocking operation */
  RlConnError err;
  int sys_errno;
  char errstr[256];
  gboolean answered;    /* a reply has been read: the server accepted the connection */
  gint64 idle_since;    /* monotonic time it was last given back to its pool */
  gboolean without_cert; /* TLS without a client certificate */
  char *where;           /* the node, as messages show it ("HOST:PORT", "[::1]:PORT", a path) */
  gint64 tracking_redirect; /* the client id this connection's key tracking reports to
                               (CLIENT TRACKING on REDIRECT id OPTIN NOLOOP); 0: off */
} RlConn;

/* TLS settings shared by the connections of one node (credentials loaded once).
 * NULL with INVALID when @config names a file that cannot be loaded, or when the
 * build has no TLS. */
RlTls *rl_tls_new (const RlConnConfig *config, GError **error);
void rl_tls_free (RlTls *tls);

/* Connects to @config's node within @timeout_ms (TCP or Unix socket, then the TLS
 * handshake with @tls when not NULL). NULL with CONNECTION, naming the node and the
 * cause (refused, timed out, certificate not trusted, name mismatch...). */
RlConn *rl_conn_open (const RlConnConfig *config, RlTls *tls, gint64 timeout_ms, GError **error);
void rl_conn_free (RlConn *conn);
void rl_conn_set_timeout (RlConn *conn, gint64 timeout_ms);

/* Queues one command of any number of arguments, encoded here (half of the client's
 * instructions per lock/unlock pair went to hiredis's printf-style formatter). */
void rl_conn_append (RlConn *conn, int argc, const char **argv);
/* Sends what is queued and reads the next reply, within the connection's timeout.
 * FALSE when the connection failed (conn->err says how). */
gboolean rl_conn_get_reply (RlConn *conn, redisReply **reply);
/* rl_conn_append() and rl_conn_get_reply(): NULL when the connection failed. */
redisReply *rl_conn_roundtrip (RlConn *conn, int argc, const char **argv);

/* For callers that wait on several connections with poll(): whether queued bytes
 * remain to be sent; one non-blocking attempt to send them; one non-blocking read fed
 * to the parser; whether the TLS layer holds decrypted bytes not yet read (poll()
 * would not see them: read now); and the next complete reply already read (*reply
 * NULL when none). Each returns FALSE when the connection failed. */
gboolean rl_conn_wants_write (RlConn *conn);
gboolean rl_conn_write_some (RlConn *conn);
gboolean rl_conn_read_some (RlConn *conn);
gboolean rl_conn_has_pending (RlConn *conn);
gboolean rl_conn_next_reply (RlConn *conn, redisReply **reply);

/* Marks @conn failed with @err and @why (unless it already failed): a connection whose
 * replies were not all read can serve nobody else. */
void rl_conn_fail (RlConn *conn, RlConnError err, const char *why);

/* Sets @error (CONNECTION) from the connection's failure, prefixed with @what. */
void rl_set_error_from_conn (GError **error, RlConn *conn, const char *what);
/* TRUE when the connection broke in a way that means "the peer went away before this
 * request", so one retry on a fresh connection is safe: EOF, reset, broken pipe. */
gboolean rl_conn_is_stale (RlConn *conn);
/* Whether an idle connection's peer has already closed it (or reset it, or sent
 * something nobody asked for), checked without blocking before the connection is used
 * again. A request sent on such a connection could not have reached the server, so
 * the pool drops it before the request rather than retrying after: a release that
 * was never sent is not ambiguous. */
gboolean rl_conn_peer_closed (RlConn *conn);

#endif /* RL_TRANSPORT_H */
