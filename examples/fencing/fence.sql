-- The fence of docs/fencing.md, for PostgreSQL: install it once, in the
-- database whose writes it guards.

-- The largest fencing token seen for each lock name. numeric(20, 0): a
-- token is a uint64, and bigint stops at 2^63 - 1.
CREATE TABLE IF NOT EXISTS monolock_fence (
    name  text PRIMARY KEY,
    token numeric(20, 0) NOT NULL CHECK (token BETWEEN 0 AND 18446744073709551615)
);

-- CALL monolock_fence(name, token) records token for name when it is at
-- least the largest seen, and otherwise raises SQLSTATE ML001, which
-- aborts the transaction it runs in: every write of that transaction is
-- rolled back, and COMMIT can only roll back. Call it in the transaction
-- of the write it guards, before the write: the fence's row stays locked
-- until that transaction ends, so another holder's check waits for it.
CREATE OR REPLACE PROCEDURE monolock_fence(lock_name text, lock_token numeric)
LANGUAGE plpgsql AS $$
DECLARE
    seen numeric;
BEGIN
    INSERT INTO monolock_fence AS f (name, token) VALUES (lock_name, lock_token)
    ON CONFLICT (name) DO UPDATE SET token = EXCLUDED.token
        WHERE f.token <= EXCLUDED.token;
    IF NOT FOUND THEN
        SELECT f.token INTO seen FROM monolock_fence AS f WHERE f.name = lock_name;
        RAISE EXCEPTION 'stale fencing token % for lock %: % was seen', lock_token, lock_name, seen
            USING ERRCODE = 'ML001';
    END IF;
END
$$;
