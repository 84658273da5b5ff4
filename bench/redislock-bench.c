/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* redislock-bench.c: what a redislock lock costs, measured against what Redis itself costs.
 *
 * A Redis-backed lock can never be faster than the Redis round trips it needs, so every
 * figure here is put next to a baseline measured in the same run on the same server,
 * most of them built from the round trip of an EVALSHA of a script that does nothing
 * (`return 1`) on a plain hiredis connection. An outermost lock+unlock needs two such
 * round trips (acquire script, release script), so it is compared with two raw calls
 * made back to back; a cross-process hand-off needs the release, the unlock
 * notification and the waiter's acquire, so it is compared with one round trip and with
 * the same ping-pong done by hand (PUBLISH, a blocked SUBSCRIBE reader, one EVALSHA);
 * eight threads on eight names can at best reach half the eight-connection EVALSHA rate;
 * a watchdog tick is compared with one pipelined batch of as many raw calls. What the
 * library promises to do without Redis (re-entry, the lock cache) is compared with the
 * GLib structure a user would otherwise reach for (GRecMutex, a GHashTable of names) and
 * checked against the registry's own counters (redis_lock_registry_get_stats), so that
 * "no Redis traffic" is proved, not assumed.
 *
 * Benchmarks like this one usually run on small shared machines where the speed of a
 * round trip drifts by a factor of two within seconds. So each baseline is measured
 * interleaved with the figure it divides (alternating blocks or rounds, or during the
 * holder's idle time in the hand-off), not once at the start: the ratios then hold even
 * when the absolute figures move. Latencies are timed one operation at a time on
 * CLOCK_MONOTONIC and reported as p50/p99; operations too short for that (re-entry, tens
 * of ns) are timed in batches and the batch means give the percentiles.
 *
 * The program starts its own redis-server on a Unix socket (redislock-test.h) unless
 * REDIS_URL or --url names one, uses a registry key unique to the run, prints a table
 * (or JSON with --json), and prints "n/a" with the reason for any figure it cannot
 * produce instead of stopping. The cross-process sections run more copies of this
 * program (`--child=SECTION`, the child of that section's entry in section-list.h).
 *
 * Each section is a file of its own, section-NAME.c, listed in section-list.h, so that
 * a figure and its baseline can be read together without the rest. This file is the
 * run around them: the command line, the server, the sizes of a full and a --quick
 * run, the reference round trip measured before any section, and the loop over the
 * table. What the sections share (clocks and percentiles, threads, plain hiredis
 * connections, the report) is declared in bench.h.
 */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "bench.h"
#include "section-list.h"

/* --- The run ----------------------------------------------------------------------- */

/* The reference round trip (and the server's version), measured before any section. */
static void
measure_reference (Bench *b)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (RawConn) conn = NULL;
  g_autofree gint64 *samples = g_new (gint64, b->raw_calls);
  redisReply *r;
  guint i;

  conn = raw_open (&b->target, &error);
  if (conn == NULL)
    goto fail;
  r = raw_command (conn->c, &error, "INFO server");
  if (r == NULL)
    goto fail;
  if (r->type == REDIS_REPLY_STRING)
    {
      const char *v = strstr (r->str, "redis_version:");

      if (v != NULL)
        b->redis_version = g_strndup (v + 14, strcspn (v + 14, "\r\n"));
    }
  freeReplyObject (r);

  for (i = 0; i < 1000; i++)
    if (!raw_call (conn, &error))
      goto fail;
  for (i = 0; i < b->raw_calls; i++)
    {
      gint64 t0 = now_ns ();

      if (!raw_call (conn, &error))
        goto fail;
      samples[i] = now_ns () - t0;
    }
  b->raw = dist_of (samples, b->raw_calls, 1);
  return;

fail:
  b->raw_error = g_strdup (error->message);
}

static void
read_machine (Bench *b)
{
  g_autofree char *cpuinfo = NULL;
  struct utsname u;

  b->nproc = sysconf (_SC_NPROCESSORS_ONLN);
  if (g_file_get_contents ("/proc/cpuinfo", &cpuinfo, NULL, NULL))
    {
      const char *p = strstr (cpuinfo, "model name");

      if (p != NULL && (p = strchr (p, ':')) != NULL)
        b->cpu_model = g_strstrip (g_strndup (p + 1, strcspn (p + 1, "\n")));
    }
  if (b->cpu_model == NULL)
    b->cpu_model = g_strdup ("unknown CPU");
  if (uname (&u) == 0)
    b->kernel = g_strdup_printf ("%s %s %s", u.sysname, u.release, u.machine);
  else
    b->kernel = g_strdup ("unknown kernel");
}

static void
size_run (Bench *b)
{
  b->raw_calls = b->quick ? 5000 : 20000;
  b->raw8_calls = b->quick ? 1000 : 5000;
  b->reentrant_pairs = b->quick ? 200000 : 2000000;
  b->uncontended_pairs = b->quick ? 1000 : 5000;
  b->handoffs = b->quick ? 200 : 1000;
  b->spin_handoffs = b->quick ? 20 : 50;
  b->independent_pairs = b->quick ? 300 : 1000;
  b->independent_rounds = b->quick ? 2 : 3;
  b->contention_sections = b->quick ? 300 : 1000;
  b->watchdog_leases = 10000;
  b->memory_names = b->quick ? 100000 : 1000000;
  b->bounded_capacity = 100000;
  b->bounded_names = b->quick ? 200000 : 1000000;
}

/* Where the run's Redis is: --url, else $REDIS_URL, else a private redis-server. Then
 * the registry key of the run, and the reference round trip. FALSE after printing the
 * error when no server could be started. */
static gboolean
bench_connect (Bench *b, const char *opt_url)
{
  g_autoptr (GError) error = NULL;

  if (opt_url != NULL)
    b->url = g_strdup (opt_url);
  else if (g_getenv ("REDIS_URL") != NULL && *g_getenv ("REDIS_URL") != '\0')
    b->url = g_strdup (g_getenv ("REDIS_URL"));
  else
    {
      b->server = redis_lock_test_server_new (NULL, &error);
      if (b->server == NULL)
        {
          g_printerr ("redislock-bench: cannot start a redis-server: %s\n"
                      "(set REDIS_URL or pass --url to use a running one)\n",
                      error->message);
          return FALSE;
        }
      b->own_server = TRUE;
      b->url = g_strdup (redis_lock_test_server_get_url (b->server));
    }
  b->key = g_strdup_printf ("redislock-bench:%d:%08x", (int)getpid (), g_random_int ());

  if (!raw_target_parse (b->url, &b->target, &error))
    b->raw_error = g_strdup (error->message);
  else
    measure_reference (b);
  return TRUE;
}

/* Runs the sections of the table, all of them or those in @only, printing each as soon
 * as it is done unless the output is JSON. */
static void
run_sections (Bench *b, GStrv only)
{
  guint i;

  for (i = 0; i < G_N_ELEMENTS (section_table); i++)
    {
      Section *s;
      gint64 t0;

      if (only != NULL && !g_strv_contains ((const char *const *)only, section_table[i].name))
        continue;
      s = section_new (section_table[i].name, section_table[i].title, b->quick);
      t0 = now_ns ();
      section_table[i].func (b, s);
      s->seconds = (double)(now_ns () - t0) / 1e9;
      g_ptr_array_add (b->sections, s);
      if (!b->json)
        print_section (s);
    }
}

static void
bench_clear (Bench *b)
{
  redis_lock_test_server_free (b->server);
  g_ptr_array_unref (b->sections);
  g_free (b->url);
  g_free (b->key);
  g_free (b->self_path);
  g_free (b->redis_version);
  g_free (b->cpu_model);
  g_free (b->kernel);
  g_free (b->raw_error);
  raw_target_clear (&b->target);
}

/* --- The command line -------------------------------------------------------------- */

typedef struct
{
  char *url;
  char *only;
  gboolean quick;
  gboolean json;
  gboolean list;
  gboolean no_key_tracking;
  gboolean no_deadlock_detection;
  gboolean wait_queue;
  /* a child process of a section (hidden options) */
  char *child;
  char *child_mode;
  char *child_name;
  gint child_steps;
  gint child_hold_us;
} Options;

static void
options_clear (Options *o)
{
  g_free (o->url);
  g_free (o->only);
  g_free (o->child);
  g_free (o->child_mode);
  g_free (o->child_name);
}

/* Parses the command line into @o; FALSE after printing the error. The section names
 * in --help come from the table. */
static gboolean
options_parse (Options *o, int *argc, char ***argv)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (GOptionContext) context = NULL;
  g_autoptr (GString) description = g_string_new ("Sections:");
  GOptionEntry entries[] = {
    { "url", 0, 0, G_OPTION_ARG_STRING, &o->url,
      "Redis to use (redis:// or unix://); default $REDIS_URL, else a private redis-server",
      "URL" },
    { "quick", 0, 0, G_OPTION_ARG_NONE, &o->quick, "Fast run with smaller counts", NULL },
    { "json", 0, 0, G_OPTION_ARG_NONE, &o->json, "Print the figures as JSON", NULL },
    { "only", 0, 0, G_OPTION_ARG_STRING, &o->only, "Run only these sections", "NAME[,NAME]" },
    { "list", 0, 0, G_OPTION_ARG_NONE, &o->list, "List the sections", NULL },
    { "no-key-tracking", 0, 0, G_OPTION_ARG_NONE, &o->no_key_tracking,
      "Run the library's registries with key tracking off (on by default)", NULL },
    { "no-deadlock-detection", 0, 0, G_OPTION_ARG_NONE, &o->no_deadlock_detection,
      "Run the library's registries with deadlock detection off (on by default)", NULL },
    { "wait-queue", 0, 0, G_OPTION_ARG_NONE, &o->wait_queue,
      "Run the library's registries with the wait queue on (off by default)", NULL },
    { "child", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_STRING, &o->child, NULL, NULL },
    { "child-mode", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_STRING, &o->child_mode, NULL, NULL },
    { "child-name", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_STRING, &o->child_name, NULL, NULL },
    { "child-steps", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_INT, &o->child_steps, NULL, NULL },
    { "child-hold-us", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_INT, &o->child_hold_us, NULL, NULL },
    { NULL, 0, 0, G_OPTION_ARG_NONE, NULL, NULL, NULL },
  };
  guint i;

  memset (o, 0, sizeof *o);
  o->child_hold_us = HANDOFF_HOLD_US;
  for (i = 0; i < G_N_ELEMENTS (section_table); i++)
    g_string_append_printf (description, " %s", section_table[i].name);
  g_string_append_c (description, '\n');
  context = g_option_context_new ("- measure redislock against raw Redis round trips");
  g_option_context_add_main_entries (context, entries, NULL);
  g_option_context_set_description (context, description->str);
  if (!g_option_context_parse (context, argc, argv, &error))
    {
      g_printerr ("redislock-bench: %s\n", error->message);
      return FALSE;
    }
  return TRUE;
}

/* The names given to --only, each checked against the table; NULL after printing the
 * error when one is unknown. */
static GStrv
only_parse (const char *opt_only)
{
  g_auto (GStrv) only = g_strsplit (opt_only, ",", -1);
  guint i, j;

  for (j = 0; only[j] != NULL; j++)
    {
      gboolean known = FALSE;

      g_strstrip (only[j]);
      for (i = 0; i < G_N_ELEMENTS (section_table); i++)
        known = known || g_strcmp0 (only[j], section_table[i].name) == 0;
      if (!known)
        {
          g_printerr ("redislock-bench: no section '%s' (see --list)\n", only[j]);
          return NULL;
        }
    }
  return g_steal_pointer (&only);
}

static int
list_sections (void)
{
  guint i;

  for (i = 0; i < G_N_ELEMENTS (section_table); i++)
    g_print ("%-14s %s\n", section_table[i].name, section_table[i].title);
  return 0;
}

/* The benchmark proper: every section of the table, or those of --only. */
static int
run (const Options *opt, const char *argv0)
{
  g_auto (GStrv) only = NULL;
  Bench bench, *b = &bench;
  gint64 start;

  if (opt->only != NULL && (only = only_parse (opt->only)) == NULL)
    return 2;

  signal (SIGPIPE, SIG_IGN);
  memset (b, 0, sizeof *b);
  b->quick = opt->quick;
  b->json = opt->json;
  b->sections = g_ptr_array_new_with_free_func (section_free);
  b->self_path = g_file_read_link ("/proc/self/exe", NULL);
  if (b->self_path == NULL)
    b->self_path = g_strdup (argv0);
  size_run (b);
  read_machine (b);
  start = now_ns ();
  if (!bench_connect (b, opt->url))
    {
      bench_clear (b);
      return 1;
    }

  if (!b->json)
    print_header (b);
  run_sections (b, only);
  if (b->json)
    print_json (b, (double)(now_ns () - start) / 1e9);
  else
    g_print ("\ntotal %.1f s\n", (double)(now_ns () - start) / 1e9);
  bench_clear (b);
  return 0;
}

/* A child process of a section (`--child=SECTION`): the child of that entry of the
 * table, with the values of the other hidden options. */
static int
run_child (const Options *opt)
{
  guint i;

  for (i = 0; i < G_N_ELEMENTS (section_table); i++)
    if (section_table[i].child != NULL && strcmp (opt->child, section_table[i].name) == 0)
      return section_table[i].child (opt->child_mode, opt->child_name,
                                     (guint)MAX (opt->child_steps, 0), opt->child_hold_us);
  g_printerr ("redislock-bench: no section '%s' with child processes\n", opt->child);
  return 2;
}

int
main (int argc, char **argv)
{
  Options opt;
  int status;

  if (!options_parse (&opt, &argc, &argv))
    status = 2;
  else if (opt.child != NULL)
    status = run_child (&opt);
  else if (opt.list)
    status = list_sections ();
  else
    {
      /* Read by bench_registry_settings(), here and in the child processes. */
      if (opt.no_key_tracking)
        g_setenv ("REDISLOCK_BENCH_KEY_TRACKING", "off", TRUE);
      if (opt.no_deadlock_detection)
        g_setenv ("REDISLOCK_BENCH_DEADLOCK_DETECTION", "off", TRUE);
      if (opt.wait_queue)
        g_setenv ("REDISLOCK_BENCH_WAIT_QUEUE", "on", TRUE);
      status = run (&opt, argv[0]);
    }
  options_clear (&opt);
  return status;
}
