-- A later attempt of the same workflow run takes a live lease over. A lease token is
-- the attempt's execution id (activities/checks.py `this_execution_id`):
-- `<run id>/<activity seq>/<attempt>`, and `/local-<random>` for a local attempt. A run
-- checks its target one slot at a time, and Temporal starts a later activity (a higher seq)
-- or a later attempt only once it has given up on every earlier one: an earlier attempt that
-- still holds the lease is a zombie (its worker froze, or it gave up while the database was
-- away and could not release it), and waiting out its lease only made the schedule late.
-- The zombie's late write stays out as before: its commit is conditional on its token. Two
-- executions of the same attempt (a local one replayed after a crash) supersede neither.
-- Tokens of any other shape never supersede.
CREATE FUNCTION supersedes(claimant text, holder text)
RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE
    WHEN claimant ~ '^[^/]+/[0-9]{1,9}/[0-9]{1,9}(/|$)'
     AND holder ~ '^[^/]+/[0-9]{1,9}/[0-9]{1,9}(/|$)'
    THEN split_part(claimant, '/', 1) = split_part(holder, '/', 1)
     AND (split_part(claimant, '/', 2)::integer, split_part(claimant, '/', 3)::integer)
       > (split_part(holder, '/', 2)::integer, split_part(holder, '/', 3)::integer)
    ELSE false
END;
