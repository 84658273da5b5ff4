/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* url.c: the one parser of the URLs a registry is given, and their redaction.
 *
 * redis:// and unix:// name one server and are parsed into an RlConnConfig, by GLib's
 * GUri with the query split before it is decoded, so that %-encoded "&", "=" and "#"
 * work in a password; both take ?db=&password=&username=. redis-sentinel:// and
 * redis-cluster:// name a deployment: a list of hosts GUri cannot read ("h1:p1,h2:p2"),
 * so the authority is cut here, where GUri cuts it (the user info ends at its first
 * "@", the authority at the first "/", "?" or "#"), and each host of the list is read
 * by GUri as the host of a redis:// URL; GUri reads the rest with a stand-in host. The
 * rediss forms are the same with TLS on every connection and ?ca=&cert=&key=&sni= in
 * the query (a build without TLS refuses them).
 * Every message about a URL shows it redacted: rebuilt from parts that cannot hold
 * a secret (user info, unknown parameters and fragments become "***"; a URL that does
 * not parse shows only its scheme), and a reason never quotes a piece of the URL. The
 * library, the command-line tool and the benchmark all use this file (it is built into
 * a private convenience library), so a URL means the same to each of them.
 */
#include "config.h"

#include <string.h>
#include <errno.h>
#include <sys/un.h>
#include <glib/gstdio.h>

#include "url.h"

void
rl_conn_config_clear (RlConnConfig *config)
{
  g_clear_pointer (&config->host, g_free);
  g_clear_pointer (&config->path, g_free);
  g_clear_pointer (&config->username, g_free);
  g_clear_pointer (&config->password, g_free);
  g_clear_pointer (&config->tls_ca, g_free);
  g_clear_pointer (&config->tls_cert, g_free);
  g_clear_pointer (&config->tls_key, g_free);
  g_clear_pointer (&config->tls_sni, g_free);
}

void
rl_conn_config_copy (const RlConnConfig *config, RlConnConfig *copy)
{
  copy->host = g_strdup (config->host);
  copy->port = config->port;
  copy->path = g_strdup (config->path);
  copy->username = g_strdup (config->username);
  copy->password = g_strdup (config->password);
  copy->db = config->db;
  copy->tls = config->tls;
  copy->tls_ca = g_strdup (config->tls_ca);
  copy->tls_cert = g_strdup (config->tls_cert);
  copy->tls_key = g_strdup (config->tls_key);
  copy->tls_sni = g_strdup (config->tls_sni);
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
        return "not a valid absolute URL (expected SCHEME://…, such as redis://HOST, "
               "rediss://HOST or unix:///PATH)";
    }
}

/* The URL forms that name a deployment rather than one server, with a list of hosts. */
typedef struct
{
  const char *scheme; /* lower case, as g_uri_peek_scheme() gives it */
  RlTopologyKind kind;
  gboolean tls;
  int default_port; /* of each host of the list */
} DeploymentForm;

static const DeploymentForm deployment_forms[] = {
  { "redis-sentinel", RL_TOPOLOGY_SENTINEL, FALSE, 26379 },
  { "redis-cluster", RL_TOPOLOGY_CLUSTER, FALSE, 6379 },
  { "rediss-sentinel", RL_TOPOLOGY_SENTINEL, TRUE, 26379 },
  { "rediss-cluster", RL_TOPOLOGY_CLUSTER, TRUE, 6379 },
};

/* The query parameters each form accepts, and the names a redacted query may show. */
static const char *const single_params[] = { "db", "password", "username", NULL };
static const char *const sentinel_params[] = { "sentinel_password", "sentinel_username", NULL };
static const char *const no_params[] = { NULL };
/* The TLS parameters, accepted by the rediss forms (with the form's own). */
static const char *const tls_params[] = { "ca", "cert", "key", "sni", NULL };
static const char *const tls_single_params[]
    = { "ca", "cert", "db", "key", "password", "sni", "username", NULL };
static const char *const tls_sentinel_params[]
    = { "ca", "cert", "key", "sni", "sentinel_password", "sentinel_username", NULL };

/* The deployment form @url has, by its scheme (in any case), or NULL. */
static const DeploymentForm *
deployment_form (const char *url)
{
  const char *scheme = g_uri_peek_scheme (url); /* interned, lower case */

  if (scheme == NULL)
    return NULL;
  for (gsize i = 0; i < G_N_ELEMENTS (deployment_forms); i++)
    if (strcmp (scheme, deployment_forms[i].scheme) == 0)
      return &deployment_forms[i];
  return NULL;
}

/* Cuts a deployment URL as GUri would cut a redis:// URL: the authority runs from after
 * "://" to the first "/", "?" or "#", and its user info to its first "@" (a raw "@" in
 * a password leaves another one in the host list, which the callers refuse). @hosts is
 * the raw host list; @rest is the URL with a stand-in host in place of the list, parsed
 * by GUri, for the user info, path, query and fragment. NULL on success, else why the
 * URL does not parse (quoting nothing of it). */
static const char *
split_deployment_url (const char *url, const DeploymentForm *form, char **hosts, GUri **rest)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *userinfo = NULL;
  g_autofree char *stand_in = NULL;
  const char *authority;
  const char *at;
  gsize len, user_len;

  *hosts = NULL;
  *rest = NULL;
  if (!scheme_has_slashes (url, form->scheme))
    return form->kind == RL_TOPOLOGY_SENTINEL
               ? "not a valid absolute URL (expected redis-sentinel://HOST[:PORT][,HOST[:PORT]…]"
                 "#MASTER)"
               : "not a valid absolute URL (expected redis-cluster://HOST[:PORT][,HOST[:PORT]…])";
  authority = url + strlen (form->scheme) + 3;
  len = strcspn (authority, "/?#");
  at = memchr (authority, '@', len);
  user_len = at != NULL ? (gsize) (at - authority) + 1 : 0; /* with the "@" */
  userinfo = g_strndup (authority, user_len);
  stand_in = g_strconcat ("redis://", userinfo, "h", authority + len, NULL);
  *rest = g_uri_parse (stand_in, RL_URL_FLAGS, &error);
  if (*rest == NULL)
    return uri_error_reason (error);
  *hosts = g_strndup (authority + user_len, len - user_len);
  return NULL;
}

/* One host of a list ("host", "host:port" or "[IPv6]:port", never with "@", "/", "?" or
 * "#"), read by GUri as the host and port of a redis:// URL; NULL when GUri refuses it,
 * with @bad_port set when the port was what it refused. */
static GUri *
parse_host_item (const char *item, gboolean *bad_port)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *stand_in = g_strconcat ("redis://", item, NULL);
  GUri *uri = g_uri_parse (stand_in, RL_URL_FLAGS, &error);

  *bad_port = uri == NULL && g_error_matches (error, G_URI_ERROR, G_URI_ERROR_BAD_PORT);
  return uri;
}

/* One "&"-separated part of a query as shown in a message: only the database's value,
 * and only when it is a number; the names of @names (in any case, %-encoded or not);
 * nothing of any other part, whose name may be the tail of a password that held a raw
 * "&". */
static void
append_redacted_param (GString *out, const char *part, const char *const *names)
{
  g_autofree char *raw_name = g_strndup (part, strcspn (part, "="));
  g_autofree char *name = g_uri_unescape_string (raw_name, NULL);
  const char *value = part[strlen (raw_name)] == '=' ? part + strlen (raw_name) + 1 : NULL;
  gboolean known = FALSE;

  for (guint i = 0; name != NULL && names[i] != NULL; i++)
    known = known || g_ascii_strcasecmp (name, names[i]) == 0;
  if (!known || !is_plain (name, "_"))
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

/* The path of a URL as shown in a message: a socket path when plain; a database ("/N"),
 * when @is_db, only when it is a number. */
static void
append_redacted_path (GString *out, const char *path, gboolean is_db)
{
  if (*path == '\0')
    return;
  if (path[0] != '/')
    g_string_append (out, "***");
  else if (is_db ? strspn (path + 1, "0123456789") == strlen (path + 1)
                 : is_plain (path, RL_PLAIN_PATH))
    g_string_append (out, path);
  else
    g_string_append (out, "/***");
}

/* The (still encoded) query of a URL as shown in a message, "?" included. */
static void
append_redacted_query (GString *out, const char *query, const char *const *names)
{
  g_auto (GStrv) parts = NULL;

  if (query == NULL)
    return;
  parts = g_strsplit (query, "&", -1);
  g_string_append_c (out, '?');
  for (guint i = 0; parts[i] != NULL; i++)
    {
      if (i > 0)
        g_string_append_c (out, '&');
      if (*parts[i] != '\0')
        append_redacted_param (out, parts[i], names);
    }
}

/* A host as shown in a message: as given when plain, IPv6 in brackets, else "***". */
static void
append_redacted_host (GString *out, const char *host, int port)
{
  if (!is_plain (host, RL_PLAIN_HOST))
    g_string_append (out, "***");
  else if (strchr (host, ':') != NULL)
    g_string_append_printf (out, "[%s]", host);
  else
    g_string_append (out, host);
  if (port != -1)
    g_string_append_printf (out, ":%d", port);
}

/* Whether an "@" follows the non-empty authority of @url (which has "://" after
 * @scheme): the authority may then be the head of a user info that a raw "/", "?" or
 * "#" in a password cut short (`redis://s3cr3t#tail@host`), and its host a piece of the
 * password. */
static gboolean
at_after_authority (const char *url, const char *scheme)
{
  const char *authority = url + strlen (scheme) + 3;
  gsize len = strcspn (authority, "/?#");

  return len > 0 && strchr (authority + len, '@') != NULL;
}

/* A deployment URL as shown in a message, cut as the parser cuts it: the user info is
 * "***", each host is shown as for redis://, empty ones too (a URL with a host GUri
 * refuses shows nothing after the scheme, as a redis:// URL GUri refuses), and the
 * query shows the names of the form's parameters. The master name of a Sentinel URL is
 * not a secret and is shown when it is plain, unless the URL has a query: a password
 * given there with a raw "#" would end where the master name seems to begin. (A raw
 * "#" in the user info leaves the "@" that ends it after the authority, which makes the
 * whole URL "***": see at_after_authority().) */
static char *
redact_deployment_url (const char *url, const DeploymentForm *form)
{
  g_autofree char *hosts = NULL;
  g_autoptr (GUri) rest = NULL;
  g_auto (GStrv) items = NULL;
  const char *fragment;
  GString *out;

  if (!scheme_has_slashes (url, form->scheme))
    return g_strconcat (form->scheme, ":***", NULL);
  if (split_deployment_url (url, form, &hosts, &rest) != NULL || strchr (hosts, '@') != NULL
      || at_after_authority (url, form->scheme))
    return g_strconcat (form->scheme, "://***", NULL);

  out = g_string_new (form->scheme);
  g_string_append (out, "://");
  if (g_uri_get_userinfo (rest) != NULL)
    g_string_append (out, "***@");
  items = g_strsplit (hosts, ",", -1);
  for (guint i = 0; items[i] != NULL; i++)
    {
      g_autoptr (GUri) item = NULL;
      gboolean bad_port;

      if (i > 0)
        g_string_append_c (out, ',');
      if (*items[i] == '\0')
        continue;
      item = parse_host_item (items[i], &bad_port);
      if (item == NULL)
        {
          g_string_free (out, TRUE);
          return g_strconcat (form->scheme, "://***", NULL);
        }
      append_redacted_host (out, g_uri_get_host (item), g_uri_get_port (item));
    }
  append_redacted_path (out, g_uri_get_path (rest), TRUE);
  append_redacted_query (out, g_uri_get_query (rest),
                         form->kind == RL_TOPOLOGY_SENTINEL
                             ? (form->tls ? tls_sentinel_params : sentinel_params)
                             : (form->tls ? tls_params : no_params));
  fragment = g_uri_get_fragment (rest);
  if (fragment != NULL)
    {
      if (form->kind == RL_TOPOLOGY_SENTINEL && g_uri_get_query (rest) == NULL
          && is_plain (fragment, "._-"))
        g_string_append_printf (out, "#%s", fragment);
      else
        g_string_append (out, "#***");
    }
  return g_string_free (out, FALSE);
}

/* @url as shown in error messages, which end up in logs. Built from the parts known not
 * to hold a secret rather than by cutting the password out, so that a password with
 * raw "/", "?", "#", "@", "&" or ":" that moved the URL's split points cannot leak:
 * the whole user info is "***" (a lone user name may be a password too), a path shows
 * only a numeric db (but for unix://, where it is the socket's), a query shows only
 * parameter names it accepts and a numeric db, a fragment is "***" (but for
 * a Sentinel URL's plain master name), and a host or path with any character outside
 * a plain set is "***". A URL that does not parse shows its scheme only when it is one
 * of ours or is followed by "//" (a bare password with a ":" in it is not a scheme),
 * and nothing after it: which part a password would be in cannot be told; nor does a
 * URL with an "@" after its authority, which may be a user info cut short. */
static char *
redact_url (const char *url)
{
  g_autoptr (GUri) uri = NULL;
  const char *scheme = g_uri_peek_scheme (url); /* interned, lower case */
  const DeploymentForm *form = deployment_form (url);
  gboolean slashes;
  GString *out;
  const char *host;

  if (*url == '\0')
    return g_strdup ("");
  if (scheme == NULL)
    return g_strdup ("***");
  if (form != NULL)
    return redact_deployment_url (url, form);
  slashes = scheme_has_slashes (url, scheme);
  if (!slashes && g_strcmp0 (scheme, "redis") != 0 && g_strcmp0 (scheme, "rediss") != 0
      && g_strcmp0 (scheme, "unix") != 0 && g_strcmp0 (scheme, "memory") != 0)
    return g_strdup ("***");
  uri = g_uri_parse (url, RL_URL_FLAGS, NULL);
  if (uri == NULL || (slashes && at_after_authority (url, scheme)))
    return g_strconcat (scheme, slashes ? "://***" : ":***", NULL);

  out = g_string_new (scheme);
  g_string_append_c (out, ':');
  host = g_uri_get_host (uri);
  if (host != NULL)
    {
      g_string_append (out, "//");
      if (g_uri_get_userinfo (uri) != NULL)
        g_string_append (out, "***@");
      append_redacted_host (out, host, g_uri_get_port (uri));
    }
  append_redacted_path (out, g_uri_get_path (uri), strcmp (scheme, "unix") != 0);
  append_redacted_query (out, g_uri_get_query (uri),
                         strcmp (scheme, "rediss") == 0 ? tls_single_params : single_params);
  if (g_uri_get_fragment (uri) != NULL)
    g_string_append (out, "#***");
  return g_string_free (out, FALSE);
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

static GHashTable *parse_query (const char *query, const char *const *names, const char *url,
                                GError **error);
static gboolean apply_tls_params (GHashTable *params, RlConnConfig **configs, const char *url,
                                  GError **error);

/* The ?db=&password=&username= of a redis:// or rediss:// URL into @config, which holds
 * what the user info and the path gave: each may be given in one place only. */
static gboolean
apply_single_params (GHashTable *params, gboolean db_in_path, const char *url, RlConnConfig *config,
                     GError **error)
{
  const char *db = g_hash_table_lookup (params, "db");
  const char *password = g_hash_table_lookup (params, "password");
  const char *username = g_hash_table_lookup (params, "username");

  if (db != NULL && db_in_path)
    return invalid_url (error, url, "the database is given twice (in the path and as db=)");
  if (password != NULL && config->password != NULL)
    return invalid_url (error, url,
                        "the password is given twice (before the host and as password=)");
  if (username != NULL && config->username != NULL)
    return invalid_url (error, url,
                        "the user name is given twice (before the host and as username=)");
  if (db != NULL && !parse_db (db, &config->db, url, error))
    return FALSE;
  if (password != NULL)
    config->password = g_strdup (password);
  if (username != NULL && *username != '\0')
    config->username = g_strdup (username);
  return TRUE;
}

/* redis://[[user]:password@]host[:port][/db][?db=N&password=P&username=U], and rediss://
 * with ?ca=&cert=&key=&sni= too when @tls */
static gboolean
parse_tcp (GUri *uri, const char *url, gboolean tls, RlConnConfig *config, GError **error)
{
  const char *host = g_uri_get_host (uri);
  const char *path = g_uri_get_path (uri);
  int port = g_uri_get_port (uri);
  g_autoptr (GHashTable) params = NULL;

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
  /* A "#" in a password would end the URL's query there and cut the password short. */
  if (g_uri_get_fragment (uri) != NULL)
    return invalid_url (error, url,
                        tls ? "rediss:// URLs take no fragment (in a password, write “#” as %23)"
                            : "redis:// URLs take no fragment (in a password, write “#” as %23)");
  /* An "@" after the host may end a user info that a raw "/" or "?" in a password cut
   * short: its head was taken for the host. */
  if (at_after_authority (url, g_uri_get_scheme (uri)))
    return invalid_url (error, url,
                        "an “@” after the host (in a password, write “/”, “?”, “#” and “@” as "
                        "%2F, %3F, %23 and %40)");
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
  if (g_uri_get_query (uri) != NULL)
    {
      params = parse_query (g_uri_get_query (uri), tls ? tls_single_params : single_params, url,
                            error);
      if (params == NULL || !apply_single_params (params, *path != '\0', url, config, error))
        return FALSE;
    }
  if (tls)
    {
      RlConnConfig *configs[] = { config, NULL };
      return apply_tls_params (params, configs, url, error);
    }
  return TRUE;
}

/* The parameters of @query, %-decoded, by name; NULL with an INVALID error when the
 * query is not NAME=VALUE pairs, gives a name twice or a name not in @names. */
static GHashTable *
parse_query (const char *query, const char *const *names, const char *url, GError **error)
{
  g_autoptr (GHashTable) params = NULL;
  g_auto (GStrv) parts = split_params (query);
  GHashTableIter iter;
  gpointer key;

  params = g_uri_parse_params (query, -1, "&", G_URI_PARAMS_NONE, NULL);
  if (params == NULL)
    {
      invalid_url (error, url,
                   "the query is not NAME=VALUE pairs of valid %-encoded UTF-8 (in a "
                   "password, write “&”, “=”, “%” and “#” as %26, %3D, %25 and %23)");
      return NULL;
    }
  /* A parameter given twice would silently lose one value. */
  if (g_hash_table_size (params) != g_strv_length (parts))
    {
      invalid_url (error, url, "a parameter is given more than once");
      return NULL;
    }
  g_hash_table_iter_init (&iter, params);
  while (g_hash_table_iter_next (&iter, &key, NULL))
    {
      gboolean known = FALSE, other_case = FALSE;
      g_autofree char *accepted = NULL;
      g_autofree char *why = NULL;

      for (guint i = 0; names[i] != NULL; i++)
        {
          known = known || strcmp (key, names[i]) == 0;
          other_case = other_case || g_ascii_strcasecmp (key, names[i]) == 0;
        }
      if (known)
        continue;
      /* The name is quoted only when it is one of ours in another case: any other may be
       * the tail of a password with a raw "&". */
      accepted = g_strjoinv (", ", (GStrv) names);
      why = other_case ? g_strdup_printf ("unknown parameter “%s” (names are lower case)",
                                          (const char *) key)
                       : g_strdup_printf ("an unknown parameter (accepted: %s)", accepted);
      invalid_url (error, url, why);
      return NULL;
    }
  return g_steal_pointer (&params);
}

/* The TLS parameters of @params (ca, cert, key, sni) into every config of @configs (a
 * NULL-terminated array), with tls set. A file that cannot be read is INVALID; the
 * message names the parameter, not the path (which a misplaced password could reach). */
static gboolean
apply_tls_params (GHashTable *params, RlConnConfig **configs, const char *url, GError **error)
{
  static const char *const files[] = { "ca", "cert", "key" };
  const char *ca = params != NULL ? g_hash_table_lookup (params, "ca") : NULL;
  const char *cert = params != NULL ? g_hash_table_lookup (params, "cert") : NULL;
  const char *key = params != NULL ? g_hash_table_lookup (params, "key") : NULL;
  const char *sni = params != NULL ? g_hash_table_lookup (params, "sni") : NULL;

#ifndef RL_HAVE_GNUTLS
  return invalid_url (error, url,
                      "TLS (rediss) is not supported by this build: it was built without TLS");
#endif
  for (gsize i = 0; i < G_N_ELEMENTS (files); i++)
    {
      const char *path = params != NULL ? g_hash_table_lookup (params, files[i]) : NULL;
      if (path != NULL && (*path == '\0' || g_access (path, R_OK) != 0))
        {
          g_autofree char *why = g_strdup_printf ("the file named by %s= cannot be read (%s)",
                                                  files[i],
                                                  *path == '\0' ? "empty name" : g_strerror (errno));
          return invalid_url (error, url, why);
        }
    }
  if ((cert == NULL) != (key == NULL))
    return invalid_url (error, url, "a client certificate needs both cert= and key=");
  if (sni != NULL && (*sni == '\0' || !is_plain (sni, ".-_")))
    return invalid_url (error, url, "sni= is not a host name");
  for (guint i = 0; configs[i] != NULL; i++)
    {
      configs[i]->tls = TRUE;
      configs[i]->tls_ca = g_strdup (ca);
      configs[i]->tls_cert = g_strdup (cert);
      configs[i]->tls_key = g_strdup (key);
      configs[i]->tls_sni = g_strdup (sni);
    }
  return TRUE;
}

/* Every config of a deployment (@parsed's node and hosts), for apply_tls_params(). */
static RlConnConfig **
deployment_configs (RlUrl *parsed)
{
  RlConnConfig **configs = g_new0 (RlConnConfig *, parsed->hosts->len + 2);

  configs[0] = &parsed->node;
  for (guint i = 0; i < parsed->hosts->len; i++)
    configs[i + 1] = &g_array_index (parsed->hosts, RlConnConfig, i);
  return configs;
}

/* The ?db=&password=&username= of a unix:// URL. */
static gboolean
parse_unix_params (const char *query, const char *url, RlConnConfig *config, GError **error)
{
  g_autoptr (GHashTable) params = parse_query (query, single_params, url, error);
  const char *value;

  if (params == NULL)
    return FALSE;
  value = g_hash_table_lookup (params, "db");
  if (value != NULL && !parse_db (value, &config->db, url, error))
    return FALSE;
  config->password = g_strdup (g_hash_table_lookup (params, "password"));
  config->username = g_strdup (g_hash_table_lookup (params, "username"));
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

/* "the host" when @n is 1, else "the 2nd host": the place of a host in a list, named in
 * messages instead of the host itself, which may be a piece of a password. */
static char *
host_position (guint i, guint n)
{
  guint k = i + 1;
  const char *suffix = k % 100 >= 11 && k % 100 <= 13 ? "th"
                       : k % 10 == 1                  ? "st"
                       : k % 10 == 2                  ? "nd"
                       : k % 10 == 3                  ? "rd"
                                                      : "th";

  return n == 1 ? g_strdup ("the host") : g_strdup_printf ("the %u%s host", k, suffix);
}

/* Reads the "host[:port]" items of @hosts, separated by ",", into @out (RlConnConfig, in
 * the order given; @default_port when an item has no port); FALSE with an INVALID error
 * naming the place of the first bad item. */
static gboolean
parse_host_list (const char *hosts, int default_port, const char *url, GArray *out, GError **error)
{
  g_auto (GStrv) items = NULL;
  guint n;

  if (*hosts == '\0')
    return invalid_url (error, url, "no host");
  /* The user info ends at the first "@": the rest of a password with a raw "@" would be
   * taken for hosts. */
  if (strchr (hosts, '@') != NULL)
    return invalid_url (error, url, "the host contains “@” (in a password, write “@” as %40)");
  items = g_strsplit (hosts, ",", -1);
  n = g_strv_length (items);
  for (guint i = 0; i < n; i++)
    {
      g_autofree char *where = host_position (i, n);
      g_autofree char *why = NULL;
      g_autoptr (GUri) item = NULL;
      RlConnConfig config = { 0 };
      const char *host;
      gboolean bad_port = FALSE;

      if (*items[i] != '\0')
        item = parse_host_item (items[i], &bad_port);
      host = item != NULL ? g_uri_get_host (item) : NULL;
      if (*items[i] == '\0' || (item != NULL && (host == NULL || *host == '\0')))
        why = n == 1 ? g_strdup ("no host") : g_strdup_printf ("%s is empty", where);
      else if (bad_port || (item != NULL && g_uri_get_port (item) == 0))
        why = g_strdup_printf ("the port of %s is not a number from 1 to 65535 (in a password, "
                               "write “/”, “?”, “#” and “@” as %%2F, %%3F, %%23 and %%40)",
                               where);
      else if (item == NULL)
        why = g_strdup_printf ("%s is not valid (a host name, or an IPv6 address in brackets)",
                               where);
      else
        for (const char *h = host; *h != '\0' && why == NULL; h++)
          if (g_ascii_isspace (*h) || g_ascii_iscntrl (*h))
            why = g_strdup_printf ("%s contains white space or control characters", where);
      if (why != NULL)
        return invalid_url (error, url, why);
      config.host = g_strdup (host);
      config.port = g_uri_get_port (item) > 0 ? g_uri_get_port (item) : default_port;
      g_array_append_val (out, config);
    }
  return TRUE;
}

/* The hosts of a Sentinel URL connect with the sentinel_username and sentinel_password
 * of its query; the data nodes with the user info; the master name is the fragment. */
static gboolean
parse_sentinel_parts (GUri *rest, const char *url, gboolean tls, RlUrl *parsed, GError **error)
{
  const char *query = g_uri_get_query (rest);
  const char *master = g_uri_get_fragment (rest);
  g_autoptr (GHashTable) params = NULL;
  const char *username = NULL;
  const char *password = NULL;

  if (query != NULL)
    {
      params = parse_query (query, tls ? tls_sentinel_params : sentinel_params, url, error);
      if (params == NULL)
        return FALSE;
      username = g_hash_table_lookup (params, "sentinel_username");
      password = g_hash_table_lookup (params, "sentinel_password");
    }
  if (master == NULL || *master == '\0')
    return invalid_url (error, url,
                        "no master name (a redis-sentinel:// URL ends with #MASTER_NAME, after "
                        "the query if any)");
  for (const char *m = master; *m != '\0'; m++)
    if (g_ascii_iscntrl (*m))
      return invalid_url (error, url, "the master name contains control characters");
  for (guint i = 0; i < parsed->hosts->len; i++)
    {
      RlConnConfig *sentinel = &g_array_index (parsed->hosts, RlConnConfig, i);

      sentinel->username = username != NULL && *username != '\0' ? g_strdup (username) : NULL;
      sentinel->password = g_strdup (password);
    }
  parsed->master_name = g_strdup (master);
  if (tls)
    {
      g_autofree RlConnConfig **configs = deployment_configs (parsed);
      return apply_tls_params (params, configs, url, error);
    }
  return TRUE;
}

/* A Cluster URL has no query and no fragment, and only database 0; its seeds connect
 * with the credentials of the data nodes. */
static gboolean
parse_cluster_parts (GUri *rest, const char *url, gboolean tls, RlUrl *parsed, GError **error)
{
  g_autoptr (GHashTable) params = NULL;

  if ((!tls && g_uri_get_query (rest) != NULL) || g_uri_get_fragment (rest) != NULL)
    return invalid_url (error, url,
                        tls ? "rediss-cluster:// URLs take no fragment (in a password, write "
                              "“#” as %23)"
                            : "redis-cluster:// URLs take no query or fragment (in a password, "
                              "write “?” and “#” as %3F and %23)");
  if (tls && g_uri_get_query (rest) != NULL)
    {
      params = parse_query (g_uri_get_query (rest), tls_params, url, error);
      if (params == NULL)
        return FALSE;
    }
  if (parsed->node.db != 0)
    return invalid_url (error, url, "a Redis Cluster has only database 0");
  for (guint i = 0; i < parsed->hosts->len; i++)
    {
      RlConnConfig *seed = &g_array_index (parsed->hosts, RlConnConfig, i);

      seed->username = g_strdup (parsed->node.username);
      seed->password = g_strdup (parsed->node.password);
    }
  if (tls)
    {
      g_autofree RlConnConfig **configs = deployment_configs (parsed);
      return apply_tls_params (params, configs, url, error);
    }
  return TRUE;
}

/* An empty array of RlConnConfig that clears its elements. */
static GArray *
new_host_array (void)
{
  GArray *hosts = g_array_new (FALSE, TRUE, sizeof (RlConnConfig));

  g_array_set_clear_func (hosts, (GDestroyNotify) rl_conn_config_clear);
  return hosts;
}

/* redis-sentinel://[[user]:password@]host[:port][,host[:port]…][/db][?query]#master
 * redis-cluster://[[user]:password@]host[:port][,host[:port]…][/0] */
static gboolean
parse_deployment (const char *url, const DeploymentForm *form, RlUrl *parsed, GError **error)
{
  g_autofree char *hosts = NULL;
  g_autoptr (GUri) rest = NULL;
  const char *why;
  const char *path;
  const char *user;

  why = split_deployment_url (url, form, &hosts, &rest);
  if (why != NULL)
    return invalid_url (error, url, why);
  parsed->kind = form->kind;
  parsed->hosts = new_host_array ();
  if (!parse_host_list (hosts, form->default_port, url, parsed->hosts, error))
    return FALSE;
  path = g_uri_get_path (rest);
  if (path[0] == '/')
    path++;
  if (*path != '\0' && !parse_db (path, &parsed->node.db, url, error))
    return FALSE;
  user = g_uri_get_user (rest);
  if (user != NULL && *user != '\0')
    parsed->node.username = g_strdup (user);
  parsed->node.password = g_strdup (g_uri_get_password (rest));
  return form->kind == RL_TOPOLOGY_SENTINEL
             ? parse_sentinel_parts (rest, url, form->tls, parsed, error)
             : parse_cluster_parts (rest, url, form->tls, parsed, error);
}

/* redis:// or unix:// into @config; @expected lists the schemes the caller takes, for
 * the message about any other. */
static gboolean
parse_single (const char *url, const char *expected, RlConnConfig *config, GError **error)
{
  g_autoptr (GUri) uri = NULL;
  g_autoptr (GError) local_error = NULL;
  const DeploymentForm *form = deployment_form (url);
  const char *scheme;
  gboolean ok;

  memset (config, 0, sizeof *config);
  if (form != NULL)
    {
      g_autofree char *why
          = g_strdup_printf ("a %s:// URL names a deployment, not one server", form->scheme);
      return invalid_url (error, url, why);
    }
  uri = g_uri_parse (url, RL_URL_FLAGS, &local_error);
  if (uri == NULL)
    return invalid_url (error, url, uri_error_reason (local_error));

  scheme = g_uri_get_scheme (uri);
  if (g_ascii_strcasecmp (scheme, "redis") == 0 || g_ascii_strcasecmp (scheme, "rediss") == 0)
    ok = parse_tcp (uri, url, g_ascii_strcasecmp (scheme, "rediss") == 0, config, error);
  else if (g_ascii_strcasecmp (scheme, "unix") == 0)
    ok = parse_unix (uri, url, config, error);
  else
    {
      /* The scheme is named when it is one, in front of "//": a bare password with a
       * ":" in it would look like a scheme too. */
      g_autofree char *why
          = scheme_has_slashes (url, scheme) && strlen (scheme) <= 32
                ? g_strdup_printf ("unsupported scheme “%s” (expected %s)", scheme, expected)
                : g_strdup_printf ("not a %s URL", expected);
      return invalid_url (error, url, why);
    }
  if (!ok)
    rl_conn_config_clear (config);
  return ok;
}

/* The forms named in the message about an unknown scheme: those this build serves. */
#ifdef RL_HAVE_GNUTLS
#define RL_SINGLE_FORMS "redis://, rediss:// or unix://"
#define RL_ALL_FORMS                                                                               \
  "redis://, rediss://, unix://, redis-sentinel://, rediss-sentinel://, redis-cluster://, "        \
  "rediss-cluster:// or memory://"
#else
#define RL_SINGLE_FORMS "redis:// or unix://"
#define RL_ALL_FORMS "redis://, unix://, redis-sentinel://, redis-cluster:// or memory://"
#endif

gboolean
rl_conn_config_parse (const char *url, RlConnConfig *config, GError **error)
{
  return parse_single (url, RL_SINGLE_FORMS, config, error);
}

gboolean
rl_url_parse (const char *url, RlUrl *parsed, GError **error)
{
  const DeploymentForm *form = deployment_form (url);

  memset (parsed, 0, sizeof *parsed);
  if (form == NULL)
    {
      if (!parse_single (url, RL_ALL_FORMS, &parsed->node, error))
        return FALSE;
      parsed->kind = RL_TOPOLOGY_SINGLE;
      parsed->hosts = new_host_array ();
      return TRUE;
    }
  if (!parse_deployment (url, form, parsed, error))
    {
      rl_url_clear (parsed);
      return FALSE;
    }
  return TRUE;
}

void
rl_url_clear (RlUrl *parsed)
{
  rl_conn_config_clear (&parsed->node);
  g_clear_pointer (&parsed->hosts, g_array_unref);
  g_clear_pointer (&parsed->master_name, g_free);
  memset (parsed, 0, sizeof *parsed);
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
  if (!is_plain (config->host, RL_PLAIN_HOST))
    return g_strdup_printf ("the host of the URL, port %d", config->port);
  /* An IPv6 address in brackets, as in a URL: "[::1]:6379". */
  return strchr (config->host, ':') != NULL
             ? g_strdup_printf ("[%s]:%d", config->host, config->port)
             : g_strdup_printf ("%s:%d", config->host, config->port);
}
