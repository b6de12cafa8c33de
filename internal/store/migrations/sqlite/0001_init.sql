-- Virga's initial schema (SQLite). Times are INTEGER Unix nanoseconds in UTC;
-- NULL is the zero time. AUTOINCREMENT keeps IDs from ever being reused.

CREATE TABLE experiments (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    name           TEXT    NOT NULL,
    state          TEXT    NOT NULL,
    spec           BLOB,
    spec_file      TEXT    NOT NULL,
    searcher_state BLOB,
    message        TEXT    NOT NULL,
    created_at     INTEGER,
    updated_at     INTEGER,
    ended_at       INTEGER
);
CREATE INDEX experiments_state ON experiments (state, id);

CREATE TABLE trials (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    experiment_id INTEGER NOT NULL REFERENCES experiments (id),
    seq           INTEGER NOT NULL,
    request       TEXT    NOT NULL,
    state         TEXT    NOT NULL,
    hparams       TEXT    NOT NULL,
    attempts      INTEGER NOT NULL,
    restarts      INTEGER NOT NULL,
    step          INTEGER NOT NULL,
    latest        REAL,
    best          REAL,
    best_step     INTEGER NOT NULL,
    checkpoint    TEXT    NOT NULL,
    message       TEXT    NOT NULL,
    created_at    INTEGER,
    updated_at    INTEGER,
    ended_at      INTEGER,
    UNIQUE (experiment_id, seq)
);

CREATE TABLE attempts (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    trial_id   INTEGER NOT NULL REFERENCES trials (id),
    number     INTEGER NOT NULL,
    state      TEXT    NOT NULL,
    outcome    TEXT    NOT NULL,
    backend    TEXT    NOT NULL,
    pid        INTEGER NOT NULL,
    exit_code  INTEGER,
    signal     TEXT    NOT NULL,
    restored   TEXT    NOT NULL,
    dir        TEXT    NOT NULL,
    message    TEXT    NOT NULL,
    created_at INTEGER,
    started_at INTEGER,
    ended_at   INTEGER,
    UNIQUE (trial_id, number)
);
-- LiveAttempts: a partial index holds only the attempts not yet EXITED.
CREATE INDEX attempts_live ON attempts (id) WHERE state <> 'EXITED';

CREATE TABLE metrics (
    trial_id    INTEGER NOT NULL REFERENCES trials (id),
    step        INTEGER NOT NULL,
    attempt_id  INTEGER NOT NULL,
    values_json TEXT    NOT NULL,
    time        INTEGER,
    PRIMARY KEY (trial_id, step)
) WITHOUT ROWID;

CREATE TABLE checkpoints (
    trial_id   INTEGER NOT NULL REFERENCES trials (id),
    id         TEXT    NOT NULL,
    attempt_id INTEGER NOT NULL,
    step       INTEGER NOT NULL,
    size       INTEGER NOT NULL,
    files      INTEGER NOT NULL,
    time       INTEGER,
    PRIMARY KEY (trial_id, id)
);
CREATE INDEX checkpoints_age ON checkpoints (trial_id, time);

CREATE TABLE events (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    experiment_id INTEGER NOT NULL,
    trial_id      INTEGER NOT NULL,
    attempt_id    INTEGER NOT NULL,
    kind          TEXT    NOT NULL,
    message       TEXT    NOT NULL,
    time          INTEGER
);
CREATE INDEX events_experiment ON events (experiment_id, id);
CREATE INDEX events_trial ON events (trial_id, id);

CREATE TABLE tokens (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    name       TEXT    NOT NULL,
    hash       BLOB    NOT NULL UNIQUE,
    created_at INTEGER
);
