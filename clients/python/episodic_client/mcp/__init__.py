"""The memory as MCP tools, served over HTTP calls to the memory service (the `mcp` extra).

    pip install './clients/python[mcp]'
    EPISODIC_URL=http://127.0.0.1:8080 EPISODIC_WORKSPACE_ID=acme EPISODIC_AGENT_ID=planner episodic-mcp

`tools.py` holds the tools (recall, recall_render, remember, forget, memory_health) and the `HttpWriter`;
`cli.py` the `episodic-mcp` command (stdio, or streamable HTTP). The engine's `episodic mcp` is the same
server with two additions that need the engine: `--writes kafka` and the embedding policy's importance.
Needs the `mcp` SDK; nothing of the engine.
"""
