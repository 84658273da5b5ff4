/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* redis-rwlock.c: the read-write lock's protocol on Redis, the Redis store's
 * rw_acquire and rw_stop_waiting (store.h).
 *
 * A read-write lock is plain leases, so that release, loss and audits are those of
 * every other lease: the writer lease `registry_key:{name}:rw:w`, one reader lease per
 * registry `registry_key:{name}:rw:r:CLIENT_ID` (the threads of a process share it),
 * the index `registry_key:{name}:rw:readers`, a sorted set of the client ids that took
 * a reader lease scored by when their registration runs out (how a writer finds them),
 * and the mark `registry_key:{name}:rw:ww` that a waiting writer leaves so that new
 * readers of every process wait behind it. The hash tag `{name}` keeps them in one
 * Cluster slot, so each decision below is one script that reads and writes them
 * together; a reader lease is released by the store's usual release script
 * (compare-and-delete, then the notification) and its id stays in the index until a
 * script meets it. Nothing in Redis is safe from a DEL or an eviction, so a reader
 * lease is held only while its registration is there: its renewal and inspection
 * check it (redis-readers.c, which the lease code calls), and every writer's
 * acquisition publishes the index's key, so that the registries reading check theirs
 * at once.
 */
#include "config.h"

#include <string.h>

#include <hiredis/hiredis.h>

#include "connection.h"
#include "redis-store-private.h"

/* The readers index is a sorted set: its members are the client ids of the registries
 * that took a reader lease, each scored by the time (ms, the server's clock) its
 * registration runs out: when its lease was taken or last renewed, plus the TTL set
 * then. A member scored past is stale: its lease has expired or been released, or it
 * lives on and is re-scored when met. So a writer finds the live readers among the
 * members scored ahead (ZRANGEBYSCORE), and however many stale ids pile up (registries
 * that read once, short-lived processes), each script call meets only a bounded few of
 * them (RL_RW_PRUNE_WRITER, RL_RW_PRUNE_READER below): removed when their lease is
 * gone, re-scored when it lives. The functions below open both scripts that read the
 * index: now() the server's time in ms, tidy() that bounded pass. */
#define RW_COMMON_LUA                                                                              \
  "local function now()\n"                                                                         \
  "  local t = redis.call('TIME')\n"                                                               \
  "  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"                          \
  "end\n"                                                                                          \
  "local function score(ms)\n"                                                                     \
  "  return string.format('%.0f', ms)\n"                                                           \
  "end\n"                                                                                          \
  "local function tidy(index, prefix, t, limit)\n"                                                 \
  "  local ids = redis.call('ZRANGEBYSCORE', index, '-inf', t, 'LIMIT', 0, limit)\n"            \
  "  for _, id in ipairs(ids) do\n"                                                                \
  "    local p = redis.call('PTTL', prefix .. id)\n"                                               \
  "    if p == -2 then\n"                                                                          \
  "      redis.call('ZREM', index, id)\n"                                                          \
  "    elseif p == -1 then\n"                                                                      \
  "      redis.call('ZADD', index, '+inf', id)\n"                                                  \
  "    else\n"                                                                                     \
  "      redis.call('ZADD', index, score(t + p), id)\n"                                            \
  "    end\n"                                                                                      \
  "  end\n"                                                                                        \
  "end\n"

/* How many stale members of the index one writer's script meets, and one reader's. */
#define RL_RW_PRUNE_WRITER "100"
#define RL_RW_PRUNE_READER "4"

/* RW READ: KEYS[1] = writer lease, KEYS[2] = waiting mark, KEYS[3] = readers index,
 * KEYS[4] = this registry's reader lease; ARGV[1] = this acquisition's value, ARGV[2] =
 * TTL in ms, ARGV[3] = the registry's client id, ARGV[4] = '1' when this registry holds
 * the writer lease (a downgrade: a waiting writer does not hold it back), ARGV[5] = the
 * reader lease prefix. Held back by a writer lease of another registry (its PTTL) or,
 * unless downgrading, by another registry's waiting writer (the mark's PTTL);
 * otherwise sets the reader lease, registers the id in the index until the lease's
 * expiry, tidies a few stale members and returns -3. One script, so no writer can take
 * the lock between the check and the set. */
static const char read_script[]
    = RW_COMMON_LUA
      "local own = ARGV[3] .. ':'\n"
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
      "local t = now()\n"
      "redis.call('ZADD', KEYS[3], score(t + tonumber(ARGV[2])), ARGV[3])\n"
      "tidy(KEYS[3], ARGV[5], t, " RL_RW_PRUNE_READER ")\n"
      "return -3\n";

/* RW WRITE: KEYS[1] = writer lease, KEYS[2] = waiting mark, KEYS[3] = readers index;
 * ARGV[1] = this acquisition's value, ARGV[2] = TTL in ms, ARGV[3] = the registry's
 * client id, ARGV[4] = the reader lease prefix (a reader's key is it and its id),
 * ARGV[5] = the mark's notification channel, ARGV[6] = the index's ('': none), ARGV[7]
 * and ARGV[8] (optional, a Cluster) = their shard channels, to SPUBLISH on as a
 * release is. Held back by another acquisition's writer lease, or by a live reader
 * lease of another registry: a member of the index scored ahead whose lease lives
 * (those whose lease is gone are removed on the way; a bounded few stale members are
 * tidied first, so that one re-scored counts). Then the mark is set to our id (unless
 * another writer's mark is there), with a TTL that outlasts the wait (the longer of
 * our TTL and the holder's, plus a second), and the longest PTTL of what holds it back
 * is returned (-1: one has no expiry). A mark newly set is published, so that
 * registries whose threads share a reader lease stop letting new reading threads join
 * it. Otherwise sets the writer lease, removes our mark, publishes the index's key
 * (every registry reading checks that its registration is still there: an index
 * deleted behind the readers' backs let this writer in beside them) and returns -3. */
static const char write_script[]
    = RW_COMMON_LUA
      "local function publish(key, classic, shard)\n"
      "  if classic ~= '' then\n"
      "    redis.pcall('PUBLISH', classic, key)\n"
      "  end\n"
      "  if shard then\n"
      "    redis.pcall('SPUBLISH', shard, key)\n"
      "  end\n"
      "end\n"
      "local function wait(p)\n"
      "  local ww = redis.call('GET', KEYS[2])\n"
      "  if not ww or ww == ARGV[3] then\n"
      "    local t = tonumber(ARGV[2])\n"
      "    if p > t then t = p end\n"
      "    redis.call('SET', KEYS[2], ARGV[3], 'PX', t + 1000)\n"
      "  end\n"
      "  if not ww then\n"
      "    publish(KEYS[2], ARGV[5], ARGV[7])\n"
      "  end\n"
      "  return p\n"
      "end\n"
      "local w = redis.call('GET', KEYS[1])\n"
      "if w and w ~= ARGV[1] then\n"
      "  return wait(redis.call('PTTL', KEYS[1]))\n"
      "end\n"
      "local t = now()\n"
      "tidy(KEYS[3], ARGV[4], t, " RL_RW_PRUNE_WRITER ")\n"
      "local longest = -2\n"
      "for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '(' .. t, '+inf')) do\n"
      "  local p = redis.call('PTTL', ARGV[4] .. id)\n"
      "  if p == -2 then\n"
      "    redis.call('ZREM', KEYS[3], id)\n"
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
      "publish(KEYS[3], ARGV[6], ARGV[8])\n"
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
  g_autofree char *index_channel = write ? rl_redis_store_channel (store, keys->readers) : NULL;
  g_autofree char *index_shard
      = write ? rl_redis_store_shard_channel (store, keys->readers) : NULL;
  const char *argv[14];
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
  if (write)
    {
      argv[argc++] = keys->reader_prefix;
      argv[argc++] = rl_redis_store_classic (store, shard, channel);
      argv[argc++] = rl_redis_store_classic (store, index_shard, index_channel);
      if (shard != NULL)
        {
          argv[argc++] = shard;
          argv[argc++] = index_shard;
        }
    }
  else
    {
      argv[argc++] = mode == RL_RW_DOWNGRADE ? "1" : "0";
      argv[argc++] = keys->reader_prefix;
    }

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
