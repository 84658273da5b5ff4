/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* connection.h: the Redis connection layer (see connection.c). */
#ifndef RL_CONNECTION_H
#define RL_CONNECTION_H

#include <glib.h>
#include <hiredis/hiredis.h>
#include "store.h"

#include "url.h"

/* One hiredis context and the command timeout currently applied to its socket. */
typedef struct
{
  redisContext *c;
  gint64 timeout_ms;
} RlConn;

typedef struct _RlPool RlPool;

RlPool *rl_pool_new (RlConnConfig *config, RlStoreContext *ctx); /* takes @config's contents */
void rl_pool_free (RlPool *pool);

/* A connection for the caller alone: an idle one (*reused TRUE) or a new one. Its
 * socket timeout is @timeout_ms (0: the registry's command timeout). */
RlConn *rl_pool_get (RlPool *pool, gint64 timeout_ms, gboolean *reused, GError **error);
/* Gives it back; a connection in error is closed instead. */
void rl_pool_put (RlPool *pool, RlConn *conn);
/* A new connection outside the pool (the subscriber's), authenticated and selected. */
RlConn *rl_pool_connect (RlPool *pool, GError **error);
void rl_conn_free (RlConn *conn);
void rl_conn_set_timeout (RlConn *conn, gint64 timeout_ms);

/* Writes the decimal digits of @value (>= 0) and a NUL into @buf, which holds 24 bytes. */
void rl_format_uint (char buf[24], gint64 value);

/* Queues one command in the connection's output buffer, encoded here rather than by
 * hiredis's printf-style formatter (half of the client's instructions per lock/unlock
 * pair went there). */
void rl_conn_append (RlConn *conn, int argc, const char **argv);
/* rl_conn_append() and read the reply: NULL when the connection failed. */
redisReply *rl_conn_roundtrip (RlConn *conn, int argc, const char **argv);

/* Called by rl_conns_exchange() with each reply, which it takes, and the index of
 * the connection that read it. */
typedef void (*RlReplyFunc) (guint conn_index, redisReply *reply, gpointer user_data);

/* Sends what is queued on each of the @n connections and reads @expected[i] replies
 * from conns[i], every connection at once, so that the servers work in parallel and
 * the whole exchange costs the slowest one's round trip, not the sum. Bounded by
 * @timeout_ms as a whole. A connection that fails (its context then says why, and
 * the pool will close it) is marked in @failed[i]; the others go on. Returns how many
 * failed. */
guint rl_conns_exchange (RlConn **conns, guint n, const guint *expected, gint64 timeout_ms,
                         RlReplyFunc func, gpointer user_data, gboolean *failed);

/* Sets @error from the context's failure (REDIS_LOCK_ERROR_CONNECTION). */
void rl_set_error_from_context (GError **error, redisContext *c, const char *what);
/* TRUE when the context broke in a way that means "the peer went away before this
 * request", so one retry on a fresh connection is safe: EOF, reset, broken pipe. */
gboolean rl_context_is_stale (redisContext *c);
/* Sends one command and reads its reply. NULL with @error on I/O failure or an error
 * reply (REDIS_LOCK_ERROR_REDIS); the reply otherwise. */
redisReply *rl_command_argv (RlConn *conn, int argc, const char **argv, const size_t *lens,
                             GError **error);

#endif /* RL_CONNECTION_H */
