"""Stream events of the Responses API: their type names and their shapes.

Events travel as plain JSON objects: the gateway emits tens of thousands of them a second and
carries unknown vendor events through unchanged, so no model object is built per event. The
TypedDicts below name the shapes of the events the gateway emits itself, one class per ``type``
(after openai-python's ``types/responses``), for type checkers only: ``StreamEvent`` is their
union plus ``JsonObject``, the open fallback every other event travels as. They leave out
``sequence_number``: ``core.stream.ResponseLifecycle`` adds it as it sends an event.
"""

from __future__ import annotations

from typing import Final, Literal, TypedDict, TypeGuard

from app.protocol.items import ContentPart, SummaryText
from app.protocol.json_types import JsonObject

RESPONSE_CREATED: Final = "response.created"
RESPONSE_IN_PROGRESS: Final = "response.in_progress"
RESPONSE_QUEUED: Final = "response.queued"
RESPONSE_COMPLETED: Final = "response.completed"
RESPONSE_INCOMPLETE: Final = "response.incomplete"
RESPONSE_FAILED: Final = "response.failed"
RESPONSE_DONE: Final = "response.done"  # not OpenAI's: some servers send it instead of .completed
ERROR: Final = "error"
# Not an event on the wire: the upstream adapter reports ``data: [DONE]`` with it.
STREAM_DONE: Final = "[DONE]"

OUTPUT_ITEM_ADDED: Final = "response.output_item.added"
OUTPUT_ITEM_DONE: Final = "response.output_item.done"
CONTENT_PART_ADDED: Final = "response.content_part.added"
CONTENT_PART_DONE: Final = "response.content_part.done"
OUTPUT_TEXT_DELTA: Final = "response.output_text.delta"
OUTPUT_TEXT_DONE: Final = "response.output_text.done"
OUTPUT_TEXT_ANNOTATION_ADDED: Final = "response.output_text.annotation.added"
REFUSAL_DELTA: Final = "response.refusal.delta"
REFUSAL_DONE: Final = "response.refusal.done"
FUNCTION_CALL_ARGUMENTS_DELTA: Final = "response.function_call_arguments.delta"
FUNCTION_CALL_ARGUMENTS_DONE: Final = "response.function_call_arguments.done"
REASONING_TEXT_DELTA: Final = "response.reasoning_text.delta"
REASONING_TEXT_DONE: Final = "response.reasoning_text.done"
REASONING_PART_ADDED: Final = "response.reasoning_part.added"  # vLLM's name for content_part.added
REASONING_PART_DONE: Final = "response.reasoning_part.done"  # vLLM's name for content_part.done
REASONING_SUMMARY_PART_ADDED: Final = "response.reasoning_summary_part.added"
REASONING_SUMMARY_PART_DONE: Final = "response.reasoning_summary_part.done"
REASONING_SUMMARY_TEXT_DELTA: Final = "response.reasoning_summary_text.delta"
REASONING_SUMMARY_TEXT_DONE: Final = "response.reasoning_summary_text.done"

# Upstream events that end a response.
TERMINAL_EVENTS = frozenset(
    {RESPONSE_COMPLETED, RESPONSE_INCOMPLETE, RESPONSE_FAILED, RESPONSE_DONE}
)
# Upstream lifecycle events whose only payload is a response snapshot.
LIFECYCLE_EVENTS = frozenset({RESPONSE_CREATED, RESPONSE_IN_PROGRESS, RESPONSE_QUEUED})


class _Event(TypedDict):
    """The events as the kernel builds them: ``sequence_number`` is added when one is sent."""


class ResponseLifecycleEvent(_Event):
    type: Literal[
        "response.created",
        "response.in_progress",
        "response.queued",
        "response.completed",
        "response.incomplete",
        "response.failed",
    ]
    response: JsonObject


class OutputItemAddedEvent(_Event):
    type: Literal["response.output_item.added"]
    output_index: int
    item: JsonObject  # the known shapes: protocol.items


class OutputItemDoneEvent(_Event):
    type: Literal["response.output_item.done"]
    output_index: int
    item: JsonObject  # the known shapes: protocol.items


class ItemAddress(TypedDict):
    """Where an event about an item points: the item's id and its position in the output."""

    item_id: str | None  # None only for an item carried through without an id
    output_index: int


class PartAddress(ItemAddress):
    content_index: int


class SummaryAddress(ItemAddress):
    summary_index: int


class ContentPartAddedEvent(_Event, PartAddress):
    type: Literal["response.content_part.added"]
    part: ContentPart


class ContentPartDoneEvent(_Event, PartAddress):
    type: Literal["response.content_part.done"]
    part: ContentPart


class OutputTextDeltaEvent(_Event, PartAddress):
    type: Literal["response.output_text.delta"]
    delta: str
    logprobs: list[JsonObject]


class OutputTextDoneEvent(_Event, PartAddress):
    type: Literal["response.output_text.done"]
    text: str
    logprobs: list[JsonObject]


class ReasoningTextDeltaEvent(_Event, PartAddress):
    type: Literal["response.reasoning_text.delta"]
    delta: str


class ReasoningTextDoneEvent(_Event, PartAddress):
    type: Literal["response.reasoning_text.done"]
    text: str


class RefusalDeltaEvent(_Event, PartAddress):
    type: Literal["response.refusal.delta"]
    delta: str


class RefusalDoneEvent(_Event, PartAddress):
    type: Literal["response.refusal.done"]
    refusal: str


class OutputTextAnnotationAddedEvent(_Event, PartAddress):
    type: Literal["response.output_text.annotation.added"]
    annotation_index: int
    annotation: JsonObject


class FunctionCallArgumentsDeltaEvent(_Event, ItemAddress):
    type: Literal["response.function_call_arguments.delta"]
    delta: str


class FunctionCallArgumentsDoneEvent(_Event, ItemAddress):
    type: Literal["response.function_call_arguments.done"]
    name: str
    arguments: str


class ReasoningSummaryPartAddedEvent(_Event, SummaryAddress):
    type: Literal["response.reasoning_summary_part.added"]
    part: SummaryText


class ItemProgressEvent(_Event, ItemAddress):
    """A gateway tool's progress (``response.mcp_call.in_progress`` …): its type is the tool
    executor's to name, its payload only the address of the item."""

    type: str


class ErrorEvent(_Event):
    type: Literal["error"]
    code: str | None
    message: str
    param: str | None


# The events the gateway builds itself.
KnownEvent = (
    ResponseLifecycleEvent
    | OutputItemAddedEvent
    | OutputItemDoneEvent
    | ContentPartAddedEvent
    | ContentPartDoneEvent
    | OutputTextDeltaEvent
    | OutputTextDoneEvent
    | ReasoningTextDeltaEvent
    | ReasoningTextDoneEvent
    | RefusalDeltaEvent
    | RefusalDoneEvent
    | OutputTextAnnotationAddedEvent
    | FunctionCallArgumentsDeltaEvent
    | FunctionCallArgumentsDoneEvent
    | ReasoningSummaryPartAddedEvent
    | ItemProgressEvent
    | ErrorEvent
)
# Any event on its way to the client: a known shape, or one carried through as it came.
StreamEvent = KnownEvent | JsonObject


# Narrowing by ``type``: the tag names the shape (as in a discriminated union). The events the
# kernel builds always have their type's fields; an upstream's raw events are not checked here.


def is_item_added(event: StreamEvent) -> TypeGuard[OutputItemAddedEvent]:
    return event.get("type") == OUTPUT_ITEM_ADDED


def is_item_done(event: StreamEvent) -> TypeGuard[OutputItemDoneEvent]:
    return event.get("type") == OUTPUT_ITEM_DONE


def is_part_done(event: StreamEvent) -> TypeGuard[ContentPartDoneEvent]:
    return event.get("type") == CONTENT_PART_DONE


def is_text_done(event: StreamEvent) -> TypeGuard[OutputTextDoneEvent]:
    return event.get("type") == OUTPUT_TEXT_DONE


def is_annotation_added(event: StreamEvent) -> TypeGuard[OutputTextAnnotationAddedEvent]:
    return event.get("type") == OUTPUT_TEXT_ANNOTATION_ADDED


def is_arguments_delta(event: StreamEvent) -> TypeGuard[FunctionCallArgumentsDeltaEvent]:
    return event.get("type") == FUNCTION_CALL_ARGUMENTS_DELTA


def is_arguments_done(event: StreamEvent) -> TypeGuard[FunctionCallArgumentsDoneEvent]:
    return event.get("type") == FUNCTION_CALL_ARGUMENTS_DONE
