"""An MCP client for termind's tests: the official `mcp` SDK (PyPI, 2.3.x) starts
`termind ... mcp` as a stdio server (or reaches termind serve's Streamable HTTP endpoint),
lists its tools and calls the ones given.

    python mcp_client.py MODE CALLS_JSON -- TERMIND_ARGV...
    python mcp_client.py MODE CALLS_JSON --url URL        (the Bearer token in $MCP_TOKEN)

MODE is the SDK's connect mode ("legacy": the initialize handshake; "auto": probe
server/discover, fall back to initialize). CALLS_JSON is a list of [name, arguments].
Prints one JSON object: the negotiated protocol version, the tools (name and annotations)
and each call's isError and text.
"""
import json
import os
import sys

import anyio
from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def field(value, *names):
    """A model's field by its Python or its wire name (the SDK's models use snake_case)."""
    for name in names:
        if hasattr(value, name):
            return getattr(value, name)
    return None


async def main() -> None:
    mode, calls = sys.argv[1], json.loads(sys.argv[2])
    if "--url" in sys.argv:
        url = sys.argv[sys.argv.index("--url") + 1]
        async with create_mcp_http_client(headers={"Authorization": "Bearer " + os.environ["MCP_TOKEN"]}) as http:
            await session(Client(streamable_http_client(url, http_client=http), mode=mode), calls)
    else:
        argv = sys.argv[sys.argv.index("--") + 1:]
        await session(Client(StdioServerParameters(command=argv[0], args=argv[1:], env=dict(os.environ)), mode=mode), calls)


async def session(connection, calls) -> None:
    report = {"calls": []}
    async with connection as client:
        session = getattr(client, "session", None)
        listed = await client.list_tools()
        report["tools"] = [{"name": tool.name, "annotations": tool.annotations.model_dump(exclude_none=True, by_alias=True) if tool.annotations else None,
                            "outputSchema": field(tool, "output_schema", "outputSchema") is not None,
                            "required": (field(tool, "input_schema", "inputSchema") or {}).get("required", [])} for tool in listed.tools]
        for name, arguments in calls:
            result = await client.call_tool(name, arguments)
            text = "".join(part.text for part in result.content if getattr(part, "type", "") == "text")
            report["calls"].append({"name": name, "isError": bool(field(result, "is_error", "isError")), "text": text,
                                    "structured": field(result, "structured_content", "structuredContent")})
        session = getattr(client, "session", None)
        init = getattr(session, "initialize_result", None) if session is not None else None
        report["protocolVersion"] = field(init, "protocol_version", "protocolVersion") if init is not None else None
        # The era: a stateless (2026-07-28) session adopted server/discover's answer.
        report["discovered"] = getattr(session, "discover_result", None) is not None
        report["sessionVersion"] = getattr(session, "protocol_version", None)
    print(json.dumps(report))


anyio.run(main)
