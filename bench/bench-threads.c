/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* bench-threads.c: worker threads for the parallel sections of redislock-bench, and
 * what a parallel run cost.
 *
 * A rate is only comparable with another if both runs had all their threads going at
 * once, so every worker waits on one barrier with the caller, and the clock starts
 * when the barrier lets them all go. Around a run the program reads its own CPU time
 * and, through a control connection, the server's count and CPU time of EVALSHA (INFO
 * commandstats): the lock's cost on both sides of the socket, next to the same
 * reading for raw calls. The two kinds of worker, raw calls (or hand-made lock pairs)
 * on a connection of their own and lock+unlock pairs on a RedisLock, are the two
 * workloads the sections compare; a failed worker keeps its error and the run reports
 * the first one.
 */
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "bench.h"

/* --- Threads started together ------------------------------------------------------ */

typedef struct
{
  pthread_barrier_t *barrier;
  WorkFunc func;
  gpointer data;
} Starter;

static gpointer
starter_main (gpointer p)
{
  Starter *s = p;

  pthread_barrier_wait (s->barrier);
  s->func (s->data);
  return NULL;
}

double
run_parallel (guint n, WorkFunc func, gpointer *data)
{
  pthread_barrier_t barrier;
  Starter *starters = g_new0 (Starter, n);
  GThread **threads = g_new0 (GThread *, n);
  gint64 t0, t1;
  guint i;

  pthread_barrier_init (&barrier, NULL, n + 1);
  for (i = 0; i < n; i++)
    {
      starters[i].barrier = &barrier;
      starters[i].func = func;
      starters[i].data = data[i];
      threads[i] = g_thread_new ("bench-worker", starter_main, &starters[i]);
    }
  pthread_barrier_wait (&barrier);
  t0 = now_ns ();
  for (i = 0; i < n; i++)
    g_thread_join (threads[i]);
  t1 = now_ns ();
  pthread_barrier_destroy (&barrier);
  g_free (threads);
  g_free (starters);
  return (double)(t1 - t0) / 1e9;
}

/* --- What a run cost --------------------------------------------------------------- */

void
run_costed (guint n, WorkFunc func, gpointer *data, RawConn *control, RunCost *cost)
{
  guint64 calls0 = 0, usec0 = 0, calls1 = 0, usec1 = 0;
  gint64 cpu0;

  if (control != NULL)
    raw_evalsha_stats (control, &calls0, &usec0);
  cpu0 = cpu_ns ();
  cost->seconds = run_parallel (n, func, data);
  cost->cpu_seconds = (double)(cpu_ns () - cpu0) / 1e9;
  if (control != NULL)
    raw_evalsha_stats (control, &calls1, &usec1);
  cost->server_calls = calls1 - calls0;
  cost->server_usec = usec1 - usec0;
}

void
run_cost_add (RunCost *total, const RunCost *cost)
{
  total->seconds += cost->seconds;
  total->cpu_seconds += cost->cpu_seconds;
  total->server_calls += cost->server_calls;
  total->server_usec += cost->server_usec;
}

double
server_us_per_call (const RunCost *cost)
{
  return cost->server_calls > 0 ? (double)cost->server_usec / cost->server_calls : NAN;
}

/* --- Raw workers ------------------------------------------------------------------- */

static void
raw_worker (gpointer data)
{
  RawWorker *w = data;
  guint i;

  for (i = 0; i < w->calls; i++)
    if (w->key != NULL ? !raw_lock_pair (w->conn, w->key, &w->error)
                       : !raw_call (w->conn, &w->error))
      return;
}

void
raw_workers_close (RawWorker *workers)
{
  guint i;

  for (i = 0; i < BENCH_THREADS; i++)
    {
      raw_close (workers[i].conn);
      g_free (workers[i].key);
      g_clear_error (&workers[i].error);
    }
  memset (workers, 0, sizeof (RawWorker) * BENCH_THREADS);
}

gboolean
raw_workers_open (Bench *b, RawWorker *workers, GError **error)
{
  gpointer data[BENCH_THREADS];
  guint i;

  memset (workers, 0, sizeof (RawWorker) * BENCH_THREADS);
  for (i = 0; i < BENCH_THREADS; i++)
    {
      workers[i].conn = raw_open (&b->target, error);
      if (workers[i].conn == NULL)
        {
          raw_workers_close (workers);
          return FALSE;
        }
      workers[i].calls = 200;
      data[i] = &workers[i];
    }
  run_parallel (BENCH_THREADS, raw_worker, data);
  return TRUE;
}

double
raw_workers_run (RawWorker *workers, guint calls, const char *lock_prefix, RawConn *control,
                 RunCost *cost, GError **error)
{
  gpointer data[BENCH_THREADS];
  guint i;

  for (i = 0; i < BENCH_THREADS; i++)
    {
      workers[i].calls = calls;
      g_free (workers[i].key);
      workers[i].key = lock_prefix != NULL ? g_strdup_printf ("%s:%u", lock_prefix, i) : NULL;
      data[i] = &workers[i];
    }
  run_costed (BENCH_THREADS, raw_worker, data, control, cost);
  for (i = 0; i < BENCH_THREADS; i++)
    if (workers[i].error != NULL)
      {
        g_propagate_error (error, workers[i].error);
        workers[i].error = NULL;
        return NAN;
      }
  return (double)BENCH_THREADS * calls / cost->seconds;
}

/* --- Lock workers ------------------------------------------------------------------ */

static void
pair_worker (gpointer data)
{
  PairWorker *w = data;
  guint i;

  for (i = 0; w->tickets != NULL ? g_atomic_int_add (w->tickets, -1) > 0 : i < w->pairs; i++)
    {
      if (!redis_lock_lock (w->lock, &w->error))
        return;
      if (w->counter != NULL)
        (*w->counter)++;
      if (!redis_lock_unlock (w->lock, &w->error))
        return;
    }
}

double
pair_workers_run (PairWorker *workers, guint pairs, RawConn *control, RunCost *cost, GError **error)
{
  gpointer data[BENCH_THREADS];
  guint i;

  for (i = 0; i < BENCH_THREADS; i++)
    {
      workers[i].pairs = pairs;
      if (workers[i].tickets != NULL)
        *workers[i].tickets = (gint)(BENCH_THREADS * pairs);
      data[i] = &workers[i];
    }
  run_costed (BENCH_THREADS, pair_worker, data, control, cost);
  for (i = 0; i < BENCH_THREADS; i++)
    if (workers[i].error != NULL)
      {
        g_propagate_error (error, workers[i].error);
        workers[i].error = NULL;
        return NAN;
      }
  return (double)BENCH_THREADS * pairs / cost->seconds;
}
