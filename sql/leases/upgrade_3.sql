-- Version 3: managed_token, the token of the tenure a managed lease (Leases::acquire) holds: the row
-- is held by a managed lease while managed_token = token. Raw grants, raw renewals and owner-guarded
-- raw releases leave such a tenure alone, so another handle with the same owner name never adopts
-- it. Nullable, no default: instantaneous, and the previous version's statements, which never name
-- it, keep working (a tenure they grant draws a new token, so it is never marked).
ALTER TABLE {table} ADD COLUMN IF NOT EXISTS managed_token bigint
