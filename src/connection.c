/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* connection.c: URLs, the connection pool, timeouts and error translation for Redis.
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
#include <string.h>
#include <sys/time.h>
#include <sys/un.h>

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

/* How every URL is split, by the parser and by redact_url() alike. The query is kept
 * encoded: g_uri_parse_params() decodes each name and value after splitting at "&",
 * so a password may contain "&", "=" or "#" written as %26, %3D, %23. */
#define RL_URL_FLAGS (G_URI_FLAGS_HAS_PASSWORD | G_URI_FLAGS_NON_DNS | G_URI_FLAGS_ENCODED_QUERY)

/* Whether @text is only ASCII letters, digits and characters of @extra: a part of a URL
 * that cannot hold a password that spilled out of its place (a raw "@", "&", "=", "%",
 * ";" or white space in a password moves the split points of the URL). */
static gboolean
is_plain (const char *text, const char *extra)
{
  for (const char *p = text; *p != '\0'; p++)
    if (!g_ascii_isalnum (*p) && strchr (extra, *p) == NULL)
      return FALSE;
  return TRUE;
}

/* The characters a Unix socket path or a host may have to be shown in a message. */
#define RL_PLAIN_PATH "/._-+~"
#define RL_PLAIN_HOST ".-_:"

/* Whether @url starts with @scheme (any case) and "://". */
static gboolean
scheme_has_slashes (const char *url, const char *scheme)
{
  gsize n = strlen (scheme);
  return g_ascii_strncasecmp (url, scheme, n) == 0 && g_str_has_prefix (url + n, "://");
}

/* One "&"-separated part of a query as shown in a message: only the database's value,
 * and only when it is a number; the names of db, username and password (in any case,
 * %-encoded or not); nothing of any other part, whose name may be the tail of a
 * password that held a raw "&". */
static void
append_redacted_param (GString *out, const char *part)
{
  g_autofree char *raw_name = g_strndup (part, strcspn (part, "="));
  g_autofree char *name = g_uri_unescape_string (raw_name, NULL);
  const char *value = part[strlen (raw_name)] == '=' ? part + strlen (raw_name) + 1 : NULL;

  if (name == NULL || !is_plain (name, "")
      || (g_ascii_strcasecmp (name, "db") != 0 && g_ascii_strcasecmp (name, "username") != 0
          && g_ascii_strcasecmp (name, "password") != 0))
    {
      g_string_append (out, "***");
      return;
    }
  g_string_append (out, name);
  if (value == NULL)
    return;
  if (g_ascii_strcasecmp (name, "db") == 0 && *value != '\0' && is_plain (value, "")
      && strspn (value, "0123456789") == strlen (value))
    g_string_append_printf (out, "=%s", value);
  else
    g_string_append (out, "=***");
}

/* @url as shown in error messages, which end up in logs. Built from the parts known not
 * to hold a secret rather than by cutting the password out, so that a password with
 * raw "/", "?", "#", "@", "&" or ":" that moved the URL's split points cannot leak:
 * the whole user info is "***" (a lone user name may be a password too), a query
 * shows only parameter names it accepts and a numeric db, a fragment is "***", and a
 * host or path with any character outside a plain set is "***". A URL that does not
 * parse shows its scheme only when it is one of ours or is followed by "//" (a bare
 * password with a ":" in it is not a scheme), and nothing after it: which part a
 * password would be in cannot be told. */
static char *
redact_url (const char *url)
{
  g_autoptr (GUri) uri = g_uri_parse (url, RL_URL_FLAGS, NULL);
  const char *scheme = g_uri_peek_scheme (url); /* interned, lower case */
  gboolean slashes;
  GString *out;
  const char *host;
  const char *path;
  const char *query;

  if (*url == '\0')
    return g_strdup ("");
  if (scheme == NULL)
    return g_strdup ("***");
  slashes = scheme_has_slashes (url, scheme);
  if (!slashes && g_strcmp0 (scheme, "redis") != 0 && g_strcmp0 (scheme, "rediss") != 0
      && g_strcmp0 (scheme, "unix") != 0 && g_strcmp0 (scheme, "memory") != 0)
    return g_strdup ("***");
  if (uri == NULL)
    return g_strconcat (scheme, slashes ? "://***" : ":***", NULL);

  out = g_string_new (scheme);
  g_string_append_c (out, ':');
  host = g_uri_get_host (uri);
  if (host != NULL)
    {
      g_string_append (out, "//");
      if (g_uri_get_userinfo (uri) != NULL)
        g_string_append (out, "***@");
      if (!is_plain (host, RL_PLAIN_HOST))
        g_string_append (out, "***");
      else if (strchr (host, ':') != NULL)
        g_string_append_printf (out, "[%s]", host);
      else
        g_string_append (out, host);
      if (g_uri_get_port (uri) != -1)
        g_string_append_printf (out, ":%d", g_uri_get_port (uri));
    }
  path = g_uri_get_path (uri);
  if (*path != '\0')
    {
      if (path[0] != '/')
        g_string_append (out, "***");
      else if (is_plain (path, RL_PLAIN_PATH))
        g_string_append (out, path);
      else
        g_string_append (out, "/***");
    }
  query = g_uri_get_query (uri);
  if (query != NULL)
    {
      g_auto (GStrv) parts = g_strsplit (query, "&", -1);

      g_string_append_c (out, '?');
      for (guint i = 0; parts[i] != NULL; i++)
        {
          if (i > 0)
            g_string_append_c (out, '&');
          if (*parts[i] != '\0')
            append_redacted_param (out, parts[i]);
        }
    }
  if (g_uri_get_fragment (uri) != NULL)
    g_string_append (out, "#***");
  return g_string_free (out, FALSE);
}

/* Why g_uri_parse() refused a URL, in words of our own: its messages quote the part
 * they could not parse, which may be a password (`redis://user:pass` without "@host"
 * is a bad port "pass"). */
static const char *
uri_error_reason (const GError *error)
{
  if (error->domain != G_URI_ERROR)
    return "not a valid URL";
  switch ((GUriError) error->code)
    {
      case G_URI_ERROR_BAD_SCHEME:
        return "the scheme is not valid";
      case G_URI_ERROR_BAD_USER:
      case G_URI_ERROR_BAD_PASSWORD:
      case G_URI_ERROR_BAD_AUTH_PARAMS:
        return "the user name or password is not valid %-encoded UTF-8";
      case G_URI_ERROR_BAD_HOST:
        return "the host is not valid";
      case G_URI_ERROR_BAD_PORT:
        return "the port is not a number from 1 to 65535 (in a password, write “/”, “?”, "
               "“#” and “@” as %2F, %3F, %23 and %40)";
      case G_URI_ERROR_BAD_PATH:
        return "the path is not valid %-encoded UTF-8";
      case G_URI_ERROR_BAD_QUERY:
        return "the query is not valid %-encoded UTF-8";
      case G_URI_ERROR_BAD_FRAGMENT:
        return "the fragment is not valid %-encoded UTF-8";
      case G_URI_ERROR_FAILED:
      default:
        return "not a valid absolute URL (expected redis://HOST or unix:///PATH)";
    }
}

/* Parses a database number. The message does not quote @text: it may be a password's
 * tail that spilled into the path or a parameter. */
static gboolean
parse_db (const char *text, int *db, const char *url, GError **error)
{
  guint64 value;

  if (!g_ascii_string_to_unsigned (text, 10, 0, G_MAXINT, &value, NULL))
    {
      g_autofree char *shown = redact_url (url);
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID,
                   "Invalid Redis URL “%s”: the database is not a number from 0 to %d", shown,
                   G_MAXINT);
      return FALSE;
    }
  *db = (int) value;
  return TRUE;
}

/* Sets an INVALID error showing redact_url (@url) and @why, which must not quote any
 * part of @url that may hold a password. */
static gboolean
invalid_url (GError **error, const char *url, const char *why)
{
  g_autofree char *shown = redact_url (url);

  g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID, "Invalid Redis URL “%s”: %s",
               shown, why);
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
  uri = g_uri_parse (url, RL_URL_FLAGS, &local_error);
  if (uri == NULL)
    return invalid_url (error, url, uri_error_reason (local_error));

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
      /* g_uri_parse() splits the user info at the first "@": the rest of a password
       * with a raw "@" would be taken for the host. */
      if (strchr (host, '@') != NULL)
        return invalid_url (error, url,
                            "the host contains “@” (in a password, write “@” as %40)");
      for (const char *h = host; *h != '\0'; h++)
        if (g_ascii_isspace (*h) || g_ascii_iscntrl (*h))
          return invalid_url (error, url, "the host contains white space or control characters");
      if (port == 0)
        return invalid_url (error, url, "port 0");
      if (query != NULL || g_uri_get_fragment (uri) != NULL)
        return invalid_url (error, url,
                            "redis:// URLs take no query or fragment (in a password, write “?” "
                            "and “#” as %3F and %23)");
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
      /* A "#" in a password would end the query there and cut the password short. */
      if (g_uri_get_fragment (uri) != NULL)
        return invalid_url (error, url,
                            "unix:// URLs take no fragment (in a password, write “#” as %23)");
      config->path = g_strdup (path);
      if (query != NULL)
        {
          g_autoptr (GHashTable) params = NULL;
          g_auto (GStrv) parts = split_params (query);
          GHashTableIter iter;
          gpointer key, value;

          params = g_uri_parse_params (query, -1, "&", G_URI_PARAMS_NONE, NULL);
          if (params == NULL)
            {
              rl_conn_config_clear (config);
              return invalid_url (error, url,
                                  "the query is not NAME=VALUE pairs of valid %-encoded UTF-8 "
                                  "(in a password, write “&”, “=”, “%” and “#” as %26, %3D, "
                                  "%25 and %23)");
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
                  /* The name is quoted only when it is one of ours in another case: any
                   * other may be the tail of a password with a raw "&". */
                  g_autofree char *why
                      = g_ascii_strcasecmp (key, "db") == 0
                                || g_ascii_strcasecmp (key, "password") == 0
                                || g_ascii_strcasecmp (key, "username") == 0
                            ? g_strdup_printf ("unknown parameter “%s” (names are lower case)",
                                               (const char *) key)
                            : g_strdup ("an unknown parameter (accepted: db, password, username)");
                  rl_conn_config_clear (config);
                  return invalid_url (error, url, why);
                }
            }
        }
      return TRUE;
    }
  else
    {
      /* The scheme is named when it is one, in front of "//": a bare password with a
       * ":" in it would look like a scheme too. */
      g_autofree char *why
          = scheme_has_slashes (url, scheme) && strlen (scheme) <= 32
                ? g_strdup_printf ("unsupported scheme “%s” (expected redis:// or unix://)", scheme)
                : g_strdup ("not a redis:// or unix:// URL");
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
      /* The socket path or host as the URL gave it, unless it has characters a
       * misplaced password may have brought in (unix:///s.sock&password=...). */
      g_autofree char *where
          = cfg->path != NULL
                ? (is_plain (cfg->path, RL_PLAIN_PATH)
                       ? g_strdup_printf ("Cannot connect to Redis at %s", cfg->path)
                       : g_strdup ("Cannot connect to Redis at the Unix socket of the URL"))
                : (is_plain (cfg->host, RL_PLAIN_HOST)
                       ? g_strdup_printf ("Cannot connect to Redis at %s:%d", cfg->host, cfg->port)
                       : g_strdup_printf ("Cannot connect to Redis at the host of the URL, port %d",
                                          cfg->port));
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
