-- Cost accounting. pool is the capacity pool an attempt ran on ('' for the
-- backend's default, which every attempt of an older database used); cost is
-- the dollars billed for its run, written when it ends (a running attempt's
-- cost is computed when it is read); lost_cost is the part of cost spent on
-- work a preemption threw away. Older attempts cost nothing.
ALTER TABLE attempts ADD COLUMN pool      TEXT NOT NULL DEFAULT '';
ALTER TABLE attempts ADD COLUMN cost      REAL NOT NULL DEFAULT 0;
ALTER TABLE attempts ADD COLUMN lost_cost REAL NOT NULL DEFAULT 0;
