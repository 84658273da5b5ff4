/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* quorum-store.c: the store of redis_lock_registry_new_quorum(), the Redlock algorithm
 * over N independent masters.
 *
 * The store holds N child stores (any single-master URL, opened with rl_store_open())
 * and sends every request to all of them at once; a lease is ours when a majority
 * (N/2 + 1) took it and the time the request took still leaves it a validity of
 * TTL − elapsed − drift (drift = TTL/100 + 2 ms). Anything short of that releases the
 * lease again on all N nodes (also those that did not answer: their request may have
 * arrived), so a failed attempt leaves nothing behind. Renewals and releases count a
 * lease as kept while a majority confirms it, and as lost only when a majority says
 * it is gone; in between the answer is "unconfirmed" (RL_LEASE_ERROR) and leases.c
 * decides by its confirmation time.
 *
 * Fan-out: each child has a few worker threads of its own (a shared GThreadPool
 * keeps too few idle threads and would create one per request), so a request to N
 * nodes costs one round trip, not N, and a paused node ties up only its own workers;
 * the first child's acquisition, bounded by the per-node timeout, runs in the calling
 * thread, which would only wait otherwise. The caller waits on a job (a pthread mutex and condition, which ThreadSanitizer sees)
 * until every node answered, or a deadline passed: the per-node timeout for acquire
 * (min(50 ms, TTL/20), or the call's bound when smaller), a short grace after a
 * majority answered for the others. Requests still running then finish in the
 * background and keep the job alive through its reference count; freeing the store
 * waits for them. A node that could not be opened is retried from its worker (at most
 * once a second) and counts as not answering until then.
 *
 * Fencing has no meaning over independent counters (API.md, "Quorum"): the fenced
 * calls fail here, and the registry refuses to turn fencing on. Requests on several
 * leases fall back to one lease at a time.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "store.h"
#include "sync.h"
#include "url.h"

#define QUORUM_NODE_TIMEOUT_MS 50   /* the per-node bound of acquire, at most */
#define QUORUM_SLACK_US 10000       /* what a waiting caller adds to a child's own bound */
#define QUORUM_REOPEN_US G_USEC_PER_SEC
#define QUORUM_POOL_THREADS 4

typedef struct _RlQuorumStore RlQuorumStore;

typedef struct
{
  RlQuorumStore *self;
  char *url;
  /* The child's workers: a queue of jobs under a pthread mutex, which
   * ThreadSanitizer sees (a GThreadPool hands jobs over through futexes it cannot). */
  RlMutex queue_mutex; /* guards queue and stopping */
  RlCond queue_cond;
  GQueue queue;
  gboolean stopping;
  GThread *workers[QUORUM_POOL_THREADS];
  RlMutex mutex; /* guards the three fields below */
  RlStore *store;
  gboolean opening;
  gint64 last_try_us;
} QuorumChild;

struct _RlQuorumStore
{
  RlStore parent;
  guint n;
  guint majority;
  QuorumChild *children;
};

typedef enum
{
  OP_OPEN,
  OP_ACQUIRE,
  OP_RELEASE,
  OP_RENEW,
  OP_RENEW_BATCH,
  OP_INSPECT,
  OP_LIST,
  OP_WATCH,
} QuorumOp;

/* What one child answered. */
typedef struct
{
  RlLeaseResult result;
  gint64 pttl_ms;
  gboolean others;
  gboolean ok;           /* renew_batch, inspect, list, watch, open */
  guint round_trips;     /* renew_batch */
  RlLeaseResult *results; /* renew_batch */
  char *value;           /* inspect */
  GArray *entries;       /* list */
  GError *error;
} QuorumReply;

typedef struct
{
  gint refs; /* atomic: the caller and each request not finished */
  RlQuorumStore *self;
  QuorumOp op;
  RlMutex m; /* guards done, answered, finished */
  RlCond c;
  guint done;
  guint answered;
  gboolean *finished;
  QuorumReply *replies;
  /* the request, copied so it outlives the caller */
  char *key;
  char *value;
  gint64 ttl_ms;
  gint64 timeout_ms;
  guint count;
  char **keys;
  char **values;
  gint64 *ttls;
} QuorumJob;

/* Children --------------------------------------------------------------------- */

static void
child_released (const char *key, gpointer user_data)
{
  RlQuorumStore *self = user_data;

  self->parent.released (key, self->parent.released_data);
}

/* The child's store, opened now if it is not yet and the last attempt is a second
 * old (@force: whatever its age). NULL with @error when it is not available. */
static RlStore *
child_get (QuorumChild *child, gboolean force, GError **error)
{
  RlQuorumStore *self = child->self;
  RlStore *store;
  gint64 now = g_get_monotonic_time ();

  rl_mutex_lock (&child->mutex);
  store = child->store;
  if (store != NULL || child->opening
      || (!force && child->last_try_us != 0 && now - child->last_try_us < QUORUM_REOPEN_US))
    {
      rl_mutex_unlock (&child->mutex);
      if (store == NULL)
        g_set_error_literal (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION,
                             "not connected");
      return store;
    }
  child->opening = TRUE;
  child->last_try_us = now;
  rl_mutex_unlock (&child->mutex);

  store = rl_store_open (child->url, self->parent.registry_key, self->parent.client_id,
                         self->parent.ctx, child_released, self, error);
  rl_mutex_lock (&child->mutex);
  child->store = store;
  child->opening = FALSE;
  rl_mutex_unlock (&child->mutex);
  return store;
}

static RlStore *
child_peek (QuorumChild *child)
{
  RlStore *store;

  rl_mutex_lock (&child->mutex);
  store = child->store;
  rl_mutex_unlock (&child->mutex);
  return store;
}

/* Jobs ------------------------------------------------------------------------- */

static QuorumJob *
job_new (RlQuorumStore *self, QuorumOp op)
{
  QuorumJob *job = g_new0 (QuorumJob, 1);

  job->refs = 1;
  job->self = self;
  job->op = op;
  rl_mutex_init (&job->m);
  rl_cond_init (&job->c);
  job->finished = g_new0 (gboolean, self->n);
  job->replies = g_new0 (QuorumReply, self->n);
  return job;
}

static void
job_unref (QuorumJob *job)
{
  if (!g_atomic_int_dec_and_test (&job->refs))
    return;
  for (guint i = 0; i < job->self->n; i++)
    {
      QuorumReply *r = &job->replies[i];
      g_clear_error (&r->error);
      g_free (r->results);
      g_free (r->value);
      if (r->entries != NULL)
        {
          for (guint k = 0; k < r->entries->len; k++)
            {
              RlStoreEntry *e = &g_array_index (r->entries, RlStoreEntry, k);
              g_free (e->key);
              g_free (e->value);
            }
          g_array_unref (r->entries);
        }
    }
  g_free (job->finished);
  g_free (job->replies);
  g_free (job->key);
  g_free (job->value);
  g_strfreev (job->keys);
  g_strfreev (job->values);
  g_free (job->ttls);
  rl_cond_clear (&job->c);
  rl_mutex_clear (&job->m);
  g_free (job);
}

/* Runs the request of the job @data on the child @user_data (in one of the child's
 * workers, or inline). */
static void
task_run (gpointer data, gpointer user_data)
{
  QuorumJob *job = data;
  QuorumChild *child = user_data;
  guint index = (guint) (child - child->self->children);
  QuorumReply r = { .result = RL_LEASE_ERROR };
  gboolean answered = FALSE;
  RlStore *store;


  store = child_get (child, job->op == OP_OPEN, &r.error);
  if (store != NULL)
    switch (job->op)
      {
      case OP_OPEN:
        r.ok = answered = TRUE;
        break;
      case OP_ACQUIRE:
        r.result = store->vt->acquire (store, job->key, job->value, job->ttl_ms, job->timeout_ms,
                                       NULL, NULL, &r.pttl_ms, &r.error);
        answered = r.result == RL_LEASE_OK || r.result == RL_LEASE_HELD;
        break;
      case OP_RELEASE:
        r.result = store->vt->release (store, job->key, job->value, 0, &r.others, &r.error);
        answered = r.result == RL_LEASE_OK || r.result == RL_LEASE_LOST;
        break;
      case OP_RENEW:
        r.result = store->vt->renew (store, job->key, job->value, job->ttl_ms, &r.error);
        answered = r.result == RL_LEASE_OK || r.result == RL_LEASE_LOST;
        break;
      case OP_RENEW_BATCH:
        r.results = g_new0 (RlLeaseResult, job->count);
        r.ok = store->vt->renew_batch (store, job->count, (const char *const *) job->keys,
                                       (const char *const *) job->values, job->ttls, r.results,
                                       job->timeout_ms, &r.round_trips, &r.error);
        answered = r.ok;
        break;
      case OP_INSPECT:
        r.ok = store->vt->inspect (store, job->key, &r.value, &r.pttl_ms, &r.error);
        answered = r.ok || r.error == NULL;
        break;
      case OP_LIST:
        r.entries = g_array_new (FALSE, FALSE, sizeof (RlStoreEntry));
        r.ok = store->vt->list (store, r.entries, &r.error);
        answered = r.ok;
        break;
      case OP_WATCH:
        r.ok = answered = store->vt->watch (store, job->timeout_ms);
        break;
      default:
        g_assert_not_reached ();
      }

  rl_mutex_lock (&job->m);
  job->replies[index] = r;
  job->finished[index] = TRUE;
  job->done++;
  if (answered)
    job->answered++;
  rl_cond_broadcast (&job->c);
  rl_mutex_unlock (&job->m);
  job_unref (job);
}

/* Sends @job to every child. The caller filled in the request before. With
 * @inline_first, the request to the first child runs in the calling thread, which
 * would only wait otherwise (one thread hand-off less); only for requests bounded by
 * a short timeout of their own, and only when that child is open (opening it can take
 * the connect timeout). */
/* A worker of @data (a QuorumChild): runs its jobs in order until it is stopping
 * and its queue is empty. */
static gpointer
worker_main (gpointer data)
{
  QuorumChild *child = data;

  rl_mutex_lock (&child->queue_mutex);
  for (;;)
    {
      QuorumJob *job;
      while (g_queue_is_empty (&child->queue) && !child->stopping)
        rl_cond_wait_until (&child->queue_cond, &child->queue_mutex, RL_FOREVER);
      job = g_queue_pop_head (&child->queue);
      if (job == NULL)
        break;
      rl_mutex_unlock (&child->queue_mutex);
      task_run (job, child);
      rl_mutex_lock (&child->queue_mutex);
    }
  rl_mutex_unlock (&child->queue_mutex);
  return NULL;
}

static void
child_push (QuorumChild *child, QuorumJob *job)
{
  rl_mutex_lock (&child->queue_mutex);
  g_queue_push_tail (&child->queue, job);
  rl_cond_signal (&child->queue_cond);
  rl_mutex_unlock (&child->queue_mutex);
}

static void
job_start (QuorumJob *job, gboolean inline_first)
{
  RlQuorumStore *self = job->self;
  gboolean first = inline_first && child_peek (&self->children[0]) != NULL;

  g_atomic_int_add (&job->refs, (gint) self->n);
  for (guint i = first ? 1 : 0; i < self->n; i++)
    child_push (&self->children[i], job);
  if (first)
    task_run (job, &self->children[0]);
}

/* Waits until every child finished, or @end_us passed, or @grace_us passed since a
 * majority answered (@grace_us < 0: no such early end). Fills @seen with the children
 * whose reply can be read from now on. Returns the number that answered. */
static guint
job_wait (QuorumJob *job, gint64 end_us, gint64 grace_us, gboolean *seen)
{
  RlQuorumStore *self = job->self;
  gint64 majority_at = 0;
  guint answered = 0;

  rl_mutex_lock (&job->m);
  while (job->done < self->n)
    {
      gint64 now = g_get_monotonic_time (), until = end_us;
      if (grace_us >= 0 && job->answered >= self->majority)
        {
          if (majority_at == 0)
            majority_at = now;
          until = MIN (until, majority_at + grace_us);
        }
      if (now >= until)
        break;
      rl_cond_wait_until (&job->c, &job->m, until);
    }
  memcpy (seen, job->finished, self->n * sizeof *seen);
  rl_mutex_unlock (&job->m);
  for (guint i = 0; i < self->n; i++)
    if (seen[i])
      {
        QuorumReply *r = &job->replies[i];
        switch (job->op)
          {
          case OP_ACQUIRE:
            answered += r->result == RL_LEASE_OK || r->result == RL_LEASE_HELD;
            break;
          case OP_RELEASE:
          case OP_RENEW:
            answered += r->result == RL_LEASE_OK || r->result == RL_LEASE_LOST;
            break;
          case OP_INSPECT:
            answered += r->ok || r->error == NULL;
            break;
          default:
            answered += r->ok;
            break;
          }
      }
  return answered;
}

static gint64
command_end (RlQuorumStore *self, gint64 start)
{
  return start + RL_ATOMIC_GET (self->parent.ctx->command_timeout_ms) * 1000 + QUORUM_SLACK_US;
}

/* The error of fewer than a majority answering, with the first child's error. */
static void
set_no_majority (RlQuorumStore *self, QuorumJob *job, const gboolean *seen, guint answered,
                 const char *what, GError **error)
{
  const char *cause = "no answer in time";

  for (guint i = 0; i < self->n; i++)
    if (seen[i] && job->replies[i].error != NULL)
      {
        cause = job->replies[i].error->message;
        break;
      }
  g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION,
               "%s: %u of %u quorum nodes answered, a majority is %u (%s)", what, answered,
               self->n, self->majority, cause);
}

/* The vtable ------------------------------------------------------------------- */

static gboolean
refuse_fencing (const char *fence_key, GError **error)
{
  if (fence_key == NULL)
    return FALSE;
  g_set_error_literal (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID,
                       "Fencing is not available in quorum mode");
  return TRUE;
}

static int
compare_pttl (gconstpointer a, gconstpointer b)
{
  gint64 x = *(const gint64 *) a, y = *(const gint64 *) b;

  /* -1 (no expiry) sorts last */
  if (x < 0)
    x = G_MAXINT64;
  if (y < 0)
    y = G_MAXINT64;
  return x < y ? -1 : x > y;
}

static RlLeaseResult quorum_release (RlStore *store, const char *key, const char *value,
                                     gint64 keep_ttl_ms, gboolean *others, GError **error);

static RlLeaseResult
quorum_acquire (RlStore *store, const char *key, const char *value, gint64 ttl_ms,
                gint64 timeout_ms, const char *fence_key, guint64 *token, gint64 *pttl_ms,
                GError **error)
{
  RlQuorumStore *self = (RlQuorumStore *) store;
  gint64 start = g_get_monotonic_time (), node_timeout, elapsed_ms, validity_ms;
  g_autofree gboolean *seen = g_new0 (gboolean, self->n);
  g_autofree gint64 *held = g_new0 (gint64, self->n);
  guint ok = 0, n_held = 0, answered;
  gboolean others;
  QuorumJob *job;

  if (refuse_fencing (fence_key, error))
    return RL_LEASE_ERROR;
  node_timeout = MIN (QUORUM_NODE_TIMEOUT_MS, MAX (ttl_ms / 20, 1));
  if (timeout_ms > 0)
    node_timeout = MIN (node_timeout, timeout_ms);

  job = job_new (self, OP_ACQUIRE);
  job->key = g_strdup (key);
  job->value = g_strdup (value);
  job->ttl_ms = ttl_ms;
  job->timeout_ms = node_timeout;
  job_start (job, TRUE);
  answered = job_wait (job, start + node_timeout * 1000 + QUORUM_SLACK_US, -1, seen);
  elapsed_ms = (g_get_monotonic_time () - start) / 1000;
  for (guint i = 0; i < self->n; i++)
    if (seen[i] && job->replies[i].result == RL_LEASE_OK)
      ok++;
    else if (seen[i] && job->replies[i].result == RL_LEASE_HELD)
      held[n_held++] = job->replies[i].pttl_ms;

  validity_ms = ttl_ms - elapsed_ms - (ttl_ms / 100 + 2);
  if (ok >= self->majority && validity_ms > 0)
    {
      job_unref (job);
      return RL_LEASE_OK;
    }

  /* Not ours: undo it everywhere, also where no answer came (it may still arrive). */
  if (ok > 0 || answered < self->n)
    quorum_release (store, key, value, 0, &others, NULL);

  if (answered < self->majority)
    {
      set_no_majority (self, job, seen, answered, "Acquiring a quorum lease", error);
      job_unref (job);
      return RL_LEASE_ERROR;
    }
  /* Contention: the wait is bounded by the time until a majority could be free. */
  if (ok >= self->majority || n_held == 0)
    *pttl_ms = 0;
  else
    {
      guint k = self->majority > ok ? self->majority - ok : 1;
      qsort (held, n_held, sizeof *held, compare_pttl);
      *pttl_ms = held[MIN (k, n_held) - 1];
    }
  job_unref (job);
  return RL_LEASE_HELD;
}

/* One lease at a time: all or none is kept by releasing the ones taken before a held
 * one. */
static gboolean
quorum_acquire_many (RlStore *store, guint n, RlLeaseItem *items, gint64 ttl_ms,
                     gint64 timeout_ms, gboolean contended, GError **error)
{
  gint64 end = timeout_ms > 0 ? g_get_monotonic_time () + timeout_ms * 1000 : 0;
  guint i;

  for (i = 0; i < n; i++)
    {
      items[i].token = 0;
      items[i].result = RL_LEASE_SKIPPED;
    }
  for (i = 0; i < n; i++)
    {
      RlLeaseItem *item = &items[i];
      gint64 bound = 0;

      if (end != 0)
        bound = MAX ((end - g_get_monotonic_time ()) / 1000, 1);
      item->result = refuse_fencing (item->fence_key, error)
                         ? RL_LEASE_ERROR
                         : quorum_acquire (store, item->key, item->value, ttl_ms, bound, NULL,
                                           NULL, &item->pttl_ms, error);
      if (item->result == RL_LEASE_ERROR)
        return FALSE;
      if (item->result == RL_LEASE_HELD)
        {
          for (guint k = 0; k < i; k++)
            {
              gboolean others;
              quorum_release (store, items[k].key, items[k].value, 0, &others, NULL);
              items[k].result = RL_LEASE_SKIPPED;
            }
          return TRUE;
        }
    }
  return TRUE;
}

/* Runs a release or renewal of @key on all children. */
static QuorumJob *
run_single (RlQuorumStore *self, QuorumOp op, const char *key, const char *value,
            gint64 ttl_ms, gboolean *seen, guint *answered)
{
  gint64 start = g_get_monotonic_time ();
  QuorumJob *job = job_new (self, op);

  job->key = g_strdup (key);
  job->value = g_strdup (value);
  job->ttl_ms = ttl_ms;
  job_start (job, FALSE);
  *answered = job_wait (job, command_end (self, start), QUORUM_NODE_TIMEOUT_MS * 1000, seen);
  return job;
}

static RlLeaseResult
quorum_renew (RlStore *store, const char *key, const char *value, gint64 ttl_ms, GError **error)
{
  RlQuorumStore *self = (RlQuorumStore *) store;
  g_autofree gboolean *seen = g_new0 (gboolean, self->n);
  guint ok = 0, lost = 0, answered;
  QuorumJob *job = run_single (self, OP_RENEW, key, value, ttl_ms, seen, &answered);
  RlLeaseResult result;

  for (guint i = 0; i < self->n; i++)
    if (seen[i])
      {
        ok += job->replies[i].result == RL_LEASE_OK;
        lost += job->replies[i].result == RL_LEASE_LOST;
      }
  if (ok >= self->majority)
    result = RL_LEASE_OK;
  else if (lost >= self->majority)
    result = RL_LEASE_LOST;
  else
    {
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION,
                   "Renewing a quorum lease: confirmed by %u and found lost by %u of %u "
                   "nodes, a majority is %u", ok, lost, self->n, self->majority);
      result = RL_LEASE_ERROR;
    }
  job_unref (job);
  return result;
}

/* Never keeps a lease (keep_ttl_ms is ignored): keeping it on some nodes and deleting
 * it on others would leave a lease nobody holds a majority of. */
static RlLeaseResult
quorum_release (RlStore *store, const char *key, const char *value, gint64 keep_ttl_ms,
                gboolean *others, GError **error)
{
  RlQuorumStore *self = (RlQuorumStore *) store;
  g_autofree gboolean *seen = g_new0 (gboolean, self->n);
  guint ok = 0, lost = 0, answered;
  QuorumJob *job = run_single (self, OP_RELEASE, key, value, 0, seen, &answered);
  RlLeaseResult result;

  *others = FALSE;
  for (guint i = 0; i < self->n; i++)
    if (seen[i])
      {
        ok += job->replies[i].result == RL_LEASE_OK;
        lost += job->replies[i].result == RL_LEASE_LOST;
        *others = *others || job->replies[i].others;
      }
  /* LOST only when no majority can still have had it. */
  if (lost > self->n - self->majority)
    result = RL_LEASE_LOST;
  else if (ok >= self->majority || ok + lost >= self->majority)
    result = RL_LEASE_OK;
  else
    {
      set_no_majority (self, job, seen, answered, "Releasing a quorum lease", error);
      result = RL_LEASE_ERROR;
    }
  job_unref (job);
  return result;
}

static gboolean
quorum_release_many (RlStore *store, guint n, RlLeaseItem *items, GError **error)
{
  gboolean ok = TRUE;

  for (guint i = 0; i < n; i++)
    {
      g_autoptr (GError) local_error = NULL;
      items[i].result = quorum_release (store, items[i].key, items[i].value, 0, &items[i].others,
                                        &local_error);
      if (items[i].result == RL_LEASE_ERROR && ok)
        {
          ok = FALSE;
          g_propagate_error (error, g_steal_pointer (&local_error));
        }
    }
  return ok;
}

/* Per lease: OK when a majority renewed it, LOST when a majority found it gone, ERROR
 * (unconfirmed) otherwise. */
static gboolean
quorum_renew_batch (RlStore *store, guint n, const char *const *keys, const char *const *values,
                    const gint64 *ttls, RlLeaseResult *results, gint64 timeout_ms,
                    guint *round_trips, GError **error)
{
  RlQuorumStore *self = (RlQuorumStore *) store;
  gint64 start = g_get_monotonic_time (), end;
  g_autofree gboolean *seen = g_new0 (gboolean, self->n);
  QuorumJob *job;
  guint answered;

  *round_trips = 0;
  if (n == 0)
    return TRUE;
  if (timeout_ms <= 0)
    timeout_ms = RL_ATOMIC_GET (self->parent.ctx->command_timeout_ms);
  job = job_new (self, OP_RENEW_BATCH);
  job->count = n;
  job->keys = g_new0 (char *, n + 1);
  job->values = g_new0 (char *, n + 1);
  job->ttls = g_memdup2 (ttls, n * sizeof *ttls);
  for (guint i = 0; i < n; i++)
    {
      job->keys[i] = g_strdup (keys[i]);
      job->values[i] = g_strdup (values[i]);
    }
  job->timeout_ms = timeout_ms;
  job_start (job, FALSE);
  end = start + timeout_ms * 1000 + QUORUM_SLACK_US;
  answered = job_wait (job, end, QUORUM_NODE_TIMEOUT_MS * 1000, seen);
  if (answered < self->majority)
    {
      set_no_majority (self, job, seen, answered, "Renewing quorum leases", error);
      job_unref (job);
      return FALSE;
    }
  for (guint i = 0; i < self->n; i++)
    if (seen[i] && job->replies[i].ok)
      *round_trips = MAX (*round_trips, job->replies[i].round_trips);
  for (guint k = 0; k < n; k++)
    {
      guint ok = 0, lost = 0;
      for (guint i = 0; i < self->n; i++)
        if (seen[i] && job->replies[i].ok)
          {
            ok += job->replies[i].results[k] == RL_LEASE_OK;
            lost += job->replies[i].results[k] == RL_LEASE_LOST;
          }
      results[k] = ok >= self->majority     ? RL_LEASE_OK
                   : lost >= self->majority ? RL_LEASE_LOST
                                            : RL_LEASE_ERROR;
    }
  job_unref (job);
  return TRUE;
}

/* The value a majority of the nodes holds for @key, with the shortest of their TTLs. */
static gboolean
quorum_inspect (RlStore *store, const char *key, char **value, gint64 *pttl_ms, GError **error)
{
  RlQuorumStore *self = (RlQuorumStore *) store;
  g_autofree gboolean *seen = g_new0 (gboolean, self->n);
  gboolean found = FALSE;
  guint answered;
  QuorumJob *job = run_single (self, OP_INSPECT, key, NULL, 0, seen, &answered);

  if (answered < self->majority)
    {
      set_no_majority (self, job, seen, answered, "Inspecting a quorum lease", error);
      job_unref (job);
      return FALSE;
    }
  for (guint i = 0; i < self->n && !found; i++)
    {
      QuorumReply *a = &job->replies[i];
      guint count = 0;
      gint64 pttl = a->pttl_ms;

      if (!seen[i] || !a->ok)
        continue;
      for (guint k = 0; k < self->n; k++)
        {
          QuorumReply *b = &job->replies[k];
          if (seen[k] && b->ok && strcmp (a->value, b->value) == 0)
            {
              count++;
              if (compare_pttl (&b->pttl_ms, &pttl) < 0)
                pttl = b->pttl_ms;
            }
        }
      if (count >= self->majority)
        {
          *value = g_strdup (a->value);
          *pttl_ms = pttl;
          found = TRUE;
        }
    }
  job_unref (job);
  return found;
}

static gboolean
quorum_read_counter (RlStore *store, const char *fence_key, guint64 *value, GError **error)
{
  *value = 0;
  refuse_fencing (fence_key, error);
  return FALSE;
}

/* The leases a majority of the nodes hold with the same value. */
static gboolean
quorum_list (RlStore *store, GArray *entries, GError **error)
{
  RlQuorumStore *self = (RlQuorumStore *) store;
  gint64 start = g_get_monotonic_time ();
  g_autofree gboolean *seen = g_new0 (gboolean, self->n);
  g_autoptr (GHashTable) counts = NULL;
  QuorumJob *job = job_new (self, OP_LIST);
  guint answered;

  job_start (job, FALSE);
  answered = job_wait (job, command_end (self, start), QUORUM_NODE_TIMEOUT_MS * 1000, seen);
  if (answered < self->majority)
    {
      set_no_majority (self, job, seen, answered, "Listing quorum leases", error);
      job_unref (job);
      return FALSE;
    }
  /* "key\nvalue" -> the first entry seen and how many nodes have it */
  counts = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  for (guint i = 0; i < self->n; i++)
    {
      GArray *list = job->replies[i].entries;
      if (!seen[i] || !job->replies[i].ok)
        continue;
      for (guint k = 0; k < list->len; k++)
        {
          RlStoreEntry *e = &g_array_index (list, RlStoreEntry, k);
          char *id = g_strconcat (e->key, "\n", e->value, NULL);
          guint count = GPOINTER_TO_UINT (g_hash_table_lookup (counts, id)) + 1;
          g_hash_table_replace (counts, id, GUINT_TO_POINTER (count));
          if (count == self->majority)
            {
              RlStoreEntry copy = { g_strdup (e->key), g_strdup (e->value), e->pttl_ms };
              g_array_append_val (entries, copy);
            }
        }
    }
  job_unref (job);
  return TRUE;
}

/* Confirmed when notifications run on a majority: a holder's release reaches a
 * majority, so at least one of them wakes this store. */
static gboolean
quorum_watch (RlStore *store, gint64 timeout_ms)
{
  RlQuorumStore *self = (RlQuorumStore *) store;
  g_autofree gboolean *seen = NULL;
  gint64 start = g_get_monotonic_time ();
  guint running = 0;
  QuorumJob *job;

  for (guint i = 0; i < self->n; i++)
    {
      RlStore *child = child_peek (&self->children[i]);
      if (child != NULL && child->vt->watch (child, 0))
        running++;
    }
  if (running >= self->majority || timeout_ms <= 0)
    return running >= self->majority;

  seen = g_new0 (gboolean, self->n);
  job = job_new (self, OP_WATCH);
  job->timeout_ms = timeout_ms;
  job_start (job, FALSE);
  running = job_wait (job, start + timeout_ms * 1000 + QUORUM_SLACK_US, 0, seen);
  job_unref (job);
  return running >= self->majority;
}

static void
quorum_close (RlStore *store)
{
  RlQuorumStore *self = (RlQuorumStore *) store;

  for (guint i = 0; i < self->n; i++)
    {
      RlStore *child = child_peek (&self->children[i]);
      if (child != NULL)
        child->vt->close (child);
    }
}

/* rl_store_free() has already freed the common fields: the children's requests still
 * running use only their own store's. */
static void
quorum_free (RlStore *store)
{
  RlQuorumStore *self = (RlQuorumStore *) store;

  for (guint i = 0; i < self->n; i++)
    {
      QuorumChild *child = &self->children[i];
      rl_mutex_lock (&child->queue_mutex);
      child->stopping = TRUE;
      rl_cond_broadcast (&child->queue_cond);
      rl_mutex_unlock (&child->queue_mutex);
    }
  for (guint i = 0; i < self->n; i++)
    for (guint k = 0; k < QUORUM_POOL_THREADS; k++)
      g_thread_join (self->children[i].workers[k]);
  for (guint i = 0; i < self->n; i++)
    {
      QuorumChild *child = &self->children[i];
      if (child->store != NULL)
        rl_store_free (child->store);
      rl_mutex_clear (&child->mutex);
      rl_mutex_clear (&child->queue_mutex);
      rl_cond_clear (&child->queue_cond);
      g_free (child->url);
    }
  g_free (self->children);
  g_free (self);
}

static const RlStoreVTable quorum_store_vtable = {
  .acquire = quorum_acquire,
  .acquire_many = quorum_acquire_many,
  .renew = quorum_renew,
  .release = quorum_release,
  .release_many = quorum_release_many,
  .renew_batch = quorum_renew_batch,
  .inspect = quorum_inspect,
  .read_counter = quorum_read_counter,
  .list = quorum_list,
  .watch = quorum_watch,
  .close = quorum_close,
  .free = quorum_free,
};

/* Opening ---------------------------------------------------------------------- */

RlStore *
rl_quorum_store_open (const char *const *urls, const char *registry_key, const char *client_id,
                      RlStoreContext *ctx, RlStoreReleasedFunc released, gpointer released_data,
                      GError **error)
{
  RlQuorumStore *self;
  g_autofree gboolean *seen = NULL;
  guint n = urls != NULL ? g_strv_length ((char **) urls) : 0;
  guint answered;
  gint64 start;
  QuorumJob *job;

  if (n == 0)
    {
      g_set_error_literal (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID,
                           "A quorum registry needs at least one URL");
      return NULL;
    }
  /* A bad URL is INVALID at once, and what parsing sets up once per process in GLib
   * is set up in this thread before N threads parse at the same time. */
  for (guint i = 0; i < n; i++)
    {
      RlUrl parsed;
      if (g_str_has_prefix (urls[i], "memory://"))
        continue;
      if (!rl_url_parse (urls[i], &parsed, error))
        {
          g_prefix_error (error, "Quorum node %u: ", i + 1);
          return NULL;
        }
      rl_url_clear (&parsed);
    }

  self = g_new0 (RlQuorumStore, 1);
  self->parent.vt = &quorum_store_vtable;
  self->parent.client_id = g_strdup (client_id);
  self->parent.registry_key = g_strdup (registry_key);
  self->parent.ctx = ctx;
  self->parent.released = released;
  self->parent.released_data = released_data;
  self->n = n;
  self->majority = n / 2 + 1;
  self->children = g_new0 (QuorumChild, n);
  for (guint i = 0; i < n; i++)
    {
      QuorumChild *child = &self->children[i];
      child->self = self;
      child->url = g_strdup (urls[i]);
      rl_mutex_init (&child->mutex);
      rl_mutex_init (&child->queue_mutex);
      rl_cond_init (&child->queue_cond);
      g_queue_init (&child->queue);
      for (guint k = 0; k < QUORUM_POOL_THREADS; k++)
        child->workers[k] = g_thread_new ("rl-quorum", worker_main, child);
    }

  /* Every node at once; a node that is down now is retried later. */
  start = g_get_monotonic_time ();
  seen = g_new0 (gboolean, n);
  job = job_new (self, OP_OPEN);
  job_start (job, FALSE);
  answered = job_wait (job,
                       start + (RL_ATOMIC_GET (ctx->connect_timeout_ms)
                                + RL_ATOMIC_GET (ctx->command_timeout_ms)) * 1000,
                       -1, seen);
  for (guint i = 0; i < n; i++)
    if (seen[i] && job->replies[i].error != NULL
        && !g_error_matches (job->replies[i].error, REDIS_LOCK_ERROR,
                             REDIS_LOCK_ERROR_CONNECTION))
      {
        /* A bad URL, password or database is not a node being down. */
        g_propagate_prefixed_error (error, g_steal_pointer (&job->replies[i].error),
                                    "Quorum node %u: ", i + 1);
        job_unref (job);
        rl_store_free (&self->parent);
        return NULL;
      }
  if (answered < self->majority)
    {
      set_no_majority (self, job, seen, answered, "Opening a quorum registry", error);
      job_unref (job);
      rl_store_free (&self->parent);
      return NULL;
    }
  job_unref (job);
  return &self->parent;
}
