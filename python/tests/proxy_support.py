"""A TCP proxy on loopback that can cut a link without closing it: after
:meth:`BlackholeProxy.cut` every byte either way is read and dropped, so
both ends see a silent peer, as behind a network partition."""

from __future__ import annotations

import socket
import threading
from contextlib import suppress


class BlackholeProxy:
    """Forwards each connection made to :attr:`address` to ``target``."""

    def __init__(self, target: str) -> None:
        host, port = target.rsplit(":", 1)
        self._target = (host, int(port))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._cut = threading.Event()
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def cut(self) -> None:
        """Drop every byte from now on, keeping the connections open."""
        self._cut.set()

    def close(self) -> None:
        self._listener.close()
        for sock in self._sockets:
            with suppress(OSError):
                sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            server = socket.create_connection(self._target)
            self._sockets += [client, server]
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        with suppress(OSError):
            while data := source.recv(65536):
                if not self._cut.is_set():
                    sink.sendall(data)
        with suppress(OSError):
            sink.shutdown(socket.SHUT_WR)
