-- metric_log: metrics in arrival order, merged into metrics in bulk by the
-- store (see internal/store/sqlite). A group commit of reports from many
-- trials then appends to one or two pages of this table instead of dirtying
-- one leaf page of metrics per trial. seq is the arrival order; a row here
-- is always newer than the row of the same (trial_id, step) in metrics, and
-- of several rows here of one (trial_id, step) the highest seq wins.
-- No index besides seq: an index on (trial_id, step) would put back the
-- scattered page writes this table exists to avoid; the table stays small
-- (the store merges it every few thousand rows), so a read scans it.
CREATE TABLE metric_log (
    seq         INTEGER PRIMARY KEY,
    trial_id    INTEGER NOT NULL REFERENCES trials (id),
    step        INTEGER NOT NULL,
    attempt_id  INTEGER NOT NULL,
    values_json TEXT    NOT NULL,
    time        INTEGER
);
