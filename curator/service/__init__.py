"""The library face (Memory), jobs, the HTTP service, the OpenAI-compatible proxy, MCP and the panel."""
