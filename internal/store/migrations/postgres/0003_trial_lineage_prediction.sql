-- Trial lineage and learning-curve predictions. parent is the ID of the trial
-- whose checkpoint parent_checkpoint, taken at parent_step, this trial's first
-- attempt restored (population based training); 0 (and '', 0) for a trial that
-- started from scratch, which every trial of an older database did. No
-- foreign key: 0 means no parent. prediction is the searcher's latest
-- forecast of the trial's objective as JSON text, like hparams (see
-- internal/store/column), NULL when there is none. Constant defaults, so
-- PostgreSQL adds the columns without rewriting the table.
ALTER TABLE trials
    ADD COLUMN parent            BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN parent_checkpoint TEXT   NOT NULL DEFAULT '',
    ADD COLUMN parent_step       BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN prediction        TEXT;
