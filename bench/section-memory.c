/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* section-memory.c: what the lock cache costs in memory.
 *
 * A cached idle lock is compared with the cheapest way to remember a name, a
 * GHashTable entry from a g_strdup'ed name to a pointer, both measured as growth of the
 * resident set after malloc_trim (bench-stats.c). Then a cache bounded at its default
 * capacity is fed ten times as many names (fewer with --quick): its RSS must stop
 * growing once it is full. No Redis traffic is involved: obtain() and unref() only.
 */
#include <math.h>
#include <string.h>

#include "bench.h"

#define MEMORY_NAME_FORMAT "bench-mem-%08u"

/* RSS growth per entry of a GHashTable from name (g_strdup) to pointer: the cost of
 * only remembering @n names, the baseline for a cached lock. */
static double
memory_hash_baseline (guint n)
{
  GHashTable *table = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  gint64 rss0, rss1;
  guint i;

  trim_heap ();
  rss0 = rss_bytes ();
  for (i = 0; i < n; i++)
    g_hash_table_insert (table, g_strdup_printf (MEMORY_NAME_FORMAT, i), GUINT_TO_POINTER (i + 1));
  rss1 = rss_bytes ();
  g_hash_table_unref (table);
  trim_heap ();
  return (double)(rss1 - rss0) / n;
}

/* Obtains and drops @n distinct names starting at @first; FALSE with @error set on
 * failure. */
static gboolean
memory_fill (RedisLockRegistry *registry, guint first, guint n, GError **error)
{
  guint i;

  for (i = first; i < first + n; i++)
    {
      char name[32];
      RedisLock *lock;

      g_snprintf (name, sizeof name, MEMORY_NAME_FORMAT, i);
      lock = redis_lock_registry_obtain (registry, name, error);
      if (lock == NULL)
        return FALSE;
      redis_lock_unref (lock);
    }
  return TRUE;
}

void
section_memory (Bench *b, Section *s)
{
  g_autoptr (GError) error = NULL;
  RedisLockRegistry *registry = NULL;
  guint n = b->memory_names, cap = b->bounded_capacity, m = b->bounded_names;
  char sample[32];
  gsize name_len;
  guint half = (m - cap) / 2;
  double per_entry, per_lock, used, growth, late;
  gint64 rss0, rss1, rss_full, rss_mid, rss_end, t0, t1;
  guint size;

  g_snprintf (sample, sizeof sample, MEMORY_NAME_FORMAT, 0u);
  name_len = strlen (sample);
  if (rss_bytes () < 0)
    {
      add_na (s, "memory", "/proc/self/statm is not readable");
      return;
    }

  per_entry = memory_hash_baseline (n);

  /* Bytes per cached idle lock: capacity raised above the number of names. */
  registry = bench_registry (b, &error);
  if (registry == NULL)
    goto fail;
  redis_lock_registry_set_cache_capacity (registry, 2 * n);
  trim_heap ();
  rss0 = rss_bytes ();
  t0 = now_ns ();
  if (!memory_fill (registry, 0, n, &error))
    goto fail;
  t1 = now_ns ();
  rss1 = rss_bytes ();
  size = redis_lock_registry_get_cache_size (registry);
  per_lock = (double)(rss1 - rss0) / n;

  add_row (s, "RSS per cached idle lock", per_lock, "B", 0, per_lock / per_entry,
           "GHashTable name entry", NULL, FALSE);
  add_row (s, "  minus the name length", per_lock - name_len, "B", 0,
           (per_lock - name_len) / (per_entry - name_len), "GHashTable entry - name", "<= 256 B",
           per_lock - name_len <= 256);
  add_row (s, "obtain+unref (new name)", (double)(t1 - t0) / n, "ns", 0, NAN, NULL, NULL, FALSE);
  add_row (s, "cache size", (double)size, "", 0, (double)size / n, "names obtained", "= names",
           size == n);
  add_row (s, "GHashTable entry (baseline)", per_entry, "B", 0, 1.0, "GHashTable name entry", NULL,
           FALSE);
  redis_lock_registry_unref (registry);
  registry = NULL;
  trim_heap ();

  /* Bounded: the default capacity, ten times as many names (fewer with --quick). */
  registry = bench_registry (b, &error);
  if (registry == NULL)
    goto fail;
  redis_lock_registry_set_cache_capacity (registry, cap);
  trim_heap ();
  rss0 = rss_bytes ();
  if (!memory_fill (registry, 0, cap, &error))
    goto fail;
  rss_full = rss_bytes ();
  t0 = now_ns ();
  if (!memory_fill (registry, cap, half, &error))
    goto fail;
  rss_mid = rss_bytes ();
  if (!memory_fill (registry, cap + half, m - cap - half, &error))
    goto fail;
  t1 = now_ns ();
  rss_end = rss_bytes ();
  size = redis_lock_registry_get_cache_size (registry);
  used = (double)(rss_full - rss0);
  growth = (double)(rss_mid - rss_full);
  late = (double)(rss_end - rss_mid) / (m - cap - half);

  add_row (s, "cache size at capacity", (double)size, "", 0, (double)size / cap, "capacity",
           "= capacity", size == cap);
  add_row (s, "RSS of a full cache", used / (1024 * 1024), "MiB", 1, used / cap / per_lock,
           "capacity x RSS per lock", NULL, FALSE);
  add_row (s, "RSS growth, 1st half past cap", growth / (1024 * 1024), "MiB", 1, growth / used,
           "RSS of a full cache", NULL, FALSE);
  add_row (s, "RSS growth, 2nd half, per name", late, "B", 1, late / per_lock,
           "RSS per cached lock", "<= 0.10x", late <= 0.10 * per_lock);
  add_row (s, "obtain+unref with eviction", (double)(t1 - t0) / (m - cap), "ns", 0, NAN, NULL, NULL,
           FALSE);
  add_note (s,
            "%u names of %" G_GSIZE_FORMAT " bytes with capacity %u; then %u names with "
            "capacity %u, whose RSS must stop growing once it is full; no Redis traffic; RSS from "
            "/proc/self/statm after malloc_trim",
            n, name_len, 2 * n, m, cap);
  add_note (s, "each lock stores its Redis key (the registry key, \":\" and the name) once, so "
               "the figure minus the name still includes a copy of the registry key");
  redis_lock_registry_unref (registry);
  trim_heap ();
  return;

fail:
  add_na (s, "memory", "%s", error->message);
  if (registry != NULL)
    redis_lock_registry_unref (registry);
}
