/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* connection.c: the connection pool, timeouts and error translation for Redis.
 *
 * hiredis contexts are not thread-safe, so the pool hands each caller a context of its
 * own for the duration of one operation and takes it back afterwards; idle contexts
 * are kept for reuse, a context that failed is closed, and a new one is made on the
 * next use, which is all "reconnect" needs to mean. Every socket has a bounded
 * connect and command timeout, so a dead or frozen server turns into a
 * REDIS_LOCK_ERROR_CONNECTION within the timeout instead of a hang.
 *
 * redis-store.c and notify.c use hiredis's contexts and replies too, but this is the
 * one place that knows which hiredis it was built against: the HAVE_DECL_* checks
 * from configure stay in this file.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>

#include "connection.h"
#include "sync.h"

struct _RlPool
{
  RlConnConfig config;
  RlStoreContext *ctx;
  RlMutex mutex;
  GPtrArray *idle; /* RlConn*, most recently returned last */
};

/* Idle connections kept beyond this are closed: enough for a busy thread pool. */
#define RL_POOL_MAX_IDLE 64

/* Errors ----------------------------------------------------------------------- */

static gboolean
context_timed_out (redisContext *c)
{
#if HAVE_DECL_REDIS_ERR_TIMEOUT
  if (c->err == REDIS_ERR_TIMEOUT)
    return TRUE;
#endif
  return c->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK || errno == ETIMEDOUT
                                    || strstr (c->errstr, "temporarily unavailable") != NULL
                                    || strstr (c->errstr, "timed out") != NULL);
}

void
rl_set_error_from_context (GError **error, redisContext *c, const char *what)
{
  if (c == NULL)
    g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION,
                 "%s: out of memory for a Redis connection", what);
  else if (context_timed_out (c))
    g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION, "%s: Redis timed out", what);
  else if (c->err == REDIS_ERR_EOF)
    g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION,
                 "%s: Redis closed the connection", what);
  else
    g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION, "%s: %s", what,
                 c->errstr[0] ? c->errstr : "Redis connection failed");
}

gboolean
rl_context_is_stale (redisContext *c)
{
  if (c->err == REDIS_ERR_EOF)
    return TRUE;
  return c->err == REDIS_ERR_IO
         && (strstr (c->errstr, "reset") != NULL || strstr (c->errstr, "Broken pipe") != NULL);
}

/* Connections ------------------------------------------------------------------ */

static struct timeval
ms_to_timeval (gint64 ms)
{
  struct timeval tv;
  tv.tv_sec = ms / 1000;
  tv.tv_usec = (ms % 1000) * 1000;
  return tv;
}

void
rl_conn_set_timeout (RlConn *conn, gint64 timeout_ms)
{
  if (conn->timeout_ms == timeout_ms)
    return;
  redisSetTimeout (conn->c, ms_to_timeval (timeout_ms));
  conn->timeout_ms = timeout_ms;
}

void
rl_conn_free (RlConn *conn)
{
  if (conn == NULL)
    return;
  if (conn->c != NULL)
    redisFree (conn->c);
  g_free (conn);
}

/* Appends the decimal digits of @value. */
static char *
put_uint (char *p, gsize value)
{
  char digits[24];
  int n = 0;

  do
    digits[n++] = (char) ('0' + value % 10);
  while ((value /= 10) != 0);
  while (n > 0)
    *p++ = digits[--n];
  return p;
}

void
rl_format_uint (char buf[24], gint64 value)
{
  *put_uint (buf, (gsize) MAX (value, 0)) = '\0';
}

void
rl_conn_append (RlConn *conn, int argc, const char **argv)
{
  char stack[1024];
  gsize lens[16];
  gsize size = 16;
  char *buf, *p;

  g_assert (argc <= (int) G_N_ELEMENTS (lens));
  for (int i = 0; i < argc; i++)
    {
      lens[i] = strlen (argv[i]);
      size += lens[i] + 32;
    }
  buf = size <= sizeof stack ? stack : g_malloc (size);
  p = buf;
  *p++ = '*';
  p = put_uint (p, (gsize) argc);
  *p++ = '\r';
  *p++ = '\n';
  for (int i = 0; i < argc; i++)
    {
      *p++ = '$';
      p = put_uint (p, lens[i]);
      *p++ = '\r';
      *p++ = '\n';
      memcpy (p, argv[i], lens[i]);
      p += lens[i];
      *p++ = '\r';
      *p++ = '\n';
    }
  redisAppendFormattedCommand (conn->c, buf, (gsize) (p - buf));
  if (buf != stack)
    g_free (buf);
}

redisReply *
rl_conn_roundtrip (RlConn *conn, int argc, const char **argv)
{
  void *reply = NULL;

  rl_conn_append (conn, argc, argv);
  if (redisGetReply (conn->c, &reply) != REDIS_OK)
    return NULL;
  return reply;
}

/* Marks @c failed with @why, so the pool closes it: a connection whose replies were
 * not all read cannot serve another caller. */
static void
context_fail (redisContext *c, const char *why)
{
  if (c->err != 0)
    return;
  c->err = REDIS_ERR_IO;
  g_snprintf (c->errstr, sizeof c->errstr, "%s", why);
}

guint
rl_conns_exchange (RlConn **conns, guint n, const guint *expected, gint64 timeout_ms,
                   RlReplyFunc func, gpointer user_data, gboolean *failed)
{
  g_autofree struct pollfd *pfds = g_new0 (struct pollfd, n);
  g_autofree guint *index = g_new0 (guint, n);
  g_autofree guint *got = g_new0 (guint, n);
  g_autofree gboolean *written = g_new0 (gboolean, n);
  g_autofree int *flags = g_new0 (int, n);
  gint64 deadline = g_get_monotonic_time () + timeout_ms * 1000;
  guint active = 0, n_failed = 0;

  /* Non-blocking while the exchange lasts: poll() says when a socket can take more or
   * has replies, and no write to one server waits for another's. */
  for (guint i = 0; i < n; i++)
    {
      failed[i] = FALSE;
      flags[i] = fcntl (conns[i]->c->fd, F_GETFL);
      if (flags[i] >= 0)
        fcntl (conns[i]->c->fd, F_SETFL, flags[i] | O_NONBLOCK);
      if (expected[i] > 0)
        active++;
    }
  while (active > 0)
    {
      gint64 left_ms = (deadline - g_get_monotonic_time () + 999) / 1000;
      guint nfds = 0;
      int rc;

      for (guint i = 0; i < n; i++)
        if (!failed[i] && got[i] < expected[i])
          {
            pfds[nfds].fd = conns[i]->c->fd;
            pfds[nfds].events = (short) (POLLIN | (written[i] ? 0 : POLLOUT));
            pfds[nfds].revents = 0;
            index[nfds++] = i;
          }
      rc = left_ms > 0 ? poll (pfds, nfds, (int) MIN (left_ms, G_MAXINT)) : 0;
      if (rc < 0 && errno == EINTR)
        continue;
      if (rc <= 0)
        {
          for (guint k = 0; k < nfds; k++)
            {
              context_fail (conns[index[k]]->c, rc == 0 ? "Redis timed out" : g_strerror (errno));
              failed[index[k]] = TRUE;
              n_failed++;
            }
          break;
        }
      for (guint k = 0; k < nfds; k++)
        {
          guint i = index[k];
          redisContext *c = conns[i]->c;
          gboolean ok = TRUE;

          if ((pfds[k].revents & POLLOUT) != 0)
            {
              int done = 0;
              ok = redisBufferWrite (c, &done) == REDIS_OK;
              written[i] = done;
            }
          if (ok && (pfds[k].revents & (POLLIN | POLLHUP | POLLERR)) != 0)
            ok = redisBufferRead (c) == REDIS_OK;
          while (ok && got[i] < expected[i])
            {
              void *reply = NULL;
              ok = redisGetReplyFromReader (c, &reply) == REDIS_OK;
              if (!ok || reply == NULL)
                break;
              got[i]++;
              func (i, reply, user_data);
            }
          if (!ok)
            {
              context_fail (c, "Redis connection failed");
              failed[i] = TRUE;
              n_failed++;
            }
          if (!ok || got[i] == expected[i])
            active--;
        }
    }
  for (guint i = 0; i < n; i++)
    if (flags[i] >= 0)
      fcntl (conns[i]->c->fd, F_SETFL, flags[i]);
  return n_failed;
}

redisReply *
rl_command_argv (RlConn *conn, int argc, const char **argv, const size_t *lens, GError **error)
{
  redisReply *reply = redisCommandArgv (conn->c, argc, argv, lens);

  if (reply == NULL)
    {
      rl_set_error_from_context (error, conn->c, argv[0]);
      return NULL;
    }
  if (reply->type == REDIS_REPLY_ERROR)
    {
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_REDIS, "%s: %s", argv[0], reply->str);
      freeReplyObject (reply);
      return NULL;
    }
  return reply;
}

static gboolean
simple_command (RlConn *conn, GError **error, int argc, const char **argv)
{
  redisReply *reply = rl_command_argv (conn, argc, argv, NULL, error);
  if (reply == NULL)
    return FALSE;
  freeReplyObject (reply);
  return TRUE;
}

RlConn *
rl_pool_connect (RlPool *pool, GError **error)
{
  RlConnConfig *cfg = &pool->config;
  gint64 connect_ms = RL_ATOMIC_GET (pool->ctx->connect_timeout_ms);
  gint64 command_ms = RL_ATOMIC_GET (pool->ctx->command_timeout_ms);
  struct timeval tv = ms_to_timeval (connect_ms);
  g_autoptr (GError) local_error = NULL;
  redisContext *c;
  RlConn *conn;

  if (cfg->path != NULL)
    c = redisConnectUnixWithTimeout (cfg->path, tv);
  else
    c = redisConnectWithTimeout (cfg->host, cfg->port, tv);
  /* hiredis 0.14 makes its sockets without SOCK_CLOEXEC: without this, every program
   * the application fork-execs would inherit its Redis connections (and could write
   * to them, or keep the server's side open). */
  if (c != NULL && c->fd >= 0)
    {
      int flags = fcntl (c->fd, F_GETFD);
      if (flags >= 0)
        fcntl (c->fd, F_SETFD, flags | FD_CLOEXEC);
    }
  if (c == NULL || c->err)
    {
      g_autofree char *server = rl_conn_config_describe (cfg);
      g_autofree char *where = g_strdup_printf ("Cannot connect to Redis at %s", server);
      rl_set_error_from_context (error, c, where);
      if (c != NULL)
        redisFree (c);
      return NULL;
    }

  conn = g_new0 (RlConn, 1);
  conn->c = c;
  /* The setup commands run under the connect timeout: a server that accepts but does
   * not answer is "unreachable", not a slow command. */
  conn->timeout_ms = -1;
  rl_conn_set_timeout (conn, connect_ms);

  if (cfg->password != NULL)
    {
      const char *auth_user[] = { "AUTH", cfg->username, cfg->password };
      const char *auth[] = { "AUTH", cfg->password };
      gboolean ok = cfg->username != NULL ? simple_command (conn, &local_error, 3, auth_user)
                                          : simple_command (conn, &local_error, 2, auth);
      if (!ok)
        goto fail;
    }
  if (cfg->db != 0)
    {
      g_autofree char *db = g_strdup_printf ("%d", cfg->db);
      const char *select[] = { "SELECT", db };
      if (!simple_command (conn, &local_error, 2, select))
        goto fail;
    }
  rl_conn_set_timeout (conn, command_ms);
  return conn;

fail:
  if (local_error->code == REDIS_LOCK_ERROR_REDIS)
    g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_REDIS, "Redis refused the connection: %s",
                 local_error->message);
  else
    g_propagate_error (error, g_steal_pointer (&local_error));
  rl_conn_free (conn);
  return NULL;
}

RlPool *
rl_pool_new (RlConnConfig *config, RlStoreContext *ctx)
{
  RlPool *pool = g_new0 (RlPool, 1);

  pool->config = *config;
  memset (config, 0, sizeof *config);
  pool->ctx = ctx;
  rl_mutex_init (&pool->mutex);
  pool->idle = g_ptr_array_new ();
  return pool;
}

void
rl_pool_free (RlPool *pool)
{
  if (pool == NULL)
    return;
  for (guint i = 0; i < pool->idle->len; i++)
    rl_conn_free (g_ptr_array_index (pool->idle, i));
  g_ptr_array_unref (pool->idle);
  rl_mutex_clear (&pool->mutex);
  rl_conn_config_clear (&pool->config);
  g_free (pool);
}

RlConn *
rl_pool_get (RlPool *pool, gint64 timeout_ms, gboolean *reused, GError **error)
{
  RlConn *conn = NULL;

  rl_mutex_lock (&pool->mutex);
  if (pool->idle->len > 0)
    conn = g_ptr_array_steal_index_fast (pool->idle, pool->idle->len - 1);
  rl_mutex_unlock (&pool->mutex);

  *reused = conn != NULL;
  if (conn == NULL)
    conn = rl_pool_connect (pool, error);
  if (conn == NULL)
    return NULL;
  rl_conn_set_timeout (conn,
                       timeout_ms > 0 ? timeout_ms : RL_ATOMIC_GET (pool->ctx->command_timeout_ms));
  return conn;
}

void
rl_pool_put (RlPool *pool, RlConn *conn)
{
  if (conn->c->err != 0)
    {
      rl_conn_free (conn);
      return;
    }
  rl_mutex_lock (&pool->mutex);
  if (pool->idle->len < RL_POOL_MAX_IDLE)
    {
      g_ptr_array_add (pool->idle, conn);
      conn = NULL;
    }
  rl_mutex_unlock (&pool->mutex);
  rl_conn_free (conn);
}
