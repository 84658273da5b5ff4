# SPDX-License-Identifier: LGPL-2.1-or-later
"""introspection.py: the library through its typelib, from Python with PyGObject.

What a Python program sees of redislock is what the GIR annotations and the GTypes of
src/types.c make of the C API, so this test takes and releases locks through
`gi.repository.Redislock` against a private redis-server started with the test-server
helper (itself through the testing library's own typelib, `RedislockTesting`, which
also reaches the memory store's hooks; the production namespace has none of them), and
checks what the annotations promise: the
boxed registry and lock (one object per name), try_lock's three outcomes as True,
False and GLib.Error, errors in the redislock domain with its codes as a GEnum, out
arguments, arrays, the boxed structures, the lease-lost callback and, when the library
has it, asynchronous acquisition and release in a GLib main loop.

It prints TAP for automake's tap-driver (tests/run-python.sh runs it). It exits 77
after a `1..0 # SKIP` plan when PyGObject, the typelib or redis-server is missing.
GI_TYPELIB_PATH and LD_LIBRARY_PATH point into the build tree (tests/Makefile.am);
REDIS_LOCK_API_VERSION names the namespace version.
"""
import os
import sys
import threading
import time
import traceback


def skip(reason):
    print("1..0 # SKIP " + reason)
    sys.exit(77)


try:
    import gi
except ImportError:
    skip("PyGObject (python3-gi) is not installed for " + sys.executable)

API_VERSION = os.environ.get("REDIS_LOCK_API_VERSION", "0.1")
try:
    gi.require_version("GLib", "2.0")
    gi.require_version("GObject", "2.0")
    gi.require_version("Gio", "2.0")
    gi.require_version("Redislock", API_VERSION)
    gi.require_version("RedislockTesting", API_VERSION)
except ValueError as e:
    skip("the Redislock-%s typelibs are not built (configure --enable-introspection): %s"
         % (API_VERSION, e))

from gi.repository import GLib, GObject, Gio, Redislock, RedislockTesting  # noqa: E402

DOMAIN = "redis-lock-error-quark"
Code = Redislock.LockErrorCode


def expect_error(code, func, *args):
    """Calls func(*args) and returns the GLib.Error it must raise, of @code."""
    try:
        func(*args)
    except GLib.Error as e:
        assert e.domain == DOMAIN, "domain %r" % e.domain
        assert e.code == int(code), "code %d, expected %d (%s)" % (e.code, int(code), e.message)
        assert e.matches(Redislock.lock_error_quark(), int(code))
        return e
    raise AssertionError("%s did not raise" % func.__name__)


def wait_for(predicate, timeout_s=10.0):
    """Polls @predicate until it holds or the deadline passes."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


class Fixture:
    def __init__(self):
        try:
            self.server = RedislockTesting.TestServer.new(None)
        except GLib.Error as e:
            if e.matches(Gio.io_error_quark(), Gio.IOErrorEnum.NOT_FOUND):
                skip("redis-server is not installed: " + e.message)
            raise
        self.url = self.server.get_url()

    def registry(self, key="gi"):
        return Redislock.LockRegistry.new(self.url, key)


def test_types_registered(fx):
    assert GObject.type_name(Redislock.LockRegistry.__gtype__) == "RedisLockRegistry"
    assert GObject.type_name(Redislock.Lock.__gtype__) == "RedisLock"
    assert Redislock.LockErrorCode.__gtype__.name == "RedisLockErrorCode"
    assert Redislock.LockErrorCode.__gtype__.parent.name == "GEnum"
    assert RedislockTesting.TestTlsFlags.__gtype__.parent.name == "GFlags"
    assert int(Redislock.LockErrorCode.NOT_REPLICATED) == 8
    assert int(Redislock.LockWaitMode.SPIN) == 1
    assert RedislockTesting.TestTlsFlags.EXPIRED == 2
    assert GObject.type_name(RedislockTesting.TestServer.__gtype__) == "RedisLockTestServer"


def test_no_test_api_in_production_namespace(fx):
    for name in ("LockTestServer", "LockTestTlsFlags", "LockTestTlsFile", "LockTestCluster",
                 "LockTestSentinel"):
        assert not hasattr(Redislock, name), "Redislock." + name
    for name in ("memory_store_expire", "memory_store_steal", "memory_store_get_owner",
                 "memory_store_get_pttl"):
        assert not hasattr(Redislock.Lock, name), "Redislock.Lock." + name
        assert not hasattr(Redislock, name), "Redislock." + name
        assert hasattr(RedislockTesting, name), "RedislockTesting." + name


def test_same_object_for_same_name(fx):
    reg = fx.registry()
    a = reg.obtain("same")
    b = reg.obtain("same")
    c = reg.obtain("other")
    assert a == b, "two obtains of one name give two locks"
    assert a != c
    assert a.get_name() == "same" and a.get_key() == "gi:same"
    assert reg.get_cache_size() == 2


def test_try_lock_then_other_registry_cannot(fx):
    reg, other = fx.registry(), fx.registry()
    lock = reg.obtain("excl")
    theirs = other.obtain("excl")
    assert lock.try_lock() is True
    assert lock.is_held_by_current_thread() and lock.get_hold_count() == 1
    assert lock.get_lease_cancellable() is not None
    value = lock.dup_lease_value()
    assert value.startswith(reg.get_client_id() + ":")
    assert theirs.try_lock() is False
    start = time.monotonic()
    assert theirs.try_lock_for(100, None) is False
    assert time.monotonic() - start >= 0.09
    info = other.get_lease_info("excl")
    assert info.name == "excl" and info.owner == value and info.pttl_ms > 0
    info.free()  # (transfer full): frees a copy, the wrapper keeps its own
    assert info.name == "excl"
    names = [i.name for i in other.list_leases()]
    assert names == ["excl"], names
    assert lock.unlock() is True
    assert not lock.is_held_by_current_thread()
    assert other.get_lease_info("excl") is None
    assert theirs.try_lock_full(2000, 5000, None) is True
    assert theirs.unlock() is True


def test_errors(fx):
    reg = fx.registry()
    expect_error(Code.INVALID, reg.obtain, "")
    expect_error(Code.INVALID, Redislock.LockRegistry.new, "bogus://x", "k")
    lock = reg.obtain("not-held")
    expect_error(Code.NOT_OWNER, lock.unlock)
    expect_error(Code.NOT_OWNER, reg.renew, "not-held", 0)
    reg.close()
    expect_error(Code.CLOSED, lock.try_lock)


def test_out_arguments_and_structs(fx):
    reg = fx.registry()
    reg.set_fencing(True)
    assert reg.get_fencing() is True
    found, token = reg.get_last_fencing_token("fenced")
    assert found is False and token == 0
    lock = reg.obtain("fenced")
    assert lock.try_lock()
    first = lock.get_fencing_token()
    assert first >= 1
    assert lock.unlock()
    found, token = reg.get_last_fencing_token("fenced")
    assert found is True and token == first
    stats = reg.get_stats()
    assert isinstance(stats, Redislock.LockRegistryStats)
    assert stats.acquisitions == 1 and stats.releases == 1 and stats.round_trips >= 2


def test_lock_all(fx):
    reg, other = fx.registry(), fx.registry()
    locks = [reg.obtain("all-a"), reg.obtain("all-b")]
    assert Redislock.Lock.try_lock_all(locks, 0, None) is True
    assert all(l.is_held_by_current_thread() for l in locks)
    assert other.obtain("all-b").try_lock() is False
    assert Redislock.Lock.unlock_all(locks) is True
    assert not any(l.is_acquired_in_this_process() for l in locks)


def test_wait_mode_setting(fx):
    reg = fx.registry()
    reg.set_wait_mode(Redislock.LockWaitMode.SPIN)
    reg.set_idle_between_tries_ms(10)
    try:
        reg.set_wait_mode("spin-ish")
    except TypeError:
        pass
    else:
        raise AssertionError("a string was taken for a RedisLockWaitMode")
    lock = reg.obtain("spin")
    assert lock.try_lock_for(1000, None) is True
    assert lock.unlock()


def test_lease_lost_callback(fx):
    store = "gi-lost-%d" % os.getpid()
    reg = Redislock.LockRegistry.new("memory://" + store, "gi")
    lost = []
    reg.set_lease_lost_callback(lambda lock, data: lost.append((lock.get_name(), data)), "tag")
    lock = reg.obtain("stolen")
    assert lock.try_lock()
    assert RedislockTesting.memory_store_steal(store, "gi:stolen", "someone-else", 60000)
    assert RedislockTesting.memory_store_get_owner(store, "gi:stolen") == "someone-else"
    expect_error(Code.LEASE_LOST, reg.renew, "stolen", 0)
    assert wait_for(lambda: len(lost) == 1), "the callback was not called"
    assert lost == [("stolen", "tag")]
    assert lock.is_lease_lost() and lock.get_lease_cancellable().is_cancelled()
    expect_error(Code.LEASE_LOST, lock.unlock)
    reg.set_lease_lost_callback(None, None)


def test_lock_async(fx):
    if not hasattr(Redislock.Lock, "lock_async"):
        return "SKIP the library has no asynchronous acquisition"
    reg, other = fx.registry(), fx.registry()
    lock = reg.obtain("async")
    theirs = other.obtain("async")
    assert theirs.try_lock()
    loop = GLib.MainLoop()
    outcome = []

    # The source object is None: a RedisLock is a boxed type, not a GObject.
    def done(source, result, data):
        try:
            outcome.append(lock.lock_finish(result))
        except GLib.Error as e:
            outcome.append(e)
        loop.quit()

    lock.lock_async(10000, 0, None, done, None)
    GLib.idle_add(lambda: (theirs.unlock(), False)[1])
    GLib.timeout_add_seconds(15, loop.quit)
    loop.run()
    assert outcome == [True], outcome
    assert lock.is_held_by_current_thread()
    assert theirs.try_lock() is False

    def unlocked(source, result, data):
        outcome.append(lock.unlock_finish(result))
        loop.quit()

    outcome.clear()
    lock.unlock_async(None, unlocked, None)
    assert not lock.is_held_by_current_thread()
    loop.run()
    assert outcome == [True], outcome
    assert other.get_lease_info("async") is None
    cancellable = Gio.Cancellable()
    assert theirs.try_lock()
    outcome.clear()
    lock.lock_async(-1, 0, cancellable, done, None)
    GLib.idle_add(lambda: (cancellable.cancel(), False)[1])
    loop.run()
    assert len(outcome) == 1 and isinstance(outcome[0], GLib.Error), outcome
    assert outcome[0].matches(Gio.io_error_quark(), Gio.IOErrorEnum.CANCELLED)
    assert not lock.is_held_by_current_thread()
    assert theirs.unlock()


def test_rw_lock(fx):
    reg, other = fx.registry(), fx.registry()
    assert GObject.type_name(Redislock.RWLock.__gtype__) == "RedisRWLock"
    mine = reg.obtain_rw("doc")
    theirs = other.obtain_rw("doc")
    assert mine.get_name() == "doc"
    assert mine.try_read_lock_for(1000, None) is True
    assert theirs.try_read_lock_for(1000, None) is True  # readers of two registries
    assert theirs.read_unlock() is True
    assert theirs.try_write_lock_for(100, None) is False  # not within 100 ms
    expect_error(Code.INVALID, mine.try_write_lock_for, 0, None)  # no upgrade
    assert mine.get_lease_cancellable() is not None and not mine.is_lease_lost()
    assert mine.read_unlock() is True
    expect_error(Code.NOT_OWNER, mine.read_unlock)
    assert theirs.try_write_lock_for(1000, None) is True
    assert mine.try_read_lock_for(0, None) is False
    assert theirs.write_unlock() is True


def test_overrides_loaded(fx):
    """The overrides module PyGObject loaded is the one under test (make check names it
    in REDIS_LOCK_OVERRIDES: an installed copy earlier on the path would hide it)."""
    module = sys.modules.get("gi.overrides.Redislock")
    assert module is not None, "no overrides were loaded for Redislock"
    wanted = os.environ.get("REDIS_LOCK_OVERRIDES")
    if wanted:
        assert os.path.samefile(module.__file__, wanted), module.__file__
    assert Redislock.Lock is module.Lock and hasattr(Redislock.Lock, "__enter__")
    assert issubclass(Redislock.NotAcquiredError, GLib.Error)
    lock = fx.registry().obtain("override-class")
    assert isinstance(lock, module.Lock), type(lock)


def expect_not_acquired(name, wait_ms, manager):
    """Enters @manager, which must raise NotAcquiredError for @name after @wait_ms
    without running the block; returns the seconds it took."""
    ran = []
    start = time.monotonic()
    try:
        with manager:
            ran.append(True)
    except Redislock.NotAcquiredError as e:
        elapsed = time.monotonic() - start
        assert isinstance(e, GLib.Error)
        assert e.matches(Gio.io_error_quark(), Gio.IOErrorEnum.TIMED_OUT), e
        assert e.domain == "g-io-error-quark" and e.code == int(Gio.IOErrorEnum.TIMED_OUT)
        assert e.name == name and e.wait_ms == wait_ms, (e.name, e.wait_ms)
        assert ("“%s”" % name) in e.message, e.message
        assert not ran, "the block ran without the lock"
        return elapsed
    raise AssertionError("entering %r did not raise NotAcquiredError" % manager)


def test_with_lock(fx):
    reg, other = fx.registry(), fx.registry()
    lock = reg.obtain("with")
    theirs = other.obtain("with")
    with lock as held:
        assert held is lock
        assert lock.is_held_by_current_thread() and lock.get_hold_count() == 1
        assert theirs.try_lock() is False
        with lock:  # re-entry raises the hold count
            assert lock.get_hold_count() == 2
        assert lock.get_hold_count() == 1
    assert not lock.is_held_by_current_thread()
    assert other.get_lease_info("with") is None
    # An exception leaves the block unlocked and goes on unchanged.
    try:
        with lock:
            raise KeyError("from the block")
    except KeyError as e:
        assert e.args == ("from the block",)
    else:
        raise AssertionError("the block's exception was swallowed")
    assert not lock.is_held_by_current_thread()
    assert other.get_lease_info("with") is None
    # Another thread's `with` waits for this one (the GIL is not held while it waits).
    order = []

    def other_thread():
        with lock:
            order.append("B")

    with lock:
        worker = threading.Thread(target=other_thread)
        worker.start()
        order.append("A")
    worker.join(30)
    assert not worker.is_alive(), "the other thread's `with lock:` never got the lock"
    assert order == ["A", "B"], order
    reg.close()
    expect_error(Code.CLOSED, lock.__enter__)


def test_with_locked_wait(fx):
    reg, other = fx.registry(), fx.registry()
    lock = reg.obtain("bounded")
    theirs = other.obtain("bounded")
    assert theirs.try_lock()
    elapsed = expect_not_acquired("bounded", 100, lock.locked(wait_ms=100))
    assert elapsed >= 0.09, elapsed
    expect_not_acquired("bounded", 0, lock.locked(wait_ms=0))
    assert not lock.is_held_by_current_thread()
    assert theirs.unlock()
    with lock.locked(wait_ms=5000, ttl_ms=4000) as held:
        assert held is lock and lock.is_held_by_current_thread()
        info = other.get_lease_info("bounded")
        assert 0 < info.pttl_ms <= 4000, info.pttl_ms  # the TTL of this acquisition
    assert other.get_lease_info("bounded") is None
    expect_error(Code.INVALID, lock.locked(wait_ms=0, ttl_ms=-5).__enter__)
    assert not lock.is_held_by_current_thread()


def test_with_lease_lost(fx):
    store = "gi-with-lost-%d" % os.getpid()
    reg = Redislock.LockRegistry.new("memory://" + store, "gi")
    lock = reg.obtain("stolen")
    # The release at the end of the block reports that the block was not protected.
    try:
        with lock:
            assert RedislockTesting.memory_store_steal(store, "gi:stolen", "other", 60000)
    except GLib.Error as e:
        assert e.matches(Redislock.lock_error_quark(), Code.LEASE_LOST), e
        assert Code(e.code) == Code.LEASE_LOST
    else:
        raise AssertionError("a lost lease was not reported at the end of the block")
    assert not lock.is_held_by_current_thread()
    assert RedislockTesting.memory_store_expire(store, "gi:stolen")
    # ... chained to the block's own exception.
    try:
        with lock.locked(wait_ms=1000):
            assert RedislockTesting.memory_store_steal(store, "gi:stolen", "other", 60000)
            raise ValueError("from the block")
    except GLib.Error as e:
        assert e.code == int(Code.LEASE_LOST), e
        assert isinstance(e.__context__, ValueError), repr(e.__context__)
    else:
        raise AssertionError("a lost lease was not reported at the end of the block")
    reg.close()


def test_with_rw_lock(fx):
    reg, other = fx.registry(), fx.registry()
    mine = reg.obtain_rw("with-doc")
    theirs = other.obtain_rw("with-doc")
    with mine.read_locked(1000) as rw:
        assert rw is mine
        with theirs.read_locked(wait_ms=1000):  # readers of two registries
            pass
        expect_not_acquired("with-doc", 100, theirs.write_locked(wait_ms=100))
    expect_error(Code.NOT_OWNER, mine.read_unlock)  # the block read-unlocked
    with theirs.write_locked(1000):
        expect_not_acquired("with-doc", 0, mine.read_locked(0))
        expect_not_acquired("with-doc", 50, mine.write_locked(50))
    expect_error(Code.NOT_OWNER, theirs.write_unlock)
    with mine.write_locked(1000):
        pass
    try:
        with mine.read_locked():
            raise KeyError("from the block")
    except KeyError:
        pass
    with theirs.write_locked(0):  # nothing left held by the blocks above
        pass


def test_with_semaphore(fx):
    reg, other = fx.registry(), fx.registry()
    sem = reg.obtain_semaphore("with-pool", 2)
    theirs = other.obtain_semaphore("with-pool", 2)
    with sem.acquire(1000) as first:
        assert isinstance(first, Redislock.Permit) and not first.is_released()
        assert theirs.get_available() == 1
        with theirs.acquire(wait_ms=1000) as second:
            assert second.get_key() != first.get_key()
            assert sem.get_available() == 0
            expect_not_acquired("with-pool", 100, sem.acquire(100))
        assert sem.get_available() == 1
    assert first.is_released()
    assert sem.get_available() == 2
    # A permit given back in the block is not given back again at its end.
    with sem.acquire(0) as permit:
        assert permit.release() is True
        assert permit.is_released() and sem.get_available() == 2
        expect_error(Code.NOT_OWNER, permit.release)
    assert sem.get_available() == 2
    try:
        with sem.acquire():
            raise KeyError("from the block")
    except KeyError:
        pass
    assert sem.get_available() == 2


def test_with_registry(fx):
    with fx.registry() as reg:
        lock = reg.obtain("with-registry")
        assert lock.try_lock()
    expect_error(Code.CLOSED, lock.try_lock)
    assert fx.registry().get_lease_info("with-registry") is None  # close released it


TESTS = [
    test_types_registered,
    test_no_test_api_in_production_namespace,
    test_same_object_for_same_name,
    test_try_lock_then_other_registry_cannot,
    test_errors,
    test_out_arguments_and_structs,
    test_lock_all,
    test_wait_mode_setting,
    test_lease_lost_callback,
    test_lock_async,
    test_rw_lock,
    test_overrides_loaded,
    test_with_lock,
    test_with_locked_wait,
    test_with_lease_lost,
    test_with_rw_lock,
    test_with_semaphore,
    test_with_registry,
]


def main():
    fx = Fixture()
    print("1..%d" % len(TESTS))
    failed = 0
    for n, test in enumerate(TESTS, 1):
        name = "/introspection/" + test.__name__[len("test_"):].replace("_", "-")
        try:
            note = test(fx)
        except Exception:
            failed += 1
            print("not ok %d %s" % (n, name))
            for line in traceback.format_exc().splitlines():
                print("# " + line)
        else:
            directive = " # " + note if note else ""
            print("ok %d %s%s" % (n, name, directive))
        sys.stdout.flush()
    del fx
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
