"""The headless watcher (``prime-train-tui watch``): the monitor and its health rules for every pod, the
rentals' deadlines, push notifications (apprise), a Prometheus exporter and a state file the TUI reads —
with no Textual, as a long-running process; one per data dir (an flock).

Modules: ``threads`` (alerts → de-duplicated, rate-limited message threads; pure), ``notify`` (the
``[notify]`` settings, apprise, masked URLs, one push bounded in time), ``outbox`` (each target's queue of
pushes, retried until delivered or expired, kept in a file), ``exporter`` (the /metrics collector), ``state`` (the state
file and what the TUI shows of it), ``lock`` (one watcher per data dir), ``jsonlog`` (JSON-lines logs with
secrets redacted), ``watcher`` (the loop that ties them together)."""
