/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* redis-store-private.h: what the Redis store's protocol files share.
 *
 * redis-exchange.c holds the exchange engine (routing by key and Cluster slot,
 * MOVED/ASK, retries, NOSCRIPT, stale connections, key tracking, WAIT for replicas);
 * redis-store.c the plain lease scripts, the vtable and opening, over redis-lease.c
 * (one lease), redis-batch.c (several), redis-inspect.c (inspection) and
 * redis-request.c (the quorum store's stepwise requests); the scripts of the other
 * members of the lock family live in files of their own (redis-semaphore.c,
 * redis-rwlock.c) and reach the engine only through the rl_redis_store_ calls below,
 * so that the engine stays one copy and knows nothing of what their replies mean. The
 * calls go one way: redis-store.c refers to the family's functions only from its
 * vtable.
 */
#ifndef RL_REDIS_STORE_PRIVATE_H
#define RL_REDIS_STORE_PRIVATE_H

#include <hiredis/hiredis.h>

#include "connection.h"
#include "notify.h"
#include "notify-shard.h"
#include "store.h"
#include "sync.h"
#include "topology.h"

/* A Lua script: its text and the SHA-1 that EVALSHA names it by. @once: a second
 * sending could not tell what the first did (a release: "no such key" after the
 * first deleted it reads as a lost lease), so a command of it is never sent on a
 * pooled connection without checking first that its server has not closed it. */
typedef struct
{
  const char *text;
  char sha[41];
  gboolean once;
} RlScript;

/* Whether a reply is a write that replicas must acknowledge (WAIT). */
typedef gboolean (*RlWroteFunc) (const redisReply *reply);

void rl_redis_script_init (RlScript *script, const char *text);

/* Sends @argv (argv[0..1] are EVALSHA and the SHA-1 of @script when it is not NULL) to
 * the node serving @key and returns the reply, NULL with @error on failure or an error
 * reply, by the monotonic @deadline (0: the command timeout from now). With @wrote, *@acked tells
 * whether enough replicas acknowledged a write; with @track, the keys the command
 * reads are tracked for the registry's waiters (see redis-exchange.c's rl_redis_call_tracked()). */
redisReply *rl_redis_store_call (RlStore *store, const char *key, int argc, const char **argv,
                                 const RlScript *script, gint64 deadline, RlWroteFunc wrote,
                                 gboolean *acked, gboolean track, GError **error);
/* Sets NOT_REPLICATED for the @what ("acquisition") of @key. */
void rl_redis_store_not_replicated (RlStore *store, const char *what, const char *key,
                                    GError **error);

/* A lease script's reply that says the lease was taken (any other integer is the
 * remaining TTL of what holds it back). */
#define RL_SCRIPT_ACQUIRED (-3)

/* rl_redis_store_call() for a lease script whose first key (argv[3]) routes it and
 * whose reads are tracked for a waiter, as the acquire script's are: the reply
 * (freeReplyObject()), never an error reply, or NULL with @error. When the reply is
 * RL_SCRIPT_ACQUIRED and replicas must acknowledge writes, *@acked tells whether
 * enough did; otherwise it is TRUE. */
redisReply *rl_redis_store_eval (RlStore *store, const RlScript *script, int argc,
                                 const char **argv, gint64 deadline, gboolean *acked,
                                 GError **error);
/* A lease (@key holding @value) too few replicas acknowledged: released again;
 * RL_LEASE_ERROR with NOT_REPLICATED. */
RlLeaseResult rl_redis_store_unreplicated (RlStore *store, const char *key, const char *value,
                                           GError **error);
/* The channel a release of @key is published on (g_free()). */
char *rl_redis_store_channel (RlStore *store, const char *key);
/* On a Cluster, the shard channel a release of @key is published on (SPUBLISH) and its
 * waiters subscribe to (g_free()): that of the key whose waiters a release of @key may
 * let in (the keys of one read-write lock share their writer lease's, the permits of a
 * semaphore the semaphore's; any other key, its own), in @key's slot. NULL elsewhere. */
char *rl_redis_store_shard_channel (RlStore *store, const char *key);
/* The classic channel argument of a script that publishes a release on @channel and,
 * on a Cluster, on @shard (rl_redis_store_shard_channel()): @channel, or '' when the
 * registry's classic notifications are off there. */
const char *rl_redis_store_classic (RlStore *store, const char *shard, const char *channel);

/* redis-semaphore.c: the store seam's semaphore entries (store.h). */
RlStoreSemaphoreAcquireFunc rl_redis_semaphore_acquire;
RlStoreSemaphoreAvailableFunc rl_redis_semaphore_available;

/* redis-rwlock.c: the read-write lock's entries of the vtable (store.h). */
RlStoreRwAcquireFunc rl_redis_rw_acquire;
RlStoreRwStopWaitingFunc rl_redis_rw_stop_waiting;
/* redis-readers.c: reader leases, for the lease code. When @key is the reader lease of a read-write lock held with @value (the reader
 * lease of the registry whose client id @value starts with): the key of the lock's
 * readers index (g_free()), with the registration's member, the client id, in *@id
 * (g_free()); else NULL. */
char *rl_redis_rw_reader_index (const char *key, const char *value, char **id);
/* The script that renews a reader lease (KEYS: the lease, its index; ARGV: the value,
 * the TTL in ms, the client id), as RENEW replies, lost too when the registration is
 * gone from the index. */
const RlScript *rl_redis_rw_renew_reader_script (void);
/* Whether the reader lease @key, found holding @value, is still registered in its
 * index (*@registered; TRUE for any other key, without a request). FALSE with @error. */
gboolean rl_redis_rw_registered (RlStore *store, const char *key, const char *value,
                                 gboolean *registered, GError **error);

/* The Redis store's own files share what follows (redis-store.c the scripts, the vtable
 * and opening; redis-lease.c the single-lease operations; redis-batch.c the batched ones;
 * redis-inspect.c the inspection calls; redis-request.c the stepwise requests; all of
 * them over redis-exchange.c, the exchange engine). */

/* On Sentinel, the releases remembered: those made shortly before the registry learns
 * of a failover went to the old master, maybe after the new one had been promoted
 * and had given the lock to another holder (asynchronous replication had not told it
 * of the hold). They are counted and logged as doubtful (stats.doubtful_releases). */
#define RL_RECENT_RELEASES 64
#define RL_DOUBT_WINDOW_US (2 * G_USEC_PER_SEC)

typedef struct
{
  RlStore parent;
  RlTopology *topology;
  RlNotifier *notifier;
  RlShardNotifier *shard; /* a Cluster's shard-channel subscriber; NULL elsewhere */
  char *channel_prefix; /* registry_key "-channel:" */
  char *forced_channel; /* registry_key "-forced": forced releases, for their holders */
  char *legacy_channel; /* registry_key "-channel": older Spring releases' one channel */
  char *pattern;        /* the glob of every channel_prefix channel */
  char *key_prefix;     /* registry_key ":": the keys of the registry */
  RlScript acquire, release, renew;
  RlScript fenced_acquire, acquire_all; /* with fencing, and for several leases at once */
  RlScript force_release;               /* an operator's delete, whoever holds the key */
  RlScript waits;                       /* the waits-for records (redis-waits.c) */
  RlScript queued_acquire, queued_release; /* the wait queue's (redis-queue.c) */
  char *grant_prefix; /* registry_key "-grant:": a registry's grants, on its client id */
  gboolean slotted; /* a Cluster: a script's keys must share a slot */
  gboolean sentinel; /* a Sentinel deployment: releases are remembered for a while */
  gint publish_refused; /* atomic: the missing channel permission was reported */

  RlMutex recent_mutex;                       /* guards the two below */
  gint64 recent_releases[RL_RECENT_RELEASES]; /* monotonic µs of the latest releases, 0:
                                                 none; a ring */
  guint recent_next;
} RlRedisStore;

/* The integer replies of the lease scripts (redis-store.c), as redis-lease.c and
 * redis-request.c read them: ACQUIRE's "taken", and RELEASE's outcomes. */
#define RL_ACQUIRED (-3)
#define RL_RELEASE_KEPT (-1)
#define RL_RELEASE_LOST 0
#define RL_RELEASE_OTHERS 2
#define RL_RELEASE_UNPUBLISHED 3
#define RL_RELEASE_GRANTED 4 /* QUEUED RELEASE: granted to the queue's head */

/* What the last WAIT of this thread that fell short found, for the NOT_REPLICATED
 * message that follows it in the same thread (rl_redis_set_not_replicated()): the node, the
 * replicas that acknowledged and those connected to it (ROLE), -1 when unknown. */
typedef struct
{
  char node[128];
  gint64 acked;
  gint64 connected;
} RlWaitShortfall;
extern _Thread_local RlWaitShortfall rl_redis_wait_shortfall;

/* Where a command of a pipelined request stands. */
enum
{
  RL_PIPE_UNSENT, /* to be sent in the next exchange */
  RL_PIPE_SENT,   /* in the exchange under way */
  RL_PIPE_DONE,   /* reply or error final */
  RL_PIPE_ALONE,  /* redirected or "try again": for the single-command path */
};

/* One command of a pipelined request: EVALSHA of @script with @argv (argv[0] and
 * argv[1] are set by the engine: EVALSHA, or EVAL after NOSCRIPT), or @argv as it is
 * without a script, sent to the node that serves @route. */
typedef struct
{
  const RlScript *script; /* NULL: a plain command */
  const char *route;
  int argc;
  const char **argv;
  redisReply *reply;     /* out: the reply, never an error reply; NULL with @error */
  GError *error;         /* out */
  gboolean retried;      /* out: sent again after a stale connection broke (see rl_redis_call()) */
  gboolean unreplicated; /* out: with @wrote, too few replicas acknowledged its write */
  guint8 state;          /* where it stands, above */
  gboolean eval;         /* the script goes by its text (the node answered NOSCRIPT) */
  gboolean wrote;        /* its reply in the exchange under way was a write */
  gboolean sent;         /* out: it went out on a connection at least once */
  redisReply *redirect;  /* out, ALONE: the error reply that redirected it */
  gboolean refused;      /* out: @error is the node's error reply, not a failed connection */
} RlPipeCommand;

/* A caller's follow-up to the non-error @reply of @cmd (@data as given): TRUE when it
 * armed @cmd's next command (its script, argc and argv), which goes in the next
 * exchange on the same connection, and the reply is dropped; FALSE keeps the reply as
 * the command's. */
typedef gboolean (*RlFollowFunc) (gpointer data, RlPipeCommand *cmd, const redisReply *reply);

/* redis-node-exchange.c: the pipelined exchange of the commands one node serves, on
 * one connection, driven blocking (rl_node_exchange_run(); every node at once by
 * rl_redis_pipeline()) or by the caller's poll (redis-request.c):
 * rl_node_exchange_queue() appends what is to be sent (0: nothing, every command is
 * final), the connection's replies go to rl_node_exchange_reply()
 * until rl_node_exchange_complete(), a connection that failed to
 * rl_node_exchange_broke() (TRUE: the commands go again on a fresh one); then queue
 * again. rl_node_exchange_free() ends what has not ended with a timeout error. */
typedef struct _RlNodeExchange RlNodeExchange;
/* Its fields are redis-node-exchange.c's alone; they are here so that a single command
 * (redis-exchange.c) keeps its exchange on the stack. */
struct _RlNodeExchange
{
  RlRedisStore *self;
  RlNode *node;
  RlConn *conn;     /* NULL until connected, and after it failed for good */
  gboolean reused;  /* the connection came from the pool */
  gboolean retried; /* sent again on a fresh connection after a stale one broke */
  RlPipeCommand *cmds;
  /* The commands of this node, in the order they are sent: indexes into cmds (a plain
   * array: GArray's header comes from GSlice, which ThreadSanitizer cannot follow). */
  guint *idx;
  guint n_idx, idx_size;
  guint idx_one;    /* idx's storage while there is one command */
  RlWroteFunc wrote;
  RlFollowFunc follow;
  gpointer data;
  gint64 deadline;  /* monotonic µs */
  guint expected;   /* replies of the exchange under way */
  guint got;        /* of them, read */
  guint next;       /* where the next reply's command is looked for in idx */
  guint sent;       /* commands sent in the exchange under way */
  guint answered;   /* of them, answered: a reply after the last is WAIT's */
  gboolean waited;  /* a WAIT follows them */
  guint exchanges;
  gboolean asking;  /* ASKING goes before the commands (a slot being imported) */
  gint64 track_id;  /* the reads of the commands are tracked for this client; 0: not */
  guint prefix;     /* replies before the commands' own: key tracking's, ASKING's */
  guint tracking;   /* of them, key tracking's */
  gboolean short_wait; /* the WAIT of the exchange under way counted too few replicas */
};
/* An exchange in caller-owned memory: rl_node_exchange_init() ... rl_node_exchange_clear(),
 * as rl_node_exchange_new() ... rl_node_exchange_free() on the heap. */
void rl_node_exchange_init (RlNodeExchange *ex, RlRedisStore *self, RlNode *node,
                            RlPipeCommand *cmds, RlWroteFunc wrote, RlFollowFunc follow,
                            gpointer data, gint64 deadline);
void rl_node_exchange_clear (RlNodeExchange *ex);
RlNodeExchange *rl_node_exchange_new (RlRedisStore *self, RlNode *node, RlPipeCommand *cmds,
                                      RlWroteFunc wrote, RlFollowFunc follow, gpointer data,
                                      gint64 deadline);
/* ASKING before the commands (@asking), and key tracking of what they read for the
 * client @track_id (0: none), in every exchange. */
void rl_node_exchange_set_prefix (RlNodeExchange *ex, gboolean asking, gint64 track_id);
void rl_node_exchange_add (RlNodeExchange *ex, guint i);
/* Reads the replies of the exchange under way on @ex's connection, in order, blocking
 * (no poll first); FALSE when the connection failed. */
gboolean rl_node_exchange_read (RlNodeExchange *ex);
/* Drives @ex to its end on its own, blocking: every exchange sent and read in turn.
 * rl_node_exchange_queue() counts the commands in the registry's stats; the driver
 * counts its round trips. */
void rl_node_exchange_run (RlNodeExchange *ex);
RlNode *rl_node_exchange_node (RlNodeExchange *ex);
RlConn *rl_node_exchange_conn (RlNodeExchange *ex);
guint rl_node_exchange_queue (RlNodeExchange *ex);
void rl_node_exchange_reply (RlNodeExchange *ex, redisReply *reply);
gboolean rl_node_exchange_complete (RlNodeExchange *ex);
gboolean rl_node_exchange_broke (RlNodeExchange *ex);
void rl_node_exchange_free (RlNodeExchange *ex);
/* redis-exchange.c: sends the @n commands of @cmds, pipelined on one connection per
 * node that serves some of them, all nodes at once: one write and one round trip of
 * wall time per exchange; commands redirected or answered "try again" go alone through
 * rl_redis_call(). With @wrote and replicas required, a WAIT follows each node's
 * commands. By the monotonic @deadline (0: the command timeout from now). Each command
 * ends with its reply or its error. Returns the round trips it took. */
guint rl_redis_pipeline (RlRedisStore *self, guint n, RlPipeCommand *cmds, RlWroteFunc wrote,
                         gint64 deadline);
void rl_redis_pipe_command_clear (RlPipeCommand *cmd);

/* redis-exchange.c: the exchange engine. */
gboolean rl_redis_is_noscript (redisReply *reply);
gint64 rl_redis_min_replicas (RlRedisStore *self);
void rl_redis_set_not_replicated (RlRedisStore *self, GError **error, const char *what,
                                  const char *key);
redisReply *rl_redis_call_tracked (RlRedisStore *self, const char *key, int argc, const char **argv,
                                   const RlScript *script, gint64 deadline, gboolean *retried,
                                   RlWroteFunc wrote, gboolean *acked, gboolean track,
                                   GError **error);
redisReply *rl_redis_call (RlRedisStore *self, const char *key, int argc, const char **argv,
                           const RlScript *script, gint64 deadline, gboolean *retried,
                           RlWroteFunc wrote, gboolean *acked, GError **error);

/* redis-lease.c: the single-lease operations and what their replies mean. */
redisReply *rl_redis_run_script_argv (RlRedisStore *self, RlScript *script, int argc,
                                      const char **argv, gint64 deadline, gboolean *retried,
                                      RlWroteFunc wrote, gboolean *acked, GError **error);
gboolean rl_redis_wrote_set (const redisReply *reply);
gboolean rl_redis_wrote_acquire (const redisReply *reply);
gboolean rl_redis_wrote_renew (const redisReply *reply);
/* An acquisition's fast path: @key taken by a plain SET NX PX (no script) when free.
 * OK (taken, and acknowledged by the replicas asked for), HELD (the key exists: the
 * caller's script decides what that means), or as rl_redis_unreplicated_acquisition(). */
RlLeaseResult rl_redis_set_nx (RlRedisStore *self, const char *key, const char *value,
                               const char *ttl, gint64 deadline, GError **error);
RlLeaseResult rl_redis_unreplicated_acquisition (RlRedisStore *self, const char *key,
                                                 const char *value, GError **error);
gboolean rl_redis_reply_token (const redisReply *reply, guint64 *token);
RlLeaseResult rl_redis_acquire (RlStore *store, const char *key, const char *value, gint64 ttl_ms,
                                gint64 deadline, const char *fence_key, guint64 *token,
                                gint64 *pttl_ms, GError **error);
RlLeaseResult rl_redis_renew (RlStore *store, const char *key, const char *value, gint64 ttl_ms,
                              GError **error);
gboolean rl_redis_release_heard (RlRedisStore *self, long long result, const char *channel);
RlLeaseResult rl_redis_release_outcome (long long result, gboolean retried, const char *key,
                                        GError **error);
void rl_redis_remember_release (RlRedisStore *self);
void rl_redis_count_doubtful_releases (RlRedisStore *self);
const char *rl_redis_release_legacy (RlRedisStore *self, char own[2]);
/* The key whose shard channel carries the releases of @key (g_free()): see
 * redis-lease.c. */
char *rl_redis_notify_key (RlRedisStore *self, const char *key);
/* As rl_redis_store_shard_channel() and rl_redis_store_classic(), for the store's own
 * files. */
char *rl_redis_shard_channel (RlRedisStore *self, const char *key);
const char *rl_redis_classic_channel (RlRedisStore *self, const char *shard, const char *channel);
/* Completes RELEASE's @argv, whose first eight are set (ARGV[1..4]: the value, the
 * classic channel, @own, the TTL to keep or "0"), with the older Spring channel
 * @legacy (rl_redis_release_legacy()) and, on a Cluster, the key's @shard channel
 * (rl_redis_store_shard_channel()), the classic one then '' with classic notifications
 * off. Returns the argument count. */
int rl_redis_release_args (RlRedisStore *self, const char **argv, const char *legacy,
                           const char *shard);
RlLeaseResult rl_redis_release (RlStore *store, const char *key, const char *value,
                                gint64 keep_ttl_ms, gboolean *others, GError **error);

/* redis-lease.c: the wait queue's side of a release. Whether the queue is used now;
 * the queued form of the release script; the queue key of @key when it is used. */
gboolean rl_redis_queue_on (RlRedisStore *self);
redisReply *rl_redis_queued_release (RlRedisStore *self, const char *queue_key, const char *me,
                                     int argc, const char **argv, gboolean *retried,
                                     RlWroteFunc wrote, gboolean *acked, GError **error);
char *rl_redis_queue_of (RlRedisStore *self, const char *key);
/* redis-queue.c: the wait queue. */
RlLeaseResult rl_redis_acquire_queued (RlStore *store, const char *key, const char *value,
                                       const char *prev_value, gint64 ttl_ms, gint64 deadline,
                                       const char *fence_key, gboolean contended,
                                       guint64 *token, gint64 *pttl_ms, gboolean *queued,
                                       GError **error);
gboolean rl_redis_leave_queue (RlStore *store, const char *key, const char *value,
                               GError **error);
gboolean rl_redis_queue_list (RlStore *store, const char *key, GArray *entries, GError **error);

/* redis-batch.c: the batched lease operations. */
gboolean rl_redis_acquire_many (RlStore *store, guint n, RlLeaseItem *items, gint64 ttl_ms,
                                gint64 deadline, gboolean contended, GError **error);
gboolean rl_redis_release_many (RlStore *store, guint n, RlLeaseItem *items, GError **error);
gboolean rl_redis_renew_batch (RlStore *store, guint n, const char *const *keys,
                               const char *const *values, const gint64 *ttls,
                               RlLeaseResult *results, gint64 deadline, guint *round_trips,
                               GError **error);

/* redis-inspect.c: the inspection calls. */
RlLeaseResult rl_redis_force_release (RlStore *store, const char *key, gboolean ours_only,
                                      GError **error);
gboolean rl_redis_inspect (RlStore *store, const char *key, char **value, gint64 *pttl_ms,
                           GError **error);
gboolean rl_redis_read_counter (RlStore *store, const char *fence_key, guint64 *value,
                                GError **error);
gboolean rl_redis_list (RlStore *store, GArray *entries, GError **error);
char *rl_redis_glob_escape (const char *prefix);

/* redis-request.c: the stepwise requests of the quorum store. */
void rl_redis_request_ready (RlRequest *request, short revents);
gboolean rl_redis_request_end (RlRequest *request, GError **error);
RlRequest *rl_redis_request_begin (RlStore *store, RlRequestKind kind, guint n, RlLeaseItem *items,
                                   gint64 deadline, GError **error);

#endif /* RL_REDIS_STORE_PRIVATE_H */
