-- A shared adaptive rate: a version and six whole numbers, written only
-- over the version they were computed from (compare-and-set). The same
-- rules as curve.lua.
--
-- curves     key, version, words (six bigints), expires (µs)
-- Arguments  op, key, the op's arguments
-- Returns    load: {version, w1 .. w6}, or {0} if none; swap: {1} if written
CREATE TABLE IF NOT EXISTS __SCHEMA__.curves (
  key text PRIMARY KEY,
  version bigint NOT NULL,
  words bigint[] NOT NULL,
  expires bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS curves_expires ON __SCHEMA__.curves (expires);

CREATE OR REPLACE FUNCTION __SCHEMA__.curve(op text, k text, args bigint[])
RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
  t bigint;
  v_version bigint;
  v_words bigint[];
BEGIN
  PERFORM __SCHEMA__.lock_key('curve', k);
  t := __SCHEMA__.micros_now();
  SELECT c.version, c.words INTO v_version, v_words
    FROM __SCHEMA__.curves c WHERE c.key = k AND c.expires > t;
  IF op = 'load' THEN
    IF v_version IS NULL THEN RETURN ARRAY[0]::bigint[]; END IF;
    RETURN ARRAY[v_version] || v_words;
  ELSIF op = 'swap' THEN
    -- args: version, w1 .. w6, ttl (µs)
    IF coalesce(v_version, 0) <> args[1] THEN RETURN ARRAY[0]::bigint[]; END IF;
    INSERT INTO __SCHEMA__.curves (key, version, words, expires)
      VALUES (k, args[1] + 1, args[2:7], t + args[8])
      ON CONFLICT (key) DO UPDATE
        SET version = EXCLUDED.version, words = EXCLUDED.words, expires = EXCLUDED.expires;
    RETURN ARRAY[1]::bigint[];
  END IF;
  RAISE EXCEPTION 'unknown curve operation %', op;
END
$$;
