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

-- The 'status' operation of the quota and sliding log functions, called
-- under the caller's key lock: how many units `peek` (a query answering a
-- peek's reply for the cost $1) lets through now, at most `capacity`, and
-- the µs until one more would be: {remaining, µs}, or {capacity, -1} when
-- the whole capacity is free. One binary search, in one statement.
CREATE OR REPLACE FUNCTION __SCHEMA__.status_search(peek text, capacity bigint)
RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
  v_admitted bigint := 0;
  v_denied bigint := capacity;
  v_middle bigint;
  v_reply bigint[];
  v_wait bigint;
BEGIN
  EXECUTE peek INTO v_reply USING capacity;
  IF v_reply[1] = 1 THEN RETURN ARRAY[capacity, -1]; END IF;
  v_wait := v_reply[2];
  WHILE v_denied - v_admitted > 1 LOOP
    v_middle := (v_admitted + v_denied) / 2;
    EXECUTE peek INTO v_reply USING v_middle;
    IF v_reply[1] = 1 THEN
      v_admitted := v_middle;
    ELSE
      v_denied := v_middle; v_wait := v_reply[2];
    END IF;
  END LOOP;
  RETURN ARRAY[v_admitted, v_wait];
END
$$;

-- Serializes the decisions on one key of one strategy until the end of the
-- transaction (one statement: the decision itself).
CREATE OR REPLACE FUNCTION __SCHEMA__.lock_key(strategy text, k text) RETURNS void
LANGUAGE sql VOLATILE AS $$
  SELECT pg_advisory_xact_lock(hashtextextended(strategy || ':' || k, 7230))
$$;
