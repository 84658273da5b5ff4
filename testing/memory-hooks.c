/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* memory-hooks.c: redislock-test.h's debugging hooks of the `memory://NAME` store.
 *
 * With these a test plays the part of Redis behind a holder's back: a lease expires or
 * changes owner, and nobody is told, as with a real expiry. The leases they act on
 * belong to the memory store inside libredislock, which keeps them private; this file
 * checks the arguments and calls the store's own operations through the table it hands
 * out as qdata of the registry's GType (see ../memory-hooks.h for why, and why no table
 * means "no such store"). That keeps every test symbol out of the production library.
 */
#include "config.h"

#include <redislock/redislock.h>
#include <redislock/redislock-test.h>

#include "memory-hooks.h"

/* The memory store's table, or NULL when no memory store has been opened yet. */
static const RlMemoryHooks *
memory_hooks (void)
{
  const RlMemoryHooks *hooks;

  hooks = g_type_get_qdata (REDIS_LOCK_TYPE_REGISTRY,
                            g_quark_from_static_string (RL_MEMORY_HOOKS_QDATA));
  if (hooks != NULL && hooks->version != RL_MEMORY_HOOKS_VERSION)
    {
      g_critical ("libredislock-testing and libredislock are of different versions "
                  "(memory store hooks version %u, expected %u)",
                  hooks->version, RL_MEMORY_HOOKS_VERSION);
      return NULL;
    }
  return hooks;
}

gboolean
redis_lock_memory_store_expire (const char *store_name, const char *key)
{
  const RlMemoryHooks *hooks = memory_hooks ();

  g_return_val_if_fail (store_name != NULL, FALSE);
  g_return_val_if_fail (key != NULL, FALSE);
  return hooks != NULL && hooks->expire (store_name, key);
}

gboolean
redis_lock_memory_store_steal (const char *store_name, const char *key, const char *new_owner,
                               gint64 ttl_ms)
{
  const RlMemoryHooks *hooks = memory_hooks ();

  g_return_val_if_fail (store_name != NULL, FALSE);
  g_return_val_if_fail (key != NULL, FALSE);
  g_return_val_if_fail (new_owner != NULL, FALSE);
  g_return_val_if_fail (ttl_ms != 0, FALSE);
  return hooks != NULL && hooks->steal (store_name, key, new_owner, ttl_ms);
}

char *
redis_lock_memory_store_get_owner (const char *store_name, const char *key)
{
  const RlMemoryHooks *hooks = memory_hooks ();

  g_return_val_if_fail (store_name != NULL, NULL);
  g_return_val_if_fail (key != NULL, NULL);
  return hooks != NULL ? hooks->get_owner (store_name, key) : NULL;
}

gint64
redis_lock_memory_store_get_pttl (const char *store_name, const char *key)
{
  const RlMemoryHooks *hooks = memory_hooks ();

  g_return_val_if_fail (store_name != NULL, -2);
  g_return_val_if_fail (key != NULL, -2);
  return hooks != NULL ? hooks->get_pttl (store_name, key) : -2;
}
