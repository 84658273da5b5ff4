/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* quorum-store-private.h: what the quorum store's two files share: the store itself, its
 * children and the fan-out (one request to every node) that quorum-fanout.c runs for
 * the operations of quorum-store.c. See the top of quorum-store.c for the algorithm.
 */
#ifndef RL_QUORUM_STORE_PRIVATE_H
#define RL_QUORUM_STORE_PRIVATE_H

#include "store.h"
#include "sync.h"

#define QUORUM_NODE_TIMEOUT_MS 50 /* the default per-node bound, at most */
#define QUORUM_REOPEN_US G_USEC_PER_SEC

struct pollfd;

typedef struct _RlQuorumStore RlQuorumStore;

typedef struct
{
  char *url;
  RlStore *store; /* atomic: NULL until opened (by rl_quorum_store_open() or the opener) */
} RlQuorumChild;

struct _RlQuorumStore
{
  RlStore parent;
  guint n;
  guint majority;
  RlQuorumChild *children;
  /* The opener of the children missing at creation. */
  GThread *opener;
  RlMutex opener_mutex; /* guards stopping */
  RlCond opener_cond;
  gboolean stopping;
  /* Renewals and releases of one lease kept apart (see the top of quorum-store.c). */
  RlMutex lease_mutex;   /* guards what follows; a leaf: nothing is called under it */
  RlCond lease_cond;     /* a renewal's SET NX fan-out ended */
  GQueue renewals;       /* of Renewal: those under way */
  GQueue releasing;      /* of Releasing (quorum-store.c): the releases under way */
};

/* One request to every node: each node's copy of the leases, and how it stands. The
 * per-node arrays live in the fan-out's own allocation (rl_quorum_fan_out_new()), and
 * so do the nodes' copies of the leases when every node is asked for the same
 * (rl_quorum_fan_out_all()). */
typedef struct
{
  RlQuorumStore *self;
  RlRequestKind kind;
  RlLeaseItem **items; /* per node: NULL when the node is not asked */
  gboolean own_items;  /* items[i] are allocations of their own (grown by the caller) */
  guint *counts;       /* per node: leases asked */
  struct pollfd *pfds; /* per node: what rl_quorum_fan_out_run() waits on */
  guint *live;         /* per node: the node of each of pfds */
  RlRequest **requests; /* per node: under way */
  GError **errors;     /* per node: the first error of its leases */
  guint answered;      /* nodes whose request ended without an error */
  gint64 grace_us;     /* how long the others are waited for once a majority answered */
  gint64 not_before;   /* ... but at least until then (monotonic µs) */
  gint64 majority_at;  /* when a majority had answered; 0: not yet */
} RlFanOut;

/* How long a fan-out waits for its nodes. */
typedef enum
{
  WAIT_NODE,     /* each node at most the per-node timeout */
  WAIT_ACQUIRE,  /* each node at most the per-node timeout once a majority answered;
                  * until then, up to the call's bound */
  WAIT_MAJORITY, /* up to the call's bound, and the others at most the per-node
                  * timeout after a majority answered */
} RlFanOutWait;

RlStore *rl_quorum_child_store (RlQuorumStore *self, guint i);
RlStore *rl_quorum_child_open (RlQuorumStore *self, guint i, GError **error);
gpointer rl_quorum_opener_main (gpointer data);
gint64 rl_quorum_node_timeout_ms (RlQuorumStore *self, gint64 ttl_ms);
RlFanOut *rl_quorum_fan_out_new (RlQuorumStore *self, RlRequestKind kind);
void rl_quorum_fan_out_free (RlFanOut *f);
RlFanOut *rl_quorum_fan_out_all (RlQuorumStore *self, RlRequestKind kind, guint n,
                                 const RlLeaseItem *items);
void rl_quorum_fan_out_run (RlFanOut *f, gint64 node_ms, RlFanOutWait wait, gint64 timeout_ms);
gboolean rl_quorum_no_errors (RlFanOut *f);
guint rl_quorum_nodes_answered (RlFanOut *f);
void rl_quorum_set_no_majority (RlFanOut *f, guint answered, const char *what, GError **error);

#endif /* RL_QUORUM_STORE_PRIVATE_H */
