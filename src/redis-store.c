/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* redis-store.c: the Redis lease protocol, the Redis implementation of the store seam.
 *
 * A lease is the key `registry_key:name` holding the registry's client id, ":" and a
 * number unique to the acquisition, with a millisecond expiry: the layout Spring
 * Integration's RedisLockRegistry uses (Spring compares values only with its own
 * client id), so Java and C processes exclude each other. The number makes every
 * hold's value different, so a release or renewal that reaches Redis late (its reply
 * timed out, the holder moved on) can never match a later hold of the same registry.
 * Every step that reads the key and then changes it is one Lua script, because between
 * a GET and a DEL another owner may have taken the key over, and deleting it then would
 * break mutual exclusion. The scripts are
 * sent by EVALSHA with their SHA-1 computed here; a server that does not know a script
 * (restarted, SCRIPT FLUSH) answers NOSCRIPT and gets the script by EVAL, which also
 * caches it, in the same call. A free key is first tried with a plain
 * `SET key id NX PX ttl` (the same write Spring makes), which is cheaper for Redis
 * than any script; the acquire script runs only when the key exists.
 *
 * Connections come from the pool (connection.c). An acquisition or a renewal that
 * fails because a pooled connection had gone stale (server restarted) is sent again
 * once on a fresh one: it names the value of one acquisition, so a second run finds
 * its own value and changes nothing the first did not. A release is never sent twice
 * (a second one that finds the key gone could not tell whether the first deleted it):
 * its script is marked once (RlScript.once), and the pool checks the connection it
 * hands out for it before anything is sent. A timeout is not retried: it already used
 * the caller's time.
 *
 * This file holds the scripts, the vtable and the opening of a store; the rest is
 * cut along what it does (see redis-store-private.h): redis-lease.c the single-lease
 * operations and what the scripts' replies mean, redis-batch.c the batched ones,
 * redis-inspect.c the inspection calls, redis-request.c the stepwise requests of the
 * quorum store (the same commands and scripts, sent and read for several servers at
 * once), redis-queue.c the wait queue (QUEUED ACQUIRE and QUEUED RELEASE below: a
 * waiter's place in line beside the key, a release that grants to the first place), all
 * over redis-exchange.c, the one exchange engine.
 */
#include "config.h"

#include <string.h>

#include "debug.h"
#include "connection.h"
#include "store.h"
#include "topology.h"
#include "sync.h"
#include "notify.h"
#include "redis-store-private.h"
#include "redis-waits.h"

/* ACQUIRE: KEYS[1] = lock key, ARGV[1] = this acquisition's value, ARGV[2] = TTL in ms.
 * Absent: SET NX PX takes it (the common case, one command). Ours already (the same
 * acquisition's SET ran, but its reply was lost and the request is retried): refresh
 * the TTL. Both return -3, a value PTTL
 * never returns. Held by another owner: return its PTTL (>= 0, or -1 without expiry),
 * which bounds how long a waiter sleeps if no unlock notification ever comes. A waiter
 * never touches the holder's TTL. One script, so the three cases cannot interleave
 * with another client's release or acquisition. */
static const char acquire_script[]
    = "if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then\n"
      "  return -3\n"
      "end\n"
      "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
      "  redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
      "  return -3\n"
      "end\n"
      "return redis.call('PTTL', KEYS[1])\n";

/* NEXT TOKEN, a Lua function the fencing scripts share: the next token of the counter
 * key k, max(counter + 1, the server's clock in microseconds), written back to k
 * before it is returned (a hybrid logical clock). A counter alone starts again lower
 * when it is lost (a restart without persistence, a failover to a replica that had
 * not received the last increments); the clock does not, as long as the servers'
 * clocks agree to within the time between the last token and the fault. The counter
 * is bumped past the clock (INCR) only when tokens come faster than one per
 * microsecond or the clock was set back; otherwise the clock's value is written with
 * SET, so replicas and the AOF get the literal number, not a TIME to evaluate again
 * (Redis replicates a script's effects, by default since 5.0 and only so since 7.0,
 * which is what makes TIME usable in a script that writes). A
 * counter that does not hold an integer makes the script fail (INCR refuses it). The
 * token is returned as the counter's string, not as a Lua number, which is a double
 * and would round a counter past 2^53; and the clock's digits are joined as strings,
 * the microseconds padded to six (a Lua number would print in exponent form), without
 * string.format, which costs a few microseconds a call. */
#define RL_LUA_NEXT_TOKEN                                                                          \
  "local function next_token(k)\n"                                                                 \
  "  local t = redis.call('TIME')\n"                                                               \
  "  local us = t[2]\n"                                                                            \
  "  if #us < 6 then\n"                                                                            \
  "    us = string.rep('0', 6 - #us) .. us\n"                                                      \
  "  end\n"                                                                                        \
  "  local now = t[1] .. us\n"                                                                     \
  "  local c = redis.call('GET', k)\n"                                                             \
  "  if c then\n"                                                                                  \
  "    local n = tonumber(c)\n"                                                                    \
  "    if not n or n >= t[1] * 1000000 + t[2] then\n"                                              \
  "      redis.call('INCR', k)\n"                                                                  \
  "      return redis.call('GET', k)\n"                                                            \
  "    end\n"                                                                                      \
  "  end\n"                                                                                        \
  "  redis.call('SET', k, now)\n"                                                                  \
  "  return now\n"                                                                                 \
  "end\n"

/* FENCED ACQUIRE: KEYS[1] = lock key, KEYS[2] = its fencing counter (in the same slot),
 * ARGV[1] = this acquisition's value, ARGV[2] = TTL in ms. ACQUIRE, and whenever it
 * takes the lease (free, or ours already after a lost reply), NEXT TOKEN of the counter
 * in the same atomic step, so that no two acquisitions of the name can get the same
 * token or take them out of order. Taken: returns {token}, the counter's new value as
 * a string (a retry of the same acquisition gets a new, higher one: tokens only have
 * to rise). Held by another owner: returns its PTTL, as ACQUIRE does, and the counter
 * is untouched. Used only with fencing on, so that without it the keys touched stay
 * Spring's. */
static const char fenced_acquire_script[]
    = RL_LUA_NEXT_TOKEN "if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then\n"
                        "  return {next_token(KEYS[2])}\n"
                        "end\n"
                        "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
                        "  redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
                        "  return {next_token(KEYS[2])}\n"
                        "end\n"
                        "return redis.call('PTTL', KEYS[1])\n";

/* ACQUIRE ALL: several leases, all or none. KEYS[1..n] = lock keys, then with fencing
 * KEYS[n+1..2n] = their counters; ARGV[1] = TTL in ms, ARGV[2] = '1' with fencing,
 * ARGV[3..n+2] = each acquisition's value. Every key is looked at before any is
 * written: the first held by another owner ends the script with nothing written and
 * returns {i, PTTL of KEYS[i]}; otherwise each key is set (taken, or ours already with
 * its TTL refreshed) and, with fencing, its counter moved on by NEXT TOKEN, and the
 * script returns {0, token of KEYS[1], …} (the tokens as strings; integers 0 without
 * fencing). One script, so two clients taking overlapping sets never each get a part,
 * and a set is never seen half taken. On a Cluster its keys must share a slot, so it
 * runs once per slot. */
static const char acquire_all_script[]
    = RL_LUA_NEXT_TOKEN "local n = #ARGV - 2\n"
                        "for i = 1, n do\n"
                        "  local v = redis.call('GET', KEYS[i])\n"
                        "  if v and v ~= ARGV[i + 2] then\n"
                        "    return {i, redis.call('PTTL', KEYS[i])}\n"
                        "  end\n"
                        "end\n"
                        "local result = {0}\n"
                        "for i = 1, n do\n"
                        "  redis.call('SET', KEYS[i], ARGV[i + 2], 'PX', ARGV[1])\n"
                        "  if ARGV[2] == '1' then\n"
                        "    result[i + 1] = next_token(KEYS[n + i])\n"
                        "  else\n"
                        "    result[i + 1] = 0\n"
                        "  end\n"
                        "end\n"
                        "return result\n";

/* RELEASE: KEYS[1] = lock key, ARGV[1] = the hold's value, ARGV[2] = notification channel,
 * ARGV[3] = how many of the receivers are our own subscription (0 to 2), ARGV[4]
 * (optional) = a TTL in ms to keep the lease with when nobody else listens ('0': do
 * not), ARGV[5] (optional) = a second channel to publish on, `registry_key-channel`,
 * where Spring's releases before its per-key channels listen ('': none), ARGV[6]
 * (optional, a Cluster) = the key's shard channel, to SPUBLISH the key on; ARGV[2] is
 * then '' when the release is not to be published classically too.
 * Gone or foreign: touches nothing and returns 0 (the lease was lost). Ours: PUBLISH
 * the key on `registry_key-channel:key` (and on ARGV[5]) and UNLINK it in the same
 * atomic step, so no waiter can see the key gone without the notification being on
 * its way; returns 2 when a client other than ours received a notification (the
 * receivers of both channels count), else 1. With ARGV[4] and
 * no other receiver (so no waiter anywhere was told), the key stays with its TTL
 * reset and the script returns -1. A user without permission on the channel (an ACL
 * without `&registry_key-channel:*`, Redis 7's default for new users) makes PUBLISH
 * fail: the key is deleted all the same and the script returns 3, so an unlock never
 * leaves a key behind for want of a notification; a refused ARGV[5] is ignored. */
#define RL_LUA_RELEASE_CHECK                                                                       \
  "local key, a = KEYS[1], ARGV\n"                                                                 \
  "if redis.call('GET', key) ~= a[1] then\n"                                                       \
  "  return 0\n"                                                                                   \
  "end\n"
/* What RELEASE does once the key is found ours, as a macro that QUEUED RELEASE below
 * runs too. */
#define RL_LUA_RELEASE_BODY                                                                        \
  "local n = 0\n"                                                                                  \
  "if a[2] ~= '' then\n"                                                                           \
  "  n = redis.pcall('PUBLISH', a[2], key)\n"                                                      \
  "end\n"                                                                                          \
  "if a[5] then\n"                                                                                 \
  "  if a[5] ~= '' then\n"                                                                         \
  "    local m = redis.pcall('PUBLISH', a[5], key)\n"                                              \
  "    if type(n) == 'number' and type(m) == 'number' then\n"                                      \
  "      n = n + m\n"                                                                              \
  "    end\n"                                                                                      \
  "  end\n"                                                                                        \
  "  if a[6] then\n"                                                                               \
  "    local s = redis.pcall('SPUBLISH', a[6], key)\n"                                             \
  "    if a[2] == '' then\n"                                                                       \
  "      n = s\n"                                                                                  \
  "    elseif type(n) == 'number' and type(s) == 'number' then\n"                                  \
  "      n = n + s\n"                                                                              \
  "    end\n"                                                                                      \
  "  end\n"                                                                                        \
  "end\n"                                                                                          \
  "if type(n) ~= 'number' then\n"                                                                  \
  "  redis.call('UNLINK', key)\n"                                                                  \
  "  return 3\n"                                                                                   \
  "end\n"                                                                                          \
  "local others = n - a[3]\n"                                                                      \
  "if others <= 0 and a[4] and a[4] ~= '0' then\n"                                                 \
  "  redis.call('PEXPIRE', key, a[4])\n"                                                           \
  "  return -1\n"                                                                                  \
  "end\n"                                                                                          \
  "redis.call('UNLINK', key)\n"                                                                    \
  "if others > 0 then\n"                                                                           \
  "  return 2\n"                                                                                   \
  "end\n"                                                                                          \
  "return 1\n"
static const char release_script[] = RL_LUA_RELEASE_CHECK RL_LUA_RELEASE_BODY;

/* GRANT, a Lua function the wait queue's scripts share: hands the lock key k, free or
 * ours, to the first live place of its queue z (a sorted set of client ids by arrival;
 * a place's `TTL FENCED VALUE` is the string key `z:CLIENT_ID`, which expires with the
 * place) other than `me`: the key is written with the place's value and TTL, with
 * FENCED '1' the counter f moved on (NEXT TOKEN), the place removed, and `TOKEN\nVALUE\nKEY`
 * published on gp .. CLIENT_ID, that registry's own channel (a refused PUBLISH, for
 * want of the channel's permission, is ignored: the grantee's next attempt finds the
 * key holding its place's value). Places whose key expired
 * (a crashed waiter's) are dropped on the way, at most eight per call. Returns true
 * when it granted; false when the queue had no live place before `me`'s (whose place
 * it then took out of the line too: the caller takes the key). */
#define RL_LUA_GRANT                                                                               \
  "local function grant(k, z, f, gp, me)\n"                                                        \
  "  for i = 1, 8 do\n"                                                                            \
  "    local head = redis.call('ZPOPMIN', z)[1]\n"                                             \
  "    if not head or head == me then\n"                                                           \
  "      return false\n"                                                                           \
  "    end\n"                                                                                      \
  "    local e = redis.call('GET', z .. ':' .. head)\n"                                            \
  "    if e then\n"                                                                                \
  "      redis.call('UNLINK', z .. ':' .. head)\n"                                                 \
  "      local ttl, fenced, v = string.match(e, '^(%d+) (%d) (.*)$')\n"                            \
  "      redis.call('SET', k, v, 'PX', ttl)\n"                                                     \
  "      local token = '0'\n"                                                                      \
  "      if fenced == '1' then\n"                                                                  \
  "        token = next_token(f)\n"                                                                \
  "      end\n"                                                                                    \
  "      redis.pcall('PUBLISH', gp .. head, token .. '\\n' .. v .. '\\n' .. k)\n"                  \
  "      return true\n"                                                                            \
  "    end\n"                                                                                      \
  "  end\n"                                                                                        \
  "  return false\n"                                                                               \
  "end\n"

/* QUEUED ACQUIRE: KEYS[1] = lock key, KEYS[2] = its queue, KEYS[3] = its fencing
 * counter (all in one slot); ARGV[1] = this attempt's value, ARGV[2] = TTL in ms,
 * ARGV[3] = the registry's client id, ARGV[4] = the value of its previous place ('':
 * none), ARGV[5] = a place's life in ms, ARGV[6] = the grant channels' prefix, ARGV[7]
 * = '1' with fencing. The key holding ARGV[1] or ARGV[4] (granted to the previous
 * place meanwhile) is ours: written with ARGV[1] and the TTL. A free key is granted to
 * the queue's first live place before ours (GRANT); when there is none, it is ours.
 * Ours: the place is left, and the script returns -3, or {token} with fencing.
 * Otherwise the place is taken (at the end of the line, by the server's clock) or kept
 * (where it stands) with ARGV[1], alive for ARGV[5] ms, and the script returns the
 * key's PTTL. */
static const char queued_acquire_script[]
    = RL_LUA_NEXT_TOKEN RL_LUA_GRANT
      "local key, z, a = KEYS[1], KEYS[2], ARGV\n"
      "local place = z .. ':' .. a[3]\n"
      "local v = redis.call('GET', key)\n"
      "if v and (v == a[1] or (a[4] ~= '' and v == a[4]))\n"
      "   or (not v and not grant(key, z, KEYS[3], a[6], a[3])) then\n"
      "  redis.call('SET', key, a[1], 'PX', a[2])\n"
      "  redis.call('ZREM', z, a[3])\n"
      "  redis.call('UNLINK', place)\n"
      "  if a[7] == '1' then\n"
      "    return {next_token(KEYS[3])}\n"
      "  end\n"
      "  return -3\n"
      "end\n"
      "local t = redis.call('TIME')\n"
      "local us = t[2]\n"
      "if #us < 6 then\n"
      "  us = string.rep('0', 6 - #us) .. us\n"
      "end\n"
      "redis.call('ZADD', z, 'NX', t[1] .. us, a[3])\n"
      "redis.call('SET', place, a[2] .. ' ' .. a[7] .. ' ' .. a[1], 'PX', a[5])\n"
      "return redis.call('PTTL', key)\n";

/* QUEUED RELEASE: RELEASE with the lock's wait queue. KEYS[1] = lock key, KEYS[2] = its
 * queue, KEYS[3] = its fencing counter; ARGV[1] = the grant channels' prefix, ARGV[2]
 * = the client id whose place to remove first ('': none; a waiter that gives up), then
 * RELEASE's arguments. The key ours and a live place in line: GRANT, and the script
 * returns 4 (no notification: the grantee alone is told). Otherwise as RELEASE. */
static const char queued_release_script[]
    = RL_LUA_NEXT_TOKEN RL_LUA_GRANT
      "local gp = table.remove(ARGV, 1)\n"
      "local me = table.remove(ARGV, 1)\n"
      "if me ~= '' then\n"
      "  redis.call('ZREM', KEYS[2], me)\n"
      "  redis.call('UNLINK', KEYS[2] .. ':' .. me)\n"
      "end\n"
      RL_LUA_RELEASE_CHECK
      "if grant(key, KEYS[2], KEYS[3], gp, '') then\n"
      "  return 4\n"
      "end\n"
      RL_LUA_RELEASE_BODY;

/* FORCE RELEASE: KEYS[1] = lock key, ARGV[1] = notification channel ('': none),
 * ARGV[2] = the registry's forced-release channel, ARGV[3] = a third channel ('':
 * none), as RELEASE's older Spring channel, ARGV[4] = '1' to force a lease of this
 * library only (its value `…:32 hex digits:number`, rl_store_is_lease_value()), ARGV[5]
 * (optional, a Cluster) = the key's shard channel, as RELEASE's ARGV[6]. Deletes the
 * key whoever holds it and publishes the notification in the same atomic step, as
 * RELEASE does, so waiters wake at once; and publishes the key on the forced-release
 * channel, which every registry holding a lease listens to (its guarding connection),
 * so that a holder of this library hears of it though nobody of its own waits. Returns
 * 1 when a key was deleted, 0 when there was none, and touching nothing when it is
 * no lease: -1 when it is not a string (a read-write lock's readers set), -2 with
 * ARGV[4] for a string of another shape (a waiting writer's mark, a semaphore's
 * size). A user without
 * permission on the channels still deletes (the PUBLISH errors are ignored). */
static const char force_release_script[]
    = "local t = redis.call('TYPE', KEYS[1])['ok']\n"
      "if t == 'none' then\n"
      "  return 0\n"
      "end\n"
      "if t ~= 'string' then\n"
      "  return -1\n"
      "end\n"
      "if ARGV[4] == '1' and not string.find(redis.call('GET', KEYS[1]),\n"
      "    ':' .. string.rep('%x', 32) .. ':%d+$') then\n"
      "  return -2\n"
      "end\n"
      "if ARGV[1] ~= '' then\n"
      "  redis.pcall('PUBLISH', ARGV[1], KEYS[1])\n"
      "end\n"
      "redis.pcall('PUBLISH', ARGV[2], KEYS[1])\n"
      "if ARGV[5] then\n"
      "  redis.pcall('SPUBLISH', ARGV[5], KEYS[1])\n"
      "end\n"
      "if ARGV[3] ~= '' then\n"
      "  redis.pcall('PUBLISH', ARGV[3], KEYS[1])\n"
      "end\n"
      "redis.call('UNLINK', KEYS[1])\n"
      "return 1\n";

/* RENEW: KEYS[1] = lock key, ARGV[1] = the hold's value, ARGV[2] = TTL in ms.
 * Ours: PEXPIRE, returns 1. Gone or foreign: returns 0 and never extends another
 * owner's key. */
static const char renew_script[] = "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
                                   "  redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
                                   "  return 1\n"
                                   "end\n"
                                   "return 0\n";


static gboolean
rl_redis_watch (RlStore *store, gint64 timeout_ms)
{
  return rl_notifier_watch (((RlRedisStore *)store)->notifier, timeout_ms);
}

/* On a Cluster a waiter also subscribes to its key's shard channel, on the key's
 * master. What it must have confirmed depends on how releases are published: with
 * classic notifications (the default) every release of this library and of Spring
 * reaches the pattern, but a registry with them off publishes on the shard channel
 * only, so the key's subscription is needed too (unless the cluster refuses shard
 * channels: then nobody can publish there); with them off, both (Spring's releases
 * are classic only, ours sharded only). A waiter of a set of locks watches each of its
 * keys. The subscription is that of
 * the key whose channel carries @key's releases (rl_redis_notify_key()), and so is the
 * count of waiters a waiter joins. */
static gboolean
rl_redis_watch_key (RlStore *store, const char *key, gboolean join, gint64 timeout_ms)
{
  RlRedisStore *self = (RlRedisStore *) store;
  gint64 end = g_get_monotonic_time () + timeout_ms * 1000;
  gboolean classic = rl_notifier_watch (self->notifier, timeout_ms);
  gboolean classic_off = g_atomic_int_get (&store->ctx->classic_off) != 0;
  gboolean refused = FALSE, sharded;
  g_autofree char *group = NULL;

  if (self->shard == NULL)
    return classic;
  group = rl_redis_notify_key (self, key);
  sharded = rl_shard_notifier_watch (self->shard, group, join,
                                     MAX ((end - g_get_monotonic_time ()) / 1000, 0), &refused);
  return classic && (sharded || (refused && !classic_off));
}

static void
rl_redis_unwatch_key (RlStore *store, const char *key)
{
  RlRedisStore *self = (RlRedisStore *) store;
  g_autofree char *group = NULL;

  if (self->shard == NULL)
    return;
  group = rl_redis_notify_key (self, key);
  rl_shard_notifier_unwatch (self->shard, group);
}

static void
rl_redis_rewatch (RlStore *store)
{
  RlRedisStore *self = (RlRedisStore *) store;

  rl_notifier_restart (self->notifier);
}

/* The notification connection is that guard: it breaks when the server restarts or
 * the connection is reset, PINGs while silent, and moves with a failover; each time
 * it goes down or comes back it reports released (NULL, reset). */
static gboolean
rl_redis_guard (RlStore *store)
{
  return rl_notifier_guard (((RlRedisStore *) store)->notifier);
}

static void
rl_redis_close (RlStore *store)
{
  RlRedisStore *self = (RlRedisStore *) store;

  if (self->notifier != NULL)
    rl_notifier_stop (self->notifier);
  if (self->shard != NULL)
    rl_shard_notifier_stop (self->shard);
  if (self->topology != NULL)
    self->topology->vt->close (self->topology);
}

static void
rl_redis_free (RlStore *store)
{
  RlRedisStore *self = (RlRedisStore *)store;

  rl_notifier_free (self->notifier);
  rl_shard_notifier_free (self->shard);
  rl_topology_free (self->topology);
  g_free (self->channel_prefix);
  g_free (self->forced_channel);
  g_free (self->legacy_channel);
  g_free (self->grant_prefix);
  g_free (self->pattern);
  g_free (self->key_prefix);
  rl_mutex_clear (&self->recent_mutex);
  g_free (self);
}

/* For the lock family's files (redis-store.h) ------------------------------------ */

redisReply *
rl_redis_store_eval (RlStore *store, const RlScript *script, int argc, const char **argv,
                     gint64 deadline, gboolean *acked, GError **error)
{
  return rl_redis_call_tracked ((RlRedisStore *)store, argv[3], argc, argv, script, deadline,
                                NULL, rl_redis_wrote_acquire, acked, TRUE, error);
}

RlLeaseResult
rl_redis_store_unreplicated (RlStore *store, const char *key, const char *value, GError **error)
{
  return rl_redis_unreplicated_acquisition ((RlRedisStore *)store, key, value, error);
}

char *
rl_redis_store_channel (RlStore *store, const char *key)
{
  return g_strconcat (((RlRedisStore *) store)->channel_prefix, key, NULL);
}

char *
rl_redis_store_shard_channel (RlStore *store, const char *key)
{
  return rl_redis_shard_channel ((RlRedisStore *) store, key);
}

const char *
rl_redis_store_classic (RlStore *store, const char *shard, const char *channel)
{
  return rl_redis_classic_channel ((RlRedisStore *) store, shard, channel);
}

/* The waits-for records: the script of redis-waits.c on the registry key's hash. */
static gboolean
rl_redis_waits_update (RlStore *store, const char *id, const char *record, gint64 ttl_ms,
                       GPtrArray *records, gint64 deadline, GError **error)
{
  RlRedisStore *self = (RlRedisStore *) store;
  g_autofree char *key = rl_store_waits_key (store->registry_key);
  const char *argv[8];
  char ttl_text[24];
  redisReply *reply;
  gboolean ok;

  rl_redis_waits_argv (argv, key, id, record, ttl_ms, records != NULL, ttl_text);
  reply = rl_redis_call (self, key, 8, argv, &self->waits, deadline, NULL, NULL, NULL, error);
  if (reply == NULL)
    return FALSE;
  ok = rl_redis_waits_read_reply (reply, records, error);
  freeReplyObject (reply);
  return ok;
}

/* The node that serves @key now: in a Cluster, the master of its slot. */
static gconstpointer
rl_redis_lane (RlStore *store, const char *key)
{
  RlTopology *topology = ((RlRedisStore *) store)->topology;
  g_autoptr (RlNode) node = topology->vt->route (topology, key, NULL);

  return node;
}

RL_DEFINE_STORE_VTABLE (rl_redis,
                        .lane = rl_redis_lane,
                        .request_begin = rl_redis_request_begin,
                        .request_ready = rl_redis_request_ready,
                        .request_end = rl_redis_request_end,
                        .watch_key = rl_redis_watch_key,
                        .unwatch_key = rl_redis_unwatch_key,
                        .rewatch = rl_redis_rewatch,
                        .guard = rl_redis_guard,
                        .acquire_queued = rl_redis_acquire_queued,
                        .leave_queue = rl_redis_leave_queue,
                        .queue_list = rl_redis_queue_list,
                        /* semaphores: redis-semaphore.c; read-write locks: redis-rwlock.c;
                         * waits-for records: rl_redis_waits_update() above */
                        RL_STORE_FAMILY_ENTRIES (rl_redis));

/* Checks a node now, so that redis_lock_registry_new() fails early and clearly:
 * connect, AUTH, SELECT, then in one round trip load the lease scripts (so the first
 * watchdog tick or release does not pay a NOSCRIPT retry) and PING. A server that
 * refuses SCRIPT LOAD still works: EVALSHA falls back to EVAL. The connection stays
 * in the pool for the first lock. */
static gboolean
check_node (RlRedisStore *self, RlNode *node, GError **error)
{
  const RlScript *scripts[] = { &self->acquire,        &self->release,     &self->renew,
                                &self->fenced_acquire, &self->acquire_all, &self->queued_acquire,
                                &self->queued_release };
  const char *ping[] = { "PING" };
  gboolean reused;
  RlConn *conn = rl_pool_get (node->pool, 0, &reused, error);
  redisReply *reply = NULL;

  if (conn == NULL)
    return FALSE;
  for (gsize i = 0; i < G_N_ELEMENTS (scripts); i++)
    {
      const char *load[] = { "SCRIPT", "LOAD", scripts[i]->text };
      rl_conn_append (conn, 3, load);
    }
  rl_conn_append (conn, 1, ping);
  for (gsize i = 0; i <= G_N_ELEMENTS (scripts); i++)
    {
      if (!rl_conn_get_reply (conn, &reply))
        {
          g_autofree char *what = g_strdup_printf ("Checking the Redis server at %s", node->name);
          rl_set_error_from_conn (error, conn, what);
          rl_pool_put (node->pool, conn);
          return FALSE;
        }
      if (i < G_N_ELEMENTS (scripts))
        {
          if (reply->type == REDIS_REPLY_ERROR)
            rl_debug ("SCRIPT LOAD refused (%s); scripts will be sent by EVAL", reply->str);
          freeReplyObject (reply);
        }
    }
  rl_pool_put (node->pool, conn);
  RL_ATOMIC_ADD (self->parent.ctx->stats->round_trips, 1);
  RL_ATOMIC_ADD (self->parent.ctx->stats->commands, G_N_ELEMENTS (scripts) + 1);
  if (reply->type == REDIS_REPLY_ERROR)
    {
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_REDIS,
                   "Redis at %s refused PING: %s", node->name, reply->str);
      freeReplyObject (reply);
      return FALSE;
    }
  freeReplyObject (reply);
  return TRUE;
}

/* The topology says the deployment changed (a failover): waiters and the watchdog are
 * told that any lease may have gone (the registry then checks every held lease at
 * once), and the subscription moves to the new master when it must. */
static void
on_topology_changed (gpointer user_data, gboolean resubscribe)
{
  RlRedisStore *self = user_data;

  if (resubscribe)
    {
      rl_redis_count_doubtful_releases (self);
      rl_notifier_restart (self->notifier);
    }
  if (self->shard != NULL)
    rl_shard_notifier_restart (self->shard);
  self->parent.released (NULL, TRUE, self->parent.released_data);
}

RlStore *
rl_redis_store_open (const char *url, const char *registry_key, const char *client_id,
                     RlStoreContext *ctx, RlStoreReleasedFunc released, gpointer released_data,
                     GError **error)
{
  RlUrl parsed;
  RlRedisStore *self;
  g_autoptr (GPtrArray) masters = NULL;

  if (!rl_url_parse (url, &parsed, error))
    return NULL;

  self = g_new0 (RlRedisStore, 1);
  rl_store_init (&self->parent, &rl_redis_vtable, registry_key, client_id, ctx, released,
                 released_data);
  self->channel_prefix = g_strconcat (registry_key, "-channel:", NULL);
  self->forced_channel = g_strconcat (registry_key, "-forced", NULL);
  self->legacy_channel = g_strconcat (registry_key, "-channel", NULL);
  rl_redis_script_init (&self->acquire, acquire_script);
  rl_redis_script_init (&self->release, release_script);
  self->release.once = TRUE;
  rl_redis_script_init (&self->renew, renew_script);
  rl_redis_script_init (&self->fenced_acquire, fenced_acquire_script);
  rl_redis_script_init (&self->acquire_all, acquire_all_script);
  rl_redis_script_init (&self->queued_acquire, queued_acquire_script);
  rl_redis_script_init (&self->queued_release, queued_release_script);
  self->queued_release.once = TRUE;
  self->grant_prefix = g_strconcat (registry_key, "-grant:", NULL);
  rl_redis_script_init (&self->force_release, force_release_script);
  self->force_release.once = TRUE;
  rl_redis_script_init (&self->waits, rl_redis_waits_script);
  self->slotted = parsed.kind == RL_TOPOLOGY_CLUSTER;
  self->sentinel = parsed.kind == RL_TOPOLOGY_SENTINEL;
  rl_mutex_init (&self->recent_mutex);
  self->topology = rl_topology_open (&parsed, ctx, on_topology_changed, self, error);
  rl_url_clear (&parsed);
  if (self->topology == NULL)
    {
      rl_store_free (&self->parent);
      return NULL;
    }
  self->pattern = rl_redis_glob_escape (self->channel_prefix);
  self->key_prefix = g_strconcat (registry_key, ":", NULL);
  /* Key tracking reports the keys of the node it runs on only: on a Cluster the one
   * subscriber would hear of a fraction of them, so waiters there rely on
   * notifications and TTLs alone. */
  self->notifier = rl_notifier_new (&self->parent, self->topology, self->pattern,
                                    self->forced_channel, self->legacy_channel, self->key_prefix,
                                    self->slotted ? NULL : self->key_prefix);
  if (self->slotted)
    self->shard = rl_shard_notifier_new (&self->parent, self->topology, self->channel_prefix);

  masters = self->topology->vt->masters (self->topology, error);
  for (guint i = 0; masters != NULL && i < masters->len; i++)
    if (!check_node (self, g_ptr_array_index (masters, i), error))
      g_clear_pointer (&masters, g_ptr_array_unref);
  if (masters == NULL)
    {
      rl_store_free (&self->parent);
      return NULL;
    }
  return &self->parent;
}
