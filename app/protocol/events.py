"""Stream events of the Responses API.

Events travel as plain JSON objects: the gateway emits tens of thousands of them a second and
carries unknown vendor events through unchanged, so no model object is built per event. The
TypedDicts below name the shapes the gateway emits itself, one class per ``type``.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict

Event = dict[str, Any]

RESPONSE_CREATED = "response.created"
RESPONSE_IN_PROGRESS = "response.in_progress"
RESPONSE_QUEUED = "response.queued"
RESPONSE_COMPLETED = "response.completed"
RESPONSE_INCOMPLETE = "response.incomplete"
RESPONSE_FAILED = "response.failed"
RESPONSE_DONE = "response.done"  # not OpenAI's: some servers send it instead of .completed
ERROR = "error"
# Not an event on the wire: the upstream adapter reports ``data: [DONE]`` with it.
STREAM_DONE = "[DONE]"

OUTPUT_ITEM_ADDED = "response.output_item.added"
OUTPUT_ITEM_DONE = "response.output_item.done"
CONTENT_PART_ADDED = "response.content_part.added"
CONTENT_PART_DONE = "response.content_part.done"
OUTPUT_TEXT_DELTA = "response.output_text.delta"
OUTPUT_TEXT_DONE = "response.output_text.done"
OUTPUT_TEXT_ANNOTATION_ADDED = "response.output_text.annotation.added"
REFUSAL_DELTA = "response.refusal.delta"
REFUSAL_DONE = "response.refusal.done"
FUNCTION_CALL_ARGUMENTS_DELTA = "response.function_call_arguments.delta"
FUNCTION_CALL_ARGUMENTS_DONE = "response.function_call_arguments.done"
REASONING_TEXT_DELTA = "response.reasoning_text.delta"
REASONING_TEXT_DONE = "response.reasoning_text.done"
REASONING_PART_ADDED = "response.reasoning_part.added"  # vLLM's name for content_part.added
REASONING_PART_DONE = "response.reasoning_part.done"  # vLLM's name for content_part.done
REASONING_SUMMARY_PART_ADDED = "response.reasoning_summary_part.added"
REASONING_SUMMARY_PART_DONE = "response.reasoning_summary_part.done"
REASONING_SUMMARY_TEXT_DELTA = "response.reasoning_summary_text.delta"
REASONING_SUMMARY_TEXT_DONE = "response.reasoning_summary_text.done"

# Upstream events that end a response.
TERMINAL_EVENTS = frozenset(
    {RESPONSE_COMPLETED, RESPONSE_INCOMPLETE, RESPONSE_FAILED, RESPONSE_DONE}
)
# Upstream lifecycle events whose only payload is a response snapshot.
LIFECYCLE_EVENTS = frozenset({RESPONSE_CREATED, RESPONSE_IN_PROGRESS, RESPONSE_QUEUED})


class ResponseLifecycleEvent(TypedDict):
    type: Literal[
        "response.created",
        "response.in_progress",
        "response.completed",
        "response.incomplete",
        "response.failed",
    ]
    response: dict[str, Any]
    sequence_number: int


class OutputItemEvent(TypedDict):
    type: Literal["response.output_item.added", "response.output_item.done"]
    output_index: int
    item: dict[str, Any]
    sequence_number: int


class ContentPartEvent(TypedDict):
    type: Literal["response.content_part.added", "response.content_part.done"]
    item_id: str
    output_index: int
    content_index: int
    part: dict[str, Any]
    sequence_number: int


class OutputTextDeltaEvent(TypedDict):
    type: Literal["response.output_text.delta"]
    item_id: str
    output_index: int
    content_index: int
    delta: str
    logprobs: list[dict[str, Any]]
    sequence_number: int


class OutputTextDoneEvent(TypedDict):
    type: Literal["response.output_text.done"]
    item_id: str
    output_index: int
    content_index: int
    text: str
    logprobs: list[dict[str, Any]]
    sequence_number: int


class FunctionCallArgumentsDeltaEvent(TypedDict):
    type: Literal["response.function_call_arguments.delta"]
    item_id: str
    output_index: int
    delta: str
    sequence_number: int


class FunctionCallArgumentsDoneEvent(TypedDict):
    type: Literal["response.function_call_arguments.done"]
    item_id: str
    output_index: int
    name: str
    arguments: str
    sequence_number: int


class ReasoningTextDeltaEvent(TypedDict):
    type: Literal["response.reasoning_text.delta"]
    item_id: str
    output_index: int
    content_index: int
    delta: str
    sequence_number: int


class ReasoningSummaryTextDeltaEvent(TypedDict):
    type: Literal["response.reasoning_summary_text.delta"]
    item_id: str
    output_index: int
    summary_index: int
    delta: str
    sequence_number: int


class ErrorEvent(TypedDict):
    type: Literal["error"]
    code: str | None
    message: str
    param: str | None
    sequence_number: int
