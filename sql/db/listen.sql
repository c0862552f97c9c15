-- The handover listener's subscription to one table's channel (TableName::channel), on its own
-- connection outside the pool: the only session state pgtenure ever keeps, and only there. The
-- statements that free a key or a fleet send pg_notify on that channel; a notification only wakes
-- a waiter's poll, which decides. {channel} is the channel, quoted as an identifier.
LISTEN {channel}
