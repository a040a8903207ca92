"""Which role a section plays: data, wait, evaluation, checkpoint; by exact names, never guessed.

`iterate()` times its fetch as `data`; the integrations name what they time; evaluation and
checkpoint sections have conventional names (`CONVENTIONAL`, exact, case-sensitive); the
user names more with `configure(roles={...}, wait_sections=(...))`. A section name nobody gave
a role has none: the diagnosis abstains rather than guess from an unknown name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

ROLES = ("data", "wait", "evaluation", "checkpoint")
# The section names that play a role without `configure(roles=...)`: exact names. Naming a
# role in `roles=` replaces its conventional names (`roles={"evaluation": []}`: none).
CONVENTIONAL: dict[str, frozenset[str]] = {
    "evaluation": frozenset({"eval", "evaluate", "evaluation", "val", "validation"}),
    "checkpoint": frozenset({"checkpoint", "ckpt", "save_checkpoint"}),
}


@dataclass(frozen=True, slots=True)
class Roles:
    """Section names (the last level of a path) per role.

    Attributes:
        data: where the loop waits for its input (`iterate()`'s fetch is `"data"`).
        wait: where ranks wait for each other (a collective, DDP's all-reduce in `backward`).
        evaluation: evaluation or validation work (by default the names `eval`,
            `evaluate`, `evaluation`, `val`, `validation`).
        checkpoint: saving or loading checkpoints (by default `checkpoint`, `ckpt`,
            `save_checkpoint`).
        wait_paths: whole paths marked `wait` (`record(name, wait=True)`,
            `section(name, wait=True)`), whatever their name.

    """

    data: frozenset[str] = frozenset({"data"})
    wait: frozenset[str] = frozenset()
    evaluation: frozenset[str] = CONVENTIONAL["evaluation"]
    checkpoint: frozenset[str] = CONVENTIONAL["checkpoint"]
    wait_paths: frozenset[str] = frozenset()
    _by_name: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_name: dict[str, str] = {}
        for role in ROLES:
            for name in getattr(self, role):
                by_name.setdefault(name, role)
        object.__setattr__(self, "_by_name", by_name)

    def of(self, path: str) -> str | None:
        """Return the role of the section at `path` (marked, else by its last level), or None."""
        if path in self.wait_paths:
            return "wait"
        return self._by_name.get(path.rpartition(".")[2])

    def to_dict(self) -> dict[str, list[str]]:
        """Return `{role: [names]}` as plain data."""
        return {role: sorted(getattr(self, role)) for role in ROLES}


def roles_of(
    roles: Mapping[str, Iterable[str] | str] | None = None, wait_sections: Iterable[str] = ()
) -> Roles:
    """Return the `Roles` of `configure(roles=..., wait_sections=...)` over the defaults.

    `roles` maps a role to a section name or names; `wait_sections` adds names to `wait`.
    `data` keeps `"data"` (`iterate()`'s fetch) and adds the names given; `evaluation` and
    `checkpoint`, when given, replace their conventional names (an empty list: no section).

    Raises:
        ValueError: an unknown role, or a name that is empty, not a string or holds a `.`.

    """
    chosen: dict[str, set[str]] = {"data": {"data"}, "wait": set()}
    given = set((roles or {}).keys())
    for role, conventional in CONVENTIONAL.items():
        if role not in given:
            chosen[role] = set(conventional)
    for role, names in (roles or {}).items():
        if role not in ROLES:
            raise ValueError(f"roles: unknown role {role!r}; choose from {', '.join(ROLES)}")
        chosen.setdefault(role, set()).update(_names(f"roles[{role!r}]", names))
    chosen["wait"].update(_names("wait_sections", wait_sections))
    return Roles(
        data=frozenset(chosen["data"]),
        wait=frozenset(chosen["wait"]),
        evaluation=frozenset(chosen.get("evaluation", ())),
        checkpoint=frozenset(chosen.get("checkpoint", ())),
    )


def _names(what: str, names: Iterable[str] | str) -> list[str]:
    listed = [names] if isinstance(names, str) else list(names)
    for name in listed:
        if not isinstance(name, str) or not name or "." in name:
            raise ValueError(f"{what}: {name!r} is not a section name (a non-empty str, no '.')")
    return listed
