"""Notifications of job transitions: CloudEvents or Slack messages, signed, delivered at least once."""
