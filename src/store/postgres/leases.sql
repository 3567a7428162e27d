-- Leased concurrency slots: each lease expires unless its holder renews it.
-- The same rules as leases.lua (and MemoryStore's lease table).
--
-- leases        one row per held slot: name (the holder's lease number), expires (µs)
-- lease_pauses  until (no lease granted before, µs)
-- Arguments     op, key, the op's arguments (lease names are bigints)
-- Returns       an array of integers; times are durations from now (µs).
CREATE TABLE IF NOT EXISTS __SCHEMA__.leases (
  key text NOT NULL,
  name bigint NOT NULL,
  expires bigint NOT NULL,
  PRIMARY KEY (key, name)
);
CREATE INDEX IF NOT EXISTS leases_expires ON __SCHEMA__.leases (expires);

CREATE TABLE IF NOT EXISTS __SCHEMA__.lease_pauses (
  key text PRIMARY KEY,
  until bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS lease_pauses_until ON __SCHEMA__.lease_pauses (until);

CREATE OR REPLACE FUNCTION __SCHEMA__.leases(op text, k text, args bigint[])
RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
  t bigint;
  v_paused bigint;
  v_held bigint;
  v_earliest bigint;
BEGIN
  PERFORM __SCHEMA__.lock_key('leases', k);
  t := __SCHEMA__.micros_now();
  SELECT p.until INTO v_paused FROM __SCHEMA__.lease_pauses p WHERE p.key = k AND p.until > t;

  IF op = 'lease' THEN
    -- args: max, ttl (µs), cost, then the names of the `cost` leases.
    IF v_paused IS NOT NULL THEN RETURN ARRAY[0, v_paused - t]; END IF;
    DELETE FROM __SCHEMA__.leases l WHERE l.key = k AND l.expires <= t;
    SELECT count(*), min(l.expires) INTO v_held, v_earliest
      FROM __SCHEMA__.leases l WHERE l.key = k;
    IF v_held + args[3] > args[1] THEN
      RETURN ARRAY[0, coalesce(v_earliest, t + args[2]) - t];
    END IF;
    INSERT INTO __SCHEMA__.leases AS l (key, name, expires)
      SELECT k, n, t + args[2] FROM unnest(args[4:]) AS n
      ON CONFLICT (key, name) DO UPDATE SET expires = EXCLUDED.expires;
    RETURN ARRAY[1];
  ELSIF op = 'renew' THEN
    -- args: ttl (µs), then the names.
    UPDATE __SCHEMA__.leases l SET expires = t + args[1]
      WHERE l.key = k AND l.name = ANY (args[2:]) AND l.expires > t;
    GET DIAGNOSTICS v_held = ROW_COUNT;
    RETURN ARRAY[v_held];
  ELSIF op = 'release' THEN
    DELETE FROM __SCHEMA__.leases l WHERE l.key = k AND l.name = ANY (args);
    RETURN ARRAY[1];
  ELSIF op = 'held' THEN
    RETURN ARRAY[(SELECT count(*) FROM __SCHEMA__.leases l WHERE l.key = k AND l.expires > t)];
  ELSIF op = 'pause' THEN
    INSERT INTO __SCHEMA__.lease_pauses AS p (key, until)
      VALUES (k, greatest(coalesce(v_paused, 0), t + args[1]))
      ON CONFLICT (key) DO UPDATE SET until = EXCLUDED.until;
    RETURN ARRAY[1];
  ELSIF op = 'paused' THEN
    IF v_paused IS NOT NULL THEN RETURN ARRAY[1, v_paused - t]; END IF;
    RETURN ARRAY[0];
  ELSIF op = 'clear' THEN
    DELETE FROM __SCHEMA__.leases l WHERE l.key = k;
    DELETE FROM __SCHEMA__.lease_pauses p WHERE p.key = k;
    RETURN ARRAY[1];
  END IF;
  RAISE EXCEPTION 'unknown lease operation %', op;
END
$$;
