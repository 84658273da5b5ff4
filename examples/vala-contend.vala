/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* vala-contend.vala: examples/contend.c in Vala, through redislock.vapi.
 *
 * Two registries stand for two processes; four threads in each take the lock
 * "example:counter" with try_lock_for () and unlock () around a deliberately non-atomic
 * read-yield-write of a shared counter, which ends exact only because the lock is held.
 * Then it shows the other outcomes of try_lock_for (): false when another registry
 * holds the lock past the wait, and an error of the redislock domain, caught as
 * Redis.LockError. Uses $REDIS_URL when set, otherwise starts a throwaway
 * redis-server on a Unix socket (RedisLock.TestServer, from redislock-testing.vapi).
 * Exits 0 when every outcome is the expected one.
 *
 *   valac --pkg redislock --pkg redislock-testing vala-contend.vala
 */

const int THREADS_PER_REGISTRY = 4;
const int ROUNDS = 50;

/* Protected only by the distributed lock. */
int counter = 0;

void
work (Redis.LockRegistry registry) throws GLib.Error
{
  Redis.Lock counter_lock = registry.obtain ("example:counter");

  for (int i = 0; i < ROUNDS; i++)
    {
      if (!counter_lock.try_lock_for (10000))
        error ("lock “%s” not acquired within 10 s", counter_lock.get_name ());
      int seen = counter;
      Thread.yield (); /* widen the race window a lock must close */
      counter = seen + 1;
      counter_lock.unlock ();
    }
}

int
main ()
{
  RedisLock.TestServer? server = null;
  string? url = Environment.get_variable ("REDIS_URL");

  try
    {
      if (url == null)
        {
          server = new RedisLock.TestServer (null);
          url = server.get_url ();
        }
      print ("redislock %s, Redis at %s\n", Redis.LOCK_VERSION_S, url);

      Redis.LockRegistry[] registries = {
        new Redis.LockRegistry (url, "example"),
        new Redis.LockRegistry (url, "example"),
      };
      Thread<bool>[] threads = {};
      for (int t = 0; t < 2 * THREADS_PER_REGISTRY; t++)
        {
          unowned Redis.LockRegistry registry = registries[t % 2];
          threads += new Thread<bool> ("worker", () => {
            try
              {
                work (registry);
              }
            catch (GLib.Error e)
              {
                error ("worker: %s", e.message);
              }
            return true;
          });
        }
      foreach (var thread in threads)
        thread.join ();
      print ("%d threads x %d rounds: counter = %d (expected %d)\n", 2 * THREADS_PER_REGISTRY,
             ROUNDS, counter, 2 * THREADS_PER_REGISTRY * ROUNDS);
      if (counter != 2 * THREADS_PER_REGISTRY * ROUNDS)
        return 1;

      /* Held by the first registry: the second's try_lock_for () gives up with false. */
      Redis.Lock mine = registries[0].obtain ("example:held");
      Redis.Lock theirs = registries[1].obtain ("example:held");
      if (!mine.try_lock_for (0))
        return 1;
      int64 start = get_monotonic_time ();
      bool taken = theirs.try_lock_for (100);
      print ("while held elsewhere: try_lock_for (100) = %s after %lld ms\n",
             taken.to_string (), (get_monotonic_time () - start) / 1000);
      mine.unlock ();
      if (taken)
        return 1;

      /* A failure is a GLib.Error of the redislock domain. */
      try
        {
          registries[0].obtain ("");
          return 1;
        }
      catch (Redis.LockError.INVALID e)
        {
          print ("obtain (\"\"): %s\n", e.message);
        }
    }
  catch (GLib.Error e)
    {
      printerr ("vala-contend: %s\n", e.message);
      return 1;
    }
  return 0;
}
