/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* deadlock-rw.c: deadlock detection through the read-write lock (part of the deadlock
 * program; see deadlock.c).
 *
 * Two threads build a cycle for real, as deadlock.c's do: each takes its first hold
 * (a plain lock, a read or a write hold), both say so, and only then does each wait for
 * its second. Through a read-write lock a writer waits for the readers and a reader for
 * the writer, so a cycle closes when two threads read one lock each and each waits to
 * write the other's, when two write and each waits to read the other's, and in a mixed
 * cycle with a plain lock (one holds plain lock x and waits to write y, the other reads
 * y and waits for x). Exactly one waiter must fail with DEADLOCK within two seconds of
 * the start of its wait, its message naming both locks, and the other must get its
 * hold once the victim let go. The threads share one registry (waits for the local
 * level) or use two (waits in the store, as two processes do), on every store that has
 * read-write locks.
 */
#include "common.h"

#include <string.h>

#include "deadlock-rw.h"

/* How long a party waits for its second hold: far beyond detection. */
#define RW_PARTY_WAIT_MS 10000
#define RW_DETECT_MS 2000

typedef enum
{
  HOLD_PLAIN,
  HOLD_READ,
  HOLD_WRITE,
} HoldKind;

typedef struct
{
  HoldKind kind;
  const char *name;
} HoldSpec;

/* One hold of a party: on a plain lock or a read-write lock of its registry. */
typedef struct
{
  HoldKind kind;
  RedisLock *lock;
  RedisRWLock *rw;
} Hold;

typedef struct
{
  Hold first[2];
  Hold second[2];
  TestSync sync;
  guint holding;
  guint returned;
  gboolean acquired[2];
  GError *error[2];
  gint64 waited_ms[2];
} RwCycle;

static void
hold_init (Hold *hold, RedisLockRegistry *registry, const HoldSpec *spec)
{
  hold->kind = spec->kind;
  if (spec->kind == HOLD_PLAIN)
    hold->lock = test_obtain (registry, spec->name);
  else
    {
      g_autoptr (GError) error = NULL;

      hold->rw = redis_lock_registry_obtain_rw (registry, spec->name, &error);
      g_assert_no_error (error);
    }
}

static void
hold_clear (Hold *hold)
{
  g_clear_pointer (&hold->lock, redis_lock_unref);
  g_clear_pointer (&hold->rw, redis_rw_lock_unref);
}

static gboolean
hold_take (Hold *hold, gint64 wait_ms, GError **error)
{
  switch (hold->kind)
    {
    case HOLD_PLAIN:
      return redis_lock_try_lock_for (hold->lock, wait_ms, NULL, error);
    case HOLD_READ:
      return redis_rw_lock_try_read_lock_for (hold->rw, wait_ms, NULL, error);
    case HOLD_WRITE:
    default:
      return redis_rw_lock_try_write_lock_for (hold->rw, wait_ms, NULL, error);
    }
}

static void
hold_release (Hold *hold)
{
  g_autoptr (GError) error = NULL;
  gboolean ok;

  if (hold->kind == HOLD_PLAIN)
    ok = redis_lock_unlock (hold->lock, &error);
  else if (hold->kind == HOLD_READ)
    ok = redis_rw_lock_read_unlock (hold->rw, &error);
  else
    ok = redis_rw_lock_write_unlock (hold->rw, &error);
  g_assert_no_error (error);
  g_assert_true (ok);
}

/* Counts the calling thread in *@count and waits until @n threads are. */
static void
rw_barrier (TestSync *sync, guint *count, guint n)
{
  test_sync_lock (sync);
  (*count)++;
  test_sync_broadcast (sync);
  while (*count < n)
    test_sync_wait (sync);
  test_sync_unlock (sync);
}

static void
rw_party (guint i, gpointer data)
{
  RwCycle *c = data;
  g_autoptr (GError) error = NULL;
  gint64 start;

  g_assert_true (hold_take (&c->first[i], -1, &error));
  g_assert_no_error (error);
  rw_barrier (&c->sync, &c->holding, 2);
  start = test_now_ms ();
  c->acquired[i] = hold_take (&c->second[i], RW_PARTY_WAIT_MS, &c->error[i]);
  c->waited_ms[i] = test_now_ms () - start;
  /* The victim lets go of its first hold: the other party gets its second. */
  if (c->acquired[i])
    hold_release (&c->second[i]);
  hold_release (&c->first[i]);
}

/* Party 0 takes @a0 then waits for @b0 (in @r0); party 1 takes @a1 then waits for @b1
 * (in @r1). Exactly one victim, within the bound, naming @x and @y; the other got
 * its hold. */
static void
run_rw_cycle (RedisLockRegistry *r0, RedisLockRegistry *r1, HoldSpec a0, HoldSpec b0,
              HoldSpec a1, HoldSpec b1)
{
  RedisLockRegistry *registries[2] = { r0, r1 };
  const HoldSpec *specs[2][2] = { { &a0, &b0 }, { &a1, &b1 } };
  RwCycle c = { 0 };
  guint victims = 0, acquired = 0;

  for (guint i = 0; i < 2; i++)
    {
      hold_init (&c.first[i], registries[i], specs[i][0]);
      hold_init (&c.second[i], registries[i], specs[i][1]);
    }
  test_sync_init (&c.sync);
  test_run_threads (2, rw_party, &c);
  test_sync_clear (&c.sync);
  for (guint i = 0; i < 2; i++)
    {
      if (c.acquired[i])
        acquired++;
      else
        {
          g_autofree char *first = g_strdup_printf ("“%s”", a0.name);
          g_autofree char *second = g_strdup_printf ("“%s”", a1.name);

          g_assert_error (c.error[i], REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_DEADLOCK);
          g_test_message ("victim after %" G_GINT64_FORMAT " ms: %s", c.waited_ms[i],
                          c.error[i]->message);
          g_assert_cmpint (c.waited_ms[i], <=, RW_DETECT_MS);
          g_assert_nonnull (strstr (c.error[i]->message, first));
          g_assert_nonnull (strstr (c.error[i]->message, second));
          victims++;
        }
      g_clear_error (&c.error[i]);
      hold_clear (&c.first[i]);
      hold_clear (&c.second[i]);
    }
  g_assert_cmpuint (victims, ==, 1);
  g_assert_cmpuint (acquired, ==, 1);
}

/* Each party reads one lock and waits to write the other's: writers wait for readers. */
static void
writers_for_readers (RedisLockRegistry *r0, RedisLockRegistry *r1)
{
  run_rw_cycle (r0, r1, (HoldSpec){ HOLD_READ, "rw-y" }, (HoldSpec){ HOLD_WRITE, "rw-z" },
                (HoldSpec){ HOLD_READ, "rw-z" }, (HoldSpec){ HOLD_WRITE, "rw-y" });
}

/* Each party writes one lock and waits to read the other's: readers wait for writers. */
static void
readers_for_writers (RedisLockRegistry *r0, RedisLockRegistry *r1)
{
  run_rw_cycle (r0, r1, (HoldSpec){ HOLD_WRITE, "rw-y" }, (HoldSpec){ HOLD_READ, "rw-z" },
                (HoldSpec){ HOLD_WRITE, "rw-z" }, (HoldSpec){ HOLD_READ, "rw-y" });
}

/* Party 0 holds plain lock x and waits to write y; party 1 reads y and waits for x. */
static void
mixed (RedisLockRegistry *r0, RedisLockRegistry *r1)
{
  run_rw_cycle (r0, r1, (HoldSpec){ HOLD_PLAIN, "plain-x" }, (HoldSpec){ HOLD_WRITE, "rw-y" },
                (HoldSpec){ HOLD_READ, "rw-y" }, (HoldSpec){ HOLD_PLAIN, "plain-x" });
}

static void
test_threads_writers (TestFixture *fx, gconstpointer data)
{
  TEST_SKIP_IF_NO_STORE (fx);
  g_test_summary ("Two threads of one registry each read a read-write lock and wait to write "
                  "the other's: exactly one fails with DEADLOCK within 2 s, naming both");
  writers_for_readers (fx->registry, fx->registry);
}

static void
test_threads_readers (TestFixture *fx, gconstpointer data)
{
  TEST_SKIP_IF_NO_STORE (fx);
  g_test_summary ("Two threads of one registry each write a read-write lock and wait to read "
                  "the other's: exactly one fails with DEADLOCK within 2 s, naming both");
  readers_for_writers (fx->registry, fx->registry);
}

static void
test_threads_mixed (TestFixture *fx, gconstpointer data)
{
  TEST_SKIP_IF_NO_STORE (fx);
  g_test_summary ("One thread holds plain lock x and waits to write y, another reads y and "
                  "waits for x (one registry): exactly one fails with DEADLOCK within 2 s");
  mixed (fx->registry, fx->registry);
}

static void
test_registries_writers (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) r0 = test_registry_new (fx);
  g_autoptr (RedisLockRegistry) r1 = test_registry_new (fx);

  TEST_SKIP_IF_NO_STORE (fx);
  g_test_summary ("Two registries (waits in the store, as between processes): each reads a "
                  "read-write lock and waits to write the other's: one DEADLOCK within 2 s");
  writers_for_readers (r0, r1);
}

static void
test_registries_readers (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) r0 = test_registry_new (fx);
  g_autoptr (RedisLockRegistry) r1 = test_registry_new (fx);

  TEST_SKIP_IF_NO_STORE (fx);
  g_test_summary ("Two registries: each writes a read-write lock and waits to read the "
                  "other's: one DEADLOCK within 2 s");
  readers_for_writers (r0, r1);
}

static void
test_registries_mixed (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) r0 = test_registry_new (fx);
  g_autoptr (RedisLockRegistry) r1 = test_registry_new (fx);

  TEST_SKIP_IF_NO_STORE (fx);
  g_test_summary ("Two registries: one holds plain lock x and waits to write y, the other "
                  "reads y and waits for x: one DEADLOCK within 2 s");
  mixed (r0, r1);
}

void
deadlock_rw_add_tests (void)
{
  test_add_stores_but_quorum ("/deadlock/rw/threads/writers-wait-for-readers", NULL,
                              test_threads_writers);
  test_add_stores_but_quorum ("/deadlock/rw/threads/readers-wait-for-writers", NULL,
                              test_threads_readers);
  test_add_stores_but_quorum ("/deadlock/rw/threads/mixed", NULL, test_threads_mixed);
  test_add_stores_but_quorum ("/deadlock/rw/registries/writers-wait-for-readers", NULL,
                              test_registries_writers);
  test_add_stores_but_quorum ("/deadlock/rw/registries/readers-wait-for-writers", NULL,
                              test_registries_readers);
  test_add_stores_but_quorum ("/deadlock/rw/registries/mixed", NULL, test_registries_mixed);
}
