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

#include <redislock/redislock-test.h>

#include <errno.h>
#include <gio/gio.h>
#include <math.h>
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

int
cmd_demo (int argc, char **argv)
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
  g_autofree char *self = g_file_read_link ("/proc/self/exe", NULL);

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
      const char *wargv[] = { self != NULL ? self : tool_argv0, DEMO_WORKER_MODE, registry, stock_key, sold_key,
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
