/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* quorum-fanout.c: the quorum store's fan-out machinery: its children (the N
 * child stores, and the thread that opens those missing at creation) and one request
 * sent to every node at once, each node's stepwise request taking its next step when
 * its socket is ready, under one poll(), with the per-node timeouts and the majority
 * counts that end it. Cut from quorum-store.c, which keeps the store operations (what
 * a majority means for an acquisition, a renewal, a release) over this, because the
 * fan-out knows nothing of those meanings: the calls go one way, from the operations
 * to here.
 */
#include "config.h"

#include <poll.h>
#include <string.h>

#include "debug.h"
#include "store.h"
#include "sync.h"
#include "quorum-store-private.h"

/* Children --------------------------------------------------------------------- */

static void
child_released (const char *key, gboolean reset, gpointer user_data)
{
  RlQuorumStore *self = user_data;

  self->parent.released (key, reset, self->parent.released_data);
}

RlStore *
rl_quorum_child_store (RlQuorumStore *self, guint i)
{
  return g_atomic_pointer_get (&self->children[i].store);
}

RlStore *
rl_quorum_child_open (RlQuorumStore *self, guint i, GError **error)
{
  return rl_store_open (self->children[i].url, self->parent.registry_key, self->parent.client_id,
                        self->parent.ctx, child_released, self, error);
}

/* Opens the missing children once a second until none is missing or the store
 * closes. */
gpointer
rl_quorum_opener_main (gpointer data)
{
  RlQuorumStore *self = data;
  gboolean missing = TRUE;

  rl_mutex_lock (&self->opener_mutex);
  while (missing && !self->stopping)
    {
      missing = FALSE;
      for (guint i = 0; i < self->n && !self->stopping; i++)
        {
          g_autoptr (GError) error = NULL;
          RlStore *store;

          if (rl_quorum_child_store (self, i) != NULL)
            continue;
          rl_mutex_unlock (&self->opener_mutex);
          store = rl_quorum_child_open (self, i, &error);
          rl_mutex_lock (&self->opener_mutex);
          if (store == NULL)
            {
              rl_debug ("quorum node %u: %s", i + 1, error->message);
              missing = TRUE;
              continue;
            }
          /* Opened while the store closed: its threads stop at once. */
          if (self->stopping)
            store->vt->close (store);
          g_atomic_pointer_set (&self->children[i].store, store);
          /* Waiters may have missed a release on it while it was away. */
          self->parent.released (NULL, FALSE, self->parent.released_data);
        }
      if (missing && !self->stopping)
        rl_cond_wait_until (&self->opener_cond, &self->opener_mutex,
                            g_get_monotonic_time () + QUORUM_REOPEN_US);
    }
  rl_mutex_unlock (&self->opener_mutex);
  return NULL;
}

/* The per-node timeout of a request with @ttl_ms (0: not known). */
gint64
rl_quorum_node_timeout_ms (RlQuorumStore *self, gint64 ttl_ms)
{
  gint64 set = RL_ATOMIC_GET (self->parent.ctx->quorum_node_timeout_ms);

  if (set > 0)
    return set;
  return ttl_ms > 0 ? MIN (QUORUM_NODE_TIMEOUT_MS, MAX (ttl_ms / 20, 1)) : QUORUM_NODE_TIMEOUT_MS;
}

/* Fan-out ---------------------------------------------------------------------- */

/* A fan-out in one allocation: the struct, then its per-node arrays, the wider first
 * so that each stays aligned, then @per_node leases for each node. */
static RlFanOut *
fan_out_alloc (RlQuorumStore *self, RlRequestKind kind, guint per_node)
{
  gsize ptrs = sizeof (gpointer) * self->n, pfds = sizeof (struct pollfd) * self->n;
  gsize leases = sizeof (RlLeaseItem) * per_node * self->n;
  RlFanOut *f;
  char *p;

  G_STATIC_ASSERT (sizeof (RlFanOut) % sizeof (gpointer) == 0);
  G_STATIC_ASSERT (sizeof (RlLeaseItem) % sizeof (gpointer) == 0);
  f = g_malloc0 (sizeof (RlFanOut) + leases + 3 * ptrs + pfds + 2 * sizeof (guint) * self->n);
  p = (char *) (f + 1) + leases;
  f->self = self;
  f->kind = kind;
  f->items = (RlLeaseItem **) p;
  f->requests = (RlRequest **) (p + ptrs);
  f->errors = (GError **) (p + 2 * ptrs);
  f->pfds = (struct pollfd *) (p + 3 * ptrs);
  f->counts = (guint *) (p + 3 * ptrs + pfds);
  f->live = f->counts + self->n;
  return f;
}

/* A fan-out that asks no node yet: the caller gives each node it asks an allocation
 * of leases of its own. */
RlFanOut *
rl_quorum_fan_out_new (RlQuorumStore *self, RlRequestKind kind)
{
  RlFanOut *f = fan_out_alloc (self, kind, 0);

  f->own_items = TRUE;
  return f;
}

void
rl_quorum_fan_out_free (RlFanOut *f)
{
  for (guint i = 0; i < f->self->n; i++)
    {
      if (f->own_items)
        g_free (f->items[i]);
      g_clear_error (&f->errors[i]);
    }
  g_free (f);
}

/* Asks every node for the same leases, each node with a copy of @items of its own. */
RlFanOut *
rl_quorum_fan_out_all (RlQuorumStore *self, RlRequestKind kind, guint n, const RlLeaseItem *items)
{
  RlFanOut *f = fan_out_alloc (self, kind, n);
  RlLeaseItem *copies = (RlLeaseItem *) (f + 1);

  for (guint i = 0; i < self->n && n > 0; i++)
    {
      f->items[i] = memcpy (copies + (gsize) i * n, items, n * sizeof *items);
      f->counts[i] = n;
    }
  return f;
}

static void
fan_out_end_request (RlFanOut *f, guint i)
{
  RlStore *store = rl_quorum_child_store (f->self, i);

  if (store->vt->request_end (f->requests[i], &f->errors[i]))
    f->answered++;
  f->requests[i] = NULL;
}

/* A child without stepwise requests answers each lease by a call. */
static void
fan_out_call (RlFanOut *f, guint i, RlStore *store, gint64 deadline)
{
  gboolean ok = TRUE;

  for (guint k = 0; k < f->counts[i]; k++)
    {
      RlLeaseItem *item = &f->items[i][k];
      g_autoptr (GError) error = NULL;

      item->others = FALSE;
      switch (f->kind)
        {
        case RL_REQUEST_ACQUIRE:
          item->result = store->vt->acquire (store, item->key, item->value, item->ttl_ms,
                                             deadline, NULL, NULL, &item->pttl_ms, &error);
          break;
        case RL_REQUEST_RENEW:
          item->result = store->vt->renew (store, item->key, item->value, item->ttl_ms, &error);
          break;
        case RL_REQUEST_RELEASE:
          item->result
              = store->vt->release (store, item->key, item->value, 0, &item->others, &error);
          break;
        default:
          g_assert_not_reached ();
        }
      if (item->result == RL_LEASE_ERROR)
        {
          ok = FALSE;
          if (f->errors[i] == NULL)
            f->errors[i] = g_steal_pointer (&error);
        }
    }
  f->answered += ok;
}

/* When a soft wait may end: once a majority answered, the grace after that but not
 * before not_before; never while fewer did (G_MAXINT64). */
static gint64
fan_out_until (RlFanOut *f)
{
  if (f->answered < f->self->majority)
    return G_MAXINT64;
  if (f->majority_at == 0)
    f->majority_at = g_get_monotonic_time ();
  return MAX (f->majority_at + f->grace_us, f->not_before);
}

/* Runs the request on every node asked, all at once, waiting for the nodes as @wait
 * says, with the per-node timeout @node_ms and the call's bound @timeout_ms. Every
 * lease ends with a result (ERROR for a node that did not answer in time). One poll()
 * waits on every node's request; each request takes its own steps (the protocol is
 * its store's) when its socket is ready. */
void
rl_quorum_fan_out_run (RlFanOut *f, gint64 node_ms, RlFanOutWait wait, gint64 timeout_ms)
{
  RlQuorumStore *self = f->self;
  gboolean soft = wait != WAIT_NODE;
  gint64 start = g_get_monotonic_time ();
  gint64 end = start + (soft ? MAX (timeout_ms, node_ms) : node_ms) * 1000;
  /* What bounds one node's request: its own deadline, from the per-node timeout. */
  gint64 node_end = start + node_ms * 1000;
  struct pollfd *pfds = f->pfds;
  guint *live = f->live;

  f->grace_us = wait == WAIT_MAJORITY ? node_ms * 1000 : 0;
  f->not_before = wait == WAIT_ACQUIRE ? start + node_ms * 1000 : 0;
  f->majority_at = 0;
  for (guint i = 0; i < self->n; i++)
    {
      RlStore *store = rl_quorum_child_store (self, i);

      if (f->items[i] == NULL)
        continue;
      for (guint k = 0; k < f->counts[i]; k++)
        f->items[i][k].result = RL_LEASE_ERROR;
      if (store == NULL)
        g_set_error_literal (&f->errors[i], REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION,
                             "not connected");
      else if (store->vt->request_begin == NULL)
        fan_out_call (f, i, store, node_end);
      else
        f->requests[i] = store->vt->request_begin (store, f->kind, f->counts[i], f->items[i],
                                                   node_end, &f->errors[i]);
    }

  for (;;)
    {
      gint64 stop;
      gboolean ready = FALSE;
      guint n_live = 0;
      int rc;

      for (guint i = 0; i < self->n; i++)
        {
          RlRequest *request = f->requests[i];

          if (request == NULL)
            continue;
          if (request->done)
            {
              fan_out_end_request (f, i);
              continue;
            }
          pfds[n_live].fd = request->fd;
          pfds[n_live].events = request->events;
          pfds[n_live].revents = 0;
          ready = ready || request->ready;
          live[n_live++] = i;
        }
      stop = soft ? MIN (end, fan_out_until (f)) : end;
      if (n_live == 0)
        break;
      rc = rl_poll_until (pfds, n_live, ready ? 0 : stop);
      if (rc < 0 || (rc == 0 && !ready))
        break;
      for (guint k = 0; k < n_live; k++)
        {
          RlRequest *request = f->requests[live[k]];

          if (pfds[k].revents != 0 || request->ready)
            rl_quorum_child_store (self, live[k])->vt->request_ready (request, pfds[k].revents);
        }
    }
  /* Requests cut short by the time: their leases end ERROR. */
  for (guint i = 0; i < self->n; i++)
    if (f->requests[i] != NULL)
      fan_out_end_request (f, i);
}

/* Whether every node asked ended its request without an error. */
gboolean
rl_quorum_no_errors (RlFanOut *f)
{
  for (guint i = 0; i < f->self->n; i++)
    if (f->errors[i] != NULL)
      return FALSE;
  return TRUE;
}

/* The nodes that answered for at least one lease. */
guint
rl_quorum_nodes_answered (RlFanOut *f)
{
  guint answered = 0;

  for (guint i = 0; i < f->self->n; i++)
    for (guint k = 0; k < f->counts[i]; k++)
      if (f->items[i][k].result != RL_LEASE_ERROR)
        {
          answered++;
          break;
        }
  return answered;
}

/* The error of fewer than a majority answering, with the first node's error. */
void
rl_quorum_set_no_majority (RlFanOut *f, guint answered, const char *what, GError **error)
{
  RlQuorumStore *self = f->self;
  const char *cause = "no answer in time";

  for (guint i = 0; i < self->n; i++)
    if (f->errors[i] != NULL)
      {
        cause = f->errors[i]->message;
        break;
      }
  g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION,
               "%s: %u of %u quorum nodes answered, a majority is %u (%s)", what, answered,
               self->n, self->majority, cause);
}
