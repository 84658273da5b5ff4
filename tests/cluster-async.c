/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* cluster-async.c: asynchronous calls of one registry on a Redis Cluster whose
 * masters fare differently.
 *
 * A registry's asynchronous calls run their requests on the registry's pool of
 * workers (src/async-pool.c); a request waits on the master of its key's slot. One
 * master that stopped answering (SIGSTOP, no failover: the cluster has no replicas
 * and serves the other slots without full coverage) must tie up the workers of its
 * own master only: a call for a key of a healthy master of the same registry still
 * meets its wait, however many calls are queued on the frozen one. Its own program,
 * since it starts and freezes a cluster of its own.
 */
#include "config.h"

#include <string.h>

#include "common.h"
#include "cluster-common.h"

#define REGISTRY_KEY TEST_REGISTRY_KEY

/* What one redis_lock_lock_async() call's callback saw. */
typedef struct
{
  RedisLock *lock;
  gboolean done;
  gboolean result;
  GError *error;
  gint64 done_ms;
} Call;

static void
on_locked (GObject *source, GAsyncResult *result, gpointer data)
{
  Call *call = data;

  call->result = redis_lock_lock_finish (call->lock, result, &call->error);
  call->done_ms = test_now_ms ();
  call->done = TRUE;
}

static gboolean
tick (gpointer data)
{
  return G_SOURCE_CONTINUE;
}

/* Iterates the default main context until *@done or @timeout_ms passed; whether
 * *@done. */
static gboolean
iterate_until (const gboolean *done, gint64 timeout_ms)
{
  gint64 end = g_get_monotonic_time () + timeout_ms * 1000;
  guint source = g_timeout_add (5, tick, NULL);

  while (!*done && g_get_monotonic_time () < end)
    g_main_context_iteration (NULL, TRUE);
  g_source_remove (source);
  return *done;
}

/* No master of @cluster needs every slot served to answer for its own. */
static void
allow_partial_coverage (RedisLockTestCluster *cluster)
{
  for (guint i = 0; i < redis_lock_test_cluster_get_n_nodes (cluster); i++)
    {
      redisContext *c = node_connect (cluster, i);
      freeReplyObject (test_redis_command (c, "CONFIG SET cluster-require-full-coverage no"));
      redisFree (c);
    }
}

#define FROZEN_CALLS 16

static void
test_frozen_master_isolated (void)
{
  g_autoptr (RedisLockTestCluster) cluster = redis_lock_test_cluster_new_or_skip (3, 0);
  g_autoptr (RedisLockRegistry) registry = NULL;
  g_autoptr (RedisLock) healthy = NULL;
  g_autofree char *healthy_name = NULL;
  RedisLock *frozen[FROZEN_CALLS];
  Call calls[FROZEN_CALLS] = { 0 }, call = { 0 };
  gint64 t0;

  g_test_summary ("With one Cluster master frozen (no failover) and 16 lock_async calls of a "
                  "registry queued on it, lock_async (wait 2000 ms) of the same registry for a "
                  "free key of a healthy master completes TRUE within its wait");
  if (cluster == NULL)
    return;
  allow_partial_coverage (cluster);
  registry = test_registry_new_on (redis_lock_test_cluster_get_url (cluster));
  redis_lock_registry_set_command_timeout_ms (registry, 5000);
  healthy_name = name_on (cluster, 1, "healthy", 0);
  healthy = test_obtain (registry, healthy_name);

  redis_lock_test_cluster_pause_node (cluster, 0);
  for (guint i = 0; i < FROZEN_CALLS; i++)
    {
      g_autofree char *name = name_on (cluster, 0, "frozen", i);
      frozen[i] = calls[i].lock = test_obtain (registry, name);
      redis_lock_lock_async (frozen[i], 8000, 0, NULL, on_locked, &calls[i]);
    }
  t0 = test_now_ms ();
  call.lock = healthy;
  redis_lock_lock_async (healthy, 2000, 0, NULL, on_locked, &call);
  g_assert_true (iterate_until (&call.done, 10000));
  g_test_message ("the call for the healthy master completed after %" G_GINT64_FORMAT " ms",
                  call.done_ms - t0);
  g_assert_no_error (call.error);
  g_assert_true (call.result);
  g_assert_cmpint (call.done_ms - t0, <, 2000);
  test_unlock_ok (healthy);

  redis_lock_test_cluster_resume_node (cluster, 0);
  for (guint i = 0; i < FROZEN_CALLS; i++)
    {
      g_assert_true (iterate_until (&calls[i].done, 30000));
      /* Taken once the master answered again, or not; its lease may have run out
       * while the master stood frozen, so the unlock's answer is not checked. */
      if (calls[i].result)
        redis_lock_unlock (frozen[i], NULL);
      g_clear_error (&calls[i].error);
      redis_lock_unref (frozen[i]);
    }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/cluster/async/frozen-master-isolated", test_frozen_master_isolated);
  return g_test_run ();
}
