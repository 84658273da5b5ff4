/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* redislock-demo.c: `redislock demo`, a flash sale made correct by the lock.
 *
 * P processes x T threads buy from a stock kept in Redis with a non-atomic
 * GET / SET / INCR under the lock 'stock', and the demo reports what was sold, what
 * was oversold (nothing with the lock), the Redis commands spent and the lock's
 * hand-off latency. The buyers are fresh processes, the tool re-executed in its hidden
 * worker mode (demo_worker()), each with a registry of its own, talking to the parent
 * through pipes; the purchases use plain hiredis connections, as an application would.
 */
#include "config.h"

#include "redislock-tool.h"
#include "report.h"

#include <errno.h>
#include <gio/gio.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

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
int
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

/* The @per_mille percentile of the sorted hand-off times @sorted_ns, in ms; 0 when
 * there are none. */
static double
percentile_ms (GArray *sorted_ns, guint per_mille)
{
  if (sorted_ns->len == 0)
    return 0.0;
  return (double) rl_percentile ((const gint64 *) (gpointer) sorted_ns->data, sorted_ns->len,
                                 per_mille)
         / 1e6;
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

static int opt_processes = 4, opt_threads = 4, opt_stock = 10000;
static gboolean opt_no_lock;
static const GOptionEntry demo_entries[] = {
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

/* One sale, from the parent's side. */
typedef struct
{
  redisContext *c;
  const char *url;
  char *registry, *stock_key, *sold_key;
  GArray *records; /* DemoRecord, from every worker */
  gint64 calls_before, t_start, t_end;
} DemoSale;

/* What the records of a sale say. */
typedef struct
{
  gint64 sold, stock_left, calls, overlaps, bought;
  GArray *handoffs; /* ns from one release to the next acquisition, sorted */
} DemoResult;

/* Returns -1 to go on, else an exit status. */
static int
parse_demo_options (int argc, char **argv)
{
  int rc;

  rc = parse_options ("demo", demo_usage, "",
                      "Flash sale: P processes x T threads buy from a stock of S items kept in\n"
                      "Redis, each purchase a non-atomic GET / SET / INCR under the lock 'stock'.\n"
                      "Reports items sold, oversold (0 with the lock), Redis commands, lock\n"
                      "hand-off latency and total time.",
                      demo_entries, FALSE, FALSE, &argc, &argv);
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
  return -1;
}

/* The server of the sale: --url, else $REDIS_URL, else a private redis-server started
 * in @server. NULL after a message when none can be had. */
static const char *
demo_server_url (DemoServer **server)
{
  g_autoptr (GError) error = NULL;
  const char *env_url = g_getenv ("REDIS_URL");

  if (opt_url != NULL)
    return opt_url;
  if (env_url != NULL && *env_url != '\0')
    return env_url;
  *server = demo_server_start (&error);
  if (*server == NULL)
    {
      if (g_error_matches (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND))
        die_message ("demo: no redis-server found: install redis-server, or give a "
                     "server with --url or REDIS_URL (%s)",
                     error->message);
      else
        die_message ("demo: cannot start a private redis-server: %s", error->message);
      return NULL;
    }
  return demo_server_get_url (*server);
}

/* Puts the stock and the sold counter in Redis. */
static gboolean
stock_shelves (DemoSale *sale, GError **error)
{
  g_autofree char *stock_text = g_strdup_printf ("%d", opt_stock);
  redisReply *r;

  if ((r = redis_callv (sale->c, error, "SET", sale->stock_key, stock_text, NULL)) == NULL)
    return FALSE;
  freeReplyObject (r);
  if ((r = redis_callv (sale->c, error, "SET", sale->sold_key, "0", NULL)) == NULL)
    return FALSE;
  freeReplyObject (r);
  return TRUE;
}

/* Starts the worker processes (fresh ones, re-executed, not forked, each with its own
 * registry); returns how many started, or -1 when one could not be. */
static int
start_workers (DemoSale *sale, GPid *pids, int *in_fds, int *out_fds)
{
  g_autofree char *self = g_file_read_link ("/proc/self/exe", NULL);
  g_autofree char *threads_text = g_strdup_printf ("%d", opt_threads);
  g_auto (GStrv) env = g_environ_setenv (g_get_environ (), "REDIS_URL", sale->url, TRUE);
  int i;

  for (i = 0; i < opt_processes; i++)
    {
      g_autoptr (GError) error = NULL;
      const char *wargv[] = { self != NULL ? self : tool_argv0, DEMO_WORKER_MODE,
                              sale->registry, sale->stock_key, sale->sold_key,
                              threads_text, opt_no_lock ? "1" : "0", NULL };

      if (!g_spawn_async_with_pipes (NULL, (char **) wargv, env, G_SPAWN_DO_NOT_REAP_CHILD, NULL,
                                     NULL, &pids[i], &in_fds[i], &out_fds[i], NULL, &error))
        {
          die_message ("demo: cannot start a worker process: %s", error->message);
          return -i - 1;
        }
    }
  return i;
}

/* Runs the sale: starts the workers, waits until all are connected, lets them go at
 * once, and collects their records. Returns 0, or EXIT_REDIS when a worker failed. */
static int
run_workers (DemoSale *sale, GError **error)
{
  g_autofree GPid *pids = g_new0 (GPid, opt_processes);
  g_autofree int *in_fds = g_new0 (int, opt_processes);
  g_autofree int *out_fds = g_new0 (int, opt_processes);
  int started = start_workers (sale, pids, in_fds, out_fds);
  int status = started < 0 ? EXIT_REDIS : 0;
  int i;

  if (started < 0)
    started = -started - 1;
  for (i = 0; i < started; i++)
    {
      char byte = 0;

      if (read_all (out_fds[i], &byte, 1) != 1 || byte != 'R')
        status = EXIT_REDIS;
    }
  sale->calls_before = commandstats_total (sale->c, error);
  if (sale->calls_before < 0)
    status = EXIT_REDIS;
  sale->t_start = monotonic_ns ();
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
        g_array_append_val (sale->records, rec);
      close (out_fds[i]);
      while (waitpid (pids[i], &wstatus, 0) < 0 && errno == EINTR)
        ;
      g_spawn_close_pid (pids[i]);
      if (!WIFEXITED (wstatus) || WEXITSTATUS (wstatus) != 0)
        status = EXIT_REDIS;
    }
  sale->t_end = monotonic_ns ();
  return status;
}

/* Reads the counters after the sale and goes through the holds in the order they
 * started: any that began before the previous one ended overlapped it. */
static gboolean
tally_sale (DemoSale *sale, DemoResult *res, GError **error)
{
  gint64 calls_after = commandstats_total (sale->c, error);
  guint j;

  res->sold = get_counter (sale->c, sale->sold_key, error);
  res->stock_left = get_counter (sale->c, sale->stock_key, error);
  if (calls_after < 0 || res->sold < 0 || res->stock_left < 0)
    return FALSE;
  res->calls = calls_after - sale->calls_before;
  g_array_sort (sale->records, compare_records);
  for (j = 0; j < sale->records->len; j++)
    {
      const DemoRecord *rec = &g_array_index (sale->records, DemoRecord, j);

      res->bought += rec->bought;
      if (j > 0)
        {
          gint64 gap = rec->acquired_ns
                       - g_array_index (sale->records, DemoRecord, j - 1).released_ns;

          if (gap < 0)
            res->overlaps++;
          else
            g_array_append_val (res->handoffs, gap);
        }
    }
  rl_sort_int64 ((gint64 *) (gpointer) res->handoffs->data, res->handoffs->len);
  return TRUE;
}

/* Prints the report; returns 1 when the lock did not keep the sale consistent. */
static int
print_sale (const DemoSale *sale, const DemoResult *res)
{
  printf ("  sold:           %" G_GINT64_FORMAT "\n", res->sold);
  printf ("  oversold:       %" G_GINT64_FORMAT "\n", MAX (res->sold - opt_stock, 0));
  printf ("  stock left:     %" G_GINT64_FORMAT "\n", res->stock_left);
  printf ("  overlapping holds: %" G_GINT64_FORMAT "\n", res->overlaps);
  printf ("  redis commands: %" G_GINT64_FORMAT " (%.1f per item sold)\n", res->calls,
          res->sold > 0 ? (double) res->calls / res->sold : 0.0);
  if (!opt_no_lock)
    printf ("  hand-off p50:   %.3f ms\n  hand-off p99:   %.3f ms\n",
            percentile_ms (res->handoffs, 500), percentile_ms (res->handoffs, 990));
  printf ("  total time:     %.3f s\n", (double) (sale->t_end - sale->t_start) / 1e9);
  if (!opt_no_lock && (res->sold != opt_stock || res->overlaps > 0 || res->bought != res->sold))
    {
      die_message ("demo: the lock did not keep the sale consistent");
      return 1;
    }
  return 0;
}

/* Holds the sale on the connected server; returns the exit status of the demo. */
static int
hold_sale (DemoSale *sale)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (GArray) handoffs = g_array_new (FALSE, FALSE, sizeof (gint64));
  DemoResult res = { 0 };

  res.handoffs = handoffs;
  if (!stock_shelves (sale, &error))
    goto redis_failed;
  printf ("Flash sale: %d processes x %d threads buying %d items%s\n", opt_processes,
          opt_threads, opt_stock, opt_no_lock ? " WITHOUT the lock" : "");
  fflush (stdout);
  if (run_workers (sale, &error) != 0)
    {
      die_message ("demo: a worker failed");
      return EXIT_REDIS;
    }
  if (!tally_sale (sale, &res, &error))
    goto redis_failed;
  return print_sale (sale, &res);

redis_failed:
  die_message ("demo: %s", error ? error->message : "Redis error");
  return EXIT_REDIS;
}

int
cmd_demo (int argc, char **argv)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (DemoServer) server = NULL;
  g_autoptr (GArray) records = g_array_new (FALSE, FALSE, sizeof (DemoRecord));
  DemoSale sale = { 0 };
  redisReply *r;
  int rc;

  rc = parse_demo_options (argc, argv);
  if (rc >= 0)
    return rc;
  sale.url = demo_server_url (&server);
  if (sale.url == NULL)
    return EXIT_REDIS;
  sale.c = redis_open (sale.url, &error);
  if (sale.c == NULL)
    {
      die_message ("demo: %s", error->message);
      return exit_status_for_error (error);
    }
  sale.registry = g_strdup_printf ("redislock-demo-%d", (int) getpid ());
  sale.stock_key = g_strdup_printf ("%s-stock", sale.registry);
  sale.sold_key = g_strdup_printf ("%s-sold", sale.registry);
  sale.records = records;
  rc = hold_sale (&sale);

  r = redis_callv (sale.c, NULL, "DEL", sale.stock_key, sale.sold_key, NULL);
  if (r != NULL)
    freeReplyObject (r);
  redisFree (sale.c);
  g_free (sale.registry);
  g_free (sale.stock_key);
  g_free (sale.sold_key);
  return rc;
}
