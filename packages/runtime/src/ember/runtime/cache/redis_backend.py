"""The remote program cache: a Redis server shared by many machines.

Ember speaks Redis's protocol (RESP2) itself over a socket: the cache needs five
commands (``AUTH``, ``SELECT``, ``GET``, ``SET``, ``SCAN``/``DEL`` for ``cache clear
--remote``), which is less code than a client dependency for every user of the runtime.
``EMBER_REMOTE_CACHE=redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]`` names the server;
``rediss://`` (TLS) is not supported. Entries live under the keys ``ember:program:<key>``
and are signed (:mod:`.signing`).

A network or protocol error warns once (:class:`ProgramCacheWarning`), logs under
``cache``, and switches the remote cache off for the rest of the process: every lookup
is then a miss and compiling goes on (a server that is down does not cost a timeout per
compile). A reply is read within bounds (:data:`MAX_LINE`, :data:`MAX_BULK`,
:data:`MAX_ARRAY`, :data:`MAX_DEPTH`): a reply past one, or one that is not RESP (a
length that is no number), is a :class:`RedisError` like any other protocol error,
never a crash or an unbounded read. So is a request not done in time: one deadline
covers sending a command and reading its whole reply (:data:`TIMEOUT_S`, plus
:data:`MIN_BYTES_PER_S` for the strings sent and announced), not each socket read, so a
server that drips its reply a byte at a time cannot hold a compile up for long.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

KEY_PREFIX = "ember:program:"
TIMEOUT_S = 2.0
"""Seconds to connect, and the deadline of one request: sending a command and reading
its whole reply (longer by :data:`MIN_BYTES_PER_S` for large strings)."""
MIN_BYTES_PER_S = 1 << 20
"""The slowest transfer a request's deadline allows for the strings it sends and the
strings its reply announces: each such byte adds ``1 / MIN_BYTES_PER_S`` seconds to
:data:`TIMEOUT_S` (a large entry on a slow link is no timeout; a server dripping its
reply is)."""
MAX_LINE = 64 << 10
"""Bytes of a status, error or length line of a reply."""
MAX_BULK = 512 << 20
"""Bytes of one string of a reply (Redis's own default ``proto-max-bulk-len``)."""
MAX_ARRAY = 1 << 20
"""Items of one array of a reply."""
MAX_DEPTH = 4
"""Nesting of arrays in a reply (``SCAN`` answers two levels)."""


class RemoteCacheConfigError(ValueError):
    """``EMBER_REMOTE_CACHE`` (or its key) cannot be used as given."""


class RedisError(OSError):
    """The server answered with an error, or with something that is not RESP."""


@dataclass(frozen=True)
class RedisAddress:
    """Where the server is, from ``EMBER_REMOTE_CACHE``."""

    host: str
    port: int = 6379
    db: int = 0
    username: str | None = None
    password: str | None = field(default=None, repr=False)

    @staticmethod
    def parse(url: str) -> RedisAddress:
        """Read ``redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]``.

        Raises:
            RemoteCacheConfigError: another scheme, no host, or a bad port or db.
        """
        try:
            parts = urlsplit(url)
        except ValueError as e:  # an unclosed IPv6 bracket
            raise RemoteCacheConfigError(
                f"EMBER_REMOTE_CACHE={_redact_text(url)!r}: not a URL ({e})") from None
        if parts.scheme != "redis":
            raise RemoteCacheConfigError(
                f"EMBER_REMOTE_CACHE={redact(url)!r}: expected "
                "redis://[[USER]:PASSWORD@]HOST[:PORT][/DB] (rediss:// is not supported)")
        try:
            port = parts.port or 6379
        except ValueError:
            raise RemoteCacheConfigError(
                f"EMBER_REMOTE_CACHE={redact(url)!r}: the port is not a number from 0 to "
                "65535") from None
        path = parts.path.strip("/")
        if not parts.hostname or (path and not path.isdigit()):
            raise RemoteCacheConfigError(
                f"EMBER_REMOTE_CACHE={redact(url)!r}: expected a host and an optional "
                "database number (redis://HOST:PORT/DB)")
        return RedisAddress(parts.hostname, port, int(path or 0),
                            unquote(parts.username) if parts.username else None,
                            unquote(parts.password) if parts.password else None)

    def describe(self) -> str:
        """``redis://HOST:PORT/DB`` (no password)."""
        return f"redis://{self.host}:{self.port}/{self.db}"


def _redact_text(url: str) -> str:
    """``url`` with everything between ``://`` and ``@`` hidden (it may not parse)."""
    scheme, sep, rest = url.partition("://")
    return f"{scheme}{sep}***@{rest.rpartition('@')[2]}" if "@" in rest else url


def redact(url: str) -> str:
    """``url`` with its password replaced by ``***``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return parts._replace(netloc=netloc).geturl()


Reply = bytes | int | str | list["Reply"] | None


class RedisConnection:
    """One socket to a Redis server, speaking RESP2.

    ``timeout`` (default :data:`TIMEOUT_S`) bounds the connect and each request as a
    whole (:meth:`command`), never a single socket read.
    """

    def __init__(self, address: RedisAddress, timeout: float | None = None) -> None:
        self._timeout = TIMEOUT_S if timeout is None else timeout
        self._sock = socket.create_connection((address.host, address.port),
                                              timeout=self._timeout)
        self._buffer = bytearray()
        self._budget = self._timeout
        self._deadline = time.monotonic() + self._budget
        try:
            if address.password is not None:
                auth = [address.username, address.password] if address.username else [
                    address.password]
                self.command("AUTH", *auth)
            if address.db:
                self.command("SELECT", str(address.db))
        except OSError:
            self.close()
            raise

    def close(self) -> None:
        """Close the socket."""
        self._sock.close()

    def command(self, *args: str | bytes) -> Reply:
        """Send one command and return its reply, both within one deadline.

        Raises:
            RedisError: the server answered with an error or malformed data, or the
                request was not done by its deadline.
            OSError: the connection failed.
        """
        out = [b"*%d\r\n" % len(args)]
        for arg in args:
            data = arg.encode("utf-8") if isinstance(arg, str) else arg
            out.append(b"$%d\r\n%s\r\n" % (len(data), data))
        request = b"".join(out)
        self._budget = self._timeout
        self._deadline = time.monotonic() + self._timeout
        self._allow(len(request))
        self._sock.settimeout(self._remaining())
        try:
            self._sock.sendall(request)
        except TimeoutError:
            raise self._late("send a command") from None
        return self._reply()

    def _allow(self, nbytes: int) -> None:
        """Extend this request's deadline for ``nbytes`` more bytes to transfer."""
        extra = nbytes / MIN_BYTES_PER_S
        self._budget += extra
        self._deadline += extra

    def _remaining(self) -> float:
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            raise self._late("answer")
        return remaining

    def _late(self, what: str) -> RedisError:
        return RedisError(f"the server did not {what} within {self._budget:.3g} s "
                          "(the deadline of one request)")

    def _receive(self) -> None:
        """Append what the socket has to the buffer, waiting until the deadline at most.

        Raises:
            RedisError: the deadline passed, or the connection closed.
        """
        self._sock.settimeout(self._remaining())
        try:
            chunk = self._sock.recv(1 << 16)
        except TimeoutError:
            raise self._late("answer") from None
        if not chunk:
            raise RedisError("the connection closed in the middle of a reply")
        self._buffer += chunk

    def _line(self) -> bytes:
        searched = 0
        while True:
            end = self._buffer.find(b"\r\n", searched)
            if 0 <= end <= MAX_LINE:
                line = bytes(self._buffer[:end])
                del self._buffer[:end + 2]
                return line
            if end > MAX_LINE or len(self._buffer) > MAX_LINE + 1:
                raise RedisError(f"a reply line longer than {MAX_LINE} bytes: not RESP")
            searched = max(len(self._buffer) - 1, 0)
            self._receive()

    def _bulk(self, n: int) -> bytes:
        self._allow(n)
        while len(self._buffer) < n + 2:
            self._receive()
        if self._buffer[n:n + 2] != b"\r\n":
            raise RedisError(f"a string of {n} bytes in a reply is not followed by CRLF: "
                             "not RESP")
        data = bytes(self._buffer[:n])
        del self._buffer[:n + 2]
        return data

    def _reply(self, depth: int = 0) -> Reply:
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode("utf-8", "replace")
        if kind == b"-":
            raise RedisError(f"the server answered: {rest.decode('utf-8', 'replace')}")
        if kind == b":":
            return _number(line)
        if kind == b"$":
            n = _number(line)
            if n == -1:
                return None
            if not 0 <= n <= MAX_BULK:
                raise RedisError(f"a string of {n} bytes in a reply (at most {MAX_BULK}): "
                                 "not RESP")
            return self._bulk(n)
        if kind == b"*":
            n = _number(line)
            if n == -1:
                return None
            if not 0 <= n <= MAX_ARRAY or depth >= MAX_DEPTH:
                raise RedisError(f"an array of {n} items at depth {depth + 1} in a reply "
                                 f"(at most {MAX_ARRAY} items, {MAX_DEPTH} deep): not RESP")
            return [self._reply(depth + 1) for _ in range(n)]
        raise RedisError(f"not a RESP reply: {line[:40]!r}")


def _number(line: bytes) -> int:
    """The integer after the type byte of a RESP ``line``.

    Raises:
        RedisError: it is not an integer.
    """
    text = line[1:]
    if not text.lstrip(b"-").isdigit() or len(text) > 20:
        raise RedisError(f"not a RESP reply: {line[:40]!r} (expected a number)")
    return int(text)


class RedisStore:
    """Get and set entries by cache key on one server (a connection made on first use)."""

    def __init__(self, address: RedisAddress) -> None:
        self.address = address
        self._conn: RedisConnection | None = None

    def _connection(self) -> RedisConnection:
        if self._conn is None:
            self._conn = RedisConnection(self.address)
        return self._conn

    def get(self, key: str) -> bytes | None:
        """Entry ``key``'s bytes, None when absent.

        Raises:
            OSError: the server cannot be reached or answered an error.
        """
        reply = self._connection().command("GET", KEY_PREFIX + key)
        if reply is not None and not isinstance(reply, bytes):
            raise RedisError(f"GET answered {type(reply).__name__}, not a string")
        return reply

    def set(self, key: str, data: bytes) -> None:
        """Store entry ``key``.

        Raises:
            OSError: the server cannot be reached or answered an error.
        """
        self._connection().command("SET", KEY_PREFIX + key, data)

    def clear(self) -> int:
        """Delete every Ember entry on the server; return how many."""
        conn = self._connection()
        cursor, removed = "0", 0
        while True:
            reply = conn.command("SCAN", cursor, "MATCH", KEY_PREFIX + "*", "COUNT", "1000")
            if not (isinstance(reply, list) and len(reply) == 2
                    and isinstance(reply[0], bytes) and isinstance(reply[1], list)):
                raise RedisError("SCAN answered something that is not [cursor, keys]")
            keys = [k for k in reply[1] if isinstance(k, bytes)]
            if keys:
                count = conn.command("DEL", *keys)
                removed += count if isinstance(count, int) else 0
            cursor = reply[0].decode("ascii")
            if cursor == "0":
                return removed

    def close(self) -> None:
        """Close the connection, if any."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None
