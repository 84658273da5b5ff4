# SPDX-License-Identifier: LGPL-2.1-or-later
"""PyGObject overrides for the Redislock namespace: `with` statements.

PyGObject imports this module when a program imports `gi.repository.Redislock`, if it
lies in a `gi/overrides` directory under a directory of `sys.path` (the build installs
it in `$(pythondir)/gi/overrides`; configure's `--with-pygobject-overrides-dir` puts it
elsewhere). It adds context managers over the introspected calls and nothing else:

- `with lock:` holds the lock for the block (`lock.lock()`, then `lock.unlock()`);
- `with lock.locked(wait_ms, ttl_ms, cancellable):` the same with a bounded wait;
- `with rw.read_locked(wait_ms):` and `with rw.write_locked(wait_ms):` for a
  read-write lock;
- `with semaphore.acquire(wait_ms) as permit:` one permit, given back at the end;
- `with registry:` closes the registry at the end.

A wait that ends without the lock raises `NotAcquiredError`, a `GLib.Error` in GIO's
domain with the code `Gio.IOErrorEnum.TIMED_OUT`; every failure of the library stays
the `GLib.Error` the call raises, in the redislock domain with a
`Redislock.LockErrorCode` code. The release at the end of a block raises its error too
(for a lost lease: `LockErrorCode.LEASE_LOST`, which says the block was not protected
to its end), chained to the block's own exception if there was one. docs/python.md
describes them for users.
"""

from ..module import get_introspection_module
from ..overrides import override
from gi.repository import GLib, Gio

Redislock = get_introspection_module("Redislock")

__all__ = []


class NotAcquiredError(GLib.Error):
    """No lock, read or write hold, or permit within the wait.

    A `GLib.Error` with `domain` "g-io-error-quark" and `code`
    `Gio.IOErrorEnum.TIMED_OUT`, so `e.matches(Gio.io_error_quark(),
    Gio.IOErrorEnum.TIMED_OUT)` holds; `name` is the name of the lock or semaphore and
    `wait_ms` the wait that ran out.
    """

    def __init__(self, what, name, wait_ms):
        within = "in one attempt" if wait_ms == 0 else "within %d ms" % wait_ms
        message = "%s “%s” not acquired %s" % (what, name, within)
        super().__init__(message, GLib.quark_to_string(Gio.io_error_quark()),
                         int(Gio.IOErrorEnum.TIMED_OUT))
        self.name = name
        self.wait_ms = wait_ms


__all__.append("NotAcquiredError")


class _Held:
    """One acquisition for a `with` block: @acquire () takes it (True, False for not
    within the wait, or raises), @release () gives it back, @value is what the `with`
    statement binds."""

    __slots__ = ("_acquire", "_release", "_value", "_what", "_name", "_wait_ms")

    def __init__(self, acquire, release, value, what, name, wait_ms):
        self._acquire = acquire
        self._release = release
        self._value = value
        self._what = what
        self._name = name
        self._wait_ms = wait_ms

    def __enter__(self):
        if not self._acquire():
            raise NotAcquiredError(self._what, self._name, self._wait_ms)
        return self._value

    def __exit__(self, exc_type, exc, tb):
        self._release()
        return False


class Lock(Redislock.Lock):
    """`with lock:` blocks until this thread holds the lock and unlocks at the end;
    `with lock.locked(wait_ms=…):` waits at most @wait_ms."""

    def __enter__(self):
        self.lock()
        return self

    def __exit__(self, exc_type, exc, tb):
        self.unlock()
        return False

    def locked(self, wait_ms=-1, ttl_ms=0, cancellable=None):
        """A context manager that holds the lock for its block.

        It waits at most @wait_ms (< 0: forever; 0: one attempt) and raises
        `NotAcquiredError` if the lock is not held by then; @ttl_ms, when not 0, is the
        TTL of the lease (as `try_lock_full`). Unlike `threading.Lock.locked()`, it
        does not ask whether the lock is held: that is `is_held_by_current_thread()`.
        """
        if ttl_ms:
            def acquire():
                return self.try_lock_full(wait_ms, ttl_ms, cancellable)
        else:
            def acquire():
                return self.try_lock_for(wait_ms, cancellable)
        return _Held(acquire, self.unlock, self, "lock", self.get_name(), wait_ms)


Lock = override(Lock)
__all__.append("Lock")


class RWLock(Redislock.RWLock):
    """`with rw.read_locked(wait_ms):` and `with rw.write_locked(wait_ms):` hold the
    read-write lock for reading or writing for their block."""

    def read_locked(self, wait_ms=-1, cancellable=None):
        """A context manager that reads for its block (`try_read_lock_for`, then
        `read_unlock`); `NotAcquiredError` when not reading within @wait_ms."""
        return _Held(lambda: self.try_read_lock_for(wait_ms, cancellable), self.read_unlock,
                     self, "read-write lock (read)", self.get_name(), wait_ms)

    def write_locked(self, wait_ms=-1, cancellable=None):
        """A context manager that writes for its block (`try_write_lock_for`, then
        `write_unlock`); `NotAcquiredError` when not writing within @wait_ms."""
        return _Held(lambda: self.try_write_lock_for(wait_ms, cancellable), self.write_unlock,
                     self, "read-write lock (write)", self.get_name(), wait_ms)


RWLock = override(RWLock)
__all__.append("RWLock")


class _PermitHeld:
    """The block of `with semaphore.acquire(wait_ms) as permit:`: the permit is taken on
    entry and given back on exit, unless the block gave it back itself."""

    __slots__ = ("_semaphore", "_wait_ms", "_cancellable", "_permit")

    def __init__(self, semaphore, wait_ms, cancellable):
        self._semaphore = semaphore
        self._wait_ms = wait_ms
        self._cancellable = cancellable
        self._permit = None

    def __enter__(self):
        permit = self._semaphore.try_acquire_for(self._wait_ms, self._cancellable)
        if permit is None:
            raise NotAcquiredError("semaphore", self._semaphore.get_name(), self._wait_ms)
        self._permit = permit
        return permit

    def __exit__(self, exc_type, exc, tb):
        permit, self._permit = self._permit, None
        if not permit.is_released():
            permit.release()
        return False


class Semaphore(Redislock.Semaphore):
    """`with semaphore.acquire(wait_ms) as permit:` holds one permit for its block."""

    def acquire(self, wait_ms=-1, cancellable=None):
        """A context manager that takes one permit on entry (`try_acquire_for`), binds
        it, and gives it back on exit (`Permit.release`) unless the block did;
        `NotAcquiredError` when no permit is free within @wait_ms (< 0: forever)."""
        return _PermitHeld(self, wait_ms, cancellable)


Semaphore = override(Semaphore)
__all__.append("Semaphore")


class Permit(Redislock.Permit):
    """A permit that remembers its release, so that the end of a `with` block does not
    give it back a second time (the C call refuses that with a critical warning)."""

    def release(self):
        """Gives the permit back, as `redis_permit_release()`; a second release of the
        same permit raises `LockErrorCode.NOT_OWNER` instead of reaching C."""
        if getattr(self, "_rl_released", False):
            raise GLib.Error("permit %u of “%s” was already released"
                             % (self.get_index(), self.get_key()),
                             GLib.quark_to_string(Redislock.lock_error_quark()),
                             int(Redislock.LockErrorCode.NOT_OWNER))
        # Set first: the C call gives the permit up whatever its outcome.
        self._rl_released = True
        return super().release()

    def is_released(self):
        """Whether `release()` was called on this permit (Python only)."""
        return getattr(self, "_rl_released", False)


Permit = override(Permit)
__all__.append("Permit")


class LockRegistry(Redislock.LockRegistry):
    """`with registry:` closes the registry at the end of the block (its locks and
    permits are released, as `close()` does)."""

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.close()
        return False


LockRegistry = override(LockRegistry)
__all__.append("LockRegistry")
