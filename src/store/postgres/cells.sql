-- GCRA, which is also the token bucket: the decision of
-- src/algorithms/gcra.rs (and cells.lua), on the database's clock.
--
-- cells      tat (theoretical arrival time, µs, fractional), nb (no grant
--            before, µs), gen (bumped on every change of tat: a grant's
--            ticket), expires (when the row says nothing any more)
-- Arguments  op, key, interval T (µs, fractional), burst B, the op's arguments
-- Returns    an array of integers; times are durations from now (µs).
CREATE TABLE IF NOT EXISTS __SCHEMA__.cells (
  key text PRIMARY KEY,
  tat float8 NOT NULL,
  nb bigint NOT NULL,
  gen bigint NOT NULL,
  expires bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS cells_expires ON __SCHEMA__.cells (expires);

CREATE OR REPLACE FUNCTION __SCHEMA__.cells(
  op text, k text, tick float8, burst bigint, args bigint[]
) RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
  t bigint;
  v_tat float8 := 0;
  v_nb bigint := 0;
  v_gen bigint := 0;
  v_ready float8;
  v_matched boolean;
  v_old_tat float8;
BEGIN
  PERFORM __SCHEMA__.lock_key('cells', k);
  IF op = 'status' THEN
    RETURN __SCHEMA__.status_search(format('SELECT %s.cells(''peek'', %L, %s, %s, ARRAY[$1])',
      __SCHEMA_LITERAL__, k, tick, burst), burst);
  END IF;
  t := __SCHEMA__.micros_now();
  SELECT c.tat, c.nb, c.gen INTO v_tat, v_nb, v_gen
    FROM __SCHEMA__.cells c WHERE c.key = k AND c.expires > t;
  IF NOT FOUND THEN
    -- An expired (or new) row starts its gen at now, past every gen of its
    -- earlier life: a ticket from before the expiry matches no later grant,
    -- so it cannot give back units that grant took.
    v_tat := 0; v_nb := 0; v_gen := t;
  END IF;
  v_old_tat := v_tat;

  IF op IN ('acquire', 'peek') THEN
    -- The GCRA test for a grant of `cost`.
    v_ready := greatest(v_tat + tick * args[1] - tick * burst, v_nb);
    IF v_ready > t THEN RETURN ARRAY[0, ceil(v_ready - t)::bigint]; END IF;
    IF op = 'peek' THEN RETURN ARRAY[1, 0]; END IF;
    v_tat := greatest(v_tat, t) + tick * args[1];
  ELSIF op = 'take' THEN
    v_tat := greatest(v_tat, t) + tick;
  ELSIF op = 'adjust' THEN
    v_matched := v_gen = args[1];
    IF args[3] < args[2] THEN
      -- Give back only if nothing moved the TAT since the grant.
      IF NOT v_matched THEN RETURN ARRAY[0]; END IF;
      v_tat := v_tat - tick * (args[2] - args[3]);
    ELSE
      v_tat := v_tat + tick * (args[3] - args[2]);
    END IF;
  ELSIF op = 'pause' THEN
    v_nb := greatest(v_nb, t + args[1]);
  ELSIF op = 'reset' THEN
    DELETE FROM __SCHEMA__.cells c WHERE c.key = k;
    RETURN ARRAY[1];
  ELSE
    RAISE EXCEPTION 'unknown GCRA operation %', op;
  END IF;

  -- A grant's ticket stands while the TAT is where the grant left it (as
  -- the in-memory Cells' token, the TAT itself): gen moves only with the
  -- TAT, so a grant of cost 0 that leaves it in place voids no earlier one.
  IF op <> 'pause' THEN
    v_tat := greatest(v_tat, 0);
    IF v_tat <> v_old_tat THEN v_gen := v_gen + 1; END IF;
  END IF;
  -- The row matters until the TAT plus a whole burst has passed: a settle
  -- charges extra cells on top of the TAT a grant left (up to the burst),
  -- which can bring an old TAT back ahead of now.
  INSERT INTO __SCHEMA__.cells AS c (key, tat, nb, gen, expires)
    VALUES (k, v_tat, v_nb, v_gen, greatest(ceil(v_tat + tick * burst)::bigint, v_nb, t) + 1000000)
    ON CONFLICT (key) DO UPDATE SET tat = EXCLUDED.tat, nb = EXCLUDED.nb, gen = EXCLUDED.gen,
      expires = EXCLUDED.expires;
  IF op = 'pause' THEN RETURN ARRAY[1]; END IF;
  IF op = 'adjust' AND NOT v_matched THEN RETURN ARRAY[0]; END IF;
  RETURN ARRAY[1, v_gen];
END
$$;
