/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* async-pool.c: the registry's bounded worker pool for asynchronous calls (see
 * async-pool.h for what a job is).
 *
 * The pool is made of pthread mutexes and condition variables (sync.h) rather than
 * GThreadPool: GLib's own locks are invisible to ThreadSanitizer, these are not. It is
 * reference-counted: the registry holds one reference until it is freed (registry.c
 * calls async_pool_release through registry->async_pool_release), each running worker
 * one, so a worker whose job drops the registry's last reference still finds its pool.
 */
#include "config.h"

#include "async-pool.h"

typedef struct
{
  gint ref_count;    /* atomic */
  RlMutex mutex;     /* guards the rest */
  RlCond cond;       /* jobs queued, a lane freed, or stop */
  GQueue jobs;       /* RlAsyncJob */
  GHashTable *lanes; /* job->lane -> Lane, while it has jobs queued or running */
  guint threads;     /* running */
  guint starting;    /* of them, started and not yet looking for a job */
  guint idle;        /* waiting for a job */
  gboolean stop;     /* the registry is gone: idle workers leave at once */
} RlAsyncPool;

/* The jobs of one lane. */
typedef struct
{
  guint queued;
  guint running; /* at most RL_ASYNC_THREADS */
} Lane;

static Lane *
lane_of (RlAsyncPool *pool, gconstpointer key)
{
  Lane *lane = g_hash_table_lookup (pool->lanes, key);

  if (lane == NULL)
    {
      lane = g_new0 (Lane, 1);
      g_hash_table_insert (pool->lanes, (gpointer) key, lane);
    }
  return lane;
}

static void
lane_drop_if_empty (RlAsyncPool *pool, gconstpointer key, Lane *lane)
{
  if (lane->queued == 0 && lane->running == 0)
    g_hash_table_remove (pool->lanes, key);
}

/* The first queued job whose lane has room, taken off the queue and counted as
 * running; NULL: none. */
static RlAsyncJob *
pop_runnable (RlAsyncPool *pool)
{
  for (GList *l = pool->jobs.head; l != NULL; l = l->next)
    {
      RlAsyncJob *job = l->data;
      Lane *lane = lane_of (pool, job->lane);
      if (lane->running < RL_ASYNC_THREADS)
        {
          g_queue_delete_link (&pool->jobs, l);
          lane->queued--;
          lane->running++;
          return job;
        }
    }
  return NULL;
}

/* How many queued jobs could start now, each lane up to its room (a job of a full
 * lane waits for a worker of that lane to finish, which takes it next). */
static guint
runnable_count (RlAsyncPool *pool)
{
  GHashTableIter iter;
  gpointer value;
  guint n = 0;

  g_hash_table_iter_init (&iter, pool->lanes);
  while (g_hash_table_iter_next (&iter, NULL, &value))
    {
      Lane *lane = value;
      n += MIN (lane->queued, RL_ASYNC_THREADS - lane->running);
    }
  return n;
}

static void
async_pool_unref (RlAsyncPool *pool)
{
  if (!g_atomic_int_dec_and_test (&pool->ref_count))
    return;
  g_assert (pool->jobs.length == 0);
  g_hash_table_unref (pool->lanes);
  rl_cond_clear (&pool->cond);
  rl_mutex_clear (&pool->mutex);
  g_free (pool);
}

static gpointer
pool_thread (gpointer data)
{
  RlAsyncPool *pool = data;

  rl_thread_set_name ("redislock-async");
  rl_mutex_lock (&pool->mutex);
  pool->starting--;
  for (;;)
    {
      RlAsyncJob *job = pop_runnable (pool);
      if (job != NULL)
        {
          gconstpointer key = job->lane;
          Lane *lane;
          rl_mutex_unlock (&pool->mutex);
          job->run (job); /* the job may be freed from here on */
          rl_mutex_lock (&pool->mutex);
          lane = lane_of (pool, key);
          lane->running--;
          lane_drop_if_empty (pool, key, lane);
          /* A job of this lane may have waited for the room just made; this worker
           * looks first, an idle one too. */
          if (pool->idle > 0 && pool->jobs.length > 0)
            rl_cond_broadcast (&pool->cond);
          continue;
        }
      if (pool->stop)
        break;
      pool->idle++;
      rl_cond_wait_until (&pool->cond, &pool->mutex,
                          g_get_monotonic_time () + RL_ASYNC_IDLE_MS * 1000);
      pool->idle--;
      if (runnable_count (pool) == 0)
        break;
    }
  pool->threads--;
  rl_mutex_unlock (&pool->mutex);
  async_pool_unref (pool);
  return NULL;
}

/* The registry is freed: its reference goes, idle workers leave. */
static void
async_pool_release (gpointer data)
{
  RlAsyncPool *pool = data;

  rl_mutex_raise (&pool->mutex, &pool->cond, &pool->stop);
  async_pool_unref (pool);
}

/* The pool of @registry, made on first use. */
static RlAsyncPool *
registry_pool (RedisLockRegistry *registry)
{
  RlAsyncPool *pool = g_atomic_pointer_get (&registry->async_pool);

  if (G_LIKELY (pool != NULL))
    return pool;
  pool = g_new0 (RlAsyncPool, 1);
  pool->ref_count = 1;
  rl_mutex_init (&pool->mutex);
  rl_cond_init (&pool->cond);
  g_queue_init (&pool->jobs);
  pool->lanes = g_hash_table_new_full (g_direct_hash, g_direct_equal, NULL, g_free);
  /* Set before the pool is: whoever sees the pool sees how to release it. */
  registry->async_pool_release = async_pool_release;
  if (!g_atomic_pointer_compare_and_exchange (&registry->async_pool, NULL, pool))
    {
      async_pool_unref (pool);
      pool = g_atomic_pointer_get (&registry->async_pool);
    }
  return pool;
}

void
rl_async_pool_push (RedisLockRegistry *registry, RlAsyncJob *job, const char *key)
{
  RlAsyncPool *pool = registry_pool (registry);
  RlStore *store = registry->store;
  gconstpointer lane = store->vt->lane != NULL ? store->vt->lane (store, key) : NULL;
  gboolean start;

  RL_ATOMIC_SET (job->queued_at, g_get_monotonic_time ());
  rl_mutex_lock (&pool->mutex);
  job->lane = lane;
  g_queue_push_tail (&pool->jobs, job);
  lane_of (pool, lane)->queued++;
  start = pool->idle + pool->starting < runnable_count (pool)
          && pool->threads < RL_ASYNC_MAX_THREADS;
  if (start)
    {
      pool->threads++;
      pool->starting++;
      g_atomic_int_inc (&pool->ref_count);
    }
  else
    rl_cond_signal (&pool->cond);
  rl_mutex_unlock (&pool->mutex);
  if (start)
    {
      g_autoptr (GError) error = NULL;
      GThread *thread = g_thread_try_new ("redislock-async", pool_thread, pool, &error);
      if (thread != NULL)
        g_thread_unref (thread);
      else
        {
          /* The threads already running will take the job, or, with none, it waits
           * for the next push. */
          g_warning ("redislock: cannot start a worker for asynchronous calls: %s",
                     error->message);
          rl_mutex_lock (&pool->mutex);
          pool->threads--;
          pool->starting--;
          rl_mutex_unlock (&pool->mutex);
          async_pool_unref (pool);
        }
    }
}

gboolean
rl_async_job_late (const RlAsyncJob *job, const RlAcquire *acq, gboolean bounded)
{
  return acq->attempts == 0 && bounded && g_get_monotonic_time () >= acq->deadline
         && RL_ATOMIC_GET (job->queued_at) < acq->deadline;
}
