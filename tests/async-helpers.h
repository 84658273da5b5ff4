/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* async-helpers.h: what the tests of redis_lock_lock_async() and
 * redis_lock_unlock_async() (async.c, async-ending.c) share: iterating the main
 * context until a condition holds, what one call's callback saw (Pending), and a
 * thread that holds a lock until told to release it (Holder). */
#ifndef REDIS_LOCK_TESTS_ASYNC_HELPERS_H
#define REDIS_LOCK_TESTS_ASYNC_HELPERS_H

#include "common.h"

/* The worker threads of the library's pool for asynchronous calls, at most. */
#define POOL_THREADS 4

/* Iterates the default main context until @expr holds, failing after @timeout_ms. A
 * tick source makes each iteration return, so the condition is seen promptly. */
#define ITERATE_UNTIL(expr, timeout_ms)                                                            \
  G_STMT_START                                                                                     \
  {                                                                                                \
    gint64 iterate_deadline_ = g_get_monotonic_time () + (gint64)(timeout_ms)*1000;                \
    guint iterate_tick_ = g_timeout_add (5, async_tick, NULL);                                           \
    while (!(expr))                                                                                \
      {                                                                                            \
        if (g_get_monotonic_time () >= iterate_deadline_)                                          \
          g_error ("%s:%d: still not true after %d ms: %s", __FILE__, __LINE__, (int)(timeout_ms), \
                   #expr);                                                                         \
        g_main_context_iteration (NULL, TRUE);                                                     \
      }                                                                                            \
    g_source_remove (iterate_tick_);                                                               \
  }                                                                                                \
  G_STMT_END

/* The tick source of ITERATE_UNTIL(): makes each iteration return. */
gboolean async_tick (gpointer data);

/* What one call's callback saw. */
typedef struct
{
  RedisLock *lock;
  guint index;
  gboolean done;
  gboolean result;
  GError *error;
  GThread *thread;   /* the thread the callback ran in */
  gboolean held;     /* redis_lock_is_held_by_current_thread() in the callback */
  guint hold_count;  /* redis_lock_get_hold_count() in the callback */
  gboolean cancel_first; /* cancel this before finishing */
  GCancellable *cancellable;
  gboolean unlock;   /* unlock (redis_lock_unlock) in the callback when held */
  gint64 done_ms;
  struct Order *order; /* records the order of completions, when set */
} Pending;

struct Order
{
  guint *indexes;
  guint n_done;
  guint max_threads; /* the most threads the process had in a callback */
};

/* The callbacks of redis_lock_lock_async() and redis_lock_unlock_async() that fill a
 * Pending (on_locked() also cancels first, records the order and unlocks, as the
 * Pending asks). */
void on_locked (GObject *source, GAsyncResult *result, gpointer data);
void on_unlocked (GObject *source, GAsyncResult *result, gpointer data);
void pending_clear (Pending *p);
/* redis_lock_lock_async() of @lock into @p, with @p's cancellable. */
void lock_async (Pending *p, RedisLock *lock, gint64 wait_ms);

/* A thread of the test that holds a lock until told to release it. */
typedef struct
{
  RedisLock *lock;
  TestSync sync;
  gboolean held;
  gboolean release;
  GThread *thread;
} Holder;

/* Starts @h's thread, which holds @lock once this returns; holder_release() lets it
 * release and joins it. */
void holder_start (Holder *h, RedisLock *lock);
void holder_release (Holder *h);

/* The tests of async-ending.c: cancellation, close, deadlines, unlock_async, the lease
 * cancellable's source and a frozen server, added by async.c's main(). */
void async_add_ending_tests (void);

#endif /* REDIS_LOCK_TESTS_ASYNC_HELPERS_H */
