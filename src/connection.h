/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* connection.h: the Redis connection layer (see connection.c). */
#ifndef RL_CONNECTION_H
#define RL_CONNECTION_H

#include <glib.h>
#include <hiredis/hiredis.h>

#include "transport.h"
#include "url.h"

typedef struct _RlPool RlPool;

/* A pool for @config's node (it takes @config's contents). @connect_timeout_ms and
 * @command_timeout_ms are the owner's settings, read atomically at each use, so that
 * a change applies to the next connection and command; they must outlive the pool. */
RlPool *rl_pool_new (RlConnConfig *config, const gint64 *connect_timeout_ms,
                     const gint64 *command_timeout_ms);
void rl_pool_free (RlPool *pool);

/* A connection for the caller alone: an idle one (*reused TRUE) or a new one. Its
 * socket timeout is @timeout_ms (0: the registry's command timeout). */
RlConn *rl_pool_get (RlPool *pool, gint64 timeout_ms, gboolean *reused, GError **error);
/* A connection for a caller whose time ends at the monotonic @deadline (µs): a new one
 * is set up within what is left of it (never more than the connect timeout), and the
 * socket timeout is what is left. @retries: the caller sends its request again, once,
 * on a fresh connection when a reused one turns out closed by its server
 * (rl_conn_is_stale()), and may tell the second answer from the first; then an idle
 * connection given back less than a second ago is not checked first. */
RlConn *rl_pool_get_until (RlPool *pool, gint64 deadline, gboolean retries, gboolean *reused,
                           GError **error);
/* Gives it back; a connection in error is closed instead. */
void rl_pool_put (RlPool *pool, RlConn *conn);
/* A new connection outside the pool (the subscriber's), authenticated and selected. */
RlConn *rl_pool_connect (RlPool *pool, GError **error);

/* Writes the decimal digits of @value (>= 0) and a NUL into @buf, which holds 24 bytes. */
void rl_format_uint (char buf[24], gint64 value);

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

/* Sends one command and reads its reply. NULL with @error on I/O failure or an error
 * reply (REDIS_LOCK_ERROR_REDIS); the reply otherwise. */
redisReply *rl_command_argv (RlConn *conn, int argc, const char **argv, GError **error);

#endif /* RL_CONNECTION_H */
