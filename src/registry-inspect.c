/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* registry-inspect.c: what a registry tells of the leases in its store (the lease of a
 * name, a fencing counter, every lease of the registry key), for operators' tools and
 * tests: read-only calls beside registry.c's cache and settings, over the store seam
 * alone.
 */
#include "config.h"

#include <string.h>

#include "internal.h"

/* Inspection ------------------------------------------------------------------- */

RedisLockLeaseInfo *
redis_lock_registry_get_lease_info (RedisLockRegistry *registry, const char *name, GError **error)
{
  g_autofree char *key = NULL;
  RedisLockLeaseInfo *info;
  char *owner = NULL;
  gint64 pttl_ms = 0;

  g_return_val_if_fail (registry != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);
  if (!rl_registry_check_name (name, error) || !rl_registry_check (registry, error))
    return NULL;
  key = g_strconcat (registry->registry_key, ":", name, NULL);
  if (!registry->store->vt->inspect (registry->store, key, &owner, &pttl_ms, error))
    return NULL;
  info = g_new (RedisLockLeaseInfo, 1);
  info->name = g_strdup (name);
  info->owner = owner;
  info->pttl_ms = pttl_ms;
  return info;
}

gboolean
redis_lock_registry_get_last_fencing_token (RedisLockRegistry *registry, const char *name,
                                            guint64 *token, GError **error)
{
  g_autofree char *key = NULL;
  g_autofree char *fence_key = NULL;

  g_return_val_if_fail (registry != NULL, FALSE);
  g_return_val_if_fail (token != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);
  *token = 0;
  if (!rl_registry_check_name (name, error) || !rl_registry_check (registry, error))
    return FALSE;
  key = g_strconcat (registry->registry_key, ":", name, NULL);
  fence_key = rl_store_fence_key (key);
  if (fence_key == NULL)
    {
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID,
                   "Lock “%s” has no fencing counter: its key has a “}” but no hash tag", name);
      return FALSE;
    }
  return registry->store->vt->read_counter (registry->store, fence_key, token, error);
}

GPtrArray *
redis_lock_registry_list_leases (RedisLockRegistry *registry, GError **error)
{
  g_autoptr (GArray) entries = g_array_new (FALSE, FALSE, sizeof (RlStoreEntry));
  GPtrArray *leases;
  gboolean ok;

  g_return_val_if_fail (registry != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);
  if (!rl_registry_check (registry, error))
    return NULL;
  ok = registry->store->vt->list (registry->store, entries, error);
  leases = g_ptr_array_new_with_free_func ((GDestroyNotify) redis_lock_lease_info_free);
  for (guint i = 0; i < entries->len; i++)
    {
      RlStoreEntry *e = &g_array_index (entries, RlStoreEntry, i);
      RedisLockLeaseInfo *info = g_new (RedisLockLeaseInfo, 1);

      info->name = g_strdup (e->key + registry->key_prefix_len);
      info->owner = e->value;
      info->pttl_ms = e->pttl_ms;
      g_free (e->key);
      g_ptr_array_add (leases, info);
    }
  if (!ok)
    g_clear_pointer (&leases, g_ptr_array_unref);
  return leases;
}
