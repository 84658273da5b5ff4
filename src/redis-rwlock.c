/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* redis-rwlock.c: the read-write lock's protocol on Redis, the Redis store's
 * rw_acquire and rw_stop_waiting (store.h).
 *
 * A read-write lock is plain leases, so that renewal, release, loss and audits are
 * those of every other lease: the writer lease `registry_key:{name}:rw:w`, one reader
 * lease per registry `registry_key:{name}:rw:r:CLIENT_ID` (the threads of a process
 * share it), the set `registry_key:{name}:rw:readers` of the client ids that took a
 * reader lease (how a writer finds them), and the mark `registry_key:{name}:rw:ww`
 * that a waiting writer leaves so that new readers of every process wait behind it.
 * The hash tag `{name}` keeps them in one Cluster slot, so each decision below is one
 * script that reads and writes them together; a reader lease is released by the
 * store's usual release script (compare-and-delete, then the notification) and its id
 * stays in the set until a writer prunes it.
 */
#include "config.h"

#include <hiredis/hiredis.h>

#include "connection.h"
#include "redis-store-private.h"

/* RW READ: KEYS[1] = writer lease, KEYS[2] = waiting mark, KEYS[3] = readers set,
 * KEYS[4] = this registry's reader lease; ARGV[1] = this acquisition's value, ARGV[2] =
 * TTL in ms, ARGV[3] = the registry's client id, ARGV[4] = '1' when this registry holds
 * the writer lease (a downgrade: a waiting writer does not hold it back). Held back by
 * a writer lease of another registry (its PTTL) or, unless downgrading, by another
 * registry's waiting writer (the mark's PTTL); otherwise sets the reader lease, adds
 * the id to the set and returns -3. One script, so no writer can take the lock
 * between the check and the set. */
static const char read_script[]
    = "local own = ARGV[3] .. ':'\n"
      "local w = redis.call('GET', KEYS[1])\n"
      "if w and string.sub(w, 1, #own) ~= own then\n"
      "  return redis.call('PTTL', KEYS[1])\n"
      "end\n"
      "if ARGV[4] ~= '1' then\n"
      "  local ww = redis.call('GET', KEYS[2])\n"
      "  if ww and ww ~= ARGV[3] then\n"
      "    return redis.call('PTTL', KEYS[2])\n"
      "  end\n"
      "end\n"
      "redis.call('SET', KEYS[4], ARGV[1], 'PX', ARGV[2])\n"
      "redis.call('SADD', KEYS[3], ARGV[3])\n"
      "return -3\n";

/* RW WRITE: KEYS[1] = writer lease, KEYS[2] = waiting mark, KEYS[3] = readers set;
 * ARGV[1] = this acquisition's value, ARGV[2] = TTL in ms, ARGV[3] = the registry's
 * client id, ARGV[4] = the reader lease prefix (a reader's key is it and its id),
 * ARGV[5] = the mark's notification channel ('': none), ARGV[6] (optional, a Cluster)
 * = its shard channel, to SPUBLISH the mark on as a release is. Held back by another
 * acquisition's writer lease, or by a live reader lease of another registry (the set's ids whose
 * lease is gone are pruned on the way): then the mark is set to our id (unless another
 * writer's mark is there), with a TTL that outlasts the wait (the longer of our TTL
 * and the holder's, plus a second), and the longest PTTL of what holds it back is
 * returned (-1: one has no expiry). A mark newly set is published, so that registries
 * whose threads share a reader lease stop letting new reading threads join it.
 * Otherwise sets the writer lease, removes our mark and returns -3. */
static const char write_script[]
    = "local function wait(p)\n"
      "  local ww = redis.call('GET', KEYS[2])\n"
      "  if not ww or ww == ARGV[3] then\n"
      "    local t = tonumber(ARGV[2])\n"
      "    if p > t then t = p end\n"
      "    redis.call('SET', KEYS[2], ARGV[3], 'PX', t + 1000)\n"
      "  end\n"
      "  if not ww then\n"
      "    if ARGV[5] ~= '' then\n"
      "      redis.pcall('PUBLISH', ARGV[5], KEYS[2])\n"
      "    end\n"
      "    if ARGV[6] then\n"
      "      redis.pcall('SPUBLISH', ARGV[6], KEYS[2])\n"
      "    end\n"
      "  end\n"
      "  return p\n"
      "end\n"
      "local w = redis.call('GET', KEYS[1])\n"
      "if w and w ~= ARGV[1] then\n"
      "  return wait(redis.call('PTTL', KEYS[1]))\n"
      "end\n"
      "local longest = -2\n"
      "for _, id in ipairs(redis.call('SMEMBERS', KEYS[3])) do\n"
      "  local p = redis.call('PTTL', ARGV[4] .. id)\n"
      "  if p == -2 then\n"
      "    redis.call('SREM', KEYS[3], id)\n"
      "  elseif id ~= ARGV[3] then\n"
      "    if p == -1 or longest == -1 then\n"
      "      longest = -1\n"
      "    elseif p > longest then\n"
      "      longest = p\n"
      "    end\n"
      "  end\n"
      "end\n"
      "if longest ~= -2 then\n"
      "  return wait(longest)\n"
      "end\n"
      "redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])\n"
      "if redis.call('GET', KEYS[2]) == ARGV[3] then\n"
      "  redis.call('DEL', KEYS[2])\n"
      "end\n"
      "return -3\n";

/* RW STOP WAITING: KEYS[1] = waiting mark, ARGV[1] = the registry's client id, ARGV[2]
 * = the mark's notification channel ('': none), ARGV[3] (optional, a Cluster) = its
 * shard channel. Deletes the mark if it is ours and publishes its key, so that the
 * readers it held back retry at once; 1 when deleted, else 0. */
static const char stop_waiting_script[]
    = "if redis.call('GET', KEYS[1]) ~= ARGV[1] then\n"
      "  return 0\n"
      "end\n"
      "redis.call('DEL', KEYS[1])\n"
      "if ARGV[2] ~= '' then\n"
      "  redis.pcall('PUBLISH', ARGV[2], KEYS[1])\n"
      "end\n"
      "if ARGV[3] then\n"
      "  redis.pcall('SPUBLISH', ARGV[3], KEYS[1])\n"
      "end\n"
      "return 1\n";

typedef struct
{
  RlScript read, write, stop_waiting;
} RwScripts;

static const RwScripts *
scripts (void)
{
  static RwScripts s;
  static gsize once = 0;

  if (g_once_init_enter (&once))
    {
      rl_redis_script_init (&s.read, read_script);
      rl_redis_script_init (&s.write, write_script);
      rl_redis_script_init (&s.stop_waiting, stop_waiting_script);
      g_once_init_leave (&once, 1);
    }
  return &s;
}

RlLeaseResult
rl_redis_rw_acquire (RlStore *store, const RlRwKeys *keys, RlRwMode mode, const char *value,
                     gint64 ttl_ms, gint64 deadline, gint64 *pttl_ms, GError **error)
{
  const RwScripts *s = scripts ();
  const char *key = mode == RL_RW_WRITE ? keys->writer : keys->reader;
  gboolean write = mode == RL_RW_WRITE;
  char ttl[24];
  g_autofree char *channel = write ? rl_redis_store_channel (store, keys->waiting) : NULL;
  g_autofree char *shard = write ? rl_redis_store_shard_channel (store, keys->waiting) : NULL;
  const char *argv[12];
  redisReply *reply;
  gboolean acked;
  long long result;
  int argc;

  rl_format_uint (ttl, ttl_ms);
  argv[0] = argv[1] = NULL; /* EVALSHA and the SHA-1, filled in by the call */
  argv[2] = write ? "3" : "4";
  argv[3] = keys->writer;
  argv[4] = keys->waiting;
  argv[5] = keys->readers;
  argc = 6;
  if (!write)
    argv[argc++] = keys->reader;
  argv[argc++] = value;
  argv[argc++] = ttl;
  argv[argc++] = keys->owner;
  argv[argc++] = write ? keys->reader_prefix : mode == RL_RW_DOWNGRADE ? "1" : "0";
  if (write)
    argv[argc++] = rl_redis_store_classic (store, shard, channel);
  if (shard != NULL)
    argv[argc++] = shard;

  reply = rl_redis_store_eval (store, write ? &s->write : &s->read, argc, argv, deadline,
                               &acked, error);
  if (reply == NULL)
    return RL_LEASE_ERROR;
  if (reply->type != REDIS_REPLY_INTEGER)
    {
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_REDIS,
                   "Redis read-write lock script returned an unexpected reply (type %d)",
                   reply->type);
      freeReplyObject (reply);
      return RL_LEASE_ERROR;
    }
  result = reply->integer;
  freeReplyObject (reply);
  if (result != RL_SCRIPT_ACQUIRED)
    {
      *pttl_ms = result;
      return RL_LEASE_HELD;
    }
  return acked ? RL_LEASE_OK : rl_redis_store_unreplicated (store, key, value, error);
}

gboolean
rl_redis_rw_stop_waiting (RlStore *store, const RlRwKeys *keys, gint64 deadline, GError **error)
{
  const RwScripts *s = scripts ();
  g_autofree char *channel = rl_redis_store_channel (store, keys->waiting);
  g_autofree char *shard = rl_redis_store_shard_channel (store, keys->waiting);
  const char *argv[7] = { NULL, NULL, "1", keys->waiting, keys->owner,
                          rl_redis_store_classic (store, shard, channel), shard };
  redisReply *reply = rl_redis_store_eval (store, &s->stop_waiting, shard != NULL ? 7 : 6, argv,
                                           deadline, NULL, error);

  if (reply == NULL)
    return FALSE;
  freeReplyObject (reply);
  return TRUE;
}
