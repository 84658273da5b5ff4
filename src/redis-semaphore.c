/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* redis-semaphore.c: the Redis side of the semaphore, the store seam's two semaphore
 * entries (store.h).
 *
 * A semaphore of N permits is N plain leases `SEM_KEY:0` … `SEM_KEY:N-1` and its size
 * in `SEM_KEY` (`registry_key:{NAME}:sem`: the hash tag puts them all in one Cluster
 * slot, so one script may touch them). Each
 * permit is a string key holding one acquisition's value with a PX expiry, exactly a
 * lock's lease, so that renewal, release (compare-and-delete that publishes), the
 * watchdog, audits and forced releases are the plain lease's scripts in redis-store.c;
 * only taking a permit and counting the free ones must look at the size, which is done
 * here.
 *
 * Taking a permit has two ways, each one round trip. The script checks the size and
 * takes the first free permit in one atomic step: O(1) commands when a permit is free
 * where the search starts (each attempt starts one further, and each process somewhere
 * else), O(N) when the semaphore is full (N is at most RL_SEMAPHORE_MAX_PERMITS). A
 * permit it takes also writes the size record `SEM_KEY:size` (the size it checked, for
 * RL_SEMAPHORE_RECORD_MS), which the script consults when the size itself is missing:
 * it stores no other size while the record stands. That is what makes the other way
 * safe. For RL_SEMAPHORE_VERIFIED_MS after a permit taken by the script, the process
 * names the permit it gave back last (a @start below the size, see semaphore.c), and the
 * store tries that one alone by a plain `SET SEM_KEY:I value NX PX ttl`, the cheapest
 * command Redis has for it, as a plain lock's acquisition is: no script, no size read.
 * The size cannot have changed meanwhile: this library only ever stores a size where
 * there is none, and while the record outlives the shortcut, another size is refused
 * even if the size key was deleted (by hand, or evicted). Only a loss of every key of
 * the semaphore at once (a FLUSHALL, a server that restarts or fails over without
 * them) forgets the record; the permits held then are lost too, and reported so. A
 * permit found held goes to the script, with what is left of the bound.
 */
#include "config.h"

#include <string.h>

#include "connection.h"
#include "key-index.h"
#include "redis-store-private.h"
#include "semaphore.h"

/* SEMAPHORE ACQUIRE: KEYS[1] = semaphore key, ARGV[1] = its size N, ARGV[2] = this
 * acquisition's value, ARGV[3] = TTL in ms, ARGV[4] = the permit to start from,
 * ARGV[5] = how long the size record lives (ms).
 * The size: stored (no expiry) when absent, unless the size record `SEM_KEY:size`
 * remembers another; another one returns {2, stored size} and touches nothing. Then
 * the permits from ARGV[4] round: the first free one is taken with SET NX PX and
 * returned as {1, i}; one found holding ARGV[2] already (the same request sent again
 * after its connection broke: it starts from the same permit, so it meets the one it
 * took before any freed since) has its TTL refreshed and is returned as {1, i}. A
 * permit taken sets the size record for ARGV[5] ms. With every permit held: {0, the
 * smallest PTTL among them} (-1 when none has an expiry), the bound of a waiter's
 * sleep when no notification comes. One script, so no two clients can take the same
 * permit or see the size half written. An uncontended call runs three commands (GET,
 * SET, SET); a full semaphore costs three per permit. */
static const char semaphore_acquire_script[]
    = "local size = redis.call('GET', KEYS[1])\n"
      "local record = KEYS[1] .. ':size'\n"
      "if not size then\n"
      "  local remembered = redis.call('GET', record)\n"
      "  if remembered and remembered ~= ARGV[1] then\n"
      "    return {2, remembered}\n"
      "  end\n"
      "  redis.call('SET', KEYS[1], ARGV[1])\n"
      "elseif size ~= ARGV[1] then\n"
      "  return {2, size}\n"
      "end\n"
      "local n = tonumber(ARGV[1])\n"
      "local start = tonumber(ARGV[4])\n"
      "local min = -1\n"
      "for j = 0, n - 1 do\n"
      "  local i = (start + j) % n\n"
      "  local k = KEYS[1] .. ':' .. i\n"
      "  local taken = redis.call('SET', k, ARGV[2], 'NX', 'PX', ARGV[3])\n"
      "  if not taken and redis.call('GET', k) == ARGV[2] then\n"
      "    taken = redis.call('PEXPIRE', k, ARGV[3])\n"
      "  end\n"
      "  if taken then\n"
      "    redis.call('SET', record, ARGV[1], 'PX', ARGV[5])\n"
      "    return {1, i}\n"
      "  end\n"
      "  local t = redis.call('PTTL', k)\n"
      "  if t >= 0 and (min < 0 or t < min) then\n"
      "    min = t\n"
      "  end\n"
      "end\n"
      "return {0, min}\n";

/* SEMAPHORE AVAILABLE: KEYS[1] = semaphore key, ARGV[1] = its size N. Another stored
 * size (or, with none stored, another in the size record) returns {2, that size};
 * otherwise {1, how many of the N permits are free}. Writes nothing. */
static const char semaphore_available_script[]
    = "local size = redis.call('GET', KEYS[1]) or redis.call('GET', KEYS[1] .. ':size')\n"
      "if size and size ~= ARGV[1] then\n"
      "  return {2, size}\n"
      "end\n"
      "local free = 0\n"
      "for i = 0, tonumber(ARGV[1]) - 1 do\n"
      "  if redis.call('EXISTS', KEYS[1] .. ':' .. i) == 0 then\n"
      "    free = free + 1\n"
      "  end\n"
      "end\n"
      "return {1, free}\n";

/* The replies' first element. */
#define RL_SEM_HELD 0
#define RL_SEM_OK 1
#define RL_SEM_OTHER_SIZE 2

typedef struct
{
  RlScript acquire, available;
} SemaphoreScripts;

/* The scripts and their SHA-1s, computed once: they depend on nothing else. */
static const SemaphoreScripts *
scripts (void)
{
  static SemaphoreScripts *once;

  if (g_once_init_enter (&once))
    {
      SemaphoreScripts *s = g_new0 (SemaphoreScripts, 1);
      rl_redis_script_init (&s->acquire, semaphore_acquire_script);
      rl_redis_script_init (&s->available, semaphore_available_script);
      g_once_init_leave (&once, s);
    }
  return once;
}

static gboolean
wrote_permit (const redisReply *reply)
{
  return reply->type == REDIS_REPLY_ARRAY && reply->elements == 2
         && reply->element[0]->type == REDIS_REPLY_INTEGER
         && reply->element[0]->integer == RL_SEM_OK;
}

/* Reads a reply {code, integer-or-size}: FALSE with @error when it is malformed, or
 * when it says another size is stored (INVALID, naming both). */
static gboolean
read_reply (const redisReply *reply, const char *sem_key, guint permits, long long *code,
            long long *number, GError **error)
{
  const redisReply *first, *second;

  if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2
      || reply->element[0]->type != REDIS_REPLY_INTEGER)
    {
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_REDIS,
                   "Redis semaphore script returned an unexpected reply (type %d)", reply->type);
      return FALSE;
    }
  first = reply->element[0];
  second = reply->element[1];
  *code = first->integer;
  if (*code == RL_SEM_OTHER_SIZE)
    {
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID,
                   "Semaphore “%s” has %.*s permits in Redis, not %u", sem_key,
                   second->type == REDIS_REPLY_STRING ? (int) MIN (second->len, 32) : 1,
                   second->type == REDIS_REPLY_STRING ? second->str : "?", permits);
      return FALSE;
    }
  if (second->type != REDIS_REPLY_INTEGER)
    {
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_REDIS,
                   "Redis semaphore script returned an unexpected reply element (type %d)",
                   second->type);
      return FALSE;
    }
  *number = second->integer;
  return TRUE;
}

/* Gives back permit @key (@value), taken by the fast way for nothing. */
static void
give_back (RlStore *store, const char *key, const char *value)
{
  gboolean others;

  store->vt->release (store, key, value, 0, &others, NULL);
}

/* The fast way: permit @index alone by a plain SET NX PX. RL_LEASE_OK (taken),
 * RL_LEASE_HELD (not taken here: the script decides) or RL_LEASE_ERROR with @error. */
static RlLeaseResult
acquire_guessed (RlStore *store, const char *sem_key, guint index, const char *value,
                 const char *ttl, gint64 deadline, GError **error)
{
  char key_buf[160];
  g_autofree char *key_heap = NULL;
  const char *key = rl_key_index (key_buf, sizeof key_buf, &key_heap, sem_key, index);
  const char *argv[6] = { "SET", key, value, "NX", "PX", ttl };
  RlLeaseResult result = RL_LEASE_HELD;
  redisReply *reply;
  gboolean acked;

  /* It may be taken even when no answer comes: it comes back at its TTL, as a script's
   * would. */
  reply = rl_redis_store_call (store, key, 6, argv, NULL, deadline, rl_redis_wrote_set, &acked,
                               FALSE, error);
  if (reply == NULL)
    return RL_LEASE_ERROR;
  if (reply->type == REDIS_REPLY_STATUS && acked)
    result = RL_LEASE_OK;
  else if (reply->type == REDIS_REPLY_STATUS)
    {
      /* Taken on the master, but a failover now could lose it: released again. */
      give_back (store, key, value);
      rl_redis_store_not_replicated (store, "acquisition", key, error);
      result = RL_LEASE_ERROR;
    }
  else if (reply->type != REDIS_REPLY_NIL)
    {
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_REDIS,
                   "Redis semaphore command returned an unexpected reply (type %d)", reply->type);
      result = RL_LEASE_ERROR;
    }
  freeReplyObject (reply);
  return result;
}

RlLeaseResult
rl_redis_semaphore_acquire (RlStore *store, const char *sem_key, guint permits, guint start,
                            const char *value, gint64 ttl_ms, gint64 deadline, guint *slot,
                            gint64 *pttl_ms, GError **error)
{
  const SemaphoreScripts *s = scripts ();
  char size[24], ttl[24], from[24], record_ms[24];
  const char *argv[9]
      = { "EVALSHA", s->acquire.sha, "1", sem_key, size, value, ttl, from, record_ms };
  long long code, number;
  gboolean acked, ok;
  redisReply *reply;

  rl_format_uint (size, permits);
  rl_format_uint (ttl, ttl_ms);
  if (start < permits)
    {
      /* Both requests end by the one deadline (0: the command timeout, each). */
      switch (acquire_guessed (store, sem_key, start, value, ttl, deadline, error))
        {
        case RL_LEASE_OK:
          *slot = start;
          return RL_LEASE_OK;
        case RL_LEASE_ERROR:
          return RL_LEASE_ERROR;
        case RL_LEASE_HELD:
        default:
          break;
        }
    }
  rl_format_uint (from, start % permits);
  rl_format_uint (record_ms, RL_SEMAPHORE_RECORD_MS);
  /* The script reads every permit: a waiter is woken by the change of any of them,
   * without a notification too. */
  reply = rl_redis_store_call (store, sem_key, 9, argv, &s->acquire, deadline, wrote_permit,
                               &acked, TRUE, error);
  if (reply == NULL)
    return RL_LEASE_ERROR;
  ok = read_reply (reply, sem_key, permits, &code, &number, error);
  freeReplyObject (reply);
  if (!ok)
    return RL_LEASE_ERROR;
  if (code == RL_SEM_HELD)
    {
      *pttl_ms = number;
      return RL_LEASE_HELD;
    }
  if (code != RL_SEM_OK || number < 0 || number >= permits)
    {
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_REDIS,
                   "Redis semaphore script returned an unexpected permit (%lld, %lld)", code,
                   number);
      return RL_LEASE_ERROR;
    }
  *slot = (guint) number;
  if (!acked)
    {
      /* Taken on the master, but a failover now could lose it: released again. */
      char key_buf[160];
      g_autofree char *key_heap = NULL;
      const char *key = rl_key_index (key_buf, sizeof key_buf, &key_heap, sem_key, *slot);

      give_back (store, key, value);
      rl_redis_store_not_replicated (store, "acquisition", key, error);
      return RL_LEASE_ERROR;
    }
  return RL_LEASE_OK;
}

gboolean
rl_redis_semaphore_available (RlStore *store, const char *sem_key, guint permits,
                              guint *available, GError **error)
{
  const SemaphoreScripts *s = scripts ();
  char size[24];
  const char *argv[5] = { "EVALSHA", s->available.sha, "1", sem_key, size };
  long long code, number;
  redisReply *reply;
  gboolean ok;

  rl_format_uint (size, permits);
  reply = rl_redis_store_call (store, sem_key, 5, argv, &s->available, 0, NULL, NULL, FALSE,
                               error);
  if (reply == NULL)
    return FALSE;
  ok = read_reply (reply, sem_key, permits, &code, &number, error);
  freeReplyObject (reply);
  if (ok && (code != RL_SEM_OK || number < 0 || number > permits))
    {
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_REDIS,
                   "Redis semaphore script returned an unexpected count (%lld, %lld)", code,
                   number);
      ok = FALSE;
    }
  if (ok)
    *available = (guint) number;
  return ok;
}
