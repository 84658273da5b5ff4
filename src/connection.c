/* connection.c: URLs, the connection pool, timeouts and error translation for Redis.
 *
 * hiredis contexts are not thread-safe, so the pool hands each caller a context of its
 * own for the duration of one operation and takes it back afterwards; idle contexts
 * are kept for reuse, a context that failed is closed, and a new one is made on the
 * next use, which is all "reconnect" needs to mean. Every socket has a bounded
 * connect and command timeout, so a dead or frozen server turns into a
 * REDIS_LOCK_ERROR_CONNECTION within the timeout instead of a hang.
 *
 * This is also the one place that knows which hiredis it was built against: the
 * HAVE_DECL_* checks from configure stay in this file.
 */
#include "config.h"

#include <errno.h>
#include <string.h>
#include <sys/time.h>
#include <sys/un.h>

#include "connection.h"
#include "internal.h"

struct _RlPool
{
  RlConnConfig config;
  RlStoreContext *ctx;
  RlMutex mutex;
  GPtrArray *idle; /* RlConn*, most recently returned last */
};

/* Idle connections kept beyond this are closed: enough for a busy thread pool. */
#define RL_POOL_MAX_IDLE 64

/* URLs ------------------------------------------------------------------------- */

void
rl_conn_config_clear (RlConnConfig *config)
{
  g_clear_pointer (&config->host, g_free);
  g_clear_pointer (&config->path, g_free);
  g_clear_pointer (&config->username, g_free);
  g_clear_pointer (&config->password, g_free);
}

/* The non-empty "&"-separated parts of a query. */
static GStrv
split_params (const char *query)
{
  g_auto (GStrv) parts = g_strsplit (query, "&", -1);
  GPtrArray *kept = g_ptr_array_new ();

  for (guint i = 0; parts[i] != NULL; i++)
    if (*parts[i] != '\0')
      g_ptr_array_add (kept, g_strdup (parts[i]));
  g_ptr_array_add (kept, NULL);
  return (GStrv) g_ptr_array_free (kept, FALSE);
}

/* @url with any password replaced by "***", for error messages: URLs end up in logs. */
static char *
redact_url (const char *url)
{
  GString *out = g_string_new (url);
  const char *scheme_end = strstr (out->str, "://");
  char *at, *colon, *p;

  if (scheme_end != NULL)
    {
      char *authority = out->str + (scheme_end - out->str) + 3;
      char *end = authority + strcspn (authority, "/?#");
      at = g_strstr_len (authority, end - authority, "@");
      colon = at != NULL ? g_strstr_len (authority, at - authority, ":") : NULL;
      if (colon != NULL)
        {
          gssize pos = colon + 1 - out->str;
          g_string_erase (out, pos, at - colon - 1);
          g_string_insert (out, pos, "***");
        }
    }
  for (p = strstr (out->str, "password="); p != NULL; p = strstr (p + 1, "password="))
    {
      gssize pos = p + strlen ("password=") - out->str;
      gsize len = strcspn (out->str + pos, "&#");
      g_string_erase (out, pos, len);
      g_string_insert (out, pos, "***");
      p = out->str + pos;
    }
  return g_string_free (out, FALSE);
}

static gboolean
parse_db (const char *text, int *db, const char *url, GError **error)
{
  guint64 value;

  if (!g_ascii_string_to_unsigned (text, 10, 0, G_MAXINT, &value, NULL))
    {
      g_autofree char *shown = redact_url (url);
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID,
                   "Invalid Redis URL “%s”: database “%s” is not a number", shown, text);
      return FALSE;
    }
  *db = (int) value;
  return TRUE;
}

static gboolean
invalid_url (GError **error, const char *url, const char *why)
{
  g_autofree char *shown = redact_url (url);
  g_auto (GStrv) parts = *url != '\0' ? g_strsplit (why, url, -1) : NULL;
  g_autofree char *why_shown = parts != NULL ? g_strjoinv (shown, parts) : g_strdup (why);

  g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID, "Invalid Redis URL “%s”: %s",
               shown, why_shown);
  return FALSE;
}

gboolean
rl_conn_config_parse (const char *url, RlConnConfig *config, GError **error)
{
  g_autoptr (GUri) uri = NULL;
  g_autoptr (GError) local_error = NULL;
  const char *scheme;
  const char *query;

  memset (config, 0, sizeof *config);
  uri = g_uri_parse (url, G_URI_FLAGS_HAS_PASSWORD | G_URI_FLAGS_NON_DNS, &local_error);
  if (uri == NULL)
    return invalid_url (error, url, local_error->message);

  scheme = g_uri_get_scheme (uri);
  query = g_uri_get_query (uri);
  if (g_ascii_strcasecmp (scheme, "rediss") == 0)
    return invalid_url (error, url, "TLS (rediss://) is not supported by this build");

  if (g_ascii_strcasecmp (scheme, "redis") == 0)
    {
      const char *host = g_uri_get_host (uri);
      const char *path = g_uri_get_path (uri);
      int port = g_uri_get_port (uri);

      if (host == NULL || *host == '\0')
        return invalid_url (error, url, "no host");
      for (const char *h = host; *h != '\0'; h++)
        if (g_ascii_isspace (*h) || g_ascii_iscntrl (*h))
          return invalid_url (error, url, "the host contains white space or control characters");
      if (port == 0)
        return invalid_url (error, url, "port 0");
      if (query != NULL || g_uri_get_fragment (uri) != NULL)
        return invalid_url (error, url, "redis:// URLs take no query or fragment");
      if (path[0] == '/')
        path++;
      if (*path != '\0' && !parse_db (path, &config->db, url, error))
        return FALSE;
      config->host = g_strdup (host);
      config->port = port > 0 ? port : 6379;
    }
  else if (g_ascii_strcasecmp (scheme, "unix") == 0)
    {
      const char *host = g_uri_get_host (uri);
      const char *path = g_uri_get_path (uri);

      if (host != NULL && *host != '\0')
        return invalid_url (error, url, "a unix:// URL needs an absolute path (unix:///path)");
      if (path[0] != '/' || path[1] == '\0')
        return invalid_url (error, url, "a unix:// URL needs an absolute socket path");
      if (strlen (path) >= sizeof (((struct sockaddr_un *) NULL)->sun_path))
        {
          g_autofree char *why = g_strdup_printf (
              "the socket path is longer than the %zu bytes a Unix socket address holds",
              sizeof (((struct sockaddr_un *) NULL)->sun_path) - 1);
          return invalid_url (error, url, why);
        }
      if (g_uri_get_user (uri) != NULL)
        return invalid_url (error, url, "give credentials as ?username=&password= in unix:// URLs");
      config->path = g_strdup (path);
      if (query != NULL)
        {
          g_autoptr (GHashTable) params = NULL;
          g_auto (GStrv) parts = split_params (query);
          GHashTableIter iter;
          gpointer key, value;

          params = g_uri_parse_params (query, -1, "&", G_URI_PARAMS_NONE, &local_error);
          if (params == NULL)
            {
              rl_conn_config_clear (config);
              return invalid_url (error, url, local_error->message);
            }
          /* A parameter given twice would silently lose one value. */
          if (g_hash_table_size (params) != g_strv_length (parts))
            {
              rl_conn_config_clear (config);
              return invalid_url (error, url, "a parameter is given more than once");
            }
          g_hash_table_iter_init (&iter, params);
          while (g_hash_table_iter_next (&iter, &key, &value))
            {
              if (g_str_equal (key, "db"))
                {
                  if (!parse_db (value, &config->db, url, error))
                    {
                      rl_conn_config_clear (config);
                      return FALSE;
                    }
                }
              else if (g_str_equal (key, "password"))
                { g_free (config->password); config->password = g_strdup (value); }
              else if (g_str_equal (key, "username"))
                { g_free (config->username); config->username = g_strdup (value); }
              else
                {
                  g_autofree char *why
                      = g_strdup_printf ("unknown parameter “%s”", (const char *) key);
                  rl_conn_config_clear (config);
                  return invalid_url (error, url, why);
                }
            }
        }
      return TRUE;
    }
  else
    {
      g_autofree char *why = g_strdup_printf (
          "unsupported scheme “%s” (expected redis:// or unix://)", scheme);
      return invalid_url (error, url, why);
    }

  if (g_uri_get_user (uri) != NULL && *g_uri_get_user (uri) != '\0')
    config->username = g_strdup (g_uri_get_user (uri));
  if (g_uri_get_password (uri) != NULL)
    config->password = g_strdup (g_uri_get_password (uri));
  return TRUE;
}

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
  gint64 connect_ms = RL_STAT_GET (pool->ctx->connect_timeout_ms);
  gint64 command_ms = RL_STAT_GET (pool->ctx->command_timeout_ms);
  struct timeval tv = ms_to_timeval (connect_ms);
  g_autoptr (GError) local_error = NULL;
  redisContext *c;
  RlConn *conn;

  if (cfg->path != NULL)
    c = redisConnectUnixWithTimeout (cfg->path, tv);
  else
    c = redisConnectWithTimeout (cfg->host, cfg->port, tv);
  if (c == NULL || c->err)
    {
      g_autofree char *where = cfg->path != NULL
                                   ? g_strdup_printf ("Cannot connect to Redis at %s", cfg->path)
                                   : g_strdup_printf ("Cannot connect to Redis at %s:%d",
                                                      cfg->host, cfg->port);
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
                       timeout_ms > 0 ? timeout_ms : RL_STAT_GET (pool->ctx->command_timeout_ms));
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
