-- The role that owns the table $1 (quoted, possibly schema-qualified) when it is not the current
-- user but the current user may act as it (a superuser, or a member of the owning role): migrate
-- then runs the table's steps as that role (set_role.sql), so that what they make (a sequence owned
-- by the token column, a promotion record) belongs to the table's owner, as it would had the owner
-- migrated, and the application's role keeps using it. No row otherwise.
SELECT r.rolname::text AS owner
  FROM pg_class c
  JOIN pg_roles r ON r.oid = c.relowner
 WHERE c.oid = to_regclass($1)
   AND r.rolname <> current_user
   AND pg_has_role(c.relowner, 'MEMBER')
