"""An import plan as the operator reads it: a table per kind, or JSON (pure).

Only labels, actions, reasons and notes: never a field value (env values, secrets,
channel URLs stay in the plan's `fields`, which nothing here reads).
"""

from __future__ import annotations

from typing import Any

from .plan import KINDS, Action, Plan
from .said import Said

TITLES = {"cron": "crons → tasks", "env": "envs", "script": "scripts",
          "subscription": "subscriptions", "app": "apps (OpenAPI clients)",
          "channel": "notifications → channels", "dependency": "dependencies",
          "setting": "settings", "log": "logs (--with-logs)"}
DONE = {Action.CREATE: "created", Action.CHANGE: "changed", Action.SKIP: "skipped",
        Action.CONFLICT: "conflict"}


def counts(plan: Plan) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for item in plan.items:
        per = out.setdefault(item.kind, {a.value: 0 for a in Action})
        per[item.action.value] += 1
    return out


def coded(text: str) -> dict[str, Any]:
    """A reason or note as a code and its params (plan.Said); "" for a sentence that
    has none yet (the panel then says it generically, never in English)."""
    return {"code": getattr(text, "code", ""), "params": getattr(text, "params", {})}


def as_json(plan: Plan) -> dict[str, Any]:
    # `reason`/`notes` stay English (the CLI's words, API users); `why`/`notes_coded`
    # are the same as codes for a client's own words (the panel: i18n.js imp.why.*).
    # `choices`: how a conflict can be decided (the `choices` field of the upload).
    return {"source": plan.source, "root": plan.root, "applied": plan.apply,
            "on_conflict": plan.on_conflict, "counts": counts(plan),
            "notes": [str(n) for n in plan.notes], "notes_coded": [coded(n) for n in plan.notes],
            "items": [{"kind": i.kind, "key": i.key, "label": str(i.label),
                       "label_coded": coded(i.label) if isinstance(i.label, Said) else None,
                       "action": i.action.value, "reason": str(i.reason),
                       "notes": [str(n) for n in i.notes],
                       "why": coded(i.reason) if i.reason else None,
                       "notes_coded": [coded(n) for n in i.notes], "choices": i.choices}
                      for i in plan.items]}


def text(plan: Plan) -> str:
    lines = [f"QingLong import of {plan.root} — "
             + ("applied" if plan.apply else "dry run: nothing written (--apply imports)")]
    if plan.on_conflict:
        lines.append(f"conflicts: {plan.on_conflict}")
    per = counts(plan)
    width = max((len(i.label) for i in plan.items), default=10)
    width = min(max(width, 10), 48)
    for kind in KINDS:
        items = [i for i in plan.items if i.kind == kind]
        if not items:
            continue
        summary = ", ".join(f"{n} {a}" for a, n in per[kind].items() if n)
        lines += ["", f"{TITLES[kind]}: {summary}"]
        for i in items:
            word = DONE[i.action] if plan.apply else i.action.value
            label = i.label if len(i.label) <= width else i.label[:width - 1] + "…"
            lines.append(f"  {word:<9} {label:<{width}}  {i.reason}".rstrip())
            lines += [f"{'':<12}· {n}" for n in i.notes]
    if plan.notes:
        lines += ["", "notes:"] + [f"  · {n}" for n in plan.notes]
    conflicts = sum(1 for i in plan.items if i.action is Action.CONFLICT)
    if conflicts:
        lines += ["", f"{conflicts} conflict(s) skipped: --on-conflict=rename|replace"
                      " decides them"]
    return "\n".join(lines) + "\n"
