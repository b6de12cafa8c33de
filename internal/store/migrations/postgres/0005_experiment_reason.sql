-- Why an experiment ended, as a stable word code decides on (virga.ExperimentReason:
-- SearchFinished, AllTrialsFailed, NoObjectiveReported, ...); message keeps
-- the sentence for people. Experiments of an older database have none.
ALTER TABLE experiments ADD COLUMN reason TEXT NOT NULL DEFAULT '';
