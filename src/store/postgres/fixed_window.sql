-- A fixed window counter: the decision of src/algorithms/fixed_window.rs
-- (and fixed_window.lua), windows aligned to Unix time on the database's
-- clock.
--
-- fixed_windows  i (the counted window's index), c (its count), nb (no grant
--                before, µs), cl (the window of the last reset, -1 for none:
--                a ticket up to it gives nothing back), expires (when the row
--                says nothing any more)
-- Arguments      op, key, max, window (µs), the op's arguments
-- Returns        an array of integers; times are durations from now (µs).
CREATE TABLE IF NOT EXISTS __SCHEMA__.fixed_windows (
  key text PRIMARY KEY,
  i bigint NOT NULL,
  c bigint NOT NULL,
  nb bigint NOT NULL,
  cl bigint NOT NULL DEFAULT -1,
  expires bigint NOT NULL
);
-- A table of an earlier version lacks `cl`: added, but only then (an
-- ALTER TABLE locks the table, even one that has the column, and would hold
-- every decision on it up until the setup commits).
DO $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_attribute
                 WHERE attrelid = (__SCHEMA_LITERAL__ || '.fixed_windows')::regclass
                   AND attname = 'cl' AND NOT attisdropped) THEN
    ALTER TABLE __SCHEMA__.fixed_windows ADD COLUMN cl bigint NOT NULL DEFAULT -1;
  END IF;
END
$$;
CREATE INDEX IF NOT EXISTS fixed_windows_expires ON __SCHEMA__.fixed_windows (expires);

CREATE OR REPLACE FUNCTION __SCHEMA__.fixed_window(
  op text, k text, max bigint, win bigint, args bigint[]
) RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
  t bigint;
  v_i bigint := -1;
  v_c bigint := 0;
  v_nb bigint := 0;
  v_cl bigint := -1;
  v_from bigint;
  v_at bigint;
  v_current bigint;
  v_ticket bigint;
  v_index bigint;
BEGIN
  PERFORM __SCHEMA__.lock_key('fixed_window', k);
  IF op = 'status' THEN
    RETURN __SCHEMA__.status_search(format('SELECT %s.fixed_window(''peek'', %L, %s, %s, ARRAY[$1])',
      __SCHEMA_LITERAL__, k, max, win), max);
  END IF;
  t := __SCHEMA__.micros_now();
  SELECT f.i, f.c, f.nb, f.cl INTO v_i, v_c, v_nb, v_cl
    FROM __SCHEMA__.fixed_windows f WHERE f.key = k AND f.expires > t;
  IF NOT FOUND THEN
    v_i := -1; v_c := 0; v_nb := 0; v_cl := -1;
  END IF;
  v_current := t / win;

  IF op IN ('acquire', 'peek') THEN
    -- When `cost` could be granted, if not now.
    v_from := greatest(t, v_nb);
    v_at := v_from;
    IF (CASE WHEN v_i = v_from / win THEN v_c ELSE 0 END) + args[1] > max THEN
      v_at := (v_from / win + 1) * win;
    END IF;
    IF v_at > t THEN RETURN ARRAY[0, v_at - t]; END IF;
    IF op = 'peek' THEN RETURN ARRAY[1, 0]; END IF;
    v_c := (CASE WHEN v_i = v_current THEN v_c ELSE 0 END) + args[1];
    v_i := v_current;
    v_ticket := v_current;
  ELSIF op IN ('take', 'adjust') THEN
    -- Moves the `from` units counted in window `ticket` to `to`. A grant
    -- from before a reset (at or before its window) cannot be told from
    -- those since: only its extra units are charged.
    IF op = 'take' THEN args := ARRAY[v_current, 0, 1]; END IF;
    v_ticket := args[1];
    v_index := v_ticket;
    IF v_index <= v_cl THEN
      v_index := v_current; args := ARRAY[v_current, 0, greatest(args[3] - args[2], 0)];
    END IF;
    v_c := CASE WHEN v_i = v_current THEN v_c ELSE 0 END;
    IF v_index = v_current THEN
      v_c := greatest(v_c - args[2], 0) + args[3];
    ELSIF args[3] > args[2] THEN
      v_c := v_c + args[3] - args[2];
    ELSE
      RETURN ARRAY[1, v_ticket];
    END IF;
    v_i := v_current;
  ELSIF op = 'pause' THEN
    v_nb := greatest(v_nb, t + args[1]);
  ELSIF op = 'reset' THEN
    v_i := -1; v_c := 0; v_nb := 0; v_cl := greatest(v_current, v_cl);
  ELSE
    RAISE EXCEPTION 'unknown fixed window operation %', op;
  END IF;

  -- The count matters until its window ends, a reset until the end of its
  -- window.
  INSERT INTO __SCHEMA__.fixed_windows AS f (key, i, c, nb, cl, expires)
    VALUES (k, v_i, v_c, v_nb, v_cl, greatest((greatest(v_i, v_cl) + 1) * win, v_nb + win) + 1000000)
    ON CONFLICT (key) DO UPDATE SET i = EXCLUDED.i, c = EXCLUDED.c, nb = EXCLUDED.nb,
      cl = EXCLUDED.cl, expires = EXCLUDED.expires;
  IF op IN ('pause', 'reset') THEN RETURN ARRAY[1]; END IF;
  RETURN ARRAY[1, v_ticket];
END
$$;
