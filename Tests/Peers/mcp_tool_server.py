"""An MCP server for termind's MCP client tests: the official SDK's own `MCPServer` (PyPI
`mcp` 2.3.x) with a read-only tool and a destructive one. The destructive one writes a line to
the file named by --log FILE, so a test sees whether it ran.

    python mcp_tool_server.py --log FILE                    over stdio (both eras)
    python mcp_tool_server.py --log FILE --legacy           over stdio, the handshake era only
                                                            (the SDK's own legacy loop, as a
                                                            server from before 2026-07-28)
    python mcp_tool_server.py --log FILE --http TOKEN_FILE  Streamable HTTP on a free loopback port
                                                 (printed first), answering only requests
                                                 with Authorization: Bearer <the file's token>
"""
import socket
import sys

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

LOG = sys.argv[sys.argv.index("--log") + 1]
server = MCPServer("peer", log_level="WARNING")


@server.tool(annotations=ToolAnnotations(readOnlyHint=True, destructiveHint=False))
def disk_usage(path: str) -> str:
    """How full the filesystem holding a path is (a fixed answer: this is a test peer)."""
    return f"{path}: 42% used"


@server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True))
def delete_thing(name: str) -> str:
    """Delete a named thing (records the call in the --log file)."""
    with open(LOG, "a") as log:
        log.write(f"deleted {name}\n")
    return f"deleted {name}"


if "--http" in sys.argv:
    import uvicorn

    token = open(sys.argv[sys.argv.index("--http") + 1]).read().strip()
    app = server.streamable_http_app(host="127.0.0.1")

    async def guarded(scope, receive, send):
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            if headers.get(b"authorization", b"").decode() != f"Bearer {token}":
                await send({"type": "http.response.start", "status": 401, "headers": [(b"content-type", b"text/plain")]})
                await send({"type": "http.response.body", "body": b"no\n"})
                return
        await app(scope, receive, send)

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    print(listener.getsockname()[1], flush=True)
    anyio.run(uvicorn.Server(uvicorn.Config(guarded, log_level="warning")).serve, [listener])
elif "--legacy" in sys.argv:
    from mcp.server.runner import _serve_legacy_stream
    from mcp.server.stdio import stdio_server

    low = server._lowlevel_server

    async def legacy() -> None:
        async with stdio_server() as (read_stream, write_stream):
            async with low.lifespan(low) as state:
                await _serve_legacy_stream(low, read_stream, write_stream, lifespan_state=state, session_id=None,
                                           init_options=low.create_initialization_options(), raise_exceptions=False)

    anyio.run(legacy)
else:
    server.run("stdio")
