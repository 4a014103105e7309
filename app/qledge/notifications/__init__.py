"""Notifications (docs/notifications.md), pure: rules, messages, redaction and the scripts'
per-run credential (rules.py); QingLong's notification env names → apprise URLs
(qinglong.py). The sender is runtime/notifier.py, one send launch/notify_send.py."""
