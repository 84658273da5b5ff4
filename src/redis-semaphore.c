/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* redis-semaphore.c: the Redis scripts of the semaphore, the store seam's two
 * semaphore entries (store.h).
 *
 * A semaphore of N permits is N plain leases `SEM_KEY:0` … `SEM_KEY:N-1` and its size
 * in `SEM_KEY` (`registry_key:{NAME}:sem`: the hash tag puts them all in one Cluster
 * slot, so one script may touch them). Each permit is a string key holding one
 * acquisition's value with a PX expiry, exactly a lock's lease, so that renewal,
 * release (compare-and-delete that publishes), the watchdog, audits and forced
 * releases are the plain lease's scripts in redis-store.c; only taking a permit and
 * counting the free ones must look at the size and at every permit in one atomic
 * step, which the two scripts here do. They name only SEM_KEY in KEYS and build the
 * permit keys from it, which Redis allows for keys of the same slot.
 *
 * The cost is one round trip either way, and inside the script O(1) commands when a
 * permit is free at the place the search starts (each attempt starts one further, and
 * each process somewhere else), O(N) when the semaphore is full (N is at most
 * RL_SEMAPHORE_MAX_PERMITS).
 */
#include "config.h"

#include <string.h>

#include "connection.h"
#include "redis-store-private.h"

/* SEMAPHORE ACQUIRE: KEYS[1] = semaphore key, ARGV[1] = its size N, ARGV[2] = this
 * acquisition's value, ARGV[3] = TTL in ms, ARGV[4] = the permit to start from.
 * The size: stored (no expiry) when absent; another one returns {2, stored size} and
 * touches nothing. Then the permits from ARGV[4] round: the first free one is taken
 * with SET NX PX and returned as {1, i}; one found holding ARGV[2] already (the same
 * request sent again after its connection broke: it starts from the same permit, so
 * it meets the one it took before any freed since) has its TTL refreshed and is
 * returned as {1, i}. With every permit held: {0, the smallest PTTL among them} (-1
 * when none has an expiry), the bound of a waiter's sleep when no notification comes.
 * One script, so no two clients can take the same permit or see the size half
 * written. An uncontended call runs two commands (GET, SET); a full semaphore costs
 * three per permit. */
static const char semaphore_acquire_script[]
    = "local size = redis.call('GET', KEYS[1])\n"
      "if not size then\n"
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
      "  if redis.call('SET', k, ARGV[2], 'NX', 'PX', ARGV[3]) then\n"
      "    return {1, i}\n"
      "  end\n"
      "  if redis.call('GET', k) == ARGV[2] then\n"
      "    redis.call('PEXPIRE', k, ARGV[3])\n"
      "    return {1, i}\n"
      "  end\n"
      "  local t = redis.call('PTTL', k)\n"
      "  if t >= 0 and (min < 0 or t < min) then\n"
      "    min = t\n"
      "  end\n"
      "end\n"
      "return {0, min}\n";

/* SEMAPHORE AVAILABLE: KEYS[1] = semaphore key, ARGV[1] = its size N. Another stored
 * size returns {2, stored size}; otherwise {1, how many of the N permits are free}.
 * Writes nothing. */
static const char semaphore_available_script[]
    = "local size = redis.call('GET', KEYS[1])\n"
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

RlLeaseResult
rl_redis_semaphore_acquire (RlStore *store, const char *sem_key, guint permits, guint start,
                            const char *value, gint64 ttl_ms, gint64 deadline, guint *slot,
                            gint64 *pttl_ms, GError **error)
{
  const SemaphoreScripts *s = scripts ();
  char size[24], ttl[24], from[24];
  const char *argv[8] = { "EVALSHA", s->acquire.sha, "1", sem_key, size, value, ttl, from };
  long long code, number;
  gboolean acked, ok;
  redisReply *reply;

  rl_format_uint (size, permits);
  rl_format_uint (ttl, ttl_ms);
  rl_format_uint (from, start % permits);
  /* The script reads every permit: a waiter is woken by the change of any of them,
   * without a notification too. */
  reply = rl_redis_store_call (store, sem_key, 8, argv, &s->acquire, deadline, wrote_permit,
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
      g_autofree char *key = g_strdup_printf ("%s:%u", sem_key, *slot);
      gboolean others;

      store->vt->release (store, key, value, 0, &others, NULL);
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
