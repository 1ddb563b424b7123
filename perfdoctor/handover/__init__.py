"""Handing perfdoctor's results on: the MCP server for coding agents (`perfdoctor mcp`), the
agent skill (`perfdoctor skill`), and the sessions under an --out directory."""
