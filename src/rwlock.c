/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* rwlock.c: the read-write lock: many readers (threads of any process) or one writer.
 *
 * Two levels, as for a plain lock. Locally, one mutex and one condition variable keep
 * the read holds of each thread, the writing thread and its hold count, and the
 * number of threads waiting to write, which new readers wait behind (re-entry aside),
 * so a writer is never starved by a stream of local readers. In the store, a writer
 * holds the writer lease, and the reading threads of a registry share one reader
 * lease: the first reading thread takes it (the others wait for that one request, and
 * none of them sends its own), the last one gives it back. Each lease lives in the
 * lease table through a carrier, a RedisLock made for it and never cached, so the
 * watchdog renews it, a loss is found and reported, close releases it, and an
 * acquisition runs on the one acquisition machine with the plain lock's blocking
 * driver (rl_lock_acquire_lease(), sleeping on the carrier's notification number), or
 * for an asynchronous call with async-driver.c's (rwlock-async.c), only with the
 * store's rw_acquire as its request. Reading and writing are one path, parameterised
 * by the mode (RlRwCall): the local level's step (local_step_locked()) decides, under
 * the mutex, whether a call holds, waits, confirms the reader lease or asks the store;
 * a blocking call waits on the condition variable, an asynchronous one as a queued
 * waiter that every change of the state pokes. A notification of any key of the
 * lock wakes the waiters of both leases (registry.c routes it here); one of the
 * waiting writer's mark also stops new reading threads from joining the reader lease
 * held now, so that the writer is not starved by the readers of one process.
 *
 * What crosses processes is the store's business (store.h: a waiting writer leaves a
 * mark that holds back new readers of every registry; a writer waits for the reader
 * leases of the other registries). A thread that reads may not upgrade (two upgraders
 * would wait for each other forever); the writing thread may read, and keeps reading
 * after its last write unlock: the reader lease is taken before the writer lease goes.
 */
#include "config.h"

#include <string.h>

#include "debug.h"
#include "rwlock.h"
#include "waits.h"

/* Construction ------------------------------------------------------------------- */

static RedisLock *
carrier_new (RedisLockRegistry *registry, const char *name, const char *suffix)
{
  g_autofree char *tail = g_strconcat ("{", name, "}:rw:", suffix, NULL);
  RedisLock *carrier = rl_lock_new (registry, tail);

  carrier->member = RL_MEMBER_RW_LEASE;
  return carrier;
}

RedisRWLock *
rl_rw_lock_new (RedisLockRegistry *registry, const char *name)
{
  RedisRWLock *lock = g_new0 (RedisRWLock, 1);
  g_autofree char *reader = g_strconcat ("r:", registry->client_id, NULL);

  lock->registry = registry;
  lock->name = g_strdup (name);
  lock->writer = carrier_new (registry, name, "w");
  lock->reader = carrier_new (registry, name, reader);
  lock->waiting_key = g_strdup_printf ("%s:{%s}:rw:ww", registry->registry_key, name);
  lock->readers_key = g_strdup_printf ("%s:{%s}:rw:readers", registry->registry_key, name);
  lock->reader_prefix = g_strdup_printf ("%s:{%s}:rw:r:", registry->registry_key, name);
  lock->keys = (RlRwKeys){
    .writer = lock->writer->key_data,
    .waiting = lock->waiting_key,
    .readers = lock->readers_key,
    .reader_prefix = lock->reader_prefix,
    .reader = lock->reader->key_data,
    .owner = registry->client_id,
  };
  rl_mutex_init (&lock->m);
  rl_cond_init (&lock->cond);
  lock->reads = g_hash_table_new (NULL, NULL);
  return lock;
}

void
rl_rw_lock_free (RedisRWLock *lock)
{
  rl_waits_forget (lock->writer);
  rl_waits_forget (lock->reader);
  rl_lock_unref_memory (lock->writer);
  rl_lock_unref_memory (lock->reader);
  g_hash_table_unref (lock->reads);
  rl_cond_clear (&lock->cond);
  rl_mutex_clear (&lock->m);
  g_free (lock->waiting_key);
  g_free (lock->readers_key);
  g_free (lock->reader_prefix);
  g_free (lock->name);
  g_free (lock);
}

gboolean
rl_rw_lock_is_idle (RedisRWLock *lock)
{
  RlLeases *leases = lock->registry->leases;
  gboolean idle;

  if (rl_leases_is_pinned (leases, lock->writer) || rl_leases_is_pinned (leases, lock->reader))
    return FALSE;
  rl_mutex_lock (&lock->m);
  idle = g_hash_table_size (lock->reads) == 0 && lock->write_owner == NULL && lock->waiters == 0
         && lock->reader_lease == RL_RW_LEASE_NONE;
  rl_mutex_unlock (&lock->m);
  return idle;
}

gboolean
rl_rw_lock_check_name (RedisLockRegistry *registry, const char *name, GError **error)
{
  g_autofree char *prefix = g_strdup_printf ("%s:{%s}", registry->registry_key, name);
  const char *open = strchr (prefix, '{');

  /* The keys share the prefix; its first `{` has a `}` after it (ours, at least), so
   * the hash tag lies within the prefix unless it is empty. */
  if (open[1] != '}')
    return TRUE;
  g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID,
               "Read-write lock “%s” cannot be used: its keys would have an empty hash tag and "
               "could not share a Cluster slot; rename it",
               name);
  return FALSE;
}

/* Wake-ups ------------------------------------------------------------------------- */

void
rl_rw_lock_notify (RedisRWLock *lock, const char *key)
{
  RlLeases *leases = lock->registry->leases;

  /* A writer took the lock: a reader lease held here is checked soon, whether its
   * registration in the readers index is still there (the index may have been deleted
   * or evicted behind the readers' backs, and the writer let in beside them). Nothing
   * was released: no waiter wakes. */
  if (key != NULL && strcmp (key, lock->readers_key) == 0)
    {
      if (leases != NULL)
        rl_leases_check_soon (leases, lock->reader);
      return;
    }
  rl_lock_notify (lock->writer);
  rl_lock_notify (lock->reader);
  /* A writer of another registry may wait now: the threads reading here finish, but
   * no new one joins their lease (a stream of them would starve the writer). */
  if (key != NULL && strcmp (key, lock->waiting_key) == 0)
    {
      rl_mutex_lock (&lock->m);
      lock->mark_seq++;
      if (lock->reader_lease != RL_RW_LEASE_NONE)
        lock->writer_marked = TRUE;
      rl_mutex_unlock (&lock->m);
    }
  /* So too when the subscription went down or came back (the lease table's view of the
   * reader lease says unconfirmed then): a mark set meanwhile was not heard, and only
   * the store knows, so new reading threads wait for the lease to be given back and
   * ask the store, whose read script checks the mark. */
  else if (key == NULL && leases != NULL && rl_leases_view (leases, lock->reader).unconfirmed)
    {
      rl_mutex_lock (&lock->m);
      if (lock->reader_lease == RL_RW_LEASE_HELD)
        lock->writer_marked = TRUE;
      rl_mutex_unlock (&lock->m);
    }
  /* A lease of ours heard released: someone forced it open. Checked now. */
  if (key != NULL && leases != NULL && strcmp (key, lock->writer->key_data) == 0)
    rl_leases_check_soon (leases, lock->writer);
  else if (key != NULL && leases != NULL && strcmp (key, lock->reader->key_data) == 0)
    rl_leases_check_soon (leases, lock->reader);
}

/* The local state changed (or the waits must end): the threads that wait are
 * signalled, the asynchronous calls that do are poked. lock->m held. */
static void
broadcast_locked (RedisRWLock *lock)
{
  rl_mutex_assert_held (&lock->m);
  rl_cond_broadcast (&lock->cond);
  for (GList *l = lock->queued.head; l != NULL; l = l->next)
    ((RlLockWaiter *) l->data)->poke (l->data);
}

void
rl_rw_lock_wake_all (RedisRWLock *lock)
{
  rl_mutex_lock (&lock->m);
  broadcast_locked (lock);
  rl_mutex_unlock (&lock->m);
  rl_lock_wake_all (lock->writer);
  rl_lock_wake_all (lock->reader);
}

static void
on_cancelled (GCancellable *cancellable, gpointer data)
{
  rl_rw_lock_wake_all (data);
}

/* The local level ------------------------------------------------------------------ */

static inline gpointer
current_thread (void)
{
  return g_thread_self ();
}

/* The read holds of @thread. lock->m held. */
static guint
reads_of (RedisRWLock *lock, gpointer thread)
{
  rl_mutex_assert_held (&lock->m);
  return GPOINTER_TO_UINT (g_hash_table_lookup (lock->reads, thread));
}

/* Sets the read holds of @thread; its first and its last tell the waits-for records
 * (waits.c) that it holds the reader lease, or no longer. lock->m held. */
static void
set_reads (RedisRWLock *lock, gpointer thread, guint n)
{
  guint before = reads_of (lock, thread);

  if (n == 0)
    g_hash_table_remove (lock->reads, thread);
  else
    g_hash_table_insert (lock->reads, thread, GUINT_TO_POINTER (n));
  if ((before == 0) != (n == 0))
    rl_waits_hold (lock->reader, thread, n > 0);
}

/* The writing thread (or the marker of an asynchronous call) is now @owner, which the
 * waits-for records learn. lock->m held. */
static void
set_write_owner (RedisRWLock *lock, gpointer owner)
{
  rl_mutex_assert_held (&lock->m);
  if (lock->write_owner == owner)
    return;
  if (lock->write_owner != NULL)
    rl_waits_hold (lock->writer, lock->write_owner, FALSE);
  lock->write_owner = owner;
  if (owner != NULL)
    rl_waits_hold (lock->writer, owner, TRUE);
}

/* Waits on the local condition until @deadline, or until @waiting's next deadlock check
 * is due (then made, with lock->m let go meanwhile). FALSE with @error when the wait
 * must end (closed, cancelled, a deadlock), FALSE without when the deadline passed.
 * lock->m held. */
static gboolean
wait_local (RedisRWLock *lock, gint64 deadline, RlWaiting *waiting, GCancellable *cancellable,
            GError **error)
{
  gint64 now;

  if (rl_lock_wait_error (lock->writer, cancellable, error))
    return FALSE;
  now = g_get_monotonic_time ();
  if (now >= deadline)
    return FALSE;
  if (rl_waiting_due (waiting, now))
    {
      gboolean go_on;

      /* A wait for a thread of this process joins the waits-for graph too. */
      rl_mutex_unlock (&lock->m);
      go_on = rl_waiting_check (waiting, error);
      rl_mutex_lock (&lock->m);
      return go_on;
    }
  rl_cond_wait_until (&lock->cond, &lock->m, MIN (deadline, waiting->check_at));
  return !rl_lock_wait_error (lock->writer, cancellable, error);
}

/* FALSE with @error when @lock cannot be used now, or @cancellable was cancelled. */
static gboolean
check_usable (RedisRWLock *lock, GCancellable *cancellable, GError **error)
{
  RedisLockRegistry *registry = lock->registry;

  if (!rl_registry_check (registry, error))
    return FALSE;
  if (cancellable != NULL && g_cancellable_set_error_if_cancelled (cancellable, error))
    return FALSE;
  if (registry->store->vt->rw_acquire == NULL)
    {
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID,
                   "Read-write lock “%s”: a quorum (Redlock) registry cannot hold read-write "
                   "locks; use a single server, Sentinel or Cluster URL",
                   lock->name);
      return FALSE;
    }
  return TRUE;
}

/* The store's side ------------------------------------------------------------------ */

typedef struct
{
  RedisRWLock *lock;
  RlRwMode mode;
} RwRequest;

static RlLeaseResult
rw_request (RedisLock *carrier, const char *value, gint64 ttl_ms, gint64 deadline,
            gint64 *pttl_ms, gpointer data, GError **error)
{
  RwRequest *req = data;
  RlStore *store = req->lock->registry->store;

  return store->vt->rw_acquire (store, &req->lock->keys, req->mode, value, ttl_ms, deadline,
                                pttl_ms, error);
}

/* A reader lease is shared by threads that join it without asking the store, so the
 * registry must hear a waiting writer's mark set after a reader's request: notifications
 * are confirmed before it (once per registry; a wait of at most the connect timeout, or
 * what is left of the caller's until @deadline). */
static void
watch_before_read (RedisRWLock *lock, gint64 deadline)
{
  RedisLockRegistry *registry = lock->registry;
  gint64 limit = RL_ATOMIC_GET (registry->store_ctx.connect_timeout_ms);

  if (deadline != RL_FOREVER)
    limit = MIN (limit, MAX (deadline - g_get_monotonic_time (), 0) / 1000);
  registry->store->vt->watch (registry->store, limit);
}

/* Takes the lease @mode asks for until @deadline (the local level let the caller); a
 * wait that lasts is recorded and checked for deadlocks through @waiting (NULL: none). */
static gboolean
acquire_lease (RedisRWLock *lock, RlRwMode mode, gint64 deadline, gboolean bounded,
               GCancellable *cancellable, RlWaiting *waiting, GError **error)
{
  RwRequest req = { lock, mode };
  RlLeaseRequest request = { rw_request, &req };
  gint64 ttl_ms = RL_ATOMIC_GET (lock->registry->settings.expire_after_ms);

  if (mode == RL_RW_READ)
    watch_before_read (lock, deadline);
  return rl_lock_acquire_lease_waiting (mode == RL_RW_WRITE ? lock->writer : lock->reader,
                                        deadline, bounded, ttl_ms, &request, cancellable,
                                        waiting, error);
}

/* Gives back the lease of @carrier: TRUE, or FALSE with @error (LEASE_LOST when it had
 * been lost, CLOSED when close released it, or the store's error). */
static gboolean
release_lease (RedisRWLock *lock, RedisLock *carrier, GError **error)
{
  RedisLockRegistry *registry = lock->registry;
  RlLeaseView view = rl_leases_view (registry->leases, carrier);
  char value[RL_LEASE_VALUE_MAX];
  GError *store_error = NULL;
  g_autoptr (GError) local_error = NULL;
  RlLeaseResult result;
  gboolean lost, others = FALSE;
  gint64 start;

  if (!rl_lock_release_begin (carrier, &view, 0, value, &lost, error))
    return FALSE;
  start = g_get_monotonic_time ();
  result = rl_lock_release_store (carrier, value, lost, 0, &others, &store_error);
  if (rl_lock_release_end (carrier, &view, 0, value, lost, result, others, start, store_error,
                           &local_error)
      == RL_LEASE_OK)
    return TRUE;
  if (g_error_matches (local_error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_LEASE_LOST))
    g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_LEASE_LOST,
                 "The %s lease of read-write lock “%s” was lost before unlock: it expired or "
                 "another owner took it; the data it protected may have been changed "
                 "concurrently",
                 carrier == lock->writer ? "writer" : "reader", lock->name);
  else
    g_propagate_error (error, g_steal_pointer (&local_error));
  return FALSE;
}

static void
set_lost_error (RedisRWLock *lock, GError **error)
{
  g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_LEASE_LOST,
               "The reader lease of read-write lock “%s” was lost before unlock: it expired or "
               "another owner took it; the data it protected may have been changed concurrently",
               lock->name);
}

/* Taking a hold ------------------------------------------------------------------ */

/* Whether a new reading thread may join the reader lease held now: not when it was
 * found lost (it is never handed on; the last reader gives it back, and the next
 * takes a fresh one). Only reads the flag (a loss is reported with no mutex held, and
 * a lease unconfirmed past its TTL is marked by the watchdog). lock->m held. */
static gboolean
reader_lease_good (RedisRWLock *lock)
{
  return !lock->writer_marked && !rl_leases_is_lost (lock->registry->leases, lock->reader);
}

gboolean
rl_rw_lock_enter (RlRwCall *call, RedisRWLock *lock, RlRwMode mode, gpointer owner,
                  gint64 wait_ms, GCancellable *cancellable, gboolean *taken, GError **error)
{
  guint n;

  *taken = FALSE;
  if (!check_usable (lock, cancellable, error))
    return FALSE;
  *call = (RlRwCall){
    .lock = lock,
    .mode = mode,
    .owner = owner,
    .bounded = wait_ms != 0,
    .ttl_ms = RL_ATOMIC_GET (lock->registry->settings.expire_after_ms),
    .confirmed = -1,
  };
  rl_mutex_lock (&lock->m);
  n = reads_of (lock, owner);
  if (mode == RL_RW_READ && (n > 0 || lock->write_owner == owner))
    {
      /* Re-entry, or a read under the thread's own write hold (the writer lease covers
       * it): no store request. */
      set_reads (lock, owner, n + 1);
      *taken = TRUE;
    }
  else if (mode == RL_RW_WRITE && lock->write_owner == owner)
    {
      lock->write_count++;
      *taken = TRUE;
    }
  else if (mode == RL_RW_WRITE && n > 0)
    {
      rl_mutex_unlock (&lock->m);
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID,
                   "The calling thread reads read-write lock “%s” and cannot upgrade to "
                   "writing (two upgraders would wait for each other forever); release the read "
                   "holds first",
                   lock->name);
      return FALSE;
    }
  else
    {
      /* A waiting writer holds new readers back from now on. */
      lock->waiters++;
      if (mode == RL_RW_WRITE)
        lock->writers_waiting++;
    }
  rl_mutex_unlock (&lock->m);
  call->deadline = rl_deadline_after (g_get_monotonic_time (), wait_ms);
  return TRUE;
}

/* One look of @call at the local state: the hold is the owner's (TAKEN), or the call
 * is the one to ask the store for its lease (LEASE: a writer owns the writer's side
 * locally; the first reader has the reader lease marked as being acquired, the others
 * wait for that one request and send none of their own), or it must wait, or a reader
 * must have the reader lease held now confirmed first: it goes to one more thread only
 * when it was confirmed since the store's connection last broke or came back, or a
 * renewal confirms it now (a server that restarted empty may have lost it; the plain
 * lock's hand-off follows the same rule). lock->m held. */
static RlRwLocal
local_step_locked (RlRwCall *call)
{
  RedisRWLock *lock = call->lock;
  gint confirmed = call->confirmed;

  rl_mutex_assert_held (&lock->m);
  call->confirmed = -1;
  if (call->mode == RL_RW_WRITE)
    {
      if (lock->write_owner != NULL || g_hash_table_size (lock->reads) > 0
          || lock->reader_lease != RL_RW_LEASE_NONE)
        return RL_RW_LOCAL_WAIT;
      lock->writers_waiting--;
      /* An asynchronous call holds it under its own marker until the lease is taken: a
       * thread may go on meanwhile, and its own calls must not count as re-entries. */
      set_write_owner (lock, call->async ? (gpointer) call : call->owner);
      lock->write_count = 1;
      return RL_RW_LOCAL_LEASE;
    }
  if (lock->write_owner != NULL || lock->writers_waiting > 0)
    return RL_RW_LOCAL_WAIT;
  if (lock->reader_lease == RL_RW_LEASE_HELD && reader_lease_good (lock))
    {
      if (confirmed != 1 && rl_leases_view (lock->registry->leases, lock->reader).unconfirmed)
        /* Not confirmed: wait for its readers to give it back, then take a fresh one. */
        return confirmed == 0 ? RL_RW_LOCAL_WAIT : RL_RW_LOCAL_CONFIRM;
      set_reads (lock, call->owner, reads_of (lock, call->owner) + 1);
      lock->waiters--;
      return RL_RW_LOCAL_TAKEN;
    }
  if (lock->reader_lease != RL_RW_LEASE_NONE)
    return RL_RW_LOCAL_WAIT;
  call->seq = lock->mark_seq;
  lock->reader_lease = RL_RW_LEASE_ACQUIRING;
  return RL_RW_LOCAL_LEASE;
}

/* @call gives its wait up (closed, cancelled, the deadline) and is counted out; readers
 * a waiting writer held back may go. lock->m held. */
static void
give_up_locked (RlRwCall *call)
{
  RedisRWLock *lock = call->lock;

  rl_mutex_assert_held (&lock->m);
  if (call->waiter != NULL)
    {
      g_queue_unlink (&lock->queued, &call->waiter->link);
      call->waiter = NULL;
    }
  lock->waiters--;
  if (call->mode == RL_RW_WRITE)
    {
      lock->writers_waiting--;
      broadcast_locked (lock);
    }
}

RlRwLocal
rl_rw_lock_local_async (RlRwCall *call, RlLockWaiter *waiter, gboolean may_wait)
{
  RedisRWLock *lock = call->lock;
  RlRwLocal local;

  call->async = TRUE;
  rl_mutex_lock (&lock->m);
  local = local_step_locked (call);
  if (local == RL_RW_LOCAL_WAIT && may_wait)
    {
      if (call->waiter == NULL)
        {
          call->waiter = waiter;
          waiter->link.data = waiter;
          g_queue_push_tail_link (&lock->queued, &waiter->link);
        }
    }
  else if (local == RL_RW_LOCAL_WAIT)
    {
      give_up_locked (call);
      local = RL_RW_LOCAL_ENDED;
    }
  else if (call->waiter != NULL)
    {
      g_queue_unlink (&lock->queued, &call->waiter->link);
      call->waiter = NULL;
    }
  rl_mutex_unlock (&lock->m);
  return local;
}

void
rl_rw_lock_leave (RlRwCall *call)
{
  rl_mutex_lock (&call->lock->m);
  give_up_locked (call);
  rl_mutex_unlock (&call->lock->m);
}

void
rl_rw_lock_confirm (RlRwCall *call)
{
  call->confirmed = rl_leases_refresh (call->lock->registry->leases, call->lock->reader);
}

RedisLock *
rl_rw_lock_carrier (RlRwCall *call)
{
  return call->mode == RL_RW_WRITE ? call->lock->writer : call->lock->reader;
}

RlAcquireAction
rl_rw_lock_attempt_step (RlRwCall *call, RlAcquire *acq, gboolean pubsub, gboolean bounded,
                         GError **error)
{
  RwRequest req = { call->lock, call->mode };
  RlLeaseRequest request = { rw_request, &req };

  if (call->mode == RL_RW_READ && acq->attempts == 0)
    watch_before_read (call->lock, acq->deadline);
  return rl_lock_attempt_request_step (rl_rw_lock_carrier (call), acq, pubsub, bounded,
                                       call->ttl_ms, &request, error);
}

void
rl_rw_lock_stop_waiting (RlRwCall *call)
{
  RedisLockRegistry *registry = call->lock->registry;
  const RlRwKeys *keys = &call->lock->keys;
  g_autoptr (GError) error = NULL;
  gint64 until;

  if (call->mode != RL_RW_WRITE || rl_registry_is_closed (registry))
    return;
  /* A mark the store did not remove in time is removed in the background, as a
   * doubtful lease is released: the same compare-and-delete of our client id, with the
   * same notification. */
  until = rl_cleanup_deadline (registry, call->deadline, call->bounded);
  if (!registry->store->vt->rw_stop_waiting (registry->store, keys, until, &error))
    {
      rl_debug ("read-write lock %s: removing the waiting mark: %s (removed in the background)",
               call->lock->name, error->message);
      rl_leases_add_doubtful (registry->leases, keys->waiting, keys->owner, call->ttl_ms);
    }
}

void
rl_rw_lock_lease_end (RlRwCall *call, gboolean ok)
{
  RedisRWLock *lock = call->lock;

  /* The subscription broke since the request was sent, or is down: a mark may be
   * missed (see rl_rw_lock_notify()). */
  gboolean unheard = ok && call->mode == RL_RW_READ
                     && rl_leases_view (lock->registry->leases, lock->reader).unconfirmed;

  rl_mutex_lock (&lock->m);
  if (call->mode == RL_RW_READ)
    {
      lock->reader_lease = ok ? RL_RW_LEASE_HELD : RL_RW_LEASE_NONE;
      /* The store let it in: no mark heard before the request stands. */
      if (!ok || call->seq == lock->mark_seq)
        lock->writer_marked = unheard;
      if (ok)
        set_reads (lock, call->owner, reads_of (lock, call->owner) + 1);
      broadcast_locked (lock);
    }
  else if (!ok)
    {
      set_write_owner (lock, NULL);
      lock->write_count = 0;
      broadcast_locked (lock);
    }
  else
    set_write_owner (lock, call->owner);
  lock->waiters--;
  rl_mutex_unlock (&lock->m);
}

/* A blocking acquisition of a @mode hold for the calling thread: the local level waits
 * on the condition variable, the store's part is the plain lock's blocking driver of
 * the machine. A wait at either level that lasts joins the waits-for graph (waits.c)
 * as a wait for every holder of the lock's leases: the writer, or each reader. */
static gboolean
acquire_hold (RedisRWLock *lock, RlRwMode mode, gint64 wait_ms, GCancellable *cancellable,
              GError **error)
{
  RlRwCall call;
  RlRwLocal local;
  RlWaiting waiting;
  g_autofree char *prefix = NULL;
  gulong handler = 0;
  gboolean taken, ok;

  if (!rl_rw_lock_enter (&call, lock, mode, current_thread (), wait_ms, cancellable, &taken,
                         error))
    return FALSE;
  if (taken)
    return TRUE;
  if (cancellable != NULL && wait_ms != 0)
    handler = g_cancellable_connect (cancellable, G_CALLBACK (on_cancelled), lock, NULL);
  /* Every lease key of the lock begins with the reader leases' prefix minus "r:". */
  prefix = g_strndup (lock->reader_prefix, strlen (lock->reader_prefix) - 2);
  rl_waiting_begin_prefix (&waiting, rl_rw_lock_carrier (&call), prefix, call.deadline,
                           call.bounded);
  rl_mutex_lock (&lock->m);
  for (;;)
    {
      local = local_step_locked (&call);
      if (local == RL_RW_LOCAL_CONFIRM)
        {
          rl_mutex_unlock (&lock->m);
          rl_rw_lock_confirm (&call);
          rl_mutex_lock (&lock->m);
        }
      else if (local != RL_RW_LOCAL_WAIT)
        break;
      else if (!wait_local (lock, call.deadline, &waiting, cancellable, error))
        {
          give_up_locked (&call);
          local = RL_RW_LOCAL_ENDED;
          break;
        }
    }
  rl_mutex_unlock (&lock->m);
  ok = local == RL_RW_LOCAL_TAKEN;
  if (local == RL_RW_LOCAL_LEASE)
    {
      ok = acquire_lease (lock, mode, call.deadline, call.bounded, cancellable, &waiting, error);
      /* Not taken: a writer's mark that held readers back goes now, not at its TTL. */
      if (!ok)
        rl_rw_lock_stop_waiting (&call);
      rl_rw_lock_lease_end (&call, ok);
    }
  rl_waiting_end (&waiting);
  g_cancellable_disconnect (cancellable, handler);
  return ok;
}

gboolean
redis_rw_lock_try_read_lock_for (RedisRWLock *lock, gint64 wait_ms, GCancellable *cancellable,
                                 GError **error)
{
  g_return_val_if_fail (lock != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);
  return acquire_hold (lock, RL_RW_READ, wait_ms, cancellable, error);
}

gboolean
redis_rw_lock_try_write_lock_for (RedisRWLock *lock, gint64 wait_ms, GCancellable *cancellable,
                                  GError **error)
{
  g_return_val_if_fail (lock != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);
  return acquire_hold (lock, RL_RW_WRITE, wait_ms, cancellable, error);
}

/* Ending a hold ------------------------------------------------------------------- */

RlRwUnlock
rl_rw_lock_read_unlock_begin (RedisRWLock *lock, gpointer self, GError **error)
{
  gboolean last, lost;
  guint n;

  if (rl_registry_is_forked (lock->registry))
    return rl_registry_check (lock->registry, error) ? RL_RW_UNLOCK_DONE : RL_RW_UNLOCK_FAILED;
  rl_mutex_lock (&lock->m);
  n = reads_of (lock, self);
  if (n == 0)
    {
      rl_mutex_unlock (&lock->m);
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_NOT_OWNER,
                   "The calling thread does not read read-write lock “%s”", lock->name);
      return RL_RW_UNLOCK_FAILED;
    }
  set_reads (lock, self, n - 1);
  if (n > 1 || lock->write_owner == self)
    {
      /* An inner hold, or a read under the thread's own write hold. */
      rl_mutex_unlock (&lock->m);
      return RL_RW_UNLOCK_DONE;
    }
  /* The thread's outermost read hold ends: the last reading thread gives the lease
   * back; the others only learn whether it was lost. */
  g_assert (lock->reader_lease == RL_RW_LEASE_HELD);
  last = g_hash_table_size (lock->reads) == 0;
  if (last)
    lock->reader_lease = RL_RW_LEASE_RELEASING;
  rl_mutex_unlock (&lock->m);

  if (last)
    return RL_RW_UNLOCK_RELEASE;
  /* The lease stays for the other reading threads (it is held while they read). */
  if (!rl_registry_check (lock->registry, error))
    return RL_RW_UNLOCK_FAILED;
  lost = rl_leases_check_time (lock->registry->leases, lock->reader);
  if (lost)
    {
      set_lost_error (lock, error);
      return RL_RW_UNLOCK_FAILED;
    }
  return RL_RW_UNLOCK_DONE;
}

gboolean
rl_rw_lock_read_unlock_release (RedisRWLock *lock, GError **error)
{
  gboolean lost = !release_lease (lock, lock->reader, error);

  rl_mutex_lock (&lock->m);
  lock->reader_lease = RL_RW_LEASE_NONE;
  lock->writer_marked = FALSE;
  broadcast_locked (lock);
  rl_mutex_unlock (&lock->m);
  return !lost;
}

gboolean
redis_rw_lock_read_unlock (RedisRWLock *lock, GError **error)
{
  g_return_val_if_fail (lock != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  switch (rl_rw_lock_read_unlock_begin (lock, current_thread (), error))
    {
    case RL_RW_UNLOCK_DONE:
      return TRUE;
    case RL_RW_UNLOCK_RELEASE:
      return rl_rw_lock_read_unlock_release (lock, error);
    case RL_RW_UNLOCK_FAILED:
    default:
      return FALSE;
    }
}

/* The writing thread reads too and its last write hold ends: it takes the reader lease
 * (one attempt: the writer lease it still holds keeps every other writer out, and a
 * waiting writer's mark does not hold a downgrade back). FALSE with @error: its read
 * holds end too. */
static gboolean
downgrade (RedisRWLock *lock, gpointer self, GError **error)
{
  gboolean ok;

  rl_mutex_lock (&lock->m);
  g_assert (lock->reader_lease == RL_RW_LEASE_NONE);
  lock->reader_lease = RL_RW_LEASE_ACQUIRING;
  rl_mutex_unlock (&lock->m);
  ok = acquire_lease (lock, RL_RW_DOWNGRADE, g_get_monotonic_time (), FALSE, NULL, NULL, error);
  if (!ok && (error == NULL || *error == NULL))
    g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_LEASE_LOST,
                 "Read-write lock “%s”: the reader lease could not be taken when the last write "
                 "hold ended (the writer lease was lost); the read holds ended too",
                 lock->name);
  rl_mutex_lock (&lock->m);
  lock->reader_lease = ok ? RL_RW_LEASE_HELD : RL_RW_LEASE_NONE;
  lock->writer_marked = FALSE; /* a downgrade is not held back by marks */
  if (!ok)
    set_reads (lock, self, 0);
  rl_mutex_unlock (&lock->m);
  return ok;
}

RlRwUnlock
rl_rw_lock_write_unlock_begin (RedisRWLock *lock, gpointer self, gpointer marker,
                               gboolean *reading, GError **error)
{
  if (rl_registry_is_forked (lock->registry))
    return rl_registry_check (lock->registry, error) ? RL_RW_UNLOCK_DONE : RL_RW_UNLOCK_FAILED;
  rl_mutex_lock (&lock->m);
  if (lock->write_owner != self)
    {
      rl_mutex_unlock (&lock->m);
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_NOT_OWNER,
                   "The calling thread does not write read-write lock “%s”", lock->name);
      return RL_RW_UNLOCK_FAILED;
    }
  *reading = reads_of (lock, self) > 0;
  if (lock->write_count == 1 && *reading && marker != NULL)
    {
      rl_mutex_unlock (&lock->m);
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID,
                   "The calling thread also reads read-write lock “%s”: its last write hold "
                   "ends with a downgrade, which redis_rw_lock_write_unlock() makes",
                   lock->name);
      return RL_RW_UNLOCK_FAILED;
    }
  if (--lock->write_count > 0)
    {
      rl_mutex_unlock (&lock->m);
      return RL_RW_UNLOCK_DONE;
    }
  if (marker != NULL)
    /* The thread writes no more: the release goes on under the call's marker, so that
     * the thread's own next write lock waits for it instead of counting as a re-entry. */
    set_write_owner (lock, marker);
  rl_mutex_unlock (&lock->m);
  return RL_RW_UNLOCK_RELEASE;
}

gboolean
rl_rw_lock_write_unlock_release (RedisRWLock *lock, gpointer self, gboolean reading,
                                 GError **error)
{
  g_autoptr (GError) downgrade_error = NULL;
  gboolean ok = TRUE;

  if (reading && !rl_registry_is_closed (lock->registry))
    ok = downgrade (lock, self, &downgrade_error);
  else if (reading)
    {
      rl_mutex_lock (&lock->m);
      set_reads (lock, self, 0);
      rl_mutex_unlock (&lock->m);
    }
  if (!release_lease (lock, lock->writer, error))
    ok = FALSE;
  else if (!ok)
    g_propagate_error (error, g_steal_pointer (&downgrade_error));

  rl_mutex_lock (&lock->m);
  set_write_owner (lock, NULL);
  broadcast_locked (lock);
  rl_mutex_unlock (&lock->m);
  return ok;
}

gboolean
redis_rw_lock_write_unlock (RedisRWLock *lock, GError **error)
{
  gpointer self = current_thread ();
  gboolean reading = FALSE;

  g_return_val_if_fail (lock != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  switch (rl_rw_lock_write_unlock_begin (lock, self, NULL, &reading, error))
    {
    case RL_RW_UNLOCK_DONE:
      return TRUE;
    case RL_RW_UNLOCK_RELEASE:
      return rl_rw_lock_write_unlock_release (lock, self, reading, error);
    case RL_RW_UNLOCK_FAILED:
    default:
      return FALSE;
    }
}

/* Lease loss ---------------------------------------------------------------------- */

/* The carrier of the lease behind the calling thread's hold; NULL: it holds nothing. */
static RedisLock *
hold_carrier (RedisRWLock *lock)
{
  gpointer self = current_thread ();
  RedisLock *carrier = NULL;

  rl_mutex_lock (&lock->m);
  if (lock->write_owner == self)
    carrier = lock->writer;
  else if (reads_of (lock, self) > 0)
    carrier = lock->reader;
  rl_mutex_unlock (&lock->m);
  return carrier;
}

gboolean
redis_rw_lock_is_lease_lost (RedisRWLock *lock)
{
  RedisLock *carrier;

  g_return_val_if_fail (lock != NULL, FALSE);
  carrier = hold_carrier (lock);
  return carrier != NULL && rl_leases_check_time (lock->registry->leases, carrier);
}

GCancellable *
redis_rw_lock_get_lease_cancellable (RedisRWLock *lock)
{
  RedisLock *carrier;

  g_return_val_if_fail (lock != NULL, NULL);
  carrier = hold_carrier (lock);
  return carrier != NULL ? rl_leases_get_cancellable (lock->registry->leases, carrier) : NULL;
}

const char *
redis_rw_lock_get_name (RedisRWLock *lock)
{
  g_return_val_if_fail (lock != NULL, NULL);
  return lock->name;
}
