/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* async-helpers.c: the helpers of the asynchronous lock tests; see async-helpers.h. */
#include "async-helpers.h"

gboolean
async_tick (gpointer data)
{
  return G_SOURCE_CONTINUE;
}

void
on_locked (GObject *source, GAsyncResult *result, gpointer data)
{
  Pending *p = data;

  g_assert_null (source);
  if (p->cancel_first)
    g_cancellable_cancel (p->cancellable);
  p->result = redis_lock_lock_finish (p->lock, result, &p->error);
  p->thread = g_thread_self ();
  p->held = redis_lock_is_held_by_current_thread (p->lock);
  p->hold_count = redis_lock_get_hold_count (p->lock);
  p->done_ms = test_now_ms ();
  if (p->order != NULL)
    {
      p->order->indexes[p->order->n_done++] = p->index;
      if (p->order->n_done % 100 == 1)
        p->order->max_threads = MAX (p->order->max_threads, test_thread_count ());
    }
  if (p->unlock && p->result)
    test_unlock_ok (p->lock);
  p->done = TRUE;
}

void
on_unlocked (GObject *source, GAsyncResult *result, gpointer data)
{
  Pending *p = data;

  p->result = redis_lock_unlock_finish (p->lock, result, &p->error);
  p->thread = g_thread_self ();
  p->held = redis_lock_is_held_by_current_thread (p->lock);
  p->done = TRUE;
}

void
pending_clear (Pending *p)
{
  g_clear_error (&p->error);
  g_clear_object (&p->cancellable);
}

void
lock_async (Pending *p, RedisLock *lock, gint64 wait_ms)
{
  p->lock = lock;
  redis_lock_lock_async (lock, wait_ms, 0, p->cancellable, on_locked, p);
}

static gpointer
holder_main (gpointer data)
{
  Holder *h = data;

  test_lock_ok (h->lock);
  test_sync_lock (&h->sync);
  h->held = TRUE;
  test_sync_broadcast (&h->sync);
  while (!h->release)
    test_sync_wait (&h->sync);
  test_sync_unlock (&h->sync);
  test_unlock_ok (h->lock);
  return NULL;
}

void
holder_start (Holder *h, RedisLock *lock)
{
  h->lock = lock;
  test_sync_init (&h->sync);
  h->thread = g_thread_new ("holder", holder_main, h);
  g_assert_true (test_sync_wait_flag (&h->sync, &h->held, 10000));
}

void
holder_release (Holder *h)
{
  test_sync_lock (&h->sync);
  h->release = TRUE;
  test_sync_broadcast (&h->sync);
  test_sync_unlock (&h->sync);
  g_thread_join (h->thread);
  test_sync_clear (&h->sync);
}
