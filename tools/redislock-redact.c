/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* redislock-redact.c: passwords kept out of every message of the redislock tool.
 *
 * The Redis URL (--url, $REDIS_URL) may carry a password, and error messages, the
 * tool's and the library's (through a GLib log writer), may quote the URL or pieces of
 * it. Every message passes through redact_text(), which hides each secret of those
 * URLs whole or in part, raw or percent-decoded: a URL is shown as the library's
 * rl_url_redact() shows it, and the pieces of its secrets the library's messages may
 * quote (url.h has nothing for arbitrary text) are found by url_secret_spans(), read
 * generously on purpose. A file of its own: a self-contained piece with one job.
 */
#include "config.h"

#include "redislock-tool.h"
#include "url.h"

#include <string.h>

typedef struct
{
  gsize start, end; /* [start, end) */
} Span;

/* Where the secrets of a Redis URL are, as byte ranges of @url: the password of the user
 * info (all of the user info when it has no colon: some clients take a lone user as the
 * password), and the value of every query parameter but those known to hold no secret
 * (public_params: the database, user names, the TLS files and server name, shown as they
 * are: a message about a CA file must name it), whatever the case or percent-encoding of
 * its name (a parameter without a value is covered whole).
 * Read generously, so that a malformed URL, one without a scheme, or a password with
 * unencoded / ? # @ & in it is still covered: the user info runs from after "://" (or the
 * start) to the last @, a parameter to the next &. Ascending, not overlapping. */
static const char *const public_params[]
    = { "db", "username", "sentinel_username", "ca", "cert", "key", "sni", NULL };

static gboolean
is_public_param (const char *name)
{
  for (guint i = 0; public_params[i] != NULL; i++)
    if (strcmp (name, public_params[i]) == 0)
      return TRUE;
  return FALSE;
}

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
              if (is_public_param (folded))
                span.end = span.start;
            }
          if (span.end > span.start)
            g_array_append_val (spans, span);
          p = e + 1;
        }
    }
  return spans;
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

/* The characters that move the split points of a URL when a password holds them raw. */
#define URL_DELIMITERS "@/?#&=:%,"

/* @text with every secret of the Redis URLs the tool may use (--url, $REDIS_URL) hidden:
 * each URL itself is shown as rl_url_redact() gives it, and any other piece of text
 * that comes from a secret, whole or in part, raw or percent-decoded, becomes "***".
 * A URL parser that splits a malformed URL elsewhere than url_secret_spans() does (a
 * password with an unencoded '/' read as a port, say) still cannot leak it: the
 * fragments it quotes are hidden too. */
char *
redact_text (const char *text)
{
  g_autoptr (GPtrArray) urls = g_ptr_array_new ();
  g_autoptr (GPtrArray) owned = g_ptr_array_new_with_free_func (g_free);
  g_autoptr (GArray) sources = g_array_new (FALSE, FALSE, sizeof (SecretSource));
  g_autoptr (GPtrArray) span_sets = g_ptr_array_new_with_free_func ((GDestroyNotify) g_array_unref);
  GString *out;
  char *work = g_strdup (text);
  gsize i, n;
  guint u, k;

  /* every --url (a quorum has several), then $REDIS_URL */
  for (u = 0; opt_urls != NULL && opt_urls[u] != NULL; u++)
    g_ptr_array_add (urls, opt_urls[u]);
  if (opt_url != NULL && (opt_urls == NULL || opt_url != opt_urls[0]))
    g_ptr_array_add (urls, opt_url);
  g_ptr_array_add (urls, (gpointer) g_getenv ("REDIS_URL"));
  for (u = 0; u < urls->len; u++)
    {
      const char *url = g_ptr_array_index (urls, u);
      GArray *spans;

      if (url == NULL || *url == '\0')
        continue;
      spans = url_secret_spans (url);
      g_ptr_array_add (span_sets, spans);
      if (spans->len == 0)
        continue;
      /* the URL itself, redacted */
      {
        g_autofree char *shown = rl_url_redact (url);
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
      /* A lone character that splits URLs is shown unless it is a whole secret: the
       * messages quote it in their advice on writing it in a password ("write “@” as
       * %40"), which tells a reader nothing about the password. */
      if (best == 0 || (best == 1 && !whole && strchr (URL_DELIMITERS, work[i]) != NULL)
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
GLogWriterOutput
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
