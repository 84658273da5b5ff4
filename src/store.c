/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* store.c: which store a registry's URL names.
 *
 * The registry asks for "the store of this URL" and gets one behind the seam of
 * store.h; which implementations exist, and which URL goes to which, is decided here
 * alone, so adding a store (Sentinel, Cluster, quorum) changes this file and the new
 * store's, not the registry or the stores beside it.
 */
#include "config.h"

#include "store.h"

RlStore *
rl_store_open (const char *url, const char *registry_key, const char *client_id,
               RlStoreContext *ctx, RlStoreReleasedFunc released, gpointer released_data,
               GError **error)
{
  if (g_str_has_prefix (url, "memory://"))
    return rl_memory_store_open (url, registry_key, client_id, ctx, released, released_data, error);
  return rl_redis_store_open (url, registry_key, client_id, ctx, released, released_data, error);
}
