"""The names of agents with a key (`logstream agent add`): the form a name may take, and the
look-alikes of the names registered that a new one may not be (S-8.11). The rules of the
event's fields are validation.py's."""

from __future__ import annotations

import unicodedata
from typing import Any

from mempalace_logstream import confusables, lazy
from mempalace_logstream.validation import fail, required_routing

# The name of an agent with a key (it names its key file): ASCII by default; with
# `allow_unicode`, letters and digits of any script (the first neither `_` nor a mark).
AGENT_NAME_RE = lazy.pattern(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$")
UNICODE_AGENT_NAME_RE = lazy.pattern(r"^[^\W_][\w.@-]{0,127}$")
AGENT_NAME_RULE = "1 to 128 letters, digits, '.', '_', '@' or '-' (it names the agent's key file)"


def agent_name(value: Any, field: str = "agent", *, allow_unicode: bool = False) -> str:
    """The name of an agent with a key (`logstream agent add`): in Unicode NFKC form, ASCII
    letters, digits and `._@-` unless `allow_unicode` (then letters and digits of one script,
    or Latin with Han/Hiragana/Katakana/Hangul/Bopomofo). Look-alikes of other agents are
    `check_lookalike`'s."""
    name = required_routing(field, value)
    folded = unicodedata.normalize("NFKC", name)
    if folded != name:
        raise fail(
            field,
            f"{name!r} is not in Unicode NFKC form (it reads as {folded!r}); write it that way",
        )
    if not allow_unicode:
        odd = next((ch for ch in name if not ch.isascii()), None)
        if odd is not None:
            raise fail(
                field,
                f"{name!r} contains U+{ord(odd):04X} ({unicodedata.name(odd, 'unnamed')}); the "
                "name of an agent with a key is ASCII letters, digits, '.', '_', '@' or '-' "
                "(`agent add --allow-unicode` takes other scripts)",
            )
    rule = UNICODE_AGENT_NAME_RE if allow_unicode else AGENT_NAME_RE
    if not rule.match(name):
        raise fail(field, f"{name!r} must be {AGENT_NAME_RULE}", 128)
    found = confusables.scripts(name)
    if confusables.is_mixed(found):
        raise fail(
            field,
            f"{name!r} mixes scripts ({', '.join(found)}); an agent's name is written in one",
        )
    return name


def check_lookalike(field: str, name: str, registered: frozenset[str]) -> None:
    """Refuse `name` when it looks like, without being, the name of an agent with a key
    (`registered`): the same skeleton (`confusables.skeleton`) or the same name but for case.
    `*` (broadcast) is never one."""
    other = None if name == "*" else confusables.lookalike(name, registered)
    if other is None:
        return
    odd = confusables.first_odd(name, other)
    where = f" (U+{ord(odd):04X} {unicodedata.name(odd, 'unnamed')})" if odd else ""
    raise fail(
        field,
        f"{name!r} looks like {other!r}, an agent with a key here{where}; names that look "
        "alike cannot coexist",
    )
