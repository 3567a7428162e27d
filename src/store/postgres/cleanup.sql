-- Deletes up to `batch` rows from each table that no longer say anything
-- (expired leases, starts that left every window, state past its expiry);
-- the number deleted. It never waits (rows locked by running decisions are
-- skipped), so it cannot deadlock with them. Safe beside running decisions: a decision that read
-- a row deleted here had found it expired (so treated it as absent), and
-- writes its state back with an upsert; a row a decision rewrote meanwhile
-- is no longer expired when the delete re-checks it, so it stays.
CREATE OR REPLACE FUNCTION __SCHEMA__.cleanup(batch integer) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
  t bigint := __SCHEMA__.micros_now();
  v_table text;
  v_column text;
  v_rows bigint;
  v_total bigint := 0;
BEGIN
  -- Each quota algorithm's tables (`__QUOTA_TABLES__`: listed by
  -- `QuotaFunction::tables`), the leases' and the curves'; only ours, since
  -- the schema may hold other tables.
  FOR v_table, v_column IN VALUES
    __QUOTA_TABLES__
    ('leases', 'expires'), ('lease_pauses', 'until'), ('curves', 'expires')
  LOOP
    EXECUTE format(
      'DELETE FROM %1$s.%2$I WHERE ctid = ANY (ARRAY('
      '  SELECT ctid FROM %1$s.%2$I WHERE %3$I <= $1 LIMIT $2 FOR UPDATE SKIP LOCKED))'
      ' AND %3$I <= $1',
      __SCHEMA_LITERAL__, v_table, v_column) USING t, batch;
    GET DIAGNOSTICS v_rows = ROW_COUNT;
    v_total := v_total + v_rows;
  END LOOP;
  RETURN v_total;
END
$$;
