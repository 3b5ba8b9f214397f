-- Migration 0010: an effect records the action it was proposed as (docs/operations.md: describe).
--
-- The action (ctx.effect's `action=`, else the target's) is what a grant allows and what a
-- reader looks for when finding an effect; it was known only inside the dispatch. Written once,
-- when the effect row is inserted; null for effects made before this migration.
alter table ilr.effects add column action text;
