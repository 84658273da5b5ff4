/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* memory-store-private.h: what the memory store's two files share: the spaces, leases
 * and stores (memory-store.c), the one mutex that guards them, and the helpers of the
 * lease table that the lock family's entries (memory-family.c) are built on.
 */
#ifndef RL_MEMORY_STORE_PRIVATE_H
#define RL_MEMORY_STORE_PRIVATE_H

#include "store.h"
#include "sync.h"

typedef struct
{
  char *owner;
  gint64 expires_us; /* monotonic; RL_FOREVER: no expiry */
} RlMemoryLease;

typedef struct
{
  char *name;
  guint refs;             /* stores open on it */
  GHashTable *leases;     /* full key -> RlMemoryLease */
  GHashTable *counters;   /* fencing counter key -> guint64 *, never removed */
  GHashTable *waits;      /* waits-for hash key (rl_store_waits_key()) -> GHashTable of
                             record id -> RlMemoryLease (the record as its owner) */
  GHashTable *queues;     /* lock key -> its wait queue (memory-queue.c) */
  GQueue listeners;       /* of RlMemoryStore, those not closed */
  guint inserts;          /* new keys since the last sweep */
  guint size_after_sweep; /* leases left by the last sweep */
} RlMemorySpace;

typedef struct
{
  RlStore parent;
  RlMemorySpace *space;
  char *key_prefix;  /* registry_key ":", the keys whose release concerns this store */
  GList link;        /* in space->listeners while listening */
  gboolean listening;
  gboolean watched;  /* a waiter asked for notifications (memory_watch), as a Redis
                        store subscribes on the first wait */
  guint delivering;  /* release callbacks running into this store now */
} RlMemoryStore;

/* Guards every RlMemorySpace and RlMemoryLease (memory-store.c's opening comment). */
extern RlMutex rl_memory_mutex;

/* memory-store.c: the lease table and the release notifications. */

void rl_memory_lease_free (gpointer data);
gint64 rl_memory_expiry_after (gint64 now, gint64 ttl_ms);
gint64 rl_memory_lease_pttl (const RlMemoryLease *lease, gint64 now);
RlMemoryLease *rl_memory_lease_lookup (RlMemorySpace *space, const char *key, gint64 now);
/* The live lease @key if it holds @value. */
RlMemoryLease *rl_memory_lease_lookup_ours (RlMemoryStore *self, const char *key,
                                            const char *value, gint64 now);
/* memory-queue.c: the store's release (store.h), which grants to the first in line
 * when the wait queue is on; named by memory-store.c's vtable. */
RlLeaseResult memory_release (RlStore *store, const char *key, const char *value,
                              gint64 keep_ttl_ms, gboolean *others, GError **error);
void rl_memory_lease_insert (RlMemorySpace *space, const char *key, const char *owner,
                             gint64 expires_us, gint64 now);
void rl_memory_count_request (RlStore *store, guint commands);
GPtrArray *rl_memory_listeners_take (RlMemorySpace *space, const char *key);
void rl_memory_listeners_deliver (GPtrArray *targets, const char *key);
void rl_memory_unlock_and_deliver (GPtrArray *targets, const char *key);
gboolean rl_memory_wants_replicas (RlStore *store, const char *what, const char *key,
                                   GError **error);
void rl_memory_lease_take (RlMemorySpace *space, const char *key, const char *value, gint64 ttl_ms,
                           gint64 now);

/* memory-family.c: the lock family's entries of the vtable (store.h). */
guint64 rl_memory_counter_next_token (RlMemorySpace *space, const char *fence_key);
/* A delivery to @store (counted in its delivering) ended. rl_memory_mutex not held. */
void rl_memory_delivered (RlMemoryStore *store);

/* memory-queue.c: the wait queue. */
typedef struct
{
  RlMemoryStore *target; /* the store told, counted in its delivering; NULL: none */
  char *key;
  char *value;
  guint64 token;
} RlMemoryGrant;
void rl_memory_queue_free (gpointer data);
/* Grants the free (or releasing) lease @key to the first live place of its line other
 * than @me's (NULL: any), filling @grant: TRUE when it did. rl_memory_mutex held. */
gboolean rl_memory_queue_grant_locked (RlMemorySpace *space, const char *key, const char *me,
                                       gint64 now, RlMemoryGrant *grant);
/* Tells the grant's registry, and frees @grant's strings. rl_memory_mutex not held. */
void rl_memory_queue_deliver (RlMemoryGrant *grant);
RlLeaseResult rl_memory_acquire_queued (RlStore *store, const char *key, const char *value,
                                        const char *prev_value, gint64 ttl_ms, gint64 deadline,
                                        const char *fence_key, gboolean contended,
                                        guint64 *token, gint64 *pttl_ms, gboolean *queued,
                                        GError **error);
gboolean rl_memory_leave_queue (RlStore *store, const char *key, const char *value,
                                GError **error);
gboolean rl_memory_queue_list (RlStore *store, const char *key, GArray *entries, GError **error);

RlStoreSemaphoreAcquireFunc rl_memory_semaphore_acquire;
RlStoreSemaphoreAvailableFunc rl_memory_semaphore_available;
RlStoreRwAcquireFunc rl_memory_rw_acquire;
RlStoreRwStopWaitingFunc rl_memory_rw_stop_waiting;
gboolean rl_memory_waits_update (RlStore *store, const char *id, const char *record, gint64 ttl_ms,
                                 GPtrArray *records, gint64 deadline, GError **error);

#endif /* RL_MEMORY_STORE_PRIVATE_H */
