"""Stream events of the Responses API: their type names and their shapes.

Events travel as plain JSON objects: the gateway emits tens of thousands of them a second and
carries unknown vendor events through unchanged, so no model object is built per event. The
TypedDicts below name the shapes of the events the gateway emits itself, one class per ``type``
(after openai-python's ``types/responses``), for type checkers only: ``StreamEvent`` is their
union plus ``JsonObject``, the open fallback every other event travels as. They leave out
``sequence_number``: ``core.stream.ResponseLifecycle`` adds it as it sends an event.

An upstream's events are untrusted JSON: ``checked_event`` checks each once, where it enters the
kernel, and returns it as an ``UpstreamEvent`` whose fields have the types the kernel reads.
"""

from __future__ import annotations

from typing import Final, Literal, Required, TypedDict, TypeGuard, cast

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
# kernel builds always have their type's fields; an upstream's events are checked below instead.


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


# ---------------------------------------------------------------------- upstream events


class UpstreamEvent(TypedDict, total=False):
    """An upstream event as ``checked_event`` lets it into the kernel.

    The fields the kernel reads have these types when present (a field the upstream sent with
    another type is left out); every other field rides along as the upstream sent it, for the
    copy that goes on to the client.
    """

    type: Required[str]
    response: JsonObject
    item: JsonObject
    part: JsonObject
    item_id: str
    output_index: int
    content_index: int
    summary_index: int
    delta: str
    text: str
    refusal: str
    arguments: str
    # Read but not checked: their handlers use what the upstream sent, whatever its type.
    name: object
    annotation: object
    code: object
    message: object
    param: object


_Field = tuple[str, type]
_ITEM_ADDRESS: tuple[_Field, ...] = (("item_id", str), ("output_index", int))
_PART_ADDRESS = (*_ITEM_ADDRESS, ("content_index", int))
_SUMMARY_ADDRESS = (*_ITEM_ADDRESS, ("summary_index", int))
_PART = ("part", dict)
_DELTA = ("delta", str)
_TEXT = ("text", str)

# Per upstream event type: the field without which its handler ignores it (the event is dropped)
# and the fields that are left out when they have another type (their handler ignores them).
_CHECKS: dict[str, tuple[_Field | None, tuple[_Field, ...]]] = {
    **dict.fromkeys(LIFECYCLE_EVENTS, (("response", dict), ())),
    **dict.fromkeys(TERMINAL_EVENTS, (None, (("response", dict),))),
    OUTPUT_ITEM_ADDED: (("item", dict), (("output_index", int),)),
    OUTPUT_ITEM_DONE: (("item", dict), (("output_index", int),)),
    **dict.fromkeys(
        (CONTENT_PART_ADDED, CONTENT_PART_DONE, REASONING_PART_ADDED, REASONING_PART_DONE),
        (None, (*_PART_ADDRESS, _PART)),
    ),
    **dict.fromkeys(
        (OUTPUT_TEXT_DELTA, REFUSAL_DELTA, REASONING_TEXT_DELTA), (None, (*_PART_ADDRESS, _DELTA))
    ),
    OUTPUT_TEXT_DONE: (None, (*_PART_ADDRESS, _TEXT)),
    REASONING_TEXT_DONE: (None, (*_PART_ADDRESS, _TEXT)),
    REFUSAL_DONE: (None, (*_PART_ADDRESS, ("refusal", str))),
    OUTPUT_TEXT_ANNOTATION_ADDED: (None, _PART_ADDRESS),
    FUNCTION_CALL_ARGUMENTS_DELTA: (None, (*_ITEM_ADDRESS, _DELTA)),
    FUNCTION_CALL_ARGUMENTS_DONE: (None, (*_ITEM_ADDRESS, ("arguments", str))),
    REASONING_SUMMARY_PART_ADDED: (None, (*_SUMMARY_ADDRESS, _PART)),
    REASONING_SUMMARY_PART_DONE: (None, (*_SUMMARY_ADDRESS, _PART)),
    REASONING_SUMMARY_TEXT_DELTA: (None, (*_SUMMARY_ADDRESS, _DELTA)),
    REASONING_SUMMARY_TEXT_DONE: (None, (*_SUMMARY_ADDRESS, _TEXT)),
}


def checked_event(raw: JsonObject) -> UpstreamEvent | None:
    """Check an upstream event once, where it enters the kernel.

    ``None`` for an event its handler would ignore (an ``output_item.*`` without an ``item``
    object, a ``response.created`` without a ``response`` object …). A field the kernel reads
    that has another type is left out of the event (its handler falls back as it would for a
    missing field; the client's copy gets the gateway's value for it). An event of another type
    (``error``, ``[DONE]``, one the gateway does not know) comes back as it is: the kernel
    reads none of the checked fields of those.
    """
    kind = raw.get("type")
    check = _CHECKS.get(kind) if isinstance(kind, str) else None
    if check is not None:
        required, fields = check
        if required is not None and not isinstance(raw.get(required[0]), required[1]):
            return None
        for name, expected in fields:
            if name in raw and not isinstance(raw[name], expected):
                raw = _without_bad(raw, fields)
                break
    return cast(UpstreamEvent, raw)


def _without_bad(raw: JsonObject, fields: tuple[_Field, ...]) -> JsonObject:
    bad = {name for name, expected in fields if name in raw and not isinstance(raw[name], expected)}
    return {key: value for key, value in raw.items() if key not in bad}
