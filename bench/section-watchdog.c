/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* section-watchdog.c: one registry holding many leases, and the watchdog tick that
 * renews them all.
 *
 * The watchdog renews every held lease in one batch per tick, so a tick is compared
 * with the least such a batch can cost: one pipelined batch of as many raw EVALSHA
 * calls on a plain connection, timed while the section waits for a tick that renewed
 * every lease. The figures come from the registry's last_tick_* counters. Taking the
 * leases also shows whether a new lease costs more when thousands are already held
 * (the first and the last 1000 acquisitions are compared).
 */
#include <math.h>

#include "bench.h"

/* Waits up to 10 s for a watchdog tick, after the ones @before counted, that renewed
 * all @n leases; @st gets the registry's counters at the end. TRUE when one came. */
static gboolean
wait_full_tick (RedisLockRegistry *registry, guint n, const RedisLockRegistryStats *before,
                RedisLockRegistryStats *st)
{
  gint64 deadline = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;
  gboolean got;

  do
    {
      g_usleep (20 * 1000);
      redis_lock_registry_get_stats (registry, st);
      got = st->watchdog_ticks > before->watchdog_ticks && st->last_tick_leases >= n;
    }
  while (!got && g_get_monotonic_time () < deadline);
  return got;
}

void
section_watchdog (Bench *b, Section *s)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (RedisLockRegistry) registry = NULL;
  g_autoptr (RawConn) raw = NULL;
  RedisLockRegistryStats before, st;
  guint n = b->watchdog_leases, held = 0, unlock_failures = 0, i;
  RedisLock **locks = g_new0 (RedisLock *, n);
  gint64 *lock_ns = g_new0 (gint64, n);
  guint window = MIN (1000, n / 2);
  double pipeline[3], pipe_us = NAN, rtt = raw_us (b);
  Dist first, last;
  gboolean got = FALSE;

  raw = raw_open (&b->target, &error);
  if (raw == NULL)
    goto fail;
  registry = bench_registry (b, &error);
  if (registry == NULL)
    goto fail;
  redis_lock_registry_set_expire_after_ms (registry, 3000);
  for (i = 0; i < n; i++)
    {
      char name[32];
      gint64 t0;

      g_snprintf (name, sizeof name, "lease-%05u", i);
      locks[i] = redis_lock_registry_obtain (registry, name, &error);
      t0 = now_ns ();
      if (locks[i] == NULL || !redis_lock_lock (locks[i], &error))
        goto fail;
      lock_ns[i] = now_ns () - t0;
      held++;
    }
  first = dist_of (lock_ns, window, 1);
  last = dist_of (lock_ns + n - window, window, 1);

  /* Wait for a tick that renews every lease (the watchdog ticks at a third of the TTL);
   * meanwhile time the baseline, one pipelined batch of as many raw calls. */
  redis_lock_registry_get_stats (registry, &before);
  for (i = 0; i < G_N_ELEMENTS (pipeline); i++)
    {
      gint64 ns = raw_pipeline (raw, n, &error);

      if (ns < 0)
        goto fail;
      pipeline[i] = (double)ns / 1000;
    }
  pipe_us = median (pipeline, G_N_ELEMENTS (pipeline));
  got = wait_full_tick (registry, n, &before, &st);

  add_row (s, "lock new name, 1st 1000 mean", first.mean / 1000, "us", 1, first.mean / 1000 / rtt,
           "reference p50", NULL, FALSE);
  add_row (s, "lock new name, last 1000 mean", last.mean / 1000, "us", 1, last.mean / first.mean,
           "the first 1000", NULL, FALSE);
  add_row (s, "  p50", last.p50 / 1000, "us", 1, last.p50 / first.p50, "the first 1000's p50", NULL,
           FALSE);
  add_row (s, "  p99", last.p99 / 1000, "us", 1, last.p99 / first.p99, "the first 1000's p99", NULL,
           FALSE);
  if (!got)
    add_na (s, "watchdog tick",
            "no tick renewed all %u leases within 10 s (ticks %" G_GUINT64_FORMAT
            " -> %" G_GUINT64_FORMAT ", last tick renewed %" G_GUINT64_FORMAT ")",
            n, before.watchdog_ticks, st.watchdog_ticks, st.last_tick_leases);
  else
    {
      add_row (s, "tick wall time", (double)st.last_tick_us, "us", 0,
               (double)st.last_tick_us / pipe_us, "raw pipeline", NULL, FALSE);
      add_row (s, "tick, per lease", (double)st.last_tick_us / st.last_tick_leases, "us", 2,
               (double)st.last_tick_us / st.last_tick_leases / rtt, "raw p50", NULL, FALSE);
      add_row (s, "tick round trips", (double)st.last_tick_round_trips, "", 0,
               (double)st.last_tick_round_trips / st.last_tick_leases, "1 per lease", "<= 10",
               st.last_tick_round_trips <= 10);
      add_row (s, "tick leases", (double)st.last_tick_leases, "", 0,
               (double)st.last_tick_leases / n, "leases held", NULL, FALSE);
    }
  add_row (s, "raw pipeline (baseline)", pipe_us, "us", 0, 1.0, "raw pipeline", NULL, FALSE);
  add_row (s, "leases lost", (double)st.leases_lost, "", 0, NAN, NULL, "= 0", st.leases_lost == 0);
  add_note (s,
            "one registry holds %u distinct locks taken from one thread, TTL 3000 ms; the "
            "figures are the registry's last_tick_* counters",
            n);
  add_note (s,
            "baseline: %u EVALSHA of `return 1` sent in one pipelined batch on a plain "
            "connection (median of 3)",
            n);
  add_note (s,
            "lock new name: one outermost lock of a fresh name while the registry already "
            "holds 0..%u (first) or %u..%u (last) leases; the same cost means taking a lease "
            "does not depend on how many are held",
            window, n - window, n);

fail:
  if (error != NULL)
    add_na (s, "holding leases", "%u of %u locked: %s", held, n, error->message);
  for (i = 0; i < n; i++)
    {
      if (locks[i] == NULL)
        continue;
      if (i < held && !redis_lock_unlock (locks[i], NULL))
        unlock_failures++;
      redis_lock_unref (locks[i]);
    }
  if (unlock_failures > 0)
    add_note (s, "%u of %u unlocks failed", unlock_failures, held);
  g_free (locks);
  g_free (lock_ns);
}
