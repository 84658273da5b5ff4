/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* section-deadlock.c: what deadlock detection costs contended locks.
 *
 * Detection is on by default, so its price is paid by every contended section: a wait
 * is recorded once it has lasted 300 ms, and every wait asks whether it has. The same
 * workloads run with detection on and off (two sets of registries, one set of each),
 * in rounds that alternate so both see the same machine, and the ratio on/off of their
 * median rates is the cost: 8 threads of one registry on one lock (local contention,
 * the mutex's waits), and 8 threads split over two registries on one lock (every other
 * section handed between registries through Redis and a notification).
 */
#include <math.h>
#include <string.h>

#include <gio/gio.h>

#include "bench.h"

/* One workload: @n_registries registries, the threads spread over them, one lock. */
typedef struct
{
  RedisLockRegistry *registries[2];
  RedisLock *locks[2];
  guint n_registries;
} Workload;

static void
workload_clear (Workload *w)
{
  for (guint i = 0; i < w->n_registries; i++)
    {
      g_clear_pointer (&w->locks[i], redis_lock_unref);
      g_clear_pointer (&w->registries[i], redis_lock_registry_unref);
    }
}

static gboolean
workload_open (Bench *b, Workload *w, guint n_registries, gboolean detection, const char *name,
               GError **error)
{
  w->n_registries = n_registries;
  for (guint i = 0; i < n_registries; i++)
    {
      w->registries[i] = bench_registry (b, error);
      if (w->registries[i] == NULL)
        return FALSE;
      redis_lock_registry_set_deadlock_detection (w->registries[i], detection);
      w->locks[i] = redis_lock_registry_obtain (w->registries[i], name, error);
      if (w->locks[i] == NULL)
        return FALSE;
    }
  return TRUE;
}

/* One round of @w: BENCH_THREADS threads, @pairs sections each. Pairs per second. */
static double
workload_run (Workload *w, guint pairs, GError **error)
{
  PairWorker workers[BENCH_THREADS];
  RunCost cost;
  guint64 counter = 0;
  double rate;

  memset (workers, 0, sizeof workers);
  for (guint i = 0; i < BENCH_THREADS; i++)
    {
      workers[i].lock = w->locks[i % w->n_registries];
      workers[i].counter = &counter;
    }
  rate = pair_workers_run (workers, pairs, NULL, &cost, error);
  if (!isnan (rate) && counter != (guint64)pairs * BENCH_THREADS)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED,
                   "%" G_GUINT64_FORMAT " sections counted, %u expected", counter,
                   pairs * BENCH_THREADS);
      return NAN;
    }
  return rate;
}

/* The median rates of @rounds alternating rounds of the workload with detection on and
 * off; FALSE with @error. */
static gboolean
compare (Bench *b, guint n_registries, const char *name, guint rounds, guint pairs,
         double *on, double *off, GError **error)
{
  Workload with = { 0 }, without = { 0 };
  double on_rates[8], off_rates[8];
  gboolean ok = FALSE;

  g_assert (rounds <= G_N_ELEMENTS (on_rates));
  if (!workload_open (b, &with, n_registries, TRUE, name, error)
      || !workload_open (b, &without, n_registries, FALSE, name, error))
    goto out;
  for (guint r = 0; r < rounds; r++)
    {
      on_rates[r] = workload_run (&with, pairs, error);
      if (isnan (on_rates[r]))
        goto out;
      off_rates[r] = workload_run (&without, pairs, error);
      if (isnan (off_rates[r]))
        goto out;
    }
  *on = median (on_rates, rounds);
  *off = median (off_rates, rounds);
  ok = TRUE;
out:
  workload_clear (&with);
  workload_clear (&without);
  return ok;
}

void
section_deadlock (Bench *b, Section *s)
{
  g_autoptr (GError) error = NULL;
  guint rounds = b->quick ? 3 : 5, pairs = b->contention_sections;
  double on, off;

  if (!compare (b, 1, "deadlock-local", rounds, pairs, &on, &off, &error))
    goto fail;
  add_row (s, "8 threads, one registry, on", on, "pairs/s", 0, on / off,
           "detection off", ">= 0.95x", on / off >= 0.95);
  add_row (s, "8 threads, one registry, off", off, "pairs/s", 0, 1.0, "detection off", NULL,
           FALSE);
  if (!compare (b, 2, "deadlock-handoff", rounds, pairs / 4, &on, &off, &error))
    goto fail;
  add_row (s, "8 threads, two registries, on", on, "pairs/s", 0, on / off,
           "detection off", ">= 0.95x", on / off >= 0.95);
  add_row (s, "8 threads, two registries, off", off, "pairs/s", 0, 1.0, "detection off", NULL,
           FALSE);
  add_note (s,
            "%u rounds alternating detection on and off, %u sections per thread (a quarter "
            "with two registries); rates are medians over the rounds",
            rounds, pairs);
  return;

fail:
  add_na (s, "deadlock detection cost", "%s", error->message);
}
