/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* common-store.c: the test helpers that look at the store from outside, whichever it
 * is (one server, a Cluster, a quorum of servers, memory://): a key's owner, TTL and
 * existence, set and deleted behind the library's back; split from common.c, see
 * common.h for what each is for. As there, everything asserts instead of returning
 * errors.
 */
#include "config.h"

#include "common.h"

#include <string.h>

/* --- The store, seen from outside, on either store ---------------------------------- */

/* On Redis: takes the fixture's raw connection for the calling thread and returns it
 * (give it back with redis_end()). On a cluster: a new connection to the master that
 * serves @key, closed by redis_end(). On the memory store: NULL. */
static redisContext *
redis_begin (TestFixture *fixture, const char *key)
{
  g_assert_nonnull (fixture->url);
  if (fixture->store == TEST_STORE_CLUSTER)
    return test_cluster_connect_for_key (fixture->cluster, key);
  if (fixture->store == TEST_STORE_MEMORY)
    {
      g_assert_nonnull (fixture->memory_name);
      return NULL;
    }
  g_assert_nonnull (fixture->redis);
  pthread_mutex_lock (&fixture->mutex);
  return fixture->redis;
}

static void
redis_end (TestFixture *fixture, redisContext *redis)
{
  if (fixture->store == TEST_STORE_CLUSTER)
    redisFree (redis);
  else
    pthread_mutex_unlock (&fixture->mutex);
}

/* A new raw connection to quorum node @i. */
static redisContext *
quorum_node (TestFixture *fixture, guint i)
{
  return test_redis_connect (fixture->nodes[i]);
}

/* Quorum: the value a majority of the nodes holds for @key, with the shortest TTL
 * among them in *pttl (-2 and NULL when no majority holds one value). */
static char *
quorum_get (TestFixture *fixture, const char *key, gint64 *pttl)
{
  char *values[TEST_QUORUM_NODES];
  gint64 pttls[TEST_QUORUM_NODES];
  char *found = NULL;

  *pttl = -2;
  for (guint i = 0; i < TEST_QUORUM_NODES; i++)
    {
      redisContext *c = quorum_node (fixture, i);
      values[i] = test_redis_get (c, key);
      pttls[i] = test_redis_pttl (c, key);
      redisFree (c);
    }
  for (guint i = 0; i < TEST_QUORUM_NODES && found == NULL; i++)
    {
      guint count = 0;
      gint64 least = G_MAXINT64;
      for (guint k = 0; values[i] != NULL && k < TEST_QUORUM_NODES; k++)
        if (g_strcmp0 (values[i], values[k]) == 0)
          {
            count++;
            least = MIN (least, pttls[k] < 0 ? G_MAXINT64 - 1 : pttls[k]);
          }
      if (count > TEST_QUORUM_NODES / 2)
        {
          found = g_strdup (values[i]);
          *pttl = least == G_MAXINT64 - 1 ? -1 : least;
        }
    }
  for (guint i = 0; i < TEST_QUORUM_NODES; i++)
    g_free (values[i]);
  return found;
}

/* Quorum: runs the integer command @format on @key on every node; the sum. */
static long long
quorum_integer (TestFixture *fixture, const char *format, const char *key)
{
  long long sum = 0;

  for (guint i = 0; i < TEST_QUORUM_NODES; i++)
    {
      redisContext *c = quorum_node (fixture, i);
      sum += test_redis_integer (c, format, key, strlen (key));
      redisFree (c);
    }
  return sum;
}

char *
test_store_get_owner (TestFixture *fixture, const char *key)
{
  redisContext *redis;
  char *owner;
  gint64 pttl;

  if (fixture->store == TEST_STORE_QUORUM)
    return quorum_get (fixture, key, &pttl);
  redis = redis_begin (fixture, key);

  if (redis == NULL)
    return redis_lock_memory_store_get_owner (fixture->memory_name, key);
  owner = test_redis_get (redis, key);
  redis_end (fixture, redis);
  return owner;
}

gint64
test_store_get_pttl (TestFixture *fixture, const char *key)
{
  redisContext *redis;
  gint64 pttl;

  if (fixture->store == TEST_STORE_QUORUM)
    {
      g_free (quorum_get (fixture, key, &pttl));
      return pttl;
    }
  redis = redis_begin (fixture, key);

  if (redis == NULL)
    return redis_lock_memory_store_get_pttl (fixture->memory_name, key);
  pttl = test_redis_pttl (redis, key);
  redis_end (fixture, redis);
  return pttl;
}

gboolean
test_store_exists (TestFixture *fixture, const char *key)
{
  redisContext *redis;
  long long n;

  if (fixture->store == TEST_STORE_QUORUM)
    return quorum_integer (fixture, "EXISTS %b", key) > 0;
  redis = redis_begin (fixture, key);

  if (redis == NULL)
    return redis_lock_memory_store_get_pttl (fixture->memory_name, key) != -2;
  n = test_redis_integer (redis, "EXISTS %b", key, strlen (key));
  redis_end (fixture, redis);
  g_assert_cmpint (n, >=, 0);
  g_assert_cmpint (n, <=, 1);
  return n == 1;
}

gboolean
test_store_delete (TestFixture *fixture, const char *key)
{
  redisContext *redis;
  long long n;

  if (fixture->store == TEST_STORE_QUORUM)
    return quorum_integer (fixture, "DEL %b", key) > 0;
  redis = redis_begin (fixture, key);

  if (redis == NULL)
    return redis_lock_memory_store_expire (fixture->memory_name, key);
  n = test_redis_integer (redis, "DEL %b", key, strlen (key));
  redis_end (fixture, redis);
  return n == 1;
}

void
test_store_set_owner (TestFixture *fixture, const char *key, const char *owner, gint64 ttl_ms)
{
  redisContext *redis;
  g_autofree char *ok = NULL;

  g_assert_cmpint (ttl_ms, !=, 0);
  if (fixture->store == TEST_STORE_QUORUM)
    {
      guint set = 0;
      for (guint i = 0; i < TEST_QUORUM_NODES; i++)
        {
          redisContext *c = quorum_node (fixture, i);
          g_autofree char *reply
              = ttl_ms < 0 ? test_redis_string (c, "SET %b %s XX", key, strlen (key), owner)
                           : test_redis_string (c, "SET %b %s PX %lld XX", key, strlen (key),
                                                owner, (long long) ttl_ms);
          set += g_strcmp0 (reply, "OK") == 0;
          redisFree (c);
        }
      /* The key existed on a majority. */
      g_assert_cmpuint (set, >, TEST_QUORUM_NODES / 2);
      return;
    }
  redis = redis_begin (fixture, key);
  if (redis == NULL)
    {
      g_assert_true (redis_lock_memory_store_steal (fixture->memory_name, key, owner, ttl_ms));
      return;
    }
  if (ttl_ms < 0)
    ok = test_redis_string (redis, "SET %b %s XX", key, strlen (key), owner);
  else
    ok = test_redis_string (redis, "SET %b %s PX %lld XX", key, strlen (key), owner,
                            (long long)ttl_ms);
  redis_end (fixture, redis);
  /* nil: the key did not exist. */
  g_assert_cmpstr (ok, ==, "OK");
}

gboolean
test_value_is_of (const char *value, RedisLockRegistry *registry)
{
  const char *id = redis_lock_registry_get_client_id (registry);
  gsize len = strlen (id);
  const char *serial;

  if (value == NULL || strncmp (value, id, len) != 0 || value[len] != ':')
    return FALSE;
  serial = value + len + 1;
  if (*serial == '\0')
    return FALSE;
  for (const char *p = serial; *p != '\0'; p++)
    if (!g_ascii_isdigit (*p))
      return FALSE;
  return TRUE;
}

void
test_assert_held_by (TestFixture *fixture, const char *name, RedisLockRegistry *owner,
                     gint64 max_pttl_ms)
{
  g_autofree char *key = test_lock_key (name);
  g_autofree char *value = test_store_get_owner (fixture, key);
  gint64 pttl = test_store_get_pttl (fixture, key);

  test_assert_value_of (value, owner);
  g_assert_cmpint (pttl, >, 0);
  g_assert_cmpint (pttl, <=, max_pttl_ms);
}

void
test_assert_free (TestFixture *fixture, const char *name)
{
  g_autofree char *key = test_lock_key (name);

  g_assert_false (test_store_exists (fixture, key));
}
