-- Migration 0009: a deployment holds the description of its workflow's declared input type
-- (docs/typed.md#checked-at-the-door).
--
-- A worker stores it when it registers the deployment: a subset of JSON Schema derived from the
-- dataclass or pydantic model the workflow function annotates its input with. A start by name
-- (`interlock start`, rt.start("name", ...)) reads it from the deployment it starts against and
-- checks the input in the start's own transaction, before anything is written. Null (no typed
-- input, or a deployment registered before this migration, until a worker registers it again):
-- nothing is checked at the door.
alter table ilr.deployments add column input_schema jsonb;
