-- The token sequence belongs to the token column, so dropping the units table drops it (a sequence
-- made before it did is given to the column; running it again changes nothing).
ALTER SEQUENCE {table:token_seq} OWNED BY {table}.token
