/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* memory-hooks.h: the private interface between the memory store (memory-store.c, in
 * libredislock) and its debugging hooks (testing/memory-hooks.c, in
 * libredislock-testing).
 *
 * The hooks of redislock-test.h (expire a lease, hand it to another owner, read a key's
 * owner and TTL) act on the memory store's lease tables, which live in the production
 * library and must stay there: `memory://` works without the testing library. The
 * production library exports production symbols only, so it cannot offer these
 * operations as functions another shared object links to (GLib, in the same position,
 * exports one private symbol, glib__private__(); ours exports none). Instead the memory
 * store hands out a table of its four operations as qdata of the registry's GType
 * (REDIS_LOCK_TYPE_REGISTRY, a public symbol both libraries see) under the quark
 * RL_MEMORY_HOOKS_QDATA, set when the first memory store opens. No table yet means no
 * memory store was ever opened in this process, so every hook answers "absent", which
 * is what it answers for a NAME no registry has open. GType qdata is read and written
 * under GLib's type lock, so the hand-over is thread-safe.
 *
 * Both libraries are built from one tree and redislock-testing.pc requires the same
 * version of redislock, but a table carries its version all the same, so that a mixed
 * installation fails loudly rather than calling a wrong slot. Nothing here is installed.
 */
#ifndef RL_MEMORY_HOOKS_H
#define RL_MEMORY_HOOKS_H

#include <glib.h>

/* The quark (as a string) under which the table is qdata of REDIS_LOCK_TYPE_REGISTRY. */
#define RL_MEMORY_HOOKS_QDATA "rl-memory-store-hooks"

/* Bumped whenever a slot of RlMemoryHooks changes meaning or place. */
#define RL_MEMORY_HOOKS_VERSION 1

/* The operations behind redis_lock_memory_store_expire(), _steal(), _get_owner() and
 * _get_pttl(), with the same arguments and results; the public functions check their
 * arguments before calling them. Each takes the memory store's mutex for itself. */
typedef struct
{
  guint version; /* RL_MEMORY_HOOKS_VERSION */
  gboolean (*expire) (const char *store_name, const char *key);
  gboolean (*steal) (const char *store_name, const char *key, const char *new_owner, gint64 ttl_ms);
  char *(*get_owner) (const char *store_name, const char *key);
  gint64 (*get_pttl) (const char *store_name, const char *key);
} RlMemoryHooks;

#endif /* RL_MEMORY_HOOKS_H */
