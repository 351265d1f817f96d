"""An MCP client built on the official Python SDK (`mcp`, pinned in requirements.txt), for
sallyport-mcp/tests/python_sdk.rs.

The Rust test spawns this script and serves sallyport's MCP server over the script's stdin and
stdout, so the SDK speaks MCP over stdio exactly as it does to a server it launched itself; or,
when `SALLYPORT_MCP_URL` is set, the script connects to that Streamable HTTP endpoint with the
SDK's HTTP transport, sending `Authorization: Bearer $SALLYPORT_MCP_TOKEN`. The
script reports what it saw as JSON lines on stderr, each prefixed with `EVENT `; the test
decides the parked call's approval when it reads the `task` (or `parked`) event.

    python client.py modern TOOL ARGUMENTS_JSON   # 2026-07-28 (server/discover), tasks extension
    python client.py modern-cancel TOOL ARGUMENTS_JSON  # as modern, and tasks/cancel at once
    python client.py legacy TOOL ARGUMENTS_JSON   # 2025-11-25 (initialize), check_approval
    python client.py modern-plain TOOL ARGUMENTS_JSON   # 2026-07-28 without tasks: check_approval

`modern` declares the Tasks extension (SEP-2663, `io.modelcontextprotocol/tasks`) through the
SDK's extension interface: a claim on `resultType: "task"` whose resolver polls `tasks/get`
at the task's `pollIntervalMs` until it ends, so `Client.call_tool` returns the final tool
result. `legacy` makes the call and polls `check_approval` while the answer is `pending`.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import traceback
from typing import Any, Literal

import anyio
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.streamable_http import streamable_http_client
from mcp.server.stdio import stdio_server

TASKS = "io.modelcontextprotocol/tasks"
TERMINAL = ("completed", "failed", "cancelled")
DEADLINE_S = 60.0
TIMEOUT_S = 10.0


def emit(event: str, **fields: Any) -> None:
    sys.stderr.write("EVENT " + json.dumps({"event": event, **fields}, sort_keys=True) + "\n")
    sys.stderr.flush()


class TaskHandle(types.Result):
    """SEP-2663 `CreateTaskResult`: a task in place of the tool result."""

    result_type: Literal["task"]
    task_id: str
    status: str
    status_message: str | None = None
    created_at: str
    last_updated_at: str
    ttl_ms: int | None = None
    poll_interval_ms: int | None = None


class TaskState(types.Result):
    """SEP-2663 `GetTaskResult`: the task, with its result or error once it ends."""

    task_id: str
    status: str
    status_message: str | None = None
    poll_interval_ms: int | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


class TaskIdParams(types.RequestParams):
    task_id: str


class GetTask(types.Request[TaskIdParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: TaskIdParams
    name_param = "taskId"


class CancelTask(types.Request[TaskIdParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: TaskIdParams
    name_param = "taskId"


class Ack(types.Result):
    """SEP-2663's empty acknowledgement of `tasks/cancel`."""

    result_type: str | None = None


CANCEL = False
"""`modern-cancel`: send `tasks/cancel` as soon as the task is created."""


async def follow(task: TaskHandle, ctx: ClaimContext) -> types.CallToolResult:
    emit("task", task=task.model_dump(by_alias=True, mode="json", exclude_none=True))
    if CANCEL:
        await ctx.session.send_request(CancelTask(params=TaskIdParams(task_id=task.task_id)), Ack)
        emit("cancel_sent")
    interval = (task.poll_interval_ms or 1000) / 1000
    statuses = [task.status]
    state: TaskState | None = None
    with anyio.fail_after(DEADLINE_S):
        while state is None or state.status not in TERMINAL:
            await anyio.sleep(interval)
            state = await ctx.session.send_request(GetTask(params=TaskIdParams(task_id=task.task_id)), TaskState)
            if state.status != statuses[-1]:
                statuses.append(state.status)
            if state.poll_interval_ms:
                interval = state.poll_interval_ms / 1000
    emit("final", statuses=statuses, task=state.model_dump(by_alias=True, mode="json", exclude_none=True))
    if state.status != "completed" or state.result is None:
        # Client.call_tool must end with a tool result: say how the task ended.
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=f"task ended {state.status}")], is_error=True
        )
    return types.CallToolResult.model_validate(state.result, by_name=False)


class Tasks(ClientExtension):
    identifier = TASKS

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=TaskHandle, resolve=follow)]


def dump(result: types.CallToolResult) -> dict[str, Any]:
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


async def modern(client: Client, tool: str, arguments: dict[str, Any]) -> None:
    discover = client.session.discover_result
    emit(
        "connected",
        protocol_version=client.protocol_version,
        discovered=discover is not None,
        supported_versions=list(discover.supported_versions) if discover else [],
        server_extensions=sorted((client.server_capabilities.extensions or {}).keys()),
    )
    tools = await client.list_tools()
    emit("tools", names=[t.name for t in tools.tools])
    result = await client.call_tool(tool, arguments)
    emit("result", result=dump(result))


async def legacy(client: Client, tool: str, arguments: dict[str, Any]) -> None:
    emit(
        "connected",
        protocol_version=client.protocol_version,
        server_extensions=sorted((client.server_capabilities.extensions or {}).keys()),
    )
    tools = await client.list_tools()
    emit("tools", names=[t.name for t in tools.tools])
    first = await client.call_tool(tool, arguments)
    emit("parked", result=dump(first))
    structured = first.structured_content or {}
    answer = first
    with anyio.fail_after(DEADLINE_S):
        while (answer.structured_content or {}).get("status") == "pending":
            await anyio.sleep(0.2)
            answer = await client.call_tool("check_approval", {"approval_id": structured["approval_id"]})
    emit("result", result=dump(answer))


async def session(era: str, tool: str, arguments: dict[str, Any]) -> None:
    """Connects (`auto` probes `server/discover`; `legacy` sends `initialize`), runs the era's
    steps, then says `done` (or `error`, with the traceback) while still connected: the SDK's
    stdio transport reads stdin on a thread, so the script ends when the test closes its stdin
    after reading that event."""
    global CANCEL
    CANCEL = era == "modern-cancel"
    mode = "legacy" if era == "legacy" else "auto"
    extensions = [] if era == "modern-plain" else [Tasks()]
    async with Client(
        transport(), mode=mode, extensions=extensions, read_timeout_seconds=TIMEOUT_S
    ) as client:
        try:
            steps = legacy if era in ("legacy", "modern-plain") else modern
            await steps(client, tool, arguments)
        except Exception:
            emit("error", error=traceback.format_exc())
            raise
        emit("done")


def transport() -> Any:
    """Stdio, or Streamable HTTP at `SALLYPORT_MCP_URL` with the bearer token."""
    url = os.environ.get("SALLYPORT_MCP_URL")
    if not url:
        return stdio_server()
    headers = {"Authorization": "Bearer " + os.environ["SALLYPORT_MCP_TOKEN"]}
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=300.0))
    return streamable_http_client(url, http_client=http)


def main() -> None:
    # The SDK's own logging, on stderr beside the events (MCP_PY_LOG=DEBUG to debug a run).
    logging.basicConfig(level=os.environ.get("MCP_PY_LOG", "WARNING"), stream=sys.stderr)
    era, tool, arguments = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    anyio.run(session, era, tool, arguments)


if __name__ == "__main__":
    main()
