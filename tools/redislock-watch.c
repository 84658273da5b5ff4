/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* redislock-watch.c: `redislock watch`, a live view of a registry's locks.
 *
 * Every --interval (100 ms by default) it reads the registry's leases
 * (redis_lock_registry_list_leases()), waiters (redis_lock_registry_list_waiters())
 * and each held lock's wait queue (redis_lock_registry_list_queue())
 * and draws one frame: a line per lock with its name, its holder (host:pid), a bar of
 * the TTL left (against the longest TTL seen for that holder), how many processes
 * stand in its line, its waiters and the
 * hand-offs per second (new holders seen over the last few seconds: a hand-off
 * between two threads of one process keeps the lease, and so its holder, and is not
 * counted). A read-write lock's writer and readers and a semaphore's permits are lines
 * of their own, named for what they hold (redislock-family.c); the family's keys that
 * hold nothing are not shown. The frame fits the terminal, and is drawn again at once when the terminal
 * is resized (SIGWINCH).
 *
 * The terminal is driven with plain ANSI escapes and termios, so the tool needs no
 * curses library: the alternate screen and a hidden cursor while it runs, keys read
 * without echo or line buffering, and everything put back on every way out (q, Ctrl-C,
 * SIGTERM, SIGHUP, an error). --once prints one frame as plain text and --json one JSON
 * document, for scripts and for terminals the live view cannot drive.
 *
 * What a frame shows is computed from one snapshot (render_frame()), apart from the
 * terminal code, so that the three outputs cannot disagree.
 */
#include "config.h"

#include "redislock-tool.h"
#include "report.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

/* Hand-offs per second are counted over this window. */
#define RATE_WINDOW_US (5 * G_USEC_PER_SEC)
#define BAR_WIDTH 10

/* What the watch remembers of a lock between frames. */
typedef struct
{
  char *owner;       /* the holder seen last; NULL: free */
  gint64 max_ttl_ms; /* the longest TTL seen for that holder: the bar's full length */
  GArray *changes;   /* gint64: monotonic µs of each new holder seen, in the window */
} Track;

static void
track_free (gpointer p)
{
  Track *t = p;

  g_free (t->owner);
  g_array_unref (t->changes);
  g_free (t);
}

/* One lock of a frame. */
typedef struct
{
  const char *name;
  const RedisLockLeaseInfo *lease; /* NULL: free */
  GPtrArray *waiters;              /* RedisLockWaiterInfo, borrowed */
  guint in_line;                   /* processes in its wait queue */
  double rate;                     /* hand-offs per second */
  gint64 max_ttl_ms;
} Row;

static void
row_free (gpointer p)
{
  Row *row = p;

  g_ptr_array_unref (row->waiters);
  g_free (row);
}

typedef struct
{
  GHashTable *tracks; /* name -> Track */
  gint64 started;     /* monotonic µs */
  GPtrArray *leases;  /* the last snapshot (RedisLockLeaseInfo) */
  GPtrArray *waiters; /* the last snapshot (RedisLockWaiterInfo) */
  GHashTable *lines;  /* the last snapshot: name -> processes in its wait queue */
  char *error;        /* the last snapshot's failure, or NULL */
} Watch;

static gint64 opt_interval_ms = 100;
static char *opt_interval;
static gboolean opt_once, opt_json;

static const char watch_usage[] = "watch [OPTION…]";

static const GOptionEntry watch_entries[] = {
  { "interval", 'i', 0, G_OPTION_ARG_STRING, &opt_interval,
    "Time between two frames (default 100ms)", "DURATION" },
  { "once", '1', 0, G_OPTION_ARG_NONE, &opt_once, "Print one frame as text and exit", NULL },
  { "json", 'j', 0, G_OPTION_ARG_NONE, &opt_json, "Print one JSON document and exit", NULL },
  { NULL },
};

/* @leases as the watch shows them: a line per hold, named for what it is ("catalog
 * (reader)", "catalog (writer)", "downloads (permit 1 of 3)"); the keys that hold
 * nothing (a semaphore's size and size record, a waiting writer's mark) left out.
 * Frees @leases. */
static GPtrArray *
holds_of (GPtrArray *leases)
{
  g_autoptr (GPtrArray) holds = family_group (leases);
  GPtrArray *rows = g_ptr_array_new_with_free_func ((GDestroyNotify) redis_lock_lease_info_free);

  for (guint i = 0; i < holds->len; i++)
    {
      const FamilyHold *hold = g_ptr_array_index (holds, i);

      for (guint j = 0; j < hold->holders->len; j++)
        {
          const FamilyHolder *h = g_ptr_array_index (hold->holders, j);
          RedisLockLeaseInfo *row = g_new0 (RedisLockLeaseInfo, 1);

          if (h->role == FAMILY_ROLE_LOCK)
            row->name = g_strdup (hold->name);
          else if (h->role == FAMILY_ROLE_PERMIT && hold->size > 0)
            row->name = g_strdup_printf ("%s (permit %u of %u)", hold->name, h->permit, hold->size);
          else if (h->role == FAMILY_ROLE_PERMIT)
            row->name = g_strdup_printf ("%s (permit %u)", hold->name, h->permit);
          else
            row->name = g_strdup_printf ("%s (%s)", hold->name, family_role_name (h->role));
          row->owner = g_strdup (h->owner);
          row->pttl_ms = h->ttl_ms;
          g_ptr_array_add (rows, row);
        }
    }
  g_ptr_array_unref (leases);
  return rows;
}

/* Reads a snapshot into @w, remembering what changed. FALSE with w->error set. */
static gboolean
take_snapshot (Watch *w, RedisLockRegistry *registry)
{
  g_autoptr (GError) error = NULL;
  GPtrArray *leases = redis_lock_registry_list_leases (registry, &error);
  GPtrArray *waiters = leases != NULL ? redis_lock_registry_list_waiters (registry, &error) : NULL;
  gint64 now = g_get_monotonic_time ();

  g_clear_pointer (&w->error, g_free);
  if (waiters == NULL)
    {
      g_clear_pointer (&leases, g_ptr_array_unref);
      w->error = g_strdup (error->message);
      return FALSE;
    }
  leases = holds_of (leases);
  g_hash_table_remove_all (w->lines);
  for (guint i = 0; i < leases->len; i++)
    {
      const RedisLockLeaseInfo *lease = g_ptr_array_index (leases, i);
      g_autoptr (GPtrArray) line = redis_lock_registry_list_queue (registry, lease->name, &error);

      if (line == NULL)
        {
          g_ptr_array_unref (leases);
          g_ptr_array_unref (waiters);
          w->error = g_strdup (error->message);
          return FALSE;
        }
      if (line->len > 0)
        g_hash_table_insert (w->lines, g_strdup (lease->name), GUINT_TO_POINTER (line->len));
    }
  g_clear_pointer (&w->leases, g_ptr_array_unref);
  g_clear_pointer (&w->waiters, g_ptr_array_unref);
  w->leases = leases;
  w->waiters = waiters;
  for (guint i = 0; i < leases->len; i++)
    {
      const RedisLockLeaseInfo *lease = g_ptr_array_index (leases, i);
      Track *t = g_hash_table_lookup (w->tracks, lease->name);

      if (t == NULL)
        {
          t = g_new0 (Track, 1);
          t->changes = g_array_new (FALSE, FALSE, sizeof (gint64));
          t->owner = g_strdup (lease->owner);
          g_hash_table_insert (w->tracks, g_strdup (lease->name), t);
        }
      else if (g_strcmp0 (t->owner, lease->owner) != 0)
        {
          g_free (t->owner);
          t->owner = g_strdup (lease->owner);
          t->max_ttl_ms = 0;
          g_array_append_val (t->changes, now);
        }
      t->max_ttl_ms = MAX (t->max_ttl_ms, lease->pttl_ms);
    }
  /* A lock no longer held is free: its next holder is a change too. */
  {
    GHashTableIter iter;
    gpointer key, value;

    g_hash_table_iter_init (&iter, w->tracks);
    while (g_hash_table_iter_next (&iter, &key, &value))
      {
        Track *t = value;
        gboolean held = FALSE;

        for (guint i = 0; i < leases->len && !held; i++)
          held = strcmp (((RedisLockLeaseInfo *) g_ptr_array_index (leases, i))->name, key) == 0;
        if (!held)
          g_clear_pointer (&t->owner, g_free);
        while (t->changes->len > 0 && g_array_index (t->changes, gint64, 0) < now - RATE_WINDOW_US)
          g_array_remove_index (t->changes, 0);
        if (!held && t->changes->len == 0)
          g_hash_table_iter_remove (&iter);
      }
  }
  return TRUE;
}

static gint
compare_rows (gconstpointer a, gconstpointer b)
{
  return strcmp ((*(Row *const *) a)->name, (*(Row *const *) b)->name);
}

/* The locks of the last snapshot, held or waited for, by name. */
static GPtrArray *
make_rows (Watch *w)
{
  GPtrArray *rows = g_ptr_array_new_with_free_func (row_free);
  g_autoptr (GHashTable) by_name = g_hash_table_new (g_str_hash, g_str_equal);
  gint64 now = g_get_monotonic_time ();
  double window_s = (double) MIN (now - w->started, RATE_WINDOW_US) / G_USEC_PER_SEC;

  for (guint i = 0; w->leases != NULL && i < w->leases->len; i++)
    {
      const RedisLockLeaseInfo *lease = g_ptr_array_index (w->leases, i);
      Row *row = g_new0 (Row, 1);
      Track *t = g_hash_table_lookup (w->tracks, lease->name);

      row->name = lease->name;
      row->lease = lease;
      row->waiters = g_ptr_array_new ();
      row->in_line = GPOINTER_TO_UINT (g_hash_table_lookup (w->lines, lease->name));
      row->max_ttl_ms = t != NULL ? t->max_ttl_ms : lease->pttl_ms;
      row->rate = t != NULL && window_s > 0.5 ? t->changes->len / window_s : 0;
      g_hash_table_insert (by_name, (gpointer) row->name, row);
      g_ptr_array_add (rows, row);
    }
  for (guint i = 0; w->waiters != NULL && i < w->waiters->len; i++)
    {
      RedisLockWaiterInfo *waiter = g_ptr_array_index (w->waiters, i);
      Row *row = g_hash_table_lookup (by_name, waiter->name);

      if (row == NULL)
        {
          row = g_new0 (Row, 1);
          row->name = waiter->name;
          row->waiters = g_ptr_array_new ();
          g_hash_table_insert (by_name, (gpointer) row->name, row);
          g_ptr_array_add (rows, row);
        }
      g_ptr_array_add (row->waiters, waiter);
    }
  g_ptr_array_sort (rows, compare_rows);
  return rows;
}

/* The holder of @lease as host:pid when it is a client of this library, else its value. */
static char *
holder_text (const RedisLockLeaseInfo *lease)
{
  g_autofree char *host = NULL;
  gint64 pid;

  if (lease == NULL)
    return g_strdup ("-");
  if (split_client_id (lease->owner, &host, &pid))
    return g_strdup_printf ("%s:%" G_GINT64_FORMAT, host, pid);
  return escape_for_display (lease->owner);
}

/* @text cut to @width characters, and with @pad padded to it. */
static void
append_fitted (GString *out, const char *text, glong width, gboolean pad)
{
  glong len = g_utf8_strlen (text, -1);

  if (width <= 0)
    return;
  if (len > width)
    {
      g_autofree char *cut = g_utf8_substring (text, 0, width - 1);
      g_string_append (out, cut);
      g_string_append (out, "…");
      return;
    }
  g_string_append (out, text);
  for (glong i = len; pad && i < width; i++)
    g_string_append_c (out, ' ');
}

/* A column: @text cut or padded to @width characters. */
static void
append_cell (GString *out, const char *text, glong width)
{
  append_fitted (out, text, width, TRUE);
}

/* A line of the frame: @text cut to the terminal's @width, without trailing blanks. */
static void
append_line (GString *out, const char *text, glong width, const char *eol)
{
  g_autofree char *trimmed = g_strchomp (g_strdup (text));

  append_fitted (out, trimmed, width, FALSE);
  g_string_append (out, eol);
}

static char *
ttl_text (const Row *row)
{
  g_autoptr (GString) out = g_string_new (NULL);
  gint64 ttl = row->lease != NULL ? row->lease->pttl_ms : 0;
  int filled;

  if (row->lease == NULL)
    return g_strdup ("");
  if (ttl < 0)
    return g_strdup ("no expiry");
  filled = row->max_ttl_ms > 0 ? (int) ((ttl * BAR_WIDTH + row->max_ttl_ms - 1) / row->max_ttl_ms) : 0;
  filled = CLAMP (filled, 0, BAR_WIDTH);
  for (int i = 0; i < BAR_WIDTH; i++)
    g_string_append (out, i < filled ? "█" : "░");
  g_string_append_printf (out, " %5.1fs", (double) ttl / 1000.0);
  return g_strdup (out->str);
}

static char *
waiters_text (const Row *row)
{
  GString *out = g_string_new (NULL);
  gint64 now = g_get_real_time ();

  for (guint i = 0; i < row->waiters->len; i++)
    {
      const RedisLockWaiterInfo *w = g_ptr_array_index (row->waiters, i);
      g_autofree char *host = escape_for_display (w->host);

      g_string_append_printf (out, "%s%s:%" G_GINT64_FORMAT " (%.1fs)", i ? ", " : "", host,
                              w->pid, (double) (now - w->since_us) / G_USEC_PER_SEC);
    }
  return g_string_free (out, FALSE);
}

/* One frame of @w for a terminal of @width × @height (0: no bound on lines), each line
 * ending with @eol. */
static void
render_frame (Watch *w, int width, int height, const char *eol, GString *out)
{
  g_autoptr (GPtrArray) rows = make_rows (w);
  g_autoptr (GDateTime) now = g_date_time_new_now_local ();
  g_autofree char *clock = g_date_time_format (now, "%H:%M:%S");
  g_autoptr (GString) line = g_string_new (NULL);
  glong name_w = 4, holder_w = 6, ttl_w = BAR_WIDTH + 7, rate_w = 6, line_w = 4, waiters_w;
  guint n_waiters = 0, n_in_line = 0, shown;

  for (guint i = 0; i < rows->len; i++)
    {
      Row *row = g_ptr_array_index (rows, i);
      g_autofree char *name = escape_for_display (row->name);
      g_autofree char *holder = holder_text (row->lease);

      name_w = MAX (name_w, g_utf8_strlen (name, -1));
      holder_w = MAX (holder_w, g_utf8_strlen (holder, -1));
      n_waiters += row->waiters->len;
      n_in_line += row->in_line;
    }
  /* The name and holder give way first, down to a few characters; then the waiters. */
  name_w = MIN (name_w, MAX (8, width / 4));
  holder_w = MIN (holder_w, MAX (8, width / 4));
  waiters_w = width - (name_w + holder_w + ttl_w + rate_w + line_w + 10);

  g_string_append_printf (line,
                          "redislock watch  %s  registry %s  %u locks  %u waiters  %u in line",
                          clock, effective_registry (), rows->len, n_waiters, n_in_line);
  if (w->error != NULL)
    g_string_append_printf (line, "  error: %s", w->error);
  append_line (out, line->str, width, eol);
  g_string_truncate (line, 0);
  append_cell (line, "NAME", name_w);
  g_string_append (line, "  ");
  append_cell (line, "HOLDER", holder_w);
  g_string_append (line, "  ");
  append_cell (line, "TTL", ttl_w);
  g_string_append (line, "  ");
  append_cell (line, "HAND/S", rate_w);
  g_string_append (line, "  ");
  append_cell (line, "LINE", line_w);
  g_string_append (line, "  WAITERS");
  append_line (out, line->str, width, eol);

  shown = rows->len;
  if (height > 0 && rows->len > (guint) MAX (height - 3, 0))
    shown = (guint) MAX (height - 3, 0);
  for (guint i = 0; i < shown; i++)
    {
      Row *row = g_ptr_array_index (rows, i);
      g_autofree char *name = escape_for_display (row->name);
      g_autofree char *holder = holder_text (row->lease);
      g_autofree char *ttl = ttl_text (row);
      g_autofree char *waiters = waiters_text (row);
      g_autofree char *rate = g_strdup_printf ("%6.1f", row->rate);
      g_autofree char *in_line = g_strdup_printf ("%4u", row->in_line);

      g_string_truncate (line, 0);
      append_cell (line, name, name_w);
      g_string_append (line, "  ");
      append_cell (line, holder, holder_w);
      g_string_append (line, "  ");
      append_cell (line, ttl, ttl_w);
      g_string_append (line, "  ");
      append_cell (line, rate, rate_w);
      g_string_append (line, "  ");
      append_cell (line, in_line, line_w);
      g_string_append (line, "  ");
      if (waiters_w > 0)
        append_cell (line, waiters, waiters_w);
      append_line (out, line->str, width, eol);
    }
  if (shown < rows->len)
    {
      g_autofree char *more = g_strdup_printf ("… %u more", rows->len - shown);
      append_line (out, more, width, eol);
    }
}

static void
print_json (Watch *w)
{
  g_autoptr (GPtrArray) rows = make_rows (w);
  GString *out = g_string_new ("{\"registry\": ");

  rl_json_append_string (out, effective_registry ());
  g_string_append_printf (out, ", \"time_us\": %" G_GINT64_FORMAT ", \"locks\": [",
                          g_get_real_time ());
  for (guint i = 0; i < rows->len; i++)
    {
      Row *row = g_ptr_array_index (rows, i);

      g_string_append (out, i ? ",\n  {\"name\": " : "\n  {\"name\": ");
      rl_json_append_string (out, row->name);
      append_holder_json (out, row->lease != NULL, row->lease ? row->lease->owner : NULL,
                          row->lease ? row->lease->pttl_ms : -1);
      g_string_append_printf (out, ", \"in_line\": %u", row->in_line);
      append_waiters_json (out, row->waiters);
      g_string_append_c (out, '}');
    }
  g_string_append (out, rows->len ? "\n]}\n" : "]}\n");
  fputs (out->str, stdout);
  g_string_free (out, TRUE);
}

/* The live view ------------------------------------------------------------------- */

static volatile sig_atomic_t got_quit, got_resize;

static void
on_quit_signal (int signum)
{
  got_quit = 1;
}

static void
on_resize_signal (int signum)
{
  got_resize = 1;
}

static void
terminal_size (int *width, int *height)
{
  struct winsize ws;

  *width = 80;
  *height = 24;
  if (ioctl (STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 && ws.ws_row > 0)
    {
      *width = ws.ws_col;
      *height = ws.ws_row;
    }
}

static void
draw (Watch *w)
{
  g_autoptr (GString) out = g_string_new ("\033[H");
  int width, height;

  terminal_size (&width, &height);
  render_frame (w, width, height, "\033[K\r\n", out);
  g_string_append (out, "\033[J");
  write_all (STDOUT_FILENO, out->str, out->len);
}

/* Runs the live view until q, Ctrl-C, SIGTERM or SIGHUP; the terminal is put back. */
static int
run_live (Watch *w, RedisLockRegistry *registry)
{
  struct termios saved, raw;
  struct sigaction quit_action = { 0 }, resize_action = { 0 };
  const char enter[] = "\033[?1049h\033[?25l\033[H\033[2J", leave[] = "\033[?25h\033[?1049l";

  if (!isatty (STDIN_FILENO) || !isatty (STDOUT_FILENO) || tcgetattr (STDIN_FILENO, &saved) != 0)
    {
      die_message ("watch needs a terminal; use --once or --json to print one frame");
      return EXIT_USAGE;
    }
  quit_action.sa_handler = on_quit_signal;
  resize_action.sa_handler = on_resize_signal;
  sigaction (SIGINT, &quit_action, NULL);
  sigaction (SIGTERM, &quit_action, NULL);
  sigaction (SIGHUP, &quit_action, NULL);
  sigaction (SIGWINCH, &resize_action, NULL);
  raw = saved;
  raw.c_lflag &= (tcflag_t) ~(ICANON | ECHO);
  raw.c_cc[VMIN] = 0;
  raw.c_cc[VTIME] = 0;
  tcsetattr (STDIN_FILENO, TCSANOW, &raw);
  write_all (STDOUT_FILENO, enter, strlen (enter));

  while (!got_quit)
    {
      gint64 next = g_get_monotonic_time () + opt_interval_ms * 1000;

      take_snapshot (w, registry);
      draw (w);
      while (!got_quit)
        {
          struct pollfd pfd = { STDIN_FILENO, POLLIN, 0 };
          gint64 left_ms = (next - g_get_monotonic_time () + 999) / 1000;
          int r;

          if (got_resize)
            {
              got_resize = 0;
              draw (w);
            }
          if (left_ms <= 0)
            break;
          r = poll (&pfd, 1, (int) left_ms);
          if (r > 0)
            {
              char keys[32];
              gssize n = read (STDIN_FILENO, keys, sizeof keys);

              if (n == 0 || (n > 0 && (memchr (keys, 'q', (gsize) n) || memchr (keys, 'Q', (gsize) n))))
                got_quit = 1;
            }
        }
    }
  write_all (STDOUT_FILENO, leave, strlen (leave));
  tcsetattr (STDIN_FILENO, TCSANOW, &saved);
  return 0;
}

int
cmd_watch (int argc, char **argv)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (RedisLockRegistry) registry = NULL;
  Watch w = { 0 };
  int rc;

  rc = parse_options ("watch", watch_usage, "",
                      "Shows the locks of a registry live: name, holder, the TTL left, the\n"
                      "hand-offs per second and the waiting threads, refreshed every\n"
                      "--interval. Press q or Ctrl-C to leave. --once prints one frame as\n"
                      "text, --json one JSON document.",
                      watch_entries, TRUE, FALSE, &argc, &argv);
  if (rc >= 0)
    return rc;
  if (argc > 1)
    return usage_error ("watch", watch_usage, "unexpected argument '%s'", argv[1]);
  if (opt_interval != NULL && (!parse_duration (opt_interval, &opt_interval_ms) || opt_interval_ms <= 0))
    return usage_error ("watch", watch_usage, "invalid duration for --interval: '%s'",
                        opt_interval);
  registry = tool_registry_new (&error);
  if (registry == NULL)
    {
      die_message ("%s", error->message);
      return exit_status_for_error (error);
    }
  w.tracks = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, track_free);
  w.lines = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  w.started = g_get_monotonic_time ();
  rc = 0;
  if (opt_once || opt_json)
    {
      if (!take_snapshot (&w, registry))
        {
          die_message ("%s", w.error);
          rc = EXIT_REDIS;
        }
      else if (opt_json)
        print_json (&w);
      else
        {
          g_autoptr (GString) out = g_string_new (NULL);
          int width = 100, height;

          if (isatty (STDOUT_FILENO))
            terminal_size (&width, &height);
          render_frame (&w, width, 0, "\n", out);
          fputs (out->str, stdout);
        }
    }
  else
    rc = run_live (&w, registry);
  g_hash_table_unref (w.tracks);
  g_hash_table_unref (w.lines);
  g_clear_pointer (&w.leases, g_ptr_array_unref);
  g_clear_pointer (&w.waiters, g_ptr_array_unref);
  g_free (w.error);
  return rc;
}
