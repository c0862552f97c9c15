-- What a new pooled connection's session says of the server behind it, once per connection, for
-- the statement mode (Db's StatementMode::Auto) and for telling a reset session from a pooler: the
-- backend's process id, the address and port the server itself accepted the connection on (NULL
-- over a Unix socket), and the server's own port and socket directories.
SELECT pg_backend_pid() AS pid,
       host(inet_server_addr()) AS addr,
       inet_server_port() AS addr_port,
       current_setting('port')::int AS port,
       current_setting('unix_socket_directories') AS socket_dirs
