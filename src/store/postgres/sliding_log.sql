-- The sliding log of a RateLimiter, with the seed's backoff: the same rules
-- as sliding_log.lua (and MemoryStore's SlidingLog), on the database's clock.
--
-- sliding_log    one row per start: at (µs), expires (at + window, for cleanup)
-- sliding_state  nb (no start before, µs), bo (current backoff, µs),
--                esc/esc_nb/esc_bo (what the last backoff replaced), cl (the
--                last reset, µs: a start at or before it gives nothing
--                back), expires
-- Arguments      op, key, max, window (µs), initial backoff (µs, 0 = none),
--                multiplier, max backoff (µs), jitter, the op's own arguments
-- Returns        an array of integers; times are durations from now (µs).
CREATE TABLE IF NOT EXISTS __SCHEMA__.sliding_log (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  key text NOT NULL,
  at bigint NOT NULL,
  expires bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS sliding_log_key_at ON __SCHEMA__.sliding_log (key, at);
CREATE INDEX IF NOT EXISTS sliding_log_expires ON __SCHEMA__.sliding_log (expires);

CREATE TABLE IF NOT EXISTS __SCHEMA__.sliding_state (
  key text PRIMARY KEY,
  nb bigint NOT NULL,
  bo bigint,
  esc boolean NOT NULL,
  esc_nb bigint,
  esc_bo bigint,
  cl bigint,
  expires bigint NOT NULL
);
-- A table of an earlier version lacks `cl`: added, but only then (an
-- ALTER TABLE locks the table, even one that has the column, and would hold
-- every decision on it up until the setup commits).
DO $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_attribute
                 WHERE attrelid = (__SCHEMA_LITERAL__ || '.sliding_state')::regclass
                   AND attname = 'cl' AND NOT attisdropped) THEN
    ALTER TABLE __SCHEMA__.sliding_state ADD COLUMN cl bigint;
  END IF;
END
$$;
CREATE INDEX IF NOT EXISTS sliding_state_expires ON __SCHEMA__.sliding_state (expires);

-- When the window has room for `cost` more starts, if it has not at `t`:
-- the (room + 1)th newest start leaving the window.
CREATE OR REPLACE FUNCTION __SCHEMA__.sliding_log_frees_at(
  k text, t bigint, max bigint, win bigint, cost bigint
) RETURNS bigint LANGUAGE sql STABLE AS $$
  SELECT f.at FROM (
    SELECT l.at + win AS at FROM __SCHEMA__.sliding_log l WHERE l.key = k
    ORDER BY l.at DESC, l.id DESC OFFSET greatest(max - cost, 0) LIMIT 1
  ) f WHERE f.at > t
$$;

CREATE OR REPLACE FUNCTION __SCHEMA__.sliding_log(
  op text, k text, max bigint, win bigint, initial bigint, multiplier float8,
  cap bigint, jitter float8, args bigint[]
) RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
  t bigint;
  v_nb bigint := 0;
  v_bo bigint;
  v_esc boolean := false;
  v_esc_nb bigint;
  v_esc_bo bigint;
  v_cl bigint;
  v_at bigint;
  v_full bigint;
  v_delay bigint;
  v_cost bigint;
BEGIN
  PERFORM __SCHEMA__.lock_key('sliding_log', k);
  IF op = 'status' THEN
    RETURN __SCHEMA__.status_search(
      format('SELECT %s.sliding_log(''peek'', %L, %s, %s, %s, %s, %s, %s, ARRAY[$1])',
        __SCHEMA_LITERAL__, k, max, win, initial, multiplier, cap, jitter), max);
  END IF;
  t := __SCHEMA__.micros_now();
  SELECT s.nb, s.bo, s.esc, s.esc_nb, s.esc_bo, s.cl
    INTO v_nb, v_bo, v_esc, v_esc_nb, v_esc_bo, v_cl
    FROM __SCHEMA__.sliding_state s WHERE s.key = k AND s.expires > t;
  IF NOT FOUND THEN
    v_nb := 0; v_bo := NULL; v_esc := false; v_cl := NULL;
  END IF;

  IF op IN ('acquire', 'record') THEN
    DELETE FROM __SCHEMA__.sliding_log l WHERE l.key = k AND l.at <= t - win;
  END IF;

  IF op IN ('acquire', 'peek') THEN
    v_cost := args[1];
    v_full := __SCHEMA__.sliding_log_frees_at(k, t, max, win, v_cost);
    v_at := CASE WHEN v_nb > t THEN greatest(v_nb, v_full) ELSE v_full END;
    IF v_at IS NOT NULL THEN RETURN ARRAY[0, v_at - t]; END IF;
    IF op = 'peek' THEN RETURN ARRAY[1, 0]; END IF;
    v_bo := NULL;
  ELSIF op = 'record' THEN
    v_cost := 1;
  ELSIF op = 'refund' THEN
    -- A start at or before the last reset gives nothing back.
    IF args[1] <= v_cl THEN RETURN ARRAY[1]; END IF;
    DELETE FROM __SCHEMA__.sliding_log WHERE id IN (
      SELECT l.id FROM __SCHEMA__.sliding_log l WHERE l.key = k AND l.at = args[1] LIMIT args[2]);
    DELETE FROM __SCHEMA__.sliding_log l WHERE l.key = k AND l.at <= t - win;
    IF v_esc AND __SCHEMA__.sliding_log_frees_at(k, t, max, win, 1) IS NULL THEN
      v_nb := v_esc_nb;
      v_bo := CASE WHEN v_esc_bo < 0 THEN NULL ELSE v_esc_bo END;
      v_esc := false;
      UPDATE __SCHEMA__.sliding_state s SET nb = v_nb, bo = v_bo, esc = false WHERE s.key = k;
    END IF;
    RETURN ARRAY[1];
  ELSIF op = 'settle' THEN
    IF args[3] < args[2] AND args[1] <= v_cl THEN
      RETURN ARRAY[1];
    ELSIF args[3] < args[2] THEN
      DELETE FROM __SCHEMA__.sliding_log WHERE id IN (
        SELECT l.id FROM __SCHEMA__.sliding_log l WHERE l.key = k AND l.at = args[1]
        LIMIT args[2] - args[3]);
    ELSE
      INSERT INTO __SCHEMA__.sliding_log (key, at, expires)
        SELECT k, args[1], args[1] + win FROM generate_series(1, args[3] - args[2]);
    END IF;
  ELSIF op = 'count' THEN
    RETURN ARRAY[(SELECT count(*) FROM __SCHEMA__.sliding_log l
                  WHERE l.key = k AND l.at > t - args[1])];
  ELSIF op = 'oldest' THEN
    SELECT l.at INTO v_at FROM __SCHEMA__.sliding_log l WHERE l.key = k AND l.at > t - args[1]
      ORDER BY l.at, l.id OFFSET args[2] LIMIT 1;
    IF v_at IS NULL THEN RETURN ARRAY[0]; END IF;
    RETURN ARRAY[1, t - v_at];
  ELSIF op = 'next' THEN
    IF v_nb > t THEN RETURN ARRAY[1, v_nb - t]; END IF;
    RETURN ARRAY[0];
  ELSIF op = 'pause' THEN
    v_nb := greatest(v_nb, t + args[1]);
    v_esc := false;
  ELSIF op = 'clear' THEN
    -- Kept while a start made now counts: the starts from before (at or
    -- before now) cannot be told from those made since at the same instant.
    DELETE FROM __SCHEMA__.sliding_log l WHERE l.key = k;
    v_nb := 0; v_bo := NULL; v_esc := false; v_esc_nb := NULL; v_esc_bo := NULL;
    v_cl := greatest(t, v_cl);
  ELSE
    RAISE EXCEPTION 'unknown sliding log operation %', op;
  END IF;

  IF op IN ('acquire', 'record') THEN
    -- Records `cost` starts now; backs off if that fills the window.
    INSERT INTO __SCHEMA__.sliding_log (key, at, expires)
      SELECT k, t, t + win FROM generate_series(1, v_cost);
    v_full := CASE WHEN initial > 0
                   THEN __SCHEMA__.sliding_log_frees_at(k, t, max, win, 1) END;
    IF v_full IS NOT NULL THEN
      v_esc := true; v_esc_nb := v_nb; v_esc_bo := coalesce(v_bo, -1);
      v_delay := least(floor(coalesce(v_bo, initial) * multiplier)::bigint, cap);
      v_bo := v_delay;
      v_nb := greatest(v_nb, t + v_delay + floor(v_delay * jitter)::bigint, v_full);
    END IF;
  END IF;

  INSERT INTO __SCHEMA__.sliding_state AS s (key, nb, bo, esc, esc_nb, esc_bo, cl, expires)
    VALUES (k, v_nb, v_bo, v_esc, v_esc_nb, v_esc_bo, v_cl, t + greatest(win, v_nb - t) + 1000000)
    ON CONFLICT (key) DO UPDATE SET nb = EXCLUDED.nb, bo = EXCLUDED.bo, esc = EXCLUDED.esc,
      esc_nb = EXCLUDED.esc_nb, esc_bo = EXCLUDED.esc_bo, cl = EXCLUDED.cl,
      expires = EXCLUDED.expires;
  IF op = 'acquire' THEN RETURN ARRAY[1, t]; END IF;
  RETURN ARRAY[1];
END
$$;
