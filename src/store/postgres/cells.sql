-- GCRA, which is also the token bucket, on a line of slots with the gaps
-- refunds leave: the decision of src/algorithms/slots.rs (and cells.lua),
-- on the database's clock.
--
-- cells      tat (the line's end, µs, fractional), nb (no grant before, µs),
--            cut (the interval the slots were cut with), ret (slots ending
--            at or before it were cut with another interval, or held before
--            a reset: not given back), gaps
--            ({start, end, start, end, ...}, µs: time of the line no grant
--            holds, sorted), expires (when the row says nothing any more)
-- Arguments  op, key, interval T (µs, fractional), burst B, the op's arguments
-- Returns    an array of integers; times are durations from now (µs). A
--            grant's ticket is its slot's end in quarters of a µs (exact:
--            a float8 of Unix µs steps by a quarter or more since 2005).
CREATE TABLE IF NOT EXISTS __SCHEMA__.cells (
  key text PRIMARY KEY,
  tat float8 NOT NULL,
  nb bigint NOT NULL,
  cut float8 NOT NULL DEFAULT 0,
  ret float8 NOT NULL DEFAULT 0,
  gaps float8[] NOT NULL DEFAULT '{}',
  expires bigint NOT NULL
);
-- A table of an earlier version kept a generation instead of slots: with
-- `cut` 0, each row's slots count as cut with another interval.
ALTER TABLE __SCHEMA__.cells ADD COLUMN IF NOT EXISTS cut float8 NOT NULL DEFAULT 0;
ALTER TABLE __SCHEMA__.cells ADD COLUMN IF NOT EXISTS ret float8 NOT NULL DEFAULT 0;
ALTER TABLE __SCHEMA__.cells ADD COLUMN IF NOT EXISTS gaps float8[] NOT NULL DEFAULT '{}';
ALTER TABLE __SCHEMA__.cells DROP COLUMN IF EXISTS gen;
CREATE INDEX IF NOT EXISTS cells_expires ON __SCHEMA__.cells (expires);

-- The gaps less the time `t` has passed.
CREATE OR REPLACE FUNCTION __SCHEMA__.cells_pass(gaps float8[], t bigint)
RETURNS float8[] LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  kept float8[] := '{}';
BEGIN
  FOR i IN 1 .. coalesce(array_length(gaps, 1), 0) BY 2 LOOP
    IF gaps[i + 1] > t THEN
      kept := kept || greatest(gaps[i], t::float8) || gaps[i + 1];
    END IF;
  END LOOP;
  RETURN kept;
END
$$;

-- The first instant from `t` on at which at most `room` of the line is held
-- (the line less its gaps): held time runs out as t passes it, not while t
-- passes a gap.
CREATE OR REPLACE FUNCTION __SCHEMA__.cells_held_at_most(
  tat float8, gaps float8[], t bigint, room float8
) RETURNS float8 LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  n int := coalesce(array_length(gaps, 1), 0);
  free float8 := 0;
  excess float8;
  at float8 := t;
BEGIN
  FOR i IN 1 .. n BY 2 LOOP
    free := free + greatest(gaps[i + 1] - greatest(gaps[i], t), 0);
  END LOOP;
  excess := greatest(greatest(tat - t, 0) - free, 0) - room;
  IF excess <= 0 THEN RETURN t; END IF;
  FOR i IN 1 .. n BY 2 LOOP
    IF greatest(gaps[i], at) - at >= excess THEN EXIT; END IF;
    excess := excess - (greatest(gaps[i], at) - at);
    at := greatest(gaps[i + 1], at);
  END LOOP;
  RETURN at + excess;
END
$$;

-- The gaps with [s, e) added, joined to a gap it touches; at most
-- `max_gaps`, the first forgotten past that.
CREATE OR REPLACE FUNCTION __SCHEMA__.cells_insert_gap(
  gaps float8[], s float8, e float8, max_gaps int
) RETURNS float8[] LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  n int := coalesce(array_length(gaps, 1), 0);
  at int := 1;
  r float8[];
BEGIN
  WHILE at <= n AND gaps[at] < s LOOP at := at + 2; END LOOP;
  r := coalesce(gaps[1:at - 1], '{}') || ARRAY[s, e] || coalesce(gaps[at:n], '{}');
  IF r[at + 2] = e THEN
    r[at + 1] := r[at + 3];
    r := r[1:at + 1] || coalesce(r[at + 4:], '{}');
  END IF;
  IF at > 1 AND r[at - 1] = s THEN
    r[at - 1] := r[at + 1];
    r := r[1:at - 1] || coalesce(r[at + 2:], '{}');
  END IF;
  IF array_length(r, 1) > 2 * max_gaps THEN r := r[3:]; END IF;
  RETURN r;
END
$$;

CREATE OR REPLACE FUNCTION __SCHEMA__.cells(
  op text, k text, tick float8, burst bigint, args bigint[]
) RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
  t bigint;
  v_span float8 := tick * burst;
  v_tat float8 := 0;
  v_nb bigint := 0;
  v_cut float8;
  v_ret float8 := 0;
  v_gaps float8[] := '{}';
  v_ready float8;
  v_weight float8;
  v_end float8;
  v_start float8;
  v_reply bigint[];
BEGIN
  PERFORM __SCHEMA__.lock_key('cells', k);
  IF op = 'status' THEN
    RETURN __SCHEMA__.status_search(format('SELECT %s.cells(''peek'', %L, %s, %s, ARRAY[$1])',
      __SCHEMA_LITERAL__, k, tick, burst), burst);
  END IF;
  t := __SCHEMA__.micros_now();
  SELECT c.tat, c.nb, c.cut, c.ret, c.gaps INTO v_tat, v_nb, v_cut, v_ret, v_gaps
    FROM __SCHEMA__.cells c WHERE c.key = k AND c.expires > t;
  IF NOT FOUND THEN
    v_tat := 0; v_nb := 0; v_cut := tick; v_ret := 0; v_gaps := '{}';
  END IF;
  -- Slots cut with another interval are not given back: their length is
  -- not known.
  IF v_cut <> tick THEN
    -- The line's lead over now, rescaled: the cells spent stay spent.
    v_ret := greatest(v_ret, v_tat); v_gaps := '{}';
    IF v_tat > t THEN v_tat := t + (v_tat - t) * tick / v_cut; END IF;
    v_cut := tick;
  END IF;

  IF op IN ('acquire', 'pace', 'peek') THEN
    -- The GCRA test for a grant of `cost`: at most a burst less its weight
    -- held ahead of now.
    v_ready := greatest(
      __SCHEMA__.cells_held_at_most(v_tat, v_gaps, t, v_span - tick * args[1]), v_nb);
    IF v_ready > t THEN RETURN ARRAY[0, ceil(v_ready - t)::bigint]; END IF;
    IF op = 'peek' THEN RETURN ARRAY[1, 0]; END IF;
  END IF;

  IF op IN ('acquire', 'pace', 'take') THEN
    -- A slot for the grant: the first gap if it fits, else the line's end.
    v_gaps := __SCHEMA__.cells_pass(v_gaps, t);
    v_weight := CASE WHEN op = 'take' THEN tick ELSE tick * args[1] END;
    IF v_weight = 0 THEN
      v_end := greatest(v_tat, t);
    ELSIF cardinality(v_gaps) > 0 AND v_gaps[2] - v_gaps[1] >= v_weight THEN
      v_end := v_gaps[1] + v_weight;
      IF v_end = v_gaps[2] THEN
        v_gaps := coalesce(v_gaps[3:], '{}');
      ELSE
        v_gaps[1] := v_end;
      END IF;
    ELSIF op = 'pace' AND t > v_tat AND t - v_tat <= 10000 AND v_tat > 0 THEN
      -- A paced grant a waiter woke late for keeps its place, up to the
      -- pacing tolerance (2 ms) before now (src/clock.rs paced_from).
      v_tat := t - least(t - v_tat, 2000) + v_weight;
      v_end := v_tat;
    ELSE
      v_tat := greatest(v_tat, t) + v_weight;
      v_end := v_tat;
    END IF;
    v_reply := ARRAY[1, (v_end * 4)::bigint];
  ELSIF op = 'adjust' THEN
    v_gaps := __SCHEMA__.cells_pass(v_gaps, t);
    v_end := args[1]::float8 / 4;
    v_weight := tick * abs(args[2] - args[3]);
    IF args[3] > args[2] THEN
      -- Extra cells are always charged: the grant's slot grows if it ends
      -- the line, else the line grows by a slot of its own.
      v_reply := CASE WHEN v_end = v_tat AND v_end > t AND v_end > v_ret
        THEN ARRAY[1, ((greatest(v_tat, t) + v_weight) * 4)::bigint] ELSE ARRAY[0] END;
      v_tat := greatest(v_tat, t) + v_weight;
    ELSE
      -- Frees what is ahead of now of the slot's last `weight`, if the
      -- line still holds that time.
      v_start := greatest(v_end - v_weight, t);
      IF v_end <= v_ret OR v_end > v_tat THEN RETURN ARRAY[0]; END IF;
      FOR i IN 1 .. coalesce(array_length(v_gaps, 1), 0) BY 2 LOOP
        IF v_gaps[i] < v_end AND v_start < v_gaps[i + 1] THEN RETURN ARRAY[0]; END IF;
      END LOOP;
      IF v_end > v_start AND v_end = v_tat THEN
        v_tat := v_start;
        WHILE cardinality(v_gaps) > 0 AND v_gaps[cardinality(v_gaps)] = v_tat LOOP
          v_tat := v_gaps[cardinality(v_gaps) - 1];
          v_gaps := v_gaps[1:cardinality(v_gaps) - 2];
        END LOOP;
      ELSIF v_end > v_start THEN
        v_gaps := __SCHEMA__.cells_insert_gap(v_gaps, v_start, v_end, 1024);
      END IF;
      v_reply := ARRAY[1, ((v_end - v_weight) * 4)::bigint];
    END IF;
  ELSIF op = 'pause' THEN
    v_nb := greatest(v_nb, t + args[1]);
    v_reply := ARRAY[1];
  ELSIF op = 'reset' THEN
    -- An empty line and no pause, but the old line's slots (ending at or
    -- before its end) are not given back: grants made since may hold
    -- their time.
    v_ret := greatest(v_ret, v_tat); v_tat := 0; v_nb := 0; v_gaps := '{}';
    v_reply := ARRAY[1];
  ELSE
    RAISE EXCEPTION 'unknown GCRA operation %', op;
  END IF;

  -- The row matters until the line's end plus a whole burst has passed: a
  -- settle charges extra cells on top of it (up to the burst), which can
  -- bring an old TAT back ahead of now; and until the end of a line a
  -- reset emptied (`ret`): a grant from before the reset gives nothing back.
  INSERT INTO __SCHEMA__.cells AS c (key, tat, nb, cut, ret, gaps, expires)
    VALUES (k, v_tat, v_nb, v_cut, v_ret, v_gaps,
      greatest(ceil(v_tat + tick * burst)::bigint, v_nb, t, ceil(v_ret)::bigint) + 1000000)
    ON CONFLICT (key) DO UPDATE SET tat = EXCLUDED.tat, nb = EXCLUDED.nb, cut = EXCLUDED.cut,
      ret = EXCLUDED.ret, gaps = EXCLUDED.gaps, expires = EXCLUDED.expires;
  RETURN v_reply;
END
$$;
