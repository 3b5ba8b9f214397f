-- Named queries of the OpenTelemetry hooks (telemetry.py, docs/observability.md). Every value
-- is a parameter; none runs unless tracing or a metrics reader is configured.

-- name: telemetry_store_context
-- In rt.start's transaction, right after the insert: the span it ran in.
update ilr.workflows set traceparent = %(traceparent)s where id = %(id)s;

-- name: telemetry_adopt_context
-- A traced claim of a run started without a trace context: its run span becomes the trace's
-- root, and later claims (takeovers) continue that trace. First writer wins.
update ilr.workflows set traceparent = %(traceparent)s
 where id = %(id)s and traceparent is null;

-- name: telemetry_queue_depth
-- The interlock.queue.depth gauge: runs due (pending or sleeping with their time come) and not
-- claimed yet, per queue; 0 for the default queue and every configured queue that has none.
select queue, (count(*) filter (where due))::int as depth
  from (select queue, true as due from ilr.workflows
         where status in ('pending','sleeping') and available_at <= now()
        union all select name, false from ilr.queues
        union all select 'default', false) d
 group by queue;

-- name: telemetry_ambiguous_open
-- The interlock.effects.ambiguous_open gauge (index effects_ambiguous_open).
select count(*)::int as open from ilr.effects where state = 'ambiguous' and reconciled is null;
