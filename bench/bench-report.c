/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* bench-report.c: the figures of redislock-bench and the two ways it prints them.
 *
 * A section only adds rows (a figure, its ratio to the baseline it is compared with, a
 * target when there is one), n/a rows with the reason a figure could not be produced,
 * and notes on how the figures were made; it never prints. The run then prints each
 * section as a table as soon as it is done, or, with --json, the whole run as one
 * document at the end. Keeping the rows as data is what lets the two outputs carry the
 * same figures, and lets a section report a failure in one row and carry on.
 */
#include <math.h>
#include <stdarg.h>

#include "bench.h"
#include "report.h"

/* --- Rows and sections ------------------------------------------------------------- */

static void
row_free (gpointer p)
{
  Row *r = p;

  g_free (r->metric);
  g_free (r->ratio_to);
  g_free (r->target);
  g_free (r->note);
  g_free (r);
}

Section *
section_new (const char *name, const char *title, gboolean quick)
{
  Section *s = g_new0 (Section, 1);

  s->name = name;
  s->title = g_strdup (title);
  s->command = g_strdup_printf ("bench/redislock-bench --only %s%s", name, quick ? " --quick" : "");
  s->rows = g_ptr_array_new_with_free_func (row_free);
  s->notes = g_ptr_array_new_with_free_func (g_free);
  return s;
}

void
section_free (gpointer p)
{
  Section *s = p;

  g_free (s->title);
  g_free (s->command);
  g_ptr_array_unref (s->rows);
  g_ptr_array_unref (s->notes);
  g_free (s);
}

void
add_row (Section *s, const char *metric, double value, const char *unit, int decimals, double ratio,
         const char *ratio_to, const char *target, gboolean met)
{
  Row *r = g_new0 (Row, 1);

  r->metric = g_strdup (metric);
  r->value = value;
  r->unit = unit;
  r->decimals = decimals;
  r->ratio = ratio;
  r->ratio_to = g_strdup (isnan (ratio) ? NULL : ratio_to);
  r->target = g_strdup (target);
  r->met = target == NULL || isnan (value) ? -1 : (met ? 1 : 0);
  g_ptr_array_add (s->rows, r);
}

void
add_na (Section *s, const char *metric, const char *format, ...)
{
  Row *r = g_new0 (Row, 1);
  va_list ap;

  r->metric = g_strdup (metric);
  r->value = NAN;
  r->unit = "";
  r->ratio = NAN;
  r->met = -1;
  va_start (ap, format);
  r->note = g_strdup_vprintf (format, ap);
  va_end (ap);
  g_ptr_array_add (s->rows, r);
}

void
add_note (Section *s, const char *format, ...)
{
  va_list ap;

  va_start (ap, format);
  g_ptr_array_add (s->notes, g_strdup_vprintf (format, ap));
  va_end (ap);
}

/* --- The table --------------------------------------------------------------------- */

double
raw_us (Bench *b)
{
  return b->raw_error != NULL ? NAN : b->raw.p50 / 1000.0;
}

void
print_header (Bench *b)
{
  g_print ("redislock-bench %s, %s run\n", REDIS_LOCK_VERSION_S,
           b->quick ? "quick (--quick)" : "full");
  g_print ("machine:  %ld CPUs online, %s, %s\n", b->nproc, b->cpu_model, b->kernel);
  g_print ("redis:    redis-server %s, %s\n",
           b->redis_version ? b->redis_version : "(version unknown)",
           b->own_server ? "private, on a Unix socket (redislock-test.h)"
                         : "external (REDIS_URL / --url)");
  g_print ("registry: key \"%s\", key tracking %s\n", b->key,
           g_strcmp0 (g_getenv ("REDISLOCK_BENCH_KEY_TRACKING"), "off") == 0
               ? "off (--no-key-tracking)"
               : "on (the default)");
  if (b->raw_error != NULL)
    g_print ("baseline: n/a (%s); ratios to it are n/a\n", b->raw_error);
  else
    g_print ("baseline: raw EVALSHA round trip p50 %.1f us at the start; each section "
             "measures its own next to its figures\n",
             b->raw.p50 / 1000);
  g_print ("full run: make bench    one section: bench/redislock-bench --only NAME%s\n",
           b->quick ? " --quick" : "");
}

static char *
format_value (double v, const char *unit, int decimals)
{
  if (isnan (v))
    return g_strdup ("n/a");
  return g_strdup_printf ("%.*f%s%s", decimals, v, *unit ? " " : "", unit);
}

void
print_section (Section *s)
{
  guint i;

  g_print ("\n[%s] %s\n", s->name, s->title);
  g_print ("  reproduce: %s\n", s->command);
  g_print ("  %-30s %16s  %-34s %s\n", "figure", "value", "ratio to baseline", "target");
  for (i = 0; i < s->rows->len; i++)
    {
      Row *r = g_ptr_array_index (s->rows, i);
      g_autofree char *value = format_value (r->value, r->unit, r->decimals);
      g_autofree char *ratio = NULL;
      g_autofree char *target = NULL;

      if (r->note != NULL)
        {
          g_print ("  %-30s %16s  %s\n", r->metric, "n/a", r->note);
          continue;
        }
      ratio
          = isnan (r->ratio) ? g_strdup ("") : g_strdup_printf ("%.2fx %s", r->ratio, r->ratio_to);
      if (r->target != NULL)
        target = g_strdup_printf ("%s %s", r->target, r->met < 0 ? "" : r->met ? "ok" : "MISSED");
      g_print ("  %-30s %16s  %-34s %s\n", r->metric, value, ratio, target ? target : "");
    }
  for (i = 0; i < s->notes->len; i++)
    g_print ("  - %s\n", (char *)g_ptr_array_index (s->notes, i));
  g_print ("  (%.1f s)\n", s->seconds);
}

/* --- JSON -------------------------------------------------------------------------- */

/* One figure, the @j-th of its section. */
static void
json_row (GString *out, const Row *r, guint j)
{
  g_string_append (out, j ? ",\n       {\"figure\": " : "\n       {\"figure\": ");
  rl_json_append_string (out, r->metric);
  g_string_append (out, ", \"value\": ");
  rl_json_append_number (out, r->value);
  g_string_append (out, ", \"unit\": ");
  rl_json_append_string (out, r->unit);
  g_string_append (out, ", \"ratio\": ");
  rl_json_append_number (out, r->ratio);
  g_string_append (out, ", \"ratio_to\": ");
  rl_json_append_string (out, r->ratio_to);
  g_string_append (out, ", \"target\": ");
  rl_json_append_string (out, r->target);
  g_string_append_printf (out, ", \"met\": %s", r->met < 0 ? "null" : r->met ? "true" : "false");
  if (r->note != NULL)
    {
      g_string_append (out, ", \"na_reason\": ");
      rl_json_append_string (out, r->note);
    }
  g_string_append_c (out, '}');
}

/* One section, the @i-th of the run. */
static void
json_section (GString *out, const Section *s, guint i)
{
  guint j;

  g_string_append (out, i ? ",\n    {\"name\": " : "\n    {\"name\": ");
  rl_json_append_string (out, s->name);
  g_string_append (out, ", \"title\": ");
  rl_json_append_string (out, s->title);
  g_string_append (out, ", \"command\": ");
  rl_json_append_string (out, s->command);
  g_string_append (out, ", \"seconds\": ");
  rl_json_append_number (out, s->seconds);
  g_string_append (out, ",\n     \"figures\": [");
  for (j = 0; j < s->rows->len; j++)
    json_row (out, g_ptr_array_index (s->rows, j), j);
  g_string_append (out, "],\n     \"notes\": [");
  for (j = 0; j < s->notes->len; j++)
    {
      if (j)
        g_string_append (out, ", ");
      rl_json_append_string (out, g_ptr_array_index (s->notes, j));
    }
  g_string_append (out, "]}");
}

void
print_json (Bench *b, double seconds)
{
  GString *out = g_string_new ("{\n  \"program\": \"redislock-bench\",\n  \"version\": ");
  guint i;

  rl_json_append_string (out, REDIS_LOCK_VERSION_S);
  g_string_append_printf (out, ",\n  \"quick\": %s,\n  \"machine\": {\"nproc\": %ld, \"cpu\": ",
                          b->quick ? "true" : "false", b->nproc);
  rl_json_append_string (out, b->cpu_model);
  g_string_append (out, ", \"kernel\": ");
  rl_json_append_string (out, b->kernel);
  g_string_append (out, "},\n  \"redis\": {\"version\": ");
  rl_json_append_string (out, b->redis_version);
  g_string_append_printf (
      out, ", \"server\": \"%s\"},\n  \"registry_key\": ", b->own_server ? "private" : "external");
  rl_json_append_string (out, b->key);
  g_string_append (out, ",\n  \"reference_round_trip\": {\"p50_us\": ");
  rl_json_append_number (out, raw_us (b));
  g_string_append (out, ", \"p99_us\": ");
  rl_json_append_number (out, b->raw_error != NULL ? NAN : b->raw.p99 / 1000);
  g_string_append (out, ", \"mean_us\": ");
  rl_json_append_number (out, b->raw_error != NULL ? NAN : b->raw.mean / 1000);
  g_string_append (out, ", \"error\": ");
  rl_json_append_string (out, b->raw_error);
  g_string_append (out, "},\n  \"seconds\": ");
  rl_json_append_number (out, seconds);
  g_string_append (out, ",\n  \"sections\": [");
  for (i = 0; i < b->sections->len; i++)
    json_section (out, g_ptr_array_index (b->sections, i), i);
  g_string_append (out, "\n  ]\n}\n");
  g_print ("%s", out->str);
  g_string_free (out, TRUE);
}
