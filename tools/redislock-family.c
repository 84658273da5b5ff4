/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* redislock-family.c: the leases of a registry read as the holds they make up.
 *
 * A registry's listing (redis_lock_registry_list_leases()) is one row per string key:
 * a plain lock's lease, but also the keys of the lock family, which carry the hash tag
 * `{name}` (docs/rwlock.md, docs/semaphore.md): a read-write lock's writer lease
 * `{name}:rw:w`, its reader leases `{name}:rw:r:CLIENT_ID` and a waiting writer's mark
 * `{name}:rw:ww`; a semaphore's size `{name}:sem`, its size record `{name}:sem:size` and
 * its permits `{name}:sem:I`. status, list and watch show a hold as what it is (readers,
 * a writer, permits used of the size) rather than these keys as locks; the key shapes
 * are the library's, read here so that no call of the library is needed for it.
 */
#include "config.h"

#include "redislock-tool.h"

#include <string.h>

void
family_key_clear (FamilyKey *key)
{
  g_clear_pointer (&key->name, g_free);
  g_clear_pointer (&key->client_id, g_free);
}

/* Whether @s is decimal digits only, not empty, and their value in *@value. */
static gboolean
parse_index (const char *s, guint *value)
{
  guint64 v;

  if (*s == '\0' || strspn (s, "0123456789") != strlen (s))
    return FALSE;
  if (!g_ascii_string_to_unsigned (s, 10, 0, G_MAXUINT, &v, NULL))
    return FALSE;
  *value = (guint) v;
  return TRUE;
}

void
family_key_parse (const char *lease_name, FamilyKey *key)
{
  const char *close = NULL, *tail;

  memset (key, 0, sizeof *key);
  key->role = FAMILY_ROLE_LOCK;
  /* The family's names hold no brace: `{name}` is the first '}' after a leading '{'. */
  if (lease_name[0] == '{')
    close = strchr (lease_name + 1, '}');
  if (close != NULL && close > lease_name + 1)
    {
      tail = close + 1;
      if (strcmp (tail, ":rw:w") == 0)
        key->role = FAMILY_ROLE_WRITER;
      else if (strcmp (tail, ":rw:ww") == 0)
        key->role = FAMILY_ROLE_WRITER_WAITING;
      else if (g_str_has_prefix (tail, ":rw:r:") && tail[6] != '\0')
        {
          key->role = FAMILY_ROLE_READER;
          key->client_id = g_strdup (tail + 6);
        }
      else if (strcmp (tail, ":sem") == 0)
        key->role = FAMILY_ROLE_SEMAPHORE_SIZE;
      else if (strcmp (tail, ":sem:size") == 0)
        key->role = FAMILY_ROLE_SEMAPHORE_SIZE_RECORD;
      else if (g_str_has_prefix (tail, ":sem:") && parse_index (tail + 5, &key->permit))
        key->role = FAMILY_ROLE_PERMIT;
    }
  if (key->role == FAMILY_ROLE_LOCK)
    key->name = g_strdup (lease_name);
  else
    key->name = g_strndup (lease_name + 1, (gsize) (close - lease_name - 1));
}

const char *
family_kind_name (FamilyKind kind)
{
  switch (kind)
    {
    case FAMILY_KIND_LOCK:
      return "lock";
    case FAMILY_KIND_LEADER:
      return "leader";
    case FAMILY_KIND_RW:
      return "read-write";
    case FAMILY_KIND_SEMAPHORE:
      return "semaphore";
    }
  return "lock";
}

FamilyKind
family_role_kind (FamilyRole role)
{
  switch (role)
    {
    case FAMILY_ROLE_LOCK:
      return FAMILY_KIND_LOCK;
    case FAMILY_ROLE_WRITER:
    case FAMILY_ROLE_WRITER_WAITING:
    case FAMILY_ROLE_READER:
      return FAMILY_KIND_RW;
    case FAMILY_ROLE_SEMAPHORE_SIZE:
    case FAMILY_ROLE_SEMAPHORE_SIZE_RECORD:
    case FAMILY_ROLE_PERMIT:
      return FAMILY_KIND_SEMAPHORE;
    }
  return FAMILY_KIND_LOCK;
}

gboolean
family_role_is_hold (FamilyRole role)
{
  return role == FAMILY_ROLE_LOCK || role == FAMILY_ROLE_WRITER || role == FAMILY_ROLE_READER
         || role == FAMILY_ROLE_PERMIT;
}

static void
family_holder_free (gpointer p)
{
  FamilyHolder *h = p;

  g_free (h->owner);
  g_free (h->key);
  g_free (h);
}

void
family_hold_free (gpointer p)
{
  FamilyHold *hold = p;

  g_free (hold->name);
  g_free (hold->key);
  g_free (hold->writer_waiting);
  g_ptr_array_unref (hold->holders);
  g_free (hold);
}

FamilyHold *
family_hold_new (const char *name, FamilyKind kind)
{
  FamilyHold *hold = g_new0 (FamilyHold, 1);
  const char *registry = effective_registry ();

  hold->name = g_strdup (name);
  hold->kind = kind;
  hold->holders = g_ptr_array_new_with_free_func (family_holder_free);
  switch (kind)
    {
    case FAMILY_KIND_RW:
      hold->key = g_strdup_printf ("%s:{%s}:rw:w", registry, name);
      break;
    case FAMILY_KIND_SEMAPHORE:
      hold->key = g_strdup_printf ("%s:{%s}:sem", registry, name);
      break;
    default:
      hold->key = g_strdup_printf ("%s:%s", registry, name);
      break;
    }
  return hold;
}

void
family_hold_add (FamilyHold *hold, const FamilyKey *key, const char *lease_name, const char *owner,
                 gint64 ttl_ms)
{
  FamilyHolder *h;

  switch (key->role)
    {
    case FAMILY_ROLE_SEMAPHORE_SIZE:
      {
        guint size;

        if (owner != NULL && parse_index (owner, &size))
          hold->size = size;
        return;
      }
    case FAMILY_ROLE_SEMAPHORE_SIZE_RECORD:
      return;
    case FAMILY_ROLE_WRITER_WAITING:
      g_free (hold->writer_waiting);
      hold->writer_waiting = g_strdup (owner);
      return;
    default:
      break;
    }
  h = g_new0 (FamilyHolder, 1);
  h->role = key->role;
  h->permit = key->permit;
  h->owner = g_strdup (owner);
  h->ttl_ms = ttl_ms;
  h->key = g_strconcat (effective_registry (), ":", lease_name, NULL);
  /* the writer first, then readers and permits in key order */
  if (key->role == FAMILY_ROLE_WRITER)
    g_ptr_array_insert (hold->holders, 0, h);
  else
    g_ptr_array_add (hold->holders, h);
}

static gint
compare_holds (gconstpointer a, gconstpointer b)
{
  const FamilyHold *x = *(const FamilyHold *const *) a;
  const FamilyHold *y = *(const FamilyHold *const *) b;
  int c = strcmp (x->name, y->name);

  return c != 0 ? c : (int) x->kind - (int) y->kind;
}

static gint
compare_leases (gconstpointer a, gconstpointer b)
{
  const RedisLockLeaseInfo *x = *(const RedisLockLeaseInfo *const *) a;
  const RedisLockLeaseInfo *y = *(const RedisLockLeaseInfo *const *) b;

  return strcmp (x->name, y->name);
}

GPtrArray *
family_group (GPtrArray *leases)
{
  g_autoptr (GPtrArray) sorted = g_ptr_array_copy (leases, NULL, NULL);
  g_autoptr (GHashTable) by_id = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  GPtrArray *holds = g_ptr_array_new_with_free_func (family_hold_free);

  /* By key, so that permits and readers come in order; SCAN may return a key twice.
   * The copy borrows the leases (it would free them with @leases' own function). */
  g_ptr_array_set_free_func (sorted, NULL);
  g_ptr_array_sort (sorted, compare_leases);
  for (guint i = 0; i < sorted->len; i++)
    {
      const RedisLockLeaseInfo *lease = g_ptr_array_index (sorted, i);
      FamilyKey key;
      FamilyKind kind;
      g_autofree char *id = NULL;
      FamilyHold *hold;

      if (i > 0 && compare_leases (&g_ptr_array_index (sorted, i - 1), &lease) == 0)
        continue;
      family_key_parse (lease->name, &key);
      kind = family_role_kind (key.role);
      id = g_strdup_printf ("%d:%s", (int) kind, key.name);
      hold = g_hash_table_lookup (by_id, id);
      if (hold == NULL)
        {
          hold = family_hold_new (key.name, kind);
          g_hash_table_insert (by_id, g_steal_pointer (&id), hold);
          g_ptr_array_add (holds, hold);
        }
      family_hold_add (hold, &key, lease->name, lease->owner, lease->pttl_ms);
      family_key_clear (&key);
    }
  /* A semaphore's size alone, or a waiting writer's mark alone, is nothing held; it
   * is kept, and shows as free. */
  g_ptr_array_sort (holds, compare_holds);
  return holds;
}

const char *
family_hold_state (const FamilyHold *hold)
{
  if (hold->holders->len == 0)
    return "free";
  switch (hold->kind)
    {
    case FAMILY_KIND_LEADER:
      return "leader";
    case FAMILY_KIND_RW:
      return ((const FamilyHolder *) g_ptr_array_index (hold->holders, 0))->role
                     == FAMILY_ROLE_WRITER
                 ? "write"
                 : "read";
    case FAMILY_KIND_SEMAPHORE:
      return "permits";
    default:
      return "held";
    }
}

const char *
family_role_name (FamilyRole role)
{
  switch (role)
    {
    case FAMILY_ROLE_WRITER:
      return "writer";
    case FAMILY_ROLE_READER:
      return "reader";
    case FAMILY_ROLE_PERMIT:
      return "permit";
    case FAMILY_ROLE_WRITER_WAITING:
      return "writer waiting";
    case FAMILY_ROLE_SEMAPHORE_SIZE:
    case FAMILY_ROLE_SEMAPHORE_SIZE_RECORD:
      return "size";
    default:
      return "lock";
    }
}

guint
family_hold_count (const FamilyHold *hold, FamilyRole role)
{
  guint n = 0;

  for (guint i = 0; i < hold->holders->len; i++)
    if (((const FamilyHolder *) g_ptr_array_index (hold->holders, i))->role == role)
      n++;
  return n;
}
