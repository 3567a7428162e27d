-- The schema and the clock. `__SCHEMA__` is replaced by the quoted schema
-- name before this runs.
CREATE SCHEMA IF NOT EXISTS __SCHEMA__;

-- The database's wall clock in µs since the Unix epoch. `clock_timestamp()`,
-- not `now()`: a decision reads it after taking its key's lock, so decisions
-- on one key see increasing times in the order they are made, not the order
-- their transactions happened to start.
CREATE OR REPLACE FUNCTION __SCHEMA__.micros_now() RETURNS bigint
LANGUAGE sql VOLATILE AS $$
  SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint
$$;

-- Serializes the decisions on one key of one strategy until the end of the
-- transaction (one statement: the decision itself).
CREATE OR REPLACE FUNCTION __SCHEMA__.lock_key(strategy text, k text) RETURNS void
LANGUAGE sql VOLATILE AS $$
  SELECT pg_advisory_xact_lock(hashtextextended(strategy || ':' || k, 7230))
$$;
