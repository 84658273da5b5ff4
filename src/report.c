/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* report.c: JSON output and percentiles, for the command-line tool and the benchmark.
 *
 * Both print figures for people and, with --json, for scripts; the library itself
 * prints nothing. One JSON string writer (valid UTF-8 out whatever bytes come in:
 * lock names and holder values are bytes from Redis) and one percentile rule
 * (nearest rank) serve both, from the private convenience library they link.
 */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "report.h"

void
rl_json_append_string (GString *out, const char *s)
{
  /* The characters written as a backslash and one more character, and that character. */
  static const char escaped[] = "\"\\\n\t\r";
  static const char escapes[] = "\"\\ntr";
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
      const char *at;

      if (c == (gunichar) -1 || c == (gunichar) -2)
        {
          g_string_append (out, "\\ufffd");
          p++;
          continue;
        }
      at = c < 0x80 ? strchr (escaped, (int) c) : NULL;
      if (at != NULL)
        {
          g_string_append_c (out, '\\');
          g_string_append_c (out, escapes[at - escaped]);
        }
      else if (c < 0x20 || c == 0x7f)
        g_string_append_printf (out, "\\u%04x", c);
      else
        g_string_append_len (out, p, g_utf8_next_char (p) - p);
      p = g_utf8_next_char (p);
    }
  g_string_append_c (out, '"');
}

void
rl_json_append_number (GString *out, double v)
{
  char buf[G_ASCII_DTOSTR_BUF_SIZE];

  if (isnan (v) || isinf (v))
    g_string_append (out, "null");
  else
    g_string_append (out, g_ascii_formatd (buf, sizeof buf, "%.6g", v));
}

gint64
rl_percentile (const gint64 *sorted, guint n, guint per_mille)
{
  guint64 rank = ((guint64) per_mille * n + 999) / 1000;

  g_return_val_if_fail (n > 0, 0);
  if (rank < 1)
    rank = 1;
  return sorted[MIN (rank, n) - 1];
}

static int
compare_int64 (const void *a, const void *b)
{
  gint64 x = *(const gint64 *) a, y = *(const gint64 *) b;

  return (x > y) - (x < y);
}

void
rl_sort_int64 (gint64 *values, guint n)
{
  qsort (values, n, sizeof (gint64), compare_int64);
}
