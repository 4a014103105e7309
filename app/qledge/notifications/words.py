"""The words of a message in each language the appliance speaks (docs/notifications.md).

Messages go to a phone, not to the panel: they cannot be translated on the way, so
they are written in the language of the `language` setting ("en" or "zh-CN").
The English reasons are `rules.REASONS`; the 中文 ones are here, one per code
(tests/test_notify.py checks both tables name the same codes).
"""

from __future__ import annotations

LANGUAGES = ("en", "zh-CN")

STATUS: dict[str, dict[str, str]] = {
    "en": {"failed": "failed", "timed_out": "timed out", "lost": "lost",
           "blocked": "blocked", "succeeded": "succeeded", "cancelled": "cancelled",
           "queued": "queued", "running": "running"},
    "zh-CN": {"failed": "失败", "timed_out": "超时", "lost": "丢失", "blocked": "受阻",
              "succeeded": "成功", "cancelled": "已取消", "queued": "排队中",
              "running": "运行中"},
}

REASONS_ZH: dict[str, str] = {
    "EXITED": "命令自行退出",
    "CANCEL_REQUESTED": "应请求取消",
    "TIMEOUT": "运行超过任务的超时时间，已被停止",
    "CANCELLED_BEFORE_START": "开始前已取消",
    "SPAWN_FAILED": "命令无法启动",
    "SPAWN_PREPARE_FAILED": "运行无法准备（某个保存的值超出范围）",
    "SPAWN_HANDLE_PERSIST_FAILED": "已启动，但其进程标识无法保存",
    "PROCESS_EXITED_WITHOUT_RECEIPT": "启动器结束时没有写下结果",
    "RECOVERY_PROCESS_EXITED_WITHOUT_RECEIPT": "在工作进程停止期间结束，没有留下结果",
    "RECOVERY_SPAWN_UNCONFIRMED": "工作进程在确认启动前停止了",
    "RECOVERY_SPAWN_BEFORE_REBOOT": "启动过程中机器宕机：它可能已经运行",
    "RECOVERY_IDENTITY_MISMATCH": "它的进程被另一个进程取代（pid 复用）",
    "RECOVERY_IDENTITY_MISSING": "它的进程标识从未记录",
    "RECOVERY_BOOT_CHANGED": "运行期间机器重启了",
    "RECOVERY_IDENTITY_UNSUPPORTED": "在此内核上无法识别它的进程",
    "RECOVERY_FOREIGN_OWNER": "它属于另一个节点",
    "RECOVERY_RUN_ALREADY_ENDED": "启动时它的运行已经结束，且没有结果",
    "TASK_ISOLATION_UNAVAILABLE": "要求任务隔离，但无法使用",
    "DISK_PRESSURE": "暂缓：磁盘快满了",
    "DISK_FREE_UNKNOWN": "暂缓：磁盘剩余空间未知",
}

# Exit codes with a meaning of their own (a shell's conventions; 128+N is signal N).
EXIT_CODES: dict[str, dict[int, str]] = {
    "en": {1: "a general error", 2: "a usage error", 126: "the command is not executable",
           127: "command not found", 130: "interrupted (SIGINT)", 137: "killed (SIGKILL)",
           139: "crashed (SIGSEGV)", 143: "terminated (SIGTERM)"},
    "zh-CN": {1: "一般错误", 2: "用法错误", 126: "命令不可执行", 127: "找不到命令",
              130: "被中断（SIGINT）", 137: "被杀死（SIGKILL）", 139: "崩溃（SIGSEGV）",
              143: "被终止（SIGTERM）"},
}

# Labels and sentences; "{}" fields are filled with str.format.
TEXT: dict[str, dict[str, str]] = {
    "en": {
        "task": "Task: {} (#{})", "status": "Status: {}", "reason": "Reason: {}",
        "exit": "Exit code: {}", "exit_none": "none", "duration": "Duration: {}",
        "run": "Run: {}", "streak": "This task failed {} times in a row.",
        "title_streak": "{}, {} times in a row",
        "recovered_title": "recovered",
        "recovered": "It succeeds again after failing: the failing spell is over.",
        "restart": "Recovered after a restart: the result was read from the run's"
                   " receipt by the next worker.",
        "digest_title": "[qledge] {} more notifications",
        "digest_head": "Held back by the rate limit ({} messages per {} minutes on this"
                       " channel):",
        "digest_more": "… and {} more (GET /api/v1/notifications/messages).",
        "log_tail": "Last {} log lines:", "log_unavailable": "(log unavailable)",
        "disk_on": "[qledge] disk pressure: new runs are held",
        "disk_on_body": "Reason: {}\nVolumes: {}\nQueued runs wait; running tasks go on."
                        " Old logs are evicted to make room (docs/retention.md).",
        "disk_off": "[qledge] disk pressure is over: runs resume",
        "disk_off_body": "Free space is back above the low-water mark; held runs start now.",
        "unknown": "unknown",
        "test": "[qledge] test message",
        "test_body": "A test from qledge (channel {}). If you read this, the channel works.",
        "signin": "[qledge] new sign-in to the panel",
        "signin_body": "A browser not seen before signed in.\nFrom: {}\nBrowser: {}\n"
                       "Method: {}\nIf this was not you: sign out everywhere and change the"
                       " password.",
    },
    "zh-CN": {
        "task": "任务：{}（#{}）", "status": "状态：{}", "reason": "原因：{}",
        "exit": "退出码：{}", "exit_none": "无", "duration": "耗时：{}",
        "run": "运行：{}", "streak": "此任务已连续失败 {} 次。",
        "title_streak": "{}，连续 {} 次",
        "recovered_title": "已恢复",
        "recovered": "失败之后再次成功：连续失败已结束。",
        "restart": "重启后恢复：结果由下一个工作进程从运行的回执中读出。",
        "digest_title": "[qledge] 另有 {} 条通知",
        "digest_head": "因频率限制而暂缓（此渠道每 {} 分钟最多 {} 条）：",
        "digest_more": "……另有 {} 条（GET /api/v1/notifications/messages）。",
        "log_tail": "日志最后 {} 行：", "log_unavailable": "（日志不可用）",
        "disk_on": "[qledge] 磁盘压力：新的运行被暂缓",
        "disk_on_body": "原因：{}\n卷：{}\n排队的运行会等待；正在运行的任务继续。"
                        "旧日志会被清理以腾出空间（docs/retention.md）。",
        "disk_off": "[qledge] 磁盘压力已解除：运行恢复",
        "disk_off_body": "剩余空间已回到低水位线以上；被暂缓的运行现在开始。",
        "unknown": "未知",
        "test": "[qledge] 测试消息",
        "test_body": "来自 qledge 的测试（渠道 {}）。看到这条消息，说明渠道可用。",
        "signin": "[qledge] 面板有新的登录",
        "signin_body": "一个从未见过的浏览器登录了面板。\n来自：{}\n浏览器：{}\n方式：{}\n"
                       "如果不是你本人：请“在所有设备上退出”并修改密码。",
    },
}


def lang(language: str | None) -> str:
    """The table to use: an unset or unknown language is English."""
    return language if language in LANGUAGES else "en"


def status(language: str, value: str) -> str:
    return STATUS[lang(language)].get(value, value)


def reason(language: str, code: str, english: str | None) -> str:
    """The code in words, the code itself kept for a search (docs/recovery.md)."""
    meaning = REASONS_ZH.get(code) if lang(language) == "zh-CN" else english
    return f"{meaning} ({code})" if meaning else code


def exit_code(language: str, code: int | None) -> str:
    if code is None:
        return text(language, "exit_none")
    meaning = EXIT_CODES[lang(language)].get(code)
    return f"{code} ({meaning})" if meaning else str(code)


def text(language: str, key: str, *args: object) -> str:
    return TEXT[lang(language)][key].format(*args)


def digest_head(language: str, limit: int, window_s: int) -> str:
    minutes = max(window_s // 60, 1) if window_s >= 60 else window_s / 60
    shown = f"{minutes:g}"
    if lang(language) == "zh-CN":
        return text(language, "digest_head", shown, limit)
    return text(language, "digest_head", limit, shown)
