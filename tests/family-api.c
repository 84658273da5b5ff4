/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* family-api.c: the lock family's scoped holds and non-blocking releases: the
 * read-write lock's reader and writer lockers and g_autoptr (RedisPermit) end their
 * hold with the scope; redis_permit_release_async() and the read-write lock's
 * _unlock_async() calls complete in the caller's main context, and, against a frozen
 * server, leave that context's loop running (a timer keeps firing) for as long as the
 * call waits.
 */
#include "common.h"

static RedisRWLock *
obtain_rw_ok (RedisLockRegistry *registry, const char *name)
{
  g_autoptr (GError) error = NULL;
  RedisRWLock *lock = redis_lock_registry_obtain_rw (registry, name, &error);

  g_assert_no_error (error);
  g_assert_nonnull (lock);
  return lock;
}

static RedisSemaphore *
obtain_sem_ok (RedisLockRegistry *registry, const char *name, guint permits)
{
  g_autoptr (GError) error = NULL;
  RedisSemaphore *sem = redis_lock_registry_obtain_semaphore (registry, name, permits, &error);

  g_assert_no_error (error);
  g_assert_nonnull (sem);
  return sem;
}

static guint
available_ok (RedisSemaphore *sem)
{
  g_autoptr (GError) error = NULL;
  guint n = redis_semaphore_get_available (sem, &error);

  g_assert_no_error (error);
  return n;
}

/* Whether a registry other than the holder's could take the read (or write) hold now. */
static gboolean
other_can (RedisRWLock *other, gboolean write)
{
  g_autoptr (GError) error = NULL;
  gboolean ok = write ? redis_rw_lock_try_write_lock_for (other, 0, NULL, &error)
                      : redis_rw_lock_try_read_lock_for (other, 0, NULL, &error);

  g_assert_no_error (error);
  if (ok)
    {
      g_assert_true (write ? redis_rw_lock_write_unlock (other, &error)
                           : redis_rw_lock_read_unlock (other, &error));
      g_assert_no_error (error);
    }
  return ok;
}

static void
test_rw_lockers (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisLockRegistry) rb = NULL;
  g_autoptr (RedisRWLock) lock = NULL;
  g_autoptr (RedisRWLock) other = NULL;

  g_test_summary ("A reader locker reads from its creation to the end of its scope (another "
                  "registry cannot write meanwhile, and can after); a writer locker writes "
                  "for its scope (no other reader meanwhile)");
  TEST_SKIP_IF_NO_STORE (fx);

  rb = test_registry_new (fx);
  lock = obtain_rw_ok (fx->registry, "scoped");
  other = obtain_rw_ok (rb, "scoped");
  {
    g_autoptr (GError) error = NULL;
    g_autoptr (RedisRWLockReaderLocker) reader = redis_rw_lock_reader_locker_new (lock, &error);

    g_assert_no_error (error);
    g_assert_nonnull (reader);
    g_assert_false (other_can (other, TRUE));
    g_assert_true (other_can (other, FALSE));
  }
  g_assert_true (other_can (other, TRUE));
  {
    g_autoptr (GError) error = NULL;
    g_autoptr (RedisRWLockWriterLocker) writer = redis_rw_lock_writer_locker_new (lock, &error);

    g_assert_no_error (error);
    g_assert_nonnull (writer);
    g_assert_false (other_can (other, FALSE));
    g_assert_false (other_can (other, TRUE));
  }
  g_assert_true (other_can (other, FALSE));
  g_assert_true (other_can (other, TRUE));
}

static void
test_rw_locker_refused (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisRWLock) lock = NULL;
  g_autoptr (RedisRWLockReaderLocker) reader = NULL;
  g_autoptr (RedisRWLockWriterLocker) writer = NULL;
  g_autoptr (GError) error = NULL;

  g_test_summary ("A writer locker asked by a thread that reads (an upgrade) is NULL with "
                  "INVALID, and the thread's read hold is untouched");
  TEST_SKIP_IF_NO_STORE (fx);

  lock = obtain_rw_ok (fx->registry, "upgrade");
  reader = redis_rw_lock_reader_locker_new (lock, &error);
  g_assert_no_error (error);
  writer = redis_rw_lock_writer_locker_new (lock, &error);
  g_assert_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID);
  g_assert_null (writer);
  g_assert_nonnull (redis_rw_lock_get_lease_cancellable (lock));
}

static void
test_permit_autoptr (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisSemaphore) sem = NULL;

  g_test_summary ("g_autoptr (RedisPermit) gives the permit back when its scope ends; a "
                  "permit taken out with g_steal_pointer() is the caller's to release");
  TEST_SKIP_IF_NO_STORE (fx);

  sem = obtain_sem_ok (fx->registry, "scoped", 2);
  {
    g_autoptr (GError) error = NULL;
    g_autoptr (RedisPermit) permit = redis_semaphore_try_acquire_for (sem, 0, NULL, &error);

    g_assert_no_error (error);
    g_assert_nonnull (permit);
    g_assert_cmpuint (available_ok (sem), ==, 1);
  }
  g_assert_cmpuint (available_ok (sem), ==, 2);
  {
    g_autoptr (GError) error = NULL;
    g_autoptr (RedisPermit) permit = redis_semaphore_try_acquire_for (sem, 0, NULL, &error);
    RedisPermit *stolen;

    g_assert_no_error (error);
    stolen = g_steal_pointer (&permit);
    g_assert_true (redis_permit_release (stolen, &error));
    g_assert_no_error (error);
  }
  g_assert_cmpuint (available_ok (sem), ==, 2);
}

/* Non-blocking releases ------------------------------------------------------------ */

typedef struct
{
  GMainLoop *loop;
  RedisRWLock *rw; /* for the read-write lock's finish calls */
  int kind;        /* KIND_* */
  gboolean done;
  gboolean ok;
  GError *error;
  guint ticks;          /* timer ticks so far */
  guint ticks_at_done;  /* the ticks seen before the callback */
  guint ticks_at_start; /* the ticks seen when the call was made */
  RedisLockTestServer *frozen; /* resumed by the timer after RESUME_AFTER ticks */
} Release;

enum
{
  KIND_PERMIT,
  KIND_READ,
  KIND_WRITE,
};

#define TICK_MS 20
#define RESUME_AFTER 5

static void
on_released (GObject *source, GAsyncResult *result, gpointer data)
{
  Release *r = data;

  (void) source;
  if (r->kind == KIND_PERMIT)
    r->ok = redis_permit_release_finish (result, &r->error);
  else if (r->kind == KIND_READ)
    r->ok = redis_rw_lock_read_unlock_finish (r->rw, result, &r->error);
  else
    r->ok = redis_rw_lock_write_unlock_finish (r->rw, result, &r->error);
  r->done = TRUE;
  r->ticks_at_done = r->ticks;
  g_main_loop_quit (r->loop);
}

static gboolean
on_tick (gpointer data)
{
  Release *r = data;

  r->ticks++;
  if (r->frozen != NULL && r->ticks - r->ticks_at_start == RESUME_AFTER)
    redis_lock_test_server_resume (g_steal_pointer (&r->frozen));
  return G_SOURCE_CONTINUE;
}

static gboolean
on_give_up (gpointer data)
{
  Release *r = data;

  g_main_loop_quit (r->loop);
  return G_SOURCE_REMOVE;
}

/* Starts the release of @r's kind (of @permit or @r->rw), with @frozen paused
 * meanwhile when not NULL, and runs the loop until it completes. */
static void
run_release (Release *r, RedisPermit *permit, RedisLockTestServer *frozen)
{
  g_autoptr (GMainContext) context = g_main_context_new ();
  GSource *tick, *give_up;

  g_main_context_push_thread_default (context);
  r->loop = g_main_loop_new (context, FALSE);
  tick = g_timeout_source_new (TICK_MS);
  g_source_set_callback (tick, on_tick, r, NULL);
  g_source_attach (tick, context);
  give_up = g_timeout_source_new (20000);
  g_source_set_callback (give_up, on_give_up, r, NULL);
  g_source_attach (give_up, context);
  if (frozen != NULL)
    redis_lock_test_server_pause (frozen);
  r->frozen = frozen;
  r->ticks_at_start = r->ticks;
  if (r->kind == KIND_PERMIT)
    redis_permit_release_async (permit, NULL, on_released, r);
  else if (r->kind == KIND_READ)
    redis_rw_lock_read_unlock_async (r->rw, NULL, on_released, r);
  else
    redis_rw_lock_write_unlock_async (r->rw, NULL, on_released, r);
  if (!r->done)
    g_main_loop_run (r->loop);
  if (r->frozen != NULL)
    redis_lock_test_server_resume (g_steal_pointer (&r->frozen));
  g_source_destroy (tick);
  g_source_unref (tick);
  g_source_destroy (give_up);
  g_source_unref (give_up);
  g_main_loop_unref (r->loop);
  g_main_context_pop_thread_default (context);
  g_assert_true (r->done);
}

/* Each release, with the server frozen when @freeze (Redis only): the call completes
 * with TRUE, what it held is free, and when frozen the loop's timer ran throughout. */
static void
check_releases (TestFixture *fx, gboolean freeze)
{
  g_autoptr (RedisLockRegistry) rb = NULL;
  g_autoptr (RedisSemaphore) sem = NULL;
  g_autoptr (RedisRWLock) rw = NULL;
  g_autoptr (RedisRWLock) other = NULL;
  g_autoptr (GError) error = NULL;
  RedisLockTestServer *frozen = freeze ? fx->server : NULL;

  rb = test_registry_new (fx);
  if (freeze)
    redis_lock_registry_set_command_timeout_ms (fx->registry, 10000);
  sem = obtain_sem_ok (fx->registry, "released", 1);
  rw = obtain_rw_ok (fx->registry, "released");
  other = obtain_rw_ok (rb, "released");

  for (int kind = KIND_PERMIT; kind <= KIND_WRITE; kind++)
    {
      Release r = { .kind = kind, .rw = rw };
      RedisPermit *permit = NULL;

      if (kind == KIND_PERMIT)
        {
          permit = redis_semaphore_try_acquire_for (sem, 0, NULL, &error);
          g_assert_no_error (error);
          g_assert_nonnull (permit);
        }
      else if (kind == KIND_READ)
        g_assert_true (redis_rw_lock_try_read_lock_for (rw, 0, NULL, &error));
      else
        g_assert_true (redis_rw_lock_try_write_lock_for (rw, 0, NULL, &error));
      g_assert_no_error (error);

      run_release (&r, permit, frozen);
      g_test_message ("release %d: %u ticks of %d ms before it completed", kind,
                      r.ticks_at_done - r.ticks_at_start, TICK_MS);
      g_assert_no_error (r.error);
      g_assert_true (r.ok);
      if (freeze)
        g_assert_cmpuint (r.ticks_at_done - r.ticks_at_start, >=, RESUME_AFTER);
      if (kind == KIND_PERMIT)
        g_assert_cmpuint (available_ok (sem), ==, 1);
      else
        g_assert_true (other_can (other, TRUE));
    }
}

static void
test_releases_async (TestFixture *fx, gconstpointer data)
{
  g_test_summary ("redis_permit_release_async() and the read-write lock's read and write "
                  "unlock_async complete with TRUE in the caller's context, and what they "
                  "held is free for another registry");
  TEST_SKIP_IF_NO_STORE (fx);
  check_releases (fx, FALSE);
}

static void
test_releases_frozen (TestFixture *fx, gconstpointer data)
{
  g_test_summary ("Against a frozen server, each non-blocking release leaves its loop "
                  "running: a timer of the loop keeps firing while the release waits, and "
                  "resumes the server itself; the release then completes with TRUE");
  TEST_SKIP_IF_NO_SERVER (fx);
  check_releases (fx, TRUE);
}

static void
test_unlock_async_local (TestFixture *fx, gconstpointer data)
{
  g_autoptr (RedisRWLock) rw = NULL;
  g_autoptr (GError) error = NULL;
  Release r = { .kind = KIND_WRITE };

  g_test_summary ("An asynchronous unlock by a thread that holds nothing fails with "
                  "NOT_OWNER; a write unlock that would downgrade (the thread also reads) "
                  "fails with INVALID and leaves both holds as they were");
  TEST_SKIP_IF_NO_STORE (fx);

  rw = obtain_rw_ok (fx->registry, "local");
  r.rw = rw;
  run_release (&r, NULL, NULL);
  g_assert_error (r.error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_NOT_OWNER);
  g_clear_error (&r.error);

  g_assert_true (redis_rw_lock_try_write_lock_for (rw, 0, NULL, &error));
  g_assert_true (redis_rw_lock_try_read_lock_for (rw, 0, NULL, &error));
  g_assert_no_error (error);
  r = (Release){ .kind = KIND_WRITE, .rw = rw };
  run_release (&r, NULL, NULL);
  g_assert_error (r.error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID);
  g_clear_error (&r.error);
  /* Both holds stand: the blocking unlocks end them. */
  g_assert_true (redis_rw_lock_write_unlock (rw, &error));
  g_assert_no_error (error);
  g_assert_true (redis_rw_lock_read_unlock (rw, &error));
  g_assert_no_error (error);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);

  test_add_stores_but_quorum ("/family/locker/rw", NULL, test_rw_lockers);
  test_add_stores_but_quorum ("/family/locker/rw-upgrade-refused", NULL, test_rw_locker_refused);
  test_add_stores_but_quorum ("/family/locker/permit-autoptr", NULL, test_permit_autoptr);
  test_add_stores_but_quorum ("/family/release-async/completes", NULL, test_releases_async);
  test_add_stores_but_quorum ("/family/release-async/local-refusals", NULL,
                              test_unlock_async_local);
  test_add_redis ("/family/release-async/frozen-server", NULL, test_releases_frozen);
  return g_test_run ();
}
