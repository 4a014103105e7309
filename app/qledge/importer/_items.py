"""Import items of apps, notification channels, linux dependencies, settings and logs
(pure; build.py builds the rest and the plan)."""

from __future__ import annotations

from typing import Any

from .. import taskform
from ..apps.spec import RUNS_CODE, SCOPES, digest
from ..notifications import qinglong as qinglong_notify
from .plan import Action, Ctx, Item, decide, skip
from .said import said


def timeout_s(ctx: Ctx) -> int | None:
    """QingLong's CommandTimeoutTime (a `timeout(1)` duration for every task run)."""
    raw = ctx.config("CommandTimeoutTime")
    try:
        return max(1, round(taskform.parse_duration(raw))) if raw else None
    except taskform.TaskFormError:
        return None



# -- apps, channels, dependencies, settings, logs -------------------------------------------

def apps(ctx: Ctx) -> list[Item]:
    out = []
    for a in ctx.source.apps:
        key, label = str(a.id), a.name
        if a.name == "system":
            out.append(skip("app", key, label, said("QL_INTERNAL_APP", "QingLong's internal"
                                                    " app (its task runner's)")))
            continue
        scopes = [s for s in dict.fromkeys(a.scopes) if s in SCOPES]
        dropped = [s for s in a.scopes if s not in SCOPES]
        notes: list[str] = [said("SCOPES_DROPPED", "scopes without a qledge equivalent dropped:"
                      f" {', '.join(dropped)}", scopes=", ".join(dropped))] if dropped else []
        runs_code = [s for s in RUNS_CODE if s in scopes]
        if runs_code:  # as when an app is created (docs/security.md, scope table)
            notes.append(said("SCOPES_RUN_CODE", f"{', '.join(runs_code)}: running any code as"
                              " the task user, every env value in reach (docs/security.md)",
                              scopes=", ".join(runs_code)))
        if not scopes or not a.client_id or not a.client_secret:
            out.append(skip("app", key, label, said("NO_SCOPE", "no scope qledge serves (crons,"
                                                    " envs, logs, scripts)") if a.client_id
                            else said("NO_CLIENT_ID", "no client id"), notes))
            continue
        name = a.name.strip()[:100]
        fields: dict[str, Any] = {"name": name, "client_id": a.client_id,
                                  "secret_hash": digest(a.client_secret).hex(),
                                  "scopes": scopes}
        by_client = ctx.target.apps_by_client.get(a.client_id)
        existing = by_client or ctx.target.apps_by_name.get(name)
        clash = said("SAME_CLIENT_ID", "a qledge app has this client_id") if by_client else \
            said("SAME_NAME", f"a qledge app is named {a.name!r}", name=name)
        rename = None if by_client else (lambda f: {**f, "name": Ctx.free_name(
            f["name"], ctx.target.apps_by_name)})
        out.append(decide(ctx, kind="app", key=key, label=label, fields=fields, notes=notes,
                          existing=existing, clash=clash, rename=rename,
                          keep_on_change=("name",)))
    return out


def channels(ctx: Ctx) -> list[Item]:
    """QingLong's own channel (system settings), then each service config.sh sets up."""
    out: list[Item] = []
    wanted: list[tuple[str, str, str, dict[str, str]]] = []  # key, label, enabling, env
    info = ctx.source.notification
    if info and info.get("type"):
        label: str = said("L_QL_CHANNEL", f"QingLong channel: {info['type']}",
                          service=str(info["type"])[:40])
        env = qinglong_notify.panel_env(info)
        urls = qinglong_notify.urls(env or {})
        if env is None or not urls:
            why = said("NO_APPRISE_MAPPING", "no apprise mapping for this service: add a"
                       " channel with its apprise URL (docs/notifications.md)") \
                if env is None else said("INCOMPLETE_CHANNEL", "incomplete settings (a"
                                         " required value is empty): add a channel with its"
                                         " apprise URL (docs/notifications.md)")
            out.append(skip("channel", "system", label, why))
        else:
            wanted.append(("system", label, next(iter(urls)), env))
    values = {k: v for k, v in (ctx.source.config.values if ctx.source.config else {}).items()
              if k in qinglong_notify.NAMES and v.strip()}
    wanted += [(name, said("L_CONFIG", f"config.sh: {name}", name=name), name, values)
               for name in sorted(qinglong_notify.urls(values))]
    for name, service in sorted(qinglong_notify.UNMAPPED.items()):
        if values.get(name):
            out.append(skip("channel", name, said("L_CONFIG", f"config.sh: {name}",
                                                  name=name), said(
                "UNMAPPED_SERVICE", f"{service}: no apprise mapping; add a channel with its"
                " apprise URL", service=service)))
    seen: dict[str, str] = {}
    for key, label, enabling, env in wanted:
        url = qinglong_notify.urls(env)[enabling]
        if url in seen:
            out.append(skip("channel", key, label, said(
                "SAME_SERVICE_AS", f"the same service as {seen[url]}", other=seen[url])))
            continue
        seen[url] = label
        notes: list[str] = [said("NOT_CARRIED", f"{d} is not carried over (apprise's URL"
                                 " has no place for it)", name=d)
                 for d in qinglong_notify.DROPPED if env.get(d, "").strip()
                 and "api.telegram.org" not in env[d]]
        name = "qinglong" if key == "system" else f"qinglong {enabling}"
        fields = {"name": name, "url": url, "enabled": True}
        same = ctx.target.channel_urls.get(url)
        out.append(decide(
            ctx, kind="channel", key=key, label=label, fields=fields, notes=notes,
            existing=same or ctx.target.channels_by_name.get(name),
            clash=said("SAME_SERVICE", "this service is a qledge channel already under another"
                       " name") if same
            else said("SAME_NAME", f"a qledge channel is named {name!r}", name=name),
            rename=lambda f: {**f, "name": Ctx.free_name(f["name"],
                                                         ctx.target.channels_by_name)},
            keep_on_change=("name",)))
    return out


def linux_dependencies(ctx: Ctx) -> list[Item]:
    """Linux packages; nodejs and python3 ones are db/imports.dependency_items's."""
    return [skip("dependency", str(d.id), f"{d.name} (linux)", said(
        "SYSTEM_PACKAGE", "a system package: build it into the image (EXTRA_PACKAGES=…) —"
        " docs/dependencies.md"))
            for d in ctx.source.dependencies if d.type == 2]


def settings(ctx: Ctx) -> list[Item]:
    out = [skip("setting", "login", said("L_LOGIN", "users and passwords"), said(
        "LOGIN_NOT_IMPORTED", "not imported: qledge signs in with its admin token"
        " (docs/security.md)"))]
    config = ctx.source.config
    timeout = timeout_s(ctx)
    hints = {"RandomDelay": said("RANDOM_DELAY", "not imported: set QLEDGE_RANDOM_DELAY_S"
                                 " (a setting)"),
             "ProxyUrl": said("NO_EQUIVALENT", "not imported: no equivalent"),
             "DefaultCronRule": said("DEFAULT_SCHEDULE", "used as the subscriptions'"
                                     " default_schedule"),
             "RepoFileExtensions": said("DEFAULT_EXTENSIONS", "used as the subscriptions'"
                                        " default extensions"),
             "CommandTimeoutTime": said("TIMEOUT_APPLIED", "every imported task gets"
                                        f" timeout_s {timeout}", seconds=str(timeout))
             if timeout else said("TIMEOUT_UNREAD", "not a duration qledge reads: not"
                                  " applied")}
    for name, hint in hints.items():
        value = ctx.config(name)
        if value:
            out.append(skip("setting", name, said("L_CONFIG_VALUE", f"config.sh {name}="
                                                  f"{value[:40]}", name=name, value=value[:40]),
                            hint))
    if config is not None:
        if config.extra_sh:
            out.append(skip("setting", "extra.sh", "config/extra.sh", said(
                "EXTRA_SH", "no equivalent (it ran at QingLong's start)")))
        for name in config.computed:
            out.append(skip("setting", name, said("L_CONFIG", f"config.sh {name}", name=name), said(
                "COMPUTED", "computed by the shell ($ or `): not evaluated, not imported")))
    tz = ctx.source.system.get("timezone")
    if tz:
        out.append(skip("setting", "timezone", said("L_TIMEZONE", f"timezone {str(tz)[:40]}",
                                                    zone=str(tz)[:40]), said(
            "TIMEZONE", "set the container's TZ (compose: environment TZ=…)")))
    # The rest of QingLong's system settings (log removal, concurrency, mirrors, the
    # global SSH key…): named, never their values.
    out += [skip("setting", key, said("L_SYSTEM_SETTING", f"system setting {key[:40]}",
                                      name=key[:40]), said(
        "SYSTEM_SETTING", "not imported: no equivalent to carry it to (retention.md,"
        " image.md for qledge's own)"))
            for key, value in sorted(ctx.source.system.items())
            if key != "timezone" and value not in (None, "", 0, False)]
    return out


def logs(ctx: Ctx) -> list[Item]:
    if not ctx.source.logs:
        return [skip("log", "log/", "log/", said(
            "NO_LOGS", "no log copied: --with-logs N copies each cron's newest N logs,"
            " read-only"))]
    out = []
    for logs in ctx.source.logs:
        dest = [f"qinglong/{logs.folder}/{n}" for n in logs.files]
        todo = [d for d in dest if d not in ctx.target.log_files]
        label = said("L_LOG", f"log/{logs.folder}/ ({len(logs.files)} files)",
                     folder=logs.folder, n=str(len(logs.files)))
        if not todo:
            out.append(skip("log", str(logs.cron_id), label, said("COPIED_BEFORE",
                                                                  "copied before")))
            continue
        out.append(Item(kind="log", key=str(logs.cron_id), label=label, action=Action.CREATE,
                        reason=said("LOG_COPIES", "read-only copies into the logs volume,"
                                    f" qinglong/{logs.folder}/", folder=logs.folder),
                        fields={"folder": logs.folder, "files": [d.rsplit("/", 1)[1]
                                                                  for d in todo]}))
    return out
