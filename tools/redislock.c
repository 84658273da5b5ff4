/* redislock: the command-line tool, a flock(1) whose locks live in Redis.
 *
 * `redislock run NAME -- COMMAND` takes the lock NAME through libredislock (the
 * registry's watchdog keeps renewing the lease), runs COMMAND as a child process, a job
 * of its own (its own process group, given the terminal while redislock has it, with
 * signals forwarded to it), releases the lock when it ends and exits with its status;
 * if the lease is lost while the command runs, the command is terminated, SIGKILL coming
 * before the key can expire. `status` and `list` show who holds which lock, talking to
 * Redis directly with read-only commands (GET, PTTL, SCAN). `demo` runs a flash sale:
 * processes x threads buying from a stock kept in Redis with a non-atomic
 * read-modify-write, made correct by the lock. Every message is printed with the
 * passwords of the Redis URL hidden, and values read from Redis escaped. The manual is
 * redislock.1.
 */
#include "config.h"

#include <redislock/redislock.h>
#include <redislock/redislock-test.h>

#include <errno.h>
#include <fcntl.h>
#include <glib-unix.h>
#include <gio/gio.h>
#include <hiredis/hiredis.h>
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Exit statuses of redislock itself (run passes the command's status through). */
enum
{
  EXIT_NOT_ACQUIRED = 1,
  EXIT_REDIS = 2,
  EXIT_LEASE_LOST = 3,
  EXIT_USAGE = 64, /* EX_USAGE */
  EXIT_CANNOT_EXEC = 126,
  EXIT_NOT_FOUND = 127,
};

#define DEFAULT_URL "redis://127.0.0.1:6379"
#define DEFAULT_REGISTRY "redislock"
#define DEFAULT_TTL_MS 60000
#define DEFAULT_KILL_AFTER_MS 5000
#define MAX_DURATION_MS ((gint64) 1000 * 1000 * 1000 * 1000) /* about 31 years */
#define REDIS_TIMEOUT_MS 5000
#define DEMO_WORKER_MODE "__demo-worker"

/* ------------------------------------------------------------------------------------ */
/* Small helpers                                                                         */

static char *redact_text (const char *text);

/* Prints "redislock: MESSAGE" on stderr, with any password of the Redis URL hidden. */
static void G_GNUC_PRINTF (1, 2)
die_message (const char *format, ...)
{
  va_list ap;
  g_autofree char *msg = NULL;
  g_autofree char *shown = NULL;

  va_start (ap, format);
  msg = g_strdup_vprintf (format, ap);
  va_end (ap);
  shown = redact_text (msg);
  fprintf (stderr, "redislock: %s\n", shown);
}

/* Prints a usage error for subcommand @cmd (NULL: top level) and returns EXIT_USAGE. */
static int G_GNUC_PRINTF (3, 4)
usage_error (const char *cmd, const char *usage, const char *format, ...)
{
  va_list ap;
  g_autofree char *msg = NULL;
  g_autofree char *shown = NULL;

  va_start (ap, format);
  msg = g_strdup_vprintf (format, ap);
  va_end (ap);
  shown = redact_text (msg);
  fprintf (stderr, "redislock%s%s: %s\n", cmd ? " " : "", cmd ? cmd : "", shown);
  fprintf (stderr, "Usage: redislock %s\n", usage);
  fprintf (stderr, "Try 'redislock %s%s--help' for more information.\n", cmd ? cmd : "",
           cmd ? " " : "");
  return EXIT_USAGE;
}

static gint64
monotonic_ns (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (gint64) ts.tv_sec * G_GINT64_CONSTANT (1000000000) + ts.tv_nsec;
}

/* Parses a duration: a non-negative decimal number followed by an optional unit, ms, s,
 * m or h; without a unit the number is seconds (as for flock -w, sleep, timeout). The
 * result is rounded to whole milliseconds. */
static gboolean
parse_duration (const char *text, gint64 *out_ms)
{
  const char *p = text;
  const char *unit;
  gboolean digits = FALSE, dot = FALSE;
  double value, factor;
  g_autofree char *number = NULL;

  if (text == NULL)
    return FALSE;
  for (; *p; p++)
    {
      if (g_ascii_isdigit (*p))
        digits = TRUE;
      else if (*p == '.' && !dot)
        dot = TRUE;
      else
        break;
    }
  if (!digits)
    return FALSE;
  unit = p;
  if (*unit == '\0' || strcmp (unit, "s") == 0)
    factor = 1000.0;
  else if (strcmp (unit, "ms") == 0)
    factor = 1.0;
  else if (strcmp (unit, "m") == 0)
    factor = 60000.0;
  else if (strcmp (unit, "h") == 0)
    factor = 3600000.0;
  else
    return FALSE;
  number = g_strndup (text, (gsize) (unit - text));
  value = g_ascii_strtod (number, NULL) * factor;
  if (!isfinite (value) || value > (double) MAX_DURATION_MS)
    return FALSE;
  *out_ms = (gint64) llround (value);
  return TRUE;
}

/* "500ms", "10s", "1.5s", "2m", "1h": the shortest exact-enough spelling. */
static char *
format_duration (gint64 ms)
{
  if (ms < 1000)
    return g_strdup_printf ("%" G_GINT64_FORMAT "ms", ms);
  if (ms % 3600000 == 0)
    return g_strdup_printf ("%" G_GINT64_FORMAT "h", ms / 3600000);
  if (ms % 60000 == 0)
    return g_strdup_printf ("%" G_GINT64_FORMAT "m", ms / 60000);
  if (ms % 1000 == 0)
    return g_strdup_printf ("%" G_GINT64_FORMAT "s", ms / 1000);
  return g_strdup_printf ("%.3gs", (double) ms / 1000.0);
}

/* A name or owner for a terminal: printable UTF-8 as is, anything else escaped. */
static char *
escape_for_display (const char *s)
{
  GString *out = g_string_new (NULL);
  const char *p = s;

  while (*p)
    {
      gunichar c = g_utf8_get_char_validated (p, -1);

      if (c == (gunichar) -1 || c == (gunichar) -2)
        {
          g_string_append_printf (out, "\\x%02x", (guchar) *p);
          p++;
          continue;
        }
      if (c == '\\')
        g_string_append (out, "\\\\");
      else if (c < 0x20 || c == 0x7f || !g_unichar_isprint (c))
        g_string_append_printf (out, c < 0x100 ? "\\x%02x" : "\\u%04x", c);
      else
        g_string_append_len (out, p, g_utf8_next_char (p) - p);
      p = g_utf8_next_char (p);
    }
  return g_string_free (out, FALSE);
}

/* Appends @s as a JSON string; bytes that are not UTF-8 become U+FFFD. */
static void
json_append_string (GString *out, const char *s)
{
  const char *p = s;

  if (s == NULL)
    {
      g_string_append (out, "null");
      return;
    }
  g_string_append_c (out, '"');
  while (*p)
    {
      gunichar c = g_utf8_get_char_validated (p, -1);

      if (c == (gunichar) -1 || c == (gunichar) -2)
        {
          g_string_append (out, "\\ufffd");
          p++;
          continue;
        }
      switch (c)
        {
        case '"':
          g_string_append (out, "\\\"");
          break;
        case '\\':
          g_string_append (out, "\\\\");
          break;
        case '\n':
          g_string_append (out, "\\n");
          break;
        case '\t':
          g_string_append (out, "\\t");
          break;
        case '\r':
          g_string_append (out, "\\r");
          break;
        default:
          if (c < 0x20 || c == 0x7f)
            g_string_append_printf (out, "\\u%04x", c);
          else
            g_string_append_len (out, p, g_utf8_next_char (p) - p);
        }
      p = g_utf8_next_char (p);
    }
  g_string_append_c (out, '"');
}

static gboolean
write_all (int fd, const void *buf, gsize len)
{
  const char *p = buf;

  while (len > 0)
    {
      ssize_t n = write (fd, p, len);

      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        return FALSE;
      p += n;
      len -= (gsize) n;
    }
  return TRUE;
}

/* Reads up to @len bytes, fewer only at end of file. */
static gssize
read_all (int fd, void *buf, gsize len)
{
  char *p = buf;
  gsize got = 0;

  while (got < len)
    {
      ssize_t n = read (fd, p + got, len - got);

      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0)
        return -1;
      if (n == 0)
        break;
      got += (gsize) n;
    }
  return (gssize) got;
}

/* ------------------------------------------------------------------------------------ */
/* Options shared by the subcommands                                                     */

static char *opt_url;
static char *opt_registry;
static gboolean opt_json;

static const char *
effective_url (void)
{
  const char *env;

  if (opt_url != NULL)
    return opt_url;
  env = g_getenv ("REDIS_URL");
  if (env != NULL && *env != '\0')
    return env;
  return DEFAULT_URL;
}

static const char *
effective_registry (void)
{
  return opt_registry != NULL ? opt_registry : DEFAULT_REGISTRY;
}

/* ------------------------------------------------------------------------------------ */
/* Passwords kept out of every message                                                   */

typedef struct
{
  gsize start, end; /* [start, end) */
} Span;

/* Where the secrets of a Redis URL are, as byte ranges of @url: the password of the user
 * info (all of the user info when it has no colon: some clients take a lone user as the
 * password), and the value of every query parameter but db and username, whatever the
 * case or percent-encoding of its name (a parameter without a value is covered whole).
 * Read generously, so that a malformed URL, one without a scheme, or a password with
 * unencoded / ? # @ & in it is still covered: the user info runs from after "://" (or the
 * start) to the last @, a parameter to the next &. Ascending, not overlapping. */
static GArray *
url_secret_spans (const char *url)
{
  GArray *spans = g_array_new (FALSE, FALSE, sizeof (Span));
  const char *scheme_end = strstr (url, "://");
  gsize len = strlen (url);
  gsize auth = scheme_end != NULL ? (gsize) (scheme_end - url) + 3
               : g_str_has_prefix (url, "//") ? 2
                                              : 0;
  gsize query_from = auth;
  const char *at = strrchr (url + auth, '@');
  const char *q;

  if (at != NULL && url[auth] != '/')
    {
      gsize at_pos = (gsize) (at - url);
      const char *colon = memchr (url + auth, ':', at_pos - auth);
      Span span = { colon != NULL ? (gsize) (colon - url) + 1 : auth, at_pos };

      if (span.end > span.start)
        g_array_append_val (spans, span);
      query_from = at_pos + 1;
    }
  q = strchr (url + query_from, '?');
  if (q != NULL)
    {
      gsize p = (gsize) (q - url) + 1;

      while (p <= len)
        {
          gsize e = p + strcspn (url + p, "&");
          const char *eq = memchr (url + p, '=', e - p);
          Span span = { p, e };

          if (eq != NULL)
            {
              g_autofree char *raw = g_strndup (url + p, (gsize) (eq - url) - p);
              g_autofree char *name = g_uri_unescape_string (raw, NULL);
              g_autofree char *folded = g_ascii_strdown (name != NULL ? name : raw, -1);

              span.start = (gsize) (eq - url) + 1;
              if (strcmp (folded, "db") == 0 || strcmp (folded, "username") == 0)
                span.end = span.start;
            }
          if (span.end > span.start)
            g_array_append_val (spans, span);
          p = e + 1;
        }
    }
  return spans;
}

/* @url with its secrets (see url_secret_spans()) replaced by "***". */
static char *
redact_url (const char *url)
{
  g_autoptr (GArray) spans = url_secret_spans (url);
  GString *out = g_string_new (NULL);
  gsize from = 0;
  guint i;

  for (i = 0; i < spans->len; i++)
    {
      const Span *span = &g_array_index (spans, Span, i);

      g_string_append_len (out, url + from, (gssize) (span->start - from));
      g_string_append (out, "***");
      from = span->end;
    }
  g_string_append (out, url + from);
  return g_string_free (out, FALSE);
}

/* A text secrets are looked for in: a URL with its secret spans, or a secret alone
 * (@spans NULL: all of it is secret). */
typedef struct
{
  const char *text;
  gsize len;
  GArray *spans;
} SecretSource;

static gboolean
overlaps_secret (const SecretSource *src, gsize start, gsize end)
{
  guint i;

  if (src->spans == NULL)
    return end > start;
  for (i = 0; i < src->spans->len; i++)
    {
      const Span *span = &g_array_index (src->spans, Span, i);

      if (span->start < end && start < span->end)
        return TRUE;
    }
  return FALSE;
}

static gboolean
in_secret (const SecretSource *src, gsize pos)
{
  return overlaps_secret (src, pos, pos + 1);
}

/* The length of the longest prefix of @s (@n bytes) that occurs in @src overlapping a
 * secret of it, and where it occurs (@at). */
static gsize
longest_secret_match (const char *s, gsize n, const SecretSource *src, gsize *at)
{
  gsize best = 0, j;

  for (j = 0; j < src->len; j++)
    {
      gsize k = 0;

      while (k < n && j + k < src->len && s[k] == src->text[j + k])
        k++;
      if (k > best && overlaps_secret (src, j, j + k))
        {
          best = k;
          *at = j;
        }
    }
  return best;
}

static gboolean
is_utf8_continuation (char c)
{
  return ((guchar) c & 0xc0) == 0x80;
}

/* Whether @text[0..@i) ends with an opening quote, and @text + @j starts with a closing
 * one (ASCII quotes, or the typographic ones GLib and libredislock use). */
static gboolean
is_quoted (const char *text, gsize i, gsize j)
{
  static const char *const opening[] = { "'", "\"", "`", "\u2018", "\u201c", "\u00ab" };
  static const char *const closing[] = { "'", "\"", "`", "\u2019", "\u201d", "\u00bb" };
  gboolean open = FALSE, close = FALSE;
  gsize k;

  for (k = 0; k < G_N_ELEMENTS (opening); k++)
    {
      gsize l = strlen (opening[k]);

      if (i >= l && memcmp (text + i - l, opening[k], l) == 0)
        open = TRUE;
      if (strncmp (text + j, closing[k], strlen (closing[k])) == 0)
        close = TRUE;
    }
  return open && close;
}

/* Secret fragments shorter than this are hidden only when quoted or a whole secret, so
 * that a password sharing a few letters with a word does not blot out the message. */
#define MIN_SECRET_FRAGMENT 4

/* @text with every secret of the Redis URLs the tool may use (--url, $REDIS_URL) hidden:
 * each URL itself is shown redacted (redact_url()), and any other piece of text that comes
 * from a secret, whole or in part, raw or percent-decoded, becomes "***". A URL parser
 * that splits a malformed URL elsewhere than url_secret_spans() does (a password with an
 * unencoded '/' read as a port, say) still cannot leak it: the fragments it quotes are
 * hidden too. */
static char *
redact_text (const char *text)
{
  const char *urls[] = { opt_url, g_getenv ("REDIS_URL") };
  g_autoptr (GPtrArray) owned = g_ptr_array_new_with_free_func (g_free);
  g_autoptr (GArray) sources = g_array_new (FALSE, FALSE, sizeof (SecretSource));
  g_autoptr (GPtrArray) span_sets = g_ptr_array_new_with_free_func ((GDestroyNotify) g_array_unref);
  GString *out;
  char *work = g_strdup (text);
  gsize i, n;
  guint u, k;

  for (u = 0; u < G_N_ELEMENTS (urls); u++)
    {
      const char *url = urls[u];
      GArray *spans;

      if (url == NULL || *url == '\0')
        continue;
      spans = url_secret_spans (url);
      g_ptr_array_add (span_sets, spans);
      if (spans->len == 0)
        continue;
      /* the URL itself, redacted */
      {
        g_autofree char *shown = redact_url (url);
        g_auto (GStrv) parts = g_strsplit (work, url, -1);

        g_free (work);
        work = g_strjoinv (shown, parts);
      }
      {
        SecretSource src = { url, strlen (url), spans };

        g_array_append_val (sources, src);
      }
      for (k = 0; k < spans->len; k++)
        {
          const Span *span = &g_array_index (spans, Span, k);
          char *raw = g_strndup (url + span->start, span->end - span->start);
          char *decoded = g_uri_unescape_string (raw, NULL);
          SecretSource src = { raw, strlen (raw), NULL };

          g_ptr_array_add (owned, raw);
          g_array_append_val (sources, src);
          if (decoded != NULL && strcmp (decoded, raw) != 0 && *decoded != '\0')
            {
              SecretSource dsrc = { decoded, strlen (decoded), NULL };

              g_ptr_array_add (owned, decoded);
              g_array_append_val (sources, dsrc);
            }
          else
            g_free (decoded);
        }
    }
  if (sources->len == 0)
    return work;

  out = g_string_new (NULL);
  n = strlen (work);
  for (i = 0; i < n;)
    {
      const SecretSource *best_src = NULL;
      gsize best = 0, best_at = 0, b;
      gboolean whole = FALSE;

      if (!is_utf8_continuation (work[i]))
        for (k = 0; k < sources->len; k++)
          {
            const SecretSource *src = &g_array_index (sources, SecretSource, k);
            gsize at = 0;
            gsize m = longest_secret_match (work + i, n - i, src, &at);

            if (m > best || (m == best && m > 0 && src->spans == NULL && m == src->len))
              {
                best = m;
                best_src = src;
                best_at = at;
                whole = src->spans == NULL && m == src->len;
              }
          }
      while (best > 0 && i + best < n && is_utf8_continuation (work[i + best]))
        best--;
      if (best == 0
          || !(best >= MIN_SECRET_FRAGMENT || whole || is_quoted (work, i, i + best)))
        {
          g_string_append_c (out, work[i++]);
          continue;
        }
      /* the piece of a URL that matched: its secret bytes hidden, the rest shown */
      for (b = 0; b < best; b++)
        {
          gboolean secret = best_src->spans == NULL || in_secret (best_src, best_at + b);

          if (!secret)
            g_string_append_c (out, work[i + b]);
          else if (b == 0 || !(best_src->spans == NULL || in_secret (best_src, best_at + b - 1)))
            g_string_append (out, "***");
        }
      i += best;
    }
  g_free (work);
  return g_string_free (out, FALSE);
}

/* GLib's log writer, with the library's messages redacted like the tool's own. */
static GLogWriterOutput
redacting_log_writer (GLogLevelFlags level, const GLogField *fields, gsize n_fields,
                      gpointer user_data)
{
  g_autofree GLogField *copy = g_memdup2 (fields, n_fields * sizeof *fields);
  g_autofree char *shown = NULL;
  gsize i;

  for (i = 0; i < n_fields; i++)
    if (shown == NULL && strcmp (copy[i].key, "MESSAGE") == 0 && copy[i].value != NULL)
      {
        g_autofree char *message = copy[i].length < 0
                                     ? g_strdup (copy[i].value)
                                     : g_strndup (copy[i].value, (gsize) copy[i].length);

        shown = redact_text (message);
        copy[i].value = shown;
        copy[i].length = -1;
      }
  return g_log_writer_default (level, copy, n_fields, user_data);
}

static const GOptionEntry common_entries[] = {
  { "url", 'u', 0, G_OPTION_ARG_STRING, &opt_url,
    "Redis server (default: $REDIS_URL, else " DEFAULT_URL ")", "URL" },
  { "registry", 'r', 0, G_OPTION_ARG_STRING, &opt_registry,
    "Registry key: lock NAME is the Redis key KEY:NAME (default: " DEFAULT_REGISTRY ")",
    "KEY" },
  { NULL },
};

static const char url_help[] =
  "URL forms:\n"
  "  redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]\n"
  "  unix:///PATH/TO/SOCKET[?db=N&password=P&username=U]\n"
  "\n";
static const char duration_help[] =
  "Durations: a number with a unit, 500ms, 10s, 2m, 1h; a plain number is seconds\n"
  "(1.5 = 1500ms).\n"
  "\n";
static const char see_also_help[] = "See redislock(1) for details and examples.";

/* Parses the options of a subcommand. Returns -1 to go on, else an exit status. */
static int
parse_options (const char *cmd, const char *usage, const char *params, const char *summary,
               const GOptionEntry *entries, gboolean with_common, gboolean strict_posix,
               int *argc, char ***argv)
{
  g_autoptr (GOptionContext) context = g_option_context_new (params);
  g_autoptr (GError) error = NULL;
  g_autofree char *prgname = g_strdup_printf ("redislock %s", cmd);
  g_autofree char *description = g_strconcat (url_help,
                                              strcmp (cmd, "run") == 0 ? duration_help : "",
                                              see_also_help, NULL);

  g_set_prgname (prgname);
  g_option_context_set_summary (context, summary);
  g_option_context_set_description (context, description);
  if (with_common)
    g_option_context_add_main_entries (context, common_entries, NULL);
  if (entries != NULL)
    g_option_context_add_main_entries (context, entries, NULL);
  g_option_context_set_strict_posix (context, strict_posix);
  if (!g_option_context_parse (context, argc, argv, &error))
    return usage_error (cmd, usage, "%s", error->message);
  if (opt_registry != NULL && *opt_registry == '\0')
    return usage_error (cmd, usage, "the registry key must not be empty");
  if (opt_url != NULL && *opt_url == '\0')
    return usage_error (cmd, usage, "the URL must not be empty");
  return -1;
}

/* ------------------------------------------------------------------------------------ */
/* A direct Redis connection, for status, list and demo                                  */

typedef struct
{
  char *host; /* NULL for a Unix socket */
  int port;
  char *path; /* Unix socket path */
  int db;
  char *username;
  char *password;
} RedisAddress;

static void
redis_address_clear (RedisAddress *a)
{
  g_clear_pointer (&a->host, g_free);
  g_clear_pointer (&a->path, g_free);
  g_clear_pointer (&a->username, g_free);
  g_clear_pointer (&a->password, g_free);
}

static gboolean
parse_db (const char *text, int *db)
{
  gint64 v;

  if (text == NULL || *text == '\0' || !g_ascii_isdigit (*text))
    return FALSE;
  if (!g_ascii_string_to_signed (text, 10, 0, G_MAXINT, &v, NULL))
    return FALSE;
  *db = (int) v;
  return TRUE;
}

/* Parses the URL forms libredislock accepts (see redis_lock_registry_new()); the error
 * says why not, without naming the URL (GLib's reasons may quote pieces of it). */
static gboolean
parse_redis_url_parts (const char *url, RedisAddress *out, GError **error)
{
  g_autoptr (GUri) uri = NULL;
  g_autoptr (GError) uri_error = NULL;
  const char *scheme, *user, *password, *path, *query;

  memset (out, 0, sizeof *out);
  uri = g_uri_parse (url, G_URI_FLAGS_HAS_PASSWORD, &uri_error);
  if (uri == NULL)
    {
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID, "%s", uri_error->message);
      return FALSE;
    }
  scheme = g_uri_get_scheme (uri);
  user = g_uri_get_user (uri);
  password = g_uri_get_password (uri);
  path = g_uri_get_path (uri);
  query = g_uri_get_query (uri);
  if (g_uri_get_fragment (uri) != NULL)
    {
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID,
                   "a fragment (#...) is not allowed");
      return FALSE;
    }
  if (g_ascii_strcasecmp (scheme, "redis") == 0)
    {
      const char *host = g_uri_get_host (uri);

      if (host == NULL || *host == '\0')
        {
          g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID,
                       "no host in redis://");
          return FALSE;
        }
      if (query != NULL)
        {
          g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID,
                       "redis:// takes no query (?...)");
          return FALSE;
        }
      out->db = 0;
      if (path != NULL && *path != '\0' && strcmp (path, "/") != 0
          && !parse_db (path + 1, &out->db))
        {
          g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID,
                       "the path must be a database number, not '%s'", path);
          return FALSE;
        }
      out->host = g_strdup (host);
      out->port = g_uri_get_port (uri) > 0 ? g_uri_get_port (uri) : 6379;
      out->username = (user != NULL && *user != '\0') ? g_strdup (user) : NULL;
      out->password = password != NULL ? g_strdup (password) : NULL;
      return TRUE;
    }
  if (g_ascii_strcasecmp (scheme, "unix") == 0)
    {
      const char *host = g_uri_get_host (uri);

      if ((host != NULL && *host != '\0') || user != NULL || password != NULL)
        {
          g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID,
                       "write unix:///absolute/path (no host or user part)");
          return FALSE;
        }
      if (path == NULL || path[0] != '/' || path[1] == '\0')
        {
          g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID,
                       "unix:// needs an absolute socket path");
          return FALSE;
        }
      out->path = g_strdup (path);
      if (query != NULL)
        {
          g_autoptr (GHashTable) params = NULL;
          GHashTableIter iter;
          gpointer k, v;

          params = g_uri_parse_params (query, -1, "&", G_URI_PARAMS_NONE, &uri_error);
          if (params == NULL)
            {
              g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID,
                           "%s", uri_error->message);
              redis_address_clear (out);
              return FALSE;
            }
          g_hash_table_iter_init (&iter, params);
          while (g_hash_table_iter_next (&iter, &k, &v))
            {
              if (strcmp (k, "db") == 0)
                {
                  if (!parse_db (v, &out->db))
                    {
                      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID,
                                   "db=%s is not a database number",
                                   (const char *) v);
                      redis_address_clear (out);
                      return FALSE;
                    }
                }
              else if (strcmp (k, "password") == 0)
                {
                  g_free (out->password);
                  out->password = g_strdup (v);
                }
              else if (strcmp (k, "username") == 0)
                {
                  g_free (out->username);
                  out->username = *(const char *) v ? g_strdup (v) : NULL;
                }
              else
                {
                  g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID,
                               "unknown parameter '%s'", (const char *) k);
                  redis_address_clear (out);
                  return FALSE;
                }
            }
        }
      return TRUE;
    }
  if (g_ascii_strcasecmp (scheme, "rediss") == 0)
    g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID,
                 "rediss:// (TLS) is not supported");
  else
    g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID,
                 "unsupported scheme '%s' (use redis:// or unix://)", scheme);
  return FALSE;
}

/* Like parse_redis_url_parts(), the error naming the URL, redacted. */
static gboolean
parse_redis_url (const char *url, RedisAddress *out, GError **error)
{
  if (!parse_redis_url_parts (url, out, error))
    {
      g_autofree char *shown = redact_url (url);

      g_prefix_error (error, "invalid Redis URL '%s': ", shown);
      return FALSE;
    }
  return TRUE;
}

/* Sends one command (binary-safe arguments) and returns its reply; a Redis error reply
 * is returned too (type REDIS_REPLY_ERROR): callers decide. NULL on I/O failure. */
static redisReply *
redis_call (redisContext *c, GError **error, int argc, const char **argv, const size_t *lens)
{
  redisReply *reply = redisCommandArgv (c, argc, argv, lens);

  if (reply == NULL)
    g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION, "Redis I/O error: %s",
                 c->errstr[0] ? c->errstr : "connection lost");
  return reply;
}

/* Like redis_call() with C-string arguments, and a Redis error reply is a GError. */
static redisReply *
redis_callv (redisContext *c, GError **error, ...)
{
  const char *argv[8];
  int argc = 0;
  const char *arg;
  va_list ap;
  redisReply *reply;

  va_start (ap, error);
  while ((arg = va_arg (ap, const char *)) != NULL && argc < (int) G_N_ELEMENTS (argv))
    argv[argc++] = arg;
  va_end (ap);
  reply = redis_call (c, error, argc, argv, NULL);
  if (reply != NULL && reply->type == REDIS_REPLY_ERROR)
    {
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_REDIS, "Redis %s: %s", argv[0],
                   reply->str);
      freeReplyObject (reply);
      return NULL;
    }
  return reply;
}

static redisContext *
redis_open (const char *url, GError **error)
{
  RedisAddress a;
  struct timeval tv = { REDIS_TIMEOUT_MS / 1000, (REDIS_TIMEOUT_MS % 1000) * 1000 };
  redisContext *c;
  redisReply *reply = NULL;
  g_autofree char *where = NULL;

  if (!parse_redis_url (url, &a, error))
    return NULL;
  where = a.path ? g_strdup (a.path) : g_strdup_printf ("%s:%d", a.host, a.port);
  c = a.path ? redisConnectUnixWithTimeout (a.path, tv) : redisConnectWithTimeout (a.host, a.port, tv);
  if (c == NULL || c->err)
    {
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION,
                   "cannot connect to Redis at %s: %s", where, c ? c->errstr : "out of memory");
      goto fail;
    }
  redisSetTimeout (c, tv);
  if (a.password != NULL)
    {
      reply = a.username ? redis_callv (c, error, "AUTH", a.username, a.password, NULL)
                         : redis_callv (c, error, "AUTH", a.password, NULL);
      if (reply == NULL)
        goto fail;
      freeReplyObject (reply);
    }
  if (a.db != 0)
    {
      g_autofree char *db = g_strdup_printf ("%d", a.db);

      reply = redis_callv (c, error, "SELECT", db, NULL);
      if (reply == NULL)
        goto fail;
      freeReplyObject (reply);
    }
  redis_address_clear (&a);
  return c;

fail:
  if (c != NULL)
    redisFree (c);
  redis_address_clear (&a);
  return NULL;
}

static int
exit_status_for_error (const GError *error)
{
  if (g_error_matches (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID))
    return EXIT_USAGE;
  return EXIT_REDIS;
}

/* ------------------------------------------------------------------------------------ */
/* status and list                                                                       */

typedef struct
{
  char *name;
  char *key;
  gboolean held;
  char *owner;   /* NULL when free */
  gint64 ttl_ms; /* -1: no expiry; meaningless when free */
} LockInfo;

static void
lock_info_free (gpointer p)
{
  LockInfo *info = p;

  g_free (info->name);
  g_free (info->key);
  g_free (info->owner);
  g_free (info);
}

/* Reads the lock keys @keys (GET + PTTL, pipelined) into LockInfo entries. Keys that are
 * not strings are skipped when @skip_foreign, an error otherwise. */
static GPtrArray *
read_locks (redisContext *c, const char *registry, GPtrArray *keys, gboolean skip_foreign,
            GError **error)
{
  g_autoptr (GPtrArray) result = g_ptr_array_new_with_free_func (lock_info_free);
  gsize prefix_len = strlen (registry) + 1;
  guint start = 0;

  while (start < keys->len)
    {
      guint end = MIN (keys->len, start + 256);
      guint i;

      for (i = start; i < end; i++)
        {
          const char *key = g_ptr_array_index (keys, i);
          const char *get[] = { "GET", key };
          const char *pttl[] = { "PTTL", key };

          redisAppendCommandArgv (c, 2, get, NULL);
          redisAppendCommandArgv (c, 2, pttl, NULL);
        }
      for (i = start; i < end; i++)
        {
          const char *key = g_ptr_array_index (keys, i);
          redisReply *value = NULL, *ttl = NULL;
          LockInfo *info;

          if (redisGetReply (c, (void **) &value) != REDIS_OK
              || redisGetReply (c, (void **) &ttl) != REDIS_OK)
            {
              g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION,
                           "Redis I/O error: %s", c->errstr[0] ? c->errstr : "connection lost");
              if (value)
                freeReplyObject (value);
              return NULL;
            }
          if (value->type == REDIS_REPLY_ERROR || ttl->type == REDIS_REPLY_ERROR)
            {
              if (!skip_foreign)
                {
                  g_autofree char *shown = escape_for_display (key);

                  g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_REDIS,
                               "key %s is not a lock: %s", shown,
                               value->type == REDIS_REPLY_ERROR ? value->str : ttl->str);
                  freeReplyObject (value);
                  freeReplyObject (ttl);
                  /* drain the rest of the pipeline before failing */
                  for (i = i + 1; i < end; i++)
                    {
                      redisReply *r;
                      if (redisGetReply (c, (void **) &r) == REDIS_OK)
                        freeReplyObject (r);
                      if (redisGetReply (c, (void **) &r) == REDIS_OK)
                        freeReplyObject (r);
                    }
                  return NULL;
                }
            }
          else
            {
              info = g_new0 (LockInfo, 1);
              info->key = g_strdup (key);
              info->name = g_strdup (key + prefix_len);
              /* A key that vanished between GET and PTTL (-2) was released. */
              info->held = value->type == REDIS_REPLY_STRING && !(ttl->type == REDIS_REPLY_INTEGER
                                                                   && ttl->integer == -2);
              if (info->held)
                {
                  info->owner = g_strndup (value->str, value->len);
                  info->ttl_ms = ttl->type == REDIS_REPLY_INTEGER ? ttl->integer : -1;
                }
              if (info->held || !skip_foreign)
                g_ptr_array_add (result, info);
              else
                lock_info_free (info);
            }
          freeReplyObject (value);
          freeReplyObject (ttl);
        }
      start = end;
    }
  return g_steal_pointer (&result);
}

static gboolean
all_digits (const char *s, gsize n)
{
  gsize i;

  for (i = 0; i < n; i++)
    if (!g_ascii_isdigit (s[i]))
      return FALSE;
  return n > 0;
}

static gboolean
all_hex (const char *s, gsize n)
{
  gsize i;

  for (i = 0; i < n; i++)
    if (!g_ascii_isxdigit (s[i]))
      return FALSE;
  return n > 0;
}

/* The colon last before @end in @s, or NULL. */
static const char *
colon_before (const char *s, const char *end)
{
  while (end > s)
    if (*--end == ':')
      return end;
  return NULL;
}

/* Splits @owner up to @end, `host:pid:tail`, into host and pid. */
static gboolean
split_host_pid (const char *owner, const char *end, char **host, gint64 *pid)
{
  const char *last = colon_before (owner, end);
  const char *prev = last != NULL ? colon_before (owner, last) : NULL;
  g_autofree char *pid_text = NULL;

  if (last == NULL || prev == NULL || prev == owner || last + 1 == end)
    return FALSE;
  pid_text = g_strndup (prev + 1, (gsize) (last - prev - 1));
  if (!all_digits (pid_text, strlen (pid_text))
      || !g_ascii_string_to_signed (pid_text, 10, 0, G_MAXINT64, pid, NULL))
    return FALSE;
  *host = g_strndup (owner, (gsize) (prev - owner));
  return TRUE;
}

/* Splits the value of a key held through libredislock into host and pid: the client id
 * `host:pid:hex` (32 hex digits), or that id followed by `:N`, the number of the
 * acquisition. Other clients (Spring's, for one) store UUIDs: then nothing is split. */
static gboolean
split_client_id (const char *owner, char **host, gint64 *pid)
{
  const char *end, *last, *prev;
  gboolean numbered;

  if (owner == NULL)
    return FALSE;
  end = owner + strlen (owner);
  last = colon_before (owner, end);
  numbered = last != NULL && all_digits (last + 1, (gsize) (end - last - 1));
  prev = numbered ? colon_before (owner, last) : NULL;
  /* host:pid:<32 hex>:N first; host:pid:anything; then host:pid:hex:N with a short hex */
  if (prev != NULL && last - prev - 1 == 32 && all_hex (prev + 1, 32)
      && split_host_pid (owner, last, host, pid))
    return TRUE;
  if (split_host_pid (owner, end, host, pid))
    return TRUE;
  return prev != NULL && all_hex (prev + 1, (gsize) (last - prev - 1))
         && split_host_pid (owner, last, host, pid);
}

static char *
format_ttl (const LockInfo *info)
{
  if (!info->held)
    return g_strdup ("-");
  if (info->ttl_ms < 0)
    return g_strdup ("none");
  if (info->ttl_ms < 1000)
    return g_strdup_printf ("%" G_GINT64_FORMAT "ms", info->ttl_ms);
  return g_strdup_printf ("%.1fs", (double) info->ttl_ms / 1000.0);
}

static void
print_locks (GPtrArray *locks, gboolean json)
{
  guint i;

  if (json)
    {
      GString *out = g_string_new ("[");

      for (i = 0; i < locks->len; i++)
        {
          const LockInfo *info = g_ptr_array_index (locks, i);
          g_autofree char *host = NULL;
          gint64 pid = 0;
          gboolean split = split_client_id (info->owner, &host, &pid);

          g_string_append (out, i ? ",\n  {" : "\n  {");
          g_string_append (out, "\"name\": ");
          json_append_string (out, info->name);
          g_string_append (out, ", \"key\": ");
          json_append_string (out, info->key);
          g_string_append_printf (out, ", \"held\": %s, \"owner\": ",
                                  info->held ? "true" : "false");
          json_append_string (out, info->owner);
          g_string_append (out, ", \"host\": ");
          json_append_string (out, split ? host : NULL);
          if (split)
            g_string_append_printf (out, ", \"pid\": %" G_GINT64_FORMAT, pid);
          else
            g_string_append (out, ", \"pid\": null");
          if (info->held && info->ttl_ms >= 0)
            g_string_append_printf (out, ", \"ttl_ms\": %" G_GINT64_FORMAT "}", info->ttl_ms);
          else
            g_string_append (out, ", \"ttl_ms\": null}");
        }
      g_string_append (out, locks->len ? "\n]\n" : "]\n");
      fputs (out->str, stdout);
      g_string_free (out, TRUE);
      return;
    }
  else
    {
      g_autoptr (GPtrArray) names = g_ptr_array_new_with_free_func (g_free);
      g_autoptr (GPtrArray) ttls = g_ptr_array_new_with_free_func (g_free);
      glong name_w = 4, ttl_w = 3;

      for (i = 0; i < locks->len; i++)
        {
          const LockInfo *info = g_ptr_array_index (locks, i);
          char *name = escape_for_display (info->name);
          char *ttl = format_ttl (info);

          name_w = MAX (name_w, g_utf8_strlen (name, -1));
          ttl_w = MAX (ttl_w, (glong) strlen (ttl));
          g_ptr_array_add (names, name);
          g_ptr_array_add (ttls, ttl);
        }
      printf ("%-*s  %-5s  %*s  %s\n", (int) name_w, "NAME", "STATE", (int) ttl_w, "TTL", "OWNER");
      for (i = 0; i < locks->len; i++)
        {
          const LockInfo *info = g_ptr_array_index (locks, i);
          const char *name = g_ptr_array_index (names, i);
          g_autofree char *owner = info->owner ? escape_for_display (info->owner) : g_strdup ("-");
          int pad = (int) (name_w - g_utf8_strlen (name, -1));

          printf ("%s%*s  %-5s  %*s  %s\n", name, pad, "", info->held ? "held" : "free",
                  (int) ttl_w, (const char *) g_ptr_array_index (ttls, i), owner);
        }
    }
}

static const char status_usage[] = "status [OPTION…] NAME…";
static const char list_usage[] = "list [OPTION…]";

static const GOptionEntry json_entries[] = {
  { "json", 'j', 0, G_OPTION_ARG_NONE, &opt_json, "Print a JSON array for scripts", NULL },
  { NULL },
};

static int
cmd_status (int argc, char **argv)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (GPtrArray) keys = g_ptr_array_new_with_free_func (g_free);
  g_autoptr (GPtrArray) locks = NULL;
  g_autoptr (GPtrArray) names = g_ptr_array_new ();
  g_autofree char **opt_argv = NULL;
  redisContext *c;
  int rc, i, opt_argc;
  gboolean all_held = TRUE;
  guint j;

  /* Options end at the first "--"; names follow (they may start with a dash). */
  for (opt_argc = 1; opt_argc < argc && strcmp (argv[opt_argc], "--") != 0; opt_argc++)
    ;
  opt_argv = g_new0 (char *, opt_argc + 1);
  memcpy (opt_argv, argv, sizeof (char *) * (gsize) opt_argc);
  for (i = opt_argc + 1; i < argc; i++)
    g_ptr_array_add (names, argv[i]);
  rc = parse_options ("status", status_usage, "NAME…",
                      "Shows whether each lock NAME is held, by which client, and for how long.\n"
                      "Exit status: 0 when every NAME is held, 1 when one is free, 2 on a Redis\n"
                      "error, 64 on a usage error.",
                      json_entries, TRUE, FALSE, &opt_argc, &opt_argv);
  if (rc >= 0)
    return rc;
  for (i = opt_argc - 1; i >= 1; i--)
    g_ptr_array_insert (names, 0, opt_argv[i]);
  if (names->len == 0)
    return usage_error ("status", status_usage, "no lock NAME given");
  for (j = 0; j < names->len; j++)
    {
      const char *name = g_ptr_array_index (names, j);

      if (name[0] == '\0')
        return usage_error ("status", status_usage, "a lock NAME must not be empty");
      if (strlen (name) > REDIS_LOCK_NAME_MAX)
        return usage_error ("status", status_usage, "lock NAME longer than %d bytes",
                            REDIS_LOCK_NAME_MAX);
      g_ptr_array_add (keys, g_strconcat (effective_registry (), ":", name, NULL));
    }
  c = redis_open (effective_url (), &error);
  if (c == NULL)
    {
      die_message ("%s", error->message);
      return exit_status_for_error (error);
    }
  locks = read_locks (c, effective_registry (), keys, FALSE, &error);
  redisFree (c);
  if (locks == NULL)
    {
      die_message ("%s", error->message);
      return EXIT_REDIS;
    }
  print_locks (locks, opt_json);
  for (j = 0; j < locks->len; j++)
    if (!((LockInfo *) g_ptr_array_index (locks, j))->held)
      all_held = FALSE;
  return all_held ? 0 : 1;
}

/* The SCAN pattern matching exactly the keys that start with @registry ":". */
static char *
literal_scan_pattern (const char *registry)
{
  GString *pattern = g_string_new (NULL);
  const char *p;

  for (p = registry; *p; p++)
    {
      if (strchr ("*?[]\\^", *p) != NULL)
        g_string_append_c (pattern, '\\');
      g_string_append_c (pattern, *p);
    }
  g_string_append (pattern, ":*");
  return g_string_free (pattern, FALSE);
}

static int
compare_strings (gconstpointer a, gconstpointer b)
{
  return strcmp (*(const char *const *) a, *(const char *const *) b);
}

static int
cmd_list (int argc, char **argv)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (GHashTable) seen = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  g_autoptr (GPtrArray) keys = g_ptr_array_new_with_free_func (g_free);
  g_autoptr (GPtrArray) locks = NULL;
  g_autofree char *pattern = NULL;
  g_autofree char *cursor = g_strdup ("0");
  redisContext *c;
  int rc;

  rc = parse_options ("list", list_usage, "",
                      "Lists the locks held in a registry (keys KEY:*, found with SCAN).",
                      json_entries, TRUE, FALSE, &argc, &argv);
  if (rc >= 0)
    return rc;
  if (argc > 1)
    return usage_error ("list", list_usage, "unexpected argument '%s'", argv[1]);
  c = redis_open (effective_url (), &error);
  if (c == NULL)
    {
      die_message ("%s", error->message);
      return exit_status_for_error (error);
    }
  pattern = literal_scan_pattern (effective_registry ());
  do
    {
      redisReply *reply = redis_callv (c, &error, "SCAN", cursor, "MATCH", pattern, "COUNT",
                                       "1000", NULL);
      size_t k;

      if (reply == NULL)
        break;
      if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2
          || reply->element[0]->type != REDIS_REPLY_STRING
          || reply->element[1]->type != REDIS_REPLY_ARRAY)
        {
          g_set_error (&error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_REDIS,
                       "unexpected reply to SCAN");
          freeReplyObject (reply);
          break;
        }
      g_free (cursor);
      cursor = g_strdup (reply->element[0]->str);
      for (k = 0; k < reply->element[1]->elements; k++)
        {
          redisReply *key = reply->element[1]->element[k];

          /* lock names never contain NUL: a key that does is not one of ours */
          if (key->type == REDIS_REPLY_STRING && strlen (key->str) == key->len
              && !g_hash_table_contains (seen, key->str))
            {
              g_hash_table_add (seen, g_strdup (key->str));
              g_ptr_array_add (keys, g_strdup (key->str));
            }
        }
      freeReplyObject (reply);
    }
  while (strcmp (cursor, "0") != 0);
  if (error == NULL)
    {
      g_ptr_array_sort (keys, compare_strings);
      locks = read_locks (c, effective_registry (), keys, TRUE, &error);
    }
  redisFree (c);
  if (locks == NULL)
    {
      die_message ("%s", error->message);
      return EXIT_REDIS;
    }
  print_locks (locks, opt_json);
  return 0;
}

/* ------------------------------------------------------------------------------------ */
/* run                                                                                   */

/* What the holder thread, the lease-lost callback and the main loop share. The holder
 * thread takes and releases the lock (a lock belongs to the thread that took it); the
 * main thread runs the command. Fields under @mu; a byte on @wake_fd tells the main loop
 * to look. pthread primitives so ThreadSanitizer sees the ordering. */
typedef struct
{
  pthread_mutex_t mu;
  pthread_cond_t cond;
  int wake_fd[2];

  /* read-only while the holder thread runs */
  RedisLock *lock;
  gint64 wait_ms;
  gint64 ttl_ms;
  GCancellable *cancellable;

  /* holder thread → main */
  gboolean acquire_done;
  gboolean acquired;
  GError *acquire_error;
  gboolean release_done;
  GError *release_error;
  /* main → holder thread */
  gboolean release_requested;
  /* lease-lost callback → main */
  gboolean lease_lost;
  gint64 lease_lost_us; /* monotonic time of the report */
} Holder;

/* The command runs as a job of its own: its own process group, which is given the
 * terminal while redislock has it (see start_command()). */
typedef struct
{
  Holder *holder;
  GMainLoop *loop;
  RedisLockRegistry *registry;
  const char *name;
  char **command;
  gint64 kill_after_us; /* SIGTERM to SIGKILL on a lost lease, at most the lease margin */

  /* main thread only */
  gboolean acquire_handled;
  gboolean lease_lost_handled;
  GPid child;              /* the command, leader of its process group */
  gboolean child_running;  /* not reaped yet */
  gboolean child_stopped;  /* stopped (Ctrl-Z, SIGTTIN...), not continued since */
  int child_status;        /* exit status to report for the child */
  int interrupted_by;      /* signal received before the command started */
  int exit_status;         /* decided before the command started, or -1 */
  guint kill_timer;
  int tty_fd;              /* redislock's controlling terminal, or -1 */
} RunState;

static void
holder_wake (Holder *h)
{
  char b = 'x';
  ssize_t n;

  do
    n = write (h->wake_fd[1], &b, 1);
  while (n < 0 && errno == EINTR);
  /* EAGAIN: a wake-up is already pending, which is enough. */
}

static gpointer
holder_thread (gpointer data)
{
  Holder *h = data;
  GError *error = NULL;
  gboolean ok;

  ok = redis_lock_try_lock_full (h->lock, h->wait_ms, h->ttl_ms, h->cancellable, &error);
  pthread_mutex_lock (&h->mu);
  h->acquire_done = TRUE;
  h->acquired = ok;
  h->acquire_error = error;
  pthread_mutex_unlock (&h->mu);
  holder_wake (h);

  pthread_mutex_lock (&h->mu);
  while (!h->release_requested)
    pthread_cond_wait (&h->cond, &h->mu);
  pthread_mutex_unlock (&h->mu);

  error = NULL;
  if (ok)
    redis_lock_unlock (h->lock, &error);
  pthread_mutex_lock (&h->mu);
  h->release_error = error;
  h->release_done = TRUE;
  pthread_mutex_unlock (&h->mu);
  holder_wake (h);
  return NULL;
}

static void
holder_request_release (Holder *h)
{
  pthread_mutex_lock (&h->mu);
  h->release_requested = TRUE;
  pthread_cond_signal (&h->cond);
  pthread_mutex_unlock (&h->mu);
}

/* Called from a library thread: only record and wake the main loop. */
static void
on_lease_lost (RedisLock *lock, gpointer user_data)
{
  Holder *h = user_data;
  gint64 now = g_get_monotonic_time ();

  pthread_mutex_lock (&h->mu);
  if (!h->lease_lost)
    h->lease_lost_us = now;
  h->lease_lost = TRUE;
  pthread_mutex_unlock (&h->mu);
  holder_wake (h);
}

/* libredislock's drift margin for a lease of @ttl_ms (drift_margin_us() in
 * src/leases.c): 5% of the TTL, at least 25 ms, at most half the TTL. A lease is
 * reported lost once it has gone unconfirmed for the TTL less this margin, so its key
 * cannot expire, and another client take the lock, sooner than this margin after the
 * report: the command must be dead by then. */
static gint64
lease_margin_us (gint64 ttl_ms)
{
  gint64 ttl_us = ttl_ms * 1000;

  return MIN (MAX (ttl_us / 20, 25000), ttl_us / 2);
}

static int pipe_disposition_ignored;
static int ttou_disposition_ignored;
static pid_t redislock_pid;
static int child_tty_fd = -1; /* for child_setup(): the terminal to take, or -1 */

/* In the child between fork and exec (async-signal-safe calls only): become the leader
 * of a process group of its own, and its terminal's foreground group when redislock was
 * (so that Ctrl-C reaches the command once, from the terminal, and redislock not at all);
 * give SIGTTOU and SIGPIPE back their inherited dispositions (redislock ignores SIGTTOU
 * to hand the terminal over from the background, and SIGPIPE so that a dropped Redis
 * connection is an error, not a death); and on Linux have the command killed if
 * redislock dies without ending it: nothing would renew the lease any more. */
static void
child_setup (gpointer data)
{
  setpgid (0, 0);
  if (child_tty_fd >= 0)
    tcsetpgrp (child_tty_fd, getpid ());
  signal (SIGTTOU, ttou_disposition_ignored ? SIG_IGN : SIG_DFL);
  signal (SIGPIPE, pipe_disposition_ignored ? SIG_IGN : SIG_DFL);
#ifdef __linux__
  prctl (PR_SET_PDEATHSIG, SIGKILL);
  if (getppid () != redislock_pid)
    _exit (EXIT_CANNOT_EXEC);
#endif
}

/* Sends @signum to the command's process group (the command and what it started), and
 * to the command itself should it have left that group. */
static void
signal_command (RunState *st, int signum)
{
  if (kill (-st->child, signum) != 0 || getpgid (st->child) != st->child)
    kill (st->child, signum);
}

static gboolean
terminal_owned_by (RunState *st, pid_t pgrp)
{
  return st->tty_fd >= 0 && tcgetpgrp (st->tty_fd) == pgrp;
}

/* Makes @pgrp the terminal's foreground process group (SIGTTOU is ignored, so this works
 * from the background too). */
static void
give_terminal (RunState *st, pid_t pgrp)
{
  if (st->tty_fd >= 0)
    while (tcsetpgrp (st->tty_fd, pgrp) != 0 && errno == EINTR)
      ;
}

/* redislock was continued, or is in the foreground again: so is the command. */
static void
resume_command (RunState *st)
{
  if (!st->child_running)
    return;
  if (terminal_owned_by (st, getpgrp ()))
    give_terminal (st, st->child);
  if (st->child_stopped)
    {
      st->child_stopped = FALSE;
      signal_command (st, SIGCONT);
    }
}

/* The command stopped. When it had the terminal (Ctrl-Z), or wanted it from the
 * background (SIGTTIN, SIGTTOU), redislock takes the terminal back and stops its own
 * job too, so that the shell sees the job stopped and can resume it with fg or bg; if
 * redislock has the terminal itself (it was brought to the foreground while the
 * command was not), the command just gets it. A stop by anyone else (a debugger,
 * SIGSTOP) is left alone. */
static void
handle_child_stopped (RunState *st, int signum)
{
  gboolean had_terminal = terminal_owned_by (st, st->child);
  gboolean wants_terminal = st->tty_fd >= 0 && (signum == SIGTTIN || signum == SIGTTOU);

  st->child_stopped = TRUE;
  if (!had_terminal && !wants_terminal)
    return;
  if (wants_terminal && terminal_owned_by (st, getpgrp ()))
    {
      resume_command (st);
      return;
    }
  if (had_terminal)
    give_terminal (st, getpgrp ());
  /* Returns once continued; at once when this job is orphaned or ignores SIGTSTP. */
  kill (0, SIGTSTP);
  if (terminal_owned_by (st, getpgrp ()))
    resume_command (st);
}

static void
handle_child_exit (RunState *st, int wait_status)
{
  st->child_running = FALSE;
  if (WIFEXITED (wait_status))
    st->child_status = WEXITSTATUS (wait_status);
  else if (WIFSIGNALED (wait_status))
    st->child_status = 128 + WTERMSIG (wait_status);
  else
    st->child_status = EXIT_CANNOT_EXEC;
  g_spawn_close_pid (st->child);
  if (terminal_owned_by (st, st->child))
    give_terminal (st, getpgrp ());
  if (st->kill_timer)
    {
      /* The lease is lost: whatever the command left running works without the lock. */
      g_source_remove (st->kill_timer);
      st->kill_timer = 0;
      kill (-st->child, SIGKILL);
    }
  holder_request_release (st->holder);
}

/* Collects what happened to the command (SIGCHLD woke the main loop). */
static void
check_child (RunState *st)
{
  while (st->child_running)
    {
      int wait_status = 0;
      pid_t pid = waitpid (st->child, &wait_status, WNOHANG | WUNTRACED | WCONTINUED);

      if (pid == 0)
        break;
      if (pid < 0 && errno == EINTR)
        continue;
      if (pid < 0)
        handle_child_exit (st, 0xff00); /* reaped elsewhere: status unknown */
      else if (WIFSTOPPED (wait_status))
        handle_child_stopped (st, WSTOPSIG (wait_status));
      else if (WIFCONTINUED (wait_status))
        st->child_stopped = FALSE;
      else
        handle_child_exit (st, wait_status);
    }
}

static gboolean
on_kill_timer (gpointer data)
{
  RunState *st = data;

  st->kill_timer = 0;
  if (st->child_running)
    {
      g_autofree char *grace = format_duration (st->kill_after_us / 1000);

      die_message ("the command did not end within %s of SIGTERM; sending SIGKILL", grace);
      signal_command (st, SIGKILL);
    }
  return G_SOURCE_REMOVE;
}

static void
start_command (RunState *st)
{
  g_autoptr (GError) error = NULL;
  g_auto (GStrv) env = g_get_environ ();
  gboolean spawned;

  env = g_environ_setenv (env, "REDIS_LOCK_KEY", redis_lock_get_key (st->holder->lock), TRUE);
  env = g_environ_setenv (env, "REDIS_LOCK_OWNER", redis_lock_registry_get_client_id (st->registry),
                          TRUE);
  env = g_environ_setenv (env, "REDIS_LOCK_NAME", st->name, TRUE);
  /* The command's group gets the terminal only if redislock's group has it: a job in the
   * background stays there. */
  child_tty_fd = terminal_owned_by (st, getpgrp ()) ? st->tty_fd : -1;
  spawned = g_spawn_async (NULL, st->command, env,
                           G_SPAWN_DO_NOT_REAP_CHILD | G_SPAWN_SEARCH_PATH
                             | G_SPAWN_CHILD_INHERITS_STDIN,
                           child_setup, NULL, &st->child, &error);
  child_tty_fd = -1;
  if (!spawned)
    {
      g_autofree char *shown = escape_for_display (st->command[0]);

      die_message ("cannot run %s: %s", shown, error->message);
      st->exit_status = g_error_matches (error, G_SPAWN_ERROR, G_SPAWN_ERROR_NOENT)
                          ? EXIT_NOT_FOUND
                          : EXIT_CANNOT_EXEC;
      holder_request_release (st->holder);
      return;
    }
  st->child_running = TRUE;
  check_child (st);
}

/* Tells why the lock was not acquired, with the holder when Redis says who it is. */
static void
report_not_acquired (RunState *st)
{
  g_autofree char *name = escape_for_display (st->name);
  g_autofree char *holder = NULL;
  g_autofree char *waited = format_duration (st->holder->wait_ms);
  redisContext *c = redis_open (effective_url (), NULL);

  if (c != NULL)
    {
      redisReply *r = redis_callv (c, NULL, "GET", redis_lock_get_key (st->holder->lock), NULL);

      if (r != NULL && r->type == REDIS_REPLY_STRING)
        {
          g_autofree char *owner = g_strndup (r->str, r->len);
          g_autofree char *shown = escape_for_display (owner);

          holder = g_strdup_printf (" (held by %s)", shown);
        }
      if (r != NULL)
        freeReplyObject (r);
      redisFree (c);
    }
  if (st->holder->wait_ms == 0)
    die_message ("lock '%s' is busy%s", name, holder ? holder : "");
  else
    die_message ("timed out after %s waiting for lock '%s'%s", waited, name, holder ? holder : "");
}

static void
handle_acquired (RunState *st, gboolean acquired, const GError *error)
{
  st->acquire_handled = TRUE;
  if (!acquired)
    {
      if (st->interrupted_by)
        st->exit_status = 128 + st->interrupted_by;
      else if (error != NULL)
        {
          die_message ("%s", error->message);
          st->exit_status = exit_status_for_error (error);
        }
      else
        {
          report_not_acquired (st);
          st->exit_status = EXIT_NOT_ACQUIRED;
        }
      holder_request_release (st->holder);
      return;
    }
  if (st->interrupted_by)
    {
      st->exit_status = 128 + st->interrupted_by;
      holder_request_release (st->holder);
      return;
    }
  start_command (st);
}

/* SIGTERM now, SIGKILL once the grace is over, counted from the loss report: by then at
 * the latest, since the grace is at most the lease margin, before the key can expire. */
static void
handle_lease_lost (RunState *st, gint64 lost_us)
{
  g_autofree char *name = escape_for_display (st->name);
  g_autofree char *grace = format_duration (st->kill_after_us / 1000);
  gint64 remaining_us;

  st->lease_lost_handled = TRUE;
  if (!st->child_running)
    return;
  die_message ("lost the lease on lock '%s'; terminating the command (SIGKILL in %s at most)",
               name, grace);
  signal_command (st, SIGTERM);
  if (st->child_stopped)
    {
      st->child_stopped = FALSE;
      signal_command (st, SIGCONT);
    }
  remaining_us = lost_us + st->kill_after_us - g_get_monotonic_time ();
  if (remaining_us <= 0)
    on_kill_timer (st);
  else
    st->kill_timer = g_timeout_add ((guint) MIN (remaining_us / 1000, (gint64) G_MAXUINT),
                                    on_kill_timer, st);
}

static gboolean
on_wake (int fd, GIOCondition condition, gpointer data)
{
  RunState *st = data;
  Holder *h = st->holder;
  char buf[64];
  gboolean acquire_done, acquired, lease_lost, release_done;
  gint64 lease_lost_us;
  GError *acquire_error;

  while (read (fd, buf, sizeof buf) > 0)
    ;
  pthread_mutex_lock (&h->mu);
  acquire_done = h->acquire_done;
  acquired = h->acquired;
  acquire_error = h->acquire_error;
  lease_lost = h->lease_lost;
  lease_lost_us = h->lease_lost_us;
  release_done = h->release_done;
  pthread_mutex_unlock (&h->mu);

  if (acquire_done && !st->acquire_handled)
    handle_acquired (st, acquired, acquire_error);
  if (lease_lost && !st->lease_lost_handled && st->acquire_handled)
    handle_lease_lost (st, lease_lost_us);
  if (release_done)
    g_main_loop_quit (st->loop);
  return G_SOURCE_CONTINUE;
}

/* Signals reach the main loop through a pipe (the handler only writes the signal
 * number), from the start of `run`, so one that arrives while redislock connects to
 * Redis is not lost: the forwarded ones, SIGCHLD (the command stopped or ended) and
 * SIGCONT (redislock was resumed). */
static const int forwarded_signals[] = { SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2 };
static int signal_pipe[2] = { -1, -1 };

static void
on_unix_signal (int signum)
{
  int saved_errno = errno;
  unsigned char b = (unsigned char) signum;

  if (getpid () != redislock_pid)
    {
      /* the command between fork and exec: the signal is its own */
      signal (signum, SIG_DFL);
      raise (signum);
      errno = saved_errno;
      return;
    }
  if (write (signal_pipe[1], &b, 1) < 0)
    {
      /* pipe full: the main loop has plenty of signals to act on already */
    }
  errno = saved_errno;
}

static gboolean
on_signal_pipe (int fd, GIOCondition condition, gpointer data)
{
  RunState *st = data;
  unsigned char buf[32];
  ssize_t n, i;

  while ((n = read (fd, buf, sizeof buf)) > 0)
    for (i = 0; i < n; i++)
      {
        int signum = buf[i];

        if (signum == SIGCHLD)
          continue; /* below */
        if (signum == SIGCONT)
          resume_command (st);
        else if (st->child_running)
          signal_command (st, signum);
        else if (!st->acquire_handled)
          {
            if (!st->interrupted_by)
              st->interrupted_by = signum;
            g_cancellable_cancel (st->holder->cancellable);
          }
      }
  check_child (st);
  return G_SOURCE_CONTINUE;
}

static gboolean
signal_is_ignored (int signum)
{
  struct sigaction sa;

  return sigaction (signum, NULL, &sa) == 0 && sa.sa_handler == SIG_IGN;
}

/* A signal ignored by whoever started redislock stays ignored (as nohup expects); SIGCHLD
 * is always caught, to learn when the command stops or ends. SIGTTOU is ignored, to hand
 * the terminal over from the background and write to it while the command has it. */
static gboolean
install_signal_handlers (void)
{
  struct sigaction sa;
  gsize i;

  redislock_pid = getpid ();
  if (!g_unix_open_pipe (signal_pipe, FD_CLOEXEC, NULL)
      || !g_unix_set_fd_nonblocking (signal_pipe[0], TRUE, NULL)
      || !g_unix_set_fd_nonblocking (signal_pipe[1], TRUE, NULL))
    return FALSE;
  memset (&sa, 0, sizeof sa);
  sa.sa_handler = on_unix_signal;
  sa.sa_flags = SA_RESTART;
  sigemptyset (&sa.sa_mask);
  for (i = 0; i < G_N_ELEMENTS (forwarded_signals); i++)
    if (!signal_is_ignored (forwarded_signals[i]))
      sigaction (forwarded_signals[i], &sa, NULL);
  if (!signal_is_ignored (SIGCONT))
    sigaction (SIGCONT, &sa, NULL);
  sigaction (SIGCHLD, &sa, NULL);
  ttou_disposition_ignored = signal_is_ignored (SIGTTOU);
  signal (SIGTTOU, SIG_IGN);
  return TRUE;
}

/* Whether the option @arg ("-x", "--long" or "--long=VALUE") of @tables takes the next
 * argument as its value. */
static gboolean
option_takes_next (const char *arg, const GOptionEntry *const *tables)
{
  const GOptionEntry *const *t;
  const GOptionEntry *e;

  if (arg[1] == '-')
    {
      const char *name = arg + 2;
      gsize len = strcspn (name, "=");

      if (name[len] == '=')
        return FALSE;
      for (t = tables; *t != NULL; t++)
        for (e = *t; e->long_name != NULL; e++)
          if (strlen (e->long_name) == len && strncmp (e->long_name, name, len) == 0)
            return e->arg != G_OPTION_ARG_NONE;
      return FALSE;
    }
  for (t = tables; *t != NULL; t++)
    for (e = *t; e->long_name != NULL; e++)
      if (e->short_name != 0 && e->short_name == arg[strlen (arg) - 1])
        return e->arg != G_OPTION_ARG_NONE;
  return FALSE;
}

static const char run_usage[] = "run [OPTION…] [--] NAME [--] COMMAND [ARG…]";

static int
cmd_run (int argc, char **argv)
{
  static char *opt_wait, *opt_ttl, *opt_kill_after;
  static const GOptionEntry entries[] = {
    { "wait", 'w', 0, G_OPTION_ARG_STRING, &opt_wait,
      "Give up (exit 1) when the lock is not acquired within DURATION; 0 tries once "
      "(default: wait forever)",
      "DURATION" },
    { "ttl", 't', 0, G_OPTION_ARG_STRING, &opt_ttl,
      "Lease TTL, renewed while the command runs; bounds how long a crashed redislock "
      "blocks others (default: 60s)",
      "DURATION" },
    { "kill-after", 'k', 0, G_OPTION_ARG_STRING, &opt_kill_after,
      "When the lease is lost, send SIGKILL this long after SIGTERM (default: 5s), at most "
      "the lease margin, 5% of the TTL (3s at the default TTL)",
      "DURATION" },
    { NULL },
  };
  static const GOptionEntry *const tables[] = { common_entries, entries, NULL };
  g_autoptr (GError) error = NULL;
  g_autoptr (RedisLockRegistry) registry = NULL;
  g_autoptr (RedisLock) lock = NULL;
  g_autoptr (GMainLoop) loop = NULL;
  g_autoptr (GCancellable) cancellable = NULL;
  GThread *thread;
  Holder *h;
  RunState st = { 0 };
  guint wake_source, signal_source;
  int end, rc, i, opt_argc, result;
  gboolean sep = FALSE;
  char **opt_argv;
  char **command;
  const char *name;
  gint64 wait_ms = -1, ttl_ms = DEFAULT_TTL_MS, kill_after_ms = DEFAULT_KILL_AFTER_MS;
  gboolean lease_lost;

  /* The options end at the first "--", NAME following it, or at the first argument that
   * is not an option, NAME. One "--" right after NAME is skipped; all the rest, other
   * "--" included, is the command's. */
  for (end = 1; end < argc; end++)
    {
      const char *arg = argv[end];

      if (strcmp (arg, "--") == 0)
        {
          sep = TRUE;
          break;
        }
      if (arg[0] != '-' || arg[1] == '\0')
        break;
      if (option_takes_next (arg, tables) && end + 1 < argc)
        end++;
    }
  opt_argc = end;
  opt_argv = g_new0 (char *, opt_argc + 1);
  memcpy (opt_argv, argv, sizeof (char *) * (gsize) opt_argc);
  rc = parse_options ("run", run_usage, "[--] NAME [--] COMMAND [ARG…]",
                      "Holds lock NAME while COMMAND runs, and exits with its status.\n"
                      "Exit status: the command's; 1 when the lock was not acquired within\n"
                      "--wait; 2 on a Redis error; 3 when the lease was lost while the command\n"
                      "ran; 64 on a usage error; 126/127 when the command cannot be run;\n"
                      "128+N when the command (or redislock, before it started) got signal N.",
                      entries, TRUE, TRUE, &opt_argc, &opt_argv);
  if (rc < 0 && opt_argc > 1)
    rc = usage_error ("run", run_usage, "unexpected argument '%s'", opt_argv[1]);
  g_free (opt_argv);
  if (rc >= 0)
    return rc;
  i = sep ? end + 1 : end;
  if (i >= argc)
    return usage_error ("run", run_usage, "no lock NAME given");
  name = argv[i++];
  if (i < argc && strcmp (argv[i], "--") == 0)
    i++;
  command = argv + i;
  if (command[0] == NULL)
    return usage_error ("run", run_usage, "no COMMAND given");
  if (*name == '\0')
    return usage_error ("run", run_usage, "the lock NAME must not be empty");
  if (strlen (name) > REDIS_LOCK_NAME_MAX)
    return usage_error ("run", run_usage, "lock NAME longer than %d bytes", REDIS_LOCK_NAME_MAX);
  if (opt_wait != NULL && strcmp (opt_wait, "forever") != 0 && !parse_duration (opt_wait, &wait_ms))
    return usage_error ("run", run_usage, "invalid duration for --wait: '%s'", opt_wait);
  if (opt_ttl != NULL && (!parse_duration (opt_ttl, &ttl_ms) || ttl_ms < 1))
    return usage_error ("run", run_usage, "invalid duration for --ttl: '%s' (at least 1ms)",
                        opt_ttl);
  if (opt_kill_after != NULL && !parse_duration (opt_kill_after, &kill_after_ms))
    return usage_error ("run", run_usage, "invalid duration for --kill-after: '%s'",
                        opt_kill_after);

  if (!install_signal_handlers ())
    {
      die_message ("cannot create a pipe: %s", g_strerror (errno));
      return EXIT_REDIS;
    }
  registry = redis_lock_registry_new (effective_url (), effective_registry (), &error);
  if (registry == NULL)
    {
      die_message ("%s", error->message);
      return exit_status_for_error (error);
    }
  lock = redis_lock_registry_obtain (registry, name, &error);
  if (lock == NULL)
    {
      die_message ("%s", error->message);
      return exit_status_for_error (error);
    }

  h = g_new0 (Holder, 1);
  pthread_mutex_init (&h->mu, NULL);
  pthread_cond_init (&h->cond, NULL);
  if (!g_unix_open_pipe (h->wake_fd, FD_CLOEXEC, NULL)
      || !g_unix_set_fd_nonblocking (h->wake_fd[0], TRUE, NULL)
      || !g_unix_set_fd_nonblocking (h->wake_fd[1], TRUE, NULL))
    {
      die_message ("cannot create a pipe: %s", g_strerror (errno));
      return EXIT_REDIS;
    }
  cancellable = g_cancellable_new ();
  h->lock = lock;
  h->wait_ms = wait_ms;
  h->ttl_ms = ttl_ms;
  h->cancellable = cancellable;
  redis_lock_registry_set_lease_lost_callback (registry, on_lease_lost, h, NULL);

  loop = g_main_loop_new (NULL, FALSE);
  st.holder = h;
  st.loop = loop;
  st.registry = registry;
  st.name = name;
  st.command = command;
  st.kill_after_us = MIN (kill_after_ms * 1000, lease_margin_us (ttl_ms));
  st.exit_status = -1;
  st.tty_fd = open ("/dev/tty", O_RDWR | O_NOCTTY | O_CLOEXEC);
  wake_source = g_unix_fd_add (h->wake_fd[0], G_IO_IN, on_wake, &st);
  signal_source = g_unix_fd_add (signal_pipe[0], G_IO_IN, on_signal_pipe, &st);

  thread = g_thread_new ("redislock-holder", holder_thread, h);
  g_main_loop_run (loop);
  g_thread_join (thread);

  g_source_remove (signal_source);
  g_source_remove (wake_source);
  if (st.tty_fd >= 0)
    close (st.tty_fd);

  lease_lost = h->lease_lost
               || g_error_matches (h->release_error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_LEASE_LOST);
  if (st.exit_status >= 0)
    result = st.exit_status;
  else if (lease_lost)
    {
      if (!st.lease_lost_handled)
        {
          g_autofree char *shown = escape_for_display (name);

          die_message ("lost the lease on lock '%s' while the command ran", shown);
        }
      result = EXIT_LEASE_LOST;
    }
  else
    {
      if (h->release_error != NULL)
        die_message ("warning: releasing the lock failed (it expires by its TTL): %s",
                     h->release_error->message);
      result = st.child_status;
    }

  /* The registry's threads stop before the state they may call back into is freed. */
  redis_lock_registry_set_lease_lost_callback (registry, NULL, NULL, NULL);
  g_clear_pointer (&lock, redis_lock_unref);
  redis_lock_registry_close (registry);
  g_clear_pointer (&registry, redis_lock_registry_unref);
  g_clear_error (&h->acquire_error);
  g_clear_error (&h->release_error);
  close (h->wake_fd[0]);
  close (h->wake_fd[1]);
  pthread_mutex_destroy (&h->mu);
  pthread_cond_destroy (&h->cond);
  g_free (h);
  return result;
}

/* ------------------------------------------------------------------------------------ */
/* demo                                                                                  */

/* One lock hold in a demo worker, as sent to the parent through a pipe. */
typedef struct
{
  gint64 acquired_ns; /* CLOCK_MONOTONIC, comparable across processes */
  gint64 released_ns; /* taken just before the unlock call */
  gint32 bought;
  gint32 pad;
} DemoRecord;

typedef struct
{
  /* shared, read-only */
  RedisLockRegistry *registry;
  const char *url;
  const char *stock_key;
  const char *sold_key;
  gboolean no_lock;
  /* start gate */
  pthread_mutex_t *mu;
  pthread_cond_t *cond;
  int *ready;
  gboolean *go;
  gboolean *failed;
  /* per thread */
  GArray *records;
  char *error;
} DemoThread;

static gpointer
demo_thread (gpointer data)
{
  DemoThread *t = data;
  g_autoptr (GError) error = NULL;
  g_autoptr (RedisLock) lock = NULL;
  redisContext *c = redis_open (t->url, &error);
  gboolean ok = c != NULL;

  if (ok)
    {
      lock = redis_lock_registry_obtain (t->registry, "stock", &error);
      ok = lock != NULL;
    }
  pthread_mutex_lock (t->mu);
  (*t->ready)++;
  if (!ok)
    *t->failed = TRUE;
  pthread_cond_broadcast (t->cond);
  while (!*t->go)
    pthread_cond_wait (t->cond, t->mu);
  if (*t->failed)
    ok = FALSE;
  pthread_mutex_unlock (t->mu);

  while (ok)
    {
      DemoRecord rec = { 0 };
      redisReply *r;
      gint64 stock = 0;

      if (!t->no_lock && !redis_lock_lock (lock, &error))
        break;
      rec.acquired_ns = monotonic_ns ();
      r = redis_callv (c, &error, "GET", t->stock_key, NULL);
      if (r != NULL)
        {
          if (r->type == REDIS_REPLY_STRING)
            stock = g_ascii_strtoll (r->str, NULL, 10);
          freeReplyObject (r);
          if (stock > 0)
            {
              g_autofree char *left = g_strdup_printf ("%" G_GINT64_FORMAT, stock - 1);

              r = redis_callv (c, &error, "SET", t->stock_key, left, NULL);
              if (r != NULL)
                {
                  freeReplyObject (r);
                  r = redis_callv (c, &error, "INCR", t->sold_key, NULL);
                  if (r != NULL)
                    freeReplyObject (r);
                }
              rec.bought = 1;
            }
        }
      rec.released_ns = monotonic_ns ();
      if (!t->no_lock)
        {
          GError *unlock_error = NULL;

          if (!redis_lock_unlock (lock, &unlock_error) && error == NULL)
            error = unlock_error;
          else
            g_clear_error (&unlock_error);
        }
      if (error != NULL)
        break;
      g_array_append_val (t->records, rec);
      if (!rec.bought)
        break;
    }
  if (error != NULL)
    t->error = g_strdup (error->message);
  if (c != NULL)
    redisFree (c);
  return NULL;
}

/* The hidden worker mode: `redislock __demo-worker REGISTRY STOCK_KEY SOLD_KEY THREADS
 * NO_LOCK` with the URL in $REDIS_URL. Writes 'R' on stdout when connected, waits for a
 * byte on stdin, then buys until the stock is gone and writes its DemoRecords. */
static int
demo_worker (int argc, char **argv)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (RedisLockRegistry) registry = NULL;
  pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
  int ready = 0, n_threads, i, status = 0;
  gboolean go = FALSE, failed = FALSE;
  DemoThread *threads;
  GThread **handles;
  const char *url = g_getenv ("REDIS_URL");
  char byte = 'R';

  if (argc != 6 || url == NULL)
    return EXIT_USAGE;
  n_threads = atoi (argv[4]);
  if (n_threads < 1)
    return EXIT_USAGE;
  registry = redis_lock_registry_new (url, argv[1], &error);
  if (registry == NULL)
    {
      die_message ("demo worker: %s", error->message);
      return EXIT_REDIS;
    }
  threads = g_new0 (DemoThread, n_threads);
  handles = g_new0 (GThread *, n_threads);
  for (i = 0; i < n_threads; i++)
    {
      threads[i].registry = registry;
      threads[i].url = url;
      threads[i].stock_key = argv[2];
      threads[i].sold_key = argv[3];
      threads[i].no_lock = strcmp (argv[5], "1") == 0;
      threads[i].mu = &mu;
      threads[i].cond = &cond;
      threads[i].ready = &ready;
      threads[i].go = &go;
      threads[i].failed = &failed;
      threads[i].records = g_array_new (FALSE, FALSE, sizeof (DemoRecord));
      handles[i] = g_thread_new ("demo-buyer", demo_thread, &threads[i]);
    }
  pthread_mutex_lock (&mu);
  while (ready < n_threads)
    pthread_cond_wait (&cond, &mu);
  pthread_mutex_unlock (&mu);
  write_all (STDOUT_FILENO, &byte, 1);
  if (read_all (STDIN_FILENO, &byte, 1) != 1)
    failed = TRUE; /* the parent went away */
  pthread_mutex_lock (&mu);
  go = TRUE;
  pthread_cond_broadcast (&cond);
  pthread_mutex_unlock (&mu);
  for (i = 0; i < n_threads; i++)
    {
      g_thread_join (handles[i]);
      if (threads[i].error != NULL)
        {
          die_message ("demo worker: %s", threads[i].error);
          status = EXIT_REDIS;
        }
      write_all (STDOUT_FILENO, threads[i].records->data,
                 threads[i].records->len * sizeof (DemoRecord));
      g_array_unref (threads[i].records);
      g_free (threads[i].error);
    }
  g_free (threads);
  g_free (handles);
  if (failed && status == 0)
    status = EXIT_REDIS;
  return status;
}

static gint64
commandstats_total (redisContext *c, GError **error)
{
  redisReply *r = redis_callv (c, error, "INFO", "commandstats", NULL);
  gint64 total = 0;
  const char *p;

  if (r == NULL)
    return -1;
  /* lines are cmdstat_NAME:calls=N,usec=...,rejected_calls=N,failed_calls=N */
  for (p = r->str; p != NULL && (p = strstr (p, ":calls=")) != NULL; p += 7)
    total += g_ascii_strtoll (p + 7, NULL, 10);
  freeReplyObject (r);
  return total;
}

static int
compare_records (gconstpointer a, gconstpointer b)
{
  const DemoRecord *x = a, *y = b;

  return (x->acquired_ns > y->acquired_ns) - (x->acquired_ns < y->acquired_ns);
}

static int
compare_int64 (gconstpointer a, gconstpointer b)
{
  gint64 x = *(const gint64 *) a, y = *(const gint64 *) b;

  return (x > y) - (x < y);
}

static double
percentile_ms (GArray *sorted_ns, double q)
{
  guint idx;

  if (sorted_ns->len == 0)
    return 0.0;
  idx = (guint) ceil (q * sorted_ns->len);
  idx = idx > 0 ? idx - 1 : 0;
  return (double) g_array_index (sorted_ns, gint64, MIN (idx, sorted_ns->len - 1)) / 1e6;
}

static gint64
get_counter (redisContext *c, const char *key, GError **error)
{
  redisReply *r = redis_callv (c, error, "GET", key, NULL);
  gint64 v = 0;

  if (r == NULL)
    return -1;
  if (r->type == REDIS_REPLY_STRING)
    v = g_ascii_strtoll (r->str, NULL, 10);
  freeReplyObject (r);
  return v;
}

static const char demo_usage[] = "demo [OPTION…]";

static int
cmd_demo (int argc, char **argv, const char *self)
{
  static int opt_processes = 4, opt_threads = 4, opt_stock = 10000;
  static gboolean opt_no_lock;
  static const GOptionEntry entries[] = {
    { "url", 'u', 0, G_OPTION_ARG_STRING, &opt_url,
      "Redis server (default: $REDIS_URL, else a private redis-server started for the demo)",
      "URL" },
    { "processes", 'p', 0, G_OPTION_ARG_INT, &opt_processes, "Buyer processes (default: 4)",
      "P" },
    { "threads", 't', 0, G_OPTION_ARG_INT, &opt_threads, "Buyer threads per process (default: 4)",
      "T" },
    { "stock", 's', 0, G_OPTION_ARG_INT, &opt_stock, "Items for sale (default: 10000)", "S" },
    { "no-lock", 0, 0, G_OPTION_ARG_NONE, &opt_no_lock,
      "Buy without the lock, to see the overselling it prevents", NULL },
    { NULL },
  };
  g_autoptr (GError) error = NULL;
  g_autoptr (RedisLockTestServer) server = NULL;
  g_autoptr (GArray) records = g_array_new (FALSE, FALSE, sizeof (DemoRecord));
  g_autoptr (GArray) handoffs = g_array_new (FALSE, FALSE, sizeof (gint64));
  g_autofree char *registry = NULL, *stock_key = NULL, *sold_key = NULL, *stock_text = NULL;
  g_autofree char *threads_text = NULL;
  g_autofree GPid *pids = NULL;
  g_autofree int *in_fds = NULL, *out_fds = NULL;
  g_auto (GStrv) env = NULL;
  const char *url = NULL, *env_url;
  redisContext *c = NULL;
  gint64 calls_before, calls_after, t_start, t_end, sold, stock_left, overlaps = 0, bought = 0;
  int rc, i, started = 0, status = 0;
  guint j;
  redisReply *r;

  rc = parse_options ("demo", demo_usage, "",
                      "Flash sale: P processes x T threads buy from a stock of S items kept in\n"
                      "Redis, each purchase a non-atomic GET / SET / INCR under the lock 'stock'.\n"
                      "Reports items sold, oversold (0 with the lock), Redis commands, lock\n"
                      "hand-off latency and total time.",
                      entries, FALSE, FALSE, &argc, &argv);
  if (rc >= 0)
    return rc;
  if (argc > 1)
    return usage_error ("demo", demo_usage, "unexpected argument '%s'", argv[1]);
  if (opt_processes < 1 || opt_processes > 256)
    return usage_error ("demo", demo_usage, "--processes must be between 1 and 256");
  if (opt_threads < 1 || opt_threads > 256)
    return usage_error ("demo", demo_usage, "--threads must be between 1 and 256");
  if (opt_stock < 0)
    return usage_error ("demo", demo_usage, "--stock must not be negative");

  env_url = g_getenv ("REDIS_URL");
  if (opt_url != NULL)
    url = opt_url;
  else if (env_url != NULL && *env_url != '\0')
    url = env_url;
  else
    {
      server = redis_lock_test_server_new (NULL, &error);
      if (server == NULL)
        {
          if (g_error_matches (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND))
            die_message ("demo: no redis-server found: install redis-server, or give a "
                         "server with --url or REDIS_URL (%s)",
                         error->message);
          else
            die_message ("demo: cannot start a private redis-server: %s", error->message);
          return EXIT_REDIS;
        }
      url = redis_lock_test_server_get_url (server);
    }

  c = redis_open (url, &error);
  if (c == NULL)
    {
      die_message ("demo: %s", error->message);
      return exit_status_for_error (error);
    }
  registry = g_strdup_printf ("redislock-demo-%d", (int) getpid ());
  stock_key = g_strdup_printf ("%s-stock", registry);
  sold_key = g_strdup_printf ("%s-sold", registry);
  stock_text = g_strdup_printf ("%d", opt_stock);
  threads_text = g_strdup_printf ("%d", opt_threads);
  if ((r = redis_callv (c, &error, "SET", stock_key, stock_text, NULL)) == NULL)
    goto redis_failed;
  freeReplyObject (r);
  if ((r = redis_callv (c, &error, "SET", sold_key, "0", NULL)) == NULL)
    goto redis_failed;
  freeReplyObject (r);

  printf ("Flash sale: %d processes x %d threads buying %d items%s\n", opt_processes,
          opt_threads, opt_stock, opt_no_lock ? " WITHOUT the lock" : "");
  fflush (stdout);

  /* Workers are fresh processes (re-executed, not forked), each with its own registry. */
  env = g_get_environ ();
  env = g_environ_setenv (env, "REDIS_URL", url, TRUE);
  pids = g_new0 (GPid, opt_processes);
  in_fds = g_new0 (int, opt_processes);
  out_fds = g_new0 (int, opt_processes);
  for (i = 0; i < opt_processes; i++)
    {
      const char *wargv[] = { self, DEMO_WORKER_MODE, registry, stock_key, sold_key,
                              threads_text, opt_no_lock ? "1" : "0", NULL };

      if (!g_spawn_async_with_pipes (NULL, (char **) wargv, env, G_SPAWN_DO_NOT_REAP_CHILD, NULL,
                                     NULL, &pids[i], &in_fds[i], &out_fds[i], NULL, &error))
        {
          die_message ("demo: cannot start a worker process: %s", error->message);
          status = EXIT_REDIS;
          break;
        }
      started++;
    }
  for (i = 0; i < started; i++)
    {
      char byte = 0;

      if (read_all (out_fds[i], &byte, 1) != 1 || byte != 'R')
        status = EXIT_REDIS;
    }
  calls_before = commandstats_total (c, &error);
  if (calls_before < 0)
    status = EXIT_REDIS;
  t_start = monotonic_ns ();
  for (i = 0; i < started; i++)
    {
      if (status == 0)
        write_all (in_fds[i], "G", 1);
      close (in_fds[i]); /* EOF without a byte: the worker gives up */
    }
  for (i = 0; i < started; i++)
    {
      DemoRecord rec;
      int wstatus = 0;

      while (read_all (out_fds[i], &rec, sizeof rec) == (gssize) sizeof rec)
        g_array_append_val (records, rec);
      close (out_fds[i]);
      while (waitpid (pids[i], &wstatus, 0) < 0 && errno == EINTR)
        ;
      g_spawn_close_pid (pids[i]);
      if (!WIFEXITED (wstatus) || WEXITSTATUS (wstatus) != 0)
        status = EXIT_REDIS;
    }
  t_end = monotonic_ns ();
  if (status != 0)
    {
      die_message ("demo: a worker failed");
      goto cleanup;
    }
  calls_after = commandstats_total (c, &error);
  sold = get_counter (c, sold_key, &error);
  stock_left = get_counter (c, stock_key, &error);
  if (calls_after < 0 || sold < 0 || stock_left < 0)
    goto redis_failed;

  g_array_sort (records, compare_records);
  for (j = 0; j < records->len; j++)
    {
      const DemoRecord *rec = &g_array_index (records, DemoRecord, j);

      bought += rec->bought;
      if (j > 0)
        {
          gint64 gap = rec->acquired_ns - g_array_index (records, DemoRecord, j - 1).released_ns;

          if (gap < 0)
            overlaps++;
          else
            g_array_append_val (handoffs, gap);
        }
    }
  g_array_sort (handoffs, compare_int64);

  printf ("  sold:           %" G_GINT64_FORMAT "\n", sold);
  printf ("  oversold:       %" G_GINT64_FORMAT "\n", MAX (sold - opt_stock, 0));
  printf ("  stock left:     %" G_GINT64_FORMAT "\n", stock_left);
  printf ("  overlapping holds: %" G_GINT64_FORMAT "\n", overlaps);
  printf ("  redis commands: %" G_GINT64_FORMAT " (%.1f per item sold)\n",
          calls_after - calls_before, sold > 0 ? (double) (calls_after - calls_before) / sold : 0.0);
  if (!opt_no_lock)
    printf ("  hand-off p50:   %.3f ms\n  hand-off p99:   %.3f ms\n", percentile_ms (handoffs, 0.50),
            percentile_ms (handoffs, 0.99));
  printf ("  total time:     %.3f s\n", (double) (t_end - t_start) / 1e9);
  if (!opt_no_lock && (sold != opt_stock || overlaps > 0 || bought != sold))
    {
      die_message ("demo: the lock did not keep the sale consistent");
      status = 1;
    }
  goto cleanup;

redis_failed:
  die_message ("demo: %s", error ? error->message : "Redis error");
  status = EXIT_REDIS;
cleanup:
  if (c != NULL)
    {
      r = redis_callv (c, NULL, "DEL", stock_key, sold_key, NULL);
      if (r != NULL)
        freeReplyObject (r);
      redisFree (c);
    }
  return status;
}

/* ------------------------------------------------------------------------------------ */
/* main                                                                                  */

static const char main_help[] =
  "Usage: redislock COMMAND [OPTION…] [ARG…]\n"
  "\n"
  "Named locks shared through Redis: flock(1) for processes on many machines.\n"
  "\n"
  "Commands:\n"
  "  run [OPTION…] [--] NAME [--] COMMAND [ARG…]\n"
  "                                          hold lock NAME while COMMAND runs\n"
  "  status [OPTION…] NAME…                  show whether locks are held, by whom, how long\n"
  "  list [OPTION…]                          show the locks held in a registry\n"
  "  demo [OPTION…]                          flash-sale demonstration of the lock\n"
  "  help [COMMAND]                          show help for a command\n"
  "\n"
  "Options:\n"
  "  -h, --help       show this help\n"
  "  -V, --version    show the version\n"
  "\n"
  "Common command options:\n"
  "  -u, --url URL        Redis server (default: $REDIS_URL, else " DEFAULT_URL ")\n"
  "  -r, --registry KEY   lock NAME is the Redis key KEY:NAME (default: " DEFAULT_REGISTRY ")\n"
  "\n"
  "Examples:\n"
  "  redislock run --wait 10s nightly-backup -- ./backup.sh\n"
  "  redislock status nightly-backup\n"
  "  redislock list --json\n"
  "\n"
  "Run 'redislock COMMAND --help' for the options of a command; see redislock(1).\n";

int
main (int argc, char **argv)
{
  static char *help_argv[] = { NULL, (char *) "--help", NULL };
  const char *cmd, *argv0 = argv[0];
  g_autofree char *self = NULL;

  setlocale (LC_ALL, "");
  g_log_set_writer_func (redacting_log_writer, NULL, NULL);
  /* A write to a dropped Redis connection must be an error, not a death. */
  pipe_disposition_ignored = signal_is_ignored (SIGPIPE);
  signal (SIGPIPE, SIG_IGN);

  if (argc >= 2 && strcmp (argv[1], DEMO_WORKER_MODE) == 0)
    return demo_worker (argc - 1, argv + 1);

  g_set_prgname ("redislock");
  if (argc < 2)
    {
      fputs (main_help, stderr);
      return EXIT_USAGE;
    }
  cmd = argv[1];
  if (strcmp (cmd, "-h") == 0 || strcmp (cmd, "--help") == 0 || strcmp (cmd, "-?") == 0)
    {
      fputs (main_help, stdout);
      return 0;
    }
  if (strcmp (cmd, "-V") == 0 || strcmp (cmd, "--version") == 0)
    {
      printf ("redislock %s\n", REDIS_LOCK_VERSION_S);
      return 0;
    }
  if (strcmp (cmd, "help") == 0)
    {
      if (argc < 3)
        {
          fputs (main_help, stdout);
          return 0;
        }
      if (argc > 3)
        return usage_error ("help", "help [COMMAND]", "too many arguments");
      help_argv[0] = argv[2];
      argc = 2;
      argv = help_argv;
      cmd = argv[0];
    }
  else
    {
      argc--;
      argv++;
    }

  if (strcmp (cmd, "run") == 0)
    return cmd_run (argc, argv);
  if (strcmp (cmd, "status") == 0)
    return cmd_status (argc, argv);
  if (strcmp (cmd, "list") == 0)
    return cmd_list (argc, argv);
  if (strcmp (cmd, "demo") == 0)
    {
      self = g_file_read_link ("/proc/self/exe", NULL);
      return cmd_demo (argc, argv, self ? self : argv0);
    }
  fprintf (stderr, "redislock: unknown command '%s'\n", cmd);
  fprintf (stderr, "Usage: redislock COMMAND [OPTION…] [ARG…]\n");
  fprintf (stderr, "Try 'redislock --help' for more information.\n");
  return EXIT_USAGE;
}
