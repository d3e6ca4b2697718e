"""A counting proxy in front of Postgres: SQL round trips measured on the wire.

Every client of a design connects through it. Each Sync (extended protocol) or Query
(simple protocol) a client sends is one wait for the server, whatever the driver does
behind the call (prepares, pool resets), so the count cannot be fooled by how the
statements are spelled.
"""

import asyncio
import contextlib

SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104
ROUND_TRIP_MESSAGES = frozenset(b"SQ")


class RoundTripCounter:
    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        self.round_trips = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> int:
        """Listen on 127.0.0.1; returns the port."""
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self._server.sockets[0].getsockname()[1])

    def close(self) -> None:
        if self._server is not None:
            self._server.close()

    async def _serve(self, client: asyncio.StreamReader, to_client: asyncio.StreamWriter) -> None:
        try:
            server, to_server = await asyncio.open_unix_connection(self.socket_path)
        except OSError:
            to_client.close()
            return
        await asyncio.gather(
            self._forward(client, to_server, count=True),
            self._forward(server, to_client, count=False),
        )

    async def _forward(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, *, count: bool
    ) -> None:
        pending = bytearray()
        starting = True  # before the startup message, messages carry no type byte
        try:
            while data := await source.read(65536):
                sink.write(data)
                if count:
                    pending += data
                    starting = self._count(pending, starting)
                await sink.drain()
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                sink.close()

    def _count(self, pending: bytearray, starting: bool) -> bool:
        """Consume the complete messages in `pending`; returns whether startup continues."""
        while True:
            if starting:
                if len(pending) < 8 or len(pending) < int.from_bytes(pending[:4]):
                    return True
                code = int.from_bytes(pending[4:8])
                del pending[: int.from_bytes(pending[:4])]
                starting = code in (SSL_REQUEST, GSSENC_REQUEST)
                continue
            if len(pending) < 5 or len(pending) < 1 + int.from_bytes(pending[1:5]):
                return False
            if pending[0] in ROUND_TRIP_MESSAGES:
                self.round_trips += 1
            del pending[: 1 + int.from_bytes(pending[1:5])]
