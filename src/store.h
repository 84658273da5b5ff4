/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* store.h: the seam between the lock logic and where leases live.
 *
 * lock.c, registry.c and leases.c speak only in the terms of this file: a lease is
 * acquired (with a fencing token when asked), held by another owner (for so many
 * milliseconds), kept, released or lost, alone or several in one request, and a store
 * tells the registry when a lease may have been released so waiters can retry. A
 * store on the network may also run a request in steps (begin it; wait on the socket it
 * names; let it take its next step when the socket is ready), so that the quorum store
 * can drive its N child stores from one thread with one poll() without seeing a
 * connection or a reply: no socket type and no protocol object cross this seam. The
 * Redis store (redis-store.c for the protocol, notify.c for the wake-ups) is one
 * implementation, the memory store another; store.c picks one by URL, and a new
 * store slots in behind the same table without the layers above learning which one
 * they talk to.
 */
#ifndef RL_STORE_H
#define RL_STORE_H

#include <glib.h>
#include <string.h>

#include "redislock/redislock.h"
#include "settings.h"

typedef enum
{
  RL_LEASE_OK,    /* acquired, renewed or released */
  RL_LEASE_HELD,  /* acquire only: another owner holds the key */
  RL_LEASE_LOST,  /* renew/release: the key is gone or belongs to another owner */
  RL_LEASE_ERROR, /* the store failed; the GError says how */
  RL_LEASE_KEPT,  /* release with keep_ttl_ms only: nobody else listened, lease kept */
  RL_LEASE_SKIPPED, /* acquire_many only: free, but not taken because another lease of
                       its request was held */
} RlLeaseResult;

typedef struct _RlStore RlStore;

/* One lease seen by RlStoreVTable.list; the strings are g_free()d by the caller. */
typedef struct
{
  char *key;
  char *value;
  gint64 pttl_ms;
} RlStoreEntry;

/* One live place in a lock's wait queue seen by RlStoreVTable.queue_list; the client id
 * is g_free()d by the caller. */
typedef struct
{
  char *client_id;
  gint64 since_us; /* when it took its place: wall-clock µs (Redis: the server's clock) */
} RlStoreQueueEntry;

/* One lease of a request on several at once (acquire_many, release_many, and the
 * stepwise requests below). */
typedef struct
{
  const char *key;
  const char *value;     /* this acquisition's, or the hold's */
  gint64 ttl_ms;         /* stepwise acquire and renew: the TTL to set */
  const char *fence_key; /* acquire_many: NULL, or a counter as for acquire's */
  RlLeaseResult result;  /* out */
  guint64 token;         /* out: acquire_many with a fence_key, when taken */
  gint64 pttl_ms;        /* out: acquire_many, when HELD */
  gboolean others;       /* out: release_many, as release's *others */
} RlLeaseItem;

/* Called from a store thread when the lease @key (the full key) may have been
 * released; @key NULL means "any lease may have been": notifications were missed, or
 * the notification channel went up or down. @reset says more: a lease held there may
 * be gone without a release of ours. With @key NULL, the store's connection broke or
 * came back after having been up, or its deployment failed over (a restart without
 * persistence, writes a failover lost); with @key, someone forced @key open
 * (force_release, heard on the registry's forced-release channel): this is no echo of
 * a release of ours. */
typedef void (*RlStoreReleasedFunc) (const char *key, gboolean reset, gpointer user_data);

/* Called from a store thread when a release granted the lease @key to this registry
 * from its place in the key's wait queue: the key now holds @value (one of this
 * registry's lease values) with the TTL the place asked for, and @token is its fencing
 * token (0 without one). @user_data: the released callback's. */
typedef void (*RlStoreGrantedFunc) (const char *key, const char *value, guint64 token,
                                    gpointer user_data);

/* What a stepwise request (RlStoreVTable.request_begin) does to each of its leases:
 * what acquire, renew and release (without keep_ttl_ms) do to one. */
typedef enum
{
  RL_REQUEST_ACQUIRE,
  RL_REQUEST_RENEW,
  RL_REQUEST_RELEASE,
} RlRequestKind;

/* A request on several leases of one store, run in steps so that one thread can have
 * requests on several stores under way at once and wait for all of them with one
 * poll(). The store that made it owns everything; the caller reads the fields below,
 * which say what to wait for before the next step: @fd for @events (poll() flags), or
 * nothing when @ready (the next step needs no wait); @done once every lease has its
 * result. */
typedef struct
{
  int fd;
  short events;
  gboolean ready;
  gboolean done;
} RlRequest;

/* Shared settings and counters the store reads and updates; owned by the registry. */
typedef struct
{
  gint64 connect_timeout_ms; /* atomic */
  gint64 command_timeout_ms; /* atomic */
  gint64 min_replicas;       /* atomic: replicas that must acknowledge a write; 0: none */
  gint64 replica_timeout_ms; /* atomic: how long WAIT waits for them */
  gint64 quorum_node_timeout_ms; /* atomic: the quorum store's per-node bound; 0: min(50 ms, TTL/20) */
  gint key_tracking;             /* atomic: waiters also hear of keys changed without a
                                    notification (Redis key tracking); 0: off */
  gint legacy_channel;           /* atomic: releases also publish on `registry_key-channel`
                                    (older Spring releases' one channel); 0: off */
  gint classic_off;              /* atomic: on a Cluster, releases publish on the key's shard
                                    channel only, not classically too; 0: both (default) */
  gint wait_queue;               /* atomic: waiters take a place in the lock's wait queue
                                    and releases grant to its head (acquire_queued); 0: off */
  RedisLockRegistryStats *stats;
} RlStoreContext;

/* Read-write locks: the keys of one read-write lock, all in one Cluster slot (they
 * share the hash tag `{name}`), so one script can read and write them together. */
typedef struct
{
  const char *writer;        /* the writer lease */
  const char *waiting;       /* a waiting writer's mark: holds its registry's client id */
  const char *readers;       /* the index of the client ids that took a reader lease */
  const char *reader_prefix; /* a reader lease is this prefix and its client id */
  const char *reader;        /* this registry's reader lease */
  const char *owner;         /* this registry's client id */
} RlRwKeys;

/* What a read-write acquisition asks for. */
typedef enum
{
  RL_RW_READ,      /* this registry's reader lease: held back by another owner's writer
                      lease and by another owner's waiting writer */
  RL_RW_DOWNGRADE, /* the same while this registry holds the writer lease: a waiting
                      writer does not hold it back */
  RL_RW_WRITE,     /* the writer lease: held back by another owner's writer lease and by
                      another owner's live reader lease; while held back, it marks the
                      lock as wanted by a waiting writer */
} RlRwMode;

/* The lock family's entries of the store vtable (RlStoreVTable below says what each
 * does), as function types, so that the stores' files declare them with the seam's own
 * signatures. */
typedef RlLeaseResult RlStoreSemaphoreAcquireFunc (RlStore *store, const char *sem_key,
                                                   guint permits, guint start, const char *value,
                                                   gint64 ttl_ms, gint64 deadline, guint *slot,
                                                   gint64 *pttl_ms, GError **error);
typedef gboolean RlStoreSemaphoreAvailableFunc (RlStore *store, const char *sem_key, guint permits,
                                                guint *available, GError **error);
typedef RlLeaseResult RlStoreRwAcquireFunc (RlStore *store, const RlRwKeys *keys, RlRwMode mode,
                                            const char *value, gint64 ttl_ms, gint64 deadline,
                                            gint64 *pttl_ms, GError **error);
typedef gboolean RlStoreRwStopWaitingFunc (RlStore *store, const RlRwKeys *keys, gint64 deadline,
                                           GError **error);

typedef struct
{
  /* Takes the lease @key for @ttl_ms with @value (unique to this acquisition) if it is
   * free or already holds @value. When another owner holds it: RL_LEASE_HELD with its
   * remaining TTL in *pttl_ms (-1: no expiry). The call ends by @deadline (monotonic
   * µs; 0: the command timeout from now, see rl_store_deadline()), which bounds each
   * exchange's poll() and the setting up of a new connection; when it passes the
   * outcome is unknown and the result is RL_LEASE_ERROR. With @fence_key (see
   * rl_store_fence_key()), taking the lease and
   * moving that counter on to max (counter + 1, the store's clock in microseconds)
   * are one atomic step, and *token is its new value; without, nothing but the lease
   * is touched. */
  RlLeaseResult (*acquire) (RlStore *store, const char *key, const char *value, gint64 ttl_ms,
                            gint64 deadline, const char *fence_key, guint64 *token,
                            gint64 *pttl_ms, GError **error);
  /* Takes the @n leases of @items (distinct keys) for @ttl_ms each, as acquire does
   * one, in as few round trips as the store can (one per server); the leases that can
   * be taken in one atomic step (all of them on one server; those of one slot on a
   * Cluster) are taken all or none. Each item ends OK (taken, with its token when it
   * has a fence_key), HELD (another owner holds it, for pttl_ms), SKIPPED (free, but
   * not taken along with a held one) or ERROR (outcome unknown). Returns FALSE with
   * @error when an item ended ERROR; items taken meanwhile are the caller's to
   * release. @deadline as for acquire. Either all items have a fence_key or none.
   * @contended: an earlier attempt of the caller met a held lease; a store that tries
   * a cheaper way first (which can take part of a set) then goes straight to the all
   * or none one. */
  gboolean (*acquire_many) (RlStore *store, guint n, RlLeaseItem *items, gint64 ttl_ms,
                            gint64 deadline, gboolean contended, GError **error);
  /* Extends the lease @key holding @value to @ttl_ms; RL_LEASE_LOST when it is gone or
   * holds another value. */
  RlLeaseResult (*renew) (RlStore *store, const char *key, const char *value, gint64 ttl_ms,
                          GError **error);
  /* Deletes the lease @key if it holds @value and notifies waiters; never touches a
   * key holding another value (RL_LEASE_LOST). *others tells whether a client other
   * than this store's registry received the notification (a waiter of another process
   * or registry may be among them). With @keep_ttl_ms > 0 the lease is deleted only
   * when one did; otherwise it stays ours with its TTL reset to @keep_ttl_ms, and the
   * result is RL_LEASE_KEPT. Either way, as one atomic step in the store. */
  RlLeaseResult (*release) (RlStore *store, const char *key, const char *value,
                            gint64 keep_ttl_ms, gboolean *others, GError **error);
  /* Releases the @n leases of @items (distinct keys, each holding its value) as
   * release does with no keep_ttl_ms, in one round trip per server. Each item ends
   * OK, LOST or ERROR (with others set as release sets it); returns FALSE with the
   * first item's @error when one ended ERROR. */
  gboolean (*release_many) (RlStore *store, guint n, RlLeaseItem *items, GError **error);
  /* Renews @n leases (@keys[i] holding @values[i]) in one batch, bounded by
   * @deadline (as for acquire) as a whole. Fills @results (OK or LOST each) and returns TRUE, or
   * returns FALSE with @error when the batch failed as a whole; *round_trips counts
   * the exchanges it took. */
  gboolean (*renew_batch) (RlStore *store, guint n, const char *const *keys,
                           const char *const *values, const gint64 *ttls, RlLeaseResult *results,
                           gint64 deadline, guint *round_trips, GError **error);
  /* Deletes the lease @key whoever holds it and notifies its waiters (telling its
   * holder, see RlStoreReleasedFunc), as one atomic step (an operator's recovery from
   * a crashed holder): RL_LEASE_OK when a key was deleted, RL_LEASE_LOST when there
   * was none, RL_LEASE_ERROR with @error. A key that is no lease is left alone:
   * RL_LEASE_ERROR with REDIS_LOCK_ERROR_INVALID when it is not a string, or, with
   * @ours_only, when its value is not a lease value of this library
   * (rl_store_is_lease_value()): a name of the family's other keys' shape (a
   * read-write lock's readers set or waiting mark, a semaphore's size) is forced only
   * when it is a plain lock's lease so named. */
  RlLeaseResult (*force_release) (RlStore *store, const char *key, gboolean ours_only,
                                  GError **error);
  /* What the store holds for @key: TRUE with its value (g_free()) and remaining TTL
   * (-1: no expiry) when it exists; FALSE without @error when it does not. */
  gboolean (*inspect) (RlStore *store, const char *key, char **value, gint64 *pttl_ms,
                       GError **error);
  /* The fencing counter @fence_key: TRUE with its value when it exists; FALSE without
   * @error when it does not. */
  gboolean (*read_counter) (RlStore *store, const char *fence_key, guint64 *value,
                            GError **error);
  /* Every lease of this store's registry key (keys `registry_key:*`): appends one
   * RlStoreEntry per key to @entries. */
  gboolean (*list) (RlStore *store, GArray *entries, GError **error);
  /* Release notifications. Starts them on first call. Returns TRUE when they are
   * confirmed running, so a failed attempt made from now on cannot miss the release
   * that follows it. Waits at most @timeout_ms (0: just tells), returning FALSE early
   * when an attempt to start them fails. */
  gboolean (*watch) (RlStore *store, gint64 timeout_ms);
  /* As watch, for a waiter of @key: a store whose releases are heard per key (a Cluster's shard channels) subscribes to @key's too. With
   * @join, the call also counts one more waiter of @key, until unwatch_key: the
   * subscription of a key ends as soon as its last waiter left. NULL in a store where
   * watch covers every key. */
  gboolean (*watch_key) (RlStore *store, const char *key, gboolean join, gint64 timeout_ms);
  /* A waiter of @key counted by watch_key (@join) left: acquired, gave up, cancelled
   * or closed. NULL when watch_key is. */
  void (*unwatch_key) (RlStore *store, const char *key);
  /* Sets release notifications up again when they run, so that a changed setting of
   * how they are made (key_tracking) applies; a release meanwhile is reported as
   * missed (key NULL). NULL in a store whose notifications have no such setting. */
  void (*rewatch) (RlStore *store);
  /* A lease is held: from now on the store keeps a connection open that notices a
   * restart of the server, a reset connection or a failover even when nobody waits,
   * and reports it as a reset (released with key NULL and reset TRUE), so that the
   * registry checks its leases at once. Returns whether that connection is up now:
   * while it is not (reconnecting after a break), a restart would go unnoticed, so a
   * lease is confirmed before it is handed on. NULL in a store that cannot lose a
   * lease that way (the memory store). */
  gboolean (*guard) (RlStore *store);
  /* Stepwise requests; NULL in a store that answers at once (the memory store), whose
   * acquire, renew and release the caller calls instead. request_begin queues @kind
   * on each of the @n @items (distinct keys, on one server) on a connection of the
   * request's own (a new one set up by @deadline, monotonic µs: the request's own bound,
   * which also caps a WAIT after its writes) and sends what it can without
   * waiting, or returns NULL with @error (every item ERROR) when none can be had;
   * @items stay the caller's and must outlive the request. The caller waits as the
   * request's fields say and hands what poll() reported (@revents, 0 when it did not
   * wait) to request_ready, which sends, reads and takes the next step (the script by
   * EVAL after NOSCRIPT, the acquire script for a key SET NX found taken, a fresh
   * connection for one that had gone stale), until done. request_end, when done or
   * whenever the caller's time ran out first, gives the connection back, fills each
   * item's result (and pttl_ms, others) as acquire, renew and release would (a lease
   * without an answer yet: ERROR, timed out), frees the request, and returns FALSE
   * with the first item's @error when an item ended ERROR, or HELD without knowing
   * for how long (the key existed, the request that would have said more failed: it
   * may have taken the key after all). */
  RlRequest *(*request_begin) (RlStore *store, RlRequestKind kind, guint n, RlLeaseItem *items,
                               gint64 deadline, GError **error);
  void (*request_ready) (RlRequest *request, short revents);
  gboolean (*request_end) (RlRequest *request, GError **error);

  /* semaphores ----------------------------------------------------------------------
   * A semaphore `registry_key:{NAME}:sem` (@sem_key) of N permits keeps its size N in
   * @sem_key (no expiry) and permit I (0 <= I < N) as the plain lease `@sem_key:I`,
   * which is renewed, released (its notification wakes the semaphore's waiters:
   * rl_store_semaphore_key()), inspected and forced as any other lease, through the
   * entries above. Only taking a permit and counting the free ones need the size, and
   * are the two entries below; NULL in a store that cannot keep a count of permits
   * (the quorum store). */
  /* Checks the stored size against @permits (storing it when there is none) and takes
   * the first free permit for @ttl_ms with @value, as one atomic step (one round trip),
   * starting the search at permit @start % @permits: RL_LEASE_OK with its index in
   * *slot; RL_LEASE_HELD when every permit is held, with the smallest remaining TTL in
   * *pttl_ms (-1: unknown, or a permit without expiry); RL_LEASE_ERROR with @error,
   * REDIS_LOCK_ERROR_INVALID naming both sizes when the stored size is another.
   * @start < @permits asks for a shortcut first, for a caller whose earlier call found
   * the size its own less than a size record's life ago (semaphore.c): permit @start
   * alone, as a plain lease (a Redis SET NX PX, no script), and the checked search
   * above only when it is held. The checked search also keeps a size record that no
   * other size may replace while it lasts, whatever happens to the size key.
   * @deadline as for acquire, for the call as a whole. */
  RlStoreSemaphoreAcquireFunc *semaphore_acquire;
  /* How many of the @permits permits of @sem_key are free, checking the stored size as
   * semaphore_acquire does. FALSE with @error. */
  RlStoreSemaphoreAvailableFunc *semaphore_available;

  /* Read-write locks -------------------------------------------------------------
   * NULL in a store that cannot hold them (the quorum store). */
  /* Takes the lease @mode asks for (@keys->writer or @keys->reader) with @value for
   * @ttl_ms, as one atomic step with the checks @mode names: RL_LEASE_OK, or
   * RL_LEASE_HELD with the remaining TTL of what holds it back in *pttl_ms (the
   * longest, -1: no expiry); RL_LEASE_ERROR with @error. A write held back leaves the
   * waiting mark (this registry's client id) until its TTL (at least @ttl_ms and the
   * holder's) runs out, it acquires, or rw_stop_waiting removes it; a mark newly set is
   * notified as a release of its key is, to every registry. The lease taken is
   * renewed and released as any other (renew, release). @deadline as for acquire. */
  RlStoreRwAcquireFunc *rw_acquire;
  /* A writer of this registry gave up: removes its waiting mark, if it is there, and
   * notifies the waiters for it (readers held back by it). @deadline as for acquire;
   * FALSE with @error when the store did not answer by then. */
  RlStoreRwStopWaitingFunc *rw_stop_waiting;

  /* waits-for records ----------------------------------------------------------
   * Who waits for whom (waits.c): one record per waiting acquisition of every
   * registry on this registry key, in any process, opaque to the store, all kept
   * where one request reads them whole (on Redis one hash, rl_store_waits_key(): one
   * key, so one Cluster slot), each with an expiry on the store's own clock, so that
   * the records of a process that died go away by themselves. */

  /* With @id: sets the record @id to @record, expiring @ttl_ms from now, or deletes it
   * when @record is NULL. With @records: appends a copy (g_free()) of every record
   * that has not expired (after the change), deleting the expired ones. One atomic
   * step, bounded by @deadline (monotonic µs; 0: the command timeout from now). NULL
   * in a store that keeps no records (the quorum store). */
  gboolean (*waits_update) (RlStore *store, const char *id, const char *record, gint64 ttl_ms,
                            GPtrArray *records, gint64 deadline, GError **error);

  /* Which server a blocking request for @key waits on, as an identity to compare and
   * never to dereference (it may be freed meanwhile): the registry's pool of workers for
   * asynchronous calls lets only a few of its requests wait on one server at once, so
   * that a server that stopped answering ties up those few and a call for a key on
   * another server of the same registry (a Cluster's other masters) still runs. NULL
   * when it is not known; a NULL slot in a store whose requests wait on all of its
   * servers together (the memory and quorum stores). */
  gconstpointer (*lane) (RlStore *store, const char *key);

  /* The wait queue ----------------------------------------------------------------
   * One place per registry and lock in a queue kept beside the lock's key
   * (rl_store_queue_key()), FIFO by arrival; NULL in a store that keeps none (the
   * quorum store), whose waiters are woken by notifications alone. While the registry's
   * wait_queue setting is on, release grants a lease released with a live place in its
   * queue to the queue's head in the same atomic step: the key is written with the
   * head's value and TTL (and, for a head queued with a fence key, the counter moved on
   * as acquire does), the place removed, and that registry alone told (RlStore.granted),
   * instead of the release's notification (*others is then TRUE). Other releases
   * (release_many, a doubtful release) notify as before: a queued waiter hears it too,
   * and its attempt grants the free key to the queue's head.
   *
   * As acquire, for a waiter that stays in line: when the key is held by another owner,
   * the registry's place in the queue is taken (or kept, its position unchanged) with
   * @value and @ttl_ms, alive for RL_QUEUE_ENTRY_LIFE_MS from now, and *queued is TRUE.
   * A free key whose queue has a live head other than this registry is granted to that
   * head and the place taken (HELD); otherwise it is taken (OK) and the place left.
   * @prev_value (NULL: none): the value of the caller's previous place, which a grant
   * may already have written into the key: the key holding it counts as ours (taken,
   * now holding @value). @contended: an earlier attempt found the key held, so the
   * plain SET NX that tries a free key first is skipped. For a key that can have no
   * queue (rl_store_queue_key() NULL), or while the store keeps none (the Redis store
   * with min_replicas), this is acquire, and *queued stays FALSE. */
  RlLeaseResult (*acquire_queued) (RlStore *store, const char *key, const char *value,
                                   const char *prev_value, gint64 ttl_ms, gint64 deadline,
                                   const char *fence_key, gboolean contended, guint64 *token,
                                   gint64 *pttl_ms, gboolean *queued, GError **error);
  /* A waiter queued with @value gave up: its place is removed, and when the key already
   * holds @value (granted meanwhile) it is released at once, granting to the next, as
   * one atomic step. */
  gboolean (*leave_queue) (RlStore *store, const char *key, const char *value, GError **error);
  /* Appends an RlStoreQueueEntry per live place in @key's queue to @entries, first in
   * line first; a place whose life ran out (its waiter crashed) is not listed. Nothing
   * for a key that can have no queue. Reads only. */
  gboolean (*queue_list) (RlStore *store, const char *key, GArray *entries, GError **error);

  /* Stops background threads; the store stays usable for single calls. */
  void (*close) (RlStore *store);
  void (*free) (RlStore *store);
} RlStoreVTable;

/* Defines `static const RlStoreVTable PREFIX_vtable`, each entry every store has filled
 * by the function of the same name after PREFIX_ (PREFIX_acquire ... PREFIX_free), so a
 * store lists them here once and one it lacks is a compile error. The entries a store
 * may leave NULL (as said of each above) are named in the arguments after PREFIX, as
 * designated initializers. */
#define RL_DEFINE_STORE_VTABLE(PREFIX, ...)                                                        \
  static const RlStoreVTable PREFIX##_vtable = {                                                   \
    .acquire = PREFIX##_acquire,                                                                   \
    .acquire_many = PREFIX##_acquire_many,                                                         \
    .renew = PREFIX##_renew,                                                                       \
    .release = PREFIX##_release,                                                                   \
    .release_many = PREFIX##_release_many,                                                         \
    .renew_batch = PREFIX##_renew_batch,                                                           \
    .force_release = PREFIX##_force_release,                                                       \
    .inspect = PREFIX##_inspect,                                                                   \
    .read_counter = PREFIX##_read_counter,                                                         \
    .list = PREFIX##_list,                                                                         \
    .watch = PREFIX##_watch,                                                                       \
    .close = PREFIX##_close,                                                                       \
    .free = PREFIX##_free,                                                                         \
    __VA_ARGS__                                                                                    \
  }

/* The lock family's entries (semaphores, read-write locks, waits-for records) of a
 * store that keeps them all, filled from PREFIX as RL_DEFINE_STORE_VTABLE() fills the
 * others: an argument of RL_DEFINE_STORE_VTABLE(). */
#define RL_STORE_FAMILY_ENTRIES(PREFIX)                                                            \
  .semaphore_acquire = PREFIX##_semaphore_acquire,                                                 \
  .semaphore_available = PREFIX##_semaphore_available,                                             \
  .rw_acquire = PREFIX##_rw_acquire,                                                               \
  .rw_stop_waiting = PREFIX##_rw_stop_waiting,                                                     \
  .waits_update = PREFIX##_waits_update

/* The value a held key stores: the registry's client id, ":", and a number unique to
 * the acquisition in the registry, so that a request that reaches the store late can
 * never match a later hold of the same registry. */
#define RL_LEASE_VALUE_MAX 192

/* Whether @value has the shape of a hold's value of this library: a client id, which
 * ends in `:` and 32 hexadecimal digits (registry.c), then `:` and a decimal number.
 * Neither a waiting writer's mark (a client id alone) nor a semaphore's size (a
 * number) has it. The force release script checks the same shape. */
static inline gboolean
rl_store_is_lease_value (const char *value)
{
  gsize len = strlen (value), i = len;

  while (i > 0 && g_ascii_isdigit (value[i - 1]))
    i--;
  if (i == len || i < 34 || value[i - 1] != ':' || value[i - 34] != ':')
    return FALSE;
  for (gsize k = i - 33; k < i - 1; k++)
    if (!g_ascii_isxdigit (value[k]))
      return FALSE;
  return TRUE;
}

/* The deadline a store call ends by: @deadline (monotonic µs) as given, or 0 for the
 * command timeout from now. */
static inline gint64
rl_store_deadline (RlStoreContext *ctx, gint64 deadline)
{
  if (deadline > 0)
    return deadline;
  return g_get_monotonic_time () + RL_ATOMIC_GET (ctx->command_timeout_ms) * 1000;
}

/* The key of the fencing counter of the lease @key, in the same Cluster slot as @key on
 * every store, so that fenced code means the same wherever it runs: `fence:{KEY}`, or
 * `fence:KEY` when @key has a hash tag of its own (its first `{`, then the first `}`
 * after it, with something between). NULL when the two cannot share a slot: @key has
 * no hash tag but a `}`, which would end the added tag early. Free with g_free(). */
static inline char *
rl_store_fence_key (const char *key)
{
  const char *open = strchr (key, '{');
  const char *close = open != NULL ? strchr (open + 1, '}') : NULL;

  if (close != NULL && close > open + 1)
    return g_strconcat ("fence:", key, NULL);
  if (strchr (key, '}') != NULL)
    return NULL;
  return g_strconcat ("fence:{", key, "}", NULL);
}

/* The most permits a semaphore may have: taking one and counting the free ones look at
 * every permit (O(N) work in the store, within one atomic step). */
#define RL_SEMAPHORE_MAX_PERMITS 1024

/* The semaphore key a permit key `SEM_KEY:I` (I decimal digits) belongs to, when @key
 * is one: its length (the permit's key without `:I`); 0 otherwise. A release of a
 * permit is heard under the permit's key; the semaphore's waiters are woken by it. */
static inline gsize
rl_store_semaphore_key_len (const char *key)
{
  gsize len = strlen (key), i = len;

  while (i > 0 && g_ascii_isdigit (key[i - 1]))
    i--;
  if (i == len || i < 5 || key[i - 1] != ':' || memcmp (key + i - 5, ":sem", 4) != 0)
    return 0;
  return i - 1;
}

/* How long a place in a lock's wait queue lives unless its registry refreshes it (the
 * next attempt of its waiter does, at least every RL_QUEUE_REFRESH_MS): the bound on
 * how long the place of a crashed waiter stays in line. */
#define RL_QUEUE_ENTRY_LIFE_MS 3000
#define RL_QUEUE_REFRESH_MS 1000

/* The wait queue of the lease @key (a sorted set of client ids by arrival; each place's
 * value, TTL and fencing flag are the string key `QUEUE_KEY:CLIENT_ID`, which expires
 * with the place), in @key's Cluster slot as rl_store_fence_key()'s counter: `queue:{KEY}`,
 * or `queue:KEY` when @key has a hash tag of its own. NULL when the two cannot share a
 * slot: such a lock has no queue, and its waiters are woken by notifications alone.
 * Free with g_free(). */
static inline char *
rl_store_queue_key (const char *key)
{
  const char *open = strchr (key, '{');
  const char *close = open != NULL ? strchr (open + 1, '}') : NULL;

  if (close != NULL && close > open + 1)
    return g_strconcat ("queue:", key, NULL);
  if (strchr (key, '}') != NULL)
    return NULL;
  return g_strconcat ("queue:{", key, "}", NULL);
}

/* The name of the read-write lock whose key has @tail after `registry_key:`
 * (`{name}:rw:…`), or NULL (g_free()). */
static inline char *
rl_store_rw_name_of_key (const char *tail)
{
  const char *end = NULL;

  if (tail[0] != '{')
    return NULL;
  for (const char *p = strstr (tail, "}:rw:"); p != NULL; p = strstr (p + 1, "}:rw:"))
    end = p;
  return end != NULL ? g_strndup (tail + 1, end - tail - 1) : NULL;
}

/* Where the waits-for records of @registry_key live: `waits:{REGISTRY_KEY}`, outside
 * the `registry_key:` names of locks, so that no lock name can meet it. Free with
 * g_free(). */
static inline char *
rl_store_waits_key (const char *registry_key)
{
  return g_strconcat ("waits:{", registry_key, "}", NULL);
}

struct _RlStore
{
  const RlStoreVTable *vt;
  char *client_id;
  char *registry_key;
  RlStoreContext *ctx;
  RlStoreReleasedFunc released;
  gpointer released_data;
  RlStoreGrantedFunc granted; /* set by the registry after opening; NULL: grants unheard */
};

/* The store's watch for a waiter of @key, which with @join
 * starts counting as one (to end with rl_store_unwatch()). */
static inline gboolean
rl_store_watch (RlStore *store, const char *key, gboolean join, gint64 timeout_ms)
{
  if (store->vt->watch_key != NULL)
    return store->vt->watch_key (store, key, join, timeout_ms);
  return store->vt->watch (store, timeout_ms);
}

/* A waiter of @key that joined (rl_store_watch() with join) left. */
static inline void
rl_store_unwatch (RlStore *store, const char *key)
{
  if (store->vt->unwatch_key != NULL)
    store->vt->unwatch_key (store, key);
}

/* Opens the store named by @url (redis://, unix://, memory://) (store.c). */
RlStore *rl_store_open (const char *url, const char *registry_key, const char *client_id,
                        RlStoreContext *ctx, RlStoreReleasedFunc released, gpointer released_data,
                        GError **error);

/* The Redis store of redis-store.c, for redis:// and unix:// URLs. */
RlStore *rl_redis_store_open (const char *url, const char *registry_key, const char *client_id,
                              RlStoreContext *ctx, RlStoreReleasedFunc released,
                              gpointer released_data, GError **error);

/* The in-process store of memory-store.c, for a @url starting with `memory://`. */
RlStore *rl_memory_store_open (const char *url, const char *registry_key, const char *client_id,
                               RlStoreContext *ctx, RlStoreReleasedFunc released,
                               gpointer released_data, GError **error);

/* The quorum store of quorum-store.c: the NULL-terminated @urls (N >= 1, each any
 * single-master URL) as N child stores, a lease being held when a majority holds it
 * (Redlock). Fails with CONNECTION when fewer than a majority can be opened. */
RlStore *rl_quorum_store_open (const char *const *urls, const char *registry_key,
                               const char *client_id, RlStoreContext *ctx,
                               RlStoreReleasedFunc released, gpointer released_data,
                               GError **error);

/* Fills the common fields of @store, a store's own structure being opened; what it
 * copies, rl_store_free() frees. */
static inline void
rl_store_init (RlStore *store, const RlStoreVTable *vt, const char *registry_key,
               const char *client_id, RlStoreContext *ctx, RlStoreReleasedFunc released,
               gpointer released_data)
{
  store->vt = vt;
  store->client_id = g_strdup (client_id);
  store->registry_key = g_strdup (registry_key);
  store->ctx = ctx;
  store->released = released;
  store->released_data = released_data;
}

static inline void
rl_store_free (RlStore *store)
{
  g_free (store->client_id);
  g_free (store->registry_key);
  store->vt->free (store);
}

#endif /* RL_STORE_H */
