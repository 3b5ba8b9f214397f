-- Migration 0007: the trace context of a workflow (issue 21, item 1; docs/observability.md).
--
-- rt.start stores the W3C traceparent of the span it ran in, so that every claim of the run
-- (a takeover after a crash included) continues one trace. Null when nothing was traced; a
-- traced worker then adopts its first claim's context (first writer wins). Nothing else reads
-- it, and nothing of the runtime's behaviour depends on it.
alter table ilr.workflows
  add column traceparent text
    check (traceparent ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$');

-- The gauge of open AMBIGUOUS effects counts these rows at every metrics collection.
create index effects_ambiguous_open on ilr.effects (effect_id)
  where state = 'ambiguous' and reconciled is null;
