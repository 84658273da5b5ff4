/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* common-threads.c: the test helpers for threads (running, finding and waiting for
 * them, and the mutex and condition variable a test synchronizes its threads with),
 * split from common.c; see common.h for what each is for. As there, everything
 * asserts instead of returning errors.
 */
/* syscall() and the thread ids of /proc are Linux, not ISO C. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "config.h"

#include "common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/syscall.h>
#endif

/* --- Threads ----------------------------------------------------------------------- */

typedef struct
{
  TestThreadFunc func;
  gpointer data;
  guint index;
} ThreadStart;

static gpointer
thread_main (gpointer user_data)
{
  ThreadStart *start = user_data;

  start->func (start->index, start->data);
  return NULL;
}

void
test_run_threads (guint n_threads, TestThreadFunc func, gpointer data)
{
  g_autofree ThreadStart *starts = g_new0 (ThreadStart, n_threads);
  g_autofree GThread **threads = g_new0 (GThread *, n_threads);

  for (guint i = 0; i < n_threads; i++)
    {
      starts[i].func = func;
      starts[i].data = data;
      starts[i].index = i;
      threads[i] = g_thread_new ("test-worker", thread_main, &starts[i]);
    }
  for (guint i = 0; i < n_threads; i++)
    g_thread_join (threads[i]);
}

gint
test_thread_id (void)
{
#ifdef __linux__
  return (gint)syscall (SYS_gettid);
#else
  return 0;
#endif
}

#ifdef __linux__
static gboolean
thread_blocked (gpointer data)
{
  gint tid = GPOINTER_TO_INT (data);
  g_autofree char *path = g_strdup_printf ("/proc/self/task/%d/stat", tid);
  g_autofree char *stat = NULL;
  const char *paren;

  if (!g_file_get_contents (path, &stat, NULL, NULL))
    return FALSE;
  /* "tid (comm) S ...": the state follows the last parenthesis. */
  paren = strrchr (stat, ')');
  return paren != NULL && paren[1] == ' ' && (paren[2] == 'S' || paren[2] == 'D');
}
#endif

gboolean
test_wait_thread_blocked (gint tid, gint64 timeout_ms)
{
#ifdef __linux__
  return test_wait_until (thread_blocked, GINT_TO_POINTER (tid), timeout_ms);
#else
  return TRUE;
#endif
}

typedef struct
{
  guint n_threads;
  TestThreadFunc func;
  gpointer data;
} Background;

static gpointer
background_main (gpointer user_data)
{
  Background *background = user_data;

  test_run_threads (background->n_threads, background->func, background->data);
  g_free (background);
  return NULL;
}

GThread *
test_run_threads_in_background (guint n_threads, TestThreadFunc func, gpointer data)
{
  Background *background = g_new0 (Background, 1);

  background->n_threads = n_threads;
  background->func = func;
  background->data = data;
  return g_thread_new ("test-threads", background_main, background);
}

typedef struct
{
  gint *tids;
  guint n_tids;
} Tids;

static gboolean
tids_set (gpointer data)
{
  Tids *tids = data;

  for (guint i = 0; i < tids->n_tids; i++)
    if (g_atomic_int_get (&tids->tids[i]) == 0)
      return FALSE;
  return TRUE;
}

void
test_wait_threads_blocked (gint *tids, guint n_tids, gint64 timeout_ms)
{
  Tids wait = { tids, n_tids };

  g_assert_true (test_wait_until (tids_set, &wait, timeout_ms));
  for (guint i = 0; i < n_tids; i++)
    g_assert_true (test_wait_thread_blocked (g_atomic_int_get (&tids[i]), timeout_ms));
}

guint
test_thread_count (void)
{
  GDir *dir = g_dir_open ("/proc/self/task", 0, NULL);
  guint n = 0;

  g_assert_nonnull (dir);
  while (g_dir_read_name (dir) != NULL)
    n++;
  g_dir_close (dir);
  return n;
}

gboolean
test_iterate_until (const guint *counter, guint value, gint64 timeout_ms)
{
  gint64 end = test_now_ms () + timeout_ms;

  while (*counter < value)
    {
      if (test_now_ms () >= end)
        return FALSE;
      if (!g_main_context_iteration (g_main_context_get_thread_default (), FALSE))
        g_usleep (1000);
    }
  return TRUE;
}

gint
test_find_thread (const char *name)
{
  GDir *dir = g_dir_open ("/proc/self/task", 0, NULL);
  const char *entry;
  gint tid = 0;

  g_assert_nonnull (dir);
  while (tid == 0 && (entry = g_dir_read_name (dir)) != NULL)
    {
      g_autofree char *path = g_strdup_printf ("/proc/self/task/%s/comm", entry);
      g_autofree char *comm = NULL;
      if (g_file_get_contents (path, &comm, NULL, NULL) && strcmp (g_strchomp (comm), name) == 0)
        tid = atoi (entry);
    }
  g_dir_close (dir);
  return tid;
}

guint64
test_thread_sleeps (gint tid)
{
  g_autofree char *path = g_strdup_printf ("/proc/self/task/%d/status", tid);
  g_autofree char *status = NULL;
  const char *field;

  g_assert_true (g_file_get_contents (path, &status, NULL, NULL));
  field = strstr (status, "\nvoluntary_ctxt_switches:");
  g_assert_nonnull (field);
  return g_ascii_strtoull (field + strlen ("\nvoluntary_ctxt_switches:"), NULL, 10);
}

void
test_sync_init (TestSync *sync)
{
  pthread_condattr_t attr;

  pthread_mutex_init (&sync->mutex, NULL);
  pthread_condattr_init (&attr);
  pthread_condattr_setclock (&attr, CLOCK_MONOTONIC);
  pthread_cond_init (&sync->cond, &attr);
  pthread_condattr_destroy (&attr);
}

void
test_sync_clear (TestSync *sync)
{
  pthread_mutex_destroy (&sync->mutex);
  pthread_cond_destroy (&sync->cond);
}

void
test_sync_lock (TestSync *sync)
{
  pthread_mutex_lock (&sync->mutex);
}

void
test_sync_unlock (TestSync *sync)
{
  pthread_mutex_unlock (&sync->mutex);
}

void
test_sync_broadcast (TestSync *sync)
{
  pthread_cond_broadcast (&sync->cond);
}

void
test_sync_wait (TestSync *sync)
{
  pthread_cond_wait (&sync->cond, &sync->mutex);
}

gboolean
test_sync_wait_until (TestSync *sync, gint64 end_us)
{
  struct timespec ts;

  if (g_get_monotonic_time () >= end_us)
    return FALSE;
  ts.tv_sec = end_us / G_USEC_PER_SEC;
  ts.tv_nsec = (end_us % G_USEC_PER_SEC) * 1000;
  return pthread_cond_timedwait (&sync->cond, &sync->mutex, &ts) != ETIMEDOUT;
}

gboolean
test_sync_wait_flag (TestSync *sync, const gboolean *flag, gint64 timeout_ms)
{
  gint64 end = g_get_monotonic_time () + timeout_ms * 1000;
  gboolean set;

  test_sync_lock (sync);
  while (!*flag && test_sync_wait_until (sync, end))
    ;
  set = *flag;
  test_sync_unlock (sync);
  return set;
}
