-- A sliding window counter: the decision of
-- src/algorithms/sliding_window_counter.rs (and sliding_window_counter.lua),
-- windows aligned to Unix time on the database's clock.
--
-- sliding_window_counters  i (the current window's index), cur (its count),
--                          prev (the previous window's), nb (no grant before,
--                          µs), cl (the window of the last reset, -1 for
--                          none: a ticket up to it gives nothing back),
--                          expires (when the row says nothing any more)
-- Arguments                op, key, max, window (µs), the op's arguments
-- Returns                  an array of integers; times are durations from now (µs).
CREATE TABLE IF NOT EXISTS __SCHEMA__.sliding_window_counters (
  key text PRIMARY KEY,
  i bigint NOT NULL,
  cur bigint NOT NULL,
  prev bigint NOT NULL,
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
                 WHERE attrelid = (__SCHEMA_LITERAL__ || '.sliding_window_counters')::regclass
                   AND attname = 'cl' AND NOT attisdropped) THEN
    ALTER TABLE __SCHEMA__.sliding_window_counters ADD COLUMN cl bigint NOT NULL DEFAULT -1;
  END IF;
END
$$;
CREATE INDEX IF NOT EXISTS sliding_window_counters_expires
  ON __SCHEMA__.sliding_window_counters (expires);

-- How far into a window `previous` weighs little enough to leave `room`.
CREATE OR REPLACE FUNCTION __SCHEMA__.swc_offset(previous bigint, room bigint, win bigint)
RETURNS bigint LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE WHEN previous <= room THEN 0 ELSE win - room * win / previous END
$$;

CREATE OR REPLACE FUNCTION __SCHEMA__.sliding_window_counter(
  op text, k text, max bigint, win bigint, args bigint[]
) RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
  t bigint;
  v_i bigint := 0;
  v_cur bigint := 0;
  v_prev bigint := 0;
  v_nb bigint := 0;
  v_cl bigint := -1;
  v_from bigint;
  v_index bigint;
  v_at bigint;
  v_current bigint;
  v_ticket bigint;
BEGIN
  PERFORM __SCHEMA__.lock_key('sliding_window_counter', k);
  IF op = 'status' THEN
    RETURN __SCHEMA__.status_search(
      format('SELECT %s.sliding_window_counter(''peek'', %L, %s, %s, ARRAY[$1])',
        __SCHEMA_LITERAL__, k, max, win), max);
  END IF;
  t := __SCHEMA__.micros_now();
  SELECT s.i, s.cur, s.prev, s.nb, s.cl INTO v_i, v_cur, v_prev, v_nb, v_cl
    FROM __SCHEMA__.sliding_window_counters s WHERE s.key = k AND s.expires > t;
  IF NOT FOUND THEN
    v_i := 0; v_cur := 0; v_prev := 0; v_nb := 0; v_cl := -1;
  END IF;

  IF op IN ('acquire', 'peek') THEN
    -- When `cost` could be granted, if not now: the counts as of the window
    -- the pause ends in.
    v_from := greatest(t, v_nb);
    v_index := v_from / win;
    IF v_index - v_i = 1 THEN
      v_prev := v_cur; v_cur := 0;
    ELSIF v_index - v_i > 1 THEN
      v_prev := 0; v_cur := 0;
    ELSIF v_i - v_index > 1 THEN
      -- Counted in windows of another length (the window grew): nothing here.
      v_prev := 0; v_cur := 0; v_i := v_index;
    END IF;
    IF v_cur + args[1] <= max THEN
      v_at := greatest(v_from, v_index * win + __SCHEMA__.swc_offset(v_prev, max - v_cur - args[1], win));
    ELSE
      v_at := (v_index + 1) * win + __SCHEMA__.swc_offset(v_cur, max - args[1], win);
    END IF;
    IF v_at > t THEN RETURN ARRAY[0, v_at - t]; END IF;
    IF op = 'peek' THEN RETURN ARRAY[1, 0]; END IF;
    -- Not paused, so the window of `from` is the current one, rolled above.
    v_i := greatest(v_i, v_index);
    v_cur := v_cur + args[1];
    v_ticket := v_index;
  ELSIF op IN ('take', 'adjust') THEN
    -- Rolls the counts forward to now, then moves the `from` units counted
    -- in window `ticket` to `to`. A grant from before a reset (at or before
    -- its window) cannot be told from those since: only its extra units
    -- are charged.
    v_current := t / win;
    IF op = 'take' THEN args := ARRAY[v_current, 0, 1]; END IF;
    v_ticket := args[1];
    v_index := v_ticket;
    IF v_index <= v_cl THEN
      v_index := v_current; args := ARRAY[v_current, 0, greatest(args[3] - args[2], 0)];
    END IF;
    IF v_current - v_i = 1 THEN
      v_prev := v_cur; v_cur := 0;
    ELSIF v_current - v_i > 1 THEN
      v_prev := 0; v_cur := 0;
    ELSIF v_i - v_current > 1 THEN
      v_prev := 0; v_cur := 0; v_i := v_current;
    END IF;
    v_i := greatest(v_i, v_current);
    IF v_index = v_current THEN
      v_cur := greatest(v_cur - args[2], 0) + args[3];
    ELSIF v_index + 1 = v_current THEN
      v_prev := greatest(v_prev - args[2], 0) + args[3];
    ELSIF args[3] > args[2] THEN
      v_cur := v_cur + args[3] - args[2];
    ELSE
      RETURN ARRAY[1, v_ticket];
    END IF;
  ELSIF op = 'pause' THEN
    v_nb := greatest(v_nb, t + args[1]);
  ELSIF op = 'reset' THEN
    v_i := 0; v_cur := 0; v_prev := 0; v_nb := 0; v_cl := greatest(t / win, v_cl);
  ELSE
    RAISE EXCEPTION 'unknown sliding window counter operation %', op;
  END IF;

  -- The counts matter until the next window has weighed them too, a reset
  -- as long as its window's.
  INSERT INTO __SCHEMA__.sliding_window_counters AS s (key, i, cur, prev, nb, cl, expires)
    VALUES (k, v_i, v_cur, v_prev, v_nb, v_cl,
      greatest((greatest(v_i, v_cl) + 2) * win, v_nb + 2 * win) + 1000000)
    ON CONFLICT (key) DO UPDATE SET i = EXCLUDED.i, cur = EXCLUDED.cur, prev = EXCLUDED.prev,
      nb = EXCLUDED.nb, cl = EXCLUDED.cl, expires = EXCLUDED.expires;
  IF op IN ('pause', 'reset') THEN RETURN ARRAY[1]; END IF;
  RETURN ARRAY[1, v_ticket];
END
$$;
