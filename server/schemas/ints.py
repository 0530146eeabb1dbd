"""The integers a client sends. Every one is bounded at the schema: a number past 64 bits, which no tensor, NumPy
array or JSON writer can hold, is a 422 naming its field before anything reads it. A field with a bound of its own
(a setting, a layer count) checks that later, with the real numbers.

Use these types bare (`layer: Index | None = Field(None, description=...)`): pydantic drops a field's own ge/le
when its type already carries bounds, so a field with other bounds spells both of them in its Field.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

Int64 = Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)]  # any 64-bit integer (a mask's position, a head's width)
Index = Annotated[int, Field(ge=0, le=INT64_MAX)]  # a layer, head, query, key or position: 0 up
Count = Annotated[int, Field(ge=1, le=INT64_MAX)]  # how many of something: 1 up
