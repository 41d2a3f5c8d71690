-- The guarded write of the psql recipe in docs/fencing.md. Run it under
-- monolock run, in one transaction that stops at the first error:
--   psql -X -q -v ON_ERROR_STOP=1 --single-transaction \
--     -v name="$MONOLOCK_NAME" -v token="$MONOLOCK_TOKEN" -v body=... -f write-report.sql
CALL monolock_fence(:'name', :'token');
INSERT INTO report (id, body, token) VALUES (1, :'body', :'token')
    ON CONFLICT (id) DO UPDATE SET body = EXCLUDED.body, token = EXCLUDED.token;
