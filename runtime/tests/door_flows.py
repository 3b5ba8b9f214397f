"""Workflows whose input types are checked at the door (test_input_door.py): the new user's
`announce(ctx, topic: Topic)`, nested dataclasses, a pydantic model, the standard types."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import uuid
from decimal import Decimal
from typing import Literal

import pydantic

from interlock_runtime import workflow


@dataclasses.dataclass
class Topic:
    id: str
    topic: str


@workflow(name="announce", version="1")
def announce(ctx, topic: Topic) -> str:
    return f"{topic.id}: {topic.topic}"


class Tone(enum.Enum):
    DRY = "dry"
    WARM = "warm"


@dataclasses.dataclass(frozen=True)
class Tagging:
    tags: list[str]
    weights: dict[str, float] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Post:
    id: str
    topic: Tagging
    tone: Tone
    at: datetime.datetime
    day: datetime.date
    price: Decimal
    ref: uuid.UUID
    kind: Literal["news", "note"]
    pinned: bool
    reply_to: Tagging | None = None
    span: tuple[int, int] = (0, 0)


@workflow(name="publish", version="1")
def publish(ctx, post: Post) -> str:
    return post.id


class Author(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")

    name: str
    age: int
    tags: list[str] = []
    since: datetime.date | None = None

    @pydantic.field_validator("name")
    @classmethod
    def not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("a name is not blank")
        return value


@workflow(name="profile", version="1")
def profile(ctx, author: Author) -> str:
    return author.name


@workflow(name="untyped", version="1")
def untyped(ctx, payload) -> object:
    return payload


@dataclasses.dataclass
class Thread:
    """A class that holds itself: its description refers to itself."""

    text: str
    replies: list[Thread] = dataclasses.field(default_factory=list)


class Node(pydantic.BaseModel):
    name: str
    children: list[Node] = []


@dataclasses.dataclass
class Mixed:
    """A model inside a dataclass, and a dataclass of the same short name as a model's."""

    node: Node
    thread: Thread | None = None
