-- No change in PostgreSQL: SQLite's migration 0002 adds metric_log, a write
-- log of the SQLite store alone (see internal/store/sqlite). This migration
-- keeps both dialects at the same schema version.
SELECT 1;
