/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* leader.c: leader election on a lock (Spring Integration's
 * LockRegistryLeaderInitiator), built on the plain lock's asynchronous acquisition.
 *
 * A candidate waits for the lock of its name with redis_lock_lock_async() (no thread
 * blocked: the wait is lock-async.c's, woken by the release notification), leads while
 * its thread holds it, and watches the lease cancellable with a "cancelled" handler.
 * The leadership's promise (is_leading() TRUE, its cancellable not cancelled) ends in
 * whatever thread finds the lease gone: that handler, in the thread that found the
 * lease lost (or the registry's close, which cancels it too), and is_leading() or
 * get_cancellable() themselves once the lease's time as last confirmed has run out
 * (a process frozen past its TTL, whose watchdog has not run yet); both then make a
 * source of the main context ready, and the rest of the leadership's end (func (FALSE),
 * the unlock) happens there. Every state change happens in that one context, through
 * one function (set_state()), so the states below are the whole story:
 *
 *   state    | event                              | next
 *   ---------+------------------------------------+-------------------------------------
 *   idle     | start                              | waiting (lock_async)
 *   waiting  | got the lock (first hold)          | leading: func (TRUE)
 *            | got it as a second hold of this    | pausing (unlocked again: another
 *            | thread                             | candidate of this thread leads)
 *            | failed: closed, forked             | idle
 *            | failed otherwise                   | pausing
 *            | stop                               | idle (the call is cancelled)
 *   leading  | stop                               | idle: func (FALSE), then unlock
 *            | resign                              | pausing: func (FALSE), then unlock
 *            | lease lost / closed                | pausing / idle: func (FALSE), unlock
 *   pausing  | the pause ended                    | waiting
 *            | stop                               | idle
 *
 * The callback with FALSE comes before the unlock, so a leader's work stops before
 * another candidate can be granted the lock. Every unlock here is
 * rl_lock_unlock_background(): the context gives its hold back at once and never waits
 * for Redis, whose server may be the very one that stopped answering, and the release
 * goes on on the registry's workers with nobody waiting for its result, so neither the
 * lock nor its registry waits for the context to run again. The hold belongs to the
 * thread that runs the context (lock-async.c's rule), so redis_leader_stop() and
 * _resign() from another thread are carried out in that context. The fields a thread
 * other than the context's reads (leading, the term, the cancellable, the source that
 * wakes the context) are guarded by the leader's mutex, a leaf: the lease table is
 * asked with it released.
 */
#include "config.h"

#include "debug.h"
#include "internal.h"

#define RL_LEADER_PAUSE_MS 1000

typedef enum
{
  LEADER_IDLE,
  LEADER_WAITING,
  LEADER_LEADING,
  LEADER_PAUSING,
} LeaderState;

static const char *const state_names[] = {
  [LEADER_IDLE] = "idle",
  [LEADER_WAITING] = "waiting",
  [LEADER_LEADING] = "leading",
  [LEADER_PAUSING] = "pausing",
};

struct _RedisLeader
{
  RedisLock *lock;
  RedisLeaderFunc func;
  gpointer user_data;
  GDestroyNotify destroy;
  gint64 pause_ms; /* atomic */

  /* The context's: written only there (after start). */
  GMainContext *context; /* set (atomically) by the first start, then read-only */
  LeaderState state;
  GCancellable *attempt; /* WAITING: cancels the pending lock_async */
  GCancellable *lease;   /* LEADING: the lock's lease cancellable, watched by */
  gulong lost_handler;   /* this "cancelled" handler */
  GSource *pause_source; /* PAUSING */

  RlMutex mutex; /* guards the four below; written by the context, except that any
                    thread may end the promise (end_promise()) */
  gboolean leading;          /* the promise holds: is_leading() */
  guint term;                /* the number of the current or last leadership */
  GCancellable *cancellable; /* the current or last leadership's */
  GSource *lost_source;      /* LEADING: made ready when the promise ends */
};

/* Life ------------------------------------------------------------------------- */

RedisLeader *
redis_leader_new (RedisLockRegistry *registry, const char *name, RedisLeaderFunc func,
                       gpointer user_data, GDestroyNotify destroy)
{
  g_autoptr (GError) error = NULL;
  RedisLeader *leader;
  RedisLock *lock;

  g_return_val_if_fail (registry != NULL, NULL);
  g_return_val_if_fail (func != NULL, NULL);

  lock = redis_lock_registry_obtain (registry, name, &error);
  if (lock == NULL)
    {
      g_critical ("redis_leader_new: %s", error->message);
      return NULL;
    }
  leader = g_atomic_rc_box_new0 (RedisLeader);
  leader->lock = lock;
  leader->func = func;
  leader->user_data = user_data;
  leader->destroy = destroy;
  leader->pause_ms = RL_LEADER_PAUSE_MS;
  leader->state = LEADER_IDLE;
  rl_mutex_init (&leader->mutex);
  leader->cancellable = g_cancellable_new ();
  g_cancellable_cancel (leader->cancellable);
  return leader;
}

RedisLeader *
redis_leader_ref (RedisLeader *leader)
{
  g_return_val_if_fail (leader != NULL, NULL);
  return g_atomic_rc_box_acquire (leader);
}

/* Frees what @data, a leader whose last reference went, holds. */
static void
leader_clear (gpointer data)
{
  RedisLeader *leader = data;

  /* Every source and pending call of a started candidate holds a reference: only an
   * idle one gets here. */
  g_assert (leader->state == LEADER_IDLE);
  if (leader->destroy != NULL)
    leader->destroy (leader->user_data);
  g_clear_object (&leader->attempt);
  g_clear_object (&leader->cancellable);
  if (leader->context != NULL)
    g_main_context_unref (leader->context);
  redis_lock_unref (leader->lock);
  rl_mutex_clear (&leader->mutex);
}

void
redis_leader_unref (RedisLeader *leader)
{
  if (leader != NULL)
    g_atomic_rc_box_release_full (leader, leader_clear);
}

const char *
redis_leader_get_name (RedisLeader *leader)
{
  g_return_val_if_fail (leader != NULL, NULL);
  return redis_lock_get_name (leader->lock);
}

void
redis_leader_set_pause_ms (RedisLeader *leader, gint64 pause_ms)
{
  g_return_if_fail (leader != NULL);
  g_return_if_fail (pause_ms >= 0 && pause_ms <= G_MAXINT32);
  RL_ATOMIC_SET (leader->pause_ms, pause_ms);
}

/* Ends the promise of leadership @term (0: the current one), if it still holds, in the
 * calling thread (any): is_leading() answers FALSE from now on, the leadership's
 * cancellable is cancelled here, and the context is woken to call func (FALSE) and give
 * the lock back. No mutex held. */
static void
end_promise (RedisLeader *leader, guint term)
{
  GCancellable *cancellable = NULL;
  GSource *source = NULL;

  rl_mutex_lock (&leader->mutex);
  if (leader->leading && (term == 0 || leader->term == term))
    {
      leader->leading = FALSE;
      cancellable = g_object_ref (leader->cancellable);
      source = g_source_ref (leader->lost_source);
    }
  rl_mutex_unlock (&leader->mutex);
  if (cancellable == NULL)
    return;
  rl_debug ("leader %s: the lease of leadership %u is gone", redis_lock_get_name (leader->lock),
           term);
  g_cancellable_cancel (cancellable);
  g_object_unref (cancellable);
  g_source_set_ready_time (source, 0);
  g_source_unref (source);
}

/* Whether the promise holds now: it leads, and its lease's time as last confirmed has
 * not run out (lease table: the last confirmed request's start plus the TTL, less the
 * drift margin by which the table counts an unconfirmed lease lost). A promise found
 * run out ends here, and the lease is marked lost in the table, as its watchdog would
 * have at that time. */
static gboolean
check_promise (RedisLeader *leader)
{
  RlLeases *leases = leader->lock->registry->leases;
  gboolean leading;
  guint term;

  rl_mutex_lock (&leader->mutex);
  leading = leader->leading;
  term = leader->term;
  rl_mutex_unlock (&leader->mutex);
  if (!leading)
    return FALSE;
  /* While the promise of @term holds, the lease is the context thread's hold of the
   * lock; a leadership that ended meanwhile makes end_promise() a no-op. */
  if (g_get_monotonic_time () < rl_leases_good_until (leases, leader->lock))
    return TRUE;
  end_promise (leader, term);
  rl_leases_check_time (leases, leader->lock);
  return FALSE;
}

gboolean
redis_leader_is_leading (RedisLeader *leader)
{
  g_return_val_if_fail (leader != NULL, FALSE);
  return check_promise (leader);
}

GCancellable *
redis_leader_get_cancellable (RedisLeader *leader)
{
  GCancellable *cancellable;

  g_return_val_if_fail (leader != NULL, NULL);
  check_promise (leader);
  rl_mutex_read (&leader->mutex, &leader->cancellable, &cancellable, sizeof cancellable);
  return cancellable;
}

/* The states (in the leader's context) ------------------------------------------ */

static void begin_waiting (RedisLeader *leader);

/* The one place the state changes, logged. */
static void
set_state (RedisLeader *leader, LeaderState state)
{
  rl_debug ("leader %s: %s -> %s", redis_lock_get_name (leader->lock), state_names[leader->state],
           state_names[state]);
  leader->state = state;
}

static gboolean
on_pause_over (gpointer data)
{
  RedisLeader *leader = data;

  g_clear_pointer (&leader->pause_source, g_source_unref);
  begin_waiting (leader);
  return G_SOURCE_REMOVE;
}

/* Competes again after the pause, unless the registry closed. */
static void
begin_pause (RedisLeader *leader)
{
  if (rl_registry_is_closed (leader->lock->registry))
    {
      set_state (leader, LEADER_IDLE);
      return;
    }
  set_state (leader, LEADER_PAUSING);
  leader->pause_source = g_timeout_source_new ((guint) RL_ATOMIC_GET (leader->pause_ms));
  g_source_set_callback (leader->pause_source, on_pause_over, redis_leader_ref (leader),
                         (GDestroyNotify) redis_leader_unref);
  g_source_attach (leader->pause_source, leader->context);
}

/* Gives the context's hold of the lock back. The release goes to Redis from a worker
 * thread, and nobody waits for its result: the context never waits for a server, which
 * may be the one that stopped answering, and a stopped leader dropped with its registry
 * frees them without the context running again. */
static void
release_hold (RedisLeader *leader)
{
  rl_lock_unlock_background (leader->lock);
}

/* Ends a leadership: the promise (if nothing ended it before), func (FALSE), then the
 * lock. The caller sets the next state. */
static void
end_leadership (RedisLeader *leader, const char *why)
{
  GCancellable *cancellable;
  GSource *source;

  /* Waits for a "cancelled" emission under way in another thread: after it, nothing
   * but end_promise() below ends this promise. */
  g_cancellable_disconnect (leader->lease, leader->lost_handler);
  leader->lost_handler = 0;
  g_clear_object (&leader->lease);
  rl_mutex_lock (&leader->mutex);
  leader->leading = FALSE;
  cancellable = g_object_ref (leader->cancellable);
  source = g_steal_pointer (&leader->lost_source);
  rl_mutex_unlock (&leader->mutex);
  g_source_destroy (source);
  g_source_unref (source);
  rl_debug ("leader %s: leadership ends (%s)", redis_lock_get_name (leader->lock), why);
  g_cancellable_cancel (cancellable);
  g_object_unref (cancellable);
  leader->func (leader, FALSE, leader->user_data);
  release_hold (leader);
}

static gboolean
on_lease_lost (gpointer data)
{
  RedisLeader *leader = data;

  if (leader->state == LEADER_LEADING)
    {
      end_leadership (leader, "lease lost");
      begin_pause (leader);
    }
  return G_SOURCE_REMOVE;
}

static gboolean
lost_source_dispatch (GSource *source, GSourceFunc callback, gpointer data)
{
  g_source_set_ready_time (source, -1);
  return callback (data);
}

static GSourceFuncs lost_source_funcs = {
  .dispatch = lost_source_dispatch,
};

/* The lease's "cancelled" handler, in the thread that found the lease lost (or at
 * once, from begin_leading(), for a lease lost already): the promise ends here (the
 * current one: end_leadership() disconnects the handler before another begins), and
 * the rest of the leadership's end in the context, never inside this emission. The
 * source is the context thread's, made and destroyed there; end_promise() only sets
 * its ready time, as lock-async.c's workers wake a call's source. Not
 * g_cancellable_source_new(): a cancellable source dropped in its context while
 * another thread still runs the cancellable's handlers is leaked by GLib 2.74 (its
 * dispose takes a reference that only the handler it has just disconnected would
 * drop). */
static void
on_lease_cancelled (GCancellable *cancellable, gpointer data)
{
  (void) cancellable;
  end_promise (data, 0);
}

/* The lock is this thread's now, with one hold: it leads. */
static void
begin_leading (RedisLeader *leader)
{
  GCancellable *old;
  GSource *source;

  set_state (leader, LEADER_LEADING);
  source = g_source_new (&lost_source_funcs, sizeof (GSource));
  g_source_set_static_name (source, "redislock leader lease");
  g_source_set_callback (source, on_lease_lost, redis_leader_ref (leader),
                         (GDestroyNotify) redis_leader_unref);
  g_source_attach (source, leader->context);
  rl_mutex_lock (&leader->mutex);
  old = leader->cancellable;
  leader->cancellable = g_cancellable_new ();
  leader->leading = TRUE;
  leader->term++;
  leader->lost_source = source;
  rl_mutex_unlock (&leader->mutex);
  g_object_unref (old);
  /* This thread holds the lock (one hold): it has a lease cancellable. */
  leader->lease = g_object_ref (redis_lock_get_lease_cancellable (leader->lock));
  leader->lost_handler = g_cancellable_connect (leader->lease, G_CALLBACK (on_lease_cancelled),
                                                redis_leader_ref (leader),
                                                (GDestroyNotify) redis_leader_unref);
  leader->func (leader, TRUE, leader->user_data);
}

static void
on_locked (GObject *source, GAsyncResult *result, gpointer data)
{
  RedisLeader *leader = data;
  g_autoptr (GError) error = NULL;
  gboolean ok;

  (void) source;
  ok = redis_lock_lock_finish (leader->lock, result, &error);
  if (leader->state != LEADER_WAITING)
    {
      /* Stopped meanwhile; a call that completed anyway keeps its hold. */
      if (ok)
        release_hold (leader);
    }
  else if (ok && redis_lock_get_hold_count (leader->lock) > 1)
    {
      /* This thread held the lock already (another candidate of the registry in this
       * thread leads, or the program holds it): that is not leadership. */
      release_hold (leader);
      begin_pause (leader);
    }
  else if (ok)
    begin_leading (leader);
  else if (g_error_matches (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CLOSED)
           || g_error_matches (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_FORKED))
    set_state (leader, LEADER_IDLE);
  else
    {
      if (error != NULL)
        rl_debug ("leader %s: %s", redis_lock_get_name (leader->lock), error->message);
      begin_pause (leader);
    }
  redis_leader_unref (leader);
}

static void
begin_waiting (RedisLeader *leader)
{
  set_state (leader, LEADER_WAITING);
  g_clear_object (&leader->attempt);
  leader->attempt = g_cancellable_new ();
  redis_lock_lock_async (leader->lock, -1, 0, leader->attempt, on_locked,
                         redis_leader_ref (leader));
}

/* Stop and resign, in the context. */
static void
do_stop (RedisLeader *leader, gboolean resign)
{
  switch (leader->state)
    {
    case LEADER_LEADING:
      end_leadership (leader, resign ? "resigned" : "stopped");
      if (resign)
        begin_pause (leader);
      else
        set_state (leader, LEADER_IDLE);
      break;
    case LEADER_WAITING:
      if (!resign)
        {
          set_state (leader, LEADER_IDLE);
          g_cancellable_cancel (leader->attempt);
        }
      break;
    case LEADER_PAUSING:
      if (!resign)
        {
          g_source_destroy (leader->pause_source);
          g_clear_pointer (&leader->pause_source, g_source_unref);
          set_state (leader, LEADER_IDLE);
        }
      break;
    case LEADER_IDLE:
    default:
      break;
    }
}

static gboolean
invoke_stop (gpointer data)
{
  do_stop (data, FALSE);
  return G_SOURCE_REMOVE;
}

static gboolean
invoke_resign (gpointer data)
{
  do_stop (data, TRUE);
  return G_SOURCE_REMOVE;
}

/* Runs @func in the leader's context: now when the calling thread runs it. */
static void
in_context (RedisLeader *leader, GSourceFunc func)
{
  GMainContext *context = g_atomic_pointer_get (&leader->context);

  if (context == NULL)
    return;
  g_main_context_invoke_full (context, G_PRIORITY_DEFAULT, func,
                              redis_leader_ref (leader),
                              (GDestroyNotify) redis_leader_unref);
}

/* Public entry points ----------------------------------------------------------- */

void
redis_leader_start (RedisLeader *leader)
{
  GMainContext *context;

  g_return_if_fail (leader != NULL);

  context = g_main_context_ref_thread_default ();
  if (!g_atomic_pointer_compare_and_exchange (&leader->context, NULL, context))
    {
      gboolean same = context == g_atomic_pointer_get (&leader->context);
      g_main_context_unref (context);
      g_return_if_fail (same);
    }
  if (leader->state == LEADER_IDLE)
    begin_waiting (leader);
}

void
redis_leader_stop (RedisLeader *leader)
{
  g_return_if_fail (leader != NULL);
  in_context (leader, invoke_stop);
}

void
redis_leader_resign (RedisLeader *leader)
{
  g_return_if_fail (leader != NULL);
  in_context (leader, invoke_resign);
}
