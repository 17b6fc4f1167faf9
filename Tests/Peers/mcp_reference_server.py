"""The reference MCP server for termind-mcp-bench: the official SDK's own `MCPServer` (PyPI
`mcp` 2.3.x), with a `list_hosts` tool equivalent to termind's (the same hosts as JSON text;
a static list, so the figure is the server's own cost, not a database's).

    python mcp_reference_server.py HOSTS_JSON            over stdio
    python mcp_reference_server.py HOSTS_JSON --http     Streamable HTTP (JSON answers) on a
                                                         free loopback port, printed first
"""
import json
import socket
import sys

import anyio
from mcp.server.mcpserver import MCPServer

HOSTS = json.loads(sys.argv[1]) if len(sys.argv) > 1 else []
server = MCPServer("reference", log_level="WARNING")


@server.tool()
def list_hosts(tag: str | None = None) -> str:
    """List the operator's saved SSH hosts (label, address, port, user, tags), optionally those with a tag."""
    return json.dumps([h for h in HOSTS if tag is None or tag in h.get("tags", [])], separators=(",", ":"))


if "--http" in sys.argv:
    import uvicorn

    # The SDK's own HTTP app, served by uvicorn as MCPServer.run("streamable-http") does, on a
    # socket bound here so the port is free and known before anyone connects.
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    print(listener.getsockname()[1], flush=True)
    app = server.streamable_http_app(json_response=True, host="127.0.0.1")
    anyio.run(uvicorn.Server(uvicorn.Config(app, log_level="warning")).serve, [listener])
else:
    server.run("stdio")
