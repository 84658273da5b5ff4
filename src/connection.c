/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* connection.c: the connection pool, several connections at once, and the commands
 * every connection starts with.
 *
 * A connection is used by one caller at a time, so the pool hands each caller one of
 * its own for the duration of one operation and takes it back afterwards; idle
 * connections are kept for reuse, one that failed is closed, and a new one is made on
 * the next use, which is all "reconnect" needs to mean. Every connection is set up
 * under the connect timeout (AUTH and SELECT included: a server that accepts but does
 * not answer is unreachable, not slow) and then bounded by the command timeout, so a
 * dead or frozen server turns into REDIS_LOCK_ERROR_CONNECTION within the timeout
 * instead of a hang. The bytes themselves (plain or TLS) are transport.c's.
 */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <string.h>

#include "connection.h"
#include "key-index.h"
#include "settings.h"
#include "sync.h"

struct _RlPool
{
  RlConnConfig config;
  const gint64 *connect_timeout_ms; /* atomic, the owner's */
  const gint64 *command_timeout_ms; /* atomic, the owner's */
  RlMutex mutex;
  GPtrArray *idle; /* RlConn*, most recently returned last */
  RlTls *tls;      /* TLS credentials, loaded by the first connection; NULL: plain */
};

/* Idle connections kept beyond this are closed: enough for a busy thread pool. */
#define RL_POOL_MAX_IDLE 64
/* An idle connection given back this long ago or more is checked before use (below). */
#define RL_POOL_RECHECK_US G_USEC_PER_SEC

void
rl_format_uint (char buf[24], gint64 value)
{
  *rl_put_uint (buf, (guint64) MAX (value, 0)) = '\0';
}

guint
rl_conns_exchange (RlConn **conns, guint n, const guint *expected, gint64 timeout_ms,
                   RlReplyFunc func, gpointer user_data, gboolean *failed)
{
  g_autofree struct pollfd *pfds = g_new0 (struct pollfd, n);
  g_autofree guint *index = g_new0 (guint, n);
  g_autofree guint *got = g_new0 (guint, n);
  gint64 deadline = g_get_monotonic_time () + timeout_ms * 1000;
  guint active = 0, n_failed = 0;

  for (guint i = 0; i < n; i++)
    {
      failed[i] = FALSE;
      if (expected[i] > 0)
        active++;
      /* The requests go out now, before the first poll. */
      if (expected[i] > 0 && rl_conn_wants_write (conns[i]) && !rl_conn_write_some (conns[i]))
        {
          rl_conn_fail (conns[i], RL_CONN_ERR_IO, "Redis connection failed");
          failed[i] = TRUE;
          n_failed++;
          active--;
        }
    }
  while (active > 0)
    {
      gboolean pending = FALSE;
      guint nfds = 0;
      int rc;

      for (guint i = 0; i < n; i++)
        if (!failed[i] && got[i] < expected[i])
          {
            pfds[nfds].fd = conns[i]->fd;
            pfds[nfds].events = (short) (POLLIN | (rl_conn_wants_write (conns[i]) ? POLLOUT : 0));
            pfds[nfds].revents = 0;
            /* Decrypted bytes poll() cannot see: handle them without sleeping. */
            if (rl_conn_has_pending (conns[i]))
              {
                pfds[nfds].revents = POLLIN;
                pending = TRUE;
              }
            index[nfds++] = i;
          }
      rc = pending ? 1 : rl_poll_until (pfds, nfds, deadline);
      if (rc <= 0)
        {
          for (guint k = 0; k < nfds; k++)
            {
              rl_conn_fail (conns[index[k]], rc == 0 ? RL_CONN_ERR_TIMEOUT : RL_CONN_ERR_IO,
                            rc == 0 ? "Redis timed out" : g_strerror (errno));
              failed[index[k]] = TRUE;
              n_failed++;
            }
          break;
        }
      for (guint k = 0; k < nfds; k++)
        {
          guint i = index[k];
          RlConn *conn = conns[i];
          gboolean ok = TRUE;

          if ((pfds[k].revents & POLLOUT) != 0)
            ok = rl_conn_write_some (conn);
          if (ok && (pfds[k].revents & (POLLIN | POLLHUP | POLLERR)) != 0)
            ok = rl_conn_read_some (conn);
          while (ok && got[i] < expected[i])
            {
              redisReply *reply = NULL;
              ok = rl_conn_next_reply (conn, &reply);
              if (!ok || reply == NULL)
                break;
              got[i]++;
              func (i, reply, user_data);
            }
          if (!ok)
            {
              rl_conn_fail (conn, RL_CONN_ERR_IO, "Redis connection failed");
              failed[i] = TRUE;
              n_failed++;
            }
          if (!ok || got[i] == expected[i])
            active--;
        }
    }
  return n_failed;
}

redisReply *
rl_command_argv (RlConn *conn, int argc, const char **argv, GError **error)
{
  redisReply *reply = rl_conn_roundtrip (conn, argc, argv);

  if (reply == NULL)
    {
      rl_set_error_from_conn (error, conn, argv[0]);
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
  redisReply *reply = rl_command_argv (conn, argc, argv, error);
  if (reply == NULL)
    return FALSE;
  freeReplyObject (reply);
  return TRUE;
}

/* The pool's TLS credentials, loaded on first use; NULL for a plain node, or with
 * @error when they cannot be loaded. */
static RlTls *
pool_tls (RlPool *pool, GError **error)
{
  RlTls *tls;

  if (!pool->config.tls)
    return NULL;
  rl_mutex_lock (&pool->mutex);
  if (pool->tls == NULL)
    pool->tls = rl_tls_new (&pool->config, error);
  tls = pool->tls;
  rl_mutex_unlock (&pool->mutex);
  return tls;
}

static RlConn *
pool_connect (RlPool *pool, gint64 connect_ms, GError **error)
{
  RlConnConfig *cfg = &pool->config;
  gint64 command_ms = RL_ATOMIC_GET (*pool->command_timeout_ms);
  g_autoptr (GError) local_error = NULL;
  RlTls *tls = pool_tls (pool, error);
  RlConn *conn;

  if (cfg->tls && tls == NULL)
    return NULL;
  conn = rl_conn_open (cfg, tls, connect_ms, error);
  if (conn == NULL)
    return NULL;

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
      char db[24];
      const char *select[] = { "SELECT", db };
      rl_format_uint (db, cfg->db);
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

RlConn *
rl_pool_connect (RlPool *pool, GError **error)
{
  return pool_connect (pool, RL_ATOMIC_GET (*pool->connect_timeout_ms), error);
}

RlPool *
rl_pool_new (RlConnConfig *config, const gint64 *connect_timeout_ms,
             const gint64 *command_timeout_ms)
{
  RlPool *pool = g_new0 (RlPool, 1);

  pool->config = *config;
  memset (config, 0, sizeof *config);
  pool->connect_timeout_ms = connect_timeout_ms;
  pool->command_timeout_ms = command_timeout_ms;
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
  rl_tls_free (pool->tls);
  rl_conn_config_clear (&pool->config);
  g_free (pool);
}

/* rl_pool_get() whose new connection, if one is made, is set up within @connect_ms
 * (0: the connect timeout; never more than it). */
static RlConn *
rl_pool_get_within (RlPool *pool, gint64 timeout_ms, gint64 connect_ms, gboolean retries,
                    gboolean *reused, GError **error)
{
  gint64 default_ms = RL_ATOMIC_GET (*pool->connect_timeout_ms);
  RlConn *conn = NULL;

  /* An idle connection whose server went away (a restart, CLIENT KILL, a timeout
   * there) is dropped here, before anything is sent on it, so that a request goes out
   * once instead of being sent again with the outcome of the first sending in doubt
   * (a release that finds no key: did the first one delete it?). For a request that
   * may go twice (@retries: an acquisition, a renewal, which read "already ours" on a
   * second sending; the exchange sends it again on a fresh connection when a reused
   * one meets end of file or a reset, rl_node_exchange_broke()), that check is made
   * only on a connection idle for RL_POOL_RECHECK_US or more: the hot path of an
   * acquisition saves a system call. */
  for (;;)
    {
      rl_mutex_lock (&pool->mutex);
      if (pool->idle->len > 0)
        conn = g_ptr_array_steal_index_fast (pool->idle, pool->idle->len - 1);
      rl_mutex_unlock (&pool->mutex);
      if (conn == NULL
          || (retries && g_get_monotonic_time () - conn->idle_since < RL_POOL_RECHECK_US)
          || !rl_conn_peer_closed (conn))
        break;
      g_clear_pointer (&conn, rl_conn_free);
    }

  *reused = conn != NULL;
  if (conn == NULL)
    conn = pool_connect (pool, connect_ms > 0 ? MIN (connect_ms, default_ms) : default_ms,
                         error);
  if (conn == NULL)
    return NULL;
  rl_conn_set_timeout (conn,
                       timeout_ms > 0 ? timeout_ms : RL_ATOMIC_GET (*pool->command_timeout_ms));
  return conn;
}

RlConn *
rl_pool_get (RlPool *pool, gint64 timeout_ms, gboolean *reused, GError **error)
{
  return rl_pool_get_within (pool, timeout_ms, 0, FALSE, reused, error);
}

RlConn *
rl_pool_get_until (RlPool *pool, gint64 deadline, gboolean retries, gboolean *reused,
                   GError **error)
{
  gint64 left_ms = MAX ((deadline - g_get_monotonic_time ()) / 1000, 1);

  return rl_pool_get_within (pool, left_ms, left_ms, retries, reused, error);
}


void
rl_pool_put (RlPool *pool, RlConn *conn)
{
  if (conn->err != RL_CONN_OK || rl_conn_wants_write (conn))
    {
      rl_conn_free (conn);
      return;
    }
  conn->idle_since = g_get_monotonic_time ();
  rl_mutex_lock (&pool->mutex);
  if (pool->idle->len < RL_POOL_MAX_IDLE)
    {
      g_ptr_array_add (pool->idle, conn);
      conn = NULL;
    }
  rl_mutex_unlock (&pool->mutex);
  rl_conn_free (conn);
}
