"""A TCP proxy that a scenario can cut: one process reaches ZooKeeper through it and is cut off for real.

The process keeps running and keeps its sockets; it just stops hearing from ZooKeeper (the proxy closes every
connection and refuses new ones until :meth:`TcpProxy.restore`).  That is a network partition of one process
without root, namespaces or iptables.

Threads: one accept thread, and two pump threads per connection; all daemon threads, ended by :meth:`close`.
"""

from __future__ import annotations

import contextlib
import socket
import threading


class TcpProxy:
    """Forwards ``127.0.0.1:<port>`` to ``target``.  ``start()``/``close()``; ``cut()``/``restore()``."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self._listener: socket.socket | None = None
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self._cut = False
        self._closed = threading.Event()
        self.port = 0

    def start(self) -> TcpProxy:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        self._listener = listener
        self.port = listener.getsockname()[1]
        threading.Thread(target=self._accept, name=f"proxy-{self.port}", daemon=True).start()
        return self

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def cut(self) -> None:
        """Drop every connection and refuse new ones (the process behind is partitioned from ZooKeeper)."""
        with self._lock:
            self._cut = True
            conns, self._conns = self._conns, []
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    def restore(self) -> None:
        with self._lock:
            self._cut = False

    @property
    def is_cut(self) -> bool:
        return self._cut

    def close(self) -> None:
        self._closed.set()
        self.cut()
        if self._listener is not None:
            self._listener.close()

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        assert self._listener is not None  # noqa: S101 (set by start before this thread exists)
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                refused = self._cut
            if refused:
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
