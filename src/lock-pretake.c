/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* lock-pretake.c: the acquisition a release notification sends for the lock's waiting
 * owner, so that a cross-process hand-off has one thread wake-up less on its path.
 *
 * A thread that waits for another process's lease owns the local mutex and sleeps on
 * the lock's condition variable until the notification number moves. Woken by the
 * store's notification thread, it would then send its SET NX PX: the wake-up and the
 * round trip one after the other. Instead, the sleeping owner arms the lock's slot
 * (rl_pretake_arm_locked()) with what its attempt would send (the TTL, its deadline);
 * the notification thread claims the armed slot in the same critical section that
 * moves the number (rl_pretake_claim_locked()), and, with no mutex held, sends the
 * attempt as a stepwise store request (RlStoreVTable.request_begin: a pooled data
 * connection, never the subscription's, written without waiting for the reply) and
 * only then wakes the owner (rl_pretake_run()). The owner's wake-up overlaps with the
 * server's work; it reads the reply itself (rl_pretake_finish()), so the notification
 * thread goes back to its subscription at once. A lease taken so is registered in the
 * lease table by the owner, as its own attempt's would be (watchdog, yield record).
 *
 * The slot's states, under lock->m:
 *
 *   idle      -> beginning  the notification thread claimed the armed slot
 *   beginning -> sent       the request is under way, the owner still armed: woken
 *             -> idle       the request could not begin (the owner attempts itself)
 *             -> idle       the owner left meanwhile (deadline, cancel, close): the
 *                           notification thread finishes the request and releases
 *                           what it took (compare-and-delete), so nothing is leaked
 *   sent      -> driving    the owner took the request
 *   driving   -> idle       the owner read the reply
 *
 * A lease a request may have taken without a verdict (an error, a timeout) is
 * released in the background as any doubtful acquisition (rl_leases_add_doubtful()).
 * Only a plain lock's blocking owner arms, and only while it sleeps after an attempt
 * that found the key held with notifications confirmed: never during a yield (the
 * yield policy has it let other processes go first), never with fencing (the
 * acquisition is then a script that also moves the counter), never on a store without
 * stepwise requests (the memory store answers at once, the quorum store's attempts
 * span several servers).
 */
#include "config.h"

#include <poll.h>

#include "lock-private.h"

typedef enum
{
  PRETAKE_IDLE,
  PRETAKE_BEGINNING,
  PRETAKE_SENT,
  PRETAKE_DRIVING,
} PretakeState;

/* One lock's slot, made on first arming, freed with the lock's memory. lock->m guards
 * state and armed; the fields of the request are written by whoever the state names
 * (the notification thread while beginning, the owner while driving). */
struct _RlPretake
{
  PretakeState state;
  gboolean armed;   /* the owner sleeps and wants its attempt sent for it */
  gboolean bounded; /* the owner's request is cut short at its deadline too */
  gint64 deadline;  /* the owner's acquisition's (monotonic µs) */
  gint64 ttl_ms;
  guint64 serial; /* the attempt's lease serial */
  gint64 sent;    /* when its request was sent (monotonic µs) */
  RlRequest *request;
  RlLeaseItem item;
  char value[RL_LEASE_VALUE_MAX];
};

void
rl_pretake_free (RlPretake *pretake)
{
  if (pretake == NULL)
    return;
  g_assert (pretake->request == NULL);
  g_free (pretake);
}

gboolean
rl_pretake_possible (RedisLock *lock)
{
  return lock->member == RL_MEMBER_LOCK && lock->registry->store->vt->request_begin != NULL;
}

gboolean
rl_pretake_arm_locked (RedisLock *lock, gint64 ttl_ms, gint64 deadline, gboolean bounded)
{
  RlLockWait *wait = rl_lock_wait_state (lock);
  RlPretake *p;

  rl_mutex_assert_held (&lock->m);
  if (wait->pretake == NULL)
    wait->pretake = g_new0 (RlPretake, 1);
  p = wait->pretake;
  if (p->state != PRETAKE_IDLE)
    return FALSE; /* a request of an owner that left is still being finished */
  p->armed = TRUE;
  p->ttl_ms = ttl_ms;
  p->deadline = deadline;
  p->bounded = bounded;
  return TRUE;
}

RlPretakeWait
rl_pretake_check_locked (RedisLock *lock)
{
  RlPretake *p = lock->wait != NULL ? lock->wait->pretake : NULL;

  rl_mutex_assert_held (&lock->m);
  if (p == NULL || !p->armed)
    return RL_PRETAKE_NONE;
  switch (p->state)
    {
      case PRETAKE_SENT:
        p->state = PRETAKE_DRIVING;
        p->armed = FALSE;
        return RL_PRETAKE_HANDED;
      case PRETAKE_BEGINNING:
        return RL_PRETAKE_PENDING;
      case PRETAKE_IDLE:
      case PRETAKE_DRIVING:
      default:
        return RL_PRETAKE_NONE;
    }
}

void
rl_pretake_disarm_locked (RedisLock *lock)
{
  rl_mutex_assert_held (&lock->m);
  if (lock->wait != NULL && lock->wait->pretake != NULL)
    lock->wait->pretake->armed = FALSE;
}

gboolean
rl_pretake_claim_locked (RedisLock *lock)
{
  RlPretake *p = lock->wait != NULL ? lock->wait->pretake : NULL;

  rl_mutex_assert_held (&lock->m);
  if (p == NULL || !p->armed || p->state != PRETAKE_IDLE || rl_registry_is_closed (lock->registry)
      || g_get_monotonic_time () >= p->deadline)
    return FALSE;
  p->state = PRETAKE_BEGINNING;
  return TRUE;
}

/* Drives @p's request until it is done or its deadline passes, then ends it: the
 * item's result is final. No mutex held. */
static void
drive (RedisLock *lock, RlPretake *p)
{
  RedisLockRegistry *registry = lock->registry;
  RlStore *store = registry->store;
  RlRequest *request = g_steal_pointer (&p->request);
  gint64 end = rl_request_deadline (registry, p->deadline, p->bounded, p->sent);
  g_autoptr (GError) error = NULL;

  while (!request->done)
    {
      struct pollfd pfd = { request->fd, request->events, 0 };
      int rc = rl_poll_until (&pfd, 1, request->ready ? 0 : end);

      if (rc < 0 || (rc == 0 && !request->ready))
        break;
      if (pfd.revents != 0 || request->ready)
        store->vt->request_ready (request, pfd.revents);
    }
  if (!store->vt->request_end (request, &error))
    rl_debug ("acquiring %s on its release notification: %s", lock->key_data, error->message);
  if (p->item.result == RL_LEASE_ERROR)
    /* It may have taken the key after all: released in the background. */
    rl_leases_add_doubtful (registry->leases, lock->key_data, p->value, p->ttl_ms);
}

void
rl_pretake_release_unused (RedisLock *lock, const char *value, gint64 ttl_ms)
{
  RlStore *store = lock->registry->store;
  g_autoptr (GError) error = NULL;
  gboolean others;

  switch (store->vt->release (store, lock->key_data, value, 0, &others, &error))
    {
      case RL_LEASE_OK:
        RL_ATOMIC_ADD (lock->registry->stats.releases, 1);
        break;
      case RL_LEASE_ERROR:
        /* Unknown: tried again in the background until its TTL would end it. */
        rl_debug ("releasing an unused lease of %s: %s", lock->key_data, error->message);
        rl_leases_add_doubtful (lock->registry->leases, lock->key_data, value, ttl_ms);
        break;
      case RL_LEASE_LOST:
      case RL_LEASE_HELD:
      case RL_LEASE_KEPT:
      default:
        break;
    }
}

/* The slot is idle again: sleepers that slept through the claim (which woke nobody)
 * look at the notification number. lock->m held on entry, not on return. */
static void
idle_and_unlock (RedisLock *lock, RlPretake *p)
{
  p->state = PRETAKE_IDLE;
  rl_mutex_unlock (&lock->m);
  rl_cond_broadcast (&lock->wait->notify);
}

void
rl_pretake_run (RedisLock *lock)
{
  RedisLockRegistry *registry = lock->registry;
  RlStore *store = registry->store;
  RlPretake *p = lock->wait->pretake; /* claimed: the slot is ours until we hand it on */
  g_autoptr (GError) error = NULL;
  RlRequest *request;

  p->serial = rl_leases_next_serial (registry->leases);
  rl_leases_value (registry->leases, p->serial, p->value);
  p->item = (RlLeaseItem){ .key = lock->key_data, .value = p->value, .ttl_ms = p->ttl_ms };
  p->sent = g_get_monotonic_time ();
  request = store->vt->request_begin (
      store, RL_REQUEST_ACQUIRE, 1, &p->item,
      rl_request_deadline (registry, p->deadline, p->bounded, p->sent), &error);
  rl_mutex_lock (&lock->m);
  if (request == NULL)
    {
      rl_debug ("acquiring %s on its release notification: %s", lock->key_data, error->message);
      rl_leases_add_doubtful (registry->leases, lock->key_data, p->value, p->ttl_ms);
      idle_and_unlock (lock, p);
      return;
    }
  p->request = request;
  if (p->armed)
    {
      p->state = PRETAKE_SENT;
      rl_mutex_unlock (&lock->m);
      rl_cond_broadcast (&lock->wait->notify);
      return;
    }
  /* The owner left while the request began: this thread finishes it, and gives back
   * what it took. */
  rl_mutex_unlock (&lock->m);
  drive (lock, p);
  if (p->item.result == RL_LEASE_OK)
    {
      rl_debug ("acquired %s on its release notification for a waiter that left; releasing it",
               lock->key_data);
      rl_pretake_release_unused (lock, p->value, p->ttl_ms);
    }
  rl_mutex_lock (&lock->m);
  idle_and_unlock (lock, p);
}

RlLeaseResult
rl_pretake_finish (RedisLock *lock, RlPretakeLease *lease)
{
  RlPretake *p = lock->wait->pretake; /* driving: the owner's until it is idle again */
  RlLeaseResult result;

  drive (lock, p);
  result = p->item.result;
  lease->serial = p->serial;
  lease->sent = p->sent;
  lease->ttl_ms = p->ttl_ms;
  rl_mutex_lock (&lock->m);
  idle_and_unlock (lock, p);
  return result;
}
