"""The reference MCP server for termind-mcp-bench: the official SDK's own `MCPServer` (PyPI
`mcp` 2.3.x) over stdio, with a `list_hosts` tool equivalent to termind's (the same hosts as
JSON text; a static list, so the figure is the server's own cost, not a database's)."""
import json
import sys

from mcp.server.mcpserver import MCPServer

HOSTS = json.loads(sys.argv[1]) if len(sys.argv) > 1 else []
server = MCPServer("reference", log_level="WARNING")


@server.tool()
def list_hosts(tag: str | None = None) -> str:
    """List the operator's saved SSH hosts (label, address, port, user, tags), optionally those with a tag."""
    return json.dumps([h for h in HOSTS if tag is None or tag in h.get("tags", [])], separators=(",", ":"))


server.run("stdio")
