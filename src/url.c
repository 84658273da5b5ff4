/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* url.c: the one parser of the URLs a registry is given, and their redaction.
 *
 * redis:// and unix:// (and, as they come, the Sentinel, Cluster and TLS forms) are
 * parsed here into an RlConnConfig, by GLib's GUri with the query split before it is
 * decoded, so that %-encoded "&", "=" and "#" work in a password. Every message about
 * a URL shows it redacted: rebuilt from parts that cannot hold a secret (user info,
 * unknown parameters and fragments become "***"; a URL that does not parse shows only
 * its scheme), and a reason never quotes a piece of the URL. The library, the
 * command-line tool and the benchmark all use this file (it is built into a private
 * convenience library), so a URL means the same to each of them.
 */
#include "config.h"

#include <string.h>
#include <sys/un.h>

#include "url.h"

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

/* redis://[[user]:password@]host[:port][/db] */
static gboolean
parse_tcp (GUri *uri, const char *url, RlConnConfig *config, GError **error)
{
  const char *host = g_uri_get_host (uri);
  const char *path = g_uri_get_path (uri);
  int port = g_uri_get_port (uri);

  if (host == NULL || *host == '\0')
    return invalid_url (error, url, "no host");
  /* g_uri_parse() splits the user info at the first "@": the rest of a password with
   * a raw "@" would be taken for the host. */
  if (strchr (host, '@') != NULL)
    return invalid_url (error, url, "the host contains “@” (in a password, write “@” as %40)");
  for (const char *h = host; *h != '\0'; h++)
    if (g_ascii_isspace (*h) || g_ascii_iscntrl (*h))
      return invalid_url (error, url, "the host contains white space or control characters");
  if (port == 0)
    return invalid_url (error, url, "port 0");
  if (g_uri_get_query (uri) != NULL || g_uri_get_fragment (uri) != NULL)
    return invalid_url (error, url,
                        "redis:// URLs take no query or fragment (in a password, write “?” "
                        "and “#” as %3F and %23)");
  if (path[0] == '/')
    path++;
  if (*path != '\0' && !parse_db (path, &config->db, url, error))
    return FALSE;
  config->host = g_strdup (host);
  config->port = port > 0 ? port : 6379;
  if (g_uri_get_user (uri) != NULL && *g_uri_get_user (uri) != '\0')
    config->username = g_strdup (g_uri_get_user (uri));
  if (g_uri_get_password (uri) != NULL)
    config->password = g_strdup (g_uri_get_password (uri));
  return TRUE;
}

/* The ?db=&password=&username= of a unix:// URL. */
static gboolean
parse_unix_params (const char *query, const char *url, RlConnConfig *config, GError **error)
{
  g_autoptr (GHashTable) params = NULL;
  g_auto (GStrv) parts = split_params (query);
  GHashTableIter iter;
  gpointer key, value;

  params = g_uri_parse_params (query, -1, "&", G_URI_PARAMS_NONE, NULL);
  if (params == NULL)
    return invalid_url (error, url,
                        "the query is not NAME=VALUE pairs of valid %-encoded UTF-8 (in a "
                        "password, write “&”, “=”, “%” and “#” as %26, %3D, %25 and %23)");
  /* A parameter given twice would silently lose one value. */
  if (g_hash_table_size (params) != g_strv_length (parts))
    return invalid_url (error, url, "a parameter is given more than once");
  g_hash_table_iter_init (&iter, params);
  while (g_hash_table_iter_next (&iter, &key, &value))
    {
      if (g_str_equal (key, "db"))
        {
          if (!parse_db (value, &config->db, url, error))
            return FALSE;
        }
      else if (g_str_equal (key, "password"))
        {
          g_free (config->password);
          config->password = g_strdup (value);
        }
      else if (g_str_equal (key, "username"))
        {
          g_free (config->username);
          config->username = g_strdup (value);
        }
      else
        {
          /* The name is quoted only when it is one of ours in another case: any other
           * may be the tail of a password with a raw "&". */
          g_autofree char *why
              = g_ascii_strcasecmp (key, "db") == 0 || g_ascii_strcasecmp (key, "password") == 0
                        || g_ascii_strcasecmp (key, "username") == 0
                    ? g_strdup_printf ("unknown parameter “%s” (names are lower case)",
                                       (const char *) key)
                    : g_strdup ("an unknown parameter (accepted: db, password, username)");
          return invalid_url (error, url, why);
        }
    }
  return TRUE;
}

/* unix:///absolute/path.sock[?db=N&password=P&username=U] */
static gboolean
parse_unix (GUri *uri, const char *url, RlConnConfig *config, GError **error)
{
  const char *host = g_uri_get_host (uri);
  const char *path = g_uri_get_path (uri);
  gsize max = sizeof (((struct sockaddr_un *) NULL)->sun_path) - 1;

  if (host != NULL && *host != '\0')
    return invalid_url (error, url, "a unix:// URL needs an absolute path (unix:///path)");
  if (path[0] != '/' || path[1] == '\0')
    return invalid_url (error, url, "a unix:// URL needs an absolute socket path");
  if (strlen (path) > max)
    {
      g_autofree char *why = g_strdup_printf (
          "the socket path is longer than the %zu bytes a Unix socket address holds", max);
      return invalid_url (error, url, why);
    }
  if (g_uri_get_user (uri) != NULL)
    return invalid_url (error, url, "give credentials as ?username=&password= in unix:// URLs");
  /* A "#" in a password would end the query there and cut the password short. */
  if (g_uri_get_fragment (uri) != NULL)
    return invalid_url (error, url,
                        "unix:// URLs take no fragment (in a password, write “#” as %23)");
  config->path = g_strdup (path);
  return g_uri_get_query (uri) == NULL
         || parse_unix_params (g_uri_get_query (uri), url, config, error);
}

gboolean
rl_conn_config_parse (const char *url, RlConnConfig *config, GError **error)
{
  g_autoptr (GUri) uri = NULL;
  g_autoptr (GError) local_error = NULL;
  const char *scheme;
  gboolean ok;

  memset (config, 0, sizeof *config);
  uri = g_uri_parse (url, RL_URL_FLAGS, &local_error);
  if (uri == NULL)
    return invalid_url (error, url, uri_error_reason (local_error));

  scheme = g_uri_get_scheme (uri);
  if (g_ascii_strcasecmp (scheme, "rediss") == 0)
    return invalid_url (error, url, "TLS (rediss://) is not supported by this build");
  if (g_ascii_strcasecmp (scheme, "redis") == 0)
    ok = parse_tcp (uri, url, config, error);
  else if (g_ascii_strcasecmp (scheme, "unix") == 0)
    ok = parse_unix (uri, url, config, error);
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
  if (!ok)
    rl_conn_config_clear (config);
  return ok;
}

char *
rl_url_redact (const char *url)
{
  return redact_url (url);
}

char *
rl_conn_config_describe (const RlConnConfig *config)
{
  /* The socket path or host as the URL gave it, unless it has characters a misplaced
   * password may have brought in (unix:///s.sock&password=...). */
  if (config->path != NULL)
    return is_plain (config->path, RL_PLAIN_PATH) ? g_strdup (config->path)
                                                  : g_strdup ("the Unix socket of the URL");
  return is_plain (config->host, RL_PLAIN_HOST)
             ? g_strdup_printf ("%s:%d", config->host, config->port)
             : g_strdup_printf ("the host of the URL, port %d", config->port);
}
