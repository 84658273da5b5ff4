/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* quorum-store.c: the store of redis_lock_registry_new_quorum(), the Redlock algorithm
 * over N independent masters.
 *
 * The store holds N child stores (any single-master URL, opened with rl_store_open())
 * and sends every request to all of them at once; a lease is ours when a majority
 * (N/2 + 1) took it and the time the request took still leaves it a validity of
 * TTL − elapsed − drift (drift = TTL/100 + 2 ms). Anything short of that releases the
 * lease again on all N nodes (also those that did not answer: their request may have
 * arrived), so a failed attempt leaves nothing behind. Renewals count a lease as kept
 * while a majority renews it (and set it again on a node that answered "gone", a node
 * restarted empty, when the key is free there), as lost once too many nodes said it
 * is gone for a majority to be left, and as unconfirmed (RL_LEASE_ERROR, leases.c
 * decides by its confirmation time) in between. A release is LEASE_LOST only when no
 * majority can still have held it.
 *
 * Setting a lease again must never bring back one whose release has begun: a renewal
 * running beside the release finds the key already deleted on one node and still
 * held on the others, and its SET NX on the first node would land after the release
 * (the released lease would stand there until its TTL). So the store keeps a lease's
 * renewal and release apart, by the lease's value, which is unique to one
 * acquisition: a release marks the renewals under way that carry its value (and
 * those that start while it runs), a marked lease is never set again, and a release
 * waits for a SET NX of its value already sent (one per-node timeout at most) before
 * it sends its own deletes.
 *
 * Fan-out, in the calling thread: each Redis child queues the request on a
 * connection of its own and sends it (the stepwise requests of the store seam: the
 * protocol, the scripts and the sockets stay the Redis store's, redis-request.c;
 * this file sees a file descriptor to wait on and nothing else), then one poll()
 * waits on every node, each request taking its next step when its socket is ready,
 * so a request to N nodes costs the slowest node's round trip, not N, with no thread
 * hand-off. A child answering at once
 * (memory://) is simply called. (The children and the fan-out are quorum-fanout.c's;
 * this file keeps the store operations over them.) Each node is bounded by the
 * per-node timeout (min(50 ms, TTL/20) unless set, see
 * redis_lock_registry_set_quorum_node_timeout_ms()):
 * an acquisition waits for nothing beyond it once a majority answered (while fewer
 * did, a busy machine's slow answers, it waits for a majority up to the call's bound,
 * and the time counts against the validity); a renewal or release waits for the rest
 * for that long after a majority answered, and for a majority up to the command
 * timeout, since giving up on it would leave keys or report a lease unconfirmed for
 * nothing (a busy machine's slow answers included). A paused node thus costs one
 * per-node timeout.
 *
 * A node that could not be opened with the registry is opened later by a thread of
 * the store, once a second, which exists only while a node is missing; until then it
 * counts as not answering. Reading calls (inspect, list) ask the nodes one after
 * another: only the command-line tool uses them.
 *
 * Fencing has no meaning over independent counters (API.md, "Quorum"): the fenced
 * calls fail here, and the registry refuses to turn fencing on. An all-or-none
 * request on several leases takes them one at a time (releasing those taken when one
 * is held); releases on several leases go out in one fan-out.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "debug.h"
#include "store.h"
#include "sync.h"
#include "url.h"
#include "quorum-store-private.h"

/* A renewal under way, as its releases see it. */
typedef struct
{
  GHashTable *index;  /* lease value -> its index in the renewal + 1 */
  gboolean *released; /* per lease: a release of it began while the renewal ran */
  gboolean resetting; /* its SET NX fan-out is under way */
  GList link;         /* in renewals */
} Renewal;

/* A release under way, as renewals see it. */
typedef struct
{
  guint n;
  const RlLeaseItem *items; /* the leases released */
  GList link;               /* in releasing */
} Releasing;

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

static gboolean quorum_release_many (RlStore *store, guint n, RlLeaseItem *items, GError **error);

/* Releases @key holding @value on every node, in the background of a failed attempt. */
static void
release_everywhere (RlQuorumStore *self, const char *key, const char *value)
{
  RlLeaseItem item = { .key = key, .value = value };
  g_autoptr (GError) error = NULL;

  if (!quorum_release_many (&self->parent, 1, &item, &error))
    rl_debug ("releasing the failed quorum attempt on “%s”: %s", key, error->message);
}

static RlLeaseResult
quorum_acquire (RlStore *store, const char *key, const char *value, gint64 ttl_ms,
                gint64 deadline, const char *fence_key, guint64 *token, gint64 *pttl_ms,
                GError **error)
{
  RlQuorumStore *self = (RlQuorumStore *) store;
  RlLeaseItem item = { .key = key, .value = value, .ttl_ms = ttl_ms };
  gint64 start = g_get_monotonic_time (), node_ms, bound_ms, elapsed_ms, validity_ms;
  guint ok = 0, n_held = 0, answered;
  RlFanOut *f;

  if (refuse_fencing (fence_key, error))
    return RL_LEASE_ERROR;
  node_ms = rl_quorum_node_timeout_ms (self, ttl_ms);
  /* The call's bound, in whole ms rounded down: one more ms lets the caller's deadline
   * pass before a cut-short attempt returns. */
  bound_ms = (rl_store_deadline (store->ctx, deadline) - start) / 1000 + 1;
  node_ms = MIN (node_ms, bound_ms);

  f = rl_quorum_fan_out_all (self, RL_REQUEST_ACQUIRE, 1, &item);
  rl_quorum_fan_out_run (f, node_ms, WAIT_ACQUIRE, bound_ms);
  elapsed_ms = (g_get_monotonic_time () - start) / 1000;
  for (guint i = 0; i < self->n; i++)
    if (f->items[i][0].result == RL_LEASE_OK)
      ok++;
    else if (f->items[i][0].result == RL_LEASE_HELD)
      n_held++;
  answered = ok + n_held;

  validity_ms = ttl_ms - elapsed_ms - (ttl_ms / 100 + 2);
  if (ok >= self->majority && validity_ms > 0)
    {
      rl_quorum_fan_out_free (f);
      return RL_LEASE_OK;
    }

  /* Not ours: undo it everywhere, also where no answer came (it may still arrive) or
   * an answer came only in part. */
  if (ok > 0 || answered < self->n || !rl_quorum_no_errors (f))
    release_everywhere (self, key, value);

  if (answered < self->majority)
    {
      rl_quorum_set_no_majority (f, answered, "Acquiring a quorum lease", error);
      rl_quorum_fan_out_free (f);
      return RL_LEASE_ERROR;
    }
  /* Contention: the wait is bounded by the time until a majority could be free. */
  if (ok >= self->majority || n_held == 0)
    *pttl_ms = 0;
  else
    {
      g_autofree gint64 *held = g_new (gint64, n_held);
      guint k = self->majority - ok, h = 0;

      for (guint i = 0; i < self->n; i++)
        if (f->items[i][0].result == RL_LEASE_HELD)
          held[h++] = f->items[i][0].pttl_ms;
      qsort (held, n_held, sizeof *held, compare_pttl);
      *pttl_ms = held[MIN (k, n_held) - 1];
    }
  rl_quorum_fan_out_free (f);
  return RL_LEASE_HELD;
}

/* One lease at a time: all or none is kept by releasing the ones taken before a held
 * one. */
static gboolean
quorum_acquire_many (RlStore *store, guint n, RlLeaseItem *items, gint64 ttl_ms,
                     gint64 deadline, gboolean contended, GError **error)
{
  guint i;

  for (i = 0; i < n; i++)
    {
      items[i].token = 0;
      items[i].result = RL_LEASE_SKIPPED;
    }
  for (i = 0; i < n; i++)
    {
      RlLeaseItem *item = &items[i];

      item->result = refuse_fencing (item->fence_key, error)
                         ? RL_LEASE_ERROR
                         : quorum_acquire (store, item->key, item->value, ttl_ms, deadline, NULL,
                                           NULL, &item->pttl_ms, error);
      if (item->result == RL_LEASE_ERROR)
        return FALSE;
      if (item->result == RL_LEASE_HELD)
        {
          if (i > 0)
            {
              g_autoptr (GError) release_error = NULL;
              if (!quorum_release_many (store, i, items, &release_error))
                rl_debug ("releasing a partial quorum set: %s", release_error->message);
            }
          for (guint k = 0; k < i; k++)
            items[k].result = RL_LEASE_SKIPPED;
          item->result = RL_LEASE_HELD;
          return TRUE;
        }
    }
  return TRUE;
}

/* Renewals beside releases ---------------------------------------------------- */

/* Marks the leases of @r that @release releases. lease_mutex held. */
static void
renewal_mark_released (Renewal *r, const Releasing *release)
{
  for (guint k = 0; k < release->n; k++)
    {
      guint index = GPOINTER_TO_UINT (g_hash_table_lookup (r->index, release->items[k].value));

      if (index > 0)
        r->released[index - 1] = TRUE;
    }
}

/* Registers @r, a renewal of the @n leases of @items (their values must outlive it);
 * those whose release is under way are marked released at once. */
static void
renewal_begin (RlQuorumStore *self, Renewal *r, guint n, const RlLeaseItem *items)
{
  *r = (Renewal){ .index = g_hash_table_new (g_str_hash, g_str_equal),
                  .released = g_new0 (gboolean, n),
                  .link = { .data = r } };
  for (guint k = 0; k < n; k++)
    g_hash_table_insert (r->index, (gpointer)items[k].value, GUINT_TO_POINTER (k + 1));
  rl_mutex_lock (&self->lease_mutex);
  for (GList *l = self->releasing.head; l != NULL; l = l->next)
    renewal_mark_released (r, l->data);
  g_queue_push_tail_link (&self->renewals, &r->link);
  rl_mutex_unlock (&self->lease_mutex);
}

/* Of the @n_candidates leases of @r (indexes in @candidates) that a node lost, keeps
 * in @candidates those that may be set again there, no release of them having begun,
 * and returns how many. When there are any, @r is resetting until renewal_end(): a
 * release of one of them waits for that. */
static guint
renewal_keep_unreleased (RlQuorumStore *self, Renewal *r, guint *candidates, guint n_candidates)
{
  guint kept = 0;

  rl_mutex_lock (&self->lease_mutex);
  for (guint c = 0; c < n_candidates; c++)
    if (!r->released[candidates[c]])
      candidates[kept++] = candidates[c];
  r->resetting = kept > 0;
  rl_mutex_unlock (&self->lease_mutex);
  return kept;
}

static void
renewal_end (RlQuorumStore *self, Renewal *r)
{
  rl_mutex_lock (&self->lease_mutex);
  g_queue_unlink (&self->renewals, &r->link);
  if (r->resetting)
    rl_cond_broadcast (&self->lease_cond);
  rl_mutex_unlock (&self->lease_mutex);
  g_hash_table_unref (r->index);
  g_free (r->released);
}

/* Whether @r is setting one of the @n leases of @items again. lease_mutex held. */
static gboolean
renewal_resets_any (Renewal *r, guint n, const RlLeaseItem *items)
{
  if (!r->resetting)
    return FALSE;
  for (guint k = 0; k < n; k++)
    if (g_hash_table_contains (r->index, items[k].value))
      return TRUE;
  return FALSE;
}

/* @release, of the @n leases of @items (which must outlive it), begins: no renewal
 * under way or starting before release_end() sets one of them again, and one that is
 * doing so already ends that first (its fan-out is bounded by the per-node timeout).
 * Without renewals under way, that is a link added to a list: nothing is looked up. */
static void
release_begin (RlQuorumStore *self, Releasing *release, guint n, const RlLeaseItem *items)
{
  gboolean wait;

  *release = (Releasing){ .n = n, .items = items, .link = { .data = release } };
  rl_mutex_lock (&self->lease_mutex);
  g_queue_push_tail_link (&self->releasing, &release->link);
  for (GList *l = self->renewals.head; l != NULL; l = l->next)
    renewal_mark_released (l->data, release);
  do
    {
      wait = FALSE;
      for (GList *l = self->renewals.head; l != NULL && !wait; l = l->next)
        wait = renewal_resets_any (l->data, n, items);
      if (wait)
        rl_cond_wait_until (&self->lease_cond, &self->lease_mutex, RL_FOREVER);
    }
  while (wait);
  rl_mutex_unlock (&self->lease_mutex);
}

static void
release_end (RlQuorumStore *self, Releasing *release)
{
  rl_mutex_lock (&self->lease_mutex);
  g_queue_unlink (&self->releasing, &release->link);
  rl_mutex_unlock (&self->lease_mutex);
}

/* Renews @n leases on every node. Per lease: OK when a majority renewed it, LOST when
 * so many nodes found it gone that no majority is left, ERROR (unconfirmed)
 * otherwise. A lease kept by a majority is set again where it was gone, when the key
 * is free there (a node restarted empty). FALSE with @error when fewer than a
 * majority of the nodes answered at all. */
static gboolean
renew_leases (RlQuorumStore *self, guint n, RlLeaseItem *items, gint64 deadline,
              GError **error)
{
  gint64 ttl = 0;
  gint64 timeout_ms
      = MAX ((rl_store_deadline (self->parent.ctx, deadline) - g_get_monotonic_time ()) / 1000, 1);
  RlFanOut *f, *reset = NULL;
  g_autofree guint *lost_somewhere = g_new (guint, n);
  guint n_lost_somewhere = 0;
  Renewal renewal;

  for (guint k = 0; k < n; k++)
    ttl = MAX (ttl, items[k].ttl_ms);
  renewal_begin (self, &renewal, n, items);
  f = rl_quorum_fan_out_all (self, RL_REQUEST_RENEW, n, items);
  rl_quorum_fan_out_run (f, rl_quorum_node_timeout_ms (self, ttl), WAIT_MAJORITY, timeout_ms);
  if (rl_quorum_nodes_answered (f) < self->majority)
    {
      rl_quorum_set_no_majority (f, rl_quorum_nodes_answered (f), "Renewing quorum leases", error);
      rl_quorum_fan_out_free (f);
      renewal_end (self, &renewal);
      return FALSE;
    }
  for (guint k = 0; k < n; k++)
    {
      guint renewed = 0, lost = 0;
      for (guint i = 0; i < self->n; i++)
        {
          renewed += f->items[i][k].result == RL_LEASE_OK;
          lost += f->items[i][k].result == RL_LEASE_LOST;
        }
      items[k].result = renewed >= self->majority       ? RL_LEASE_OK
                        : lost > self->n - self->majority ? RL_LEASE_LOST
                                                          : RL_LEASE_ERROR;
      if (items[k].result == RL_LEASE_OK && lost > 0)
        lost_somewhere[n_lost_somewhere++] = k;
    }
  /* Set again only what no release has begun to delete: a node that answered "gone"
   * may have answered after the release reached it. */
  n_lost_somewhere = renewal_keep_unreleased (self, &renewal, lost_somewhere, n_lost_somewhere);
  for (guint c = 0; c < n_lost_somewhere; c++)
    {
      guint k = lost_somewhere[c];

      for (guint i = 0; i < self->n; i++)
        if (f->items[i][k].result == RL_LEASE_LOST)
          {
            RlLeaseItem *grown;
            if (reset == NULL)
              reset = rl_quorum_fan_out_new (self, RL_REQUEST_ACQUIRE);
            grown = g_renew (RlLeaseItem, reset->items[i], reset->counts[i] + 1);
            grown[reset->counts[i]++] = items[k];
            reset->items[i] = grown;
          }
    }
  if (reset != NULL)
    {
      /* SET NX: a key another owner took there meanwhile stays theirs. */
      rl_quorum_fan_out_run (reset, rl_quorum_node_timeout_ms (self, ttl), WAIT_NODE, 0);
      rl_quorum_fan_out_free (reset);
    }
  renewal_end (self, &renewal);
  rl_quorum_fan_out_free (f);
  return TRUE;
}

static RlLeaseResult
quorum_renew (RlStore *store, const char *key, const char *value, gint64 ttl_ms, GError **error)
{
  RlQuorumStore *self = (RlQuorumStore *) store;
  RlLeaseItem item = { .key = key, .value = value, .ttl_ms = ttl_ms };

  if (!renew_leases (self, 1, &item, 0, error))
    return RL_LEASE_ERROR;
  if (item.result == RL_LEASE_ERROR)
    g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION,
                 "Renewing a quorum lease: fewer than a majority (%u of %u) confirmed it",
                 self->majority, self->n);
  return item.result;
}

static gboolean
quorum_renew_batch (RlStore *store, guint n, const char *const *keys, const char *const *values,
                    const gint64 *ttls, RlLeaseResult *results, gint64 deadline,
                    guint *round_trips, GError **error)
{
  RlQuorumStore *self = (RlQuorumStore *) store;
  g_autofree RlLeaseItem *items = NULL;

  *round_trips = 0;
  if (n == 0)
    return TRUE;
  items = g_new0 (RlLeaseItem, n);
  for (guint k = 0; k < n; k++)
    {
      items[k].key = keys[k];
      items[k].value = values[k];
      items[k].ttl_ms = ttls[k];
    }
  *round_trips = 1;
  if (!renew_leases (self, n, items, deadline, error))
    return FALSE;
  for (guint k = 0; k < n; k++)
    results[k] = items[k].result;
  return TRUE;
}

/* Per lease: LOST only when so many nodes found it gone or foreign that no majority
 * can still have held it; OK when the others answered enough for a majority; ERROR
 * (with the first such lease's error) otherwise. */
static gboolean
quorum_release_many (RlStore *store, guint n, RlLeaseItem *items, GError **error)
{
  RlQuorumStore *self = (RlQuorumStore *) store;
  Releasing release;
  RlFanOut *f;
  gboolean all = TRUE;

  release_begin (self, &release, n, items);
  f = rl_quorum_fan_out_all (self, RL_REQUEST_RELEASE, n, items);
  rl_quorum_fan_out_run (f, rl_quorum_node_timeout_ms (self, 0), WAIT_MAJORITY,
                         RL_ATOMIC_GET (self->parent.ctx->command_timeout_ms));
  release_end (self, &release);
  for (guint k = 0; k < n; k++)
    {
      guint released = 0, lost = 0;

      items[k].others = FALSE;
      for (guint i = 0; i < self->n; i++)
        {
          released += f->items[i][k].result == RL_LEASE_OK;
          lost += f->items[i][k].result == RL_LEASE_LOST;
          items[k].others = items[k].others || f->items[i][k].others;
        }
      if (lost > self->n - self->majority)
        items[k].result = RL_LEASE_LOST;
      else if (released + lost >= self->majority)
        items[k].result = RL_LEASE_OK;
      else
        {
          items[k].result = RL_LEASE_ERROR;
          if (all)
            rl_quorum_set_no_majority (f, released + lost, "Releasing a quorum lease", error);
          all = FALSE;
        }
    }
  rl_quorum_fan_out_free (f);
  return all;
}

/* Never keeps a lease (keep_ttl_ms is ignored): keeping it on some nodes and deleting
 * it on others would leave a lease nobody holds a majority of. */
static RlLeaseResult
quorum_release (RlStore *store, const char *key, const char *value, gint64 keep_ttl_ms,
                gboolean *others, GError **error)
{
  RlLeaseItem item = { .key = key, .value = value };

  quorum_release_many (store, 1, &item, error);
  *others = item.others;
  return item.result;
}

/* Asks one open node: TRUE when it answered, else FALSE with its error. */
typedef gboolean (*AskFunc) (RlStore *child, guint i, gpointer data, GError **error);

/* Asks every open node, one after another, through @ask (an operator's calls, not a
 * hot path). TRUE when a majority answered; else FALSE with the error of fewer than a
 * majority answering, @what first, with the first node's error. */
static gboolean
ask_one_by_one (RlQuorumStore *self, const char *what, AskFunc ask, gpointer data,
                GError **error)
{
  g_autoptr (GError) first_error = NULL;
  guint answered = 0;

  for (guint i = 0; i < self->n; i++)
    {
      RlStore *child = rl_quorum_child_store (self, i);
      g_autoptr (GError) local_error = NULL;

      if (child == NULL)
        continue;
      if (ask (child, i, data, &local_error))
        answered++;
      else if (first_error == NULL)
        first_error = g_steal_pointer (&local_error);
    }
  if (answered >= self->majority)
    return TRUE;
  g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION,
               "%s: %u of %u quorum nodes answered, a majority is %u (%s)", what, answered,
               self->n, self->majority, first_error != NULL ? first_error->message : "not connected");
  return FALSE;
}

typedef struct
{
  const char *key;
  gboolean ours_only;
  gboolean deleted;
  GError *refused; /* the first node's INVALID: the key is no lease there */
} ForcedRelease;

static gboolean
force_release_one (RlStore *child, guint i, gpointer data, GError **error)
{
  ForcedRelease *forced = data;
  g_autoptr (GError) local_error = NULL;
  RlLeaseResult result = child->vt->force_release (child, forced->key, forced->ours_only,
                                                   &local_error);

  forced->deleted = forced->deleted || result == RL_LEASE_OK;
  /* A node that refused answered. */
  if (g_error_matches (local_error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID))
    {
      if (forced->refused == NULL)
        forced->refused = g_steal_pointer (&local_error);
      return TRUE;
    }
  if (local_error != NULL)
    g_propagate_error (error, g_steal_pointer (&local_error));
  return result != RL_LEASE_ERROR;
}

/* Deletes the lease @key on every node that answers (an operator's call, not a hot
 * path): OK when some node had it, and a majority answered; CONNECTION when fewer did
 * (some node may keep the key until its TTL); INVALID when no node deleted it and some
 * node holds it as no lease. */
static RlLeaseResult
quorum_force_release (RlStore *store, const char *key, gboolean ours_only, GError **error)
{
  ForcedRelease forced = { key, ours_only, FALSE, NULL };

  if (!ask_one_by_one ((RlQuorumStore *) store, "Forced release", force_release_one, &forced,
                       error))
    {
      g_clear_error (&forced.refused);
      return RL_LEASE_ERROR;
    }
  if (!forced.deleted && forced.refused != NULL)
    {
      g_propagate_error (error, forced.refused);
      return RL_LEASE_ERROR;
    }
  g_clear_error (&forced.refused);
  return forced.deleted ? RL_LEASE_OK : RL_LEASE_LOST;
}

typedef struct
{
  const char *key;
  char **values;
  gint64 *pttls;
} Inspection;

/* A node answers when it has @key, and when it says it has not. */
static gboolean
inspect_one (RlStore *child, guint i, gpointer data, GError **error)
{
  Inspection *in = data;

  return child->vt->inspect (child, in->key, &in->values[i], &in->pttls[i], error)
         || *error == NULL;
}

/* The value a majority of the nodes holds for @key, with the shortest of their TTLs;
 * the nodes asked one after another. */
static gboolean
quorum_inspect (RlStore *store, const char *key, char **value, gint64 *pttl_ms, GError **error)
{
  RlQuorumStore *self = (RlQuorumStore *) store;
  g_autofree char **values = g_new0 (char *, self->n + 1);
  g_autofree gint64 *pttls = g_new0 (gint64, self->n);
  Inspection in = { key, values, pttls };
  gboolean found = FALSE;
  gboolean majority;

  majority = ask_one_by_one (self, "Inspecting a quorum lease", inspect_one, &in, error);
  for (guint i = 0; majority && i < self->n && !found; i++)
    {
      guint count = 0;
      gint64 pttl = pttls[i];

      if (values[i] == NULL)
        continue;
      for (guint k = 0; k < self->n; k++)
        if (values[k] != NULL && strcmp (values[i], values[k]) == 0)
          {
            count++;
            if (compare_pttl (&pttls[k], &pttl) < 0)
              pttl = pttls[k];
          }
      if (count >= self->majority)
        {
          *value = g_strdup (values[i]);
          *pttl_ms = pttl;
          found = TRUE;
        }
    }
  for (guint i = 0; i < self->n; i++)
    g_free (values[i]);
  return found;
}

static gboolean
quorum_read_counter (RlStore *store, const char *fence_key, guint64 *value, GError **error)
{
  *value = 0;
  refuse_fencing (fence_key, error);
  return FALSE;
}

static void
entries_free (GArray *entries)
{
  for (guint k = 0; k < entries->len; k++)
    {
      RlStoreEntry *e = &g_array_index (entries, RlStoreEntry, k);
      g_free (e->key);
      g_free (e->value);
    }
  g_array_unref (entries);
}

/* Node @i's leases in lists[@i] (@data), when it answers. */
static gboolean
list_one (RlStore *child, guint i, gpointer data, GError **error)
{
  GArray **lists = data;

  lists[i] = g_array_new (FALSE, FALSE, sizeof (RlStoreEntry));
  if (child->vt->list (child, lists[i], error))
    return TRUE;
  g_clear_pointer (&lists[i], entries_free);
  return FALSE;
}

/* The leases a majority of the nodes hold with the same value; the nodes asked one
 * after another. */
static gboolean
quorum_list (RlStore *store, GArray *entries, GError **error)
{
  RlQuorumStore *self = (RlQuorumStore *) store;
  g_autoptr (GHashTable) counts = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  g_autofree GArray **lists = g_new0 (GArray *, self->n);
  gboolean majority;

  majority = ask_one_by_one (self, "Listing quorum leases", list_one, lists, error);
  /* "key\nvalue" -> how many nodes have it */
  for (guint i = 0; i < self->n; i++)
    {
      if (lists[i] == NULL)
        continue;
      for (guint k = 0; majority && k < lists[i]->len; k++)
        {
          RlStoreEntry *e = &g_array_index (lists[i], RlStoreEntry, k);
          char *id = g_strconcat (e->key, "\n", e->value, NULL);
          guint count = GPOINTER_TO_UINT (g_hash_table_lookup (counts, id)) + 1;
          g_hash_table_replace (counts, id, GUINT_TO_POINTER (count));
          if (count == self->majority)
            {
              RlStoreEntry copy = { g_strdup (e->key), g_strdup (e->value), e->pttl_ms };
              g_array_append_val (entries, copy);
            }
        }
      entries_free (lists[i]);
    }
  return majority;
}

/* Confirmed when notifications run on a majority: a holder's release reaches a
 * majority, so at least one of them wakes this store. Every node's are started
 * first, then waited for one after another within @timeout_ms. */
static gboolean
quorum_watch (RlStore *store, gint64 timeout_ms)
{
  RlQuorumStore *self = (RlQuorumStore *) store;
  gint64 end = g_get_monotonic_time () + MAX (timeout_ms, 0) * 1000;
  g_autofree gboolean *running = g_new0 (gboolean, self->n);
  guint count = 0;

  for (guint i = 0; i < self->n; i++)
    {
      RlStore *child = rl_quorum_child_store (self, i);
      running[i] = child != NULL && child->vt->watch (child, 0);
      count += running[i];
    }
  for (guint i = 0; i < self->n && count < self->majority && timeout_ms > 0; i++)
    {
      RlStore *child = rl_quorum_child_store (self, i);
      gint64 left_ms = (end - g_get_monotonic_time ()) / 1000;

      if (running[i] || child == NULL || left_ms <= 0)
        continue;
      count += child->vt->watch (child, left_ms);
    }
  return count >= self->majority;
}

static void
quorum_rewatch (RlStore *store)
{
  RlQuorumStore *self = (RlQuorumStore *) store;

  for (guint i = 0; i < self->n; i++)
    {
      RlStore *child = rl_quorum_child_store (self, i);

      if (child != NULL && child->vt->rewatch != NULL)
        child->vt->rewatch (child);
    }
}

/* Up when a majority of the nodes' guards are: a lease held on a majority is lost
 * only when a majority loses it. */
static gboolean
quorum_guard (RlStore *store)
{
  RlQuorumStore *self = (RlQuorumStore *) store;
  guint up = 0;

  for (guint i = 0; i < self->n; i++)
    {
      RlStore *child = rl_quorum_child_store (self, i);

      if (child != NULL && (child->vt->guard == NULL || child->vt->guard (child)))
        up++;
    }
  return up >= self->majority;
}

/* Ends the opener, which might otherwise open a child after this. */
static void
stop_opener (RlQuorumStore *self)
{
  rl_mutex_raise (&self->opener_mutex, &self->opener_cond, &self->stopping);
  if (self->opener != NULL)
    g_clear_pointer (&self->opener, g_thread_join);
}

static void
quorum_close (RlStore *store)
{
  RlQuorumStore *self = (RlQuorumStore *) store;

  stop_opener (self);
  for (guint i = 0; i < self->n; i++)
    {
      RlStore *child = rl_quorum_child_store (self, i);
      if (child != NULL)
        child->vt->close (child);
    }
}

/* rl_store_free() has already freed the common fields. */
static void
quorum_free (RlStore *store)
{
  RlQuorumStore *self = (RlQuorumStore *) store;

  stop_opener (self);
  for (guint i = 0; i < self->n; i++)
    {
      RlQuorumChild *child = &self->children[i];
      if (child->store != NULL)
        rl_store_free (child->store);
      g_free (child->url);
    }
  rl_mutex_clear (&self->opener_mutex);
  rl_cond_clear (&self->opener_cond);
  rl_mutex_clear (&self->lease_mutex);
  rl_cond_clear (&self->lease_cond);
  g_free (self->children);
  g_free (self);
}

RL_DEFINE_STORE_VTABLE (quorum,
                        .rewatch = quorum_rewatch,
                        .guard = quorum_guard);

/* Opening ---------------------------------------------------------------------- */

RlStore *
rl_quorum_store_open (const char *const *urls, const char *registry_key, const char *client_id,
                      RlStoreContext *ctx, RlStoreReleasedFunc released, gpointer released_data,
                      GError **error)
{
  RlQuorumStore *self;
  g_autoptr (GError) first_error = NULL;
  guint n = urls != NULL ? g_strv_length ((char **) urls) : 0;
  guint opened = 0;

  if (n == 0)
    {
      g_set_error_literal (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID,
                           "A quorum registry needs at least one URL");
      return NULL;
    }
  /* A bad URL is INVALID at once, before any node is contacted. */
  for (guint i = 0; i < n; i++)
    {
      RlUrl parsed;
      gboolean cluster;

      if (g_str_has_prefix (urls[i], "memory://"))
        continue;
      if (!rl_url_parse (urls[i], &parsed, error))
        {
          g_prefix_error (error, "Quorum node %u: ", i + 1);
          return NULL;
        }
      cluster = parsed.kind == RL_TOPOLOGY_CLUSTER;
      rl_url_clear (&parsed);
      if (cluster)
        {
          g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID,
                       "Quorum node %u: a quorum node must be a single master, not a Cluster",
                       i + 1);
          return NULL;
        }
    }

  self = g_new0 (RlQuorumStore, 1);
  rl_store_init (&self->parent, &quorum_vtable, registry_key, client_id, ctx, released,
                 released_data);
  self->n = n;
  self->majority = n / 2 + 1;
  self->children = g_new0 (RlQuorumChild, n);
  rl_mutex_init (&self->opener_mutex);
  rl_cond_init (&self->opener_cond);
  rl_mutex_init (&self->lease_mutex);
  rl_cond_init (&self->lease_cond);
  for (guint i = 0; i < n; i++)
    self->children[i].url = g_strdup (urls[i]);

  for (guint i = 0; i < n; i++)
    {
      g_autoptr (GError) local_error = NULL;
      RlStore *child = rl_quorum_child_open (self, i, &local_error);

      if (child != NULL)
        {
          g_atomic_pointer_set (&self->children[i].store, child);
          opened++;
          continue;
        }
      /* A bad password or database is not a node being down. */
      if (!g_error_matches (local_error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION))
        {
          g_propagate_prefixed_error (error, g_steal_pointer (&local_error), "Quorum node %u: ",
                                      i + 1);
          rl_store_free (&self->parent);
          return NULL;
        }
      if (first_error == NULL)
        first_error = g_steal_pointer (&local_error);
    }
  if (opened < self->majority)
    {
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION,
                   "Opening a quorum registry: %u of %u quorum nodes answered, a majority is %u "
                   "(%s)",
                   opened, n, self->majority, first_error->message);
      rl_store_free (&self->parent);
      return NULL;
    }
  if (opened < n)
    self->opener = g_thread_new ("rl-quorum-open", rl_quorum_opener_main, self);
  return &self->parent;
}
