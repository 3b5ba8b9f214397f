-- The answer to a database fault (db_faults.py, docs/errors.md#database-faults).

-- name: login_roles
-- The runtime's roles (sql/roles.sql) the session's user is a member of, for a refusal's
-- message: "the DSN logs in as alice (a member of ilr_worker)".
select rolname from pg_roles
 where rolname in ('ilr_worker', 'ilr_operator', 'ilr_auditor')
   and pg_has_role(current_user, oid, 'member')
 order by rolname
