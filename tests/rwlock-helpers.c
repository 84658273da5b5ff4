/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* rwlock-helpers.c: the helpers of the read-write lock tests (see rwlock-helpers.h). */
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rwlock-helpers.h"

RedisRWLock *
obtain_rw (RedisLockRegistry *registry, const char *name)
{
  g_autoptr (GError) error = NULL;
  RedisRWLock *lock = redis_lock_registry_obtain_rw (registry, name, &error);

  g_assert_no_error (error);
  g_assert_nonnull (lock);
  return lock;
}

void
read_ok (RedisRWLock *lock)
{
  g_autoptr (GError) error = NULL;

  g_assert_true (redis_rw_lock_try_read_lock_for (lock, 20000, NULL, &error));
  g_assert_no_error (error);
}

void
read_unlock_ok (RedisRWLock *lock)
{
  g_autoptr (GError) error = NULL;

  g_assert_true (redis_rw_lock_read_unlock (lock, &error));
  g_assert_no_error (error);
}

void
write_ok (RedisRWLock *lock)
{
  g_autoptr (GError) error = NULL;

  g_assert_true (redis_rw_lock_try_write_lock_for (lock, 20000, NULL, &error));
  g_assert_no_error (error);
}

void
write_unlock_ok (RedisRWLock *lock)
{
  g_autoptr (GError) error = NULL;

  g_assert_true (redis_rw_lock_write_unlock (lock, &error));
  g_assert_no_error (error);
}

/* Asserts that a try of @write (or read) with @wait_ms returns FALSE without an error
 * (not acquired in time), after about @wait_ms. */
void
assert_not_acquired (RedisRWLock *lock, gboolean write, gint64 wait_ms)
{
  g_autoptr (GError) error = NULL;
  gint64 start = test_now_ms ();
  gboolean ok = write ? redis_rw_lock_try_write_lock_for (lock, wait_ms, NULL, &error)
                      : redis_rw_lock_try_read_lock_for (lock, wait_ms, NULL, &error);

  g_assert_no_error (error);
  g_assert_false (ok);
  g_assert_cmpint (test_now_ms () - start, >=, wait_ms);
}

char *
rw_key (const char *name, const char *suffix)
{
  return g_strdup_printf ("%s:{%s}:rw:%s", TEST_REGISTRY_KEY, name, suffix);
}

char *
reader_key (RedisLockRegistry *registry, const char *name)
{
  g_autofree char *suffix = g_strconcat ("r:", redis_lock_registry_get_client_id (registry), NULL);
  return rw_key (name, suffix);
}

/* ---- a thread that reads or writes and reports ---- */

static gpointer
rw_taker_main (gpointer data)
{
  RwTaker *t = data;
  gboolean ok;
  GError *error = NULL;

  g_atomic_int_set (&t->tid, test_thread_id ());
  ok = t->write ? redis_rw_lock_try_write_lock_for (t->lock, t->wait_ms, t->cancellable, &error)
                : redis_rw_lock_try_read_lock_for (t->lock, t->wait_ms, t->cancellable, &error);
  test_sync_lock (&t->sync);
  t->result = ok;
  t->error = error;
  t->returned_ms = test_now_ms ();
  t->returned = TRUE;
  test_sync_broadcast (&t->sync);
  while (ok && t->hold && !t->release)
    test_sync_wait (&t->sync);
  test_sync_unlock (&t->sync);
  if (ok)
    {
      if (t->write)
        write_unlock_ok (t->lock);
      else
        read_unlock_ok (t->lock);
    }
  return NULL;
}

GThread *
rw_taker_start (RwTaker *t, RedisRWLock *lock, gboolean write, gint64 wait_ms, gboolean hold,
                GCancellable *cancellable)
{
  memset (t, 0, sizeof *t);
  test_sync_init (&t->sync);
  t->lock = lock;
  t->cancellable = cancellable;
  t->write = write;
  t->wait_ms = wait_ms;
  t->hold = hold;
  return g_thread_new ("rw-taker", rw_taker_main, t);
}

/* Waits until the taker's thread has come to wait (asleep in the kernel). */
void
rw_taker_wait_blocked (RwTaker *t)
{
  TEST_WAIT_UNTIL (g_atomic_int_get (&t->tid) != 0, 10000);
  g_assert_true (test_wait_thread_blocked (g_atomic_int_get (&t->tid), 10000));
}

void
rw_taker_release_join (RwTaker *t, GThread *thread)
{
  g_assert_true (test_sync_wait_flag (&t->sync, &t->returned, 30000));
  test_sync_lock (&t->sync);
  t->release = TRUE;
  test_sync_broadcast (&t->sync);
  test_sync_unlock (&t->sync);
  g_thread_join (thread);
  g_clear_error (&t->error);
  test_sync_clear (&t->sync);
}

/* Whether another thread can take a read hold of @lock at once (it gives it back). */
gboolean
other_thread_reads (RedisRWLock *lock)
{
  RwTaker t;
  GThread *thread = rw_taker_start (&t, lock, FALSE, 0, FALSE, NULL);
  gboolean result;

  g_assert_true (test_sync_wait_flag (&t.sync, &t.returned, 10000));
  g_assert_no_error (t.error);
  result = t.result;
  rw_taker_release_join (&t, thread);
  return result;
}

/* The child: takes NAME for reading or writing on URL, says "held", holds it until its
 * stdin closes, releases it and says "done". */
int
child_main (char **argv)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (RedisLockRegistry) registry = redis_lock_registry_new (argv[2], TEST_REGISTRY_KEY,
                                                                    &error);
  g_autoptr (RedisRWLock) lock = NULL;
  gboolean write = strcmp (argv[4], "write") == 0;
  char line[64];

  if (registry == NULL || (lock = redis_lock_registry_obtain_rw (registry, argv[3], &error)) == NULL)
    return 2;
  if (!(write ? redis_rw_lock_try_write_lock_for (lock, 20000, NULL, &error)
              : redis_rw_lock_try_read_lock_for (lock, 20000, NULL, &error)))
    return 3;
  printf ("held\n");
  fflush (stdout);
  while (fgets (line, sizeof line, stdin) != NULL)
    ;
  if (!(write ? redis_rw_lock_write_unlock (lock, &error) : redis_rw_lock_read_unlock (lock, &error)))
    return 4;
  printf ("done\n");
  fflush (stdout);
  return 0;
}


void
child_start (Child *child, const char *url, const char *mode)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *exe = g_file_read_link ("/proc/self/exe", NULL);
  const char *argv[] = { exe, "--rw-child", url, NAME, mode, NULL };
  char line[64];
  int out;

  g_assert_nonnull (exe);
  g_assert_true (g_spawn_async_with_pipes (NULL, (char **) argv, NULL, G_SPAWN_DO_NOT_REAP_CHILD,
                                           NULL, NULL, &child->pid, &child->in, &out, NULL,
                                           &error));
  g_assert_no_error (error);
  child->out = fdopen (out, "r");
  g_assert_nonnull (fgets (line, sizeof line, child->out));
  g_assert_cmpstr (line, ==, "held\n");
}

/* Closes the child's stdin (it releases), returns when it said "done" and exited 0. */
void
child_finish (Child *child)
{
  char line[64];
  int status;

  close (child->in);
  g_assert_nonnull (fgets (line, sizeof line, child->out));
  g_assert_cmpstr (line, ==, "done\n");
  fclose (child->out);
  g_assert_cmpint (waitpid (child->pid, &status, 0), ==, child->pid);
  g_assert_true (WIFEXITED (status) && WEXITSTATUS (status) == 0);
  g_spawn_close_pid (child->pid);
}

/* Asynchronous calls ------------------------------------------------------------- */

void
on_async_done (GObject *source, GAsyncResult *result, gpointer data)
{
  AsyncResult *r = data;

  g_assert_null (source);
  r->result = r->write ? redis_rw_lock_write_lock_finish (r->lock, result, &r->error)
                       : redis_rw_lock_read_lock_finish (r->lock, result, &r->error);
  r->done = TRUE;
}

void
async_wait (AsyncResult *r)
{
  gint64 end = test_now_ms () + 20000;

  while (!r->done && test_now_ms () < end)
    g_main_context_iteration (g_main_context_get_thread_default (), TRUE);
  g_assert_true (r->done);
}

void
on_many_done (GObject *source, GAsyncResult *result, gpointer data)
{
  RwManyCall *c = data;
  RwMany *m = c->many;
  GError *error = NULL;
  gboolean ok = c->write ? redis_rw_lock_write_lock_finish (m->lock, result, &error)
                         : redis_rw_lock_read_lock_finish (m->lock, result, &error);

  m->done++;
  if (ok && c->write)
    {
      m->writes++;
      write_unlock_ok (m->lock);
    }
  else if (ok)
    {
      m->reads++;
      if (m->writes < m->expected_writes)
        m->reads_before_last_write++;
    }
  if (error != NULL && m->first_error == NULL)
    m->first_error = error;
  else
    g_clear_error (&error);
}
