-- Why a trial is in its state, as a stable word code decides on
-- (virga.Reason: PausingBySearcher, PausedBySearcher, Moving, ...); message
-- keeps the sentence for people and may be reworded by a later release.
ALTER TABLE trials ADD COLUMN reason TEXT NOT NULL DEFAULT '';

-- Rows written before this migration carry the reason only in the
-- message's words: derive it from the exact texts Virga wrote then, so a
-- server upgraded in the middle of an experiment carries on what was in
-- flight (a searcher's pause, a move, a budget stop).
UPDATE trials SET reason = CASE
	WHEN state = 'RUNNING' AND message = 'pausing: the searcher paused it at this step' THEN 'PausingBySearcher'
	WHEN state = 'RUNNING' AND message = 'stopping: the searcher stopped it early' THEN 'StoppingEarly'
	WHEN state = 'RUNNING' AND substr(message, 1, 7) = 'moving ' THEN 'Moving'
	WHEN state = 'PAUSED' AND message = 'paused by the searcher' THEN 'PausedBySearcher'
	WHEN state = 'PAUSED' AND message = 'paused by user' THEN 'PausedByUser'
	WHEN state = 'QUEUED' AND message = 'resumed by user' THEN 'ResumedByUser'
	WHEN state = 'QUEUED' AND message = 'resumed by the searcher' THEN 'ResumedBySearcher'
	WHEN state = 'QUEUED' AND message = 'waiting for capacity' THEN 'WaitingForCapacity'
	WHEN state = 'QUEUED' AND message = 'requeued after a server restart' THEN 'Requeued'
	WHEN state = 'QUEUED' AND substr(message, 1, 16) = 'restarting from ' THEN 'Restarting'
	WHEN state = 'QUEUED' AND substr(message, 1, 15) = 'moved off pool ' THEN 'Moved'
	WHEN state = 'QUEUED' AND substr(message, 1, 11) = 'preempted: ' THEN 'Preempted'
	WHEN state = 'COMPLETED' THEN 'Succeeded'
	WHEN state = 'STOPPED' AND message = 'stopped early by the searcher' THEN 'StoppedEarly'
	WHEN state = 'STOPPED' AND message = 'stopped by user' THEN 'StoppedByUser'
	WHEN state = 'STOPPED' AND message = 'stopped: the experiment''s budget is spent' THEN 'BudgetSpent'
	WHEN state = 'STOPPED' AND message = 'not promoted by the searcher' THEN 'NotPromoted'
	WHEN state = 'FAILED' AND substr(message, 1, 7) = 'failed ' THEN 'RestartsExhausted'
	WHEN state = 'FAILED' AND substr(message, 1, 10) = 'preempted ' THEN 'PreemptedWithoutProgress'
	ELSE ''
END;

-- An experiment's reason was written only once it ended (migration 0005):
-- a paused or stopping one, and a stopped one of an older database, get
-- theirs from the words of its message.
UPDATE experiments SET reason = CASE
	WHEN substr(message, 1, 7) = 'budget ' THEN 'BudgetSpent'
	WHEN state = 'PAUSED' THEN 'PausedByUser'
	ELSE 'StoppedByUser'
END
WHERE reason = '' AND state IN ('PAUSED', 'STOPPING', 'STOPPED');
